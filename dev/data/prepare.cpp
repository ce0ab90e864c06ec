// dev/data/prepare.cpp: turns text into training tokens, written as llm.c shards or as a
// Megatron indexed data set (both described in docs/data_formats.md).
//
//   build/prepare --tokenizer gpt2 --format llmc --val-docs 100 --out data/mydata corpus.jsonl
//
// Inputs: plain text files (each file one document, or with --split-paragraphs each block of
// lines between blank lines), or JSON Lines files (.jsonl/.json: one object per line, the
// document is its "text" field, or the field --json-key names). Empty documents are skipped.
// The first documents (in input order) form the validation split, the rest the training split.
// Document boundaries: llm.c shards put the end-of-text token before each document (as llm.c's
// fineweb.py does); Megatron data sets append it after each document (Megatron's --append-eod).
// The byte-level tokenizer has no such token: its documents are simply concatenated (a
// Megatron index still records where each one ends).
#include <sys/stat.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "llmc/json.h"
#include "llmc/data/tokenizer.h"
#include "llmc/utils.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/prepare [options] INPUT...\n"
            "  INPUT                 text files, or JSON Lines files (.jsonl, .json) with one object per line\n"
            "  --out PREFIX          output prefix (required): PREFIX_train_000000.bin ... (llmc) or\n"
            "                        PREFIX_train.bin/.idx, PREFIX_val.bin/.idx (megatron)\n"
            "  --format F            llmc (default) or megatron\n"
            "  --tokenizer T         gpt2 (default), llama3, bytes, or the path of a tiktoken rank file\n"
            "  --json-key K          JSONL field that holds the document text (default: text)\n"
            "  --split-paragraphs    text files: a document is a block of lines ended by a blank line\n"
            "                        (default: a document is a whole file)\n"
            "  --val-docs N          the first N documents form the validation split (default 0)\n"
            "  --val-frac F          the first round(F x documents) form the validation split\n"
            "  --shard-size N        llmc: tokens per shard (default 100000000)\n"
            "  -h, --help            this text\n");
}

struct Options {
    std::vector<std::string> inputs;
    std::string out;
    std::string format = "llmc";
    std::string tokenizer = "gpt2";
    std::string json_key = "text";
    bool split_paragraphs = false;
    long long val_docs = -1;  // -1: not given
    double val_frac = -1.0;   // < 0: not given
    long long shard_size = 100000000;
};

static long long parse_int_flag(const char* flag, const char* v, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != 0 || x < lo || x > hi) die("%s '%s': expected an integer in [%lld, %lld]", flag, v, lo, hi);
    return x;
}

static Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") { usage(stdout); exit(0); }
        if (a == "--split-paragraphs") { o.split_paragraphs = true; continue; }
        if (a.size() > 1 && a[0] == '-') {
            if (i + 1 >= argc) die("flag %s needs a value (see --help)", a.c_str());
            const char* v = argv[++i];
            if (a == "--out") { o.out = v; note_path_flag("--out", v); }
            else if (a == "--format") o.format = v;
            else if (a == "--tokenizer") { o.tokenizer = v; note_path_flag("--tokenizer", v); }
            else if (a == "--json-key") o.json_key = v;
            else if (a == "--val-docs") o.val_docs = parse_int_flag("--val-docs", v, 0, (long long)1e18);
            else if (a == "--shard-size") o.shard_size = parse_int_flag("--shard-size", v, 1, INT32_MAX);
            else if (a == "--val-frac") {
                char* end = nullptr;
                o.val_frac = strtod(v, &end);
                if (end == v || *end != 0 || !(o.val_frac >= 0.0 && o.val_frac < 1.0)) die("--val-frac '%s': expected a number in [0, 1)", v);
            } else die("unknown flag '%s' (see --help)", a.c_str());
            continue;
        }
        o.inputs.push_back(a);
    }
    if (o.inputs.empty()) { usage(stderr); die("no input files given"); }
    if (o.out.empty()) die("--out PREFIX is required (see --help)");
    if (o.format != "llmc" && o.format != "megatron") die("--format '%s': expected llmc or megatron", o.format.c_str());
    if (o.val_docs >= 0 && o.val_frac >= 0.0) die("give either --val-docs or --val-frac, not both");
    return o;
}

