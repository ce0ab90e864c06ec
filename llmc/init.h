// llmc/init.h: the seeded initialisation of a whole model, shared by the trainers. Every value
// depends only on (seed, tensor index, element index) through llmc/rng.h normal_at, so it is
// independent of threads, devices and the parallel layout:
//   matrices and embeddings   normal(0, init_std)
//   residual projections      normal(0, init_std / sqrt(2L))  (attn_out, fc2)
//   norm weights              ones
//   biases                    zeros
//   vocabulary padding rows   zeros (never trained: they get no gradient)
// Both trainers call it, so they start from bitwise-identical fp32 weights
// (tests/t_train_gpt_host.sh compares their --export-init files). The elements of each tensor are
// spread over the OpenMP threads: each value is a function of its index alone, so any thread count
// gives the same bytes (the test compares 1 and 2 threads). The loop vectorises (normal_at's log and cos are
// polynomials): about 1.5 ns a value on one AVX-512 core, 4 ns with AVX2.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "llmc/model_config.h"
#include "llmc/param_table.h"
#include "llmc/rng.h"

// dst [numel] <- the initial weights of table tensor k (a whole tensor: a rank keeps its slice of it).
template <typename real>
void param_init_tensor(const ModelConfig& c, const ParamTable& t, size_t k, real* dst, uint64_t seed) {
    const ParamSpec& s = t.specs[k];
    const double sigma = s.init == INIT_NORMAL_RESID ? c.init_std / std::sqrt(2.0 * c.n_layer) : c.init_std;
    const bool normal = s.init == INIT_NORMAL || s.init == INIT_NORMAL_RESID;
    const int64_t live = normal ? s.live_rows * s.cols : 0, n = (int64_t)s.numel();
    const real rest = s.init == INIT_ONES ? 1 : 0;  // norm weights; biases and the padding rows are 0
#ifdef _OPENMP
#pragma omp parallel if (n >= 65536)
#endif
    {
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
        for (int64_t i = 0; i < live; i++) dst[i] = (real)(sigma * normal_at(seed, k, (uint64_t)i));
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
        for (int64_t i = live; i < n; i++) dst[i] = rest;
    }
}

// params [t.total] <- the initial weights of every tensor of the table. Returns the seconds it took.
template <typename real>
double params_init_full(const ModelConfig& c, const ParamTable& t, real* params, uint64_t seed) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < t.specs.size(); k++) param_init_tensor(c, t, k, params + t.specs[k].offset, seed);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One line on how long the initialisation of n values took.
static inline void print_init_time(int64_t n, double seconds) {
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    printf("initialised %lld values in %.2f s (%.1f ns per value, %d threads)\n", (long long)n, seconds,
           1e9 * seconds / std::max<double>(1.0, (double)n), threads);
}
