// llmc/comm.h: the collectives interface of the parallel trainers, MPI backend (host pointers;
// the CPU trainer). llmc/comm_nccl.cuh defines the same names over NCCL (device pointers) for the
// CUDA trainer; a program includes exactly one backend.
// A Comm is a group of ranks (the world, or a dp / tp / pp / embedding sub-group). Every call
// is collective over the group except send/recv. With USE_MPI the calls map onto MPI (every
// call checked, with file and line); without it there is one process and every call is the
// identity (a group of size 1). Calls on a group of size 1 return at once (copying when send
// and receive buffers differ), so the one-process path pays nothing.
// Counts are size_t: a call above COMM_MAX_COUNT (INT_MAX, MPI's int counts) elements is split
// into pieces. Reduce-scatter and all-gather take equal counts only (NCCL has no variable-count
// collectives; ZeRO pads its buckets so that counts are equal, llmc/zero.h). Types: float, double.
// Host values (loss, norm, flags, memory rows) go through comm_host_sum / comm_host_max, which
// take host pointers in both backends.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "llmc/utils.h"
#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#define mpi_check(call) mpi_check_((call), #call, __FILE__, __LINE__)
static inline void mpi_check_(int err, const char* what, const char* file, int line) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fprintf(stderr, "error: MPI call %s failed at %s:%d: %s\n", what, file, line, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
template <typename T> static inline MPI_Datatype mpi_type();
template <> inline MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> inline MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
#endif

// The largest count of one MPI call; larger calls go in pieces (a test may lower it).
#ifndef COMM_MAX_COUNT
#define COMM_MAX_COUNT ((size_t)INT_MAX)
#endif

struct Comm {
    int size = 1, rank = 0;
#ifdef USE_MPI
    MPI_Comm mpi = MPI_COMM_NULL;
#endif
};

// A pending non-blocking send (one MPI request per piece); its buffer must stay alive until comm_wait.
struct CommRequest {
#ifdef USE_MPI
    std::vector<MPI_Request> reqs;
#endif
};

// The world. Without MPI, or when the program was not started by a launcher (mpirun, srun),
// one process that never initialises MPI (no start-up cost).
static inline Comm comm_init(int* argc, char*** argv) {
    Comm w;
#ifdef USE_MPI
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMIX_RANK")) return w;
    mpi_check(MPI_Init(argc, argv));
    w.mpi = MPI_COMM_WORLD;
    mpi_check(MPI_Comm_size(w.mpi, &w.size));
    mpi_check(MPI_Comm_rank(w.mpi, &w.rank));
#endif
    return w;
}

static inline void comm_finalize() {
#ifdef USE_MPI
    int init = 0;
    MPI_Initialized(&init);
    if (init) mpi_check(MPI_Finalize());
#endif
}

// Sub-group of `parent` holding the ranks in `members` (world ranks, in group-rank order); the
// calling rank must be one of them. Collective over parent: every rank calls it with its own list.
static inline Comm comm_group(const Comm& parent, const std::vector<int>& members) {
    Comm c;
    c.size = (int)members.size();
    for (int i = 0; i < c.size; i++)
        if (members[i] == parent.rank) c.rank = i;
#ifdef USE_MPI
    if (parent.size == 1) return c;
    // color: the group's first member identifies the group; key: the position in it
    mpi_check(MPI_Comm_split(parent.mpi, members[0], c.rank, &c.mpi));
#endif
    return c;
}

// buf[n] = sum (or max) over the group, on every rank.
template <typename T>
static inline void comm_all_reduce_sum(const Comm& c, T* buf, size_t n) {
    if (c.size == 1) return;
#ifdef USE_MPI
    for (size_t o = 0; o < n; o += COMM_MAX_COUNT)
        mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), MPI_SUM, c.mpi));
#endif
}
template <typename T>
static inline void comm_all_reduce_max(const Comm& c, T* buf, size_t n) {
    if (c.size == 1) return;
#ifdef USE_MPI
    for (size_t o = 0; o < n; o += COMM_MAX_COUNT)
        mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), MPI_MAX, c.mpi));
#endif
}

