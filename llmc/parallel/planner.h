// llmc/parallel/planner.h: the plan of a run before it runs (--plan), and the choice of a layout when the run
// gives none. Backend-neutral bookkeeping: the trainer supplies its bytes per rank (PlanBytesFn: the
// CPU trainer its fp32 buffers, llmc/parallel/memory_formula.h; the CUDA trainer its buffer table); this file checks
// layouts (llmc/parallel/layout.h), asks for the bytes once per pipeline stage and predicts the step time.
// docs/plan.md walks through the model with examples.
//   plan_make       one layout: a row of bytes per pipeline stage, the largest -b that fits, the step time
//   plan_candidates every layout of a world (zero, tp, pp, sp, micro-batch, recompute), fastest first
//   plan_print, plan_print_choice   the tables
//   plan_apply      what a trainer calls before allocating: --plan, or the planner's choice of layout
//
// Memory: one row per pipeline stage. The dp and tp ranks of a stage hold the same bytes (tp slices
// are equal, the vocabulary is padded to 128*tp, ZeRO pieces are equal), so a stage is one kind of
// rank. A row fits when its total is at most the memory per GPU (--gpu-mem). The largest
// micro-batch: the largest -b dividing the per-rank batch (-d / (t*dp) sequences) with every row fitting.
//
// Step time, one optimizer step of m micro-batches of N = b*t tokens, in seconds; communication is not
// overlapped with compute (an upper bound); bytes per element on the wire are the trainer's (PlanComm): w_a
// for activations and their gradients (tp, pp), w_g for gradients (dp reductions, the tied embedding), w_w
// for weights (ZeRO's all-gathers):
//   compute = F * d / world / gemm       F = model FLOPs per token (llmc/flops.h), d = tokens per step;
//                                        full recompute adds a forward (2 x matmul weights + 4 L qd T per
//                                        token), selective the attention forward (4 L qd T per token); act
//                                        and selective the MLP activation again, L (F1 + F) w_a bytes per token
//                                        at mem_bw
//   tp      = k * m * 2 (tp-1)/tp * N C w_a / bw_tp
//             k = 4 all-reduces of [N,C] per layer (L/pp layers), 2 forward and 2 backward (Shoeybi et al.
//             2019, sec. 3; Narayanan et al. 2021, sec. 3.2), 6 under full recompute (the forward's run
//             again); under SP each is an all-gather plus a reduce-scatter of the same volume (Korthikanti
//             et al. 2022, sec. 4.2.2), and a trainer that gathers the norm outputs again in the backward
//             instead of keeping them whole (PlanComm::sp_regather, without full recompute) adds 2 all-gathers
//             = 1 all-reduce per layer; + 2 for the vocabulary-parallel embedding and head (1 per end stage
//             when pp > 1)
//   pp      = 2 * m * vpp * Nl C w_a / bw_pp    an activation forward and a gradient backward per micro-batch
//             and chunk, point to point; Nl = N/tp under SP (Narayanan et al. 2021, sec. 4.1, scatter/gather)
//   bubble  = (compute + tp + pp) * (pp-1) / (vpp m)    1F1B idles (p-1)/m of the ideal time, i.e.
//             (p-1)/(m+p-1) of the pipeline's time; interleaving divides it by v (Narayanan et al. 2021, sec. 2.2)
//   dp      = V / bw_dp, V bytes sent per rank with ring collectives: an all-reduce of S bytes sends
//             2 (d-1)/d S, a reduce-scatter or an all-gather (d-1)/d S (Rajbhandari et al. 2020, sec. 7);
//             P = the rank's padded parameter count, P' = (d-1)/d P, the llmc/parallel/zero.h collectives:
//               ZeRO 0: all-reduce of the gradients                                  2 P' w_g
//               ZeRO 1: all-reduce, then all-gather of the updated weights           2 P' w_g + P' w_w
//                       (the paper's ZeRO 1 sends 2 P': it reduce-scatters instead of all-reducing)
//               ZeRO 2: reduce-scatter of the layer buckets every micro-batch, of the embedding and head
//                       buckets once, all-gather of the weights  (m P'_layers + P'_ends) w_g + P' w_w
//               ZeRO 3: the same reduce-scatters, and all-gathers before every forward and backward of
//                       every micro-batch                        (m P'_layers + P'_ends) w_g + 2 m P' w_w
//                       (m = 1, w_w = w_g: 3 P' w_g, the paper's 1.5x of data parallelism)
//             + the tied embedding's gradient, all-reduced between the first and last stage: Vp/tp C w_g
//   step    = compute + tp + pp + bubble + dp
// Each of tp, pp and dp also pays a latency per message (the alpha of the alpha-beta model, Hockney
// 1994): tp k m collectives (2 k m under SP), pp 2 m vpp sends, dp one collective per bucket and per
// collective above (ZeRO-2/3: the layer buckets m times); without it a tiny model would always prefer
// the layout that sends the fewest bytes, however many messages.
// bw: --link-gbs for a group inside a node (the bus bandwidth of the ring factors above, per direction:
// NVLink 4 on an H100 SXM moves 900 GB/s both ways, 450 GB/s each way), --node-gbs when the group spans
// nodes of --gpus-per-node (one 400 Gb/s NIC per GPU: 50 GB/s). gemm: --gemm-tflops, default 0.6 x the
// H100 SXM dense bf16 peak of 989 TFLOP/s (docs/design.md section 7; a measured GEMM reaches ~800).
// Latency: --comm-latency-us, default 10 us per message (the order of a small NCCL collective in a node).
#pragma once
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>
#include "llmc/train_config.h"
#include "llmc/model_config.h"
#include "llmc/flops.h"
#include "llmc/parallel/layout.h"
#include "llmc/param_table.h"
#include "llmc/parallel/zero.h"

