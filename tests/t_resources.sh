#!/usr/bin/env bash
# tests/t_resources.sh: what ptxas gives the trainer's kernels, from `make resources` (train_gpt.cu's bf16 build
# compiled for sm_80 and for sm_90a with -Xptxas -v; scripts/resources.py reads the logs). Per architecture:
#   - the compile is warning-free and every kernel has a row with its block size
#   - no kernel a preset uses spills: 0 bytes of spill stores and loads, and no stack frame (local memory, as an
#     array indexed at run time takes) either. The kernels whose template arguments are
#     types (AdamW's moments, fp8's formats) or that have none run under every preset: all of them are held. The
#     instantiations chosen by a preset's shape are listed per preset and held: the norm kernels' by the width C
#     (llmc/norm.cuh's norm_forward_variant and norm_backward_variant, asked by a small host program) and the
#     attention's by the head dim and ALiBi. Every preset is held, llama3_70b (C 8192) and gpt3_175b (C 12288, the only wider
#     one) included: gpt3_175b's norm_backward_kernel<6> spilled on sm_90a until llmc/norm.cuh's norm_opaque.
#   - blocks per SM as scripts/resources.py computes them equal those of cuda_occupancy.h's
#     cudaOccMaxActiveBlocksPerMultiprocessor (the CUDA toolkit's occupancy calculator, a host-only header) for
#     every row, given the same per-SM limits (no GPU)
#   - sm_90a's PTX keeps wgmma's rule: between a wgmma.fence and its wait no other instruction touches the products'
#     registers (scripts/wgmma_ptx_check.py; the emulation runs the source's order and cannot see the compiler's)
# About 2-3 minutes on 2 cores when the two compiles must run (side by side), 15 s when `make test` made the logs
# already. Without nvcc it prints [SKIP] and exits 0.
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL  # run from `make test -jN`, nested makes would warn about the jobserver

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "[SKIP] kernel resources (make resources): no nvcc (PATH or $CUDA_HOME/bin); nothing to check"
    exit 0
fi
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
T=build/t_resources
rm -rf "$T" && mkdir -p "$T"
R=build/resources/bf16

if ! make -s --no-print-directory -j2 PRECISION=BF16 resources > "$T/resources.txt" 2> "$T/make.log"; then
    echo "[FAIL] make resources: $(tail -n 5 "$T/make.log" "$T/resources.txt" | grep -v '^$' | tail -n 5)"
    exit 1
fi
echo "[PASS] make resources ($(grep -c '^sm_' "$T/resources.txt") rows for sm_80 and sm_90a)"
for a in sm_80 sm_90a; do
    if grep -qi warning "$R/$a.log"; then echo "[FAIL] $a compile warning-free: $(grep -i -m 3 warning "$R/$a.log")"
    else echo "[PASS] $a compile of train_gpt.cu warning-free ($R/$a.log)"; fi
done
# wgmma's registers: in the sm_90a PTX no instruction but the products touches a product's accumulators or A registers
# between its wgmma.fence and its wait (llmc/mma.cuh's wgmma_fence_operands keeps the compiler from moving accesses
# there), in every Hopper attention kernel the trainer instantiates (versions 4 and 7: 12)
ptx_status=0
if python3 scripts/wgmma_ptx_check.py "$R/sm_90a.ptx" --expect 12 > "$T/wgmma_ptx.txt"; then
    echo "[PASS] sm_90a PTX of the wgmma kernels: $(tail -n 1 "$T/wgmma_ptx.txt"), no access to a product's registers between its fence and its wait"
else
    echo "[FAIL] sm_90a PTX of the wgmma kernels (scripts/wgmma_ptx_check.py): $(grep -v ' 0 instructions' "$T/wgmma_ptx.txt" | head -n 3 | cut -c1-300 | tr '\n' ' ')"
    ptx_status=1
fi
python3 scripts/resources.py --tsv "$R/sm_80" "$R/sm_90a" > "$T/rows.tsv" || { echo "[FAIL] scripts/resources.py --tsv"; exit 1; }

