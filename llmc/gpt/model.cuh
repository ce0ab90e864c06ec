// llmc/gpt/model.cuh: the CUDA trainer's model, struct GPT: the config, the parameter table, one allocation per kind
// (weights, gradients, fp32 master weights, AdamW moments), the kept activations of each layer (LayerActs), and the
// structs owned by the code that uses them: the step's buffers outside the layers (Scratch), the way in for the
// micro-batches and the step's readback (HostIO), what was allocated (MemoryUse, gpt_build), and the four axes
// (llmc/gpt/tensor_parallel.cuh, data_parallel.cuh, pipeline.cuh, fp8_linear.cuh), each a struct of its own.
// train_gpt.cu's code reads and writes it; llmc/gpt/memory.cuh builds it, llmc/gpt/weights.cuh fills it.
#pragma once

#include <cstdint>
#include <vector>
#include "llmc/documents.h"
#include "llmc/model_config.h"
#include "llmc/param_table.h"
#include "llmc/cuda_common.cuh"
#include "llmc/precision.cuh"
#include "llmc/matmul.cuh"
#include "llmc/adamw.cuh"
#include "llmc/embedding.cuh"
#include "llmc/parallel/layout.h"
#include "llmc/parallel/comm.cuh"
#include "llmc/gpt/options.cuh"
#include "llmc/gpt/tensor_parallel.cuh"
#include "llmc/gpt/data_parallel.cuh"
#include "llmc/gpt/pipeline.cuh"
#include "llmc/gpt/fp8_linear.cuh"

