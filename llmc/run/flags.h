// llmc/run/flags.h: command-line flags shared by train_gpt_cpu and train_gpt, read into the ModelConfig and the
// TrainConfig (llmc/train_config.h). A preset (-c) sets every model switch; any switch can then be overridden by its
// own flag. Training flags follow llm.c's short names where llm.c has one. --help prints the flags and the presets
// with their parameter counts and FLOPs per token.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "llmc/model_config.h"
#include "llmc/train_config.h"
#include "llmc/flops.h"
#include "llmc/data/dataloader.h"
#include "llmc/data/tokenizer.h"
#include "llmc/run/checkpoint.h"
#include "llmc/run/logger.h"
#include "llmc/lr_schedule.h"
#include "llmc/param_table.h"

static inline void print_presets() {
    printf("presets (params = real parameters, padding excluded; GFLOP/token = training FLOPs at seq_len):\n");
    printf("  %-20s %4s %6s %8s %6s %9s %6s %12s %10s\n", "name", "L", "C", "heads", "ffn", "vocab", "seq", "params", "GFLOP/tok");
    for (ModelConfig c : all_presets()) {
        config_finalize(c);
        ParamTable t = build_param_table(c);
        char heads[32];
        snprintf(heads, sizeof(heads), c.n_kv_head == c.n_head ? "%d" : "%d(%d)", c.n_head, c.n_kv_head);
        printf("  %-20s %4d %6d %8s %6d %9d %6d %12lld %10.2f\n", c.name.c_str(), c.n_layer, c.n_embd, heads, c.ffn,
               c.vocab_size, c.seq_len, (long long)param_count(t), model_flops_per_token(c, c.seq_len) / 1e9);
    }
}

// The end-of-document token of --reset-position-ids, --reset-attention-mask and --eod-mask-loss when --eod-token is
// not given: the end-of-text token of the run's tokenizer (GPT-2's 50256, Llama 3's 128001, a rank file's own).
// Checked against the vocabulary either way.
static inline void documents_resolve_eod(Documents* d, const std::string& tokenizer, int vocab) {
    const bool given = d->eod >= 0;
    if (d->any() && !given) {
        const char* need = "--reset-position-ids, --reset-attention-mask and --eod-mask-loss need an end-of-document token";
        if (tokenizer.empty() || tokenizer == "bytes")
            die("%s: %s; give --eod-token N", need,
                tokenizer.empty() ? "no tokenizer is known for this vocabulary (--tokenizer) to take it from"
                                  : "the byte tokenizer has none");
        if (tokenizer == "gpt2") d->eod = 50256;
        else if (tokenizer == "llama3") d->eod = 128001;
        else {
            Tokenizer t;
            tokenizer_load_auto(&t, tokenizer.c_str());
            if (t.eot == TOK_NONE) die("%s: tokenizer %s has none; give --eod-token N", need, tokenizer.c_str());
            d->eod = t.eot;
        }
    }
    if (d->eod >= vocab)
        die("%s: token %lld is outside the vocabulary [0, %d)", given ? "flag --eod-token" : "the tokenizer's end-of-text",
            (long long)d->eod, vocab);
}

