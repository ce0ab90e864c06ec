// train_gpt_cpu.cpp: the CPU reference trainer. GPT-3 and LLaMA (every switch of the model
// spec) in plain fp32 C++ with OpenMP: forward, backward, AdamW, schedule, clipping,
// gradient accumulation, validation, sampling, checkpoints. It is the oracle the CUDA trainer
// is checked against, so it is written for clarity and exact determinism. The layers, forward
// and backward, are in llmc/ref_ops.h; this file wires them into the model and the run.
//
// The model code is templated on the float type: float for training, double for the
// finite-difference check in test_gpt_cpu.cpp (which includes this file with TESTING defined).
//
// Shapes: B batch, T time, C channels, H query heads, KV kv heads, hd head dim,
// qd = H*hd, kvd = KV*hd, F ffn, F1 = F (gelu) or 2F (swiglu: gate then up), Vp padded vocab.
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "llmc/args.h"
#include "llmc/checkpoint.h"
#include "llmc/config.h"
#include "llmc/dataloader.h"
#include "llmc/flops.h"
#include "llmc/logger.h"
#include "llmc/lr_schedule.h"
#include "llmc/params.h"
#include "llmc/ref_ops.h"
#include "llmc/rng.h"
#include "llmc/tokenizer.h"
#include "llmc/weights_io.h"

// ----------------------------------------------------------------------------------------------
// The model: one flat buffer each for params and grads, laid out by the parameter table.

template <typename real>
struct LayerActs {
    std::vector<real> x;                          // [N,C] block input (residual stream)
    std::vector<real> ln1, ln1_mean, ln1_rstd;    // [N,C], [N], [N]
    std::vector<real> qkv;                        // [N, qd+2kvd], q and k after RoPE
    std::vector<real> att;                        // [B,H,T,T] softmax probabilities
    std::vector<real> atty;                       // [N,qd] attention output, before attn_out
    std::vector<real> x_mid;                      // [N,C] residual after attention
    std::vector<real> ln2, ln2_mean, ln2_rstd;    // [N,C], [N], [N]
    std::vector<real> fc1;                        // [N,F1]
    std::vector<real> act;                        // [N,F]
};

template <typename real>
struct GPT {
    ModelConfig cfg;
    ParamTable table;
    std::vector<real> params, grads;   // [table.total]
    std::vector<real> m, v;            // AdamW moments [table.total]
    int B = 0, T = 0;
    std::vector<LayerActs<real>> acts;
    std::vector<real> x_final, lnf, lnf_mean, lnf_rstd;  // [N,C], [N,C], [N], [N]
    std::vector<real> logits, lse;                       // [N,Vp] (dlogits after backward), [N]
    std::vector<real> rope_cos, rope_sin;                // [T, hd/2]
    std::vector<int32_t> inputs, targets;                // [N]
    std::vector<real> dres, dln, dtmp, dqkv, datty, dfc1, dact;  // backward scratch
    double loss = 0;
    int n_valid = 0;

    real* P(int idx) { return idx < 0 ? nullptr : params.data() + table.specs[idx].offset; }
    real* G(int idx) { return idx < 0 ? nullptr : grads.data() + table.specs[idx].offset; }
};

template <typename real>
void gpt_build(GPT<real>* g, const ModelConfig& c) {
    g->cfg = c;
    g->table = build_param_table(c);
    g->params.assign(g->table.total, 0);
    g->grads.assign(g->table.total, 0);
    g->m.assign(g->table.total, 0);
    g->v.assign(g->table.total, 0);
}

// Seeded init, independent of threads and layout (llmc/rng.h): normal(0, std) for matrices,
// std/sqrt(2L) for residual projections, ones for norm weights, zeros for biases and for the
// vocabulary padding rows.
template <typename real>
void gpt_init(GPT<real>* g, uint64_t seed) {
    const ModelConfig& c = g->cfg;
    for (size_t k = 0; k < g->table.specs.size(); k++) {
        const ParamSpec& s = g->table.specs[k];
        real* p = g->params.data() + s.offset;
        double std = s.init == INIT_NORMAL_RESID ? c.init_std / std::sqrt(2.0 * c.n_layer) : c.init_std;
        const size_t live = (size_t)(s.live_rows * s.cols);
        for (size_t i = 0; i < s.numel(); i++) {
            if (s.init == INIT_ONES) p[i] = 1;
            else if (s.init == INIT_ZEROS || i >= live) p[i] = 0;
            else p[i] = (real)(std * normal_at(seed, k, i));
        }
    }
}

