#!/usr/bin/env python3
"""scripts/wgmma_ptx_check.py FILE.ptx [--expect N]: the rule of wgmma's registers, read from the PTX nvcc wrote.

Between a `wgmma.fence` and the `wgmma.wait_group` that retires its products, no instruction but the products
themselves may touch their registers: the accumulators and the A registers (the operands in braces of each
`wgmma.mma_async`). The PTX ISA leaves it undefined otherwise, and the compiler may move a thread's own accesses
(rescaling the accumulators, packing A) across the fence unless llmc/mma.cuh's wgmma_fence_operands pins them. The
CUDA emulation cannot see such a move: it runs the source's order.

Prints, per kernel with wgmma, the count of fence..wait regions and every instruction that breaks the rule; exit
status 1 when one does, or when fewer than N kernels (--expect, default 1) have wgmma: a check of nothing fails."""
import re
import sys

args = sys.argv[1:]
if not args or args[0] in ("-h", "--help"):
    sys.exit(__doc__)
expect = 1
if "--expect" in args:
    i = args.index("--expect")
    expect = int(args[i + 1])
    del args[i:i + 2]
text = open(args[0]).read()
kernels = 0
broken = 0
for entry in re.split(r"(?m)^\.(?:visible|weak) \.entry ", text)[1:]:
    name = entry.split("(", 1)[0]
    lines = [l.split("//", 1)[0].strip() for l in entry.split("\n")]
    if not any(l.startswith("wgmma.mma_async") for l in lines):
        continue
    kernels += 1
    regions, bad = 0, []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("wgmma.fence"):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("wgmma.wait_group"):
            j += 1
        region = lines[i + 1:j]
        regs = set()
        for l in region:
            if l.startswith("wgmma.mma_async"):
                for group in re.findall(r"\{([^}]*)\}", l):
                    regs |= {r.strip() for r in group.split(",")}
        for l in region:
            if not l or l.startswith(("wgmma.", "{", "}", ".reg")):
                continue
            touched = set(re.findall(r"%[a-z]+[0-9]+", l)) & regs
            if touched:
                bad.append(l)
        regions += 1
        i = j
    print("%s: %d fence..wait regions, %d instructions on their registers%s" %
          (name, regions, len(bad), (": " + "; ".join(bad[:3])) if bad else ""))
    broken += len(bad) > 0
print("%d kernels with wgmma, %d breaking the rule" % (kernels, broken))
sys.exit(1 if broken or kernels < expect else 0)
