// llmc/parallel/assemble.h: a rank's part of the whole model and back, for weights in (init, --init-from, a
// checkpoint of any layout) and out (checkpoints, exports), shared by both trainers. Bookkeeping only: the trainer
// moves the bytes (host copies and MPI, or device copies and NCCL) through the callables it passes.
//   part_of_full    a whole-model buffer [full.total] (build_param_table's layout, the one files use) -> this
//                   rank's part [t.total] in its local table's layout: its stage's tensors, its tp slices
//                   (llmc/parallel/tp.h), bucket padding zero. ZeRO then keeps its pieces (zero_take_shard).
//   part_into_full  the inverse, for one rank's part (any rank's: its LocalTable from gpt_local_table)
//   assemble_full   every rank's part reaches world rank 0, which inserts them into whole-model buffers: the
//                   dp-rank-0 member of every (pipeline stage, tp rank) sends its part (assemble_senders). The
//                   trainer first makes a sharded buffer whole over its dp group: for each bucket, an all-gather
//                   of every dp rank's piece from its shard (zero_shard_offset, llmc/parallel/zero.h).
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
#include "llmc/run/checkpoint.h"

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

// whole[full.total] gets a rank's part[t.total] (its slices; the rest of whole is left as it is).
template <typename T>
static inline void part_into_full(const ParamTable& t, const std::vector<int>& global, const std::vector<std::vector<TpBlock>>& slice,
                                  const T* part, const ParamTable& full, T* whole) {
    for (size_t k = 0; k < t.specs.size(); k++) {
        const ParamSpec& f = full.specs[global[k]];
        tp_insert(part + t.specs[k].offset, slice[k], f.cols, whole + f.offset);
    }
}

// The world ranks whose parts make up the whole model, in world-rank order (world rank 0 first): the dp-rank-0 member
// of every (pipeline stage, tp rank).
static inline std::vector<int> assemble_senders(const Topology& me) {
    std::vector<int> out;
    for (int r = 0; r < me.world; r++)
        if (topo_make(me.dp, me.tp, me.pp, r).dp_rank == 0) out.push_back(r);
    return out;
}

// How assemble_full moves buffer i's elements: send on a sender (to world rank 0; returns when data may be reused),
// recv on world rank 0 (from world rank `from`). Each send is matched by one recv of the same count, in order.
template <typename T>
struct AssembleTransport {
    std::function<void(int i, const T* data, size_t n)> send;
    std::function<void(int i, int from, T* data, size_t n)> recv;
};

// Every rank calls it, mine[i] (i < n_bufs) being this rank's buffer i whole over its table [its t.total] (ZeRO shards
// gathered). World rank 0 gets *whole[i] [full.total], the others nothing. Each part travels in messages of at most
// `piece` elements (0: one message per buffer), world rank 0 receiving senders in assemble_senders' order.
template <typename T>
static inline void assemble_full(const ModelConfig& c, const ParamTable& full, const Layout& L, const std::vector<T>* mine,
                                 std::vector<T>* const* whole, int n_bufs, size_t piece, const AssembleTransport<T>& io) {
    const Topology& me = L.topo;
    if (me.rank == 0)
        for (int i = 0; i < n_bufs; i++) whole[i]->assign(full.total, (T)0);
    for (int r : assemble_senders(me)) {
        if (me.rank != 0 && me.rank != r) continue;
        const Topology o = topo_make(me.dp, me.tp, me.pp, r);
        const LocalTable lt = gpt_local_table(c, full, L, o.pp_rank, o.tp_rank);
        const size_t total = lt.t.total, step = piece > 0 ? piece : std::max<size_t>(total, 1);
        for (int i = 0; i < n_bufs; i++) {
            std::vector<T> received(r != 0 && me.rank == 0 ? total : 0);
            for (size_t at = 0; r != 0 && at < total; at += step) {
                const size_t n = std::min(step, total - at);
                if (me.rank == r) io.send(i, mine[i].data() + at, n);
                else io.recv(i, r, received.data() + at, n);
            }
            if (me.rank == 0) part_into_full(lt.t, lt.global, lt.slice, r == 0 ? mine[i].data() : received.data(), full, whole[i]->data());
        }
    }
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
