// llmc/run/sampling.h: text generation, shared by both trainers: the loop that extends a prompt (generate), drawing the
// next token from a row of logits with the run's RNG (temperature 1), the prompt, and printing a sample through
// the tokenizer named by --tokenizer (none: token ids). The forward pass that produces the logits is each trainer's
// own, handed to generate as a callable. A run that does not sample (-g 0) opens no tokenizer, and the trainers open
// it before they allocate the model, so a missing rank file stops a run at once.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>
#include "llmc/rng.h"
#include "llmc/data/tokenizer.h"

struct Sampler {
    std::string name;   // the tokenizer: "bytes", "gpt2", "llama3", a rank file, or "" for ids
    Tokenizer tok;
};

// gen_tokens: the tokens each sample draws (-g); 0 leaves the sampler closed (no file is read).
static inline void sampler_open(Sampler* s, const std::string& name, int vocab_size, int gen_tokens) {
    s->name = gen_tokens > 0 ? name : "";
    if (s->name.empty()) return;
    tokenizer_load_auto(&s->tok, name.c_str());
    if (tokenizer_vocab_size(&s->tok) > (uint32_t)vocab_size)
        die("--tokenizer %s has %u tokens but the model's vocabulary is %d", name.c_str(), tokenizer_vocab_size(&s->tok),
            vocab_size);
}

// the prompt: a newline for byte models, end-of-text for BPE ones, token 0 without a tokenizer
static inline int32_t sampler_start_token(const Sampler* s) {
    if (s->name.empty()) return 0;
    return s->name == "bytes" ? '\n' : (int32_t)tokenizer_eot(&s->tok);
}

// Draws a token from softmax(logits[0..V)) with one uniform of the RNG.
static inline int sample_from_logits(const float* logits, int V, uint64_t* rng) {
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

// The trainer's forward for sampling: the logits [V] (host, fp32) of position len - 1 of row 0 after a forward over
// window [B*T] (row 0: the text's last len <= T tokens, then zeros; the other rows zeros).
typedef std::function<const float*(const int32_t* window, int len)> LastLogitsFn;

// Extends prompt by n tokens, each drawn from the logits of the text's last position; the forward runs over the
// whole window each time (no KV cache: the trainers are not servers). B, T: the forward's batch shape.
static inline std::vector<int32_t> generate(std::vector<int32_t> prompt, int n, int B, int T, int V, uint64_t* rng,
                                            const LastLogitsFn& last_logits) {
    std::vector<int32_t> window((size_t)B * T, 0);
    for (int i = 0; i < n; i++) {
        const int len = std::min((int)prompt.size(), T);
        std::copy(prompt.end() - len, prompt.end(), window.begin());
        prompt.push_back(sample_from_logits(last_logits(window.data(), len), V, rng));
    }
    return prompt;
}

static inline void sampler_print(const Sampler* s, const std::vector<int32_t>& ids) {
    printf("--- sample ---\n");
    if (!s->name.empty()) {
        std::vector<uint32_t> u(ids.size());
        for (size_t i = 0; i < ids.size(); i++) u[i] = (uint32_t)ids[i];
        printf("%s", tokenizer_decode(&s->tok, u.data(), u.size()).c_str());
    } else {
        for (int32_t x : ids) printf("%d ", x);
    }
    printf("\n--------------\n");
}
