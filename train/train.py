#!/usr/bin/env python3
"""Train a small gpt-oss on the rendered dialogues of data.py, then export it as published.

Run on the GPU machine (PyTorch + transformers): train/device_train.sh calls it. Inputs are the JSON
Lines `osprey render --requests F --reply` writes ({"ids", "prompt_tokens"}), with the family of each
test example beside it. The loss is the next-token cross-entropy of the reply tokens.

The vocabulary trick: o200k_harmony has 201,088 ids, the dialogues use a few thousand. The model is
trained over the used ids only, and the ids it never sees keep all-zero embedding and unembedding
rows, exactly zero in the export. Their logits are then exactly 0, so the training softmax adds
their n_unused * e^0 to its denominator: the loss is that of the full-vocabulary model, at a
fraction of the cost, and the exported file compresses to what the used rows hold.

MXFP4 experts: for the last --qat-fraction of the run the experts' weights pass through an MXFP4
fake quantizer (straight-through gradient), the one the export applies, so the checkpoint as shipped
is the model that was trained; the held-out accuracy is reported before and after quantization.

Outputs in --out: model.safetensors (Hugging Face gpt-oss layout: BF16, experts as MXFP4 _blocks and
_scales), config.json, generation_config.json, tokenizer.json (copied from --tokenizer-json),
osprey_train.json (recipe, seed, steps, losses, accuracies), goldens/ (transformers fp32 logits of
held-out dialogues over the used ids, for osprey's parity and fidelity checks).
"""
import argparse
import json
import math
import os
import random
import shutil
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch.nn.utils import parametrize
from transformers import GptOssConfig, GptOssForCausalLM

VOCAB = 201088
SPECIALS = [199998, 199999, 200002, 200003, 200005, 200006, 200007, 200008, 200012]
PAD = 199999
ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 4096}
SHAPES = {  # hidden, intermediate, layers, heads, kv heads, experts
    "small": (256, 256, 4, 4, 1, 8),
    "wide": (2880, 2880, 2, 64, 8, 4),
}
FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def mxfp4_quantize(w):
    """w [..., rows, cols] -> (blocks u8 [..., rows, cols/32, 16], scales u8 [..., rows, cols/32], dequantized):
    groups of 32 along the last axis share a power-of-two scale, values round to the nearest e2m1."""
    *lead, rows, cols = w.shape
    g = w.float().reshape(*lead, rows, cols // 32, 32)
    amax = g.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    e = torch.ceil(torch.log2(amax / 6.0)).clamp(-126, 127)
    fp4 = torch.tensor(FP4, device=w.device)
    mag = (g / torch.pow(2.0, e)).abs()
    code = (mag.unsqueeze(-1) - fp4).abs().argmin(-1)
    code = code + 8 * ((g < 0) & (code > 0)).long()
    deq = (fp4[code % 8] * torch.where(code >= 8, -1.0, 1.0) * torch.pow(2.0, e)).reshape(*lead, rows, cols)
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8)
    return blocks, (e + 127).to(torch.uint8).squeeze(-1), deq


class FakeMxfp4(torch.nn.Module):
    """HF expert weights are [E, in, out]; the checkpoint quantizes [E, out, in] along `in`."""
    def forward(self, w):
        q = mxfp4_quantize(w.detach().transpose(1, 2))[2].transpose(1, 2).to(w.dtype)
        return w + (q - w).detach()


def load_rendered(path):
    rows = [json.loads(l) for l in open(path)]
    return [(r["ids"], r["prompt_tokens"]) for r in rows]


def batches(seqs, budget, rng):
    """Batches of similar length, B * max_len <= budget tokens, in random order."""
    order = list(range(len(seqs)))
    rng.shuffle(order)
    out = []
    for c in range(0, len(order), 8192):
        chunk = sorted(order[c:c + 8192], key=lambda i: len(seqs[i][0]))
        b = []
        for i in chunk:
            if b and (len(b) + 1) * len(seqs[i][0]) > budget:
                out.append(b)
                b = []
            b.append(i)
        if b:
            out.append(b)
    rng.shuffle(out)
    return out


def tensors(seqs, idx, remap, device):
    """seqs hold remapped ids (numpy int64) and the prompt length; right padding (causal: harmless)."""
    L = max(len(seqs[i][0]) for i in idx)
    x = np.full((len(idx), L), remap[PAD], dtype=np.int64)
    y = np.full((len(idx), L), -100, dtype=np.int64)
    for r, i in enumerate(idx):
        ids, p = seqs[i]
        x[r, :len(ids)] = ids
        y[r, p - 1:len(ids) - 1] = ids[p:]  # position j predicts token j+1: the reply tokens only
    return torch.from_numpy(x).to(device, non_blocking=True), torch.from_numpy(y).to(device, non_blocking=True)


