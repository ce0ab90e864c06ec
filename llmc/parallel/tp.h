// llmc/parallel/tp.h: tensor parallelism's view of the parameter table. The TpSplit of every tensor
// (llmc/param_table.h) says which part of it tp rank r holds:
//   TP_COL    rows r*R/tp ..            (fc1 of GELU)
//   TP_QKV    q rows of heads r*H/tp .., then k and v rows of kv heads r*KV/tp ..
//   TP_GATEUP gate rows r*F/tp .., then up rows F + r*F/tp ..
//   TP_ROW    columns r*K/tp ..         (attn_out and fc2 weights; their biases are replicated)
//   TP_VOCAB  rows r*Vp/tp ..           (embedding, LM head; Vp is a multiple of 128*tp)
//   TP_NONE   everything (norms, row-parallel biases, position embedding)
//   TP_SUM    everything (QK-norm's weights; their gradients are summed over tp)
// A slice is a list of blocks of the full tensor, stacked by rows in the local tensor.
// tp_local_table() builds a rank's own parameter table: the tensors it keeps (its pipeline
// stage's), sliced for its tp rank, with fresh offsets into its flat buffer (dense; llmc/parallel/layout.h
// pads them into ZeRO buckets).
//
// The model under TP (Megatron), as the trainers run it:
//   attention: qkv column-parallel (rank r computes its H/tp query heads and KV/tp kv heads on
//              the whole input), attention on those heads, attn_out row-parallel (a partial
//              [N,C] sum), then the sum over tp and the replicated bias once.
//   the MLP:   fc1 column-parallel (GELU: F/tp rows; SwiGLU: F/tp gate rows and the matching F/tp
//              up rows, so the activation is local), fc2 row-parallel, then the sum over tp and
//              the replicated bias once. One sum per block half forward, one in backward (the
//              input gradient of the column-parallel matmul).
//   vocabulary: embedding rows Vp/tp per rank (a token outside them contributes zeros, summed
//              over tp); the head computes Vp/tp logit columns and the cross-entropy combines
//              row max, sum of exps and target logit over tp, never gathering the logits.
//   SP:        the norms and residual stream hold T/tp positions per rank: each sum over tp
//              becomes a reduce-scatter over the sequence, and the input of a column-parallel
//              matmul an all-gather; replicated tensors' gradients are then summed over tp.
#pragma once
#include <algorithm>
#include <string>
#include <vector>
#include "llmc/model_config.h"
#include "llmc/param_table.h"

struct TpBlock {
    int64_t row0, rows, col0, cols;  // in the full tensor
};

// "" or what does not divide by tp, naming the numbers.
static inline std::string tp_check(const ModelConfig& c, int tp) {
    auto no = [&](const char* what, int n) {
        return std::string("model '") + c.name + "': " + what + " " + std::to_string(n) + " is not divisible by --tp " + std::to_string(tp);
    };
    if (c.n_head % tp) return no("--heads", c.n_head);
    if (c.n_kv_head % tp) return no("--kv-heads", c.n_kv_head);
    if (c.ffn % tp) return no("--ffn", c.ffn);
    if (c.padded_vocab % tp) return no("padded vocabulary (pad with config_finalize(c, tp))", c.padded_vocab);
    return "";
}

static inline std::vector<TpBlock> tp_slice(const ParamSpec& s, const ModelConfig& c, int tp, int r) {
    const int64_t R = s.rows, K = s.cols;
    switch (s.tp) {
        case TP_COL: case TP_VOCAB: return {{r * R / tp, R / tp, 0, K}};
        case TP_ROW: return {{0, R, r * K / tp, K / tp}};
        case TP_QKV: {
            const int64_t qd = cfg_q_dim(c), kvd = cfg_kv_dim(c);
            return {{r * qd / tp, qd / tp, 0, K}, {qd + r * kvd / tp, kvd / tp, 0, K}, {qd + kvd + r * kvd / tp, kvd / tp, 0, K}};
        }
        case TP_GATEUP: {
            const int64_t F = c.ffn;
            return {{r * F / tp, F / tp, 0, K}, {F + r * F / tp, F / tp, 0, K}};
        }
        case TP_NONE: case TP_SUM: break;
    }
    return {{0, R, 0, K}};
}

// Copies the slice out of a full tensor (full_cols columns) into a local one, or back.
template <typename T>
static inline void tp_extract(const T* full, int64_t full_cols, const std::vector<TpBlock>& sl, T* local) {
    for (const TpBlock& b : sl)
        for (int64_t i = 0; i < b.rows; i++)
            for (int64_t j = 0; j < b.cols; j++) *local++ = full[(b.row0 + i) * full_cols + b.col0 + j];
}
template <typename T>
static inline void tp_insert(const T* local, const std::vector<TpBlock>& sl, int64_t full_cols, T* full) {
    for (const TpBlock& b : sl)
        for (int64_t i = 0; i < b.rows; i++)
            for (int64_t j = 0; j < b.cols; j++) full[(b.row0 + i) * full_cols + b.col0 + j] = *local++;
}

struct LocalTable {
    ParamTable t;                              // local specs, offsets into the rank's buffer
    std::vector<int> global;                   // local spec -> index in the full table
    std::vector<std::vector<TpBlock>> slice;   // local spec -> its blocks of the full tensor
};

// keep[k]: whether this rank holds full-table tensor k (its pipeline stage's tensors).
static inline LocalTable tp_local_table(const ParamTable& full, const ModelConfig& c, int tp, int r, const std::vector<bool>& keep) {
    LocalTable lt;
    std::vector<int> local_of(full.specs.size(), -1);
    for (size_t k = 0; k < full.specs.size(); k++) {
        if (!keep[k]) continue;
        const ParamSpec& f = full.specs[k];
        std::vector<TpBlock> sl = tp_slice(f, c, tp, r);
        ParamSpec s = f;
        s.rows = 0;
        for (const TpBlock& b : sl) s.rows += b.rows;
        s.cols = sl[0].cols;
        s.live_rows = s.rows;
        if (f.tp == TP_VOCAB) s.live_rows = std::max<int64_t>(0, std::min<int64_t>(s.rows, f.live_rows - sl[0].row0));
        s.offset = lt.t.total;
        lt.t.total += s.numel();
        local_of[k] = (int)lt.t.specs.size();
        lt.t.specs.push_back(s);
        lt.global.push_back((int)k);
        lt.slice.push_back(sl);
    }
    auto map = [&](int k) { return k < 0 ? -1 : local_of[k]; };
    lt.t.wte = map(full.wte); lt.t.wpe = map(full.wpe); lt.t.lnf_w = map(full.lnf_w); lt.t.lnf_b = map(full.lnf_b);
    lt.t.lm_head = map(full.lm_head);
    for (const ParamTable::Block& b : full.blocks) {
        lt.t.blocks.push_back({map(b.ln1_w), map(b.ln1_b), map(b.qkv_w), map(b.qkv_b), map(b.attn_out_w), map(b.attn_out_b),
                               map(b.ln2_w), map(b.ln2_b), map(b.fc1_w), map(b.fc1_b), map(b.fc2_w), map(b.fc2_b)});
        lt.t.blocks.back().q_norm_w = map(b.q_norm_w);
        lt.t.blocks.back().k_norm_w = map(b.k_norm_w);
    }
    return lt;
}
