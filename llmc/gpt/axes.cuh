// llmc/gpt/axes.cuh: what each parallel axis adds to the CUDA trainer's struct GPT (train_gpt.cu): one sub-struct
// each. On one GPU they hold groups of one rank and zero counts. The code that reads and writes them lives beside the
// axis: llmc/gpt/tensor_parallel.cuh (TensorParallel), llmc/gpt/data_parallel.cuh (DataParallel),
// llmc/gpt/pipeline.cuh (Pipeline); the buffer-table rows they own are in llmc/gpt/memory.cuh. The fp8 path's state,
// Fp8Linears, is in llmc/gpt/fp8_linear.cuh.
#pragma once

#include <vector>
#include "llmc/adamw.cuh"
#include "llmc/precision.cuh"
#include "llmc/parallel/zero.h"

// Tensor and sequence parallel (--tp, --sp; llmc/parallel/tp.h slices the tensors): this rank's heads, MLP columns and
// vocabulary rows (the local shapes are GPT's Hl, KVl, Fl, Vpl, v0).
struct TensorParallel {
    Comm comm;                  // the tp group; its collectives are enqueued on the compute stream (comm.stream = stream)
    int n = 1, rank = 0;        // tp ranks, this rank's place among them
    bool sp = false;            // sequence parallel: the norm and residual rows are this rank's Nl = N / tp
    floatX* part = nullptr;     // SP: [N,C] a row-parallel matmul's partial output, before its reduce-scatter
    floatX* seq_buf = nullptr;  // SP: [N,C] rows packed by tp rank for the reduce-scatter and all-gather
};

// ZeRO-3's gather buffers: two for the layers (layer l in GATHER_LAYER0 + l % 2), the embeddings, the final norm
// and head
enum { GATHER_LAYER0 = 0, GATHER_EMB = 2, GATHER_HEAD = 3, GATHER_BUFFERS = 4 };

// Data parallel and ZeRO 0-3 (--dp, --zero; llmc/parallel/zero.h plans the buckets). The counts of the buffer-table
// rows are set by gpt_plan.
struct DataParallel {
    Comm comm;                  // the dp group: its size, rank and stream
    bool parallel = false;      // any layout but one GPU: fp32 bucket reduction, the optimizer over this rank's ranges
    std::vector<Bucket> buckets;       // the embeddings, one per layer, the final norm and head
    std::vector<int> bucket_of;        // spec -> bucket
    size_t shard = 0;                  // P / dp
    size_t max_bucket = 0;             // elements of the largest bucket
    size_t n_grad32 = 0, n_grad_shard = 0, n_gather = 0, n_norm64 = 0;  // buffer-table counts (0: no row)
    std::vector<size_t> norm_ranges_host;  // [n,2] the gradient ranges this rank counts (layout_norm_ranges)
    size_t gather_off[GATHER_BUFFERS] = {};  // each gather buffer's offset in `gather`
    float* grad32 = nullptr;    // fp32 gradients: ZeRO 0/1 [P] reduced in place; ZeRO 2/3 [2, max_bucket], the two
                                // staging buffers a bucket is cast into before its reduce-scatter
    float* grad_shard = nullptr;  // ZeRO 2/3: [shard] the reduced gradients of this rank's pieces
    floatX* gather = nullptr;   // ZeRO 3: the gather buffers [2 * max layer bucket + embeddings + head]
    double* norm64 = nullptr;   // [GLOBAL_NORM_BLOCKS + 1] fp64 partial sums of squares, then their sum
    size_t* norm_ranges = nullptr;     // [n,2] device copy of norm_ranges_host
    cudaEvent_t ev_staging_free[2] = {};  // ZeRO 2/3: staging buffer s may be overwritten (its reduce-scatter is done)
    cudaEvent_t ev_gathered[GATHER_BUFFERS] = {}, ev_gather_done[GATHER_BUFFERS] = {};  // ZeRO 3: filled / last read
    int gather_holds[GATHER_BUFFERS] = {-1, -1, -1, -1};  // ZeRO 3: the bucket each gather buffer holds, -1 none
    int staging_next = 0;              // ZeRO 2/3: the staging buffer the next bucket is cast into

    // the gather buffer of bucket b
    int gather_buffer(const Bucket& b) const {
        return b.layer >= 0 ? GATHER_LAYER0 + b.layer % 2 : b.range.lo == 0 ? GATHER_EMB : GATHER_HEAD;
    }
};

// Pipeline parallel (--pp, --vpp, --layout): this rank runs its stage's chunks.
struct Pipeline {
    Comm comm, emb;             // the stages of this rank's pipeline; its first and last stage (tied embedding)
    int n_slots = 1;            // activation slots: the most (micro-batch, chunk) pairs in flight (1 without pp)
    int slot_layers = 0;        // layers per slot: the stage's largest chunk (without pp: every layer)
    floatX* io = nullptr;       // per slot: the chunk's output [Nl,C] (sent on), then the gradient of its output [Nl,C]
                                // (received; the backward leaves its input's gradient there, sent back)
    int head_mb = -1;           // the micro-batch whose final norm (x_final, lnf, lnf_mean) the head scratch holds
    cudaEvent_t ev_pp = nullptr, ev_emb = nullptr;  // recorded on comm.stream / emb.stream after their transfers
};
