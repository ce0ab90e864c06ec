// llmc/attention_cudnn.cuh: causal attention with GQA through cuDNN's flash attention (`make train_gpt USE_CUDNN=1`,
// then `--attention cudnn`), forward and backward, floatX in and out (bf16, or fp16 in the fp16 build), fp32
// statistics. The same layouts and meaning as llmc/attention.cuh, so the trainer swaps one for the other:
//   qkv   [B, T, (H + 2KV) * hd]  per token: H query heads, then KV key heads, then KV value heads
//   out   [B, T, H * hd]
//   lse   [B, H, T] fp32          logsumexp of the scaled, masked scores of each query row (natural log): cuDNN's
//                                 "stats", written by the forward, read by the backward
//   dqkv  [B, T, (H + 2KV) * hd]  overwritten by the backward (dQ, dK and dV are its three column ranges)
//   dvec  [B, H, T] fp32          scratch: rowsum(dO * O), which cuDNN's backward writes and reads ("softmax sum")
// Query head h reads kv head h / (H / KV).
//
// cuDNN is not given "attention": it is given a graph of small operations (two matrix products, a few pointwise
// operations, two reductions), and its runtime-compiled attention engines recognise that graph as a whole and run it
// as one fused kernel, the scores never stored. The graph below is the one NVIDIA's cudnn-frontend library builds for
// its causal `sdpa` and deterministic `sdpa_backward` (frontend 1.8 and later, cuDNN 9), written here with cuDNN's
// backend C API (cudnn_graph.h) so that nothing beyond cuDNN itself is needed. The engines match the graph's pattern
// exactly: an operation more or less, or another data type on one intermediate, and cuDNN reports no engine.
//
// Forward, per (batch, head), T x T intermediates never stored (fp32 unless named):
//   S = Q K^T; S1 = S * scale; keep = row >= col; S2 = keep ? S1 : -inf      (the causal mask, top-left aligned)
//   M = rowmax(S2); E = exp(S2 - M); L = rowsum(E); stats = M + log L        (lse, fp32 [B, H, T, 1])
//   P = E / L (floatX); O = P V
// Backward (P recomputed from the stats, no atomics: the dQ product is not accumulated across key blocks, so the
// result is bitwise reproducible; cuDNN's workspace for that is about B * H * T^2 * 2 bytes):
//   Dsum = rowsum(dO * O)                                                    (dvec)
//   P = exp(keep ? S1 - stats : -inf); dV = P^T dO; dP = dO V^T; dS = P * (dP - Dsum) * scale
//   dK = dS^T Q; dQ = dS K                 with GQA, dV and dK per query head (floatX), then summed over the group
//
// Calls:
//   attention_cudnn_forward(out, lse, qkv, B, T, H, KV, hd, stream)
//   attention_cudnn_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, stream)
// The first call of a shape builds its plan (cuDNN compiles its kernel: seconds) and grows the one device workspace
// the plans share; attention_cudnn_prepare(B, T, H, KV, hd) does both before the first step and prints them. Needs
// an sm_80+ GPU, hd a multiple of 8 up to 128, a 16-bit floatX; no ALiBi. cuDNN's own reasons for a refusal are printed with
// CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <initializer_list>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>
#include "llmc/cuda_common.cuh"
#include "llmc/precision.cuh"
#include "llmc/utils.h"

#ifdef ENABLE_FP32
#error "llmc/attention_cudnn.cuh: cuDNN's flash attention takes bf16 or fp16, not the fp32 build's floatX"
#endif
static const cudnnDataType_t CUDNN_FLOATX = std::is_same<floatX, __half>::value ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;

static void cudnn_check(cudnnStatus_t s, const char* what, const char* file, int line) {
    if (s == CUDNN_STATUS_SUCCESS) return;
    char why[1024] = "";
    cudnnGetLastErrorString(why, sizeof(why));
    die("cuDNN: %s failed at %s:%d: %s (%d)%s%s", what, file, line, cudnnGetErrorString(s), (int)s, *why ? ": " : "",
        why);
}
#define cudnnCheck(call, what) cudnn_check((call), (what), __FILE__, __LINE__)

// ---- the backend API in a few helpers --------------------------------------------------------------

typedef std::array<int64_t, 4> Dims4;  // cuDNN's order: [batch, head, rows, cols]

