#!/usr/bin/env bash
# dev/bench/cpu_step.sh [--before REV] [--steps N]: the CPU trainer's speed against the machine's own FMA peak, in one
# run. A benchmark, not a test (not part of `make test`); run it on an idle machine: the figures are of whatever else
# runs too.
#   1. dev/bench/cpu_gemm.cpp: the FMA peak by its own probe, and each GEMM of GPT-2 124M (N = 256 rows) with its
#      GFLOP/s and share of the peak, at 1 thread and at all.
#   2. train_gpt_cpu -c gpt3_125m --seq 1024 -b 4 -t 64 (256 tokens a step) for N steps (default 6) on the Moby-Dick
#      shards, at 1 thread and at all: the median step, tokens/s, model GFLOP/s (the trainer's FLOPs per token times
#      tokens/s) and their share of the peak, the initialisation's time (the trainer's line) and the whole run's wall
#      time (start, steps and exit).
#   3. the default job's model (./train_gpt_cpu with no flags: gpt3_tiny) for 20 steps without validation or sample,
#      at all threads: the median step and tokens/s (README quotes them).
#   --before REV: the same three measured for the commit REV too (its llmc/ under the same cpu_gemm.cpp, its
#      train_gpt_cpu built from `git archive REV`), each row beside this tree's, and the speed-up.
set -eu
cd "$(dirname "$0")/../.."
before=""; steps=6
while [ $# -gt 0 ]; do
    case "$1" in
        --before) [ $# -ge 2 ] || { echo "error: --before needs a commit" >&2; exit 1; }; before=$2; shift ;;
        --steps) [ $# -ge 2 ] || { echo "error: --steps needs a number" >&2; exit 1; }; steps=$2; shift ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
    shift
done
case "$steps" in ''|*[!0-9]*|0|1) echo "error: --steps expects an integer of at least 2, got '$steps'" >&2; exit 1 ;; esac
data=(data/mobydick_gpt2_train_*.bin)
[ -f "${data[0]}" ] || { echo "error: no ${data[0]} (the Moby-Dick shards; dev/data/prepare makes them)" >&2; exit 1; }
all=$(nproc)
w=build/bench_cpu_step
rm -rf "$w" && mkdir -p "$w"
CXXF=(-O3 -march=native -std=c++17 -fopenmp)

# the trees: this one (after) and REV's (before)
make --no-print-directory train_gpt_cpu > "$w/make.log" 2>&1 || { tail "$w/make.log"; exit 1; }
g++ "${CXXF[@]}" -I. dev/bench/cpu_gemm.cpp -o "$w/cpu_gemm_after"
trees=(after)
if [ -n "$before" ]; then
    rev=$(git rev-parse --short "$before") || { echo "error: --before: no commit '$before'" >&2; exit 1; }
    mkdir -p "$w/before"
    git archive "$rev" | tar -x -C "$w/before"
    make --no-print-directory -C "$w/before" train_gpt_cpu > "$w/make_before.log" 2>&1 || { tail "$w/make_before.log"; exit 1; }
    g++ "${CXXF[@]}" -I"$w/before" dev/bench/cpu_gemm.cpp -o "$w/cpu_gemm_before"
    trees=(before after)
fi
echo "# dev/bench/cpu_step.sh on $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $all cores; this tree: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- llmc train_gpt_cpu.cpp || echo ' (modified)')${before:+; before: $rev}"

echo; echo "## GEMMs (dev/bench/cpu_gemm.cpp)"
for t in "${trees[@]}"; do
    echo; echo "### $t"
    OMP_NUM_THREADS=$all "$w/cpu_gemm_$t" | tee "$w/gemm_$t.txt"
done

echo; echo "## Training step: train_gpt_cpu -c gpt3_125m --seq 1024 -b 4 -t 64, $steps steps, median"
peak() {  # the FMA peak at $1 threads from this tree's cpu_gemm output
    if [ "$1" = 1 ]; then sed -n 's/^FMA peak.*: \([0-9.]*\) GFLOP\/s at 1 thread.*/\1/p' "$w/gemm_after.txt"
    else sed -n 's/^FMA peak.*, \([0-9.]*\) at [0-9]*$/\1/p' "$w/gemm_after.txt"; fi
}
printf '| %-6s | %7s | %8s | %9s | %10s | %8s | %7s | %7s |\n' tree threads "ms/step" "tokens/s" "GFLOP/s" "of peak" "init s" "wall s"
printf '| %-6s | %7s | %8s | %9s | %10s | %8s | %7s | %7s |\n' --- --- --- --- --- --- --- ---
for threads in 1 "$all"; do
    for t in "${trees[@]}"; do
        bin=./train_gpt_cpu; [ "$t" = before ] && bin=$w/before/train_gpt_cpu
        log=$w/step_${t}_$threads.log
        t0=$(date +%s.%N)
        OMP_NUM_THREADS=$threads "$bin" -c gpt3_125m --seq 1024 -b 4 -t 64 -x "$steps" -v 0 -g 0 -o "" -i "${data[@]}" > "$log" 2>&1 ||
            { echo "error: $bin failed (log $log):"; tail -n 3 "$log"; exit 1; }
        t1=$(date +%s.%N)
        ms=$(sed -n 's/^summary: median \([0-9.]*\) ms\/step.*/\1/p' "$log")
        fpt=$(sed -n 's/^| FLOPs per token *| \([0-9.e+]*\) (model).*/\1/p' "$log")
        init=$(sed -n 's/^initialised .* in \([0-9.]*\) s .*/\1/p' "$log")
        awk -v t="$t" -v th="$threads" -v ms="$ms" -v fpt="$fpt" -v pk="$(peak "$threads")" -v init="$init" -v t0="$t0" -v t1="$t1" 'BEGIN {
            tok = 256 / (ms / 1000); gf = tok * fpt / 1e9
            printf "| %-6s | %7d | %8.1f | %9.1f | %10.1f | %7.1f%% | %7s | %7.2f |\n", t, th, ms, tok, gf, 100 * gf / pk, init, t1 - t0 }'
        echo "$ms" > "$w/ms_${t}_$threads"
    done
    if [ -n "$before" ]; then
        awk -v a="$(cat "$w/ms_after_$threads")" -v b="$(cat "$w/ms_before_$threads")" -v th="$threads" \
            'BEGIN { printf "speed-up at %d thread(s): %.2fx\n", th, b / a }'
    fi
done

echo; echo "## The default job's step: ./train_gpt_cpu -x 20 -v 0 -g 0 -o \"\" (gpt3_tiny, its default batch), $all threads, median"
printf '| %-6s | %8s | %9s |\n' tree "ms/step" "tokens/s"
printf '| %-6s | %8s | %9s |\n' --- --- ---
for t in "${trees[@]}"; do
    bin=./train_gpt_cpu; [ "$t" = before ] && bin=$w/before/train_gpt_cpu
    log=$w/default_$t.log
    OMP_NUM_THREADS=$all "$bin" -x 20 -v 0 -g 0 -o "" > "$log" 2>&1 || { echo "error: $bin failed (log $log)"; exit 1; }
    sed -n 's/^summary: median \([0-9.]*\) ms\/step, \([0-9]*\) tokens\/s.*/\1 \2/p' "$log" |
        awk -v t="$t" '{ printf "| %-6s | %8.1f | %9d |\n", t, $1, $2 }'
done
