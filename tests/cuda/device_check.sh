#!/usr/bin/env bash
# One call on the GPU machine: checks the reference CUDA path (BF16; the FP8 path is device_fp8.sh) against the CPU fp32 engine on
# synthetic checkpoints (parity shapes, tiny, the 20b shape), runs compute-sanitizer, and times
# batch-1 prefill and decode on the 20b shape. Needs build/osprey built here with CUDA and the
# carried .devcarry/lib (cpp-httplib). Writes $OUT/device_check.log.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== CUDA kernels vs their CPU twins"
$PWD/build/tests/osprey_cuda_tests 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" | head -20
[ -n "${KERNELS_ONLY:-}" ] && exit 0
for p in parity-a parity-b tiny; do $B synth --preset $p --seed 7 --out $M/$p --quiet; done
python3 - "$B" "$M" <<'PY'
import subprocess, sys, numpy as np
B, M = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
def logits(model, toks, backend, precision="bf16"):
    out = f"/tmp/l_{backend}.npy"
    subprocess.run([B, "logits", "--backend", backend, "--model", model, "--tokens", ",".join(map(str, toks)), "--out", out]
                   + (["--precision", precision] if backend == "cuda" else []), check=True)
    return np.load(out)
for name, vocab, T in [("parity-a", 1000, 200), ("parity-b", 777, 48), ("tiny", 201088, 160)]:
    toks = rng.integers(0, min(vocab, 199998), size=T).tolist()
    cpu = logits(f"{M}/{name}", toks, "cpu")
    for prec in ("bf16", "fp32"):
        gpu = logits(f"{M}/{name}", toks, "cuda", prec)
        rel = np.linalg.norm(gpu - cpu, axis=1) / np.linalg.norm(cpu, axis=1)
        agree = np.mean(gpu.argmax(1) == cpu.argmax(1))
        print(f"{prec.upper()} CUDA vs CPU fp32, {name} ({T} positions): worst relative error {rel.max():.3e}, mean {rel.mean():.3e}, argmax agreement {agree:.4f}")
PY
echo "== greedy decode, CUDA (device-side decode steps) vs CPU"
for p in parity-a parity-b tiny; do
  G=$($B generate --backend cuda --precision bf16 --model $M/$p --tokens 5,6,7,8,9,10,11,12 --max-tokens 24 --greedy --ignore-eos 2>/dev/null)
  C=$($B --threads 16 generate --backend cpu --model $M/$p --tokens 5,6,7,8,9,10,11,12 --max-tokens 24 --greedy --ignore-eos 2>/dev/null)
  agreement "$p greedy" "$G" "$C"
done
echo "== compute-sanitizer memcheck (decode steps, parity-b)"
compute-sanitizer --tool memcheck --print-limit 5 $B generate --backend cuda --precision bf16 --model $M/parity-b --tokens 1,2,3 --max-tokens 6 --greedy --ignore-eos 2>&1 | tail -2
echo "== compute-sanitizer memcheck (parity-b, 20 tokens)"
compute-sanitizer --tool memcheck --print-limit 5 $B logits --backend cuda --model $M/parity-b --tokens $(seq -s, 1 20) --out /tmp/cs.npy 2>&1 | tail -3
echo "== compute-sanitizer racecheck (parity-b, 20 tokens)"
compute-sanitizer --tool racecheck --print-limit 5 $B logits --backend cuda --model $M/parity-b --tokens $(seq -s, 1 20) --out /tmp/cs.npy 2>&1 | tail -3
echo "== 20b shape"
( time $B synth --preset 20b --seed 1 --out $M/20b --quiet ) 2>&1 | grep real
P64=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(199998)) for _ in range(64)))")
P1K=$(python3 -c "import random; random.seed(2); print(','.join(str(random.randrange(199998)) for _ in range(1024)))")
echo "batch 1, 64-token prompt:"; $B generate --backend cuda --precision bf16 --model $M/20b --tokens $P64 --max-tokens 128 --greedy --ignore-eos 2>&1 >/dev/null | tail -1
echo "batch 1, 1024-token prompt:"; $B generate --backend cuda --precision bf16 --model $M/20b --tokens $P1K --max-tokens 128 --greedy --ignore-eos 2>&1 >/dev/null | tail -1
A=$($B generate --backend cuda --precision bf16 --model $M/20b --tokens $P64 --max-tokens 6 --greedy --ignore-eos 2>/dev/null)
C=$($B --threads 16 generate --backend cpu --model $M/20b --tokens $P64 --max-tokens 6 --greedy --ignore-eos 2>/dev/null)
echo "20b greedy, cuda: $A"
echo "20b greedy, cpu:  $C"
python3 - "$B" "$M" <<'PY'
import subprocess, sys, numpy as np
B, M = sys.argv[1], sys.argv[2]
toks = list(range(1000, 1024))
def logits(backend, precision="bf16"):
    subprocess.run([B, "--threads", "16", "logits", "--backend", backend, "--model", f"{M}/20b", "--tokens", ",".join(map(str, toks)), "--out", f"/tmp/20b_{backend}.npy"]
                   + (["--precision", precision] if backend == "cuda" else []), check=True)
    return np.load(f"/tmp/20b_{backend}.npy")
cpu = logits("cpu")
for prec in ("bf16", "fp32"):
    gpu = logits("cuda", prec)
    rel = np.linalg.norm(gpu - cpu, axis=1) / np.linalg.norm(cpu, axis=1)
    print(f"{prec.upper()} CUDA vs CPU fp32, 20b shape (24 positions): worst relative error {rel.max():.3e}, first positions {np.array2string(rel[:6], precision=2)}, argmax agreement {np.mean(gpu.argmax(1) == cpu.argmax(1)):.4f}")
PY
