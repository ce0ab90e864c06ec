#!/usr/bin/env bash
# Data parallel and ZeRO of the CUDA trainer on emulated GPUs (docs/design.md section 4: every layout computes what one
# process computes). train_gpt.cu's own main, built with g++ against tests/cuda_emu (make build/train_gpt_fp32_emu
# build/train_gpt_emu: every kernel runs as written, NCCL is emulated over MPI, each process is one emulated GPU), runs
# in one process and under mpirun, and is compared with train_gpt_cpu's one-process run of the same model and data:
#   model: gpt3_tiny with 2 layers and 2 heads of 64 (a head dim the bf16 kernels take), vocabulary 301 (padded 384):
#   451,712 parameters, not a multiple of 3 x 4, so dp 3's shards are uneven; 4 steps of -b 1 -t 64 with 4
#   micro-batches (6 for dp 3: two per rank), lr 1e-3 cosine, clipping at 1.0 active on every step (norms 2.8-4.4).
#   1. fp32 build: one rank (no mpirun), then dp2, dp2 zero1, dp4 zero2, dp2 zero3, dp3 zero3 (mpirun -np 2, 2, 4, 2,
#      3): every step's loss and gradient norm (metrics.jsonl) and the final weights (ckpt_00000004/model.safetensors).
#      Then 2 ranks with no layout flag: the planner's choice (llmc/parallel/planner.h) runs, with the one-process losses; and
#      again with a --gpu-mem that only tp 2 / pp 2 layouts fit: the planner picks one and runs it.
#   2. resume: dp2 zero3's step-2 checkpoint continued at one rank, against dp2 zero3's own steps 3-4 and final weights
#      and moments; and train_gpt_cpu's dp2 zero3 step-2 checkpoint continued by the emulated trainer at one rank.
#   3. bf16 build: one rank and dp2 zero3, against the CPU run and against each other; one rank with --attention cudnn
#      and one with --attention wgmma against the CPU run (its losses' distance to our own attention's run printed). The fp16 build likewise (static
#      loss scale 1024), and tp2 against the CPU run.
#   3b. --recompute auto at one rank on an emulated device that act's estimate fits and none's does not: it picks act
#      and trains; on one between act's and selective's it picks selective; --recompute none on the first stops with
#      the estimate's message.
#   4. bad layouts stop with exit status 1 and a message naming the flag: 3 ranks for --dp 2, -d 192 (3 micro-batches)
#      at dp 2.
# A layout whose flags train_gpt does not take fails with the trainer's message. Each layout's line gives its largest
# loss, gradient-norm and weight differences. A job must also show that it ran as its data ranks (a program that trained
# the whole batch on every rank would match the losses too): the config table's row "batch per step | B=1 T=64
# accum=A dp=N" once, with A the micro-batches per rank; metrics.jsonl written once (one line per step); and the
# "memory estimate (bytes)" line's fp32 master weights + AdamW moments per rank equal to one rank's under ZeRO 0 and
# one rank's / N under ZeRO 1-3 (within 1%: the shards' padding).
# Tolerances, fp32 (tests/t_parallel.sh's, whose derivations hold here: the emulated fp32 kernels are one more fp32
# summation order, and the observed one-rank differences are loss 8e-8, norm 1.6e-8 at step 1, weights 2.5e-4):
#   losses LOSS_TOL = 1e-5 absolute; gradient norms at step 1 sqrt(N) 2^-24 relative (N = 256 tokens per step, 384 at
#   dp 3: each gradient element a sum over them, reordered), and the same at step 3 against the CPU trainer resumed
#   from the layout's own step-2 checkpoint (the same weights; later steps drift with the trajectory, which no bound
#   follows: tests/t_parallel.sh); a resumed run's step 3 against the run it continues, likewise. Final weights: per tensor the
#   L2 norm of the difference, in AdamW steps of one element (lr = 1e-3, the default these runs keep; an element's step
#   is lr m / sqrt(v), at most about lr), within WEIGHT_STEP_TOL = 0.5, leaving out the key biases (exact gradient 0:
#   their steps are rounding noise that AdamW amplifies to about lr; tests/weights_checks.py). Any layout fault that
#   gets one element's update wrong moves the tensor by about a step or more; fp32 reordering moves whole tensors by
#   0.01-0.03 of a step (observed: tp2 pp4, tp8, dp2 tp4 pp4), even where one element of a tensor, its gradient near
#   zero at the first step (where AdamW's step is lr g / (|g| + eps)), moves 1e-3 of its tensor's largest weight: the
#   element-wise metric of tests/t_parallel.sh (max |a-b| / (max |b| + 1e-3) <= 1e-3) measures that one element and
#   not the layout. Resumed runs continue the same build, and their weights and moments keep the element-wise metric
#   (WEIGHT_TOL = 1e-3).
# Tolerances, bf16 against the fp32 CPU run: tests/test_gpt.cu's chain at L = 2 layers, tol_logits = (3 + 5L) u of the
# largest logit, u = 2^-8 (the roundings on a path through the model), gradients 2 tol_logits (norms, relative),
# losses 2 x 2 tol_logits x max |logit| absolute (the loss moves at most twice a logit's error, doubled for the drift
# over the steps; max |logit| bounded from the CPU run's weights at every step, tests/weights_checks.py logit_bound),
# and each tensor's 4-step update within 4 x 2 tol_logits (relative L2). These are worst-case bounds, loose (observed
# 100x inside); the fp16 build takes u = 2^-11, here and in the pair bounds below, but for this update bound (measured
# 0.041 in fp16, 0.084 in bf16: AdamW turns an element's near-zero gradient into a step of about lr whatever its
# rounding, tests/gpu_multirank_lib.sh). The layout is held tighter against the bf16 one-rank run, which runs the same
# kernels on the same bf16 weights:
#   step 1's loss is the same micro-batch losses summed in another order: n 2^-24 relative (n = 4 micro-batches);
#   step 1's gradient norm: one rank rounds its bf16 gradient sum n times, dp at most n/dp + 1 times, so the gradients
#   differ by at most 2 n u (test_gpt.cu's accumulation bound), relative; the final update per tensor within 4 times
#   that (test_gpt.cu's factor from gradients to the AdamW update). Two one-rank bf16 runs that differ only in where
#   the gradient sums round (-b 2 and -b 4 against -b 1, the same samples) stay at 6e-5 (norm) and 0.023 (update).
# What train_gpt reads and writes here: the flags --dp N --zero Z (as train_gpt_cpu's) and -b -t -d -x -v -g -i -j -n
# --keep -o --resume auto; in -o, from rank 0 only, metrics.jsonl (step, loss, grad_norm per step) and
# ckpt_0000000K/{model,optim}.safetensors and DONE, in the layout-independent format; on stdout the lines named above
# and "resumed from DIR/ckpt_00000002 at step 2".
# OMP_NUM_THREADS=1, mpirun --oversubscribe: about 40 s while the layouts are refused; about 2-3 minutes on 2 busy
# cores once they all run (each layout about as long as the one-rank fp32 run, 10-20 s; dp 3 half as long again).
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
d=build/t_gpu_multirank
rm -rf "$d" && mkdir -p "$d"
status=0
source tests/gpu_multirank_lib.sh

