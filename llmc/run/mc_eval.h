// llmc/run/mc_eval.h: multiple-choice evaluation in the loop (--eval FILE), shared by both trainers: HellaSwag-style
// examples (a context and N endings, one correct) scored by the model's log-likelihood of each ending given the
// context, as llm.c and lm-evaluation-harness do.
//   mc_eval_load(path, tokenizer, T, V)   reads the standard HellaSwag jsonl ({"ctx", "endings", "label"}; the context
//                                         and " " + each ending tokenized with the run's tokenizer), or llm.c's
//                                         prepared binary eval file (header magic 20240522, uint16 token ids), so
//                                         files prepared for llm.c work unchanged. Bad input stops the run naming
//                                         the file and the line (jsonl) or example (binary).
//   mc_eval_batch(ev, k, B, T, in, tg)    rows k*B .. of the eval as a micro-batch: a row is one ending, its tokens
//                                         the context then the ending; the targets are the ending's tokens (each
//                                         predicted from the tokens before it), -1 elsewhere, so that the sum of a
//                                         row's per-token losses is minus the ending's log-likelihood. Past the last
//                                         row: zeros and -1 (rows that count nothing).
//   mc_eval_take(ev, k, B, rows, &nll)   batch k's row losses into nll [rows of the eval]
//   mc_eval_score(ev, nll, &acc, &acc_norm)  accuracy from every ending's summed loss: acc picks the smallest sum,
//                                         acc_norm the smallest mean per token (llm.c's normalisation; ties: the
//                                         first ending).
//   mc_eval_report(ev, nll, step, rank0, lg, scores)  the accuracies, logged by rank 0 (and --eval-scores written)
// The trainers split the batches over the data-parallel ranks (batch k on rank k % dp, every rank the same number
// of forwards), sum each row's per-token losses on the last pipeline stage's first tp rank, and add the vectors over
// the world: every rank then holds every ending's score.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include "llmc/data/tokenizer.h"
#include "llmc/json.h"
#include "llmc/run/logger.h"
#include "llmc/utils.h"

struct McExample {
    int label = 0;
    std::vector<int32_t> ctx;
    std::vector<std::vector<int32_t>> endings;
};

struct McEval {
    std::string path;
    std::vector<McExample> examples;
    std::vector<int> row_example, row_ending;    // per row (ending): its example and its index among the endings
    int rows() const { return (int)row_example.size(); }
};

// Tokens are ids below V; a row (context + ending - 1 tokens) fits in T positions.
static inline void mc_eval_check(const McEval& ev, const McExample& e, const char* where, int T, int V) {
    if (e.endings.size() < 2) die("%s: %s: %zu endings; a multiple-choice example needs 2 or more", ev.path.c_str(), where,
                                  e.endings.size());
    if (e.label < 0 || e.label >= (int)e.endings.size())
        die("%s: %s: label %d is out of range (%zu endings, labels 0 to %zu)", ev.path.c_str(), where, e.label,
            e.endings.size(), e.endings.size() - 1);
    if (e.ctx.empty()) die("%s: %s: the context has no tokens", ev.path.c_str(), where);
    for (size_t j = 0; j < e.endings.size(); j++) {
        if (e.endings[j].empty()) die("%s: %s: ending %zu has no tokens", ev.path.c_str(), where, j);
        const size_t len = e.ctx.size() + e.endings[j].size();
        if (len > (size_t)T + 1)
            die("%s: %s: the context and ending %zu are %zu tokens, more than the %d a row of -t %d scores (each ending "
                "token is predicted from those before it)", ev.path.c_str(), where, j, len, T + 1, T);
    }
    auto check_ids = [&](const std::vector<int32_t>& ids) {
        for (int32_t t : ids)
            if (t < 0 || t >= V) die("%s: %s: token %d is not below the vocabulary size %d", ev.path.c_str(), where, t, V);
    };
    check_ids(e.ctx);
    for (const std::vector<int32_t>& end : e.endings) check_ids(end);
}

