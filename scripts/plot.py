#!/usr/bin/env python3
# scripts/plot.py: PNG plots of training runs (docs/logs.md). Each RUN is an output directory (-o) of
# train_gpt_cpu or train_gpt, holding metrics.jsonl and summary.json, and optionally train.log (the
# console output, for the memory table's rank -> pipeline stage map) and plan.txt (the --plan output of
# the same flags). Writes into OUT (default plots/):
#   loss.png        training loss per step of every run (validation losses as points)
#   throughput.png  tokens/s per device and MFU of every run (summary.json: median step after warm-up)
#   memory.png      measured bytes per rank (summary.json) beside the plan's bytes for the rank's stage
#                   (plan.txt), when a run has them
#   eval.png        --eval's multiple-choice accuracy over steps (acc solid, acc_norm dashed), when a run has it
# Usage: /usr/bin/python3 scripts/plot.py [-o OUT] [--title TEXT] RUN [RUN ...]   (a run's label: its directory name,
# or LABEL=RUN). Needs matplotlib: Debian's python3-matplotlib (bash scripts/install_deps.sh installs it).
import argparse, json, math, os, re, sys


def die(msg):
    print("error: scripts/plot.py: " + msg, file=sys.stderr)
    sys.exit(1)


def read_run(spec):
    label, path = spec.split("=", 1) if "=" in spec else (os.path.basename(os.path.normpath(spec)), spec)
    mp = os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(mp): die("%s has no metrics.jsonl (give a training run's -o directory)" % path)
    steps, val, ev = [], [], []
    for n, line in enumerate(open(mp), 1):
        # printf writes nan / inf, which JSON lacks
        line = re.sub(r'(?<=[:\[,])(-?)(nan|inf)\b', lambda m: m.group(1) + ("NaN" if m.group(2) == "nan" else "Infinity"), line)
        try: j = json.loads(line)
        except ValueError: die("%s line %d is not JSON" % (mp, n))
        if "loss" in j: steps.append((j["step"], j["loss"]))
        if "val_loss" in j: val.append((j["step"], j["val_loss"]))
        if "eval_acc" in j: ev.append((j["step"], j["eval_acc"], j["eval_acc_norm"]))
    if not steps: die("%s has no training steps" % mp)
    summary = None
    sp = os.path.join(path, "summary.json")
    if os.path.isfile(sp):
        try: summary = json.load(open(sp))
        except ValueError: die("%s is not JSON" % sp)
    stage_of = {}  # rank -> pipeline stage, from the memory table of train.log
    lp = os.path.join(path, "train.log")
    if os.path.isfile(lp):
        for line in open(lp, errors="replace"):
            m = re.match(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \|", line)
            if m: stage_of[int(m.group(1))] = int(m.group(2))
    plan = {}  # stage -> planned total bytes, from plan.txt
    pp = os.path.join(path, "plan.txt")
    if os.path.isfile(pp):
        for line in open(pp, errors="replace"):
            m = re.match(r"^plan bytes stage (\d+): .* total (\d+)", line)
            if m: plan[int(m.group(1))] = float(m.group(2))
    return dict(label=label, path=path, steps=steps, val=val, ev=ev, summary=summary, stage_of=stage_of, plan=plan)


def plot_loss(plt, runs, out, title):
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        x, y = zip(*r["steps"])
        line, = ax.plot(x, y, label=r["label"] + " train", linewidth=1.2)
        if r["val"]:
            vx, vy = zip(*r["val"])
            ax.plot(vx, vy, "o--", color=line.get_color(), label=r["label"] + " val", markersize=4, linewidth=0.8)
    finish_over_steps(plt, fig, ax, out, "loss (nats per token)", title or "loss")


def finish_over_steps(plt, fig, ax, out, ylabel, title):
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_eval(plt, runs, out, title):
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        if not r["ev"]: continue
        x, acc, acc_norm = zip(*r["ev"])
        line, = ax.plot(x, acc, "o-", label=r["label"] + " acc", markersize=4, linewidth=1.2)
        ax.plot(x, acc_norm, "s--", color=line.get_color(), label=r["label"] + " acc_norm", markersize=4, linewidth=0.8)
    ax.set_ylim(0, 1)
    finish_over_steps(plt, fig, ax, out, "multiple-choice accuracy (--eval)", title or "eval accuracy")


def plot_throughput(plt, runs, out, title):
    rs = [r for r in runs if r["summary"]]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rs) + 2), 5))
    labels = [r["label"] for r in rs]
    tok = [r["summary"]["tokens_per_s_per_device"] for r in rs]
    bars = ax.bar(range(len(rs)), tok, color="tab:blue")
    for b, r in zip(bars, rs):
        mfu = r["summary"].get("mfu", 0)
        text = "MFU %.1f%%" % (100 * mfu) if mfu > 0 else "MFU n/a\n(no peak)"
        ax.annotate(text, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rs)))
    ax.set_xticklabels(labels, rotation=20, ha="right")
    ax.set_ylabel("tokens/s per device (median step after warm-up)")
    ax.set_title(title or "throughput")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_memory(plt, runs, out, title):
    xs, measured, planned, names = [], [], [], []
    for r in runs:
        per_rank = (r["summary"] or {}).get("memory_bytes_per_rank") or []
        for rank, b in enumerate(per_rank):
            stage = r["stage_of"].get(rank, 0)
            names.append("%s\nrank %d" % (r["label"], rank) if len(per_rank) > 1 else r["label"])
            measured.append(b / 2 ** 20)
            planned.append(r["plan"][stage] / 2 ** 20 if stage in r["plan"] else float("nan"))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(names) + 2), 5))
    n = len(names)
    ax.bar([i - 0.2 for i in range(n)], measured, width=0.4, label="measured", color="tab:green")
    ax.bar([i + 0.2 for i in range(n)], [0 if math.isnan(p) else p for p in planned], width=0.4, label="plan (--plan)", color="tab:orange")
    for i, p in enumerate(planned):
        if math.isnan(p): ax.annotate("no plan", (i + 0.2, 0), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(n))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("MiB per rank (weights + grads + optimizer + activations)")
    ax.set_title(title or "memory per rank")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return list(zip(names, measured, planned))


