#!/usr/bin/env python3
"""Every osprey path against osprey's CPU fp32 engine on a trained model: per-position relative error
of the logits (mean, p90, worst), argmax agreement, mean KL(cpu fp32 || path) over all ids with a
95% bootstrap interval over dialogues, and the worst KL.
The CPU fp32 engine is the reference because it matches transformers fp32 on these models to 4e-7
(docs/FIDELITY.md); train/fidelity.py measures against transformers' own goldens when a training
run left them.

Then each later path's mean KL minus the first path's, with a paired bootstrap interval (the same
resampled dialogues for both: a few positions move both means alike, so their difference is resolved
far better than either mean).

Usage: fidelity_paths.py OSPREY MODEL IDS N PATHS [FIRST]
  IDS: `osprey render --reply` output (JSON lines with "ids"); N dialogues from the FIRST-th (0).
  PATHS: comma-separated backend:precision[:flag=value...], e.g. cpu:mxfp4,cuda:fp8:weights=fp8
"""
import json, random, subprocess, sys, tempfile, os
import numpy as np

B, model, ids_file, n, paths = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(",")
first = int(sys.argv[6]) if len(sys.argv) > 6 else 0
dialogues = [json.loads(l)["ids"] for l in open(ids_file)][first:first + n]
tmp = tempfile.mkdtemp()


BATCH = 16  # dialogues a `logits --tokens-file` call (the model loaded once; their logits on disk at once)


def logits(path):
    """Yields the logits [T][vocab] of each dialogue on `path`, in order, BATCH dialogues a call."""
    backend, prec, *flags = path.split(":")
    for b0 in range(0, len(dialogues), BATCH):
        batch = dialogues[b0:b0 + BATCH]
        seqs, out = os.path.join(tmp, "seqs.txt"), os.path.join(tmp, "out")
        with open(seqs, "w") as f:
            f.writelines(",".join(map(str, t)) + "\n" for t in batch)
        cmd = [B, "--threads", "16", "logits", "--backend", backend, "--precision", prec, "--model", model,
               "--tokens-file", seqs, "--out", out] + [f"--{f}" for f in flags]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{path}: {r.stderr.strip()[-300:]}")
        for i in range(len(batch)):
            name = os.path.join(out, f"{i}.npy")
            a = np.load(name)
            os.remove(name)
            yield a


def mean_interval(sums, draws=2000, seed=1):
    """95% bootstrap interval of the mean over positions, resampling whole dialogues: sums holds
    (sum over a dialogue's positions, its position count) for each dialogue. A few positions carry
    most of a mean KL (docs/FIDELITY.md), so the interval says what a sample of this size can tell."""
    rng = random.Random(seed)
    means = sorted(sum(s for s, _ in pick) / sum(n for _, n in pick)
                   for pick in ([rng.choice(sums) for _ in sums] for _ in range(draws)))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def lsm(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


refs = list(logits("cpu:fp32"))  # float32, as written
print(f"{len(dialogues)} dialogues (from the {first}-th), {sum(map(len, dialogues))} positions; reference: osprey cpu "
      "fp32\n")
print("| path | rel. error mean | p90 | worst | argmax | mean KL | 95% interval | worst KL |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
sums = {}  # path: (KL sum, positions) per dialogue
for path in paths:
    rel, kl, agree = [], [], []
    for j, a in enumerate(logits(path)):
        a, ref = a.astype(np.float64), refs[j].astype(np.float64)
        rel.append(np.linalg.norm(a - ref, axis=1) / np.linalg.norm(ref, axis=1))
        lp, lq = lsm(ref), lsm(a)
        kl.append(np.sum(np.exp(lp) * (lp - lq), axis=1))
        agree.append(a.argmax(1) == ref.argmax(1))
    sums[path] = [(float(k.sum()), len(k)) for k in kl]
    lo, hi = mean_interval(sums[path])
    rel, kl, agree = map(np.concatenate, (rel, kl, agree))
    print(f"| {path} | {rel.mean():.2e} | {np.quantile(rel, 0.9):.2e} | {rel.max():.2e} | {100 * agree.mean():.2f}% | "
          f"{kl.mean():.2e} | {lo:.1e} to {hi:.1e} | {kl.max():.2e} |", flush=True)


def paired_interval(a, b, draws=4000, seed=1):
    """The mean KL of b minus a's over the same positions, and its 95% bootstrap interval resampling
    whole dialogues for both at once."""
    def diff(idx):
        return (sum(b[i][0] for i in idx) - sum(a[i][0] for i in idx)) / sum(a[i][1] for i in idx)
    rng = random.Random(seed)
    ds = sorted(diff([rng.randrange(len(a)) for _ in a]) for _ in range(draws))
    return diff(range(len(a))), ds[int(0.025 * draws)], ds[int(0.975 * draws) - 1]


if len(paths) > 1:
    print(f"\n| path | mean KL minus {paths[0]}'s | 95% paired interval |")
    print("|---|---:|---:|")
    for path in paths[1:]:
        d, lo, hi = paired_interval(sums[paths[0]], sums[path])
        print(f"| {path} | {d:+.2e} | {lo:+.1e} to {hi:+.1e} |", flush=True)
