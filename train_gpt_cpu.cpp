// train_gpt_cpu.cpp: the CPU reference trainer. GPT-3 and LLaMA (every switch of the model
// spec) in plain fp32 C++ with OpenMP: forward, backward, AdamW, schedule, clipping,
// gradient accumulation, validation, sampling, checkpoints. It is the oracle the CUDA trainer
// is checked against, so it is written for clarity and exact determinism. The layers, forward
// and backward, are in llmc/ref_ops.h; this file wires them into the model and the run.
//
// Parallel layouts (docs/design.md section 4) run under mpirun: world = pp x dp x tp ranks
// (llmc/parallel/topology.h). Tensor parallelism (Megatron) splits heads, kv heads, the MLP and the
// vocabulary (llmc/parallel/tp.h), with optional sequence parallelism in the norm and residual regions;
// pipeline parallelism runs contiguous chunks of layers on stages in a 1F1B or interleaved 1F1B
// order (llmc/parallel/pp_schedule.h, run by llmc/parallel/pp_exec.h); ZeRO 1-3 shards optimizer state, gradients
// and parameters over dp in padded buckets (llmc/parallel/zero.h). The layout, its checks and each rank's
// tensors are in llmc/parallel/layout.h, its communicator groups in llmc/parallel/comms.h, a rank's part of the whole
// model in llmc/run/assemble.h, the memory formula in llmc/parallel/memory_formula.h; every collective goes
// through llmc/parallel/comm_mpi.h. The forward and backward below are written layer by layer with each
// collective where it happens; with one process every collective is a no-op and the arithmetic
// is exactly that of the plain model.
//
// The model code is templated on the float type: float for training, double for the
// finite-difference check in test_gpt_cpu.cpp (which includes this file with TESTING defined).
//
// Shapes: B batch, T time, C channels, H query heads, KV kv heads, hd head dim,
// qd = H*hd, kvd = KV*hd, F ffn, F1 = F (gelu) or 2F (swiglu: gate then up), Vp padded vocab.
// On a rank: Hl = H/tp, KVl = KV/tp, Fl = F/tp, Vpl = Vp/tp, qdl = Hl*hd, N = B*T rows, and
// Nl = B*T/tp rows of the residual stream under SP (else N).
#include <omp.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "llmc/documents.h"
#include "llmc/run/flags.h"
#include "llmc/run/checkpoint.h"
#include "llmc/parallel/comm_mpi.h"
#include "llmc/parallel/comms.h"
#include "llmc/run/assemble.h"
#include "llmc/model_config.h"
#include "llmc/data/dataloader.h"
#include "llmc/run/mc_eval.h"
#include "llmc/flops.h"
#include "llmc/grad_clip.h"
#include "llmc/run/guard.h"
#include "llmc/run/test_hooks.h"
#include "llmc/init.h"
#include "llmc/parallel/layout.h"
#include "llmc/run/logger.h"
#include "llmc/lr_schedule.h"
#include "llmc/parallel/memory_formula.h"
#include "llmc/param_table.h"
#include "llmc/parallel/pp_exec.h"
#include "llmc/parallel/planner.h"
#include "llmc/parallel/pp_schedule.h"
#include "llmc/ref_ops.h"
#include "llmc/rng.h"
#include "llmc/run/sampling.h"
#include "llmc/run/signals.h"
#include "llmc/run/train_loop.h"
#include "llmc/parallel/topology.h"
#include "llmc/parallel/tp.h"
#include "llmc/run/weights_io.h"
#include "llmc/parallel/zero.h"

// ----------------------------------------------------------------------------------------------
// The model: flat buffers for this rank's params, grads and moments, laid out by its local
// parameter table (its stage's tensors, its tp slice); ZeRO shards some of them over dp.

// The big buffers (weights, gradients, AdamW moments) are std::vectors whose new memory the OpenMP threads zero, each
// thread the share a static loop over the elements gives it (as AdamW's and the global norm's loops later share them).
// Their pages are first touched in parallel, on a machine with several memory nodes near the threads that use them,
// and the vector's own value-initialisation, which would write every element again from one thread, is skipped:
// construct() without a value does nothing, so resize(n) of a fresh vector leaves the zeros. (Grown in place after
// shrinking, such a vector would keep old values: these buffers are only made fresh, by big_zeros.)
// p[0, n) <- x, each thread the share of a static loop (one thread below 256K elements)
template <typename T>
void threads_fill(T* p, int64_t n, T x) {
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
    for (int64_t i = 0; i < n; i++) p[i] = x;
}

template <typename T>
struct ZeroedByThreads {
    using value_type = T;
    ZeroedByThreads() = default;
    template <typename U>
    ZeroedByThreads(const ZeroedByThreads<U>&) {}
    T* allocate(size_t n) {
        T* p = std::allocator<T>().allocate(n);
        threads_fill(p, (int64_t)n, (T)0);
        return p;
    }
    void deallocate(T* p, size_t n) { std::allocator<T>().deallocate(p, n); }
    template <typename U>
    void construct(U*) noexcept {}  // value-initialisation: allocate() zeroed it
    template <typename U, typename... A>
    void construct(U* p, A&&... a) { ::new ((void*)p) U(std::forward<A>(a)...); }
    bool operator==(const ZeroedByThreads&) const { return true; }
    bool operator!=(const ZeroedByThreads&) const { return false; }
};
template <typename T>
using BigVec = std::vector<T, ZeroedByThreads<T>>;

// v <- n zeros in fresh memory (the old buffer freed first)
template <typename T>
void big_zeros(BigVec<T>* v, size_t n) {
    BigVec<T>().swap(*v);
    v->resize(n);
}

// every element of v <- x, by the threads in the same static shares
template <typename T>
void big_fill(BigVec<T>* v, T x) {
    threads_fill(v->data(), (int64_t)v->size(), x);
}

template <typename real>
struct LayerActs {
    std::vector<real> x;                          // [Nl,C] block input (residual stream)
    std::vector<real> ln1, ln1_mean, ln1_rstd;    // [Nl,C], [Nl], [Nl]
    std::vector<real> ln1_full;                   // [N,C] SP: ln1 gathered over the sequence
    std::vector<real> qkv;                        // [N, qdl+2kvdl], q and k after RoPE (and --qk-norm)
    std::vector<real> qk_raw;                     // [N, Hl+KVl, hd] --qk-norm: the q and k heads before their norm
    std::vector<real> att;                        // [B,Hl,T,T] softmax probabilities
    std::vector<real> atty;                       // [N,qdl] attention output, before attn_out
    std::vector<real> x_mid;                      // [Nl,C] residual after attention
    std::vector<real> ln2, ln2_mean, ln2_rstd;    // [Nl,C], [Nl], [Nl]
    std::vector<real> ln2_full;                   // [N,C] SP
    std::vector<real> fc1;                        // [N,F1l]
    std::vector<real> act;                        // [N,Fl]
};

// One micro-batch's activations through one chunk of layers (the whole model with pp = 1).
template <typename real>
struct ChunkActs {
    int chunk = 0, B = 0, T = 0;
    std::vector<LayerActs<real>> layers;               // the chunk's layers
    std::vector<real> x_out;                           // [Nl,C] chunk output
    std::vector<real> lnf, lnf_mean, lnf_rstd, lnf_full;  // last chunk: [Nl,C], [Nl], [Nl], SP [N,C]
    std::vector<real> logits, lse;                     // last chunk: [N,Vpl] (dlogits after backward), [N]
    std::vector<real> tok_loss;                        // last chunk: [N] each position's loss (0 where no target)
    std::vector<real> dx;                              // [Nl,C] grad of the output, then of the input
    std::vector<int32_t> inputs, targets;              // [N]
    bool has_targets = false;
    double loss = 0;
    int n_valid = 0;
    size_t bytes = 0;
};