# the one-process references: train_gpt_cpu with 4 (a checkpoint every step, for the logit bound) and 6 micro-batches
# per step, and the initial weights
CKPT_EVERY=1 run cpu.a4 ./train_gpt_cpu 1 4
rc4=$rc
run cpu.a6 ./train_gpt_cpu 1 6
if [ $rc4 -ne 0 ] || [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process runs: $(why cpu.a4) $(why cpu.a6)"; exit 1; fi
./train_gpt_cpu "${MODEL[@]}" --export-init "$d/init.safetensors" > "$d/init.log" 2>&1 ||
    { echo "[FAIL] train_gpt_cpu --export-init: $(tail -1 "$d/init.log")"; exit 1; }

fp32 one_rank "one rank" 1 4
fp32 dp2 "dp2" 2 4 --dp 2
fp32 dp2_zero1 "dp2 zero1" 2 4 --dp 2 --zero 1
fp32 dp4_zero2 "dp4 zero2" 4 4 --dp 4 --zero 2
fp32 dp2_zero3 "dp2 zero3" 2 4 --dp 2 --zero 3
fp32 dp3_zero3 "dp3 zero3, uneven shards, 2 micro-batches per rank" 3 6 --dp 3 --zero 3

# no layout flag under mpirun: the planner (llmc/parallel/planner.h) picks a dp / ZeRO / recompute / -b layout for the smallest free
# memory of the ranks, prints the choice and runs it; -d keeps the one-process run's samples, so its losses
name=fp32.planned
t0=$SECONDS
EMU_NCCL_TIMEOUT=90 timeout 600 "${MPIRUN[@]}" -np 2 build/train_gpt_fp32_emu "${MODEL[@]}" -t 64 -d 256 -x $STEPS -v 0 -g 0 \
    -i data/mobydick.txt -j "" -o "$d/$name" > "$d/$name.log" 2>&1
rc=$?; took=$((SECONDS - t0))
chosen=$(sed -n 's/^chosen: \(.*\) (the fastest.*/\1/p' "$d/$name.log")
if [ $rc -ne 0 ]; then echo "[FAIL] fp32 no layout flag, 2 ranks: exit $rc: $(why $name)"; status=1
else
    fail=""
    grep -q "planning for the smallest free device memory" "$d/$name.log" || fail+=" no line saying which memory it plans for;"
    [ -n "$chosen" ] || fail+=" no 'chosen:' line;"
    l=$(diff_of $name cpu.a4 1 loss 0)
    within "$l" $LOSS_TOL || fail+=" losses $l > $LOSS_TOL;"
    if [ -z "$fail" ]; then echo "[PASS] fp32 no layout flag, 2 ranks ($took s): the planner chose '$chosen' and ran it; losses vs one process $l (tolerance $LOSS_TOL)"
    else echo "[FAIL] fp32 no layout flag, 2 ranks:$fail"; status=1; fi
fi

# the planner picks model parallelism when data parallelism does not fit: --gpu-mem half-way between the smallest peak
# of a tp 2 or pp 2 layout and the smallest of a dp 2 layout (ZeRO 0-3 at dp 2, sp 0/1 at tp 2; -b 1, 2, 4 dividing the
# batch; each recompute), all from the trainer's own --plan; then 2 ranks with no layout flag run the tp 2 or pp 2
# layout the planner chose, with the one-process losses
planfp32() { build/train_gpt_fp32_emu --plan --world 2 "${MODEL[@]}" -t 64 -d 256 "$@" 2>&1 |
             sed -n 's/^plan bytes stage [0-9]*: .* total \([0-9]*\)$/\1/p' | sort -n | tail -1; }
smallest() { sort -n | head -1; }
peak_dp=$(for z in 0 1 2 3; do for b in 1 2; do for r in none selective full; do
    planfp32 --dp 2 --zero $z -b $b --recompute $r; done; done; done | smallest)
peak_mp=$(for lay in "--pp 2" "--tp 2" "--tp 2 --sp 1"; do for b in 1 2 4; do for r in none selective full; do
    planfp32 $lay -b $b --recompute $r; done; done; done | smallest)
name=fp32.planned_mp
if [ -z "$peak_mp" ] || [ -z "$peak_dp" ] || [ "$peak_mp" -ge "$peak_dp" ]; then
    echo "[FAIL] the planner picks tp 2 or pp 2: their smallest peak '$peak_mp' is not below dp 2's '$peak_dp'"; status=1
else
    mem=$(awk -v a="$peak_mp" -v b="$peak_dp" 'BEGIN { printf "%.9f", (a + b) / 2 / 2^30 }')
    t0=$SECONDS
    EMU_NCCL_TIMEOUT=90 timeout 600 "${MPIRUN[@]}" -np 2 build/train_gpt_fp32_emu "${MODEL[@]}" -t 64 -d 256 -x $STEPS -v 0 \
        -g 0 -i data/mobydick.txt -j "" --gpu-mem "$mem" -o "$d/$name" > "$d/$name.log" 2>&1
    rc=$?; took=$((SECONDS - t0))
    chosen=$(sed -n 's/^chosen: \(.*\) (the fastest.*/\1/p' "$d/$name.log")
    if [ $rc -ne 0 ]; then echo "[FAIL] fp32 --gpu-mem $mem, no layout flag, 2 ranks: exit $rc: $(why $name)"; status=1
    else
        l=$(diff_of $name cpu.a4 1 loss 0)
        if grep -qE "^tp [12] pp [12] dp 1 " <<< "$chosen" && within "$l" $LOSS_TOL; then
            echo "[PASS] fp32 --gpu-mem $mem GiB (between the smallest tp 2 / pp 2 peak, $peak_mp bytes, and dp 2's, $peak_dp), 2 ranks ($took s): the planner chose '$chosen' and ran it; losses vs one process $l (tolerance $LOSS_TOL)"
        else echo "[FAIL] fp32 --gpu-mem $mem, no layout flag, 2 ranks: chose '$chosen' (expected tp 2 or pp 2), losses $l"; status=1; fi
    fi
fi

# the planner charges act's recomputed activation (a memory-bound pass at PlanHardware::mem_bw): with everything
# fitting, the same layout without recompute is faster and chosen
plan=$(build/train_gpt_fp32_emu --plan --world 2 "${MODEL[@]}" -t 64 -d 512 --gpu-mem 80 2>&1)
step_of() { sed -n "s/^ *\(->\)\? *$1 *step \([0-9.e+-]*\) s,.*/\2/p" <<< "$plan" | head -1; }
s_none=$(step_of "tp 1 pp 1 dp 2 zero 0 b 4"); s_act=$(step_of "tp 1 pp 1 dp 2 zero 0 b 4 recompute act")
if [ -n "$s_none" ] && [ -n "$s_act" ] && awk -v a="$s_act" -v n="$s_none" 'BEGIN { exit !(a > n) }' &&
   grep -q "^chosen: tp 1 pp 1 dp 2 zero 0 b 4 (the fastest" <<< "$plan"; then
    echo "[PASS] the planner charges act's recomputed activation ($s_act s against none's $s_none) and takes none"
else echo "[FAIL] the planner between none and act: steps '$s_none' / '$s_act', $(grep '^chosen' <<< "$plan")"; status=1; fi

# --recompute auto (the default) on one rank: on an emulated device between none's estimate and act's, the run takes act
# (the MLP activation recomputed), says why and trains; between act's and selective's it takes selective; --recompute
# none given on the first device stops before step 1 with the estimate's message (exit 1)
est_of() { build/train_gpt_fp32_emu "${MODEL[@]}" -b 16 -t 128 --estimate-memory 80 --recompute "$1" 2>&1 |
           sed -n 's/^memory estimate (bytes): .* total \([0-9]*\)$/\1/p'; }
e_none=$(est_of none); e_act=$(est_of act); e_sel=$(est_of selective)
if [ -z "$e_none" ] || [ -z "$e_act" ] || [ -z "$e_sel" ] || [ "$e_act" -ge "$e_none" ] || [ "$e_sel" -ge "$e_act" ]; then
    echo "[FAIL] --recompute auto: estimates none '$e_none', act '$e_act', selective '$e_sel' (each must be smaller)"; status=1
else
    mib_act=$(awk -v a="$e_none" -v b="$e_act" 'BEGIN { printf "%.3f", (a + b) / 2 / 2^20 }')
    mib_sel=$(awk -v a="$e_act" -v b="$e_sel" 'BEGIN { printf "%.3f", (a + b) / 2 / 2^20 }')
    for mode in auto_act auto_sel none; do
        mib=$mib_act; [ $mode = auto_sel ] && mib=$mib_sel
        EMU_DEVICE_MIB=$mib timeout 600 build/train_gpt_fp32_emu "${MODEL[@]}" -b 16 -t 128 -x 1 -v 0 -g 0 \
            -i data/mobydick.txt -j "" -o "" $([ $mode = none ] && echo "--recompute none") > "$d/recompute_$mode.log" 2>&1
        echo $? > "$d/recompute_$mode.rc"
    done
    for want in act sel; do
        pick=$want; [ $want = sel ] && pick="selective (none needs .*, act"
        mib=$mib_act; [ $want = sel ] && mib=$mib_sel
        if [ "$(cat "$d/recompute_auto_$want.rc")" = 0 ] && grep -q "^--recompute auto: $pick" "$d/recompute_auto_$want.log" &&
           grep -q "^step *1/1" "$d/recompute_auto_$want.log"; then
            echo "[PASS] --recompute auto on one rank, $mib MiB (estimates none $e_none, act $e_act, selective $e_sel bytes): $(grep -m 1 '^--recompute auto' "$d/recompute_auto_$want.log"), and trains"
        else echo "[FAIL] --recompute auto on $mib MiB: exit $(cat "$d/recompute_auto_$want.rc"): $(grep -m 1 -E '^--recompute|error' "$d/recompute_auto_$want.log")"; status=1; fi
    done
    if [ "$(cat "$d/recompute_none.rc")" = 1 ] && grep -q "this run needs about .* GiB are free on the device" "$d/recompute_none.log" &&
       ! grep -q "^step" "$d/recompute_none.log"; then
        echo "[PASS] --recompute none given on the first device stops before step 1 with the estimate's message"
    else echo "[FAIL] --recompute none on $mib_act MiB: exit $(cat "$d/recompute_none.rc"): $(tail -n 1 "$d/recompute_none.log")"; status=1; fi
fi

resume fp32.resume_zero3 "fp32: dp2 zero3's step-2 checkpoint resumed at one rank" fp32.dp2_zero3 fp32.dp2_zero3
# the CPU trainer's checkpoint of the same layout, continued by the CUDA trainer
run cpu.dp2_zero3 ./train_gpt_cpu 2 4 --dp 2 --zero 3
resume fp32.resume_cpu_zero3 "fp32: train_gpt_cpu's dp2 zero3 step-2 checkpoint resumed by train_gpt at one rank" \
    cpu.dp2_zero3 cpu.dp2_zero3

# bf16: against the CPU run (test_gpt.cu's chain) and the layout against the bf16 one-rank run
half_tolerances bf16
run bf16.one_rank build/train_gpt_emu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] bf16 one rank: exit $rc: $(why bf16.one_rank)"; status=1
else
    half_vs_cpu bf16.one_rank
    if [ -z "$fail" ]; then echo "[PASS] bf16 one rank, no mpirun ($took s) within bf16 of the fp32 one-process run: $figures"
    else echo "[FAIL] bf16 one rank vs the fp32 one-process run:$fail ($figures)"; status=1; fi
