// llmc/zero.h: ZeRO bookkeeping over a rank's flat parameter buffer (its local parameter
// table: the tensors of its pipeline stage, sliced for its tensor-parallel rank).
//   shard:   dp rank r owns the contiguous range [r*S, min((r+1)*S, total)), S = ceil(total/dp):
//            its AdamW moments (stage >= 1), its reduced gradients (stage >= 2) and its
//            parameters between uses (stage 3) cover only that range.
//   buckets: the unit of gradient reduce-scatter and of ZeRO-3 parameter gathering: the
//            embeddings, one bucket per layer, the final norm and head. The table is
//            layer-major, so each bucket is one contiguous range.
// zero_counts() splits a bucket among the dp ranks by their shards: the counts a
// reduce-scatter or an all-gather of that bucket uses (a rank whose shard misses the bucket
// gets 0).
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>
#include "llmc/params.h"

struct Range {
    size_t lo = 0, hi = 0;
    size_t size() const { return hi - lo; }
};

static inline Range zero_shard(size_t total, int dp, int r) {
    const size_t S = (total + dp - 1) / dp;
    Range s;
    s.lo = std::min(total, (size_t)r * S);
    s.hi = std::min(total, (size_t)(r + 1) * S);
    return s;
}

struct Bucket {
    Range range;      // in the flat buffer
    int layer;        // block index, -1 for embeddings / final norm and head
    int first_spec, end_spec;  // specs [first_spec, end_spec) of the table
};

// Consecutive specs with the same layer (and, for layer -1, on the same side of the blocks).
static inline std::vector<Bucket> zero_buckets(const ParamTable& t) {
    std::vector<Bucket> b;
    for (int k = 0; k < (int)t.specs.size(); k++) {
        const ParamSpec& s = t.specs[k];
        const bool same = !b.empty() && b.back().layer == s.layer && b.back().range.hi == s.offset &&
                          !(s.layer == -1 && k > 0 && t.specs[k - 1].layer != -1);
        if (same) { b.back().range.hi += s.numel(); b.back().end_spec = k + 1; }
        else b.push_back({{s.offset, s.offset + s.numel()}, s.layer, k, k + 1});
    }
    return b;
}

// Elements of bucket r that dp rank i owns, for every i: counts sum to the bucket size.
static inline std::vector<int> zero_counts(Range bucket, size_t total, int dp) {
    std::vector<int> c(dp);
    for (int i = 0; i < dp; i++) {
        Range s = zero_shard(total, dp, i);
        size_t lo = std::max(s.lo, bucket.lo), hi = std::min(s.hi, bucket.hi);
        c[i] = hi > lo ? (int)(hi - lo) : 0;
    }
    return c;
}

// The part of bucket `b` inside `shard`.
static inline Range zero_intersect(Range b, Range shard) {
    Range r;
    r.lo = std::max(b.lo, shard.lo);
    r.hi = std::max(r.lo, std::min(b.hi, shard.hi));
    return r;
}
