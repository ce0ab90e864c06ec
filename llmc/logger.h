// llmc/logger.h: what a run prints and writes.
//   console: the config table at start, one line per step, validation and sample lines
//   <out>/metrics.jsonl: one JSON object per step / validation
//   <out>/summary.json: the fields benchmark harnesses read (throughput, MFU, memory, losses)
//   the memory table of a parallel run: per rank, measured bytes beside the analytic formula
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>
#include "llmc/config.h"
#include "llmc/flops.h"
#include "llmc/utils.h"

struct Logger {
    FILE* jsonl = nullptr;
    std::string out_dir;
    std::vector<double> step_ms;   // for medians in the summary
    double tokens_per_step = 0;
    double flops_per_token = 0;    // model FLOPs (docs/design.md section 7)
    double peak_flops = 0;         // per device, 0 when unknown (CPU)
    int n_devices = 1;
};

static inline void logger_open(Logger* lg, const std::string& out_dir, bool resume) {
    lg->out_dir = out_dir;
    if (out_dir.empty()) return;
    std::string p = out_dir + "/metrics.jsonl";
    lg->jsonl = fopen_check(p.c_str(), resume ? "ab" : "wb");
}

static inline void print_config_table(const ModelConfig& c, int64_t n_params, int B, int T, int grad_accum, int dp,
                                      int steps, double lr, const char* schedule, const std::string& data) {
    printf("+-----------------------+--------------------------------------------------+\n");
    auto row = [](const char* k, const std::string& v) { printf("| %-21s | %-48s |\n", k, v.c_str()); };
    char b[256];
    row("model", c.name);
    snprintf(b, sizeof(b), "L=%d C=%d H=%d KV=%d hd=%d ffn=%d", c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.ffn);
    row("shape", b);
    snprintf(b, sizeof(b), "%s, %s%s, %s, bias %s, %s head", c.norm == NORM_RMSNORM ? "rmsnorm" : "layernorm",
             c.pos == POS_ROPE ? "rope" : "learned pos", c.pos == POS_ROPE && c.rope_factor > 0 ? " (scaled)" : "",
             c.mlp == MLP_SWIGLU ? "swiglu" : "gelu", c.bias ? "on" : "off", c.tied ? "tied" : "untied");
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

static inline void log_step(Logger* lg, int step, int steps, double loss, double lr, double gnorm, double ms) {
    double tok_s = lg->tokens_per_step / (ms / 1000.0) / lg->n_devices;
    double tflops = tok_s * lg->flops_per_token / 1e12;
    lg->step_ms.push_back(ms);
    printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | %.3f TFLOP/s", step, steps, loss, lr,
           gnorm, ms, tok_s, tflops);
    if (lg->peak_flops > 0) printf(" | MFU %.1f%%", 100.0 * tflops * 1e12 / lg->peak_flops);
    printf("\n");
    fflush(stdout);
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.4f,\"tokens_per_s\":%.2f}\n",
                step, loss, lr, gnorm, ms, tok_s);
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

// Writes summary.json: median step time, skipping the first steps (up to 5) as warm-up.
// val_loss < 0 means no validation ran.
static inline void log_summary(Logger* lg, const ModelConfig& c, int64_t n_params, double final_loss, double val_loss,
                               double peak_mem_bytes) {
    std::vector<double> v(lg->step_ms.begin() + std::min<size_t>(lg->step_ms.size() / 5, 5), lg->step_ms.end());
    if (v.empty()) v = lg->step_ms;
    std::sort(v.begin(), v.end());
    double med = v.empty() ? 0.0 : v[v.size() / 2];
    double tok_s = med > 0 ? lg->tokens_per_step / (med / 1000.0) / lg->n_devices : 0.0;
    double mfu = lg->peak_flops > 0 ? tok_s * lg->flops_per_token / lg->peak_flops : 0.0;
    double nominal_mfu = lg->peak_flops > 0 ? tok_s * nominal_flops_per_token(n_params) / lg->peak_flops : 0.0;
    printf("summary: median %.1f ms/step, %.0f tokens/s per device, final loss %.4f", med, tok_s, final_loss);
    if (val_loss >= 0) printf(", val loss %.4f", val_loss);
    printf("\n");
    char val_json[32] = "null";
    if (val_loss >= 0) snprintf(val_json, sizeof(val_json), "%.9g", val_loss);
    if (lg->jsonl) { fclose(lg->jsonl); lg->jsonl = nullptr; }
    if (lg->out_dir.empty()) return;
    std::string p = lg->out_dir + "/summary.json";
    FILE* f = fopen_check(p.c_str(), "wb");
    fprintf(f, "{\"model\":\"%s\",\"params\":%lld,\"devices\":%d,\"median_step_ms\":%.4f,\"tokens_per_s_per_device\":%.2f,"
               "\"mfu\":%.6f,\"nominal_mfu\":%.6f,\"model_flops_per_token\":%.6g,\"peak_memory_bytes_per_rank\":%.0f,"
               "\"final_loss\":%.9g,\"val_loss\":%s,\"steps\":%zu}\n",
            c.name.c_str(), (long long)n_params, lg->n_devices, med, tok_s, mfu, nominal_mfu, lg->flops_per_token,
            peak_mem_bytes, final_loss, val_json, lg->step_ms.size());
    fclose_check(f, p.c_str());
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
