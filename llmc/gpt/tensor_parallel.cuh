// llmc/gpt/tensor_parallel.cuh: tensor and sequence parallel in the CUDA trainer: its state (struct TensorParallel, a
// member of train_gpt.cu's struct GPT) and the communication of the residual stream over the tp group. A header that
// stands alone: every function takes the TensorParallel it works with and the buffers it works on. On one GPU
// (tp.n == 1) each returns at once or hands back what it was given.
//
// Tensor parallel (--tp, Megatron; llmc/parallel/tp.h slices every tensor, gpt_local_table gives a rank its table): rank r
// holds H/tp heads and KV/tp kv heads of qkv, F/tp columns of fc1 (SwiGLU: gate and up alike) and the matching
// columns of attn_out and fc2, Vp/tp rows of the embedding and head (Vp padded to 128 tp). qkv and fc1 are
// column-parallel (whole input, this rank's outputs), attn_out and fc2 row-parallel: their partial outputs are summed
// over tp (tp_sum), the replicated bias added by tp rank 0 only. The backward sums each column-parallel input gradient
// over tp. Embedding: a token outside this rank's rows reads zeros (tp rank 0 adds the position embedding), summed
// over tp; its backward adds only this rank's rows. Classifier (tp > 1): per panel of rows this rank's Vp/tp logit
// columns; the row max (max over tp), target logit and sum of exps (sums over tp) give the loss and dlogits in place
// (llmc/classifier.cuh's vocab_parallel_*; no rank holds full logits), then d lnf = dlogits head summed over tp.
// Sequence parallel (--sp 1): the norms and the residual stream hold Nl = N/tp rows, positions r*T/tp .. of every
// sample; tp_gather all-gathers them (rows packed by rank, seq_pack_kernel) before each column-parallel block (ln1,
// ln2, lnf, and the output gradient before each row-parallel backward) and tp_sum reduce-scatters after each
// row-parallel one. The replicated tensors' gradients (norms, row-parallel biases, position embedding: from each
// rank's rows, the biases and position embedding from tp rank 0) are summed over tp in fp32 with the bucket's
// reduction. Without SP they are equal on every tp rank. The global norm counts replicated tensors on tp rank 0
// (layout_norm_ranges) and sums over dp and tp. Exports gather the tp slices into whole tensors (gpt_export); checkpoints keep them as they are.
#pragma once

#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/param_table.h"
#include "llmc/precision.cuh"
#include "llmc/profile.cuh"
#include "llmc/parallel/comm.cuh"
#include "llmc/parallel/tp.h"

// This rank's heads, MLP columns and vocabulary rows are the model's local shapes (train_gpt.cu's GPT::Hl, KVl, Fl,
// Vpl, v0); what the tp group itself needs is here.
struct TensorParallel {
    Comm comm;                  // the tp group; its collectives are enqueued on the compute stream (comm.stream)
    int n = 1, rank = 0;        // tp ranks, this rank's place among them
    bool sp = false;            // sequence parallel: the norm and residual rows are this rank's Nl = N / tp
    int B = 0, T = 0, C = 0;    // the residual stream: N = B*T rows of C channels (the whole sequence)
    floatX* part = nullptr;     // SP: [N,C] a row-parallel matmul's partial output, before its reduce-scatter
    floatX* seq_buf = nullptr;  // SP: [N,C] rows packed by tp rank for the reduce-scatter and all-gather

    // Nl: this rank's rows of the residual stream and the norms, of N
    size_t local_rows(size_t N) const { return sp ? N / n : N; }
};

// Sequence parallel packing of rows [B,T,C] (row b*T + t) by tp rank: rank r's positions r*Tl .. (r+1)*Tl - 1 of
// every sample (Tl = T/tp) are contiguous in packed [tp,B,Tl,C], as the reduce-scatter and all-gather over tp need.
// to_packed: packed = pack(rows); otherwise rows = unpack(packed). 8 channels per thread.
__global__ void seq_pack_kernel(floatX* packed, floatX* rows, int B, int T, int tp, int C, bool to_packed) {
    const size_t per_row = C / 8, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * per_row) return;
    const int n = (int)(i / per_row), c = 8 * (int)(i % per_row), Tl = T / tp;
    const int b = n / T, t = n % T, r = t / Tl;
    floatX* p = packed + (((size_t)r * B + b) * Tl + (t - r * Tl)) * C + c;
    floatX* x = rows + (size_t)n * C + c;
    if (to_packed) store8(p, load8(x));
    else store8(x, load8(p));
}