template <typename real>
void gpt_alloc_acts(GPT<real>* g, int B, int T) {
    if (g->B == B && g->T == T) return;
    const ModelConfig& c = g->cfg;
    const size_t N = (size_t)B * T, C = c.n_embd, qd = cfg_q_dim(c), qkvd = cfg_qkv_dim(c), F = c.ffn,
                 F1 = cfg_fc1_dim(c), Vp = c.padded_vocab;
    g->B = B;
    g->T = T;
    g->acts.assign(c.n_layer, LayerActs<real>());
    for (LayerActs<real>& a : g->acts) {
        a.x.resize(N * C); a.ln1.resize(N * C); a.ln1_mean.resize(N); a.ln1_rstd.resize(N);
        a.qkv.resize(N * qkvd); a.att.resize((size_t)B * c.n_head * T * T); a.atty.resize(N * qd);
        a.x_mid.resize(N * C); a.ln2.resize(N * C); a.ln2_mean.resize(N); a.ln2_rstd.resize(N);
        a.fc1.resize(N * F1); a.act.resize(N * F);
    }
    g->x_final.resize(N * C); g->lnf.resize(N * C); g->lnf_mean.resize(N); g->lnf_rstd.resize(N);
    g->logits.resize(N * Vp); g->lse.resize(N);
    g->inputs.resize(N); g->targets.resize(N);
    g->dres.resize(N * C); g->dln.resize(N * C); g->dtmp.resize(N * C); g->dqkv.resize(N * qkvd);
    g->datty.resize(N * qd); g->dfc1.resize(N * F1); g->dact.resize(N * F);
    if (c.pos == POS_ROPE) rope_tables(c, T, &g->rope_cos, &g->rope_sin);
}

// Forward pass on inputs[B*T]; with targets (may be nullptr) computes the mean loss over
// non-ignored targets. Tokens must be in [0, vocab).
template <typename real>
void gpt_forward(GPT<real>* g, const int32_t* inputs, const int32_t* targets, int B, int T) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    gpt_alloc_acts(g, B, T);
    const int N = B * T, C = c.n_embd, H = c.n_head, KV = c.n_kv_head, hd = c.head_dim, qd = cfg_q_dim(c),
              qkvd = cfg_qkv_dim(c), F = c.ffn, F1 = cfg_fc1_dim(c), Vp = c.padded_vocab;
    const bool rms = c.norm == NORM_RMSNORM, swiglu = c.mlp == MLP_SWIGLU;
    for (int n = 0; n < N; n++) {
        if (inputs[n] < 0 || inputs[n] >= c.vocab_size) die("input token %d out of range [0, %d)", inputs[n], c.vocab_size);
        if (targets && (targets[n] < -1 || targets[n] >= c.vocab_size))
            die("target token %d out of range [-1, %d)", targets[n], c.vocab_size);
    }
    std::copy(inputs, inputs + N, g->inputs.begin());
    if (targets) std::copy(targets, targets + N, g->targets.begin());

    embedding_forward(g->acts[0].x.data(), inputs, g->P(t.wte), g->P(t.wpe), N, T, C);
    for (int l = 0; l < c.n_layer; l++) {
        const ParamTable::Block& w = t.blocks[l];
        LayerActs<real>& a = g->acts[l];
        real* x_out = l + 1 < c.n_layer ? g->acts[l + 1].x.data() : g->x_final.data();
        norm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), a.x.data(), g->P(w.ln1_w), g->P(w.ln1_b), N, C,
                     c.norm_eps, rms);
        matmul_forward(a.qkv.data(), a.ln1.data(), g->P(w.qkv_w), g->P(w.qkv_b), N, C, qkvd);
        if (c.pos == POS_ROPE) rope_rotate(a.qkv.data(), g->rope_cos.data(), g->rope_sin.data(), B, T, H, KV, hd, +1);
        attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, H, KV, hd);
        matmul_forward(g->dtmp.data(), a.atty.data(), g->P(w.attn_out_w), g->P(w.attn_out_b), N, qd, C);
        for (size_t i = 0; i < (size_t)N * C; i++) a.x_mid[i] = a.x[i] + g->dtmp[i];
        norm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.x_mid.data(), g->P(w.ln2_w), g->P(w.ln2_b), N,
                     C, c.norm_eps, rms);
        matmul_forward(a.fc1.data(), a.ln2.data(), g->P(w.fc1_w), g->P(w.fc1_b), N, C, F1);
        mlp_act_forward(a.act.data(), a.fc1.data(), N, F, swiglu);
        matmul_forward(g->dtmp.data(), a.act.data(), g->P(w.fc2_w), g->P(w.fc2_b), N, F, C);
        for (size_t i = 0; i < (size_t)N * C; i++) x_out[i] = a.x_mid[i] + g->dtmp[i];
    }
    norm_forward(g->lnf.data(), g->lnf_mean.data(), g->lnf_rstd.data(), g->x_final.data(), g->P(t.lnf_w), g->P(t.lnf_b),
                 N, C, c.norm_eps, rms);
    const int head = c.tied ? t.wte : t.lm_head;
    matmul_forward(g->logits.data(), g->lnf.data(), g->P(head), (const real*)nullptr, N, C, Vp);
    g->loss = 0;
    g->n_valid = 0;
    if (targets) {
        for (int n = 0; n < N; n++) g->n_valid += targets[n] >= 0;
        double total = crossentropy_forward(g->lse.data(), g->logits.data(), targets, N, c.vocab_size, Vp);
        g->loss = g->n_valid ? total / g->n_valid : 0.0;
    }
}

