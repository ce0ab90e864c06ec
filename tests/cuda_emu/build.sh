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
# then any -I among the FLAGs. CXX defaults to g++, PYTHON to /usr/bin/python3. Exit status: the compiler's; 1 with a
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
if [ $streams = 0 ]; then
    exec "$cxx" -I"$root/tests/cuda_emu/include" -I"$copy" "${flags[@]}" -x c++ "$copy/$source" -o "$output" "${libs[@]}"
fi
# the stream mode: every load and store of the program instrumented (GCC's -fsanitize=thread calls, without its runtime),
# and the mode's runtime, tests/cuda_emu/streams.cpp, compiled without instrumentation and linked in
"$cxx" -I"$root/tests/cuda_emu/include" -I"$copy" "${flags[@]}" -fsanitize=thread --param tsan-instrument-func-entry-exit=0 \
    -c -x c++ "$copy/$source" -o "$output.o" || exit $?
"$cxx" -std=c++17 -O2 -Wall -Wextra -c "$root/tests/cuda_emu/streams.cpp" -o "$output.streams.o" || exit $?
exec "$cxx" "${flags[@]}" "$output.o" "$output.streams.o" -o "$output" "${libs[@]}"
