#!/usr/bin/env bash
# One call on the GPU machine for the FP8 Hopper path: kernel tests (and compute-sanitizer on
# them), correctness of `--backend cuda` (fp8, and bf16 for comparison) against the CPU engine's
# fp32 and its fp8 emulation on synthetic checkpoints, then `bench --backend cuda` on the 20b
# shape. Needs build/ from this machine's build and .devcarry/lib. Logs to $OUT. Decode under other
# settings (OSPREY_PDL=none) or against an earlier build: device_ab.sh.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
df -h / /dev/shm | tail -2; free -g | head -2
if [ -z "${SKIP_KERNEL_TESTS:-}" ]; then
echo "== kernel tests"
$T ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} 2>&1 | tee $OUT/kernel_tests.log | grep -E "^\[  (PASSED|FAILED)|Failure|tests ran|Expected|Which is|rel_err" | head -40
if [ -z "${SKIP_SANITIZER:-}" ]; then
  echo "== compute-sanitizer memcheck / racecheck (FP8 kernel tests, small shapes)"
  F='CudaSample.*:CudaFp8.*:Awkward/Fp8Tokens.*:Shapes/LtRows.CublasLtBlockScaledMatchesCpuEmulation/0:Shapes/LtRows.CublasLtBlockScaledMatchesCpuEmulation/1'
  compute-sanitizer --tool memcheck --print-limit 5 $T --gtest_filter="$F" > $OUT/memcheck.log 2>&1
  tail -3 $OUT/memcheck.log
  compute-sanitizer --tool racecheck --print-limit 500 $T --gtest_filter="$F" > $OUT/racecheck.log 2>&1
  # cuBLASLt's own kernels (nvjet_*) report shared-memory hazards; ours should report none.
  echo "racecheck: $(grep -c 'Race reported' $OUT/racecheck.log) race reports, $(grep 'Race reported' $OUT/racecheck.log | grep -vc nvjet) outside cuBLASLt's nvjet kernels"
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head -4
fi
fi
[ -n "${KERNELS_ONLY:-}" ] && exit 0
if [ -z "${SKIP_CORRECTNESS:-}" ]; then
for p in parity-a parity-b tiny; do $B synth --preset $p --seed 7 --out $M/$p --quiet; done
for p in parity-a parity-b tiny; do $B synth --preset $p --seed 7 --branch-scale 0.25 --out $M/$p-calm --quiet; done
[ -z "${SKIP_20B_CHECK:-}" ] && ( time $B synth --preset 20b --seed 1 --out $M/20b --quiet ) 2>&1 | grep real
[ -z "${SKIP_20B_CHECK:-}" ] && $B synth --preset 20b --seed 1 --branch-scale 0.25 --out $M/20b-calm --quiet
python3 tests/cuda/correctness.py "$B" "$M" 2>&1 | tee $OUT/correctness.log
echo "== greedy: CUDA fp8 (graphs) vs CPU fp8 emulation"
cuda_vs_cpu "parity-a parity-b tiny" "--greedy" 0 5,6,7,8,9,10,11,12
echo "== sampled generate on the GPU (tiny): seeded runs repeat, another seed differs"
S1=$($B generate --backend cuda --model $M/tiny --tokens 5,6,7 --max-tokens 16 --temperature 0.9 --top-p 0.95 --seed 3 --ignore-eos 2>/dev/null)
S2=$($B generate --backend cuda --model $M/tiny --tokens 5,6,7 --max-tokens 16 --temperature 0.9 --top-p 0.95 --seed 3 --ignore-eos 2>/dev/null)
S3=$($B generate --backend cuda --model $M/tiny --tokens 5,6,7 --max-tokens 16 --temperature 0.9 --top-p 0.95 --seed 4 --ignore-eos 2>/dev/null)
echo "seed 3: $S1"; echo "seed 3 again identical: $([ "$S1" = "$S2" ] && echo yes || echo NO); seed 4 differs: $([ "$S1" != "$S3" ] && echo yes || echo NO)"
echo "== sampled generate: CUDA fp8 (GPU sampling) vs CPU fp8 emulation (host sampler), same seeds"
cuda_vs_cpu "parity-a parity-b tiny" "--temperature 0.8 --top-p 0.9" "1 2 3"
echo "== compute-sanitizer memcheck: fp8 generate (graphs) on parity-b"
compute-sanitizer --tool memcheck --print-limit 5 $B generate --backend cuda --model $M/parity-b --tokens 1,2,3 --max-tokens 6 --greedy --ignore-eos 2>&1 | tail -2
fi
if [ -n "${SERVE_CHECK:-}" ]; then
  echo "== serve --backend cuda (tiny): three concurrent greedy chat requests"
  [ -d $M/tiny ] || $B synth --preset tiny --seed 7 --out $M/tiny --quiet
  $B serve --backend cuda --model $M/tiny --port 8123 --max-batch 4 --max-seq-len 512 > /tmp/serve.log 2>&1 &
  SP=$!
  python3 - <<'PY' 2>&1 | tee $OUT/serve_cuda.log
