// dev/cuda/attention_backward.cu: causal GQA attention backward, numbered versions checked against
// the CPU reference (llmc/ref_ops.h attention_backward) and timed at the target shape, together with
// the forward of llmc/attention.cuh.
//   version 1  one warp per query row, fp32 on CUDA cores: P recomputed from the saved logsumexp,
//              D = rowsum(dO * O) precomputed; dQ owned by the warp, dK and dV by fp32 atomics.
//   version 2  llmc/attention.cuh (FA2 structure): one block per (key tile, kv head); dK and dV of
//              64 keys accumulate in registers over every query head of the GQA group and every
//              causal query tile (no atomics, no race), tensor cores (mma.sync m16n8k16 bf16),
//              dQ by fp32 atomics into a scratch buffer converted to bf16 at the end.
// Layout: qkv [B,T,(H+2KV)*hd], dout and out [B,T,H*hd], lse [B,H,T] fp32 -> dqkv [B,T,(H+2KV)*hd].
// FLOPs: backward = 2.5 x forward = 2.5 * 4 * B * H * T * T * hd / 2 (five T x T x hd matmuls against
// the forward's two; the recomputation of S is counted, as FlashAttention-2 counts it).
// Tolerance (notes_attention.md): per part q, k, v: |d - ref| <= 4u * max|ref part| + 4u * |ref|, u = 2^-8.
// Usage: attention_backward [version] [--check-only] [--sizes BxTxHxKVxhd,...] [--reps N] [--warmup N] [--help]
// The checks (fixed shapes above) always run; --sizes sets the timed shapes (default 4x4096x32x32x128).
// Harness: dev/cuda/common.h (command line, inputs, device buffer sets, timing); rows report TFLOP/s.
#include "dev/cuda/common.h"
#include "llmc/ref_ops.h"
#include "llmc/attention.cuh"

// ---- version 1: one warp per query row, fp32 -----------------------------------------------------
// Lane l holds head dims l, l + 32, l + 64, l + 96. dk_acc, dv_acc [B,T,KV*hd] fp32 start at zero.
__global__ void attention_backward_v1_kernel(float* dq_accum, float* dk_acc, float* dv_acc, const __nv_bfloat16* dout,
                                             const __nv_bfloat16* qkv, const float* lse, const float* dvec, int B,
                                             int T, int H, int KV, int hd) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= B * H * T) return;
    const int t = row % T, h = (row / T) % H, b = row / (T * H), kh = h / (H / KV);
    const size_t ld = (size_t)(H + 2 * KV) * hd, kvd = (size_t)KV * hd;
    const __nv_bfloat16* q = qkv + ((size_t)b * T + t) * ld + h * hd;
    const __nv_bfloat16* dy = dout + ((size_t)b * T + t) * H * hd + h * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const float L = lse[((size_t)b * H + h) * T + t], D = dvec[((size_t)b * H + h) * T + t];
    float qr[4], dyr[4], dq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < 4; i++) {
        const bool in = lane + 32 * i < hd;
        qr[i] = in ? __bfloat162float(q[lane + 32 * i]) : 0.0f;
        dyr[i] = in ? __bfloat162float(dy[lane + 32 * i]) : 0.0f;
    }
    for (int t2 = 0; t2 <= t; t2++) {
        const __nv_bfloat16* k = qkv + ((size_t)b * T + t2) * ld + (size_t)(H + kh) * hd;
        const __nv_bfloat16* v = qkv + ((size_t)b * T + t2) * ld + (size_t)(H + KV + kh) * hd;
        float s = 0.0f, dp = 0.0f;
        for (int i = 0; i < 4; i++)
            if (lane + 32 * i < hd) {
                s += qr[i] * __bfloat162float(k[lane + 32 * i]);
                dp += dyr[i] * __bfloat162float(v[lane + 32 * i]);
            }
        for (int off = 16; off > 0; off /= 2) {
            s += __shfl_xor_sync(0xffffffffu, s, off);
            dp += __shfl_xor_sync(0xffffffffu, dp, off);
        }
        const float p = expf(s * scale - L), ds = p * (dp - D) * scale;
        float* dkr = dk_acc + ((size_t)b * T + t2) * kvd + kh * hd;
        float* dvr = dv_acc + ((size_t)b * T + t2) * kvd + kh * hd;
        for (int i = 0; i < 4; i++)
            if (lane + 32 * i < hd) {
                dq[i] += ds * __bfloat162float(k[lane + 32 * i]);
                atomicAdd(dkr + lane + 32 * i, ds * qr[i]);
                atomicAdd(dvr + lane + 32 * i, p * dyr[i]);
            }
    }
    float* dqr = dq_accum + ((size_t)b * T + t) * H * hd + h * hd;
    for (int i = 0; i < 4; i++)
        if (lane + 32 * i < hd) dqr[lane + 32 * i] = dq[i];
}