static inline void print_usage(const char* prog) {
    printf("usage: %s [-c preset] [flags]\n\n", prog);
    printf("model (a preset, then any switch overridden):\n"
           "  -c NAME              preset (default gpt3_tiny; list below)\n"
           "  --layers N --embd N --heads N --kv-heads N --head-dim N --ffn N --vocab N --seq N\n"
           "  --norm layernorm|rmsnorm  --norm-eps F  --pos learned|rope|alibi  --rope-theta F\n"
           "  --rope-scaling F,LOW,HIGH,ORIG | none   Llama 3.1 frequency scaling\n"
           "  --mlp gelu|swiglu  --bias 0|1  --qkv-bias 0|1 (q, k, v only)  --tied 0|1\n"
           "  --norm-head 0|1 (LM head rows of unit length)  --qk-norm 0|1 (RMSNorm per q, k head)\n"
           "  --init-std F  --seed N\n"
           "  --naming gpt2|llama|baichuan|qwen   Hugging Face tensor names (default: gpt2 for GELU, else llama;\n"
           "                       qwen: Qwen-1's QWenLMHeadModel, qwen_7b's default)\n"
           "data:\n"
           "  -i PATH              training data: a .txt file (bytes, vocab 256), llm.c shards (glob),\n"
           "                       a Megatron .bin/.idx pair or PaddleNLP _ids.npy/_idx.npz\n"
           "                       (default data/mobydick_gpt2_train_*.bin: Moby-Dick in GPT-2 tokens)\n"
           "  -j PATH              validation data (default data/mobydick_gpt2_val_*.bin; with a .txt\n"
           "                       -i and -j \"\": the last 10%% of the text)\n"
           "  --tokenizer NAME     decodes samples: auto (bytes for .txt data, else gpt2 or llama3 by\n"
           "                       vocabulary size), bytes, gpt2, llama3 or a rank file\n"
           "  --reset-position-ids 0|1    positions restart after each end-of-document token (Megatron's)\n"
           "  --reset-attention-mask 0|1  attention stops at document boundaries\n"
           "  --eod-mask-loss 0|1  no loss where the input is the end-of-document token\n"
           "  --eod-token N        the end-of-document token (default: the tokenizer's end-of-text)\n"
           "training:\n"
           "  -b N                 micro-batch size in sequences (default 4)\n"
           "  -t N                 sequence length (default: the model's)\n"
           "  -d N                 total batch in tokens per step (gradient accumulation = d / (b*t*dp))\n"
           "  -x N                 steps (default 300)\n"
           "  -l F                 max learning rate (default 1e-3)  --min-lr F (default lr/10)\n"
           "  --warmup N           warmup steps (default min(20, steps/10))  --schedule cosine|linear|constant|wsd\n"
           "  --decay-frac F       wsd: fraction of steps spent decaying (default 0.2)\n"
           "  --beta1 F --beta2 F --eps F --wd F   AdamW (0.9, 0.95, 1e-8, 0.1; decay on matrices only)\n"
           "  --clip F             global gradient-norm clip (default 1.0; 0 disables)\n"
           "  --skip-limit N       a non-finite loss or gradient norm skips the update; more than N skips in a row\n"
           "                       end the run (default 5)\n"
           "  --spike-z Z          also skip a loss Z standard deviations above the mean of the last\n"
           "                       --spike-window N accepted losses (default 0: off; window 100)\n"
           "  --loss-scale S|dynamic  the loss times S in the backward, gradients times 1/S (default 1: none);\n"
           "                       dynamic: Megatron's rule, --initial-loss-scale F (2^32) --loss-scale-window N\n"
           "                       (1000) --hysteresis N (2) --min-loss-scale F (1); an overflow skips the step\n"
           "  -v N                 validation every N steps (default 50)  --val-batches N (default 10)\n"
           "  --eval FILE          multiple-choice accuracy every -v steps and at the end: HellaSwag's jsonl\n"
           "                       (ctx, endings, label; tokenized by --tokenizer) or llm.c's eval .bin\n"
           "  --eval-scores FILE   append each ending's summed loss per evaluation (jsonl)\n"
           "  -s N                 print a sample every N steps (default 0: only at the end)  -g N tokens\n"
           "output and checkpoints:\n"
           "  -o DIR               logs and checkpoints (default out; \"\" for none)\n"
           "  -n N                 checkpoint every N steps (default 0: only at the end if -o is set)\n"
           "  --keep N             keep the last N checkpoints (default 2)\n"
           "  --resume auto|PATH   continue from the latest complete checkpoint in -o, or from PATH\n"
           "  --init-from FILE     initial weights from a safetensors file (Hugging Face names)\n"
           "  --export-init FILE   write the initial weights as safetensors and exit\n"
           "  --save-safetensors FILE   write the final weights as safetensors\n"
           "  --log-format LIST    also print the lines benchmark harnesses parse: megatron, flagperf, paddle\n"
           "                       (comma-separated), all or none (default none; docs/logs.md)\n"
           "parallel layout (run under mpirun -np N, N = dp * tp * pp):\n"
           "  --tp N --pp N        tensor- and pipeline-parallel degrees (default 1); dp = N / (tp*pp)\n"
           "  --dp N               data-parallel degree, checked against N / (tp*pp)\n"
           "  --zero 0|1|2|3       ZeRO level over dp (default 0)\n"
           "  --sp 0|1             sequence parallelism in the norm and residual regions (default 0)\n"
           "  --vpp N              model chunks per pipeline stage, interleaved 1F1B (default 1)\n"
           "  --layout A,B,...     layers per chunk (pp*vpp counts; default: even)\n"
           "  --comm-timeout S     a collective or pipeline send waiting longer than S seconds ends every rank\n"
           "                       with a message naming the rank, the group and the operation (default 600:\n"
           "                       room for a first step's warm-up; 0: no timeout)\n"
           "  --io-timeout S       the same for a wait on another rank's disk work: a checkpoint written or read,\n"
           "                       the safetensors export (default 7200; 0: no timeout)\n"
           "plan (llmc/parallel/planner.h, docs/plan.md; no model is allocated):\n"
           "  --plan               print the memory per pipeline stage, the largest micro-batch that fits and the\n"
           "                       predicted step time of the layout, then exit\n"
           "  --world N            ranks the plan is for (default: mpirun's, or dp*tp*pp)\n"
           "  --gpu-mem GIB        memory per GPU the plan must fit (default: no limit); with no layout flag\n"
           "                       (--tp --pp --dp --zero --sp --vpp --layout -b) the planner picks the fastest\n"
           "                       layout that fits, prints why, and runs it\n"
           "  --gemm-tflops F      GEMM ceiling per GPU (default 593.4 = 0.6 x the H100 bf16 peak)\n"
           "  --link-gbs F         bus bandwidth inside a node, GB/s per direction (default 450: NVLink 4)\n"
           "  --node-gbs F         bandwidth across nodes, GB/s per GPU (default 50: 400 Gb/s)\n"
           "  --gpus-per-node N    GPUs per node (default 8)\n"
           "  --comm-latency-us F  latency per collective or send (default 10)\n\n");
    print_presets();
}

