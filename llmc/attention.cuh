// llmc/attention.cuh: causal flash attention with GQA, forward and backward, floatX (bf16, or fp16 in the fp16 build)
// in and out, fp32 softmax statistics, tensor cores (mma.sync m16n8k16 bf16 or f16, fp32 accumulate). The T x T
// score matrix is never stored: the forward keeps one logsumexp per query row, and the backward
// recomputes the probabilities from it (the FlashAttention-2 structure). (The backward's version 6, a candidate, stores
// the score gradient dS in a buffer of the caller's, so that dQ = dS K needs no second recomputation.)
//
// Layouts (B batch, T time, H query heads, KV kv heads, hd head dim, group = H / KV):
//   qkv   [B, T, (H + 2KV) * hd]  per token: H query heads, then KV key heads, then KV value heads
//   out   [B, T, H * hd]
//   lse   [B, H, T] fp32          logsumexp of the scaled scores of each query row (natural log)
//   dqkv  [B, T, (H + 2KV) * hd]  overwritten by the backward (every element is written)
//   doc   [B, T] int32 or null    the first key (row index) each query sees: its document's start (below)
// Query head h reads kv head h / group; K and V are never copied per query head.
// ALiBi (alibi [H] fp32, the slope of each query head, or null): slope_h * (key - query) is added to the scaled
// scores, in the forward and wherever the backward recomputes the probabilities (kernels instantiated with and
// without it, so attention without ALiBi runs the code it ran before).
// Documents (doc [B*T] int32 on the device, or null; llmc/documents.h, --reset-attention-mask): doc[b*T + t] is the
// row index of the first token of token t's document, non-decreasing along each row and <= t (not checked: the
// caller's documents_mark makes it so). Query t sees keys doc[t] <= t' <= t only; null is the plain causal mask
// (every doc 0), and doc all zeros gives the same bits as null. Every row sees at least itself: lse stays finite.
// Whole tiles outside every row's document are skipped: the forward and dQ kernels start their key loop at the
// tile of doc[the block's first row] (the block's smallest), the dK/dV kernels end their query loop at the first
// tile whose first row's document starts after the block's last key. The per-row compare (key < doc[row]: score
// -inf, probability 0) runs only on the tiles that straddle a document start of the block's rows, under a branch
// that is uniform over the block. doc is a runtime pointer, not a template flag like ALIBI: without it the branch
// is never taken (the same arithmetic, so the same bits) and costs one predicate per tile, while a template bool
// would double the instantiations (3 head dims x ALiBi x 3 kernels) and the compile time of every target.
// Requirements (checked by the launchers): hd in {64, 80, 128}, T a multiple of 64, H % KV == 0;
// every tensor 16-byte aligned (cudaMalloc pointers are), since tiles move in 16-byte copies.
//
// Launchers:
//   attention_forward(out, lse, qkv, B, T, H, KV, hd, stream, alibi = null, doc = null, version = 0)
//     version: 3 (mma.sync), 4 (wgmma on sm_90a: Hopper; version 3 where it cannot run), 0 for ATT_FWD_TABLE's choice
//   attention_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, stream, alibi = null, doc = null,
//                      version = 0, ds = null)
//     dvec [B, H, T] fp32 is a scratch buffer of the caller. No atomics: bitwise reproducible. version: the dK/dV
//     kernel, 3, 4 or 5 (the same bits), 6 (dQ from the dS the dK/dV kernel writes to ds [B, H, T, T], a buffer the
//     caller gives), 7 (both kernels on wgmma, Hopper; version 5 where it cannot run), 0 for ATT_BWD_TABLE's choice
//     per head dim. doc: the forward's.
// The PTX primitives (mma.sync, ldmatrix, cp.async, wgmma) and their fragment layouts are in llmc/mma.cuh.
// dev/cuda/attention_forward.cu and attention_backward.cu time these kernels against simpler
// versions; dev/cuda/notes_attention.md describes the design and its expected performance.
#pragma once
#include <cfloat>
#include <climits>
#include <cstdint>
#include <cuda_runtime.h>
#include "llmc/cuda_common.cuh"
#include "llmc/mma.cuh"
#include "llmc/packed.cuh"
#include "llmc/precision.cuh"
#include "llmc/utils.h"

static_assert(sizeof(floatX) == 2, "llmc/attention.cuh: tensor-core attention of the bf16 and fp16 builds (the fp32 "
                                   "build has llmc/attention_rowwise.cuh)");

// ---- tile helpers (the PTX primitives are in llmc/mma.cuh) ----------------------------------------

// d[16x8] += a[16x16] * b[16x8] in floatX, fp32 accumulate
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
#ifdef ENABLE_FP16
    mma_f16_16816(d, a, b0, b1);
#else
    mma_bf16_16816(d, a, b0, b1);
#endif
}

// two fp32 -> one floatX2 register (lo in the low half): fp32 accumulators reused as an a fragment
__device__ __forceinline__ uint32_t pack_x2(float lo, float hi) {
    floatX2 v = to_floatX2(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// acc[16 rows][8 DT] += A B: A the 16 x 16 fragment a (16 rows against 16 keys), B the keys' 16 rows of a [keys][hd]
// tile in shared memory (row stride LDS elements) from `rows`, its fragments by transposed ldmatrix. The second product
// of the forward (O += P V) and of the dQ kernels (dQ += dS K).
template <int DT, int LDS>
__device__ __forceinline__ void mma_a_times_rows(float (&acc)[DT][4], const uint32_t (&a)[4], const floatX* rows) {
    const int lane = threadIdx.x % 32, mat = lane / 8, r8 = lane % 8;  // ldmatrix row-address roles
    const floatX* r = rows + ((mat & 1) * 8 + r8) * LDS + (mat >> 1) * 8;
    for (int d = 0; d < DT; d += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, r + d * 8);
        mma_16816(acc[d], a, b[0], b[1]);
        mma_16816(acc[d + 1], a, b[2], b[3]);
    }
}

// Copies a [ROWS, HD] tile (row stride ld elements in global memory) into shared memory with row
// stride HD + ATT_PAD, 16 bytes per thread and step, by cp.async (the caller commits and waits).
static const int ATT_PAD = 8;  // 16 bytes of padding per shared row: conflict-free fragment loads
template <int ROWS, int HD, int THREADS>
__device__ __forceinline__ void load_tile(floatX* smem, const floatX* gmem, size_t ld) {
    constexpr int CHUNKS = HD / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += THREADS) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        cp_async16(smem + r * (HD + ATT_PAD) + col, gmem + r * ld + col);
    }
}

// ---- the forward's online softmax and epilogue (the mma.sync and the wgmma kernels alike) ---------------------------
// A warp's 16 query rows against NT n8 tiles of keys, in the m16n8 accumulator layout (g = lane / 4, q4 = lane % 4):
// s[n][e] is the score of row row0 + 8 (e / 2) (row0: this thread's first row) and key key0 + 8n + 2 q4 + e % 2.

// the scores' scale 1 / sqrt(hd), times log2(e): the softmax runs in the log2 domain (exp2)
template <int HD> __device__ __forceinline__ float fwd_scale_log2() { return rsqrtf((float)HD) * 1.4426950408889634f; }

// One tile of scores s becomes probabilities: keys before the row's document start (lo) masked on a document tile, the
// scale into the log2 domain (ALiBi: plus the head's bias), keys after the query masked on the diagonal tile, the
// rows' running max m_row and sum l_row (this thread's columns; the quad sums at the end) updated; corr[r]: the factor
// that row r's output accumulators must be multiplied by.
template <int NT, bool ALIBI>
__device__ __forceinline__ void softmax_tile(float (&s)[NT][4], float (&m_row)[2], float (&l_row)[2], float (&corr)[2],
                                             int key0, int row0, bool diag, bool doc_tile, const int (&lo)[2],
                                             float scale_log2, float slope_log2) {
    const int q4 = threadIdx.x % 4;
    // documents: keys before the row's document start get -inf, only on the tiles where some row of the block has its
    // start (a uniform branch, never taken without doc)
    if (doc_tile)
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++)
                if (key0 + n * 8 + 2 * q4 + (e & 1) < lo[e >> 1]) s[n][e] = -INFINITY;
    float mx[2] = {-INFINITY, -INFINITY};
    for (int n = 0; n < NT; n++)
        for (int e = 0; e < 4; e++) {
            const int key = key0 + n * 8 + 2 * q4 + (e & 1);
            const int row = row0 + (e >> 1) * 8;
            float x = s[n][e] * scale_log2;
            if (ALIBI) x += slope_log2 * (float)(key - row);
            if (diag && key > row) x = -INFINITY;
            s[n][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    // a row's scores live in the 4 threads of a quad
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        // finite without documents (key 0 is visible to every row); on a document tile a row may see none of its
        // keys (m_row and mx both -inf): -FLT_MAX then makes both exponentials below 0 instead of NaN
        float m_new = fmaxf(m_row[r], mx[r]);
        if (doc_tile) m_new = fmaxf(m_new, -FLT_MAX);
        corr[r] = exp2f(m_row[r] - m_new);
        m_row[r] = m_new;
        l_row[r] *= corr[r];
    }
    for (int n = 0; n < NT; n++)
        for (int e = 0; e < 4; e++) {
            const float p = exp2f(s[n][e] - m_row[e >> 1]);
            s[n][e] = p;
            l_row[e >> 1] += p;  // partial over this thread's columns; the quad sums at the end
        }
}

// o[d][e] *= corr[row e / 2]: the output accumulators follow the rows' new maximum
template <int DT>
__device__ __forceinline__ void rescale_rows(float (&o)[DT][4], const float (&corr)[2]) {
    for (int d = 0; d < DT; d++) {
        o[d][0] *= corr[0]; o[d][1] *= corr[0];
        o[d][2] *= corr[1]; o[d][3] *= corr[1];
    }
}

// The rows' full sums (over the quad), then O = o / l into out (head h of rows row0, row0 + 8 of batch b) and the
// logsumexp (natural log) into lse
template <int HD>
__device__ __forceinline__ void write_out_lse(floatX* out, float* lse, const float (&o)[HD / 8][4], const float (&m_row)[2],
                                              float (&l_row)[2], int b, int T, int H, int h, int row0) {
    const int q4 = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        l_row[r] += __shfl_xor_sync(0xffffffffu, l_row[r], 1);
        l_row[r] += __shfl_xor_sync(0xffffffffu, l_row[r], 2);
    }
    const float inv[2] = {1.0f / l_row[0], 1.0f / l_row[1]};
    for (int r = 0; r < 2; r++) {
        const int row = row0 + r * 8;
        floatX* orow = out + ((size_t)b * T + row) * H * HD + h * HD + 2 * q4;
        for (int d = 0; d < HD / 8; d++)
            *reinterpret_cast<floatX2*>(orow + d * 8) = to_floatX2(o[d][2 * r] * inv[r], o[d][2 * r + 1] * inv[r]);
        if (q4 == 0) lse[((size_t)b * H + h) * T + row] = (m_row[r] + __log2f(l_row[r])) * 0.6931471805599453f;
    }
}

// ---- forward ---------------------------------------------------------------------------------------

static const int ATT_FWD_BM = 64;   // query rows per block: 4 warps x 16
static const int ATT_FWD_BN = 64;   // keys per tile
// 4 warps per block. The kernels are declared for 2 resident blocks per SM: that lets ptxas use up to
// 255 registers (without the hint it settles on 128 for some variants on sm_90a and spills).
static const int ATT_THREADS = 128;

