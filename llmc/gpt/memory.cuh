// llmc/gpt/memory.cuh: what the CUDA trainer allocates and why: the buffer table (every activation and scratch
// buffer, one row each), the parallel plan of a rank (its table padded into buckets, its shard, its activation
// slots), the memory estimate printed before anything is allocated, the planner's bytes per layout, gpt_build
// (one allocation per kind, carved by the buffer table) and gpt_free.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>
#include "llmc/gpt/model.cuh"
#include "llmc/norm.cuh"
#include "llmc/qk_norm.cuh"
#include "llmc/rope.cuh"
#include "llmc/grad_norm.cuh"
#include "llmc/run/logger.h"
#include "llmc/parallel/comms.h"
#include "llmc/parallel/planner.h"
#include "llmc/parallel/pp_exec.h"
#include "llmc/parallel/pp_schedule.h"
#include "llmc/parallel/zero.h"

// The buffer table: every activation and scratch buffer of the run, one row each (its pointer, its elements,
// their type, and under each recompute mode whether every layer keeps its own copy). The memory estimate, the
// size of the one block that holds them and the carving of that block into the pointers all read it: a new
// buffer is a new row.

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Rows of the classifier's logits panel (Vpl: this rank's vocabulary columns): at most 256 MiB of logits, at least
// 64 rows.
static int classifier_panel(int Vpl, int B, int T) {
    const size_t rows = (256ull << 20) / (sizeof(floatX) * (size_t)Vpl);
    return (int)std::min<size_t>((size_t)B * T, std::max<size_t>(64, rows / 8 * 8));
}

// An activation under one recompute mode: every layer keeps its own copy for the backward (KEEP), or all
// layers share one copy that the backward recomputes before it reads it (RECOMPUTED).
static const bool KEEP = true, RECOMPUTED = false;

struct Buffer {
    void* ptr;                          // the pointer that receives the address: a GPT member, or acts[0]'s
                                        // LayerActs member (acts[i]'s is i LayerActs further on); null: a buffer
                                        // its header allocates, only counted here
    void (*set)(void* ptr, char* at);   // *(T**)ptr = (T*)at, T the pointer's element type
    size_t count, elem_bytes;           // one copy: count elements of sizeof(T) bytes
    bool activation;                    // a LayerActs member
    bool kept[4];                       // an activation under each --recompute mode (indexed by Recompute): KEEP or
                                        // RECOMPUTED
    bool dp;                            // a buffer of data parallel / ZeRO (count 0 on one rank)
    bool fp8;                           // a buffer of the fp8 path (count 0 without --fp8)
};

template <typename T>
static void set_address(void* ptr, char* at) { *(T**)ptr = (T*)at; }

template <typename T>
static Buffer activation(T** ptr, size_t count, bool none, bool act, bool selective, bool full) {
    Buffer b{ptr, set_address<T>, count, sizeof(T), true, {}, false, false};
    b.kept[RECOMPUTE_NONE] = none, b.kept[RECOMPUTE_ACT] = act, b.kept[RECOMPUTE_SELECTIVE] = selective;
    b.kept[RECOMPUTE_FULL] = full;
    return b;
}

template <typename T>
static Buffer scratch(T** ptr, size_t count) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), false, {}, false, false};
}

template <typename T>
static Buffer dp_buffer(T** ptr, size_t count) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), false, {}, true, false};
}

static Buffer counted(size_t count, size_t elem_bytes, bool fp8 = false) {
    return Buffer{nullptr, nullptr, count, elem_bytes, false, {}, false, fp8};
}

template <typename T>
static Buffer fp8_buffer(T** ptr, size_t count) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), false, {}, false, true};
}

// Bytes of one copy (256-byte aligned, as carved) and the copies the run holds under recompute mode r: n_acts =
// the layers times the activation slots (gpt_plan: n_slots * slot_layers) for a kept activation.
static size_t buffer_bytes(const Buffer& b) { return align256(b.count * b.elem_bytes); }
static size_t buffer_copies(const Buffer& b, Recompute r, int n_acts) {
    return b.activation && b.kept[r] ? (size_t)n_acts : 1;
}

