#!/usr/bin/env python3
"""The hottest SASS instructions of an `ncu --page source --csv --print-source sass` dump (a report
taken with --section SourceCounters): the instructions with the most warp-stall samples, their
share, and the samples summed by opcode, so that a kernel's waits can be read without the GUI.

  python3 bench/ncu_sass_hot.py SASS.csv [TOP]
"""
import csv
import sys
from collections import Counter


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    lines = open(path, newline="").read().splitlines()
    start = next((i for i, l in enumerate(lines) if "Address" in l and "Source" in l), None)
    if start is None:
        sys.exit(f"ncu_sass_hot: no header with Address and Source in {path}")
    rows = list(csv.DictReader(lines[start:]))
    cols = rows[0].keys() if rows else []
    samp = next((c for c in cols if c.startswith("Warp Stall Sampling (All")), None)
    if samp is None:
        sys.exit(f"ncu_sass_hot: no stall-sampling column among {list(cols)}")
    reason_cols = [c for c in cols if c.startswith("stall_") or c.startswith("smsp__pcsamp_warps_issue_stalled")]

    def num(v):
        try:
            return float(str(v).replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(num(r[samp]) for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples ({samp})")
    by_op = Counter()
    for r in rows:
        words = r["Source"].split()
        if words and words[0].startswith("@"):  # a predicate guard: the opcode follows it
            words = words[1:] or words
        by_op[(words[0] if words else "?").split(".")[0]] += num(r[samp])
    print("\nsamples by opcode:")
    for op, v in by_op.most_common(20):
        print(f"  {op:12s} {v:9.0f} {100 * v / total:5.1f}%")
    print(f"\ntop {top} instructions:")
    for r in sorted(rows, key=lambda r: -num(r[samp]))[:top]:
        reasons = sorted(((num(r[c]), c) for c in reason_cols), reverse=True)[:3]
        rs = ", ".join(f"{c.replace('smsp__pcsamp_warps_issue_stalled_', '')}={v:.0f}" for v, c in reasons if v > 0)
        print(f"  {r['Address']:>6} {100 * num(r[samp]) / total:5.1f}%  {r['Source'][:70]:70s} {rs}")


if __name__ == "__main__":
    main()
