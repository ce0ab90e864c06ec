#!/usr/bin/env bash
# The plan (llmc/parallel/planner.h, docs/plan.md) and the layout planner of train_gpt_cpu. Checks:
#   1. for every layout of tests/t_parallel.sh's matrix (read from that file), gpt3_tiny (vocab 301) and
#      llama_tiny: one training step under mpirun prints every rank's measured bytes (from its buffers'
#      sizes), and --plan --world N with the same flags prints one row per pipeline stage: equal to the
#      table's 0.001 MiB for every rank, weights, gradients, optimizer and activations.
#   2. --plan at the published seed layouts of gpt3_6.7b, gpt3_13b and flagperf_llama3_8b
#      (../shared/BENCHMARK_CASES.md) exits 0 within 5 s using under 200 MB (the 6.7B model alone is
#      27 GB in fp32: nothing is allocated) with one row per stage; the 6.7B ZeRO-2 dp 8 row's weights,
#      gradients and optimizer bytes equal a hand count from the shape (tests/plan_checks.py).
#   3. with no layout flag, --gpu-mem picks the layout under mpirun -np 4: a limit that plain dp exceeds
#      picks another layout whose measured bytes fit the limit, a large limit picks plain dp (tp 1 pp 1
#      zero 0); both train 10 steps with the one-process losses (t_parallel's tolerance 1e-5); explicit
#      layout flags win over --gpu-mem.
#   4. bad values stop with exit 1 and a message naming the flag: --gpu-mem 0, -1 and garbage, --plan
#      for a --world the layout does not divide, a --gpu-mem no layout fits (with --plan and under mpirun).
# About 2 minutes on 2 busy cores.
set -u
d=build/t_plan.$$
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
LOSS_TOL=1e-5
PY=/usr/bin/python3
if ! command -v mpirun > /dev/null; then
    echo "[FAIL] mpirun not found: install OpenMPI with 'apt-get install -y openmpi-bin libopenmpi-dev' (or bash scripts/install_deps.sh), then make"
    exit 1
fi
MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }

run() {  # run NAME NP ARGS...: log in $d/NAME.log
    local name=$1 np=$2; shift 2
    if [ "$np" = 1 ]; then timeout 300 ./train_gpt_cpu "$@" > "$d/$name.log" 2>&1
    else timeout 300 "${MPIRUN[@]}" -np "$np" ./train_gpt_cpu "$@" > "$d/$name.log" 2>&1; fi
}