// Backward of (loss * loss_scale), accumulated into grads. Needs a forward with targets.
template <typename real>
void gpt_backward(GPT<real>* g, double loss_scale) {
    const ModelConfig& c = g->cfg;
    const ParamTable& t = g->table;
    const int B = g->B, T = g->T, N = B * T, C = c.n_embd, H = c.n_head, KV = c.n_kv_head, hd = c.head_dim,
              qd = cfg_q_dim(c), qkvd = cfg_qkv_dim(c), F = c.ffn, F1 = cfg_fc1_dim(c), Vp = c.padded_vocab;
    const bool rms = c.norm == NORM_RMSNORM, swiglu = c.mlp == MLP_SWIGLU;
    const real scale = g->n_valid ? (real)(loss_scale / g->n_valid) : (real)0;
    auto zero = [](std::vector<real>& v) { std::fill(v.begin(), v.end(), (real)0); };

    crossentropy_backward(g->logits.data(), g->lse.data(), g->targets.data(), N, c.vocab_size, Vp, scale);
    const int head = c.tied ? t.wte : t.lm_head;
    zero(g->dln);
    matmul_backward(g->dln.data(), g->G(head), (real*)nullptr, g->logits.data(), g->lnf.data(), g->P(head), N, C, Vp);
    zero(g->dres);
    norm_backward(g->dres.data(), g->G(t.lnf_w), g->G(t.lnf_b), g->dln.data(), g->x_final.data(), g->P(t.lnf_w),
                  g->lnf_mean.data(), g->lnf_rstd.data(), N, C, rms);
    for (int l = c.n_layer - 1; l >= 0; l--) {
        const ParamTable::Block& w = t.blocks[l];
        LayerActs<real>& a = g->acts[l];
        // dres is the gradient of the block output = x_mid + fc2(act(fc1(ln2(x_mid))))
        zero(g->dact);
        matmul_backward(g->dact.data(), g->G(w.fc2_w), g->G(w.fc2_b), g->dres.data(), a.act.data(), g->P(w.fc2_w), N, F, C);
        mlp_act_backward(g->dfc1.data(), g->dact.data(), a.fc1.data(), N, F, swiglu);
        zero(g->dln);
        matmul_backward(g->dln.data(), g->G(w.fc1_w), g->G(w.fc1_b), g->dfc1.data(), a.ln2.data(), g->P(w.fc1_w), N, C, F1);
        norm_backward(g->dres.data(), g->G(w.ln2_w), g->G(w.ln2_b), g->dln.data(), a.x_mid.data(), g->P(w.ln2_w),
                      a.ln2_mean.data(), a.ln2_rstd.data(), N, C, rms);
        // dres is now the gradient of x_mid = x + attn_out(attention(qkv(ln1(x))))
        zero(g->datty);
        matmul_backward(g->datty.data(), g->G(w.attn_out_w), g->G(w.attn_out_b), g->dres.data(), a.atty.data(),
                        g->P(w.attn_out_w), N, qd, C);
        attention_backward(g->dqkv.data(), g->datty.data(), a.qkv.data(), a.att.data(), B, T, H, KV, hd);
        if (c.pos == POS_ROPE) rope_rotate(g->dqkv.data(), g->rope_cos.data(), g->rope_sin.data(), B, T, H, KV, hd, -1);
        zero(g->dln);
        matmul_backward(g->dln.data(), g->G(w.qkv_w), g->G(w.qkv_b), g->dqkv.data(), a.ln1.data(), g->P(w.qkv_w), N, C, qkvd);
        norm_backward(g->dres.data(), g->G(w.ln1_w), g->G(w.ln1_b), g->dln.data(), a.x.data(), g->P(w.ln1_w),
                      a.ln1_mean.data(), a.ln1_rstd.data(), N, C, rms);
    }
    embedding_backward(g->G(t.wte), g->G(t.wpe), g->dres.data(), g->inputs.data(), N, T, C);
}

