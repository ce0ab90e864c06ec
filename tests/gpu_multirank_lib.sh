#!/usr/bin/env bash
# The machinery of the emulated multi-rank tests of train_gpt.cu (tests/t_gpu_multirank.sh, whose header derives the
# tolerances and says what each check shows): sourced by those scripts after they set d (their work folder) and status.
# It checks the tools, builds train_gpt.cu's main against the emulation (fp32 and bf16) and defines:
#   run, why, diff_of, within, weights, ckpt, opt_bytes, guards: one job and the comparisons of its outputs
#   fp32 NAME LABEL NP ACCUM FLAGS...: one fp32 layout against train_gpt_cpu's one-process run (cpu.aACCUM, run first)
#   bf16_tolerances, bf16_vs_cpu NAME: a bf16 run against train_gpt_cpu's one-process run cpu.a4
#   bad LABEL NP PATTERN FLAGS...: a layout that must stop with exit 1 and a message naming PATTERN
#   resume NAME LABEL FROM CONTINUING [NP FLAGS...]: FROM's step-2 checkpoint continued (one rank by default)
#   bf16_tolerances, bf16_vs_cpu NAME: the bf16 build against the fp32 CPU run
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
STEPS=4
LOSS_TOL=1e-5
WEIGHT_TOL=1e-3
LR=1e-3            # the trainers' default -l, which these runs keep: no AdamW step moves an element further
WEIGHT_STEP_TOL=0.5
norm_tol_1() { awk -v n="$1" 'BEGIN { printf "%.3g", sqrt(n) * 2^-24 }'; }  # N tokens per step
# bf16: L = 2
TOL_LOGITS=$(awk 'BEGIN { printf "%.6g", (3 + 5 * 2) / 256 }')
BF16_NORM_TOL=$(awk -v t="$TOL_LOGITS" 'BEGIN { printf "%.4g", 2 * t }')
BF16_UPDATE_TOL=$(awk -v t="$TOL_LOGITS" 'BEGIN { printf "%.4g", 4 * 2 * t }')
N_MICRO=4
PAIR_LOSS_TOL=$(awk -v n=$N_MICRO 'BEGIN { printf "%.3g", n * 2^-24 }')
PAIR_NORM_TOL=$(awk -v n=$N_MICRO 'BEGIN { printf "%.4g", 2 * n / 256 }')
PAIR_UPDATE_TOL=$(awk -v n=$N_MICRO 'BEGIN { printf "%.4g", 4 * 2 * n / 256 }')

[ -x ./train_gpt_cpu ] || { echo "[FAIL] ./train_gpt_cpu is not built: run make train_gpt_cpu"; exit 1; }
if ! command -v mpirun > /dev/null || ! command -v mpicxx > /dev/null; then
    echo "[FAIL] mpirun / mpicxx not found: install OpenMPI with 'apt-get install -y openmpi-bin libopenmpi-dev' (or bash scripts/install_deps.sh)"
    exit 1
fi
for b in fp32 bf16; do
    target=build/train_gpt_emu; [ $b = fp32 ] && target=build/train_gpt_fp32_emu
    if make -s "$target" > "$d/build_$b.log" 2>&1; then echo "[PASS] train_gpt.cu's main builds against the emulation ($b: $target)"
    else echo "[FAIL] train_gpt.cu's main builds against the emulation ($b): $(grep -m 3 error "$d/build_$b.log")"; exit 1; fi
done
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
MODEL=(-c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2)

