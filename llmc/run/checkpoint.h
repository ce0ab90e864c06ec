// llmc/run/checkpoint.h: training checkpoints, one directory per step, written by every rank at once.
//   <out>/ckpt_00000100/shard_00003.bin    rank 3's share, raw fp32: the weights (p) and AdamW moments (m, v) it owns
//                                          (its stage's tensors, its tp slice, its ZeRO piece: llmc/run/assemble.h)
//   <out>/ckpt_00000100/shard_00003.json   what that file holds: pieces [kind, tensor, blocks, a, b, at] (elements
//                                          a..b of the tensor's slice, the slice being `blocks` of the whole tensor,
//                                          llmc/parallel/tp.h's TpBlock, stored at byte `at`), its size and a hash of
//                                          every 4 MiB chunk, computed while writing
//   <out>/ckpt_00000100/index.json         the step, the model config, the writer's layout, every tensor's full shape
//                                          by parameter-table name, the shard files
//   <out>/ckpt_00000100/state.json         step, data position, sampling RNG, config, the guard's state (and "fp8")
//   <out>/ckpt_00000100/DONE               written last: hashes of index.json, state.json and every shard_*.json
// The kinds: "p", "m", "v" for table tensors; "fp8" for delayed scaling's state (train_gpt.cu --fp8 delayed), tensors
// "fp8.x" and "fp8.dy" (Fp8State), in world rank 0's shard. A replicated tensor is written once: by tp rank 0, the
// tied embedding by the first stage (layout_owned_parts).
// Reading (CkptReader) reshards: a rank asks for the elements of its own slices and ZeRO pieces, of any layout,
// and gets them with pread from whichever shards hold them, every chunk read checked against its hash; no rank
// holds more than its own part and a chunk per shard file. Before anything is read, ckpt_open checks that every
// file named is there at its size, every shard is of the index's step, and the pieces of every tensor cover it
// exactly once: a damaged checkpoint stops the run with the file's name, never a partly loaded model.
// Crash safety (a kill -9, a full disk, a power cut at any moment leaves the newest complete checkpoint loadable):
// rank 0 makes <out>/.tmp_ckpt_00000100; every rank writes and syncs its two files there; then rank 0 writes
// index.json and state.json, DONE last, syncs, renames the directory to its final name (atomic) and syncs <out>. A
// directory is deleted (an old one beyond --keep-last, or one being replaced) by removing its DONE first.
// --resume auto takes only ckpt_* directories whose DONE parses and whose files are present; leftover .tmp_*
// directories of an interrupted write are never taken and are removed by the next write.
// Checkpoints of the earlier single-file form (model.safetensors, optim.safetensors: whole tensors by table name)
// are still read: CkptReader serves them the same way (each file's hash checked whole first).
#pragma once
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include "llmc/model_config.h"
#include "llmc/json.h"
#include "llmc/loss_scale.h"
#include "llmc/param_table.h"
#include "llmc/parallel/tp.h"
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
    LossScaleState loss_scale;    // the loss scale now (llmc/loss_scale.h); written with a dynamic scale only
};

// fp8 delayed scaling's state (train_gpt.cu --fp8 delayed, docs/fp8.md): the values of llmc/fp8.cuh's Fp8Meta of the
// layers' GEMM inputs (x, E4M3) and output gradients (dy, E5M2), each [3 + history, 4 L] row-major (rows: scale,
// scale_inv, amax, then the amax history; column 4 l + k: layer l's QKV, attention-out, fc1, fc2), and the history row
// the next update writes. Whole-model columns, so any layout resumes it. history 0: none (the CPU trainer, bf16 runs).
struct Fp8State {
    int history = 0, pos = 0;
    std::vector<float> x, dy;
};

// FNV-1a over 8-byte little-endian words (then the tail bytes one by one): every file and chunk of a checkpoint.
static inline uint64_t ckpt_hash(const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h ^= w;
        h *= 1099511628211ull;
    }
    for (; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
    return h;
}
// FNV-1a over bytes: the hashes in the DONE of a single-file checkpoint, of a whole file read in blocks.
static inline uint64_t fnv1a_file(const std::string& path) {
    struct stat sb;
    const int fd = open_input(path, nullptr, true, &sb);
    uint64_t h = 1469598103934665603ull;
    std::vector<uint8_t> b(1 << 22);
    for (;;) {
        const ssize_t r = read(fd, b.data(), b.size());
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("%s: read failed: %s", path_label(path).c_str(), strerror(errno));
        if (r == 0) break;
        for (ssize_t i = 0; i < r; i++) { h ^= b[i]; h *= 1099511628211ull; }
    }
    close(fd);
    return h;
}

static const uint64_t CKPT_CHUNK_BYTES = 4ull << 20;  // the unit of hashing and of reading

static inline std::string ckpt_dir_name(int step) {
    char b[32];
    snprintf(b, sizeof(b), "ckpt_%08d", step);
    return b;
}
static inline std::string ckpt_shard_name(int rank) {
    char b[32];
    snprintf(b, sizeof(b), "shard_%05d", rank);
    return b;
}
static inline std::string ckpt_tmp_dir(const std::string& out_dir, int step) { return out_dir + "/.tmp_" + ckpt_dir_name(step); }

// The files of a single-file checkpoint, which its DONE names.
static const char* const kCkptFiles[3] = {"model.safetensors", "optim.safetensors", "state.json"};

