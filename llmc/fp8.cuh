// llmc/fp8.cuh: fp8 tensors with per-tensor scales, what the fp8 GEMMs (llmc/matmul_fp8.cuh) need around them.
//   Fp8Format, Fp8Traits<F8>   E4M3 (__nv_fp8_e4m3, largest finite 448) and E5M2 (__nv_fp8_e5m2, 57344)
//   Fp8Recipe                  none, delayed or current scaling (fp8_recipe_parse reads --fp8's value)
//   Fp8Meta                    the scaling state of n tensors of one format: scale, scale_inv, amax, amax history
//   fp8_cast / fp8_cast_transpose   bf16 or fp32 -> fp8 (x * scale, rounded to nearest even, saturated to the
//                              largest finite value), recording the input's amax in the same pass; the transposed
//                              copy is what the backward GEMMs take (W^T, and the activations and gradients
//                              transposed for the weight gradient: cuBLASLt's fp8 GEMMs read both operands
//                              along K, see llmc/matmul_fp8.cuh)
//   fp8_measure_amax, fp8_scale_from_measured   current scaling in two halves, so that the ranks sharing a tensor
//                              can agree on its amax in between (train_gpt.cu's tensor-parallel slices, ZeRO-3 shards)
//   fp8_dequantize             fp8 -> bf16 or fp32 (q * scale_inv), for checks
//   fp8_update_delayed         delayed scaling: the amax history and the scales after a step
//   fp8_require_build()        dies unless this is the bf16 build (the fp8 GEMMs write bf16)
//   fp8_require_device()       dies unless the GPU runs fp8 GEMMs (compute capability 8.9 or newer, bf16 build)
//
// Convention (TransformerEngine's): q = fp8(x * scale), x ~ q * scale_inv, scale_inv = 1 / scale; the GEMM's
// A/B scale pointers get scale_inv. A scale is chosen so that the largest |x| expected lands on the format's
// largest finite value: scale = fp8_max * 2^-margin / amax.
//   delayed scaling: amax = the largest of the last history_len steps' amaxes (this step's included), and this
//                    step's casts use the scale computed after the previous step; amax 0, inf or NaN keeps the
//                    previous scale. TransformerEngine's recipe DelayedScaling, its defaults: amax_history_len
//                    1024, margin 0, amax_compute_algo "max" (transformer_engine/common/recipe/__init__.py;
//                    docs: https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/api/common.html),
//                    the update as transformer_engine/common/recipe/delayed_scaling.cu computes it (window max,
//                    scaled_max / amax when finite and > 0, else the old scale; scale_inv = 1 / scale).
//   current scaling: amax = this tensor's own max |x|, computed in a pass before the cast; amax 0, inf or NaN
//                    gives scale 1 (TransformerEngine's Float8CurrentScaling, compute_scale_from_amax in
//                    transformer_engine/common/recipe/recipe_common.cuh, without its epsilon and power-of-2 options).
// Both clamp a scale that overflows fp32 (amax below fp8_max / FLT_MAX) to FLT_MAX, as compute_scale_from_amax does.
// The amax of a cast ignores NaN (fmaxf) and keeps inf; NaN inputs cast to the format's NaN (0x7f).
//
// Fp8Meta keeps everything on the device in one fp32 array, laid out for the host to read back as is (a
// checkpoint saves fp8_meta_download's values and the position):
//   [scale n][scale_inv n][amax n][history: history_len rows of n]   history row h = one step's amaxes
// and, for the GEMMs' scale pointers, each scale_inv again in a 256-byte slot of its own (Fp8Meta::gemm,
// fp8_gemm_scale), written by the same kernels.
// Tensor i's casts read scale[i] and max their amax into amax[i] (delayed scaling); fp8_update_delayed writes
// amax[i] into history row pos, takes the window's max, updates the scale and zeroes amax[i]; pos (on the host,
// one for all n tensors, since they update together) then moves on, circularly. The amaxes are contiguous so that
// the ranks sharing a tensor can agree on them with one max all-reduce of n floats before the update.
//
// Every kernel here compiles for sm_80, sm_90a and sm_100a: cuda_fp8.h converts with the cvt.satfinite instruction from
// sm_89 on and in software below it, with the same results. What needs sm_89 or newer is the fp8 GEMM (cuBLASLt
// has no fp8 kernels before Ada/Hopper), hence fp8_require_device().
#pragma once
#include <cfloat>
#include <cmath>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <library_types.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/precision.cuh"
#include "llmc/utils.h"

