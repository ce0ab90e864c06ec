#!/usr/bin/env python3
"""
train_gpt.py: PyTorch reference of the two model families of train_gpt (GPT-3 and LLaMA).

One model built from switches (norm, positions, mlp, biases, tied head, grouped-query attention),
read from the same JSON config the C++ trainers use. Three modes:

  --ref INIT.safetensors --out REF.safetensors
        Reference state for the C++ tests: logits, loss and gradients at the initial weights,
        then --steps AdamW steps on generated tokens (losses, grad norms, learning rates,
        final weights), and two float64 AdamW steps on given bf16 gradients (ref.opt.*: the
        optimizer's own check). fp32 on the CPU, deterministic. With --eod-token N, packed documents as
        Megatron-LM treats them (--reset-position-ids, --reset-attention-mask, --eod-mask-loss: an explicit mask).
  --check REF.safetensors
        Recompute a reference file from its own initial weights and data, print the differences.
  --train --config CONFIG.json --data 'GLOB'
        Plain training loop on llm.c token shards; cuda + bf16 autocast + scaled_dot_product_attention
        where available (torch 2.x), the plain fp32 math path otherwise. A baseline to compare with.
  --mc-eval WEIGHTS.safetensors --eval FILE.jsonl [--eval-bin OUT.bin]
        Multiple-choice scores of a byte-vocabulary model on a HellaSwag-style jsonl (ctx, endings, label; the
        context and " " + each ending as UTF-8 bytes): each ending's summed loss (minus its log-likelihood) and
        token count as jsonl, then acc and acc_norm; --eval-bin also writes the same tokens as llm.c's eval file.

Weights are read and written as safetensors with Hugging Face tensor names: GPT2LMHeadModel
(config "naming": "gpt2"), LlamaForCausalLM ("llama"), Baichuan's ("baichuan": q, k, v as one W_pack) or Qwen-1's
QWenLMHeadModel ("qwen": q, k, v as one c_attn; the MLP c_proj(w1(x) * silu(w2(x))), so w2 is the gate).
Needs only torch and numpy; runs on Debian's torch 1.13 (CPU) and on torch 2.x.
"""
import argparse
import contextlib
import copy
import glob
import inspect
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def die(msg):
    """Print a clear error and exit 1 (bad input is never a traceback)."""
    sys.stdout.flush()
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


# ------------------------------------------------------------------------------------------------
# Config: the JSON object the C++ trainer writes into safetensors metadata under "config"

CONFIG_CHOICES = {"norm": ("layernorm", "rmsnorm"), "pos": ("learned", "rope", "alibi"),
                  "mlp": ("gelu", "swiglu"), "naming": ("gpt2", "llama", "baichuan", "qwen")}


