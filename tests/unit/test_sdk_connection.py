"""gnomon.sdk.connection: which setting wins (argument > environment > profile > default), how the
profile is chosen, relative paths, the API key file, and writing profiles without losing others."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import grpc
import pytest

from gnomon.sdk.connection import Connection, config_path, resolve, write_profile

CONFIG = """
current = "staging"

[profiles.staging]
address = "staging.example:443"
namespace = "team-a"
ca_file = "certs/ca.pem"
api_key_file = "staging.key"

[profiles.local]
address = "127.0.0.1:7070"
insecure = true
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gnomon" / "config.toml"
    path.parent.mkdir()
    path.write_text(CONFIG)
    (path.parent / "staging.key").write_text("gnk_00000000000000aa_from-profile-file\n")
    return path


def test_the_current_profile_fills_what_nothing_else_gives(config: Path) -> None:
    c = resolve(environ={"GNOMON_CONFIG_FILE": str(config)})
    assert (c.address, c.namespace, c.profile, c.insecure) == (
        "staging.example:443",
        "team-a",
        "staging",
        False,
    )
    assert c.ca_file == str(config.parent / "certs" / "ca.pem")  # relative to the file
    assert c.api_key == "gnk_00000000000000aa_from-profile-file"  # read from the key file, stripped


def test_environment_beats_the_profile_and_arguments_beat_both(config: Path, tmp_path: Path) -> None:
    env = {
        "GNOMON_CONFIG_FILE": str(config),
        "GNOMON_API": "env.example:7070",
        "GNOMON_NAMESPACE": "from-env",
        "GNOMON_API_KEY": "gnk_00000000000000bb_from-env",
        "GNOMON_TLS_CA_FILE": "/env/ca.pem",
    }
    c = resolve(environ=env)
    assert (c.address, c.namespace, c.api_key, c.ca_file) == (
        "env.example:7070",
        "from-env",
        "gnk_00000000000000bb_from-env",
        "/env/ca.pem",
    )
    c = resolve("arg.example:1", "namespaces/from-arg", api_key="gnk_00000000000000cc_arg", environ=env)
    assert (c.address, c.namespace, c.api_key) == ("arg.example:1", "from-arg", "gnk_00000000000000cc_arg")
    # a key file in the environment beats a key in the profile
    key = tmp_path / "env.key"
    key.write_text("gnk_00000000000000dd_env-file")
    c = resolve(environ={"GNOMON_CONFIG_FILE": str(config), "GNOMON_API_KEY_FILE": str(key)})
    assert c.api_key == "gnk_00000000000000dd_env-file"


def test_the_profile_is_chosen_by_argument_then_variable_then_current(config: Path) -> None:
    env = {"GNOMON_CONFIG_FILE": str(config), "GNOMON_PROFILE": "local"}
    assert resolve(environ=env).profile == "local"
    assert resolve(environ=env).insecure is True
    assert resolve(profile="staging", environ=env).profile == "staging"
    with pytest.raises(ValueError, match="no profile 'prod'.*local, staging"):
        resolve(profile="prod", environ=env)
    # insecure from the environment overrides the profile's, both ways
    assert resolve(environ={**env, "GNOMON_INSECURE": "false"}).insecure is False
    assert resolve(insecure=False, environ=env).insecure is False


def test_no_file_means_defaults_and_tls(tmp_path: Path) -> None:
    c = resolve(environ={"GNOMON_CONFIG_FILE": str(tmp_path / "missing.toml")})
    assert c == Connection(config_file=str(tmp_path / "missing.toml"))
    assert (c.address, c.namespace, c.insecure, c.profile) == ("127.0.0.1:7070", "default", False, None)
    assert isinstance(c.credentials(), grpc.ChannelCredentials)  # TLS with the system roots
    assert Connection(insecure=True).credentials() is None


def test_the_default_file_follows_xdg_config_home(tmp_path: Path) -> None:
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "gnomon" / "config.toml"
    assert config_path({"GNOMON_CONFIG_FILE": "/x/y.toml", "XDG_CONFIG_HOME": "/z"}) == Path("/x/y.toml")
    assert config_path({}) == Path(os.path.expanduser("~/.config/gnomon/config.toml"))


def test_mistakes_in_the_file_are_named(config: Path) -> None:
    config.write_text('[profiles.bad]\naddres = "x:1"\n')
    with pytest.raises(ValueError, match="unknown key.*addres"):
        resolve(profile="bad", config_file=str(config))
    config.write_text("[profiles.bad\n")
    with pytest.raises(ValueError, match=str(config)):
        resolve(config_file=str(config))
    config.write_text('[profiles.x]\ninsecure = "maybe"\n')
    with pytest.raises(ValueError, match="true or false"):
        resolve(profile="x", config_file=str(config))


def test_write_profile_merges_and_makes_it_current(config: Path) -> None:
    write_profile(config, "dev", {"address": "127.0.0.1:9", "ca_file": "/d/ca.pem", "api_key_file": "/d/k"})
    data = tomllib.loads(config.read_text())
    assert data["current"] == "dev"
    assert set(data["profiles"]) == {"staging", "local", "dev"}
    assert data["profiles"]["local"] == {"address": "127.0.0.1:7070", "insecure": True}
    assert data["profiles"]["dev"] == {
        "address": "127.0.0.1:9",
        "ca_file": "/d/ca.pem",
        "api_key_file": "/d/k",
    }
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    write_profile(config, "other", {"address": 'quote"d:1'}, make_current=False)
    data = tomllib.loads(config.read_text())
    assert data["current"] == "dev" and data["profiles"]["other"]["address"] == 'quote"d:1'
    with pytest.raises(ValueError, match="unknown profile key"):
        write_profile(config, "x", {"adress": "a"})


def test_a_new_file_is_created_with_its_directory(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "config.toml"
    write_profile(path, "dev", {"address": "127.0.0.1:1", "insecure": True})
    c = resolve(config_file=str(path), environ={})
    assert (c.profile, c.address, c.insecure) == ("dev", "127.0.0.1:1", True)
