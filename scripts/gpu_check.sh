#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU checks in stages, each a few minutes on one H100 or H200 (docs/gpu.md gives
# the plan, the order and the expected minutes). Each stage writes its raw output, headed by the date, the
# device, the commit and the command, to OUT/<stage>.log, and a summary table to OUT/<stage>.md where it has
# one; the file is complete when the script exits. A stage uses the GPU kit (make gpu-kit) when the kit's
# sources digest equals this checkout's and its programs resolve their libraries here (ldd -r), and builds
# with make only what is missing. Each stage keeps to a wall-clock budget (--budget, default 420 s: each run
# is cut to what is left). Exit status: 0 when every check of the stage passed, 1 otherwise.
#   usage: scripts/gpu_check.sh [STAGE|all] [--out DIR] [--kit DIR] [--budget S] [--steps N] [--quick] [--bench FILE]
#                               [--programs DIR] [--tiny]
#          scripts/gpu_check.sh STAGE --help
#   stages (docs/gpu.md groups them into commands of a GPU machine; all runs probe ... multirank in order):
#     sprint1      the short session's first command (at most 6.5 minutes, budget 370 s): the environment; the fp8
#                  probe build/fp8_gemm under cuBLASLt's log with the default libraries, with PyTorch's cuBLASLt first,
#                  and --trainer; PyTorch's control dev/probe/fp8_torch.py and dev/probe/lt_trace.py on the two
#                  traces; test_gpt, test_gpt_fp32 and test_gpt_fp16 on the kit's two states; the multirank stage's
#                  runs; gpt3_1.3b with --gelu-fusion off, then on, then --gemm-algos tune. Files:
#                  sprint1.log, sprint1.md, sprint1_files.tar.gz (every run's log, the cuBLASLt traces)
#     sprint2      the second command (at most 8 minutes, budget 460 s): gpt3_1.3b and llama3.2_1b, 20 steps with the
#                  step profile (SPRINT_PROFILE_FLAGS); gpt3_1.3b in the fp16 build; whether fp8 runs at all (gpt3_125m
#                  --fp8 delayed -x 1) and, only then, fp8 delayed beside bf16 on both and FlagPerf's loss rule on
#                  gpt3_125m; cuDNN's attention: test_attention (its values and ours) and gpt3_1.3b with --attention
#                  cudnn and the profile; gpt3_1.3b with --attention wgmma (our Hopper kernels) and the profile;
#                  gpt3_2.7b under --recompute auto with the profile; attention beside SDPA; attention with 1, 4 and
#                  16 documents per sequence at gpt3_1.3b's shape (--docs); gpt3_125m with the profile. Files: sprint2.log,
#                  sprint2.md, sprint2_files.tar.gz
#     sprint       sprint1 then sprint2 (for a run on the CPU; on a GPU machine each is a command of its own)
#     probe        environment (device, driver, nvcc, NCCL location and version, MPI), ceilings (copy
#                  bandwidth, cuBLASLt bf16/fp8 GEMM), nccl_ranks with 2 and 4 ranks on the one GPU
#     correct      test_gpt, test_gpt_fp32 and test_gpt_fp16 on every reference state of tests/gpu_cases.sh (the
#                  kit's, the others made here on all cores, overlapped with the tests), compute-sanitizer memcheck and
#                  racecheck of test_gpt on one tiny state
#     kernels      dev/cuda/run_all.sh: every dev/cuda kernel's table, attention beside torch SDPA; then
#                  attention forward and backward, ours and SDPA, at head dims 64, 80, 128 and T 1k-8k
#     bench-small  train_gpt tokens/s, MFU, peak memory beside the estimate: gpt3_125m, gpt3_1.3b, llama3.2_1b
#     bench-large  the same for gpt3_2.7b, gpt3_6.7b, llama3_8b (each only where its estimate fits)
#     torch-small  train_gpt.py --train --compile on bench-small's configs, and the ratio to train_gpt
#     torch-large  the same for bench-large's configs
#     fp8          test_fp8 under cuBLASLt's log (OUT/cublaslt_fp8.log); train_gpt --fp8 delayed and current beside
#                  bf16 (tokens/s, the ratio) on gpt3_1.3b, gpt3_2.7b and llama3.2_1b; 200 steps of gpt3_125m in bf16
#                  and in fp8 delayed, FlagPerf's loss rule (docs/fp8.md)
#     multirank    train_gpt_fp32 at dp2 zero3, tp2 sp, pp2, pp2 vpp2, dp4 zero2, tp2 pp2 dp2 zero1 sp and
#                  train_gpt at dp2 zero3, ranks sharing the one GPU (mpirun, each rank its own NCCL_HOSTID), 4 steps
#                  of a small model against the same build's one-rank run (scripts/multirank_lib.sh); bf16 dp2 zero3
#                  twice (bitwise equal); a rank stalled at step 3 (LLMC_TEST_STALL) under --comm-timeout, then
#                  --resume auto against the uninterrupted run. Files: multirank.log, multirank.md,
#                  multirank_files.tar.gz
#     all          every stage above from probe to multirank in order (the default; not the sprint stages)
#   --out DIR     where the raw output goes (default bench/results/<date>_<gpu>/)
#   --kit DIR     the GPU kit (default gpukit)
#   --budget S    the stage's wall-clock budget in seconds (default 420; at least 60)
#   --steps N     steps of each benchmark run (default 20; the median step after warm-up is reported)
#   --quick       probe: ceilings --quick and 16 MiB NCCL buffers
#   --bench FILE  torch: a bench-*.md table with train_gpt's tokens/s for the ratio (default OUT/bench-*.md)
#   --programs DIR  take every program from DIR instead of the kit or make, named as in the checkout (DIR/train_gpt,
#                 DIR/build/fp8_gemm, DIR/build/ckpt_convert, ...): e.g. the builds against tests/cuda_emu, to run a
#                 stage on the CPU (tests/t_gpu_sprint.sh)
#   --tiny        every run shrunk to a tiny model and a few steps (the stages' plumbing, with --programs): the
#                 benchmarks on gpt3_tiny / llama_tiny shapes for 3 steps, the loss rule over 4 steps, the fp8
#                 probe at 64x32x64, test_gpt and test_gpt_fp32 each on one of the two states, the multirank fp32
#                 runs at -t 32 (the model is small already)
set -u
cd "$(dirname "$0")/.."
source scripts/gpu_lib.sh

STAGES=(probe correct kernels bench-small bench-large torch-small torch-large fp8 multirank)
SPRINT_STAGES=(sprint1 sprint2)
STAGE_BUDGET_S=""  # --budget; else each stage's own (stage_budget)
stage_budget() {  # the default budget of a stage, seconds
    case $1 in sprint1) echo 370 ;; sprint2) echo 460 ;; multirank) echo 300 ;; *) echo 420 ;; esac
}
cmdline="scripts/gpu_check.sh${*:+ $*}"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
stage_help() {  # the usage line, the stage's own lines of the header and the flags
    echo "usage: scripts/gpu_check.sh $1 [--out DIR] [--kit DIR] [--budget S] [--steps N] [--quick] [--bench FILE] [--programs DIR] [--tiny]"
    awk -v s="$1" 'NR > 1 && !/^#/ { exit }
        /^#     [a-z]/ { on = ($2 == s) } on { sub(/^#   /, ""); print }' "$0"
    usage | sed -n '/^  --out/,$p'
}
die() { echo "error: $*" >&2; exit 1; }

stage=""; out=""; kit=gpukit; steps=20; quick=0; bench_tables=(); help=0; programs_dir=""; tiny=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift ;;
        --kit) [ $# -ge 2 ] || die "--kit needs a directory"; kit=$2; shift ;;
        --steps) [ $# -ge 2 ] || die "--steps needs a number"; steps=$2; shift ;;
        --budget) [ $# -ge 2 ] || die "--budget needs seconds"; STAGE_BUDGET_S=$2; shift ;;
        --bench) [ $# -ge 2 ] || die "--bench needs a file"; bench_tables+=("$2"); shift ;;
        --programs) [ $# -ge 2 ] || die "--programs needs a directory"; programs_dir=$2; shift ;;
        --quick) quick=1 ;;
        --tiny) tiny=1 ;;
        -h|--help) help=1 ;;
        -*) die "unknown flag '$1' (see scripts/gpu_check.sh --help)" ;;
        *) [ -z "$stage" ] || die "one stage at a time: got '$stage' and '$1'"; stage=$1 ;;
    esac
    shift
done
[ -n "$stage" ] || stage=all
case " ${STAGES[*]} ${SPRINT_STAGES[*]} sprint all " in *" $stage "*) ;;
    *) die "unknown stage '$stage' (stages: ${STAGES[*]} ${SPRINT_STAGES[*]} sprint all)" ;; esac
if [ $help = 1 ]; then
    if [ "$stage" = all ]; then usage; else stage_help "$stage"; fi
    exit 0
fi
case "$steps" in ''|*[!0-9]*|0) die "--steps expects a positive integer, got '$steps'" ;; esac
budget_flag=$STAGE_BUDGET_S
if [ -n "$budget_flag" ]; then
    case "$budget_flag" in *[!0-9]*) die "--budget expects seconds (at least 60), got '$budget_flag'" ;; esac
    [ "$budget_flag" -ge 60 ] || die "--budget expects seconds (at least 60), got '$budget_flag'"
fi
if [ -n "$programs_dir" ]; then
    [ -d "$programs_dir" ] || die "--programs: no directory '$programs_dir'"
    programs_dir=$(cd "$programs_dir" && pwd)
fi
for f in "${bench_tables[@]}"; do [ -f "$f" ] || die "--bench: no file '$f'"; done
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    die "stage '$stage' needs a GPU and nvidia-smi finds none$(command -v nvidia-smi >/dev/null 2>&1 || echo ' (no nvidia-smi on PATH)'); run it on a GPU machine (docs/gpu.md)"
fi

