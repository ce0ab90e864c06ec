#!/usr/bin/env bash
# Loss scaling (llmc/loss_scale.h: --loss-scale S|dynamic, Megatron-LM's rule) in both trainers. The oracles:
#   - the run without a scale: a power-of-two scale multiplies and divides exactly, so without an overflow the scaled
#     run's weights and moments are bit-identical to the unscaled run's (the CPU trainer, and train_gpt.cu's bf16
#     and fp32 builds on emulated GPUs), while a dynamic scale grows every step;
#   - Megatron's rule replayed in Python on the logged norms (tests/metrics_checks.py loss_scale): every step's
#     logged scale, and exactly the overflowed steps skipped;
#   - the checkpoints before and after a skipped step (bit-identical weights and moments), and the uninterrupted run
#     for a resume across a change of the scale.
# An overflow is forced by the test hook LLMC_TEST_NAN_GRAD_STEPS (llmc/run/test_hooks.h: NaN gradients under a
# finite loss, what an fp16 backward's overflow gives).
#   1. train_gpt_cpu: bit-identity under a static and a growing dynamic scale; one overflow at hysteresis 1 (the scale
#      halves, one step skipped); overflows at steps 3-9 at hysteresis 2 with --skip-limit 2 (no stop: the scale
#      lowers itself), the same under a static scale and at the floor (both stop: those count); resume across a
#      change of the scale; dp 2, tp 2 and pp 2 (mpirun): the same decisions and scales as one process.
#   2. train_gpt.cu on emulated GPUs (fp32 and bf16 at one GPU; bf16 at dp 2 zero 1, tp 2, pp 2): an overflow skipped
#      and the scale lowered, and the run bit-identical to the one without a scale.
#   2b. the fp16 build on emulated GPUs: the forced overflow at one GPU, dp 2 zero 1, tp 2 and pp 2; its default
#      dynamic scale from 2^32, whose real overflows skip the first steps until the halved scale fits.
#   2c. fp8 delayed under a dynamic scale: an overflow skipped, and the steps after it train as bf16's do.
#   3. bad flags and a bad loss_scale in a checkpoint stop with exit 1 naming the flag or the file.
# About 60 s on 2 cores.
set -u
d=build/t_loss_scale
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
# replay NAME SCALE INIT WINDOW HYST MIN SKIPS: Megatron's rule replayed on NAME's metrics; sets out
replay() { local n=$1; shift; out=; out=$($PY tests/metrics_checks.py loss_scale "$d/$n/metrics.jsonl" "$@"); }
# same_curve A B LAST [SKIP]: A's and B's losses (steps 1..LAST) and norms (but at step SKIP, where both are NaN) are
# equal (as printed: %.9g)
same_curve() {
    local a=$d/$1/metrics.jsonl b=$d/$2/metrics.jsonl skip=${4:-0}
    [ "$($PY tests/metrics_checks.py diff "$a" "$b" 1 loss 0 "$3")" = 0 ] || return 1
    if [ "$skip" = 0 ]; then [ "$($PY tests/metrics_checks.py diff "$a" "$b" 1 grad_norm 0 "$3")" = 0 ]
    else [ "$($PY tests/metrics_checks.py diff "$a" "$b" 1 grad_norm 0 $((skip - 1)))" = 0 ] &&
        [ "$($PY tests/metrics_checks.py diff "$a" "$b" $((skip + 1)) grad_norm 0 "$3")" = 0 ]; fi
}

