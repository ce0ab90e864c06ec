# scripts/multirank_lib.sh (sourced): runs of train_gpt.cu's main at several ranks and their comparisons with a one-rank
# run, written once for the emulated tests (tests/gpu_multirank_lib.sh, for t_gpu_multirank, t_gpu_tp, t_gpu_pp: the
# programs built against tests/cuda_emu, the one-rank reference train_gpt_cpu) and for the GPU stage
# (scripts/gpu_check.sh multirank: the nvcc builds, ranks sharing the one GPU, the reference the same build's one-rank
# run). tests/t_gpu_multirank.sh's header derives the tolerances. The sourcing script sets:
#   d              the work folder: a run NAME writes $d/NAME/ (metrics.jsonl, checkpoints), $d/NAME.log, $d/NAME.cmd
#   MR_FP32        the fp32 program of the layouts (build/train_gpt_fp32_emu; train_gpt_fp32)
#   MR_REF_PROG    the one-rank program that continues a layout's step-2 checkpoint for the step-3 check
#                  (./train_gpt_cpu in the tests; the fp32 build itself on the GPU)
#   MR_CONVERT     build/ckpt_convert (checkpoints to whole tensors)
#   MODEL          the model's flags; MR_T the sequence length (default 64: -t MR_T, -d ACCUM x MR_T)
#   mr_ref ACCUM   prints the name of the one-rank run a layout of ACCUM micro-batches is compared with
#   mr_launch NP   sets the array LAUNCH: the command that starts NP ranks of the program that follows it
#   mr_limit       prints the seconds the next run may take (under 15: the run is not started, rc 125)
# and may set PY (default /usr/bin/python3). Defined here:
#   run NAME PROGRAM NP ACCUM FLAGS...   STEPS steps into $d/NAME; sets rc and took
#   why, diff_of, within, weights, ckpt, opt_bytes, guards   the comparisons
#   fp32 NAME LABEL NP ACCUM FLAGS...    one fp32 layout against mr_ref's run (losses, step-1 and step-3 norms, weights)
#   half_pair NAME ONE [PROGRAM]         a 16-bit layout against its build's one-rank run ONE (pair_tolerances); with
#                                        PROGRAM, step 3 too, against PROGRAM at one rank resumed from NAME's step 2
#   same_bits A B                        two runs of one build and layout equal bit for bit (metrics, final state)
# Every function prints one "[PASS] ..." or "[FAIL] ..." line per check and sets status=1 on a failure.
PY=${PY:-/usr/bin/python3}
MR_T=${MR_T:-64}
STEPS=4
LOSS_TOL=1e-5
WEIGHT_TOL=1e-3
LR=1e-3            # the trainers' default -l, which these runs keep: no AdamW step moves an element further
WEIGHT_STEP_TOL=0.5
norm_tol_1() { awk -v n="$1" 'BEGIN { printf "%.3g", sqrt(n) * 2^-24 }'; }  # N tokens per step
# a 16-bit layout against the same build's one-rank run (n = 4 micro-batches): step-1 loss n 2^-24, gradient norm 2 n u
# (relative; u = 2^-8 in bf16, 2^-11 in fp16), 4-step update per tensor 4 times that (tests/t_gpu_multirank.sh's
# header). pair_tolerances U sets them for u = 1 / U; bf16's are the default.
N_MICRO=4
PAIR_LOSS_TOL=$(awk -v n=$N_MICRO 'BEGIN { printf "%.3g", n * 2^-24 }')
pair_tolerances() {
    PAIR_NORM_TOL=$(awk -v n=$N_MICRO -v U="$1" 'BEGIN { printf "%.4g", 2 * n / U }')
    PAIR_UPDATE_TOL=$(awk -v n=$N_MICRO -v U="$1" 'BEGIN { printf "%.4g", 4 * 2 * n / U }')
}
pair_tolerances 256

