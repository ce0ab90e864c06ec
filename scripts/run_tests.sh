#!/usr/bin/env bash
# Runs every test script tests/t_*.sh (sorted), from the repository root.
# A test prints one line per check: "[PASS] name" or "[FAIL] name: detail".
# A script that exits non-zero without printing a [FAIL] line counts as one failure.
# The last line is "N passed, M failed"; the exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
passed=0; failed=0
log_dir=${TEST_LOG_DIR:-build/test_logs}
mkdir -p "$log_dir"
for t in tests/t_*.sh; do
    name=$(basename "$t" .sh)
    start=$(date +%s)
    bash "$t" > "$log_dir/$name.log" 2>&1
    rc=$?
    p=$(grep -c '^\[PASS\]' "$log_dir/$name.log")
    f=$(grep -c '^\[FAIL\]' "$log_dir/$name.log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "[FAIL] $name: exited with status $rc and no [FAIL] line" >> "$log_dir/$name.log"
    fi
    passed=$((passed + p)); failed=$((failed + f))
    printf '%-28s %4d passed %3d failed  (%ds)\n' "$name" "$p" "$f" "$(( $(date +%s) - start ))"
    if [ "$f" -ne 0 ]; then
        grep -E '^\[FAIL\]' "$log_dir/$name.log" | sed 's/^/    /'
        echo "    --- last lines of $log_dir/$name.log ---"
        tail -n 15 "$log_dir/$name.log" | sed 's/^/    /'
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
