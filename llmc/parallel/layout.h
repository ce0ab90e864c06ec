// llmc/parallel/layout.h: the parallel layout of a rank, shared by both trainers (bookkeeping only: the
// communicator groups are made by the trainer from the member lists of llmc/parallel/topology.h).
//   Layout           the options (dp x tp x pp ranks, vpp chunks per stage, the ZeRO level,
//                    sequence parallelism, the first layer of every chunk) and the rank's place
//   layout_make      checks the flags against the world size and the model; "" or the message
//   gpt_local_table  the tensors a rank holds (its stage's, its tp slices), offsets padded for
//                    ZeRO's buckets (llmc/parallel/zero.h)
//   layout_norm_ranges  the gradient elements a rank counts in the global norm, so that every
//                    parameter counts exactly once over all ranks
#pragma once
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>
#include "llmc/train_config.h"
#include "llmc/model_config.h"
#include "llmc/param_table.h"
#include "llmc/parallel/pp_schedule.h"
#include "llmc/parallel/topology.h"
#include "llmc/parallel/tp.h"
#include "llmc/parallel/zero.h"

struct Layout {
    Topology topo;                 // coordinates and group members (llmc/parallel/topology.h)
    int zero = 0;                  // ZeRO level over dp
    bool sp = false;               // sequence parallelism over the tp group
    int vpp = 1;                   // chunks per pipeline stage
    std::vector<int> chunk_first;  // [pp*vpp + 1] first layer of each chunk, then n_layer
    int n_chunks() const { return (int)chunk_first.size() - 1; }
};

// One process: everything 1.
static inline Layout layout_single(const ModelConfig& c) {
    Layout L;
    L.topo = topo_make(1, 1, 1, 0);
    L.chunk_first = {0, c.n_layer};
    return L;
}