def parse_config(text, where):
    """Parse and validate a config JSON string; `where` names its origin in error messages."""
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        die(f"{where}: config is not valid JSON ({e})")
    if not isinstance(cfg, dict):
        die(f"{where}: config must be a JSON object")
    for key in ("n_layer", "n_embd", "n_head", "ffn", "vocab_size", "seq_len"):
        if not isinstance(cfg.get(key), int) or cfg[key] <= 0:
            die(f"{where}: config key '{key}' must be a positive integer (got {cfg.get(key)!r})")
    for key, choices in CONFIG_CHOICES.items():
        if cfg.get(key) not in choices:
            die(f"{where}: config key '{key}' is {cfg.get(key)!r}; expected one of {', '.join(choices)}")
    cfg.setdefault("qkv_bias", False)  # switches newer than the first checkpoints: absent means off
    cfg.setdefault("norm_head", False)
    cfg.setdefault("qk_norm", False)
    for key in ("bias", "qkv_bias", "tied", "norm_head", "qk_norm"):
        if not isinstance(cfg.get(key), bool):
            die(f"{where}: config key '{key}' must be true or false (got {cfg.get(key)!r})")
    cfg.setdefault("n_kv_head", cfg["n_head"])
    cfg.setdefault("head_dim", cfg["n_embd"] // cfg["n_head"])
    cfg.setdefault("norm_eps", 1e-5)
    cfg.setdefault("rope_theta", 10000.0)
    cfg.setdefault("init_std", 0.02)
    if not cfg.get("rope_scaling"):
        cfg["rope_scaling"] = {"factor": 0.0}
    rs = cfg["rope_scaling"]
    if not isinstance(rs, dict) or not isinstance(rs.get("factor", 0.0), (int, float)):
        die(f"{where}: rope_scaling must be an object with a numeric 'factor' (got {rs!r})")
    if rs.get("factor", 0.0) > 0:
        keys = ("low_freq_factor", "high_freq_factor", "original_max_position")
        if not all(isinstance(rs.get(k), (int, float)) for k in keys) or rs["high_freq_factor"] <= rs["low_freq_factor"]:
            die(f"{where}: rope_scaling with factor > 0 needs numeric {', '.join(keys)}, "
                f"high_freq_factor > low_freq_factor (got {rs!r})")
    if cfg["n_kv_head"] <= 0 or cfg["n_head"] % cfg["n_kv_head"] != 0:
        die(f"{where}: n_head ({cfg['n_head']}) must be a multiple of n_kv_head ({cfg['n_kv_head']})")
    if cfg["head_dim"] <= 0 or (cfg["pos"] == "rope" and cfg["head_dim"] % 2 != 0):
        die(f"{where}: head_dim ({cfg['head_dim']}) must be positive, and even for rope")
    return cfg


# ------------------------------------------------------------------------------------------------
# Safetensors: 8-byte little-endian header length, JSON header, raw little-endian tensor data

ST_READ_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I32": "<i4", "I64": "<i8"}


def read_safetensors(path):
    """Returns (tensors, metadata): name -> torch tensor (BF16 is widened to float32, exactly),
    and the "__metadata__" string map ({} if absent)."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError as e:
        die(f"cannot read safetensors file '{path}': {e.strerror}")
    if len(buf) < 8:
        die(f"'{path}': too short to be a safetensors file ({len(buf)} bytes)")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        die(f"'{path}': header length {n} exceeds the file size {len(buf)} (truncated or not safetensors)")
    try:
        header = json.loads(buf[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        die(f"'{path}': header is not valid JSON ({e})")
    if not isinstance(header, dict):
        die(f"'{path}': header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        die(f"'{path}': __metadata__ is not a JSON object")
    data_start, data_len = 8 + n, len(buf) - 8 - n
    tensors = {}
    for name, info in header.items():
        try:
            dtype, shape = info["dtype"], [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            die(f"'{path}': tensor '{name}' has a malformed header entry: {info!r}")
        if dtype not in ST_READ_DTYPES:
            die(f"'{path}': tensor '{name}' has dtype {dtype}; supported: {', '.join(ST_READ_DTYPES)}")
        np_dtype = np.dtype(ST_READ_DTYPES[dtype])
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= data_len) or end - begin != count * np_dtype.itemsize:
            die(f"'{path}': tensor '{name}' {dtype}{shape} has bad data_offsets [{begin}, {end}] "
                f"(data section is {data_len} bytes; truncated or corrupt file?)")
        arr = np.frombuffer(buf, np_dtype, count, data_start + begin).reshape(shape)
        if dtype == "BF16":  # a bf16 is the top half of an fp32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = arr.astype(np_dtype.newbyteorder("="))  # a native-order, writable copy
        tensors[name] = torch.from_numpy(arr)
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    """Write float32 (F32) and int32 (I32) tensors, in the given order, plus a string->string metadata map.
    Written to a temporary name and renamed, so a reader never sees half a file."""
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.float32:
            dtype, data = "F32", t.numpy().astype("<f4").tobytes()
        elif t.dtype == torch.int32:
            dtype, data = "I32", t.numpy().astype("<i4").tobytes()
        else:
            raise ValueError(f"write_safetensors: tensor '{name}' has dtype {t.dtype}; only float32 and int32")
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # pad so the data starts 8-byte aligned
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(header_bytes)))
            f.write(header_bytes)
            for data in blobs:
                f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        die(f"cannot write '{path}': {e.strerror}")


# ------------------------------------------------------------------------------------------------
# The model

def rope_tables(cfg, T, device, dtype):
    """cos, sin [T, head_dim/2] of position * inv_freq, computed in float64 (Llama 3.1 scaling if factor > 0)."""
    d = cfg["head_dim"]
    inv_freq = cfg["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)  # [d/2]
    rs = cfg["rope_scaling"]
    if rs.get("factor", 0.0) > 0:
        factor, low, high, orig = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position"]
        low_wavelen, high_wavelen = orig / low, orig / high
        wavelen = 2 * math.pi / inv_freq
        smooth = (orig / wavelen - low) / (high - low)
        medium = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelen < high_wavelen, inv_freq,
                               torch.where(wavelen > low_wavelen, inv_freq / factor, medium))
    angle = torch.arange(T, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]  # [T, d/2]
    return angle.cos().to(dtype), angle.sin().to(dtype)


def alibi_slopes(n):
    """ALiBi's head slopes, as Baichuan2-13B's and BLOOM's code makes them: a geometric series from 2^(-8/n) for n a
    power of two; otherwise the power of two below n, then every other slope of twice that power."""
    if math.log2(n).is_integer():
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    p = 2 ** math.floor(math.log2(n))
    return alibi_slopes(p) + alibi_slopes(2 * p)[0::2][: n - p]


def alibi_bias(cfg, T, device, dtype):
    """[H, T, T]: slope_h * (key - query), the bias ALiBi adds to the scaled scores (the causal mask is separate)."""
    slopes = torch.tensor(alibi_slopes(cfg["n_head"]), dtype=torch.float64, device=device)
    pos = torch.arange(T, dtype=torch.float64, device=device)
    return (slopes[:, None, None] * (pos[None, None, :] - pos[None, :, None])).to(dtype)


def apply_rope(x, cos, sin):
    """Rotate x [B, nh, T, hd] in Hugging Face's rotate_half convention: the halves of each head pair up."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # keeps bf16 activations bf16 under autocast
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Norm(nn.Module):
    """LayerNorm (weight and bias, biased variance) or RMSNorm (weight only) over the channels."""

    def __init__(self, cfg):
        super().__init__()
        self.rms, self.eps = cfg["norm"] == "rmsnorm", cfg["norm_eps"]
        self.weight = nn.Parameter(torch.ones(cfg["n_embd"]))
        self.bias = None if self.rms else nn.Parameter(torch.zeros(cfg["n_embd"]))

    def forward(self, x):
        if self.rms:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class HeadNorm(nn.Module):
    """QK-norm (Qwen3): RMSNorm over each head's head_dim channels, one weight shared by the heads."""

    def __init__(self, cfg):
        super().__init__()
        self.eps = cfg["norm_eps"]
        self.weight = nn.Parameter(torch.ones(cfg["head_dim"]))

    def forward(self, x):  # [B, heads, T, hd]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads: query head h reads kv head h // (n_head / n_kv_head)."""

    def __init__(self, cfg, use_sdpa):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"]
        self.use_sdpa = use_sdpa
        q_dim, kv_dim = self.n_head * self.head_dim, self.n_kv_head * self.head_dim
        qkv_bias = cfg["bias"] or cfg["qkv_bias"]  # Qwen: biases on q, k, v only
        self.qkv = nn.Linear(cfg["n_embd"], q_dim + 2 * kv_dim, bias=qkv_bias)  # rows [q | k | v]
        self.proj = nn.Linear(q_dim, cfg["n_embd"], bias=cfg["bias"])
        self.q_norm = HeadNorm(cfg) if cfg["qk_norm"] else None
        self.k_norm = HeadNorm(cfg) if cfg["qk_norm"] else None

    def forward(self, x, rope, alibi=None, mask=None):
        """mask [B, 1, T, T] bool (True: attend) replaces the causal mask: documents (ltor_masks_and_position_ids)."""
        B, T, _ = x.shape
        H, KV, hd = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = self.qkv(x).split([H * hd, KV * hd, KV * hd], dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)   # [B, H, T, hd]
        k = k.view(B, T, KV, hd).transpose(1, 2)  # [B, KV, T, hd]
        v = v.view(B, T, KV, hd).transpose(1, 2)  # [B, KV, T, hd]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        k = k.repeat_interleave(H // KV, dim=1)   # [B, H, T, hd]
        v = v.repeat_interleave(H // KV, dim=1)   # [B, H, T, hd]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if mask is None else mask
        if self.use_sdpa and alibi is None and mask is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif self.use_sdpa and alibi is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi.masked_fill(~causal, float("-inf")))
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # [B, H, T, T]
            if alibi is not None:
                att = att + alibi                                    # ALiBi: slope_h * (key - query)
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            y = att @ v                                              # [B, H, T, hd]
        y = y.transpose(1, 2).reshape(B, T, H * hd)                  # head h in columns [h*hd, (h+1)*hd)
        return self.proj(y)


class MLP(nn.Module):
    """fc1 -> GELU (tanh) -> fc2, or SwiGLU: fc1 rows [gate | up], silu(gate) * up -> fc2."""

    def __init__(self, cfg):
        super().__init__()
        self.swiglu = cfg["mlp"] == "swiglu"
        ffn = cfg["ffn"]
        self.fc1 = nn.Linear(cfg["n_embd"], 2 * ffn if self.swiglu else ffn, bias=cfg["bias"])
        self.fc2 = nn.Linear(ffn, cfg["n_embd"], bias=cfg["bias"])

    def forward(self, x):
        h = self.fc1(x)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return self.fc2(h)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, cfg, use_sdpa):
        super().__init__()
        self.norm1 = Norm(cfg)
        self.attn = Attention(cfg, use_sdpa)
        self.norm2 = Norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x, rope, alibi=None, mask=None):
        x = x + self.attn(self.norm1(x), rope, alibi, mask)
        return x + self.mlp(self.norm2(x))