static cudnnBackendDescriptor_t cudnn_make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    cudnnCheck(cudnnBackendCreateDescriptor(type, &d), "creating a descriptor");
    return d;
}
static void cudnn_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                      int64_t count, const void* values) {
    const cudnnStatus_t s = cudnnBackendSetAttribute(d, name, type, count, values);
    if (s != CUDNN_STATUS_SUCCESS) {
        char what[64];
        snprintf(what, sizeof(what), "setting attribute %d", (int)name);
        cudnn_check(s, what, __FILE__, __LINE__);
    }
}
static void cudnn_set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v) {
    cudnn_set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

// One graph being built: its operations in order, and the next number for a virtual tensor.
struct CudnnGraph {
    std::vector<cudnnBackendDescriptor_t> ops;
    int64_t next_uid = 100;  // the tensors of the variant pack are numbered below 100 (CudnnUid)
};
enum CudnnUid : int64_t {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_DO, UID_DQ, UID_DK, UID_DV, UID_ONE,
    UID_DSUM
};

// A 4-d tensor. uid 0: a virtual tensor (an intermediate that only lives inside the fused kernel), numbered by the
// graph; by_value: a host scalar, passed by pointer in the variant pack.
static cudnnBackendDescriptor_t cudnn_tensor(CudnnGraph* g, int64_t uid, cudnnDataType_t type, Dims4 dims,
                                             Dims4 strides, bool by_value = false) {
    const bool is_virtual = uid == 0;
    if (is_virtual) uid = g->next_uid++;
    const int64_t align = 16;
    cudnnBackendDescriptor_t t = cudnn_make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnn_set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    cudnn_set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    cudnn_set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    cudnn_set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cudnn_set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    cudnn_set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) cudnn_set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    cudnnCheck(cudnnBackendFinalize(t), "finalizing a tensor");
    return t;
}

// y = mode(x[, b[, t]]): a pointwise operation; b broadcasts along its dimensions of extent 1. BINARY_SELECT: y = t ? x
// : b. GEN_INDEX: y = the index of each element along `axis`.
static void cudnn_pointwise(CudnnGraph* g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t y,
                            cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b = nullptr,
                            cudnnBackendDescriptor_t t = nullptr, cudnnDataType_t math = CUDNN_DATA_FLOAT,
                            int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = cudnn_make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnn_set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    cudnn_set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (axis >= 0) cudnn_set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    cudnnCheck(cudnnBackendFinalize(pw), "finalizing a pointwise descriptor");
    cudnnBackendDescriptor_t op = cudnn_make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const float one = 1.0f;
    cudnn_set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    cudnn_set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) cudnn_set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) cudnn_set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    cudnn_set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    cudnn_set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    cudnn_set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    cudnnCheck(cudnnBackendFinalize(op), "finalizing a pointwise operation");
    g->ops.push_back(op);
}

// Adds an operation of type `type` whose attributes are the descriptors `parts` (its tensors and its descriptor).
static void cudnn_add_op(CudnnGraph* g, cudnnBackendDescriptorType_t type,
                         std::initializer_list<std::pair<cudnnBackendAttributeName_t, cudnnBackendDescriptor_t>> parts) {
    cudnnBackendDescriptor_t op = cudnn_make(type);
    for (const auto& p : parts) cudnn_set_desc(op, p.first, p.second);
    cudnnCheck(cudnnBackendFinalize(op), "finalizing an operation");
    g->ops.push_back(op);
}

// c = a b over the last two dimensions, fp32 accumulation; the head dimension of b may be a divisor of a's (GQA:
// head h of a meets head h / (Ha / Hb) of b).
static void cudnn_matmul(CudnnGraph* g, cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t a,
                         cudnnBackendDescriptor_t b) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = cudnn_make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnn_set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cudnnCheck(cudnnBackendFinalize(mm), "finalizing a matmul descriptor");
    cudnn_add_op(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
                 {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a}, {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
                  {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c}, {CUDNN_ATTR_OPERATION_MATMUL_DESC, mm}});
}

// y = the reduction of x over the dimensions where y has extent 1 (and over groups of heads where y has fewer)
static void cudnn_reduction(CudnnGraph* g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t y,
                            cudnnBackendDescriptor_t x) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t red = cudnn_make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnn_set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    cudnn_set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cudnnCheck(cudnnBackendFinalize(red), "finalizing a reduction descriptor");
    cudnn_add_op(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                 {{CUDNN_ATTR_OPERATION_REDUCTION_DESC, red}, {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
                  {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y}});
}

// y = x described again (other dims and strides over the same elements): a transpose that moves no data
static void cudnn_reshape(CudnnGraph* g, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x) {
    cudnn_add_op(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                 {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y}});
}

