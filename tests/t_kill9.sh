#!/usr/bin/env bash
# Checkpoints under kill -9 and a full disk (llmc/run/checkpoint.h's crash safety), on train_gpt_cpu.
#  1. A run writing a checkpoint every step is killed with SIGKILL (the whole process group, all
#     ranks at once) after a random delay, then `--resume auto` is started again and killed again,
#     until a run reaches the last step. At least 20 kills must land while a checkpoint is being
#     written (a .tmp_ckpt_* directory is left behind). After every kill, the resume must start
#     from the newest ckpt_* directory whose DONE marker exists (never a .tmp_* one), and the final
#     weights, optimizer state and step-30 metrics must be bit-identical to an uninterrupted run.
#     Done for one process, and for 2 ranks (dp 2, ZeRO 1) under mpirun, each rank writing its own shard
#     while the other may be anywhere in its write (the kill lands on both at once).
#  2. A full disk during a checkpoint write (LLMC_FAIL_WRITE_AFTER_BYTES, a test-only fault in
#     fwrite_check): exit status 1, a message naming the file and "No space left on device", the
#     previous checkpoint untouched, and `--resume auto` from it finishes bit-identically.
# About 2-4 minutes. The CUDA trainer writes checkpoints through the same llmc/run/checkpoint.h; killing
# it needs a GPU and is not done here.
set -u
d=build/t_kill9
rm -rf "$d" && mkdir -p "$d"
status=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1: $2"; status=1; }
[ -x ./train_gpt_cpu ] || { fail "setup" "./train_gpt_cpu is not built: run make train_gpt_cpu"; exit 1; }

steps=30
args=(-c gpt3_tiny -i data/mobydick.txt --vocab 256 --layers 1 -b 2 -t 32 -x $steps -v 0 -g 0 -n 1 --keep 2)
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -np 2)
RANDOM=$(( ${KILL9_SEED:-$$} % 32768 ))
echo "random seed $RANDOM (set KILL9_SEED to repeat)"

# newest complete checkpoint in $1 by the script's own reading of the format: ckpt_* with a DONE file
newest_complete() {
    local c="" x
    for x in "$1"/ckpt_*; do [ -f "$x/DONE" ] && c=$x; done
    echo "$c"
}

# kill_trials NAME MIN_MID_WRITE_KILLS LAUNCH...: runs the reference, then kill/resume cycles
kill_trials() {
    local name=$1 want=$2; shift 2
    local launch=("$@") ref="$d/$name.ref"
    local start_ns=$(date +%s%N)
    OMP_NUM_THREADS=1 timeout 300 "${launch[@]}" ./train_gpt_cpu "${args[@]}" ${extra[@]+"${extra[@]}"} --keep $steps -o "$ref" > "$ref.log" 2>&1 \
        || { fail "$name: uninterrupted run" "exit $?: $(tail -2 "$ref.log")"; return; }
    local ref_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
    local kills=0 mid=0 trials=0 bad=0 resumes=0 wrong_pick="" t0=$SECONDS
    while [ $mid -lt $want ] && [ $((SECONDS - t0)) -lt 400 ]; do
        trials=$((trials + 1))
        local out="$d/$name.$trials" cycle=0 finished=0
        while [ $finished -eq 0 ] && [ $cycle -lt 100 ]; do
            cycle=$((cycle + 1))
            local expect resume=()
            expect=$(newest_complete "$out")
            [ $cycle -gt 1 ] && resume=(--resume auto)
            local log="$out.cycle$cycle.log"
            OMP_NUM_THREADS=1 setsid "${launch[@]}" ./train_gpt_cpu "${args[@]}" ${extra[@]+"${extra[@]}"} -o "$out" "${resume[@]}" > "$log" 2>&1 &
            local pid=$!
            # a random moment within the uninterrupted run's duration
            local ms=$(( (RANDOM * 32768 + RANDOM) % (ref_ms + 1) ))
            sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
            if kill -0 $pid 2>/dev/null; then
                # every process of the session (mpirun and its ranks), by id
                local victims
                victims=$(ps -s $pid -o pid= 2>/dev/null)
                kill -9 $victims 2>/dev/null
                wait $pid 2>/dev/null
                kills=$((kills + 1))
                ls -d "$out"/.tmp_ckpt_* > /dev/null 2>&1 && mid=$((mid + 1))
            else
                wait $pid; local rc=$?
                [ $rc -eq 0 ] || { bad=$((bad + 1)); echo "cycle $cycle of $out exited $rc: $(tail -2 "$log")"; break; }
                finished=1
            fi
            if [ $cycle -gt 1 ] && grep -q "^resumed from" "$log"; then
                resumes=$((resumes + 1))
                grep -q "^resumed from $expect at step" "$log" || wrong_pick="$log: $(grep '^resumed from' "$log") (expected $expect)"
            elif [ $cycle -gt 1 ] && [ -n "$expect" ] && grep -q "^step " "$log"; then
                wrong_pick="$log: trained from scratch although $expect was complete"
            fi
        done
        [ $finished -eq 1 ] || { fail "$name: trial $trials" "did not finish"; continue; }
        diff -r "$ref/ckpt_000000$steps" "$out/ckpt_000000$steps" > /dev/null || bad=$((bad + 1))  # every rank's shard, the state
        # the last metrics line of each (a resumed run appends; repeated steps come before it)
        local a b
        a=$(tail -1 "$ref/metrics.jsonl" | sed 's/,"ms".*//')
        b=$(tail -1 "$out/metrics.jsonl" | sed 's/,"ms".*//')
        [ -n "$a" ] && [ "$a" = "$b" ] || { bad=$((bad + 1)); echo "metrics differ: '$a' vs '$b'"; }
    done
    echo "$name: uninterrupted run $ref_ms ms; $trials trials, $kills kills, $mid during a checkpoint write, $resumes resumes, $((SECONDS - t0)) s"
    if [ $mid -ge $want ]; then pass "$name: $mid kills -9 during checkpoint writes ($kills in all, $trials runs)"
    else fail "$name: kills during checkpoint writes" "only $mid of the $want wanted ($kills kills in $((SECONDS - t0)) s)"; fi
    if [ -z "$wrong_pick" ]; then pass "$name: every resume started from the newest checkpoint with DONE ($resumes resumes)"
    else fail "$name: resume picks the newest complete checkpoint" "$wrong_pick"; fi
    if [ $bad -eq 0 ]; then pass "$name: final weights, optimizer state, state.json and step-$steps metrics bit-identical to the uninterrupted run ($trials runs)"
    else fail "$name: bit-exact after kills" "$bad differences or failed runs (see $d)"; fi
}

