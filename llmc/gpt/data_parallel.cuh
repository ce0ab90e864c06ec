// llmc/gpt/data_parallel.cuh: data parallel and ZeRO 0-3 in the CUDA trainer: its state (struct DataParallel, a member
// of train_gpt.cu's struct GPT: the buckets, the fp32 reduction buffers, the ZeRO-3 gather buffers, the dp stream's
// events) and its work: the planning of the buckets, the weights' gathers, each bucket's gradient reduction, the
// global norm over the reduced gradients, AdamW's table and the weights' all-gather after the update. A header that
// stands alone: every function takes the DataParallel it works with and the model's buffers it works on (params,
// grads, the parameter table) as arguments. On one GPU (dp.parallel false) nothing of it runs: the trainer reduces
// nothing, the norm and AdamW read the floatX gradients, and the weights are where the parameter table puts them.
//
// Data parallel and ZeRO (--dp, --zero as in train_gpt_cpu; llmc/parallel/layout.h checks the layout, llmc/parallel/zero.h plans
// the buckets): world = pp x dp x tp ranks (tp fastest, llmc/parallel/topology.h), one GPU each, started by mpirun, srun or
// scripts/launch.sh (comm_init, llmc/parallel/launch.h); pipeline parallelism in llmc/gpt/pipeline.cuh. Every NCCL call goes through
// llmc/parallel/comm_nccl.cuh: the dp group's on its own stream (dp.comm.stream), ordered against the compute stream by events; the
// tp group's on the compute stream itself (tp.comm.stream, llmc/gpt/tensor_parallel.cuh), in line with the kernels around them. One rank
// is the one-GPU trainer of train_gpt.cu, unchanged, with no NCCL communicator.
//   Data: dp rank r trains on the micro-batches r, r + dp, r + 2dp, ... of the one-process run (-d tokens per
//   step, accum = d / (B*T*dp) micro-batches per rank), each loss scaled by 1/(accum*dp), so the sum over the
//   ranks is the one-process mean.
//   Buckets: the parameter table is padded into buckets (the embeddings, one per layer, the final norm and
//   head), each a multiple of dp*8 elements, so dp rank r owns an equal, 16-byte aligned piece of every bucket;
//   its shard is its pieces in bucket order, P/dp elements (llmc/parallel/zero.h).
//   Gradients: no communication until the last micro-batch of a step. Every micro-batch accumulates into the
//   floatX grads [P] as one GPU does. In the last micro-batch's backward, as each bucket's gradient is complete
//   (the final norm and head first, the layers in reverse order, the embeddings last), a small kernel casts it
//   to fp32 (adding the fp32 LM-head gradient head_grad where the head lives), an event is recorded on the
//   compute stream, and dp.comm.stream waits for it and reduces the bucket: all-reduce (ZeRO 0) or reduce-scatter
//   (ZeRO >= 1), overlapping the rest of the backward. The optimizer waits for dp.comm.stream. Why fp32: each rank's
//   floatX gradient already carries the rounding of one GPU's per-micro-batch accumulation; converting each
//   bucket to fp32 before the reduction keeps the sum over the dp ranks exact to fp32 (a bf16 reduction would
//   round again at every hop of NCCL's ring), and it is Megatron's default (fp32 main grads reduced). A bf16
//   reduction is a later option.
//   ZeRO 0  grad32 [P] fp32, all-reduced; master, m, v [P]; AdamW over everything on every rank.
//   ZeRO 1  master, m, v [shard]; grad32 [P] fp32 reduce-scattered in place (only this rank's pieces end up
//           summed); AdamW updates this rank's pieces and writes floatX(master) into its pieces of params,
//           then dp.comm.stream all-gathers params bucket by bucket.
//   ZeRO 2  also the reduced gradients exist only as grad_shard [shard] fp32: each bucket is cast into one of
//           two fp32 cast buffers [max bucket] (alternating, so the next bucket's cast overlaps this one's
//           reduction) and reduce-scattered from there into the shard. During accumulation the floatX grads [P]
//           still hold this rank's own, unreduced gradient of the step so far (the reduction is once per step).
//   ZeRO 3  also the floatX weights: params [shard]. A bucket's weights are all-gathered into a gather buffer
//           on dp.comm.stream one layer ahead of their use (prefetch, in forward and in backward order) and the
//           buffer is reused once the layer is done with it. Four gather buffers live at once: two for the
//           layers (layer l in buffer l % 2), one for the embeddings (the tied head reads it too) and one for
//           the final norm and head; a buffer that still holds the bucket asked for is not gathered again.
//   The global gradient norm counts every element once across the shards (layout_norm_ranges), in fp64 on the
//   device, summed over dp (comm_all_reduce_sum of one double); the clip coefficient is train_gpt_cpu.cpp's.
//   Checkpoints and exports gather the shards (all-gather per bucket) so that rank 0 writes whole tensors in the
//   usual layout-independent files; any dp and ZeRO level resumes them (each rank takes its pieces).
//   The memory estimate is per rank: the buffer table gains the rows of the fp32 gradient buffer, the gradient
//   shard and the gather buffers, and master, moments (ZeRO >= 1) and params (ZeRO 3) shrink to the shard.
//
#pragma once