def ltor_masks_and_position_ids(data, eod_token, reset_position_ids, reset_attention_mask, eod_mask_loss):
    """Megatron-LM's documents in a packed row, written as its get_ltor_masks_and_position_ids does: data [B, T];
    returns the attention mask [B, 1, T, T] (True: attend; causal, and with reset_attention_mask no token after an
    end-of-document token sees it or anything before it), the loss mask [B, T] (0 where the input is the
    end-of-document token, with eod_mask_loss) and the position ids [B, T] (restarting after each
    end-of-document token, with reset_position_ids)."""
    B, T = data.shape
    mask = torch.ones(B, T, T, dtype=torch.bool, device=data.device).tril()
    loss_mask = torch.ones(B, T, device=data.device)
    if eod_mask_loss:
        loss_mask[data == eod_token] = 0.0
    position_ids = torch.arange(T, device=data.device).unsqueeze(0).repeat(B, 1)
    if reset_position_ids or reset_attention_mask:
        for b in range(B):
            eod_index = position_ids[b, data[b] == eod_token].clone()
            prev_index = 0
            for i in eod_index.tolist():
                if reset_attention_mask:
                    mask[b, i + 1:, :i + 1] = False
                if reset_position_ids:
                    position_ids[b, i + 1:] -= i + 1 - prev_index
                    prev_index = i + 1
    return mask.unsqueeze(1), loss_mask, position_ids


class GPT(nn.Module):
    """Token (+ learned position) embedding, n_layer blocks, final norm, LM head (tied to wte or separate)."""

    def __init__(self, cfg, use_sdpa=False):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["seq_len"], cfg["n_embd"]) if cfg["pos"] == "learned" else None
        self.blocks = nn.ModuleList([Block(cfg, use_sdpa) for _ in range(cfg["n_layer"])])
        self.norm_f = Norm(cfg)
        self.lm_head = None if cfg["tied"] else nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.docs = None  # documents: a dict of ltor_masks_and_position_ids' switches, or None

    def forward(self, idx, targets=None):
        """idx [B, T] token ids; targets [B, T] with -1 = ignored. Returns logits [B, T, V] and the mean loss."""
        B, T = idx.shape
        x = self.wte(idx.long())                                              # [B, T, C]
        mask, pos = None, torch.arange(T, device=idx.device)
        if self.docs is not None:
            mask, loss_mask, pos = ltor_masks_and_position_ids(idx, **self.docs)
            if targets is not None:
                targets = targets.masked_fill(loss_mask == 0, -1)
        if self.wpe is not None:
            x = x + self.wpe(pos)
        rope = rope_tables(self.cfg, T, x.device, x.dtype) if self.cfg["pos"] == "rope" else None
        if rope is not None and pos.dim() == 2:
            rope = tuple(t[pos].unsqueeze(1) for t in rope)                   # [B, 1, T, hd/2]: each token's position
        alibi = alibi_bias(self.cfg, T, x.device, x.dtype) if self.cfg["pos"] == "alibi" else None
        for block in self.blocks:
            x = block(x, rope, alibi, mask)
        x = self.norm_f(x)
        head = self.wte.weight if self.lm_head is None else self.lm_head.weight  # [V, C]
        if self.cfg["norm_head"]:
            head = F.normalize(head, dim=-1)  # Baichuan2's NormHead: rows of unit length
        logits = F.linear(x, head)                                            # [B, T, V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T).long(), ignore_index=-1)
        return logits, loss


