#!/usr/bin/env bash
# scripts/gpu_kit.sh: assembles the GPU kit (run by `make gpu-kit`, which first builds what it holds):
# one folder that travels with a copy of the repository to a GPU machine that has nvcc but no network, so
# that scripts/gpu_check.sh spends no device time on builds, downloads or small reference states.
# Its layout is described in scripts/gpu_lib.sh. What goes in:
#   - the CUDA programs built by the Makefile (sm_80 + sm_90a + sm_100a), gzip-compressed from where make put them
#   - BUILD/gpukit/train_gpt_cpu (x86-64-v3, no MPI), which writes the initial weights of the large states
#   - the reference states in STATES (made by `gpu_kit.sh states`)
#   - data/tokenizers/llama3.tiktoken (git-ignored; fetched with dev/data/fetch_tokenizers.sh when missing;
#     a failed fetch is reported and the kit is made without it)
#   - MANIFEST: commit, dirty flag, nvcc version, build flags, digest of the sources, sha256 and size per file
# The kit plus the files that travel with the tree (tracked and untracked, not ignored) must stay under
# 64 MiB; the script fails naming the sizes when they do not. It prints the kit's size and its manifest.
#   usage: scripts/gpu_kit.sh assemble --kit DIR --build DIR --states DIR --nvcc NVCC --flags "NVCC FLAGS"
#                                      --nccl "NCCL LINK FLAGS" --device-states "NAME..."
#          scripts/gpu_kit.sh states DIR "NAME..."   the reference states of tests/gpu_cases.sh in DIR, all
#                                      but the named ones (those are made on the GPU machine)
set -u
cd "$(dirname "$0")/.."
source scripts/gpu_lib.sh
LIMIT_MIB=64

make_states() {  # DIR "NAMES NOT IN THE KIT"
    local d=$1 skip=" $2 " names=() c name
    source tests/gpu_cases.sh
    for c in "${gpu_cases[@]}"; do
        name=${c%%|*}
        case "$skip" in *" $name "*) ;; *) names+=("$name") ;; esac
    done
    rm -rf "$d" && mkdir -p "$d"
    make_gpu_states "$d" "$(python_with_torch)" "${names[@]}"
    [ "$gpu_states_status" = 0 ] || { echo "error: gpu_kit.sh: the reference states above could not be made (logs in $d)"; exit 1; }
    rm -f "$d"/*.init.safetensors
    echo "reference states for the kit: ${names[*]} (in $d)"
}

if [ "${1:-}" = states ]; then
    [ $# -eq 3 ] || { echo "error: gpu_kit.sh states needs DIR and the names left out" >&2; exit 1; }
    make_states "$2" "$3"
    exit 0
fi
[ "${1:-}" = assemble ] || { echo "error: gpu_kit.sh: unknown command '${1:-}' (assemble or states)" >&2; exit 1; }
shift
kit=""; build=""; states=""; nvcc=""; flags=""; nccl=""; device_states=""; cudnn=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "error: gpu_kit.sh: $1 needs a value" >&2; exit 1; }
    case "$1" in
        --kit) kit=$2 ;; --build) build=$2 ;; --states) states=$2 ;; --nvcc) nvcc=$2 ;; --flags) flags=$2 ;;
        --nccl) nccl=$2 ;; --device-states) device_states=$2 ;; --cudnn) cudnn=$2 ;;
        *) echo "error: gpu_kit.sh: unknown flag '$1'" >&2; exit 1 ;;
    esac
    shift 2
done
[ -n "$kit" ] && [ -n "$build" ] && [ -n "$states" ] || { echo "error: gpu_kit.sh: --kit, --build and --states are needed" >&2; exit 1; }

rm -rf "$kit" && mkdir -p "$kit" "$build/gpukit"
missing=()
while IFS='|' read -r kpath cpath; do
    src=$cpath
    case "$cpath" in
        train_gpt_cpu) src=$build/gpukit/train_gpt_cpu ;;
        build/ckpt_convert) src=$build/gpukit/ckpt_convert ;;
        build/*) src=$build/${cpath#build/} ;;
    esac
    if [ "$cpath" = data/tokenizers/llama3.tiktoken ] && [ ! -f "$src" ]; then
        echo "fetching $cpath (dev/data/fetch_tokenizers.sh llama3)"
        bash dev/data/fetch_tokenizers.sh llama3 > "$build/gpukit/fetch.log" 2>&1
    fi
    if [ -f "$src" ]; then
        mkdir -p "$kit/$(dirname "$kpath")"
        case "$kpath" in *.gz) gzip -9 -n -c "$src" > "$kit/$kpath" ;; *) cp "$src" "$kit/$kpath" ;; esac
    else
        why="not built"
        [ "$kpath" = probe/nccl_ranks.gz ] && [ -z "$nccl" ] && why="this build found no NCCL"
        case "$cpath" in build/train_gpt_cudnn|build/test_attention) [ -z "$cudnn" ] && why="this build found no cuDNN" ;; esac
        [ "$cpath" = data/tokenizers/llama3.tiktoken ] && why="dev/data/fetch_tokenizers.sh llama3 failed: $(tail -n 1 "$build/gpukit/fetch.log")"
        missing+=("$cpath ($why)")
        echo "WARNING: the kit lacks $cpath: $why"
    fi
done < <(kit_placements)
mkdir -p "$kit/states"
cp "$states"/*.safetensors "$kit/states/" 2>/dev/null || { echo "error: gpu_kit.sh: no reference states in $states" >&2; exit 1; }

# ---- manifest
commit=$(git_commit || echo unknown)
dirty=$(git_dirty)
{
    echo "# train_gpt GPU kit (make gpu-kit; scripts/gpu_kit.sh). A stage of scripts/gpu_check.sh uses it when"
    echo "# sources_sha256 equals the digest of the checkout's sources (scripts/gpu_lib.sh kit_source_files)."
    echo "commit: $commit"
    echo "dirty: $dirty"
    echo "built: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -m)"
    echo "sources_sha256: $(kit_sources_digest)"
    echo "nvcc: $("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1 (\2)/p')"
    echo "nvcc_flags: $flags"
    echo "nccl_link: ${nccl:-none}"
    echo "train_gpt_cpu_flags: $(cat "$build/gpukit/train_gpt_cpu.flags" 2>/dev/null)"
    echo "states_on_device: $device_states"
    for m in "${missing[@]}"; do echo "missing: $m"; done
    echo "files:"
    (cd "$kit" && find . -type f ! -name MANIFEST | sed 's|^\./||' | LC_ALL=C sort | while read -r f; do
        echo "$(sha256sum "$f" | cut -d' ' -f1) $(stat -c %s "$f") $f"
    done)
} > "$kit/MANIFEST"

# ---- size: the kit and everything else that travels with the tree
kit_bytes=$(du -sb "$kit" | cut -f1)
tree_bytes=$(git ls-files -z -co --exclude-standard 2>/dev/null | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
total=$((kit_bytes + tree_bytes))
cat "$kit/MANIFEST"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "kit: $kit, $(mib "$kit_bytes") in $(($(grep -c . "$kit/MANIFEST") - $(grep -n '^files:$' "$kit/MANIFEST" | cut -d: -f1))) files; with the tree that travels ($(mib "$tree_bytes")): $(mib "$total") of $LIMIT_MIB MiB"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "error: gpu_kit.sh: the kit ($(mib "$kit_bytes")) and the tree ($(mib "$tree_bytes")) exceed $LIMIT_MIB MiB; leave out a large state (GPU_KIT_DEVICE_STATES in the Makefile) or strip the programs" >&2
    exit 1
fi
