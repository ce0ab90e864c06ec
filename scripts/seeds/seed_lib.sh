#!/usr/bin/env bash
# scripts/seeds/seed_lib.sh: the driver every seed script sources (docs/seeds.md). A seed script holds one
# published benchmark row of ../shared/BENCHMARK_CASES.md as variables, then sources this file, which
# does one of three things:
#   (default) --plan   print our plan of the row's layout at its real size (no GPU, nothing allocated) and a
#                      table row: the published tokens/s/GPU and memory beside our plan's peak per stage and
#                      predicted tokens/s per rank. The plan comes from ./train_gpt when it is built and has
#                      --plan, else from ./train_gpt_cpu (fp32 buffers, no recompute); the output says which.
#   --run              on a machine with the row's GPUs: trains the row with ./train_gpt under mpirun
#                      (SEED_STEPS steps, default 30; SEED_HOSTFILE for rows that span nodes) and prints the
#                      measured tokens/s/GPU and peak memory beside the published ones. Without the GPUs it
#                      refuses with exit 1.
#   --tiny             the row's layout (tp, pp, dp, ZeRO, SP) on ./train_gpt_cpu with the row's model family
#                      shrunk (8 layers, small widths, vocab 301), 3 steps of -b 2 -t 32 -d 512 under
#                      mpirun, checked against the one-process run of the same shrunk model with
#                      tests/t_parallel.sh's rule (losses within 1e-5, gradient norms within 1.35e-6 relative
#                      at step 1, and at step 3 against one process resumed from the layout's step-2 checkpoint). A world above 8 ranks shrinks dp first (to max(2, 8/(tp x pp))),
#                      then halves the larger of tp and pp, keeping every degree above 1 above 1.
#                      References are cached in SEED_REF_DIR (default build/seeds_ref), one per family.
# Row variables (set by the seed script before sourcing):
#   SEED_NAME SEED_SOURCE SEED_GPU (A100|H100|V100) SEED_MODEL (a preset) SEED_MODEL_FLAGS (switch overrides)
#   SEED_FAMILY (gpt3|flagperf_llama3|llama2|qwen|baichuan2|baichuan2_13b: the shrunk model of --tiny)
#   SEED_TP SEED_PP SEED_DP SEED_ZERO SEED_SP SEED_MICRO SEED_ACCUM SEED_SEQ SEED_GLOBAL (sequences per step)
#   SEED_PRECISION (bf16, fp16: --run uses ./train_gpt_fp16, or "bf16 + fp8") SEED_LOSS_SCALE (fp16 rows: the dynamic
#   scale's start, --initial-loss-scale; unset: Megatron's 2^32) SEED_RECOMPUTE (none|act|selective|full) SEED_PUB_TOKS (tokens/s/GPU) or SEED_PUB_MS (ms per
#   iteration: tokens/s/GPU is derived), SEED_PUB_MEM (as published), SEED_NOTE (assumptions, optional)
#   SEED_SKIP: a reason the row cannot be expressed (no preset): every mode prints [SKIP] and exits 0
set -u
seed_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$seed_root" || exit 1
seed_mode=plan
for a in "$@"; do
    case $a in
        --plan) seed_mode=plan ;;
        --run) seed_mode=run ;;
        --tiny) seed_mode=tiny ;;
        -h|--help) sed -n '2,20p' "$seed_root/scripts/seeds/seed_lib.sh" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: $0: unknown argument '$a' (expected --plan, --run or --tiny)" >&2; exit 1 ;;
    esac
done

if [ -n "${SEED_SKIP:-}" ]; then
    echo "[SKIP] seed $SEED_NAME ($SEED_SOURCE): $SEED_SKIP"
    echo "| $SEED_NAME | ${SEED_PUB_TOKS:-} | ${SEED_PUB_MEM:-} | skipped: $SEED_SKIP | | | |"
    exit 0
fi

seed_die() { echo "error: seed $SEED_NAME: $*" >&2; exit 1; }
SEED_NOTE=${SEED_NOTE:-}
seed_world=$((SEED_TP * SEED_PP * SEED_DP))
[ $((SEED_MICRO * SEED_ACCUM * SEED_DP)) = "$SEED_GLOBAL" ] ||
    seed_die "micro-batch $SEED_MICRO x accumulation $SEED_ACCUM x dp $SEED_DP != global batch $SEED_GLOBAL (fix the row)"
