// llmc/gpt/fp8_linear.cuh: the fp8 path of the CUDA trainer (--fp8 delayed|current; docs/fp8.md): the four linear
// layers of every layer through fp8 GEMMs, their scaling states and the agreement of those states over the ranks.
// Part of train_gpt.cu's one translation unit (not a standalone header): included by train_gpt.cu after struct GPT,
// whose fields it reads and writes.
#pragma once

#include "llmc/fp8.cuh"
#include "llmc/matmul_fp8.cuh"
#include "llmc/run/checkpoint.h"

// fp8 (--fp8 delayed|current; docs/fp8.md). The four linear layers of every layer (QKV, attention-out, fc1 / gate-up,
// fc2) multiply fp8 operands with llmc/matmul_fp8.cuh's cuBLASLt GEMMs, bf16 out; everything else stays as it was.
//   forward   out = x8 w8^T: the input cast to E4M3 into x8, the step's fp8 copy of the weight
//   backward  dinp = dy8 wt8 (the output gradient cast to E5M2, the weight's transposed copy); dW += dyt8^T x8t, the
//             transposes of the output gradient (cast with it) and of the input (cast again from the kept bf16 input:
//             the same values with the same scale, so nothing fp8 is kept between forward and backward)
//   weights   cast once per step after the optimizer (fp8_weights_update), scaled by their own amax under both recipes:
//             the cast is once a step, so the exact amax costs one read of the weights (TransformerEngine's delayed
//             recipe runs the weights through the amax history too). ZeRO 3 holds no whole weight: the scales come from
//             the shards (their amaxes maxed over dp), and each layer is cast after its gather (fp8_cast_weights).
//   inputs, output gradients   delayed: every cast uses the scale of the last update and records its amax; after the
//             step the amaxes are maxed over tp and dp (the dp ranks saw the step's other micro-batches: one process's
//             amax is their max) and fp8_update_delayed sets the next step's scales. current: each cast measures its
//             tensor's amax first, maxed over tp where the tensor is a tensor-parallel slice (the attention output and
//             the MLP activation, the QKV and fc1 output gradients), so every rank uses the one scale of the whole
//             tensor, as one process would.
// A step the numerics guard skips leaves the fp8 state as it was (its amaxes are dropped), like the weights.

// The ranks sharing tensors agree on their amaxes amax[n]: the max over tp (on the compute stream, as every tp
// collective) and, with over_dp, over dp (on dp.comm.stream, ordered by events).
static void fp8_agree(GPT* g, float* amax, size_t n, bool over_tp, bool over_dp) {
    if (over_tp && g->tp.n > 1) PROF(PROF_TP_COMM, prof_bytes(4.0 * n), comm_all_reduce_max(g->tp.comm, amax, n));
    if (!over_dp || g->L.topo.dp == 1) return;
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->dp.comm.stream, g->ev_compute, 0));
    comm_all_reduce_max(g->dp.comm, amax, n);
    cudaCheck(cudaEventRecord(g->ev_comm, g->dp.comm.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0)));
}

// q[rows, cols] (or null) and qt[cols, rows] (or null) = inp[rows, cols] in fp8 with the scale of tensor i of m under
// the run's recipe: delayed, the step's scale, the amax recorded; current, inp's own amax (maxed over tp when inp is a
// tensor-parallel slice), then its scale.
template <typename F8>
static void fp8_cast_tensor(GPT* g, F8* q, F8* qt, const floatX* inp, int rows, int cols, Fp8Meta* m, int i,
                            bool tp_slice) {
    Fp8Recipe mode = g->fp8.opt.recipe;
    if (mode == FP8_CURRENT) {
        cudaCheck(cudaMemsetAsync(fp8_amax(m, i), 0, sizeof(float), g->stream));
        fp8_measure_amax(g->stream, inp, (size_t)rows * cols, m, i);
        fp8_agree(g, fp8_amax(m, i), 1, tp_slice, false);
        fp8_scale_from_measured(g->stream, m, i, 1);
        mode = FP8_NONE;  // the scale as just set
    }
    if (qt) fp8_cast_transpose(g->stream, q, qt, inp, rows, cols, m, i, mode);
    else fp8_cast(g->stream, q, inp, (size_t)rows * cols, m, i, mode);
}

// The fp8 copy of linear layer k's weight of layer l [OC,IC], or its transpose [IC,OC].
static __nv_fp8_e4m3* fp8_weight(const GPT* g, int l, int k, bool transposed) {
    return g->fp8.w8 + (transposed ? g->fp8.w8_half : 0) + g->fp8.w8_off[(size_t)LINEARS_PER_LAYER * l + k];
}

