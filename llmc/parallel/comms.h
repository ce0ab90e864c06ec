// llmc/parallel/comms.h: a rank's start in a parallel layout, the same in both trainers:
//   Comms          the communicator groups of this rank's layout: world, dp, tp, pp, and emb (the first and last
//                  pipeline stage, which sum the tied embedding's gradient; this rank alone on the other stages)
//   comms_make     the groups from the layout's member lists (llmc/parallel/topology.h, layout_emb_members)
//   layout_error   a bad layout or plan stops every rank before any work; rank 0 says what is wrong
//   make_layout    the flags checked against the world and the model (layout_make), then the layout and its groups
//   plan_or_pick   --plan and the layout planner (llmc/parallel/planner.h) over what the trainer runs (PlanSpace)
// Include it after the program's Comm backend: llmc/parallel/comm_mpi.h (the CPU trainer), comm_nccl.cuh or
// comm_one_rank.cuh (the CUDA trainer), which define Comm, comm_group and comm_finalize under the same names.
// One process: every group is that process, and nothing is communicated.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "llmc/model_config.h"
#include "llmc/train_config.h"
#include "llmc/parallel/layout.h"
#include "llmc/parallel/planner.h"

struct Comms {
    Comm world, dp, tp, pp, emb;
};

// Collective over world: every rank makes its own groups of L, in the same order.
static inline Comms comms_make(const Comm& world, const Layout& L) {
    Comms cm;
    cm.world = world;
    cm.dp = comm_group(world, L.topo.dp_group, "dp");
    cm.tp = comm_group(world, L.topo.tp_group, "tp");
    cm.pp = comm_group(world, L.topo.pp_group, "pp");
    cm.emb = comm_group(world, layout_emb_members(L), "emb");
    return cm;
}

// Stops every rank (each has found the same error): world rank `rank` 0 prints "error: msg", exit 1. Before the
// ranks have started (the host-only modes) comm_finalize has nothing to end.
[[noreturn]] static inline void layout_error(int rank, const std::string& msg) {
    if (rank == 0) fprintf(stderr, "error: %s\n", msg.c_str());
    comm_finalize();
    exit(1);
}
[[noreturn]] static inline void layout_error(const Comm& world, const std::string& msg) { layout_error(world.rank, msg); }

// Checks the flags against the world and the model (layout_make, config_finalize(mc, tc.tp) done), then makes this
// rank's layout and its communicator groups into *cm; a bad layout stops every rank.
static inline Layout make_layout(const Comm& world, const ModelConfig& mc, const TrainConfig& tc, long total_batch, Comms* cm) {
    Layout L;
    const std::string err = layout_make(world.size, world.rank, mc, tc, total_batch, &L);
    if (!err.empty()) layout_error(world, err);
    *cm = comms_make(world, L);
    return L;
}

// What a trainer's planner chooses among, and how it counts (llmc/parallel/planner.h's plan_apply).
struct PlanSpace {
    std::vector<int> recomputes = {0};  // the --recompute values it may pick (0: none, the CPU trainer's only one)
    bool may_pick = true;               // false when a layout flag of the trainer's own was given (--recompute)
    PlanComm wire;                      // the bytes of an element on the wire
    PlanBytesFn bytes;                  // the bytes one rank of a layout holds
    const char* intro = nullptr;        // --plan: a line rank 0 prints first (what the trainer plans over)
};

// --plan prints the plan (rank 0) and exits 0; with --gpu-mem and no layout flag the planner writes its choice of
// layout into *tc and *recompute and prints why; a layout that cannot run, or none fitting, stops with the message
// naming the flag, exit 1. n_ranks, rank: the ranks started and this one's world rank (one, 0 without a launcher).
// Nothing is allocated.
static inline void plan_or_pick(const ModelConfig& mc, TrainConfig* tc, int* recompute, const PlanSpace& space, int n_ranks,
                                int rank) {
    if (rank == 0 && tc->plan && space.intro) printf("%s\n", space.intro);
    bool done = false;
    const std::string err = plan_apply(mc, tc, recompute, n_ranks, space.may_pick, space.recomputes, space.wire, space.bytes,
                                       rank == 0, &done);
    if (!err.empty()) layout_error(rank, err);
    if (done) {
        comm_finalize();
        exit(0);
    }
}