// ---- the two graphs ---------------------------------------------------------------------------------

// The tensors of one shape, in cuDNN's [batch, head, rows, cols] order over our layouts: Q, K and V are column ranges
// of qkv (row stride ld = (H + 2KV) hd), K^T and V^T the same memory with the last two dimensions swapped.
struct CudnnShapes {
    Dims4 q, q_st, kv, kv_st, kvt, kvt_st, o, o_st, stats, stats_st, tt, tt_st, ttt_st, qf_st, one;
    CudnnShapes(int B, int T, int H, int KV, int hd) {
        const int64_t ld = (int64_t)(H + 2 * KV) * hd, Tl = T;
        q = {B, H, Tl, hd};         q_st = {Tl * ld, hd, ld, 1};
        kv = {B, KV, Tl, hd};       kv_st = {Tl * ld, hd, ld, 1};
        kvt = {B, KV, hd, Tl};      kvt_st = {Tl * ld, hd, 1, ld};
        o = {B, H, Tl, hd};         o_st = {Tl * H * hd, hd, (int64_t)H * hd, 1};
        stats = {B, H, Tl, 1};      stats_st = {(int64_t)H * Tl, Tl, 1, 1};
        tt = {B, H, Tl, Tl};        tt_st = {(int64_t)H * Tl * Tl, Tl * Tl, Tl, 1};
        ttt_st = {(int64_t)H * Tl * Tl, Tl * Tl, 1, Tl};  // [B, H, T, T] transposed: element (i, j) at j * T + i
        qf_st = {(int64_t)H * Tl * hd, Tl * hd, hd, 1};   // a packed [B, H, T, hd] intermediate
        one = {1, 1, 1, 1};
    }
};

// The causal mask over scores x [B, H, T, T]: returns keep ? x : -inf (keep = query index >= key index).
static cudnnBackendDescriptor_t cudnn_causal_mask(CudnnGraph* g, const CudnnShapes& s, cudnnBackendDescriptor_t x,
                                                  cudnnBackendDescriptor_t neg_inf) {
    cudnnBackendDescriptor_t row = cudnn_tensor(g, 0, CUDNN_DATA_INT32, s.tt, s.tt_st);
    cudnnBackendDescriptor_t col = cudnn_tensor(g, 0, CUDNN_DATA_INT32, s.tt, s.tt_st);
    cudnnBackendDescriptor_t keep = cudnn_tensor(g, 0, CUDNN_DATA_BOOLEAN, s.tt, s.tt_st);
    cudnnBackendDescriptor_t y = cudnn_tensor(g, 0, CUDNN_DATA_FLOAT, s.tt, s.tt_st);
    cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, row, x, nullptr, nullptr, CUDNN_DATA_FLOAT, 2);  // query index
    cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, col, x, nullptr, nullptr, CUDNN_DATA_FLOAT, 3);  // key index
    cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, keep, row, col, nullptr, CUDNN_DATA_BOOLEAN);
    cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, y, x, neg_inf, keep);
    return y;
}

static CudnnGraph cudnn_forward_graph(int B, int T, int H, int KV, int hd) {
    CudnnGraph g;
    const CudnnShapes s(B, T, H, KV, hd);
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, X = CUDNN_FLOATX;
    cudnnBackendDescriptor_t Q = cudnn_tensor(&g, UID_Q, X, s.q, s.q_st);
    cudnnBackendDescriptor_t Kt = cudnn_tensor(&g, UID_K, X, s.kvt, s.kvt_st);
    cudnnBackendDescriptor_t V = cudnn_tensor(&g, UID_V, X, s.kv, s.kv_st);
    cudnnBackendDescriptor_t O = cudnn_tensor(&g, UID_O, X, s.o, s.o_st);
    cudnnBackendDescriptor_t stats = cudnn_tensor(&g, UID_STATS, F, s.stats, s.stats_st);
    cudnnBackendDescriptor_t scale = cudnn_tensor(&g, UID_SCALE, F, s.one, s.one, true);
    cudnnBackendDescriptor_t neg_inf = cudnn_tensor(&g, UID_NEG_INF, F, s.one, s.one, true);
    auto scores = [&]() { return cudnn_tensor(&g, 0, F, s.tt, s.tt_st); };       // [B, H, T, T] fp32
    auto rows = [&]() { return cudnn_tensor(&g, 0, F, s.stats, s.stats_st); };  // [B, H, T, 1] fp32
    cudnnBackendDescriptor_t S = scores(), S1 = scores();
    cudnn_matmul(&g, S, Q, Kt);
    cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, S1, S, scale);
    cudnnBackendDescriptor_t S2 = cudnn_causal_mask(&g, s, S1, neg_inf);
    cudnnBackendDescriptor_t M = rows(), Z = scores(), E = scores(), L = rows(), logL = rows();
    cudnn_reduction(&g, CUDNN_REDUCE_TENSOR_MAX, M, S2);
    cudnn_pointwise(&g, CUDNN_POINTWISE_SUB, Z, S2, M);
    cudnn_pointwise(&g, CUDNN_POINTWISE_EXP, E, Z);
    cudnn_reduction(&g, CUDNN_REDUCE_TENSOR_ADD, L, E);
    cudnn_pointwise(&g, CUDNN_POINTWISE_LOG, logL, L);
    cudnn_pointwise(&g, CUDNN_POINTWISE_ADD, stats, M, logL);
    cudnnBackendDescriptor_t P = cudnn_tensor(&g, 0, X, s.tt, s.tt_st);  // floatX: the second product's input type
    cudnn_pointwise(&g, CUDNN_POINTWISE_DIV, P, E, L);
    cudnn_matmul(&g, O, P, V);
    return g;
}

