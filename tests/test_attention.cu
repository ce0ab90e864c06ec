// tests/test_attention.cu: the tensor-core flash attention of llmc/attention.cuh (the bf16 kernels the trainer
// runs) against attention in double precision computed on the host from the same bf16 inputs, forward (out,
// lse) and backward (dq, dk, dv), per element at a tolerance set by the kernels' bf16 roundings (below). Built with
// -DENABLE_FP16, the same checks of the fp16 kernels (floatX = half: inputs fp16 numbers, u = 2^-11; cuDNN's in fp16 with USE_CUDNN).
// Shapes: head dims 64, 80 and 128; GQA and MQA; odd and even numbers of 64-row tiles (the pipelined kernels
// alternate two buffers); batch 2. The kernels take only T a multiple of 64 (the trainer refuses other
// lengths at -t): a child process checks that the launcher refuses T = 96 with exit status 1 and a message
// naming T. The forward runs as version 3 and as version 4 (wgmma, where T is a multiple of 128 and hd 64 or 128;
// elsewhere it must give version 3's bits). The backward runs with each dK/dV kernel (versions 3, 4 and 5 of llmc/attention.cuh): version 3 is checked
// against the reference, versions 4 and 5 must give its bits; and as version 6 (dQ from the dS its dK/dV kernel stores,
// into a NaN-filled buffer): dK and dV must be version 3's bits, dQ within the reference's bound; and as version 7 (both
// kernels on wgmma, hd 64 or 128; elsewhere version 3's bits) within the reference's bounds. Before those, wgmma's
// layouts one at a time (test_wgmma_layouts: on a GPU, where the hardware disagrees with llmc/mma.cuh, which element
// each output read). tests/t_attention.sh runs it under the CUDA emulation on the CPU, and on a GPU when one is present.
//
// Tolerance. The inputs q, k, v, dO are bf16 numbers and both sides use exactly those. The kernels keep
// scores, softmax statistics and every accumulation in fp32 (relative errors near 2^-22, fast-math exp2 and
// rsqrt included) and round to bf16 in five places (8 significant bits: a rounding moves x by at most
// u |x|, u = 2^-8):
//   forward:  P~ = exp(S - m) before P~ V (each term of the sum), and the output O
//   backward: P before dV = P^T dO, dS = P (dP - D) before dK = dS^T Q and dQ = dS K, and the outputs
// So each output element x = sum_j a_j b_j (a the rounded factor) is within u (|x| + sum_j |a_j b_j|), the sums
// taken by the reference in double with its exact a_j: for O, a = p, b = v; for dV, a = p, b = dO; for dK,
// a = dS, b = q * scale; for dQ, a = dS, b = k * scale (over the GQA group for dK, dV). The fp32 part gets
// 2^-12 of the same sums, about 100 times its size; for dS = P (dP - D), which cancels (exactly on the first
// row, where O = v_0), of the sums with |dS_j| replaced by p_j (sum_d |dO_d v_jd| + sum_d |dO_d O_d|), the
// magnitudes the fp32 dot products dP and D round at. lse is fp32: within 2^-18 (1 + |lse|). D = rowsum(dO O)
// comes from the kernel's own bf16 O on both sides (the backward's input).
// ALiBi (two causal cases, one with slopes that are not a plain series: 6 heads, and one with documents): the reference adds slope_h * (key -
// query) to the scaled scores in double; the kernels add it in fp32 in the log2 domain, an error below 2^-22 of
// |slope (key - query)| <= 0.5 x 192 in the exponent, far inside the fp32 part of the bounds, which stay as they are.
// Documents (llmc/documents.h's doc, --reset-attention-mask; four cases at the end): query t sees keys doc[t] .. t.
// The reference below takes doc too, and is itself checked against llmc/ref_ops.h's attention_forward (with doc) and
// attention_backward in double (D from the exact O there: every element within 1e-6 of the bf16 bound). The flash
// kernels skip the tiles outside every row's document and mask per element only on the tiles that straddle a start,
// so the starts are put where that matters: inside tiles, on 64-row tile edges (the forward's, dQ's and dK/dV's
// key tiles) and 32-row edges (dK/dV's query tiles), one-token documents (the row sees only itself) at an edge, at
// t = 0, 1 and the last row, many documents of 1 to 12 tokens, rows of a batch with different documents; one
// document per row (doc all 0) must give doc == null's bits. llmc/attention_rowwise.cuh's kernels (the fp32 build's
// attention) run on two of the cases at the same bounds (they round less: only their outputs, to bf16 here).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/attention.cuh"
#include "llmc/attention_rowwise.cuh"
#ifdef USE_CUDNN
#include "llmc/attention_cudnn.cuh"
#endif
#include "llmc/ref_ops.h"
#include "llmc/rope_tables.h"
#include "tests/check.h"

