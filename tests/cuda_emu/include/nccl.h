// tests/cuda_emu/include/nccl.h: the NCCL calls of llmc/parallel/comm_nccl.cuh emulated over MPI, so that CUDA
// programs built against this directory run several ranks under mpirun, each process one emulated GPU
// (MPI_Init on the first call that needs it; MPI_Finalize when the last communicator is destroyed).
// Streams: in the default mode the emulated CUDA runtime (cuda_emu.h) runs everything at once on the host, so every
// call here has finished when it returns, except inside ncclGroupStart/ncclGroupEnd, where the calls are posted and
// ncclGroupEnd waits for them all. In the stream mode (cuda_emu_streams.h) a call, or a group at ncclGroupEnd, is
// queued on its stream: when its turn comes its MPI requests are posted (the send buffers read), and it holds the
// stream until they complete (the receive buffers written); a group's calls must share one stream.
// Sequences: each communicator keeps the sequence of collectives its rank issued (operation, count, type, root); at
// ncclCommDestroy its ranks compare them, and a rank whose sequence differs fails the call naming the first
// collective that differs (real NCCL hangs or mixes data there). A receive that matched a send of another size fails
// (ncclSystemError, naming both sizes). EMU_NCCL_TRACE=1 prints each operation of the stream mode as it is posted.
// The communication is real NCCL's, in its ordering rules:
//   - a send does not finish until its matching receive is posted (MPI_Issend), so the programs that
//     deadlock on GPUs (two ranks that both send first, outside a group) deadlock here too;
//   - sends and receives between two ranks match in issue order (one MPI tag for all);
//   - collectives are posted as non-blocking MPI collectives in the order the program calls them.
// No wait hangs: every wait polls (MPI_Test) and after EMU_NCCL_TIMEOUT seconds (default 600) prints the
// rank, the operation, the peer or root and the size, and ends the whole job (MPI_Abort).
// bf16 sums: real NCCL adds bf16 values in fp32 and rounds to bf16 after each addition along its ring or
// tree, in an order its algorithm picks; here the values are summed in fp32 in rank order and rounded
// once, which differs from a GPU by at most a few bf16 ulps for more than 2 ranks (max is exact in both).
// Types: float, bfloat16, half and double (what the trainer moves). Counts up to INT_MAX elements (MPI's int
// counts; the call fails with a message above that).
// Device memory, as real NCCL takes it: each communicator charges the emulated device (cuda_emu.h's EMU_DEVICE_MIB)
// EMU_NCCL_INIT_MIB MiB when ncclCommInitRank or ncclCommSplit makes it, and EMU_NCCL_USE_MIB more at its first
// operation (NCCL connects channels and peers lazily); both default to 0. A charge past the device fails the call
// with ncclSystemError and "out of device memory" in ncclGetLastError, as a GPU's NCCL fails its cudaMalloc.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <climits>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <unistd.h>
#include "cuda_emu.h"
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct { int unused; } ncclConfig_t;  // split configurations are not emulated (pass nullptr)
struct EmuNcclComm {
    MPI_Comm mpi = MPI_COMM_NULL;
    int rank = 0, size = 0;
    double charged = 0;  // device bytes this communicator holds (EMU_NCCL_INIT_MIB, then EMU_NCCL_USE_MIB)
    bool used = false;   // its first operation has run
    std::vector<uint64_t> seq;          // a hash of each collective issued, in order
    std::vector<std::string> seq_what;  // and its description
};
typedef EmuNcclComm* ncclComm_t;

