#!/usr/bin/env bash
# scripts/gpu_probe.sh: one call on a GPU machine to learn what it has and what it can do.
#   1. environment table: GPU, memory, SMs, driver / CUDA versions, nvcc, NCCL (system or Python's
#      nvidia.nccl wheel: headers, library, version), MPI (mpirun, mpicxx), torch
#   2. builds dev/probe/ (ceilings, nccl_ranks) with make for this GPU's architecture
#   3. runs ceilings (copy bandwidth, bf16 / fp8 GEMM TFLOP/s) and nccl_ranks with 2 and 4 ranks on this GPU
# Everything printed also goes to a results file (default bench/results/probe_<date>_<gpu>.txt; ceilings'
# JSON beside it) headed by the device, the git commit and the command line. Each section runs even when
# an earlier one failed; the last lines say which failed, and the exit status is non-zero if any did.
# Needs no MPI and no package installs.
#   usage: scripts/gpu_probe.sh [--quick] [--out FILE]
set -u
cd "$(dirname "$0")/.."

cmdline="scripts/gpu_probe.sh${*:+ $*}"
quick=0
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --out) [ $# -ge 2 ] || { echo "error: --out needs a file name" >&2; exit 1; }; out=$2; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
    shift
done

PY=$(command -v python3 || echo /usr/bin/python3)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; } || echo "")
have() { command -v "$1" >/dev/null 2>&1; }
pyq() { "$PY" -c "$1" 2>/dev/null; }  # python one-liner, empty output on any failure

# ---- the GPU, from nvidia-smi or else torch
gpu_name=""; gpu_mem=""; driver=""; cc=""; driver_cuda=""
if have nvidia-smi; then
    IFS=',' read -r gpu_name gpu_mem driver < <(nvidia-smi --query-gpu=name,memory.total,driver_version \
        --format=csv,noheader 2>/dev/null | head -n 1)
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
    driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
