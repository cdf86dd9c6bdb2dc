#!/usr/bin/env bash
# Randomized fault runs with a history checker (docs/reliability.md).
#   scripts/chaos.sh [skua-chaos args...]            one run (default: seed 1, 120 s of workload)
#   SEEDS="1 2 3 4 5" scripts/chaos.sh --duration 1800   one run per seed, in turn
# Everything runs on loopback: private Mosquitto, Redis and Postgres instances on free ports
# (never the machine's shared services) and three `skua serve` nodes. Each run is its own
# process group, killed whole when the run ends or this script is interrupted, so nothing it
# started outlives it. SKUA_BIN names the skua binary (built when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
if [ -z "${SKUA_BIN:-}" ]; then
  cargo build --quiet -p skua-server
  export SKUA_BIN="$target/debug/skua"
fi
cargo build --quiet -p skua-chaos
chaos="$target/debug/skua-chaos"

pgid=""
cleanup() {
  if [ -n "$pgid" ]; then
    kill -CONT -- "-$pgid" 2>/dev/null || true
    kill -KILL -- "-$pgid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

status=0
for seed in ${SEEDS:-1}; do
  echo "== skua-chaos --seed $seed $*"
  setsid "$chaos" --seed "$seed" "$@" &
  pgid=$!
  set +e
  wait "$pgid"
  rc=$?
  set -e
  cleanup
  pgid=""
  if [ "$rc" -ne 0 ]; then
    echo "skua-chaos: seed $seed failed (exit $rc)" >&2
    status=$rc
  fi
done
exit "$status"
