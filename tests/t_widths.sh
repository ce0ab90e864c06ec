#!/usr/bin/env bash
# The kernel variants the presets' real widths and vocabularies select, which the other tests (widths up to 512, a
# 384-entry vocabulary) never run: tests/test_widths.cu built with g++ against the host emulation of CUDA and
# cuBLASLt (tests/cuda_emu/build.sh, as tests/t_matmul_emulated.sh builds its test), in the bf16 and the fp32 build,
# and run on the CPU, not on a GPU. Per variant one line naming the instantiation the dispatch chose and the worst
# error against its derived tolerance: norm forward (every V, LANES instantiation up to C = 12288, LayerNorm and
# RMSNorm) and backward (V 1, 2, 4, 6), the fused classifier at vocabularies 50257, 32000 and 128256 over three
# chunks, the last partial, and its vocabulary-parallel kernels at tp 2 and 8, the global norm past its unrolled loop, the embedding backward at C 4096 and 5120,
# fp8 transposed casts at 4096 columns (bf16 build). The table of presets -> variants is in docs/testing.md.
# About 10 s to build each and 5 s to run on one core.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the emulation's fiber switch is x86-64 only"; exit 0; fi
d=$(pwd)/build/t_widths
rm -rf "$d" && mkdir -p "$d"
status=0
flags=(-std=c++17 -O1 -fopenmp -pthread -fno-strict-aliasing -Wall -Wno-unused-function -Wno-unknown-pragmas -I"$(pwd)")
for b in bf16 fp32; do
    def=(); [ $b = fp32 ] && def=(-DENABLE_FP32)
    if bash tests/cuda_emu/build.sh tests/test_widths.cu "$d/test_widths_$b" "${flags[@]}" "${def[@]}" > "$d/build_$b.log" 2>&1; then
        echo "[PASS] tests/test_widths.cu builds against the emulation ($b)"
    else
        echo "[FAIL] tests/test_widths.cu builds against the emulation ($b): $(grep -m 3 error "$d/build_$b.log")"
        status=1; continue
    fi
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$d/test_widths_$b" > "$d/$b.log" 2>&1 || status=1
    grep -E '^\[(PASS|FAIL)\]|^  |^EMU|^error' "$d/$b.log"
    # an emulation error or a crash ends the program before its last line: name it
    grep -q '^test_widths: ' "$d/$b.log" || { echo "[FAIL] test_widths ($b) did not finish: $(tail -n 2 "$d/$b.log" | tr '\n' ' ')"; status=1; }
done
exit $status