def init_weights(model, seed):
    """Fresh weights for --train: normal(init_std) matrices and embeddings, residual projections
    scaled by 1/sqrt(2 n_layer), zero biases, unit norm weights."""
    cfg = model.cfg
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            else:
                std = cfg["init_std"]
                if name.endswith("attn.proj.weight") or name.endswith("mlp.fc2.weight"):
                    std /= math.sqrt(2 * cfg["n_layer"])
                p.copy_(torch.randn(p.shape, generator=gen) * std)


# ------------------------------------------------------------------------------------------------
# Hugging Face names. A model tensor is cut along dim 0 into pieces, one per Hugging Face tensor
# (rows = piece length, None = whole); GPT-2's Conv1D weights are stored transposed, [in, out].

def hf_table(cfg):
    """[(model parameter name, [(hf name, rows)], transposed)] for every parameter of GPT(cfg)."""
    H, KV, hd, ffn = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"], cfg["ffn"]
    table = []

    def norm(name, hf):
        table.append((f"{name}.weight", [(f"{hf}.weight", None)], False))
        if cfg["norm"] == "layernorm":
            table.append((f"{name}.bias", [(f"{hf}.bias", None)], False))

    def linear(name, pieces, transposed):
        table.append((f"{name}.weight", [(f"{hf}.weight", rows) for hf, rows in pieces], transposed))
        if cfg["bias"] or (cfg["qkv_bias"] and name.endswith(".qkv")):
            table.append((f"{name}.bias", [(f"{hf}.bias", rows) for hf, rows in pieces], False))

    def head_norms(p, hf):  # QK-norm (Qwen3): q_norm and k_norm, [head_dim] each
        if cfg["qk_norm"]:
            table.append((f"{p}.attn.q_norm.weight", [(f"{hf}.q_norm.weight", None)], False))
            table.append((f"{p}.attn.k_norm.weight", [(f"{hf}.k_norm.weight", None)], False))

    if cfg["naming"] in ("gpt2", "qwen"):  # GPT2LMHeadModel's prefixes; Qwen-1's QWenLMHeadModel shares them
        conv1d = cfg["naming"] == "gpt2"     # GPT-2's Conv1D weights are stored transposed, Qwen-1's nn.Linear not
        table.append(("wte.weight", [("transformer.wte.weight", None)], False))
        if cfg["pos"] == "learned":
            table.append(("wpe.weight", [("transformer.wpe.weight", None)], False))
        for i in range(cfg["n_layer"]):
            p, h = f"blocks.{i}", f"transformer.h.{i}"
            norm(f"{p}.norm1", f"{h}.ln_1")
            linear(f"{p}.attn.qkv", [(f"{h}.attn.c_attn", None)], conv1d)
            head_norms(p, f"{h}.attn")
            linear(f"{p}.attn.proj", [(f"{h}.attn.c_proj", None)], conv1d)
            norm(f"{p}.norm2", f"{h}.ln_2")
            if conv1d:
                linear(f"{p}.mlp.fc1", [(f"{h}.mlp.c_fc", None)], True)
            else:  # Qwen-1's MLP is c_proj(w1(x) * silu(w2(x))): w2 the gate
                linear(f"{p}.mlp.fc1", [(f"{h}.mlp.w2", ffn), (f"{h}.mlp.w1", ffn)], False)  # gate rows, then up
            linear(f"{p}.mlp.fc2", [(f"{h}.mlp.c_proj", None)], conv1d)
        norm("norm_f", "transformer.ln_f")
    else:
        table.append(("wte.weight", [("model.embed_tokens.weight", None)], False))
        if cfg["pos"] == "learned":
            table.append(("wpe.weight", [("model.embed_positions.weight", None)], False))
        for i in range(cfg["n_layer"]):
            p, h = f"blocks.{i}", f"model.layers.{i}"
            norm(f"{p}.norm1", f"{h}.input_layernorm")
            if cfg["naming"] == "baichuan":  # q, k, v rows in one tensor
                linear(f"{p}.attn.qkv", [(f"{h}.self_attn.W_pack", None)], False)
                head_norms(p, f"{h}.self_attn")
            else:
                linear(f"{p}.attn.qkv", [(f"{h}.self_attn.q_proj", H * hd), (f"{h}.self_attn.k_proj", KV * hd),
                                         (f"{h}.self_attn.v_proj", KV * hd)], False)
            head_norms(p, f"{h}.self_attn")  # Qwen3ForCausalLM's names
            linear(f"{p}.attn.proj", [(f"{h}.self_attn.o_proj", None)], False)
            norm(f"{p}.norm2", f"{h}.post_attention_layernorm")
            if cfg["mlp"] == "swiglu":
                linear(f"{p}.mlp.fc1", [(f"{h}.mlp.gate_proj", ffn), (f"{h}.mlp.up_proj", ffn)], False)
            else:
                linear(f"{p}.mlp.fc1", [(f"{h}.mlp.up_proj", None)], False)
            linear(f"{p}.mlp.fc2", [(f"{h}.mlp.down_proj", None)], False)
        norm("norm_f", "model.norm")
    if not cfg["tied"]:
        table.append(("lm_head.weight", [("lm_head.weight", None)], False))
    return table


def to_hf(cfg, tensors):
    """Model-named tensors (weights or their gradients) -> Hugging Face-named float32 tensors."""
    out = {}
    for name, pieces, transposed in hf_table(cfg):
        t = tensors[name]
        parts = t.split([rows or t.shape[0] for _, rows in pieces], dim=0)
        for (hf, _), part in zip(pieces, parts):
            out[hf] = (part.t() if transposed else part).detach().float().clone(memory_format=torch.contiguous_format)
    return out


