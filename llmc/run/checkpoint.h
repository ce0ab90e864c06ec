// llmc/run/checkpoint.h: training checkpoints, one directory per step.
//   <out>/ckpt_00000100/model.safetensors   fp32 weights by parameter-table name (full tensors,
//                                            independent of the parallel layout), config in metadata
//   <out>/ckpt_00000100/optim.safetensors   AdamW moments "m.<name>", "v.<name>"; with fp8 delayed scaling
//                                            (train_gpt.cu --fp8 delayed) also "fp8.x" and "fp8.dy" (Fp8State)
//   <out>/ckpt_00000100/state.json          step, data position, sampling RNG, config (and "fp8": history, pos)
//   <out>/ckpt_00000100/DONE                 written last: FNV-1a hashes of the three files
// Crash safety (a kill -9, a full disk, a power cut at any moment leaves the newest complete
// checkpoint loadable): a checkpoint is written as <out>/.tmp_ckpt_00000100, each file synced to
// disk, DONE written and synced last, then the directory renamed to its final name (atomic) and
// <out> synced. A directory is deleted (an old one beyond --keep-last, or one being replaced) by
// removing its DONE first. --resume auto takes only ckpt_* directories whose DONE parses and whose
// three files are present; leftover .tmp_* directories of an interrupted write are never taken
// and are removed by the next write. Loading verifies the hashes.
#pragma once
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>
#include "llmc/model_config.h"
#include "llmc/run/json.h"
#include "llmc/param_table.h"
#include "llmc/run/safetensors.h"

namespace fs = std::filesystem;

struct TrainState {
    int step = 0;                 // optimizer steps completed
    uint64_t train_sample = 0;    // next training sample index (data-loader position)
    uint64_t rng = 0;             // sampling RNG state
    // the numerics guard (llmc/run/guard.h)
    int skipped = 0;              // updates skipped so far (AdamW's step count is step - skipped)
    int skips_in_a_row = 0;       // of which at the end, in a row
    std::vector<double> loss_window;  // the last accepted losses (the spike guard's window)
};

