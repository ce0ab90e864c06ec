#!/usr/bin/env bash
# Hangs (llmc/parallel/comm_mpi.h, --comm-timeout): a rank that stops answering ends every rank of the CPU trainer. Under
# mpirun, the test hook LLMC_TEST_STALL=R:S makes world rank R sleep forever before step S; with
# --comm-timeout 3 its peers must give up in their next collective or pipeline receive, print which rank,
# group and operation timed out, and MPI_Abort must end every rank (the stalled one included) with a
# non-zero status well before the 60 s wrapper: within END_S of the start (start-up, step 1, the 3 s
# timeout and the abort take about 6 s on 2 busy cores). Checks:
#   1. dp2 (2 ranks), rank 1 stalls at step 2: rank 0 names the dp group's all-reduce (the first collective
#      of a dp-only step is the gradient all-reduce).
#   2. tp2 pp2 (4 ranks), rank 3 stalls at step 2: some other rank names its tp or pp group.
#   3. the same tp2 pp2 run with no stall and --comm-timeout 3 finishes every step, exit 0 (no false timeout).
#   4. --comm-timeout -1 or garbage stops with a message naming the flag, exit 1 (and --io-timeout's).
#   5. slow storage: LLMC_TEST_WRITE_DELAY=4 makes the writing rank sleep 4 s before each checkpoint, longer than
#      --comm-timeout 2; the other rank waits for it under --io-timeout (default 7200 s), so dp2 with a checkpoint
#      every step finishes with every checkpoint complete (DONE), on the CPU trainer and on the CUDA trainer
#      (emulated, --comm-timeout 3 and a delay of 6 s); with --io-timeout 1 the CPU run ends, naming --io-timeout.
#      The export at the end (--save-safetensors) on tp2: tp rank 1's sends wait for rank 0's writing, under
#      --io-timeout, so a 4 s delay under --comm-timeout 2 finishes.
#      The emulated NCCL's default mode completes a collective inside the call (its own EMU_NCCL_TIMEOUT bounds the
#      wait), so on the CUDA trainer this shows the hook and a complete run, not which timeout a wait runs under.
#   6. the CUDA trainer's host waits (emulated in the stream mode, build/train_gpt_streams_emu, where a collective is
#      queued on its stream and the host goes on, as on a GPU): dp2 zero3, rank 1 stalls at step 2, --comm-timeout 20
#      (a step takes 2 s there on a free core; 20 leaves room on busy ones) under EMU_NCCL_TIMEOUT=120: rank 0's wait for the step's work (queued behind the all-gather that never
#      completes) must end the run with --comm-timeout's message, not sit in a cudaStreamSynchronize until the
#      emulation's own timeout (on an H200 that wait hung until the job was killed).
set -u
d=build/t_hangs.$$
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
END_S=15
MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
ARGS=(-c llama_tiny -b 2 -t 32 -x 5 -v 0 -g 0 -i data/mobydick.txt -j "" -o "" --comm-timeout 3)
if ! command -v mpirun > /dev/null; then
    echo "[SKIP] hangs under mpirun: mpirun not found (apt-get install -y openmpi-bin libopenmpi-dev)"
    exit 0
fi

