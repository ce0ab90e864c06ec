// llmc/parallel/memory_formula.h: the bytes one rank of a parallel layout holds, by formula (the trainers print
// it beside what they measure): weights, gradients, optimizer moments and activations. ZeRO
// divides by dp (llmc/parallel/zero.h), TP by tp (llmc/parallel/tp.h), PP by stages (llmc/parallel/pp_schedule.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include "llmc/model_config.h"
#include "llmc/parallel/layout.h"
#include "llmc/param_table.h"
#include "llmc/parallel/pp_schedule.h"
#include "llmc/parallel/zero.h"

struct MemPlan {
    double params = 0, grads = 0, optim = 0, acts = 0;  // bytes
};

// This rank of L (its stage, tp rank, dp rank) training micro-batches of B x T, n_mb of them per
// step, every buffer elem_bytes per element.
static inline MemPlan mem_plan(const ModelConfig& c, const Layout& L, int B, int T, int n_mb, size_t elem_bytes) {
    const ParamTable full = build_param_table(c);
    const LocalTable lt = gpt_local_table(c, full, L, L.topo.pp_rank, L.topo.tp_rank);
    const double eb = (double)elem_bytes, P = (double)lt.t.total * eb, dp = L.topo.dp, tp = L.topo.tp;
    // ZeRO-3 holds one layer's weights at a time, or the head's (final norm and embedding) together;
    // ZeRO-2/3 hold one layer's gradient bucket, plus the embedding and head buckets for the step
    double max_layer = 0, ends = 0;
    for (const Bucket& b : zero_buckets(lt.t, L.topo.dp)) {
        if (b.layer >= 0) max_layer = std::max(max_layer, (double)b.range.size() * eb);
        else ends += (double)b.range.size() * eb;
    }
    // activations: one micro-batch through one chunk, times the chunks in flight (1F1B: pp - stage
    // micro-batches; interleaved: its warm-up + 1 chunk passes; no pipeline: 1)
    const int pp = L.topo.pp, s = L.topo.pp_rank, n_chunks = L.n_chunks();
    const int total = n_mb * L.vpp;
    const int inflight = std::min(total, L.vpp == 1 ? pp - s : (pp - s - 1) * 2 + (L.vpp - 1) * pp + 1);
    const double Hl = c.n_head / tp, KVl = c.n_kv_head / tp, Fl = c.ffn / tp, Vpl = c.padded_vocab / tp;
    const double N = (double)B * T, Nl = L.sp ? N / tp : N, C = c.n_embd, hd = c.head_dim;
    const double F1l = c.mlp == MLP_SWIGLU ? 2.0 * Fl : Fl, sp_full = L.sp ? 2 * N * C : 0;
    const double qk_raw = c.qk_norm ? N * (Hl + KVl) * hd : 0;  // --qk-norm: the q and k heads before their norm
    const double per_layer = 4 * Nl * C + 4 * Nl + sp_full + N * ((Hl + 2 * KVl) * hd + Hl * hd + F1l + Fl) + qk_raw +
                             (double)B * Hl * T * T;
    const double per_chunk_io = 2 * Nl * C + 2 * N * sizeof(int32_t) / eb;
    const double head = (Nl * C + 2 * Nl + (L.sp ? N * C : 0) + N * Vpl + 2 * N);
    const double layers_per_chunk = (double)c.n_layer / n_chunks;
    // non-blocking sends keep their buffers [Nl,C] until the end of the step
    int n_sends = 0;
    for (const PpOp& o : pp_schedule(pp, L.vpp, n_mb, s)) n_sends += o.kind == PP_SEND_ACT || o.kind == PP_SEND_GRAD;
    MemPlan m;
    const double shard = P / dp;  // buckets are padded to multiples of dp (llmc/parallel/zero.h)
    m.params = L.zero >= 3 ? shard + std::max(max_layer, ends) : P;
    m.grads = L.zero >= 2 ? shard + ends + max_layer : P;
    m.optim = 2 * (L.zero >= 1 ? shard : P);
    m.acts = (inflight * (layers_per_chunk * per_layer + per_chunk_io) + (s == pp - 1 ? head : 0) + n_sends * Nl * C) * eb;
    return m;
}

