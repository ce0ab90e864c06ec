// llmc/data/datasets.h: token data sets for the trainer's data loader, three formats behind one API.
//   Megatron-LM indexed dataset  X.bin (raw tokens) + X.idx (index, magic "MMIDIDX\0\0")
//   PaddleNLP                    X_ids.npy (flat token array) + X_idx.npz (arrays lens, docs)
//   llm.c shards                 *.bin with a 256 x int32 header (magic 20240520), a glob of them
// Each becomes one token stream: the sequences (documents) of the index in index order, or the
// shards in sorted file-name order, concatenated. Sample i is the window of seq+1 tokens that
// starts at token i*seq, so consecutive samples share one token (Megatron's convention; inputs
// are tokens [:-1], targets [1:]); a stream of T tokens gives (T-1)/seq samples, and the tail
// that does not fill a window is left out. With shuffle, sample i reads window order[i]: a
// Fisher-Yates permutation driven by splitmix64 (llmc/rng.h) seeded with `seed` (deterministic
// on every machine; not bit-identical to Megatron's numpy shuffle).
// Token files are memory-mapped; index files are parsed, validated and unmapped at open. A token
// file that shrinks while mapped (another program rewriting it) makes a read past its new end
// raise SIGBUS: a handler names the file and exits 1 instead of the crash. The
// parsers take buffers and return an error string (empty when fine), so the fuzzer can call
// them; dataset_open dies with the file name. Byte layouts: docs/data_formats.md.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include "llmc/rng.h"
#include "llmc/utils.h"
#include "llmc/data/zip_npy.h"

// ----------------------------------------------------------------------------------------------
// Token element types, as stored on disk (little-endian).

enum TokenType { TT_U8, TT_I8, TT_I16, TT_U16, TT_I32, TT_U32, TT_I64, TT_U64 };
static const int token_type_bytes[] = {1, 1, 2, 2, 4, 4, 8, 8};
static const char* const token_type_names[] = {"uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64"};

// Element i of an array of `type` at p, widened to int64 (uint64 values above INT64_MAX clamp).
static inline int64_t token_value(const uint8_t* p, int type, uint64_t i) {
    switch (type) {
        case TT_U8: return p[i];
        case TT_I8: return (int8_t)p[i];
        case TT_I16: return (int16_t)le_u16(p + 2 * i);
        case TT_U16: return le_u16(p + 2 * i);
        case TT_I32: return (int32_t)le_u32(p + 4 * i);
        case TT_U32: return le_u32(p + 4 * i);
        case TT_I64: return (int64_t)le_u64(p + 8 * i);
        default: { uint64_t v = le_u64(p + 8 * i); return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v; }
    }
}

// Megatron dtype codes (PaddleNLP adds 9 and 10): -1 unknown, -2 floating point.
static const int megatron_code_type[] = {-1, TT_U8, TT_I8, TT_I16, TT_I32, TT_I64, -2, -2, TT_U16, TT_U32, TT_U64};

static inline int npy_token_type(const NpyArray& a) {
    switch (a.itemsize) {
        case 1: return a.kind == 'i' ? TT_I8 : TT_U8;
        case 2: return a.kind == 'i' ? TT_I16 : TT_U16;
        case 4: return a.kind == 'i' ? TT_I32 : TT_U32;
        default: return a.kind == 'i' ? TT_I64 : TT_U64;
    }
}

// ----------------------------------------------------------------------------------------------
// The token stream: runs of tokens ("pieces") inside the mapped files, in stream order.

struct TokenPiece {
    const uint8_t* data;  // first token of the run, inside a mapped file
    uint64_t start;       // position of that token in the stream
    uint64_t count;       // tokens in the run
    int type;             // TokenType
    int file;             // index into TokenDataset::files
};

// Appends a run to the stream, merging it into the previous one when it continues it in memory
// (the usual case: a Megatron .bin written in order becomes a single piece).
static inline void pieces_append(std::vector<TokenPiece>* pieces, const uint8_t* data, uint64_t count, int type, int file) {
    if (count == 0) return;
    uint64_t start = 0;
    if (!pieces->empty()) {
        TokenPiece& last = pieces->back();
        start = last.start + last.count;
        if (last.file == file && last.type == type && last.data + last.count * token_type_bytes[type] == data) {
            last.count += count;
            return;
        }
    }
    pieces->push_back({data, start, count, type, file});
}

