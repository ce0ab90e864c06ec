// tests/test_matmul_emu.cu: llmc/matmul.cuh's heuristic cache and epilogue fallback, run on the CPU against the
// host emulation of CUDA and cuBLASLt (tests/cuda_emu; tests/t_matmul_emulated.sh builds it with g++ in the
// bf16 and the fp32 build). Emulation only: it reads the emulation's heuristic counter and switches its
// heuristic off per epilogue with EMU_LT_NO_ALGO.
//
// The five products of a linear layer at one small shape (N = 64 rows, IC = 48, OC = 40), each three times:
//   1. out = inp W^T + bias          BIAS epilogue
//   2. out = inp W^T                 default epilogue
//   3. dinp = dout W                 default
//   4. dW += dout^T inp; dbias += column sums of dout        BGRADB, floatX dW
//   5. dW32 += dout^T inp            default, fp32 dW (the LM head's form)
// 4 and 5 also in the write mode of a step's first micro-batch (accumulate false: beta 0, the bias stored), from
// gradients filled with NaN: bitwise the accumulating products from zeros, with the epilogue and with the fallback.
// once with every epilogue available and once with EMU_LT_NO_ALGO=BIAS,BGRADB, where matmul.cuh must fall
// back to the default epilogue and its own kernels. Checks: each result against a double-precision host
// reference; the fallback's results against the epilogue path's (the GEMMs bitwise, the epilogue's work
// within the build's rounding); the heuristic asked once per distinct key, the same count after one pass and
// after three: 5 keys with the epilogues (the five calls differ in epilogue, shape, transposes or output
// type); without them 1 and 4 get "none" answers and fall back to the default epilogue: 1 then shares 2's
// key, 4 adds its shape's default key, a sixth, in the bf16 build; in the fp32 build floatX is fp32, so that
// key is 5's and the count stays 5.
//
// The GELU epilogues (train_gpt --gelu-fusion on), in two parts:
//   A. the emulated cuBLASLt itself, called directly at m = 40 rows, n = 64 columns, k = 48, against a double-precision
//      host computation of what cuBLASLt documents: GELU_AUX_BIAS and GELU_AUX (aux = the pre-activation rounded to
//      D's type, D = the tanh-approximation gelu of the fp32 value, rounded once), DGELU and DGELU_BGRAD (D = the
//      product times gelu' of the aux matrix, rounded once; the bias gradient the sum over each row of D before that
//      rounding, stored), with the aux matrix's leading dimension 48, not its 40 rows (the rows in between untouched);
//      and the calls cuBLASLt refuses: an aux leading dimension that is not a multiple of 8, or below the rows; no aux
//      pointer; an aux type other than D's; GELU_AUX_BIAS without a bias pointer (each INVALID_VALUE); EMU_LT_NO_ALGO
//      naming the epilogue (no algorithm, NOT_SUPPORTED).
//   B. llmc/matmul.cuh's matmul_forward_gelu and matmul_backward_input_dgelu at the linear layer's shape, with and
//      without a bias: against the host reference; the aux matrix bitwise matmul_forward's output (the same fp32 value,
//      rounded once); act and dpre against the unfused path (matmul_forward + gelu_forward, matmul_backward_input +
//      gelu_backward of llmc/mlp_act.cuh) within the one rounding that differs; the bias gradient added into dbias;
//      and with EMU_LT_NO_ALGO naming the GELU epilogues both return false and write nothing.
// Per-element tolerances of part A, for a value rounded once to floatX (unit roundoff u: 2^-8 in bf16, 2^-24 in
// fp32): u |ref| for the rounding, plus 2^-16 times the sum of |terms| behind the value for the emulation's fp32
// arithmetic against double (48 products accumulated in fp32 err by at most 48 * 2^-24 < 2^-16 of their absolute
// sum; gelu's slope is at most 1.13, gelu' of the aux, with tanhf, within a few fp32 ulps).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>
#include "llmc/matmul.cuh"
#include "llmc/matmul_algos.cuh"
#include "llmc/mlp_act.cuh"
#include "tests/check.h"
#include "tests/device_io.h"

static const int N = 64, IC = 48, OC = 40, PASSES = 3;

// deterministic values in [-1, 1), rounded to floatX so that host and device see the same numbers
static std::vector<float> make_values(size_t n, uint32_t seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = to_float(to_floatX((float)((seed >> 8) * (2.0 / 16777216.0) - 1.0)));
    }
    return v;
}



struct Results {
    std::vector<float> out_bias, out, dinp, dw, dbias, dw32;
    long heuristic_first, heuristic_all;  // heuristic calls after the first pass, after all passes
    std::vector<int> chosen;              // each key's algorithm (--gemm-algos), in the order of first calls
    std::vector<std::string> how;         // and how it was chosen: heuristic, tuned, file
    std::vector<uint64_t> algo_id;        // and that algorithm's number (the emulated heuristic's, in data[0])
};