// Parses a DONE marker: a JSON object of file name -> hash string; either a sharded checkpoint's (index.json and
// state.json among them, every name a plain file name) or a single-file one's (kCkptFiles). Returns an error message,
// empty on success (then *files holds the names and hashes, in order).
static inline std::string ckpt_parse_done(const char* text, size_t len, std::vector<std::pair<std::string, std::string>>* files) {
    Json j;
    std::string err;
    if (!json_parse(text, len, &j, &err)) return "not valid JSON: " + err;
    if (j.kind != Json::OBJ) return "not a JSON object";
    files->clear();
    for (const auto& kv : j.obj) {
        if (kv.second.kind != Json::STR) return "the hash of " + kv.first + " is not a string";
        if (kv.first.empty() || kv.first.find('/') != std::string::npos || kv.first[0] == '.') return "'" + kv.first + "' is not a file name";
        files->push_back({kv.first, kv.second.str});
    }
    auto has = [&](const char* name) {
        for (const auto& f : *files)
            if (f.first == name) return true;
        return false;
    };
    if (has("index.json")) return has("state.json") ? "" : "no hash for state.json";
    for (const char* name : kCkptFiles)
        if (!has(name)) return std::string("no hash for ") + name;
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
    // the dynamic loss scale (absent: the run had none; llmc/loss_scale.h)
    s->loss_scale = LossScaleState();
    if (const Json* ls = st.get("loss_scale")) {
        const Json* sc = ls->kind == Json::OBJ ? ls->get("scale") : nullptr;
        const Json* cl = ls->kind == Json::OBJ ? ls->get("clean") : nullptr;
        const Json* hy = ls->kind == Json::OBJ ? ls->get("hysteresis") : nullptr;
        auto int_ok = [](const Json* j, double lo) { return j && j->kind == Json::NUM && j->num >= lo && j->num < 2147483648.0 && j->num == (double)(int)j->num; };
        if (!sc || sc->kind != Json::NUM || !(sc->num > 0) || !std::isfinite(sc->num) || !int_ok(cl, 0) || !int_ok(hy, -2147483647.0))
            return "loss_scale is not {\"scale\": a number above 0, \"clean\": an integer >= 0, \"hysteresis\": an integer}";
        s->loss_scale.dynamic = true;
        s->loss_scale.scale = sc->num;
        s->loss_scale.clean = (int)cl->num;
        s->loss_scale.hysteresis = (int)hy->num;
    }
    return "";
}

static inline void write_text(const std::string& path, const std::string& text) {
    FILE* f = fopen_check(path.c_str(), "wb");
    fwrite_check(text.data(), 1, text.size(), f, path_label(path).c_str());
    fclose_check(f, path_label(path).c_str());
}

// The hash (ckpt_hash) of a whole file.
static inline uint64_t ckpt_hash_file(const std::string& path) {
    const std::vector<uint8_t> b = read_file_bytes(path, nullptr, true);
    return ckpt_hash(b.data(), b.size());
}

// Whether dir/DONE parses (ckpt_parse_done) and every file it names is a regular file, with a shard's .bin beside
// its .json (the hashes and sizes are verified by ckpt_open). Never dies.
static inline bool ckpt_complete(const std::string& dir) {
    std::error_code ec;
    const fs::path done = fs::path(dir) / "DONE";
    if (!fs::is_regular_file(done, ec)) return false;
    const uintmax_t n = fs::file_size(done, ec);
    if (ec || n == 0 || n > (1u << 24)) return false;
    std::string text((size_t)n, '\0');
    FILE* f = fopen(done.c_str(), "rb");
    if (!f) return false;
    const bool read_all = fread(&text[0], 1, text.size(), f) == text.size();
    fclose(f);
    std::vector<std::pair<std::string, std::string>> files;
    if (!read_all || !ckpt_parse_done(text.data(), text.size(), &files).empty()) return false;
    for (const auto& file : files) {
        if (!fs::is_regular_file(fs::path(dir) / file.first, ec)) return false;
        if (file.first.rfind("shard_", 0) == 0 && ends_with(file.first, ".json") &&
            !fs::is_regular_file(fs::path(dir) / (file.first.substr(0, file.first.size() - 5) + ".bin"), ec))
            return false;
    }
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

// state.json's text.
static inline std::string ckpt_state_json(const ModelConfig& c, const TrainState& s, const Fp8State* fp8) {
    auto exact = [](double x) {  // a resumed run's window and scale are this one's
        char b[32];
        snprintf(b, sizeof(b), "%.17g", x);
        return std::string(b);
    };
    std::string window;
    for (double x : s.loss_window) window += (window.empty() ? "" : ",") + exact(x);
    const bool with_fp8 = fp8 && fp8->history > 0;
    return "{\"step\":" + std::to_string(s.step) + ",\"train_sample\":" + std::to_string(s.train_sample) +
           ",\"rng\":\"" + std::to_string(s.rng) + "\",\"skipped\":" + std::to_string(s.skipped) +
           ",\"skips_in_a_row\":" + std::to_string(s.skips_in_a_row) + ",\"loss_window\":[" + window + "]" +
           (s.loss_scale.dynamic ? ",\"loss_scale\":{\"scale\":" + exact(s.loss_scale.scale) + ",\"clean\":" +
                                        std::to_string(s.loss_scale.clean) + ",\"hysteresis\":" +
                                        std::to_string(s.loss_scale.hysteresis) + "}"
                                  : std::string()) +
           (with_fp8 ? ",\"fp8\":{\"history\":" + std::to_string(fp8->history) + ",\"pos\":" + std::to_string(fp8->pos) + "}"
                     : std::string()) +
           ",\"config\":" + config_to_json(c) + "}\n";
}

// ---------------------------------------------------------------------------------------------------------------
// Writing. Rank 0: ckpt_prepare; then every rank: ckpt_shard_open, ckpt_shard_put for each piece it owns,
// ckpt_shard_close; then (after a barrier) rank 0: ckpt_commit.

// Rank 0, before any rank writes: removes leftovers of interrupted writes and makes the step's temporary directory.
static inline void ckpt_prepare(const std::string& out_dir, int step) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out_dir, ec))
        if (e.path().filename().string().rfind(".tmp_ckpt_", 0) == 0) fs::remove_all(e.path(), ec);
    const std::string tmp = ckpt_tmp_dir(out_dir, step);
    fs::create_directories(tmp, ec);
    if (ec) die("cannot create checkpoint directory %s: %s", path_label(tmp).c_str(), ec.message().c_str());
}

struct CkptShardWriter {
    std::string dir, name;        // the temporary directory; "shard_00003"
    int step = 0;
    FILE* f = nullptr;
    std::vector<uint8_t> chunk;   // the chunk being filled
    uint64_t flushed = 0;         // bytes written before it
    std::vector<uint64_t> hashes; // of the chunks written
    std::string pieces;           // the index's entries, JSON
};

static inline void ckpt_shard_open(CkptShardWriter* w, const std::string& out_dir, int step, int rank) {
    *w = CkptShardWriter();
    w->dir = ckpt_tmp_dir(out_dir, step);
    w->name = ckpt_shard_name(rank);
    w->step = step;
    w->f = fopen_check((w->dir + "/" + w->name + ".bin").c_str(), "wb");
    w->chunk.reserve(CKPT_CHUNK_BYTES);
}

static inline void ckpt_flush_chunk(CkptShardWriter* w) {
    if (w->chunk.empty()) return;
    fwrite_check(w->chunk.data(), 1, w->chunk.size(), w->f, path_label(w->dir + "/" + w->name + ".bin").c_str());
    w->hashes.push_back(ckpt_hash(w->chunk.data(), w->chunk.size()));
    w->flushed += w->chunk.size();
    w->chunk.clear();
}

