// llmc/run/logger.h: what a run prints and writes.
//   console: the config table at start, one line per step, validation and sample lines
//   <out>/metrics.jsonl: one JSON object per step / validation
//   <out>/summary.json: the fields benchmark harnesses read (throughput, MFU, memory, losses)
//   the memory table of a parallel run: per rank, measured bytes beside the analytic formula
//   --log-format megatron,flagperf,paddle (docs/logs.md): besides the lines above, the lines the
//   benchmark harnesses parse: Megatron-LM's iteration and memory lines, FlagPerf's [PerfLog] JSON
//   lines, PaddlePaddle/benchmark's result JSON (also <out>/paddle_result.json)
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "llmc/model_config.h"
#include "llmc/flops.h"
#include "llmc/utils.h"
#include "llmc/run/guard.h"

// harness formats, a bit mask (--log-format)
enum { LOG_MEGATRON = 1, LOG_FLAGPERF = 2, LOG_PADDLE = 4 };

// "megatron,flagperf,paddle" (any subset, or "all", or "none") -> *mask; false on an unknown name
static inline bool log_formats_parse(const std::string& s, int* mask) {
    *mask = 0;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        const std::string w = s.substr(i, j - i);
        if (w == "megatron") *mask |= LOG_MEGATRON;
        else if (w == "flagperf") *mask |= LOG_FLAGPERF;
        else if (w == "paddle") *mask |= LOG_PADDLE;
        else if (w == "all") *mask |= LOG_MEGATRON | LOG_FLAGPERF | LOG_PADDLE;
        else if (w != "none") return false;
        i = j + 1;
    }
    return true;
}

struct Logger {
    FILE* jsonl = nullptr;
    std::string out_dir;
    std::vector<double> step_ms;   // for medians in the summary
    std::vector<double> step_tok_s;  // tokens/s per device of every step (the Paddle result's mean)
    double tokens_per_step = 0;
    double flops_per_token = 0;    // model FLOPs (docs/design.md section 7)
    double peak_flops = 0;         // per device, 0 when unknown (CPU)
    int n_devices = 1;
    // for the harness formats
    int formats = 0;               // LOG_* bits
    int seq_len = 0;               // T: global batch in sequences = tokens_per_step / seq_len
    double mem_limit_bytes = 0;    // --gpu-mem, 0 when not given (FlagPerf's memory total)
    std::vector<double> rank_bytes;  // measured bytes per rank (log_memory), for the summary
    double t_start_ms = 0;         // wall clock at logger_open, for end-to-end time
    double eval_acc = -1, eval_acc_norm = -1;  // the last --eval's accuracies (-1: none ran), for the summary
    bool loss_scaling = false;     // --loss-scale other than 1: the step line and metrics.jsonl show the scale
};

static inline double wall_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "%.9g" (digits significant digits: 17 for a value that must read back exact, the loss scale), or null when not
// finite (JSON has no NaN)
static inline std::string json_num(double x, int digits = 9) {
    if (!std::isfinite(x)) return "null";
    char b[40];
    snprintf(b, sizeof(b), "%.*g", digits, x);
    return b;
}

// FlagPerf's line: [PerfLog] {"event": E, "value": {...}, "metadata": {...}}
static inline void perflog(const char* event, const std::string& value) {
    printf("[PerfLog] {\"event\": \"%s\", \"value\": {%s}, \"metadata\": {\"file\": \"llmc/run/logger.h\", \"time_ms\": %.0f}}\n",
           event, value.c_str(), wall_ms());
}

static inline void logger_open(Logger* lg, const std::string& out_dir, bool resume) {
    lg->out_dir = out_dir;
    if (out_dir.empty()) return;
    std::string p = out_dir + "/metrics.jsonl";
    lg->jsonl = fopen_check(p.c_str(), resume ? "ab" : "wb");
}

// Starts the clock of the end-to-end time; FlagPerf's INIT_END line.
static inline void logger_start(Logger* lg) {
    lg->t_start_ms = wall_ms();
    if (lg->formats & LOG_FLAGPERF) perflog("INIT_END", "");
}

