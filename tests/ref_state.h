// tests/ref_state.h: a reference state written by train_gpt.py --ref, as the test programs read
// it: the model config and training hyperparameters from the metadata, the token batches
// [steps][accum][B*T], and the open file for the tensors (weights by Hugging Face name,
// ref.logits, ref.loss, ref.grad.*, ref.losses, ref.grad_norms, ref.lrs, ref.final.*).
//   key_bias_mask(c, table)   the elements whose trajectory is rounding noise (below)
//   update_rel_err(r, table, init, ours)   how far a trainer's 10-step weight update is from the reference's
//   update_err_parts(r, table, init, ours, num, den)   the same per tensor (squared numerator, denominator)
// The files also hold ref.opt.grad1.*, ref.opt.grad2.*, ref.opt.update.* (train_gpt.py optimizer_ref): two
// float64 AdamW steps on given bf16 gradients, for the check of the optimizer alone (test_gpt.cu).
#pragma once
#include <cmath>
#include <string>
#include <vector>
#include "llmc/run/flags.h"
#include "llmc/model_config.h"
#include "llmc/json.h"
#include "llmc/lr_schedule.h"
#include "llmc/param_table.h"
#include "llmc/run/safetensors.h"
#include "llmc/run/weights_io.h"

struct RefState {
    SafeTensors st;
    std::string tag;                       // the file name without directory and extension, for messages
    ModelConfig c;
    TrainConfig tc;                        // lr, schedule, AdamW, clip, steps of the reference run
    int B = 0, T = 0, A = 0, S = 0;        // batch, sequence, accumulation, steps
    std::vector<int32_t> inputs, targets;  // [S, A, B, T]
};

static void ref_state_open(RefState* r, const char* path) {
    st_open(&r->st, path);
    std::string p = path;
    r->tag = p.substr(p.find_last_of('/') + 1);  // the file name without its directory and extension
    if (ends_with(r->tag, ".safetensors")) r->tag.resize(r->tag.size() - strlen(".safetensors"));
    auto meta = [&](const char* k) {
        auto it = r->st.metadata.find(k);
        if (it == r->st.metadata.end()) die("%s: no '%s' in metadata", path, k);
        return it->second;
    };
    r->c = config_from_json(meta("config"), path);
    Json tj;
    std::string err, train_text = meta("train");
    if (!json_parse(train_text.data(), train_text.size(), &tj, &err)) die("%s: bad 'train' metadata: %s", path, err.c_str());
    auto num = [&](const char* k) {
        const Json* v = tj.get(k);
        if (!v || v->kind != Json::NUM) die("%s: 'train' metadata lacks '%s'", path, k);
        return v->num;
    };
    r->B = (int)num("batch"); r->T = (int)num("seq"); r->A = (int)num("accum"); r->S = (int)num("steps");
    TrainConfig& tc = r->tc;
    tc.lr = num("lr"); tc.min_lr = num("min_lr"); tc.warmup = (int)num("warmup"); tc.decay_frac = num("decay_frac");
    tc.beta1 = num("beta1"); tc.beta2 = num("beta2"); tc.eps = num("eps"); tc.weight_decay = num("wd");
    tc.grad_clip = num("clip"); tc.steps = r->S;
    const Json* sch = tj.get("schedule");
    if (!sch || sch->kind != Json::STR || !lr_schedule_from_name(sch->str, &tc.schedule)) die("%s: bad schedule", path);
    // documents (train_gpt.py --eod-token): the switches, and the targets as the run's loop gives them to a trainer
    if (const Json* e = tj.get("eod_token"); e && e->kind == Json::NUM && e->num >= 0) {
        auto flag = [&](const char* k) {
            const Json* v = tj.get(k);
            if (!v || v->kind != Json::BOOL) die("%s: 'train' metadata lacks '%s'", path, k);
            return v->b;
        };
        tc.docs.eod = (int64_t)e->num;
        tc.docs.reset_positions = flag("reset_position_ids");
        tc.docs.reset_mask = flag("reset_attention_mask");
        tc.docs.mask_loss = flag("eod_mask_loss");
    }
    const size_t n = (size_t)r->S * r->A * r->B * r->T;
    r->inputs.resize(n);
    r->targets.resize(n);
    st_read_i32(&r->st, st_require(&r->st, "ref.inputs", (int64_t)n), r->inputs.data());
    st_read_i32(&r->st, st_require(&r->st, "ref.targets", (int64_t)n), r->targets.data());
    documents_mask_loss(tc.docs, r->inputs.data(), r->targets.data(), n);
}

