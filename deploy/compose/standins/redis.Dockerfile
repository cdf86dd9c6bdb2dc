# Stand-in for redis:7-bookworm where no registry is reachable (deploy/standin-images.sh):
# Debian's Redis (7.0, built with TLS), user redis uid 999 as in the official image, which the
# server drops to when started as root.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN groupadd --system --gid 999 redis \
    && useradd --system --uid 999 --gid 999 --home-dir /data --shell /usr/sbin/nologin redis \
    && apt-get update \
    && apt-get install -y --no-install-recommends redis-server redis-tools \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
WORKDIR /data
COPY drop-root-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV DROP_TO=redis
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["redis-server"]