def load_hf(model, hf, where):
    """Copy Hugging Face-named tensors into the model's parameters; dies naming a missing or misshaped tensor."""
    params = dict(model.named_parameters())
    for name, pieces, transposed in hf_table(model.cfg):
        parts = []
        for hf_name, rows in pieces:
            if hf_name not in hf:
                die(f"{where}: missing tensor '{hf_name}' (naming '{model.cfg['naming']}')")
            shape = [rows or params[name].shape[0]] + list(params[name].shape[1:])
            if transposed:
                shape.reverse()
            t = hf[hf_name].float()
            if list(t.shape) != shape:
                die(f"{where}: tensor '{hf_name}' has shape {list(t.shape)}; the config needs {shape}")
            parts.append(t.t() if transposed else t)
        with torch.no_grad():
            params[name].copy_(torch.cat(parts, dim=0))


# ------------------------------------------------------------------------------------------------
# Optimizer and learning-rate schedule (shared by --ref and --train)

def lr_at(s, hp):
    """Learning rate of step s (0-based): linear warmup, then cosine, linear, constant or wsd to min_lr."""
    lr_max, lr_min, warmup, steps = hp["lr"], hp["min_lr"], hp["warmup"], hp["steps"]
    if s < warmup:
        return lr_max * (s + 1) / warmup
    p = (s - warmup) / max(1, steps - warmup)
    if hp["schedule"] == "cosine":
        return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + math.cos(math.pi * p))
    if hp["schedule"] == "linear":
        return lr_max + (lr_min - lr_max) * p
    if hp["schedule"] == "constant":
        return lr_max
    n_decay = max(1, math.floor(hp["decay_frac"] * steps + 0.5))  # wsd: round half up, as C's round()
    if s < steps - n_decay:
        return lr_max
    return lr_max + (lr_min - lr_max) * (s - (steps - n_decay) + 1) / n_decay


def make_optimizer(model, hp, **extra):
    """AdamW with weight decay on every 2-D tensor (matrices, embeddings) and none on biases and norms."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": hp["wd"]}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"], **extra)


def clip_grad_norm_fp64(params, max_norm):
    """torch.nn.utils.clip_grad_norm_ with the norm summed in fp64. PyTorch's fp32 norm of a large tensor on
    one CPU thread drifts (0.13% on the 38.6M-element gradient of a GPT-2 vocabulary embedding, against
    fp64), which would make the reference's clipping, and every later step, differ from an exact one."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
    coef = min(1.0, max_norm / (norm + 1e-6))
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return torch.tensor(norm)


def optimizer_step(model, opt, s, hp, exact_norm=False):
    """Clip gradients to hp["clip"] (0 = no clipping) and take AdamW step s. Returns (grad_norm before clipping, lr).
    exact_norm: the norm in fp64 (reference states); else PyTorch's own (the GPU baseline's speed)."""
    max_norm = hp["clip"] if hp["clip"] > 0 else float("inf")
    clip = clip_grad_norm_fp64 if exact_norm else torch.nn.utils.clip_grad_norm_
    norm = clip(list(model.parameters()), max_norm)
    lr = lr_at(s, hp)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    opt.zero_grad(set_to_none=True)
    return norm.item(), lr


# ------------------------------------------------------------------------------------------------
# --ref and --check: reference states for the C++ trainers

TRAIN_KEYS = ("batch", "seq", "accum", "steps", "seed", "lr", "min_lr", "warmup", "schedule", "decay_frac",
              "beta1", "beta2", "eps", "wd", "clip")


def set_deterministic():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


DOC_KEYS = ("eod_token", "reset_position_ids", "reset_attention_mask", "eod_mask_loss")


def docs_of(hp):
    """The documents' switches of a reference run (ltor_masks_and_position_ids' arguments), or None."""
    return {k: hp[k] for k in DOC_KEYS} if hp.get("eod_token", -1) >= 0 else None


def make_data(cfg, hp, ignore_frac, eod_frac=0.0):
    """inputs, targets int32 [steps, accum, B, T] uniform in [0, vocab); a random ignore_frac of targets set to -1;
    with documents, a random eod_frac of the inputs set to the end-of-document token."""
    gen = torch.Generator().manual_seed(hp["seed"])
    shape = (hp["steps"], hp["accum"], hp["batch"], hp["seq"])
    inputs = torch.randint(0, cfg["vocab_size"], shape, generator=gen).int()
    targets = torch.randint(0, cfg["vocab_size"], shape, generator=gen).int()
    targets[torch.rand(shape, generator=gen) < ignore_frac] = -1
    counted = targets != -1
    if docs_of(hp) is not None:
        inputs[torch.rand(shape, generator=gen) < eod_frac] = hp["eod_token"]
        if hp["eod_mask_loss"]:  # the targets are written as drawn; the model's loss mask drops these
            counted &= inputs != hp["eod_token"]
    if counted.flatten(2).sum(-1).min() == 0:
        die(f"a micro-batch has every target ignored (the loss would be NaN); lower --ignore-frac ({ignore_frac})")
    return inputs, targets


def reference_run(model, hp, inputs, targets):
    """Logits, loss and gradients on inputs[0, 0] at the current weights, then hp["steps"] AdamW steps.
    Returns a dict of ref.* tensors (gradients still model-named)."""
    logits, loss = model(inputs[0, 0], targets[0, 0])
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    opt = make_optimizer(model, hp, foreach=False)
    losses, norms, lrs = [], [], []
    for s in range(hp["steps"]):
        micro_losses = []
        for a in range(hp["accum"]):
            _, loss_a = model(inputs[s, a], targets[s, a])
            (loss_a / hp["accum"]).backward()
            micro_losses.append(loss_a.detach())
        losses.append(torch.stack(micro_losses).mean().item())
        norm, lr = optimizer_step(model, opt, s, hp, exact_norm=True)
        norms.append(norm)
        lrs.append(lr)
    return {"logits": logits.detach(), "loss": loss.detach().reshape(1), "grads": grads,
            "losses": torch.tensor(losses), "grad_norms": torch.tensor(norms), "lrs": torch.tensor(lrs)}