static CudnnGraph cudnn_backward_graph(int B, int T, int H, int KV, int hd) {
    CudnnGraph g;
    const CudnnShapes s(B, T, H, KV, hd);
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, X = CUDNN_FLOATX;
    const bool gqa = KV != H;
    cudnnBackendDescriptor_t Q = cudnn_tensor(&g, UID_Q, X, s.q, s.q_st);
    cudnnBackendDescriptor_t Kt = cudnn_tensor(&g, UID_K, X, s.kvt, s.kvt_st);
    cudnnBackendDescriptor_t Vt = cudnn_tensor(&g, UID_V, X, s.kvt, s.kvt_st);
    cudnnBackendDescriptor_t O = cudnn_tensor(&g, UID_O, X, s.o, s.o_st);
    cudnnBackendDescriptor_t dO = cudnn_tensor(&g, UID_DO, X, s.o, s.o_st);
    cudnnBackendDescriptor_t stats = cudnn_tensor(&g, UID_STATS, F, s.stats, s.stats_st);
    cudnnBackendDescriptor_t dQ = cudnn_tensor(&g, UID_DQ, X, s.q, s.q_st);
    cudnnBackendDescriptor_t dK = cudnn_tensor(&g, UID_DK, X, s.kv, s.kv_st);
    cudnnBackendDescriptor_t dV = cudnn_tensor(&g, UID_DV, X, s.kv, s.kv_st);
    cudnnBackendDescriptor_t scale = cudnn_tensor(&g, UID_SCALE, F, s.one, s.one, true);
    cudnnBackendDescriptor_t one = cudnn_tensor(&g, UID_ONE, F, s.one, s.one, true);
    cudnnBackendDescriptor_t neg_inf = cudnn_tensor(&g, UID_NEG_INF, F, s.one, s.one, true);
    cudnnBackendDescriptor_t dsum = cudnn_tensor(&g, UID_DSUM, F, s.stats, s.stats_st);
    auto scores = [&]() { return cudnn_tensor(&g, 0, F, s.tt, s.tt_st); };
    // Dsum = rowsum(dO * O) (the product's strides as the frontend gives them)
    cudnnBackendDescriptor_t dOO = cudnn_tensor(&g, 0, F, s.o, {s.qf_st[0], s.qf_st[1], (int64_t)H * hd, 1});
    cudnnBackendDescriptor_t rowsum = cudnn_tensor(&g, 0, F, s.stats, s.stats_st);
    cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, dOO, dO, O);
    cudnn_reduction(&g, CUDNN_REDUCE_TENSOR_ADD, rowsum, dOO);
    cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, dsum, rowsum, one);
    // P = exp(mask(S * scale - stats))
    cudnnBackendDescriptor_t S = scores(), S1 = scores(), S2 = scores(), P = scores();
    cudnn_matmul(&g, S, Q, Kt);
    cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, S1, S, scale);
    cudnn_pointwise(&g, CUDNN_POINTWISE_SUB, S2, S1, stats);
    cudnnBackendDescriptor_t S3 = cudnn_causal_mask(&g, s, S2, neg_inf);
    cudnn_pointwise(&g, CUDNN_POINTWISE_EXP, P, S3);
    // out [B, KV, T, hd] = x^T y for x [B, H, T, T] (described transposed, in floatX) and y [B, H, T, hd]; with GQA per
    // query head in floatX, then summed over the heads of each kv head
    auto kv_grad = [&](cudnnBackendDescriptor_t out, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        cudnnBackendDescriptor_t xt = cudnn_tensor(&g, 0, X, s.tt, s.ttt_st);
        cudnn_reshape(&g, xt, x);
        if (!gqa) return cudnn_matmul(&g, out, xt, y);
        cudnnBackendDescriptor_t per_head = cudnn_tensor(&g, 0, X, s.o, s.qf_st);
        cudnn_matmul(&g, per_head, xt, y);
        cudnn_reduction(&g, CUDNN_REDUCE_TENSOR_ADD, out, per_head);
    };
    kv_grad(dV, P, dO);  // dV = P^T dO
    // dS = P * (dO V^T - Dsum) * scale
    cudnnBackendDescriptor_t dP = scores(), dP1 = scores(), dP2 = scores(), dS = scores();
    cudnn_matmul(&g, dP, dO, Vt);
    cudnn_pointwise(&g, CUDNN_POINTWISE_SUB, dP1, dP, dsum);
    cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, dP2, dP1, P);
    cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, dS, dP2, scale);
    kv_grad(dK, dS, Q);  // dK = dS^T Q
    // dQ = dS K: K^T described as K again; written directly (no fp32 accumulator: the deterministic engine)
    cudnnBackendDescriptor_t K = cudnn_tensor(&g, 0, F, s.kv, s.kv_st);
    cudnn_reshape(&g, K, Kt);
    cudnn_matmul(&g, dQ, dS, K);
    return g;
}

