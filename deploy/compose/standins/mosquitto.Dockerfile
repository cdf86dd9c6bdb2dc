# Stand-in for eclipse-mosquitto:2 where no registry is reachable (deploy/standin-images.sh):
# Debian's Mosquitto 2 and its clients, user mosquitto uid 1883 as in the official image (the
# broker drops to it after reading its configuration as root), /mosquitto/{config,data,log}.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN groupadd --system --gid 1883 mosquitto \
    && useradd --system --uid 1883 --gid 1883 --home-dir /var/lib/mosquitto --shell /usr/sbin/nologin mosquitto \
    && printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update \
    && apt-get install -y --no-install-recommends mosquitto mosquitto-clients \
    && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d \
    && mkdir -p /mosquitto/config /mosquitto/data /mosquitto/log \
    && chown -R mosquitto:mosquitto /mosquitto
EXPOSE 1883 8883
CMD ["/usr/sbin/mosquitto", "-c", "/mosquitto/config/mosquitto.conf"]
