// dev/cuda/attention_forward.cu: causal GQA attention forward, numbered versions checked against
// the CPU reference (llmc/ref_ops.h attention_forward) and timed at the target shape.
//   version 1  llmc/attention_rowwise.cuh (the fp32 build's attention): one warp per query row, fp32
//              math on CUDA cores, online softmax; K/V read from global memory (L2) once per query
//              row. Simple and obviously correct.
//   version 2  below: llmc/attention.cuh's kernel without its pipeline: mma.sync m16n8k16 bf16 tensor
//              cores, K/V tiles of 64 keys in shared memory, FA2 online softmax in registers, causal
//              tiles skipped, one shared buffer with synchronous loads.
//   version 3  llmc/attention.cuh as the trainer uses it: version 2 plus cp.async double
//              buffering of the K/V tiles and the longest causal query tiles launched first.
//   version 4  llmc/attention.cuh's Hopper kernel: the same steps on wgmma (sm_90a), 128 query rows per block
//              (two warpgroups) against 128-key tiles in the 128-byte swizzled layout. Where it does not run
//              (hd 80, T not a multiple of 128, a device without sm_90a code) the launcher runs version 3, and
//              the program says so before the table.
// Layout: qkv [B,T,(H+2KV)*hd] bf16 -> out [B,T,H*hd] bf16, lse [B,H,T] fp32.
// FLOPs (causal, forward): 4 * B * H * T * T * hd / 2 (two matmuls of 2*T*T*hd, half the scores).
// Tolerances (notes_attention.md): |out - ref| <= 3u * max|v| + 2u * |ref| with u = 2^-8,
// |lse - ref| <= 3e-4 + 2e-5 |ref|.
// Usage: attention_forward [version] [--check-only] [--sizes BxTxHxKVxhd,...] [--reps N] [--warmup N]
//                          [--docs LIST] [--skip-matrix] [--help]
// The checks always run: the fixed shapes above (unless --skip-matrix), then the documents check (versions 1 and 3);
// --sizes sets the timed shapes (default 4x4096x32x32x128). --docs 1,4,16 times each shape with 1, 4 and 16 equal
// documents per sequence (llmc/attention.cuh's doc), each row beside its time / the docs 1 time and the predicted
// fraction (dev/cuda/attention_cases.h); e.g. attention_forward 3 --sizes 8x2048x16x16x128 --docs 1,4,16.
// Harness: dev/cuda/common.h (command line, inputs, device buffer sets, timing); rows report TFLOP/s.
#include "dev/cuda/attention_cases.h"
#include "dev/cuda/common.h"
#include "llmc/ref_ops.h"
#include "llmc/attention.cuh"
#include "llmc/attention_rowwise.cuh"

// ---- version 2: llmc/attention.cuh's forward without the pipeline ----------------------------------
// One block per (query tile, b * H + h) (short causal tiles first); one shared K/V buffer filled by
// synchronous 16-byte loads through registers, and K fragments read with 32-bit loads (lds32). The
// tiles, the fragment math and the online softmax are those of attention_forward_kernel.

// [ROWS, HD] tile (row stride ld in global memory) -> shared memory with row stride HD + ATT_PAD,
// through registers: visible after the caller's __syncthreads
template <int ROWS, int HD>
__device__ __forceinline__ void load_tile_sync(__nv_bfloat16* smem, const __nv_bfloat16* gmem, size_t ld) {
    constexpr int CHUNKS = HD / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += ATT_THREADS) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8;
        *reinterpret_cast<int4*>(smem + r * (HD + ATT_PAD) + col) = *reinterpret_cast<const int4*>(gmem + r * ld + col);
    }
}