static inline void print_config_table(const ModelConfig& c, int64_t n_params, int B, int T, int grad_accum, int dp,
                                      int steps, double lr, const char* schedule, const std::string& data) {
    printf("+-----------------------+--------------------------------------------------+\n");
    auto row = [](const char* k, const std::string& v) { printf("| %-21s | %-48s |\n", k, v.c_str()); };
    char b[256];
    row("model", c.name);
    snprintf(b, sizeof(b), "L=%d C=%d H=%d KV=%d hd=%d ffn=%d", c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.ffn);
    row("shape", b);
    snprintf(b, sizeof(b), "%s%s, %s%s, %s, bias %s, %s head", c.norm == NORM_RMSNORM ? "rmsnorm" : "layernorm",
             c.qk_norm ? "+qk" : "",
             c.pos == POS_LEARNED ? "learned pos" : pos_name(c.pos), c.pos == POS_ROPE && c.rope_factor > 0 ? " (scaled)" : "",
             c.mlp == MLP_SWIGLU ? "swiglu" : "gelu", c.bias ? "on" : c.qkv_bias ? "q,k,v" : "off",
             c.tied ? "tied" : c.norm_head ? "norm" : "untied");
    row("switches", b);
    snprintf(b, sizeof(b), "%d (padded %d)", c.vocab_size, c.padded_vocab);
    row("vocab", b);
    snprintf(b, sizeof(b), "%lld (%.3f M)", (long long)n_params, n_params / 1e6);
    row("parameters", b);
    snprintf(b, sizeof(b), "%.4g (model), %.4g (nominal 6N)", model_flops_per_token(c, T), nominal_flops_per_token(n_params));
    row("FLOPs per token", b);
    snprintf(b, sizeof(b), "B=%d T=%d accum=%d dp=%d -> %lld tokens", B, T, grad_accum, dp, (long long)B * T * grad_accum * dp);
    row("batch per step", b);
    snprintf(b, sizeof(b), "%d steps, lr %.3g %s", steps, lr, schedule);
    row("schedule", b);
    row("data", data.size() > 48 ? "..." + data.substr(data.size() - 45) : data);
    printf("+-----------------------+--------------------------------------------------+\n");
}

// Tokens per second per device of a step of `ms`, and the fraction of the peak that `flops_per_token` at tok_s per device
// is (MFU with the model FLOPs, HFU with the hardware FLOPs); 0 when the peak is unknown.
static inline double logger_tokens_per_s(const Logger* lg, double ms) {
    return ms > 0 ? lg->tokens_per_step / (ms / 1000.0) / lg->n_devices : 0.0;
}
static inline double logger_mfu(const Logger* lg, double tok_s, double flops_per_token) {
    return lg->peak_flops > 0 ? tok_s * flops_per_token / lg->peak_flops : 0.0;
}