import json, threading, time, urllib.request
base = "http://127.0.0.1:8123"
for _ in range(300):
    try:
        urllib.request.urlopen(base + "/v1/models", timeout=1).read(); break
    except Exception:
        time.sleep(0.2)
out = {}
def chat(i):
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": 16, "temperature": 0}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out[i] = json.loads(urllib.request.urlopen(req, timeout=120).read())
def chat_sampled(i):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16, "temperature": 0.8, "top_p": 0.9, "seed": 5}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out[i] = json.loads(urllib.request.urlopen(req, timeout=120).read())
ts = [threading.Thread(target=chat, args=(i,)) for i in range(3)] + [threading.Thread(target=chat_sampled, args=(i,)) for i in (3, 4)]
[t.start() for t in ts]; [t.join() for t in ts]
for i in sorted(out):
    print(f"request {i}{' (sampled, seed 5)' if i >= 3 else ' (greedy)'}: finish {out[i]['choices'][0]['finish_reason']}, usage {out[i]['usage']}, text {out[i]['choices'][0]['message'].get('content')!r}")
same = out[3]['choices'][0]['message'].get('content') == out[4]['choices'][0]['message'].get('content')
print(f"two concurrent sampled requests, same prompt and seed, same text: {'yes' if same else 'NO'}")
PY
  kill $SP; wait $SP 2>/dev/null; grep -iE "error|fatal" /tmp/serve.log | head -3
  echo "== a converted checkpoint (osprey convert) on the GPU: logits equal to converting at load"
  [ -d $M/parity-b ] || $B synth --preset parity-b --seed 7 --out $M/parity-b --quiet
  $B convert --model $M/parity-b --out $M/parity-b-fp8 2>&1 | tail -1
  $B logits --backend cuda --model $M/parity-b --tokens 1,2,3,4,5,6,7,8 --out /tmp/a.npy 2>/dev/null
  $B logits --backend cuda --model $M/parity-b-fp8 --tokens 1,2,3,4,5,6,7,8 --out /tmp/b.npy 2>/dev/null
  python3 -c "import numpy as np; a=np.load('/tmp/a.npy'); b=np.load('/tmp/b.npy'); print('converted checkpoint logits identical:', bool((a==b).all()), a.shape)" | tee $OUT/convert_cuda.log
fi
[ -n "${SKIP_20B_BENCH:-}" ] && exit 0
[ -z "${SKIP_20B_CHECK:-}" ] || [ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
echo "== bench --backend cuda, 20b"
$B bench --backend cuda --model $M/20b --steps ${STEPS:-16} --json $OUT/bench_20b.json ${BENCH_ARGS:-} 2>&1 | tee $OUT/bench_20b.log
if [ -z "${SKIP_NOGRAPHS:-}" ]; then
  echo "== decode without CUDA graphs, 20b (what the graphs save)"
  $B bench --backend cuda --model $M/20b --prefill-lens 1024 --contexts 8192 --batches 1,8,64 --steps 16 --no-graphs 2>&1 | grep "^|" | tee $OUT/nographs.log
fi
# NCU="1 64": ncu kernel times of one decode step (after the graph's warm-up step) at 8k context
# for each batch size listed, summed by kernel.
for nb in ${NCU:-}; do
  echo "== ncu: decode step kernels, 20b, batch $nb, context 8192"
  ncu_decode_step $nb 13 $OUT/ncu_decode_b$nb.txt
done