// Appends elements a..b of the `kind` ("p", "m", "v", "fp8") of tensor `name`'s slice `blocks` (in the slice's
// row-major order), data[b - a].
static inline void ckpt_shard_put(CkptShardWriter* w, const char* kind, const std::string& name, const std::vector<TpBlock>& blocks,
                                  int64_t a, int64_t b, const float* data) {
    if (b <= a) return;
    std::string bl;
    for (const TpBlock& k : blocks)
        bl += (bl.empty() ? "[" : ",[") + std::to_string(k.row0) + "," + std::to_string(k.rows) + "," + std::to_string(k.col0) +
              "," + std::to_string(k.cols) + "]";
    w->pieces += (w->pieces.empty() ? "\n  [" : ",\n  [") + json_escape(kind) + "," + json_escape(name) + ",[" + bl + "]," +
                 std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(w->flushed + w->chunk.size()) + "]";
    const uint8_t* src = (const uint8_t*)data;
    size_t n = (size_t)(b - a) * sizeof(float);
    while (n > 0) {
        const size_t take = std::min<size_t>(n, CKPT_CHUNK_BYTES - w->chunk.size());
        w->chunk.insert(w->chunk.end(), src, src + take);
        src += take;
        n -= take;
        if (w->chunk.size() == CKPT_CHUNK_BYTES) ckpt_flush_chunk(w);
    }
}

// Writes the last chunk, syncs the .bin, then writes and syncs its .json.
static inline void ckpt_shard_close(CkptShardWriter* w) {
    ckpt_flush_chunk(w);
    const std::string bin = w->dir + "/" + w->name + ".bin";
    fclose_check(w->f, path_label(bin).c_str());
    w->f = nullptr;
    fsync_path(bin);
    std::string hashes;
    for (uint64_t h : w->hashes) hashes += (hashes.empty() ? "\"" : ",\"") + std::to_string(h) + "\"";
    write_text(w->dir + "/" + w->name + ".json",
               "{\"step\":" + std::to_string(w->step) + ",\"file\":\"" + w->name + ".bin\",\"bytes\":" + std::to_string(w->flushed) +
                   ",\"chunk_bytes\":" + std::to_string(CKPT_CHUNK_BYTES) + ",\"chunk_hashes\":[" + hashes + "],\"pieces\":[" +
                   w->pieces + "]}\n");
    fsync_path(w->dir + "/" + w->name + ".json");
}

// The last act of a write: DONE (`done`, its text) into the step's temporary directory, synced, then the directory
// renamed to its final name (replacing one of the same step) and out_dir synced.
static inline void ckpt_seal(const std::string& out_dir, int step, const std::string& done) {
    const std::string final_dir = out_dir + "/" + ckpt_dir_name(step), tmp = ckpt_tmp_dir(out_dir, step);
    write_text(tmp + "/DONE", done);
    fsync_path(tmp + "/DONE");
    fsync_path(tmp);
    ckpt_remove(final_dir);
    std::error_code ec;
    fs::rename(tmp, final_dir, ec);
    if (ec) die("cannot rename checkpoint %s to '%s': %s", path_label(tmp).c_str(), final_dir.c_str(), ec.message().c_str());
    fsync_path(out_dir);
}

// Rank 0, after every rank's ckpt_shard_close: index.json, state.json, DONE, the rename; then old checkpoints beyond
// keep_last go. layout: the writer's layout as a JSON object (for the reader's messages; reading does not need it).
static inline void ckpt_commit(const std::string& out_dir, const ModelConfig& c, const ParamTable& full, const std::string& layout,
                               int world, const TrainState& s, int keep_last, const Fp8State* fp8 = nullptr) {
    const std::string tmp = ckpt_tmp_dir(out_dir, s.step);
    std::string tensors, shards;
    for (const ParamSpec& p : full.specs)
        tensors += (tensors.empty() ? "\n  " : ",\n  ") + json_escape(p.name) + ":[" + std::to_string(p.rows) + "," +
                   std::to_string(p.cols) + "," + std::to_string(p.live_rows) + "]";
    if (fp8 && fp8->history > 0) {
        const std::string shape = "[" + std::to_string(3 + fp8->history) + "," + std::to_string(4 * c.n_layer) + "," +
                                  std::to_string(3 + fp8->history) + "]";
        tensors += ",\n  \"fp8.x\":" + shape + ",\n  \"fp8.dy\":" + shape;
    }
    std::string done = "{";
    auto add_done = [&](const std::string& name) {
        const std::string path = tmp + "/" + name;
        if (!file_exists(path)) die("checkpoint %s: %s was not written (did its rank stop?)", path_label(tmp).c_str(), name.c_str());
        done += std::string(done.size() > 1 ? ",\n " : "") + "\"" + name + "\":\"" + std::to_string(ckpt_hash_file(path)) + "\"";
    };
    for (int r = 0; r < world; r++) shards += (r ? ",\"" : "\"") + ckpt_shard_name(r) + ".json\"";
    write_text(tmp + "/index.json", "{\"format\":\"llmc sharded checkpoint\",\"version\":1,\"step\":" + std::to_string(s.step) +
                                        ",\"config\":" + config_to_json(c) + ",\"layout\":" + layout +
                                        ",\"tensors\":{" + tensors + "},\n\"shards\":[" + shards + "]}\n");
    write_text(tmp + "/state.json", ckpt_state_json(c, s, fp8));
    fsync_path(tmp + "/index.json");
    fsync_path(tmp + "/state.json");
    add_done("index.json");
    add_done("state.json");
    for (int r = 0; r < world; r++) add_done(ckpt_shard_name(r) + ".json");
    ckpt_seal(out_dir, s.step, done + "}\n");
    std::vector<std::string> all = ckpt_list(out_dir);
    for (size_t i = 0; i + (size_t)keep_last < all.size(); i++) ckpt_remove(all[i]);
}

// ---------------------------------------------------------------------------------------------------------------
// Reading, at any layout: ckpt_open, then ckpt_read for each range a rank needs.