#include <algorithm>
#include <vector>
#include "llmc/adamw.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/grad_clip.h"
#include "llmc/grad_norm.cuh"
#include "llmc/param_table.h"
#include "llmc/precision.cuh"
#include "llmc/profile.cuh"
#include "llmc/parallel/comm.cuh"
#include "llmc/parallel/layout.h"
#include "llmc/parallel/zero.h"

// ZeRO-3's gather buffers: two for the layers (layer l in GATHER_LAYER0 + l % 2), the embeddings, the final norm
// and head
enum { GATHER_LAYER0 = 0, GATHER_EMB = 2, GATHER_HEAD = 3, GATHER_BUFFERS = 4 };

// Data parallel and ZeRO 0-3 (--dp, --zero; llmc/parallel/zero.h plans the buckets). dp_plan sets the buckets and the
// counts of the buffer-table rows (llmc/gpt/memory.cuh allocates them), dp_events_create its events.
struct DataParallel {
    Comm comm;                  // the dp group: its size, rank and stream
    int n = 1, rank = 0;        // dp ranks, this rank's place among them
    int zero = 0;               // the ZeRO level (--zero)
    bool parallel = false;      // any layout but one GPU: fp32 bucket reduction, the optimizer over this rank's ranges
    std::vector<Bucket> buckets;       // the embeddings, one per layer, the final norm and head
    std::vector<int> bucket_of;        // spec -> bucket
    size_t shard = 0;                  // P / dp
    size_t max_bucket = 0;             // elements of the largest bucket
    size_t n_grad32 = 0, n_grad_shard = 0, n_gather = 0, n_norm64 = 0;  // buffer-table counts (0: no row)
    std::vector<size_t> norm_ranges_host;  // [n,2] the gradient ranges this rank counts (layout_norm_ranges)
    size_t gather_off[GATHER_BUFFERS] = {};  // each gather buffer's offset in `gather`
    float* grad32 = nullptr;    // fp32 gradients: ZeRO 0/1 [P] reduced in place; ZeRO 2/3 [2, max_bucket], the two
                                // cast buffers a bucket is cast into before its reduce-scatter
    float* grad_shard = nullptr;  // ZeRO 2/3: [shard] the reduced gradients of this rank's pieces
    floatX* gather = nullptr;   // ZeRO 3: the gather buffers [2 * max layer bucket + embeddings + head]
    double* norm64 = nullptr;   // [GLOBAL_NORM_BLOCKS + 1] fp64 partial sums of squares, then their sum
    size_t* norm_ranges = nullptr;     // [n,2] device copy of norm_ranges_host
    cudaEvent_t ev_cast_free[2] = {};  // ZeRO 2/3: cast buffer s may be overwritten (its reduce-scatter is done)
    cudaEvent_t ev_gathered[GATHER_BUFFERS] = {}, ev_gather_done[GATHER_BUFFERS] = {};  // ZeRO 3: filled / last read
    int gather_holds[GATHER_BUFFERS] = {-1, -1, -1, -1};  // ZeRO 3: the bucket each gather buffer holds, -1 none
    int cast_next = 0;                 // ZeRO 2/3: the cast buffer the next bucket is cast into
    int cast_last = -1;                // ZeRO 2/3: the cast buffer of the bucket cast last (dp_bucket_cast)
    cudaEvent_t ev_compute = nullptr;  // recorded on the compute stream before comm.stream reads what it wrote
    cudaEvent_t ev_comm = nullptr;     // recorded on comm.stream (or the world's) before the compute stream reads

