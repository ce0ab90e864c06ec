// dev/cuda/norm.cu: LayerNorm and RMSNorm fused with the residual add, forward and backward, bf16 tensors with
// fp32 statistics. Checked against norm_forward / norm_backward of llmc/ref_ops.h (in double).
//   forward:  resid = bf16(x + y); out = norm(resid) * w (+ b); mean, rstd [N] fp32 (version 3 also checked
//             without the residual: y and resid null, out = norm(x) * w (+ b))
//   backward: dres += d(norm input); dw, db += weight gradients (fp32 sums over rows, deterministic)
// Versions (the predictions are written before any measurement; see dev/cuda/README.md for results):
//   forward
//   1  one thread per row, scalar loads, three passes over the row. Threads of a warp touch addresses C apart:
//      every load is a separate transaction. Expect under 10% of the copy ceiling.
//   2  one warp per row, lanes take consecutive elements (coalesced), warp-shuffle reductions, three passes that
//      re-read the row (the second and third from L1/L2). Expect 40-60%.
//   3  llmc/norm.cuh: one warp per row (a block of 256 threads per row when C > 4096), 128-bit loads, the row
//      held in registers between passes so global memory is touched once. Expect 80-90%.
//   backward
//   1  one thread per row for dres, then one thread per column looping over all N rows for dw, db. Uncoalesced
//      rows and only C threads for the weight gradient: expect under 5%.
//   2  one warp per row with 128-bit loads for dres; a second kernel re-reads dout and x in blocks of rows for
//      per-block dw, db partial sums, then a fixed-order reduction. Reads dout and x twice: at best about 2/3
//      of the minimal-traffic figure, expect 50-60%.
//   3  one kernel per block of 32 rows computes dres and accumulates dw, db for its own columns in registers
//      (the row is read once), then the same fixed-order reduction. Expect 75-85%. Measured 67.8% (16384x2048)
//      and 60.9% (16384x4096) of the copy ceiling on an H100; in the trainer on an H200, 49.6% (gpt3_1.3b) and
//      33.7% (llama3.2_1b, N 8192) of the nominal 4.8 TB/s.
//   4  llmc/norm.cuh: version 3 with each row's dout, x and dres copied into shared memory by cp.async two rows
//      ahead (C <= 4096), and the weight-gradient reduction with 16 loads in flight per thread; bit for bit version
//      3 (checked). Why: at C 2048 a block's 32 rows ran one after another, each waiting for memory twice (dout and x,
//      then dres after the row sums) around a block barrier, with 4 blocks of 256 threads an SM (63 registers) and
//      one wave (N 16384: 512 blocks): about 32 KB in flight per SM, under the 36 KB that 4.8 TB/s needs at a
//      microsecond of latency, and half of it only half the time. Staged, two rows (96 KB an SM) are in flight
//      while one computes. The reduction's thread chained 64 dependent loads (N 16384) over a grid of 128 blocks.
//      Expect 80-85% of the copy ceiling at C 2048 and 4096; the H200's 1.3b step 5.5 -> about 3.5 ms, llama3.2_1b
//      2.7 -> about 1.4 ms (the sprint's profile rows "norm bwd").
#include "dev/cuda/common.h"
#include "llmc/norm.cuh"
#include "llmc/ref_ops.h"

static const float EPS = 1e-5f;

// ----------------------------------------------------------------------------------------------
// forward versions 1 and 2

__global__ void norm_forward_v1_kernel(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* x, const bf16* y,
                                       const bf16* w, const bf16* b, int N, int C, float eps, bool rms) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float sum = 0.0f;
    for (int c = 0; c < C; c++) {
        bf16 r = __float2bfloat16(__bfloat162float(x[base + c]) + __bfloat162float(y[base + c]));
        resid[base + c] = r;
        sum += __bfloat162float(r);
    }
    float m = rms ? 0.0f : sum / C, ss = 0.0f;
    for (int c = 0; c < C; c++) {
        float d = __bfloat162float(resid[base + c]) - m;
        ss += d * d;
    }
    float s = rsqrtf(ss / C + eps);
    for (int c = 0; c < C; c++) {
        float v = (__bfloat162float(resid[base + c]) - m) * s * __bfloat162float(w[c]);
        out[base + c] = __float2bfloat16(b ? v + __bfloat162float(b[c]) : v);
    }
    mean[row] = m;
    rstd[row] = s;
}

