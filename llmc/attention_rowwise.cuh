// llmc/attention_rowwise.cuh: causal attention with GQA on CUDA cores, one warp per row, fp32 math, for any
// element type T (float or __nv_bfloat16). The attention of the fp32 build (make PRECISION=FP32), where the
// bf16 tensor-core kernels of llmc/attention.cuh do not apply, and version 1 of dev/cuda/attention_forward.cu
// and attention_backward.cu (the simplest correct kernels, that the fast ones are timed against).
//
// Same layouts and meaning as llmc/attention.cuh:
//   qkv   [B, T, (H + 2KV) * hd]  per token: H query heads, then KV key heads, then KV value heads
//   out   [B, T, H * hd]
//   lse   [B, H, T] fp32          logsumexp of the scaled scores of each query row (natural log)
//   dvec  [B, H, T] fp32          scratch of the backward: D = sum_d dout * out per query row
//   dqkv  [B, T, (H + 2KV) * hd]  overwritten by the backward (every element is written)
// Requirements (checked): hd <= 128 (lane l holds dims l, l + 32, l + 64, l + 96), H % KV == 0. Any T.
// alibi [H] (or null): ALiBi's slope of each query head, slope_h * (key - query) added to every scaled score.
// doc [B*T] int32 (or null: every doc 0, the plain causal mask): as in llmc/attention.cuh, the first key each query
// sees, its document's start (llmc/documents.h); non-decreasing along a row, doc[b*T + t] <= t. Query t sees keys
// doc[t] .. t: the loops below start there (and the key rows' loops stop at the first query whose document starts
// after the key), so no key outside the document is read and no mask is needed.
//
// Forward, one warp per (b, h, t): online softmax over keys doc[t]..t, o += p * v.
// Backward in two kernels, no atomics (bitwise reproducible):
//   1. one warp per query row (b, h, t): D = dout . out; dq = scale * sum_{doc[t] <= t2 <= t} p (dp - D) k[t2]
//   2. one warp per key row (b, kv head, t2): for each query head of the group and each t >= t2 with doc[t] <= t2,
//      dk += scale * p (dp - D) q[t],  dv += p dout[t]
//   with p = exp(scale * q.k (+ ALiBi's bias) - lse) recomputed from the forward's lse, dp = dout . v.
// Each pass is O(T^2 hd) per head with no data reuse: fine for tests and references, far from the
// tensor-core kernels' speed.
//   attention_rowwise_forward(out, lse, qkv, B, T, H, KV, hd, stream, alibi = null, doc = null)
//   attention_rowwise_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, stream, alibi = null, doc = null)
#pragma once
#include <cmath>
#include <cstdint>
#include <cuda_runtime.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/precision.cuh"
#include "llmc/utils.h"

static const int ATT_ROW_WARPS = 8;  // warps (rows) per block

// The 4 values lane l holds of a head vector: dims l, l + 32, l + 64, l + 96 (0 past hd).
template <typename T>
__device__ __forceinline__ void attention_row_load(float* r, const T* p, int lane, int hd) {
#pragma unroll
    for (int i = 0; i < 4; i++) r[i] = lane + 32 * i < hd ? to_float(p[lane + 32 * i]) : 0.0f;
}

// Dot product of two head vectors held as above, the same value in every lane.
__device__ __forceinline__ float attention_row_dot(const float* a, const float* b) {
    return warp_sum(a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3]);
}

template <typename T>
__device__ __forceinline__ void attention_row_store(T* p, const float* r, int lane, int hd) {
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (lane + 32 * i < hd) p[lane + 32 * i] = (T)r[i];
}