# stall NAME NP STALL PATTERN FLAGS...: the run with LLMC_TEST_STALL=STALL ends within END_S, non-zero, and
# its output matches PATTERN (the timeout message), after step 1 and before step 2 finished
stall() {
    local name=$1 np=$2 s=$3 pattern=$4; shift 4
    local t0 t1 rc
    t0=$(date +%s.%N)
    LLMC_TEST_STALL=$s timeout 60 "${MPIRUN[@]}" -np "$np" ./train_gpt_cpu "${ARGS[@]}" "$@" > "$d/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    local msg
    msg=$(grep -m1 -E "did not complete within" "$d/$name.log")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && awk -v s="$secs" -v m=$END_S 'BEGIN { exit !(s < m) }' \
        && grep -qE -- "$pattern" "$d/$name.log" && grep -q "^step *1/" "$d/$name.log" && ! grep -q "^step *2/" "$d/$name.log"; then
        echo "[PASS] $name: LLMC_TEST_STALL=$s (rank:step); every rank ended in ${secs} s (exit $rc): $msg"
    else
        echo "[FAIL] $name: exit $rc after ${secs} s (want non-zero, not 124, < $END_S s, and /$pattern/): $(tail -c 600 "$d/$name.log" | tr '\n' ' ')"
        status=1
    fi
}
stall "dp2 stall" 2 1:2 "^error: rank 0: all-reduce \(sum\) on the dp group \(size 2\) did not complete within 3 s \(--comm-timeout\); a peer is stuck or died$"
stall "tp2 pp2 stall" 4 3:2 "^error: rank [012]: .+ on the (tp|pp) group \(size 2\) did not complete within 3 s \(--comm-timeout\); a peer is stuck or died$" --tp 2 --pp 2

# a healthy run under the same short timeout
timeout 60 "${MPIRUN[@]}" -np 4 ./train_gpt_cpu "${ARGS[@]}" --tp 2 --pp 2 > "$d/healthy.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^step *5/5" "$d/healthy.log" && ! grep -q "did not complete" "$d/healthy.log"; then
    echo "[PASS] tp2 pp2 with no stall and --comm-timeout 3: 5 steps, exit 0"
else
    echo "[FAIL] tp2 pp2 with no stall and --comm-timeout 3: exit $rc: $(tail -c 600 "$d/healthy.log" | tr '\n' ' ')"; status=1
fi

# bad values
for flag in --comm-timeout --io-timeout; do
    for v in -1 abc; do
        ./train_gpt_cpu "${ARGS[@]}" "$flag" "$v" > "$d/bad.txt" 2>&1
        rc=$?
        if [ $rc -eq 1 ] && grep -q -- "$flag" "$d/bad.txt" && grep -q -- "'$v'" "$d/bad.txt"; then
            echo "[PASS] $flag $v: exit 1, $(head -1 "$d/bad.txt")"
        else
            echo "[FAIL] $flag $v: exit $rc: $(head -c 300 "$d/bad.txt" | tr '\n' ' ')"; status=1
        fi
    done
done

# slow storage: NAME PROGRAM COMM_TIMEOUT DELAY FLAGS...: dp2, 2 steps, a checkpoint each; sets rc and the log
slow() {
    local name=$1 prog=$2 ct=$3 delay=$4; shift 4
    LLMC_TEST_WRITE_DELAY=$delay timeout 120 "${MPIRUN[@]}" -np 2 "$prog" -c llama_tiny -b 2 -t 64 -x 2 -v 0 -g 0 \
        -i data/mobydick.txt -j "" -n 1 -o "$d/$name" --dp 2 --comm-timeout "$ct" "$@" > "$d/$name.log" 2>&1
    rc=$?
}
slow_ok() {  # LABEL NAME: exit 0, both checkpoints complete, no timeout
    if [ $rc -eq 0 ] && [ -f "$d/$2/ckpt_00000001/DONE" ] && [ -f "$d/$2/ckpt_00000002/DONE" ] &&
        ! grep -q "did not complete" "$d/$2.log"; then
        echo "[PASS] $1: 2 steps, both checkpoints complete, exit 0"
    else
        echo "[FAIL] $1: exit $rc: $(tail -c 600 "$d/$2.log" | tr '\n' ' ')"; status=1
    fi
}
slow cpu_slow ./train_gpt_cpu 2 4
slow_ok "CPU trainer, dp2: checkpoint writes of 4 s under --comm-timeout 2" cpu_slow
# the export at the end: tp rank 1 sends its slices while rank 0 writes (4 s late): under --io-timeout too
LLMC_TEST_WRITE_DELAY=4 timeout 120 "${MPIRUN[@]}" -np 2 ./train_gpt_cpu -c llama_tiny -b 2 -t 64 -x 1 -v 0 -g 0 -i data/mobydick.txt \
    -j "" -o "" --tp 2 --comm-timeout 2 --save-safetensors "$d/export.safetensors" > "$d/export.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ -s "$d/export.safetensors" ] && ! grep -q "did not complete" "$d/export.log"; then
    echo "[PASS] CPU trainer, tp2: --save-safetensors written 4 s late under --comm-timeout 2 (tp rank 1 waits under --io-timeout)"