# 1. the CPU trainer
timeout 120 ./train_gpt_cpu "${base[@]}" -x 5 -o "$d/none" > "$d/none.log" 2>&1
r0=$?
timeout 120 ./train_gpt_cpu "${base[@]}" -x 5 -o "$d/static" --loss-scale 1024 > "$d/static.log" 2>&1
r1=$?
timeout 120 ./train_gpt_cpu "${base[@]}" -x 5 -o "$d/grow" --loss-scale dynamic --initial-loss-scale 65536 --loss-scale-window 1 > "$d/grow.log" 2>&1
r2=$?
if [ $r0$r1$r2 = 000 ] && same_ck "$(ck none 5)" "$(ck static 5)" && same_ck "$(ck none 5)" "$(ck grow 5)" &&
   same_curve none static 5 && same_curve none grow 5 && replay grow dynamic 65536 1 2 1 none; then
    pass "train_gpt_cpu: --loss-scale 1024 and a dynamic scale doubling every step ($out): losses, norms and step 5's weights and moments bit-identical to the run without a scale"
else fail "train_gpt_cpu: scaled runs against the unscaled: exits $r0 $r1 $r2, ${out:-}"; fi

LLMC_TEST_NAN_GRAD_STEPS=3 timeout 120 ./train_gpt_cpu "${base[@]}" -x 5 -o "$d/one" --loss-scale dynamic \
    --initial-loss-scale 1024 --hysteresis 1 --log-format megatron > "$d/one.log" 2>&1
rc=$?
if [ $rc = 0 ] && replay one dynamic 1024 1000 1 1 3 && same_ck "$(ck one 2)" "$(ck one 3)" &&
   grep -q '"skipped":1,' "$(ck one 5)/state.json" && grep -q '"loss_scale":{"scale":512,' "$(ck one 5)/state.json" &&
   grep -q 'iteration        3/.*loss scale: 512.0 .*number of skipped iterations:   1 | number of nan iterations:   0' "$d/one.log" &&
   grep -q 'step     3/5 .*loss scale 512.0 | update skipped (overflow)' "$d/one.log"; then
    pass "train_gpt_cpu: an overflow at step 3, hysteresis 1: $out; step 3 left the weights and moments bit-identical; state.json and Megatron's line count one skip and scale 512"
else fail "train_gpt_cpu: one overflow: exit $rc, ${out:-}, $(grep -m1 error "$d/one.log")"; fi

# overflows at 3-4 (the second halves), growth at 6 (the hysteresis count restored), overflows at 7-11
LLMC_TEST_NAN_GRAD_STEPS=3,4,7,8,9,10,11 timeout 120 ./train_gpt_cpu "${base[@]}" -x 12 -o "$d/run" --loss-scale dynamic \
    --initial-loss-scale 1024 --loss-scale-window 2 --skip-limit 2 > "$d/run.log" 2>&1
rc=$?
if [ $rc = 0 ] && replay run dynamic 1024 2 2 1 3,4,7,8,9,10,11 && same_ck "$(ck run 6)" "$(ck run 11)"; then
    pass "train_gpt_cpu: overflows at steps 3-4 and 7-11, hysteresis 2, window 2, --skip-limit 2: no stop (the scale lowers itself): $out"