// llm.c's eval file (dev/data/data_common.py write_evalfile): 256 int32 of header (magic 20240522, version 1, the
// number of examples, the longest example in bytes), then per example a uint16 stream: 65535, its size in bytes, its
// index, the label, the number of endings, the context's length and tokens, then each ending's length and tokens.
static inline void mc_eval_read_llmc(McEval* ev, const std::vector<uint8_t>& buf, int T, int V) {
    const char* p = ev->path.c_str();
    if (buf.size() < 1024) die("%s: %zu bytes, shorter than llm.c's 1024-byte eval header", p, buf.size());
    int32_t h[256];
    memcpy(h, buf.data(), sizeof(h));
    if (h[1] != 1) die("%s: llm.c eval file version %d; version 1 is read", p, h[1]);
    if (h[2] <= 0) die("%s: the header counts %d examples", p, h[2]);
    if ((buf.size() - 1024) % 2) die("%s: the example stream is not whole uint16 values (%zu bytes)", p, buf.size() - 1024);
    const uint16_t* s = (const uint16_t*)(buf.data() + 1024);
    const size_t n = (buf.size() - 1024) / 2;
    size_t i = 0;
    for (int k = 0; k < h[2]; k++) {
        char where[64];
        snprintf(where, sizeof(where), "example %d", k + 1);
        if (i + 6 > n) die("%s: %s: the file ends inside the example's header (%d examples announced)", p, where, h[2]);
        if (s[i] != 65535) die("%s: %s: starts with %u, not the delimiter 65535", p, where, s[i]);
        const size_t end = i + s[i + 1] / 2;
        if (s[i + 1] % 2 || s[i + 1] < 12 || end > n)
            die("%s: %s: its size field %u bytes does not fit the file", p, where, s[i + 1]);
        McExample e;
        e.label = s[i + 3];
        const int n_end = s[i + 4];
        size_t j = i + 5;
        auto take = [&](std::vector<int32_t>* out) {
            if (j >= end || j + 1 + s[j] > end) die("%s: %s: a token list runs past the example's size", p, where);
            out->assign(s + j + 1, s + j + 1 + s[j]);
            j += 1 + s[j];
        };
        take(&e.ctx);
        e.endings.resize(n_end);
        for (int c = 0; c < n_end; c++) take(&e.endings[c]);
        if (j != end) die("%s: %s: %zu values past its endings within its size", p, where, end - j);
        mc_eval_check(*ev, e, where, T, V);
        ev->examples.push_back(e);
        i = end;
    }
    if (i != n) die("%s: %zu bytes after the %d examples the header counts", p, 2 * (n - i), h[2]);
}

// HellaSwag's jsonl: one object per line with "ctx" (string), "endings" (strings) and "label" (an integer, or a string
// of one). Blank lines are skipped.
static inline void mc_eval_read_jsonl(McEval* ev, const std::vector<uint8_t>& buf, const Tokenizer* tok, int T, int V) {
    const char* p = ev->path.c_str();
    size_t at = 0;
    int line = 0;
    while (at < buf.size()) {
        size_t nl = at;
        while (nl < buf.size() && buf[nl] != '\n') nl++;
        line++;
        const char* s = (const char*)buf.data() + at;
        const size_t len = nl - at;
        at = nl + 1;
        size_t k = 0;
        while (k < len && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k == len) continue;
        char where[64];
        snprintf(where, sizeof(where), "line %d", line);
        Json j;
        std::string err;
        if (!json_parse(s, len, &j, &err) || j.kind != Json::OBJ) die("%s: %s: not a JSON object (%s)", p, where, err.c_str());
        const Json* ctx = j.get("ctx");
        const Json* ends = j.get("endings");
        const Json* lab = j.get("label");
        if (!ctx || ctx->kind != Json::STR) die("%s: %s: no string field \"ctx\"", p, where);
        if (!ends || ends->kind != Json::ARR) die("%s: %s: no array field \"endings\"", p, where);
        if (!lab) die("%s: %s: no field \"label\"", p, where);
        McExample e;
        if (lab->kind == Json::NUM && lab->num == std::floor(lab->num)) e.label = (int)lab->num;
        else if (lab->kind == Json::STR && !lab->str.empty() && lab->str.find_first_not_of("0123456789") == std::string::npos)
            e.label = atoi(lab->str.c_str());
        else die("%s: %s: \"label\" is not an integer", p, where);
        auto encode = [&](const std::string& text) {
            const std::vector<uint32_t> ids = tokenizer_encode(tok, text.data(), text.size());
            return std::vector<int32_t>(ids.begin(), ids.end());
        };
        e.ctx = encode(ctx->str);
        for (const Json& x : ends->arr) {
            if (x.kind != Json::STR) die("%s: %s: an ending is not a string", p, where);
            e.endings.push_back(encode(" " + x.str));  // as llm.c and lm-evaluation-harness: the ending after a space
        }
        mc_eval_check(*ev, e, where, T, V);
        ev->examples.push_back(e);
    }
    if (ev->examples.empty()) die("%s: no examples (every line is blank)", p);
}

