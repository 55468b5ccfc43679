#!/usr/bin/env python3
"""Every osprey path against osprey's CPU fp32 engine on a trained model: per-position relative error
of the logits (mean, p90, worst), argmax agreement, mean KL(cpu fp32 || path) over all ids with a
95% bootstrap interval over dialogues, and the worst KL.
The CPU fp32 engine is the reference because it matches transformers fp32 on these models to 4e-7
(docs/FIDELITY.md); train/fidelity.py measures against transformers' own goldens when a training
run left them.

Each later path's row also gives its mean KL minus the first path's, with a paired bootstrap
interval (the same resampled dialogues for both: a few positions move both means alike, so their
difference is resolved far better than either mean). Every row is printed as its path ends, so a
run cut short keeps the rows it finished.

The logits go to /dev/shm where it exists (a path's 96 dialogues of osprey-mini are 10 GB of fp32),
and the per-dialogue statistics run in parallel (FID_WORKERS processes, default half the CPUs).

Usage: fidelity_paths.py OSPREY MODEL IDS N PATHS [FIRST]
  IDS: `osprey render --reply` output (JSON lines with "ids"); N dialogues from the FIRST-th (0).
  PATHS: comma-separated backend:precision[:flag=value...], e.g. cpu:mxfp4,cuda:fp8:weights=fp8
"""
import json, random, shutil, subprocess, sys, tempfile, os
from multiprocessing import Pool
import numpy as np

BATCH = 16  # dialogues a `logits --tokens-file` call (the model loaded once; their logits on disk at once)


def run_logits(B, model, path, dialogues, tmp, into):
    """Runs `path` over the dialogues, BATCH a call, and yields (j, the .npy file of dialogue j's logits
    [T][vocab]) for each call's dialogues as the call ends, the files moved to into/j.npy."""
    backend, prec, *flags = path.split(":")
    os.makedirs(into, exist_ok=True)
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
        done = []
        for i in range(len(batch)):
            name = os.path.join(into, f"{b0 + i}.npy")
            os.replace(os.path.join(out, f"{i}.npy"), name)
            done.append((b0 + i, name))
        yield done


def lsm(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def dialogue_stats(job):
    """One dialogue's per-position relative error, KL(ref || path) and argmax agreement, in float64;
    removes the path's file."""
    ref_name, name = job
    a, ref = np.load(name).astype(np.float64), np.load(ref_name).astype(np.float64)
    os.remove(name)
    rel = np.linalg.norm(a - ref, axis=1) / np.linalg.norm(ref, axis=1)
    lp, lq = lsm(ref), lsm(a)
    kl = np.sum(np.exp(lp) * (lp - lq), axis=1)
    return rel, kl, a.argmax(1) == ref.argmax(1)


def mean_interval(sums, draws=2000, seed=1):
    """95% bootstrap interval of the mean over positions, resampling whole dialogues: sums holds
    (sum over a dialogue's positions, its position count) for each dialogue. A few positions carry
    most of a mean KL (docs/FIDELITY.md), so the interval says what a sample of this size can tell."""
    rng = random.Random(seed)
    means = sorted(sum(s for s, _ in pick) / sum(n for _, n in pick)
                   for pick in ([rng.choice(sums) for _ in sums] for _ in range(draws)))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def paired_interval(a, b, draws=4000, seed=1):
    """The mean KL of b minus a's over the same positions, and its 95% bootstrap interval resampling
    whole dialogues for both at once."""
    def diff(idx):
        return (sum(b[i][0] for i in idx) - sum(a[i][0] for i in idx)) / sum(a[i][1] for i in idx)
    rng = random.Random(seed)
    ds = sorted(diff([rng.randrange(len(a)) for _ in a]) for _ in range(draws))
    return diff(range(len(a))), ds[int(0.025 * draws)], ds[int(0.975 * draws) - 1]


def main():
    B, model, ids_file, n, paths = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(",")
    first = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    dialogues = [json.loads(l)["ids"] for l in open(ids_file)][first:first + n]
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    tmp = tempfile.mkdtemp(prefix="osprey_fidelity_", dir=shm)
    workers = int(os.environ.get("FID_WORKERS", max(1, (os.cpu_count() or 2) // 2)))
    try:
        run(B, model, dialogues, first, paths, tmp, workers)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(B, model, dialogues, first, paths, tmp, workers):
    refs = {}  # dialogue: its reference logits' file (float32, as written)
    for done in run_logits(B, model, "cpu:fp32", dialogues, tmp, os.path.join(tmp, "ref")):
        refs.update(done)
    print(f"{len(dialogues)} dialogues (from the {first}-th), {sum(map(len, dialogues))} positions; reference: "
          f"osprey cpu fp32\n")
    print(f"| path | rel. error mean | p90 | worst | argmax | mean KL | 95% interval | worst KL | "
          f"mean KL minus {paths[0]}'s | 95% paired interval |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    sums = {}  # path: (KL sum, positions) per dialogue
    with Pool(workers) as pool:
        for path in paths:
            stats = {}
            for done in run_logits(B, model, path, dialogues, tmp, os.path.join(tmp, "path")):
                for (j, _), s in zip(done, pool.map(dialogue_stats, [(refs[j], name) for j, name in done])):
                    stats[j] = s
            rel, kl, agree = (np.concatenate([stats[j][i] for j in range(len(dialogues))]) for i in range(3))
            sums[path] = [(float(stats[j][1].sum()), len(stats[j][1])) for j in range(len(dialogues))]
            lo, hi = mean_interval(sums[path])
            paired = "| |"
            if path != paths[0]:
                d, plo, phi = paired_interval(sums[paths[0]], sums[path])
                paired = f"{d:+.2e} | {plo:+.1e} to {phi:+.1e} |"
            print(f"| {path} | {rel.mean():.2e} | {np.quantile(rel, 0.9):.2e} | {rel.max():.2e} | "
                  f"{100 * agree.mean():.2f}% | {kl.mean():.2e} | {lo:.1e} to {hi:.1e} | {kl.max():.2e} | {paired}",
                  flush=True)


if __name__ == "__main__":
    main()
