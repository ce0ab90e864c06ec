#!/usr/bin/env bash
# The NCCL backend of the Comm interface (llmc/parallel/comm_nccl.cuh) and the launch without MPI (llmc/parallel/launch.h,
# scripts/launch.sh), on the CPU:
#   1. launch: scripts/launch.sh 3 build/test_launch gives every rank rank 0's random 128-byte id, over
#      TCP and through LLMC_ID_FILE (twice on one path: the second run must not take the first run's file);
#      a rank that never arrives (WORLD_SIZE=3, two ranks started), a rank 0 that never arrives, and a rank
#      whose layout differs end every started rank with the message within LLMC_LAUNCH_TIMEOUT=3 s;
#      launch.sh stops the other ranks when one fails and exits with its status.
#   2. build/test_comm_emu (tests/test_comm.cu built against tests/cuda_emu, NCCL emulated over MPI) under
#      mpirun -np 2, 3 and 4: every collective, sub-group, host value and send/recv of comm_nccl.cuh
#      against values computed on the host; its checks are counted here, its failures printed.
#   3. a deadlock (two ranks that both send first) ends with the emulation's message under
#      EMU_NCCL_TIMEOUT=3 instead of hanging.
# About 30 s on 2 busy cores.
set -u
d=build/t_comm.$$
rm -rf "$d" && mkdir -p "$d"
status=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
export OMP_NUM_THREADS=1

if ! make -s build/test_launch > "$d/build_launch.log" 2>&1; then
    fail "build/test_launch builds: $(grep -m 3 error "$d/build_launch.log")"; exit 1
fi
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# $1 name, $2 log of a 3-rank test_launch run: ranks 0, 1, 2 each printed rank 0's id (not all zero)
check_ids() {
    local n ids
    n=$(grep -c '^rank [0-2] of 3 local [0-2]: [0-9a-f]\{256\}$' "$2")
    ids=$(sed -n 's/^rank [0-2] of 3 local [0-2]: //p' "$2" | sort -u)
    if [ "$n" -eq 3 ] && [ "$(echo "$ids" | wc -l)" -eq 1 ] && [ "$(grep -c '^rank 0 ' "$2")" -eq 1 ] &&
       [ "$(grep -c '^rank 2 ' "$2")" -eq 1 ] && [ "$ids" != "$(printf '0%.0s' $(seq 256))" ]; then
        pass "$1"
    else
        fail "$1: expected 3 ranks printing one id, got: $(head -c 600 "$2")"
    fi
}

# 1. the id exchange
scripts/launch.sh 3 build/test_launch > "$d/tcp.log" 2>&1 || fail "launch.sh 3 ranks over TCP exits 0: $(tail -3 "$d/tcp.log")"
check_ids "launch.sh 3 ranks: every rank gets rank 0's id over TCP" "$d/tcp.log"
for run in 1 2; do
    LLMC_ID_FILE=$d/id scripts/launch.sh 3 build/test_launch > "$d/file$run.log" 2>&1 ||
        fail "launch.sh 3 ranks through LLMC_ID_FILE exits 0 (run $run): $(tail -3 "$d/file$run.log")"
    check_ids "launch.sh 3 ranks: every rank gets rank 0's id through LLMC_ID_FILE (run $run)" "$d/file$run.log"
done
if [ "$(sed -n 's/^rank 0 of 3 local 0: //p' "$d/file1.log")" != "$(sed -n 's/^rank 0 of 3 local 0: //p' "$d/file2.log")" ]; then
    pass "LLMC_ID_FILE: a second run on the same path takes its own id, not the file the first run left"
else
    fail "LLMC_ID_FILE: the second run printed the first run's id"
fi

