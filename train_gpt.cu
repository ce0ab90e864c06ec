// train_gpt.cu: the CUDA trainer of GPT-3 and LLaMA models, read top to bottom as the one-GPU story: the model
// (struct GPT, in llmc/gpt/model.cuh), one layer's forward, the classifier, the backward, the update, train_step,
// generate and main; the model, flags, checkpoints and logs of train_gpt_cpu.cpp and train_gpt.py; bf16 weights and
// activations, fp32 accumulation, master weights and AdamW moments (make PRECISION=FP16: floatX = half, under a loss
// scale; make PRECISION=FP32: floatX = float, for tight tests). Read train_gpt.py's model first, then
// docs/reading.md. Each parallel axis is a header of its own, with its
// state and its work: llmc/gpt/tensor_parallel.cuh (--tp, --sp), data_parallel.cuh (--dp, --zero 0-3), pipeline.cuh
// (--pp, --vpp), fp8_linear.cuh (--fp8). On one GPU each axis reduces to nothing: one rank is the trainer told here.
// memory.cuh holds the buffer table, the memory estimate and gpt_build, weights.cuh the weights in and out,
// options.cuh the flags.
//
// Shapes: B batch, T time, C channels, H heads, KV kv heads, hd head dim, qd = H*hd, qkvd = (H+2KV)*hd,
// F ffn, F1 = F (gelu) or 2F (swiglu: gate then up), V vocabulary, Vp padded vocabulary, P the parameter table's
// (padded) elements, shard = P / dp. Under tp the layer shapes are a rank's (H/tp heads ..., g->Hl, g->Fl, g->Vpl),
// and Nl = N/tp rows of the norms and the residual stream under SP (else N).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "llmc/model_config.h"
#include "llmc/param_table.h"
#include "llmc/cuda_common.cuh"
#include "llmc/precision.cuh"
#include "llmc/matmul.cuh"
#include "llmc/matmul_algos.cuh"
#include "llmc/norm.cuh"
#include "llmc/rope.cuh"
#include "llmc/qk_norm.cuh"
#include "llmc/mlp_act.cuh"
#ifdef ENABLE_FP32
#include "llmc/attention_rowwise.cuh"  // fp32 build: CUDA-core attention, one warp per row
#else
#include "llmc/attention.cuh"          // bf16 and fp16: flash attention on tensor cores
#endif
#if defined(USE_CUDNN) && !defined(ENABLE_FP32)
#define CUDNN_ATTENTION                // --attention cudnn: cuDNN's (make train_gpt USE_CUDNN=1; bf16 or fp16)
#include "llmc/attention_cudnn.cuh"
#endif
#include "llmc/classifier.cuh"
#include "llmc/embedding.cuh"
#include "llmc/adamw.cuh"
#include "llmc/grad_norm.cuh"
#include "llmc/init.h"
#include "llmc/flops.h"
#include "llmc/lr_schedule.h"
#include "llmc/data/dataloader.h"
#include "llmc/run/flags.h"
#include "llmc/run/checkpoint.h"
#include "llmc/run/guard.h"
#include "llmc/run/logger.h"
#include "llmc/run/mc_eval.h"
#include "llmc/run/sampling.h"
#include "llmc/run/signals.h"
#include "llmc/run/train_loop.h"
#include "llmc/run/weights_io.h"
#include "llmc/parallel/layout.h"
#include "llmc/parallel/comm_timeout.h"
#include "llmc/parallel/comm.cuh"  // NCCL, or one rank in a build without it
#include "llmc/run/test_hooks.h"
#include "llmc/profile.cuh"  // --profile: the kernel classes (PROF, ProfScope) and the step profile's table
#include "llmc/gpt/options.cuh"
#include "llmc/gpt/tensor_parallel.cuh"  // --tp, --sp: tp_sum, tp_gather: the residual stream over the tp group
#include "llmc/gpt/data_parallel.cuh"    // --dp, --zero: ZeRO-3 gathers, the per-bucket gradient reduction over dp
#include "llmc/gpt/pipeline.cuh"         // --pp, --vpp: a stage's schedule, the sends between stages
#include "llmc/gpt/fp8_linear.cuh"       // --fp8: the linear layers through fp8 GEMMs
#include "llmc/gpt/model.cuh"            // struct GPT: weights, gradients, optimizer state, activations, the axes
#include "llmc/gpt/memory.cuh"           // the buffer table, the memory estimate, gpt_build
#include "llmc/gpt/weights.cuh"          // weights in and out

// ----------------------------------------------------------------------------------------------
// Where the axes meet the model

// --norm-head: the step's fp32 head gradient (of the unit rows) becomes that of the head's own rows, once per step
// before it joins the other gradients (gpt_fold_head_grad, grads_bucket_done).
static void head_grad_finish(GPT* g) {
    if (g->cfg.norm_head)
        PROF(PROF_NORM_BWD, prof_bytes(3.0 * g->Vpl * g->cfg.n_embd * 4),
             norm_head_backward(g->head_grad, g->head_n, g->head_rnorm, g->Vpl, g->cfg.n_embd, g->stream));
}

// The bucket of layer l's weights (the embeddings are bucket 0, the final norm and head the last).
static int layer_bucket(const GPT* g, int l) { return g->dp.bucket_of[g->table.blocks[l].ln1_w]; }

// Several ranks: bucket b's gradient is complete on this rank (the last micro-batch's backward has passed it). Where
// the axes meet: cast to fp32 for the dp reduction; there the LM head's fp32 gradient joins it, SP sums the replicated
// tensors' gradients over tp, and the tied embedding's gradient is summed over the pipeline's first and last stage;
// then dp.comm.stream reduces the bucket over dp, overlapping the rest of the backward.
static void grads_bucket_done(GPT* g, int b) {
    const Bucket& bk = g->dp.buckets[b];
    float* grad32 = dp_bucket_cast(g->dp, b, g->grads, g->stream);  // bucket element bk.range.lo + i at [i]
    auto in_bucket = [&](int k) { return k >= bk.first_spec && k < bk.end_spec; };
    auto at = [&](int k) { return grad32 + (g->table.specs[k].offset - bk.range.lo); };
    if (g->has_head && in_bucket(g->head())) {
        const size_t hn = (size_t)g->Vpl * g->cfg.n_embd;
        head_grad_finish(g);
        PROF(PROF_DP_CAST, prof_bytes(12.0 * hn), add_f32(at(g->head()), g->head_grad, hn, g->stream));
    }
    tp_sum_replicated_grads(g->tp, g->table, bk.first_spec, bk.end_spec, grad32, bk.range.lo);
    cudaCheck(cudaEventRecord(g->dp.ev_compute, g->stream));
    cudaEvent_t ready = g->dp.ev_compute;
    const int e = g->table.wte;
    if (g->cfg.tied && g->L.topo.pp > 1 && in_bucket(e))  // the first stage's (embedding) plus the last's (LM head)
        ready = pp_sum_tied_grad(g->pp, at(e), g->table.specs[e].numel(), ready);
    dp_bucket_reduce(g->dp, b, grad32, ready);
}

// ----------------------------------------------------------------------------------------------
// Forward of one layer l (x = the residual stream entering it, [N,C] with N = B*T):
//   x[l] = x_mid[l-1] + y; ln1 = norm(x[l])    fused_residual_norm_forward (layer 0: no add)
//   qkv = ln1 Wqkv^T (+b); rope(q, k)          cuBLASLt (bias epilogue), rope_rotate_inplace
//                                              (--qk-norm: qk_norm_forward on the q and k heads first)
//   atty, lse = flash_attention(qkv)           attention_forward (causal, GQA; --pos alibi: the heads' biases)
//   y = atty Wo^T (+b)
//   x_mid = x + y; ln2 = norm(x_mid)           fused_residual_norm_forward
//   fc1 = ln2 W1^T (+b); act = gelu(fc1) or silu(gate) * up   (--gelu-fusion on: GELU in the GEMM's epilogue)
//   y = act W2^T (+b)                          (added to x_mid by the next layer's norm, or by the final norm)
// then x_final = x_mid[L-1] + y; lnf = norm(x_final); the fused classifier computes logits a panel of rows at a time,
// the loss and the logits gradient in place. The backward runs the same steps in reverse, with one residual
// gradient dres [N,C] that each norm's backward adds its input gradient into.
//
// --recompute none|act|selective|full: none keeps every layer's activations; act recomputes the MLP activation
// from the kept fc1 in the backward; selective keeps qkv and fc1 but recomputes the attention output and the MLP
// activation; full keeps only each layer's input x[l] and recomputes the whole layer just before its backward.

// The FLOPs of a causal attention forward: QK^T and PV over the lower triangle, 2 x (2 T^2 hd / 2) per sample and head
// (the profile's count, the work the kernels do; MFU counts the full square, llmc/flops.h). Its backward does 2.5
// times this (five products: the scores again, dV, dP, dQ, dK).
static double attention_flops(int B, int T, int H, int hd) { return 2.0 * B * H * (double)T * T * hd; }

// The attention of the build: flash attention on bf16 or fp16 tensor cores (llmc/attention.cuh: the versions of its
// tables, or with --attention wgmma its Hopper versions 4 and 7), or with --attention cudnn cuDNN's
// (llmc/attention_cudnn.cuh, a USE_CUDNN build), or in the fp32 build the CUDA-core kernels of
// llmc/attention_rowwise.cuh. Same layouts and meaning; g->alibi: the slopes of the H heads, or null; doc_starts(g):
// --reset-attention-mask's first key of each query (llmc/documents.h), or null.
static const int32_t* doc_starts(const GPT* g) { return g->docs.reset_mask ? g->io.doc : nullptr; }
// --reset-position-ids: each token's position (llmc/documents.h), or null (t), for RoPE and the learned embedding
static const int32_t* positions(const GPT* g) { return g->docs.reset_positions ? g->io.pos : nullptr; }
static void attention_fwd(const GPT* g, floatX* out, float* lse, const floatX* qkv, int B, int T, int H, int KV, int hd) {
    ProfScope prof(PROF_ATTN_FWD, prof_flops(attention_flops(B, T, H, hd)));
#ifdef ENABLE_FP32
    attention_rowwise_forward(out, lse, qkv, B, T, H, KV, hd, g->stream, g->alibi, doc_starts(g));
#else
#ifdef CUDNN_ATTENTION
    if (g->attention_cudnn) return attention_cudnn_forward(out, lse, qkv, B, T, H, KV, hd, g->stream);
#endif
    attention_forward(out, lse, qkv, B, T, H, KV, hd, g->stream, g->alibi, doc_starts(g), g->attention_wgmma ? 4 : 0);
#endif
}
static void attention_bwd(const GPT* g, floatX* dqkv, float* dvec, const floatX* dout, const floatX* out,
                          const floatX* qkv, const float* lse, int B, int T, int H, int KV, int hd) {
    ProfScope prof(PROF_ATTN_BWD, prof_flops(2.5 * attention_flops(B, T, H, hd)));
#ifdef ENABLE_FP32
    attention_rowwise_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, g->stream, g->alibi, doc_starts(g));