// Every path a flag was given is checked as the flags are read, by the check of the code that opens it (the same
// message, naming the flag): a run that never opens it still stops on a bad one before any work. Such runs: --tokenizer
// with -g 0 or several ranks (no sample); --export-init (only --init-from is read); --plan; the CUDA trainer's
// --print-config and --estimate-memory. A run that opens it later says nothing new. Names are not paths (--tokenizer
// auto, bytes, gpt2 or llama3; --resume auto), and a default is checked where it is used.
static inline bool path_flag_given(const char* flag, const std::string& value) {
    if (value.empty()) return false;
    for (const PathFlag& f : path_flags())
        if (f.flag == flag) return true;
    return false;
}
static inline void check_given_paths(const TrainConfig& tc) {
    struct stat st;
    if (path_flag_given("-i", tc.train_data)) loader_check(tc.train_data);
    if (path_flag_given("-j", tc.val_data)) loader_check(tc.val_data);
    if (path_flag_given("--tokenizer", tc.tokenizer) && !tokenizer_is_name(tc.tokenizer)) tokenizer_check(tc.tokenizer);
    if (path_flag_given("--init-from", tc.init_from)) close(open_input(tc.init_from, "--init-from", true, &st));
    if (path_flag_given("--eval", tc.eval)) close(open_input(tc.eval, "--eval", true, &st));
    if (path_flag_given("--eval-scores", tc.eval_scores)) check_output_file(tc.eval_scores, "--eval-scores");
    if (path_flag_given("--resume", tc.resume) && tc.resume != "auto") checkpoint_check_dir(tc.resume);
    if (path_flag_given("-o", tc.out_dir)) check_output_dir(tc.out_dir, "-o");
    if (path_flag_given("--export-init", tc.export_init)) check_output_file(tc.export_init, "--export-init");
    if (path_flag_given("--save-safetensors", tc.save_safetensors)) check_output_file(tc.save_safetensors, "--save-safetensors");
}