// ----------------------------------------------------------------------------------------------
// Parsers. Each validates one file completely and appends its tokens to `pieces`.

// Megatron .idx: magic "MMIDIDX\0\0", uint64 version 1, uint8 dtype code, uint64 N, uint64 D,
// int32 sizes[N], int64 pointers[N] (byte offsets into .bin), int64 doc_idx[D] (0 ... N).
// `bin` / `bin_size` is the mapped .bin the pointers refer to.
static std::string megatron_parse_idx(const uint8_t* idx, size_t idx_size, const uint8_t* bin, uint64_t bin_size,
                                      int file, std::vector<TokenPiece>* pieces) {
    const uint64_t H = 34;  // 9 + 8 + 1 + 8 + 8
    if (idx_size < H) return "truncated: " + std::to_string(idx_size) + " bytes, shorter than the 34-byte header";
    if (memcmp(idx, "MMIDIDX\0\0", 9) != 0) return "bad magic (expected \"MMIDIDX\\0\\0\"): not a Megatron .idx file";
    uint64_t version = le_u64(idx + 9);
    if (version != 1) return "unsupported version " + std::to_string(version) + " (expected 1)";
    int code = idx[17];
    if (code == 6 || code == 7) return "dtype code " + std::to_string(code) + " is floating point (" + (code == 6 ? "float64" : "float32") + "); token ids must be integers";
    if (code < 1 || code > 10) return "unknown dtype code " + std::to_string(code) + " (known: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16, 9 u32, 10 u64)";
    int type = megatron_code_type[code];
    uint64_t es = (uint64_t)token_type_bytes[type];
    uint64_t n = le_u64(idx + 18), d = le_u64(idx + 26);
    uint64_t avail = idx_size - H;
    if (n > avail / 12 || d > (avail - 12 * n) / 8)
        return "truncated: the header declares " + std::to_string(n) + " sequences and " + std::to_string(d) +
               " doc_idx entries, more than the " + std::to_string(idx_size) + "-byte file holds";
    uint64_t need = H + 12 * n + 8 * d;
    if (idx_size != need) return std::to_string(idx_size - need) + " unexpected bytes after doc_idx (the header declares " +
                                 std::to_string(n) + " sequences, " + std::to_string(d) + " doc_idx entries; a multimodal index is not supported)";
    const uint8_t* sizes = idx + H;          // int32[n]
    const uint8_t* pointers = sizes + 4 * n;  // int64[n]
    const uint8_t* doc_idx = pointers + 8 * n;  // int64[d]

    if (d == 0) return "doc_idx is empty (it must run from 0 to N = " + std::to_string(n) + ")";
    if (le_u64(doc_idx) != 0) return "doc_idx starts at " + std::to_string((int64_t)le_u64(doc_idx)) + ", expected 0";
    for (uint64_t j = 1; j < d; j++) {
        int64_t a = (int64_t)le_u64(doc_idx + 8 * (j - 1)), b = (int64_t)le_u64(doc_idx + 8 * j);
        if (b < a) return "doc_idx is not monotone: doc_idx[" + std::to_string(j) + "] = " + std::to_string(b) + " < doc_idx[" + std::to_string(j - 1) + "] = " + std::to_string(a);
    }
    int64_t last = (int64_t)le_u64(doc_idx + 8 * (d - 1));
    if (last != (int64_t)n) return "doc_idx ends at " + std::to_string(last) + ", expected N = " + std::to_string(n) + " (the number of sequences)";

    for (uint64_t i = 0; i < n; i++) {
        int64_t size = (int32_t)le_u32(sizes + 4 * i);
        int64_t ptr = (int64_t)le_u64(pointers + 8 * i);
        if (size < 0) return "sequence " + std::to_string(i) + " has a negative size " + std::to_string(size);
        if (ptr < 0 || (uint64_t)ptr > bin_size || (uint64_t)size * es > bin_size - (uint64_t)ptr)
            return "sequence " + std::to_string(i) + " (byte offset " + std::to_string(ptr) + ", " + std::to_string(size) + " tokens of " +
                   std::to_string(es) + " bytes) runs past the end of the .bin file (" + std::to_string(bin_size) + " bytes): truncated .bin or corrupt .idx";
        pieces_append(pieces, bin + ptr, (uint64_t)size, type, file);
    }
    return "";
}