def main():
    ap = argparse.ArgumentParser(description="PNG plots of training runs (loss, throughput and MFU, memory per rank)")
    ap.add_argument("runs", nargs="+", help="run directories (-o of the trainer), or LABEL=DIR")
    ap.add_argument("-o", "--out", default="plots", help="output directory (default plots/)")
    ap.add_argument("--title", default="", help="a prefix for the plots' titles")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("matplotlib is not installed for %s: run 'bash scripts/install_deps.sh' or 'sudo apt-get install -y "
            "python3-matplotlib' (Debian's package is for /usr/bin/python3)" % sys.executable)
    runs = [read_run(s) for s in a.runs]
    os.makedirs(a.out, exist_ok=True)
    t = (a.title + ": ") if a.title else ""
    plot_loss(plt, runs, os.path.join(a.out, "loss.png"), t + "loss")
    plot_throughput(plt, runs, os.path.join(a.out, "throughput.png"), t + "tokens/s per device and MFU")
    mem = plot_memory(plt, runs, os.path.join(a.out, "memory.png"), t + "memory per rank: measured vs plan")
    if any(r["ev"] for r in runs):
        plot_eval(plt, runs, os.path.join(a.out, "eval.png"), t + "eval accuracy")
    for r in runs:
        s = r["summary"] or {}
        print("%s: %d steps, final loss %.4f, %s tokens/s per device" % (r["label"], len(r["steps"]), r["steps"][-1][1],
              "%.1f" % s["tokens_per_s_per_device"] if s else "no summary.json:"))
    for name, m, p in mem:
        print("memory %s: measured %.3f MiB, plan %s" % (name.replace("\n", " "), m, "%.3f MiB" % p if not math.isnan(p) else "none"))
    print("wrote %s/loss.png, %s/throughput.png, %s/memory.png%s" % (a.out, a.out, a.out,
          ", %s/eval.png" % a.out if any(r["ev"] for r in runs) else ""))


if __name__ == "__main__":
    main()
