# tests/log_formats_checks.py: parses a trainer's console log the way the benchmark harnesses do
# (../shared/BENCHMARK_CASES.md section 5; docs/logs.md) and checks every parsed value against what the
# trainer wrote in DIR/metrics.jsonl and DIR/summary.json. A printed value must equal the file's within half
# a unit of its last printed digit (plus the file's own rounding). Prints one line per finding and exits 1
# on the first mismatch. Run from the repository root as: python3 tests/log_formats_checks.py COMMAND ARGS...
#   megatron LOG DIR WORLD GBS   Megatron-LM's iteration lines (one per step: iteration N/M, consumed samples =
#                                N x GBS, elapsed time per iteration (ms), learning rate, global batch size,
#                                lm loss, grad norm) and its memory line (one per rank, MB = summary's bytes / 2^20)
#   flagperf LOG DIR             [PerfLog] JSON lines: STEP_END per step (loss, lr, grad norm, step time,
#                                tokens/s per GPU), FINISHED once (tokens/s per GPU, memory used, steps, loss)
#   paddle LOG DIR WORLD         PaddlePaddle/benchmark's result JSON (printed and DIR/paddle_result.json):
#                                every field, FINAL_RESULT = the mean tokens/s after skipping the warm-up steps
#   failed LOG                   the result JSON of a failed run: JOB_FAIL_FLAG 1, FINAL_RESULT 0
#   absent LOG                   none of the harness lines appear
import json, math, re, sys

MEGATRON_ITER = re.compile(
    r"^ iteration\s+(\d+)/\s*(\d+) \|"
    r" consumed samples:\s+(\d+) \|"
    r" elapsed time per iteration \(ms\): ([\d.]+) \|"
    r" learning rate: ([\d.E+-]+) \|"
    r" global batch size:\s+(\d+) \|"
    r" lm loss: ([\d.E+-]+) \|"
    r" loss scale: ([\d.]+) \|"
    r" grad norm: ([\d.]+) \|")
MEGATRON_MEM = re.compile(
    r"^\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+) \|"
    r" reserved: ([\d.]+) \| max reserved: ([\d.]+)")
PERFLOG = re.compile(r"^\[PerfLog\] (\{.*\})\s*$")
PADDLE_KEYS = ["log_file", "model_name", "mission_name", "direction_id", "run_mode", "index", "gpu_num", "FINAL_RESULT",
               "JOB_FAIL_FLAG", "UNIT"]


def half_ulp(text):
    """Half a unit of the last digit printed in text ("1.234E+00" -> 5e-4, "507.1" -> 0.05, "12" -> 0.5)."""
    m = re.match(r"^[+-]?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$", text)
    if not m: raise ValueError("not a number: " + text)
    decimals = len(m.group(2) or "")
    exp = int(m.group(3) or 0)
    return 0.5 * 10.0 ** (exp - decimals)


def close(printed_text, value, extra=0.0):
    """printed_text (a string) equals value within its half-ulp, the file's %.9g rounding and extra."""
    p = float(printed_text)
    return math.isfinite(p) and math.isfinite(value) and abs(p - value) <= half_ulp(printed_text) + 1e-8 * abs(value) + extra


def metrics(d):
    steps = {}
    for line in open(d + "/metrics.jsonl"):
        j = json.loads(line)
        if "loss" in j: steps[j["step"]] = j
    return steps


def fail(msg):
    print("mismatch: " + msg)
    sys.exit(1)


def check_megatron(log, d, world, gbs):
    world, gbs = int(world), int(gbs)
    m, summary = metrics(d), json.load(open(d + "/summary.json"))
    it = [MEGATRON_ITER.match(l) for l in open(log)]
    it = [x for x in it if x]
    if sorted(int(x.group(1)) for x in it) != sorted(m): fail("iteration lines for steps %s, metrics.jsonl has %s" % ([x.group(1) for x in it], sorted(m)))
    for x in it:
        s = int(x.group(1)); r = m[s]
        if int(x.group(2)) != len(m): fail("iteration %d: total %s, expected %d" % (s, x.group(2), len(m)))
        if int(x.group(3)) != s * gbs: fail("iteration %d: consumed samples %s, expected %d" % (s, x.group(3), s * gbs))
        if int(x.group(6)) != gbs: fail("iteration %d: global batch size %s, expected %d" % (s, x.group(6), gbs))
        # the jsonl's ms has 4 decimals: its own half-ulp adds 5e-5
        for name, g, key, extra in (("elapsed ms", 4, "ms", 5e-5), ("learning rate", 5, "lr", 0), ("lm loss", 7, "loss", 0), ("grad norm", 9, "grad_norm", 0)):
            if not close(x.group(g), r[key], extra): fail("iteration %d: %s %s, metrics.jsonl %r" % (s, name, x.group(g), r[key]))
    mem = [MEGATRON_MEM.match(l) for l in open(log)]
    mem = [x for x in mem if x]
    if sorted(int(x.group(1)) for x in mem) != list(range(world)): fail("memory lines for ranks %s, expected 0..%d" % ([x.group(1) for x in mem], world - 1))
    for x in mem:
        r = int(x.group(1))
        want = summary["memory_bytes_per_rank"][r] / 2 ** 20
        for g in (3, 4, 5, 6):
            if not close(x.group(g), want): fail("rank %d memory %s MB, summary.json %r MB" % (r, x.group(g), want))
    if not want > 0: fail("memory of the last rank is %r" % want)
    print("%d iteration lines, %d memory lines" % (len(it), len(mem)))


