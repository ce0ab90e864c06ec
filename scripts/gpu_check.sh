#!/usr/bin/env bash
# scripts/gpu_check.sh: one call on a GPU machine builds, tests and benchmarks the CUDA trainer.
#   1. scripts/gpu_probe.sh (environment, ceilings; its own results file beside this one)
#   2. builds train_gpt, test_gpt, test_gpt_fp32 and train_gpt_cpu with NO_NCCL=1 (one GPU needs neither NCCL nor
#      MPI), and the dev/cuda kernel programs when dev/cuda exists
#   3. tests/t_gpu.sh (test_gpt and test_gpt_fp32 against the PyTorch reference states) and dev/cuda/run_all.sh
#   4. a benchmark table: tokens/s, MFU and peak memory of train_gpt for gpt3_125m, gpt3_1.3b,
#      llama3.2_1b and the largest GPT-3 and LLaMA presets that fit (gpt3_2.7b, gpt3_6.7b, llama3_8b
#      with --recompute full), each a short run (default 20 steps, median after warm-up) on the
#      data/mobydick_gpt2_* shards; beside each, train_gpt.py --train --compile (torch 2.x) on the same
#      config (from train_gpt --print-config) and GPU, and the ratio of the two
# Everything printed also goes to bench/results/gpu_check_<date>_<gpu>.txt, headed by the device, the
# git commit and the command line. Each section runs even when an earlier one failed; the last lines
# say which failed, and the exit status is non-zero if any did.
#   usage: scripts/gpu_check.sh [--steps N] [--skip-probe] [--skip-torch] [--out FILE]
set -u
cd "$(dirname "$0")/.."

cmdline="scripts/gpu_check.sh${*:+ $*}"
steps=20
skip_probe=0
skip_torch=0
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) [ $# -ge 2 ] || { echo "error: --steps needs a number" >&2; exit 1; }; steps=$2; shift ;;
        --skip-probe) skip_probe=1 ;;
        --skip-torch) skip_torch=1 ;;
        --out) [ $# -ge 2 ] || { echo "error: --out needs a file name" >&2; exit 1; }; out=$2; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
    shift
done
case "$steps" in ''|*[!0-9]*) echo "error: --steps expects a positive integer, got '$steps'" >&2; exit 1 ;; esac

PY=$(command -v python3 || echo /usr/bin/python3)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1 | tr -d ' ')
free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null | head -n 1 | tr -d ' ')
gpu_tag=$(echo "${gpu_name:-nogpu}" | tr -c 'A-Za-z0-9.\n-' '_' | sed 's/__*/_/g; s/_$//')
stamp=$(date -u +%Y%m%d-%H%M)
if [ -z "$out" ]; then out="bench/results/gpu_check_${stamp}_${gpu_tag}.txt"; fi
mkdir -p "$(dirname "$out")"
exec > >(tee "$out") 2>&1

commit=$(git rev-parse HEAD 2>/dev/null || echo "none (no commit yet)")
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit (with uncommitted changes)"; fi
echo "# train_gpt GPU check"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "host:    $(hostname 2>/dev/null || echo unknown)"
echo "device:  ${gpu_name:-no GPU found} (${gpu_mib:-?} MiB)"
echo "commit:  $commit"
echo "command: $cmdline"
echo "results: $out"

failed=()
section() { echo; echo "== $1"; }
if [ -z "$gpu_name" ]; then
    echo "error: no GPU (nvidia-smi finds none); this script runs on a GPU machine"
    exit 1
fi

section "probe"
if [ $skip_probe -eq 1 ]; then echo "skipped (--skip-probe)"
else bash scripts/gpu_probe.sh --out "bench/results/probe_${stamp}_${gpu_tag}.txt" || failed+=("probe"); fi

section "build (NO_NCCL=1)"
jobs=$(nproc 2>/dev/null || echo 4)
t0=$(date +%s)
make -j"$jobs" NO_NCCL=1 train_gpt test_gpt test_gpt_fp32 train_gpt_cpu || failed+=("build")
echo "build time: $(( $(date +%s) - t0 )) s"
if [ -f dev/cuda/Makefile ]; then make -j"$jobs" NO_NCCL=1 devcuda || failed+=("build dev/cuda"); fi

section "tests/t_gpu.sh"
bash tests/t_gpu.sh || failed+=("t_gpu")

section "dev/cuda/run_all.sh"
if [ -f dev/cuda/run_all.sh ]; then bash dev/cuda/run_all.sh || failed+=("dev/cuda/run_all"); else echo "no dev/cuda/run_all.sh"; fi

