#!/usr/bin/env bash
# test_gpt (the program tests/t_gpu.sh runs on a GPU) run on the CPU: train_gpt.cu and test_gpt.cu built with
# g++ against the host emulation of CUDA and cuBLASLt in tests/cuda_emu (every kernel runs as written, its
# threads emulated as fibers), on reference states of tests/gpu_cases.sh: the bf16 build on head dims 64
# (GPT, LLaMA GQA), 80 and 128, the fp32 build on the two head-dim-64 states. Every check of test_gpt runs:
# logits, loss, gradients, recompute, accumulation, the optimizer, 10 steps, weight update, determinism,
# resume. A second bf16 pass on gpt3_tiny_hd64 runs in the emulation's race mode: the blocks of every launch
# in a shuffled order (EMU_ORDER=2), the threads of a block in random orders with warps run ahead, and the
# shared-memory race detector (EMU_SCHED=random, tests/cuda_emu/include/cuda_emu.h). It checks the CUDA
# trainer's logic against PyTorch, not the GPU's arithmetic (exact host math instead of fast-math
# intrinsics) or speed.
# x86-64 only (the fiber switch). About 10 minutes on 2 cores.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the emulation's fiber switch is x86-64 only"; exit 0; fi
[ -x ./train_gpt_cpu ] || { echo "[FAIL] ./train_gpt_cpu is not built: run make train_gpt_cpu"; exit 1; }
d=$(pwd)/build/t_gpu_emulated
rm -rf "$d" && mkdir -p "$d/src" "$d/run"
status=0

# the sources with their launches rewritten, built twice (bf16, fp32) in parallel
if ! /usr/bin/python3 tests/cuda_emu/rewrite.py . "$d/src" > "$d/rewrite.log" 2>&1; then
    echo "[FAIL] tests/cuda_emu/rewrite.py: $(tail -2 "$d/rewrite.log")"; exit 1
fi
flags="-std=c++17 -O2 -fopenmp -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I$(pwd)/tests/cuda_emu/include -I$d/src -I$(pwd)"
g++ $flags -x c++ "$d/src/test_gpt.cu" -o "$d/test_gpt_emu" > "$d/build_bf16.log" 2>&1 &
g++ $flags -DENABLE_FP32 -x c++ "$d/src/test_gpt.cu" -o "$d/test_gpt_fp32_emu" > "$d/build_fp32.log" 2>&1
fp32_rc=$?
wait $!
bf16_rc=$?
for b in bf16 fp32; do
    rc=$bf16_rc; [ $b = fp32 ] && rc=$fp32_rc
    if [ $rc -eq 0 ]; then echo "[PASS] test_gpt.cu builds against the emulation ($b)"
    else echo "[FAIL] test_gpt.cu builds against the emulation ($b): $(grep -m 3 error "$d/build_$b.log")"; status=1; fi
done
[ $status -eq 0 ] || exit 1

source tests/gpu_cases.sh
make_gpu_states "$d" /usr/bin/python3 gpt3_tiny_hd64 llama_tiny_gqa_hd64 gpt_hd80 llama_gqa_hd128
[ $gpu_states_status -eq 0 ] || status=1
bf16_states=("${gpu_state_files[@]}")
fp32_states=()
for f in "${gpu_state_files[@]}"; do
    case $f in */gpt3_tiny_hd64.safetensors|*/llama_tiny_gqa_hd64.safetensors) fp32_states+=("$f") ;; esac
done
# test_gpt writes its checkpoints under build/t_gpu of the working directory: run it in $d/run.
# run_emu LOG LABEL CMD...: the checks of one run, labelled; a run that stops early (an emulation error: a
# race, a deadlock, a misaligned access) without a [FAIL] line gets one naming the first error.
run_emu() {
    local log=$1 label=$2
    shift 2
    "$@" > "$log" 2>&1
    local rc=$?
    grep -E '^\[(PASS|FAIL)\]|^EMU' "$log" | sed "s/^\[\(PASS\|FAIL\)\] /&$label/"
    if [ $rc -ne 0 ]; then
        status=1
        grep -q '^\[FAIL\]' "$log" || echo "[FAIL] ${label}test_gpt stopped (status $rc): $(grep -m 1 -E 'EMU|error' "$log")"
    fi
}
cd "$d/run"
run_emu "$d/bf16.log" "" "$d/test_gpt_emu" ref "${bf16_states[@]}"
run_emu "$d/bf16_race.log" "race mode: " env EMU_ORDER=2 EMU_SCHED=random "$d/test_gpt_emu" ref "$d/gpt3_tiny_hd64.safetensors"
run_emu "$d/fp32.log" "" "$d/test_gpt_fp32_emu" ref "${fp32_states[@]}"
exit $status