enum Fp8Format { FP8_E4M3 = 0, FP8_E5M2 = 1 };
enum Fp8Recipe { FP8_NONE = 0, FP8_DELAYED = 1, FP8_CURRENT = 2 };

// TransformerEngine's DelayedScaling defaults (sources in the header comment)
static const int FP8_DEFAULT_HISTORY_LEN = 1024;
static const int FP8_DEFAULT_MARGIN = 0;

template <typename F8> struct Fp8Traits;
template <> struct Fp8Traits<__nv_fp8_e4m3> {
    static constexpr float max = 448.0f;  // 0x7e: 1.75 * 2^8 (0x7f is NaN; no infinities)
    static constexpr Fp8Format format = FP8_E4M3;
};
template <> struct Fp8Traits<__nv_fp8_e5m2> {
    static constexpr float max = 57344.0f;  // 0x7b: 1.75 * 2^15 (0x7c is inf, 0x7d-0x7f NaN)
    static constexpr Fp8Format format = FP8_E5M2;
};

static inline float fp8_format_max(Fp8Format f) { return f == FP8_E4M3 ? 448.0f : 57344.0f; }
static inline const char* fp8_format_name(Fp8Format f) { return f == FP8_E4M3 ? "e4m3" : "e5m2"; }

// --fp8's value: none, delayed or current
static inline Fp8Recipe fp8_recipe_parse(const char* value) {
    if (strcmp(value, "none") == 0) return FP8_NONE;
    if (strcmp(value, "delayed") == 0) return FP8_DELAYED;
    if (strcmp(value, "current") == 0) return FP8_CURRENT;
    die("--fp8 must be none, delayed or current (got '%s')", value);
}

// Dies unless this build can run the fp8 path: the fp8 GEMMs write bf16, so the fp32 and fp16 builds have none.
static inline void fp8_require_build() {
#if defined(ENABLE_FP32) || defined(ENABLE_FP16)
    die("--fp8 needs the bf16 build (this binary was built with PRECISION=%s); run with --fp8 none", PRECISION_UPPER);
#endif
}

// Dies unless this build and GPU can run the fp8 path: cuBLASLt's fp8 GEMMs need compute capability 8.9 (Ada)
// or newer (Hopper: 9.0).
static inline void fp8_require_device() {
    fp8_require_build();
    cuda_require_device();
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    if (prop.major * 10 + prop.minor < 89)
        die("--fp8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper); device %d (%s) is %d.%d. "
            "Run with --fp8 none", dev, prop.name, prop.major, prop.minor);
}

// ------------------------------------------------------------------------------------------------ scales
// The scale that maps amax to scaled_max (= fp8_max * 2^-margin), or fallback when amax says nothing (0, inf,
// NaN). Rounded division on the device too (--use_fast_math would otherwise approximate it).
__host__ __device__ inline float fp8_scale_from_amax(float amax, float scaled_max, float fallback) {
    if (!(amax > 0.0f) || amax > FLT_MAX) return fallback;
#ifdef __CUDA_ARCH__
    const float s = __fdiv_rn(scaled_max, amax);
#else
    const float s = scaled_max / amax;
#endif
    return s > FLT_MAX ? FLT_MAX : s;
}

__host__ __device__ inline float fp8_reciprocal(float s) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(1.0f, s);
#else
    return 1.0f / s;
#endif
}

