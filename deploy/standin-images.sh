#!/usr/bin/env bash
# Builds local stand-ins for the public base images the Dockerfile and docker-compose.yml use,
# for machines that reach no image registry (compose-smoke.sh and compose-cluster.sh source it).
# Nothing here is committed as an image: the recipes are deploy/compose/standins/*, the images
# are built on this machine, and kept between runs (an image whose recipe has not changed is
# not built again, the one it replaces is removed; SKUA_STANDIN_REBUILD=1 builds every one anew).
#
#   skua-standin/debian:bookworm-slim   debootstrap --variant=minbase bookworm from the machine's
#                                       Debian mirror, imported with `docker import`
#   skua-standin/postgres:15-bookworm   Debian's PostgreSQL 15 (the official 16 is not in bookworm)
#   skua-standin/redis:7-bookworm       Debian's Redis 7.0
#   skua-standin/mosquitto:2-bookworm   Debian's Mosquitto 2.0
#   skua-standin/rust:<ver>-bookworm    the machine's Rust toolchain, its extra CA certificates
#
# Sourcing it sets the SKUA_*_IMAGE variables docker-compose.yml and the Dockerfile's build
# arguments read; `standin_build` builds what is missing. Run directly, it does both and prints
# the variables.

STANDIN_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/compose/standins"
DOCKER=${DOCKER:-/usr/bin/docker}
rust_version=$(rustc --version 2>/dev/null | awk '{print $2}')
rust_version=${rust_version:-none}

export SKUA_RUNTIME_IMAGE=skua-standin/debian:bookworm-slim
export SKUA_POSTGRES_IMAGE=skua-standin/postgres:15-bookworm
export SKUA_REDIS_IMAGE=skua-standin/redis:7-bookworm
export SKUA_MQTT_IMAGE=skua-standin/mosquitto:2-bookworm
export SKUA_BUILDER_IMAGE=skua-standin/rust:$rust_version-bookworm

# The machine's Debian mirror (first deb.debian.org-style URI in its apt sources).
standin_mirror() {
    local m
    m=$(grep -rhoE '^(URIs:|deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?https?://[^[:space:]]+/debian/?([[:space:]]|$)' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | grep -oE 'https?://[^[:space:]]+' | head -n1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

# standin_current IMAGE KEY: the image exists and was built from the recipe KEY.
standin_current() {
    [[ ${SKUA_STANDIN_REBUILD:-} != 1 ]] || return 1
    [[ $("$DOCKER" image inspect -f '{{ index .Config.Labels "skua.standin.recipe" }}' "$1" 2>/dev/null) == "$2" ]]
}

standin_key() { cat "$@" | sha256sum | cut -c1-16; }

standin_base() {
    local key
    key=$(echo "minbase bookworm v1" | sha256sum | cut -c1-16)
    standin_current "$SKUA_RUNTIME_IMAGE" "$key" && return 0
    command -v debootstrap >/dev/null || {
        echo "standin: debootstrap is missing (apt-get install debootstrap)" >&2
        return 1
    }
    local root
    root=$(mktemp -d /var/tmp/skua-standin-rootfs.XXXXXX)
    echo "standin: debootstrap --variant=minbase bookworm from $(standin_mirror)"
    if ! debootstrap --variant=minbase bookworm "$root" "$(standin_mirror)" >"$root.log" 2>&1; then
        tail -n 20 "$root.log" >&2
        rm -rf "$root" "$root.log"
        return 1
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | "$DOCKER" import \
        -c 'CMD ["bash"]' -c "LABEL skua.standin.recipe=$key" - "$SKUA_RUNTIME_IMAGE" >/dev/null
    rm -rf "$root" "$root.log"
}

# standin_from NAME IMAGE [CONTEXT]: builds deploy/compose/standins/NAME.Dockerfile; the recipe
# is the Dockerfile, the files it copies and, for the builder, the toolchain's version.
standin_from() {
    local name=$1 image=$2 ctx=${3:-$STANDIN_DIR} key files
    files=$(grep -oE '^COPY [a-z-]+\.sh' "$STANDIN_DIR/$name.Dockerfile" | sed "s|^COPY |$STANDIN_DIR/|")
    # shellcheck disable=SC2086
    key=$(standin_key "$STANDIN_DIR/$name.Dockerfile" $files <(echo "$name" "$rust_version"))
    standin_current "$image" "$key" && return 0
    echo "standin: building $image"
    "$DOCKER" build -q --label "skua.standin.recipe=$key" --build-arg "BASE_IMAGE=$SKUA_RUNTIME_IMAGE" \
        -f "$STANDIN_DIR/$name.Dockerfile" -t "$image" "$ctx" >/dev/null
}

# The builder's context: the toolchain of `rustc` on PATH (without its docs) and the machine's
# extra CA certificates.
standin_rust() {
    local key sysroot ctx
    key=$(standin_key "$STANDIN_DIR/rust.Dockerfile" <(echo rust "$rust_version"))
    standin_current "$SKUA_BUILDER_IMAGE" "$key" && return 0
    sysroot=$(rustc --print sysroot)
    ctx=$(mktemp -d /var/tmp/skua-standin-rust.XXXXXX)
    mkdir -p "$ctx/certs" "$ctx/toolchain"
    cp /usr/local/share/ca-certificates/*.crt "$ctx/certs/" 2>/dev/null || true
    cp -a "$sysroot/bin" "$sysroot/lib" "$ctx/toolchain/" || { rm -rf "$ctx"; return 1; }
    if [[ -d $sysroot/libexec ]]; then cp -a "$sysroot/libexec" "$ctx/toolchain/"; fi
    standin_from rust "$SKUA_BUILDER_IMAGE" "$ctx" || { rm -rf "$ctx"; return 1; }
    rm -rf "$ctx"
}

# standin_build [no-builder]: every stand-in; `no-builder` leaves out the Rust builder (an image
# made from a binary built beforehand needs none).
standin_build() {
    standin_base &&
        standin_from postgres "$SKUA_POSTGRES_IMAGE" &&
        standin_from redis "$SKUA_REDIS_IMAGE" &&
        standin_from mosquitto "$SKUA_MQTT_IMAGE" &&
        { [[ ${1:-} == no-builder ]] || standin_rust; } &&
        { "$DOCKER" image prune -f --filter label=skua.standin.recipe >/dev/null 2>&1 || true; }
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    standin_build
    env | grep -E '^SKUA_(RUNTIME|POSTGRES|REDIS|MQTT|BUILDER)_IMAGE=' | sed 's/^/export /'
fi
