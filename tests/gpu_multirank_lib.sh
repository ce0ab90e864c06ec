#!/usr/bin/env bash
# The machinery of the emulated multi-rank tests of train_gpt.cu (tests/t_gpu_multirank.sh, whose header derives the
# tolerances and says what each check shows): sourced by those scripts after they set d (their work folder) and status.
# It checks the tools, builds train_gpt.cu's main against the emulation (fp32 and bf16) and sources the runs and
# comparisons that scripts/gpu_check.sh multirank shares (scripts/multirank_lib.sh: run, why, diff_of, within, weights,
# ckpt, opt_bytes, guards, fp32, half_pair, same_bits), with these programs and launcher: the emulated builds, ranks
# under mpirun, each layout compared with train_gpt_cpu's one-process run (cpu.aACCUM, run first) and its step 3 with
# train_gpt_cpu continuing the layout's step-2 checkpoint. Defined here as well:
#   half_tolerances BUILD, half_vs_cpu NAME: a bf16 or fp16 run against train_gpt_cpu's one-process run cpu.a4
#   half_layout BUILD NAME LABEL NP FLAGS...: the bf16 or fp16 build's run BUILD.NAME (4 micro-batches), one line
#       against cpu.a4
#   bad LABEL NP PATTERN FLAGS...: a layout that must stop with exit 1 and a message naming PATTERN
#   resume NAME LABEL FROM CONTINUING [NP FLAGS...]: FROM's step-2 checkpoint continued (one rank by default)
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
MR_FP32=build/train_gpt_fp32_emu
MR_REF_PROG=./train_gpt_cpu
MR_CONVERT=./build/ckpt_convert
mr_ref() { echo "cpu.a$1"; }
mr_limit() { echo 600; }
mr_launch() { LAUNCH=("${MPIRUN[@]}" -np "$1"); }
source scripts/multirank_lib.sh

[ -x ./train_gpt_cpu ] || { echo "[FAIL] ./train_gpt_cpu is not built: run make train_gpt_cpu"; exit 1; }
source tests/mpi_needed.sh
for b in fp32 bf16; do
    target=build/train_gpt_emu; [ $b = fp32 ] && target=build/train_gpt_fp32_emu
    if make -s "$target" > "$d/build_$b.log" 2>&1; then echo "[PASS] train_gpt.cu's main builds against the emulation ($b: $target)"
    else echo "[FAIL] train_gpt.cu's main builds against the emulation ($b): $(grep -m 3 error "$d/build_$b.log")"; exit 1; fi
done
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
MODEL=(-c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2)

# bad layouts (issue: stop on every rank with a message naming the flag, exit 1): mpirun's status 1, the flag with its
# value in the output, no step trained, within 60 s
bad() {
    local label=$1 np=$2 pattern=$3; shift 3
    local args=("${MODEL[@]}" -b 1 -t 64 -x 1 -v 0 -g 0 -i data/mobydick.txt -j "" -o "" "$@") out rc
    if [ "$np" = 1 ]; then out=$(timeout 60 build/train_gpt_fp32_emu "${args[@]}" 2>&1)
    else out=$(EMU_NCCL_TIMEOUT=30 timeout 60 "${MPIRUN[@]}" -np "$np" build/train_gpt_fp32_emu "${args[@]}" 2>&1); fi
    rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$pattern" <<< "$out" && ! grep -q "^step" <<< "$out"; then
        echo "[PASS] bad layout: $label: exit 1 naming '$pattern': $(grep -m 1 -F -- "$pattern" <<< "$out" | cut -c1-150)"
    else
        echo "[FAIL] bad layout: $label: exit $rc, want 1 and a message naming '$pattern': $(head -c 300 <<< "$out" | tr '\n' ' ')"
        status=1
    fi
}