extra=()
kill_trials one_process 20
if command -v mpirun > /dev/null 2>&1 && ./train_gpt_cpu --help 2>&1 | grep -q -- "--zero"; then
    extra=(--zero 1)
    kill_trials ranks2_zero1 10 "${MPIRUN[@]}"
else
    echo "[SKIP] 2 ranks: no mpirun"
fi

# 2. a full disk during the write of the step-2 checkpoint
extra=()
ref="$d/one_process.ref"
ck1=$(stat -c %s "$ref/ckpt_00000030/shard_00000.bin")
out="$d/full_disk"
# the first checkpoint fits, the second fails inside its shard (written in 4 MiB chunks through the checked write)
LLMC_FAIL_WRITE_AFTER_BYTES=$((ck1 + 500000)) OMP_NUM_THREADS=1 timeout 120 ./train_gpt_cpu "${args[@]}" -o "$out" > "$out.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -qF "$out/.tmp_ckpt_00000002/shard_00000.bin" "$out.log" && grep -q "No space left on device" "$out.log"; then
    pass "full disk: exit 1 and a message naming the file being written"
else fail "full disk: exit 1 and a message" "exit $rc: $(tail -2 "$out.log" | tr '\n' ' ')"; fi
# the first checkpoint is whole: byte for byte the uninterrupted run's (which keeps all of its own)
same=1
diff -r "$ref/ckpt_00000001" "$out/ckpt_00000001" > /dev/null || same=0
if [ $same -eq 1 ] && [ ! -e "$out/ckpt_00000002" ]; then pass "full disk: the previous checkpoint is intact and no step-2 checkpoint appears"
else fail "full disk: previous checkpoint intact" "$(ls -a "$out" | tr '\n' ' ')"; fi
OMP_NUM_THREADS=1 timeout 120 ./train_gpt_cpu "${args[@]}" -o "$out" --resume auto > "$out.resume.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^resumed from $out/ckpt_00000001 at step 1" "$out.resume.log" && \
   diff -r "$ref/ckpt_00000030" "$out/ckpt_00000030" > /dev/null && [ ! -e "$out/.tmp_ckpt_00000002" ]; then
    pass "full disk: --resume auto continues from step 1 to bit-identical final weights"
else fail "full disk: resume after it" "exit $rc: $(grep -E 'resumed|error' "$out.resume.log" | head -2 | tr '\n' ' ')"; fi
exit $status
