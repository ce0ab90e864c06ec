// llmc/gpt/pipeline.cuh: pipeline parallel in the CUDA trainer: its state (struct Pipeline, a member of train_gpt.cu's
// struct GPT: the groups, the activation slots' plan, the buffers sent between stages) and its work: a stage's
// schedule run with the trainer's chunk forward and backward as callbacks (pp_pipeline, as llmc/parallel/pp_exec.h's
// pp_run takes them), the sends and receives between stages, and the tied embedding's gradient summed over the first
// and last stage. A header that stands alone. On one GPU (pp 1) none of it runs: one slot, one chunk, every layer.
//
// Pipeline parallel (--pp stages, --vpp chunks per stage, --layout layers per chunk; world = pp x dp x tp ranks, as
// train_gpt_cpu.cpp): the layers are cut into pp*vpp chunks, chunk c on stage c % pp (llmc/parallel/pp_schedule.h); a rank's
// parameter table holds its stage's tensors (gpt_local_table: the first stage the embeddings, the last the final norm
// and head, and with a tied head its own copy of wte), sliced for its tp rank and padded into buckets for its dp group
// (llmc/gpt/data_parallel.cuh). Under SP the activations sent between stages are this rank's Nl rows.
//   Schedule: 1F1B or interleaved 1F1B over the step's micro-batches, run by pp_run (llmc/parallel/pp_exec.h). Every
//   (micro-batch, chunk) in flight holds an activation slot: the LayerActs of its chunk's layers (acts[slot *
//   slot_layers + i]; g->layers[l] is bound to them before the layer code runs) and two [N,C] rows of pp.io, the
//   chunk's output and the gradient of it. The slots are the most pairs the stage's schedule keeps at once
//   (pp_slots_needed, walking the schedule as mem_plan_acts_walk does), so the memory estimate counts what is held.
//   A chunk's forward starts from the embeddings or from its input received into its first layer's x, and ends in the
//   final norm (the last chunk; its backward follows at once, so the head's scratch is one copy) or in its output
//   x_mid + y; its backward starts from the loss or from the received gradient and leaves its input's gradient in the
//   slot to send back.
//   Transfers: the sends and receives between two compute steps (pp_steps, 1 to 4 of them) are one NCCL group
//   (ncclGroupStart / ncclGroupEnd) on the pp group's stream, after an event of the compute stream, which then waits
//   for the group. NCCL's sends may block until received and carry no tags; posted as groups, the schedule cannot
//   deadlock (tests/test_parallel.cpp simulates every stage's groups under these rules).
//   Step end: every bucket is reduced over dp (head, layers in reverse, embeddings); the tied embedding's fp32
//   gradient is first summed between the first and last stage (the emb group, on its stream). The gradient norm and
//   the loss (the last stage's) are summed over every rank. Checkpoints: each stage's dp-rank-0 member sends its
//   gathered tensors to world rank 0, which writes the whole model, so any layout resumes any other.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <utility>
#include <vector>
#include "llmc/cuda_common.cuh"
#include "llmc/precision.cuh"
#include "llmc/profile.cuh"
#include "llmc/utils.h"
#include "llmc/parallel/comm.cuh"
#include "llmc/parallel/layout.h"
#include "llmc/parallel/pp_exec.h"
#include "llmc/parallel/pp_schedule.h"

// Pipeline parallel (--pp, --vpp, --layout): this rank runs its stage's chunks.
struct Pipeline {
    Comm comm, emb;             // the stages of this rank's pipeline; its first and last stage (tied embedding)
    int n = 1, stage = 0, vpp = 1;  // stages, this rank's stage, chunks per stage
    int n_slots = 1;            // activation slots: the most (micro-batch, chunk) pairs in flight (1 without pp)
    int slot_layers = 0;        // layers per slot: the stage's largest chunk (without pp: every layer)
    size_t rows = 0;            // Nl: the rows of an activation sent between stages (this rank's under SP)
    int C = 0;                  // its channels
    floatX* io = nullptr;       // per slot: the chunk's output [Nl,C] (sent on), then the gradient of its output [Nl,C]
                                // (received; the backward leaves its input's gradient there, sent back)
    int head_mb = -1;           // the micro-batch whose final norm (x_final, lnf, lnf_mean) the head scratch holds
    cudaEvent_t ev_compute = nullptr;  // recorded on the compute stream before comm.stream or emb.stream read its work
    cudaEvent_t ev_pp = nullptr, ev_emb = nullptr;  // recorded on comm.stream / emb.stream after their transfers
};

