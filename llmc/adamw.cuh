// llmc/adamw.cuh: the multi-tensor AdamW update, one launch over every parameter tensor. The fastest version of
// dev/cuda/adamw.cu. PyTorch's AdamW exactly as train_gpt_cpu.cpp adamw_update, per element in fp32:
//   g = grad * grad_scale              grad_scale (the clipping coefficient) is read from device memory
//   p = p * (1 - lr * wd)              wd = weight_decay for matrices, 0 for vectors (the tensor's entry)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps),  bc1 = 1 - beta1^t, bc2 = 1 - beta2^t
//   param = floatX(p)
// p is the fp32 master weight; m, v are fp32 or bf16 (Moment = float or __nv_bfloat16; bf16 moments are
// stored rounded to nearest after the update, which uses their fp32 values). grad is floatX (Grad, the default)
// or fp32 (Grad = float: the data-parallel trainer's reduced fp32 gradients).
//   AdamWTensor<Moment, Grad>           one tensor: its pointers, size, weight decay (table built on the host)
//   AdamWTable<Moment, Grad> adamw_table_upload(host tensors)   the device copy of the table and the block prefix
//   adamw_update(table, hyper, step t, grad_scale, stream)
//   AdamWTables                         the four kinds of table (moments fp32 / bf16, gradients floatX / fp32), one built
// Blocks are assigned to tensors by a prefix sum of each tensor's block count; a block finds its tensor by
// binary search in the device table and updates ADAMW_BLOCK_ELEMS elements of it, 8 per thread with 128-bit
// (bf16) and 2x128-bit (fp32) accesses. Each tensor's size must be a multiple of 8 and its pointers 16-byte
// aligned (true for the trainer's tables when C % 8 == 0; adamw_table_upload checks).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>
#include <cuda_bf16.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"

static const int ADAMW_THREADS = 256;
static const int ADAMW_BLOCK_ELEMS = ADAMW_THREADS * 8;

template <typename Moment, typename Grad = floatX>
struct AdamWTensor {
    floatX* param;                // [n] model weights (bf16, or fp32 in the fp32 build; written)
    const Grad* grad;             // [n] gradients
    float* master;                // [n] fp32 master weights
    Moment* m;                    // [n] first moment
    Moment* v;                    // [n] second moment
    size_t n;
    float weight_decay;           // 0 for vectors (biases, norm weights)
    size_t first_block;           // filled by adamw_table_upload: this tensor's first block in the launch
};

template <typename Moment, typename Grad = floatX>
struct AdamWTable {
    AdamWTensor<Moment, Grad>* d_tensors;  // device copy
    int count;
    size_t blocks;                   // total blocks of one launch
};

struct AdamWHyper {
    float lr, beta1, beta2, eps;
};

// 8 values at p (fp32 or bf16) into f[8], and back (rounded to nearest in bf16)
template <typename T>
__device__ __forceinline__ void moment_load8(const T* p, float* f) {
    Vec8<T> x = load8(p);
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = to_float(x.v[j]);
}
template <typename T>
__device__ __forceinline__ void moment_store8(T* p, const float* f) {
    Vec8<T> x;
#pragma unroll
    for (int j = 0; j < 8; j++) x.v[j] = (T)f[j];
    store8(p, x);
}

// One element of the update; every version of dev/cuda/adamw.cu calls this, so they agree to the last bit.
// step = lr / bc1, rsbc2 = 1 / sqrt(bc2), decay = 1 - lr * wd.
__device__ __forceinline__ void adamw_element(float* p, float* m, float* v, float g, float decay, float beta1,
                                              float beta2, float eps, float step, float rsbc2) {
    *p *= decay;
    *m = beta1 * *m + (1.0f - beta1) * g;
    *v = beta2 * *v + (1.0f - beta2) * g * g;
    *p -= step * *m / (sqrtf(*v) * rsbc2 + eps);
}

// index of the tensor whose block range holds block b: the last i with first_block <= b
template <typename Moment, typename Grad>
__device__ __forceinline__ int adamw_find_tensor(const AdamWTensor<Moment, Grad>* t, int count, size_t b) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t[mid].first_block <= b) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

template <typename Moment, typename Grad>
__global__ void __launch_bounds__(ADAMW_THREADS) adamw_kernel(const AdamWTensor<Moment, Grad>* __restrict__ tensors,
                                                              int count, AdamWHyper h, float step, float rsbc2,
                                                              const float* __restrict__ grad_scale) {
    const AdamWTensor<Moment, Grad> t = tensors[adamw_find_tensor(tensors, count, blockIdx.x)];
    const size_t i = (blockIdx.x - t.first_block) * (size_t)ADAMW_BLOCK_ELEMS + 8 * threadIdx.x;
    if (i >= t.n) return;
    const float gs = *grad_scale, decay = 1.0f - h.lr * t.weight_decay;
    Vec8<Grad> g = load8(t.grad + i);
    Pack8 out;
    float p[8], m[8], v[8];
    moment_load8(t.master + i, p);
    moment_load8(t.m + i, m);
    moment_load8(t.v + i, v);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        adamw_element(&p[j], &m[j], &v[j], to_float(g.v[j]) * gs, decay, h.beta1, h.beta2, h.eps, step, rsbc2);
        out.v[j] = to_floatX(p[j]);
    }
    moment_store8(t.master + i, p);
    moment_store8(t.m + i, m);
    moment_store8(t.v + i, v);
    store8(t.param + i, out);
}

static bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// Fills first_block, checks sizes and alignment, and copies the table to the device (once per run).
template <typename Moment, typename Grad>
static AdamWTable<Moment, Grad> adamw_table_upload(std::vector<AdamWTensor<Moment, Grad>> tensors) {
    if (tensors.empty()) die("adamw_table_upload: the parameter table is empty");
    size_t blocks = 0;
    for (size_t k = 0; k < tensors.size(); k++) {
        AdamWTensor<Moment, Grad>& t = tensors[k];
        if (t.n == 0 || t.n % 8 != 0)
            die("adamw_table_upload: tensor %zu has %zu elements; the update needs a non-zero multiple of 8", k, t.n);
        if (!aligned16(t.param) || !aligned16(t.grad) || !aligned16(t.master) || !aligned16(t.m) || !aligned16(t.v))
            die("adamw_table_upload: tensor %zu has a pointer that is not 16-byte aligned (tensor offsets must be "
                "multiples of 8 elements)", k);
        t.first_block = blocks;
        blocks += ceil_div(t.n, ADAMW_BLOCK_ELEMS);
    }
    if (blocks > 0x7fffffffull) die("adamw_table_upload: %zu blocks exceed one launch's grid", blocks);
    AdamWTable<Moment, Grad> table;
    table.count = (int)tensors.size();
    table.blocks = blocks;
    cudaCheck(cudaMalloc(&table.d_tensors, tensors.size() * sizeof(AdamWTensor<Moment, Grad>)));
    cudaCheck(cudaMemcpy(table.d_tensors, tensors.data(), tensors.size() * sizeof(AdamWTensor<Moment, Grad>),
                         cudaMemcpyHostToDevice));
    return table;
}

template <typename Moment, typename Grad>
static void adamw_table_free(AdamWTable<Moment, Grad>* table) {
    cudaCheck(cudaFree(table->d_tensors));
    table->d_tensors = nullptr;
}

// A trainer's one table, of the kind its run needs: fp32 or bf16 moments, floatX or fp32 gradients. The one built
// (count > 0) is the one adamw_update runs and adamw_tables_free frees.
struct AdamWTables {
    AdamWTable<float> f32{};                      // floatX gradients
    AdamWTable<__nv_bfloat16> bf16{};
    AdamWTable<float, float> f32_g32{};           // fp32 gradients
    AdamWTable<__nv_bfloat16, float> bf16_g32{};
};
static void adamw_tables_free(AdamWTables* t) {
    if (t->f32.count) adamw_table_free(&t->f32);
    if (t->bf16.count) adamw_table_free(&t->bf16);
    if (t->f32_g32.count) adamw_table_free(&t->f32_g32);
    if (t->bf16_g32.count) adamw_table_free(&t->bf16_g32);
}

// bias-corrected step size and 1/sqrt(bc2) for 1-based step t, computed in double on the host as
// train_gpt_cpu.cpp does, then passed as fp32
static void adamw_step_constants(const AdamWHyper& h, int t, float* step, float* rsbc2) {
    double bc1 = 1.0 - std::pow((double)h.beta1, t), bc2 = 1.0 - std::pow((double)h.beta2, t);
    *step = (float)(h.lr / bc1);
    *rsbc2 = (float)(1.0 / std::sqrt(bc2));
}

template <typename Moment, typename Grad>
static void adamw_update(const AdamWTable<Moment, Grad>& table, const AdamWHyper& h, int t, const float* grad_scale,
                         cudaStream_t stream) {
    float step, rsbc2;
    adamw_step_constants(h, t, &step, &rsbc2);
    adamw_kernel<Moment, Grad><<<(unsigned)table.blocks, ADAMW_THREADS, 0, stream>>>(table.d_tensors, table.count, h,
                                                                                      step, rsbc2, grad_scale);
    cudaCheck(cudaGetLastError());
}

static void adamw_update(const AdamWTables& t, const AdamWHyper& h, int step, const float* grad_scale,
                         cudaStream_t stream) {
    if (t.f32.count) adamw_update(t.f32, h, step, grad_scale, stream);
    if (t.bf16.count) adamw_update(t.bf16, h, step, grad_scale, stream);
    if (t.f32_g32.count) adamw_update(t.f32_g32, h, step, grad_scale, stream);
    if (t.bf16_g32.count) adamw_update(t.bf16_g32, h, step, grad_scale, stream);
}