# ---- the machine
PY=$(python_with_torch)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
jobs=$(nproc 2>/dev/null || echo 4)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1 | tr -d ' ')
gpu_tag=$(echo "${gpu_name:-gpu}" | tr -c 'A-Za-z0-9.\n-' '_' | sed 's/__*/_/g; s/_$//')
[ -n "$out" ] || out="bench/results/$(date -u +%Y%m%d-%H%M)_${gpu_tag}"
mkdir -p "$out" || die "--out: cannot create '$out'"
# Python's NCCL wheel (the GPU machine's only NCCL) and the toolkit's libraries, for the kit's programs
# (linked elsewhere, their run path points at that machine's NCCL) and for the ones built here
nccl_wheel=$("$PY" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
# cuDNN's wheel (train_gpt_cudnn, test_attention) and the NVRTC its attention engines compile with (the toolkit's, or a
# wheel's: nvidia.cuda_nvrtc, or CUDA 13's nvidia.cu13)
cudnn_wheel=$("$PY" -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
nvrtc_wheel=$("$PY" -c '
import importlib
for n in ("nvidia.cuda_nvrtc", "nvidia.cu13"):
    try: print(list(importlib.import_module(n).__path__)[0]); break
    except Exception: pass' 2>/dev/null)
for d in "${nvrtc_wheel:+$nvrtc_wheel/lib}" "${cudnn_wheel:+$cudnn_wheel/lib}" "$CUDA_HOME/lib64" "${nccl_wheel:+$nccl_wheel/lib}"; do
    [ -n "$d" ] && [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
nccl_home=""
if [ -n "$nccl_wheel" ] && [ -f "$nccl_wheel/include/nccl.h" ] && [ ! -f "$CUDA_HOME/include/nccl.h" ]; then nccl_home=$nccl_wheel; fi

# ---- the kit: used when its files are intact and were built from these sources
digest=$(kit_sources_digest)
kit_ok=0; kit_intact=0; kit_note=""
if [ ! -f "$kit/MANIFEST" ]; then kit_note="no kit at $kit (make gpu-kit makes one)"
elif ! why=$(kit_verify "$kit"); then kit_note="not used: $why"
else
    kit_intact=1
    if [ "$(manifest_field "$kit/MANIFEST" sources_sha256)" = "$digest" ]; then
        kit_ok=1; kit_note="used: built from these sources at commit $(manifest_field "$kit/MANIFEST" commit) (dirty: $(manifest_field "$kit/MANIFEST" dirty))"
    else
        kit_note="programs and states not used: built from other sources (commit $(manifest_field "$kit/MANIFEST" commit)); its data files are"
    fi
fi
commit=$(git_commit_desc)
if [ -z "$commit" ]; then
    if [ $kit_ok = 1 ]; then commit="$(manifest_field "$kit/MANIFEST" commit) (no git here: from $kit/MANIFEST, whose sources digest matches)"
    else commit="unknown (no git here and no matching kit)"; fi
fi

libs_ok() {  # every shared library and symbol of program $1 resolves on this machine
    local missing
    missing=$(ldd -r "$1" 2>&1 | grep -E 'not found|undefined symbol')
    [ -z "$missing" ] && return 0
    echo "  $1 does not resolve here: $(echo "$missing" | head -n 3 | tr '\n' ' ')"
    return 1
}

# programs PATH...: puts each program (a checkout path: test_gpt, build/devcuda/norm, build/ceilings) in
# place from the kit where it can, then has make build the rest (or find them up to date); returns 1 when
# one is still missing or does not resolve its libraries. P[PATH] is then the file to run (./train_gpt,
# build/ceilings); with --programs DIR it is DIR/PATH, taken as it is (no kit, no make, no ldd).
declare -A P
pp() {  # pp PATH: the file to run for the checkout path PATH (P[PATH] once programs has placed it)
    if [ -n "${P[$1]+x}" ]; then echo "${P[$1]}"; else case $1 in */*) echo "$1" ;; *) echo "./$1" ;; esac; fi
}
programs() {
    local want=" $* " kpath cpath tobuild=() p
    if [ -n "$programs_dir" ]; then
        for p in "$@"; do
            if [ -x "$programs_dir/$p" ]; then P[$p]=$programs_dir/$p; echo "  $p: $programs_dir/$p (--programs)"
            else echo "  missing: $programs_dir/$p (--programs)"; return 1; fi
        done
        return 0
    fi
    while IFS='|' read -r kpath cpath; do
        case "$want" in *" $cpath "*) ;; *) continue ;; esac
        case "$cpath" in data/*) continue ;; esac
        if [ $kit_ok = 1 ] && [ -f "$kit/$kpath" ]; then
            mkdir -p "$(dirname "$cpath")"
            gunzip -c "$kit/$kpath" > "$cpath.kit" && chmod +x "$cpath.kit"
            if libs_ok "$cpath.kit"; then mv "$cpath.kit" "$cpath"; echo "  $cpath: from the kit"; continue; fi
            rm -f "$cpath.kit"
        fi
        tobuild+=("$cpath")
    done < <(kit_placements)
    if [ ${#tobuild[@]} -gt 0 ]; then
        echo "  building with make -j$jobs: ${tobuild[*]}"
        local t0=$SECONDS
        make --no-print-directory -j"$jobs" PYTHON="$PY" ${nccl_home:+NCCL_HOME=$nccl_home} "${tobuild[@]}" \
            > "$out/.make.log" 2>&1
        local rc=$?
        tail -n 20 "$out/.make.log"; rm -f "$out/.make.log"
        echo "  make exited $rc after $((SECONDS - t0)) s"
    fi
    for p in "$@"; do
        [ -x "$p" ] || { echo "  missing: $p"; return 1; }
        libs_ok "$p" || return 1
        case $p in */*) P[$p]=$p ;; *) P[$p]=./$p ;; esac
    done
}

data_files() {  # the git-ignored data files from the kit (their sha256 checked, whatever the sources)
    local kpath cpath
    while IFS='|' read -r kpath cpath; do
        case "$cpath" in data/*) ;; *) continue ;; esac
        if [ ! -f "$cpath" ] && [ $kit_intact = 1 ] && [ -f "$kit/$kpath" ]; then
            mkdir -p "$(dirname "$cpath")" && cp "$kit/$kpath" "$cpath" && echo "  $cpath: from the kit"
        fi
        [ -f "$cpath" ] || echo "  $cpath: missing (runs that need it fail; dev/data/fetch_tokenizers.sh makes it where there is network)"
    done < <(kit_placements)
}

# ---- helpers of the stage bodies
t_stage=0
left() { echo $((STAGE_BUDGET_S - (SECONDS - t_stage))); }
limited() {  # limited SECONDS CMD...: runs CMD under min(SECONDS, the stage's time left); 124 when stopped.
    # Says what it runs on stderr (the stage's log), so that CMD's own output can go to a file of its own
    local secs=$1 l; shift
    l=$(left); [ "$l" -lt "$secs" ] && secs=$l
    if [ "$secs" -lt 15 ]; then echo "(not run: the stage's $STAGE_BUDGET_S s budget is spent) \$ $*" >&2; return 125; fi
    echo "\$ $*   (limit ${secs} s)" >&2
    timeout -k 10 "$secs" "$@"
    local rc=$?
    [ $rc -eq 124 ] && echo "(stopped after the $secs s limit)" >&2
    return $rc
}
section() { echo; echo "== $1"; }
failed=()

# ---- probe: the machine, its ceilings, NCCL with several ranks
env_table() {  # the machine: device, driver, toolkit, python, torch, NCCL (headers, library, wheel), MPI, sanitizer
    row() { printf '%-26s %s\n' "$1" "${2:-}"; }
    local driver cc driver_cuda nvcc nvcc_ver torch_probe
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
    driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
    nvcc=$(command -v nvcc || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })
    nvcc_ver=$([ -n "$nvcc" ] && "$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1 (\2)/p')
    torch_probe=$("$PY" -c 'import torch
p = torch.cuda.get_device_properties(0)
print(torch.__version__, "(CUDA %s)," % torch.version.cuda, p.multi_processor_count, "SMs")' 2>/dev/null)
    row "GPU" "$gpu_name (${gpu_mib:-?} MiB, compute capability ${cc:-?})"
    row "driver" "${driver:-?} (CUDA ${driver_cuda:-?})"
    row "nvcc" "${nvcc:-absent}${nvcc_ver:+  release $nvcc_ver}"
    row "python3" "$PY"
    row "torch" "${torch_probe:-not importable with CUDA}"
    local h ver libs
    for h in "$CUDA_HOME/include/nccl.h" /usr/include/nccl.h "${nccl_wheel:+$nccl_wheel/include/nccl.h}"; do
        [ -n "$h" ] && [ -f "$h" ] || continue
        ver=$(awk '/#define NCCL_MAJOR/{a=$3} /#define NCCL_MINOR/{b=$3} /#define NCCL_PATCH/{c=$3} END{if (a != "") print a "." b "." c}' "$h")
        libs=$(ls "$(dirname "$(dirname "$h")")"/lib*/libnccl.so* 2>/dev/null | tr '\n' ' ')
        row "NCCL" "$h, version ${ver:-?}; ${libs:-no library beside it}"
    done
    row "NCCL wheel (nvidia.nccl)" "${nccl_wheel:-not importable with $PY}"
    row "cuDNN wheel (nvidia.cudnn)" "${cudnn_wheel:-not importable with $PY}$([ -n "$cudnn_wheel" ] && echo "; $(ls "$cudnn_wheel"/lib/libcudnn.so* 2>/dev/null | tr '\n' ' ')")"
    row "NVRTC (wheel, or the toolkit's)" "${nvrtc_wheel:-no wheel}; $(ls "$CUDA_HOME"/lib64/libnvrtc.so* 2>/dev/null | head -n 2 | tr '\n' ' ')"
    row "torch's NCCL" "$("$PY" -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null || echo '?')"
    row "LD_LIBRARY_PATH" "${LD_LIBRARY_PATH:-}"
    row "mpirun / mpicxx" "$(command -v mpirun || echo absent) / $(command -v mpicxx || echo absent)"
    row "compute-sanitizer" "$(sanitizer || echo absent)"
    row "CPU cores" "$jobs"
}
stage_probe() {
    section "environment"
    env_table

    section "programs"
    programs build/ceilings build/nccl_ranks || failed+=("programs")
    section "ceilings"
    if [ -x build/ceilings ]; then
        limited 30 build/ceilings --device-info || failed+=("ceilings --device-info")
        if [ $quick = 1 ]; then limited 120 build/ceilings --quick --json "$out/ceilings.json" || failed+=("ceilings")
        else limited 240 build/ceilings --json "$out/ceilings.json" || failed+=("ceilings"); fi
        # ceilings exits 0 when a GEMM fails in cuBLASLt (only a wrong result is its error): count those rows here
        local bad
        bad=$("$PY" -c 'import json, sys
rows = json.load(open(sys.argv[1])).get("gemm", [])
print(sum(1 for r in rows if str(r.get("status", "")).startswith("failed")))' "$out/ceilings.json" 2>/dev/null)
        [ "${bad:-0}" = 0 ] || failed+=("ceilings: $bad GEMM row(s) failed in cuBLASLt")
    else failed+=("ceilings (no program)"); fi
    local n mib=64
    [ $quick = 1 ] && mib=16
    for n in 2 4; do
        section "nccl_ranks, $n ranks on one GPU"
        if [ -x build/nccl_ranks ]; then
            limited 120 build/nccl_ranks --launch "$n" --timeout 100 --bw-mib "$mib" || failed+=("nccl_ranks $n ranks")
        else failed+=("nccl_ranks $n ranks (no program)"); fi
    done
}

sanitizer() {  # the path of compute-sanitizer: the toolkit's bin, PATH, or a versioned toolkit
    local s
    for s in "$CUDA_HOME/bin/compute-sanitizer" "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda*/bin/compute-sanitizer; do
        [ -n "$s" ] && [ -x "$s" ] && { echo "$s"; return 0; }
    done
    return 1
}

# ---- correct: test_gpt on every reference state, the sanitizers on one
stage_correct() {
    section "programs"
    programs train_gpt_cpu test_gpt test_gpt_fp32 test_gpt_fp16 || { failed+=("programs"); return; }
    section "reference states (tests/gpu_cases.sh)"
    source tests/gpu_cases.sh
    local d=build/gpu_states c name names=() pids=() i
    mkdir -p "$d"
    for c in "${gpu_cases[@]}"; do
        name=${c%%|*}; names+=("$name")
        if [ $kit_ok = 1 ] && [ -f "$kit/states/$name.safetensors" ]; then
            cp "$kit/states/$name.safetensors" "$d/" && echo "  $name: from the kit"; pids+=(0)
        else  # made in the background, one process per state (train_gpt.py --ref is single-threaded),
            # stopped with everything it started at the end of the stage's budget
            rm -f "$d/$name.safetensors"
            if [ "$(left)" -lt 15 ]; then echo "  $name: not made: the stage's budget is spent"; pids+=(0); continue; fi
            timeout -k 5 "$(left)" bash -c 'source tests/gpu_cases.sh && make_gpu_states "$@"' _ "$d" "$PY" "$name" \
                > "$d/$name.make.log" 2>&1 &
            pids+=($!); echo "  $name: being made (train_gpt_cpu --export-init, train_gpt.py --ref)"
        fi
    done
    local tiny="" rows=() r1 r2 r3 st
    for i in "${!names[@]}"; do
        name=${names[$i]}
        if [ "${pids[$i]}" != 0 ]; then
            local t0=$SECONDS rc
            wait "${pids[$i]}"; rc=$?
            echo; echo "  $name: waited $((SECONDS - t0)) s for its state"; cat "$d/$name.make.log"
            [ $rc = 124 ] && { rm -f "$d/$name.safetensors"; echo "  $name: not made within the stage's $STAGE_BUDGET_S s budget"; }
        fi
        st=$d/$name.safetensors
        if [ ! -f "$st" ]; then
            failed+=("state $name"); rows+=("| $name | no state | no state | no state |"); continue
        fi
        section "test_gpt on $name"
        limited 150 ./test_gpt ref "$st" > "$d/$name.bf16.log" 2>&1; r1=$?
        cat "$d/$name.bf16.log"
        limited 150 ./test_gpt_fp32 ref "$st" > "$d/$name.fp32.log" 2>&1; r2=$?
        cat "$d/$name.fp32.log"
        limited 150 ./test_gpt_fp16 ref "$st" > "$d/$name.fp16.log" 2>&1; r3=$?
        cat "$d/$name.fp16.log"
        [ $r1 = 0 ] || failed+=("test_gpt $name")
        [ $r2 = 0 ] || failed+=("test_gpt_fp32 $name")
        [ $r3 = 0 ] || failed+=("test_gpt_fp16 $name")
        rows+=("| $name | $(counts "$d/$name.bf16.log" $r1) | $(counts "$d/$name.fp32.log" $r2) | $(counts "$d/$name.fp16.log" $r3) |")
        if [ -z "$tiny" ]; then  # the sanitizers on the first state, while the larger ones are being made
            tiny=$name
            sanitize memcheck "$st"; rows+=("| compute-sanitizer memcheck, $name | $sanitize_result | | |")
            sanitize racecheck "$st"; rows+=("| compute-sanitizer racecheck, $name | $sanitize_result | | |")
        fi
    done
    {
        echo "| reference state | test_gpt (bf16) | test_gpt_fp32 | test_gpt_fp16 |"
        echo "| --- | --- | --- | --- |"
        printf '%s\n' "${rows[@]}"
    } > "$out/correct.md"
    section "summary table ($out/correct.md)"
    cat "$out/correct.md"
}
counts() {  # counts LOG RC: "N passed, M failed" of test_gpt's [PASS]/[FAIL] lines, or how it ended
    local p f
    p=$(grep -c '^\[PASS\]' "$1"); f=$(grep -c '^\[FAIL\]' "$1")
    case $2 in 0|1) echo "$p passed, $f failed$([ "$2" = 1 ] && [ "$f" = 0 ] && echo ", exit 1")" ;;
        124) echo "stopped at the time limit ($p passed, $f failed)" ;; *) echo "exit $2 ($p passed, $f failed)" ;; esac
}
sanitize_result=""
sanitize() {  # sanitize TOOL STATE: compute-sanitizer --tool TOOL on test_gpt (bf16)
    local s log=build/gpu_states/sanitizer_$1.log rc
    section "compute-sanitizer --tool $1, test_gpt on $(basename "$2")"
    if ! s=$(sanitizer); then sanitize_result="not run: no compute-sanitizer"; failed+=("$1 (no compute-sanitizer)"); return; fi
    limited 120 "$s" --tool "$1" --error-exitcode 99 ./test_gpt ref "$2" > "$log" 2>&1; rc=$?
    grep -E '^\[FAIL\]|^=========' "$log" | head -n 60
    tail -n 3 "$log"
    case $rc in
        0) sanitize_result="no errors" ;;
        99) sanitize_result="ERRORS (see the log)"; failed+=("$1") ;;
        124) sanitize_result="stopped at the time limit"; failed+=("$1 (time limit)") ;;
        *) sanitize_result="exit $rc"; failed+=("$1") ;;
    esac
}