// PaddleNLP X_ids.npy: a 1-D integer array of all tokens.
static std::string paddle_parse_ids(const uint8_t* buf, size_t size, int file, std::vector<TokenPiece>* pieces) {
    NpyArray a;
    std::string err = npy_parse(buf, size, &a);
    if (!err.empty()) return err;
    pieces_append(pieces, a.data, a.count, npy_token_type(a), file);
    return "";
}

// PaddleNLP X_idx.npz: `lens` (tokens per sequence) must add up to the num_ids tokens of
// X_ids.npy, and `docs` (doc_idx over the sequences) must run monotonically from 0 to len(lens).
static std::string paddle_parse_index(const uint8_t* buf, size_t size, uint64_t num_ids) {
    NpyArray lens, docs;
    std::string err = npz_array(buf, size, "lens", &lens);
    if (!err.empty()) return err;
    err = npz_array(buf, size, "docs", &docs);
    if (!err.empty()) return err;
    int lt = npy_token_type(lens), dt = npy_token_type(docs);
    uint64_t total = 0;
    for (uint64_t i = 0; i < lens.count; i++) {
        int64_t v = token_value(lens.data, lt, i);
        if (v < 0) return "lens[" + std::to_string(i) + "] = " + std::to_string(v) + " is negative";
        if ((uint64_t)v > num_ids - total) return "lens add up to more than the " + std::to_string(num_ids) + " tokens of the _ids.npy array";
        total += (uint64_t)v;
    }
    if (total != num_ids) return "lens add up to " + std::to_string(total) + " tokens but the _ids.npy array holds " + std::to_string(num_ids);
    if (docs.count == 0) return "docs is empty (it must run from 0 to len(lens) = " + std::to_string(lens.count) + ")";
    if (token_value(docs.data, dt, 0) != 0) return "docs starts at " + std::to_string(token_value(docs.data, dt, 0)) + ", expected 0";
    for (uint64_t j = 1; j < docs.count; j++) {
        int64_t a = token_value(docs.data, dt, j - 1), b = token_value(docs.data, dt, j);
        if (b < a) return "docs is not monotone: docs[" + std::to_string(j) + "] = " + std::to_string(b) + " < docs[" + std::to_string(j - 1) + "] = " + std::to_string(a);
    }
    int64_t last = token_value(docs.data, dt, docs.count - 1);
    if (last != (int64_t)lens.count) return "docs ends at " + std::to_string(last) + ", expected len(lens) = " + std::to_string(lens.count);
    return "";
}

// llm.c shard: int32 header[256] = {20240520, version (1 = uint16 tokens, 2 = uint32), count},
// then exactly `count` tokens.
static std::string llmc_parse_shard(const uint8_t* buf, size_t size, int file, std::vector<TokenPiece>* pieces) {
    if (size < 1024) return "truncated: " + std::to_string(size) + " bytes, shorter than the 1024-byte header";
    int32_t magic = (int32_t)le_u32(buf), version = (int32_t)le_u32(buf + 4), count = (int32_t)le_u32(buf + 8);
    if (magic != 20240520) return "bad magic " + std::to_string(magic) + " (expected 20240520): not an llm.c token shard";
    if (version != 1 && version != 2) return "unsupported version " + std::to_string(version) + " (1 = uint16 tokens, 2 = uint32 tokens)";
    if (count < 0) return "negative token count " + std::to_string(count) + " in the header";
    uint64_t es = version == 1 ? 2 : 4;
    uint64_t need = 1024 + (uint64_t)count * es;
    if (size < need) return "truncated: the header declares " + std::to_string(count) + " tokens (" + std::to_string(need) + " bytes with the header), the file has " + std::to_string(size);
    if (size > need) return std::to_string(size - need) + " unexpected bytes after the " + std::to_string(count) + " tokens the header declares";
    pieces_append(pieces, buf + 1024, (uint64_t)count, version == 1 ? TT_U16 : TT_U32, file);
    return "";
}

// ----------------------------------------------------------------------------------------------
// Memory-mapped files.

struct MappedFile {
    std::string path;
    uint8_t* data;  // nullptr for an empty file
    size_t size;
};

// The mapped files, for the SIGBUS handler: a fixed table (the handler may only read memory and write(2)).
struct MappedRange {
    const uint8_t* lo;
    size_t size;
    char path[512];
};
static MappedRange g_mapped[1024];

