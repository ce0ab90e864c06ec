// dev/cuda/attention_backward.cu: causal GQA attention backward, numbered versions checked against
// the CPU reference (llmc/ref_ops.h attention_backward) and timed at the target shape, together with
// the forward of llmc/attention.cuh.
//   version 1  llmc/attention_rowwise.cuh (the fp32 build's attention): fp32 on CUDA cores, P recomputed
//              from the saved logsumexp; one warp per query row computes D = rowsum(dO * O) and dQ,
//              then one warp per key row sums dK and dV over the GQA group's causal queries (no atomics).
//   version 2  FA2 structure: one block per (key tile, kv head); dK and dV of 64 keys accumulate in
//              registers over every query head of the GQA group and every causal query tile (no
//              atomics, no race), tensor cores (mma.sync m16n8k16 bf16), dQ by fp32 atomics into a
//              scratch buffer converted to bf16 at the end: the order of the atomic adds, and so the
//              bits of dQ, change from run to run.
//   version 3  llmc/attention.cuh: version 2 without the dQ part, plus a separate dQ kernel (one block
//              per (query tile, query head), key tiles in a fixed order, P and dS recomputed, dQ in
//              registers, written once): no atomics, bitwise reproducible.
//   version 4  llmc/attention.cuh with its prefetching dK/dV kernel: version 3's dK/dV block copies the next query
//              tile's Q and dO (cp.async, a second buffer) and loads its lse and D while the current tile is
//              computed, over one sequence of (query head, query tile); the same arithmetic: version 3's bits.
//   version 5  llmc/attention.cuh: version 4 with 128 keys per dK/dV block (8 warps), so each staged Q/dO tile serves
//              twice the keys, and warps whose keys all lie after a tile's rows skipping it; version 3's bits (T a
//              multiple of 128; version 4 runs at other lengths).
//   version 6  llmc/attention.cuh: version 5's dK/dV kernel also writes dS (bf16, [B,H,T,T] key-major), and dQ = dS K
//              reads it (one product instead of recomputing S and dP: 5 in all, not 7); dK, dV: version 3's bits.
//   version 7  llmc/attention.cuh's Hopper kernels: version 3's two kernels on wgmma (sm_90a), one warpgroup per block,
//              64-key and 64-query tiles in the 128-byte swizzled layout; other roundings than version 3's. Where it
//              does not run (hd 80, a device without sm_90a code) the launcher runs version 5, and the program says so.
// Layout: qkv [B,T,(H+2KV)*hd], dout and out [B,T,H*hd], lse [B,H,T] fp32 -> dqkv [B,T,(H+2KV)*hd].
// FLOPs: backward = 2.5 x forward = 2.5 * 4 * B * H * T * T * hd / 2 (five T x T x hd matmuls against
// the forward's two; the recomputation of S is counted, as FlashAttention-2 counts it). Version 3 does
// two more (S and dP again in the dQ kernel); they are not counted, so its TFLOP/s compare as time.
// Tolerance (notes_attention.md): per part q, k, v: |d - ref| <= 4u * max|ref part| + 4u * |ref|, u = 2^-8.
// Usage: attention_backward [version] [--check-only] [--sizes BxTxHxKVxhd,...] [--reps N] [--warmup N]
//                           [--docs LIST] [--skip-matrix] [--help]
// The checks always run: the fixed shapes above (unless --skip-matrix), then the documents check (versions 1, 3 to 7);
// --sizes sets the timed shapes (default 4x4096x32x32x128). --docs 1,4,16 times each shape with 1, 4 and 16 equal
// documents per sequence (llmc/attention.cuh's doc; the backward after the forward with the same documents), each row
// beside its time / the docs 1 time and the predicted fraction (dev/cuda/attention_cases.h); e.g.
// attention_backward 3 --sizes 8x2048x16x16x128 --docs 1,4,16.
// Harness: dev/cuda/common.h (command line, inputs, device buffer sets, timing); rows report TFLOP/s.
#include "dev/cuda/attention_cases.h"
#include "dev/cuda/common.h"
#include "llmc/ref_ops.h"
#include "llmc/attention.cuh"
#include "llmc/attention_rowwise.cuh"