// One block per (b * H + h, reversed query tile). Each warp owns 16 query rows: Q fragments stay in
// registers, S = Q K^T (16 x 64) and O (16 x hd) are fp32 accumulators, and the online softmax runs
// on S in registers (log2 domain). K/V tiles are double-buffered with cp.async (tile j + 1 loads
// while tile j is computed), K fragments read with ldmatrix (one instruction per two n8 tiles
// instead of four 32-bit loads), and the longest causal tiles launched first: blocks start in order
// of x fastest, so every head's last query tile goes out in the first wave and the short tiles fill
// the tail. (dev/cuda/attention_forward.cu version 2 is the same without the pipeline.) With documents the key
// tiles run from the one holding the block's first row's document start (kt_first) to the diagonal.
template <int HD, bool ALIBI>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, const float* alibi,
                         const int32_t* doc, int T, int H, int KV) {
    constexpr int LDS = HD + ATT_PAD;          // shared row stride (elements)
    constexpr int KC = HD / 16;                // k-chunks of the head dim
    constexpr int NT = ATT_FWD_BN / 8;         // n8 tiles of S
    constexpr int DT = HD / 8;                 // n8 tiles of O
    DYNAMIC_SMEM(att_smem);
    floatX* sQ = reinterpret_cast<floatX*>(att_smem);   // [BM][LDS]
    floatX* sK = sQ + ATT_FWD_BM * LDS;                          // [2][BN][LDS]
    floatX* sV = sK + 2 * ATT_FWD_BN * LDS;                      // [2][BN][LDS]

    const int n_qt = T / ATT_FWD_BM;
    const int qt = n_qt - 1 - (int)blockIdx.y;  // longest first
    const int bh = blockIdx.x, b = bh / H, h = bh % H, kh = h / (H / KV);  // kv head of query head h
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4;
    const int mat = lane / 8, r8 = lane % 8;  // ldmatrix row-address roles
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const floatX* qbase = qkv + ((size_t)b * T + (size_t)qt * ATT_FWD_BM) * ld + h * HD;
    const floatX* kbase = qkv + (size_t)b * T * ld + (size_t)(H + kh) * HD;
    const floatX* vbase = qkv + (size_t)b * T * ld + (size_t)(H + KV + kh) * HD;
    const int n_kt = qt + 1;  // causal: key tiles 0..qt (BM == BN)
    // documents: the block's rows see keys from d_first (its first row's document start, the smallest) on, so the
    // key tiles before d_first's are skipped; the per-row mask is needed only on tiles overlapping [d_first, d_last)
    const int32_t* drow = doc ? doc + (size_t)b * T + (size_t)qt * ATT_FWD_BM : nullptr;
    const int d_first = doc ? drow[0] : 0, d_last = doc ? drow[ATT_FWD_BM - 1] : 0;
    const int kt_first = d_first / ATT_FWD_BN;  // the first key tile any row of the block sees

    load_tile<ATT_FWD_BM, HD, ATT_THREADS>(sQ, qbase, ld);
    load_tile<ATT_FWD_BN, HD, ATT_THREADS>(sK, kbase + (size_t)kt_first * ATT_FWD_BN * ld, ld);
    load_tile<ATT_FWD_BN, HD, ATT_THREADS>(sV, vbase + (size_t)kt_first * ATT_FWD_BN * ld, ld);
    cp_async_commit();

    uint32_t qf[KC][4];
    float o[DT][4];
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};  // rows g and g + 8
    const float scale_log2 = fwd_scale_log2<HD>();
    const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;
    const int row0 = qt * ATT_FWD_BM + warp * 16 + g;  // this thread's first query row (second: + 8)
    // the document starts of this thread's two rows: keys before them are masked (in the tiles of doc_tile)
    const int lo[2] = {doc ? drow[warp * 16 + g] : 0, doc ? drow[warp * 16 + g + 8] : 0};

    for (int j = kt_first; j < n_kt; j++) {
        const int st = (j - kt_first) & 1;
        const floatX* k_s = sK + st * ATT_FWD_BN * LDS;
        const floatX* v_s = sV + st * ATT_FWD_BN * LDS;
        if (j + 1 < n_kt) {
            const size_t off = (size_t)(j + 1) * ATT_FWD_BN * ld;
            load_tile<ATT_FWD_BN, HD, ATT_THREADS>(sK + (st ^ 1) * ATT_FWD_BN * LDS, kbase + off, ld);
            load_tile<ATT_FWD_BN, HD, ATT_THREADS>(sV + (st ^ 1) * ATT_FWD_BN * LDS, vbase + off, ld);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == kt_first) {
            const floatX* qw = sQ + (warp * 16) * LDS;
            for (int kc = 0; kc < KC; kc++) {
                qf[kc][0] = lds32(qw + g * LDS + kc * 16 + 2 * q4);
                qf[kc][1] = lds32(qw + (g + 8) * LDS + kc * 16 + 2 * q4);
                qf[kc][2] = lds32(qw + g * LDS + kc * 16 + 2 * q4 + 8);
                qf[kc][3] = lds32(qw + (g + 8) * LDS + kc * 16 + 2 * q4 + 8);
            }
        }
        // S = Q K^T: B[k = dim][n = key] = K[key][dim], a contiguous pair per register
        float s[NT][4];
        for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        // tiles: (keys n*8.., dims kc*16), (same keys, dims +8), (keys +8, dims kc*16), (keys +8, dims +8)
        for (int n = 0; n < NT; n += 2) {
            const floatX* kr = k_s + (n * 8 + (mat >> 1) * 8 + r8) * LDS + (mat & 1) * 8;
            for (int kc = 0; kc < KC; kc++) {
                uint32_t kb[4];
                ldmatrix_x4(kb, kr + kc * 16);
                mma_16816(s[n], qf[kc], kb[0], kb[1]);
                mma_16816(s[n + 1], qf[kc], kb[2], kb[3]);
            }
        }
        // documents: the mask runs only on the tiles where some row of the block has its start (from d_first's tile up
        // to the one before d_last). The bounds come from doc itself, not from the loop's start: a tile before
        // kt_first would be left unmasked.
        const bool doc_tile = j * ATT_FWD_BN < d_last && (j + 1) * ATT_FWD_BN > d_first;
        float corr[2];
        softmax_tile<NT, ALIBI>(s, m_row, l_row, corr, j * ATT_FWD_BN, row0, j == qt, doc_tile, lo, scale_log2, slope_log2);
        rescale_rows<DT>(o, corr);
        // O += P V: the S accumulators of n tiles 2c, 2c+1 are the A fragment of k-chunk c
        for (int c = 0; c < ATT_FWD_BN / 16; c++) {
            const uint32_t pa[4] = {pack_x2(s[2 * c][0], s[2 * c][1]), pack_x2(s[2 * c][2], s[2 * c][3]),
                                    pack_x2(s[2 * c + 1][0], s[2 * c + 1][1]), pack_x2(s[2 * c + 1][2], s[2 * c + 1][3])};
            mma_a_times_rows<DT, LDS>(o, pa, v_s + c * 16 * LDS);
        }
        __syncthreads();  // the next iteration overwrites a buffer read here
    }

    write_out_lse<HD>(out, lse, o, m_row, l_row, b, T, H, h, row0);
}

static inline void attention_check_shape(int B, int T, int H, int KV, int hd) {
    if (B < 1 || T < 1 || H < 1 || KV < 1 || H % KV != 0)
        die("attention: bad shape B=%d T=%d H=%d KV=%d (need positive sizes and H a multiple of KV)", B, T, H, KV);
    if (T % 64 != 0) die("attention: T=%d is not a multiple of 64 (the kernels' tile size); pad the sequence", T);
    if (hd != 64 && hd != 80 && hd != 128) die("attention: head dim %d is not supported (64, 80 or 128)", hd);
}

