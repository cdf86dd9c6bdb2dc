#!/usr/bin/env bash
# A few-seconds smoke run of skua-bench against a Skua it starts itself (tiny fanout, pairs and
# churn) and against skua-bare. Exits non-zero if the bench fails or any message is lost,
# duplicated or refused (--strict). CI calls this; it keeps the load generator working.
#
# Environment: SKUA_BIN=path uses a prebuilt skua; BENCH_PROFILE=dev builds debug binaries.
set -euo pipefail
cd "$(dirname "$0")/.."

ulimit -n "$(ulimit -Hn)"
profile=${BENCH_PROFILE:-release}
dir=${CARGO_TARGET_DIR:-target}/$([ "$profile" = dev ] && echo debug || echo release)
if [ -n "${SKUA_BIN:-}" ]; then
  cargo build -q --profile "$profile" -p skua-bench
  SKUA=$SKUA_BIN
else
  cargo build -q --profile "$profile" -p skua-server -p skua-bench
  SKUA=$dir/skua
fi
BENCH=$dir/skua-bench
BARE=$dir/skua-bare

T=(--duration 2 --warmup 0.5 --drain 3 --strict)
"$BENCH" fanout --spawn-skua "$SKUA" --subscribers 5 --rate 200 --payload 100 "${T[@]}"
"$BENCH" pairs --spawn-skua "$SKUA" --topics 10 --rate 20 "${T[@]}"
# Trigger webhooks (issue 14): every publish's trigger must reach the bench's own receiver.
"$BENCH" pairs --spawn-skua "$SKUA" --topics 10 --rate 20 --triggers "${T[@]}"
"$BENCH" churn --spawn-skua "$SKUA" --rate 100 --concurrency 16 "${T[@]}"
# Many actors: the churn actors of the bench fixtures must log in (a failed cycle fails --strict).
"$BENCH" churn --spawn-skua "$SKUA" --rate 100 --concurrency 16 --actors 8 "${T[@]}"
"$BENCH" logged --spawn-skua "$SKUA" --skua-arg=--store=sqlite::memory: --subscribers 2 --rate 50 "${T[@]}"
"$BENCH" cluster --spawn-skua "$SKUA" --subscribers 10 --rate 100 "${T[@]}"
# MQTT devices (issue 37), each its own device actor: into rooms with NoLag subscribers, and
# subscribed with NoLag publishers; QoS 1 both ways (every PUBACK must come back).
"$BENCH" devices --spawn-skua "$SKUA" --devices 40 --rooms 4 --rate 5 --qos 1 "${T[@]}"
"$BENCH" devices --spawn-skua "$SKUA" --mode fan-out --devices 40 --rooms 4 --rate 5 --qos 1 "${T[@]}"

out=$(mktemp)
"$BARE" --listen 127.0.0.1:0 >"$out" &
bare=$!
trap 'kill $bare 2>/dev/null || true; rm -f "$out"' EXIT
for _ in $(seq 1 50); do [ -s "$out" ] && break; sleep 0.1; done
addr=$(head -n1 "$out")
"$BENCH" fanout --proto bare --url "ws://${addr##* }/ws" --server-pid "$bare" --subscribers 5 --rate 200 "${T[@]}"
echo "bench-smoke: ok"