// ---- plans, the workspace, the calls ----------------------------------------------------------------

struct CudnnPlan {
    cudnnBackendDescriptor_t plan = nullptr;
    int64_t workspace = 0;  // bytes
};
struct CudnnState {
    cudnnHandle_t handle = nullptr;
    std::map<std::array<int, 6>, CudnnPlan> plans;  // (backward?, B, T, H, KV, hd)
    void* workspace = nullptr;
    int64_t workspace_size = 0;
};
static CudnnState g_cudnn;

// The engine configurations cuDNN's heuristics suggest for graph g, best first; the first whose plan builds is used
// (a configuration can fail to build where the next one works).
static CudnnPlan cudnn_plan_build(const CudnnGraph& g, const char* what) {
    cudnnBackendDescriptor_t graph = cudnn_make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cudnn_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)g.ops.size(), g.ops.data());
    // The handle attributes of the graph and the plan (CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800, ..._EXECUTION_PLAN_HANDLE
    // = 400, named by number: deprecated since cuDNN 9.8, required before): set where the library still takes them.
    const cudnnBackendAttributeName_t graph_handle = (cudnnBackendAttributeName_t)800,
                                      plan_handle = (cudnnBackendAttributeName_t)400;
    (void)cudnnBackendSetAttribute(graph, graph_handle, CUDNN_TYPE_HANDLE, 1, &g_cudnn.handle);
    const cudnnStatus_t gs = cudnnBackendFinalize(graph);
    if (gs != CUDNN_STATUS_SUCCESS) cudnn_check(gs, what, __FILE__, __LINE__);
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
        cudnnBackendDescriptor_t heur = cudnn_make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        cudnn_set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
        cudnn_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) continue;
        int64_t count = 0;
        cudnnCheck(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                            nullptr), "counting the heuristic's engine configurations");
        std::vector<cudnnBackendDescriptor_t> cfgs((size_t)count);
        for (auto& c : cfgs) c = cudnn_make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        if (count > 0)
            cudnnCheck(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                &got, cfgs.data()), "reading the heuristic's engine configurations");
        for (int64_t i = 0; i < got; i++) {
            cudnnBackendDescriptor_t plan = cudnn_make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            cudnn_set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[(size_t)i]);
            (void)cudnnBackendSetAttribute(plan, plan_handle, CUDNN_TYPE_HANDLE, 1, &g_cudnn.handle);
            if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) {
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            CudnnPlan p;
            p.plan = plan;
            int64_t n = 0;
            cudnnCheck(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                                &p.workspace), "reading a plan's workspace size");
            return p;
        }
    }
    char why[1024] = "";
    cudnnGetLastErrorString(why, sizeof(why));
    die("cuDNN %zu has no engine for the attention graph (%s): %s; cuDNN prints its reasons with "
        "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr", cudnnGetVersion(), what, *why ? why : "no message");
}

