/**
 * A reader for the small TOML subset of Gnomon's client config file: comments, `key = value` with
 * basic/literal strings, booleans and integers, and tables (`[profiles.dev]`, `[profiles."my dev"]`).
 * Anything else (arrays, inline tables, dates, multi-line strings) is refused with an error naming
 * the line.
 */

/** A parsed document: nested tables of strings, booleans and numbers. */
export interface TomlTable {
  [key: string]: string | boolean | number | TomlTable;
}

function parseKey(text: string, line: number): string[] {
  const parts: string[] = [];
  let i = 0;
  const s = text.trim();
  while (i < s.length) {
    while (s[i] === " " || s[i] === "\t") i++;
    if (s[i] === '"' || s[i] === "'") {
      const q = s[i];
      const end = s.indexOf(q, i + 1);
      if (end < 0) throw new Error(`line ${line}: unterminated key`);
      parts.push(s.slice(i + 1, end));
      i = end + 1;
    } else {
      const m = /^[A-Za-z0-9_-]+/.exec(s.slice(i));
      if (!m) throw new Error(`line ${line}: bad key ${JSON.stringify(s)}`);
      parts.push(m[0]);
      i += m[0].length;
    }
    while (s[i] === " " || s[i] === "\t") i++;
    if (i < s.length) {
      if (s[i] !== ".") throw new Error(`line ${line}: bad key ${JSON.stringify(s)}`);
      i++;
    }
  }
  if (!parts.length) throw new Error(`line ${line}: empty key`);
  return parts;
}

const ESCAPES: Record<string, string> = { b: "\b", t: "\t", n: "\n", f: "\f", r: "\r", '"': '"', "\\": "\\" };

function parseValue(text: string, line: number): string | boolean | number {
  const s = text.trim();
  if (s.startsWith('"')) {
    let out = "";
    let i = 1;
    while (i < s.length && s[i] !== '"') {
      if (s[i] === "\\") {
        const c = s[i + 1];
        if (c === "u" || c === "U") {
          const n = c === "u" ? 4 : 8;
          out += String.fromCodePoint(parseInt(s.slice(i + 2, i + 2 + n), 16));
          i += 2 + n;
          continue;
        }
        if (!(c in ESCAPES)) throw new Error(`line ${line}: bad escape \\${c}`);
        out += ESCAPES[c];
        i += 2;
      } else out += s[i++];
    }
    if (s[i] !== '"') throw new Error(`line ${line}: unterminated string`);
    rest(s.slice(i + 1), line);
    return out;
  }
  if (s.startsWith("'")) {
    const end = s.indexOf("'", 1);
    if (end < 0) throw new Error(`line ${line}: unterminated string`);
    rest(s.slice(end + 1), line);
    return s.slice(1, end);
  }
  const bare = s.replace(/\s*#.*$/, "");
  if (bare === "true") return true;
  if (bare === "false") return false;
  if (/^[+-]?\d[\d_]*$/.test(bare)) return Number(bare.replace(/_/g, ""));
  throw new Error(`line ${line}: unsupported value ${JSON.stringify(s)}`);
}

function rest(s: string, line: number): void {
  const t = s.trim();
  if (t && !t.startsWith("#")) throw new Error(`line ${line}: unexpected ${JSON.stringify(t)}`);
}

function tableAt(root: TomlTable, keys: string[], line: number): TomlTable {
  let t = root;
  for (const k of keys) {
    const v = t[k];
    if (v === undefined) t = t[k] = {};
    else if (typeof v === "object") t = v;
    else throw new Error(`line ${line}: ${k} is not a table`);
  }
  return t;
}

/** Parses `text`; throws `Error("line N: ...")` on anything outside the subset. */
export function parseToml(text: string): TomlTable {
  const root: TomlTable = {};
  let current = root;
  text.split(/\r?\n/).forEach((raw, idx) => {
    const line = idx + 1;
    const s = raw.trim();
    if (!s || s.startsWith("#")) return;
    if (s.startsWith("[")) {
      if (s.startsWith("[[")) throw new Error(`line ${line}: arrays of tables are not supported`);
      const end = s.lastIndexOf("]");
      if (end < 0) throw new Error(`line ${line}: bad table header`);
      rest(s.slice(end + 1), line);
      current = tableAt(root, parseKey(s.slice(1, end), line), line);
      return;
    }
    const eq = findEquals(s);
    if (eq < 0) throw new Error(`line ${line}: expected key = value`);
    const keys = parseKey(s.slice(0, eq), line);
    const table = tableAt(current, keys.slice(0, -1), line);
    table[keys[keys.length - 1]] = parseValue(s.slice(eq + 1), line);
  });
  return root;
}

function findEquals(s: string): number {
  let q: string | null = null;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (q) {
      if (c === q) q = null;
    } else if (c === '"' || c === "'") q = c;
    else if (c === "=") return i;
  }
  return -1;
}