    // the gather buffer of bucket b
    int gather_buffer(const Bucket& b) const {
        return b.layer >= 0 ? GATHER_LAYER0 + b.layer % 2 : b.range.lo == 0 ? GATHER_EMB : GATHER_HEAD;
    }
};


// dst[i] = float(src[i]): a bucket's floatX gradients into the fp32 reduction buffer
__global__ void f32_from_floatX_kernel(float* dst, const floatX* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_float(src[i]);
}

// dst[i] += src[i] (fp32): the LM head's fp32 gradient joins its bucket's fp32 gradients
__global__ void add_f32_kernel(float* dst, const float* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
static void add_f32(float* dst, const float* src, size_t n, cudaStream_t stream) {
    add_f32_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, stream>>>(dst, src, n);
    cudaCheck(cudaGetLastError());
}

// partial[block] = sum of g[i]^2 over the ranges [ranges[2r], ranges[2r+1]) in fp64, in a fixed order: thread j
// of the grid (G threads) sums elements lo + j, lo + j + G, ... of each range in turn, then the block sums its
// threads in a fixed tree. Launch GLOBAL_NORM_BLOCKS blocks of GLOBAL_NORM_THREADS.
__global__ void norm_ranges_partial_kernel(double* partial, const float* g, const size_t* ranges, int n_ranges) {
    __shared__ double part[GLOBAL_NORM_THREADS];
    const size_t G = (size_t)gridDim.x * blockDim.x, j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    double s = 0;
    for (int r = 0; r < n_ranges; r++)
        for (size_t i = ranges[2 * r] + j; i < ranges[2 * r + 1]; i += G) s += (double)g[i] * g[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

// sum[0] = partial[0] + ... + partial[n-1], in order (one thread)
__global__ void sum_partials_kernel(double* sum, const double* partial, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += partial[i];
    sum[0] = s;
}

// out[0] = sqrt(sumsq[0]) / S, out[1] = the clipping coefficient clip_coef of that norm, over S (unscaled_clip,
// llmc/grad_clip.h), in fp64, as the CPU trainer's, then stored as fp32 (AdamW reads out + 1 as its grad scale). S: the loss scale
// (llmc/loss_scale.h; 1: none), inv_scale = 1 / S. One thread.
__global__ void clip_from_sumsq_kernel(float* out, const double* sumsq, double clip, double inv_scale) {
    double norm;
    out[1] = (float)unscaled_clip(sqrt(sumsq[0]), clip, inv_scale, &norm);
    out[0] = (float)norm;
}


// The plan of this rank's layout L over its parameter table: the buckets (llmc/parallel/zero.h), the shard, and the
// sizes of the buffer-table rows data parallel owns (0: no row). One GPU: parallel false, every count 0.
static void dp_plan(DataParallel& dp, const ParamTable& table, const Layout& L) {
    dp.n = L.topo.dp, dp.rank = L.topo.dp_rank, dp.zero = L.zero;
    dp.parallel = L.topo.dp > 1 || L.zero > 0 || L.topo.tp > 1 || L.topo.pp > 1;
    dp.buckets = zero_buckets(table, dp.n);
    dp.bucket_of.assign(table.specs.size(), -1);
    size_t max_layer = 0;
    dp.max_bucket = 0;
    for (int b = 0; b < (int)dp.buckets.size(); b++) {
        const Bucket& bk = dp.buckets[b];
        for (int k = bk.first_spec; k < bk.end_spec; k++) dp.bucket_of[k] = b;
        dp.max_bucket = std::max(dp.max_bucket, bk.range.size());
        if (bk.layer >= 0) max_layer = std::max(max_layer, bk.range.size());
    }
    dp.shard = zero_shard_size(table, dp.n);
    const size_t P = table.total;
    dp.n_grad32 = !dp.parallel ? 0 : L.zero <= 1 ? P : 2 * dp.max_bucket;
    dp.n_grad_shard = dp.parallel && L.zero >= 2 ? dp.shard : 0;
    dp.n_norm64 = dp.parallel ? GLOBAL_NORM_BLOCKS + 1 : 0;
    dp.norm_ranges_host.clear();
    if (dp.parallel)
        for (const Range& r : layout_norm_ranges(table, dp.buckets, L, L.zero >= 2)) {
            dp.norm_ranges_host.push_back(r.lo);
            dp.norm_ranges_host.push_back(r.hi);
        }
    // ZeRO 3: two layer buffers of the largest layer bucket, then the embedding bucket, then the final norm and head
    dp.n_gather = 0;
    if (L.zero >= 3) {
        dp.gather_off[GATHER_LAYER0] = 0;
        dp.gather_off[GATHER_LAYER0 + 1] = max_layer;
        dp.gather_off[GATHER_EMB] = 2 * max_layer;
        dp.gather_off[GATHER_HEAD] = 2 * max_layer + dp.buckets.front().range.size();
        dp.n_gather = dp.gather_off[GATHER_HEAD] + dp.buckets.back().range.size();
    }
}

// After the buffer table has placed dp's buffers: the norm's ranges uploaded, the events created (several ranks only).
static void dp_build(DataParallel& dp) {
    if (!dp.parallel) return;
    cudaCheck(cudaMemcpy(dp.norm_ranges, dp.norm_ranges_host.data(), dp.norm_ranges_host.size() * sizeof(size_t),
                         cudaMemcpyHostToDevice));
    for (cudaEvent_t* e : {&dp.ev_compute, &dp.ev_comm, &dp.ev_cast_free[0], &dp.ev_cast_free[1]})
        cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    for (int i = 0; i < GATHER_BUFFERS; i++) {
        cudaCheck(cudaEventCreateWithFlags(&dp.ev_gathered[i], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&dp.ev_gather_done[i], cudaEventDisableTiming));
    }
}
static void dp_free(DataParallel& dp) {
    if (!dp.parallel) return;
    for (cudaEvent_t e : {dp.ev_compute, dp.ev_comm, dp.ev_cast_free[0], dp.ev_cast_free[1]})
        cudaCheck(cudaEventDestroy(e));
    for (int i = 0; i < GATHER_BUFFERS; i++) {
        cudaCheck(cudaEventDestroy(dp.ev_gathered[i]));
        cudaCheck(cudaEventDestroy(dp.ev_gather_done[i]));
    }
}

// The weights of tensor k of table: in params where the table puts them, or at ZeRO 3 (params holds only this rank's
// shard) in the gather buffer of its bucket.
static floatX* dp_weights(const DataParallel& dp, floatX* params, const ParamTable& table, int k) {
    if (dp.zero < 3) return params + table.specs[k].offset;
    const Bucket& b = dp.buckets[dp.bucket_of[k]];
    return dp.gather + dp.gather_off[dp.gather_buffer(b)] + (table.specs[k].offset - b.range.lo);
}

// Several ranks: out[0, 1] = the pre-clip global norm and clip coefficient of the fp32 reduced gradients, once
// dp.comm.stream has reduced every bucket: the norm over the ranges this rank counts (fp64, layout_norm_ranges), summed
// over every rank of world (dp shards, tp slices and stages), of gradients scaled by the loss scale 1 / inv_scale. Only
// enqueues, on the compute stream.
static void dp_grad_norm(DataParallel& dp, const Comm& world, cudaStream_t stream, float* out, double clip, double inv_scale) {
    cudaCheck(cudaEventRecord(dp.ev_comm, dp.comm.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_comm, 0)));
    const float* grads = dp.zero >= 2 ? dp.grad_shard : dp.grad32;
    double* sumsq = dp.norm64 + GLOBAL_NORM_BLOCKS;
    norm_ranges_partial_kernel<<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, stream>>>(
        dp.norm64, grads, dp.norm_ranges, (int)(dp.norm_ranges_host.size() / 2));
    cudaCheck(cudaGetLastError());
    sum_partials_kernel<<<1, 1, 0, stream>>>(sumsq, dp.norm64, GLOBAL_NORM_BLOCKS);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventRecord(dp.ev_compute, stream));
    cudaCheck(cudaStreamWaitEvent(world.stream, dp.ev_compute, 0));
    // over every rank: dp shards, tp slices (disjoint; replicated tensors count on tp rank 0 only) and stages
    comm_all_reduce_sum(world, sumsq, 1);
    cudaCheck(cudaEventRecord(dp.ev_comm, world.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_comm, 0)));
    clip_from_sumsq_kernel<<<1, 1, 0, stream>>>(out, sumsq, clip, inv_scale);
    cudaCheck(cudaGetLastError());
}

