#!/usr/bin/env bash
# dev/bench/cpu_gemm.sh: builds and runs dev/bench/cpu_gemm.cpp (the CPU trainer's GEMMs against the machine's FMA
# peak; its header says what each figure is). A benchmark, not a test: not part of `make test`. Run on an idle machine:
# the figures are of whatever else runs too.
set -eu
cd "$(dirname "$0")/../.."
mkdir -p build
g++ -O3 -march=native -std=c++17 -Wall -Wextra -I. -fopenmp dev/bench/cpu_gemm.cpp -o build/cpu_gemm
lscpu | grep -m1 'Model name' || true
echo "threads: ${OMP_NUM_THREADS:-$(nproc)}"
build/cpu_gemm