#else
#ifdef CUDNN_ATTENTION
    if (g->attention_cudnn) return attention_cudnn_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, g->stream);
#endif
    attention_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, g->stream, g->alibi, doc_starts(g),
                       g->attention_wgmma ? 7 : 0);
#endif
}

// out[N,OC] = inp[N,IC] W^T (+ bias) of linear layer k of layer l (cuBLASLt, the bias in its epilogue); with --fp8
// through fp8 GEMMs (llmc/gpt/fp8_linear.cuh).
static void linear_forward(GPT* g, int l, int k, floatX* out, const floatX* inp, const floatX* bias, int N, int IC,
                           int OC) {
    ProfScope prof(prof_linear(k, PROF_FWD), prof_gemm(OC, N, IC));
    if (g->fp8.opt.recipe != FP8_NONE)
        return fp8_linear_forward(g->fp8, g->stream, &g->mm, l, k, out, inp, bias, N, IC, OC);
    matmul_forward(&g->mm, g->stream, out, inp, g->P(linear_weight(g->table.blocks[l], k)), bias, N, IC, OC);
}

// dinp[N,IC] = dout[N,OC] W and dW += dout^T inp (dbias += column sums of dout, when given) of linear layer k of
// layer l; = instead of += in the step's first backward of the chunk (g->grad_accumulate false); with --fp8 through
// fp8 GEMMs, which always add.
static void linear_backward(GPT* g, int l, int k, floatX* dinp, floatX* dbias, const floatX* dout, const floatX* inp,
                            int N, int IC, int OC) {
    const int w = linear_weight(g->table.blocks[l], k);
    if (g->fp8.opt.recipe != FP8_NONE)
        return fp8_linear_backward(g->fp8, g->stream, &g->mm, l, k, dinp, g->G(w), dbias, dout, inp, N, IC, OC);
    PROF(prof_linear(k, PROF_DGRAD), prof_gemm(IC, N, OC),
         matmul_backward_input(&g->mm, g->stream, dinp, dout, g->P(w), N, IC, OC));
    PROF(prof_linear(k, PROF_WGRAD), prof_gemm(IC, OC, N),
         matmul_backward_weight(&g->mm, g->stream, g->G(w), dbias, dout, inp, N, IC, OC, g->grad_accumulate));
}

// The attention half of layer l after ln1: qkv (column-parallel: this rank's heads, on ln1 gathered under SP),
// RoPE, attention.
static void attention_block_forward(GPT* g, int l, LayerActs& la) {
    const ModelConfig& c = g->cfg;
    const ParamTable::Block& w = g->table.blocks[l];
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd, hd = c.head_dim, H = g->Hl, KV = g->KVl;
    tp_gather(g->tp, la.ln1, la.ln1_full);
    linear_forward(g, l, LINEAR_QKV, la.qkv, la.ln1_full, g->P(w.qkv_b), N, C, (H + 2 * KV) * hd);
    const double qk_bytes = (double)N * (H + KV) * hd * sizeof(floatX);  // the q and k heads
    if (c.qk_norm)
        PROF(PROF_NORM_FWD, prof_bytes(3 * qk_bytes),
             qk_norm_forward(la.qkv, la.qk_raw, g->P(w.q_norm_w), g->P(w.k_norm_w), N, H, KV, hd, c.norm_eps, g->stream));
    if (c.pos == POS_ROPE)
        PROF(PROF_ROPE, prof_bytes(2 * qk_bytes),
             rope_rotate_inplace(la.qkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, +1, g->stream, positions(g)));
    attention_fwd(g, la.atty, la.lse, la.qkv, B, T, H, KV, hd);
}

// --gelu-fusion on (llmc/matmul.cuh's header says why, and what it saves): GELU in cuBLASLt's epilogues, for GELU
// models on the floatX GEMMs; SwiGLU models and --fp8's GEMMs keep the separate kernels. The forward's fusion is left
// out under --recompute act and selective: their backward recomputes act from the stored fc1 with gelu_forward, which
// reads fc1 rounded to floatX where the epilogue read the fp32 accumulator, so the recomputed act could differ in the last bit
// from the one the forward's fc2 read, and fc2's weight gradient would not be that of the forward that ran. Unfused,
// both are gelu_forward's, bit for bit. The backward's fusion reads only the stored fc1, which is the same in every
// mode. So each mode stays consistent with itself: full recomputes the fused forward bit for bit (its loss is none's,
// as unfused), and act's and selective's forward is the unfused one (their loss is --gelu-fusion off's).
static bool gelu_fused(const GPT* g) { return g->gelu_fusion && g->cfg.mlp == MLP_GELU && g->fp8.opt.recipe == FP8_NONE; }
static bool gelu_fused_forward(const GPT* g) {
    return gelu_fused(g) && g->recompute != RECOMPUTE_SELECTIVE && g->recompute != RECOMPUTE_ACT;
}

// act[N,F] = gelu(fc1), fc1[N,F] = inp[N,C] W1^T (+b) of layer l in one GEMM with the GELU epilogue. Where cuBLASLt
// has none, the unfused path (the GEMM with the bias epilogue, then gelu_forward), timed with fc1's forward as the
// epilogue is.
static void linear_forward_gelu(GPT* g, int l, floatX* act, floatX* fc1, const floatX* inp, const floatX* bias, int N,
                                int IC, int OC) {
    ProfScope prof(prof_linear(LINEAR_FC1, PROF_FWD), prof_gemm(OC, N, IC));
    const floatX* w = g->P(linear_weight(g->table.blocks[l], LINEAR_FC1));
    if (matmul_forward_gelu(&g->mm, g->stream, act, fc1, inp, w, bias, N, IC, OC)) return;
    matmul_forward(&g->mm, g->stream, fc1, inp, w, bias, N, IC, OC);
    gelu_forward(act, fc1, (size_t)N * OC, g->stream);
}

// fc2's backward of layer l with GELU in its input gradient's epilogue: dW2 += dout[N,C]^T act[N,F] (dbias2 += the
// column sums of dout), and in one GEMM dfc1[N,F] = (dout W2) * gelu'(fc1) with fc1's bias gradient dbias1 += the
// column sums of dfc1. Returns whether dbias1 was taken there. Where cuBLASLt has no algorithm, the unfused path
// (dact = dout W2, then gelu_backward, timed with fc2's input gradient) and false: fc1's weight gradient then takes
// dbias1, as unfused.
static bool linear_backward_dgelu(GPT* g, int l, floatX* dfc1, floatX* dbias1, floatX* dbias2, const floatX* dout,
                                  const floatX* act, const floatX* fc1, int N, int IC, int OC) {
    const int w = linear_weight(g->table.blocks[l], LINEAR_FC2);
    bool fused;
    {
        ProfScope prof(prof_linear(LINEAR_FC2, PROF_DGRAD), prof_gemm(IC, N, OC));
        fused = matmul_backward_input_dgelu(&g->mm, g->stream, dfc1, dbias1, dout, g->P(w), fc1, N, IC, OC);
        if (!fused) {
            matmul_backward_input(&g->mm, g->stream, g->scratch.dact, dout, g->P(w), N, IC, OC);
            gelu_backward(dfc1, g->scratch.dact, fc1, (size_t)N * IC, g->stream);
        }
    }
    PROF(prof_linear(LINEAR_FC2, PROF_WGRAD), prof_gemm(IC, OC, N),
         matmul_backward_weight(&g->mm, g->stream, g->G(w), dbias2, dout, act, N, IC, OC, g->grad_accumulate));
    return fused;
}

// The MLP activation of layer l: act from fc1 (this rank's Fl columns).
static void mlp_act_forward(GPT* g, LayerActs& la) {
    const size_t N = (size_t)g->B * g->T;
    ProfScope prof(PROF_ACT_FWD, prof_bytes((g->cfg.mlp == MLP_SWIGLU ? 3.0 : 2.0) * N * g->Fl * sizeof(floatX)));
    if (g->cfg.mlp == MLP_SWIGLU) swiglu_forward(la.act, la.fc1, (int)N, g->Fl, g->stream);
    else gelu_forward(la.act, la.fc1, N * g->Fl, g->stream);
}

// Layer l up to its MLP output in g->scratch.y. x_prev_mid: x[l] = x_prev_mid + g->scratch.y (the previous layer's
// x_mid and MLP output) is formed by ln1's residual add; null when la.x already holds x[l] (layer 0, a
// recompute), and then ln1 = norm(la.x) without a residual add.
// Tensor parallel: attn_out and fc2 are row-parallel, their partial outputs summed over tp into g->scratch.y (tp_sum; the
// bias from tp rank 0); the norms and residual adds run on this rank's Nl rows.
static void layer_forward(GPT* g, int l, const floatX* x_prev_mid) {
    const ModelConfig& c = g->cfg;
    const ParamTable::Block& w = g->table.blocks[l];
    LayerActs& la = g->layers[l];
    const int N = g->B * g->T, Nl = (int)g->tp.local_rows(N), C = c.n_embd, F = g->Fl,
              F1 = c.mlp == MLP_SWIGLU ? 2 * F : F;
    const bool rms = c.norm == NORM_RMSNORM;
    const double row_bytes = (double)Nl * C * sizeof(floatX);  // one [Nl,C] tensor of the residual stream
    if (g->fp8.opt.recipe != FP8_NONE && g->L.zero >= 3)
        PROF(PROF_FP8_SCALING, ProfWork(),  // its weights just gathered
             fp8_cast_weights(g->fp8, g->stream, g->table, l, false, [g](int w) { return g->P(w); }));
    if (x_prev_mid)
        PROF(PROF_NORM_FWD, prof_bytes(4 * row_bytes),
             fused_residual_norm_forward(la.x, la.ln1, la.ln1_mean, la.ln1_rstd, x_prev_mid, g->scratch.y, g->P(w.ln1_w),
                                         g->P(w.ln1_b), Nl, C, c.norm_eps, rms, g->stream));
    else
        PROF(PROF_NORM_FWD, prof_bytes(2 * row_bytes),
             fused_residual_norm_forward(nullptr, la.ln1, la.ln1_mean, la.ln1_rstd, la.x, nullptr, g->P(w.ln1_w),
                                         g->P(w.ln1_b), Nl, C, c.norm_eps, rms, g->stream));  // no residual add
    attention_block_forward(g, l, la);
    floatX* part = tp_part(g->tp, g->scratch.y);
    linear_forward(g, l, LINEAR_ATTN_OUT, part, la.atty, row_bias(g->tp, g->P(w.attn_out_b)), N, g->Hl * c.head_dim, C);
    tp_sum(g->tp, part, g->scratch.y);
    PROF(PROF_NORM_FWD, prof_bytes(4 * row_bytes),
         fused_residual_norm_forward(la.x_mid, la.ln2, la.ln2_mean, la.ln2_rstd, la.x, g->scratch.y, g->P(w.ln2_w),
                                     g->P(w.ln2_b), Nl, C, c.norm_eps, rms, g->stream));
    tp_gather(g->tp, la.ln2, la.ln2_full);
    if (gelu_fused_forward(g)) {
        linear_forward_gelu(g, l, la.act, la.fc1, la.ln2_full, g->P(w.fc1_b), N, C, F);
    } else {
        linear_forward(g, l, LINEAR_FC1, la.fc1, la.ln2_full, g->P(w.fc1_b), N, C, F1);
        mlp_act_forward(g, la);
    }
    linear_forward(g, l, LINEAR_FC2, part, la.act, row_bias(g->tp, g->P(w.fc2_b)), N, F, C);
    tp_sum(g->tp, part, g->scratch.y);
}

