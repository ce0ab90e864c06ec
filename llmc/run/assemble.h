// llmc/run/assemble.h: a rank's part of the whole model and back, for weights in (init, --init-from, a
// checkpoint of any layout) and out (checkpoints, exports), shared by both trainers. Bookkeeping only: the trainer
// moves the bytes (host copies and MPI, or device copies and NCCL) through the callables it passes. No rank holds
// the whole model: whole tensors travel one at a time.
//   part_of_full    a whole-model buffer [full.total] (build_param_table's layout, the one files use) -> this
//                   rank's part [t.total] in its local table's layout: its stage's tensors, its tp slices
//                   (llmc/parallel/tp.h), bucket padding zero. ZeRO then keeps its pieces (zero_take_shard).
//   part_init       this rank's part of the initial weights (the seeded init, or --init-from's file), made one
//                   whole tensor at a time
//   assemble_tensor whole tensors on world rank 0, one at a time in table order, for exports (assemble_export): the
//                   dp-rank-0 member of every (pipeline stage, tp rank) sends its slice of each (assemble_send; a
//                   replicated tensor and the tied embedding once). The trainer first makes a sharded buffer whole over its dp
//                   group: for each bucket, an all-gather of every dp rank's piece (llmc/parallel/zero.h).
//   part_write      a checkpoint's share of one of a rank's buffers (the weights or a moment): the parts it owns
//                   (layout_owned_parts: its ZeRO piece, replicated tensors once), written as pieces of their
//                   tensors' slices (llmc/run/checkpoint.h), every rank at once
//   part_read       the inverse at any layout: the elements of a rank's buffer, whole over its table or its ZeRO
//                   shard, read from whichever shards hold them
#pragma once
#include <algorithm>
#include <functional>
#include <vector>
#include "llmc/model_config.h"
#include "llmc/param_table.h"
#include "llmc/parallel/layout.h"
#include "llmc/parallel/topology.h"
#include "llmc/parallel/tp.h"
#include "llmc/parallel/zero.h"
#include "llmc/init.h"
#include "llmc/run/checkpoint.h"
#include "llmc/run/weights_io.h"

// part[t.total] = this rank's slices of whole[full.total]: local tensor k is full tensor global[k], its blocks
// slice[k]; bucket padding is left as it is (zeros in a fresh buffer).
template <typename T>
static inline void part_of_full(const ParamTable& full, const T* whole, const ParamTable& t, const std::vector<int>& global,
                                const std::vector<std::vector<TpBlock>>& slice, T* part) {
    for (size_t k = 0; k < t.specs.size(); k++) {
        const ParamSpec& f = full.specs[global[k]];
        tp_extract(whole + f.offset, f.cols, slice[k], part + t.specs[k].offset);
    }
}

// part [t.total] = this rank's slices of the initial weights: each tensor it holds made whole (the seeded init of
// llmc/init.h, or read from `hf`, an open --init-from file, when not null), then its slice kept; bucket padding left
// as it is. A tensor the rank holds whole is made in place. Host memory: one whole tensor. Returns the number of
// values made (whole tensors).
template <typename real>
static inline int64_t part_init(const ModelConfig& c, const ParamTable& full, const ParamTable& t, const std::vector<int>& global,
                                const std::vector<std::vector<TpBlock>>& slice, uint64_t seed, const SafeTensors* hf, real* part) {
    std::vector<real> w;
    std::vector<float> file;
    int64_t n = 0;
    for (size_t k = 0; k < t.specs.size(); k++) {
        const ParamSpec& f = full.specs[global[k]];
        n += (int64_t)f.numel();
        const bool whole = slice[k].size() == 1 && slice[k][0].rows * slice[k][0].cols == (int64_t)f.numel();
        if (!hf && whole) {  // the rank keeps all of it: made in place
            param_init_tensor(c, full, (size_t)global[k], part + t.specs[k].offset, seed);
            continue;
        }
        w.resize(f.numel());
        if (!hf) param_init_tensor(c, full, (size_t)global[k], w.data(), seed);
        else {
            file.resize(f.numel());
            hf_read_tensor(hf, f, "", file.data());
            std::copy(file.begin(), file.end(), w.begin());
        }
        tp_extract(w.data(), f.cols, slice[k], part + t.specs[k].offset);
    }
    return n;
}

