// llmc/grad_norm.cuh: the global gradient L2 norm and the clipping coefficient, deterministic. The fastest
// version of dev/cuda/global_norm.cu.
//   global_norm(out, partial, grads, n, clip, stream, inv_scale)   grads [n] bf16 or fp32 (the flat gradient buffer),
//       the true gradients times the loss scale S = 1 / inv_scale (llmc/loss_scale.h; default 1: none)
//       out[0] = norm = sqrt(sum of grads^2) / S, out[1] = min(1, clip / (norm + 1e-6)) / S (1 / S when clip <= 0),
//       as torch.nn.utils.clip_grad_norm_ (clip_coef, llmc/grad_clip.h) of the unscaled gradients; AdamW reads
//       out + 1 as its grad scale.
//       partial: GLOBAL_NORM_BLOCKS floats of scratch.
// Deterministic: the partition is fixed (GLOBAL_NORM_BLOCKS blocks of GLOBAL_NORM_THREADS threads whatever the
// GPU; thread j of the grid sums 8-element vectors j, j + G, j + 2G, ... in order), each block reduces its
// threads in a fixed tree, and one block sums the partials in a fixed tree. No float atomics anywhere, so the
// result is bitwise identical from run to run and GPU to GPU. All sums are fp32.
#pragma once
#include <cuda_bf16.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"
#include "llmc/grad_clip.h"

static const int GLOBAL_NORM_BLOCKS = 1024;
static const int GLOBAL_NORM_THREADS = 256;

// x^2 summed over 8 consecutive values (bf16 or fp32), in order
template <typename T>
__device__ __forceinline__ float sumsq8(const T* p) {
    Vec8<T> x = load8(p);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float f = to_float(x.v[j]);
        s += f * f;
    }
    return s;
}

// fixed-order sum of v over the block (blockDim.x == GLOBAL_NORM_THREADS), returned to thread 0
__device__ __forceinline__ float block_sum_fixed(float v) {
    __shared__ float warps[GLOBAL_NORM_THREADS / 32];
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x == 0)
        for (int i = 0; i < GLOBAL_NORM_THREADS / 32; i++) s += warps[i];
    return s;
}

// partial[blockIdx.x] = sum of squares of this block's share; four vectors are loaded before they are summed,
// so four 128-bit loads per thread are in flight
template <typename T>
__global__ void __launch_bounds__(GLOBAL_NORM_THREADS) global_norm_partial_kernel(float* __restrict__ partial,
                                                                                  const T* __restrict__ g, size_t n) {
    const size_t G = (size_t)GLOBAL_NORM_BLOCKS * GLOBAL_NORM_THREADS, nvec = n / 8;
    const size_t j = blockIdx.x * (size_t)GLOBAL_NORM_THREADS + threadIdx.x;
    float s = 0.0f;
    size_t v = j;
    for (; v + 3 * G < nvec; v += 4 * G) {
        float a = sumsq8(g + 8 * v), b = sumsq8(g + 8 * (v + G)), c = sumsq8(g + 8 * (v + 2 * G)), d = sumsq8(g + 8 * (v + 3 * G));
        s += a;
        s += b;
        s += c;
        s += d;
    }
    for (; v < nvec; v += G) s += sumsq8(g + 8 * v);
    if (j < n % 8) {  // the last n % 8 elements, one per thread of the first block
        float x = to_float(g[8 * nvec + j]);
        s += x * x;
    }
    float tot = block_sum_fixed(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = tot;
}

// one block: each thread sums GLOBAL_NORM_BLOCKS / GLOBAL_NORM_THREADS partials in order, then the block tree
__global__ void global_norm_final_kernel(float* __restrict__ out, const float* __restrict__ partial, float clip,
                                         float inv_scale) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < GLOBAL_NORM_BLOCKS; i += GLOBAL_NORM_THREADS) s += partial[i];
    float tot = block_sum_fixed(s);
    if (threadIdx.x == 0) {
        float norm;
        out[1] = unscaled_clip(sqrtf(tot), clip, inv_scale, &norm);
        out[0] = norm;
    }
}

template <typename T>
static void global_norm(float* out, float* partial, const T* grads, size_t n, float clip, cudaStream_t stream,
                        float inv_scale = 1.0f) {
    if (n == 0) die("global_norm: empty gradient buffer");
    if (((uintptr_t)grads & 15) != 0) die("global_norm: the gradient buffer is not 16-byte aligned");
    global_norm_partial_kernel<T><<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, stream>>>(partial, grads, n);
    cudaCheck(cudaGetLastError());
    global_norm_final_kernel<<<1, GLOBAL_NORM_THREADS, 0, stream>>>(out, partial, clip, inv_scale);
    cudaCheck(cudaGetLastError());
}
