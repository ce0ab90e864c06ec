// llmc/gpt/options.cuh: the flags of the CUDA trainer only (--recompute, --bf16-moments, --fp8 ...; the rest are
// llmc/run/flags.h's, shared with train_gpt_cpu), their usage text, and the shape checks of its kernels (head dim,
// widths the vectorised kernels need, per tensor-parallel rank).
#pragma once

#include <climits>
#include <string>
#include <vector>
#include "llmc/fp8.cuh"
#include "llmc/model_config.h"
#include "llmc/norm.cuh"  // NORM_MAX_C
#include "llmc/run/flags.h"
#include "llmc/parallel/layout.h"

// Flags of the CUDA trainer only (the rest are llmc/run/flags.h's, shared with train_gpt_cpu).

static const double NCCL_MEM_DEFAULT_GIB = 1.5;

// From the least memory to the most recompute: none keeps everything, act recomputes the MLP activation alone
// (memory-bound, no FLOPs), selective also the attention forward, full the whole layer. (The values are the layout
// planner's codes, act added last.)
enum Recompute { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, RECOMPUTE_ACT };

static const char* recompute_name(Recompute r) {
    return r == RECOMPUTE_FULL ? "full" : r == RECOMPUTE_SELECTIVE ? "selective" : r == RECOMPUTE_ACT ? "act" : "none";
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
    // --nccl-mem: the device memory the plan leaves to each NCCL communicator a rank holds (its channel, peer and,
    // on NVSwitch machines, NVLS buffers; docs/plan.md). Published figures: about 1.6 GB for one communicator and
    // up to about 6 GB for a rank in three or more (NVIDIA/nccl issues 864 and 986), hence 1.5 GiB each by default.
    double nccl_gib = NCCL_MEM_DEFAULT_GIB;
    int profile = 0;               // --profile N: the step profile of the N steps after the first (llmc/profile.cuh)
    bool attention_cudnn = false;  // --attention cudnn: cuDNN's flash attention (llmc/attention_cudnn.cuh, USE_CUDNN=1)
    bool attention_wgmma = false;  // --attention wgmma: llmc/attention.cuh's Hopper versions (4 and 7)
    std::string ceilings;          // --ceilings FILE: the profile's measured ceilings (build/ceilings --json)
    bool gelu_fusion = false;      // --gelu-fusion on: GELU in fc1's and fc2's cuBLASLt epilogues (llmc/matmul.cuh)
    std::string gemm_algos = "heuristic";  // --gemm-algos heuristic|tune|FILE (llmc/matmul_algos.cuh)
};