// fp8 delayed scaling's state (train_gpt.cu --fp8 delayed, docs/fp8.md): the values of llmc/fp8.cuh's Fp8Meta of the
// layers' GEMM inputs (x, E4M3) and output gradients (dy, E5M2), each [3 + history, 4 L] row-major (rows: scale,
// scale_inv, amax, then the amax history; column 4 l + k: layer l's QKV, attention-out, fc1, fc2), and the history row
// the next update writes. Whole-model columns, so any layout resumes it. history 0: none (the CPU trainer, bf16 runs).
struct Fp8State {
    int history = 0, pos = 0;
    std::vector<float> x, dy;
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

static const char* const kCkptFiles[3] = {"model.safetensors", "optim.safetensors", "state.json"};

// Parses a DONE marker: a JSON object with a hash string for each of kCkptFiles. Returns an error
// message, empty on success (then hashes[i] is kCkptFiles[i]'s hash).
static inline std::string ckpt_parse_done(const char* text, size_t len, std::string hashes[3]) {
    Json j;
    std::string err;
    if (!json_parse(text, len, &j, &err)) return "not valid JSON: " + err;
    if (j.kind != Json::OBJ) return "not a JSON object";
    for (int i = 0; i < 3; i++) {
        const Json* h = j.get(kCkptFiles[i]);
        if (!h || h->kind != Json::STR) return std::string("no hash for ") + kCkptFiles[i];
        hashes[i] = h->str;
    }
    return "";
}

// Parses state.json into *s: step an integer in [0, 2^31), train_sample one in [0, 2^53], rng a decimal
// uint64 string, and a config present. Returns an error message, empty on success.
static inline std::string ckpt_parse_state(const char* text, size_t len, TrainState* s) {
    Json st;
    std::string err;
    if (!json_parse(text, len, &st, &err)) return "not valid JSON (" + err + ")";
    if (st.kind != Json::OBJ) return "not a JSON object";
    const Json* step = st.get("step");
    const Json* ts = st.get("train_sample");
    const Json* rng = st.get("rng");
    const Json* cfg = st.get("config");
    if (!step || !ts || !rng || !cfg || rng->kind != Json::STR) return "missing fields";
    if (step->kind != Json::NUM || !(step->num >= 0 && step->num < 2147483648.0) || step->num != (double)(int)step->num)
        return "step is not an integer in [0, 2^31)";
    if (ts->kind != Json::NUM || !(ts->num >= 0 && ts->num <= 9007199254740992.0) || ts->num != (double)(uint64_t)ts->num)
        return "train_sample is not an integer in [0, 2^53]";
    const std::string& r = rng->str;
    char* q = nullptr;
    errno = 0;
    const unsigned long long rv = strtoull(r.c_str(), &q, 10);
    if (r.empty() || r.size() > 20 || r.find_first_not_of("0123456789") != std::string::npos || errno != 0 || q != r.c_str() + r.size())
        return "rng is not a decimal uint64";
    // the guard's fields (absent in checkpoints written before it: nothing skipped, an empty window)
    const Json* sk = st.get("skipped");
    const Json* row = st.get("skips_in_a_row");
    const Json* win = st.get("loss_window");
    auto count_ok = [&](const Json* j) { return !j || (j->kind == Json::NUM && j->num >= 0 && j->num <= step->num && j->num == (double)(int)j->num); };
    if (!count_ok(sk) || !count_ok(row)) return "skipped / skips_in_a_row are not integers in [0, step]";
    if (win && win->kind != Json::ARR) return "loss_window is not an array";
    s->loss_window.clear();
    if (win)
        for (const Json& x : win->arr) {
            if (x.kind != Json::NUM || !std::isfinite(x.num)) return "loss_window holds a value that is not a finite number";
            s->loss_window.push_back(x.num);
        }
    s->step = (int)step->num;
    s->train_sample = (uint64_t)ts->num;
    s->rng = rv;
    s->skipped = sk ? (int)sk->num : 0;
    s->skips_in_a_row = row ? (int)row->num : 0;
    return "";
}

static inline void write_text(const std::string& path, const std::string& text) {
    FILE* f = fopen_check(path.c_str(), "wb");
    fwrite_check(text.data(), 1, text.size(), f, path_label(path).c_str());
    fclose_check(f, path_label(path).c_str());
}

// Whether dir/DONE is a JSON object with a hash for each of the three files, and those files are
// regular files (the hashes themselves are verified by checkpoint_load). Never dies.
static inline bool ckpt_complete(const std::string& dir) {
    std::error_code ec;
    const fs::path done = fs::path(dir) / "DONE";
    if (!fs::is_regular_file(done, ec)) return false;
    const uintmax_t n = fs::file_size(done, ec);
    if (ec || n == 0 || n > 4096) return false;
    std::string text((size_t)n, '\0');
    FILE* f = fopen(done.c_str(), "rb");
    if (!f) return false;
    const bool read_all = fread(&text[0], 1, text.size(), f) == text.size();
    fclose(f);
    std::string hashes[3];
    if (!read_all || !ckpt_parse_done(text.data(), text.size(), hashes).empty()) return false;
    for (const char* name : kCkptFiles)
        if (!fs::is_regular_file(fs::path(dir) / name, ec)) return false;
    return true;
}

// Complete checkpoint directories in out_dir, oldest first.
static inline std::vector<std::string> ckpt_list(const std::string& out_dir) {
    std::vector<std::string> v;
    std::error_code ec;
    if (!fs::is_directory(out_dir, ec)) return v;
    for (const auto& e : fs::directory_iterator(out_dir, ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind("ckpt_", 0) == 0 && ckpt_complete(e.path().string())) v.push_back(e.path().string());
    }
    std::sort(v.begin(), v.end());
    return v;
}

// Deletes a checkpoint directory so that no crash midway leaves it looking complete: DONE first.
static inline void ckpt_remove(const std::string& dir) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) return;
    fs::remove(fs::path(dir) / "DONE", ec);
    if (ec) die("cannot remove %s: %s", path_label(dir + "/DONE").c_str(), ec.message().c_str());
    fsync_path(dir);
    fs::remove_all(dir, ec);
    if (ec) die("cannot remove checkpoint %s: %s", path_label(dir).c_str(), ec.message().c_str());
}