// ---------------------------------------------------------------- state
struct EmuNcclOp {  // one operation: posted by start(), complete when its request is
    MPI_Request req = MPI_REQUEST_NULL;
    const char* what = "";
    int comm_rank = 0, peer = -1;  // peer: the other rank of a send/recv, the root of a broadcast, -1 otherwise
    size_t bytes = 0;
    std::function<void()> finish;  // after completion: bf16 results rounded into place
    std::shared_ptr<std::vector<char>> tmp;  // buffers the operation owns while in flight
    std::function<int(MPI_Request*)> start;  // posts the MPI request (MPI's status)
    const void* rd = nullptr;      // the bytes it reads and writes (the stream mode's checker)
    size_t rn = 0;
    void* wr = nullptr;
    size_t wn = 0;
    bool is_recv = false;
    bool done = false;             // the stream mode: its request completed
};
struct EmuNcclState {
    int group_depth = 0;
    int live_comms = 0;
    std::vector<EmuNcclOp> pending;
    char last_error[512] = "";
};
inline EmuNcclState g_emu_nccl;
inline cudaStream_t g_emu_nccl_group_stream = nullptr;  // the stream mode: a group's stream and first call
inline const char* g_emu_nccl_group_file = "";
inline int g_emu_nccl_group_line = 0;

__attribute__((format(printf, 2, 3))) static inline ncclResult_t emu_nccl_fail(ncclResult_t r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_emu_nccl.last_error, sizeof(g_emu_nccl.last_error), fmt, ap);
    va_end(ap);
    return r;
}
static inline int emu_nccl_world_rank() {
    int init = 0, r = -1;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
static inline double emu_nccl_timeout() {
    const char* v = getenv("EMU_NCCL_TIMEOUT");
    return v ? atof(v) : 600.0;
}
// Tests op's request; true when complete. A receive that matched a send of another size fails.
static inline ncclResult_t emu_nccl_test(EmuNcclOp& op, int* flag) {
    MPI_Status st;
    if (MPI_Test(&op.req, flag, &st) != MPI_SUCCESS) return emu_nccl_fail(ncclSystemError, "MPI_Test failed in %s", op.what);
    if (*flag && op.is_recv) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != op.bytes)
            return emu_nccl_fail(ncclSystemError, "ncclRecv of %zu bytes from rank %d matched its ncclSend of %d bytes "
                                 "(the two sides disagree on the size; NCCL's result is undefined)", op.bytes, op.peer, got);
    }
    return ncclSuccess;
}
static inline ncclResult_t emu_nccl_start(EmuNcclOp& op) {
    if (op.start(&op.req) != MPI_SUCCESS) return emu_nccl_fail(ncclSystemError, "%s: posting its MPI request failed", op.what);
    return ncclSuccess;
}

