// Unit tests: connection settings resolve as in the Python SDK (option > environment > profile >
// default), and the config file subset of TOML.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { resolveConnection } from "../src/connection";
import { parseToml } from "../src/toml";

function configFile(text: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gnomon-ts-"));
  const file = path.join(dir, "config.toml");
  fs.writeFileSync(file, text);
  fs.writeFileSync(path.join(dir, "admin.key"), "gnk_fromfile\n");
  return file;
}

const PROFILES = `# comment
current = "dev"

[profiles.dev]
address = "dev.example:7070"
namespace = "namespaces/team"
ca_file = "ca.pem"
api_key_file = "admin.key"

[profiles."other"]
address = 'other:1'
insecure = true
`;

test("defaults without a file or variables", () => {
  const c = resolveConnection({ env: { GNOMON_CONFIG_FILE: "/nonexistent/config.toml" } });
  assert.equal(c.address, "127.0.0.1:7070");
  assert.equal(c.namespace, "default");
  assert.equal(c.insecure, false);
  assert.equal(c.apiKey, null);
  assert.equal(c.profile, null);
});

test("the current profile; relative paths are relative to the file; the key file is read", () => {
  const file = configFile(PROFILES);
  const c = resolveConnection({ env: { GNOMON_CONFIG_FILE: file } });
  assert.equal(c.profile, "dev");
  assert.equal(c.address, "dev.example:7070");
  assert.equal(c.namespace, "team");
  assert.equal(c.caFile, path.join(path.dirname(file), "ca.pem"));
  assert.equal(c.apiKey, "gnk_fromfile");
});

test("environment beats the profile, options beat the environment", () => {
  const file = configFile(PROFILES);
  const env = { GNOMON_CONFIG_FILE: file, GNOMON_API: "env:1", GNOMON_API_KEY: "gnk_env", GNOMON_NAMESPACE: "envns" };
  const c = resolveConnection({ env });
  assert.deepEqual([c.address, c.apiKey, c.namespace], ["env:1", "gnk_env", "envns"]);
  const o = resolveConnection({ env, api: "opt:2", apiKey: "gnk_opt", namespace: "optns" });
  assert.deepEqual([o.address, o.apiKey, o.namespace], ["opt:2", "gnk_opt", "optns"]);
});

test("GNOMON_PROFILE selects a profile; an unknown one is an error; insecure reads no key file", () => {
  const file = configFile(PROFILES);
  const c = resolveConnection({ env: { GNOMON_CONFIG_FILE: file, GNOMON_PROFILE: "other" } });
  assert.equal(c.address, "other:1");
  assert.equal(c.insecure, true);
  assert.throws(() => resolveConnection({ env: { GNOMON_CONFIG_FILE: file }, profile: "nope" }), /no profile "nope"/);
  const i = resolveConnection({ env: { GNOMON_CONFIG_FILE: file, GNOMON_INSECURE: "true" } });
  assert.equal(i.insecure, true);
  assert.equal(i.apiKey, null);
  assert.throws(() => resolveConnection({ env: { GNOMON_CONFIG_FILE: file, GNOMON_INSECURE: "maybe" } }), /true or false/);
});

test("unknown profile keys are refused", () => {
  const file = configFile('[profiles.default]\naddres = "x"\n');
  assert.throws(() => resolveConnection({ env: { GNOMON_CONFIG_FILE: file } }), /unknown key\(s\) addres/);
});

test("the TOML subset", () => {
  assert.deepEqual(parseToml('a = "x\\ty" # c\n[t.u]\nb = 12\nc = false\n'), { a: "x\ty", t: { u: { b: 12, c: false } } });
  assert.throws(() => parseToml("a = [1, 2]"), /line 1/);
});
