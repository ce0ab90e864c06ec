// llmc/gpt/fp8_linear.cuh: the fp8 path of the CUDA trainer (--fp8 delayed|current; docs/fp8.md): the four linear
// layers of every layer through fp8 GEMMs, their scaling states and the agreement of those states over the ranks.
// A header that stands alone (tests/t_headers.sh compiles it by itself). Its state is struct Fp8Linears: planned by
// fp8_linears_plan (the fp8 weight copies' layout, no allocation: the memory estimate plans without building), built
// and freed by fp8_linears_build and fp8_linears_free. Its buffers (w8, x8, dy8, dyt8) and its scaling states are
// rows of the trainer's buffer table (llmc/gpt/memory.cuh), so that the estimate counts them. Every function takes
// the state first, then what it works on: the compute stream, the MatmulContext, the shapes, the buffers, the
// parameter table, and the weights where a ZeRO-3 layer's live in its gather buffer (an Fp8WeightsFn of the caller).
// The groups the state agrees over, tp, dp and the world, are copies of the caller's communicators kept at build,
// with two events of its own that order the max over dp against the compute stream: which ranks share a tensor is
// fixed for the run, and agreeing is part of what a cast (current scaling) or the end of a step does, so the callers,
// the linear layers among them, pass no group. On one GPU every group is one rank: fp8_agree returns at once, and
// what remains are the casts, the fp8 GEMMs and the scale updates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>
#include <cuda_fp8.h>
#include "llmc/cuda_common.cuh"
#include "llmc/precision.cuh"
#include "llmc/utils.h"
#include "llmc/param_table.h"
#include "llmc/matmul.cuh"
#include "llmc/fp8.cuh"
#include "llmc/matmul_fp8.cuh"
#include "llmc/profile.cuh"  // PROF, ProfScope: the fp8 work in the step profile's classes
#include "llmc/parallel/zero.h"
#ifdef USE_NCCL
#include "llmc/parallel/comm_nccl.cuh"
#else
#include "llmc/parallel/comm_one_rank.cuh"  // built without NCCL: one rank
#endif
#include "llmc/run/checkpoint.h"  // Fp8State
#include "llmc/gpt/options.cuh"   // Fp8Options

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

// The state of the fp8 path. The four linear layers k of layer l (LINEAR_QKV ...) are tensor i = 4 l + k (l of the
// whole model) of each scaling state.
struct Fp8Linears {
    Fp8Options opt;             // --fp8, --fp8-history, --fp8-margin
    Fp8Meta w;                  // E4M3: the weights, scaled by their own amax after every update
    Fp8Meta x;                  // E4M3: the GEMM inputs (ln1, attention output, ln2, MLP activation)
    Fp8Meta dy;                 // E5M2: the GEMM output gradients
    __nv_fp8_e4m3* w8 = nullptr;  // ZeRO < 3: [2, Pw] the step's fp8 weights, then their transposes; ZeRO 3: [2, one
                                  // layer's] cast after each gather
    size_t w8_half = 0;           // Pw (ZeRO 3: the largest layer's linear weights): where the transposes start
    std::vector<size_t> w8_off;   // [4 L] tensor i's offset in each half (SIZE_MAX: not on this stage)
    bool zero3 = false;           // ZeRO 3: no rank holds a whole weight (w8 holds one layer's copies)
    __nv_fp8_e4m3* x8 = nullptr;  // [N, max IC] a GEMM input (forward), or [max IC, N] its transpose (backward)
    __nv_fp8_e5m2* dy8 = nullptr; // [N, max OC] an output gradient
    __nv_fp8_e5m2* dyt8 = nullptr;  // [max OC, N] its transpose
    Comm world, tp, dp;         // the groups it agrees over (fp8_linears_build); tp's collectives on the compute stream
    cudaEvent_t ev_amax = nullptr;    // dp > 1: recorded on the compute stream before the amaxes' max over dp
    cudaEvent_t ev_agreed = nullptr;  // dp > 1: recorded on dp.stream after it
};