// ----------------------------------------------------------------------------------------------
// The activation peak by walking the schedule, exact for every layout (uneven --layout, interleaved
// 1F1B): the pipeline executor (llmc/parallel/pp_exec.h) is run with callbacks that only count bytes, as the
// trainer counts them: a (micro-batch, chunk)'s activations from acquire to release, every sent
// buffer [Nl,C] until the end of the step. mem_plan_walked() is mem_plan() with these activations.
#include <functional>
#include "llmc/parallel/pp_exec.h"

// Bytes of one micro-batch's activations through chunk `chunk` (global chunk index) on a rank of L.
static inline double mem_plan_chunk_acts(const ModelConfig& c, const Layout& L, int B, int T, int chunk, size_t elem_bytes) {
    const double eb = (double)elem_bytes, tp = L.topo.tp;
    const double Hl = c.n_head / tp, KVl = c.n_kv_head / tp, Fl = c.ffn / tp, Vpl = c.padded_vocab / tp;
    const double N = (double)B * T, Nl = L.sp ? N / tp : N, C = c.n_embd, hd = c.head_dim;
    const double F1l = c.mlp == MLP_SWIGLU ? 2.0 * Fl : Fl, NC = L.sp ? N * C : 0;
    // per layer: x ln1 x_mid ln2 [Nl,C], 2 means and 2 rstds [Nl], SP gathers ln1/ln2 [N,C], qkv, atty, fc1, act, att
    // [B,Hl,T,T], --qk-norm's raw q and k heads [N,Hl+KVl,hd]
    const double qk_raw = c.qk_norm ? N * (Hl + KVl) * hd : 0;
    const double per_layer = 4 * Nl * C + 4 * Nl + 2 * NC + N * ((Hl + 2 * KVl) * hd + Hl * hd + F1l + Fl) + qk_raw +
                             (double)B * Hl * T * T;
    const int layers = L.chunk_first[chunk + 1] - L.chunk_first[chunk];
    double elems = layers * per_layer + 2 * Nl * C;  // x_out, dx [Nl,C]
    if (chunk == L.n_chunks() - 1)  // lnf, mean, rstd, SP lnf, logits, lse, per-token losses
        elems += Nl * C + 2 * Nl + NC + N * Vpl + 2 * N;
    return elems * eb + 2 * N * sizeof(int32_t);  // inputs, targets
}

// Peak activation bytes of a rank of L over one training step of n_mb micro-batches.
static inline double mem_plan_acts_walk(const ModelConfig& c, const Layout& L, int B, int T, int n_mb, size_t elem_bytes) {
    const int n_chunks = L.n_chunks();
    std::vector<double> chunk_bytes(n_chunks);
    for (int ch = 0; ch < n_chunks; ch++) chunk_bytes[ch] = mem_plan_chunk_acts(c, L, B, T, ch, elem_bytes);
    const double N = (double)B * T, Nl = L.sp ? N / L.topo.tp : N, send = Nl * c.n_embd * elem_bytes;
    double cur = 0, peak = 0;
    auto add = [&](double b) { cur += b; peak = std::max(peak, cur); };
    PpCallbacks cb;
    cb.acquire = [&](int, int ch) { add(chunk_bytes[ch]); };
    cb.release = [&](int, int ch) { cur -= chunk_bytes[ch]; };
    cb.forward = cb.backward = [](int, int) {};
    cb.recv_act = cb.recv_grad = [](int, int, int, int) {};
    cb.send_act = cb.send_grad = [&](int, int, int, int) { add(send); };
    pp_run(pp_schedule(L.topo.pp, L.vpp, n_mb, L.topo.pp_rank), n_chunks, true, cb);
    return peak;
}

static inline MemPlan mem_plan_walked(const ModelConfig& c, const Layout& L, int B, int T, int n_mb, size_t elem_bytes) {
    MemPlan m = mem_plan(c, L, B, T, n_mb, elem_bytes);
    m.acts = mem_plan_acts_walk(c, L, B, T, n_mb, elem_bytes);
    return m;
}