// tok: the run's tokenizer (null: none; a jsonl file then cannot be read). T: the rows' length; V: the vocabulary.
static inline McEval mc_eval_load(const std::string& path, const Tokenizer* tok, int T, int V) {
    McEval ev;
    ev.path = path;
    const std::vector<uint8_t> buf = read_file_bytes(path, "--eval");
    int32_t magic = 0;
    if (buf.size() >= 4) memcpy(&magic, buf.data(), 4);
    if (magic == 20240522) {
        mc_eval_read_llmc(&ev, buf, T, V);
    } else {
        if (!tok)
            die("--eval '%s': a jsonl file is tokenized with the run's tokenizer, and this run has none (--tokenizer)",
                path.c_str());
        mc_eval_read_jsonl(&ev, buf, tok, T, V);
    }
    for (size_t k = 0; k < ev.examples.size(); k++)
        for (size_t j = 0; j < ev.examples[k].endings.size(); j++) {
            ev.row_example.push_back((int)k);
            ev.row_ending.push_back((int)j);
        }
    return ev;
}

// The micro-batches of the eval: ceil(rows / B).
static inline int mc_eval_batches(const McEval& ev, int B) { return (ev.rows() + B - 1) / B; }

// Batch k (rows k*B ..) into in, tg [B*T]. Row r: its T inputs are the context then the ending (less its last
// token), zeros after; its targets the next tokens where they are the ending's, -1 elsewhere.
static inline void mc_eval_batch(const McEval& ev, int k, int B, int T, int32_t* in, int32_t* tg) {
    for (int b = 0; b < B; b++) {
        int32_t* x = in + (size_t)b * T;
        int32_t* y = tg + (size_t)b * T;
        std::fill(x, x + T, 0);
        std::fill(y, y + T, -1);
        const int r = k * B + b;
        if (r >= ev.rows()) continue;
        const McExample& e = ev.examples[ev.row_example[r]];
        const std::vector<int32_t>& end = e.endings[ev.row_ending[r]];
        const int nc = (int)e.ctx.size(), ne = (int)end.size();
        for (int t = 0; t < nc + ne - 1; t++) x[t] = t < nc ? e.ctx[t] : end[t - nc];
        for (int t = nc - 1; t < nc + ne - 1; t++) y[t] = end[t - nc + 1];
    }
}

// Batch k's summed row losses rows [B] into nll (the rows past the last ending are dropped).
static inline void mc_eval_take(const McEval& ev, int k, int B, const double* rows, std::vector<double>* nll) {
    for (int b = 0; b < B && k * B + b < ev.rows(); b++) (*nll)[(size_t)k * B + b] = rows[b];
}

// Accuracy from nll[r], the summed loss of each row (ending).
static inline void mc_eval_score(const McEval& ev, const std::vector<double>& nll, double* acc, double* acc_norm) {
    int right = 0, right_norm = 0, r = 0;
    for (const McExample& e : ev.examples) {
        int best = 0, best_norm = 0;
        for (int j = 0; j < (int)e.endings.size(); j++, r++) {
            const double s = nll[r], m = s / e.endings[j].size();
            if (j == 0 || s < nll[r - j + best]) best = j;
            if (j == 0 || m < nll[r - j + best_norm] / e.endings[best_norm].size()) best_norm = j;
        }
        right += best == e.label;
        right_norm += best_norm == e.label;
    }
    *acc = (double)right / ev.examples.size();
    *acc_norm = (double)right_norm / ev.examples.size();
}

// --eval-scores: one jsonl line per ending, appended: {"step", "example" (0-based), "ending", "label", "nll" (the
// ending's summed loss, minus its log-likelihood), "tokens"}.
static inline void mc_eval_write_scores(const McEval& ev, const std::vector<double>& nll, int step, const std::string& path) {
    FILE* f = fopen_check(path.c_str(), "ab");
    for (int r = 0; r < ev.rows(); r++) {
        const McExample& e = ev.examples[ev.row_example[r]];
        fprintf(f, "{\"step\":%d,\"example\":%d,\"ending\":%d,\"label\":%d,\"nll\":%.9g,\"tokens\":%zu}\n", step,
                ev.row_example[r], ev.row_ending[r], e.label, nll[r], e.endings[ev.row_ending[r]].size());
    }
    fclose_check(f, path_label(path).c_str());
}

// The accuracies from every ending's summed loss (the same on every rank): rank 0 logs them, and appends the scores
// to --eval-scores when given.
static inline void mc_eval_report(const McEval& ev, const std::vector<double>& nll, int step, bool rank0, Logger* lg,
                                  const std::string& scores) {
    double acc = 0, acc_norm = 0;
    mc_eval_score(ev, nll, &acc, &acc_norm);
    if (!rank0) return;
    log_eval(lg, step, acc, acc_norm, (int)ev.examples.size());
    if (!scores.empty()) mc_eval_write_scores(ev, nll, step, scores);
}
