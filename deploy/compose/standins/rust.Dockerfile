# Stand-in for rust:<version>-bookworm where no registry is reachable (deploy/standin-images.sh):
# the machine's own Rust toolchain (copied into the build context as toolchain/) on Debian with
# a C compiler, and the machine's extra CA certificates (certs/) trusted, so cargo can fetch
# crates through an intercepting proxy. Layout as in the official image: CARGO_HOME
# /usr/local/cargo, cargo and rustc on PATH.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev make pkg-config ca-certificates git binutils \
    && rm -rf /var/lib/apt/lists/*
COPY certs/ /usr/local/share/ca-certificates/
RUN update-ca-certificates
COPY toolchain/ /usr/local/rust/
ENV CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:/usr/local/rust/bin:$PATH
RUN mkdir -p /usr/local/cargo/bin && rustc --version && cargo --version
