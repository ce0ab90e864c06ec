#!/usr/bin/env bash
# scripts/launch.sh N CMD [ARGS...]: starts N ranks of CMD on this machine without MPI, each with RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, and MASTER_ADDR=127.0.0.1 with a free MASTER_PORT (or the
# MASTER_PORT already set) for llmc/parallel/launch.h's id exchange. Waits for all; when one fails, stops the others
# and exits with its status (0 when all succeed). Ctrl-C stops them all.
#   scripts/launch.sh 2 ./train_gpt -c gpt3_tiny
set -u
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/launch.sh N CMD [ARGS...]   (N ranks on this machine)" >&2; exit 2
fi
n=$1; shift
if [ -z "${MASTER_PORT:-}" ]; then
    # a port the kernel hands out as free (bound, then released)
    MASTER_PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) \
        || MASTER_PORT=$((20000 + RANDOM % 40000))
fi
export MASTER_ADDR=127.0.0.1 MASTER_PORT WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap 'stop_all; exit 130' INT TERM
for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r "$@" &
    pids+=($!)
done
# Poll rather than `wait -n -p`: when several ranks end at once, bash may already have collected one that
# `wait -n` is then asked about ("no such job"), losing which rank failed. `wait PID` on a rank that has ended
# returns its status whenever it was collected.
status=0
running=("${pids[@]}")
while [ ${#running[@]} -gt 0 ]; do
    rest=()
    for p in "${running[@]}"; do
        if kill -0 "$p" 2>/dev/null; then rest+=("$p"); continue; fi
        wait "$p"
        rc=$?
        if [ $rc -ne 0 ] && [ $status -eq 0 ]; then
            status=$rc
            for ((r = 0; r < n; r++)); do [ "${pids[$r]}" = "$p" ] && failed=$r; done
            echo "scripts/launch.sh: rank ${failed:-?} exited with status $rc; stopping the others" >&2
            stop_all
        fi
    done
    running=("${rest[@]}")
    [ ${#running[@]} -gt 0 ] && sleep 0.1
done
exit $status
