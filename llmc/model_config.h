// llmc/model_config.h: the model spec. A model is a set of orthogonal switches (norm, positions,
// MLP, attention shape, biases, tied head, vocabulary, init); the named presets are values
// of those switches. Also the JSON form of a config, which travels inside safetensors
// metadata so that train_gpt.py and checkpoints describe exactly the same model.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "llmc/json.h"
#include "llmc/utils.h"

enum NormKind { NORM_LAYERNORM, NORM_RMSNORM };
// Positions: a learned table added to the embedding, RoPE on q and k, or ALiBi (Baichuan2-13B, BLOOM): a per-head
// linear bias slope_h * (key - query) on the attention scores (llmc/rope_tables.h alibi_slopes), no parameters.
enum PosKind { POS_LEARNED, POS_ROPE, POS_ALIBI };
static inline const char* pos_name(PosKind p) { return p == POS_ROPE ? "rope" : p == POS_ALIBI ? "alibi" : "learned"; }
enum MlpKind { MLP_GELU, MLP_SWIGLU };
// Hugging Face tensor names: GPT2LMHeadModel's, LlamaForCausalLM's (Qwen2's and Qwen3's alike), Baichuan's (q, k, v
// as one W_pack tensor) or Qwen-1's QWenLMHeadModel (transformer.h.N.attn.c_attn with q, k, v stacked; the MLP's w2
// the gate and w1 the up projection: c_proj(w1(x) * silu(w2(x)))); auto (until config_finalize): gpt2 for a GELU
// MLP, else llama.
enum NamingKind { NAMING_AUTO, NAMING_GPT2, NAMING_LLAMA, NAMING_BAICHUAN, NAMING_QWEN };
static inline const char* naming_name(NamingKind n) {
    return n == NAMING_GPT2 ? "gpt2" : n == NAMING_BAICHUAN ? "baichuan" : n == NAMING_QWEN ? "qwen"
           : n == NAMING_LLAMA ? "llama" : "auto";
}

struct ModelConfig {
    std::string name;
    int n_layer = 0;         // L
    int n_embd = 0;          // C
    int n_head = 0;          // H, query heads
    int n_kv_head = 0;       // KV heads (GQA/MQA when < H)
    int head_dim = 0;        // hd; C / H unless set
    int ffn = 0;             // MLP hidden size (per branch for SwiGLU)
    int vocab_size = 0;      // V, real tokens
    int padded_vocab = 0;    // Vp, V rounded up to a multiple of 128 * tp (derived)
    int seq_len = 0;         // maximum sequence length (size of the learned position table)
    NormKind norm = NORM_LAYERNORM;
    float norm_eps = 1e-5f;
    PosKind pos = POS_LEARNED;
    float rope_theta = 10000.0f;
    // Llama 3.1 RoPE frequency scaling; factor 0 means off.
    float rope_factor = 0.0f, rope_low_freq = 1.0f, rope_high_freq = 4.0f;
    int rope_orig_ctx = 8192;
    MlpKind mlp = MLP_GELU;
    bool bias = true;        // biases on linear layers (never on the LM head)
    bool qkv_bias = false;   // biases on the q, k, v projections even when bias is off (Qwen 1, 2, 2.5)
    bool tied = true;        // LM head shares the token embedding
    bool norm_head = false;  // NormHead (Baichuan2): the LM head's rows scaled to unit length before the product
    bool qk_norm = false;    // QK-norm (Qwen3): an RMSNorm over each head of q and of k (a weight [hd] each), before RoPE
    float init_std = 0.02f;  // residual projections get init_std / sqrt(2L)
    NamingKind naming = NAMING_AUTO;  // Hugging Face names of safetensors files
};

// Derived sizes, written once so nobody recomputes them differently.
static inline int cfg_q_dim(const ModelConfig& c) { return c.n_head * c.head_dim; }
static inline int cfg_kv_dim(const ModelConfig& c) { return c.n_kv_head * c.head_dim; }
static inline int cfg_qkv_dim(const ModelConfig& c) { return cfg_q_dim(c) + 2 * cfg_kv_dim(c); }
static inline int cfg_fc1_dim(const ModelConfig& c) { return c.mlp == MLP_SWIGLU ? 2 * c.ffn : c.ffn; }
static inline bool cfg_has_qkv_bias(const ModelConfig& c) { return c.bias || c.qkv_bias; }
// Hugging Face naming family used for safetensors: GPT2LMHeadModel, or LlamaForCausalLM and Baichuan's.
static inline bool cfg_gpt2_naming(const ModelConfig& c) {
    return c.naming == NAMING_GPT2 || (c.naming == NAMING_AUTO && c.mlp == MLP_GELU);
}

static inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Fill derived fields and check that the shapes are consistent. tp is the tensor-parallel
// degree (vocabulary is padded to a multiple of 128 * tp so every shard is kernel-friendly).
static inline void config_finalize(ModelConfig& c, int tp = 1) {
    if (c.n_layer <= 0 || c.n_embd <= 0 || c.n_head <= 0 || c.ffn <= 0 || c.vocab_size <= 0 || c.seq_len <= 0)
        die("model '%s': layers, embd, heads, ffn, vocab and seq must all be positive", c.name.c_str());
    if (c.n_kv_head == 0) c.n_kv_head = c.n_head;
    if (c.head_dim == 0) {
        if (c.n_embd % c.n_head != 0)
            die("model '%s': --embd %d is not divisible by --heads %d (set --head-dim explicitly)",
                c.name.c_str(), c.n_embd, c.n_head);
        c.head_dim = c.n_embd / c.n_head;
    }
    if (c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0)
        die("model '%s': --heads %d is not divisible by --kv-heads %d", c.name.c_str(), c.n_head, c.n_kv_head);
    if (c.pos == POS_ROPE && c.head_dim % 2 != 0)
        die("model '%s': RoPE needs an even head dim, got %d", c.name.c_str(), c.head_dim);
    if (!(c.norm_eps > 0)) die("model '%s': --norm-eps must be positive", c.name.c_str());
    if (c.pos == POS_ALIBI && c.rope_factor > 0)
        die("model '%s': RoPE frequency scaling (--rope-scaling) with --pos alibi, which has no rotary positions",
            c.name.c_str());
    if (c.norm_head && c.tied)
        die("model '%s': --norm-head 1 needs an untied LM head (--tied 0): NormHead scales the head's own rows, not "
            "the token embedding", c.name.c_str());
    c.padded_vocab = round_up(c.vocab_size, 128 * tp);
    if (c.naming == NAMING_AUTO) c.naming = c.mlp == MLP_GELU ? NAMING_GPT2 : NAMING_LLAMA;
}

// ----------------------------------------------------------------------------------------------
// Presets (docs/design.md section 2). GPT-3: GPT-2 BPE vocab, learned positions, LayerNorm, GELU,
// biases, tied head. LLaMA: RMSNorm, RoPE, SwiGLU, no biases, untied head.

static inline ModelConfig gpt3_preset(const char* name, int L, int C, int H, int ffn) {
    ModelConfig c;
    c.name = name; c.n_layer = L; c.n_embd = C; c.n_head = H; c.n_kv_head = H; c.ffn = ffn;
    c.vocab_size = 50257; c.seq_len = 2048;
    c.norm = NORM_LAYERNORM; c.norm_eps = 1e-5f; c.pos = POS_LEARNED; c.mlp = MLP_GELU;
    c.bias = true; c.tied = true; c.init_std = 0.02f;
    return c;
}

static inline ModelConfig llama_preset(const char* name, int L, int C, int H, int KV, int ffn, int vocab,
                                       int seq, float eps, float theta) {
    ModelConfig c;
    c.name = name; c.n_layer = L; c.n_embd = C; c.n_head = H; c.n_kv_head = KV; c.ffn = ffn;
    c.vocab_size = vocab; c.seq_len = seq;
    c.norm = NORM_RMSNORM; c.norm_eps = eps; c.pos = POS_ROPE; c.rope_theta = theta; c.mlp = MLP_SWIGLU;
    c.bias = false; c.tied = false; c.init_std = 0.02f;
    return c;
}

