# tests/weights_checks.py: weight checks on the trainers' checkpoints (ckpt_*/model.safetensors and optim.safetensors,
# the trainers' own tensor names, the model config in the metadata) for tests/t_gpu_multirank.sh. The tolerances stay
# in the script and come in as arguments. Needs numpy (scripts/install_deps.sh installs python3-numpy for
# /usr/bin/python3). Run from the repository root as: /usr/bin/python3 tests/weights_checks.py COMMAND ARGS...
# The comparisons print "WORST at TENSOR" (the worst tensor's value and name) and exit 0 when WORST <= TOL, else 1:
#   compare A B TOL             per tensor max |a - b| / (max |b| + 1e-3), the metric of build/test_parallel compare
#   steps A B LR TOL            per tensor ||a - b|| (L2 over the tensor) in AdamW steps of one element (LR): a
#                               difference that adds up over the tensor to less than TOL of the one step an element
#                               takes at most per update (|m / sqrt(v)| <= 1 near that size)
#   update INIT A B TOL         per tensor the relative L2 error of A's update against B's, ||(a - init) - (b - init)|| /
#                               ||b - init|| (tests/ref_state.h's update_err_parts); INIT is an --export-init file
#                               (Hugging Face GPT-2 names, Conv1D weights [in, out]), mapped onto the checkpoint's names
#   logit_bound INIT CKPT...    an upper bound of |logit| over the weights given (GPT-2 family, tied head): with
#                               layernorm's output y = w * xhat + b, ||xhat|| <= sqrt(C), |y . e_v| <= (max |w| sqrt(C) +
#                               ||b||) * max_v ||e_v|| (Cauchy-Schwarz), maximised over INIT and the checkpoints; printed
# Both comparisons leave out the key biases of models with learned positions and biases (as key_bias_mask in
# tests/ref_state.h): a key bias adds the same amount to every score of a query's softmax row, so its exact gradient is 0,
# and what a trainer computes for it is rounding noise that AdamW turns into steps of about lr in either direction.
import json, struct, sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64}


def read_st(path):
    """({name: float64 array}, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        if t["dtype"] == "BF16":
            u = np.frombuffer(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]], dtype=np.uint16)
            a = (u.astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]], dtype=DTYPES[t["dtype"]])
        out[name] = a.astype(np.float64).reshape(t["shape"])
    return out, meta


def config(meta):
    """The model config of a checkpoint's model.safetensors; {} for optim.safetensors, which holds none (its moments
    need no mask: a key bias's m and v are as small as its noisy gradients)."""
    return json.loads(meta["config"]) if "config" in meta else {}


def key_bias_masks(c, tensors):
    """{tensor name: boolean mask of the elements left out} (the key biases, see the header)."""
    masks = {}
    if not ((c.get("bias") or c.get("qkv_bias")) and c.get("pos") != "rope"):
        return masks
    q = c["n_head"] * c["head_dim"]
    k = c["n_kv_head"] * c["head_dim"]
    for name, a in tensors.items():
        if name.endswith(".qkv.b"):  # the weights' h.N.qkv.b and the moments' m.h.N.qkv.b, v.h.N.qkv.b alike
            m = np.zeros(a.size, dtype=bool)
            m[q:q + k] = True
            masks[name] = m
    return masks


# the checkpoint's names of the GPT-2 family and the Hugging Face names --export-init writes (weights_io.h)
HF_NAMES = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight", "lnf.w": "transformer.ln_f.weight",
            "lnf.b": "transformer.ln_f.bias"}
HF_BLOCK = {"ln1.w": ("ln_1.weight", False), "ln1.b": ("ln_1.bias", False), "qkv.w": ("attn.c_attn.weight", True),
            "qkv.b": ("attn.c_attn.bias", False), "attn_out.w": ("attn.c_proj.weight", True),
            "attn_out.b": ("attn.c_proj.bias", False), "ln2.w": ("ln_2.weight", False), "ln2.b": ("ln_2.bias", False),
            "fc1.w": ("mlp.c_fc.weight", True), "fc1.b": ("mlp.c_fc.bias", False), "fc2.w": ("mlp.c_proj.weight", True),
            "fc2.b": ("mlp.c_proj.bias", False)}