# ---- kernels: the dev/cuda tables, attention beside torch SDPA
stage_kernels() {
    local progs p
    progs=$(devcuda_programs)
    section "programs"
    programs $(for p in $progs; do echo "build/devcuda/$p"; done) build/test_fp8 || failed+=("programs")
    # the fp8 casts, scaling and cuBLASLt fp8 GEMMs (compute capability 8.9+), checked by tests/fp8_checks.py --gpu
    section "fp8 (tests/test_fp8.cu)"
    local f8=build/fp8_gpu
    rm -rf "$f8" && mkdir -p "$f8"
    if limited 120 build/test_fp8 "$f8" > "$f8/test_fp8.log" 2>&1; then
        grep -E '^\[(PASS|FAIL)\]|^error' "$f8/test_fp8.log"
        limited 120 "$PY" tests/fp8_checks.py "$f8" --gpu > "$f8/checks.log" 2>&1 || failed+=("fp8 checks")
        cat "$f8/checks.log"
    else
        tail -n 5 "$f8/test_fp8.log"; failed+=("test_fp8")
    fi
    section "dev/cuda/run_all.sh"
    local logs=build/devcuda/run_all
    rm -rf "$logs"
    limited 400 bash dev/cuda/run_all.sh --bin build/devcuda --logs "$logs" > "$out/kernels.md" || failed+=("dev/cuda/run_all.sh")
    cat "$out/kernels.md"
    section "attention sweep: head dims 64, 80, 128; T 1024, 4096, 8192; causal"
    attention_sweep "$logs/attention_sweep"
    { echo; echo "## attention sweep ($sweep_shapes)"; cat "$logs/attention_sweep/table.md"; } >> "$out/kernels.md"
    for p in $progs attention_sdpa; do
        [ -f "$logs/$p.log" ] || continue
        section "full output of $p"
        cat "$logs/$p.log"
    done
}