// The micro-batches of step s of the reference run: in[a], tg[a] = inputs, targets [B*T] of micro-batch a.
static void ref_step_batches(const RefState& r, int s, std::vector<std::vector<int32_t>>* in,
                             std::vector<std::vector<int32_t>>* tg) {
    const size_t N = (size_t)r.B * r.T;
    in->assign(r.A, {});
    tg->assign(r.A, {});
    for (int a = 0; a < r.A; a++) {
        const size_t off = ((size_t)s * r.A + a) * N;
        (*in)[a].assign(r.inputs.begin() + off, r.inputs.begin() + off + N);
        (*tg)[a].assign(r.targets.begin() + off, r.targets.begin() + off + N);
    }
}

// Without RoPE (learned positions, ALiBi) the key bias gets an exactly-zero gradient in exact arithmetic (adding q.b to every score of
// a query leaves the softmax unchanged), so every trainer feeds rounding noise to AdamW, which normalises it
// to steps of size ~lr: the final key-bias values are noise. true at those elements of the flat table.
static std::vector<bool> key_bias_mask(const ModelConfig& c, const ParamTable& table) {
    std::vector<bool> mask(table.total, false);
    if (!(cfg_has_qkv_bias(c) && c.pos != POS_ROPE)) return mask;
    for (const ParamTable::Block& b : table.blocks)
        for (int i = cfg_q_dim(c); i < cfg_q_dim(c) + cfg_kv_dim(c); i++) mask[table.specs[b.qkv_b].offset + i] = true;
    return mask;
}

// Per tensor of the table (table.specs order): num[k] = ||(ours - init) - (ref_final - init)||^2 and
// den[k] = ||ref_final - init||^2 over the tensor's elements that key_bias_mask does not exclude. A non-finite
// weight of ours makes num infinite (a NaN must not pass as a small error).
static void update_err_parts(const RefState& r, const ParamTable& table, const float* init, const float* ours,
                             std::vector<double>* num, std::vector<double>* den) {
    std::vector<float> fin(table.total);
    hf_read_tensors(&r.st, table, "ref.final.", fin.data());
    const std::vector<bool> skip = key_bias_mask(r.c, table);
    num->assign(table.specs.size(), 0.0);
    den->assign(table.specs.size(), 0.0);
    for (size_t k = 0; k < table.specs.size(); k++) {
        const ParamSpec& s = table.specs[k];
        for (size_t i = s.offset; i < s.offset + s.numel(); i++) {
            if (skip[i]) continue;
            if (!std::isfinite(ours[i])) { (*num)[k] = INFINITY; continue; }
            const double d_ref = (double)fin[i] - init[i], d = (double)ours[i] - fin[i];
            (*num)[k] += d * d;
            (*den)[k] += d_ref * d_ref;
        }
    }
}

// ||(ours - init) - (ref_final - init)|| / ||ref_final - init|| over every parameter but the key biases of
// key_bias_mask: the error of the whole optimizer trajectory (AdamW, decay, clipping, schedule) relative to
// the update itself. An optimizer that does nothing scores 1, one that steps the wrong way 2.
static double update_rel_err(const RefState& r, const ParamTable& table, const float* init, const float* ours) {
    std::vector<double> num, den;
    update_err_parts(r, table, init, ours, &num, &den);
    double n = 0, d = 0;
    for (size_t k = 0; k < num.size(); k++) { n += num[k]; d += den[k]; }
    if (!std::isfinite(n) || !std::isfinite(d)) return INFINITY;  // a NaN or inf fails, never scores low
    return std::sqrt(n / std::max(d, 1e-300));
}