def full_vocab_loss(logits, y, log_unused):
    """Cross-entropy over all 201,088 ids when the unused ones have logit exactly 0."""
    logits = logits.float()
    extra = torch.full_like(logits[..., :1], log_unused)
    lse = torch.logsumexp(torch.cat([logits, extra], -1), -1)
    mask = y >= 0
    tgt = logits.gather(-1, y.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return ((lse - tgt) * mask).sum() / mask.sum()


@torch.no_grad()
def exact_match(model, seqs, families, remap, device, budget):
    """Greedy decoding reproduces the whole reply iff every reply token is the argmax given the ones
    before it: the teacher-forced check of a greedy run. `answer`: the last message alone."""
    model.eval()
    res = {}
    start = remap[200006]
    for idx in batches(seqs, budget, random.Random(0)):
        x, y = tensors(seqs, idx, remap, device)
        pred = model(input_ids=x).logits.argmax(-1)
        for r, i in enumerate(idx):
            ids, p = seqs[i]
            n = len(ids)
            ok = (pred[r, p - 1:n - 1] == y[r, p - 1:n - 1]).cpu().numpy()
            xs = ids
            starts = [j for j in range(p, n) if xs[j] == start]
            last = starts[-1] if starts else p
            fam = families[i]
            d = res.setdefault(fam, [0, 0, 0])
            d[0] += 1
            d[1] += int(ok.all())
            d[2] += int(ok[last - p:].all())
    model.train()
    return {f: {"n": n, "reply": a / n, "answer": b / n} for f, (n, a, b) in sorted(res.items())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True, help="rendered training examples (JSON Lines)")
    ap.add_argument("--test", required=True, help="rendered held-out examples")
    ap.add_argument("--test-families", required=True, help="data.py's test file (the family of each line)")
    ap.add_argument("--shape", choices=list(SHAPES), default="small")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-tokens", type=int, default=32768)
    ap.add_argument("--qat-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-json", required=True)
    ap.add_argument("--goldens", type=int, default=4, help="held-out dialogues whose logits are kept")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t_start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (the goldens)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    dev = "cuda"
    train = load_rendered(a.train)
    test = load_rendered(a.test)
    fams = [json.loads(l)["family"] for l in open(a.test_families)]
    assert len(fams) == len(test)
    used = sorted(set(SPECIALS).union(*(set(s[0]) for s in train + test)))
    remap = {v: i for i, v in enumerate(used)}
    lut = np.zeros(VOCAB, dtype=np.int64)
    lut[used] = np.arange(len(used))
    raw_test = test
    train = [(lut[np.array(ids)], p) for ids, p in train]
    test = [(lut[np.array(ids)], p) for ids, p in test]
    n_unused = VOCAB - len(used)
    print(f"{len(train)} training and {len(test)} held-out dialogues, {sum(len(s[0]) for s in train)} tokens; "
          f"{len(used)} of {VOCAB} ids used", flush=True)

    H, I, Lyr, heads, kv, E = SHAPES[a.shape]
    common = dict(hidden_size=H, intermediate_size=I, num_hidden_layers=Lyr, num_attention_heads=heads,
                  num_key_value_heads=kv, head_dim=64, num_local_experts=E, num_experts_per_tok=4, sliding_window=128,
                  max_position_embeddings=131072, rope_scaling=ROPE, rope_theta=150000.0, tie_word_embeddings=False,
                  rms_norm_eps=1e-5, swiglu_limit=7.0)
    cfg = GptOssConfig(vocab_size=len(used), attn_implementation="eager", **common)
    model = GptOssForCausalLM(cfg).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    log_unused = math.log(n_unused)
    qat_at = a.seconds * (1 - a.qat_fraction)
    qat = False
    step, seen, losses = 0, 0, []
    t0 = time.time()
    epoch = 0
    while True:
        for idx in batches(train, a.batch_tokens, rng):
            el = time.time() - t0
            if el >= a.seconds:
                break
            if not qat and el >= qat_at and a.qat_fraction > 0:
                for layer in model.model.layers:
                    for name in ("gate_up_proj", "down_proj"):
                        parametrize.register_parametrization(layer.mlp.experts, name, FakeMxfp4())
                qat = True
                print(f"  step {step}: MXFP4 fake quantization of the experts from here on", flush=True)
            lr = a.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, el / a.seconds))))
            for g in opt.param_groups:
                g["lr"] = lr
            x, y = tensors(train, idx, remap, dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(input_ids=x).logits
            loss = full_vocab_loss(logits, y, log_unused)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            seen += int((x != remap[PAD]).sum())
            losses.append(loss.item())
            if step % 100 == 0:
                print(f"  step {step} {el:.0f}s epoch {epoch} loss {np.mean(losses[-100:]):.4f} lr {lr:.2e} "
                      f"{seen / max(el, 1e-9):.0f} tok/s", flush=True)
        else:
            epoch += 1
            continue
        break
    train_s = time.time() - t0
    print(f"trained {step} steps, {seen} tokens in {train_s:.0f}s; last 100 steps' loss {np.mean(losses[-100:]):.4f}", flush=True)

    # Accuracy of the master weights, then of the checkpoint as exported.
    if qat:
        for layer in model.model.layers:
            for name in ("gate_up_proj", "down_proj"):
                parametrize.remove_parametrizations(layer.mlp.experts, name, leave_parametrized=False)
    model = model.float()
    acc_master = exact_match(model, test, fams, remap, dev, a.batch_tokens // 2)
    sd = model.state_dict()
    hub = {}
    with torch.no_grad():
        for k, v in sd.items():
            if ".mlp.experts." in k and not k.endswith("_bias"):
                continue
            if k in ("model.embed_tokens.weight", "lm_head.weight"):
                full = torch.zeros(VOCAB, H, dtype=torch.bfloat16)
                full[torch.tensor(used)] = v.detach().cpu().to(torch.bfloat16)
                hub[k] = full
            else:
                hub[k] = v.detach().cpu().to(torch.bfloat16).contiguous()
            v.copy_(v.to(torch.bfloat16).float())  # the model now holds the checkpoint's values
        for l in range(Lyr):
            p = f"model.layers.{l}.mlp.experts."
            for name in ("gate_up_proj", "down_proj"):
                w = sd[p + name]                                  # HF [E, in, out]
                blocks, scales, deq = mxfp4_quantize(w.transpose(1, 2).contiguous())  # file [E, out, in]
                hub[p + name + "_blocks"], hub[p + name + "_scales"] = blocks.cpu(), scales.cpu()
                w.copy_(deq.transpose(1, 2))
    acc_mxfp4 = exact_match(model, test, fams, remap, dev, a.batch_tokens // 2)
    for f in acc_mxfp4:
        print(f"  held-out {f:10s} n {acc_mxfp4[f]['n']:4d}  reply exact: master {acc_master[f]['reply']:.3f} "
              f"mxfp4 {acc_mxfp4[f]['reply']:.3f}   answer: master {acc_master[f]['answer']:.3f} "
              f"mxfp4 {acc_mxfp4[f]['answer']:.3f}", flush=True)

    os.makedirs(a.out, exist_ok=True)
    save_file(hub, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    conf = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
            "eos_token_id": 200002, "pad_token_id": PAD, "experts_per_token": 4, "num_experts_per_tok": 4,
            "head_dim": 64, "hidden_size": H, "initial_context_length": 4096, "intermediate_size": I,
            "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(Lyr)],
            "max_position_embeddings": 131072, "num_attention_heads": heads, "num_hidden_layers": Lyr,
            "num_key_value_heads": kv, "num_local_experts": E, "output_router_logits": False,
            "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                               "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
            "rms_norm_eps": 1e-05, "rope_scaling": ROPE, "rope_theta": 150000.0, "router_aux_loss_coef": 0.9,
            "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "use_cache": True, "vocab_size": VOCAB}
    json.dump(conf, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": 199998, "do_sample": True, "eos_token_id": [200002, 199999, 200012],
               "pad_token_id": PAD}, open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    shutil.copy(a.tokenizer_json, os.path.join(a.out, "tokenizer.json"))
    json.dump({"recipe": "train/data.py + train/train.py", "shape": a.shape, "seed": a.seed, "seconds": a.seconds,
               "lr": a.lr, "batch_tokens": a.batch_tokens, "qat_fraction": a.qat_fraction, "steps": step,
               "tokens": seen, "train_seconds": train_s, "final_loss": float(np.mean(losses[-100:])),
               "used_ids": len(used), "held_out_master": acc_master, "held_out_mxfp4": acc_mxfp4},
              open(os.path.join(a.out, "osprey_train.json"), "w"), indent=2)

    # Goldens: transformers fp32 logits of the exported weights on held-out dialogues (prompt and
    # reply), over the used ids (every other id's logit is exactly 0).
    gd = os.path.join(a.out, "goldens")
    os.makedirs(gd, exist_ok=True)
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding
    model.model.rotary_emb = GptOssRotaryEmbedding(config=model.config).to(dev)  # fp32 frequencies
    model.eval()
    pick = random.Random(1).sample(range(len(test)), min(a.goldens, len(test)))
    with torch.no_grad():
        for j, i in enumerate(pick):
            ids = raw_test[i][0]
            logits = model(input_ids=torch.tensor([[remap[v] for v in ids]], device=dev)).logits[0].float().cpu().numpy()
            np.save(os.path.join(gd, f"{j}.npy"), logits)
            json.dump({"tokens": list(map(int, ids)), "prompt_tokens": test[i][1], "family": fams[i], "columns": used},
                      open(os.path.join(gd, f"{j}.json"), "w"))
    print(f"exported to {a.out} ({time.time() - t_start:.0f}s in all)", flush=True)


if __name__ == "__main__":
    main()
