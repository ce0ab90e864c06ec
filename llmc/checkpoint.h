// llmc/checkpoint.h: training checkpoints, one directory per step.
//   <out>/ckpt_00000100/model.safetensors   fp32 weights by parameter-table name (full tensors,
//                                            independent of the parallel layout), config in metadata
//   <out>/ckpt_00000100/optim.safetensors   AdamW moments "m.<name>", "v.<name>"
//   <out>/ckpt_00000100/state.json          step, data position, sampling RNG, config
//   <out>/ckpt_00000100/DONE                 written last: FNV-1a hashes of the three files
// A checkpoint is first written as <out>/.tmp_ckpt_00000100 and renamed when complete, so a
// crash never leaves a directory that looks finished. Loading verifies the hashes.
#pragma once
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>
#include "llmc/config.h"
#include "llmc/json.h"
#include "llmc/params.h"
#include "llmc/safetensors.h"

namespace fs = std::filesystem;

struct TrainState {
    int step = 0;                 // optimizer steps completed
    uint64_t train_sample = 0;    // next training sample index (data-loader position)
    uint64_t rng = 0;             // sampling RNG state
};

static inline uint64_t fnv1a(const std::vector<uint8_t>& b) {
    uint64_t h = 1469598103934665603ull;
    for (uint8_t x : b) { h ^= x; h *= 1099511628211ull; }
    return h;
}

static inline std::string ckpt_dir_name(int step) {
    char b[32];
    snprintf(b, sizeof(b), "ckpt_%08d", step);
    return b;
}

static inline void write_text(const std::string& path, const std::string& text) {
    FILE* f = fopen_check(path.c_str(), "wb");
    fwrite_check(text.data(), 1, text.size(), f, path.c_str());
    fclose_check(f, path.c_str());
}

// Complete checkpoint directories in out_dir, oldest first.
static inline std::vector<std::string> ckpt_list(const std::string& out_dir) {
    std::vector<std::string> v;
    std::error_code ec;
    if (!fs::is_directory(out_dir, ec)) return v;
    for (const auto& e : fs::directory_iterator(out_dir, ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind("ckpt_", 0) == 0 && fs::exists(e.path() / "DONE")) v.push_back(e.path().string());
    }
    std::sort(v.begin(), v.end());
    return v;
}

static inline void checkpoint_save(const std::string& out_dir, const ModelConfig& c, const ParamTable& t,
                                   const float* params, const float* m, const float* v, const TrainState& s,
                                   int keep_last) {
    const std::string final_dir = out_dir + "/" + ckpt_dir_name(s.step);
    const std::string tmp = out_dir + "/.tmp_" + ckpt_dir_name(s.step);
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) die("cannot create checkpoint directory '%s': %s", tmp.c_str(), ec.message().c_str());

    StWriter wm, wo;
    wm.metadata["config"] = config_to_json(c);
    for (const ParamSpec& p : t.specs) {
        // live rows only: vocabulary padding depends on the TP degree, the checkpoint must not
        st_add(&wm, p.name, "F32", {p.live_rows, p.cols}, params + p.offset);
        st_add(&wo, "m." + p.name, "F32", {p.live_rows, p.cols}, m + p.offset);
        st_add(&wo, "v." + p.name, "F32", {p.live_rows, p.cols}, v + p.offset);
    }
    st_write(&wm, tmp + "/model.safetensors");
    st_write(&wo, tmp + "/optim.safetensors");
    std::string state = "{\"step\":" + std::to_string(s.step) + ",\"train_sample\":" + std::to_string(s.train_sample) +
                        ",\"rng\":\"" + std::to_string(s.rng) + "\",\"config\":" + config_to_json(c) + "}\n";
    write_text(tmp + "/state.json", state);
    std::string done = "{";
    const char* files[3] = {"model.safetensors", "optim.safetensors", "state.json"};
    for (int i = 0; i < 3; i++)
        done += std::string(i ? "," : "") + "\"" + files[i] + "\":\"" + std::to_string(fnv1a(read_file_bytes(tmp + "/" + files[i]))) + "\"";
    write_text(tmp + "/DONE", done + "}\n");

    fs::remove_all(final_dir, ec);
    fs::rename(tmp, final_dir, ec);
    if (ec) die("cannot rename checkpoint '%s' to '%s': %s", tmp.c_str(), final_dir.c_str(), ec.message().c_str());
    std::vector<std::string> all = ckpt_list(out_dir);
    for (size_t i = 0; i + (size_t)keep_last < all.size(); i++) fs::remove_all(all[i], ec);
}