// Bytes one rank holds, by kind.
struct PlanBytes {
    double weights = 0;    // parameters as the forward reads them (ZeRO-3: the shard + gathered buckets)
    double grads = 0;      // gradients (ZeRO-2/3: the shard + bucket scratch)
    double optim = 0;      // master weights and AdamW moments
    double acts = 0;       // activations at their peak (recompute, flash attention, 1F1B in flight)
    double buckets = 0;    // communication buffers the trainer keeps apart from the above
    double workspace = 0;  // scratch, GEMM workspace, reserve
    double nccl = 0;       // the communication library's own device buffers (the CUDA trainer: --nccl-mem per
                           // communicator, layout_communicators; 0 for MPI on the host)
    std::string err;       // non-empty: the trainer cannot run this layout (its kernels' limits), why
    double total() const { return weights + grads + optim + acts + buckets + workspace + nccl; }
};

// The trainer's bytes for one rank of layout L: the rank of L.topo (its stage is L.topo.pp_rank),
// micro-batches of B x T, n_mb of them per step, recompute 0 none, 1 selective, 2 full, 3 act. c is the
// model with the vocabulary padded for L's tp (config_finalize(c, tp)).
typedef std::function<PlanBytes(const ModelConfig& c, const Layout& L, int B, int T, int n_mb, int recompute)> PlanBytesFn;

// What the trainer sends, for the step time: bytes per element on the wire, and whether under SP it gathers the norm
// outputs again in the backward (one copy for all layers) rather than keeping every layer's gathered copy.
struct PlanComm {
    double grad_bytes = 4;     // gradients: the dp reductions, the tied embedding between the end stages
    double weight_bytes = 4;   // weights: ZeRO's all-gathers
    double act_bytes = 4;      // activations and their gradients: tp collectives, pp sends
    bool sp_regather = false;
};

// The machine the plan is for (flags --gpu-mem --gemm-tflops --link-gbs --node-gbs --gpus-per-node).
struct PlanHardware {
    double mem_bytes = 0;      // per GPU; 0: no limit
    double gemm_flops = 0;     // per GPU per second
    double link_bw = 0;        // bytes per second inside a node
    double node_bw = 0;        // bytes per second across nodes
    double latency = 0;        // seconds per message
    int gpus_per_node = 8;
    double mem_bw = 2.94e12;   // bytes per second of device memory, for the recomputed activation's pass (the copy
                               // measured on the lent H100, docs/gpu.md)
};

static inline PlanHardware plan_hardware(const TrainConfig& tc) {
    PlanHardware hw;
    hw.mem_bytes = tc.gpu_mem_gib * 1073741824.0;
    hw.gemm_flops = tc.gemm_tflops * 1e12;
    hw.link_bw = tc.link_gbs * 1e9;
    hw.node_bw = tc.node_gbs * 1e9;
    hw.latency = tc.comm_latency_us * 1e-6;
    hw.gpus_per_node = tc.gpus_per_node;
    return hw;
}

