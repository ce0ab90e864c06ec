#!/usr/bin/env bash
# test_gpt (the program tests/t_gpu.sh runs on a GPU) run on the CPU: train_gpt.cu and test_gpt.cu built with
# g++ against the host emulation of CUDA and cuBLASLt in tests/cuda_emu (every kernel runs as written, its
# threads emulated as fibers), on reference states of tests/gpu_cases.sh: the bf16 build on head dims 64
# (GPT, LLaMA GQA), 80 and 128, the fp32 build on the two head-dim-64 states. Every check of test_gpt runs:
# logits, loss, gradients, recompute, 10 steps, weight update, determinism (with the blocks of every
# launch in a shuffled order for the second bf16 pass), resume. It checks the CUDA trainer's logic against
# PyTorch, not the GPU's arithmetic (exact host math instead of fast-math intrinsics), races or speed.
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
# test_gpt writes its checkpoints under build/t_gpu of the working directory: run it in $d/run
cd "$d/run"
"$d/test_gpt_emu" ref "${bf16_states[@]}" > "$d/bf16.log" 2>&1 || status=1
grep -E '^\[(PASS|FAIL)\]|^EMU' "$d/bf16.log"
EMU_ORDER=2 "$d/test_gpt_emu" ref "$d/gpt3_tiny_hd64.safetensors" > "$d/bf16_shuffled.log" 2>&1 || status=1
grep -E '^\[(PASS|FAIL)\]|^EMU' "$d/bf16_shuffled.log" | sed 's/^\[\(PASS\|FAIL\)\] /&blocks shuffled: /'
"$d/test_gpt_fp32_emu" ref "${fp32_states[@]}" > "$d/fp32.log" 2>&1 || status=1
grep -E '^\[(PASS|FAIL)\]|^EMU' "$d/fp32.log"
exit $status
