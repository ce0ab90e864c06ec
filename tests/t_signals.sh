#!/usr/bin/env bash
# Stop signals (llmc/run/signals.h): SIGTERM or SIGINT finishes the current step, writes a checkpoint and exits 0 with a
# message; a second signal exits at once; under mpirun a signal to one rank stops every rank after the same step.
# Checked on both trainers, the CUDA one on emulated GPUs (build/train_gpt_fp32_emu):
#   one process: SIGTERM after a few steps: exit 0, "stopped by SIGTERM after step K", checkpoint K complete and
#   metrics.jsonl holding K steps; --resume auto then finishes the run with the weights and moments of the
#   uninterrupted run, to the bit. SIGINT likewise (its message). Two SIGTERMs 20 ms apart: exit 143 at once with the
#   second signal's message, and no checkpoint directory left half-written.
#   mpirun -np 2 (dp 2, and pp 2 on the CPU trainer): SIGTERM to one rank only: mpirun exits 0, one message, the
#   checkpoint of the step at which all stopped, and the resumed run equals the uninterrupted one.
# About 60 s on 2 busy cores.
set -u
d=build/t_signals
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
ck() { echo "$d/$1/ckpt_$(printf %08d "$2")"; }
lines() { wc -l 2> /dev/null < "$d/$1/metrics.jsonl" || echo 0; }
# wait_steps NAME N PID: until NAME's metrics.jsonl has N lines (or PID ended)
wait_steps() {
    local i
    for ((i = 0; i < 6000; i++)); do
        [ "$(lines "$1")" -ge "$2" ] && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.02
    done
    return 1
}
# the pids of a job's ranks: the processes whose command line starts with PROG and names -o DIR
rank_pids() { pgrep -f "^$1 .*-o $2( |$)"; }

# stopped NAME PROG SIGNAL NP ARGS...: starts PROG (NP > 1: under mpirun), sends SIGNAL after 2 steps to the last
# rank's process, expects exit 0, the message, checkpoint K complete and K metrics lines; sets k
stopped() {
    local name=$1 prog=$2 sig=$3 np=$4; shift 4
    local pid rc
    if [ "$np" = 1 ]; then timeout 600 "$prog" "$@" -o "$d/$name" > "$d/$name.log" 2>&1 &
    else EMU_NCCL_TIMEOUT=90 timeout 600 "${MPIRUN[@]}" -np "$np" "$prog" "$@" -o "$d/$name" > "$d/$name.log" 2>&1 & fi
    pid=$!
    if ! wait_steps "$name" 2 $pid; then wait $pid; fail "$name: the run ended before its second step: $(tail -2 "$d/$name.log")"; k=0; return 1; fi
    kill -"$sig" "$(rank_pids "$prog" "$d/$name" | tail -1)"
    wait $pid
    rc=$?
    k=$(sed -n "s/^stopped by SIG$sig after step \([0-9]*\): checkpoint .* written; continue with --resume auto$/\1/p" "$d/$name.log")
    if [ $rc = 0 ] && [ -n "$k" ] && [ "$(grep -c '^stopped by' "$d/$name.log")" = 1 ] && [ -f "$(ck "$name" "$k")/DONE" ] &&
       [ "$(lines "$name")" = "$k" ]; then
        return 0
    fi
    fail "$name: SIG$sig: exit $rc, stopped at '${k:-}', $(lines "$name") metrics lines, $(grep -m1 -E 'error|stopped' "$d/$name.log")"
    k=0
    return 1
}
# resumed NAME REF PROG NP ARGS...: NAME continued with --resume auto; its last checkpoint equals REF's to the bit
resumed() {
    local name=$1 ref=$2 prog=$3 np=$4; shift 4
    if [ "$np" = 1 ]; then timeout 600 "$prog" "$@" -o "$d/$name" --resume auto > "$d/$name.resume.log" 2>&1
    else EMU_NCCL_TIMEOUT=90 timeout 600 "${MPIRUN[@]}" -np "$np" "$prog" "$@" -o "$d/$name" --resume auto > "$d/$name.resume.log" 2>&1; fi
    local rc=$? last
    last=$(ls -d "$d/$ref"/ckpt_* | tail -1 | xargs basename)
    [ $rc = 0 ] && diff -r "$d/$ref/$last" "$d/$name/$last" > /dev/null  # every file: shards, indexes, state, DONE
}