__global__ void norm_forward_v2_kernel(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* x, const bf16* y,
                                       const bf16* w, const bf16* b, int N, int C, float eps, bool rms) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        bf16 r = __float2bfloat16(__bfloat162float(x[base + c]) + __bfloat162float(y[base + c]));
        resid[base + c] = r;
        sum += __bfloat162float(r);
    }
    float m = rms ? 0.0f : warp_sum(sum) / C, ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = __bfloat162float(resid[base + c]) - m;
        ss += d * d;
    }
    float s = rsqrtf(warp_sum(ss) / C + eps);
    for (int c = lane; c < C; c += 32) {
        float v = (__bfloat162float(resid[base + c]) - m) * s * __bfloat162float(w[c]);
        out[base + c] = __float2bfloat16(b ? v + __bfloat162float(b[c]) : v);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// ----------------------------------------------------------------------------------------------
// backward versions 1 and 2

__global__ void norm_backward_v1_dx_kernel(bf16* dres, const bf16* dout, const bf16* x, const bf16* w, const float* mean,
                                           const float* rstd, int N, int C, bool rms) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float m = mean[row], s = rstd[row], s_dn = 0.0f, s_dnx = 0.0f;
    for (int c = 0; c < C; c++) {
        float dn = __bfloat162float(dout[base + c]) * __bfloat162float(w[c]);
        s_dn += dn;
        s_dnx += dn * (__bfloat162float(x[base + c]) - m) * s;
    }
    float m_dn = rms ? 0.0f : s_dn / C, m_dnx = s_dnx / C;
    for (int c = 0; c < C; c++) {
        float dn = __bfloat162float(dout[base + c]) * __bfloat162float(w[c]);
        float xh = (__bfloat162float(x[base + c]) - m) * s;
        dres[base + c] = __float2bfloat16(__bfloat162float(dres[base + c]) + s * (dn - m_dn - xh * m_dnx));
    }
}

__global__ void norm_backward_v1_dw_kernel(bf16* dw, bf16* db, const bf16* dout, const bf16* x, const float* mean,
                                           const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int n = 0; n < N; n++) {
        float d = __bfloat162float(dout[(size_t)n * C + c]);
        sw += d * (__bfloat162float(x[(size_t)n * C + c]) - mean[n]) * rstd[n];
        sb += d;
    }
    dw[c] = __float2bfloat16(__bfloat162float(dw[c]) + sw);
    if (db) db[c] = __float2bfloat16(__bfloat162float(db[c]) + sb);
}

// one warp per row, 128-bit loads; the row's dout and x are re-read from L1 in the second pass
__global__ void norm_backward_v2_dx_kernel(bf16* dres, const bf16* dout, const bf16* x, const bf16* w, const float* mean,
                                           const float* rstd, int N, int C, bool rms) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float m = mean[row], s = rstd[row], s_dn = 0.0f, s_dnx = 0.0f;
    for (int c = 8 * lane; c < C; c += 256) {
        Pack8 d = load8(dout + base + c), xv = load8(x + base + c), wv = load8(w + c);
        for (int j = 0; j < 8; j++) {
            float dn = __bfloat162float(d.v[j]) * __bfloat162float(wv.v[j]);
            s_dn += dn;
            s_dnx += dn * (__bfloat162float(xv.v[j]) - m) * s;
        }
    }
    float m_dn = rms ? 0.0f : warp_sum(s_dn) / C, m_dnx = warp_sum(s_dnx) / C;
    for (int c = 8 * lane; c < C; c += 256) {
        Pack8 d = load8(dout + base + c), xv = load8(x + base + c), wv = load8(w + c), g = load8(dres + base + c);
        for (int j = 0; j < 8; j++) {
            float dn = __bfloat162float(d.v[j]) * __bfloat162float(wv.v[j]);
            float xh = (__bfloat162float(xv.v[j]) - m) * s;
            g.v[j] = __float2bfloat16(__bfloat162float(g.v[j]) + s * (dn - m_dn - xh * m_dnx));
        }
        store8(dres + base + c, g);
    }
}

