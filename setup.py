"""Maps the architecture-shaped tree onto import names (see CONVENTIONS.md).

services/api -> gnomon.api, services/dispatcher -> gnomon.dispatcher, libs/common -> gnomon.common,
libs/sdk -> gnomon.sdk, libs/cli -> gnomon.cli, libs/_proto -> gnomon._proto (generated code).
"""
import os

from setuptools import setup

ROOTS = {
    "gnomon": "libs/gnomon",
    "gnomon.common": "libs/common",
    "gnomon.sdk": "libs/sdk",
    "gnomon.cli": "libs/cli",
    "gnomon._proto": "libs/_proto",
    "gnomon.api": "services/api",
    "gnomon.planner": "services/planner",
    "gnomon.dispatcher": "services/dispatcher",
    "gnomon.reaper": "services/reaper",
}


def _packages():
    pkgs, dirs = [], {}
    for name, path in ROOTS.items():
        for here, subdirs, files in os.walk(path):
            subdirs[:] = [d for d in subdirs if not d.startswith((".", "__"))]
            if "__init__.py" not in files:
                continue
            rel = os.path.relpath(here, path)
            pkg = name if rel == "." else name + "." + rel.replace(os.sep, ".")
            pkgs.append(pkg)
            dirs[pkg] = here
    return pkgs, dirs


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir,
      package_data={"gnomon.common.storage.migrations": ["*.mako"]})