template <typename real>
struct GPT {
    ModelConfig cfg;                     // the whole model
    Layout L;
    Comms cm;                            // the communicator groups (llmc/parallel/comms.h); one process: all size 1
    ParamTable full;                     // the whole model's parameter table
    ParamTable table;                    // this rank's tensors: the layout of params/grads/m/v
    std::vector<int> global;             // local spec -> spec of the full table
    std::vector<std::vector<TpBlock>> slice;  // local spec -> its blocks of the full tensor
    int Hl = 0, KVl = 0, Fl = 0, Vpl = 0, v0 = 0;  // local heads, kv heads, ffn, vocab rows from v0
    std::vector<Bucket> buckets;         // embeddings, one per layer, final norm and head (llmc/parallel/zero.h)
    std::vector<int> bucket_of;          // local spec -> bucket
    BigVec<real> params;                 // [table.total]; ZeRO-3: [shard] (gathered per bucket in pbuf)
    BigVec<real> grads;                  // [table.total]; ZeRO-2/3: [shard] (bucket scratch in gbuf)
    BigVec<real> m, v;                   // AdamW moments, [table.total]; ZeRO >= 1: [shard]
                                         // shard: [table.total / dp], this dp rank's pieces of the buckets
    std::vector<std::vector<real>> pbuf, gbuf;    // per bucket, only while in use
    std::vector<std::vector<std::unique_ptr<ChunkActs<real>>>> pool;  // free activations per chunk
    std::unique_ptr<ChunkActs<real>> cur;         // gpt_forward's activations (one stage)
    int B = 0, T = 0;                             // scratch sizes
    std::vector<real> rope_cos, rope_sin;         // [T, hd/2]
    std::vector<real> alibi;                      // [Hl] --pos alibi: the slopes of this rank's heads
    Documents docs;                               // documents in a row (llmc/documents.h); off: one causal sequence
    std::vector<int32_t> doc, pos;                // [N] with docs.marks(): the chunk's document starts and positions
    std::vector<real> dres, dln, dfull, dres_full, dtmp, seq_buf, seq_out;  // [Nl,C] .. [N,C] scratch
    std::vector<real> dqkv, datty, dfc1, dact, row_mx, row_sum, row_tgt;    // backward scratch
    std::vector<real> head_n, head_rnorm, dhead_n;  // --norm-head: the head's unit rows [Vpl,C], 1/|row| [Vpl], grad
    double loss = 0;
    int n_valid = 0;
    size_t act_bytes = 0, act_peak = 0, pbuf_bytes = 0, pbuf_peak = 0, gbuf_bytes = 0, gbuf_peak = 0;

    real* P(int idx) {
        if (idx < 0) return nullptr;
        const size_t off = table.specs[idx].offset;
        if (L.zero < 3) return params.data() + off;
        const int b = bucket_of[idx];
        return pbuf[b].data() + (off - buckets[b].range.lo);
    }
    real* G(int idx) {
        if (idx < 0) return nullptr;
        const size_t off = table.specs[idx].offset;
        if (L.zero < 2) return grads.data() + off;
        const int b = bucket_of[idx];
        return gbuf[b].data() + (off - buckets[b].range.lo);
    }
};

template <typename real>
void gpt_build(GPT<real>* g, const ModelConfig& c, const Layout* layout = nullptr, const Comms* comms = nullptr) {
    g->cfg = c;
    g->L = layout ? *layout : layout_single(c);
    g->cm = comms ? *comms : Comms();
    const Layout& L = g->L;
    const int tp = L.topo.tp, dp = L.topo.dp;
    g->full = build_param_table(c);
    LocalTable lt = gpt_local_table(c, g->full, L, L.topo.pp_rank, L.topo.tp_rank);
    g->table = lt.t;
    g->global = lt.global;
    g->slice = lt.slice;
    g->Hl = c.n_head / tp; g->KVl = c.n_kv_head / tp; g->Fl = c.ffn / tp;
    g->Vpl = c.padded_vocab / tp; g->v0 = L.topo.tp_rank * g->Vpl;
    g->buckets = zero_buckets(g->table, dp);
    g->bucket_of.assign(g->table.specs.size(), -1);
    for (int b = 0; b < (int)g->buckets.size(); b++)
        for (int k = g->buckets[b].first_spec; k < g->buckets[b].end_spec; k++) g->bucket_of[k] = b;
    const size_t total = g->table.total, sh = zero_shard_size(g->table, dp);
    big_zeros(&g->params, L.zero >= 3 ? sh : total);
    big_zeros(&g->grads, L.zero >= 2 ? sh : total);
    big_zeros(&g->m, L.zero >= 1 ? sh : total);
    big_zeros(&g->v, L.zero >= 1 ? sh : total);
    g->pbuf.assign(g->buckets.size(), {});
    g->gbuf.assign(g->buckets.size(), {});
    g->pool.clear();
    g->pool.resize(L.chunk_first.size() - 1);
}