// dqkv's key and value parts <- bf16(dk_acc), bf16(dv_acc).
__global__ void attention_backward_v1_kv_convert_kernel(__nv_bfloat16* dqkv, const float* dk_acc, const float* dv_acc,
                                                        int B, int T, int H, int KV, int hd) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, kvd = (size_t)KV * hd;
    if (i >= (size_t)B * T * kvd) return;
    const size_t bt = i / kvd, c = i % kvd;
    __nv_bfloat16* row = dqkv + bt * (H + 2 * KV) * hd + (size_t)H * hd;
    row[c] = __float2bfloat16(dk_acc[i]);
    row[kvd + c] = __float2bfloat16(dv_acc[i]);
}

struct Scratch {
    float* dq_accum;  // [B,T,H*hd]
    float* dvec;      // [B,H,T]
    float* dk_acc;    // [B,T,KV*hd] (version 1)
    float* dv_acc;    // [B,T,KV*hd] (version 1)
};

static void attention_backward_v1(__nv_bfloat16* dqkv, const Scratch& s, const __nv_bfloat16* dout,
                                  const __nv_bfloat16* out, const __nv_bfloat16* qkv, const float* lse, int B, int T,
                                  int H, int KV, int hd, cudaStream_t stream) {
    attention_check_shape(B, T, H, KV, hd);
    const int rows = B * T * H;
    attention_backward_preprocess_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(s.dvec, s.dq_accum, dout, out, B, T, H, hd);
    cudaCheck(cudaGetLastError());
    const size_t n_kv = (size_t)B * T * KV * hd, n_q = (size_t)B * T * H * hd;
    cudaCheck(cudaMemsetAsync(s.dk_acc, 0, n_kv * sizeof(float), stream));
    cudaCheck(cudaMemsetAsync(s.dv_acc, 0, n_kv * sizeof(float), stream));
    attention_backward_v1_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(s.dq_accum, s.dk_acc, s.dv_acc, dout, qkv, lse,
                                                                      s.dvec, B, T, H, KV, hd);
    cudaCheck(cudaGetLastError());
    attention_dq_convert_kernel<<<(unsigned)((n_q + 255) / 256), 256, 0, stream>>>(dqkv, s.dq_accum, B, T, H, KV, hd);
    cudaCheck(cudaGetLastError());
    attention_backward_v1_kv_convert_kernel<<<(unsigned)((n_kv + 255) / 256), 256, 0, stream>>>(dqkv, s.dk_acc, s.dv_acc,
                                                                                                 B, T, H, KV, hd);
    cudaCheck(cudaGetLastError());
}

static void run_version(int version, __nv_bfloat16* dqkv, const Scratch& s, const __nv_bfloat16* dout,
                        const __nv_bfloat16* out, const __nv_bfloat16* qkv, const float* lse, int B, int T, int H,
                        int KV, int hd) {
    if (version == 1) attention_backward_v1(dqkv, s, dout, out, qkv, lse, B, T, H, KV, hd, 0);
    else attention_backward(dqkv, s.dq_accum, s.dvec, dout, out, qkv, lse, B, T, H, KV, hd, 0);
}

// ---- host side ------------------------------------------------------------------------------------

static const int N_VERSIONS = 2;
static const double TARGET_TFLOPS = 400.0;

// Device buffers of one problem, carved from one allocation (a DeviceSets set) by offsets.
struct Offsets {
    size_t qkv, out, dout, dqkv, lse, dq_accum, dvec, dk_acc, dv_acc, total;
};

static Offsets offsets_for(int B, int T, int H, int KV, int hd) {
    const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_q = (size_t)B * T * H * hd, n_kv = (size_t)B * T * KV * hd;
    Layout lay;
    Offsets o;
    o.qkv = lay.add(n_qkv * sizeof(bf16));
    o.out = lay.add(n_q * sizeof(bf16));
    o.dout = lay.add(n_q * sizeof(bf16));
    o.dqkv = lay.add(n_qkv * sizeof(bf16));
    o.lse = lay.add((size_t)B * H * T * sizeof(float));
    o.dq_accum = lay.add(n_q * sizeof(float));
    o.dvec = lay.add((size_t)B * H * T * sizeof(float));
    o.dk_acc = lay.add(n_kv * sizeof(float));
    o.dv_acc = lay.add(n_kv * sizeof(float));
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
            {sets.ptr<float>(i, o.dq_accum), sets.ptr<float>(i, o.dvec), sets.ptr<float>(i, o.dk_acc),
             sets.ptr<float>(i, o.dv_acc)}};
}