static inline std::string layout_fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static inline std::string layout_fmt(const char* fmt, ...) {
    char b[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    return b;
}

// Checks the flags (tc: --tp --pp --dp --zero --sp --vpp --layout, -b -t; total_batch: -d) against
// `world` ranks and the model (config_finalize(mc, tc.tp) done), then fills *L for world rank
// `rank`. Returns "" or what is wrong, naming the flag and the numbers.
static inline std::string layout_make(int world, int rank, const ModelConfig& mc, const TrainConfig& tc, long total_batch, Layout* L) {
    const int tp = tc.tp, pp = tc.pp, W = world;
    if (W % (tp * pp) != 0) return layout_fmt("%d ranks (mpirun -np) are not a multiple of --tp %d x --pp %d = %d", W, tp, pp, tp * pp);
    const int dp = W / (tp * pp);
    if (tc.dp && tc.dp != dp)
        return layout_fmt("--dp %d x --tp %d x --pp %d = %d ranks, but %d were started (mpirun -np)", tc.dp, tp, pp, tc.dp * tp * pp, W);
    std::string err = tp_check(mc, tp);
    if (!err.empty()) return err;
    if (tc.sp && tc.T % tp != 0) return layout_fmt("--sp 1 splits the sequence: -t %d is not divisible by --tp %d", tc.T, tp);
    if (tc.vpp > 1 && pp == 1) return layout_fmt("--vpp %d needs pipeline stages (--pp > 1)", tc.vpp);
    err = pp_layer_layout(mc.n_layer, pp, tc.vpp, tc.layout, &L->chunk_first);
    if (!err.empty()) return tc.layout.empty() ? layout_fmt("--pp %d x --vpp %d: %s", pp, tc.vpp, err.c_str()) : err;
    const long micro_tokens = (long)tc.B * tc.T * dp;
    if (total_batch % micro_tokens != 0)
        return layout_fmt("flag -d %ld is not a multiple of B*T*dp = %d*%d*%d = %ld", total_batch, tc.B, tc.T, dp, micro_tokens);
    const long accum = total_batch / micro_tokens;
    if (tc.vpp > 1 && accum % pp != 0)
        return layout_fmt("interleaved 1F1B needs micro-batches (gradient accumulation %ld = -d / (b*t*dp)) to be a multiple "
                          "of --pp %d (raise -d)", accum, pp);
    L->topo = topo_make(dp, tp, pp, rank);
    L->zero = tc.zero;
    L->sp = tc.sp && tp > 1;
    L->vpp = tc.vpp;
    return "";
}

// The members of this rank's embedding group: first and last stage of its pipeline (the tied
// embedding's gradient is summed between them); itself on the other stages.
static inline std::vector<int> layout_emb_members(const Layout& L) {
    const bool end_stage = L.topo.pp_rank == 0 || L.topo.pp_rank == L.topo.pp - 1;
    return end_stage ? L.topo.emb_group : std::vector<int>{L.topo.rank};
}

// How many communicators of their own this rank's groups take (the CUDA trainer's NCCL buffers, llmc/parallel/
// comm_nccl.cuh): the world's when it has more than one rank, and each of dp, tp, pp and emb with more than one rank
// but fewer than the world (a group of all the ranks is the world's communicator; a group of one has none).
static inline int layout_communicators(const Layout& L) {
    const int W = L.topo.world;
    int n = W > 1;
    for (const std::vector<int>* g : {&L.topo.dp_group, &L.topo.tp_group, &L.topo.pp_group})
        n += (int)g->size() > 1 && (int)g->size() < W;
    const size_t emb = layout_emb_members(L).size();
    n += emb > 1 && (int)emb < W;
    return n;
}

// The tensors a rank of pipeline stage `stage` and tp rank `tp_rank` holds (llmc/parallel/tp.h), with
// offsets padded into ZeRO buckets for L's dp (llmc/parallel/zero.h).
static inline LocalTable gpt_local_table(const ModelConfig& c, const ParamTable& full, const Layout& L, int stage, int tp_rank) {
    const int pp = L.topo.pp, n_chunks = L.n_chunks();
    const int last_stage = pp_stage_of_chunk(n_chunks - 1, pp);
    std::vector<bool> keep(full.specs.size(), false);
    for (size_t k = 0; k < full.specs.size(); k++) {
        const ParamSpec& s = full.specs[k];
        if (s.layer >= 0) {
            for (int ch = 0; ch < n_chunks; ch++)
                if (s.layer >= L.chunk_first[ch] && s.layer < L.chunk_first[ch + 1]) keep[k] = pp_stage_of_chunk(ch, pp) == stage;
        } else if ((int)k == full.wte) {
            keep[k] = stage == 0 || (c.tied && stage == last_stage);  // the last stage's copy feeds the tied head
        } else if ((int)k == full.wpe) {
            keep[k] = stage == 0;
        } else {
            keep[k] = stage == last_stage;  // final norm and LM head
        }
    }
    LocalTable lt = tp_local_table(full, c, L.topo.tp, tp_rank, keep);
    zero_pad_table(&lt.t, L.topo.dp);
    return lt;
}

// Whether this rank holds losses that count: the last pipeline stage's first tp rank (one per dp rank), so that a
// sum over the world counts each of them once.
static inline bool layout_counts_loss(const Layout& L) { return L.topo.pp_rank == L.topo.pp - 1 && L.topo.tp_rank == 0; }

// Forward-only passes split over dp (validation, --eval): batch k of n runs on dp rank k % dp, as this rank's local
// batch k / dp; every rank runs the same number of forwards (ZeRO 3 gathers together), a rank past the last batch one
// that counts nothing. layout_split_forwards: the forwards of each rank; layout_split_batch: local batch j's global
// index (>= n: none).
static inline int layout_split_forwards(const Layout& L, int n) { return (n + L.topo.dp - 1) / L.topo.dp; }
static inline int layout_split_batch(const Layout& L, int j) { return j * L.topo.dp + L.topo.dp_rank; }

// The parts of its tensors this rank alone answers for among the ranks that hold the same values: within its dp
// piece of each bucket (zero_parts; dp ranks hold equal values), replicated tensors (TP_NONE, TP_SUM) on tp rank 0 only, the
// tied embedding on the first stage only. Each element of the model is in exactly one rank's parts: what the global
// norm sums and what a checkpoint's shards hold (llmc/run/assemble.h).
static inline std::vector<ZeroPart> layout_owned_parts(const ParamTable& t, const std::vector<Bucket>& bs, const Layout& L) {
    std::vector<ZeroPart> out;
    for (const ZeroPart& p : zero_parts(t, bs, L.topo.dp, L.topo.dp_rank, false)) {
        if (tp_replicated(t.specs[p.spec].tp) && L.topo.tp_rank != 0) continue;
        if (p.spec == t.wte && L.topo.pp_rank != 0) continue;
        out.push_back(p);
    }
    return out;
}

// The ranges of gradient elements this rank adds to the squared global norm: within its dp
// piece of each bucket (reduced gradients are equal across dp), replicated tensors (TP_NONE, TP_SUM) on
// tp rank 0 only, the tied embedding on the first stage only. In flat-buffer positions, or in
// shard-buffer positions when in_shard (ZeRO-2/3 gradients). Adjacent ranges are merged.
static inline std::vector<Range> layout_norm_ranges(const ParamTable& t, const std::vector<Bucket>& bs, const Layout& L, bool in_shard) {
    std::vector<Range> out;
    for (const ZeroPart& p : layout_owned_parts(t, bs, L)) {
        const size_t shift = in_shard ? p.shift : 0;
        const Range r = {p.flat.lo - shift, p.flat.hi - shift};
        if (!out.empty() && out.back().hi == r.lo) out.back().hi = r.hi;
        else out.push_back(r);
    }
    return out;
}