static inline const char* plan_recompute_name(int r) {
    return r == 3 ? "act" : r == 2 ? "full" : r == 1 ? "selective" : "none";
}

struct PlanRow {
    int stage = 0, ranks = 0;  // the pipeline stage, and how many ranks are of its kind (dp * tp)
    PlanBytes bytes;
};

struct Plan {
    std::string err;           // "" or why the layout cannot run (naming the flag)
    TrainConfig tc;            // the layout flags (tp, pp, zero, sp, vpp, layout), B, T, total_batch
    int world = 0, dp = 0, n_mb = 0, recompute = 0;
    std::vector<PlanRow> rows; // one per stage
    double peak = 0;           // the largest row total
    bool fits = true;
    int max_B = 0;             // the largest -b that fits (0: none; -1: not searched)
    double flops = 0;                       // model FLOPs per rank per step, recompute included
    double tp_bytes = 0, pp_bytes = 0, dp_bytes = 0;  // sent per rank per step
    double tp_msgs = 0, pp_msgs = 0, dp_msgs = 0;     // messages (collectives, sends) per rank per step
    double tp_bw = 0, pp_bw = 0, dp_bw = 0;
    double compute_s = 0, tp_s = 0, pp_s = 0, bubble_s = 0, dp_s = 0, step_s = 0;
    double act_s = 0;                       // of compute_s: the recomputed MLP activation's memory-bound pass
};

// Whether the members of a group sit on more than one node (nodes of gpn consecutive ranks).
static inline bool plan_spans_nodes(const std::vector<int>& members, int gpn) {
    for (int r : members)
        if (r / gpn != members.front() / gpn) return true;
    return false;
}

