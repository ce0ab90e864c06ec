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
// once with every epilogue available and once with EMU_LT_NO_ALGO=BIAS,BGRADB, where matmul.cuh must fall
// back to the default epilogue and its own kernels. Checks: each result against a double-precision host
// reference; the fallback's results against the epilogue path's (the GEMMs bitwise, the epilogue's work
// within the build's rounding); the heuristic asked once per distinct key, the same count after one pass and
// after three: 5 keys with the epilogues (the five calls differ in epilogue, shape, transposes or output
// type); without them 1 and 4 get "none" answers and fall back to the default epilogue: 1 then shares 2's
// key, 4 adds its shape's default key, a sixth, in the bf16 build; in the fp32 build floatX is fp32, so that
// key is 5's and the count stays 5.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "llmc/matmul.cuh"
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
};

struct Inputs {
    std::vector<float> inp, w, bias, dout, dw0, dbias0;  // [N,IC] [OC,IC] [OC] [N,OC] [OC,IC] [OC]
};

static Results run_products(const Inputs& x) {
    MatmulContext mm;
    matmul_init(&mm, OC);
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
    for (int p = 0; p < PASSES; p++) {
        // the accumulated gradients start from the same values in every pass
        cudaCheck(cudaMemcpy(dw, dw0, x.dw0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(dbias, dbias0, x.dbias0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(dw32, dw32_0, x.dw0.size() * sizeof(float), cudaMemcpyDeviceToDevice));
        matmul_forward(&mm, 0, out_bias, inp, w, bias, N, IC, OC);
        matmul_forward(&mm, 0, out, inp, w, nullptr, N, IC, OC);
        matmul_backward_input(&mm, 0, dinp, dout, w, N, IC, OC);
        matmul_backward_weight(&mm, 0, dw, dbias, dout, inp, N, IC, OC);
        matmul_backward_weight(&mm, 0, dw32, (floatX*)nullptr, dout, inp, N, IC, OC);
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
    for (const void* p : {(const void*)inp, (const void*)w, (const void*)bias, (const void*)dout, (const void*)dw,
                          (const void*)dbias, (const void*)dw32, (const void*)dw0, (const void*)dbias0,
                          (const void*)dw32_0, (const void*)out_bias, (const void*)out, (const void*)dinp})
        cudaCheck(cudaFree((void*)p));
    matmul_free(&mm);
    return r;
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
    return g_failed ? 1 : 0;
}
