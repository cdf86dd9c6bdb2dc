#!/usr/bin/env bash
# Randomized fault runs with a history checker (docs/reliability.md).
#   scripts/chaos.sh [skua-chaos args...]            one run (default: seed 1, 120 s of workload)
#   scripts/chaos.sh --seed 7 --duration 600         one run of seed 7
#   SEEDS="1 2 3 4 5" scripts/chaos.sh --duration 1800   one run per seed, in turn
# Private Mosquitto, Redis and Postgres instances on free ports (never the machine's shared
# services) and three `skua serve` nodes, each in a network namespace of its own where the
# machine allows it (root, iproute2; the nemesis then also partitions), else all on loopback
# (`--no-netns` forces that). Each run is its own
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
    # A killed run cannot remove its network namespaces and bridge: remove those of every run
    # whose process is gone (named with its pid; live runs are left alone).
    "$chaos" --clean-netns >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A `--seed N` among the arguments is the run's seed (SEEDS must then be unset).
seeds="${SEEDS:-1}"
for arg in "$@"; do
  case "$arg" in
    --seed | --seed=*)
      if [ -n "${SEEDS:-}" ]; then
        echo "chaos.sh: give either SEEDS or --seed, not both" >&2
        exit 2
      fi
      seeds="given"
      ;;
  esac
done

status=0
for seed in $seeds; do
  if [ "$seed" = given ]; then
    echo "== skua-chaos $*"
    setsid "$chaos" "$@" &
  else
    echo "== skua-chaos --seed $seed $*"
    setsid "$chaos" --seed "$seed" "$@" &
  fi
  pgid=$!
  set +e
  wait "$pgid"
  rc=$?
  set -e
  cleanup
  pgid=""
  if [ "$rc" -ne 0 ]; then
    [ "$seed" = given ] && seed="given by --seed"
    echo "skua-chaos: seed $seed failed (exit $rc)" >&2
    status=$rc
  fi
done
exit "$status"
