#!/usr/bin/env bash
# Long prompts beside running streams (issue 13): the flash-prefill tests (split-KV among them),
# then PART=long of device_serving.sh (16 streams alone and beside a 100k-token prompt, then 4000 in /
# 200 out at concurrency 64). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
timeout 200 $T --gtest_brief=1 --gtest_filter='CudaFp8.Flash*:CudaFp8Model.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|actual" | head -20
PART=long bash tests/cuda/device_serving.sh 2>&1 | grep -v "loading weights"
grep -ci "error\|fail" $OUT/serve_new.log