// per block of NORM_BWD_ROWS rows: partial[blk][c] = sum dout * xhat, partial[blk][C + c] = sum dout;
// thread t owns 8 consecutive columns, a grid-y dimension covers C
__global__ void norm_backward_v2_partial_kernel(float* partial, const bf16* dout, const bf16* x, const float* mean,
                                                const float* rstd, int N, int C) {
    int c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= C) return;
    int r0 = blockIdx.x * NORM_BWD_ROWS, r1 = min(N, r0 + NORM_BWD_ROWS);
    float sw[8] = {}, sb[8] = {};
    for (int n = r0; n < r1; n++) {
        Pack8 d = load8(dout + (size_t)n * C + c), xv = load8(x + (size_t)n * C + c);
        float m = mean[n], s = rstd[n];
        for (int j = 0; j < 8; j++) {
            float dd = __bfloat162float(d.v[j]);
            sw[j] += dd * (__bfloat162float(xv.v[j]) - m) * s;
            sb[j] += dd;
        }
    }
    float* p = partial + (size_t)blockIdx.x * 2 * C;
    for (int j = 0; j < 8; j++) {
        p[c + j] = sw[j];
        p[C + c + j] = sb[j];
    }
}

// backward version 3: llmc/norm.cuh's kernel before its rows were staged (the same loop with each row's loads where
// they are used: dout and x at the row's start, dres after its row sums); version 4 must equal it bit for bit
template <int V>
__global__ void __launch_bounds__(NORM_BWD_THREADS) norm_backward_v3_kernel(
        bf16* __restrict__ dres, float* __restrict__ partial, const bf16* __restrict__ dout,
        const bf16* __restrict__ x, const bf16* __restrict__ w, const float* __restrict__ mean,
        const float* __restrict__ rstd, int N, int C, bool rms) {
    __shared__ float red[2 * 2 * NORM_BWD_THREADS / 32];
    const int nvec = C / 8, t = threadIdx.x;
    const int r0 = blockIdx.x * NORM_BWD_ROWS, r1 = min(N, r0 + NORM_BWD_ROWS);
    float dw[V][8], db[V][8];
    Pack8 wv[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        if (t + NORM_BWD_THREADS * k < nvec) wv[k] = load8(w + 8 * (t + NORM_BWD_THREADS * k));
#pragma unroll
        for (int j = 0; j < 8; j++) dw[k][j] = db[k][j] = 0.0f;
    }
    for (int row = r0; row < r1; row++) {
        const size_t base = (size_t)row * C;
        const float m = mean[row], s = rstd[row];
        Pack8 dv[V], xv[V];
        float s_dn = 0.0f, s_dnx = 0.0f;
#pragma unroll
        for (int k = 0; k < V; k++) {
            const int v = t + NORM_BWD_THREADS * k;
            if (v >= nvec) break;
            dv[k] = load8(dout + base + 8 * v);
            xv[k] = load8(x + base + 8 * v);
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
            Pack8 g = load8(dres + base + 8 * v);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float xh = (to_float(xv[k].v[j]) - m) * s;
                float dn = to_float(dv[k].v[j]) * to_float(wv[k].v[j]);
                g.v[j] = __float2bfloat16(to_float(g.v[j]) + s * (dn - m_dn - xh * m_dnx));
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

// ----------------------------------------------------------------------------------------------
// buffers of one set and the launches

struct FwdBufs {
    bf16 *x, *y, *resid, *out, *w, *b;
    float *mean, *rstd;
};

static void forward_launch(int version, const FwdBufs& p, int N, int C, bool rms, cudaStream_t st) {
    const bf16* b = rms ? nullptr : p.b;
    if (version == 1) norm_forward_v1_kernel<<<(int)ceil_div(N, 128), 128, 0, st>>>(p.resid, p.out, p.mean, p.rstd, p.x, p.y, p.w, b, N, C, EPS, rms);
    else if (version == 2) norm_forward_v2_kernel<<<(int)ceil_div(N, 4), 128, 0, st>>>(p.resid, p.out, p.mean, p.rstd, p.x, p.y, p.w, b, N, C, EPS, rms);
    else fused_residual_norm_forward(p.resid, p.out, p.mean, p.rstd, p.x, p.y, p.w, b, N, C, EPS, rms, st);
    cudaCheck(cudaGetLastError());
}

struct BwdBufs {
    bf16 *dres, *dw, *db, *dout, *x, *w;
    float *mean, *rstd, *scratch;
};

static void backward_launch(int version, const BwdBufs& p, int N, int C, bool rms, cudaStream_t st) {
    bf16* db = rms ? nullptr : p.db;
    if (version == 1) {
        norm_backward_v1_dx_kernel<<<(int)ceil_div(N, 128), 128, 0, st>>>(p.dres, p.dout, p.x, p.w, p.mean, p.rstd, N, C, rms);
        norm_backward_v1_dw_kernel<<<(int)ceil_div(C, 128), 128, 0, st>>>(p.dw, db, p.dout, p.x, p.mean, p.rstd, N, C);
    } else if (version == 2) {
        norm_backward_v2_dx_kernel<<<(int)ceil_div(N, 4), 128, 0, st>>>(p.dres, p.dout, p.x, p.w, p.mean, p.rstd, N, C, rms);
        int blocks = (int)ceil_div(N, NORM_BWD_ROWS);
        dim3 grid(blocks, (unsigned)ceil_div(C / 8, 128));
        norm_backward_v2_partial_kernel<<<grid, 128, 0, st>>>(p.scratch, p.dout, p.x, p.mean, p.rstd, N, C);
        cudaCheck(cudaGetLastError());
        norm_weight_grad_reduce(p.dw, db, p.scratch, blocks, C, st);
    } else if (version == 3) {
        const int grid = (int)ceil_div(N, NORM_BWD_ROWS), V = norm_backward_variant(C);
#define NORM_BWD_V3(VV) norm_backward_v3_kernel<VV><<<grid, NORM_BWD_THREADS, 0, st>>>(p.dres, p.scratch, p.dout, p.x, p.w, p.mean, p.rstd, N, C, rms)
        if (V == 1) NORM_BWD_V3(1);
        else if (V == 2) NORM_BWD_V3(2);
        else if (V == 4) NORM_BWD_V3(4);
        else NORM_BWD_V3(6);
#undef NORM_BWD_V3
        cudaCheck(cudaGetLastError());
        norm_weight_grad_reduce(p.dw, db, p.scratch, grid, C, st);
    } else {
        norm_backward(p.dres, p.dw, db, p.scratch, p.dout, p.x, p.w, p.mean, p.rstd, N, C, rms, st);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------
// one (kernel, variant, size, version): fresh inputs, validation, timing

static void run_forward(Bench* bench, int version, int N, int C, bool rms, size_t size_index) {
    const size_t NC = (size_t)N * C;
    uint64_t seed = seed_for(rms ? "rmsnorm_forward" : "layernorm_forward", version, size_index);
    std::vector<float> x, y, w, b;
    fill_uniform(&x, NC, seed + 1, -1.0f, 1.0f);
    fill_uniform(&y, NC, seed + 2, -1.0f, 1.0f);
    fill_uniform(&w, C, seed + 3, 0.5f, 1.5f);
    fill_uniform(&b, C, seed + 4, -0.5f, 0.5f);
    std::vector<bf16> xh = to_bf16(&x), yh = to_bf16(&y), wh = to_bf16(&w), bh = to_bf16(&b);

    Layout lay;
    size_t ox = lay.add(NC * 2), oy = lay.add(NC * 2), ores = lay.add(NC * 2), oout = lay.add(NC * 2),
           omean = lay.add(N * 4ull), orstd = lay.add(N * 4ull), ow = lay.add(C * 2ull), ob = lay.add(C * 2ull);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, ox, xh.data(), NC * 2);
    device_sets_upload(sets, oy, yh.data(), NC * 2);
    device_sets_upload(sets, ow, wh.data(), C * 2ull);
    device_sets_upload(sets, ob, bh.data(), C * 2ull);
    auto bufs = [&](int s) {
        return FwdBufs{sets.ptr<bf16>(s, ox), sets.ptr<bf16>(s, oy), sets.ptr<bf16>(s, ores), sets.ptr<bf16>(s, oout),
                       sets.ptr<bf16>(s, ow), sets.ptr<bf16>(s, ob), sets.ptr<float>(s, omean), sets.ptr<float>(s, orstd)};
    };
    forward_launch(version, bufs(0), N, C, rms, bench->stream);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    FwdBufs p0 = bufs(0);
    std::vector<bf16> g_res = download(p0.resid, NC), g_out = download(p0.out, NC);
    std::vector<float> g_mean = download(p0.mean, N), g_rstd = download(p0.rstd, N);

    // reference: the residual rounded to bf16 exactly as the kernel does (fp32 add, round to nearest), then the
    // norm in double
    std::vector<double> r_res(NC), r_out(NC), r_mean(N), r_rstd(N), wd = to_double(w), bd = to_double(b);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < NC; i++) r_res[i] = __bfloat162float(__float2bfloat16(x[i] + y[i]));
    norm_forward<double>(r_out.data(), r_mean.data(), r_rstd.data(), r_res.data(), wd.data(), rms ? nullptr : bd.data(),
                         N, C, EPS, rms);
    std::string report;
    double worst = check_close("resid", g_res, r_res, tolerance(U_BF16, 1, 0.0), &report);
    // out: statistics summed over C; the cancelling terms are xhat * w and b
    worst = std::max(worst, check_close("out", g_out, r_out, tolerance(U_BF16, C, max_abs(r_out) + (rms ? 0.0 : 0.5)), &report));
    worst = std::max(worst, check_close("mean", g_mean, r_mean, tolerance(U_FP32, C, max_abs(r_res)), &report));
    worst = std::max(worst, check_close("rstd", g_rstd, r_rstd, tolerance(U_FP32, C, max_abs(r_rstd)), &report));
    if (version == 3) {
        // the same launcher without the residual (y and resid null, as train_gpt.cu's layer 0): out = norm(x)
        fused_residual_norm_forward(nullptr, p0.out, p0.mean, p0.rstd, p0.x, nullptr, p0.w, rms ? nullptr : p0.b, N, C,
                                    EPS, rms, bench->stream);
        cudaCheck(cudaStreamSynchronize(bench->stream));
        std::vector<bf16> g_out0 = download(p0.out, NC);
        std::vector<double> r_x(NC);
        for (size_t i = 0; i < NC; i++) r_x[i] = __bfloat162float(xh[i]);
        norm_forward<double>(r_out.data(), r_mean.data(), r_rstd.data(), r_x.data(), wd.data(), rms ? nullptr : bd.data(),
                             N, C, EPS, rms);
        worst = std::max(worst, check_close("out (no residual)", g_out0, r_out,
                                            tolerance(U_BF16, C, max_abs(r_out) + (rms ? 0.0 : 0.5)), &report));
    }

    double ms = -1.0;
    if (!bench->args.check_only)
        ms = time_kernel(bench->args, sets, bench->stream, [&](int s) { forward_launch(version, bufs(s), N, C, rms, bench->stream); });
    // bytes: read x, y, w (, b); write resid, out, mean, rstd
    double bytes = 4.0 * NC * 2 + 8.0 * N + (rms ? 1 : 2) * 2.0 * C;
    char size[64];
    snprintf(size, sizeof(size), "%dx%d", N, C);
    bench_row(bench, "norm_forward", rms ? "rmsnorm" : "layernorm", size, version, sets.count, ms, bytes, worst, report);
    device_sets_free(&sets);
}

static void run_backward(Bench* bench, int version, int N, int C, bool rms, size_t size_index) {
    const size_t NC = (size_t)N * C;
    uint64_t seed = seed_for(rms ? "rmsnorm_backward" : "layernorm_backward", version, size_index);
    std::vector<float> dout, x, w, dres, dw, db;
    fill_uniform(&dout, NC, seed + 1, -1.0f, 1.0f);
    fill_uniform(&x, NC, seed + 2, -2.0f, 2.0f);
    fill_uniform(&w, C, seed + 3, 0.5f, 1.5f);
    fill_uniform(&dres, NC, seed + 4, -1.0f, 1.0f);
    fill_uniform(&dw, C, seed + 5, -1.0f, 1.0f);
    fill_uniform(&db, C, seed + 6, -1.0f, 1.0f);
    std::vector<bf16> douth = to_bf16(&dout), xh = to_bf16(&x), wh = to_bf16(&w), dresh = to_bf16(&dres),
                      dwh = to_bf16(&dw), dbh = to_bf16(&db);
    // mean and rstd as the forward pass saved them: fp32 values of the double reference
    std::vector<double> xd = to_double(x), wd = to_double(w), tmp(NC), md(N), rd(N);
    norm_forward<double>(tmp.data(), md.data(), rd.data(), xd.data(), wd.data(), nullptr, N, C, EPS, rms);
    std::vector<float> mean(md.begin(), md.end()), rstd(rd.begin(), rd.end());

    Layout lay;
    size_t odres = lay.add(NC * 2), odout = lay.add(NC * 2), ox = lay.add(NC * 2), ow = lay.add(C * 2ull),
           odw = lay.add(C * 2ull), odb = lay.add(C * 2ull), omean = lay.add(N * 4ull), orstd = lay.add(N * 4ull),
           oscr = lay.add(norm_backward_scratch_floats(N, C) * 4);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, odres, dresh.data(), NC * 2);
    device_sets_upload(sets, odout, douth.data(), NC * 2);
    device_sets_upload(sets, ox, xh.data(), NC * 2);
    device_sets_upload(sets, ow, wh.data(), C * 2ull);
    device_sets_upload(sets, odw, dwh.data(), C * 2ull);
    device_sets_upload(sets, odb, dbh.data(), C * 2ull);
    device_sets_upload(sets, omean, mean.data(), N * 4ull);
    device_sets_upload(sets, orstd, rstd.data(), N * 4ull);
    auto bufs = [&](int s) {
        return BwdBufs{sets.ptr<bf16>(s, odres), sets.ptr<bf16>(s, odw), sets.ptr<bf16>(s, odb), sets.ptr<bf16>(s, odout),
                       sets.ptr<bf16>(s, ox), sets.ptr<bf16>(s, ow), sets.ptr<float>(s, omean), sets.ptr<float>(s, orstd),
                       sets.ptr<float>(s, oscr)};
    };
    backward_launch(version, bufs(0), N, C, rms, bench->stream);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    BwdBufs p0 = bufs(0);
    std::vector<bf16> g_dres = download(p0.dres, NC), g_dw = download(p0.dw, C), g_db = download(p0.db, C);

    std::vector<double> r_dres = to_double(dres), r_dw = to_double(dw), r_db = to_double(db), doutd = to_double(dout),
                        meand(mean.begin(), mean.end()), rstdd(rstd.begin(), rstd.end());
    norm_backward<double>(r_dres.data(), r_dw.data(), r_db.data(), doutd.data(), xd.data(), wd.data(), meand.data(),
                          rstdd.data(), N, C, rms);
    // magnitudes of the summed terms: per column sum over rows of |dout * xhat| and |dout|
    double s_dw = 0.0, s_db = 0.0, rstd_max = 0.0;
    for (int n = 0; n < N; n++) rstd_max = std::max(rstd_max, rstdd[n]);
    {
        std::vector<double> cw(C, 0.0), cb(C, 0.0);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double d = std::fabs(doutd[(size_t)n * C + c]);
                cw[c] += d * std::fabs((xd[(size_t)n * C + c] - meand[n]) * rstdd[n]);
                cb[c] += d;
            }
        for (int c = 0; c < C; c++) { s_dw = std::max(s_dw, cw[c]); s_db = std::max(s_db, cb[c]); }
    }
    std::string report;
    // dres: row sums over C; the cancelling terms are rstd * dout * w (|dout| <= 1, w <= 1.5) and the old dres
    double worst = check_close("dres", g_dres, r_dres, tolerance(U_BF16, C, 3.0 * rstd_max * 1.5 + max_abs(r_dres)), &report);
    worst = std::max(worst, check_close("dw", g_dw, r_dw, tolerance(U_BF16, N, s_dw + 1.0), &report));
    if (!rms) worst = std::max(worst, check_close("db", g_db, r_db, tolerance(U_BF16, N, s_db + 1.0), &report));
    if (version == 4) {  // the staged rows change when values load, not what is computed: version 3's bits exactly
        device_sets_upload(sets, odres, dresh.data(), NC * 2);
        device_sets_upload(sets, odw, dwh.data(), C * 2ull);
        device_sets_upload(sets, odb, dbh.data(), C * 2ull);
        backward_launch(3, p0, N, C, rms, bench->stream);
        cudaCheck(cudaStreamSynchronize(bench->stream));
        auto same_bits = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
            return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
        };
        const bool same = same_bits(download(p0.dres, NC), g_dres) && same_bits(download(p0.dw, C), g_dw) &&
                          same_bits(download(p0.db, C), g_db);
        if (!same) {
            worst = INFINITY;
            report += " FAIL: not bit for bit version 3's;";
        }
    }

    double ms = -1.0;
    if (!bench->args.check_only)
        ms = time_kernel(bench->args, sets, bench->stream, [&](int s) { backward_launch(version, bufs(s), N, C, rms, bench->stream); });
    // bytes: read dout, x, dres, mean, rstd, w, dw (, db); write dres, dw (, db)
    double bytes = 4.0 * NC * 2 + 8.0 * N + (rms ? 3 : 5) * 2.0 * C;
    char size[64];
    snprintf(size, sizeof(size), "%dx%d", N, C);
    bench_row(bench, "norm_backward", rms ? "rmsnorm" : "layernorm", size, version, sets.count, ms, bytes, worst, report);
    device_sets_free(&sets);
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  LayerNorm and RMSNorm fused with the residual add, forward and backward (bf16, fp32 statistics).\n"
                        "  Versions: 1 thread per row, 2 warp per row, 3 llmc/norm.cuh (forward), block of rows\n"
                        "  (backward), 4 llmc/norm.cuh (backward only: rows staged ahead by cp.async).\n",
                        "NxC (rows x channels, C a multiple of 8 up to 12288)", "16384x2048,16384x4096,8192x2048", 2, 4);
    for (const std::vector<long>& s : a.sizes)
        if (s[1] % 8 != 0 || s[1] > NORM_MAX_C || s[0] * s[1] > (1l << 31))
            die("--sizes: %ldx%ld: C must be a multiple of 8 up to %d and N*C at most 2^31", s[0], s[1], NORM_MAX_C);
    Bench bench = bench_start(a, "norm");
    for (size_t si = 0; si < a.sizes.size(); si++) {
        int N = (int)a.sizes[si][0], C = (int)a.sizes[si][1];
        for (int rms = 0; rms < 2; rms++) {
            for (int v = 1; v <= 3; v++)
                if (a.version == 0 || a.version == v) run_forward(&bench, v, N, C, rms, si);
            for (int v = 1; v <= 4; v++)
                if (a.version == 0 || a.version == v) run_backward(&bench, v, N, C, rms, si);
        }
    }
    return bench_finish(&bench);
}