// The weights of tensor spec, where the caller keeps them (train_gpt.cu: GPT::P; ZeRO 3: in its gather buffer).
typedef std::function<const floatX*(int spec)> Fp8WeightsFn;

// The model's layers (4 L tensors of each scaling state).
static int fp8_layers(const Fp8Linears& f) { return (int)(f.w8_off.size() / LINEARS_PER_LAYER); }

// The plan, before anything is allocated: opt, and where the fp8 copies of this rank's linear weights sit in w8 (t:
// its stage's table; n_layer of the whole model): one after the other, or under ZeRO 3 each layer's from 0 (w8 holds
// one layer). w8_half sizes the buffer table's w8 row.
static void fp8_linears_plan(Fp8Linears& f, const Fp8Options& opt, const ParamTable& t, int n_layer, bool zero3) {
    f.opt = opt;
    f.zero3 = zero3;
    f.w8_off.assign((size_t)LINEARS_PER_LAYER * n_layer, SIZE_MAX);
    f.w8_half = 0;
    for (int l = 0; l < n_layer && opt.recipe != FP8_NONE; l++) {
        const ParamTable::Block& b = t.blocks[l];
        if (b.qkv_w < 0) continue;  // another stage's layer
        size_t at_l = zero3 ? 0 : f.w8_half;
        for (int k = 0; k < LINEARS_PER_LAYER; k++) {
            f.w8_off[(size_t)LINEARS_PER_LAYER * l + k] = at_l;
            at_l += t.specs[linear_weight(b, k)].numel();
        }
        f.w8_half = std::max(f.w8_half, at_l);
    }
}

// After fp8_linears_plan, with the buffer table's pointers carved: the three scaling states at scale 1 (the buffer
// table's three counted fp8 rows), the groups it agrees over (tp's collectives already moved to the compute stream)
// and, with more than one dp rank, its events.
static void fp8_linears_build(Fp8Linears& f, const Comm& world, const Comm& tp, const Comm& dp) {
    f.world = world;
    f.tp = tp;
    f.dp = dp;
    if (f.opt.recipe == FP8_NONE) return;
    const int n = (int)f.w8_off.size();
    fp8_meta_init(&f.w, FP8_E4M3, n, 1, f.opt.margin);
    fp8_meta_init(&f.x, FP8_E4M3, n, f.opt.meta_history(), f.opt.margin);
    fp8_meta_init(&f.dy, FP8_E5M2, n, f.opt.meta_history(), f.opt.margin);
    if (dp.size > 1)
        for (cudaEvent_t* e : {&f.ev_amax, &f.ev_agreed})
            cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
}

// What fp8_linears_build made (the buffers go with the buffer table's block).
static void fp8_linears_free(Fp8Linears& f) {
    if (f.opt.recipe == FP8_NONE) return;
    for (Fp8Meta* m : {&f.w, &f.x, &f.dy}) fp8_meta_free(m);
    for (cudaEvent_t e : {f.ev_amax, f.ev_agreed})
        if (e) cudaCheck(cudaEventDestroy(e));
}

// The ranks sharing tensors agree on their amaxes amax[n]: the max over tp (on the compute stream, as every tp
// collective) and, with over_dp, over dp (on dp.stream, ordered by the state's events). One GPU: nothing to agree on.
static void fp8_agree(Fp8Linears& f, cudaStream_t stream, float* amax, size_t n, bool over_tp, bool over_dp) {
    if (f.tp.size == 1 && f.dp.size == 1) return;
    if (over_tp && f.tp.size > 1) PROF(PROF_TP_COMM, prof_bytes(4.0 * n), comm_all_reduce_max(f.tp, amax, n));
    if (!over_dp || f.dp.size == 1) return;
    cudaCheck(cudaEventRecord(f.ev_amax, stream));
    cudaCheck(cudaStreamWaitEvent(f.dp.stream, f.ev_amax, 0));
    comm_all_reduce_max(f.dp, amax, n);
    cudaCheck(cudaEventRecord(f.ev_agreed, f.dp.stream));
    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, f.ev_agreed, 0)));
}