def from_hf(hf, names, path):
    """The --export-init tensors under the checkpoint's names and shapes."""
    out = {}
    for name, shape in names.items():
        if name in HF_NAMES:
            src, transpose = HF_NAMES[name], False
        else:
            parts = name.split(".", 2)  # h, layer, rest
            if parts[0] != "h" or parts[2] not in HF_BLOCK:
                sys.exit("error: tests/weights_checks.py: no GPT-2 name for checkpoint tensor %s" % name)
            sub, transpose = HF_BLOCK[parts[2]]
            src = "transformer.h.%s.%s" % (parts[1], sub)
        if src not in hf:
            sys.exit("error: tests/weights_checks.py: %s lacks %s (for %s)" % (path, src, name))
        a = hf[src].T if transpose else hf[src]
        out[name] = a.reshape(shape)
    return out


def kept(a, mask):
    return a.reshape(-1) if mask is None else a.reshape(-1)[~mask]


def report(worst, at, tol):
    """Prints "WORST at TENSOR"; exit status 0 when WORST is within TOL."""
    print("%.3g at %s" % (worst, at))
    return 0 if worst <= float(tol) else 1


def per_tensor(pa, pb, tol, metric):
    """The worst over the tensors of metric(a, b) (the key biases left out), reported against tol."""
    a, ma = read_st(pa)
    b, _ = read_st(pb)
    if sorted(a) != sorted(b) or any(a[k].size != b[k].size for k in a):
        print("tensors differ in names or sizes")
        return 1
    masks = key_bias_masks(config(ma), a)
    worst, at = 0.0, ""
    for k in a:
        x, y = kept(a[k], masks.get(k)), kept(b[k], masks.get(k))
        r = metric(x, y) if np.all(np.isfinite(x)) else np.inf
        if not (r <= worst) or not at:
            worst, at = r, k
    return report(worst, at, tol)


def compare(pa, pb, tol):
    return per_tensor(pa, pb, tol, lambda x, y: np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-3))


def steps(pa, pb, lr, tol):
    return per_tensor(pa, pb, tol, lambda x, y: np.sqrt(np.sum((x - y) ** 2)) / float(lr))


def update(pi, pa, pb, tol):
    a, ma = read_st(pa)
    b, _ = read_st(pb)
    init = from_hf(read_st(pi)[0], {k: v.shape for k, v in b.items()}, pi)
    if sorted(a) != sorted(b):
        print("tensors differ in names")
        return 1
    masks = key_bias_masks(config(ma), a)
    worst, at = 0.0, ""
    for k in a:
        m = masks.get(k)
        x, y, z = kept(a[k], m), kept(b[k], m), kept(init[k], m)
        den = np.sum((y - z) ** 2)
        if den == 0:
            continue
        r = np.sqrt(np.sum((x - y) ** 2) / den) if np.all(np.isfinite(x)) else np.inf
        if not (r <= worst) or not at:
            worst, at = r, k
    return report(worst, at, tol)


def logit_bound(pi, ckpts):
    c = config(read_st(ckpts[0])[1])
    if not c.get("tied") or c.get("norm") != "layernorm":
        sys.exit("error: tests/weights_checks.py logit_bound: written for the tied GPT-2 family (layernorm, tied head)")
    first = read_st(ckpts[0])[0]
    sets = [from_hf(read_st(pi)[0], {k: first[k].shape for k in ("wte", "lnf.w", "lnf.b")}, pi)]
    sets += [read_st(p)[0] for p in ckpts]
    bound = 0.0
    for t in sets:
        y = np.max(np.abs(t["lnf.w"])) * np.sqrt(c["n_embd"]) + np.linalg.norm(t["lnf.b"])
        bound = max(bound, y * np.max(np.linalg.norm(t["wte"], axis=1)))
    print("%.6g" % bound)
    return 0


if __name__ == "__main__":
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if cmd == "compare" and len(args) == 3:
        sys.exit(compare(*args))
    if cmd == "steps" and len(args) == 4:
        sys.exit(steps(*args))
    if cmd == "update" and len(args) == 4:
        sys.exit(update(*args))
    if cmd == "logit_bound" and len(args) >= 2:
        sys.exit(logit_bound(args[0], args[1:]))
    sys.exit("usage: tests/weights_checks.py compare A B TOL | steps A B LR TOL | update INIT A B TOL | logit_bound INIT CKPT...")