template <typename T>
__global__ void attention_rowwise_forward_kernel(T* out, float* lse, const T* qkv, const float* alibi,
                                                 const int32_t* doc, int B, int T_, int H, int KV, int hd) {
    const int row = blockIdx.x * ATT_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * H * T_) return;
    const int t = row % T_, h = (row / T_) % H, b = row / (T_ * H), kh = h / (H / KV);
    const size_t ld = (size_t)(H + 2 * KV) * hd;
    const T* base = qkv + (size_t)b * T_ * ld;
    const float scale = 1.0f / sqrtf((float)hd), slope = alibi ? alibi[h] : 0.0f;
    float q[4], k[4], v[4], o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    attention_row_load(q, base + (size_t)t * ld + (size_t)h * hd, lane, hd);
    float m = -INFINITY, l = 0.0f;
    for (int t2 = doc ? doc[(size_t)b * T_ + t] : 0; t2 <= t; t2++) {
        attention_row_load(k, base + (size_t)t2 * ld + (size_t)(H + kh) * hd, lane, hd);
        attention_row_load(v, base + (size_t)t2 * ld + (size_t)(H + KV + kh) * hd, lane, hd);
        const float s = attention_row_dot(q, k) * scale + slope * (float)(t2 - t);
        const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < 4; i++) o[i] = o[i] * corr + p * v[i];
        m = m_new;
    }
#pragma unroll
    for (int i = 0; i < 4; i++) o[i] /= l;
    attention_row_store(out + ((size_t)b * T_ + t) * H * hd + (size_t)h * hd, o, lane, hd);
    if (lane == 0) lse[((size_t)b * H + h) * T_ + t] = m + logf(l);
}

// Kernel 1 of the backward: dvec and the query part of dqkv.
template <typename T>
__global__ void attention_rowwise_backward_dq_kernel(T* dqkv, float* dvec, const T* dout, const T* out, const T* qkv,
                                                     const float* lse, const float* alibi, const int32_t* doc, int B,
                                                     int T_, int H, int KV, int hd) {
    const int row = blockIdx.x * ATT_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * H * T_) return;
    const int t = row % T_, h = (row / T_) % H, b = row / (T_ * H), kh = h / (H / KV);
    const size_t ld = (size_t)(H + 2 * KV) * hd, qd = (size_t)H * hd;
    const T* base = qkv + (size_t)b * T_ * ld;
    const float scale = 1.0f / sqrtf((float)hd), slope = alibi ? alibi[h] : 0.0f;
    float q[4], dy[4], y[4], k[4], v[4], dq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    attention_row_load(q, base + (size_t)t * ld + (size_t)h * hd, lane, hd);
    attention_row_load(dy, dout + ((size_t)b * T_ + t) * qd + (size_t)h * hd, lane, hd);
    attention_row_load(y, out + ((size_t)b * T_ + t) * qd + (size_t)h * hd, lane, hd);
    const size_t stat = ((size_t)b * H + h) * T_ + t;
    const float L = lse[stat], D = attention_row_dot(dy, y);
    if (lane == 0) dvec[stat] = D;
    const int t2_first = doc ? doc[(size_t)b * T_ + t] : 0;  // the first key the row sees
    for (int t2 = t2_first; t2 <= t; t2++) {
        attention_row_load(k, base + (size_t)t2 * ld + (size_t)(H + kh) * hd, lane, hd);
        attention_row_load(v, base + (size_t)t2 * ld + (size_t)(H + KV + kh) * hd, lane, hd);
        const float p = expf(attention_row_dot(q, k) * scale + slope * (float)(t2 - t) - L);
        const float ds = p * (attention_row_dot(dy, v) - D) * scale;
#pragma unroll
        for (int i = 0; i < 4; i++) dq[i] += ds * k[i];
    }
    attention_row_store(dqkv + ((size_t)b * T_ + t) * ld + (size_t)h * hd, dq, lane, hd);
}