// dst[i] = floatX(a[i] + b[i]): a pipeline chunk's output, its last layer's x_mid plus its MLP output (the residual
// add that the next layer's norm would do, rounded as fused_residual_norm_forward rounds it)
__global__ void residual_add_kernel(floatX* dst, const floatX* a, const floatX* b, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_floatX(to_float(a[i]) + to_float(b[i]));
}

// Uploads: the host's part of a micro-batch (its tokens, targets and embedding plan) in a pinned upload buffer.

// int32 entries of one upload buffer: inputs, targets, document starts, positions, the tokens' and the positions'
// embedding plans (the layout of HostIO, llmc/gpt/model.cuh)
static size_t upload_ints(const GPT* g) {
    const int N = g->B * g->T;
    return 4 * (size_t)N + 2 * embedding_plan_ints(N);
}
// --reset-position-ids with learned positions: the position embedding's backward sums by the positions' plan
static bool positions_planned(const GPT* g) { return g->docs.reset_positions && g->cfg.pos == POS_LEARNED; }

// At least n pinned upload buffers. Only between steps: no queued copy may read the old ones.
static void gpt_upload_reserve(GPT* g, int n) {
    if (g->io.n_uploads >= n) return;
    if (g->io.h_upload) cudaCheck(cudaFreeHost(g->io.h_upload));
    cudaCheck(cudaMallocHost((void**)&g->io.h_upload, (size_t)n * upload_ints(g) * sizeof(int32_t)));
    g->io.n_uploads = n;
    g->io.uploads.assign(n, MicroBatchUpload{});
}

// Host work of micro-batch mb of the step, into its pinned upload buffer: the tokens (checked against the vocabulary), the
// targets (-1 = ignore; may be null) and, with targets, the embedding backward's plan from the host tokens
// (llmc/embedding.cuh), so that the device needs nothing more from the host for this micro-batch.
static void gpt_upload(GPT* g, int mb, const int32_t* inputs, const int32_t* targets) {
    const size_t N = (size_t)g->B * g->T;
    const int V = g->cfg.vocab_size;
    int32_t* h = g->io.h_upload + (size_t)mb * upload_ints(g);
    MicroBatchUpload& st = g->io.uploads[mb];
    for (size_t n = 0; n < N; n++) {
        if (inputs[n] < 0 || inputs[n] >= V) die("input token %d out of range [0, %d)", inputs[n], V);
        if (targets && (targets[n] < -1 || targets[n] >= V)) die("target token %d out of range [-1, %d)", targets[n], V);
    }
    std::copy(inputs, inputs + N, h);
    if (g->docs.marks()) documents_mark(g->docs, inputs, g->B, g->T, h + 2 * N, h + 3 * N);
    st.has_targets = targets != nullptr;
    st.n_valid = 0;
    if (!targets) return;
    std::copy(targets, targets + N, h + N);
    for (size_t n = 0; n < N; n++) st.n_valid += targets[n] >= 0;
    int32_t* plans = h + 4 * N;
    embedding_plan_rows(inputs, (int)N, V, plans, &st.plan_unique, &st.plan_max);
    if (positions_planned(g))
        embedding_plan_rows(h + 3 * N, (int)N, g->T, plans + embedding_plan_ints((int)N), &st.pos_plan_unique, &st.pos_plan_max);
}

// The device copy of micro-batch mb's document starts and positions, for its backward (a pipeline stage runs other
// micro-batches' forwards in between; the forward's copy is gpt_forward_chunk's).
static void upload_documents(GPT* g, int mb) {
    if (!g->docs.marks()) return;
    const size_t N = (size_t)g->B * g->T;
    cudaCheck(cudaMemcpyAsync(g->io.doc, g->io.h_upload + (size_t)mb * upload_ints(g) + 2 * N, 2 * N * sizeof(int32_t),
                              cudaMemcpyHostToDevice, g->stream));
}

// The layers [*l0, *l1) of pipeline chunk `chunk` (-1: the whole model, one stage), whether it begins with the
// embeddings (*first) and ends with the final norm and head (*last).
static void chunk_span(const GPT* g, int chunk, int* l0, int* l1, bool* first, bool* last) {
    const int n_chunks = g->L.n_chunks();
    *l0 = chunk < 0 ? 0 : g->L.chunk_first[chunk];
    *l1 = chunk < 0 ? g->cfg.n_layer : g->L.chunk_first[chunk + 1];
    *first = chunk <= 0;
    *last = chunk < 0 || chunk == n_chunks - 1;
}

// Forward of uploaded micro-batch mb (gpt_upload) through pipeline chunk `chunk` (-1: the whole model): from the
// embeddings (the first chunk) or from g->layers[l0].x (received from the previous stage), to the final norm g->scratch.lnf
// [N,C] (the last chunk) or to the chunk's output out [N,C] (sent on). Its tokens and targets go up in one
// asynchronous copy from its pinned upload buffer (they are adjacent there and on the device).
static void gpt_forward_chunk(GPT* g, int mb, int chunk = -1, floatX* out = nullptr) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd;
    int l0, l1;
    bool first, last;
    chunk_span(g, chunk, &l0, &l1, &first, &last);
    const MicroBatchUpload& st = g->io.uploads[mb];
    const int32_t* h = g->io.h_upload + (size_t)mb * upload_ints(g);
    cudaCheck(cudaMemcpyAsync(g->io.inputs, h, (size_t)(g->docs.marks() ? 4 : st.has_targets ? 2 : 1) * N * sizeof(int32_t),
                              cudaMemcpyHostToDevice, g->stream));
    g->io.n_valid = st.n_valid;
    // ZeRO 3: each bucket's weights gathered one bucket ahead (dp_params_use waits for them, dp_params_done frees it)
    const int head_bucket = (int)g->dp.buckets.size() - 1;
    if (first) {
        dp_params_use(g->dp, g->params, 0, g->stream);
        dp_params_prefetch(g->dp, g->params, layer_bucket(g, l0));
        // x[0] = wte[token] (+ wpe[t]); layer 0's norm has no residual to add. Tensor parallel: this rank's vocabulary
        // rows (zeros for the other tokens; the position embedding from tp rank 0), summed over tp
        floatX* x0 = tp_part(g->tp, g->layers[0].x);
        PROF(PROF_EMB_FWD, prof_bytes((2.0 * N + T) * C * sizeof(floatX)),
             embedding_forward(x0, g->io.inputs, g->P(t.wte), row_bias(g->tp, g->P(t.wpe)), N, T, C, g->stream, g->v0, g->Vpl,
                               positions(g)));
        tp_sum(g->tp, x0, g->layers[0].x);
        dp_params_done(g->dp, 0, g->stream);
    }
    for (int l = l0; l < l1; l++) {
        const int b = layer_bucket(g, l);
        dp_params_use(g->dp, g->params, b, g->stream);
        dp_params_prefetch(g->dp, g->params, l + 1 < l1 ? layer_bucket(g, l + 1) : last ? head_bucket : -1);
        layer_forward(g, l, l == l0 ? nullptr : g->layers[l - 1].x_mid);
        dp_params_done(g->dp, b, g->stream);
    }
    if (!last) {  // x[l1] = x_mid + y, sent to the next chunk's stage
        const size_t n = g->tp.local_rows(N) * C;
        ProfScope prof(PROF_NORM_FWD, prof_bytes(3.0 * n * sizeof(floatX)));  // the residual add a norm would fuse
        residual_add_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g->stream>>>(out, g->layers[l1 - 1].x_mid, g->scratch.y, n);
        cudaCheck(cudaGetLastError());
        return;
    }
    if (c.tied && !first) dp_params_use(g->dp, g->params, 0, g->stream);  // the last stage's copy of the tied embedding, for the LM head
    dp_params_use(g->dp, g->params, head_bucket, g->stream);  // the final norm here, the LM head in the classifier (tied: the embedding buffer)
    if (c.norm_head)
        PROF(PROF_NORM_FWD, prof_bytes(2.0 * g->Vpl * C * sizeof(floatX)),
             norm_head_forward(g->head_n, g->head_rnorm, g->P(g->head()), g->Vpl, C, g->stream));
    PROF(PROF_NORM_FWD, prof_bytes(4.0 * g->tp.local_rows(N) * C * sizeof(floatX)),
         fused_residual_norm_forward(g->scratch.x_final, g->scratch.lnf, g->scratch.lnf_mean, g->scratch.lnf_rstd, g->layers[l1 - 1].x_mid, g->scratch.y,
                                     g->P(t.lnf_w), g->P(t.lnf_b), (int)g->tp.local_rows(N), C, c.norm_eps,
                                     c.norm == NORM_RMSNORM, g->stream));
    tp_gather(g->tp, g->scratch.lnf, g->scratch.lnf_full);
}

// Forward of one micro-batch inputs[B*T] (host) through the final norm, outside a training step (evaluation,
// sampling, tests). targets[B*T] (host, -1 = ignore, may be null) are uploaded for the classifier. Tokens
// must be in [0, vocab). It waits for the stream first, since it rewrites upload buffer 0.
static void gpt_forward(GPT* g, const int32_t* inputs, const int32_t* targets) {
    comm_wait_stream(g->world, g->stream, "the work before a forward");
    gpt_upload_reserve(g, 1);
    gpt_upload(g, 0, inputs, targets);
    gpt_forward_chunk(g, 0);
}

// loss_sum[0] += weight * (sum of losses[0..N)) / n_valid, in fp64 and a fixed order (one block: thread t sums
// rows t, t + 256, ..., then a tree over the threads), so the loss of a step needs no host round trip per
// micro-batch. Launch with 256 threads.
__global__ void loss_accumulate_kernel(double* loss_sum, const float* losses, int N, int n_valid, double weight) {
    __shared__ double part[256];
    double s = 0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) s += losses[n];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0 && n_valid > 0) loss_sum[0] += weight * part[0] / n_valid;
}

// Adds weight * (mean loss over the valid targets of the micro-batch in g->scratch.losses) into g->scratch.loss_sum.
static void gpt_loss_accumulate(GPT* g, double weight) {
    ProfScope prof(PROF_XENT, prof_bytes(4.0 * g->B * g->T));
    loss_accumulate_kernel<<<1, 256, 0, g->stream>>>(g->scratch.loss_sum, g->scratch.losses, g->B * g->T, g->io.n_valid, weight);
    cudaCheck(cudaGetLastError());
}