// dqkv's query part <- bf16(dq_accum).
__global__ void attention_dq_convert_kernel(__nv_bfloat16* dqkv, const float* dq_accum, int B, int T, int H, int KV,
                                            int hd) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t qd = (size_t)H * hd;
    if (i >= (size_t)B * T * qd) return;
    const size_t bt = i / qd, c = i % qd;
    dqkv[bt * (H + 2 * KV) * hd + c] = __float2bfloat16(dq_accum[i]);
}

struct Scratch {
    float* dq_accum;  // [B,T,H*hd] (version 2)
    float* dvec;      // [B,H,T]
    bf16* ds;         // [B,H,T,T] (version 6)
};

// ---- version 2: FA2 dK/dV blocks, dQ by fp32 atomics -------------------------------------------
// One block per (b * KV + kv head, key tile), x fastest: the first wave holds the low key tiles of
// every head, which have the most query tiles (longest first). Each warp owns 16 keys and keeps
// their dK and dV (16 x hd each, fp32) in registers while the block walks every query head of the
// GQA group and every query tile at or after the key tile; dK and dV are then written once, so
// the group's sum needs no atomics. Per query tile of BM rows (Q, dO, lse, D staged in shared memory):
//   S^T = K Q^T, P^T = exp(S^T * scale - lse), dV += P^T dO, dP^T = V dO^T,
//   dS^T = P^T (dP^T - D), dK += dS^T Q; dS goes through shared memory and dQ += dS K
//   (fp32 atomics into dq_accum, scale folded in).
// Every fragment comes from shared memory by ldmatrix (transposed where the operand is stored
// [k][n]); rows are padded by 16 bytes, so the eight rows of each 8x8 tile hit distinct banks.
template <int HD, int BM>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_backward_v2_kernel(__nv_bfloat16* dqkv, float* dq_accum, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                             const float* lse, const float* dvec, int T, int H, int KV) {
    constexpr int LDS = HD + ATT_PAD;
    constexpr int LDP = ATT_BWD_BN + ATT_PAD;   // dS row stride
    constexpr int KC = HD / 16;
    constexpr int NQ = BM / 8;                  // n8 tiles over the query tile
    constexpr int DT = HD / 8;
    constexpr int RT = BM / 16;                 // dQ: row tiles ...
    constexpr int DP = 4 / RT;                  // ... times head-dim parts = 4 warps
    constexpr int DQT = HD / DP / 8;            // n8 tiles of a warp's dQ slice
    DYNAMIC_SMEM(att_smem);
    __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(att_smem);  // [BN][LDS]
    __nv_bfloat16* sV = sK + ATT_BWD_BN * LDS;                        // [BN][LDS]
    __nv_bfloat16* sQ = sV + ATT_BWD_BN * LDS;                        // [BM][LDS]
    __nv_bfloat16* sdO = sQ + BM * LDS;                               // [BM][LDS]
    __nv_bfloat16* sdS = sdO + BM * LDS;                              // [BM][LDP]  dS[query][key]
    float* sL = reinterpret_cast<float*>(sdS + BM * LDP);             // [BM] lse * log2(e)
    float* sD = sL + BM;                                              // [BM]

    const int kt = blockIdx.y;
    const int bk = blockIdx.x, b = bk / KV, kh = bk % KV, group = H / KV;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4;
    const int mat = lane / 8, r8 = lane % 8;  // ldmatrix row-address roles
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
    const __nv_bfloat16* kw = sK + (warp * 16) * LDS;  // this warp's 16 keys (A operand rows)
    const __nv_bfloat16* vw = sV + (warp * 16) * LDS;
    const int first_qt = kt * ATT_BWD_BN / BM, n_qt = T / BM;

    for (int hi = 0; hi < group; hi++) {
        const int h = kh * group + hi;
        for (int it = first_qt; it < n_qt; it++) {
            const size_t q_row0 = (size_t)b * T + (size_t)it * BM;
            load_tile<BM, HD, ATT_THREADS>(sQ, qkv + q_row0 * ld + (size_t)h * HD, ld);
            load_tile<BM, HD, ATT_THREADS>(sdO, dout + q_row0 * H * HD + (size_t)h * HD, (size_t)H * HD);
            cp_async_commit();
            for (int i = threadIdx.x; i < BM; i += ATT_THREADS) {
                const size_t r = ((size_t)b * H + h) * T + (size_t)it * BM + i;
                sL[i] = lse[r] * 1.4426950408889634f;
                sD[i] = dvec[r];
            }
            cp_async_wait<0>();
            __syncthreads();

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
                    mma_bf16_16816(st[n], ka, qb[0], qb[1]);
                    mma_bf16_16816(st[n + 1], ka, qb[2], qb[3]);
                    mma_bf16_16816(dpt[n], va, ob[0], ob[1]);
                    mma_bf16_16816(dpt[n + 1], va, ob[2], ob[3]);
                }
            }
            // P^T and dS^T in place (rows: keys key0, key0 + 8; columns: queries)
            for (int n = 0; n < NQ; n++)
                for (int e = 0; e < 4; e++) {
                    const int qi = n * 8 + 2 * q4 + (e & 1);
                    const int key = key0 + (e >> 1) * 8;
                    const float p = (key > it * BM + qi) ? 0.0f : exp2f(st[n][e] * scale_log2 - sL[qi]);
                    st[n][e] = p;
                    dpt[n][e] = p * (dpt[n][e] - sD[qi]);
                }
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
                    mma_bf16_16816(dv[d], pa, ob[0], ob[1]);
                    mma_bf16_16816(dv[d + 1], pa, ob[2], ob[3]);
                    mma_bf16_16816(dk[d], sa, qb[0], qb[1]);
                    mma_bf16_16816(dk[d + 1], sa, qb[2], qb[3]);
                }
            }
            // dS -> shared as [query][key] bf16 for the dQ product
            for (int n = 0; n < NQ; n++)
                for (int e = 0; e < 4; e++) {
                    const int qi = n * 8 + 2 * q4 + (e & 1);
                    sdS[qi * LDP + warp * 16 + g + (e >> 1) * 8] = __float2bfloat16(dpt[n][e]);
                }
            __syncthreads();
            // dQ[BM, hd] += dS[BM, 64] K[64, hd]; warp: row tile warp % RT, head-dim part warp / RT
            {
                const int rt = warp % RT, dpart = warp / RT;
                float dq[DQT][4];
                for (int d = 0; d < DQT; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
                const __nv_bfloat16* sr = sdS + (rt * 16) * LDP;
                for (int c = 0; c < ATT_BWD_BN / 16; c++) {
                    uint32_t a[4];
                    ldmatrix_x4(a, sr + ((mat & 1) * 8 + r8) * LDP + c * 16 + (mat >> 1) * 8);
                    const __nv_bfloat16* kr = sK + (c * 16 + (mat & 1) * 8 + r8) * LDS + dpart * (HD / DP) + (mat >> 1) * 8;
                    for (int d = 0; d < DQT; d += 2) {
                        uint32_t kb[4];
                        ldmatrix_x4_trans(kb, kr + d * 8);
                        mma_bf16_16816(dq[d], a, kb[0], kb[1]);
                        mma_bf16_16816(dq[d + 1], a, kb[2], kb[3]);
                    }
                }
                for (int r = 0; r < 2; r++) {
                    const int row = it * BM + rt * 16 + g + r * 8;
                    float* dst = dq_accum + ((size_t)b * T + row) * H * HD + (size_t)h * HD + dpart * (HD / DP) + 2 * q4;
                    for (int d = 0; d < DQT; d++) {
                        atomicAdd(dst + d * 8, dq[d][2 * r] * scale);
                        atomicAdd(dst + d * 8 + 1, dq[d][2 * r + 1] * scale);
                    }
                }
            }
            __syncthreads();  // sQ, sdO, sdS are overwritten by the next query tile
        }
    }
    // write dK (scaled) and dV of this warp's 16 keys
    for (int r = 0; r < 2; r++) {
        const size_t row = (size_t)b * T + key0 + r * 8;
        __nv_bfloat16* dkr = dqkv + row * ld + (size_t)(H + kh) * HD + 2 * q4;
        __nv_bfloat16* dvr = dqkv + row * ld + (size_t)(H + KV + kh) * HD + 2 * q4;
        for (int d = 0; d < DT; d++) {
            *reinterpret_cast<__nv_bfloat162*>(dkr + d * 8) =
                __floats2bfloat162_rn(dk[d][2 * r] * scale, dk[d][2 * r + 1] * scale);
            *reinterpret_cast<__nv_bfloat162*>(dvr + d * 8) = __floats2bfloat162_rn(dv[d][2 * r], dv[d][2 * r + 1]);
        }
    }
}