// One check on fresh inputs; prints one [PASS] / [FAIL] line with the worst error of dq, dk, dv.
static bool check_shape(int version, int B, int T, int H, int KV, int hd, size_t case_index) {
    const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * hd, n_q = (size_t)B * T * H * hd;
    std::vector<float> qkv_f, dout_f;
    fill_uniform(&qkv_f, n_qkv, seed_for("attention_backward", version, 2 * case_index), -1.0f, 1.0f);
    fill_uniform(&dout_f, n_q, seed_for("attention_backward", version, 2 * case_index + 1), -1.0f, 1.0f);
    std::vector<bf16> qkv_h = to_bf16(&qkv_f), dout_h = to_bf16(&dout_f);
    std::vector<float> ref_out(n_q), ref_att((size_t)B * H * T * T), ref_d(n_qkv);
    attention_forward(ref_out.data(), ref_att.data(), qkv_f.data(), B, T, H, KV, hd);
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
    attention_forward(d.out, d.lse, d.qkv, B, T, H, KV, hd, 0);
    run_version(version, d.dqkv, d.s, d.dout, d.out, d.qkv, d.lse, B, T, H, KV, hd);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<bf16> got = download(d.dqkv, n_qkv);
    device_sets_free(&one);

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
    printf("[%s] attention_backward v%d B=%d T=%d H=%d KV=%d hd=%d:%s\n", ok ? "PASS" : "FAIL", version, B, T, H, KV, hd,
           detail.c_str());
    return ok;
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  Causal GQA flash-attention backward, bf16, hd 64/80/128. Versions: 1 warp per query row (fp32,\n"
                        "  atomics for dK/dV), 2 llmc/attention.cuh (FA2: tensor cores, dK/dV in registers per key tile).\n"
                        "  Checks B=2 H=8 T in {128,256,1024} KV in {8,2} hd in {64,80,128} against the CPU reference, then\n"
                        "  times the llmc forward, each backward version and both together at the --sizes shapes\n"
                        "  (forward 4*B*H*T*T*hd/2 FLOP, backward 2.5x that; target 400 TFLOP/s).\n",
                        "BxTxHxKVxhd (T a multiple of 64, H a multiple of KV, hd 64, 80 or 128)", "4x4096x32x32x128", 5,
                        N_VERSIONS);
    for (const std::vector<long>& s : a.sizes) {
        if (s[0] * s[1] * (s[2] + 2 * s[3]) * s[4] > (1l << 31))
            die("--sizes: %ldx%ldx%ldx%ldx%ld: the qkv tensor may hold at most 2^31 elements", s[0], s[1], s[2], s[3], s[4]);
        attention_check_shape((int)s[0], (int)s[1], (int)s[2], (int)s[3], (int)s[4]);
    }
    cuda_require_device();
    print_device_info(0);

    int failures = 0;
    const int Ts[3] = {128, 256, 1024}, KVs[2] = {8, 2}, hds[3] = {64, 80, 128};
    for (int v = 1; v <= N_VERSIONS; v++) {
        if (a.version && v != a.version) continue;
        size_t case_index = 0;
        for (int T : Ts)
            for (int KV : KVs)
                for (int hd : hds) failures += !check_shape(v, 2, T, 8, KV, hd, case_index++);
    }
    if (!a.check_only) {
        printf("| kernel | size BxTxHxKVxhd | version | sets | ms | TFLOP/s | %% of %.0f target |\n", TARGET_TFLOPS);
        printf("| --- | --- | --- | --- | --- | --- | --- |\n");
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
            auto row = [&](const char* what, int v, double ms, double flops) {
                const double tflops = flops / (ms * 1e-3) / 1e12;
                printf("| %s | %dx%dx%dx%dx%d | %d | %d | %.3f | %.1f | %.1f |\n", what, B, T, H, KV, hd, v, sets.count, ms,
                       tflops, 100.0 * tflops / TARGET_TFLOPS);
                fflush(stdout);
            };
            const double fwd_ms = time_kernel(a, sets, 0, [&](int i) {
                Buffers d = buffers_at(sets, i, o);
                attention_forward(d.out, d.lse, d.qkv, B, T, H, KV, hd, 0);
            });
            row("attention_forward (llmc)", 3, fwd_ms, fwd_flops);
            for (int v = 1; v <= N_VERSIONS; v++) {
                if (a.version && v != a.version) continue;
                Args av = a;
                if (v == 1) { av.warmup = std::min(a.warmup, 1); av.reps = std::min(a.reps, 3); }  // slow CUDA-core version
                const double ms = time_kernel(av, sets, 0, [&](int i) {
                    Buffers d = buffers_at(sets, i, o);
                    run_version(v, d.dqkv, d.s, d.dout, d.out, d.qkv, d.lse, B, T, H, KV, hd);
                });
                row("attention_backward", v, ms, bwd_flops);
                row("attention forward + backward", v, fwd_ms + ms, fwd_flops + bwd_flops);
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