static inline void checkpoint_save(const std::string& out_dir, const ModelConfig& c, const ParamTable& t,
                                   const float* params, const float* m, const float* v, const TrainState& s,
                                   int keep_last, const Fp8State* fp8 = nullptr) {
    const std::string final_dir = out_dir + "/" + ckpt_dir_name(s.step);
    const std::string tmp = out_dir + "/.tmp_" + ckpt_dir_name(s.step);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out_dir, ec))  // leftovers of interrupted writes
        if (e.path().filename().string().rfind(".tmp_ckpt_", 0) == 0) fs::remove_all(e.path(), ec);
    fs::create_directories(tmp, ec);
    if (ec) die("cannot create checkpoint directory %s: %s", path_label(tmp).c_str(), ec.message().c_str());

    StWriter wm, wo;
    wm.metadata["config"] = config_to_json(c);
    for (const ParamSpec& p : t.specs) {
        // live rows only: vocabulary padding depends on the TP degree, the checkpoint must not
        st_add(&wm, p.name, "F32", {p.live_rows, p.cols}, params + p.offset);
        st_add(&wo, "m." + p.name, "F32", {p.live_rows, p.cols}, m + p.offset);
        st_add(&wo, "v." + p.name, "F32", {p.live_rows, p.cols}, v + p.offset);
    }
    const bool with_fp8 = fp8 && fp8->history > 0;
    if (with_fp8) {
        const int64_t rows = 3 + (int64_t)fp8->history, cols = 4 * (int64_t)c.n_layer;
        if ((int64_t)fp8->x.size() != rows * cols || (int64_t)fp8->dy.size() != rows * cols)
            die("checkpoint_save: fp8 state of %zu and %zu values, expected [%lld, %lld]", fp8->x.size(), fp8->dy.size(),
                (long long)rows, (long long)cols);
        st_add(&wo, "fp8.x", "F32", {rows, cols}, fp8->x.data());
        st_add(&wo, "fp8.dy", "F32", {rows, cols}, fp8->dy.data());
    }
    st_write(&wm, tmp + "/model.safetensors");
    st_write(&wo, tmp + "/optim.safetensors");
    std::string window;
    for (double x : s.loss_window) {
        char b[32];
        snprintf(b, sizeof(b), "%.17g", x);  // exact: a resumed run's window is this one's
        window += (window.empty() ? "" : ",") + std::string(b);
    }
    std::string state = "{\"step\":" + std::to_string(s.step) + ",\"train_sample\":" + std::to_string(s.train_sample) +
                        ",\"rng\":\"" + std::to_string(s.rng) + "\",\"skipped\":" + std::to_string(s.skipped) +
                        ",\"skips_in_a_row\":" + std::to_string(s.skips_in_a_row) + ",\"loss_window\":[" + window + "]" +
                        (with_fp8 ? ",\"fp8\":{\"history\":" + std::to_string(fp8->history) + ",\"pos\":" +
                                        std::to_string(fp8->pos) + "}" : std::string()) +
                        ",\"config\":" + config_to_json(c) + "}\n";
    write_text(tmp + "/state.json", state);
    std::string done = "{";
    for (int i = 0; i < 3; i++) {
        const std::string path = tmp + "/" + kCkptFiles[i];
        fsync_path(path);
        done += std::string(i ? "," : "") + "\"" + kCkptFiles[i] + "\":\"" + std::to_string(fnv1a(read_file_bytes(path))) + "\"";
    }
    write_text(tmp + "/DONE", done + "}\n");
    fsync_path(tmp + "/DONE");
    fsync_path(tmp);

    ckpt_remove(final_dir);
    fs::rename(tmp, final_dir, ec);
    if (ec) die("cannot rename checkpoint %s to '%s': %s", path_label(tmp).c_str(), final_dir.c_str(), ec.message().c_str());
    fsync_path(out_dir);
    std::vector<std::string> all = ckpt_list(out_dir);
    for (size_t i = 0; i + (size_t)keep_last < all.size(); i++) ckpt_remove(all[i]);
}