# 1. measured bytes per rank = the plan's rows, every layout of t_parallel's lists
mapfile -t matrix < <(sed -n '/^matrix=(/,/^)/p' tests/t_parallel.sh | sed -n 's/^ *"\(.*\)"$/\1/p')
mapfile -t extra_gpt < <(sed -n '/^extra_gpt=(/,/^)/p' tests/t_parallel.sh | sed -n 's/^ *"\(.*\)"$/\1/p')
if [ ${#matrix[@]} -lt 5 ]; then fail "could not read the layout matrix of tests/t_parallel.sh (${#matrix[@]} rows)"; fi
for model in gpt3_tiny llama_tiny; do
    cases=("${matrix[@]}")
    [ "$model" = gpt3_tiny ] && cases+=("${extra_gpt[@]}")
    for c in "${cases[@]}"; do
        IFS='|' read -r name np flags <<< "$c"
        base=(-c "$model" -b 2 -t 32 -d 512 -v 0 -g 0 -i data/mobydick.txt -j "" -o "")
        [ "$model" = gpt3_tiny ] && base+=(--vocab 301)
        # shellcheck disable=SC2086
        run "$model.$name" "$np" "${base[@]}" -x 1 $flags
        rc=$?
        # shellcheck disable=SC2086
        timeout 60 ./train_gpt_cpu --plan --world "$np" "${base[@]}" $flags > "$d/$model.$name.plan" 2>&1
        prc=$?
        if [ $rc -eq 0 ] && [ $prc -eq 0 ] && out=$($PY tests/plan_checks.py measured_vs_plan "$d/$model.$name.log" "$d/$model.$name.plan"); then
            pass "$model $name ($np ranks): measured bytes of every rank equal the plan's stage rows ($out)"
        else
            fail "$model $name ($np ranks): run exit $rc, plan exit $prc: ${out:-} $(grep -m1 error "$d/$model.$name.log" "$d/$model.$name.plan")"
        fi
    done
done

# 2. the seed layouts at their real sizes: quick, no allocation, one row per stage
# name | stages | flags (BENCHMARK_CASES.md sections 1 and 2; global batch 1024 x 2048 and 512 x 8192)
seeds=(
  "gpt3_6.7b TP1PP1SH2SP8|1|-c gpt3_6.7b --world 8 --zero 2 -b 4 -t 2048 -d 2097152"
  "gpt3_6.7b TP2PP1SH1SP4|1|-c gpt3_6.7b --world 8 --tp 2 --zero 1 -b 4 -t 2048 -d 2097152"
  "gpt3_6.7b TP2PP1SH2SP4|1|-c gpt3_6.7b --world 8 --tp 2 --zero 2 -b 4 -t 2048 -d 2097152"
  "gpt3_6.7b TP2PP4SH1SP1|4|-c gpt3_6.7b --tp 2 --pp 4 --zero 1 -b 4 -t 2048 -d 2097152"
  "gpt3_13b TP1PP1SH2SP8|1|-c gpt3_13b --world 8 --zero 2 -b 2 -t 2048 -d 2097152"
  "gpt3_13b TP2PP1SH1SP4|1|-c gpt3_13b --world 8 --tp 2 --zero 1 -b 2 -t 2048 -d 2097152"
  "gpt3_13b TP2PP1SH2SP4|1|-c gpt3_13b --world 8 --tp 2 --zero 2 -b 2 -t 2048 -d 2097152"
  "gpt3_13b TP2PP4SH1SP1|4|-c gpt3_13b --tp 2 --pp 4 --zero 1 -b 4 -t 2048 -d 2097152"
  "flagperf_llama3_8b A100 PP2DP4TP1|2|-c flagperf_llama3_8b --world 8 --pp 2 --zero 1 -b 1 -t 8192 -d 4194304"
  "flagperf_llama3_8b H100 PP1DP4TP2|1|-c flagperf_llama3_8b --world 8 --tp 2 --sp 1 --zero 1 -b 1 -t 8192 -d 4194304"
)
for c in "${seeds[@]}"; do
    IFS='|' read -r name stages flags <<< "$c"
    # shellcheck disable=SC2086
    t=$($PY tests/plan_checks.py timed 5 200 ./train_gpt_cpu --plan $flags --gpu-mem 80)
    trc=$?
    # shellcheck disable=SC2086
    ./train_gpt_cpu --plan $flags --gpu-mem 80 > "$d/seed.plan" 2>&1
    rows=$(grep -c "^plan bytes stage" "$d/seed.plan")
    if [ $trc -eq 0 ] && [ "$rows" -eq "$stages" ] && grep -q "^predicted step" "$d/seed.plan"; then
        pass "--plan $name: $rows stage rows, $t"
    else
        fail "--plan $name: $t, $rows stage rows (want $stages): $(head -c 300 "$d/seed.plan")"
    fi
done
./train_gpt_cpu --plan -c gpt3_6.7b --world 8 --zero 2 -b 4 -t 2048 -d 2097152 > "$d/hand.plan" 2>&1
if out=$($PY tests/plan_checks.py gpt3_state "$d/hand.plan" 32 4096 32 16384 50257 2048 8 2); then
    pass "--plan gpt3_6.7b zero 2 dp 8: weights 4P, gradients 4P/8 + the embedding, head and one layer bucket, moments 8P/8 ($out)"
else
    fail "--plan gpt3_6.7b zero 2 dp 8 against the hand count: $out"
fi
./train_gpt_cpu --plan -c gpt3_13b --world 8 --zero 3 -b 2 -t 2048 -d 2097152 > "$d/hand3.plan" 2>&1
if out=$($PY tests/plan_checks.py gpt3_state "$d/hand3.plan" 40 5120 40 20480 50257 2048 8 3); then
    pass "--plan gpt3_13b zero 3 dp 8: weights 4P/8 + the largest bucket, moments 8P/8 ($out)"
else
    fail "--plan gpt3_13b zero 3 dp 8 against the hand count: $out"
fi

# 3. the planner under mpirun -np 4 with no layout flag
base=(-c gpt3_tiny --vocab 301 -t 32 -d 512 -x 10 -v 0 -g 0 -i data/mobydick.txt -j "")
run one 1 "${base[@]}" -b 2 -o "$d/one"
SMALL=0.005   # GiB: 5.12 MiB; plain dp at dp 4 holds 13 MiB of weights, gradients and moments per rank
BIG=1
run small 4 "${base[@]}" -o "$d/small" --gpu-mem $SMALL
rc=$?
chosen=$(sed -n 's/^chosen: \(.*\) (the fastest.*/\1/p' "$d/small.log")
l=$($PY tests/metrics_checks.py diff "$d/small/metrics.jsonl" "$d/one/metrics.jsonl" 1 loss 0 1000000000)
if [ $rc -eq 0 ] && [ -n "$chosen" ] && ! echo "$chosen" | grep -q "^tp 1 pp 1 dp 4 zero 0" && $PY tests/metrics_checks.py within "$l" $LOSS_TOL \
   && f=$($PY tests/plan_checks.py fits "$d/small.log" $SMALL); then
    pass "--gpu-mem $SMALL with no layout flag picks '$chosen': $f; 10 losses within $LOSS_TOL of one process (worst $l)"
else
    fail "--gpu-mem $SMALL with no layout flag: exit $rc, chosen '$chosen', worst loss difference $l, ${f:-}: $(grep -m1 error "$d/small.log")"
fi
run big 4 "${base[@]}" -o "$d/big" --gpu-mem $BIG
rc=$?
chosen=$(sed -n 's/^chosen: \(.*\) (the fastest.*/\1/p' "$d/big.log")
l=$($PY tests/metrics_checks.py diff "$d/big/metrics.jsonl" "$d/one/metrics.jsonl" 1 loss 0 1000000000)
if [ $rc -eq 0 ] && echo "$chosen" | grep -q "^tp 1 pp 1 dp 4 zero 0" && grep -q "ranks: 4 = pp 1 x dp 4 x tp 1, ZeRO 0" "$d/big.log" \
   && $PY tests/metrics_checks.py within "$l" $LOSS_TOL; then
    pass "--gpu-mem $BIG with no layout flag picks plain dp ('$chosen'); 10 losses within $LOSS_TOL of one process (worst $l)"
else
    fail "--gpu-mem $BIG with no layout flag: exit $rc, chosen '$chosen', worst loss difference $l: $(grep -m1 error "$d/big.log")"
fi
run explicit 4 "${base[@]}" -x 1 -o "" --gpu-mem $SMALL --dp 4
if [ $? -eq 0 ] && ! grep -q "layout planner" "$d/explicit.log" && grep -q "ranks: 4 = pp 1 x dp 4 x tp 1, ZeRO 0" "$d/explicit.log"; then
    pass "explicit --dp 4 wins over --gpu-mem $SMALL (no planner, plain dp runs)"
else
    fail "explicit --dp 4 with --gpu-mem $SMALL: $(head -c 300 "$d/explicit.log")"
fi

# 4. bad values: exit 1, a message naming the flag
bad() {
    local name=$1 pattern=$2; shift 2
    timeout 60 "$@" > "$d/bad.txt" 2>&1
    local rc=$?
    if [ $rc -eq 1 ] && [ "$(grep -cE -- "$pattern" "$d/bad.txt")" -eq 1 ] && ! grep -q "^step" "$d/bad.txt"; then pass "bad: $name"
    else fail "bad: $name: exit $rc: $(head -c 300 "$d/bad.txt" | tr '\n' ' ')"; fi
}
P=(./train_gpt_cpu --plan -c gpt3_tiny -t 32)
bad "--gpu-mem 0" "flag --gpu-mem expects GiB per GPU above 0 and at most 4096, got '0'" "${P[@]}" --gpu-mem 0
bad "--gpu-mem -1" "flag --gpu-mem expects GiB per GPU above 0 and at most 4096, got '-1'" "${P[@]}" --gpu-mem -1
bad "--gpu-mem garbage" "flag --gpu-mem expects a number, got '8G'" "${P[@]}" --gpu-mem 8G
bad "--gpu-mem nan" "flag --gpu-mem expects GiB per GPU above 0 and at most 4096, got 'nan'" "${P[@]}" --gpu-mem nan
bad "--world 0" "flag --world expects a positive integer" "${P[@]}" --world 0
# every number that describes the machine has a range no real device passes (a typo such as 1e30 is not a machine)
bad "--gpu-mem 1e30" "flag --gpu-mem expects GiB per GPU above 0 and at most 4096, got '1e30'" "${P[@]}" --gpu-mem 1e30
bad "--gpu-mem inf" "flag --gpu-mem expects GiB per GPU above 0 and at most 4096, got 'inf'" "${P[@]}" --gpu-mem inf
bad "--gemm-tflops 1e9" "flag --gemm-tflops expects TFLOP/s per GPU above 0 and at most 20000, got '1e9'" "${P[@]}" --gemm-tflops 1e9
bad "--link-gbs 0" "flag --link-gbs expects GB/s per direction above 0 and at most 10000, got '0'" "${P[@]}" --link-gbs 0
bad "--node-gbs 1e6" "flag --node-gbs expects GB/s per GPU above 0 and at most 10000, got '1e6'" "${P[@]}" --node-gbs 1e6
bad "--gpus-per-node 5000" "flag --gpus-per-node expects 1 to 1024, got '5000'" "${P[@]}" --gpus-per-node 5000
bad "--comm-latency-us 1e12" "flag --comm-latency-us expects microseconds from 0 to 1e6, got '1e12'" "${P[@]}" --comm-latency-us 1e12
bad "--world 2000000" "flag --world expects ranks from 1 to 1048576, got '2000000'" "${P[@]}" --world 2000000
bad "--plan for a --world that --tp does not divide" "--plan for --world 3: 3 ranks .* not a multiple of --tp 2" "${P[@]}" --world 3 --tp 2
bad "--plan when no layout fits --gpu-mem" "no layout of 4 ranks .* fits --gpu-mem 0.001 GiB" "${P[@]}" --world 4 --vocab 301 -d 512 --gpu-mem 0.001
bad "mpirun -np 2 when no layout fits --gpu-mem" "no layout of 2 ranks .* fits --gpu-mem 0.001 GiB" \
    "${MPIRUN[@]}" -np 2 ./train_gpt_cpu "${base[@]}" -o "" --gpu-mem 0.001
bad "--world beside a different mpirun -np" "flag --world 4 differs from the 2 ranks started" \
    "${MPIRUN[@]}" -np 2 ./train_gpt_cpu "${base[@]}" -o "" --gpu-mem 1 --world 4
[ $status -eq 0 ] && rm -rf "$d"
exit $status