// The most (micro-batch, chunk) pairs whose activations pp_run (llmc/parallel/pp_exec.h) keeps at once on this rank's stage,
// training n_mb micro-batches or running any number forward only (validation; that peak is reached from 2 on): its
// acquires and releases counted over the schedules (mem_plan_acts_walk in llmc/parallel/memory_formula.h counts their bytes so).
static int pp_slots_needed(const Layout& L, int n_mb) {
    int live = 0, peak = 0;
    PpCallbacks cb;
    cb.acquire = [&](int, int) { peak = std::max(peak, ++live); };
    cb.release = [&](int, int) { live--; };
    cb.forward = cb.backward = [](int, int) {};
    cb.exchange = [](const PpMsg*, int) {};
    const int pp = L.topo.pp, s = L.topo.pp_rank;
    pp_run(pp_schedule(pp, L.vpp, n_mb, s), L.n_chunks(), true, cb);
    pp_run(pp_forward_schedule(pp, L.vpp, std::max(n_mb, 2), s), L.n_chunks(), false, cb);
    return peak;
}

// The plan of layout L for n_mb micro-batches a step over a model of n_layer layers: the activation slots this stage
// holds at once (pp_slots_needed: its schedule walked) and the layers of each (its largest chunk). pp 1: one slot of
// every layer.
static void pp_plan(Pipeline& pp, const Layout& L, int n_layer, int n_mb) {
    pp.n = L.topo.pp, pp.stage = L.topo.pp_rank, pp.vpp = L.vpp;
    pp.n_slots = 1;
    pp.slot_layers = n_layer;
    if (pp.n == 1) return;
    pp.slot_layers = 0;
    for (int ch = pp.stage; ch < L.n_chunks(); ch += pp.n)  // this stage's chunks are stage, stage + pp, ...
        pp.slot_layers = std::max(pp.slot_layers, L.chunk_first[ch + 1] - L.chunk_first[ch]);
    pp.n_slots = pp_slots_needed(L, n_mb);
}

// After the buffer table has placed pp.io: the shape of what is sent between stages, the events (pp > 1 only).
static void pp_build(Pipeline& pp, size_t rows, int C) {
    pp.rows = rows, pp.C = C;
    if (pp.n == 1) return;
    for (cudaEvent_t* e : {&pp.ev_compute, &pp.ev_pp, &pp.ev_emb}) cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
}
static void pp_free(Pipeline& pp) {
    if (pp.n == 1) return;
    for (cudaEvent_t e : {pp.ev_compute, pp.ev_pp, pp.ev_emb}) cudaCheck(cudaEventDestroy(e));
}

// Slot s's two rows of pp.io: the chunk's output [Nl,C], and the gradient of it [Nl,C].
static floatX* pp_out(const Pipeline& pp, int s) { return pp.io + (size_t)s * 2 * pp.rows * pp.C; }
static floatX* pp_dout(const Pipeline& pp, int s) { return pp_out(pp, s) + pp.rows * pp.C; }

// The tied embedding's fp32 gradient grad [n]: the first stage's (embedding) plus the last stage's (LM head), summed
// over the emb group on its stream once `ready` (an event after what wrote it) has passed. Returns the event after
// the sum, for whoever reads it next.
static cudaEvent_t pp_sum_tied_grad(Pipeline& pp, float* grad, size_t n, cudaEvent_t ready) {
    cudaCheck(cudaStreamWaitEvent(pp.emb.stream, ready, 0));
    comm_all_reduce_sum(pp.emb, grad, n);
    cudaCheck(cudaEventRecord(pp.ev_emb, pp.emb.stream));
    return pp.ev_emb;
}

// The trainer's work on (micro-batch, chunk) in activation slot `slot`:
struct PpChunks {
    // the chunk's forward: from the embeddings (chunk 0) or from the activation received into input(slot), to the
    // final norm (the last chunk) or to its output in pp_out(slot), sent on
    std::function<void(int mb, int chunk, int slot)> forward;
    // training: the chunk's backward, from the loss (the last chunk) or from the gradient received into
    // pp_dout(slot); it leaves its input's gradient in pp_dout(slot), sent back
    std::function<void(int mb, int chunk, int slot)> backward;
    // after the forward of a micro-batch's last chunk: validation reads its loss (may be unset)
    std::function<void(int mb)> head;
    // where slot's received activation goes (its first layer's input x)
    std::function<floatX*(int slot)> input;
};

