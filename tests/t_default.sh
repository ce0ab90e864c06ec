#!/usr/bin/env bash
# The README's main job, shortened: on the shipped Moby-Dick shards (GPT-2 tokens) the
# validation loss starts at the uniform-guess loss ln(50257) = 10.8 and falls by 3 nats, to
# about the level of a unigram model (the training text's token frequencies score 7.6 on the
# validation text), the logs are written, and a sample is printed.
set -u
d=build/t_default
rm -rf "$d"
status=0
./train_gpt_cpu -x 60 -v 30 --val-batches 4 -g 64 -o "$d" > "$d.log" 2>&1 || { echo "[FAIL] default run: $(tail -3 "$d.log")"; exit 1; }
first=$(grep -m1 'val loss' "$d.log" | awk '{print $NF}')
last=$(grep 'val loss' "$d.log" | tail -1 | awk '{print $NF}')
# (a NaN or inf, or a missing value, fails: awk would compare "nan" as a string)
if /usr/bin/python3 tests/metrics_checks.py falls "$first" "$last" 10.5 7.8; then
    echo "[PASS] validation loss falls from $first to $last in 60 steps"
else
    echo "[FAIL] validation loss: first $first, last $last (expected > 10.5 then < 7.8)"; status=1
fi
if grep -q -- '--- sample ---' "$d.log"; then echo "[PASS] a sample is printed"; else echo "[FAIL] no sample printed"; status=1; fi
n=$(grep -c '"loss"' "$d/metrics.jsonl" 2>/dev/null || echo 0)
if [ "$n" = 60 ] && /usr/bin/python3 tests/metrics_checks.py summary "$d" 60 7.8; then  # nan is not JSON: fails
    echo "[PASS] metrics.jsonl has 60 step records and summary.json parses"
else
    echo "[FAIL] metrics.jsonl / summary.json"; status=1
fi
exit $status
