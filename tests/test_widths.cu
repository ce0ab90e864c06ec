// tests/test_widths.cu: every width- and vocabulary-dependent kernel variant that a preset of llmc/model_config.h
// reaches, run once at the preset's real width or vocabulary on a few rows, against a double-precision host
// reference. Built with g++ against the host emulation of CUDA and cuBLASLt (tests/cuda_emu; tests/t_widths.sh
// builds it in the bf16 and the fp32 build): the kernels run on the CPU, not on a GPU. The other tests use widths up
// to 512 and a 384-entry vocabulary, so without this program these variants never execute anywhere:
//   - llmc/norm.cuh forward, LayerNorm (bias, residual add) and RMSNorm (neither), at every instantiation
//     norm_forward_variant(C) selects: (V 4, warp) C <= 1024, (8, warp) <= 2048, (16, warp) <= 4096, then one
//     block of 256 threads per row: (4, block) <= 8192, (6, block) <= 12288; widths with partial last vectors too;
//   - llmc/norm.cuh backward at each norm_backward_variant(C): V 1 (C <= 2048), 2 (<= 4096), 4 (<= 8192), 6, over
//     37 rows (two row blocks, the second partial, so the weight-gradient reduction sums two partials), and that
//     reduction alone over 2, 128 and 285 row blocks (its 16-loads-ahead loop and remainder), bit for bit;
//   - llmc/classifier.cuh fused_classifier at the presets' vocabularies 50257 (Vp 50304), 32000, 128256 and 152064
//     (Qwen2.5-7B's, the largest): the
//     row kernel's online softmax over many 8-wide vectors per thread, several panels and a partial last one
//     (N 7, panel 3), an ignored row, targets at the vocabulary's ends; and its vocabulary-parallel kernels
//     (vocab_parallel_max_target, _sum_exp, _loss_grad) at tp 2 for those vocabularies and tp 8 at 50257, the
//     ranks' statistics combined on the host as the trainer combines them over the tp group;
//   - llmc/grad_norm.cuh global_norm past its 4-way unrolled loop (every thread of the fixed grid runs it once and
//     the remainder loop after it) and with a tail of n % 8 elements;
//   - llmc/embedding.cuh embedding_backward at C 4096 and 5120 (4 and 5 block columns of 128 threads) with dwpe;
//   - llmc/fp8.cuh fp8_cast_transpose at 4096 columns (E4M3 and E5M2 outputs; bf16 build only, fp8 has no fp32 build);
//   - llmc/mlp_act.cuh gelu_forward and gelu_backward element by element over x in [-6, 6), with many x near the
//     derivative's zero (-0.75), against a bound per element: the emulation's tanhf has the error of the GPU's
//     fast-math tanhf, which the kernels must not depend on (it failed dev/cuda/mlp_act's check on an H100).
// Attention at the presets' head dims is tests/test_attention.cu's (64, 80, 128). Each line names the variant the
// dispatch chose for the shape, so a changed threshold shows up in the output. Seconds each on one core.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "llmc/norm.cuh"
#include "llmc/classifier.cuh"
#include "llmc/grad_norm.cuh"
#include "llmc/embedding.cuh"
#include "llmc/mlp_act.cuh"
#ifndef ENABLE_FP32
#include "llmc/fp8.cuh"
#endif
#include "llmc/ref_ops.h"
#include "tests/check.h"
#include "tests/device_io.h"

// Rounding units. A floatX store rounds to nearest: relative error at most the unit roundoff 2^-8 in bf16 (8
// significant bits: half an ulp, 2^-8 of a value just above a power of two; the bound tests/test_matmul_emu.cu
// uses), 2^-24 in fp32, where EPS_X takes 2^-23 for the few fp32 ulps the stored result already carries.
// EPS32 = 2^-24 is one fp32 rounding: a sum of k terms accumulated in fp32 in any order (sequential, tree) is off
// by at most depth * EPS32 * (sum of |terms|), depth the number of additions on the longest path (Higham, 4.2).
// Errors below are relative to the tensor's largest reference value unless a line says otherwise.
#ifdef ENABLE_FP32
static const double EPS_X = 1.0 / 8388608;  // 2^-23
#else
static const double EPS_X = 1.0 / 256;  // 2^-8
#endif
static const double EPS32 = 1.0 / 16777216;  // 2^-24

static uint32_t g_seed = 12345;
static double urand() {  // [-1, 1)
    g_seed = g_seed * 1664525u + 1013904223u;
    return (g_seed >> 8) * (2.0 / 16777216.0) - 1.0;
}
// n values scale * [-1, 1) (+ shift), rounded to floatX so that host and device see the same numbers
static std::vector<float> make_values(size_t n, double scale, double shift = 0.0) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = to_float(to_floatX((float)(urand() * scale + shift)));
    return v;
}


// max over i of |a - ref| / bound, +inf when a value is not finite
static double worst_ratio(const std::vector<float>& a, const std::vector<double>& ref, const std::vector<double>& bound) {
    double w = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (!std::isfinite(a[i]) || !std::isfinite(ref[i])) return INFINITY;
        w = std::max(w, std::fabs(a[i] - ref[i]) / bound[i]);
    }
    return w;
}
// max |a - ref| / max |ref|
static double rel_to_max(const std::vector<float>& a, const std::vector<double>& ref) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (!std::isfinite(a[i]) || !std::isfinite(ref[i])) return INFINITY;
        md = std::max(md, std::fabs(a[i] - ref[i]));
        mr = std::max(mr, std::fabs(ref[i]));
    }
    return md / std::max(mr, 1e-30);
}

