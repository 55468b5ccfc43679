#!/usr/bin/env bash
# Session 37, call 3: where a 120b 8k prefill goes, kernel by kernel (main c60fbf1's build):
# nsys (concurrency kept) if the machine has it, else ncu's durations (kernels serialized).
cd "$(dirname "$0")/../.."
mkdir -p build
xz -d -c .devcarry/m37/osprey.xz > build/osprey && chmod +x build/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
which nsys ncu; date
D=$(synth_dir 120b)
date
# The H200 holds the 120b's batch-128 cache at 8k; the H100 not even batch 64's.
BATCHES=1; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && BATCHES=1,64,128
ARGS="bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 2 --batches $BATCHES --contexts 8192 --steps 8"
if command -v nsys > /dev/null; then
  timeout 400 nsys profile -o /tmp/p --trace cuda --sample none --cpuctxsw none $B $ARGS > $OUT/run.log 2>&1
  grep -E "^\| 8192|rror|loaded" $OUT/run.log
  nsys stats --report cuda_gpu_kern_sum --format csv /tmp/p.nsys-rep > $OUT/kern_sum.csv 2>/dev/null
  nsys stats --report cuda_gpu_trace --format csv /tmp/p.nsys-rep 2> /dev/null | xz > $OUT/trace.csv.xz
  head -40 $OUT/kern_sum.csv | cut -c1-220
else
  ARGS="bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 1 --batches 1 --contexts 64 --steps 1"
  timeout 420 ncu --metrics gpu__time_duration.sum --csv --print-units base $B $ARGS > $OUT/ncu.csv 2>&1
  grep -E "^\| 8192|rror" $OUT/ncu.csv | head
  python3 - $OUT/ncu.csv << 'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if len(r) > 10]
hdr = rows[0]; ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value")
tot = collections.Counter(); cnt = collections.Counter()
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except: continue
    n = r[ki].split("(")[0][-70:]; tot[n] += v; cnt[n] += 1
for n, v in tot.most_common(40): print(f"{v/1e6:9.3f} ms {cnt[n]:5d}  {n}")
print("sum", sum(tot.values())/1e6, "ms")
PY
fi
date
