// llmc/cpu_gemm.h: the CPU trainer's matrix products, register-blocked: C[M,N] (=, or +=) A[M,K] B[K,N] (+ bias[N]),
// with A and B read through strides, so one routine serves the forward (B = W^T), the input gradient (B = W) and the
// weight gradient (A = dout^T). llmc/ref_ops.h's matmul_forward and matmul_backward call it.
//
// The tile: GEMM_MR rows of C by GEMM_NV vectors of columns (6 x 64 floats with AVX-512: 24 accumulators in
// registers). Each step over k loads GEMM_NV vectors of a packed B row and broadcasts one A value per row: 24 fused
// multiply-adds for 10 loads. B is packed per (column block, slice of GEMM_KC k) into a buffer on the thread's
// stack (zero-padded past N), so its loads are contiguous and stay in L1 while the rows of a task pass over it.
//
// Summation order: k runs in groups of GEMM_KG = 16 from 0. Each element of C sums each group in one chain of fused
// multiply-adds from 0, in k order; the first group's sum starts the element (or is added to C's value when
// accumulating), the others are added in order, and the bias, when given, last. The split of rows and columns among
// threads decides only who computes an element, never how, so the result is the same at any number of threads; it is
// the same bits as this loop gives (test_gpt_cpu units):
//     for i, j: for each group g: s = 0; for k in g: s = fma(A[i][k], B[k][j], s)
//                                 c = (g is the first) ? (accumulate ? C[i][j] + s : s) : c + s
//               C[i][j] = bias ? c + bias[j] : c
// The groups keep the rounding error of a long sum near that of 16 + K / 16 additions rather than K, as the 16-lane dot
// products the trainer had before: one chain over all of K = 768 (or groups of 32) made one process and tp 2 drift apart
// in training (t_parallel's qwen3_tiny: gradient norms 1.3 times their tolerance; with groups of 16, 0.13 times).
// Work is shared by an orphaned `omp for` over tasks of GEMM_MB rows by one column block: inside a parallel region
// it splits the tasks among the region's threads (the caller's region: several products can share one); outside,
// the calling thread runs them all.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__AVX512F__) || (defined(__FMA__) && defined(__AVX__))
#include <immintrin.h>
#endif

// GCC's unroll pragma for the tile's constant loops; nvcc's front end (the dev/cuda programs include this through
// llmc/ref_ops.h, for their CPU references) does not know it
#if defined(__CUDACC__)
#define GEMM_UNROLL(n)
#else
#define GEMM_PRAGMA(x) _Pragma(#x)
#define GEMM_UNROLL(n) GEMM_PRAGMA(GCC unroll n)
#endif

#if defined(__AVX512F__)
static const int GEMM_VEC_BYTES = 64, GEMM_NV = 4;  // 32 vector registers: 6 x 4 accumulators
#else
static const int GEMM_VEC_BYTES = 32, GEMM_NV = 2;  // AVX2's 16: 6 x 2 accumulators
#endif
static const int GEMM_MR = 6;     // rows of C per tile
static const int GEMM_MB = 288;   // rows of C per task (48 tiles)
static const int GEMM_KC = 128;   // k per packed slice of B (128 x 64 floats: 32 KiB); a multiple of GEMM_KG
static const int GEMM_KG = 16;    // k per chain of fused multiply-adds (the summation's groups)

template <typename real> struct GemmVec {
    typedef real type __attribute__((vector_size(GEMM_VEC_BYTES)));
    static const int W = GEMM_VEC_BYTES / (int)sizeof(real);  // lanes
    static const int NC = GEMM_NV * W;                         // columns of a tile
};

// acc + s b with one rounding a lane (the build has -ffp-contract=off: a * b + c is never fused unless written so): the
// FMA instruction of the vector's width (a loop of std::fma over the lanes would be split into the compiler's
// preferred width, half of AVX-512's). Every x86-64 CPU since 2013 has one, and the same bits come from either width.
// A target without FMA instructions (a build with no -march: nvcc's host code of the dev/cuda references) rounds the
// product first, as it always did there: std::fma would be a library call per element, 20-50 times slower.
template <typename real, typename V>
static inline V gemm_fma(real s, V b, V acc) {
#if defined(__AVX512F__)
    if constexpr (sizeof(real) == 4) return (V)_mm512_fmadd_ps(_mm512_set1_ps(s), (__m512)b, (__m512)acc);
    else return (V)_mm512_fmadd_pd(_mm512_set1_pd(s), (__m512d)b, (__m512d)acc);
#elif defined(__FMA__) && defined(__AVX__)
    if constexpr (sizeof(real) == 4) return (V)_mm256_fmadd_ps(_mm256_set1_ps(s), (__m256)b, (__m256)acc);
    else return (V)_mm256_fmadd_pd(_mm256_set1_pd(s), (__m256d)b, (__m256d)acc);
#else
    return acc + s * b;
#endif
}

