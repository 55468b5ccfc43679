#!/usr/bin/env bash
# Session 45, third device call: the in-GEMM conversion with L2 evict-first loads and streaming
# stores, with three converter warps (conv3h, branch s45-conv-in-gemm) and one (conv1h: the same
# with kConvWarps = 1), against main. Carry .devcarry/lib and .devcarry/s45.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s45 conv3h main conv1h
echo "== tests conv3h"
timeout 100 build/conv3h/osprey_cuda_tests --gtest_filter='MoeMxfp4.Fp8Conv*:CudaFp8.Grouped*:CudaFp8Model.Mxfp4*' \
  > $OUT/tests_conv3h.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_conv3h.log
echo "== tests conv1h"
timeout 60 build/conv1h/tests --gtest_filter='MoeMxfp4.Fp8Conv*' > $OUT/tests_conv1h.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_conv1h.log
D=$(synth_dir 20b)
for b in conv3h conv1h; do
  echo "== ncu $b (20b 8k: GEMMs and the rest kernels, serialized)"
  timeout 60 ncu --metrics gpu__time_duration.sum,dram__bytes.sum --kernel-name regex:'grouped_fp8_wgmma|to_fp8' \
    --launch-count 8 build/$b/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 \
    --prefill-reps 1 --batches "" --steps 1 2>&1 | grep -E "^  [a-z ]*[a-z_]*(kernel|rest)|duration|dram__bytes" |
    sed -E 's/\(Cu.*//; s/.*::(m_grouped|mxfp4)/\1/' | paste - - - | tee -a $OUT/ncu_$b.txt
done
prefill_builds $D 8192,32768 100 main conv3h conv1h main conv3h conv1h
D=$(synth_dir 120b)
for n in main conv3h conv1h; do
  echo "-- 120b $n"
  timeout 110 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 3 \
    --batches "" --steps 1 > $OUT/prefill_120b_$n.txt 2>&1
  grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror" $OUT/prefill_120b_$n.txt | head -4
done
date