template <int HD, bool ALIBI>
static void attention_forward_hd(floatX* out, float* lse, const floatX* qkv, const float* alibi,
                                 const int32_t* doc, int B, int T, int H, int KV, cudaStream_t stream) {
    // Q of 64 rows plus double-buffered K and V tiles
    const size_t smem = (size_t)(ATT_FWD_BM + 4 * ATT_FWD_BN) * (HD + ATT_PAD) * sizeof(floatX);
    cudaCheck(cudaFuncSetAttribute(attention_forward_kernel<HD, ALIBI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
    attention_forward_kernel<HD, ALIBI><<<dim3(B * H, T / ATT_FWD_BM), ATT_THREADS, smem, stream>>>(out, lse, qkv, alibi,
                                                                                                   doc, T, H, KV);
    cudaCheck(cudaGetLastError());
}

template <int HD>
static void attention_forward_hd(floatX* out, float* lse, const floatX* qkv, const float* alibi,
                                 const int32_t* doc, int B, int T, int H, int KV, cudaStream_t stream) {
    if (alibi) attention_forward_hd<HD, true>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
    else attention_forward_hd<HD, false>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
}

// ---- forward, version 4: Hopper's wgmma (sm_90a) ---------------------------------------------------
// The same computation as attention_forward_kernel, with the products on wgmma (llmc/mma.cuh): blocks of 128 query
// rows, two warpgroups of 64, against tiles of 128 keys. Q, K and V tiles sit in shared memory in the 128-byte swizzled
// layout wgmma reads (load_tile_sw128); S = Q K^T takes both operands from there (K-major, 16 head dims per product),
// O += P V takes P from the registers that held S (n tiles 2c, 2c + 1 = the A fragment of keys 16c..16c+15, as in
// version 3) and V [keys][dims] as an MN-major B. Each warp's rows are in version 3's accumulator layout, so the online
// softmax, the masks and the epilogue are version 3's (softmax_tile, write_out_lse). K/V tiles double-buffered by
// cp.async, each stage made visible to wgmma by fence_proxy_async and a barrier; each product group waited for at
// once (no overlap of the softmax with the next product inside a warpgroup: the two warpgroups overlap each other).
// Needs hd 64 or 128 (whole 64-column swizzle tiles) and T a multiple of 128; the launcher runs version 3 otherwise,
// and where the code running on the device has no wgmma (not sm_90a). Prediction (dev/cuda/notes_attention.md):
// 350-420 TFLOP/s at T 4096, hd 128 on an H100 against version 3's 247 (H200, measured).
static const int ATT_WG_BM = 128;      // query rows per block: 2 warpgroups x 64
static const int ATT_WG_BN = 128;      // keys per tile
static const int ATT_WG_THREADS = 256;

static const uint32_t ATT_SW_SBO = 8 * 128;  // bytes between 8-row groups of a swizzled tile (its descriptors' SBO)

// Copies a [ROWS, HD] tile (row stride ld elements in global memory) into the 128-byte swizzled layout: HD / 64
// column tiles of [ROWS][64], row r's 16-byte chunk c at chunk c ^ (r % 8) of its row; smem 1024-byte aligned. By
// cp.async (the caller commits, waits and runs fence_proxy_async).
template <int ROWS, int HD, int THREADS>
__device__ __forceinline__ void load_tile_sw128(floatX* smem, const floatX* gmem, size_t ld) {
    constexpr int CHUNKS = HD / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += THREADS) {
        const int r = c / CHUNKS, k = c % CHUNKS;
        cp_async16(smem + (k / 8) * ROWS * 64 + r * 64 + ((k % 8) ^ (r % 8)) * 8, gmem + r * ld + k * 8);
    }
}

// The key loop's double buffer on swizzled tiles (version 4, version 7's dQ): while key tile j is computed, tile j + 1's
// K and V (ROWS keys from row `next` of kbase and vbase) are copied into the stage not in use, where next < n (else
// nothing is); then this thread waits for tile j's copies and fences them for wgmma. The caller's barrier follows.
template <int ROWS, int HD, int THREADS>
__device__ __forceinline__ void kv_tiles_next_sw128(floatX* k_next, floatX* v_next, const floatX* kbase,
                                                    const floatX* vbase, size_t ld, int next, int n) {
    if (next < n) {
        const size_t off = (size_t)next * ROWS * ld;
        load_tile_sw128<ROWS, HD, THREADS>(k_next, kbase + off, ld);
        load_tile_sw128<ROWS, HD, THREADS>(v_next, vbase + off, ld);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    fence_proxy_async();  // this thread's landed copies, visible to wgmma after the barrier
}

// acc [64 x N] = A B^T over the head dim on wgmma, the first product of the Hopper kernels (S = Q K^T, S^T = K Q^T,
// dP = dO V^T, dP^T = V dO^T): A's 64 rows and B's N rows from swizzled tiles of ROWS rows per 64-column tile, both
// K-major, 16 head dims per product (32 bytes on within a 64-column tile, the next tile ROWS * 128 bytes on). Only
// queues the products: the caller fences, commits and waits (two such products may share a group).
template <int HD, int N, int ROWS>
__device__ __forceinline__ void wgmma_rows_times_rows(float (&acc)[N / 8][4], const floatX* a, const floatX* b) {
    for (int kc = 0; kc < HD / 16; kc++) {
        const int off = (kc / 4) * ROWS * 64 + (kc % 4) * 16;
        const uint64_t d_a = wgmma_desc(a + off, 16, ATT_SW_SBO), d_b = wgmma_desc(b + off, 16, ATT_SW_SBO);
        if constexpr (N == 64) wgmma_ss_n64<0>(&acc[0][0], d_a, d_b, kc > 0);
        else wgmma_ss_n128<0>(&acc[0][0], d_a, d_b, kc > 0);
    }
}

// acc [64 rows x HD] += A B on wgmma, the second product of the Hopper kernels (O += P V, dV += P^T dO, dK += dS^T Q,
// dQ += dS K): A from the accumulators s of the first product (n tiles 2c, 2c+1 = the A fragment of k-chunk c: rows
// 16c..16c+15 of B), B the [16 NT / 2 rows][HD] swizzled tile `rows` (64-column tiles lbo bytes apart) as an MN-major
// operand. Fences, queues NT / 2 products, commits and waits: A's registers live until the products are done.
template <int NT, int HD>
__device__ __forceinline__ void wgmma_a_times_rows(float (&acc)[HD / 8][4], const float (&s)[NT][4], const floatX* rows,
                                                   uint32_t lbo) {
    uint32_t a[NT / 2][4];
    for (int c = 0; c < NT / 2; c++) {
        a[c][0] = pack_x2(s[2 * c][0], s[2 * c][1]);
        a[c][1] = pack_x2(s[2 * c][2], s[2 * c][3]);
        a[c][2] = pack_x2(s[2 * c + 1][0], s[2 * c + 1][1]);
        a[c][3] = pack_x2(s[2 * c + 1][2], s[2 * c + 1][3]);
    }
    wgmma_fence_operands(acc);  // acc's rescaling and a's packing stay before the fence
    wgmma_fence_operands(a);
    wgmma_fence();
    for (int c = 0; c < NT / 2; c++) {
        const uint64_t d_b = wgmma_desc(rows + c * 16 * 64, lbo, ATT_SW_SBO);  // 16 rows on: 2 KiB
        if constexpr (HD == 64) wgmma_rs_n64<1>(&acc[0][0], a[c], d_b, 1);
        else wgmma_rs_n128<1>(&acc[0][0], a[c], d_b, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(acc);  // and the next reads after the wait
    wgmma_fence_operands(a);
}

template <int HD, bool ALIBI>
__global__ void __launch_bounds__(ATT_WG_THREADS, 1)
attention_forward_wgmma_kernel(floatX* out, float* lse, const floatX* qkv, const float* alibi,
                               const int32_t* doc, int T, int H, int KV) {
    static_assert(HD % 64 == 0, "whole 64-column swizzle tiles");
    constexpr int NT = ATT_WG_BN / 8;       // n8 tiles of S: 16
    constexpr int DT = HD / 8;              // n8 tiles of O
    constexpr int TILE = ATT_WG_BN * HD;    // elements of a Q, K or V tile (BM == BN)
    constexpr uint32_t LBO_V = ATT_WG_BN * 128;  // bytes between V's 64-column tiles (the next 64 head dims)
    DYNAMIC_SMEM(att_smem);
    floatX* sQ = reinterpret_cast<floatX*>(smem_align1024(att_smem));  // [HD/64][BM][64] swizzled
    floatX* sK = sQ + TILE;                                              // [2][HD/64][BN][64]
    floatX* sV = sK + 2 * TILE;                                          // [2][HD/64][BN][64]

    const int n_qt = T / ATT_WG_BM;
    const int qt = n_qt - 1 - (int)blockIdx.y;  // longest first
    const int bh = blockIdx.x, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, g = (threadIdx.x % 32) / 4;
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const floatX* qbase = qkv + ((size_t)b * T + (size_t)qt * ATT_WG_BM) * ld + h * HD;
    const floatX* kbase = qkv + (size_t)b * T * ld + (size_t)(H + kh) * HD;
    const floatX* vbase = qkv + (size_t)b * T * ld + (size_t)(H + KV + kh) * HD;
    const int n_kt = qt + 1;  // causal: key tiles 0..qt (BM == BN)
    const int32_t* drow = doc ? doc + (size_t)b * T + (size_t)qt * ATT_WG_BM : nullptr;
    const int d_first = doc ? drow[0] : 0, d_last = doc ? drow[ATT_WG_BM - 1] : 0;
    const int kt_first = d_first / ATT_WG_BN;

    load_tile_sw128<ATT_WG_BM, HD, ATT_WG_THREADS>(sQ, qbase, ld);
    load_tile_sw128<ATT_WG_BN, HD, ATT_WG_THREADS>(sK, kbase + (size_t)kt_first * ATT_WG_BN * ld, ld);
    load_tile_sw128<ATT_WG_BN, HD, ATT_WG_THREADS>(sV, vbase + (size_t)kt_first * ATT_WG_BN * ld, ld);
    cp_async_commit();

    float s[NT][4], o[DT][4];
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};
    const float scale_log2 = fwd_scale_log2<HD>();
    const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;
    const int wrow = wg * 64 + warp * 16 + g;  // this thread's first row in the block (second: + 8)
    const int row0 = qt * ATT_WG_BM + wrow;
    const int lo[2] = {doc ? drow[wrow] : 0, doc ? drow[wrow + 8] : 0};
    const floatX* q_wg = sQ + wg * 64 * 64;  // this warpgroup's 64 rows of the first column tile (8 KiB in)

    for (int j = kt_first; j < n_kt; j++) {
        const int st = (j - kt_first) & 1;
        const floatX* k_s = sK + st * TILE;
        const floatX* v_s = sV + st * TILE;
        kv_tiles_next_sw128<ATT_WG_BN, HD, ATT_WG_THREADS>(sK + (st ^ 1) * TILE, sV + (st ^ 1) * TILE, kbase, vbase, ld,
                                                           j + 1, n_kt);
        __syncthreads();
        // S = Q K^T (this warpgroup's 64 rows against the tile's 128 keys)
        wgmma_fence_operands(s);
        wgmma_fence();
        wgmma_rows_times_rows<HD, ATT_WG_BN, ATT_WG_BN>(s, q_wg, k_s);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(s);
        const bool doc_tile = j * ATT_WG_BN < d_last && (j + 1) * ATT_WG_BN > d_first;
        float corr[2];
        softmax_tile<NT, ALIBI>(s, m_row, l_row, corr, j * ATT_WG_BN, row0, j == qt, doc_tile, lo, scale_log2, slope_log2);
        rescale_rows<DT>(o, corr);
        wgmma_a_times_rows<NT, HD>(o, s, v_s, LBO_V);  // O += P V: keys 16c.. are rows 16c.. of V's tile
        __syncthreads();  // the next iteration overwrites a buffer read here
    }
    write_out_lse<HD>(out, lse, o, m_row, l_row, b, T, H, h, row0);
}

// Whether the code the device runs has wgmma (sm_90a): one probe launch, the answer kept
__global__ void wgmma_probe_kernel(int* has) {
#ifdef LLMC_WGMMA
    *has = 1;
#else
    *has = 0;
#endif
}
static bool wgmma_supported() {
    static int known = -1;
    if (known < 0) {
        int* d_has;
        cudaCheck(cudaMalloc(&d_has, sizeof(int)));
        wgmma_probe_kernel<<<1, 1>>>(d_has);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpy(&known, d_has, sizeof(int), cudaMemcpyDeviceToHost));
        cudaCheck(cudaFree(d_has));
    }
    return known == 1;
}

template <int HD, bool ALIBI>
static void attention_forward_wgmma_hd(floatX* out, float* lse, const floatX* qkv, const float* alibi,
                                       const int32_t* doc, int B, int T, int H, int KV, cudaStream_t stream) {
    // Q of 128 rows plus double-buffered K and V tiles, and up to 1 KiB to align them
    const size_t smem = (size_t)5 * ATT_WG_BN * HD * sizeof(floatX) + 1024;
    cudaCheck(cudaFuncSetAttribute(attention_forward_wgmma_kernel<HD, ALIBI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
    attention_forward_wgmma_kernel<HD, ALIBI><<<dim3(B * H, T / ATT_WG_BM), ATT_WG_THREADS, smem, stream>>>(
        out, lse, qkv, alibi, doc, T, H, KV);
    cudaCheck(cudaGetLastError());
}
template <int HD>
static void attention_forward_wgmma_hd(floatX* out, float* lse, const floatX* qkv, const float* alibi,
                                       const int32_t* doc, int B, int T, int H, int KV, cudaStream_t stream) {
    if (alibi) attention_forward_wgmma_hd<HD, true>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
    else attention_forward_wgmma_hd<HD, false>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
}
// version 4 runs at this shape on this device (else version 3 does)
static bool attention_forward_wgmma_fits(int T, int hd) {
    return (hd == 64 || hd == 128) && T % ATT_WG_BM == 0 && wgmma_supported();
}

// The forward kernel per head dim: {head dim, version}, the fastest version measured on an H100 or H200 (3 until a
// GPU has timed version 4: dev/cuda/attention_forward.cu, scripts/gpu_check.sh sprint2).
static const int ATT_FWD_TABLE[][2] = {{64, 3}, {80, 3}, {128, 3}};
static int attention_forward_version(int hd) {
    for (const auto& e : ATT_FWD_TABLE)
        if (e[0] == hd) return e[1];
    return 3;
}

// out [B,T,H*hd] floatX, lse [B,H,T] fp32 <- qkv [B,T,(H+2KV)*hd] floatX; alibi [H] or null; doc [B*T] (device) or null.
// version: 3 (mma.sync), 4 (wgmma; version 3 where attention_forward_wgmma_fits says no), 0 for ATT_FWD_TABLE's.
static void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int H, int KV,
                              int hd, cudaStream_t stream, const float* alibi = nullptr, const int32_t* doc = nullptr,
                              int version = 0) {
    attention_check_shape(B, T, H, KV, hd);
    if (version == 0) version = attention_forward_version(hd);
    if (version != 3 && version != 4) die("attention_forward: version %d (3 or 4)", version);
    if (version == 4 && attention_forward_wgmma_fits(T, hd)) {
        if (hd == 64) attention_forward_wgmma_hd<64>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
        else attention_forward_wgmma_hd<128>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
        return;
    }
    if (hd == 64) attention_forward_hd<64>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
    else if (hd == 80) attention_forward_hd<80>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
    else attention_forward_hd<128>(out, lse, qkv, alibi, doc, B, T, H, KV, stream);
}

// ---- backward --------------------------------------------------------------------------------------
// Two kernels after the preprocess, each writing its part of dqkv once, with no atomics: the result
// does not depend on the order in which blocks run (two runs give the same bits).
//   dK, dV: one block per (key tile, kv head), summing over the query tiles and the GQA group;
//   dQ:     one block per (query tile, query head), summing over the key tiles.
// Both recompute P = exp(S * scale - lse) and dS = P * (dP - D) from Q, K, V, dO.

static const int ATT_BWD_BN = 64;  // keys per tile (the dK/dV block's 4 warps x 16; the dQ block's key loop)
static const int ATT_DQ_BM = 64;   // query rows per dQ block: 4 warps x 16

// dvec[b,h,t] = sum_d dout[b,t,h,d] * out[b,t,h,d] (fp32), the D of dS = P (dP - D). G lanes per (b, t, h) row (hd / 8
// rounded up to a power of two: 8, 16, 16 for hd 64, 80, 128), each reading 8 elements of dO and of O in one 16-byte
// access (lanes past hd / 8 add 0), the row's sum by shuffles within its G lanes; 256 / G rows per block of 256.
static const int ATT_PRE_THREADS = 256;
static constexpr __host__ __device__ int att_pre_lanes(int hd) { return hd / 8 <= 8 ? 8 : hd / 8 <= 16 ? 16 : 32; }  // G
template <int HD>
__global__ void __launch_bounds__(ATT_PRE_THREADS)
attention_backward_preprocess_kernel(float* dvec, const floatX* dout, const floatX* out, int B, int T, int H) {
    constexpr int CH = HD / 8, G = att_pre_lanes(HD);  // 16-byte chunks per row; lanes per row
    static_assert(HD % 8 == 0 && CH <= 32, "a row in at most 32 chunks of 8");
    const size_t i = blockIdx.x * (size_t)ATT_PRE_THREADS + threadIdx.x, row = i / G;  // [B,T,H] row
    const int c = (int)(i % G);
    const bool valid = row < (size_t)B * T * H;  // (every lane takes part in the shuffles)
    float acc = 0.0f;
    if (valid && c < CH) {
        const Pack8 o = load8(out + row * HD + c * 8), d = load8(dout + row * HD + c * 8);
        for (int k = 0; k < 8; k++) acc += to_float(d.v[k]) * to_float(o.v[k]);
    }
    for (int m = G / 2; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (valid && c == 0) {
        const int h = (int)(row % H), t = (int)(row / H % T), b = (int)(row / ((size_t)H * T));
        dvec[((size_t)b * H + h) * T + t] = acc;
    }
}
static void attention_backward_preprocess(float* dvec, const floatX* dout, const floatX* out, int B, int T, int H,
                                          int hd, cudaStream_t stream) {
    const size_t rows = (size_t)B * T * H, lanes = att_pre_lanes(hd);
    const unsigned blocks = (unsigned)((rows * lanes + ATT_PRE_THREADS - 1) / ATT_PRE_THREADS);
    if (hd == 64) attention_backward_preprocess_kernel<64><<<blocks, ATT_PRE_THREADS, 0, stream>>>(dvec, dout, out, B, T, H);
    else if (hd == 80) attention_backward_preprocess_kernel<80><<<blocks, ATT_PRE_THREADS, 0, stream>>>(dvec, dout, out, B, T, H);
    else attention_backward_preprocess_kernel<128><<<blocks, ATT_PRE_THREADS, 0, stream>>>(dvec, dout, out, B, T, H);
    cudaCheck(cudaGetLastError());
}

// P^T and dS^T of a dK/dV tile in place of S^T (st) and dP^T (dpt): rows this thread's keys key0 and key0 + 8, columns
// the queries q_first + 8n + 2 q4 + e % 2 (sL: their lse * log2(e), sD: their D, sDoc: their document starts, read only
// where doc_tile). Keys before the query's document start or after the query get P = 0.
template <int NQ, bool ALIBI>
__device__ __forceinline__ void dkdv_probs(float (&st)[NQ][4], float (&dpt)[NQ][4], int key0, int q_first,
                                           const float* sL, const float* sD, const int32_t* sDoc, bool doc_tile,
                                           float scale_log2, float slope_log2) {
    const int q4 = threadIdx.x % 4;
    // documents: keys before the query's document start get S = -inf, so P = 0 below (a uniform branch)
    if (doc_tile)
        for (int n = 0; n < NQ; n++)
            for (int e = 0; e < 4; e++)
                if (key0 + (e >> 1) * 8 < sDoc[n * 8 + 2 * q4 + (e & 1)]) st[n][e] = -INFINITY;
    for (int n = 0; n < NQ; n++)
        for (int e = 0; e < 4; e++) {
            const int qi = n * 8 + 2 * q4 + (e & 1);
            const int key = key0 + (e >> 1) * 8;
            float x = st[n][e] * scale_log2;
            if (ALIBI) x += slope_log2 * (float)(key - (q_first + qi));
            const float p = (key > q_first + qi) ? 0.0f : exp2f(x - sL[qi]);
            st[n][e] = p;
            dpt[n][e] = p * (dpt[n][e] - sD[qi]);
        }
}

// The dK/dV work of one query tile for one warp: its 16 keys (rows kw, vw of the staged K and V, keys key0 and
// key0 + 8 for this thread) against BM query rows from q_first (sQ, sdO: [BM][HD + ATT_PAD]; sL: lse * log2(e),
// sD: D = rowsum(dO * O), [BM] each; sDoc: the rows' document starts [BM], read only where doc_tile, the tiles
// where some of the block's keys lie before some row's start: there P = 0 for key < sDoc[row]):
//   S^T = K Q^T, P^T = exp(S^T * scale (+ ALiBi's bias) - lse), dV += P^T dO, dP^T = V dO^T,
//   dS^T = P^T (dP^T - D), dK += dS^T Q.
// Every fragment comes from shared memory by ldmatrix (transposed where the operand is stored
// [k][n]); rows are padded by 16 bytes, so the eight rows of each 8x8 tile hit distinct banks.
template <int HD, int BM, bool ALIBI>
__device__ __forceinline__ void dkdv_tile(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4], const floatX* kw,
                                          const floatX* vw, const floatX* sQ, const floatX* sdO,
                                          const float* sL, const float* sD, const int32_t* sDoc, bool doc_tile,
                                          int key0, int q_first, float scale_log2, float slope_log2,
                                          floatX* ds_row = nullptr, size_t T = 0) {
    constexpr int LDS = HD + ATT_PAD;
    constexpr int KC = HD / 16;
    constexpr int NQ = BM / 8;  // n8 tiles over the query tile
    constexpr int DT = HD / 8;
    const int lane = threadIdx.x % 32, q4 = lane % 4;
    const int mat = lane / 8, r8 = lane % 8;  // ldmatrix row-address roles
    // S^T = K Q^T and dP^T = V dO^T (16 keys x BM queries per warp)
    float st[NQ][4], dpt[NQ][4];
    for (int n = 0; n < NQ; n++)
        for (int e = 0; e < 4; e++) st[n][e] = dpt[n][e] = 0.0f;
    for (int kc = 0; kc < KC; kc++) {
        // A tiles: (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
        uint32_t ka[4], va[4];
        const int a_off = ((mat & 1) * 8 + r8) * LDS + kc * 16 + (mat >> 1) * 8;
        ldmatrix_x4(ka, kw + a_off);
        ldmatrix_x4(va, vw + a_off);
        // B tiles (Q^T, dO^T): (queries n*8.., k 0-7), (same, k 8-15), (queries +8, k 0-7), (+8, k 8-15)
        for (int n = 0; n < NQ; n += 2) {
            const int b_off = (n * 8 + (mat >> 1) * 8 + r8) * LDS + kc * 16 + (mat & 1) * 8;
            uint32_t qb[4], ob[4];
            ldmatrix_x4(qb, sQ + b_off);
            ldmatrix_x4(ob, sdO + b_off);
            mma_16816(st[n], ka, qb[0], qb[1]);
            mma_16816(st[n + 1], ka, qb[2], qb[3]);
            mma_16816(dpt[n], va, ob[0], ob[1]);
            mma_16816(dpt[n + 1], va, ob[2], ob[3]);
        }
    }
    dkdv_probs<NQ, ALIBI>(st, dpt, key0, q_first, sL, sD, sDoc, doc_tile, scale_log2, slope_log2);
    // version 6: dS (floatX, as the products below round it) to ds_row: row key0 (and key0 + 8, T further) of
    // [keys][queries], at the tile's first query
    if (ds_row)
        for (int n = 0; n < NQ; n++)
            for (int r = 0; r < 2; r++)
                *reinterpret_cast<uint32_t*>(ds_row + r * 8 * T + n * 8 + 2 * q4) = pack_x2(dpt[n][2 * r], dpt[n][2 * r + 1]);
    // dV += P^T dO and dK += dS^T Q: accumulators of n tiles 2c, 2c+1 form A of k-chunk c
    for (int c = 0; c < BM / 16; c++) {
        uint32_t pa[4] = {pack_x2(st[2 * c][0], st[2 * c][1]), pack_x2(st[2 * c][2], st[2 * c][3]),
                          pack_x2(st[2 * c + 1][0], st[2 * c + 1][1]),
                          pack_x2(st[2 * c + 1][2], st[2 * c + 1][3])};
        uint32_t sa[4] = {pack_x2(dpt[2 * c][0], dpt[2 * c][1]), pack_x2(dpt[2 * c][2], dpt[2 * c][3]),
                          pack_x2(dpt[2 * c + 1][0], dpt[2 * c + 1][1]),
                          pack_x2(dpt[2 * c + 1][2], dpt[2 * c + 1][3])};
        const int row = c * 16 + (mat & 1) * 8 + r8;
        for (int d = 0; d < DT; d += 2) {
            uint32_t ob[4], qb[4];
            ldmatrix_x4_trans(ob, sdO + row * LDS + d * 8 + (mat >> 1) * 8);
            ldmatrix_x4_trans(qb, sQ + row * LDS + d * 8 + (mat >> 1) * 8);
            mma_16816(dv[d], pa, ob[0], ob[1]);
            mma_16816(dv[d + 1], pa, ob[2], ob[3]);
            mma_16816(dk[d], sa, qb[0], qb[1]);
            mma_16816(dk[d + 1], sa, qb[2], qb[3]);
        }
    }
}

// dK (scaled) and dV of this warp's 16 keys (this thread's: key0 and key0 + 8) into dqkv.
template <int HD>
__device__ __forceinline__ void dkdv_store(floatX* dqkv, const float (&dk)[HD / 8][4],
                                           const float (&dv)[HD / 8][4], int b, int T, int H, int KV, int kh, int key0,
                                           float scale) {
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const int q4 = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        const size_t row = (size_t)b * T + key0 + r * 8;
        floatX* dkr = dqkv + row * ld + (size_t)(H + kh) * HD + 2 * q4;
        floatX* dvr = dqkv + row * ld + (size_t)(H + KV + kh) * HD + 2 * q4;
        for (int d = 0; d < HD / 8; d++) {
            *reinterpret_cast<floatX2*>(dkr + d * 8) =
                to_floatX2(dk[d][2 * r] * scale, dk[d][2 * r + 1] * scale);
            *reinterpret_cast<floatX2*>(dvr + d * 8) = to_floatX2(dv[d][2 * r], dv[d][2 * r + 1]);
        }
    }
}

// Documents: the end of a dK/dV block's query tiles of BM rows (from first_qt on): the first tile whose first row's
// document starts after the block's last key (doc is non-decreasing, so no later row sees the block), or n_qt. A
// binary search, every thread of the block on the same addresses; first_qt's first row sees the block's first key.
__device__ __forceinline__ int att_doc_qtile_end(const int32_t* doc, int b, int T, int BM, int first_qt, int n_qt,
                                                 int key_last) {
    const int32_t* drow = doc + (size_t)b * T;
    int lo = first_qt + 1, hi = n_qt;  // the answer is in [lo, hi]
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (drow[mid * BM] > key_last) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

// Version 3. One block per (b * KV + kv head, key tile), x fastest: the first wave holds the low key tiles of
// every head, which have the most query tiles (longest first). Each warp owns 16 keys and keeps
// their dK and dV (16 x hd each, fp32) in registers while the block walks every query head of the
// GQA group and every query tile at or after the key tile (dkdv_tile; with documents, up to the last tile that sees
// one of its keys); dK and dV are then written once, so the group's sum needs no atomics. Each query tile's Q, dO,
// lse and D (and document starts) are staged in shared memory and waited for before it is computed.
template <int HD, int BM, bool ALIBI>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_backward_dkdv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                               const float* lse, const float* dvec, const float* alibi, const int32_t* doc, int T,
                               int H, int KV) {
    constexpr int LDS = HD + ATT_PAD;
    constexpr int DT = HD / 8;
    DYNAMIC_SMEM(att_smem);
    floatX* sK = reinterpret_cast<floatX*>(att_smem);  // [BN][LDS]
    floatX* sV = sK + ATT_BWD_BN * LDS;                        // [BN][LDS]
    floatX* sQ = sV + ATT_BWD_BN * LDS;                        // [BM][LDS]
    floatX* sdO = sQ + BM * LDS;                               // [BM][LDS]
    float* sL = reinterpret_cast<float*>(sdO + BM * LDS);             // [BM] lse * log2(e)
    float* sD = sL + BM;                                              // [BM]
    int32_t* sDoc = reinterpret_cast<int32_t*>(sD + BM);              // [BM] document starts (only with doc)

    const int kt = blockIdx.y;
    const int bk = blockIdx.x, b = bk / KV, kh = bk % KV, group = H / KV;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const size_t kv_row0 = (size_t)b * T + (size_t)kt * ATT_BWD_BN;
    load_tile<ATT_BWD_BN, HD, ATT_THREADS>(sK, qkv + kv_row0 * ld + (size_t)(H + kh) * HD, ld);
    load_tile<ATT_BWD_BN, HD, ATT_THREADS>(sV, qkv + kv_row0 * ld + (size_t)(H + KV + kh) * HD, ld);
    cp_async_commit();

    const float scale = rsqrtf((float)HD), scale_log2 = scale * 1.4426950408889634f;
    float dk[DT][4], dv[DT][4];
    for (int d = 0; d < DT; d++)
        for (int e = 0; e < 4; e++) dk[d][e] = dv[d][e] = 0.0f;
    const int key0 = kt * ATT_BWD_BN + warp * 16 + g;  // this thread's keys: key0 and key0 + 8
    const floatX* kw = sK + (warp * 16) * LDS;  // this warp's 16 keys (A operand rows)
    const floatX* vw = sV + (warp * 16) * LDS;
    const int first_qt = kt * ATT_BWD_BN / BM, n_qt = T / BM;
    // documents: the query tiles after the last that sees one of the block's keys are skipped
    const int key_first = kt * ATT_BWD_BN, key_last = key_first + ATT_BWD_BN - 1;
    const int qt_end = doc ? att_doc_qtile_end(doc, b, T, BM, first_qt, n_qt, key_last) : n_qt;

    for (int hi = 0; hi < group; hi++) {
        const int h = kh * group + hi;
        const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;
        for (int it = first_qt; it < qt_end; it++) {
            const size_t q_row0 = (size_t)b * T + (size_t)it * BM;
            load_tile<BM, HD, ATT_THREADS>(sQ, qkv + q_row0 * ld + (size_t)h * HD, ld);
            load_tile<BM, HD, ATT_THREADS>(sdO, dout + q_row0 * H * HD + (size_t)h * HD, (size_t)H * HD);
            cp_async_commit();
            for (int i = threadIdx.x; i < BM; i += ATT_THREADS) {
                const size_t r = ((size_t)b * H + h) * T + (size_t)it * BM + i;
                sL[i] = lse[r] * 1.4426950408889634f;
                sD[i] = dvec[r];
                if (doc) sDoc[i] = doc[q_row0 + i];
            }
            cp_async_wait<0>();
            __syncthreads();
            // the per-row mask only where some row's start lies after the block's first key; its bounds come from
            // the tile's own starts, not from qt_end: a tile past qt_end would be left unmasked
            const bool doc_tile = doc && sDoc[BM - 1] > key_first && sDoc[0] <= key_last;
            dkdv_tile<HD, BM, ALIBI>(dk, dv, kw, vw, sQ, sdO, sL, sD, sDoc, doc_tile, key0, it * BM, scale_log2,
                                     slope_log2);
            __syncthreads();  // sQ, sdO, sL, sD are overwritten by the next query tile
        }
    }
    dkdv_store<HD>(dqkv, dk, dv, b, T, H, KV, kh, key0, scale);
}

// Versions 4 (BN = 64 keys per block, 4 warps) and 5 (BN = 128, 8 warps): version 3 with the next query tile's Q and
// dO copied (cp.async) into a second buffer while the current one is computed, and its lse and D loaded into registers
// then, stored into the second buffer after the compute. The block's query tiles, (query head of the group, query
// tile), are walked as one sequence, so the copy runs ahead across heads too. A warp whose 16 keys all lie after the
// tile's last row skips the tile (causal: its P is 0 there). Version 5's blocks stage each Q/dO tile once for 128 keys,
// half the copies of version 4 per key. Every key adds the same products in the same order as in version 3 (the tiles
// a block of 128 keys adds to its upper 64, or past their documents' ends, have P = 0: they add exact zeros): the same
// bits. With ds (version 6) each computed tile's dS also goes to ds [B, H, T keys, T queries] (dkdv_tile); the tiles a
// warp skips are masked ones, which the dQ kernel zeroes. Shared memory: K, V [BN][LDS] and two buffers of Q, dO
// [BM][LDS], lse, D [BM] (with documents: and doc [BM]).
template <int HD, int BM, int BN, bool ALIBI>
__global__ void __launch_bounds__(2 * BN, 128 / BN)
attention_backward_dkdv_prefetch_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                        const float* lse, const float* dvec, const float* alibi, const int32_t* doc,
                                        int T, int H, int KV, floatX* ds) {
    constexpr int NT = 2 * BN;  // BN / 16 warps, each 16 keys
    static_assert(3 * BM <= NT, "one thread per lse, per D and per document start of a tile");
    constexpr int LDS = HD + ATT_PAD;
    constexpr int DT = HD / 8;
    constexpr int STAGE = 2 * BM * LDS;  // Q and dO of one buffer (floatX elements)
    DYNAMIC_SMEM(att_smem);
    floatX* sK = reinterpret_cast<floatX*>(att_smem);  // [BN][LDS]
    floatX* sV = sK + BN * LDS;                                // [BN][LDS]
    floatX* sQO = sV + BN * LDS;                               // [2][Q [BM][LDS], dO [BM][LDS]]
    float* sLD = reinterpret_cast<float*>(sQO + 2 * STAGE);           // [2][lse * log2(e) [BM], D [BM]]
    int32_t* sDocs = reinterpret_cast<int32_t*>(sLD + 4 * BM);        // [2][BM] document starts (only with doc)

    const int kt = blockIdx.y;
    const int bk = blockIdx.x, b = bk / KV, kh = bk % KV, group = H / KV;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const size_t kv_row0 = (size_t)b * T + (size_t)kt * BN;
    load_tile<BN, HD, NT>(sK, qkv + kv_row0 * ld + (size_t)(H + kh) * HD, ld);
    load_tile<BN, HD, NT>(sV, qkv + kv_row0 * ld + (size_t)(H + KV + kh) * HD, ld);
    cp_async_commit();

    const float scale = rsqrtf((float)HD), scale_log2 = scale * 1.4426950408889634f;
    float dk[DT][4], dv[DT][4];
    for (int d = 0; d < DT; d++)
        for (int e = 0; e < 4; e++) dk[d][e] = dv[d][e] = 0.0f;
    const int key0 = kt * BN + warp * 16 + g;  // this thread's keys: key0 and key0 + 8
    const int warp_key0 = kt * BN + warp * 16;  // this warp's first key
    const floatX* kw = sK + (warp * 16) * LDS;  // this warp's 16 keys (A operand rows)
    const floatX* vw = sV + (warp * 16) * LDS;
    // documents: the query tiles after the last that sees one of the block's keys are skipped
    const int key_first = kt * BN, key_last = key_first + BN - 1;
    const int first_qt = kt * BN / BM;
    const int qt_end = doc ? att_doc_qtile_end(doc, b, T, BM, first_qt, T / BM, key_last) : T / BM;
    const int n_it = qt_end - first_qt, n_tiles = group * n_it;

    // tile t of the sequence: query head kh * group + t / n_it, query tile first_qt + t % n_it
    auto head_of = [&](int t) { return kh * group + t / n_it; };
    auto qtile_of = [&](int t) { return first_qt + t % n_it; };
    auto copy_qo = [&](int t, int buf) {  // Q and dO of tile t into buffer buf (cp.async, committed)
        const int h = head_of(t), it = qtile_of(t);
        const size_t q_row0 = (size_t)b * T + (size_t)it * BM;
        load_tile<BM, HD, NT>(sQO + buf * STAGE, qkv + q_row0 * ld + (size_t)h * HD, ld);
        load_tile<BM, HD, NT>(sQO + buf * STAGE + BM * LDS, dout + q_row0 * H * HD + (size_t)h * HD, (size_t)H * HD);
        cp_async_commit();
    };
    // this thread's element of tile t: lse (threads < BM) or D (< 2 BM), loaded as it is; lse is turned into
    // lse * log2(e) only where it is stored, so that nothing waits for the load before the tile's compute
    auto load_ld = [&](int t) {
        const int h = head_of(t), it = qtile_of(t), i = threadIdx.x % BM;
        const size_t r = ((size_t)b * H + h) * T + (size_t)it * BM + i;
        return threadIdx.x < BM ? lse[r] : threadIdx.x < 2 * BM ? dvec[r] : 0.0f;
    };
    auto store_ld = [&](int buf, float x) {
        sLD[buf * 2 * BM + threadIdx.x] = threadIdx.x < BM ? x * 1.4426950408889634f : x;
    };
    // documents: threads 2 BM .. 3 BM - 1 load and store the document starts of tile t's rows the same way
    const bool doc_thread = doc && threadIdx.x >= 2 * BM && threadIdx.x < 3 * BM;
    auto load_doc = [&](int t) { return doc[(size_t)b * T + (size_t)qtile_of(t) * BM + threadIdx.x - 2 * BM]; };
    auto store_doc = [&](int buf, int32_t x) { sDocs[buf * BM + threadIdx.x - 2 * BM] = x; };
    copy_qo(0, 0);
    if (threadIdx.x < 2 * BM) store_ld(0, load_ld(0));
    if (doc_thread) store_doc(0, load_doc(0));
    for (int t = 0; t < n_tiles; t++) {
        const int buf = t & 1, h = head_of(t), it = qtile_of(t);
        const bool next = t + 1 < n_tiles;
        float next_ld = 0.0f;
        int32_t next_doc = 0;
        if (next) {
            copy_qo(t + 1, buf ^ 1);  // buffer buf ^ 1 was last read in tile t - 1, before its closing barrier
            next_ld = load_ld(t + 1);
            if (doc_thread) next_doc = load_doc(t + 1);
            cp_async_wait<1>();       // all but tile t + 1's copy: K, V and tile t
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;
        const floatX* sQ = sQO + buf * STAGE;
        const float* sL = sLD + buf * 2 * BM;
        const int32_t* sDoc = sDocs + buf * BM;
        // as in version 3: the per-row mask only where some row's start lies after the block's first key
        const bool doc_tile = doc && sDoc[BM - 1] > key_first && sDoc[0] <= key_last;
        floatX* ds_row = ds ? ds + (((size_t)b * H + h) * T + key0) * T + (size_t)it * BM : nullptr;  // version 6
        if (warp_key0 <= it * BM + BM - 1)  // (a uniform branch per warp: dkdv_tile has no block barrier)
            dkdv_tile<HD, BM, ALIBI>(dk, dv, kw, vw, sQ, sQ + BM * LDS, sL, sL + BM, sDoc, doc_tile, key0, it * BM,
                                     scale_log2, slope_log2, ds_row, (size_t)T);
        if (next && threadIdx.x < 2 * BM) store_ld(buf ^ 1, next_ld);
        if (next && doc_thread) store_doc(buf ^ 1, next_doc);
        __syncthreads();  // buffer buf is overwritten by tile t + 2's copy; buf ^ 1's lse and D are stored
    }
    dkdv_store<HD>(dqkv, dk, dv, b, T, H, KV, kh, key0, scale);
}

// One block per (b * H + query head, reversed query tile), x fastest: as in the forward, every head's
// last query tile (the most key tiles) goes out in the first wave. Q and dO of the block's 64 rows stay
// in shared memory; K/V tiles 0..qt (with documents kt_first..qt) are double-buffered with cp.async and walked in
// increasing order.
// Each warp owns 16 query rows and keeps their dQ (16 x hd, fp32) in registers. Per key tile:
//   S = Q K^T, dP = dO V^T, P = exp(S * scale (+ ALiBi's bias) - lse), dS = P (dP - D), dQ += dS K;
// dQ is scaled and written once (floatX) into the query part of dqkv.
// dS in place of S (s) of a dQ tile: rows this thread's queries row0 and row0 + 8 (L: their lse * log2(e), D: their D,
// lo: their document starts, used where doc_tile), columns the keys key0 + 8n + 2 q4 + e % 2; keys before the row's
// document start, or after the query on a diagonal tile (diag), have P = 0.
template <int NT, bool ALIBI>
__device__ __forceinline__ void dq_probs(float (&s)[NT][4], const float (&dp)[NT][4], int key0, int row0, bool diag,
                                         bool doc_tile, const int (&lo)[2], const float (&L)[2], const float (&D)[2],
                                         float scale_log2, float slope_log2) {
    const int q4 = threadIdx.x % 4;
    // documents: keys before the row's document start get S = -inf (P = 0 below)
    if (doc_tile)
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++)
                if (key0 + n * 8 + 2 * q4 + (e & 1) < lo[e >> 1]) s[n][e] = -INFINITY;
    for (int n = 0; n < NT; n++)
        for (int e = 0; e < 4; e++) {
            const int key = key0 + n * 8 + 2 * q4 + (e & 1);
            const int r = e >> 1;
            float x = s[n][e] * scale_log2;
            if (ALIBI) x += slope_log2 * (float)(key - (row0 + r * 8));
            const float p = (diag && key > row0 + r * 8) ? 0.0f : exp2f(x - L[r]);
            s[n][e] = p * (dp[n][e] - D[r]);
        }
}

// dQ (scaled) of this thread's rows row0 and row0 + 8, query head h, into dqkv
template <int HD>
__device__ __forceinline__ void dq_store(floatX* dqkv, const float (&dq)[HD / 8][4], int b, int T, int H, int KV, int h,
                                         int row0, float scale) {
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const int q4 = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        floatX* dqr = dqkv + ((size_t)b * T + row0 + r * 8) * ld + (size_t)h * HD + 2 * q4;
        for (int d = 0; d < HD / 8; d++)
            *reinterpret_cast<floatX2*>(dqr + d * 8) = to_floatX2(dq[d][2 * r] * scale, dq[d][2 * r + 1] * scale);
    }
}

