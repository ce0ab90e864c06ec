// llmc/gpt/data_parallel.cuh: data parallel and ZeRO 0-3 in the CUDA trainer.
// Part of train_gpt.cu's one translation unit (not a standalone header): included by train_gpt.cu after struct GPT,
// whose fields it reads and writes.
//
// Data parallel and ZeRO (--dp, --zero as in train_gpt_cpu; llmc/parallel/layout.h checks the layout, llmc/parallel/zero.h plans
// the buckets): world = pp x dp x tp ranks (tp fastest, llmc/parallel/topology.h), one GPU each, started by mpirun, srun or
// scripts/launch.sh (comm_init, llmc/parallel/launch.h); pipeline parallelism in llmc/gpt/pipeline.cuh. Every NCCL call goes through
// llmc/parallel/comm_nccl.cuh: the dp group's on its own stream (dp.comm.stream), ordered against the compute stream by events; the
// tp group's on the compute stream itself (g->tp.comm.stream = g->stream), in line with the kernels around them. One rank
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
//           two fp32 staging buffers [max bucket] (alternating, so the next bucket's cast overlaps this one's
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
//   usual layout-independent files; any dp and ZeRO stage resumes them (each rank takes its pieces).
//   The memory estimate is per rank: the buffer table gains the rows of the fp32 gradient buffer, the gradient
//   shard and the gather buffers, and master, moments (ZeRO >= 1) and params (ZeRO 3) shrink to the shard.
//
#pragma once

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

// out[0] = sqrt(sumsq[0]), out[1] = the clipping coefficient clip_coef (llmc/grad_clip.h) in fp64, as the CPU
// trainer's, then stored as fp32 (AdamW reads out + 1 as its grad scale). One thread.
__global__ void clip_from_sumsq_kernel(float* out, const double* sumsq, double clip) {
    const double norm = sqrt(sumsq[0]);
    out[0] = (float)norm;
    out[1] = (float)clip_coef(norm, clip);
}


// Several ranks: out[0, 1] = the pre-clip global norm and clip coefficient of the fp32 reduced gradients, once
// dp.comm.stream has reduced every bucket: the norm over the ranges this rank counts (fp64, layout_norm_ranges), summed
// over every rank (dp shards, tp slices and stages). Only enqueues.
static void grads_norm_reduced(GPT* g, float* out, double clip) {
    cudaCheck(cudaEventRecord(g->ev_comm, g->dp.comm.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0)));
    const float* grads = g->L.zero >= 2 ? g->dp.grad_shard : g->dp.grad32;
    double* sumsq = g->dp.norm64 + GLOBAL_NORM_BLOCKS;
    norm_ranges_partial_kernel<<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, g->stream>>>(
        g->dp.norm64, grads, g->dp.norm_ranges, (int)(g->dp.norm_ranges_host.size() / 2));
    cudaCheck(cudaGetLastError());
    sum_partials_kernel<<<1, 1, 0, g->stream>>>(sumsq, g->dp.norm64, GLOBAL_NORM_BLOCKS);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->world.stream, g->ev_compute, 0));
    // over every rank: dp shards, tp slices (disjoint; replicated tensors count on tp rank 0 only) and stages
    comm_all_reduce_sum(g->world, sumsq, 1);
    cudaCheck(cudaEventRecord(g->ev_comm, g->world.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0)));
    clip_from_sumsq_kernel<<<1, 1, 0, g->stream>>>(out, sumsq, clip);
    cudaCheck(cudaGetLastError());
}

