// tests/ref_state.h: a reference state written by train_gpt.py --ref, as the test programs read
// it: the model config and training hyperparameters from the metadata, the token batches
// [steps][accum][B*T], and the open file for the tensors (weights by Hugging Face name,
// ref.logits, ref.loss, ref.grad.*, ref.losses, ref.grad_norms, ref.lrs, ref.final.*).
#pragma once
#include <string>
#include <vector>
#include "llmc/args.h"
#include "llmc/config.h"
#include "llmc/json.h"
#include "llmc/lr_schedule.h"
#include "llmc/safetensors.h"

struct RefState {
    SafeTensors st;
    std::string tag;                       // the file name, for messages
    ModelConfig c;
    TrainConfig tc;                        // lr, schedule, AdamW, clip, steps of the reference run
    int B = 0, T = 0, A = 0, S = 0;        // batch, sequence, accumulation, steps
    std::vector<int32_t> inputs, targets;  // [S, A, B, T]
};

static void ref_state_open(RefState* r, const char* path) {
    st_open(&r->st, path);
    std::string p = path;
    r->tag = p.substr(p.find_last_of('/') + 1);
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
    const size_t n = (size_t)r->S * r->A * r->B * r->T;
    r->inputs.resize(n);
    r->targets.resize(n);
    st_read_i32(&r->st, st_require(&r->st, "ref.inputs", (int64_t)n), r->inputs.data());
    st_read_i32(&r->st, st_require(&r->st, "ref.targets", (int64_t)n), r->targets.data());
}