struct LayerActs {
    floatX* x;        // [Nl,C]   input of the layer (the residual stream)
    floatX* ln1;      // [Nl,C]
    float* ln1_mean;  // [Nl]
    float* ln1_rstd;  // [Nl]
    floatX* ln1_full; // [N,C]    SP: ln1 gathered over tp (the qkv input; one copy for all layers, gathered
                      //          again for the backward); otherwise = ln1
    floatX* qkv;      // [N,qkvd] after RoPE (and --qk-norm)
    floatX* qk_raw;   // [N,H+KV,hd] --qk-norm: the q and k heads before their norm
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

// The step's buffers outside the layers (their shapes in buffer_table, llmc/gpt/memory.cuh): the final norm, the
// classifier and the gradients that flow back through the layers one at a time.
struct Scratch {
    floatX* y = nullptr;         // [Nl,C] a matmul output about to join the residual stream
    floatX* x_final = nullptr;   // [Nl,C] the last layer's x_mid + y
    floatX* lnf = nullptr;       // [Nl,C] the final norm
    float* lnf_mean = nullptr;   // [Nl]
    float* lnf_rstd = nullptr;   // [Nl]
    floatX* lnf_full = nullptr;  // [N,C] SP: lnf gathered over tp (the classifier's input); otherwise = lnf
    floatX* logits = nullptr;    // [panel,Vpl] a panel of rows' logits, then their gradient in place
    float* losses = nullptr;     // [N] the per-position losses
    float* cls_stats = nullptr;  // [3,panel] tp > 1: the rows' max, target logit and sum of exps over the vocabulary
    int cls_panel = 0;           // the classifier's rows per panel (llmc/classifier.cuh)
    double* loss_sum = nullptr;  // [1] sum over the micro-batches of their weighted mean losses (fp64)
    floatX* dres = nullptr;      // [Nl,C] the residual stream's gradient
    floatX* dres_full = nullptr; // [N,C] SP: dres gathered over tp; otherwise = dres
    floatX* dln = nullptr;       // [Nl,C] the gradient of a norm output
    floatX *datty = nullptr, *dqkv = nullptr, *dfc1 = nullptr, *dact = nullptr;  // a layer's own gradients
    float* dvec = nullptr;       // [B,H,T] the attention backward's rowsum(dO * O)
    float* norm_partial = nullptr;  // the norms' weight-gradient partial sums
    float* gnorm = nullptr;      // [GLOBAL_NORM_BLOCKS + 2] the global norm's partials, then the norm and clip coefficient
};

// The host's record of one uploaded micro-batch (the data are in its pinned upload buffer).
struct MicroBatchUpload {
    bool has_targets = false;        // with targets, also the embedding plan
    int n_valid = 0;                 // targets >= 0
    int plan_unique = 0, plan_max = 0;
    int pos_plan_unique = 0, pos_plan_max = 0;  // --reset-position-ids with learned positions: the positions' plan
};

// Pinned memory the device writes once per step and the host then reads.
struct StepReadback {
    double loss;   // mean micro-batch loss of the step
    float norm;    // pre-clip global gradient norm
};

// What crosses between host and device (gpt_upload, gpt_read_loss): the pinned host upload buffers (cudaMallocHost),
// everything a micro-batch needs from the host, one buffer per micro-batch of the step, so that its copies are
// asynchronous and no buffer is rewritten while a copy from it may still be queued (layout, int32: inputs [N] |
// targets [N] | document starts [N] | positions [N] | embedding plan [3N+1] | the positions' plan [3N+1]); their
// device copies; the step's readback. Documents (llmc/documents.h): doc and pos, and the positions' plan (the
// learned position embedding's backward under --reset-position-ids), are written only when a switch asks for them.
struct HostIO {
    int32_t* h_upload = nullptr;
    int n_uploads = 0;
    std::vector<MicroBatchUpload> uploads;  // [n_uploads] what the host knows of each buffer
    int32_t *inputs = nullptr, *targets = nullptr;  // [N] each: the micro-batch of the forward (targets < 0: no loss)
    int32_t *doc = nullptr, *pos = nullptr;  // [N] each: its tokens' document starts and positions (documents only)
    EmbeddingPlan plan;                     // the embedding backward's plan of the micro-batch's tokens
    EmbeddingPlan pos_plan;                 // the same of its positions (--reset-position-ids, learned positions)
    int n_valid = 0;                        // targets >= 0 in the micro-batch of the last forward
    StepReadback* h_readback = nullptr;     // pinned: the step's loss and gradient norm, read once per step
    double loss = 0;                        // mean loss of the last micro-batch read back (gpt_backward, gpt_loss)
};

// The device memory this rank holds (gpt_build, llmc/gpt/memory.cuh, which checks it against its estimate).
struct MemoryUse {
    char* buffer_memory = nullptr;  // every row of buffer_table but the counted ones
    double allocated = 0;           // bytes asked of cudaMalloc
    double allocated_weights = 0, allocated_grads = 0, allocated_optim = 0;  // of which: params; grads + head_grad;
                                                                             // master + moments
};

struct GPT {
    ModelConfig cfg;
    ParamTable table;           // this rank's tensors, offsets padded into the buckets of llmc/parallel/zero.h (for one
                                // rank the plain table: every tensor is a multiple of 8 elements, so no padding)
    int B = 0, T = 0;
    Recompute recompute = RECOMPUTE_NONE;
    bool bf16_moments = false;
    bool gelu_fusion = false;   // --gelu-fusion on: GELU in fc1's and fc2's cuBLASLt epilogues (train_gpt.cu gelu_fused)
    cudaStream_t stream = nullptr;  // the compute stream
    MatmulContext mm;
    // one allocation per kind (P: the parameter table's elements; floatX is bf16, or float in the fp32 build)
    floatX* params = nullptr;   // [P]; ZeRO 3: [shard] (a layer's weights are read from its gather buffer)
    floatX* grads = nullptr;    // [P] this rank's own gradients of the step
    float* master = nullptr;    // [P]; ZeRO >= 1: [shard]
    void* m = nullptr;          // [P] fp32 or bf16; ZeRO >= 1: [shard]
    void* v = nullptr;          // [P]; ZeRO >= 1: [shard]
    AdamWTables adam;           // AdamW over what this rank updates (dp_adamw_table, llmc/gpt/data_parallel.cuh)
    float* head_grad = nullptr; // [Vp,C] (on the stage that runs the classifier)
    // A step's gradients start with its first micro-batch, not a memset (train_gpt.cu gpt_zero_grad): that backward
    // writes the linear layers' weight gradients and head_grad (GEMMs at beta 0); the rest is zeroed over grad_zero
    std::vector<size_t> grad_zero_host;  // [n,2] the ranges of grads that backward does not write (grad_zero_ranges)
    size_t* grad_zero = nullptr;         // [n,2] device copy of grad_zero_host
    std::vector<char> chunk_started;     // [pipeline chunks] whether the step's backward of chunk c has run yet
    bool grad_accumulate = true;         // the running backward adds to the gradients (false: it writes them)
    floatX* head_n = nullptr;   // [Vp,C] --norm-head: the head's rows of unit length (the classifier's weights)
    float* head_rnorm = nullptr;  // [Vp] --norm-head: 1 / the rows' lengths
    float *rope_cos = nullptr, *rope_sin = nullptr;  // [T,hd/2] --pos rope: the rotation's tables
    float* alibi = nullptr;     // [Hl] --pos alibi: the slopes of this rank's heads (else null)
    bool attention_cudnn = false;  // --attention cudnn: cuDNN's attention instead of llmc/attention.cuh's
    bool attention_wgmma = false;  // --attention wgmma: llmc/attention.cuh's Hopper versions (forward 4, backward 7)
    Documents docs;             // packed documents (llmc/documents.h); off: each row one causal sequence
    std::vector<LayerActs> acts;    // the kept activations, [n_slots][slot_layers] (one GPU: [1][L])
    std::vector<LayerActs> layers;  // [L] by layer: what the layer code reads, a slot's acts bound to it (pp_bind)
    Scratch scratch;            // the step's buffers outside the layers
    HostIO io;                  // the micro-batches' way in, the step's readback
    MemoryUse mem;              // what this rank allocated
    // this rank's layer shapes (one GPU: the model's): heads, kv heads, ffn; vocabulary rows [v0, v0 + Vpl)
    int Hl = 0, KVl = 0, Fl = 0, Vpl = 0, v0 = 0;
    Layout L;                   // pp x dp x tp ranks, the ZeRO level, sp, vpp (one GPU: layout_single)
    Comm world;                 // every rank (the loss and the gradient norm are summed over it)
    bool has_head = true;       // this rank runs the classifier (the last pipeline stage; every rank without pp)
    std::vector<int> global;    // local spec -> its index in the whole model's table (build_param_table)
    std::vector<std::vector<TpBlock>> slice;  // local spec -> its blocks of the whole tensor (llmc/parallel/tp.h)
    // the parallel axes (llmc/gpt/tensor_parallel.cuh, data_parallel.cuh, pipeline.cuh) and fp8 (fp8_linear.cuh)
    TensorParallel tp;
    DataParallel dp;
    Pipeline pp;
    Fp8Linears fp8;

    floatX* P(int k) const {    // the weights of tensor k (ZeRO 3: in its gather buffer)
        return k < 0 ? nullptr : dp_weights(dp, params, table, k);
    }
    floatX* G(int k) const { return k < 0 ? nullptr : grads + table.specs[k].offset; }
    int head() const { return cfg.tied ? table.wte : table.lm_head; }
    // the weights the classifier multiplies by: --norm-head's unit rows (made by the forward), else the head's own
    const floatX* head_w() const { return cfg.norm_head ? head_n : P(head()); }
};