seed_tokens=$((SEED_GLOBAL * SEED_SEQ))
# the hardware of the row: peak (bf16/fp16 dense TFLOP/s), the plan's GEMM ceiling (0.6 x peak, as the
# plan's default for H100), bus bandwidth per direction inside a node (NVLink), memory per GPU (GiB)
case $SEED_GPU in
    A100) seed_peak=312; seed_gemm=187.2; seed_link=300; seed_mem=80 ;;
    H100) seed_peak=989; seed_gemm=593.4; seed_link=450; seed_mem=80 ;;
    V100) seed_peak=125; seed_gemm=75; seed_link=150; seed_mem=16 ;;
    *) seed_die "SEED_GPU '$SEED_GPU' is not A100, H100 or V100" ;;
esac
if [ -z "${SEED_PUB_TOKS:-}" ]; then
    SEED_PUB_TOKS=$(awk -v t="$seed_tokens" -v ms="$SEED_PUB_MS" -v w="$seed_world" 'BEGIN { printf "%.0f", t / (ms / 1000) / w }')
    seed_pub_tok_text="$SEED_PUB_TOKS (from $SEED_PUB_MS ms per iteration)"
else
    seed_pub_tok_text=$SEED_PUB_TOKS
fi
seed_sp=$SEED_SP
[ "$SEED_TP" = 1 ] && seed_sp=0
# shellcheck disable=SC2206
seed_model=(-c "$SEED_MODEL" $SEED_MODEL_FLAGS)
seed_layout=(--tp "$SEED_TP" --pp "$SEED_PP" --zero "$SEED_ZERO" --sp "$seed_sp")
seed_batch=(-b "$SEED_MICRO" -t "$SEED_SEQ" -d "$seed_tokens")
echo "seed $SEED_NAME ($SEED_SOURCE)"
echo "  row: $seed_world x $SEED_GPU, $SEED_MODEL $SEED_MODEL_FLAGS, tp $SEED_TP pp $SEED_PP dp $SEED_DP ZeRO $SEED_ZERO sp $seed_sp," \
     "micro-batch $SEED_MICRO x accumulation $SEED_ACCUM = $SEED_GLOBAL x $SEED_SEQ tokens, $SEED_PRECISION, recompute $SEED_RECOMPUTE"
[ -n "$SEED_NOTE" ] && echo "  note: $SEED_NOTE"
echo "  published: $seed_pub_tok_text tokens/s/GPU, memory $SEED_PUB_MEM"

# --plan: ./train_gpt when it is built and its --plan prints per-stage rows (its --help lists the shared
# flags of llmc/run/flags.h whether or not it acts on them, so the output is what decides), else ./train_gpt_cpu
if [ "$seed_mode" = plan ]; then
    plan_args=("${seed_model[@]}" --world "$seed_world" "${seed_layout[@]}" "${seed_batch[@]}" --gpu-mem "$seed_mem"
               --gemm-tflops "$seed_gemm" --link-gbs "$seed_link")
    out=""
    if [ -x ./train_gpt ]; then
        out=$(timeout 60 ./train_gpt --plan "${plan_args[@]}" --recompute "$SEED_RECOMPUTE" 2>&1)
        echo "$out" | grep -q '^plan bytes stage' || out=""
    fi
    if [ -n "$out" ]; then
        trainer=./train_gpt
        what="the CUDA trainer's buffers, recompute $SEED_RECOMPUTE"
    else
        [ -x ./train_gpt_cpu ] || seed_die "./train_gpt_cpu is not built (run: make train_gpt_cpu)"
        trainer=./train_gpt_cpu
        what="the CPU trainer's fp32 buffers with the full attention matrix, no recompute: far above a bf16 GPU trainer's"
        [ -x ./train_gpt ] && what="$what; ./train_gpt has no --plan yet"
        out=$(./train_gpt_cpu --plan "${plan_args[@]}" 2>&1) || { echo "$out"; seed_die "./train_gpt_cpu --plan failed"; }
    fi
    echo "$out" | sed 's/^/  | /'
    peaks=$(echo "$out" | awk '/^plan bytes stage/ { printf "%s%.1f", sep, $NF / 2^30; sep = "/" }')
    tok=$(echo "$out" | sed -n 's/^predicted throughput: \([0-9.e+]*\) tokens.*/\1/p')
    fitb=$(echo "$out" | sed -n 's/^largest micro-batch that fits: //p' | sed 's/ (.*//')
    [ -n "$peaks" ] && [ -n "$tok" ] || seed_die "could not read the plan's rows and throughput from $trainer --plan"
    echo "  plan ($trainer, $what): peak per stage $peaks GiB, largest -b that fits $seed_mem GiB: $fitb," \
         "predicted $tok tokens/s per rank at $seed_gemm TFLOP/s GEMM, $seed_link GB/s links"
    echo "  measured: not run (no GPU); scripts/seeds/$(basename "$0") --run on $seed_world x $SEED_GPU"
    echo "| $SEED_NAME | $seed_pub_tok_text | $SEED_PUB_MEM | $peaks | $fitb | $tok | not run (no GPU) |"
    exit 0
