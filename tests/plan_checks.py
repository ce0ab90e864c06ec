# tests/plan_checks.py: checks of train_gpt_cpu --plan (llmc/parallel/planner.h) for tests/t_plan.sh. Run from the
# repository root as: python3 tests/plan_checks.py COMMAND ARGS...
#   measured_vs_plan RUN.log PLAN.log   every rank's measured MiB (the run's "memory per rank" table) equals
#                                       its stage's row of the plan ("plan bytes stage" lines) to the table's
#                                       0.001 MiB; prints what differs, exit 1 if anything does
#   gpt3_state PLAN.log L C H F V SEQ DP ZERO   the weights, gradients and optimizer bytes of a one-stage
#                                       plan of a GPT-3 shape (learned positions, biases, tied head, fp32)
#                                       against a hand count from the shape: exit 1 when they differ
#   fits RUN.log GIB                    the largest measured total per rank is at most GIB: exit 1 if not
#   timed SECONDS MAXRSS_MB CMD...      runs CMD; exit 1 unless it exits 0 within SECONDS using at most
#                                       MAXRSS_MB of memory (prints the figures)
import re, resource, subprocess, sys, time

MIB = 1 << 20


def measured_rows(path):
    """[(rank, pp, [params, grads, optim, acts] in MiB as printed)] of a run's memory table."""
    rows = []
    for line in open(path):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|(.*)$", line)
        if not m: continue
        vals = re.findall(r"([\d.]+)\s+\(\s*[\d.]+\)", m.group(5))
        if len(vals) == 4: rows.append((int(m.group(1)), int(m.group(2)), vals))
    return rows


def plan_rows(path):
    """{stage: {kind: bytes}} of the plan's "plan bytes stage S:" lines."""
    out = {}
    for line in open(path):
        m = re.match(r"plan bytes stage (\d+): (.*)$", line)
        if m:
            f = m.group(2).split()
            out[int(m.group(1))] = {f[i]: float(f[i + 1]) for i in range(0, len(f), 2)}
    return out


def measured_vs_plan(run_log, plan_log):
    rows, plan = measured_rows(run_log), plan_rows(plan_log)
    if not rows or not plan:
        print("no memory table (%d rows) or no plan rows (%d)" % (len(rows), len(plan))); return 1
    bad = []
    for rank, pp, vals in rows:
        if pp not in plan: bad.append("rank %d: no plan row for stage %d" % (rank, pp)); continue
        want = ["%.3f" % (plan[pp][k] / MIB) for k in ("weights", "grads", "optimizer", "activations")]
        if want != vals: bad.append("rank %d stage %d: measured %s, plan %s" % (rank, pp, vals, want))
    if bad: print("; ".join(bad[:4])); return 1
    print("%d ranks, %d stages" % (len(rows), len(plan)))
    return 0


def gpt3_state(plan_log, L, C, H, F, V, seq, dp, zero):
    L, C, F, V, seq, dp, zero = int(L), int(C), int(F), int(V), int(seq), int(dp), int(zero)
    Vp = (V + 127) // 128 * 128
    # buckets (llmc/parallel/zero.h): the embeddings, one per layer, the final norm; padded to dp*8 elements
    q = dp * 8
    pad = lambda n: (n + q - 1) // q * q
    layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (C * F + F) + (F * C + C)
    emb, head = Vp * C + seq * C, 2 * C
    P = pad(emb) + L * pad(layer) + pad(head)
    w = 4 * P                                        # fp32 weights
    g = 4 * P // dp + 4 * (pad(emb) + pad(head)) + 4 * pad(layer) if zero >= 2 else 4 * P
    o = 2 * 4 * P // (dp if zero >= 1 else 1)        # two fp32 moments (the weights are the master copy)
    if zero >= 3: w = 4 * P // dp + 4 * max(pad(layer), pad(emb) + pad(head))
    got = plan_rows(plan_log).get(0)
    if not got: print("no plan row for stage 0"); return 1
    want = {"weights": w, "grads": g, "optimizer": o}
    diff = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    print("P = %d padded parameters; weights %d, grads %d, optimizer %d bytes by hand%s" %
          (P, w, g, o, "; plan differs: %s" % diff if diff else ""))
    return 1 if diff else 0


def fits(run_log, gib):
    rows = measured_rows(run_log)
    if not rows: print("no memory table"); return 1
    peak = max(sum(float(v) for v in vals) for _, _, vals in rows)
    print("largest measured total %.3f MiB per rank, limit %.3f MiB" % (peak, float(gib) * 1024))
    return 0 if peak <= float(gib) * 1024 else 1


def timed(seconds, maxrss_mb, cmd):
    t = time.time()
    rc = subprocess.call(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dt = time.time() - t
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print("exit %d in %.2f s, max RSS %.1f MB" % (rc, dt, rss))
    return 0 if rc == 0 and dt < float(seconds) and rss <= float(maxrss_mb) else 1


if __name__ == "__main__":
    c, a = sys.argv[1], sys.argv[2:]
    if c == "measured_vs_plan": sys.exit(measured_vs_plan(*a))
    if c == "gpt3_state": sys.exit(gpt3_state(*a))
    if c == "fits": sys.exit(fits(*a))
    if c == "timed": sys.exit(timed(a[0], a[1], a[2:]))
    sys.exit("unknown command " + c)