# $1 name, $2 how (tcp or file): WORLD_SIZE=3 but only ranks $3 started; every started rank must exit
# non-zero within the timeout, rank 0 (if started) naming the missing rank
missing_rank() {
    local name=$1 how=$2; shift 2
    local port; port=$(free_port)
    local start=$SECONDS pids=() r rc ok=1
    for r in "$@"; do
        if [ "$how" = tcp ]; then
            env RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port LLMC_LAUNCH_TIMEOUT=3 \
                timeout 60 build/test_launch > "$d/miss_${how}_$r.log" 2>&1 &
        else
            env RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LLMC_ID_FILE=$d/miss_id LLMC_LAUNCH_TIMEOUT=3 \
                timeout 60 build/test_launch > "$d/miss_${how}_$r.log" 2>&1 &
        fi
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}"; rc=$?
        r=${*:$((i + 1)):1}
        if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then ok=0; echo "rank $r: exit status $rc" >> "$d/miss_${how}.why"; fi
    done
    local took=$((SECONDS - start))
    local want="never arrived: 2"
    [ "$1" != 0 ] && want="rank 0 never"
    [ "$1" != 0 ] && [ "$how" = tcp ] && want="could not reach rank 0"
    if [ $ok -eq 1 ] && [ $took -le 20 ] && grep -q "$want" "$d/miss_${how}_$1.log"; then
        pass "$name (${took} s): $(head -1 "$d/miss_${how}_$1.log" | cut -c1-150)"
    else
        fail "$name: took ${took} s, statuses: $(cat "$d/miss_${how}.why" 2>/dev/null), rank $1 printed: $(head -c 300 "$d/miss_${how}_$1.log")"
    fi
}
missing_rank "TCP: rank 2 never arrives: ranks 0 and 1 stop with a message" tcp 0 1
grep -q "rank 0 stopped the job" "$d/miss_tcp_1.log" && pass "TCP: rank 1 hears why rank 0 stopped the job" ||
    fail "TCP: rank 1 does not say why the job stopped: $(head -c 300 "$d/miss_tcp_1.log")"
missing_rank "LLMC_ID_FILE: rank 2 never arrives: ranks 0 and 1 stop with a message" file 0 1
grep -q "rank 0 stopped the job" "$d/miss_file_1.log" && pass "LLMC_ID_FILE: rank 1 hears why rank 0 stopped the job" ||
    fail "LLMC_ID_FILE: rank 1 does not say why the job stopped: $(head -c 300 "$d/miss_file_1.log")"
rm -f "$d/miss_id"
missing_rank "TCP: rank 0 never arrives: rank 1 stops with a message" tcp 1
missing_rank "LLMC_ID_FILE: rank 0 never arrives: rank 1 stops with a message" file 1

# a rank with another layout
start=$SECONDS
if LLMC_LAUNCH_TIMEOUT=10 timeout 60 scripts/launch.sh 3 build/test_launch --odd-layout 2 > "$d/odd.log" 2>&1; then
    fail "a rank with another layout: the job succeeded"
elif grep -q "rank 2 disagrees with rank 0 on the layout" "$d/odd.log" && [ $((SECONDS - start)) -le 20 ]; then
    pass "a rank with another layout stops the job: $(grep -m 1 disagrees "$d/odd.log" | cut -c1-120)"
else
    fail "a rank with another layout: no message naming it: $(head -c 400 "$d/odd.log")"
fi
# launch.sh: one rank fails, the others (sleeping) are stopped, its status comes back
start=$SECONDS
timeout 60 scripts/launch.sh 3 bash -c '[ "$RANK" = 1 ] && exit 3; sleep 50' > "$d/kill.log" 2>&1
rc=$?
if [ $rc -eq 3 ] && [ $((SECONDS - start)) -le 10 ]; then
    pass "launch.sh: rank 1 fails (status 3), the others are stopped, status 3 returned ($((SECONDS - start)) s)"
else
    fail "launch.sh: status $rc after $((SECONDS - start)) s (want 3, at once): $(head -c 300 "$d/kill.log")"
fi

# 2. comm_nccl.cuh against the emulation, under mpirun
if ! command -v mpirun > /dev/null || ! command -v mpicxx > /dev/null; then
    echo "[SKIP] comm_nccl.cuh emulated: no mpirun / mpicxx (OpenMPI) here"
    exit $status
