// llmc/parallel/comm_nccl.cuh: the NCCL backend of the Comm interface (llmc/parallel/comm_mpi.h is the MPI backend, with the
// same names; a program includes one of them). For the CUDA trainer: buffers are DEVICE pointers, except
// comm_host_sum / comm_host_max, which take host values (loss, norm, flags, memory rows).
// Streams: each Comm carries its own cudaStream_t, c.stream. Every collective and point-to-point call is
// enqueued on c.stream and returns at once, before the data has moved (NCCL's asynchronous semantics): the
// caller orders it against its compute stream with events (cudaEventRecord on the compute stream and
// cudaStreamWaitEvent(c.stream, ...) before a collective reads what a kernel wrote; the reverse before a
// kernel reads what the collective wrote). The host waits only in comm_wait, comm_barrier,
// comm_host_sum / comm_host_max and comm_finalize; those waits poll the stream and NCCL's asynchronous
// error (ncclCommGetAsyncError), so a failed peer ends the program with NCCL's message instead of a hang;
// a wait longer than comm_set_timeout's seconds (--comm-timeout, llmc/parallel/comm_timeout.h: a peer stuck without
// an error) prints the world rank, the operation and the group, aborts the communicator (ncclCommAbort, which
// fails the peers' pending operations, so their waits end too) and exits 1.
// The world comes from llmc/parallel/launch.h (mpirun, srun or RANK/WORLD_SIZE/LOCAL_RANK; the NCCL unique id made
// by rank 0 reaches the others over TCP or a file, and the ranks' command lines must agree), one GPU per
// local rank (GPU local_rank; with LLMC_SHARE_GPU=1, several ranks on one GPU: local_rank % device count).
// Sub-groups are ncclCommSplit of their parent (color = the group's first member, key = the position in it); a
// group of one rank has no NCCL communicator.
// Counts are size_t (NCCL's own counts); types float, __nv_bfloat16 and double.
// Point to point: NCCL has no tags, so the tag argument is checked for nothing: a send and a receive
// between two ranks match in the order they were issued. A send does not finish until the peer posts the
// matching receive, so two ranks that both send to each other first deadlock (order them).
// Every NCCL call is checked (ncclCheck, llmc/cuda_common.cuh: the call, file, line, ncclGetErrorString
// and NCCL's last message).
#pragma once
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "llmc/parallel/comm_timeout.h"
#include "llmc/utils.h"
#include "llmc/cuda_common.cuh"
#include "llmc/parallel/launch.h"
#ifndef USE_NCCL
#error "llmc/parallel/comm_nccl.cuh needs NCCL: build with -DUSE_NCCL and NCCL's include path (the Makefile adds both when it finds nccl.h)"
#endif

struct Comm {
    int size = 1, rank = 0;
    const char* name = "world";    // in messages: world, dp, tp, pp, emb
    ncclComm_t nccl = nullptr;     // null in a group of one rank
    cudaStream_t stream = nullptr; // every call of this group is enqueued here
    double* scratch = nullptr;     // device, COMM_SCRATCH doubles: comm_host_sum / max and comm_barrier
};
static const size_t COMM_SCRATCH = 256;

// A send in flight: comm_wait returns once the stream has passed it (its buffer may then be reused).
struct CommRequest {
    ncclComm_t nccl = nullptr;
    cudaStream_t stream = nullptr;
    const char* group = "";  // for the timeout message: the group, its size and the peer
    int size = 0, peer = 0;
};

template <typename T> static inline ncclDataType_t nccl_type();
template <> inline ncclDataType_t nccl_type<float>() { return ncclFloat; }
template <> inline ncclDataType_t nccl_type<__nv_bfloat16>() { return ncclBfloat16; }
template <> inline ncclDataType_t nccl_type<__half>() { return ncclHalf; }
template <> inline ncclDataType_t nccl_type<double>() { return ncclDouble; }

// every Comm made, world first, for comm_finalize; the world's rank names group members
static inline std::vector<Comm>& comm_registry() {
    static std::vector<Comm> all;
    return all;
}

