// llmc/data/tokenizer.h: byte-pair-encoding (BPE) tokenizers: GPT-2's r50k_base (the GPT-3 family)
// and Llama 3's, read from tiktoken rank files, plus a byte-level fallback with no files at all.
//
//   Tokenizer tok;
//   tokenizer_load_auto(&tok, "gpt2");              // or "llama3", "bytes", or a rank file path
//   std::vector<uint32_t> ids = tokenizer_encode(&tok, text, len);
//   std::string back = tokenizer_decode(&tok, ids.data(), ids.size());   // == text
//
// Encoding is the tiktoken algorithm in two steps:
//  1. pre-tokenization splits the text into pieces with the encoding's regular expression, written
//     out here as a hand-coded scanner over UTF-8 (tok_pretoken_gpt2, tok_pretoken_llama3);
//  2. each piece is a single token when its bytes are one, else its bytes are merged pairwise,
//     always the adjacent pair whose merged bytes have the lowest rank (leftmost on ties),
//     until no adjacent pair forms a token (tok_bpe).
// Decoding concatenates the tokens' bytes.
//
// Character classes (\p{L}, \p{N}, \s) come from llmc/data/unicode_tables.h, generated from node's
// regex engine, so pre-tokenization equals the JavaScript references (js-tiktoken,
// llama3-tokenizer-js) that tests/t_tokenizer.sh compares against.
//
// Bytes that are not valid UTF-8 (stray continuation bytes, overlong forms, surrogates, code
// points above U+10FFFF, truncated sequences) are taken one byte at a time, each in the class of
// U+FFFD (neither letter, number nor whitespace), which is what the references see after their
// UTF-8 decoder replaced them. They are kept as bytes, so decode(encode(x)) == x for any bytes.
//
// The encode and decode functions only read the Tokenizer: several threads may share one.
// Details, the rank file format and the tests: docs/tokenizer.md.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/data/unicode_tables.h"
#include "llmc/utils.h"

// Pre-tokenization rules.
enum TokenizerKind {
    TOK_BYTES,   // no pre-tokenization, no merges: one token per byte
    TOK_GPT2,    // r50k_base: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    TOK_LLAMA3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                 //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
};

static const uint32_t TOK_NONE = 0xFFFFFFFFu;  // "no token" (empty hash entry, no merge, no eot)

struct Tokenizer {
    TokenizerKind kind;
    uint32_t n_ranks;              // ordinary tokens: ids 0..n_ranks-1, the id is the merge rank
    uint32_t vocab_size;           // n_ranks + special tokens (ids n_ranks..vocab_size-1)
    uint32_t eot;                  // end-of-text id, TOK_NONE for TOK_BYTES
    uint32_t bos;                  // begin-of-text id (Llama 3), eot for GPT-2, TOK_NONE for bytes
    std::vector<uint8_t> bytes;    // every token's bytes (special tokens: their text), concatenated
    std::vector<uint32_t> offset;  // (vocab_size + 1,) token i is bytes[offset[i], offset[i + 1])
    std::vector<uint32_t> id_hash; // open-addressing hash table of ordinary ids keyed by their
                                   // bytes; power-of-two size, TOK_NONE marks an empty entry
    uint32_t byte_id[256];         // id of each single byte
};

// ----------------------------------------------------------------------------------------------
// Token lookup by bytes

