# Multi-stage build of the skua binary. The runtime image is Debian slim with the binary only:
# no compiler, no package manager cache, a non-root user (uid 10001).
#   docker build -t skua:local .
# Two targets share the runtime stage `runtime-base`: the default one (last, `runtime`) compiles
# Skua in the `build` stage; `prebuilt` packages a binary built beforehand on a machine like the
# image's base (Debian bookworm, glibc 2.36), given as the only file of a small context:
#   ctx=$(mktemp -d) && cp target/debug/skua "$ctx/" && docker build --target prebuilt -f Dockerfile -t skua:ci "$ctx"
# (`--build-arg SKUA_BINARY=<file name>` when it is not `skua`). scripts/test.sh has
# deploy/compose-smoke.sh do that with the binary the test run built (SKUA_SMOKE_PREBUILT;
# deploy/README.md, "Compose in CI").
# No `# syntax=` line: the Dockerfile frontend built into Docker Engine 20.10 and later (BuildKit,
# DOCKER_BUILDKIT=1 or buildx) reads it without pulling one. The base images are build arguments,
# so a machine that reaches no registry can name images it built itself
# (deploy/standin-images.sh; deploy/README.md "Compose on this machine").
ARG BUILDER_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILDER_IMAGE} AS build
# The commit built, for skua_build_info{git_sha} (read by the compiler: a new value rebuilds
# skua-server): `docker build --build-arg SKUA_GIT_SHA="$(git rev-parse HEAD)" …`.
ARG SKUA_GIT_SHA=unknown
WORKDIR /src
COPY . .
# Cache mounts keep the crates.io index, downloaded crates and compiled dependencies between
# builds, which is what makes a rebuild after a source change take seconds instead of minutes.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    SKUA_GIT_SHA="${SKUA_GIT_SHA}" cargo build --release --locked -p skua-server \
    && cp target/release/skua /usr/local/bin/skua \
    && strip /usr/local/bin/skua

FROM ${RUNTIME_IMAGE} AS runtime-base
# ca-certificates: the system roots, which webhooks over HTTPS and backends with a public CA
# (managed Postgres/Redis without sslrootcert) verify against; without any, Skua refuses to
# start ("No CA certificates were loaded from the system"). Unpinned on purpose: the security
# updates of the base image's release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin skua \
    && mkdir -p /var/lib/skua \
    && chown 10001:10001 /var/lib/skua
USER 10001:10001
# The default SQLite store (skua-data/skua.db) is created here when no --store is given.
WORKDIR /var/lib/skua
# 8080: WebSocket /ws, /healthz, /readyz, /metrics. 50051: control-plane gRPC (when enabled).
EXPOSE 8080 50051
STOPSIGNAL SIGTERM
# Liveness only; orchestrators check /readyz themselves. bash's /dev/tcp needs no curl in the
# image, and speaks no TLS: on the listener's port (SKUA_LISTEN, default 8080) it asks
# /healthz for a 200 over plain HTTP, or, with TLS on (SKUA_TLS_CERT set), checks that the
# listener accepts (a plain-HTTP request would fail the handshake).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/bin/bash", "-c", "port=\"${SKUA_LISTEN##*:}\"; exec 3<>\"/dev/tcp/127.0.0.1/${port:-8080}\" || exit 1; if [ -n \"${SKUA_TLS_CERT:-}\" ]; then exit 0; fi; printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q ' 200 ' <&3"]
ENTRYPOINT ["/usr/local/bin/skua"]
# Plain `serve`: with no arguments the image loads no demo project and no well-known dev tokens
# into the store it is given. The demo (`serve --dev`) is asked for explicitly, as
# docker-compose.yml does for the local cluster.
CMD ["serve"]

# A binary built beforehand (see the top): the test run's, for the compose smoke run in CI.
FROM runtime-base AS prebuilt
ARG SKUA_BINARY=skua
COPY ${SKUA_BINARY} /usr/local/bin/skua

# The default target, last: Skua compiled by the build stage above.
FROM runtime-base AS runtime
COPY --from=build /usr/local/bin/skua /usr/local/bin/skua