// The world ranks whose parts make up the whole model, in world-rank order (world rank 0 first): the dp-rank-0 member
// of every (pipeline stage, tp rank).
static inline std::vector<int> assemble_senders(const Topology& me) {
    std::vector<int> out;
    for (int r = 0; r < me.world; r++)
        if (topo_make(me.dp, me.tp, me.pp, r).dp_rank == 0) out.push_back(r);
    return out;
}

// Who sends which slice of each tensor: the senders' local tables, and per full tensor the (sender, local tensor)
// pairs whose slices make it up, in sender order: a replicated tensor from tp rank 0 only, the tied embedding from the
// first stage only.
struct AssemblePlan {
    std::vector<int> senders;                             // assemble_senders
    std::vector<LocalTable> tables;                       // each sender's
    std::vector<std::vector<std::pair<int, int>>> from;   // [full tensor]: (index into senders, local tensor)
};
static inline AssemblePlan assemble_plan(const ModelConfig& c, const ParamTable& full, const Layout& L) {
    AssemblePlan a;
    a.senders = assemble_senders(L.topo);
    a.from.resize(full.specs.size());
    for (size_t s = 0; s < a.senders.size(); s++) {
        const Topology o = topo_make(L.topo.dp, L.topo.tp, L.topo.pp, a.senders[s]);
        a.tables.push_back(gpt_local_table(c, full, L, o.pp_rank, o.tp_rank));
        const LocalTable& lt = a.tables.back();
        for (size_t k = 0; k < lt.t.specs.size(); k++) {
            const int g = lt.global[k];
            if ((tp_replicated(full.specs[g].tp) && o.tp_rank != 0) || (g == full.wte && o.pp_rank != 0)) continue;
            a.from[g].push_back({(int)s, (int)k});
        }
    }
    return a;
}

// How assemble_send / assemble_tensor move a slice of full tensor k: send on a sender (to world rank 0; returns when
// data may be reused), recv on world rank 0 (from world rank `from`). Each send is matched by one recv of the same
// count, in order.
template <typename T>
struct AssembleTransport {
    std::function<void(int k, const T* data, size_t n)> send;
    std::function<void(int k, int from, T* data, size_t n)> recv;
};

// Every sender but world rank 0 (others return at once): its slices of the tensors the plan takes from it, in table
// order, in messages of at most `piece` elements (0: one per slice). mine: its weights whole over its table.
template <typename T>
static inline void assemble_send(const AssemblePlan& a, int rank, const T* mine, size_t piece, const AssembleTransport<T>& io) {
    for (size_t g = 0; g < a.from.size() && rank != 0; g++)
        for (const std::pair<int, int>& sk : a.from[g]) {
            if (a.senders[sk.first] != rank) continue;
            const ParamSpec& s = a.tables[sk.first].t.specs[sk.second];
            const size_t n = s.numel(), step = piece > 0 ? piece : std::max<size_t>(n, 1);
            for (size_t at = 0; at < n; at += step) io.send((int)g, mine + s.offset + at, std::min(step, n - at));
        }
}

// World rank 0, for k = 0, 1, ... in order: dst [full.specs[k].numel()] = whole tensor k (vocabulary padding rows
// zero), from its own slices (mine, its weights whole over its table) and the senders'.
template <typename T>
static inline void assemble_tensor(const AssemblePlan& a, const ParamTable& full, const T* mine, size_t k, size_t piece,
                                   const AssembleTransport<T>& io, T* dst) {
    const ParamSpec& f = full.specs[k];
    std::fill(dst, dst + f.numel(), (T)0);
    std::vector<T> got;
    for (const std::pair<int, int>& sk : a.from[k]) {
        const LocalTable& lt = a.tables[sk.first];
        const ParamSpec& s = lt.t.specs[sk.second];
        const T* src = mine + s.offset;
        if (a.senders[sk.first] != 0) {
            got.resize(s.numel());
            const size_t n = s.numel(), step = piece > 0 ? piece : std::max<size_t>(n, 1);
            for (size_t at = 0; at < n; at += step) io.recv((int)k, a.senders[sk.first], got.data() + at, std::min(step, n - at));
            src = got.data();
        }
        tp_insert(src, lt.slice[sk.second], f.cols, dst);
    }
}

