#!/usr/bin/env bash
# The harness log formats of train_gpt_cpu (--log-format; llmc/run/logger.h, docs/logs.md). Each run's console
# output is parsed with the patterns and JSON fields the harnesses read (tests/log_formats_checks.py, from
# ../shared/BENCHMARK_CASES.md section 5) and every parsed value must equal the run's metrics.jsonl /
# summary.json within the printed precision. Checks:
#   1. one process, 6 steps, --log-format all: Megatron's iteration line per step and memory line, FlagPerf's
#      [PerfLog] STEP_END per step and FINISHED, the Paddle result JSON (FINAL_RESULT = mean tokens/s after
#      the warm-up steps; also <out>/paddle_result.json).
#   2. two ranks (pp 2 under mpirun), --log-format megatron,paddle: one memory line per rank, gpu_num 2,
#      run_mode mp; no [PerfLog] line since flagperf was not asked.
#   3. without the flag: none of the harness lines; a diverging run (-l 1e30, --skip-limit 0: it ends at its first
#      non-finite step) prints JOB_FAIL_FLAG 1;
#      a bad --log-format value stops with exit 1 naming the flag.
#   4. train_gpt.cu's main on emulated GPUs (build/train_gpt_fp32_emu, tests/cuda_emu): one rank with every format,
#      and dp 2 under mpirun with megatron,paddle (a memory line per rank, gpu_num 2), as in 1 and 2.
# About 40 s on 2 busy cores.
set -u
d=build/t_log_formats.$$
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
base=(-c gpt3_tiny --vocab 301 -b 2 -t 32 -d 128 -x 6 -v 0 -g 0 -i data/mobydick.txt -j "")
gbs=4  # -d 128 / -t 32 sequences per step

# 1. one process, every format
timeout 120 ./train_gpt_cpu "${base[@]}" -o "$d/one" --log-format all > "$d/one.log" 2>&1 || fail "one-process run: $(tail -2 "$d/one.log")"
for f in megatron flagperf paddle; do
    case $f in
        megatron) args=("$d/one.log" "$d/one" 1 $gbs) ;;
        flagperf) args=("$d/one.log" "$d/one") ;;
        paddle) args=("$d/one.log" "$d/one" 1) ;;
    esac
    if out=$($PY tests/log_formats_checks.py $f "${args[@]}"); then pass "$f format, one process: parsed values equal metrics.jsonl / summary.json ($out)"
    else fail "$f format, one process: $out"; fi
done

# 2. two pipeline stages
if command -v mpirun > /dev/null; then
    timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 ./train_gpt_cpu "${base[@]}" --pp 2 -o "$d/pp2" --log-format megatron,paddle > "$d/pp2.log" 2>&1 || fail "pp 2 run: $(tail -2 "$d/pp2.log")"
    if out=$($PY tests/log_formats_checks.py megatron "$d/pp2.log" "$d/pp2" 2 $gbs) && out2=$($PY tests/log_formats_checks.py paddle "$d/pp2.log" "$d/pp2" 2) \
        && ! grep -q '^\[PerfLog\]' "$d/pp2.log"; then
        pass "megatron,paddle formats, pp 2 on 2 ranks: a memory line per rank, gpu_num 2, run_mode mp, no [PerfLog] ($out; $out2)"
    else fail "megatron,paddle formats, pp 2: ${out:-} ${out2:-}"; fi
else
    fail "mpirun not found: install OpenMPI (bash scripts/install_deps.sh)"
fi

# 3. off by default; a failed run; a bad value
timeout 120 ./train_gpt_cpu "${base[@]}" -x 2 -o "$d/plain" > "$d/plain.log" 2>&1 || fail "plain run: $(tail -2 "$d/plain.log")"
if out=$($PY tests/log_formats_checks.py absent "$d/plain.log"); then pass "no --log-format: no harness lines ($out)"; else fail "no --log-format: $out"; fi
timeout 120 ./train_gpt_cpu "${base[@]}" -l 1e30 --clip 0 --skip-limit 0 -o "$d/nan" --log-format paddle > "$d/nan.log" 2>&1
rc=$?
if [ $rc = 1 ] && out=$($PY tests/log_formats_checks.py failed "$d/nan.log"); then pass "a diverging run exits 1 with the Paddle result's $out"
else fail "diverging run: exit $rc, ${out:-}"; fi
./train_gpt_cpu "${base[@]}" --log-format megatron,tensorboard > "$d/bad.log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q -- '--log-format' "$d/bad.log"; then pass "--log-format megatron,tensorboard stops with exit 1 naming the flag"
else fail "bad --log-format: exit $rc, $(head -2 "$d/bad.log")"; fi

# 4. the CUDA trainer, emulated
if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] train_gpt's formats: the CUDA emulation's fiber switch is x86-64 only"
elif ! make -s build/train_gpt_fp32_emu > "$d/build_emu.log" 2>&1; then
    fail "build/train_gpt_fp32_emu builds: $(grep -m 3 error "$d/build_emu.log")"
else
    timeout 300 build/train_gpt_fp32_emu "${base[@]}" -o "$d/cuda" --log-format all > "$d/cuda.log" 2>&1 || fail "train_gpt run: $(tail -2 "$d/cuda.log")"
    for f in megatron flagperf paddle; do
        case $f in
            megatron) args=("$d/cuda.log" "$d/cuda" 1 $gbs) ;;
            flagperf) args=("$d/cuda.log" "$d/cuda") ;;
            paddle) args=("$d/cuda.log" "$d/cuda" 1) ;;
        esac
        if out=$($PY tests/log_formats_checks.py $f "${args[@]}"); then pass "train_gpt: $f format, one GPU: parsed values equal metrics.jsonl / summary.json ($out)"
        else fail "train_gpt: $f format, one GPU: $out"; fi
    done
    EMU_NCCL_TIMEOUT=60 timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 build/train_gpt_fp32_emu "${base[@]}" --dp 2 \
        -o "$d/cuda_dp2" --log-format megatron,paddle > "$d/cuda_dp2.log" 2>&1 || fail "train_gpt dp 2 run: $(tail -2 "$d/cuda_dp2.log")"
    if out=$($PY tests/log_formats_checks.py megatron "$d/cuda_dp2.log" "$d/cuda_dp2" 2 $gbs) &&
        out2=$($PY tests/log_formats_checks.py paddle "$d/cuda_dp2.log" "$d/cuda_dp2" 2) && ! grep -q '^\[PerfLog\]' "$d/cuda_dp2.log"; then
        pass "train_gpt: megatron,paddle formats, dp 2 on 2 emulated GPUs: a memory line per rank, gpu_num 2, no [PerfLog] ($out; $out2)"
    else fail "train_gpt: megatron,paddle formats, dp 2: ${out:-} ${out2:-}"; fi
fi

[ $status = 0 ] && rm -rf "$d"
exit $status
