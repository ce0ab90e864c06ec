// llmc/qk_norm.cuh: QK-norm (Qwen3), an RMSNorm over each q head and each k head inside the fused qkv activation,
// before RoPE; one weight [hd] for the q heads and one for the k heads (as llmc/ref_ops.h qk_norm_forward/backward).
//   qk_norm_forward(qkv, raw, wq, wk, N, H, KV, hd, eps, stream)
//       in place on the H q heads and KV k heads of qkv [N,(H+2KV)*hd]: x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps)
//       in fp32 per head; raw [N,H+KV,hd] keeps the heads as they were (the backward's input). v is untouched.
//   qk_norm_backward(dqkv, dwq, dwk, scratch, raw, wq, wk, N, H, KV, hd, eps, stream)
//       in place on dqkv's q and k heads: dx = rstd (dn - xhat mean(dn xhat)), dn = dout w; dwq, dwk [hd] += the sums
//       over tokens and heads of dout xhat, in fp32 in a fixed order: per block of QK_NORM_BWD_ROWS tokens into
//       scratch (qk_norm_backward_scratch_floats(N, hd) floats), then over the blocks (norm_weight_grad_reduce).
// One warp per (token, head): lane l holds the head's 8-element vector l, so hd % 8 == 0 and hd <= 256; every head
// dim the attention kernels take is among these.
#pragma once
#include "llmc/cuda_common.cuh"
#include "llmc/norm.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"

static const int QK_NORM_THREADS = 256;    // 8 warps, a (token, head) each
static const int QK_NORM_BWD_ROWS = 16;    // tokens per block in backward: fixes the summation order of dwq, dwk
static const int QK_NORM_MAX_HD = 256;

__global__ void __launch_bounds__(QK_NORM_THREADS) qk_norm_forward_kernel(floatX* __restrict__ qkv,
        floatX* __restrict__ raw, const floatX* __restrict__ wq, const floatX* __restrict__ wk, int N, int H, int KV,
        int hd, float eps) {
    const int lane = threadIdx.x % 32, heads = H + KV;
    const long long p = (long long)blockIdx.x * (QK_NORM_THREADS / 32) + threadIdx.x / 32;  // (token, head)
    if (p >= (long long)N * heads) return;  // the whole warp
    const int n = (int)(p / heads), j = (int)(p % heads);
    floatX* x = qkv + (size_t)n * (H + 2 * KV) * hd + (size_t)j * hd + 8 * lane;
    const bool on = 8 * lane < hd;
    Pack8 v;
    float ss = 0.0f;
    if (on) {
        v = load8(x);
#pragma unroll
        for (int e = 0; e < 8; e++) ss += to_float(v.v[e]) * to_float(v.v[e]);
    }
    const float rstd = rsqrtf(warp_sum(ss) / hd + eps);
    if (!on) return;
    store8(raw + (size_t)p * hd + 8 * lane, v);
    const Pack8 w = load8((j < H ? wq : wk) + 8 * lane);
    Pack8 o;
#pragma unroll
    for (int e = 0; e < 8; e++) o.v[e] = to_floatX(to_float(v.v[e]) * rstd * to_float(w.v[e]));
    store8(x, o);
}