struct Inputs {
    std::vector<float> inp, w, bias, dout, dw0, dbias0;  // [N,IC] [OC,IC] [OC] [N,OC] [OC,IC] [OC]
};

// mode and file: --gemm-algos (FILE read for GEMM_ALGOS_FILE; under GEMM_ALGOS_TUNE the choices written to it).
// write: the gradients start as NaN (not x.dw0, x.dbias0) and products 4 and 5 write them (accumulate false).
static Results run_products(const Inputs& x, int passes = PASSES, GemmAlgoMode mode = GEMM_ALGOS_HEURISTIC,
                            const std::string& file = "", bool write = false) {
    MatmulContext mm;
    matmul_init(&mm, OC);
    if (mode == GEMM_ALGOS_FILE) mm.gemm_algos = gemm_algos_parse(file);
    mm.gemm_algos.mode = mode;
    floatX *inp = upload<floatX>(x.inp), *w = upload<floatX>(x.w), *bias = upload<floatX>(x.bias),
           *dout = upload<floatX>(x.dout), *dw = upload<floatX>(x.dw0), *dbias = upload<floatX>(x.dbias0);
    float* dw32 = upload<float>(x.dw0);
    const floatX *dw0 = upload<floatX>(x.dw0), *dbias0 = upload<floatX>(x.dbias0);
    const float* dw32_0 = upload<float>(x.dw0);
    floatX *out_bias, *out, *dinp;
    cudaCheck(cudaMalloc(&out_bias, (size_t)N * OC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&out, (size_t)N * OC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dinp, (size_t)N * IC * sizeof(floatX)));
    Results r;
    const long calls0 = g_emu_heuristic_calls;
    for (int p = 0; p < passes; p++) {
        // the accumulated gradients start from the same values in every pass
        cudaCheck(cudaMemcpy(dw, dw0, x.dw0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(dbias, dbias0, x.dbias0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(dw32, dw32_0, x.dw0.size() * sizeof(float), cudaMemcpyDeviceToDevice));
        if (write)
            for (std::pair<void*, size_t> b : {std::make_pair((void*)dw, x.dw0.size() * sizeof(floatX)),
                                               std::make_pair((void*)dbias, x.dbias0.size() * sizeof(floatX)),
                                               std::make_pair((void*)dw32, x.dw0.size() * sizeof(float))})
                cudaCheck(cudaMemset(b.first, 0xff, b.second));  // NaN in bf16, fp16 and fp32
        matmul_forward(&mm, 0, out_bias, inp, w, bias, N, IC, OC);
        matmul_forward(&mm, 0, out, inp, w, nullptr, N, IC, OC);
        matmul_backward_input(&mm, 0, dinp, dout, w, N, IC, OC);
        matmul_backward_weight(&mm, 0, dw, dbias, dout, inp, N, IC, OC, !write);
        matmul_backward_weight(&mm, 0, dw32, (floatX*)nullptr, dout, inp, N, IC, OC, !write);
        if (p == 0) r.heuristic_first = g_emu_heuristic_calls - calls0;
    }
    cudaCheck(cudaDeviceSynchronize());
    r.heuristic_all = g_emu_heuristic_calls - calls0;
    r.out_bias = download(out_bias, (size_t)N * OC);
    r.out = download(out, (size_t)N * OC);
    r.dinp = download(dinp, (size_t)N * IC);
    r.dw = download(dw, (size_t)OC * IC);
    r.dbias = download(dbias, (size_t)OC);
    r.dw32 = download(dw32, (size_t)OC * IC);
    for (const MatmulAlgo& a : mm.algos) {
        r.chosen.push_back(a.chosen);
        r.how.push_back(a.source);
        r.algo_id.push_back(a.chosen >= 0 ? a.algos[a.chosen].data[0] : ~0ull);
    }
    if (mode == GEMM_ALGOS_TUNE && !file.empty()) gemm_algos_write(gemm_algos_records(&mm), file, "the emulated GPU");
    if (mode != GEMM_ALGOS_HEURISTIC) gemm_algos_print(&mm);
    for (const void* p : {(const void*)inp, (const void*)w, (const void*)bias, (const void*)dout, (const void*)dw,
                          (const void*)dbias, (const void*)dw32, (const void*)dw0, (const void*)dbias0,
                          (const void*)dw32_0, (const void*)out_bias, (const void*)out, (const void*)dinp})
        cudaCheck(cudaFree((void*)p));
    matmul_free(&mm);
    return r;
}

// ---- the GELU epilogues ---------------------------------------------------------------------------------------

static double gelu_d(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_d(double x) {
    const double t = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}
#ifdef ENABLE_FP32
static const double U = 1.0 / 16777216.0;  // fp32's unit roundoff
#else
static const double U = 1.0 / 256.0;       // bf16's
#endif
static const double ACC = 1.0 / 65536.0;   // the emulation's fp32 arithmetic against double, per |term| summed

// a device buffer of floatX set to h's values
static void set_values(floatX* d, const std::vector<float>& h) {
    std::vector<floatX> t(h.size());
    for (size_t i = 0; i < h.size(); i++) t[i] = to_floatX(h[i]);
    cudaCheck(cudaMemcpy(d, t.data(), t.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}

// the worst of |got - ref| / tol over elements (<= 1 passes), and the element where it is
struct ElemErr {
    double worst = 0;
    size_t at = 0;
    void add(size_t i, double got, double ref, double tol) {
        const double e = std::isfinite(got) ? std::fabs(got - ref) / tol : INFINITY;
        if (!(e <= worst)) { worst = e; at = i; }
    }
};

// One direct call of the emulated cuBLASLt: D[M,N] = W[M,K] inp[N,K]^T (column-major: op(A) = A^T of the stored
// [K,M], B the stored [K,N]) with epilogue ep. aux_ld 0: no aux pointer; aux_type -1: the attribute left unset.
// Returns the heuristic's status (and runs the product when it offered an algorithm).
static cublasStatus_t lt_call(cublasLtHandle_t h, cublasLtEpilogue_t ep, const floatX* w, const floatX* inp, floatX* d,
                              void* bias, void* aux, int64_t aux_ld, int aux_type, int M, int N, int K) {
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    if (bias) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    if (aux_ld) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    if (aux_type >= 0) {
        const cudaDataType_t t = (cudaDataType_t)aux_type;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof(t)));
    }
    cublasLtMatrixLayout_t la, lb, ld_;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_FLOATX, K, M, K));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_FLOATX, K, N, K));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld_, CUDA_FLOATX, M, N, M));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld_, ld_, pref, 1, &heur, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == CUBLAS_STATUS_SUCCESS) {
        const float alpha = 1.0f, beta = 0.0f;
        cublasCheck(cublasLtMatmul(h, desc, &alpha, w, la, inp, lb, &beta, d, ld_, d, ld_, &heur.algo, nullptr, 0, 0));
        cudaCheck(cudaDeviceSynchronize());
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld_));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return st;
}

