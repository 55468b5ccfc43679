#!/usr/bin/env bash
# Installs everything osprey needs on a fresh Debian 12 machine (run as root, or with sudo available).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config \
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libbenchmark-dev >/dev/null
echo "osprey: dependencies installed" >&2
