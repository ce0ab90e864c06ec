#!/usr/bin/env python3
# scripts/loss_align.py: FlagPerf's loss-alignment rule over two runs' metrics.jsonl (llmc/run/logger.h writes
# one JSON object per line: {"step": N, "loss": L, ...} per training step, {"step": N, "val_loss": ...}
# per validation). From step 21 on, the mean over the steps of |L - L_ref| / L_ref must stay below 2%.
# Steps are those both files have from --start on (a step written twice, by a resumed run, counts with its
# last value). Prints the figure; exit 0 when aligned, 1 when not or when the files cannot be compared
# (missing, malformed, fewer than --start steps, a non-finite loss), with a message saying which.
#   python3 scripts/loss_align.py RUN/metrics.jsonl REF/metrics.jsonl [--start 21] [--threshold 0.02]
import argparse, json, math, re, sys


def read_losses(path):
    """{step: loss} of a metrics.jsonl; exits 1 naming the file and line when it cannot be read."""
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit("error: cannot read %s: %s" % (path, e.strerror))
    for i, line in enumerate(lines, 1):
        if not line.strip(): continue
        # printf writes nan / inf, which JSON lacks
        fixed = re.sub(r'(?<=[:\[,])(-?)(nan|inf)\b', lambda m: m.group(1) + ("NaN" if m.group(2) == "nan" else "Infinity"), line)
        try:
            j = json.loads(fixed)
        except ValueError:
            sys.exit("error: %s line %d is not JSON: %.80s" % (path, i, line))
        if not isinstance(j, dict) or "step" not in j:
            sys.exit("error: %s line %d has no \"step\": %.80s" % (path, i, line))
        if "loss" in j: out[int(j["step"])] = float(j["loss"])
    return out


def main():
    ap = argparse.ArgumentParser(description="FlagPerf loss alignment: mean |L - L_ref| / L_ref from step START on below THRESHOLD")
    ap.add_argument("run", help="metrics.jsonl of the run checked")
    ap.add_argument("ref", help="metrics.jsonl of the reference run")
    ap.add_argument("--start", type=int, default=21, help="first step compared (default 21)")
    ap.add_argument("--threshold", type=float, default=0.02, help="largest mean relative difference allowed (default 0.02)")
    a = ap.parse_args()
    if a.start < 1: sys.exit("error: --start must be >= 1, got %d" % a.start)
    if not a.threshold > 0: sys.exit("error: --threshold must be > 0, got %g" % a.threshold)
    run, ref = read_losses(a.run), read_losses(a.ref)
    for path, d in ((a.run, run), (a.ref, ref)):
        if not any(s >= a.start for s in d):
            sys.exit("error: %s has %d training steps (last %s): the rule compares steps from %d on; run at least %d steps"
                     % (path, len(d), max(d) if d else "none", a.start, a.start))
    steps = sorted(s for s in ref if s >= a.start and s in run)
    if not steps:
        sys.exit("error: %s and %s share no training step from %d on" % (a.run, a.ref, a.start))
    for s in steps:
        if not (math.isfinite(run[s]) and math.isfinite(ref[s])) or ref[s] == 0:
            sys.exit("error: step %d: loss %r beside reference %r cannot be compared" % (s, run[s], ref[s]))
    rel = sum(abs(run[s] - ref[s]) / abs(ref[s]) for s in steps) / len(steps)
    ok = rel < a.threshold
    print("loss alignment: mean |L - L_ref| / L_ref over steps %d..%d (%d steps) = %.4f%% (threshold %.4g%%): %s"
          % (steps[0], steps[-1], len(steps), 100 * rel, 100 * a.threshold, "aligned" if ok else "NOT aligned"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
