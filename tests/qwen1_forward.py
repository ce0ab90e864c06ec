#!/usr/bin/env python3
"""tests/qwen1_forward.py: Qwen-1's forward written by hand from QWenLMHeadModel's definition, on a file of weights
with its names, against a reference state of train_gpt.py (its logits and loss at those weights).

  usage: python3 tests/qwen1_forward.py WEIGHTS.safetensors REF.safetensors

WEIGHTS: weights with QWenLMHeadModel's names (train_gpt_cpu --naming qwen --export-init); REF: train_gpt.py --ref's
state made from them (ref.inputs, ref.targets, ref.logits, ref.loss). Nothing of train_gpt.py is imported: the
forward below follows Qwen-1's modeling code, in float64:
  h = wte[tokens]
  per layer N (transformer.h.N):
    a = RMSNorm(h; ln_1)                        x / sqrt(mean(x^2) + eps) * weight
    q, k, v = split(a c_attn.weight^T + c_attn.bias)   q, k, v rows stacked in one c_attn
    q, k = rotary(q), rotary(k)                  t * cos + rotate_half(t) * sin, rotate_half(t) = cat(-t2, t1),
                                                 angles pos / theta^(2i / hd) repeated over both halves
    h = h + c_proj(causal softmax(q k^T / sqrt(hd)) v)
    m = RMSNorm(h; ln_2)
    h = h + mlp.c_proj(w1(m) * silu(w2(m)))      w2 the gate, w1 the up projection
  logits = RMSNorm(h; transformer.ln_f) lm_head^T
and the mean cross-entropy over the targets >= 0. Prints [PASS] or [FAIL] lines; exit status 1 on a failure.
"""
import json
import struct
import sys

import numpy as np
import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    kinds = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
    out = {}
    for name, t in header.items():
        lo, hi = t["data_offsets"]
        a = np.frombuffer(buf[8 + n + lo:8 + n + hi], dtype=kinds[t["dtype"]]).reshape(t["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out, meta


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(t):
    t1, t2 = t.chunk(2, dim=-1)
    return torch.cat((-t2, t1), dim=-1)


def qwen1_forward(w, cfg, tokens):
    """logits [B, T, V] of Qwen-1's definition (module docstring) for tokens [B, T]."""
    B, T = tokens.shape
    H, KV, hd, C = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"], cfg["n_embd"]
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]
    if KV != H:
        raise SystemExit("qwen1_forward.py: Qwen-1 has as many k, v heads as q heads")
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)  # [T, hd]
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    h = w["transformer.wte.weight"][tokens.long()]
    for n in range(cfg["n_layer"]):
        p = f"transformer.h.{n}."
        a = rms_norm(h, w[p + "ln_1.weight"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"].T
        if cfg["qkv_bias"]:
            qkv = qkv + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (x.view(B, T, H, hd).transpose(1, 2) for x in (q, k, v))  # [B, H, T, hd]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        s = (q @ k.transpose(-1, -2)) / hd ** 0.5
        s = s.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (s @ v).transpose(1, 2).reshape(B, T, C)
        h = h + y @ w[p + "attn.c_proj.weight"].T
        m = rms_norm(h, w[p + "ln_2.weight"], eps)
        a1 = m @ w[p + "mlp.w1.weight"].T
        a2 = m @ w[p + "mlp.w2.weight"].T
        h = h + (a1 * torch.nn.functional.silu(a2)) @ w[p + "mlp.c_proj.weight"].T
    h = rms_norm(h, w["transformer.ln_f.weight"], eps)
    head = w["transformer.wte.weight"] if cfg["tied"] else w["lm_head.weight"]
    return h @ head.T


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raw, meta = read_safetensors(sys.argv[1])
    cfg = json.loads(meta["config"])
    if cfg["naming"] != "qwen" or cfg["norm"] != "rmsnorm" or cfg["mlp"] != "swiglu" or cfg["pos"] != "rope":
        raise SystemExit(f"qwen1_forward.py: {sys.argv[1]} is not a Qwen-1 model (naming qwen, RMSNorm, SwiGLU, RoPE)")
    w = {k: v.double() for k, v in raw.items()}
    ref, _ = read_safetensors(sys.argv[2])
    tokens, targets = ref["ref.inputs"][0, 0], ref["ref.targets"][0, 0]  # [B, T]: the state's first micro-batch
    logits = qwen1_forward(w, cfg, tokens)
    V = logits.shape[-1]
    ref_logits = ref["ref.logits"].double().reshape(logits.shape[0], logits.shape[1], -1)[..., :V]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long(), ignore_index=-1)
    ref_loss = float(ref["ref.loss"].double().reshape(-1)[0])
    # train_gpt.py runs in float32: its logits carry float32 rounding of sums over C and the layers (|logit| ~ 1 here)
    d_logits = (logits - ref_logits).abs().max().item()
    d_loss = abs(loss.item() - ref_loss)
    status = 0
    for what, d, tol in (("logits", d_logits, 1e-4), ("loss", d_loss, 1e-5)):
        ok = d <= tol
        print(f"[{'PASS' if ok else 'FAIL'}] Qwen-1's forward by hand (w2 the gate, w1 up; c_attn stacked) against "
              f"train_gpt.py's {what}: largest difference {d:.3g} (tolerance {tol:g})")
        status |= not ok
    return status


if __name__ == "__main__":
    sys.exit(main())
