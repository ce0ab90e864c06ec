#!/usr/bin/env bash
# tests/t_probe_build.sh: the GPU probe programs (dev/probe/, the Makefile) build and behave without a GPU.
#   - build/ceilings and build/nccl_ranks build; fresh compiles are warning-free
#   - both binaries hold sm_80, sm_90a and sm_100a code (scripts/fatbin_archs.sh: cuobjdump, or the fatbin headers)
#   - nccl_ranks links against a wheel-style NCCL that has only libnccl.so.2 (no libnccl.so)
#   - with no GPU visible each program exits 1 with a clear message (no crash, no hang); --help works;
#     bad flags and a stale or missing NCCL id file are clear errors
#   - scripts/gpu_probe.sh parses (bash -n) and answers --help
#   - on a machine with a GPU: nccl_ranks --launch 2 and ceilings --quick pass their own checks; skipped only
#     where no GPU is present (a failure on a GPU fails, never skips)
# Takes about 15 s on 2 cores without a GPU (three nvcc compiles). Without nvcc it prints [SKIP] and exits 0.
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL  # run from `make test -jN`, nested makes would warn about the jobserver

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "[SKIP] probe build: nvcc not found (PATH or $CUDA_HOME/bin); nothing to check"
    exit 0
fi

fails=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1: $2"; fails=$((fails + 1)); }
B=build
T=build/t_probe_build
rm -rf "$T"
mkdir -p "$T"

cfg=$(make -s --no-print-directory probe-config)
nccl_home=$(echo "$cfg" | sed -n 's/^nccl_home=//p')

# ---- builds
if make -s --no-print-directory "$B/ceilings" > "$T/make.log" 2>&1; then pass "make $B/ceilings"
else fail "make $B/ceilings" "$(tail -n 5 "$T/make.log")"; fi
if [ -n "$nccl_home" ]; then
    if make -s --no-print-directory "$B/nccl_ranks" > "$T/make.log" 2>&1; then pass "make $B/nccl_ranks"
    else fail "make $B/nccl_ranks" "$(tail -n 5 "$T/make.log")"; fi
else
    echo "[SKIP] make $B/nccl_ranks: the Makefile found no NCCL"
fi
out=$(make -s --no-print-directory CUDNN_HOME= BUILD="$T/nocudnn" "$T/nocudnn/train_gpt_cudnn" 2>&1)
if [ $? -ne 0 ] && echo "$out" | grep -q "needs cuDNN (no include/cudnn_graph.h"; then pass "train_gpt_cudnn without cuDNN: clear make error"
else fail "train_gpt_cudnn without cuDNN" "expected a failing make with 'needs cuDNN', got: $out"; fi
out=$(make -s --no-print-directory NO_NCCL=1 BUILD="$T/nonccl" "$T/nonccl/nccl_ranks" 2>&1)
if [ $? -ne 0 ] && echo "$out" | grep -q "needs NCCL and this build has none"; then pass "nccl_ranks without NCCL: clear make error"
else fail "nccl_ranks without NCCL" "expected a failing make with 'needs NCCL', got: $out"; fi

# fresh compiles into $T: warnings show up here even when build/ is up to date
if make --no-print-directory BUILD="$T" "$T/ceilings" > "$T/ceilings.log" 2>&1; then
    if grep -qi "warning" "$T/ceilings.log"; then fail "ceilings compiles warning-free" "$(grep -i -m 3 warning "$T/ceilings.log")"
    else pass "ceilings compiles warning-free"; fi
else fail "fresh compile of ceilings" "$(tail -n 5 "$T/ceilings.log")"; fi