fi
# One rank with another attention: the bf16 bounds against the CPU run, as our own attention's run above, and the
# losses' distance to that run printed. attention_run FLAG LINE: --attention FLAG, whose start-up line is LINE.
# cudnn: llmc/attention_cudnn.cuh (the emulated cuDNN interprets its graph); wgmma: our Hopper kernels (the emulation has
# wgmma; at this T, 64, the forward stays version 3 and the backward runs version 7)
attention_run() {
    local flag=$1 line=$2
    run "bf16.$flag" build/train_gpt_emu 1 4 --attention "$flag"
    if [ $rc -ne 0 ]; then echo "[FAIL] bf16 --attention $flag: exit $rc: $(why "bf16.$flag")"; status=1
    elif ! grep -q "^$line" "$d/bf16.$flag.log"; then
        echo "[FAIL] bf16 --attention $flag: no line '$line': $(why "bf16.$flag")"; status=1
    else
        half_vs_cpu "bf16.$flag"
        [ -f "$d/bf16.one_rank/metrics.jsonl" ] && figures+="; losses vs --attention flash $(diff_of "bf16.$flag" bf16.one_rank 1 loss 0)"
        if [ -z "$fail" ]; then echo "[PASS] bf16 --attention $flag, one rank ($took s) within bf16 of the fp32 one-process run: $figures"
        else echo "[FAIL] bf16 --attention $flag vs the fp32 one-process run:$fail ($figures)"; status=1; fi
    fi
}
attention_run cudnn "attention: cuDNN 91900's flash attention (--attention cudnn)"
attention_run wgmma "attention: --attention wgmma: forward version 3, backward version 7 of llmc/attention.cuh$"
run bf16.dp2_zero3 build/train_gpt_emu 2 4 --dp 2 --zero 3
if [ $rc -ne 0 ]; then echo "[FAIL] bf16 dp2 zero3 (2 ranks): exit $rc after $took s: $(why bf16.dp2_zero3)"; status=1
else
    half_vs_cpu bf16.dp2_zero3
    guards bf16.dp2_zero3 2 4 bf16.one_rank --zero 3
    figures+="; $mem"
    if [ -z "$fail" ]; then echo "[PASS] bf16 dp2 zero3 (2 ranks, $took s) within bf16 of the fp32 one-process run: $figures"
    else echo "[FAIL] bf16 dp2 zero3 vs the fp32 one-process run:$fail ($figures)"; status=1; fi
    [ -f "$d/bf16.one_rank/metrics.jsonl" ] && half_pair bf16.dp2_zero3 bf16.one_rank
