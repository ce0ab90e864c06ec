#!/usr/bin/env python3
"""tests/profile_checks.py LOG N CLASS=CALLS... [--ceiling CLASS=SOURCE[@VALUE]]...: checks train_gpt's --profile table
(llmc/profile.cuh) in a run's log; prints "ok: ..." or the first problem, exit status 1 on a problem.
  - the table is printed once, for the N steps after the first (steps 2..N+1)
  - each CLASS named has a row with CALLS calls per step (CALLS '*': any number above 0); no row has 0 calls, and no
    row of a class that runs kernels (all but "dp wait" and "fp8 scaling") has 0 ms
  - the rows' ms plus "unaccounted" equal the "step" row within the printed rounding (4 decimals a row), the unaccounted
    time is not negative beyond that rounding, and the shares add up to 100% within theirs (1 decimal a row)
  - the "step" row is the mean of the profiled steps' step lines (their ms, printed with 1 decimal)
  - the emulation's line counts launches (more than 0) and none outside every class
  - --ceiling CLASS=SOURCE[@VALUE]: the class's ceiling comes from SOURCE (e.g. "measured copy"), of VALUE (its unit's
    figure, within the printed rounding of 0.05) when given
Used by tests/t_profile.sh."""
import re, sys


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    log, n = args[0], int(args[1])
    want, ceil = {}, {}
    i = 2
    while i < len(args):
        if args[i] == '--ceiling':
            k, v = args[i + 1].split('=', 1)
            ceil[k] = v
            i += 2
            continue
        k, v = args[i].rsplit('=', 1)
        want[k] = v
        i += 1
    lines = open(log, errors='replace').read().splitlines()
    starts = [j for j, l in enumerate(lines) if l.startswith('profile of step')]
    if len(starts) != 1:
        return f'{len(starts)} profile tables, not 1'
    j0 = starts[0]
    head = lines[j0]
    expect_head = f'step {2}' if n == 1 else f'steps 2-{n + 1}'
    if expect_head not in head or f'the {n} after the first' not in head:
        return f'the table is not of {expect_head}: {head!r}'
    rows, unacc, step, emu = {}, None, None, None
    row_re = re.compile(r'^  (\S.{0,14}?)\s+(\d+\.\d)\s+(\d+\.\d{4})\s+(\d+\.\d)%(.*)$')
    for l in lines[j0 + 2:]:
        if not l.startswith('  '):
            break
        m = re.match(r'^  unaccounted\s+(-?\d+\.\d{4})\s+(-?\d+\.\d)%', l)
        if m:
            unacc = (float(m.group(1)), float(m.group(2)))
            continue
        m = re.match(r'^  step\s+(\d+\.\d{4})\s+100\.0%', l)
        if m:
            step = float(m.group(1))
            continue
        m = re.match(r'^  emulation: (\d+) kernel launches .* (\d+) outside every class(.*)$', l)
        if m:
            emu = (int(m.group(1)), int(m.group(2)), m.group(3))
            continue
        m = row_re.match(l)
        if m:
            rows[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)), float(m.group(4)), m.group(5))
    if unacc is None or step is None:
        return 'no "unaccounted" or "step" row'
    for k, v in want.items():
        if k not in rows:
            return f'no row of class {k!r} (rows: {", ".join(rows)})'
        calls = rows[k][0]
        if v == '*':
            if calls <= 0:
                return f'class {k!r}: {calls} calls per step'
        elif abs(calls - float(v)) > 0.05:
            return f'class {k!r}: {calls} calls per step, expected {v}'
    for k, r in rows.items():
        if r[0] <= 0:
            return f'class {k!r} printed with {r[0]} calls'
        # a class that runs kernels takes microseconds at least in the emulation (a wait on another stream may not)
        if r[1] <= 0 and k not in ('dp wait', 'fp8 scaling'):
            return f'class {k!r}: {r[0]} calls per step in {r[1]} ms'
    total = sum(r[1] for r in rows.values()) + unacc[0]
    tol = 0.00005 * (len(rows) + 2)
    if abs(total - step) > tol:
        return f'the classes ({sum(r[1] for r in rows.values()):.4f} ms) and unaccounted ({unacc[0]:.4f}) add up to ' \
               f'{total:.4f} ms, not the step row {step:.4f} (rounding {tol:.5f})'
    if unacc[0] < -tol:
        return f'unaccounted time is negative: {unacc[0]} ms'
    shares = sum(r[2] for r in rows.values()) + unacc[1]
    if abs(shares - 100.0) > 0.05 * (len(rows) + 1):
        return f'the shares add up to {shares:.1f}%, not 100%'
    steps = []
    for l in lines:
        m = re.match(r'^step\s+(\d+)/\d+ \|.*\| (\d+\.\d) ms \|', l)
        if m and 2 <= int(m.group(1)) <= n + 1:
            steps.append(float(m.group(2)))
    if len(steps) != n:
        return f'{len(steps)} step lines of the profiled steps 2..{n + 1}, not {n}'
    mean = sum(steps) / n
    if abs(mean - step) > 0.05 + 1e-9:
        return f'the step row {step:.4f} ms is not the profiled step lines\' mean {mean:.2f} ms'
    if emu is None:
        return 'no emulation line (launches in and outside the classes)'
    if emu[0] <= 0 or emu[1] != 0:
        return f'{emu[0]} launches, {emu[1]} outside every class{emu[2]}'
    for k, v in ceil.items():
        if k not in rows:
            return f'no row of class {k!r} for its ceiling'
        src, _, val = v.partition('@')
        m = re.search(r'(\d+\.\d) (TFLOP/s|GB/s) \(([^)]*)\)', rows[k][3])
        if not m or m.group(3) != src:
            return f'class {k!r}: ceiling {rows[k][3].strip()!r}, expected one from {src!r}'
        if val and abs(float(m.group(1)) - float(val)) > 0.05 + 1e-9:
            return f'class {k!r}: ceiling {m.group(1)}, expected {val}'
    print(f'ok: {len(rows)} classes, {sum(r[1] for r in rows.values()):.1f} + {unacc[0]:.4f} unaccounted = {step:.4f} ms '
          f'per step, {emu[0]} launches, none outside a class')
    return None


if __name__ == '__main__':
    err = main()
    if err:
        print(err)
        sys.exit(1)