// This rank's initial weights, one whole tensor at a time (part_init, llmc/run/assemble.h): the seeded init of
// llmc/init.h (independent of threads and layout), or --init-from's file when hf is open; its ZeRO shard under
// ZeRO 3; the moments zero. Returns the seconds it took; *n_made: the values made (the whole tensors it holds).
template <typename real>
double gpt_init(GPT<real>* g, uint64_t seed, const SafeTensors* hf = nullptr, int64_t* n_made = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t n;
    if (g->L.zero >= 3) {
        std::vector<real> part(g->table.total, (real)0);
        n = part_init(g->cfg, g->full, g->table, g->global, g->slice, seed, hf, part.data());
        zero_take_shard(g->buckets, g->L.topo.dp, g->L.topo.dp_rank, part.data(), g->params.data());
    } else {  // straight into the weights (their bucket padding zero since gpt_build)
        n = part_init(g->cfg, g->full, g->table, g->global, g->slice, seed, hf, g->params.data());
    }
    big_fill(&g->m, (real)0);
    big_fill(&g->v, (real)0);
    if (n_made) *n_made = n;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The weights whole over this rank's table [t.total]: its buffer, or under ZeRO 3 its shard all-gathered over dp per
// bucket. Every rank of the dp group calls it.
template <typename real>
std::vector<real> gpt_params_whole(GPT<real>* g) {
    if (g->L.zero < 3) return std::vector<real>(g->params.begin(), g->params.end());
    const int dp = g->L.topo.dp;
    std::vector<real> out(g->table.total);
    for (const Bucket& b : g->buckets)
        comm_all_gather(g->cm.dp, g->params.data() + zero_shard_offset(b, dp), out.data() + b.range.lo, b.range.size() / dp);
    return out;
}

// The weights as a Hugging Face file (--save-safetensors), one whole tensor at a time on world rank 0, the others
// sending their slices (assemble_export, llmc/run/assemble.h). Every rank calls it. A sender's wait covers rank
// 0's writing of the tensors before: under --io-timeout.
template <typename real>
void gpt_export(GPT<real>* g, const std::string& path) {
    const std::vector<real> mine = gpt_params_whole(g);
    AssembleTransport<real> io;
    io.send = [&](int, const real* data, size_t n) {
        CommRequest req;
        comm_send(g->cm.world, data, n, 0, 100, &req);
        comm_wait(&req);
    };
    io.recv = [&](int, int from, real* data, size_t n) { comm_recv(g->cm.world, data, n, from, 100); };
    comm_io_wait([&] {
        if (g->L.topo.rank == 0) test_hooks_write_delay();  // tests only: slow storage (llmc/run/test_hooks.h)
        assemble_export(path, g->cfg, g->full, g->L, mine.data(), 0, io);
    });
}

// ----------------------------------------------------------------------------------------------
// ZeRO (llmc/parallel/zero.h): parameters gathered per bucket just before use (ZeRO-3), gradients
// reduced per bucket. Every bucket is padded to a multiple of dp*8, so dp rank r's piece is
// bucket.range.size()/dp elements and sits at zero_shard_offset in its shard buffers.

// ZeRO-3: bucket b's weights are read from here on: gathered over dp into its buffer (at once: the CPU trainer has
// no prefetch).
template <typename real>
void dp_params_use(GPT<real>* g, int b) {
    if (g->L.zero < 3 || !g->pbuf[b].empty()) return;
    const Bucket& bk = g->buckets[b];
    const int dp = g->L.topo.dp;
    g->pbuf[b].resize(bk.range.size());
    comm_all_gather(g->cm.dp, g->params.data() + zero_shard_offset(bk, dp), g->pbuf[b].data(), bk.range.size() / dp);
    g->pbuf_bytes += bk.range.size() * sizeof(real);
    g->pbuf_peak = std::max(g->pbuf_peak, g->pbuf_bytes);
}

// ZeRO-3: bucket b's weights are not read again until its next dp_params_use: its buffer is freed.
template <typename real>
void dp_params_done(GPT<real>* g, int b) {
    if (g->L.zero < 3 || g->pbuf[b].empty()) return;
    g->pbuf_bytes -= g->pbuf[b].size() * sizeof(real);
    std::vector<real>().swap(g->pbuf[b]);
}

// ZeRO-2/3: a zeroed gradient scratch for bucket b (kept until the bucket is reduced).
template <typename real>
void grads_begin(GPT<real>* g, int b) {
    if (g->L.zero < 2 || !g->gbuf[b].empty()) return;
    g->gbuf[b].assign(g->buckets[b].range.size(), 0);
    g->gbuf_bytes += g->gbuf[b].size() * sizeof(real);
    g->gbuf_peak = std::max(g->gbuf_peak, g->gbuf_bytes);
}

// Sums bucket b's gradients (buf: its values) over the ranks that computed parts of them:
// under SP the replicated tensors over tp (each rank saw its part of the sequence), QK-norm's weights over tp
// always (each rank normalised its own heads); the tied
// embedding between first and last stage; then over dp: all-reduce (ZeRO 0, 1) or
// reduce-scatter added into this rank's shard (ZeRO 2, 3).
template <typename real>
void grads_reduce_bucket(GPT<real>* g, int b, real* buf) {
    const Layout& L = g->L;
    const Comms& cm = g->cm;
    const Bucket& bk = g->buckets[b];
    for (int k = bk.first_spec; k < bk.end_spec; k++) {
        const ParamSpec& s = g->table.specs[k];
        real* p = buf + (s.offset - bk.range.lo);
        if (L.topo.tp > 1 && tp_grad_summed(s.tp, L.sp)) comm_all_reduce_sum(cm.tp, p, s.numel());
        if (k == g->table.wte && g->cfg.tied && L.topo.pp > 1) comm_all_reduce_sum(cm.emb, p, s.numel());
    }
    if (L.zero < 2) { comm_all_reduce_sum(cm.dp, buf, bk.range.size()); return; }
    const size_t n = bk.range.size() / L.topo.dp;
    std::vector<real> part(n);
    comm_reduce_scatter(cm.dp, buf, part.data(), n);
    real* dst = g->grads.data() + zero_shard_offset(bk, L.topo.dp);
    for (size_t i = 0; i < n; i++) dst[i] += part[i];
}

// ZeRO-2/3, after a layer's backward: its bucket is reduced now and its scratch freed.
template <typename real>
void grads_bucket_done(GPT<real>* g, int b) {
    if (g->L.zero < 2) return;
    grads_reduce_bucket(g, b, g->gbuf[b].data());
    g->gbuf_bytes -= g->gbuf[b].size() * sizeof(real);
    std::vector<real>().swap(g->gbuf[b]);
}

// End of the step: every bucket not reduced yet (all of them for ZeRO 0/1; the embedding and
// head buckets for ZeRO 2/3, whose gradients gather over the whole step and over two stages).
template <typename real>
void grads_reduce_all(GPT<real>* g) {
    for (int b = 0; b < (int)g->buckets.size(); b++) {
        if (g->L.zero < 2) { grads_reduce_bucket(g, b, g->grads.data() + g->buckets[b].range.lo); continue; }
        if (g->buckets[b].layer >= 0) continue;
        grads_begin(g, b);
        grads_bucket_done(g, b);
    }
}

template <typename real>
void gpt_zero_grad(GPT<real>* g) {
    big_fill(&g->grads, (real)0);
    for (int b = 0; b < (int)g->buckets.size(); b++)
        if (!g->gbuf[b].empty()) { g->gbuf_bytes -= g->gbuf[b].size() * sizeof(real); std::vector<real>().swap(g->gbuf[b]); }
}

// ----------------------------------------------------------------------------------------------
// Tensor-parallel communication of the residual stream [B,T,C]. Without SP every tp rank holds
// all of it; with SP rank r holds the sequence part [B, T/tp, C] starting at t = r*T/tp.

// Sum over tp of partial results full[N,C] (after a row-parallel matmul, or the input gradient
// of a column-parallel one): SP keeps this rank's sequence part (reduce-scatter, returned in
// seq_out), otherwise all of it (all-reduce in place).
template <typename real>
real* tp_sum(GPT<real>* g, real* full, int B, int T) {
    const Layout& L = g->L;
    const int C = g->cfg.n_embd;
    if (!L.sp) { comm_all_reduce_sum(g->cm.tp, full, (size_t)B * T * C); return full; }
    const int tp = L.topo.tp, Tl = T / tp;
    real* packed = g->seq_buf.data();  // [tp][B][Tl][C]
    for (int r = 0; r < tp; r++)
        for (int b = 0; b < B; b++)
            std::copy(full + ((size_t)b * T + r * Tl) * C, full + ((size_t)b * T + (r + 1) * Tl) * C,
                      packed + (((size_t)r * B + b) * Tl) * C);
    comm_reduce_scatter(g->cm.tp, packed, g->seq_out.data(), (size_t)B * Tl * C);
    return g->seq_out.data();
}

// Input of a column-parallel matmul (or the output gradient of a row-parallel one): SP gathers
// every rank's sequence part of x into full [B,T,C]; otherwise x is already whole.
template <typename real>
const real* tp_gather(GPT<real>* g, const real* x, real* full, int B, int T) {
    const Layout& L = g->L;
    if (!L.sp) return x;
    const int C = g->cfg.n_embd, tp = L.topo.tp, Tl = T / tp;
    real* packed = g->seq_buf.data();
    comm_all_gather(g->cm.tp, x, packed, (size_t)B * Tl * C);
    for (int r = 0; r < tp; r++)
        for (int b = 0; b < B; b++)
            std::copy(packed + (((size_t)r * B + b) * Tl) * C, packed + (((size_t)r * B + b + 1) * Tl) * C,
                      full + ((size_t)b * T + r * Tl) * C);
    return full;
}

// out[n] = x[n] + (y[n] + bias): the residual add, the row-parallel bias added once after the sum.
template <typename real>
void residual_add(real* out, const real* x, const real* y, const real* bias, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[(size_t)n * C + c] + (y[(size_t)n * C + c] + (bias ? bias[c] : (real)0));
}

// SP: the row-parallel bias gradient from this rank's rows (summed over tp with the norms).
template <typename real>
void bias_backward(real* db, const real* dout, int N, int C) {
    if (!db) return;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        real s = 0;
        for (int n = 0; n < N; n++) s += dout[(size_t)n * C + c];
        db[c] += s;
    }
}

// ----------------------------------------------------------------------------------------------
// Forward and backward of one chunk of layers for one micro-batch.

template <typename real>
void gpt_alloc_scratch(GPT<real>* g, int B, int T) {
    if (g->B == B && g->T == T) return;
    const ModelConfig& c = g->cfg;
    const size_t N = (size_t)B * T, Nl = g->L.sp ? N / g->L.topo.tp : N, C = c.n_embd, hd = c.head_dim;
    const size_t qdl = g->Hl * hd, qkvdl = (g->Hl + 2 * g->KVl) * hd, F1l = c.mlp == MLP_SWIGLU ? 2 * g->Fl : g->Fl;
    g->B = B;
    g->T = T;
    g->dres.resize(Nl * C); g->dln.resize(Nl * C); g->dfull.resize(N * C); g->dtmp.resize(N * C);
    if (g->L.sp) { g->dres_full.resize(N * C); g->seq_buf.resize(N * C); g->seq_out.resize(Nl * C); }
    g->dqkv.resize(N * qkvdl); g->datty.resize(N * qdl); g->dfc1.resize(N * F1l); g->dact.resize(N * g->Fl);
    g->row_mx.resize(N); g->row_sum.resize(N); g->row_tgt.resize(N);
    if (c.norm_head && g->L.topo.pp_rank == g->L.topo.pp - 1) {  // the stage of the LM head
        g->head_n.resize((size_t)g->Vpl * C); g->head_rnorm.resize(g->Vpl); g->dhead_n.resize((size_t)g->Vpl * C);
    }
    if (c.pos == POS_ROPE) rope_tables(c, T, &g->rope_cos, &g->rope_sin);
    if (c.pos == POS_ALIBI) {  // this rank's heads are heads tp_rank * Hl .. of the model
        const std::vector<double> s = alibi_slopes(c.n_head, g->L.topo.tp_rank * g->Hl, g->Hl);
        g->alibi.assign(s.begin(), s.end());
    }
}

