#!/usr/bin/env python3
"""tests/eval_checks.py: the checks of tests/t_eval.sh on --eval-scores files (jsonl lines {step, example, ending,
label, nll, tokens}), train_gpt.py --mc-eval's output and a run's logs. Each command prints its figures and exits 0 when
the check holds, 1 otherwise.

  pytorch SCORES PY TOL METRICS   step 0 of SCORES against train_gpt.py --mc-eval's lines: every ending's nll within
                               TOL (relative); the run's own acc and acc_norm at step 0 (METRICS, its metrics.jsonl)
                               and those recomputed from SCORES equal PyTorch's
  same A B TOL NSTEPS          the same steps (NSTEPS of them; 0: A's) in both, every nll within TOL (relative), the
                               accuracies of each step equal
  log OUT LOG STEPS            OUT/metrics.jsonl's eval lines at STEPS (comma-separated), summary.json's last, LOG's line
"""
import json
import sys


def read_scores(path):
    """{step: [(example, ending, label, nll, tokens)]} in file order."""
    out = {}
    for line in open(path):
        d = json.loads(line)
        out.setdefault(d["step"], []).append((d["example"], d["ending"], d["label"], d["nll"], d["tokens"]))
    return out


def accuracy(rows):
    """acc and acc_norm as llmc/run/mc_eval.h defines them (the first of equal scores)."""
    by_ex = {}
    for ex, j, label, nll, tok in rows:
        by_ex.setdefault(ex, (label, []))[1].append((nll, tok))
    right = right_norm = 0
    for label, ends in by_ex.values():
        right += min(range(len(ends)), key=lambda j: ends[j][0]) == label
        right_norm += min(range(len(ends)), key=lambda j: ends[j][0] / ends[j][1]) == label
    return right / len(by_ex), right_norm / len(by_ex)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def pytorch(scores, py, tol, metrics):
    ours = read_scores(scores)[0]
    logged = [json.loads(l) for l in open(metrics) if "eval_acc" in l and json.loads(l)["step"] == 0]
    if not logged:
        return f"no eval line at step 0 in {metrics}"
    lines = [json.loads(l) for l in open(py)]
    ref = [(d["example"], d["ending"], d["nll"], d["tokens"]) for d in lines if "nll" in d]
    accs = lines[-1]
    if len(ref) != len(ours):
        return f"{len(ours)} endings scored, PyTorch {len(ref)}"
    worst = 0.0
    for (ex, j, _, nll, tok), (rex, rj, rnll, rtok) in zip(ours, ref):
        if (ex, j, tok) != (rex, rj, rtok):
            return f"ending {ex}.{j} ({tok} tokens) against PyTorch's {rex}.{rj} ({rtok} tokens)"
        worst = max(worst, rel(nll, rnll))
    acc = accuracy(ours)
    run = (logged[0]["eval_acc"], logged[0]["eval_acc_norm"])
    msg = f"{len(ours)} endings, worst relative difference {worst:.3g} (tolerance {tol}); the run's acc {run[0]:.4f} " \
          f"acc_norm {run[1]:.4f} (from its scores {acc[0]:.4f} {acc[1]:.4f}), PyTorch's {accs['acc']:.4f} " \
          f"{accs['acc_norm']:.4f}"
    ok = worst <= float(tol) and all(abs(a - b) < 1e-6 for a, b in zip(run + acc, (accs["acc"], accs["acc_norm"]) * 2))
    return None if ok else msg, msg


def same(a, b, tol, nsteps):
    sa, sb = read_scores(a), read_scores(b)
    steps = sorted(sa)
    if int(nsteps) and len(steps) != int(nsteps):
        return f"{len(steps)} evaluations in {a}, {nsteps} expected", ""
    worst, accs = 0.0, []
    for s in steps:
        if s not in sb or len(sa[s]) != len(sb[s]):
            return f"step {s}: not the same endings in both", ""
        for x, y in zip(sa[s], sb[s]):
            if x[:3] != y[:3] or x[4] != y[4]:
                return f"step {s}: ending {x[0]}.{x[1]} against {y[0]}.{y[1]}", ""
            worst = max(worst, rel(x[3], y[3]))
        acc_a, acc_b = accuracy(sa[s]), accuracy(sb[s])
        if acc_a != acc_b:
            return f"step {s}: acc, acc_norm {acc_a} against {acc_b}", ""
        accs.append(f"{s}: {acc_a[0]:.4f}/{acc_a[1]:.4f}")
    msg = f"steps {', '.join(map(str, steps))}, worst relative difference {worst:.3g} (tolerance {tol}); acc/acc_norm " \
          + ", ".join(accs)
    return (None if worst <= float(tol) else msg), msg


def log(out, logfile, steps):
    want = [int(s) for s in steps.split(",")]
    ev = [json.loads(l) for l in open(out + "/metrics.jsonl") if "eval_acc" in l]
    if [d["step"] for d in ev] != want:
        return f"eval lines at steps {[d['step'] for d in ev]}, want {want}", ""
    summ = json.load(open(out + "/summary.json"))
    if summ.get("eval_acc") != ev[-1]["eval_acc"] or summ.get("eval_acc_norm") != ev[-1]["eval_acc_norm"]:
        return f"summary.json eval_acc {summ.get('eval_acc')}, {summ.get('eval_acc_norm')}; the last line's " \
               f"{ev[-1]['eval_acc']}, {ev[-1]['eval_acc_norm']}", ""
    line = f"step {want[-1]:5d} | eval acc {ev[-1]['eval_acc']:.4f} acc_norm {ev[-1]['eval_acc_norm']:.4f}"
    if line not in open(logfile).read():
        return f"no line '{line}' in {logfile}", ""
    return None, line


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    r = {"pytorch": pytorch, "same": same, "log": log}[cmd](*args)
    fail, msg = r if isinstance(r, tuple) else (r, r)
    print(fail if fail else msg)
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
