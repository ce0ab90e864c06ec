#!/usr/bin/env bash
# The seed scripts (scripts/seeds/*.sh, one per published row of ../shared/BENCHMARK_CASES.md; docs/seeds.md).
# Checks, for every script:
#   1. the default mode (the plan at the real size) exits 0 and prints the row's table line with a peak per
#      pipeline stage (one figure per stage: pp of them) and a predicted throughput; with ./train_gpt built (the
#      table's planner, and ./train_gpt_cpu for the rows it cannot plan) the line equals docs/seeds.md's row
#      (regenerate with scripts/seeds/table.sh). A row
#      whose model has no preset prints [SKIP] (passed on as a skip).
#   2. --tiny (the row's layout, model shrunk, on the CPU trainer under mpirun) exits 0: 3 finite losses equal
#      to the one-process run of the shrunk model (tests/t_parallel.sh's rule, applied by the driver). The
#      one-process references are shared between rows of one model family (3 runs in all).
# And once: --tiny against a reference whose losses were moved by 1e-4 exits 1 (the comparison can fail);
# --run without GPUs refuses with exit 1 and a message saying how many GPUs the row needs.
# About 2 minutes on 2 busy cores (36 scripts, up to 8 ranks each).
set -u
d=build/t_seeds.$$
rm -rf "$d" && mkdir -p "$d"
status=0
export SEED_REF_DIR=$d/ref
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
if ! command -v mpirun > /dev/null; then
    echo "[FAIL] mpirun not found: install OpenMPI with 'apt-get install -y openmpi-bin libopenmpi-dev' (or bash scripts/install_deps.sh), then make"
    exit 1
fi
n=0
for s in scripts/seeds/*.sh; do
    b=$(basename "$s" .sh)
    case $b in seed_lib|table) continue ;; esac
    n=$((n + 1))
    bash "$s" > "$d/$b.plan" 2>&1
    rc=$?
    if grep -q '^\[SKIP\]' "$d/$b.plan"; then
        grep '^\[SKIP\]' "$d/$b.plan"
        [ $rc = 0 ] || fail "$b: a skipped row exits $rc"
        continue
    fi
    row=$(grep '^| ' "$d/$b.plan")
    pp=$(sed -n 's/^SEED_PP="\(.*\)"/\1/p' "$s")
    stages=$(echo "$row" | awk -F' [|] ' '{ print $4 }' | tr '/' '\n' | grep -c '^[0-9.]*$')
    tok=$(echo "$row" | awk -F' [|] ' '{ print $6 }')
    if [ $rc = 0 ] && [ "$stages" = "$pp" ] && [[ $tok =~ ^[0-9] ]]; then
        if [ -x ./train_gpt ] && ! grep -qxF -- "$row" docs/seeds.md; then
            fail "$b plan: the table line differs from docs/seeds.md's (run scripts/seeds/table.sh): $row"
        else
            pass "$b plan: $pp stage row(s), predicted $tok tokens/s per rank, as in docs/seeds.md"
        fi
    else
        fail "$b plan: exit $rc, $stages stage figures for pp $pp, throughput '$tok': $(grep -m1 error "$d/$b.plan")"
    fi
    start=$(date +%s.%N)
    bash "$s" --tiny > "$d/$b.tiny" 2>&1
    rc=$?
    t=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ $rc = 0 ] && grep -q 'finite losses equal the one-process run' "$d/$b.tiny"; then
        pass "$b --tiny (${t} s): $(grep -o 'tp [0-9]* pp [0-9]* dp [0-9]* ZeRO [0-9] sp [01] on [0-9]* ranks' "$d/$b.tiny"), $(grep -o 'worst |dloss| [^,]*' "$d/$b.tiny")"
    else
        fail "$b --tiny: exit $rc: $(grep -m1 -e error -e differs "$d/$b.tiny")"
    fi
done
[ $n -ge 30 ] || fail "only $n seed scripts in scripts/seeds"

# the comparison can fail: a reference with every loss moved by 1e-4
mkdir -p "$d/moved"
if [ -s "$SEED_REF_DIR/gpt3/metrics.jsonl" ]; then
    mkdir -p "$d/moved/gpt3"
    /usr/bin/python3 tests/metrics_edit.py "$SEED_REF_DIR/gpt3/metrics.jsonl" "$d/moved/gpt3/metrics.jsonl" --add 1e-4
    SEED_REF_DIR=$d/moved bash scripts/seeds/flagperf_gpt3_6.7b_tp2pp1sh2sp4.sh --tiny > "$d/moved.log" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q 'differs from the one-process run' "$d/moved.log"; then
        pass "--tiny against a reference moved by 1e-4 exits 1 ($(grep -o 'worst |dloss| [^ ]*' "$d/moved.log"))"
    else fail "--tiny against a moved reference: exit $rc"; fi
else
    fail "no gpt3 reference run to move"
fi

# --run refuses without GPUs
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "[SKIP] --run refusal: this machine has GPUs"
else
    bash scripts/seeds/flagperf_gpt3_6.7b_tp1pp1sh2sp8.sh --run > "$d/run.log" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q 'refused: --run needs 8 GPUs' "$d/run.log"; then pass "--run without GPUs refuses with exit 1 naming the 8 GPUs the row needs"
    else fail "--run without GPUs: exit $rc, $(tail -1 "$d/run.log")"; fi
fi
[ $status = 0 ] && rm -rf "$d"
exit $status