// ------------------------------------------------------------------------------------------------ state
struct Fp8Meta {
    Fp8Format format = FP8_E4M3;
    int n = 0;            // tensors
    int history_len = 0;  // amaxes kept per tensor (delayed scaling's window)
    int margin = 0;       // scale = fp8_max * 2^-margin / amax
    int pos = 0;          // history row the next update writes (host side; saved with the values)
    float* buf = nullptr; // device [(3 + history_len) * n] fp32, layout in the header comment
    float* gemm = nullptr; // device [n * FP8_GEMM_SLOT]: scale_inv[i] again, alone in slot i (fp8_gemm_scale)
};
// The GEMMs' scale pointers each get a 256-byte slot of their own: cuBLASLt's references (PyTorch's scaled_mm,
// TransformerEngine, NVIDIA's LtFp8Matmul sample) pass scales in separate allocations, and a pointer 4 bytes into
// buf is a difference worth removing while fp8 GEMMs are refused on the H100 for a reason not yet known.
static const int FP8_GEMM_SLOT = 64;  // floats: 256 bytes

static inline float* fp8_scale(const Fp8Meta* m, int i) { return m->buf + i; }
static inline float* fp8_scale_inv(const Fp8Meta* m, int i) { return m->buf + m->n + i; }
static inline float* fp8_amax(const Fp8Meta* m, int i) { return m->buf + 2 * (size_t)m->n + i; }
static inline float* fp8_gemm_scale(const Fp8Meta* m, int i) { return m->gemm + (size_t)i * FP8_GEMM_SLOT; }
static inline float* fp8_history(const Fp8Meta* m) { return m->buf + 3 * (size_t)m->n; }
static inline size_t fp8_meta_count(const Fp8Meta* m) { return (3 + (size_t)m->history_len) * m->n; }
static inline float fp8_scaled_max(const Fp8Meta* m) { return ldexpf(fp8_format_max(m->format), -m->margin); }

// The GEMMs' slots from the host: slot i = inv[i]
static inline void fp8_gemm_slots_set(Fp8Meta* m, const std::vector<float>& inv) {
    std::vector<float> slots((size_t)m->n * FP8_GEMM_SLOT, 0.0f);
    for (int i = 0; i < m->n; i++) slots[(size_t)i * FP8_GEMM_SLOT] = inv[i];
    cudaCheck(cudaMemcpy(m->gemm, slots.data(), slots.size() * sizeof(float), cudaMemcpyHostToDevice));
}

// Fresh state: scale 1, scale_inv 1, amax 0, history 0, pos 0.
static inline void fp8_meta_init(Fp8Meta* m, Fp8Format format, int n, int history_len, int margin) {
    if (n < 1 || history_len < 1 || margin < 0 || margin > 100)
        die("fp8: %d tensors, amax history %d, margin %d: need n >= 1, a history of at least 1 and a margin in [0, 100]",
            n, history_len, margin);
    m->format = format;
    m->n = n;
    m->history_len = history_len;
    m->margin = margin;
    m->pos = 0;
    std::vector<float> v(fp8_meta_count(m), 0.0f);
    for (int i = 0; i < 2 * n; i++) v[i] = 1.0f;
    cudaCheck(cudaMalloc(&m->buf, v.size() * sizeof(float)));
    cudaCheck(cudaMemcpy(m->buf, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&m->gemm, (size_t)n * FP8_GEMM_SLOT * sizeof(float)));
    fp8_gemm_slots_set(m, std::vector<float>(n, 1.0f));
}

static inline void fp8_meta_free(Fp8Meta* m) {
    cudaCheck(cudaFree(m->buf));
    cudaCheck(cudaFree(m->gemm));
    m->buf = m->gemm = nullptr;
}

