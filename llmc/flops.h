// llmc/flops.h: FLOPs per token and MFU, by docs/design.md section 7.
// Model FLOPs per token = 6 x (matmul weights, LM head included, embedding tables excluded)
//                       + 12 x L x (H x hd) x T   (attention scores and values; PaLM appendix B,
//                                                  no causal discount).
// The harnesses' nominal figure is 6 x parameters.
#pragma once
#include <cstdint>
#include "llmc/model_config.h"

// weights that take part in a matmul, per token (real vocabulary, no padding)
static inline int64_t matmul_weight_count(const ModelConfig& c) {
    const int64_t C = c.n_embd;
    int64_t per_layer = (int64_t)cfg_qkv_dim(c) * C + (int64_t)cfg_q_dim(c) * C
                      + (int64_t)cfg_fc1_dim(c) * C + (int64_t)c.ffn * C;
    return per_layer * c.n_layer + (int64_t)c.vocab_size * C;
}

// training FLOPs (forward + backward) per token at sequence length T
static inline double model_flops_per_token(const ModelConfig& c, int T) {
    return 6.0 * (double)matmul_weight_count(c) + 12.0 * c.n_layer * (double)cfg_q_dim(c) * T;
}

static inline double nominal_flops_per_token(int64_t n_params) { return 6.0 * (double)n_params; }