// ----------------------------------------------------------------------------------------------
// Reading documents, with a progress line on stderr every few seconds.

struct Progress {
    bool enabled;
    uint64_t bytes_total, bytes_done, docs, tokens;
    std::chrono::steady_clock::time_point start, last;
};

static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

static void progress_tick(Progress* p, uint64_t bytes) {
    p->bytes_done += bytes;
    if (!p->enabled || seconds_since(p->last) < 2.0) return;
    p->last = std::chrono::steady_clock::now();
    double mb = p->bytes_done / 1e6, s = seconds_since(p->start);
    fprintf(stderr, "prepare: %.1f of %.1f MB (%.0f%%), %.2f MB/s, %llu documents, %llu tokens\n", mb, p->bytes_total / 1e6,
            100.0 * p->bytes_done / (p->bytes_total ? p->bytes_total : 1), mb / s, (unsigned long long)p->docs, (unsigned long long)p->tokens);
}

static bool is_jsonl(const std::string& path) {
    size_t dot = path.rfind('.');
    std::string ext = dot == std::string::npos ? "" : path.substr(dot);
    return ext == ".jsonl" || ext == ".json";
}

static bool is_blank(const char* s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return false;
    return true;
}

// Calls fn(text, len) for every non-empty document of the inputs, in input order.
template <typename F>
static void for_each_document(const Options& o, Progress* pr, F fn) {
    for (const std::string& path : o.inputs) {
        if (!is_jsonl(path) && !o.split_paragraphs) {
            std::vector<uint8_t> b = read_file_bytes(path, "input", true);
            if (!b.empty()) fn((const char*)b.data(), b.size());
            progress_tick(pr, b.size());
            continue;
        }
        FILE* f = fopen_check(path.c_str(), "rb");
        char* line = nullptr;
        size_t cap = 0;
        ssize_t n;
        unsigned long long lineno = 0;
        std::string para;  // --split-paragraphs: the lines of the current block, newlines included
        while ((n = getline(&line, &cap, f)) >= 0) {
            lineno++;
            if (is_jsonl(path)) {
                if (!is_blank(line, (size_t)n)) {
                    Json obj;
                    std::string err;
                    if (!json_parse(line, (size_t)n, &obj, &err)) die("%s:%llu: invalid JSON: %s", path.c_str(), lineno, err.c_str());
                    if (obj.kind != Json::OBJ) die("%s:%llu: expected a JSON object per line", path.c_str(), lineno);
                    const Json* text = obj.get(o.json_key);
                    if (!text) die("%s:%llu: the object has no \"%s\" field (choose the field with --json-key)", path.c_str(), lineno, o.json_key.c_str());
                    if (text->kind != Json::STR) die("%s:%llu: the \"%s\" field is not a string", path.c_str(), lineno, o.json_key.c_str());
                    if (!text->str.empty()) fn(text->str.data(), text->str.size());
                }
            } else if (is_blank(line, (size_t)n)) {
                if (!para.empty()) fn(para.data(), para.size() - (para.size() >= 2 && para[para.size() - 2] == '\r' ? 2 : 1));
                para.clear();
            } else {
                para.append(line, (size_t)n);
                if (line[n - 1] != '\n') para += '\n';  // last line without a newline
            }
            progress_tick(pr, (uint64_t)n);
        }
        if (ferror(f)) die("error reading '%s': %s", path.c_str(), strerror(errno));
        if (!para.empty()) fn(para.data(), para.size() - (para.size() >= 2 && para[para.size() - 2] == '\r' ? 2 : 1));
        free(line);
        fclose(f);
    }
}

