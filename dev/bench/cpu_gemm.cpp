// dev/bench/cpu_gemm.cpp: the CPU trainer's GEMMs against the machine's own FMA peak, measured in one run. A
// benchmark, not a test: it prints figures and judges nothing (dev/bench/cpu_step.sh builds and runs it, against this
// tree's llmc/ and an older commit's).
//   1. The FMA peak, by its own probe: per thread, 16 independent chains of fused multiply-adds on the widest vector
//      type -march=native gives (GCC vector extensions: 16 floats), so that neither latency nor memory bounds it;
//      at 1 thread and at all (OMP_NUM_THREADS).
//   2. llmc/ref_ops.h's matmul_forward and matmul_backward (the input and weight gradients together) at GPT-2
//      124M's shapes with -b 4 -t 64 (N = 256 rows; C 768, the qkv's 3C, fc1's 4C and the padded vocabulary 50304),
//      GFLOP/s (2 N IC OC per product) and their share of the peak, at 1 thread and at all. Best of 3 runs.
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include "llmc/ref_ops.h"

typedef float vec16 __attribute__((vector_size(64)));

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// GFLOP/s of `threads` threads each running 16 chains of n vector FMAs (2 flops per lane).
static double fma_peak(int threads, long n) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double sink = 0;
        const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
            vec16 a[16], x = {}, y = {};
            for (int j = 0; j < 16; j++) {
                x[j] = 1.0f + 1e-7f * j;
                y[j] = 1e-7f;
            }
            for (int c = 0; c < 16; c++) a[c] = x * (float)(c + 1) * 1e-3f;
            for (long i = 0; i < n; i++) {
#pragma GCC unroll 16
                for (int c = 0; c < 16; c++) a[c] = a[c] * x + y;
            }
            for (int c = 0; c < 16; c++)
                for (int j = 0; j < 16; j++) sink += a[c][j];
        }
        const double s = now_s() - t0;
        if (sink == 12345.678) printf(" ");  // keeps the chains
        best = std::max(best, 2.0 * 16 * 16 * n * threads / s / 1e9);
    }
    return best;
}

int main() {
    const int all = omp_get_max_threads();
    const double peak1 = fma_peak(1, 20000000), peak_all = fma_peak(all, 20000000);
    printf("FMA peak (16 chains of 16-float vectors per thread): %.1f GFLOP/s at 1 thread, %.1f at %d\n", peak1,
           peak_all, all);
    struct Shape { const char* name; int IC, OC; };
    const int N = 4 * 64;
    const Shape shapes[] = {{"qkv", 768, 2304}, {"attn_out", 768, 768}, {"fc1", 768, 3072}, {"fc2", 3072, 768},
                            {"lm_head", 768, 50304}};
    printf("%-9s %6s %6s %6s | %-28s | %-28s\n", "GEMM", "N", "IC", "OC", "forward GFLOP/s (of peak)",
           "backward GFLOP/s (of peak)");
    for (int threads : {1, all}) {
        omp_set_num_threads(threads);
        const double peak = threads == 1 ? peak1 : peak_all;
        printf("-- %d thread%s\n", threads, threads == 1 ? "" : "s");
        for (const Shape& s : shapes) {
            std::vector<float> inp((size_t)N * s.IC, 0.01f), w((size_t)s.OC * s.IC, 0.02f), out((size_t)N * s.OC);
            std::vector<float> dout((size_t)N * s.OC, 0.001f), dinp((size_t)N * s.IC), dw((size_t)s.OC * s.IC);
            const double flops = 2.0 * N * s.IC * s.OC;
            double fwd = 1e30, bwd = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                double t0 = now_s();
                matmul_forward(out.data(), inp.data(), w.data(), (const float*)nullptr, N, s.IC, s.OC);
                fwd = std::min(fwd, now_s() - t0);
                t0 = now_s();
                matmul_backward(dinp.data(), dw.data(), (float*)nullptr, dout.data(), inp.data(), w.data(), N, s.IC,
                                s.OC);
                bwd = std::min(bwd, now_s() - t0);
            }
            printf("%-9s %6d %6d %6d | %8.1f (%5.1f%%)             | %8.1f (%5.1f%%)\n", s.name, N, s.IC, s.OC,
                   flops / fwd / 1e9, 100 * flops / fwd / 1e9 / peak, 2 * flops / bwd / 1e9,
                   100 * 2 * flops / bwd / 1e9 / peak);
        }
    }
    return 0;
}
