#!/usr/bin/env bash
# tests/t_headers.sh: every header under llmc/ compiles alone, in a translation unit that includes only it, so that
# each one includes what it uses and can be included first anywhere: the parallel axes of llmc/gpt/, the model
# (model.cuh), its buffers (memory.cuh) and its weights in and out (weights.cuh) too. Checks:
#   1. each *.h with g++ -std=c++17 -fsyntax-only -I.
#   2. each *.cuh against the host emulation of CUDA, as tests/cuda_emu/build.sh builds: the sources copied with their
#      kernel launches rewritten (tests/cuda_emu/rewrite.py), the emulation's headers first on the include path, g++
#   3. each *.cuh with nvcc (-x cu, syntax only: -fdevice-syntax-only and the host compiler's -fsyntax-only, for
#      sm_90a); [SKIP] where the Makefile finds no nvcc
# Two headers need what a program supplies: llmc/parallel/comms.h is included after the program's Comm backend
# (here llmc/parallel/comm_mpi.h, the CPU trainer's), and llmc/parallel/comm_nccl.cuh needs NCCL (-DUSE_NCCL: against
# the emulation its nccl.h, which needs MPI's headers; with nvcc the NCCL the Makefile finds; [SKIP] without them).
# A failure names the header and the compiler's first lines. One and a half to three minutes on 2 busy cores.
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL  # run from `make test -jN`, nested makes would warn about the jobserver
status=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
T=build/t_headers
rm -rf "$T" && mkdir -p "$T/tu"
CXX=${CXX:-g++}

headers_h=$(find llmc -name '*.h' -not -path 'llmc/gpt/*' -type f | sort)
headers_cuh=$(find llmc -name '*.cuh' -type f | sort)
# prelude HEADER: what the translation unit includes before HEADER (the program's part)
prelude() { if [ "$1" = llmc/parallel/comms.h ]; then echo '#include "llmc/parallel/comm_mpi.h"'; fi; }
# first lines of a compiler's errors, on one line
first_lines() { grep -m 3 -E 'error|Error' "$1" | cut -c1-200 | paste -sd'|' -; }
# alone LABEL WHAT COMPILE HEADER...: COMPILE HEADER compiles a unit of that header alone and returns 0, 1 (its output
# kept in $T/out.txt), or 2 with why it cannot on this machine ([SKIP]); one [PASS] line for all, or a [FAIL] line each
alone() {
    local label=$1 what=$2 compile=$3 n=0 bad=0 h rc
    shift 3
    for h in "$@"; do
        "$compile" "$h" > "$T/out.txt" 2>&1
        rc=$?
        if [ $rc -eq 2 ]; then echo "[SKIP] $label: $h: $(head -n 1 "$T/out.txt")"; continue; fi
        n=$((n + 1))
        if [ $rc -ne 0 ]; then fail "$label: $h does not compile alone: $(first_lines "$T/out.txt")"; bad=$((bad + 1)); fi
    done
    [ $bad -eq 0 ] && pass "$label: each of the $n $what compiles alone"
}

# ---- 1. *.h with g++
gxx_h() {
    { prelude "$1"; echo "#include \"$1\""; } > "$T/tu/one.cpp"
    "$CXX" -std=c++17 -fsyntax-only -I. -x c++ "$T/tu/one.cpp" || return 1
}
alone g++ "*.h headers under llmc/" gxx_h $headers_h

# ---- 2. *.cuh against the emulation (tests/cuda_emu)
mpi_flags=$(mpicxx --showme:compile 2>/dev/null)
copy=$T/emu_src
emu_cuh() {
    local defs=()
    if [ "$1" = llmc/parallel/comm_nccl.cuh ]; then
        [ -n "$mpi_flags" ] || { echo "the emulated NCCL needs MPI's headers (no mpicxx)"; return 2; }
        read -r -a defs <<< "-DUSE_NCCL $mpi_flags"
    fi
    # the unit sits in a folder of its own, so that "llmc/..." is looked up along the include path, the emulation's
    # llmc/mma.cuh first, as in the emulated builds
    echo "#include \"$1\"" > "$T/tu/one.cpp"
    "$CXX" -std=c++17 -fsyntax-only "${defs[@]}" -I tests/cuda_emu/include -I "$copy" -x c++ "$T/tu/one.cpp" || return 1
}
if ! log=$("${PYTHON:-/usr/bin/python3}" tests/cuda_emu/rewrite.py . "$copy" 2>&1); then
    fail "emulation: tests/cuda_emu/rewrite.py failed: $(tail -n 2 <<< "$log" | paste -sd' ' -)"
else
    alone "emulation (g++)" "*.cuh headers under llmc/" emu_cuh $headers_cuh
fi

# ---- 3. *.cuh with nvcc
cfg=$(make -s --no-print-directory probe-config 2>/dev/null)
nvcc=$(sed -n 's/^nvcc=//p' <<< "$cfg")
nccl_home=$(sed -n 's/^nccl_home=//p' <<< "$cfg")
nvcc_cuh() {
    local defs=()
    if [ "$1" = llmc/parallel/comm_nccl.cuh ]; then
        [ -n "$nccl_home" ] || { echo "the Makefile finds no NCCL"; return 2; }
        defs=(-DUSE_NCCL "-I$nccl_home/include")
    fi
    echo "#include \"$1\"" > "$T/tu/one.cu"
    "$nvcc" -x cu -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -fdevice-syntax-only -Xcompiler -fsyntax-only \
        "${defs[@]}" -I. -c "$T/tu/one.cu" -o "$T/tu/one.o" || return 1  # nvcc's own status 2 is a failure, no skip
}
if [ -z "$nvcc" ]; then
    echo "[SKIP] nvcc: the Makefile finds no nvcc (make probe-config)"
else
    alone nvcc "*.cuh headers under llmc/" nvcc_cuh $headers_cuh
fi
exit $status