# attention_sweep DIR: attention forward and backward of llmc/attention.cuh (the dev/cuda programs' versions below) and
# torch SDPA at head dims 64, 80, 128 and T 1024, 4096, 8192 (B*T = 16384 tokens, causal); the programs' full output
# in DIR, their tables (ours, then SDPA's lines as comments) in DIR/table.md; sets sweep_shapes and sweep_sdpa (ran,
# or "not run: ..."). Needs programs build/devcuda/attention_forward and attention_backward (P). --tiny: one shape
# of T 128 per head dim, without the programs' fixed check matrix (the emulation's minutes), 1 sample.
attention_sweep() {
    local sw=$1 shapes="" bt hd h p quick=()
    for hd in 64 80 128; do
        h=32; [ $hd = 128 ] && h=16
        if [ $tiny = 1 ]; then shapes="$shapes,1x128x2x2x${hd}"; continue; fi
        for bt in 16x1024 4x4096 2x8192; do shapes="$shapes,${bt}x${h}x${h}x${hd}"; done
    done
    shapes=${shapes#,}
    sweep_shapes=$shapes
    [ $tiny = 1 ] && quick=(--skip-matrix --reps 1 --warmup 0)
    rm -rf "$sw" && mkdir -p "$sw"
    # the forward's versions 3 (mma.sync) and 4 (wgmma) are llmc/attention.cuh's (the table attention_forward_version
    # picks from); the backward's versions 3, 4 and 5 are its dK/dV kernels (attention_backward_version's table), 6 the
    # candidate that stores dS, 7 both kernels on wgmma; run_all.sh times every version at one shape
    : > "$sw/attention_forward.log"
    for v in 3 4; do
        limited 120 "$(pp build/devcuda/attention_forward)" $v --sizes "$shapes" "${quick[@]}" >> "$sw/attention_forward.log" 2>&1 ||
            failed+=("attention_forward v$v sweep")
    done
    cat "$sw/attention_forward.log"
    : > "$sw/attention_backward.log"
    for v in 3 4 5 6 7; do
        limited 120 "$(pp build/devcuda/attention_backward)" $v --sizes "$shapes" "${quick[@]}" >> "$sw/attention_backward.log" 2>&1 ||
            failed+=("attention_backward v$v sweep")
    done
    cat "$sw/attention_backward.log"
    if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        local sh B T H KV
        for sh in ${shapes//,/ }; do
            IFS=x read -r B T H KV hd <<< "$sh"
            limited 60 "$PY" dev/cuda/attention_sdpa.py --B "$B" --T "$T" --H "$H" --KV "$KV" --hd "$hd" >> "$sw/sdpa.log" 2>&1 \
                || failed+=("attention_sdpa.py $sh")
        done
        cat "$sw/sdpa.log"
        sweep_sdpa="ran"
    else sweep_sdpa="not run: $PY has no torch with CUDA"; echo "torch SDPA $sweep_sdpa"; fi
    { grep -h '^| ' "$sw/attention_forward.log" "$sw/attention_backward.log"
      sed 's/^/# /' "$sw/sdpa.log" 2>/dev/null; } > "$sw/table.md"
}

# attention_docs DIR: the forward (version 3) and the backward (version 3, ATT_BWD_TABLE's for hd 128) of
# llmc/attention.cuh with 1, 4 and 16 equal documents per sequence (--docs 1,4,16: the document mask of
# --reset-attention-mask, whole tiles skipped) at gpt3_1.3b's attention shape (B 8, T 2048, H 16, KV 16, hd 128: its
# -b 8 -t 2048 benchmark), each row beside its time / the docs 1 time and the predicted fraction of the work left
# (dev/cuda/notes_attention.md, "Documents: predicted cost": 27.3% for 4, 9.1% for 16). The fixed check matrix is
# skipped (the sweep has just run it); the programs' documents check runs. The full output in DIR, the rows in
# DIR/table.md; sets docs_shape. Needs programs build/devcuda/attention_forward and attention_backward (P). About
# 10 s on an H200 (each limited to 30 s). --tiny: B 1, T 256, H 2, KV 2, hd 64, 1 sample.
attention_docs() {
    local dd=$1 lim=30 quick=()
    docs_shape=8x2048x16x16x128
    [ $tiny = 1 ] && { docs_shape=1x256x2x2x64; lim=120; quick=(--reps 1 --warmup 0); }
    rm -rf "$dd" && mkdir -p "$dd"
    limited $lim "$(pp build/devcuda/attention_forward)" 3 --sizes "$docs_shape" --docs 1,4,16 --skip-matrix "${quick[@]}" \
        > "$dd/attention_forward.log" 2>&1 || failed+=("attention_forward --docs 1,4,16")
    cat "$dd/attention_forward.log"
    limited $lim "$(pp build/devcuda/attention_backward)" 3 --sizes "$docs_shape" --docs 1,4,16 --skip-matrix "${quick[@]}" \
        > "$dd/attention_backward.log" 2>&1 || failed+=("attention_backward --docs 1,4,16")
    cat "$dd/attention_backward.log"
    # the forward's table (header, rule, rows), then the backward's rows
    { grep -h '^| ' "$dd/attention_forward.log"; grep -h '^| ' "$dd/attention_backward.log" | tail -n +3; } > "$dd/table.md"
}

# ---- bench-*: train_gpt; torch-*: train_gpt.py --compile on the same configs
# name | train_gpt flags (batch -b and length -t are also train_gpt.py's --batch and --seq)
bench_small=("gpt3_125m|-b 16 -t 1024" "gpt3_1.3b|-b 8 -t 2048" "llama3.2_1b|-b 4 -t 2048")
bench_large=("gpt3_2.7b|-b 8 -t 2048 --recompute full" "gpt3_6.7b|-b 1 -t 2048 --recompute full --bf16-moments 1"
             "llama3_8b|-b 1 -t 8192 --recompute full --bf16-moments 1")
data='data/mobydick_gpt2_train_*.bin'
free_gib() { nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null | head -n 1 | awk '{ printf "%.2f", $1 / 1024 }'; }
peak_tflops() {  # dense bf16 peak of the device, for MFU (0: unknown)
    case "$gpu_name" in *H100*|*H200*|*H800*) echo 989e12 ;; *A100*|*A800*) echo 312e12 ;; *) echo 0 ;; esac
}

tokens_per_s() { sed -n 's/^summary: median [0-9.]* ms\/step, \([0-9]*\) tokens\/s.*/\1/p' "$1"; }  # of a train_gpt log

# bench_row PRESET FLAGS LOG LIMIT [EXTRA...]: --estimate-memory against the free memory, then $steps steps of train_gpt
# (P) with FLAGS and EXTRA on $data into LOG (at most LIMIT s); sets row (the bench table's row: tokens/s, MFU, peak
# memory, the estimate), tok (tokens/s, empty when none) and brc (the run's exit status; 3 when it did not fit)
bench_row() {
    local preset=$1 flags=$2 shown=$2 log=$3 lim=$4 est estt free fpt peak mfu; shift 4
    local tg; tg=$(pp "${bench_prog:-train_gpt}")  # bench_prog: another trainer build (train_gpt_cudnn)
    [ $tiny = 1 ] && flags="-b 1 -t 64"  # the row keeps the preset's flags; the tiny model runs these
    free=$(free_gib)
    # shellcheck disable=SC2086
    est=$("$tg" $(model_flags "$preset") $flags --estimate-memory "$free" 2>&1)
    echo "$est"
    estt=$(sed -n 's/.*total \([0-9.]*\) of .*/\1/p' <<< "$est")
    tok=""
    if ! grep -q '^fits' <<< "$est"; then
        row="| $preset | $shown | no fit in $free GiB free | - | - | ${estt:--} |"; brc=3; return
    fi
    # shellcheck disable=SC2086
    limited "$lim" "$tg" $(model_flags "$preset") $flags -x "$steps" -v 0 -g 0 -o "" -i "$(data_for "$preset")" "$@" > "$log" 2>&1
    brc=$?
    [ $brc = 0 ] || failed+=("train_gpt $preset${*:+ $*}")
    cat "$log"
    tok=$(tokens_per_s "$log")
    fpt=$(sed -n 's/^| FLOPs per token *| \([0-9.e+]*\) (model).*/\1/p' "$log")
    peak=$(sed -n 's/^peak device memory in use: \([0-9.]*\) GiB/\1/p' "$log")
    mfu=$(awk -v t="${tok:-0}" -v f="${fpt:-0}" -v p="$(peak_tflops)" 'BEGIN {
        if (p > 0 && t > 0 && f > 0) printf "%.1f%%", 100 * t * f / p; else printf "-" }')
    row="| $preset | $shown | ${tok:--} | $mfu | ${peak:--} | ${estt:--} |"
}
# model_flags PRESET: -c PRESET, or with --tiny a tiny model of the preset's family (GPT or LLaMA), head dim 64 (the
# bf16 kernels' smallest); data_for PRESET: the token shards, or with --tiny the text (its byte vocabulary fits 301)
model_flags() {
    if [ $tiny = 0 ]; then echo "-c $1"
    else case $1 in llama*) echo "-c llama_tiny --layers 2 --embd 128 --heads 2 --kv-heads 1 --vocab 301" ;;
                    *) echo "-c gpt3_tiny --layers 2 --embd 128 --heads 2 --kv-heads 2 --vocab 301" ;; esac; fi
}
data_for() { if [ $tiny = 0 ]; then echo "$data"; else echo data/mobydick.txt; fi; }

stage_bench() {  # stage_bench small|large
    local -n group=bench_$1
    section "programs"
    programs train_gpt || { failed+=("programs"); return; }
    data_files
    local tmp=build/gpu_check bench preset flags rows=() row tok brc
    mkdir -p "$tmp"
    for bench in "${group[@]}"; do
        IFS='|' read -r preset flags <<< "$bench"
        section "train_gpt $preset $flags: $steps steps, median after warm-up, $data"
        bench_row "$preset" "$flags" "$tmp/$preset.train_gpt.log" 240
        rows+=("$row")
    done
    {
        echo "| preset | train_gpt flags | tokens/s | MFU | peak GiB | estimate GiB |"
        echo "| --- | --- | --- | --- | --- | --- |"
        printf '%s\n' "${rows[@]}"
        echo
        echo "train_gpt on $gpu_name, $steps steps on $data; MFU counts model FLOPs against $(peak_tflops | awk '{ printf "%g", $1 / 1e12 }') TFLOP/s dense bf16 (0: unknown device); peak: train_gpt's peak device memory in use; estimate: --estimate-memory's total"
    } > "$out/bench-$1.md"
    section "summary table ($out/bench-$1.md)"
    cat "$out/bench-$1.md"
}

