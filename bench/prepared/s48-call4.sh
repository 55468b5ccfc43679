#!/usr/bin/env bash
# Session 48, the load (about 4 minutes, any card; 7 on an H200, with the 20b targets): the MXFP4 experts' load before and after.
#   old  = main before session 48 (.devcarry/s47/main: the word packing bit by bit);
#   main = the packing as 8 shift-and-masks (.devcarry/s48/main);
#   pipe = that, plus the re-layout a chunk of experts at a time into two page-locked slots
#          while the other slot copies (.devcarry/s48/pipe, with its CUDA tests).
# The CUDA model tests of pipe, the 20b's load time and greedy tokens with each build (equal tokens:
# equal tiles), then the 120b 8k prefill with each (its "loaded in" line).
# Carry .devcarry/lib, .devcarry/s47/main and .devcarry/s48.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s47/main build/old
builds_preamble .devcarry/s48 pipe main
echo "== tests pipe"
timeout 90 build/pipe/tests --gtest_filter='CudaFp8Model.*:MoeMxfp4.*' > $OUT/tests_pipe.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_pipe.log
D=$(synth_dir 20b)
nproc
for b in old main pipe old main pipe; do
  s=$(date +%s.%N)
  timeout 90 build/$b/osprey generate --backend cuda --model $D --tokens $(seq -s, 1000 2999) --max-tokens 16 \
    --greedy --ignore-eos 2> $OUT/generate_$b.err > $OUT/generate_$b.txt
  echo "20b $b: rc $?, $(python3 -c "import time; print(f'{time.time() - $s:.1f}')") s for the whole generate, tokens $(md5sum < $OUT/generate_$b.txt | cut -c1-8)"
done
D=$(synth_dir 120b)
prefill_only $D 8192 150 pipe main old
date
# On an H200 (none has run bench/targets.sh since session 35): the 20b's targets with pipe's build.
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ "$mem" -gt 100000 ] && SKIP_120B=1 bash bench/targets.sh
date
