// llmc/gpt/fp8_linear.cuh: the fp8 path of the CUDA trainer (--fp8 delayed|current; docs/fp8.md): the four linear
// layers of every layer through fp8 GEMMs, their scaling states and the agreement of those states over the ranks.
// Part of train_gpt.cu's one translation unit (not a standalone header): included by train_gpt.cu after struct GPT,
// whose fields it reads and writes.
#pragma once

#include <cmath>
#include <type_traits>
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

// --fp8's start-up check, after gpt_build and before the weights are read (gpt_load casts them into w8 afterwards):
// every fp8 GEMM kind of the steps (forward E4M3 x E4M3 with the layer's bias; input gradient E5M2 x E4M3; weight
// gradient E5M2 x E4M3 accumulated into the gradient) at the shapes of each linear layer of this rank's first layer,
// through the steps' own calls and fp8 buffers, on operands patterned from {-1, -0.5, 0, 0.5, 1} (exact in E4M3 and
// E5M2), with the steps' scale slots set to 2 (inputs), 4 (weights) and 1/8 (output gradients) for the check and
// restored after it: the three kinds then scale by 8, 1/2 and 1/4, so a scale left out shows. Each result is sampled at 64 elements against the host's exact product: a
// wrong algorithm is off by the size of the product itself, while a right one is within the output's bf16 rounding
// (2^-8 relative) and an accumulation bound of 2^-8 of sum |a b| (fast accumulation keeps fewer bits of its partial
// sums than fp32). A GEMM that cuBLASLt refuses, or that computes a wrong product, stops every rank here with a message
// naming it, before any data is read and before step 1. The first call of each GEMM also settles its algorithm
// (llmc/matmul.cuh, matmul_settle), so the steps reuse what was checked. The gradients are left zero.
static void fp8_gemm_check(GPT* g) {
    if (g->fp8.opt.recipe == FP8_NONE) return;
    int l = 0;  // this rank's first layer (a pipeline stage holds some)
    while (l < g->cfg.n_layer && g->fp8.w8_off[(size_t)LINEARS_PER_LAYER * l] == SIZE_MAX) l++;
    if (l == g->cfg.n_layer) return;
    const ParamTable::Block& b = g->table.blocks[l];
    const int N = g->B * g->T;
    const char* names[LINEARS_PER_LAYER] = {"qkv", "attn_out", "fc1", "fc2"};
    const int biases[LINEARS_PER_LAYER] = {b.qkv_b, b.attn_out_b, b.fc1_b, b.fc2_b};
    // the outputs of the forward [N, OC] and the input gradient [N, IC]: the fc1 gradient's scratch [N, F1] when it
    // is large enough (it is for every preset), else an allocation of its own
    size_t out_len = 0, max_oc = 0;
    for (int k = 0; k < LINEARS_PER_LAYER; k++) {
        const ParamSpec& s = g->table.specs[linear_weight(b, k)];
        out_len = std::max(out_len, (size_t)N * std::max(s.rows, s.cols));
        max_oc = std::max(max_oc, (size_t)s.rows);
    }
    const size_t F1 = (size_t)(g->cfg.mlp == MLP_SWIGLU ? 2 : 1) * g->Fl;
    floatX *out = g->scratch.dfc1, *own = nullptr, *bias = nullptr;
    if (out_len > (size_t)N * F1) {
        cudaCheck(cudaMalloc(&own, out_len * sizeof(floatX)));
        out = own;
    }
    cudaCheck(cudaMalloc(&bias, max_oc * sizeof(floatX)));

    // operand values in halves: -2..2 (times 0.5), a hash of the index and the operand's salt
    auto halves = [](size_t n, uint32_t salt) {
        std::vector<int8_t> v(n);
        for (size_t i = 0; i < n; i++) {
            uint32_t h = (uint32_t)i * 2654435761u ^ salt * 2246822519u;
            h ^= h >> 15;
            h *= 2654435761u;
            v[i] = (int8_t)((h >> 13) % 5) - 2;
        }
        return v;
    };
    auto upload = [](auto* dst, const std::vector<int8_t>& v) {
        using F8 = std::remove_pointer_t<decltype(dst)>;
        std::vector<F8> h(v.size());
        for (size_t i = 0; i < v.size(); i++) h[i] = F8(0.5f * v[i]);
        cudaCheck(cudaMemcpy(dst, h.data(), h.size() * sizeof(F8), cudaMemcpyHostToDevice));
    };
    auto scale_of = [](const float* slot) {
        float s;
        cudaCheck(cudaMemcpy(&s, slot, sizeof(float), cudaMemcpyDeviceToHost));
        return (double)s;
    };
    auto set_scale = [](float* slot, float v) { cudaCheck(cudaMemcpy(slot, &v, sizeof(float), cudaMemcpyHostToDevice)); };
    // D[r, c] = s * sum_p X[r, p] Y[c, p] (+ bias[c]), X [R, K] and Y [C, K] row-major, sampled against d (row-major
    // [R, C] on the device); returns the worst |error| / bound, or a negative value where a sample is not finite
    auto sampled = [&](const floatX* d, const std::vector<int8_t>& X, const std::vector<int8_t>& Y,
                       const std::vector<int8_t>* bias_h, double s, int R, int C, int K) {
        double worst = 0;
        uint64_t state = 0x9E3779B97F4A7C15ull;
        for (int t = 0; t < 64; t++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            const int r = (int)((state >> 33) % (uint64_t)R), c = (int)((state >> 13) % (uint64_t)C);
            int64_t dot = 0, abs_dot = 0;  // in quarters
            for (int p = 0; p < K; p++) {
                const int64_t q = (int64_t)X[(size_t)r * K + p] * Y[(size_t)c * K + p];
                dot += q;
                abs_dot += q < 0 ? -q : q;
            }
            const double want = s * 0.25 * (double)dot + (bias_h ? 0.5 * (*bias_h)[c] : 0.0);
            floatX got_x;
            cudaCheck(cudaMemcpy(&got_x, d + (size_t)r * C + c, sizeof(floatX), cudaMemcpyDeviceToHost));
            const double got = (double)to_float(got_x);
            if (!std::isfinite(got)) return -1.0;
            const double bound = ldexp(std::fabs(want) + s * 0.25 * (double)abs_dot, -8) + 1e-30;
            worst = std::max(worst, std::fabs(got - want) / bound);
        }
        return worst;
    };

    std::vector<std::string> failed;
    double worst_all = 0;
    int ran = 0;
    g->mm.fp8_check = true;
    for (int k = 0; k < LINEARS_PER_LAYER; k++) {
        const int w = linear_weight(b, k), i = LINEARS_PER_LAYER * l + k;
        const ParamSpec& sp = g->table.specs[w];
        const int OC = (int)sp.rows, IC = (int)sp.cols;
        float *sx = fp8_gemm_scale(&g->fp8.x, i), *sw = fp8_gemm_scale(&g->fp8.w, i), *sdy = fp8_gemm_scale(&g->fp8.dy, i);
        const double kept[3] = {scale_of(sx), scale_of(sw), scale_of(sdy)};
        set_scale(sx, 2.0f);
        set_scale(sw, 4.0f);
        set_scale(sdy, 0.125f);
        const std::vector<int8_t> x = halves((size_t)N * IC, 1), wv = halves((size_t)OC * IC, 2),
                                  wt = halves((size_t)IC * OC, 3), dy = halves((size_t)N * OC, 4),
                                  dyt = halves((size_t)OC * N, 5), xt = halves((size_t)IC * N, 6),
                                  bh = halves((size_t)OC, 7);
        upload(g->fp8.x8, x);
        upload(fp8_weight(g, l, k, false), wv);
        upload(fp8_weight(g, l, k, true), wt);
        upload(g->fp8.dy8, dy);
        upload(g->fp8.dyt8, dyt);
        const bool with_bias = biases[k] >= 0;
        if (with_bias) {
            std::vector<floatX> h(OC);
            for (int c = 0; c < OC; c++) h[c] = to_floatX(0.5f * bh[c]);
            cudaCheck(cudaMemcpy(bias, h.data(), OC * sizeof(floatX), cudaMemcpyHostToDevice));
        }
        for (int kind = 0; kind < 3; kind++) {
            g->mm.fp8_refused = false;
            std::string words;
            double worst = 0;
            if (kind == 0) {  // out[N, OC] = x8[N, IC] w8[OC, IC]^T (+ bias)
                words = "forward of " + std::string(names[k]) + " (" +
                        fp8_gemm_words(OC, N, IC, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_FLOATX, true, with_bias) + ")";
                matmul_fp8_forward(&g->mm, g->stream, out, g->fp8.x8, sx, fp8_weight(g, l, k, false), sw,
                                   with_bias ? bias : nullptr, N, IC, OC);
                cudaCheck(cudaStreamSynchronize(g->stream));
                if (!g->mm.fp8_refused)
                    worst = sampled(out, x, wv, with_bias ? &bh : nullptr, scale_of(sx) * scale_of(sw), N, OC, IC);
            } else if (kind == 1) {  // dinp[N, IC] = dy8[N, OC] wt8[IC, OC]^T
                words = "input gradient of " + std::string(names[k]) + " (" +
                        fp8_gemm_words(IC, N, OC, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_FLOATX, false, false) + ")";
                matmul_fp8_backward_input(&g->mm, g->stream, out, g->fp8.dy8, sdy, fp8_weight(g, l, k, true), sw, N,
                                          IC, OC);
                cudaCheck(cudaStreamSynchronize(g->stream));
                if (!g->mm.fp8_refused) worst = sampled(out, dy, wt, nullptr, scale_of(sdy) * scale_of(sw), N, IC, OC);
            } else {  // dW[OC, IC] += dyt8[OC, N] xt8[IC, N]^T, into the zeroed gradient
                words = "weight gradient of " + std::string(names[k]) + " (" +
                        fp8_gemm_words(IC, OC, N, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, cublaslt_type(g->G(w)), false, false) +
                        ", accumulating)";
                upload(g->fp8.x8, xt);  // the backward's x8 holds the input transposed
                cudaCheck(cudaMemset(g->G(w), 0, sp.numel() * sizeof(floatX)));
                matmul_fp8_backward_weight(&g->mm, g->stream, g->G(w), (floatX*)nullptr, (const floatX*)nullptr,
                                           g->fp8.dyt8, sdy, g->fp8.x8, sx, N, IC, OC);
                cudaCheck(cudaStreamSynchronize(g->stream));
                if (!g->mm.fp8_refused) worst = sampled(g->G(w), dyt, xt, nullptr, scale_of(sdy) * scale_of(sx), OC, IC, N);
                cudaCheck(cudaMemset(g->G(w), 0, sp.numel() * sizeof(floatX)));
            }
            if (g->mm.fp8_refused) failed.push_back(words + ": refused: " + g->mm.why);
            else if (worst < 0) failed.push_back(words + ": ran, and wrote a value that is not finite");
            else if (worst > 1) {
                char s[96];
                snprintf(s, sizeof(s), ": ran, and computes a wrong product (sampled error %.3g times the bound)", worst);
                failed.push_back(words + s);
            } else {
                worst_all = std::max(worst_all, worst);
                ran++;
            }
        }
        set_scale(sx, (float)kept[0]);
        set_scale(sw, (float)kept[1]);
        set_scale(sdy, (float)kept[2]);
    }
    g->mm.fp8_check = false;
    g->mm.fp8_refused = false;
    cudaCheck(cudaFree(own));
    cudaCheck(cudaFree(bias));

    double bad = failed.empty() ? 0.0 : 1.0;  // every rank stops together
    comm_host_max(g->world, &bad, 1);
    if (!failed.empty()) {
        fflush(stdout);
        fprintf(stderr, "fp8 start-up check (rank %d, layer %d's shapes, N = B*T = %d): %zu of %d fp8 GEMMs failed:\n",
                g->world.rank, l, N, failed.size(), 3 * LINEARS_PER_LAYER);
        for (const std::string& f : failed) fprintf(stderr, "  %s\n", f.c_str());
        die("--fp8: cuBLASLt cannot run %zu of this model's %d fp8 GEMMs on this GPU (the fp8 start-up check, before "
            "step 1; the first: %s); train without --fp8, or run dev/probe/fp8_gemm to pin the cause (docs/fp8.md)",
            failed.size(), 3 * LINEARS_PER_LAYER, failed[0].c_str());
    }
    if (bad != 0) die("--fp8: the fp8 start-up check failed on another rank (its message names the GEMMs)");
    if (g->world.rank == 0)
        printf("fp8 start-up check: the %d fp8 GEMMs of layer %d's shapes (forward, input and weight gradient of qkv, "
               "attn_out, fc1, fc2) ran; 64 samples each within %.2f of the bound\n", ran, l, worst_all);
}
