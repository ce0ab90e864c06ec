// llmc/gpt/tensor_parallel.cuh: tensor and sequence parallel in the CUDA trainer.
// Part of train_gpt.cu's one translation unit (not a standalone header): included by train_gpt.cu after struct GPT,
// whose fields it reads and writes.
//
// Tensor parallel (--tp, Megatron; llmc/parallel/tp.h slices every tensor, gpt_local_table gives a rank its table): rank r
// holds H/tp heads and KV/tp kv heads of qkv, F/tp columns of fc1 (SwiGLU: gate and up alike) and the matching
// columns of attn_out and fc2, Vp/tp rows of the embedding and head (Vp padded to 128 tp). qkv and fc1 are
// column-parallel (whole input, this rank's outputs), attn_out and fc2 row-parallel: their partial outputs are summed
// over tp (tp_sum), the replicated bias added by tp rank 0 only. The backward sums each column-parallel input gradient
// over tp. Embedding: a token outside this rank's rows reads zeros (tp rank 0 adds the position embedding), summed
// over tp; its backward adds only this rank's rows. Classifier (tp > 1): per chunk of rows this rank's Vp/tp logit
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

#include "llmc/parallel/tp.h"

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


// Tensor and sequence parallel communication of the residual stream, on the compute stream (g->tp.comm.stream). Without
// SP every tp rank holds all N rows; with SP rank r holds positions r*T/tp .. of every sample, Nl = N/tp rows.

// The sum over tp of partial results part [N,C] (a row-parallel matmul's output, a column-parallel matmul's input
// gradient) into out: without SP all of it, in place (out must be part); with SP this rank's rows [Nl,C]
// (packed by rank into seq_buf, then reduce-scattered).
static void tp_sum(GPT* g, floatX* part, floatX* out) {
    if (g->tp.n == 1) return;
    const size_t N = (size_t)g->B * g->T, C = g->cfg.n_embd;
    ProfScope prof(PROF_TP_COMM, prof_bytes((double)N * C * sizeof(floatX)));  // the partial sums' bytes
    if (!g->tp.sp) {
        if (out != part) die("tp_sum: without sequence parallelism the sum is in place");
        comm_all_reduce_sum(g->tp.comm, part, N * C);
        return;
    }
    seq_pack_kernel<<<(unsigned)ceil_div(N * C / 8, 256), 256, 0, g->stream>>>(g->tp.seq_buf, part, g->B, g->T, g->tp.n,
                                                                                 (int)C, true);
    cudaCheck(cudaGetLastError());
    comm_reduce_scatter(g->tp.comm, g->tp.seq_buf, out, N * C / g->tp.n);
}

// SP: every tp rank's rows of local [Nl,C] gathered into full [N,C] (the input of a column-parallel matmul, the
// output gradient of a row-parallel one). Without SP local is already whole (and full is the same buffer).
static void tp_gather(GPT* g, const floatX* local, floatX* full) {
    if (!g->tp.sp) return;
    const size_t N = (size_t)g->B * g->T, C = g->cfg.n_embd;
    ProfScope prof(PROF_TP_COMM, prof_bytes((double)N * C * sizeof(floatX)));  // the gathered bytes
    comm_all_gather(g->tp.comm, local, g->tp.seq_buf, N * C / g->tp.n);
    seq_pack_kernel<<<(unsigned)ceil_div(N * C / 8, 256), 256, 0, g->stream>>>(g->tp.seq_buf, full, g->B, g->T, g->tp.n,
                                                                                 (int)C, false);
    cudaCheck(cudaGetLastError());
}

// Where a sum over tp is computed before tp_sum: SP: the partial-sum buffer; otherwise out itself (in place).
static floatX* tp_part(GPT* g, floatX* out) { return g->tp.sp ? g->tp.part : out; }

// A row-parallel layer's bias (replicated): added by tp rank 0 only, so the sum over tp holds it once; its gradient
// is every rank's (from the whole dout, the same on every rank) without SP, and tp rank 0's with SP, where the
// replicated tensors' gradients are summed over tp (grads_bucket_done).
static floatX* row_bias(const GPT* g, floatX* b) { return g->tp.rank == 0 ? b : nullptr; }
static floatX* row_bias_grad(const GPT* g, floatX* db) { return g->tp.sp && g->tp.rank != 0 ? nullptr : db; }
