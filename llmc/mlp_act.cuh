// llmc/mlp_act.cuh: the MLP activations, forward and backward, floatX tensors with fp32 math (as llmc/ref_ops.h
// mlp_act_forward / mlp_act_backward). The fastest versions of dev/cuda/mlp_act.cu.
//   gelu_forward(act, fc1, n, stream)            act[n] = gelu_tanh(fc1[n])
//   gelu_backward(dfc1, dact, fc1, n, stream)    dfc1[n] = dact * gelu_tanh'(fc1) (overwritten)
//   swiglu_forward(act, fc1, N, F, stream)       act[N,F] = silu(gate) * up, fc1[N,2F] = [gate | up] per row
//   swiglu_backward(dfc1, dact, fc1, N, F, stream)   dfc1[N,2F] = [dact * up * silu'(gate) | dact * silu(gate)]
// Each thread handles 8 consecutive elements with vector loads and stores (128-bit in bf16), grid-stride (swiglu_backward:
// one vector per thread, in address order). Needs n % 8 == 0 and F % 8 == 0.
#pragma once
#include <algorithm>
#include <cuda_bf16.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"

static const float GELU_K = 0.7978845608028654f;  // sqrt(2/pi)
static const float GELU_C = 0.044715f;

// gelu_tanh(x) = 0.5 x (1 + tanh u), u = K (x + C x^3), written with s = (1 + tanh u) / 2 = 1 / (1 + e^-2u) and
// s' = (1 - tanh u) / 2 = e^-2u s, so that 1 - tanh^2 u = 4 s s' is had without cancellation. Not tanhf: under
// --use_fast_math it is the hardware's tanh.approx (relative error about 2^-11), and the derivative's two terms cancel
// near x = -0.75, where that error is all that is left (gelu_backward failed its check on an H100 by it). e^-2u is
// kept finite (u >= -40), so s' is never inf * 0.
__device__ __forceinline__ float gelu_tanh_f(float x) {
    const float u = GELU_K * (x + GELU_C * x * x * x);
    return x / (1.0f + __expf(fminf(-2.0f * u, 80.0f)));
}

__device__ __forceinline__ float gelu_tanh_grad_f(float x) {
    const float u = GELU_K * (x + GELU_C * x * x * x);
    const float e = __expf(fminf(-2.0f * u, 80.0f));
    const float s = 1.0f / (1.0f + e), s_minus = e * s;  // (1 + tanh u) / 2, (1 - tanh u) / 2
    return s + 2.0f * x * s * s_minus * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }

static int mlp_act_grid(size_t vectors) {
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return (int)std::min<size_t>(ceil_div(vectors, 256), (size_t)sms * 16);  // grid-stride beyond 16 blocks per SM
}

__global__ void gelu_forward_kernel(floatX* __restrict__ act, const floatX* __restrict__ fc1, size_t nvec) {
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < nvec; v += (size_t)gridDim.x * blockDim.x) {
        Pack8 x = load8(fc1 + 8 * v), o;
#pragma unroll
        for (int j = 0; j < 8; j++) o.v[j] = to_floatX(gelu_tanh_f(to_float(x.v[j])));
        store8(act + 8 * v, o);
    }
}

__global__ void gelu_backward_kernel(floatX* __restrict__ dfc1, const floatX* __restrict__ dact,
                                     const floatX* __restrict__ fc1, size_t nvec) {
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < nvec; v += (size_t)gridDim.x * blockDim.x) {
        Pack8 x = load8(fc1 + 8 * v), d = load8(dact + 8 * v), o;
#pragma unroll
        for (int j = 0; j < 8; j++)
            o.v[j] = to_floatX(to_float(d.v[j]) * gelu_tanh_grad_f(to_float(x.v[j])));
        store8(dfc1 + 8 * v, o);
    }
}

