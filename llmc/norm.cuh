// llmc/norm.cuh: LayerNorm and RMSNorm fused with the residual add, forward and backward (floatX tensors:
// bf16, or fp32 in the fp32 build;
// fp32 statistics and accumulation). The fastest versions of dev/cuda/norm.cu.
//   fused_residual_norm_forward(resid, out, mean, rstd, x, y, w, b, N, C, eps, rms, stream)
//       resid[N,C] = floatX(x + y); out[N,C] = norm(resid) * w (+ b), computed from the rounded resid (the value
//       backward sees); mean, rstd [N] fp32 (mean = 0 for RMSNorm). b may be null; y null: no residual add
//       (out = norm(x) * w (+ b)); resid null: not written.
//   norm_backward(dres, dw, db, scratch, dout, x, w, mean, rstd, N, C, rms, stream)
//       dres[N,C] += d(norm input): the residual gradient flowing past the block gets the norm's input gradient
//       added; dw[C] (and db[C] unless null) += the weight gradients, summed in fp32 over rows in a fixed order:
//       per block of NORM_BWD_ROWS rows into scratch (norm_backward_scratch_floats(N, C) floats), then a
//       fixed-order sum over blocks. Deterministic: no float atomics, partition independent of the GPU.
// Limits: C % 8 == 0 (8-element vector access) and C <= 12288 (a row is held in registers: 6 vectors of 8 per thread).
#pragma once
#include <cuda_bf16.h>
#include "llmc/cuda_common.cuh"
#include "llmc/mma.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"

static const int NORM_MAX_C = 12288;
static const int NORM_BWD_ROWS = 32;     // rows per block in backward: fixes the summation order of dw, db
static const int NORM_BWD_THREADS = 256;

// sums two values over the block in a fixed order; red is 2 * 2 * (blockDim/32) floats of shared memory, used
// alternately by even and odd calls so one __syncthreads per call suffices
__device__ __forceinline__ float2 block_sum2(float a, float b, float* red, int parity) {
    const int warps = blockDim.x / 32, wid = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* buf = red + parity * 2 * warps;
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) {
        buf[wid] = a;
        buf[warps + wid] = b;
    }
    __syncthreads();
    float2 s = make_float2(0.0f, 0.0f);
    for (int i = 0; i < warps; i++) {
        s.x += buf[i];
        s.y += buf[warps + i];
    }
    return s;
}

// ----------------------------------------------------------------------------------------------
// forward: a row is handled by LANES threads, one warp (C <= 4096, several rows per block) or a whole block of
// 256 (larger C, one row per block); thread l of the row owns the 8-element vectors l, l + LANES, ..., V of
// them, kept in registers (packed floatX) between the three steps (sum, centred sum of squares, normalize), so
// the row is read from memory once.

static const int NORM_FWD_THREADS = 128;     // block size when a warp handles a row
static const int NORM_FWD_ROW_THREADS = 256; // block size when a block handles a row

// sum over the LANES threads of a row: a warp shuffle tree, or a fixed-order block reduction
template <int LANES>
__device__ __forceinline__ float row_sum(float v, float* red, int parity) {
    if (LANES == 32) return warp_sum(v);
    return block_sum2(v, 0.0f, red, parity).x;
}