static inline uint64_t tok_hash(const uint8_t* p, size_t n) {
    uint64_t h = 14695981039346656037ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static inline const uint8_t* tok_bytes(const Tokenizer* t, uint32_t id) { return t->bytes.data() + t->offset[id]; }
static inline uint32_t tok_len(const Tokenizer* t, uint32_t id) { return t->offset[id + 1] - t->offset[id]; }

// The ordinary token whose bytes are p[0..n), or TOK_NONE.
static inline uint32_t tok_lookup(const Tokenizer* t, const uint8_t* p, size_t n) {
    size_t mask = t->id_hash.size() - 1;
    for (size_t k = tok_hash(p, n) & mask;; k = (k + 1) & mask) {
        uint32_t id = t->id_hash[k];
        if (id == TOK_NONE) return TOK_NONE;
        if (tok_len(t, id) == n && memcmp(tok_bytes(t, id), p, n) == 0) return id;
    }
}

// Appends a token (its bytes) to the tables; ordinary tokens also go into the hash table.
// Returns false when an ordinary token with the same bytes exists already.
static bool tok_append(Tokenizer* t, const uint8_t* p, size_t n, bool ordinary) {
    if (ordinary) {
        if (tok_lookup(t, p, n) != TOK_NONE) return false;
        size_t mask = t->id_hash.size() - 1;
        size_t k = tok_hash(p, n) & mask;
        while (t->id_hash[k] != TOK_NONE) k = (k + 1) & mask;
        t->id_hash[k] = t->vocab_size;
        if (n == 1) t->byte_id[p[0]] = t->vocab_size;
    }
    t->bytes.insert(t->bytes.end(), p, p + n);
    t->offset.push_back((uint32_t)t->bytes.size());
    t->vocab_size++;
    return true;
}

// Empties t and sizes its hash table for n_expected ordinary tokens (load factor <= 1/2).
static void tok_reset(Tokenizer* t, TokenizerKind kind, size_t n_expected) {
    size_t n_entries = 1024;
    while (n_entries < 2 * n_expected) n_entries *= 2;
    t->kind = kind;
    t->n_ranks = 0;
    t->vocab_size = 0;
    t->eot = TOK_NONE;
    t->bos = TOK_NONE;
    t->bytes.clear();
    t->offset.assign(1, 0);
    t->id_hash.assign(n_entries, TOK_NONE);
    for (int b = 0; b < 256; b++) t->byte_id[b] = TOK_NONE;
}

// ----------------------------------------------------------------------------------------------
// Character classes and UTF-8

enum { CP_LETTER, CP_NUMBER, CP_SPACE, CP_OTHER };  // \p{L}, \p{N}, \s, anything else

static inline bool tok_in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
    size_t lo = 0, hi = n;  // binary search for the last range starting at or before cp
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid][0] <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && cp <= r[lo - 1][1];
}

#define TOK_RANGES(table) table, sizeof(table) / sizeof(table[0])
static inline int tok_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CP_LETTER;
        if (cp >= '0' && cp <= '9') return CP_NUMBER;
        if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return CP_SPACE;
        return CP_OTHER;
    }
    if (tok_in_ranges(cp, TOK_RANGES(unicode_letter_ranges))) return CP_LETTER;
    if (tok_in_ranges(cp, TOK_RANGES(unicode_number_ranges))) return CP_NUMBER;
    if (tok_in_ranges(cp, TOK_RANGES(unicode_space_ranges))) return CP_SPACE;
    return CP_OTHER;
}
#undef TOK_RANGES

// One character of the text: code point (TOK_NONE for an invalid byte), class, and the byte
// offset just after it.
struct TokChar {
    uint32_t cp;
    int cls;
    size_t end;
};

// Decodes the character starting at s[i], i < n. A byte that does not begin a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) is a character
// of its own with class CP_OTHER, like U+FFFD.
static inline TokChar tok_char_at(const uint8_t* s, size_t n, size_t i) {
    uint8_t b = s[i];
    if (b < 0x80) return {b, tok_class(b), i + 1};
    const TokChar invalid = {TOK_NONE, CP_OTHER, i + 1};
    size_t len;
    uint32_t cp;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) { len = 2; cp = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; cp = b & 0x0F; lo = b == 0xE0 ? 0xA0 : 0x80; hi = b == 0xED ? 0x9F : 0xBF; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; cp = b & 0x07; lo = b == 0xF0 ? 0x90 : 0x80; hi = b == 0xF4 ? 0x8F : 0xBF; }
    else return invalid;
    if (n - i < len) return invalid;
    for (size_t k = 1; k < len; k++) {
        uint8_t c = s[i + k];
        if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return invalid;
        cp = (cp << 6) | (c & 0x3F);
    }
    return {cp, tok_class(cp), i + len};
}

