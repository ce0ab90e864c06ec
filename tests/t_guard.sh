#!/usr/bin/env bash
# The numerics guard (llmc/run/guard.h) of both trainers, with a corrupt micro-batch injected by the test hooks
# LLMC_TEST_NAN_STEPS (the first micro-batch's loss scale NaN: its loss and gradients NaN), LLMC_TEST_NAN_GRAD_STEPS
# (its gradients only, under a finite loss: what a backward overflow looks like) and LLMC_TEST_SPIKE_STEPS
# (every target of the step replaced: a batch of wrong labels). The oracle of every decision is the guard's rule
# replayed on the logged losses and norms (tests/metrics_checks.py guard); a skipped step must leave the weights and
# the AdamW moments bit-identical (checkpoints before and after it, cmp), and resuming across a skip must give the
# uninterrupted run's weights to the bit.
#   1. train_gpt_cpu: NaN at step 3, NaN gradients at step 4 (skipped, counted in state.json and in Megatron's line);
#      a skipped step 1 continues as a run that never saw that batch (AdamW's step count); resume from step
#      3; NaN at steps 2-4 with --skip-limit 2 ends the run at step 4 with exit 1, step 3's checkpoint complete and no
#      later one; a wrong-label batch at step 9 with --spike-z 3 --spike-window 4 (skipped), and without the spike
#      guard (not skipped); dp 2 and pp 2 under mpirun: every rank takes the same decision.
#   2. train_gpt.cu's main on emulated GPUs (build/train_gpt_fp32_emu): NaN at step 2 (and NaN gradients at step 3) at
#      one rank, NaN at step 2 at dp 2 zero 1.
#   3. bad guard flags stop with exit 1 naming the flag.
# About 60 s on 2 busy cores.
set -u
d=build/t_guard
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
base=(-c gpt3_tiny --vocab 301 -b 2 -t 32 -d 128 -v 0 -g 0 -i data/mobydick.txt -j "" -n 1 --keep 99)
ck() { echo "$d/$1/ckpt_$(printf %08d "$2")"; }
# same_ck A B: checkpoints A and B (of one layout) hold bit-identical weights and moments: every shard's .bin
same_ck() {
    local f n=0
    for f in "$1"/shard_*.bin; do cmp -s "$f" "$2/$(basename "$f")" || return 1; n=$((n + 1)); done
    [ $n -gt 0 ] && [ $n = "$(ls "$2"/shard_*.bin | wc -l)" ]
}
# same NAME A B: the weights and moments of checkpoints A and B of run NAME are bit-identical
same() { same_ck "$(ck "$1" "$2")" "$(ck "$1" "$3")"; }
# decided NAME Z W SKIPS: the guard's rule replayed on NAME's metrics; sets out
decided() { out=$($PY tests/metrics_checks.py guard "$d/$1/metrics.jsonl" "$2" "$3" "$4"); }

# 1. the CPU trainer
LLMC_TEST_NAN_STEPS=3 LLMC_TEST_NAN_GRAD_STEPS=4 timeout 120 ./train_gpt_cpu "${base[@]}" -x 6 -o "$d/nan" --log-format megatron > "$d/nan.log" 2>&1
rc=$?
if [ $rc = 0 ] && decided nan 0 100 3,4 && same nan 2 4 && grep -q '"skipped":2,' "$d/nan/ckpt_00000006/state.json" &&
   grep -q 'iteration        3/.*number of skipped iterations:   1 | number of nan iterations:   1' "$d/nan.log"; then
    pass "train_gpt_cpu: a NaN batch at step 3, NaN gradients under a finite loss at step 4: $out; weights and moments after step 4 bit-identical to step 2's; state.json counts 2; Megatron's line counts it"