# Python's NCCL wheel layout: include/nccl.h and lib/libnccl.so.2 only
if [ -n "$nccl_home" ]; then
    real_lib=$(ls "$nccl_home"/lib/libnccl.so.2 "$nccl_home"/lib64/libnccl.so.2 2>/dev/null | head -n 1)
    W=$(pwd)/$T/wheel_nccl
    mkdir -p "$W/include" "$W/lib"
    ln -sf "$nccl_home/include/nccl.h" "$W/include/nccl.h"
    ln -sf "$real_lib" "$W/lib/libnccl.so.2"
    if make --no-print-directory BUILD="$T/wheel" NCCL_HOME="$W" "$T/wheel/nccl_ranks" > "$T/wheel.log" 2>&1; then
        needed=$(readelf -d "$T/wheel/nccl_ranks" 2>/dev/null | grep -E "NEEDED.*libnccl|R(UN)?PATH")
        if grep -qi "warning" "$T/wheel.log"; then fail "nccl_ranks compiles warning-free" "$(grep -i -m 3 warning "$T/wheel.log")"
        else pass "nccl_ranks compiles warning-free"; fi
        if echo "$needed" | grep -q "libnccl.so.2" && echo "$needed" | grep -q "$W/lib"; then
            pass "nccl_ranks links a wheel-style NCCL with only libnccl.so.2 (NEEDED libnccl.so.2, runpath $W/lib)"
        else fail "wheel-style NCCL link" "readelf -d shows: $needed"; fi
    else fail "nccl_ranks against a wheel-style NCCL (only libnccl.so.2)" "$(tail -n 5 "$T/wheel.log")"; fi
fi

# ---- architectures in the binaries
CUOBJDUMP=$(command -v cuobjdump || { [ -x "$CUDA_HOME/bin/cuobjdump" ] && echo "$CUDA_HOME/bin/cuobjdump"; })
# cuobjdump --list-elf, or without it the fatbin entry headers read by scripts/fatbin_archs.sh
list_elf_archs() { bash scripts/fatbin_archs.sh "$1"; }
if [ -z "$CUOBJDUMP" ]; then
    # the header reader must tell sm_90 from sm_90a: check it on a one-kernel program built for sm_90 only
    printf '__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\nint main() { k<<<1, 1>>>(nullptr); return 0; }\n' > "$T/one.cu"
    NVCC=$(echo "$cfg" | sed -n 's/^nvcc=//p')
    "$NVCC" -gencode arch=compute_90,code=sm_90 "$T/one.cu" -o "$T/one_sm90" > "$T/one.log" 2>&1
    got=$(list_elf_archs "$T/one_sm90" | tr '\n' ' ')
    if [ "$got" = "sm_90 " ]; then pass "fatbin reader: an sm_90-only build lists exactly sm_90"
    else fail "fatbin reader" "an sm_90-only build listed '$got'"; fi
fi
for bin in "$B/ceilings" "$B/nccl_ranks" "$T/wheel/nccl_ranks"; do
    [ -x "$bin" ] || continue
    archs=$(list_elf_archs "$bin" | tr '\n' ' ')
    if echo " $archs" | grep -q " sm_80 " && echo " $archs" | grep -q " sm_90a " && echo " $archs" | grep -q " sm_100a "; then
        pass "$bin has sm_80, sm_90a and sm_100a code ($archs)"
    else fail "$bin architectures" "want sm_80, sm_90a and sm_100a, found '$archs'"; fi
done