// Tensor and sequence parallel communication of the residual stream, on the compute stream (tp.comm.stream). Without
// SP every tp rank holds all N rows; with SP rank r holds positions r*T/tp .. of every sample, Nl = N/tp rows.

// The sum over tp of partial results part [N,C] (a row-parallel matmul's output, a column-parallel matmul's input
// gradient) into out: without SP all of it, in place (out must be part); with SP this rank's rows [Nl,C]
// (packed by rank into seq_buf, then reduce-scattered).
static void tp_sum(TensorParallel& tp, floatX* part, floatX* out) {
    if (tp.n == 1) return;
    const size_t N = (size_t)tp.B * tp.T, C = tp.C;
    ProfScope prof(PROF_TP_COMM, prof_bytes((double)N * C * sizeof(floatX)));  // the partial sums' bytes
    if (!tp.sp) {
        if (out != part) die("tp_sum: without sequence parallelism the sum is in place");
        comm_all_reduce_sum(tp.comm, part, N * C);
        return;
    }
    seq_pack_kernel<<<(unsigned)ceil_div(N * C / 8, 256), 256, 0, tp.comm.stream>>>(tp.seq_buf, part, tp.B, tp.T, tp.n,
                                                                                     (int)C, true);
    cudaCheck(cudaGetLastError());
    comm_reduce_scatter(tp.comm, tp.seq_buf, out, N * C / tp.n);
}

// SP: every tp rank's rows of local [Nl,C] gathered into full [N,C] (the input of a column-parallel matmul, the
// output gradient of a row-parallel one). Without SP local is already whole (and full is the same buffer).
static void tp_gather(TensorParallel& tp, const floatX* local, floatX* full) {
    if (!tp.sp) return;
    const size_t N = (size_t)tp.B * tp.T, C = tp.C;
    ProfScope prof(PROF_TP_COMM, prof_bytes((double)N * C * sizeof(floatX)));  // the gathered bytes
    comm_all_gather(tp.comm, local, tp.seq_buf, N * C / tp.n);
    seq_pack_kernel<<<(unsigned)ceil_div(N * C / 8, 256), 256, 0, tp.comm.stream>>>(tp.seq_buf, full, tp.B, tp.T, tp.n,
                                                                                     (int)C, false);
    cudaCheck(cudaGetLastError());
}

// Where a sum over tp is computed before tp_sum: SP: the partial-sum buffer; otherwise out itself (in place).
static floatX* tp_part(const TensorParallel& tp, floatX* out) { return tp.sp ? tp.part : out; }

// A row-parallel layer's bias (replicated): added by tp rank 0 only, so the sum over tp holds it once; its gradient
// is every rank's (from the whole dout, the same on every rank) without SP, and tp rank 0's with SP, where the
// replicated tensors' gradients are summed over tp (tp_sum_replicated_grads).
static floatX* row_bias(const TensorParallel& tp, floatX* b) { return tp.rank == 0 ? b : nullptr; }
static floatX* row_bias_grad(const TensorParallel& tp, floatX* db) { return tp.sp && tp.rank != 0 ? nullptr : db; }

// The fp32 gradients grad32 of the tensors [first, end) of table (a bucket's: tensor k at grad32 + its offset - lo):
// under SP each tp rank saw its part of the sequence, so the replicated tensors' gradients (norms, row-parallel
// biases, position embedding) are summed over tp; QK-norm's weights (TP_SUM) always. On the compute stream.
static void tp_sum_replicated_grads(TensorParallel& tp, const ParamTable& table, int first, int end, float* grad32,
                                    size_t lo) {
    for (int k = first; k < end && tp.n > 1; k++) {
        const ParamSpec& s = table.specs[k];
        if (tp_grad_summed(s.tp, tp.sp))
            PROF(PROF_TP_COMM, prof_bytes(4.0 * s.numel()),
                 comm_all_reduce_sum(tp.comm, grad32 + (s.offset - lo), s.numel()));
    }
}