template <int HD>
static void attention_backward_v2_hd(__nv_bfloat16* dqkv, float* dq_accum, const __nv_bfloat16* dout,
                                     const __nv_bfloat16* qkv, const float* lse, const float* dvec, int B, int T, int H,
                                     int KV, cudaStream_t stream) {
    // 32 query rows per tile keep dK, dV, S^T and dP^T in registers; hd 80 takes 64 so that the dQ
    // slices (hd / (4 / (BM / 16)) columns per warp) are an even number of n8 tiles
    constexpr int BM = HD == 80 ? 64 : 32;
    const size_t smem = (size_t)(2 * ATT_BWD_BN + 2 * BM) * (HD + ATT_PAD) * sizeof(__nv_bfloat16) +
                        (size_t)BM * (ATT_BWD_BN + ATT_PAD) * sizeof(__nv_bfloat16) + 2 * BM * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(attention_backward_v2_kernel<HD, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
    dim3 grid(B * KV, T / ATT_BWD_BN);
    attention_backward_v2_kernel<HD, BM><<<grid, ATT_THREADS, smem, stream>>>(dqkv, dq_accum, dout, qkv, lse, dvec, T, H,
                                                                               KV);
    cudaCheck(cudaGetLastError());
}

static void attention_backward_v2(__nv_bfloat16* dqkv, const Scratch& s, const __nv_bfloat16* dout,
                                  const __nv_bfloat16* out, const __nv_bfloat16* qkv, const float* lse, int B, int T,
                                  int H, int KV, int hd, cudaStream_t stream) {
    attention_check_shape(B, T, H, KV, hd);
    const size_t n_q = (size_t)B * T * H * hd;
    attention_backward_preprocess(s.dvec, dout, out, B, T, H, hd, stream);
    cudaCheck(cudaMemsetAsync(s.dq_accum, 0, n_q * sizeof(float), stream));
    if (hd == 64) attention_backward_v2_hd<64>(dqkv, s.dq_accum, dout, qkv, lse, s.dvec, B, T, H, KV, stream);
    else if (hd == 80) attention_backward_v2_hd<80>(dqkv, s.dq_accum, dout, qkv, lse, s.dvec, B, T, H, KV, stream);
    else attention_backward_v2_hd<128>(dqkv, s.dq_accum, dout, qkv, lse, s.dvec, B, T, H, KV, stream);
    attention_dq_convert_kernel<<<(unsigned)((n_q + 255) / 256), 256, 0, stream>>>(dqkv, s.dq_accum, B, T, H, KV, hd);
    cudaCheck(cudaGetLastError());
}

// doc [B*T] (device) or null, the forward's: versions 1 and 3 to 7 take documents, version 2 does not (the caller never
// passes it one)
static bool takes_doc(int version) { return version != 2; }
// version 7 where it runs (else llmc's launcher runs version 5)
static bool runs_as_asked(int version, int hd) { return version != 7 || attention_backward_wgmma_fits(hd); }
static void run_version(int version, __nv_bfloat16* dqkv, const Scratch& s, const __nv_bfloat16* dout,
                        const __nv_bfloat16* out, const __nv_bfloat16* qkv, const float* lse, int B, int T, int H,
                        int KV, int hd, const int32_t* doc = nullptr) {
    if (version == 1) attention_rowwise_backward(dqkv, s.dvec, dout, out, qkv, lse, B, T, H, KV, hd, 0, nullptr, doc);
    else if (version == 2) attention_backward_v2(dqkv, s, dout, out, qkv, lse, B, T, H, KV, hd, 0);
    else attention_backward(dqkv, s.dvec, dout, out, qkv, lse, B, T, H, KV, hd, 0, nullptr, doc, version, s.ds);
}

// ---- host side ------------------------------------------------------------------------------------

static const int N_VERSIONS = 7;
static const double TARGET_TFLOPS = 400.0;

// Device buffers of one problem, carved from one allocation (a DeviceSets set) by offsets.
struct Offsets {
    size_t qkv, out, dout, dqkv, lse, dq_accum, dvec, ds, total;
};

static Offsets offsets_for(int B, int T, int H, int KV, int hd) {
    const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_q = (size_t)B * T * H * hd;
    Layout lay;
    Offsets o;
    o.qkv = lay.add(n_qkv * sizeof(bf16));
    o.out = lay.add(n_q * sizeof(bf16));
    o.dout = lay.add(n_q * sizeof(bf16));
    o.dqkv = lay.add(n_qkv * sizeof(bf16));
    o.lse = lay.add((size_t)B * H * T * sizeof(float));
    o.dq_accum = lay.add(n_q * sizeof(float));
    o.dvec = lay.add((size_t)B * H * T * sizeof(float));
    o.ds = lay.add((size_t)B * H * T * T * sizeof(bf16));
    o.total = lay.total;
    return o;
}

struct Buffers {
    bf16 *qkv, *out, *dout, *dqkv;
    float* lse;
    Scratch s;
};

static Buffers buffers_at(const DeviceSets& sets, int i, const Offsets& o) {
    return {sets.ptr<bf16>(i, o.qkv), sets.ptr<bf16>(i, o.out), sets.ptr<bf16>(i, o.dout), sets.ptr<bf16>(i, o.dqkv),
            sets.ptr<float>(i, o.lse),
            {sets.ptr<float>(i, o.dq_accum), sets.ptr<float>(i, o.dvec), sets.ptr<bf16>(i, o.ds)}};
}

// One check on fresh inputs; prints one [PASS] / [FAIL] line with the worst error of dq, dk, dv. doc [B*T] (host) or
// null: query t sees keys doc[t]..t, in the forward, the backward and the reference.
static bool check_shape(int version, int B, int T, int H, int KV, int hd, size_t case_index, const int32_t* doc) {
    const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_q = (size_t)B * T * H * hd;
    std::vector<float> qkv_f, dout_f;
    fill_uniform(&qkv_f, n_qkv, seed_for("attention_backward", version, 2 * case_index), -1.0f, 1.0f);
    fill_uniform(&dout_f, n_q, seed_for("attention_backward", version, 2 * case_index + 1), -1.0f, 1.0f);
    std::vector<bf16> qkv_h = to_bf16(&qkv_f), dout_h = to_bf16(&dout_f);
    std::vector<float> ref_out(n_q), ref_att((size_t)B * H * T * T), ref_d(n_qkv);
    attention_forward(ref_out.data(), ref_att.data(), qkv_f.data(), B, T, H, KV, hd, (const float*)nullptr, doc);
    attention_backward(ref_d.data(), dout_f.data(), qkv_f.data(), ref_att.data(), B, T, H, KV, hd);

    const Offsets o = offsets_for(B, T, H, KV, hd);
    DeviceSets one;
    one.count = 1;
    one.bytes = o.total;
    char* base;
    cudaCheck(cudaMalloc(&base, o.total));
    one.base.push_back(base);
    Buffers d = buffers_at(one, 0, o);
    cudaCheck(cudaMemcpy(d.qkv, qkv_h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d.dout, dout_h.data(), n_q * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(d.dqkv, 0xff, n_qkv * sizeof(bf16)));  // NaN: unwritten gradients fail
    int32_t* d_doc = doc ? upload(std::vector<int32_t>(doc, doc + (size_t)B * T)) : nullptr;
    attention_forward(d.out, d.lse, d.qkv, B, T, H, KV, hd, 0, nullptr, d_doc);
    run_version(version, d.dqkv, d.s, d.dout, d.out, d.qkv, d.lse, B, T, H, KV, hd, d_doc);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<bf16> got = download(d.dqkv, n_qkv);
    device_sets_free(&one);
    if (d_doc) cudaCheck(cudaFree(d_doc));

    // per part of each token row: q [0, qd), k [qd, qd + kvd), v [qd + kvd, qd + 2 kvd);
    // |d - ref| <= 4u max|ref part| + 4u |ref| (notes_attention.md)
    const size_t ld = (size_t)(H + 2 * KV) * hd, qd = (size_t)H * hd, kvd = (size_t)KV * hd;
    const size_t lo[3] = {0, qd, qd + kvd}, hi[3] = {qd, qd + kvd, qd + 2 * kvd};
    const char* names[3] = {"dq", "dk", "dv"};
    bool ok = true;
    std::string detail;
    for (int p = 0; p < 3; p++) {
        double refmax = 0, worst = 0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (size_t c = lo[p]; c < hi[p]; c++) refmax = std::max(refmax, (double)std::fabs(ref_d[r * ld + c]));
        size_t bad = 0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (size_t c = lo[p]; c < hi[p]; c++) {
                const double ref = ref_d[r * ld + c], err = std::fabs((double)__bfloat162float(got[r * ld + c]) - ref);
                if (!(err <= 4 * U_BF16 * refmax + 4 * U_BF16 * std::fabs(ref))) bad++;
                worst = std::max(worst, std::isnan(err) ? INFINITY : err);
            }
        char buf[128];
        snprintf(buf, sizeof(buf), " %s max err %.2e (max |ref| %.2e)%s", names[p], worst, refmax, bad ? " BEYOND TOLERANCE" : "");
        detail += buf;
        ok = ok && bad == 0;
    }
    printf("[%s] attention_backward v%d B=%d T=%d H=%d KV=%d hd=%d%s:%s\n", ok ? "PASS" : "FAIL", version, B, T, H, KV, hd,
           doc ? (" documents " + documents_label(std::vector<int32_t>(doc, doc + (size_t)B * T), B, T)).c_str() : "",
           detail.c_str());
    return ok;
}

int main(int argc, char** argv) {
    AttentionArgs a = attention_parse_args(argc, argv,
                        "  Causal GQA flash-attention backward, bf16, hd 64/80/128. Versions: 1 warp per query row (fp32,\n"
                        "  atomics for dK/dV), 2 FA2 (tensor cores, dK/dV in registers per key tile, dQ by fp32 atomics),\n"
                        "  3 llmc/attention.cuh (version 2 with a separate dQ kernel: no atomics, bitwise reproducible),\n"
                        "  4 version 3 with the next query tile prefetched in the dK/dV kernel (version 3's bits),\n"
                        "  5 version 4 with 128-key dK/dV blocks (version 3's bits; version 4 where T % 128 != 0),\n"
                        "  6 version 5 writing dS, then dQ = dS K from it (5 products instead of 7; a B*H*T*T buffer),\n"
                        "  7 version 3's kernels on wgmma (sm_90a; version 5 where it does not run).\n"
                        "  Checks B=2 H=8 T in {128,256,1024} KV in {8,2} hd in {64,80,128} against the CPU reference, then\n"
                        "  times the llmc forward, each backward version and both together at the --sizes shapes\n"
                        "  (forward 4*B*H*T*T*hd/2 FLOP, backward 2.5x that; target 400 TFLOP/s). The documents check:\n"
                        "  B=2 T=256 H=4 KV=2 hd=128, unequal documents (versions 1, 3 to 7).\n",
                                 N_VERSIONS);
    cuda_require_device();
    print_device_info(0);

    int failures = attention_check_all(a, N_VERSIONS, check_shape);
    failures += attention_check_docs(a, N_VERSIONS, takes_doc, check_shape);
    if (!a.check_only) {
        attention_table_header(a, TARGET_TFLOPS);
        for (const std::vector<long>& s : a.sizes) {
            const int B = (int)s[0], T = (int)s[1], H = (int)s[2], KV = (int)s[3], hd = (int)s[4];
            const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_q = (size_t)B * T * H * hd;
            const Offsets o = offsets_for(B, T, H, KV, hd);
            DeviceSets sets = device_sets_alloc(o.total);
            std::vector<float> qkv_f, dout_f;
            fill_uniform(&qkv_f, n_qkv, seed_for("attention_backward_bench", 0, 0), -1.0f, 1.0f);
            fill_uniform(&dout_f, n_q, seed_for("attention_backward_bench", 0, 1), -1.0f, 1.0f);
            std::vector<bf16> qkv_h = to_bf16(&qkv_f), dout_h = to_bf16(&dout_f);
            device_sets_upload(sets, o.qkv, qkv_h.data(), n_qkv * sizeof(bf16));
            device_sets_upload(sets, o.dout, dout_h.data(), n_q * sizeof(bf16));
            const double fwd_flops = 4.0 * B * H * (double)T * T * hd / 2.0, bwd_flops = 2.5 * fwd_flops;
            // docs 1 times per row kind (forward, then backward and both per version), for the ratio column
            double fwd_ms1 = -1;
            std::vector<double> bwd_ms1(N_VERSIONS + 1, -1.0), both_ms1(N_VERSIONS + 1, -1.0);
            // documents counts in increasing order: the forward (timed on every set, so each set's out and lse are
            // this documents count's when the backward is timed), then each backward version with the same doc
            for (int n : a.docs) {
                const std::vector<int32_t> doc = equal_documents(B, T, n);
                int32_t* d_doc = n > 1 ? upload(doc) : nullptr;  // read-only, shared by the sets; docs 1: null
                const AttentionPrediction p = attention_predict(n > 1 ? doc.data() : nullptr, B, T);
                const double fwd_ms = time_kernel(a, sets, 0, [&](int i) {
                    Buffers d = buffers_at(sets, i, o);
                    attention_forward(d.out, d.lse, d.qkv, B, T, H, KV, hd, 0, nullptr, d_doc);
                });
                if (n == 1) fwd_ms1 = fwd_ms;
                attention_row(a, "attention_forward (llmc)", s, n, 3, sets.count, fwd_ms, fwd_flops, p.visible, fwd_ms1,
                              p.fwd, TARGET_TFLOPS);
                for (int v = 1; v <= N_VERSIONS; v++) {
                    if ((a.version && v != a.version) || (n > 1 && !takes_doc(v))) continue;
                    if (!runs_as_asked(v, hd))
                        printf("version 7 at %dx%dx%dx%dx%d: not run (needs hd 64 or 128 and sm_90a code); the rows "
                               "below are version 5's\n", B, T, H, KV, hd);
                    Args av = a;
                    if (v == 1) { av.warmup = std::min(a.warmup, 1); av.reps = std::min(a.reps, 3); }  // slow CUDA-core version
                    const double ms = time_kernel(av, sets, 0, [&](int i) {
                        Buffers d = buffers_at(sets, i, o);
                        run_version(v, d.dqkv, d.s, d.dout, d.out, d.qkv, d.lse, B, T, H, KV, hd, d_doc);
                    });
                    if (n == 1) { bwd_ms1[v] = ms; both_ms1[v] = fwd_ms + ms; }
                    // version 1's loops visit exactly the visible keys (its forward + backward is the rowwise backward's)
                    attention_row(a, "attention_backward", s, n, v, sets.count, ms, bwd_flops, p.visible, bwd_ms1[v],
                                  v == 1 ? p.visible : p.bwd, TARGET_TFLOPS);
                    attention_row(a, "attention forward + backward", s, n, v, sets.count, fwd_ms + ms, fwd_flops + bwd_flops,
                                  p.visible, both_ms1[v], v == 1 ? p.visible : p.fwd_bwd, TARGET_TFLOPS);
                }
                if (d_doc) cudaCheck(cudaFree(d_doc));
            }
            device_sets_free(&sets);
        }
    }
    if (failures) {
        fprintf(stderr, "error: %d attention_backward check(s) failed (lines marked [FAIL])\n", failures);
        return 1;
    }
    return 0;
}
