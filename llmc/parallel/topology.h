// llmc/parallel/topology.h: where a rank sits in the parallel layout. world = pp x dp x tp with tp
// varying fastest (a tensor-parallel group sits inside a node), then dp, then pp:
//     rank = (pp_rank * dp + dp_rank) * tp + tp_rank
// Each rank belongs to one group of each kind: its tp group (same pp, dp), its dp group (same
// pp, tp), its pp group (same dp, tp; the pipeline it is a stage of) and, when the embedding is
// tied and pp > 1, the embedding group {first stage, last stage} of its pipeline. Groups list
// world ranks in group-rank order. Plain arithmetic, shared by the CPU (MPI) and CUDA (NCCL)
// trainers.
#pragma once
#include <vector>

struct Topology {
    int world = 1, dp = 1, tp = 1, pp = 1;
    int rank = 0, dp_rank = 0, tp_rank = 0, pp_rank = 0;
    std::vector<int> tp_group, dp_group, pp_group, emb_group;  // world ranks
};

static inline int topo_rank_of(int dp, int tp, int pp_rank, int dp_rank, int tp_rank) {
    return (pp_rank * dp + dp_rank) * tp + tp_rank;
}

// Coordinates and groups of `rank` in a world of dp * tp * pp ranks.
static inline Topology topo_make(int dp, int tp, int pp, int rank) {
    Topology t;
    t.world = dp * tp * pp; t.dp = dp; t.tp = tp; t.pp = pp; t.rank = rank;
    t.tp_rank = rank % tp;
    t.dp_rank = rank / tp % dp;
    t.pp_rank = rank / (tp * dp);
    for (int i = 0; i < tp; i++) t.tp_group.push_back(topo_rank_of(dp, tp, t.pp_rank, t.dp_rank, i));
    for (int i = 0; i < dp; i++) t.dp_group.push_back(topo_rank_of(dp, tp, t.pp_rank, i, t.tp_rank));
    for (int i = 0; i < pp; i++) t.pp_group.push_back(topo_rank_of(dp, tp, i, t.dp_rank, t.tp_rank));
    t.emb_group = {t.pp_group.front()};
    if (pp > 1) t.emb_group.push_back(t.pp_group.back());
    return t;
}