static const CudnnPlan& cudnn_plan(bool backward, int B, int T, int H, int KV, int hd) {
    const std::array<int, 6> key = {backward ? 1 : 0, B, T, H, KV, hd};
    auto it = g_cudnn.plans.find(key);
    if (it != g_cudnn.plans.end()) return it->second;
    if (!g_cudnn.handle) cudnnCheck(cudnnCreate(&g_cudnn.handle), "cudnnCreate");
    if (hd % 8 != 0 || hd > 128) die("--attention cudnn: head dim %d (cuDNN's attention takes multiples of 8 up to 128)", hd);
    if (H % KV != 0) die("--attention cudnn: %d query heads are not a multiple of %d kv heads", H, KV);
    char what[96];
    snprintf(what, sizeof(what), "%s, B %d T %d H %d KV %d hd %d", backward ? "backward" : "forward", B, T, H, KV, hd);
    const CudnnGraph g = backward ? cudnn_backward_graph(B, T, H, KV, hd) : cudnn_forward_graph(B, T, H, KV, hd);
    const CudnnPlan p = cudnn_plan_build(g, what);
    if (p.workspace > g_cudnn.workspace_size) {  // one workspace for every plan: the largest asked for
        cudaCheck(cudaDeviceSynchronize());
        if (g_cudnn.workspace) cudaCheck(cudaFree(g_cudnn.workspace));
        cudaCheck(cudaMalloc(&g_cudnn.workspace, (size_t)p.workspace));
        g_cudnn.workspace_size = p.workspace;
    }
    return g_cudnn.plans[key] = p;
}

// Runs plan p with the variant pack (uids[i] -> ptrs[i]) on stream
static void cudnn_run(const CudnnPlan& p, const std::vector<int64_t>& uids, std::vector<void*> ptrs,
                      cudaStream_t stream) {
    cudnnBackendDescriptor_t pack = cudnn_make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    cudnn_set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(), uids.data());
    cudnn_set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(), ptrs.data());
    cudnn_set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &g_cudnn.workspace);
    cudnnCheck(cudnnBackendFinalize(pack), "finalizing the variant pack");
    cudnnCheck(cudnnSetStream(g_cudnn.handle, stream), "cudnnSetStream");
    cudnnCheck(cudnnBackendExecute(g_cudnn.handle, p.plan, pack), "running the attention plan");
    cudnnCheck(cudnnBackendDestroyDescriptor(pack), "destroying the variant pack");
}

static void attention_cudnn_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int H, int KV, int hd,
                                    cudaStream_t stream) {
    const CudnnPlan& p = cudnn_plan(false, B, T, H, KV, hd);
    float scale = 1.0f / sqrtf((float)hd), neg_inf = -INFINITY;
    void* q = (void*)qkv;
    void* k = (void*)(qkv + (size_t)H * hd);
    void* v = (void*)(qkv + (size_t)(H + KV) * hd);
    cudnn_run(p, {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF},
              {q, k, v, out, lse, &scale, &neg_inf}, stream);
}

static void attention_cudnn_backward(floatX* dqkv, float* dvec, const floatX* dout, const floatX* out, const floatX* qkv,
                                     const float* lse, int B, int T, int H, int KV, int hd, cudaStream_t stream) {
    const CudnnPlan& p = cudnn_plan(true, B, T, H, KV, hd);
    float scale = 1.0f / sqrtf((float)hd), one = 1.0f, neg_inf = -INFINITY;
    const size_t ko = (size_t)H * hd, vo = (size_t)(H + KV) * hd;  // the column offsets of K and V in a token's row
    cudnn_run(p, {UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DQ, UID_DK, UID_DV, UID_SCALE, UID_ONE,
                  UID_NEG_INF, UID_DSUM},
              {(void*)qkv, (void*)(qkv + ko), (void*)(qkv + vo), (void*)out, (void*)dout, (void*)lse, dqkv, dqkv + ko,
               dqkv + vo, &scale, &one, &neg_inf, dvec}, stream);
}

// Builds both plans of a shape before the first step (cuDNN compiles its kernels), prints what it chose.
static void attention_cudnn_prepare(int B, int T, int H, int KV, int hd, bool print) {
    cudnn_plan(false, B, T, H, KV, hd);
    cudnn_plan(true, B, T, H, KV, hd);
    if (print)
        printf("attention: cuDNN %zu's flash attention (--attention cudnn), deterministic backward; its workspace "
               "%.1f MiB\n", cudnnGetVersion(), g_cudnn.workspace_size / 1048576.0);
}