// floatX's unit roundoff (bf16 keeps 8 significant bits, fp16 11) and its subnormal floor: a rounding moves x by at
// most U_X |x| + ETA_X, ETA_X half the spacing of the smallest numbers (fp16: 2^-25, below 2^-14 its numbers are
// multiples of 2^-24; bf16's, 2^-134, is left out). The probabilities and dS of rows with a peaked softmax lie there.
#ifdef ENABLE_FP16
static const double U_X = 1.0 / 2048, ETA_X = 1.0 / 33554432;
#else
static const double U_X = 1.0 / 256, ETA_X = 0.0;
#endif

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double uniform() {  // [0, 1)
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static double normal() { return std::sqrt(-2.0 * std::log(1.0 - uniform())) * std::cos(6.283185307179586 * uniform()); }

static std::vector<floatX> random_x(size_t n, double scale) {
    std::vector<floatX> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_floatX((float)(scale * normal()));
    return h;
}
static std::vector<double> to_double(const std::vector<floatX>& h) {
    std::vector<double> d(h.size());
    for (size_t i = 0; i < h.size(); i++) d[i] = (double)to_float(h[i]);
    return d;
}
template <typename T> static T* upload(const std::vector<T>& h) {
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> static std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// worst |got - want| / bound over elements; a non-finite value of got makes it infinite
static double worst_ratio(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& bound) {
    double w = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const double r = std::fabs(got[i] - want[i]) / bound[i];
        if (!std::isfinite(got[i]) || !(r <= w)) w = std::isfinite(got[i]) ? r : INFINITY;
        if (w == INFINITY) break;
    }
    return w;
}

// The reference in double: O, lse, dQ, dK, dV and, per element, the sums of |terms| of the bounds. doc [B*T] (empty:
// causal) limits query t to keys doc[t] .. t, as llmc/ref_ops.h's attention_forward. D = rowsum(dO O) is taken from
// D_from (the kernel's own O, the backward's input) or, when null, from the reference's own O.
struct Reference {
    std::vector<double> o, o_bnd, lse, lse_bnd, d, d_abs, d_f32, d_eta;  // d_eta: sum_j |b_j| (the floor's factor)
};
static Reference reference(int B, int T, int H, int KV, int hd, const std::vector<double>& slopes,
                           const std::vector<int32_t>& doc, const std::vector<double>& qkv,
                           const std::vector<double>& dout, const std::vector<double>* D_from) {
    const int W = (H + 2 * KV) * hd, group = H / KV;
    const double scale = 1.0 / std::sqrt((double)hd), u = U_X;
    Reference r;
    const size_t n_out = (size_t)B * T * H * hd, n_lse = (size_t)B * H * T, n_d = (size_t)B * T * W;
    r.o.resize(n_out); r.o_bnd.resize(n_out); r.lse.resize(n_lse); r.lse_bnd.resize(n_lse);
    r.d.assign(n_d, 0.0); r.d_abs.assign(n_d, 0.0); r.d_f32.assign(n_d, 0.0); r.d_eta.assign(n_d, 0.0);
    const double f32 = 1.0 / 4096;
    std::vector<double> s(T), p(T), dp(T), mag(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / group;
            const double* base = qkv.data() + (size_t)b * T * W;
            auto Q = [&](int t) { return base + (size_t)t * W + h * hd; };
            auto K = [&](int t) { return base + (size_t)t * W + (H + kh) * hd; };
            auto V = [&](int t) { return base + (size_t)t * W + (H + KV + kh) * hd; };
            for (int t = 0; t < T; t++) {
                const int lo = doc.empty() ? 0 : doc[(size_t)b * T + t];  // the first key the query sees
                double mx = -INFINITY;
                for (int j = lo; j <= t; j++) {
                    double a = 0;
                    for (int d = 0; d < hd; d++) a += Q(t)[d] * K(j)[d];
                    s[j] = a * scale + slopes[h] * (j - t);
                    mx = std::max(mx, s[j]);
                }
                double l = 0;
                for (int j = lo; j <= t; j++) l += (p[j] = std::exp(s[j] - mx));
                for (int j = lo; j <= t; j++) p[j] /= l;
                const size_t li = ((size_t)b * H + h) * T + t;
                r.lse[li] = mx + std::log(l);
                r.lse_bnd[li] = std::ldexp(1.0 + std::fabs(r.lse[li]), -18);
                const size_t orow = ((size_t)b * T + t) * H * hd + (size_t)h * hd;
                for (int d = 0; d < hd; d++) {
                    double a = 0, m = 0, mv = 0;
                    for (int j = lo; j <= t; j++) { a += p[j] * V(j)[d]; m += std::fabs(p[j] * V(j)[d]); mv += std::fabs(V(j)[d]); }
                    r.o[orow + d] = a;
                    r.o_bnd[orow + d] = u * (std::fabs(a) + m) + f32 * m + ETA_X * (mv + 1);
                }
                // backward of this row, D from the kernel's own O (the backward's input)
                const double* dO = dout.data() + orow;
                const double* Ok = (D_from ? D_from->data() : r.o.data()) + orow;
                double D = 0, Dm = 0;
                for (int d = 0; d < hd; d++) { D += dO[d] * Ok[d]; Dm += std::fabs(dO[d] * Ok[d]); }
                for (int j = lo; j <= t; j++) {
                    double a = 0, m = 0;
                    for (int d = 0; d < hd; d++) { a += dO[d] * V(j)[d]; m += std::fabs(dO[d] * V(j)[d]); }
                    dp[j] = p[j] * (a - D);  // dS
                    mag[j] = p[j] * (m + Dm);
                }
                double* dq = r.d.data() + ((size_t)b * T + t) * W + h * hd;
                double* dqa = r.d_abs.data() + ((size_t)b * T + t) * W + h * hd;
                double* dqf = r.d_f32.data() + ((size_t)b * T + t) * W + h * hd;
                double* dqe = r.d_eta.data() + ((size_t)b * T + t) * W + h * hd;
                for (int j = lo; j <= t; j++) {
                    double* dk = r.d.data() + ((size_t)b * T + j) * W + (H + kh) * hd;
                    double* dka = r.d_abs.data() + ((size_t)b * T + j) * W + (H + kh) * hd;
                    double* dkf = r.d_f32.data() + ((size_t)b * T + j) * W + (H + kh) * hd;
                    double* dke = r.d_eta.data() + ((size_t)b * T + j) * W + (H + kh) * hd;
                    double* dv = r.d.data() + ((size_t)b * T + j) * W + (H + KV + kh) * hd;
                    double* dva = r.d_abs.data() + ((size_t)b * T + j) * W + (H + KV + kh) * hd;
                    double* dvf = r.d_f32.data() + ((size_t)b * T + j) * W + (H + KV + kh) * hd;
                    double* dve = r.d_eta.data() + ((size_t)b * T + j) * W + (H + KV + kh) * hd;
                    for (int d = 0; d < hd; d++) {
                        dq[d] += dp[j] * K(j)[d] * scale;
                        dqa[d] += std::fabs(dp[j] * K(j)[d] * scale);
                        dqf[d] += mag[j] * std::fabs(K(j)[d] * scale);
                        dqe[d] += std::fabs(K(j)[d] * scale);
                        dk[d] += dp[j] * Q(t)[d] * scale;
                        dka[d] += std::fabs(dp[j] * Q(t)[d] * scale);
                        dkf[d] += mag[j] * std::fabs(Q(t)[d] * scale);
                        dke[d] += std::fabs(Q(t)[d] * scale);
                        dv[d] += p[j] * dO[d];
                        dva[d] += std::fabs(p[j] * dO[d]);
                        dvf[d] += std::fabs(p[j] * dO[d]);
                        dve[d] += std::fabs(dO[d]);
                    }
                }
            }
        }
    return r;
}

// bitwise equality of two downloads
template <typename T> static size_t count_differ(const std::vector<T>& a, const std::vector<T>& b) {
    size_t n = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
    for (size_t i = 0; i < std::min(a.size(), b.size()); i++) n += memcmp(&a[i], &b[i], sizeof(T)) != 0;
    return n;
}

// impl: 0 the flash kernels of llmc/attention.cuh, 1 cuDNN's (llmc/attention_cudnn.cuh, in a USE_CUDNN build).
// Documents (impl 0 only: the trainer refuses cuDNN with --reset-attention-mask): docs names the layout, doc [B*T] is
// passed to the kernels (and to the reference); rowwise: llmc/attention_rowwise.cuh's kernels checked too, at the
// same bounds (their backward on the flash forward's out and lse, so that D is the same as the reference's).
static void test_case(int B, int T, int H, int KV, int hd, bool alibi = false, int impl = 0, const char* docs = nullptr,
                      const std::vector<int32_t>& doc = {}, bool rowwise = false) {
    char name[160];
    snprintf(name, sizeof(name), "attention%s%s%s B=%d T=%d H=%d KV=%d hd=%d%s", impl ? " cudnn" : "",
             docs ? " docs=" : "", docs ? docs : "", B, T, H, KV, hd, alibi ? " alibi" : "");
    const std::vector<double> slopes = alibi ? alibi_slopes(H) : std::vector<double>(H, 0.0);
    const std::vector<float> slopes_f(slopes.begin(), slopes.end());
    float* d_alibi = alibi ? upload(slopes_f) : nullptr;
    int32_t* d_doc = doc.empty() ? nullptr : upload(doc);
    const int W = (H + 2 * KV) * hd, group = H / KV;
    const double u = U_X, f32 = 1.0 / 4096;
    // q, k of unit variance per element give scores of standard deviation 1.5: peaked and flat rows
    const std::vector<floatX> qkv_h = random_x((size_t)B * T * W, std::sqrt(1.5));
    const std::vector<floatX> dout_h = random_x((size_t)B * T * H * hd, 1.0);
    const std::vector<double> qkv = to_double(qkv_h), dout = to_double(dout_h);
    floatX *d_qkv = upload(qkv_h), *d_dout = upload(dout_h), *d_out, *d_dqkv;
    float *d_lse, *d_dvec;
    cudaCheck(cudaMalloc(&d_out, (size_t)B * T * H * hd * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dqkv, (size_t)B * T * W * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_lse, (size_t)B * H * T * sizeof(float)));
    cudaCheck(cudaMalloc(&d_dvec, (size_t)B * H * T * sizeof(float)));
    const std::string n = name;
    // dqkv is filled with NaN (0xffff) before each backward, so an element left unwritten shows
    std::vector<floatX> dqkv_h, dqkv4_h, dqkv5_h, dqkv6_h, dqkv7_h, out4_h;
    std::vector<float> lse4_h;
    if (impl == 0) {
        // the backward's dK/dV kernels: versions 4 (the next query tile prefetched) and 5 (its 128-key blocks; version 4
        // where T is no multiple of 128) must give version 3's bits
        attention_forward(d_out, d_lse, d_qkv, B, T, H, KV, hd, 0, d_alibi, d_doc);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, d_doc, 3);
        dqkv_h = download(d_dqkv, (size_t)B * T * W);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, d_doc, 4);
        dqkv4_h = download(d_dqkv, (size_t)B * T * W);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, d_doc, 5);
        dqkv5_h = download(d_dqkv, (size_t)B * T * W);
        // version 6: dQ from the dS the dK/dV kernel writes, its buffer NaN-filled (an entry read but never written shows)
        floatX* d_ds;
        cudaCheck(cudaMalloc(&d_ds, (size_t)B * H * T * T * sizeof(floatX)));
        cudaCheck(cudaMemset(d_ds, 0xff, (size_t)B * H * T * T * sizeof(floatX)));
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, d_doc, 6, d_ds);
        dqkv6_h = download(d_dqkv, (size_t)B * T * W);
        cudaCheck(cudaFree(d_ds));
        // the forward's version 4 (wgmma; version 3 where it does not fit), into NaN-filled buffers of its own
        floatX* d_out4;
        float* d_lse4;
        cudaCheck(cudaMalloc(&d_out4, (size_t)B * T * H * hd * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_lse4, (size_t)B * H * T * sizeof(float)));
        cudaCheck(cudaMemset(d_out4, 0xff, (size_t)B * T * H * hd * sizeof(floatX)));
        cudaCheck(cudaMemset(d_lse4, 0xff, (size_t)B * H * T * sizeof(float)));
        attention_forward(d_out4, d_lse4, d_qkv, B, T, H, KV, hd, 0, d_alibi, d_doc, 4);
        // the backward's version 7 (wgmma; version 5 where it does not fit) on version 3's forward
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, d_doc, 7);
        dqkv7_h = download(d_dqkv, (size_t)B * T * W);
        out4_h = download(d_out4, (size_t)B * T * H * hd);
        lse4_h = download(d_lse4, (size_t)B * H * T);
        cudaCheck(cudaFree(d_out4)); cudaCheck(cudaFree(d_lse4));
    } else {
#ifdef USE_CUDNN
        // cuDNN's deterministic backward, run twice: the same bits
        attention_cudnn_forward(d_out, d_lse, d_qkv, B, T, H, KV, hd, 0);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_cudnn_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0);
        dqkv_h = download(d_dqkv, (size_t)B * T * W);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_cudnn_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0);
        dqkv4_h = download(d_dqkv, (size_t)B * T * W);
