// llmc/parallel/comm_timeout.h: the timeout of the Comm backends' host waits (--comm-timeout, llmc/run/flags.h), shared by
// llmc/parallel/comm_mpi.h (MPI) and llmc/parallel/comm_nccl.cuh (NCCL). Each backend waits for a collective or a send by polling
// (MPI_Test; cudaStreamQuery and ncclCommGetAsyncError) through comm_poll_expired; past the timeout it prints
// comm_timeout_message (the rank, the operation, the group) and ends every rank (MPI_Abort; ncclCommAbort).
// The timeout is 0 (none) until the program calls comm_set_timeout after parsing its flags.
#pragma once
#include <chrono>
#include <cstdio>
#include <thread>

static inline double& comm_timeout_s() {
    static double seconds = 0;
    return seconds;
}
// seconds > 0: the longest a host wait may take; 0: no timeout
static inline void comm_set_timeout(double seconds) { comm_timeout_s() = seconds; }

// One host wait: when it began and how long it sleeps between polls.
struct CommPoll {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    int polls = 0, sleep_us = 1;
};

// Called after a poll that found the operation unfinished: true once the wait has lasted past the timeout;
// otherwise it pauses before the next poll: the first 100 polls spin (a short collective finishes at once),
// then sleeps of 1 us doubling up to 256 us (a long wait leaves the core to the other ranks).
static inline bool comm_poll_expired(CommPoll* p) {
    const double timeout = comm_timeout_s();
    if (timeout > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - p->start).count() > timeout)
        return true;
    if (++p->polls <= 100) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(p->sleep_us));
    if (p->sleep_us < 256) p->sleep_us *= 2;
    return false;
}

// The waits that cover another rank's disk work (a checkpoint written by rank 0, read by every rank, the export at the
// end) run under their own timeout, --io-timeout, since storage can be far slower than any collective: comm_io_wait
// runs wait() (a barrier, a host reduction) with the io timeout in place of --comm-timeout.
static inline double& comm_io_timeout_s() {
    static double seconds = 0;
    return seconds;
}
static inline void comm_set_io_timeout(double seconds) { comm_io_timeout_s() = seconds; }
static inline const char*& comm_timeout_flag() {  // the flag that set the timeout in force, for the message
    static const char* flag = "--comm-timeout";
    return flag;
}
template <typename Wait>
static inline void comm_io_wait(Wait wait) {
    const double saved = comm_timeout_s();
    comm_timeout_s() = comm_io_timeout_s();
    comm_timeout_flag() = "--io-timeout";
    wait();
    comm_timeout_s() = saved;
    comm_timeout_flag() = "--comm-timeout";
}

// rank: the world rank; op: what did not complete; group and size: the Comm it ran on
static inline void comm_timeout_message(int rank, const char* op, const char* group, int size) {
    fflush(stdout);
    fprintf(stderr, "error: rank %d: %s on the %s group (size %d) did not complete within %g s (%s); "
                    "a peer is stuck or died\n", rank, op, group, size, comm_timeout_s(), comm_timeout_flag());
    fflush(stderr);
}
