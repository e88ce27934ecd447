/**
 * Where and how the SDK connects: the address, namespace, TLS material and API key of the Gnomon
 * API, resolved exactly like the Python SDK (gnomon.sdk.connection). Each setting is taken from, in
 * order: an explicit option, else an environment variable, else the selected profile of the
 * client config file, else the default:
 *
 * - address: `GNOMON_API`, profile `address`, default `127.0.0.1:7070`;
 * - namespace: `GNOMON_NAMESPACE`, profile `namespace`, default `default`;
 * - CA bundle: `GNOMON_TLS_CA_FILE`, profile `ca_file`, default the system roots;
 * - client certificate (mTLS): `GNOMON_CLIENT_CERT_FILE` / `GNOMON_CLIENT_KEY_FILE`, profile
 *   `client_cert_file` / `client_key_file`;
 * - API key: `GNOMON_API_KEY`, then `GNOMON_API_KEY_FILE`, profile `api_key`, then `api_key_file`;
 * - TLS server name: `GNOMON_TLS_SERVER_NAME`, profile `server_name`, default the address's host;
 * - plaintext: `GNOMON_INSECURE`, profile `insecure`, default false.
 *
 * The config file is `GNOMON_CONFIG_FILE`, else `$XDG_CONFIG_HOME/gnomon/config.toml` (default
 * `~/.config/gnomon/config.toml`); the profile is the explicit one, else `GNOMON_PROFILE`, else the
 * file's `current` key, else `default`. A missing file is no error; a profile asked for by name
 * that the file lacks is. Relative paths in a profile are relative to the file. A connection is TLS
 * unless `insecure`; the API key travels as `authorization: Bearer <key>` call metadata, over TLS only.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { parseToml, type TomlTable } from "./toml";

export const DEFAULT_ADDRESS = "127.0.0.1:7070";
export const DEFAULT_NAMESPACE = "default";

/** Explicit connection settings (each overrides the environment and the profile). */
export interface ConnectionOptions {
  /** `host:port` of the API. */
  api?: string;
  /** Namespace id (`namespaces/` prefix accepted). */
  namespace?: string;
  apiKey?: string;
  caFile?: string;
  clientCertFile?: string;
  clientKeyFile?: string;
  serverName?: string;
  insecure?: boolean;
  profile?: string;
  configFile?: string;
  /** Environment to read instead of `process.env` (tests). */
  env?: Record<string, string | undefined>;
}

/** A resolved connection. `apiKey` is the key itself (read from `api_key_file` when that was the
 * source); `profile` the profile read (null: none); `configFile` the file looked at. */
export interface Connection {
  address: string;
  namespace: string;
  caFile: string | null;
  clientCertFile: string | null;
  clientKeyFile: string | null;
  apiKey: string | null;
  serverName: string | null;
  insecure: boolean;
  profile: string | null;
  configFile: string;
}

const ENV: Record<string, string> = {
  address: "GNOMON_API",
  namespace: "GNOMON_NAMESPACE",
  ca_file: "GNOMON_TLS_CA_FILE",
  client_cert_file: "GNOMON_CLIENT_CERT_FILE",
  client_key_file: "GNOMON_CLIENT_KEY_FILE",
  api_key: "GNOMON_API_KEY",
  api_key_file: "GNOMON_API_KEY_FILE",
  server_name: "GNOMON_TLS_SERVER_NAME",
};
const PATHS = ["ca_file", "client_cert_file", "client_key_file", "api_key_file"];
const KEYS = [...Object.keys(ENV), "insecure"];
const TRUE = new Set(["1", "true", "yes", "on"]);
const FALSE = new Set(["0", "false", "no", "off", ""]);

function bool(name: string, value: unknown): boolean {
  if (typeof value === "boolean") return value;
  const t = String(value).trim().toLowerCase();
  if (TRUE.has(t)) return true;
  if (FALSE.has(t)) return false;
  throw new Error(`${name} must be true or false, got ${JSON.stringify(value)}`);
}

function expandHome(p: string): string {
  return p === "~" || p.startsWith("~/") ? path.join(os.homedir(), p.slice(1)) : p;
}

/** The client config file path for an environment (see the module comment). */
export function configPath(env: Record<string, string | undefined> = process.env): string {
  if (env.GNOMON_CONFIG_FILE) return expandHome(env.GNOMON_CONFIG_FILE);
  const base = env.XDG_CONFIG_HOME || path.join(os.homedir(), ".config");
  return path.join(base, "gnomon", "config.toml");
}