# fp8: each config in bf16 (--fp8 none), fp8 delayed and fp8 current, tokens/s side by side in one stage
bench_fp8=("gpt3_1.3b|-b 8 -t 2048" "gpt3_2.7b|-b 8 -t 2048 --recompute full" "llama3.2_1b|-b 4 -t 2048")
# fp8_loss_rule DIR STEPS FROM LIMIT: STEPS steps of gpt3_125m (-b 8 -t 1024; with --tiny the tiny GPT) in bf16 and in
# fp8 delayed, each at most LIMIT s, logs and metrics in DIR; FlagPerf's rule on the losses (mean relative difference
# from step FROM below 2%, tests/fp8_train_checks.py flagperf); sets rel
fp8_loss_rule() {
    local dir=$1 n=$2 from=$3 lim=$4 recipe tg
    tg=$(pp train_gpt)
    for recipe in none delayed; do
        section "train_gpt gpt3_125m -b 8 -t 1024 --fp8 $recipe: $n steps (loss agreement)"
        # shellcheck disable=SC2046
        limited "$lim" "$tg" $(model_flags gpt3_125m) $([ $tiny = 1 ] && echo "-b 1 -t 64" || echo "-b 8 -t 1024") -x "$n" \
            -v 0 -g 0 -o "$dir/loss_$recipe" -i "$(data_for gpt3_125m)" --fp8 $recipe > "$dir/loss_$recipe.log" 2>&1 ||
            failed+=("train_gpt gpt3_125m --fp8 $recipe, $n steps")
        grep -E "^step +(1|$from|100|$n)/" "$dir/loss_$recipe.log"
    done
    rel=$("$PY" tests/fp8_train_checks.py flagperf "$dir/loss_delayed/metrics.jsonl" "$dir/loss_none/metrics.jsonl" "$from" 2>&1)
    echo "FlagPerf's rule, fp8 delayed against bf16, mean relative loss difference from step $from: $rel (must be < 0.02)"
    awk -v x="$rel" 'BEGIN { exit !(x < 0.02) }' || failed+=("FlagPerf's rule: $rel")
}
stage_fp8() {
    section "programs"
    programs train_gpt build/test_fp8 || { failed+=("programs"); return; }
    data_files
    local tmp=build/gpu_check bench preset flags recipe free est log tok b16 ratio rel rows=()
    mkdir -p "$tmp"
    # cuBLASLt's own account of the fp8 GEMMs (on the first H100 every one was refused, CUBLAS_STATUS_NOT_SUPPORTED,
    # after its heuristic had offered algorithms): test_fp8 under CUBLASLT_LOG_LEVEL=5, the log in OUT
    section "test_fp8 under cuBLASLt's log (CUBLASLT_LOG_LEVEL=5, $out/cublaslt_fp8.log)"
    rm -rf "$tmp/fp8_diag" && mkdir -p "$tmp/fp8_diag"
    CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE="$out/cublaslt_fp8.log" limited 60 build/test_fp8 "$tmp/fp8_diag" 2>&1 |
        grep -E '^\[(PASS|FAIL)\]|error' || failed+=("test_fp8")
    grep -iE 'error|not supported|hint|warn' "$out/cublaslt_fp8.log" 2>/dev/null | head -n 40
    for bench in "${bench_fp8[@]}"; do
        IFS='|' read -r preset flags <<< "$bench"
        b16=""
        for recipe in none delayed current; do
            section "train_gpt $preset $flags --fp8 $recipe: $steps steps, median after warm-up, $data"
            free=$(free_gib)
            est=$(./train_gpt -c "$preset" $flags --fp8 $recipe --estimate-memory "$free" 2>&1)
            if ! grep -q '^fits' <<< "$est"; then echo "$est"; rows+=("| $preset | $flags | $recipe | no fit in $free GiB | - |"); continue; fi
            log=$tmp/$preset.fp8_$recipe.log
            limited 150 ./train_gpt -c "$preset" $flags --fp8 $recipe -x "$steps" -v 0 -g 0 -o "" -i "$data" > "$log" 2>&1 ||
                failed+=("train_gpt $preset --fp8 $recipe")
            cat "$log"
            tok=$(tokens_per_s "$log")
            [ $recipe = none ] && b16=$tok
            ratio=$(awk -v a="${tok:-0}" -v b="${b16:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }')
            rows+=("| $preset | $flags | $recipe | ${tok:--} | $ratio |")
        done
    done
    fp8_loss_rule "$tmp" 200 21 120
    {
        echo "| preset | train_gpt flags | --fp8 | tokens/s | vs bf16 |"
        echo "| --- | --- | --- | --- | --- |"
        printf '%s\n' "${rows[@]}"
        echo
        echo "train_gpt on $gpu_name, $steps steps on $data, median step after warm-up; gpt3_125m 200 steps, fp8 delayed against bf16: mean relative loss difference from step 21 $rel (FlagPerf's rule: < 0.02)"
    } > "$out/fp8.md"
    section "summary table ($out/fp8.md)"
    cat "$out/fp8.md"
}

# torch_row PRESET FLAGS OURS DIR: train_gpt.py --train --compile on PRESET's config (train_gpt --print-config with FLAGS'
# batch and length), $steps steps, median tokens/s after 5, the ratio to OURS (train_gpt's tokens/s, may be empty);
# skipped with a note where 16 bytes per parameter exceed the free memory; sets row (torch-*.md's row)
torch_row() {
    local preset=$1 flags=$2 ours=$3 tmp=$4 B T est master need free tlog trc ttok tpeak ratio tg
    tg=$(pp train_gpt)
    B=$(sed -n 's/.*-b \([0-9]*\).*/\1/p' <<< "$flags")
    T=$(sed -n 's/.*-t \([0-9]*\).*/\1/p' <<< "$flags")
    section "train_gpt.py --train --compile, $preset, batch $B, seq $T, $steps steps"
    # PyTorch keeps weights, gradients and AdamW's moments in fp32: 16 bytes per parameter, 4x the
    # master copy of train_gpt's estimate
    free=$(free_gib)
    est=$("$tg" -c "$preset" $flags --estimate-memory 100000 2>&1)
    master=$(sed -n 's/^memory estimate (GiB):.* master \([0-9.]*\) .*/\1/p' <<< "$est")
    need=$(awk -v m="${master:-0}" 'BEGIN { printf "%.1f", 4 * m }')
    if awk -v n="$need" -v f="$free" 'BEGIN { exit !(n <= 0 || n > f) }'; then
        echo "skipped: 16 bytes per parameter need $need GiB, $free GiB are free"
        row="| $preset | $B | $T | skipped: needs $need GiB of $free free | - | ${ours:--} | - |"; return
    fi
    "$tg" -c "$preset" $flags --print-config "$tmp/$preset.json" > /dev/null
    tlog=$tmp/$preset.torch.log
    limited 300 "$PY" train_gpt.py --train --compile --config "$tmp/$preset.json" --data "$data" --batch "$B" \
        --seq "$T" --accum 1 --steps "$steps" > "$tlog" 2>&1
    trc=$?
    cat "$tlog"
    # median tok/s after warm-up (the first 5 steps, compilation among them)
    ttok=$(sed -n 's/^step .* | \([0-9]*\) tok\/s$/\1/p' "$tlog" | tail -n +6 | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }')
    # a baseline that does not run (out of memory without recompute, say) is noted, not a failure of ours
    [ $trc -ne 0 ] && ttok="exit $trc"
    tpeak=$(sed -n 's/^peak memory \([0-9]*\) MiB/\1/p' "$tlog" | awk '{ printf "%.2f", $1 / 1024 }')
    ratio=$(awk -v a="${ours:-0}" -v b="${ttok:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }')
    row="| $preset | $B | $T | ${ttok:--} | ${tpeak:--} | ${ours:--} | $ratio |"
}
torch_cuda() { "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
stage_torch() {  # stage_torch small|large
    local -n group=bench_$1
    section "programs"
    programs train_gpt || { failed+=("programs"); return; }
    "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
        || { echo "$PY has no torch with CUDA"; failed+=("torch"); return; }
    local tables=("${bench_tables[@]}") t
    [ ${#tables[@]} -gt 0 ] || for t in "$out"/bench-*.md; do [ -f "$t" ] && tables+=("$t"); done
    echo "train_gpt's tokens/s for the ratio from: ${tables[*]:-none (run bench-$1 first, or pass --bench FILE)}"
    local tmp=build/gpu_check bench preset flags ours row rows=()
    mkdir -p "$tmp"
    for bench in "${group[@]}"; do
        IFS='|' read -r preset flags <<< "$bench"
        ours=$(for t in "${tables[@]}"; do awk -F'|' -v p="$preset" '$2 == " " p " " { gsub(/ /, "", $4); if ($4 ~ /^[0-9]+$/) print $4 }' "$t"; done | tail -n 1)
        torch_row "$preset" "$flags" "$ours" "$tmp"
        rows+=("$row")
    done
    {
        echo "| preset | batch | seq | torch tokens/s | torch peak GiB | train_gpt tokens/s | ratio |"
        echo "| --- | --- | --- | --- | --- | --- | --- |"
        printf '%s\n' "${rows[@]}"
        echo
        echo "train_gpt.py --train --compile (bf16 autocast, accum 1) on $gpu_name, $steps steps, median after 5; ratio = train_gpt / torch (train_gpt's figure from ${tables[*]:-no bench table})"
    } > "$out/torch-$1.md"
    section "summary table ($out/torch-$1.md)"
    cat "$out/torch-$1.md"
}

# ---- multirank: every parallel layout on the one GPU, against the same build's one-rank run
# The runs and comparisons are scripts/multirank_lib.sh's, which tests/t_gpu_multirank.sh (and t_gpu_tp, t_gpu_pp)
# run against the emulation; here the programs are the nvcc builds, the launcher mr_share_gpu (mpirun, each rank its
# own NCCL_HOSTID; scripts/launch.sh --share-gpu without mpirun), the reference the same build's one-rank run on
# the same GPU (the tests' reference is train_gpt_cpu). Tolerances (tests/t_gpu_multirank.sh's header derives them):
#   fp32: every step's loss within 1e-5; step 1's gradient norm within sqrt(256) 2^-24 relative (256 tokens per step,
#   each gradient element a sum over them in another order at 2 to 8 ranks); step 3's the same, against the one-rank
#   build continuing the layout's own step-2 checkpoint (later steps drift with the trajectory, which no bound
#   follows); the final weights within half an AdamW step per tensor.
#   bf16 dp2 zero3 against the bf16 one-rank run: the pair tolerances (step-1 loss 4 2^-24, gradient norm 2 x 4 / 256,
#   relative; 4-step update 4 times that), and step 3 from the layout's own step 2 within the step-1 ones.
#   bf16 dp2 zero3 run twice: bitwise equal (the same kernels, the same NCCL algorithm on the same ranks: nothing in the
#   step depends on timing), losses and norms to the printed digits, final weights and moments byte for byte.
#   A stall (LLMC_TEST_STALL=1:3: world rank 1 sleeps for ever before step 3's first collective, checkpoints after
#   every step): the job ends with a non-zero status, after step 2 and before step 3, within the uninterrupted run's
#   time + --comm-timeout (MR_STALL_CT) + MR_STALL_SLACK (the abort, mpirun stopping the stalled rank: it ignores the
#   SIGTERM its handler turns into "stop after the step", so mpirun's SIGKILL ends it), with a message naming the rank
#   and the operation. Then --resume auto from the stalled run's checkpoints (step 2's is the last complete one)
#   finishes steps 3-4, bitwise equal to the uninterrupted dp2 zero3 run (a checkpoint holds the weights, moments, RNG
#   and data position: resume is exact).
# A stall rather than kill -9: a killed rank makes mpirun end the job at once, which shows mpirun, not --comm-timeout;
# the stall leaves the peers waiting as a hung GPU or a stuck host would.
# What the emulation (tests/t_gpu_sprint.sh) shows and cannot: it runs the same commands, launcher and comparisons, so
# the plumbing, the layouts' logic and the tolerances' arithmetic on fp32 hold; its NCCL completes a collective inside
# the call and waits under its own EMU_NCCL_TIMEOUT (set to MR_STALL_CT for the stall run), so the message there is the
# emulation's ("nccl emulation: deadlock: rank R ... in OPERATION"), not --comm-timeout's; and it does not check that
# the ranks' NCCL_HOSTID differ (real NCCL does: "Duplicate GPU detected"), only that one is set.
MR_STALL_CT=10
MR_STALL_SLACK=20
source scripts/multirank_lib.sh
mr_ref() { echo fp32.one_rank; }
mr_limit() { local l c=150; [ $tiny = 1 ] && c=400; l=$(left); [ "$l" -gt $c ] && l=$c; echo "$l"; }  # 150 s a run on a GPU
mr_launch() { mr_share_gpu "$1"; }
chk() {  # chk CMD...: a check of scripts/multirank_lib.sh (or our own), its [PASS]/[FAIL] line also in $d/checks.txt
    "$@" > "$d/.line" 2>&1
    cat "$d/.line"; cat "$d/.line" >> "$d/checks.txt"
}
say() { echo "$1" >> "$d/checks.txt"; echo "$1"; }
multirank_checks() {  # multirank_checks DIR: every run in DIR; the lines in DIR/checks.txt
    d=$1
    rm -rf "$d" && mkdir -p "$d" && : > "$d/checks.txt"
    MR_FP32=$(pp train_gpt_fp32); MR_REF_PROG=$MR_FP32; MR_CONVERT=$(pp build/ckpt_convert)
    MODEL=(-c gpt3_tiny --vocab 301 --layers 4 --heads 2 --kv-heads 2)
    local bf16 dp2took t0
    bf16=$(pp train_gpt)
    mr_share_gpu 2
    echo "launcher: $MR_LAUNCHER: ${LAUNCH[*]} PROGRAM ..."
    echo "model: ${MODEL[*]} -b 1 -t $MR_T, 4 micro-batches per step, $STEPS steps; run logs and commands in $d"
    # --tiny (the emulation): the fp32 runs at -t 32, a third of the time at 64 there (the tolerances follow N = 4 x 32);
    # the bf16 kernels need a multiple of 64
    [ $tiny = 1 ] && MR_T=32
    section "fp32: one rank, then each layout (expected on an H100: 3-5 s at one rank, 10-25 s per layout)"
    run fp32.one_rank "$MR_FP32" 1 4
    if [ $rc -ne 0 ]; then say "[FAIL] fp32 one rank: exit $rc: $(why fp32.one_rank)"
    else say "[PASS] fp32 one rank ($took s): the reference of the layouts"; fi
    chk fp32 dp2_zero3 "dp2 zero3" 2 4 --dp 2 --zero 3
    dp2took=$took
    chk fp32 tp2_sp "tp2 sp" 2 4 --tp 2 --sp 1
    chk fp32 pp2 "pp2" 2 4 --pp 2
    chk fp32 pp2_vpp2 "pp2 vpp2" 2 4 --pp 2 --vpp 2
    chk fp32 dp4_zero2 "dp4 zero2" 4 4 --dp 4 --zero 2
    chk fp32 tp2_pp2_dp2_zero1_sp "tp2 pp2 dp2 zero1 sp (8 ranks)" 8 4 --tp 2 --pp 2 --dp 2 --zero 1 --sp 1
    MR_T=64
    section "bf16: one rank, dp2 zero3 against it, dp2 zero3 again (bitwise)"
    # the initial weights, for the 4-step update per tensor (train_gpt --export-init, host only)
    "$bf16" "${MODEL[@]}" --export-init "$d/init.safetensors" > "$d/init.log" 2>&1 || say "[FAIL] train_gpt --export-init: $(tail -n 1 "$d/init.log")"
    run bf16.one_rank "$bf16" 1 4
    if [ $rc -ne 0 ]; then say "[FAIL] bf16 one rank: exit $rc: $(why bf16.one_rank)"
    else say "[PASS] bf16 one rank ($took s): the reference of bf16 dp2 zero3"; fi
    run bf16.dp2_zero3 "$bf16" 2 4 --dp 2 --zero 3
    if [ $rc -ne 0 ]; then say "[FAIL] bf16 dp2 zero3: exit $rc after $took s: $(why bf16.dp2_zero3)"
    else
        fail=""; guards bf16.dp2_zero3 2 4 bf16.one_rank --zero 3
        if [ -z "$fail" ]; then say "[PASS] bf16 dp2 zero3 ($took s) ran as its layout: $mem"
        else say "[FAIL] bf16 dp2 zero3 ran as its layout:$fail"; fi
        chk half_pair bf16.dp2_zero3 bf16.one_rank "$bf16"
        run bf16.dp2_zero3_again "$bf16" 2 4 --dp 2 --zero 3
        if [ $rc -ne 0 ]; then say "[FAIL] bf16 dp2 zero3, second run: exit $rc: $(why bf16.dp2_zero3_again)"
        else chk same_bits bf16.dp2_zero3_again bf16.dp2_zero3 "bf16 dp2 zero3 run twice"; fi
    fi
    [ $tiny = 1 ] && MR_T=32
    section "a rank stalled at step 3 (LLMC_TEST_STALL=1:3) under --comm-timeout $MR_STALL_CT, then --resume auto"
    t0=$SECONDS
    CKPT_EVERY=1 LLMC_TEST_STALL=1:3 EMU_NCCL_TIMEOUT=$MR_STALL_CT run fp32.stall "$MR_FP32" 2 4 --dp 2 --zero 3 \
        --comm-timeout $MR_STALL_CT
    local end=$((dp2took + MR_STALL_CT + MR_STALL_SLACK)) msg
    msg=$(grep -m 1 -E "did not complete within $MR_STALL_CT s \(--comm-timeout\)|waited $MR_STALL_CT s \(EMU_NCCL_TIMEOUT\)" "$d/fp32.stall.log")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ $rc -ne 125 ] && [ "$took" -le "$end" ] && [ -n "$msg" ] &&
       grep -qE '^step +2/' "$d/fp32.stall.log" && ! grep -qE '^step +3/' "$d/fp32.stall.log"; then
        say "[PASS] rank 1 stalled at step 3: every rank ended in $took s (exit $rc; limit: the uninterrupted run's $dp2took s + $MR_STALL_CT + $MR_STALL_SLACK): $msg"
    else
        say "[FAIL] rank 1 stalled at step 3: exit $rc after $took s (want non-zero, within $end s, after step 2, a message naming the rank and operation): $(why fp32.stall)"
    fi
    mkdir -p "$d/fp32.stall_resumed"
    cp -r "$d"/fp32.stall/ckpt_* "$d/fp32.stall_resumed/" 2>/dev/null
    run fp32.stall_resumed "$MR_FP32" 2 4 --dp 2 --zero 3 --resume auto
    if [ $rc -ne 0 ]; then say "[FAIL] --resume auto after the stall: exit $rc: $(why fp32.stall_resumed)"
    elif ! grep -q "resumed from .*ckpt_00000002 at step 2" "$d/fp32.stall_resumed.log"; then
        say "[FAIL] --resume auto after the stall: no 'resumed from ...ckpt_00000002 at step 2' line"
    else chk same_bits fp32.stall_resumed fp32.dp2_zero3 "--resume auto after the stall ($took s) against the uninterrupted dp2 zero3 run, steps 3-4" 3; fi
    local n_pass n_fail
    n_pass=$(grep -c '^\[PASS\]' "$d/checks.txt"); n_fail=$(grep -c '^\[FAIL\]' "$d/checks.txt")
    while IFS= read -r l; do failed+=("multirank: ${l#\[FAIL\] }"); done < <(grep '^\[FAIL\]' "$d/checks.txt" | cut -c1-300)
    {
        echo "## multirank: $n_pass passed, $n_fail failed"
        echo
        echo "launcher: $MR_LAUNCHER; model: ${MODEL[*]}, -b 1 -t 64$([ $tiny = 1 ] && echo ' (fp32 at -t 32: --tiny)'), 4 micro-batches, $STEPS steps; tolerances: scripts/gpu_check.sh's multirank comment"
        echo
        sed 's/^/- /' "$d/checks.txt"
    } > "$d/summary.md"
}
stage_multirank() {
    section "programs"
    programs train_gpt train_gpt_fp32 build/ckpt_convert || { failed+=("programs"); return; }
    multirank_checks "$work/multirank"
    cat "$work/multirank/summary.md" > "$out/multirank.md"
}

# ---- sprint1, sprint2: the short session (docs/gpu.md): what only a GPU answers, most valuable first
# The seconds after each item are the expected time on an H100 (estimates; the probe/correct/bench stages measured
# twice as fast as planned); every run is cut to its limit and to what is left of the stage's budget.
tcounts() { if [ "$2" = skip ]; then echo "not run (--tiny: test_gpt on gpt3_tiny_hd64 only)"; else counts "$@"; fi; }
fp8_probe() {  # fp8_probe NAME LIBDIR ARGS...: build/fp8_gemm under cuBLASLt's log (LIBDIR first on the library path)
    local name=$1 lib=$2 rc lt=$work/cublaslt_fp8_gemm_$1.log log=$work/fp8_gemm_$1.log lp; shift 2
    lp=${lib:+$lib:}$LD_LIBRARY_PATH
    local from
    from=$(LD_LIBRARY_PATH=$lp ldd "$(pp build/fp8_gemm)" 2>/dev/null | awk '/libcublasLt/ { print $3; exit }')
    section "fp8_gemm $* ($name: cuBLASLt from ${from:-no shared libcublasLt (ldd)})"
    LD_LIBRARY_PATH=$lp CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE=$lt limited 60 "$(pp build/fp8_gemm)" "$@" > "$log" 2>&1
    rc=$?
    cat "$log"
    [ -f "$lt" ] && grep -iE 'error|not supported|hint|warn' "$lt" | head -n 20
    case $rc in 0) ;; 1) ;; *) failed+=("fp8_gemm $name: exit $rc") ;; esac  # exit 1: cuBLASLt refused (a finding)
    fp8_rows+=("| fp8_gemm $* ($name) | exit $rc$([ $rc = 1 ] && echo ': a GEMM refused') | $(grep -c ' | heuristic ' "$log") variants; $(grep -ciE 'ran|ok' "$log") lines ran/ok | $([ -f "$lt" ] && echo "$(wc -l < "$lt") lines" || echo "none written") |")
}
stage_sprint1() {
    section "environment (5 s)"
    env_table | tee "$work/environment.txt"
    section "programs (5-10 s from the kit)"
    # shellcheck disable=SC2046
    programs train_gpt test_gpt train_gpt_fp32 test_gpt_fp32 $([ $tiny = 0 ] && echo test_gpt_fp16) build/fp8_gemm \
        build/ckpt_convert || failed+=("programs")
    # -- fp8: why cuBLASLt refuses, ours beside PyTorch's call (30-40 s)
    local fp8args=() cublas lt_ours=$work/cublaslt_fp8_gemm_default.log lt_torch=$work/cublaslt_torch.log rc note
    [ $tiny = 1 ] && fp8args=(--m 64 --n 32 --k 64)
    fp8_rows=()
    fp8_probe default "" "${fp8args[@]}"
    cublas=$("$PY" -c 'import nvidia.cublas as m; print(list(m.__path__)[0])' 2>/dev/null)
    if [ -n "$cublas" ] && [ -d "$cublas/lib" ]; then fp8_probe torch_cublaslt "$cublas/lib" "${fp8args[@]}"
    else note="not run: $PY has no nvidia.cublas wheel (PyTorch's cuBLASLt)"; echo "fp8_gemm with PyTorch's cuBLASLt first: $note"
        fp8_rows+=("| fp8_gemm (torch_cublaslt) | $note | - | - |"); fi
    fp8_probe trainer "" "${fp8args[@]}" --trainer
    section "PyTorch's control: dev/probe/fp8_torch.py under cuBLASLt's log (20 s)"
    CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE=$lt_torch limited 90 "$PY" dev/probe/fp8_torch.py > "$work/fp8_torch.log" 2>&1
    rc=$?
    cat "$work/fp8_torch.log"
    if [ $rc = 0 ]; then note="ran: $(grep -c '^case ' "$work/fp8_torch.log") torch._scaled_mm cases, $(grep -c '^case .*: ok' "$work/fp8_torch.log") ok"
    elif [ $rc = 2 ] && grep -q "no CUDA device" "$work/fp8_torch.log"; then note="not run: torch has no CUDA device"
    else note="exit $rc: $(tail -n 1 "$work/fp8_torch.log")"; failed+=("fp8_torch.py: exit $rc"); fi
    echo "fp8_torch.py: $note"
    fp8_rows+=("| dev/probe/fp8_torch.py | $note | - | $([ -f "$lt_torch" ] && echo "$(wc -l < "$lt_torch") lines" || echo "none written") |")
    section "dev/probe/lt_trace.py: ours against PyTorch's cuBLASLt trace (2 s)"
    if [ ! -s "$lt_ours" ] || [ ! -s "$lt_torch" ]; then
        note="not run: a trace is missing ($([ -s "$lt_ours" ] || echo "fp8_gemm's"; [ -s "$lt_torch" ] || echo "torch's") not written)"
    else
        limited 30 "$PY" dev/probe/lt_trace.py "$lt_ours" "$lt_torch" > "$work/lt_trace.log" 2>&1; rc=$?
        head -n 80 "$work/lt_trace.log"
        if [ $rc = 0 ]; then note="ran: $(wc -l < "$work/lt_trace.log") lines of differences (sprint1_files.tar.gz: lt_trace.log)"
        else note="exit $rc: $(tail -n 1 "$work/lt_trace.log")"; failed+=("lt_trace.py: exit $rc"); fi
    fi
    echo "lt_trace.py: $note"
    fp8_rows+=("| dev/probe/lt_trace.py | $note | - | - |")
    # -- test_gpt on the kit's two states (4 runs of 5-10 s)
    section "test_gpt, test_gpt_fp32 and test_gpt_fp16 on the kit's states (45-60 s)"
    source tests/gpu_cases.sh
    local sd=$work/states name st r1 r2 r3 test_rows=()
    mkdir -p "$sd"
    for name in gpt3_tiny_hd64 llama_tiny_gqa_hd64; do
        st=$sd/$name.safetensors
        if [ $kit_ok = 1 ] && [ -f "$kit/states/$name.safetensors" ]; then cp "$kit/states/$name.safetensors" "$st" && echo "  $name: from the kit"
        else
            echo "  $name: not in a kit of these sources: made here (train_gpt_cpu --export-init, train_gpt.py --ref)"
            limited 120 bash -c 'source tests/gpu_cases.sh && make_gpu_states "$@"' _ "$sd" "$PY" "$name" > "$sd/$name.make.log" 2>&1
            cat "$sd/$name.make.log"
        fi
        if [ ! -f "$st" ]; then failed+=("state $name"); test_rows+=("| $name | no state | no state | no state |"); continue; fi
        # --tiny (the emulation, 1-3 minutes a run): test_gpt on the GPT state only (t_gpu_emulated runs the rest)
        r1=skip; r2=skip; r3=skip
        if [ $tiny = 0 ] || [ $name = gpt3_tiny_hd64 ]; then
            limited $([ $tiny = 1 ] && echo 400 || echo 90) "$(pp test_gpt)" ref "$st" > "$sd/$name.bf16.log" 2>&1; r1=$?
            grep -E '^\[(PASS|FAIL)\]|error' "$sd/$name.bf16.log"
        fi
        if [ $tiny = 0 ]; then
            limited 90 "$(pp test_gpt_fp32)" ref "$st" > "$sd/$name.fp32.log" 2>&1; r2=$?
            grep -E '^\[(PASS|FAIL)\]|error' "$sd/$name.fp32.log"
            limited 90 "$(pp test_gpt_fp16)" ref "$st" > "$sd/$name.fp16.log" 2>&1; r3=$?
            grep -E '^\[(PASS|FAIL)\]|error' "$sd/$name.fp16.log"
        fi
        case $r1 in 0|skip) ;; *) failed+=("test_gpt $name") ;; esac
        case $r2 in 0|skip) ;; *) failed+=("test_gpt_fp32 $name") ;; esac
        case $r3 in 0|skip) ;; *) failed+=("test_gpt_fp16 $name") ;; esac
        test_rows+=("| $name | $(tcounts "$sd/$name.bf16.log" $r1) | $(tcounts "$sd/$name.fp32.log" $r2) | $(tcounts "$sd/$name.fp16.log" $r3) |")
        rm -f "$st"
    done
    # -- every layout on the one GPU (about 3.5 minutes)
    section "multirank (about 210 s: 10 launches of 2-8 ranks, 15-25 s each, and 9 one-rank runs)"
    multirank_checks "$work/multirank"
    # -- GELU in cuBLASLt's epilogue (--gelu-fusion, default off until timed): gpt3_1.3b without, then with (2 x 20 s);
    #    test_gpt above checked the fused path's values on this GPU's cuBLASLt
    local gelu_rows=() mode preset flags
    data_files
    [ $tiny = 1 ] && steps=3
    IFS='|' read -r preset flags <<< "${sprint_bench[0]}"
    for mode in off on; do
        section "train_gpt $preset $flags --gelu-fusion $mode: $steps steps (20 s)"
        bench_row "$preset" "$flags" "$work/$preset.gelu_$mode.log" 120 --gelu-fusion "$mode"
        gelu_rows+=("${row/| $flags |/| $flags --gelu-fusion $mode |}")
        grep -m 2 "no algorithm with the" "$work/$preset.gelu_$mode.log"
    done
    # -- each GEMM's algorithm timed at its first call (--gemm-algos tune, default heuristic until measured): the row
    #    beside --gelu-fusion off's, the table of algorithms in sprint1.log (25 s)
    section "train_gpt $preset $flags --gemm-algos tune: $steps steps (25 s)"
    bench_row "$preset" "$flags" "$work/$preset.gemm_tune.log" 150 --gemm-algos tune
    gelu_rows+=("${row/| $flags |/| $flags --gemm-algos tune |}")
    {
        echo "## environment"; echo; echo '```'; cat "$work/environment.txt"; echo '```'; echo
        echo "## fp8: cuBLASLt's traces (CUBLASLT_LOG_LEVEL=5) in sprint1_files.tar.gz"; echo
        echo "| run | result | table | cuBLASLt log |"; echo "| --- | --- | --- | --- |"
        printf '%s\n' "${fp8_rows[@]}"; echo
        echo "## test_gpt on the kit's states"; echo
        echo "| reference state | test_gpt (bf16) | test_gpt_fp32 | test_gpt_fp16 |"; echo "| --- | --- | --- | --- |"
        printf '%s\n' "${test_rows[@]}"; echo
        cat "$work/multirank/summary.md"; echo
        echo "## GELU in the epilogue (--gelu-fusion), GEMM algorithms timed (--gemm-algos tune: the table in sprint1.log)"; echo
        echo "| preset | train_gpt flags | tokens/s | MFU | peak GiB | estimate GiB |"; echo "| --- | --- | --- | --- | --- | --- |"
        printf '%s\n' "${gelu_rows[@]}"
    } > "$out/sprint1.md"
}