// One run of sends and receives between two compute steps (pp_steps), live: (micro-batch, chunk) -> slot. They are
// posted as one NCCL group on pp.comm.stream after the compute stream's work so far, and the compute stream waits for the
// group. A group's sends cannot block its receives, which is what keeps the schedule free of deadlock under NCCL's
// blocking, untagged sends (llmc/parallel/pp_schedule.h; tests/test_parallel.cpp simulates it).
static void pp_exchange(Pipeline& pp, cudaStream_t stream, const PpChunks& fn, const PpMsg* msgs, int n,
                        const std::map<std::pair<int, int>, int>& live) {
    const size_t NC = pp.rows * pp.C;  // [Nl,C]: this rank's rows under SP
    ProfScope prof(PROF_PP_COMM, prof_bytes((double)n * NC * sizeof(floatX)));  // the messages' bytes
    cudaCheck(cudaEventRecord(pp.ev_compute, stream));
    cudaCheck(cudaStreamWaitEvent(pp.comm.stream, pp.ev_compute, 0));
    comm_group_start();
    for (int i = 0; i < n; i++) {
        const PpMsg& m = msgs[i];
        const int s = live.at({m.mb, m.chunk});
        CommRequest req;  // finished with the group: the compute stream waits for pp.comm.stream below
        if (m.kind == PP_RECV_ACT) comm_recv(pp.comm, fn.input(s), NC, m.peer, m.tag);
        else if (m.kind == PP_SEND_ACT) comm_send(pp.comm, (const floatX*)pp_out(pp, s), NC, m.peer, m.tag, &req);
        else if (m.kind == PP_RECV_GRAD) comm_recv(pp.comm, pp_dout(pp, s), NC, m.peer, m.tag);
        else comm_send(pp.comm, (const floatX*)pp_dout(pp, s), NC, m.peer, m.tag, &req);
    }
    comm_group_end();
    cudaCheck(cudaEventRecord(pp.ev_pp, pp.comm.stream));
    cudaCheck(cudaStreamWaitEvent(stream, pp.ev_pp, 0));
}

// This stage's schedule over n_mb micro-batches: training (forward and backward; the gradients accumulate, the
// trainer reduces them after) or forward only, each (micro-batch, chunk) in a free activation slot from its forward
// (or its input's receive) to its backward (or its last use). Only enqueues work on the compute stream, but for the
// groups' waits.
static void pp_pipeline(Pipeline& pp, cudaStream_t stream, int n_mb, bool backward, const PpChunks& fn) {
    const int last = pp.n * pp.vpp - 1;
    std::map<std::pair<int, int>, int> live;  // (micro-batch, chunk) -> activation slot
    std::vector<int> free_slots;
    for (int s = pp.n_slots - 1; s >= 0; s--) free_slots.push_back(s);
    PpCallbacks cb;
    cb.acquire = [&](int mb, int chunk) {
        if (free_slots.empty())
            die("pipeline stage %d: more than the %d (micro-batch, chunk) activation slots planned in flight",
                pp.stage, pp.n_slots);
        live[{mb, chunk}] = free_slots.back();
        free_slots.pop_back();
    };
    cb.release = [&](int mb, int chunk) {
        free_slots.push_back(live.at({mb, chunk}));
        live.erase({mb, chunk});
    };
    cb.forward = [&](int mb, int chunk) {
        fn.forward(mb, chunk, live.at({mb, chunk}));
        if (chunk != last) return;
        pp.head_mb = mb;
        if (fn.head) fn.head(mb);
    };
    cb.backward = [&](int mb, int chunk) {
        // the schedule runs a micro-batch's last backward right after its last forward (the head's scratch is one)
        if (chunk == last && pp.head_mb != mb)
            die("pipeline stage %d: backward of micro-batch %d, but the head's scratch holds micro-batch %d",
                pp.stage, mb, pp.head_mb);
        fn.backward(mb, chunk, live.at({mb, chunk}));
    };
    cb.exchange = [&](const PpMsg* msgs, int n) { pp_exchange(pp, stream, fn, msgs, n, live); };
    pp_run_stage(pp.n, pp.vpp, pp.stage, n_mb, backward, cb);
}
