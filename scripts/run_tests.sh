#!/usr/bin/env bash
# Runs every test script tests/t_*.sh (sorted), from the repository root, or only those named:
#   scripts/run_tests.sh t_datasets t_tokenizer     (`make test-quick` runs the fast ones this way)
#   scripts/run_tests.sh -j 2                       up to 2 scripts at once (`make test` uses the machine's cores)
# A test prints one line per check: "[PASS] name", "[FAIL] name: detail", or "[SKIP] name: why" for a
# check that cannot run on this machine (no GPU, no nvcc).
# A script counts one failure of its own when it exits non-zero without printing a [FAIL] line, or
# prints no [PASS], [FAIL] or [SKIP] line at all (a test that checked nothing has not passed). A script
# that prints only [SKIP] lines is reported as skipped, not passed.
# With -j N the scripts run side by side (each works in its own build/ folder and reads the programs `make test` built
# first), the longest first; those whose checks time a run against a limit (ALONE: a timeout that must not fire, or
# must fire within seconds) run afterwards, one at a time, on an otherwise idle machine. The table lists the scripts
# in their sorted order either way, each with its own wall time.
# The last lines are the eight slowest scripts, the suite's wall time and "N passed, M failed, K skipped"; the exit
# status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
# run from `make test -jN`: the scripts' own make calls start afresh (no parent jobserver, whose absence make warns of)
unset MAKEFLAGS MFLAGS MAKELEVEL
# OpenMP's threads sleep when they wait instead of spinning: with scripts side by side on every core, a spinning
# thread takes the core from the other script (the emulated test_gpt spent a quarter more CPU time that way)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
jobs=1
if [ "${1:-}" = -j ]; then
    jobs=${2:-}
    [[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "error: scripts/run_tests.sh: -j expects a number of scripts at once, got '$jobs'"; exit 1; }
    shift 2
fi
ALONE=" t_hangs t_signals t_kill9 "
LONGEST=(t_gpu_emulated t_streams t_gpu_layouts t_reference t_gpu_tp t_gpu_multirank t_gpu_sprint t_gpu_pp t_fp8_train t_parallel)
passed=0; failed=0; skipped=0
failures=()   # "script: [FAIL] line", repeated after the table so the last lines of the output name them
log_dir=${TEST_LOG_DIR:-build/test_logs}
mkdir -p "$log_dir"
scripts=(tests/t_*.sh)
if [ $# -gt 0 ]; then
    scripts=()
    for n in "$@"; do
        t=tests/$(basename "${n%.sh}").sh
        [ -f "$t" ] || { echo "error: scripts/run_tests.sh: no test script $t (named by '$n')"; exit 1; }
        scripts+=("$t")
    done
fi

# run_one SCRIPT: runs it into $log_dir/NAME.log and writes "rc seconds" to $log_dir/NAME.done
run_one() {
    local name start rc
    name=$(basename "$1" .sh)
    start=$(date +%s)
    bash "$1" > "$log_dir/$name.log" 2>&1
    rc=$?
    echo "$rc $(( $(date +%s) - start ))" > "$log_dir/$name.done"
}
# report SCRIPT: its row of the table from its log and .done file; adds to the counts
report() {
    local name log rc took p f s verdict
    name=$(basename "$1" .sh)
    log=$log_dir/$name.log
    read -r rc took < "$log_dir/$name.done"
    p=$(grep -c '^\[PASS\]' "$log")
    f=$(grep -c '^\[FAIL\]' "$log")
    s=$(grep -c '^\[SKIP\]' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "[FAIL] $name: exited with status $rc and no [FAIL] line" >> "$log"
    elif [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
        f=1
        echo "[FAIL] $name: printed no [PASS], [FAIL] or [SKIP] line (exit status $rc): it checked nothing" >> "$log"
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    verdict=
    [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && verdict="  SKIPPED: nothing ran here"
    printf '%-28s %4d passed %3d failed %3d skipped  (%ds)%s\n' "$name" "$p" "$f" "$s" "$took" "$verdict"
    if [ "$s" -ne 0 ]; then grep -E '^\[SKIP\]' "$log" | sed 's/^/    /'; fi
    if [ "$f" -ne 0 ]; then
        grep -E '^\[FAIL\]' "$log" | sed 's/^/    /'
        while IFS= read -r line; do failures+=("$name: ${line:0:400}"); done < <(grep -E '^\[FAIL\]' "$log")
        echo "    --- last lines of $log ---"
        tail -n 15 "$log" | sed 's/^/    /'
    fi
}

suite_start=$(date +%s)
for t in "${scripts[@]}"; do rm -f "$log_dir/$(basename "$t" .sh).done"; done
if [ "$jobs" -eq 1 ]; then
    for t in "${scripts[@]}"; do run_one "$t"; report "$t"; done
else
    # the side-by-side part, longest first, then the ALONE scripts one by one
    order=()
    for n in "${LONGEST[@]}"; do
        for t in "${scripts[@]}"; do [ "$(basename "$t" .sh)" = "$n" ] && order+=("$t"); done
    done
    for t in "${scripts[@]}"; do
        n=$(basename "$t" .sh)
        [[ " ${LONGEST[*]} " == *" $n "* ]] || [[ "$ALONE" == *" $n "* ]] || order+=("$t")
    done
    running=0
    for t in "${order[@]}"; do
        if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
        run_one "$t" &
        running=$((running + 1))
    done
    wait
    for t in "${scripts[@]}"; do [[ "$ALONE" == *" $(basename "$t" .sh) "* ]] && run_one "$t"; done
    for t in "${scripts[@]}"; do report "$t"; done
fi
if [ ${#failures[@]} -gt 0 ]; then
    echo "failed checks (full logs under $log_dir/):"
    printf '    %s\n' "${failures[@]}"
fi
# the eight slowest scripts on one line, so that the output's last lines say where the time went
slowest=$(for t in "${scripts[@]}"; do
    n=$(basename "$t" .sh); read -r _ took < "$log_dir/$n.done"; echo "$took $n"
done | sort -rn | head -n 8 | awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1}')
echo "slowest: $slowest"
echo "suite wall time: $(( $(date +%s) - suite_start )) s (${jobs} script(s) at once)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
