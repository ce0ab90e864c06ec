#!/usr/bin/env bash
# scripts/loss_align.py, FlagPerf's loss-alignment rule (from step 21 on, mean |L - L_ref| / L_ref < 2%),
# on the metrics.jsonl that train_gpt_cpu writes. Checks: two identical 30-step runs align with a figure
# of exactly 0; a copy of a run with every loss from step 21 on raised by 3% fails with the figure 3%
# (|1.03 L - L| / L), and one raised by 1% passes with 1%; losses raised only before step 21 do not count;
# a 10-step run, a missing file and a malformed line stop with a message and exit 1. A few seconds. Then the rule
# on the fp16 build against the bf16 one, on emulated GPUs (below).
set -u
d=build/t_loss_align.$$
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
train() {  # train DIR STEPS
    ./train_gpt_cpu -c gpt3_tiny --vocab 301 -b 2 -t 32 -x "$2" -v 0 -g 0 -i data/mobydick.txt -j "" -o "$d/$1" > "$d/$1.log" 2>&1
}
# scale IN OUT FACTOR FIRST LAST: metrics.jsonl with the losses of steps FIRST..LAST multiplied by FACTOR
scale() { $PY tests/metrics_edit.py "$1" "$2" --scale "$3" --steps "$4" "$5"; }
train a 30 && train b 30 && train short 10 || fail "train_gpt_cpu runs: $(grep -m1 error "$d"/*.log)"
A=$d/a/metrics.jsonl
out=$($PY scripts/loss_align.py "$d/b/metrics.jsonl" "$A" 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "over steps 21..30 (10 steps) = 0.0000%.*: aligned"; then pass "two identical runs align: $out"
else fail "two identical runs: $out"; fi
scale "$A" "$d/up3.jsonl" 1.03 21 1000
out=$($PY scripts/loss_align.py "$d/up3.jsonl" "$A" 2>&1)
if [ $? -eq 1 ] && echo "$out" | grep -q "= 3.0000%.*NOT aligned"; then pass "losses 3% higher from step 21 fail: $out"
else fail "losses 3% higher from step 21: $out"; fi
scale "$A" "$d/up1.jsonl" 1.01 21 1000
out=$($PY scripts/loss_align.py "$d/up1.jsonl" "$A" 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "= 1.0000%.*: aligned"; then pass "losses 1% higher from step 21 pass: $out"
else fail "losses 1% higher from step 21: $out"; fi
scale "$A" "$d/early.jsonl" 1.5 1 20
out=$($PY scripts/loss_align.py "$d/early.jsonl" "$A" 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "= 0.0000%"; then pass "losses 50% higher before step 21 do not count: $out"
else fail "losses 50% higher before step 21: $out"; fi
out=$($PY scripts/loss_align.py "$d/short/metrics.jsonl" "$A" 2>&1)
if [ $? -eq 1 ] && echo "$out" | grep -q "short/metrics.jsonl has 10 training steps (last 10): the rule compares steps from 21 on"; then
    pass "a 10-step run stops with a message: $out"
else fail "a 10-step run: $out"; fi
out=$($PY scripts/loss_align.py "$d/none.jsonl" "$A" 2>&1)
if [ $? -eq 1 ] && echo "$out" | grep -q "cannot read .*none.jsonl"; then pass "a missing file stops with a message"
else fail "a missing file: $out"; fi
{ head -3 "$A"; echo '{"step": 4, "loss": 1.0'; } > "$d/bad.jsonl"
out=$($PY scripts/loss_align.py "$d/bad.jsonl" "$A" 2>&1)
if [ $? -eq 1 ] && echo "$out" | grep -q "bad.jsonl line 4 is not JSON"; then pass "a malformed line stops with a message naming it"
else fail "a malformed line: $out"; fi

# fp16 against bf16 on emulated GPUs (issue: the seeds' own precision): the same tiny GPT, 30 steps each of
# build/train_gpt_fp16_emu under the FlagPerf GPT-3 rows' loss scaling (dynamic from 1024, PaddleNLP's AMP scale) and of
# build/train_gpt_emu, must align by FlagPerf's rule; the fp16 run must have trained in fp16 (its "fp16 weights" line) under
# the scale (the step lines' "loss scale") without a skipped step. About a minute on 2 cores.
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] fp16 against bf16: the CUDA emulation's fiber switch is x86-64 only"
elif ! make -s build/train_gpt_emu build/train_gpt_fp16_emu > "$d/build_emu.log" 2>&1; then
    fail "build/train_gpt_emu and build/train_gpt_fp16_emu build: $(grep -m 3 error "$d/build_emu.log")"
else
    emu=(-c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2 -b 1 -t 64 -x 30 -v 0 -g 0 -i data/mobydick.txt -j "")
    timeout 600 build/train_gpt_emu "${emu[@]}" -o "$d/bf16" > "$d/bf16.log" 2>&1; r1=$?
    timeout 600 build/train_gpt_fp16_emu "${emu[@]}" --loss-scale dynamic --initial-loss-scale 1024 -o "$d/fp16" > "$d/fp16.log" 2>&1; r2=$?
    out=$($PY scripts/loss_align.py "$d/fp16/metrics.jsonl" "$d/bf16/metrics.jsonl" 2>&1); r3=$?
    skipped=$(grep -c '"skipped"' "$d/fp16/metrics.jsonl" 2>/dev/null)
    if [ $r1$r2$r3 = 000 ] && grep -q "^fp16 weights and activations" "$d/fp16.log" && [ "$(grep -c '^step .*| loss scale' "$d/fp16.log")" = 30 ] &&
       [ "${skipped:-x}" = 0 ]; then
        pass "fp16 (dynamic scale from 1024) against bf16, 30 steps on emulated GPUs: $out"
    else fail "fp16 against bf16: exits $r1 $r2 $r3, ${skipped:-?} skipped steps: $out $(grep -m1 error "$d/fp16.log" "$d/bf16.log")"; fi
fi
[ $status -eq 0 ] && rm -rf "$d"
exit $status
