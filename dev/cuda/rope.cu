// dev/cuda/rope.cu: RoPE on the q and k heads of qkv [B,T,(H+2KV)*hd] in place (rotate_half convention), forward
// (sign +1) and backward (sign -1, the inverse rotation), with fp32 cos/sin tables that include Llama 3.1
// frequency scaling (theta 500000, factor 32). Checked against rope_rotate of llmc/ref_ops.h (in double) on the
// whole qkv tensor, so a write into a v head fails too.
// Versions (predictions, written before any measurement):
//   1  one thread per (token, head, rotation pair), scalar bf16 loads: each warp touches 32 consecutive pairs,
//      two 64-byte segments per load. Expect 30-50% of the copy ceiling.
//   2  one thread per (token, head, 8 pairs): 128-bit loads of both halves and of the cos/sin table entries. The
//      table rows are re-read for every head (from L1/L2). Expect 70-80%.
//   3  one thread per (token, 8 pairs) loops over the token's heads, loading cos/sin once. Fewer instructions and
//      table loads per byte moved; expect 80-90%. Measured on an H100: 87% at hd 128 but 70% at hd 64, where
//      B*T*hd/16 threads (8 x 2048 x 4: 256 blocks) are two blocks an SM; version 2 reached 91-93% at both.
//   4  llmc/rope.cuh: version 2's thread per (token, head, 8 pairs) with version 3's arithmetic (the sign folded into
//      the sines), so its values are version 3's bit for bit (checked). Expect version 2's 91-93%.
#include "dev/cuda/common.h"
#include "llmc/ref_ops.h"
#include "llmc/rope.cuh"

__global__ void rope_v1_kernel(bf16* qkv, const float* cosv, const float* sinv, int BT, int T, int H, int KV, int hd, float sign) {
    const int half = hd / 2;
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * (H + KV) * half) return;
    const int i = idx % half, h = (idx / half) % (H + KV);
    const int bt = (int)(idx / ((size_t)half * (H + KV))), t = bt % T;
    bf16* x = qkv + (size_t)bt * (H + 2 * KV) * hd + (size_t)h * hd;
    float c = cosv[t * half + i], s = sign * sinv[t * half + i];
    float x1 = __bfloat162float(x[i]), x2 = __bfloat162float(x[i + half]);
    x[i] = __float2bfloat16(x1 * c - x2 * s);
    x[i + half] = __float2bfloat16(x2 * c + x1 * s);
}

__global__ void rope_v2_kernel(bf16* qkv, const float* cosv, const float* sinv, int BT, int T, int H, int KV, int hd, float sign) {
    const int half = hd / 2, groups = half / 8;
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * (H + KV) * groups) return;
    const int i = 8 * (idx % groups), h = (idx / groups) % (H + KV);
    const int bt = (int)(idx / ((size_t)groups * (H + KV))), t = bt % T;
    bf16* x = qkv + (size_t)bt * (H + 2 * KV) * hd + (size_t)h * hd + i;
    const float4* cp = (const float4*)(cosv + (size_t)t * half + i);
    const float4* sp = (const float4*)(sinv + (size_t)t * half + i);
    float4 c0 = cp[0], c1 = cp[1], s0 = sp[0], s1 = sp[1];
    float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    Pack8 a = load8(x), b = load8(x + half), oa, ob;
    for (int j = 0; j < 8; j++) {
        float x1 = __bfloat162float(a.v[j]), x2 = __bfloat162float(b.v[j]);
        oa.v[j] = __float2bfloat16(x1 * c[j] - x2 * sign * s[j]);
        ob.v[j] = __float2bfloat16(x2 * c[j] + x1 * sign * s[j]);
    }
    store8(x, oa);
    store8(x + half, ob);
}

// version 3: llmc/rope.cuh's kernel until one thread per head replaced it (one thread per token and 8 pairs, looping
// over the heads with the cos and sin loaded once); version 4 must equal it bit for bit
__global__ void rope_v3_kernel(bf16* __restrict__ qkv, const float* __restrict__ cosv,
                                   const float* __restrict__ sinv, int BT, int T, int H, int KV, int hd, float sign,
                                   const int32_t* __restrict__ pos) {
    const int half = hd / 2, groups = half / 8;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= BT * groups) return;
    const int bt = idx / groups, i = 8 * (idx % groups), t = pos ? pos[bt] : bt % T;
    const float4* cp = (const float4*)(cosv + (size_t)t * half + i);
    const float4* sp = (const float4*)(sinv + (size_t)t * half + i);
    const float4 c0 = cp[0], c1 = cp[1], s0 = sp[0], s1 = sp[1];
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float s[8] = {sign * s0.x, sign * s0.y, sign * s0.z, sign * s0.w, sign * s1.x, sign * s1.y, sign * s1.z, sign * s1.w};
    bf16* row = qkv + (size_t)bt * (H + 2 * KV) * hd;
#pragma unroll 4
    for (int h = 0; h < H + KV; h++) {  // the H q heads, then the KV k heads
        bf16* x = row + (size_t)h * hd + i;
        Pack8 a = load8(x), b = load8(x + half), oa, ob;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float x1 = to_float(a.v[j]), x2 = to_float(b.v[j]);
            oa.v[j] = __float2bfloat16(x1 * c[j] - x2 * s[j]);
            ob.v[j] = __float2bfloat16(x2 * c[j] + x1 * s[j]);
        }
        store8(x, oa);
        store8(x + half, ob);
    }
}