// Waits for every posted operation, polling, under the timeout.
static inline ncclResult_t emu_nccl_wait_all() {
    double t0 = emu_now_ms(), limit = emu_nccl_timeout() * 1000;
    std::vector<EmuNcclOp>& ops = g_emu_nccl.pending;
    std::vector<char> done(ops.size(), 0);
    size_t left = ops.size();
    while (left > 0) {
        for (size_t i = 0; i < ops.size(); i++) {
            if (done[i]) continue;
            int flag = 0;
            if (ncclResult_t r = emu_nccl_test(ops[i], &flag)) { ops.clear(); return r; }
            if (flag) { done[i] = 1; left--; }
        }
        if (left == 0) break;
        if (emu_now_ms() - t0 > limit) {
            for (size_t i = 0; i < ops.size(); i++) {
                if (done[i]) continue;
                fprintf(stderr, "nccl emulation: deadlock: rank %d (world rank %d) waited %.0f s (EMU_NCCL_TIMEOUT) in %s "
                        "(peer/root %d, %zu bytes): the other side never posted its matching call, so this program "
                        "hangs on GPUs too\n", ops[i].comm_rank, emu_nccl_world_rank(), limit / 1000, ops[i].what,
                        ops[i].peer, ops[i].bytes);
                break;
            }
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        usleep(50);
    }
    for (EmuNcclOp& op : ops) if (op.finish) op.finish();
    ops.clear();
    return ncclSuccess;
}
#ifdef EMU_STREAMS
// the stream mode: the operations of a call or a group queued on their stream as one operation
static inline ncclResult_t emu_nccl_queue(cudaStream_t st, const char* file, int line) {
    auto ops = std::make_shared<std::vector<EmuNcclOp>>(std::move(g_emu_nccl.pending));
    g_emu_nccl.pending.clear();
    const char* what = (*ops)[0].what;
    emu_streams::enqueue(emu_stream_index(st), what, file, line, [ops]() {
        for (EmuNcclOp& op : *ops) {
            if (getenv("EMU_NCCL_TRACE"))
                fprintf(stderr, "nccl emulation: world rank %d posts %s of %zu bytes (group rank %d, peer/root %d)\n",
                        emu_nccl_world_rank(), op.what, op.bytes, op.comm_rank, op.peer);
            emu_streams::access(op.rd, op.rn, false);
            if (ncclResult_t r = emu_nccl_start(op)) {
                fprintf(stderr, "nccl emulation: %s\n", g_emu_nccl.last_error);
                MPI_Abort(MPI_COMM_WORLD, 1);
                (void)r;
            }
        }
    }, [ops]() {
        for (EmuNcclOp& op : *ops) {
            if (op.done) continue;
            int flag = 0;
            if (emu_nccl_test(op, &flag)) {
                fprintf(stderr, "nccl emulation: %s\n", g_emu_nccl.last_error);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (!flag) return false;
            op.done = true;
        }
        for (EmuNcclOp& op : *ops) {
            if (op.finish) op.finish();
            emu_streams::access(op.wr, op.wn, true);
        }
        return true;
    });
    return ncclSuccess;
}
#endif
static inline ncclResult_t emu_nccl_post(EmuNcclOp op, cudaStream_t st, const char* file, int line) {
#ifdef EMU_STREAMS
    const char* what = op.what;
    g_emu_nccl.pending.push_back(std::move(op));
    if (g_emu_nccl.group_depth > 0) {
        if (g_emu_nccl.pending.size() == 1) g_emu_nccl_group_stream = st, g_emu_nccl_group_file = file, g_emu_nccl_group_line = line;
        else if (st != g_emu_nccl_group_stream)
            return emu_nccl_fail(ncclInvalidUsage, "%s: a group's calls on two streams (not emulated)", what);
        return ncclSuccess;
    }
    return emu_nccl_queue(st, file, line);
#else
    (void)st, (void)file, (void)line;
    if (ncclResult_t r = emu_nccl_start(op)) return r;
    g_emu_nccl.pending.push_back(std::move(op));
    return g_emu_nccl.group_depth > 0 ? ncclSuccess : emu_nccl_wait_all();
#endif
}
static inline EmuNcclOp emu_nccl_op(const char* what, int comm_rank, int peer, size_t bytes) {
    EmuNcclOp o;
    o.what = what, o.comm_rank = comm_rank, o.peer = peer, o.bytes = bytes;
    return o;
}
// A collective in its communicator's sequence (compared across its ranks at ncclCommDestroy).
static inline void emu_nccl_sequence(EmuNcclComm* c, const char* what, size_t count, ncclDataType_t t, int root) {
    char b[160];
    if (root >= 0) snprintf(b, sizeof b, "%s of %zu elements of type %d, root %d", what, count, (int)t, root);
    else snprintf(b, sizeof b, "%s of %zu elements of type %d", what, count, (int)t);
    uint64_t h = 1469598103934665603ull;
    for (const char* q = b; *q; q++) h = (h ^ (unsigned char)*q) * 1099511628211ull;
    c->seq.push_back(h);
    c->seq_what.push_back(b);
}
// Charges the emulated device EMU_NCCL_INIT_MIB or EMU_NCCL_USE_MIB (env, MiB) for communicator c.
static inline ncclResult_t emu_nccl_charge(EmuNcclComm* c, const char* env, const char* what) {
    const double n = getenv(env) ? atof(getenv(env)) * 1048576.0 : 0.0;
    if (!emu_device_take(n))
        return emu_nccl_fail(ncclSystemError, "%s: out of device memory: %.0f MiB (%s) with %.0f MiB free of the "
                             "emulated device's %.0f (EMU_DEVICE_MIB)", what, n / 1048576.0, env,
                             (g_emu_device_bytes - g_emu_alloc_bytes) / 1048576.0, g_emu_device_bytes / 1048576.0);
    c->charged += n;
    return ncclSuccess;
}
static inline ncclResult_t emu_nccl_check_args(const char* what, size_t count, ncclComm_t comm) {
    if (!comm) return emu_nccl_fail(ncclInvalidArgument, "%s: null communicator", what);
    if (!comm->used) {
        comm->used = true;
        if (ncclResult_t r = emu_nccl_charge(comm, "EMU_NCCL_USE_MIB", what)) return r;
    }
    if (count > (size_t)INT_MAX / 8)
        return emu_nccl_fail(ncclInvalidArgument, "%s: %zu elements: the emulation's counts stop at INT_MAX / 8", what, count);
    return ncclSuccess;
}
static inline size_t emu_nccl_size(ncclDataType_t t) { return t == ncclBfloat16 || t == ncclHalf ? 2 : t == ncclFloat ? 4 : 8; }
// the type MPI reduces in: fp32 for fp32, bf16 and fp16, fp64 for fp64
static inline MPI_Datatype emu_nccl_wide(ncclDataType_t t) { return t == ncclDouble ? MPI_DOUBLE : MPI_FLOAT; }
static inline size_t emu_nccl_wide_size(ncclDataType_t t) { return t == ncclDouble ? 8 : 4; }
static inline void emu_nccl_widen(const void* src, char* dst, size_t n, ncclDataType_t t) {
    if (t == ncclHalf) {
        for (size_t i = 0; i < n; i++) ((float*)dst)[i] = (float)((const __half*)src)[i];
        return;
    }
    if (t != ncclBfloat16) { memcpy(dst, src, n * emu_nccl_size(t)); return; }
    for (size_t i = 0; i < n; i++) ((float*)dst)[i] = (float)((const __nv_bfloat16*)src)[i];
}
static inline void emu_nccl_narrow(const char* src, void* dst, size_t n, ncclDataType_t t) {
    if (t == ncclHalf) {
        for (size_t i = 0; i < n; i++) ((__half*)dst)[i] = __half(((const float*)src)[i]);
        return;
    }
    if (t != ncclBfloat16) { memcpy(dst, src, n * emu_nccl_size(t)); return; }
    for (size_t i = 0; i < n; i++) ((__nv_bfloat16*)dst)[i] = __nv_bfloat16(((const float*)src)[i]);
}
static inline bool emu_nccl_type_ok(ncclDataType_t t) { return t == ncclFloat || t == ncclDouble || t == ncclBfloat16 || t == ncclHalf; }

// ---------------------------------------------------------------- communicators
static inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclSystemError: return "unhandled system error (emulated)";
        case ncclInvalidArgument: return "invalid argument (emulated)";
        case ncclInvalidUsage: return "invalid usage (emulated)";
        default: return "emulated NCCL error";
    }
}
static inline const char* ncclGetLastError(ncclComm_t) { return g_emu_nccl.last_error; }
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* e) { *e = ncclSuccess; return ncclSuccess; }