section "benchmark: $steps steps each, median after warm-up; data/mobydick_gpt2_train_*.bin"
data='data/mobydick_gpt2_train_*.bin'
tmp=build/gpu_check
mkdir -p "$tmp"
# a run is tried when its memory estimate fits in the free device memory, less 1 GiB for the CUDA
# context and cuBLASLt's own allocations
free_gib=$(awk -v m="${free_mib:-0}" 'BEGIN { printf "%.1f", m / 1024 - 1 }')
# name | train_gpt flags (batch -b and length -t are also train_gpt.py's --batch and --seq)
benches=(
  "gpt3_125m|-b 16 -t 1024"
  "gpt3_1.3b|-b 8 -t 2048"
  "llama3.2_1b|-b 4 -t 2048"
  "gpt3_2.7b|-b 8 -t 2048 --recompute full"
  "gpt3_6.7b|-b 1 -t 2048 --recompute full --bf16-moments 1"
  "llama3_8b|-b 1 -t 8192 --recompute full --bf16-moments 1"
)
rows=()
for bench in "${benches[@]}"; do
    IFS='|' read -r preset flags <<< "$bench"
    B=$(sed -n 's/.*-b \([0-9]*\).*/\1/p' <<< "$flags")
    T=$(sed -n 's/.*-t \([0-9]*\).*/\1/p' <<< "$flags")
    echo
    echo "-- $preset $flags"
    est=$(./train_gpt -c "$preset" $flags --estimate-memory "$free_gib" 2>&1)
    echo "$est"
    if ! grep -q '^fits' <<< "$est"; then
        rows+=("$(printf '| %-12s | %-44s | %12s | %6s | %8s | %12s | %8s | %6s |' "$preset" "$flags" "no fit" "-" "-" "-" "-" "-")")
        continue
    fi
    log="$tmp/$preset.train_gpt.log"
    timeout 900 ./train_gpt -c "$preset" $flags -x "$steps" -v 0 -g 0 -o "" -i "$data" > "$log" 2>&1 || failed+=("train_gpt $preset")
    grep -E '^(device|memory|step +[0-9]+/|summary|peak)' "$log" | sed -n '1,4p;$p'
    tok=$(sed -n 's/^summary: median [0-9.]* ms\/step, \([0-9]*\) tokens\/s.*/\1/p' "$log")
    fpt=$(sed -n 's/^| FLOPs per token *| \([0-9.e+]*\) (model).*/\1/p' "$log")
    peak=$(sed -n 's/^peak device memory in use: \([0-9.]*\) GiB/\1/p' "$log")
    mfu=$(awk -v t="${tok:-0}" -v f="${fpt:-0}" -v n="$gpu_name" 'BEGIN {
        p = (n ~ /H100|H200|H800/) ? 989e12 : (n ~ /A100|A800/) ? 312e12 : 0
        if (p > 0 && t > 0) printf "%.1f%%", 100 * t * f / p; else printf "-" }')
    ttok="-"; tpeak="-"; ratio="-"
    if [ $skip_torch -eq 0 ]; then
        ./train_gpt -c "$preset" $flags --print-config "$tmp/$preset.json" > /dev/null
        tlog="$tmp/$preset.torch.log"
        timeout 900 "$PY" train_gpt.py --train --compile --config "$tmp/$preset.json" --data "$data" --batch "$B" \
            --seq "$T" --accum 1 --steps "$steps" > "$tlog" 2>&1
        trc=$?
        sed -n '1p;$p' "$tlog"
        # median tok/s after warm-up (the first 5 steps, compilation among them); a baseline that does
        # not run (out of memory without recompute, no torch 2.x) is noted in the table, not a failure
        ttok=$(sed -n 's/^step .* | \([0-9]*\) tok\/s$/\1/p' "$tlog" | tail -n +6 | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }')
        [ $trc -ne 0 ] && ttok="exit $trc"
        tpeak=$(sed -n 's/^peak memory \([0-9]*\) MiB/\1/p' "$tlog" | awk '{ printf "%.2f", $1 / 1024 }')
        ratio=$(awk -v a="${tok:-0}" -v b="${ttok:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }')
    fi
    rows+=("$(printf '| %-12s | %-44s | %12s | %6s | %8s | %12s | %8s | %6s |' "$preset" "$flags" "${tok:--}" "$mfu" "${peak:--}" "${ttok:--}" "${tpeak:--}" "$ratio")")
done

section "results on ${gpu_name} (tokens/s per GPU, MFU at 989 TFLOP/s bf16 for H100/H200, peak memory GiB)"
printf '| %-12s | %-44s | %12s | %6s | %8s | %12s | %8s | %6s |\n' "preset" "train_gpt flags" "tok/s" "MFU" "peak GiB" "torch tok/s" "torch GiB" "ratio"
for r in "${rows[@]}"; do echo "$r"; done
echo "(torch: train_gpt.py --train --compile, bf16 autocast, same B, T and GPU; ratio = train_gpt / torch)"

echo
if [ ${#failed[@]} -eq 0 ]; then echo "all sections passed"; exit 0; fi
echo "failed sections: ${failed[*]}"
exit 1