// AdamW's table over what this rank updates (zero_parts, llmc/parallel/zero.h): every tensor (one GPU, ZeRO 0) or each
// tensor's part in this rank's piece of its bucket (ZeRO >= 1; bucket padding is never updated and stays zero). Each
// buffer is addressed at its own ZeRO stage (zero_part_offset): params flat below ZeRO 3; the gradients flat below
// ZeRO 2 (grads: the floatX gradients on one GPU, the fp32 ones reduced over dp, grad32, otherwise) and in the shard
// grad_shard from 2; master and moments flat at ZeRO 0. Piece and tensor bounds are multiples of 8 elements, as the
// update needs.
template <typename Moment, typename Grad>
static AdamWTable<Moment, Grad> adamw_table_build(GPT* g, float wd, const Grad* grads, const Grad* grad_shard) {
    std::vector<AdamWTensor<Moment, Grad>> ts;
    const int zero = g->L.zero;
    for (const ZeroPart& p : zero_parts(g->table, g->dp.buckets, g->L.topo.dp, g->L.topo.dp_rank, zero == 0)) {
        AdamWTensor<Moment, Grad> t{};
        t.param = g->params + zero_part_offset(p, ZERO_PARAMS, zero);
        t.grad = (zero >= ZERO_GRADS ? grad_shard : grads) + zero_part_offset(p, ZERO_GRADS, zero);
        t.master = g->master + zero_part_offset(p, ZERO_OPTIM, zero);
        t.m = (Moment*)g->m + zero_part_offset(p, ZERO_OPTIM, zero);
        t.v = (Moment*)g->v + zero_part_offset(p, ZERO_OPTIM, zero);
        t.n = p.flat.size();
        t.weight_decay = g->table.specs[p.spec].is_matrix ? wd : 0.0f;
        ts.push_back(t);
    }
    return adamw_table_upload(ts);
}

// ZeRO 1/2: every rank's pieces of params reach every rank: after the compute stream's writes, dp.comm.stream all-gathers
// each bucket in place (rank r's piece at its place); the compute stream then waits for dp.comm.stream.
static void params_allgather(GPT* g) {
    const int dp = g->L.topo.dp;
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->dp.comm.stream, g->ev_compute, 0));
    for (const Bucket& b : g->dp.buckets)
        comm_all_gather(g->dp.comm, g->params + zero_piece(b, dp, g->L.topo.dp_rank).lo, g->params + b.range.lo,
                        b.range.size() / dp);
    cudaCheck(cudaEventRecord(g->ev_comm, g->dp.comm.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0)));
}

// ZeRO-3: a bucket's weights gathered on dp.comm.stream into its gather buffer before use, one layer ahead

// Starts the all-gather of bucket b's weights into its buffer (nothing when the buffer holds it already, or below
// ZeRO 3, or for b out of range). dp.comm.stream first waits until the compute stream is done with the buffer's
// previous bucket (params_done), so the caller must have marked that bucket done.
static void params_prefetch(GPT* g, int b) {
    if (g->L.zero < 3 || b < 0 || b >= (int)g->dp.buckets.size()) return;
    const Bucket& bk = g->dp.buckets[b];
    const int s = g->dp.gather_buffer(bk), dp = g->L.topo.dp;
    if (g->dp.gather_holds[s] == b) return;
    cudaCheck(cudaStreamWaitEvent(g->dp.comm.stream, g->dp.ev_gather_done[s], 0));
    comm_all_gather(g->dp.comm, g->params + zero_shard_offset(bk, dp), g->dp.gather + g->dp.gather_off[s], bk.range.size() / dp);
    cudaCheck(cudaEventRecord(g->dp.ev_gathered[s], g->dp.comm.stream));
    g->dp.gather_holds[s] = b;
}

// Bucket b's weights are read from here on: the compute stream waits for their gather.
static void params_use(GPT* g, int b) {
    if (g->L.zero < 3) return;
    params_prefetch(g, b);
    PROF(PROF_DP_WAIT, ProfWork(),
         cudaCheck(cudaStreamWaitEvent(g->stream, g->dp.ev_gathered[g->dp.gather_buffer(g->dp.buckets[b])], 0)));
}

// The compute stream's work so far is the last to read bucket b's buffer until its next params_use: the buffer
// may be gathered into after it.
static void params_done(GPT* g, int b) {
    if (g->L.zero < 3) return;
    cudaCheck(cudaEventRecord(g->dp.ev_gather_done[g->dp.gather_buffer(g->dp.buckets[b])], g->stream));
}

// The bucket of layer l's weights (the embeddings are bucket 0, the final norm and head the last).
static int layer_bucket(const GPT* g, int l) { return g->dp.bucket_of[g->table.blocks[l].ln1_w]; }

