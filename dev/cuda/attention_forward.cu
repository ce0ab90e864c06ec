// dev/cuda/attention_forward.cu: causal GQA attention forward, numbered versions checked against
// the CPU reference (llmc/ref_ops.h attention_forward) and timed at the target shape.
//   version 1  llmc/attention_rowwise.cuh (the fp32 build's attention): one warp per query row, fp32
//              math on CUDA cores, online softmax; K/V read from global memory (L2) once per query
//              row. Simple and obviously correct.
//   version 2  llmc/attention.cuh with PIPELINED=false: mma.sync m16n8k16 bf16 tensor cores, K/V
//              tiles of 64 keys in shared memory, FA2 online softmax in registers, causal tiles
//              skipped, one shared buffer with synchronous loads.
//   version 3  llmc/attention.cuh as the trainer uses it: version 2 plus cp.async double
//              buffering of the K/V tiles and the longest causal query tiles launched first.
// Layout: qkv [B,T,(H+2KV)*hd] bf16 -> out [B,T,H*hd] bf16, lse [B,H,T] fp32.
// FLOPs (causal, forward): 4 * B * H * T * T * hd / 2 (two matmuls of 2*T*T*hd, half the scores).
// Tolerances (notes_attention.md): |out - ref| <= 3u * max|v| + 2u * |ref| with u = 2^-8,
// |lse - ref| <= 3e-4 + 2e-5 |ref|.
// Usage: attention_forward [version] [--check-only] [--sizes BxTxHxKVxhd,...] [--reps N] [--warmup N] [--help]
// The checks (fixed shapes above) always run; --sizes sets the timed shapes (default 4x4096x32x32x128).
// Harness: dev/cuda/common.h (command line, inputs, device buffer sets, timing); rows report TFLOP/s.
#include "dev/cuda/attention_cases.h"
#include "dev/cuda/common.h"
#include "llmc/ref_ops.h"
#include "llmc/attention.cuh"
#include "llmc/attention_rowwise.cuh"

static void run_version(int version, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int H,
                        int KV, int hd) {
    if (version == 1) attention_rowwise_forward(out, lse, qkv, B, T, H, KV, hd, 0);
    else if (version == 2) attention_forward<false>(out, lse, qkv, B, T, H, KV, hd, 0);
    else attention_forward<true>(out, lse, qkv, B, T, H, KV, hd, 0);
}

// ---- host side ------------------------------------------------------------------------------------

static const int N_VERSIONS = 3;
static const double TARGET_TFLOPS = 400.0;

// One check on fresh inputs; prints one [PASS] / [FAIL] line.
static bool check_shape(int version, int B, int T, int H, int KV, int hd, size_t case_index) {
    const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_out = (size_t)B * T * H * hd, n_lse = (size_t)B * H * T;
    std::vector<float> qkv_f;
    fill_uniform(&qkv_f, n_qkv, seed_for("attention_forward", version, case_index), -1.0f, 1.0f);
    std::vector<bf16> qkv_h = to_bf16(&qkv_f);
    std::vector<float> ref_out(n_out), ref_att((size_t)B * H * T * T), ref_lse(n_lse);
    attention_forward(ref_out.data(), ref_att.data(), qkv_f.data(), B, T, H, KV, hd);
    // reference logsumexp of the scaled scores, in double
    const size_t ld = (size_t)(H + 2 * KV) * hd;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float* q = &qkv_f[((size_t)b * T + t) * ld + h * hd];
                std::vector<double> sc(t + 1);
                double mx = -1e300;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = &qkv_f[((size_t)b * T + t2) * ld + (size_t)(H + h / (H / KV)) * hd];
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)q[i] * k[i];
                    sc[t2] = d / std::sqrt((double)hd);
                    mx = std::max(mx, sc[t2]);
                }
                double sum = 0;
                for (int t2 = 0; t2 <= t; t2++) sum += std::exp(sc[t2] - mx);
                ref_lse[((size_t)b * H + h) * T + t] = (float)(mx + std::log(sum));
            }
    bf16* d_qkv = upload(qkv_h);
    bf16* d_out;
    float* d_lse;
    cudaCheck(cudaMalloc(&d_out, n_out * sizeof(bf16)));
    cudaCheck(cudaMalloc(&d_lse, n_lse * sizeof(float)));
    cudaCheck(cudaMemset(d_out, 0xff, n_out * sizeof(bf16)));  // NaN: an unwritten output fails
    run_version(version, d_out, d_lse, d_qkv, B, T, H, KV, hd);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<bf16> out_h = download(d_out, n_out);
    std::vector<float> lse_h = download(d_lse, n_lse);
    cudaCheck(cudaFree(d_qkv));
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
    printf("[%s] attention_forward v%d B=%d T=%d H=%d KV=%d hd=%d: max |out err| %.2e, max |lse err| %.2e%s\n",
           bad ? "FAIL" : "PASS", version, B, T, H, KV, hd, worst_out, worst_lse,
           bad ? " (elements beyond tolerance)" : "");
    return bad == 0;
}

int main(int argc, char** argv) {
    Args a = attention_parse_args(argc, argv,
                        "  Causal GQA flash-attention forward, bf16, hd 64/80/128. Versions: 1 warp per query row (fp32),\n"
                        "  2 tensor cores + online softmax, 3 llmc/attention.cuh (cp.async double buffering, ldmatrix).\n"
                        "  Checks B=2 H=8 T in {128,256,1024} KV in {8,2} hd in {64,80,128} against the CPU reference, then\n"
                        "  times the --sizes shapes (TFLOP/s = 4*B*H*T*T*hd/2 / time; target 400).\n",
                                 N_VERSIONS);
    cuda_require_device();
    print_device_info(0);

    int failures = attention_check_all(a, N_VERSIONS, check_shape);
    if (!a.check_only) {
        printf("| kernel | size BxTxHxKVxhd | version | sets | ms | TFLOP/s | %% of %.0f target |\n", TARGET_TFLOPS);
        printf("| --- | --- | --- | --- | --- | --- | --- |\n");
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
            for (int v = 1; v <= N_VERSIONS; v++) {
                if (a.version && v != a.version) continue;
                Args av = a;
                if (v == 1) { av.warmup = std::min(a.warmup, 1); av.reps = std::min(a.reps, 3); }  // slow CUDA-core version
                const double ms = time_kernel(av, sets, 0, [&](int i) {
                    run_version(v, sets.ptr<bf16>(i, o_out), sets.ptr<float>(i, o_lse), sets.ptr<bf16>(i, o_qkv), B, T, H,
                                KV, hd);
                });
                const double tflops = flops / (ms * 1e-3) / 1e12;
                printf("| attention_forward | %dx%dx%dx%dx%d | %d | %d | %.3f | %.1f | %.1f |\n", B, T, H, KV, hd, v,
                       sets.count, ms, tflops, 100.0 * tflops / TARGET_TFLOPS);
                fflush(stdout);
            }
            device_sets_free(&sets);
        }
    }
    if (failures) {
        fprintf(stderr, "error: %d attention_forward check(s) failed (lines marked [FAIL])\n", failures);
        return 1;
    }
    return 0;
}
