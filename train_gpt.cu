// train_gpt.cu: the CUDA trainer, on one GPU or over several: data parallel (--dp, --zero), tensor and sequence
// parallel (--tp, --sp) and pipeline parallel (--pp, --vpp, --layout), in any combination. The same model as
// train_gpt_cpu.cpp (every switch of the model spec: learned positions or RoPE, LayerNorm or RMSNorm, GELU or
// SwiGLU, biases on/off, tied or untied head, GQA), the same flags (llmc/run/flags.h), checkpoints, safetensors, data
// and logs; bf16 weights and activations with fp32 accumulation, fp32 master weights and AdamW moments. make
// PRECISION=FP32 builds the same program with floatX = float (llmc/precision.cuh) and the CUDA-core attention of
// llmc/attention_rowwise.cuh: slower, for tight tests against the fp32 reference. --fp8 delayed|current (bf16
// build, compute capability 8.9+) runs the layers' four linear GEMMs in fp8: the fp8 section below, docs/fp8.md.
//
// Memory, one allocation per kind (llm.c style; floatX is bf16 unless PRECISION=FP32):
//   params     [P] floatX   the weights the kernels read, laid out by the parameter table (llmc/param_table.h)
//   grads      [P] floatX   same offsets; every kernel writes floatX weight gradients (see docs/cuda_trainer.md)
//   master     [P] fp32     AdamW's master weights; params = floatX(master) after each update
//   m, v       [P] fp32     AdamW moments (bf16 with --bf16-moments)
//   head_grad  [Vp,C] fp32  the LM head gradient, accumulated over the step by the fused classifier,
//                           added into grads once per step (the last pipeline stage only, as the logits)
//   buffers                 one block carved by the buffer table (buffer_table): the activations, per layer
//                           what the backward needs (less with --recompute) plus one shared copy of what it
//                           recomputes; the scratch: one layer's backward buffers, the classifier's logits
//                           chunk, the norms' partials
//
// Forward of one layer l (x = the residual stream entering it, [N,C] with N = B*T):
//   x[l] = x_mid[l-1] + y; ln1 = norm(x[l])    fused_residual_norm_forward (layer 0: no add)
//   qkv = ln1 Wqkv^T (+b); rope(q, k)          cuBLASLt (bias epilogue), rope_rotate_inplace
//   atty, lse = flash_attention(qkv)           attention_forward (causal, GQA)
//   y = atty Wo^T (+b)
//   x_mid = x + y; ln2 = norm(x_mid)           fused_residual_norm_forward
//   fc1 = ln2 W1^T (+b); act = gelu(fc1) or silu(gate) * up
//   y = act W2^T (+b)                          (added to x_mid by the next layer's norm, or by the final norm)
// then x_final = x_mid[L-1] + y; lnf = norm(x_final); the fused classifier computes logits chunk by chunk,
// the loss and the logits gradient in place. The backward runs the same steps in reverse, with one residual
// gradient dres [N,C] that each norm's backward adds its input gradient into.
//
// --recompute none|selective|full: none keeps every layer's activations; selective keeps qkv and fc1 but
// recomputes the attention output and the MLP activation in the backward; full keeps only each layer's
// input x[l] and recomputes the whole layer just before its backward.
//
// Data parallel and ZeRO (--dp, --zero as in train_gpt_cpu; llmc/parallel/layout.h checks the layout, llmc/parallel/zero.h plans
// the buckets): world = pp x dp x tp ranks (tp fastest, llmc/parallel/topology.h), one GPU each, started by mpirun, srun or
// scripts/launch.sh (comm_init, llmc/parallel/launch.h); pipeline parallelism below. Every NCCL call goes through
// llmc/parallel/comm_nccl.cuh: the dp group's on its own stream (dp.stream), ordered against the compute stream by events; the
// tp group's on the compute stream itself (g->tp.stream = g->stream), in line with the kernels around them. One rank
// is the one-GPU trainer described above, unchanged, with no NCCL communicator.
// Tensor parallel (--tp, Megatron; llmc/parallel/tp.h slices every tensor, gpt_local_table gives a rank its table): rank r
// holds H/tp heads and KV/tp kv heads of qkv, F/tp columns of fc1 (SwiGLU: gate and up alike) and the matching
// columns of attn_out and fc2, Vp/tp rows of the embedding and head (Vp padded to 128 tp). qkv and fc1 are
// column-parallel (whole input, this rank's outputs), attn_out and fc2 row-parallel: their partial outputs are summed
// over tp (tp_sum), the replicated bias added by tp rank 0 only. The backward sums each column-parallel input gradient
// over tp. Embedding: a token outside this rank's rows reads zeros (tp rank 0 adds the position embedding), summed
// over tp; its backward adds only this rank's rows. Classifier (tp > 1): per chunk of rows this rank's Vp/tp logit
// columns; the row max (max over tp), target logit and sum of exps (sums over tp) give the loss and dlogits in place
// (llmc/classifier.cuh's vocab_parallel_*; no rank holds full logits), then d lnf = dlogits head summed over tp.
// Sequence parallel (--sp 1): the norms and the residual stream hold Nl = N/tp rows, positions r*T/tp .. of every
// sample; tp_gather all-gathers them (rows packed by rank, seq_pack_kernel) before each column-parallel block (ln1,
// ln2, lnf, and the output gradient before each row-parallel backward) and tp_sum reduce-scatters after each
// row-parallel one. The replicated tensors' gradients (norms, row-parallel biases, position embedding: from each
// rank's rows, the biases and position embedding from tp rank 0) are summed over tp in fp32 with the bucket's
// reduction. Without SP they are equal on every tp rank. The global norm counts replicated tensors on tp rank 0
// (layout_norm_ranges) and sums over dp and tp. Checkpoints gather the tp slices (gpt_get_full) into whole tensors.
//   Data: dp rank r trains on the micro-batches r, r + dp, r + 2dp, ... of the one-process run (-d tokens per
//   step, accum = d / (B*T*dp) micro-batches per rank), each loss scaled by 1/(accum*dp), so the sum over the
//   ranks is the one-process mean.
//   Buckets: the parameter table is padded into buckets (the embeddings, one per layer, the final norm and
//   head), each a multiple of dp*8 elements, so dp rank r owns an equal, 16-byte aligned piece of every bucket;
//   its shard is its pieces in bucket order, P/dp elements (llmc/parallel/zero.h).
//   Gradients: no communication until the last micro-batch of a step. Every micro-batch accumulates into the
//   floatX grads [P] as one GPU does. In the last micro-batch's backward, as each bucket's gradient is complete
//   (the final norm and head first, the layers in reverse order, the embeddings last), a small kernel casts it
//   to fp32 (adding the fp32 LM-head gradient head_grad where the head lives), an event is recorded on the
//   compute stream, and dp.stream waits for it and reduces the bucket: all-reduce (ZeRO 0) or reduce-scatter
//   (ZeRO >= 1), overlapping the rest of the backward. The optimizer waits for dp.stream. Why fp32: each rank's
//   floatX gradient already carries the rounding of one GPU's per-micro-batch accumulation; converting each
//   bucket to fp32 before the reduction keeps the sum over the dp ranks exact to fp32 (a bf16 reduction would
//   round again at every hop of NCCL's ring), and it is Megatron's default (fp32 main grads reduced). A bf16
//   reduction is a later option.
//   ZeRO 0  grad32 [P] fp32, all-reduced; master, m, v [P]; AdamW over everything on every rank.
//   ZeRO 1  master, m, v [shard]; grad32 [P] fp32 reduce-scattered in place (only this rank's pieces end up
//           summed); AdamW updates this rank's pieces and writes floatX(master) into its pieces of params,
//           then dp.stream all-gathers params bucket by bucket.
//   ZeRO 2  also the reduced gradients exist only as grad_shard [shard] fp32: each bucket is cast into one of
//           two fp32 staging buffers [max bucket] (alternating, so the next bucket's cast overlaps this one's
//           reduction) and reduce-scattered from there into the shard. During accumulation the floatX grads [P]
//           still hold this rank's own, unreduced gradient of the step so far (the reduction is once per step).
//   ZeRO 3  also the floatX weights: params [shard]. A bucket's weights are all-gathered into a gather buffer
//           on dp.stream one layer ahead of their use (prefetch, in forward and in backward order) and the
//           buffer is reused once the layer is done with it. Four gather buffers live at once: two for the
//           layers (layer l in buffer l % 2), one for the embeddings (the tied head reads it too) and one for
//           the final norm and head; a buffer that still holds the bucket asked for is not gathered again.
//   The global gradient norm counts every element once across the shards (layout_norm_ranges), in fp64 on the
//   device, summed over dp (comm_all_reduce_sum of one double); the clip coefficient is train_gpt_cpu.cpp's.
//   Checkpoints and exports gather the shards (all-gather per bucket) so that rank 0 writes whole tensors in the
//   usual layout-independent files; any dp and ZeRO stage resumes them (each rank takes its pieces).
//   The memory estimate is per rank: the buffer table gains the rows of the fp32 gradient buffer, the gradient
//   shard and the gather buffers, and master, moments (ZeRO >= 1) and params (ZeRO 3) shrink to the shard.
//
// Pipeline parallel (--pp stages, --vpp chunks per stage, --layout layers per chunk; world = pp x dp x tp ranks, as
// train_gpt_cpu.cpp): the layers are cut into pp*vpp chunks, chunk c on stage c % pp (llmc/parallel/pp_schedule.h); a rank's
// parameter table holds its stage's tensors (gpt_local_table: the first stage the embeddings, the last the final norm
// and head, and with a tied head its own copy of wte), sliced for its tp rank and padded into buckets for its dp group
// as above. Under SP the activations sent between stages are this rank's Nl rows.
//   Schedule: 1F1B or interleaved 1F1B over the step's micro-batches, run by pp_run (llmc/parallel/pp_exec.h). Every
//   (micro-batch, chunk) in flight holds an activation slot: the LayerActs of its chunk's layers (acts[slot *
//   slot_layers + i]; g->layers[l] is bound to them before the layer code runs) and two [N,C] rows of pp_io, the
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
//
// Shapes: B batch, T time, C channels, H heads, KV kv heads, hd head dim, qd = H*hd, qkvd = (H+2KV)*hd,
// F ffn, F1 = F (gelu) or 2F (swiglu: gate then up), V vocabulary, Vp padded vocabulary, P the parameter table's
// (padded) elements, shard = P / dp. Under tp the layer shapes are a rank's (H/tp heads ..., g->Hl, g->Fl, g->Vpl),
// and Nl = N/tp rows of the norms and the residual stream under SP (else N).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "llmc/run/flags.h"
#include "llmc/parallel/comm_timeout.h"
#include "llmc/run/checkpoint.h"
#include "llmc/model_config.h"
#include "llmc/data/dataloader.h"
#include "llmc/flops.h"
#include "llmc/run/guard.h"
#include "llmc/init.h"
#include "llmc/parallel/layout.h"
#include "llmc/run/logger.h"
#include "llmc/run/lr_schedule.h"
#include "llmc/param_table.h"
#include "llmc/parallel/planner.h"
#include "llmc/parallel/pp_exec.h"
#include "llmc/parallel/pp_schedule.h"
#include "llmc/rng.h"
#include "llmc/sampling.h"
#include "llmc/run/signals.h"
#include "llmc/run/weights_io.h"
#include "llmc/parallel/zero.h"
#include "llmc/cuda_common.cuh"
#include "llmc/matmul.cuh"
#include "llmc/matmul_fp8.cuh"
#include "llmc/norm.cuh"
#include "llmc/rope.cuh"
#include "llmc/mlp_act.cuh"
#include "llmc/precision.cuh"
#ifdef ENABLE_FP32
#include "llmc/attention_rowwise.cuh"  // fp32 build: CUDA-core attention, one warp per row
#else
#include "llmc/attention.cuh"          // bf16: flash attention on tensor cores
#endif
#include "llmc/classifier.cuh"
#include "llmc/embedding.cuh"
#include "llmc/adamw.cuh"
#include "llmc/grad_norm.cuh"
#ifdef USE_NCCL
#include "llmc/parallel/comm_nccl.cuh"
#else
// ----------------------------------------------------------------------------------------------
// Built without NCCL (the Makefile found no nccl.h): one rank only. The Comm names this trainer calls, for a group
// of one rank, as llmc/parallel/comm_nccl.cuh has them for one rank: nothing to reduce, a copy on the group's stream.
#include "llmc/parallel/launch.h"
struct Comm {
    int size = 1, rank = 0;
    cudaStream_t stream = nullptr;
};
static Comm comm_init(int*, char***) {
    const LaunchInfo li = launch_info();
    if (li.world > 1)
        die("%d ranks were started (%s), but this train_gpt was built without NCCL: rebuild it where nccl.h is found "
            "(make train_gpt NCCL_HOME=<dir with include/nccl.h and lib/>), or start one rank", li.world, li.source);
    cuda_require_device();
    cudaCheck(cudaSetDevice(0));
    Comm c;
    cudaCheck(cudaStreamCreate(&c.stream));
    return c;
}
static void comm_finalize() {}
static Comm comm_group(const Comm& parent, const std::vector<int>&, const char* = "") { return parent; }
template <typename T> static void comm_all_reduce_sum(const Comm&, T*, size_t) {}
template <typename T> static void comm_all_reduce_max(const Comm&, T*, size_t) {}
template <typename T> static void comm_reduce_scatter(const Comm& c, const T* send, T* recv, size_t n) {
    if (recv != send && n) cudaCheck(cudaMemcpyAsync(recv, send, n * sizeof(T), cudaMemcpyDeviceToDevice, c.stream));
}
template <typename T> static void comm_all_gather(const Comm& c, const T* send, T* recv, size_t n) {
    if (recv != send && n) cudaCheck(cudaMemcpyAsync(recv, send, n * sizeof(T), cudaMemcpyDeviceToDevice, c.stream));
}
static void comm_host_sum(const Comm&, double*, size_t) {}
static void comm_host_max(const Comm&, double*, size_t) {}
static void comm_barrier(const Comm& c) { cudaCheck(cudaStreamSynchronize(c.stream)); }
// point to point needs a peer: never called with one rank (a pipeline needs --pp ranks)
struct CommRequest {};
template <typename T> static void comm_send(const Comm&, const T*, size_t, int peer, int, CommRequest*) {
    die("comm_send to rank %d: this train_gpt was built without NCCL", peer);
}
template <typename T> static void comm_recv(const Comm&, T*, size_t, int peer, int) {
    die("comm_recv from rank %d: this train_gpt was built without NCCL", peer);
}
static void comm_wait(CommRequest*) {}
static void comm_group_start() {}
static void comm_group_end() {}
#endif


// ----------------------------------------------------------------------------------------------
// Flags of the CUDA trainer only (the rest are llmc/run/flags.h's, shared with train_gpt_cpu).

enum Recompute { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL };

static const char* recompute_name(Recompute r) {
    return r == RECOMPUTE_FULL ? "full" : r == RECOMPUTE_SELECTIVE ? "selective" : "none";
}

// --fp8 and delayed scaling's two settings (docs/fp8.md; defaults TransformerEngine's, llmc/fp8.cuh)
struct Fp8Options {
    Fp8Recipe recipe = FP8_NONE;
    int history = FP8_DEFAULT_HISTORY_LEN;  // --fp8-history: the amaxes kept per tensor (delayed scaling's window)
    int margin = FP8_DEFAULT_MARGIN;        // --fp8-margin: scale = fp8 max * 2^-margin / amax
    int meta_history() const { return recipe == FP8_DELAYED ? history : 1; }  // rows of an Fp8Meta's history
};

struct CudaOptions {
    Recompute recompute = RECOMPUTE_NONE;
    bool recompute_given = false;  // --recompute given: the layout planner keeps it (explicit flags win)
    bool bf16_moments = false;
    std::string print_config;      // write the model config JSON (train_gpt.py --config) and exit
    double estimate_gib = -1;      // >= 0: print the memory estimate against this many GiB and exit
    Fp8Options fp8;
};

static void print_cuda_usage() {
    printf("CUDA trainer flags (besides those below):\n"
           "  --recompute none|selective|full   activation recompute (default none): selective recomputes the\n"
           "                       attention output and the MLP activation, full recomputes every layer from\n"
           "                       its input in the backward\n"
           "  --bf16-moments 0|1   AdamW moments in bf16 instead of fp32 (default 0)\n"
           "  --print-config FILE  write the model config as JSON (train_gpt.py --config) and exit\n"
           "  --estimate-memory GIB   print the memory estimate of this run against GIB of device memory and\n"
           "                       exit (no GPU needed); status 1 when it does not fit\n"
           "  --fp8 none|delayed|current   fp8 GEMMs in every layer's QKV, attention-out, fc1 (gate-up) and fc2\n"
           "                       (default none; a GPU of compute capability 8.9+, the bf16 build): E4M3 inputs\n"
           "                       and weights, E5M2 output gradients, one scale per tensor, from the amax history\n"
           "                       (delayed) or from the tensor's own amax (current); embeddings, LM head, norms\n"
           "                       and attention stay bf16 (docs/fp8.md)\n"
           "  --fp8-history N      delayed scaling: amaxes kept per tensor (default %d, TransformerEngine's)\n"
           "  --fp8-margin M       scale = fp8 max * 2^-M / amax, M in 0..8 (default %d, TransformerEngine's)\n\n",
           FP8_DEFAULT_HISTORY_LEN, FP8_DEFAULT_MARGIN);
}

// Takes the CUDA-only flags out of argv (the rest go to parse_args). Returns the remaining argv.
static std::vector<char*> parse_cuda_flags(int argc, char** argv, CudaOptions* o) {
    std::vector<char*> rest{argv[0]};
    bool history_given = false, margin_given = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") print_cuda_usage();
        const bool ours = a == "--recompute" || a == "--bf16-moments" || a == "--print-config" || a == "--estimate-memory" ||
                          a == "--fp8" || a == "--fp8-history" || a == "--fp8-margin";
        if (!ours) { rest.push_back(argv[i]); continue; }
        if (i + 1 >= argc) die("flag %s lacks a value (see --help)", a.c_str());
        std::string v = argv[++i];
        if (a == "--recompute") {
            o->recompute_given = true;
            if (v == "none") o->recompute = RECOMPUTE_NONE;
            else if (v == "selective") o->recompute = RECOMPUTE_SELECTIVE;
            else if (v == "full") o->recompute = RECOMPUTE_FULL;
            else die("flag --recompute expects none, selective or full, got '%s'", v.c_str());
        } else if (a == "--bf16-moments") {
            if (v != "0" && v != "1") die("flag --bf16-moments expects 0 or 1, got '%s'", v.c_str());
            o->bf16_moments = v == "1";
        } else if (a == "--print-config") {
            o->print_config = v;
            note_path_flag("--print-config", v);
        } else if (a == "--fp8") {
            o->fp8.recipe = fp8_recipe_parse(v.c_str());
        } else if (a == "--fp8-history" || a == "--fp8-margin") {
            const bool hist = a == "--fp8-history";
            const long lo = hist ? 1 : 0, hi = hist ? 65536 : 8;  // margin 8 puts the amax at 448 / 256 in E4M3
            char* end = nullptr;
            const long x = strtol(v.c_str(), &end, 10);
            if (v.empty() || *end || x < lo || x > hi)
                die("flag %s expects an integer in [%ld, %ld], got '%s'", a.c_str(), lo, hi, v.c_str());
            (hist ? o->fp8.history : o->fp8.margin) = (int)x;
            (hist ? history_given : margin_given) = true;
        } else {
            char* end = nullptr;
            o->estimate_gib = strtod(v.c_str(), &end);
            if (v.empty() || *end || !(o->estimate_gib > 0)) die("flag --estimate-memory expects GiB > 0, got '%s'", v.c_str());
        }
    }
    if (history_given && o->fp8.recipe != FP8_DELAYED)
        die("flag --fp8-history sets delayed scaling's amax history: it needs --fp8 delayed");
    if (margin_given && o->fp8.recipe == FP8_NONE) die("flag --fp8-margin needs --fp8 delayed or current");
