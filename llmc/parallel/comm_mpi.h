// llmc/parallel/comm_mpi.h: the collectives interface of the parallel trainers, MPI backend (host pointers;
// the CPU trainer). llmc/parallel/comm_nccl.cuh defines the same names over NCCL (device pointers) for the
// CUDA trainer; a program includes exactly one backend.
// A Comm is a group of ranks (the world, or a dp / tp / pp / embedding sub-group). Every call
// is collective over the group except send/recv. With USE_MPI the calls map onto MPI (every
// call checked, with file and line); without it there is one process and every call is the
// identity (a group of size 1). Calls on a group of size 1 return at once (copying when send
// and receive buffers differ), so the one-process path pays nothing.
// Counts are size_t: a call above COMM_MAX_COUNT (INT_MAX, MPI's int counts) elements is split
// into pieces. Reduce-scatter and all-gather take equal counts only (NCCL has no variable-count
// collectives; ZeRO pads its buckets so that counts are equal, llmc/parallel/zero.h). Types: float, double.
// Host values (loss, norm, flags, memory rows) go through comm_host_sum / comm_host_max, which
// take host pointers in both backends.
// Hangs: every call is non-blocking MPI (MPI_Ialltoall for the sums, MPI_Iallreduce for the max, MPI_Iallgather,
// MPI_Ibcast, MPI_Isend / MPI_Irecv, MPI_Ibarrier, ...) waited for by comm_mpi_wait, which polls MPI_Test;
// past comm_set_timeout's seconds (--comm-timeout; llmc/parallel/comm_timeout.h) it prints the world rank, the
// operation and the group's name and size, and MPI_Abort ends every rank. comm_group's MPI_Comm_split, at
// start-up, stays blocking (MPI has no non-blocking split).
#pragma once
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "llmc/parallel/comm_timeout.h"
#include "llmc/parallel/launch.h"
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
static inline int& comm_world_rank() {  // this process's world rank, for the timeout message
    static int rank = 0;
    return rank;
}
// Waits for one non-blocking call `op` on the group `group` (size `size`); past the timeout, ends every rank.
static inline void comm_mpi_wait(MPI_Request* req, const char* op, const char* group, int size) {
    CommPoll poll;
    while (true) {
        int done = 0;
        mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (comm_poll_expired(&poll)) {
            comm_timeout_message(comm_world_rank(), op, group, size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}
#endif

// The largest count of one MPI call; larger calls go in pieces (a test may lower it).
#ifndef COMM_MAX_COUNT
#define COMM_MAX_COUNT ((size_t)INT_MAX)
#endif

struct Comm {
    int size = 1, rank = 0;
    const char* name = "world";  // in messages: world, dp, tp, pp, emb
#ifdef USE_MPI
    MPI_Comm mpi = MPI_COMM_NULL;
#endif
};

// A pending non-blocking send (one MPI request per piece); its buffer must stay alive until comm_wait.
struct CommRequest {
#ifdef USE_MPI
    std::vector<MPI_Request> reqs;
    const char* group = "";  // for the timeout message: the group, its size, the peer and the tag
    int size = 0, peer = 0, tag = 0;
#endif
};

// The world must be the one the environment names (llmc/parallel/launch.h's variables: mpirun's, srun's, or RANK and
// WORLD_SIZE; or MPICH's PMI_SIZE). A process told it is one of N > 1 ranks that is not one of N MPI ranks (a build
// without MPI, RANK and WORLD_SIZE with no mpirun, or another MPI's mpirun) would train alone, N times over one -o: it
// stops, saying how to start it.
static inline void comm_check_world(const Comm& w, const char* prog) {
    LaunchInfo li = launch_info();
    if (li.world == 1 && getenv("PMI_SIZE")) {  // MPICH's mpiexec
        li.world = launch_env_int("PMI_SIZE", 1);
        li.rank = launch_env_int("PMI_RANK", 0);
        li.source = "PMI_SIZE, PMI_RANK";
    }
    if (li.world == 1 || w.size == li.world) return;
#ifndef USE_MPI
    const std::string why = "was built without MPI (rebuild it with mpicxx on PATH and NO_MPI unset)";
#else
    const std::string why = w.mpi == MPI_COMM_NULL
        ? "was not started by an MPI launcher (its ranks are MPI processes; RANK and WORLD_SIZE alone start train_gpt's)"
        : "sees an MPI world of " + std::to_string(w.size) + " (started by another MPI's mpirun than the one it was built with?)";
#endif
    die("the environment says this process is rank %d of %d (from %s), but %s %s, so it would train alone: start it "
        "with mpirun -np %d %s ..., or unset those variables to train in one process", li.rank, li.world, li.source, prog,
        why.c_str(), li.world, prog);
}

// The world. Without MPI, or when the program was not started by a launcher (mpirun, srun),
// one process that never initialises MPI (no start-up cost); comm_check_world's check either way.
static inline Comm comm_init(int* argc, char*** argv) {
    Comm w;
#ifdef USE_MPI
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
        mpi_check(MPI_Init(argc, argv));
        w.mpi = MPI_COMM_WORLD;
        mpi_check(MPI_Comm_size(w.mpi, &w.size));
        mpi_check(MPI_Comm_rank(w.mpi, &w.rank));
        comm_world_rank() = w.rank;
    }
#endif
    comm_check_world(w, (*argv)[0]);
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
// name: the group's name in messages (a string that outlives the Comm).
static inline Comm comm_group(const Comm& parent, const std::vector<int>& members, const char* name = "sub") {
    Comm c;
    c.name = name;
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

#ifdef USE_MPI
// Sums in rank order. MPI_SUM leaves the order of the additions to the library (its algorithm for the message size
// and the group's size, which differ between MPI versions and builds); these add the ranks' values in one fixed order,
// ((x_0 + x_1) + x_2) + ..., so a layout computes the same bits with any MPI. Piece r of every rank's send[size * n]
// goes to rank r (one all-to-all), which adds them up into recv[n]; send and recv may be the same buffer. op: the
// collective's name in a timeout's message.
template <typename T>
static inline void comm_sum_pieces_in_rank_order(const Comm& c, const T* send, T* recv, size_t n, const char* op) {
    const size_t m_max = COMM_MAX_COUNT;
    std::vector<T> out, in;
    for (size_t o = 0; o < n; o += m_max) {
        const size_t m = std::min(m_max, n - o);
        const T* pieces = send;  // already the all-to-all's layout when one round covers n
        if (m < n) {
            out.resize((size_t)c.size * m);
            for (int r = 0; r < c.size; r++) memcpy(out.data() + (size_t)r * m, send + (size_t)r * n + o, sizeof(T) * m);
            pieces = out.data();
        }
        in.resize((size_t)c.size * m);
        MPI_Request q;
        mpi_check(MPI_Ialltoall(pieces, (int)m, mpi_type<T>(), in.data(), (int)m, mpi_type<T>(), c.mpi, &q));
        comm_mpi_wait(&q, op, c.name, c.size);
        for (size_t i = 0; i < m; i++) {
            T s = in[i];
            for (int r = 1; r < c.size; r++) s += in[(size_t)r * m + i];
            recv[o + i] = s;
        }
    }
}
#endif

// buf[n] = max over the group, on every rank (the sum is comm_all_reduce_sum, after the all-gather it uses).
template <typename T>
static inline void comm_all_reduce_max(const Comm& c, T* buf, size_t n) {
    if (c.size == 1) return;
#ifdef USE_MPI
    for (size_t o = 0; o < n; o += COMM_MAX_COUNT) {
        MPI_Request r;
        mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), MPI_MAX, c.mpi, &r));
        comm_mpi_wait(&r, "all-reduce (max)", c.name, c.size);
    }
#endif
}

// send[c.size * n] summed over the group in rank order; rank r receives piece r (n values) in recv[n].
template <typename T>
static inline void comm_reduce_scatter(const Comm& c, const T* send, T* recv, size_t n) {
    if (c.size == 1) { if (recv != send) memcpy(recv, send, sizeof(T) * n); return; }
#ifdef USE_MPI
    comm_sum_pieces_in_rank_order(c, send, recv, n, "reduce-scatter");
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
        MPI_Request r;
        mpi_check(MPI_Iallgather(in_place ? MPI_IN_PLACE : (const void*)send, (int)n, mpi_type<T>(), recv, (int)n, mpi_type<T>(), c.mpi, &r));
        comm_mpi_wait(&r, "all-gather", c.name, c.size);
        return;
    }
    // in pieces: every rank's piece broadcast from it
    if (!in_place) memcpy(recv + (size_t)c.rank * n, send, sizeof(T) * n);
    for (int r = 0; r < c.size; r++)
        for (size_t o = 0; o < n; o += COMM_MAX_COUNT) {
            MPI_Request q;
            mpi_check(MPI_Ibcast(recv + (size_t)r * n + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), r, c.mpi, &q));
            comm_mpi_wait(&q, "all-gather (in pieces)", c.name, c.size);
        }