def optimizer_ref(model, hp, inputs, targets):
    """Two AdamW steps in float64 from the current weights on given gradients, through the same param groups,
    clipping and schedule as the run (make_optimizer, optimizer_step), for a tight check of an optimizer:
    step 1 gets the gradient of micro-batch (0, 0) scaled to norm 2 * clip (clipped), step 2 that of
    micro-batch (1, 0) scaled to norm clip / 2 (not clipped); both rounded to bf16, so that a bf16 trainer
    can be fed exactly these values. Returns model-named dicts: grad1, grad2 (fp32) and update (final - init)."""
    clip = hp["clip"] if hp["clip"] > 0 else 1.0
    grads = []
    for (s, a), norm_to in (((0, 0), 2.0 * clip), ((1 % hp["steps"], 0), 0.5 * clip)):
        _, loss = model(inputs[s, a], targets[s, a])
        loss.backward()
        g = {name: p.grad.double() for name, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        norm = math.sqrt(sum(float((t ** 2).sum()) for t in g.values()))
        grads.append({name: (t * (norm_to / norm)).to(torch.bfloat16).double() for name, t in g.items()})
    m64 = copy.deepcopy(model).double()
    init = {name: p.detach().clone() for name, p in m64.named_parameters()}
    opt = make_optimizer(m64, hp, foreach=False)
    for s, g in enumerate(grads):
        for name, p in m64.named_parameters():
            p.grad = g[name].clone()
        optimizer_step(m64, opt, s, hp, exact_norm=True)
    update = {name: (p.detach() - init[name]) for name, p in m64.named_parameters()}
    return {"grad1": grads[0], "grad2": grads[1], "update": update}


def load_model_file(path):
    """Read a safetensors file with a "config" in its metadata; returns (tensors, metadata, cfg, model)."""
    if not os.path.isfile(path):
        die(f"file '{path}' not found")
    tensors, meta = read_safetensors(path)
    if "config" not in meta:
        die(f"'{path}': no \"config\" in the safetensors metadata (write it with the C++ trainer's export)")
    cfg = parse_config(meta["config"], f"'{path}' metadata config")
    model = GPT(cfg)
    load_hf(model, tensors, f"'{path}'")
    return tensors, meta, cfg, model


def run_ref(args):
    set_deterministic()
    t0 = time.time()
    _, meta, cfg, model = load_model_file(args.ref)
    hp = {k: getattr(args, k) for k in TRAIN_KEYS}
    if hp["seq"] > cfg["seq_len"]:
        die(f"--seq {hp['seq']} exceeds the config's seq_len {cfg['seq_len']}")
    if args.eod_token >= 0:
        if args.eod_token >= cfg["vocab_size"]:
            die(f"--eod-token {args.eod_token} is outside the vocabulary [0, {cfg['vocab_size']})")
        hp.update({k: getattr(args, k) for k in DOC_KEYS})
    model.docs = docs_of(hp)
    inputs, targets = make_data(cfg, hp, args.ignore_frac, args.eod_frac)
    initial = to_hf(cfg, dict(model.named_parameters()))
    opt_ref = optimizer_ref(model, hp, inputs, targets)
    ref = reference_run(model, hp, inputs, targets)

    out = dict(initial)
    out["ref.inputs"], out["ref.targets"] = inputs, targets
    out["ref.logits"], out["ref.loss"] = ref["logits"], ref["loss"]
    out.update({f"ref.grad.{n}": g for n, g in to_hf(cfg, ref["grads"]).items()})
    out["ref.losses"], out["ref.grad_norms"], out["ref.lrs"] = ref["losses"], ref["grad_norms"], ref["lrs"]
    out.update({f"ref.final.{n}": w for n, w in to_hf(cfg, dict(model.named_parameters())).items()})
    for k in ("grad1", "grad2", "update"):
        out.update({f"ref.opt.{k}.{n}": t for n, t in to_hf(cfg, opt_ref[k]).items()})
    write_safetensors(args.out, out, {"config": meta["config"], "train": json.dumps(hp)})
    print(f"{cfg.get('name', 'model')}: loss at init {ref['loss'].item():.6f}")
    for s in range(hp["steps"]):
        print(f"step {s:3d} | loss {ref['losses'][s].item():.6f} | grad norm {ref['grad_norms'][s].item():.6f} "
              f"| lr {ref['lrs'][s].item():.4e}")
    print(f"wrote {args.out} ({len(out)} tensors) in {time.time() - t0:.2f} s")


def run_check(args):
    """Recompute a reference file from its initial weights and data; exit 1 if anything moved."""
    set_deterministic()
    tensors, meta, cfg, model = load_model_file(args.check)
    if "train" not in meta:
        die(f"'{args.check}': no \"train\" in the safetensors metadata (not a --ref output?)")
    try:
        hp = json.loads(meta["train"])
    except json.JSONDecodeError as e:
        die(f"'{args.check}': metadata \"train\" is not valid JSON ({e})")
    missing = [k for k in TRAIN_KEYS if k not in hp]
    if missing:
        die(f"'{args.check}': metadata \"train\" lacks {', '.join(missing)}")
    shape = [hp["steps"], hp["accum"], hp["batch"], hp["seq"]]
    for name in ("ref.inputs", "ref.targets", "ref.logits", "ref.loss", "ref.losses", "ref.grad_norms", "ref.lrs"):
        if name not in tensors:
            die(f"'{args.check}': missing tensor '{name}'")
    if list(tensors["ref.inputs"].shape) != shape or list(tensors["ref.targets"].shape) != shape:
        die(f"'{args.check}': ref.inputs / ref.targets are not [steps, accum, batch, seq] = {shape}")
    model.docs = docs_of(hp)
    ref = reference_run(model, hp, tensors["ref.inputs"], tensors["ref.targets"])
    got = {"ref.logits": ref["logits"], "ref.loss": ref["loss"], "ref.losses": ref["losses"],
           "ref.grad_norms": ref["grad_norms"], "ref.lrs": ref["lrs"]}
    got.update({f"ref.grad.{n}": g for n, g in to_hf(cfg, ref["grads"]).items()})
    got.update({f"ref.final.{n}": w for n, w in to_hf(cfg, dict(model.named_parameters())).items()})
    worst = 0.0
    for name, t in got.items():
        if name not in tensors:
            die(f"'{args.check}': missing tensor '{name}'")
        diff = (t - tensors[name]).abs().max().item() / max(1.0, tensors[name].abs().max().item())
        worst = max(worst, diff)
        if diff > 1e-5 or not name.startswith(("ref.grad.", "ref.final.")):
            print(f"{name:60s} max |diff| / max(1, max |ref|) = {diff:.3e}")
    print(f"{len(got)} tensors compared, worst relative difference {worst:.3e}")
    if worst > 1e-5:
        die(f"'{args.check}': recomputed values differ from the file by {worst:.3e} (> 1e-5)")


# ------------------------------------------------------------------------------------------------
# --train: plain training loop on llm.c token shards (a baseline)

def open_shard(path):
    """Tokens of an llm.c shard: 256 x int32 header (magic 20240520, version 1 = uint16 / 2 = uint32, count)."""
    header = np.fromfile(path, dtype="<i4", count=256)
    if header.size < 256 or header[0] != 20240520:
        die(f"'{path}': not an llm.c token shard (bad or missing magic 20240520)")
    if header[1] not in (1, 2):
        die(f"'{path}': unsupported shard version {header[1]} (1 = uint16, 2 = uint32)")
    dtype, n = np.dtype("<u2" if header[1] == 1 else "<u4"), int(header[2])
    if os.path.getsize(path) < 1024 + n * dtype.itemsize:
        die(f"'{path}': header says {n} tokens but the file is shorter (truncated?)")
    return np.memmap(path, dtype=dtype, mode="r", offset=1024, shape=(n,))


class ShardLoader:
    """Consecutive B*T+1 token windows through the shards in name order, wrapping around at the end."""

    def __init__(self, pattern, B, T, vocab_size):
        self.paths = sorted(glob.glob(pattern))
        if not self.paths:
            die(f"--data '{pattern}' matches no files")
        self.B, self.T, self.vocab_size = B, T, vocab_size
        self.shard, self.tokens, self.pos = -1, None, 0
        self.next_shard()

    def next_shard(self):
        self.shard = (self.shard + 1) % len(self.paths)
        self.tokens, self.pos = open_shard(self.paths[self.shard]), 0
        if len(self.tokens) < self.B * self.T + 1:
            die(f"'{self.paths[self.shard]}': {len(self.tokens)} tokens, fewer than one batch (B*T+1)")

    def next_batch(self):
        n = self.B * self.T
        if self.pos + n + 1 > len(self.tokens):
            self.next_shard()
        buf = torch.from_numpy(self.tokens[self.pos:self.pos + n + 1].astype(np.int64))
        self.pos += n
        if buf.max().item() >= self.vocab_size:
            die(f"'{self.paths[self.shard]}': token id {buf.max().item()} >= vocab_size {self.vocab_size}")
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)


