# Multi-stage build of the skua binary; the runtime image has no build tools and runs as non-root.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p skua-server && strip target/release/skua

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 skua && mkdir -p /var/lib/skua && chown skua /var/lib/skua
COPY --from=build /src/target/release/skua /usr/local/bin/skua
USER skua
# The default SQLite store (skua-data/skua.db) is created here.
WORKDIR /var/lib/skua
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/skua"]
CMD ["serve", "--dev"]
