#!/usr/bin/env bash
# Store work per delivered message of durable subscriptions (issue 36, docs/benchmarks.md):
#   skua-bench logged --durable --subscribers S --rate R
# (S persistent sessions, each with its own durable subscription to the logged topic, acking
# every delivery) against each skua binary given, on SQLite and on a fresh Postgres database.
# Per run it prints one line: store operations per delivery over the measured window (Skua's
# /metrics, by operation, with each operation's mean duration) and, on Postgres, commits and tuples written per delivery over the
# whole run (pg_stat_database of the run's database, read before the server starts and after it
# stopped, divided by every delivery of the run). Counts, unlike CPU time, do not depend on what
# else the machine is doing; they do depend on how far the server falls behind (batches grow).
#
# Usage: scripts/bench-durable.sh SKUA_BIN [SKUA_BIN…]   (e.g. a build before and after a change)
# Environment:
#   BENCH_BIN=path          skua-bench to use (default: target/release/skua-bench, else target/debug)
#   BENCH_RATE=500          logged publishes/s     BENCH_SUBSCRIBERS=10
#   BENCH_DURATION=10       measured seconds       BENCH_WARMUP=2
#   BENCH_STORES="sqlite postgres"
#   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432 (a database is created and dropped per run)
#   BENCH_OUT=target/bench/durable.jsonl (the runs' JSON lines)
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
BENCH=${BENCH_BIN:-}
if [ -z "$BENCH" ]; then
  BENCH=target/release/skua-bench
  [ -x "$BENCH" ] || BENCH=target/debug/skua-bench
fi
RATE=${BENCH_RATE:-500}
SUBS=${BENCH_SUBSCRIBERS:-10}
DURATION=${BENCH_DURATION:-10}
WARMUP=${BENCH_WARMUP:-2}
STORES=${BENCH_STORES:-sqlite postgres}
PG_BASE=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
OUT=${BENCH_OUT:-target/bench/durable.jsonl}
mkdir -p "$(dirname "$OUT")"
: >"$OUT"
PG_DB=""
cleanup() {
  if [ -n "$PG_DB" ]; then
    psql "$PG_BASE/postgres" -qc "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# The run's database: commits and tuples written so far.
pg_stats() {
  psql "$PG_BASE/postgres" -qtAF' ' -c "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted \
    FROM pg_stat_database WHERE datname = '$PG_DB'"
}

# A JSON field of the last line of $1 (numbers and booleans only).
field() {
  sed -n '$p' "$1" | grep -o "\"$2\":[^,}]*" | head -n1 | cut -d: -f2  || true
}

for bin in "$@"; do
  for store in $STORES; do
    args=()
    if [ "$store" = postgres ]; then
      if ! psql "$PG_BASE/postgres" -qtAc 'SELECT 1' >/dev/null 2>&1; then
        echo "bench-durable: no Postgres at $PG_BASE; skipped" >&2
        continue
      fi
      PG_DB="skua_durable_$$_$RANDOM"
      psql "$PG_BASE/postgres" -qc "CREATE DATABASE $PG_DB" >/dev/null
      "$bin" migrate --store "$PG_BASE/$PG_DB" >/dev/null
      args=(--skua-arg=--store "--skua-arg=$PG_BASE/$PG_DB")
      before=$(pg_stats)
    fi
    run=$(mktemp)
    "$BENCH" logged --durable --spawn-skua "$bin" "${args[@]}" --subscribers "$SUBS" --rate "$RATE" \
      --duration "$DURATION" --warmup "$WARMUP" --label "$(basename "$bin")-$store" >"$run" 2>/dev/null || true
    sed -n '$p' "$run" >>"$OUT"
    delivered=$(field "$run" delivered)
    line="$(basename "$bin") $store: delivered=$delivered lost=$(field "$run" lost) ok=$(field "$run" ok)"
    line+=" store_ops/delivery=$(field "$run" store_ops_per_delivery)"
    for op in claim claim_many claim_page ack ack_many append; do
      v=$(field "$run" "store_${op}_per_delivery")
      m=$(field "$run" "store_${op}_mean_us")
      if [ -n "$v" ]; then line+=" $op=$v (${m%.*} µs)"; fi
    done
    if [ "$store" = postgres ]; then
      # The server has stopped: its backends flushed their statistics when they exited.
      sleep 1
      after=$(pg_stats)
      line+=$(awk -v d="$delivered" -v b="$before" -v a="$after" 'BEGIN {
        split(b, x, " "); split(a, y, " ");
        if (d > 0) printf " | pg per delivery: commits=%.3f inserted=%.3f updated=%.3f deleted=%.3f",
          (y[1]-x[1])/d, (y[2]-x[2])/d, (y[3]-x[3])/d, (y[4]-x[4])/d }')
      cleanup
      PG_DB=""
    fi
    echo "$line"
    rm -f "$run"
  done
done
