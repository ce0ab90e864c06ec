// llmc/parallel/pp_exec.h: the pipeline executor. It walks one stage's list of steps (llmc/parallel/pp_schedule.h)
// and calls the trainer for each: receive / send of activations and gradients, forward and
// backward of a (micro-batch, chunk), and the acquire / release of that pair's activations. It
// decides when activations are acquired (at their receive, or at the forward of the first
// chunk) and released (after the backward of chunk 0 or the send of the input gradient; in a
// forward-only run after the last chunk's forward or the send of the output), and the message
// tags. The trainer owns the buffers and the collectives. Two ways to communicate:
//   - exchange unset (MPI): recv_act / send_act / recv_grad / send_grad one at a time in list
//     order; sends must not block (the trainer waits for them after pp_run), receives block.
//   - exchange set (NCCL): the communication ops between two compute ops (pp_steps: 1 to 4, at
//     most one of each kind) are handed over together; the trainer posts them as one group
//     (ncclGroupStart, ncclSend / ncclRecv, ncclGroupEnd) and returns when the group is done on
//     its stream. Buffers named by a step's receives are acquired before the call, those of its
//     sends released after it. Messages between two stages arrive in the order issued, so tags
//     are not needed (they are passed anyway).
// pp_run_stage runs a stage's schedule, training or forward only; the CPU trainer's gpt_pipeline and llmc/gpt/pipeline.cuh's
// pp_pipeline supply the callbacks.
#pragma once
#include <functional>
#include <set>
#include <utility>
#include <vector>
#include "llmc/parallel/pp_schedule.h"

// One send or receive: kind PP_RECV_ACT (into chunk's input), PP_SEND_ACT (chunk's output),
// PP_RECV_GRAD (into the gradient of chunk's output) or PP_SEND_GRAD (chunk's input gradient),
// of (mb, chunk), to / from stage `peer`, under `tag` (pp_tag, the same at both ends).
struct PpMsg {
    PpKind kind;
    int mb, chunk, peer, tag;
};

struct PpCallbacks {
    std::function<void(int mb, int chunk)> acquire, release;       // activations of (mb, chunk)
    std::function<void(int mb, int chunk)> forward, backward;
    // peer: a stage (pp group rank); tag: the message's tag (pp_tag), the same at both ends
    std::function<void(int mb, int chunk, int peer, int tag)> recv_act, send_act, recv_grad, send_grad;
    // msgs[n], n 1 to 4: post all as one group in this order, return when all are done (see above)
    std::function<void(const PpMsg* msgs, int n)> exchange;
};

// The tag of the activation entering chunk `chunk` (grad false) or of the gradient of its output (true).
static inline int pp_tag(int mb, int chunk, bool grad, int n_chunks) { return (mb * n_chunks + chunk) * 2 + (grad ? 1 : 0); }

// The message of communication op o.
static inline PpMsg pp_msg(const PpOp& o, int n_chunks) {
    int tag = 0;
    if (o.kind == PP_RECV_ACT) tag = pp_tag(o.mb, o.chunk, false, n_chunks);
    if (o.kind == PP_SEND_ACT) tag = pp_tag(o.mb, o.chunk + 1, false, n_chunks);
    if (o.kind == PP_RECV_GRAD) tag = pp_tag(o.mb, o.chunk, true, n_chunks);
    if (o.kind == PP_SEND_GRAD) tag = pp_tag(o.mb, o.chunk - 1, true, n_chunks);
    return {o.kind, o.mb, o.chunk, o.peer, tag};
}

// Runs ops (pp_schedule: training; pp_forward_schedule: forward only, backward false) of a
// model cut into n_chunks chunks.
static inline void pp_run(const std::vector<PpOp>& ops, int n_chunks, bool backward, const PpCallbacks& cb) {
    const int last = n_chunks - 1;
    std::set<std::pair<int, int>> live;  // (micro-batch, chunk) with activations
    auto acquire = [&](int mb, int chunk) { if (live.insert({mb, chunk}).second) cb.acquire(mb, chunk); };
    auto release = [&](int mb, int chunk) { live.erase({mb, chunk}); cb.release(mb, chunk); };
    auto before = [&](const PpOp& o) { if (o.kind == PP_RECV_ACT) acquire(o.mb, o.chunk); };
    auto after = [&](const PpOp& o) {
        if ((o.kind == PP_SEND_ACT && !backward) || o.kind == PP_SEND_GRAD) release(o.mb, o.chunk);
    };
    for (const std::pair<int, int>& st : pp_steps(ops)) {
        const PpOp& o = ops[st.first];
        if (o.kind == PP_FWD) {
            acquire(o.mb, o.chunk);
            cb.forward(o.mb, o.chunk);
            if (!backward && o.chunk == last) release(o.mb, o.chunk);
        } else if (o.kind == PP_BWD) {
            cb.backward(o.mb, o.chunk);
            if (o.chunk == 0) release(o.mb, o.chunk);
        } else if (cb.exchange) {
            std::vector<PpMsg> msgs;
            for (int i = st.first; i < st.second; i++) { before(ops[i]); msgs.push_back(pp_msg(ops[i], n_chunks)); }
            cb.exchange(msgs.data(), (int)msgs.size());
            for (int i = st.first; i < st.second; i++) after(ops[i]);
        } else {
            for (int i = st.first; i < st.second; i++) {
                const PpOp& c = ops[i];
                const PpMsg m = pp_msg(c, n_chunks);
                before(c);
                if (c.kind == PP_RECV_ACT) cb.recv_act(m.mb, m.chunk, m.peer, m.tag);
                if (c.kind == PP_SEND_ACT) cb.send_act(m.mb, m.chunk, m.peer, m.tag);
                if (c.kind == PP_RECV_GRAD) cb.recv_grad(m.mb, m.chunk, m.peer, m.tag);
                if (c.kind == PP_SEND_GRAD) cb.send_grad(m.mb, m.chunk, m.peer, m.tag);
                after(c);
            }
        }
    }
}

// Runs pipeline stage `stage` of pp stages (vpp chunks each: pp * vpp chunks) over n_mb micro-batches: its training
// schedule (pp_schedule), or with backward false its forward-only one (pp_forward_schedule). Both trainers call this.
static inline void pp_run_stage(int pp, int vpp, int stage, int n_mb, bool backward, const PpCallbacks& cb) {
    const std::vector<PpOp> ops = backward ? pp_schedule(pp, vpp, n_mb, stage) : pp_forward_schedule(pp, vpp, n_mb, stage);
    pp_run(ops, pp * vpp, backward, cb);
}