// Part A (the header): the emulated cuBLASLt's GELU epilogues against the documented semantics, and its refusals.
static void test_lt_gelu(const Inputs& x, const std::string& tag) {
    const int M = OC, K = IC, LDA = 48;  // D [40, 64]; the aux matrix's leading dimension 48, not its 40 rows
    const float SENTINEL = 7.0f;
    cublasLtHandle_t h;
    cublasCheck(cublasLtCreate(&h));
    // the product's terms: acc[i, j] = sum_p W[i, p] inp[j, p], and sum_p |W[i, p] inp[j, p]|
    std::vector<double> acc((size_t)M * N), sabs((size_t)M * N);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double s = 0, a = 0;
            for (int p = 0; p < K; p++) {
                const double t = (double)x.w[(size_t)i * K + p] * x.inp[(size_t)j * K + p];
                s += t;
                a += std::fabs(t);
            }
            acc[(size_t)i + (size_t)j * M] = s;
            sabs[(size_t)i + (size_t)j * M] = a;
        }
    // an aux input for the backward epilogues: values over gelu's bend (|x| < 4), rounded to floatX; padding rows too
    std::vector<float> aux_in((size_t)LDA * N);
    {
        const std::vector<float> v = make_values(aux_in.size(), 7);
        for (size_t i = 0; i < aux_in.size(); i++) aux_in[i] = to_float(to_floatX(4.0f * v[i]));
    }
    floatX *w = upload<floatX>(x.w), *inp = upload<floatX>(x.inp), *bias = upload<floatX>(x.bias);
    floatX *d, *aux, *bgrad;
    cudaCheck(cudaMalloc(&d, (size_t)M * N * sizeof(floatX)));
    cudaCheck(cudaMalloc(&bgrad, (size_t)M * sizeof(floatX)));
    const std::vector<float> aux_fill((size_t)LDA * N, SENTINEL);
    aux = upload<floatX>(aux_fill);

    // forward: GELU_AUX_BIAS and GELU_AUX
    for (bool with_bias : {true, false}) {
        const char* name = with_bias ? "GELU_AUX_BIAS" : "GELU_AUX";
        set_values(aux, aux_fill);
        const cublasStatus_t st = lt_call(h, with_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, w, inp,
                                          d, with_bias ? bias : nullptr, aux, LDA, -1, M, N, K);
        check(st == CUBLAS_STATUS_SUCCESS, tag + "emulated cuBLASLt " + name + " runs (aux ld 48 for 40 rows)", "status %d", (int)st);
        const std::vector<float> got_d = download(d, (size_t)M * N), got_aux = download(aux, (size_t)LDA * N);
        ElemErr ed, ea;
        bool padding_kept = true;
        for (int j = 0; j < N; j++) {
            for (int i = 0; i < M; i++) {
                const size_t o = (size_t)i + (size_t)j * M;
                const double pre = acc[o] + (with_bias ? x.bias[i] : 0.0), s = sabs[o] + (with_bias ? std::fabs(x.bias[i]) : 0.0);
                ea.add(o, got_aux[(size_t)i + (size_t)j * LDA], pre, U * std::fabs(pre) + ACC * s);
                ed.add(o, got_d[o], gelu_d(pre), U * std::fabs(gelu_d(pre)) + 1.2 * ACC * s);
            }
            for (int i = M; i < LDA; i++) padding_kept &= got_aux[(size_t)i + (size_t)j * LDA] == SENTINEL;
        }
        check(ea.worst <= 1, tag + name + ": aux = the pre-activation, at leading dimension 48, rounded once",
              "worst element %zu at %.3g of its tolerance", ea.at, ea.worst);
        check(ed.worst <= 1, tag + name + ": D = gelu (tanh approximation) of the fp32 pre-activation, rounded once",
              "worst element %zu at %.3g of its tolerance", ed.at, ed.worst);
        check(padding_kept, tag + name + ": the aux rows between 40 and the leading dimension 48 are not written");
        printf("  %-14s worst element at %.3g (aux), %.3g (D) of its tolerance\n", name, ea.worst, ed.worst);
    }

    // backward: DGELU_BGRAD and DGELU, the aux matrix aux_in (leading dimension 48)
    floatX* aux_b = upload<floatX>(aux_in);
    for (bool with_bias : {true, false}) {
        const char* name = with_bias ? "DGELU_BGRAD" : "DGELU";
        const std::vector<float> bfill(M, SENTINEL);
        set_values(bgrad, bfill);
        const cublasStatus_t st = lt_call(h, with_bias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU, w, inp, d,
                                          with_bias ? bgrad : nullptr, aux_b, LDA, -1, M, N, K);
        check(st == CUBLAS_STATUS_SUCCESS, tag + "emulated cuBLASLt " + name + " runs (aux ld 48 for 40 rows)", "status %d", (int)st);
        const std::vector<float> got_d = download(d, (size_t)M * N), got_b = download(bgrad, M);
        ElemErr ed, eb;
        for (int i = 0; i < M; i++) {
            double bsum = 0, babs = 0;
            for (int j = 0; j < N; j++) {
                const size_t o = (size_t)i + (size_t)j * M;
                const double g = gelu_grad_d(aux_in[(size_t)i + (size_t)j * LDA]), ref = acc[o] * g;
                const double tol = ACC * (sabs[o] * std::fabs(g) + std::fabs(acc[o]));
                ed.add(o, got_d[o], ref, U * std::fabs(ref) + tol);
                bsum += ref;
                babs += tol;
            }
            if (with_bias) eb.add(i, got_b[i], bsum, U * std::fabs(bsum) + babs);
        }
        check(ed.worst <= 1, tag + name + ": D = the product times gelu' of the aux matrix, rounded once",
              "worst element %zu at %.3g of its tolerance", ed.at, ed.worst);
        if (with_bias)
            check(eb.worst <= 1, tag + name + ": the bias gradient = the fp32 sums over each row of D, stored",
                  "worst row %zu at %.3g of its tolerance", eb.at, eb.worst);
        else
            check(download(bgrad, M) == bfill, tag + "DGELU writes no bias gradient");
        printf("  %-14s worst element at %.3g (D), %.3g (bias gradient) of its tolerance\n", name, ed.worst, eb.worst);
    }

    // what cuBLASLt refuses
    struct Bad { const char* what; cublasLtEpilogue_t ep; bool bias; bool aux; int64_t ld; int type; cublasStatus_t want; };
    const int other_type = CUDA_FLOATX == CUDA_R_16BF ? (int)CUDA_R_32F : (int)CUDA_R_16BF;
    const Bad bad[] = {
        {"an aux leading dimension that is not a multiple of 8 (44)", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, true, 44, -1, CUBLAS_STATUS_INVALID_VALUE},
        {"an aux leading dimension below D's rows (32 < 40)", CUBLASLT_EPILOGUE_DGELU_BGRAD, true, true, 32, -1, CUBLAS_STATUS_INVALID_VALUE},
        {"no aux leading dimension", CUBLASLT_EPILOGUE_DGELU, false, true, 0, -1, CUBLAS_STATUS_INVALID_VALUE},
        {"no aux pointer", CUBLASLT_EPILOGUE_GELU_AUX, false, false, LDA, -1, CUBLAS_STATUS_INVALID_VALUE},
        {"an aux type other than D's", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, true, LDA, other_type, CUBLAS_STATUS_INVALID_VALUE},
        {"GELU_AUX_BIAS without a bias pointer", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, true, LDA, -1, CUBLAS_STATUS_INVALID_VALUE},
        {"DGELU_BGRAD without a bias pointer", CUBLASLT_EPILOGUE_DGELU_BGRAD, false, true, LDA, -1, CUBLAS_STATUS_INVALID_VALUE},
    };
    for (const Bad& b : bad) {
        const cublasStatus_t st = lt_call(h, b.ep, w, inp, d, b.bias ? bgrad : nullptr, b.aux ? aux : nullptr, b.ld, b.type, M, N, K);
        check(st == b.want, tag + "emulated cuBLASLt refuses " + b.what, "status %d, want %d", (int)st, (int)b.want);
    }
    for (const char* e : {"GELU_AUX_BIAS", "GELU_AUX", "DGELU_BGRAD", "DGELU"}) {
        setenv("EMU_LT_NO_ALGO", e, 1);
        const cublasLtEpilogue_t ep = std::string(e) == "GELU_AUX_BIAS" ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                    : std::string(e) == "GELU_AUX"      ? CUBLASLT_EPILOGUE_GELU_AUX
                                    : std::string(e) == "DGELU_BGRAD"   ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                                                                        : CUBLASLT_EPILOGUE_DGELU;
        const bool with_bias = ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || ep == CUBLASLT_EPILOGUE_DGELU_BGRAD;
        const cublasStatus_t st = lt_call(h, ep, w, inp, d, with_bias ? bgrad : nullptr, aux, LDA, -1, M, N, K);
        unsetenv("EMU_LT_NO_ALGO");
        check(st == CUBLAS_STATUS_NOT_SUPPORTED, tag + "EMU_LT_NO_ALGO=" + e + ": the heuristic offers no algorithm",
              "status %d", (int)st);
    }
    for (const void* p : {(const void*)w, (const void*)inp, (const void*)bias, (const void*)d, (const void*)aux,
                          (const void*)aux_b, (const void*)bgrad})
        cudaCheck(cudaFree((void*)p));
    cublasCheck(cublasLtDestroy(h));
}