template <int V, int LANES>
__global__ void __launch_bounds__(LANES == 32 ? NORM_FWD_THREADS : NORM_FWD_ROW_THREADS) fused_residual_norm_forward_kernel(
        floatX* __restrict__ resid, floatX* __restrict__ out, float* __restrict__ mean,
        float* __restrict__ rstd, const floatX* __restrict__ x, const floatX* __restrict__ y,
        const floatX* __restrict__ w, const floatX* __restrict__ b, int N, int C, float eps, bool rms) {
    __shared__ float red[2 * 2 * NORM_FWD_ROW_THREADS / 32];
    const int lane = threadIdx.x % LANES;
    const int row = blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES;
    if (row >= N) return;  // whole rows only: a block-per-row launch has exactly N blocks
    const int nvec = C / 8;
    const size_t base = (size_t)row * C;
    Pack8 r[V];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int v = lane + LANES * k;
        if (v >= nvec) break;
        r[k] = load8(x + base + 8 * v);
        if (y) {
            const Pack8 c = load8(y + base + 8 * v);
#pragma unroll
            for (int j = 0; j < 8; j++) r[k].v[j] = to_floatX(to_float(r[k].v[j]) + to_float(c.v[j]));
        }
#pragma unroll
        for (int j = 0; j < 8; j++) sum += to_float(r[k].v[j]);
        if (resid) store8(resid + base + 8 * v, r[k]);
    }
    const float m = rms ? 0.0f : row_sum<LANES>(sum, red, 0) / C;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        if (lane + LANES * k >= nvec) break;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float d = to_float(r[k].v[j]) - m;
            ss += d * d;
        }
    }
    const float s = rsqrtf(row_sum<LANES>(ss, red, 1) / C + eps);
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int v = lane + LANES * k;
        if (v >= nvec) break;
        Pack8 wv = load8(w + 8 * v), o;
        Pack8 bv = b ? load8(b + 8 * v) : Pack8{};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float val = (to_float(r[k].v[j]) - m) * s * to_float(wv.v[j]);
            if (b) val += to_float(bv.v[j]);
            o.v[j] = to_floatX(val);
        }
        store8(out + base + 8 * v, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// The instantiation a width C selects (the launchers' dispatch; tests/t_resources.sh lists each preset's): the
// forward's V vectors of 8 per thread and LANES threads per row, the backward's V.
struct NormFwdVariant {
    int V, lanes;
};
static NormFwdVariant norm_forward_variant(int C) {
    const int nvec = C / 8;
    if (nvec <= 32 * 4) return {4, 32};
    if (nvec <= 32 * 8) return {8, 32};
    if (nvec <= 32 * 16) return {16, 32};
    if (nvec <= NORM_FWD_ROW_THREADS * 4) return {4, NORM_FWD_ROW_THREADS};
    return {6, NORM_FWD_ROW_THREADS};
}

static int norm_backward_variant(int C) {
    const int V = (int)ceil_div(C / 8, NORM_BWD_THREADS);
    return V <= 1 ? 1 : V <= 2 ? 2 : V <= 4 ? 4 : 6;
}

static void norm_check_shape(const char* what, int N, int C) {
    if (N <= 0 || C <= 0 || C % 8 != 0 || C > NORM_MAX_C)
        die("%s: needs N > 0 and C a multiple of 8 up to %d, got N %d C %d", what, NORM_MAX_C, N, C);
}

static void fused_residual_norm_forward(floatX* resid, floatX* out, float* mean, float* rstd,
                                        const floatX* x, const floatX* y, const floatX* w,
                                        const floatX* b, int N, int C, float eps, bool rms, cudaStream_t stream) {
    norm_check_shape("fused_residual_norm_forward", N, C);
    const NormFwdVariant f = norm_forward_variant(C);
#define NORM_FWD_LAUNCH(VV, LANES, GRID, THREADS) \
    fused_residual_norm_forward_kernel<VV, LANES><<<GRID, THREADS, 0, stream>>>(resid, out, mean, rstd, x, y, w, b, N, C, eps, rms)
    const int warp_grid = (int)ceil_div(N, NORM_FWD_THREADS / 32);
    if (f.lanes == 32 && f.V == 4) NORM_FWD_LAUNCH(4, 32, warp_grid, NORM_FWD_THREADS);
    else if (f.lanes == 32 && f.V == 8) NORM_FWD_LAUNCH(8, 32, warp_grid, NORM_FWD_THREADS);
    else if (f.lanes == 32) NORM_FWD_LAUNCH(16, 32, warp_grid, NORM_FWD_THREADS);
    else if (f.V == 4) NORM_FWD_LAUNCH(4, NORM_FWD_ROW_THREADS, N, NORM_FWD_ROW_THREADS);
    else NORM_FWD_LAUNCH(6, NORM_FWD_ROW_THREADS, N, NORM_FWD_ROW_THREADS);
#undef NORM_FWD_LAUNCH
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------
// backward: one block of 256 threads per NORM_BWD_ROWS consecutive rows; thread t owns the vectors t, t+256, ...
// of every row, so it accumulates dw and db for its own columns in registers across the block's rows and the
// row is read once. The two row sums (mean of dn and of dn * xhat) are block reductions.
// C <= 4096 (V <= 2): the rows' loads run ahead. Each row (dout, x and dres) comes into shared memory by cp.async,
// NORM_BWD_STAGES - 1 rows ahead of the row being computed, so the block's loads overlap its row sums and
// barriers: a block of 32 rows waits for memory about once, not twice a row. Each thread copies and reads only its own
// vectors, so no barrier guards the stages; the values and their order are those of the loop without it.
// Larger C keeps the plain loop: one block an SM already (its rows fill the registers), and 3 stages of a row would
// take up to 216 KiB of shared memory at C 12288.

static const int NORM_BWD_STAGES = 3;  // rows in shared memory: the one computed and the two loading
static size_t norm_backward_scratch_floats(int N, int C) { return ceil_div(N, NORM_BWD_ROWS) * 2 * (size_t)C; }
// dynamic shared memory of norm_backward_kernel<V>: the staged rows, 3 tensors of C floatX per stage (V <= 2)
static size_t norm_backward_smem(int V, int C) {
    return V <= 2 ? (size_t)NORM_BWD_STAGES * 3 * C * sizeof(floatX) : 0;
}

// An empty asm that "may change" the packed row: after it the compiler must convert the row from the packed words
// again instead of keeping the first pass's fp32 values (twice the registers) across the row sum. No instruction:
// the second pass computes the same operations on the same values. Only the V = 6 instantiation (C > 8192) uses
// it: without it ptxas of nvcc 13 spills that kernel on sm_90a (255 registers; `make resources`).
__device__ __forceinline__ void norm_opaque(Pack8& p) {
    uint32_t* u = reinterpret_cast<uint32_t*>(&p);
#pragma unroll
    for (int i = 0; i < (int)(sizeof(Pack8) / 4); i++) asm volatile("" : "+r"(u[i]));
}

// dst[0 .. 8) = src[0 .. 8) by cp.async, 16 bytes at a time (one copy of bf16, two of fp32)
__device__ __forceinline__ void cp_async_pack8(Pack8* dst, const floatX* src) {
#pragma unroll
    for (int i = 0; i < (int)(sizeof(Pack8) / 16); i++) cp_async16((char*)dst + 16 * i, (const char*)src + 16 * i);
}

template <int V>
__global__ void __launch_bounds__(NORM_BWD_THREADS) norm_backward_kernel(
        floatX* __restrict__ dres, float* __restrict__ partial, const floatX* __restrict__ dout,
        const floatX* __restrict__ x, const floatX* __restrict__ w, const float* __restrict__ mean,
        const float* __restrict__ rstd, int N, int C, bool rms) {
    constexpr bool STAGED = V <= 2;
    __shared__ float red[2 * 2 * NORM_BWD_THREADS / 32];
    DYNAMIC_SMEM(stage_mem);  // STAGED: [NORM_BWD_STAGES][dout, x, dres][C] floatX
    const int nvec = C / 8, t = threadIdx.x;
    const int r0 = blockIdx.x * NORM_BWD_ROWS, r1 = min(N, r0 + NORM_BWD_ROWS);
    // this thread's vector k of tensor `which` (0 dout, 1 x, 2 dres) of the row in stage `stage`
    auto staged = [&](int stage, int which, int k) {
        return (Pack8*)stage_mem + ((size_t)stage * 3 + which) * nvec + t + NORM_BWD_THREADS * k;
    };
    // queues row `row`'s copies into stage `stage` as one group (an empty group past the last row)
    auto load_row = [&](int row, int stage) {
        if (row < r1) {
            const size_t base = (size_t)row * C;
#pragma unroll
            for (int k = 0; k < V; k++) {
                const int v = t + NORM_BWD_THREADS * k;
                if (v >= nvec) break;
                cp_async_pack8(staged(stage, 0, k), dout + base + 8 * v);
                cp_async_pack8(staged(stage, 1, k), x + base + 8 * v);
                cp_async_pack8(staged(stage, 2, k), dres + base + 8 * v);
            }
        }
        cp_async_commit();
    };
    float dw[V][8], db[V][8];
    Pack8 wv[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        if (t + NORM_BWD_THREADS * k < nvec) wv[k] = load8(w + 8 * (t + NORM_BWD_THREADS * k));
#pragma unroll
        for (int j = 0; j < 8; j++) dw[k][j] = db[k][j] = 0.0f;
    }
    if (STAGED)
        for (int i = 0; i < NORM_BWD_STAGES - 1; i++) load_row(r0 + i, i);
    for (int row = r0; row < r1; row++) {
        const size_t base = (size_t)row * C;
        const int stage = (row - r0) % NORM_BWD_STAGES;
        if (STAGED) {  // the stage read a row ago takes the row NORM_BWD_STAGES - 1 ahead; this row's group has landed
            load_row(row + NORM_BWD_STAGES - 1, (row - r0 + NORM_BWD_STAGES - 1) % NORM_BWD_STAGES);
            cp_async_wait<NORM_BWD_STAGES - 1>();
        }
        const float m = mean[row], s = rstd[row];
        Pack8 dv[V], xv[V];
        float s_dn = 0.0f, s_dnx = 0.0f;
#pragma unroll
        for (int k = 0; k < V; k++) {
            const int v = t + NORM_BWD_THREADS * k;
            if (v >= nvec) break;
            dv[k] = STAGED ? *staged(stage, 0, k) : load8(dout + base + 8 * v);
            xv[k] = STAGED ? *staged(stage, 1, k) : load8(x + base + 8 * v);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float d = to_float(dv[k].v[j]), xh = (to_float(xv[k].v[j]) - m) * s;
                float dn = d * to_float(wv[k].v[j]);
                s_dn += dn;
                s_dnx += dn * xh;
                dw[k][j] += d * xh;
                db[k][j] += d;
            }
        }
        float2 tot = block_sum2(s_dn, s_dnx, red, row & 1);
        if (V > 4) {
#pragma unroll
            for (int k = 0; k < V; k++) {
                norm_opaque(dv[k]);
                norm_opaque(xv[k]);
            }
        }
        const float m_dn = rms ? 0.0f : tot.x / C, m_dnx = tot.y / C;
#pragma unroll
        for (int k = 0; k < V; k++) {
            const int v = t + NORM_BWD_THREADS * k;
            if (v >= nvec) break;
            Pack8 g = STAGED ? *staged(stage, 2, k) : load8(dres + base + 8 * v);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float xh = (to_float(xv[k].v[j]) - m) * s;
                float dn = to_float(dv[k].v[j]) * to_float(wv[k].v[j]);
                g.v[j] = to_floatX(to_float(g.v[j]) + s * (dn - m_dn - xh * m_dnx));
            }
            store8(dres + base + 8 * v, g);
        }
    }
    float* pw = partial + (size_t)blockIdx.x * 2 * C;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int v = t + NORM_BWD_THREADS * k;
        if (v >= nvec) break;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            pw[8 * v + j] = dw[k][j];
            pw[C + 8 * v + j] = db[k][j];
        }
    }
}

