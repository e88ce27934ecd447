#!/usr/bin/env bash
# Enqueue beside pgqueuer 1.6, in one run, on one throwaway durable PostgreSQL (the issue "faster than
# the fastest peer" asks BatchCreateJobs >= pgqueuer's batched enqueue in the same run). Run from the
# project's root after ../shared/peers/compare.sh has made the peer's venv:
#
#   bench/compare_enqueue.sh [RUNS] [JOBS]     # default 3 runs of 20,000 jobs
#
# Per run, interleaved: pgqueuer batched (its enqueue of 1,000 jobs per call, one connection), pgqueuer
# one per call, then Gnomon (bench.drain: BatchCreateJobs of 500, 4 calls in flight, over TLS with an
# API key; and 2,000 CreateJob calls, 64 in flight). Prints each run and the median ratios.
set -u
RUNS=${1:-3}; JOBS=${2:-20000}
PEERS=${PEERS:-$(cd "$(dirname "$0")/../../shared/peers" 2>/dev/null && pwd)}
[ -n "$PEERS" ] && [ -f "$PEERS/peer_pgqueuer.py" ] || { echo "no ../shared/peers (set PEERS=)"; exit 1; }
COMPARE_HOME=${COMPARE_HOME:-${TMPDIR:-/tmp}/gnomon-compare}
PV="$COMPARE_HOME/peer-venv"; PY=${GNOMON_PYTHON:-.venv/bin/python}
[ -x "$PV/bin/python" ] || { echo "no peer venv: run ../shared/peers/compare.sh 1 once first"; exit 1; }
[ -n "${PGBIN:-}" ] || PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
export PGBIN SCRATCH="$COMPARE_HOME/pg" PG_PORT=${PG_PORT:-55442}
bash "$PEERS/services.sh" stop >/dev/null 2>&1
REDIS_PORT=56399 bash "$PEERS/services.sh" start >"$COMPARE_HOME/services.log" 2>&1 || { echo "could not start PostgreSQL"; exit 1; }
trap 'bash "$PEERS/services.sh" stop >/dev/null 2>&1' EXIT
export BENCH_DSN="postgresql://postgres@127.0.0.1:$PG_PORT/postgres"
out=$(mktemp)
for r in $(seq 1 "$RUNS"); do
  psql "$BENCH_DSN" -qc 'DROP DATABASE IF EXISTS gnomon_bench WITH (FORCE)' -c 'CREATE DATABASE gnomon_bench' >/dev/null 2>&1
  pb=$(cd "$PEERS" && "$PV/bin/python" peer_pgqueuer.py --jobs "$JOBS" --workers 2 --runs 1 --enqueue batch 2>/dev/null | grep '"run"' | tail -n 1)
  ps=$(cd "$PEERS" && "$PV/bin/python" peer_pgqueuer.py --jobs 2000 --workers 2 --runs 1 --enqueue single 2>/dev/null | grep '"run"' | tail -n 1)
  g=$("$PY" -m bench.drain --jobs "$JOBS" --workers 2 --runs 1 --lag-seconds 0 \
      --dsn "postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/gnomon_bench" 2>/dev/null | grep '"run"' | tail -n 1)
  [ -n "$pb" ] && [ -n "$ps" ] && [ -n "$g" ] || { echo "run $r: a side printed no run line"; exit 1; }
  python3 - "$pb" "$ps" "$g" "$r" <<'PY' | tee -a "$out"
import json, sys
pb, ps, g = (json.loads(a) for a in sys.argv[1:4])
r = sys.argv[4]
b, s = g["enqueue_jobs_per_s"] / pb["enqueue_jobs_per_s"], g["enqueue_single_jobs_per_s"] / ps["enqueue_jobs_per_s"]
print(f"{b:.3f} {s:.3f} run {r}: batched gnomon {g['enqueue_jobs_per_s']:.0f}/s vs pgqueuer {pb['enqueue_jobs_per_s']:.0f}/s = {b:.2f}x; "
      f"one per call gnomon {g['enqueue_single_jobs_per_s']:.0f}/s (64 in flight) vs pgqueuer {ps['enqueue_jobs_per_s']:.0f}/s (sequential) = {s:.2f}x")
PY
done
sort -n "$out" | awk '{a[NR]=$1} END {printf "median batched enqueue ratio gnomon/pgqueuer: %.2fx over %d runs (goal: >= 1x)\n", a[int((NR+1)/2)], NR}'
awk '{print $2}' "$out" | sort -n | awk '{a[NR]=$1} END {printf "median one-per-call enqueue ratio gnomon/pgqueuer: %.2fx\n", a[int((NR+1)/2)]}'
rm -f "$out"
