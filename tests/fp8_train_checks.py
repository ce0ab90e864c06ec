#!/usr/bin/env python3
"""tests/fp8_train_checks.py: checks of train_gpt --fp8's runs for tests/t_fp8_train.sh, from what the trainer writes
(metrics.jsonl, and a checkpoint's fp8 delayed-scaling state: "fp8.x" and "fp8.dy" in optim.safetensors, "fp8" in
state.json, layout in llmc/run/checkpoint.h's Fp8State). Run from the repository root:
  flagperf A.jsonl B.jsonl FIRST      FlagPerf's loss rule: prints the mean over steps FIRST.. (those in both) of
                                      |loss_A - loss_B| / loss_B, "%.4g"
  state CKPT MARGIN                   the delayed-scaling state of checkpoint directory CKPT against the rule of
                                      llmc/fp8.cuh, recomputed here in float32: history rows [3, 3 + H) of [3 + H, 4 L],
                                      pos = step mod H; rows written so far non-zero exactly in the columns that have
                                      an amax (a layer's tensors), the others zero; each column's scale
                                      = fp8_max 2^-MARGIN / (max of its window) (E4M3 448 for x, E5M2 57344 for dy) when
                                      that max is finite and > 0, else 1 (never updated); scale_inv = 1 / scale; the
                                      amax row zero (after the update). Exit 0 when all hold; prints what it checked
  scales CKPT_A CKPT_B                prints the worst relative difference of the scale rows of A against B
"""
import json, struct, sys
import numpy as np

FMT_MAX = {"fp8.x": 448.0, "fp8.dy": 57344.0}


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(b[8 + n + lo:8 + n + hi], dtype=np.float32).reshape(t["shape"])
    return out


def fp8_state(ckpt):
    st = json.load(open(ckpt + "/state.json"))
    tensors = read_safetensors(ckpt + "/optim.safetensors")
    return st, {k: tensors[k] for k in FMT_MAX if k in tensors}


def check_state(ckpt, margin):
    st, ts = fp8_state(ckpt)
    f = st.get("fp8")
    if f is None or len(ts) != 2:
        print(f"{ckpt}: no fp8 state (state.json fp8: {f}, tensors {sorted(ts)})")
        return False
    H, pos, step = f["history"], f["pos"], st["step"]
    ok = True
    if pos != step % H:
        print(f"pos {pos} != step {step} mod history {H}")
        ok = False
    written = min(step, H)  # history rows holding an update's amaxes (circular: the newest at pos - 1)
    rows = [(pos - 1 - j) % H for j in range(written)]
    figures = []
    for name, a in ts.items():
        if a.shape[0] != 3 + H:
            print(f"{name}: shape {a.shape}, expected [{3 + H}, 4 L]")
            return False
        scale, scale_inv, amax, hist = a[0], a[1], a[2], a[3:]
        owned = np.any(hist > 0, axis=0)
        unwritten = [r for r in range(H) if r not in rows]
        if unwritten and np.any(hist[unwritten] != 0):
            print(f"{name}: history rows never written hold non-zero values")
            ok = False
        if np.any(hist[rows][:, owned] == 0):
            print(f"{name}: a written history row has a zero amax in a column with amaxes")
            ok = False
        if np.any(amax != 0):
            print(f"{name}: the amax row is not zero after the update")
            ok = False
        scaled_max = np.float32(np.ldexp(FMT_MAX[name], -margin))
        window = hist.max(axis=0)
        want = np.where((window > 0) & np.isfinite(window), scaled_max / np.where(window > 0, window, 1), 1).astype(np.float32)
        want = np.minimum(want, np.finfo(np.float32).max)
        if not np.array_equal(scale, want):
            bad = np.nonzero(scale != want)[0]
            print(f"{name}: scale != fp8 max 2^-{margin} / window max in columns {bad.tolist()[:8]}: {scale[bad][:4]} vs {want[bad][:4]}")
            ok = False
        if not np.array_equal(scale_inv, (np.float32(1) / scale).astype(np.float32)):
            print(f"{name}: scale_inv != 1 / scale")
            ok = False
        figures.append(f"{name} {int(owned.sum())} of {a.shape[1]} columns, scales {scale[owned].min():.4g}..{scale[owned].max():.4g}")
    print(f"step {step}, history {H}, pos {pos}: " + "; ".join(figures))
    return ok


def main():
    cmd = sys.argv[1]
    if cmd == "flagperf":
        a, b, first = sys.argv[2], sys.argv[3], int(sys.argv[4])
        la = {j["step"]: j["loss"] for j in map(json.loads, open(a)) if "loss" in j}
        lb = {j["step"]: j["loss"] for j in map(json.loads, open(b)) if "loss" in j}
        steps = sorted(s for s in lb if s >= first and s in la)
        if not steps:
            print("no-steps")
            return
        print("%.4g" % (sum(abs(la[s] - lb[s]) / lb[s] for s in steps) / len(steps)))
    elif cmd == "state":
        sys.exit(0 if check_state(sys.argv[2], int(sys.argv[3])) else 1)
    elif cmd == "scales":
        _, a = fp8_state(sys.argv[2])
        _, b = fp8_state(sys.argv[3])
        worst = max(float(np.max(np.abs(a[k][0] / b[k][0] - 1))) for k in FMT_MAX)
        print("%.3g" % worst)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