// One tile: c[MR, NC] (row stride ldc; the first `ncols` columns are C's) over one slice of kc steps (a multiple of
// GEMM_KG, but the last). a(r, k) = a[r * ars + k * acs]; bp: the packed slice, row k at bp + k * NC. load: add the
// groups' sums to c, else the first group's sum replaces it; bias (or null): added after the last group.
template <typename real, int MR>
static inline void gemm_tile(real* c, long ldc, int ncols, const real* a, long ars, long acs, const real* bp, int kc,
                             bool load, const real* bias) {
    typedef typename GemmVec<real>::type V;
    const int W = GemmVec<real>::W, NC = GemmVec<real>::NC;
    real tmp[MR][NC];  // C's tile when it is narrower than NC
    const bool full = ncols == NC;
    real* t = full ? c : &tmp[0][0];
    const long ldt = full ? ldc : NC;
    if (!full && load)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NC; j++) tmp[r][j] = j < ncols ? c[r * ldc + j] : (real)0;
    for (int g0 = 0; g0 < kc; g0 += GEMM_KG) {
        const int g1 = std::min(kc, g0 + GEMM_KG);
        V acc[MR][GEMM_NV];
GEMM_UNROLL(8)
        for (int r = 0; r < MR; r++)
GEMM_UNROLL(4)
            for (int v = 0; v < GEMM_NV; v++) acc[r][v] = V{};
        for (int k = g0; k < g1; k++) {
            V b[GEMM_NV];
GEMM_UNROLL(4)
            for (int v = 0; v < GEMM_NV; v++) std::memcpy(&b[v], bp + (long)k * NC + v * W, sizeof(V));
GEMM_UNROLL(8)
            for (int r = 0; r < MR; r++) {
                const real s = a[r * ars + k * acs];
GEMM_UNROLL(4)
                for (int v = 0; v < GEMM_NV; v++) acc[r][v] = gemm_fma(s, b[v], acc[r][v]);
            }
        }
        const bool add = load || g0 > 0, last = g1 == kc;
        V bv[GEMM_NV] = {};
        if (last && bias) {
            real bt[NC];
            for (int j = 0; j < NC; j++) bt[j] = j < ncols ? bias[j] : (real)0;
            for (int v = 0; v < GEMM_NV; v++) std::memcpy(&bv[v], &bt[v * W], sizeof(V));
        }
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < GEMM_NV; v++) {
                V x = acc[r][v];
                if (add) {
                    V old;
                    std::memcpy(&old, t + r * ldt + v * W, sizeof(V));
                    x = old + x;
                }
                if (last && bias) x = x + bv[v];
                std::memcpy(t + r * ldt + v * W, &x, sizeof(V));
            }
    }
    if (!full)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < ncols; j++) c[r * ldc + j] = tmp[r][j];
}

// C[M,N] (row stride ldc) = (accumulate ? C : 0) + A B (+ bias[N]), a(i, k) = a[i * ars + k * acs], b(k, j) =
// b[k * brs + j * bcs]. An orphaned `omp for`: see the header.
template <typename real>
void gemm(real* c, long ldc, const real* a, long ars, long acs, const real* b, long brs, long bcs, int M, int N, int K,
          bool accumulate, const real* bias) {
    const int NC = GemmVec<real>::NC;
    const int mtasks = (M + GEMM_MB - 1) / GEMM_MB, ntasks = (N + NC - 1) / NC;
#pragma omp for collapse(2) schedule(static) nowait
    for (int mt = 0; mt < mtasks; mt++)
        for (int nt = 0; nt < ntasks; nt++) {
            alignas(64) real bp[GEMM_KC * GemmVec<real>::NC];
            const int i0 = mt * GEMM_MB, i1 = std::min(M, i0 + GEMM_MB), j0 = nt * NC, nc = std::min(NC, N - j0);
            if (K == 0) {  // no products: C is its start plus the bias
                for (int i = i0; i < i1; i++)
                    for (int j = j0; j < j0 + nc; j++)
                        c[(long)i * ldc + j] = (accumulate ? c[(long)i * ldc + j] : (real)0) + (bias ? bias[j] : (real)0);
                continue;
            }
            for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
                const int kc = std::min(GEMM_KC, K - k0);
                // pack B's slice, zero past N; read along B's contiguous direction (rows of W for the forward)
                if (nc < NC) std::memset(bp, 0, sizeof(bp));
                if (bcs == 1 && nc == NC)  // a copy of constant size: inlined, no call per row
                    for (int k = 0; k < kc; k++) std::memcpy(bp + (long)k * NC, b + (long)(k0 + k) * brs + j0, sizeof(real) * NC);
                else if (bcs == 1)
                    for (int k = 0; k < kc; k++) std::memcpy(bp + (long)k * NC, b + (long)(k0 + k) * brs + j0, nc * sizeof(real));
                else
                    for (int j = 0; j < nc; j++) {
                        const real* bc = b + (long)(j0 + j) * bcs + (long)k0 * brs;
                        for (int k = 0; k < kc; k++) bp[(long)k * NC + j] = bc[(long)k * brs];
                    }
                const bool load = accumulate || k0 > 0;
                const real* bias_here = bias && k0 + kc == K ? bias + j0 : nullptr;
                for (int i = i0; i < i1; i += GEMM_MR) {
                    real* ct = c + (long)i * ldc + j0;
                    const real* at = a + (long)i * ars + (long)k0 * acs;
                    switch (std::min(GEMM_MR, i1 - i)) {
                        case 6: gemm_tile<real, 6>(ct, ldc, nc, at, ars, acs, bp, kc, load, bias_here); break;
                        case 5: gemm_tile<real, 5>(ct, ldc, nc, at, ars, acs, bp, kc, load, bias_here); break;
                        case 4: gemm_tile<real, 4>(ct, ldc, nc, at, ars, acs, bp, kc, load, bias_here); break;
                        case 3: gemm_tile<real, 3>(ct, ldc, nc, at, ars, acs, bp, kc, load, bias_here); break;
                        case 2: gemm_tile<real, 2>(ct, ldc, nc, at, ars, acs, bp, kc, load, bias_here); break;
                        default: gemm_tile<real, 1>(ct, ldc, nc, at, ars, acs, bp, kc, load, bias_here); break;
                    }
                }
            }
        }
}