// The host waits until query() answers cudaSuccess, and dies with NCCL's message if the communicator failed meanwhile (a
// peer died or a network error) instead of waiting forever; past the timeout, it names `op` on the group `group` of
// `size` ranks, aborts the communicator and exits 1.
template <typename Query>
static inline void comm_poll_wait(ncclComm_t nccl, Query query, const char* op, const char* group, int size) {
    CommPoll poll;
    while (true) {
        cudaError_t e = query();
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) cudaCheck(e);
        if (nccl) {
            ncclResult_t async = ncclSuccess;
            ncclCheck(ncclCommGetAsyncError(nccl, &async));
            if (async != ncclSuccess) {
                fflush(stdout);
                fprintf(stderr, "NCCL asynchronous error %d (%s) while waiting [%s:%d]; last NCCL message: %s\n",
                        (int)async, ncclGetErrorString(async), __FILE__, __LINE__, ncclGetLastError(nccl));
                ncclCommAbort(nccl);
                exit(1);
            }
        }
        if (comm_poll_expired(&poll)) {
            comm_timeout_message(comm_registry().empty() ? 0 : comm_registry()[0].rank, op, group, size);
            if (nccl) ncclCommAbort(nccl);
            exit(1);
        }
    }
}
// The host waits for everything enqueued on `stream` so far.
static inline void comm_stream_wait(ncclComm_t nccl, cudaStream_t stream, const char* op, const char* group, int size) {
    comm_poll_wait(nccl, [stream] { return cudaStreamQuery(stream); }, op, group, size);
}
// The host waits for everything enqueued on the device so far, on every stream: an event recorded on the legacy
// default stream completes after all earlier work of the other (blocking) streams.
static inline void comm_device_wait(ncclComm_t nccl, const char* op, const char* group, int size) {
    cudaEvent_t ev;
    cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(ev, 0));
    comm_poll_wait(nccl, [ev] { return cudaEventQuery(ev); }, op, group, size);
    cudaCheck(cudaEventDestroy(ev));
}

static inline Comm comm_make(int size, int rank, ncclComm_t nccl) {
    Comm c;
    c.size = size; c.rank = rank; c.nccl = nccl;
    cudaCheck(cudaStreamCreate(&c.stream));
    cudaCheck(cudaMalloc(&c.scratch, COMM_SCRATCH * sizeof(double)));
    comm_registry().push_back(c);
    return c;
}

// The world: rank and size from the launcher, this rank's GPU selected, the NCCL communicator made from
// rank 0's unique id (one rank: no NCCL at all). argc / argv: the layout the ranks must agree on.
static inline Comm comm_init(int* argc, char*** argv) {
    if (!comm_registry().empty()) die("comm_init: called twice");
    LaunchInfo li = launch_info();
    int devices = cuda_require_device();
    // One GPU per rank: more ranks on a node than it has visible GPUs would put two on one GPU. Only where the
    // launch says so (LLMC_SHARE_GPU=1: tests of many ranks on one GPU, scripts/launch.sh --share-gpu) do ranks
    // share, local rank r on GPU r % devices; NCCL then needs each rank to look like a host of its own (its own
    // NCCL_HOSTID, loopback sockets) or, from NCCL 2.30 on, NCCL_MULTI_RANK_GPU_ENABLE=1 (dev/probe/nccl_ranks.cu).
    const int local_ranks = std::max(li.local_world, li.local_rank + 1);  // local_world 0: unknown
    const bool share = launch_share_gpu();
    if (local_ranks > devices && !share)
        die("%d ranks on this node (local rank %d, from %s) but %d visible GPU%s: each rank needs a GPU of its own; "
            "start at most %d ranks per node, or make more GPUs visible (CUDA_VISIBLE_DEVICES); to share GPUs on "
            "purpose (tests), LLMC_SHARE_GPU=1 (scripts/launch.sh --share-gpu)", local_ranks, li.local_rank,
            li.source, devices, devices == 1 ? "" : "s", devices);
    if (share && li.world > 1 && local_ranks > devices && !getenv("NCCL_HOSTID") && !getenv("NCCL_MULTI_RANK_GPU_ENABLE"))
        die("LLMC_SHARE_GPU=1 puts %d ranks on %d GPU%s, and NCCL refuses two ranks of one host on one GPU: give each "
            "rank its own NCCL_HOSTID (scripts/launch.sh --share-gpu does), or set NCCL_MULTI_RANK_GPU_ENABLE=1 "
            "(NCCL 2.30 and newer)", local_ranks, devices, devices == 1 ? "" : "s");
    cudaCheck(cudaSetDevice(share ? li.local_rank % devices : li.local_rank));
    ncclComm_t nccl = nullptr;
    if (li.world > 1) {
        ncclUniqueId id;
        memset(&id, 0, sizeof(id));
        if (li.rank == 0) ncclCheck(ncclGetUniqueId(&id));
        launch_exchange_id(li, &id, sizeof(id), launch_layout(*argc, *argv));
        ncclCheck(ncclCommInitRank(&nccl, li.world, id, li.rank));
        launch_done(li);  // every rank has joined, hence read the id
    }
    return comm_make(li.world, li.rank, nccl);
}

