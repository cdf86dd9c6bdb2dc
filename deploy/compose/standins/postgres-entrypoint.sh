#!/usr/bin/env bash
# The stand-in postgres image's entrypoint: the part of the official image's docker-entrypoint.sh
# the compose file uses. On an empty PGDATA: initdb (SCRAM), then a socket-only server
# (listen_addresses='') creates POSTGRES_DB and stops, so nothing on TCP answers before the
# initialisation is over. Then the server runs as postgres with the given arguments.
set -euo pipefail
if [[ ${1:-} == postgres && $(id -u) == 0 ]]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [[ ${1:-} == postgres && ! -s $PGDATA/PG_VERSION ]]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
    user=${POSTGRES_USER:-postgres}
    db=${POSTGRES_DB:-$user}
    initdb --username="$user" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
    # As the official image: every interface (Debian's default is localhost only).
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    shift
    pg_ctl -D "$PGDATA" -w -o "$(printf '%q ' "$@") -c listen_addresses=''" start >/dev/null
    if [[ $db != postgres ]]; then
        psql -v ON_ERROR_STOP=1 --username "$user" --dbname postgres -qc "CREATE DATABASE \"$db\""
    fi
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "postgres stand-in: initialised $PGDATA (user $user, database $db)"
    set -- postgres "$@"
fi
exec "$@"