template <typename real>
ChunkActs<real>* acts_acquire(GPT<real>* g, int chunk, int B, int T) {
    gpt_alloc_scratch(g, B, T);
    std::vector<std::unique_ptr<ChunkActs<real>>>& free_list = g->pool[chunk];
    while (!free_list.empty() && (free_list.back()->B != B || free_list.back()->T != T)) free_list.pop_back();
    ChunkActs<real>* a;
    if (!free_list.empty()) {
        a = free_list.back().release();
        free_list.pop_back();
    } else {
        const ModelConfig& c = g->cfg;
        const size_t N = (size_t)B * T, Nl = g->L.sp ? N / g->L.topo.tp : N, C = c.n_embd, hd = c.head_dim;
        const size_t qdl = g->Hl * hd, qkvdl = (g->Hl + 2 * g->KVl) * hd, F1l = c.mlp == MLP_SWIGLU ? 2 * g->Fl : g->Fl;
        const size_t NC = g->L.sp ? N * C : 0;
        a = new ChunkActs<real>();
        a->chunk = chunk; a->B = B; a->T = T;
        a->layers.resize(g->L.chunk_first[chunk + 1] - g->L.chunk_first[chunk]);
        for (LayerActs<real>& la : a->layers) {
            la.x.resize(Nl * C); la.ln1.resize(Nl * C); la.ln1_mean.resize(Nl); la.ln1_rstd.resize(Nl); la.ln1_full.resize(NC);
            la.qkv.resize(N * qkvdl); la.att.resize((size_t)B * g->Hl * T * T); la.atty.resize(N * qdl);
            la.qk_raw.resize(c.qk_norm ? N * (g->Hl + g->KVl) * hd : 0);
            la.x_mid.resize(Nl * C); la.ln2.resize(Nl * C); la.ln2_mean.resize(Nl); la.ln2_rstd.resize(Nl); la.ln2_full.resize(NC);
            la.fc1.resize(N * F1l); la.act.resize(N * g->Fl);
            for (const std::vector<real>* v : {&la.x, &la.ln1, &la.ln1_mean, &la.ln1_rstd, &la.ln1_full, &la.qkv, &la.qk_raw,
                                               &la.att, &la.atty, &la.x_mid, &la.ln2, &la.ln2_mean, &la.ln2_rstd,
                                               &la.ln2_full, &la.fc1, &la.act})
                a->bytes += v->size() * sizeof(real);  // measured from the buffers (mem_plan_chunk_acts is the formula)
        }
        a->x_out.resize(Nl * C); a->dx.resize(Nl * C);
        a->inputs.resize(N); a->targets.resize(N);
        if (chunk + 1 == (int)g->L.chunk_first.size() - 1) {
            a->lnf.resize(Nl * C); a->lnf_mean.resize(Nl); a->lnf_rstd.resize(Nl); a->lnf_full.resize(NC);
            a->logits.resize(N * g->Vpl); a->lse.resize(N); a->tok_loss.resize(N);
        }
        for (const std::vector<real>* v : {&a->x_out, &a->dx, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->lnf_full, &a->logits, &a->lse,
                                           &a->tok_loss})
            a->bytes += v->size() * sizeof(real);
        a->bytes += (a->inputs.size() + a->targets.size()) * sizeof(int32_t);
    }
    g->act_bytes += a->bytes;
    g->act_peak = std::max(g->act_peak, g->act_bytes);
    return a;
}

template <typename real>
void acts_release(GPT<real>* g, ChunkActs<real>* a) {
    g->act_bytes -= a->bytes;
    g->pool[a->chunk].emplace_back(a);
}

// Vocabulary-parallel cross-entropy over the first V of Vp logits; each rank holds columns
// [v0, v0 + Vpl) of logits [N,Vpl]. Full logits are never gathered: the row max, the sum of
// exps and the target logit are summed (max-ed) over tp. Returns the sum of the losses of the
// valid rows (targets of -1 are ignored); lse[N] keeps log-sum-exp for backward, tok_loss[N] each row's loss (0 where
// ignored: what --eval sums per ending).
template <typename real>
double vocab_parallel_ce_forward(GPT<real>* g, real* lse, real* tok_loss, const real* logits, const int32_t* targets,
                                 int N) {
    const int V = g->cfg.vocab_size, Vpl = g->Vpl, v0 = g->v0, nv = std::max(0, std::min(Vpl, V - v0));
    real* mx = g->row_mx.data(); real* sum = g->row_sum.data(); real* tgt = g->row_tgt.data();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real* l = logits + (size_t)n * Vpl;
        mx[n] = max16(nv, l);
        const int t = targets[n] - v0;
        tgt[n] = t >= 0 && t < nv ? l[t] : (real)0;
    }
    comm_all_reduce_max(g->cm.tp, mx, N);
    comm_all_reduce_sum(g->cm.tp, tgt, N);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real* l = logits + (size_t)n * Vpl;
        const real m = mx[n];
        sum[n] = sum16<real>(nv, [&](int v) { return exp_vec(l[v] - m); });
    }
    comm_all_reduce_sum(g->cm.tp, sum, N);
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int n = 0; n < N; n++) {
        lse[n] = mx[n] + (real)log_pos((double)sum[n]);  // our log, not the C library's (llmc/ref_ops.h: determinism)
        tok_loss[n] = targets[n] >= 0 ? lse[n] - tgt[n] : (real)0;
        if (targets[n] >= 0) total += (double)(lse[n] - tgt[n]);
    }
    return total;
}

// logits [N,Vpl] are overwritten with dloss/dlogits = (softmax - onehot) * scale on valid rows.
template <typename real>
void vocab_parallel_ce_backward(GPT<real>* g, real* logits, const real* lse, const int32_t* targets, int N, real scale) {
    const int V = g->cfg.vocab_size, Vpl = g->Vpl, v0 = g->v0, nv = std::max(0, std::min(Vpl, V - v0));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real* l = logits + (size_t)n * Vpl;
        if (targets[n] < 0) {
            std::fill(l, l + Vpl, (real)0);
            continue;
        }
        const int t = targets[n] - v0;  // the target's column, when this rank holds it (0 <= t < nv)
        const bool here = t >= 0 && t < nv;
        const real ln = lse[n], lt = here ? l[t] : (real)0;
        for (int v = 0; v < nv; v++) l[v] = exp_vec(l[v] - ln) * scale;  // softmax (a loop that vectorises)
        std::fill(l + nv, l + Vpl, (real)0);                              // padding columns
        if (here) l[t] = (exp_vec(lt - ln) - (real)1) * scale;
    }
}

// Documents (--reset-position-ids, --reset-attention-mask): g->doc and g->pos of chunk a's tokens, derived again
// by its forward and its backward (every chunk has the tokens, llmc/documents.h). Returns g->doc for the attention
// (null without --reset-attention-mask); *pos g->pos for the positions (null without --reset-position-ids).
template <typename real>
const int32_t* chunk_documents(GPT<real>* g, const ChunkActs<real>* a, const int32_t** pos) {
    *pos = nullptr;
    if (!g->docs.marks()) return nullptr;
    const size_t N = (size_t)a->B * a->T;
    g->doc.resize(N);
    g->pos.resize(N);
    documents_mark(g->docs, a->inputs.data(), a->B, a->T, g->doc.data(), g->pos.data());
    if (g->docs.reset_positions) *pos = g->pos.data();
    return g->docs.reset_mask ? g->doc.data() : nullptr;
}

// The position of this rank's row n of a micro-batch of B x T (SP: its slice of T / tp tokens of each sequence): t,
// or pos[b*T + t] when the positions restart per document.
static inline int local_row_pos(const Layout& L, int T, const int32_t* pos, int n) {
    const int Tl = L.sp ? T / L.topo.tp : T, t = L.topo.tp_rank * (L.sp ? Tl : 0) + n % Tl;
    return pos ? pos[(size_t)(n / Tl) * T + t] : t;
}

// Forward of chunk a->chunk on a->inputs (its tokens) and a->layers[0].x (received, but for the first chunk); the last
// chunk computes logits and, with targets, the mean loss.
template <typename real>
void gpt_forward_chunk(GPT<real>* g, ChunkActs<real>* a) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const Layout& L = g->L;
    const int chunk = a->chunk, B = a->B, T = a->T, tp = L.topo.tp, Tl = L.sp ? T / tp : T;
    const int N = B * T, Nl = B * Tl, C = c.n_embd, hd = c.head_dim, Hl = g->Hl, KVl = g->KVl, qdl = Hl * hd,
              qkvdl = (Hl + 2 * KVl) * hd, Fl = g->Fl, F1l = c.mlp == MLP_SWIGLU ? 2 * Fl : Fl, Vpl = g->Vpl;
    const bool rms = c.norm == NORM_RMSNORM, swiglu = c.mlp == MLP_SWIGLU;
    const int l0 = L.chunk_first[chunk], l1 = L.chunk_first[chunk + 1], last = (int)L.chunk_first.size() - 2;
    const int32_t* pos = nullptr;
    const int32_t* doc = chunk_documents(g, a, &pos);

    if (chunk == 0) {
        // vocabulary-parallel embedding: a token outside this rank's rows gives zeros, the sum over
        // tp fills them in; then the position embedding of this rank's positions
        const int b = g->bucket_of[t.wte];
        dp_params_use(g, b);
        const real* wte = g->P(t.wte);
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const int v = a->inputs[n] - g->v0;
            for (int ch = 0; ch < C; ch++) g->dtmp[(size_t)n * C + ch] = v >= 0 && v < Vpl ? wte[(size_t)v * C + ch] : (real)0;
        }
        const real* x = tp_sum(g, g->dtmp.data(), B, T);  // [Nl,C]
        const real* wpe = g->P(t.wpe);
        real* x0 = a->layers[0].x.data();
