#!/usr/bin/env bash
# The test suite: builds, runs every ctest (unit, parity against transformers goldens, fuzzing),
# then rebuilds the fuzz targets under ASan/UBSan and runs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)")
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOSPREY_SANITIZE=ON -DOSPREY_CUDA=OFF >/dev/null
ninja -C build-asan osprey_fuzz_safetensors osprey_fuzz_harmony osprey_fuzz_chat_request
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -R '^fuzz_')
