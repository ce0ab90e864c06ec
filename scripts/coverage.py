#!/usr/bin/env python3
"""scripts/coverage.py DIR [--unexecuted FILE]: the device code's coverage from `make coverage`'s counts in DIR.

`make coverage` builds every emulated program (tests/cuda_emu/build.sh with EMU_COVERAGE=DIR: gcc's --coverage, the
counts of every process written under DIR) and runs `make test`'s scripts; this script reads each program's counts
with gcov (JSON), maps the rewritten copies the emulated builds compile (build/NAME_src/PATH) back to PATH, and sums
them over all programs and runs. It prints, for train_gpt.cu and each header under llmc/: the lines with code, those
executed at least once, and the branches taken; then the same for the kernels (the __global__ functions) and for
train_gpt.cu. With --unexecuted FILE it writes every line never executed, by file, with its text."""
import glob, gzip, json, os, re, subprocess, sys
from collections import defaultdict

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def repo_path(p):
    """A source path as the repository names it, or None for files outside the device code's scope."""
    m = re.search(r"_src/(.*)$", p)
    rel = m.group(1) if m else os.path.relpath(os.path.abspath(p), ROOT)
    rel = os.path.normpath(rel)
    if rel == "train_gpt.cu" or (rel.startswith("llmc/") and rel.endswith((".cuh", ".h"))):
        return rel
    return None


def read_counts(d):
    lines = defaultdict(lambda: defaultdict(int))     # path -> line -> count
    branches = defaultdict(dict)                      # path -> (line, i) -> taken
    funcs = defaultdict(set)                          # path -> (start, end)
    gcdas = sorted(glob.glob(os.path.join(d, "**", "*.gcda"), recursive=True))
    for g in gcdas:
        out = subprocess.run(["gcov", "-b", "-j", "-t", os.path.basename(g)], cwd=os.path.dirname(g), capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.strip():
            print(f"warning: gcov on {g}: {out.stderr.strip()[:200]}", file=sys.stderr)
            continue
        for doc in out.stdout.splitlines():
            doc = doc.strip()
            if not doc.startswith("{"):
                continue
            for f in json.loads(doc)["files"]:
                p = repo_path(f["file"])
                if not p:
                    continue
                for ln in f["lines"]:
                    lines[p][ln["line_number"]] += ln["count"]
                    for i, b in enumerate(ln.get("branches", [])):
                        k = (ln["line_number"], i)
                        branches[p][k] = branches[p].get(k, False) or b["count"] > 0
                for fn in f.get("functions", []):
                    funcs[p].add((fn["start_line"], fn["end_line"]))
    return gcdas, lines, branches, funcs


def kernel_lines(path, funcs):
    """The lines of path's __global__ functions (their bodies as gcov bounds them)."""
    src = open(os.path.join(ROOT, path)).read().split("\n")
    out = set()
    for a, b in funcs:
        head = " ".join(src[max(0, a - 4):a])
        if "__global__" in head:
            out.update(range(a, b + 1))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    unexec = sys.argv[sys.argv.index("--unexecuted") + 1] if "--unexecuted" in sys.argv else None
    gcdas, lines, branches, funcs = read_counts(d)
    if not lines:
        sys.exit(f"error: no counts under {d} (run make coverage)")
    print(f"coverage of the device code from {len(gcdas)} programs' counts ({d})")
    print(f"{'file':44s} {'lines':>7s} {'run':>7s} {'%':>6s} {'branches':>9s} {'taken':>7s} {'%':>6s}")
    tot = [0, 0, 0, 0]
    kern = [0, 0]
    for p in sorted(lines):
        ls = lines[p]
        n, e = len(ls), sum(1 for c in ls.values() if c > 0)
        bs = branches[p]
        bn, bt = len(bs), sum(1 for t in bs.values() if t)
        tot = [tot[0] + n, tot[1] + e, tot[2] + bn, tot[3] + bt]
        kl = kernel_lines(p, funcs[p]) & set(ls)
        kern[0] += len(kl)
        kern[1] += sum(1 for l in kl if ls[l] > 0)
        print(f"{p:44s} {n:7d} {e:7d} {100.0 * e / max(n, 1):6.1f} {bn:9d} {bt:7d} {100.0 * bt / max(bn, 1):6.1f}")
    print(f"{'all':44s} {tot[0]:7d} {tot[1]:7d} {100.0 * tot[1] / max(tot[0], 1):6.1f} {tot[2]:9d} {tot[3]:7d} "
          f"{100.0 * tot[3] / max(tot[2], 1):6.1f}")
    print(f"kernels (__global__ functions): {kern[1]} of {kern[0]} lines executed ({100.0 * kern[1] / max(kern[0], 1):.1f}%)")
    t = lines.get("train_gpt.cu", {})
    te = sum(1 for c in t.values() if c > 0)
    print(f"train_gpt.cu: {te} of {len(t)} lines executed ({100.0 * te / max(len(t), 1):.1f}%)")
    if unexec:
        with open(unexec, "w") as w:
            for p in sorted(lines):
                src = open(os.path.join(ROOT, p)).read().split("\n")
                miss = sorted(l for l, c in lines[p].items() if c == 0)
                if not miss:
                    continue
                w.write(f"== {p}: {len(miss)} lines never executed\n")
                for l in miss:
                    w.write(f"{l:6d}  {src[l - 1].rstrip() if l <= len(src) else ''}\n")
        print(f"lines never executed: {unexec}")


if __name__ == "__main__":
    main()