// send[c.size * n] summed over the group; rank r receives piece r (n values) in recv[n].
template <typename T>
static inline void comm_reduce_scatter(const Comm& c, const T* send, T* recv, size_t n) {
    if (c.size == 1) { if (recv != send) memcpy(recv, send, sizeof(T) * n); return; }
#ifdef USE_MPI
    if (n <= COMM_MAX_COUNT) {
        mpi_check(MPI_Reduce_scatter_block(send, recv, (int)n, mpi_type<T>(), MPI_SUM, c.mpi));
        return;
    }
    // in pieces: piece r of every rank reduced onto rank r
    for (int r = 0; r < c.size; r++)
        for (size_t o = 0; o < n; o += COMM_MAX_COUNT)
            mpi_check(MPI_Reduce(send + (size_t)r * n + o, r == c.rank ? recv + o : nullptr, (int)std::min(COMM_MAX_COUNT, n - o),
                                 mpi_type<T>(), MPI_SUM, r, c.mpi));
#endif
}

// Rank r contributes send[n]; recv[c.size * n] holds every piece in rank order on every rank.
// send == recv + c.rank * n is allowed (in place).
template <typename T>
static inline void comm_all_gather(const Comm& c, const T* send, T* recv, size_t n) {
    if (c.size == 1) { if (recv != send) memcpy(recv, send, sizeof(T) * n); return; }
#ifdef USE_MPI
    const bool in_place = send == recv + (size_t)c.rank * n;
    if (n <= COMM_MAX_COUNT) {
        mpi_check(MPI_Allgather(in_place ? MPI_IN_PLACE : (const void*)send, (int)n, mpi_type<T>(), recv, (int)n, mpi_type<T>(), c.mpi));
        return;
    }
    // in pieces: every rank's piece broadcast from it
    if (!in_place) memcpy(recv + (size_t)c.rank * n, send, sizeof(T) * n);
    for (int r = 0; r < c.size; r++)
        for (size_t o = 0; o < n; o += COMM_MAX_COUNT)
            mpi_check(MPI_Bcast(recv + (size_t)r * n + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), r, c.mpi));
#endif
}

template <typename T>
static inline void comm_broadcast(const Comm& c, T* buf, size_t n, int root) {
    if (c.size == 1) return;
#ifdef USE_MPI
    for (size_t o = 0; o < n; o += COMM_MAX_COUNT)
        mpi_check(MPI_Bcast(buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), root, c.mpi));
#endif
}

// Point to point within a group (peer is a group rank), matched by tag. The send does not
// block: the buffer must stay untouched until comm_wait(req). The receive blocks until the data
// is there. (The NCCL backend has no tags and matches in issue order.)
template <typename T>
static inline void comm_send(const Comm& c, const T* buf, size_t n, int peer, int tag, CommRequest* req) {
    if (c.size == 1) die("comm_send: a group of one rank has no peer (rank %d)", peer);
#ifdef USE_MPI
    for (size_t o = 0; o < n || o == 0; o += COMM_MAX_COUNT) {
        req->reqs.push_back(MPI_REQUEST_NULL);
        mpi_check(MPI_Isend(buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), peer, tag, c.mpi, &req->reqs.back()));
    }
#endif
}
template <typename T>
static inline void comm_recv(const Comm& c, T* buf, size_t n, int peer, int tag) {
    if (c.size == 1) die("comm_recv: a group of one rank has no peer (rank %d)", peer);
#ifdef USE_MPI
    for (size_t o = 0; o < n || o == 0; o += COMM_MAX_COUNT)
        mpi_check(MPI_Recv(buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), peer, tag, c.mpi, MPI_STATUS_IGNORE));
#endif
}
static inline void comm_wait(CommRequest* req) {
#ifdef USE_MPI
    for (MPI_Request& r : req->reqs) mpi_check(MPI_Wait(&r, MPI_STATUS_IGNORE));
    req->reqs.clear();
#endif
}

static inline void comm_barrier(const Comm& c) {
    if (c.size == 1) return;
#ifdef USE_MPI
    mpi_check(MPI_Barrier(c.mpi));
#endif
}

// Host values (loss, norm, flags, memory rows): v[n] summed (max-ed) over the group, on every rank.
static inline void comm_host_sum(const Comm& c, double* v, size_t n) { comm_all_reduce_sum(c, v, n); }
static inline void comm_host_max(const Comm& c, double* v, size_t n) { comm_all_reduce_max(c, v, n); }