// Finds the checkpoint to resume: "auto" means the newest complete one in out_dir (none: returns
// ""), anything else is a checkpoint directory that must be complete.
static inline std::string checkpoint_resolve(const std::string& resume, const std::string& out_dir) {
    if (resume.empty()) return "";
    if (resume == "auto") {
        std::vector<std::string> all = ckpt_list(out_dir);
        return all.empty() ? "" : all.back();
    }
    if (!fs::is_directory(resume)) die("--resume %s: no such checkpoint directory", resume.c_str());
    if (!fs::exists(resume + "/DONE"))
        die("--resume %s: checkpoint is incomplete (no DONE marker; it was interrupted while being written). "
            "Use an earlier checkpoint or --resume auto.", resume.c_str());
    return resume;
}

static inline void checkpoint_load(const std::string& dir, const ModelConfig& c, const ParamTable& t, float* params,
                                   float* m, float* v, TrainState* s) {
    // verify the hashes written in DONE
    std::vector<uint8_t> db = read_file_bytes(dir + "/DONE");
    Json done;
    std::string err;
    if (!json_parse((const char*)db.data(), db.size(), &done, &err) || done.kind != Json::OBJ)
        die("%s/DONE: corrupt checkpoint marker (%s)", dir.c_str(), err.c_str());
    for (const char* f : {"model.safetensors", "optim.safetensors", "state.json"}) {
        const Json* h = done.get(f);
        if (!h || h->kind != Json::STR) die("%s/DONE: no hash for %s", dir.c_str(), f);
        std::string path = dir + "/" + f;
        if (!file_exists(path)) die("checkpoint %s: missing file %s", dir.c_str(), f);
        if (std::to_string(fnv1a(read_file_bytes(path))) != h->str)
            die("checkpoint %s: %s is corrupt (its hash differs from the one recorded in DONE)", dir.c_str(), f);
    }
    std::vector<uint8_t> sb = read_file_bytes(dir + "/state.json");
    Json st;
    if (!json_parse((const char*)sb.data(), sb.size(), &st, &err) || st.kind != Json::OBJ)
        die("%s/state.json: not valid JSON (%s)", dir.c_str(), err.c_str());
    const Json* step = st.get("step");
    const Json* ts = st.get("train_sample");
    const Json* rng = st.get("rng");
    const Json* cfg = st.get("config");
    if (!step || !ts || !rng || !cfg || rng->kind != Json::STR) die("%s/state.json: missing fields", dir.c_str());
    s->step = (int)step->num;
    s->train_sample = (uint64_t)ts->num;
    s->rng = strtoull(rng->str.c_str(), nullptr, 10);

    SafeTensors sm, so;
    st_open(&sm, dir + "/model.safetensors");
    st_open(&so, dir + "/optim.safetensors");
    auto it = sm.metadata.find("config");
    if (it == sm.metadata.end()) die("%s/model.safetensors: no config in metadata", dir.c_str());
    ModelConfig fc = config_from_json(it->second, (dir + "/model.safetensors").c_str());
    fc.padded_vocab = c.padded_vocab;
    if (config_to_json(fc) != config_to_json(c))
        die("checkpoint %s was written for a different model:\n  checkpoint: %s\n  this run:   %s", dir.c_str(),
            config_to_json(fc).c_str(), config_to_json(c).c_str());
    for (const ParamSpec& p : t.specs) {
        const int64_t live = p.live_rows * p.cols;
        float* dst[3] = {params + p.offset, m + p.offset, v + p.offset};
        st_read_f32(&sm, st_require(&sm, p.name, live), dst[0]);
        st_read_f32(&so, st_require(&so, "m." + p.name, live), dst[1]);
        st_read_f32(&so, st_require(&so, "v." + p.name, live), dst[2]);
        for (float* d : dst) std::fill(d + live, d + p.numel(), 0.0f);
    }
}