// ----------------------------------------------------------------------------------------------
// Writing one split ("train" or "val").

struct Output {
    std::string prefix;            // PREFIX_train or PREFIX_val
    bool megatron;                 // else llm.c shards
    bool wide;                     // vocab >= 65536: uint32 (llm.c version 2) / int32 (Megatron code 4)
    long long shard_size;          // llm.c: tokens per shard
    uint64_t docs = 0, tokens = 0;
    std::vector<uint32_t> pending; // llm.c: tokens of the shard being filled
    int shard = 0;                 // llm.c: number of the next shard
    FILE* bin = nullptr;           // Megatron: the open .bin
    std::vector<int32_t> sizes;    // Megatron: tokens of every document
};

static void write_tokens(FILE* f, const uint32_t* t, size_t n, bool wide, const char* what) {
    if (wide) { fwrite_check(t, 4, n, f, what); return; }  // uint32 / int32: same bytes for ids < 2^31
    std::vector<uint16_t> v(t, t + n);
    fwrite_check(v.data(), 2, n, f, what);
}

static void write_shard(Output* w, size_t n) {
    char name[32];
    snprintf(name, sizeof(name), "_%06d.bin", w->shard++);
    std::string path = w->prefix + name;
    int32_t header[256] = {0};
    header[0] = 20240520;
    header[1] = w->wide ? 2 : 1;
    header[2] = (int32_t)n;
    FILE* f = fopen_check(path.c_str(), "wb");
    fwrite_check(header, 4, 256, f, path.c_str());
    write_tokens(f, w->pending.data(), n, w->wide, path.c_str());
    fclose_check(f, path.c_str());
    w->pending.erase(w->pending.begin(), w->pending.begin() + n);
    printf("wrote %s (%zu tokens)\n", path.c_str(), n);
}

static void output_document(Output* w, const std::vector<uint32_t>& t) {
    w->docs++;
    w->tokens += t.size();
    if (!w->megatron) {
        w->pending.insert(w->pending.end(), t.begin(), t.end());
        while (w->pending.size() >= (size_t)w->shard_size) write_shard(w, (size_t)w->shard_size);
        return;
    }
    if (t.size() > (size_t)INT32_MAX) die("a document of %zu tokens is too long for a Megatron index (int32 sizes)", t.size());
    if (!w->bin) w->bin = fopen_check((w->prefix + ".bin").c_str(), "wb");
    write_tokens(w->bin, t.data(), t.size(), w->wide, (w->prefix + ".bin").c_str());
    w->sizes.push_back((int32_t)t.size());
}

// Megatron .idx: "MMIDIDX\0\0", uint64 1, uint8 dtype code, uint64 N, uint64 N+1, int32 sizes[N],
// int64 pointers[N], int64 doc_idx[N+1] = 0, 1, ..., N (one sequence per document).
static void output_finish(Output* w) {
    if (!w->megatron) {
        if (!w->pending.empty()) write_shard(w, w->pending.size());
        return;
    }
    if (!w->bin) return;
    std::string bin_path = w->prefix + ".bin", idx_path = w->prefix + ".idx";
    fclose_check(w->bin, bin_path.c_str());
    uint64_t n = w->sizes.size(), d = n + 1, version = 1;
    uint8_t code = w->wide ? 4 : 8;
    std::vector<int64_t> pointers(n), doc_idx(d);
    int64_t offset = 0;
    for (uint64_t i = 0; i < n; i++) {
        pointers[i] = offset;
        offset += (int64_t)w->sizes[i] * (w->wide ? 4 : 2);
    }
    for (uint64_t i = 0; i < d; i++) doc_idx[i] = (int64_t)i;
    FILE* f = fopen_check(idx_path.c_str(), "wb");
    fwrite_check("MMIDIDX\0\0", 1, 9, f, idx_path.c_str());
    fwrite_check(&version, 8, 1, f, idx_path.c_str());
    fwrite_check(&code, 1, 1, f, idx_path.c_str());
    fwrite_check(&n, 8, 1, f, idx_path.c_str());
    fwrite_check(&d, 8, 1, f, idx_path.c_str());
    fwrite_check(w->sizes.data(), 4, n, f, idx_path.c_str());
    fwrite_check(pointers.data(), 8, n, f, idx_path.c_str());
    fwrite_check(doc_idx.data(), 8, d, f, idx_path.c_str());
    fclose_check(f, idx_path.c_str());
    printf("wrote %s and %s (%llu documents, %llu tokens)\n", bin_path.c_str(), idx_path.c_str(),
           (unsigned long long)n, (unsigned long long)w->tokens);
}