// AdamW's table over what this rank updates (zero_parts, llmc/parallel/zero.h): every tensor (one GPU, ZeRO 0) or each
// tensor's part in this rank's piece of its bucket (ZeRO >= 1; bucket padding is never updated and stays zero). Each
// buffer is addressed at its own ZeRO level (zero_part_offset): params flat below ZeRO 3; the gradients flat below
// ZeRO 2 (grads: the floatX gradients on one GPU, the fp32 ones reduced over dp, grad32, otherwise) and in the shard
// grad_shard from 2; master and moments (m, v: of type Moment) flat at ZeRO 0. Piece and tensor bounds are multiples
// of 8 elements, as the update needs.
template <typename Moment, typename Grad>
static AdamWTable<Moment, Grad> dp_adamw_table(const DataParallel& dp, const ParamTable& table, floatX* params,
                                               const Grad* grads, const Grad* grad_shard, float* master, void* m,
                                               void* v, float wd) {
    std::vector<AdamWTensor<Moment, Grad>> ts;
    const int zero = dp.zero;
    for (const ZeroPart& p : zero_parts(table, dp.buckets, dp.n, dp.rank, zero == 0)) {
        AdamWTensor<Moment, Grad> t{};
        t.param = params + zero_part_offset(p, ZERO_PARAMS, zero);
        t.grad = (zero >= ZERO_GRADS ? grad_shard : grads) + zero_part_offset(p, ZERO_GRADS, zero);
        t.master = master + zero_part_offset(p, ZERO_OPTIM, zero);
        t.m = (Moment*)m + zero_part_offset(p, ZERO_OPTIM, zero);
        t.v = (Moment*)v + zero_part_offset(p, ZERO_OPTIM, zero);
        t.n = p.flat.size();
        t.weight_decay = table.specs[p.spec].is_matrix ? wd : 0.0f;
        ts.push_back(t);
    }
    return adamw_table_upload(ts);
}