# each preset's width and head dim, and the norm instantiations the width selects
cat > "$T/presets.cu" <<'EOF'
#include "llmc/model_config.h"
#include "llmc/norm.cuh"
int main() {
    for (ModelConfig c : all_presets()) {
        config_finalize(c);
        const NormFwdVariant f = norm_forward_variant(c.n_embd);
        printf("%s\t%d\t%d\tfused_residual_norm_forward_kernel<%d, %d>\tnorm_backward_kernel<%d>\t%s\n", c.name.c_str(),
               c.n_embd, c.head_dim, f.V, f.lanes, norm_backward_variant(c.n_embd), c.pos == POS_ALIBI ? "true" : "false");
    }
    return 0;
}
EOF
if ! "$NVCC" -std=c++17 -I. -Xcompiler -Wall,-Wno-unused-function -arch=sm_80 "$T/presets.cu" -o "$T/presets" \
        > "$T/presets_build.log" 2>&1 || ! "$T/presets" > "$T/presets.tsv"; then
    echo "[FAIL] the presets' instantiations (a host program with llmc/norm.cuh): $(tail -n 3 "$T/presets_build.log")"
    exit 1
fi

# NVIDIA's occupancy calculator on the same rows: "arch regs smem threads dyn" in, blocks per SM out
cat > "$T/occupancy.cpp" <<'EOF'
#include <cuda_occupancy.h>
#include <cstdio>
#include <cstring>
int main() {
    char arch[16];
    int regs, smem, threads, dyn;
    while (scanf("%15s %d %d %d %d", arch, &regs, &smem, &threads, &dyn) == 5) {
        const bool h = strcmp(arch, "sm_90a") == 0;  // else sm_80
        cudaOccDeviceProp p;
        p.computeMajor = h ? 9 : 8; p.computeMinor = 0;
        p.maxThreadsPerBlock = 1024; p.maxThreadsPerMultiprocessor = 2048; p.warpSize = 32;
        p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536; p.numSms = h ? 132 : 108;
        p.sharedMemPerBlock = 48 * 1024; p.reservedSharedMemPerBlock = 1024;
        p.sharedMemPerMultiprocessor = (h ? 228 : 164) * 1024; p.sharedMemPerBlockOptin = (h ? 227 : 163) * 1024;
        cudaOccFuncAttributes f;
        f.maxThreadsPerBlock = 1024; f.numRegs = regs; f.sharedSizeBytes = smem;
        f.partitionedGCConfig = PARTITIONED_GC_OFF; f.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        f.maxDynamicSharedSizeBytes = (int)p.sharedMemPerBlockOptin - smem;  // cudaFuncSetAttribute as the launchers do
        cudaOccDeviceState s;
        cudaOccResult r;
        if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &f, &s, threads, dyn) != CUDA_OCC_SUCCESS) printf("error\n");
        else printf("%d\n", r.activeBlocksPerMultiprocessor);
    }
    return 0;
}
EOF
if ! g++ -std=c++17 -Wall -Wextra -I"$CUDA_HOME/include" "$T/occupancy.cpp" -o "$T/occupancy" > "$T/occupancy_build.log" 2>&1; then
    echo "[FAIL] the occupancy cross-check program (cuda_occupancy.h) builds: $(head -n 3 "$T/occupancy_build.log")"
    exit 1
fi
awk -F'\t' 'NR > 1 && $8 != "-" { print $1, $3, $7, $8, $10 }' "$T/rows.tsv" | "$T/occupancy" > "$T/occupancy.txt"

python3 - "$T" <<'EOF'
import collections, sys
T = sys.argv[1]
lines = open(T + "/rows.tsv").read().splitlines()
keys = lines[0].split("\t")
rows = [dict(zip(keys, l.split("\t"))) for l in lines[1:]]
archs = ["sm_80", "sm_90a"]
presets = [l.split("\t") for l in open(T + "/presets.tsv").read().splitlines()]
fails = 0

def out(ok, text):
    global fails
    fails += not ok
    print(("[PASS] " if ok else "[FAIL] ") + text)

def local(r):  # bytes of local memory per thread: spills, or a stack frame (an array indexed at run time)
    return r["spill_st"] != "0" or r["spill_ld"] != "0" or r["stack"] != "0"

