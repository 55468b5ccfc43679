#!/usr/bin/env python3
"""Draws the persistent decode kernel's per-SM timeline (`osprey bench --timeline FILE`) as a PNG
and prints where the step's time goes.

Usage: timeline_png.py TIMELINE.json OUT.png [--width 1600]

One row of pixels per persistent block (sorted by SM), time left to right. A block's phase is
drawn in its kind's colour from the moment its first wait returned to its end; the time before
(waiting for the phase before to finish on every block) is dark grey, and a phase in which the
block had no work is light grey. The first table splits the summed block time into work, waits
and phases without work, per kind of phase; the second the step's critical path (each phase from
the end of the one before to its own end). Python's standard library only (zlib for the PNG).
"""
import json
import struct
import sys
import zlib
from collections import defaultdict

COLOURS = {
    "qkv": (31, 119, 180), "o": (44, 160, 44), "unembedding": (148, 103, 189), "attention": (255, 127, 14),
    "experts up": (214, 39, 40), "experts up+swiglu": (214, 39, 40), "experts down": (227, 119, 194), "route": (188, 189, 34), "rope": (23, 190, 207),
    "swiglu": (140, 86, 75), "combine+norm": (127, 127, 127), "embed+norm": (0, 0, 0), "argmax": (255, 187, 120),
    "argmax final": (255, 187, 120),
}
WAIT, IDLE, BACKGROUND = (70, 70, 70), (215, 215, 215), (255, 255, 255)


def kind(name):
    return name.split(" ", 2)[2] if name.startswith("layer ") else name


def write_png(path, width, height, pixels):
    raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in pixels)
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    width = 1600
    if "--width" in args:
        width = int(args[args.index("--width") + 1])
    t = json.load(open(args[0]))
    G, names, st = t["grid"], t["phases"], t["stamps"]
    P = len(names)
    rec = lambda p, b: st[p * G + b]  # [sm, start, first wait returned (None: no work), end]
    span = max(rec(p, b)[3] for p in range(P) for b in range(G))
    row_h = max(1, 600 // G)
    blocks = sorted(range(G), key=lambda b: rec(0, b)[0])
    pixels = [[BACKGROUND] * width for _ in range(G * row_h)]
    px = lambda ns: min(width - 1, int(ns / span * (width - 1)))
    for i, b in enumerate(blocks):
        for p in range(P):
            _, s, w, e = rec(p, b)
            segs = [(s, e, IDLE)] if w is None else [(s, w, WAIT), (w, e, COLOURS.get(kind(names[p]), (0, 0, 200)))]
            for a, z, c in segs:
                for x in range(px(a), px(z) + 1):
                    for y in range(i * row_h, (i + 1) * row_h):
                        pixels[y][x] = c
    write_png(args[1], width, G * row_h, pixels)

    work, wait, idle = defaultdict(float), defaultdict(float), defaultdict(float)
    for p in range(P):
        k = kind(names[p])
        for b in range(G):
            _, s, w, e = rec(p, b)
            if w is None:
                idle[k] += e - s
            else:
                wait[k] += w - s
                work[k] += e - w
    total = G * span
    print(f"step {span / 1e3:.1f} us on {G} blocks ({P} phases, context {t['context']}, batch {t['batch']})")
    print("| phase kind | work | waits before it | no work in it |")
    print("|---|---:|---:|---:|")
    for k in sorted(set(work) | set(idle), key=lambda k: -(work[k] + wait[k] + idle[k])):
        print(f"| {k} | {work[k] / total:.1%} | {wait[k] / total:.1%} | {idle[k] / total:.1%} |")
    print(f"| all | {sum(work.values()) / total:.1%} | {sum(wait.values()) / total:.1%} | "
          f"{sum(idle.values()) / total:.1%} |")

    # The step's critical path: each phase from the end of the phase before (on every block) to
    # its own end, summed by kind.
    path, prev = defaultdict(float), 0
    for p in range(P):
        end = max(rec(p, b)[3] for b in range(G))
        path[kind(names[p])] += end - prev
        prev = end
    layers = sum(1 for n in names if n.endswith(" qkv") and n.startswith("layer "))
    print(f"\n| phase kind | of the step | us a step | us a layer ({layers} layers) |")
    print("|---|---:|---:|---:|")
    for k, v in sorted(path.items(), key=lambda kv: -kv[1]):
        per = v / layers / 1e3 if layers and any(n.endswith(" " + k) and n.startswith("layer ") for n in names) else 0
        print(f"| {k} | {v / span:.1%} | {v / 1e3:.0f} | {per:.1f} |" if per else f"| {k} | {v / span:.1%} | {v / 1e3:.0f} | |")


if __name__ == "__main__":
    main()
