// llmc/parallel/pp_schedule.h: pipeline parallelism as plain lists. The model's layers are cut into
// pp * vpp chunks of contiguous layers; chunk c runs on stage c % pp (so with vpp = 1 stage s
// holds chunk s; with vpp > 1 it holds chunks s, s + pp, ... : the interleaved layout). The
// first chunk also holds the embeddings, the last one the final norm and the LM head.
//
// pp_schedule() lists, for one stage, the ordered steps of one optimizer step over n_mb
// micro-batches: forward and backward of (micro-batch, chunk), each preceded by the receive
// of its input (activation from the previous chunk, gradient from the next one) and followed
// by the send of its output (in the interleaved steady state, a forward and a backward share
// one such pair of places: both receives before, both sends after).
//
// Communication rule (NCCL's, worst case): a send may block until the peer has posted the
// matching receive, a receive until the send is posted, and messages between two stages match
// in the order they are issued (no tags). Run one op at a time, these orders deadlock (stage s
// blocks sending its next activation while stage s + 1 blocks sending a gradient back).
// pp_steps() therefore cuts a stage's list into steps: each compute op alone, and each maximal
// run of communication ops between two compute ops as one group, posted together and finished
// together (ncclGroupStart / ncclGroupEnd). With vpp = 1 a run is Megatron's
// send_forward_recv_backward or send_backward_recv_forward pair; with vpp > 1 the steady state
// lists both receives, the forward, the backward, then both sends, so a run is Megatron's
// four-op send_forward_backward_recv_forward_backward (the order of compute is unchanged).
// tests/test_parallel.cpp simulates every stage under these rules (pp 2-8, vpp 1-4, 1 to 3*pp
// micro-batches, training and forward only): no deadlock, and the k-th message between two
// stages is the one the receiver expects. With non-blocking sends and blocking receives (MPI)
// the ops may also run one at a time, in list order (simulated too).
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

enum PpKind { PP_RECV_ACT, PP_FWD, PP_SEND_ACT, PP_RECV_GRAD, PP_BWD, PP_SEND_GRAD };
struct PpOp {
    PpKind kind;
    int mb;     // micro-batch
    int chunk;  // model chunk, 0 .. pp*vpp-1
    int peer;   // stage sent to / received from (-1 for compute steps)
};

// First layer of each chunk, plus L at the end: [pp*vpp + 1]. `layout` lists layers per chunk
// ("3,5"); empty: even split. Returns "" or what is wrong, naming the number.
static inline std::string pp_layer_layout(int L, int pp, int vpp, const std::string& layout, std::vector<int>* first) {
    const int n = pp * vpp;
    std::vector<int> count;
    if (layout.empty()) {
        if (L < n) return "model has " + std::to_string(L) + " layers, fewer than pp*vpp = " + std::to_string(n) + " chunks";
        if (L % n != 0)
            return "model has " + std::to_string(L) + " layers, not divisible into pp*vpp = " + std::to_string(n) +
                   " chunks (pass --layout with " + std::to_string(n) + " counts)";
        count.assign(n, L / n);
    } else {
        size_t i = 0;
        while (i <= layout.size()) {
            size_t j = layout.find(',', i);
            if (j == std::string::npos) j = layout.size();
            std::string tok = layout.substr(i, j - i);
            char* end = nullptr;
            long x = strtol(tok.c_str(), &end, 10);
            if (tok.empty() || *end || x <= 0) return "--layout " + layout + ": '" + tok + "' is not a positive layer count";
            count.push_back((int)x);
            i = j + 1;
        }
        if ((int)count.size() != n)
            return "--layout " + layout + " has " + std::to_string(count.size()) + " entries, pp*vpp = " + std::to_string(n) + " expected";
        int sum = 0;
        for (int x : count) sum += x;
        if (sum != L) return "--layout " + layout + " sums to " + std::to_string(sum) + " layers, the model has " + std::to_string(L);
    }
    first->assign(1, 0);
    for (int x : count) first->push_back(first->back() + x);
    return "";
}

static inline int pp_stage_of_chunk(int chunk, int pp) { return chunk % pp; }