# run NAME PROGRAM NP ACCUM FLAGS...: STEPS steps of ACCUM micro-batches into $d/NAME (checkpoints at steps 2 and 4,
# every step with CKPT_EVERY=1), log $d/NAME.log; sets rc and took (seconds). NP 1 runs the program alone, more under mpirun. A rank waiting on a
# collective longer than 90 s ends the job (the emulation's deadlock timeout).
run() {
    local name=$1 prog=$2 np=$3 accum=$4; shift 4
    local args=("${MODEL[@]}" -b 1 -t 64 -d $((accum * 64)) -x $STEPS -v 0 -g 0 -i data/mobydick.txt -j ""
                -n "${CKPT_EVERY:-2}" --keep 9 -o "$d/$name")
    local t0=$SECONDS
    if [ "$np" = 1 ]; then timeout 600 "$prog" "${args[@]}" "$@" > "$d/$name.log" 2>&1
    else EMU_NCCL_TIMEOUT=90 timeout 600 "${MPIRUN[@]}" -np "$np" "$prog" "${args[@]}" "$@" > "$d/$name.log" 2>&1; fi
    rc=$?
    took=$((SECONDS - t0))
}
# why NAME: the first error line of a run's log (the trainer's or the emulation's message)
why() { grep -m 1 -E 'error|EMU|deadlock|abort' "$d/$1.log" || tail -n 1 "$d/$1.log"; }
# diff_of A B FIRST KEY REL [LAST]: worst difference of KEY over steps FIRST..LAST (tests/metrics_checks.py diff)
diff_of() { $PY tests/metrics_checks.py diff "$d/$1/metrics.jsonl" "$d/$2/metrics.jsonl" "$3" "$4" "$5" "${6:-1000000000}"; }
within() { $PY tests/metrics_checks.py within "$1" "$2"; }
# weights MODE ARGS...: tests/weights_checks.py's "WORST at TENSOR"; sets wok (1 within the tolerance)
weights() {
    wout=$($PY tests/weights_checks.py "$@" 2>&1) && wok=1 || wok=0
}
# ckpt NAME STEP FILE: run NAME's step-STEP checkpoint in the single-file form, FILE (model or optim).safetensors: the
# sharded checkpoint's whole tensors by table name (build/ckpt_convert --single, once per checkpoint written)
ckpt() {
    local step; step=$(printf %08d "$2")
    local dir="$d/$1/ckpt_$step" out="$d/$1.whole"
    if [ ! "$out/ckpt_$step/DONE" -nt "$dir/DONE" ]; then
        ./build/ckpt_convert "$dir" --single "$out" > /dev/null 2> "$out.err" || { cat "$out.err" >&2; echo "$out/ckpt_$step/$3.safetensors"; return 1; }
    fi
    echo "$out/ckpt_$step/$3.safetensors"
}
# opt_bytes NAME: master weights + AdamW moments of the run's first "memory estimate (bytes)" line (rank 0's)
opt_bytes() {
    sed -n 's/^memory estimate (bytes):.* master \([0-9]*\) moments \([0-9]*\) .*/\1 \2/p' "$d/$1.log" | head -1 |
        awk '{ print $1 + $2 }'
}
# guards NAME NP ACCUM ONE FLAGS...: that the job really ran as its layout, appended to $fail: dp = NP / (tp pp) from
# FLAGS; the config table's "batch per step" row printed once with accum=ACCUM/dp dp=dp, metrics.jsonl written once
# (STEPS lines), and rank 0's optimizer state (fp32 master weights and moments, the memory estimate) against ONE's (the
# one-rank run of the same build): equal under ZeRO 0 with tp = pp = 1; ONE's / dp under ZeRO >= 1 (shards padded to
# equal 16-byte-aligned counts: within 1%); with tp alone, below ONE's x (1/tp + 0.15) (at these tiny shapes the
# replicated tensors, norms, biases and the position embedding, and the vocabulary padded to a multiple of 128 tp add
# up to 15% of one rank's state; a rank holding the whole model is far above) and at least ONE's / NP; with pp, below
# 99% of ONE's / (dp under ZeRO >= 1) (with tp too: ONE's x (1/(tp, and dp under ZeRO >= 1) + 0.15)) and at least
# half of ONE's / NP: rank 0 holds the first stage
# only, whose share is uneven (the embeddings, and the head on the last stage). And on NP > 1 every rank's bytes by
# kind allocated equal its estimate's (the trainer's "memory per rank" table). Sets mem (the figure for the report).
guards() {
    local name=$1 np=$2 accum=$3 one=$4; shift 4
    local z=0 tp=1 pp=1 dp rows lines mine ref
    [[ " $* " =~ \ --zero\ ([0-3])\  ]] && z=${BASH_REMATCH[1]}
    [[ " $* " =~ \ --tp\ ([0-9]+)\  ]] && tp=${BASH_REMATCH[1]}
    [[ " $* " =~ \ --pp\ ([0-9]+)\  ]] && pp=${BASH_REMATCH[1]}
    dp=$((np / (tp * pp)))
    rows=$(grep -c "batch per step .* accum=$((accum / dp)) dp=$dp " "$d/$name.log")
    [ "$rows" = 1 ] || fail+=" the config table's row 'batch per step | B=1 T=64 accum=$((accum / dp)) dp=$dp' printed $rows times, not once;"
    lines=$(wc -l 2> /dev/null < "$d/$name/metrics.jsonl" || echo 0)
    [ "$lines" = "$STEPS" ] || fail+=" metrics.jsonl has $lines lines, not $STEPS;"
    # every rank's allocations by kind equal its estimate (the "memory per rank" table: measured (formula), MiB)
    if [ "$np" -gt 1 ]; then
        rows=$(grep -A$((np + 1)) "^memory per rank, MiB: measured (formula)" "$d/$name.log" | grep -cE '^ +[0-9]+ ')
        lines=$(grep -A$((np + 1)) "^memory per rank, MiB: measured (formula)" "$d/$name.log" | grep -E '^ +[0-9]+ ' |
                tr -d '()|' | awk '$5 != $6 || $7 != $8 || $9 != $10 || $11 != $12' | head -2)
        [ "$rows" = "$np" ] || fail+=" the memory table has $rows rows, not $np;"
        [ -z "$lines" ] || fail+=" allocations differ from the estimate: $lines;"
    fi
    mine=$(opt_bytes "$name"); ref=$(opt_bytes "$one")
    mem="optimizer state per rank ${mine:-?} bytes of one rank's ${ref:-?} (tp $tp pp $pp dp $dp ZeRO $z)"
    if [ -z "$mine" ] || [ -z "$ref" ]; then fail+=" no 'memory estimate (bytes): ... master M moments M ...' line;"; return; fi
    if ! awk -v m="$mine" -v r="$ref" -v n="$np" -v dp="$dp" -v mp=$((tp * pp)) -v z="$z" -v pp="$pp" -v tp="$tp" 'BEGIN {
            d = tp * (z > 0 ? dp : 1)
            if (pp > 1) exit !(m >= r / (2 * n) && m <= (tp > 1 ? r * (1 / d + 0.15) : 0.99 * r / d))
            if (mp > 1) exit !(m >= r / n && m <= r * (1 / mp + 0.15))
            exit !(z == 0 ? m == r : m >= r / dp && m <= 1.01 * r / dp) }'; then
        fail+=" optimizer state per rank $mine bytes against one rank's $ref (tp $tp pp $pp dp $dp ZeRO $z);"
    fi
}