#pragma omp parallel for schedule(static)
        for (int n = 0; n < Nl; n++) {
            const int p = local_row_pos(L, T, pos, n);
            for (int ch = 0; ch < C; ch++) x0[(size_t)n * C + ch] = x[(size_t)n * C + ch] + (wpe ? wpe[(size_t)p * C + ch] : (real)0);
        }
        dp_params_done(g, b);
    }
    for (int l = l0; l < l1; l++) {
        const ParamTable::Block& w = t.blocks[l];
        LayerActs<real>& la = a->layers[l - l0];
        real* x_out = l + 1 < l1 ? a->layers[l - l0 + 1].x.data() : a->x_out.data();
        const int bk = g->bucket_of[w.ln1_w];
        dp_params_use(g, bk);  // ZeRO-3: this layer's weights, freed at the end of the layer
        norm_forward(la.ln1.data(), la.ln1_mean.data(), la.ln1_rstd.data(), la.x.data(), g->P(w.ln1_w), g->P(w.ln1_b), Nl, C,
                     c.norm_eps, rms);
        const real* ln1 = tp_gather(g, la.ln1.data(), la.ln1_full.data(), B, T);  // [N,C]
        matmul_forward(la.qkv.data(), ln1, g->P(w.qkv_w), g->P(w.qkv_b), N, C, qkvdl);  // column-parallel: this rank's heads
        if (c.qk_norm)
            qk_norm_forward(la.qkv.data(), la.qk_raw.data(), g->P(w.q_norm_w), g->P(w.k_norm_w), N, Hl, KVl, hd, c.norm_eps);
        if (c.pos == POS_ROPE) rope_rotate(la.qkv.data(), g->rope_cos.data(), g->rope_sin.data(), B, T, Hl, KVl, hd, +1, pos);
        attention_forward(la.atty.data(), la.att.data(), la.qkv.data(), B, T, Hl, KVl, hd,
                          c.pos == POS_ALIBI ? g->alibi.data() : (const real*)nullptr, doc);
        matmul_forward(g->dtmp.data(), la.atty.data(), g->P(w.attn_out_w), (const real*)nullptr, N, qdl, C);  // row-parallel
        const real* y = tp_sum(g, g->dtmp.data(), B, T);  // [Nl,C]
        residual_add(la.x_mid.data(), la.x.data(), y, g->P(w.attn_out_b), Nl, C);
        norm_forward(la.ln2.data(), la.ln2_mean.data(), la.ln2_rstd.data(), la.x_mid.data(), g->P(w.ln2_w), g->P(w.ln2_b), Nl,
                     C, c.norm_eps, rms);
        const real* ln2 = tp_gather(g, la.ln2.data(), la.ln2_full.data(), B, T);
        matmul_forward(la.fc1.data(), ln2, g->P(w.fc1_w), g->P(w.fc1_b), N, C, F1l);  // column-parallel: gate and up split each
        mlp_act_forward(la.act.data(), la.fc1.data(), N, Fl, swiglu);
        matmul_forward(g->dtmp.data(), la.act.data(), g->P(w.fc2_w), (const real*)nullptr, N, Fl, C);  // row-parallel
        y = tp_sum(g, g->dtmp.data(), B, T);
        residual_add(x_out, la.x_mid.data(), y, g->P(w.fc2_b), Nl, C);
        dp_params_done(g, bk);
    }
    if (chunk == last) {
        const int head = c.tied ? t.wte : t.lm_head, bf = g->bucket_of[t.lnf_w], bh = g->bucket_of[head];
        dp_params_use(g, bf);
        dp_params_use(g, bh);
        norm_forward(a->lnf.data(), a->lnf_mean.data(), a->lnf_rstd.data(), a->x_out.data(), g->P(t.lnf_w), g->P(t.lnf_b), Nl, C,
                     c.norm_eps, rms);
        const real* lnf = tp_gather(g, a->lnf.data(), a->lnf_full.data(), B, T);
        const real* hw = g->P(head);
        if (c.norm_head) {  // the head's rows of unit length (this rank's vocabulary rows: each row is whole)
            norm_rows_forward(g->head_n.data(), g->head_rnorm.data(), hw, Vpl, C);
            hw = g->head_n.data();
        }
        matmul_forward(a->logits.data(), lnf, hw, (const real*)nullptr, N, C, Vpl);  // this rank's vocabulary columns
        dp_params_done(g, bf);
        dp_params_done(g, bh);
        a->loss = 0;
        a->n_valid = 0;
        if (a->has_targets) {
            for (int n = 0; n < N; n++) a->n_valid += a->targets[n] >= 0;
            double total = vocab_parallel_ce_forward(g, a->lse.data(), a->tok_loss.data(), a->logits.data(),
                                                     a->targets.data(), N);
            a->loss = a->n_valid ? total / a->n_valid : 0.0;
        }
    }
}