// Part B (the header): llmc/matmul.cuh's GELU functions at the linear layer's shape, against the host reference and
// the unfused path; with EMU_LT_NO_ALGO naming their epilogues, the fallback's contract (false, nothing written).
static void test_matmul_gelu(const Inputs& x, const std::string& tag) {
    MatmulContext mm;
    matmul_init(&mm, IC);
    const size_t nf = (size_t)N * OC, nb = (size_t)N * IC;
    floatX *inp = upload<floatX>(x.inp), *w = upload<floatX>(x.w), *bias = upload<floatX>(x.bias),
           *dout = upload<floatX>(x.dout);
    // the backward's pre-activation [N, IC]: values over gelu's bend; the bias gradient starts from dbias0 (IC values)
    std::vector<float> pre_b(nb), dbias0(IC);
    {
        const std::vector<float> v = make_values(nb, 8), b = make_values(IC, 9);
        for (size_t i = 0; i < nb; i++) pre_b[i] = to_float(to_floatX(4.0f * v[i]));
        for (int i = 0; i < IC; i++) dbias0[i] = b[i];
    }
    floatX *pre_bwd = upload<floatX>(pre_b), *act, *pre, *act_u, *pre_u, *dpre, *dpre_u, *dact, *dbias;
    for (floatX** p : {&act, &pre, &act_u, &pre_u}) cudaCheck(cudaMalloc(p, nf * sizeof(floatX)));
    for (floatX** p : {&dpre, &dpre_u, &dact}) cudaCheck(cudaMalloc(p, nb * sizeof(floatX)));
    dbias = upload<floatX>(dbias0);

    for (bool with_bias : {true, false}) {
        const std::string name = tag + (with_bias ? "matmul_forward_gelu (GELU_AUX_BIAS)" : "matmul_forward_gelu without a bias (GELU_AUX)");
        const floatX* b = with_bias ? bias : nullptr;
        const bool ran = matmul_forward_gelu(&mm, 0, act, pre, inp, w, b, N, IC, OC);
        matmul_forward(&mm, 0, pre_u, inp, w, b, N, IC, OC);  // the unfused path
        gelu_forward(act_u, pre_u, nf, 0);
        cudaCheck(cudaDeviceSynchronize());
        check(ran, name + " runs with the epilogue");
        const std::vector<float> a = download(act, nf), p = download(pre, nf), au = download(act_u, nf), pu = download(pre_u, nf);
        ElemErr er, eu;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                const size_t i = (size_t)n * OC + o;
                double s = with_bias ? x.bias[o] : 0.0, sa = std::fabs(s);
                for (int c = 0; c < IC; c++) {
                    const double t = (double)x.inp[(size_t)n * IC + c] * x.w[(size_t)o * IC + c];
                    s += t;
                    sa += std::fabs(t);
                }
                er.add(i, a[i], gelu_d(s), U * std::fabs(gelu_d(s)) + 1.2 * ACC * sa);
                // fused gelu(v) against gelu(v rounded): gelu's slope (at most 1.13) times one rounding of v, plus the
                // two roundings of act; the fp32 build adds the two gelu formulas' fp32 differences (1e-6 of the scale)
                eu.add(i, a[i], au[i], 1.2 * U * std::fabs(pu[i]) + 2 * U * std::fabs(au[i]) + 1e-6);
            }
        check(er.worst <= 1, name + ": act = gelu(inp W^T + b) against the host reference", "worst element %zu at %.3g of its tolerance", er.at, er.worst);
        check(p == pu, name + ": the aux matrix (fc1) is bitwise matmul_forward's output");
        check(eu.worst <= 1, name + ": act within one rounding of the unfused path (matmul_forward + gelu_forward)",
              "worst element %zu at %.3g of its tolerance", eu.at, eu.worst);
    }
    for (bool with_bias : {true, false}) {
        const std::string name = tag + (with_bias ? "matmul_backward_input_dgelu (DGELU_BGRAD)" : "matmul_backward_input_dgelu without a bias gradient (DGELU)");
        set_values(dbias, dbias0);
        const bool ran = matmul_backward_input_dgelu(&mm, 0, dpre, with_bias ? dbias : nullptr, dout, w, pre_bwd, N, IC, OC);
        matmul_backward_input(&mm, 0, dact, dout, w, N, IC, OC);  // the unfused path
        gelu_backward(dpre_u, dact, pre_bwd, nb, 0);
        cudaCheck(cudaDeviceSynchronize());
        check(ran, name + " runs with the epilogue");
        const std::vector<float> dp = download(dpre, nb), du = download(dpre_u, nb), db = download(dbias, IC);
        ElemErr er, eu, eb;
        for (int c = 0; c < IC; c++) {
            double bs = dbias0[c], bt = 0;
            for (int n = 0; n < N; n++) {
                const size_t i = (size_t)n * IC + c;
                double s = 0, sa = 0;
                for (int o = 0; o < OC; o++) {
                    const double t = (double)x.dout[(size_t)n * OC + o] * x.w[(size_t)o * IC + c];
                    s += t;
                    sa += std::fabs(t);
                }
                const double g = gelu_grad_d(pre_b[i]), ref = s * g, tol = ACC * (sa * std::fabs(g) + std::fabs(s));
                er.add(i, dp[i], ref, U * std::fabs(ref) + tol);
                // fused: the product rounded once after gelu'; unfused: dact rounded, then dact * gelu' rounded
                eu.add(i, dp[i], du[i], 3 * U * std::fabs(du[i]) + tol + 1e-6);
                bs += ref;
                bt += tol;
            }
            // the bias gradient is stored in floatX (one rounding), then added into dbias (another)
            eb.add(c, db[c], with_bias ? bs : dbias0[c], U * (std::fabs(bs - dbias0[c]) + std::fabs(bs)) + bt);
        }
        check(er.worst <= 1, name + ": dpre = (dout W) * gelu'(pre) against the host reference", "worst element %zu at %.3g of its tolerance", er.at, er.worst);
        check(eu.worst <= 1, name + ": dpre within one rounding of the unfused path (matmul_backward_input + gelu_backward)",
              "worst element %zu at %.3g of its tolerance", eu.at, eu.worst);
        check(eb.worst <= 1, name + (with_bias ? ": dbias += the column sums of dpre" : ": dbias untouched"),
              "worst element %zu at %.3g of its tolerance", eb.at, eb.worst);
    }

    // no algorithm with the GELU epilogues: false, nothing written, said once per epilogue (a new context: the first
    // one keeps the algorithms its heuristic found)
    MatmulContext mn;
    matmul_init(&mn, IC);
    setenv("EMU_LT_NO_ALGO", "GELU_AUX_BIAS,DGELU_BGRAD", 1);
    const std::vector<float> before_act = download(act, nf), before_pre = download(pre, nf), before_dpre = download(dpre, nb),
                             before_db = download(dbias, IC);
    bool refused = true;
    for (int rep = 0; rep < 2; rep++) {
        refused &= !matmul_forward_gelu(&mn, 0, act, pre, inp, w, bias, N, IC, OC);
        refused &= !matmul_backward_input_dgelu(&mn, 0, dpre, dbias, dout, w, pre_bwd, N, IC, OC);
    }
    cudaCheck(cudaDeviceSynchronize());
    unsetenv("EMU_LT_NO_ALGO");
    check(refused, tag + "EMU_LT_NO_ALGO=GELU_AUX_BIAS,DGELU_BGRAD: both functions return false (the caller falls back)");
    check(download(act, nf) == before_act && download(pre, nf) == before_pre && download(dpre, nb) == before_dpre &&
              download(dbias, IC) == before_db,
          tag + "EMU_LT_NO_ALGO=GELU_AUX_BIAS,DGELU_BGRAD: nothing written (act, pre, dpre, dbias)");
    check(mn.gelu_fallbacks.size() == 2, tag + "the two epilogues without an algorithm are noted once each",
          "%zu notes after two calls of each", mn.gelu_fallbacks.size());
    matmul_free(&mn);
    for (const void* p : {(const void*)inp, (const void*)w, (const void*)bias, (const void*)dout, (const void*)pre_bwd,
                          (const void*)act, (const void*)pre, (const void*)act_u, (const void*)pre_u, (const void*)dpre,
                          (const void*)dpre_u, (const void*)dact, (const void*)dbias})
        cudaCheck(cudaFree((void*)p));
    matmul_free(&mm);
}