// q[rows, cols] (or null) and qt[cols, rows] (or null) = inp[rows, cols] in fp8 with the scale of tensor i of m under
// the run's recipe: delayed, the step's scale, the amax recorded; current, inp's own amax (maxed over tp when inp is a
// tensor-parallel slice), then its scale.
template <typename F8>
static void fp8_cast_tensor(Fp8Linears& f, cudaStream_t stream, F8* q, F8* qt, const floatX* inp, int rows, int cols,
                            Fp8Meta* m, int i, bool tp_slice) {
    Fp8Recipe mode = f.opt.recipe;
    if (mode == FP8_CURRENT) {
        cudaCheck(cudaMemsetAsync(fp8_amax(m, i), 0, sizeof(float), stream));
        fp8_measure_amax(stream, inp, (size_t)rows * cols, m, i);
        fp8_agree(f, stream, fp8_amax(m, i), 1, tp_slice, false);
        fp8_scale_from_measured(stream, m, i, 1);
        mode = FP8_NONE;  // the scale as just set
    }
    if (qt) fp8_cast_transpose(stream, q, qt, inp, rows, cols, m, i, mode);
    else fp8_cast(stream, q, inp, (size_t)rows * cols, m, i, mode);
}

// The fp8 copy of linear layer k's weight of layer l [OC,IC], or its transpose [IC,OC].
static __nv_fp8_e4m3* fp8_weight(const Fp8Linears& f, int l, int k, bool transposed) {
    return f.w8 + (transposed ? f.w8_half : 0) + f.w8_off[(size_t)LINEARS_PER_LAYER * l + k];
}

// Below ZeRO 3 (layer -1), every layer's weights and their transposes into w8 with the scales of fp8_weights_update.
// ZeRO 3: layer l's only (its weights just gathered; transposed: the backward's copies, else the forward's). Scales
// as they are. t: this rank's table; weights: where each tensor's weights are.
static void fp8_cast_weights(Fp8Linears& f, cudaStream_t stream, const ParamTable& t, int layer, bool transposed,
                             const Fp8WeightsFn& weights) {
    const bool z3 = f.zero3;
    for (int l = z3 ? layer : 0; l < (z3 ? layer + 1 : fp8_layers(f)); l++) {
        const ParamTable::Block& b = t.blocks[l];
        for (int k = 0; k < LINEARS_PER_LAYER && b.qkv_w >= 0; k++) {
            const int w = linear_weight(b, k), i = LINEARS_PER_LAYER * l + k;
            const ParamSpec& s = t.specs[w];
            __nv_fp8_e4m3 *q = fp8_weight(f, l, k, false), *qt = fp8_weight(f, l, k, true);
            if (z3 && !transposed) fp8_cast(stream, q, weights(w), s.numel(), &f.w, i, FP8_NONE);
            else fp8_cast_transpose(stream, z3 ? nullptr : q, qt, weights(w), (int)s.rows, (int)s.cols, &f.w, i,
                                    FP8_NONE);
        }
    }
}