def run_train(args):
    if not args.config or not args.data:
        die("--train needs --config CONFIG.json and --data 'GLOB'")
    try:
        with open(args.config) as f:
            cfg = parse_config(f.read(), f"'{args.config}'")
    except OSError as e:
        die(f"cannot read --config '{args.config}': {e.strerror}")
    hp = {k: getattr(args, k) for k in TRAIN_KEYS}
    if args.seq > cfg["seq_len"]:
        die(f"--seq {args.seq} exceeds the config's seq_len {cfg['seq_len']}")
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    use_sdpa = hasattr(F, "scaled_dot_product_attention")
    model = GPT(cfg, use_sdpa)
    init_weights(model, args.seed)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    fused = {"fused": True} if cuda and "fused" in inspect.signature(torch.optim.AdamW).parameters else {}
    opt = make_optimizer(model, hp, **fused)
    forward = model
    if args.compile:
        if not hasattr(torch, "compile"):
            die(f"--compile needs torch 2.x (this is torch {torch.__version__})")
        forward = torch.compile(model)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else contextlib.nullcontext
    loader = ShardLoader(args.data, args.batch, args.seq, cfg["vocab_size"])
    print(f"{cfg.get('name', 'model')}: {n_params} parameters | {device} | "
          f"{'bf16 autocast' if cuda else 'fp32'} | {'sdpa' if use_sdpa else 'math'} attention"
          f"{' | compiled' if args.compile else ''} | torch {torch.__version__}")
    tokens_per_step = args.batch * args.seq * args.accum
    for s in range(args.steps):
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for _ in range(args.accum):
            x, y = loader.next_batch()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast():
                _, loss = forward(x, y)
            (loss / args.accum).backward()
            loss_sum += loss.detach()
        norm, lr = optimizer_step(model, opt, s, hp)
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(f"step {s + 1:5d}/{args.steps} | loss {loss_sum.item() / args.accum:.6f} | lr {lr:.3e} | norm {norm:.4f} "
              f"| {dt * 1e3:.2f} ms | {tokens_per_step / dt:.0f} tok/s", flush=True)
    if cuda:
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