fi

# --run: the row on its GPUs with the CUDA trainer
if [ "$seed_mode" = run ]; then
    n_gpu=0
    command -v nvidia-smi > /dev/null && n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ -z "${SEED_HOSTFILE:-}" ] && [ "$n_gpu" -lt "$seed_world" ]; then
        echo "refused: --run needs $seed_world GPUs ($seed_world x $SEED_GPU) and this machine has $n_gpu;" \
             "for rows spanning nodes set SEED_HOSTFILE to an mpirun hostfile. Without GPUs use the default mode (the plan) or --tiny." >&2
        exit 1
    fi
    # the row's precision: fp16 rows train in the fp16 build under the dynamic loss scale (from SEED_LOSS_SCALE)
    seed_trainer=./train_gpt seed_prec=()
    if [ "$SEED_PRECISION" = fp16 ]; then
        seed_trainer=./train_gpt_fp16
        seed_prec=(--loss-scale dynamic)
        [ -n "${SEED_LOSS_SCALE:-}" ] && seed_prec+=(--initial-loss-scale "$SEED_LOSS_SCALE")
    elif [ "$SEED_PRECISION" != bf16 ]; then
        echo "  note: this run is bf16; the row's $SEED_PRECISION is not reproduced"
    fi
    [ -x $seed_trainer ] || seed_die "$seed_trainer is not built (run: make ${seed_trainer#./})"
    command -v mpirun > /dev/null || seed_die "mpirun not found (bash scripts/install_deps.sh)"
    dir=out/seeds/$SEED_NAME
    mkdir -p out/seeds || seed_die "cannot create out/seeds"
    set -o pipefail
    hosts=()
    [ -n "${SEED_HOSTFILE:-}" ] && hosts=(--hostfile "$SEED_HOSTFILE")
    mpirun "${hosts[@]}" -np "$seed_world" $seed_trainer "${seed_model[@]}" "${seed_layout[@]}" "${seed_batch[@]}" "${seed_prec[@]}" --recompute "$SEED_RECOMPUTE" \
        -x "${SEED_STEPS:-30}" -v 0 -g 0 -o "$dir" --log-format megatron,flagperf,paddle 2>&1 | tee "$dir.log" || seed_die "the run failed (log: $dir.log)"
    /usr/bin/python3 - "$dir/summary.json" "$SEED_NAME" "$seed_pub_tok_text" "$SEED_PUB_MEM" <<'EOF' || seed_die "no summary.json in $dir"
import json, sys
s = json.load(open(sys.argv[1]))
print("  measured: %.1f tokens/s/GPU (published %s), MFU %.1f%%, peak memory %.2f GiB per rank (published %s)"
      % (s["tokens_per_s_per_device"], sys.argv[3], 100 * s["mfu"], s["peak_memory_bytes_per_rank"] / 2**30, sys.argv[4]))
EOF
    exit 0
fi

# --tiny: the same layout, shrunk, on the CPU trainer, against the one-process run
[ -x ./train_gpt_cpu ] || seed_die "./train_gpt_cpu is not built (run: make train_gpt_cpu)"
command -v mpirun > /dev/null || seed_die "mpirun not found (bash scripts/install_deps.sh)"
export OMP_NUM_THREADS=1
case $SEED_FAMILY in
    gpt3) tiny_model=(-c gpt3_tiny --layers 8 --embd 64 --heads 8 --kv-heads 8 --ffn 256 --vocab 301) ;;
    flagperf_llama3) tiny_model=(-c flagperf_llama3_8b --layers 8 --embd 128 --heads 16 --kv-heads 8 --ffn 224 --vocab 301 --seq 64) ;;
    llama2) tiny_model=(-c llama2_7b --layers 8 --embd 64 --heads 8 --kv-heads 8 --ffn 176 --vocab 301 --seq 64) ;;
    qwen) tiny_model=(-c qwen_7b --layers 8 --embd 64 --heads 8 --kv-heads 8 --ffn 176 --vocab 301 --seq 64) ;;
    baichuan2) tiny_model=(-c baichuan2_7b --layers 8 --embd 64 --heads 8 --kv-heads 8 --ffn 176 --vocab 301 --seq 64) ;;
    baichuan2_13b) tiny_model=(-c baichuan2_13b --layers 8 --embd 64 --heads 8 --kv-heads 8 --ffn 176 --vocab 301 --seq 64) ;;
    *) seed_die "SEED_FAMILY '$SEED_FAMILY' is not gpt3, flagperf_llama3, llama2, qwen, baichuan2 or baichuan2_13b" ;;