// End of the run of characters of class cls starting at byte i.
static inline size_t tok_run_end(const uint8_t* s, size_t n, size_t i, int cls) {
    while (i < n) {
        TokChar c = tok_char_at(s, n, i);
        if (c.cls != cls) break;
        i = c.end;
    }
    return i;
}

// ----------------------------------------------------------------------------------------------
// Pre-tokenization: each scanner returns the end of the piece that starts at byte i (< n). It
// tries the regex's alternatives in order, as a backtracking regex engine does, and every
// character starts some alternative, so the pieces cover the text.

// "'s|'t|'re|'ve|'m|'ll|'d" at s[i] == '\'' (optionally ignoring ASCII case): its length or 0.
static inline size_t tok_contraction(const uint8_t* s, size_t n, size_t i, bool any_case) {
    int a = i + 1 < n ? s[i + 1] : 0, b = i + 2 < n ? s[i + 2] : 0;
    if (any_case) {
        if (a >= 'A' && a <= 'Z') a += 'a' - 'A';
        if (b >= 'A' && b <= 'Z') b += 'a' - 'A';
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

// A whitespace run starting at i: where it ends, where its last character starts, and the end of
// its last '\r' or '\n' (0 if none).
struct TokSpaceRun {
    size_t end, last_start, newline_end;
};
static inline TokSpaceRun tok_space_run(const uint8_t* s, size_t n, size_t i) {
    TokSpaceRun r = {i, i, 0};
    while (r.end < n) {
        TokChar c = tok_char_at(s, n, r.end);
        if (c.cls != CP_SPACE) break;
        r.last_start = r.end;
        r.end = c.end;
        if (c.cp == '\r' || c.cp == '\n') r.newline_end = c.end;
    }
    return r;
}

// "\s+(?!\S)|\s+" for the run r starting at i: the whole run when it ends the text; otherwise the
// run without its last character (which then leads the next piece, as in " word"), unless the run
// is that one character.
static inline size_t tok_space_end(const TokSpaceRun& r, size_t i, size_t n) {
    if (r.end == n || r.last_start == i) return r.end;
    return r.last_start;
}

// GPT-2 (r50k_base): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static inline size_t tok_pretoken_gpt2(const uint8_t* s, size_t n, size_t i) {
    if (s[i] == '\'') {
        size_t k = tok_contraction(s, n, i, false);
        if (k) return i + k;
    }
    TokChar c = tok_char_at(s, n, i);
    if (c.cp == ' ' && c.end < n) {  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" with the space
        TokChar d = tok_char_at(s, n, c.end);
        if (d.cls != CP_SPACE) return tok_run_end(s, n, d.end, d.cls);
    }
    if (c.cls != CP_SPACE) return tok_run_end(s, n, c.end, c.cls);  // the same without it
    return tok_space_end(tok_space_run(s, n, i), i, n);
}

// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
static inline size_t tok_pretoken_llama3(const uint8_t* s, size_t n, size_t i) {
    if (s[i] == '\'') {
        size_t k = tok_contraction(s, n, i, true);
        if (k) return i + k;
    }
    TokChar c = tok_char_at(s, n, i);
    if (c.cls == CP_LETTER) return tok_run_end(s, n, c.end, CP_LETTER);
    if (c.cls == CP_NUMBER) {  // \p{N}{1,3}
        size_t end = c.end;
        for (int k = 1; k < 3 && end < n; k++) {
            TokChar d = tok_char_at(s, n, end);
            if (d.cls != CP_NUMBER) break;
            end = d.end;
        }
        return end;
    }
    // the next character; at the end of the text a stand-in that is neither letter nor other
    TokChar d = c.end < n ? tok_char_at(s, n, c.end) : TokChar{TOK_NONE, CP_SPACE, n};
    // [^\r\n\p{L}\p{N}]?\p{L}+: one character other than CR, LF, letters and numbers may lead
    // a run of letters
    if (c.cp != '\r' && c.cp != '\n' && d.cls == CP_LETTER) return tok_run_end(s, n, d.end, CP_LETTER);
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    size_t other_end = 0;
    if (c.cls == CP_OTHER) other_end = tok_run_end(s, n, c.end, CP_OTHER);
    else if (c.cp == ' ' && d.cls == CP_OTHER) other_end = tok_run_end(s, n, d.end, CP_OTHER);
    if (other_end) {
        while (other_end < n && (s[other_end] == '\r' || s[other_end] == '\n')) other_end++;
        return other_end;
    }
    // whitespace: "\s*[\r\n]+" takes the run up to its last CR or LF, else "\s+(?!\S)|\s+"
    TokSpaceRun r = tok_space_run(s, n, i);
    if (r.newline_end) return r.newline_end;
    return tok_space_end(r, i, n);
}

// ----------------------------------------------------------------------------------------------
// Byte-pair merging of one piece

struct TokMerge {
    uint32_t rank, left, right;  // merged token, and the byte range [left, right) it covers
};
static inline bool tok_merge_after(const TokMerge& a, const TokMerge& b) {  // heap order: min first
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
}

// Buffers reused across the pieces of one encode call.
struct TokScratch {
    std::vector<uint32_t> end;   // (piece length,) end of the part starting at byte i, 0 inside a part
    std::vector<uint32_t> prev;  // (piece length,) start of the part before the one starting at i
    std::vector<uint32_t> id;    // (piece length,) token of the part starting at i
    std::vector<TokMerge> heap;  // candidate merges of adjacent parts, lowest rank (then leftmost) on top
};

static inline void tok_push_merge(const Tokenizer* t, const uint8_t* p, uint32_t left, uint32_t right, TokScratch* sc) {
    uint32_t rank = tok_lookup(t, p + left, right - left);
    if (rank == TOK_NONE) return;
    sc->heap.push_back({rank, left, right});
    std::push_heap(sc->heap.begin(), sc->heap.end(), tok_merge_after);
}

// Appends the tokens of piece p[0..m) (m >= 2, not itself a token). The parts start as single
// bytes; the lowest-rank merge of two adjacent parts is applied until none is left. Heap entries
// whose parts have changed since they were pushed are skipped. O(m log m).
static void tok_bpe(const Tokenizer* t, const uint8_t* p, uint32_t m, TokScratch* sc, std::vector<uint32_t>* out) {
    sc->end.resize(m);
    sc->prev.resize(m);
    sc->id.resize(m);
    sc->heap.clear();
    for (uint32_t i = 0; i < m; i++) {
        sc->end[i] = i + 1;
        sc->prev[i] = i - 1;  // unused for i == 0
        sc->id[i] = t->byte_id[p[i]];
    }
    for (uint32_t i = 0; i + 1 < m; i++) tok_push_merge(t, p, i, i + 2, sc);
    while (!sc->heap.empty()) {
        std::pop_heap(sc->heap.begin(), sc->heap.end(), tok_merge_after);
        TokMerge mg = sc->heap.back();
        sc->heap.pop_back();
        uint32_t mid = sc->end[mg.left];
        if (mid == 0 || mid >= m || sc->end[mid] != mg.right) continue;  // stale
        sc->end[mid] = 0;
        sc->end[mg.left] = mg.right;
        sc->id[mg.left] = mg.rank;
        if (mg.right < m) sc->prev[mg.right] = mg.left;
        if (mg.left > 0) tok_push_merge(t, p, sc->prev[mg.left], mg.right, sc);
        if (mg.right < m) tok_push_merge(t, p, mg.left, sc->end[mg.right], sc);
    }
    for (uint32_t i = 0; i < m; i = sc->end[i]) out->push_back(sc->id[i]);
}

// Appends the tokens of text[0..n), special token names taken as ordinary text.
static void tok_encode_ordinary(const Tokenizer* t, const uint8_t* s, size_t n, TokScratch* sc, std::vector<uint32_t>* out) {
    if (t->kind == TOK_BYTES) {
        for (size_t i = 0; i < n; i++) out->push_back(s[i]);
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t j = t->kind == TOK_GPT2 ? tok_pretoken_gpt2(s, n, i) : tok_pretoken_llama3(s, n, i);
        size_t m = j - i;
        uint32_t whole = m == 1 ? t->byte_id[s[i]] : tok_lookup(t, s + i, m);
        if (whole != TOK_NONE) out->push_back(whole);
        else if (m > 0xFFFFFFFFu) die("tokenizer: a single pre-token of %zu bytes is too long to merge", m);
        else tok_bpe(t, s + i, (uint32_t)m, sc, out);
        i = j;
    }
}

// ----------------------------------------------------------------------------------------------
// Public API

// Byte-level tokenizer: vocabulary 256, token = byte value, no special tokens, no end-of-text.
static void tokenizer_init_bytes(Tokenizer* t) {
    tok_reset(t, TOK_BYTES, 256);
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        tok_append(t, &byte, 1, true);
    }
    t->n_ranks = 256;
}