static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "emulated nccl id pid %d", (int)getpid());
    FILE* f = fopen("/dev/urandom", "rb");
    if (!f || fread(id->internal + 64, 1, 64, f) != 64) return emu_nccl_fail(ncclSystemError, "ncclGetUniqueId: cannot read /dev/urandom");
    fclose(f);
    return ncclSuccess;
}

// The world: one MPI process per rank, the ranks as mpirun numbers them; every rank must hold the same id.
static inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init && MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return emu_nccl_fail(ncclSystemError, "MPI_Init failed");
    int wsize = 0, wrank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    if (nranks != wsize || rank != wrank)
        return emu_nccl_fail(ncclInvalidArgument, "ncclCommInitRank: nranks %d, rank %d differ from mpirun's world of %d, rank %d "
                             "(the emulation runs each rank as one MPI process)", nranks, rank, wsize, wrank);
    std::vector<ncclUniqueId> all(wsize);
    if (MPI_Allgather(&id, sizeof(id), MPI_BYTE, all.data(), sizeof(id), MPI_BYTE, MPI_COMM_WORLD) != MPI_SUCCESS)
        return emu_nccl_fail(ncclSystemError, "ncclCommInitRank: MPI_Allgather failed");
    for (int r = 0; r < wsize; r++)
        if (memcmp(&all[r], &id, sizeof(id)) != 0)
            return emu_nccl_fail(ncclInvalidUsage, "ncclCommInitRank: rank %d holds another unique id than rank %d", r, rank);
    EmuNcclComm* c = new EmuNcclComm();
    c->rank = wrank, c->size = wsize;
    if (ncclResult_t r = emu_nccl_charge(c, "EMU_NCCL_INIT_MIB", "ncclCommInitRank")) { delete c; return r; }
    if (MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi) != MPI_SUCCESS) return emu_nccl_fail(ncclSystemError, "MPI_Comm_dup failed");
    g_emu_nccl.live_comms++;
    *comm = c;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
    if (!comm) return emu_nccl_fail(ncclInvalidArgument, "ncclCommSplit: null communicator");
    if (config) return emu_nccl_fail(ncclInvalidArgument, "ncclCommSplit: configurations are not emulated (pass nullptr)");
    MPI_Comm m = MPI_COMM_NULL;
    if (MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &m) != MPI_SUCCESS)
        return emu_nccl_fail(ncclSystemError, "ncclCommSplit: MPI_Comm_split failed");
    *newcomm = nullptr;
    if (m == MPI_COMM_NULL) return ncclSuccess;
    EmuNcclComm* c = new EmuNcclComm();
    c->mpi = m;
    MPI_Comm_rank(m, &c->rank);
    MPI_Comm_size(m, &c->size);
    if (ncclResult_t r = emu_nccl_charge(c, "EMU_NCCL_INIT_MIB", "ncclCommSplit")) { MPI_Comm_free(&m); delete c; return r; }
    g_emu_nccl.live_comms++;
    *newcomm = c;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommCount(ncclComm_t comm, int* n) { *n = comm->size; return ncclSuccess; }