// Waits for the stream and reads g->scratch.loss_sum through pinned memory into g->io.loss.
static double gpt_read_loss(GPT* g) {
    cudaCheck(cudaMemcpyAsync(&g->io.h_readback->loss, g->scratch.loss_sum, sizeof(double), cudaMemcpyDeviceToHost, g->stream));
    comm_wait_stream(g->world, g->stream, "the step's work (its collectives included)");
    g->io.loss = g->io.h_readback->loss;
    return g->io.loss;
}

// logits[rows, Vpl] (floatX, in g->scratch.logits) of lnf rows [row0, row0 + rows), rows <= cls_panel: the LM
// head (this rank's vocabulary rows) as a linear layer (IC = C, OC = Vpl), the same GEMM as step 1 of
// fused_classifier.
static void gpt_logits(GPT* g, int row0, int rows) {
    const ModelConfig& c = g->cfg;
    matmul_forward(&g->mm, g->stream, g->scratch.logits, g->scratch.lnf_full + (size_t)row0 * c.n_embd, g->head_w(), nullptr, rows,
                   c.n_embd, g->Vpl);
}

// Tensor parallel: the vocabulary-parallel fused classifier (llmc/classifier.cuh) over the N rows of lnf_full, a panel
// of rows at a time: this rank's logit columns, the row max (max over tp), target logit and sum of exps (sums over tp), the
// losses and dlogits (scale: usually 1/valid targets); with dx, also dx [N,C] = dlogits head (this rank's partial
// sum: the caller sums it over tp) and head_grad += dlogits^T lnf.
static void classifier_tp(GPT* g, floatX* dx, float scale) {
    const ModelConfig& c = g->cfg;
    const int N = g->B * g->T, C = c.n_embd, V = c.vocab_size, panel = g->scratch.cls_panel;
    float *mx = g->scratch.cls_stats, *sum = mx + panel, *tgt = sum + panel;
    for (int r0 = 0; r0 < N; r0 += panel) {
        const int rows = std::min(panel, N - r0);
        const ProfWork stats = prof_bytes(4.0 * rows), logits = prof_bytes((double)rows * g->Vpl * sizeof(floatX));
        PROF(PROF_HEAD_FWD, prof_gemm(g->Vpl, rows, C), gpt_logits(g, r0, rows));
        PROF(PROF_XENT, logits,
             vocab_parallel_max_target(g->scratch.logits, mx, tgt, g->io.targets + r0, rows, g->v0, V, g->Vpl, g->stream));
        PROF(PROF_TP_COMM, stats, comm_all_reduce_max(g->tp.comm, mx, rows));
        PROF(PROF_TP_COMM, stats, comm_all_reduce_sum(g->tp.comm, tgt, rows));
        PROF(PROF_XENT, logits, vocab_parallel_sum_exp(g->scratch.logits, mx, sum, rows, g->v0, V, g->Vpl, g->stream));
        PROF(PROF_TP_COMM, stats, comm_all_reduce_sum(g->tp.comm, sum, rows));
        PROF(PROF_XENT, prof_bytes(2 * logits.bytes),
             vocab_parallel_loss_grad(g->scratch.logits, g->scratch.losses + r0, mx, sum, tgt, g->io.targets + r0, rows, g->v0, V, g->Vpl,
                                      scale, g->stream));
        if (!dx) continue;
        PROF(PROF_HEAD_DGRAD, prof_gemm(C, rows, g->Vpl),
             matmul_backward_input(&g->mm, g->stream, dx + (size_t)r0 * C, g->scratch.logits, g->head_w(), rows, C, g->Vpl));
        PROF(PROF_HEAD_WGRAD, prof_gemm(C, g->Vpl, rows),
             matmul_backward_weight(&g->mm, g->stream, g->head_grad, nullptr, g->scratch.logits, g->scratch.lnf_full + (size_t)r0 * C,
                                    rows, C, g->Vpl, g->grad_accumulate || r0 > 0));
    }
}

// Mean loss over the valid targets of the micro-batch after gpt_forward (no gradients); waits for the device.
static double gpt_loss(GPT* g) {
    const ModelConfig& c = g->cfg;
    const int N = g->B * g->T;
    if (g->tp.n > 1) classifier_tp(g, nullptr, 0.0f);
    for (int r0 = 0; r0 < N && g->tp.n == 1; r0 += g->scratch.cls_panel) {
        const int rows = std::min(g->scratch.cls_panel, N - r0);
        PROF(PROF_HEAD_FWD, prof_gemm(c.padded_vocab, rows, c.n_embd), gpt_logits(g, r0, rows));
        PROF(PROF_XENT, prof_bytes(2.0 * rows * c.padded_vocab * sizeof(floatX)),
             fused_classifier_rows(g->scratch.logits, g->scratch.losses + r0, nullptr, g->io.targets + r0, rows, c.vocab_size,
                                   c.padded_vocab, 0.0f, g->stream));
    }
    cudaCheck(cudaMemsetAsync(g->scratch.loss_sum, 0, sizeof(double), g->stream));
    gpt_loss_accumulate(g, 1.0);
    return gpt_read_loss(g);
}

// ----------------------------------------------------------------------------------------------
// Backward

// Backward of (loss * loss_scale) of uploaded micro-batch mb through pipeline chunk `chunk` (-1: the whole model)
// after its forward, accumulated into the gradients (the LM head's into head_grad, fp32; the step's first backward of
// the chunk writes the linear layers' and the head's, gpt_zero_grad). The last chunk starts from
// the loss (its micro-batch uploaded with targets; loss_weight * its mean loss joins g->scratch.loss_sum), the others from the
// gradient of their output in dx [N,C] (received); the first chunk ends in the embeddings, the others leave the
// gradient of their input in dx (sent back). Only enqueues work: the embedding plan, built on the host by gpt_upload,
// goes up asynchronously. reduce (data parallel, the step's last micro-batch, one stage): each bucket is reduced
// over dp as soon as its gradient is complete.
static void gpt_backward_chunk(GPT* g, int mb, double loss_scale, double loss_weight, bool reduce, int chunk = -1,
                                floatX* dx = nullptr) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const int B = g->B, T = g->T, N = B * T, Nl = (int)g->tp.local_rows(N), C = c.n_embd, hd = c.head_dim, H = g->Hl,
              KV = g->KVl, qd = H * hd, qkvd = (H + 2 * KV) * hd, F = g->Fl, F1 = c.mlp == MLP_SWIGLU ? 2 * F : F;
    const bool rms = c.norm == NORM_RMSNORM, swiglu = c.mlp == MLP_SWIGLU;
    const double row_bytes = (double)Nl * C * sizeof(floatX), qk_bytes = (double)N * (H + KV) * hd * sizeof(floatX),
                 act_bytes = (double)N * F * sizeof(floatX);  // [Nl,C], the q and k heads, [N,F]
    int l0, l1;
    bool first, last;
    chunk_span(g, chunk, &l0, &l1, &first, &last);
    char& started = g->chunk_started.at(std::max(chunk, 0));
    g->grad_accumulate = started;  // the step's first backward of this chunk writes (beta 0), later ones add
    started = 1;
    // the token rows of this micro-batch, grouped by token, for the embedding backward
    const MicroBatchUpload& st = g->io.uploads[mb];
    if (last && !st.has_targets) die("gpt_backward: the micro-batch was uploaded without targets");
    const int32_t* plans = g->io.h_upload + (size_t)mb * upload_ints(g) + 4 * (size_t)N;
    if (first) embedding_plan_upload(&g->io.plan, plans, st.plan_unique, st.plan_max, N, g->stream);
    if (first && positions_planned(g))
        embedding_plan_upload(&g->io.pos_plan, plans + embedding_plan_ints(N), st.pos_plan_unique, st.pos_plan_max, N,
                              g->stream);
    upload_documents(g, mb);
    if (!last) {
        cudaCheck(cudaMemcpyAsync(g->scratch.dres, dx, (size_t)Nl * C * sizeof(floatX), cudaMemcpyDeviceToDevice, g->stream));
        dp_params_prefetch(g->dp, g->params, layer_bucket(g, l1 - 1));
    } else {
        // classifier: loss, dlogits in place, dln = d lnf, head_grad += dlogits^T lnf (tensor parallel: the vocabulary-
        // parallel classifier, and d lnf summed over tp: the head is column-parallel)
        const float scale = g->io.n_valid ? (float)(loss_scale / g->io.n_valid) : 0.0f;
        if (g->tp.n == 1) {
            fused_classifier(g->scratch.dln, g->head_grad, g->scratch.losses, nullptr, g->scratch.logits, g->scratch.lnf, g->head_w(), g->io.targets, N,
                             C, c.vocab_size, c.padded_vocab, g->scratch.cls_panel, scale, g->grad_accumulate, &g->mm, g->stream,
                             prof_classifier_phase);  // the profile's LM head and cross-entropy classes
        } else {
            floatX* part = tp_part(g->tp, g->scratch.dln);
            classifier_tp(g, part, scale);
            tp_sum(g->tp, part, g->scratch.dln);
        }
        gpt_loss_accumulate(g, loss_weight);
        cudaCheck(cudaMemsetAsync(g->scratch.dres, 0, (size_t)Nl * C * sizeof(floatX), g->stream));
        PROF(PROF_NORM_BWD, prof_bytes(4 * row_bytes),
             norm_backward(g->scratch.dres, g->G(t.lnf_w), g->G(t.lnf_b), g->scratch.norm_partial, g->scratch.dln, g->scratch.x_final, g->P(t.lnf_w),
                           g->scratch.lnf_mean, g->scratch.lnf_rstd, Nl, C, rms, g->stream));
        const int head_bucket = (int)g->dp.buckets.size() - 1;
        dp_params_done(g->dp, head_bucket, g->stream);
        if (c.tied) dp_params_done(g->dp, 0, g->stream);
        if (reduce) grads_bucket_done(g, head_bucket);
        dp_params_prefetch(g->dp, g->params, layer_bucket(g, l1 - 1));
    }

    for (int l = l1 - 1; l >= l0; l--) {
        const ParamTable::Block& w = t.blocks[l];
        LayerActs& la = g->layers[l];
        const int b = layer_bucket(g, l);
        dp_params_use(g->dp, g->params, b, g->stream);
        dp_params_prefetch(g->dp, g->params, l > l0 ? layer_bucket(g, l - 1) : -1);
        if (g->recompute == RECOMPUTE_FULL) {
            layer_forward(g, l, nullptr);  // every buffer of the layer again, from la.x
        } else if (g->recompute == RECOMPUTE_SELECTIVE) {
            attention_fwd(g, la.atty, la.lse, la.qkv, B, T, H, KV, hd);
            mlp_act_forward(g, la);
        } else if (g->recompute == RECOMPUTE_ACT) {
            mlp_act_forward(g, la);
        }
        // dres = d(layer output) = d(x_mid + fc2(act(fc1(ln2(x_mid))))). Tensor parallel: fc2 row-parallel (its dout
        // gathered under SP), fc1 column-parallel (its input gradient summed over tp)
        if (g->fp8.opt.recipe != FP8_NONE && g->L.zero >= 3)  // the transposes, after the gather
            PROF(PROF_FP8_SCALING, ProfWork(),
                 fp8_cast_weights(g->fp8, g->stream, g->table, l, true, [g](int w) { return g->P(w); }));
        floatX* part = tp_part(g->tp, g->scratch.dln);
        tp_gather(g->tp, g->scratch.dres, g->scratch.dres_full);
        bool fc1_bias_taken = false;  // --gelu-fusion on: fc1's bias gradient from fc2's input gradient's epilogue
        if (gelu_fused(g)) {
            fc1_bias_taken = linear_backward_dgelu(g, l, g->scratch.dfc1, g->G(w.fc1_b), row_bias_grad(g->tp, g->G(w.fc2_b)),
                                                   g->scratch.dres_full, la.act, la.fc1, N, F, C);
        } else {
            linear_backward(g, l, LINEAR_FC2, g->scratch.dact, row_bias_grad(g->tp, g->G(w.fc2_b)), g->scratch.dres_full, la.act, N, F, C);
            if (swiglu) PROF(PROF_ACT_BWD, prof_bytes(5 * act_bytes), swiglu_backward(g->scratch.dfc1, g->scratch.dact, la.fc1, N, F, g->stream));
            else PROF(PROF_ACT_BWD, prof_bytes(3 * act_bytes), gelu_backward(g->scratch.dfc1, g->scratch.dact, la.fc1, (size_t)N * F, g->stream));
        }
        if (g->recompute != RECOMPUTE_FULL) tp_gather(g->tp, la.ln2, la.ln2_full);  // SP: the one copy, this layer's again
        linear_backward(g, l, LINEAR_FC1, part, fc1_bias_taken ? nullptr : g->G(w.fc1_b), g->scratch.dfc1, la.ln2_full, N, C, F1);
        tp_sum(g->tp, part, g->scratch.dln);
        PROF(PROF_NORM_BWD, prof_bytes(4 * row_bytes),
             norm_backward(g->scratch.dres, g->G(w.ln2_w), g->G(w.ln2_b), g->scratch.norm_partial, g->scratch.dln, la.x_mid, g->P(w.ln2_w),
                           la.ln2_mean, la.ln2_rstd, Nl, C, rms, g->stream));
        // dres = d(x_mid) = d(x + attn_out(attention(qkv(ln1(x))))): attn_out row-parallel, qkv column-parallel
        tp_gather(g->tp, g->scratch.dres, g->scratch.dres_full);
        linear_backward(g, l, LINEAR_ATTN_OUT, g->scratch.datty, row_bias_grad(g->tp, g->G(w.attn_out_b)), g->scratch.dres_full, la.atty, N, qd, C);
        attention_bwd(g, g->scratch.dqkv, g->scratch.dvec, g->scratch.datty, la.atty, la.qkv, la.lse, B, T, H, KV, hd);
        if (c.pos == POS_ROPE)
            PROF(PROF_ROPE, prof_bytes(2 * qk_bytes),
                 rope_rotate_inplace(g->scratch.dqkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, -1, g->stream, positions(g)));
        if (c.qk_norm)  // the weights' gradients: this rank's heads' part (summed over tp with the bucket)
            PROF(PROF_NORM_BWD, prof_bytes(3 * qk_bytes),
                 qk_norm_backward(g->scratch.dqkv, g->G(w.q_norm_w), g->G(w.k_norm_w), g->scratch.norm_partial, la.qk_raw,
                                  g->P(w.q_norm_w), g->P(w.k_norm_w), N, H, KV, hd, c.norm_eps, g->stream));
        if (g->recompute != RECOMPUTE_FULL) tp_gather(g->tp, la.ln1, la.ln1_full);
        linear_backward(g, l, LINEAR_QKV, part, g->G(w.qkv_b), g->scratch.dqkv, la.ln1_full, N, C, qkvd);
        tp_sum(g->tp, part, g->scratch.dln);
        PROF(PROF_NORM_BWD, prof_bytes(4 * row_bytes),
             norm_backward(g->scratch.dres, g->G(w.ln1_w), g->G(w.ln1_b), g->scratch.norm_partial, g->scratch.dln, la.x, g->P(w.ln1_w),
                           la.ln1_mean, la.ln1_rstd, Nl, C, rms, g->stream));
        dp_params_done(g->dp, b, g->stream);
        if (reduce) grads_bucket_done(g, b);
    }
    if (!first) {  // d(x[l0]), sent back to the previous chunk's stage
        cudaCheck(cudaMemcpyAsync(dx, g->scratch.dres, (size_t)Nl * C * sizeof(floatX), cudaMemcpyDeviceToDevice, g->stream));
        return;
    }
    // dres = d(x[0]) = d(wte[token] + wpe[t]): this rank's vocabulary rows, from every position (gathered under SP)
    tp_gather(g->tp, g->scratch.dres, g->scratch.dres_full);
    floatX* dwpe = row_bias_grad(g->tp, g->G(t.wpe));
    PROF(PROF_EMB_BWD, prof_bytes(3.0 * N * C * sizeof(floatX)),
         embedding_backward(g->G(t.wte), positions_planned(g) ? nullptr : dwpe, g->scratch.dres_full, g->io.plan, N, T, C,
                            g->stream, g->v0, g->Vpl));
    if (positions_planned(g) && dwpe)  // dwpe[p] += the rows at position p: the same sums, grouped by position
        PROF(PROF_EMB_BWD, prof_bytes(2.0 * N * C * sizeof(floatX)),
             embedding_backward(dwpe, nullptr, g->scratch.dres_full, g->io.pos_plan, N, T, C, g->stream));
    if (reduce) grads_bucket_done(g, 0);
}

