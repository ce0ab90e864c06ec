// llmc/pp_exec.h: the pipeline executor. It walks one stage's list of steps (llmc/pp_schedule.h)
// and calls the trainer for each: receive / send of activations and gradients, forward and
// backward of a (micro-batch, chunk), and the acquire / release of that pair's activations. It
// decides when activations are acquired (at their receive, or at the forward of the first
// chunk) and released (after the backward of chunk 0 or the send of the input gradient; in a
// forward-only run after the last chunk's forward or the send of the output), and the message
// tags. The trainer owns the buffers and the collectives; sends are meant to be non-blocking
// (the trainer waits for them after pp_run), receives blocking.
#pragma once
#include <functional>
#include <set>
#include <utility>
#include <vector>
#include "llmc/pp_schedule.h"

struct PpCallbacks {
    std::function<void(int mb, int chunk)> acquire, release;       // activations of (mb, chunk)
    std::function<void(int mb, int chunk)> forward, backward;
    // peer: a stage (pp group rank); tag: the message's tag (pp_tag), the same at both ends
    std::function<void(int mb, int chunk, int peer, int tag)> recv_act, send_act, recv_grad, send_grad;
};

// The tag of the activation entering chunk `chunk` (grad false) or of the gradient of its output (true).
static inline int pp_tag(int mb, int chunk, bool grad, int n_chunks) { return (mb * n_chunks + chunk) * 2 + (grad ? 1 : 0); }

// Runs ops (pp_schedule: training; pp_forward_schedule: forward only, backward false) of a
// model cut into n_chunks chunks.
static inline void pp_run(const std::vector<PpOp>& ops, int n_chunks, bool backward, const PpCallbacks& cb) {
    const int last = n_chunks - 1;
    std::set<std::pair<int, int>> live;  // (micro-batch, chunk) with activations
    auto acquire = [&](int mb, int chunk) { if (live.insert({mb, chunk}).second) cb.acquire(mb, chunk); };
    auto release = [&](int mb, int chunk) { live.erase({mb, chunk}); cb.release(mb, chunk); };
    for (const PpOp& o : ops) {
        switch (o.kind) {
            case PP_RECV_ACT:
                acquire(o.mb, o.chunk);
                cb.recv_act(o.mb, o.chunk, o.peer, pp_tag(o.mb, o.chunk, false, n_chunks));
                break;
            case PP_FWD:
                acquire(o.mb, o.chunk);
                cb.forward(o.mb, o.chunk);
                if (!backward && o.chunk == last) release(o.mb, o.chunk);
                break;
            case PP_SEND_ACT:
                cb.send_act(o.mb, o.chunk, o.peer, pp_tag(o.mb, o.chunk + 1, false, n_chunks));
                if (!backward) release(o.mb, o.chunk);
                break;
            case PP_RECV_GRAD:
                cb.recv_grad(o.mb, o.chunk, o.peer, pp_tag(o.mb, o.chunk, true, n_chunks));
                break;
            case PP_BWD:
                cb.backward(o.mb, o.chunk);
                if (o.chunk == 0) release(o.mb, o.chunk);
                break;
            case PP_SEND_GRAD:
                cb.send_grad(o.mb, o.chunk, o.peer, pp_tag(o.mb, o.chunk - 1, true, n_chunks));
                release(o.mb, o.chunk);
                break;
        }
    }
}