#ifdef ENABLE_FP32
    if (o->fp8.recipe != FP8_NONE)
        die("--fp8 needs the bf16 build (this binary was built with PRECISION=FP32); run with --fp8 none");
#endif
    return rest;
}

// Shapes the kernels cannot take stop here, before any allocation, naming the flag to change.
static void check_shapes(const ModelConfig& c, int B, int T) {
    const int C = c.n_embd, hd = c.head_dim;
    if (C % 8 != 0 || C > NORM_MAX_C)
        die("--embd %d: the CUDA kernels need a multiple of 8 up to %d (128-bit rows)", C, NORM_MAX_C);
#ifdef ENABLE_FP32
    if (hd > 128 || hd % 16 != 0)
        die("head dim %d (--embd / --heads, or --head-dim): the fp32 build's attention takes multiples of 16 up to 128",
            hd);
#else
    if (hd != 64 && hd != 80 && hd != 128)
        die("head dim %d (--embd / --heads, or --head-dim): the attention kernels take 64, 80 or 128", hd);
    if (T % 64 != 0) die("-t %d: the attention kernels need a sequence length that is a multiple of 64", T);
#endif
    if (c.ffn % 8 != 0) die("--ffn %d: the CUDA kernels need a multiple of 8", c.ffn);
}

// Tensor parallel: the MLP columns of one rank, ffn / tp, must be a multiple of 8 too (the kernels move 8 elements
// at a time); that tp divides the heads, kv heads and ffn is layout_make's check (llmc/parallel/tp.h). --fp8: the fp8 GEMMs
// need K and the leading dimensions multiples of 16 (llmc/matmul_fp8.cuh): the width C and a rank's ffn columns
// (the heads' widths are multiples of 16 already: head dim 64, 80 or 128; the tokens B*T of -t's multiple of 64).
// "" when it runs.
static std::string tp_shape_error(const ModelConfig& c, int tp, bool fp8) {
    if (tp > 1 && c.ffn % tp == 0 && (c.ffn / tp) % 8 != 0)
        return layout_fmt("--ffn %d / --tp %d = %d: the CUDA kernels need a multiple of 8 per tensor-parallel rank", c.ffn,
                          tp, c.ffn / tp);
    if (fp8 && c.n_embd % 16 != 0)
        return layout_fmt("--embd %d with --fp8: the fp8 GEMMs need a multiple of 16", c.n_embd);
    if (fp8 && c.ffn % tp == 0 && (c.ffn / tp) % 16 != 0)
        return layout_fmt("--ffn %d / --tp %d = %d with --fp8: the fp8 GEMMs need a multiple of 16 per tensor-parallel "
                          "rank", c.ffn, tp, c.ffn / tp);
    return "";
}

static void check_tp_shapes(const ModelConfig& c, int tp, bool fp8) {
    const std::string err = tp_shape_error(c, tp, fp8);
    if (!err.empty()) die("%s", err.c_str());
}

// ----------------------------------------------------------------------------------------------
// Small kernels of the trainer itself

// params[i] = floatX(master[i])
__global__ void floatX_from_f32_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_floatX(src[i]);
}

// dst[i] = floatX(dst[i] + src[i]): the fp32 LM-head gradient joins the floatX gradients once per step
__global__ void add_f32_into_floatX_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_floatX(to_float(dst[i]) + src[i]);
}

// dst[i] = float(src[i]): a bucket's floatX gradients into the fp32 reduction buffer
__global__ void f32_from_floatX_kernel(float* dst, const floatX* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_float(src[i]);
}

// dst[i] += src[i] (fp32): the LM head's fp32 gradient joins its bucket's fp32 gradients
__global__ void add_f32_kernel(float* dst, const float* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

// Sequence parallel packing of rows [B,T,C] (row b*T + t) by tp rank: rank r's positions r*Tl .. (r+1)*Tl - 1 of
// every sample (Tl = T/tp) are contiguous in packed [tp,B,Tl,C], as the reduce-scatter and all-gather over tp need.
// to_packed: packed = pack(rows); otherwise rows = unpack(packed). 8 channels per thread.
__global__ void seq_pack_kernel(floatX* packed, floatX* rows, int B, int T, int tp, int C, bool to_packed) {
    const size_t per_row = C / 8, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * per_row) return;
    const int n = (int)(i / per_row), c = 8 * (int)(i % per_row), Tl = T / tp;
    const int b = n / T, t = n % T, r = t / Tl;
    floatX* p = packed + (((size_t)r * B + b) * Tl + (t - r * Tl)) * C + c;
    floatX* x = rows + (size_t)n * C + c;
    if (to_packed) store8(p, load8(x));
    else store8(x, load8(p));
}

// partial[block] = sum of g[i]^2 over the ranges [ranges[2r], ranges[2r+1]) in fp64, in a fixed order: thread j
// of the grid (G threads) sums elements lo + j, lo + j + G, ... of each range in turn, then the block sums its
// threads in a fixed tree. Launch GLOBAL_NORM_BLOCKS blocks of GLOBAL_NORM_THREADS.
__global__ void norm_ranges_partial_kernel(double* partial, const float* g, const size_t* ranges, int n_ranges) {
    __shared__ double part[GLOBAL_NORM_THREADS];
    const size_t G = (size_t)gridDim.x * blockDim.x, j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    double s = 0;
    for (int r = 0; r < n_ranges; r++)
        for (size_t i = ranges[2 * r] + j; i < ranges[2 * r + 1]; i += G) s += (double)g[i] * g[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

// sum[0] = partial[0] + ... + partial[n-1], in order (one thread)
__global__ void sum_partials_kernel(double* sum, const double* partial, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += partial[i];
    sum[0] = s;
}

// out[0] = sqrt(sumsq[0]), out[1] = the clipping coefficient min(1, clip / (norm + 1e-6)) (1 when clip <= 0), in
// fp64 as train_gpt_cpu.cpp's clip_coef, then stored as fp32 (AdamW reads out + 1 as its grad scale). One thread.
__global__ void clip_from_sumsq_kernel(float* out, const double* sumsq, double clip) {
    const double norm = sqrt(sumsq[0]);
    out[0] = (float)norm;
    out[1] = clip > 0 ? (float)fmin(1.0, clip / (norm + 1e-6)) : 1.0f;
}

// loss_sum[0] += weight * (sum of losses[0..N)) / n_valid, in fp64 and a fixed order (one block: thread t sums
// rows t, t + 256, ..., then a tree over the threads), so the loss of a step needs no host round trip per
// micro-batch. Launch with 256 threads.
__global__ void loss_accumulate_kernel(double* loss_sum, const float* losses, int N, int n_valid, double weight) {
    __shared__ double part[256];
    double s = 0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) s += losses[n];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0 && n_valid > 0) loss_sum[0] += weight * part[0] / n_valid;
}

// The attention of the build: flash attention on bf16 tensor cores (llmc/attention.cuh), or in the fp32
// build the CUDA-core kernels of llmc/attention_rowwise.cuh. Same layouts and meaning.
static void attention_fwd(floatX* out, float* lse, const floatX* qkv, int B, int T, int H, int KV, int hd,
                          cudaStream_t stream) {
#ifdef ENABLE_FP32
    attention_rowwise_forward(out, lse, qkv, B, T, H, KV, hd, stream);
#else
    attention_forward(out, lse, qkv, B, T, H, KV, hd, stream);
#endif
}
static void attention_bwd(floatX* dqkv, float* dvec, const floatX* dout, const floatX* out, const floatX* qkv,
                          const float* lse, int B, int T, int H, int KV, int hd, cudaStream_t stream) {
#ifdef ENABLE_FP32
    attention_rowwise_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, stream);
#else
    attention_backward(dqkv, dvec, dout, out, qkv, lse, B, T, H, KV, hd, stream);
#endif
}

// ----------------------------------------------------------------------------------------------
// The model

struct LayerActs {
    floatX* x;        // [Nl,C]   input of the layer (the residual stream)
    floatX* ln1;      // [Nl,C]
    float* ln1_mean;  // [Nl]
    float* ln1_rstd;  // [Nl]
    floatX* ln1_full; // [N,C]    SP: ln1 gathered over tp (the qkv input; one copy for all layers, gathered
                      //          again for the backward); otherwise = ln1
    floatX* qkv;      // [N,qkvd] after RoPE
    floatX* atty;     // [N,qd]
    float* lse;       // [B,H,T]
    floatX* x_mid;    // [Nl,C]   x + attention branch
    floatX* ln2;      // [Nl,C]
    float* ln2_mean;  // [Nl]
    float* ln2_rstd;  // [Nl]
    floatX* ln2_full; // [N,C]    SP: ln2 gathered over tp (the fc1 input; as ln1_full); otherwise = ln2
    floatX* fc1;      // [N,F1]
    floatX* act;      // [N,F]
};

// The host's record of one staged micro-batch (the data are in the pinned slot).
struct MicroBatchStage {
    bool has_targets = false;        // with targets, also the embedding plan
    int n_valid = 0;                 // targets >= 0
    int plan_unique = 0, plan_max = 0;
};

// Pinned memory the device writes once per step and the host then reads.
struct StepReadback {
    double loss;   // mean micro-batch loss of the step
    float norm;    // pre-clip global gradient norm
};

// fp8: the four linear layers of a layer, in the order of their tensors i = 4 l + k in the fp8 scaling states
enum { FP8_QKV = 0, FP8_ATTN_OUT = 1, FP8_FC1 = 2, FP8_FC2 = 3, FP8_LINEARS = 4 };

// ZeRO-3's gather buffers: two for the layers (layer l in GATHER_LAYER0 + l % 2), the embeddings, the final norm
// and head
enum { GATHER_LAYER0 = 0, GATHER_EMB = 2, GATHER_HEAD = 3, GATHER_SLOTS = 4 };

struct GPT {
    ModelConfig cfg;
    ParamTable table;           // this rank's tensors, offsets padded into the buckets of llmc/parallel/zero.h (for one rank
                                // the plain table: every tensor is a multiple of 8 elements, so no padding)
    int B = 0, T = 0;
    Recompute recompute = RECOMPUTE_NONE;
    bool bf16_moments = false;
    cudaStream_t stream = nullptr;
    MatmulContext mm;
    // one allocation per kind
    floatX* params = nullptr;   // [P]; ZeRO 3: [shard] (a layer's weights are read from its gather buffer)
    floatX* grads = nullptr;    // [P] this rank's own gradients of the step
    float* master = nullptr;    // [P]; ZeRO >= 1: [shard]
    void* m = nullptr;          // [P] fp32 or bf16; ZeRO >= 1: [shard]
    void* v = nullptr;          // [P]; ZeRO >= 1: [shard]
    float* head_grad = nullptr; // [Vp,C] (on the stage that runs the classifier)
    char* buffer_memory = nullptr;  // every row of buffer_table below but the counted ones
    std::vector<LayerActs> acts;    // the kept activations, [n_slots][slot_layers] (one GPU: [1][L])
    std::vector<LayerActs> layers;  // [L] by layer: what the layer code reads, a slot's acts bound to it (pp_bind)
    // scratch (shapes in buffer_table)
    floatX *y, *x_final, *lnf, *lnf_full, *dres, *dres_full, *dln, *datty, *dqkv, *dfc1, *dact, *logits, *tp_part,
        *seq_buf;
    float *lnf_mean, *lnf_rstd, *dvec, *norm_partial, *losses, *gnorm, *rope_cos, *rope_sin, *cls_stats;
    double* loss_sum;           // [1] sum over the micro-batches of their weighted mean losses (fp64)
    int32_t *inputs, *targets;
    int cls_chunk = 0;
    EmbeddingPlan plan;
    AdamWTable<float> adam_f32;
    AdamWTable<__nv_bfloat16> adam_bf16;
    // tensor and sequence parallel (the header comment; llmc/parallel/tp.h): this rank's heads, MLP columns and vocabulary rows
    Comm tp;                    // the tp group; its collectives are enqueued on the compute stream (tp.stream = stream)
    int n_tp = 1, tp_rank = 0;  // tp ranks, this rank's place among them
    bool sp = false;            // sequence parallel: the norm and residual rows are this rank's Nl = N / tp
    int Hl = 0, KVl = 0, Fl = 0, Vpl = 0, v0 = 0;  // local heads, kv heads, ffn; vocabulary rows [v0, v0 + Vpl)
    // data parallel and ZeRO (the header comment; counts of the buffer-table rows are set by gpt_plan)
    Layout L;                   // pp x dp x tp ranks, the ZeRO stage, sp, vpp
    Comm dp;                    // the dp group: its size, rank and stream
    bool parallel = false;      // dp > 1, ZeRO or tp > 1: fp32 bucket reduction, sharded optimizer state
    bool has_head = true;       // this pipeline stage runs the classifier (the last; every rank without pp)
    std::vector<Bucket> buckets;       // the embeddings, one per layer, the final norm and head
    std::vector<int> bucket_of;        // spec -> bucket
    size_t shard = 0;                  // P / dp
    size_t max_bucket = 0;             // elements of the largest bucket
    size_t n_grad32 = 0, n_grad_shard = 0, n_gather = 0, n_norm64 = 0;  // buffer-table counts (0: no row)
    std::vector<size_t> norm_ranges_host;  // [n,2] the gradient ranges this rank counts (layout_norm_ranges)
    size_t gather_off[GATHER_SLOTS] = {};  // each gather buffer's offset in `gather`
    float* grad32 = nullptr;    // fp32 gradients: ZeRO 0/1 [P] reduced in place; ZeRO 2/3 [2, max_bucket] staging
    float* grad_shard = nullptr;  // ZeRO 2/3: [shard] the reduced gradients of this rank's pieces
    floatX* gather = nullptr;   // ZeRO 3: the gather buffers [2 * max layer bucket + embeddings + head]
    double* norm64 = nullptr;   // [GLOBAL_NORM_BLOCKS + 1] fp64 partial sums of squares, then their sum
    size_t* norm_ranges = nullptr;     // [n,2] device copy of norm_ranges_host
    AdamWTable<float, float> adam_f32_g32;             // AdamW on fp32 reduced gradients, over this rank's ranges
    AdamWTable<__nv_bfloat16, float> adam_bf16_g32;
    cudaEvent_t ev_compute = nullptr;  // recorded on the compute stream before dp.stream reads what it wrote
    cudaEvent_t ev_comm = nullptr;     // recorded on dp.stream before the compute stream reads what it wrote
    cudaEvent_t ev_stage_free[2] = {}; // ZeRO 2/3: staging buffer s may be overwritten (its reduce-scatter is done)
    cudaEvent_t ev_gathered[GATHER_SLOTS] = {}, ev_slot_done[GATHER_SLOTS] = {};  // ZeRO 3: buffer filled / read
    int gather_holds[GATHER_SLOTS] = {-1, -1, -1, -1};  // ZeRO 3: the bucket each gather buffer holds, -1 none
    int stage_next = 0;                // ZeRO 2/3: the staging buffer the next bucket is cast into
    // pipeline parallel (--pp, --vpp, --layout; the header comment): this rank runs its stage's chunks
    Comm world;                 // every rank (the loss and the gradient norm are summed over it)
    Comm pp, emb;               // the stages of this rank's pipeline; its first and last stage (tied embedding)
    std::vector<int> global;    // local spec -> its index in the whole model's table (build_param_table)
    std::vector<std::vector<TpBlock>> slice;  // local spec -> its blocks of the whole tensor (llmc/parallel/tp.h)
    int n_slots = 1;            // activation slots: the most (micro-batch, chunk) pairs in flight (1 without pp)
    int slot_layers = 0;        // layers per slot: the stage's largest chunk (without pp: every layer)
    floatX* pp_io = nullptr;    // per slot: the chunk's output [Nl,C] (sent on), then the gradient of its output [Nl,C]
                                // (received; the backward leaves its input's gradient there, sent back)
    int head_mb = -1;           // the micro-batch whose final norm (x_final, lnf, lnf_mean) the head scratch holds
    cudaEvent_t ev_pp = nullptr, ev_emb = nullptr;  // recorded on pp.stream / emb.stream after their transfers
    double allocated = 0;       // bytes asked of cudaMalloc
    double allocated_weights = 0, allocated_grads = 0, allocated_optim = 0;  // of which: params; grads + head_grad;
                                                                             // master + moments
    // Pinned host staging (cudaMallocHost): everything a micro-batch needs from the host, one slot per
    // micro-batch of the step, so that its uploads are asynchronous and no slot is rewritten while a copy
    // from it may still be queued. Slot layout (int32): inputs [N] | targets [N] | embedding plan [3N+1].
    int32_t* h_stage = nullptr;
    int stage_slots = 0;
    std::vector<MicroBatchStage> stage;   // [stage_slots] what the host knows of each slot
    StepReadback* h_readback = nullptr;   // pinned: the step's loss and gradient norm, read once per step
    int n_valid = 0;            // targets >= 0 in the micro-batch of the last forward
    double loss = 0;            // mean loss of the last micro-batch read back (gpt_backward, gpt_loss)
    // fp8 (--fp8; the fp8 section below, docs/fp8.md): the four linear layers k of layer l (FP8_QKV ...) are tensor
    // i = 4 l + k (l of the whole model) of each scaling state
    Fp8Options fp8;
    Fp8Meta fp8_w;              // E4M3: the weights, scaled by their own amax after every update
    Fp8Meta fp8_x;              // E4M3: the GEMM inputs (ln1, attention output, ln2, MLP activation)
    Fp8Meta fp8_dy;             // E5M2: the GEMM output gradients
    __nv_fp8_e4m3* w8 = nullptr;  // ZeRO < 3: [2, Pw] the step's fp8 weights, then their transposes; ZeRO 3: [2, one
                                  // layer's] cast after each gather
    size_t w8_half = 0;           // Pw (ZeRO 3: the largest layer's linear weights): where the transposes start
    std::vector<size_t> w8_off;   // [4 L] tensor i's offset in each half (SIZE_MAX: not on this stage)
    __nv_fp8_e4m3* x8 = nullptr;  // [N, max IC] a GEMM input (forward), or [max IC, N] its transpose (backward)
    __nv_fp8_e5m2* dy8 = nullptr; // [N, max OC] an output gradient
    __nv_fp8_e5m2* dyt8 = nullptr;  // [max OC, N] its transpose

    floatX* P(int k) const {
        if (k < 0) return nullptr;
        if (L.zero < 3) return params + table.specs[k].offset;
        const Bucket& b = buckets[bucket_of[k]];
        return gather + gather_off[gather_slot(b)] + (table.specs[k].offset - b.range.lo);
    }
    int gather_slot(const Bucket& b) const {
        return b.layer >= 0 ? GATHER_LAYER0 + b.layer % 2 : b.range.lo == 0 ? GATHER_EMB : GATHER_HEAD;
    }
    floatX* G(int k) const { return k < 0 ? nullptr : grads + table.specs[k].offset; }
    int head() const { return cfg.tied ? table.wte : table.lm_head; }
};

