#!/usr/bin/env python3
"""A self-speculative draft of a gpt-oss checkpoint: its first N layers, the same embedding, final
norm and unembedding (Python stdlib; single-file safetensors checkpoints such as osprey-mini).

  python3 bench/make_layer_draft.py models/osprey-mini 2 /tmp/mini-draft2

The draft shares the target's tokenizer, so `--speculative draft:/tmp/mini-draft2:K` accepts it.
"""
import json, os, re, shutil, struct, sys

src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(out, exist_ok=True)
with open(os.path.join(src, "model.safetensors"), "rb") as f:
    hlen = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(hlen))
    base = 8 + hlen
    keep = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m and int(m.group(1)) >= n:
            continue
        b, e = info["data_offsets"]
        f.seek(base + b)
        keep[name] = (info, f.read(e - b))
new_header, blobs, off = {}, [], 0
if "__metadata__" in header:
    new_header["__metadata__"] = header["__metadata__"]
for name, (info, data) in keep.items():
    new_header[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + len(data)]}
    blobs.append(data)
    off += len(data)
h = json.dumps(new_header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for b in blobs:
        f.write(b)
with open(os.path.join(src, "config.json")) as f:
    cfg = json.load(f)
cfg["num_hidden_layers"] = n
if "layer_types" in cfg:
    cfg["layer_types"] = cfg["layer_types"][:n]
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2)
for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
    if os.path.exists(os.path.join(src, extra)):
        shutil.copy(os.path.join(src, extra), out)
print(f"{out}: layers 0..{n - 1} of {src}")
