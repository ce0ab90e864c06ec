// llmc/packed.cuh: the small device helpers the memory-bound kernels of llmc/*.cuh share.
//   Pack8            8 bf16 values in 16 bytes: one 128-bit load or store (the widest a thread can issue)
//   load8 / store8   aligned 128-bit global access of 8 consecutive bf16
//   warp_sum         fp32 sum over a warp by butterfly shuffles (every lane gets the same, fixed-order result)
//   ceil_div
#pragma once
#include <cuda_bf16.h>

struct alignas(16) Pack8 {
    __nv_bfloat16 v[8];
};

__device__ __forceinline__ Pack8 load8(const __nv_bfloat16* p) { return *(const Pack8*)p; }
__device__ __forceinline__ void store8(__nv_bfloat16* p, const Pack8& x) { *(Pack8*)p = x; }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static inline __host__ __device__ size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