static inline ncclResult_t ncclCommUserRank(ncclComm_t comm, int* r) { *r = comm->rank; return ncclSuccess; }
// The ranks of comm compare their sequences of collectives; a differing one fails naming the first that differs.
static inline ncclResult_t emu_nccl_check_sequence(ncclComm_t comm) {
    long n = (long)comm->seq.size();
    uint64_t h = 1469598103934665603ull;
    for (uint64_t x : comm->seq) h = (h ^ x) * 1099511628211ull;
    std::vector<long> ns(comm->size);
    std::vector<uint64_t> hs(comm->size);
    MPI_Allgather(&n, 1, MPI_LONG, ns.data(), 1, MPI_LONG, comm->mpi);
    MPI_Allgather(&h, 1, MPI_UINT64_T, hs.data(), 1, MPI_UINT64_T, comm->mpi);
    bool same = true;
    for (int r = 0; r < comm->size; r++) same &= ns[r] == n && hs[r] == h;
    if (same) return ncclSuccess;
    const long common = *std::min_element(ns.begin(), ns.end());
    std::vector<uint64_t> all((size_t)common * comm->size + 1);
    MPI_Allgather(comm->seq.data(), (int)common, MPI_UINT64_T, all.data(), (int)common, MPI_UINT64_T, comm->mpi);
    long k = common;  // the first collective that differs between some two ranks
    for (long i = 0; i < common && k == common; i++)
        for (int r = 1; r < comm->size; r++)
            if (all[(size_t)r * common + i] != all[i]) { k = i; break; }
    return emu_nccl_fail(ncclInvalidUsage, "communicator of %d ranks: its ranks issued different sequences of collectives "
                         "(NCCL hangs or mixes data): collective #%ld of rank %d (world rank %d) is %s", comm->size, k,
                         comm->rank, emu_nccl_world_rank(), k < n ? comm->seq_what[k].c_str() : "none (it issued no more)");
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (ncclResult_t r = emu_nccl_check_sequence(comm)) return r;
    MPI_Comm_free(&comm->mpi);
    emu_device_give(comm->charged);
    delete comm;
    if (--g_emu_nccl.live_comms == 0) MPI_Finalize();
    return ncclSuccess;
}
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (comm) delete comm;
    return ncclSuccess;
}