#ifdef TESTING
// Backward of one micro-batch after gpt_forward(inputs, targets), for test_gpt.cu's checks of a single
// micro-batch: uses the plan that forward uploaded, waits for the device and reads the micro-batch loss into
// g->io.loss. (Training goes through train_step.)
static void gpt_backward(GPT* g, const int32_t* inputs, double loss_scale) {
    const size_t N = (size_t)g->B * g->T;
    if (g->io.n_uploads < 1 || !g->io.uploads[0].has_targets || memcmp(inputs, g->io.h_upload, N * sizeof(int32_t)) != 0)
        die("gpt_backward: call gpt_forward with these inputs and their targets first");
    cudaCheck(cudaMemsetAsync(g->scratch.loss_sum, 0, sizeof(double), g->stream));
    gpt_backward_chunk(g, 0, loss_scale, 1.0, false);
    gpt_read_loss(g);
}
#endif

// ----------------------------------------------------------------------------------------------
// The optimizer step

// dst[lo, hi) = 0 for each range (lo, hi) = ranges[2r], ranges[2r + 1] of fewer than `below` elements (the larger
// ones are memset); a grid-stride loop over each range in turn
__global__ void __launch_bounds__(256) zero_ranges_kernel(floatX* dst, const size_t* ranges, int n_ranges, size_t below) {
    const size_t G = (size_t)gridDim.x * blockDim.x, j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (int r = 0; r < n_ranges; r++)
        if (ranges[2 * r + 1] - ranges[2 * r] < below)
            for (size_t i = ranges[2 * r] + j; i < ranges[2 * r + 1]; i += G) dst[i] = to_floatX(0.0f);
}

// A new step's gradients. No memset of them all: the first backward of each chunk writes its linear layers' weight
// gradients and the fp32 head_grad (GEMMs at beta 0, g->chunk_started), and the rest, which the backward adds to, is
// zeroed (g->grad_zero: embeddings, norms, biases, padding; every range under --fp8): a memset for each range of at
// least 64K elements (the embeddings; all of them under --fp8), one kernel for the small ones (norms, biases, padding:
// a few ranges a layer). At gpt3_1.3b that is 0.2 of the 2.6 GB of floatX gradients, and none of head_grad's 0.4 GB of
// fp32. The emulation's builds fill the gradients with NaN first, so that every test run shows a gradient left
// unwritten. The profile's class "grad zero".
static void gpt_zero_grad(GPT* g) {
    const size_t large = 1 << 16;  // elements
    const std::vector<size_t>& r = g->grad_zero_host;
    size_t zeroed = 0;
    for (size_t i = 0; i < r.size(); i += 2) zeroed += r[i + 1] - r[i];
    ProfScope prof(PROF_GRAD_ZERO, prof_bytes((double)zeroed * sizeof(floatX)));
#ifdef CUDA_EMU
    cudaCheck(cudaMemsetAsync(g->grads, 0xff, g->table.total * sizeof(floatX), g->stream));
    if (g->has_head) cudaCheck(cudaMemsetAsync(g->head_grad, 0xff, (size_t)g->Vpl * g->cfg.n_embd * 4, g->stream));
#endif
    for (size_t i = 0; i < r.size(); i += 2)
        if (r[i + 1] - r[i] >= large)
            cudaCheck(cudaMemsetAsync(g->grads + r[i], 0, (r[i + 1] - r[i]) * sizeof(floatX), g->stream));
    if (!r.empty()) zero_ranges_kernel<<<256, 256, 0, g->stream>>>(g->grads, g->grad_zero, (int)(r.size() / 2), large);
    cudaCheck(cudaGetLastError());
    std::fill(g->chunk_started.begin(), g->chunk_started.end(), 0);
}

// dst[i] = floatX(dst[i] + src[i]): the fp32 LM-head gradient joins the floatX gradients once per step
__global__ void add_f32_into_floatX_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_floatX(to_float(dst[i]) + src[i]);
}

// The fp32 LM-head gradient of the step joins the floatX gradients (once per step, after the last micro-batch).
static void gpt_fold_head_grad(GPT* g) {
    const size_t hn = (size_t)g->Vpl * g->cfg.n_embd;
    head_grad_finish(g);
    add_f32_into_floatX_kernel<<<(unsigned)ceil_div(hn, 256), 256, 0, g->stream>>>(g->G(g->head()), g->head_grad, hn);
    cudaCheck(cudaGetLastError());
}

// The step's pre-clip global gradient norm and clip coefficient into g->scratch.gnorm[GLOBAL_NORM_BLOCKS + 0, 1]: on one GPU
// over the floatX gradients, the head gradient first joining them; on several ranks over the fp32 gradients reduced
// over dp (dp_grad_norm, llmc/gpt/data_parallel.cuh). Only enqueues.
static void gpt_grad_norm(GPT* g, const TrainConfig& tc, double loss_scale) {
    float* out = g->scratch.gnorm + GLOBAL_NORM_BLOCKS;  // [norm, clip coefficient]
    // the bytes read: the fp32 reduced gradients this rank counts, or the floatX ones and the head's fp32 gradient folded in
    const double head = (double)g->Vpl * g->cfg.n_embd;
    ProfScope prof(PROF_GRAD_NORM, prof_bytes(g->dp.parallel ? 4.0 * g->dp.shard  // about P / dp per rank
                                                             : (double)g->table.total * sizeof(floatX) +
                                                                   head * (4 + 2 * sizeof(floatX))));
    if (g->dp.parallel) return dp_grad_norm(g->dp, g->world, g->stream, out, tc.grad_clip, 1.0 / loss_scale);
    gpt_fold_head_grad(g);
    global_norm(out, g->scratch.gnorm, g->grads, g->table.total, (float)tc.grad_clip, g->stream, (float)(1.0 / loss_scale));
}