int main() {
    Inputs x;
    x.inp = make_values((size_t)N * IC, 1);
    x.w = make_values((size_t)OC * IC, 2);
    x.bias = make_values(OC, 3);
    x.dout = make_values((size_t)N * OC, 4);
    x.dw0 = make_values((size_t)OC * IC, 5);
    x.dbias0 = make_values(OC, 6);

    // host references in double
    std::vector<float> ref_out((size_t)N * OC), ref_out_bias((size_t)N * OC), ref_dinp((size_t)N * IC),
        ref_dw((size_t)OC * IC), ref_dbias(OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int i = 0; i < IC; i++) s += (double)x.inp[(size_t)n * IC + i] * x.w[(size_t)o * IC + i];
            ref_out[(size_t)n * OC + o] = (float)s;
            ref_out_bias[(size_t)n * OC + o] = (float)(s + x.bias[o]);
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += (double)x.dout[(size_t)n * OC + o] * x.w[(size_t)o * IC + i];
            ref_dinp[(size_t)n * IC + i] = (float)s;
        }
    for (int o = 0; o < OC; o++) {
        double b = x.dbias0[o];
        for (int n = 0; n < N; n++) b += x.dout[(size_t)n * OC + o];
        ref_dbias[o] = (float)b;
        for (int i = 0; i < IC; i++) {
            double s = x.dw0[(size_t)o * IC + i];
            for (int n = 0; n < N; n++) s += (double)x.dout[(size_t)n * OC + o] * x.inp[(size_t)n * IC + i];
            ref_dw[(size_t)o * IC + i] = (float)s;
        }
    }

    // Tolerances relative to each tensor's largest value R. bf16 rounds to 8 significant bits, so a stored
    // rounding moves a value by at most 2^-8 of it. The worst result here is rounded twice (the fallback's
    // bias add stores the product, then product + bias; a bias gradient is stored by BGRADB, then added into
    // dbias), and the values rounded are at most 2R (the product before a bias of at most R is added):
    // 2 * 2 * 2^-8 R. Two results each within that of the reference differ from each other by at most 1.5
    // times it (the epilogue path rounds once), so the same 2^-6 bounds fallback vs epilogue. A bias add or
    // bias gradient left out would be off by |bias| or a column sum, tens of percent of R. fp32: sums of
    // at most 64 terms below 1 differ from double by a few fp32 ulps of the sum, far below 1e-5.