// dw[c] += sum over blocks of partial[blk][c], db[c] += sum of partial[blk][C + c], in a fixed order:
// a block of 32 columns x 8 slices; slice s sums blocks s, s+8, ..., then slice sums are added in order. A slice
// loads 16 of its blocks before it adds them (in the same order): 16 loads in flight per thread, not one chain of
// dependent round trips (the grid is small: 2C / 32 blocks).
__global__ void norm_weight_grad_reduce_kernel(floatX* __restrict__ dw, floatX* __restrict__ db,
                                               const float* __restrict__ partial, int nblocks, int C) {
    __shared__ float sums[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x, slice = threadIdx.y;  // col in [0, 2C)
    const int AHEAD = 16;
    float s = 0.0f;
    if (col < 2 * C) {
        int blk = slice;
        for (; blk + 8 * (AHEAD - 1) < nblocks; blk += 8 * AHEAD) {
            float v[AHEAD];
#pragma unroll
            for (int u = 0; u < AHEAD; u++) v[u] = partial[(size_t)(blk + 8 * u) * 2 * C + col];
#pragma unroll
            for (int u = 0; u < AHEAD; u++) s += v[u];
        }
        for (; blk < nblocks; blk += 8) s += partial[(size_t)blk * 2 * C + col];
    }
    sums[slice][threadIdx.x] = s;
    __syncthreads();
    if (slice != 0 || col >= 2 * C) return;
    float tot = 0.0f;
    for (int i = 0; i < 8; i++) tot += sums[i][threadIdx.x];
    if (col < C) dw[col] = to_floatX(to_float(dw[col]) + tot);
    else if (db) db[col - C] = to_floatX(to_float(db[col - C]) + tot);
}

static void norm_weight_grad_reduce(floatX* dw, floatX* db, const float* partial, int nblocks, int C,
                                    cudaStream_t stream) {
    norm_weight_grad_reduce_kernel<<<(int)ceil_div(2 * (size_t)C, 32), dim3(32, 8), 0, stream>>>(dw, db, partial, nblocks, C);
    cudaCheck(cudaGetLastError());
}

static void norm_backward(floatX* dres, floatX* dw, floatX* db, float* scratch,
                          const floatX* dout, const floatX* x, const floatX* w, const float* mean,
                          const float* rstd, int N, int C, bool rms, cudaStream_t stream) {
    norm_check_shape("norm_backward", N, C);
    const int grid = (int)ceil_div(N, NORM_BWD_ROWS);
    const int V = norm_backward_variant(C);
    const size_t smem = norm_backward_smem(V, C);
    // the staged rows pass 48 KiB above C = 2730 in bf16: the kernel is allowed more, once (one device a process)
#define NORM_BWD_LAUNCH(VV)                                                                                        \
    do {                                                                                                          \
        static size_t allowed = 48 * 1024;                                                                        \
        if (smem > allowed) {                                                                                     \
            cudaCheck(cudaFuncSetAttribute(norm_backward_kernel<VV>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                           (int)smem));                                                           \
            allowed = smem;                                                                                       \
        }                                                                                                         \
        norm_backward_kernel<VV><<<grid, NORM_BWD_THREADS, smem, stream>>>(dres, scratch, dout, x, w, mean, rstd, \
                                                                           N, C, rms);                            \
    } while (0)
    if (V == 1) NORM_BWD_LAUNCH(1);
    else if (V == 2) NORM_BWD_LAUNCH(2);
    else if (V == 4) NORM_BWD_LAUNCH(4);
    else NORM_BWD_LAUNCH(6);
#undef NORM_BWD_LAUNCH
    cudaCheck(cudaGetLastError());
    norm_weight_grad_reduce(dw, db, scratch, grid, C, stream);
}
