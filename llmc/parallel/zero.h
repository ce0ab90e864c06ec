// llmc/parallel/zero.h: the ZeRO bucket plan over a rank's flat parameter buffer (its local parameter
// table: the tensors of its pipeline stage, sliced for its tensor-parallel rank). Pure
// bookkeeping: the trainers call the collectives themselves.
// ZeRO 1, 2 and 3 are called levels here (DeepSpeed's "stages"): a stage is always a pipeline stage.
//
// Buckets are the unit of gradient reduction and of ZeRO-3 weight gathering: the embeddings,
// one bucket per layer, the final norm and head (the table is layer-major, so each bucket is a
// run of consecutive tensors). zero_pad_table() lays the buckets out back to back, each padded
// with zeros up to a multiple of dp*8 elements, and moves the tensors' offsets accordingly.
// So dp rank r owns the equal piece [lo + r*n/dp, lo + (r+1)*n/dp) of every bucket [lo, lo+n):
// every reduce-scatter and all-gather of a bucket has equal counts (n/dp), and every piece
// starts at a multiple of 8 elements (16 bytes in bf16, 32 in fp32). A rank's shard is the
// concatenation of its pieces in bucket order: bucket [lo, lo+n) sits at lo/dp in the shard,
// and the shard holds total/dp elements.
//   ZeRO-1: each dp rank keeps the AdamW moments (and the fp32 master weights) of its shard;
//           gradients are reduced once per step (the CPU trainer all-reduces them, the CUDA trainer
//           reduce-scatters them in place), each rank updates its pieces, then the weights are
//           all-gathered per bucket.
//   ZeRO-2: also the reduced gradients exist only as each rank's shard: a bucket's gradient is
//           reduce-scattered into it. The two trainers reduce on different schedules:
//             train_gpt_cpu.cpp: once per micro-batch for each layer's bucket, right after that
//               layer's backward (grads_bucket_done): the layer's gradient is computed into a
//               scratch of one bucket, reduce-scattered, added into the shard and freed, so no
//               rank ever holds a whole gradient buffer. The embedding and head buckets are
//               reduced once, at the end of the step (their gradients gather over every
//               micro-batch and, with a tied head, over the first and last pipeline stage).
//             train_gpt.cu: once per step for every bucket: the micro-batches accumulate into the
//               whole floatX gradient buffer as on one GPU, and as each bucket's gradient is
//               complete in the last micro-batch's backward (after the schedule under pp), it is
//               cast to fp32 and reduce-scattered into the fp32 shard (grads_bucket_done,
//               llmc/gpt/data_parallel.cuh): one reduction per bucket per step, overlapped with
//               the rest of the backward, at the cost of keeping the whole floatX buffer.
//           Both are correct: either way a rank's shard ends the step holding, for its pieces, the
//           sum over every micro-batch of every rank of its dp group. The CPU trainer sums over
//           the ranks first, then over the micro-batches; the CUDA trainer over the micro-batches
//           (rounded to floatX, as one GPU's accumulation is), then over the ranks. The same sum
//           up to reassociation: the tolerance every layout is held to against the one-process
//           run (tests/t_parallel.sh, tests/t_gpu_multirank.sh).
//   ZeRO-3: also the weights between uses: a bucket is all-gathered before its forward or
//           backward and freed after (gradients as ZeRO-2).
// Each of a rank's buffers is flat [total] below the ZeRO level that shards it and [shard] from
// it on (ZeroBuffer): the optimizer finds a tensor's part in each at zero_part_offset.
// Padding never reaches a file: checkpoints are read and written per tensor (llmc/run/weights_io.h).
//
// Example: dp 2, a stage whose table is [a: 5 elements] (layer -1) [b: 12, c: 9] (layer 0)
// [d: 3] (layer -1). Multiples of dp*8 = 16:
//   bucket 0 {a}:    [ 0, 16)  a at 0, zeros 5..15     piece of rank 0 [ 0, 8), rank 1 [ 8,16)
//   bucket 1 {b,c}:  [16, 48)  b at 16, c at 28, zeros 37..47; rank 0 [16,32), rank 1 [32,48)
//   bucket 2 {d}:    [48, 64)  d at 48, zeros 51..63;  rank 0 [48,56), rank 1 [56,64)
// total 64; rank 1's shard [32] = flat [8,16) [32,48) [56,64); bucket 1 sits at 16/2 = 8 in it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>
#include "llmc/param_table.h"

struct Range {
    size_t lo = 0, hi = 0;
    size_t size() const { return hi - lo; }
};

static inline Range range_intersect(Range a, Range b) {
    Range r;
    r.lo = std::max(a.lo, b.lo);
    r.hi = std::max(r.lo, std::min(a.hi, b.hi));
    return r;
}

