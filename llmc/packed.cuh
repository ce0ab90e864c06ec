// llmc/packed.cuh: the small device helpers the memory-bound kernels of llmc/*.cuh share.
//   Vec8<T>          8 consecutive elements: 16 bytes of bf16 (one 128-bit access, the widest a thread can
//                    issue) or 32 bytes of fp32 (two); Pack8 = Vec8<floatX>
//   load8 / store8   aligned vector access of 8 consecutive elements (16-byte aligned pointers)
//   warp_sum         fp32 sum over a warp by butterfly shuffles (every lane gets the same, fixed-order result)
//   ceil_div
#pragma once
#include <cuda_bf16.h>
#include "llmc/precision.cuh"

template <typename T>
struct alignas(16) Vec8 {
    T v[8];
};
typedef Vec8<floatX> Pack8;

template <typename T>
__device__ __forceinline__ Vec8<T> load8(const T* p) { return *(const Vec8<T>*)p; }
template <typename T>
__device__ __forceinline__ void store8(T* p, const Vec8<T>& x) { *(Vec8<T>*)p = x; }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static inline __host__ __device__ size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