// The rows and the step time of one layout. tc holds the layout flags, B, T and total_batch (0: B*T*dp);
// mc is the model (config_finalize'd; padded again here for tc.tp); wire: what the trainer sends.
// find_max_b: also search the largest -b that fits.
static inline Plan plan_make(const ModelConfig& mc_in, const TrainConfig& tc, int world, int recompute,
                             const PlanComm& wire, const PlanHardware& hw, const PlanBytesFn& bytes,
                             bool find_max_b = true) {
    Plan p;
    p.tc = tc; p.world = world; p.recompute = recompute;
    if (p.tc.total_batch <= 0 && world % (tc.tp * tc.pp) == 0) p.tc.total_batch = (long)tc.B * tc.T * (world / (tc.tp * tc.pp));
    ModelConfig c = mc_in;
    config_finalize(c, tc.tp);
    Layout L0;
    p.err = layout_make(world, 0, c, p.tc, p.tc.total_batch, &L0);
    if (!p.err.empty()) return p;
    const int dp = L0.topo.dp, tp = L0.topo.tp, pp = L0.topo.pp, B = tc.B, T = tc.T;
    const long total_batch = p.tc.total_batch;
    p.dp = dp;
    p.n_mb = (int)(total_batch / ((long)B * T * dp));
    // one row per stage: its dp rank 0, tp rank 0
    for (int s = 0; s < pp; s++) {
        Layout L;
        layout_make(world, topo_rank_of(dp, tp, s, 0, 0), c, p.tc, total_batch, &L);
        PlanRow row;
        row.stage = s; row.ranks = dp * tp;
        row.bytes = bytes(c, L, B, T, p.n_mb, recompute);
        if (!row.bytes.err.empty()) { p.err = row.bytes.err; return p; }
        p.peak = std::max(p.peak, row.bytes.total());
        p.rows.push_back(row);
    }
    p.fits = hw.mem_bytes <= 0 || p.peak <= hw.mem_bytes;
    // the largest micro-batch: -b dividing the per-rank batch, every stage fitting
    p.max_B = -1;
    if (find_max_b) {
        p.max_B = 0;
        const long per_rank = total_batch / ((long)T * dp);
        for (long b = 1; b <= per_rank; b++) {
            if (per_rank % b != 0) continue;
            TrainConfig t2 = p.tc;
            t2.B = (int)b;
            Plan q = plan_make(mc_in, t2, world, recompute, wire, hw, bytes, false);
            if (q.err.empty() && q.fits) p.max_B = (int)b;
        }
    }
    // compute
    const double tokens = (double)total_batch, L = c.n_layer, qd = cfg_q_dim(c);
    double per_token = model_flops_per_token(c, T);
    if (recompute == 2) per_token += 2.0 * (double)matmul_weight_count(c) + 4.0 * L * qd * T;
    if (recompute == 1) per_token += 4.0 * L * qd * T;
    p.flops = per_token * tokens / world;
    p.compute_s = p.flops / hw.gemm_flops;
    // act and selective also run the MLP activation again, a memory-bound pass (fc1's output read, the activation
    // written: F1 + F elements a token and layer) at the device's memory bandwidth
    if (recompute == 3 || recompute == 1)
        p.act_s = L * (cfg_fc1_dim(c) + (double)c.ffn) * wire.act_bytes * tokens / world / hw.mem_bw;
    p.compute_s += p.act_s;
    auto bw_of = [&](const std::vector<int>& members) { return plan_spans_nodes(members, hw.gpus_per_node) ? hw.node_bw : hw.link_bw; };
    const double N = (double)B * T, C = c.n_embd, m = p.n_mb;
    // tensor parallelism
    if (tp > 1) {
        const double per_layer = recompute == 2 ? 6.0 : L0.sp && wire.sp_regather ? 5.0 : 4.0;
        const double k = per_layer * (L / pp) + (pp == 1 ? 2.0 : 1.0);
        p.tp_bytes = k * m * 2.0 * (tp - 1) / tp * N * C * wire.act_bytes;
        p.tp_msgs = k * m * (L0.sp ? 2 : 1);
        p.tp_bw = bw_of(L0.topo.tp_group);
        p.tp_s = p.tp_bytes / p.tp_bw + p.tp_msgs * hw.latency;
    }
    // pipeline parallelism
    if (pp > 1) {
        const double Nl = L0.sp ? N / tp : N;
        p.pp_bytes = 2.0 * m * L0.vpp * Nl * C * wire.act_bytes;
        p.pp_msgs = 2.0 * m * L0.vpp;
        p.pp_bw = bw_of(L0.topo.pp_group);
        p.pp_s = p.pp_bytes / p.pp_bw + p.pp_msgs * hw.latency;
        p.bubble_s = (p.compute_s + p.tp_s + p.pp_s) * (pp - 1) / (L0.vpp * m);
    }
    // data parallelism (and the tied embedding between the end stages): the largest stage's buckets
    {
        const ParamTable full = build_param_table(c);
        p.dp_bw = bw_of(dp == 1 && pp > 1 ? L0.topo.emb_group : L0.topo.dp_group);
        for (int s = 0; s < pp; s++) {
            const LocalTable lt = gpt_local_table(c, full, L0, s, 0);
            double layers = 0, ends = 0, n_layers = 0, n_ends = 0;  // elements and buckets
            for (const Bucket& b : zero_buckets(lt.t, dp)) {
                (b.layer >= 0 ? layers : ends) += (double)b.range.size();
                (b.layer >= 0 ? n_layers : n_ends) += 1;
            }
            const double f = (dp - 1.0) / dp, P = layers + ends, nb = n_layers + n_ends, wg = wire.grad_bytes,
                         ww = wire.weight_bytes;
            double v = 0, msgs = 0;
            if (dp > 1) {
                if (L0.zero == 0) { v = 2 * f * P * wg; msgs = nb; }
                else if (L0.zero == 1) { v = 2 * f * P * wg + f * P * ww; msgs = 2 * nb; }
                else if (L0.zero == 2) { v = f * (m * layers + ends) * wg + f * P * ww; msgs = m * n_layers + n_ends + nb; }
                else { v = f * (m * layers + ends) * wg + 2 * m * f * P * ww; msgs = m * n_layers + n_ends + 2 * m * nb; }
            }
            if (c.tied && pp > 1 && (s == 0 || s == pp - 1)) { v += (double)c.padded_vocab / tp * C * wg; msgs += 1; }
            const double t = v / p.dp_bw + msgs * hw.latency;
            if (t > p.dp_s) { p.dp_s = t; p.dp_bytes = v; p.dp_msgs = msgs; }
        }
    }
    p.step_s = p.compute_s + p.tp_s + p.pp_s + p.bubble_s + p.dp_s;
    return p;
}

