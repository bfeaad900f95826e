#!/usr/bin/env bash
# Install and start a Docker daemon, then build the sandbox image offline (no registry).
# Safe to rerun: skips what is already there. Needs root. Usage: bash .ci/setup_docker.sh
#
# containerd is started on its own, with a generous wait, and dockerd is pointed at it:
# dockerd's own managed containerd gives up after a short fixed timeout, which a busy
# fresh machine can miss (a CI run failed that way).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v bwrap >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq docker.io debootstrap bubblewrap >/dev/null
fi

CONTAINERD_SOCK=/run/containerd/containerd.sock

wait_for() {  # wait_for SECONDS COMMAND...: true once COMMAND succeeds
    local seconds=$1
    shift
    for _ in $(seq "$seconds"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    "$@" >/dev/null 2>&1
}

start_containerd() {
    if ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1; then
        return 0
    fi
    echo "== starting containerd (log: /tmp/containerd.log)"
    nohup containerd >>/tmp/containerd.log 2>&1 &
    wait_for 120 ctr --address "$CONTAINERD_SOCK" version
}

start_dockerd() {
    echo "== starting dockerd (log: /tmp/dockerd.log)"
    nohup dockerd --containerd="$CONTAINERD_SOCK" >>/tmp/dockerd.log 2>&1 &
    wait_for 120 docker info
}

if ! docker info >/dev/null 2>&1; then
    started=0
    for attempt in 1 2 3; do
        if start_containerd && start_dockerd; then
            started=1
            break
        fi
        echo "docker did not come up (attempt $attempt); retrying"
        pkill -x dockerd || true
        pkill -x containerd || true
        sleep 3
    done
    if [ "$started" != 1 ]; then
        tail -20 /tmp/containerd.log || true
        tail -20 /tmp/dockerd.log || true
        echo "dockerd did not start"
        exit 1
    fi
fi
echo "== sandbox image"
.venv/bin/agentrl sandbox build --offline
