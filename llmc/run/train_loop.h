// llmc/run/train_loop.h: the run around the steps, written once for both trainers.
//   RunFiles, run_files_open   every file a run reads, opened and checked before the model is allocated
//   Trainer                    what a trainer hands the loop: its step, its forward over a few batches (evaluation),
//                              its last logits (sampling), its checkpoint and its export
//   run_forward_split          forward-only passes split over the data-parallel ranks (validation, --eval)
//   run_validate, run_mc_eval  the validation loss; --eval's accuracies
//   run_sample                 a sample (one rank only)
//   run_logger_open            the logger with the run's figures
//   run_train                  the loop: each step's micro-batches, learning rate, step, log line and guard, then
//                              validation, --eval, samples and checkpoints when due, the stop signals; then the end
//                              (a sample, --save-safetensors, the summary)
// Each trainer's main is its setup (flags, ranks, layout, model, weights), one call of run_train, and its teardown.
// The loop's functions take the world's Comm as a template parameter: the CPU trainer's is MPI's
// (llmc/parallel/comm_mpi.h), the CUDA trainer's NCCL's (llmc/parallel/comm.cuh); comm_io_wait, comm_barrier,
// comm_host_sum and comm_host_max are each backend's own.
#pragma once
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>
#include "llmc/lr_schedule.h"
#include "llmc/model_config.h"
#include "llmc/train_config.h"
#include "llmc/utils.h"
#include "llmc/data/dataloader.h"
#include "llmc/data/tokenizer.h"
#include "llmc/parallel/comm_timeout.h"
#include "llmc/parallel/layout.h"
#include "llmc/run/checkpoint.h"
#include "llmc/run/guard.h"
#include "llmc/run/logger.h"
#include "llmc/run/mc_eval.h"
#include "llmc/run/sampling.h"
#include "llmc/run/signals.h"
#include "llmc/run/test_hooks.h"

typedef std::vector<std::vector<int32_t>> Batches;  // micro-batches of token ids, each [B*T]

// What a run reads: the tokenizer that decodes samples (--tokenizer; none: token ids; not opened when no sample is
// drawn: -g 0, or several ranks, which do not sample), the checkpoint to resume (-o and --resume, checkpoint_resolve),
// --init-from, --eval's examples, and the data (-i, -j; a .txt file without -j is split 90/10 into train and
// validation); --save-safetensors is where it writes. Every path is checked before the model is allocated (and, in
// the CUDA trainer, before the device is looked for), so that a bad one stops the run at once with the flag's message.
struct RunFiles {
    Sampler sampler;
    std::string resume_dir;     // empty: a fresh run
    DataLoader train, val;
    bool have_val = false;
    Tokenizer eval_tok;         // --eval: the run's tokenizer, for a jsonl file
    McEval eval;                // --eval's examples (none: no rows)
};
static inline void run_files_open(RunFiles* f, const ModelConfig& mc, const TrainConfig& tc, int ranks) {
    sampler_open(&f->sampler, tc.tokenizer, mc.vocab_size, ranks > 1 ? 0 : tc.gen_tokens);
    f->resume_dir = checkpoint_resolve(tc.resume, tc.out_dir);
    struct stat st;
    if (!f->resume_dir.empty()) ckpt_check_files(f->resume_dir);  // its files are there (ckpt_open checks their hashes later)
    if (!tc.init_from.empty()) close(open_input(tc.init_from, "--init-from", true, &st));
    if (!tc.save_safetensors.empty()) check_output_file(tc.save_safetensors, "--save-safetensors");
    if (!tc.eval.empty()) {
        if (!tc.tokenizer.empty()) tokenizer_load_auto(&f->eval_tok, tc.tokenizer.c_str());
        f->eval = mc_eval_load(tc.eval, tc.tokenizer.empty() ? nullptr : &f->eval_tok, tc.T, mc.vocab_size);
    }
    f->have_val = loader_open_train_val(&f->train, &f->val, tc.train_data, tc.val_data, tc.T, mc.vocab_size);
}