// Decodes standard base64 (A-Z a-z 0-9 + /, '=' padding, length a multiple of 4) to out.
static bool tok_base64_decode(const uint8_t* s, size_t n, std::vector<uint8_t>* out) {
    out->clear();
    if (n == 0 || n % 4 != 0) return false;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            uint8_t c = s[i + k];
            int d;
            if (c >= 'A' && c <= 'Z') d = c - 'A';
            else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
            else if (c >= '0' && c <= '9') d = c - '0' + 52;
            else if (c == '+') d = 62;
            else if (c == '/') d = 63;
            else if (c == '=' && i + 4 == n && k >= 2) { d = 0; pad++; }
            else return false;
            if (pad && c != '=') return false;  // data after padding
            v = (v << 6) | (uint32_t)d;
        }
        out->push_back((uint8_t)(v >> 16));
        if (pad < 2) out->push_back((uint8_t)(v >> 8));
        if (pad < 1) out->push_back((uint8_t)v);
    }
    return true;
}

// Reads the ordinary tokens of a tiktoken rank file: one line per token, "<base64 bytes> <rank>",
// ranks 0, 1, 2, ... in order. Dies with the file name and line on anything else.
static void tok_read_ranks(Tokenizer* t, const char* path, TokenizerKind kind) {
    std::vector<uint8_t> file = read_file_bytes(path);
    size_t n_lines = (size_t)std::count(file.begin(), file.end(), (uint8_t)'\n');
    tok_reset(t, kind, n_lines + 1);
    const char* hint = "expected a tiktoken rank file (lines \"<base64 token bytes> <rank>\"); "
                       "bash dev/data/fetch_tokenizers.sh writes the GPT-2 and Llama 3 ones";
    std::vector<uint8_t> token;
    size_t pos = 0, line = 1;
    while (pos < file.size()) {
        size_t eol = pos;
        while (eol < file.size() && file[eol] != '\n') eol++;
        size_t sp = pos;
        while (sp < eol && file[sp] != ' ') sp++;
        if (sp == eol) die("tokenizer: %s line %zu: no space between token and rank; %s", path_label(path).c_str(), line, hint);
        if (!tok_base64_decode(&file[pos], sp - pos, &token))
            die("tokenizer: %s line %zu: token is not valid base64; %s", path_label(path).c_str(), line, hint);
        uint64_t rank = 0;
        if (sp + 1 == eol) die("tokenizer: %s line %zu: missing rank; %s", path_label(path).c_str(), line, hint);
        for (size_t k = sp + 1; k < eol; k++) {
            if (file[k] < '0' || file[k] > '9' || rank > 0xFFFFFFFFull)
                die("tokenizer: %s line %zu: rank is not a number; %s", path_label(path).c_str(), line, hint);
            rank = rank * 10 + (file[k] - '0');
        }
        if (rank != t->vocab_size)
            die("tokenizer: %s line %zu: rank %llu, expected %u (ranks must be 0, 1, 2, ... in order); %s",
                path_label(path).c_str(), line, (unsigned long long)rank, t->vocab_size, hint);
        if (!tok_append(t, token.data(), token.size(), true))
            die("tokenizer: %s line %zu: token repeats an earlier one; %s", path_label(path).c_str(), line, hint);
        pos = eol + 1;
        line++;
    }
    if (t->vocab_size == 0) die("tokenizer: %s is empty; %s", path_label(path).c_str(), hint);
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] == TOK_NONE)
            die("tokenizer: %s has no token for the single byte 0x%02x (byte-level BPE needs all 256); %s", path_label(path).c_str(), b, hint);
    t->n_ranks = t->vocab_size;
}