#endif
    }
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<floatX> out_h = download(d_out, (size_t)B * T * H * hd);
    const std::vector<float> lse_f = download(d_lse, (size_t)B * H * T);
    const std::vector<double> out = to_double(out_h), dqkv = to_double(dqkv_h);
    const std::vector<double> lse(lse_f.begin(), lse_f.end());

    // one document per row (doc all 0) is the plain causal mask: the same bits as doc == null, forward and backward
    const bool single = !doc.empty() && std::all_of(doc.begin(), doc.end(), [](int32_t x) { return x == 0; });
    if (single) {
        floatX* d_out0;
        float* d_lse0;
        cudaCheck(cudaMalloc(&d_out0, (size_t)B * T * H * hd * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_lse0, (size_t)B * H * T * sizeof(float)));
        attention_forward(d_out0, d_lse0, d_qkv, B, T, H, KV, hd, 0, d_alibi);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out0, d_qkv, d_lse0, B, T, H, KV, hd, 0, d_alibi, nullptr, 3);
        const size_t differ = count_differ(download(d_out0, out_h.size()), out_h) +
                              count_differ(download(d_lse0, lse_f.size()), lse_f) +
                              count_differ(download(d_dqkv, dqkv_h.size()), dqkv_h);
        check(differ == 0, n + ": doc all zeros gives doc == null's bits (out, lse, dqkv)", "%zu elements differ", differ);
        cudaCheck(cudaFree(d_out0)); cudaCheck(cudaFree(d_lse0));
    }

    const Reference ref = reference(B, T, H, KV, hd, slopes, doc, qkv, dout, &out);
    if (!doc.empty()) {
        // the reference here against llmc/ref_ops.h's (in double, D from the exact O): the same documents' meaning
        const std::vector<double> slopes_r = slopes;  // ref_ops takes real slopes or null
        std::vector<double> o_e((size_t)B * T * H * hd), att((size_t)B * H * T * T), d_e((size_t)B * T * W);
        attention_forward(o_e.data(), att.data(), qkv.data(), B, T, H, KV, hd, alibi ? slopes_r.data() : nullptr,
                          doc.data());
        attention_backward(d_e.data(), dout.data(), qkv.data(), att.data(), B, T, H, KV, hd);
        const Reference exact = reference(B, T, H, KV, hd, slopes, doc, qkv, dout, nullptr);
        double w = 0;
        for (size_t i = 0; i < o_e.size(); i++)
            w = std::max(w, std::fabs(o_e[i] - exact.o[i]) / (1e-300 + exact.o_bnd[i]));
        for (size_t i = 0; i < d_e.size(); i++)
            w = std::max(w, std::fabs(d_e[i] - exact.d[i]) / (1e-300 + u * exact.d_abs[i] + f32 * exact.d_f32[i]));
        check(w < 1e-6, n + ": this test's double reference is llmc/ref_ops.h's attention with doc",
              "difference %.3g of the bf16 bounds", w);
    }
    std::vector<double> d_bnd(dqkv.size());
    for (size_t i = 0; i < dqkv.size(); i++)
        d_bnd[i] = u * (std::fabs(ref.d[i]) + ref.d_abs[i]) + f32 * ref.d_f32[i] + ETA_X * (ref.d_eta[i] + 1);
    // cuDNN with GQA rounds each query head's dK and dV to bf16 before the group's sum: one more u |x_h| per head,
    // whose sum over the group is at most u sum_j |a_j b_j|
    if (impl == 1 && group > 1)
        for (size_t i = 0; i < dqkv.size(); i++)
            if ((int)(i % W) >= H * hd) d_bnd[i] += u * ref.d_abs[i];
    // the backward of one implementation against the reference, per part of dqkv (q, k, v columns of every row): worst
    // error / bound of dq, dk, dv into e[0..2]
    auto compare_backward = [&](const std::string& who, const std::vector<double>& got_d, double* e) {
        std::vector<double> part[3][3];  // [q, k, v][got, want, bound]
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = 0; c < W; c++) {
                const int k = c < H * hd ? 0 : c < (H + KV) * hd ? 1 : 2;
                const size_t i = r * W + c;
                part[k][0].push_back(got_d[i]);
                part[k][1].push_back(ref.d[i]);
                part[k][2].push_back(d_bnd[i]);
            }
        const char* parts[3] = {"dq", "dk", "dv"};
        for (int k = 0; k < 3; k++) {
            e[k] = worst_ratio(part[k][0], part[k][1], part[k][2]);
            check(e[k] <= 1.0, who + " backward " + parts[k], "error %.3g times the bound", e[k]);
        }
    };
    // forward and backward: worst error / bound of out, lse, dq, dk, dv
    auto compare = [&](const std::string& who, const std::vector<double>& got_out, const std::vector<double>& got_lse,
                       const std::vector<double>& got_d, double* e) {
        e[0] = worst_ratio(got_out, ref.o, ref.o_bnd);
        e[1] = worst_ratio(got_lse, ref.lse, ref.lse_bnd);
        check(e[0] <= 1.0, who + " forward out", "error %.3g times the bound", e[0]);
        check(e[1] <= 1.0, who + " forward lse", "error %.3g times the bound", e[1]);
        compare_backward(who, got_d, e + 2);
    };
    double e[5];
    compare(n, out, lse, dqkv, e);
    const size_t differ = count_differ(dqkv_h, dqkv4_h);
    check(differ == 0, n + (impl ? " backward run twice gives the same bits" : " backward version 4 (prefetching dK/dV) gives version 3's bits"),
          "%zu of %zu elements differ", differ, dqkv_h.size());
    if (impl == 0) {
        // version 6: dK and dV are version 5's (version 4's) arithmetic, so version 3's bits; dQ against the reference
        std::vector<floatX> kv3, kv6;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = H * hd; c < W; c++) kv3.push_back(dqkv_h[r * W + c]), kv6.push_back(dqkv6_h[r * W + c]);
        const size_t differ6 = count_differ(kv3, kv6);
        check(differ6 == 0, n + " backward version 6 (dQ from the stored dS): dK and dV are version 3's bits",
              "%zu of %zu elements differ", differ6, kv3.size());
        double e6[3];
        compare_backward(n + " version 6:", to_double(dqkv6_h), e6);
        // the forward's version 4 against the reference at version 3's bounds (its products are wgmma's, its tiles 128
        // keys: other roundings, so not version 3's bits); where it does not fit, the launcher runs version 3
        if (attention_forward_wgmma_fits(T, hd)) {
            double e4[2];
            e4[0] = worst_ratio(to_double(out4_h), ref.o, ref.o_bnd);
            e4[1] = worst_ratio(std::vector<double>(lse4_h.begin(), lse4_h.end()), ref.lse, ref.lse_bnd);
            check(e4[0] <= 1.0, n + " forward version 4 (wgmma) out", "error %.3g times the bound", e4[0]);
            check(e4[1] <= 1.0, n + " forward version 4 (wgmma) lse", "error %.3g times the bound", e4[1]);
            printf("  %s version 4: error / bound: out %.3g lse %.3g\n", name, e4[0], e4[1]);
        } else {
            const size_t differ4 = count_differ(out_h, out4_h) + count_differ(lse_f, lse4_h);
            check(differ4 == 0, n + " forward version 4 (version 3 at this shape) gives version 3's bits",
                  "%zu elements differ", differ4);
        }
        // the backward's version 7 against the reference (in the emulation it gives version 3's bits, its sums running
        // in version 3's order; a GPU's wgmma may round them otherwise); where it does not fit, version 5 runs
        if (attention_backward_wgmma_fits(hd)) {
            double e7[3];
            compare_backward(n + " version 7 (wgmma):", to_double(dqkv7_h), e7);
            printf("  %s version 7: error / bound: dq %.3g dk %.3g dv %.3g\n", name, e7[0], e7[1], e7[2]);
        } else {
            const size_t differ7 = count_differ(dqkv_h, dqkv7_h);
            check(differ7 == 0, n + " backward version 7 (version 5 at this head dim) gives version 3's bits",
                  "%zu of %zu elements differ", differ7, dqkv_h.size());
        }
        const size_t differ5 = count_differ(dqkv_h, dqkv5_h);
        check(differ5 == 0, n + (T % 128 == 0 ? " backward version 5 (128-key dK/dV blocks) gives version 3's bits"
                                              : " backward version 5 (version 4 at this T) gives version 3's bits"),
              "%zu of %zu elements differ", differ5, dqkv_h.size());
    }
    printf("  %s: error / bound: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g\n", name, e[0], e[1], e[2], e[3], e[4]);
    if (rowwise) {
        // the CUDA-core kernels of the fp32 build, here on bf16 tensors; dqkv filled with NaN first, as above
        floatX* d_out_r;
        float* d_lse_r;
        cudaCheck(cudaMalloc(&d_out_r, (size_t)B * T * H * hd * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_lse_r, (size_t)B * H * T * sizeof(float)));
        attention_rowwise_forward(d_out_r, d_lse_r, d_qkv, B, T, H, KV, hd, 0, d_alibi, d_doc);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(floatX)));
        attention_rowwise_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, d_doc);
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<float> lse_r = download(d_lse_r, (size_t)B * H * T);
        compare(n + " rowwise", to_double(download(d_out_r, out_h.size())),
                std::vector<double>(lse_r.begin(), lse_r.end()), to_double(download(d_dqkv, dqkv_h.size())), e);
        printf("  %s rowwise: error / bound: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g\n", name, e[0], e[1], e[2], e[3],
               e[4]);
        cudaCheck(cudaFree(d_out_r)); cudaCheck(cudaFree(d_lse_r));
    }
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_dvec));
    if (d_alibi) cudaCheck(cudaFree(d_alibi));
    if (d_doc) cudaCheck(cudaFree(d_doc));
}

