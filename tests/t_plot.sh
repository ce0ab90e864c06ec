#!/usr/bin/env bash
# scripts/plot.py on two tiny runs of train_gpt_cpu (one process; pp 2 on 2 ranks, with its console log and
# its --plan output, both with --eval). Checks: loss.png, throughput.png, memory.png and eval.png are written, are
# PNG files that matplotlib reads back with more than one colour; the memory figures it plots for each rank equal the
# plan's row of that rank's stage (the CPU trainer's measured bytes equal its plan: tests/t_plan.sh), so
# the rank -> stage map and both readers are right; a directory without metrics.jsonl stops with exit 1
# and a message naming it. Without matplotlib (and no way to install it) the test prints [SKIP].
# About 10 s on 2 busy cores.
set -u
d=build/t_plot.$$
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
if ! $PY -c 'import matplotlib' 2> /dev/null; then
    bash scripts/install_deps.sh > /dev/null 2>&1
    if ! $PY -c 'import matplotlib' 2> /dev/null; then
        echo "[SKIP] scripts/plot.py: matplotlib is not installed and could not be (sudo apt-get install -y python3-matplotlib)"
        exit 0
    fi
fi
base=(-c gpt3_tiny --vocab 301 -b 2 -t 64 -d 128 -x 6 -v 3 --val-batches 2 -g 0 -i data/mobydick.txt -j ""
      --eval tests/data/mc_small.jsonl)
mkdir -p "$d/one"
timeout 120 ./train_gpt_cpu "${base[@]}" -o "$d/one" > "$d/one/train.log" 2>&1 || fail "one-process run: $(tail -2 "$d/one/train.log")"
./train_gpt_cpu --plan "${base[@]}" > "$d/one/plan.txt" 2>&1 || fail "one-process plan"
mkdir -p "$d/pp2"
timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 ./train_gpt_cpu "${base[@]}" --pp 2 -o "$d/pp2" > "$d/pp2/train.log" 2>&1 ||
    fail "pp 2 run: $(tail -2 "$d/pp2/train.log")"
./train_gpt_cpu --plan --world 2 --pp 2 "${base[@]}" > "$d/pp2/plan.txt" 2>&1 || fail "pp 2 plan"

if $PY scripts/plot.py -o "$d/plots" "one process=$d/one" "pp 2=$d/pp2" > "$d/plot.log" 2>&1; then
    ok=1
    for f in loss throughput memory eval; do
        if out=$($PY tests/plot_checks.py png "$d/plots/$f.png" 2>&1); then pass "$f.png: a PNG of $out pixels with content"
        else fail "$f.png: $out"; ok=0; fi
    done
    # memory ROW: measured X MiB, plan Y MiB: three rows (one process, pp 2 rank 0 and 1), equal within 0.001
    if $PY tests/plot_checks.py memory "$d/plot.log"
    then pass "memory.png: every rank's measured MiB equals its stage's plan ($(grep -c '^memory ' "$d/plot.log") ranks: $(grep '^memory ' "$d/plot.log" | sed 's/.*: measured \([0-9.]*\) MiB.*/\1/' | tr '\n' ' '))"
    else fail "memory figures: $(grep '^memory ' "$d/plot.log" | tr '\n' ';')"; fi
else
    fail "scripts/plot.py: $(tail -2 "$d/plot.log")"
fi
mkdir -p "$d/empty"
$PY scripts/plot.py -o "$d/plots2" "$d/empty" > "$d/bad.log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "$d/empty has no metrics.jsonl" "$d/bad.log"; then pass "a directory without metrics.jsonl stops with exit 1 naming it"
else fail "missing metrics.jsonl: exit $rc, $(tail -1 "$d/bad.log")"; fi
[ $status = 0 ] && rm -rf "$d"
exit $status