else fail "train_gpt_cpu: NaN at steps 3 and 4: exit $rc, ${out:-}, $(grep -m1 error "$d/nan.log")"; fi
mkdir -p "$d/nan_resumed" && cp -r "$(ck nan 3)" "$d/nan_resumed/"
LLMC_TEST_NAN_STEPS=3 LLMC_TEST_NAN_GRAD_STEPS=4 timeout 120 ./train_gpt_cpu "${base[@]}" -x 6 -o "$d/nan_resumed" --resume auto > "$d/nan_resumed.log" 2>&1
if [ $? = 0 ] && same_ck "$(ck nan 6)" "$(ck nan_resumed 6)"; then
    pass "train_gpt_cpu: resumed from step 3 (between the two skips): step 6's weights and moments bit-identical to the uninterrupted run's"
else fail "train_gpt_cpu: resume across a skip: $(tail -2 "$d/nan_resumed.log")"; fi

# AdamW's step count skips with the update: a run whose step 1 is skipped continues exactly as a run that never saw
# that batch (its checkpoint 1 made into a step-0 state at the same data position, nothing skipped), at a constant lr
LLMC_TEST_NAN_STEPS=1 timeout 120 ./train_gpt_cpu "${base[@]}" -x 3 --schedule constant --warmup 0 -o "$d/count" > "$d/count.log" 2>&1
rc=$?
mkdir -p "$d/count_fresh"
$PY tests/ckpt_edit.py "$(ck count 1)" "$d/count_fresh/ckpt_00000000" step=0 skipped=0 skips_in_a_row=0 > "$d/count_edit.log" 2>&1
timeout 120 ./train_gpt_cpu "${base[@]}" -x 2 --schedule constant --warmup 0 -o "$d/count_fresh" --resume auto > "$d/count_fresh.log" 2>&1
rc2=$?
if [ $rc = 0 ] && [ $rc2 = 0 ] && same_ck "$(ck count 3)" "$(ck count_fresh 2)"; then
    pass "train_gpt_cpu: step 1 skipped, steps 2-3 are AdamW's steps 1-2: bit-identical to a run that starts at step 2's data with nothing skipped"
else fail "train_gpt_cpu: AdamW's step count after a skip: exit $rc, $(tail -1 "$d/count_edit.log") $(tail -2 "$d/count_fresh.log")"; fi

LLMC_TEST_NAN_STEPS=2,3,4 timeout 120 ./train_gpt_cpu "${base[@]}" -x 6 --skip-limit 2 -o "$d/limit" > "$d/limit.log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "step 4: 3 updates in a row skipped.*--skip-limit 2" "$d/limit.log" && [ -f "$(ck limit 3)/DONE" ] &&
   [ ! -e "$(ck limit 4)" ] && same limit 1 3; then
    pass "train_gpt_cpu: NaN at steps 2-4, --skip-limit 2: exit 1 at step 4 ($(grep -m1 -o 'step 4: 3 updates in a row skipped' "$d/limit.log")), step 3's checkpoint complete (weights = step 1's), none later"
else fail "train_gpt_cpu: --skip-limit 2: exit $rc, $(grep -m1 error "$d/limit.log")"; fi

LLMC_TEST_SPIKE_STEPS=9 timeout 120 ./train_gpt_cpu "${base[@]}" -x 10 --spike-z 3 --spike-window 4 -o "$d/spike" > "$d/spike.log" 2>&1
rc=$?
if [ $rc = 0 ] && decided spike 3 4 9 && same spike 8 9 && grep -q "step     9/10 .* update skipped (loss spike)" "$d/spike.log"; then
    pass "train_gpt_cpu: wrong labels at step 9, --spike-z 3 --spike-window 4: $out; step 9 left the weights bit-identical"
else fail "train_gpt_cpu: loss spike: exit $rc, ${out:-}"; fi
LLMC_TEST_SPIKE_STEPS=9 timeout 120 ./train_gpt_cpu "${base[@]}" -x 10 -o "$d/spike_off" > "$d/spike_off.log" 2>&1
rc=$?
if [ $rc = 0 ] && decided spike_off 0 100 none && ! same spike_off 8 9; then
    pass "train_gpt_cpu: the same batch without --spike-z: $out (the guard is off by default)"