// AdamW for 1-based update t with gpt_grad_norm's clip coefficient (one GPU: on every weight; data parallel: on the
// fp32 reduced gradients of what this rank updates), then the weights: all-gathered (ZeRO 1/2) or left in the shard
// for the next gathers (ZeRO 3). Only enqueues.
static void gpt_update(GPT* g, int t, double lr, const TrainConfig& tc) {
    const float* clip = g->scratch.gnorm + GLOBAL_NORM_BLOCKS + 1;
    AdamWHyper h{(float)lr, (float)tc.beta1, (float)tc.beta2, (float)tc.eps};
    // per element updated: master and both moments read and written, the gradient read, the weight written
    const double n = g->L.zero >= 1 ? (double)g->dp.shard : (double)g->table.total;
    const double grad = g->dp.parallel ? 4 : sizeof(floatX), moment = g->bf16_moments ? 2 : 4;
    PROF(PROF_ADAMW, prof_bytes(n * (8 + 4 * moment + grad + sizeof(floatX))), adamw_update(g->adam, h, t, clip, g->stream));
    dp_params_updated(g->dp, g->params, g->stream);
}

// ----------------------------------------------------------------------------------------------
// Pipeline parallel (llmc/gpt/pipeline.cuh runs the stage's schedule): each (micro-batch, chunk) in flight holds an
// activation slot s, the LayerActs of its chunk's layers, acts[s * slot_layers ...], bound to g->layers before the
// layer code runs.
static void pp_bind(GPT* g, int s, int chunk) {
    int l0, l1;
    bool first, last;
    chunk_span(g, chunk, &l0, &l1, &first, &last);
    for (int l = l0; l < l1; l++) g->layers[l] = g->acts[(size_t)s * g->pp.slot_layers + (l - l0)];
}

// This stage's schedule over the n_mb micro-batches uploaded into buffers 0 .. n_mb-1: training (backward, each
// micro-batch's loss scaled by `scale`, the first one's also by mb0 (llmc/run/guard.h's test hooks), the gradients by
// the loss scale S as well (llmc/loss_scale.h) and accumulated, not reduced) or forward only; after the forward of the
// last chunk of a micro-batch, head(mb) (validation: its loss). Only enqueues work, but for the groups' waits.
static void gpt_pipeline(GPT* g, int n_mb, bool backward, double scale, const std::function<void(int mb)>& head,
                         TestCorrupt mb0 = {}, double S = 1.0) {
    PpChunks fn;
    fn.forward = [&](int mb, int chunk, int s) {
        pp_bind(g, s, chunk);
        gpt_forward_chunk(g, mb, chunk, pp_out(g->pp, s));
    };
    fn.backward = [&](int mb, int chunk, int s) {
        pp_bind(g, s, chunk);
        gpt_backward_chunk(g, mb, S * scale * mb0.grad_of(mb), scale * mb0.loss_of(mb), false, chunk, pp_dout(g->pp, s));
    };
    fn.head = head;
    fn.input = [&](int s) { return g->acts[(size_t)s * g->pp.slot_layers].x; };
    pp_pipeline(g->pp, g->stream, n_mb, backward, fn);
}

// ----------------------------------------------------------------------------------------------
// One optimizer step over the micro-batches inputs/targets [accum][B*T] (data parallel: this rank's share of the
// accum * dp micro-batches; a pipeline stage runs its schedule over all of them, then reduces every bucket). The
// step's loss (the mean micro-batch loss over every rank) and pre-clip gradient norm come to the host before the
// update, so that the numerics guard (llmc/run/guard.h) can skip it: that read is the step's one host synchronisation,
// and the update is enqueued after it. The first micro-batch's loss and loss scale: mb0 (llmc/run/guard.h's test hooks;
// 1 and 1 otherwise). Returns the loss; *norm_out the norm, *verdict the guard's.
static double train_step(GPT* g, const std::vector<std::vector<int32_t>>& inputs,
                         const std::vector<std::vector<int32_t>>& targets, int step, const TrainConfig& tc, double lr,
                         const TrainState& st, TestCorrupt mb0, double* norm_out, GuardVerdict* verdict) {
    const int accum = (int)inputs.size();
    const double scale = 1.0 / ((double)accum * g->L.topo.dp);  // each micro-batch's share of the step's mean
    const double S = st.loss_scale.scale;  // the backward's loss scale (llmc/loss_scale.h): the gradients times S
    gpt_upload_reserve(g, accum);  // the previous step's synchronisation below has drained every copy
    gpt_zero_grad(g);
    cudaCheck(cudaMemsetAsync(g->scratch.loss_sum, 0, sizeof(double), g->stream));
    // The micro-batch loop only enqueues work: micro-batch a is prepared on the host (tokens, targets, the
    // embedding plan, into its own pinned upload buffer) while the device still runs a - 1; its uploads are
    // asynchronous copies from pinned memory and its loss is summed on the device.
    if (g->L.topo.pp > 1) {
        for (int a = 0; a < accum; a++) gpt_upload(g, a, inputs[a].data(), targets[a].data());
        gpt_pipeline(g, accum, true, scale, nullptr, mb0, S);
        for (int b = (int)g->dp.buckets.size() - 1; b >= 0; b--) grads_bucket_done(g, b);  // head, layers, embeddings
    } else {
        for (int a = 0; a < accum; a++) {
            gpt_upload(g, a, inputs[a].data(), targets[a].data());
            gpt_forward_chunk(g, a);
            gpt_backward_chunk(g, a, S * scale * mb0.grad_of(a), scale * mb0.loss_of(a),
                                g->dp.parallel && a == accum - 1);
        }
    }
    gpt_grad_norm(g, tc, S);  // the unscaled gradients' norm, and 1 / S in the optimizer's gradient scale
    cudaCheck(cudaMemcpyAsync(&g->io.h_readback->norm, g->scratch.gnorm + GLOBAL_NORM_BLOCKS, sizeof(float), cudaMemcpyDeviceToHost,
                              g->stream));
    double loss = gpt_read_loss(g);  // waits for the stream
    if (g->dp.parallel) {  // the last stage's losses, one tp rank each, summed over dp
        if (!layout_counts_loss(g->L)) loss = 0;
        comm_host_sum(g->world, &loss, 1);
    }
    *norm_out = g->io.h_readback->norm;
    *verdict = guard_verdict(tc, st, loss, *norm_out);  // the same on every rank: the loss and norm are summed over dp
    const bool update = *verdict == GUARD_UPDATE;
    if (update) gpt_update(g, guard_adam_step(st, step), lr, tc);
    if (g->fp8.opt.recipe != FP8_NONE) {
        // delayed: the next step's scales (a skipped step drops its amaxes)
        PROF(PROF_FP8_SCALING, ProfWork(), fp8_step_end(g->fp8, g->stream, update));
        if (update)  // the updated weights' scales, copies
            PROF(PROF_FP8_SCALING, ProfWork(),
                 fp8_weights_update(g->fp8, g->stream, g->table, g->dp.buckets, g->params));
    }
    return loss;
}

// ----------------------------------------------------------------------------------------------
// Sampling: the forward over a window in row 0 of the batch (the other rows hold token 0; causal
// attention keeps them apart), the logits of the last prompt position, sampled on the host.

// generate's forward (llmc/run/sampling.h): *logits [V] = row 0's logits at position len - 1 after the forward over
// window [B*T], read back to the host as fp32.
static const float* gpt_last_logits(GPT* g, const int32_t* window, int len, std::vector<float>* logits) {
    const ModelConfig& c = g->cfg;
    std::vector<floatX> row(c.padded_vocab);
    gpt_forward(g, window, nullptr);
    gpt_logits(g, len - 1, 1);
    cudaCheck(cudaMemcpyAsync(row.data(), g->scratch.logits, row.size() * sizeof(floatX), cudaMemcpyDeviceToHost, g->stream));
    comm_wait_stream(g->world, g->stream, "the sampling forward");
    logits->resize(c.vocab_size);
    for (int v = 0; v < c.vocab_size; v++) (*logits)[v] = to_float(row[v]);
    return logits->data();
}

// ----------------------------------------------------------------------------------------------
// The run

// Forward only over the batches in, tg [m][B*T] (validation and --eval through run_forward_split,
// llmc/run/train_loop.h): rows [m*B] each row's summed loss and means [m] each batch's mean loss over its targets, on
// the ranks whose losses count. A pipeline takes them as micro-batches (GPT_FORWARD_MAX at a time), one stage one
// after another. --fp8 delayed: these forwards' amaxes are no part of the next step's scales.
static const int GPT_FORWARD_MAX = 32;
static void gpt_forward_batches(GPT* g, const Batches& in, const Batches& tg, double* rows, double* means) {
    const int m = (int)in.size(), B = g->B, T = g->T;
    std::vector<float> tok((size_t)B * T);
    auto take = [&](int j) {  // after gpt_loss: g->scratch.losses holds batch j's per-token losses
        means[j] = g->io.loss;
        if (!layout_counts_loss(g->L)) return;
        cudaCheck(cudaMemcpyAsync(tok.data(), g->scratch.losses, tok.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                  g->stream));
        comm_wait_stream(g->world, g->stream, "an evaluation forward");
        for (int b = 0; b < B; b++) {
            double s = 0;
            for (int i = 0; i < T; i++) s += tok[(size_t)b * T + i];
            rows[(size_t)j * B + b] = s;
        }
    };
    if (g->L.topo.pp > 1) {
        comm_wait_stream(g->world, g->stream, "the work before an evaluation");  // no queued copy reads the upload
                                                                                  // buffers rewritten here
        gpt_upload_reserve(g, m);
        for (int j = 0; j < m; j++) gpt_upload(g, j, in[j].data(), tg[j].data());
        gpt_pipeline(g, m, false, 0.0, [&](int mb) {
            gpt_loss(g);
            take(mb);
        });
    } else {
        for (int j = 0; j < m; j++) {
            gpt_forward(g, in[j].data(), tg[j].data());
            gpt_loss(g);
            take(j);
        }
    }
    fp8_step_end(g->fp8, g->stream, false);
}

// Dense bf16 peak of the device from its name (docs/design.md section 7; fp16's is the same); 0 when unknown, and in
// the fp32 test build (no MFU printed).
static double device_peak_flops(const char* name) {
    if (std::string(PRECISION_NAME) == "fp32") return 0.0;
    std::string n = name;
    if (n.find("H100") != std::string::npos || n.find("H200") != std::string::npos || n.find("H800") != std::string::npos)
        return 989e12;
    if (n.find("A100") != std::string::npos || n.find("A800") != std::string::npos) return 312e12;
    return 0.0;
}