static inline std::vector<ModelConfig> all_presets() {
    std::vector<ModelConfig> p;
    // tiny presets for tests and the CPU default, short context: the GPT one keeps GPT-2's BPE
    // vocabulary (the default job trains it on GPT-2 tokens), the LLaMA one has bytes (vocab 256)
    ModelConfig g = gpt3_preset("gpt3_tiny", 4, 128, 4, 512);
    g.seq_len = 128;
    p.push_back(g);
    ModelConfig l = llama_preset("llama_tiny", 4, 128, 4, 2, 352, 256, 128, 1e-5f, 10000.0f);
    p.push_back(l);
    p.push_back(gpt3_preset("gpt3_125m", 12, 768, 12, 3072));
    p.push_back(gpt3_preset("gpt3_350m", 24, 1024, 16, 4096));
    p.push_back(gpt3_preset("gpt3_760m", 24, 1536, 16, 6144));
    p.push_back(gpt3_preset("gpt3_1.3b", 24, 2048, 16, 8192));
    p.push_back(gpt3_preset("gpt3_2.7b", 32, 2560, 32, 10240));
    p.push_back(gpt3_preset("gpt3_6.7b", 32, 4096, 32, 16384));
    p.push_back(gpt3_preset("gpt3_13b", 40, 5120, 40, 20480));
    p.push_back(gpt3_preset("gpt3_175b", 96, 12288, 96, 49152));
    p.push_back(llama_preset("llama_7b", 32, 4096, 32, 32, 11008, 32000, 2048, 1e-6f, 10000.0f));
    p.push_back(llama_preset("llama_13b", 40, 5120, 40, 40, 13824, 32000, 2048, 1e-6f, 10000.0f));
    p.push_back(llama_preset("llama_65b", 80, 8192, 64, 64, 22016, 32000, 2048, 1e-6f, 10000.0f));
    p.push_back(llama_preset("llama2_7b", 32, 4096, 32, 32, 11008, 32000, 4096, 1e-5f, 10000.0f));
    p.push_back(llama_preset("llama2_13b", 40, 5120, 40, 40, 13824, 32000, 4096, 1e-5f, 10000.0f));
    p.push_back(llama_preset("llama2_70b", 80, 8192, 64, 8, 28672, 32000, 4096, 1e-5f, 10000.0f));
    p.push_back(llama_preset("llama3_8b", 32, 4096, 32, 8, 14336, 128256, 8192, 1e-5f, 500000.0f));
    p.push_back(llama_preset("llama3_70b", 80, 8192, 64, 8, 28672, 128256, 8192, 1e-5f, 500000.0f));
    for (int i = 0; i < 2; i++) {
        ModelConfig s = i == 0 ? llama_preset("llama3.2_1b", 16, 2048, 32, 8, 8192, 128256, 8192, 1e-5f, 500000.0f)
                               : llama_preset("llama3.2_3b", 28, 3072, 24, 8, 8192, 128256, 8192, 1e-5f, 500000.0f);
        s.tied = true;
        s.rope_factor = 32.0f; s.rope_low_freq = 1.0f; s.rope_high_freq = 4.0f; s.rope_orig_ctx = 8192;
        p.push_back(s);
    }
    // Qwen (Qwen-7B, Qwen2.5): LLaMA's blocks with biases on the q, k, v projections only; the small Qwen2.5
    // models tie the head. Shapes from the models' Hugging Face config.json.
    struct Qwen { const char* name; int L, C, H, KV, ffn, vocab, seq; float theta; bool tied; };
    for (const Qwen& q : {Qwen{"qwen_7b", 32, 4096, 32, 32, 11008, 151936, 8192, 10000.0f, false},
                          Qwen{"qwen2.5_0.5b", 24, 896, 14, 2, 4864, 151936, 32768, 1000000.0f, true},
                          Qwen{"qwen2.5_1.5b", 28, 1536, 12, 2, 8960, 151936, 32768, 1000000.0f, true},
                          Qwen{"qwen2.5_7b", 28, 3584, 28, 4, 18944, 152064, 32768, 1000000.0f, false}}) {
        ModelConfig c = llama_preset(q.name, q.L, q.C, q.H, q.KV, q.ffn, q.vocab, q.seq, 1e-6f, q.theta);
        c.qkv_bias = true; c.tied = q.tied;
        if (std::string(q.name) == "qwen_7b") c.naming = NAMING_QWEN;  // Qwen-1's published checkpoints
        p.push_back(c);
    }
    // Qwen3: LLaMA's blocks with QK-norm (an RMSNorm over each q and k head before RoPE), no biases, head dim 128
    // whatever the width; the small ones tie the head. Shapes from the models' Hugging Face config.json.
    struct Qwen3 { const char* name; int L, C, H, ffn; bool tied; };
    for (const Qwen3& q : {Qwen3{"qwen3_0.6b", 28, 1024, 16, 3072, true}, Qwen3{"qwen3_1.7b", 28, 2048, 16, 6144, true},
                           Qwen3{"qwen3_8b", 36, 4096, 32, 12288, false}}) {
        ModelConfig c = llama_preset(q.name, q.L, q.C, q.H, 8, q.ffn, 151936, 40960, 1e-6f, 1000000.0f);
        c.head_dim = 128; c.qk_norm = true; c.tied = q.tied;
        p.push_back(c);
    }
    // Baichuan2: LLaMA's blocks with NormHead and Baichuan's names (W_pack); 13B has ALiBi positions instead of RoPE.
    // Shapes from the models' Hugging Face config.json.
    ModelConfig b7 = llama_preset("baichuan2_7b", 32, 4096, 32, 32, 11008, 125696, 4096, 1e-6f, 10000.0f);
    b7.norm_head = true; b7.naming = NAMING_BAICHUAN;
    p.push_back(b7);
    ModelConfig b13 = llama_preset("baichuan2_13b", 40, 5120, 40, 40, 13696, 125696, 4096, 1e-6f, 10000.0f);
    b13.pos = POS_ALIBI; b13.norm_head = true; b13.naming = NAMING_BAICHUAN;
    p.push_back(b13);
    // FlagPerf's "llama3_8B" on Megatron-core defaults: learned positions, tied, biases on.
    ModelConfig f = llama_preset("flagperf_llama3_8b", 32, 4096, 32, 8, 14336, 128256, 8192, 1e-5f, 500000.0f);
    f.pos = POS_LEARNED; f.tied = true; f.bias = true; f.init_std = 0.008f;
    p.push_back(f);
    return p;
}

