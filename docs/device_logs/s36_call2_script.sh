#!/usr/bin/env bash
# Session 36, call 1: main 1668171 on the GPU: the MXFP4 tests (hint 8 included), a baseline
# bench, ncu stall/instruction sections of the MXFP4 decode GEMMs (batch 64 and 8) and the decode
# attention (batch 64, 2k context), SASS instruction mixes.
cd "$(dirname "$0")/../.."
mkdir -p build/tests
xz -d -c .devcarry/s36a/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c .devcarry/s36a/tests.xz > build/tests/osprey_cuda_tests && chmod +x build/tests/osprey_cuda_tests
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
echo "== tests"
timeout 60 $T --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*' > $OUT/tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests.log | head
D=$(synth_dir 20b)
date
echo "== bench"
timeout 60 $B bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,8,64 --contexts 8192 --steps 16 > $OUT/bench_main.log 2>&1
grep -E "^\| [0-9]|rror" $OUT/bench_main.log | tail -4
secs="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis --section SchedulerStats"
pat="^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Compute \(SM\)|Achieved Occupancy|Registers Per|Issue Slots Busy|Issued Warp|Eligible Warps|Active Warps|No Eligible|Warp Cycles Per Issued|Executed Ipc|Dynamic Shared|Block Limit|Theoretical Occ|Stall|stall|Grid Size|Block Size|Waves"
ncu_run() {  # name regex batch context count
  echo "== ncu $1"
  OSPREY_PROFILE_DECODE=1 timeout 120 ncu --profile-from-start off --clock-control none --kernel-name "regex:$2" \
    --launch-count $5 $secs --print-details all $B bench --backend cuda --model $D --weights mxfp4 \
    --prefill-lens 16 --batches $3 --contexts $4 --steps 1 --kv-blocks 4096 > $OUT/ncu_$1.txt 2>&1
  grep -E "$pat" $OUT/ncu_$1.txt | head -150
}
ncu_run moe_b64 "mxfp4_decode" 64 64 2
date
ncu_run moe_b8 "mxfp4_decode" 8 64 2
date
ncu_run attn_b64 "paged_decode_tc" 64 2048 2
date
echo "== sass"
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass $B > /tmp/all.sass 2>/dev/null
  python3 - /tmp/all.sass $OUT/sass_mix.txt << 'PY'
import re, sys, collections
src, dst = sys.argv[1], sys.argv[2]
funcs = collections.OrderedDict(); name=None
for line in open(src, errors="replace"):
    m = re.match(r"\s*Function : (\S+)", line)
    if m: name = m.group(1); funcs[name] = collections.Counter(); continue
    m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
    if m and name: funcs[name][m.group(2)] += 1
with open(dst, "w") as f:
    for n, c in funcs.items():
        if re.search("mxfp4_decode|paged_decode_tc", n):
            f.write(n + " " + str(sum(c.values())) + " : " + ", ".join(f"{k} {v}" for k, v in c.most_common(30)) + "\n")
PY
  grep -E "mxfp4_decode|paged_decode_tc" /tmp/all.sass | head -0
  cuobjdump -sass -fun '.*mxfp4_decode16.*' $B > $OUT/sass_decode16.txt 2>/dev/null
  python3 - /tmp/all.sass $OUT << 'PY'
import re, sys
src, out = sys.argv[1], sys.argv[2]
keep=None; buf={}
for line in open(src, errors="replace"):
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        n=m.group(1); keep = n if re.search("mxfp4_decode16|mxfp4_decode_kernel|paged_decode_tc_kernel", n) else None
        if keep: buf.setdefault(keep, [])
    if keep: buf[keep].append(line)
for i,(n,l) in enumerate(buf.items()):
    open(f"{out}/sass_{i}.txt","w").writelines(l)
    print(i, n, len(l))
PY
  head -c 3000 $OUT/sass_mix.txt
else echo "no cuobjdump"; fi
date