// Below ZeRO 3, the weights and their transposes into w8 with the scales of fp8_weights_update. ZeRO 3: layer l's
// only (its weights just gathered; transposed: the backward's copies, else the forward's). Scales as they are.
static void fp8_cast_weights(GPT* g, int layer, bool transposed) {
    const bool z3 = g->L.zero >= 3;
    for (int l = z3 ? layer : 0; l < (z3 ? layer + 1 : g->cfg.n_layer); l++) {
        const ParamTable::Block& b = g->table.blocks[l];
        for (int k = 0; k < LINEARS_PER_LAYER && b.qkv_w >= 0; k++) {
            const int w = linear_weight(b, k), i = LINEARS_PER_LAYER * l + k;
            const ParamSpec& s = g->table.specs[w];
            __nv_fp8_e4m3 *q = fp8_weight(g, l, k, false), *qt = fp8_weight(g, l, k, true);
            if (z3 && !transposed) fp8_cast(g->stream, q, g->P(w), s.numel(), &g->fp8.w, i, FP8_NONE);
            else fp8_cast_transpose(g->stream, z3 ? nullptr : q, qt, g->P(w), (int)s.rows, (int)s.cols, &g->fp8.w, i,
                                    FP8_NONE);
        }
    }
}

// After every update of the weights, and after they are loaded: each linear weight's amax (this rank's tp slice; under
// ZeRO 3 its parts in this rank's shard, maxed over dp too), maxed over tp, its scale (current scaling's rule), then
// below ZeRO 3 the step's fp8 copies. Only enqueues.
static void fp8_weights_update(GPT* g) {
    if (g->fp8.opt.recipe == FP8_NONE) return;
    Fp8Meta* m = &g->fp8.w;
    const bool z3 = g->L.zero >= 3;
    cudaCheck(cudaMemsetAsync(fp8_amax(m, 0), 0, (size_t)m->n * sizeof(float), g->stream));
    std::vector<int> index(g->table.specs.size(), -1);  // spec -> its tensor in the scaling state
    for (int l = 0; l < g->cfg.n_layer; l++)
        for (int k = 0; k < LINEARS_PER_LAYER && g->table.blocks[l].qkv_w >= 0; k++)
            index[linear_weight(g->table.blocks[l], k)] = LINEARS_PER_LAYER * l + k;
    const std::vector<ZeroPart> parts = zero_parts(g->table, g->dp.buckets, g->L.topo.dp, g->L.topo.dp_rank, !z3);
    for (const ZeroPart& p : parts)
        if (index[p.spec] >= 0)
            fp8_measure_amax(g->stream, g->params + p.flat.lo - (z3 ? p.shift : 0), p.flat.size(), m, index[p.spec]);
    fp8_agree(g, fp8_amax(m, 0), m->n, true, z3);
    fp8_scale_from_measured(g->stream, m, 0, m->n);
    if (!z3) fp8_cast_weights(g, -1, false);
}

// After a step's backward: delayed scaling's new scales of the inputs and output gradients from the step's amaxes,
// agreed over tp and dp; a step the guard skipped (updated false) drops its amaxes, and so do validation and sampling
// (their forwards are no part of training). Current scaling keeps nothing.
static void fp8_step_end(GPT* g, bool updated) {
    if (g->fp8.opt.recipe != FP8_DELAYED) return;
    for (Fp8Meta* m : {&g->fp8.x, &g->fp8.dy}) {
        if (!updated) {
            cudaCheck(cudaMemsetAsync(fp8_amax(m, 0), 0, (size_t)m->n * sizeof(float), g->stream));
            continue;
        }
        fp8_agree(g, fp8_amax(m, 0), m->n, true, true);
        fp8_update_delayed(g->stream, m);
    }
}

// out[N,OC] = inp[N,IC] W^T (+ bias) of linear layer k of layer l in fp8: the input cast to E4M3 times the fp8 weight
// (the inputs of attention-out and fc2, row-parallel, are tensor-parallel slices).
static void fp8_linear_forward(GPT* g, int l, int k, floatX* out, const floatX* inp, const floatX* bias, int N, int IC,
                               int OC) {
    const int i = LINEARS_PER_LAYER * l + k;
    fp8_cast_tensor(g, g->fp8.x8, (__nv_fp8_e4m3*)nullptr, inp, N, IC, &g->fp8.x, i,
                    k == LINEAR_ATTN_OUT || k == LINEAR_FC2);
    matmul_fp8_forward(&g->mm, g->stream, out, g->fp8.x8, fp8_gemm_scale(&g->fp8.x, i), fp8_weight(g, l, k, false),
                       fp8_gemm_scale(&g->fp8.w, i), bias, N, IC, OC);
}

