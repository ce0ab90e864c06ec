#!/usr/bin/env bash
# The fp8 path's pieces (llmc/fp8.cuh, llmc/matmul_fp8.cuh): tests/test_fp8.cu built with g++ against the host
# emulation of CUDA and cuBLASLt (tests/cuda_emu/build.sh, as tests/t_matmul_emulated.sh builds its test) and run;
# it checks a few things itself and writes its inputs and results, which tests/fp8_checks.py checks against its own
# numpy reference (decode of all 256 codes, an encode sweep with ties, subnormals, saturation, inf and NaN, scaled and
# transposed casts, amax, current and delayed scaling against TransformerEngine's rule, the GEMMs against the
# dequantized operands). Then the same program with nvcc for sm_80, sm_90a and sm_100a (make build/test_fp8), and,
# where a GPU of compute capability 8.9 or newer is present, run there and checked the same way. Seconds on the CPU.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the emulation's fiber switch is x86-64 only"; exit 0; fi
d=$(pwd)/build/t_fp8
rm -rf "$d" && mkdir -p "$d/emu"
status=0
if bash tests/cuda_emu/build.sh tests/test_fp8.cu "$d/test_fp8_emu" -std=c++17 -O1 -fopenmp -pthread -fno-strict-aliasing \
       -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas -I"$(pwd)" > "$d/build_emu.log" 2>&1 &&
   ! grep -q "warning:" "$d/build_emu.log"; then
    echo "[PASS] tests/test_fp8.cu builds against the emulation without warnings"
    "$d/test_fp8_emu" "$d/emu" > "$d/emu.log" 2>&1 || status=1
    grep -E '^\[(PASS|FAIL)\]|^EMU|^error' "$d/emu.log"
    /usr/bin/python3 tests/fp8_checks.py "$d/emu" || status=1
else
    echo "[FAIL] tests/test_fp8.cu builds against the emulation without warnings: $(grep -m 3 -E 'error|warning' "$d/build_emu.log")"
    status=1
fi

# nvcc: the kernels for sm_80, sm_90a and sm_100a, warning-free
if [ -z "$(make -s probe-config | sed -n 's/^nvcc=//p')" ]; then
    echo "[SKIP] tests/test_fp8.cu with nvcc: no nvcc"
    exit $status
fi
if make -s build/test_fp8 > "$d/build_nvcc.log" 2>&1 && ! grep -qi "warning" "$d/build_nvcc.log"; then
    echo "[PASS] tests/test_fp8.cu builds with nvcc for sm_80, sm_90a and sm_100a without warnings"
else
    echo "[FAIL] tests/test_fp8.cu builds with nvcc for sm_80, sm_90a and sm_100a without warnings: $(grep -m 3 -iE 'error|warning' "$d/build_nvcc.log")"
    exit 1
fi

# a GPU of compute capability 8.9 or newer: the same checks on its results
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
if [ -z "$cc" ] || [ "$(echo "$cc" | awk '{print ($1 >= 8.9)}')" != 1 ]; then
    echo "[SKIP] tests/test_fp8.cu on a GPU: none of compute capability 8.9+ here (${cc:-no GPU})"
    exit $status
fi
mkdir -p "$d/gpu"
build/test_fp8 "$d/gpu" > "$d/gpu.log" 2>&1 || status=1
grep -E '^\[(PASS|FAIL)\]|^error' "$d/gpu.log" | sed 's/^\[\(PASS\|FAIL\)\] /[\1] GPU: /'
/usr/bin/python3 tests/fp8_checks.py "$d/gpu" --gpu | sed 's/^\[\(PASS\|FAIL\)\] /[\1] GPU: /'
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