# fp32 NAME LABEL NP ACCUM FLAGS...: one fp32 layout against the CPU run with ACCUM micro-batches
fp32() {
    local name=fp32.$1 label=$2 np=$3 accum=$4; shift 4
    local base=cpu.a$accum ranks="$np ranks"
    [ "$np" = 1 ] && ranks="one rank, no mpirun"
    run "$name" build/train_gpt_fp32_emu "$np" "$accum" "$@"
    if [ $rc -ne 0 ]; then
        echo "[FAIL] fp32 $label ($ranks): exit $rc after $took s: $(why "$name")"; status=1; return
    fi
    local n1tol l n1 n
    fail=""
    guards "$name" "$np" "$accum" fp32.one_rank "$@"
    n1tol=$(norm_tol_1 $((accum * 64)))
    l=$(diff_of "$name" $base 1 loss 0)
    n1=$(diff_of "$name" $base 1 grad_norm 1 1)
    # step 3 from the layout's own step-2 weights: the CPU trainer's one process resumed from its checkpoint
    local layout_took=$took
    mkdir -p "$d/$name.at2" && cp -r "$d/$name/ckpt_00000002" "$d/$name.at2/" 2>/dev/null
    run "$name.at2" ./train_gpt_cpu 1 "$accum" --resume auto
    took=$layout_took
    n=$(diff_of "$name" "$name.at2" 3 grad_norm 1 3)
    weights steps "$(ckpt "$name" $STEPS model)" "$(ckpt $base $STEPS model)" $LR $WEIGHT_STEP_TOL
    within "$l" $LOSS_TOL || fail+=" losses $l > $LOSS_TOL;"
    within "$n1" "$n1tol" || fail+=" step-1 gradient norm $n1 > $n1tol;"
    within "$n" "$n1tol" || fail+=" step-3 gradient norm from the layout's step-2 weights $n > $n1tol;"
    [ $wok = 1 ] || fail+=" final weights $wout steps of lr apart > $WEIGHT_STEP_TOL;"
    local figures="losses $l (tolerance $LOSS_TOL), gradient norms step 1 $n1, step 3 from the layout's own step 2 $n ($n1tol), final weights $wout steps of lr ($WEIGHT_STEP_TOL); $mem"
    if [ -z "$fail" ]; then echo "[PASS] fp32 $label ($ranks, $took s) equals one process: $figures"
    else echo "[FAIL] fp32 $label ($ranks):$fail ($figures)"; status=1; fi
}

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

