#!/usr/bin/env bash
# System packages the inspect-image tests start: Debian's docker-registry (the registry
# fixture) and podman with runc (the runtime probe through the docker SDK; crun cannot
# run on cgroup-v1-hybrid VMs). The probe image's rootfs is assembled from the test
# Python itself (tests/image/rootfs.py), so no bootstrap tool or mirror is needed.
# Idempotent and quiet; a no-op when everything is already installed.
set -euo pipefail
PACKAGES=(docker-registry podman runc)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
