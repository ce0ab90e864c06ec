// tests/test_attention.cu: the tensor-core flash attention of llmc/attention.cuh (the bf16 kernels the trainer
// runs) against attention in double precision computed on the host from the same bf16 inputs, forward (out,
// lse) and backward (dq, dk, dv), per element at a tolerance set by the kernels' bf16 roundings (below).
// Shapes: head dims 64, 80 and 128; GQA and MQA; odd and even numbers of 64-row tiles (the pipelined kernels
// alternate two buffers); batch 2. The kernels take only T a multiple of 64 (the trainer refuses other
// lengths at -t): a child process checks that the launcher refuses T = 96 with exit status 1 and a message
// naming T. The backward runs with both dK/dV kernels (versions 3 and 4 of llmc/attention.cuh): version 3 is checked
// against the reference, version 4 must give its bits. tests/t_attention.sh runs it under the CUDA emulation on the CPU, and on a GPU when one is present.
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
// ALiBi (two cases, one with slopes that are not a plain series: 6 heads): the reference adds slope_h * (key -
// query) to the scaled scores in double; the kernels add it in fp32 in the log2 domain, an error below 2^-22 of
// |slope (key - query)| <= 0.5 x 192 in the exponent, far inside the fp32 part of the bounds, which stay as they are.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/attention.cuh"
#ifdef USE_CUDNN
#include "llmc/attention_cudnn.cuh"
#endif
#include "llmc/rope_tables.h"
#include "tests/check.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double uniform() {  // [0, 1)
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static double normal() { return std::sqrt(-2.0 * std::log(1.0 - uniform())) * std::cos(6.283185307179586 * uniform()); }

static std::vector<__nv_bfloat16> random_bf16(size_t n, double scale) {
    std::vector<__nv_bfloat16> h(n);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16((float)(scale * normal()));
    return h;
}
static std::vector<double> to_double(const std::vector<__nv_bfloat16>& h) {
    std::vector<double> d(h.size());
    for (size_t i = 0; i < h.size(); i++) d[i] = (double)__bfloat162float(h[i]);
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

// impl: 0 the flash kernels of llmc/attention.cuh, 1 cuDNN's (llmc/attention_cudnn.cuh, in a USE_CUDNN build)
static void test_case(int B, int T, int H, int KV, int hd, bool alibi = false, int impl = 0) {
    char name[128];
    snprintf(name, sizeof(name), "attention%s B=%d T=%d H=%d KV=%d hd=%d%s", impl ? " cudnn" : "", B, T, H, KV, hd,
             alibi ? " alibi" : "");
    const std::vector<double> slopes = alibi ? alibi_slopes(H) : std::vector<double>(H, 0.0);
    const std::vector<float> slopes_f(slopes.begin(), slopes.end());
    float* d_alibi = alibi ? upload(slopes_f) : nullptr;
    const int W = (H + 2 * KV) * hd, group = H / KV;
    const double scale = 1.0 / std::sqrt((double)hd), u = 1.0 / 256, f32 = 1.0 / 4096;
    // q, k of unit variance per element give scores of standard deviation 1.5: peaked and flat rows
    const std::vector<__nv_bfloat16> qkv_h = random_bf16((size_t)B * T * W, std::sqrt(1.5));
    const std::vector<__nv_bfloat16> dout_h = random_bf16((size_t)B * T * H * hd, 1.0);
    const std::vector<double> qkv = to_double(qkv_h), dout = to_double(dout_h);
    __nv_bfloat16 *d_qkv = upload(qkv_h), *d_dout = upload(dout_h), *d_out, *d_dqkv;
    float *d_lse, *d_dvec;
    cudaCheck(cudaMalloc(&d_out, (size_t)B * T * H * hd * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&d_dqkv, (size_t)B * T * W * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&d_lse, (size_t)B * H * T * sizeof(float)));
    cudaCheck(cudaMalloc(&d_dvec, (size_t)B * H * T * sizeof(float)));
    // dqkv is filled with NaN (0xffff) before each backward, so an element left unwritten shows
    std::vector<__nv_bfloat16> dqkv_h, dqkv4_h;
    if (impl == 0) {
        // the backward's two dK/dV kernels: version 4 (the next query tile prefetched) must give version 3's bits
        attention_forward(d_out, d_lse, d_qkv, B, T, H, KV, hd, 0, d_alibi);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(__nv_bfloat16)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, 3);
        dqkv_h = download(d_dqkv, (size_t)B * T * W);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(__nv_bfloat16)));
        attention_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0, d_alibi, 4);
        dqkv4_h = download(d_dqkv, (size_t)B * T * W);
    } else {
#ifdef USE_CUDNN
        // cuDNN's deterministic backward, run twice: the same bits
        attention_cudnn_forward(d_out, d_lse, d_qkv, B, T, H, KV, hd, 0);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(__nv_bfloat16)));
        attention_cudnn_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0);
        dqkv_h = download(d_dqkv, (size_t)B * T * W);
        cudaCheck(cudaMemset(d_dqkv, 0xff, (size_t)B * T * W * sizeof(__nv_bfloat16)));
        attention_cudnn_backward(d_dqkv, d_dvec, d_dout, d_out, d_qkv, d_lse, B, T, H, KV, hd, 0);
        dqkv4_h = download(d_dqkv, (size_t)B * T * W);