// ----------------------------------------------------------------------------------------------
// The buffer table: every activation and scratch buffer of the run, one row each (its pointer, its elements,
// their type, and under each recompute mode whether every layer keeps its own copy). The memory estimate, the
// size of the one block that holds them and the carving of that block into the pointers all read it: a new
// buffer is a new row.

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Rows of the classifier's logits chunk (Vpl: this rank's vocabulary columns): at most 256 MiB of logits, at least
// 64 rows.
static int classifier_chunk(int Vpl, int B, int T) {
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
    bool kept[3];                       // an activation under --recompute none, selective, full: KEEP or RECOMPUTED
    bool dp;                            // a buffer of data parallel / ZeRO (count 0 on one rank)
    bool fp8;                           // a buffer of the fp8 path (count 0 without --fp8)
};

template <typename T>
static void set_address(void* ptr, char* at) { *(T**)ptr = (T*)at; }

template <typename T>
static Buffer activation(T** ptr, size_t count, bool none, bool selective, bool full) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), true, {none, selective, full}, false, false};
}

template <typename T>
static Buffer scratch(T** ptr, size_t count) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), false, {false, false, false}, false, false};
}

template <typename T>
static Buffer dp_buffer(T** ptr, size_t count) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), false, {false, false, false}, true, false};
}

static Buffer counted(size_t count, size_t elem_bytes, bool fp8 = false) {
    return Buffer{nullptr, nullptr, count, elem_bytes, false, {false, false, false}, false, fp8};
}

template <typename T>
static Buffer fp8_buffer(T** ptr, size_t count) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), false, {false, false, false}, false, true};
}

// Bytes of one copy (256-byte aligned, as carved) and the copies the run holds under recompute mode r: n_acts =
// the layers times the activation slots (gpt_plan: n_slots * slot_layers) for a kept activation.
static size_t buffer_bytes(const Buffer& b) { return align256(b.count * b.elem_bytes); }
static size_t buffer_copies(const Buffer& b, Recompute r, int n_acts) {
    return b.activation && b.kept[r] ? (size_t)n_acts : 1;
}

// The rows, pointing into g (and g->acts[0]) for micro-batches of B x T; the data-parallel and pipeline rows' counts
// come from gpt_plan (g->n_grad32 ..., g->n_slots).
// Under tensor parallelism the shapes are this rank's (qd, qkvd, F, F1 and H of its heads and MLP columns, Vp its
// vocabulary rows); Nl = N / tp rows of the norms and the residual stream under SP, else N. SP adds the gathered
// copies (*_full), the partial sums before a reduce-scatter (tp_part) and the packing buffer (seq_buf); tp > 1 the
// classifier's row statistics (cls_stats).
static std::vector<Buffer> buffer_table(GPT* g, const ModelConfig& c, int B, int T) {
    const size_t N = (size_t)B * T, Nl = g->sp ? N / g->n_tp : N, C = c.n_embd, hd = c.head_dim,
                 qd = (size_t)g->Hl * hd, qkvd = (size_t)(g->Hl + 2 * g->KVl) * hd, F = g->Fl,
                 F1 = c.mlp == MLP_SWIGLU ? 2 * F : F, BHT = (size_t)B * g->Hl * T, NCsp = g->sp ? N * C : 0;
    const size_t rope = c.pos == POS_ROPE ? (size_t)T * c.head_dim / 2 : 0;
    const size_t chunk = (size_t)classifier_chunk(g->Vpl, B, T);
    const bool fp8 = g->fp8.recipe != FP8_NONE;
    const size_t max_ic = fp8 ? std::max({C, qd, F}) : 0, max_oc = fp8 ? std::max({qkvd, C, F1}) : 0;
    const size_t fp8_n = fp8 ? (size_t)FP8_LINEARS * c.n_layer : 0;  // tensors of each scaling state
    LayerActs& la = g->acts[0];
    return {
        //          pointer        elements   none  selective   full
        activation(&la.x,          Nl * C,    KEEP, KEEP,       KEEP),        // [Nl,C] layer input (residual stream)
        activation(&la.ln1,        Nl * C,    KEEP, KEEP,       RECOMPUTED),  // [Nl,C]
        activation(&la.ln1_mean,   2 * Nl,    KEEP, KEEP,       RECOMPUTED),  // [2,Nl] mean, then rstd
        activation(&la.ln1_full,   NCsp,      RECOMPUTED, RECOMPUTED, RECOMPUTED),  // [N,C] SP: ln1 gathered (again
                                                                                 // in the backward)
        activation(&la.qkv,        N * qkvd,  KEEP, KEEP,       RECOMPUTED),  // [N,qkvd] q, k rotated
        activation(&la.atty,       N * qd,    KEEP, RECOMPUTED, RECOMPUTED),  // [N,qd] attention output
        activation(&la.lse,        BHT,       KEEP, RECOMPUTED, RECOMPUTED),  // [B,H,T]
        activation(&la.x_mid,      Nl * C,    KEEP, KEEP,       RECOMPUTED),  // [Nl,C] after attention
        activation(&la.ln2,        Nl * C,    KEEP, KEEP,       RECOMPUTED),  // [Nl,C]
        activation(&la.ln2_mean,   2 * Nl,    KEEP, KEEP,       RECOMPUTED),  // [2,Nl] mean, then rstd
        activation(&la.ln2_full,   NCsp,      RECOMPUTED, RECOMPUTED, RECOMPUTED),  // [N,C] SP: ln2 gathered (again
                                                                                 // in the backward)
        activation(&la.fc1,        N * F1,    KEEP, KEEP,       RECOMPUTED),  // [N,F1] pre-activation
        activation(&la.act,        N * F,     KEEP, RECOMPUTED, RECOMPUTED),  // [N,F]
        scratch(&g->y,             Nl * C),                    // [Nl,C] a matmul output about to join the residual
        scratch(&g->x_final,       Nl * C),                    // [Nl,C] residual after the last layer
        scratch(&g->lnf,           Nl * C),                    // [Nl,C]
        scratch(&g->lnf_mean,      2 * Nl),                    // [2,Nl] mean, then rstd
        scratch(&g->lnf_full,      NCsp),                      // [N,C] SP: lnf gathered (the classifier's input)
        scratch(&g->dres,          Nl * C),                    // [Nl,C] residual-stream gradient
        scratch(&g->dres_full,     NCsp),                      // [N,C] SP: dres gathered (a row-parallel dout)
        scratch(&g->dln,           Nl * C),                    // [Nl,C] gradient of a norm output
        scratch(&g->tp_part,       NCsp),                      // [N,C] SP: partial sums before the reduce-scatter
        scratch(&g->seq_buf,       NCsp),                      // [tp,B,T/tp,C] SP: rows packed by tp rank
        scratch(&g->datty,         N * qd),                    // [N,qd]
        scratch(&g->dqkv,          N * qkvd),                  // [N,qkvd]
        scratch(&g->dfc1,          N * F1),                    // [N,F1]
        scratch(&g->dact,          N * F),                     // [N,F]
        scratch(&g->dvec,          BHT),                       // [B,H,T] attention backward
        scratch(&g->norm_partial,  norm_backward_scratch_floats((int)Nl, (int)C)),
        scratch(&g->logits,        g->has_head ? chunk * g->Vpl : 0),  // [chunk,Vp] the classifier's stage
        scratch(&g->cls_stats,     g->has_head && g->n_tp > 1 ? 3 * chunk : 0),  // [3,chunk] tp: row max, sum of
                                                               // exps, target logit
        scratch(&g->losses,        N),                         // [N]
        scratch(&g->loss_sum,      1),                         // [1] the step's loss, summed on the device
        scratch(&g->inputs,        2 * N),                     // [2,N] inputs, then targets (one upload)
        scratch(&g->gnorm,         GLOBAL_NORM_BLOCKS + 2),    // partials, then norm and clip coefficient
        scratch(&g->pp_io,         g->L.topo.pp > 1 ? g->n_slots * 2 * Nl * C : 0),  // pipeline [slots,2,Nl,C]
        counted(rope, sizeof(float)),                          // [T,hd/2] RoPE cos (rope_upload_tables)
        counted(rope, sizeof(float)),                          // [T,hd/2] RoPE sin
        counted(embedding_plan_ints((int)N), sizeof(int32_t)), // [3N+1] the embedding plan (embedding_plan_alloc)
        dp_buffer(&g->grad32,      g->n_grad32),               // fp32 gradients: [P] (ZeRO 0/1), [2,max bucket] (2/3)
        dp_buffer(&g->grad_shard,  g->n_grad_shard),           // [shard] fp32 reduced gradients (ZeRO 2/3)
        dp_buffer(&g->gather,      g->n_gather),               // ZeRO 3 gather buffers [2*max layer + emb + head]
        dp_buffer(&g->norm64,      g->n_norm64),               // [GLOBAL_NORM_BLOCKS + 1] fp64 norm partials, sum
        dp_buffer(&g->norm_ranges, g->norm_ranges_host.size()),// [n,2] the ranges the norm counts
        fp8_buffer(&g->w8,         fp8 ? 2 * g->w8_half : 0),  // [2,Pw] fp8 weights, then transposed (ZeRO 3: a layer's)
        fp8_buffer(&g->x8,         N * max_ic),                // [N,max IC] a GEMM input in E4M3 (or [max IC,N])
        fp8_buffer(&g->dy8,        N * max_oc),                // [N,max OC] an output gradient in E5M2
        fp8_buffer(&g->dyt8,       N * max_oc),                // [max OC,N] its transpose
        counted((3 + 1) * fp8_n, sizeof(float), true),         // the weights' scaling state (fp8_meta_init)
        counted((3 + (size_t)g->fp8.meta_history()) * fp8_n, sizeof(float), true),  // the inputs' [3 + history, 4L]
        counted((3 + (size_t)g->fp8.meta_history()) * fp8_n, sizeof(float), true),  // the output gradients'
    };
}

// ----------------------------------------------------------------------------------------------
// The parallel plan: this rank's table (its pipeline stage's tensors) padded into buckets, its shard, the sizes of the
// dp rows of the buffer table, the activation slots of its stage over n_mb micro-batches. No allocation (the memory
// estimate plans a GPT it never builds). L: a layout from layout_make, or layout_single for one GPU.

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

// The weight of linear layer k (FP8_QKV ...) of a layer
static int linear_weight(const ParamTable::Block& b, int k) {
    return k == FP8_QKV ? b.qkv_w : k == FP8_ATTN_OUT ? b.attn_out_w : k == FP8_FC1 ? b.fc1_w : b.fc2_w;
}