template <int HD>
__global__ void __launch_bounds__(ATT_THREADS, 2)
attention_forward_v2_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int T, int H, int KV) {
    constexpr int LDS = HD + ATT_PAD;          // shared row stride (elements)
    constexpr int KC = HD / 16;                // k-chunks of the head dim
    constexpr int NT = ATT_FWD_BN / 8;         // n8 tiles of S
    constexpr int DT = HD / 8;                 // n8 tiles of O
    DYNAMIC_SMEM(att_smem);
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(att_smem);   // [BM][LDS]
    __nv_bfloat16* sK = sQ + ATT_FWD_BM * LDS;                          // [BN][LDS]
    __nv_bfloat16* sV = sK + ATT_FWD_BN * LDS;                          // [BN][LDS]

    const int qt = blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H, kh = h / (H / KV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4;
    const int mat = lane / 8, r8 = lane % 8;  // ldmatrix row-address roles
    const size_t ld = (size_t)(H + 2 * KV) * HD;
    const __nv_bfloat16* qbase = qkv + ((size_t)b * T + (size_t)qt * ATT_FWD_BM) * ld + h * HD;
    const __nv_bfloat16* kbase = qkv + (size_t)b * T * ld + (size_t)(H + kh) * HD;
    const __nv_bfloat16* vbase = qkv + (size_t)b * T * ld + (size_t)(H + KV + kh) * HD;
    const int n_kt = qt + 1;  // causal: key tiles 0..qt (BM == BN)

    load_tile_sync<ATT_FWD_BM, HD>(sQ, qbase, ld);
    uint32_t qf[KC][4];
    float o[DT][4];
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};  // rows g and g + 8
    const float scale_log2 = rsqrtf((float)HD) * 1.4426950408889634f;
    const int row0 = qt * ATT_FWD_BM + warp * 16 + g;  // this thread's first query row (second: + 8)

    for (int j = 0; j < n_kt; j++) {
        const size_t off = (size_t)j * ATT_FWD_BN * ld;
        load_tile_sync<ATT_FWD_BN, HD>(sK, kbase + off, ld);
        load_tile_sync<ATT_FWD_BN, HD>(sV, vbase + off, ld);
        __syncthreads();
        if (j == 0) {
            const __nv_bfloat16* qw = sQ + (warp * 16) * LDS;
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
        for (int n = 0; n < NT; n++) {
            const __nv_bfloat16* kr = sK + (n * 8 + g) * LDS + 2 * q4;
            for (int kc = 0; kc < KC; kc++) mma_bf16_16816(s[n], qf[kc], lds32(kr + kc * 16), lds32(kr + kc * 16 + 8));
        }
        // scale into the log2 domain; mask keys after the query on the diagonal tile
        const bool diag = (j == qt);
        float mx[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) {
                const int key = j * ATT_FWD_BN + n * 8 + 2 * q4 + (e & 1);
                const int row = row0 + (e >> 1) * 8;
                float x = s[n][e] * scale_log2;
                if (diag && key > row) x = -INFINITY;
                s[n][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        // online softmax: a row's 64 scores live in the 4 threads of a quad
        float corr[2];
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float m_new = fmaxf(m_row[r], mx[r]);  // finite: key 0 is visible to every row
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
        for (int d = 0; d < DT; d++) {
            o[d][0] *= corr[0]; o[d][1] *= corr[0];
            o[d][2] *= corr[1]; o[d][3] *= corr[1];
        }
        // O += P V: the S accumulators of n tiles 2c, 2c+1 are the A fragment of k-chunk c
        for (int c = 0; c < ATT_FWD_BN / 16; c++) {
            uint32_t pa[4] = {pack_x2(s[2 * c][0], s[2 * c][1]), pack_x2(s[2 * c][2], s[2 * c][3]),
                              pack_x2(s[2 * c + 1][0], s[2 * c + 1][1]), pack_x2(s[2 * c + 1][2], s[2 * c + 1][3])};
            const __nv_bfloat16* vr = sV + (c * 16 + (mat & 1) * 8 + r8) * LDS + (mat >> 1) * 8;
            for (int d = 0; d < DT; d += 2) {
                uint32_t vb[4];
                ldmatrix_x4_trans(vb, vr + d * 8);
                mma_bf16_16816(o[d], pa, vb[0], vb[1]);
                mma_bf16_16816(o[d + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads();  // the next iteration overwrites the buffer read here
    }

    // finish: full row sums, normalise, write O and the logsumexp
    for (int r = 0; r < 2; r++) {
        l_row[r] += __shfl_xor_sync(0xffffffffu, l_row[r], 1);
        l_row[r] += __shfl_xor_sync(0xffffffffu, l_row[r], 2);
    }
    const float inv[2] = {1.0f / l_row[0], 1.0f / l_row[1]};
    for (int r = 0; r < 2; r++) {
        const int row = row0 + r * 8;
        __nv_bfloat16* orow = out + ((size_t)b * T + row) * H * HD + h * HD + 2 * q4;
        for (int d = 0; d < DT; d++)
            *reinterpret_cast<__nv_bfloat162*>(orow + d * 8) =
                __floats2bfloat162_rn(o[d][2 * r] * inv[r], o[d][2 * r + 1] * inv[r]);
        if (q4 == 0) lse[((size_t)b * H + h) * T + row] = (m_row[r] + __log2f(l_row[r])) * 0.6931471805599453f;
    }
}

template <int HD>
static void attention_forward_v2_hd(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int H,
                                    int KV, cudaStream_t stream) {
    const size_t smem = (size_t)(ATT_FWD_BM + 2 * ATT_FWD_BN) * (HD + ATT_PAD) * sizeof(__nv_bfloat16);
    cudaCheck(cudaFuncSetAttribute(attention_forward_v2_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_forward_v2_kernel<HD><<<dim3(T / ATT_FWD_BM, B * H), ATT_THREADS, smem, stream>>>(out, lse, qkv, T, H, KV);
    cudaCheck(cudaGetLastError());
}

static void attention_forward_v2(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int H, int KV,
                                 int hd, cudaStream_t stream) {
    attention_check_shape(B, T, H, KV, hd);
    if (hd == 64) attention_forward_v2_hd<64>(out, lse, qkv, B, T, H, KV, stream);
    else if (hd == 80) attention_forward_v2_hd<80>(out, lse, qkv, B, T, H, KV, stream);
    else attention_forward_v2_hd<128>(out, lse, qkv, B, T, H, KV, stream);
}

// doc [B*T] (device) or null: versions 1 and 3 take documents, version 2 does not (the caller never passes it one)
static bool takes_doc(int version) { return version != 2; }
// version 4 where it runs (else llmc's launcher runs version 3)
static bool runs_as_asked(int version, int T, int hd) { return version != 4 || attention_forward_wgmma_fits(T, hd); }
static void run_version(int version, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int H,
                        int KV, int hd, const int32_t* doc = nullptr) {
    if (version == 1) attention_rowwise_forward(out, lse, qkv, B, T, H, KV, hd, 0, nullptr, doc);
    else if (version == 2) attention_forward_v2(out, lse, qkv, B, T, H, KV, hd, 0);
    else attention_forward(out, lse, qkv, B, T, H, KV, hd, 0, nullptr, doc, version);
}

// ---- host side ------------------------------------------------------------------------------------

static const int N_VERSIONS = 4;
static const double TARGET_TFLOPS = 400.0;

// One check on fresh inputs; prints one [PASS] / [FAIL] line. doc [B*T] (host) or null: query t sees keys
// doc[t]..t, in the reference too.
static bool check_shape(int version, int B, int T, int H, int KV, int hd, size_t case_index, const int32_t* doc) {
    const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_out = (size_t)B * T * H * hd, n_lse = (size_t)B * H * T;
    std::vector<float> qkv_f;
    fill_uniform(&qkv_f, n_qkv, seed_for("attention_forward", version, case_index), -1.0f, 1.0f);
    std::vector<bf16> qkv_h = to_bf16(&qkv_f);
    std::vector<float> ref_out(n_out), ref_att((size_t)B * H * T * T), ref_lse(n_lse);
    attention_forward(ref_out.data(), ref_att.data(), qkv_f.data(), B, T, H, KV, hd, (const float*)nullptr, doc);
    // reference logsumexp of the scaled scores over the keys each query sees, in double
    const size_t ld = (size_t)(H + 2 * KV) * hd;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float* q = &qkv_f[((size_t)b * T + t) * ld + h * hd];
                const int lo = doc ? doc[(size_t)b * T + t] : 0;
                std::vector<double> sc(t + 1);
                double mx = -1e300;
                for (int t2 = lo; t2 <= t; t2++) {
                    const float* k = &qkv_f[((size_t)b * T + t2) * ld + (size_t)(H + h / (H / KV)) * hd];
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)q[i] * k[i];
                    sc[t2] = d / std::sqrt((double)hd);
                    mx = std::max(mx, sc[t2]);
                }
                double sum = 0;
                for (int t2 = lo; t2 <= t; t2++) sum += std::exp(sc[t2] - mx);
                ref_lse[((size_t)b * H + h) * T + t] = (float)(mx + std::log(sum));
            }
    bf16* d_qkv = upload(qkv_h);
    int32_t* d_doc = doc ? upload(std::vector<int32_t>(doc, doc + (size_t)B * T)) : nullptr;
    bf16* d_out;
    float* d_lse;
    cudaCheck(cudaMalloc(&d_out, n_out * sizeof(bf16)));
    cudaCheck(cudaMalloc(&d_lse, n_lse * sizeof(float)));
    cudaCheck(cudaMemset(d_out, 0xff, n_out * sizeof(bf16)));  // NaN: an unwritten output fails
    run_version(version, d_out, d_lse, d_qkv, B, T, H, KV, hd, d_doc);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<bf16> out_h = download(d_out, n_out);
    std::vector<float> lse_h = download(d_lse, n_lse);
    cudaCheck(cudaFree(d_qkv));
    if (d_doc) cudaCheck(cudaFree(d_doc));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_lse));
    // |out - ref| <= 3u max|v| + 2u |ref| (|v| <= 1 here); |lse - ref| <= 3e-4 + 2e-5 |ref| (notes_attention.md)
    double worst_out = 0, worst_lse = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n_out; i++) {
        const double err = std::fabs((double)__bfloat162float(out_h[i]) - ref_out[i]);
        if (!(err <= 3 * U_BF16 + 2 * U_BF16 * std::fabs(ref_out[i]))) bad++;
        worst_out = std::max(worst_out, std::isnan(err) ? INFINITY : err);
    }
    for (size_t i = 0; i < n_lse; i++) {
        const double err = std::fabs((double)lse_h[i] - ref_lse[i]);
        if (!(err <= 3e-4 + 2e-5 * std::fabs(ref_lse[i]))) bad++;
        worst_lse = std::max(worst_lse, std::isnan(err) ? INFINITY : err);
    }
    printf("[%s] attention_forward v%d B=%d T=%d H=%d KV=%d hd=%d%s: max |out err| %.2e, max |lse err| %.2e%s\n",
           bad ? "FAIL" : "PASS", version, B, T, H, KV, hd,
           doc ? (" documents " + documents_label(std::vector<int32_t>(doc, doc + (size_t)B * T), B, T)).c_str() : "",
           worst_out, worst_lse, bad ? " (elements beyond tolerance)" : "");
    return bad == 0;
}

int main(int argc, char** argv) {
    AttentionArgs a = attention_parse_args(argc, argv,
                        "  Causal GQA flash-attention forward, bf16, hd 64/80/128. Versions: 1 warp per query row (fp32),\n"
                        "  2 tensor cores + online softmax, 3 llmc/attention.cuh (cp.async double buffering, ldmatrix),\n"
                        "  4 llmc/attention.cuh's wgmma kernel (sm_90a; version 3 where it does not run).\n"
                        "  Checks B=2 H=8 T in {128,256,1024} KV in {8,2} hd in {64,80,128} against the CPU reference, then\n"
                        "  times the --sizes shapes (TFLOP/s = 4*B*H*T*T*hd/2 / time; target 400). The documents check:\n"
                        "  B=2 T=256 H=4 KV=2 hd=128, unequal documents (versions 1 and 3).\n",
                                 N_VERSIONS);
    cuda_require_device();
    print_device_info(0);

    int failures = attention_check_all(a, N_VERSIONS, check_shape);
    failures += attention_check_docs(a, N_VERSIONS, takes_doc, check_shape);
    if (!a.check_only) {
        attention_table_header(a, TARGET_TFLOPS);
        for (const std::vector<long>& s : a.sizes) {
            const int B = (int)s[0], T = (int)s[1], H = (int)s[2], KV = (int)s[3], hd = (int)s[4];
            const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_out = (size_t)B * T * H * hd;
            Layout lay;
            const size_t o_qkv = lay.add(n_qkv * sizeof(bf16)), o_out = lay.add(n_out * sizeof(bf16)),
                         o_lse = lay.add((size_t)B * H * T * sizeof(float));
            DeviceSets sets = device_sets_alloc(lay.total);
            std::vector<float> qkv_f;
            fill_uniform(&qkv_f, n_qkv, seed_for("attention_forward_bench", 0, 0), -1.0f, 1.0f);
            std::vector<bf16> qkv_h = to_bf16(&qkv_f);
            device_sets_upload(sets, o_qkv, qkv_h.data(), n_qkv * sizeof(bf16));
            const double flops = 4.0 * B * H * (double)T * T * hd / 2.0;
            // each documents count's doc array, uploaded once (read-only, shared by the sets); docs 1: null
            std::vector<int32_t*> d_docs;
            std::vector<AttentionPrediction> pred;
            for (int n : a.docs) {
                const std::vector<int32_t> doc = equal_documents(B, T, n);
                d_docs.push_back(n > 1 ? upload(doc) : nullptr);
                pred.push_back(attention_predict(n > 1 ? doc.data() : nullptr, B, T));
            }
            for (int v = 1; v <= N_VERSIONS; v++) {
                if (a.version && v != a.version) continue;
                Args av = a;
                if (v == 1) { av.warmup = std::min(a.warmup, 1); av.reps = std::min(a.reps, 3); }  // slow CUDA-core version
                if (!runs_as_asked(v, T, hd))
                    printf("version 4 at %dx%dx%dx%dx%d: not run (needs hd 64 or 128, T a multiple of 128 and sm_90a code); "
                           "the row below is version 3's\n", B, T, H, KV, hd);
                double ms_docs1 = -1;
                for (size_t k = 0; k < a.docs.size(); k++) {
                    if (a.docs[k] > 1 && !takes_doc(v)) continue;
                    const int32_t* d_doc = d_docs[k];
                    const double ms = time_kernel(av, sets, 0, [&](int i) {
                        run_version(v, sets.ptr<bf16>(i, o_out), sets.ptr<float>(i, o_lse), sets.ptr<bf16>(i, o_qkv), B, T,
                                    H, KV, hd, d_doc);
                    });
                    if (a.docs[k] == 1) ms_docs1 = ms;
                    attention_row(a, "attention_forward", s, a.docs[k], v, sets.count, ms, flops, pred[k].visible, ms_docs1,
                                  v == 1 ? pred[k].visible : pred[k].fwd, TARGET_TFLOPS);
                }
            }
            for (int32_t* d : d_docs)
                if (d) cudaCheck(cudaFree(d));
            device_sets_free(&sets);
        }
    }
    if (failures) {
        fprintf(stderr, "error: %d attention_forward check(s) failed (lines marked [FAIL])\n", failures);
        return 1;
    }
    return 0;
}