// After AdamW (on the compute stream) has written this rank's pieces of params: ZeRO 1/2: dp.comm.stream all-gathers
// each bucket in place (rank r's piece at its place) and the compute stream waits for it; ZeRO 3: the gather buffers
// are stale and the next gathers wait for the update. Below ZeRO 1 nothing.
static void dp_params_updated(DataParallel& dp, floatX* params, cudaStream_t stream) {
    if (dp.zero == 0) return;
    if (dp.zero >= 3) for (int& held : dp.gather_holds) held = -1;
    cudaCheck(cudaEventRecord(dp.ev_compute, stream));
    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_compute, 0));
    if (dp.zero >= 3) return;  // the next gathers read the updated shard
    for (const Bucket& b : dp.buckets)
        comm_all_gather(dp.comm, params + zero_piece(b, dp.n, dp.rank).lo, params + b.range.lo, b.range.size() / dp.n);
    cudaCheck(cudaEventRecord(dp.ev_comm, dp.comm.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_comm, 0)));
}

// ZeRO-3: a bucket's weights gathered on dp.comm.stream into its gather buffer before use, one layer ahead

// Starts the all-gather of bucket b's weights (of params, this rank's shard) into its buffer (nothing when the buffer
// holds it already, or below ZeRO 3, or for b out of range). dp.comm.stream first waits until the compute stream is
// done with the buffer's previous bucket (dp_params_done), so the caller must have marked that bucket done.
static void dp_params_prefetch(DataParallel& dp, const floatX* params, int b) {
    if (dp.zero < 3 || b < 0 || b >= (int)dp.buckets.size()) return;
    const Bucket& bk = dp.buckets[b];
    const int s = dp.gather_buffer(bk);
    if (dp.gather_holds[s] == b) return;
    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_gather_done[s], 0));
    comm_all_gather(dp.comm, params + zero_shard_offset(bk, dp.n), dp.gather + dp.gather_off[s], bk.range.size() / dp.n);
    cudaCheck(cudaEventRecord(dp.ev_gathered[s], dp.comm.stream));
    dp.gather_holds[s] = b;
}

