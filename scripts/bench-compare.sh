#!/usr/bin/env bash
# One command for the side-by-side comparison of docs/benchmarks.md (issue 6):
#   builds the release binaries (skua, skua-bench, skua-bare), then for every case starts each
#   server fresh on free loopback ports — Skua, skua-bare, a private Mosquitto with a WebSocket
#   listener and a private nats-server with a WebSocket listener — runs the same scenario
#   against it, stops it, collects the JSON lines, and writes the results tables into
#   docs/benchmarks.md between <!-- results:begin --> and <!-- results:end -->.
#   Everything it starts is stopped on exit (trap). It never touches the system services.
#
# Environment:
#   SKUA_BIN=path      use this skua binary instead of building skua-server
#   BENCH_BUILD=0      build nothing: use the binaries already in $CARGO_TARGET_DIR/release
#   SKUA_BINS="a b"    before/after in one run: every skua case is run against each of these
#                      binaries in turn (alternating, per case and server), labelled
#                      "<server>@<file name>" (e.g. skua-pg@skua-before); implies SKUA_BIN
#   BENCH_DURATION=10  measured seconds per run      BENCH_WARMUP=2  warm-up seconds
#   BENCH_CASES="fanout100 fanout1000 fanout1000r1000 pairs idle churn logged loggeddurable loggeddurable20k logged20k rest cluster cluster3 storm devices"
#     subset to run (fanout1000r1000: one node at the cluster runs' load, their reference;
#     rest: POST /v1/publish from 32 keep-alive HTTP clients, closed loop, rest_rate_limit raised;
#     logged: 10 subscribers at 5 000 logged publishes/s; loggeddurable: the same with durable
#     subscribers, persistent sessions acking every delivery; loggeddurable20k: that at 20 000/s
#     (400 publisher connections at 50/s); logged20k: 20 000/s offered from one
#     publisher connection and from 400, the server's rate limit raised; cluster3: three nodes;
#     storm: below)
#   storm (issue 36): two Skua nodes in cluster mode on the machine's Mosquitto and Redis
#     (BENCH_MQTT_URL, default mqtt://127.0.0.1:1883; BENCH_REDIS_URL, default
#     redis://127.0.0.1:6379; a namespace of its own) and a fresh Postgres database (as skua-pg;
#     needs skua-pg in BENCH_SERVERS); BENCH_STORM_N=10000 clients with two subscriptions each on
#     node A, then skua-bench sends A SIGTERM and every client restores on node B (label skua-pg)
#   devices (issue 37): BENCH_DEVICES=10000 MQTT devices over plain TCP in BENCH_DEVICE_ROOMS=100
#     rooms, against skua (--mqtt-listen; device i logs in as the bench fixtures' device actor i,
#     NoLag WebSocket subscribers/publishers) and mosquitto (its TCP listener; MQTT over
#     WebSocket subscribers/publishers): fan-in (each device publishes once a second, one
#     WebSocket subscriber per room) and fan-out (each device subscribed, WebSocket publishers
#     send once a second into every room), at QoS BENCH_DEVICE_QOS="0 1"
#   BENCH_SERVERS="skua skua-shards skua-mem skua-pg bare bare-nagle bare-rb4k nats mosquitto" subset of servers
#     skua        skua serve --dev, default settings (SQLite session store in a fresh directory)
#     skua-shards the same with --dispatch-shards 0 (one fan-out shard per worker thread; fanout cases)
#     skua-mem    the same with --store memory (idle and churn: what the store costs)
#     skua-pg     the same with a fresh Postgres database as the store (logged cases; created
#                 and dropped per run on BENCH_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432;
#                 left out when psql cannot reach it)
#     bare        skua-bare with TCP_NODELAY (the floor; what NATS and our Mosquitto config do)
#     bare-nagle  skua-bare with axum::serve's default sockets (Nagle on), as Skua has today
#     bare-rb4k   skua-bare with a 4 KiB WebSocket read buffer instead of Skua's 16 KiB (idle)
#   BENCH_QUIET_WAIT=180  most seconds to wait for other work on the machine to stop before a run
#   BENCH_OUT=target/bench/results.jsonl   BENCH_DOC=docs/benchmarks.md (empty: don't write)
#   CARGO_TARGET_DIR is honoured (binaries are taken from $CARGO_TARGET_DIR/release)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${BENCH_DURATION:-10}
WARMUP=${BENCH_WARMUP:-2}
CASES=${BENCH_CASES:-fanout100 fanout1000 fanout1000r1000 pairs idle churn logged loggeddurable loggeddurable20k logged20k rest cluster cluster3 storm devices}
SERVERS=${BENCH_SERVERS:-skua skua-shards skua-mem skua-pg bare bare-nagle bare-rb4k nats mosquitto}
PG_BASE=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
# Extra server arguments for the current case (skua variants only).
SKUA_CASE_ARGS=()
# The fixtures file Skua loads for the current case (empty: the shared bench fixtures).
CASE_FIXTURES=""
# The MQTT (TCP) listener of the server just started, where it has one.
MQTT_ADDR=""
PG_DB=""
TARGET=${CARGO_TARGET_DIR:-target}
OUT=${BENCH_OUT:-target/bench/results.jsonl}
DOC=${BENCH_DOC-docs/benchmarks.md}