static void gpt_plan(GPT* g, const ModelConfig& c, const Layout& L, int n_mb, const Fp8Options& fp8 = {}) {
    g->cfg = c;
    g->L = L;
    g->fp8 = fp8;
    const int dp = L.topo.dp, tp = L.topo.tp, pp = L.topo.pp, stage = L.topo.pp_rank;
    g->n_tp = tp;
    g->tp_rank = L.topo.tp_rank;
    g->sp = L.sp;
    g->Hl = c.n_head / tp;
    g->KVl = c.n_kv_head / tp;
    g->Fl = c.ffn / tp;
    g->Vpl = c.padded_vocab / tp;
    g->v0 = g->tp_rank * g->Vpl;
    // this stage's tensors, their tp slices, padded into buckets for dp
    const LocalTable lt = gpt_local_table(c, build_param_table(c), L, stage, g->tp_rank);
    g->table = lt.t;
    g->global = lt.global;
    g->slice = lt.slice;
    g->parallel = dp > 1 || L.zero > 0 || tp > 1 || pp > 1;
    g->has_head = stage == pp - 1;
    g->n_slots = 1;
    g->slot_layers = c.n_layer;
    if (pp > 1) {  // this stage's chunks are stage, stage + pp, ... (llmc/parallel/pp_schedule.h)
        g->slot_layers = 0;
        for (int ch = stage; ch < L.n_chunks(); ch += pp)
            g->slot_layers = std::max(g->slot_layers, L.chunk_first[ch + 1] - L.chunk_first[ch]);
        g->n_slots = pp_slots_needed(L, n_mb);
    }
    g->buckets = zero_buckets(g->table, dp);
    g->bucket_of.assign(g->table.specs.size(), -1);
    size_t max_layer = 0;
    g->max_bucket = 0;
    for (int b = 0; b < (int)g->buckets.size(); b++) {
        const Bucket& bk = g->buckets[b];
        for (int k = bk.first_spec; k < bk.end_spec; k++) g->bucket_of[k] = b;
        g->max_bucket = std::max(g->max_bucket, bk.range.size());
        if (bk.layer >= 0) max_layer = std::max(max_layer, bk.range.size());
    }
    g->shard = zero_shard_size(g->table, dp);
    const size_t P = g->table.total;
    g->n_grad32 = !g->parallel ? 0 : L.zero <= 1 ? P : 2 * g->max_bucket;
    g->n_grad_shard = g->parallel && L.zero >= 2 ? g->shard : 0;
    g->n_norm64 = g->parallel ? GLOBAL_NORM_BLOCKS + 1 : 0;
    g->norm_ranges_host.clear();
    if (g->parallel)
        for (const Range& r : layout_norm_ranges(g->table, g->buckets, L, L.zero >= 2)) {
            g->norm_ranges_host.push_back(r.lo);
            g->norm_ranges_host.push_back(r.hi);
        }
    // ZeRO 3: two layer buffers of the largest layer bucket, then the embedding bucket, then the final norm and head
    g->n_gather = 0;
    if (L.zero >= 3) {
        g->gather_off[GATHER_LAYER0] = 0;
        g->gather_off[GATHER_LAYER0 + 1] = max_layer;
        g->gather_off[GATHER_EMB] = 2 * max_layer;
        g->gather_off[GATHER_HEAD] = 2 * max_layer + g->buckets.front().range.size();
        g->n_gather = g->gather_off[GATHER_HEAD] + g->buckets.back().range.size();
    }
    // fp8 weight copies: this stage's linear weights one after the other (ZeRO 3: each layer's from 0, one layer held)
    g->w8_off.assign((size_t)FP8_LINEARS * c.n_layer, SIZE_MAX);
    g->w8_half = 0;
    for (int l = 0; l < c.n_layer && fp8.recipe != FP8_NONE; l++) {
        const ParamTable::Block& b = g->table.blocks[l];
        if (b.qkv_w < 0) continue;  // another stage's layer
        size_t at_l = L.zero >= 3 ? 0 : g->w8_half;
        for (int k = 0; k < FP8_LINEARS; k++) {
            g->w8_off[(size_t)FP8_LINEARS * l + k] = at_l;
            at_l += g->table.specs[linear_weight(b, k)].numel();
        }
        g->w8_half = std::max(g->w8_half, at_l);
    }
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
    const double P = (double)shape.table.total, shard = (double)shape.shard;
    e.params = (L.zero >= 3 ? shard : P) * sizeof(floatX);
    e.grads = P * sizeof(floatX);
    e.master = (L.zero >= 1 ? shard : P) * 4;
    e.moments = (L.zero >= 1 ? shard : P) * 2 * (bf16_moments ? 2 : 4);
    e.head_grad = shape.has_head ? (double)shape.Vpl * c.n_embd * 4 : 0;
    e.acts_layers = e.acts_shared = e.scratch = e.dp_buffers = e.fp8 = 0;
    e.grad32 = (double)align256(shape.n_grad32 * 4);
    e.grad_shard = (double)align256(shape.n_grad_shard * 4);
    e.gather = (double)align256(shape.n_gather * sizeof(floatX));
    shape.acts.resize(1);
    for (const Buffer& b : buffer_table(&shape, c, B, T)) {
        const double bytes = (double)(buffer_bytes(b) * buffer_copies(b, r, shape.n_slots * shape.slot_layers));
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
    if (r != RECOMPUTE_FULL) hint += " --recompute full (or selective) keeps fewer activations;";
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
    row.params = g->allocated_weights;
    row.grads = g->allocated_grads;
    row.optim = g->allocated_optim;
    row.acts = g->allocated - row.params - row.grads - row.optim;
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
                                 bool bf16_moments, const Fp8Options& fp8) {
    const MemoryEstimate e = estimate_memory(c, B, T, (Recompute)recompute, bf16_moments, L, n_mb, fp8);
    PlanBytes b;
    b.weights = e.params;
    b.grads = e.grads + e.head_grad;
    b.optim = e.master + e.moments;
    b.acts = e.acts_layers + e.acts_shared;
    b.buckets = e.dp_buffers;
    b.workspace = e.scratch + e.workspace + e.reserve + e.fp8;
    b.err = tp_shape_error(c, L.topo.tp, fp8.recipe != FP8_NONE);  // the planner skips a layout the kernels cannot run
    return b;
}

static PlanBytesFn cuda_plan_bytes_fn(bool bf16_moments, const Fp8Options& fp8 = {}) {
    return [bf16_moments, fp8](const ModelConfig& c, const Layout& L, int B, int T, int n_mb, int r) {
        return cuda_plan_bytes(c, L, B, T, n_mb, r, bf16_moments, fp8);
    };
}

// What the planner counts on the wire: gradients reduced in fp32, weights gathered and activations sent in floatX; under
// SP the norm outputs gathered again in the backward (one gathered copy for all layers, not one per layer).
static const PlanComm PLAN_COMM = {4.0, (double)sizeof(floatX), (double)sizeof(floatX), true};

template <typename T>
static void cuda_alloc(GPT* g, T** p, size_t bytes) {
    cudaCheck(cudaMalloc((void**)p, std::max<size_t>(bytes, 1)));
    g->allocated += (double)bytes;
}

template <typename Moment>
static AdamWTable<Moment> adamw_table_build(GPT* g, float wd) {
    std::vector<AdamWTensor<Moment>> ts;
    for (const ParamSpec& s : g->table.specs) {
        AdamWTensor<Moment> t{};
        t.param = g->params + s.offset;
        t.grad = g->grads + s.offset;
        t.master = g->master + s.offset;
        t.m = (Moment*)g->m + s.offset;
        t.v = (Moment*)g->v + s.offset;
        t.n = s.numel();
        t.weight_decay = s.is_matrix ? wd : 0.0f;
        ts.push_back(t);
    }
    return adamw_table_upload(ts);
}

// Data parallel: AdamW on the fp32 reduced gradients, over what this rank updates: every tensor (ZeRO 0) or each
// tensor's part in this rank's piece of its bucket (ZeRO >= 1; bucket padding is never updated and stays zero).
// Each buffer is addressed at its own stage: flat [P] or the shard (where the piece of bucket b starts at
// zero_shard_offset(b)): params flat below ZeRO 3, grads from grad32 (flat) below ZeRO 2, master and moments flat
// at ZeRO 0. Piece and tensor bounds are multiples of 8 elements, as the update needs.
template <typename Moment>
static AdamWTable<Moment, float> adamw_table_build_dp(GPT* g, float wd) {
    std::vector<AdamWTensor<Moment, float>> ts;
    const int zero = g->L.zero;
    for (const ZeroPart& p : zero_parts(g->table, g->buckets, g->L.topo.dp, g->L.topo.dp_rank, zero == 0)) {
        // this part in each buffer: flat, or the shard at the buffer's ZeRO stage
        const size_t lo = p.flat.lo;
        AdamWTensor<Moment, float> t{};
        t.param = g->params + lo - (zero >= 3 ? p.shift : 0);
        t.grad = zero >= 2 ? g->grad_shard + lo - p.shift : g->grad32 + lo;
        t.master = g->master + lo - p.shift;
        t.m = (Moment*)g->m + lo - p.shift;
        t.v = (Moment*)g->v + lo - p.shift;
        t.n = p.flat.size();
        t.weight_decay = g->table.specs[p.spec].is_matrix ? wd : 0.0f;
        ts.push_back(t);
    }
    return adamw_table_upload(ts);
}

// The communicators of a parallel layout, made by main from the Layout's member lists (llmc/parallel/topology.h).
struct GptComms {
    Comm world, dp, tp, pp, emb;  // every rank; the dp group; the tp group; the pipeline's stages; its first and last
                                  // stage (the tied embedding: layout_emb_members)
};

// Allocates everything for micro-batches of B x T, n_mb of them per step (a pipeline stage's activation slots).
// weight_decay goes into the AdamW table. layout and comms: this rank's layout (llmc/parallel/layout.h) and its
// communicators; null: one GPU. fp8: --fp8 and its settings (the scaling states start at scale 1).
static void gpt_build(GPT* g, const ModelConfig& c, int B, int T, Recompute r, bool bf16_moments, float weight_decay,
                      const Layout* layout = nullptr, const GptComms* comms = nullptr, int n_mb = 1,
                      const Fp8Options& fp8 = {}) {
    check_shapes(c, B, T);
    gpt_plan(g, c, layout ? *layout : layout_single(c), n_mb, fp8);  // fp8: main has checked the device and shapes
    if (g->parallel && !comms) die("gpt_build: a parallel layout needs its communicators");
    if (comms) {
        g->world = comms->world;
        g->dp = comms->dp;
        g->tp = comms->tp;
        g->pp = comms->pp;
        g->emb = comms->emb;
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
    g->tp.stream = g->stream;  // tp collectives in line with the kernels that write and read their buffers
    matmul_init(&g->mm, (int)max_bias_len(c));
    g->allocated += (double)g->mm.workspace_size + (double)max_bias_len(c) * 4;
    const size_t P = g->table.total, msz = bf16_moments ? 2 : 4, zero = g->L.zero;
    const size_t n_params = zero >= 3 ? g->shard : P, n_opt = zero >= 1 ? g->shard : P;
    double before = g->allocated;
    cuda_alloc(g, &g->params, n_params * sizeof(floatX));
    g->allocated_weights = g->allocated - before;
    before = g->allocated;
    cuda_alloc(g, &g->grads, P * sizeof(floatX));
    cuda_alloc(g, &g->head_grad, g->has_head ? (size_t)g->Vpl * c.n_embd * sizeof(float) : 0);
    g->allocated_grads = g->allocated - before;
    before = g->allocated;
    cuda_alloc(g, &g->master, n_opt * sizeof(float));
    cuda_alloc(g, (char**)&g->m, n_opt * msz);
    cuda_alloc(g, (char**)&g->v, n_opt * msz);
    g->allocated_optim = g->allocated - before;
    cudaCheck(cudaMemset(g->m, 0, n_opt * msz));
    cudaCheck(cudaMemset(g->v, 0, n_opt * msz));
    if (g->parallel) cudaCheck(cudaMemset(g->params, 0, n_params * sizeof(floatX)));  // bucket padding stays zero

    // activations and scratch: one block for the rows of the buffer table, carved in its order; an activation
    // that every layer keeps gets n_acts consecutive copies (every layer of every slot: acts[slot * slot_layers + i]),
    // one that is recomputed one copy shared by the layers
    const int n_acts = g->n_slots * g->slot_layers;
    g->acts.resize(n_acts);
    const std::vector<Buffer> buffers = buffer_table(g, c, B, T);
    size_t block = 0;
    for (const Buffer& b : buffers)
        if (b.ptr) block += buffer_bytes(b) * buffer_copies(b, r, n_acts);
        else g->allocated += (double)buffer_bytes(b);  // allocated below by its header
    cuda_alloc(g, &g->buffer_memory, block);
    char* at = g->buffer_memory;
    for (const Buffer& b : buffers) {
        if (!b.ptr) continue;
        const size_t copies = buffer_copies(b, r, n_acts);
        for (int i = 0; i < (b.activation ? n_acts : 1); i++)  // acts[i]'s member: i LayerActs after acts[0]'s
            b.set((char*)b.ptr + i * sizeof(LayerActs), at + (copies > 1 ? i * buffer_bytes(b) : 0));
        at += copies * buffer_bytes(b);
    }
    // the second halves of the [2,Nl] and [2,N] rows; without SP the gathered copies are the buffers themselves
    const size_t N = (size_t)B * T, Nl = g->sp ? N / g->n_tp : N;
    for (LayerActs& la : g->acts) {
        la.ln1_rstd = la.ln1_mean + Nl;
        la.ln2_rstd = la.ln2_mean + Nl;
        if (!g->sp) {
            la.ln1_full = la.ln1;
            la.ln2_full = la.ln2;
        }
    }
    g->layers = g->acts;  // one stage: layer l's activations are acts[l] (a pipeline binds a slot's per chunk)
    g->layers.resize(c.n_layer);
    g->lnf_rstd = g->lnf_mean + Nl;
    if (!g->sp) {
        g->lnf_full = g->lnf;
        g->dres_full = g->dres;
    }
    g->targets = g->inputs + N;
    g->cls_chunk = classifier_chunk(g->Vpl, B, T);
    g->rope_cos = g->rope_sin = nullptr;
    if (c.pos == POS_ROPE) rope_upload_tables(c, T, &g->rope_cos, &g->rope_sin);
    embedding_plan_alloc(&g->plan, B * T);
    if (fp8.recipe != FP8_NONE) {  // the three counted fp8 rows of the buffer table
        const int n = FP8_LINEARS * c.n_layer;
        fp8_meta_init(&g->fp8_w, FP8_E4M3, n, 1, fp8.margin);
        fp8_meta_init(&g->fp8_x, FP8_E4M3, n, fp8.meta_history(), fp8.margin);
        fp8_meta_init(&g->fp8_dy, FP8_E5M2, n, fp8.meta_history(), fp8.margin);
    }
    if (g->parallel) {
        if (bf16_moments) g->adam_bf16_g32 = adamw_table_build_dp<__nv_bfloat16>(g, weight_decay);
        else g->adam_f32_g32 = adamw_table_build_dp<float>(g, weight_decay);
        cudaCheck(cudaMemcpy(g->norm_ranges, g->norm_ranges_host.data(), g->norm_ranges_host.size() * sizeof(size_t),
                             cudaMemcpyHostToDevice));
        for (cudaEvent_t* e : {&g->ev_compute, &g->ev_comm, &g->ev_stage_free[0], &g->ev_stage_free[1], &g->ev_pp,
                               &g->ev_emb})
            cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        for (int i = 0; i < GATHER_SLOTS; i++) {
            cudaCheck(cudaEventCreateWithFlags(&g->ev_gathered[i], cudaEventDisableTiming));
            cudaCheck(cudaEventCreateWithFlags(&g->ev_slot_done[i], cudaEventDisableTiming));
        }
    } else if (bf16_moments) {
        g->adam_bf16 = adamw_table_build<__nv_bfloat16>(g, weight_decay);
    } else {
        g->adam_f32 = adamw_table_build<float>(g, weight_decay);
    }
    cudaCheck(cudaMallocHost((void**)&g->h_readback, sizeof(StepReadback)));
}

// int32 entries of one staging slot: inputs, targets, embedding plan
static size_t stage_ints(const GPT* g) {
    const int N = g->B * g->T;
    return 2 * (size_t)N + embedding_plan_ints(N);
}

// At least `slots` pinned staging slots. Only between steps: no queued copy may read the old ones.
static void gpt_stage_reserve(GPT* g, int slots) {
    if (g->stage_slots >= slots) return;
    if (g->h_stage) cudaCheck(cudaFreeHost(g->h_stage));
    cudaCheck(cudaMallocHost((void**)&g->h_stage, (size_t)slots * stage_ints(g) * sizeof(int32_t)));
    g->stage_slots = slots;
    g->stage.assign(slots, MicroBatchStage{});
}

// Host work of one micro-batch, into pinned slot `slot`: the tokens (checked against the vocabulary), the
// targets (-1 = ignore; may be null) and, with targets, the embedding backward's plan from the host tokens
// (llmc/embedding.cuh), so that the device needs nothing more from the host for this micro-batch.
static void gpt_stage(GPT* g, int slot, const int32_t* inputs, const int32_t* targets) {
    const size_t N = (size_t)g->B * g->T;
    const int V = g->cfg.vocab_size;
    int32_t* h = g->h_stage + (size_t)slot * stage_ints(g);
    MicroBatchStage& st = g->stage[slot];
    for (size_t n = 0; n < N; n++) {
        if (inputs[n] < 0 || inputs[n] >= V) die("input token %d out of range [0, %d)", inputs[n], V);
        if (targets && (targets[n] < -1 || targets[n] >= V)) die("target token %d out of range [-1, %d)", targets[n], V);
    }
    std::copy(inputs, inputs + N, h);
    st.has_targets = targets != nullptr;
    st.n_valid = 0;
    if (!targets) return;
    std::copy(targets, targets + N, h + N);
    for (size_t n = 0; n < N; n++) st.n_valid += targets[n] >= 0;
    embedding_plan_rows(inputs, (int)N, V, h + 2 * N, &st.plan_unique, &st.plan_max);
}

// ZeRO 1/2: every rank's pieces of params reach every rank: after the compute stream's writes, dp.stream all-gathers
// each bucket in place (rank r's piece at its place); the compute stream then waits for dp.stream.
static void params_allgather(GPT* g) {
    const int dp = g->L.topo.dp;
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->dp.stream, g->ev_compute, 0));
    for (const Bucket& b : g->buckets)
        comm_all_gather(g->dp, g->params + zero_piece(b, dp, g->L.topo.dp_rank).lo, g->params + b.range.lo,
                        b.range.size() / dp);
    cudaCheck(cudaEventRecord(g->ev_comm, g->dp.stream));
    cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0));
}

// params = floatX(master) for what this rank holds: everything (ZeRO 0), its pieces of every bucket then
// all-gathered (ZeRO 1, 2), its shard (ZeRO 3, where the gather buffers no longer hold current weights).
static void params_from_master(GPT* g) {
    const int zero = g->L.zero, dp = g->L.topo.dp;
    if (zero == 0 || zero >= 3) {
        const size_t n = zero >= 3 ? g->shard : g->table.total;
        floatX_from_f32_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g->stream>>>(g->params, g->master, n);
        cudaCheck(cudaGetLastError());
        for (int& h : g->gather_holds) h = -1;
        return;
    }
    for (const Bucket& b : g->buckets) {
        const Range piece = zero_piece(b, dp, g->L.topo.dp_rank);
        floatX_from_f32_kernel<<<(unsigned)ceil_div(piece.size(), 256), 256, 0, g->stream>>>(
            g->params + piece.lo, g->master + zero_shard_offset(b, dp), piece.size());
        cudaCheck(cudaGetLastError());
    }
    params_allgather(g);
}

// Uploads this rank's fp32 weights [P] (g->table's layout, part_of_full: its stage's tensors, its tp slices; and
// moments, or zeros when m is null); params = floatX(master). Under ZeRO >= 1 each rank keeps its pieces
// (zero_take_shard), so a checkpoint of any layout resumes at any tp, pp, dp and stage. Every rank calls it (ZeRO
// 1/2 all-gather the params).
static void gpt_set_weights(GPT* g, const float* p, const float* m, const float* v) {
    const int zero = g->L.zero;
    const size_t n = zero >= 1 ? g->shard : g->table.total;  // master and moments: this rank's elements
    std::vector<float> pieces[3];
    const float* src[3] = {p, m, v};
    for (int i = 0; i < 3 && zero >= 1; i++) {
        if (!src[i]) continue;
        pieces[i].resize(n);
        zero_take_shard(g->buckets, g->L.topo.dp, g->L.topo.dp_rank, src[i], pieces[i].data());
        src[i] = pieces[i].data();
    }
    cudaCheck(cudaMemcpy(g->master, src[0], n * sizeof(float), cudaMemcpyHostToDevice));
    params_from_master(g);
    const size_t msz = g->bf16_moments ? 2 : 4;
    if (!m) {
        cudaCheck(cudaMemset(g->m, 0, n * msz));
        cudaCheck(cudaMemset(g->v, 0, n * msz));
    } else if (!g->bf16_moments) {
        cudaCheck(cudaMemcpy(g->m, src[1], n * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(g->v, src[2], n * 4, cudaMemcpyHostToDevice));
    } else {
        std::vector<__nv_bfloat16> h(n);
        for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(src[1][i]);
        cudaCheck(cudaMemcpy(g->m, h.data(), n * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(src[2][i]);
        cudaCheck(cudaMemcpy(g->v, h.data(), n * 2, cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaStreamSynchronize(g->stream));
}

// out[P] = the whole of a device buffer of T (float or bf16) that this rank holds whole (sharded false) or as its
// shard: then every bucket is all-gathered over dp into grad32 (idle between steps, at least a bucket of floats)
// and copied out. Every rank of the dp group calls it.
template <typename T>
static void download_whole(GPT* g, const T* src, bool sharded, std::vector<float>* out) {
    const size_t P = g->table.total;
    const int dp = g->L.topo.dp;
    std::vector<T> h(P);
    if (!sharded) {
        cudaCheck(cudaMemcpy(h.data(), src, P * sizeof(T), cudaMemcpyDeviceToHost));
    } else {
        for (const Bucket& b : g->buckets) {
            comm_all_gather(g->dp, src + zero_shard_offset(b, dp), (T*)g->grad32, b.range.size() / dp);
            cudaCheck(cudaMemcpyAsync(h.data() + b.range.lo, g->grad32, b.range.size() * sizeof(T),
                                      cudaMemcpyDeviceToHost, g->dp.stream));
            cudaCheck(cudaStreamSynchronize(g->dp.stream));
        }
    }
    out->resize(P);
    for (size_t i = 0; i < P; i++) (*out)[i] = to_float(h[i]);
}

// Downloads the fp32 master weights and the moments (as fp32) of this rank's part: buffers [P] in g->table's layout
// (ZeRO >= 1: gathered from the shards; every rank of the dp group calls it). gpt_get_full assembles the whole model.
static void gpt_get_weights(GPT* g, std::vector<float>* p, std::vector<float>* m, std::vector<float>* v) {
    const bool sharded = g->L.zero >= 1;
    cudaCheck(cudaStreamSynchronize(g->stream));
    download_whole(g, g->master, sharded, p);
    if (!m) return;
    if (!g->bf16_moments) {
        download_whole(g, (const float*)g->m, sharded, m);
        download_whole(g, (const float*)g->v, sharded, v);
    } else {
        download_whole(g, (const __nv_bfloat16*)g->m, sharded, m);
        download_whole(g, (const __nv_bfloat16*)g->v, sharded, v);
    }
}

// Whole-model buffers [full.total] (build_param_table's layout, in which files are read and written) and this rank's
// part of them [P] in g->table's layout: its stage's tensors (its tp slices), bucket padding zero.
static std::vector<float> part_of_full(const GPT* g, const ParamTable& full, const float* src) {
    std::vector<float> out(g->table.total, 0.0f);
    for (size_t k = 0; k < g->table.specs.size(); k++) {
        const ParamSpec& f = full.specs[g->global[k]];
        tp_extract(src + f.offset, f.cols, g->slice[k], out.data() + g->table.specs[k].offset);
    }
    return out;
}

// The inverse, for checkpoints and exports: every rank calls it; world rank 0 receives the whole model's weights
// (and with m, the moments) [full.total], the others nothing. Each rank gathers its ZeRO shards over dp
// (gpt_get_weights); then the dp-rank-0 member of every other (stage, tp rank) sends its part to world rank 0 through
// grad32 (idle between steps), in pieces that fit every rank's grad32.
static void gpt_get_full(GPT* g, const ParamTable& full, std::vector<float>* p, std::vector<float>* m,
                         std::vector<float>* v) {
    const Topology& me = g->L.topo;
    const int n_bufs = m ? 3 : 1;
    std::vector<float> mine[3];
    gpt_get_weights(g, &mine[0], m ? &mine[1] : nullptr, m ? &mine[2] : nullptr);
    std::vector<float>* dst[3] = {p, m, v};
    if (me.rank == 0)
        for (int i = 0; i < n_bufs; i++) dst[i]->assign(full.total, 0.0f);
    double piece = 0;  // the smallest grad32 of the ranks (minus the largest negative)
    if (me.world > 1) {
        piece = -(double)g->n_grad32;
        comm_host_max(g->world, &piece, 1);
        piece = -piece;
    }
    for (int r = 0; r < me.world; r++) {
        const Topology o = topo_make(me.dp, me.tp, me.pp, r);
        if (o.dp_rank != 0 || (me.rank != 0 && me.rank != r)) continue;
        const LocalTable lt = gpt_local_table(g->cfg, full, g->L, o.pp_rank, o.tp_rank);
        for (int i = 0; i < n_bufs; i++) {
            std::vector<float> buf = r == 0 ? mine[i] : std::vector<float>(lt.t.total);
            for (size_t at = 0; r != 0 && at < lt.t.total; at += (size_t)piece) {
                const size_t n = std::min((size_t)piece, lt.t.total - at);
                if (me.rank == r) {
                    CommRequest req;
                    cudaCheck(cudaMemcpy(g->grad32, mine[i].data() + at, n * sizeof(float), cudaMemcpyHostToDevice));
                    comm_send(g->world, (const float*)g->grad32, n, 0, i, &req);
                    comm_wait(&req);
                } else {
                    comm_recv(g->world, g->grad32, n, r, i);
                    cudaCheck(cudaMemcpyAsync(buf.data() + at, g->grad32, n * sizeof(float), cudaMemcpyDeviceToHost,
                                              g->world.stream));
                    cudaCheck(cudaStreamSynchronize(g->world.stream));
                }
            }
            if (me.rank != 0) continue;
            for (size_t k = 0; k < lt.t.specs.size(); k++) {
                const ParamSpec& f = full.specs[lt.global[k]];
                tp_insert(buf.data() + lt.t.specs[k].offset, lt.slice[k], f.cols, dst[i]->data() + f.offset);
            }
        }
    }
}

static void gpt_free(GPT* g) {
    for (void* p : {(void*)g->params, (void*)g->grads, (void*)g->master, g->m, g->v, (void*)g->head_grad,
                    (void*)g->buffer_memory, (void*)g->rope_cos, (void*)g->rope_sin})
        if (p) cudaCheck(cudaFree(p));
    if (g->parallel) {
        if (g->bf16_moments) adamw_table_free(&g->adam_bf16_g32);
        else adamw_table_free(&g->adam_f32_g32);
        for (cudaEvent_t e : {g->ev_compute, g->ev_comm, g->ev_stage_free[0], g->ev_stage_free[1], g->ev_pp, g->ev_emb})
            cudaCheck(cudaEventDestroy(e));
        for (int i = 0; i < GATHER_SLOTS; i++) {
            cudaCheck(cudaEventDestroy(g->ev_gathered[i]));
            cudaCheck(cudaEventDestroy(g->ev_slot_done[i]));
        }
    } else if (g->bf16_moments) {
        adamw_table_free(&g->adam_bf16);
    } else {
        adamw_table_free(&g->adam_f32);
    }
    embedding_plan_free(&g->plan);
    if (g->fp8.recipe != FP8_NONE)
        for (Fp8Meta* m : {&g->fp8_w, &g->fp8_x, &g->fp8_dy}) fp8_meta_free(m);
    if (g->h_stage) cudaCheck(cudaFreeHost(g->h_stage));
    cudaCheck(cudaFreeHost(g->h_readback));
    matmul_free(&g->mm);
    cudaCheck(cudaStreamDestroy(g->stream));
}

// ----------------------------------------------------------------------------------------------
// ZeRO-3: a bucket's weights gathered on dp.stream into its gather buffer before use, one layer ahead

// Starts the all-gather of bucket b's weights into its buffer (nothing when the buffer holds it already, or below
// ZeRO 3, or for b out of range). dp.stream first waits until the compute stream is done with the buffer's
// previous bucket (params_done), so the caller must have marked that bucket done.
static void params_prefetch(GPT* g, int b) {
    if (g->L.zero < 3 || b < 0 || b >= (int)g->buckets.size()) return;
    const Bucket& bk = g->buckets[b];
    const int s = g->gather_slot(bk), dp = g->L.topo.dp;
    if (g->gather_holds[s] == b) return;
    cudaCheck(cudaStreamWaitEvent(g->dp.stream, g->ev_slot_done[s], 0));
    comm_all_gather(g->dp, g->params + zero_shard_offset(bk, dp), g->gather + g->gather_off[s], bk.range.size() / dp);
    cudaCheck(cudaEventRecord(g->ev_gathered[s], g->dp.stream));
    g->gather_holds[s] = b;
}

// Bucket b's weights are read from here on: the compute stream waits for their gather.
static void params_use(GPT* g, int b) {
    if (g->L.zero < 3) return;
    params_prefetch(g, b);
    cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_gathered[g->gather_slot(g->buckets[b])], 0));
}

// The compute stream's work so far is the last to read bucket b's buffer until its next params_use: the buffer
// may be gathered into after it.
static void params_done(GPT* g, int b) {
    if (g->L.zero < 3) return;
    cudaCheck(cudaEventRecord(g->ev_slot_done[g->gather_slot(g->buckets[b])], g->stream));
}

// The bucket of layer l's weights (the embeddings are bucket 0, the final norm and head the last).
static int layer_bucket(const GPT* g, int l) { return g->bucket_of[g->table.blocks[l].ln1_w]; }

// ----------------------------------------------------------------------------------------------
// Tensor and sequence parallel communication of the residual stream, on the compute stream (g->tp.stream). Without
// SP every tp rank holds all N rows; with SP rank r holds positions r*T/tp .. of every sample, Nl = N/tp rows.

// The sum over tp of partial results part [N,C] (a row-parallel matmul's output, a column-parallel matmul's input
// gradient) into out: without SP all of it, in place (out must be part); with SP this rank's rows [Nl,C]
// (packed by rank into seq_buf, then reduce-scattered).
static void tp_sum(GPT* g, floatX* part, floatX* out) {
    if (g->n_tp == 1) return;
    const size_t N = (size_t)g->B * g->T, C = g->cfg.n_embd;
    if (!g->sp) {
        if (out != part) die("tp_sum: without sequence parallelism the sum is in place");
        comm_all_reduce_sum(g->tp, part, N * C);
        return;
    }
    seq_pack_kernel<<<(unsigned)ceil_div(N * C / 8, 256), 256, 0, g->stream>>>(g->seq_buf, part, g->B, g->T, g->n_tp,
                                                                                 (int)C, true);
    cudaCheck(cudaGetLastError());
    comm_reduce_scatter(g->tp, g->seq_buf, out, N * C / g->n_tp);
}

// SP: every tp rank's rows of local [Nl,C] gathered into full [N,C] (the input of a column-parallel matmul, the
// output gradient of a row-parallel one). Without SP local is already whole (and full is the same buffer).
static void tp_gather(GPT* g, const floatX* local, floatX* full) {
    if (!g->sp) return;
    const size_t N = (size_t)g->B * g->T, C = g->cfg.n_embd;
    comm_all_gather(g->tp, local, g->seq_buf, N * C / g->n_tp);
    seq_pack_kernel<<<(unsigned)ceil_div(N * C / 8, 256), 256, 0, g->stream>>>(g->seq_buf, full, g->B, g->T, g->n_tp,
                                                                                 (int)C, false);
    cudaCheck(cudaGetLastError());
}

// Where a sum over tp is computed before tp_sum: SP: the partial-sum buffer; otherwise out itself (in place).
static floatX* tp_part(GPT* g, floatX* out) { return g->sp ? g->tp_part : out; }

// A row-parallel layer's bias (replicated): added by tp rank 0 only, so the sum over tp holds it once; its gradient
// is every rank's (from the whole dout, the same on every rank) without SP, and tp rank 0's with SP, where the
// replicated tensors' gradients are summed over tp (grads_bucket_done).
static floatX* row_bias(const GPT* g, floatX* b) { return g->tp_rank == 0 ? b : nullptr; }
static floatX* row_bias_grad(const GPT* g, floatX* db) { return g->sp && g->tp_rank != 0 ? nullptr : db; }

// ----------------------------------------------------------------------------------------------
// fp8 (--fp8 delayed|current; docs/fp8.md). The four linear layers of every layer (QKV, attention-out, fc1 / gate-up,
// fc2) multiply fp8 operands with llmc/matmul_fp8.cuh's cuBLASLt GEMMs, bf16 out; everything else stays as it was.
//   forward   out = x8 w8^T: the input cast to E4M3 into x8, the step's fp8 copy of the weight
//   backward  dinp = dy8 wt8 (the output gradient cast to E5M2, the weight's transposed copy); dW += dyt8^T x8t, the
//             transposes of the output gradient (cast with it) and of the input (cast again from the kept bf16 input:
//             the same values with the same scale, so nothing fp8 is kept between forward and backward)
//   weights   cast once per step after the optimizer (fp8_weights_update), scaled by their own amax under both recipes:
//             the cast is once a step, so the exact amax costs one read of the weights (TransformerEngine's delayed
//             recipe runs the weights through the amax history too). ZeRO 3 holds no whole weight: the scales come from
//             the shards (their amaxes maxed over dp), and each layer is cast after its gather (fp8_cast_weights).
//   inputs, output gradients   delayed: every cast uses the scale of the last update and records its amax; after the
//             step the amaxes are maxed over tp and dp (the dp ranks saw the step's other micro-batches: one process's
//             amax is their max) and fp8_update_delayed sets the next step's scales. current: each cast measures its
//             tensor's amax first, maxed over tp where the tensor is a tensor-parallel slice (the attention output and
//             the MLP activation, the QKV and fc1 output gradients), so every rank uses the one scale of the whole
//             tensor, as one process would.
// A step the numerics guard skips leaves the fp8 state as it was (its amaxes are dropped), like the weights.

// The ranks sharing tensors agree on their amaxes amax[n]: the max over tp (on the compute stream, as every tp
// collective) and, with over_dp, over dp (on dp.stream, ordered by events).
static void fp8_agree(GPT* g, float* amax, size_t n, bool over_tp, bool over_dp) {
    if (over_tp && g->n_tp > 1) comm_all_reduce_max(g->tp, amax, n);
    if (!over_dp || g->L.topo.dp == 1) return;
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->dp.stream, g->ev_compute, 0));
    comm_all_reduce_max(g->dp, amax, n);
    cudaCheck(cudaEventRecord(g->ev_comm, g->dp.stream));
    cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0));
}

