#!/usr/bin/env bash
# dev/cuda/run_all.sh: runs every dev/cuda program (dev/cuda/Makefile's PROGRAMS) at its default training sizes
# and prints their rows as markdown tables, one per kind of figure: the memory-bound kernels (kernel, variant,
# size, version, buffer sets rotated, median ms, GB/s, percent of the copy ceiling measured in the same
# program's run, validation result), attention (TFLOP/s against the 400 target) and the fused classifier
# (TFLOP/s, logits memory, speed-up over the unfused version 1). Where python3 has torch with CUDA, PyTorch's
# scaled_dot_product_attention (dev/cuda/attention_sdpa.py) is timed at the attention programs' default shape
# in the same run. Each program's full output goes to LOGDIR/<program>.log. Exits non-zero when a program
# fails (validation or error); the others still run.
# Usage: see usage() below.
set -u
cd "$(dirname "$0")/../.."
BIN=build/devcuda
LOGS=build/devcuda/run_all
ARGS=()
usage() {
    cat <<'USAGE'
usage: dev/cuda/run_all.sh [--bin DIR] [--logs DIR] [PROGRAM ARGS...]
  Runs every dev/cuda program and prints one markdown table of all kernels, versions and sizes.
  --bin DIR    where the binaries are (default build/devcuda; build them with `make devcuda`)
  --logs DIR   where the per-program outputs go (default build/devcuda/run_all)
  other arguments are passed to every program (e.g. --check-only, --reps 50, or a version number)
USAGE
}
while [ $# -gt 0 ]; do
    case $1 in
        --help|-h) usage; exit 0 ;;
        --bin) BIN=${2:?--bin needs a directory}; shift 2 ;;
        --logs) LOGS=${2:?--logs needs a directory}; shift 2 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
PROGRAMS=$(make -s --no-print-directory -C dev/cuda print-programs)
mkdir -p "$LOGS"
status=0
header=""
for p in $PROGRAMS; do
    if [ ! -x "$BIN/$p" ]; then
        echo "error: $BIN/$p is missing; build it with: make devcuda (or make -C dev/cuda OUT=\$(pwd)/$BIN)" >&2
        status=1
        continue
    fi
    "$BIN/$p" "${ARGS[@]}" > "$LOGS/$p.log" 2>&1 || { status=1; echo "error: $p failed ($(tail -n 1 "$LOGS/$p.log")); full output in $LOGS/$p.log" >&2; }
    h=$(grep -m 1 '^| ' "$LOGS/$p.log")
    if [ -z "$header" ]; then grep '^# ' "$LOGS/$p.log" | sed 's/^# [a-z_]* on /# device: /'; fi
    if [ -n "$h" ] && [ "$h" != "$header" ]; then  # a new kind of table
        [ -n "$header" ] && echo
        grep -m 2 '^| ' "$LOGS/$p.log"
        header=$h
    fi
    grep '^| ' "$LOGS/$p.log" | tail -n +3
    grep '^# copy ceiling' "$LOGS/$p.log" | sed "s/^# copy ceiling/# ($p's copy ceiling/; s/\$/)/" > "$LOGS/$p.ceiling"
done
cat "$LOGS"/*.ceiling 2>/dev/null
# PyTorch's attention at the attention programs' default timed shape (B 4, T 4096, H 32, KV 32, hd 128)
case " $PROGRAMS " in *" attention_forward "*)
    if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
        echo
        python3 dev/cuda/attention_sdpa.py --B 4 --T 4096 --H 32 --KV 32 --hd 128 > "$LOGS/attention_sdpa.log" 2>&1 || status=1
        sed 's/^/# /' "$LOGS/attention_sdpa.log"
    else
        echo "# attention_sdpa.py skipped: python3 has no torch with CUDA"
    fi ;;
esac
exit $status
