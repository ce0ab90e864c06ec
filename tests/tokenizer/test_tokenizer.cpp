// tests/tokenizer/test_tokenizer.cpp: checks llmc/data/tokenizer.h; run by tests/t_tokenizer.sh.
//   test_tokenizer selftest                          hand-derived values, round trips of random bytes
//   test_tokenizer compare TOK TEXT REF NAME [special]
//                                                    encode TEXT, compare with the reference tokens in
//                                                    REF (uint32 little-endian, from reference.cjs),
//                                                    and check decode(encode(TEXT)) == TEXT
//   test_tokenizer encode TOK TEXT OUT [special]     write our tokens of TEXT to OUT (uint32)
//   test_tokenizer utf8 CASES                        the first character of each byte sequence in CASES
//                                                    (from utf8_cases.py: Python's strict decoder) as
//                                                    tok_char_at decodes it
//   test_tokenizer bench TOK TEXT [reps]             encode speed in MB/s (median of reps)
//   test_tokenizer info TOK                          print kind, vocabulary size and end-of-text id
// TOK is anything tokenizer_load_auto takes: bytes, gpt2, llama3 or a rank file path.
// Prints one "[PASS] name" or "[FAIL] name: detail" line per check; exits 1 if any failed.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llmc/data/tokenizer.h"

static int failures = 0;

static void check(bool ok, const std::string& name, const std::string& detail) {
    if (ok) printf("[PASS] %s: %s\n", name.c_str(), detail.c_str());
    else printf("[FAIL] %s: %s\n", name.c_str(), detail.c_str());
    if (!ok) failures++;
}

// Printable form of some bytes for messages: C escapes for control and non-ASCII bytes.
static std::string escaped(const std::string& s, size_t max_len = 60) {
    std::string out;
    for (size_t i = 0; i < s.size() && i < max_len; i++) {
        unsigned char c = (unsigned char)s[i];
        char buf[8];
        if (c == '\n') out += "\\n";
        else if (c == '\\') out += "\\\\";
        else if (c >= 0x20 && c < 0x7f) out += (char)c;
        else { snprintf(buf, sizeof(buf), "\\x%02x", c); out += buf; }
    }
    if (s.size() > max_len) out += "...";
    return out;
}

static std::string ids_str(const std::vector<uint32_t>& ids) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); i++) out += (i ? ", " : "") + std::to_string(ids[i]);
    return out + "]";
}

static std::string token_text(const Tokenizer* t, uint32_t id) {
    return "'" + escaped(tokenizer_decode(t, &id, 1)) + "'";
}

static std::string read_text(const char* path) {
    std::vector<uint8_t> b = read_file_bytes(path);
    return std::string(b.begin(), b.end());
}

static std::vector<uint32_t> encode(const Tokenizer* t, const std::string& s, bool special) {
    return special ? tokenizer_encode_with_special(t, s.data(), s.size()) : tokenizer_encode(t, s.data(), s.size());
}

// ----------------------------------------------------------------------------------------------

static void expect_ids(const Tokenizer* t, const char* name, const std::string& text, bool special,
                       const std::vector<uint32_t>& want) {
    std::vector<uint32_t> got = encode(t, text, special);
    check(got == want, name, "'" + escaped(text) + "' -> " + ids_str(got) + (got == want ? "" : ", expected " + ids_str(want)));
}

// Random byte strings: valid UTF-8 pieces, invalid bytes, ASCII runs, and special token names.
static std::string random_bytes(std::mt19937& rng) {
    static const char* pieces[] = {" ", "  ", "\n", "\r\n", "\t", "a", "Z", "7", "'s", "'LL", "'", "<|", "|>",
                                   "<|endoftext|>", "<|eot_id|>", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x91\x8d",
                                   "\xc2\xa0", "\xe3\x80\x80", "\xef\xbb\xbf", "\xc2\x85", "\xd9\xa3", "!!", "..."};
    std::string s;
    int n = rng() % 64;
    for (int i = 0; i < n; i++) {
        int r = rng() % 4;
        if (r == 0) s += (char)(rng() % 256);                         // any byte
        else if (r == 1) s += (char)(0x80 + rng() % 0x80);            // continuation or lead byte
        else s += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
    }
    return s;
}

