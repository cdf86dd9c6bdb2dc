# Shared by deploy/compose-smoke.sh and deploy/compose-cluster.sh (sourced): Docker set up on a
# machine of the project's kind, the stand-in base images, Skua's image, the compose project's
# life cycle, a short report.
#
# Environment:
#   SKUA_SMOKE_STANDINS=0   use the public images (a registry is reachable) instead of the local
#                           stand-ins of deploy/standin-images.sh (the default: no registry here)
#   SKUA_SMOKE_KEEP=1       leave the cluster running at the end (default: `down -v`)
#   SKUA_SMOKE_BUILD=0      use the image SKUA_IMAGE (default skua:local) as it is, unbuilt
#   SKUA_SMOKE_PREBUILT=F   package the Skua binary F (built beforehand on this machine, e.g.
#                           target/debug/skua) with the Dockerfile's `prebuilt` target instead of
#                           compiling it in Docker (what scripts/test.sh does in CI); the
#                           stand-in Rust builder is then not needed either
#   SKUA_SMOKE_TIMEOUT      seconds to wait for every node to be healthy (default 300)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

report=()
failed=0
t_start=$(date +%s)
note() { report+=("$*"); echo "-- $*"; }
pass() { note "ok   $*"; }
fail() {
    note "FAIL $*"
    failed=1
}
# step NAME COMMAND...: runs it, timed; a failure is reported and the run goes on.
step() {
    local name=$1 t0 rc
    shift
    t0=$(date +%s)
    echo "== $name"
    set +e
    "$@"
    rc=$?
    set -e
    if ((rc == 0)); then pass "$name ($(($(date +%s) - t0))s)"; else fail "$name ($(($(date +%s) - t0))s, exit $rc)"; fi
    return 0
}
# must NAME COMMAND...: as step, but the run cannot go on without it.
must() {
    step "$@"
    ((failed == 0)) || finish
}

print_report() {
    echo
    echo "== report: $(basename "$0"), $(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - t_start))s in all, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '  %s\n' "${report[@]}"
    if ((failed)); then echo "== FAILED"; else echo "== passed"; fi
}

# Docker: Debian's packages (docker.io, docker-compose) installed when missing and the daemon
# started when it is not running, both as root only. /usr/bin/docker is Debian's CLI; a newer
# one earlier in PATH may lack buildx and fail BuildKit builds.
ensure_docker() {
    DOCKER=/usr/bin/docker
    local as_root=0
    [[ $(id -u) == 0 ]] && as_root=1
    if [[ ! -x $DOCKER ]] || ! command -v debootstrap >/dev/null ||
        { ! command -v docker-compose >/dev/null && ! "$DOCKER" compose version >/dev/null 2>&1; }; then
        if ((as_root)) && command -v apt-get >/dev/null; then
            echo "docker: installing Debian's docker.io, docker-compose, debootstrap"
            # Waits up to 5 minutes for the dpkg lock (unattended-upgrades or another install on a
            # fresh machine) instead of failing at once.
            local apt=(apt-get -o DPkg::Lock::Timeout=300)
            DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q docker.io docker-compose debootstrap >/dev/null ||
                { "${apt[@]}" update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q docker.io docker-compose debootstrap >/dev/null; }
        else
            echo "docker: /usr/bin/docker, docker-compose or debootstrap missing (as root this script installs them)" >&2
            return 1
        fi
    fi
    if ! "$DOCKER" info >/dev/null 2>&1; then
        if ((as_root)) && command -v dockerd >/dev/null; then
            echo "docker: starting dockerd (log /var/log/skua-dockerd.log)"
            nohup dockerd >/var/log/skua-dockerd.log 2>&1 &
            for _ in $(seq 1 60); do
                "$DOCKER" info >/dev/null 2>&1 && break
                sleep 0.5
            done
        fi
        "$DOCKER" info >/dev/null 2>&1 || { echo "docker: the daemon is not running" >&2; return 1; }
    fi
    if "$DOCKER" compose version >/dev/null 2>&1; then
        COMPOSE=("$DOCKER" compose)
    else
        COMPOSE=(docker-compose) # Compose v1 (Debian): the same file, no `up --wait`
    fi
    export DOCKER
    echo "docker: $("$DOCKER" version -f '{{.Server.Version}}'), $("${COMPOSE[@]}" version --short 2>/dev/null || true)"
}

