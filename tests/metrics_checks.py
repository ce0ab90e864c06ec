# tests/metrics_checks.py: number checks on what the trainers write (metrics.jsonl, summary.json and values
# read from their logs), for the test scripts: tests/t_parallel.sh (diff, within, max, half_of,
# less_than_fraction) and tests/t_default.sh (falls, summary). The tolerances stay in the scripts and come
# in as arguments. Run from the repository root as: python3 tests/metrics_checks.py COMMAND ARGS...
#   diff A.jsonl B.jsonl FIRST KEY REL LAST  prints the worst |difference| of KEY (loss, val_loss, grad_norm)
#                                            over steps FIRST..LAST of B, relative to B's value when REL is 1
#                                            ("%.3g"); "missing" when a step of B is absent from A,
#                                            "non-finite" when a value of either is NaN or inf
#   within VALUE TOL                         exit 0 when VALUE is a finite number <= TOL
#   max A B                                  prints the larger of the two numbers, as written
#   half_of A B TOL                          exit 0 when |A - B/2| < TOL * B
#   less_than_fraction A B FRAC              exit 0 when A < B * FRAC
#   falls FIRST LAST ABOVE BELOW             exit 0 when both are finite, FIRST > ABOVE and LAST < BELOW
#   summary DIR STEPS BELOW                  exit 0 when every line of DIR/metrics.jsonl is JSON (printf's nan
#                                            is not) and DIR/summary.json has steps == STEPS and
#                                            val_loss < BELOW
#   guard A.jsonl Z W SKIPS                  the numerics guard (llmc/run/guard.h) decided as its rule, replayed
#                                            here on the logged losses and norms: non-finite (null) loss or
#                                            norm, or with Z > 0 a loss above mean + Z sd of the last W
#                                            accepted losses once W are there; and the skipped steps are
#                                            exactly SKIPS ("3,4" or "none"). Prints the verdicts
#   loss_scale A.jsonl SCALE INIT WINDOW HYST MIN SKIPS
#                                            the loss scale (llmc/loss_scale.h) as Megatron-LM's rule, replayed
#                                            here on the logged norms (an overflow: a null norm): SCALE "dynamic"
#                                            (from INIT; WINDOW, HYST, MIN) or a static number; each step's logged
#                                            loss_scale is the rule's after that step, a null norm under a finite
#                                            loss is skipped as "overflow", and the skipped steps are exactly
#                                            SKIPS. Prints the scales
import json, math, re, sys


def read_metrics(p, key):
    """{step: value of key} of a metrics.jsonl; {} when the file is missing or malformed."""
    out = {}
    try:
        for line in open(p):
            # printf writes nan / inf, which JSON lacks: read them as Python's NaN / Infinity
            j = json.loads(re.sub(r'(?<=[:\[,])(-?)(nan|inf)\b', lambda m: m.group(1) + ("NaN" if m.group(2) == "nan" else "Infinity"), line))
            if key in j: out[j["step"]] = j[key]
    except (OSError, ValueError):
        pass
    return out


def diff(pa, pb, first, key, rel, last):
    first, rel, last = int(first), rel == "1", int(last)
    a, b = read_metrics(pa, key), read_metrics(pb, key)
    steps = [s for s in b if first <= s <= last]
    if not steps or any(s not in a for s in steps): print("missing"); return 0
    if not all(a[s] is not None and b[s] is not None and math.isfinite(a[s]) and math.isfinite(b[s]) for s in steps):
        print("non-finite"); return 0
    print("%.3g" % max(abs(a[s] - b[s]) / (abs(b[s]) if rel else 1) for s in steps))
    return 0


def numbers(*args):
    """The arguments as floats; None when one is not a number (the check then fails)."""
    try:
        return [float(x) for x in args]
    except ValueError:
        return None


def within(value, tol):
    v = numbers(value, tol)
    return 0 if v and math.isfinite(v[0]) and v[0] <= v[1] else 1


def larger(a, b):
    if numbers(a, b) is None: return 1
    print(max([a, b], key=float))
    return 0


def half_of(a, b, tol):
    v = numbers(a, b, tol)
    return 0 if v and abs(v[0] - v[1] / 2) < v[2] * v[1] else 1


