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
//   Hopper (sm_90a; below, with their layouts): wgmma_fence, wgmma_ss_n64, wgmma_ss_n128, wgmma_rs_n64,
//   wgmma_rs_n128, wgmma_commit, wgmma_wait<N> (the warpgroup's asynchronous product), wgmma_fence_operands,
//   fence_proxy_async, wgmma_desc, smem_align1024, smem_u32
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

// ---- Hopper (sm_90a): wgmma, the warpgroup's asynchronous matrix product -----------------------------
// A warpgroup is 4 consecutive warps (128 threads, the first warp's index a multiple of 4); all of them issue each of
// these together. D[64 x N] fp32 lives in registers, warp w of the group holding rows 16w..16w+15 in the m16n8k16
// accumulator layout repeated over the N/8 column tiles: d[4j + e] is (row 16w + g + 8 (e / 2), column 8j + 2q + e % 2).
// A [64 x 16] comes from shared memory through a descriptor, or from registers (a[4]: warp w's 16 rows as the m16n8k16
// A fragment); B [16 x N] from shared memory through a descriptor. floatX in (bf16, or fp16 in the fp16 build), fp32
// accumulate. The product is asynchronous:
//   wgmma_fence()          before the first product, and after this thread touched the accumulators or the A
//                          registers of a product to come (PTX: wgmma.fence)
//   wgmma_ss_n64, wgmma_ss_n128, wgmma_rs_n64, wgmma_rs_n128   queue one product (accumulate 0: D = A B, 1: D += A B)
//   wgmma_commit()         closes the group of products queued since the last commit
//   wgmma_wait<N>()        waits until at most the newest N groups are in flight; before it, the accumulators and the
//                          A registers of a queued product must not be read or written
//   fence_proxy_async()    makes this thread's earlier writes to shared memory (stores, cp.async) visible to wgmma's
//                          reads (PTX: fence.proxy.async; wgmma reads through the async proxy); then a barrier
//   wgmma_fence_operands(x)   pins this thread's accesses to the registers x (accumulators, A) on their side of the
//                          fence and the wait: called on every product's registers right before wgmma_fence and right
//                          after wgmma_wait. Without it the compiler may move, say, the rescaling of the accumulators
//                          past wgmma_fence (nvcc 13 does), which PTX leaves undefined; scripts/wgmma_ptx_check.py
//                          reads the rule back from the PTX (tests/t_resources.sh)
// Shared-memory layout (the only one used here and emulated): 128-byte swizzle. A tile of R rows of 64 floatX (128
// bytes) starts at a 1024-byte aligned address; row r's 16-byte chunk c sits at chunk c ^ (r % 8) of the row (the
// swizzle XORs address bits 4-6 with bits 7-9). Wider rows are split into such 64-column tiles. A descriptor
// (wgmma_desc) gives the start address, LBO and SBO:
//   K-major operand (A, or B not transposed: rows of the M or N side, 16 K values contiguous): row r's K values at
//     start + (r / 8) SBO + (r % 8) 128 bytes; SBO = 1024 for a dense tile; a K step of 16 adds 32 bytes to start.
//   MN-major B (TB = 1, the N side contiguous: B[k][n] = tile row k, column n): column n of row k at start +
//     (n / 64) LBO + (k / 8) SBO + (k % 8) 128 + 2 (n % 64) bytes; LBO = the distance between 64-column tiles.
// Where ptxas does not target sm_90a, the functions trap; the caller launches them only where wgmma_supported().
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMC_WGMMA 1
#endif
#ifdef ENABLE_FP16
#define LLMC_WGMMA_TYPE "f16"
#else
#define LLMC_WGMMA_TYPE "bf16"
#endif

// the shared-memory address (the shared window's offset) of p
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// p moved up to the next 1024-byte aligned shared address (a swizzled tile's alignment)
__device__ __forceinline__ unsigned char* smem_align1024(unsigned char* p) {
    return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u);
}
// the matrix descriptor of the 128-byte swizzled layout at tile (LBO and SBO in bytes, multiples of 16)
__device__ __forceinline__ uint64_t wgmma_desc(const void* tile, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((smem_u32(tile) & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);  // bits 62-63: 1 = 128-byte swizzle
}
// an empty asm that reads and writes x: the compiler keeps this thread's earlier and later accesses to x on their side
template <int R, int C>
__device__ __forceinline__ void wgmma_fence_operands(float (&x)[R][C]) {
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) asm volatile("" : "+f"(x[i][j])::"memory");
}
template <int R, int C>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&x)[R][C]) {
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) asm volatile("" : "+r"(x[i][j])::"memory");
}
__device__ __forceinline__ void wgmma_fence() {
#ifdef LLMC_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef LLMC_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef LLMC_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async() {
#ifdef LLMC_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// d[32] (+)= A B, A [64 x 16] and B [16 x 64] from shared memory; TB: B MN-major
template <int TB>
__device__ __forceinline__ void wgmma_ss_n64(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
#ifdef LLMC_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." LLMC_WGMMA_TYPE "." LLMC_WGMMA_TYPE " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, %35;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TB));
#else
    (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
    __trap();
#endif
}
// d[64] (+)= A B, A [64 x 16] and B [16 x 128] from shared memory; TB: B MN-major
template <int TB>
__device__ __forceinline__ void wgmma_ss_n128(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
#ifdef LLMC_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." LLMC_WGMMA_TYPE "." LLMC_WGMMA_TYPE " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, %67;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TB));
#else
    (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
    __trap();
#endif
}
// d[32] (+)= A B, A [64 x 16] from registers, B [16 x 64] from shared memory; TB: B MN-major
template <int TB>
__device__ __forceinline__ void wgmma_rs_n64(float* d, const uint32_t* a, uint64_t desc_b, int accumulate) {
#ifdef LLMC_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." LLMC_WGMMA_TYPE "." LLMC_WGMMA_TYPE " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TB));
#else
    (void)d, (void)a, (void)desc_b, (void)accumulate;
    __trap();
#endif
}
// d[64] (+)= A B, A [64 x 16] from registers, B [16 x 128] from shared memory; TB: B MN-major
template <int TB>
__device__ __forceinline__ void wgmma_rs_n128(float* d, const uint32_t* a, uint64_t desc_b, int accumulate) {
#ifdef LLMC_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." LLMC_WGMMA_TYPE "." LLMC_WGMMA_TYPE " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TB));
#else
    (void)d, (void)a, (void)desc_b, (void)accumulate;
    __trap();
#endif
}