// Appends the special tokens of the kind after the ranks and sets eot and bos.
static void tok_add_specials(Tokenizer* t) {
    if (t->kind == TOK_GPT2) {
        const char* eot = "<|endoftext|>";
        t->eot = t->bos = t->vocab_size;
        tok_append(t, (const uint8_t*)eot, strlen(eot), false);
        return;
    }
    // Llama 3.1's names (Llama 3 called the 3.1 additions reserved tokens); 256 in all
    const char* named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                           "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                           "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                           "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
    t->bos = t->vocab_size;
    t->eot = t->vocab_size + 1;
    for (const char* name : named) tok_append(t, (const uint8_t*)name, strlen(name), false);
    for (int i = 3; i <= 247; i++) {
        std::string name = "<|reserved_special_token_" + std::to_string(i) + "|>";
        tok_append(t, (const uint8_t*)name.data(), name.size(), false);
    }
}

// Loads a tiktoken rank file and appends the special tokens of the kind (GPT-2: <|endoftext|>;
// Llama 3: <|begin_of_text|>, <|end_of_text|>, ... 256 in all). Dies with the file name on bad input.
static void tokenizer_load(Tokenizer* t, const char* rank_file, TokenizerKind kind) {
    if (kind != TOK_GPT2 && kind != TOK_LLAMA3)
        die("tokenizer_load('%s'): kind must be TOK_GPT2 or TOK_LLAMA3 (tokenizer_init_bytes needs no file)", rank_file);
    tok_read_ranks(t, rank_file, kind);
    tok_add_specials(t);
}