// skip: the numerics guard's verdict (llmc/run/guard.h: 0 updated, 1 non-finite, 2 loss spike, 3 overflow; a skipped
// step says so). loss_scale: the loss scale after this step (llmc/loss_scale.h; 1: none).
static inline void log_step(Logger* lg, int step, int steps, double loss, double lr, double gnorm, double ms, int skip = 0,
                            double loss_scale = 1.0) {
    double tok_s = lg->tokens_per_step / (ms / 1000.0) / lg->n_devices;
    double tflops = tok_s * lg->flops_per_token / 1e12;
    lg->step_ms.push_back(ms);
    printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | %.3f TFLOP/s", step, steps, loss, lr,
           gnorm, ms, tok_s, tflops);
    if (lg->peak_flops > 0) printf(" | MFU %.1f%%", 100.0 * tflops * 1e12 / lg->peak_flops);
    if (lg->loss_scaling) printf(" | loss scale %.1f", loss_scale);
    if (skip) printf(" | update skipped (%s)", guard_name(skip));
    printf("\n");
    lg->step_tok_s.push_back(tok_s);
    const long long gbs = lg->seq_len > 0 ? (long long)llround(lg->tokens_per_step / lg->seq_len) : 0;
    if (lg->formats & LOG_MEGATRON) {
        // Megatron-LM's training_log: the loss scale after the step, this step's skipped iteration (any skipped update)
        // and NaN iteration (a loss that is not finite)
        printf(" iteration %8d/%8d | consumed samples: %12lld | elapsed time per iteration (ms): %.1f |", step, steps,
               gbs * step, ms);
        printf(" learning rate: %.6E | global batch size: %5lld | lm loss: %.6E | loss scale: %.1f | grad norm: %.3f |"
               " number of skipped iterations: %3d | number of nan iterations: %3d |\n",
               lr, gbs, loss, loss_scale, gnorm, skip ? 1 : 0, std::isfinite(loss) ? 0 : 1);
    }
    if (lg->formats & LOG_FLAGPERF) {
        char v[512];
        snprintf(v, sizeof(v), "\"global_steps\": %d, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, \"step_time_ms\": %.4f, "
                 "\"tokens_per_second_per_gpu\": %.4f, \"tflops_per_gpu\": %.6g, \"mfu\": %s", step, json_num(loss).c_str(),
                 json_num(lr).c_str(), json_num(gnorm).c_str(), ms, tok_s, tflops,
                 lg->peak_flops > 0 ? json_num(tflops * 1e12 / lg->peak_flops).c_str() : "null");
        perflog("STEP_END", v);
    }
    fflush(stdout);
    if (lg->jsonl) {
        // (a non-finite loss or norm is written as null: NaN is not JSON)
        const std::string scale = lg->loss_scaling ? ",\"loss_scale\":" + json_num(loss_scale, 17) : "";
        const std::string skipped = skip ? ",\"skipped\":\"" + std::string(guard_name(skip)) + "\"" : "";
        fprintf(lg->jsonl, "{\"step\":%d,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"ms\":%.4f,\"tokens_per_s\":%.2f%s%s}\n",
                step, json_num(loss).c_str(), lr, json_num(gnorm).c_str(), ms, tok_s, scale.c_str(), skipped.c_str());
        fflush(lg->jsonl);
    }
}

static inline void log_val(Logger* lg, int step, double val_loss) {
    printf("step %5d | val loss %.6f\n", step, val_loss);
    fflush(stdout);
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"step\":%d,\"val_loss\":%.9g}\n", step, val_loss);
        fflush(lg->jsonl);
    }
}

// --eval's multiple-choice accuracy: by the endings' summed log-likelihoods (acc) and per token (acc_norm).
static inline void log_eval(Logger* lg, int step, double acc, double acc_norm, int n_examples) {
    printf("step %5d | eval acc %.4f acc_norm %.4f (%d examples)\n", step, acc, acc_norm, n_examples);
    fflush(stdout);
    lg->eval_acc = acc;
    lg->eval_acc_norm = acc_norm;
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"step\":%d,\"eval_acc\":%.9g,\"eval_acc_norm\":%.9g}\n", step, acc, acc_norm);
        fflush(lg->jsonl);
    }
}

// Steps skipped as warm-up by the summary's median and the Paddle result's mean: the first fifth, at most 5.
static inline size_t logger_warmup_steps(const Logger* lg) { return std::min<size_t>(lg->step_ms.size() / 5, 5); }

// PaddlePaddle/benchmark's result JSON, printed as one line and written to <out>/paddle_result.json:
// FINAL_RESULT = mean tokens/s per device over the steps after warm-up, JOB_FAIL_FLAG 1 when the run failed.
static inline void log_paddle_result(Logger* lg, const ModelConfig& c, bool failed) {
    const size_t skip = logger_warmup_steps(lg);
    double sum = 0;
    size_t n = 0;
    for (size_t i = skip; i < lg->step_tok_s.size(); i++, n++) sum += lg->step_tok_s[i];
    const double final_result = failed || n == 0 ? 0.0 : sum / n;
    const std::string log_file = lg->out_dir.empty() ? "" : lg->out_dir + "/metrics.jsonl";
    char b[1024];
    snprintf(b, sizeof(b), "{\"log_file\": \"%s\", \"model_name\": \"%s\", \"mission_name\": \"pretrain\", \"direction_id\": 1, "
             "\"run_mode\": \"%s\", \"index\": 1, \"gpu_num\": %d, \"FINAL_RESULT\": %.4f, \"JOB_FAIL_FLAG\": %d, \"UNIT\": \"tokens/s\"}",
             log_file.c_str(), c.name.c_str(), lg->n_devices > 1 ? "mp" : "sp", lg->n_devices, final_result, failed ? 1 : 0);
    printf("%s\n", b);
    fflush(stdout);
    if (lg->out_dir.empty()) return;
    std::string p = lg->out_dir + "/paddle_result.json";
    FILE* f = fopen_check(p.c_str(), "wb");
    fprintf(f, "%s\n", b);
    fclose_check(f, path_label(p).c_str());
}