#endif
}

// buf[n] = sum over the group, on every rank: each rank adds up its share of the elements in rank
// order (comm_sum_pieces_in_rank_order), then every rank gathers the shares.
template <typename T>
static inline void comm_all_reduce_sum(const Comm& c, T* buf, size_t n) {
    if (c.size == 1) return;
#ifdef USE_MPI
    const size_t k = (n + c.size - 1) / c.size;  // each rank's share, the last one padded with zeros
    std::vector<T> all((size_t)c.size * k, (T)0), mine(k);
    memcpy(all.data(), buf, sizeof(T) * n);
    comm_sum_pieces_in_rank_order(c, all.data(), mine.data(), k, "all-reduce (sum)");
    comm_all_gather(c, mine.data(), all.data(), k);
    memcpy(buf, all.data(), sizeof(T) * n);
#endif
}

template <typename T>
static inline void comm_broadcast(const Comm& c, T* buf, size_t n, int root) {
    if (c.size == 1) return;
#ifdef USE_MPI
    for (size_t o = 0; o < n; o += COMM_MAX_COUNT) {
        MPI_Request r;
        mpi_check(MPI_Ibcast(buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), root, c.mpi, &r));
        comm_mpi_wait(&r, "broadcast", c.name, c.size);
    }
#endif
}