static void print_cuda_usage() {
    printf("CUDA trainer flags (besides those below):\n"
           "  --recompute auto|none|act|selective|full   activation recompute: act recomputes the MLP activation\n"
           "                       from fc1's output, selective also the attention output, full every layer from its\n"
           "                       input, in the backward; auto (the default) picks on one GPU the cheapest that fits\n"
           "                       the free memory (none, act, selective, full), with more ranks and no layout flag the\n"
           "                       layout planner's choice, with more ranks and layout flags none\n"
           "  --bf16-moments 0|1   AdamW moments in bf16 instead of fp32 (default 0)\n"
           "  --gelu-fusion on|off GELU models: fc1's GEMM applies GELU in cuBLASLt's epilogue (GELU_AUX_BIAS) and fc2's\n"
           "                       input gradient its derivative and fc1's bias gradient (DGELU_BGRAD), instead of the\n"
           "                       separate kernels (default off until measured on a GPU; act and dfc1 may differ in the\n"
           "                       last bit). SwiGLU models and --fp8's GEMMs are never fused; where cuBLASLt has no\n"
           "                       algorithm it falls back to off, said once. Under --recompute act and selective only\n"
           "                       the backward is fused, so that the recomputed act is the forward's\n"
           "  --print-config FILE  write the model config as JSON (train_gpt.py --config) and exit\n"
           "  --estimate-memory GIB   print the memory estimate of this run against GIB of device memory and\n"
           "                       exit (no GPU needed); status 1 when it does not fit\n"
           "  --fp8 none|delayed|current   fp8 GEMMs in every layer's QKV, attention-out, fc1 (gate-up) and fc2\n"
           "                       (default none; a GPU of compute capability 8.9+, the bf16 build): E4M3 inputs\n"
           "                       and weights, E5M2 output gradients, one scale per tensor, from the amax history\n"
           "                       (delayed) or from the tensor's own amax (current); embeddings, LM head, norms\n"
           "                       and attention stay bf16 (docs/fp8.md)\n"
           "  --fp8-history N      delayed scaling: amaxes kept per tensor (default %d, TransformerEngine's)\n"
           "  --fp8-margin M       scale = fp8 max * 2^-M / amax, M in 0..8 (default %d, TransformerEngine's)\n"
           "  --attention flash|wgmma|cudnn   the attention kernels: flash, our own (llmc/attention.cuh, the default),\n"
           "                       wgmma, our own Hopper kernels (its versions 4 and 7: sm_90a; elsewhere flash), or\n"
           "                       cudnn, cuDNN's (a build with `make train_gpt USE_CUDNN=1`; bf16 or fp16, no ALiBi)\n"
           "  --nccl-mem GIB       device memory the plan leaves to each NCCL communicator of a rank (default %g;\n"
           "                       NCCL_NVLS_ENABLE=0 makes NCCL take far less on NVSwitch machines: docs/plan.md)\n"
           "  --profile N          time every kernel class (each linear's forward, dgrad and wgrad, the LM head,\n"
           "                       attention, norms, activations, embeddings, cross-entropy, grad norm, AdamW, the\n"
           "                       dp / tp / pp communication) with CUDA events over the N steps after the first,\n"
           "                       and print rank 0's table: calls, ms per step, share, achieved TFLOP/s or GB/s\n"
           "                       against the ceiling, what no class accounts for, MFU and HFU (default 0: off;\n"
           "                       N at most -x minus 1; docs/cuda_trainer.md). NVTX ranges mark the same classes\n"
           "  --ceilings FILE      the profile's ceilings, measured: build/ceilings --json FILE (dev/probe/ceilings.cu);\n"
           "                       default: the device's nominal bf16 peak and memory bandwidth\n"
           "  --gemm-algos heuristic|tune|FILE   each GEMM's cuBLASLt algorithm: the heuristic's first (default);\n"
           "                       tune: the fastest of the heuristic's, timed at the GEMM's first call, the choices\n"
           "                       printed after the first step and written to OUT/gemm_algos.txt; FILE: a tune run's\n"
           "                       choices replayed (llmc/matmul_algos.cuh)\n\n",
           FP8_DEFAULT_HISTORY_LEN, FP8_DEFAULT_MARGIN, NCCL_MEM_DEFAULT_GIB);
}