// The rows, pointing into g (and g->acts[0]) for micro-batches of B x T; the data-parallel and pipeline rows' counts
// come from gpt_plan (g->dp.n_grad32 ..., g->pp.n_slots).
// Under tensor parallelism the shapes are this rank's (qd, qkvd, F, F1 and H of its heads and MLP columns, Vp its
// vocabulary rows); Nl = N / tp rows of the norms and the residual stream under SP, else N. SP adds the gathered
// copies (*_full), the partial sums before a reduce-scatter (tp_part) and the packing buffer (seq_buf); tp > 1 the
// classifier's row statistics (cls_stats).
static std::vector<Buffer> buffer_table(GPT* g, const ModelConfig& c, int B, int T) {
    const size_t N = (size_t)B * T, Nl = g->tp.local_rows(N), C = c.n_embd, hd = c.head_dim,
                 qd = (size_t)g->Hl * hd, qkvd = (size_t)(g->Hl + 2 * g->KVl) * hd, F = g->Fl,
                 F1 = c.mlp == MLP_SWIGLU ? 2 * F : F, BHT = (size_t)B * g->Hl * T, NCsp = g->tp.sp ? N * C : 0;
    const size_t rope = c.pos == POS_ROPE ? (size_t)T * c.head_dim / 2 : 0;
    const size_t qk_raw = c.qk_norm ? N * (g->Hl + g->KVl) * hd : 0;
    const size_t panel = (size_t)classifier_panel(g->Vpl, B, T);
    const bool fp8 = g->fp8.opt.recipe != FP8_NONE;
    const size_t max_ic = fp8 ? std::max({C, qd, F}) : 0, max_oc = fp8 ? std::max({qkvd, C, F1}) : 0;
    const size_t fp8_n = fp8 ? (size_t)LINEARS_PER_LAYER * c.n_layer : 0;  // tensors of each scaling state
    LayerActs& la = g->acts[0];
    return {
        //         pointer        elements   none        act         selective   full
        activation(&la.x,         Nl * C,    KEEP,       KEEP,       KEEP,       KEEP),       // [Nl,C] layer input (residual)
        activation(&la.ln1,       Nl * C,    KEEP,       KEEP,       KEEP,       RECOMPUTED), // [Nl,C]
        activation(&la.ln1_mean,  2 * Nl,    KEEP,       KEEP,       KEEP,       RECOMPUTED), // [2,Nl] mean, then rstd
        activation(&la.ln1_full,  NCsp,      RECOMPUTED, RECOMPUTED, RECOMPUTED, RECOMPUTED), // [N,C] SP: ln1 gathered
                                                                                        // (again in the backward)
        activation(&la.qkv,       N * qkvd,  KEEP,       KEEP,       KEEP,       RECOMPUTED), // [N,qkvd] q, k rotated
        activation(&la.qk_raw,    qk_raw,    KEEP,       KEEP,       KEEP,       RECOMPUTED), // [N,H+KV,hd] --qk-norm's input
        activation(&la.atty,      N * qd,    KEEP,       KEEP,       RECOMPUTED, RECOMPUTED), // [N,qd] attention output
        activation(&la.lse,       BHT,       KEEP,       KEEP,       RECOMPUTED, RECOMPUTED), // [B,H,T]
        activation(&la.x_mid,     Nl * C,    KEEP,       KEEP,       KEEP,       RECOMPUTED), // [Nl,C] after attention
        activation(&la.ln2,       Nl * C,    KEEP,       KEEP,       KEEP,       RECOMPUTED), // [Nl,C]
        activation(&la.ln2_mean,  2 * Nl,    KEEP,       KEEP,       KEEP,       RECOMPUTED), // [2,Nl] mean, then rstd
        activation(&la.ln2_full,  NCsp,      RECOMPUTED, RECOMPUTED, RECOMPUTED, RECOMPUTED), // [N,C] SP: ln2 gathered
                                                                                        // (again in the backward)
        activation(&la.fc1,       N * F1,    KEEP,       KEEP,       KEEP,       RECOMPUTED), // [N,F1] pre-activation
        activation(&la.act,       N * F,     KEEP,       RECOMPUTED, RECOMPUTED, RECOMPUTED), // [N,F]
        scratch(&g->scratch.y,          Nl * C),                        // [Nl,C] a matmul output joining the residual
        scratch(&g->scratch.x_final,    Nl * C),                        // [Nl,C] residual after the last layer
        scratch(&g->scratch.lnf,        Nl * C),                        // [Nl,C]
        scratch(&g->scratch.lnf_mean,   2 * Nl),                        // [2,Nl] mean, then rstd
        scratch(&g->scratch.lnf_full,   NCsp),                          // [N,C] SP: lnf gathered (classifier input)
        scratch(&g->scratch.dres,       Nl * C),                        // [Nl,C] residual-stream gradient
        scratch(&g->scratch.dres_full,  NCsp),                          // [N,C] SP: dres gathered (a row-parallel dout)
        scratch(&g->scratch.dln,        Nl * C),                        // [Nl,C] gradient of a norm output
        scratch(&g->tp.part,            NCsp),                          // [N,C] SP: partials before reduce-scatter
        scratch(&g->tp.seq_buf,         NCsp),                          // [tp,B,T/tp,C] SP: rows packed by tp rank
        scratch(&g->scratch.datty,      N * qd),                        // [N,qd]
        scratch(&g->scratch.dqkv,       N * qkvd),                      // [N,qkvd]
        scratch(&g->scratch.dfc1,       N * F1),                        // [N,F1]
        scratch(&g->scratch.dact,       N * F),                         // [N,F]
        scratch(&g->scratch.dvec,       BHT),                           // [B,H,T] attention backward
        scratch(&g->scratch.norm_partial, std::max(norm_backward_scratch_floats((int)Nl, (int)C),  // and QK-norm's
                                            c.qk_norm ? qk_norm_backward_scratch_floats((int)N, (int)hd) : 0)),
        scratch(&g->scratch.logits,     g->has_head ? panel * g->Vpl : 0),  // [panel,Vp] the classifier's stage
        scratch(&g->scratch.cls_stats,  g->has_head && g->tp.n > 1 ? 3 * panel : 0),  // [3,panel] tp: row max, sum of
                                                               // exps, target logit
        scratch(&g->head_n,             g->has_head && c.norm_head ? g->Vpl * C : 0),  // [Vp,C] --norm-head: unit rows
        scratch(&g->head_rnorm,         g->has_head && c.norm_head ? g->Vpl : 0),  // [Vp] --norm-head: 1 / row lengths
        scratch(&g->alibi,              c.pos == POS_ALIBI ? g->Hl : 0),  // [Hl] --pos alibi: this rank's heads' slopes
        scratch(&g->scratch.losses,     N),                             // [N]
        scratch(&g->scratch.loss_sum,   1),                             // [1] the step's loss, summed on the device
        scratch(&g->io.inputs,          4 * N),                         // [4,N] inputs, targets, document starts,
                                                                        // positions (one upload)
        scratch(&g->scratch.gnorm,      GLOBAL_NORM_BLOCKS + 2),        // partials, then norm and clip coefficient
        scratch(&g->pp.io,              g->L.topo.pp > 1 ? g->pp.n_slots * 2 * Nl * C : 0),  // pipeline [slots,2,Nl,C]
        counted(rope, sizeof(float)),                          // [T,hd/2] RoPE cos (rope_upload_tables)
        counted(rope, sizeof(float)),                          // [T,hd/2] RoPE sin
        counted(embedding_plan_ints((int)N), sizeof(int32_t)), // [3N+1] the embedding plan (embedding_plan_alloc)
        counted(embedding_plan_ints((int)N), sizeof(int32_t)), // [3N+1] the positions' plan (documents)
        dp_buffer(&g->dp.grad32,      g->dp.n_grad32),               // fp32 gradients: [P] (ZeRO 0/1), [2,max bucket] (2/3)
        dp_buffer(&g->dp.grad_shard,  g->dp.n_grad_shard),           // [shard] fp32 reduced gradients (ZeRO 2/3)
        dp_buffer(&g->dp.gather,      g->dp.n_gather),               // ZeRO 3 gather buffers [2*max layer + emb + head]
        dp_buffer(&g->dp.norm64,      g->dp.n_norm64),               // [GLOBAL_NORM_BLOCKS + 1] fp64 norm partials, sum
        dp_buffer(&g->dp.norm_ranges, g->dp.norm_ranges_host.size()),// [n,2] the ranges the norm counts
        scratch(&g->grad_zero,        g->grad_zero_host.size()),     // [n,2] the gradient ranges gpt_zero_grad zeroes
        fp8_buffer(&g->fp8.w8,         fp8 ? 2 * g->fp8.w8_half : 0),  // [2,Pw] fp8 weights, then transposed (ZeRO 3: a layer's)
        fp8_buffer(&g->fp8.x8,         N * max_ic),                // [N,max IC] a GEMM input in E4M3 (or [max IC,N])
        fp8_buffer(&g->fp8.dy8,        N * max_oc),                // [N,max OC] an output gradient in E5M2
        fp8_buffer(&g->fp8.dyt8,       N * max_oc),                // [max OC,N] its transpose
        counted((3 + 1) * fp8_n, sizeof(float), true),         // the weights' scaling state (fp8_linears_build)
        counted((3 + (size_t)g->fp8.opt.meta_history()) * fp8_n, sizeof(float), true),  // the inputs' [3 + history, 4L]
        counted((3 + (size_t)g->fp8.opt.meta_history()) * fp8_n, sizeof(float), true),  // the output gradients'
    };
}