// Every communicator made (groups first, the world last) destroyed once its stream is done.
static inline void comm_finalize() {
    std::vector<Comm>& all = comm_registry();
    for (size_t i = all.size(); i-- > 0;) {
        comm_stream_wait(all[i].nccl, all[i].stream, "the work left at the end", all[i].name, all[i].size);
        if (all[i].nccl) ncclCheck(ncclCommDestroy(all[i].nccl));
        cudaCheck(cudaFree(all[i].scratch));
        cudaCheck(cudaStreamDestroy(all[i].stream));
    }
    all.clear();
}

// Sub-group of `parent` holding the world ranks `members`, in group-rank order; this rank must be one
// of them. Collective over parent: every rank of it calls this with its own group's list. name: the group's
// name in messages (a string that outlives the Comm). A group of all the parent's ranks is the parent itself (its
// communicator, stream and scratch under another name: a communicator of its own would take its own device
// buffers, hundreds of MiB to GiB, for nothing); every rank sees the same list then, so all take this branch.
static inline Comm comm_group(const Comm& parent, const std::vector<int>& members, const char* name = "sub") {
    if (comm_registry().empty()) die("comm_group: comm_init first");
    int me = comm_registry()[0].rank, rank = -1;
    for (size_t i = 0; i < members.size(); i++)
        if (members[i] == me) rank = (int)i;
    if (rank < 0) die("comm_group: world rank %d is not in the group it asked for (first member %d)", me,
                      members.empty() ? -1 : members[0]);
    if ((int)members.size() == parent.size && rank == parent.rank) {
        Comm same = parent;
        same.name = name;
        return same;
    }
    ncclComm_t nccl = nullptr;
    if (parent.size > 1)  // collective over the parent even for a group of one (which gets no communicator)
        ncclCheck(ncclCommSplit(parent.nccl, members.size() > 1 ? members[0] : NCCL_SPLIT_NOCOLOR, rank, &nccl, nullptr));
    Comm c = comm_make((int)members.size(), rank, nccl);
    c.name = name;
    comm_registry().back().name = name;
    return c;
}

// buf[n] = sum (or max) over the group, on every rank
template <typename T>
static inline void comm_all_reduce_sum(const Comm& c, T* buf, size_t n) {
    if (c.size == 1 || n == 0) return;
    ncclCheck(ncclAllReduce(buf, buf, n, nccl_type<T>(), ncclSum, c.nccl, c.stream));
}
template <typename T>
static inline void comm_all_reduce_max(const Comm& c, T* buf, size_t n) {
    if (c.size == 1 || n == 0) return;
    ncclCheck(ncclAllReduce(buf, buf, n, nccl_type<T>(), ncclMax, c.nccl, c.stream));
}

