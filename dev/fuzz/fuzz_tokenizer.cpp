// dev/fuzz/fuzz_tokenizer.cpp: libFuzzer target for llmc/data/tokenizer.h. For arbitrary bytes, with
// the GPT-2, Llama 3 and byte-level tokenizers:
//   - encode and encode_with_special never crash and give ids inside the vocabulary;
//   - decode(encode(x)) == x, with and without special tokens;
//   - the pre-tokenizer's pieces are non-empty and cover the input, and each piece's tokens equal
//     a plain tiktoken merge loop (quadratic: lowest rank first, leftmost on ties), the oracle
//     for the heap-based merge in tok_bpe.
// Run from the repo root (it loads data/tokenizers/*.tiktoken); commands in docs/tokenizer.md.
#include <cstdio>

#include "llmc/data/tokenizer.h"

static Tokenizer gpt2_tok, llama3_tok, bytes_tok;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    tokenizer_load_auto(&gpt2_tok, "gpt2");
    tokenizer_load_auto(&llama3_tok, "llama3");
    tokenizer_load_auto(&bytes_tok, "bytes");
    return 0;
}

static void require(bool ok, const char* what, const Tokenizer* t) {
    if (ok) return;
    fprintf(stderr, "fuzz_tokenizer: %s failed (tokenizer kind %d)\n", what, (int)t->kind);
    abort();
}

// tiktoken's merge loop: parts start as single bytes; merge the adjacent pair whose bytes have the
// lowest rank (leftmost on ties) until no pair is a token.
static std::vector<uint32_t> plain_bpe(const Tokenizer* t, const uint8_t* p, size_t m) {
    uint32_t whole = tok_lookup(t, p, m);
    if (whole != TOK_NONE) return {whole};
    std::vector<size_t> starts;  // part i is p[starts[i], starts[i + 1])
    for (size_t i = 0; i <= m; i++) starts.push_back(i);
    while (true) {
        uint32_t best = TOK_NONE;
        size_t best_i = 0;
        for (size_t i = 0; i + 2 < starts.size(); i++) {
            uint32_t r = tok_lookup(t, p + starts[i], starts[i + 2] - starts[i]);
            if (r < best) { best = r; best_i = i; }
        }
        if (best == TOK_NONE) break;
        starts.erase(starts.begin() + best_i + 1);
    }
    std::vector<uint32_t> out;
    for (size_t i = 0; i + 1 < starts.size(); i++) out.push_back(tok_lookup(t, p + starts[i], starts[i + 1] - starts[i]));
    return out;
}

static void check_tokenizer(const Tokenizer* t, const uint8_t* data, size_t size) {
    const char* text = (const char*)data;
    std::string input(text, size);
    for (int special = 0; special < 2; special++) {
        std::vector<uint32_t> ids = special ? tokenizer_encode_with_special(t, text, size) : tokenizer_encode(t, text, size);
        for (uint32_t id : ids) require(id < tokenizer_vocab_size(t), "ids inside the vocabulary", t);
        require(tokenizer_decode(t, ids.data(), ids.size()) == input, "decode(encode(x)) == x", t);
    }
    if (t->kind == TOK_BYTES) return;
    std::vector<uint32_t> ids = tokenizer_encode(t, text, size), pieces;
    for (size_t i = 0; i < size;) {
        size_t j = t->kind == TOK_GPT2 ? tok_pretoken_gpt2(data, size, i) : tok_pretoken_llama3(data, size, i);
        require(j > i && j <= size, "pieces are non-empty and inside the input", t);
        std::vector<uint32_t> piece = plain_bpe(t, data + i, j - i);
        pieces.insert(pieces.end(), piece.begin(), piece.end());
        i = j;
    }
    require(pieces == ids, "heap merge == plain merge loop", t);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_tokenizer(&gpt2_tok, data, size);
    check_tokenizer(&llama3_tok, data, size);
    check_tokenizer(&bytes_tok, data, size);
    return 0;
}
