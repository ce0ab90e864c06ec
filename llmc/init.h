// llmc/init.h: the seeded initialisation of a whole model, shared by the trainers. Every value
// depends only on (seed, tensor index, element index) through llmc/rng.h normal_at, so it is
// independent of threads, devices and the parallel layout:
//   matrices and embeddings   normal(0, init_std)
//   residual projections      normal(0, init_std / sqrt(2L))  (attn_out, fc2)
//   norm weights              ones
//   biases                    zeros
//   vocabulary padding rows   zeros (never trained: they get no gradient)
// Both trainers call it, so they start from bitwise-identical fp32 weights
// (tests/t_train_gpt_host.sh compares their --export-init files).
#pragma once
#include <cmath>
#include <cstdint>
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/rng.h"

// params [t.total] <- the initial weights of every tensor of the table
template <typename real>
void params_init_full(const ModelConfig& c, const ParamTable& t, real* params, uint64_t seed) {
    for (size_t k = 0; k < t.specs.size(); k++) {
        const ParamSpec& s = t.specs[k];
        real* p = params + s.offset;
        double std = s.init == INIT_NORMAL_RESID ? c.init_std / std::sqrt(2.0 * c.n_layer) : c.init_std;
        const size_t live = (size_t)(s.live_rows * s.cols);
        for (size_t i = 0; i < s.numel(); i++) {
            if (s.init == INIT_ONES) p[i] = 1;
            else if (s.init == INIT_ZEROS || i >= live) p[i] = 0;
            else p[i] = (real)(std * normal_at(seed, k, i));
        }
    }
}