// Kernel 2 of the backward: the key and value parts of dqkv; reads kernel 1's dvec.
template <typename T>
__global__ void attention_rowwise_backward_dkv_kernel(T* dqkv, const float* dvec, const T* dout, const T* qkv,
                                                      const float* lse, const float* alibi, const int32_t* doc, int B,
                                                      int T_, int H, int KV, int hd) {
    const int row = blockIdx.x * ATT_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * KV * T_) return;
    const int t2 = row % T_, kh = (row / T_) % KV, b = row / (T_ * KV), group = H / KV;
    const size_t ld = (size_t)(H + 2 * KV) * hd, qd = (size_t)H * hd;
    const T* base = qkv + (size_t)b * T_ * ld;
    const float scale = 1.0f / sqrtf((float)hd);
    float k[4], v[4], q[4], dy[4], dk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    attention_row_load(k, base + (size_t)t2 * ld + (size_t)(H + kh) * hd, lane, hd);
    attention_row_load(v, base + (size_t)t2 * ld + (size_t)(H + KV + kh) * hd, lane, hd);
    // the queries that see key t2: t2 up to the first whose document starts after it (doc is non-decreasing)
    int t_end = T_;
    if (doc)
        for (t_end = t2 + 1; t_end < T_ && doc[(size_t)b * T_ + t_end] <= t2;) t_end++;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const float slope = alibi ? alibi[h] : 0.0f;
        for (int t = t2; t < t_end; t++) {
            attention_row_load(q, base + (size_t)t * ld + (size_t)h * hd, lane, hd);
            attention_row_load(dy, dout + ((size_t)b * T_ + t) * qd + (size_t)h * hd, lane, hd);
            const size_t stat = ((size_t)b * H + h) * T_ + t;
            const float p = expf(attention_row_dot(q, k) * scale + slope * (float)(t2 - t) - lse[stat]);
            const float ds = p * (attention_row_dot(dy, v) - dvec[stat]) * scale;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                dk[i] += ds * q[i];
                dv[i] += p * dy[i];
            }
        }
    }
    T* drow = dqkv + ((size_t)b * T_ + t2) * ld;
    attention_row_store(drow + (size_t)(H + kh) * hd, dk, lane, hd);
    attention_row_store(drow + (size_t)(H + KV + kh) * hd, dv, lane, hd);
}

static inline void attention_rowwise_check_shape(int B, int T, int H, int KV, int hd) {
    if (B < 1 || T < 1 || KV < 1 || H % KV != 0 || hd < 1 || hd > 128)
        die("attention_rowwise: needs hd <= 128 and H a multiple of KV (got B=%d T=%d H=%d KV=%d hd=%d)", B, T, H, KV,
            hd);
}

template <typename T>
static void attention_rowwise_forward(T* out, float* lse, const T* qkv, int B, int T_, int H, int KV, int hd,
                                      cudaStream_t stream, const float* alibi = nullptr, const int32_t* doc = nullptr) {
    attention_rowwise_check_shape(B, T_, H, KV, hd);
    const size_t rows = (size_t)B * H * T_;
    attention_rowwise_forward_kernel<T><<<(unsigned)ceil_div(rows, ATT_ROW_WARPS), 32 * ATT_ROW_WARPS, 0, stream>>>(
        out, lse, qkv, alibi, doc, B, T_, H, KV, hd);
    cudaCheck(cudaGetLastError());
}

template <typename T>
static void attention_rowwise_backward(T* dqkv, float* dvec, const T* dout, const T* out, const T* qkv,
                                       const float* lse, int B, int T_, int H, int KV, int hd, cudaStream_t stream,
                                       const float* alibi = nullptr, const int32_t* doc = nullptr) {
    attention_rowwise_check_shape(B, T_, H, KV, hd);
    const size_t q_rows = (size_t)B * H * T_, kv_rows = (size_t)B * KV * T_;
    attention_rowwise_backward_dq_kernel<T><<<(unsigned)ceil_div(q_rows, ATT_ROW_WARPS), 32 * ATT_ROW_WARPS, 0,
                                              stream>>>(dqkv, dvec, dout, out, qkv, lse, alibi, doc, B, T_, H, KV, hd);
    cudaCheck(cudaGetLastError());
    attention_rowwise_backward_dkv_kernel<T><<<(unsigned)ceil_div(kv_rows, ATT_ROW_WARPS), 32 * ATT_ROW_WARPS, 0,
                                               stream>>>(dqkv, dvec, dout, qkv, lse, alibi, doc, B, T_, H, KV, hd);
    cudaCheck(cudaGetLastError());
}