static void rope_launch(int version, bf16* qkv, const float* c, const float* s, int B, int T, int H, int KV, int hd,
                        int sign, cudaStream_t st) {
    const size_t pairs = (size_t)B * T * (H + KV) * (hd / 2);
    if (version == 1) rope_v1_kernel<<<(unsigned)ceil_div(pairs, 256), 256, 0, st>>>(qkv, c, s, B * T, T, H, KV, hd, (float)sign);
    else if (version == 2) rope_v2_kernel<<<(unsigned)ceil_div(pairs / 8, 256), 256, 0, st>>>(qkv, c, s, B * T, T, H, KV, hd, (float)sign);
    else if (version == 3)
        rope_v3_kernel<<<(unsigned)ceil_div((size_t)B * T * (hd / 16), 256), 256, 0, st>>>(qkv, c, s, B * T, T, H, KV, hd,
                                                                                          (float)sign, nullptr);
    else rope_rotate_inplace(qkv, c, s, B, T, H, KV, hd, sign, st);
    cudaCheck(cudaGetLastError());
}

static void run(Bench* bench, int version, const std::vector<long>& sz, int sign, size_t size_index) {
    const int B = (int)sz[0], T = (int)sz[1], H = (int)sz[2], KV = (int)sz[3], hd = (int)sz[4];
    const size_t n = (size_t)B * T * (H + 2 * KV) * hd, half = hd / 2;
    ModelConfig cfg;
    cfg.head_dim = hd;
    cfg.rope_theta = 500000.0f;
    cfg.rope_factor = 32.0f;
    cfg.rope_low_freq = 1.0f;
    cfg.rope_high_freq = 4.0f;
    cfg.rope_orig_ctx = 8192;
    std::vector<double> cosd, sind;
    rope_tables<double>(cfg, T, &cosd, &sind);
    std::vector<float> cosf(cosd.begin(), cosd.end()), sinf(sind.begin(), sind.end());

    std::vector<float> x;
    fill_uniform(&x, n, seed_for(sign > 0 ? "rope_forward" : "rope_backward", version, size_index), -2.0f, 2.0f);
    std::vector<bf16> xh = to_bf16(&x);
    Layout lay;
    size_t oq = lay.add(n * 2), oc = lay.add(T * half * 4), os = lay.add(T * half * 4);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, oq, xh.data(), n * 2);
    device_sets_upload(sets, oc, cosf.data(), T * half * 4);
    device_sets_upload(sets, os, sinf.data(), T * half * 4);
    auto launch = [&](int s) {
        rope_launch(version, sets.ptr<bf16>(s, oq), sets.ptr<float>(s, oc), sets.ptr<float>(s, os), B, T, H, KV, hd, sign,
                    bench->stream);
    };
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<bf16> got = download(sets.ptr<bf16>(0, oq), n);
    std::vector<double> ref = to_double(x);
    // the reference rotates with the fp32 tables the kernel reads
    std::vector<double> cref(cosf.begin(), cosf.end()), sref(sinf.begin(), sinf.end());
    rope_rotate<double>(ref.data(), cref.data(), sref.data(), B, T, H, KV, hd, sign);
    std::string report;
    // two-term sums of |x| <= 2 per output element
    double worst = check_close("qkv", got, ref, tolerance(U_BF16, 2, 4.0), &report);
    if (version == 4) {  // one thread per head instead of a loop over them: version 3's bits exactly
        device_sets_upload(sets, oq, xh.data(), n * 2);
        rope_launch(3, sets.ptr<bf16>(0, oq), sets.ptr<float>(0, oc), sets.ptr<float>(0, os), B, T, H, KV, hd, sign,
                    bench->stream);
        cudaCheck(cudaStreamSynchronize(bench->stream));
        const std::vector<bf16> v3 = download(sets.ptr<bf16>(0, oq), n);
        if (memcmp(v3.data(), got.data(), n * sizeof(bf16)) != 0) {
            worst = INFINITY;
            report += " FAIL: not bit for bit version 3's;";
        }
    }

    double ms = bench->args.check_only ? -1.0 : time_kernel(bench->args, sets, bench->stream, launch);
    // bytes: read and write the q and k heads, read the cos/sin rows once
    double bytes = 2.0 * B * T * (H + KV) * hd * 2 + 2.0 * T * half * 4;
    char size[96];
    snprintf(size, sizeof(size), "%dx%dx%dx%dx%d", B, T, H, KV, hd);
    bench_row(bench, "rope", sign > 0 ? "forward" : "backward", size, version, sets.count, ms, bytes, worst, report);
    device_sets_free(&sets);
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  RoPE (rotate_half) on q and k inside qkv [B,T,(H+2KV)*hd], forward and backward, bf16, fp32 tables\n"
                        "  with Llama 3.1 scaling. Versions: 1 thread per pair, 2 thread per 8 pairs, 3 thread per token and\n"
                        "  8 pairs over the heads, 4 llmc/rope.cuh (2's threads, 3's arithmetic).\n",
                        "BxTxHxKVxhd (hd a multiple of 16, H a multiple of KV)", "8x2048x32x8x128,8x2048x32x8x64,4x2048x32x8x64", 5, 4);
    for (const std::vector<long>& s : a.sizes)
        if (s[4] % 16 != 0 || s[2] % s[3] != 0 || s[0] * s[1] * (s[2] + 2 * s[3]) * s[4] > (1l << 31))
            die("--sizes: %ldx%ldx%ldx%ldx%ld: hd must be a multiple of 16, H a multiple of KV, and the qkv tensor at most 2^31 "
                "elements", s[0], s[1], s[2], s[3], s[4]);
    Bench bench = bench_start(a, "rope");
    for (size_t si = 0; si < a.sizes.size(); si++)
        for (int sign = 1; sign >= -1; sign -= 2)
            for (int v = 1; v <= 4; v++)
                if (a.version == 0 || a.version == v) run(&bench, v, a.sizes[si], sign, si);
    return bench_finish(&bench);
}
