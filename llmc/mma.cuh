// llmc/mma.cuh: the inline-PTX primitives of the tensor-core kernels (llmc/attention.cuh), in one header, and
// the declaration of a kernel's dynamic shared memory:
//   mma_bf16_16816(d, a, b0, b1)     d[16x8] += a[16x16] * b[16x8], bf16 in, fp32 accumulate (mma.sync m16n8k16)
//   mma_f16_16816(d, a, b0, b1)      the same with fp16 in (the fp16 build's)
//   ldmatrix_x4(r, row)              four 8x8 tiles of 16-bit values from shared memory, one fragment register each
//   ldmatrix_x4_trans(r, row)        the same, each tile transposed
//   lds32(p)                         one 32-bit shared-memory load (two 16-bit values: a fragment register)
//   cp_async16(smem, gmem)           16-byte global -> shared copy that bypasses the registers (cp.async)
//   cp_async_commit()                closes this thread's group of cp.async copies
//   cp_async_wait<N>()               waits until at most the newest N groups of this thread are in flight
//   DYNAMIC_SMEM(name);              declares unsigned char name[]: the block's dynamic shared memory, 16-byte aligned
// Fragment layouts (PTX ISA, m16n8k16 with .bf16 or .f16: the same), with g = lane / 4 and q = lane % 4; each 32-bit
// register holds two 16-bit values, the lower index in the low half:
//   a[4] of A[16][16] (row-major): a0 (row g, cols 2q, 2q+1) a1 (row g+8, cols 2q..) a2 (row g, cols 2q+8..)
//                                  a3 (row g+8, cols 2q+8..)
//   b0, b1 of B[16][8] (k x n):    b0 (rows 2q, 2q+1, col g) b1 (rows 2q+8, 2q+9, col g)
//   d[4] of D[16][8] (fp32):       d0, d1 (row g, cols 2q, 2q+1) d2, d3 (row g+8, cols 2q, 2q+1)
//   ldmatrix: lane l gives the address of row l % 8 of tile l / 8 (16 contiguous bytes, 16-byte aligned).
//     Plain: register i holds (row g; cols 2q, 2q+1) of tile i, the a / b fragment of a matrix stored with
//     k contiguous. Transposed: register i holds (rows 2q, 2q+1; col g) of tile i, the b fragment of a
//     row-major [k][n] matrix.
// The CUDA emulation replaces this header: tests/cuda_emu/include/llmc/mma.cuh defines the same functions
// and macro on the host (the race detector watches lds32, ldmatrix and cp.async). Its builds put
// tests/cuda_emu/include first on the include path, so every #include "llmc/mma.cuh" finds that file
// before this one; only nvcc reads this one (the check below names a wrong include order).
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

#ifndef __CUDACC__
#error "llmc/mma.cuh holds inline PTX for nvcc; a host build (tests/cuda_emu) must find tests/cuda_emu/include/llmc/mma.cuh first (-I order)"
#endif

#define DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

// d[4] += A[16x16] * B[16x8]; a: 4 registers of bf16x2, b0, b1: 2 (layouts above)
__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// the same, a and b holding fp16 pairs
__device__ __forceinline__ void mma_f16_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// r[4]: four 8x8 tiles; smem_row: this lane's row address (layouts above)
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* smem_row) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem_row) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// p: a shared-memory address, 4-byte aligned
__device__ __forceinline__ uint32_t lds32(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }

// 16 bytes, both addresses 16-byte aligned; the data is in shared memory after this thread's
// cp_async_wait retires the copy's group (and visible to other threads after the next __syncthreads).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