fi
if ! make -s build/test_comm_emu > "$d/build_emu.log" 2>&1; then
    fail "tests/test_comm.cu builds against the emulation: $(grep -m 3 -E 'error|warning' "$d/build_emu.log")"; exit 1
fi
if grep -q warning "$d/build_emu.log"; then fail "tests/test_comm.cu builds against the emulation without warnings: $(grep -m 3 warning "$d/build_emu.log")"
else pass "tests/test_comm.cu builds against the emulation without warnings"; fi
MPIRUN=(timeout 120 mpirun --oversubscribe --allow-run-as-root)
counts=()
for np in 2 3 4; do
    EMU_NCCL_TIMEOUT=60 "${MPIRUN[@]}" -np $np build/test_comm_emu > "$d/emu$np.log" 2>&1
    rc=$?
    p=$(grep -c '^\[PASS\]' "$d/emu$np.log"); f=$(grep -c '^\[FAIL\]' "$d/emu$np.log")
    counts+=("$p")
    if [ $rc -eq 0 ] && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]; then
        pass "comm_nccl.cuh emulated, mpirun -np $np: all $p checks (collectives fp32/bf16/fp64, groups, host values, send/recv)"
    else
        fail "comm_nccl.cuh emulated, mpirun -np $np: status $rc, $p passed, $f failed"
        grep '^\[FAIL\]' "$d/emu$np.log" | head -20 | sed "s/^\[FAIL\] /[FAIL] -np $np: /"
        [ "$f" -eq 0 ] && tail -5 "$d/emu$np.log"
    fi
done
[ "${counts[0]}" = "${counts[1]}" ] && [ "${counts[1]}" = "${counts[2]}" ] &&
    pass "the same ${counts[0]} checks ran at 2, 3 and 4 ranks" || fail "check counts differ across -np 2 3 4: ${counts[*]}"

# 3. a deadlock ends under the timeout, with the rank and the operation named
start=$SECONDS
EMU_NCCL_TIMEOUT=3 "${MPIRUN[@]}" -np 2 build/test_comm_emu --deadlock > "$d/deadlock.log" 2>&1
rc=$?
took=$((SECONDS - start))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 30 ] && grep -q "deadlock: rank [01] .* in ncclSend" "$d/deadlock.log"; then
    pass "both ranks send first: ended after ${took} s with: $(grep -m 1 'deadlock: rank' "$d/deadlock.log" | cut -c1-110)"
else
    fail "both ranks send first: status $rc after ${took} s, output: $(head -c 400 "$d/deadlock.log")"
fi

# 4. ranks that disagree: a communicator's collectives issued in different sequences (a max where the other rank sums),
# and a receive matched by a send of another size, each stop the job naming what differs
EMU_NCCL_TIMEOUT=30 "${MPIRUN[@]}" -np 2 build/test_comm_emu --mismatch > "$d/mismatch.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "different sequences of collectives.*collective #0 of rank [01] .* is ncclAllReduce(max) of 64 elements" "$d/mismatch.log" &&
    ! grep -q "no error reported" "$d/mismatch.log"; then
    pass "a sum on one rank, a max on the other: the job stops naming the first differing collective: $(grep -m 1 -o 'collective #0 of rank 1.*' "$d/mismatch.log" | cut -c1-90)"
else
    fail "a sum on one rank, a max on the other: status $rc, output: $(head -c 400 "$d/mismatch.log")"
fi
EMU_NCCL_TIMEOUT=30 "${MPIRUN[@]}" -np 2 build/test_comm_emu --mismatch p2p > "$d/mismatch_p2p.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "ncclRecv of 800 bytes from rank 1 matched its ncclSend of 400 bytes" "$d/mismatch_p2p.log"; then
    pass "a receive of 200 values matched by a send of 100: the job stops naming both sizes"
else
    fail "a receive of 200 values matched by a send of 100: status $rc, output: $(head -c 400 "$d/mismatch_p2p.log")"
fi

[ $status -eq 0 ] && rm -rf "$d"
exit $status