cpu=(-c gpt3_tiny --vocab 301 -b 4 -t 32 -d 256 -x 60 -v 0 -g 0 -i data/mobydick.txt -j "")
timeout 300 ./train_gpt_cpu "${cpu[@]}" -o "$d/cpu_ref" > "$d/cpu_ref.log" 2>&1 || fail "uninterrupted CPU run: $(tail -2 "$d/cpu_ref.log")"
if stopped cpu_term ./train_gpt_cpu TERM 1 "${cpu[@]}"; then
    if resumed cpu_term cpu_ref ./train_gpt_cpu 1 "${cpu[@]}"; then
        pass "train_gpt_cpu: SIGTERM: stopped after step $k with checkpoint $k (exit 0); resumed, step 60's weights and moments equal the uninterrupted run's bit for bit"
    else fail "train_gpt_cpu: resume after SIGTERM: $(tail -2 "$d/cpu_term.resume.log")"; fi
fi
stopped cpu_int ./train_gpt_cpu INT 1 "${cpu[@]}" && pass "train_gpt_cpu: SIGINT: stopped after step $k with checkpoint $k (exit 0)"

timeout 300 ./train_gpt_cpu "${cpu[@]}" -b 16 -d 512 -o "$d/twice" > "$d/twice.log" 2>&1 &
pid=$!
if wait_steps twice 1 $pid; then
    tp=$(rank_pids ./train_gpt_cpu "$d/twice")
    kill -TERM "$tp"; sleep 0.02; kill -TERM "$tp"
    wait $pid
    rc=$?
    # a checkpoint directory without DONE would be half-written (llmc/run/checkpoint.h renames only complete ones)
    partial=$(for c in "$d"/twice/ckpt_*; do [ -e "$c" ] && [ ! -f "$c/DONE" ] && echo "$c"; done)
    if [ $rc = 143 ] && grep -q "a second stop signal: exiting at once" "$d/twice.log" && [ -z "$partial" ]; then
        pass "train_gpt_cpu: two SIGTERMs 20 ms apart: exit 143 at once with the second signal's message, no partial checkpoint taken"
    else fail "train_gpt_cpu: two SIGTERMs: exit $rc, $(tail -2 "$d/twice.log"), $(ls "$d/twice")"; fi
else wait $pid; fail "two SIGTERMs: the run ended before its first step: $(tail -2 "$d/twice.log")"; fi

for layout in "dp 2" "pp 2"; do
    name=cpu_${layout/ /}
    timeout 300 "${MPIRUN[@]}" -np 2 ./train_gpt_cpu "${cpu[@]}" --${layout/ / } -o "$d/$name.ref" > "$d/$name.ref.log" 2>&1 ||
        fail "uninterrupted --$layout run: $(tail -2 "$d/$name.ref.log")"
    if stopped "$name" ./train_gpt_cpu TERM 2 "${cpu[@]}" --${layout/ / }; then
        if resumed "$name" "$name.ref" ./train_gpt_cpu 2 "${cpu[@]}" --${layout/ / }; then
            pass "train_gpt_cpu --$layout: SIGTERM to one rank: both stopped after step $k, one checkpoint (exit 0); resumed, equal to the uninterrupted run bit for bit"
        else fail "train_gpt_cpu --$layout: resume after SIGTERM: $(tail -2 "$d/$name.resume.log")"; fi
    fi
done

# the CUDA trainer on emulated GPUs
emu=(-c gpt3_tiny --vocab 301 --layers 2 -b 1 -t 32 -d 64 -x 5 -v 0 -g 0 -i data/mobydick.txt -j "")
if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] train_gpt: the CUDA emulation's fiber switch is x86-64 only"
elif ! make -s build/train_gpt_fp32_emu > "$d/build_emu.log" 2>&1; then
    fail "build/train_gpt_fp32_emu builds: $(grep -m 3 error "$d/build_emu.log")"
else
    timeout 600 build/train_gpt_fp32_emu "${emu[@]}" -o "$d/emu_ref" > "$d/emu_ref.log" 2>&1 || fail "uninterrupted train_gpt run: $(tail -2 "$d/emu_ref.log")"
    if stopped emu_term build/train_gpt_fp32_emu TERM 1 "${emu[@]}"; then
        if resumed emu_term emu_ref build/train_gpt_fp32_emu 1 "${emu[@]}"; then
            pass "train_gpt, one emulated GPU: SIGTERM: stopped after step $k with checkpoint $k (exit 0); resumed, equal to the uninterrupted run bit for bit"
        else fail "train_gpt: resume after SIGTERM: $(tail -2 "$d/emu_term.resume.log")"; fi
    fi
    stopped emu_dp2 build/train_gpt_fp32_emu TERM 2 "${emu[@]}" -d 128 --dp 2 &&
        pass "train_gpt --dp 2 on 2 emulated GPUs: SIGTERM to one rank: both stopped after step $k, one checkpoint (exit 0)"
fi

[ $status = 0 ] && rm -rf "$d"
exit $status