// Backward of (loss * loss_scale) through chunk a->chunk, accumulated into the gradients. The
// last chunk starts from its loss, the others from a->dx (gradient of the chunk output); the
// first chunk ends in the embeddings, the others leave the gradient of their input in a->dx.
template <typename real>
void gpt_backward_chunk(GPT<real>* g, ChunkActs<real>* a, double loss_scale) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const Layout& L = g->L;
    const int chunk = a->chunk, B = a->B, T = a->T, tp = L.topo.tp, Tl = L.sp ? T / tp : T;
    const int N = B * T, Nl = B * Tl, C = c.n_embd, hd = c.head_dim, Hl = g->Hl, KVl = g->KVl, qdl = Hl * hd,
              qkvdl = (Hl + 2 * KVl) * hd, Fl = g->Fl, F1l = c.mlp == MLP_SWIGLU ? 2 * Fl : Fl, Vpl = g->Vpl;
    const bool rms = c.norm == NORM_RMSNORM, swiglu = c.mlp == MLP_SWIGLU;
    const int l0 = L.chunk_first[chunk], l1 = L.chunk_first[chunk + 1], last = (int)L.chunk_first.size() - 2;
    auto zero = [](std::vector<real>& v) { std::fill(v.begin(), v.end(), (real)0); };
    const int32_t* pos = nullptr;
    chunk_documents(g, a, &pos);  // the positions (the attention's backward reads its probabilities, masked already)

    if (chunk == last) {
        const real scale = a->n_valid ? (real)(loss_scale / a->n_valid) : (real)0;
        const int head = c.tied ? t.wte : t.lm_head, bf = g->bucket_of[t.lnf_w], bh = g->bucket_of[head];
        dp_params_use(g, bf); dp_params_use(g, bh);
        grads_begin(g, bf); grads_begin(g, bh);
        vocab_parallel_ce_backward(g, a->logits.data(), a->lse.data(), a->targets.data(), N, scale);
        zero(g->dfull);
        const real* lnf = L.sp ? a->lnf_full.data() : a->lnf.data();
        if (!c.norm_head) {
            matmul_backward(g->dfull.data(), g->G(head), (real*)nullptr, a->logits.data(), lnf, g->P(head), N, C, Vpl);
        } else {  // through the unit rows (the forward's, of the same weights), then through their scaling
            norm_rows_forward(g->head_n.data(), g->head_rnorm.data(), g->P(head), Vpl, C);
            zero(g->dhead_n);
            matmul_backward(g->dfull.data(), g->dhead_n.data(), (real*)nullptr, a->logits.data(), lnf,
                            g->head_n.data(), N, C, Vpl);
            norm_rows_backward(g->G(head), g->dhead_n.data(), g->head_n.data(), g->head_rnorm.data(), Vpl, C);
        }
        const real* dln = tp_sum(g, g->dfull.data(), B, T);  // the head is column-parallel: sum its input gradient
        zero(g->dres);
        norm_backward(g->dres.data(), g->G(t.lnf_w), g->G(t.lnf_b), dln, a->x_out.data(), g->P(t.lnf_w), a->lnf_mean.data(),
                      a->lnf_rstd.data(), Nl, C, rms);
        dp_params_done(g, bf); dp_params_done(g, bh);
    } else {
        std::copy(a->dx.begin(), a->dx.end(), g->dres.begin());
    }
    for (int l = l1 - 1; l >= l0; l--) {
        const ParamTable::Block& w = t.blocks[l];
        LayerActs<real>& la = a->layers[l - l0];
        const int bk = g->bucket_of[w.ln1_w];
        dp_params_use(g, bk);
        grads_begin(g, bk);
        // dres is the gradient of the block output = x_mid + fc2(act(fc1(ln2(x_mid))))
        const real* dy = tp_gather(g, g->dres.data(), g->dres_full.data(), B, T);  // [N,C]
        zero(g->dact);
        matmul_backward(g->dact.data(), g->G(w.fc2_w), L.sp ? (real*)nullptr : g->G(w.fc2_b), dy, la.act.data(), g->P(w.fc2_w), N,
                        Fl, C);
        if (L.sp) bias_backward(g->G(w.fc2_b), g->dres.data(), Nl, C);
        mlp_act_backward(g->dfc1.data(), g->dact.data(), la.fc1.data(), N, Fl, swiglu);
        zero(g->dfull);
        const real* ln2 = L.sp ? la.ln2_full.data() : la.ln2.data();
        matmul_backward(g->dfull.data(), g->G(w.fc1_w), g->G(w.fc1_b), g->dfc1.data(), ln2, g->P(w.fc1_w), N, C, F1l);
        const real* dln = tp_sum(g, g->dfull.data(), B, T);
        norm_backward(g->dres.data(), g->G(w.ln2_w), g->G(w.ln2_b), dln, la.x_mid.data(), g->P(w.ln2_w), la.ln2_mean.data(),
                      la.ln2_rstd.data(), Nl, C, rms);
        // dres is now the gradient of x_mid = x + attn_out(attention(qkv(ln1(x))))
        dy = tp_gather(g, g->dres.data(), g->dres_full.data(), B, T);
        zero(g->datty);
        matmul_backward(g->datty.data(), g->G(w.attn_out_w), L.sp ? (real*)nullptr : g->G(w.attn_out_b), dy, la.atty.data(),
                        g->P(w.attn_out_w), N, qdl, C);
        if (L.sp) bias_backward(g->G(w.attn_out_b), g->dres.data(), Nl, C);
        attention_backward(g->dqkv.data(), g->datty.data(), la.qkv.data(), la.att.data(), B, T, Hl, KVl, hd);
        if (c.pos == POS_ROPE) rope_rotate(g->dqkv.data(), g->rope_cos.data(), g->rope_sin.data(), B, T, Hl, KVl, hd, -1, pos);
        if (c.qk_norm)  // the weights' gradients are this rank's heads' part (summed over tp with the bucket)
            qk_norm_backward(g->dqkv.data(), g->G(w.q_norm_w), g->G(w.k_norm_w), la.qk_raw.data(), g->P(w.q_norm_w),
                             g->P(w.k_norm_w), N, Hl, KVl, hd, c.norm_eps);
        zero(g->dfull);
        const real* ln1 = L.sp ? la.ln1_full.data() : la.ln1.data();
        matmul_backward(g->dfull.data(), g->G(w.qkv_w), g->G(w.qkv_b), g->dqkv.data(), ln1, g->P(w.qkv_w), N, C, qkvdl);
        dln = tp_sum(g, g->dfull.data(), B, T);
        norm_backward(g->dres.data(), g->G(w.ln1_w), g->G(w.ln1_b), dln, la.x.data(), g->P(w.ln1_w), la.ln1_mean.data(),
                      la.ln1_rstd.data(), Nl, C, rms);
        dp_params_done(g, bk);
        grads_bucket_done(g, bk);  // ZeRO-2/3: this layer's gradients are reduce-scattered now
    }
    if (chunk == 0) {
        // token embedding: this rank's vocabulary rows, from the gradient of every position;
        // position embedding: this rank's positions
        grads_begin(g, g->bucket_of[t.wte]);
        const real* dy = tp_gather(g, g->dres.data(), g->dres_full.data(), B, T);
        real* dwte = g->G(t.wte);
        real* dwpe = g->G(t.wpe);
#pragma omp parallel for schedule(static)
        for (int ch = 0; ch < C; ch++) {
            for (int n = 0; n < N; n++) {
                const int v = a->inputs[n] - g->v0;
                if (v >= 0 && v < Vpl) dwte[(size_t)v * C + ch] += dy[(size_t)n * C + ch];
            }
            if (dwpe)
                for (int n = 0; n < Nl; n++) dwpe[(size_t)local_row_pos(L, T, pos, n) * C + ch] += g->dres[(size_t)n * C + ch];
        }
    } else {
        std::copy(g->dres.begin(), g->dres.end(), a->dx.begin());
    }
}

// Forward pass of a one-stage layout on inputs[B*T]; with targets (may be nullptr) computes the
// mean loss over non-ignored targets. Tokens must be in [0, vocab).
template <typename real>
void gpt_forward(GPT<real>* g, const int32_t* inputs, const int32_t* targets, int B, int T) {
    const ModelConfig& c = g->cfg;
    const int N = B * T;
    if (g->L.chunk_first.size() != 2) die("gpt_forward needs a one-stage layout (pipeline runs use gpt_pipeline)");
    for (int n = 0; n < N; n++) {
        if (inputs[n] < 0 || inputs[n] >= c.vocab_size) die("input token %d out of range [0, %d)", inputs[n], c.vocab_size);
        if (targets && (targets[n] < -1 || targets[n] >= c.vocab_size))
            die("target token %d out of range [-1, %d)", targets[n], c.vocab_size);
    }
    if (!g->cur || g->cur->B != B || g->cur->T != T) {
        if (g->cur) acts_release(g, g->cur.release());
        g->cur.reset(acts_acquire(g, 0, B, T));
    }
    ChunkActs<real>* a = g->cur.get();
    std::copy(inputs, inputs + N, a->inputs.begin());
    a->has_targets = targets != nullptr;
    if (targets) std::copy(targets, targets + N, a->targets.begin());
    gpt_forward_chunk(g, a);
    g->loss = a->loss;
    g->n_valid = a->n_valid;
}

// Backward of (loss * loss_scale) after gpt_forward with targets, accumulated into grads.
template <typename real>
void gpt_backward(GPT<real>* g, double loss_scale) {
    gpt_backward_chunk(g, g->cur.get(), loss_scale);
}

// ----------------------------------------------------------------------------------------------
// The pipeline: one stage's schedule (llmc/parallel/pp_schedule.h) over n_mb micro-batches, forward and
// backward (training) or forward only (validation), run by pp_run_stage (llmc/parallel/pp_exec.h) through the
// callbacks below. Sends do not block (their buffers wait in `sends` until the end); receives
// do. Each micro-batch's loss and loss scale are 1 / loss_div, the first one's also multiplied by mb0's
// (llmc/run/test_hooks.h), the loss scale also by S (llmc/loss_scale.h: the gradients come out S times the true ones). Returns this rank's sum of micro-batch losses / loss_div (non-zero only on the last stage).
// row_losses (forward only, --eval): [n_mb * B], each row's summed per-token loss, filled on the last stage.

template <typename real>
struct PendingSend {
    CommRequest req;
    std::vector<real> buf;
};

