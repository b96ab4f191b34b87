# HAProxy from Debian's package, for the balancer of docker-compose.replicas.yml (no other
# registry needed: any Debian bookworm image works as the base).
#
#   docker build -f deploy/compose/haproxy.Dockerfile -t nmt-haproxy .
#
# Build argument BASE_IMAGE: the Debian image to start from (default debian:bookworm-slim).
# The configuration is mounted at run time (deploy/compose/haproxy.cfg), not baked in.

ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

RUN set -eu; \
    apt-get update -q; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends haproxy; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    haproxy -v

LABEL org.opencontainers.image.title="nmt-haproxy" \
      org.opencontainers.image.description="HAProxy (Debian's package) in front of nmt-service replicas"

# the package's own unprivileged user; the port is above 1024
USER haproxy:haproxy
EXPOSE 8000
# SIGUSR1: soft stop, connections in flight finish
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