#endif
    }
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<__nv_bfloat16> out_h = download(d_out, (size_t)B * T * H * hd);
    const std::vector<float> lse_f = download(d_lse, (size_t)B * H * T);
    const std::vector<double> out = to_double(out_h), dqkv = to_double(dqkv_h);
    const std::vector<double> lse(lse_f.begin(), lse_f.end());

    // the reference in double: O, lse, dQ, dK, dV and, per element, the sums of |terms| of the bounds
    std::vector<double> o_ref(out.size()), o_bnd(out.size()), lse_ref(lse.size()), lse_bnd(lse.size());
    std::vector<double> d_ref(dqkv.size(), 0.0), d_abs(dqkv.size(), 0.0), d_f32(dqkv.size(), 0.0);
    std::vector<double> s(T), p(T), dp(T), mag(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / group;
            const double* base = qkv.data() + (size_t)b * T * W;
            auto Q = [&](int t) { return base + (size_t)t * W + h * hd; };
            auto K = [&](int t) { return base + (size_t)t * W + (H + kh) * hd; };
            auto V = [&](int t) { return base + (size_t)t * W + (H + KV + kh) * hd; };
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    double a = 0;
                    for (int d = 0; d < hd; d++) a += Q(t)[d] * K(j)[d];
                    s[j] = a * scale + slopes[h] * (j - t);
                    mx = std::max(mx, s[j]);
                }
                double l = 0;
                for (int j = 0; j <= t; j++) l += (p[j] = std::exp(s[j] - mx));
                for (int j = 0; j <= t; j++) p[j] /= l;
                const size_t li = ((size_t)b * H + h) * T + t;
                lse_ref[li] = mx + std::log(l);
                lse_bnd[li] = std::ldexp(1.0 + std::fabs(lse_ref[li]), -18);
                const size_t orow = ((size_t)b * T + t) * H * hd + (size_t)h * hd;
                for (int d = 0; d < hd; d++) {
                    double a = 0, m = 0;
                    for (int j = 0; j <= t; j++) { a += p[j] * V(j)[d]; m += std::fabs(p[j] * V(j)[d]); }
                    o_ref[orow + d] = a;
                    o_bnd[orow + d] = u * (std::fabs(a) + m) + f32 * m;
                }
                // backward of this row, D from the kernel's own O (the backward's input)
                const double* dO = dout.data() + orow;
                double D = 0, Dm = 0;
                for (int d = 0; d < hd; d++) { D += dO[d] * out[orow + d]; Dm += std::fabs(dO[d] * out[orow + d]); }
                for (int j = 0; j <= t; j++) {
                    double a = 0, m = 0;
                    for (int d = 0; d < hd; d++) { a += dO[d] * V(j)[d]; m += std::fabs(dO[d] * V(j)[d]); }
                    dp[j] = p[j] * (a - D);  // dS
                    mag[j] = p[j] * (m + Dm);
                }
                double* dq = d_ref.data() + ((size_t)b * T + t) * W + h * hd;
                double* dqa = d_abs.data() + ((size_t)b * T + t) * W + h * hd;
                double* dqf = d_f32.data() + ((size_t)b * T + t) * W + h * hd;
                for (int j = 0; j <= t; j++) {
                    double* dk = d_ref.data() + ((size_t)b * T + j) * W + (H + kh) * hd;
                    double* dka = d_abs.data() + ((size_t)b * T + j) * W + (H + kh) * hd;
                    double* dkf = d_f32.data() + ((size_t)b * T + j) * W + (H + kh) * hd;
                    double* dv = d_ref.data() + ((size_t)b * T + j) * W + (H + KV + kh) * hd;
                    double* dva = d_abs.data() + ((size_t)b * T + j) * W + (H + KV + kh) * hd;
                    double* dvf = d_f32.data() + ((size_t)b * T + j) * W + (H + KV + kh) * hd;
                    for (int d = 0; d < hd; d++) {
                        dq[d] += dp[j] * K(j)[d] * scale;
                        dqa[d] += std::fabs(dp[j] * K(j)[d] * scale);
                        dqf[d] += mag[j] * std::fabs(K(j)[d] * scale);
                        dk[d] += dp[j] * Q(t)[d] * scale;
                        dka[d] += std::fabs(dp[j] * Q(t)[d] * scale);
                        dkf[d] += mag[j] * std::fabs(Q(t)[d] * scale);
                        dv[d] += p[j] * dO[d];
                        dva[d] += std::fabs(p[j] * dO[d]);
                        dvf[d] += std::fabs(p[j] * dO[d]);
                    }
                }
            }
        }
    std::vector<double> d_bnd(dqkv.size());
    for (size_t i = 0; i < dqkv.size(); i++) d_bnd[i] = u * (std::fabs(d_ref[i]) + d_abs[i]) + f32 * d_f32[i];
    // cuDNN with GQA rounds each query head's dK and dV to bf16 before the group's sum: one more u |x_h| per head,
    // whose sum over the group is at most u sum_j |a_j b_j|
    if (impl == 1 && group > 1)
        for (size_t i = 0; i < dqkv.size(); i++)
            if ((int)(i % W) >= H * hd) d_bnd[i] += u * d_abs[i];
    const double e_o = worst_ratio(out, o_ref, o_bnd), e_l = worst_ratio(lse, lse_ref, lse_bnd);
    // the backward per part of dqkv: q, k, v columns of every row
    std::vector<double> part[3][3];  // [q, k, v][got, want, bound]
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int c = 0; c < W; c++) {
            const int k = c < H * hd ? 0 : c < (H + KV) * hd ? 1 : 2;
            const size_t i = r * W + c;
            part[k][0].push_back(dqkv[i]);
            part[k][1].push_back(d_ref[i]);
            part[k][2].push_back(d_bnd[i]);
        }
    const std::string n = name;
    check(e_o <= 1.0, n + " forward out", "error %.3g times the bf16 bound", e_o);
    check(e_l <= 1.0, n + " forward lse", "error %.3g times the bound", e_l);
    const char* parts[3] = {"dq", "dk", "dv"};
    double e_b[3];
    for (int k = 0; k < 3; k++) {
        e_b[k] = worst_ratio(part[k][0], part[k][1], part[k][2]);
        check(e_b[k] <= 1.0, n + " backward " + parts[k], "error %.3g times the bf16 bound", e_b[k]);
    }
    size_t differ = 0;
    for (size_t i = 0; i < dqkv_h.size(); i++)
        differ += memcmp(&dqkv_h[i], &dqkv4_h[i], sizeof(__nv_bfloat16)) != 0;
    check(differ == 0, n + (impl ? " backward run twice gives the same bits" : " backward version 4 (prefetching dK/dV) gives version 3's bits"),
          "%zu of %zu elements differ", differ, dqkv_h.size());
    printf("  %s: error / bound: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g\n", name, e_o, e_l, e_b[0], e_b[1], e_b[2]);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_dvec));
    if (d_alibi) cudaCheck(cudaFree(d_alibi));
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
    test_case(2, 128, 2, 2, 64);   // MHA, 2 tiles
    test_case(1, 192, 4, 1, 64);   // MQA, 3 tiles (odd: the last tile in the second buffer)
    test_case(2, 192, 4, 2, 80);   // GQA, head dim 80
    test_case(1, 192, 6, 3, 64, true);  // ALiBi, 6 heads (the 4-head series, then 2 of the 8-head one), GQA, 3 tiles
    test_case(1, 128, 4, 2, 128);  // GQA, head dim 128
    test_case(1, 128, 4, 4, 128, true);  // ALiBi, head dim 128 (Baichuan2-13B's)
#ifdef USE_CUDNN
    // cuDNN's attention through the graph of llmc/attention_cudnn.cuh (in the emulation: the graph interpreted, so
    // these check what the graph means), at the same tolerances: it rounds to bf16 in the same places or fewer (P before
    // P V and P^T dO, dS before dS^T Q, not before dS K), and with GQA each query head's dK and dV before the group's
    // sum, which the bound of those two adds
    test_case(2, 128, 2, 2, 64, false, 1);   // MHA
    test_case(1, 192, 4, 1, 64, false, 1);   // MQA
    test_case(2, 192, 4, 2, 80, false, 1);   // GQA, head dim 80
    test_case(1, 128, 4, 2, 128, false, 1);  // GQA, head dim 128
    test_case(1, 100, 2, 1, 64, false, 1);   // a length that is no multiple of 64 (cuDNN takes any)
#endif
    return g_failed ? 1 : 0;
}