// The device values in their layout (for a checkpoint; pos goes with them).
static inline std::vector<float> fp8_meta_download(const Fp8Meta* m) {
    std::vector<float> v(fp8_meta_count(m));
    cudaCheck(cudaMemcpy(v.data(), m->buf, v.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
}

static inline void fp8_meta_upload(Fp8Meta* m, const std::vector<float>& v, int pos) {
    if (v.size() != fp8_meta_count(m) || pos < 0 || pos >= m->history_len)
        die("fp8 state: %zu values at position %d, expected %zu values (%d tensors, history %d) and a position below %d",
            v.size(), pos, fp8_meta_count(m), m->n, m->history_len, m->history_len);
    cudaCheck(cudaMemcpy(m->buf, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    fp8_gemm_slots_set(m, std::vector<float>(v.begin() + m->n, v.begin() + 2 * (size_t)m->n));
    m->pos = pos;
}

// ------------------------------------------------------------------------------------------------ kernels
static const int FP8_THREADS = 256;    // threads per block of the elementwise kernels
static const int FP8_PER_THREAD = 8;   // elements per thread of fp8_cast_kernel

// The block's largest v (v >= 0, not NaN) maxed into *amax with one atomic: non-negative floats order as their
// bit patterns do. Every thread of the block calls it. Block of any shape up to 1024 threads.
__device__ inline void fp8_block_amax(float v, float* amax) {
    __shared__ float warp_max[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int tid = threadIdx.x + threadIdx.y * blockDim.x, nthreads = blockDim.x * blockDim.y;
    if (tid % 32 == 0) warp_max[tid / 32] = v;
    __syncthreads();
    if (tid != 0) return;
    float m = 0.0f;
    for (int w = 0; w < nthreads / 32; w++) m = fmaxf(m, warp_max[w]);
    atomicMax((unsigned int*)amax, __float_as_uint(m));
}

// out[i] = fp8(inp[i] * scale) for i < n (inp, out: [n]); out null: only the amax. amax (or null): maxed with
// max |inp[i]|. Block b covers elements [b * 2048, (b + 1) * 2048), thread t those t + 256 j (coalesced).
template <typename F8, typename T>
__global__ void fp8_cast_kernel(F8* out, const T* inp, size_t n, const float* scale, float* amax) {
    const float s = *scale;
    float m = 0.0f;
    const size_t base = (size_t)blockIdx.x * FP8_THREADS * FP8_PER_THREAD + threadIdx.x;
    for (int j = 0; j < FP8_PER_THREAD; j++) {
        const size_t i = base + (size_t)j * FP8_THREADS;
        if (i >= n) break;
        const float x = to_float(inp[i]);
        m = fmaxf(m, fabsf(x));
        if (out) out[i] = F8(x * s);  // round to nearest even, saturating to +-max (__NV_SATFINITE)
    }
    if (amax) fp8_block_amax(m, amax);
}

// inp [rows, cols] -> out [rows, cols] (or null) and out_t [cols, rows], both fp8(inp * scale); amax as above.
// Block (32, 8) owns a 32 x 32 tile: reads it row by row (coalesced), writes the transpose from shared memory.
template <typename F8, typename T>
__global__ void fp8_cast_transpose_kernel(F8* out, F8* out_t, const T* inp, int rows, int cols, const float* scale,
                                          float* amax) {
    __shared__ F8 tile[32][33];
    const float s = *scale;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    float m = 0.0f;
    for (int dy = threadIdx.y; dy < 32; dy += 8) {
        const int r = r0 + dy, c = c0 + threadIdx.x;
        if (r < rows && c < cols) {
            const float x = to_float(inp[(size_t)r * cols + c]);
            m = fmaxf(m, fabsf(x));
            const F8 q(x * s);
            tile[dy][threadIdx.x] = q;
            if (out) out[(size_t)r * cols + c] = q;
        }
    }
    __syncthreads();
    for (int dx = threadIdx.y; dx < 32; dx += 8) {
        const int c = c0 + dx, r = r0 + threadIdx.x;
        if (c < cols && r < rows) out_t[(size_t)c * rows + r] = tile[threadIdx.x][dx];
    }
    if (amax) fp8_block_amax(m, amax);
}

__device__ inline void fp8_store(float* p, float v) { *p = v; }
__device__ inline void fp8_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

// out[i] = q[i] * scale_inv (out: [n] bf16 or fp32)
template <typename T, typename F8>
__global__ void fp8_dequantize_kernel(T* out, const F8* q, size_t n, const float* scale_inv) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) fp8_store(&out[i], (float)q[i] * *scale_inv);
}

// Delayed scaling, block i = tensor i: history[pos][i] = amax[i]; a = max over history[.][i] (fmaxf: NaN ignored,
// inf kept); scale[i] = scaled_max / a when a is finite and > 0, else unchanged; scale_inv[i] = 1 / scale[i];
// amax[i] = 0 for the next step's casts. history: [len, n].
__global__ static void fp8_delayed_update_kernel(float* scale, float* scale_inv, float* gemm, float* amax, float* history,
                                                 int n, int len, int pos, float scaled_max) {
    __shared__ float part[FP8_THREADS];
    const int i = blockIdx.x, t = threadIdx.x;
    if (t == 0) history[(size_t)pos * n + i] = amax[i];
    __syncthreads();
    float a = 0.0f;
    for (int h = t; h < len; h += FP8_THREADS) a = fmaxf(a, history[(size_t)h * n + i]);
    part[t] = a;
    __syncthreads();
    for (int o = FP8_THREADS / 2; o > 0; o /= 2) {
        if (t < o) part[t] = fmaxf(part[t], part[t + o]);
        __syncthreads();
    }
    if (t != 0) return;
    const float s = fp8_scale_from_amax(part[0], scaled_max, scale[i]);
    scale[i] = s;
    scale_inv[i] = gemm[(size_t)i * FP8_GEMM_SLOT] = fp8_reciprocal(s);
    amax[i] = 0.0f;
}

// Current scaling of tensors [0, n) from their amaxes (measured just before): scale 1 when an amax is 0, inf or NaN.
__global__ static void fp8_current_scale_kernel(float* scale, float* scale_inv, float* gemm, const float* amax, int n,
                                                float scaled_max) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float s = fp8_scale_from_amax(amax[i], scaled_max, 1.0f);
    scale[i] = s;
    scale_inv[i] = gemm[(size_t)i * FP8_GEMM_SLOT] = fp8_reciprocal(s);
}

// ------------------------------------------------------------------------------------------------ launchers
template <typename F8>
static inline void fp8_check_format(const Fp8Meta* m, int i, const char* what) {
    if (Fp8Traits<F8>::format != m->format || i < 0 || i >= m->n)
        die("%s: tensor %d as %s, but the fp8 state holds %d %s tensors (llmc/fp8.cuh)", what, i,
            fp8_format_name(Fp8Traits<F8>::format), m->n, fp8_format_name(m->format));
}

// amax[i] max= max |inp[n]| (a pass of its own, no cast). The caller zeroes amax[i] first where it wants this
// tensor's amax alone (fp8_current_scale does); several calls on parts of one tensor max into the same amax.
template <typename T>
static inline void fp8_measure_amax(cudaStream_t stream, const T* inp, size_t n, const Fp8Meta* m, int i) {
    if (n == 0) return;
    const unsigned blocks = (unsigned)ceil_div(n, (size_t)FP8_THREADS * FP8_PER_THREAD);
    if (m->format == FP8_E4M3)
        fp8_cast_kernel<__nv_fp8_e4m3, T><<<blocks, FP8_THREADS, 0, stream>>>(nullptr, inp, n, fp8_scale(m, i), fp8_amax(m, i));
    else
        fp8_cast_kernel<__nv_fp8_e5m2, T><<<blocks, FP8_THREADS, 0, stream>>>(nullptr, inp, n, fp8_scale(m, i), fp8_amax(m, i));
    cudaCheck(cudaGetLastError());
}

// scale and scale_inv of tensors [i, i + count) from their amaxes as they are (current scaling's rule). Between
// fp8_measure_amax and this, the ranks sharing a tensor can agree on its amax (a max all-reduce).
static inline void fp8_scale_from_measured(cudaStream_t stream, const Fp8Meta* m, int i, int count) {
    fp8_current_scale_kernel<<<(unsigned)ceil_div(count, FP8_THREADS), FP8_THREADS, 0, stream>>>(
        fp8_scale(m, i), fp8_scale_inv(m, i), fp8_gemm_scale(m, i), fp8_amax(m, i), count, fp8_scaled_max(m));
    cudaCheck(cudaGetLastError());
}

// Current scaling: amax[i] = max |inp| (a pass of its own), then scale[i] and scale_inv[i] from it.
template <typename T>
static inline void fp8_current_scale(cudaStream_t stream, const T* inp, size_t n, const Fp8Meta* m, int i) {
    cudaCheck(cudaMemsetAsync(fp8_amax(m, i), 0, sizeof(float), stream));
    fp8_measure_amax(stream, inp, n, m, i);
    fp8_scale_from_measured(stream, m, i, 1);
}

// out[n] = fp8(inp[n] * scale of tensor i). Delayed: the scale from the last update, the amax recorded for the
// next; current: the scale from this tensor's amax (fp8_current_scale first); FP8_NONE: the scale as it is (the
// caller set it, e.g. fp8_scale_from_measured after the ranks agreed on the amax), nothing recorded.
template <typename F8, typename T>
static inline void fp8_cast(cudaStream_t stream, F8* out, const T* inp, size_t n, const Fp8Meta* m, int i,
                            Fp8Recipe recipe) {
    fp8_check_format<F8>(m, i, "fp8_cast");
    if (recipe == FP8_CURRENT) fp8_current_scale(stream, inp, n, m, i);
    float* amax = recipe == FP8_DELAYED ? fp8_amax(m, i) : nullptr;
    const unsigned blocks = (unsigned)ceil_div(n, (size_t)FP8_THREADS * FP8_PER_THREAD);
    fp8_cast_kernel<F8, T><<<blocks, FP8_THREADS, 0, stream>>>(out, inp, n, fp8_scale(m, i), amax);
    cudaCheck(cudaGetLastError());
}

// out[rows, cols] (or null) and out_t[cols, rows] = fp8(inp[rows, cols] * scale of tensor i); scales as fp8_cast.
template <typename F8, typename T>
static inline void fp8_cast_transpose(cudaStream_t stream, F8* out, F8* out_t, const T* inp, int rows, int cols,
                                      const Fp8Meta* m, int i, Fp8Recipe recipe) {
    fp8_check_format<F8>(m, i, "fp8_cast_transpose");
    if (recipe == FP8_CURRENT) fp8_current_scale(stream, inp, (size_t)rows * cols, m, i);
    float* amax = recipe == FP8_DELAYED ? fp8_amax(m, i) : nullptr;
    if (ceil_div(rows, 32) > 65535)  // a grid row per 32 rows: CUDA's grid y dimension is at most 65535
        die("fp8_cast_transpose: %d rows (tokens) is past the grid's 65535 rows of 32 (at most %d): lower -b or -t",
            rows, 65535 * 32);
    const dim3 grid((unsigned)ceil_div(cols, 32), (unsigned)ceil_div(rows, 32));
    fp8_cast_transpose_kernel<F8, T><<<grid, dim3(32, 8), 0, stream>>>(out, out_t, inp, rows, cols, fp8_scale(m, i), amax);
    cudaCheck(cudaGetLastError());
}

// out[n] = q[n] * scale_inv of tensor i (bf16 or fp32)
template <typename T, typename F8>
static inline void fp8_dequantize(cudaStream_t stream, T* out, const F8* q, size_t n, const Fp8Meta* m, int i) {
    fp8_check_format<F8>(m, i, "fp8_dequantize");
    fp8_dequantize_kernel<T, F8><<<(unsigned)ceil_div(n, (size_t)FP8_THREADS), FP8_THREADS, 0, stream>>>(
        out, q, n, fp8_scale_inv(m, i));
    cudaCheck(cudaGetLastError());
}

// After a step under delayed scaling (once the ranks sharing each tensor have agreed on its amax): every
// tensor's history, scale and scale_inv, its amax back to 0; pos moves to the next row.
static inline void fp8_update_delayed(cudaStream_t stream, Fp8Meta* m) {
    fp8_delayed_update_kernel<<<m->n, FP8_THREADS, 0, stream>>>(fp8_scale(m, 0), fp8_scale_inv(m, 0), fp8_gemm_scale(m, 0),
                                                                fp8_amax(m, 0),
                                                                fp8_history(m), m->n, m->history_len, m->pos,
                                                                fp8_scaled_max(m));
    cudaCheck(cudaGetLastError());
    m->pos = (m->pos + 1) % m->history_len;
}
