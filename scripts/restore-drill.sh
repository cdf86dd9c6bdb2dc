#!/usr/bin/env bash
# A restore drill: the runbook of docs/operations.md ("Back up and restore") run for real
# against a Postgres (issue 32, item 6), so the steps are known to work before they are needed.
#
#   source scripts/services.sh && bash scripts/restore-drill.sh
#
# 1. a fresh database, `skua migrate`, a node (`serve --dev`) whose control plane creates a
#    project (the registry change to get back);
# 2. the node stops; `pg_dump -Fc` of the database (the daily logical dump);
# 3. `pg_restore --no-owner` into a second, empty database; the registry version moved forward
#    by a million (step 2 of the runbook); `skua migrate` on it (what the init containers do);
# 4. a node without --dev on the restored database: ready, and its control plane lists the
#    project created before the dump.
# Prints each step with its time and exits non-zero on the first failure; drops both databases.
#
# Environment: SKUA_TEST_POSTGRES_URL (a Postgres this may create and drop databases on;
# scripts/services.sh sets it), SKUA_BIN (default target/debug/skua, built if missing).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
url=${SKUA_TEST_POSTGRES_URL:?set SKUA_TEST_POSTGRES_URL (source scripts/services.sh)}
bin=${SKUA_BIN:-$root/target/debug/skua}
if [[ ! -x $bin ]]; then
    (cd "$root" && cargo build --quiet -p skua-server)
fi
for tool in psql pg_dump pg_restore python3; do
    command -v "$tool" >/dev/null || { echo "restore drill: $tool is missing" >&2; exit 1; }
done

base=${url%/*}
query=""
[[ $base == *\?* ]] && { query="?${base#*\?}"; base=${base%%\?*}; }
id=$(python3 -c 'import secrets; print(secrets.token_hex(4))')
src=skua_drill_src_$id
dst=skua_drill_dst_$id
work=$(mktemp -d)
key=restore-drill-admin-key-$id
pids=()
t0=$(date +%s)

cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for db in "$src" "$dst"; do
        psql "$url" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

say() { echo "-- [$(($(date +%s) - t0))s] $*"; }
die() { echo "FAIL $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# serve DB LOG [ARGS...]: starts a node on database DB; sets $http and $grpc to its ports.
serve() {
    local db=$1 log=$2
    shift 2
    http=$(free_port)
    grpc=$(free_port)
    (cd "$work" && SKUA_ADMIN_KEY=$key SKUA_METRICS_PUBLIC=true exec "$bin" serve "$@" \
        --store "$base/$db$query" --listen "127.0.0.1:$http" --grpc-listen "127.0.0.1:$grpc" >"$log" 2>&1) &
    pids+=($!)
    local deadline=$(($(date +%s) + 60))
    until python3 - "$http" <<'EOF'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
    do
        (($(date +%s) < deadline)) || { tail -20 "$log" >&2; die "the node on $db was not ready within 60 s"; }
        sleep 0.5
    done
}

stop_node() {
    local p=${pids[-1]}
    kill -TERM "$p"
    wait "$p" || true
    unset 'pids[-1]'
}

admin() { SKUA_ADMIN_KEY=$key "$bin" admin --server "http://127.0.0.1:$grpc" "$@"; }

say "databases $src and $dst on ${base#*@}"
psql "$url" -qc "CREATE DATABASE $src" >/dev/null
psql "$url" -qc "CREATE DATABASE $dst" >/dev/null

say "1. migrate, serve, create project drill-$id"
"$bin" migrate --store "$base/$src$query" >"$work/migrate-src.log" 2>&1 || { cat "$work/migrate-src.log" >&2; die "skua migrate"; }
serve "$src" "$work/serve-src.log" --dev
admin projects create "drill-$id" --name "restore drill" >/dev/null
admin projects list | grep -q "drill-$id" || die "the new project is not listed before the dump"
before=$(psql "$base/$src$query" -Atc "SELECT version FROM registry_version WHERE id = 1")
stop_node

say "2. pg_dump -Fc (registry version $before)"
pg_dump -Fc -d "$base/$src$query" -f "$work/skua.dump"

say "3. pg_restore --no-owner into $dst, registry version + 1000000, migrate"
pg_restore --no-owner -d "$base/$dst$query" "$work/skua.dump"
psql "$base/$dst$query" -qc "UPDATE registry_version SET version = version + 1000000 WHERE id = 1"
after=$(psql "$base/$dst$query" -Atc "SELECT version FROM registry_version WHERE id = 1")
((after == before + 1000000)) || die "registry version $after after the bump, expected $((before + 1000000))"
"$bin" migrate --store "$base/$dst$query" >"$work/migrate-dst.log" 2>&1 || { cat "$work/migrate-dst.log" >&2; die "skua migrate on the restored database"; }

say "4. a node on the restored database (no --dev): ready, the project is there"
serve "$dst" "$work/serve-dst.log"
admin projects list | grep -q "drill-$id" || die "the project created before the dump is missing after the restore"
admin projects create "after-$id" >/dev/null || die "an admin write on the restored database failed"
stop_node
say "passed in $(($(date +%s) - t0))s"
