#!/usr/bin/env bash
# Session 37, call 1: the MXFP4 decode ring filled by one bulk copy a K block (mbarrier per slot)
# and the one-multiply-add E8M0 factor (branch s37-bulk-ring) against main c60fbf1: its MXFP4
# tests, compute-sanitizer on two of them, the expert GEMMs alone and the 20b step, its SASS.
cd "$(dirname "$0")/../.."
mkdir -p build/tests
xz -d -c .devcarry/m37/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c .devcarry/b37/osprey.xz > /tmp/osprey_new && chmod +x /tmp/osprey_new
xz -d -c .devcarry/f37/osprey.xz > /tmp/osprey_fast && chmod +x /tmp/osprey_fast
xz -d -c .devcarry/b37/tests.xz > build/tests/osprey_cuda_tests && chmod +x build/tests/osprey_cuda_tests
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
echo "== tests (new)"
timeout 60 $T --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*' > $OUT/tests_new.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_new.log | head
D=$(synth_dir 20b)
date
for b in main new fast main new fast; do
  bin=$B; [ $b = new ] && bin=/tmp/osprey_new; [ $b = fast ] && bin=/tmp/osprey_fast
  timeout 40 $bin bench --backend cuda --model $D --prefill-lens "" --batches "" --moe-batches 1,2,8,64 --steps 32 >> $OUT/moe_$b.log 2>&1
  echo "-- moe $b"; grep -E "^\| [0-9].*mxfp4" $OUT/moe_$b.log | tail -4
done
date
for b in main new fast main new fast; do
  bin=$B; [ $b = new ] && bin=/tmp/osprey_new; [ $b = fast ] && bin=/tmp/osprey_fast
  echo "-- $b"
  timeout 50 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,8,64 --contexts 8192 --steps 16 \
    >> $OUT/bench_$b.log 2>&1; grep -E "^\| 8192 \| [0-9]|rror" $OUT/bench_$b.log | tail -3
done
date
echo "== ncu, batch 1 expert GEMMs (new)"
secs="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
OSPREY_PROFILE_DECODE=1 timeout 90 ncu --profile-from-start off --clock-control none --kernel-name "regex:mxfp4_decode" \
  --launch-count 2 $secs --print-details all /tmp/osprey_new bench --backend cuda --model $D --weights mxfp4 \
  --prefill-lens 16 --batches 1 --contexts 64 --steps 1 --kv-blocks 4096 > $OUT/ncu_moe_b1.txt 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Active Warps|No Eligible|Warp Cycles Per Issued|Stall|Grid Size|Block Size|Waves" $OUT/ncu_moe_b1.txt | head -60
if [ $SECONDS -lt 330 ]; then
echo "== ncu, batch 1 decode attention at 8k (new)"
OSPREY_PROFILE_DECODE=1 timeout 60 ncu --profile-from-start off --clock-control none --kernel-name "regex:paged_decode_tc" \
  --launch-count 2 $secs --print-details all /tmp/osprey_new bench --backend cuda --model $D --weights mxfp4 \
  --prefill-lens 16 --batches 1 --contexts 8192 --steps 1 --kv-blocks 4096 > $OUT/ncu_attn_b1.txt 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Active Warps|No Eligible|Warp Cycles Per Issued|Grid Size|Block Size|Waves" $OUT/ncu_attn_b1.txt | head -40
fi
date
echo "== sanitize (new)"
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 10 $T \
    --gtest_filter='MoeMxfp4.OneMultiplyDecodeEqualsTheGeneralOne:Awkward/MoeMxfp4.GroupedGemmEqualsCpuTwin/0' > $OUT/sanitize_$tool.log 2>&1
  grep -E "^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY|Hazard" $OUT/sanitize_$tool.log | head -8
done
date
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass /tmp/osprey_new > /tmp/new.sass 2>/dev/null
  python3 - /tmp/new.sass $OUT << 'PY'
import re, sys, collections
src, out = sys.argv[1], sys.argv[2]
keep=None; buf={}
for line in open(src, errors="replace"):
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        n=m.group(1); keep = n if re.search("mxfp4_decode16|mxfp4_decode_kernel", n) else None
        if keep: buf.setdefault(keep, [])
    if keep: buf[keep].append(line)
for i,(n,l) in enumerate(buf.items()):
    open(f"{out}/sass_new_{i}.txt","w").writelines(l)
    c=collections.Counter()
    for x in l:
        m2 = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", x)
        if m2: c[m2.group(2)]+=1
    print(i, n[-60:], sum(c.values()), dict(c.most_common(12)))
PY
fi
date
