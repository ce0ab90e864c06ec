#!/usr/bin/env python3
"""scripts/resources.py: what ptxas gave each kernel of train_gpt.cu, and how many blocks of it fit on an SM.

  usage: python3 scripts/resources.py [--tsv] DIR/sm_80 DIR/sm_90a ...     (`make resources` runs it)

Each argument names the output of one compile for one architecture (the Makefile's `resources` rule): ARG.log, the
`-Xptxas -v` log, and ARG.ptx, the PTX nvcc kept. Per kernel (demangled, without its parameters) it prints

  regs            registers per thread (ptxas)
  spill st/ld     bytes of spill stores / loads per thread (ptxas); stack: the stack frame (ptxas)
  smem            static shared memory per block (ptxas)
  threads         threads per block: the kernel's __launch_bounds__ (".maxntid" in the PTX, marked b), which its
                  launch uses, or else the launch's own block size from LAUNCHES below (marked l); "-" when neither
  dyn             dynamic shared memory per block at the launch (DYN_SMEM below; 0 for the others)
  blocks/SM       resident blocks per SM, computed (no GPU is asked) from the documented per-SM limits in LIMITS
                  as the CUDA occupancy calculator does (cuda_occupancy.h, cudaOccMaxActiveBlocksPerMultiprocessor,
                  with the default shared-memory carveout), and what limits it: regs, smem, warps (2048 threads per
                  SM) or blocks (32 per SM)

ptxas prints neither the block size nor the dynamic shared memory of a launch: those two come from the PTX and
from the tables below, which name the launch they copy. --tsv prints the same rows tab-separated, for the tests.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Per-SM limits (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"; the allocation
# units and the 4 register sub-partitions are those of cuda_occupancy.h for compute capability 8.x and 9.x).
KIB = 1024
LIMITS = {
    "sm_80": dict(regs_sm=65536, regs_block=65536, reg_unit=256, threads_sm=2048, blocks_sm=32,
                  smem_sm=164 * KIB, smem_block=163 * KIB, smem_reserved=1 * KIB, smem_unit=128),
    "sm_90a": dict(regs_sm=65536, regs_block=65536, reg_unit=256, threads_sm=2048, blocks_sm=32,
                   smem_sm=228 * KIB, smem_block=227 * KIB, smem_reserved=1 * KIB, smem_unit=128),
}

# Threads per block of the kernels without __launch_bounds__, as their launches give them (an expression of the
# llmc/*.cuh constants); the comment names the launch.
LAUNCHES = {
    "add_f32_into_floatX_kernel": "256",                  # train_gpt.cu
    "add_f32_kernel": "256",                              # llmc/gpt/data_parallel.cuh
    "attention_rowwise_forward_kernel": "32 * ATT_ROW_WARPS",       # llmc/attention_rowwise.cuh (fp32 build)
    "attention_rowwise_backward_dq_kernel": "32 * ATT_ROW_WARPS",
    "attention_rowwise_backward_dkv_kernel": "32 * ATT_ROW_WARPS",
    "bias_grad_accumulate_kernel": "256",                 # llmc/matmul.cuh, llmc/matmul_fp8.cuh
    "clip_from_sumsq_kernel": "1",                        # llmc/gpt/data_parallel.cuh
    "embedding_backward_kernel": "EMBEDDING_THREADS",     # llmc/embedding.cuh
    "embedding_forward_kernel": "256",
    "f32_from_floatX_kernel": "256",                      # llmc/gpt/data_parallel.cuh
    "floatX_from_f32_kernel": "256",                      # llmc/gpt/weights.cuh
    "fp8_cast_kernel": "FP8_THREADS",                     # llmc/fp8.cuh
    "fp8_cast_transpose_kernel": "32 * 8",
    "fp8_current_scale_kernel": "FP8_THREADS",
    "fp8_delayed_update_kernel": "FP8_THREADS",
    "fp8_dequantize_kernel": "FP8_THREADS",
    "gelu_backward_kernel": "256",                        # llmc/mlp_act.cuh
    "gelu_forward_kernel": "256",
    "global_norm_final_kernel": "GLOBAL_NORM_THREADS",    # llmc/grad_norm.cuh
    "loss_accumulate_kernel": "256",                      # train_gpt.cu
    "matmul_bias_add_kernel": "256",                      # llmc/matmul.cuh, llmc/matmul_fp8.cuh
    "matmul_bias_grad_kernel": "32 * 16",
    "norm_head_backward_kernel": "256",                   # llmc/classifier.cuh (--norm-head)
    "norm_head_forward_kernel": "256",
    "norm_ranges_partial_kernel": "GLOBAL_NORM_THREADS",  # llmc/gpt/data_parallel.cuh
    "norm_weight_grad_reduce_kernel": "32 * 8",           # llmc/norm.cuh
    "residual_add_kernel": "256",                         # train_gpt.cu
    "rope_rotate_kernel": "256",                          # llmc/rope.cuh
    "seq_pack_kernel": "256",                             # llmc/gpt/tensor_parallel.cuh
    "sum_partials_kernel": "1",                           # llmc/gpt/data_parallel.cuh
    "swiglu_backward_kernel": "256",                      # llmc/mlp_act.cuh
    "swiglu_forward_kernel": "256",
    "wgmma_probe_kernel": "1",                            # llmc/attention.cuh
}

# Dynamic shared memory of the launches that use it (bytes; the template parameters named first), as
# llmc/attention.cuh's attention_forward_hd and attention_backward_hd compute it without documents (a launch with
# --reset-attention-mask's doc adds BM * 4 bytes per Q/dO buffer to the two dK/dV kernels: 128 or 256 bytes).
DYN_SMEM = {
    "attention_forward_kernel": (["HD"], "(ATT_FWD_BM + 4 * ATT_FWD_BN) * (HD + ATT_PAD) * 2"),
    "attention_backward_dkdv_kernel": (["HD", "BM"], "(2 * ATT_BWD_BN + 2 * BM) * (HD + ATT_PAD) * 2 + 2 * BM * 4"),
    "attention_backward_dkdv_prefetch_kernel": (["HD", "BM", "BN"],
                                                "(2 * BN + 4 * BM) * (HD + ATT_PAD) * 2 + 4 * BM * 4"),
    "attention_backward_dq_kernel": (["HD"], "(2 * ATT_DQ_BM + 4 * ATT_BWD_BN) * (HD + ATT_PAD) * 2"),
    "attention_backward_dq_ds_kernel": (["HD"], "2 * ATT_BWD_BN * (HD + ATT_PAD + ATT_DQ_BM + ATT_PAD) * 2"),
    "attention_forward_wgmma_kernel": (["HD"], "5 * ATT_WG_BN * HD * 2 + 1024"),
    "attention_backward_dkdv_wgmma_kernel": (["HD"], "6 * ATT_WGB_N * HD * 2 + 2 * ATT_WGB_N * 2 * 4 + 2 * ATT_WGB_N * 4 + 1024"),
    "attention_backward_dq_wgmma_kernel": (["HD"], "6 * ATT_WGB_N * HD * 2 + 1024"),
    # llmc/norm.cuh's norm_backward_smem at the widest C of the instantiation (V <= 2: C up to 2048 V; none above)
    "norm_backward_kernel": (["V"], "(V <= 2) * NORM_BWD_STAGES * 3 * NORM_BWD_THREADS * 8 * V * 2"),
}


def header_constants():
    """`static const int NAME = 123;` of llmc/*.cuh, for the tables' expressions."""
    consts = {}
    folder = os.path.join(ROOT, "llmc")
    for f in sorted(os.listdir(folder)):
        if f.endswith(".cuh"):
            for m in re.finditer(r"static const int (\w+) = (\d+);", open(os.path.join(folder, f)).read()):
                consts[m.group(1)] = int(m.group(2))
    return consts


def evaluate(expr, names):
    if not re.fullmatch(r"[\w\s*+()<=]+", expr):
        raise ValueError("bad expression " + expr)
    return eval(expr, {"__builtins__": {}}, names)


def demangle(names):
    tool = next((t for t in [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cu++filt"),
                             shutil.which("cu++filt"), shutil.which("c++filt")] if t and os.path.exists(t)), None)
    if tool is None:
        return dict(zip(names, names))
    out = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def short_name(demangled):
    """'void norm_backward_kernel<6>(__nv_bfloat16*, ...)' -> 'norm_backward_kernel<6>'"""
    depth = 0
    for i, ch in enumerate(demangled):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            demangled = demangled[:i]
            break
    return demangled[5:] if demangled.startswith("void ") else demangled


def read_ptxas(log):
    """{mangled: {regs, stack, spill_st, spill_ld, smem}} from one architecture's `-Xptxas -v` log."""
    kernels, cur = {}, None
    for line in open(log):
        m = re.search(r"Compiling entry function '(\S+)' for '(\w+)'", line)
        if m:
            cur = kernels.setdefault(m.group(1), dict(regs=0, stack=0, spill_st=0, spill_ld=0, smem=0))
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
            cur = None
    return kernels


def read_maxntid(ptx):
    """{mangled: threads} of the entries with .maxntid (__launch_bounds__) in the PTX."""
    text = open(ptx).read()
    bounds = {}
    for m in re.finditer(r"\.entry\s+(\w+)\(.*?\)([^{]*)\{", text, re.S):
        b = re.search(r"\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)", m.group(2))
        if b:
            bounds[m.group(1)] = int(b.group(1)) * int(b.group(2)) * int(b.group(3))
    return bounds


def blocks_per_sm(L, regs, smem, threads, dyn):
    """Resident blocks per SM and the limiting resource(s), as cudaOccMaxActiveBlocksPerMultiprocessor computes them."""
    up = lambda x, unit: -(-x // unit) * unit
    warps = -(-threads // 32)
    lim = {}
    # registers are allocated per warp, in units of 256, within each of the 4 sub-partitions of the SM
    reg_warp = up(max(regs, 1) * 32, L["reg_unit"])
    fits = reg_warp * up(warps, 4) <= L["regs_block"]
    lim["regs"] = (L["regs_sm"] // 4 // reg_warp) * 4 // warps if fits else 0
    # shared memory: static + dynamic + the 1 KiB the driver reserves per block, in units of 128 bytes
    alloc = up(smem + dyn + L["smem_reserved"], L["smem_unit"])
    lim["smem"] = L["smem_sm"] // alloc if alloc <= L["smem_block"] + L["smem_reserved"] else 0
    lim["warps"] = L["threads_sm"] // 32 // warps
    lim["blocks"] = L["blocks_sm"]
    n = min(lim.values())
    return n, ",".join(k for k, v in lim.items() if v == n)


def rows(prefix, consts):
    arch = os.path.basename(prefix)
    if arch not in LIMITS:
        sys.exit("error: %s: no per-SM limits for %s (LIMITS has %s)" % (prefix, arch, ", ".join(LIMITS)))
    kernels = read_ptxas(prefix + ".log")
    bounds = read_maxntid(prefix + ".ptx")
    names = demangle(sorted(kernels))
    out = []
    for mangled, k in kernels.items():
        name = short_name(names[mangled])
        base, _, targs = name.partition("<")
        targs = [a.strip() for a in targs.rstrip(">").split(",")] if targs else []
        threads, src = None, "-"
        if mangled in bounds:
            threads, src = bounds[mangled], "b"
        elif base in LAUNCHES:
            threads, src = evaluate(LAUNCHES[base], consts), "l"
        dyn = 0
        if base in DYN_SMEM:
            params, expr = DYN_SMEM[base]
            dyn = evaluate(expr, dict(consts, **{p: int(a) for p, a in zip(params, targs)}))
        blocks, limit = blocks_per_sm(LIMITS[arch], k["regs"], k["smem"], threads, dyn) if threads else ("-", "")
        out.append(dict(arch=arch, kernel=name, threads=threads or "-", src=src, dyn=dyn, blocks=blocks,
                        limit=limit, **k))
    return sorted(out, key=lambda r: r["kernel"])


def main():
    args = sys.argv[1:]
    tsv = "--tsv" in args
    args = [a for a in args if a != "--tsv"]
    if not args:
        sys.exit(__doc__.split("\n\n")[1])
    consts = header_constants()
    keys = ["arch", "kernel", "regs", "spill_st", "spill_ld", "stack", "smem", "threads", "src", "dyn", "blocks", "limit"]
    if tsv:
        print("\t".join(keys))
        for a in args:
            for r in rows(a, consts):
                print("\t".join(str(r[k]) for k in keys))
        return
    unknown = []
    for a in args:
        table = rows(a, consts)
        w = max(len(r["kernel"]) for r in table)
        print("%-6s %-*s %5s %12s %6s %6s %9s %6s %10s" % ("arch", w, "kernel", "regs", "spill st/ld", "stack",
                                                            "smem", "threads", "dyn", "blocks/SM"))
        for r in table:
            print(("%-6s %-*s %5d %12s %6d %6d %7s %s %6d %4s %s" % (
                r["arch"], w, r["kernel"], r["regs"], "%d/%d" % (r["spill_st"], r["spill_ld"]), r["stack"],
                r["smem"], r["threads"], r["src"], r["dyn"], r["blocks"], r["limit"])).rstrip())
            if r["threads"] == "-":
                unknown.append(r["arch"] + " " + r["kernel"])
        print()
    print("regs (per thread), spill st/ld and stack (bytes per thread) and smem (static shared memory, bytes per "
          "block) are ptxas's;\nthreads: b = the kernel's __launch_bounds__ (PTX .maxntid), l = its launch's block size "
          "(scripts/resources.py);\ndyn: the launch's dynamic shared memory; blocks/SM is computed from the documented "
          "per-SM limits,\nnot measured on a GPU (and what limits it: regs, smem, warps or blocks).")
    for u in unknown:
        print("-: %s has no __launch_bounds__ and no entry in scripts/resources.py's LAUNCHES: its block size is "
              "not known here" % u)


if __name__ == "__main__":
    main()