// Every layout of `world` ranks for the model (tc: B, T, total_batch, 0: B*T*world; its layout flags are replaced):
// tp dividing the heads, kv heads, ffn and world, at most 8 and within a node; pp dividing the layers;
// dp = world / (tp*pp); ZeRO 0-3 (0 only when dp is 1); SP on or off when tp > 1; each recompute mode
// in `recomputes`; every -b dividing the per-rank batch. vpp stays 1. The valid ones (layout_make's
// checks and the trainer's, PlanBytes::err), the fitting first, fastest first (ties: larger -b, then
// fewer bytes).
static inline std::vector<Plan> plan_candidates(const ModelConfig& mc, const TrainConfig& tc_in, int world,
                                                const std::vector<int>& recomputes, const PlanComm& wire,
                                                const PlanHardware& hw, const PlanBytesFn& bytes) {
    std::vector<Plan> out;
    TrainConfig tc = tc_in;
    if (tc.total_batch <= 0) tc.total_batch = (long)tc.B * tc.T * world;  // plain dp's default
    for (int tp = 1; tp <= std::min({8, world, hw.gpus_per_node}); tp++) {
        if (world % tp != 0) continue;
        for (int pp = 1; pp <= mc.n_layer; pp++) {
            if (mc.n_layer % pp != 0 || world % (tp * pp) != 0) continue;
            const int dp = world / (tp * pp);
            if (tc.total_batch % ((long)tc.T * dp) != 0) continue;
            const long per_rank = tc.total_batch / ((long)tc.T * dp);
            for (int zero = 0; zero <= (dp > 1 ? 3 : 0); zero++)
                for (int sp = 0; sp <= (tp > 1 ? 1 : 0); sp++)
                    for (int r : recomputes)
                        for (long b = 1; b <= per_rank; b++) {
                            if (per_rank % b != 0) continue;
                            TrainConfig t = tc;
                            t.tp = tp; t.pp = pp; t.dp = 0; t.zero = zero; t.sp = sp; t.vpp = 1; t.layout = ""; t.B = (int)b;
                            Plan p = plan_make(mc, t, world, r, wire, hw, bytes, false);
                            if (p.err.empty()) out.push_back(p);
                        }
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const Plan& a, const Plan& b) {
        if (a.fits != b.fits) return a.fits;
        const double tol = 1e-9 * std::max(a.step_s, b.step_s);
        if (std::abs(a.step_s - b.step_s) > tol) return a.step_s < b.step_s;
        if (a.tc.B != b.tc.B) return a.tc.B > b.tc.B;
        return a.peak < b.peak;
    });
    return out;
}

// A short name of a plan's layout: "tp 2 pp 4 dp 1 zero 1 sp 0 b 4 recompute none".
static inline std::string plan_layout_name(const Plan& p) {
    std::string s = layout_fmt("tp %d pp %d dp %d zero %d", p.tc.tp, p.tc.pp, p.dp, p.tc.zero);
    if (p.tc.tp > 1) s += p.tc.sp ? " sp 1" : " sp 0";
    if (p.tc.vpp > 1) s += layout_fmt(" vpp %d", p.tc.vpp);
    s += layout_fmt(" b %d", p.tc.B);
    if (p.recompute) s += layout_fmt(" recompute %s", plan_recompute_name(p.recompute));
    return s;
}

// Bytes in GiB, or MiB when the plan is under 1 GiB.
static inline double plan_unit(const Plan& p, const char** name) {
    const bool gib = p.peak >= 1073741824.0;
    *name = gib ? "GiB" : "MiB";
    return gib ? 1073741824.0 : 1048576.0;
}

