# Stand-in for postgres:16-bookworm where no registry is reachable (deploy/standin-images.sh):
# Debian's PostgreSQL (15 in bookworm) with the official image's contract that the compose file
# relies on: user postgres uid 999, PGDATA /var/lib/postgresql/data, POSTGRES_USER/PASSWORD/DB
# on first start, openssl and bash (the pki service runs make-dev-certs.sh in this image).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/postgresql --shell /bin/bash postgres \
    && mkdir -p /etc/postgresql-common/createcluster.d \
    && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/no-main.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 postgresql-client-15 openssl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 2777 /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
