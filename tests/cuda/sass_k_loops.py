#!/usr/bin/env python3
# cuobjdump -sass output -> for each kernel whose name contains NAME (default the grouped FP8 GEMM,
# m_grouped_fp8_wgmma_kernel): its instruction and spill counts, and its inner loop (the shortest
# backward branch around a wgmma) with its instruction mix.
# Usage: sass_k_loops.py SASS_FILE [NAME] (docs/PERF.md, session 25).
import sys, re, collections
text = open(sys.argv[1]).read().split('\n')
cur = None; out = {}
for line in text:
    m = re.match(r'\s+Function : (\S+)', line)
    if m: cur = m.group(1); out[cur] = []; continue
    if cur: out[cur].append(line)
for name, lines in sorted(out.items()):
    if (sys.argv[2] if len(sys.argv) > 2 else 'm_grouped_fp8_wgmma_kernel') not in name: continue
    ins = []
    for l in lines:
        m = re.match(r'\s+/\*([0-9a-f]+)\*/\s+(.*?);', l)
        if m: ins.append((int(m.group(1), 16), m.group(2).strip()))
    m = re.search(r'kernelI(.*?)EEv', name)
    tag = m.group(1) if m else name
    best = None
    for a, t in ins:
        m = re.search(r'BRA (0x[0-9a-f]+)', t)
        if m and int(m.group(1), 16) < a:
            body = [x for x in ins if int(m.group(1), 16) <= x[0] <= a]
            if any('GMMA' in x[1] for x in body) and (best is None or len(body) < len(best)): best = body
    spills = sum(('LDL' in t or 'STL' in t) for _, t in ins)
    if best:
        c = collections.Counter((t.split()[1] if t.startswith('@') else t.split()[0]) for _, t in best)
        print(tag, len(ins), 'instructions,', spills, 'spill ops; K loop', len(best), 'instructions:',
              ', '.join(f'{k} {v}' for k, v in c.most_common(12)))