// Global gradient L2 norm, summed in double over fixed chunks (deterministic).
template <typename real>
double grad_norm(const GPT<real>* g) {
    const size_t n = g->grads.size(), chunk = 1 << 16, nchunks = (n + chunk - 1) / chunk;
    std::vector<double> part(nchunks, 0.0);
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < nchunks; k++) {
        double s = 0;
        for (size_t i = k * chunk; i < std::min(n, (k + 1) * chunk); i++) s += (double)g->grads[i] * g->grads[i];
        part[k] = s;
    }
    double s = 0;
    for (double x : part) s += x;
    return std::sqrt(s);
}

// AdamW in PyTorch's form: p *= 1 - lr*wd (matrices only); m, v moments with bias
// correction; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps). Grads are scaled by grad_scale
// (the clipping coefficient) as they are read.
template <typename real>
void adamw_update(GPT<real>* g, int t /* 1-based step */, double lr, const TrainConfig& tc, double grad_scale) {
    const double bc1 = 1.0 - std::pow(tc.beta1, t), bc2 = 1.0 - std::pow(tc.beta2, t);
    for (const ParamSpec& s : g->table.specs) {
        const real wd = s.is_matrix ? (real)tc.weight_decay : (real)0;
        const real b1 = (real)tc.beta1, b2 = (real)tc.beta2, eps = (real)tc.eps, lr_r = (real)lr,
                   step = (real)(lr / bc1), sbc2 = (real)std::sqrt(bc2), gs = (real)grad_scale;
        real* p = g->params.data() + s.offset;
        real* gr = g->grads.data() + s.offset;
        real* m = g->m.data() + s.offset;
        real* v = g->v.data() + s.offset;
        const int64_t n = (int64_t)s.numel();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            real gi = gr[i] * gs;
            p[i] *= (real)1 - lr_r * wd;
            m[i] = b1 * m[i] + ((real)1 - b1) * gi;
            v[i] = b2 * v[i] + ((real)1 - b2) * gi * gi;
            p[i] -= step * m[i] / (std::sqrt(v[i]) / sbc2 + eps);
        }
    }
}

// Clipping coefficient as torch.nn.utils.clip_grad_norm_: clip / (norm + 1e-6), at most 1.
static inline double clip_coef(double norm, double clip) {
    if (clip <= 0) return 1.0;
    return std::min(1.0, clip / (norm + 1e-6));
}

// One optimizer step over `accum` micro-batches: inputs/targets [accum][B*T]. Returns the mean
// micro-batch loss; *norm_out gets the pre-clip global gradient norm.
template <typename real>
double train_step(GPT<real>* g, const std::vector<std::vector<int32_t>>& inputs,
                  const std::vector<std::vector<int32_t>>& targets, int B, int T, int step, const TrainConfig& tc,
                  double lr, double* norm_out) {
    std::fill(g->grads.begin(), g->grads.end(), (real)0);
    const int accum = (int)inputs.size();
    double loss = 0;
    for (int a = 0; a < accum; a++) {
        gpt_forward(g, inputs[a].data(), targets[a].data(), B, T);
        gpt_backward(g, 1.0 / accum);
        loss += g->loss / accum;
    }
    double norm = grad_norm(g);
    adamw_update(g, step + 1, lr, tc, clip_coef(norm, tc.grad_clip));
    *norm_out = norm;
    return loss;
}

