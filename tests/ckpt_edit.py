#!/usr/bin/env python3
"""tests/ckpt_edit.py SRC DST KEY=VALUE...: a copy of checkpoint directory SRC at DST with state.json's integer
fields KEY set to VALUE and its DONE hash renewed (FNV-1a 64 of the file, as llmc/run/checkpoint.h writes it), so that
--resume takes it. For tests that build the state a run would have had (tests/t_guard.sh)."""
import json, shutil, sys


def fnv1a(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
state = json.load(open(dst + "/state.json"))
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    if k not in state: sys.exit(f"tests/ckpt_edit.py: state.json has no field {k}")
    state[k] = int(v)
text = json.dumps(state, separators=(",", ":")) + "\n"
open(dst + "/state.json", "w").write(text)
done = json.load(open(dst + "/DONE"))
done["state.json"] = str(fnv1a(text.encode()))
open(dst + "/DONE", "w").write(json.dumps(done, separators=(",", ":")) + "\n")