// After every update of the weights, and after they are loaded: each linear weight's amax (this rank's tp slice; under
// ZeRO 3 its parts in this rank's shard, maxed over dp too), maxed over tp, its scale (current scaling's rule), then
// below ZeRO 3 the step's fp8 copies. t: this rank's table, buckets its ZeRO buckets (llmc/parallel/zero.h), params
// its weights (every tensor at its table offset; ZeRO 3: this rank's shard). Only enqueues.
static void fp8_weights_update(Fp8Linears& f, cudaStream_t stream, const ParamTable& t,
                               const std::vector<Bucket>& buckets, const floatX* params) {
    if (f.opt.recipe == FP8_NONE) return;
    Fp8Meta* m = &f.w;
    const bool z3 = f.zero3;
    cudaCheck(cudaMemsetAsync(fp8_amax(m, 0), 0, (size_t)m->n * sizeof(float), stream));
    std::vector<int> index(t.specs.size(), -1);  // spec -> its tensor in the scaling state
    for (int l = 0; l < fp8_layers(f); l++)
        for (int k = 0; k < LINEARS_PER_LAYER && t.blocks[l].qkv_w >= 0; k++)
            index[linear_weight(t.blocks[l], k)] = LINEARS_PER_LAYER * l + k;
    const std::vector<ZeroPart> parts = zero_parts(t, buckets, f.dp.size, f.dp.rank, !z3);
    for (const ZeroPart& p : parts)
        if (index[p.spec] >= 0)
            fp8_measure_amax(stream, params + p.flat.lo - (z3 ? p.shift : 0), p.flat.size(), m, index[p.spec]);
    fp8_agree(f, stream, fp8_amax(m, 0), m->n, true, z3);
    fp8_scale_from_measured(stream, m, 0, m->n);
    if (!z3) fp8_cast_weights(f, stream, t, -1, false, [&](int w) { return params + t.specs[w].offset; });
}

// After a step's backward: delayed scaling's new scales of the inputs and output gradients from the step's amaxes,
// agreed over tp and dp; a step the guard skipped (updated false) drops its amaxes, and so do validation and sampling
// (their forwards are no part of training). Current scaling keeps nothing.
static void fp8_step_end(Fp8Linears& f, cudaStream_t stream, bool updated) {
    if (f.opt.recipe != FP8_DELAYED) return;
    for (Fp8Meta* m : {&f.x, &f.dy}) {
        if (!updated) {
            cudaCheck(cudaMemsetAsync(fp8_amax(m, 0), 0, (size_t)m->n * sizeof(float), stream));
            continue;
        }
        fp8_agree(f, stream, fp8_amax(m, 0), m->n, true, true);
        fp8_update_delayed(stream, m);
    }
}

// out[N,OC] = inp[N,IC] W^T (+ bias) of linear layer k of layer l in fp8: the input cast to E4M3 times the fp8 weight
// (the inputs of attention-out and fc2, row-parallel, are tensor-parallel slices).
static void fp8_linear_forward(Fp8Linears& f, cudaStream_t stream, MatmulContext* mm, int l, int k, floatX* out,
                               const floatX* inp, const floatX* bias, int N, int IC, int OC) {
    const int i = LINEARS_PER_LAYER * l + k;
    fp8_cast_tensor(f, stream, f.x8, (__nv_fp8_e4m3*)nullptr, inp, N, IC, &f.x, i,
                    k == LINEAR_ATTN_OUT || k == LINEAR_FC2);
    matmul_fp8_forward(mm, stream, out, f.x8, fp8_gemm_scale(&f.x, i), fp8_weight(f, l, k, false),
                       fp8_gemm_scale(&f.w, i), bias, N, IC, OC);
}

// dinp[N,IC] = dout[N,OC] W and dweight[OC,IC] += dout^T inp (dbias += column sums of dout, when given) of linear layer
// k of layer l in fp8: the output gradient cast to E5M2 with its transpose, and the input cast again, transposed.
static void fp8_linear_backward(Fp8Linears& f, cudaStream_t stream, MatmulContext* mm, int l, int k, floatX* dinp,
                                floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp, int N, int IC,
                                int OC) {
    const int i = LINEARS_PER_LAYER * l + k;
    {   // the profile's dgrad: the output gradient's casts (used by both GEMMs) and the input gradient
        ProfScope prof(prof_linear(k, PROF_DGRAD), prof_gemm(IC, N, OC));
        // the output gradients of QKV and fc1 (column-parallel) are tp slices, as the inputs of attention-out and fc2
        fp8_cast_tensor(f, stream, f.dy8, f.dyt8, dout, N, OC, &f.dy, i, k == LINEAR_QKV || k == LINEAR_FC1);
        matmul_fp8_backward_input(mm, stream, dinp, f.dy8, fp8_gemm_scale(&f.dy, i),
                                  fp8_weight(f, l, k, true), fp8_gemm_scale(&f.w, i), N, IC, OC);
    }
    ProfScope prof(prof_linear(k, PROF_WGRAD), prof_gemm(IC, OC, N));  // the input's cast and the weight gradient
    fp8_cast_tensor(f, stream, (__nv_fp8_e4m3*)nullptr, f.x8, inp, N, IC, &f.x, i,
                    k == LINEAR_ATTN_OUT || k == LINEAR_FC2);
    matmul_fp8_backward_weight(mm, stream, dweight, dbias, dout, f.dyt8, fp8_gemm_scale(&f.dy, i),
                               f.x8, fp8_gemm_scale(&f.x, i), N, IC, OC);
}

