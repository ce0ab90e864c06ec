// train_gpt.cu: the CUDA trainer on one GPU. The same model as train_gpt_cpu.cpp (every switch of the
// model spec: learned positions or RoPE, LayerNorm or RMSNorm, GELU or SwiGLU, biases on/off, tied or
// untied head, GQA), the same flags (llmc/args.h), checkpoints, safetensors, data and logs; bf16 weights
// and activations with fp32 accumulation, fp32 master weights and AdamW moments. make PRECISION=FP32 builds
// the same program with floatX = float (llmc/precision.cuh) and the CUDA-core attention of
// llmc/attention_rowwise.cuh: slower, for tight tests against the fp32 reference.
//
// Memory, one allocation per kind (llm.c style; floatX is bf16 unless PRECISION=FP32):
//   params     [P] floatX   the weights the kernels read, laid out by the parameter table (llmc/params.h)
//   grads      [P] floatX   same offsets; every kernel writes floatX weight gradients (see docs/cuda_trainer.md)
//   master     [P] fp32     AdamW's master weights; params = floatX(master) after each update
//   m, v       [P] fp32     AdamW moments (bf16 with --bf16-moments)
//   head_grad  [Vp,C] fp32  the LM head gradient, accumulated over the step by the fused classifier,
//                           added into grads once per step
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
// Shapes: B batch, T time, C channels, H heads, KV kv heads, hd head dim, qd = H*hd, qkvd = (H+2KV)*hd,
// F ffn, F1 = F (gelu) or 2F (swiglu: gate then up), V vocabulary, Vp padded vocabulary.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "llmc/args.h"
#include "llmc/checkpoint.h"
#include "llmc/config.h"
#include "llmc/dataloader.h"
#include "llmc/flops.h"
#include "llmc/init.h"
#include "llmc/logger.h"
#include "llmc/lr_schedule.h"
#include "llmc/params.h"
#include "llmc/rng.h"
#include "llmc/sampling.h"
#include "llmc/weights_io.h"
#include "llmc/cuda_common.cuh"
#include "llmc/matmul.cuh"
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
#include "llmc/global_norm.cuh"


// ----------------------------------------------------------------------------------------------
// Flags of the CUDA trainer only (the rest are llmc/args.h's, shared with train_gpt_cpu).

enum Recompute { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL };

static const char* recompute_name(Recompute r) {
    return r == RECOMPUTE_FULL ? "full" : r == RECOMPUTE_SELECTIVE ? "selective" : "none";
}

struct CudaOptions {
    Recompute recompute = RECOMPUTE_NONE;
    bool bf16_moments = false;
    std::string print_config;      // write the model config JSON (train_gpt.py --config) and exit
    double estimate_gib = -1;      // >= 0: print the memory estimate against this many GiB and exit
};

static void print_cuda_usage() {
    printf("CUDA trainer flags (besides those below):\n"
           "  --recompute none|selective|full   activation recompute (default none): selective recomputes the\n"
           "                       attention output and the MLP activation, full recomputes every layer from\n"
           "                       its input in the backward\n"
           "  --bf16-moments 0|1   AdamW moments in bf16 instead of fp32 (default 0)\n"
           "  --print-config FILE  write the model config as JSON (train_gpt.py --config) and exit\n"
           "  --estimate-memory GIB   print the memory estimate of this run against GIB of device memory and\n"
           "                       exit (no GPU needed); status 1 when it does not fit\n\n");
}

// Takes the CUDA-only flags out of argv (the rest go to parse_args). Returns the remaining argv.
static std::vector<char*> parse_cuda_flags(int argc, char** argv, CudaOptions* o) {
    std::vector<char*> rest{argv[0]};
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") print_cuda_usage();
        const bool ours = a == "--recompute" || a == "--bf16-moments" || a == "--print-config" || a == "--estimate-memory";
        if (!ours) { rest.push_back(argv[i]); continue; }
        if (i + 1 >= argc) die("flag %s lacks a value (see --help)", a.c_str());
        std::string v = argv[++i];
        if (a == "--recompute") {
            if (v == "none") o->recompute = RECOMPUTE_NONE;
            else if (v == "selective") o->recompute = RECOMPUTE_SELECTIVE;
            else if (v == "full") o->recompute = RECOMPUTE_FULL;
            else die("flag --recompute expects none, selective or full, got '%s'", v.c_str());
        } else if (a == "--bf16-moments") {
            if (v != "0" && v != "1") die("flag --bf16-moments expects 0 or 1, got '%s'", v.c_str());
            o->bf16_moments = v == "1";
        } else if (a == "--print-config") {
            o->print_config = v;
        } else {
            char* end = nullptr;
            o->estimate_gib = strtod(v.c_str(), &end);
            if (v.empty() || *end || !(o->estimate_gib > 0)) die("flag --estimate-memory expects GiB > 0, got '%s'", v.c_str());
        }
    }
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
    floatX* x;        // [N,C]    input of the layer (the residual stream)
    floatX* ln1;      // [N,C]
    float* ln1_mean;  // [N]
    float* ln1_rstd;  // [N]
    floatX* qkv;      // [N,qkvd] after RoPE
    floatX* atty;     // [N,qd]
    float* lse;       // [B,H,T]
    floatX* x_mid;    // [N,C]    x + attention branch
    floatX* ln2;      // [N,C]
    float* ln2_mean;  // [N]
    float* ln2_rstd;  // [N]
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