static inline void plan_print(const Plan& p, const ModelConfig& c, const PlanHardware& hw) {
    const char* un;
    const double u = plan_unit(p, &un);
    printf("plan: %s on %d ranks = pp %d x dp %d x tp %d, ZeRO %d%s%s, micro-batch %d x %d, %d micro-batches per step "
           "(-d %ld tokens), recompute %s\n", c.name.c_str(), p.world, p.tc.pp, p.dp, p.tc.tp, p.tc.zero,
           p.tc.sp && p.tc.tp > 1 ? ", sp" : "", p.tc.vpp > 1 ? layout_fmt(", vpp %d", p.tc.vpp).c_str() : "", p.tc.B,
           p.tc.T, p.n_mb, p.tc.total_batch, plan_recompute_name(p.recompute));
    printf("memory per rank (%s)%s:\n", un, hw.mem_bytes > 0 ? layout_fmt(", limit %.2f %s (--gpu-mem)", hw.mem_bytes / u, un).c_str() : "");
    printf("  stage ranks |   weights     grads  optimizer  activations   buckets  workspace      nccl |     total | fits\n");
    for (const PlanRow& r : p.rows) {
        const PlanBytes& b = r.bytes;
        printf("  %5d %5d | %9.3f %9.3f %10.3f %12.3f %9.3f %10.3f %9.3f | %9.3f | %s\n", r.stage, r.ranks, b.weights / u,
               b.grads / u, b.optim / u, b.acts / u, b.buckets / u, b.workspace / u, b.nccl / u, b.total() / u,
               hw.mem_bytes <= 0 ? "-" : b.total() <= hw.mem_bytes ? "yes" : "NO");
    }
    if (p.max_B > 0) printf("largest micro-batch that fits: -b %d (-b dividing the %ld sequences per rank)\n", p.max_B,
                            p.tc.total_batch / ((long)p.tc.T * p.dp));
    else if (p.max_B == 0) printf("largest micro-batch that fits: none (even -b 1 exceeds --gpu-mem)\n");
    printf("predicted step: %.4g s = compute %.4g (%.4g TFLOP per rank at %.4g TFLOP/s", p.step_s, p.compute_s, p.flops / 1e12,
           hw.gemm_flops / 1e12);
    if (p.act_s > 0) printf(", the recomputed activation %.4g at %.4g GB/s", p.act_s, hw.mem_bw / 1e9);
    printf(")");
    auto comm = [&](const char* name, double s, double bytes, double msgs, double bw) {
        if (s > 0) printf(" + %s %.4g (%.4g GB at %.4g GB/s, %.0f messages)", name, s, bytes / 1e9, bw / 1e9, msgs);
    };
    comm("tp", p.tp_s, p.tp_bytes, p.tp_msgs, p.tp_bw);
    comm("pp", p.pp_s, p.pp_bytes, p.pp_msgs, p.pp_bw);
    if (p.bubble_s > 0) printf(" + bubble %.4g", p.bubble_s);
    comm("dp", p.dp_s, p.dp_bytes, p.dp_msgs, p.dp_bw);
    printf("\n");
    printf("predicted throughput: %.0f tokens/s per rank\n", (double)p.tc.total_batch / p.step_s / p.world);
    for (const PlanRow& r : p.rows)
        printf("plan bytes stage %d: weights %.0f grads %.0f optimizer %.0f activations %.0f buckets %.0f workspace %.0f "
               "nccl %.0f total %.0f\n", r.stage, r.bytes.weights, r.bytes.grads, r.bytes.optim, r.bytes.acts, r.bytes.buckets,
               r.bytes.workspace, r.bytes.nccl, r.bytes.total());
    fflush(stdout);
}

// The choice among candidates (plan_candidates' order): the first fitting one. When print: the few
// fastest layouts that fit (each with its best -b), and the faster ones that did not (each with its
// smallest peak), or when nothing fits, the layouts closest to fitting. Returns the index of the
// choice, or -1 when nothing fits.
static inline int plan_print_choice(const std::vector<Plan>& cands, const PlanHardware& hw, bool print) {
    int n_fit = 0;
    for (const Plan& p : cands) n_fit += p.fits;
    if (!print) return n_fit > 0 ? 0 : -1;
    const bool gib = hw.mem_bytes >= 1073741824.0;
    const double u = gib ? 1073741824.0 : 1048576.0;
    const char* un = gib ? "GiB" : "MiB";
    // a layout without its micro-batch
    auto key = [](const Plan& p) { return layout_fmt("%d %d %d %d %d", p.tc.tp, p.tc.pp, p.tc.zero, (int)p.tc.sp, p.recompute); };
    printf("layout planner: %zu candidates, %d fit %.3f %s per rank (--gpu-mem); fastest predicted first:\n", cands.size(),
           n_fit, hw.mem_bytes / u, un);
    std::vector<std::string> seen;
    for (const Plan& p : cands) {
        if (!p.fits || seen.size() == 5) break;
        if (std::find(seen.begin(), seen.end(), key(p)) != seen.end()) continue;
        printf("  %s %-44s step %.4g s, peak %.3f %s\n", seen.empty() ? "->" : "  ", plan_layout_name(p).c_str(), p.step_s, p.peak / u, un);
        seen.push_back(key(p));
    }
    std::vector<const Plan*> over;  // per layout, its variant of smallest peak
    for (const Plan& p : cands) {
        if (p.fits || (n_fit > 0 && p.step_s >= cands[0].step_s)) continue;
        bool found = false;
        for (const Plan*& q : over)
            if (key(*q) == key(p)) { found = true; if (p.peak < q->peak) q = &p; }
        if (!found) over.push_back(&p);
    }
    // nothing fits: the layouts closest to fitting
    if (n_fit == 0) std::stable_sort(over.begin(), over.end(), [](const Plan* a, const Plan* b) { return a->peak < b->peak; });
    if (!over.empty())
        printf("  %s:\n", n_fit > 0 ? "faster, but over the limit (each at its smallest peak among those)" : "over the limit, smallest peak first");
    for (size_t i = 0; i < std::min<size_t>(over.size(), 5); i++)
        printf("     %-44s step %.4g s, peak %.3f %s\n", plan_layout_name(*over[i]).c_str(), over[i]->step_s, over[i]->peak / u, un);
    if (n_fit > 0) printf("chosen: %s (the fastest predicted step that fits)\n", plan_layout_name(cands[0]).c_str());
    fflush(stdout);
    return n_fit > 0 ? 0 : -1;
}