fi
trim() { echo "$1" | sed 's/^ *//; s/ *$//'; }
gpu_name=$(trim "${gpu_name:-}"); gpu_mem=$(trim "${gpu_mem:-}"); driver=$(trim "${driver:-}")
torch_probe=$(pyq 'import torch
p = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
print(torch.__version__, torch.version.cuda, p.multi_processor_count if p else "-", "%d.%d" % (p.major, p.minor) if p else "-", (p.name if p else "-").replace(" ", "_"), p.total_memory // 2**20 if p else "-")')
read -r torch_ver torch_cuda torch_sms torch_cc torch_name torch_mem <<< "${torch_probe:-- - - - - -}"
[ -z "$gpu_name" ] && [ "$torch_name" != "-" ] && gpu_name=${torch_name//_/ }
[ -z "$gpu_mem" ] && [ "$torch_mem" != "-" ] && gpu_mem="$torch_mem MiB"
[ -z "$cc" ] && [ "$torch_cc" != "-" ] && cc=$torch_cc
gpu_tag=$(echo "${gpu_name:-nogpu}" | tr -c 'A-Za-z0-9.\n-' '_' | sed 's/__*/_/g; s/_$//')

# ---- results file; from here on everything printed is also written there
if [ -z "$out" ]; then
    mkdir -p bench/results
    out="bench/results/probe_$(date -u +%Y%m%d-%H%M)_${gpu_tag}.txt"
fi
mkdir -p "$(dirname "$out")"
json="${out%.txt}.json"
exec 3>&1 4>&2
exec > >(tee "$out") 2>&1
tee_pid=$!

commit=$(git rev-parse HEAD 2>/dev/null || echo "none (no commit yet)")
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit (with uncommitted changes)"; fi
echo "# train_gpt GPU probe"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "host:    $(hostname 2>/dev/null || echo unknown)"
echo "device:  ${gpu_name:-no GPU found}"
echo "commit:  $commit"
echo "command: $cmdline"
echo "results: $out"

failed=()
section() { echo; echo "== $1"; }

# ---- 1. environment
section "environment"
row() { printf '%-26s %s\n' "$1" "${2:-}"; }
row "GPU" "${gpu_name:-none found (nvidia-smi: $(have nvidia-smi && echo present || echo absent))}"
row "GPU memory" "${gpu_mem:-?}"
row "SMs" "$( [ "$torch_sms" != "-" ] && echo "$torch_sms" || echo '? (see ceilings --device-info below)')"
row "compute capability" "${cc:-?}"
row "driver" "${driver:-?}"
row "driver's CUDA version" "${driver_cuda:-?}"
nvcc_ver=$( [ -n "$NVCC" ] && "$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1 (\2)/p')
row "nvcc" "${NVCC:-absent}${nvcc_ver:+  release $nvcc_ver}"
row "python3" "$PY"
row "torch" "$( [ "$torch_ver" != "-" ] && echo "$torch_ver (CUDA $torch_cuda)" || echo 'not importable')"

# NCCL: NCCL_HOME if given, else a system install (the Makefile's order), else Python's wheel
nccl_wheel=$(pyq 'import nvidia.nccl as m; print(list(m.__path__)[0])')
nccl_home=${NCCL_HOME:-}
nccl_from="NCCL_HOME"
if [ -z "$nccl_home" ]; then
    for d in "$CUDA_HOME" /usr /usr/local; do
        if [ -f "$d/include/nccl.h" ]; then nccl_home=$d; nccl_from="system"; break; fi
    done
fi
if [ -z "$nccl_home" ] && [ -n "$nccl_wheel" ] && [ -f "$nccl_wheel/include/nccl.h" ]; then
    nccl_home=$nccl_wheel; nccl_from="Python wheel nvidia.nccl"
fi
if [ -n "$nccl_home" ]; then
    h="$nccl_home/include/nccl.h"
    nccl_ver=$(awk '/#define NCCL_MAJOR/{a=$3} /#define NCCL_MINOR/{b=$3} /#define NCCL_PATCH/{c=$3} END{if (a != "") print a "." b "." c}' "$h" 2>/dev/null)
    libs=$(ls "$nccl_home"/lib/libnccl.so* "$nccl_home"/lib64/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | tr '\n' ' ')
    row "NCCL headers" "$h ($nccl_from), version ${nccl_ver:-?}"
    row "NCCL library" "${libs:-not found next to the headers}"
    if [ -z "$(ls "$nccl_home"/lib/libnccl.so "$nccl_home"/lib64/libnccl.so 2>/dev/null)" ]; then
        row "" "no unversioned libnccl.so: mk/probe.mk links -l:libnccl.so.2"
    fi
else
    row "NCCL" "not found (no nccl.h under $CUDA_HOME, /usr, /usr/local or nvidia.nccl for $PY)"
fi
row "NCCL wheel (nvidia.nccl)" "${nccl_wheel:-not importable with $PY}"
row "torch's NCCL" "$(pyq 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' || echo '?')"
row "mpirun" "$(command -v mpirun || echo absent)"
row "mpicxx" "$(command -v mpicxx || echo absent)"
row "make" "$(command -v make || echo absent)"

# ---- 2. build for this GPU's architecture
section "build"
case "$cc" in
    9.0) sm=90a ;;
    [0-9]*.[0-9]*) sm=${cc/./} ;;
    *) sm="" ;;
esac
if [ -n "$sm" ]; then
    gencode="-gencode arch=compute_$sm,code=sm_$sm"
    bdir="build/probe_sm$sm"
else
    echo "compute capability unknown: building for sm_80 and sm_90a (the Makefile's default)"
    gencode="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a"
    bdir="build/probe"
fi
build_one() {  # target: build $bdir/$1, with make when present, else with nvcc directly
    local target=$bdir/$1
    if [ -z "$NVCC" ]; then echo "cannot build $target: no nvcc"; return 1; fi
    if have make; then
        echo "\$ make BUILD=$bdir GENCODE=\"$gencode\" PYTHON=$PY NCCL_HOME=$nccl_home $target"
        make --no-print-directory BUILD="$bdir" GENCODE="$gencode" PYTHON="$PY" NCCL_HOME="$nccl_home" "$target"
    else
        echo "make is absent: building with nvcc directly"
        local nccl_flags=""
        if [ "$1" = nccl_ranks ]; then
            [ -n "$nccl_home" ] || { echo "cannot build $target: NCCL not found"; return 1; }
            local lib="-lnccl"
            [ -e "$nccl_home/lib/libnccl.so" ] || [ -e "$nccl_home/lib64/libnccl.so" ] || lib="-l:libnccl.so.2"
            nccl_flags="-DUSE_NCCL -I$nccl_home/include -L$nccl_home/lib -L$nccl_home/lib64 -Xlinker -rpath=$nccl_home/lib $lib"
        fi
        mkdir -p "$bdir"
        # shellcheck disable=SC2086
        (set -x; "$NVCC" -O3 --use_fast_math -std=c++17 -I. $gencode --expt-relaxed-constexpr "dev/probe/$1.cu" \
            -o "$target" -lcublas -lcublasLt $nccl_flags)
    fi
}
build_one ceilings || failed+=("build ceilings")
build_one nccl_ranks || failed+=("build nccl_ranks")

# ---- 3. measurements; each under a wall-clock limit so that nothing hangs
run_limited() {  # seconds, command...
    local secs=$1; shift
    echo "\$ $*"
    if have timeout; then timeout -k 10 "$secs" "$@"; else "$@"; fi
    local rc=$?
    [ $rc -eq 124 ] && echo "(stopped after the $secs s limit)"
    return $rc
}
section "ceilings"
if [ -x "$bdir/ceilings" ]; then
    if [ $quick = 1 ]; then
        run_limited 300 "$bdir/ceilings" --quick --json "$json" || failed+=("ceilings")
    else
        run_limited 600 "$bdir/ceilings" --json "$json" || failed+=("ceilings")
    fi
else
    echo "skipped: $bdir/ceilings was not built"; failed+=("ceilings (not built)")
fi

bw_mib=64; [ $quick = 1 ] && bw_mib=16
for n in 2 4; do
    section "nccl_ranks, $n ranks on one GPU"
    if [ -x "$bdir/nccl_ranks" ]; then
        run_limited 200 "$bdir/nccl_ranks" --launch "$n" --timeout 150 --bw-mib "$bw_mib" || failed+=("nccl_ranks $n ranks")
    else
        echo "skipped: $bdir/nccl_ranks was not built"; failed+=("nccl_ranks $n ranks (not built)")
    fi
done

section "summary"
if [ ${#failed[@]} -eq 0 ]; then
    echo "all sections passed"
else
    echo "failed sections (${#failed[@]}):"
    for f in "${failed[@]}"; do echo "  $f"; done
fi
echo "results written to $out$( [ -f "$json" ] && echo " and $json")"
exec 1>&3 2>&4  # closes tee's input; wait until it has written everything
wait "$tee_pid" 2>/dev/null
[ ${#failed[@]} -eq 0 ]
