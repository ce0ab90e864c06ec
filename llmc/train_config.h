// llmc/train_config.h: the settings of a training run (TrainConfig), shared by both trainers: data and its documents,
// batch, steps,
// optimizer and schedule, output and checkpoints, the parallel layout and the plan, the numerics guard. A plain
// struct with the defaults; llmc/run/flags.h fills it from the command line, llmc/parallel/ reads the layout and
// the plan from it, as the model's own switches are a ModelConfig (llmc/model_config.h).
#pragma once
#include <cstdint>
#include <string>
#include "llmc/documents.h"
#include "llmc/loss_scale.h"
#include "llmc/lr_schedule.h"

struct TrainConfig {
    std::string preset = "gpt3_tiny";
    std::string train_data = "data/mobydick_gpt2_train_*.bin";  // .txt: bytes; else token files
    std::string val_data = "data/mobydick_gpt2_val_*.bin";      // empty: the last 10% of a .txt
    std::string out_dir = "out";                   // logs and checkpoints; "" disables both
    int B = 4;                 // micro-batch (sequences)
    int T = 0;                 // sequence length; 0: the model's seq_len
    long total_batch = 0;      // tokens per optimizer step; 0: B * T * dp (no accumulation)
    int steps = 300;
    double lr = 1e-3, min_lr = -1.0;   // min_lr < 0: lr / 10
    int warmup = -1;           // -1: min(20, steps / 10)
    LrSchedule schedule = LR_COSINE;
    double decay_frac = 0.2;
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, grad_clip = 1.0;
    int val_every = 50, val_batches = 10;
    std::string eval = "";           // --eval: a multiple-choice file (HellaSwag jsonl or llm.c's .bin), every -v steps
    std::string eval_scores = "";    // --eval-scores: each ending's summed loss per evaluation, appended as jsonl
    Documents docs;                  // --reset-position-ids, --reset-attention-mask, --eod-mask-loss, --eod-token
    int sample_every = 0, gen_tokens = 256;
    int ckpt_every = 0, keep_last = 2;
    std::string resume = "";         // "auto": latest complete checkpoint in out_dir; or a path
    std::string init_from = "";      // safetensors with Hugging Face names
    std::string export_init = "";    // write the initial weights (safetensors) and exit
    std::string save_safetensors = "";  // write the final weights (safetensors)
    uint64_t seed = 1337;
    std::string tokenizer = "auto";  // decodes samples: auto = bytes for .txt, gpt2 / llama3 by vocab
    // parallel layout (docs/design.md section 4): world = pp x dp x tp ranks under mpirun
    int tp = 1, pp = 1, dp = 0;      // dp 0: world / (tp * pp)
    int zero = 0;                    // ZeRO level over dp: 0, 1, 2 or 3
    bool sp = false;                 // sequence parallelism (needs tp > 1 to matter)
    int vpp = 1;                     // model chunks per pipeline stage (interleaved 1F1B)
    std::string layout = "";         // layers per chunk, e.g. "3,5"; empty: even
    // --comm-timeout: seconds a collective or pipeline send may wait before every rank is ended with a
    // message (llmc/parallel/comm_timeout.h); 0: none. 600 leaves room for the slow waits of a healthy run: the
    // first step's NCCL / cuBLAS warm-up.
    double comm_timeout = 600;
    // --io-timeout: the same for the waits that cover another rank's disk work (a checkpoint written, read or
    // exported, comm_io_wait); 0: none. 7200 s: 80 GB of checkpoint at 11 MB/s.
    double io_timeout = 7200;
    bool layout_given = false;       // any of --tp --pp --dp --zero --sp --vpp --layout -b was given
    // the plan (llmc/parallel/planner.h, docs/plan.md)
    bool plan = false;               // --plan: print the plan and exit, allocating nothing
    int world = 0;                   // --world: ranks the plan is for; 0: mpirun's, or dp*tp*pp
    double gpu_mem_gib = 0;          // --gpu-mem: memory per GPU in GiB; 0: no limit
    double gemm_tflops = 593.4;      // --gemm-tflops: 0.6 x the H100 SXM bf16 dense peak (989)
    double link_gbs = 450;           // --link-gbs: inside a node, per direction (NVLink 4: 900 both ways)
    double node_gbs = 50;            // --node-gbs: across nodes, per GPU (a 400 Gb/s NIC)
    double comm_latency_us = 10;     // --comm-latency-us: per collective or send
    int gpus_per_node = 8;           // --gpus-per-node
    int log_formats = 0;             // --log-format: LOG_* bits of llmc/run/logger.h (harness log lines)
    // the numerics guard (llmc/run/guard.h)
    int skip_limit = 5;              // --skip-limit: skipped updates in a row before the run ends
    double spike_z = 0;              // --spike-z: skip a loss this many standard deviations above the window's mean; 0 off
    int spike_window = 100;          // --spike-window: accepted losses the spike guard looks at
    LossScaling loss_scaling;        // --loss-scale and the dynamic scale's flags (llmc/loss_scale.h)
};