// Whether a tokenizer's name is one of the names below (bytes, gpt2, llama3) rather than the path of a rank file.
static bool tokenizer_is_name(const std::string& name) {
    return name == "bytes" || name == "gpt2" || name == "llama3";
}

// The rank file of a tokenizer: "gpt2" data/tokenizers/r50k_base.tiktoken, "llama3" data/tokenizers/llama3.tiktoken,
// any other name but "bytes" (which has none: "") the path itself. Dies when it is not there.
static std::string tokenizer_file(const std::string& name) {
    if (name == "bytes") return "";
    std::string path = name;
    if (name == "gpt2") path = "data/tokenizers/r50k_base.tiktoken";
    if (name == "llama3") path = "data/tokenizers/llama3.tiktoken";
    if (!file_exists(path)) {
        if (name == "gpt2" || name == "llama3")
            die("tokenizer %s: '%s' not found; run 'bash dev/data/fetch_tokenizers.sh' from the repo root", path_label(name).c_str(), path.c_str());
        die("tokenizer %s: no such file; expected bytes, gpt2, llama3 or the path of a tiktoken rank file", path_label(name).c_str());
    }
    return path;
}

// tokenizer_load_auto's checks of the rank file alone, nothing read: there, regular, readable, not empty; the same
// messages, naming the flag (a --tokenizer the run may not open is checked with it, llmc/run/flags.h).
static void tokenizer_check(const std::string& name) {
    const std::string path = tokenizer_file(name);
    struct stat st;
    if (!path.empty()) close(open_input(path, nullptr, true, &st));
}

// Loads "bytes", "gpt2", "llama3" (tokenizer_file), or a rank file path whose kind follows from its number of
// ranks (50256: GPT-2, 128000: Llama 3). Paths are relative to the working directory (the repo
// root). Returns the kind (a TokenizerKind).
static int tokenizer_load_auto(Tokenizer* t, const char* name_or_path) {
    std::string name = name_or_path;
    if (name == "bytes") {
        tokenizer_init_bytes(t);
        return TOK_BYTES;
    }
    const std::string path = tokenizer_file(name);
    tok_read_ranks(t, path.c_str(), TOK_GPT2);
    if (t->n_ranks == 50256) t->kind = TOK_GPT2;
    else if (t->n_ranks == 128000) t->kind = TOK_LLAMA3;
    else die("tokenizer %s: %u ranks, so its pre-tokenization rules are unknown (50256 is GPT-2's r50k_base, "
             "128000 is Llama 3's); call tokenizer_load with an explicit kind", path_label(path).c_str(), t->n_ranks);
    tok_add_specials(t);
    return t->kind;
}

