#!/usr/bin/env bash
# Prepare a Docker engine for the container smoke test (tests/docker/test_container.py) on a
# machine that has none running and reaches no image registry:
#   1. install docker.io (engine + BuildKit-capable client), debootstrap and docker-compose
#      from Debian's packages (skipped when already installed);
#   2. start dockerd without a bridge or iptables rules (containers use --network host);
#   3. build a stand-in for python:3.11-slim from Debian bookworm packages with debootstrap,
#      import it as $NMT_BASE_IMAGE (default nmt-base:bookworm) - cached: skipped if it exists.
# Idempotent. Needs root. The Debian mirror is read from this machine's apt sources at run time.
# Prints the docker client to use (the docker.io one) on its last line: DOCKER=/usr/bin/docker.
set -euo pipefail

BASE_IMAGE="${NMT_BASE_IMAGE:-nmt-base:bookworm}"
DOCKER=/usr/bin/docker            # docker.io's own client; a newer one may be first on PATH
LOG_DIR="${NMT_DOCKER_LOG_DIR:-/var/log}"
SUITE=bookworm

log() { echo "setup_engine: $*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
    log "must run as root"; exit 1
fi

apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # other jobs on this machine may hold the dpkg lock: wait for it instead of failing
    apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

apt_install docker.io debootstrap docker-compose ca-certificates

# --- the engine -------------------------------------------------------------------------------
if ! "$DOCKER" info >/dev/null 2>&1; then
    if ! pgrep -x containerd >/dev/null; then
        log "starting containerd"
        nohup containerd >"$LOG_DIR/containerd.log" 2>&1 &
        sleep 2
    fi
    log "starting dockerd (log: $LOG_DIR/dockerd.log)"
    nohup dockerd --bridge=none --iptables=false --ip6tables=false \
        --containerd=/run/containerd/containerd.sock >"$LOG_DIR/dockerd.log" 2>&1 &
    for _ in $(seq 1 60); do
        "$DOCKER" info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! "$DOCKER" info >/dev/null 2>&1; then
        log "dockerd did not come up; last lines of its log:"
        tail -20 "$LOG_DIR/dockerd.log" >&2 || true
        exit 1
    fi
fi

# --- the stand-in base image ------------------------------------------------------------------
debian_mirror() {
    # the first "deb" URI of the main Debian archive that apt on this machine uses
    local uri
    uri=$(grep -h -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '{print $2}' | grep -v -E 'security|updates' | grep -E '/debian/?$' | head -1 || true)
    if [[ -z "$uri" && -f /etc/apt/sources.list ]]; then
        uri=$(grep -h -E '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '{print $2}' | grep -v security | grep -E '/debian/?$' | head -1 || true)
    fi
    echo "$uri"
}

if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base image $BASE_IMAGE present (cached)"
else
    MIRROR=$(debian_mirror)
    if [[ -z "$MIRROR" ]]; then
        log "no Debian mirror found in /etc/apt/sources.list*"; exit 1
    fi
    ROOTFS=$(mktemp -d /var/tmp/nmt-rootfs.XXXXXX)
    trap 'rm -rf "$ROOTFS"' EXIT
    log "debootstrap $SUITE into $ROOTFS (a few minutes)"
    # python3.11 + venv + pip: what the Dockerfile needs from python:3.11-slim
    nice -n 10 debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates \
        "$SUITE" "$ROOTFS" "$MIRROR" >"$LOG_DIR/nmt-debootstrap.log" 2>&1 || {
        log "debootstrap failed; last lines:"; tail -20 "$LOG_DIR/nmt-debootstrap.log" >&2; exit 1; }
    # make it look like python:3.11-slim where the Dockerfile relies on it: `python`, `pip`
    # on PATH. Debian marks its python "externally managed": the Dockerfile uses a venv anyway.
    ln -sf /usr/bin/python3 "$ROOTFS/usr/local/bin/python"
    ln -sf /usr/bin/pip3 "$ROOTFS/usr/local/bin/pip"
    chroot "$ROOTFS" apt-get clean
    rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin
    log "importing as $BASE_IMAGE"
    tar -C "$ROOTFS" -c . | "$DOCKER" import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'ENV LANG=C.UTF-8' \
        -c 'CMD ["python3"]' \
        - "$BASE_IMAGE" >/dev/null
    rm -rf "$ROOTFS"
    trap - EXIT
fi

echo "DOCKER=$DOCKER"