struct CkptReader {
    std::string dir;
    struct File {
        std::string name;
        int fd = -1;
        uint64_t bytes = 0;              // a shard's size
        bool single = false;             // a single-file checkpoint's file: no chunk hashes (it is hashed whole)
        uint64_t data_start = 0;         // where its data section starts
        std::vector<uint64_t> hashes;    // per chunk
        int64_t cached = -1;             // the chunk in buf
        std::vector<uint8_t> buf;
    };
    struct Piece { int file; int64_t a, b; uint64_t at; };
    struct Slice {                       // one writer's slice of a tensor and the pieces that hold it
        std::vector<TpBlock> blocks;
        std::vector<int64_t> start;      // where each block starts in the slice
        int64_t numel = 0;
        std::vector<Piece> pieces;       // sorted by a, tiling [0, numel)
    };
    struct Tensor { int64_t rows = 0, cols = 0, live = 0; };
    std::vector<File> files;
    std::map<std::string, Tensor> tensors;
    std::map<std::string, std::vector<Slice>> slices;  // by kind + ":" + name
    std::string state_text;
};

static inline void ckpt_close(CkptReader* R) {
    for (CkptReader::File& f : R->files)
        if (f.fd >= 0) close(f.fd);
    R->files.clear();
}

// Adds piece [kind, name, blocks, a, b, at] of file `file`; returns an error message, empty when it fits its tensor
// and its file.
static inline std::string ckpt_add_piece(CkptReader* R, int file, const std::string& kind, const std::string& name,
                                         const std::vector<TpBlock>& blocks, int64_t a, int64_t b, uint64_t at) {
    auto t = R->tensors.find(name);
    if (t == R->tensors.end()) return "tensor " + name + " is not in index.json";
    if (kind != "p" && kind != "m" && kind != "v" && kind != "fp8") return "unknown kind " + kind;
    if (blocks.empty()) return "no blocks";
    int64_t numel = 0;
    for (const TpBlock& k : blocks) {
        if (k.row0 < 0 || k.rows <= 0 || k.col0 < 0 || k.cols <= 0 || k.row0 + k.rows > t->second.rows || k.col0 + k.cols > t->second.cols)
            return "a block outside tensor " + name;
        numel += k.rows * k.cols;
    }
    if (!(0 <= a && a < b && b <= numel)) return "elements outside its slice of " + name;
    const CkptReader::File& f = R->files[file];
    if (!f.single && (at > f.bytes || (uint64_t)(b - a) * 4 > f.bytes - at)) return "bytes past the end of " + f.name;
    std::vector<CkptReader::Slice>& ss = R->slices[kind + ":" + name];
    CkptReader::Slice* s = nullptr;
    for (CkptReader::Slice& x : ss) {
        bool same = x.blocks.size() == blocks.size();
        for (size_t i = 0; same && i < blocks.size(); i++)
            same = x.blocks[i].row0 == blocks[i].row0 && x.blocks[i].rows == blocks[i].rows && x.blocks[i].col0 == blocks[i].col0 &&
                   x.blocks[i].cols == blocks[i].cols;
        if (same) s = &x;
    }
    if (!s) {
        ss.push_back(CkptReader::Slice());
        s = &ss.back();
        s->blocks = blocks;
        for (const TpBlock& k : blocks) {
            s->start.push_back(s->numel);
            s->numel += k.rows * k.cols;
        }
    }
    s->pieces.push_back({file, a, b, at});
    return "";
}

// Every tensor of `full` (and the fp8 state when `fp8`) is there in every kind, its pieces tiling each slice once
// and its slices the whole tensor; shapes match the run's up to vocabulary padding. Returns an error message.
static inline std::string ckpt_check_cover(CkptReader* R, const ParamTable& full) {
    for (auto& kv : R->slices) {
        const std::string name = kv.first.substr(kv.first.find(':') + 1);
        const CkptReader::Tensor& t = R->tensors[name];
        int64_t sum = 0;
        for (CkptReader::Slice& s : kv.second) {
            std::sort(s.pieces.begin(), s.pieces.end(), [](const CkptReader::Piece& x, const CkptReader::Piece& y) { return x.a < y.a; });
            int64_t at = 0;
            for (const CkptReader::Piece& p : s.pieces) {
                if (p.a != at) return kv.first + (p.a < at ? ": two pieces overlap" : ": elements missing");
                at = p.b;
            }
            if (at != s.numel) return kv.first + ": elements missing";
            sum += s.numel;
        }
        if (sum != t.rows * t.cols) return kv.first + ": its slices do not cover the tensor once";
    }
    for (const ParamSpec& p : full.specs) {
        auto t = R->tensors.find(p.name);
        if (t == R->tensors.end()) return "no tensor " + p.name;
        if (t->second.cols != p.cols || t->second.live != p.live_rows)
            return "tensor " + p.name + " is [" + std::to_string(t->second.live) + ", " + std::to_string(t->second.cols) +
                   "], this run's [" + std::to_string(p.live_rows) + ", " + std::to_string(p.cols) + "]";
        for (const char* kind : {"p", "m", "v"})
            if (!R->slices.count(std::string(kind) + ":" + p.name)) return std::string("no ") + kind + " of tensor " + p.name;
    }
    return "";
}

// Bytes [at, at + n) of file i into dst: a single-file checkpoint's from memory, a shard's through its chunks, each
// read whole with pread once and checked against its hash.
static inline void ckpt_pread(CkptReader* R, int i, uint64_t at, size_t n, uint8_t* dst) {
    CkptReader::File& f = R->files[i];
    if (f.single) {  // offsets are into its data section
        for (size_t got = 0; got < n;) {
            const ssize_t r = pread(f.fd, dst + got, n - got, (off_t)(f.data_start + at + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) die("checkpoint %s: cannot read %s: %s", path_label(R->dir).c_str(), f.name.c_str(), r < 0 ? strerror(errno) : "the file ends early");
            got += (size_t)r;
        }
        return;
    }
    while (n > 0) {
        const int64_t ci = (int64_t)(at / CKPT_CHUNK_BYTES);
        if (f.cached != ci) {
            const uint64_t lo = (uint64_t)ci * CKPT_CHUNK_BYTES, len = std::min(CKPT_CHUNK_BYTES, f.bytes - lo);
            if (lo + len < f.bytes)  // the next chunk comes from the disk while this one is hashed and copied
                posix_fadvise(f.fd, (off_t)(lo + len), (off_t)CKPT_CHUNK_BYTES, POSIX_FADV_WILLNEED);
            f.buf.resize(len);
            size_t got = 0;
            while (got < len) {
                const ssize_t r = pread(f.fd, f.buf.data() + got, len - got, (off_t)(lo + got));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) die("checkpoint %s: cannot read %s at byte %llu: %s", path_label(R->dir).c_str(), f.name.c_str(),
                                (unsigned long long)(lo + got), r < 0 ? strerror(errno) : "the file ends early (truncated?)");
                got += (size_t)r;
            }
            if (ckpt_hash(f.buf.data(), len) != f.hashes[ci])
                die("checkpoint %s: %s is corrupt (the hash of its bytes %llu..%llu differs from the one its .json records)",
                    path_label(R->dir).c_str(), f.name.c_str(), (unsigned long long)lo, (unsigned long long)(lo + len));
            f.cached = ci;
        }
        const uint64_t off = at - (uint64_t)ci * CKPT_CHUNK_BYTES;
        const size_t take = (size_t)std::min<uint64_t>(n, f.buf.size() - off);
        memcpy(dst, f.buf.data() + off, take);
        dst += take;
        at += take;
        n -= take;
    }
}