static inline ncclResult_t ncclGroupStart() { g_emu_nccl.group_depth++; return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd() {
    if (g_emu_nccl.group_depth == 0) return emu_nccl_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_emu_nccl.group_depth > 0) return ncclSuccess;
#ifdef EMU_STREAMS
    return g_emu_nccl.pending.empty() ? ncclSuccess : emu_nccl_queue(g_emu_nccl_group_stream, g_emu_nccl_group_file, g_emu_nccl_group_line);
#else
    return emu_nccl_wait_all();
#endif
}

// ---------------------------------------------------------------- collectives
// Each call checks its arguments and enters its communicator's sequence when it is made; start posts the MPI request
// (at once, or when its turn comes on the stream in the stream mode) and finish rounds bf16 results into place.
static inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                         ncclComm_t comm, cudaStream_t st,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (ncclResult_t r = emu_nccl_check_args("ncclAllReduce", count, comm)) return r;
    if (!emu_nccl_type_ok(t) || (op != ncclSum && op != ncclMax)) return emu_nccl_fail(ncclInvalidArgument, "ncclAllReduce: type or op not emulated");
    EmuNcclOp o = emu_nccl_op(op == ncclSum ? "ncclAllReduce(sum)" : "ncclAllReduce(max)", comm->rank, -1, count * emu_nccl_size(t));
    emu_nccl_sequence(comm, o.what, count, t, -1);
    o.tmp = std::make_shared<std::vector<char>>(count * emu_nccl_wide_size(t) + 1);
    char* w = o.tmp->data();
    const MPI_Comm m = comm->mpi;
    o.rd = send, o.rn = o.bytes, o.wr = recv, o.wn = o.bytes;
    o.start = [w, send, count, t, op, m](MPI_Request* rq) {
        emu_nccl_widen(send, w, count, t);
        return MPI_Iallreduce(MPI_IN_PLACE, w, (int)count, emu_nccl_wide(t), op == ncclSum ? MPI_SUM : MPI_MAX, m, rq);
    };
    o.finish = [w, recv, count, t]() { emu_nccl_narrow(w, recv, count, t); };
    return emu_nccl_post(std::move(o), st, file, line);
}
// send[size * count] summed; rank r receives piece r in recv[count]
static inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t st,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (ncclResult_t r = emu_nccl_check_args("ncclReduceScatter", count * (comm ? comm->size : 1), comm)) return r;
    if (!emu_nccl_type_ok(t) || op != ncclSum) return emu_nccl_fail(ncclInvalidArgument, "ncclReduceScatter: type or op not emulated");
    EmuNcclOp o = emu_nccl_op("ncclReduceScatter", comm->rank, -1, count * emu_nccl_size(t));
    emu_nccl_sequence(comm, o.what, count, t, -1);
    size_t ws = emu_nccl_wide_size(t);
    const int size = comm->size;
    o.tmp = std::make_shared<std::vector<char>>(count * ws * (size + 1) + 1);
    char* w = o.tmp->data();
    char* wr = w + count * ws * size;
    const MPI_Comm m = comm->mpi;
    o.rd = send, o.rn = o.bytes * size, o.wr = recv, o.wn = o.bytes;
    o.start = [w, wr, send, count, t, size, m](MPI_Request* rq) {
        emu_nccl_widen(send, w, count * size, t);
        return MPI_Ireduce_scatter_block(w, wr, (int)count, emu_nccl_wide(t), MPI_SUM, m, rq);
    };
    o.finish = [wr, recv, count, t]() { emu_nccl_narrow(wr, recv, count, t); };
    return emu_nccl_post(std::move(o), st, file, line);
}
// rank r's send[count] lands at recv + r * count on every rank; send may be that place (in place)
static inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm, cudaStream_t st,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (ncclResult_t r = emu_nccl_check_args("ncclAllGather", count * (comm ? comm->size : 1), comm)) return r;
    if (!emu_nccl_type_ok(t)) return emu_nccl_fail(ncclInvalidArgument, "ncclAllGather: type not emulated");
    size_t b = count * emu_nccl_size(t);
    EmuNcclOp o = emu_nccl_op("ncclAllGather", comm->rank, -1, b);
    emu_nccl_sequence(comm, o.what, count, t, -1);
    const void* src = send == (const char*)recv + comm->rank * b ? MPI_IN_PLACE : send;
    const MPI_Comm m = comm->mpi;
    o.rd = send, o.rn = b, o.wr = recv, o.wn = b * comm->size;
    o.start = [src, recv, b, m](MPI_Request* rq) { return MPI_Iallgather(src, (int)b, MPI_BYTE, recv, (int)b, MPI_BYTE, m, rq); };
    return emu_nccl_post(std::move(o), st, file, line);
}
static inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                         ncclComm_t comm, cudaStream_t st,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (ncclResult_t r = emu_nccl_check_args("ncclBroadcast", count, comm)) return r;
    if (!emu_nccl_type_ok(t) || root < 0 || root >= comm->size) return emu_nccl_fail(ncclInvalidArgument, "ncclBroadcast: type or root not valid");
    size_t b = count * emu_nccl_size(t);
    EmuNcclOp o = emu_nccl_op("ncclBroadcast", comm->rank, root, b);
    emu_nccl_sequence(comm, o.what, count, t, root);
    const bool is_root = comm->rank == root;
    const MPI_Comm m = comm->mpi;
    if (is_root) o.rd = send, o.rn = b;
    o.wr = recv, o.wn = b;
    o.start = [send, recv, b, root, is_root, m](MPI_Request* rq) {
        if (is_root && send != recv) memmove(recv, send, b);
        return MPI_Ibcast(recv, (int)b, MPI_BYTE, root, m, rq);
    };
    return emu_nccl_post(std::move(o), st, file, line);
}