// tok_char_at against Python's strict UTF-8 decoder (records of tests/tokenizer/utf8_cases.py): the same
// code point and length for every case, invalid (TOK_NONE, one byte) where Python decodes nothing.
static void utf8_cases(const char* path) {
    std::vector<uint8_t> rec = read_file_bytes(path);
    const size_t R = 13;  // 4 bytes, length, int32 code point, int32 length
    if (rec.empty() || rec.size() % R != 0) die("utf8 cases '%s': %zu bytes, not a multiple of %zu", path, rec.size(), R);
    size_t bad = 0, n = rec.size() / R;
    std::string first;
    for (size_t r = 0; r < n; r++) {
        const uint8_t* p = rec.data() + r * R;
        int32_t want_cp, want_len;
        memcpy(&want_cp, p + 5, 4);
        memcpy(&want_len, p + 9, 4);
        TokChar c = tok_char_at(p, p[4], 0);
        const int32_t cp = c.cp == TOK_NONE ? -1 : (int32_t)c.cp;
        if (cp != want_cp || (int32_t)c.end != want_len) {
            if (bad++ == 0) {
                char buf[160];
                snprintf(buf, sizeof(buf), "first: bytes %02x %02x %02x %02x (%d): ours U+%X/%d, Python %d/%d", p[0], p[1],
                         p[2], p[3], p[4], (unsigned)cp, (int)c.end, want_cp, want_len);
                first = buf;
            }
        }
    }
    check(bad == 0, "utf8 decoding of " + std::to_string(n) + " byte sequences as Python's strict decoder",
          bad ? std::to_string(bad) + " differ; " + first : "all agree");
}

static void selftest() {
    // the ASCII fast path of tok_class agrees with the generated tables
    bool same = true;
    for (uint32_t cp = 0; cp < 128; cp++) {
        int want = CP_OTHER;
        if (tok_in_ranges(cp, unicode_letter_ranges, sizeof(unicode_letter_ranges) / sizeof(unicode_letter_ranges[0]))) want = CP_LETTER;
        else if (tok_in_ranges(cp, unicode_number_ranges, sizeof(unicode_number_ranges) / sizeof(unicode_number_ranges[0]))) want = CP_NUMBER;
        else if (tok_in_ranges(cp, unicode_space_ranges, sizeof(unicode_space_ranges) / sizeof(unicode_space_ranges[0]))) want = CP_SPACE;
        same = same && tok_class(cp) == want;
    }
    check(same, "ascii classes", "fast path == unicode_tables.h for code points 0..127");

    // byte-level tokenizer
    Tokenizer b;
    tokenizer_load_auto(&b, "bytes");
    std::string raw("hi\xff\x00!", 5);
    std::vector<uint32_t> ids = tokenizer_encode(&b, raw.data(), raw.size());
    check(tokenizer_vocab_size(&b) == 256 && ids == std::vector<uint32_t>({104, 105, 255, 0, 33}) &&
              tokenizer_decode(&b, ids.data(), ids.size()) == raw,
          "bytes", "vocab 256, token = byte, decode(encode(x)) == x");

    // GPT-2: values from tiktoken's r50k_base
    Tokenizer g;
    check(tokenizer_load_auto(&g, "gpt2") == TOK_GPT2 && tokenizer_vocab_size(&g) == 50257 && tokenizer_eot(&g) == 50256,
          "gpt2 sizes", "kind GPT2, vocab 50257, eot 50256");
    expect_ids(&g, "gpt2 hello", "Hello world", false, {15496, 995});
    expect_ids(&g, "gpt2 eot special", "<|endoftext|>", true, {50256});
    expect_ids(&g, "gpt2 eot ordinary", "<|endoftext|>", false, {27, 91, 437, 1659, 5239, 91, 29});
    expect_ids(&g, "gpt2 empty", "", false, {});
    uint32_t bad[3] = {15496, 50257, 995};
    check(tokenizer_decode(&g, bad, 3) == "Hello\xEF\xBF\xBD world", "gpt2 unknown id", "decodes to U+FFFD");

    // Llama 3: values from Meta's tokenizer test ("This is a test sentence.")
    Tokenizer l;
    check(tokenizer_load_auto(&l, "llama3") == TOK_LLAMA3 && tokenizer_vocab_size(&l) == 128256 &&
              tokenizer_eot(&l) == 128001 && tokenizer_bos(&l) == 128000,
          "llama3 sizes", "kind LLAMA3, vocab 128256, eot 128001, bos 128000");
    expect_ids(&l, "llama3 sentence", "This is a test sentence.", false, {2028, 374, 264, 1296, 11914, 13});
    expect_ids(&l, "llama3 specials", "<|begin_of_text|>x<|eot_id|><|reserved_special_token_247|>", true,
               {128000, 87, 128009, 128255});

    // arbitrary bytes: never crash, decode(encode(x)) == x, with and without special tokens
    std::mt19937 rng(1234);
    int n_strings = 20000, bad_g = 0, bad_l = 0;
    size_t n_tokens = 0;
    for (int i = 0; i < n_strings; i++) {
        std::string s = random_bytes(rng);
        for (int special = 0; special < 2; special++) {
            std::vector<uint32_t> tg = encode(&g, s, special), tl = encode(&l, s, special);
            n_tokens += tg.size() + tl.size();
            bad_g += tokenizer_decode(&g, tg.data(), tg.size()) != s;
            bad_l += tokenizer_decode(&l, tl.data(), tl.size()) != s;
        }
    }
    check(bad_g == 0 && bad_l == 0, "random bytes round trip",
          std::to_string(n_strings) + " strings, " + std::to_string(n_tokens) + " tokens, failures gpt2 " +
              std::to_string(bad_g) + " llama3 " + std::to_string(bad_l));
}

