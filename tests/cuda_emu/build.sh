#!/usr/bin/env bash
# tests/cuda_emu/build.sh SOURCE OUTPUT [FLAG...] [-- LIB...]: builds a CUDA source of this repository with g++ against
# the host emulation of CUDA, cuBLASLt and NCCL. The one recipe of every emulated build: the Makefile's (build/test_comm_emu,
# build/train_gpt_emu, build/train_gpt_fp32_emu) and the tests' (t_attention, t_fp8, t_gpu_emulated, t_matmul_emulated, t_widths).
#   SOURCE   a file that rewrite.py copies, relative to the repository root: train_gpt.cu, test_gpt.cu, tests/NAME.cu
#   OUTPUT   the program to write; the rewritten copy of the sources goes to OUTPUT_src/ (emptied first)
#   FLAG...  the compiler flags of this build (optimisation, warnings, -fopenmp, -D...), LIB... what it links;
#            -DEMU_STREAMS builds the stream mode (tests/cuda_emu/include/cuda_emu_streams.h): SOURCE's copy compiled
#            with -fsanitize=thread's instrumentation and linked with tests/cuda_emu/streams.cpp, not instrumented
# Two steps: tests/cuda_emu/rewrite.py copies the sources into OUTPUT_src/ with every kernel launch rewritten, then
#   $CXX -I tests/cuda_emu/include -I OUTPUT_src FLAG... -x c++ OUTPUT_src/SOURCE -o OUTPUT LIB...
# The emulation's include folder comes first (its llmc/mma.cuh replaces the inline PTX of llmc/mma.cuh), then the copy,
# then any -I among the FLAGs. EMU_COVERAGE=DIR adds gcc's --coverage (make coverage, scripts/coverage.py). CXX defaults
# to g++, PYTHON to /usr/bin/python3. Exit status: the compiler's; 1 with a
# line "error: ..." on stderr when the rewrite fails.
set -u
if [ $# -lt 2 ] || [ "$1" = --help ]; then
    echo "usage: tests/cuda_emu/build.sh SOURCE OUTPUT [FLAG...] [-- LIB...]"
    [ "${1:-}" = --help ] && exit 0 || exit 2
fi
source=$1 output=$2
shift 2
flags=() libs=()
while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then shift; libs=("$@"); break; fi
    flags+=("$1"); shift
done
root=$(cd "$(dirname "$0")/../.." && pwd)
copy=${output}_src

rm -rf "$copy" && mkdir -p "$copy"
if ! log=$("${PYTHON:-/usr/bin/python3}" "$root/tests/cuda_emu/rewrite.py" "$root" "$copy" 2>&1); then
    echo "error: tests/cuda_emu/rewrite.py: $(tail -n 2 <<< "$log" | tr '\n' ' ')" >&2; exit 1
fi
[ -f "$copy/$source" ] || { echo "error: tests/cuda_emu/rewrite.py does not copy $source" >&2; exit 1; }
cxx=${CXX:-g++}
streams=0
for f in "${flags[@]}"; do [ "$f" = -DEMU_STREAMS ] && streams=1; done
# EMU_COVERAGE=DIR (make coverage): gcc's --coverage; every process adds its counts to DIR (the .gcda files, at DIR
# followed by the program's absolute path), and the compile's notes (.gcno) are copied beside them (scripts/coverage.py)
cov=()
if [ -n "${EMU_COVERAGE:-}" ]; then
    mkdir -p "$EMU_COVERAGE" || exit 1
    cov=(--coverage -fprofile-update=single -fprofile-dir="$EMU_COVERAGE")
    output=$(cd "$(dirname "$output")" && pwd)/$(basename "$output")  # absolute: the counts go to DIR/<its path>
fi
keep_notes() {
    [ -n "${EMU_COVERAGE:-}" ] || return 0
    local n
    for n in "$output"*.gcno; do
        [ -f "$n" ] || continue
        mkdir -p "$EMU_COVERAGE/$(dirname "$n")" && cp "$n" "$EMU_COVERAGE/$n"
    done
}
if [ $streams = 0 ]; then
    "$cxx" -I"$root/tests/cuda_emu/include" -I"$copy" "${flags[@]}" "${cov[@]}" -x c++ "$copy/$source" -o "$output" "${libs[@]}" || exit $?
    keep_notes
    exit 0
fi
# the stream mode: every load and store of the program instrumented (GCC's -fsanitize=thread calls, without its runtime),
# and the mode's runtime, tests/cuda_emu/streams.cpp, compiled without instrumentation and linked in
"$cxx" -I"$root/tests/cuda_emu/include" -I"$copy" "${flags[@]}" "${cov[@]}" -fsanitize=thread \
    --param tsan-instrument-func-entry-exit=0 -c -x c++ "$copy/$source" -o "$output.o" || exit $?
keep_notes
"$cxx" -std=c++17 -O2 -Wall -Wextra -c "$root/tests/cuda_emu/streams.cpp" -o "$output.streams.o" || exit $?
exec "$cxx" "${flags[@]}" "${cov[@]}" "$output.o" "$output.streams.o" -o "$output" "${libs[@]}"
