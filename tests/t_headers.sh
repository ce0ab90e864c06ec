#!/usr/bin/env bash
# The axis headers of the CUDA trainer (llmc/gpt/) stand alone: for each header of HEADERS below, a translation unit
# that includes only it (and so only what it includes itself) must compile without errors or warnings
#   nvcc           with nvcc for sm_90a, as the Makefile builds train_gpt (-Wall, --expt-relaxed-constexpr): once
#                  with the one-rank communicator (llmc/parallel/comm_one_rank.cuh) and, where the Makefile finds NCCL,
#                  once with NCCL (-DUSE_NCCL, llmc/parallel/comm_nccl.cuh)
#   emulation      with g++ -fsyntax-only against the host emulation of CUDA, cuBLASLt and NCCL, on the sources as
#                  tests/cuda_emu/build.sh compiles them (rewritten by tests/cuda_emu/rewrite.py, the emulation's
#                  include folder first), with -DUSE_NCCL and MPI's headers as build/train_gpt_emu (without mpicxx:
#                  the one-rank communicator)
# A header that reads a name it does not include fails here, with the compiler's first error. No GPU needed; about 20 s
# a header for each nvcc compile, seconds for the emulation.
set -u
cd "$(dirname "$0")/.."
HEADERS=(
    llmc/gpt/fp8_linear.cuh
)
d=build/t_headers
rm -rf "$d" && mkdir -p "$d"
status=0

# $1 the header, $2 the label, $3 the compile's log; the rest: the compile command
check() {
    local h=$1 label=$2 log=$3
    shift 3
    if "$@" > "$log" 2>&1 && ! grep -qi "warning" "$log"; then
        echo "[PASS] $h compiles alone ($label)"
    else
        echo "[FAIL] $h compiles alone ($label): $(grep -m 1 -i error "$log" || grep -m 1 -i warning "$log" || tail -n 1 "$log")"
        status=1
    fi
}

# one translation unit per header: only its #include
for i in "${!HEADERS[@]}"; do
    [ -f "${HEADERS[$i]}" ] || { echo "[FAIL] ${HEADERS[$i]} compiles alone: no such file"; status=1; continue; }
    printf '#include "%s"\n' "${HEADERS[$i]}" > "$d/alone_$i.cu"
done

# nvcc: the one-rank build, and the NCCL build where the Makefile finds NCCL
config=$(make -s probe-config)
nvcc=$(sed -n 's/^nvcc=//p' <<< "$config")
nccl=$(sed -n 's/^nccl_home=//p' <<< "$config")
if [ -z "$nvcc" ]; then
    echo "[SKIP] the headers with nvcc: no nvcc"
else
    nv=("$nvcc" -std=c++17 -x cu -I. -Xcompiler -Wall,-Wno-unused-function --expt-relaxed-constexpr -arch=sm_90a)
    for i in "${!HEADERS[@]}"; do
        [ -f "$d/alone_$i.cu" ] || continue
        check "${HEADERS[$i]}" nvcc "$d/nvcc_$i.log" "${nv[@]}" -c "$d/alone_$i.cu" -o "$d/alone_$i.o"
        [ -n "$nccl" ] && check "${HEADERS[$i]}" "nvcc, NCCL" "$d/nvcc_nccl_$i.log" \
            "${nv[@]}" -DUSE_NCCL -I"$nccl/include" -c "$d/alone_$i.cu" -o "$d/alone_nccl_$i.o"
    done
fi

# the emulation: the rewritten sources, the emulation's headers first (tests/cuda_emu/build.sh's order)
if ! log=$(/usr/bin/python3 tests/cuda_emu/rewrite.py "$(pwd)" "$d/emu_src" 2>&1); then
    echo "[FAIL] the headers against the emulation: tests/cuda_emu/rewrite.py: $(tail -n 1 <<< "$log")"
    exit 1
fi
emu=(-std=c++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas)
label=emulation
if command -v mpicxx > /dev/null; then
    read -r -a mpi <<< "$(mpicxx --showme:compile)"
    emu+=(-DUSE_NCCL "${mpi[@]}")
    label="emulation, NCCL"
fi
for i in "${!HEADERS[@]}"; do
    [ -f "$d/alone_$i.cu" ] || continue
    check "${HEADERS[$i]}" "$label" "$d/emu_$i.log" \
        "${CXX:-g++}" -Itests/cuda_emu/include -I"$d/emu_src" "${emu[@]}" -x c++ "$d/alone_$i.cu"
done
exit $status