// doc [B*T] of rows cut into documents at the given starts (ascending, after 0): doc[t] = the last start <= t
static std::vector<int32_t> doc_from_starts(int B, int T, const std::vector<std::vector<int>>& starts) {
    std::vector<int32_t> doc((size_t)B * T);
    for (int b = 0; b < B; b++) {
        size_t k = 0;
        int32_t cur = 0;
        for (int t = 0; t < T; t++) {
            if (k < starts[b].size() && starts[b][k] == t) cur = starts[b][k++];
            doc[(size_t)b * T + t] = cur;
        }
    }
    return doc;
}
// rows of documents of random lengths 1 .. max_len (each row its own)
static std::vector<int32_t> short_docs(int B, int T, int max_len) {
    std::vector<std::vector<int>> starts(B);
    for (int b = 0; b < B; b++)
        for (int t = 1 + (int)(uniform() * max_len); t < T; t += 1 + (int)(uniform() * max_len)) starts[b].push_back(t);
    return doc_from_starts(B, T, starts);
}

// ---- wgmma's layouts, one at a time (llmc/mma.cuh documents them; versions 4 and 7 rest on them) --------------------
// One warpgroup computes D [64 x N] = A [64 x 16] B [16 x N] once (N = 64 or 128, the two instruction widths the
// kernels use), where one operand is the probe and the other a selector of 0s and 1s, so that D shows which element
// of the probe each output read. The operands hold K = 128 columns (two 64-column swizzled tiles, as head dim 128), and
// the product reads the 16 of k-slice s (0..7), its descriptors stepped as the kernels step them: a K-major operand's
// start by 32 bytes per slice within a tile and by a tile's bytes from slice 4 on, an MN-major B's by 2048 bytes (16
// rows of 128 bytes) with LBO the distance between its 64-column tiles (used at N = 128). The A probes use B[k][n] =
// (n % 16 == k % 16), so D[i][n] = A[i][16 s + n % 16]; the B probes A[i][k] = (i % 16 == k % 16), so D[i][n] =
// B[16 s + i % 16][n]. The probe's elements hold their own row index, then (a second run) their column index: small
// integers, exact in floatX and fp32. Modes: 0 A from shared memory (K-major), 1 B K-major, 2 B MN-major (transposed),
// 3 A from registers (the m16n8k16 A fragment; its B is the selector at slice s). In the emulation this checks the
// emulation against llmc/mma.cuh's text; on a GPU (sm_90a) it checks that text against the hardware, and a mismatch
// names the element each output read instead.
static const char* const WGMMA_PROBES[4] = {"A from shared memory (K-major)", "B from shared memory (K-major)",
                                             "B from shared memory (MN-major, transposed)", "A from registers"};