# ---- behaviour without a GPU (CUDA_VISIBLE_DEVICES= hides any GPU, so this runs the same everywhere)
expect_error() {  # name, expected message, command...
    local name=$1 want=$2; shift 2
    local got rc
    got=$(timeout 60 "$@" 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$got" | grep -q -- "$want"; then pass "$name"
    else fail "$name" "want exit 1 and '$want'; got exit $rc: $(echo "$got" | tail -n 3)"; fi
}
expect_usage() {  # binary
    local got rc
    got=$("$1" --help 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$got" | head -n 1 | grep -q "^usage: "; then pass "$1 --help"
    else fail "$1 --help" "exit $rc: $(echo "$got" | head -n 2)"; fi
}
if [ -x "$B/ceilings" ]; then
    expect_usage "$B/ceilings"
    expect_error "ceilings without a GPU" "no usable CUDA device" env CUDA_VISIBLE_DEVICES= "$B/ceilings" --quick
    expect_error "ceilings: unknown flag" "unknown argument '--bogus'" "$B/ceilings" --bogus
    expect_error "ceilings: bad number" "--reps expects an integer" "$B/ceilings" --reps x
fi
if [ -x "$B/nccl_ranks" ]; then
    N=$B/nccl_ranks
    expect_usage "$N"
    expect_error "nccl_ranks --launch 2 without a GPU" "no usable CUDA device" env CUDA_VISIBLE_DEVICES= "$N" --launch 2 --timeout 20
    expect_error "nccl_ranks: unknown flag" "unknown argument '--bogus'" "$N" --bogus
    expect_error "nccl_ranks: one rank without RANK" "WORLD_SIZE is not set" env -u RANK -u WORLD_SIZE "$N" --id-file "$T/id"
    expect_error "nccl_ranks: RANK out of range" "need 0 <= RANK < WORLD_SIZE" env RANK=2 WORLD_SIZE=2 "$N" --id-file "$T/id"
    expect_error "nccl_ranks: rank 1 times out waiting for the id file" "timed out after 1 s waiting for the NCCL id file" \
        env RANK=1 WORLD_SIZE=2 CUDA_VISIBLE_DEVICES= "$N" --id-file "$T/missing_id" --timeout 1
    touch "$T/stale_id"
    expect_error "nccl_ranks: rank 0 refuses a stale id file" "already exists" \
        env RANK=0 WORLD_SIZE=2 CUDA_VISIBLE_DEVICES= "$N" --id-file "$T/stale_id"
fi

# ---- the fp8 GEMM probe (dev/probe/fp8_gemm.cu): nvcc warning-free, without a GPU a clear error, and against the
# emulated cuBLASLt (tests/cuda_emu) its whole table and the trainer's call, with refusals planted as the H100 showed
if make --no-print-directory BUILD="$T" "$T/fp8_gemm" > "$T/fp8_gemm.log" 2>&1; then
    if grep -qi "warning" "$T/fp8_gemm.log"; then fail "fp8_gemm compiles warning-free" "$(grep -i -m 3 warning "$T/fp8_gemm.log")"
    else pass "fp8_gemm compiles warning-free"; fi
    expect_usage "$T/fp8_gemm"
    expect_error "fp8_gemm without a GPU" "no usable CUDA device" env CUDA_VISIBLE_DEVICES= "$T/fp8_gemm" --m 64 --n 32 --k 64
    expect_error "fp8_gemm: a dimension not a multiple of 16" "--k expects a multiple of 16" "$T/fp8_gemm" --k 24
else fail "fresh compile of fp8_gemm" "$(tail -n 5 "$T/fp8_gemm.log")"; fi
E=$T/fp8_gemm_emu
if bash tests/cuda_emu/build.sh dev/probe/fp8_gemm.cu "$E" -std=c++17 -O1 -fopenmp -pthread -fno-strict-aliasing -Wall -Wextra \
       -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas -I"$(pwd)" -- -ldl > "$T/fp8_gemm_emu.log" 2>&1 &&
   ! grep -q "warning:" "$T/fp8_gemm_emu.log"; then
    pass "fp8_gemm builds against the emulation without warnings"
    out=$("$E" --m 64 --n 32 --k 64 --trainer 2>&1); rc=$?
    rows=$(grep -c ' | heuristic ' <<< "$out")
    if [ $rc -eq 0 ] && [ "$rows" = 16 ] && grep -q "^pytorch .*1: check ok call ok | ran, samples ok" <<< "$out" &&
       grep -q "^trainer call ran" <<< "$out" && grep -q "^cublasLtMatmul from: " <<< "$out"; then
        pass "fp8_gemm, emulated: 16 variants in the table, the PyTorch-style call and the trainer's run and check"
    else fail "fp8_gemm, emulated" "exit $rc, $rows rows: $(tail -n 4 <<< "$out" | tr '\n' ' ')"; fi
    out=$(EMU_LT_REFUSE_ALGOS=1 "$E" --m 64 --n 32 --k 64 --only pytorch 2>&1); rc=$?
    if [ $rc -eq 0 ] && grep -q "^pytorch .*1: check ok call NOT_SUPPORTED(15), 2: check ok call ok | ran" <<< "$out"; then
        pass "fp8_gemm, emulated, the first algorithm refused at the call: the table shows it and the second runs"
    else fail "fp8_gemm, first algorithm refused" "exit $rc: $(tail -n 2 <<< "$out" | tr '\n' ' ')"; fi
    out=$(EMU_LT_REFUSE_ALGOS=3 "$E" --m 64 --n 32 --k 64 --trainer 2>&1); rc=$?
    if [ $rc -eq 1 ] && grep -q "^pytorch .*NONE RAN" <<< "$out" &&
       grep -q "each of the heuristic's 3 algorithms refused (status 15, 15, 15)" <<< "$out"; then
        pass "fp8_gemm, emulated, every algorithm refused: NONE RAN, and the trainer's call names the refusals (exit 1)"
    else fail "fp8_gemm, every algorithm refused" "exit $rc: $(tail -n 2 <<< "$out" | tr '\n' ' ')"; fi
else fail "fp8_gemm builds against the emulation without warnings" "$(grep -m 3 -E 'error|warning' "$T/fp8_gemm_emu.log")"; fi

# ---- the PyTorch control (dev/probe/fp8_torch.py) and the trace comparison (dev/probe/lt_trace.py)
# Two cuBLASLt traces in cuBLASLt's format, made here with planted differences: ours passes C = D and a scale pointer
# 4 bytes into its allocation, PyTorch's C = none, 256-byte scales and one key more; ours has an Error line. The diff
# must name exactly these (and not the addresses of the stream or the workspace, nor the bf16 call before ours).
lt() {  # lt PID A C D ASCALE EXTRA: one cublasLtMatmul line of an E4M3 x E4M3 -> bf16 GEMM
    echo "[2026-01-01 00:00:00][cublasLt][$1][Api][cublasLtMatmul] A=$2 Adesc=[type=R_8F_E4M3 rows=2048 cols=6144 ld=2048] B=0x7f0000100000 Bdesc=[type=R_8F_E4M3 rows=2048 cols=4096 ld=2048] C=$3 Cdesc=[type=R_16BF rows=6144 cols=4096 ld=6144] D=$4 Ddesc=[type=R_16BF rows=6144 cols=4096 ld=6144] computeDesc=[computeType=COMPUTE_32F scaleType=R_32F transa=OP_T aScalePointer=$5$6] workSpace=0x7f00003$1 workSpaceSizeInBytes=33554432 beta=0 stream=0x$1"
}
{ lt 1 0x7f0000000100 0x7f0000200000 0x7f0000200000 0x7f0000400004 "" | sed 's/R_8F_E4M3/R_16BF/g'
  lt 1 0x7f0000000100 0x7f0000200000 0x7f0000200000 0x7f0000400004 ""
  echo "[2026-01-01 00:00:00][cublasLt][1][Error][cublasLtMatmul] planted error line"; } > "$T/lt_ours.log"
lt 2 0x7e0000000000 "(nil)" 0x7e0000200000 0x7e0000400000 " fastAccumulationMode=0" > "$T/lt_torch.log"
out=$(python3 dev/probe/lt_trace.py "$T/lt_ours.log" "$T/lt_torch.log" 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "first fp8 cublasLtMatmul call at line 2" <<< "$out" && grep -q "^keys whose values differ (3):" <<< "$out" &&
   grep -qE "^  C +ours aligned 256 +torch null$" <<< "$out" && grep -qE "^  C is D +ours True +torch False$" <<< "$out" &&
   grep -qE "^  computeDesc.aScalePointer +ours aligned 4 +torch aligned 256$" <<< "$out" &&
   grep -q "^keys only in torch (1):" <<< "$out" && grep -qE "^  computeDesc.fastAccumulationMode +0$" <<< "$out" &&
   grep -q "^ours: 1 line(s) at Error" <<< "$out"; then
    pass "lt_trace.py names the planted differences of two cuBLASLt traces (C = D, a 4-byte scale pointer, a key only PyTorch sets) and the Error line"
else fail "lt_trace.py on planted traces" "exit $rc: $(head -c 600 <<< "$out" | tr '\n' ' ')"; fi
head -n 1 "$T/lt_ours.log" > "$T/lt_bf16.log"
python3 dev/probe/lt_trace.py "$T/lt_bf16.log" "$T/lt_torch.log" > "$T/lt.out" 2>&1
[ $? = 1 ] && grep -q "no fp8 cublasLtMatmul call among its 1 cublasLtMatmul lines" "$T/lt.out" \
    && pass "lt_trace.py: a trace without an fp8 call, exit 1 naming it" || fail "lt_trace.py without an fp8 call" "$(cat "$T/lt.out")"
python3 dev/probe/lt_trace.py "$T/lt_ours.log" "$T/missing.log" > "$T/lt.out" 2>&1
[ $? = 2 ] && grep -q "error: torch trace $T/missing.log: No such file" "$T/lt.out" \
    && pass "lt_trace.py: a missing trace, exit 2 naming it" || fail "lt_trace.py, missing trace" "$(cat "$T/lt.out")"
if ! { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
    out=$(python3 dev/probe/fp8_torch.py 2>&1); rc=$?
    [ $rc = 2 ] && grep -q "^no CUDA device" <<< "$out" && pass "fp8_torch.py without a GPU: exit 2, 'no CUDA device'" \
        || fail "fp8_torch.py without a GPU" "exit $rc: $out"
fi
out=$(python3 dev/probe/fp8_torch.py --k 24 2>&1); rc=$?
[ $rc = 2 ] && grep -q "error: --k 24: fp8 GEMMs need a positive multiple of 16" <<< "$out" \
    && pass "fp8_torch.py --k 24: exit 2 naming the flag" || fail "fp8_torch.py --k 24" "exit $rc: $out"

# ---- the probe script
if bash -n scripts/gpu_probe.sh; then pass "scripts/gpu_probe.sh parses (bash -n)"
else fail "scripts/gpu_probe.sh" "bash -n reports a syntax error"; fi
if bash scripts/gpu_probe.sh --help | grep -q "usage: scripts/gpu_probe.sh"; then pass "scripts/gpu_probe.sh --help"
else fail "scripts/gpu_probe.sh --help" "no usage line"; fi

# ---- with a GPU: the programs' own checks (exact collective results, GEMM entries against the host).
# Skipped only when there is no GPU: ceilings says "no usable CUDA device" and nvidia-smi (when installed)
# lists none; any other failure of --device-info, or that message where nvidia-smi lists a GPU, fails.
gpu_listed() { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
if [ ! -x "$B/ceilings" ]; then
    echo "[SKIP] runs on a GPU: $B/ceilings did not build (counted above)"
elif "$B/ceilings" --device-info > "$T/device.log" 2>&1; then
    if [ -x "$B/nccl_ranks" ]; then
        if timeout 200 "$B/nccl_ranks" --launch 2 --timeout 150 --bw-mib 8 > "$T/nccl2.log" 2>&1; then pass "nccl_ranks --launch 2 on this GPU"
        else fail "nccl_ranks --launch 2 on this GPU" "$(grep -E 'FAIL|error' "$T/nccl2.log" | head -n 5)"; fi
    fi
    if timeout 300 "$B/ceilings" --quick > "$T/ceilings_quick.log" 2>&1; then pass "ceilings --quick on this GPU (GEMM results match the host)"
    else fail "ceilings --quick on this GPU" "$(tail -n 5 "$T/ceilings_quick.log")"; fi
elif grep -q "no usable CUDA device" "$T/device.log" && ! gpu_listed; then
    echo "[SKIP] runs on a GPU: none here ($(tail -n 1 "$T/device.log"))"
else
    fail "ceilings --device-info on this machine's GPU" "$(tail -n 5 "$T/device.log")"
fi

[ $fails -eq 0 ]