// q[rows, cols] (or null) and qt[cols, rows] (or null) = inp[rows, cols] in fp8 with the scale of tensor i of m under
// the run's recipe: delayed, the step's scale, the amax recorded; current, inp's own amax (maxed over tp when inp is a
// tensor-parallel slice), then its scale.
template <typename F8>
static void fp8_cast_tensor(GPT* g, F8* q, F8* qt, const floatX* inp, int rows, int cols, Fp8Meta* m, int i,
                            bool tp_slice) {
    Fp8Recipe mode = g->fp8.recipe;
    if (mode == FP8_CURRENT) {
        cudaCheck(cudaMemsetAsync(fp8_amax(m, i), 0, sizeof(float), g->stream));
        fp8_measure_amax(g->stream, inp, (size_t)rows * cols, m, i);
        fp8_agree(g, fp8_amax(m, i), 1, tp_slice, false);
        fp8_scale_from_measured(g->stream, m, i, 1);
        mode = FP8_NONE;  // the scale as just set
    }
    if (qt) fp8_cast_transpose(g->stream, q, qt, inp, rows, cols, m, i, mode);
    else fp8_cast(g->stream, q, inp, (size_t)rows * cols, m, i, mode);
}

// The fp8 copy of linear layer k's weight of layer l [OC,IC], or its transpose [IC,OC].
static __nv_fp8_e4m3* fp8_weight(const GPT* g, int l, int k, bool transposed) {
    return g->w8 + (transposed ? g->w8_half : 0) + g->w8_off[(size_t)FP8_LINEARS * l + k];
}

// Below ZeRO 3, the weights and their transposes into w8 with the scales of fp8_weights_update. ZeRO 3: layer l's
// only (its weights just gathered; transposed: the backward's copies, else the forward's). Scales as they are.
static void fp8_cast_weights(GPT* g, int layer, bool transposed) {
    const bool z3 = g->L.zero >= 3;
    for (int l = z3 ? layer : 0; l < (z3 ? layer + 1 : g->cfg.n_layer); l++) {
        const ParamTable::Block& b = g->table.blocks[l];
        for (int k = 0; k < FP8_LINEARS && b.qkv_w >= 0; k++) {
            const int w = linear_weight(b, k), i = FP8_LINEARS * l + k;
            const ParamSpec& s = g->table.specs[w];
            __nv_fp8_e4m3 *q = fp8_weight(g, l, k, false), *qt = fp8_weight(g, l, k, true);
            if (z3 && !transposed) fp8_cast(g->stream, q, g->P(w), s.numel(), &g->fp8_w, i, FP8_NONE);
            else fp8_cast_transpose(g->stream, z3 ? nullptr : q, qt, g->P(w), (int)s.rows, (int)s.cols, &g->fp8_w, i,
                                    FP8_NONE);
        }
    }
}

// After every update of the weights, and after they are loaded: each linear weight's amax (this rank's tp slice; under
// ZeRO 3 its parts in this rank's shard, maxed over dp too), maxed over tp, its scale (current scaling's rule), then
// below ZeRO 3 the step's fp8 copies. Only enqueues.
static void fp8_weights_update(GPT* g) {
    if (g->fp8.recipe == FP8_NONE) return;
    Fp8Meta* m = &g->fp8_w;
    const bool z3 = g->L.zero >= 3;
    cudaCheck(cudaMemsetAsync(fp8_amax(m, 0), 0, (size_t)m->n * sizeof(float), g->stream));
    std::vector<int> index(g->table.specs.size(), -1);  // spec -> its tensor in the scaling state
    for (int l = 0; l < g->cfg.n_layer; l++)
        for (int k = 0; k < FP8_LINEARS && g->table.blocks[l].qkv_w >= 0; k++)
            index[linear_weight(g->table.blocks[l], k)] = FP8_LINEARS * l + k;
    const std::vector<ZeroPart> parts = zero_parts(g->table, g->buckets, g->L.topo.dp, g->L.topo.dp_rank, !z3);
    for (const ZeroPart& p : parts)
        if (index[p.spec] >= 0)
            fp8_measure_amax(g->stream, g->params + p.flat.lo - (z3 ? p.shift : 0), p.flat.size(), m, index[p.spec]);
    fp8_agree(g, fp8_amax(m, 0), m->n, true, z3);
    fp8_scale_from_measured(g->stream, m, 0, m->n);
    if (!z3) fp8_cast_weights(g, -1, false);
}

// After a step's backward: delayed scaling's new scales of the inputs and output gradients from the step's amaxes,
// agreed over tp and dp; a step the guard skipped (updated false) drops its amaxes, and so do validation and sampling
// (their forwards are no part of training). Current scaling keeps nothing.
static void fp8_step_end(GPT* g, bool updated) {
    if (g->fp8.recipe != FP8_DELAYED) return;
    for (Fp8Meta* m : {&g->fp8_x, &g->fp8_dy}) {
        if (!updated) {
            cudaCheck(cudaMemsetAsync(fp8_amax(m, 0), 0, (size_t)m->n * sizeof(float), g->stream));
            continue;
        }
        fp8_agree(g, fp8_amax(m, 0), m->n, true, true);
        fp8_update_delayed(g->stream, m);
    }
}

// out[N,OC] = inp[N,IC] W^T (+ bias) of linear layer k of layer l: bf16 (matmul_forward), or with --fp8 the input cast
// to E4M3 times the fp8 weight (the inputs of attention-out and fc2, row-parallel, are tensor-parallel slices).
static void linear_forward(GPT* g, int l, int k, floatX* out, const floatX* inp, const floatX* bias, int N, int IC,
                           int OC) {
    const int w = linear_weight(g->table.blocks[l], k), i = FP8_LINEARS * l + k;
    if (g->fp8.recipe == FP8_NONE) {
        matmul_forward(&g->mm, g->stream, out, inp, g->P(w), bias, N, IC, OC);
        return;
    }
    fp8_cast_tensor(g, g->x8, (__nv_fp8_e4m3*)nullptr, inp, N, IC, &g->fp8_x, i, k == FP8_ATTN_OUT || k == FP8_FC2);
    matmul_fp8_forward(&g->mm, g->stream, out, g->x8, fp8_scale_inv(&g->fp8_x, i), fp8_weight(g, l, k, false),
                       fp8_scale_inv(&g->fp8_w, i), bias, N, IC, OC);
}

// dinp[N,IC] = dout[N,OC] W and dW += dout^T inp (dbias += column sums of dout, when given) of linear layer k of
// layer l: bf16, or with --fp8 the output gradient cast to E5M2 with its transpose, and the input cast again, transposed.
static void linear_backward(GPT* g, int l, int k, floatX* dinp, floatX* dbias, const floatX* dout, const floatX* inp,
                            int N, int IC, int OC) {
    const int w = linear_weight(g->table.blocks[l], k), i = FP8_LINEARS * l + k;
    if (g->fp8.recipe == FP8_NONE) {
        matmul_backward_input(&g->mm, g->stream, dinp, dout, g->P(w), N, IC, OC);
        matmul_backward_weight(&g->mm, g->stream, g->G(w), dbias, dout, inp, N, IC, OC);
        return;
    }
    // the output gradients of QKV and fc1 (column-parallel) are tp slices, as the inputs of attention-out and fc2
    fp8_cast_tensor(g, g->dy8, g->dyt8, dout, N, OC, &g->fp8_dy, i, k == FP8_QKV || k == FP8_FC1);
    matmul_fp8_backward_input(&g->mm, g->stream, dinp, g->dy8, fp8_scale_inv(&g->fp8_dy, i), fp8_weight(g, l, k, true),
                              fp8_scale_inv(&g->fp8_w, i), N, IC, OC);
    fp8_cast_tensor(g, (__nv_fp8_e4m3*)nullptr, g->x8, inp, N, IC, &g->fp8_x, i, k == FP8_ATTN_OUT || k == FP8_FC2);
    matmul_fp8_backward_weight(&g->mm, g->stream, g->G(w), dbias, dout, g->dyt8, fp8_scale_inv(&g->fp8_dy, i), g->x8,
                               fp8_scale_inv(&g->fp8_x, i), N, IC, OC);
}

// Values of a scaling state of n tensors (v: fp8_meta_download's, column i = tensor i) over the ranks of c: the largest
// and the smallest of each value among the ranks that hold tensor i (this stage's layers). Into *hi the largest (-inf
// where no rank holds the tensor); returns whether they are equal, i.e. every rank holds the same values.
static bool fp8_same_on_ranks(const GPT* g, const Comm& c, const std::vector<float>& v, int n, std::vector<double>* hi) {
    std::vector<double> neg_lo(v.size());
    hi->resize(v.size());
    for (size_t e = 0; e < v.size(); e++) {
        const bool mine = g->w8_off[e % n] != SIZE_MAX;
        (*hi)[e] = mine ? (double)v[e] : -INFINITY;
        neg_lo[e] = mine ? -(double)v[e] : -INFINITY;
    }
    comm_host_max(c, hi->data(), hi->size());
    comm_host_max(c, neg_lo.data(), neg_lo.size());
    for (size_t e = 0; e < v.size(); e++)
        if ((*hi)[e] != -INFINITY && (*hi)[e] != -neg_lo[e]) return false;
    return true;
}

// At a checkpoint, every rank: that the ranks sharing a tensor use the same scales (what fp8_agree is for; a difference
// is a bug and stops the run): the weights' states over every rank, and the inputs' and output gradients' over every
// rank under delayed scaling, over tp under current scaling (there the dp ranks' last casts were of other micro-batches).
// Returns the delayed-scaling state for the checkpoint, layout-independent (Fp8State, llmc/run/checkpoint.h): whole-model
// columns, each pipeline stage giving its layers' (every layer is on a stage); empty under
// current scaling (nothing carries over) and without fp8.
static Fp8State fp8_state_gather(GPT* g) {
    Fp8State st;
    if (g->fp8.recipe == FP8_NONE) return st;
    cudaCheck(cudaStreamSynchronize(g->stream));
    const bool delayed = g->fp8.recipe == FP8_DELAYED;
    const char* names[3] = {"weights'", "GEMM inputs'", "output gradients'"};
    const Fp8Meta* metas[3] = {&g->fp8_w, &g->fp8_x, &g->fp8_dy};
    for (int k = 0; k < 3; k++) {
        std::vector<double> hi;
        const Comm& c = k == 0 || delayed ? g->world : g->tp;
        if (!fp8_same_on_ranks(g, c, fp8_meta_download(metas[k]), metas[k]->n, &hi))
            die("fp8: the %s scaling state differs between the ranks sharing its tensors (%s group)", names[k],
                k == 0 || delayed ? "world" : "tp");
        if (k > 0 && delayed) (k == 1 ? st.x : st.dy).assign(hi.begin(), hi.end());
    }
    if (delayed) {
        st.history = g->fp8_x.history_len;
        st.pos = g->fp8_x.pos;
    }
    return st;
}

// A checkpoint's delayed-scaling state into the scaling states, when the run scales delayed with the same history;
// otherwise they keep scale 1 and a fresh history (rank 0 says so). Returns whether it was taken.
static bool fp8_state_set(GPT* g, const Fp8State& st) {
    if (g->fp8.recipe != FP8_DELAYED || st.history != g->fp8_x.history_len) return false;
    fp8_meta_upload(&g->fp8_x, st.x, st.pos);
    fp8_meta_upload(&g->fp8_dy, st.dy, st.pos);
    return true;
}

