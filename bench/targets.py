#!/usr/bin/env python3
"""The speed targets of issues 14 and 16 against `osprey bench --backend cuda --json` results.

  python3 bench/targets.py LABEL=FILE.json ...

Labels: 20b (MXFP4 experts, per-op decode), 20b-persistent (the persistent decode kernel), 20b-fp8
(FP8 experts), 120b, 120b-persistent (bench/targets.sh writes all but the last). A missing file or
point is reported as not measured, a point that did not fit as such; an unknown label is refused. Prints a markdown table:
each target, what it asks, what was measured (with its fraction of the bench's ceiling), met or
not.
"""
import json
import sys


LABELS = ("20b", "20b-persistent", "20b-fp8", "120b", "120b-persistent")


def load(args):
    runs = {}
    for a in args:
        label, _, path = a.partition("=")
        if not label or not path:
            sys.exit(f"targets.py: expected LABEL=FILE, got {a!r}")
        if label not in LABELS:
            sys.exit(f"targets.py: unknown label {label!r} (one of {', '.join(LABELS)})")
        try:
            with open(path) as f:
                run = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            print(f"targets.py: {label}: {e}", file=sys.stderr)
            continue
        if not isinstance(run, dict):
            print(f"targets.py: {label}: {path} is not a bench --json object", file=sys.stderr)
            continue
        runs[label] = run
    return runs


def points(runs, label, key):
    """The run's rows of `key` that are objects (a missing run, key or null: none)."""
    rows = (runs.get(label) or {}).get(key) or []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def prefill(runs, label, tokens):
    """The fastest row of that prompt length (a run may hold several, e.g. a sweep of a setting)."""
    rows = [p for p in points(runs, label, "prefill") if p.get("tokens") == tokens and "tokens_per_s" in p]
    return max(rows, key=lambda p: p["tokens_per_s"]) if rows else None


def decode(runs, label, batch, context):
    for d in points(runs, label, "decode"):
        if d.get("batch") == batch and d.get("context") == context:
            return d
    return None


def cell(text):
    """Text made safe for a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def main():
    runs = load(sys.argv[1:])
    rows = []

    def tok_s(point, key="tokens_per_s"):
        return point.get(key) if point and "error" not in point else None

    def add(issue, what, wanted, point, ceiling_key, label_note=""):
        if point is None:
            rows.append((issue, what, f"{wanted:,.0f} tok/s", "not measured", "", "?"))
            return
        if "error" in point:
            rows.append((issue, what, f"{wanted:,.0f} tok/s", "does not fit: " + point["error"], "", "no"))
            return
        v = point["tokens_per_s"]
        frac = point.get(ceiling_key)
        rows.append((issue, what, f"{wanted:,.0f} tok/s", f"{v:,.0f} tok/s{label_note}",
                     f"{frac:.3f}" if frac is not None else "", "yes" if v >= wanted else "no"))

    def best(labels, batch, context):
        """The faster of the decode kernels measured for a point, and which it was."""
        pts = [(decode(runs, l, batch, context), l) for l in labels]
        pts = [(p, l) for p, l in pts if p is not None]
        ok = [(p, l) for p, l in pts if "error" not in p]
        if ok:
            p, l = max(ok, key=lambda x: x[0]["tokens_per_s"])
            return p, " (persistent)" if p.get("persistent") else " (per-op)"
        return (pts[0][0] if pts else None), ""

    add(14, "20b prefill, 8k prompt", 80000, prefill(runs, "20b", 8192), "fraction_of_ceiling")
    add(14, "20b prefill, 32k prompt", 50000, prefill(runs, "20b", 32768), "fraction_of_ceiling")
    add(14, "120b prefill, 8k prompt", 40000, prefill(runs, "120b", 8192), "fraction_of_ceiling")
    for b, wanted in ((64, None), (128, 5000)):
        p = decode(runs, "120b", b, 8192)
        if wanted is None:
            fits = "not measured" if p is None else ("does not fit: " + p["error"] if "error" in p else
                                                     f"fits ({p['tokens_per_s']:,.0f} tok/s)")
            rows.append((14, "120b decode, batch 64, 8k context", "fits", fits, "", "?" if p is None else
                         ("no" if "error" in p else "yes")))
        else:
            add(14, f"120b decode, batch {b}, 8k context", wanted, p, "fraction_of_bandwidth")
    p, note = best(["120b", "120b-persistent"], 1, 8192)
    add(14, "120b decode, batch 1, 8k context", 350, p, "fraction_of_bandwidth", note)
    add(14, "20b decode, batch 64, 8k context", 10000, decode(runs, "20b", 64, 8192), "fraction_of_bandwidth")
    mx, fp = decode(runs, "20b", 1, 8192), decode(runs, "20b-fp8", 1, 8192)
    if tok_s(mx) and tok_s(fp):
        rows.append((14, "20b decode, batch 1: MXFP4 no slower than FP8", f"{fp['tokens_per_s']:,.0f} tok/s (FP8)",
                     f"{mx['tokens_per_s']:,.0f} tok/s", f"{mx['tokens_per_s'] / fp['tokens_per_s']:.2f}x",
                     "yes" if mx["tokens_per_s"] >= fp["tokens_per_s"] else "no"))
    else:
        rows.append((14, "20b decode, batch 1: MXFP4 no slower than FP8", "", "not measured", "", "?"))
    p, note = best(["20b", "20b-persistent"], 1, 8192)
    add(16, "20b decode, batch 1, 8k context", 1000, p, "fraction_of_bandwidth", note)
    p, note = best(["20b", "20b-persistent"], 1, 32768)
    add(16, "20b decode, batch 1, 32k context", 850, p, "fraction_of_bandwidth", note)
    p, note = best(["120b", "120b-persistent"], 1, 8192)
    add(16, "120b decode, batch 1, 8k context", 700, p, "fraction_of_bandwidth", note)
    p, note = best(["20b", "20b-persistent"], 8, 8192)
    add(16, "20b decode, batch 8, 8k context", 3500, p, "fraction_of_bandwidth", note)

    # The card each run reports (bench --json "device"; runs before session 45 lack it). The issues
    # ask for the H200's figures: say which card these are.
    cards = sorted({str(r.get("device", "not recorded")) for r in runs.values()})
    print(f"Card: {', '.join(cards) if cards else 'no runs'}\n")
    print("| issue | target | wanted | measured | of its ceiling | met |")
    print("|---:|---|---:|---:|---:|---|")
    for r in rows:
        print("| " + " | ".join(cell(x) for x in r) + " |")
    met = sum(r[-1] == "yes" for r in rows)
    print(f"\n{met} of {len(rows)} targets met. Ceilings: prefill as a fraction of the FP8 tensor ceiling, decode of the "
          "copy bandwidth (the bench's own columns).")


if __name__ == "__main__":
    main()