struct GPT {
    ModelConfig cfg;
    ParamTable table;
    int B = 0, T = 0;
    Recompute recompute = RECOMPUTE_NONE;
    bool bf16_moments = false;
    cudaStream_t stream = nullptr;
    MatmulContext mm;
    // one allocation per kind
    floatX* params = nullptr;   // [P]
    floatX* grads = nullptr;    // [P]
    float* master = nullptr;    // [P]
    void* m = nullptr;          // [P] fp32 or bf16
    void* v = nullptr;          // [P]
    float* head_grad = nullptr; // [Vp,C]
    char* buffer_memory = nullptr;  // every row of buffer_table below but the counted ones
    std::vector<LayerActs> layers;
    // scratch (shapes in buffer_table)
    floatX *y, *x_final, *lnf, *dres, *dln, *datty, *dqkv, *dfc1, *dact, *logits;
    float *lnf_mean, *lnf_rstd, *dvec, *norm_partial, *losses, *gnorm, *rope_cos, *rope_sin;
    double* loss_sum;           // [1] sum over the micro-batches of their weighted mean losses (fp64)
    int32_t *inputs, *targets;
    int cls_chunk = 0;
    EmbeddingPlan plan;
    AdamWTable<float> adam_f32;
    AdamWTable<__nv_bfloat16> adam_bf16;
    double allocated = 0;       // bytes asked of cudaMalloc
    // Pinned host staging (cudaMallocHost): everything a micro-batch needs from the host, one slot per
    // micro-batch of the step, so that its uploads are asynchronous and no slot is rewritten while a copy
    // from it may still be queued. Slot layout (int32): inputs [N] | targets [N] | embedding plan [3N+1].
    int32_t* h_stage = nullptr;
    int stage_slots = 0;
    std::vector<MicroBatchStage> stage;   // [stage_slots] what the host knows of each slot
    StepReadback* h_readback = nullptr;   // pinned: the step's loss and gradient norm, read once per step
    int n_valid = 0;            // targets >= 0 in the micro-batch of the last forward
    double loss = 0;            // mean loss of the last micro-batch read back (gpt_backward, gpt_loss)

    floatX* P(int k) const { return k < 0 ? nullptr : params + table.specs[k].offset; }
    floatX* G(int k) const { return k < 0 ? nullptr : grads + table.specs[k].offset; }
    int head() const { return cfg.tied ? table.wte : table.lm_head; }
};

// ----------------------------------------------------------------------------------------------
// The buffer table: every activation and scratch buffer of the run, one row each (its pointer, its elements,
// their type, and under each recompute mode whether every layer keeps its own copy). The memory estimate, the
// size of the one block that holds them and the carving of that block into the pointers all read it: a new
// buffer is a new row.

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Rows of the classifier's logits chunk: at most 256 MiB of logits, at least 64 rows.
static int classifier_chunk(const ModelConfig& c, int B, int T) {
    const size_t rows = (256ull << 20) / (sizeof(floatX) * (size_t)c.padded_vocab);
    return (int)std::min<size_t>((size_t)B * T, std::max<size_t>(64, rows / 8 * 8));
}

// An activation under one recompute mode: every layer keeps its own copy for the backward (KEEP), or all
// layers share one copy that the backward recomputes before it reads it (RECOMPUTED).
static const bool KEEP = true, RECOMPUTED = false;

struct Buffer {
    void* ptr;                          // the pointer that receives the address: a GPT member, or layer 0's
                                        // LayerActs member (layer l's is l LayerActs further on); null: a buffer
                                        // its header allocates, only counted here
    void (*set)(void* ptr, char* at);   // *(T**)ptr = (T*)at, T the pointer's element type
    size_t count, elem_bytes;           // one copy: count elements of sizeof(T) bytes
    bool activation;                    // a LayerActs member
    bool kept[3];                       // an activation under --recompute none, selective, full: KEEP or RECOMPUTED
};

template <typename T>
static void set_address(void* ptr, char* at) { *(T**)ptr = (T*)at; }

template <typename T>
static Buffer activation(T** ptr, size_t count, bool none, bool selective, bool full) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), true, {none, selective, full}};
}

template <typename T>
static Buffer scratch(T** ptr, size_t count) {
    return Buffer{ptr, set_address<T>, count, sizeof(T), false, {false, false, false}};
}

static Buffer counted(size_t count, size_t elem_bytes) {
    return Buffer{nullptr, nullptr, count, elem_bytes, false, {false, false, false}};
}

// Bytes of one copy (256-byte aligned, as carved) and the copies the run holds under recompute mode r.
static size_t buffer_bytes(const Buffer& b) { return align256(b.count * b.elem_bytes); }
static size_t buffer_copies(const Buffer& b, Recompute r, int L) { return b.activation && b.kept[r] ? (size_t)L : 1; }

