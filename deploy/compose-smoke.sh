#!/usr/bin/env bash
# The compose cluster for real (README "Run a cluster"; deploy/README.md "Compose on this machine"):
# on a machine of the project's kind (Debian, root, no image registry), starts Docker if needed
# (installing Debian's packages), builds the stand-in base images (deploy/standin-images.sh;
# kept between runs) and Skua's image from the real Dockerfile, runs `docker compose up` (or
# Compose v1's `docker-compose up`) on the real docker-compose.yml, waits for health, then checks
# it as a user would:
#   - the README's Python example (interop/readme_example.py) against both edges
#   - `skua admin` against the control node (the image's own binary, on the host network)
#   - /metrics of both edges scraped
#   - `docker compose stop edge-1` drains it: SDK clients behind a load balancer reconnect to
#     edge-2 by themselves and no acknowledged message on a logged topic is lost
#     (deploy/compose/smoke_check.py drain)
#   - `docker compose down -v` leaves no container, network or volume behind
# Prints a short report; exits non-zero on any failure. The host ports are free ones picked at
# start, bound to 127.0.0.1 (the machine may run its own Postgres, Redis, Mosquitto, Skua).
#
#   bash deploy/compose-smoke.sh          (see deploy/compose/lib.sh for the environment)
set -euo pipefail
# shellcheck source=deploy/compose/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/compose/lib.sh"
trap finish EXIT

PROJECT=${SKUA_SMOKE_PROJECT:-skua-smoke}
COMPOSE_FILES=(-f "$root/docker-compose.yml")

must "docker running" ensure_docker
must "images built (stand-in bases, then skua from the Dockerfile)" build_images
must "SDK virtualenv" ensure_venv

export SKUA_BIND_ADDRESS=127.0.0.1
SKUA_EDGE1_PORT=$(free_port) SKUA_EDGE2_PORT=$(free_port) SKUA_CONTROL_PORT=$(free_port)
export SKUA_EDGE1_PORT SKUA_EDGE2_PORT SKUA_CONTROL_PORT
E1=ws://127.0.0.1:$SKUA_EDGE1_PORT/ws
E2=ws://127.0.0.1:$SKUA_EDGE2_PORT/ws
cluster_down # a cluster left by an interrupted run
must "compose up (pki, backends, migrate, edges, control)" compose up -d --no-build
must "every node healthy (edge-1 :$SKUA_EDGE1_PORT, edge-2 :$SKUA_EDGE2_PORT, control :$SKUA_CONTROL_PORT)" \
    wait_healthy edge-1 edge-2 control

readme() {
    local out
    out=$(SKUA_URL=$1 "$PY" interop/readme_example.py) || return 1
    echo "$out"
    grep -q "alice received {'text': 'Hello, Alice!'} from bob" <<<"$out"
}
step "README example on edge-1" readme "$E1"
step "README example on edge-2" readme "$E2"

admin() {
    "$DOCKER" run --rm --network host -e SKUA_ADMIN_SERVER="http://127.0.0.1:$SKUA_CONTROL_PORT" \
        -e SKUA_ADMIN_KEY=skua-dev-admin-key "$SKUA_IMAGE" admin "$@"
}
admin_check() {
    local out
    out=$(admin projects list) && echo "$out" && grep -q demo-project <<<"$out" &&
        admin apps list && admin connections list >/dev/null
}
step "skua admin against control (projects, apps, connections)" admin_check

metrics() {
    local port out
    for port in "$SKUA_EDGE1_PORT" "$SKUA_EDGE2_PORT"; do
        out=$(curl -fsS "http://127.0.0.1:$port/metrics") || return 1
        grep -E '^skua_(connections|ready|publishes_total)' <<<"$out" | head -n 3
        grep -q '^skua_ready 1' <<<"$out" || return 1
    done
}
step "/metrics scraped on both edges (skua_ready 1)" metrics

drained() {
    "$PY" deploy/compose/smoke_check.py drain --edges "$E1,$E2" --stop "${COMPOSE[*]} -p $PROJECT ${COMPOSE_FILES[*]} stop edge-1" || return 1
    local code
    code=$("$DOCKER" inspect -f '{{.State.ExitCode}}' "$(cid edge-1)")
    echo "edge-1 exited $code"
    [[ $code == 0 ]]
}
step "stop edge-1: drained, SDK clients reconnect to edge-2, no acknowledged logged message lost" drained

take_down
finish
