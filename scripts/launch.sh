#!/usr/bin/env bash
# scripts/launch.sh [--share-gpu] N CMD [ARGS...]: starts N ranks of CMD on this machine without MPI, each with RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, and MASTER_ADDR=127.0.0.1 with a free MASTER_PORT (or the
# MASTER_PORT already set) for llmc/parallel/launch.h's id exchange. Waits for all; when one fails, stops the others
# and exits with its status (0 when all succeed). Ctrl-C stops them all.
#   --share-gpu   the ranks may share the machine's GPUs (more ranks than GPUs: tests of layouts on one GPU):
#                 LLMC_SHARE_GPU=1 (rank r on GPU r % GPUs), each rank its own NCCL_HOSTID (llmc-rank-R: NCCL then
#                 treats the ranks as hosts of their own, which it requires of ranks on one GPU before NCCL 2.30),
#                 NCCL_SOCKET_IFNAME=lo and NCCL_IB_DISABLE=1 unless they are set
#   scripts/launch.sh 2 ./train_gpt -c gpt3_tiny
#   scripts/launch.sh --share-gpu 4 ./train_gpt_fp32 -c gpt3_tiny --dp 2 --tp 2
set -u
share=0
if [ "${1:-}" = --share-gpu ]; then share=1; shift; fi
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/launch.sh [--share-gpu] N CMD [ARGS...]   (N ranks on this machine)" >&2; exit 2
fi
n=$1; shift
if [ $share = 1 ]; then
    export LLMC_SHARE_GPU=1 NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
fi
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
    if [ $share = 1 ]; then NCCL_HOSTID=llmc-rank-$r RANK=$r LOCAL_RANK=$r "$@" &
    else RANK=$r LOCAL_RANK=$r "$@" &
    fi
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