// Samples the next token from the logits of row n (temperature 1) using the run's RNG.
static inline int sample_token(const float* logits, int V, uint64_t* rng) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = std::max(mx, logits[v]);
    double sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp((double)logits[v] - mx);
    double r = rng_next_u01(rng) * sum, acc = 0;
    for (int v = 0; v < V; v++) {
        acc += std::exp((double)logits[v] - mx);
        if (r < acc) return v;
    }
    return V - 1;
}

// Generates n tokens after a prompt; the forward pass is re-run over the window (no KV cache:
// this is the reference, not a server).
static inline std::vector<int32_t> generate(GPT<float>* g, std::vector<int32_t> prompt, int n, int T, uint64_t* rng) {
    std::vector<int32_t> window(T, 0);
    for (int i = 0; i < n; i++) {
        int len = std::min((int)prompt.size(), T);
        std::copy(prompt.end() - len, prompt.end(), window.begin());
        gpt_forward(g, window.data(), (const int32_t*)nullptr, 1, T);
        const float* row = g->logits.data() + (size_t)(len - 1) * g->cfg.padded_vocab;
        prompt.push_back(sample_token(row, g->cfg.vocab_size, rng));
    }
    return prompt;
}

static inline double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#ifndef TESTING
int main(int argc, char** argv) {
    ModelConfig mc;
    TrainConfig tc;
    parse_args(argc, argv, &mc, &tc);

    GPT<float> g;
    gpt_build(&g, mc);
    gpt_init(&g, tc.seed);
    if (!tc.init_from.empty()) hf_import(tc.init_from, mc, g.table, g.params.data());
    if (!tc.export_init.empty()) {
        hf_export(tc.export_init, mc, g.table, g.params.data());
        printf("wrote initial weights of %s (%lld params) to %s\n", mc.name.c_str(), (long long)param_count(g.table),
               tc.export_init.c_str());
        return 0;
    }

    // data: a .txt file without -j is split 90/10 into train and validation
    const int B = tc.B, T = tc.T, dp = 1;
    DataLoader train, val;
    const bool split_text = tc.val_data.empty() && ends_with(tc.train_data, ".txt");
    loader_open(&train, tc.train_data, T, 0.0, split_text ? 0.9 : 1.0);
    if (split_text) loader_open(&val, tc.train_data, T, 0.9, 1.0);
    else if (!tc.val_data.empty()) loader_open(&val, tc.val_data, T);
    const bool have_val = val.num_samples > 0;
    if ((int64_t)train.max_token >= mc.vocab_size || (have_val && (int64_t)val.max_token >= mc.vocab_size))
        die("data '%s' holds token %u but the model's vocabulary is %d (set --vocab or pick another preset)",
            tc.train_data.c_str(), std::max(train.max_token, val.max_token), mc.vocab_size);
    const long micro_tokens = (long)B * T * dp;
    if (tc.total_batch == 0) tc.total_batch = micro_tokens;
    if (tc.total_batch % micro_tokens != 0)
        die("flag -d %ld is not a multiple of B*T*dp = %d*%d*%d = %ld", tc.total_batch, B, T, dp, micro_tokens);
    const int accum = (int)(tc.total_batch / micro_tokens);

    TrainState state;
    state.rng = tc.seed ^ 0x5DEECE66Dull;
    const std::string resume_dir = checkpoint_resolve(tc.resume, tc.out_dir);
    if (!resume_dir.empty()) {
        checkpoint_load(resume_dir, mc, g.table, g.params.data(), g.m.data(), g.v.data(), &state);
        printf("resumed from %s at step %d\n", resume_dir.c_str(), state.step);
    }
    if (!tc.out_dir.empty()) {
        std::error_code ec;
        fs::create_directories(tc.out_dir, ec);
        if (ec) die("cannot create output directory '%s' (flag -o): %s", tc.out_dir.c_str(), ec.message().c_str());
    }

    const int64_t n_params = param_count(g.table);
    print_config_table(mc, n_params, B, T, accum, dp, tc.steps, tc.lr, lr_schedule_name(tc.schedule), train.desc);
    printf("threads: %d\n", omp_get_max_threads());
    Logger lg;
    logger_open(&lg, tc.out_dir, !resume_dir.empty());
    lg.tokens_per_step = (double)tc.total_batch;
    lg.flops_per_token = model_flops_per_token(mc, T);

    std::vector<std::vector<int32_t>> inputs(accum, std::vector<int32_t>((size_t)B * T)), targets = inputs;
    auto evaluate = [&]() -> double {
        double s = 0;
        for (int i = 0; i < tc.val_batches; i++) {
            loader_batch(&val, (uint64_t)i * B, B, inputs[0].data(), targets[0].data());
            gpt_forward(&g, inputs[0].data(), targets[0].data(), B, T);
            s += g.loss;
        }
        return s / tc.val_batches;
    };
    Tokenizer tok;  // decodes samples (--tokenizer); none: samples print as token ids
    if (!tc.tokenizer.empty()) {
        tokenizer_load_auto(&tok, tc.tokenizer.c_str());
        if (tokenizer_vocab_size(&tok) > (uint32_t)mc.vocab_size)
            die("--tokenizer %s has %u tokens but the model's vocabulary is %d", tc.tokenizer.c_str(),
                tokenizer_vocab_size(&tok), mc.vocab_size);
    }
    auto print_sample = [&]() {
        if (tc.gen_tokens <= 0) return;
        // prompt: a newline for byte models, end-of-text for BPE ones, token 0 otherwise
        int32_t start = tc.tokenizer.empty() ? 0 : tc.tokenizer == "bytes" ? '\n' : (int32_t)tokenizer_eot(&tok);
        std::vector<int32_t> out = generate(&g, {start}, tc.gen_tokens, T, &state.rng);
        printf("--- sample ---\n");
        if (!tc.tokenizer.empty()) {
            std::vector<uint32_t> ids(out.begin(), out.end());
            printf("%s", tokenizer_decode(&tok, ids.data(), ids.size()).c_str());
        } else {
            for (int32_t x : out) printf("%d ", x);
        }
        printf("\n--------------\n");
    };

    double loss = 0, val_loss = -1;
    if (have_val && state.step == 0 && tc.val_every > 0) { val_loss = evaluate(); log_val(&lg, 0, val_loss); }
    for (int step = state.step; step < tc.steps; step++) {
        double t0 = now_ms();
        for (int a = 0; a < accum; a++) {
            loader_batch(&train, state.train_sample, B, inputs[a].data(), targets[a].data());
            state.train_sample += B;
        }
        double lr = lr_at(step, tc.steps, tc.warmup, tc.lr, tc.min_lr, tc.schedule, tc.decay_frac);
        double norm = 0;
        loss = train_step(&g, inputs, targets, B, T, step, tc, lr, &norm);
        state.step = step + 1;
        log_step(&lg, step + 1, tc.steps, loss, lr, norm, now_ms() - t0);
        if (!std::isfinite(loss)) die("loss became %f at step %d (lower -l or check the data)", loss, step + 1);
        const bool last = step + 1 == tc.steps;
        if (have_val && tc.val_every > 0 && ((step + 1) % tc.val_every == 0 || last)) {
            val_loss = evaluate();
            log_val(&lg, step + 1, val_loss);
        }
        if (tc.sample_every > 0 && (step + 1) % tc.sample_every == 0 && !last) print_sample();
        if (!tc.out_dir.empty() && ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || last))
            checkpoint_save(tc.out_dir, mc, g.table, g.params.data(), g.m.data(), g.v.data(), state, tc.keep_last);
    }
    print_sample();
    if (!tc.save_safetensors.empty()) {
        hf_export(tc.save_safetensors, mc, g.table, g.params.data());
        printf("wrote %s\n", tc.save_safetensors.c_str());
    }
    log_summary(&lg, mc, n_params, loss, val_loss, 0.0);
    return 0;
}
#endif