int main(int argc, char** argv) {
    Options o = parse_args(argc, argv);
    Progress pr = {};
    for (const std::string& path : o.inputs) {
        struct stat st;
        close(open_input(path, "input", false, &st));  // a regular file (an empty one holds no document)
        pr.bytes_total += (uint64_t)st.st_size;
    }
    check_output_parent(o.out, "--out");
    Tokenizer tok;
    int kind = tokenizer_load_auto(&tok, o.tokenizer.c_str());
    bool has_eot = kind != TOK_BYTES;
    uint32_t eot = has_eot ? tokenizer_eot(&tok) : 0;
    bool wide = tokenizer_vocab_size(&tok) >= 65536;

    uint64_t val_docs = o.val_docs > 0 ? (uint64_t)o.val_docs : 0;
    if (o.val_frac > 0.0) {
        uint64_t total = 0;
        for_each_document(o, &pr, [&](const char*, size_t) { total++; });
        val_docs = (uint64_t)llround(o.val_frac * (double)total);
        fprintf(stderr, "prepare: %llu documents; the first %llu form the validation split\n", (unsigned long long)total, (unsigned long long)val_docs);
        pr.bytes_done = 0;
    }

    bool megatron = o.format == "megatron";
    Output val, train;
    val.prefix = o.out + "_val";
    train.prefix = o.out + "_train";
    for (Output* w : {&val, &train}) {
        w->megatron = megatron;
        w->wide = wide;
        w->shard_size = o.shard_size;
    }
    pr.enabled = true;
    pr.start = pr.last = std::chrono::steady_clock::now();
    uint64_t doc_index = 0;
    for_each_document(o, &pr, [&](const char* text, size_t len) {
        std::vector<uint32_t> t = tokenizer_encode(&tok, text, len);
        if (has_eot && !megatron) t.insert(t.begin(), eot);  // llm.c: <|endoftext|> before each document
        if (has_eot && megatron) t.push_back(eot);           // Megatron: end-of-document token after it
        output_document(doc_index < val_docs ? &val : &train, t);
        doc_index++;
        pr.docs++;
        pr.tokens += t.size();
    });
    if (val_docs > 0 && val.docs < val_docs)
        die("--val-docs %llu: only %llu documents in the input, fewer than the %llu asked for validation (lower --val-docs)",
            (unsigned long long)val_docs, (unsigned long long)val.docs, (unsigned long long)val_docs);
    if (train.docs == 0) die("no documents left for the training split (%llu documents in all, %llu for validation)",
                             (unsigned long long)(val.docs + train.docs), (unsigned long long)val_docs);
    output_finish(&val);
    output_finish(&train);
    double s = seconds_since(pr.start);
    fprintf(stderr, "prepare: %.1f MB in %.1f s (%.2f MB/s): %llu documents (%llu validation), %llu tokens (%llu validation), tokenizer %s, vocab %u\n",
            pr.bytes_done / 1e6, s, pr.bytes_done / 1e6 / (s > 0 ? s : 1), (unsigned long long)pr.docs, (unsigned long long)val.docs,
            (unsigned long long)pr.tokens, (unsigned long long)val.tokens, o.tokenizer.c_str(), tokenizer_vocab_size(&tok));
    return 0;
}
