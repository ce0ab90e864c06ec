// llmc/dataloader.h: batches of (inputs, targets) from a token stream.
// Sources: a plain text file read as bytes (vocab 256, the zero-dependency default), or a
// glob of llm.c token shards (256 x int32 header, magic 20240520, version 1 = uint16 tokens,
// version 2 = uint32, header[2] = token count), concatenated in sorted file order.
//
// Sample i is the window of T+1 tokens starting at token i*T (consecutive windows overlap by
// one token); inputs are its first T tokens, targets its last T. Batches are a pure function
// of the first sample index, so the position in the data is just a counter (saved in
// checkpoints) and every parallel layout can compute which samples are its own.
#pragma once
#include <glob.h>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>
#include "llmc/utils.h"

struct DataLoader {
    std::string desc;               // what was loaded, for the log
    std::vector<uint32_t> tokens;   // the whole stream
    int T = 0;
    uint64_t num_samples = 0;
    uint32_t max_token = 0;
};

static inline bool ends_with(const std::string& s, const char* suf) {
    size_t n = strlen(suf);
    return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

static inline void read_llmc_shard(const std::string& path, std::vector<uint32_t>* out) {
    std::vector<uint8_t> b = read_file_bytes(path);
    if (b.size() < 1024) die("%s: too short for an llm.c shard header (1024 bytes), %zu bytes", path.c_str(), b.size());
    int32_t h[256];
    memcpy(h, b.data(), sizeof(h));
    if (h[0] != 20240520) die("%s: bad magic %d, expected 20240520 (is this an llm.c token shard?)", path.c_str(), h[0]);
    if (h[1] != 1 && h[1] != 2) die("%s: unsupported version %d (1 = uint16 tokens, 2 = uint32)", path.c_str(), h[1]);
    if (h[2] < 0) die("%s: negative token count %d", path.c_str(), h[2]);
    const size_t es = h[1] == 1 ? 2 : 4, n = (size_t)h[2];
    if (b.size() != 1024 + n * es)
        die("%s: header says %zu tokens (%zu bytes) but the file holds %zu bytes of tokens (truncated?)",
            path.c_str(), n, n * es, b.size() - 1024);
    size_t base = out->size();
    out->resize(base + n);
    for (size_t i = 0; i < n; i++) {
        if (es == 2) { uint16_t t; memcpy(&t, &b[1024 + 2 * i], 2); (*out)[base + i] = t; }
        else { uint32_t t; memcpy(&t, &b[1024 + 4 * i], 4); (*out)[base + i] = t; }
    }
}

// Opens `path`: a .txt file as bytes (optionally only the byte range [frac0, frac1) of it,
// used to split one text into train and validation), or a glob of llm.c shards.
static inline void loader_open(DataLoader* dl, const std::string& path, int T, double frac0 = 0.0, double frac1 = 1.0) {
    dl->T = T;
    dl->tokens.clear();
    if (ends_with(path, ".txt")) {
        std::vector<uint8_t> b = read_file_bytes(path);
        size_t lo = (size_t)(frac0 * b.size()), hi = (size_t)(frac1 * b.size());
        dl->tokens.assign(b.begin() + lo, b.begin() + hi);
        dl->desc = path + " (bytes " + std::to_string(lo) + ".." + std::to_string(hi) + ")";
    } else {
        glob_t g;
        int rc = glob(path.c_str(), 0, nullptr, &g);
        if (rc != 0 || g.gl_pathc == 0) {
            if (rc == 0) globfree(&g);
            die("data '%s': no file matches (expected a .txt file or llm.c .bin shards; see -i)", path.c_str());
        }
        std::vector<std::string> files(g.gl_pathv, g.gl_pathv + g.gl_pathc);
        globfree(&g);
        std::sort(files.begin(), files.end());
        for (const std::string& f : files) read_llmc_shard(f, &dl->tokens);
        dl->desc = path + " (" + std::to_string(files.size()) + " shard" + (files.size() > 1 ? "s" : "") + ")";
    }
    if (dl->tokens.size() < (size_t)T + 1)
        die("data '%s': %zu tokens, fewer than one sequence of %d + 1", path.c_str(), dl->tokens.size(), T);
    dl->num_samples = (dl->tokens.size() - 1) / T;
    dl->max_token = *std::max_element(dl->tokens.begin(), dl->tokens.end());
}

// Fills inputs[B*T] and targets[B*T] with samples first, first+1, ... (wrapping around the
// data, one epoch after another).
static inline void loader_batch(const DataLoader* dl, uint64_t first, int B, int32_t* inputs, int32_t* targets) {
    const int T = dl->T;
    for (int b = 0; b < B; b++) {
        const uint32_t* s = dl->tokens.data() + ((first + b) % dl->num_samples) * T;
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = (int32_t)s[t];
            targets[b * T + t] = (int32_t)s[t + 1];
        }
    }
}