// Returns false if no preset has this name.
static inline bool find_preset(const std::string& name, ModelConfig* out) {
    for (const ModelConfig& c : all_presets())
        if (c.name == name) { *out = c; return true; }
    return false;
}

// ----------------------------------------------------------------------------------------------
// JSON form (flat, stable key order). train_gpt.py reads exactly these keys.

static inline std::string config_to_json(const ModelConfig& c) {
    char buf[1024];
    snprintf(buf, sizeof(buf),
             "{\"name\":\"%s\",\"n_layer\":%d,\"n_embd\":%d,\"n_head\":%d,\"n_kv_head\":%d,\"head_dim\":%d,"
             "\"ffn\":%d,\"vocab_size\":%d,\"padded_vocab_size\":%d,\"seq_len\":%d,\"norm\":\"%s\",\"norm_eps\":%.9g,"
             "\"pos\":\"%s\",\"rope_theta\":%.9g,\"rope_scaling\":{\"factor\":%.9g,\"low_freq_factor\":%.9g,"
             "\"high_freq_factor\":%.9g,\"original_max_position\":%d},\"mlp\":\"%s\",\"bias\":%s,\"qkv_bias\":%s,"
             "\"tied\":%s,\"norm_head\":%s,\"qk_norm\":%s,\"init_std\":%.9g,\"naming\":\"%s\"}",
             c.name.c_str(), c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.ffn, c.vocab_size,
             c.padded_vocab, c.seq_len, c.norm == NORM_RMSNORM ? "rmsnorm" : "layernorm", c.norm_eps,
             pos_name(c.pos), c.rope_theta, c.rope_factor, c.rope_low_freq,
             c.rope_high_freq, c.rope_orig_ctx, c.mlp == MLP_SWIGLU ? "swiglu" : "gelu",
             c.bias ? "true" : "false", c.qkv_bias ? "true" : "false", c.tied ? "true" : "false",
             c.norm_head ? "true" : "false", c.qk_norm ? "true" : "false", c.init_std,
             naming_name(c.naming == NAMING_AUTO ? (cfg_gpt2_naming(c) ? NAMING_GPT2 : NAMING_LLAMA) : c.naming));
    return buf;
}

