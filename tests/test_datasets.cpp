// tests/test_datasets.cpp: checks of llmc/data/datasets.h and llmc/data/dataloader.h, driven by tests/t_datasets.sh.
//   build/test_datasets selftest DIR
//       in-process checks on files it writes under DIR from the documented layouts: sample
//       windows against a direct computation (tokens equal to their stream position), across
//       llm.c shards and a Megatron index whose sequences lie out of order in the .bin; the
//       shuffle is a permutation that depends on the seed; the data loader's inputs and targets against the
//       windows, for shards and a text file, wrapping after the last sample. Prints [PASS]/[FAIL] lines.
//   build/test_datasets dump PATH SEQ SEED SHUFFLE OUT
//       opens PATH, writes every sample (num_samples x (SEQ+1) int32) to OUT and prints
//       "format F tokens T samples N max M". Corrupt inputs make it die (exit 1) with the message
//       the test script checks.
#include <sys/stat.h>
#include <string>
#include <vector>
#include "llmc/data/dataloader.h"
#include "llmc/data/datasets.h"

static int failures = 0;

static void check(bool ok, const std::string& name, const std::string& detail) {
    if (ok) printf("[PASS] %s\n", name.c_str());
    else { printf("[FAIL] %s: %s\n", name.c_str(), detail.c_str()); failures++; }
}

// llm.c shard: int32 header {20240520, version, count, 0...} then uint16 (v1) or uint32 (v2) tokens.
static void write_llmc_shard(const std::string& path, int version, const std::vector<uint32_t>& tokens) {
    int32_t header[256] = {20240520, version, (int32_t)tokens.size()};
    FILE* f = fopen_check(path.c_str(), "wb");
    fwrite_check(header, 4, 256, f, path.c_str());
    for (uint32_t t : tokens) {
        if (version == 1) { uint16_t v = (uint16_t)t; fwrite_check(&v, 2, 1, f, path.c_str()); }
        else fwrite_check(&t, 4, 1, f, path.c_str());
    }
    fclose_check(f, path.c_str());
}

// Every sample of d equals the window [w*seq, w*seq + seq] of the stream `expect`; returns the
// window each sample read (-1 where it matched none).
static std::vector<int64_t> sample_windows(const TokenDataset* d, const std::vector<int32_t>& expect) {
    std::vector<int64_t> w(dataset_num_samples(d), -1);
    std::vector<int32_t> s(d->seq + 1);
    for (size_t i = 0; i < w.size(); i++) {
        dataset_sample(d, i, s.data());
        // tokens are positions (or a known function of them): locate the window by its first token
        for (size_t c = 0; c < expect.size(); c += d->seq) {
            if (c + d->seq >= expect.size()) break;
            if (memcmp(&expect[c], s.data(), 4 * (d->seq + 1)) == 0) { w[i] = (int64_t)(c / d->seq); break; }
        }
    }
    return w;
}