// -o: the output directory, made by rank 0 (checkpoints, metrics.jsonl).
static inline void run_out_dir_make(const TrainConfig& tc, bool rank0) {
    if (!rank0 || tc.out_dir.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(tc.out_dir, ec);
    if (ec) die("cannot create output directory '%s' (flag -o): %s", tc.out_dir.c_str(), ec.message().c_str());
}

// The trainer, as the loop sees it. B, T: a micro-batch's shape on this rank.
struct Trainer {
    int B = 0, T = 0;
    // One optimizer step (0-based `step`) over this rank's micro-batches inputs, targets [accum][B*T] at learning rate
    // lr; mb0: a test's corruption of micro-batch 0 (llmc/run/test_hooks.h). Returns the step's loss (the same on every
    // rank), *norm the gradient norm before clipping, *verdict the guard's (llmc/run/guard.h).
    std::function<double(const Batches& inputs, const Batches& targets, int step, double lr, const TestCorrupt& mb0,
                         double* norm, GuardVerdict* verdict)> step;
    // Forward only over in, tg [m][B*T], m <= forward_max: rows [m*B] each row's summed loss, means [m] each batch's
    // mean loss over its targets (both read only on the ranks whose losses count: layout_counts_loss).
    std::function<void(const Batches& in, const Batches& tg, double* rows, double* means)> forward;
    int forward_max = 1;
    // Sampling's forward (generate, llmc/run/sampling.h) over a window of sample_B rows.
    std::function<const float*(const int32_t* window, int len)> last_logits;
    int sample_B = 1;
    std::function<void()> save;                                 // a checkpoint into -o of the state now
    std::function<void(const std::string& path)> export_weights;  // --save-safetensors
    // Optional. step_begin(i): before the run's i-th step (0: its first). step_end(t0): after it, the step's time in
    // ms from t0 (unset: the wall clock's). step_done(i, step): after the step's log line and the guard (memory figures,
    // the profile). peak_bytes(): the summary's peak memory, the largest of the ranks (every rank calls it).
    std::function<void(int i)> step_begin;
    std::function<double(double t0)> step_end;
    std::function<void(int i, int step)> step_done;
    std::function<double()> peak_bytes;
};

// Forward-only passes over n batches split over dp (validation, --eval; llmc/parallel/layout.h layout_split_forwards:
// every rank runs the same number of forwards, the ones past n with every target ignored), forward_max at a time.
// fill(k, in, tg) makes batch k; on the ranks whose losses count, got(k, rows, mean) takes batch k's summed loss of
// each row, rows [B], and its mean loss over its targets.
typedef std::function<void(int k, int32_t* in, int32_t* tg)> BatchFill;
typedef std::function<void(int k, const double* rows, double mean)> BatchLosses;
static inline void run_forward_split(const Trainer& tr, const Layout& L, int n, const BatchFill& fill,
                                     const BatchLosses& got) {
    const int B = tr.B, T = tr.T, per_rank = layout_split_forwards(L, n);
    const bool counts = layout_counts_loss(L);
    for (int j0 = 0; j0 < per_rank; j0 += tr.forward_max) {
        const int m = std::min(tr.forward_max, per_rank - j0);
        Batches in(m, std::vector<int32_t>((size_t)B * T, 0)), tg(m, std::vector<int32_t>((size_t)B * T, -1));
        for (int j = 0; j < m; j++) {
            const int k = layout_split_batch(L, j0 + j);
            if (k < n) fill(k, in[j].data(), tg[j].data());
        }
        std::vector<double> rows((size_t)m * B, 0.0), means(m, 0.0);
        tr.forward(in, tg, rows.data(), means.data());
        for (int j = 0; j < m; j++) {
            const int k = layout_split_batch(L, j0 + j);
            if (k < n && counts) got(k, rows.data() + (size_t)j * B, means[j]);
        }
    }
}

// The validation loss: the mean over the first n batches of the validation set of each batch's mean loss (split over
// dp, summed over the ranks that count); --eod-mask-loss leaves out the end-of-document targets as in training.
template <typename CommT>
static double run_validate(const CommT& world, const Trainer& tr, const Layout& L, DataLoader* val, int n,
                           const Documents& docs) {
    const int B = tr.B;
    double s = 0;
    run_forward_split(tr, L, n,
                      [&](int k, int32_t* in, int32_t* tg) {
                          loader_batch(val, (uint64_t)k * B, B, in, tg);
                          documents_mask_loss(docs, in, tg, (size_t)B * tr.T);
                      },
                      [&](int, const double*, double mean) { s += mean; });
    comm_host_sum(world, &s, 1);
    return s / n;
}

// --eval: every ending's summed loss (its rows split over dp, summed over the world), then the accuracies; rank 0
// logs them (and writes --eval-scores).
template <typename CommT>
static void run_mc_eval(const CommT& world, const Trainer& tr, const Layout& L, const McEval& ev, int step, Logger* lg,
                        const std::string& scores) {
    const int B = tr.B;
    std::vector<double> nll(ev.rows(), 0.0);
    run_forward_split(tr, L, mc_eval_batches(ev, B),
                      [&](int k, int32_t* in, int32_t* tg) { mc_eval_batch(ev, k, B, tr.T, in, tg); },
                      [&](int k, const double* rows, double) { mc_eval_take(ev, k, B, rows, &nll); });
    comm_host_sum(world, nll.data(), nll.size());
    mc_eval_report(ev, nll, step, world.rank == 0, lg, scores);
}

// A sample of -g tokens, drawn with the run's RNG and printed through the tokenizer; one rank only.
template <typename CommT>
static void run_sample(const CommT& world, const Trainer& tr, const TrainConfig& tc, const ModelConfig& mc,
                       RunFiles* files, TrainState* state) {
    if (tc.gen_tokens <= 0) return;
    if (world.size > 1) {
        if (world.rank == 0) printf("no sample: sampling runs on one rank (resume the checkpoint on one rank to sample)\n");
        return;
    }
    const std::vector<int32_t> tokens = generate({sampler_start_token(&files->sampler)}, tc.gen_tokens, tr.sample_B,
                                                 tr.T, mc.vocab_size, &state->rng, tr.last_logits);
    sampler_print(&files->sampler, tokens);
}

// The logger (metrics.jsonl under -o on rank 0; appended to on a resume) and the figures of its step lines: the tokens
// of a step, the model FLOPs per token, throughput per rank (n_devices), the peak FLOP/s for MFU (0: none printed), the
// memory limit of Megatron's memory line.
static inline void run_logger_open(Logger* lg, bool rank0, const ModelConfig& mc, const TrainConfig& tc, bool resumed,
                                   int n_devices, double peak_flops, double mem_limit_bytes) {
    logger_open(lg, rank0 ? tc.out_dir : "", resumed);
    lg->tokens_per_step = (double)tc.total_batch;
    lg->flops_per_token = model_flops_per_token(mc, tc.T);
    lg->peak_flops = peak_flops;
    lg->loss_scaling = tc.loss_scaling.on();
    lg->n_devices = n_devices;
    lg->formats = tc.log_formats;
    lg->seq_len = tc.T;
    lg->mem_limit_bytes = mem_limit_bytes;
    if (rank0) logger_start(lg);
}

// The loop, from state->step to -x, then the run's end. dp rank r's micro-batch a of a step reads samples first +
// (a*dp + r)*B ..: the samples of the one-process run with accum*dp micro-batches (--eod-mask-loss: with the
// end-of-document targets ignored). Validation and --eval run at step
// 0 of a fresh run, every --val-every steps and after the last; samples every --sample-every steps and at the end;
// checkpoints every --ckpt-every steps and after the last (with -o). A stop signal on any rank ends the loop on
// every rank after the same step, with a checkpoint.
template <typename CommT>
static void run_train(const CommT& world, const Trainer& tr, const Layout& L, const ModelConfig& mc,
                      const TrainConfig& tc, int accum, RunFiles* files, TrainState* state, Logger* lg,
                      int64_t n_params) {
    const bool rank0 = world.rank == 0;
    const int B = tr.B, T = tr.T, dp = L.topo.dp;
    const bool has_eval = files->eval.rows() > 0;
    Batches inputs(accum, std::vector<int32_t>((size_t)B * T)), targets = inputs;
    double loss = 0, val_loss = -1;
    if (files->have_val && state->step == 0 && tc.val_every > 0) {
        val_loss = run_validate(world, tr, L, &files->val, tc.val_batches, tc.docs);
        if (rank0) log_val(lg, 0, val_loss);
    }
    if (has_eval && state->step == 0 && tc.val_every > 0) run_mc_eval(world, tr, L, files->eval, 0, lg, tc.eval_scores);
    const int first_step = state->step;
    loss_scale_begin(tc.loss_scaling, &state->loss_scale);  // a fresh or static scale, or the checkpoint's
    const TestHooks hooks = test_hooks_read(mc.vocab_size);  // tests only (llmc/run/test_hooks.h)
    for (int step = state->step; step < tc.steps; step++) {
        const double t0 = now_ms();
        for (int a = 0; a < accum; a++)
            loader_batch(&files->train, state->train_sample + (uint64_t)(a * dp + L.topo.dp_rank) * B, B,
                         inputs[a].data(), targets[a].data());
        for (int a = 0; a < accum; a++) documents_mask_loss(tc.docs, inputs[a].data(), targets[a].data(), (size_t)B * T);
        state->train_sample += (uint64_t)B * accum * dp;
        const double lr = lr_at(step, tc.steps, tc.warmup, tc.lr, tc.min_lr, tc.schedule, tc.decay_frac);
        double norm = 0;
        const TestCorrupt mb0 = test_hooks_step(hooks, step + 1, world.rank, &targets);  // tests only
        GuardVerdict verdict;
        if (tr.step_begin) tr.step_begin(step - first_step);
        loss = tr.step(inputs, targets, step, lr, mb0, &norm, &verdict);
        const double ms = tr.step_end ? tr.step_end(t0) : now_ms() - t0;
        state->step = step + 1;
        std::string why;
        const bool go_on = guard_record(tc, state, verdict, loss, norm, step + 1, &why);
        loss_scale_update(tc.loss_scaling, &state->loss_scale, !std::isfinite(norm));  // after the guard: it reads the step's scale
        if (rank0) log_step(lg, step + 1, tc.steps, loss, lr, norm, ms, verdict, state->loss_scale.scale);
        if (!go_on) {
            if (rank0) log_failed(lg, mc);
            die("%s", why.c_str());
        }
        if (tr.step_done) tr.step_done(step - first_step, step + 1);
        const bool last = step + 1 == tc.steps, due = tc.val_every > 0 && ((step + 1) % tc.val_every == 0 || last);
        if (files->have_val && due) {
            val_loss = run_validate(world, tr, L, &files->val, tc.val_batches, tc.docs);
            if (rank0) log_val(lg, step + 1, val_loss);
        }
        if (has_eval && due) run_mc_eval(world, tr, L, files->eval, step + 1, lg, tc.eval_scores);
        if (tc.sample_every > 0 && (step + 1) % tc.sample_every == 0 && !last) run_sample(world, tr, tc, mc, files, state);
        const bool saved = !tc.out_dir.empty() && ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || last);
        if (saved) tr.save();
        // SIGTERM / SIGINT on any rank: every rank stops after this step (llmc/run/signals.h)
        if (!last && stop_after_step(world, step + 1, tc.out_dir, saved, tr.save)) return;
    }

    // the end: a sample, the weights as safetensors, the summary
    run_sample(world, tr, tc, mc, files, state);
    if (!tc.save_safetensors.empty()) {
        tr.export_weights(tc.save_safetensors);
        if (rank0) printf("wrote %s\n", tc.save_safetensors.c_str());
        comm_io_wait([&] { comm_barrier(world); });  // rank 0's writing, under --io-timeout
    }
    const double peak = tr.peak_bytes ? tr.peak_bytes() : logger_peak_bytes(lg);
    if (rank0) log_summary(lg, mc, n_params, loss, val_loss, peak);
}