// dst[hi - lo] = elements lo..hi of the `kind` of tensor `name`'s slice `blocks` (the reader's: its tp slice, of any
// layout; a whole tensor is the one block [0, rows) x [0, cols)). Rows past the tensor's live rows (vocabulary
// padding) read as zeros.
static inline void ckpt_read(CkptReader* R, const char* kind, const std::string& name, const std::vector<TpBlock>& blocks,
                             int64_t lo, int64_t hi, float* dst) {
    auto it = R->slices.find(std::string(kind) + ":" + name);
    if (it == R->slices.end()) die("checkpoint %s holds no %s of tensor %s", path_label(R->dir).c_str(), kind, name.c_str());
    const std::vector<CkptReader::Slice>& ss = it->second;
    const int64_t live = R->tensors[name].live, cols = R->tensors[name].cols;
    // n elements of the whole tensor from row r, column c on, into out: within the row, or (when the reader's block
    // is whole rows: `rows`) across rows; each stretch read from the writer's block that holds it
    auto run = [&](int64_t r, int64_t c, int64_t n, bool rows, float* out) {
        while (n > 0) {
            if (r >= live) { std::fill(out, out + n, 0.0f); return; }  // padding rows, and every row after them
            const CkptReader::Slice* s = nullptr;
            size_t k = 0;
            for (size_t si = 0; si < ss.size() && !s; si++)
                for (k = 0; k < ss[si].blocks.size(); k++) {
                    const TpBlock& b = ss[si].blocks[k];
                    if (r >= b.row0 && r < b.row0 + b.rows && c >= b.col0 && c < b.col0 + b.cols) { s = &ss[si]; break; }
                }
            if (!s) die("checkpoint %s: no shard holds row %lld, column %lld of %s %s", path_label(R->dir).c_str(), (long long)r,
                        (long long)c, kind, name.c_str());
            const TpBlock& b = s->blocks[k];
            int64_t pos = s->start[k] + (r - b.row0) * b.cols + (c - b.col0);
            const bool whole_rows = rows && b.col0 == 0 && b.cols == cols;  // contiguous across rows on both sides
            int64_t m = whole_rows ? std::min((b.row0 + b.rows - r) * cols - c, (live - r) * cols - c) : b.col0 + b.cols - c;
            m = std::min(m, n);
            n -= m;
            c += m;
            r += c / cols;
            c %= cols;
            while (m > 0) {  // the pieces tile the slice: the one holding pos, by bisection
                auto p = std::upper_bound(s->pieces.begin(), s->pieces.end(), pos,
                                          [](int64_t x, const CkptReader::Piece& q) { return x < q.a; }) - 1;
                const int64_t q = std::min(m, p->b - pos);
                ckpt_pread(R, p->file, p->at + (uint64_t)(pos - p->a) * 4, (size_t)q * 4, (uint8_t*)out);
                out += q;
                pos += q;
                m -= q;
            }
        }
    };
    int64_t start = 0;
    for (const TpBlock& b : blocks) {
        const int64_t n = b.rows * b.cols, from = std::max(lo, start), to = std::min(hi, start + n);
        if (from < to && b.col0 == 0 && b.cols == cols) {  // whole rows: one run
            run(b.row0 + (from - start) / cols, (from - start) % cols, to - from, true, dst + (from - lo));
        } else {
            for (int64_t e = from; e < to;) {  // e: a slice position inside this block; one run per row
                const int64_t i = (e - start) / b.cols, j = (e - start) % b.cols, j1 = std::min<int64_t>(b.cols, j + (to - e));
                run(b.row0 + i, b.col0 + j, j1 - j, false, dst + (e - lo));
                e += j1 - j;
            }
        }
        start += n;
    }
}

// The model config `where` holds (its JSON text) matches the run's up to vocabulary padding, or the run stops.
static inline void ckpt_check_config(const std::string& dir, const std::string& json, const char* where, const ModelConfig& c) {
    ModelConfig fc = config_from_json(json, where);
    fc.padded_vocab = c.padded_vocab;
    if (config_to_json(fc) != config_to_json(c))
        die("checkpoint %s was written for a different model (%s):\n  checkpoint: %s\n  this run:   %s",
            path_label(dir).c_str(), config_difference(fc, c, "in the checkpoint", "in this run").c_str(),
            config_to_json(fc).c_str(), config_to_json(c).c_str());
}

// The files of checkpoint `dir`: DONE parses, every file it names is a regular file with content, and each shard's .bin
// is there at the size its .json records. Returns DONE's (file, hash) list; stops the run naming the file. ckpt_open
// starts with it; train_gpt.cu calls it among its input checks, before it looks for a device.
static inline std::vector<std::pair<std::string, std::string>> ckpt_check_files(const std::string& dir) {
    const std::vector<uint8_t> db = read_file_bytes(dir + "/DONE");
    std::vector<std::pair<std::string, std::string>> files;
    const std::string err = ckpt_parse_done((const char*)db.data(), db.size(), &files);
    if (!err.empty()) die("%s: corrupt checkpoint marker (%s)", path_label(dir + "/DONE").c_str(), err.c_str());
    struct stat sb;
    for (const auto& f : files) {
        if (!file_exists(dir + "/" + f.first)) die("checkpoint %s: missing file %s", path_label(dir).c_str(), f.first.c_str());
        close(open_input(dir + "/" + f.first, nullptr, true, &sb));
        if (f.first.rfind("shard_", 0) != 0 || !ends_with(f.first, ".json")) continue;
        const std::vector<uint8_t> jb = read_file_bytes(dir + "/" + f.first);
        Json j;
        const Json* bytes = json_parse((const char*)jb.data(), jb.size(), &j, nullptr) && j.kind == Json::OBJ ? j.get("bytes") : nullptr;
        const std::string bin = f.first.substr(0, f.first.size() - 5) + ".bin";
        if (!file_exists(dir + "/" + bin)) die("checkpoint %s: missing file %s (named in %s)", path_label(dir).c_str(), bin.c_str(), f.first.c_str());
        close(open_input(dir + "/" + bin, nullptr, false, &sb));
        if (bytes && bytes->kind == Json::NUM && bytes->num != (double)sb.st_size)
            die("checkpoint %s: %s is %lld bytes, %s records %.0f (truncated?)", path_label(dir).c_str(), bin.c_str(), (long long)sb.st_size,
                f.first.c_str(), bytes->num);
    }
    return files;
}