// ----------------------------------------------------------------------------------------------

static void compare(const char* tok, const char* text_path, const char* ref_path, const char* name, bool special) {
    Tokenizer t;
    tokenizer_load_auto(&t, tok);
    std::string text = read_text(text_path);
    std::vector<uint8_t> rb = read_file_bytes(ref_path);
    if (rb.size() % 4 != 0) die("%s: size %zu is not a multiple of 4 (uint32 tokens expected)", ref_path, rb.size());
    std::vector<uint32_t> ref(rb.size() / 4);
    memcpy(ref.data(), rb.data(), rb.size());
    std::vector<uint32_t> got = encode(&t, text, special);

    size_t k = 0;
    while (k < got.size() && k < ref.size() && got[k] == ref[k]) k++;
    if (k == got.size() && k == ref.size()) {
        check(true, name, std::to_string(ref.size()) + " tokens equal (" + std::to_string(text.size()) + " bytes)");
    } else {
        std::vector<uint32_t> before(got.begin() + (k > 8 ? k - 8 : 0), got.begin() + k);
        std::string detail = "first difference at token " + std::to_string(k) + " of " + std::to_string(ref.size()) +
                             " (ours " + std::to_string(got.size()) + "), after '" + escaped(tokenizer_decode(&t, before.data(), before.size())) + "': ours ";
        detail += k < got.size() ? std::to_string(got[k]) + " " + token_text(&t, got[k]) : "end";
        detail += ", reference ";
        detail += k < ref.size() ? std::to_string(ref[k]) + " " + token_text(&t, ref[k]) : "end";
        check(false, name, detail);
    }
    std::string back = tokenizer_decode(&t, got.data(), got.size());
    check(back == text, std::string(name) + " round trip", "decode(encode(text)) == text, " + std::to_string(text.size()) + " bytes");
}

static void encode_to_file(const char* tok, const char* text_path, const char* out_path, bool special) {
    Tokenizer t;
    tokenizer_load_auto(&t, tok);
    std::string text = read_text(text_path);
    std::vector<uint32_t> ids = encode(&t, text, special);
    FILE* f = fopen_check(out_path, "wb");
    if (!ids.empty()) fwrite_check(ids.data(), sizeof(uint32_t), ids.size(), f, out_path);
    fclose_check(f, out_path);
}

static void bench(const char* tok, const char* text_path, int reps) {
    Tokenizer t;
    tokenizer_load_auto(&t, tok);
    std::string text = read_text(text_path);
    std::vector<double> mbs;
    size_t n_tokens = 0;
    for (int r = 0; r < reps; r++) {
        auto t0 = std::chrono::steady_clock::now();
        n_tokens = tokenizer_encode(&t, text.data(), text.size()).size();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        mbs.push_back(text.size() / 1e6 / s);
    }
    std::sort(mbs.begin(), mbs.end());
    printf("ours %s: %.2f MB/s (median of %d; %zu bytes -> %zu tokens)\n", tok, mbs[mbs.size() / 2], reps, text.size(), n_tokens);
}

static void info(const char* tok) {
    Tokenizer t;
    int kind = tokenizer_load_auto(&t, tok);
    printf("kind %d vocab %u", kind, tokenizer_vocab_size(&t));
    fflush(stdout);
    printf(" eot %u\n", tokenizer_eot(&t));
}

int main(int argc, char** argv) {
    std::string mode = argc > 1 ? argv[1] : "";
    bool special = argc > 0 && std::string(argv[argc - 1]) == "special";
    if (mode == "selftest" && argc == 2) selftest();
    else if (mode == "compare" && (argc == 6 || (argc == 7 && special))) compare(argv[2], argv[3], argv[4], argv[5], special);
    else if (mode == "encode" && (argc == 5 || (argc == 6 && special))) encode_to_file(argv[2], argv[3], argv[4], special);
    else if (mode == "utf8" && argc == 3) utf8_cases(argv[2]);
    else if (mode == "bench" && (argc == 4 || argc == 5)) bench(argv[2], argv[3], argc == 5 ? atoi(argv[4]) : 5);
    else if (mode == "info" && argc == 3) info(argv[2]);
    else die("usage: test_tokenizer selftest | utf8 CASES | compare TOK TEXT REF NAME [special] | encode TOK TEXT OUT [special] | "
             "bench TOK TEXT [reps] | info TOK");
    return failures ? 1 : 0;
}