else fail "train_gpt_cpu: a run of overflows: exit $rc, ${out:-}, $(grep -m1 error "$d/run.log")"; fi
for v in "fixed --loss-scale 1024" "floor --loss-scale dynamic --initial-loss-scale 4 --min-loss-scale 4"; do
    name=${v%% *}
    # shellcheck disable=SC2086
    LLMC_TEST_NAN_GRAD_STEPS=3,4,5 timeout 120 ./train_gpt_cpu "${base[@]}" -x 6 -o "$d/$name" ${v#* } --skip-limit 2 > "$d/$name.log" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q "step 5: 3 updates in a row skipped (the last: overflow" "$d/$name.log" && [ -f "$(ck "$name" 4)/DONE" ] &&
       [ ! -e "$(ck "$name" 5)" ]; then
        pass "train_gpt_cpu: overflows at steps 3-5 under a $name scale, --skip-limit 2: exit 1 at step 5 (a scale that cannot go lower counts its overflows)"
    else fail "train_gpt_cpu: overflows under a $name scale: exit $rc, $(grep -m1 error "$d/$name.log")"; fi
done

# resume across changes of the scale: overflow at 3 (halved), growth at 5 and 7 (window 2); resumed from step 4
sc=(--loss-scale dynamic --initial-loss-scale 1024 --loss-scale-window 2 --hysteresis 1)
LLMC_TEST_NAN_GRAD_STEPS=3 timeout 120 ./train_gpt_cpu "${base[@]}" -x 8 -o "$d/whole" "${sc[@]}" > "$d/whole.log" 2>&1
r1=$?
mkdir -p "$d/resumed" && cp -r "$(ck whole 4)" "$d/resumed/"
timeout 120 ./train_gpt_cpu "${base[@]}" -x 8 -o "$d/resumed" "${sc[@]}" --resume auto > "$d/resumed.log" 2>&1
r2=$?
st() { grep -o '"loss_scale":{[^}]*}' "$(ck "$1" 8)/state.json"; }
if [ $r1$r2 = 00 ] && replay whole dynamic 1024 2 1 1 3 && same_ck "$(ck whole 8)" "$(ck resumed 8)" && [ -n "$(st whole)" ] &&
   [ "$(st whole)" = "$(st resumed)" ] && [ "$(grep '"step":[5-8],' "$d/whole/metrics.jsonl" | grep -o '"loss_scale":[0-9.e+]*')" = \
   "$(grep '"step":[5-8],' "$d/resumed/metrics.jsonl" | grep -o '"loss_scale":[0-9.e+]*')" ]; then
    pass "train_gpt_cpu: resumed from step 4 (scale $(grep -o '"scale":[0-9]*' "$(ck whole 4)/state.json" | cut -d: -f2), mid-window): steps 5-8's scales, state.json's $(st whole) and the weights bit-identical to the uninterrupted run's"
else fail "train_gpt_cpu: resume across a scale change: exits $r1 $r2, ${out:-}, $(grep -m1 error "$d/resumed.log")"; fi

# resumed with a shorter window than its clean count (1 against step 4's count of 1): it doubles at the next clean step
mkdir -p "$d/shorter" && cp -r "$(ck whole 4)" "$d/shorter/"
timeout 120 ./train_gpt_cpu "${base[@]}" -x 6 -o "$d/shorter" --loss-scale dynamic --initial-loss-scale 1024 --loss-scale-window 1 \
    --hysteresis 1 --resume auto > "$d/shorter.log" 2>&1
rc=$?
s4=$(grep -o '"scale":[0-9]*' "$(ck whole 4)/state.json" | cut -d: -f2)
s5=$(grep '"step":5,' "$d/shorter/metrics.jsonl" | grep -o '"loss_scale":[0-9]*' | cut -d: -f2)
s6=$(grep '"step":6,' "$d/shorter/metrics.jsonl" | grep -o '"loss_scale":[0-9]*' | cut -d: -f2)
if [ $rc = 0 ] && [ -n "$s4" ] && [ "${s5:-}" = $((s4 * 2)) ] && [ "${s6:-}" = $((s4 * 4)) ]; then
    pass "train_gpt_cpu: resumed at step 4 (scale $s4, 1 clean step) with --loss-scale-window 1: $s5 after step 5, $s6 after step 6"
else fail "train_gpt_cpu: resumed with a shorter window: exit $rc, scale ${s4:-?} then ${s5:-?}, ${s6:-?}, $(grep -m1 error "$d/shorter.log")"; fi

# every layout: the one-process run's decisions and scales, its losses to t_parallel's tolerance
LLMC_TEST_NAN_GRAD_STEPS=3 timeout 120 ./train_gpt_cpu "${base[@]}" -x 4 -o "$d/p1" "${sc[@]}" > "$d/p1.log" 2>&1
for layout in "dp 2" "tp 2" "pp 2"; do
    name=mpi_${layout/ /}
    LLMC_TEST_NAN_GRAD_STEPS=3 timeout 120 "${MPIRUN[@]}" -np 2 -x LLMC_TEST_NAN_GRAD_STEPS ./train_gpt_cpu "${base[@]}" -x 4 \
        --${layout/ / } "${sc[@]}" -o "$d/$name" > "$d/$name.log" 2>&1
    rc=$?
    worst=$($PY tests/metrics_checks.py diff "$d/p1/metrics.jsonl" "$d/$name/metrics.jsonl" 1 loss 1 4)
    if [ $rc = 0 ] && replay "$name" dynamic 1024 2 1 1 3 && same_ck "$(ck "$name" 2)" "$(ck "$name" 3)" &&
       $PY tests/metrics_checks.py within "$worst" 1e-5; then
        pass "train_gpt_cpu --$layout (2 ranks): an overflow at step 3: $out, weights unchanged; losses within $worst of one process"
    else fail "train_gpt_cpu --$layout: exit $rc, ${out:-}, loss difference ${worst:-}, $(grep -m1 error "$d/$name.log")"; fi
done

# 2. the CUDA trainer on emulated GPUs (head dim 64, T 64: the attention kernels' shapes)
ebase=(-c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2 -b 1 -t 64 -d 64 -v 0 -g 0 -i data/mobydick.txt -j "" -n 1 --keep 99)
if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] train_gpt: the CUDA emulation's fiber switch is x86-64 only"
elif ! make -s build/train_gpt_emu build/train_gpt_fp32_emu > "$d/build_emu.log" 2>&1; then
    fail "build/train_gpt_emu and build/train_gpt_fp32_emu build: $(grep -m 3 error "$d/build_emu.log")"