fi
# fp16 (make PRECISION=FP16): the same chain with fp16's u = 2^-11 (8x tighter), under a static loss scale of 1024
# (Paddle's; the build's default, the dynamic scale from 2^32, skips these runs' steps): one rank, with our attention
# and with cuDNN's, against the CPU run; dp2 zero3 (gradients reduced, weights gathered in fp16) against it and
# against the fp16 one-rank run; tp2 (the activations' all-reduces in fp16) against it
if make -s build/train_gpt_fp16_emu > "$d/build_fp16.log" 2>&1; then
    half_tolerances fp16
    half_layout fp16 one_rank "one rank" 1 --loss-scale 1024
    half_layout fp16 cudnn "--attention cudnn, one rank" 1 --loss-scale 1024 --attention cudnn
    half_layout fp16 dp2_zero3 "dp2 zero3" 2 --loss-scale 1024 --dp 2 --zero 3
    half_layout fp16 tp2 tp2 2 --loss-scale 1024 --tp 2
    [ -f "$d/fp16.one_rank/metrics.jsonl" ] && [ -f "$d/fp16.dp2_zero3/metrics.jsonl" ] && half_pair fp16.dp2_zero3 fp16.one_rank
else echo "[FAIL] build/train_gpt_fp16_emu builds: $(grep -m 3 error "$d/build_fp16.log")"; status=1; fi
# Device memory that runs out as a GPU's does (tests/cuda_emu: EMU_DEVICE_MIB, and NCCL's buffers, EMU_NCCL_INIT_MIB
# when a communicator is made and EMU_NCCL_USE_MIB at its first operation). Two ranks hold one communicator in every
# layout (a group of both ranks is the world's), so a layout needs its estimate (the plan's row less its nccl column)
# + INIT + USE on the device. The trainer warms the world up before it reads free memory, plans for that + --nccl-mem
# (the plan charges the world's allowance again), and checks the estimate against what is free once every group has
# done its first operations; so on a device of that need + 1 MiB (the communicators' 2 KiB scratch buffers) the
# planner's pick for unlimited memory runs to the end, on need - 1 MiB with no layout flag it picks another layout
# that fits and runs it, and that pick given as flags on need - 1 MiB stops before step 1 with the estimate's message,
# exit 1, never an out-of-memory inside NCCL or a kernel.
INIT_MIB=48; USE_MIB=80; NCCL_GIB=0.125
oom_run() {  # oom_run NAME DEVICE_MIB FLAGS...: 2 ranks, logs in $d/NAME.log; sets rc
    local name=$1 mib=$2; shift 2
    EMU_DEVICE_MIB=$mib EMU_NCCL_INIT_MIB=$INIT_MIB EMU_NCCL_USE_MIB=$USE_MIB EMU_NCCL_TIMEOUT=90 timeout 600 \
        "${MPIRUN[@]}" -x EMU_DEVICE_MIB -x EMU_NCCL_INIT_MIB -x EMU_NCCL_USE_MIB -np 2 build/train_gpt_fp32_emu \
        "${MODEL[@]}" -t 64 -d 256 -x 2 -v 0 -g 0 -i data/mobydick.txt -j "" --nccl-mem $NCCL_GIB -o "$d/$name" "$@" \
        > "$d/$name.log" 2>&1
    rc=$?
}
chosen_of() { sed -n 's/^chosen: \(.*\) (the fastest.*/\1/p' "$1"; }
as_flags() { awk '{ for (i = 1; i < NF; i += 2) if ($i == "b") printf "-b %s ", $(i + 1); else printf "--%s %s ", $i, $(i + 1) }'; }
build/train_gpt_fp32_emu --plan --world 2 "${MODEL[@]}" -t 64 -d 256 --gpu-mem 80 --nccl-mem $NCCL_GIB > "$d/oom.plan" 2>&1
fastest=$(chosen_of "$d/oom.plan")
need=$(awk -v i=$INIT_MIB -v u=$USE_MIB '/^plan bytes stage/ { for (k = 1; k < NF; k++) { if ($k == "nccl") n = $(k + 1);
       if ($k == "total") t = $(k + 1) } if (t - n > m) m = t - n } END { if (m > 0) printf "%.6f", m / 2^20 + i + u }' "$d/oom.plan")