// What a trainer does with --plan and --gpu-mem before it allocates anything, `mpi_world` ranks
// started (1 without mpirun). Picking: with --gpu-mem, none of the layout flags (tc->layout_given) and
// may_pick (the trainer's own layout flags, such as --recompute, not given either), the fastest
// fitting candidate over `recomputes` is written into *tc and *recompute, and the choice is printed.
// --plan: the plan of *tc for --world ranks (default: mpi_world when > 1, else dp*tp*pp) is printed
// and *done is set (the trainer exits 0). Printing only when print (rank 0). Returns "" or what is
// wrong, naming the flag (the trainer stops with it, exit 1).
static inline std::string plan_apply(const ModelConfig& mc, TrainConfig* tc, int* recompute, int mpi_world, bool may_pick,
                                     const std::vector<int>& recomputes, const PlanComm& wire, const PlanBytesFn& bytes,
                                     bool print, bool* done) {
    *done = false;
    const bool pick = !tc->layout_given && may_pick && tc->gpu_mem_gib > 0;
    if (!tc->plan && !pick) return "";
    if (!tc->plan && tc->world && tc->world != mpi_world)
        return layout_fmt("flag --world %d differs from the %d ranks started (mpirun -np); --world sizes a --plan", tc->world, mpi_world);
    const int W = tc->world ? tc->world : mpi_world > 1 ? mpi_world : (tc->dp ? tc->dp : 1) * tc->tp * tc->pp;
    // the global batch stays what -d says, or plain dp's default: every candidate trains on the same samples
    if (tc->total_batch == 0) tc->total_batch = (long)tc->B * tc->T * (pick ? W : std::max(1, W / (tc->tp * tc->pp)));
    const PlanHardware hw = plan_hardware(*tc);
    if (pick) {
        const std::vector<Plan> cands = plan_candidates(mc, *tc, W, recomputes, wire, hw, bytes);
        if (plan_print_choice(cands, hw, print) < 0)
            return layout_fmt("no layout of %d ranks (--world or mpirun -np) fits --gpu-mem %g GiB per rank with -d %ld -t %d "
                              "(raise --gpu-mem, lower -d or -t, or use more ranks)", W, tc->gpu_mem_gib, tc->total_batch, tc->T);
        const TrainConfig& c = cands[0].tc;
        tc->tp = c.tp; tc->pp = c.pp; tc->dp = 0; tc->zero = c.zero; tc->sp = c.sp; tc->vpp = 1; tc->layout = ""; tc->B = c.B;
        *recompute = cands[0].recompute;
    }
    if (!tc->plan) return "";
    const Plan p = plan_make(mc, *tc, W, *recompute, wire, hw, bytes);
    if (!p.err.empty()) return layout_fmt("--plan for --world %d: %s", W, p.err.c_str());
    if (print) {
        plan_print(p, mc, hw);
        if (hw.mem_bytes > 0) printf("%s --gpu-mem %g GiB\n", p.fits ? "fits" : "does not fit", tc->gpu_mem_gib);
        fflush(stdout);
    }
    *done = true;
    return "";
}