# 10 000-connection runs need more descriptors than the usual soft limit of 1024.
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" -lt 10500 ]; then
  echo "bench-compare: ulimit -n is $(ulimit -n) (hard limit); idle C=10000 and devices N=10000 will fail" >&2
fi

echo "bench-compare: building release binaries" >&2
SKUA_BINS=${SKUA_BINS:-}
[ -n "$SKUA_BINS" ] && SKUA_BIN=${SKUA_BINS%% *}
if [ -n "${SKUA_BIN:-}" ]; then
  [ "${BENCH_BUILD:-1}" = 0 ] || cargo build --release -q -p skua-bench
  SKUA=$(realpath "$SKUA_BIN")
else
  [ "${BENCH_BUILD:-1}" = 0 ] || cargo build --release -q -p skua-server -p skua-bench
  SKUA=$(realpath "$TARGET/release/skua")
fi
BENCH=$TARGET/release/skua-bench
BARE=$TARGET/release/skua-bare
command -v mosquitto >/dev/null || SERVERS=${SERVERS//mosquitto/}
command -v nats-server >/dev/null || SERVERS=${SERVERS//nats/}
if ! psql "$PG_BASE/postgres" -qtAc 'SELECT 1' >/dev/null 2>&1; then
  echo "bench-compare: no Postgres at $PG_BASE (BENCH_POSTGRES_URL); skua-pg left out" >&2
  SERVERS=${SERVERS//skua-pg/}
fi

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
WORK=$(mktemp -d /tmp/skua-bench-compare.XXXXXX)
LOGS=target/bench/logs
mkdir -p "$LOGS"
SERVER_PID=""

stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
  if [ -n "$PG_DB" ]; then
    psql "$PG_BASE/postgres" -qc "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
    PG_DB=""
  fi
}
cleanup() {
  stop_server
  cp "$WORK"/*.log "$LOGS"/ 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$BENCH" fixtures --rooms 500 >"$WORK/bench-fixtures.toml"

port_up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# First stdout line "… listening on ADDR" of a server started in the background.
wait_addr() {
  local out=$1 line=""
  for _ in $(seq 1 100); do
    line=$(head -n1 "$out" 2>/dev/null || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  [ -n "$line" ] || { echo "bench-compare: server did not start (see $out)" >&2; return 1; }
  echo "${line##* }"
}

# The address of the "skua mqtt listening on ADDR" line of a started Skua's stdout.
wait_mqtt_addr() {
  local out=$1 line=""
  for _ in $(seq 1 100); do
    line=$(grep -m1 '^skua mqtt listening on ' "$out" 2>/dev/null || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  [ -n "$line" ] || { echo "bench-compare: skua printed no MQTT listener (see $out)" >&2; return 1; }
  echo "${line##* }"
}

wait_port() {
  for _ in $(seq 1 100); do port_up "$1" && return 0; sleep 0.1; done
  echo "bench-compare: nothing listens on 127.0.0.1:$1" >&2
  return 1
}

# start_server NAME: sets SERVER_PID, URL and PROTO.
start_server() {
  case $1 in
    skua | skua-mem | skua-shards | skua-pg)
      # Default settings; run from a fresh directory so the default store file
      # (sqlite://skua-data/skua.db, relative) starts empty and never lands in the repository.
      local extra=("${SKUA_CASE_ARGS[@]}") dir="$WORK/$1-$RANDOM"
      [ "$1" = skua-mem ] && extra+=(--store memory)
      [ "$1" = skua-shards ] && extra+=(--dispatch-shards 0)
      if [ "$1" = skua-pg ]; then
        PG_DB="skua_bench_$$_$RANDOM"
        psql "$PG_BASE/postgres" -qc "CREATE DATABASE $PG_DB" >/dev/null
        "$SKUA" migrate --store "$PG_BASE/$PG_DB" >/dev/null
        extra+=(--store "$PG_BASE/$PG_DB")
      fi
      mkdir -p "$dir"
      # Every bench client comes from 127.0.0.1: the per-address front-door limits (issue 12,
      # docs/security.md) are off here, as they would be behind a load balancer that hides addresses.
      (cd "$dir" && SKUA_MAX_CONNECTIONS_PER_IP=0 SKUA_MAX_NEW_CONNECTIONS_PER_IP_PER_SECOND=0 \
        exec "$SKUA" serve --dev --listen 127.0.0.1:0 --fixtures "${CASE_FIXTURES:-$WORK/bench-fixtures.toml}" "${extra[@]}") \
        >"$WORK/$1.out" 2>>"$WORK/skua.log" &
      SERVER_PID=$!
      URL="ws://$(wait_addr "$WORK/$1.out")/ws"
      PROTO=nolag
      MQTT_ADDR=""
      case " ${extra[*]} " in *" --mqtt-listen "*) MQTT_ADDR=$(wait_mqtt_addr "$WORK/$1.out") ;; esac
      ;;
    bare | bare-nagle | bare-rb4k)
      local extra=()
      [ "$1" = bare-nagle ] && extra=(--nagle)
      [ "$1" = bare-rb4k ] && extra=(--read-buffer 4096)
      "$BARE" --listen 127.0.0.1:0 "${extra[@]}" >"$WORK/$1.out" 2>>"$WORK/bare.log" &
      SERVER_PID=$!
      URL="ws://$(wait_addr "$WORK/$1.out")/ws"
      PROTO=bare
      ;;
    mosquitto)
      read -r tcp ws <<<"$("$BENCH" ports 2 | tr '\n' ' ')"
      cat >"$WORK/mosquitto.conf" <<EOF
# Private instance for skua-bench; the system service on 1883 is left alone.
per_listener_settings false
allow_anonymous true
persistence false
user root
log_dest stderr
log_type error
log_type warning
set_tcp_nodelay true
max_queued_messages 1000
listener $tcp 127.0.0.1
listener $ws 127.0.0.1
protocol websockets
EOF
      mosquitto -c "$WORK/mosquitto.conf" 2>>"$WORK/mosquitto.log" &
      SERVER_PID=$!
      wait_port "$ws"
      wait_port "$tcp"
      URL="ws://127.0.0.1:$ws/mqtt"
      PROTO=mqtt-ws
      MQTT_ADDR="127.0.0.1:$tcp"
      ;;
    nats)
      read -r tcp ws <<<"$("$BENCH" ports 2 | tr '\n' ' ')"
      cat >"$WORK/nats.conf" <<EOF
# Private instance for skua-bench; the system service on 4222 is left alone.
listen: "127.0.0.1:$tcp"
max_payload: 1048576
websocket {
  host: "127.0.0.1"
  port: $ws
  no_tls: true
  compression: false
}
EOF
      nats-server -c "$WORK/nats.conf" 2>>"$WORK/nats.log" &
      SERVER_PID=$!
      wait_port "$ws"
      URL="ws://127.0.0.1:$ws/"
      PROTO=nats-ws
      ;;
  esac
}

# Busy percent of all cores (100 = one core) over 2 s, from /proc/stat.
machine_busy() {
  local a b
  a=$(head -n1 /proc/stat)
  sleep 2
  b=$(head -n1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {
    split(a, x); split(b, y)
    busy = (y[2]+y[3]+y[4]+y[7]+y[8]+y[9]) - (x[2]+x[3]+x[4]+x[7]+x[8]+x[9])
    printf "%d", busy / 2   # ticks are 1/100 s; over 2 s → percent of one core
  }'
}

# This machine is shared: wait (up to BENCH_QUIET_WAIT s) until others use < 30 % of a core.
wait_quiet() {
  local waited=0 busy
  while :; do
    busy=$(machine_busy)
    [ "$busy" -lt 30 ] && break
    if [ "$waited" -ge "${BENCH_QUIET_WAIT:-180}" ]; then
      echo "bench-compare: machine still ${busy}% busy with other work; running anyway" >&2
      break
    fi
    echo "bench-compare: machine ${busy}% busy with other work; waiting" >&2
    waited=$((waited + 2))
  done
}

# bench_case SERVERS -- ARGS…: runs `skua-bench ARGS…` against each server, each fresh. A run
# during which other processes used more than a quarter of a core is repeated (twice at most):
# they compete for the same two cores and change the batching, so the figures would mislead.
bench_case() {
  local servers=$1
  shift
  local bins=("$SKUA") these label keep=$SKUA
  [ -n "$SKUA_BINS" ] && read -r -a bins <<<"$SKUA_BINS"
  for s in $servers; do
    case " $SERVERS " in *" $s "*) ;; *) continue ;; esac
    these=("${bins[@]}")
    case $s in skua*) ;; *) these=("$keep") ;; esac
    for bin in "${these[@]}"; do
    SKUA=$(realpath "$bin")
    label=$s
    case $s in skua*) [ -n "$SKUA_BINS" ] && label="$s@$(basename "$bin")" ;; esac
    for attempt in 1 2 3; do
      wait_quiet
      start_server "$s"
      echo "bench-compare: $* against $s ($URL, pid $SERVER_PID), attempt $attempt" >&2
      : >"$WORK/last.json"
      local mqtt=()
      [ "$1" = devices ] && mqtt=(--mqtt "$MQTT_ADDR")
      "$BENCH" "$@" "${mqtt[@]}" --proto "$PROTO" --url "$URL" --server-pid "$SERVER_PID" --label "$label" --json "$WORK/last.json" \
        || echo "bench-compare: run failed: $* against $s" >&2
      stop_server
      sleep 1
      other=$(sed -n 's/.*"other_cpu_pct":\([0-9.]*\).*/\1/p' "$WORK/last.json" | tail -n1)
      if [ -z "$other" ] || awk -v o="$other" -v m="${OTHER_MAX:-25}" 'BEGIN { exit !(o < m) }'; then break; fi
      echo "bench-compare: other work used ${other}% of a core during the run; repeating it" >&2
    done
    cat "$WORK/last.json" >>"$OUT"
    done
  done
  SKUA=$keep
}

# storm_case N: two cluster nodes on a fresh Postgres database, `skua-bench storm` (which stops
# node A with SIGTERM), then node B is stopped and the database dropped.
storm_case() {
  local n=$1 ns="bench$$x$RANDOM" node a_pid b_pid a_url b_url
  local mqtt=${BENCH_MQTT_URL:-mqtt://127.0.0.1:1883} redis=${BENCH_REDIS_URL:-redis://127.0.0.1:6379}
  for u in "$mqtt" "$redis"; do
    local hp=${u#*://}
    hp=${hp%%/*}
    port_up "${hp##*:}" || { echo "bench-compare: storm needs $u; left out" >&2; return 0; }
  done
  PG_DB="skua_bench_$$_$RANDOM"
  psql "$PG_BASE/postgres" -qc "CREATE DATABASE $PG_DB" >/dev/null
  "$SKUA" migrate --store "$PG_BASE/$PG_DB" >/dev/null
  "$BENCH" fixtures --rooms 1 --churn-actors "$n" >"$WORK/storm-fixtures.toml"
  for node in a b; do
    mkdir -p "$WORK/storm-$node"
    # As in start_server: every client comes from 127.0.0.1, so the per-address limits are off.
    (cd "$WORK/storm-$node" && SKUA_MAX_CONNECTIONS_PER_IP=0 SKUA_MAX_NEW_CONNECTIONS_PER_IP_PER_SECOND=0 \
      exec "$SKUA" serve --dev --cluster true --listen 127.0.0.1:0 --grpc-listen '' \
        --fixtures "$WORK/storm-fixtures.toml" --bus "$mqtt" --presence "$redis" --store "$PG_BASE/$PG_DB" \
        --namespace "$ns" --node-id "storm-$node") >"$WORK/storm-$node.out" 2>>"$WORK/skua-storm-$node.log" &
    if [ "$node" = a ]; then a_pid=$!; else b_pid=$!; fi
  done
  SERVER_PID=$b_pid
  a_url="ws://$(wait_addr "$WORK/storm-a.out")/ws"
  b_url="ws://$(wait_addr "$WORK/storm-b.out")/ws"
  echo "bench-compare: storm N=$n: node A $a_url (pid $a_pid), node B $b_url (pid $b_pid)" >&2
  : >"$WORK/last.json"
  "$BENCH" storm --node-a "$a_url" --node-b "$b_url" --kill-pid "$a_pid" --node-b-pid "$b_pid" \
    --connections "$n" --pg-url "$PG_BASE/$PG_DB" --label skua-pg --json "$WORK/last.json" \
    || echo "bench-compare: storm run failed" >&2
  kill "$a_pid" 2>/dev/null || true
  wait "$a_pid" 2>/dev/null || true
  stop_server
  cat "$WORK/last.json" >>"$OUT"
}

T=(--duration "$DURATION" --warmup "$WARMUP")
ALL="skua bare bare-nagle nats mosquitto"
for c in $CASES; do
  case $c in
    fanout100) bench_case "$ALL skua-shards" fanout --subscribers 100 --rate 10000 --payload 100 "${T[@]}" ;;
    fanout1000) bench_case "$ALL skua-shards" fanout --subscribers 1000 --rate 2000 --payload 100 "${T[@]}" ;;
    fanout1000r1000) bench_case "skua" fanout --subscribers 1000 --rate 1000 --payload 100 "${T[@]}" ;;
    pairs) bench_case "$ALL" pairs --topics 500 --rate 20 --payload 100 "${T[@]}" ;;
    idle) bench_case "skua skua-mem bare bare-rb4k nats mosquitto" idle --connections 10000 ;;
    # Above the 5 000/s target, so the achieved rate shows the headroom.
    # Connection teardown leaves kernel work (timers, kworkers) that no process is charged
    # for, so "other" CPU is not a sign of interference here: no repeats.
    churn) OTHER_MAX=100000 bench_case "skua skua-mem bare nats mosquitto" churn --rate 8000 "${T[@]}" ;;
    logged) bench_case "skua skua-pg" logged --subscribers 10 --rate 5000 --payload 100 "${T[@]}" ;;
    loggeddurable) bench_case "skua skua-pg" logged --durable --subscribers 10 --rate 5000 --payload 100 "${T[@]}" ;;
    loggeddurable20k) bench_case "skua skua-pg" logged --durable --subscribers 10 --rate 20000 --payload 100 "${T[@]}" ;;
    logged20k)
      SKUA_CASE_ARGS=(--rate-limit 40000)
      bench_case "skua skua-pg" logged --subscribers 10 --rate 20000 --max-rate-per-conn 20000 --payload 100 "${T[@]}"
      bench_case "skua skua-pg" logged --subscribers 10 --rate 20000 --max-rate-per-conn 50 --payload 100 "${T[@]}"
      SKUA_CASE_ARGS=() ;;
    # Server-side publishes over REST as fast as 32 clients get answers (the per-key limit raised).
    rest)
      SKUA_CASE_ARGS=(--rest-rate-limit 10000000)
      bench_case "skua skua-pg" rest --clients 32 --payload 100 "${T[@]}"
      SKUA_CASE_ARGS=() ;;
    # Two (three) nodes and a private Mosquitto, all started by skua-bench itself (one run, no peers).
    cluster | cluster3)
      nodes=2
      [ "$c" = cluster3 ] && nodes=3
      case " $SERVERS " in *" skua "*)
        wait_quiet
        echo "bench-compare: cluster ($nodes nodes + mosquitto), S=1000 R=1000" >&2
        : >"$WORK/last.json"
        "$BENCH" cluster --spawn-skua "$SKUA" --nodes "$nodes" --subscribers 1000 --rate 1000 --payload 100 "${T[@]}" \
          --json "$WORK/last.json" 2>>"$WORK/skua.log" || echo "bench-compare: cluster run failed" >&2
        cat "$WORK/last.json" >>"$OUT" ;;
      esac ;;
    storm)
      case " $SERVERS " in *" skua-pg "*)
        wait_quiet
        storm_case "${BENCH_STORM_N:-10000}" ;;
      esac ;;
    # MQTT devices over TCP (issue 37): every device its own actor on Skua, anonymous on Mosquitto.
    devices)
      n=${BENCH_DEVICES:-10000}
      "$BENCH" fixtures --rooms 500 --device-actors "$n" >"$WORK/bench-devices-fixtures.toml"
      CASE_FIXTURES=$WORK/bench-devices-fixtures.toml
      SKUA_CASE_ARGS=(--mqtt-listen 127.0.0.1:0)
      for mode in fan-in fan-out; do
        for q in ${BENCH_DEVICE_QOS:-0 1}; do
          bench_case "skua mosquitto" devices --mode "$mode" --qos "$q" --devices "$n" \
            --rooms "${BENCH_DEVICE_ROOMS:-100}" --rate 1 --payload 100 "${T[@]}"
        done
      done
      SKUA_CASE_ARGS=()
      CASE_FIXTURES="" ;;
    *) echo "bench-compare: unknown case $c" >&2; exit 2 ;;
  esac
done

model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
mq=$( (mosquitto -h 2>/dev/null || true) | sed -n 's/^mosquitto version //p' | head -n1)
nats=$(nats-server --version 2>/dev/null || echo 'nats-server n/a')
rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
info="Run $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores ($model), Linux $(uname -r); mosquitto $mq, $nats;"
# The build is named by commit, never by a directory of the machine it ran on (issue 35).
if [ -n "${SKUA_BIN:-}" ]; then built="a binary given by SKUA_BIN, checkout at $rev"; else built="release build of $rev"; fi
info="$info skua: $built; ${DURATION} s measured after ${WARMUP} s warm-up per run."
if [ -n "$DOC" ]; then
  "$BENCH" report --input "$OUT" --doc "$DOC" --run-info "$info"
  echo "bench-compare: results in $OUT, tables written to $DOC (logs in $LOGS)" >&2
else
  "$BENCH" report --input "$OUT" --run-info "$info"
fi