// The model config a checkpoint (either form) was written for, vocabulary padded as its writer's: for tools that read
// a checkpoint without a run's flags (dev/ckpt_convert.cpp).
static inline ModelConfig ckpt_config(const std::string& dir) {
    if (file_exists(dir + "/index.json")) {
        const std::vector<uint8_t> b = read_file_bytes(dir + "/index.json");
        Json j;
        std::string err;
        if (!json_parse((const char*)b.data(), b.size(), &j, &err) || j.kind != Json::OBJ || !j.get("config"))
            die("%s: not a JSON object with a config (%s)", path_label(dir + "/index.json").c_str(), err.c_str());
        ModelConfig c = config_from_json(json_dump(*j.get("config")), path_label(dir + "/index.json").c_str());
        return c;
    }
    SafeTensors st;
    st_open(&st, dir + "/model.safetensors");
    st_close(&st);
    auto it = st.metadata.find("config");
    if (it == st.metadata.end()) die("%s: no config in metadata", path_label(dir + "/model.safetensors").c_str());
    return config_from_json(it->second, path_label(dir + "/model.safetensors").c_str());
}

// Opens checkpoint `dir` (either form) for ckpt_read by a run of model c, table `full`: DONE's hashes of the small
// files, state.json into *s, the config, and (sharded) index.json and every shard's .json, its .bin's size and that
// the pieces cover every tensor once. fp8: where delayed scaling's state goes (left empty when the checkpoint has
// none); null: not read. Any fault stops the run naming the file.
static inline void ckpt_open(CkptReader* R, const std::string& dir, const ModelConfig& c, const ParamTable& full, TrainState* s,
                             Fp8State* fp8 = nullptr) {
    R->dir = dir;
    const std::string where = path_label(dir);
    const std::vector<std::pair<std::string, std::string>> done = ckpt_check_files(dir);
    std::string err;
    bool sharded = false;
    std::map<std::string, std::vector<uint8_t>> small;  // the files DONE hashes, sharded form
    for (const auto& f : done) sharded = sharded || f.first == "index.json";
    for (const auto& f : done) {  // the single-file form's files are hashed whole, in blocks
        const std::string path = dir + "/" + f.first;
        std::vector<uint8_t> b;
        if (sharded || f.first == "state.json") b = read_file_bytes(path);  // small; none of them is ever empty
        if (std::to_string(!sharded ? fnv1a_file(path) : ckpt_hash(b.data(), b.size())) != f.second)
            die("checkpoint %s: %s is corrupt (its hash differs from the one recorded in DONE)", where.c_str(), f.first.c_str());
        if (!b.empty()) small[f.first] = std::move(b);
    }
    R->state_text.assign(small["state.json"].begin(), small["state.json"].end());
    err = ckpt_parse_state(R->state_text.data(), R->state_text.size(), s);
    if (!err.empty()) die("%s: %s", path_label(dir + "/state.json").c_str(), err.c_str());

    if (!sharded) {  // the single-file form: two safetensors files of whole tensors
        SafeTensors whole[2];
        st_open(&whole[0], dir + "/model.safetensors");
        st_open(&whole[1], dir + "/optim.safetensors");
        auto it = whole[0].metadata.find("config");
        if (it == whole[0].metadata.end()) die("%s: no config in metadata", path_label(dir + "/model.safetensors").c_str());
        ckpt_check_config(dir, it->second, path_label(dir + "/model.safetensors").c_str(), c);
        for (int i = 0; i < 2; i++) {
            SafeTensors& st = whole[i];
            CkptReader::File f;
            f.name = i ? "optim.safetensors" : "model.safetensors";
            f.fd = st.fd;  // the reader's now, closed by ckpt_close
            f.single = true;
            f.data_start = st.data_start;
            R->files.push_back(f);
            for (const StTensor& t : st.tensors) {
                if (t.dtype != "F32" || t.shape.size() != 2 || t.numel() == 0)
                    die("%s: tensor %s is not a 2-D F32 tensor", path_label(dir + "/" + f.name).c_str(), t.name.c_str());
                std::string kind = "p", name = t.name;
                if (i == 1 && (t.name.rfind("m.", 0) == 0 || t.name.rfind("v.", 0) == 0)) kind = t.name.substr(0, 1), name = t.name.substr(2);
                else if (i == 1 && t.name.rfind("fp8.", 0) == 0) kind = "fp8";
                CkptReader::Tensor& T = R->tensors[name];
                T.rows = T.live = t.shape[0];
                T.cols = t.shape[1];
                err = ckpt_add_piece(R, i, kind, name, {{0, t.shape[0], 0, t.shape[1]}}, 0, t.numel(), t.begin);
                if (!err.empty()) die("%s: %s", path_label(dir + "/" + f.name).c_str(), err.c_str());
            }
        }
    } else {
        const std::string ipath = path_label(dir + "/index.json");
        const std::vector<uint8_t>& ib = small["index.json"];
        Json ix;
        if (!json_parse((const char*)ib.data(), ib.size(), &ix, &err) || ix.kind != Json::OBJ)
            die("%s: not a JSON object (%s)", ipath.c_str(), err.c_str());
        const Json* step = ix.get("step");
        const Json* cfg = ix.get("config");
        const Json* ts = ix.get("tensors");
        const Json* sh = ix.get("shards");
        if (!step || step->kind != Json::NUM || !cfg || cfg->kind != Json::OBJ || !ts || ts->kind != Json::OBJ || !sh || sh->kind != Json::ARR)
            die("%s: lacks step, config, tensors or shards", ipath.c_str());
        if (step->num != (double)s->step) die("%s is of step %g, state.json of step %d", ipath.c_str(), step->num, s->step);
        ckpt_check_config(dir, json_dump(*cfg), ipath.c_str(), c);
        for (const auto& kv : ts->obj) {
            const Json& v = kv.second;
            bool ok = v.kind == Json::ARR && v.arr.size() == 3;
            for (size_t i = 0; ok && i < 3; i++) ok = v.arr[i].kind == Json::NUM && v.arr[i].num >= 1 && v.arr[i].num <= 1e12 && v.arr[i].num == (double)(int64_t)v.arr[i].num;
            if (!ok || v.arr[2].num > v.arr[0].num) die("%s: tensor %s's shape is not [rows, cols, live rows]", ipath.c_str(), kv.first.c_str());
            R->tensors[kv.first] = {(int64_t)v.arr[0].num, (int64_t)v.arr[1].num, (int64_t)v.arr[2].num};
        }
        for (const Json& name : sh->arr) {
            if (name.kind != Json::STR || !small.count(name.str) || name.str.rfind("shard_", 0) != 0 || !ends_with(name.str, ".json"))
                die("%s: shard %s is not one of the files DONE records", ipath.c_str(), name.kind == Json::STR ? name.str.c_str() : "?");
            const std::string jpath = path_label(dir + "/" + name.str);
            const std::vector<uint8_t>& jb = small[name.str];
            Json j;
            if (!json_parse((const char*)jb.data(), jb.size(), &j, &err) || j.kind != Json::OBJ) die("%s: not a JSON object (%s)", jpath.c_str(), err.c_str());
            const Json* jstep = j.get("step");
            const Json* file = j.get("file");
            const Json* bytes = j.get("bytes");
            const Json* cb = j.get("chunk_bytes");
            const Json* hs = j.get("chunk_hashes");
            const Json* ps = j.get("pieces");
            if (!jstep || jstep->kind != Json::NUM || !file || file->kind != Json::STR || !bytes || bytes->kind != Json::NUM ||
                !cb || cb->kind != Json::NUM || !hs || hs->kind != Json::ARR || !ps || ps->kind != Json::ARR)
                die("%s: lacks step, file, bytes, chunk_bytes, chunk_hashes or pieces", jpath.c_str());
            if (jstep->num != step->num)
                die("checkpoint %s: %s is of step %g, index.json of step %g (shards of two checkpoints)", where.c_str(), name.str.c_str(),
                    jstep->num, step->num);
            const std::string bin = name.str.substr(0, name.str.size() - 5) + ".bin";
            if (file->str != bin) die("%s: its file is '%s', expected '%s'", jpath.c_str(), file->str.c_str(), bin.c_str());
            if (cb->num != (double)CKPT_CHUNK_BYTES) die("%s: chunk_bytes %g, this program reads %llu", jpath.c_str(), cb->num, (unsigned long long)CKPT_CHUNK_BYTES);
            CkptReader::File f;
            f.name = bin;
            struct stat st;
            f.fd = open_input(dir + "/" + bin, nullptr, false, &st);  // there at its size: ckpt_check_files
            f.bytes = (uint64_t)st.st_size;
            R->files.push_back(f);  // closed by ckpt_close, or at exit
            if (bytes->num != (double)f.bytes) die("checkpoint %s: %s changed size while being read", where.c_str(), bin.c_str());
            if (hs->arr.size() != (f.bytes + CKPT_CHUNK_BYTES - 1) / CKPT_CHUNK_BYTES) die("%s: the number of chunk hashes does not match its size", jpath.c_str());
            for (const Json& h : hs->arr) {
                char* q = nullptr;
                if (h.kind != Json::STR || h.str.empty() || h.str.size() > 20) die("%s: a chunk hash is not a decimal string", jpath.c_str());
                R->files.back().hashes.push_back(strtoull(h.str.c_str(), &q, 10));
                if (*q) die("%s: a chunk hash is not a decimal string", jpath.c_str());
            }
            const int fi = (int)R->files.size() - 1;
            for (const Json& p : ps->arr) {
                auto num = [](const Json& x) { return x.kind == Json::NUM && x.num >= 0 && x.num <= 9e15 && x.num == (double)(int64_t)x.num; };
                bool ok = p.kind == Json::ARR && p.arr.size() == 6 && p.arr[0].kind == Json::STR && p.arr[1].kind == Json::STR &&
                          p.arr[2].kind == Json::ARR && num(p.arr[3]) && num(p.arr[4]) && num(p.arr[5]);
                std::vector<TpBlock> blocks;
                for (size_t i = 0; ok && i < p.arr[2].arr.size(); i++) {
                    const Json& b = p.arr[2].arr[i];
                    ok = b.kind == Json::ARR && b.arr.size() == 4 && num(b.arr[0]) && num(b.arr[1]) && num(b.arr[2]) && num(b.arr[3]);
                    if (ok) blocks.push_back({(int64_t)b.arr[0].num, (int64_t)b.arr[1].num, (int64_t)b.arr[2].num, (int64_t)b.arr[3].num});
                }
                if (!ok) die("%s: a piece is not [kind, tensor, blocks, a, b, at]", jpath.c_str());
                err = ckpt_add_piece(R, fi, p.arr[0].str, p.arr[1].str, blocks, (int64_t)p.arr[3].num, (int64_t)p.arr[4].num, (uint64_t)p.arr[5].num);
                if (!err.empty()) die("%s: %s", jpath.c_str(), err.c_str());
            }
        }
    }
    err = ckpt_check_cover(R, full);
    if (!err.empty()) die("checkpoint %s is incomplete or inconsistent: %s", where.c_str(), err.c_str());

    if (!fp8) return;
    *fp8 = Fp8State();
    Json st;
    json_parse(R->state_text.data(), R->state_text.size(), &st, &err);  // parsed above already
    const Json* f = st.get("fp8");
    if (!f) return;
    const Json* h = f->kind == Json::OBJ ? f->get("history") : nullptr;
    const Json* pos = f->kind == Json::OBJ ? f->get("pos") : nullptr;
    if (!h || !pos || h->kind != Json::NUM || pos->kind != Json::NUM || !(h->num >= 1 && h->num <= 65536) ||
        h->num != (double)(int)h->num || !(pos->num >= 0 && pos->num < h->num) || pos->num != (double)(int)pos->num)
        die("%s: fp8 is not {\"history\": an integer in [1, 65536], \"pos\": an integer below it}", path_label(dir + "/state.json").c_str());
    fp8->history = (int)h->num;
    fp8->pos = (int)pos->num;
    const int64_t rows = 3 + (int64_t)fp8->history, n = 4 * c.n_layer, count = rows * n;
    for (const char* name : {"fp8.x", "fp8.dy"}) {
        auto t = R->tensors.find(name);
        if (t == R->tensors.end() || t->second.rows != rows || t->second.cols != n || !R->slices.count(std::string("fp8:") + name))
            die("checkpoint %s: no %s of shape [%lld, %lld] (state.json's fp8 history %d)", where.c_str(), name, (long long)rows,
                (long long)n, fp8->history);
    }
    fp8->x.resize(count);
    fp8->dy.resize(count);
    ckpt_read(R, "fp8", "fp8.x", {{0, rows, 0, n}}, 0, count, fp8->x.data());
    ckpt_read(R, "fp8", "fp8.dy", {{0, rows, 0, n}}, 0, count, fp8->dy.data());
    for (const std::vector<float>* a : {&fp8->x, &fp8->dy})  // scales and their inverses positive and finite; amaxes >= 0
        for (int64_t e = 0; e < count; e++)
            if (e < 2 * n ? !((*a)[e] > 0 && std::isfinite((*a)[e])) : !((*a)[e] >= 0))
                die("checkpoint %s: fp8 state value %g at [%lld, %lld] is not a valid %s", where.c_str(), (*a)[e], (long long)(e / n),
                    (long long)(e % n), e < 2 * n ? "scale (finite, > 0)" : "amax (>= 0)");
}