if [ -z "$fastest" ] || [ -z "$need" ]; then echo "[FAIL] device memory: no pick or plan rows in --plan's output: $(tail -1 "$d/oom.plan")"; status=1
else
    above=$(awk -v n="$need" 'BEGIN { printf "%.6f", n + 1 }'); below=$(awk -v n="$need" 'BEGIN { printf "%.6f", n - 1 }')
    oom_run oom.above "$above"
    lines=$(wc -l 2> /dev/null < "$d/oom.above/metrics.jsonl" || echo 0)
    if [ $rc -eq 0 ] && [ "$(chosen_of "$d/oom.above.log")" = "$fastest" ] && [ "$lines" = 2 ] && grep -q "^NCCL: 1 communicators" "$d/oom.above.log"; then
        echo "[PASS] device memory: on $above MiB (the pick's need + 1 MiB; NCCL $INIT_MIB + $USE_MIB MiB) no layout flag picks '$fastest' and runs to the end"
    else echo "[FAIL] device memory, $above MiB, no layout flag: exit $rc, chose '$(chosen_of "$d/oom.above.log")' (expected '$fastest'), $lines steps: $(why oom.above)"; status=1; fi
    oom_run oom.below "$below"
    other=$(chosen_of "$d/oom.below.log")
    lines=$(wc -l 2> /dev/null < "$d/oom.below/metrics.jsonl" || echo 0)
    if [ $rc -eq 0 ] && [ -n "$other" ] && [ "$other" != "$fastest" ] && [ "$lines" = 2 ]; then
        echo "[PASS] device memory: on $below MiB no layout flag picks '$other' instead and runs to the end"
    else echo "[FAIL] device memory, $below MiB, no layout flag: exit $rc, chose '$other' (expected a layout other than '$fastest'), $lines steps: $(why oom.below)"; status=1; fi
    # shellcheck disable=SC2046
    oom_run oom.flags "$below" $(as_flags <<< "$fastest")
    if [ $rc -eq 1 ] && grep -q "this run needs about .* GiB are free on the device" "$d/oom.flags.log" &&
       ! grep -qE "^step |out of (device )?memory|NCCL (error|failure)|ncclSystemError" "$d/oom.flags.log"; then
        echo "[PASS] device memory: '$fastest' given as flags on $below MiB stops before step 1 with the estimate's message (exit 1), not inside NCCL"
    else echo "[FAIL] device memory, '$fastest' as flags on $below MiB: exit $rc (expected 1 before step 1, the estimate's message): $(grep -m 2 -E 'error|memory|step ' "$d/oom.flags.log")"; status=1; fi
