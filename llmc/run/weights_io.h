// llmc/run/weights_io.h: move weights between the flat parameter buffer and safetensors files
// with Hugging Face names (GPT2LMHeadModel, LlamaForCausalLM, Baichuan's, Qwen-1's QWenLMHeadModel), driven by
// the parameter table: fused QKV and gate/up split into their HF pieces, GPT-2 Conv1D weights transposed,
// vocabulary padding rows dropped on export and zeroed on import. The model config travels
// in the metadata under "config". Both directions move one table tensor at a time (hf_export_stream,
// hf_read_tensor), so a rank holds the tensor it works on, not the model.
#pragma once
#include <functional>
#include <string>
#include <vector>
#include "llmc/init.h"
#include "llmc/model_config.h"
#include "llmc/param_table.h"
#include "llmc/run/safetensors.h"

// Copies rows [row0, row0+rows) of a [*, cols] tensor to a dense block, transposed if asked.
static inline void hf_pack(const float* src, int64_t row0, int64_t rows, int64_t cols, bool transpose, float* dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = src[(row0 + r) * cols + c];
            if (transpose) dst[c * rows + r] = v;
            else dst[r * cols + c] = v;
        }
}

static inline void hf_unpack(const float* src, int64_t row0, int64_t rows, int64_t cols, bool transpose, float* dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[(row0 + r) * cols + c] = transpose ? src[c * rows + r] : src[r * cols + c];
}

static inline std::vector<int64_t> hf_shape(const ParamSpec& s, const HfPiece& p) {
    if (s.cols == 1) return {p.rows};
    if (p.transpose) return {s.cols, p.rows};
    return {p.rows, s.cols};
}

// Writes the model as a Hugging Face safetensors file one table tensor at a time: fill(k, dst) puts whole tensor k
// [numel] into dst, in table order; host memory is one tensor and its pieces, not the model.
static inline void hf_export_stream(const std::string& path, const ModelConfig& c, const ParamTable& t,
                                    const std::function<void(size_t k, float* dst)>& fill) {
    StWriter w;  // the header: every piece's name and shape (no data yet)
    w.metadata["config"] = config_to_json(c);
    w.metadata["format"] = "pt";
    for (const ParamSpec& s : t.specs)
        for (const HfPiece& p : s.hf) st_add(&w, p.name, "F32", hf_shape(s, p), nullptr);
    FILE* f = st_write_header(&w, path);
    std::vector<float> whole, piece;
    for (size_t k = 0; k < t.specs.size(); k++) {
        const ParamSpec& s = t.specs[k];
        whole.assign(s.numel(), 0.0f);
        fill(k, whole.data());
        for (const HfPiece& p : s.hf) {
            piece.resize((size_t)(p.rows * s.cols));
            hf_pack(whole.data(), p.row0, p.rows, s.cols, p.transpose, piece.data());
            if (!piece.empty()) fwrite_check(piece.data(), 4, piece.size(), f, path_label(path).c_str());
        }
    }
    fclose_check(f, path_label(path).c_str());
}

static inline void hf_export(const std::string& path, const ModelConfig& c, const ParamTable& t, const float* params) {
    hf_export_stream(path, c, t, [&](size_t k, float* dst) {
        std::copy(params + t.specs[k].offset, params + t.specs[k].offset + t.specs[k].numel(), dst);
    });
}

// Reads table tensor s from an open safetensors file (names with `prefix`) into dst [numel]; padding rows zero. A
// missing or mis-shaped tensor stops with the file and name.
static inline void hf_read_tensor(const SafeTensors* st, const ParamSpec& s, const std::string& prefix, float* dst) {
    std::vector<float> buf;
    std::fill(dst, dst + s.numel(), 0.0f);
    for (const HfPiece& p : s.hf) {
        const StTensor* x = st_require(st, prefix + p.name, p.rows * s.cols);
        std::vector<int64_t> want = hf_shape(s, p);
        if (x->shape != want)
            die("%s: tensor '%s' has shape [%s], expected [%lld%s%lld]", path_label(st->path).c_str(), x->name.c_str(),
                [&] { std::string r; for (size_t i = 0; i < x->shape.size(); i++) r += (i ? "," : "") + std::to_string(x->shape[i]); return r; }().c_str(),
                (long long)want[0], want.size() > 1 ? "," : "", want.size() > 1 ? (long long)want[1] : 0LL);
        buf.resize((size_t)x->numel());
        st_read_f32(st, x, buf.data());
        hf_unpack(buf.data(), p.row0, p.rows, s.cols, p.transpose, dst);
    }
}

// Reads every tensor of the table (hf_read_tensor) into params [t.total].
static inline void hf_read_tensors(const SafeTensors* st, const ParamTable& t, const std::string& prefix, float* params) {
    for (const ParamSpec& s : t.specs) hf_read_tensor(st, s, prefix, params + s.offset);
}

// Opens a Hugging Face file of weights for model c (hf_read_tensor reads them). If the file carries a config, it must
// describe the same model.
static inline void hf_open(SafeTensors* st, const std::string& path, const ModelConfig& c) {
    st_open(st, path);
    auto it = st->metadata.find("config");
    if (it != st->metadata.end()) {
        ModelConfig fc = config_from_json(it->second, path_label(path).c_str());
        fc.name = c.name;
        fc.padded_vocab = c.padded_vocab;
        if (config_to_json(fc) != config_to_json(c))
            die("%s: the file's model config differs from the requested one (%s):\n  file: %s\n  run:  %s",
                path_label(path).c_str(), config_difference(fc, c, "in the file", "in this run").c_str(),
                config_to_json(fc).c_str(), config_to_json(c).c_str());
    }
}

// Imports weights for model c into params [t.total].
static inline void hf_import(const std::string& path, const ModelConfig& c, const ParamTable& t, float* params) {
    SafeTensors st;
    hf_open(&st, path, c);
    hf_read_tensors(&st, t, "", params);
    st_close(&st);
}

// --export-init: the initial weights (the seeded init of llmc/init.h, or --init-from's file when init_from is given)
// as a Hugging Face file, one tensor at a time; prints the init's time and what it wrote.
static inline void hf_export_init(const std::string& path, const ModelConfig& c, const ParamTable& t, uint64_t seed,
                                  const std::string& init_from) {
    SafeTensors hf;
    if (!init_from.empty()) hf_open(&hf, init_from, c);
    double init_s = 0;
    hf_export_stream(path, c, t, [&](size_t k, float* dst) {
        const auto t0 = std::chrono::steady_clock::now();
        if (init_from.empty()) param_init_tensor(c, t, k, dst, seed);
        else hf_read_tensor(&hf, t.specs[k], "", dst);
        init_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    st_close(&hf);
    if (init_from.empty()) print_init_time((int64_t)t.total, init_s);
    printf("wrote initial weights of %s (%lld params) to %s\n", c.name.c_str(), (long long)param_count(t), path.c_str());
}