template <int HD, bool ALIBI>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                             const float* lse, const float* dvec, const float* alibi, const int32_t* doc, int T, int H,
                             int KV) {
    static_assert(ATT_DQ_BM == ATT_BWD_BN, "the causal limit below assumes square tiles");
    constexpr int LDS = HD + ATT_PAD;
    constexpr int KC = HD / 16;
    constexpr int NT = ATT_BWD_BN / 8;  // n8 tiles of S and dP (keys)
    constexpr int DT = HD / 8;          // n8 tiles of dQ
    DYNAMIC_SMEM(att_smem);
    floatX* sQ = reinterpret_cast<floatX*>(att_smem);  // [BM][LDS]
    floatX* sdO = sQ + ATT_DQ_BM * LDS;                        // [BM][LDS]
    floatX* sK = sdO + ATT_DQ_BM * LDS;                        // [2][BN][LDS]
    floatX* sV = sK + 2 * ATT_BWD_BN * LDS;                    // [2][BN][LDS]

    const int qt = T / ATT_DQ_BM - 1 - (int)blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int mat = lane / 8, r8 = lane % 8;  // ldmatrix row-address roles
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const size_t q_row0 = (size_t)b * T + (size_t)qt * ATT_DQ_BM;
    const floatX* kbase = qkv + (size_t)b * T * ld + (size_t)(H + kh) * HD;
    const floatX* vbase = qkv + (size_t)b * T * ld + (size_t)(H + KV + kh) * HD;
    const int n_kt = qt + 1;  // causal: key tiles 0..qt
    // documents, as in the forward: key tiles before d_first's skipped, the per-row mask on [d_first, d_last)'s
    const int32_t* drow = doc ? doc + q_row0 : nullptr;
    const int d_first = doc ? drow[0] : 0, d_last = doc ? drow[ATT_DQ_BM - 1] : 0;
    const int kt_first = d_first / ATT_BWD_BN;  // the first key tile any row of the block sees

    load_tile<ATT_DQ_BM, HD, ATT_THREADS>(sQ, qkv + q_row0 * ld + (size_t)h * HD, ld);
    load_tile<ATT_DQ_BM, HD, ATT_THREADS>(sdO, dout + q_row0 * H * HD + (size_t)h * HD, (size_t)H * HD);
    load_tile<ATT_BWD_BN, HD, ATT_THREADS>(sK, kbase + (size_t)kt_first * ATT_BWD_BN * ld, ld);
    load_tile<ATT_BWD_BN, HD, ATT_THREADS>(sV, vbase + (size_t)kt_first * ATT_BWD_BN * ld, ld);
    cp_async_commit();

    const float scale = rsqrtf((float)HD), scale_log2 = scale * 1.4426950408889634f;
    const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;
    const int row0 = qt * ATT_DQ_BM + warp * 16 + g;  // this thread's query rows: row0 and row0 + 8
    float L[2], D[2];                                 // lse * log2(e) and D of the two rows
    for (int r = 0; r < 2; r++) {
        const size_t i = ((size_t)b * H + h) * T + row0 + r * 8;
        L[r] = lse[i] * 1.4426950408889634f;
        D[r] = dvec[i];
    }
    float dq[DT][4];
    for (int d = 0; d < DT; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
    const floatX* qw = sQ + (warp * 16) * LDS;   // this warp's 16 query rows (A operand rows)
    const floatX* ow = sdO + (warp * 16) * LDS;
    const int lo[2] = {doc ? drow[warp * 16 + g] : 0, doc ? drow[warp * 16 + g + 8] : 0};  // the rows' doc starts

    for (int j = kt_first; j < n_kt; j++) {
        const int st = (j - kt_first) & 1;
        const floatX* k_s = sK + st * ATT_BWD_BN * LDS;
        const floatX* v_s = sV + st * ATT_BWD_BN * LDS;
        if (j + 1 < n_kt) {
            const size_t off = (size_t)(j + 1) * ATT_BWD_BN * ld;
            load_tile<ATT_BWD_BN, HD, ATT_THREADS>(sK + (st ^ 1) * ATT_BWD_BN * LDS, kbase + off, ld);
            load_tile<ATT_BWD_BN, HD, ATT_THREADS>(sV + (st ^ 1) * ATT_BWD_BN * LDS, vbase + off, ld);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        // S = Q K^T and dP = dO V^T (16 queries x 64 keys per warp)
        float s[NT][4], dp[NT][4];
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        for (int kc = 0; kc < KC; kc++) {
            // A tiles: (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
            uint32_t qa[4], oa[4];
            const int a_off = ((mat & 1) * 8 + r8) * LDS + kc * 16 + (mat >> 1) * 8;
            ldmatrix_x4(qa, qw + a_off);
            ldmatrix_x4(oa, ow + a_off);
            // B tiles (K^T, V^T): (keys n*8.., k 0-7), (same, k 8-15), (keys +8, k 0-7), (+8, k 8-15)
            for (int n = 0; n < NT; n += 2) {
                const int b_off = (n * 8 + (mat >> 1) * 8 + r8) * LDS + kc * 16 + (mat & 1) * 8;
                uint32_t kb[4], vb[4];
                ldmatrix_x4(kb, k_s + b_off);
                ldmatrix_x4(vb, v_s + b_off);
                mma_16816(s[n], qa, kb[0], kb[1]);
                mma_16816(s[n + 1], qa, kb[2], kb[3]);
                mma_16816(dp[n], oa, vb[0], vb[1]);
                mma_16816(dp[n + 1], oa, vb[2], vb[3]);
            }
        }
        // documents: the mask on the tiles where some row of the block has its start (bounds from doc, not from the
        // loop's start, as in the forward)
        const bool doc_tile = j * ATT_BWD_BN < d_last && (j + 1) * ATT_BWD_BN > d_first;
        dq_probs<NT, ALIBI>(s, dp, j * ATT_BWD_BN, row0, j == qt, doc_tile, lo, L, D, scale_log2, slope_log2);
        // dQ += dS K: the accumulators of n tiles 2c, 2c+1 are the A fragment of k-chunk c (keys
        // c*16..); B[k = key][n = dim] = K row-major, so transposed ldmatrix
        for (int c = 0; c < ATT_BWD_BN / 16; c++) {
            const uint32_t da[4] = {pack_x2(s[2 * c][0], s[2 * c][1]), pack_x2(s[2 * c][2], s[2 * c][3]),
                                    pack_x2(s[2 * c + 1][0], s[2 * c + 1][1]), pack_x2(s[2 * c + 1][2], s[2 * c + 1][3])};
            mma_a_times_rows<DT, LDS>(dq, da, k_s + c * 16 * LDS);
        }
        __syncthreads();  // the next iteration overwrites a buffer read here
    }

    dq_store<HD>(dqkv, dq, b, T, H, KV, h, row0, scale);
}

// Version 6's dQ: dQ = dS K from the dS the dK/dV kernel wrote (ds [B, H, T keys, T queries], floatX), one product
// instead of recomputing S and dP (3). One block per (b * H + query head, reversed query tile of 64), as the dQ kernel
// above; each warp owns 16 query rows, dQ in registers. Per key tile (kt_first .. qt, with documents from the tile of
// the block's first row's document start): the dS tile [64 keys][64 queries] and the K tile, double-buffered with
// cp.async. Entries the dK/dV kernel masked and may not have written (keys after the query on the diagonal tile, keys
// before the query's document start) are zeroed in shared memory first, on the tiles that have them.
static const int ATT_DS_LD = ATT_DQ_BM + ATT_PAD;  // a dS tile's row in shared memory: 64 queries + padding
template <int HD>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_backward_dq_ds_kernel(floatX* dqkv, const floatX* qkv, const floatX* ds, const int32_t* doc, int T, int H,
                                int KV) {
    static_assert(ATT_DQ_BM == ATT_BWD_BN, "the causal limit below assumes square tiles");
    constexpr int LDS = HD + ATT_PAD;
    constexpr int DT = HD / 8;  // n8 tiles of dQ
    DYNAMIC_SMEM(att_smem);
    floatX* sK = reinterpret_cast<floatX*>(att_smem);  // [2][BN][LDS]
    floatX* sS = sK + 2 * ATT_BWD_BN * LDS;            // [2][BN keys][ATT_DS_LD]

    const int qt = T / ATT_DQ_BM - 1 - (int)blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4;
    const int mat = lane / 8, r8 = lane % 8;  // ldmatrix row-address roles
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const int q0 = qt * ATT_DQ_BM;  // the block's first query
    const floatX* kbase = qkv + (size_t)b * T * ld + (size_t)(H + kh) * HD;
    const floatX* sbase = ds + (size_t)bh * T * T + q0;  // row key of the block's queries: sbase + key * T
    const int32_t* drow = doc ? doc + (size_t)b * T + q0 : nullptr;
    const int d_first = doc ? drow[0] : 0, d_last = doc ? drow[ATT_DQ_BM - 1] : 0;
    const int kt_first = d_first / ATT_BWD_BN;
    auto copy = [&](int j, int st) {  // key tile j's K and dS into buffer st
        load_tile<ATT_BWD_BN, HD, ATT_THREADS>(sK + st * ATT_BWD_BN * LDS, kbase + (size_t)j * ATT_BWD_BN * ld, ld);
        for (int c = threadIdx.x; c < ATT_BWD_BN * ATT_DQ_BM / 8; c += ATT_THREADS) {
            const int r = c / (ATT_DQ_BM / 8), col = (c % (ATT_DQ_BM / 8)) * 8;
            cp_async16(sS + (st * ATT_BWD_BN + r) * ATT_DS_LD + col, sbase + ((size_t)j * ATT_BWD_BN + r) * T + col);
        }
        cp_async_commit();
    };
    copy(kt_first, 0);
    float dq[DT][4];
    for (int d = 0; d < DT; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
    for (int j = kt_first; j <= qt; j++) {
        const int st = (j - kt_first) & 1;
        if (j < qt) {
            copy(j + 1, st ^ 1);  // buffer st ^ 1 was last read in iteration j - 1, before its closing barrier
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        floatX* s_s = sS + st * ATT_BWD_BN * ATT_DS_LD;
        const floatX* k_s = sK + st * ATT_BWD_BN * LDS;
        // zeros where P = 0: keys after the query (the diagonal tile), keys before the query's document start (the
        // tiles where some row's start lies after the tile's first key)
        const bool diag = j == qt, doc_tile = doc && d_last > j * ATT_BWD_BN;
        if (diag || doc_tile) {
            for (int i = threadIdx.x; i < ATT_BWD_BN * ATT_DQ_BM; i += ATT_THREADS) {
                const int kr = i / ATT_DQ_BM, qc = i % ATT_DQ_BM, key = j * ATT_BWD_BN + kr;
                if ((diag && key > q0 + qc) || (doc_tile && key < drow[qc])) s_s[kr * ATT_DS_LD + qc] = to_floatX(0.0f);
            }
            __syncthreads();
        }
        // dQ += dS K over the tile's 64 keys, 16 at a time: A = dS [16 rows][16 keys] from the stored [keys][queries]
        // (transposed ldmatrix), B = K [16 keys][hd] (transposed ldmatrix, as in the dQ kernel above)
        for (int c = 0; c < ATT_BWD_BN / 16; c++) {
            uint32_t da[4];
            ldmatrix_x4_trans(da, s_s + (c * 16 + (mat >> 1) * 8 + r8) * ATT_DS_LD + warp * 16 + (mat & 1) * 8);
            mma_a_times_rows<DT, LDS>(dq, da, k_s + c * 16 * LDS);
        }
        __syncthreads();  // the next iteration overwrites a buffer read here
    }
    const float scale = rsqrtf((float)HD);
    const int row0 = q0 + warp * 16 + g;
    for (int r = 0; r < 2; r++) {
        floatX* dqr = dqkv + ((size_t)b * T + row0 + r * 8) * ld + (size_t)h * HD + 2 * q4;
        for (int d = 0; d < DT; d++)
            *reinterpret_cast<floatX2*>(dqr + d * 8) = to_floatX2(scale * dq[d][2 * r], scale * dq[d][2 * r + 1]);
    }
}

// ---- backward, version 7: Hopper's wgmma (sm_90a) ---------------------------------------------------
// Version 3's two kernels with their products on wgmma (llmc/mma.cuh), one warpgroup (4 warps x 16 rows) per block,
// tiles of 64 keys and 64 query rows in the 128-byte swizzled layout (load_tile_sw128), the elementwise steps version
// 3's (dkdv_probs, dq_probs) on the same accumulator layout.
//   dK/dV: one block per (b * KV + kv head, key tile of 64), its K and V staged once; per (query head of the group,
//     query tile) Q, dO, lse, D (and document starts) double-buffered: S^T = K Q^T and dP^T = V dO^T from shared memory
//     (K-major both), then dV += P^T dO and dK += dS^T Q with P^T and dS^T from registers and dO, Q as MN-major B.
//   dQ: one block per (b * H + query head, reversed query tile of 64), K/V tiles double-buffered: S = Q K^T and
//     dP = dO V^T from shared memory, then dQ += dS K with dS from registers and K as an MN-major B.
// Each product group waited for at once. No atomics: version 3's determinism. Its sums of 16 products run in version
// 3's order (the emulation gives version 3's bits); whether the hardware's wgmma rounds them as mma.sync does is not
// assumed: the tests hold it to the reference's bounds. Needs hd 64 or 128; the launcher runs version 5 otherwise and
// where the device's code has no wgmma.
// Prediction (dev/cuda/notes_attention.md): 1.6-2x version 3's backward.
static const int ATT_WGB_N = 64;          // keys per dK/dV block and per dQ key tile; query rows per tile and dQ block
static const int ATT_WGB_THREADS = 128;   // one warpgroup

template <int HD, bool ALIBI>
__global__ void __launch_bounds__(ATT_WGB_THREADS, 2)
attention_backward_dkdv_wgmma_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                     const float* dvec, const float* alibi, const int32_t* doc, int T, int H, int KV) {
    static_assert(HD % 64 == 0, "whole 64-column swizzle tiles");
    constexpr int BM = ATT_WGB_N, NQ = BM / 8, DT = HD / 8, TILE = ATT_WGB_N * HD;
    constexpr uint32_t LBO = ATT_WGB_N * 128;  // bytes between the 64-column tiles of a 64-row tile
    DYNAMIC_SMEM(att_smem);
    floatX* sK = reinterpret_cast<floatX*>(smem_align1024(att_smem));  // [HD/64][64][64] swizzled
    floatX* sV = sK + TILE;                                              // [HD/64][64][64]
    floatX* sQ = sV + TILE;                                              // [2][HD/64][64][64]
    floatX* sdO = sQ + 2 * TILE;                                         // [2][HD/64][64][64]
    float* sL = reinterpret_cast<float*>(sdO + 2 * TILE);                // [2][BM] lse * log2(e)
    float* sD = sL + 2 * BM;                                             // [2][BM]
    int32_t* sDoc = reinterpret_cast<int32_t*>(sD + 2 * BM);             // [2][BM] document starts (only with doc)

    const int kt = blockIdx.y;
    const int bk = blockIdx.x, b = bk / KV, kh = bk % KV, group = H / KV;
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4;
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const size_t kv_row0 = (size_t)b * T + (size_t)kt * ATT_WGB_N;
    load_tile_sw128<ATT_WGB_N, HD, ATT_WGB_THREADS>(sK, qkv + kv_row0 * ld + (size_t)(H + kh) * HD, ld);
    load_tile_sw128<ATT_WGB_N, HD, ATT_WGB_THREADS>(sV, qkv + kv_row0 * ld + (size_t)(H + KV + kh) * HD, ld);

    const int key0 = kt * ATT_WGB_N + warp * 16 + g;  // this thread's keys: key0 and key0 + 8
    const int first_qt = kt, n_qt = T / BM;           // square tiles: the diagonal tile first
    const int key_first = kt * ATT_WGB_N, key_last = key_first + ATT_WGB_N - 1;
    const int qt_end = doc ? att_doc_qtile_end(doc, b, T, BM, first_qt, n_qt, key_last) : n_qt;
    const int n_q = qt_end - first_qt, steps = group * n_q;  // (query head of the group, query tile) pairs
    // step i's Q and dO into buffer buf by cp.async (the caller commits), its lse, D and document starts by plain stores
    auto stage = [&](int i, int buf) {
        const int h = kh * group + i / n_q, it = first_qt + i % n_q;
        const size_t q_row0 = (size_t)b * T + (size_t)it * BM;
        load_tile_sw128<BM, HD, ATT_WGB_THREADS>(sQ + buf * TILE, qkv + q_row0 * ld + (size_t)h * HD, ld);
        load_tile_sw128<BM, HD, ATT_WGB_THREADS>(sdO + buf * TILE, dout + q_row0 * H * HD + (size_t)h * HD, (size_t)H * HD);
        for (int r = threadIdx.x; r < BM; r += ATT_WGB_THREADS) {
            const size_t i2 = ((size_t)b * H + h) * T + (size_t)it * BM + r;
            sL[buf * BM + r] = lse[i2] * 1.4426950408889634f;
            sD[buf * BM + r] = dvec[i2];
            if (doc) sDoc[buf * BM + r] = doc[q_row0 + r];
        }
    };
    if (steps > 0) stage(0, 0);
    cp_async_commit();

    const float scale = rsqrtf((float)HD), scale_log2 = scale * 1.4426950408889634f;
    float dk[DT][4], dv[DT][4];
    for (int d = 0; d < DT; d++)
        for (int e = 0; e < 4; e++) dk[d][e] = dv[d][e] = 0.0f;
    for (int i = 0; i < steps; i++) {
        const int buf = i & 1;
        if (i + 1 < steps) {
            stage(i + 1, buf ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const int h = kh * group + i / n_q, it = first_qt + i % n_q;
        const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;
        const floatX* q_s = sQ + buf * TILE;
        const floatX* o_s = sdO + buf * TILE;
        const float* sLb = sL + buf * BM;
        const float* sDb = sD + buf * BM;
        const int32_t* sDocb = sDoc + buf * BM;
        // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries): 16 head dims per product
        float st[NQ][4], dpt[NQ][4];
        wgmma_fence_operands(st);
        wgmma_fence_operands(dpt);
        wgmma_fence();
        wgmma_rows_times_rows<HD, BM, ATT_WGB_N>(st, sK, q_s);
        wgmma_rows_times_rows<HD, BM, ATT_WGB_N>(dpt, sV, o_s);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(st);
        wgmma_fence_operands(dpt);
        const bool doc_tile = doc && sDocb[BM - 1] > key_first && sDocb[0] <= key_last;
        dkdv_probs<NQ, ALIBI>(st, dpt, key0, it * BM, sLb, sDb, sDocb, doc_tile, scale_log2, slope_log2);
        // dV += P^T dO and dK += dS^T Q: queries 16c.. are rows 16c.. of the dO and Q tiles
        wgmma_a_times_rows<NQ, HD>(dv, st, o_s, LBO);
        wgmma_a_times_rows<NQ, HD>(dk, dpt, q_s, LBO);
        __syncthreads();  // buffer buf is staged again two steps on
    }
    dkdv_store<HD>(dqkv, dk, dv, b, T, H, KV, kh, key0, scale);
}

template <int HD, bool ALIBI>
__global__ void __launch_bounds__(ATT_WGB_THREADS, 2)
attention_backward_dq_wgmma_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                   const float* dvec, const float* alibi, const int32_t* doc, int T, int H, int KV) {
    static_assert(HD % 64 == 0, "whole 64-column swizzle tiles");
    constexpr int BM = ATT_WGB_N, BN = ATT_WGB_N, NT = BN / 8, DT = HD / 8, TILE = ATT_WGB_N * HD;
    constexpr uint32_t LBO = ATT_WGB_N * 128;
    DYNAMIC_SMEM(att_smem);
    floatX* sQ = reinterpret_cast<floatX*>(smem_align1024(att_smem));  // [HD/64][64][64] swizzled
    floatX* sdO = sQ + TILE;                                             // [HD/64][64][64]
    floatX* sK = sdO + TILE;                                             // [2][HD/64][64][64]
    floatX* sV = sK + 2 * TILE;                                          // [2][HD/64][64][64]

    const int qt = T / BM - 1 - (int)blockIdx.y;  // longest first
    const int bh = blockIdx.x, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4;
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const size_t q_row0 = (size_t)b * T + (size_t)qt * BM;
    const floatX* kbase = qkv + (size_t)b * T * ld + (size_t)(H + kh) * HD;
    const floatX* vbase = qkv + (size_t)b * T * ld + (size_t)(H + KV + kh) * HD;
    const int n_kt = qt + 1;  // causal: key tiles 0..qt (square tiles)
    const int32_t* drow = doc ? doc + q_row0 : nullptr;
    const int d_first = doc ? drow[0] : 0, d_last = doc ? drow[BM - 1] : 0;
    const int kt_first = d_first / BN;

    load_tile_sw128<BM, HD, ATT_WGB_THREADS>(sQ, qkv + q_row0 * ld + (size_t)h * HD, ld);
    load_tile_sw128<BM, HD, ATT_WGB_THREADS>(sdO, dout + q_row0 * H * HD + (size_t)h * HD, (size_t)H * HD);
    load_tile_sw128<BN, HD, ATT_WGB_THREADS>(sK, kbase + (size_t)kt_first * BN * ld, ld);
    load_tile_sw128<BN, HD, ATT_WGB_THREADS>(sV, vbase + (size_t)kt_first * BN * ld, ld);
    cp_async_commit();

    const float scale = rsqrtf((float)HD), scale_log2 = scale * 1.4426950408889634f;
    const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;
    const int row0 = qt * BM + warp * 16 + g;  // this thread's query rows: row0 and row0 + 8
    float L[2], D[2];
    for (int r = 0; r < 2; r++) {
        const size_t i = ((size_t)b * H + h) * T + row0 + r * 8;
        L[r] = lse[i] * 1.4426950408889634f;
        D[r] = dvec[i];
    }
    const int lo[2] = {doc ? drow[warp * 16 + g] : 0, doc ? drow[warp * 16 + g + 8] : 0};
    float dq[DT][4];
    for (int d = 0; d < DT; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;

    for (int j = kt_first; j < n_kt; j++) {
        const int st = (j - kt_first) & 1;
        const floatX* k_s = sK + st * TILE;
        const floatX* v_s = sV + st * TILE;
        kv_tiles_next_sw128<BN, HD, ATT_WGB_THREADS>(sK + (st ^ 1) * TILE, sV + (st ^ 1) * TILE, kbase, vbase, ld, j + 1,
                                                     n_kt);
        __syncthreads();
        // S = Q K^T and dP = dO V^T (64 queries x 64 keys): 16 head dims per product
        float s[NT][4], dp[NT][4];
        wgmma_fence_operands(s);
        wgmma_fence_operands(dp);
        wgmma_fence();
        wgmma_rows_times_rows<HD, BN, ATT_WGB_N>(s, sQ, k_s);
        wgmma_rows_times_rows<HD, BN, ATT_WGB_N>(dp, sdO, v_s);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(s);
        wgmma_fence_operands(dp);
        const bool doc_tile = j * BN < d_last && (j + 1) * BN > d_first;
        dq_probs<NT, ALIBI>(s, dp, j * BN, row0, j == qt, doc_tile, lo, L, D, scale_log2, slope_log2);
        wgmma_a_times_rows<NT, HD>(dq, s, k_s, LBO);  // dQ += dS K: keys 16c.. are rows 16c.. of the K tile
        __syncthreads();  // the next iteration overwrites a buffer read here
    }
    dq_store<HD>(dqkv, dq, b, T, H, KV, h, row0, scale);
}

// version 7 runs at this head dim on this device (else version 5 does)
static bool attention_backward_wgmma_fits(int hd) { return (hd == 64 || hd == 128) && wgmma_supported(); }

template <int HD, bool ALIBI>
static void attention_backward_wgmma_hd(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                        const float* dvec, const float* alibi, const int32_t* doc, int B, int T, int H,
                                        int KV, cudaStream_t stream) {
    // dK/dV: K, V and two buffers of Q, dO, lse, D (and document starts); dQ: Q, dO and two buffers of K, V; both plus
    // up to 1 KiB to align the tiles
    const size_t tile = (size_t)ATT_WGB_N * HD * sizeof(floatX);
    const size_t smem_kv = 6 * tile + 2 * ATT_WGB_N * 2 * sizeof(float) + 2 * ATT_WGB_N * sizeof(int32_t) + 1024;
    const size_t smem_q = 6 * tile + 1024;
    cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_wgmma_kernel<HD, ALIBI>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    attention_backward_dkdv_wgmma_kernel<HD, ALIBI><<<dim3(B * KV, T / ATT_WGB_N), ATT_WGB_THREADS, smem_kv, stream>>>(
        dqkv, dout, qkv, lse, dvec, alibi, doc, T, H, KV);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaFuncSetAttribute(attention_backward_dq_wgmma_kernel<HD, ALIBI>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    attention_backward_dq_wgmma_kernel<HD, ALIBI><<<dim3(B * H, T / ATT_WGB_N), ATT_WGB_THREADS, smem_q, stream>>>(
        dqkv, dout, qkv, lse, dvec, alibi, doc, T, H, KV);
    cudaCheck(cudaGetLastError());
}

template <int HD, bool ALIBI>
static void attention_backward_hd(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                  const float* lse, const float* dvec, const float* alibi, const int32_t* doc, int B,
                                  int T, int H, int KV, cudaStream_t stream, int version, floatX* ds) {
    if constexpr (HD % 64 == 0)
        if (version == 7) {
            attention_backward_wgmma_hd<HD, ALIBI>(dqkv, dout, qkv, lse, dvec, alibi, doc, B, T, H, KV, stream);
            return;
        }
    // dK/dV: 32 query rows per tile keep dK, dV, S^T and dP^T in registers; versions 4 to 6 hold two tiles' Q, dO,
    // lse, D (and, with documents, the rows' document starts: shared memory that only a launch with doc asks for);
    // version 5's blocks hold 128 keys, and version 6's where T allows (it also writes dS to ds)
    constexpr int BM = 32;
    const bool wide = version == 5 || (version == 6 && T % 128 == 0);
    const int stages = version >= 4 ? 2 : 1, bn = wide ? 128 : ATT_BWD_BN;
    const size_t smem_kv = (size_t)(2 * bn + 2 * stages * BM) * (HD + ATT_PAD) * sizeof(floatX) +
                           2 * stages * BM * sizeof(float) + (doc ? stages * BM * sizeof(int32_t) : 0);
    const dim3 grid_kv(B * KV, T / bn);
    if (version >= 4) {
        auto kernel = wide ? attention_backward_dkdv_prefetch_kernel<HD, BM, 128, ALIBI>
                           : attention_backward_dkdv_prefetch_kernel<HD, BM, ATT_BWD_BN, ALIBI>;
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
        kernel<<<grid_kv, 2 * bn, smem_kv, stream>>>(dqkv, dout, qkv, lse, dvec, alibi, doc, T, H, KV,
                                                     version == 6 ? ds : nullptr);
    } else {
        cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_kernel<HD, BM, ALIBI>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
        attention_backward_dkdv_kernel<HD, BM, ALIBI><<<grid_kv, ATT_THREADS, smem_kv, stream>>>(
            dqkv, dout, qkv, lse, dvec, alibi, doc, T, H, KV);
    }
    cudaCheck(cudaGetLastError());
    if (version == 6) {  // dQ = dS K: double-buffered K and dS tiles
        const size_t smem_s = (size_t)2 * ATT_BWD_BN * (HD + ATT_PAD + ATT_DS_LD) * sizeof(floatX);
        cudaCheck(cudaFuncSetAttribute(attention_backward_dq_ds_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem_s));
        attention_backward_dq_ds_kernel<HD><<<dim3(B * H, T / ATT_DQ_BM), ATT_THREADS, smem_s, stream>>>(
            dqkv, qkv, ds, doc, T, H, KV);
        cudaCheck(cudaGetLastError());
        return;
    }
    // dQ: Q and dO of 64 rows plus double-buffered K and V tiles
    const size_t smem_q = (size_t)(2 * ATT_DQ_BM + 4 * ATT_BWD_BN) * (HD + ATT_PAD) * sizeof(floatX);
    cudaCheck(cudaFuncSetAttribute(attention_backward_dq_kernel<HD, ALIBI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem_q));
    attention_backward_dq_kernel<HD, ALIBI><<<dim3(B * H, T / ATT_DQ_BM), ATT_THREADS, smem_q, stream>>>(
        dqkv, dout, qkv, lse, dvec, alibi, doc, T, H, KV);
    cudaCheck(cudaGetLastError());
}

template <int HD>
static void attention_backward_hd(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                  const float* lse, const float* dvec, const float* alibi, const int32_t* doc, int B,
                                  int T, int H, int KV, cudaStream_t stream, int version, floatX* ds) {
    if (alibi) attention_backward_hd<HD, true>(dqkv, dout, qkv, lse, dvec, alibi, doc, B, T, H, KV, stream, version, ds);
    else attention_backward_hd<HD, false>(dqkv, dout, qkv, lse, dvec, alibi, doc, B, T, H, KV, stream, version, ds);
}

// The backward's dK/dV kernel per head dim: version 3 (attention_backward_dkdv_kernel), 4 or 5 (its prefetching form
// with 64 or 128 keys per block; the same bits). dev/cuda/attention_backward.cu times them at the sweep's shapes
// (scripts/gpu_check.sh); an entry changes only on a GPU's timings. Versions 4 and 5 have run in the emulation only.
// Version 5 needs T a multiple of 128: at other lengths version 4 runs in its place. Version 6 (version 5 writing dS,
// then dQ = dS K) takes a dS buffer the trainer does not allocate: a candidate for dev/cuda's timings, not a table entry.
static const int ATT_BWD_TABLE[][2] = {
    // head dim, version
    {64, 3},
    {80, 3},
    {128, 3},
};
static int attention_backward_version(int hd) {
    for (const auto& e : ATT_BWD_TABLE)
        if (e[0] == hd) return e[1];
    return 3;
}

// dqkv [B,T,(H+2KV)*hd] (overwritten) <- dout [B,T,H*hd], out and lse of the forward, qkv; alibi [H] or null; doc
// [B*T] (device) or null, the forward's. Scratch: dvec [B,H,T] fp32. Deterministic: no atomics, every element written
// by one thread. version: 3, 4 or 5 (the dK/dV kernel; 5 runs as 4 where T is no multiple of 128), 6 (dQ from the
// dS the dK/dV kernel writes into ds [B, H, T, T], which it needs), 7 (both kernels on wgmma; version 5 where
// attention_backward_wgmma_fits says no), 0 for attention_backward_version's choice.
static void attention_backward(floatX* dqkv, float* dvec, const floatX* dout, const floatX* out,
                               const floatX* qkv, const float* lse, int B, int T, int H, int KV, int hd,
                               cudaStream_t stream, const float* alibi = nullptr, const int32_t* doc = nullptr,
                               int version = 0, floatX* ds = nullptr) {
    attention_check_shape(B, T, H, KV, hd);
    if (version == 0) version = attention_backward_version(hd);
    if (version < 3 || version > 7) die("attention_backward: version %d (3 to 7)", version);
    if (version == 6 && !ds) die("attention_backward: version 6 needs a dS buffer of B*H*T*T elements");
    if (version == 7 && !attention_backward_wgmma_fits(hd)) version = 5;
    if (version == 5 && T % 128 != 0) version = 4;
    attention_backward_preprocess(dvec, dout, out, B, T, H, hd, stream);
    if (hd == 64) attention_backward_hd<64>(dqkv, dout, qkv, lse, dvec, alibi, doc, B, T, H, KV, stream, version, ds);
    else if (hd == 80) attention_backward_hd<80>(dqkv, dout, qkv, lse, dvec, alibi, doc, B, T, H, KV, stream, version, ds);
    else attention_backward_hd<128>(dqkv, dout, qkv, lse, dvec, alibi, doc, B, T, H, KV, stream, version, ds);
}