def fig(r):
    return "%s %s regs%s" % (r["kernel"], r["regs"], "" if not local(r) else
                              " SPILLS %s/%s bytes st/ld, stack %s" % (r["spill_st"], r["spill_ld"], r["stack"]))

# the instantiations a preset's shape selects; attention's by the head dim and ALiBi, as the launchers dispatch
def selected(p, table):
    name, C, hd, fwd, bwd, alibi = p
    chosen = [table[fwd], table[bwd]] if fwd in table and bwd in table else None
    attn = [r for k, r in table.items() if k.startswith(("attention_forward_kernel<%s," % hd,
            "attention_backward_dq_kernel<%s," % hd, "attention_backward_dkdv_kernel<%s," % hd,
            "attention_backward_dkdv_prefetch_kernel<%s," % hd))
            and k.endswith(", %s>" % alibi)]
    return chosen, attn

shape_bases = ("fused_residual_norm_forward_kernel", "norm_backward_kernel", "attention_forward_kernel",
               "attention_backward_dq_kernel", "attention_backward_dkdv_kernel", "attention_backward_dkdv_prefetch_kernel")
for a in archs:
    table = {r["kernel"]: r for r in rows if r["arch"] == a}
    if not table:
        out(False, "%s: no kernels in the log" % a)
        continue
    unknown = [k for k, r in table.items() if r["threads"] == "-"]
    out(not unknown, "%s: every one of the %d kernels has its block size (__launch_bounds__ or scripts/resources.py's "
        "LAUNCHES)%s" % (a, len(table), ": missing " + ", ".join(unknown) if unknown else ""))
    common = [r for k, r in table.items() if not k.startswith(shape_bases)]
    spilling = [fig(r) for r in common if local(r)]
    worst = max(common, key=lambda r: int(r["regs"]))
    if spilling:
        out(False, "%s: %s: kernels every preset may run" % (a, ", ".join(spilling)))
    else:
        out(True, "%s: the %d kernels every preset may run (no shape in their template arguments) do not spill (most "
            "registers: %s)" % (a, len(common), fig(worst)))
    # presets grouped by the instantiations they select
    groups = collections.OrderedDict()
    for p in presets:
        chosen, attn = selected(p, table)
        if chosen is None:
            out(False, "%s %s (C %s): %s or %s is not in the log" % (a, p[0], p[1], p[3], p[4]))
            continue
        key = tuple(r["kernel"] for r in chosen + attn)
        groups.setdefault(key, (chosen + attn, p[2], []))[2].append("%s (C %s)" % (p[0], p[1]))
    used = set()
    for key, (rs, hd, names) in groups.items():
        used.update(key)
        bad = [r for r in rs if local(r)]
        note = "" if any(r["kernel"].startswith("attention") for r in rs) else \
            "; no attention kernel for head dim %s (the bf16 build's attention takes 64, 80 or 128)" % hd
        if bad:  # the spilling kernels first, then who uses them
            out(False, "%s: %s: used by %s (head dim %s)" % (a, ", ".join(fig(r) for r in bad), ", ".join(names), hd))
        else:
            out(True, "%s: %s, head dim %s: %s%s" % (a, ", ".join(names), hd, ", ".join(fig(r) for r in rs), note))
    unused = [k for k in table if k.startswith(shape_bases) and k not in used]
    if unused:
        print("       %s: instantiations no preset selects (not held): %s" % (a, ", ".join(sorted(unused))))

# blocks per SM against cuda_occupancy.h
counted = [r for r in rows if r["threads"] != "-"]
occ = open(T + "/occupancy.txt").read().split()
diff = ["%s %s: %s, cuda_occupancy.h %s" % (r["arch"], r["kernel"], r["blocks"], o)
        for r, o in zip(counted, occ) if r["blocks"] != o]
out(len(occ) == len(counted) and not diff,
    "blocks per SM of all %d rows equal cuda_occupancy.h's cudaOccMaxActiveBlocksPerMultiprocessor at the same limits%s"
    % (len(counted), "; " + "; ".join(diff[:5]) if diff else ""))
sys.exit(1 if fails else 0)
EOF
[ $? = 0 ] && [ $ptx_status = 0 ]