static void selftest(const std::string& dir) {
    mkdir(dir.c_str(), 0755);

    // 1. Three llm.c shards (v1, v2, v1) whose tokens are their stream positions.
    std::vector<int32_t> stream;
    const int sizes[3] = {37, 101, 12};
    for (int k = 0; k < 3; k++) {
        std::vector<uint32_t> t;
        for (int j = 0; j < sizes[k]; j++) { t.push_back((uint32_t)stream.size()); stream.push_back((int32_t)stream.size()); }
        write_llmc_shard(dir + "/pos_" + std::to_string(k) + ".bin", k == 1 ? 2 : 1, t);
    }
    for (int seq : {1, 2, 5, 36, 64, 149}) {
        TokenDataset d;
        dataset_open(&d, (dir + "/pos_*.bin").c_str(), seq, 0, false);
        std::vector<int64_t> w = sample_windows(&d, stream);
        bool ok = d.num_samples == (stream.size() - 1) / seq && d.num_tokens == stream.size();
        for (size_t i = 0; i < w.size(); i++) ok = ok && w[i] == (int64_t)i;
        check(ok, "llmc_windows_seq" + std::to_string(seq), "samples are not the windows [i*seq, i*seq+seq] across the shards");
        check(dataset_max_token(&d) == (uint32_t)stream.size() - 1, "llmc_max_token_seq" + std::to_string(seq), "wrong max token");
        dataset_free(&d);
    }

    // 2. Shuffle: a permutation of the windows, the same for the same seed, different otherwise.
    std::vector<std::vector<int64_t>> orders;
    for (uint64_t seed : {1, 1, 2}) {
        TokenDataset d;
        dataset_open(&d, (dir + "/pos_*.bin").c_str(), 3, seed, true);
        orders.push_back(sample_windows(&d, stream));
        dataset_free(&d);
    }
    std::vector<int64_t> sorted = orders[0];
    std::sort(sorted.begin(), sorted.end());
    bool perm = true, identity = true;
    for (size_t i = 0; i < sorted.size(); i++) { perm = perm && sorted[i] == (int64_t)i; identity = identity && orders[0][i] == (int64_t)i; }
    check(perm && sorted.size() == (stream.size() - 1) / 3, "shuffle_is_permutation", "the shuffled samples are not each window exactly once");
    check(!identity, "shuffle_changes_order", "seed 1 left the order unchanged");
    check(orders[0] == orders[1], "shuffle_same_seed_same_order", "two opens with seed 1 differ");
    check(orders[0] != orders[2], "shuffle_seed_changes_order", "seeds 1 and 2 give the same order");

    // 3. Megatron index with sequences stored out of order (and with gaps) in the .bin: the
    //    stream follows the index. Tokens int32: the value 1000 + position.
    {
        const int n = 4, lens[n] = {5, 0, 9, 7};
        const int64_t slot[n] = {3, 0, 1, 0};  // where each sequence goes, in 16-token slots
        std::vector<int32_t> bin(16 * 4, -7), expect;
        std::vector<int64_t> pointers(n);
        for (int i = 0, pos = 0; i < n; i++) {
            pointers[i] = 4 * 16 * slot[i];
            for (int j = 0; j < lens[i]; j++, pos++) { bin[16 * slot[i] + j] = 1000 + pos; expect.push_back(1000 + pos); }
        }
        std::string prefix = dir + "/gaps";
        FILE* f = fopen_check((prefix + ".bin").c_str(), "wb");
        fwrite_check(bin.data(), 4, bin.size(), f, "gaps.bin");
        fclose_check(f, "gaps.bin");
        uint64_t version = 1, nn = n, dd = 3;
        uint8_t code = 4;
        int64_t doc_idx[3] = {0, 2, n};
        f = fopen_check((prefix + ".idx").c_str(), "wb");
        fwrite_check("MMIDIDX\0\0", 1, 9, f, "gaps.idx");
        fwrite_check(&version, 8, 1, f, "gaps.idx");
        fwrite_check(&code, 1, 1, f, "gaps.idx");
        fwrite_check(&nn, 8, 1, f, "gaps.idx");
        fwrite_check(&dd, 8, 1, f, "gaps.idx");
        fwrite_check(lens, 4, n, f, "gaps.idx");
        fwrite_check(pointers.data(), 8, n, f, "gaps.idx");
        fwrite_check(doc_idx, 8, 3, f, "gaps.idx");
        fclose_check(f, "gaps.idx");
        for (int seq : {1, 4, 20}) {
            TokenDataset d;
            dataset_open(&d, prefix.c_str(), seq, 0, false);
            std::vector<int64_t> w = sample_windows(&d, expect);
            bool ok = d.num_tokens == expect.size() && d.num_samples == (expect.size() - 1) / seq;
            for (size_t i = 0; i < w.size(); i++) ok = ok && w[i] == (int64_t)i;
            check(ok, "megatron_out_of_order_seq" + std::to_string(seq), "samples do not follow the index order of the sequences");
            dataset_free(&d);
        }
    }
}