def mc_eval_examples(path):
    """[(ctx tokens, [ending tokens], label)] of a HellaSwag-style jsonl, tokenized as UTF-8 bytes."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                out.append((list(d["ctx"].encode()), [list((" " + e).encode()) for e in d["endings"]], int(d["label"])))
    return out


def write_llmc_eval(path, examples):
    """llm.c's eval file: 256 int32 of header (20240522, 1, examples, longest example in bytes), then per example the
    uint16 stream 65535, its bytes, its index, label, endings, the context's length and tokens, each ending's."""
    stream, longest = [], 0
    for i, (ctx, ends, label) in enumerate(examples):
        ex = [65535, 0, i, label, len(ends), len(ctx)] + ctx
        for e in ends:
            ex += [len(e)] + e
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        stream += ex
    header = np.zeros(256, dtype=np.int32)
    header[:4] = [20240522, 1, len(examples), longest]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.array(stream, dtype=np.uint16).tobytes())


def run_mc_eval(args):
    """Each ending's summed loss under the weights, one forward per ending (no padding), fp32 on the CPU."""
    set_deterministic()
    _, _, cfg, model = load_model_file(args.mc_eval)
    if cfg["vocab_size"] != 256:
        die(f"--mc-eval tokenizes as bytes: the model's vocabulary is {cfg['vocab_size']}, not 256")
    examples = mc_eval_examples(args.eval)
    if args.eval_bin:
        write_llmc_eval(args.eval_bin, examples)
    right = right_norm = 0
    with torch.no_grad():
        for i, (ctx, ends, label) in enumerate(examples):
            scores = []
            for j, e in enumerate(ends):
                tokens = torch.tensor([ctx + e])
                logits, _ = model(tokens[:, :-1])
                logp = F.log_softmax(logits[0, len(ctx) - 1:].float(), dim=-1)         # the ending's positions
                nll = -logp.gather(1, tokens[0, len(ctx):, None]).sum().item()
                scores.append((nll, len(e)))
                print(json.dumps({"example": i, "ending": j, "nll": nll, "tokens": len(e)}))
            right += min(range(len(ends)), key=lambda j: scores[j][0]) == label
            right_norm += min(range(len(ends)), key=lambda j: scores[j][0] / scores[j][1]) == label
    print(json.dumps({"acc": right / len(examples), "acc_norm": right_norm / len(examples)}))


def main():
    p = argparse.ArgumentParser(description="PyTorch reference of train_gpt's GPT-3 and LLaMA models.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--ref", metavar="INIT.safetensors", help="write a reference state from these initial weights")
    mode.add_argument("--check", metavar="REF.safetensors", help="recompute a reference state and compare")
    mode.add_argument("--train", action="store_true", help="train on llm.c token shards")
    mode.add_argument("--mc-eval", metavar="WEIGHTS.safetensors", help="score the endings of --eval's examples")
    p.add_argument("--eval", metavar="FILE.jsonl", help="multiple-choice examples for --mc-eval")
    p.add_argument("--eval-bin", metavar="OUT.bin", help="--mc-eval: also write the examples as llm.c's eval file")
    p.add_argument("--out", metavar="REF.safetensors", help="output of --ref")
    p.add_argument("--config", metavar="CONFIG.json", help="model config for --train")
    p.add_argument("--data", metavar="GLOB", help="llm.c token shards for --train")
    p.add_argument("--batch", type=int, default=2, help="micro-batch size B")
    p.add_argument("--seq", type=int, default=32, help="sequence length T")
    p.add_argument("--accum", type=int, default=2, help="gradient-accumulation micro-batches per step")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=3, help="linear warmup steps")
    p.add_argument("--schedule", choices=("cosine", "linear", "constant", "wsd"), default="cosine")
    p.add_argument("--decay-frac", type=float, default=0.2, help="wsd: fraction of steps spent decaying")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--wd", type=float, default=0.1, help="weight decay of 2-D tensors")
    p.add_argument("--clip", type=float, default=1.0, help="gradient clipping norm (0 = off)")
    p.add_argument("--ignore-frac", type=float, default=0.1, help="--ref: fraction of targets set to -1")
    p.add_argument("--compile", action="store_true", help="--train: torch.compile the model (torch 2.x)")
    p.add_argument("--eod-token", type=int, default=-1, help="--ref: documents, ended by this token (-1: none)")
    p.add_argument("--eod-frac", type=float, default=0.1, help="--ref: fraction of inputs set to --eod-token")
    p.add_argument("--reset-position-ids", action="store_true", help="--ref: positions restart per document")
    p.add_argument("--reset-attention-mask", action="store_true", help="--ref: attention within documents")
    p.add_argument("--eod-mask-loss", action="store_true", help="--ref: no loss where the input is --eod-token")
    args = p.parse_args()
    for flag in ("batch", "seq", "accum", "steps"):
        if getattr(args, flag) <= 0:
            die(f"--{flag} must be positive (got {getattr(args, flag)})")
    if args.warmup < 0 or not 0.0 <= args.ignore_frac < 1.0 or not 0.0 < args.decay_frac <= 1.0:
        die("need --warmup >= 0, 0 <= --ignore-frac < 1 and 0 < --decay-frac <= 1")
    if args.ref:
        if not args.out:
            die("--ref needs --out REF.safetensors")
        run_ref(args)
    elif args.check:
        run_check(args)
    elif args.mc_eval:
        if not args.eval:
            die("--mc-eval needs --eval FILE.jsonl")
        run_mc_eval(args)
    else:
        run_train(args)


if __name__ == "__main__":
    main()