// Bucket b's weights are read from here on: the compute stream waits for their gather.
static void dp_params_use(DataParallel& dp, const floatX* params, int b, cudaStream_t stream) {
    if (dp.zero < 3) return;
    dp_params_prefetch(dp, params, b);
    PROF(PROF_DP_WAIT, ProfWork(),
         cudaCheck(cudaStreamWaitEvent(stream, dp.ev_gathered[dp.gather_buffer(dp.buckets[b])], 0)));
}

// The compute stream's work so far is the last to read bucket b's buffer until its next dp_params_use: the buffer
// may be gathered into after it.
static void dp_params_done(DataParallel& dp, int b, cudaStream_t stream) {
    if (dp.zero < 3) return;
    cudaCheck(cudaEventRecord(dp.ev_gather_done[dp.gather_buffer(dp.buckets[b])], stream));
}

// Bucket b's gradient is complete on this rank (the last micro-batch's backward has passed it): its floatX gradients
// (in grads, where the table puts them) cast to fp32 on the compute stream, into grad32 at the bucket's place (ZeRO
// 0/1) or into the next of the two cast buffers (ZeRO 2/3; first waiting until that buffer's previous bucket has
// been reduced out of it). Returns where the bucket's fp32 gradients are (element bk.range.lo + i at [i]): the caller
// may add to them before dp_bucket_reduce.
static float* dp_bucket_cast(DataParallel& dp, int b, const floatX* grads, cudaStream_t stream) {
    const Bucket& bk = dp.buckets[b];
    const size_t n = bk.range.size();
    float* dst = dp.grad32 + bk.range.lo;
    dp.cast_last = -1;
    if (dp.zero >= 2) {
        dp.cast_last = dp.cast_next;
        dp.cast_next ^= 1;
        PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_cast_free[dp.cast_last], 0)));
        dst = dp.grad32 + dp.cast_last * dp.max_bucket;
    }
    ProfScope prof(PROF_DP_CAST, prof_bytes(n * (4.0 + sizeof(floatX))));
    f32_from_floatX_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, stream>>>(dst, grads + bk.range.lo, n);
    cudaCheck(cudaGetLastError());
    return dst;
}

// Bucket b's fp32 gradients grad32 (dp_bucket_cast's) reduced over dp on dp.comm.stream, once `ready` (an event after
// everything that writes them) has passed: all-reduce in place (ZeRO 0), reduce-scatter in place so that this rank's
// piece holds the sum (ZeRO 1), or reduce-scatter from the cast buffer into grad_shard (ZeRO 2/3).
static void dp_bucket_reduce(DataParallel& dp, int b, float* grad32, cudaEvent_t ready) {
    const Bucket& bk = dp.buckets[b];
    const size_t n = bk.range.size();
    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, ready, 0));
    if (dp.zero == 0) {
        comm_all_reduce_sum(dp.comm, grad32, n);
    } else if (dp.zero == 1) {
        comm_reduce_scatter(dp.comm, grad32, grad32 + (size_t)dp.rank * (n / dp.n), n / dp.n);
    } else {
        comm_reduce_scatter(dp.comm, grad32, dp.grad_shard + zero_shard_offset(bk, dp.n), n / dp.n);
        cudaCheck(cudaEventRecord(dp.ev_cast_free[dp.cast_last], dp.comm.stream));
    }
}