# bf16_tolerances: test_gpt.cu's chain (the header of tests/t_gpu_multirank.sh) with the largest logit bounded from the CPU
# run's weights (cpu.a4, a checkpoint every step, and $d/init.safetensors): sets BF16_LOSS_TOL and prints the tolerances
bf16_tolerances() {
    local bound
    bound=$($PY tests/weights_checks.py logit_bound "$d/init.safetensors" "$(ckpt cpu.a4 1 model)" "$(ckpt cpu.a4 2 model)" \
            "$(ckpt cpu.a4 3 model)" 2>&1)
    BF16_LOSS_TOL=$(awk -v t="$TOL_LOGITS" -v m="$bound" 'BEGIN { printf "%.4g", 2 * 2 * t * m }')
    echo "bf16 tolerances: logits $TOL_LOGITS of max |logit| <= $bound: losses $BF16_LOSS_TOL, gradient norms $BF16_NORM_TOL (relative), 4-step update per tensor $BF16_UPDATE_TOL"
}
# bf16_vs_cpu NAME: a bf16 run against cpu.a4 (after bf16_tolerances); sets fail and figures
bf16_vs_cpu() {
    local l n
    l=$(diff_of "$1" cpu.a4 1 loss 0)
    n=$(diff_of "$1" cpu.a4 1 grad_norm 1)
    weights update "$d/init.safetensors" "$(ckpt "$1" $STEPS model)" "$(ckpt cpu.a4 $STEPS model)" "$BF16_UPDATE_TOL"
    fail=""
    within "$l" "$BF16_LOSS_TOL" || fail+=" losses $l > $BF16_LOSS_TOL;"
    within "$n" "$BF16_NORM_TOL" || fail+=" gradient norms $n > $BF16_NORM_TOL;"
    [ $wok = 1 ] || fail+=" update $wout > $BF16_UPDATE_TOL;"
    figures="losses $l ($BF16_LOSS_TOL), gradient norms $n ($BF16_NORM_TOL), 4-step update per tensor $wout ($BF16_UPDATE_TOL)"
}