template <typename real>
double gpt_pipeline(GPT<real>* g, const std::vector<std::vector<int32_t>>& inputs, const std::vector<std::vector<int32_t>>& targets,
                   int n_mb, int B, int T, bool backward, int loss_div, TestCorrupt mb0 = {},
                   std::vector<double>* row_losses = nullptr, double S = 1.0) {
    const Layout& L = g->L;
    const Comm& pp = g->cm.pp;
    const int n_chunks = L.n_chunks(), last = n_chunks - 1, N = B * T;
    std::map<std::pair<int, int>, ChunkActs<real>*> live;  // (micro-batch, chunk) -> activations
    std::vector<std::unique_ptr<PendingSend<real>>> sends;
    double loss = 0;
    auto send = [&](const std::vector<real>& buf, int peer, int tag) {
        sends.emplace_back(new PendingSend<real>{CommRequest(), buf});
        comm_send(pp, sends.back()->buf.data(), buf.size(), peer, tag, &sends.back()->req);
        g->act_bytes += buf.size() * sizeof(real);
        g->act_peak = std::max(g->act_peak, g->act_bytes);
    };
    PpCallbacks cb;
    cb.acquire = [&](int mb, int chunk) { live[{mb, chunk}] = acts_acquire(g, chunk, B, T); };
    cb.release = [&](int mb, int chunk) { acts_release(g, live.at({mb, chunk})); live.erase({mb, chunk}); };
    cb.recv_act = [&](int mb, int chunk, int peer, int tag) {
        ChunkActs<real>* a = live.at({mb, chunk});
        comm_recv(pp, a->layers[0].x.data(), a->layers[0].x.size(), peer, tag);
    };
    cb.forward = [&](int mb, int chunk) {
        ChunkActs<real>* a = live.at({mb, chunk});
        std::copy(inputs[mb].begin(), inputs[mb].begin() + N, a->inputs.begin());  // every chunk: its documents
        a->has_targets = chunk == last;
        if (chunk == last) std::copy(targets[mb].begin(), targets[mb].begin() + N, a->targets.begin());
        gpt_forward_chunk(g, a);
        if (chunk == last) loss += a->loss * mb0.loss_of(mb) / loss_div;
        for (int b = 0; chunk == last && row_losses && b < B; b++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += a->tok_loss[(size_t)b * T + t];
            (*row_losses)[(size_t)mb * B + b] = s;
        }
    };
    cb.send_act = [&](int mb, int chunk, int peer, int tag) { send(live.at({mb, chunk})->x_out, peer, tag); };
    cb.recv_grad = [&](int mb, int chunk, int peer, int tag) {
        ChunkActs<real>* a = live.at({mb, chunk});
        comm_recv(pp, a->dx.data(), a->dx.size(), peer, tag);
    };
    cb.backward = [&](int mb, int chunk) { gpt_backward_chunk(g, live.at({mb, chunk}), S * mb0.grad_of(mb) / loss_div); };
    cb.send_grad = [&](int mb, int chunk, int peer, int tag) { send(live.at({mb, chunk})->dx, peer, tag); };
    pp_run_stage(L.topo.pp, L.vpp, L.topo.pp_rank, n_mb, backward, cb);
    for (std::unique_ptr<PendingSend<real>>& s : sends) {
        comm_wait(&s->req);
        g->act_bytes -= s->buf.size() * sizeof(real);
    }
    return loss;
}

// Global gradient L2 norm, counting every parameter once across dp, tp and pp (the ranges of
// layout_norm_ranges, llmc/parallel/layout.h). Summed in double over fixed chunks (deterministic), then
// over all ranks.
template <typename real>
double grad_norm(const GPT<real>* g) {
    const std::vector<Range> counted = layout_norm_ranges(g->table, g->buckets, g->L, g->L.zero >= 2);
    const real* base = g->grads.data();
    // every range cut into chunks of 64K; one parallel loop over all chunks, their sums added in order after it
    const size_t chunk = 1 << 16;
    std::vector<Range> items;
    for (const Range& r : counted)
        for (size_t lo = r.lo; lo < r.hi; lo += chunk) items.push_back({lo, std::min(r.hi, lo + chunk)});
    std::vector<double> part(items.size(), 0.0);
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < items.size(); k++) {
        const real* x = base + items[k].lo;
        part[k] = sum16<double>((int)items[k].size(), [&](int i) { return (double)x[i] * x[i]; });
    }
    double s = 0;
    for (double x : part) s += x;
    comm_host_sum(g->cm.world, &s, 1);
    return std::sqrt(s);
}

// AdamW in PyTorch's form: p *= 1 - lr*wd (matrices only); m, v moments with bias
// correction; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps). Grads are scaled by grad_scale
// (the clipping coefficient) as they are read. ZeRO >= 1: each dp rank updates its pieces of the
// buckets only (bucket padding is never touched: it stays zero).
template <typename real>
void adamw_update(GPT<real>* g, int t /* 1-based step */, double lr, const TrainConfig& tc, double grad_scale) {
    const int zero = g->L.zero, dp = g->L.topo.dp;
    const double bc1 = 1.0 - std::pow(tc.beta1, t), bc2 = 1.0 - std::pow(tc.beta2, t);
    const real b1 = (real)tc.beta1, b2 = (real)tc.beta2, eps = (real)tc.eps, lr_r = (real)lr, step = (real)(lr / bc1),
               sbc2 = (real)std::sqrt(bc2), gs = (real)grad_scale;
    const std::vector<ZeroPart> parts = zero_parts(g->table, g->buckets, dp, g->L.topo.dp_rank, zero == 0);
#pragma omp parallel  // one region: every thread walks the parts and takes its share of each (no wait between them)
    for (const ZeroPart& p : parts) {
        const real wd = g->table.specs[p.spec].is_matrix ? (real)tc.weight_decay : (real)0;
        // this part in each buffer: flat, or in the shard once the ZeRO level shards the buffer (llmc/parallel/zero.h)
        real* pb = g->params.data() + zero_part_offset(p, ZERO_PARAMS, zero);
        const real* gb = g->grads.data() + zero_part_offset(p, ZERO_GRADS, zero);
        real* mb = g->m.data() + zero_part_offset(p, ZERO_OPTIM, zero);
        real* vb = g->v.data() + zero_part_offset(p, ZERO_OPTIM, zero);
        const int64_t n = (int64_t)p.flat.size();
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < n; i++) {
            real gi = gb[i] * gs;
            pb[i] *= (real)1 - lr_r * wd;
            mb[i] = b1 * mb[i] + ((real)1 - b1) * gi;
            vb[i] = b2 * vb[i] + ((real)1 - b2) * gi * gi;
            pb[i] -= step * mb[i] / (std::sqrt(vb[i]) / sbc2 + eps);
        }
    }
    // ZeRO 1/2: every dp rank gets the others' updated pieces of each bucket
    if (zero == 1 || zero == 2)
        for (const Bucket& bk : g->buckets) {
            const Range mine = zero_piece(bk, dp, g->L.topo.dp_rank);
            comm_all_gather(g->cm.dp, g->params.data() + mine.lo, g->params.data() + bk.range.lo, bk.range.size() / dp);
        }
}

// One optimizer step over this rank's micro-batches inputs/targets [accum][B*T] (its dp share
// of accum*dp). Returns the global mean micro-batch loss; *norm_out gets the pre-clip global
// gradient norm.
template <typename real>
double train_step(GPT<real>* g, const std::vector<std::vector<int32_t>>& inputs,
                  const std::vector<std::vector<int32_t>>& targets, int B, int T, int step, const TrainConfig& tc,
                  double lr, const TrainState& st, TestCorrupt mb0, double* norm_out, GuardVerdict* verdict) {
    const Layout& L = g->L;
    gpt_zero_grad(g);
    const int accum = (int)inputs.size();
    const double S = st.loss_scale.scale;  // the backward's loss scale (llmc/loss_scale.h): the gradients times S
    double loss = gpt_pipeline(g, inputs, targets, accum, B, T, true, accum * L.topo.dp, mb0, nullptr, S);
    grads_reduce_all(g);
    // the loss: summed over dp from one rank of each last-stage tp group
    if (!layout_counts_loss(L)) loss = 0;
    comm_host_sum(g->cm.world, &loss, 1);
    // the true gradients' norm, and the optimizer's factor: the clipping coefficient of torch.nn.utils.clip_grad_norm_
    // times 1 / S (llmc/grad_clip.h)
    double norm;
    const double coef = unscaled_clip(grad_norm(g), tc.grad_clip, 1.0 / S, &norm);
    // the loss and the norm are the same on every rank, so is the guard's verdict (llmc/run/guard.h)
    *verdict = guard_verdict(tc, st, loss, norm);
    if (*verdict == GUARD_UPDATE) adamw_update(g, guard_adam_step(st, step), lr, tc, coef);
    *norm_out = norm;
    return loss;
}

// Sampling's forward (generate, llmc/run/sampling.h): the logits of position len - 1 after the forward over window [T]
// (one sequence; the first V of the row's Vp are read).
static inline const float* gpt_last_logits(GPT<float>* g, const int32_t* window, int len, int T) {
    gpt_forward(g, window, (const int32_t*)nullptr, 1, T);
    return g->cur->logits.data() + (size_t)(len - 1) * g->Vpl;
}

// Forward only over the batches in, tg [m][B*T] (validation and --eval through run_forward_split,
// llmc/run/train_loop.h), as a pipeline of m micro-batches (m at most a step's, so no more sends and activations are
// held than the step's, which the memory plan counts): rows [m*B] each row's summed loss and means [m] each batch's
// mean loss over its targets, on the ranks whose losses count.
template <typename real>
void gpt_forward_batches(GPT<real>* g, const Batches& in, const Batches& tg, int B, int T, double* rows, double* means) {
    const int m = (int)in.size();
    std::vector<double> r((size_t)m * B, 0.0);
    gpt_pipeline(g, in, tg, m, B, T, false, 1, {}, &r);
    for (int j = 0; j < m; j++) {
        double mean = 0;  // the batch's mean loss over its targets, as the pipeline's loss
        int valid = 0;
        for (int b = 0; b < B; b++) mean += rows[(size_t)j * B + b] = r[(size_t)j * B + b];
        for (int32_t t : tg[j]) valid += t >= 0;
        means[j] = valid ? mean / valid : 0.0;
    }
}

