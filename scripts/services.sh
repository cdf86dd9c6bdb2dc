#!/usr/bin/env bash
# Sourced by scripts/test.sh: makes sure the services the tests use are running on this
# machine (Mosquitto 1883, Redis 6379, PostgreSQL 5432) and exports the URLs the tests read.
#   - A service already answering on its port is used as it is (never restarted, never changed).
#   - One that is installed but down is started with the machine's documented commands.
#   - One that is not installed is installed from Debian's packages (mosquitto, redis-server,
#     postgresql) and started, when this runs as root on a machine with apt-get; a PostgreSQL
#     installed here also gets the test setup the URL below assumes (user postgres trusted on
#     127.0.0.1 and ::1 only, database `test`). SKUA_TEST_NO_INSTALL=1 turns installing off.
# Also Debian's chromium and chromium-driver for the dashboard's browser test (installed the same way).
# A service that still cannot be reached is left unset, so its tests skip loudly — except under
# CI=true, where scripts/test.sh fails.

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_up() {
    for _ in $(seq 1 50); do up "$1" && return 0; sleep 0.2; done
    return 1
}

# can_install: root, apt-get, and installing not turned off.
can_install() {
    [[ $(id -u) == 0 && ${SKUA_TEST_NO_INSTALL:-} != 1 ]] && command -v apt-get >/dev/null 2>&1
}

apt_updated=0
# install PACKAGE...: from Debian's packages, without starting anything through init scripts
# (this script starts what it needs itself).
install() {
    echo "services: installing $* from Debian's packages" >&2
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    if ((apt_updated == 0)); then
        apt-get update -q >/dev/null 2>&1 || true
        apt_updated=1
    fi
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 || rc=$?
    ((own_policy)) && rm -f "$policy"
    return "$rc"
}

# The PostgreSQL cluster's version directory (/etc/postgresql/<version>), if any.
pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n1; }

# Test setup of a cluster this script installed: postgres trusted on the loopback addresses
# only, and the database `test`.
pg_test_setup() {
    local v=$1 hba
    hba=/etc/postgresql/$v/main/pg_hba.conf
    [[ -f $hba ]] || return 1
    if ! grep -q '^# skua test setup' "$hba"; then
        local tmp
        tmp=$(mktemp)
        {
            echo "# skua test setup (scripts/services.sh): postgres without a password on loopback only"
            echo "host all postgres 127.0.0.1/32 trust"
            echo "host all postgres ::1/128 trust"
            cat "$hba"
        } >"$tmp" && cat "$tmp" >"$hba" && rm -f "$tmp"
    fi
}

start_mosquitto() {
    mkdir -p /run/mosquitto && chown mosquitto: /run/mosquitto 2>/dev/null
    mosquitto -d -c /etc/mosquitto/mosquitto.conf
}
start_redis() {
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
}
start_postgres() {
    local v
    v=$(pg_version)
    [[ -n $v ]] || return 1
    if [[ ! -d /etc/postgresql/$v/main ]]; then
        pg_createcluster "$v" main >/dev/null || return 1
    fi
    if [[ ${installed_postgres:-0} == 1 ]]; then pg_test_setup "$v" || return 1; fi
    mkdir -p /var/run/postgresql && chown postgres: /var/run/postgresql
    pg_ctlcluster --skip-systemctl-redirect "$v" main start
}

# ensure NAME PORT COMMAND PACKAGE...: up, or started, or installed then started.
ensure() {
    local name=$1 port=$2 cmd=$3
    shift 3
    if up "$port"; then return 0; fi
    if ! command -v "$cmd" >/dev/null 2>&1; then
        if can_install; then
            install "$@" || echo "services: installing $* failed" >&2
            [[ $name == postgres ]] && installed_postgres=1
        else
            echo "services: $name is not installed (as root with apt-get this script installs $*)" >&2
        fi
    fi
    if command -v "$cmd" >/dev/null 2>&1; then
        echo "services: $name is down; starting it" >&2
        "start_$name" >/dev/null 2>&1 || true
        wait_up "$port" && return 0
    fi
    echo "services: $name is not reachable on 127.0.0.1:$port" >&2
    return 1
}

# PATH for pg_ctlcluster and pg_createcluster (Debian's postgresql-common).
PATH=$PATH:/usr/sbin:/sbin

if ensure mosquitto 1883 mosquitto mosquitto; then
    export SKUA_TEST_MQTT_URL="${SKUA_TEST_MQTT_URL:-mqtt://127.0.0.1:1883}"
fi
if ensure redis 6379 redis-server redis-server; then
    export SKUA_TEST_REDIS_URL="${SKUA_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
fi
if ensure postgres 5432 pg_ctlcluster postgresql postgresql-client; then
    if [[ ${installed_postgres:-0} == 1 ]]; then
        su postgres -c "psql -Atqc \"SELECT 1 FROM pg_database WHERE datname = 'test'\"" | grep -q 1 ||
            su postgres -c "createdb test" || echo "services: could not create the database test" >&2
    fi
    export SKUA_TEST_POSTGRES_URL="${SKUA_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
fi

# The admin dashboard's browser test (interop/test_dashboard.py) drives Debian's chromium
# through chromium-driver: installed like the services when missing. Without them that test
# skips loudly, and fails under CI=true.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if can_install; then
        install chromium chromium-driver || echo "services: installing chromium chromium-driver failed" >&2
    else
        echo "services: chromium and chromium-driver are not installed (as root with apt-get this script installs them); the dashboard's browser test will skip" >&2
    fi
fi