// The first field in which two configs differ, as "key: A here, B there" ("" when none), for the messages of a file
// written for another model. Nested objects (rope_scaling) are compared field by field.
static inline std::string config_difference(const ModelConfig& a, const ModelConfig& b, const char* here,
                                            const char* there) {
    Json ja, jb;
    std::string err, sa = config_to_json(a), sb = config_to_json(b);
    json_parse(sa.data(), sa.size(), &ja, &err);
    json_parse(sb.data(), sb.size(), &jb, &err);
    std::string out;
    auto text = [](const Json& v) {
        char n[32];
        if (v.kind != Json::NUM) return json_dump(v);
        snprintf(n, sizeof(n), "%.9g", v.num);
        return std::string(n);
    };
    auto walk = [&](auto&& self, const Json& x, const Json& y, const std::string& prefix) -> void {
        for (const auto& kv : x.obj) {
            const Json* w = y.get(kv.first);
            if (!out.empty() || !w) continue;
            if (kv.second.kind == Json::OBJ && w->kind == Json::OBJ) self(self, kv.second, *w, prefix + kv.first + ".");
            else if (text(kv.second) != text(*w))
                out = prefix + kv.first + ": " + text(kv.second) + " " + here + ", " + text(*w) + " " + there;
        }
    };
    walk(walk, ja, jb, "");
    return out;
}

// Inverse of config_to_json. 'where' names the file the JSON came from, for messages.
static inline ModelConfig config_from_json(const std::string& text, const char* where) {
    Json j;
    std::string err;
    if (!json_parse(text.data(), text.size(), &j, &err) || j.kind != Json::OBJ)
        die("%s: model config is not valid JSON (%s)", where, err.c_str());
    auto num = [&](const Json& o, const char* key) -> double {
        const Json* v = o.get(key);
        if (!v || v->kind != Json::NUM) die("%s: model config lacks number '%s'", where, key);
        return v->num;
    };
    auto str = [&](const char* key) -> std::string {
        const Json* v = j.get(key);
        if (!v || v->kind != Json::STR) die("%s: model config lacks string '%s'", where, key);
        return v->str;
    };
    // a switch added after the first checkpoints were written may be absent (off); present, it must be a boolean
    auto flag = [&](const char* key, bool optional = false) -> bool {
        const Json* v = j.get(key);
        if (!v && optional) return false;
        if (!v || v->kind != Json::BOOL) die("%s: model config lacks boolean '%s'", where, key);
        return v->b;
    };
    ModelConfig c;
    c.name = str("name");
    c.n_layer = (int)num(j, "n_layer"); c.n_embd = (int)num(j, "n_embd"); c.n_head = (int)num(j, "n_head");
    c.n_kv_head = (int)num(j, "n_kv_head"); c.head_dim = (int)num(j, "head_dim"); c.ffn = (int)num(j, "ffn");
    c.vocab_size = (int)num(j, "vocab_size"); c.seq_len = (int)num(j, "seq_len");
    std::string norm = str("norm"), pos = str("pos"), mlp = str("mlp");
    if (norm != "layernorm" && norm != "rmsnorm") die("%s: unknown norm '%s'", where, norm.c_str());
    if (pos != "learned" && pos != "rope" && pos != "alibi") die("%s: unknown pos '%s'", where, pos.c_str());
    if (mlp != "gelu" && mlp != "swiglu") die("%s: unknown mlp '%s'", where, mlp.c_str());
    c.norm = norm == "rmsnorm" ? NORM_RMSNORM : NORM_LAYERNORM;
    c.pos = pos == "rope" ? POS_ROPE : pos == "alibi" ? POS_ALIBI : POS_LEARNED;
    c.mlp = mlp == "swiglu" ? MLP_SWIGLU : MLP_GELU;
    c.norm_eps = (float)num(j, "norm_eps"); c.rope_theta = (float)num(j, "rope_theta");
    const Json* rs = j.get("rope_scaling");
    if (!rs || rs->kind != Json::OBJ) die("%s: model config lacks object 'rope_scaling'", where);
    c.rope_factor = (float)num(*rs, "factor"); c.rope_low_freq = (float)num(*rs, "low_freq_factor");
    c.rope_high_freq = (float)num(*rs, "high_freq_factor"); c.rope_orig_ctx = (int)num(*rs, "original_max_position");
    c.bias = flag("bias"); c.qkv_bias = flag("qkv_bias", true); c.tied = flag("tied");
    c.norm_head = flag("norm_head", true);
    c.qk_norm = flag("qk_norm", true);
    c.init_std = (float)num(j, "init_std");
    const std::string naming = str("naming");
    if (naming != "gpt2" && naming != "llama" && naming != "baichuan" && naming != "qwen")
        die("%s: unknown naming '%s'", where, naming.c_str());
    c.naming = naming == "gpt2" ? NAMING_GPT2 : naming == "baichuan" ? NAMING_BAICHUAN
               : naming == "qwen" ? NAMING_QWEN : NAMING_LLAMA;
    config_finalize(c);
    return c;
}
