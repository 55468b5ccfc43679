#!/usr/bin/env bash
# Cross-checks of the FP8 CUDA path on the GPU machine: prefill logits through cuBLASLt against
# the skinny kernel everywhere (--no-cublaslt) and against the CPU fp8 emulation; then decode
# with and without CUDA graphs on the 20b shape. Logs to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
B=$PWD/build/osprey
M=${MODELS:-/root/osprey_models}
OUT=${OUT:-/tmp/out}
mkdir -p $M $OUT
for p in parity-a parity-b tiny 20b; do $B synth --preset $p --seed 7 --out $M/$p --quiet; done
python3 - "$B" "$M" <<'PY' 2>&1 | tee $OUT/crosscheck.log
import subprocess, sys, numpy as np
B, M = sys.argv[1], sys.argv[2]
def logits(model, toks, backend, prec, extra=()):
    out = "/tmp/x.npy"
    subprocess.run([B, "--threads", "16", "logits", "--backend", backend, "--precision", prec, "--model", model,
                    "--tokens", ",".join(map(str, toks)), "--out", out, *extra], check=True, stderr=subprocess.DEVNULL)
    return np.load(out).astype(np.float64)
def rel(a, b): return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
rng = np.random.default_rng(0)
for name, vocab, T in [("parity-a", 1000, 200), ("parity-b", 777, 48), ("tiny", 201088, 160), ("20b", 201088, 200)]:
    toks = rng.integers(0, min(vocab, 199998), size=T).tolist()
    lt = logits(f"{M}/{name}", toks, "cuda", "fp8")
    sk = logits(f"{M}/{name}", toks, "cuda", "fp8", ["--no-cublaslt"])
    r = rel(lt, sk)
    print(f"{name}: cuBLASLt prefill vs skinny-only: rel. error first 4 {np.array2string(r[:4], precision=2)}, mean {r.mean():.2e}, argmax agreement {np.mean(lt.argmax(1)==sk.argmax(1)):.3f}")
    if name != "20b":
        e8 = logits(f"{M}/{name}", toks, "cpu", "fp8")
        r = rel(sk, e8)
        print(f"{name}: skinny-only vs CPU fp8 emulation: rel. error first 4 {np.array2string(r[:4], precision=2)}, mean {r.mean():.2e}, argmax agreement {np.mean(sk.argmax(1)==e8.argmax(1)):.3f}")
PY
echo "== decode without graphs (20b)"
$B bench --backend cuda --model $M/20b --prefill-lens 1024 --contexts 8192 --batches 1,8,64 --steps 16 --no-graphs 2>&1 | grep "^|" | tee $OUT/nographs.log