// Tokens of text[0..len). Special token names are ordinary text here ("<|endoftext|>" becomes
// several tokens), as suits untrusted documents.
static std::vector<uint32_t> tokenizer_encode(const Tokenizer* t, const char* text, size_t len) {
    std::vector<uint32_t> out;
    out.reserve(len / 3 + 16);
    TokScratch sc;
    tok_encode_ordinary(t, (const uint8_t*)text, len, &sc, &out);
    return out;
}

// Tokens of text[0..len), where a special token name ("<|endoftext|>", "<|eot_id|>", ...) becomes
// its id. The text between special tokens is encoded as by tokenizer_encode.
static std::vector<uint32_t> tokenizer_encode_with_special(const Tokenizer* t, const char* text, size_t len) {
    std::vector<uint32_t> out;
    out.reserve(len / 3 + 16);
    TokScratch sc;
    const uint8_t* s = (const uint8_t*)text;
    size_t max_len = 0;  // longest special token name
    for (uint32_t id = t->n_ranks; id < t->vocab_size; id++) max_len = std::max(max_len, (size_t)tok_len(t, id));
    size_t start = 0;    // start of the ordinary text not yet encoded
    for (size_t i = 0; max_len > 0 && i + 1 < len; i++) {
        if (s[i] != '<' || s[i + 1] != '|') continue;
        // every special name is "<|...|>" with no other "|>" inside: the first "|>" ends the candidate
        size_t j = i + 2;
        while (j + 1 < len && j + 2 - i <= max_len && !(s[j] == '|' && s[j + 1] == '>')) j++;
        if (j + 1 >= len || j + 2 - i > max_len) continue;
        size_t n = j + 2 - i;
        for (uint32_t id = t->n_ranks; id < t->vocab_size; id++) {
            if (tok_len(t, id) != n || memcmp(tok_bytes(t, id), s + i, n) != 0) continue;
            tok_encode_ordinary(t, s + start, i - start, &sc, &out);
            out.push_back(id);
            start = i + n;
            i = start - 1;
            break;
        }
    }
    tok_encode_ordinary(t, s + start, len - start, &sc, &out);
    return out;
}

// The bytes of the tokens, concatenated (special tokens give their names). An id outside the
// vocabulary gives U+FFFD (the UTF-8 bytes EF BF BD) in its place.
static std::string tokenizer_decode(const Tokenizer* t, const uint32_t* ids, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < t->vocab_size) out.append((const char*)tok_bytes(t, ids[i]), tok_len(t, ids[i]));
        else out.append("\xEF\xBF\xBD");
    }
    return out;
}

// End-of-text token: GPT-2 50256 <|endoftext|>, Llama 3 128001 <|end_of_text|>.
static uint32_t tokenizer_eot(const Tokenizer* t) {
    if (t->eot == TOK_NONE)
        die("tokenizer: the byte-level tokenizer has no end-of-text token (its 256 ids are the bytes); "
            "use a BPE tokenizer (gpt2 or llama3) for data with document boundaries");
    return t->eot;
}

// Begin-of-text token: Llama 3 128000 <|begin_of_text|>; GPT-2 uses <|endoftext|> (50256).
static uint32_t tokenizer_bos(const Tokenizer* t) {
    if (t->bos == TOK_NONE)
        die("tokenizer: the byte-level tokenizer has no begin-of-text token (its 256 ids are the bytes); "
            "use a BPE tokenizer (gpt2 or llama3)");
    return t->bos;
}

// Number of token ids, special tokens included: 50257 (GPT-2), 128256 (Llama 3), 256 (bytes).
static uint32_t tokenizer_vocab_size(const Tokenizer* t) { return t->vocab_size; }
