#!/usr/bin/env node
// Copies the contract from the repository's `proto/` directory into this package's `proto/` (so that
// `npm pack` is self-contained and the runtime loads exactly the protos the types were generated
// from). Copied: every `gnomon/v1/*.proto` and the repository's `proto/google/` tree (the `google.rpc`
// protos decode every error detail). When the repository does not ship `proto/google/rpc`, the three
// files needed are taken from the `googleapis-common-protos` Python package in the repository's
// `.venv` (same files, Apache-2.0), or from $GNOMON_GOOGLE_PROTO_DIR.
// Then generates the TypeScript types of every copied file into `src/gen/` with
// `proto-loader-gen-types` (the only place message shapes come from: a proto change is a rebuild).
// Usage: node scripts/gen.js   (`npm run build` calls it).
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const pkg = path.resolve(__dirname, "..");
const repoProto = path.resolve(pkg, "..", "..", "proto");
const out = path.join(pkg, "proto");

function copyTree(src, dst, filter) {
  fs.mkdirSync(dst, { recursive: true });
  for (const entry of fs.readdirSync(src, { withFileTypes: true })) {
    const s = path.join(src, entry.name);
    const d = path.join(dst, entry.name);
    if (entry.isDirectory()) copyTree(s, d, filter);
    else if (filter(entry.name)) fs.copyFileSync(s, d);
  }
}

function venvGoogle() {
  if (process.env.GNOMON_GOOGLE_PROTO_DIR) return process.env.GNOMON_GOOGLE_PROTO_DIR;
  const lib = path.resolve(pkg, "..", "..", ".venv", "lib");
  if (!fs.existsSync(lib)) return null;
  for (const py of fs.readdirSync(lib)) {
    const g = path.join(lib, py, "site-packages", "google");
    if (fs.existsSync(path.join(g, "rpc", "status.proto"))) return g;
  }
  return null;
}

if (!fs.existsSync(path.join(repoProto, "gnomon", "v1"))) {
  console.error(`protos: ${repoProto}/gnomon/v1 not found (run from a Gnomon checkout)`);
  process.exit(1);
}
fs.rmSync(out, { recursive: true, force: true });
const isProto = (n) => n.endsWith(".proto");
copyTree(path.join(repoProto, "gnomon", "v1"), path.join(out, "gnomon", "v1"), isProto);
let googleSrc = path.join(repoProto, "google");
if (fs.existsSync(path.join(googleSrc, "rpc", "status.proto"))) {
  // the repository ships google/rpc and google/api: take all of it, with its licence files
  copyTree(googleSrc, path.join(out, "google"), (n) => isProto(n) || /^(LICENSE|NOTICE|README)/.test(n));
} else {
  googleSrc = venvGoogle();
  if (!googleSrc) {
    console.error("protos: no google/rpc protos in proto/ nor in .venv (run scripts/bootstrap first)");
    process.exit(1);
  }
  for (const rel of ["rpc/status.proto", "rpc/error_details.proto", "rpc/code.proto"]) {
    const d = path.join(out, "google", rel);
    fs.mkdirSync(path.dirname(d), { recursive: true });
    fs.copyFileSync(path.join(googleSrc, rel), d);
  }
}
console.log(`protos: copied ${repoProto} -> ${out} (google/rpc from ${googleSrc})`);

const files = [];
(function walk(dir) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) walk(p);
    else if (isProto(entry.name)) files.push(path.relative(out, p));
  }
})(out);
files.sort();
const genDir = path.join(pkg, "src", "gen");
fs.rmSync(genDir, { recursive: true, force: true });
const { execFileSync } = require("node:child_process");
const bin = require.resolve("@grpc/proto-loader/build/bin/proto-loader-gen-types.js");
execFileSync(
  process.execPath,
  [bin, "--grpcLib=@grpc/grpc-js", "--longs=String", "--enums=String", "--defaults", "--oneofs",
   "--bytes=Buffer", "--includeComments", "-I", out, "-O", genDir, ...files],
  { stdio: "inherit" },
);
console.log(`gen: ${files.length} proto files -> ${genDir}`);