// Values of a scaling state of n tensors (v: fp8_meta_download's, column i = tensor i) over the ranks of c: the largest
// and the smallest of each value among the ranks that hold tensor i (this stage's layers). Into *hi the largest (-inf
// where no rank holds the tensor); returns whether they are equal, i.e. every rank holds the same values.
static bool fp8_same_on_ranks(const Fp8Linears& f, const Comm& c, const std::vector<float>& v, int n,
                              std::vector<double>* hi) {
    std::vector<double> neg_lo(v.size());
    hi->resize(v.size());
    for (size_t e = 0; e < v.size(); e++) {
        const bool mine = f.w8_off[e % n] != SIZE_MAX;
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
static Fp8State fp8_state_gather(const Fp8Linears& f, cudaStream_t stream) {
    Fp8State st;
    if (f.opt.recipe == FP8_NONE) return st;
    comm_wait_stream(f.world, stream, "the work before fp8's scaling state is gathered");
    const bool delayed = f.opt.recipe == FP8_DELAYED;
    const char* names[3] = {"weights'", "GEMM inputs'", "output gradients'"};
    const Fp8Meta* metas[3] = {&f.w, &f.x, &f.dy};
    for (int k = 0; k < 3; k++) {
        std::vector<double> hi;
        const Comm& c = k == 0 || delayed ? f.world : f.tp;
        if (!fp8_same_on_ranks(f, c, fp8_meta_download(metas[k]), metas[k]->n, &hi))
            die("fp8: the %s scaling state differs between the ranks sharing its tensors (%s group)", names[k],
                k == 0 || delayed ? "world" : "tp");
        if (k > 0 && delayed) (k == 1 ? st.x : st.dy).assign(hi.begin(), hi.end());
    }
    if (delayed) {
        st.history = f.x.history_len;
        st.pos = f.x.pos;
    }
    return st;
}

// A checkpoint's delayed-scaling state into the scaling states, when the run scales delayed with the same history;
// otherwise they keep scale 1 and a fresh history (rank 0 says so). Returns whether it was taken.
static bool fp8_state_set(Fp8Linears& f, const Fp8State& st) {
    if (f.opt.recipe != FP8_DELAYED || st.history != f.x.history_len) return false;
    fp8_meta_upload(&f.x, st.x, st.pos);
    fp8_meta_upload(&f.dy, st.dy, st.pos);
    return true;
}

// --fp8's start-up check, after fp8_linears_build and before the weights are read (fp8_weights_update casts them into
// w8 afterwards): every fp8 GEMM kind of the steps (forward E4M3 x E4M3 with the layer's bias; input gradient E5M2 x
// E4M3; weight gradient E5M2 x E4M3 accumulated into the gradient) at the shapes of each linear layer of this rank's
// first layer, through the steps' own calls and fp8 buffers, on operands patterned from {-1, -0.5, 0, 0.5, 1} (exact in
// E4M3 and E5M2), with the steps' scale slots set to 2 (inputs), 4 (weights) and 1/8 (output gradients) for the check
// and restored after it: the three kinds then scale by 8, 1/2 and 1/4, so a scale left out shows. Each result is
// sampled at 64 elements against the host's exact product: a wrong algorithm is off by the size of the product itself,
// while a right one is within the output's bf16 rounding (2^-8 relative) and an accumulation bound of 2^-8 of sum |a b|
// (fast accumulation keeps fewer bits of its partial sums than fp32). A GEMM that cuBLASLt refuses, or that computes a
// wrong product, stops every rank (the world group) here with a message naming it, before any data is read and before
// step 1. The first call of each GEMM also settles its algorithm (llmc/matmul.cuh, matmul_settle), so the steps reuse
// what was checked. t: this rank's table; grads: its gradients [P] (every tensor at its table offset; the check leaves
// them zero); N = B*T rows; scratch [scratch_len]: a buffer the check may overwrite (the steps' fc1 gradient), which
// holds the forward's and the input gradient's outputs when it is large enough (it is for every preset), else the check
// allocates its own.
static void fp8_gemm_check(Fp8Linears& f, cudaStream_t stream, MatmulContext* mm, const ParamTable& t, floatX* grads,
                           int N, floatX* scratch, size_t scratch_len) {
    if (f.opt.recipe == FP8_NONE) return;
    const int n_layer = fp8_layers(f);
    int l = 0;  // this rank's first layer (a pipeline stage holds some)
    while (l < n_layer && f.w8_off[(size_t)LINEARS_PER_LAYER * l] == SIZE_MAX) l++;
    if (l == n_layer) return;
    const ParamTable::Block& b = t.blocks[l];
    const char* names[LINEARS_PER_LAYER] = {"qkv", "attn_out", "fc1", "fc2"};
    const int biases[LINEARS_PER_LAYER] = {b.qkv_b, b.attn_out_b, b.fc1_b, b.fc2_b};
    // the outputs of the forward [N, OC] and the input gradient [N, IC]: scratch when it is large enough, else an
    // allocation of its own
    size_t out_len = 0, max_oc = 0;
    for (int k = 0; k < LINEARS_PER_LAYER; k++) {
        const ParamSpec& s = t.specs[linear_weight(b, k)];
        out_len = std::max(out_len, (size_t)N * std::max(s.rows, s.cols));
        max_oc = std::max(max_oc, (size_t)s.rows);
    }
    floatX *out = scratch, *own = nullptr, *bias = nullptr;
    if (out_len > scratch_len) {
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
    mm->fp8_check = true;
    for (int k = 0; k < LINEARS_PER_LAYER; k++) {
        const int w = linear_weight(b, k), i = LINEARS_PER_LAYER * l + k;
        const ParamSpec& sp = t.specs[w];
        floatX* dw = grads + sp.offset;  // the weight's gradient
        const int OC = (int)sp.rows, IC = (int)sp.cols;
        float *sx = fp8_gemm_scale(&f.x, i), *sw = fp8_gemm_scale(&f.w, i), *sdy = fp8_gemm_scale(&f.dy, i);
        const double kept[3] = {scale_of(sx), scale_of(sw), scale_of(sdy)};
        set_scale(sx, 2.0f);
        set_scale(sw, 4.0f);
        set_scale(sdy, 0.125f);
        const std::vector<int8_t> x = halves((size_t)N * IC, 1), wv = halves((size_t)OC * IC, 2),
                                  wt = halves((size_t)IC * OC, 3), dy = halves((size_t)N * OC, 4),
                                  dyt = halves((size_t)OC * N, 5), xt = halves((size_t)IC * N, 6),
                                  bh = halves((size_t)OC, 7);
        upload(f.x8, x);
        upload(fp8_weight(f, l, k, false), wv);
        upload(fp8_weight(f, l, k, true), wt);
        upload(f.dy8, dy);
        upload(f.dyt8, dyt);
        const bool with_bias = biases[k] >= 0;
        if (with_bias) {
            std::vector<floatX> h(OC);
            for (int c = 0; c < OC; c++) h[c] = to_floatX(0.5f * bh[c]);
            cudaCheck(cudaMemcpy(bias, h.data(), OC * sizeof(floatX), cudaMemcpyHostToDevice));
        }
        for (int kind = 0; kind < 3; kind++) {
            mm->fp8_refused = false;
            std::string words;
            double worst = 0;
            if (kind == 0) {  // out[N, OC] = x8[N, IC] w8[OC, IC]^T (+ bias)
                words = "forward of " + std::string(names[k]) + " (" +
                        fp8_gemm_words(OC, N, IC, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_FLOATX, true, with_bias) + ")";
                matmul_fp8_forward(mm, stream, out, f.x8, sx, fp8_weight(f, l, k, false), sw, with_bias ? bias : nullptr,
                                   N, IC, OC);
                cudaCheck(cudaStreamSynchronize(stream));
                if (!mm->fp8_refused)
                    worst = sampled(out, x, wv, with_bias ? &bh : nullptr, scale_of(sx) * scale_of(sw), N, OC, IC);
            } else if (kind == 1) {  // dinp[N, IC] = dy8[N, OC] wt8[IC, OC]^T
                words = "input gradient of " + std::string(names[k]) + " (" +
                        fp8_gemm_words(IC, N, OC, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_FLOATX, false, false) + ")";
                matmul_fp8_backward_input(mm, stream, out, f.dy8, sdy, fp8_weight(f, l, k, true), sw, N, IC, OC);
                cudaCheck(cudaStreamSynchronize(stream));
                if (!mm->fp8_refused) worst = sampled(out, dy, wt, nullptr, scale_of(sdy) * scale_of(sw), N, IC, OC);
            } else {  // dW[OC, IC] += dyt8[OC, N] xt8[IC, N]^T, into the zeroed gradient
                words = "weight gradient of " + std::string(names[k]) + " (" +
                        fp8_gemm_words(IC, OC, N, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, cublaslt_type(dw), false, false) +
                        ", accumulating)";
                upload(f.x8, xt);  // the backward's x8 holds the input transposed
                cudaCheck(cudaMemset(dw, 0, sp.numel() * sizeof(floatX)));
                matmul_fp8_backward_weight(mm, stream, dw, (floatX*)nullptr, (const floatX*)nullptr, f.dyt8, sdy,
                                           f.x8, sx, N, IC, OC);
                cudaCheck(cudaStreamSynchronize(stream));
                if (!mm->fp8_refused) worst = sampled(dw, dyt, xt, nullptr, scale_of(sdy) * scale_of(sx), OC, IC, N);
                cudaCheck(cudaMemset(dw, 0, sp.numel() * sizeof(floatX)));
            }
            if (mm->fp8_refused) failed.push_back(words + ": refused: " + mm->why);
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
    mm->fp8_check = false;
    mm->fp8_refused = false;
    cudaCheck(cudaFree(own));
    cudaCheck(cudaFree(bias));

    double bad = failed.empty() ? 0.0 : 1.0;  // every rank stops together
    comm_host_max(f.world, &bad, 1);
    if (!failed.empty()) {
        fflush(stdout);
        fprintf(stderr, "fp8 start-up check (rank %d, layer %d's shapes, N = B*T = %d): %zu of %d fp8 GEMMs failed:\n",
                f.world.rank, l, N, failed.size(), 3 * LINEARS_PER_LAYER);
        for (const std::string& f : failed) fprintf(stderr, "  %s\n", f.c_str());
        die("--fp8: cuBLASLt cannot run %zu of this model's %d fp8 GEMMs on this GPU (the fp8 start-up check, before "
            "step 1; the first: %s); train without --fp8, or run dev/probe/fp8_gemm to pin the cause (docs/fp8.md)",
            failed.size(), 3 * LINEARS_PER_LAYER, failed[0].c_str());
    }
    if (bad != 0) die("--fp8: the fp8 start-up check failed on another rank (its message names the GEMMs)");
    if (f.world.rank == 0)
        printf("fp8 start-up check: the %d fp8 GEMMs of layer %d's shapes (forward, input and weight gradient of qkv, "
               "attn_out, fc1, fc2) ran; 64 samples each within %.2f of the bound\n", ran, l, worst_all);
}
