// llmc/param_table.h: the parameter table, the single source of truth for every weight.
// One row per tensor: name, shape, init, weight decay, TP split, and how it maps to
// Hugging Face tensor names. It drives the single allocation for params (and, with the
// same offsets, for grads and optimizer moments), initialisation, checkpoints,
// safetensors import/export and tensor-parallel sharding.
//
// Layout is layer-major: [wte, wpe] [block 0] [block 1] ... [lnf, lm_head], so a pipeline
// stage or a ZeRO-3 gather touches one contiguous range per layer.
// Matrices are stored [out, in] (PyTorch nn.Linear): y = x W^T + b.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
#include "llmc/model_config.h"

enum InitKind { INIT_NORMAL, INIT_NORMAL_RESID, INIT_ONES, INIT_ZEROS };
// How tensor parallelism splits a tensor: COL splits output rows, ROW splits input columns,
// QKV splits the q, k and v row blocks each by heads, GATEUP splits gate and up each,
// VOCAB splits embedding rows; NONE is replicated. SUM is replicated too, but each rank's gradient is a part of the
// whole (QK-norm's weights: a rank normalises its own heads), so it is summed over tp whatever the layout.
enum TpSplit { TP_NONE, TP_COL, TP_ROW, TP_QKV, TP_GATEUP, TP_VOCAB, TP_SUM };
// Whether every tp rank holds the whole tensor (the same values).
static inline bool tp_replicated(TpSplit s) { return s == TP_NONE || s == TP_SUM; }
// Whether a tensor's gradient is summed over tp: partial on every rank (TP_SUM), or under sequence parallelism a
// replicated tensor whose rank saw its part of the sequence.
static inline bool tp_grad_summed(TpSplit s, bool sp) { return s == TP_SUM || (sp && s == TP_NONE); }

// A Hugging Face tensor is a block of rows [row0, row0 + rows) of one of our tensors,
// optionally transposed (GPT-2's Conv1D stores [in, out]).
struct HfPiece {
    std::string name;
    int64_t row0, rows;
    bool transpose;
};

struct ParamSpec {
    std::string name;             // e.g. "h.3.qkv.w"
    int layer;                    // block index, -1 for embeddings and head
    int64_t rows, cols;           // shape [rows, cols]; cols == 1 for vectors
    bool is_matrix;               // 2-D: gets weight decay
    InitKind init;
    TpSplit tp;
    int64_t live_rows;            // rows that hold real values (vocab padding rows stay zero)
    std::vector<HfPiece> hf;      // where it lives in a Hugging Face checkpoint
    size_t offset;                // into the flat parameter buffer (floats)
    size_t numel() const { return (size_t)(rows * cols); }
};

struct ParamTable {
    std::vector<ParamSpec> specs;
    size_t total = 0;             // floats in the flat buffer
    // per block, indices into specs (the forward pass looks tensors up by role)
    int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1, lm_head = -1;
    struct Block {
        int ln1_w, ln1_b, qkv_w, qkv_b, attn_out_w, attn_out_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
        int q_norm_w = -1, k_norm_w = -1;  // --qk-norm: [hd] each
    };
    std::vector<Block> blocks;
};

// The four linear layers of a layer, k = 0..3 (the CUDA trainer's fp8 scaling states keep them in this order: tensor
// 4 l + k), and the weight of linear layer k of block b.
enum { LINEAR_QKV = 0, LINEAR_ATTN_OUT = 1, LINEAR_FC1 = 2, LINEAR_FC2 = 3, LINEARS_PER_LAYER = 4 };
static inline int linear_weight(const ParamTable::Block& b, int k) {
    return k == LINEAR_QKV ? b.qkv_w : k == LINEAR_ATTN_OUT ? b.attn_out_w : k == LINEAR_FC1 ? b.fc1_w : b.fc2_w;
}

static inline int param_add(ParamTable& t, const std::string& name, int layer, int64_t rows, int64_t cols,
                            bool matrix, InitKind init, TpSplit tp, std::vector<HfPiece> hf) {
    ParamSpec s{name, layer, rows, cols, matrix, init, tp, rows, std::move(hf), t.total};
    t.total += s.numel();
    t.specs.push_back(s);
    return (int)t.specs.size() - 1;
}