// Takes the CUDA-only flags out of argv (the rest go to parse_args). Returns the remaining argv.
static std::vector<char*> parse_cuda_flags(int argc, char** argv, CudaOptions* o) {
    std::vector<char*> rest{argv[0]};
    bool history_given = false, margin_given = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") print_cuda_usage();
        const bool ours = a == "--recompute" || a == "--bf16-moments" || a == "--print-config" || a == "--estimate-memory" ||
                          a == "--fp8" || a == "--fp8-history" || a == "--fp8-margin" || a == "--nccl-mem" ||
                          a == "--profile" || a == "--ceilings" || a == "--attention" || a == "--gelu-fusion" ||
                          a == "--gemm-algos";
        if (!ours) { rest.push_back(argv[i]); continue; }
        if (i + 1 >= argc) die("flag %s lacks a value (see --help)", a.c_str());
        std::string v = argv[++i];
        if (a == "--recompute") {
            o->recompute_given = v != "auto";
            if (v == "auto") o->recompute = RECOMPUTE_NONE;  // chosen once free memory is known (train_gpt.cu rank_setup)
            else if (v == "none") o->recompute = RECOMPUTE_NONE;
            else if (v == "act") o->recompute = RECOMPUTE_ACT;
            else if (v == "selective") o->recompute = RECOMPUTE_SELECTIVE;
            else if (v == "full") o->recompute = RECOMPUTE_FULL;
            else die("flag --recompute expects auto, none, act, selective or full, got '%s'", v.c_str());
        } else if (a == "--attention") {
            if (v != "flash" && v != "cudnn" && v != "wgmma")
                die("flag --attention expects flash, wgmma or cudnn, got '%s'", v.c_str());
            o->attention_cudnn = v == "cudnn";
            o->attention_wgmma = v == "wgmma";
        } else if (a == "--gemm-algos") {
            if (v.empty()) die("flag --gemm-algos expects heuristic, tune or a file a tune run wrote, got ''");
            o->gemm_algos = v;
            if (v != "heuristic" && v != "tune") note_path_flag("--gemm-algos", v);
        } else if (a == "--gelu-fusion") {
            if (v != "on" && v != "off") die("flag --gelu-fusion expects on or off, got '%s'", v.c_str());
            o->gelu_fusion = v == "on";
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
        } else if (a == "--profile") {
            o->profile = (int)parse_long("flag --profile", v.c_str(), 0, INT_MAX);  // a number of steps
        } else if (a == "--ceilings") {
            o->ceilings = v;
            note_path_flag("--ceilings", v);
        } else if (a == "--nccl-mem") {
            char* end = nullptr;
            o->nccl_gib = strtod(v.c_str(), &end);
            if (v.empty() || *end || !(o->nccl_gib >= 0 && o->nccl_gib <= 1024))
                die("flag --nccl-mem expects GiB per communicator in [0, 1024], got '%s'", v.c_str());
        } else {
            char* end = nullptr;
            o->estimate_gib = strtod(v.c_str(), &end);
            if (v.empty() || *end || !(o->estimate_gib > 0 && o->estimate_gib <= 4096))
                die("flag --estimate-memory expects GiB per GPU above 0 and at most 4096, got '%s'", v.c_str());
        }
    }
    if (history_given && o->fp8.recipe != FP8_DELAYED)
        die("flag --fp8-history sets delayed scaling's amax history: it needs --fp8 delayed");
    if (margin_given && o->fp8.recipe == FP8_NONE) die("flag --fp8-margin needs --fp8 delayed or current");
    if (!o->ceilings.empty() && o->profile == 0) die("flag --ceilings sets the ceilings of the step profile: it needs --profile N");
    if (o->fp8.recipe != FP8_NONE) fp8_require_build();
#if defined(ENABLE_FP32)
    if (o->attention_cudnn || o->attention_wgmma)
        die("--attention %s needs a 16-bit build, bf16 or fp16 (this binary was built with PRECISION=%s)",
            o->attention_cudnn ? "cudnn" : "wgmma", PRECISION_UPPER);
#elif !defined(USE_CUDNN)
    if (o->attention_cudnn)
        die("--attention cudnn: this train_gpt was built without cuDNN; build it with `make train_gpt USE_CUDNN=1`");
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
    // 32-bit indices of kernels that no preset comes near: RoPE's thread per token, head and 8 pairs (llmc/rope.cuh:
    // tokens x (H + KV) x hd / 16 threads, at most tokens x heads x 16) and the fp32 build's warp per token and head
    // (llmc/attention_rowwise.cuh: 32 threads each), at most INT_MAX / 32 tokens x heads for both; fp8's transposing
    // cast is check_fp8_tokens'.
    const long long N = (long long)B * T;
    if (N * c.n_head * 32 > INT_MAX)
        die("-b %d x -t %d = %lld tokens x %d heads: past the 32-bit thread index of the kernels that run per token and "
            "head (tokens x heads at most %d): lower -b or -t", B, T, N, c.n_head, INT_MAX / 32);
}

// --fp8: the transposing casts take at most 65535 x 32 rows (tokens) of a micro-batch.
static void check_fp8_tokens(int B, int T) {
    if ((long long)B * T > 65535LL * 32)
        die("-b %d x -t %d = %lld tokens with --fp8: past the fp8 transposing cast's grid (at most %d tokens per "
            "micro-batch): lower -b or -t", B, T, (long long)B * T, 65535 * 32);
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