// A run that stops on a non-finite loss: the Paddle result with JOB_FAIL_FLAG 1 (other formats: nothing more).
static inline void log_failed(Logger* lg, const ModelConfig& c) {
    if (lg->formats & LOG_PADDLE) log_paddle_result(lg, c, true);
}

// The largest measured bytes of any rank (log_memory), 0 before it ran.
static inline double logger_peak_bytes(const Logger* lg) {
    double m = 0;
    for (double b : lg->rank_bytes) m = std::max(m, b);
    return m;
}

// Writes summary.json: median step time, skipping the first steps (up to 5) as warm-up.
// val_loss < 0 means no validation ran.
static inline void log_summary(Logger* lg, const ModelConfig& c, int64_t n_params, double final_loss, double val_loss,
                               double peak_mem_bytes) {
    std::vector<double> v(lg->step_ms.begin() + logger_warmup_steps(lg), lg->step_ms.end());
    if (v.empty()) v = lg->step_ms;
    std::sort(v.begin(), v.end());
    double med = v.empty() ? 0.0 : v[v.size() / 2];
    double tok_s = logger_tokens_per_s(lg, med);
    double mfu = logger_mfu(lg, tok_s, lg->flops_per_token);
    double nominal_mfu = logger_mfu(lg, tok_s, nominal_flops_per_token(n_params));
    printf("summary: median %.1f ms/step, %.0f tokens/s per device, final loss %.4f", med, tok_s, final_loss);
    if (val_loss >= 0) printf(", val loss %.4f", val_loss);
    if (lg->eval_acc >= 0) printf(", eval acc %.4f acc_norm %.4f", lg->eval_acc, lg->eval_acc_norm);
    printf("\n");
    if (lg->formats & LOG_FLAGPERF) {
        char b[768];
        snprintf(b, sizeof(b), "\"e2e_time\": %.3f, \"training_steps\": %zu, \"tokens_per_second_per_gpu\": %.4f, \"mfu\": %s, "
                 "\"memory_used_per_gpu_gib\": %.6f, \"memory_total_per_gpu_gib\": %s, \"final_loss\": %s",
                 (wall_ms() - lg->t_start_ms) / 1000.0, lg->step_ms.size(), tok_s,
                 lg->peak_flops > 0 ? json_num(mfu).c_str() : "null", peak_mem_bytes / (1 << 30),
                 lg->mem_limit_bytes > 0 ? json_num(lg->mem_limit_bytes / (1 << 30)).c_str() : "null",
                 json_num(final_loss).c_str());
        perflog("FINISHED", b);
    }
    if (lg->formats & LOG_PADDLE) log_paddle_result(lg, c, false);
    char val_json[32] = "null";
    if (val_loss >= 0) snprintf(val_json, sizeof(val_json), "%.9g", val_loss);
    if (lg->jsonl) { fclose(lg->jsonl); lg->jsonl = nullptr; }
    if (lg->out_dir.empty()) return;
    std::string ranks = "[";
    for (size_t i = 0; i < lg->rank_bytes.size(); i++) ranks += (i ? "," : "") + json_num(lg->rank_bytes[i]);
    ranks += "]";
    std::string p = lg->out_dir + "/summary.json";
    FILE* f = fopen_check(p.c_str(), "wb");
    fprintf(f, "{\"model\":\"%s\",\"params\":%lld,\"devices\":%d,\"median_step_ms\":%.4f,\"tokens_per_s_per_device\":%.2f,"
               "\"mfu\":%.6f,\"nominal_mfu\":%.6f,\"model_flops_per_token\":%.6g,\"peak_memory_bytes_per_rank\":%.0f,"
               "\"memory_bytes_per_rank\":%s,\"final_loss\":%.9g,\"val_loss\":%s,\"eval_acc\":%s,\"eval_acc_norm\":%s,"
               "\"steps\":%zu}\n",
            c.name.c_str(), (long long)n_params, lg->n_devices, med, tok_s, mfu, nominal_mfu, lg->flops_per_token,
            peak_mem_bytes, ranks.c_str(), final_loss, val_json, lg->eval_acc >= 0 ? json_num(lg->eval_acc).c_str() : "null",
            lg->eval_acc_norm >= 0 ? json_num(lg->eval_acc_norm).c_str() : "null", lg->step_ms.size());
    fclose_check(f, path_label(p).c_str());
}

