#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU checks in stages, each a few minutes on one H100 or H200 (docs/gpu.md gives
# the plan, the order and the expected minutes). Each stage writes its raw output, headed by the date, the
# device, the commit and the command, to OUT/<stage>.log, and a summary table to OUT/<stage>.md where it has
# one; the file is complete when the script exits. A stage uses the GPU kit (make gpu-kit) when the kit's
# sources digest equals this checkout's and its programs resolve their libraries here (ldd -r), and builds
# with make only what is missing. Each stage keeps to a wall-clock budget (--budget, default 420 s: each run
# is cut to what is left). Exit status: 0 when every check of the stage passed, 1 otherwise.
#   usage: scripts/gpu_check.sh [STAGE|all] [--out DIR] [--kit DIR] [--budget S] [--steps N] [--quick] [--bench FILE]
#          scripts/gpu_check.sh STAGE --help
#   stages (all runs them in this order; docs/gpu.md groups them into commands of a GPU machine):
#     probe        environment (device, driver, nvcc, NCCL location and version, MPI), ceilings (copy
#                  bandwidth, cuBLASLt bf16/fp8 GEMM), nccl_ranks with 2 and 4 ranks on the one GPU
#     correct      test_gpt and test_gpt_fp32 on every reference state of tests/gpu_cases.sh (the kit's, the
#                  others made here on all cores, overlapped with the tests), compute-sanitizer memcheck and
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
#     all          every stage above in order (the default)
#   --out DIR     where the raw output goes (default bench/results/<date>_<gpu>/)
#   --kit DIR     the GPU kit (default gpukit)
#   --budget S    the stage's wall-clock budget in seconds (default 420; at least 60)
#   --steps N     steps of each benchmark run (default 20; the median step after warm-up is reported)
#   --quick       probe: ceilings --quick and 16 MiB NCCL buffers
#   --bench FILE  torch: a bench-*.md table with train_gpt's tokens/s for the ratio (default OUT/bench-*.md)
set -u
cd "$(dirname "$0")/.."
source scripts/gpu_lib.sh

STAGES=(probe correct kernels bench-small bench-large torch-small torch-large fp8)
STAGE_BUDGET_S=420
cmdline="scripts/gpu_check.sh${*:+ $*}"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
stage_help() {  # the usage line, the stage's own lines of the header and the flags
    echo "usage: scripts/gpu_check.sh $1 [--out DIR] [--kit DIR] [--budget S] [--steps N] [--quick] [--bench FILE]"
    awk -v s="$1" 'NR > 1 && !/^#/ { exit }
        /^#     [a-z]/ { on = ($2 == s) } on { sub(/^#   /, ""); print }' "$0"
    usage | sed -n '/^  --out/,$p'
}
die() { echo "error: $*" >&2; exit 1; }

stage=""; out=""; kit=gpukit; steps=20; quick=0; bench_tables=(); help=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift ;;
        --kit) [ $# -ge 2 ] || die "--kit needs a directory"; kit=$2; shift ;;
        --steps) [ $# -ge 2 ] || die "--steps needs a number"; steps=$2; shift ;;
        --budget) [ $# -ge 2 ] || die "--budget needs seconds"; STAGE_BUDGET_S=$2; shift ;;
        --bench) [ $# -ge 2 ] || die "--bench needs a file"; bench_tables+=("$2"); shift ;;
        --quick) quick=1 ;;
        -h|--help) help=1 ;;
        -*) die "unknown flag '$1' (see scripts/gpu_check.sh --help)" ;;
        *) [ -z "$stage" ] || die "one stage at a time: got '$stage' and '$1'"; stage=$1 ;;
    esac
    shift
done
[ -n "$stage" ] || stage=all
case " ${STAGES[*]} all " in *" $stage "*) ;; *) die "unknown stage '$stage' (stages: ${STAGES[*]} all)" ;; esac
if [ $help = 1 ]; then
    if [ "$stage" = all ]; then usage; else stage_help "$stage"; fi
    exit 0