// ----------------------------------------------------------------------------------------------
// Data parallel: bucket b's gradient is complete on this rank (the last micro-batch's backward has passed it). It is
// cast to fp32 (plus head_grad where the LM head lives), and dp.stream, once the compute stream has written it,
// reduces it over dp: all-reduce in place (ZeRO 0), reduce-scatter in place so that this rank's piece holds the
// sum (ZeRO 1), or reduce-scatter from a staging buffer into grad_shard (ZeRO 2/3; the cast into a staging buffer
// first waits until its previous bucket's reduce-scatter has read it).
static void grads_bucket_done(GPT* g, int b) {
    const Bucket& bk = g->buckets[b];
    const int dp = g->L.topo.dp, zero = g->L.zero;
    const size_t n = bk.range.size();
    int stage = -1;
    float* dst = g->grad32 + bk.range.lo;
    if (zero >= 2) {
        stage = g->stage_next;
        g->stage_next ^= 1;
        cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_stage_free[stage], 0));
        dst = g->grad32 + stage * g->max_bucket;
    }
    f32_from_floatX_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g->stream>>>(dst, g->grads + bk.range.lo, n);
    cudaCheck(cudaGetLastError());
    const int h = g->head();
    if (g->has_head && h >= bk.first_spec && h < bk.end_spec) {
        const size_t hn = (size_t)g->Vpl * g->cfg.n_embd;
        float* head_dst = dst + (g->table.specs[h].offset - bk.range.lo);
        add_f32_kernel<<<(unsigned)ceil_div(hn, 256), 256, 0, g->stream>>>(head_dst, g->head_grad, hn);
        cudaCheck(cudaGetLastError());
    }
    // SP: each tp rank saw its part of the sequence, so the replicated tensors' gradients (norms, row-parallel biases,
    // position embedding) are summed over tp, in fp32, before the dp reduction
    for (int k = bk.first_spec; k < bk.end_spec && g->sp; k++) {
        const ParamSpec& s = g->table.specs[k];
        if (s.tp == TP_NONE) comm_all_reduce_sum(g->tp, dst + (s.offset - bk.range.lo), s.numel());
    }
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    const int e = g->table.wte;
    if (g->cfg.tied && g->L.topo.pp > 1 && e >= bk.first_spec && e < bk.end_spec) {
        // the tied embedding's gradient: the first stage's (embedding) plus the last stage's (LM head), on emb.stream
        cudaCheck(cudaStreamWaitEvent(g->emb.stream, g->ev_compute, 0));
        comm_all_reduce_sum(g->emb, dst + (g->table.specs[e].offset - bk.range.lo), g->table.specs[e].numel());
        cudaCheck(cudaEventRecord(g->ev_emb, g->emb.stream));
        cudaCheck(cudaStreamWaitEvent(g->dp.stream, g->ev_emb, 0));
    } else {
        cudaCheck(cudaStreamWaitEvent(g->dp.stream, g->ev_compute, 0));
    }
    if (zero == 0) {
        comm_all_reduce_sum(g->dp, dst, n);
    } else if (zero == 1) {
        comm_reduce_scatter(g->dp, dst, dst + (size_t)g->L.topo.dp_rank * (n / dp), n / dp);
    } else {
        comm_reduce_scatter(g->dp, dst, g->grad_shard + zero_shard_offset(bk, dp), n / dp);
        cudaCheck(cudaEventRecord(g->ev_stage_free[stage], g->dp.stream));
    }
}

// ----------------------------------------------------------------------------------------------
// Forward

// The attention half of layer l after ln1: qkv (column-parallel: this rank's heads, on ln1 gathered under SP),
// RoPE, attention.
static void attention_block_forward(GPT* g, int l, LayerActs& la) {
    const ModelConfig& c = g->cfg;
    const ParamTable::Block& w = g->table.blocks[l];
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd, hd = c.head_dim, H = g->Hl, KV = g->KVl;
    tp_gather(g, la.ln1, la.ln1_full);
    linear_forward(g, l, FP8_QKV, la.qkv, la.ln1_full, g->P(w.qkv_b), N, C, (H + 2 * KV) * hd);
    if (c.pos == POS_ROPE) rope_rotate_inplace(la.qkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, +1, g->stream);
    attention_fwd(la.atty, la.lse, la.qkv, B, T, H, KV, hd, g->stream);
}

// The MLP activation of layer l: act from fc1 (this rank's Fl columns).
static void mlp_act_forward(GPT* g, LayerActs& la) {
    const size_t N = (size_t)g->B * g->T;
    if (g->cfg.mlp == MLP_SWIGLU) swiglu_forward(la.act, la.fc1, (int)N, g->Fl, g->stream);
    else gelu_forward(la.act, la.fc1, N * g->Fl, g->stream);
}

// Layer l up to its MLP output in g->y. x_prev_mid: x[l] = x_prev_mid + g->y (the previous layer's
// x_mid and MLP output) is formed by ln1's residual add; null when la.x already holds x[l] (layer 0, a
// recompute), and then ln1 = norm(la.x) without a residual add.
// Tensor parallel: attn_out and fc2 are row-parallel, their partial outputs summed over tp into g->y (tp_sum; the
// bias from tp rank 0); the norms and residual adds run on this rank's Nl rows.
static void layer_forward(GPT* g, int l, const floatX* x_prev_mid) {
    const ModelConfig& c = g->cfg;
    const ParamTable::Block& w = g->table.blocks[l];
    LayerActs& la = g->layers[l];
    const int N = g->B * g->T, Nl = g->sp ? N / g->n_tp : N, C = c.n_embd, F = g->Fl,
              F1 = c.mlp == MLP_SWIGLU ? 2 * F : F;
    const bool rms = c.norm == NORM_RMSNORM;
    if (g->fp8.recipe != FP8_NONE && g->L.zero >= 3) fp8_cast_weights(g, l, false);  // its weights just gathered
    if (x_prev_mid)
        fused_residual_norm_forward(la.x, la.ln1, la.ln1_mean, la.ln1_rstd, x_prev_mid, g->y, g->P(w.ln1_w), g->P(w.ln1_b),
                                    Nl, C, c.norm_eps, rms, g->stream);
    else
        fused_residual_norm_forward(nullptr, la.ln1, la.ln1_mean, la.ln1_rstd, la.x, nullptr, g->P(w.ln1_w),
                                    g->P(w.ln1_b), Nl, C, c.norm_eps, rms, g->stream);  // no residual add
    attention_block_forward(g, l, la);
    floatX* part = tp_part(g, g->y);
    linear_forward(g, l, FP8_ATTN_OUT, part, la.atty, row_bias(g, g->P(w.attn_out_b)), N, g->Hl * c.head_dim, C);
    tp_sum(g, part, g->y);
    fused_residual_norm_forward(la.x_mid, la.ln2, la.ln2_mean, la.ln2_rstd, la.x, g->y, g->P(w.ln2_w), g->P(w.ln2_b), Nl,
                                C, c.norm_eps, rms, g->stream);
    tp_gather(g, la.ln2, la.ln2_full);
    linear_forward(g, l, FP8_FC1, la.fc1, la.ln2_full, g->P(w.fc1_b), N, C, F1);
    mlp_act_forward(g, la);
    linear_forward(g, l, FP8_FC2, part, la.act, row_bias(g, g->P(w.fc2_b)), N, F, C);
    tp_sum(g, part, g->y);
}

// dst[i] = floatX(a[i] + b[i]): a pipeline chunk's output, its last layer's x_mid plus its MLP output (the residual
// add that the next layer's norm would do, rounded as fused_residual_norm_forward rounds it)
__global__ void residual_add_kernel(floatX* dst, const floatX* a, const floatX* b, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_floatX(to_float(a[i]) + to_float(b[i]));
}

// The layers [*l0, *l1) of pipeline chunk `chunk` (-1: the whole model, one stage), whether it begins with the
// embeddings (*first) and ends with the final norm and head (*last).
static void chunk_span(const GPT* g, int chunk, int* l0, int* l1, bool* first, bool* last) {
    const int n_chunks = g->L.n_chunks();
    *l0 = chunk < 0 ? 0 : g->L.chunk_first[chunk];
    *l1 = chunk < 0 ? g->cfg.n_layer : g->L.chunk_first[chunk + 1];
    *first = chunk <= 0;
    *last = chunk < 0 || chunk == n_chunks - 1;
}

// Forward of staged micro-batch `slot` (gpt_stage) through pipeline chunk `chunk` (-1: the whole model): from the
// embeddings (the first chunk) or from g->layers[l0].x (received from the previous stage), to the final norm g->lnf
// [N,C] (the last chunk) or to the chunk's output out [N,C] (sent on). Its tokens and targets go up in one
// asynchronous copy from the pinned slot (they are adjacent there and on the device).
static void gpt_forward_staged(GPT* g, int slot, int chunk = -1, floatX* out = nullptr) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd;
    int l0, l1;
    bool first, last;
    chunk_span(g, chunk, &l0, &l1, &first, &last);
    const MicroBatchStage& st = g->stage[slot];
    const int32_t* h = g->h_stage + (size_t)slot * stage_ints(g);
    cudaCheck(cudaMemcpyAsync(g->inputs, h, (size_t)(st.has_targets ? 2 : 1) * N * sizeof(int32_t),
                              cudaMemcpyHostToDevice, g->stream));
    g->n_valid = st.n_valid;
    // ZeRO 3: each bucket's weights gathered one bucket ahead (params_use waits for them, params_done frees the buffer)
    const int head_bucket = (int)g->buckets.size() - 1;
    if (first) {
        params_use(g, 0);
        params_prefetch(g, layer_bucket(g, l0));
        // x[0] = wte[token] (+ wpe[t]); layer 0's norm has no residual to add. Tensor parallel: this rank's vocabulary
        // rows (zeros for the other tokens; the position embedding from tp rank 0), summed over tp
        floatX* x0 = tp_part(g, g->layers[0].x);
        embedding_forward(x0, g->inputs, g->P(t.wte), row_bias(g, g->P(t.wpe)), N, T, C, g->stream, g->v0, g->Vpl);
        tp_sum(g, x0, g->layers[0].x);
        params_done(g, 0);
    }
    for (int l = l0; l < l1; l++) {
        const int b = layer_bucket(g, l);
        params_use(g, b);
        params_prefetch(g, l + 1 < l1 ? layer_bucket(g, l + 1) : last ? head_bucket : -1);
        layer_forward(g, l, l == l0 ? nullptr : g->layers[l - 1].x_mid);
        params_done(g, b);
    }
    if (!last) {  // x[l1] = x_mid + y, sent to the next chunk's stage
        const size_t n = (size_t)(g->sp ? N / g->n_tp : N) * C;
        residual_add_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g->stream>>>(out, g->layers[l1 - 1].x_mid, g->y, n);
        cudaCheck(cudaGetLastError());
        return;
    }
    if (c.tied && !first) params_use(g, 0);  // the last stage's copy of the tied embedding, for the LM head
    params_use(g, head_bucket);  // the final norm here, the LM head in the classifier (tied: the embedding buffer)
    fused_residual_norm_forward(g->x_final, g->lnf, g->lnf_mean, g->lnf_rstd, g->layers[l1 - 1].x_mid, g->y,
                                g->P(t.lnf_w), g->P(t.lnf_b), g->sp ? N / g->n_tp : N, C, c.norm_eps,
                                c.norm == NORM_RMSNORM, g->stream);
    tp_gather(g, g->lnf, g->lnf_full);
}

// Forward of one micro-batch inputs[B*T] (host) through the final norm, outside a training step (evaluation,
// sampling, tests). targets[B*T] (host, -1 = ignore, may be null) are uploaded for the classifier. Tokens
// must be in [0, vocab). It waits for the stream first, since it rewrites staging slot 0.
static void gpt_forward(GPT* g, const int32_t* inputs, const int32_t* targets) {
    cudaCheck(cudaStreamSynchronize(g->stream));
    gpt_stage_reserve(g, 1);
    gpt_stage(g, 0, inputs, targets);
    gpt_forward_staged(g, 0);
}

// Adds weight * (mean loss over the valid targets of the micro-batch in g->losses) into g->loss_sum.
static void gpt_loss_accumulate(GPT* g, double weight) {
    loss_accumulate_kernel<<<1, 256, 0, g->stream>>>(g->loss_sum, g->losses, g->B * g->T, g->n_valid, weight);
    cudaCheck(cudaGetLastError());
}

// Waits for the stream and reads g->loss_sum through pinned memory into g->loss.
static double gpt_read_loss(GPT* g) {
    cudaCheck(cudaMemcpyAsync(&g->h_readback->loss, g->loss_sum, sizeof(double), cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaStreamSynchronize(g->stream));
    g->loss = g->h_readback->loss;
    return g->loss;
}

// logits[rows, Vpl] (floatX, in g->logits) of lnf rows [row0, row0 + rows), rows <= cls_chunk: the LM
// head (this rank's vocabulary rows) as a linear layer (IC = C, OC = Vpl), the same GEMM as step 1 of
// fused_classifier.
static void gpt_logits(GPT* g, int row0, int rows) {
    const ModelConfig& c = g->cfg;
    matmul_forward(&g->mm, g->stream, g->logits, g->lnf_full + (size_t)row0 * c.n_embd, g->P(g->head()), nullptr, rows,
                   c.n_embd, g->Vpl);
}

// Tensor parallel: the vocabulary-parallel fused classifier (llmc/classifier.cuh) over the N rows of lnf_full, chunk
// by chunk: this rank's logit columns, the row max (max over tp), target logit and sum of exps (sums over tp), the
// losses and dlogits (scale: usually 1/valid targets); with dx, also dx [N,C] = dlogits head (this rank's partial
// sum: the caller sums it over tp) and head_grad += dlogits^T lnf.
static void classifier_tp(GPT* g, floatX* dx, float scale) {
    const ModelConfig& c = g->cfg;
    const int N = g->B * g->T, C = c.n_embd, V = c.vocab_size, chunk = g->cls_chunk;
    float *mx = g->cls_stats, *sum = mx + chunk, *tgt = sum + chunk;
    for (int r0 = 0; r0 < N; r0 += chunk) {
        const int rows = std::min(chunk, N - r0);
        gpt_logits(g, r0, rows);
        vocab_parallel_max_target(g->logits, mx, tgt, g->targets + r0, rows, g->v0, V, g->Vpl, g->stream);
        comm_all_reduce_max(g->tp, mx, rows);
        comm_all_reduce_sum(g->tp, tgt, rows);
        vocab_parallel_sum_exp(g->logits, mx, sum, rows, g->v0, V, g->Vpl, g->stream);
        comm_all_reduce_sum(g->tp, sum, rows);
        vocab_parallel_loss_grad(g->logits, g->losses + r0, mx, sum, tgt, g->targets + r0, rows, g->v0, V, g->Vpl, scale,
                                 g->stream);
        if (!dx) continue;
        matmul_backward_input(&g->mm, g->stream, dx + (size_t)r0 * C, g->logits, g->P(g->head()), rows, C, g->Vpl);
        matmul_backward_weight(&g->mm, g->stream, g->head_grad, nullptr, g->logits, g->lnf_full + (size_t)r0 * C, rows, C,
                               g->Vpl);
    }
}

// Mean loss over the valid targets of the micro-batch after gpt_forward (no gradients); waits for the device.
static double gpt_loss(GPT* g) {
    const ModelConfig& c = g->cfg;
    const int N = g->B * g->T;
    if (g->n_tp > 1) classifier_tp(g, nullptr, 0.0f);
    for (int r0 = 0; r0 < N && g->n_tp == 1; r0 += g->cls_chunk) {
        const int rows = std::min(g->cls_chunk, N - r0);
        gpt_logits(g, r0, rows);
        fused_classifier_rows(g->logits, g->losses + r0, nullptr, g->targets + r0, rows, c.vocab_size, c.padded_vocab,
                              0.0f, g->stream);
    }
    cudaCheck(cudaMemsetAsync(g->loss_sum, 0, sizeof(double), g->stream));
    gpt_loss_accumulate(g, 1.0);
    return gpt_read_loss(g);
}

// ----------------------------------------------------------------------------------------------
// Backward

// Backward of (loss * loss_scale) of staged micro-batch `slot` through pipeline chunk `chunk` (-1: the whole model)
// after its forward, accumulated into the gradients (the LM head's into head_grad, fp32). The last chunk starts from
// the loss (its micro-batch staged with targets; loss_weight * its mean loss joins g->loss_sum), the others from the
// gradient of their output in dx [N,C] (received); the first chunk ends in the embeddings, the others leave the
// gradient of their input in dx (sent back). Only enqueues work: the embedding plan, built on the host by gpt_stage,
// goes up asynchronously. reduce (data parallel, the step's last micro-batch, one stage): each bucket is reduced
// over dp as soon as its gradient is complete.
static void gpt_backward_staged(GPT* g, int slot, double loss_scale, double loss_weight, bool reduce, int chunk = -1,
                                floatX* dx = nullptr) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const int B = g->B, T = g->T, N = B * T, Nl = g->sp ? N / g->n_tp : N, C = c.n_embd, hd = c.head_dim, H = g->Hl,
              KV = g->KVl, qd = H * hd, qkvd = (H + 2 * KV) * hd, F = g->Fl, F1 = c.mlp == MLP_SWIGLU ? 2 * F : F;
    const bool rms = c.norm == NORM_RMSNORM, swiglu = c.mlp == MLP_SWIGLU;
    int l0, l1;
    bool first, last;
    chunk_span(g, chunk, &l0, &l1, &first, &last);
    // the token rows of this micro-batch, grouped by token, for the embedding backward
    const MicroBatchStage& st = g->stage[slot];
    if (last && !st.has_targets) die("gpt_backward: the micro-batch was staged without targets");
    if (first)
        embedding_plan_upload(&g->plan, g->h_stage + (size_t)slot * stage_ints(g) + 2 * (size_t)N, st.plan_unique,
                              st.plan_max, N, g->stream);
    if (!last) {
        cudaCheck(cudaMemcpyAsync(g->dres, dx, (size_t)Nl * C * sizeof(floatX), cudaMemcpyDeviceToDevice, g->stream));
        params_prefetch(g, layer_bucket(g, l1 - 1));
    } else {
        // classifier: loss, dlogits in place, dln = d lnf, head_grad += dlogits^T lnf (tensor parallel: the vocabulary-
        // parallel classifier, and d lnf summed over tp: the head is column-parallel)
        const float scale = g->n_valid ? (float)(loss_scale / g->n_valid) : 0.0f;
        if (g->n_tp == 1) {
            fused_classifier(g->dln, g->head_grad, g->losses, nullptr, g->logits, g->lnf, g->P(g->head()), g->targets, N,
                             C, c.vocab_size, c.padded_vocab, g->cls_chunk, scale, &g->mm, g->stream);
        } else {
            floatX* part = tp_part(g, g->dln);
            classifier_tp(g, part, scale);
            tp_sum(g, part, g->dln);
        }
        gpt_loss_accumulate(g, loss_weight);
        cudaCheck(cudaMemsetAsync(g->dres, 0, (size_t)Nl * C * sizeof(floatX), g->stream));
        norm_backward(g->dres, g->G(t.lnf_w), g->G(t.lnf_b), g->norm_partial, g->dln, g->x_final, g->P(t.lnf_w),
                      g->lnf_mean, g->lnf_rstd, Nl, C, rms, g->stream);
        const int head_bucket = (int)g->buckets.size() - 1;
        params_done(g, head_bucket);
        if (c.tied) params_done(g, 0);
        if (reduce) grads_bucket_done(g, head_bucket);
        params_prefetch(g, layer_bucket(g, l1 - 1));
    }

    for (int l = l1 - 1; l >= l0; l--) {
        const ParamTable::Block& w = t.blocks[l];
        LayerActs& la = g->layers[l];
        const int b = layer_bucket(g, l);
        params_use(g, b);
        params_prefetch(g, l > l0 ? layer_bucket(g, l - 1) : -1);
        if (g->recompute == RECOMPUTE_FULL) {
            layer_forward(g, l, nullptr);  // every buffer of the layer again, from la.x
        } else if (g->recompute == RECOMPUTE_SELECTIVE) {
            attention_fwd(la.atty, la.lse, la.qkv, B, T, H, KV, hd, g->stream);
            mlp_act_forward(g, la);
        }
        // dres = d(layer output) = d(x_mid + fc2(act(fc1(ln2(x_mid))))). Tensor parallel: fc2 row-parallel (its dout
        // gathered under SP), fc1 column-parallel (its input gradient summed over tp)
        if (g->fp8.recipe != FP8_NONE && g->L.zero >= 3) fp8_cast_weights(g, l, true);  // the transposes, after the gather
        floatX* part = tp_part(g, g->dln);
        tp_gather(g, g->dres, g->dres_full);
        linear_backward(g, l, FP8_FC2, g->dact, row_bias_grad(g, g->G(w.fc2_b)), g->dres_full, la.act, N, F, C);
        if (swiglu) swiglu_backward(g->dfc1, g->dact, la.fc1, N, F, g->stream);
        else gelu_backward(g->dfc1, g->dact, la.fc1, (size_t)N * F, g->stream);
        if (g->recompute != RECOMPUTE_FULL) tp_gather(g, la.ln2, la.ln2_full);  // SP: the one copy, this layer's again
        linear_backward(g, l, FP8_FC1, part, g->G(w.fc1_b), g->dfc1, la.ln2_full, N, C, F1);
        tp_sum(g, part, g->dln);
        norm_backward(g->dres, g->G(w.ln2_w), g->G(w.ln2_b), g->norm_partial, g->dln, la.x_mid, g->P(w.ln2_w), la.ln2_mean,
                      la.ln2_rstd, Nl, C, rms, g->stream);
        // dres = d(x_mid) = d(x + attn_out(attention(qkv(ln1(x))))): attn_out row-parallel, qkv column-parallel
        tp_gather(g, g->dres, g->dres_full);
        linear_backward(g, l, FP8_ATTN_OUT, g->datty, row_bias_grad(g, g->G(w.attn_out_b)), g->dres_full, la.atty, N, qd, C);
        attention_bwd(g->dqkv, g->dvec, g->datty, la.atty, la.qkv, la.lse, B, T, H, KV, hd, g->stream);
        if (c.pos == POS_ROPE) rope_rotate_inplace(g->dqkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, -1, g->stream);
        if (g->recompute != RECOMPUTE_FULL) tp_gather(g, la.ln1, la.ln1_full);
        linear_backward(g, l, FP8_QKV, part, g->G(w.qkv_b), g->dqkv, la.ln1_full, N, C, qkvd);
        tp_sum(g, part, g->dln);
        norm_backward(g->dres, g->G(w.ln1_w), g->G(w.ln1_b), g->norm_partial, g->dln, la.x, g->P(w.ln1_w), la.ln1_mean,
                      la.ln1_rstd, Nl, C, rms, g->stream);
        params_done(g, b);
        if (reduce) grads_bucket_done(g, b);
    }
    if (!first) {  // d(x[l0]), sent back to the previous chunk's stage
        cudaCheck(cudaMemcpyAsync(dx, g->dres, (size_t)Nl * C * sizeof(floatX), cudaMemcpyDeviceToDevice, g->stream));
        return;
    }
    // dres = d(x[0]) = d(wte[token] + wpe[t]): this rank's vocabulary rows, from every position (gathered under SP)
    tp_gather(g, g->dres, g->dres_full);
    embedding_backward(g->G(t.wte), row_bias_grad(g, g->G(t.wpe)), g->dres_full, g->plan, N, T, C, g->stream, g->v0,
                       g->Vpl);
    if (reduce) grads_bucket_done(g, 0);
}

