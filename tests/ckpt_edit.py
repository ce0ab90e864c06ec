#!/usr/bin/env python3
"""tests/ckpt_edit.py SRC DST [KEY=VALUE...]: a copy of checkpoint directory SRC at DST with state.json's integer
fields KEY set to VALUE (step also in index.json and every shard's .json) and DONE's hash of every file it names
renewed (llmc/run/checkpoint.h: FNV-1a 64 over 8-byte little-endian words, then the tail bytes; the single-file form's
DONE: FNV-1a 64 over bytes), so that --resume takes it past the hashes. For tests that build the state a run would
have had (tests/t_guard.sh), or a checkpoint damaged behind its hashes (tests/t_bad_inputs.sh)."""
import json, shutil, struct, sys

P, M, B = 1099511628211, 0xFFFFFFFFFFFFFFFF, 1469598103934665603


def fnv1a(data):
    h = B
    for b in data:
        h = ((h ^ b) * P) & M
    return h


def ckpt_hash(data):
    h, n = B, len(data) // 8 * 8
    for (w,) in struct.iter_unpack("<Q", data[:n]):
        h = ((h ^ w) * P) & M
    for b in data[n:]:
        h = ((h ^ b) * P) & M
    return h


src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
done = json.load(open(dst + "/DONE"))
sharded = "index.json" in done
state = json.load(open(dst + "/state.json"))
changed = {}
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    if k not in state: sys.exit(f"tests/ckpt_edit.py: state.json has no field {k}")
    state[k] = int(v)
    changed["state.json"] = state
if sharded and any(kv.startswith("step=") for kv in sys.argv[3:]):
    for name in done:
        if name == "index.json" or name.startswith("shard_"):
            j = json.load(open(dst + "/" + name))
            j["step"] = state["step"]
            changed[name] = j
for name, j in changed.items():
    open(dst + "/" + name, "wb").write((json.dumps(j, separators=(",", ":")) + "\n").encode())
for name in done:
    text = open(dst + "/" + name, "rb").read()
    done[name] = str(ckpt_hash(text) if sharded else fnv1a(text))
open(dst + "/DONE", "w").write(json.dumps(done, separators=(",", ":")) + "\n")
