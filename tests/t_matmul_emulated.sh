#!/usr/bin/env bash
# llmc/matmul.cuh under the host emulation of CUDA and cuBLASLt (tests/cuda_emu), built with g++ by
# tests/cuda_emu/build.sh as test_gpt is: tests/test_matmul_emu.cu checks that the heuristic runs once per
# distinct key over repeated calls and that, when the emulated heuristic offers no algorithm for the BIAS
# and BGRADB epilogues (EMU_LT_NO_ALGO), the default epilogue plus matmul.cuh's own kernels give the
# epilogue path's results (both against a host reference), in the bf16 and the fp32 build; and the GELU epilogues
# (train_gpt --gelu-fusion on): the emulated cuBLASLt's GELU_AUX(_BIAS) and DGELU(_BGRAD) against the semantics
# cuBLASLt documents and the calls it refuses, matmul.cuh's matmul_forward_gelu and matmul_backward_input_dgelu
# against the host reference and the unfused kernels, and their fallback where there is no algorithm; --gemm-algos tune
# (the slow algorithm never kept, the products and accumulated gradients as without tuning) and FILE (replayed); the
# weight gradients written over NaN (a step's first micro-batch) equal to those accumulated from zeros. Seconds.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the emulation's fiber switch is x86-64 only"; exit 0; fi
d=$(pwd)/build/t_matmul_emulated
rm -rf "$d" && mkdir -p "$d"
status=0
flags=(-std=c++17 -O1 -fopenmp -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I"$(pwd)")
for b in bf16 fp32; do
    def=(); [ $b = fp32 ] && def=(-DENABLE_FP32)
    if bash tests/cuda_emu/build.sh tests/test_matmul_emu.cu "$d/test_matmul_$b" "${flags[@]}" "${def[@]}" > "$d/build_$b.log" 2>&1; then
        echo "[PASS] tests/test_matmul_emu.cu builds against the emulation ($b)"
    else
        echo "[FAIL] tests/test_matmul_emu.cu builds against the emulation ($b): $(grep -m 3 error "$d/build_$b.log")"
        status=1; continue
    fi
    (cd "$d" && "$d/test_matmul_$b") > "$d/$b.log" 2>&1  # in $d: it writes its --gemm-algos file there
    rc=$?
    grep -E '^\[(PASS|FAIL)\]|^EMU|^heuristic' "$d/$b.log"
    if [ $rc -ne 0 ]; then
        status=1
        # a run that stopped early (the emulation's error: a call it refuses at run time) without a [FAIL] line
        grep -q '^\[FAIL\]' "$d/$b.log" || echo "[FAIL] test_matmul_emu ($b) stopped (status $rc): $(grep -E '^EMU|^error' "$d/$b.log" | tail -n 1)"
    fi
done
exit $status
