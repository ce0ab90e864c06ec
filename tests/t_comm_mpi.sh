#!/usr/bin/env bash
# llmc/parallel/comm_mpi.h's MPI backend with calls split into pieces (tests/test_comm_mpi.cpp): in one process, and
# under mpirun with 2 and 3 ranks (one [PASS]/[FAIL] line per call kind and rank count).
set -u
status=0
./build/test_comm_mpi || status=1
if ! command -v mpirun > /dev/null; then
    echo "[SKIP] comm under mpirun: mpirun not found (apt-get install -y openmpi-bin libopenmpi-dev)"
    exit $status
fi
for np in 2 3; do
    OMP_NUM_THREADS=1 timeout 120 mpirun --oversubscribe --allow-run-as-root -np $np ./build/test_comm_mpi || status=1
done
exit $status