def perflogs(log):
    out = []
    for l in open(log):
        x = PERFLOG.match(l)
        if x: out.append(json.loads(x.group(1)))
    return out


def check_flagperf(log, d):
    m, summary = metrics(d), json.load(open(d + "/summary.json"))
    ev = perflogs(log)
    for e in ev:
        if set(e) != {"event", "value", "metadata"} or not isinstance(e["value"], dict): fail("bad [PerfLog] object %r" % e)
    steps = [e["value"] for e in ev if e["event"] == "STEP_END"]
    if sorted(v["global_steps"] for v in steps) != sorted(m): fail("STEP_END for steps %s, metrics.jsonl has %s" % ([v["global_steps"] for v in steps], sorted(m)))
    for v in steps:
        r = m[v["global_steps"]]
        for k, key, tol in (("loss", "loss", 0), ("lr", "lr", 0), ("grad_norm", "grad_norm", 0), ("step_time_ms", "ms", 1e-4), ("tokens_per_second_per_gpu", "tokens_per_s", 0.01)):
            if not abs(v[k] - r[key]) <= tol + 1e-8 * abs(r[key]): fail("step %d: %s %r, metrics.jsonl %s %r" % (v["global_steps"], k, v[k], key, r[key]))
    fin = [e["value"] for e in ev if e["event"] == "FINISHED"]
    if len(fin) != 1: fail("%d FINISHED lines" % len(fin))
    f = fin[0]
    if f["training_steps"] != summary["steps"]: fail("training_steps %r, summary %r" % (f["training_steps"], summary["steps"]))
    if abs(f["tokens_per_second_per_gpu"] - summary["tokens_per_s_per_device"]) > 0.01: fail("FINISHED tokens/s %r, summary %r" % (f["tokens_per_second_per_gpu"], summary["tokens_per_s_per_device"]))
    if abs(f["memory_used_per_gpu_gib"] * 2 ** 30 - summary["peak_memory_bytes_per_rank"]) > 0.5e-6 * 2 ** 30 or not f["memory_used_per_gpu_gib"] > 0:
        fail("memory used %r GiB, summary %r bytes" % (f["memory_used_per_gpu_gib"], summary["peak_memory_bytes_per_rank"]))
    if abs(f["final_loss"] - summary["final_loss"]) > 1e-8 * abs(summary["final_loss"]): fail("final_loss %r, summary %r" % (f["final_loss"], summary["final_loss"]))
    if not f["e2e_time"] > 0: fail("e2e_time %r" % f["e2e_time"])
    print("%d STEP_END lines, FINISHED %.2f tokens/s per GPU, %.3f MiB" % (len(steps), f["tokens_per_second_per_gpu"], f["memory_used_per_gpu_gib"] * 1024))


def paddle_lines(log):
    out = []
    for l in open(log):
        if l.startswith("{") and '"FINAL_RESULT"' in l: out.append(json.loads(l))
    return out


def check_paddle(log, d, world):
    world = int(world)
    res = paddle_lines(log)
    if len(res) != 1: fail("%d result JSON lines" % len(res))
    r = res[0]
    if list(r) != PADDLE_KEYS: fail("keys %s, expected %s" % (list(r), PADDLE_KEYS))
    if json.load(open(d + "/paddle_result.json")) != r: fail("paddle_result.json differs from the printed line")
    m = metrics(d)
    tok = [m[s]["tokens_per_s"] for s in sorted(m)]
    skip = min(len(tok) // 5, 5)  # the warm-up steps the logger skips (docs/logs.md)
    want = sum(tok[skip:]) / len(tok[skip:])
    if not abs(r["FINAL_RESULT"] - want) <= 0.005 + 5e-5: fail("FINAL_RESULT %r, mean of metrics.jsonl tokens_per_s after %d warm-up steps %r" % (r["FINAL_RESULT"], skip, want))
    expect = {"direction_id": 1, "index": 1, "gpu_num": world, "run_mode": "sp" if world == 1 else "mp", "JOB_FAIL_FLAG": 0,
              "UNIT": "tokens/s", "mission_name": "pretrain", "log_file": d + "/metrics.jsonl"}
    for k, v in expect.items():
        if r[k] != v: fail("%s %r, expected %r" % (k, r[k], v))
    print("FINAL_RESULT %.2f tokens/s (mean of steps %d..%d)" % (r["FINAL_RESULT"], skip + 1, len(tok)))


def check_failed(log):
    res = paddle_lines(log)
    if len(res) != 1 or res[0]["JOB_FAIL_FLAG"] != 1 or res[0]["FINAL_RESULT"] != 0: fail("result lines %r" % res)
    print("JOB_FAIL_FLAG 1")


def check_absent(log):
    for l in open(log):
        if MEGATRON_ITER.match(l) or MEGATRON_MEM.match(l) or PERFLOG.match(l) or '"FINAL_RESULT"' in l: fail("harness line: " + l.strip())
    print("no harness lines")


if __name__ == "__main__":
    cmds = {"megatron": check_megatron, "flagperf": check_flagperf, "paddle": check_paddle, "failed": check_failed, "absent": check_absent}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds: sys.exit("usage: log_formats_checks.py megatron|flagperf|paddle|failed|absent ARGS")
    try:
        cmds[sys.argv[1]](*sys.argv[2:])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        fail("%s: %s" % (type(e).__name__, e))