// The data loader's batches (llmc/data/dataloader.h) against the windows computed directly: sample i of a
// stream whose tokens are their positions is [i*T, i*T + T]; inputs are its first T tokens and targets the
// next T (each input's target is the token after it), samples first, first+1, ... wrapping after the last.
// Both sources: the llm.c shards of selftest, and a text file read as bytes (byte k has the value k % 251).
static void loader_checks(const std::string& dir) {
    std::vector<uint8_t> text(1000);
    for (size_t k = 0; k < text.size(); k++) text[k] = (uint8_t)(k % 251);
    FILE* f = fopen_check((dir + "/bytes.txt").c_str(), "wb");
    fwrite_check(text.data(), 1, text.size(), f, "bytes.txt");
    fclose_check(f, "bytes.txt");
    struct Source { std::string path, name; int modulus; };
    for (const Source& src : {Source{dir + "/pos_*.bin", "shards", 0}, Source{dir + "/bytes.txt", "text", 251}}) {
        for (int T : {1, 7, 32}) {
            DataLoader dl;
            loader_open(&dl, src.path, T);
            const int B = 3;
            const uint64_t n = dl.num_samples;
            std::vector<int32_t> in((size_t)B * T), tg((size_t)B * T);
            bool ok = n > 2;
            for (uint64_t first : {(uint64_t)0, n / 2, n - 2}) {  // the last: wraps to sample 0
                loader_batch(&dl, first, B, in.data(), tg.data());
                for (int b = 0; b < B; b++) {
                    const uint64_t i = (first + b) % n;
                    for (int t = 0; t < T; t++) {
                        int64_t pos = (int64_t)(i * T + t), want_in = src.modulus ? pos % src.modulus : pos,
                                want_tg = src.modulus ? (pos + 1) % src.modulus : pos + 1;
                        ok = ok && in[(size_t)b * T + t] == want_in && tg[(size_t)b * T + t] == want_tg;
                    }
                }
            }
            check(ok, "loader_batches_" + src.name + "_T" + std::to_string(T),
                  "inputs are not window[0..T) or targets not window[1..T] of samples first.. (wrapping)");
        }
    }
}

// Opens the data set, then truncates its (only) token file to `keep` bytes, as another program rewriting it would,
// and reads every sample: the reads past the new end must stop the process with exit 1 and a message naming the file
// (llmc/data/datasets.h's SIGBUS handler). Returning at all is the failure.
static int shrink(const char* path, int seq, long keep) {
    TokenDataset d;
    dataset_open(&d, path, seq, 0, false);
    if (truncate(path, keep) != 0) { perror("truncate"); return 3; }
    std::vector<int32_t> s(seq + 1);
    int64_t sum = 0;
    for (size_t i = 0; i < dataset_num_samples(&d); i++) {
        dataset_sample(&d, i, s.data());
        sum += s[0];
    }
    printf("read every sample of the shrunk file (sum %lld): no SIGBUS\n", (long long)sum);
    return 4;
}

static void dump(const char* path, int seq, uint64_t seed, bool shuffle, const char* out) {
    TokenDataset d;
    dataset_open(&d, path, seq, seed, shuffle);
    FILE* f = fopen_check(out, "wb");
    std::vector<int32_t> s(seq + 1);
    for (size_t i = 0; i < dataset_num_samples(&d); i++) {
        dataset_sample(&d, i, s.data());
        fwrite_check(s.data(), 4, s.size(), f, out);
    }
    fclose_check(f, out);
    printf("format %s tokens %" PRIu64 " samples %zu max %u\n", d.format, d.num_tokens, dataset_num_samples(&d), dataset_max_token(&d));
    dataset_free(&d);
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "selftest") == 0) {
        selftest(argv[2]);
        loader_checks(argv[2]);
        return failures == 0 ? 0 : 1;
    }
    if (argc == 7 && strcmp(argv[1], "dump") == 0) {
        dump(argv[2], atoi(argv[3]), strtoull(argv[4], nullptr, 10), atoi(argv[5]) != 0, argv[6]);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "shrink") == 0) return shrink(argv[2], atoi(argv[3]), atol(argv[4]));
    fprintf(stderr, "usage: %s selftest DIR | dump PATH SEQ SEED SHUFFLE(0|1) OUT | shrink PATH SEQ KEEP_BYTES\n", argv[0]);
    return 2;
}