// Memory of one rank: bytes measured (buffers held, peaks of the gathered ZeRO-3 weights, the
// gradient buckets and the activations) and by the analytic formula.
struct MemoryRow {
    double rank, dp_rank, tp_rank, pp_rank;
    double params, grads, optim, acts;
    double f_params, f_grads, f_optim, f_acts;
};

// rows[n_ranks]: every rank's row (the caller gathers them); prints one line per rank.
static inline void print_memory_rows(const MemoryRow* rows, int n_ranks) {
    auto mib = [](double b) { return b / (1 << 20); };
    printf("memory per rank, MiB: measured (formula)\n");
    printf("  rank  pp dp tp |          params |           grads |       optimizer |     activations\n");
    for (int r = 0; r < n_ranks; r++) {
        const MemoryRow* m = rows + r;
        printf("  %4d  %2d %2d %2d | %6.3f (%6.3f) | %6.3f (%6.3f) | %6.3f (%6.3f) | %6.3f (%6.3f)\n", (int)m->rank,
               (int)m->pp_rank, (int)m->dp_rank, (int)m->tp_rank, mib(m->params), mib(m->f_params), mib(m->grads),
               mib(m->f_grads), mib(m->optim), mib(m->f_optim), mib(m->acts), mib(m->f_acts));
    }
    fflush(stdout);
}

// Records every rank's measured bytes (params + grads + optimizer + activations of rows[n_ranks]) for the
// summary and, with --log-format megatron, prints Megatron-LM's memory line per rank. The CPU trainer
// holds its buffers for the whole run: allocated = max allocated = reserved = max reserved.
// Every rank's row, on every rank: rows[world.size], this rank's at index `rank`, zeros elsewhere, summed over the
// world group (comm_host_sum of either trainer's llmc/comm backend).
template <typename CommT>
static inline std::vector<MemoryRow> memory_rows_gather(const CommT& world, int rank, const MemoryRow& row) {
    const int n = sizeof(MemoryRow) / sizeof(double);
    std::vector<MemoryRow> all((size_t)world.size);
    memset((void*)all.data(), 0, all.size() * sizeof(MemoryRow));
    all[rank] = row;
    comm_host_sum(world, (double*)all.data(), (size_t)n * world.size);
    return all;
}

static inline void log_memory(Logger* lg, const MemoryRow* rows, int n_ranks, int iteration) {
    lg->rank_bytes.assign(n_ranks, 0.0);
    for (int r = 0; r < n_ranks; r++) {
        const MemoryRow* m = rows + r;
        const double b = m->params + m->grads + m->optim + m->acts, mb = b / (1 << 20);
        lg->rank_bytes[r] = b;
        if (lg->formats & LOG_MEGATRON)
            printf("[Rank %d] (after %d iterations) memory (MB) | allocated: %.6f | max allocated: %.6f | reserved: %.6f | "
                   "max reserved: %.6f\n", (int)m->rank, iteration, mb, mb, mb, mb);
    }
    fflush(stdout);
}