// Nominal memory bandwidth of the device from its name, bytes/s (the step profile's ceiling of memory-bound kernels
// without --ceilings): H200 4.8 TB/s, H100 SXM (HBM3) 3.35, H100 PCIe 2.0, A100 2.0 (80 GB; 40 GB 1.555); 0 when
// unknown. Nominal, as the vendor states it: a copy reaches about 88% of it (bench/results, dev/probe/ceilings.cu).
static double device_peak_bandwidth(const char* name) {
    std::string n = name;
    auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
    if (has("H200")) return 4.8e12;
    if (has("H100") || has("H800")) return has("PCIe") ? 2.0e12 : 3.35e12;
    if (has("A100") || has("A800")) return has("40GB") ? 1.555e12 : 2.0e12;
    return 0.0;
}

// Training FLOPs per token the GPU executes: the model FLOPs (llmc/flops.h) plus the recomputed forward
// work: the layers' matmuls (2 per weight) and attention (4 * qd * T per layer) under full, attention
// under selective (its share of 12 * L * qd * T in the model FLOPs is the forward's third); act adds none.
static double hardware_flops_per_token(const ModelConfig& c, int T, Recompute r) {
    const double attn_fwd = 4.0 * c.n_layer * (double)cfg_q_dim(c) * T;
    const double layer_mm = 2.0 * (double)(matmul_weight_count(c) - (int64_t)c.vocab_size * c.n_embd);
    const double extra = r == RECOMPUTE_FULL ? layer_mm + attn_fwd : r == RECOMPUTE_SELECTIVE ? attn_fwd : 0.0;
    return model_flops_per_token(c, T) + extra;
}

// Device memory in use now (every process), for the peak-memory figure.
static double device_used_bytes() {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return (double)(total_b - free_b);
}

// The modes that run on the host and exit 0, no GPU needed: --print-config, --export-init, --plan (plan_or_pick) and
// --estimate-memory. Returns whether one ran.
static bool run_host_mode(const ModelConfig& mc, TrainConfig* tc, CudaOptions* opt) {
    if (!opt->print_config.empty()) {
        write_text(opt->print_config, config_to_json(mc) + "\n");
        printf("wrote the config of %s to %s\n", mc.name.c_str(), opt->print_config.c_str());
        return true;
    }
    if (!tc->export_init.empty()) {
        hf_export_init(tc->export_init, mc, build_param_table(mc), tc->seed, tc->init_from);
        return true;
    }
    check_shapes(mc, tc->B, tc->T);
    check_tp_shapes(mc, tc->tp, opt->fp8.recipe != FP8_NONE);
    if (opt->fp8.recipe != FP8_NONE) check_fp8_tokens(tc->B, tc->T);
    int recompute = (int)opt->recompute;
    if (tc->plan) plan_or_pick(mc, tc, &recompute, cuda_plan_space(*opt), launch_info().world, launch_info().rank);  // exits
    if (opt->estimate_gib > 0) {  // per rank of --dp x --tp x --pp ranks (default 1): the first stage's
        const int B = tc->B, T = tc->T;
        const int dp = std::max(1, tc->dp), world = dp * tc->tp * tc->pp;
        if (tc->total_batch == 0) tc->total_batch = (long)B * T * dp;
        Layout L;
        const std::string err = layout_make(world, 0, mc, *tc, tc->total_batch, &L);
        if (!err.empty()) die("%s", err.c_str());
        const int n_mb = (int)(tc->total_batch / ((long)B * T * dp));
        const MemoryEstimate est = estimate_memory(mc, B, T, opt->recompute, opt->bf16_moments, L, n_mb, opt->fp8);
        const double avail = opt->estimate_gib * 1024.0 * 1024.0 * 1024.0;
        print_memory_estimate(est, opt->recompute, L, avail);
        require_memory(est, opt->recompute, opt->bf16_moments, L, avail);
        printf("fits\n");
        return true;
    }
    return false;
}

// This rank among the ranks, its GPU and its part of the layout: the ranks start (one: no NCCL communicator), the
// device is checked, the planner picks the layout when no layout flag is given (every rank computes the same choice,
// for the smallest free memory of the ranks, or --gpu-mem), the groups' communicators are made, and the memory
// estimate is printed and checked against the free device memory. NCCL allocates a communicator's buffers at its
// first operations: every communicator does one of each kind (comm_warm_up) before free memory is read, the world's
// before the plan (which leaves --nccl-mem to each communicator, the world's included: it is added back to what
// the world left free), the groups' before the estimate is checked, so a layout whose buffers do not fit stops here
// with the plan's message, not inside NCCL in the first step.
struct RankSetup {
    Comm world;
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;  // device memory free before anything is allocated, NCCL's buffers taken
    Layout layout;
    Comms comms;
    int accum = 1;                   // micro-batches per step on this rank
    MemoryEstimate est;
};
static void rank_setup(RankSetup* r, int* argc, char*** argv, ModelConfig* mc, TrainConfig* tc, CudaOptions* opt) {
    r->world = comm_init(argc, argv);
    const Comm& world = r->world;
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&r->prop, dev));
    if (r->prop.major < 8)
        die("%s has compute capability %d.%d; train_gpt needs 8.0 or newer (bf16 tensor cores, cp.async)", r->prop.name,
            r->prop.major, r->prop.minor);
    size_t free_start = 0;
    cudaCheck(cudaMemGetInfo(&free_start, &r->total_b));
    comm_warm_up(world, false);
    cudaCheck(cudaMemGetInfo(&r->free_b, &r->total_b));
    if (!tc->layout_given && !opt->recompute_given && world.size > 1 && tc->gpu_mem_gib <= 0) {
        double neg_free = -(double)r->free_b;
        comm_host_max(world, &neg_free, 1);
        tc->gpu_mem_gib = -neg_free / 1073741824.0 + opt->nccl_gib;
        if (world.rank == 0)
            printf("no layout flag on %d ranks: planning for the smallest free device memory of the ranks, %.2f GiB "
                   "once the world's communicator is made, + --nccl-mem %g for it (--gpu-mem sets the figure; any of "
                   "--dp --zero -b --recompute fixes the layout)\n", world.size, -neg_free / 1073741824.0,
                   opt->nccl_gib);
    }
    int recompute = (int)opt->recompute;
    plan_or_pick(*mc, tc, &recompute, cuda_plan_space(*opt), world.size, world.rank);
    opt->recompute = (Recompute)recompute;
    config_finalize(*mc, tc->tp);  // the planner may have picked tensor parallelism: the vocabulary padded for it
    check_tp_shapes(*mc, tc->tp, opt->fp8.recipe != FP8_NONE);
    check_shapes(*mc, tc->B, tc->T);  // the planner may have picked -b
    if (opt->fp8.recipe != FP8_NONE) check_fp8_tokens(tc->B, tc->T);
    if (opt->fp8.recipe != FP8_NONE) fp8_require_device();  // compute capability 8.9+, before any allocation

    const int B = tc->B, T = tc->T;
    if (tc->total_batch == 0) tc->total_batch = (long)B * T * (world.size / std::max(1, tc->tp * tc->pp));  // B*T per dp rank
    r->layout = make_layout(world, *mc, *tc, tc->total_batch, &r->comms);
    const Layout& L = r->layout;
    // the groups' first operations (a group equal to the world is the world's communicator, already warm but for the
    // pipeline's sends and receives)
    for (const Comm* c : {&r->comms.dp, &r->comms.tp, &r->comms.pp, &r->comms.emb})
        if (c->size < world.size || c == &r->comms.pp) comm_warm_up(*c, c == &r->comms.pp);
    cudaCheck(cudaMemGetInfo(&r->free_b, &r->total_b));
    r->accum = (int)(tc->total_batch / ((long)B * T * L.topo.dp));
    r->est = estimate_memory(*mc, B, T, opt->recompute, opt->bf16_moments, L, r->accum, opt->fp8);
    // --recompute auto (the default) on one rank: the cheapest mode whose estimate fits what is free, none, then act,
    // selective, then full (with more ranks and no layout flag the layout planner chose it above; with layout flags none)
    // (what is free, or --gpu-mem where that is less)
    std::string auto_why;
    const double avail = tc->gpu_mem_gib > 0 ? std::min((double)r->free_b, tc->gpu_mem_gib * 1073741824.0) : (double)r->free_b;
    if (!opt->recompute_given && world.size == 1) {
        for (Recompute m : {RECOMPUTE_NONE, RECOMPUTE_ACT, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL}) {
            opt->recompute = m;
            r->est = estimate_memory(*mc, B, T, m, opt->bf16_moments, L, r->accum, opt->fp8);
            if (r->est.total() <= avail || m == RECOMPUTE_FULL) break;  // full when nothing fits: the check below
            auto_why += layout_fmt("%s needs %.3f GiB, ", recompute_name(m), r->est.total() / 1073741824.0);
        }
    }
    if (world.rank == 0) {
        if (!auto_why.empty())
            printf("--recompute auto: %s (%s%s %.3f GiB; %.3f GiB are free%s)\n", recompute_name(opt->recompute),
                   auto_why.c_str(), recompute_name(opt->recompute), r->est.total() / 1073741824.0,
                   avail / 1073741824.0, tc->gpu_mem_gib > 0 ? " or --gpu-mem's" : "");
        printf("device: %s (compute capability %d.%d, %.1f GiB, %.1f GiB free)\n", r->prop.name, r->prop.major,
               r->prop.minor, r->total_b / 1073741824.0, r->free_b / 1073741824.0);
        if (world.size > 1)
            printf("NCCL: %d communicators on rank 0; since the world's was made, the groups and their first operations "
                   "took %.3f GiB (--nccl-mem leaves %g GiB to each in the plan)\n", layout_communicators(L),
                   ((double)free_start - (double)r->free_b) / 1073741824.0, opt->nccl_gib);
        print_memory_estimate(r->est, opt->recompute, L, (double)r->total_b);
    }
    require_memory(r->est, opt->recompute, opt->bf16_moments, L, (double)r->free_b);
}

