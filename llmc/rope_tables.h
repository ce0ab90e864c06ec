// llmc/rope_tables.h: the position tables computed on the host (in double, stored as real), shared by the CPU
// reference (llmc/ref_ops.h includes it; train_gpt_cpu.cpp) and the CUDA trainer (llmc/rope.cuh uploads them).
// No OpenMP and no CUDA: a plain host header.
//   rope_tables<real>(config, T, &cos, &sin)   cos, sin [T, hd/2] (hd = config.head_dim)
//   alibi_slopes(H, h0, n)                     ALiBi's slopes of heads h0 .. h0 + n of H (default: all of them)
#pragma once
#include <cmath>
#include <vector>
#include "llmc/model_config.h"

// RoPE tables: cos, sin [T, hd/2]. inv_freq[i] = theta^(-2i/hd), with Llama 3.1 scaling when
// rope_factor > 0 (long wavelengths divided by the factor, a smooth blend in between).
template <typename real>
void rope_tables(const ModelConfig& c, int T, std::vector<real>* cosv, std::vector<real>* sinv) {
    const int half = c.head_dim / 2;
    cosv->resize((size_t)T * half);
    sinv->resize((size_t)T * half);
    for (int i = 0; i < half; i++) {
        double inv = std::pow((double)c.rope_theta, -2.0 * i / c.head_dim);
        if (c.rope_factor > 0) {
            double low_wl = c.rope_orig_ctx / c.rope_low_freq, high_wl = c.rope_orig_ctx / c.rope_high_freq;
            double wl = 2.0 * M_PI / inv;
            if (wl > low_wl) inv = inv / c.rope_factor;
            else if (wl >= high_wl) {
                double smooth = (c.rope_orig_ctx / wl - c.rope_low_freq) / (c.rope_high_freq - c.rope_low_freq);
                inv = (1.0 - smooth) * inv / c.rope_factor + smooth * inv;
            }
        }
        for (int t = 0; t < T; t++) {
            (*cosv)[(size_t)t * half + i] = (real)std::cos(t * inv);
            (*sinv)[(size_t)t * half + i] = (real)std::sin(t * inv);
        }
    }
}

// ALiBi's slopes (Press et al.; as Baichuan2-13B and BLOOM make them): for H a power of two, head h gets
// 2^(-8 (h + 1) / H); otherwise the slopes of the power of two P just below H, then every other slope of 2P for the
// H - P heads left. Head h adds slope[h] * (key - query) to its scaled scores. h0, n: the heads of a tensor-parallel
// rank (n < 0: to the last).
static inline std::vector<double> alibi_slopes(int H, int h0 = 0, int n = -1) {
    auto pow2 = [](int n) {
        std::vector<double> s(n);
        for (int h = 0; h < n; h++) s[h] = std::pow(2.0, -8.0 * (h + 1) / n);
        return s;
    };
    int P = 1;
    while (2 * P <= H) P *= 2;
    std::vector<double> s = pow2(P);
    if (P < H) {
        const std::vector<double> twice = alibi_slopes(2 * P);
        for (int i = 0; (int)s.size() < H; i += 2) s.push_back(twice[i]);
    }
    return std::vector<double>(s.begin() + h0, n < 0 ? s.end() : s.begin() + h0 + n);
}