// vector v covers act[n, 8f .. 8f+7] with n = v / (F/8), f = v % (F/8)
__global__ void swiglu_forward_kernel(floatX* __restrict__ act, const floatX* __restrict__ fc1, int N, int F) {
    const size_t per_row = F / 8, nvec = (size_t)N * per_row;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < nvec; v += (size_t)gridDim.x * blockDim.x) {
        const size_t n = v / per_row, f = 8 * (v % per_row);
        Pack8 g = load8(fc1 + n * 2 * F + f), u = load8(fc1 + n * 2 * F + F + f), o;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float gj = to_float(g.v[j]);
            o.v[j] = to_floatX(gj * sigmoid_f(gj) * to_float(u.v[j]));
        }
        store8(act + n * F + f, o);
    }
}

// One vector per thread and no grid-stride loop: the blocks cover dact in address order. In the grid-stride form of
// the other kernels (at most 16 blocks an SM, each looping) this kernel measured 53.8% of the copy ceiling on an H100,
// against 72.8% for one element per thread in address order (dev/cuda/mlp_act.cu, versions 2 and 1), while the
// forward kernels, with three streams where this has five (gate, up and dact read, two gradients written), reach
// 94% in it. The likely cause: the looping warps drift apart, and five streams then keep many more DRAM pages open
// at once. This form keeps version 1's order with 16-byte accesses (version 3; not yet measured on a GPU).
__global__ void swiglu_backward_kernel(floatX* __restrict__ dfc1, const floatX* __restrict__ dact,
                                       const floatX* __restrict__ fc1, int N, int F) {
    const size_t per_row = F / 8, v = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (v >= (size_t)N * per_row) return;
    const size_t n = v / per_row, f = 8 * (v % per_row);
    Pack8 g = load8(fc1 + n * 2 * F + f), u = load8(fc1 + n * 2 * F + F + f), d = load8(dact + n * F + f), dg, du;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float gj = to_float(g.v[j]), uj = to_float(u.v[j]), dj = to_float(d.v[j]);
        float sig = sigmoid_f(gj);
        dg.v[j] = to_floatX(dj * uj * sig * (1.0f + gj * (1.0f - sig)));
        du.v[j] = to_floatX(dj * gj * sig);
    }
    store8(dfc1 + n * 2 * F + f, dg);
    store8(dfc1 + n * 2 * F + F + f, du);
}

static void mlp_act_check(const char* what, size_t n, int F) {
    if (n == 0 || n % 8 != 0 || F % 8 != 0) die("%s: needs a non-empty size that is a multiple of 8 (n %zu, F %d)", what, n, F);
}

static void gelu_forward(floatX* act, const floatX* fc1, size_t n, cudaStream_t stream) {
    mlp_act_check("gelu_forward", n, 8);
    gelu_forward_kernel<<<mlp_act_grid(n / 8), 256, 0, stream>>>(act, fc1, n / 8);
    cudaCheck(cudaGetLastError());
}

static void gelu_backward(floatX* dfc1, const floatX* dact, const floatX* fc1, size_t n, cudaStream_t stream) {
    mlp_act_check("gelu_backward", n, 8);
    gelu_backward_kernel<<<mlp_act_grid(n / 8), 256, 0, stream>>>(dfc1, dact, fc1, n / 8);
    cudaCheck(cudaGetLastError());
}

static void swiglu_forward(floatX* act, const floatX* fc1, int N, int F, cudaStream_t stream) {
    mlp_act_check("swiglu_forward", (size_t)N * F, F);
    swiglu_forward_kernel<<<mlp_act_grid((size_t)N * F / 8), 256, 0, stream>>>(act, fc1, N, F);
    cudaCheck(cudaGetLastError());
}

static void swiglu_backward(floatX* dfc1, const floatX* dact, const floatX* fc1, int N, int F,
                            cudaStream_t stream) {
    mlp_act_check("swiglu_backward", (size_t)N * F, F);
    swiglu_backward_kernel<<<(unsigned)ceil_div((size_t)N * F / 8, 256), 256, 0, stream>>>(dfc1, dact, fc1, N, F);
    cudaCheck(cudaGetLastError());
}