// The rows, pointing into g (and g->layers[0]) for micro-batches of B x T.
static std::vector<Buffer> buffer_table(GPT* g, const ModelConfig& c, int B, int T) {
    const size_t N = (size_t)B * T, C = c.n_embd, qd = cfg_q_dim(c), qkvd = cfg_qkv_dim(c), F = c.ffn,
                 F1 = cfg_fc1_dim(c), BHT = (size_t)B * c.n_head * T;
    const size_t rope = c.pos == POS_ROPE ? (size_t)T * c.head_dim / 2 : 0;
    LayerActs& la = g->layers[0];
    return {
        //          pointer        elements   none  selective   full
        activation(&la.x,          N * C,     KEEP, KEEP,       KEEP),        // [N,C] layer input (residual stream)
        activation(&la.ln1,        N * C,     KEEP, KEEP,       RECOMPUTED),  // [N,C]
        activation(&la.ln1_mean,   2 * N,     KEEP, KEEP,       RECOMPUTED),  // [2,N] mean, then rstd
        activation(&la.qkv,        N * qkvd,  KEEP, KEEP,       RECOMPUTED),  // [N,qkvd] q, k rotated
        activation(&la.atty,       N * qd,    KEEP, RECOMPUTED, RECOMPUTED),  // [N,qd] attention output
        activation(&la.lse,        BHT,       KEEP, RECOMPUTED, RECOMPUTED),  // [B,H,T]
        activation(&la.x_mid,      N * C,     KEEP, KEEP,       RECOMPUTED),  // [N,C] after attention
        activation(&la.ln2,        N * C,     KEEP, KEEP,       RECOMPUTED),  // [N,C]
        activation(&la.ln2_mean,   2 * N,     KEEP, KEEP,       RECOMPUTED),  // [2,N] mean, then rstd
        activation(&la.fc1,        N * F1,    KEEP, KEEP,       RECOMPUTED),  // [N,F1] pre-activation
        activation(&la.act,        N * F,     KEEP, RECOMPUTED, RECOMPUTED),  // [N,F]
        scratch(&g->y,             N * C),                     // [N,C] a matmul output about to join the residual
        scratch(&g->x_final,       N * C),                     // [N,C] residual after the last layer
        scratch(&g->lnf,           N * C),                     // [N,C]
        scratch(&g->lnf_mean,      2 * N),                     // [2,N] mean, then rstd
        scratch(&g->dres,          N * C),                     // [N,C] residual-stream gradient
        scratch(&g->dln,           N * C),                     // [N,C] gradient of a norm output
        scratch(&g->datty,         N * qd),                    // [N,qd]
        scratch(&g->dqkv,          N * qkvd),                  // [N,qkvd]
        scratch(&g->dfc1,          N * F1),                    // [N,F1]
        scratch(&g->dact,          N * F),                     // [N,F]
        scratch(&g->dvec,          BHT),                       // [B,H,T] attention backward
        scratch(&g->norm_partial,  norm_backward_scratch_floats((int)N, (int)C)),
        scratch(&g->logits,        (size_t)classifier_chunk(c, B, T) * c.padded_vocab),  // [chunk,Vp]
        scratch(&g->losses,        N),                         // [N]
        scratch(&g->loss_sum,      1),                         // [1] the step's loss, summed on the device
        scratch(&g->inputs,        2 * N),                     // [2,N] inputs, then targets (one upload)
        scratch(&g->gnorm,         GLOBAL_NORM_BLOCKS + 2),    // partials, then norm and clip coefficient
        counted(rope, sizeof(float)),                          // [T,hd/2] RoPE cos (rope_upload_tables)
        counted(rope, sizeof(float)),                          // [T,hd/2] RoPE sin
        counted(embedding_plan_ints((int)N), sizeof(int32_t)), // [3N+1] the embedding plan (embedding_plan_alloc)
    };
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
struct MemoryEstimate {
    double params, grads, master, moments, head_grad, acts_layers, acts_shared, scratch, workspace, reserve;
    double allocations() const {
        return params + grads + master + moments + head_grad + acts_layers + acts_shared + scratch + workspace;
    }
    double total() const { return allocations() + reserve; }
};

static size_t max_bias_len(const ModelConfig& c) {
    return (size_t)std::max({c.n_embd, cfg_qkv_dim(c), cfg_fc1_dim(c)});
}

static MemoryEstimate estimate_memory(const ModelConfig& c, const ParamTable& t, int B, int T, Recompute r,
                                      bool bf16_moments) {
    MemoryEstimate e;
    const double P = (double)t.total;
    e.params = P * sizeof(floatX);
    e.grads = P * sizeof(floatX);
    e.master = P * 4;
    e.moments = P * 2 * (bf16_moments ? 2 : 4);
    e.head_grad = (double)c.padded_vocab * c.n_embd * 4;
    e.acts_layers = e.acts_shared = e.scratch = 0;
    GPT shape;  // the table's sizes only: its addresses point into this GPT and are not used
    shape.layers.resize(1);
    for (const Buffer& b : buffer_table(&shape, c, B, T)) {
        const double bytes = (double)(buffer_bytes(b) * buffer_copies(b, r, c.n_layer));
        if (!b.activation) e.scratch += bytes;
        else if (b.kept[r]) e.acts_layers += bytes;
        else e.acts_shared += bytes;
    }
    MatmulContext mm;
    e.workspace = (double)mm.workspace_size + (double)max_bias_len(c) * 4;
    e.reserve = MEMORY_RESERVE_BYTES;
    return e;
}

static void print_memory_estimate(const MemoryEstimate& e, Recompute r, double device_bytes) {
    const double G = 1024.0 * 1024.0 * 1024.0;
    printf("memory estimate (GiB): params %.2f | grads %.2f | master %.2f | moments %.2f | head grad %.2f\n",
           e.params / G, e.grads / G, e.master / G, e.moments / G, e.head_grad / G);
    printf("                       activations %.2f (per layer, --recompute %s) + %.2f (shared) | scratch %.2f | "
           "cuBLASLt %.2f\n", e.acts_layers / G, recompute_name(r), e.acts_shared / G, e.scratch / G, e.workspace / G);
    printf("                       reserve %.2f (CUDA context, cuBLASLt kernels, allocator rounding)\n", e.reserve / G);
    printf("                       total %.2f of %.2f on the device\n", e.total() / G, device_bytes / G);
    printf("memory estimate (bytes): params %.0f grads %.0f master %.0f moments %.0f head_grad %.0f acts_layers %.0f "
           "acts_shared %.0f scratch %.0f workspace %.0f reserve %.0f total %.0f\n", e.params, e.grads, e.master,
           e.moments, e.head_grad, e.acts_layers, e.acts_shared, e.scratch, e.workspace, e.reserve, e.total());
    fflush(stdout);  // the breakdown before any error that refers to it
}

// Dies with the breakdown's lesson when the run cannot fit: which flags lower what.
static void require_memory(const MemoryEstimate& e, Recompute r, bool bf16_moments, double available) {
    if (e.total() <= available) return;
    const double G = 1024.0 * 1024.0 * 1024.0;
    const double state = e.params + e.grads + e.master + e.moments + e.head_grad;
    std::string hint;
    if (r != RECOMPUTE_FULL) hint += " --recompute full (or selective) keeps fewer activations;";
    hint += " lower -b or -t (activations and scratch scale with B*T);";
    if (!bf16_moments) hint += " --bf16-moments 1 halves the AdamW moments;";
    if (state > available) hint += " the weights and optimizer state alone exceed the device: pick a smaller model;";
    die("this run needs about %.2f GiB but %.2f GiB are free on the device (breakdown above):%s", e.total() / G,
        available / G, hint.c_str());
}

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

// Allocates everything for micro-batches of B x T. weight_decay goes into the AdamW table.
static void gpt_build(GPT* g, const ModelConfig& c, int B, int T, Recompute r, bool bf16_moments, float weight_decay) {
    check_shapes(c, B, T);
    g->cfg = c;
    g->table = build_param_table(c);
    for (const ParamSpec& s : g->table.specs)
        if (s.offset % 8 != 0 || s.numel() % 8 != 0)
            die("tensor %s: offset %zu or size %zu is not a multiple of 8 (the kernels move 8 elements at a time)",
                s.name.c_str(), s.offset, s.numel());
    g->B = B;
    g->T = T;
    g->recompute = r;
    g->bf16_moments = bf16_moments;
    cudaCheck(cudaStreamCreate(&g->stream));
    matmul_init(&g->mm, (int)max_bias_len(c));
    g->allocated += (double)g->mm.workspace_size + (double)max_bias_len(c) * 4;
    const size_t P = g->table.total, msz = bf16_moments ? 2 : 4;
    cuda_alloc(g, &g->params, P * sizeof(floatX));
    cuda_alloc(g, &g->grads, P * sizeof(floatX));
    cuda_alloc(g, &g->master, P * sizeof(float));
    cuda_alloc(g, (char**)&g->m, P * msz);
    cuda_alloc(g, (char**)&g->v, P * msz);
    cuda_alloc(g, &g->head_grad, (size_t)c.padded_vocab * c.n_embd * sizeof(float));
    cudaCheck(cudaMemset(g->m, 0, P * msz));
    cudaCheck(cudaMemset(g->v, 0, P * msz));

    // activations and scratch: one block for the rows of the buffer table, carved in its order; an activation
    // that every layer keeps gets L consecutive copies, one that is recomputed one copy shared by the layers
    g->layers.resize(c.n_layer);
    const std::vector<Buffer> buffers = buffer_table(g, c, B, T);
    size_t block = 0;
    for (const Buffer& b : buffers)
        if (b.ptr) block += buffer_bytes(b) * buffer_copies(b, r, c.n_layer);
        else g->allocated += (double)buffer_bytes(b);  // allocated below by its header
    cuda_alloc(g, &g->buffer_memory, block);
    char* at = g->buffer_memory;
    for (const Buffer& b : buffers) {
        if (!b.ptr) continue;
        const size_t copies = buffer_copies(b, r, c.n_layer);
        for (int l = 0; l < (b.activation ? c.n_layer : 1); l++)  // layer l's member: l LayerActs after layer 0's
            b.set((char*)b.ptr + l * sizeof(LayerActs), at + (copies > 1 ? l * buffer_bytes(b) : 0));
        at += copies * buffer_bytes(b);
    }
    // the second halves of the [2,N] rows
    const size_t N = (size_t)B * T;
    for (LayerActs& la : g->layers) {
        la.ln1_rstd = la.ln1_mean + N;
        la.ln2_rstd = la.ln2_mean + N;
    }
    g->lnf_rstd = g->lnf_mean + N;
    g->targets = g->inputs + N;
    g->cls_chunk = classifier_chunk(c, B, T);
    g->rope_cos = g->rope_sin = nullptr;
    if (c.pos == POS_ROPE) rope_upload_tables(c, T, &g->rope_cos, &g->rope_sin);
    embedding_plan_alloc(&g->plan, B * T);
    if (bf16_moments) g->adam_bf16 = adamw_table_build<__nv_bfloat16>(g, weight_decay);
    else g->adam_f32 = adamw_table_build<float>(g, weight_decay);
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

// Uploads whole-model fp32 weights [P] (and moments, or zeros when m is null); params = floatX(master).
static void gpt_set_weights(GPT* g, const float* p, const float* m, const float* v) {
    const size_t P = g->table.total;
    cudaCheck(cudaMemcpy(g->master, p, P * sizeof(float), cudaMemcpyHostToDevice));
    floatX_from_f32_kernel<<<(unsigned)ceil_div(P, 256), 256, 0, g->stream>>>(g->params, g->master, P);
    cudaCheck(cudaGetLastError());
    const size_t msz = g->bf16_moments ? 2 : 4;
    if (!m) {
        cudaCheck(cudaMemset(g->m, 0, P * msz));
        cudaCheck(cudaMemset(g->v, 0, P * msz));
    } else if (!g->bf16_moments) {
        cudaCheck(cudaMemcpy(g->m, m, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(g->v, v, P * 4, cudaMemcpyHostToDevice));
    } else {
        std::vector<__nv_bfloat16> h(P);
        for (size_t i = 0; i < P; i++) h[i] = __float2bfloat16(m[i]);
        cudaCheck(cudaMemcpy(g->m, h.data(), P * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < P; i++) h[i] = __float2bfloat16(v[i]);
        cudaCheck(cudaMemcpy(g->v, h.data(), P * 2, cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaStreamSynchronize(g->stream));
}

// Downloads the fp32 master weights and the moments (as fp32) for checkpoints and exports.
static void gpt_get_weights(GPT* g, std::vector<float>* p, std::vector<float>* m, std::vector<float>* v) {
    const size_t P = g->table.total;
    cudaCheck(cudaStreamSynchronize(g->stream));
    p->resize(P);
    cudaCheck(cudaMemcpy(p->data(), g->master, P * 4, cudaMemcpyDeviceToHost));
    if (!m) return;
    m->resize(P);
    v->resize(P);
    if (!g->bf16_moments) {
        cudaCheck(cudaMemcpy(m->data(), g->m, P * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(v->data(), g->v, P * 4, cudaMemcpyDeviceToHost));
    } else {
        std::vector<__nv_bfloat16> h(P);
        cudaCheck(cudaMemcpy(h.data(), g->m, P * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < P; i++) (*m)[i] = __bfloat162float(h[i]);
        cudaCheck(cudaMemcpy(h.data(), g->v, P * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < P; i++) (*v)[i] = __bfloat162float(h[i]);
    }
}

static void gpt_free(GPT* g) {
    for (void* p : {(void*)g->params, (void*)g->grads, (void*)g->master, g->m, g->v, (void*)g->head_grad,
                    (void*)g->buffer_memory, (void*)g->rope_cos, (void*)g->rope_sin})
        if (p) cudaCheck(cudaFree(p));
    if (g->bf16_moments) adamw_table_free(&g->adam_bf16);
    else adamw_table_free(&g->adam_f32);
    embedding_plan_free(&g->plan);
    if (g->h_stage) cudaCheck(cudaFreeHost(g->h_stage));
    cudaCheck(cudaFreeHost(g->h_readback));
    matmul_free(&g->mm);
    cudaCheck(cudaStreamDestroy(g->stream));
}

// ----------------------------------------------------------------------------------------------
// Forward

// The attention half of layer l after ln1: qkv, RoPE, attention, output projection into g->y.
static void attention_block_forward(GPT* g, const ParamTable::Block& w, LayerActs& la) {
    const ModelConfig& c = g->cfg;
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd, hd = c.head_dim, H = c.n_head, KV = c.n_kv_head;
    matmul_forward(&g->mm, g->stream, la.qkv, la.ln1, g->P(w.qkv_w), g->P(w.qkv_b), N, C, cfg_qkv_dim(c));
    if (c.pos == POS_ROPE) rope_rotate_inplace(la.qkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, +1, g->stream);
    attention_fwd(la.atty, la.lse, la.qkv, B, T, H, KV, hd, g->stream);
}

// The MLP activation of layer l: act from fc1.
static void mlp_act_forward(GPT* g, LayerActs& la) {
    const size_t N = (size_t)g->B * g->T;
    if (g->cfg.mlp == MLP_SWIGLU) swiglu_forward(la.act, la.fc1, (int)N, g->cfg.ffn, g->stream);
    else gelu_forward(la.act, la.fc1, N * g->cfg.ffn, g->stream);
}

// Layer l up to its MLP output in g->y. x_prev_mid: x[l] = x_prev_mid + g->y (the previous layer's
// x_mid and MLP output) is formed by ln1's residual add; null when la.x already holds x[l] (layer 0, a
// recompute), and then ln1 = norm(la.x) without a residual add.
static void layer_forward(GPT* g, int l, const floatX* x_prev_mid) {
    const ModelConfig& c = g->cfg;
    const ParamTable::Block& w = g->table.blocks[l];
    LayerActs& la = g->layers[l];
    const int N = g->B * g->T, C = c.n_embd, F = c.ffn, F1 = cfg_fc1_dim(c);
    const bool rms = c.norm == NORM_RMSNORM;
    if (x_prev_mid)
        fused_residual_norm_forward(la.x, la.ln1, la.ln1_mean, la.ln1_rstd, x_prev_mid, g->y, g->P(w.ln1_w), g->P(w.ln1_b),
                                    N, C, c.norm_eps, rms, g->stream);
    else
        fused_residual_norm_forward(nullptr, la.ln1, la.ln1_mean, la.ln1_rstd, la.x, nullptr, g->P(w.ln1_w),
                                    g->P(w.ln1_b), N, C, c.norm_eps, rms, g->stream);  // no residual add
    attention_block_forward(g, w, la);
    matmul_forward(&g->mm, g->stream, g->y, la.atty, g->P(w.attn_out_w), g->P(w.attn_out_b), N, cfg_q_dim(c), C);
    fused_residual_norm_forward(la.x_mid, la.ln2, la.ln2_mean, la.ln2_rstd, la.x, g->y, g->P(w.ln2_w), g->P(w.ln2_b), N,
                                C, c.norm_eps, rms, g->stream);
    matmul_forward(&g->mm, g->stream, la.fc1, la.ln2, g->P(w.fc1_w), g->P(w.fc1_b), N, C, F1);
    mlp_act_forward(g, la);
    matmul_forward(&g->mm, g->stream, g->y, la.act, g->P(w.fc2_w), g->P(w.fc2_b), N, F, C);
}

// Forward of staged micro-batch `slot` (gpt_stage) through the final norm: g->lnf [N,C]. Its tokens and
// targets go up in one asynchronous copy from the pinned slot (they are adjacent there and on the device).
static void gpt_forward_staged(GPT* g, int slot) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd, L = c.n_layer;
    const MicroBatchStage& st = g->stage[slot];
    const int32_t* h = g->h_stage + (size_t)slot * stage_ints(g);
    cudaCheck(cudaMemcpyAsync(g->inputs, h, (size_t)(st.has_targets ? 2 : 1) * N * sizeof(int32_t),
                              cudaMemcpyHostToDevice, g->stream));
    g->n_valid = st.n_valid;
    // x[0] = wte[token] (+ wpe[t]); layer 0's norm has no residual to add
    embedding_forward(g->layers[0].x, g->inputs, g->P(t.wte), g->P(t.wpe), N, T, C, g->stream);
    for (int l = 0; l < L; l++) layer_forward(g, l, l == 0 ? nullptr : g->layers[l - 1].x_mid);
    fused_residual_norm_forward(g->x_final, g->lnf, g->lnf_mean, g->lnf_rstd, g->layers[L - 1].x_mid, g->y, g->P(t.lnf_w),
                                g->P(t.lnf_b), N, C, c.norm_eps, c.norm == NORM_RMSNORM, g->stream);
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

// logits[rows, Vp] (floatX, in g->logits) of lnf rows [row0, row0 + rows), rows <= cls_chunk: the LM
// head as a linear layer (IC = C, OC = Vp), the same GEMM as step 1 of fused_classifier.
static void gpt_logits(GPT* g, int row0, int rows) {
    const ModelConfig& c = g->cfg;
    matmul_forward(&g->mm, g->stream, g->logits, g->lnf + (size_t)row0 * c.n_embd, g->P(g->head()), nullptr, rows,
                   c.n_embd, c.padded_vocab);
}

// Mean loss over the valid targets of the micro-batch after gpt_forward (no gradients); waits for the device.
static double gpt_loss(GPT* g) {
    const ModelConfig& c = g->cfg;
    const int N = g->B * g->T;
    for (int r0 = 0; r0 < N; r0 += g->cls_chunk) {
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

// Backward of (loss * loss_scale) of staged micro-batch `slot` after its forward (with targets), accumulated
// into the gradients (the LM head's into head_grad, fp32); loss_weight * its mean loss joins g->loss_sum.
// Only enqueues work: the embedding plan, built on the host by gpt_stage, goes up asynchronously.
static void gpt_backward_staged(GPT* g, int slot, double loss_scale, double loss_weight) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd, L = c.n_layer, hd = c.head_dim, H = c.n_head,
              KV = c.n_kv_head, qd = cfg_q_dim(c), qkvd = cfg_qkv_dim(c), F = c.ffn, F1 = cfg_fc1_dim(c);
    const bool rms = c.norm == NORM_RMSNORM, swiglu = c.mlp == MLP_SWIGLU;
    // the token rows of this micro-batch, grouped by token, for the embedding backward
    const MicroBatchStage& st = g->stage[slot];
    if (!st.has_targets) die("gpt_backward: the micro-batch was staged without targets");
    embedding_plan_upload(&g->plan, g->h_stage + (size_t)slot * stage_ints(g) + 2 * (size_t)N, st.plan_unique,
                          st.plan_max, N, g->stream);

    // classifier: loss, dlogits in place, dln = d lnf, head_grad += dlogits^T lnf
    const float scale = g->n_valid ? (float)(loss_scale / g->n_valid) : 0.0f;
    fused_classifier(g->dln, g->head_grad, g->losses, nullptr, g->logits, g->lnf, g->P(g->head()), g->targets, N, C,
                     c.vocab_size, c.padded_vocab, g->cls_chunk, scale, &g->mm, g->stream);
    gpt_loss_accumulate(g, loss_weight);
    cudaCheck(cudaMemsetAsync(g->dres, 0, (size_t)N * C * sizeof(floatX), g->stream));
    norm_backward(g->dres, g->G(t.lnf_w), g->G(t.lnf_b), g->norm_partial, g->dln, g->x_final, g->P(t.lnf_w), g->lnf_mean,
                  g->lnf_rstd, N, C, rms, g->stream);

    for (int l = L - 1; l >= 0; l--) {
        const ParamTable::Block& w = t.blocks[l];
        LayerActs& la = g->layers[l];
        if (g->recompute == RECOMPUTE_FULL) {
            layer_forward(g, l, nullptr);  // every buffer of the layer again, from la.x
        } else if (g->recompute == RECOMPUTE_SELECTIVE) {
            attention_fwd(la.atty, la.lse, la.qkv, B, T, H, KV, hd, g->stream);
            mlp_act_forward(g, la);
        }
        // dres = d(layer output) = d(x_mid + fc2(act(fc1(ln2(x_mid)))))
        matmul_backward_input(&g->mm, g->stream, g->dact, g->dres, g->P(w.fc2_w), N, F, C);
        matmul_backward_weight(&g->mm, g->stream, g->G(w.fc2_w), g->G(w.fc2_b), g->dres, la.act, N, F, C);
        if (swiglu) swiglu_backward(g->dfc1, g->dact, la.fc1, N, F, g->stream);
        else gelu_backward(g->dfc1, g->dact, la.fc1, (size_t)N * F, g->stream);
        matmul_backward_input(&g->mm, g->stream, g->dln, g->dfc1, g->P(w.fc1_w), N, C, F1);
        matmul_backward_weight(&g->mm, g->stream, g->G(w.fc1_w), g->G(w.fc1_b), g->dfc1, la.ln2, N, C, F1);
        norm_backward(g->dres, g->G(w.ln2_w), g->G(w.ln2_b), g->norm_partial, g->dln, la.x_mid, g->P(w.ln2_w), la.ln2_mean,
                      la.ln2_rstd, N, C, rms, g->stream);
        // dres = d(x_mid) = d(x + attn_out(attention(qkv(ln1(x)))))
        matmul_backward_input(&g->mm, g->stream, g->datty, g->dres, g->P(w.attn_out_w), N, qd, C);
        matmul_backward_weight(&g->mm, g->stream, g->G(w.attn_out_w), g->G(w.attn_out_b), g->dres, la.atty, N, qd, C);
        attention_bwd(g->dqkv, g->dvec, g->datty, la.atty, la.qkv, la.lse, B, T, H, KV, hd, g->stream);
        if (c.pos == POS_ROPE) rope_rotate_inplace(g->dqkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, -1, g->stream);
        matmul_backward_input(&g->mm, g->stream, g->dln, g->dqkv, g->P(w.qkv_w), N, C, qkvd);
        matmul_backward_weight(&g->mm, g->stream, g->G(w.qkv_w), g->G(w.qkv_b), g->dqkv, la.ln1, N, C, qkvd);
        norm_backward(g->dres, g->G(w.ln1_w), g->G(w.ln1_b), g->norm_partial, g->dln, la.x, g->P(w.ln1_w), la.ln1_mean,
                      la.ln1_rstd, N, C, rms, g->stream);
    }
    // dres = d(x[0]) = d(wte[token] + wpe[t])
    embedding_backward(g->G(t.wte), g->G(t.wpe), g->dres, g->plan, N, T, C, g->stream);
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
    gpt_backward_staged(g, 0, loss_scale, 1.0);
    gpt_read_loss(g);
}
#endif

// ----------------------------------------------------------------------------------------------
// The optimizer step

static void gpt_zero_grad(GPT* g) {
    cudaCheck(cudaMemsetAsync(g->grads, 0, g->table.total * sizeof(floatX), g->stream));
    cudaCheck(cudaMemsetAsync(g->head_grad, 0, (size_t)g->cfg.padded_vocab * g->cfg.n_embd * 4, g->stream));
}

// The fp32 LM-head gradient of the step joins the floatX gradients (once per step, after the last micro-batch).
static void gpt_fold_head_grad(GPT* g) {
    const size_t hn = (size_t)g->cfg.padded_vocab * g->cfg.n_embd;
    add_f32_into_floatX_kernel<<<(unsigned)ceil_div(hn, 256), 256, 0, g->stream>>>(g->G(g->head()), g->head_grad, hn);
    cudaCheck(cudaGetLastError());
}

// The head gradient joins the others; global norm and clip coefficient on the device; AdamW for
// 1-based step t. Only enqueues: the pre-clip norm stays in g->gnorm[GLOBAL_NORM_BLOCKS].
static void gpt_update(GPT* g, int t, double lr, const TrainConfig& tc) {
    gpt_fold_head_grad(g);
    float* partial = g->gnorm;
    float* out = g->gnorm + GLOBAL_NORM_BLOCKS;  // [norm, clip coefficient]
    global_norm(out, partial, g->grads, g->table.total, (float)tc.grad_clip, g->stream);
    AdamWHyper h{(float)lr, (float)tc.beta1, (float)tc.beta2, (float)tc.eps};
    if (g->bf16_moments) adamw_update(g->adam_bf16, h, t, out + 1, g->stream);
    else adamw_update(g->adam_f32, h, t, out + 1, g->stream);
}

// One optimizer step over the micro-batches inputs/targets [accum][B*T]. Returns the mean
// micro-batch loss; *norm_out gets the pre-clip global gradient norm.
static double train_step(GPT* g, const std::vector<std::vector<int32_t>>& inputs,
                         const std::vector<std::vector<int32_t>>& targets, int step, const TrainConfig& tc, double lr,
                         double* norm_out) {
    const int accum = (int)inputs.size();
    gpt_stage_reserve(g, accum);  // the previous step's synchronisation below has drained every copy
    gpt_zero_grad(g);
    cudaCheck(cudaMemsetAsync(g->loss_sum, 0, sizeof(double), g->stream));
    // The micro-batch loop only enqueues work: micro-batch a is staged on the host (tokens, targets, the
    // embedding plan, into its own pinned slot) while the device still runs a - 1; its uploads are
    // asynchronous copies from pinned memory and its loss is summed on the device.
    for (int a = 0; a < accum; a++) {
        gpt_stage(g, a, inputs[a].data(), targets[a].data());
        gpt_forward_staged(g, a);
        gpt_backward_staged(g, a, 1.0 / accum, 1.0 / accum);
    }
    gpt_update(g, step + 1, lr, tc);
    // The one host synchronisation of the step: the pre-clip gradient norm and the loss, copied into pinned
    // memory after the update (gpt_read_loss waits for the stream).
    cudaCheck(cudaMemcpyAsync(&g->h_readback->norm, g->gnorm + GLOBAL_NORM_BLOCKS, sizeof(float), cudaMemcpyDeviceToHost,
                              g->stream));
    const double loss = gpt_read_loss(g);
    *norm_out = g->h_readback->norm;
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
int main(int argc, char** argv) {
    CudaOptions opt;
    std::vector<char*> rest = parse_cuda_flags(argc, argv, &opt);
    ModelConfig mc;
    TrainConfig tc;
    parse_args((int)rest.size(), rest.data(), &mc, &tc);

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
    if (tc.tp != 1 || tc.pp != 1 || tc.dp > 1 || tc.zero != 0 || tc.sp || tc.vpp != 1)
        die("this train_gpt trains on one GPU: --tp, --pp, --dp, --zero, --sp and --vpp must keep their defaults "
            "(the parallel layouts run in train_gpt_cpu under mpirun)");
    const int B = tc.B, T = tc.T;
    check_shapes(mc, B, T);
    if (tc.total_batch == 0) tc.total_batch = (long)B * T;
    if (tc.total_batch % ((long)B * T) != 0)
        die("flag -d %ld is not a multiple of B*T = %d*%d = %ld", tc.total_batch, B, T, (long)B * T);
    const int accum = (int)(tc.total_batch / ((long)B * T));
    ParamTable table = build_param_table(mc);
    const MemoryEstimate est = estimate_memory(mc, table, B, T, opt.recompute, opt.bf16_moments);
    if (opt.estimate_gib > 0) {
        const double avail = opt.estimate_gib * 1024.0 * 1024.0 * 1024.0;
        print_memory_estimate(est, opt.recompute, avail);
        require_memory(est, opt.recompute, opt.bf16_moments, avail);
        printf("fits\n");
        return 0;
    }

    // the tokenizer that decodes samples (--tokenizer; none: token ids), opened before the device and any
    // allocation so that a missing rank file stops the run at once; not at all when no sample is drawn (-g 0)
    Sampler sampler;
    sampler_open(&sampler, tc.tokenizer, mc.vocab_size, tc.gen_tokens);

    // the device
    cuda_require_device();
    int dev = 0;
    cudaCheck(cudaSetDevice(dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 8)
        die("%s has compute capability %d.%d; train_gpt needs 8.0 or newer (bf16 tensor cores, cp.async)", prop.name,
            prop.major, prop.minor);
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    printf("device: %s (compute capability %d.%d, %.1f GiB, %.1f GiB free)\n", prop.name, prop.major, prop.minor,
           total_b / 1073741824.0, free_b / 1073741824.0);
    print_memory_estimate(est, opt.recompute, (double)total_b);
    require_memory(est, opt.recompute, opt.bf16_moments, (double)free_b);

    // data: a .txt file without -j is split 90/10 into train and validation
    DataLoader train, val;
    const bool have_val = loader_open_train_val(&train, &val, tc.train_data, tc.val_data, T, mc.vocab_size);

    GPT g;
    gpt_build(&g, mc, B, T, opt.recompute, opt.bf16_moments, (float)tc.weight_decay);
    TrainState state;
    state.rng = tc.seed ^ 0x5DEECE66Dull;
    const std::string resume_dir = checkpoint_resolve(tc.resume, tc.out_dir);
    {
        std::vector<float> p(table.total), m, v;
        print_init_time((int64_t)table.total, params_init_full(mc, table, p.data(), tc.seed));
        if (!tc.init_from.empty()) hf_import(tc.init_from, mc, table, p.data());
        if (!resume_dir.empty()) {
            m.assign(table.total, 0.0f);
            v.assign(table.total, 0.0f);
            checkpoint_load(resume_dir, mc, table, p.data(), m.data(), v.data(), &state);
            printf("resumed from %s at step %d\n", resume_dir.c_str(), state.step);
        }
        gpt_set_weights(&g, p.data(), m.empty() ? nullptr : m.data(), v.empty() ? nullptr : v.data());
    }
    auto save_checkpoint = [&]() {
        std::vector<float> p, m, v;
        gpt_get_weights(&g, &p, &m, &v);
        checkpoint_save(tc.out_dir, mc, table, p.data(), m.data(), v.data(), state, tc.keep_last);
    };
    if (!tc.out_dir.empty()) {
        std::error_code ec;
        fs::create_directories(tc.out_dir, ec);
        if (ec) die("cannot create output directory '%s' (flag -o): %s", tc.out_dir.c_str(), ec.message().c_str());
    }

    const int64_t n_params = param_count(table);
    print_config_table(mc, n_params, B, T, accum, 1, tc.steps, tc.lr, lr_schedule_name(tc.schedule), train.desc);
    printf("%s weights and activations, fp32 master weights, %s AdamW moments, --recompute %s; allocated %.2f GiB\n",
           PRECISION_NAME, opt.bf16_moments ? "bf16" : "fp32", recompute_name(opt.recompute), g.allocated / 1073741824.0);
    const double hw_flops = hardware_flops_per_token(mc, T, opt.recompute);
    printf("hardware FLOPs per token %.4g (model %.4g + recompute %.1f%%); MFU below counts model FLOPs\n", hw_flops,
           model_flops_per_token(mc, T), 100.0 * (hw_flops / model_flops_per_token(mc, T) - 1.0));
    Logger lg;
    logger_open(&lg, tc.out_dir, !resume_dir.empty());
    lg.tokens_per_step = (double)tc.total_batch;
    lg.flops_per_token = model_flops_per_token(mc, T);
    lg.peak_flops = device_peak_flops(prop.name);

    std::vector<std::vector<int32_t>> inputs(accum, std::vector<int32_t>((size_t)B * T)), targets = inputs;
    std::vector<int32_t> val_in((size_t)B * T), val_tg((size_t)B * T);
    auto evaluate = [&]() -> double {
        double s = 0;
        for (int i = 0; i < tc.val_batches; i++) {
            loader_batch(&val, (uint64_t)i * B, B, val_in.data(), val_tg.data());
            gpt_forward(&g, val_in.data(), val_tg.data());
            s += gpt_loss(&g);
        }
        return s / tc.val_batches;
    };
    auto print_sample = [&]() {
        if (tc.gen_tokens <= 0) return;
        sampler_print(&sampler, generate(&g, {sampler_start_token(&sampler)}, tc.gen_tokens, &state.rng));
    };

    double loss = 0, val_loss = -1, peak_used = 0;
    if (have_val && state.step == 0 && tc.val_every > 0) {
        val_loss = evaluate();
        log_val(&lg, 0, val_loss);
    }
    const int first_step = state.step;
    for (int step = state.step; step < tc.steps; step++) {
        double t0 = now_ms();
        for (int a = 0; a < accum; a++)
            loader_batch(&train, state.train_sample + (uint64_t)a * B, B, inputs[a].data(), targets[a].data());
        state.train_sample += (uint64_t)B * accum;
        double lr = lr_at(step, tc.steps, tc.warmup, tc.lr, tc.min_lr, tc.schedule, tc.decay_frac);
        double norm = 0;
        loss = train_step(&g, inputs, targets, step, tc, lr, &norm);
        state.step = step + 1;
        log_step(&lg, step + 1, tc.steps, loss, lr, norm, now_ms() - t0);
        if (!std::isfinite(loss)) die("loss became %f at step %d (lower -l or check the data)", loss, step + 1);
        const double used = device_used_bytes();
        if (used > peak_used || step == first_step) {
            peak_used = std::max(peak_used, used);
            if (step == first_step)
                printf("memory: %.2f GiB allocated by train_gpt (estimate %.2f, %.2f with the reserve), %.2f GiB in "
                       "use on the device\n", g.allocated / 1073741824.0, est.allocations() / 1073741824.0,
                       est.total() / 1073741824.0, used / 1073741824.0);
        }
        const bool last = step + 1 == tc.steps;
        if (have_val && tc.val_every > 0 && ((step + 1) % tc.val_every == 0 || last)) {
            val_loss = evaluate();
            log_val(&lg, step + 1, val_loss);
        }
        if (tc.sample_every > 0 && (step + 1) % tc.sample_every == 0 && !last) print_sample();
        if (!tc.out_dir.empty() && ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || last)) save_checkpoint();
    }
    print_sample();
    if (!tc.save_safetensors.empty()) {
        std::vector<float> p;
        gpt_get_weights(&g, &p, nullptr, nullptr);
        hf_export(tc.save_safetensors, mc, table, p.data());
        printf("wrote %s\n", tc.save_safetensors.c_str());
    }
    printf("peak device memory in use: %.2f GiB\n", peak_used / 1073741824.0);
    log_summary(&lg, mc, n_params, loss, val_loss, peak_used);
    gpt_free(&g);
    return 0;
}
#endif