esac
tiny_common=(-b 2 -t 32 -d 512 -x 3 -v 0 -g 0 -i data/mobydick.txt -j "")
tp=$SEED_TP; pp=$SEED_PP; dp=$SEED_DP
if [ $((tp * pp * dp)) -gt 8 ] && [ "$dp" -gt 1 ]; then dp=$((8 / (tp * pp))); [ "$dp" -lt 2 ] && dp=2; fi
while [ $((tp * pp * dp)) -gt 8 ]; do
    if [ "$tp" -ge "$pp" ]; then tp=$((tp / 2)); else pp=$((pp / 2)); fi
done
tiny_world=$((tp * pp * dp))
ref=${SEED_REF_DIR:-build/seeds_ref}/$SEED_FAMILY
mkdir -p "$(dirname "$ref")"
if [ ! -s "$ref/metrics.jsonl" ] || [ "$(grep -c '"loss"' "$ref/metrics.jsonl")" != 3 ]; then
    timeout 300 ./train_gpt_cpu "${tiny_model[@]}" "${tiny_common[@]}" -o "$ref" > "$ref.log" 2>&1 ||
        seed_die "the one-process reference run failed: $(tail -2 "$ref.log")"
fi
run=build/seeds_tiny/$SEED_NAME
rm -rf "$run" "$run.at2" && mkdir -p "$(dirname "$run")"  # (a .at2 left by an earlier run would be resumed from)
echo "  tiny: ${tiny_model[*]}, tp $tp pp $pp dp $dp ZeRO $SEED_ZERO sp $seed_sp on $tiny_world ranks, -b 2 -t 32 -d 512, 3 steps" \
     "(fp32, no recompute: the CPU trainer's)"
if [ "$tiny_world" = 1 ]; then
    timeout 300 ./train_gpt_cpu "${tiny_model[@]}" "${tiny_common[@]}" --zero "$SEED_ZERO" -n 2 -o "$run" > "$run.log" 2>&1
else
    timeout 300 mpirun --oversubscribe --allow-run-as-root -np "$tiny_world" ./train_gpt_cpu "${tiny_model[@]}" "${tiny_common[@]}" \
        --tp "$tp" --pp "$pp" --zero "$SEED_ZERO" --sp "$seed_sp" -n 2 -o "$run" > "$run.log" 2>&1
fi || seed_die "the tiny run failed: $(grep -m1 error "$run.log" || tail -2 "$run.log")"
# step 3 from the layout's own step-2 weights, in one process (later steps drift with the trajectory: t_parallel.sh)
mkdir -p "$run.at2" && cp -r "$run/ckpt_00000002" "$run.at2/" &&
    timeout 300 ./train_gpt_cpu "${tiny_model[@]}" "${tiny_common[@]}" --resume auto -o "$run.at2" > "$run.at2.log" 2>&1 ||
    seed_die "one process resumed from the tiny run's step 2 failed: $(grep -m1 error "$run.at2.log" || tail -2 "$run.at2.log")"
# tests/t_parallel.sh's rule
chk() { /usr/bin/python3 tests/metrics_checks.py diff "$run/metrics.jsonl" "$2/metrics.jsonl" "$1" "$3" "$4" "$5"; }
dl=$(chk 1 "$ref" loss 0 3); dn1=$(chk 1 "$ref" grad_norm 1 1); dn=$(chk 3 "$run.at2" grad_norm 1 3)
if /usr/bin/python3 tests/metrics_checks.py within "$dl" 1e-5 && /usr/bin/python3 tests/metrics_checks.py within "$dn1" 1.35e-6 &&
    /usr/bin/python3 tests/metrics_checks.py within "$dn" 1.35e-6; then
    same=""
    [ "$tiny_world" = 1 ] && same=" (one rank: the layout is the reference's own, so this checks only that it runs and stays finite)"
    echo "  tiny: 3 finite losses equal the one-process run's (worst |dloss| $dl, grad norm rel $dn1 at step 1, $dn at step 3 from the layout's step 2)$same"
    exit 0
fi
echo "  tiny: differs from the one-process run: worst |dloss| $dl (tol 1e-5), grad norm rel $dn1 at step 1 (tol 1.35e-6), $dn at step 3 from the layout's step 2 (tol 1.35e-6); log $run.log"
exit 1