static inline ParamTable build_param_table(const ModelConfig& c) {
    ParamTable t;
    const bool g2 = cfg_gpt2_naming(c);
    const bool qw = c.naming == NAMING_QWEN;  // QWenLMHeadModel: GPT-2's prefixes, nn.Linear weights (not transposed)
    const bool ln = c.norm == NORM_LAYERNORM;
    const int64_t C = c.n_embd, qd = cfg_q_dim(c), kvd = cfg_kv_dim(c), F = c.ffn, F1 = cfg_fc1_dim(c);
    auto whole = [](const std::string& n, int64_t rows, bool tr) { return std::vector<HfPiece>{{n, 0, rows, tr}}; };

    t.wte = param_add(t, "wte", -1, c.padded_vocab, C, true, INIT_NORMAL, TP_VOCAB,
                      whole(g2 || qw ? "transformer.wte.weight" : "model.embed_tokens.weight", c.vocab_size, false));
    t.specs[t.wte].live_rows = c.vocab_size;
    if (c.pos == POS_LEARNED)
        t.wpe = param_add(t, "wpe", -1, c.seq_len, C, true, INIT_NORMAL, TP_NONE,
                          whole(g2 || qw ? "transformer.wpe.weight" : "model.embed_positions.weight", c.seq_len, false));

    for (int l = 0; l < c.n_layer; l++) {
        ParamTable::Block b;
        const std::string p = "h." + std::to_string(l) + ".";
        const std::string hp = g2 || qw ? "transformer.h." + std::to_string(l) + "." : "model.layers." + std::to_string(l) + ".";
        auto norm_pair = [&](const char* ours, const char* hf_g2, const char* hf_ll, int* w, int* bb) {
            std::string hn = hp + (g2 || qw ? hf_g2 : hf_ll);
            *w = param_add(t, p + ours + ".w", l, C, 1, false, INIT_ONES, TP_NONE, whole(hn + ".weight", C, false));
            *bb = ln ? param_add(t, p + ours + ".b", l, C, 1, false, INIT_ZEROS, TP_NONE, whole(hn + ".bias", C, false)) : -1;
        };
        // linear layer: weight [rows, cols] and a bias [rows] if asked. HF pieces split by rows.
        struct Split { const char* hf; int64_t rows; };
        auto linear = [&](const char* ours, int64_t rows, int64_t cols, InitKind init, TpSplit tp,
                          const char* hf_g2, std::vector<Split> hf_ll, int* w, int* bb, bool bias) {
            std::vector<HfPiece> hw, hb;
            if (g2) {
                hw.push_back({hp + hf_g2 + ".weight", 0, rows, true});
                hb.push_back({hp + hf_g2 + ".bias", 0, rows, false});
            } else {
                int64_t r0 = 0;
                for (const Split& s : hf_ll) {
                    hw.push_back({hp + s.hf + ".weight", r0, s.rows, false});
                    hb.push_back({hp + s.hf + ".bias", r0, s.rows, false});
                    r0 += s.rows;
                }
            }
            *w = param_add(t, p + ours + ".w", l, rows, cols, true, init, tp, hw);
            *bb = bias ? param_add(t, p + ours + ".b", l, rows, 1, false, INIT_ZEROS, tp == TP_ROW ? TP_NONE : tp, hb) : -1;
        };
        norm_pair("ln1", "ln_1", "input_layernorm", &b.ln1_w, &b.ln1_b);
        const std::vector<Split> qkv_hf = c.naming == NAMING_BAICHUAN  // Baichuan, Qwen-1: q, k, v rows in one tensor
                                              ? std::vector<Split>{{"self_attn.W_pack", qd + 2 * kvd}}
                                          : qw ? std::vector<Split>{{"attn.c_attn", qd + 2 * kvd}}
                                              : std::vector<Split>{{"self_attn.q_proj", qd}, {"self_attn.k_proj", kvd},
                                                                   {"self_attn.v_proj", kvd}};
        linear("qkv", qd + 2 * kvd, C, INIT_NORMAL, TP_QKV, "attn.c_attn", qkv_hf, &b.qkv_w, &b.qkv_b,
               cfg_has_qkv_bias(c));
        if (c.qk_norm) {  // one weight per head dimension, shared by the heads (Qwen3's self_attn.q_norm, k_norm)
            const std::string ha = hp + (g2 || qw ? "attn." : "self_attn.");
            b.q_norm_w = param_add(t, p + "q_norm.w", l, c.head_dim, 1, false, INIT_ONES, TP_SUM,
                                   whole(ha + "q_norm.weight", c.head_dim, false));
            b.k_norm_w = param_add(t, p + "k_norm.w", l, c.head_dim, 1, false, INIT_ONES, TP_SUM,
                                   whole(ha + "k_norm.weight", c.head_dim, false));
        }
        linear("attn_out", C, qd, INIT_NORMAL_RESID, TP_ROW, "attn.c_proj", {{qw ? "attn.c_proj" : "self_attn.o_proj", C}},
               &b.attn_out_w, &b.attn_out_b, c.bias);
        norm_pair("ln2", "ln_2", "post_attention_layernorm", &b.ln2_w, &b.ln2_b);
        if (c.mlp == MLP_SWIGLU)  // our fc1 rows: the gate, then up; Qwen-1's gate is w2 (c_proj(w1(x) * silu(w2(x))))
            linear("fc1", F1, C, INIT_NORMAL, TP_GATEUP, "mlp.c_fc",
                   qw ? std::vector<Split>{{"mlp.w2", F}, {"mlp.w1", F}}
                      : std::vector<Split>{{"mlp.gate_proj", F}, {"mlp.up_proj", F}}, &b.fc1_w, &b.fc1_b, c.bias);
        else
            linear("fc1", F1, C, INIT_NORMAL, TP_COL, "mlp.c_fc", {{"mlp.up_proj", F}}, &b.fc1_w, &b.fc1_b,
                   c.bias);
        linear("fc2", C, F, INIT_NORMAL_RESID, TP_ROW, "mlp.c_proj", {{qw ? "mlp.c_proj" : "mlp.down_proj", C}}, &b.fc2_w, &b.fc2_b,
               c.bias);
        t.blocks.push_back(b);
    }

    const std::string fn = g2 || qw ? "transformer.ln_f" : "model.norm";
    t.lnf_w = param_add(t, "lnf.w", -1, C, 1, false, INIT_ONES, TP_NONE, whole(fn + ".weight", C, false));
    if (ln) t.lnf_b = param_add(t, "lnf.b", -1, C, 1, false, INIT_ZEROS, TP_NONE, whole(fn + ".bias", C, false));
    if (!c.tied) {
        t.lm_head = param_add(t, "lm_head.w", -1, c.padded_vocab, C, true, INIT_NORMAL, TP_VOCAB,
                              whole("lm_head.weight", c.vocab_size, false));
        t.specs[t.lm_head].live_rows = c.vocab_size;
    }
    return t;
}

// Real parameter count: vocabulary padding rows excluded.
static inline int64_t param_count(const ParamTable& t) {
    int64_t n = 0;
    for (const ParamSpec& s : t.specs) n += s.live_rows * s.cols;
    return n;
}
