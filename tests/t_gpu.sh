#!/usr/bin/env bash
# The CUDA trainer against the PyTorch reference (test_gpt.cu): logits, loss, every gradient, the
# reference's AdamW steps and weight update, recompute modes, bitwise determinism, bit-exact resume, on the
# reference states of tests/gpu_cases.sh, in both builds: test_gpt (bf16) and test_gpt_fp32. Runs only
# where a GPU is present (else prints [SKIP] no GPU and exits 0); it builds nothing: make train_gpt_cpu
# test_gpt test_gpt_fp32 first (scripts/gpu_check.sh does). tests/t_gpu_emulated.sh runs the same program
# on the CPU.
# A few minutes, most of it train_gpt.py making the reference states on the CPU (gpt3_125m_2_layers: 2-3).
set -u
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    echo "[SKIP] no GPU"
    exit 0
fi
for b in train_gpt_cpu test_gpt test_gpt_fp32; do
    [ -x "./$b" ] || { echo "[FAIL] ./$b is not built: run make train_gpt_cpu test_gpt test_gpt_fp32"; exit 1; }
done
# train_gpt.py needs PyTorch (scripts/gpu_lib.sh python_with_torch)
source scripts/gpu_lib.sh
PY=$(python_with_torch)
d=build/t_gpu
rm -rf "$d" && mkdir -p "$d"
source tests/gpu_cases.sh
make_gpu_states "$d" "$PY"
status=$gpu_states_status
# the bf16 trainer at its derived tolerances, then the fp32 build at tight ones (test_gpt.cu explains both)
if [ ${#gpu_state_files[@]} -gt 0 ]; then
    ./test_gpt ref "${gpu_state_files[@]}" || status=1
    ./test_gpt_fp32 ref "${gpu_state_files[@]}" || status=1
fi
exit $status
