#!/usr/bin/env bash
# A partition test of a Skua cluster in containers (issue 17 item 5; deploy/README.md "Compose
# on this machine"): docker-compose.yml plus deploy/compose/cluster.yml, i.e. three edges, the
# control node, Mosquitto, Redis and Postgres on one private Docker network at fixed addresses,
# with the SDK clients on the host (a bridge network is routed to its host) behind a small load
# balancer (deploy/compose/smoke_check.py). Then:
#   1. presence: one member per edge in room general; edge-1 is cut off the network
#      (`docker network disconnect`); the other edges see its member leave (edge-1's node
#      registration lapses) and join again once its SDK client has reconnected to a live edge;
#      edge-1 is connected again and rejoins (a new client of it is seen by the others)
#   2. logged messages: SDK clients publish and subscribe through the balancer on edge-2 while
#      it is cut off; they reconnect elsewhere, and every message acknowledged on the logged
#      topic reaches the subscriber on edge-3; edge-2 is connected again
# Images, Docker set up and the report as deploy/compose-smoke.sh (deploy/compose/lib.sh).
#
#   bash deploy/compose-cluster.sh
set -euo pipefail
# shellcheck source=deploy/compose/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/compose/lib.sh"
trap finish EXIT

PROJECT=${SKUA_CLUSTER_PROJECT:-skua-cluster}
COMPOSE_FILES=(-f "$root/docker-compose.yml" -f "$root/deploy/compose/cluster.yml")
export SKUA_CLUSTER_NET=${SKUA_CLUSTER_NET:-10.231.17}

must "docker running" ensure_docker
must "images built (stand-in bases, then skua from the Dockerfile)" build_images
must "SDK virtualenv" ensure_venv

export SKUA_BIND_ADDRESS=127.0.0.1
SKUA_EDGE1_PORT=$(free_port) SKUA_EDGE2_PORT=$(free_port) SKUA_CONTROL_PORT=$(free_port)
export SKUA_EDGE1_PORT SKUA_EDGE2_PORT SKUA_CONTROL_PORT
cluster_down # a cluster left by an interrupted run
must "compose up (3 edges, control, Postgres, Redis, Mosquitto on $SKUA_CLUSTER_NET.0/24)" compose up -d --no-build
must "every node healthy" wait_healthy edge-1 edge-2 edge-3 control

net=$("$DOCKER" inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$(cid edge-1)")
url() { echo "ws://$SKUA_CLUSTER_NET.1$1:8080/ws"; }
cut_cmd() { echo "$DOCKER network disconnect $net $(cid "edge-$1")"; }
heal_cmd() { echo "$DOCKER network connect --ip $SKUA_CLUSTER_NET.1$1 --alias edge-$1 $net $(cid "edge-$1")"; }

step "edge-1 cut off: presence heals, its client moves, it rejoins when connected again" \
    "$PY" deploy/compose/smoke_check.py presence --edges "$(url 1),$(url 2),$(url 3)" --cut-edge 0 \
    --cut "$(cut_cmd 1)" --heal "$(heal_cmd 1)"
step "edge-2 cut off while clients publish: they reconnect elsewhere, no acknowledged logged message lost" \
    "$PY" deploy/compose/smoke_check.py drain --edges "$(url 2),$(url 1),$(url 3)" --stable "$(url 3)" \
    --stop "$(cut_cmd 2)" --heal "$(heal_cmd 2)"
step "edge-2 healthy again after it was connected again" wait_healthy edge-2

take_down
finish