static const int WGMMA_PROBE_K = 128;
__global__ void __launch_bounds__(128) wgmma_layout_probe_kernel(float* out, int mode, int which, int slice, int n) {
    DYNAMIC_SMEM(sm);
    const int K = WGMMA_PROBE_K;
    floatX* tA = reinterpret_cast<floatX*>(smem_align1024(sm));  // A [64][K]: K / 64 tiles of [64][64]
    floatX* tB = tA + 64 * K;  // B [K][n]: K-major, K / 64 tiles of [n][64]; MN-major, n / 64 tiles of [K][64]
    auto swz = [](int r, int c) { return r * 64 + ((c / 8) ^ (r % 8)) * 8 + c % 8; };  // in a [rows][64] tile
    const bool probe_a = mode == 0 || mode == 3;
    auto a_val = [&](int i, int k) { return probe_a ? (float)(which ? k : i) : (float)(i % 16 == k % 16); };
    auto b_val = [&](int k, int c) { return probe_a ? (float)(c % 16 == k % 16) : (float)(which ? c : k); };
    for (int e = threadIdx.x; e < 64 * K; e += 128) {
        const int i = e / K, k = e % K;
        tA[(k / 64) * 64 * 64 + swz(i, k % 64)] = to_floatX(a_val(i, k));
    }
    for (int e = threadIdx.x; e < K * n; e += 128) {
        const int k = e / n, c = e % n;
        if (mode == 2) tB[(c / 64) * K * 64 + swz(k, c % 64)] = to_floatX(b_val(k, c));  // row k, column c
        else tB[(k / 64) * n * 64 + swz(c, k % 64)] = to_floatX(b_val(k, c));            // row c (N), column k
    }
    fence_proxy_async();
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    uint32_t a[1][4];
    for (int h = 0; h < 4; h++) {  // a0 (row g, k 2q..) a1 (row g + 8) a2 (row g, k 2q + 8..) a3 (row g + 8, k 2q + 8..)
        const int i = 16 * warp + g + 8 * (h % 2), k = 16 * slice + 2 * q + 8 * (h / 2);
        a[0][h] = pack_x2(a_val(i, k), a_val(i, k + 1));
    }
    float d[16][4];
    for (int j = 0; j < 16; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    const char *ca = reinterpret_cast<const char*>(tA), *cb = reinterpret_cast<const char*>(tB);
    const int kstep = (slice % 4) * 32;  // within a 64-column tile; then whole tiles
    const uint64_t da = wgmma_desc(ca + kstep + (slice / 4) * 64 * 128, 16, ATT_SW_SBO);
    const uint64_t db = mode == 2 ? wgmma_desc(cb + slice * 2048, K * 128, ATT_SW_SBO)
                                  : wgmma_desc(cb + kstep + (slice / 4) * n * 128, 16, ATT_SW_SBO);
    wgmma_fence_operands(d);
    wgmma_fence_operands(a);
    wgmma_fence();
    if (n == 64) {
        if (mode == 3) wgmma_rs_n64<0>(&d[0][0], a[0], db, 0);
        else if (mode == 2) wgmma_ss_n64<1>(&d[0][0], da, db, 0);
        else wgmma_ss_n64<0>(&d[0][0], da, db, 0);
    } else {
        if (mode == 3) wgmma_rs_n128<0>(&d[0][0], a[0], db, 0);
        else if (mode == 2) wgmma_ss_n128<1>(&d[0][0], da, db, 0);
        else wgmma_ss_n128<0>(&d[0][0], da, db, 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(d);
    wgmma_fence_operands(a);
    for (int j = 0; j < n / 8; j++)
        for (int e = 0; e < 4; e++) out[(16 * warp + g + 8 * (e / 2)) * n + 8 * j + 2 * q + e % 2] = d[j][e];
}
static void test_wgmma_layouts() {
    if (!wgmma_supported()) {
        printf("  wgmma layouts: not run (the code this device runs has no wgmma)\n");
        return;
    }
    float* d_out;
    cudaCheck(cudaMalloc(&d_out, 64 * 128 * sizeof(float)));
    const int smem = (64 + 128) * WGMMA_PROBE_K * (int)sizeof(floatX) + 1024;
    cudaCheck(cudaFuncSetAttribute(wgmma_layout_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int mode = 0; mode < 4; mode++)
        for (int n : {64, 128}) {
            std::string first;
            int bad = 0, bad_slices = 0;
            for (int slice = 0; slice < WGMMA_PROBE_K / 16; slice++) {
                std::vector<float> got[2];
                for (int which = 0; which < 2; which++) {
                    cudaCheck(cudaMemset(d_out, 0xff, 64 * 128 * sizeof(float)));
                    wgmma_layout_probe_kernel<<<1, 128, smem>>>(d_out, mode, which, slice, n);
                    cudaCheck(cudaGetLastError());
                    got[which] = download(d_out, (size_t)64 * n);
                }
                const bool probe_a = mode == 0 || mode == 3;
                int bad_here = 0;
                for (int i = 0; i < 64; i++)
                    for (int c = 0; c < n; c++) {
                        // the probe's (row, column) that D[i][c] should have read
                        const int want_r = probe_a ? i : 16 * slice + i % 16, want_c = probe_a ? 16 * slice + c % 16 : c;
                        const float r = got[0][(size_t)i * n + c], col = got[1][(size_t)i * n + c];
                        if (r == (float)want_r && col == (float)want_c) continue;
                        if (bad_here++ == 0 && bad_slices++ < 3) {
                            char m[200];
                            snprintf(m, sizeof(m), "%sslice %d: D[%d][%d] read %s (%g, %g), not (%d, %d)",
                                     first.empty() ? "" : "; ", slice, i, c, probe_a ? "A's (row, k)" : "B's (k, n)", r,
                                     col, want_r, want_c);
                            first += m;
                        }
                    }
                bad += bad_here;
            }
            check(bad == 0, std::string("wgmma layout: ") + WGMMA_PROBES[mode] + ", N = " + std::to_string(n) +
                                ", k-slices 0-7 of two 64-column tiles, read as llmc/mma.cuh documents it",
                  "%d of %d outputs differ in %d slices: %s", bad, 64 * n * WGMMA_PROBE_K / 16, bad_slices, first.c_str());
        }
    cudaCheck(cudaFree(d_out));
}

// the launcher on T = 96 (not a multiple of the 64-row tile), in a child: exit status 1, T named on stderr
static void test_refuses_partial_tile() {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        attention_forward(nullptr, nullptr, nullptr, 1, 96, 2, 2, 64, 0);
        _exit(0);
    }
    close(fds[1]);
    std::string msg;
    char buf[256];
    for (ssize_t k; (k = read(fds[0], buf, sizeof(buf))) > 0;) msg.append(buf, (size_t)k);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    check(rc == 1 && msg.find("T=96") != std::string::npos, "attention refuses T=96 (not a multiple of 64)",
          "exit status %d, message '%s'", rc, msg.c_str());
}

int main(int argc, char** argv) {
#ifdef USE_CUDNN
    if (argc > 1 && strcmp(argv[1], "cudnn") == 0) {  // one cuDNN case alone (tests/t_attention.sh's test hooks)
        cuda_require_device();
        test_case(1, 128, 4, 2, 64, false, 1);
        return g_failed ? 1 : 0;
    }
#endif
    (void)argc, (void)argv;
    test_refuses_partial_tile();  // before any CUDA call: the child process touches no device
    cuda_require_device();
#ifdef USE_CUDNN
    // cuDNN's attention through the graph of llmc/attention_cudnn.cuh (in the emulation: the graph interpreted, so
    // these check what the graph means), at the same tolerances: it rounds to bf16 in the same places or fewer (P before
    // P V and P^T dO, dS before dS^T Q, not before dS K), and with GQA each query head's dK and dV before the group's
    // sum, which the bound of those two adds. First: on a GPU, a fault in one of our own kernels' first runs (the wgmma
    // versions) cannot hide cuDNN's answer.
    test_case(2, 128, 2, 2, 64, false, 1);   // MHA
    test_case(1, 192, 4, 1, 64, false, 1);   // MQA
    test_case(2, 192, 4, 2, 80, false, 1);   // GQA, head dim 80
    test_case(1, 128, 4, 2, 128, false, 1);  // GQA, head dim 128
    test_case(1, 100, 2, 1, 64, false, 1);   // a length that is no multiple of 64 (cuDNN takes any)
#endif
    test_wgmma_layouts();  // before the kernels that rest on them (after cuDNN's, which a fault here would hide)
    test_case(2, 128, 2, 2, 64);   // MHA, 2 tiles
    test_case(1, 192, 4, 1, 64);   // MQA, 3 tiles (odd: the last tile in the second buffer)
    test_case(2, 192, 4, 2, 80);   // GQA, head dim 80
    test_case(1, 192, 6, 3, 64, true);  // ALiBi, 6 heads (the 4-head series, then 2 of the 8-head one), GQA, 3 tiles
    test_case(1, 128, 4, 2, 128);  // GQA, head dim 128
    test_case(1, 128, 4, 4, 128, true);  // ALiBi, head dim 128 (Baichuan2-13B's)
    test_case(1, 384, 2, 1, 64);   // MQA, 3 blocks of 128 keys (version 5: the last block's tiles in the second buffer)
    // documents (llmc/documents.h, --reset-attention-mask): doc from each row's document starts. Flash (and rowwise in
    // the first case) against the reference that llmc/ref_ops.h's attention with doc is checked equal to. Tiles are
    // 64 keys (forward, dQ) and 64 keys x 32 queries (dK/dV): starts inside tiles, on 64- and 32-row edges, one-token
    // documents (the row sees only itself) at an edge, at t = 0 and 1, and at the last row; rows of a batch differ
    test_case(2, 256, 4, 2, 64, false, 0, "mixed",  // GQA
              doc_from_starts(2, 256, {{37, 64, 65, 96, 150, 255}, {1, 2, 20, 128, 129, 190, 191, 192}}), true);
    test_case(2, 192, 2, 2, 80, false, 0, "short", short_docs(2, 192, 12));  // MHA: many documents of 1 to 12 tokens
    test_case(2, 128, 2, 1, 64, false, 0, "one", doc_from_starts(2, 128, {{}, {}}));  // MQA: one document = causal
    test_case(1, 256, 4, 1, 128, true, 0, "edges",  // MQA, ALiBi: the bias counts from the query, not the doc start
              doc_from_starts(1, 256, {{64, 100, 128, 129, 192, 230}}), true);
    return g_failed ? 1 : 0;
}
