#!/usr/bin/env bash
# Soak (docs/reliability.md): the chaos workload without faults for DURATION seconds (default
# 1800) on NODES nodes (default 3: the cluster over Mosquitto + Redis + Postgres; 1: one node on
# its own, memory bus and presence, Postgres store), on loopback, sampling every node each
# SAMPLE seconds (default 60): RSS, open file descriptors, threads, and the /metrics gauges of
# connections, outbound queues and the trigger webhook queue (pushed − popped). A leak is a slope that does not flatten. Extra arguments go
# to skua-chaos.
#   scripts/soak.sh                       30 minutes, 3-node cluster
#   NODES=1 scripts/soak.sh               30 minutes, one node
#   DURATION=600 SAMPLE=30 scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-1800}"
sample="${SAMPLE:-60}"
nodes="${NODES:-3}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
if [ -z "${SKUA_BIN:-}" ]; then
  cargo build --quiet -p skua-server
  export SKUA_BIN="$target/debug/skua"
fi
cargo build --quiet -p skua-chaos
out="$(mktemp -d "${TMPDIR:-/tmp}/skua-soak-XXXXXX")"
echo "soak: $nodes node(s), ${duration} s, a sample every ${sample} s; output in $out"
setsid "$target/debug/skua-chaos" --no-faults --no-netns --nodes "$nodes" --keep --duration "$duration" "$@" \
  >"$out/chaos.out" 2>"$out/chaos.err" &
pgid=$!
trap 'kill -CONT -- "-$pgid" 2>/dev/null || true; kill -KILL -- "-$pgid" 2>/dev/null || true' EXIT
printf 'elapsed_s\tnode_pid\trss_kb\tfds\tthreads\tconnections_open\toutbound_frames\toutbound_bytes\ttrigger_queue_bytes\n' | tee "$out/samples.tsv"
start=$(date +%s)
metric() { awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d", s }' "$2"; }
while kill -0 "$pgid" 2>/dev/null; do
  sleep "$sample"
  now=$(( $(date +%s) - start ))
  for pid in $(pgrep -g "$pgid" -f ' serve ' || true); do
    [ -r "/proc/$pid/status" ] || continue
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    threads=$(awk '/^Threads/ {print $2}' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    listen=$(tr '\0' ' ' <"/proc/$pid/cmdline" | sed -n 's/.*--listen \([0-9.]*:[0-9]*\).*/\1/p')
    m="$out/metrics"
    curl -s --max-time 5 "http://$listen/metrics" >"$m" 2>/dev/null || : >"$m"
    webhooks=$(metric skua_trigger_queue_bytes "$m")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$now" "$pid" "$rss" "$fds" "$threads" \
      "$(metric skua_connections_open "$m")" "$(metric skua_outbound_queue_frames "$m")" \
      "$(metric skua_outbound_queue_bytes "$m")" "$webhooks" | tee -a "$out/samples.tsv"
  done
done
set +e
wait "$pgid"
rc=$?
set -e
tail -n 40 "$out/chaos.out"
echo "samples: $out/samples.tsv (exit $rc)"
exit "$rc"