static void mapped_sigbus_handler(int, siginfo_t* info, void*) {
    const uint8_t* a = (const uint8_t*)info->si_addr;
    const char* path = "a memory-mapped token file";
    for (const MappedRange& m : g_mapped)
        if (m.lo && a >= m.lo && a < m.lo + m.size) path = m.path;
    const char* parts[] = {"error: ", path, ": shrank while being read (a read past its new end, SIGBUS); is another "
                           "program writing it? Stopping; the newest complete checkpoint is kept\n"};
    for (const char* t : parts) {
        ssize_t n = write(2, t, strlen(t));
        (void)n;
    }
    _exit(1);
}

// Records a mapping in g_mapped (installing the handler once); a full table only loses the file's name.
static void mapped_register(const uint8_t* lo, size_t size, const std::string& path) {
    static bool installed = false;
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = mapped_sigbus_handler;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, nullptr);
        installed = true;
    }
    for (MappedRange& m : g_mapped)
        if (!m.lo) {
            snprintf(m.path, sizeof(m.path), "%s", path.c_str());
            m.size = size;
            m.lo = lo;
            return;
        }
}

static void mapped_unregister(const uint8_t* lo) {
    for (MappedRange& m : g_mapped)
        if (m.lo == lo) m.lo = nullptr;
}

static MappedFile map_file(const std::string& path) {
    struct stat st;
    int fd = open_input(path, nullptr, false, &st);  // a regular file, or a message naming the flag
    MappedFile m = {path, nullptr, (size_t)st.st_size};
    if (m.size > 0) {
        void* p = mmap(nullptr, m.size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("cannot mmap %s (%zu bytes): %s", path_label(path).c_str(), m.size, strerror(errno));
        m.data = (uint8_t*)p;
        mapped_register(m.data, m.size, path_label(path));
    }
    close(fd);
    return m;
}

// Dies if a mapped file's size changed since it was mapped (another program writing it).
static void check_unchanged(const MappedFile& m) {
    struct stat st;
    if (stat(m.path.c_str(), &st) != 0 || (size_t)st.st_size != m.size)
        die("%s: changed size while being read (%zu bytes when opened); is another program writing it?",
            path_label(m.path).c_str(), m.size);
}

static void unmap_file(MappedFile* m) {
    if (m->data) {
        mapped_unregister(m->data);
        munmap(m->data, m->size);
    }
    m->data = nullptr;
    m->size = 0;
}

// ----------------------------------------------------------------------------------------------
// The data set.

struct TokenDataset {
    const char* format;              // "megatron", "paddlenlp" or "llmc"
    int seq;                         // tokens per sample input; a sample holds seq+1 tokens
    std::vector<MappedFile> files;   // mapped token files: the .bin, the _ids.npy, or the shards
    std::vector<TokenPiece> pieces;  // the token stream, in order
    uint64_t num_tokens;             // T, tokens in the stream
    uint64_t num_samples;            // (T - 1) / seq
    std::vector<uint32_t> order;     // [num_samples] window read by each sample; empty = in order
};

// check_only (dataset_check): a file is opened as map_file opens it (a regular, readable file), never read.
static void dataset_check_file(const std::string& path) {
    struct stat st;
    close(open_input(path, nullptr, false, &st));
}

static void dataset_open_megatron(TokenDataset* d, const std::string& prefix, bool check_only) {
    std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
    if (!file_exists(idx_path)) die("Megatron data set %s: index file '%s' not found (the .bin needs its .idx beside it)", path_label(prefix).c_str(), idx_path.c_str());
    if (!file_exists(bin_path)) die("Megatron data set %s: data file '%s' not found (the .idx needs its .bin beside it)", path_label(prefix).c_str(), bin_path.c_str());
    if (check_only) { dataset_check_file(bin_path); dataset_check_file(idx_path); return; }
    d->format = "megatron";
    d->files.push_back(map_file(bin_path));
    MappedFile idx = map_file(idx_path);
    std::string err = megatron_parse_idx(idx.data, idx.size, d->files[0].data, d->files[0].size, 0, &d->pieces);
    unmap_file(&idx);
    if (!err.empty()) die("Megatron index %s (data '%s'): %s", path_label(idx_path).c_str(), bin_path.c_str(), err.c_str());
}

static void dataset_open_paddle(TokenDataset* d, const std::string& prefix, bool check_only) {
    std::string ids_path = prefix + "_ids.npy", idx_path = prefix + "_idx.npz";
    if (!file_exists(ids_path)) die("PaddleNLP data set %s: token file '%s' not found", path_label(prefix).c_str(), ids_path.c_str());
    if (!file_exists(idx_path)) die("PaddleNLP data set %s: index file '%s' not found (the _ids.npy needs its _idx.npz beside it)", path_label(prefix).c_str(), idx_path.c_str());
    if (check_only) { dataset_check_file(ids_path); dataset_check_file(idx_path); return; }
    d->format = "paddlenlp";
    d->files.push_back(map_file(ids_path));
    std::string err = paddle_parse_ids(d->files[0].data, d->files[0].size, 0, &d->pieces);
    if (!err.empty()) die("PaddleNLP token array %s: %s", path_label(ids_path).c_str(), err.c_str());
    uint64_t num_ids = d->pieces.empty() ? 0 : d->pieces[0].count;
    MappedFile idx = map_file(idx_path);
    err = paddle_parse_index(idx.data, idx.size, num_ids);
    unmap_file(&idx);
    if (!err.empty()) die("PaddleNLP index %s (tokens '%s'): %s", path_label(idx_path).c_str(), ids_path.c_str(), err.c_str());
}

static void dataset_open_llmc(TokenDataset* d, const std::string& pattern, bool check_only) {
    glob_t g;
    int rc = glob(pattern.c_str(), 0, nullptr, &g);  // sorted by name
    if (rc == GLOB_NOMATCH) die("%s: no llm.c shard matches it (check the path or glob)", path_label(pattern).c_str());
    if (rc != 0) die("cannot expand '%s' (glob error %d)", pattern.c_str(), rc);
    d->format = "llmc";
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (check_only) { dataset_check_file(g.gl_pathv[i]); continue; }
        d->files.push_back(map_file(g.gl_pathv[i]));
        const MappedFile& f = d->files.back();
        std::string err = llmc_parse_shard(f.data, f.size, (int)i, &d->pieces);
        if (!err.empty()) die("llm.c shard %s: %s", path_label(f.path).c_str(), err.c_str());
    }
    globfree(&g);
}

