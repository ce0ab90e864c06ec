// llmc/run/weights_io.h: move weights between the flat parameter buffer and safetensors files
// with Hugging Face names (GPT2LMHeadModel or LlamaForCausalLM), driven by the parameter
// table: fused QKV and gate/up split into their HF pieces, GPT-2 Conv1D weights transposed,
// vocabulary padding rows dropped on export and zeroed on import. The model config travels
// in the metadata under "config".
#pragma once
#include <string>
#include <vector>
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

// Writes params[table.total] as a safetensors file. `prefix` is prepended to every name
// (the reference state uses it for gradients); extra metadata entries are added as given.
// `storage` keeps the packed copies alive until the write.
static inline void hf_add_tensors(StWriter* w, const ParamTable& t, const float* params, const std::string& prefix,
                                  std::vector<std::vector<float>>* storage) {
    for (const ParamSpec& s : t.specs)
        for (const HfPiece& p : s.hf) {
            storage->emplace_back((size_t)(p.rows * s.cols));
            hf_pack(params + s.offset, p.row0, p.rows, s.cols, p.transpose, storage->back().data());
            st_add(w, prefix + p.name, "F32", hf_shape(s, p), storage->back().data());
        }
}

static inline void hf_export(const std::string& path, const ModelConfig& c, const ParamTable& t, const float* params) {
    StWriter w;
    std::vector<std::vector<float>> storage;
    storage.reserve(t.specs.size() * 3);
    w.metadata["config"] = config_to_json(c);
    w.metadata["format"] = "pt";
    hf_add_tensors(&w, t, params, "", &storage);
    st_write(&w, path);
}

// Reads every tensor of the table from an open safetensors file (names with `prefix`).
// Padding rows are zeroed. Missing or mis-shaped tensors stop with the file and name.
static inline void hf_read_tensors(const SafeTensors* st, const ParamTable& t, const std::string& prefix, float* params) {
    std::vector<float> buf;
    for (const ParamSpec& s : t.specs) {
        std::fill(params + s.offset, params + s.offset + s.numel(), 0.0f);
        for (const HfPiece& p : s.hf) {
            const StTensor* x = st_require(st, prefix + p.name, p.rows * s.cols);
            std::vector<int64_t> want = hf_shape(s, p);
            if (x->shape != want)
                die("%s: tensor '%s' has shape [%s], expected [%lld%s%lld]", path_label(st->path).c_str(), x->name.c_str(),
                    [&] { std::string r; for (size_t i = 0; i < x->shape.size(); i++) r += (i ? "," : "") + std::to_string(x->shape[i]); return r; }().c_str(),
                    (long long)want[0], want.size() > 1 ? "," : "", want.size() > 1 ? (long long)want[1] : 0LL);
            buf.resize((size_t)x->numel());
            st_read_f32(st, x, buf.data());
            hf_unpack(buf.data(), p.row0, p.rows, s.cols, p.transpose, params + s.offset);
        }
    }
}

// Imports weights for model c. If the file carries a config, it must describe the same model.
static inline void hf_import(const std::string& path, const ModelConfig& c, const ParamTable& t, float* params) {
    SafeTensors st;
    st_open(&st, path);
    auto it = st.metadata.find("config");
    if (it != st.metadata.end()) {
        ModelConfig fc = config_from_json(it->second, path_label(path).c_str());
        fc.name = c.name;
        fc.padded_vocab = c.padded_vocab;
        if (config_to_json(fc) != config_to_json(c))
            die("%s: the file's model config differs from the requested one:\n  file: %s\n  run:  %s", path_label(path).c_str(),
                config_to_json(fc).c_str(), config_to_json(c).c_str());
    }
    hf_read_tensors(&st, t, "", params);
}