// The export both trainers make (--save-safetensors): world rank 0 streams the Hugging Face file a tensor at a time
// (hf_export_stream), each assembled from its own and the senders' slices; every other sender sends its slices. Every
// rank calls it; mine: its weights whole over its table.
template <typename T>
static inline void assemble_export(const std::string& path, const ModelConfig& c, const ParamTable& full, const Layout& L, const T* mine,
                                   size_t piece, const AssembleTransport<T>& io) {
    const AssemblePlan plan = assemble_plan(c, full, L);
    if (L.topo.rank != 0) return assemble_send(plan, L.topo.rank, mine, piece, io);
    hf_export_stream(path, c, full, [&](size_t k, float* dst) { assemble_tensor(plan, full, mine, k, piece, io, dst); });
}

// Writes buffer `kind` ("p", "m", "v") of this rank's part (local table t, tensor k being full tensor global[k], its
// blocks slice[k]) into its shard: the elements of layout_owned_parts. data(pos, n) returns n floats of the buffer
// from position pos (a shard position when `sharded`: the buffer holds only this rank's ZeRO pieces), valid until
// the next call: a host pointer, or a download from the device.
static inline void part_write(CkptShardWriter* w, const char* kind, const ParamTable& full, const ParamTable& t, const std::vector<int>& global,
                              const std::vector<std::vector<TpBlock>>& slice, const std::vector<Bucket>& bs, const Layout& L, bool sharded,
                              const std::function<const float*(size_t pos, size_t n)>& data) {
    for (const ZeroPart& p : layout_owned_parts(t, bs, L)) {
        const ParamSpec& s = t.specs[p.spec];
        const size_t pos = p.flat.lo - (sharded ? p.shift : 0);
        ckpt_shard_put(w, kind, full.specs[global[p.spec]].name, slice[p.spec], (int64_t)(p.flat.lo - s.offset),
                       (int64_t)(p.flat.hi - s.offset), data(pos, p.flat.size()));
    }
}

// Fills buffer `kind` of this rank's part from an open checkpoint of any layout: dst [t.total] whole over the local
// table, or [t.total / dp] its ZeRO shard when `sharded` (the pieces of every bucket, zero_parts); bucket padding is
// left as it is.
static inline void part_read(CkptReader* R, const char* kind, const ParamTable& full, const ParamTable& t, const std::vector<int>& global,
                             const std::vector<std::vector<TpBlock>>& slice, const std::vector<Bucket>& bs, const Layout& L, bool sharded,
                             float* dst) {
    if (!sharded) {
        for (size_t k = 0; k < t.specs.size(); k++)
            ckpt_read(R, kind, full.specs[global[k]].name, slice[k], 0, (int64_t)t.specs[k].numel(), dst + t.specs[k].offset);
        return;
    }
    for (const ZeroPart& p : zero_parts(t, bs, L.topo.dp, L.topo.dp_rank, false)) {
        const ParamSpec& s = t.specs[p.spec];
        ckpt_read(R, kind, full.specs[global[p.spec]].name, slice[p.spec], (int64_t)(p.flat.lo - s.offset), (int64_t)(p.flat.hi - s.offset),
                  dst + (p.flat.lo - p.shift));
    }
}

// The writer's layout, for index.json.
static inline std::string layout_json(const Layout& L) {
    return "{\"world\":" + std::to_string(L.topo.world) + ",\"dp\":" + std::to_string(L.topo.dp) + ",\"tp\":" + std::to_string(L.topo.tp) +
           ",\"pp\":" + std::to_string(L.topo.pp) + ",\"zero\":" + std::to_string(L.zero) + "}";
}