else fail "train_gpt_cpu: spike guard off: exit $rc, ${out:-}"; fi

for layout in "dp 2" "pp 2"; do
    name=mpi_${layout/ /}
    LLMC_TEST_NAN_STEPS=2 timeout 120 "${MPIRUN[@]}" -np 2 -x LLMC_TEST_NAN_STEPS ./train_gpt_cpu "${base[@]}" -x 4 --${layout/ / } \
        -o "$d/$name" > "$d/$name.log" 2>&1
    rc=$?
    if [ $rc = 0 ] && decided "$name" 0 100 2 && same "$name" 1 2; then
        pass "train_gpt_cpu --$layout (2 ranks): NaN at step 2 on every rank's first micro-batch: $out, weights unchanged"
    else fail "train_gpt_cpu --$layout: exit $rc, ${out:-}, $(grep -m1 error "$d/$name.log")"; fi
done

# 2. the CUDA trainer on emulated GPUs
ebase=(-c gpt3_tiny --vocab 301 --layers 2 -b 1 -t 32 -d 64 -v 0 -g 0 -i data/mobydick.txt -j "" -n 1 --keep 99)
if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] train_gpt: the CUDA emulation's fiber switch is x86-64 only"
elif ! make -s build/train_gpt_fp32_emu > "$d/build_emu.log" 2>&1; then
    fail "build/train_gpt_fp32_emu builds: $(grep -m 3 error "$d/build_emu.log")"
else
    LLMC_TEST_NAN_STEPS=2 LLMC_TEST_NAN_GRAD_STEPS=3 timeout 300 build/train_gpt_fp32_emu "${ebase[@]}" -x 4 -o "$d/cuda" > "$d/cuda.log" 2>&1
    rc=$?
    if [ $rc = 0 ] && decided cuda 0 100 2,3 && same cuda 1 3; then pass "train_gpt, one emulated GPU: a NaN batch at step 2, NaN gradients under a finite loss at step 3: $out, weights and moments unchanged"
    else fail "train_gpt, one emulated GPU: exit $rc, ${out:-}, $(grep -m1 error "$d/cuda.log")"; fi
    LLMC_TEST_NAN_STEPS=2 EMU_NCCL_TIMEOUT=60 timeout 300 "${MPIRUN[@]}" -np 2 -x LLMC_TEST_NAN_STEPS -x EMU_NCCL_TIMEOUT \
        build/train_gpt_fp32_emu "${ebase[@]}" -d 128 -x 3 --dp 2 --zero 1 -o "$d/cuda_dp2" > "$d/cuda_dp2.log" 2>&1
    rc=$?
    if [ $rc = 0 ] && decided cuda_dp2 0 100 2 && same cuda_dp2 1 2; then pass "train_gpt, dp 2 zero 1 on 2 emulated GPUs: NaN at step 2: $out, weights and moments unchanged"
    else fail "train_gpt, dp 2 zero 1: exit $rc, ${out:-}, $(grep -m1 error "$d/cuda_dp2.log")"; fi
fi

# 3. bad flags
for bad in "--skip-limit -1" "--skip-limit x" "--spike-z -1" "--spike-z nan" "--spike-z inf" "--spike-window 0" "--spike-window 3000000000"; do
    out=$(timeout 60 ./train_gpt_cpu "${base[@]}" -x 1 -o "" $bad 2>&1)
    rc=$?
    flag=${bad%% *}
    if [ $rc = 1 ] && grep -q -- "flag $flag" <<< "$out" && ! grep -q "^step" <<< "$out"; then pass "$bad: exit 1 naming the flag: $(grep -m1 -- "$flag" <<< "$out" | cut -c1-100)"
    else fail "$bad: exit $rc, $(head -c 200 <<< "$out")"; fi
done

[ $status = 0 ] && rm -rf "$d"
exit $status