// Data parallel: bucket b's gradient is complete on this rank (the last micro-batch's backward has passed it). It is
// cast to fp32 (plus head_grad where the LM head lives), and dp.comm.stream, once the compute stream has written it,
// reduces it over dp: all-reduce in place (ZeRO 0), reduce-scatter in place so that this rank's piece holds the
// sum (ZeRO 1), or reduce-scatter from a staging buffer into grad_shard (ZeRO 2/3; the cast into a staging buffer
// first waits until its previous bucket's reduce-scatter has read it).
static void grads_bucket_done(GPT* g, int b) {
    const Bucket& bk = g->dp.buckets[b];
    const int dp = g->L.topo.dp, zero = g->L.zero;
    const size_t n = bk.range.size();
    int staging = -1;
    float* dst = g->dp.grad32 + bk.range.lo;
    if (zero >= 2) {
        staging = g->dp.staging_next;
        g->dp.staging_next ^= 1;
        PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(g->stream, g->dp.ev_staging_free[staging], 0)));
        dst = g->dp.grad32 + staging * g->dp.max_bucket;
    }
    ProfScope prof(PROF_DP_CAST, prof_bytes(n * (4.0 + sizeof(floatX))));  // to the collectives' issue (on dp.comm.stream)
    f32_from_floatX_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g->stream>>>(dst, g->grads + bk.range.lo, n);
    cudaCheck(cudaGetLastError());
    const int h = g->head();
    if (g->has_head && h >= bk.first_spec && h < bk.end_spec) {
        const size_t hn = (size_t)g->Vpl * g->cfg.n_embd;
        float* head_dst = dst + (g->table.specs[h].offset - bk.range.lo);
        head_grad_finish(g);
        add_f32_kernel<<<(unsigned)ceil_div(hn, 256), 256, 0, g->stream>>>(head_dst, g->head_grad, hn);
        cudaCheck(cudaGetLastError());
    }
    // SP: each tp rank saw its part of the sequence, so the replicated tensors' gradients (norms, row-parallel biases,
    // position embedding) are summed over tp, in fp32, before the dp reduction; QK-norm's weights (TP_SUM) always
    for (int k = bk.first_spec; k < bk.end_spec && g->tp.n > 1; k++) {
        const ParamSpec& s = g->table.specs[k];
        if (tp_grad_summed(s.tp, g->tp.sp))
            PROF(PROF_TP_COMM, prof_bytes(4.0 * s.numel()),
                 comm_all_reduce_sum(g->tp.comm, dst + (s.offset - bk.range.lo), s.numel()));
    }
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    const int e = g->table.wte;
    if (g->cfg.tied && g->L.topo.pp > 1 && e >= bk.first_spec && e < bk.end_spec) {
        // the tied embedding's gradient: the first stage's (embedding) plus the last stage's (LM head), on pp.emb.stream
        cudaCheck(cudaStreamWaitEvent(g->pp.emb.stream, g->ev_compute, 0));
        comm_all_reduce_sum(g->pp.emb, dst + (g->table.specs[e].offset - bk.range.lo), g->table.specs[e].numel());
        cudaCheck(cudaEventRecord(g->pp.ev_emb, g->pp.emb.stream));
        cudaCheck(cudaStreamWaitEvent(g->dp.comm.stream, g->pp.ev_emb, 0));
    } else {
        cudaCheck(cudaStreamWaitEvent(g->dp.comm.stream, g->ev_compute, 0));
    }
    if (zero == 0) {
        comm_all_reduce_sum(g->dp.comm, dst, n);
    } else if (zero == 1) {
        comm_reduce_scatter(g->dp.comm, dst, dst + (size_t)g->L.topo.dp_rank * (n / dp), n / dp);
    } else {
        comm_reduce_scatter(g->dp.comm, dst, g->dp.grad_shard + zero_shard_offset(bk, dp), n / dp);
        cudaCheck(cudaEventRecord(g->dp.ev_staging_free[staging], g->dp.comm.stream));
    }
}
