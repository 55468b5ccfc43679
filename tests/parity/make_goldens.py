#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers' GptOss, for the CPU engine's parity ctest.

Runs on the GPU machine (torch and transformers are installed there; nothing here needs a GPU):
for each case, `osprey synth` writes a checkpoint in the published HF layout (MXFP4 experts), and
transformers loads it with its own MXFP4 dequantization, then computes in float32 with eager
attention on the CPU (no TF32): logits at every position of a random sequence longer than the
sliding window, and a greedy continuation (recomputing the whole sequence at every step, plus
transformers' own generate() with its KV cache as a cross-check).

Usage: make_goldens.py OSPREY_BINARY OUT_DIR
Writes OUT_DIR/<case>/{meta.json, logits.npy}; copy them to tests/data/parity/.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import GptOssForCausalLM

CASES = [
    # name, preset, seed, sequence length, greedy prompt length, new tokens
    ("parity-a", "parity-a", 7, 200, 16, 24),   # hidden 96, GQA 3, 4 layers, window 128 < 200
    ("parity-b", "parity-b", 11, 48, 10, 30),   # hidden 160, GQA 2, top-3 of 6, window 8
]


def load_hf(ckpt):
    """transformers' own loader and MXFP4 dequantization; float32 afterwards."""
    kwargs = dict(dtype=torch.float32, attn_implementation="eager", device_map="cpu")
    try:
        from transformers import Mxfp4Config
        kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
    except ImportError:
        pass
    model = GptOssForCausalLM.from_pretrained(ckpt, **kwargs)
    return model.float().eval()


def check_expert_dequant(model, ckpt):
    """Independent check of transformers' dequantized experts against the spec decode (low nibble first)."""
    from safetensors import safe_open
    lut = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
    index = json.load(open(os.path.join(ckpt, "model.safetensors.index.json")))["weight_map"]
    name = "model.layers.0.mlp.experts.down_proj"
    with safe_open(os.path.join(ckpt, index[name + "_blocks"]), "np") as f:
        blocks = f.get_tensor(name + "_blocks")
    with safe_open(os.path.join(ckpt, index[name + "_scales"]), "np") as f:
        scales = f.get_tensor(name + "_scales")
    E, R, G, _ = blocks.shape
    vals = np.empty((E, R, G, 32), dtype=np.float32)
    vals[..., 0::2] = lut[blocks & 15]
    vals[..., 1::2] = lut[blocks >> 4]
    w = (vals * np.ldexp(1.0, scales.astype(np.int32) - 127)[..., None]).reshape(E, R, G * 32)  # [E, out, in]
    p = model.model.layers[0].mlp.experts.down_proj.detach().float().numpy()
    same = np.array_equal(p, w)
    same_t = np.array_equal(p, w.transpose(0, 2, 1))
    print(f"  down_proj param {p.shape}: equals [E,out,in] decode: {same}; equals transpose [E,in,out]: {same_t}")
    return same or same_t


def greedy_recompute(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):]


def main():
    binary, out_root = sys.argv[1], sys.argv[2]
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    for name, preset, seed, T, P, N in CASES:
        ckpt = tempfile.mkdtemp(prefix=f"osprey_{name}_")
        subprocess.run([binary, "synth", "--preset", preset, "--seed", str(seed), "--out", ckpt, "--quiet"], check=True)
        model = load_hf(ckpt)
        cfg = model.config
        print(f"{name}: hidden {cfg.hidden_size}, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, "
              f"experts {cfg.num_local_experts} top-{cfg.num_experts_per_tok}, vocab {cfg.vocab_size}, "
              f"window {cfg.sliding_window}, layers {cfg.layer_types}")
        if not check_expert_dequant(model, ckpt):
            sys.exit(f"{name}: transformers' dequantized experts do not match the MXFP4 spec decode")
        rng = np.random.default_rng(seed)
        tokens = rng.integers(0, cfg.vocab_size, size=T).tolist()
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0].float().numpy()
        rel64_worst = None
        try:  # a float64 run bounds the reference's own rounding (its grouped-mm experts may refuse float64)
            with torch.no_grad():
                logits64 = model.double()(torch.tensor([tokens])).logits[0].numpy()
            rel64 = np.linalg.norm(logits - logits64, axis=1) / np.linalg.norm(logits64, axis=1)
            rel64_worst = float(rel64.max())
            print(f"  float32 vs float64 reference: worst per-position relative error {rel64_worst:.3g}")
        except RuntimeError as e:
            print(f"  (no float64 reference: {str(e).splitlines()[0]})")
        model.float()
        prompt = tokens[:P]
        new = greedy_recompute(model, prompt, N)
        with torch.no_grad():
            gen = model.generate(torch.tensor([prompt]), max_new_tokens=N, do_sample=False, eos_token_id=None,
                                 pad_token_id=0, use_cache=True)[0, P:].tolist()
        print(f"  greedy (recompute): {new}\n  greedy (generate, KV cache) agrees: {gen == new}")
        # And osprey's own CPU engine, for an immediate verdict.
        d = os.path.join(out_root, name)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "logits.npy"), logits.astype(np.float32))
        ours_path = os.path.join(ckpt, "ours.npy")
        subprocess.run([binary, "logits", "--model", ckpt, "--tokens", ",".join(map(str, tokens)), "--out", ours_path],
                       check=True)
        ours = np.load(ours_path)
        rel = np.linalg.norm(ours - logits, axis=1) / np.linalg.norm(logits, axis=1)
        agree = float(np.mean(ours.argmax(1) == logits.argmax(1)))
        ours_gen = subprocess.run([binary, "generate", "--model", ckpt, "--tokens", ",".join(map(str, prompt)),
                                   "--max-tokens", str(N), "--greedy", "--ignore-eos"], check=True,
                                  capture_output=True, text=True).stdout.strip()
        print(f"  osprey cpu: worst relative error {rel.max():.3g}, argmax agreement {agree:.4f}, "
              f"greedy identical: {ours_gen == ','.join(map(str, new))}")
        meta = {
            "case": name, "preset": preset, "seed": seed, "tokens": tokens,
            "greedy_prompt": prompt, "greedy_new_tokens": new,
            "reference": f"transformers {transformers.__version__} GptOssForCausalLM, float32, eager attention, "
                         f"CPU, torch {torch.__version__}; experts via transformers' MXFP4 dequantization",
            "reference_fp32_vs_fp64_worst_rel": rel64_worst,
            "osprey_cpu_worst_rel_at_generation": float(rel.max()),
        }
        json.dump(meta, open(os.path.join(d, "meta.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
