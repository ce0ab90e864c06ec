#!/usr/bin/env python3
"""tests/metrics_edit.py IN OUT (--scale F | --add A) [--steps LO HI]: a copy of a metrics.jsonl with the
loss of every step in LO..HI (default all) multiplied by F or moved by A, for tests that must see a
comparison fail (tests/t_loss_align.sh, tests/t_seeds.sh)."""
import argparse, json
ap = argparse.ArgumentParser()
ap.add_argument("src"); ap.add_argument("dst")
ap.add_argument("--scale", type=float, default=1.0)
ap.add_argument("--add", type=float, default=0.0)
ap.add_argument("--steps", type=int, nargs=2, default=[0, 1 << 62])
a = ap.parse_args()
with open(a.dst, "w") as out:
    for line in open(a.src):
        j = json.loads(line)
        if "loss" in j and a.steps[0] <= j.get("step", 0) <= a.steps[1]:
            j["loss"] = j["loss"] * a.scale + a.add
        out.write(json.dumps(j) + "\n")
