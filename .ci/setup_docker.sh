#!/usr/bin/env bash
# Install and start a Docker daemon, then build the sandbox image offline (no registry).
# Safe to rerun: skips what is already there. Needs root. Usage: bash .ci/setup_docker.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v bwrap >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq docker.io debootstrap bubblewrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
    echo "== starting dockerd (log: /tmp/dockerd.log)"
    nohup dockerd >/tmp/dockerd.log 2>&1 &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { tail -30 /tmp/dockerd.log; echo "dockerd did not start"; exit 1; }
fi
echo "== sandbox image"
.venv/bin/agentrl sandbox build --offline