// Parses argv into the model and training configs. Unknown flags, missing values, bad
// numbers and bad paths (check_given_paths) stop with a message naming the flag.
static inline void parse_args(int argc, char** argv, ModelConfig* mc, TrainConfig* tc) {
    bool data_given = false, val_given = false;
    const char* rope_flag = nullptr;  // --rope-theta or --rope-scaling, given
    // first pass: the preset, so later switches override it
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") { print_usage(argv[0]); exit(0); }
        if ((a == "-c" || a == "--config") && i + 1 < argc) tc->preset = argv[i + 1];
    }
    if (!find_preset(tc->preset, mc)) {
        fprintf(stderr, "error: unknown preset '%s' (flag -c).\n", tc->preset.c_str());
        print_presets();
        exit(1);
    }
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--plan") { tc->plan = true; continue; }
        if (i + 1 >= argc) die("flag '%s' is unknown or lacks a value (see --help)", a.c_str());
        const char* v = argv[++i];
        auto as_int = [&]() -> long {
            char* end = nullptr;
            long x = strtol(v, &end, 10);
            if (!*v || *end) die("flag %s expects an integer, got '%s'", a.c_str(), v);
            return x;
        };
        auto as_pos = [&]() -> int {
            long x = as_int();
            if (x <= 0 || x > 2147483647L) die("flag %s expects a positive integer below 2^31, got '%s'", a.c_str(), v);
            return (int)x;
        };
        auto as_f = [&]() -> double {
            char* end = nullptr;
            double x = strtod(v, &end);
            if (!*v || *end) die("flag %s expects a number, got '%s'", a.c_str(), v);
            return x;
        };
        // the plan's description of a machine: a number above 0 and at most hi, a bound no real device reaches
        // (a typo such as 1e30 would otherwise pass as an unlimited machine)
        auto as_machine = [&](double hi, const char* unit) -> double {
            double x = as_f();
            if (!(x > 0) || !(x <= hi)) die("flag %s expects %s above 0 and at most %g, got '%s'", a.c_str(), unit, hi, v);
            return x;
        };
        auto as_scale = [&]() -> double {  // a loss scale: a finite number above 0
            double x = as_f();
            if (!(x > 0) || !std::isfinite(x)) die("flag %s expects a number above 0, got '%s'", a.c_str(), v);
            return x;
        };
        auto as_bool = [&]() -> bool {
            std::string s = v;
            if (s == "1" || s == "true") return true;
            if (s == "0" || s == "false") return false;
            die("flag %s expects 0 or 1, got '%s'", a.c_str(), v);
        };
        std::string s = v;
        if (a == "--tp" || a == "--pp" || a == "--dp" || a == "--zero" || a == "--sp" || a == "--vpp" || a == "--layout" || a == "-b")
            tc->layout_given = true;
        if (a == "-c" || a == "--config") {}
        else if (a == "--layers") mc->n_layer = as_pos();
        else if (a == "--embd") mc->n_embd = as_pos();
        else if (a == "--heads") { mc->n_head = as_pos(); mc->head_dim = 0; }
        else if (a == "--kv-heads") mc->n_kv_head = as_pos();
        else if (a == "--head-dim") mc->head_dim = as_pos();
        else if (a == "--ffn") mc->ffn = as_pos();
        else if (a == "--vocab") mc->vocab_size = as_pos();
        else if (a == "--seq") mc->seq_len = as_pos();
        else if (a == "--norm") {
            if (s == "layernorm") mc->norm = NORM_LAYERNORM;
            else if (s == "rmsnorm") mc->norm = NORM_RMSNORM;
            else die("flag --norm expects layernorm or rmsnorm, got '%s'", v);
        } else if (a == "--norm-eps") mc->norm_eps = (float)as_f();
        else if (a == "--pos") {
            if (s == "learned") mc->pos = POS_LEARNED;
            else if (s == "rope") mc->pos = POS_ROPE;
            else if (s == "alibi") mc->pos = POS_ALIBI;
            else die("flag --pos expects learned, rope or alibi, got '%s'", v);
        } else if (a == "--rope-theta") {
            mc->rope_theta = (float)as_f();
            rope_flag = "--rope-theta";
        } else if (a == "--rope-scaling") {
            rope_flag = "--rope-scaling";
            if (s == "none") mc->rope_factor = 0.0f;
            else if (sscanf(v, "%f,%f,%f,%d", &mc->rope_factor, &mc->rope_low_freq, &mc->rope_high_freq, &mc->rope_orig_ctx) != 4)
                die("flag --rope-scaling expects FACTOR,LOW,HIGH,ORIG (e.g. 32,1,4,8192) or none, got '%s'", v);
        } else if (a == "--mlp") {
            if (s == "gelu") mc->mlp = MLP_GELU;
            else if (s == "swiglu") mc->mlp = MLP_SWIGLU;
            else die("flag --mlp expects gelu or swiglu, got '%s'", v);
        } else if (a == "--bias") mc->bias = as_bool();
        else if (a == "--qkv-bias") mc->qkv_bias = as_bool();
        else if (a == "--tied") mc->tied = as_bool();
        else if (a == "--norm-head") mc->norm_head = as_bool();
        else if (a == "--qk-norm") mc->qk_norm = as_bool();
        else if (a == "--naming") {
            if (s == "gpt2") mc->naming = NAMING_GPT2;
            else if (s == "llama") mc->naming = NAMING_LLAMA;
            else if (s == "baichuan") mc->naming = NAMING_BAICHUAN;
            else if (s == "qwen") mc->naming = NAMING_QWEN;
            else die("flag --naming expects gpt2, llama, baichuan or qwen, got '%s'", v);
        }
        else if (a == "--init-std") mc->init_std = (float)as_f();
        else if (a == "--seed") tc->seed = (uint64_t)as_int();
        else if (a == "-i") { tc->train_data = s; data_given = true; note_path_flag("-i", s); }
        else if (a == "-j") { tc->val_data = s; val_given = true; note_path_flag("-j", s); }
        else if (a == "--tokenizer") { tc->tokenizer = s; note_path_flag("--tokenizer", s); }
        else if (a == "-o") { tc->out_dir = s; note_path_flag("-o", s); }
        else if (a == "-b") tc->B = as_pos();
        else if (a == "-t") tc->T = as_pos();
        else if (a == "-d") tc->total_batch = as_pos();
        else if (a == "-x") tc->steps = as_pos();
        else if (a == "-l") tc->lr = as_f();
        else if (a == "--min-lr") tc->min_lr = as_f();
        else if (a == "--warmup") { long w = as_int(); if (w < 0) die("flag --warmup must be >= 0"); tc->warmup = (int)w; }
        else if (a == "--schedule") { if (!lr_schedule_from_name(s, &tc->schedule)) die("flag --schedule expects cosine, linear, constant or wsd, got '%s'", v); }
        else if (a == "--decay-frac") tc->decay_frac = as_f();
        else if (a == "--beta1") tc->beta1 = as_f();
        else if (a == "--beta2") tc->beta2 = as_f();
        else if (a == "--eps") tc->eps = as_f();
        else if (a == "--wd") tc->weight_decay = as_f();
        else if (a == "--clip") tc->grad_clip = as_f();
        else if (a == "--skip-limit") { long x = as_int(); if (x < 0 || x > 1000000) die("flag --skip-limit expects 0 to 1000000, got '%s'", v); tc->skip_limit = (int)x; }
        else if (a == "--spike-z") { tc->spike_z = as_f(); if (!(tc->spike_z >= 0) || !std::isfinite(tc->spike_z)) die("flag --spike-z expects a number >= 0 (0: off), got '%s'", v); }
        else if (a == "--spike-window") tc->spike_window = as_pos();
        else if (a == "--loss-scale") {
            tc->loss_scaling.dynamic = s == "dynamic";
            if (!tc->loss_scaling.dynamic) {
                char* end = nullptr;
                const double x = strtod(v, &end);
                if (!*v || *end || !(x > 0) || !std::isfinite(x))
                    die("flag --loss-scale expects a number above 0 (1: none) or 'dynamic', got '%s'", v);
                tc->loss_scaling.scale = x;
            }
        }
        else if (a == "--initial-loss-scale") tc->loss_scaling.initial = as_scale();
        else if (a == "--min-loss-scale") tc->loss_scaling.min_scale = as_scale();
        else if (a == "--loss-scale-window") tc->loss_scaling.window = as_pos();
        else if (a == "--hysteresis") tc->loss_scaling.hysteresis = as_pos();
        else if (a == "-v") { long x = as_int(); if (x < 0) die("flag -v must be >= 0"); tc->val_every = (int)x; }
        else if (a == "--val-batches") tc->val_batches = as_pos();
        else if (a == "--reset-position-ids") tc->docs.reset_positions = as_bool();
        else if (a == "--reset-attention-mask") tc->docs.reset_mask = as_bool();
        else if (a == "--eod-mask-loss") tc->docs.mask_loss = as_bool();
        else if (a == "--eod-token") {
            const long e = as_int();
            if (e < 0) die("flag --eod-token expects a token id >= 0, got '%s'", v);
            tc->docs.eod = e;
        }
        else if (a == "--eval") { tc->eval = s; note_path_flag("--eval", s); }
        else if (a == "--eval-scores") { tc->eval_scores = s; note_path_flag("--eval-scores", s); }
        else if (a == "-s") { long x = as_int(); if (x < 0) die("flag -s must be >= 0"); tc->sample_every = (int)x; }
        else if (a == "-g") { long x = as_int(); if (x < 0) die("flag -g must be >= 0"); tc->gen_tokens = (int)x; }
        else if (a == "-n") { long x = as_int(); if (x < 0) die("flag -n must be >= 0"); tc->ckpt_every = (int)x; }
        else if (a == "--keep") tc->keep_last = as_pos();
        else if (a == "--resume") { tc->resume = s; note_path_flag("--resume", s); }
        else if (a == "--init-from") { tc->init_from = s; note_path_flag("--init-from", s); }
        else if (a == "--export-init") { tc->export_init = s; note_path_flag("--export-init", s); }
        else if (a == "--save-safetensors") { tc->save_safetensors = s; note_path_flag("--save-safetensors", s); }
        else if (a == "--log-format") { if (!log_formats_parse(s, &tc->log_formats)) die("flag --log-format expects megatron, flagperf, paddle (comma-separated), all or none, got '%s'", v); }
        else if (a == "--tp") tc->tp = as_pos();
        else if (a == "--pp") tc->pp = as_pos();
        else if (a == "--dp") tc->dp = as_pos();
        else if (a == "--zero") { long z = as_int(); if (z < 0 || z > 3) die("flag --zero expects 0, 1, 2 or 3, got '%s'", v); tc->zero = (int)z; }
        else if (a == "--sp") tc->sp = as_bool();
        else if (a == "--vpp") tc->vpp = as_pos();
        else if (a == "--layout") tc->layout = s;
        else if (a == "--comm-timeout") {
            tc->comm_timeout = as_f();
            if (!(tc->comm_timeout >= 0) || !std::isfinite(tc->comm_timeout))
                die("flag --comm-timeout expects seconds >= 0 (0: no timeout), got '%s'", v);
        } else if (a == "--io-timeout") {
            tc->io_timeout = as_f();
            if (!(tc->io_timeout >= 0) || !std::isfinite(tc->io_timeout))
                die("flag --io-timeout expects seconds >= 0 (0: no timeout), got '%s'", v);
        } else if (a == "--world") {
            tc->world = as_pos();
            if (tc->world > 1048576) die("flag --world expects ranks from 1 to 1048576, got '%s'", v);
        } else if (a == "--gpu-mem") tc->gpu_mem_gib = as_machine(4096, "GiB per GPU");
        else if (a == "--gemm-tflops") tc->gemm_tflops = as_machine(20000, "TFLOP/s per GPU");
        else if (a == "--link-gbs") tc->link_gbs = as_machine(10000, "GB/s per direction");
        else if (a == "--node-gbs") tc->node_gbs = as_machine(10000, "GB/s per GPU");
        else if (a == "--gpus-per-node") {
            tc->gpus_per_node = as_pos();
            if (tc->gpus_per_node > 1024) die("flag --gpus-per-node expects 1 to 1024, got '%s'", v);
        } else if (a == "--comm-latency-us") {
            tc->comm_latency_us = as_f();
            if (!(tc->comm_latency_us >= 0) || !(tc->comm_latency_us <= 1e6))
                die("flag --comm-latency-us expects microseconds from 0 to 1e6, got '%s'", v);
        }
        else die("unknown flag '%s' (see --help)", a.c_str());
    }
    config_finalize(*mc);
    if (rope_flag && mc->pos == POS_ALIBI)
        die("flag %s sets RoPE, but --pos alibi has no rotary positions (ALiBi biases the attention scores instead)",
            rope_flag);
    if (data_given && !val_given) tc->val_data = "";  // the default validation set belongs to the default data
    if (tc->tokenizer == "auto") {
        tc->tokenizer = ends_with(tc->train_data, ".txt") ? "bytes" : mc->vocab_size == 50257 ? "gpt2" : mc->vocab_size == 128256 ? "llama3" : "";
    }
    documents_resolve_eod(&tc->docs, tc->tokenizer, mc->vocab_size);
    if (tc->loss_scaling.dynamic && tc->loss_scaling.min_scale > tc->loss_scaling.initial)
        die("flag --min-loss-scale %g exceeds --initial-loss-scale %g", tc->loss_scaling.min_scale, tc->loss_scaling.initial);
    if (tc->T == 0) tc->T = mc->seq_len;
    if (tc->T > mc->seq_len) die("flag -t %d exceeds the model's sequence length %d (raise --seq)", tc->T, mc->seq_len);
    if (tc->min_lr < 0) tc->min_lr = tc->lr / 10.0;
    if (tc->warmup < 0) tc->warmup = std::min(20, tc->steps / 10);
    if (tc->warmup > tc->steps) die("flag --warmup %d exceeds the number of steps -x %d", tc->warmup, tc->steps);
    check_given_paths(*tc);
}