// ----------------------------------------------------------------------------------------------
// The parallel plan: this rank's table (its pipeline stage's tensors) padded into buckets, its shard, the sizes of the
// dp rows of the buffer table, the activation slots of its stage over n_mb micro-batches. No allocation (the memory
// estimate plans a GPT it never builds). L: a layout from layout_make, or layout_single for one GPU.


// The ranges of a rank's gradients, [n,2] (lo, hi), that a step's first micro-batch does not write: all but the
// linear layers' weight matrices, whose weight-gradient GEMMs write at beta 0 in that backward (train_gpt.cu
// gpt_zero_grad); with fp8 GEMMs every range (they accumulate, as the start-up check runs them). Left to zero: the
// embeddings (their rows are added to by token), the norms' weights, the biases (under SP rank 0 alone adds the
// row-parallel ones) and the buckets' padding: the gaps between the written matrices, each one range.
static std::vector<size_t> grad_zero_ranges(const ParamTable& t, bool fp8) {
    std::vector<Range> written;
    if (!fp8)
        for (const ParamTable::Block& b : t.blocks)
            for (int k = 0; k < LINEARS_PER_LAYER; k++) {
                const int w = linear_weight(b, k);
                if (w >= 0) written.push_back({t.specs[w].offset, t.specs[w].offset + t.specs[w].numel()});
            }
    std::sort(written.begin(), written.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
    std::vector<size_t> out;
    size_t at = 0;
    for (const Range& r : written) {
        if (r.lo > at) out.insert(out.end(), {at, r.lo});
        at = std::max(at, r.hi);
    }
    if (t.total > at) out.insert(out.end(), {at, t.total});
    return out;
}

static void gpt_plan(GPT* g, const ModelConfig& c, const Layout& L, int n_mb, const Fp8Options& fp8 = {}) {
    g->cfg = c;
    g->L = L;
    const int tp = L.topo.tp, pp = L.topo.pp, stage = L.topo.pp_rank;
    g->tp.n = tp;
    g->tp.rank = L.topo.tp_rank;
    g->tp.sp = L.sp;
    g->Hl = c.n_head / tp;
    g->KVl = c.n_kv_head / tp;
    g->Fl = c.ffn / tp;
    g->Vpl = c.padded_vocab / tp;
    g->v0 = g->tp.rank * g->Vpl;
    // this stage's tensors, their tp slices, padded into buckets for dp
    const LocalTable lt = gpt_local_table(c, build_param_table(c), L, stage, g->tp.rank);
    g->table = lt.t;
    g->global = lt.global;
    g->slice = lt.slice;
    g->has_head = stage == pp - 1;
    pp_plan(g->pp, L, c.n_layer, n_mb);  // the activation slots this stage holds
    dp_plan(g->dp, g->table, L);         // the buckets, the shard, data parallel's rows of the buffer table
    fp8_linears_plan(g->fp8, fp8, g->table, c.n_layer, L.zero >= 3);  // --fp8, and where its weight copies sit in w8
    g->grad_zero_host = grad_zero_ranges(g->table, fp8.recipe != FP8_NONE);
}

// ----------------------------------------------------------------------------------------------
// The memory estimate, printed before anything is allocated

// Device memory the estimate keeps for what the run does not cudaMalloc itself: 1.5 GiB. The CUDA context
// takes about 0.5 GiB on an 80 GiB H100 (more when the modules load eagerly, CUDA_MODULE_LOADING=EAGER);
// cuBLASLt loads its GEMM kernels on the first call of each and may allocate behind the handle; the
// trainer's own kernel images load on first launch; cudaMalloc rounds every allocation up to its 2 MiB
// granularity. 1.5 GiB covers these with room: when the device figure is the free memory measured after
// the context exists the reserve counts the context twice, which errs towards refusing a run that would
// just fit rather than one that fails with out-of-memory after minutes of initialisation. It is a stated
// allowance, not a measurement: the peak in use that a GPU run prints beside the estimate checks it.
static const double MEMORY_RESERVE_BYTES = 1.5 * 1073741824.0;

// Everything the run allocates on the device, by kind (bytes), and the reserve above. gpt_build allocates
// the same sizes (the parameter count, the buffer table), so allocations() is what cudaMalloc is asked for
// (test_gpt checks it to the byte under each recompute mode); total() adds the reserve.
// Per rank: under ZeRO, params (stage 3), master and moments (stage >= 1) are this rank's shard; dp_buffers are the
// buffer table's data-parallel rows (grad32, grad_shard, gather: their bytes also apart, for the printout).
// fp8: the buffer table's fp8 rows (the fp8 weight copies, the cast buffers, the scaling states).
struct MemoryEstimate {
    double params, grads, master, moments, head_grad, acts_layers, acts_shared, scratch, workspace, reserve;
    double dp_buffers, grad32, grad_shard, gather, fp8;
    double allocations() const {
        return params + grads + master + moments + head_grad + acts_layers + acts_shared + scratch + workspace +
               dp_buffers + fp8;
    }
    double total() const { return allocations() + reserve; }
};

static size_t max_bias_len(const ModelConfig& c) {
    return (size_t)std::max({c.n_embd, cfg_qkv_dim(c), cfg_fc1_dim(c)});
}

// The bytes one rank allocates under layout L (layout_single: one GPU) training n_mb micro-batches per step (a
// pipeline stage keeps the activations of the most (micro-batch, chunk) pairs its schedule has in flight).
static MemoryEstimate estimate_memory(const ModelConfig& c, int B, int T, Recompute r, bool bf16_moments,
                                      const Layout& L, int n_mb = 1, const Fp8Options& fp8 = {}) {
    MemoryEstimate e;
    GPT shape;  // the plan's and the table's sizes only: its addresses point into this GPT and are not used
    gpt_plan(&shape, c, L, n_mb, fp8);
    const double P = (double)shape.table.total, shard = (double)shape.dp.shard;
    e.params = (L.zero >= 3 ? shard : P) * sizeof(floatX);
    e.grads = P * sizeof(floatX);
    e.master = (L.zero >= 1 ? shard : P) * 4;
    e.moments = (L.zero >= 1 ? shard : P) * 2 * (bf16_moments ? 2 : 4);
    e.head_grad = shape.has_head ? (double)shape.Vpl * c.n_embd * 4 : 0;
    e.acts_layers = e.acts_shared = e.scratch = e.dp_buffers = e.fp8 = 0;
    e.grad32 = (double)align256(shape.dp.n_grad32 * 4);
    e.grad_shard = (double)align256(shape.dp.n_grad_shard * 4);
    e.gather = (double)align256(shape.dp.n_gather * sizeof(floatX));
    shape.acts.resize(1);
    for (const Buffer& b : buffer_table(&shape, c, B, T)) {
        const double bytes = (double)(buffer_bytes(b) * buffer_copies(b, r, shape.pp.n_slots * shape.pp.slot_layers));
        if (b.fp8) e.fp8 += bytes;
        else if (b.dp) e.dp_buffers += bytes;
        else if (!b.activation) e.scratch += bytes;
        else if (b.kept[r]) e.acts_layers += bytes;
        else e.acts_shared += bytes;
    }
    MatmulContext mm;
    e.workspace = (double)mm.workspace_size + (double)max_bias_len(c) * 4;
    e.reserve = MEMORY_RESERVE_BYTES;
    return e;
}

static void print_memory_estimate(const MemoryEstimate& e, Recompute r, const Layout& L, double device_bytes) {
    const double G = 1024.0 * 1024.0 * 1024.0;
    if (L.topo.pp > 1)
        printf("memory estimate per rank of pipeline stage %d of %d (vpp %d): dp %d x tp %d%s, ZeRO %d\n", L.topo.pp_rank,
               L.topo.pp, L.vpp, L.topo.dp, L.topo.tp, L.sp ? " (sp)" : "", L.zero);
    else if (L.topo.dp > 1 || L.zero > 0 || L.topo.tp > 1)
        printf("memory estimate per rank: dp %d x tp %d%s, ZeRO %d\n", L.topo.dp, L.topo.tp, L.sp ? " (sp)" : "", L.zero);
    printf("memory estimate (GiB): params %.2f | grads %.2f | master %.2f | moments %.2f | head grad %.2f\n",
           e.params / G, e.grads / G, e.master / G, e.moments / G, e.head_grad / G);
    printf("                       activations %.2f (per layer, --recompute %s) + %.2f (shared) | scratch %.2f | "
           "cuBLASLt %.2f\n", e.acts_layers / G, recompute_name(r), e.acts_shared / G, e.scratch / G, e.workspace / G);
    if (e.dp_buffers > 0)
        printf("                       data parallel %.2f: fp32 gradients %.2f | fp32 gradient shard %.2f | "
               "ZeRO-3 gather buffers %.2f\n", e.dp_buffers / G, e.grad32 / G, e.grad_shard / G, e.gather / G);
    if (e.fp8 > 0)
        printf("                       fp8 %.2f: weight copies and transposes, cast buffers, scaling states\n",
               e.fp8 / G);
    printf("                       reserve %.2f (CUDA context, cuBLASLt kernels, allocator rounding)\n", e.reserve / G);
    printf("                       total %.2f of %.2f on the device\n", e.total() / G, device_bytes / G);
    printf("memory estimate (bytes): params %.0f grads %.0f master %.0f moments %.0f head_grad %.0f acts_layers %.0f "
           "acts_shared %.0f scratch %.0f workspace %.0f reserve %.0f total %.0f\n", e.params, e.grads, e.master,
           e.moments, e.head_grad, e.acts_layers, e.acts_shared, e.scratch, e.workspace, e.reserve, e.total());
    if (e.dp_buffers > 0)
        printf("memory estimate (bytes, data parallel): dp_buffers %.0f grad32 %.0f grad_shard %.0f gather %.0f\n",
               e.dp_buffers, e.grad32, e.grad_shard, e.gather);
    if (e.fp8 > 0) printf("memory estimate (bytes, fp8): fp8 %.0f\n", e.fp8);
    fflush(stdout);  // the breakdown before any error that refers to it
}

// Dies with the breakdown's lesson when the run cannot fit: which flags lower what.
static void require_memory(const MemoryEstimate& e, Recompute r, bool bf16_moments, const Layout& L, double available) {
    if (e.total() <= available) return;
    const double G = 1024.0 * 1024.0 * 1024.0;
    const double state = e.params + e.grads + e.master + e.moments + e.head_grad;
    std::string hint;
    if (r != RECOMPUTE_FULL)  // the modes that keep less than r's
        hint += r == RECOMPUTE_NONE ? " --recompute act, selective or full keeps fewer activations;"
                : r == RECOMPUTE_ACT ? " --recompute selective or full keeps fewer activations;"
                                     : " --recompute full keeps fewer activations;";
    hint += " lower -b or -t (activations and scratch scale with B*T);";
    if (!bf16_moments) hint += " --bf16-moments 1 halves the AdamW moments;";
    if (L.zero < 3)
        hint += " more ranks with --zero 1 (master and moments), 2 (also the reduced gradients) or 3 (also the "
                "weights) divide the sharded state by --dp;";
    if (L.topo.pp == 1) hint += " pipeline stages (--pp) divide the layers;";
    if (state > available) hint += " the weights and optimizer state alone exceed the device: pick a smaller model;";
    die("this run needs about %.2f GiB but %.2f GiB are free on the device (breakdown above):%s", e.total() / G,
        available / G, hint.c_str());
}

// This rank's row of the memory table (llmc/run/logger.h): the bytes gpt_build allocated by kind beside the estimate's
// (activations: everything else, i.e. the buffer table, the cuBLASLt workspace and the data-parallel buffers).
static MemoryRow memory_row(const GPT* g, const MemoryEstimate& e, const Layout& L) {
    MemoryRow row;
    row.rank = L.topo.rank; row.dp_rank = L.topo.dp_rank; row.tp_rank = L.topo.tp_rank; row.pp_rank = L.topo.pp_rank;
    row.params = g->mem.allocated_weights;
    row.grads = g->mem.allocated_grads;
    row.optim = g->mem.allocated_optim;
    row.acts = g->mem.allocated - row.params - row.grads - row.optim;
    row.f_params = e.params;
    row.f_grads = e.grads + e.head_grad;
    row.f_optim = e.master + e.moments;
    row.f_acts = e.allocations() - row.f_params - row.f_grads - row.f_optim;
    return row;
}

// The bytes of llmc/parallel/planner.h (--plan, the layout planner) for one rank of a dp / ZeRO layout L: estimate_memory's
// rows by kind, so a plan's total is what gpt_build allocates plus the reserve, to the byte (test_gpt checks it).
//   weights    params (ZeRO 3: the shard)           grads      bf16 gradients + the fp32 LM-head gradient
//   optim      fp32 master weights + AdamW moments  acts       activations (per layer + shared)
//   buckets    the data-parallel rows (fp32 gradients or buckets, gradient shard, ZeRO-3 gather buffers, norm)
//   workspace  scratch + cuBLASLt workspace + the reserve (MEMORY_RESERVE_BYTES), and the fp8 rows (--fp8)
// Pipeline stages (L's pp_rank) hold their layers and the activations their schedule over n_mb micro-batches keeps.
// The step-time model stays the bf16 one under --fp8 (the planner prices no fp8 GEMM).
static PlanBytes cuda_plan_bytes(const ModelConfig& c, const Layout& L, int B, int T, int n_mb, int recompute,
                                 bool bf16_moments, const Fp8Options& fp8, double nccl_bytes) {
    const MemoryEstimate e = estimate_memory(c, B, T, (Recompute)recompute, bf16_moments, L, n_mb, fp8);
    PlanBytes b;
    b.weights = e.params;
    b.grads = e.grads + e.head_grad;
    b.optim = e.master + e.moments;
    b.acts = e.acts_layers + e.acts_shared;
    b.buckets = e.dp_buffers;
    b.workspace = e.scratch + e.workspace + e.reserve + e.fp8;
    b.nccl = nccl_bytes * layout_communicators(L);  // NCCL's buffers, outside the estimate: rank_setup measures them
    b.err = tp_shape_error(c, L.topo.tp, fp8.recipe != FP8_NONE);  // the planner skips a layout the kernels cannot run
    return b;
}

// nccl_bytes: --nccl-mem, the allowance per communicator
static PlanBytesFn cuda_plan_bytes_fn(bool bf16_moments, const Fp8Options& fp8 = {}, double nccl_bytes = 0) {
    return [bf16_moments, fp8, nccl_bytes](const ModelConfig& c, const Layout& L, int B, int T, int n_mb, int r) {
        return cuda_plan_bytes(c, L, B, T, n_mb, r, bf16_moments, fp8, nccl_bytes);
    };
}

// What the planner counts on the wire: gradients reduced in fp32, weights gathered and activations sent in floatX; under
// SP the norm outputs gathered again in the backward (one gathered copy for all layers, not one per layer).
static const PlanComm PLAN_COMM = {4.0, (double)sizeof(floatX), (double)sizeof(floatX), true};

template <typename T>
static void cuda_alloc(GPT* g, T** p, size_t bytes) {
    cudaCheck(cudaMalloc((void**)p, std::max<size_t>(bytes, 1)));
    g->mem.allocated += (double)bytes;
}

// Allocates everything for micro-batches of B x T, n_mb of them per step (a pipeline stage's activation slots).
// weight_decay goes into the AdamW table. layout and comms: this rank's layout (llmc/parallel/layout.h) and its
// communicators; null: one GPU. fp8: --fp8 and its settings (the scaling states start at scale 1).
static void gpt_build(GPT* g, const ModelConfig& c, int B, int T, Recompute r, bool bf16_moments, float weight_decay,
                      const Layout* layout = nullptr, const Comms* comms = nullptr, int n_mb = 1,
                      const Fp8Options& fp8 = {}) {
    check_shapes(c, B, T);
    gpt_plan(g, c, layout ? *layout : layout_single(c), n_mb, fp8);  // fp8: main has checked the device and shapes
    if (g->dp.parallel && !comms) die("gpt_build: a parallel layout needs its communicators");
    if (comms) {
        g->world = comms->world;
        g->dp.comm = comms->dp;
        g->tp.comm = comms->tp;
        g->pp.comm = comms->pp;
        g->pp.emb = comms->emb;
    }
    for (const ParamSpec& s : g->table.specs)
        if (s.offset % 8 != 0 || s.numel() % 8 != 0)
            die("tensor %s: offset %zu or size %zu is not a multiple of 8 (the kernels move 8 elements at a time)",
                s.name.c_str(), s.offset, s.numel());
    g->B = B;
    g->T = T;
    g->recompute = r;
    g->bf16_moments = bf16_moments;
    cudaCheck(cudaStreamCreate(&g->stream));
    comm_set_stream(&g->tp.comm, g->stream);  // tp collectives in line with the kernels that write and read their buffers
    g->tp.B = B, g->tp.T = T, g->tp.C = c.n_embd;  // the residual stream it sums and gathers
    matmul_init(&g->mm, (int)max_bias_len(c));
    g->mem.allocated += (double)g->mm.workspace_size + (double)max_bias_len(c) * 4;
    const size_t P = g->table.total, msz = bf16_moments ? 2 : 4, zero = g->L.zero;
    const size_t n_params = zero >= 3 ? g->dp.shard : P, n_opt = zero >= 1 ? g->dp.shard : P;
    double before = g->mem.allocated;
    cuda_alloc(g, &g->params, n_params * sizeof(floatX));
    g->mem.allocated_weights = g->mem.allocated - before;
    before = g->mem.allocated;
    cuda_alloc(g, &g->grads, P * sizeof(floatX));
    cuda_alloc(g, &g->head_grad, g->has_head ? (size_t)g->Vpl * c.n_embd * sizeof(float) : 0);
    g->mem.allocated_grads = g->mem.allocated - before;
    before = g->mem.allocated;
    cuda_alloc(g, &g->master, n_opt * sizeof(float));
    cuda_alloc(g, (char**)&g->m, n_opt * msz);
    cuda_alloc(g, (char**)&g->v, n_opt * msz);
    g->mem.allocated_optim = g->mem.allocated - before;
    cudaCheck(cudaMemset(g->m, 0, n_opt * msz));
    cudaCheck(cudaMemset(g->v, 0, n_opt * msz));
    if (g->dp.parallel) cudaCheck(cudaMemset(g->params, 0, n_params * sizeof(floatX)));  // bucket padding stays zero

    // activations and scratch: one block for the rows of the buffer table, carved in its order; an activation
    // that every layer keeps gets n_acts consecutive copies (every layer of every slot: acts[slot * slot_layers + i]),
    // one that is recomputed one copy shared by the layers
    const int n_acts = g->pp.n_slots * g->pp.slot_layers;
    g->acts.resize(n_acts);
    const std::vector<Buffer> buffers = buffer_table(g, c, B, T);
    size_t block = 0;
    for (const Buffer& b : buffers)
        if (b.ptr) block += buffer_bytes(b) * buffer_copies(b, r, n_acts);
        else g->mem.allocated += (double)buffer_bytes(b);  // allocated below by its header
    cuda_alloc(g, &g->mem.buffer_memory, block);
    char* at = g->mem.buffer_memory;
    for (const Buffer& b : buffers) {
        if (!b.ptr) continue;
        const size_t copies = buffer_copies(b, r, n_acts);
        for (int i = 0; i < (b.activation ? n_acts : 1); i++)  // acts[i]'s member: i LayerActs after acts[0]'s
            b.set((char*)b.ptr + i * sizeof(LayerActs), at + (copies > 1 ? i * buffer_bytes(b) : 0));
        at += copies * buffer_bytes(b);
    }
    // the second halves of the [2,Nl] and [2,N] rows; without SP the gathered copies are the buffers themselves
    const size_t N = (size_t)B * T, Nl = g->tp.local_rows(N);
    for (LayerActs& la : g->acts) {
        la.ln1_rstd = la.ln1_mean + Nl;
        la.ln2_rstd = la.ln2_mean + Nl;
        if (!g->tp.sp) {
            la.ln1_full = la.ln1;
            la.ln2_full = la.ln2;
        }
    }
    g->layers = g->acts;  // one stage: layer l's activations are acts[l] (a pipeline binds a slot's per chunk)
    g->layers.resize(c.n_layer);
    g->scratch.lnf_rstd = g->scratch.lnf_mean + Nl;
    if (!g->tp.sp) {
        g->scratch.lnf_full = g->scratch.lnf;
        g->scratch.dres_full = g->scratch.dres;
    }
    g->io.targets = g->io.inputs + N;
    g->io.doc = g->io.inputs + 2 * N;
    g->io.pos = g->io.inputs + 3 * N;
    g->scratch.cls_panel = classifier_panel(g->Vpl, B, T);
    g->rope_cos = g->rope_sin = nullptr;
    if (c.pos == POS_ROPE) rope_upload_tables(c, T, &g->rope_cos, &g->rope_sin);
    if (c.pos == POS_ALIBI) alibi_upload_slopes(g->alibi, c, g->tp.rank * g->Hl, g->Hl);
    else g->alibi = nullptr;  // attention without ALiBi (its row of the buffer table is empty)
    embedding_plan_alloc(&g->io.plan, B * T);
    embedding_plan_alloc(&g->io.pos_plan, B * T);
    fp8_linears_build(g->fp8, g->world, g->tp.comm, g->dp.comm);  // the three counted fp8 rows of the buffer table
    // AdamW's table: on one GPU over the floatX gradients, otherwise over the fp32 ones reduced over dp
    const DataParallel& dp = g->dp;
    if (!dp.parallel && bf16_moments)
        g->adam.bf16 = dp_adamw_table<__nv_bfloat16>(dp, g->table, g->params, g->grads, g->grads, g->master, g->m, g->v,
                                                     weight_decay);
    else if (!dp.parallel)
        g->adam.f32 = dp_adamw_table<float>(dp, g->table, g->params, g->grads, g->grads, g->master, g->m, g->v,
                                            weight_decay);
    else if (bf16_moments)
        g->adam.bf16_g32 = dp_adamw_table<__nv_bfloat16>(dp, g->table, g->params, dp.grad32, dp.grad_shard, g->master,
                                                         g->m, g->v, weight_decay);
    else
        g->adam.f32_g32 = dp_adamw_table<float>(dp, g->table, g->params, dp.grad32, dp.grad_shard, g->master, g->m,
                                                g->v, weight_decay);
    dp_build(g->dp);         // several ranks: the norm's ranges uploaded, its events
    cudaCheck(cudaMemcpy(g->grad_zero, g->grad_zero_host.data(), g->grad_zero_host.size() * sizeof(size_t),
                         cudaMemcpyHostToDevice));
    g->chunk_started.assign(std::max(1, g->L.n_chunks()), 1);  // a backward before any gpt_zero_grad adds
    pp_build(g->pp, Nl, c.n_embd);  // pp > 1: the activations sent between stages [Nl,C], its events
    cudaCheck(cudaMallocHost((void**)&g->io.h_readback, sizeof(StepReadback)));
}

static void gpt_free(GPT* g) {
    for (void* p : {(void*)g->params, (void*)g->grads, (void*)g->master, g->m, g->v, (void*)g->head_grad,
                    (void*)g->mem.buffer_memory, (void*)g->rope_cos, (void*)g->rope_sin})
        if (p) cudaCheck(cudaFree(p));
    adamw_tables_free(&g->adam);
    dp_free(g->dp);
    pp_free(g->pp);
    embedding_plan_free(&g->io.plan);
    embedding_plan_free(&g->io.pos_plan);
    fp8_linears_free(g->fp8);
    if (g->io.h_upload) cudaCheck(cudaFreeHost(g->io.h_upload));
    cudaCheck(cudaFreeHost(g->io.h_readback));
    matmul_free(&g->mm);
    cudaCheck(cudaStreamDestroy(g->stream));
}

// What train_gpt plans over (plan_or_pick, llmc/parallel/comms.h): data, tensor and pipeline parallel with ZeRO 0-3,
// --sp, --recompute none, act, selective or full (unless --recompute was given), every -b dividing the per-rank batch; the
// bytes are cuda_plan_bytes', the wire PLAN_COMM's.
static PlanSpace cuda_plan_space(const CudaOptions& opt) {
    PlanSpace s;
    s.recomputes = {RECOMPUTE_NONE, RECOMPUTE_ACT, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    s.may_pick = !opt.recompute_given;
    s.wire = PLAN_COMM;
    s.bytes = cuda_plan_bytes_fn(opt.bf16_moments, opt.fp8, opt.nccl_gib * 1073741824.0);
    s.intro = "train_gpt plans the layouts it runs: data, tensor and pipeline parallel with ZeRO 0-3, --sp, --vpp, "
              "--recompute, -b; with no layout flag it picks among them (vpp 1)";
    return s;
}
