#!/usr/bin/env bash
# Runs every test script tests/t_*.sh (sorted), from the repository root, or only those named:
#   scripts/run_tests.sh t_datasets t_tokenizer     (`make test-quick` runs the fast ones this way)
# A test prints one line per check: "[PASS] name", "[FAIL] name: detail", or "[SKIP] name: why" for a
# check that cannot run on this machine (no GPU, no nvcc).
# A script counts one failure of its own when it exits non-zero without printing a [FAIL] line, or
# prints no [PASS], [FAIL] or [SKIP] line at all (a test that checked nothing has not passed). A script
# that prints only [SKIP] lines is reported as skipped, not passed.
# The last line is "N passed, M failed, K skipped"; the exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
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
for t in "${scripts[@]}"; do
    name=$(basename "$t" .sh)
    log=$log_dir/$name.log
    start=$(date +%s)
    bash "$t" > "$log" 2>&1
    rc=$?
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
    printf '%-28s %4d passed %3d failed %3d skipped  (%ds)%s\n' "$name" "$p" "$f" "$s" "$(( $(date +%s) - start ))" "$verdict"
    if [ "$s" -ne 0 ]; then grep -E '^\[SKIP\]' "$log" | sed 's/^/    /'; fi
    if [ "$f" -ne 0 ]; then
        grep -E '^\[FAIL\]' "$log" | sed 's/^/    /'
        while IFS= read -r line; do failures+=("$name: ${line:0:400}"); done < <(grep -E '^\[FAIL\]' "$log")
        echo "    --- last lines of $log ---"
        tail -n 15 "$log" | sed 's/^/    /'
    fi
done
if [ ${#failures[@]} -gt 0 ]; then
    echo "failed checks (full logs under $log_dir/):"
    printf '    %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