// Block b: tokens [16 b, 16 b + 16), every head; warp w takes the (token, head) pairs w, w + 8, ... of the block in
// order and keeps its lane's vector of the two weight gradients in registers; the warps' sums are added in warp order
// into partial[b] = [dwq | dwk] ([2, hd]).
__global__ void __launch_bounds__(QK_NORM_THREADS) qk_norm_backward_kernel(floatX* __restrict__ dqkv,
        float* __restrict__ partial, const floatX* __restrict__ raw, const floatX* __restrict__ wq,
        const floatX* __restrict__ wk, int N, int H, int KV, int hd, float eps) {
    __shared__ float sums[QK_NORM_THREADS / 32][2 * QK_NORM_MAX_HD];
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, heads = H + KV;
    const int r0 = blockIdx.x * QK_NORM_BWD_ROWS, r1 = min(N, r0 + QK_NORM_BWD_ROWS);
    const bool on = 8 * lane < hd;
    float aq[8], ak[8];
#pragma unroll
    for (int e = 0; e < 8; e++) aq[e] = ak[e] = 0.0f;
    for (int i = wid; i < (r1 - r0) * heads; i += QK_NORM_THREADS / 32) {
        const int n = r0 + i / heads, j = i % heads;
        floatX* d = dqkv + (size_t)n * (H + 2 * KV) * hd + (size_t)j * hd + 8 * lane;
        const size_t p = (size_t)n * heads + j;
        Pack8 dv, xv;
        float ss = 0.0f;
        if (on) {
            dv = load8(d);
            xv = load8(raw + p * hd + 8 * lane);
#pragma unroll
            for (int e = 0; e < 8; e++) ss += to_float(xv.v[e]) * to_float(xv.v[e]);
        }
        const float rstd = rsqrtf(warp_sum(ss) / hd + eps);
        Pack8 w;
        float s_dnx = 0.0f;
        if (on) {
            w = load8((j < H ? wq : wk) + 8 * lane);  // (selecting between two register copies put them on the stack)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float dy = to_float(dv.v[e]), xh = to_float(xv.v[e]) * rstd;
                s_dnx += dy * to_float(w.v[e]) * xh;
                if (j < H) aq[e] += dy * xh;
                else ak[e] += dy * xh;
            }
        }
        const float m = warp_sum(s_dnx) / hd;
        if (!on) continue;
        Pack8 o;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float xh = to_float(xv.v[e]) * rstd;
            o.v[e] = to_floatX(rstd * (to_float(dv.v[e]) * to_float(w.v[e]) - xh * m));
        }
        store8(d, o);
    }
    if (on) {
#pragma unroll
        for (int e = 0; e < 8; e++) {
            sums[wid][8 * lane + e] = aq[e];
            sums[wid][hd + 8 * lane + e] = ak[e];
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * hd; c += QK_NORM_THREADS) {
        float s = 0.0f;
        for (int k = 0; k < QK_NORM_THREADS / 32; k++) s += sums[k][c];
        partial[(size_t)blockIdx.x * 2 * hd + c] = s;
    }
}

static size_t qk_norm_backward_scratch_floats(int N, int hd) { return ceil_div(N, QK_NORM_BWD_ROWS) * 2 * (size_t)hd; }

// The grid, tokens x heads / 8 blocks, stays below 2^31: check_shapes (llmc/gpt/options.cuh) holds tokens x heads x 32
// to INT_MAX.
static void qk_norm_check_shape(const char* who, int hd) {
    if (hd % 8 != 0 || hd > QK_NORM_MAX_HD)
        die("%s: head dim %d (--head-dim) with --qk-norm: the kernels take multiples of 8 up to %d (a warp per head)",
            who, hd, QK_NORM_MAX_HD);
}

static void qk_norm_forward(floatX* qkv, floatX* raw, const floatX* wq, const floatX* wk, int N, int H, int KV, int hd,
                            float eps, cudaStream_t stream) {
    qk_norm_check_shape("qk_norm_forward", hd);
    const int grid = (int)ceil_div((size_t)N * (H + KV), QK_NORM_THREADS / 32);
    qk_norm_forward_kernel<<<grid, QK_NORM_THREADS, 0, stream>>>(qkv, raw, wq, wk, N, H, KV, hd, eps);
    cudaCheck(cudaGetLastError());
}

static void qk_norm_backward(floatX* dqkv, floatX* dwq, floatX* dwk, float* scratch, const floatX* raw,
                             const floatX* wq, const floatX* wk, int N, int H, int KV, int hd, float eps,
                             cudaStream_t stream) {
    qk_norm_check_shape("qk_norm_backward", hd);
    const int grid = (int)ceil_div(N, QK_NORM_BWD_ROWS);
    qk_norm_backward_kernel<<<grid, QK_NORM_THREADS, 0, stream>>>(dqkv, scratch, raw, wq, wk, N, H, KV, hd, eps);
    cudaCheck(cudaGetLastError());
    norm_weight_grad_reduce(dwq, dwk, scratch, grid, hd, stream);  // [dwq | dwk] summed over the blocks in order
}