// Dies unless `resume` (--resume's value) is a checkpoint directory with its DONE marker.
static inline void checkpoint_check_dir(const std::string& resume) {
    struct stat st;
    if (stat(resume.c_str(), &st) != 0) {
        if (lstat(resume.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
            die("--resume '%s': does not exist (dangling symbolic link)", resume.c_str());
        die("--resume '%s': no such checkpoint directory: %s", resume.c_str(), strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) die("--resume '%s': is %s; a checkpoint directory was expected", resume.c_str(), file_kind(st.st_mode));
    if (!file_exists(resume + "/DONE"))
        die("--resume '%s': checkpoint is incomplete (no DONE marker; it was interrupted while being written). "
            "Use an earlier checkpoint or --resume auto.", resume.c_str());
}

// Finds the checkpoint to resume: "auto" means the newest complete one in out_dir (none: returns
// ""), anything else is a checkpoint directory that must be complete.
static inline std::string checkpoint_resolve(const std::string& resume, const std::string& out_dir) {
    if (!out_dir.empty()) check_output_dir(out_dir, "-o");
    if (resume.empty()) return "";
    if (resume == "auto") {
        std::vector<std::string> all = ckpt_list(out_dir);
        return all.empty() ? "" : all.back();
    }
    checkpoint_check_dir(resume);
    return resume;
}

// fp8: where the fp8 delayed-scaling state goes (left empty when the checkpoint has none); null: not read.
static inline void checkpoint_load(const std::string& dir, const ModelConfig& c, const ParamTable& t, float* params,
                                   float* m, float* v, TrainState* s, Fp8State* fp8 = nullptr) {
    // verify the hashes written in DONE
    std::vector<uint8_t> db = read_file_bytes(dir + "/DONE");
    std::string hashes[3];
    std::string err = ckpt_parse_done((const char*)db.data(), db.size(), hashes);
    if (!err.empty()) die("%s: corrupt checkpoint marker (%s)", path_label(dir + "/DONE").c_str(), err.c_str());
    for (int i = 0; i < 3; i++) {
        const char* f = kCkptFiles[i];
        std::string path = dir + "/" + f;
        if (!file_exists(path)) die("checkpoint %s: missing file %s", path_label(dir).c_str(), f);
        if (std::to_string(fnv1a(read_file_bytes(path))) != hashes[i])
            die("checkpoint %s: %s is corrupt (its hash differs from the one recorded in DONE)", path_label(dir).c_str(), f);
    }
    std::vector<uint8_t> sb = read_file_bytes(dir + "/state.json");
    err = ckpt_parse_state((const char*)sb.data(), sb.size(), s);
    if (!err.empty()) die("%s: %s", path_label(dir + "/state.json").c_str(), err.c_str());

    SafeTensors sm, so;
    st_open(&sm, dir + "/model.safetensors");
    st_open(&so, dir + "/optim.safetensors");
    auto it = sm.metadata.find("config");
    if (it == sm.metadata.end()) die("%s: no config in metadata", path_label(dir + "/model.safetensors").c_str());
    ModelConfig fc = config_from_json(it->second, path_label(dir + "/model.safetensors").c_str());
    fc.padded_vocab = c.padded_vocab;
    if (config_to_json(fc) != config_to_json(c))
        die("checkpoint %s was written for a different model:\n  checkpoint: %s\n  this run:   %s", path_label(dir).c_str(),
            config_to_json(fc).c_str(), config_to_json(c).c_str());
    for (const ParamSpec& p : t.specs) {
        const int64_t live = p.live_rows * p.cols;
        float* dst[3] = {params + p.offset, m + p.offset, v + p.offset};
        st_read_f32(&sm, st_require(&sm, p.name, live), dst[0]);
        st_read_f32(&so, st_require(&so, "m." + p.name, live), dst[1]);
        st_read_f32(&so, st_require(&so, "v." + p.name, live), dst[2]);
        for (float* d : dst) std::fill(d + live, d + p.numel(), 0.0f);
    }
    if (!fp8) return;
    *fp8 = Fp8State();
    Json st;
    json_parse((const char*)sb.data(), sb.size(), &st, &err);  // parsed above already
    const Json* f = st.get("fp8");
    if (!f) return;
    const Json* h = f->kind == Json::OBJ ? f->get("history") : nullptr;
    const Json* pos = f->kind == Json::OBJ ? f->get("pos") : nullptr;
    if (!h || !pos || h->kind != Json::NUM || pos->kind != Json::NUM || !(h->num >= 1 && h->num <= 65536) ||
        h->num != (double)(int)h->num || !(pos->num >= 0 && pos->num < h->num) || pos->num != (double)(int)pos->num)
        die("%s: fp8 is not {\"history\": an integer in [1, 65536], \"pos\": an integer below it}", path_label(dir + "/state.json").c_str());
    fp8->history = (int)h->num;
    fp8->pos = (int)pos->num;
    const int64_t count = (3 + (int64_t)fp8->history) * 4 * c.n_layer;
    fp8->x.resize(count);
    fp8->dy.resize(count);
    st_read_f32(&so, st_require(&so, "fp8.x", count), fp8->x.data());
    st_read_f32(&so, st_require(&so, "fp8.dy", count), fp8->dy.data());
    const int64_t n = 4 * c.n_layer;  // scales and their inverses positive and finite; amaxes not negative, not NaN
    for (const std::vector<float>* a : {&fp8->x, &fp8->dy})
        for (int64_t e = 0; e < count; e++)
            if (e < 2 * n ? !((*a)[e] > 0 && std::isfinite((*a)[e])) : !((*a)[e] >= 0))
                die("%s: fp8 state value %g at [%lld, %lld] is not a valid %s", path_label(dir + "/optim.safetensors").c_str(), (*a)[e],
                    (long long)(e / n), (long long)(e % n), e < 2 * n ? "scale (finite, > 0)" : "amax (>= 0)");
}