#ifndef TESTING
// Bytes this rank holds, measured and by formula (llmc/parallel/memory_formula.h); rank 0 prints every rank's row
// (several ranks) and hands them to the logger (the summary, Megatron's memory line).
template <typename real>
void print_memory(const GPT<real>& g, int n_mb, Logger* lg, int iteration) {
    const Layout& L = g.L;
    const MemPlan f = mem_plan_walked(g.cfg, L, g.B, g.T, n_mb, sizeof(real));
    MemoryRow row;
    row.rank = L.topo.rank; row.dp_rank = L.topo.dp_rank; row.tp_rank = L.topo.tp_rank; row.pp_rank = L.topo.pp_rank;
    row.params = (double)g.params.size() * sizeof(real) + g.pbuf_peak;
    row.grads = (double)g.grads.size() * sizeof(real) + g.gbuf_peak;
    row.optim = (double)(g.m.size() + g.v.size()) * sizeof(real);
    row.acts = (double)g.act_peak;
    row.f_params = f.params; row.f_grads = f.grads; row.f_optim = f.optim; row.f_acts = f.acts;
    const int W = g.cm.world.size;
    const std::vector<MemoryRow> all = memory_rows_gather(g.cm.world, L.topo.rank, row);
    if (L.topo.rank == 0 && W > 1) print_memory_rows(all.data(), W);
    if (L.topo.rank == 0) log_memory(lg, all.data(), W, iteration);
}

// The CPU trainer's bytes per rank for the planner (llmc/parallel/planner.h): its fp32 buffers by formula
// (llmc/parallel/memory_formula.h; ZeRO's gathered and scratch buckets are inside weights and gradients); it has no
// recompute.
static PlanBytes cpu_plan_bytes(const ModelConfig& c, const Layout& L, int B, int T, int n_mb, int recompute) {
    const MemPlan m = mem_plan_walked(c, L, B, T, n_mb, sizeof(float));
    PlanBytes b;
    b.weights = m.params; b.grads = m.grads; b.optim = m.optim; b.acts = m.acts;
    return b;
}

int main(int argc, char** argv) {
    Comm world = comm_init(&argc, &argv);
    ModelConfig mc;
    TrainConfig tc;
    parse_args(argc, argv, &mc, &tc);
    comm_set_timeout(tc.comm_timeout);
    comm_set_io_timeout(tc.io_timeout);  // a wait on another rank's disk work (--io-timeout)
    stop_signals_install();  // SIGTERM / SIGINT: finish the step, checkpoint, exit 0
    const bool rank0 = world.rank == 0;
    {  // --plan, or the planner's layout for --gpu-mem (llmc/parallel/comms.h); the CPU trainer keeps every activation
        PlanSpace space;
        space.bytes = cpu_plan_bytes;
        int recompute = 0;
        plan_or_pick(mc, &tc, &recompute, space, world.size, world.rank);
    }

    if (!tc.export_init.empty()) {
        if (rank0) hf_export_init(tc.export_init, mc, build_param_table(mc), tc.seed, tc.init_from);
        comm_finalize();
        return 0;
    }

    // every file the run reads, before anything big is allocated (llmc/run/train_loop.h)
    RunFiles files;
    run_files_open(&files, mc, tc, world.size);

    // the parallel layout; the vocabulary is padded to a multiple of 128 * tp
    config_finalize(mc, tc.tp);
    const int B = tc.B, T = tc.T;
    if (tc.total_batch == 0) tc.total_batch = (long)B * T * (world.size / std::max(1, tc.tp * tc.pp));
    Comms comms;
    Layout layout = make_layout(world, mc, tc, tc.total_batch, &comms);
    const int dp = layout.topo.dp;
    const int accum = (int)(tc.total_batch / ((long)B * T * dp));
    GPT<float> g;
    gpt_build(&g, mc, &layout, &comms);
    g.docs = tc.docs;

    // weights: a fresh run makes its part one whole tensor at a time (seeded init, or --init-from's file: gpt_init); a
    // resumed one reads its part from the checkpoint of any layout (llmc/run/checkpoint.h, part_read)
    TrainState state;
    state.rng = rng_sampling_seed(tc.seed);
    const bool sharded[3] = {layout.zero >= 3, layout.zero >= 1, layout.zero >= 1};  // params, m, v
    BigVec<float>* bufs[3] = {&g.params, &g.m, &g.v};
    const char* kinds[3] = {"p", "m", "v"};
    if (files.resume_dir.empty()) {
        SafeTensors hf;
        if (!tc.init_from.empty()) hf_open(&hf, tc.init_from, mc);
        int64_t n_made = 0;
        const double init_s = gpt_init(&g, tc.seed, tc.init_from.empty() ? nullptr : &hf, &n_made);
        st_close(&hf);
        if (rank0 && tc.init_from.empty()) print_init_time(n_made, init_s);
    } else {
        CkptReader R;
        ckpt_open(&R, files.resume_dir, mc, g.full, &state);
        for (int i = 0; i < 3; i++) part_read(&R, kinds[i], g.full, g.table, g.global, g.slice, g.buckets, layout, sharded[i], bufs[i]->data());
        ckpt_close(&R);
        if (rank0) printf("resumed from %s at step %d\n", files.resume_dir.c_str(), state.step);
    }
    comm_io_wait([&] { comm_barrier(world); });  // the slowest rank's reading, under --io-timeout
    run_out_dir_make(tc, rank0);

    const int64_t n_params = param_count(g.full);
    if (rank0) {
        print_config_table(mc, n_params, B, T, accum, dp, tc.steps, tc.lr, lr_schedule_name(tc.schedule), files.train.desc);
        printf("threads: %d", omp_get_max_threads());
        if (world.size > 1)
            printf(", ranks: %d = pp %d x dp %d x tp %d%s, ZeRO %d%s", world.size, layout.topo.pp, dp, layout.topo.tp,
                   layout.sp ? " (sp)" : "", layout.zero, layout.vpp > 1 ? (", vpp " + std::to_string(layout.vpp)).c_str() : "");
        printf("\n%s", documents_describe(tc.docs).c_str());
    }
    Logger lg;
    run_logger_open(&lg, rank0, mc, tc, !files.resume_dir.empty(), world.size /* throughput per rank */, 0.0,
                    tc.gpu_mem_gib * (1 << 30));

    // the run (llmc/run/train_loop.h) with this trainer's step, forward, sampling, checkpoint and export
    Trainer tr;
    tr.B = B;
    tr.T = T;
    tr.step = [&](const Batches& inputs, const Batches& targets, int step, double lr, const TestCorrupt& mb0,
                  double* norm, GuardVerdict* verdict) {
        return train_step(&g, inputs, targets, B, T, step, tc, lr, state, mb0, norm, verdict);
    };
    tr.forward = [&](const Batches& in, const Batches& tg, double* rows, double* means) {
        gpt_forward_batches(&g, in, tg, B, T, rows, means);
    };
    tr.forward_max = accum;
    tr.last_logits = [&](const int32_t* window, int len) { return gpt_last_logits(&g, window, len, T); };
    tr.sample_B = 1;
    // a checkpoint: every rank writes the parts it owns (part_write), all at once
    tr.save = [&]() {
        auto barrier = [&] { comm_io_wait([&] { comm_barrier(world); }); };  // another rank's disk work: --io-timeout
        checkpoint_save(tc.out_dir, mc, g.full, layout_json(layout), world.rank, world.size, state, tc.keep_last, nullptr, barrier,
                        [&](CkptShardWriter* w) {
                            if (rank0) test_hooks_write_delay();  // tests only: slow storage (llmc/run/test_hooks.h)
                            for (int i = 0; i < 3; i++)
                                part_write(w, kinds[i], g.full, g.table, g.global, g.slice, g.buckets, layout, sharded[i],
                                           [&](size_t pos, size_t) { return bufs[i]->data() + pos; });
                        });
    };
    tr.export_weights = [&](const std::string& path) { gpt_export(&g, path); };
    tr.step_done = [&](int i, int step) {
        if (i == 0) print_memory(g, accum, &lg, step);
    };
    run_train(world, tr, layout, mc, tc, accum, &files, &state, &lg, n_params);
    comm_finalize();
    return 0;
}
#endif
