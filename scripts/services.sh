#!/usr/bin/env bash
# Sourced by scripts/test.sh: makes sure the services the tests use are running on this
# machine (Mosquitto 1883, Redis 6379, PostgreSQL 5432), starting any that is down with the
# machine's documented commands, and exports the URLs the tests read. A service that cannot be
# reached is left unset, so its tests skip loudly — except under CI=true, where they fail.

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_up() {
  for _ in $(seq 1 50); do up "$1" && return 0; sleep 0.2; done
  return 1
}

ensure() {
  local name=$1 port=$2 start=$3
  if up "$port"; then return 0; fi
  if command -v "${start%% *}" >/dev/null 2>&1; then
    echo "services: $name is down; starting it" >&2
    eval "$start" >/dev/null 2>&1 || true
    wait_up "$port" && return 0
  fi
  echo "services: $name is not reachable on 127.0.0.1:$port" >&2
  return 1
}

if ensure mosquitto 1883 "mosquitto -d -c /etc/mosquitto/mosquitto.conf"; then
  export SKUA_TEST_MQTT_URL="${SKUA_TEST_MQTT_URL:-mqtt://127.0.0.1:1883}"
fi
if ensure redis 6379 "redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"; then
  export SKUA_TEST_REDIS_URL="${SKUA_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
fi
if ensure postgres 5432 "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql 2>/dev/null | head -n1) main start"; then
  export SKUA_TEST_POSTGRES_URL="${SKUA_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
fi