// ---------------------------------------------------------------- point to point (no tags: issue order)
static inline ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (ncclResult_t r = emu_nccl_check_args("ncclSend", count, comm)) return r;
    if (!emu_nccl_type_ok(t) || peer < 0 || peer >= comm->size || peer == comm->rank)
        return emu_nccl_fail(ncclInvalidArgument, "ncclSend: type or peer %d not valid", peer);
    size_t b = count * emu_nccl_size(t);
    EmuNcclOp o = emu_nccl_op("ncclSend", comm->rank, peer, b);
    const MPI_Comm m = comm->mpi;
    o.rd = buf, o.rn = b;
    o.start = [buf, b, peer, m](MPI_Request* rq) { return MPI_Issend(buf, (int)b, MPI_BYTE, peer, 0, m, rq); };
    return emu_nccl_post(std::move(o), st, file, line);
}
static inline ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (ncclResult_t r = emu_nccl_check_args("ncclRecv", count, comm)) return r;
    if (!emu_nccl_type_ok(t) || peer < 0 || peer >= comm->size || peer == comm->rank)
        return emu_nccl_fail(ncclInvalidArgument, "ncclRecv: type or peer %d not valid", peer);
    size_t b = count * emu_nccl_size(t);
    EmuNcclOp o = emu_nccl_op("ncclRecv", comm->rank, peer, b);
    const MPI_Comm m = comm->mpi;
    o.wr = buf, o.wn = b;
    o.is_recv = true;
    o.start = [buf, b, peer, m](MPI_Request* rq) { return MPI_Irecv(buf, (int)b, MPI_BYTE, peer, 0, m, rq); };
    return emu_nccl_post(std::move(o), st, file, line);
}