else
    echo "[FAIL] CPU trainer, tp2, a 4 s late export under --comm-timeout 2: exit $rc: $(tail -c 600 "$d/export.log" | tr '\n' ' ')"; status=1
fi
slow cpu_slow_io ./train_gpt_cpu 2 4 --io-timeout 1
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "did not complete within 1 s (--io-timeout)" "$d/cpu_slow_io.log"; then
    echo "[PASS] CPU trainer, dp2, --io-timeout 1: the wait on a 4 s checkpoint write ends the run (exit $rc): $(grep -m1 "did not complete" "$d/cpu_slow_io.log")"
else
    echo "[FAIL] CPU trainer, dp2, --io-timeout 1: exit $rc, want a timeout naming --io-timeout: $(tail -c 600 "$d/cpu_slow_io.log" | tr '\n' ' ')"; status=1
fi
if [ -x build/train_gpt_fp32_emu ] && [ "$(uname -m)" = x86_64 ]; then
    slow cuda_slow build/train_gpt_fp32_emu 3 6
    slow_ok "CUDA trainer (emulated), dp2: checkpoint writes of 6 s under --comm-timeout 3" cuda_slow
else
    echo "[SKIP] CUDA trainer (emulated) slow storage: build/train_gpt_fp32_emu is not built (x86-64 with MPI)"
fi
if [ -x build/train_gpt_streams_emu ] && [ "$(uname -m)" = x86_64 ]; then
    t0=$SECONDS
    LLMC_TEST_STALL=1:2 EMU_NCCL_TIMEOUT=120 timeout 200 "${MPIRUN[@]}" -np 2 build/train_gpt_streams_emu -c gpt3_tiny \
        --vocab 301 --layers 4 --embd 128 --heads 2 --kv-heads 2 -b 1 -t 64 -d 256 -x 4 -v 0 -g 0 -i data/mobydick.txt \
        -j "" -o "" --dp 2 --zero 3 --comm-timeout 20 > "$d/cuda_stall.log" 2>&1
    rc=$?
    want="^error: rank 0: the step's work \(its collectives included\) on the world group \(size 2\) did not complete within 20 s \(--comm-timeout\); a peer is stuck or died$"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE "$want" "$d/cuda_stall.log" && grep -q "^step *1/" "$d/cuda_stall.log" &&
       ! grep -q "EMU_NCCL_TIMEOUT" "$d/cuda_stall.log"; then
        echo "[PASS] CUDA trainer (emulated, stream mode), dp2 zero3, rank 1 stalls at step 2: rank 0's wait for the step ends the run in $((SECONDS - t0)) s (exit $rc): $(grep -m1 "did not complete" "$d/cuda_stall.log")"
    else
        echo "[FAIL] CUDA trainer (emulated, stream mode), dp2 zero3, rank 1 stalls at step 2: exit $rc, want --comm-timeout's message naming the step's wait: $(grep -v '^[|+ ]' "$d/cuda_stall.log" | tail -c 600 | tr '\n' ' ')"; status=1
    fi
else
    echo "[SKIP] CUDA trainer (emulated, stream mode) stall: build/train_gpt_streams_emu is not built (x86-64 with MPI)"
fi
[ $status -eq 0 ] && rm -rf "$d"
exit $status