// Uniform in [0, n) from rng.h's sequential generator (state = splitmix64(state)); draws below
// 2^64 mod n are rejected so that every residue is equally likely.
static inline uint64_t random_below(uint64_t* state, uint64_t n) {
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        *state = splitmix64(*state);
        if (*state >= threshold) return *state % n;
    }
}

// Sample order: Fisher-Yates from the last position down, j = random_below(k + 1).
// The data loader may call it again (e.g. with seed + epoch) to reshuffle.
static void dataset_shuffle(TokenDataset* d, uint64_t seed) {
    if (d->num_samples > UINT32_MAX) die("%" PRIu64 " samples are too many to shuffle (the order holds uint32); use a longer sequence or split the data set", d->num_samples);
    d->order.resize(d->num_samples);
    for (uint64_t i = 0; i < d->num_samples; i++) d->order[i] = (uint32_t)i;
    uint64_t state = seed;
    for (uint64_t k = d->num_samples; k-- > 1;) std::swap(d->order[k], d->order[random_below(&state, k + 1)]);
}

// The format's files of `p` (the rules below): mapped and parsed, or with check_only only opened (dataset_check).
static void dataset_find(TokenDataset* d, const std::string& p, bool check_only) {
    if (p.find_first_of("*?[") != std::string::npos) dataset_open_llmc(d, p, check_only);
    else if (ends_with(p, ".bin") && file_exists(p.substr(0, p.size() - 4) + ".idx")) dataset_open_megatron(d, p.substr(0, p.size() - 4), check_only);
    else if (ends_with(p, ".idx")) dataset_open_megatron(d, p.substr(0, p.size() - 4), check_only);
    else if (ends_with(p, ".bin")) dataset_open_llmc(d, p, check_only);
    else if (ends_with(p, "_ids.npy") || ends_with(p, "_idx.npz")) dataset_open_paddle(d, p.substr(0, p.size() - 8), check_only);
    else if (file_exists(p + ".idx") || file_exists(p + ".bin")) dataset_open_megatron(d, p, check_only);
    else if (file_exists(p + "_ids.npy") || file_exists(p + "_idx.npz")) dataset_open_paddle(d, p, check_only);
    else {
        struct stat st;
        if (file_exists(p)) close(open_input(p, nullptr, true, &st));  // a directory, FIFO, dangling link: said so
        die("%s: cannot find a data set there: expected X.bin + X.idx (Megatron), X_ids.npy + X_idx.npz (PaddleNLP), "
             "or llm.c shards (a .bin file or a glob such as 'data/name_train_*.bin')", path_label(p).c_str());
    }
}