// dinp[N,IC] = dout[N,OC] W and dW += dout^T inp (dbias += column sums of dout, when given) of linear layer k of
// layer l in fp8: the output gradient cast to E5M2 with its transpose, and the input cast again, transposed.
static void fp8_linear_backward(GPT* g, int l, int k, floatX* dinp, floatX* dbias, const floatX* dout, const floatX* inp,
                                int N, int IC, int OC) {
    const int w = linear_weight(g->table.blocks[l], k), i = LINEARS_PER_LAYER * l + k;
    {   // the profile's dgrad: the output gradient's casts (used by both GEMMs) and the input gradient
        ProfScope prof(prof_linear(k, PROF_DGRAD), prof_gemm(IC, N, OC));
        // the output gradients of QKV and fc1 (column-parallel) are tp slices, as the inputs of attention-out and fc2
        fp8_cast_tensor(g, g->fp8.dy8, g->fp8.dyt8, dout, N, OC, &g->fp8.dy, i, k == LINEAR_QKV || k == LINEAR_FC1);
        matmul_fp8_backward_input(&g->mm, g->stream, dinp, g->fp8.dy8, fp8_gemm_scale(&g->fp8.dy, i),
                                  fp8_weight(g, l, k, true), fp8_gemm_scale(&g->fp8.w, i), N, IC, OC);
    }
    ProfScope prof(prof_linear(k, PROF_WGRAD), prof_gemm(IC, OC, N));  // the input's cast and the weight gradient
    fp8_cast_tensor(g, (__nv_fp8_e4m3*)nullptr, g->fp8.x8, inp, N, IC, &g->fp8.x, i,
                    k == LINEAR_ATTN_OUT || k == LINEAR_FC2);
    matmul_fp8_backward_weight(&g->mm, g->stream, g->G(w), dbias, dout, g->fp8.dyt8, fp8_gemm_scale(&g->fp8.dy, i),
                               g->fp8.x8, fp8_gemm_scale(&g->fp8.x, i), N, IC, OC);
}

// Values of a scaling state of n tensors (v: fp8_meta_download's, column i = tensor i) over the ranks of c: the largest
// and the smallest of each value among the ranks that hold tensor i (this stage's layers). Into *hi the largest (-inf
// where no rank holds the tensor); returns whether they are equal, i.e. every rank holds the same values.
static bool fp8_same_on_ranks(const GPT* g, const Comm& c, const std::vector<float>& v, int n, std::vector<double>* hi) {
    std::vector<double> neg_lo(v.size());
    hi->resize(v.size());
    for (size_t e = 0; e < v.size(); e++) {
        const bool mine = g->fp8.w8_off[e % n] != SIZE_MAX;
        (*hi)[e] = mine ? (double)v[e] : -INFINITY;
        neg_lo[e] = mine ? -(double)v[e] : -INFINITY;
    }
    comm_host_max(c, hi->data(), hi->size());
    comm_host_max(c, neg_lo.data(), neg_lo.size());
    for (size_t e = 0; e < v.size(); e++)
        if ((*hi)[e] != -INFINITY && (*hi)[e] != -neg_lo[e]) return false;
    return true;
}

// At a checkpoint, every rank: that the ranks sharing a tensor use the same scales (what fp8_agree is for; a difference
// is a bug and stops the run): the weights' states over every rank, and the inputs' and output gradients' over every
// rank under delayed scaling, over tp under current scaling (there the dp ranks' last casts were of other micro-batches).
// Returns the delayed-scaling state for the checkpoint, layout-independent (Fp8State, llmc/run/checkpoint.h): whole-model
// columns, each pipeline stage giving its layers' (every layer is on a stage); empty under
// current scaling (nothing carries over) and without fp8.
static Fp8State fp8_state_gather(GPT* g) {
    Fp8State st;
    if (g->fp8.opt.recipe == FP8_NONE) return st;
    cudaCheck(cudaStreamSynchronize(g->stream));
    const bool delayed = g->fp8.opt.recipe == FP8_DELAYED;
    const char* names[3] = {"weights'", "GEMM inputs'", "output gradients'"};
    const Fp8Meta* metas[3] = {&g->fp8.w, &g->fp8.x, &g->fp8.dy};
    for (int k = 0; k < 3; k++) {
        std::vector<double> hi;
        const Comm& c = k == 0 || delayed ? g->world : g->tp.comm;
        if (!fp8_same_on_ranks(g, c, fp8_meta_download(metas[k]), metas[k]->n, &hi))
            die("fp8: the %s scaling state differs between the ranks sharing its tensors (%s group)", names[k],
                k == 0 || delayed ? "world" : "tp");
        if (k > 0 && delayed) (k == 1 ? st.x : st.dy).assign(hi.begin(), hi.end());
    }
    if (delayed) {
        st.history = g->fp8.x.history_len;
        st.pos = g->fp8.x.pos;
    }
    return st;
}

// A checkpoint's delayed-scaling state into the scaling states, when the run scales delayed with the same history;
// otherwise they keep scale 1 and a fresh history (rank 0 says so). Returns whether it was taken.
static bool fp8_state_set(GPT* g, const Fp8State& st) {
    if (g->fp8.opt.recipe != FP8_DELAYED || st.history != g->fp8.x.history_len) return false;
    fp8_meta_upload(&g->fp8.x, st.x, st.pos);
    fp8_meta_upload(&g->fp8.dy, st.dy, st.pos);
    return true;
}
