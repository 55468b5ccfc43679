#!/usr/bin/env bash
# Which launches can use programmatic dependent launch without changing results: parity-b logits
# (skinny GEMMs, prefill) and greedy decode (graphs) against the CPU fp8 emulation, with PDL on for
# one tag at a time. Then ncu kernel times of decode steps (20b). Logs to $OUT.
export LD_LIBRARY_PATH=$PWD/.devcarry/lib
B=$PWD/build/osprey; M=/tmp/m; OUT=${OUT:-/tmp/out}; mkdir -p $M $OUT
$B synth --preset parity-b --seed 7 --out $M/parity-b --quiet
python3 - <<'PY' 2>&1 | tee $OUT/pdl_bisect.log
import subprocess, numpy as np, os
B="build/osprey"; M="/tmp/m/parity-b"
def run(args, env=None):
    return subprocess.run([B,"--threads","16",*args],check=True,capture_output=True,text=True,env={**os.environ,**(env or {})}).stdout
def logits(toks, backend, prec, extra=(), env=None):
    run(["logits","--backend",backend,"--precision",prec,"--model",M,"--tokens",",".join(map(str,toks)),"--out","/tmp/l.npy",*extra],env)
    return np.load("/tmp/l.npy").astype(np.float64)
toks=np.random.default_rng(0).integers(0,777,size=48).tolist()
e8=logits(toks,"cpu","fp8")
g=["generate","--model",M,"--tokens","5,6,7,8,9,10,11,12","--max-tokens","24","--greedy","--ignore-eos"]
gc=run(g+["--precision","fp8"])
for tag in ["none","gemm","attn","rope","norm","route","sort","swiglu","quant","all"]:
    env={"OSPREY_PDL":tag}
    reps=[logits(toks,"cuda","fp8",["--no-cublaslt"],env) for _ in range(2)]
    r=max(float(np.mean(np.linalg.norm(a-e8,axis=1)/np.linalg.norm(e8,axis=1))) for a in reps)
    gg=[run(["generate","--backend","cuda"]+g[1:],env) for _ in range(2)]
    print(f"OSPREY_PDL={tag:7s} prefill logits vs emulation: worst mean rel {r:.2e}; greedy equal to emulation: {[x==gc for x in gg]}",flush=True)
PY