// ---------------------------------------------------------------------------------------------------------------
// One process with the whole model in memory (test_gpt, tools): the same format, one shard of whole tensors
// (checkpoint_save_whole, at the end).

static inline void checkpoint_load_whole(const std::string& dir, const ModelConfig& c, const ParamTable& t, float* params, float* m,
                                         float* v, TrainState* s, Fp8State* fp8 = nullptr) {
    CkptReader R;
    ckpt_open(&R, dir, c, t, s, fp8);
    float* dst[3] = {params, m, v};
    const char* kinds[3] = {"p", "m", "v"};
    for (int i = 0; i < 3; i++)
        for (const ParamSpec& p : t.specs)
            if (dst[i]) ckpt_read(&R, kinds[i], p.name, {{0, p.rows, 0, p.cols}}, 0, (int64_t)p.numel(), dst[i] + p.offset);
    ckpt_close(&R);
}

// The single-file form (whole tensors by table name in model.safetensors and optim.safetensors, live rows only), which
// ckpt_open still reads: written by dev/ckpt_convert.cpp for tools that compare whole tensors.
static inline void checkpoint_save_single(const std::string& out_dir, const ModelConfig& c, const ParamTable& t, const float* params,
                                          const float* m, const float* v, const TrainState& s, const Fp8State* fp8 = nullptr) {
    const std::string tmp = ckpt_tmp_dir(out_dir, s.step);
    ckpt_prepare(out_dir, s.step);
    StWriter wm, wo;
    wm.metadata["config"] = config_to_json(c);
    for (const ParamSpec& p : t.specs) {
        st_add(&wm, p.name, "F32", {p.live_rows, p.cols}, params + p.offset);
        st_add(&wo, "m." + p.name, "F32", {p.live_rows, p.cols}, m + p.offset);
        st_add(&wo, "v." + p.name, "F32", {p.live_rows, p.cols}, v + p.offset);
    }
    if (fp8 && fp8->history > 0) {
        const int64_t rows = 3 + (int64_t)fp8->history, cols = 4 * (int64_t)c.n_layer;
        st_add(&wo, "fp8.x", "F32", {rows, cols}, fp8->x.data());
        st_add(&wo, "fp8.dy", "F32", {rows, cols}, fp8->dy.data());
    }
    st_write(&wm, tmp + "/model.safetensors");
    st_write(&wo, tmp + "/optim.safetensors");
    write_text(tmp + "/state.json", ckpt_state_json(c, s, fp8));
    std::string done = "{";
    for (int i = 0; i < 3; i++) {
        const std::string path = tmp + "/" + kCkptFiles[i];
        fsync_path(path);
        done += std::string(i ? "," : "") + "\"" + kCkptFiles[i] + "\":\"" + std::to_string(fnv1a_file(path)) + "\"";
    }
    ckpt_seal(out_dir, s.step, done + "}\n");
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


// A checkpoint of the run at s.step into out_dir, the protocol of both trainers: every rank calls it. Rank 0 prepares
// the directory; every rank writes its shard (write_mine: its pieces, part_write of llmc/run/assemble.h; rank 0
// also fp8's state); rank 0 commits. barrier: a barrier of every rank under the disk-work timeout (--io-timeout).
static inline void checkpoint_save(const std::string& out_dir, const ModelConfig& c, const ParamTable& full, const std::string& layout,
                                   int rank, int world, const TrainState& s, int keep_last, const Fp8State* fp8,
                                   const std::function<void()>& barrier, const std::function<void(CkptShardWriter*)>& write_mine) {
    if (rank == 0) ckpt_prepare(out_dir, s.step);
    barrier();
    CkptShardWriter w;
    ckpt_shard_open(&w, out_dir, s.step, rank);
    write_mine(&w);
    if (rank == 0 && fp8 && fp8->history > 0) {
        const int64_t rows = 3 + fp8->history, cols = 4 * (int64_t)c.n_layer;
        ckpt_shard_put(&w, "fp8", "fp8.x", {{0, rows, 0, cols}}, 0, rows * cols, fp8->x.data());
        ckpt_shard_put(&w, "fp8", "fp8.dy", {{0, rows, 0, cols}}, 0, rows * cols, fp8->dy.data());
    }
    ckpt_shard_close(&w);
    barrier();  // every shard durable
    if (rank == 0) ckpt_commit(out_dir, c, full, layout, world, s, keep_last, fp8);
    barrier();
}

static inline void checkpoint_save_whole(const std::string& out_dir, const ModelConfig& c, const ParamTable& t, const float* params,
                                         const float* m, const float* v, const TrainState& s, int keep_last, const Fp8State* fp8 = nullptr) {
    const float* src[3] = {params, m, v};
    const char* kinds[3] = {"p", "m", "v"};
    checkpoint_save(out_dir, c, t, "{\"world\":1}", 0, 1, s, keep_last, fp8, [] {}, [&](CkptShardWriter* w) {
        for (int i = 0; i < 3; i++)
            for (const ParamSpec& p : t.specs) ckpt_shard_put(w, kinds[i], p.name, {{0, p.rows, 0, p.cols}}, 0, (int64_t)p.numel(), src[i] + p.offset);
    });
}