# resume NAME LABEL FROM CONTINUING [NP FLAGS...]: FROM's step-2 checkpoint continued (fp32) at one rank, or at NP ranks
# with FLAGS, must continue as CONTINUING did (steps 3-4, final weights and moments) and stay with the CPU run
resume() {
    local name=$1 label=$2 from=$3 cont=$4 np=${5:-1}
    shift 4; [ $# -gt 0 ] && shift
    if [ ! -f "$d/$from/ckpt_00000002/DONE" ]; then
        echo "[FAIL] $label: no complete step-2 checkpoint in $d/$from: $(why "$from")"; status=1; return
    fi
    mkdir -p "$d/$name" && cp -r "$d/$from/ckpt_00000002" "$d/$name/"
    run "$name" build/train_gpt_fp32_emu "$np" 4 --resume auto "$@"
    if [ $rc -ne 0 ]; then echo "[FAIL] $label: exit $rc: $(why "$name")"; status=1; return; fi
    local l lc n fail="" wm wo n1tol
    n1tol=$(norm_tol_1 256)  # step 3 starts from the same checkpoint in both: only the summation order differs
    grep -q "resumed from .*ckpt_00000002 at step 2" "$d/$name.log" || fail+=" no 'resumed from ...ckpt_00000002 at step 2' line;"
    lc=$(diff_of "$name" "$cont" 3 loss 0)
    l=$(diff_of "$name" cpu.a4 3 loss 0)
    n=$(diff_of "$name" "$cont" 3 grad_norm 1 3)
    within "$lc" $LOSS_TOL || fail+=" losses vs continuing $lc > $LOSS_TOL;"
    within "$l" $LOSS_TOL || fail+=" losses vs one process $l > $LOSS_TOL;"
    within "$n" "$n1tol" || fail+=" step-3 gradient norm vs continuing $n > $n1tol;"
    weights compare "$(ckpt "$name" $STEPS model)" "$(ckpt "$cont" $STEPS model)" $WEIGHT_TOL
    wm=$wout; [ $wok = 1 ] || fail+=" final weights $wm > $WEIGHT_TOL;"
    weights compare "$(ckpt "$name" $STEPS optim)" "$(ckpt "$cont" $STEPS optim)" $WEIGHT_TOL
    wo=$wout; [ $wok = 1 ] || fail+=" final AdamW moments $wo > $WEIGHT_TOL;"
    local figures="steps 3-$STEPS losses vs continuing $lc, vs one process $l (tolerance $LOSS_TOL), step-3 gradient norm $n ($n1tol), final weights $wm, moments $wo ($WEIGHT_TOL)"
    if [ -z "$fail" ]; then echo "[PASS] $label ($took s): $figures"
    else echo "[FAIL] $label:$fail ($figures)"; status=1; fi
}

# half_tolerances BUILD (bf16 or fp16): test_gpt.cu's chain (the header of tests/t_gpu_multirank.sh) at L = 2 layers
# with the build's unit roundoff u (2^-8, 2^-11) and the largest logit bounded from the CPU run's weights (cpu.a4, a
# checkpoint every step, and $d/init.safetensors): sets TOL_LOGITS, HALF_LOSS_TOL, HALF_NORM_TOL, HALF_UPDATE_TOL and
# the pair tolerances (pair_tolerances), and prints them
half_tolerances() {
    local bound U
    case $1 in bf16) U=256 ;; fp16) U=2048 ;; *) echo "half_tolerances: unknown build '$1'"; exit 1 ;; esac
    TOL_LOGITS=$(awk -v U=$U 'BEGIN { printf "%.6g", (3 + 5 * 2) / U }')
    HALF_NORM_TOL=$(awk -v t="$TOL_LOGITS" 'BEGIN { printf "%.4g", 2 * t }')
    # the update against the fp32 run keeps bf16's bound in fp16: its error is not u's but AdamW's, which turns an
    # element's near-zero gradient into a step of about lr whatever its rounding (fp16 measured 0.041 at h.1.fc2.b, one
    # element of 128 stepping -0.44 lr against the fp32 run's -1.41 lr; bf16 0.084)
    HALF_UPDATE_TOL=$(awk 'BEGIN { printf "%.4g", 4 * 2 * (3 + 5 * 2) / 256 }')
    pair_tolerances $U
    bound=$($PY tests/weights_checks.py logit_bound "$d/init.safetensors" "$(ckpt cpu.a4 1 model)" "$(ckpt cpu.a4 2 model)" \
            "$(ckpt cpu.a4 3 model)" 2>&1)
    HALF_LOSS_TOL=$(awk -v t="$TOL_LOGITS" -v m="$bound" 'BEGIN { printf "%.4g", 2 * 2 * t * m }')
    echo "$1 tolerances: logits $TOL_LOGITS of max |logit| <= $bound: losses $HALF_LOSS_TOL, gradient norms $HALF_NORM_TOL (relative), 4-step update per tensor $HALF_UPDATE_TOL"
}
# half_vs_cpu NAME: a bf16 run against cpu.a4 (after half_tolerances); sets fail and figures
half_vs_cpu() {
    local l n
    l=$(diff_of "$1" cpu.a4 1 loss 0)
    n=$(diff_of "$1" cpu.a4 1 grad_norm 1)
    weights update "$d/init.safetensors" "$(ckpt "$1" $STEPS model)" "$(ckpt cpu.a4 $STEPS model)" "$HALF_UPDATE_TOL"
    fail=""
    within "$l" "$HALF_LOSS_TOL" || fail+=" losses $l > $HALF_LOSS_TOL;"
    within "$n" "$HALF_NORM_TOL" || fail+=" gradient norms $n > $HALF_NORM_TOL;"
    [ $wok = 1 ] || fail+=" update $wout > $HALF_UPDATE_TOL;"
    figures="losses $l ($HALF_LOSS_TOL), gradient norms $n ($HALF_NORM_TOL), 4-step update per tensor $wout ($HALF_UPDATE_TOL)"
}
# half_layout BUILD NAME LABEL NP FLAGS...: BUILD.NAME (BUILD bf16: build/train_gpt_emu, fp16:
# build/train_gpt_fp16_emu) on NP ranks, 4 micro-batches a step, against cpu.a4 (after half_tolerances BUILD): a
# [PASS] or [FAIL] line
half_layout() {
    local build=$1 name=$1.$2 label=$3 np=$4 prog=build/train_gpt_emu; shift 4
    [ "$build" = fp16 ] && prog=build/train_gpt_fp16_emu
    run "$name" "$prog" "$np" 4 "$@"
    if [ $rc -ne 0 ]; then echo "[FAIL] $build $label ($np ranks): exit $rc after $took s: $(why "$name")"; status=1; return; fi
    half_vs_cpu "$name"
    if [ -z "$fail" ]; then echo "[PASS] $build $label ($np ranks, $took s) within $build of the fp32 one-process run: $figures"
    else echo "[FAIL] $build $label vs the fp32 one-process run:$fail ($figures)"; status=1; fi
}