// What the run is, printed once by rank 0 before the first step.
static void print_run(const GPT& g, const ModelConfig& mc, const TrainConfig& tc, const CudaOptions& opt,
                      const RankSetup& r, const RunFiles& files, int64_t n_params, double hw_flops) {
    const Layout& L = r.layout;
    print_config_table(mc, n_params, tc.B, tc.T, r.accum, L.topo.dp, tc.steps, tc.lr, lr_schedule_name(tc.schedule),
                       files.train.desc);
    printf("%s weights and activations, fp32 master weights, %s AdamW moments, --recompute %s; allocated %.2f GiB\n",
           PRECISION_NAME, opt.bf16_moments ? "bf16" : "fp32", recompute_name(opt.recompute), g.mem.allocated / 1073741824.0);
    if (opt.fp8.recipe == FP8_DELAYED)
        printf("fp8 GEMMs in the layers (E4M3 inputs and weights, E5M2 output gradients): delayed scaling, amax "
               "history %d, margin %d; MFU below is against the bf16 peak\n", opt.fp8.history, opt.fp8.margin);
    else if (opt.fp8.recipe == FP8_CURRENT)
        printf("fp8 GEMMs in the layers (E4M3 inputs and weights, E5M2 output gradients): current scaling, margin %d; "
               "MFU below is against the bf16 peak\n", opt.fp8.margin);
    if (gelu_fused(&g))
        printf("--gelu-fusion on: GELU in cuBLASLt's epilogues, %s\n", gelu_fused_forward(&g) ?
               "fc1's forward (GELU_AUX_BIAS) and fc2's input gradient (DGELU_BGRAD)" :
               "fc2's input gradient only (DGELU_BGRAD; --recompute selective recomputes the forward's act unfused)");
    else if (opt.gelu_fusion)
        printf("--gelu-fusion on changes nothing here: %s\n", mc.mlp != MLP_GELU ? "the MLP is not GELU" : "--fp8's GEMMs keep the separate GELU kernels");
    printf("%s", documents_describe(tc.docs).c_str());
    if (r.world.size > 1 || L.zero > 0)
        printf("ranks: %d = pp %d x dp %d x tp %d%s, vpp %d, ZeRO %d; %d micro-batch chunks in flight at most on this "
               "stage; gradients reduced in fp32 over dp in %d buckets\n", r.world.size, L.topo.pp, L.topo.dp,
               L.topo.tp, L.sp ? " (sp)" : "", L.vpp, L.zero, g.pp.n_slots, (int)g.dp.buckets.size());
    printf("hardware FLOPs per token %.4g (model %.4g + recompute %.1f%%); MFU below counts model FLOPs\n", hw_flops,
           model_flops_per_token(mc, tc.T), 100.0 * (hw_flops / model_flops_per_token(mc, tc.T) - 1.0));
}

#ifndef TESTING
int main(int argc, char** argv) {
    // flags; the host-only modes; every file the run reads
    CudaOptions opt;
    std::vector<char*> rest = parse_cuda_flags(argc, argv, &opt);
    ModelConfig mc;
    TrainConfig tc;
#ifdef ENABLE_FP16
    tc.loss_scaling.dynamic = true;  // fp16 trains under the dynamic loss scale unless --loss-scale says otherwise (Megatron's --fp16)
#endif
    parse_args((int)rest.size(), rest.data(), &mc, &tc);
    config_finalize(mc, tc.tp);  // the vocabulary padded to a multiple of 128 * tp
    comm_set_timeout(tc.comm_timeout);  // a collective stuck longer than this ends every rank (--comm-timeout)
    comm_set_io_timeout(tc.io_timeout); // the same for a wait on another rank's disk work (--io-timeout)
    stop_signals_install();             // SIGTERM / SIGINT: finish the step, checkpoint, exit 0 (llmc/run/signals.h)
    if (opt.attention_cudnn && mc.pos == POS_ALIBI)
        die("--attention cudnn: cuDNN's attention graph has no ALiBi (--pos alibi); run with --attention flash");
    if (opt.attention_cudnn && tc.docs.reset_mask)
        die("--attention cudnn: cuDNN's attention graph here is causal over the whole row, without documents "
            "(--reset-attention-mask 1); run with --attention flash");
    const GemmAlgos gemm_algos = gemm_algos_parse(opt.gemm_algos);  // FILE read now: its errors before the model
    if (run_host_mode(mc, &tc, &opt)) return 0;
    if (opt.profile > tc.steps - 1)
        die("flag --profile %d: the profile times the steps after the first, and -x %d leaves %d: give at most %d, or "
            "more steps", opt.profile, tc.steps, tc.steps - 1, tc.steps - 1);
    profile_open(&g_prof, opt.profile, opt.ceilings, opt.fp8.recipe != FP8_NONE);  // --ceilings read and checked here
    RunFiles files;
    run_files_open(&files, mc, tc, launch_info().world);

    // the ranks, this rank's GPU and layout; the model, its weights
    RankSetup rs;
    rank_setup(&rs, &argc, &argv, &mc, &tc, &opt);
    const Comm& world = rs.world;
    const bool rank0 = world.rank == 0;
    const Layout& layout = rs.layout;
    GPT g;
    gpt_build(&g, mc, tc.B, tc.T, opt.recompute, opt.bf16_moments, (float)tc.weight_decay, &layout, &rs.comms, rs.accum,
              opt.fp8);
#ifdef CUDNN_ATTENTION
    g.attention_cudnn = opt.attention_cudnn;  // its plans built now (cuDNN compiles their kernels: seconds)
    if (g.attention_cudnn) attention_cudnn_prepare(g.B, g.T, g.Hl, g.KVl, mc.head_dim, rank0);
#endif
#ifndef ENABLE_FP32
    g.attention_wgmma = opt.attention_wgmma;  // where a version cannot run, the launcher runs version 3 (forward), 5
    if (g.attention_wgmma) {
        const bool has = wgmma_supported();  // its probe launch now, on every rank, not inside the first step
        if (rank0)
            printf("attention: --attention wgmma: forward version %d, backward version %d of llmc/attention.cuh%s\n",
                   attention_forward_wgmma_fits(g.T, mc.head_dim) ? 4 : 3,
                   attention_backward_wgmma_fits(mc.head_dim) ? 7 : 5,
                   has ? "" : " (the code this GPU runs has no wgmma: not sm_90a)");
    }
#endif
    g.gelu_fusion = opt.gelu_fusion;
    g.mm.gemm_algos = gemm_algos;
    if (rank0) gemm_algos_check_device(gemm_algos, rs.prop.name);
    g.docs = tc.docs;
    // --fp8: every fp8 GEMM kind at this model's shapes runs and is right, or the run stops here (scratch: dfc1 [N,F1])
    fp8_gemm_check(g.fp8, g.stream, &g.mm, g.table, g.grads, g.B * g.T, g.scratch.dfc1,
                   (size_t)g.B * g.T * (g.cfg.mlp == MLP_SWIGLU ? 2 : 1) * g.Fl);
    const ParamTable table = build_param_table(mc);  // the whole model: files are read and written per tensor
    TrainState state;
    state.rng = rng_sampling_seed(tc.seed);
    gpt_load(&g, table, tc, files.resume_dir, &state);
    if (opt.profile > tc.steps - state.step - 1)
        die("flag --profile %d: the run resumes at step %d of -x %d, which leaves %d steps after its first", opt.profile,
            state.step, tc.steps, std::max(0, tc.steps - state.step - 1));
    run_out_dir_make(tc, rank0);
    const int64_t n_params = param_count(table);
    const double hw_flops = hardware_flops_per_token(mc, tc.T, opt.recompute);
    if (rank0) print_run(g, mc, tc, opt, rs, files, n_params, hw_flops);
    Logger lg;
    run_logger_open(&lg, rank0, mc, tc, !files.resume_dir.empty(), world.size /* throughput per GPU */,
                    device_peak_flops(rs.prop.name),
                    tc.gpu_mem_gib > 0 ? tc.gpu_mem_gib * 1073741824.0 : (double)rs.prop.totalGlobalMem);
    g_prof.peak_flops = lg.peak_flops;  // --profile's nominal ceilings (without --ceilings)
    g_prof.peak_bw = device_peak_bandwidth(rs.prop.name);

    // the run (llmc/run/train_loop.h) with this trainer's step, forward, sampling, checkpoint and export
    Trainer tr;
    tr.B = g.B;
    tr.T = g.T;
    tr.step = [&](const Batches& inputs, const Batches& targets, int step, double lr, const TestCorrupt& mb0,
                  double* norm, GuardVerdict* verdict) {
        return train_step(&g, inputs, targets, step, tc, lr, state, mb0, norm, verdict);
    };
    tr.forward = [&](const Batches& in, const Batches& tg, double* rows, double* means) {
        gpt_forward_batches(&g, in, tg, rows, means);
    };
    tr.forward_max = GPT_FORWARD_MAX;
    std::vector<float> logits;
    tr.last_logits = [&](const int32_t* window, int len) {
        const float* row = gpt_last_logits(&g, window, len, &logits);
        fp8_step_end(g.fp8, g.stream, false);  // --fp8 delayed: sampling's amaxes are no part of the next step's
        return row;
    };
    tr.sample_B = g.B;
    tr.save = [&]() { gpt_save_checkpoint(&g, table, tc, state); };
    tr.export_weights = [&](const std::string& path) { gpt_export(&g, table, path); };
    tr.step_begin = [&](int i) { profile_step_begin(i, g.stream); };  // --profile: the N steps after the first
    tr.step_end = [&](double t0) { return profile_step_end(t0); };     // a profiled step first waits for its last event
    double peak_used = 0;
    tr.step_done = [&](int i, int step) {
        if (opt.profile > 0 && i == opt.profile) profile_print(&g_prof, world, lg, hw_flops);
        if (i == 0 && rank0 && g.mm.gemm_algos.mode != GEMM_ALGOS_HEURISTIC) gemm_algos_print(&g.mm);
        if (i == 0 && g.mm.gemm_algos.mode == GEMM_ALGOS_TUNE && !tc.out_dir.empty()) {  // for --gemm-algos FILE
            // every rank's choices (a pipeline's stages run different GEMMs), gathered: a collective
            const std::vector<MatmulRecord> all = gemm_algos_gather(world, world.rank, gemm_algos_records(&g.mm));
            if (rank0) {
                gemm_algos_write(all, tc.out_dir + "/gemm_algos.txt", rs.prop.name);
                printf("GEMM algorithms of %d GEMMs written to %s/gemm_algos.txt (replay: --gemm-algos FILE)\n",
                       (int)all.size(), tc.out_dir.c_str());
            }
        }
        if (i == 0) {  // every rank's bytes by kind: allocated, beside the estimate
            const std::vector<MemoryRow> rows = memory_rows_gather(world, world.rank, memory_row(&g, rs.est, layout));
            if (rank0 && world.size > 1) print_memory_rows(rows.data(), world.size);  // allocated (estimate)
            if (rank0) log_memory(&lg, rows.data(), world.size, step);
        }
        // device memory in use (cudaMemGetInfo, a call into the driver): after the first two steps, by which every
        // buffer of the run, NCCL's and cuBLASLt's exist, then every 100 steps and once at the end (peak_bytes)
        if (i >= 2 && i % 100 != 0) return;
        const double used = device_used_bytes();
        if (used > peak_used || i == 0) {
            peak_used = std::max(peak_used, used);
            if (i == 0 && rank0)
                printf("memory: %.2f GiB allocated by train_gpt (estimate %.2f, %.2f with the reserve), %.2f GiB in "
                       "use on the device\n", g.mem.allocated / 1073741824.0, rs.est.allocations() / 1073741824.0,
                       rs.est.total() / 1073741824.0, used / 1073741824.0);
        }
    };
    tr.peak_bytes = [&]() {
        double peak_all = std::max(peak_used, device_used_bytes());  // the largest over the ranks
        comm_host_max(world, &peak_all, 1);
        if (rank0) printf("peak device memory in use: %.2f GiB\n", peak_all / 1073741824.0);
        return peak_all;
    };
    run_train(world, tr, layout, mc, tc, rs.accum, &files, &state, &lg, n_params);
    gpt_free(&g);
    comm_finalize();
    return 0;
}
#endif
