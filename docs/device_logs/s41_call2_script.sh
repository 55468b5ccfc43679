#!/usr/bin/env bash
# Session 41: the combined tiled MXFP4 prompt GEMM (bench/prepared/s40-tiled-combo.patch: 128-row
# tiles on wgmma, 64-row tiles on mma.sync 1 x 8) against main, and the same with the 64/128 tile
# crossover moved from 64 to 32 rows an expert (c32). The builds (after scripts/build.sh):
#   mkdir -p .devcarry/s41/main .devcarry/lib && cp /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 .devcarry/lib/
#   xz -c build/osprey > .devcarry/s41/main/osprey.xz && xz -c build/tests/osprey_cuda_tests > .devcarry/s41/main/tests.xz
#   python3 bench/variant_build.py bench/prepared/s40-tiled-combo.patch .devcarry/s41/combo
#   python3 bench/variant_build.py bench/prepared/s40-tiled-combo.patch .devcarry/s41/c32 \
#     --define kernels/cuda/moe_gemm_mxfp4.cu 'rows_per_expert / 2 <= 64 ? 2 : 4' 'rows_per_expert / 2 <= 32 ? 2 : 4'
# Carry .devcarry/lib and .devcarry/s41, then PHASE=a (whole CUDA suite of combo, memcheck, the MoE
# tables of the three builds, 20b prefill; about 5 min) or PHASE=b (120b prefill up to 8k; about 6 min)
#   PHASE=a bash bench/prepared/s41-check.sh
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
for n in main combo c32; do unpack .devcarry/s41/$n build/$n; done
cp build/main/osprey build/osprey
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
if [ "${PHASE:-a}" = a ]; then
  for n in combo c32; do
    echo "== tests $n (all)"
    timeout 100 build/$n/tests > $OUT/tests_$n.log 2>&1; gtest_summary $OUT/tests_$n.log
  done
  echo "== memcheck combo"
  timeout 70 compute-sanitizer --tool memcheck build/combo/tests --gtest_filter='*MoeMxfp4*' > $OUT/memcheck_combo.txt 2>&1
  grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_combo.txt | head -4
  for m in 120b 20b; do for n in main combo c32; do
    b=1024,1536,2048,3072,4096; [ $m = 20b ] && b=256,384,512,768,1000
    echo "-- moe $m $n"
    timeout 40 build/$n/osprey bench --backend cuda --model bench/shapes/$m --prefill-lens "" --batches "" --moe-batches $b \
      --steps 32 > $OUT/moe_${m}_${n}.txt 2>&1; grep -E "mxfp4 \||rror" $OUT/moe_${m}_${n}.txt
  done; done
  D=$(synth_dir 20b); prefill_builds $D 256,384,512,768,1024 40 main combo c32
else
  D=$(synth_dir 120b)
  prefill_builds $D 1024,2048,3072,8192 150 main combo c32
fi
date