#ifdef TESTING
// Backward of one micro-batch after gpt_forward(inputs, targets), for test_gpt.cu's checks of a single
// micro-batch: uses the plan that forward staged, waits for the device and reads the micro-batch loss into
// g->loss. (Training goes through train_step.)
static void gpt_backward(GPT* g, const int32_t* inputs, double loss_scale) {
    const size_t N = (size_t)g->B * g->T;
    if (g->stage_slots < 1 || !g->stage[0].has_targets || memcmp(inputs, g->h_stage, N * sizeof(int32_t)) != 0)
        die("gpt_backward: call gpt_forward with these inputs and their targets first");
    cudaCheck(cudaMemsetAsync(g->loss_sum, 0, sizeof(double), g->stream));
    gpt_backward_staged(g, 0, loss_scale, 1.0, false);
    gpt_read_loss(g);
}
#endif

// ----------------------------------------------------------------------------------------------
// The optimizer step

static void gpt_zero_grad(GPT* g) {
    cudaCheck(cudaMemsetAsync(g->grads, 0, g->table.total * sizeof(floatX), g->stream));
    if (g->has_head) cudaCheck(cudaMemsetAsync(g->head_grad, 0, (size_t)g->Vpl * g->cfg.n_embd * 4, g->stream));
}

// The fp32 LM-head gradient of the step joins the floatX gradients (once per step, after the last micro-batch).
static void gpt_fold_head_grad(GPT* g) {
    const size_t hn = (size_t)g->Vpl * g->cfg.n_embd;
    add_f32_into_floatX_kernel<<<(unsigned)ceil_div(hn, 256), 256, 0, g->stream>>>(g->G(g->head()), g->head_grad, hn);
    cudaCheck(cudaGetLastError());
}

// The step's pre-clip global gradient norm and clip coefficient into g->gnorm[GLOBAL_NORM_BLOCKS + 0, 1]. One GPU: the
// head gradient first joins the others. Data parallel: once dp.stream has reduced every bucket, the norm over the
// ranges this rank counts (fp64, summed over dp). Only enqueues.
static void gpt_grad_norm(GPT* g, const TrainConfig& tc) {
    float* out = g->gnorm + GLOBAL_NORM_BLOCKS;  // [norm, clip coefficient]
    if (!g->parallel) {
        gpt_fold_head_grad(g);
        global_norm(out, g->gnorm, g->grads, g->table.total, (float)tc.grad_clip, g->stream);
        return;
    }
    cudaCheck(cudaEventRecord(g->ev_comm, g->dp.stream));
    cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0));
    const float* grads = g->L.zero >= 2 ? g->grad_shard : g->grad32;
    double* sumsq = g->norm64 + GLOBAL_NORM_BLOCKS;
    norm_ranges_partial_kernel<<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, g->stream>>>(
        g->norm64, grads, g->norm_ranges, (int)(g->norm_ranges_host.size() / 2));
    cudaCheck(cudaGetLastError());
    sum_partials_kernel<<<1, 1, 0, g->stream>>>(sumsq, g->norm64, GLOBAL_NORM_BLOCKS);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->world.stream, g->ev_compute, 0));
    // over every rank: dp shards, tp slices (disjoint; replicated tensors count on tp rank 0 only) and stages
    comm_all_reduce_sum(g->world, sumsq, 1);
    cudaCheck(cudaEventRecord(g->ev_comm, g->world.stream));
    cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_comm, 0));
    clip_from_sumsq_kernel<<<1, 1, 0, g->stream>>>(out, sumsq, tc.grad_clip);
    cudaCheck(cudaGetLastError());
}

// AdamW for 1-based update t with gpt_grad_norm's clip coefficient (one GPU: on every weight; data parallel: on the
// fp32 reduced gradients of what this rank updates), then the weights: all-gathered (ZeRO 1/2) or left in the shard
// for the next gathers (ZeRO 3). Only enqueues.
static void gpt_update(GPT* g, int t, double lr, const TrainConfig& tc) {
    const float* clip = g->gnorm + GLOBAL_NORM_BLOCKS + 1;
    AdamWHyper h{(float)lr, (float)tc.beta1, (float)tc.beta2, (float)tc.eps};
    if (!g->parallel) {
        if (g->bf16_moments) adamw_update(g->adam_bf16, h, t, clip, g->stream);
        else adamw_update(g->adam_f32, h, t, clip, g->stream);
        return;
    }
    if (g->bf16_moments) adamw_update(g->adam_bf16_g32, h, t, clip, g->stream);
    else adamw_update(g->adam_f32_g32, h, t, clip, g->stream);
    if (g->L.zero == 1 || g->L.zero == 2) {
        params_allgather(g);
    } else if (g->L.zero >= 3) {  // the next gathers read the updated shard
        for (int& held : g->gather_holds) held = -1;
        cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
        cudaCheck(cudaStreamWaitEvent(g->dp.stream, g->ev_compute, 0));
    }
}

// ----------------------------------------------------------------------------------------------
// Pipeline parallel: this stage's list of steps (llmc/parallel/pp_schedule.h) run by pp_run (llmc/parallel/pp_exec.h). Each (micro-batch,
// chunk) in flight holds an activation slot s: acts[s * slot_layers ...] for the chunk's layers (its input received
// into the first one's x) and pp_io's two rows [N,C], the chunk's output and its output's gradient.

static size_t pp_io_rows(const GPT* g) { return (size_t)g->B * g->T / (g->sp ? g->n_tp : 1); }  // Nl
static floatX* pp_out(const GPT* g, int s) { return g->pp_io + (size_t)s * 2 * pp_io_rows(g) * g->cfg.n_embd; }
static floatX* pp_dout(const GPT* g, int s) { return pp_out(g, s) + pp_io_rows(g) * g->cfg.n_embd; }

// The layer code reads slot s's activations for the layers of `chunk`.
static void pp_bind(GPT* g, int s, int chunk) {
    int l0, l1;
    bool first, last;
    chunk_span(g, chunk, &l0, &l1, &first, &last);
    for (int l = l0; l < l1; l++) g->layers[l] = g->acts[(size_t)s * g->slot_layers + (l - l0)];
}

// One run of sends and receives between two compute steps (pp_steps), live: (micro-batch, chunk) -> slot. They are
// posted as one NCCL group on pp.stream after the compute stream's work so far, and the compute stream waits for the
// group. A group's sends cannot block its receives, which is what keeps the schedule free of deadlock under NCCL's
// blocking, untagged sends (llmc/parallel/pp_schedule.h; tests/test_parallel.cpp simulates it).
static void pp_exchange(GPT* g, const PpMsg* msgs, int n, const std::map<std::pair<int, int>, int>& live) {
    const size_t NC = pp_io_rows(g) * g->cfg.n_embd;  // [Nl,C]: this rank's rows under SP
    cudaCheck(cudaEventRecord(g->ev_compute, g->stream));
    cudaCheck(cudaStreamWaitEvent(g->pp.stream, g->ev_compute, 0));
    comm_group_start();
    for (int i = 0; i < n; i++) {
        const PpMsg& m = msgs[i];
        const int s = live.at({m.mb, m.chunk});
        CommRequest req;  // finished with the group: the compute stream waits for pp.stream below
        if (m.kind == PP_RECV_ACT) comm_recv(g->pp, g->acts[(size_t)s * g->slot_layers].x, NC, m.peer, m.tag);
        else if (m.kind == PP_SEND_ACT) comm_send(g->pp, (const floatX*)pp_out(g, s), NC, m.peer, m.tag, &req);
        else if (m.kind == PP_RECV_GRAD) comm_recv(g->pp, pp_dout(g, s), NC, m.peer, m.tag);
        else comm_send(g->pp, (const floatX*)pp_dout(g, s), NC, m.peer, m.tag, &req);
    }
    comm_group_end();
    cudaCheck(cudaEventRecord(g->ev_pp, g->pp.stream));
    cudaCheck(cudaStreamWaitEvent(g->stream, g->ev_pp, 0));
}

// This stage's schedule over the n_mb micro-batches staged in slots 0 .. n_mb-1: training (backward, each
// micro-batch's loss scaled by `scale`, the first one's also by mb0 (llmc/run/guard.h's test hooks), the gradients
// accumulated, not reduced) or forward only; after the forward of the last chunk of a micro-batch, head() (validation:
// its loss). Only enqueues work, but for the groups' waits.
static void pp_pipeline(GPT* g, int n_mb, bool backward, double scale, const std::function<void()>& head,
                        TestCorrupt mb0 = {}) {
    const Layout& L = g->L;
    const int last = L.n_chunks() - 1;
    std::map<std::pair<int, int>, int> live;  // (micro-batch, chunk) -> activation slot
    std::vector<int> free_slots;
    for (int s = g->n_slots - 1; s >= 0; s--) free_slots.push_back(s);
    PpCallbacks cb;
    cb.acquire = [&](int mb, int chunk) {
        if (free_slots.empty())
            die("pipeline stage %d: more than the %d (micro-batch, chunk) activation slots planned in flight",
                L.topo.pp_rank, g->n_slots);
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
        gpt_forward_staged(g, mb, chunk, pp_out(g, s));
        if (chunk != last) return;
        g->head_mb = mb;
        if (head) head();
    };
    cb.backward = [&](int mb, int chunk) {
        const int s = live.at({mb, chunk});
        // the schedule runs a micro-batch's last backward right after its last forward (the head's scratch is one)
        if (chunk == last && g->head_mb != mb)
            die("pipeline stage %d: backward of micro-batch %d, but the head's scratch holds micro-batch %d",
                L.topo.pp_rank, mb, g->head_mb);
        pp_bind(g, s, chunk);
        gpt_backward_staged(g, mb, scale * (mb == 0 ? mb0.grad : 1.0), scale * (mb == 0 ? mb0.loss : 1.0), false, chunk,
                            pp_dout(g, s));
    };
    cb.exchange = [&](const PpMsg* msgs, int n) { pp_exchange(g, msgs, n, live); };
    const int pp = L.topo.pp, stage = L.topo.pp_rank;
    pp_run(backward ? pp_schedule(pp, L.vpp, n_mb, stage) : pp_forward_schedule(pp, L.vpp, n_mb, stage), L.n_chunks(),
           backward, cb);
}

// One optimizer step over the micro-batches inputs/targets [accum][B*T] (data parallel: this rank's share of the
// accum * dp micro-batches; a pipeline stage runs its schedule over all of them, then reduces every bucket). The
// step's loss (the mean micro-batch loss over every rank) and pre-clip gradient norm come to the host before the
// update, so that the numerics guard (llmc/run/guard.h) can skip it: that read is the step's one host synchronisation,
// and the update is enqueued after it. The first micro-batch's loss and loss scale: mb0 (llmc/run/guard.h's test hooks;
// 1 and 1 otherwise). Returns the loss; *norm_out the norm, *verdict the guard's.
static double train_step(GPT* g, const std::vector<std::vector<int32_t>>& inputs,
                         const std::vector<std::vector<int32_t>>& targets, int step, const TrainConfig& tc, double lr,
                         const TrainState& st, TestCorrupt mb0, double* norm_out, GuardVerdict* verdict) {
    const int accum = (int)inputs.size();
    const double scale = 1.0 / ((double)accum * g->L.topo.dp);  // each micro-batch's share of the step's mean
    gpt_stage_reserve(g, accum);  // the previous step's synchronisation below has drained every copy
    gpt_zero_grad(g);
    cudaCheck(cudaMemsetAsync(g->loss_sum, 0, sizeof(double), g->stream));
    // The micro-batch loop only enqueues work: micro-batch a is staged on the host (tokens, targets, the
    // embedding plan, into its own pinned slot) while the device still runs a - 1; its uploads are
    // asynchronous copies from pinned memory and its loss is summed on the device.
    if (g->L.topo.pp > 1) {
        for (int a = 0; a < accum; a++) gpt_stage(g, a, inputs[a].data(), targets[a].data());
        pp_pipeline(g, accum, true, scale, nullptr, mb0);
        for (int b = (int)g->buckets.size() - 1; b >= 0; b--) grads_bucket_done(g, b);  // head, layers, embeddings
    } else {
        for (int a = 0; a < accum; a++) {
            gpt_stage(g, a, inputs[a].data(), targets[a].data());
            gpt_forward_staged(g, a);
            gpt_backward_staged(g, a, scale * (a == 0 ? mb0.grad : 1.0), scale * (a == 0 ? mb0.loss : 1.0),
                                g->parallel && a == accum - 1);
        }
    }
    gpt_grad_norm(g, tc);
    cudaCheck(cudaMemcpyAsync(&g->h_readback->norm, g->gnorm + GLOBAL_NORM_BLOCKS, sizeof(float), cudaMemcpyDeviceToHost,
                              g->stream));
    double loss = gpt_read_loss(g);  // waits for the stream
    if (g->parallel) {  // the last stage's losses, one tp rank each, summed over dp
        if (g->L.topo.pp_rank != g->L.topo.pp - 1 || g->L.topo.tp_rank != 0) loss = 0;
        comm_host_sum(g->world, &loss, 1);
    }
    *norm_out = g->h_readback->norm;
    *verdict = guard_verdict(tc, st, loss, *norm_out);  // the same on every rank: the loss and norm are summed over dp
    const bool update = *verdict == GUARD_UPDATE;
    if (update) gpt_update(g, guard_adam_step(st, step), lr, tc);
    fp8_step_end(g, update);             // --fp8 delayed: the next step's scales (a skipped step drops its amaxes)
    if (update) fp8_weights_update(g);  // --fp8: the updated weights' scales and fp8 copies
    return loss;
}

// ----------------------------------------------------------------------------------------------
// Sampling: the forward over a window in row 0 of the batch (the other rows hold token 0; causal
// attention keeps them apart), the logits of the last prompt position, sampled on the host.

static std::vector<int32_t> generate(GPT* g, std::vector<int32_t> prompt, int n, uint64_t* rng) {
    const ModelConfig& c = g->cfg;
    const int T = g->T;
    std::vector<int32_t> window((size_t)g->B * T, 0);
    std::vector<floatX> row(c.padded_vocab);
    std::vector<float> logits(c.vocab_size);
    for (int i = 0; i < n; i++) {
        const int len = std::min((int)prompt.size(), T);
        std::copy(prompt.end() - len, prompt.end(), window.begin());
        gpt_forward(g, window.data(), nullptr);
        gpt_logits(g, len - 1, 1);
        cudaCheck(cudaMemcpyAsync(row.data(), g->logits, row.size() * sizeof(floatX), cudaMemcpyDeviceToHost, g->stream));
        cudaCheck(cudaStreamSynchronize(g->stream));
        for (int v = 0; v < c.vocab_size; v++) logits[v] = to_float(row[v]);
        prompt.push_back(sample_from_logits(logits.data(), c.vocab_size, rng));
    }
    return prompt;
}

// ----------------------------------------------------------------------------------------------
// The run


// Dense bf16 peak of the device from its name (docs/design.md section 7); 0 when unknown, and in the fp32 test
// build (no MFU printed).
static double device_peak_flops(const char* name) {
    if (std::string(PRECISION_NAME) == "fp32") return 0.0;
    std::string n = name;
    if (n.find("H100") != std::string::npos || n.find("H200") != std::string::npos || n.find("H800") != std::string::npos)
        return 989e12;
    if (n.find("A100") != std::string::npos || n.find("A800") != std::string::npos) return 312e12;
    return 0.0;
}

// Training FLOPs per token the GPU executes: the model FLOPs (llmc/flops.h) plus the recomputed forward
// work: the layers' matmuls (2 per weight) and attention (4 * qd * T per layer) under full, attention
// under selective (its share of 12 * L * qd * T in the model FLOPs is the forward's third).
static double hardware_flops_per_token(const ModelConfig& c, int T, Recompute r) {
    const double attn_fwd = 4.0 * c.n_layer * (double)cfg_q_dim(c) * T;
    const double layer_mm = 2.0 * (double)(matmul_weight_count(c) - (int64_t)c.vocab_size * c.n_embd);
    const double extra = r == RECOMPUTE_FULL ? layer_mm + attn_fwd : r == RECOMPUTE_SELECTIVE ? attn_fwd : 0.0;
    return model_flops_per_token(c, T) + extra;
}

// Device memory in use now (every process), for the peak-memory figure.
static double device_used_bytes() {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return (double)(total_b - free_b);
}

#ifndef TESTING
// A bad parallel layout stops every rank before any work; rank 0 says what is wrong.
static void layout_error(const Comm& world, const std::string& msg) {
    if (world.rank == 0) fprintf(stderr, "error: %s\n", msg.c_str());
    comm_finalize();
    exit(1);
}