fi

bad "world size 3 is not --dp 2" 3 "--dp 2" --dp 2
EMU_DEVICES=1 bad "2 ranks on a node of one GPU" 2 "2 ranks on this node (local rank 0, from mpirun (OMPI_COMM_WORLD_*)) but 1 visible GPU" --dp 2
# ranks sharing one GPU where the launch says so (LLMC_SHARE_GPU=1, llmc/parallel/comm_nccl.cuh): local rank r on GPU
# r % devices (the emulation refuses an ordinal past its count, as CUDA does), and NCCL's condition named when unmet
EMU_DEVICES=1 LLMC_SHARE_GPU=1 bad "LLMC_SHARE_GPU=1 without a host id per rank" 2 "give each rank its own NCCL_HOSTID" --dp 2
EMU_DEVICES=1 LLMC_SHARE_GPU=yes bad "LLMC_SHARE_GPU=yes" 2 "LLMC_SHARE_GPU='yes': expected 1" --dp 2
# launched as scripts/gpu_check.sh multirank launches them on a GPU (scripts/multirank_lib.sh mr_share_gpu: each rank its
# own NCCL_HOSTID)
mr_launch() { mr_share_gpu "$1"; }
EMU_DEVICES=1 fp32 shared_dp2_zero3 "dp2 zero3, both ranks on one GPU (LLMC_SHARE_GPU=1)" 2 4 --dp 2 --zero 3
EMU_DEVICES=2 fp32 shared_dp4_zero2 "dp4 zero2, 4 ranks on 2 GPUs (LLMC_SHARE_GPU=1)" 4 4 --dp 4 --zero 2
mr_launch() { LAUNCH=("${MPIRUN[@]}" -np "$1"); }
bad "dp 2 does not divide 3 micro-batches" 2 "-d 192" --dp 2 -d 192

[ $status -eq 0 ] && rm -rf "$d"
exit $status
