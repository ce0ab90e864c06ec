// llmc/pp_schedule.h: pipeline parallelism as plain lists. The model's layers are cut into
// pp * vpp chunks of contiguous layers; chunk c runs on stage c % pp (so with vpp = 1 stage s
// holds chunk s; with vpp > 1 it holds chunks s, s + pp, ... : the interleaved layout). The
// first chunk also holds the embeddings, the last one the final norm and the LM head.
//
// pp_schedule() lists, for one stage, the ordered steps of one optimizer step over n_mb
// micro-batches: forward and backward of (micro-batch, chunk), each preceded by the receive
// of its input (activation from the previous chunk, gradient from the next one) and followed
// by the send of its output. Sends are meant to be non-blocking and receives blocking; the
// orders below cannot deadlock under that rule (tests/test_parallel.cpp simulates it).
//   vpp = 1: 1F1B. Stage s runs pp - s - 1 warm-up forwards, then alternates one forward and
//            one backward, then drains the backwards; at most pp - s micro-batches in flight.
//   vpp > 1: interleaved 1F1B (Megatron): forwards go through the stage's chunks in groups of
//            pp micro-batches (n_mb must be a multiple of pp), backwards in reverse chunk
//            order; warm-up (pp - s - 1) * 2 + (vpp - 1) * pp forwards.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>
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
        pp_nth(f, true, stage, pp, vpp, &mb, &chunk); pp_push(&ops, true, mb, chunk, pp, vpp);
        pp_nth(b, false, stage, pp, vpp, &mb, &chunk); pp_push(&ops, false, mb, chunk, pp, vpp);
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
