// llmc/gpt/pipeline.cuh: pipeline parallel in the CUDA trainer.
// Part of train_gpt.cu's one translation unit (not a standalone header): included by train_gpt.cu after the backward,
// whose forward and backward of a chunk it schedules.
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

#include <functional>
#include <map>
#include <utility>
#include "llmc/parallel/pp_exec.h"
#include "llmc/parallel/pp_schedule.h"

// Pipeline parallel: this stage's list of steps (llmc/parallel/pp_schedule.h) run by pp_run (llmc/parallel/pp_exec.h). Each (micro-batch,
// chunk) in flight holds an activation slot s: acts[s * slot_layers ...] for the chunk's layers (its input received
// into the first one's x) and pp.io's two rows [N,C], the chunk's output and its output's gradient.

static size_t pp_io_rows(const GPT* g) { return (size_t)g->B * g->T / (g->tp.sp ? g->tp.n : 1); }  // Nl
static floatX* pp_out(const GPT* g, int s) { return g->pp.io + (size_t)s * 2 * pp_io_rows(g) * g->cfg.n_embd; }
static floatX* pp_dout(const GPT* g, int s) { return pp_out(g, s) + pp_io_rows(g) * g->cfg.n_embd; }

// The layer code reads slot s's activations for the layers of `chunk`.
static void pp_bind(GPT* g, int s, int chunk) {
    int l0, l1;
    bool first, last;
    chunk_span(g, chunk, &l0, &l1, &first, &last);
    for (int l = l0; l < l1; l++) g->layers[l] = g->acts[(size_t)s * g->pp.slot_layers + (l - l0)];
}

// One run of sends and receives between two compute steps (pp_steps), live: (micro-batch, chunk) -> slot. They are
// posted as one NCCL group on pp.comm.stream after the compute stream's work so far, and the compute stream waits for the
// group. A group's sends cannot block its receives, which is what keeps the schedule free of deadlock under NCCL's
// blocking, untagged sends (llmc/parallel/pp_schedule.h; tests/test_parallel.cpp simulates it).
static void pp_exchange(GPT* g, const PpMsg* msgs, int n, const std::map<std::pair<int, int>, int>& live) {
    const size_t NC = pp_io_rows(g) * g->cfg.n_embd;  // [Nl,C]: this rank's rows under SP
    ProfScope prof(PROF_PP_COMM, prof_bytes((double)n * NC * sizeof(floatX)));  // the messages' bytes
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->pp.comm.stream, g->ev_compute, 0));
    comm_group_start();
    for (int i = 0; i < n; i++) {
        const PpMsg& m = msgs[i];
        const int s = live.at({m.mb, m.chunk});
        CommRequest req;  // finished with the group: the compute stream waits for pp.comm.stream below
        if (m.kind == PP_RECV_ACT) comm_recv(g->pp.comm, g->acts[(size_t)s * g->pp.slot_layers].x, NC, m.peer, m.tag);
        else if (m.kind == PP_SEND_ACT) comm_send(g->pp.comm, (const floatX*)pp_out(g, s), NC, m.peer, m.tag, &req);
        else if (m.kind == PP_RECV_GRAD) comm_recv(g->pp.comm, pp_dout(g, s), NC, m.peer, m.tag);
        else comm_send(g->pp.comm, (const floatX*)pp_dout(g, s), NC, m.peer, m.tag, &req);
    }
    comm_group_end();
    cudaCheck(cudaEventRecord(g->pp.ev_pp, g->pp.comm.stream));
    cudaCheck(cudaStreamWaitEvent(g->stream, g->pp.ev_pp, 0));
}

// This stage's schedule over the n_mb micro-batches uploaded into buffers 0 .. n_mb-1: training (backward, each
// micro-batch's loss scaled by `scale`, the first one's also by mb0 (llmc/run/guard.h's test hooks), the gradients
// accumulated, not reduced) or forward only; after the forward of the last chunk of a micro-batch, head() (validation:
// its loss). Only enqueues work, but for the groups' waits.
static void pp_pipeline(GPT* g, int n_mb, bool backward, double scale, const std::function<void()>& head,
                        TestCorrupt mb0 = {}) {
    const Layout& L = g->L;
    const int last = L.n_chunks() - 1;
    std::map<std::pair<int, int>, int> live;  // (micro-batch, chunk) -> activation slot
    std::vector<int> free_slots;
    for (int s = g->pp.n_slots - 1; s >= 0; s--) free_slots.push_back(s);
    PpCallbacks cb;
    cb.acquire = [&](int mb, int chunk) {
        if (free_slots.empty())
            die("pipeline stage %d: more than the %d (micro-batch, chunk) activation slots planned in flight",
                L.topo.pp_rank, g->pp.n_slots);
        live[{mb, chunk}] = free_slots.back();
        free_slots.pop_back();
    };
    cb.release = [&](int mb, int chunk) {
        free_slots.push_back(live.at({mb, chunk}));
        live.erase({mb, chunk});
    };
    cb.forward = [&](int mb, int chunk) {
        const int s = live.at({mb, chunk});
        pp_bind(g, s, chunk);
        gpt_forward_chunk(g, mb, chunk, pp_out(g, s));
        if (chunk != last) return;
        g->pp.head_mb = mb;
        if (head) head();
    };
    cb.backward = [&](int mb, int chunk) {
        const int s = live.at({mb, chunk});
        // the schedule runs a micro-batch's last backward right after its last forward (the head's scratch is one)
        if (chunk == last && g->pp.head_mb != mb)
            die("pipeline stage %d: backward of micro-batch %d, but the head's scratch holds micro-batch %d",
                L.topo.pp_rank, mb, g->pp.head_mb);
        pp_bind(g, s, chunk);
        gpt_backward_chunk(g, mb, scale * mb0.grad_of(mb), scale * mb0.loss_of(mb), false, chunk,
                            pp_dout(g, s));
    };
    cb.exchange = [&](const PpMsg* msgs, int n) { pp_exchange(g, msgs, n, live); };
    pp_run_stage(L.topo.pp, L.vpp, L.topo.pp_rank, n_mb, backward, cb);
}