# run NAME PROGRAM NP ACCUM FLAGS...: STEPS steps of ACCUM micro-batches of -b 1 -t MR_T into $d/NAME (checkpoints at
# steps 2 and 4, every step with CKPT_EVERY=1), log $d/NAME.log, the command in $d/NAME.cmd; sets rc and took (seconds).
# NP 1 runs the program alone, more under mr_launch's LAUNCH. In the emulation a rank waiting on a collective longer
# than EMU_NCCL_TIMEOUT (90 s unless set) ends the job; on a GPU the variable is not read.
run() {
    local name=$1 prog=$2 np=$3 accum=$4; shift 4
    local args=("${MODEL[@]}" -b 1 -t "$MR_T" -d $((accum * MR_T)) -x $STEPS -v 0 -g 0 -i data/mobydick.txt -j ""
                -n "${CKPT_EVERY:-2}" --keep 9 -o "$d/$name")
    local t0=$SECONDS secs cmd
    secs=$(mr_limit)
    if [ "$np" = 1 ]; then cmd=("$prog"); else mr_launch "$np"; cmd=("${LAUNCH[@]}" "$prog"); fi
    echo "${cmd[*]} ${args[*]} $*" > "$d/$name.cmd"
    if [ "$secs" -lt 15 ]; then
        echo "not run: no time left for it" > "$d/$name.log"; rc=125; took=0; return
    fi
    EMU_NCCL_TIMEOUT=${EMU_NCCL_TIMEOUT:-90} timeout -k 10 "$secs" "${cmd[@]}" "${args[@]}" "$@" > "$d/$name.log" 2>&1
    rc=$?
    took=$((SECONDS - t0))
}
# why NAME: the first error line of a run's log (the trainer's, NCCL's or the emulation's message)
why() { grep -m 1 -E 'error|EMU|deadlock|abort|not run' "$d/$1.log" || tail -n 1 "$d/$1.log"; }
# diff_of A B FIRST KEY REL [LAST]: worst difference of KEY over steps FIRST..LAST (tests/metrics_checks.py diff)
diff_of() { $PY tests/metrics_checks.py diff "$d/$1/metrics.jsonl" "$d/$2/metrics.jsonl" "$3" "$4" "$5" "${6:-1000000000}"; }
within() { $PY tests/metrics_checks.py within "$1" "$2"; }
# weights MODE ARGS...: tests/weights_checks.py's "WORST at TENSOR"; sets wok (1 within the tolerance)
weights() {
    wout=$($PY tests/weights_checks.py "$@" 2>&1) && wok=1 || wok=0
}
# ckpt NAME STEP FILE: run NAME's step-STEP checkpoint in the single-file form, FILE (model or optim).safetensors: the
# sharded checkpoint's whole tensors by table name (ckpt_convert --single, once per checkpoint written)
ckpt() {
    local step; step=$(printf %08d "$2")
    local dir="$d/$1/ckpt_$step" out="$d/$1.whole"
    if [ ! "$out/ckpt_$step/DONE" -nt "$dir/DONE" ]; then
        "$MR_CONVERT" "$dir" --single "$out" > /dev/null 2> "$out.err" || { cat "$out.err" >&2; echo "$out/ckpt_$step/$3.safetensors"; return 1; }
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
# half of ONE's / NP: rank 0 holds the first stage only, whose share is uneven (the embeddings, and the head on the
# last stage). And on NP > 1 every rank's bytes by kind allocated equal its estimate's (the trainer's "memory per
# rank" table). Sets mem (the figure for the report).
guards() {
    local name=$1 np=$2 accum=$3 one=$4; shift 4
    local z=0 tp=1 pp=1 dp rows lines mine ref
    [[ " $* " =~ \ --zero\ ([0-3])\  ]] && z=${BASH_REMATCH[1]}
    [[ " $* " =~ \ --tp\ ([0-9]+)\  ]] && tp=${BASH_REMATCH[1]}
    [[ " $* " =~ \ --pp\ ([0-9]+)\  ]] && pp=${BASH_REMATCH[1]}
    dp=$((np / (tp * pp)))
    rows=$(grep -c "batch per step .* accum=$((accum / dp)) dp=$dp " "$d/$name.log")
    [ "$rows" = 1 ] || fail+=" the config table's row 'batch per step | B=1 T=$MR_T accum=$((accum / dp)) dp=$dp' printed $rows times, not once;"
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

# fp32 NAME LABEL NP ACCUM FLAGS...: one fp32 layout (run fp32.NAME) against the one-rank run mr_ref names: every
# step's loss within LOSS_TOL, step 1's gradient norm within sqrt(N) 2^-24 (relative, N tokens per step), step 3's
# against MR_REF_PROG at one rank continuing the layout's own step-2 checkpoint (the same weights: later steps drift
# with the trajectory), final weights within WEIGHT_STEP_TOL AdamW steps per tensor; and the guards against
# fp32.one_rank
fp32() {
    local name=fp32.$1 label=$2 np=$3 accum=$4; shift 4
    local base ranks="$np ranks"
    base=$(mr_ref "$accum")
    [ "$np" = 1 ] && ranks="one rank, no launcher"
    run "$name" "$MR_FP32" "$np" "$accum" "$@"
    if [ $rc -ne 0 ]; then
        echo "[FAIL] fp32 $label ($ranks): exit $rc after $took s: $(why "$name")"; status=1; return
    fi
    local n1tol l n1 n
    fail=""
    guards "$name" "$np" "$accum" fp32.one_rank "$@"
    n1tol=$(norm_tol_1 $((accum * MR_T)))
    l=$(diff_of "$name" "$base" 1 loss 0)
    n1=$(diff_of "$name" "$base" 1 grad_norm 1 1)
    # step 3 from the layout's own step-2 weights: the one-rank program resumed from its checkpoint
    local layout_took=$took
    mkdir -p "$d/$name.at2" && cp -r "$d/$name/ckpt_00000002" "$d/$name.at2/" 2>/dev/null
    run "$name.at2" "$MR_REF_PROG" 1 "$accum" --resume auto
    took=$layout_took
    n=$(diff_of "$name" "$name.at2" 3 grad_norm 1 3)
    weights steps "$(ckpt "$name" $STEPS model)" "$(ckpt "$base" $STEPS model)" $LR $WEIGHT_STEP_TOL
    within "$l" $LOSS_TOL || fail+=" losses $l > $LOSS_TOL;"
    within "$n1" "$n1tol" || fail+=" step-1 gradient norm $n1 > $n1tol;"
    within "$n" "$n1tol" || fail+=" step-3 gradient norm from the layout's step-2 weights $n > $n1tol;"
    [ $wok = 1 ] || fail+=" final weights $wout steps of lr apart > $WEIGHT_STEP_TOL;"
    local figures="losses $l (tolerance $LOSS_TOL), gradient norms step 1 $n1, step 3 from the layout's own step 2 $n ($n1tol), final weights $wout steps of lr ($WEIGHT_STEP_TOL); $mem"
    if [ -z "$fail" ]; then echo "[PASS] fp32 $label ($ranks, $took s) equals the one-rank run: $figures"
    else echo "[FAIL] fp32 $label ($ranks):$fail ($figures)"; status=1; fi
}

# half_pair NAME ONE [PROGRAM]: the 16-bit layout NAME against the one-rank run ONE of its build, which runs the same
# kernels on the same 16-bit weights (the tolerances of pair_tolerances' last call): step 1's loss within PAIR_LOSS_TOL and gradient norm within PAIR_NORM_TOL (relative); the 4-step
# update per tensor from the initial weights ($d/init.safetensors) within PAIR_UPDATE_TOL. With PROGRAM: step 3's loss and gradient norm against PROGRAM
# at one rank continuing NAME's step-2 checkpoint, within the step-1 tolerances (the same weights, the sums reordered).
# Sets fail and figures, prints the line. (metrics.jsonl holds the printed digits: "bitwise" there is to those digits.)
half_pair() {
    local name=$1 one=$2 prog=${3:-} l1 n1 l3="" n3=""
    fail=""
    l1=$(diff_of "$name" "$one" 1 loss 1 1)
    n1=$(diff_of "$name" "$one" 1 grad_norm 1 1)
    within "$l1" "$PAIR_LOSS_TOL" || fail+=" step-1 loss $l1 > $PAIR_LOSS_TOL;"
    within "$n1" "$PAIR_NORM_TOL" || fail+=" step-1 gradient norm $n1 > $PAIR_NORM_TOL;"
    weights update "$d/init.safetensors" "$(ckpt "$name" $STEPS model)" "$(ckpt "$one" $STEPS model)" "$PAIR_UPDATE_TOL"
    [ $wok = 1 ] || fail+=" update $wout > $PAIR_UPDATE_TOL;"
    figures="step-1 loss $l1 ($PAIR_LOSS_TOL), step-1 gradient norm $n1 ($PAIR_NORM_TOL), relative; 4-step update per tensor $wout ($PAIR_UPDATE_TOL)"
    if [ -n "$prog" ]; then
        local saved=$took
        mkdir -p "$d/$name.at2" && cp -r "$d/$name/ckpt_00000002" "$d/$name.at2/" 2>/dev/null
        run "$name.at2" "$prog" 1 $N_MICRO --resume auto
        took=$saved
        l3=$(diff_of "$name" "$name.at2" 3 loss 1 3)
        n3=$(diff_of "$name" "$name.at2" 3 grad_norm 1 3)
        within "$l3" "$PAIR_LOSS_TOL" || fail+=" step-3 loss from the layout's step-2 weights $l3 > $PAIR_LOSS_TOL;"
        within "$n3" "$PAIR_NORM_TOL" || fail+=" step-3 gradient norm from the layout's step-2 weights $n3 > $PAIR_NORM_TOL;"
        figures+="; step 3 from the layout's own step 2: loss $l3, gradient norm $n3"
    fi
    if [ -z "$fail" ]; then echo "[PASS] $name equals the one-rank run $one up to its gradient roundings: $figures"
    else echo "[FAIL] $name vs the one-rank run $one:$fail ($figures)"; status=1; fi
}

# same_bits A B LABEL [FIRST]: runs A and B (one build, one layout) equal bit for bit: every step's loss and gradient norm
# from FIRST (default 1) in metrics.jsonl, and the final weights and AdamW moments (the step-STEPS checkpoints as whole
# tensors, compared byte for byte; metrics.jsonl's values to their printed digits)
same_bits() {
    local a=$1 b=$2 label=$3 first=${4:-1} f="" l n m o
    l=$(diff_of "$a" "$b" "$first" loss 0); n=$(diff_of "$a" "$b" "$first" grad_norm 0)
    [ "$l" = 0 ] || f+=" losses differ by $l;"
    [ "$n" = 0 ] || f+=" gradient norms differ by $n;"
    m=$(ckpt "$a" $STEPS model) && o=$(ckpt "$b" $STEPS model) && cmp -s "$m" "$o" || f+=" final weights differ;"
    m=$(ckpt "$a" $STEPS optim) && o=$(ckpt "$b" $STEPS optim) && cmp -s "$m" "$o" || f+=" final AdamW moments differ;"
    if [ -z "$f" ]; then echo "[PASS] $label: bitwise equal (losses and gradient norms of steps $first-$STEPS, final weights and moments)"
    else echo "[FAIL] $label: not bitwise equal:$f"; status=1; fi
}

# mr_share_gpu NP: sets LAUNCH to start NP ranks that share this machine's GPU (more ranks than GPUs), the same way on a
# GPU machine and in the emulation: mpirun (--oversubscribe; --allow-run-as-root as root, as on the GPU machines) with
# LLMC_SHARE_GPU=1 (llmc/parallel/comm_nccl.cuh: local rank r on GPU r % GPUs), NCCL_SOCKET_IFNAME=lo and
# NCCL_IB_DISABLE=1 (unless set), and each rank its own NCCL_HOSTID, llmc-rank-R from mpirun's rank (NCCL refuses two
# ranks of one host on one GPU before 2.30). Without mpirun, scripts/launch.sh --share-gpu does the same; MR_LAUNCHER
# says which.
mr_share_gpu() {
    if command -v mpirun > /dev/null 2>&1; then
        LAUNCH=(mpirun --oversubscribe)
        [ "$(id -u)" = 0 ] && LAUNCH+=(--allow-run-as-root)
        LAUNCH+=(-np "$1" -x LLMC_SHARE_GPU=1 -x "NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}"
                 -x "NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}"
                 bash -c 'NCCL_HOSTID=llmc-rank-$OMPI_COMM_WORLD_RANK exec "$@"' _)
        MR_LAUNCHER="mpirun, one NCCL_HOSTID per rank"
    else
        LAUNCH=(bash scripts/launch.sh --share-gpu "$1")
        MR_LAUNCHER="scripts/launch.sh --share-gpu (no mpirun on PATH)"
    fi
}