def less_than_fraction(a, b, frac):
    v = numbers(a, b, frac)
    return 0 if v and v[0] < v[1] * v[2] else 1


def falls(first, last, above, below):
    v = numbers(first, last, above, below)
    return 0 if v and math.isfinite(v[0]) and math.isfinite(v[1]) and v[0] > v[2] and v[1] < v[3] else 1


def summary(d, steps, below):
    try:
        for line in open(d + "/metrics.jsonl"):
            json.loads(line)
        s = json.load(open(d + "/summary.json"))
        return 0 if s["steps"] == int(steps) and s["val_loss"] < float(below) else 1
    except (OSError, ValueError, KeyError, TypeError):
        return 1


def guard(pa, z, w, skips):
    z, w = float(z), int(w)
    want = set() if skips == "none" else {int(x) for x in skips.split(",")}
    try:
        rows = [json.loads(line) for line in open(pa)]
    except (OSError, ValueError) as e:
        print(f"cannot read {pa}: {e}"); return 1
    window, skipped, bad = [], set(), []
    for r in (r for r in rows if "loss" in r):
        loss, norm = r["loss"], r["grad_norm"]
        if loss is None or norm is None: verdict = "non-finite"
        elif z > 0 and len(window) == w:
            mean = sum(window) / w
            sd = math.sqrt(sum((x - mean) ** 2 for x in window) / w)
            verdict = "loss spike" if loss > mean + z * sd else None
        else: verdict = None
        if verdict is None and z > 0: window = (window + [loss])[-w:]
        if verdict: skipped.add(r["step"])
        if r.get("skipped") != verdict: bad.append(f"step {r['step']}: logged {r.get('skipped')}, the rule says {verdict}")
    if bad: print("; ".join(bad)); return 1
    if skipped != want: print(f"skipped steps {sorted(skipped)}, expected {sorted(want)}"); return 1
    print(f"{len(rows)} steps, skipped {sorted(skipped) or 'none'} as the rule says")
    return 0


def loss_scale(pa, mode, init, window, hyst, lo, skips):
    dynamic = mode == "dynamic"
    scale = float(init) if dynamic else float(mode)
    window, hyst, lo = int(window), int(hyst), float(lo)
    want = set() if skips == "none" else {int(x) for x in skips.split(",")}
    try:
        rows = [r for r in (json.loads(line) for line in open(pa)) if "loss" in r]
    except (OSError, ValueError) as e:
        print(f"cannot read {pa}: {e}"); return 1
    clean, tracker, skipped, bad, seen = 0, hyst, set(), [], []
    for r in rows:
        overflow = r["grad_norm"] is None
        verdict = "non-finite" if r["loss"] is None else "overflow" if overflow else None
        if dynamic and overflow:
            clean, tracker = 0, tracker - 1
            if tracker <= 0: scale = max(scale / 2, lo)
        elif dynamic:
            clean += 1
            if clean == window: clean, tracker, scale = 0, hyst, scale * 2
        if verdict: skipped.add(r["step"])
        if r.get("skipped") != verdict: bad.append(f"step {r['step']}: logged skip {r.get('skipped')}, the rule says {verdict}")
        if r.get("loss_scale") != scale: bad.append(f"step {r['step']}: logged scale {r.get('loss_scale')}, the rule says {scale:g}")
        seen.append(f"{scale:g}")
    if not rows: print(f"no steps in {pa}"); return 1
    if bad: print("; ".join(bad[:4])); return 1
    if skipped != want: print(f"skipped steps {sorted(skipped)}, expected {sorted(want)}"); return 1
    print(f"scales {' '.join(seen)}, skipped {sorted(skipped) or 'none'} as the rule says")
    return 0


commands = {"diff": diff, "within": within, "max": larger, "half_of": half_of,
            "less_than_fraction": less_than_fraction, "falls": falls, "summary": summary, "guard": guard,
            "loss_scale": loss_scale}
if len(sys.argv) < 2 or sys.argv[1] not in commands:
    sys.exit(f"tests/metrics_checks.py: unknown command; one of {', '.join(commands)}")
sys.exit(commands[sys.argv[1]](*sys.argv[2:]))