# sprint2's benchmarks: name | train_gpt flags; the step profile's flags (one variable: --profile N prints the
# per-kernel-class table after N profiled steps; --ceilings OUT/ceilings.json is added when that file exists)
sprint_bench=("gpt3_1.3b|-b 8 -t 2048" "llama3.2_1b|-b 4 -t 2048")
SPRINT_PROFILE_FLAGS="--profile 10"
stage_sprint2() {
    section "programs (5 s from the kit)"
    programs train_gpt || { failed+=("programs"); return; }
    data_files
    [ $tiny = 1 ] && { steps=3; SPRINT_PROFILE_FLAGS="--profile 2"; }
    local bench preset flags prof rows=() fp8_rows=() notes=() rc b16 ratio row tok brc
    declare -A b16s
    # -- speed and the step profile (gpt3_1.3b 15 s, llama3.2_1b 15 s)
    for bench in "${sprint_bench[@]}"; do
        IFS='|' read -r preset flags <<< "$bench"
        # shellcheck disable=SC2206
        prof=($SPRINT_PROFILE_FLAGS)
        [ -f "$out/ceilings.json" ] && prof+=(--ceilings "$out/ceilings.json")
        section "train_gpt $preset $flags ${prof[*]}: $steps steps (15 s)"
        bench_row "$preset" "$flags" "$work/$preset.bf16.log" 120 "${prof[@]}"
        rows+=("$row"); b16s[$preset]=$tok
    done
    # -- fp16 (make PRECISION=FP16; the dynamic loss scale from 1024, as the FlagPerf GPT-3 rows): the first benchmark (15 s)
    IFS='|' read -r preset flags <<< "${sprint_bench[0]}"
    section "train_gpt_fp16 $preset $flags --loss-scale dynamic --initial-loss-scale 1024: $steps steps (15 s)"
    if programs train_gpt_fp16; then
        bench_prog=train_gpt_fp16 bench_row "$preset" "$flags" "$work/$preset.fp16.log" 120 --loss-scale dynamic \
            --initial-loss-scale 1024
        rows+=("${row/| $flags |/| $flags, fp16 build, loss scale from 1024 |}")
        notes+=("fp16 $preset: $(grep -c '^step .*update skipped' "$work/$preset.fp16.log") of $steps steps skipped; last step: $(grep '^step ' "$work/$preset.fp16.log" | tail -n 1 | grep -o 'loss [0-9.na]* |.*loss scale [0-9.]*' | cut -c1-200)")
    else notes+=("fp16: not run: no train_gpt_fp16 (kit or make)"); failed+=("programs"); fi
    # -- fp8: only where the trainer's start-up check of its fp8 GEMMs passes (10 s), then 2 x 15 s and the loss rule
    section "fp8 at start-up: train_gpt gpt3_125m --fp8 delayed -x 1 (10 s)"
    # shellcheck disable=SC2046
    limited 60 "$(pp train_gpt)" $(model_flags gpt3_125m) $([ $tiny = 1 ] && echo "-b 1 -t 64" || echo "-b 8 -t 1024") --fp8 delayed \
        -x 1 -v 0 -g 0 -o "" -i "$(data_for gpt3_125m)" > "$work/fp8_startup.log" 2>&1
    rc=$?
    cat "$work/fp8_startup.log"
    if [ $rc = 0 ]; then
        for bench in "${sprint_bench[@]}"; do
            IFS='|' read -r preset flags <<< "$bench"
            section "train_gpt $preset $flags --fp8 delayed: $steps steps (15 s)"
            bench_row "$preset" "$flags" "$work/$preset.fp8.log" 120 --fp8 delayed
            b16=${b16s[$preset]:-}
            ratio=$(awk -v a="${tok:-0}" -v b="${b16:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }')
            fp8_rows+=("| $preset | $flags | ${b16:--} | ${tok:--} | $ratio |")
        done
        local n=200 from=21
        [ $tiny = 1 ] && { n=4; from=2; }
        fp8_loss_rule "$work" $n $from 90
        notes+=("fp8 delayed against bf16 on gpt3_125m, $n steps: mean relative loss difference from step $from $rel (FlagPerf's rule: < 0.02)")
    else
        notes+=("fp8 rows: not run: train_gpt --fp8 delayed stopped at start-up (exit $rc): $({ grep -m 1 '^error:' "$work/fp8_startup.log" || tail -n 1 "$work/fp8_startup.log"; } | cut -c1-300)")
        [ $rc = 1 ] || failed+=("fp8 start-up: exit $rc")
    fi
    # -- cuDNN's attention (--attention cudnn): its values and ours against the reference on this GPU (10 s), then the
    #    first benchmark with it, beside ours (25 s: cuDNN compiles its kernels at start-up)
    section "cuDNN attention: test_attention (ours and cuDNN's against the double-precision reference, 10 s)"
    if programs build/test_attention build/train_gpt_cudnn; then
        # cuDNN's own log of warnings and errors (why a graph is refused), into the stage's files
        CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$work/cudnn_debug.log" limited 60 "$(pp build/test_attention)" \
            > "$work/test_attention.log" 2>&1
        rc=$?
        cat "$work/test_attention.log"
        notes+=("test_attention on this GPU (exit $rc): $(grep -c '^\[PASS\]' "$work/test_attention.log") passed, $(grep -c '^\[FAIL\]' "$work/test_attention.log") failed$(grep -m 1 -E '^\[FAIL\]|^error' "$work/test_attention.log" | sed 's/^/; first: /' | cut -c1-300)")
        [ $rc = 0 ] || failed+=("test_attention: exit $rc")
        IFS='|' read -r preset flags <<< "${sprint_bench[0]}"
        section "train_gpt_cudnn $preset $flags --attention cudnn ${prof[*]}: $steps steps (25 s)"
        bench_prog=build/train_gpt_cudnn bench_row "$preset" "$flags" "$work/$preset.cudnn.log" 150 --attention cudnn "${prof[@]}"
        rows+=("${row/| $flags |/| $flags --attention cudnn |}")
        grep -m 1 '^attention: cuDNN' "$work/$preset.cudnn.log" > /dev/null || notes+=("--attention cudnn: $(grep -m 1 -E '^error' "$work/$preset.cudnn.log" | cut -c1-300)")
    else
        notes+=("cuDNN attention: not run: no build/test_attention and build/train_gpt_cudnn (cuDNN not found where the kit was built?)")
        echo "${notes[-1]}"
    fi
    # -- our own Hopper kernels (--attention wgmma: llmc/attention.cuh's versions 4 and 7, checked by test_attention above),
    #    the first benchmark with the profile, beside ours and cuDNN's (20 s)
    IFS='|' read -r preset flags <<< "${sprint_bench[0]}"
    section "train_gpt $preset $flags --attention wgmma ${prof[*]}: $steps steps (20 s)"
    bench_row "$preset" "$flags" "$work/$preset.wgmma.log" 120 --attention wgmma "${prof[@]}"
    rows+=("${row/| $flags |/| $flags --attention wgmma |}")
    notes+=("--attention wgmma: $({ grep -m 1 '^attention: --attention wgmma' "$work/$preset.wgmma.log" || grep -m 1 -E '^error' "$work/$preset.wgmma.log" || echo 'no line saying which versions ran'; } | cut -c1-300)")
    # -- gpt3_2.7b under --recompute auto, the default (the cheapest mode the memory estimate fits: act within an 80 GB
    #    GPU's 79 GiB, where none does not, instead of the full recompute of bench-large's row; --gpu-mem 79 makes an
    #    H200 choose as an H100 would), with the profile (40 s)
    section "train_gpt gpt3_2.7b -b 8 -t 2048 --gpu-mem 79 (--recompute auto) ${prof[*]}: $steps steps (40 s)"
    bench_row gpt3_2.7b "-b 8 -t 2048 --gpu-mem 79" "$work/gpt3_2.7b.bf16.log" 150 "${prof[@]}"
    rows+=("$row")
    notes+=("gpt3_2.7b: $(grep -m 1 '^--recompute auto' "$work/gpt3_2.7b.bf16.log" || echo 'no --recompute auto line (none: everything kept)')")
    # -- PyTorch's train_gpt.py --compile at gpt3_1.3b: not here (90 s); an H200 measured it (the torch-small stage runs it)
    notes+=("train_gpt.py --compile: not in the sprint; on an H200 at f1abce4 ours ran at 0.92 of its tokens/s at gpt3_1.3b (bench/results/20261128-1645_NVIDIA_H200/sprint2.md; the torch-small stage runs it)")
    # -- attention beside SDPA (40 s), then with documents (2 x 5 s, limits 2 x 30 s)
    section "attention sweep beside SDPA (40 s)"
    if programs build/devcuda/attention_forward build/devcuda/attention_backward; then
        attention_sweep "$work/attention_sweep"
        [ "$sweep_sdpa" = ran ] || notes+=("SDPA in the attention sweep: $sweep_sdpa")
        section "attention with 1, 4 and 16 documents per sequence, gpt3_1.3b's shape (2 x 5 s)"
        attention_docs "$work/attention_docs"
    else
        if [ -n "$programs_dir" ]; then notes+=("attention sweep and documents: not run: $programs_dir has no build/devcuda/attention_forward and attention_backward")
        else notes+=("attention sweep and documents: not run: no attention programs"); failed+=("attention programs"); fi
        echo "${notes[-1]}"
    fi
    # -- gpt3_125m with the profile (10 s), last as the least urgent: the smallest preset has no profile yet (an H200
    #    ran it at 37.7% MFU, 18.8 ms a step at -b 8 -t 1024); launches and small kernels weigh more there than at 1.3b
    section "train_gpt gpt3_125m -b 8 -t 1024 ${prof[*]}: $steps steps (10 s)"
    bench_row gpt3_125m "-b 8 -t 1024" "$work/gpt3_125m.bf16.log" 90 "${prof[@]}"
    rows+=("$row")
    {
        echo "## bf16 with the step profile (the profile tables are in sprint2.log)"; echo
        echo "| preset | train_gpt flags | tokens/s | MFU | peak GiB | estimate GiB |"; echo "| --- | --- | --- | --- | --- | --- |"
        printf '%s\n' "${rows[@]}"; echo
        if [ ${#fp8_rows[@]} -gt 0 ]; then
            echo "## fp8 delayed beside bf16"; echo
            echo "| preset | train_gpt flags | bf16 tokens/s | fp8 tokens/s | fp8 / bf16 |"; echo "| --- | --- | --- | --- | --- |"
            printf '%s\n' "${fp8_rows[@]}"; echo
        fi
        if [ -f "$work/attention_sweep/table.md" ]; then echo "## attention sweep ($sweep_shapes)"; echo; cat "$work/attention_sweep/table.md"; echo; fi
        if [ -f "$work/attention_docs/table.md" ]; then
            echo "## attention with documents ($docs_shape, --docs 1,4,16; predicted: notes_attention.md's tile counts)"; echo
            cat "$work/attention_docs/table.md"; echo
        fi
        echo "## notes"; echo
        printf -- '- %s\n' "${notes[@]}"
        echo; echo "$steps steps per run on $(data_for gpt3_1.3b)$([ $tiny = 1 ] && echo ', --tiny: tiny models of each family, not the presets')"
    } > "$out/sprint2.md"
}

# ---- one stage: header, body, summary; everything to the terminal and OUT/<stage>.log
header() {  # header STAGE: the lines that head every file a stage writes
    echo "# train_gpt GPU check: $1"
    echo "date:    $stage_date"
    echo "host:    $(hostname 2>/dev/null || echo unknown)"
    echo "device:  $gpu_name (${gpu_mib:-?} MiB)"
    echo "commit:  $commit"
    echo "sources: $digest"
    echo "kit:     $kit: $kit_note"
    echo "command: $cmdline"
}
run_body() {
    local st=$1 f
    stage_date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
    header "$st"
    echo "output:  $out/$st.log"
    STAGE_BUDGET_S=${budget_flag:-$(stage_budget "$st")}
    echo "budget:  $STAGE_BUDGET_S s$([ -n "$programs_dir" ] && echo "; programs from $programs_dir (--programs)")$([ $tiny = 1 ] && echo "; --tiny")"
    t_stage=$SECONDS
    failed=()
    work=build/gpu_check/$st
    rm -rf "$work" && mkdir -p "$work"
    case $st in
        probe) stage_probe ;; correct) stage_correct ;; kernels) stage_kernels ;;
        bench-small) stage_bench small ;; bench-large) stage_bench large ;;
        torch-small) stage_torch small ;; torch-large) stage_torch large ;; fp8) stage_fp8 ;;
        multirank) stage_multirank ;; sprint1) stage_sprint1 ;; sprint2) stage_sprint2 ;;
    esac
    case $st in
        multirank|sprint1|sprint2)  # every run's log and command, cuBLASLt's traces: one file (no checkpoints, no states)
            tar -czf "$out/${st}_files.tar.gz" --exclude='*.safetensors' --exclude='ckpt_*' --exclude='*.whole' \
                -C build/gpu_check "$st" && echo "run logs: $out/${st}_files.tar.gz ($(du -k "$out/${st}_files.tar.gz" | cut -f1) KiB)" ;;
    esac
    f=$out/$st.md
    if [ -f "$f" ]; then { header "$st (summary of $st.log)"; echo; cat "$f"; } > "$f.tmp" && mv "$f.tmp" "$f"; fi
    section "end of $st: $((SECONDS - t_stage)) s"
    if [ ${#failed[@]} -eq 0 ]; then echo "all checks of $st passed"; return 0; fi
    echo "failed (${#failed[@]}):"
    printf '  %s\n' "${failed[@]}"
    return 1
}
run_stage() {  # the body in a pipeline with tee: the script goes on only once tee has written everything
    run_body "$1" 2>&1 | tee "$out/$1.log"
    return "${PIPESTATUS[0]}"
}

status=0
if [ "$stage" = all ]; then
    for s in "${STAGES[@]}"; do run_stage "$s" || status=1; done
elif [ "$stage" = sprint ]; then
    for s in "${SPRINT_STAGES[@]}"; do run_stage "$s" || status=1; done
else
    run_stage "$stage" || status=1
fi
exit $status
