#!/usr/bin/env python3
"""The price of each osprey path on a trained model: logits against transformers fp32 (the goldens
train.py keeps) and against osprey's CPU fp32 engine, and held-out task accuracy of greedy decoding.

Usage: fidelity.py --osprey build/osprey --model DIR --test RENDERED --test-families DATA_TEST
                   [--per-family N] [--paths cpu:fp32,cuda:fp8,...] [--gen-paths cuda:fp8,...] --out F.json

Per path and model: per-position relative error ||a - ref|| / ||ref|| of the logits (mean, p90, worst),
argmax agreement, mean and worst KL(ref || path) of the next-token distribution over all 201,088 ids;
and for the generating paths, the share of held-out dialogues whose greedy reply equals the reference
reply token for token (`reply`), and whose last message (the answer or the tool call) does (`answer`).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

VOCAB = 201088
START = 200006


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd[:8])} ...: rc {r.returncode}: {r.stderr.strip()[-400:]}")
    return r.stdout


def logsoftmax(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def compare(a, ref):
    rel = np.linalg.norm(a - ref, axis=1) / np.linalg.norm(ref, axis=1)
    lp, lq = logsoftmax(ref), logsoftmax(a)
    kl = np.sum(np.exp(lp) * (lp - lq), axis=1)
    return rel, kl, a.argmax(1) == ref.argmax(1)


def summary(rows):
    if not rows:
        return None
    rel = np.concatenate([r[0] for r in rows]); kl = np.concatenate([r[1] for r in rows])
    ag = np.concatenate([r[2] for r in rows])
    nan = bool(np.isnan(rel).any() or np.isnan(kl).any())
    return {"positions": int(rel.size), "rel_mean": float(np.nanmean(rel)), "rel_p90": float(np.nanquantile(rel, 0.9)),
            "rel_worst": float(np.nanmax(rel)), "argmax": float(ag.mean()), "kl_mean": float(np.nanmean(kl)),
            "kl_worst": float(np.nanmax(kl)), "nan": nan}


def last_message(ids, p):
    starts = [j for j in range(p, len(ids)) if ids[j] == START]
    return ids[starts[-1]:] if starts else ids[p:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--osprey", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--test-families", required=True)
    ap.add_argument("--per-family", type=int, default=15)
    ap.add_argument("--paths", default="cpu:fp32,cpu:bf16,cpu:fp8,cuda:fp32,cuda:bf16,cuda:fp8,cuda:fp8:no-cublaslt")
    ap.add_argument("--gen-paths", default="cuda:fp32,cuda:bf16,cuda:fp8")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    B, tmp = a.osprey, tempfile.mkdtemp()
    res = {"model": a.model, "logits": {}, "accuracy": {}}

    goldens = sorted(glob.glob(os.path.join(a.model, "goldens", "*.json")), key=lambda f: int(os.path.basename(f)[:-5]))
    refs, own = [], {}
    for g in goldens:
        meta = json.load(open(g))
        full = np.zeros((len(meta["tokens"]), VOCAB))
        full[:, meta["columns"]] = np.load(g[:-5] + ".npy")
        refs.append((meta["tokens"], full))
    per_path = {}
    for path in a.paths.split(","):
        backend, prec, *extra = path.split(":")
        rows, rows_cpu = [], []
        t0 = time.time()
        for j, (toks, ref) in enumerate(refs):
            out = os.path.join(tmp, f"{j}.npy")
            cmd = [B, "--threads", str(a.threads), "logits", "--backend", backend, "--precision", prec, "--model", a.model,
                   "--tokens", ",".join(map(str, toks)), "--out", out] + [f"--{e}" for e in extra]
            try:
                run(cmd)
            except RuntimeError as e:
                print(f"  {path}: FAILED on golden {j}: {e}", flush=True)
                rows = None
                break
            x = np.load(out).astype(np.float64)
            rows.append(compare(x, ref))
            if path == "cpu:fp32":
                own[j] = x
            elif j in own:
                rows_cpu.append(compare(x, own[j]))
        if rows is None:
            res["logits"][path] = {"failed": True}
            continue
        s = {"vs_transformers": summary(rows), "vs_cpu_fp32": summary(rows_cpu), "seconds": time.time() - t0}
        res["logits"][path] = s
        v = s["vs_transformers"]
        print(f"  {path:24s} vs transformers fp32: rel mean {v['rel_mean']:.2e} p90 {v['rel_p90']:.2e} worst "
              f"{v['rel_worst']:.2e}, argmax {v['argmax']:.4f}, KL mean {v['kl_mean']:.2e} worst {v['kl_worst']:.2e}"
              f"{' NaN!' if v['nan'] else ''} ({v['positions']} positions)", flush=True)
        if s["vs_cpu_fp32"]:
            c = s["vs_cpu_fp32"]
            print(f"  {'':24s} vs osprey cpu fp32:    rel mean {c['rel_mean']:.2e} worst {c['rel_worst']:.2e}, "
                  f"argmax {c['argmax']:.4f}, KL mean {c['kl_mean']:.2e}", flush=True)

    # Held-out accuracy: the first N dialogues of each family, prompts through `generate --prompts`.
    test = [json.loads(l) for l in open(a.test)]
    fams = [json.loads(l)["family"] for l in open(a.test_families)]
    pick, count = [], {}
    for i, f in enumerate(fams):
        if count.get(f, 0) < a.per_family:
            count[f] = count.get(f, 0) + 1
            pick.append(i)
    prompts = os.path.join(tmp, "prompts.txt")
    with open(prompts, "w") as f:
        for i in pick:
            f.write(",".join(map(str, test[i]["ids"][:test[i]["prompt_tokens"]])) + "\n")
    max_new = max(len(test[i]["ids"]) - test[i]["prompt_tokens"] for i in pick) + 4
    for path in [p for p in a.gen_paths.split(",") if p]:
        backend, prec = path.split(":")
        t0 = time.time()
        try:
            out = run([B, "--threads", str(a.threads), "generate", "--backend", backend, "--precision", prec, "--model",
                       a.model, "--prompts", prompts, "--max-tokens", str(max_new), "--greedy"]).strip().splitlines()
        except RuntimeError as e:
            print(f"  generate {path}: FAILED: {e}", flush=True)
            res["accuracy"][path] = {"failed": True}
            continue
        acc = {}
        for i, line in zip(pick, out):
            ids, p = test[i]["ids"], test[i]["prompt_tokens"]
            got = [int(v) for v in line.split(",")] if line else []
            full = ids[:p] + got
            d = acc.setdefault(fams[i], [0, 0, 0])
            d[0] += 1
            d[1] += int(got == ids[p:])
            d[2] += int(last_message(full, p) == last_message(ids, p))
        res["accuracy"][path] = {f: {"n": n, "reply": r / n, "answer": s / n} for f, (n, r, s) in sorted(acc.items())}
        tot = sum(v[0] for v in acc.values())
        print(f"  generate {path:12s} ({time.time() - t0:.0f}s): answer accuracy " +
              ", ".join(f"{f} {s / n:.2f}" for f, (n, r, s) in sorted(acc.items())) +
              f"; all {sum(v[2] for v in acc.values()) / tot:.3f} of {tot}", flush=True)
    json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