// Opens a data set, detecting the format from the path:
//   X.bin with X.idx beside it, X.idx, or the prefix X           Megatron
//   X_ids.npy, X_idx.npz, or the prefix X with X_ids.npy beside it PaddleNLP
//   a glob (* ? [) or a .bin with no .idx beside it                llm.c shards
static void dataset_open(TokenDataset* d, const char* path_or_glob, int seq, uint64_t seed, bool shuffle) {
    if (seq < 1) die("dataset_open: sequence length %d must be at least 1", seq);
    *d = TokenDataset();
    d->seq = seq;
    std::string p = path_or_glob;
    dataset_find(d, p, false);
    for (const MappedFile& m : d->files) check_unchanged(m);
    d->num_tokens = d->pieces.empty() ? 0 : d->pieces.back().start + d->pieces.back().count;
    if (d->num_tokens < (uint64_t)seq + 1)
        die("data set %s holds %" PRIu64 " tokens, fewer than one sample of seq+1 = %d tokens", path_label(p).c_str(), d->num_tokens, seq + 1);
    d->num_samples = (d->num_tokens - 1) / (uint64_t)seq;
    if (shuffle) dataset_shuffle(d, seed);
}

// dataset_open's checks of the paths alone, nothing read: the files the path names are there, each a regular, readable
// file; the same messages, naming the flag (a path flag the run may not open is checked with it, llmc/run/flags.h).
static void dataset_check(const std::string& path_or_glob) {
    TokenDataset d;
    dataset_find(&d, path_or_glob, true);
}

static size_t dataset_num_samples(const TokenDataset* d) { return (size_t)d->num_samples; }

// Dies naming the file and byte offset of a token that is negative or does not fit int32.
static inline int32_t dataset_check_token(const TokenDataset* d, const TokenPiece& p, uint64_t j, int64_t v) {
    if (v < 0 || v > INT32_MAX) {
        const MappedFile& f = d->files[p.file];
        uint64_t offset = (uint64_t)(p.data - f.data) + j * (uint64_t)token_type_bytes[p.type];
        die("%s: the %s token at byte offset %" PRIu64 " has value %" PRId64 ", outside [0, 2^31): corrupt file or wrong dtype",
            path_label(f.path).c_str(), token_type_names[p.type], offset, v);
    }
    return (int32_t)v;
}

// out[0 .. seq] = stream tokens [w*seq, w*seq + seq + 1) for window w = order[i] (or i).
static void dataset_sample(const TokenDataset* d, size_t i, int32_t* out) {
    if ((uint64_t)i >= d->num_samples) die("dataset_sample: sample %zu out of range (the data set has %" PRIu64 ")", i, d->num_samples);
    uint64_t w = d->order.empty() ? (uint64_t)i : d->order[i];
    uint64_t pos = w * (uint64_t)d->seq, need = (uint64_t)d->seq + 1;
    // The last piece starting at or before pos holds the first token.
    size_t k = (size_t)(std::upper_bound(d->pieces.begin(), d->pieces.end(), pos,
                                         [](uint64_t x, const TokenPiece& p) { return x < p.start; }) - d->pieces.begin()) - 1;
    while (need > 0) {
        const TokenPiece& p = d->pieces[k];
        uint64_t off = pos - p.start;
        uint64_t n = std::min(need, p.count - off);
        for (uint64_t j = 0; j < n; j++) *out++ = dataset_check_token(d, p, off + j, token_value(p.data, p.type, off + j));
        pos += n;
        need -= n;
        k++;
    }
}

// Largest token id in the whole stream (reads every token; dies on a negative one).
static uint32_t dataset_max_token(const TokenDataset* d) {
    int64_t best = 0;
    for (const TokenPiece& p : d->pieces) {
        for (uint64_t j = 0; j < p.count; j++) {
            int64_t v = token_value(p.data, p.type, j);
            dataset_check_token(d, p, j, v);
            best = std::max(best, v);
        }
    }
    return (uint32_t)best;
}

static void dataset_free(TokenDataset* d) {
    for (MappedFile& f : d->files) unmap_file(&f);
    *d = TokenDataset();
}
