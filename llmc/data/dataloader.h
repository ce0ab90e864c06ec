// llmc/data/dataloader.h: batches of (inputs, targets) from a token stream.
// Sources: a plain text file read as bytes (vocab 256, the zero-dependency default), or token
// files in the formats of llmc/data/datasets.h (llm.c shards, Megatron indexed data sets,
// PaddleNLP arrays).
//
// Sample i is the window of T+1 tokens starting at token i*T (consecutive windows overlap by
// one token); inputs are its first T tokens, targets its last T. Batches are a pure function
// of the first sample index, so the position in the data is just a counter (saved in
// checkpoints) and every parallel layout can compute which samples are its own.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>
#include "llmc/data/datasets.h"
#include "llmc/utils.h"

struct DataLoader {
    std::string desc;               // what was loaded, for the log
    std::vector<uint8_t> text;      // a .txt file's bytes (one token per byte), or empty
    TokenDataset ds;                // token files (llmc/data/datasets.h) when text is empty
    int T = 0;
    uint64_t num_samples = 0;
    uint32_t max_token = 0;
    std::vector<int32_t> window;    // [T+1] scratch
};

// Opens `path`: a .txt file as bytes (only the byte range [frac0, frac1) of it, used to split
// one text into train and validation), or token files in any format of llmc/data/datasets.h (llm.c
// shards, a Megatron .bin/.idx pair, PaddleNLP _ids.npy/_idx.npz), read in order.
static inline void loader_open(DataLoader* dl, const std::string& path, int T, double frac0 = 0.0, double frac1 = 1.0) {
    dl->T = T;
    dl->window.assign((size_t)T + 1, 0);
    if (ends_with(path, ".txt")) {
        std::vector<uint8_t> b = read_file_bytes(path);
        size_t lo = (size_t)(frac0 * b.size()), hi = (size_t)(frac1 * b.size());
        dl->text.assign(b.begin() + lo, b.begin() + hi);
        dl->desc = path + " (bytes " + std::to_string(lo) + ".." + std::to_string(hi) + ")";
        if (dl->text.size() < (size_t)T + 1)
            die("data %s: %zu bytes, fewer than one sequence of %d + 1", path_label(path).c_str(), dl->text.size(), T);
        dl->num_samples = (dl->text.size() - 1) / T;
        dl->max_token = *std::max_element(dl->text.begin(), dl->text.end());
    } else {
        dataset_open(&dl->ds, path.c_str(), T, 0, false);
        dl->num_samples = dataset_num_samples(&dl->ds);
        if (dl->num_samples == 0) die("data %s: fewer tokens than one sequence of %d + 1", path_label(path).c_str(), T);
        dl->max_token = dataset_max_token(&dl->ds);
        dl->desc = path + " (" + std::to_string(dl->num_samples) + " samples)";
    }
}

// loader_open's checks of `path` alone, nothing read (a .txt file: open_input's; token files: dataset_check's), with
// the same messages: for a data flag the run may not open (llmc/run/flags.h).
static inline void loader_check(const std::string& path) {
    struct stat st;
    if (ends_with(path, ".txt")) close(open_input(path, nullptr, true, &st));
    else dataset_check(path);
}

// Fills inputs[B*T] and targets[B*T] with samples first, first+1, ... (wrapping around the
// data, one epoch after another).
static inline void loader_batch(DataLoader* dl, uint64_t first, int B, int32_t* inputs, int32_t* targets) {
    const int T = dl->T;
    for (int b = 0; b < B; b++) {
        const uint64_t i = (first + b) % dl->num_samples;
        if (!dl->text.empty())
            for (int t = 0; t <= T; t++) dl->window[t] = dl->text[i * T + t];
        else
            dataset_sample(&dl->ds, (size_t)i, dl->window.data());
        std::copy(dl->window.begin(), dl->window.begin() + T, inputs + (size_t)b * T);
        std::copy(dl->window.begin() + 1, dl->window.end(), targets + (size_t)b * T);
    }
}

// Opens the training data and the validation data (none when val_path is empty, except that a
// .txt training file without one is split 90/10), and checks every token fits the vocabulary.
// Returns whether there is validation data.
static inline bool loader_open_train_val(DataLoader* train, DataLoader* val, const std::string& train_path,
                                         const std::string& val_path, int T, int vocab_size) {
    const bool split_text = val_path.empty() && ends_with(train_path, ".txt");
    loader_open(train, train_path, T, 0.0, split_text ? 0.9 : 1.0);
    if (split_text) loader_open(val, train_path, T, 0.9, 1.0);
    else if (!val_path.empty()) loader_open(val, val_path, T);
    const bool have_val = val->num_samples > 0;
    if ((int64_t)train->max_token >= vocab_size)
        die("data %s holds token %u but the model's vocabulary is %d (set --vocab or pick another preset)",
            path_label(train_path).c_str(), train->max_token, vocab_size);
    if (have_val && (int64_t)val->max_token >= vocab_size)
        die("data %s holds token %u but the model's vocabulary is %d (set --vocab or pick another preset)",
            path_label(split_text ? train_path : val_path).c_str(), val->max_token, vocab_size);
    return have_val;
}