// The layout planner (llmc/parallel/planner.h) over what this trainer runs: dp and ZeRO 0-3 (tp = pp = 1), --recompute none,
// selective or full, every -b dividing the per-rank batch; the bytes are cuda_plan_bytes'. --plan: prints the plan
// (with no layout flag and --gpu-mem, of the planner's choice) and exits 0 on the host, touching no device, rank 0
// printing. Otherwise, with no layout flag, no --recompute and a memory to fit (tc->gpu_mem_gib: --gpu-mem, or the
// free device memory main measured), writes the fastest fitting layout into *tc and *opt and prints why. A layout
// that cannot run, or none fitting, stops with the message naming the flag, exit 1.
static void plan_or_pick(TrainConfig* tc, CudaOptions* opt, const ModelConfig& mc, int n_ranks, int rank) {
    if (rank == 0 && tc->plan)
        printf("train_gpt plans the layouts it runs: data, tensor and pipeline parallel with ZeRO 0-3, --sp, --vpp, "
               "--recompute, -b; with no layout flag it picks among them (vpp 1)\n");
    int recompute = (int)opt->recompute;
    bool done = false;
    const std::string err = plan_apply(mc, tc, &recompute, n_ranks, !opt->recompute_given, {0, 1, 2}, PLAN_COMM,
                                       cuda_plan_bytes_fn(opt->bf16_moments, opt->fp8), rank == 0, &done);
    if (!err.empty()) {
        if (rank == 0) fprintf(stderr, "error: %s\n", err.c_str());
        exit(1);
    }
    if (done) exit(0);
    opt->recompute = (Recompute)recompute;
}

int main(int argc, char** argv) {
    CudaOptions opt;
    std::vector<char*> rest = parse_cuda_flags(argc, argv, &opt);
    ModelConfig mc;
    TrainConfig tc;
    parse_args((int)rest.size(), rest.data(), &mc, &tc);
    config_finalize(mc, tc.tp);  // the vocabulary padded to a multiple of 128 * tp
    comm_set_timeout(tc.comm_timeout);  // a collective stuck longer than this ends every rank (--comm-timeout)
    stop_signals_install();             // SIGTERM / SIGINT: finish the step, checkpoint, exit 0 (llmc/run/signals.h)

    // host-only modes: no GPU needed
    if (!opt.print_config.empty()) {
        write_text(opt.print_config, config_to_json(mc) + "\n");
        printf("wrote the config of %s to %s\n", mc.name.c_str(), opt.print_config.c_str());
        return 0;
    }
    if (!tc.export_init.empty()) {
        ParamTable t = build_param_table(mc);
        std::vector<float> p(t.total);
        print_init_time((int64_t)t.total, params_init_full(mc, t, p.data(), tc.seed));
        if (!tc.init_from.empty()) hf_import(tc.init_from, mc, t, p.data());
        hf_export(tc.export_init, mc, t, p.data());
        printf("wrote initial weights of %s (%lld params) to %s\n", mc.name.c_str(), (long long)param_count(t),
               tc.export_init.c_str());
        return 0;
    }
    check_shapes(mc, tc.B, tc.T);
    check_tp_shapes(mc, tc.tp, opt.fp8.recipe != FP8_NONE);
    if (tc.plan) plan_or_pick(&tc, &opt, mc, launch_info().world, launch_info().rank);  // exits
    if (opt.estimate_gib > 0) {  // per rank of --dp x --tp x --pp ranks (default 1): the first stage's
        const int B = tc.B, T = tc.T;
        const int dp = std::max(1, tc.dp), world = dp * tc.tp * tc.pp;
        if (tc.total_batch == 0) tc.total_batch = (long)B * T * dp;
        Layout L;
        const std::string err = layout_make(world, 0, mc, tc, tc.total_batch, &L);
        if (!err.empty()) die("%s", err.c_str());
        const int n_mb = (int)(tc.total_batch / ((long)B * T * dp));
        const MemoryEstimate est = estimate_memory(mc, B, T, opt.recompute, opt.bf16_moments, L, n_mb, opt.fp8);
        const double avail = opt.estimate_gib * 1024.0 * 1024.0 * 1024.0;
        print_memory_estimate(est, opt.recompute, L, avail);
        require_memory(est, opt.recompute, opt.bf16_moments, L, avail);
        printf("fits\n");
        return 0;
    }

    // Every path, checked before the device is looked for, so that a bad one stops the run at once with the flag's
    // message, GPU or not: the tokenizer that decodes samples (--tokenizer; none: token ids; not opened when no
    // sample is drawn: -g 0, or several ranks, which do not sample), -o and --resume (checkpoint_resolve), --init-from,
    // --save-safetensors, and the data (-i, -j; a .txt file without -j is split 90/10 into train and validation).
    Sampler sampler;
    sampler_open(&sampler, tc.tokenizer, mc.vocab_size, launch_info().world > 1 ? 0 : tc.gen_tokens);
    const std::string resume_dir = checkpoint_resolve(tc.resume, tc.out_dir);
    struct stat st;
    if (!resume_dir.empty()) {  // its files are regular and not empty (checkpoint_load checks their hashes later)
        close(open_input(resume_dir + "/DONE", nullptr, true, &st));
        for (const char* f : kCkptFiles) close(open_input(resume_dir + "/" + f, nullptr, true, &st));
    }
    if (!tc.init_from.empty()) close(open_input(tc.init_from, "--init-from", true, &st));
    if (!tc.save_safetensors.empty()) check_output_file(tc.save_safetensors, "--save-safetensors");
    DataLoader train, val;
    const bool have_val = loader_open_train_val(&train, &val, tc.train_data, tc.val_data, tc.T, mc.vocab_size);

    // the ranks (one: no NCCL communicator), this rank's GPU
    Comm world = comm_init(&argc, &argv);
    const bool rank0 = world.rank == 0;
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 8)
        die("%s has compute capability %d.%d; train_gpt needs 8.0 or newer (bf16 tensor cores, cp.async)", prop.name,
            prop.major, prop.minor);
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));

    // no layout flag on several ranks (or with --gpu-mem): the planner picks the fastest layout that fits the
    // smallest free memory of the ranks (--gpu-mem when given); every rank computes the same choice
    if (!tc.layout_given && !opt.recompute_given && world.size > 1 && tc.gpu_mem_gib <= 0) {
        double neg_free = -(double)free_b;
        comm_host_max(world, &neg_free, 1);
        tc.gpu_mem_gib = -neg_free / 1073741824.0;
        if (rank0)
            printf("no layout flag on %d ranks: planning for the smallest free device memory of the ranks, %.2f GiB "
                   "(--gpu-mem sets it; any of --dp --zero -b --recompute fixes the layout)\n", world.size,
                   tc.gpu_mem_gib);
    }
    plan_or_pick(&tc, &opt, mc, world.size, world.rank);
    config_finalize(mc, tc.tp);  // the planner may have picked tensor parallelism: the vocabulary padded for it
    check_tp_shapes(mc, tc.tp, opt.fp8.recipe != FP8_NONE);
    if (opt.fp8.recipe != FP8_NONE) fp8_require_device();  // compute capability 8.9+, before any allocation

    // the layout and the dp group
    const int B = tc.B, T = tc.T;
    if (tc.total_batch == 0) tc.total_batch = (long)B * T * (world.size / std::max(1, tc.tp * tc.pp));  // B*T per dp rank
    Layout layout;
    const std::string layout_err = layout_make(world.size, world.rank, mc, tc, tc.total_batch, &layout);
    if (!layout_err.empty()) layout_error(world, layout_err);
    GptComms comms;
    comms.world = world;
    comms.dp = comm_group(world, layout.topo.dp_group, "dp");
    comms.tp = comm_group(world, layout.topo.tp_group, "tp");
    comms.pp = comm_group(world, layout.topo.pp_group, "pp");
    comms.emb = comm_group(world, layout_emb_members(layout), "emb");
    const int dp = layout.topo.dp;
    const int accum = (int)(tc.total_batch / ((long)B * T * dp));
    const MemoryEstimate est = estimate_memory(mc, B, T, opt.recompute, opt.bf16_moments, layout, accum, opt.fp8);

    if (rank0) {
        printf("device: %s (compute capability %d.%d, %.1f GiB, %.1f GiB free)\n", prop.name, prop.major, prop.minor,
               total_b / 1073741824.0, free_b / 1073741824.0);
        print_memory_estimate(est, opt.recompute, layout, (double)total_b);
    }
    require_memory(est, opt.recompute, opt.bf16_moments, layout, (double)free_b);

    GPT g;
    gpt_build(&g, mc, B, T, opt.recompute, opt.bf16_moments, (float)tc.weight_decay, &layout, &comms, accum, opt.fp8);
    const ParamTable table = build_param_table(mc);  // the whole model: files are read and written per tensor
    TrainState state;
    state.rng = tc.seed ^ 0x5DEECE66Dull;
    {
        // every rank makes the whole model (seeded init, --init-from, a checkpoint of any layout) and keeps its part
        std::vector<float> p(table.total), m, v;
        Fp8State fp8_state;
        const double init_s = params_init_full(mc, table, p.data(), tc.seed);
        if (rank0) print_init_time((int64_t)table.total, init_s);
        if (!tc.init_from.empty()) hf_import(tc.init_from, mc, table, p.data());
        if (!resume_dir.empty()) {
            m.assign(table.total, 0.0f);
            v.assign(table.total, 0.0f);
            checkpoint_load(resume_dir, mc, table, p.data(), m.data(), v.data(), &state, &fp8_state);
            if (rank0) printf("resumed from %s at step %d\n", resume_dir.c_str(), state.step);
        }
        if (m.empty()) {
            gpt_set_weights(&g, part_of_full(&g, table, p.data()).data(), nullptr, nullptr);
        } else {
            gpt_set_weights(&g, part_of_full(&g, table, p.data()).data(), part_of_full(&g, table, m.data()).data(),
                            part_of_full(&g, table, v.data()).data());
        }
        fp8_weights_update(&g);  // --fp8: the weights' scales and fp8 copies
        if (opt.fp8.recipe == FP8_DELAYED && !resume_dir.empty()) {
            const bool taken = fp8_state_set(&g, fp8_state);
            if (rank0 && taken)
                printf("fp8: delayed scaling goes on from the checkpoint's state (history %d, next row %d)\n",
                       fp8_state.history, fp8_state.pos);
            else if (rank0)
                printf("fp8: the checkpoint holds no delayed-scaling state of history %d: the scales start at 1\n",
                       opt.fp8.history);
        }
    }
    // every rank gathers the shards, the stages' parts reach rank 0, which writes the whole tensors
    auto save_checkpoint = [&]() {
        std::vector<float> p, m, v;
        gpt_get_full(&g, table, &p, &m, &v);
        const Fp8State fp8_state = fp8_state_gather(&g);  // --fp8: the ranks agree; delayed: its state, whole-model
        if (rank0)
            checkpoint_save(tc.out_dir, mc, table, p.data(), m.data(), v.data(), state, tc.keep_last, &fp8_state);
        comm_barrier(world);
    };
    if (rank0 && !tc.out_dir.empty()) {
        std::error_code ec;
        fs::create_directories(tc.out_dir, ec);
        if (ec) die("cannot create output directory '%s' (flag -o): %s", tc.out_dir.c_str(), ec.message().c_str());
    }

    const int64_t n_params = param_count(table);
    const double hw_flops = hardware_flops_per_token(mc, T, opt.recompute);
    if (rank0) {
        print_config_table(mc, n_params, B, T, accum, dp, tc.steps, tc.lr, lr_schedule_name(tc.schedule), train.desc);
        printf("%s weights and activations, fp32 master weights, %s AdamW moments, --recompute %s; allocated %.2f GiB\n",
               PRECISION_NAME, opt.bf16_moments ? "bf16" : "fp32", recompute_name(opt.recompute), g.allocated / 1073741824.0);
        if (opt.fp8.recipe == FP8_DELAYED)
            printf("fp8 GEMMs in the layers (E4M3 inputs and weights, E5M2 output gradients): delayed scaling, amax "
                   "history %d, margin %d; MFU below is against the bf16 peak\n", opt.fp8.history, opt.fp8.margin);
        else if (opt.fp8.recipe == FP8_CURRENT)
            printf("fp8 GEMMs in the layers (E4M3 inputs and weights, E5M2 output gradients): current scaling, margin %d; "
                   "MFU below is against the bf16 peak\n", opt.fp8.margin);
        if (world.size > 1 || layout.zero > 0)
            printf("ranks: %d = pp %d x dp %d x tp %d%s, vpp %d, ZeRO %d; %d micro-batch chunks in flight at most on this "
                   "stage; gradients reduced in fp32 over dp in %d buckets\n", world.size, layout.topo.pp, dp,
                   layout.topo.tp, layout.sp ? " (sp)" : "", layout.vpp, layout.zero, g.n_slots, (int)g.buckets.size());
        printf("hardware FLOPs per token %.4g (model %.4g + recompute %.1f%%); MFU below counts model FLOPs\n", hw_flops,
               model_flops_per_token(mc, T), 100.0 * (hw_flops / model_flops_per_token(mc, T) - 1.0));
    }
    Logger lg;
    logger_open(&lg, rank0 ? tc.out_dir : "", !resume_dir.empty());
    lg.tokens_per_step = (double)tc.total_batch;
    lg.flops_per_token = model_flops_per_token(mc, T);
    lg.peak_flops = device_peak_flops(prop.name);
    lg.n_devices = world.size;  // throughput is reported per GPU
    lg.formats = tc.log_formats;
    lg.seq_len = T;
    lg.mem_limit_bytes = tc.gpu_mem_gib > 0 ? tc.gpu_mem_gib * 1073741824.0 : (double)prop.totalGlobalMem;
    if (rank0) logger_start(&lg);

    std::vector<std::vector<int32_t>> inputs(accum, std::vector<int32_t>((size_t)B * T)), targets = inputs;
    std::vector<int32_t> val_in((size_t)B * T), val_tg((size_t)B * T);
    // validation: every rank runs every batch (ZeRO 3 gathers the weights together); rank 0's mean counts. A pipeline
    // runs the batches through its stages as micro-batches; the last stage's mean reaches every rank.
    auto evaluate = [&]() -> double {
        double s = 0;
        if (layout.topo.pp > 1) {
            cudaCheck(cudaStreamSynchronize(g.stream));  // no queued copy reads the staging slots rewritten here
            gpt_stage_reserve(&g, tc.val_batches);
            for (int i = 0; i < tc.val_batches; i++) {
                loader_batch(&val, (uint64_t)i * B, B, val_in.data(), val_tg.data());
                gpt_stage(&g, i, val_in.data(), val_tg.data());
            }
            pp_pipeline(&g, tc.val_batches, false, 0.0, [&]() { s += gpt_loss(&g); });
            fp8_step_end(&g, false);  // --fp8 delayed: validation's amaxes are no part of the next step's
            if (layout.topo.pp_rank != layout.topo.pp - 1 || layout.topo.dp_rank != 0 || layout.topo.tp_rank != 0) s = 0;
            comm_host_sum(world, &s, 1);
            return s / tc.val_batches;
        }
        for (int i = 0; i < tc.val_batches; i++) {
            loader_batch(&val, (uint64_t)i * B, B, val_in.data(), val_tg.data());
            gpt_forward(&g, val_in.data(), val_tg.data());
            s += gpt_loss(&g);
        }
        fp8_step_end(&g, false);
        return s / tc.val_batches;
    };
    auto print_sample = [&]() {
        if (tc.gen_tokens <= 0) return;
        if (world.size > 1) {
            if (rank0) printf("no sample: sampling runs on one GPU (resume the checkpoint with one rank to sample)\n");
            return;
        }
        sampler_print(&sampler, generate(&g, {sampler_start_token(&sampler)}, tc.gen_tokens, &state.rng));
        fp8_step_end(&g, false);  // nor sampling's
    };

    double loss = 0, val_loss = -1, peak_used = 0;
    if (have_val && state.step == 0 && tc.val_every > 0) {
        val_loss = evaluate();
        if (rank0) log_val(&lg, 0, val_loss);
    }
    const int first_step = state.step;
    for (int step = state.step; step < tc.steps; step++) {
        double t0 = now_ms();
        // dp rank r's micro-batch a reads samples first + (a*dp + r)*B ..: the samples of the one-process run
        // with accum*dp micro-batches
        for (int a = 0; a < accum; a++)
            loader_batch(&train, state.train_sample + (uint64_t)(a * dp + layout.topo.dp_rank) * B, B, inputs[a].data(),
                         targets[a].data());
        state.train_sample += (uint64_t)B * accum * dp;
        double lr = lr_at(step, tc.steps, tc.warmup, tc.lr, tc.min_lr, tc.schedule, tc.decay_frac);
        double norm = 0;
        const TestCorrupt mb0 = guard_test_corrupt(step + 1, mc.vocab_size, &targets);  // tests only (llmc/run/guard.h)
        GuardVerdict verdict;
        loss = train_step(&g, inputs, targets, step, tc, lr, state, mb0, &norm, &verdict);
        state.step = step + 1;
        if (rank0) log_step(&lg, step + 1, tc.steps, loss, lr, norm, now_ms() - t0, verdict);
        std::string why;
        if (!guard_record(tc, &state, verdict, loss, step + 1, &why)) {
            if (rank0) log_failed(&lg, mc);
            die("%s", why.c_str());
        }
        if (step == first_step) {  // every rank's bytes by kind: allocated, beside the estimate
            const std::vector<MemoryRow> rows = memory_rows_gather(world, world.rank, memory_row(&g, est, layout));
            if (rank0 && world.size > 1) print_memory_rows(rows.data(), world.size);  // allocated (estimate)
            if (rank0) log_memory(&lg, rows.data(), world.size, step + 1);
        }
        const double used = device_used_bytes();
        if (used > peak_used || step == first_step) {
            peak_used = std::max(peak_used, used);
            if (step == first_step && rank0)
                printf("memory: %.2f GiB allocated by train_gpt (estimate %.2f, %.2f with the reserve), %.2f GiB in "
                       "use on the device\n", g.allocated / 1073741824.0, est.allocations() / 1073741824.0,
                       est.total() / 1073741824.0, used / 1073741824.0);
        }
        const bool last = step + 1 == tc.steps;
        if (have_val && tc.val_every > 0 && ((step + 1) % tc.val_every == 0 || last)) {
            val_loss = evaluate();
            if (rank0) log_val(&lg, step + 1, val_loss);
        }
        if (tc.sample_every > 0 && (step + 1) % tc.sample_every == 0 && !last) print_sample();
        const bool saved = !tc.out_dir.empty() && ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || last);
        if (saved) save_checkpoint();
        // SIGTERM / SIGINT on any rank: every rank stops after this step (llmc/run/signals.h)
        if (!last && stop_after_step(world, step + 1, tc.out_dir, saved, save_checkpoint)) {
            gpt_free(&g);
            comm_finalize();
            return 0;
        }
    }
    print_sample();
    if (!tc.save_safetensors.empty()) {
        std::vector<float> p;
        gpt_get_full(&g, table, &p, nullptr, nullptr);
        if (rank0) {
            hf_export(tc.save_safetensors, mc, table, p.data());
            printf("wrote %s\n", tc.save_safetensors.c_str());
        }
    }
    // peak device memory in use, the largest over the ranks
    double peak_all = peak_used;
    comm_host_max(world, &peak_all, 1);
    if (rank0) {
        printf("peak device memory in use: %.2f GiB\n", peak_all / 1073741824.0);
        log_summary(&lg, mc, n_params, loss, val_loss, peak_all);
    }
    gpt_free(&g);
    comm_finalize();
    return 0;
}
#endif
