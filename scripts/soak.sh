#!/usr/bin/env bash
# Soak (docs/reliability.md): the chaos workload without faults on the 3-node cluster for
# DURATION seconds (default 1800), sampling every node each SAMPLE seconds (default 60): RSS,
# open file descriptors, threads, and the /metrics gauges of connections and outbound queues.
# A leak is a slope that does not flatten. Extra arguments go to skua-chaos.
#   scripts/soak.sh                       30 minutes
#   DURATION=600 SAMPLE=30 scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-1800}"
sample="${SAMPLE:-60}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
if [ -z "${SKUA_BIN:-}" ]; then
  cargo build --quiet -p skua-server
  export SKUA_BIN="$target/debug/skua"
fi
cargo build --quiet -p skua-chaos
out="$(mktemp -d "${TMPDIR:-/tmp}/skua-soak-XXXXXX")"
setsid "$target/debug/skua-chaos" --no-faults --keep --duration "$duration" "$@" >"$out/chaos.out" 2>"$out/chaos.err" &
pgid=$!
trap 'kill -CONT -- "-$pgid" 2>/dev/null || true; kill -KILL -- "-$pgid" 2>/dev/null || true' EXIT
printf 'elapsed_s\tnode_pid\trss_kb\tfds\tthreads\tconnections_open\toutbound_frames\toutbound_bytes\n' | tee "$out/samples.tsv"
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
    port=$(tr '\0' ' ' <"/proc/$pid/cmdline" | sed -n 's/.*--listen 127\.0\.0\.1:\([0-9]*\).*/\1/p')
    m="$out/metrics"
    curl -s --max-time 5 "http://127.0.0.1:$port/metrics" >"$m" 2>/dev/null || : >"$m"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$now" "$pid" "$rss" "$fds" "$threads" \
      "$(metric skua_connections_open "$m")" "$(metric skua_outbound_queue_frames "$m")" \
      "$(metric skua_outbound_queue_bytes "$m")" | tee -a "$out/samples.tsv"
  done
done
set +e
wait "$pgid"
rc=$?
set -e
tail -n 40 "$out/chaos.out"
echo "samples: $out/samples.tsv (exit $rc)"
exit "$rc"