// Point to point within a group (peer is a group rank), matched by tag. The send does not
// block: the buffer must stay untouched until comm_wait(req). The receive waits until the data
// is there. Both waits have the timeout (the receive's and comm_wait's). (The NCCL backend has no tags and matches in issue order.)
template <typename T>
static inline void comm_send(const Comm& c, const T* buf, size_t n, int peer, int tag, CommRequest* req) {
    if (c.size == 1) die("comm_send: a group of one rank has no peer (rank %d)", peer);
#ifdef USE_MPI
    req->group = c.name; req->size = c.size; req->peer = peer; req->tag = tag;
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
    char op[64];
    snprintf(op, sizeof(op), "receive from group rank %d (tag %d)", peer, tag);
    for (size_t o = 0; o < n || o == 0; o += COMM_MAX_COUNT) {
        MPI_Request r;
        mpi_check(MPI_Irecv(buf + o, (int)std::min(COMM_MAX_COUNT, n - o), mpi_type<T>(), peer, tag, c.mpi, &r));
        comm_mpi_wait(&r, op, c.name, c.size);
    }
#endif
}
static inline void comm_wait(CommRequest* req) {
#ifdef USE_MPI
    if (req->reqs.empty()) return;
    char op[64];
    snprintf(op, sizeof(op), "send to group rank %d (tag %d)", req->peer, req->tag);
    for (MPI_Request& r : req->reqs) comm_mpi_wait(&r, op, req->group, req->size);
    req->reqs.clear();
#endif
}

static inline void comm_barrier(const Comm& c) {
    if (c.size == 1) return;
#ifdef USE_MPI
    MPI_Request r;
    mpi_check(MPI_Ibarrier(c.mpi, &r));
    comm_mpi_wait(&r, "barrier", c.name, c.size);
#endif
}

// Host values (loss, norm, flags, memory rows): v[n] summed (max-ed) over the group, on every rank.
static inline void comm_host_sum(const Comm& c, double* v, size_t n) { comm_all_reduce_sum(c, v, n); }
static inline void comm_host_max(const Comm& c, double* v, size_t n) { comm_all_reduce_max(c, v, n); }
