#!/usr/bin/env bash
# Server instructions per delivered message (churn: per cycle) over one skua-bench window,
# counted by callgrind — for A/B comparisons on a machine too busy for CPU-time figures
# (docs/benchmarks.md, "Issue 13: instruction counts").
#
#   scripts/bench-instructions.sh SKUA_BINARY SCENARIO-ARGS…
#   e.g. scripts/bench-instructions.sh /tmp/before/skua pairs --topics 500 --rate 1 --duration 40 --warmup 3
#
# Starts SKUA_BINARY under `valgrind --tool=callgrind` (serve --dev, bench fixtures, default
# SQLite store in a fresh directory, per-address limits off; SKUA_EXTRA adds server arguments,
# e.g. SKUA_EXTRA="--store memory"), runs skua-bench (from $CARGO_TARGET_DIR/release, built if
# missing) with --window-cmd zeroing the counters when the window opens and dumping them when it
# closes, then prints instructions / messages delivered in the window. TRIGGERS=1 gives the bench
# app a trigger webhook pointing at skua-bench's own always-ok receiver (`--triggers`; fanout then
# runs on the bench app's topic, so compare with `fanout --bench-app`) and also prints the
# triggers received in the window (docs/benchmarks.md, "Issue 14: triggers"). Keep the rates low: a
# server that falls behind under callgrind batches, and its count per message drops.
# NO_REP_STRINGS=1 raises glibc's `rep stosb`/`rep movsb` thresholds for the server, so memset
# and memcpy of 2 KiB and more run glibc's vector loops: callgrind counts each byte of a
# `rep stosb` as one instruction, which this CPU (ERMS/FSRM) does ~32 bytes a cycle, and
# tungstenite zeroes its 4 KiB read buffer before every read (docs/benchmarks.md, "Issue 19").
# Everything it starts is stopped on exit; the run's files stay in the printed directory.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,22p' "$0" >&2; exit 2; }
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
  || { echo "bench-instructions: needs valgrind (callgrind, callgrind_control)" >&2; exit 2; }
SKUA=$(realpath "$1")
shift
BENCH=${CARGO_TARGET_DIR:-target}/release/skua-bench
[ -x "$BENCH" ] || cargo build --release -q -p skua-bench
BENCH=$(realpath "$BENCH")
D=$(mktemp -d /tmp/skua-bench-instructions.XXXXXX)
mkdir -p "$D/srv"
TRIGGER_ARGS=()
if [ "${TRIGGERS:-0}" = 1 ]; then
  port=$("$BENCH" ports)
  "$BENCH" fixtures --trigger-webhook "http://127.0.0.1:$port/trigger" >"$D/fixtures.toml"
  TRIGGER_ARGS=(--triggers --trigger-listen "127.0.0.1:$port")
else
  "$BENCH" fixtures >"$D/fixtures.toml"
fi
cat >"$D/window.sh" <<'W'
#!/usr/bin/env bash
case $1 in
  start) exec callgrind_control -z "$CG_PID" >/dev/null ;;
  end) exec callgrind_control -d "$CG_PID" >/dev/null ;;
esac
W
chmod +x "$D/window.sh"
TUNABLES=${GLIBC_TUNABLES:-}
if [ "${NO_REP_STRINGS:-0}" = 1 ]; then
  TUNABLES="${TUNABLES:+$TUNABLES:}glibc.cpu.x86_rep_stosb_threshold=1000000000:glibc.cpu.x86_rep_movsb_threshold=1000000000"
fi
# shellcheck disable=SC2086 # SKUA_EXTRA is a list of arguments
(cd "$D/srv" && SKUA_MAX_CONNECTIONS_PER_IP=0 SKUA_MAX_NEW_CONNECTIONS_PER_IP_PER_SECOND=0 \
  GLIBC_TUNABLES=$TUNABLES exec valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" \
  "$SKUA" serve --dev --listen 127.0.0.1:0 --fixtures "$D/fixtures.toml" ${SKUA_EXTRA:-}) \
  >"$D/server.out" 2>"$D/server.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
line=""
for _ in $(seq 1 1200); do
  line=$(grep -m1 'listening on' "$D/server.out" 2>/dev/null || true)
  [ -n "$line" ] && break
  sleep 0.1
done
[ -n "$line" ] || { echo "bench-instructions: the server did not start (see $D/server.log)" >&2; exit 1; }
CG_PID=$PID "$BENCH" "$@" --url "ws://${line##* }/ws" --server-pid "$PID" --window-cmd "$D/window.sh" \
  ${TRIGGER_ARGS[@]+"${TRIGGER_ARGS[@]}"} --json "$D/result.json" >"$D/bench.out" 2>"$D/bench.log"
kill "$PID"
wait "$PID" 2>/dev/null || true
trap - EXIT
ir=$(sed -n 's/^totals: *//p' "$D/cg.out.1" | head -n1)
[ -n "$ir" ] || { echo "bench-instructions: no window dump in $D" >&2; exit 1; }
awk -v ir="$ir" -v d="$D" '
  { if (match($0, /"scenario":"[a-z]+"/)) sc = substr($0, RSTART + 12, RLENGTH - 13)
    if (match($0, /"duration_s":[0-9.]+/)) dur = substr($0, RSTART + 13, RLENGTH - 13)
    if (match($0, /"delivered_per_s":[0-9.]+/)) rate = substr($0, RSTART + 18, RLENGTH - 18)
    if (match($0, /"churn_per_s":[0-9.]+/)) rate = substr($0, RSTART + 14, RLENGTH - 14)
    if (match($0, /"triggers_per_s":[0-9.]+/)) trig = substr($0, RSTART + 17, RLENGTH - 17) }
  END { n = rate * dur; unit = (sc == "churn") ? "cycle" : "delivered message"
        if (n < 1) { print "bench-instructions: nothing delivered in the window (" d ")"; exit 1 }
        printf "%s: %d instructions over %d %ss: %.0f per %s (files in %s)\n", sc, ir, n, unit, ir / n, unit, d
        if (trig != "") printf "triggers received in the window: %d (%.2f per %s)\n", trig * dur, trig * dur / n, unit }
' "$D/result.json"