/** The parsed config file (`{}` if it does not exist). Throws naming the file on invalid content. */
export function loadConfig(file: string): TomlTable {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return {};
    throw e;
  }
  let data: TomlTable;
  try {
    data = parseToml(text);
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message}`);
  }
  const profiles = data.profiles ?? {};
  if (typeof profiles !== "object" || !Object.values(profiles).every((v) => typeof v === "object")) {
    throw new Error(`${file}: 'profiles' must hold tables, e.g. [profiles.dev]`);
  }
  return data;
}

/**
 * Resolves a {@link Connection} from explicit options, the environment and the config file.
 * Throws for an unknown profile asked for by name, an unknown key in a profile, a bad boolean,
 * an invalid config file, or an unreadable `api_key_file`.
 */
export function resolveConnection(opts: ConnectionOptions = {}): Connection {
  const env = opts.env ?? process.env;
  const file = opts.configFile ? path.resolve(expandHome(opts.configFile)) : configPath(env);
  const data = loadConfig(file);
  const profiles = (data.profiles ?? {}) as Record<string, TomlTable>;
  const wanted = opts.profile || env.GNOMON_PROFILE || null;
  const name = wanted || String(data.current || "default");
  if (wanted && !(name in profiles)) {
    const known = Object.keys(profiles).sort().join(", ") || "none";
    throw new Error(`no profile ${JSON.stringify(name)} in ${file} (profiles: ${known})`);
  }
  const values: Record<string, unknown> = { ...(profiles[name] ?? {}) };
  const unknown = Object.keys(values).filter((k) => !KEYS.includes(k)).sort();
  if (unknown.length) {
    throw new Error(`${file}: profile ${JSON.stringify(name)}: unknown key(s) ${unknown.join(", ")} (known: ${KEYS.join(", ")})`);
  }
  for (const k of PATHS) {
    if (values[k]) values[k] = path.resolve(path.dirname(file), expandHome(String(values[k])));
  }
  const explicit: Record<string, string | undefined> = {
    address: opts.api,
    namespace: opts.namespace,
    api_key: opts.apiKey,
    ca_file: opts.caFile,
    client_cert_file: opts.clientCertFile,
    client_key_file: opts.clientKeyFile,
    server_name: opts.serverName,
  };
  const got: Record<string, string> = {};
  for (const [key, v] of Object.entries(ENV)) {
    for (const c of [explicit[key], env[v] || undefined, values[key]]) {
      if (c) {
        got[key] = String(c);
        break;
      }
    }
  }
  delete got.api_key;
  delete got.api_key_file;
  const sources: [string, unknown][] = [
    ["api_key", opts.apiKey],
    ["api_key", env.GNOMON_API_KEY],
    ["api_key_file", env.GNOMON_API_KEY_FILE],
    ["api_key", values.api_key],
    ["api_key_file", values.api_key_file],
  ];
  const found = sources.find(([, v]) => v);
  const insecure =
    opts.insecure !== undefined ? opts.insecure : bool("insecure (GNOMON_INSECURE)", env.GNOMON_INSECURE || values.insecure || false);
  let apiKey: string | null = null;
  if (found && found[0] === "api_key") apiKey = String(found[1]).trim();
  else if (found && !insecure) apiKey = fs.readFileSync(String(found[1]), "utf8").trim() || null;
  let namespace = got.namespace ?? DEFAULT_NAMESPACE;
  if (namespace.startsWith("namespaces/")) namespace = namespace.slice("namespaces/".length);
  return {
    address: got.address ?? DEFAULT_ADDRESS,
    namespace,
    caFile: got.ca_file ?? null,
    clientCertFile: got.client_cert_file ?? null,
    clientKeyFile: got.client_key_file ?? null,
    apiKey,
    serverName: got.server_name ?? null,
    insecure,
    profile: name in profiles ? name : null,
    configFile: file,
  };
}

/** gRPC channel credentials of a connection: TLS (CA, optional client certificate) composed with
 * the API key as `authorization: Bearer <key>`; plaintext when `insecure` (no key is sent). */
export function channelCredentials(c: Connection): grpc.ChannelCredentials {
  if (c.insecure) return grpc.credentials.createInsecure();
  if (Boolean(c.clientCertFile) !== Boolean(c.clientKeyFile)) {
    throw new Error("a client certificate needs its key: set both client_cert_file and client_key_file");
  }
  const tls = grpc.credentials.createSsl(
    c.caFile ? fs.readFileSync(c.caFile) : null,
    c.clientKeyFile ? fs.readFileSync(c.clientKeyFile) : null,
    c.clientCertFile ? fs.readFileSync(c.clientCertFile) : null,
  );
  if (!c.apiKey) return tls;
  const header = `Bearer ${c.apiKey}`;
  const call = grpc.credentials.createFromMetadataGenerator((_params, cb) => {
    const md = new grpc.Metadata();
    md.set("authorization", header);
    cb(null, md);
  });
  return grpc.credentials.combineChannelCredentials(tls, call);
}

/** Channel options a connection needs (the TLS server name override, if any), plus `extra`. */
export function channelOptions(c: Connection, extra: grpc.ChannelOptions = {}): grpc.ChannelOptions {
  const opts: grpc.ChannelOptions = { ...extra };
  if (c.serverName && !c.insecure) {
    opts["grpc.ssl_target_name_override"] = c.serverName;
    opts["grpc.default_authority"] = c.serverName;
  }
  return opts;
}