// send[c.size * n] summed over the group; rank r receives piece r (n values) in recv[n]
// (recv may be send + c.rank * n)
template <typename T>
static inline void comm_reduce_scatter(const Comm& c, const T* send, T* recv, size_t n) {
    if (n == 0) return;
    if (c.size == 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, n * sizeof(T), cudaMemcpyDeviceToDevice, c.stream));
        return;
    }
    ncclCheck(ncclReduceScatter(send, recv, n, nccl_type<T>(), ncclSum, c.nccl, c.stream));
}

// rank r contributes send[n]; recv[c.size * n] holds every piece in rank order (send may be
// recv + c.rank * n: in place)
template <typename T>
static inline void comm_all_gather(const Comm& c, const T* send, T* recv, size_t n) {
    if (n == 0) return;
    if (c.size == 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, n * sizeof(T), cudaMemcpyDeviceToDevice, c.stream));
        return;
    }
    ncclCheck(ncclAllGather(send, recv, n, nccl_type<T>(), c.nccl, c.stream));
}

template <typename T>
static inline void comm_broadcast(const Comm& c, T* buf, size_t n, int root) {
    if (c.size == 1 || n == 0) return;
    ncclCheck(ncclBroadcast(buf, buf, n, nccl_type<T>(), root, c.nccl, c.stream));
}

// Point to point within a group (peer is a group rank); the tag is not used (issue order matches).
// The send's buffer must stay untouched until comm_wait(req); the receive's data is there for work
// ordered after it on c.stream.
template <typename T>
static inline void comm_send(const Comm& c, const T* buf, size_t n, int peer, int tag, CommRequest* req) {
    if (c.size == 1) die("comm_send: a group of one rank has no peer (rank %d)", peer);
    ncclCheck(ncclSend(buf, n, nccl_type<T>(), peer, c.nccl, c.stream));
    req->nccl = c.nccl;
    req->stream = c.stream;
    req->group = c.name;
    req->size = c.size;
    req->peer = peer;
}
template <typename T>
static inline void comm_recv(const Comm& c, T* buf, size_t n, int peer, int tag) {
    if (c.size == 1) die("comm_recv: a group of one rank has no peer (rank %d)", peer);
    ncclCheck(ncclRecv(buf, n, nccl_type<T>(), peer, c.nccl, c.stream));
}
// Sends and receives posted between comm_group_start and comm_group_end (ncclGroupStart / ncclGroupEnd) form one
// group: NCCL starts them together, so a send in it cannot block a receive posted beside it (pipeline exchanges).
static inline void comm_group_start() { ncclCheck(ncclGroupStart()); }
static inline void comm_group_end() { ncclCheck(ncclGroupEnd()); }
static inline void comm_wait(CommRequest* req) {
    if (!req->stream) return;
    char op[64];
    snprintf(op, sizeof(op), "send to group rank %d", req->peer);
    comm_stream_wait(req->nccl, req->stream, op, req->group, req->size);
    req->stream = nullptr;
}

// Communicators whose operations are enqueued on two streams: a group of all its parent's ranks is the parent's
// communicator (comm_group), and comm_set_stream moving the group's collectives to another stream (the tp group's to the
// compute stream) leaves the parent's on its own.
static inline std::vector<ncclComm_t>& comm_two_streams() {
    static std::vector<ncclComm_t> all;
    return all;
}
// c's collectives from here on enqueued on s (a copy of c; the registry's keeps its stream for comm_finalize).
static inline void comm_set_stream(Comm* c, cudaStream_t s) {
    for (const Comm& r : comm_registry())
        if (c->nccl && r.nccl == c->nccl && r.stream != s && std::string(r.name) != c->name)
            comm_two_streams().push_back(c->nccl);
    c->stream = s;
}