// Appends a compute step with its receive before and its send after.
static inline void pp_push(std::vector<PpOp>* ops, bool fwd, int mb, int chunk, int pp, int vpp) {
    const int last = pp * vpp - 1;
    if (fwd) {
        if (chunk > 0) ops->push_back({PP_RECV_ACT, mb, chunk, pp_stage_of_chunk(chunk - 1, pp)});
        ops->push_back({PP_FWD, mb, chunk, -1});
        if (chunk < last) ops->push_back({PP_SEND_ACT, mb, chunk, pp_stage_of_chunk(chunk + 1, pp)});
    } else {
        if (chunk < last) ops->push_back({PP_RECV_GRAD, mb, chunk, pp_stage_of_chunk(chunk + 1, pp)});
        ops->push_back({PP_BWD, mb, chunk, -1});
        if (chunk > 0) ops->push_back({PP_SEND_GRAD, mb, chunk, pp_stage_of_chunk(chunk - 1, pp)});
    }
}

// The k-th forward (or backward) of `stage`: which micro-batch and chunk.
static inline void pp_nth(int k, bool fwd, int stage, int pp, int vpp, int* mb, int* chunk) {
    if (vpp == 1) { *mb = k; *chunk = stage; return; }
    const int group = k % (pp * vpp);
    int local = group / pp;
    if (!fwd) local = vpp - 1 - local;
    *mb = k / (pp * vpp) * pp + k % pp;
    *chunk = local * pp + stage;
}

static inline std::vector<PpOp> pp_schedule(int pp, int vpp, int n_mb, int stage) {
    std::vector<PpOp> ops;
    const int total = n_mb * vpp;
    int warmup = vpp == 1 ? pp - stage - 1 : (pp - stage - 1) * 2 + (vpp - 1) * pp;
    warmup = std::min(warmup, total);
    int mb, chunk, f = 0, b = 0;
    for (; f < warmup; f++) { pp_nth(f, true, stage, pp, vpp, &mb, &chunk); pp_push(&ops, true, mb, chunk, pp, vpp); }
    for (; f < total; f++, b++) {
        if (vpp == 1) {
            pp_nth(f, true, stage, pp, vpp, &mb, &chunk); pp_push(&ops, true, mb, chunk, pp, vpp);
            pp_nth(b, false, stage, pp, vpp, &mb, &chunk); pp_push(&ops, false, mb, chunk, pp, vpp);
            continue;
        }
        // interleaved steady state: both receives, forward, backward, both sends
        int mb_b, chunk_b;
        pp_nth(f, true, stage, pp, vpp, &mb, &chunk);
        pp_nth(b, false, stage, pp, vpp, &mb_b, &chunk_b);
        std::vector<PpOp> fw, bw;
        pp_push(&fw, true, mb, chunk, pp, vpp);
        pp_push(&bw, false, mb_b, chunk_b, pp, vpp);
        for (const PpOp& o : fw) if (o.kind == PP_RECV_ACT) ops.push_back(o);
        for (const PpOp& o : bw) if (o.kind == PP_RECV_GRAD) ops.push_back(o);
        ops.push_back({PP_FWD, mb, chunk, -1});
        ops.push_back({PP_BWD, mb_b, chunk_b, -1});
        for (const PpOp& o : fw) if (o.kind == PP_SEND_ACT) ops.push_back(o);
        for (const PpOp& o : bw) if (o.kind == PP_SEND_GRAD) ops.push_back(o);
    }
    for (; b < total; b++) { pp_nth(b, false, stage, pp, vpp, &mb, &chunk); pp_push(&ops, false, mb, chunk, pp, vpp); }
    return ops;
}

// Forward only (validation): each micro-batch through the stage's chunks in order.
static inline std::vector<PpOp> pp_forward_schedule(int pp, int vpp, int n_mb, int stage) {
    std::vector<PpOp> ops;
    for (int mb = 0; mb < n_mb; mb++)
        for (int j = 0; j < vpp; j++) pp_push(&ops, true, mb, j * pp + stage, pp, vpp);
    return ops;
}

static inline bool pp_is_comm(PpKind k) { return k != PP_FWD && k != PP_BWD; }

// The steps of a stage's list, as [lo, hi) op ranges: a compute op alone, or the run of
// communication ops between two compute ops (1 to 4 ops, at most one of each kind), to be
// posted as one group.
static inline std::vector<std::pair<int, int>> pp_steps(const std::vector<PpOp>& ops) {
    std::vector<std::pair<int, int>> steps;
    const int n = (int)ops.size();
    for (int i = 0; i < n;) {
        int j = i + 1;
        if (pp_is_comm(ops[i].kind))
            while (j < n && pp_is_comm(ops[j].kind)) j++;
        steps.push_back({i, j});
        i = j;
    }
    return steps;
}