static std::string tag() { return std::string(PRECISION_NAME) + ": "; }

// ---------------------------------------------------------------- norm forward
static void test_norm_forward(int C, bool rms) {
    g_seed = 1000u + C + rms;  // each case its own inputs, whichever cases run
    const int N = 3;
    const NormFwdVariant f = norm_forward_variant(C);
    char name[160];
    snprintf(name, sizeof(name), "%snorm forward %s C=%d N=%d: V=%d LANES=%d (%s)", tag().c_str(),
             rms ? "rmsnorm" : "layernorm", C, N, f.V, f.lanes, f.lanes == 32 ? "a warp per row" : "a block per row");
    const size_t NC = (size_t)N * C;
    // a non-zero mean (shift 0.3) so that a wrong mean shows in LayerNorm's output
    const std::vector<float> x = make_values(NC, 1.0, 0.3), y = make_values(NC, 0.5), w = make_values(C, 1.0, 1.0),
                             b = make_values(C, 0.5);
    floatX *dx = upload<floatX>(x), *dy = rms ? nullptr : upload<floatX>(y), *dw = upload<floatX>(w),
           *db = rms ? nullptr : upload<floatX>(b), *dres, *dout;
    float *dmean, *drstd;
    cudaCheck(cudaMalloc(&dres, NC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dout, NC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dmean, N * sizeof(float)));
    cudaCheck(cudaMalloc(&drstd, N * sizeof(float)));
    const float eps = 1e-5f;
    fused_residual_norm_forward(dres, dout, dmean, drstd, dx, dy, dw, db, N, C, eps, rms, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> res = download(dres, NC), out = download(dout, NC), mean = download(dmean, N),
                             rstd = download(drstd, N);
    // the residual: floatX(x + y), one rounding of an exact fp32 sum, computed the same way here: exact
    std::vector<double> r(NC), wd(w.begin(), w.end()), bd(b.begin(), b.end()), ref(NC), rm(N), rr(N);
    double res_err = 0;
    for (size_t i = 0; i < NC; i++) {
        r[i] = rms ? x[i] : to_float(to_floatX(x[i] + y[i]));
        res_err = std::max(res_err, std::fabs(res[i] - r[i]));
        if (!std::isfinite(res[i])) res_err = INFINITY;
    }
    norm_forward<double>(ref.data(), rm.data(), rr.data(), r.data(), wd.data(), rms ? nullptr : bd.data(), N, C, eps, rms);
    // out = (r - mean) * rstd * w (+ b) from fp32 statistics, rounded once to floatX: EPS_X of the output's scale
    // for the rounding, plus the statistics' fp32 error. The sums of C terms (r and (r - m)^2) have depth at most
    // C (a thread's sequential part, then the tree): relative error of the variance <= C * EPS32 over the sum of
    // |terms| (the variance itself: squares), so rstd within C/2 * EPS32 (+ rsqrt's few ulps), and the mean within
    // C * EPS32 * mean|r| <= C * EPS32 * max|r| <= C * EPS32 * (few) / rstd. tol: EPS_X + 4 C EPS32.
    const double tol = EPS_X + 4.0 * C * EPS32;
    const double e_out = rel_to_max(out, ref);
    double e_stat = 0;
    for (int n = 0; n < N; n++) {
        e_stat = max_err(e_stat, scalar_rel_err(rstd[n], rr[n]));
        e_stat = max_err(e_stat, std::fabs(mean[n] - rm[n]) * rr[n]);  // mean error in units of the row's std
    }
    check(res_err == 0 && e_out <= tol && e_stat <= tol, name,
          "resid max diff %.3g (exact expected), out rel err %.3g, mean/rstd err %.3g, tolerance %.3g", res_err, e_out,
          e_stat, tol);
    printf("  norm fwd C=%d %s: out rel err %.3g, stats %.3g, tolerance %.3g\n", C, rms ? "rms" : "ln", e_out, e_stat, tol);
    for (void* p : {(void*)dx, (void*)dy, (void*)dw, (void*)db, (void*)dres, (void*)dout, (void*)dmean, (void*)drstd})
        if (p) cudaCheck(cudaFree(p));
}

// ---------------------------------------------------------------- norm backward
static void test_norm_backward(int C, bool rms) {
    g_seed = 2000u + C + rms;
    const int N = 37;  // two blocks of NORM_BWD_ROWS = 32 rows, the second partial
    const int V = norm_backward_variant(C);
    char name[160];
    snprintf(name, sizeof(name), "%snorm backward %s C=%d N=%d: V=%d (%d row blocks)", tag().c_str(),
             rms ? "rmsnorm" : "layernorm", C, N, V, (int)ceil_div(N, NORM_BWD_ROWS));
    const size_t NC = (size_t)N * C;
    const std::vector<float> x = make_values(NC, 1.0, 0.3), dout = make_values(NC, 1.0), w = make_values(C, 1.0, 1.0),
                             dres0 = make_values(NC, 0.1), dw0 = make_values(C, 0.1), db0 = make_values(C, 0.1);
    // the statistics as the forward gives them: computed in double, stored as fp32
    std::vector<float> mean(N), rstd(N);
    std::vector<double> meand(N), rstdd(N);
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        if (!rms) {
            for (int c = 0; c < C; c++) m += x[(size_t)n * C + c];
            m /= C;
        }
        for (int c = 0; c < C; c++) v += (x[(size_t)n * C + c] - m) * (x[(size_t)n * C + c] - m);
        mean[n] = (float)m;
        rstd[n] = (float)(1.0 / std::sqrt(v / C + 1e-5));
        meand[n] = mean[n];
        rstdd[n] = rstd[n];
    }
    floatX *dx = upload<floatX>(x), *ddout = upload<floatX>(dout), *dwt = upload<floatX>(w), *ddres = upload<floatX>(dres0),
           *ddw = upload<floatX>(dw0), *ddb = rms ? nullptr : upload<floatX>(db0);
    float *dmean = upload<float>(mean), *drstd = upload<float>(rstd), *scratch;
    cudaCheck(cudaMalloc(&scratch, norm_backward_scratch_floats(N, C) * sizeof(float)));
    norm_backward(ddres, ddw, ddb, scratch, ddout, dx, dwt, dmean, drstd, N, C, rms, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> gres = download(ddres, NC), gw = download(ddw, C),
                             gb = rms ? std::vector<float>() : download(ddb, C);
    std::vector<double> xd(x.begin(), x.end()), dod(dout.begin(), dout.end()), wd(w.begin(), w.end()),
        rres(dres0.begin(), dres0.end()), rw(dw0.begin(), dw0.end()), rb(db0.begin(), db0.end());
    norm_backward<double>(rres.data(), rw.data(), rb.data(), dod.data(), xd.data(), wd.data(), meand.data(),
                          rstdd.data(), N, C, rms);
    // dres: the two row sums (C terms, depth <= C, fp32) enter as m_dn and xhat * m_dnx, then one floatX rounding of
    // the updated gradient: EPS_X + 4 C EPS32 of the tensor's scale (the terms are O(1) like the result).
    // dw, db: N = 37 rows summed in fp32 (depth N) and added into the floatX value with one rounding: EPS_X + (N + 2) EPS32.
    const double tol_res = EPS_X + 4.0 * C * EPS32, tol_w = EPS_X + (N + 2) * EPS32;
    const double e_res = rel_to_max(gres, rres), e_w = rel_to_max(gw, rw), e_b = rms ? 0.0 : rel_to_max(gb, rb);
    check(e_res <= tol_res && e_w <= tol_w && e_b <= tol_w, name,
          "dres rel err %.3g (tolerance %.3g), dw %.3g, db %.3g (tolerance %.3g)", e_res, tol_res, e_w, e_b, tol_w);
    printf("  norm bwd C=%d %s: dres %.3g / %.3g, dw %.3g db %.3g / %.3g\n", C, rms ? "rms" : "ln", e_res, tol_res, e_w,
           e_b, tol_w);
    for (void* p : {(void*)dx, (void*)ddout, (void*)dwt, (void*)ddres, (void*)ddw, (void*)ddb, (void*)dmean,
                    (void*)drstd, (void*)scratch})
        if (p) cudaCheck(cudaFree(p));
}

// ---------------------------------------------------------------- norm weight-gradient reduction
// norm_weight_grad_reduce over nblocks partial rows [nblocks][2C]: past its 16-loads-ahead loop (a slice takes 16 of
// its blocks at a time from 128 blocks on, N > 4096 rows in the trainer) and its remainder loop. The oracle is
// exact: the host adds the same fp32 values in the kernel's documented order (slice s: blocks s, s+8, ...; then the
// slices in order; then into the floatX value), so the results must be equal bit for bit.
static void test_norm_weight_reduce(int nblocks, int C) {
    g_seed = 2500u + nblocks;
    char name[160];
    snprintf(name, sizeof(name), "%snorm weight-gradient reduction, %d blocks x 2C = %d: bit for bit the documented order",
             tag().c_str(), nblocks, 2 * C);
    const std::vector<float> partial = make_values((size_t)nblocks * 2 * C, 1.0), dw0 = make_values(C, 0.5),
                             db0 = make_values(C, 0.5);
    float* dpart = upload<float>(partial);
    floatX *ddw = upload<floatX>(dw0), *ddb = upload<floatX>(db0);
    norm_weight_grad_reduce(ddw, ddb, dpart, nblocks, C, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> gw = download(ddw, C), gb = download(ddb, C);
    long wrong = 0;
    for (int col = 0; col < 2 * C; col++) {
        float tot = 0.0f;
        for (int slice = 0; slice < 8; slice++) {
            float s = 0.0f;
            for (int blk = slice; blk < nblocks; blk += 8) s += partial[(size_t)blk * 2 * C + col];
            tot += s;
        }
        const float want = col < C ? to_float(to_floatX(dw0[col] + tot)) : to_float(to_floatX(db0[col - C] + tot));
        const float got = col < C ? gw[col] : gb[col - C];
        if (memcmp(&want, &got, 4) != 0) wrong++;
    }
    check(wrong == 0, name, "%ld of %d sums differ from the host's in the same order", wrong, 2 * C);
    printf("  norm weight reduce %d blocks: %ld of %d differ\n", nblocks, wrong, 2 * C);
    for (void* p : {(void*)dpart, (void*)ddw, (void*)ddb}) cudaCheck(cudaFree(p));
}

// ---------------------------------------------------------------- fused classifier
static void test_classifier(int V, MatmulContext* mm) {
    g_seed = 3000u + V;
    const int Vp = round_up(V, 128), C = 64, N = 7, panel = 3;
    char name[200];
    snprintf(name, sizeof(name),
             "%sfused classifier V=%d Vp=%d C=%d N=%d panel=%d: %d panels (last %d rows), up to %d vectors of 8 per thread",
             tag().c_str(), V, Vp, C, N, panel, (N + panel - 1) / panel, N - (N - 1) / panel * panel,
             (int)ceil_div(Vp / 8, CLS_THREADS));
    // logits = x w^T with x, w in [-1, 1) * 0.5: 64 products, logits of spread ~1.3, max a few. Three rows of w
    // are set so that a column the kernel skips or wrongly counts moves the loss by far more than its tolerance:
    // column 0 is 1.5 sign(x[0]) (row 0's logit ~ 24, its target: the first vector of thread 0), column V - 1 is
    // 1.5 sign(x[1]) (row 1's target, the last valid column: the last vector of some thread), and the padded
    // columns V..Vp-1 (V 50257 only) are 8 x[v % N] (logits ~ 40: counted in the softmax they would dominate it).
    const std::vector<float> x = make_values((size_t)N * C, 0.5);
    std::vector<float> w = make_values((size_t)Vp * C, 0.5);
    for (int c = 0; c < C; c++) {
        w[c] = x[c] >= 0 ? 1.5f : -1.5f;
        w[(size_t)(V - 1) * C + c] = x[C + c] >= 0 ? 1.5f : -1.5f;
        for (int v = V; v < Vp; v++) w[(size_t)v * C + c] = to_float(to_floatX(8.0f * x[(size_t)(v % N) * C + c]));
    }
    std::vector<int32_t> tgt = {0, V - 1, -1, V / 2, 12345 % V, V - 8, 7};
    int valid = 0;
    for (int t : tgt) valid += t >= 0;
    const float scale = 1.0f / valid;
    floatX *dx_, *logits, *dxw = upload<floatX>(w), *dxx = upload<floatX>(x);
    float *dw, *losses, *lse;
    int32_t* dt;
    cudaCheck(cudaMalloc(&dx_, (size_t)N * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&logits, (size_t)panel * Vp * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dw, (size_t)Vp * C * sizeof(float)));
    cudaCheck(cudaMemset(dw, 0xff, (size_t)Vp * C * sizeof(float)));  // NaN: the first panel writes dW (beta 0)
    cudaCheck(cudaMalloc(&losses, N * sizeof(float)));
    cudaCheck(cudaMalloc(&lse, N * sizeof(float)));
    cudaCheck(cudaMalloc(&dt, N * sizeof(int32_t)));
    cudaCheck(cudaMemcpy(dt, tgt.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice));
    fused_classifier(dx_, dw, losses, lse, logits, dxx, dxw, dt, N, C, V, Vp, panel, scale, false, mm, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> gdx = download(dx_, (size_t)N * C), gdw = download(dw, (size_t)Vp * C),
                             gl = download(losses, N), glse = download(lse, N);
    // reference in double from the same floatX inputs
    std::vector<double> lg((size_t)N * Vp), labs((size_t)N * Vp), rlse(N), rloss(N), p((size_t)N * Vp);
    std::vector<double> tol_loss(N), tol_lse(N);
    std::vector<double> dmax(N);  // per row: bound on |logit error|, then on the relative error of p
    for (int n = 0; n < N; n++) {
        double dl = 0;
        for (int v = 0; v < Vp; v++) {
            double s = 0, a = 0;
            for (int c = 0; c < C; c++) {
                const double t = (double)x[(size_t)n * C + c] * w[(size_t)v * C + c];
                s += t;
                a += std::fabs(t);
            }
            lg[(size_t)n * Vp + v] = s;
            // a logit: C products summed in fp32 (depth C), then rounded to floatX
            if (v < V) dl = std::max(dl, C * EPS32 * a + EPS_X * std::fabs(s));
        }
        double mx = -INFINITY, se = 0;
        for (int v = 0; v < V; v++) mx = std::max(mx, lg[(size_t)n * Vp + v]);
        for (int v = 0; v < V; v++) se += std::exp(lg[(size_t)n * Vp + v] - mx);
        rlse[n] = mx + std::log(se);
        rloss[n] = tgt[n] >= 0 ? rlse[n] - lg[(size_t)n * Vp + tgt[n]] : 0.0;
        for (int v = 0; v < Vp; v++) p[(size_t)n * Vp + v] = v < V ? std::exp(lg[(size_t)n * Vp + v] - rlse[n]) : 0.0;
        // lse = m + log(sum exp(l - m)) of logits each within dl, the sum of V exps in fp32 (a thread's
        // ceil(Vp / 4096) vectors of 8 in sequence, then merges: depth < Vp / 512 + 64 additions, each also
        // rescaled by one __expf): |lse error| <= dl + (Vp / 256 + 128) EPS32. loss = lse - logit[target]:
        // twice dl plus that. p = exp(l - lse): relative error <= exp(2 dl + ...) - 1.
        const double lse_b = dl + (Vp / 256.0 + 128) * EPS32;
        tol_lse[n] = lse_b + 4 * EPS32 * std::fabs(rlse[n]);
        tol_loss[n] = dl + tol_lse[n];
        dmax[n] = std::expm1(dl + lse_b + 4 * EPS32 * std::fabs(rlse[n]));
    }
    double e_loss = 0, e_lse = 0;  // worst |error| / the row's bound
    for (int n = 0; n < N; n++) {
        e_loss = max_err(e_loss, std::fabs(gl[n] - rloss[n]) / tol_loss[n]);
        e_lse = max_err(e_lse, std::fabs(glse[n] - rlse[n]) / tol_lse[n]);
    }
    // dlogit = (p - onehot) scale, each within dmax p scale (+ EPS_X of itself: its floatX store);
    // dx[n, c] = sum_v dlogit w[v, c] in fp32 (depth Vp) stored in floatX; dw[v, c] = sum_n dlogit x[n, c] in fp32
    // over the panels (depth N). Per element bound: (dmax + EPS_X + depth EPS32) * sum |dlogit| |w|, + EPS_X |dx|.
    std::vector<double> rdx((size_t)N * C, 0.0), bdx((size_t)N * C, 0.0), rdw((size_t)Vp * C, 0.0), bdw((size_t)Vp * C, 0.0);
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) continue;
        const double f = dmax[n] + EPS_X;
        for (int v = 0; v < Vp; v++) {
            const double pv = p[(size_t)n * Vp + v], d = (pv - (v == tgt[n] ? 1.0 : 0.0)) * scale;
            const double ad = (pv + (v == tgt[n] ? 1.0 : 0.0)) * scale;
            if (ad == 0) continue;
            for (int c = 0; c < C; c++) {
                const double wv = w[(size_t)v * C + c], xv = x[(size_t)n * C + c];
                rdx[(size_t)n * C + c] += d * wv;
                bdx[(size_t)n * C + c] += ad * std::fabs(wv) * (f + Vp * EPS32);
                rdw[(size_t)v * C + c] += d * xv;
                bdw[(size_t)v * C + c] += ad * std::fabs(xv) * (f + (N + 1) * EPS32);
            }
        }
    }
    for (size_t i = 0; i < rdx.size(); i++) bdx[i] += EPS_X * std::fabs(rdx[i]) + 1e-30;
    for (size_t i = 0; i < rdw.size(); i++) bdw[i] += 1e-30;
    const double r_dx = worst_ratio(gdx, rdx, bdx), r_dw = worst_ratio(gdw, rdw, bdw);
    check(e_loss <= 1 && e_lse <= 1 && r_dx <= 1 && r_dw <= 1, name,
          "worst error / bound (<= 1): loss %.3g, lse %.3g, dx %.3g, dw %.3g", e_loss, e_lse, r_dx, r_dw);
    printf("  classifier V=%d: worst error / bound: loss %.3g lse %.3g dx %.3g dw %.3g\n", V, e_loss, e_lse, r_dx, r_dw);
    for (void* q : {(void*)dx_, (void*)logits, (void*)dxw, (void*)dxx, (void*)dw, (void*)losses, (void*)lse, (void*)dt})
        cudaCheck(cudaFree(q));
}

// ---------------------------------------------------------------- vocabulary-parallel cross-entropy
// The three kernels of llmc/classifier.cuh's tensor-parallel loss at tp ranks, each rank's launch on its own
// columns [r Vpl, (r + 1) Vpl) of the same logits, and the combination over ranks the trainer does between them
// (max of the maxima, sums of target logits and of exps) done here on the host, as in fp32 on the device.
static void test_vocab_parallel(int V, int tp) {
    g_seed = 4000u + V + tp;
    const int Vp = round_up(V, 128 * tp), Vpl = Vp / tp, N = 3;
    char name[200];
    snprintf(name, sizeof(name), "%svocab-parallel cross-entropy V=%d tp=%d Vpl=%d: up to %d vectors of 8 per thread",
             tag().c_str(), V, tp, Vpl, (int)ceil_div(Vpl / 8, VP_THREADS));
    // logits in floatX, 3 [-1, 1); padded columns (>= V) at 30: counted in the softmax they would dominate it
    std::vector<float> lg = make_values((size_t)N * Vp, 3.0);
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) lg[(size_t)n * Vp + v] = 30.0f;
    const std::vector<int32_t> tgt = {5, V - 1, -1};
    const float scale = 0.5f;
    std::vector<float> mx(N, -INFINITY), tg(N, 0.0f), sum(N, 0.0f);
    std::vector<floatX*> dl(tp);
    int32_t* dt;
    float *dmx, *dtg, *dsum, *dloss;
    cudaCheck(cudaMalloc(&dt, N * sizeof(int32_t)));
    cudaCheck(cudaMemcpy(dt, tgt.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (float** q : {&dmx, &dtg, &dsum, &dloss}) cudaCheck(cudaMalloc(q, N * sizeof(float)));
    for (int r = 0; r < tp; r++) {
        std::vector<float> part((size_t)N * Vpl);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < Vpl; c++) part[(size_t)n * Vpl + c] = lg[(size_t)n * Vp + r * Vpl + c];
        dl[r] = upload<floatX>(part);
        vocab_parallel_max_target(dl[r], dmx, dtg, dt, N, r * Vpl, V, Vpl, 0);
        const std::vector<float> m = download(dmx, N), t = download(dtg, N);
        for (int n = 0; n < N; n++) { mx[n] = std::max(mx[n], m[n]); tg[n] += t[n]; }
    }
    cudaCheck(cudaMemcpy(dmx, mx.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dtg, tg.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    for (int r = 0; r < tp; r++) {
        vocab_parallel_sum_exp(dl[r], dmx, dsum, N, r * Vpl, V, Vpl, 0);
        const std::vector<float> sr = download(dsum, N);
        for (int n = 0; n < N; n++) sum[n] += sr[n];
    }
    cudaCheck(cudaMemcpy(dsum, sum.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    // reference: lse over the V valid columns, loss, dlogits = (p - onehot) scale
    std::vector<double> rlse(N);
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, se = 0;
        for (int v = 0; v < V; v++) m = std::max(m, (double)lg[(size_t)n * Vp + v]);
        for (int v = 0; v < V; v++) se += std::exp(lg[(size_t)n * Vp + v] - m);
        rlse[n] = m + std::log(se);
    }
    // the sum of exps: a thread's vectors in sequence (8 terms each), the block tree (5 + 8), tp ranks: depth below
    // Vpl / 256 + 32 + tp, each exp one rounding more: |lse error| <= lse_b = (Vpl / 128 + 64 + 2 tp) EPS32, plus
    // log's and the final add's roundings of |lse|. p = exp(l - lse) then relative error <= expm1(lse_b + ...),
    // and dlogit one floatX rounding (of the computed value): per element (dp p (1 + EPS_X) + EPS_X |p - onehot|) scale.
    // The rounding alone reaches 0.98 of EPS_X |p - onehot| on some of the 10^5 elements: the bound is tight.
    double r_loss = 0, r_d = 0;
    for (int r = 0; r < tp; r++) {
        vocab_parallel_loss_grad(dl[r], dloss, dmx, dsum, dtg, dt, N, r * Vpl, V, Vpl, scale, 0);
        const std::vector<float> gloss = download(dloss, N), gd = download(dl[r], (size_t)N * Vpl);
        for (int n = 0; n < N; n++) {
            const double lse_b = (Vpl / 128.0 + 64 + 2 * tp) * EPS32 + 4 * EPS32 * std::fabs(rlse[n]);
            const double ref_loss = tgt[n] >= 0 ? rlse[n] - lg[(size_t)n * Vp + tgt[n]] : 0.0;
            r_loss = max_err(r_loss, std::fabs(gloss[n] - ref_loss) / (lse_b + 2 * EPS32 * std::fabs(ref_loss)));
            const double dp = std::expm1(lse_b + 2 * EPS32 * 40);
            for (int c = 0; c < Vpl; c++) {
                const int v = r * Vpl + c;
                const double p = tgt[n] >= 0 && v < V ? std::exp(lg[(size_t)n * Vp + v] - rlse[n]) : 0.0;
                const double oh = tgt[n] >= 0 && v == tgt[n] ? 1.0 : 0.0;
                const double ref = (p - oh) * scale, bound = (dp * p * (1 + EPS_X) + EPS_X * std::fabs(p - oh)) * scale + 1e-30;
                const float got = gd[(size_t)n * Vpl + c];
                r_d = std::isfinite(got) ? std::max(r_d, std::fabs(got - ref) / bound) : INFINITY;
            }
        }
    }
    check(r_loss <= 1 && r_d <= 1, name, "worst error / bound (<= 1): loss %.3g, dlogits %.3g", r_loss, r_d);
    printf("  vocab-parallel V=%d tp=%d: worst error / bound: loss %.3g dlogits %.3g\n", V, tp, r_loss, r_d);
    for (int r = 0; r < tp; r++) cudaCheck(cudaFree(dl[r]));
    for (void* q : {(void*)dt, (void*)dmx, (void*)dtg, (void*)dsum, (void*)dloss}) cudaCheck(cudaFree(q));
}

// ---------------------------------------------------------------- global norm
template <typename T>
static void test_global_norm(const char* tname) {
    g_seed = 5000u + sizeof(T);
    const size_t G = (size_t)GLOBAL_NORM_BLOCKS * GLOBAL_NORM_THREADS;
    const size_t n = 8 * (5 * G) + 13;  // nvec = 5G + 1: every thread runs the 4-way loop once, then the remainder
    const size_t per_thread = (n / 8 + G - 1) / G;  // vectors of the thread with the most
    char name[200];
    snprintf(name, sizeof(name), "%sglobal norm (%s) n=%zu: %zu vectors of 8 per thread (4-way loop from %zu), tail %zu",
             tag().c_str(), tname, n, per_thread, 4 * G * 8, n % 8);
    // magnitudes growing with the index (1x to 4x), so that a vector read twice in place of another changes the sum
    // systematically rather than by a random difference of equally distributed squares
    std::vector<float> g(n);
    for (size_t i = 0; i < n; i++) g[i] = (float)(T)(float)(urand() * (1.0 + 3.0 * (double)i / n));
    // the tail of n % 8 elements (summed one per thread outside the vector loops) large enough to matter: a few %
    for (size_t i = n / 8 * 8; i < n; i++) g[i] = (float)(T)(float)(600.0 + 8.0 * (double)(i % 8));
    T* dg = upload<T>(g);
    float *out, *partial;
    cudaCheck(cudaMalloc(&out, 2 * sizeof(float)));
    cudaCheck(cudaMalloc(&partial, GLOBAL_NORM_BLOCKS * sizeof(float)));
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    const double ref = std::sqrt(ss);
    const float clip = (float)(ref / 2);
    global_norm(out, partial, dg, n, clip, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> o = download(out, 2);
    // a sum of positive terms: relative error <= depth * EPS32. Depth: 8 per vector times the thread's vectors, its
    // tail element, the warp tree (5), the block's 8 warp sums, the final kernel's 4 partials per thread, warp tree
    // (5) and 8 warp sums; each square rounded once (+1). The norm halves it (sqrt), plus one rounding.
    const double depth = 8.0 * per_thread + 1 + 5 + 8 + GLOBAL_NORM_BLOCKS / GLOBAL_NORM_THREADS + 5 + 8 + 1;
    const double tol = depth * EPS32 / 2 + EPS32;
    const double e = scalar_rel_err(o[0], ref), ec = scalar_rel_err(o[1], clip_coef((float)ref, clip));
    check(e <= tol && ec <= 2 * tol, name, "norm rel err %.3g, clip coef %.3g (tolerance %.3g)", e, ec, tol);
    printf("  global norm %s: rel err %.3g, clip coef %.3g, tolerance %.3g\n", tname, e, ec, tol);
    cudaCheck(cudaFree(dg));
    cudaCheck(cudaFree(out));
    cudaCheck(cudaFree(partial));
}

// ---------------------------------------------------------------- embedding backward
static void test_embedding_backward(int C) {
    g_seed = 6000u + C;
    const int T = 4, N = 12, Vocab = 64;
    const int cols = (int)ceil_div(C / 8, EMBEDDING_THREADS);
    std::vector<int32_t> tok = {5, 63, 5, 0, 17, 5, 63, 2, 0, 40, 17, 5};
    char name[200];
    snprintf(name, sizeof(name), "%sembedding backward C=%d N=%d T=%d: %d block columns of %d threads", tag().c_str(),
             C, N, T, cols, EMBEDDING_THREADS);
    const std::vector<float> dout = make_values((size_t)N * C, 1.0), dwte0 = make_values((size_t)Vocab * C, 0.1),
                             dwpe0 = make_values((size_t)T * C, 0.1);
    floatX *ddout = upload<floatX>(dout), *dwte = upload<floatX>(dwte0), *dwpe = upload<floatX>(dwpe0);
    EmbeddingPlan plan;
    embedding_plan_build(&plan, tok.data(), N, Vocab);
    embedding_backward(dwte, dwpe, ddout, plan, N, T, C, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> gte = download(dwte, (size_t)Vocab * C), gpe = download(dwpe, (size_t)T * C);
    std::vector<double> rte(dwte0.begin(), dwte0.end()), rpe(dwpe0.begin(), dwpe0.end()), dd(dout.begin(), dout.end());
    embedding_backward<double>(rte.data(), rpe.data(), dd.data(), tok.data(), N, T, C);
    // at most N terms summed in fp32 (depth N) and added into a floatX value with one rounding
    const double tol = EPS_X + (N + 2) * EPS32;
    const double e1 = rel_to_max(gte, rte), e2 = rel_to_max(gpe, rpe);
    check(e1 <= tol && e2 <= tol, name, "dwte rel err %.3g, dwpe %.3g (tolerance %.3g)", e1, e2, tol);
    printf("  embedding bwd C=%d: dwte %.3g dwpe %.3g, tolerance %.3g\n", C, e1, e2, tol);
    embedding_plan_free(&plan);
    cudaCheck(cudaFree(ddout));
    cudaCheck(cudaFree(dwte));
    cudaCheck(cudaFree(dwpe));
}

// ---------------------------------------------------------------- fp8 transposed cast
#ifndef ENABLE_FP32
template <typename F8>
static void test_fp8_cast_transpose(Fp8Format fmt, const char* fname) {
    g_seed = 7000u + fmt;
    const int R = 5, C = 4096;  // a partial row tile (5 of 32 rows), 128 column tiles
    char name[160];
    snprintf(name, sizeof(name), "%sfp8_cast_transpose %s [%d, %d]", tag().c_str(), fname, R, C);
    const std::vector<float> x = make_values((size_t)R * C, 3.0);
    __nv_bfloat16* dx = upload<__nv_bfloat16>(x);
    Fp8Meta m;
    fp8_meta_init(&m, fmt, 1, 4, 0);
    const float sc = 2.5f;
    std::vector<float> meta = fp8_meta_download(&m);
    meta[0] = sc;           // scale
    meta[1] = 1.0f / sc;    // scale_inv
    fp8_meta_upload(&m, meta, 0);
    F8 *q, *qt;
    cudaCheck(cudaMalloc(&q, (size_t)R * C));
    cudaCheck(cudaMalloc(&qt, (size_t)R * C));
    fp8_cast_transpose(0, q, qt, dx, R, C, &m, 0, FP8_DELAYED);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<uint8_t> hq((size_t)R * C), hqt((size_t)R * C);
    cudaCheck(cudaMemcpy(hq.data(), q, hq.size(), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hqt.data(), qt, hqt.size(), cudaMemcpyDeviceToHost));
    const std::vector<float> after = fp8_meta_download(&m);
    // the encoding itself (every code, ties, saturation) is tests/test_fp8.cu's; here: each element's code equals
    // the host conversion of x * scale, and the transposed output holds the same code at [c, r]; amax = max |x|
    size_t bad = 0, bad_t = 0;
    double amax = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            const float v = x[(size_t)r * C + c];
            amax = std::max(amax, (double)std::fabs(v));
            F8 e(v * sc);
            uint8_t code;
            memcpy(&code, &e, 1);
            bad += hq[(size_t)r * C + c] != code;
            bad_t += hqt[(size_t)c * R + r] != code;
        }
    const float got_amax = after[2];
    check(bad == 0 && bad_t == 0 && got_amax == (float)amax, name, "%zu codes differ, %zu transposed, amax %g vs %g", bad,
          bad_t, got_amax, amax);
    fp8_meta_free(&m);
    cudaCheck(cudaFree(dx));
    cudaCheck(cudaFree(q));
    cudaCheck(cudaFree(qt));
}
#endif

// ---------------------------------------------------------------- GELU forward and backward
// Per element: one floatX rounding of the result (EPS_X of it) plus 16 fp32 roundings of the terms it is made of,
// 0.5 x (1 + tanh u) and dact times each of the derivative's two terms, which cancel near x = -0.75; in the backward
// times (1 + 2|u|), since u = K (x + C x^3) carries a few roundings and exp(-2u) turns them into 2|u| times as many. An
// error in tanh of the fast-math tanhf's size (about 2^-11 of it) is 100 times this bound near -0.75.
static void test_gelu() {
    g_seed = 7000u;
    const int n = 8192;  // n % 8 == 0
    std::vector<float> x = make_values(n, 6.0), dact = make_values(n, 1.0);
    for (int i = 0; i < n / 4; i++) x[i] = to_float(to_floatX((float)(-0.75 + 0.05 * urand())));
    floatX *dx = upload<floatX>(x), *dd = upload<floatX>(dact), *dact_out, *dgrad;
    cudaCheck(cudaMalloc(&dact_out, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dgrad, n * sizeof(floatX)));
    gelu_forward(dact_out, dx, n, 0);
    gelu_backward(dgrad, dd, dx, n, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> out = download(dact_out, n), grad = download(dgrad, n);
    std::vector<double> xd(x.begin(), x.end()), ddd(dact.begin(), dact.end()), rout(n), rgrad(n), bo(n), bg(n);
    mlp_act_forward<double>(rout.data(), xd.data(), 1, n, false);
    mlp_act_backward<double>(rgrad.data(), ddd.data(), xd.data(), 1, n, false);
    const double k = 0.7978845608028654;
    for (int i = 0; i < n; i++) {
        const double xi = xd[i], th = std::tanh(k * (xi + 0.044715 * xi * xi * xi));
        const double u = k * (xi + 0.044715 * xi * xi * xi), t1 = 0.5 * (1 + th), t2 = 0.5 * xi * (1 - th * th) * k * (1 + 3 * 0.044715 * xi * xi);
        bo[i] = EPS_X * std::fabs(rout[i]) + 16 * EPS32 * std::fabs(xi) + 1e-30;
        bg[i] = EPS_X * std::fabs(rgrad[i]) + 16 * EPS32 * (1 + 2 * std::fabs(u)) * std::fabs(ddd[i]) * (std::fabs(t1) + std::fabs(t2)) +
                1e-30;
    }
    const double eo = worst_ratio(out, rout, bo), eg = worst_ratio(grad, rgrad, bg);
    char name[160];
    snprintf(name, sizeof(name), "%sgelu forward and backward, %d values in [-6, 6), a quarter near -0.75", tag().c_str(), n);
    check(eo <= 1 && eg <= 1, name, "worst error / bound: forward %.3g, backward %.3g", eo, eg);
    printf("  gelu: worst error / bound: forward %.3g, backward %.3g\n", eo, eg);
    cudaCheck(cudaFree(dx));
    cudaCheck(cudaFree(dd));
    cudaCheck(cudaFree(dact_out));
    cudaCheck(cudaFree(dgrad));
}

int main(int argc, char** argv) {
    const std::string only = argc > 1 ? argv[1] : "";
    auto want = [&](const char* what) { return only.empty() || only == what; };
    if (want("norm")) {
        // one width per forward instantiation, the presets' widths with partial vectors among them
        for (int C : {768, 896, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 8192, 12288}) {
            test_norm_forward(C, false);
            test_norm_forward(C, true);
        }
        for (int C : {768, 2048, 2560, 3584, 4096, 5120, 8192, 12288}) {
            test_norm_backward(C, false);
            test_norm_backward(C, true);
        }
        for (int nblocks : {2, 128, 8 * 16 * 2 + 8 * 3 + 5}) test_norm_weight_reduce(nblocks, 40);
    }
    if (want("classifier")) {
        MatmulContext mm;
        matmul_init(&mm, 0);
        for (int V : {50257, 32000, 128256, 152064}) test_classifier(V, &mm);
        matmul_free(&mm);
        for (int V : {50257, 32000, 128256}) test_vocab_parallel(V, 2);
        test_vocab_parallel(50257, 8);  // Vp 51200: the last rank's 6400 columns hold 5457 valid ones
    }
    if (want("global_norm")) {
        test_global_norm<floatX>(PRECISION_NAME);
#ifndef ENABLE_FP32
        test_global_norm<float>("fp32");
#endif
    }
    if (want("embedding"))
        for (int C : {4096, 5120}) test_embedding_backward(C);
    if (want("gelu")) test_gelu();
#ifndef ENABLE_FP32
    if (want("fp8")) {
        test_fp8_cast_transpose<__nv_fp8_e4m3>(FP8_E4M3, "e4m3");
        test_fp8_cast_transpose<__nv_fp8_e5m2>(FP8_E5M2, "e5m2");
    }
#endif
    printf("test_widths: %d failed\n", g_failed);
    return g_failed ? 1 : 0;
}