// Host values through the device scratch: copied in, reduced, copied out, waited for. On a communicator that serves
// two streams the device's earlier work, on every stream, is waited for first: NCCL needs every rank to run one
// communicator's operations in one order, and the other stream may still hold queued collectives of it.
static inline void comm_host_reduce(const Comm& c, double* v, size_t n, ncclRedOp_t op, const char* what) {
    if (c.size == 1) return;
    const std::vector<ncclComm_t>& two = comm_two_streams();
    if (std::find(two.begin(), two.end(), c.nccl) != two.end()) comm_device_wait(c.nccl, what, c.name, c.size);
    for (size_t i = 0; i < n; i += COMM_SCRATCH) {
        size_t k = n - i < COMM_SCRATCH ? n - i : COMM_SCRATCH;
        cudaCheck(cudaMemcpyAsync(c.scratch, v + i, k * sizeof(double), cudaMemcpyHostToDevice, c.stream));
        ncclCheck(ncclAllReduce(c.scratch, c.scratch, k, ncclDouble, op, c.nccl, c.stream));
        cudaCheck(cudaMemcpyAsync(v + i, c.scratch, k * sizeof(double), cudaMemcpyDeviceToHost, c.stream));
        comm_stream_wait(c.nccl, c.stream, what, c.name, c.size);
    }
}
static inline void comm_host_sum(const Comm& c, double* v, size_t n) { comm_host_reduce(c, v, n, ncclSum, "all-reduce (sum) of host values"); }
static inline void comm_host_max(const Comm& c, double* v, size_t n) { comm_host_reduce(c, v, n, ncclMax, "all-reduce (max) of host values"); }

// The host waits for everything enqueued on c.stream (its collectives, and copies ordered after them): dies with NCCL's
// message if the communicator failed meanwhile, and past --comm-timeout names `op`, as every wait of this file.
static inline void comm_stream_sync(const Comm& c, const char* op) { comm_stream_wait(c.nccl, c.stream, op, c.name, c.size); }
// The host waits for another stream s (the compute stream), whose work may wait on c's collectives (an event of c's
// stream, or c's collectives enqueued on s): as comm_stream_sync, under --comm-timeout, naming `op` on c's group.
// The CUDA trainer's waits that can sit behind a collective (the step's end, evaluation, sampling, the weights in and
// out, a checkpoint) go through it: a cudaStreamSynchronize behind a collective whose peer has stopped never returns.
// One rank: a plain cudaStreamSynchronize (no peer to wait for; a long step is not a stall).
static inline void comm_wait_stream(const Comm& c, cudaStream_t s, const char* op) {
    if (c.size == 1) cudaCheck(cudaStreamSynchronize(s));
    else comm_stream_wait(c.nccl, s, op, c.name, c.size);
}

// One small operation of each kind the trainer runs on c (all-reduce, reduce-scatter, all-gather, and with `p2p` a
// send to the next group rank and a receive from the previous one, as pipeline stages exchange), waited for. NCCL
// connects a communicator's channels and peers, and allocates their device buffers, at its first operation of each
// kind: after this the free device memory counts them, and the step has nothing left to allocate inside NCCL.
static inline void comm_warm_up(const Comm& c, bool p2p) {
    if (c.size == 1) return;
    const size_t n = COMM_SCRATCH / c.size;  // doubles per rank
    ncclCheck(ncclAllReduce(c.scratch, c.scratch, n, ncclDouble, ncclSum, c.nccl, c.stream));
    ncclCheck(ncclReduceScatter(c.scratch, c.scratch + c.rank * n, n, ncclDouble, ncclSum, c.nccl, c.stream));
    ncclCheck(ncclAllGather(c.scratch + c.rank * n, c.scratch, n, ncclDouble, c.nccl, c.stream));
    if (p2p) {
        ncclCheck(ncclGroupStart());
        ncclCheck(ncclSend(c.scratch, 1, ncclDouble, (c.rank + 1) % c.size, c.nccl, c.stream));
        ncclCheck(ncclRecv(c.scratch + 1, 1, ncclDouble, (c.rank + c.size - 1) % c.size, c.nccl, c.stream));
        ncclCheck(ncclGroupEnd());
    }
    comm_stream_wait(c.nccl, c.stream, "the first operations (warm-up)", c.name, c.size);
}

// Every rank of the group has reached this point, and everything enqueued on c.stream before it is done.
static inline void comm_barrier(const Comm& c) {
    if (c.size == 1) { comm_stream_wait(nullptr, c.stream, "barrier", c.name, c.size); return; }
    double one = 1;
    comm_host_reduce(c, &one, 1, ncclSum, "barrier");
}