struct Bucket {
    Range range;               // in the flat buffer, padded: size a multiple of dp*8
    size_t used = 0;           // the tensors' elements at range.lo; zeros after them
    int layer = -1;            // block index, -1 for embeddings / final norm and head
    int first_spec = 0, end_spec = 0;  // specs [first_spec, end_spec) of the table
};

// Buckets of a table whose offsets zero_pad_table(t, dp) laid out.
static inline std::vector<Bucket> zero_buckets(const ParamTable& t, int dp) {
    std::vector<Bucket> b;
    const size_t q = (size_t)dp * 8;
    for (int k = 0; k < (int)t.specs.size(); k++) {
        const ParamSpec& s = t.specs[k];
        // a new bucket at a new layer, and between the embeddings and the final norm and head
        const bool same = !b.empty() && b.back().layer == s.layer && !(s.layer == -1 && t.specs[k - 1].layer != -1);
        if (same) { b.back().used += s.numel(); b.back().end_spec = k + 1; }
        else { Bucket nb; nb.range.lo = s.offset; nb.used = s.numel(); nb.layer = s.layer; nb.first_spec = k; nb.end_spec = k + 1; b.push_back(nb); }
        b.back().range.hi = b.back().range.lo + (b.back().used + q - 1) / q * q;
    }
    return b;
}

// Moves the offsets of t (laid out densely) to the padded layout above; sets t->total.
static inline void zero_pad_table(ParamTable* t, int dp) {
    size_t at = 0;
    for (const Bucket& b : zero_buckets(*t, dp)) {  // dense offsets: each bucket's tensors are consecutive
        for (int k = b.first_spec; k < b.end_spec; k++) t->specs[k].offset = at + (t->specs[k].offset - b.range.lo);
        at += b.range.size();
    }
    t->total = at;
}

// dp rank r's piece of bucket b, in the flat buffer.
static inline Range zero_piece(const Bucket& b, int dp, int r) {
    const size_t n = b.range.size() / dp;
    return {b.range.lo + (size_t)r * n, b.range.lo + (size_t)(r + 1) * n};
}
// Where bucket b's piece sits in a shard buffer, and the shard's size.
static inline size_t zero_shard_offset(const Bucket& b, int dp) { return b.range.lo / dp; }
static inline size_t zero_shard_size(const ParamTable& t, int dp) { return t.total / dp; }

// A tensor's part inside one dp rank's piece of a bucket: what that rank's optimizer updates (and its norm sums).
// flat: the range in flat-buffer positions; shift: flat position - shard position, so flat.lo - shift is where it
// sits in a shard buffer (the bucket's piece starts at zero_shard_offset there).
struct ZeroPart {
    Range flat;
    size_t shift = 0;
    int spec = 0;  // the tensor, an index into t.specs
};

// The parts of every tensor within dp rank r's piece of each bucket, in bucket and table order; whole_bucket: the
// whole bucket instead of the piece (ZeRO 0: every rank updates everything), shift 0. Bucket padding is in no part.
static inline std::vector<ZeroPart> zero_parts(const ParamTable& t, const std::vector<Bucket>& bs, int dp, int r,
                                               bool whole_bucket) {
    std::vector<ZeroPart> out;
    for (const Bucket& b : bs) {
        const Range mine = whole_bucket ? b.range : zero_piece(b, dp, r);
        const size_t shift = whole_bucket ? 0 : mine.lo - zero_shard_offset(b, dp);
        for (int k = b.first_spec; k < b.end_spec; k++) {
            const Range f = range_intersect({t.specs[k].offset, t.specs[k].offset + t.specs[k].numel()}, mine);
            if (f.size() == 0) continue;
            ZeroPart p;
            p.flat = f; p.shift = shift; p.spec = k;
            out.push_back(p);
        }
    }
    return out;
}

// The ZeRO level from which a kind of buffer holds only this rank's shard: the fp32 master weights and the AdamW
// moments from 1, the (reduced) gradients from 2, the weights from 3.
enum ZeroBuffer { ZERO_OPTIM = 1, ZERO_GRADS = 2, ZERO_PARAMS = 3 };

// Where part p (zero_parts(.., whole_bucket = zero == 0)) sits in a buffer of kind `kind` at ZeRO level `zero`: its
// flat position below the stage that shards the buffer, its shard position from it on.
static inline size_t zero_part_offset(const ZeroPart& p, ZeroBuffer kind, int zero) {
    return p.flat.lo - (zero >= (int)kind ? p.shift : 0);
}

// shard[total/dp] = dp rank r's pieces of flat[total], in bucket order.
template <typename T>
static inline void zero_take_shard(const std::vector<Bucket>& bs, int dp, int r, const T* flat, T* shard) {
    for (const Bucket& b : bs) {
        const Range p = zero_piece(b, dp, r);
        std::copy(flat + p.lo, flat + p.hi, shard + zero_shard_offset(b, dp));
    }
}