fi
case "$steps" in ''|*[!0-9]*|0) die "--steps expects a positive integer, got '$steps'" ;; esac
case "$STAGE_BUDGET_S" in ''|*[!0-9]*) die "--budget expects seconds (at least 60), got '$STAGE_BUDGET_S'" ;; esac
[ "$STAGE_BUDGET_S" -ge 60 ] || die "--budget expects seconds (at least 60), got '$STAGE_BUDGET_S'"
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
for d in "$CUDA_HOME/lib64" "${nccl_wheel:+$nccl_wheel/lib}"; do
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
# one is still missing or does not resolve its libraries
programs() {
    local want=" $* " kpath cpath tobuild=() p
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
stage_probe() {
    row() { printf '%-26s %s\n' "$1" "${2:-}"; }
    section "environment"
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
    row "torch's NCCL" "$("$PY" -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null || echo '?')"
    row "LD_LIBRARY_PATH" "${LD_LIBRARY_PATH:-}"
    row "mpirun / mpicxx" "$(command -v mpirun || echo absent) / $(command -v mpicxx || echo absent)"
    row "compute-sanitizer" "$(sanitizer || echo absent)"
    row "CPU cores" "$jobs"

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
    programs train_gpt_cpu test_gpt test_gpt_fp32 || { failed+=("programs"); return; }
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
    local tiny="" rows=() r1 r2 st
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
            failed+=("state $name"); rows+=("| $name | no state | no state |"); continue
        fi
        section "test_gpt on $name"
        limited 150 ./test_gpt ref "$st" > "$d/$name.bf16.log" 2>&1; r1=$?
        cat "$d/$name.bf16.log"
        limited 150 ./test_gpt_fp32 ref "$st" > "$d/$name.fp32.log" 2>&1; r2=$?
        cat "$d/$name.fp32.log"
        [ $r1 = 0 ] || failed+=("test_gpt $name")
        [ $r2 = 0 ] || failed+=("test_gpt_fp32 $name")
        rows+=("| $name | $(counts "$d/$name.bf16.log" $r1) | $(counts "$d/$name.fp32.log" $r2) |")
        if [ -z "$tiny" ]; then  # the sanitizers on the first state, while the larger ones are being made
            tiny=$name
            sanitize memcheck "$st"; rows+=("| compute-sanitizer memcheck, $name | $sanitize_result | |")
            sanitize racecheck "$st"; rows+=("| compute-sanitizer racecheck, $name | $sanitize_result | |")
        fi
    done
    {
        echo "| reference state | test_gpt (bf16) | test_gpt_fp32 |"
        echo "| --- | --- | --- |"
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
    # attention at head dims 64, 80, 128 and lengths 1k-8k (B*T = 16384 tokens, causal), ours and SDPA
    section "attention sweep: head dims 64, 80, 128; T 1024, 4096, 8192; causal"
    local shapes="" bt hd h sw=$logs/attention_sweep
    for hd in 64 80 128; do
        h=32; [ $hd = 128 ] && h=16
        for bt in 16x1024 4x4096 2x8192; do shapes="$shapes,${bt}x${h}x${h}x${hd}"; done
    done
    shapes=${shapes#,}
    mkdir -p "$sw"
    for p in attention_forward attention_backward; do
        # version 3 is llmc/attention.cuh, the trainer's kernels (run_all.sh times every version at one shape)
        limited 120 "build/devcuda/$p" 3 --sizes "$shapes" > "$sw/$p.log" 2>&1 || failed+=("$p sweep")
        cat "$sw/$p.log"
    done
    if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        local sh B T H KV
        for sh in ${shapes//,/ }; do
            IFS=x read -r B T H KV hd <<< "$sh"
            limited 60 "$PY" dev/cuda/attention_sdpa.py --B "$B" --T "$T" --H "$H" --KV "$KV" --hd "$hd" >> "$sw/sdpa.log" 2>&1 \
                || failed+=("attention_sdpa.py $sh")
        done
        cat "$sw/sdpa.log"
    else echo "torch SDPA skipped: $PY has no torch with CUDA"; fi
    { echo; echo "## attention sweep ($shapes)"; grep -h '^| ' "$sw/attention_forward.log" "$sw/attention_backward.log"
      sed 's/^/# /' "$sw/sdpa.log" 2>/dev/null; } >> "$out/kernels.md"
    for p in $progs attention_sdpa; do
        [ -f "$logs/$p.log" ] || continue
        section "full output of $p"
        cat "$logs/$p.log"
    done
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

stage_bench() {  # stage_bench small|large
    local -n group=bench_$1
    section "programs"
    programs train_gpt || { failed+=("programs"); return; }
    data_files
    local tmp=build/gpu_check bench preset flags est log tok fpt peak mfu estt free rows=()
    mkdir -p "$tmp"
    for bench in "${group[@]}"; do
        IFS='|' read -r preset flags <<< "$bench"
        section "train_gpt $preset $flags: $steps steps, median after warm-up, $data"
        free=$(free_gib)
        est=$(./train_gpt -c "$preset" $flags --estimate-memory "$free" 2>&1)
        echo "$est"
        estt=$(sed -n 's/.*total \([0-9.]*\) of .*/\1/p' <<< "$est")
        if ! grep -q '^fits' <<< "$est"; then
            rows+=("| $preset | $flags | no fit in $free GiB free | - | - | ${estt:--} |"); continue
        fi
        log=$tmp/$preset.train_gpt.log
        limited 240 ./train_gpt -c "$preset" $flags -x "$steps" -v 0 -g 0 -o "" -i "$data" > "$log" 2>&1 || failed+=("train_gpt $preset")
        cat "$log"
        tok=$(tokens_per_s "$log")
        fpt=$(sed -n 's/^| FLOPs per token *| \([0-9.e+]*\) (model).*/\1/p' "$log")
        peak=$(sed -n 's/^peak device memory in use: \([0-9.]*\) GiB/\1/p' "$log")
        mfu=$(awk -v t="${tok:-0}" -v f="${fpt:-0}" -v p="$(peak_tflops)" 'BEGIN {
            if (p > 0 && t > 0 && f > 0) printf "%.1f%%", 100 * t * f / p; else printf "-" }')
        rows+=("| $preset | $flags | ${tok:--} | $mfu | ${peak:--} | ${estt:--} |")
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
    # the loss: 200 steps of gpt3_125m in bf16 and in fp8 delayed, FlagPerf's rule (mean relative difference from step 21)
    for recipe in none delayed; do
        section "train_gpt gpt3_125m -b 8 -t 1024 --fp8 $recipe: 200 steps (loss agreement)"
        limited 120 ./train_gpt -c gpt3_125m -b 8 -t 1024 -x 200 -v 0 -g 0 -o "$tmp/loss_$recipe" -i "$data" \
            --fp8 $recipe > "$tmp/loss_$recipe.log" 2>&1 || failed+=("train_gpt gpt3_125m --fp8 $recipe, 200 steps")
        grep -E '^step +(1|21|100|200)/' "$tmp/loss_$recipe.log"
    done
    rel=$(python3 tests/fp8_train_checks.py flagperf "$tmp/loss_delayed/metrics.jsonl" "$tmp/loss_none/metrics.jsonl" 21 2>&1)
    echo "FlagPerf's rule, fp8 delayed against bf16, mean relative loss difference from step 21: $rel (must be < 0.02)"
    awk -v x="$rel" 'BEGIN { exit !(x < 0.02) }' || failed+=("FlagPerf's rule: $rel")
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

stage_torch() {  # stage_torch small|large
    local -n group=bench_$1
    section "programs"
    programs train_gpt || { failed+=("programs"); return; }
    "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
        || { echo "$PY has no torch with CUDA"; failed+=("torch"); return; }
    local tables=("${bench_tables[@]}") t
    [ ${#tables[@]} -gt 0 ] || for t in "$out"/bench-*.md; do [ -f "$t" ] && tables+=("$t"); done
    echo "train_gpt's tokens/s for the ratio from: ${tables[*]:-none (run bench-$1 first, or pass --bench FILE)}"
    local tmp=build/gpu_check bench preset flags B T est master need free tlog trc ttok tpeak ours ratio rows=()
    mkdir -p "$tmp"
    for bench in "${group[@]}"; do
        IFS='|' read -r preset flags <<< "$bench"
        B=$(sed -n 's/.*-b \([0-9]*\).*/\1/p' <<< "$flags")
        T=$(sed -n 's/.*-t \([0-9]*\).*/\1/p' <<< "$flags")
        section "train_gpt.py --train --compile, $preset, batch $B, seq $T, $steps steps"
        # PyTorch keeps weights, gradients and AdamW's moments in fp32: 16 bytes per parameter, 4x the
        # master copy of train_gpt's estimate
        free=$(free_gib)
        est=$(./train_gpt -c "$preset" $flags --estimate-memory 100000 2>&1)
        master=$(sed -n 's/^memory estimate (GiB):.* master \([0-9.]*\) .*/\1/p' <<< "$est")
        need=$(awk -v m="${master:-0}" 'BEGIN { printf "%.1f", 4 * m }')
        ours=$(for t in "${tables[@]}"; do awk -F'|' -v p="$preset" '$2 == " " p " " { gsub(/ /, "", $4); if ($4 ~ /^[0-9]+$/) print $4 }' "$t"; done | tail -n 1)
        if awk -v n="$need" -v f="$free" 'BEGIN { exit !(n <= 0 || n > f) }'; then
            echo "skipped: 16 bytes per parameter need $need GiB, $free GiB are free"
            rows+=("| $preset | $B | $T | skipped: needs $need GiB of $free free | - | ${ours:--} | - |"); continue
        fi
        ./train_gpt -c "$preset" $flags --print-config "$tmp/$preset.json" > /dev/null
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
        rows+=("| $preset | $B | $T | ${ttok:--} | ${tpeak:--} | ${ours:--} | $ratio |")
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
    t_stage=$SECONDS
    failed=()
    case $st in
        probe) stage_probe ;; correct) stage_correct ;; kernels) stage_kernels ;;
        bench-small) stage_bench small ;; bench-large) stage_bench large ;;
        torch-small) stage_torch small ;; torch-large) stage_torch large ;; fp8) stage_fp8 ;;
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
else
    run_stage "$stage" || status=1
fi
exit $status