#ifdef ENABLE_FP32
    const double tol = 1e-5;
#else
    const double tol = 4.0 / 256;
#endif
    const std::string tag = std::string(PRECISION_NAME) + ": ";

    unsetenv("EMU_LT_NO_ALGO");
    const Results e = run_products(x);
    setenv("EMU_LT_NO_ALGO", "BIAS,BGRADB", 1);
    const Results f = run_products(x);
    unsetenv("EMU_LT_NO_ALGO");

    struct Named { const char* name; const std::vector<float>* got_e; const std::vector<float>* got_f; const std::vector<float>* ref; };
    const Named all[] = {{"forward with bias", &e.out_bias, &f.out_bias, &ref_out_bias},
                         {"forward", &e.out, &f.out, &ref_out},
                         {"backward input", &e.dinp, &f.dinp, &ref_dinp},
                         {"weight gradient (floatX)", &e.dw, &f.dw, &ref_dw},
                         {"bias gradient", &e.dbias, &f.dbias, &ref_dbias},
                         {"weight gradient (fp32)", &e.dw32, &f.dw32, &ref_dw}};
    for (const Named& t : all) {
        const size_t n = t.ref->size();
        const double err_e = rel_err(t.got_e->data(), t.ref->data(), n);
        const double err_f = rel_err(t.got_f->data(), t.ref->data(), n);
        const double err_ef = rel_err(t.got_f->data(), t.got_e->data(), n);
        check(err_e <= tol, tag + t.name + " with the epilogues matches the host reference", "rel err %.3g > %.3g", err_e, tol);
        check(err_f <= tol, tag + t.name + " with the fallback matches the host reference", "rel err %.3g > %.3g", err_f, tol);
        check(err_ef <= tol, tag + t.name + ": fallback equals the epilogue path", "rel diff %.3g > %.3g", err_ef, tol);
        printf("  %-26s rel err vs reference: epilogue %.3g, fallback %.3g; fallback vs epilogue %.3g\n", t.name, err_e,
               err_f, err_ef);
    }
    // the GEMMs themselves are the same emulated product in both modes: bitwise equal
    check(e.out == f.out && e.dinp == f.dinp && e.dw == f.dw && e.dw32 == f.dw32,
          tag + "products without an epilogue are bitwise equal in both modes");
    check(e.heuristic_first == 5 && e.heuristic_all == 5,
          tag + "heuristic asked once per distinct key with the epilogues (5)", "%ld after one pass, %ld after %d",
          e.heuristic_first, e.heuristic_all, PASSES);