# The images: stand-ins (or the public ones), then Skua's image from the real Dockerfile.
build_images() {
    export SKUA_IMAGE=${SKUA_IMAGE:-skua:local}
    local args=()
    if [[ ${SKUA_SMOKE_STANDINS:-1} != 0 ]]; then
        # shellcheck source=deploy/standin-images.sh
        source "$root/deploy/standin-images.sh"
        if [[ -n ${SKUA_SMOKE_PREBUILT:-} ]]; then standin_build no-builder || return 1; else standin_build || return 1; fi
        args=(--build-arg "BUILDER_IMAGE=$SKUA_BUILDER_IMAGE" --build-arg "RUNTIME_IMAGE=$SKUA_RUNTIME_IMAGE")
    fi
    if [[ ${SKUA_SMOKE_BUILD:-1} == 0 ]]; then
        echo "SKUA_SMOKE_BUILD=0: $SKUA_IMAGE as it is"
        "$DOCKER" image inspect "$SKUA_IMAGE" >/dev/null
        return
    fi
    if [[ -n ${SKUA_SMOKE_PREBUILT:-} ]]; then
        # The binary alone is the context: the Dockerfile's `prebuilt` target copies it.
        [[ -x $SKUA_SMOKE_PREBUILT ]] || { echo "SKUA_SMOKE_PREBUILT=$SKUA_SMOKE_PREBUILT: no such binary" >&2; return 1; }
        local ctx rc=0
        ctx=$(mktemp -d /var/tmp/skua-prebuilt.XXXXXX)
        cp "$SKUA_SMOKE_PREBUILT" "$ctx/skua"
        echo "image: $SKUA_SMOKE_PREBUILT packaged (Dockerfile target prebuilt)"
        DOCKER_BUILDKIT=1 "$DOCKER" build -q "${args[@]}" --target prebuilt -f "$root/Dockerfile" -t "$SKUA_IMAGE" "$ctx" >/dev/null || rc=$?
        rm -rf "$ctx"
        return "$rc"
    fi
    DOCKER_BUILDKIT=1 "$DOCKER" build -q "${args[@]}" -t "$SKUA_IMAGE" "$root" >/dev/null
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The SDK's virtualenv (interop/.venv, as interop/run.sh makes it).
ensure_venv() {
    local venv="$root/interop/.venv"
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/interop/requirements.txt"
    PY="$venv/bin/python"
    export PYTHONDONTWRITEBYTECODE=1
}

compose() { "${COMPOSE[@]}" -p "$PROJECT" "${COMPOSE_FILES[@]}" "$@"; }

cid() { compose ps -q "$1"; }

# wait_healthy SERVICE...: every one reports healthy (Compose v1 has no `up --wait`).
wait_healthy() {
    local deadline=$(($(date +%s) + ${SKUA_SMOKE_TIMEOUT:-300})) svc status
    for svc in "$@"; do
        while :; do
            status=$("$DOCKER" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$(cid "$svc")" 2>/dev/null || echo missing)
            [[ $status == healthy ]] && break
            if (($(date +%s) > deadline)) || [[ $status == exited || $status == missing ]]; then
                echo "$svc: $status" >&2
                return 1
            fi
            sleep 1
        done
    done
}

# down_clean: `compose down -v`, then nothing of the project may be left.
down_clean() {
    compose down -v --remove-orphans || return 1
    local left
    left=$("$DOCKER" ps -aq --filter "label=com.docker.compose.project=$PROJECT"
        "$DOCKER" volume ls -q --filter "label=com.docker.compose.project=$PROJECT"
        "$DOCKER" network ls -q --filter "label=com.docker.compose.project=$PROJECT")
    [[ -z $left ]] || { echo "left behind: $left" >&2; return 1; }
    PROJECT_DOWN=1
}

# last_logs: the nodes' last log lines, while the project still exists (after a failure).
last_logs() {
    ((failed)) || return 0
    [[ -z ${PROJECT_DOWN:-} && -n ${PROJECT:-} && -n ${COMPOSE:-} ]] || return 0
    [[ -z ${LOGS_SHOWN:-} ]] || return 0
    LOGS_SHOWN=1
    echo "== last logs"
    compose logs --no-color --tail 30 2>&1 | tail -n 150 || true
}

# take_down: the scripts' last step. After a failure the last logs first (the project must
# still exist to have any); with SKUA_SMOKE_KEEP=1 the cluster is left running and the report
# says so; otherwise `down -v` and nothing of the project may be left.
take_down() {
    last_logs
    if [[ ${SKUA_SMOKE_KEEP:-} == 1 ]]; then
        note "kept SKUA_SMOKE_KEEP=1: the cluster $PROJECT is left running (${COMPOSE[*]} -p $PROJECT ${COMPOSE_FILES[*]} down -v)"
        KEPT=1
        return 0
    fi
    step "compose down -v: nothing left" down_clean
}

cluster_down() {
    [[ -z ${PROJECT_DOWN:-} && -z ${KEPT:-} ]] || return 0
    [[ -n ${PROJECT:-} && -n ${COMPOSE:-} ]] || return 0
    if [[ ${SKUA_SMOKE_KEEP:-} == 1 ]]; then
        echo "SKUA_SMOKE_KEEP=1: the cluster $PROJECT is left running (${COMPOSE[*]} -p $PROJECT ${COMPOSE_FILES[*]} down -v)"
        return 0
    fi
    compose down -v --remove-orphans >/dev/null 2>&1 || true
}

finish() {
    # An early exit (a failed set-up step, an interrupt) has not shown them yet.
    last_logs
    cluster_down
    print_report
    trap - EXIT
    exit "$failed"
}