else
    # each layout: the run without a scale and the scaled one (doubling on every clean step), an overflow at step 2 in
    # both (skipped by both: the guard's non-finite rule, the scale's overflow); bit-identical after step 3
    sc1=(--loss-scale dynamic --initial-loss-scale 1024 --loss-scale-window 1 --hysteresis 1)
    for layout in "fp32" "bf16" "bf16 --dp 2 --zero 1" "bf16 --tp 2" "bf16 --pp 2"; do
        b=${layout%% *}
        bin=build/train_gpt_emu
        [ $b = fp32 ] && bin=build/train_gpt_fp32_emu
        lf=()
        run=(timeout 300 $bin)
        if [ "$layout" != "$b" ]; then
            # shellcheck disable=SC2206
            lf=(-d 128 ${layout#* })
            run=(timeout 300 "${MPIRUN[@]}" -np 2 -x LLMC_TEST_NAN_GRAD_STEPS -x EMU_NCCL_TIMEOUT $bin)
        fi
        name=cuda_${layout// /}
        LLMC_TEST_NAN_GRAD_STEPS=2 EMU_NCCL_TIMEOUT=60 "${run[@]}" "${ebase[@]}" "${lf[@]}" -x 3 -o "$d/${name}_none" > "$d/${name}_none.log" 2>&1
        r1=$?
        LLMC_TEST_NAN_GRAD_STEPS=2 EMU_NCCL_TIMEOUT=60 "${run[@]}" "${ebase[@]}" "${lf[@]}" -x 3 -o "$d/$name" "${sc1[@]}" > "$d/$name.log" 2>&1
        r2=$?
        if [ $r1$r2 = 00 ] && replay "$name" dynamic 1024 1 1 1 2 && same_ck "$(ck "$name" 1)" "$(ck "$name" 2)" &&
           same_ck "$(ck "${name}_none" 3)" "$(ck "$name" 3)" && same_curve "${name}_none" "$name" 3 2; then
            pass "train_gpt ($layout, emulated GPUs): an overflow at step 2: $out, weights and moments unchanged by it; losses, norms and step 3's weights and moments bit-identical to the run without a scale"
        else fail "train_gpt ($layout): exits $r1 $r2, ${out:-}, $(grep -m1 error "$d/$name.log")"; fi
    done
fi

# 2b. the fp16 build (make PRECISION=FP16) on emulated GPUs: the forced overflow in every layout (scale halved, exactly
# that step skipped, the weights and moments unchanged by it); then the real thing: by default the fp16 build trains
# under the dynamic scale from 2^32, whose first backwards overflow fp16 (the gradient of the loss alone is 2^32 / N):
# those steps are skipped while Megatron's rule (hysteresis 2) halves the scale, until a step's gradients are finite
if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] train_gpt fp16: the CUDA emulation's fiber switch is x86-64 only"
elif ! make -s build/train_gpt_fp16_emu > "$d/build_emu16.log" 2>&1; then
    fail "build/train_gpt_fp16_emu builds: $(grep -m 3 error "$d/build_emu16.log")"
else
    for layout in "fp16" "fp16 --dp 2 --zero 1" "fp16 --tp 2" "fp16 --pp 2"; do
        lf=()
        run=(timeout 300 build/train_gpt_fp16_emu)
        if [ "$layout" != fp16 ]; then
            # shellcheck disable=SC2206
            lf=(-d 128 ${layout#* })
            run=(timeout 300 "${MPIRUN[@]}" -np 2 -x LLMC_TEST_NAN_GRAD_STEPS -x EMU_NCCL_TIMEOUT build/train_gpt_fp16_emu)
        fi
        name=cuda16_${layout// /}
        LLMC_TEST_NAN_GRAD_STEPS=2 EMU_NCCL_TIMEOUT=60 "${run[@]}" "${ebase[@]}" "${lf[@]}" -x 3 -o "$d/$name" "${sc1[@]}" > "$d/$name.log" 2>&1
        rc=$?
        if [ $rc = 0 ] && replay "$name" dynamic 1024 1 1 1 2 && same_ck "$(ck "$name" 1)" "$(ck "$name" 2)" &&
           ! same_ck "$(ck "$name" 2)" "$(ck "$name" 3)"; then
            pass "train_gpt ($layout, emulated GPUs): an overflow at step 2: $out, weights and moments unchanged by it, changed by step 3"
        else fail "train_gpt ($layout): exit $rc, ${out:-}, $(grep -m1 error "$d/$name.log")"; fi
    done
    timeout 300 build/train_gpt_fp16_emu "${ebase[@]}" -x 24 -o "$d/fp16_default" > "$d/fp16_default.log" 2>&1
    rc=$?
    m=$d/fp16_default/metrics.jsonl
    skips=$(grep '"skipped":"overflow"' "$m" 2>/dev/null | grep -o '"step":[0-9]*' | cut -d: -f2 | paste -sd,)
    k=$(grep -c '"skipped":"overflow"' "$m" 2>/dev/null)
    # the skipped steps are the first k, k > 2 (2^32 overflows); the scale after them and the rule replayed; the last loss finite
    if [ $rc = 0 ] && [ "${k:-0}" -gt 2 ] && [ "$k" -lt 24 ] && [ "$skips" = "$(seq -s, 1 "$k")" ] &&
       replay fp16_default dynamic 4294967296 1000 2 1 "$skips" && grep -q '^step    24/24 .*loss scale' "$d/fp16_default.log" &&
       [ "$($PY tests/metrics_checks.py diff "$m" "$m" 24 loss 0 24)" = 0 ]; then  # step 24's loss there and finite
        pass "train_gpt fp16 (emulated GPU), default scaling: steps 1-$k overflow at 2^32 and are skipped ($out), step $((k + 1)) on train with finite gradients"
    else fail "train_gpt fp16 default scaling: exit $rc, skipped ${skips:-none}, ${out:-}, $(grep -m1 error "$d/fp16_default.log")"; fi
fi

# 2c. fp8 under a loss scale (the bf16 build, --fp8 delayed, the dynamic scale from 1024 growing every step): an
# overflow at step 2 is skipped (the rule replayed; the weights and moments unchanged by it) and its NaN gradients
# must not poison delayed scaling (a skipped step drops its amaxes, and amaxes ignore NaN: llmc/fp8.cuh): steps 3-6
# train as the bf16 run with the same overflow does, by FlagPerf's rule from step 3 (mean relative loss difference
# below 2%; gradients left zero or NaN by a poisoned scale would hold the loss near step 2's, 6% above on average)
if [ "$(uname -m)" = x86_64 ] && [ -x build/train_gpt_emu ]; then
    for v in bf16 fp8; do
        LLMC_TEST_NAN_GRAD_STEPS=2 timeout 300 build/train_gpt_emu "${ebase[@]}" -x 6 -o "$d/scaled_$v" "${sc1[@]}" \
            $([ $v = fp8 ] && echo "--fp8 delayed") > "$d/scaled_$v.log" 2>&1
    done
    rel=$($PY scripts/loss_align.py "$d/scaled_fp8/metrics.jsonl" "$d/scaled_bf16/metrics.jsonl" --start 3 2>&1)
    if replay scaled_fp8 dynamic 1024 1 1 1 2 && same_ck "$(ck scaled_fp8 1)" "$(ck scaled_fp8 2)" &&
       grep -q "^fp8 GEMMs in the layers" "$d/scaled_fp8.log" && [[ $rel == *": aligned" ]]; then
        pass "train_gpt --fp8 delayed under a dynamic loss scale (emulated GPU): an overflow at step 2: $out; steps 3-6 against bf16's: $rel"
    else fail "train_gpt --fp8 delayed under a loss scale: ${out:-}; $rel; $(grep -m1 error "$d/scaled_fp8.log")"; fi
fi

# 3. bad flags, a bad checkpoint
for bad in "--loss-scale 0" "--loss-scale -2" "--loss-scale nan" "--loss-scale inf" "--loss-scale dyn" "--initial-loss-scale 0" \
           "--min-loss-scale -1" "--hysteresis 0" "--loss-scale-window 0" "--loss-scale dynamic --initial-loss-scale 4 --min-loss-scale 8"; do
    # shellcheck disable=SC2086
    out=$(timeout 60 ./train_gpt_cpu "${base[@]}" -x 1 -o "" $bad 2>&1)
    rc=$?
    flag=
    for w in $bad; do case $w in --*) flag=$w ;; esac; done  # the last flag named
    if [ $rc = 1 ] && grep -q -- "flag $flag" <<< "$out" && ! grep -q "^step" <<< "$out"; then pass "$bad: exit 1 naming the flag: $(grep -m1 -- "$flag" <<< "$out" | cut -c1-110)"
    else fail "$bad: exit $rc, $(head -c 200 <<< "$out")"; fi
done
mkdir -p "$d/badsrc" "$d/badck"
cp -r "$(ck whole 4)" "$d/badsrc/"
$PY - "$(ck badsrc 4)" <<'EOF'
import sys, re
p = sys.argv[1] + "/state.json"
s = open(p).read()
open(p, "w").write(re.sub(r'"loss_scale":\{"scale":[^,]*', '"loss_scale":{"scale":-1', s))
EOF
# the hashes renewed, so that only the value is wrong
$PY tests/ckpt_edit.py "$(ck badsrc 4)" "$(ck badck 4)" > "$d/badck_edit.log" 2>&1
out=$(timeout 60 ./train_gpt_cpu "${base[@]}" -x 5 -o "$d/badck" "${sc[@]}" --resume auto 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q "state.json.*loss_scale" <<< "$out" && ! grep -q "^step" <<< "$out"; then
    pass "a checkpoint whose loss_scale is -1: exit 1 naming state.json: $(grep -m1 loss_scale <<< "$out" | cut -c1-140)"
else fail "a bad loss_scale in a checkpoint: exit $rc, $(tail -c 300 <<< "$out")"; fi

[ $status = 0 ] && rm -rf "$d"
exit $status