#ifdef ENABLE_FP32
    const long keys_fallback = 5;
#else
    const long keys_fallback = 6;
#endif
    check(f.heuristic_first == keys_fallback && f.heuristic_all == keys_fallback,
          tag + "heuristic asked once per distinct key with the fallback (" + std::to_string(keys_fallback) + ")",
          "%ld after one pass, %ld after %d", f.heuristic_first, f.heuristic_all, PASSES);
    printf("heuristic calls over %d passes of 5 products: %ld with the epilogues, %ld with the fallback\n", PASSES,
           e.heuristic_all, f.heuristic_all);
    // --gemm-algos tune: with algorithm 0 of every GEMM made 100 ms slower (EMU_LT_SLOW_ALGOS=1), one pass picks
    // another for each key, and its products (the accumulating ones timed on a copy) are bitwise the heuristic's
    // (the emulated algorithms compute alike): a gradient accumulated more than once would be off by whole products.
    // Then its choices written, read back (--gemm-algos FILE) and replayed: the same algorithms, the same products.
    setenv("EMU_LT_SLOW_ALGOS", "1", 1);
    const std::string file = "gemm_algos_" + std::string(PRECISION_NAME) + ".txt";
    const Results t = run_products(x, 1, GEMM_ALGOS_TUNE, file);
    unsetenv("EMU_LT_SLOW_ALGOS");
    bool all_tuned = !t.chosen.empty();
    for (size_t i = 0; i < t.chosen.size(); i++) all_tuned = all_tuned && t.how[i] == "tuned" && t.algo_id[i] > 0;
    check(all_tuned, tag + "--gemm-algos tune: every key's algorithm timed, the slow algorithm 0 never kept",
          "%zu keys", t.chosen.size());
    check(t.out_bias == e.out_bias && t.out == e.out && t.dinp == e.dinp && t.dw == e.dw && t.dbias == e.dbias &&
          t.dw32 == e.dw32, tag + "--gemm-algos tune: the products, and the gradients accumulated once, as without tuning");
    const Results r = run_products(x, 1, GEMM_ALGOS_FILE, file);
    bool all_replayed = r.chosen.size() == t.chosen.size();
    for (size_t i = 0; all_replayed && i < r.chosen.size(); i++)
        all_replayed = r.how[i] == "file" && r.chosen[i] == 0 && r.algo_id[i] == t.algo_id[i];
    check(all_replayed, tag + "--gemm-algos FILE: every key runs the one algorithm recorded for it", "%zu keys of %zu",
          r.chosen.size(), t.chosen.size());
    check(r.out_bias == e.out_bias && r.out == e.out && r.dinp == e.dinp && r.dw == e.dw && r.dbias == e.dbias &&
          r.dw32 == e.dw32, tag + "--gemm-algos FILE: the same products");
    // The write mode (a step's first micro-batch): from NaN, bitwise the products accumulated into zeros, with the
    // BGRADB epilogue and with the fallback (a NaN read anywhere, or a bias added to instead of stored, shows)
    Inputs z = x;
    std::fill(z.dw0.begin(), z.dw0.end(), 0.0f);
    std::fill(z.dbias0.begin(), z.dbias0.end(), 0.0f);
    for (const char* no_algo : {"", "BGRADB"}) {
        if (*no_algo) setenv("EMU_LT_NO_ALGO", no_algo, 1);
        else unsetenv("EMU_LT_NO_ALGO");
        const Results from_zero = run_products(z, 1), written = run_products(x, 1, GEMM_ALGOS_HEURISTIC, "", true);
        check(written.dw == from_zero.dw && written.dbias == from_zero.dbias && written.dw32 == from_zero.dw32,
              tag + "accumulate false writes dW, dbias and the fp32 dW over NaN: bitwise the sums from zeros" +
                  (*no_algo ? " (BGRADB's fallback)" : ""));
    }
    unsetenv("EMU_LT_NO_ALGO");
    test_lt_gelu(x, tag);
    test_matmul_gelu(x, tag);
    return g_failed ? 1 : 0;
}
