// dev/cuda/attention_cases.h: what attention_forward.cu and attention_backward.cu share: the
// command line with its --sizes rule (BxTxHxKVxhd, shapes the kernels take, qkv below 2^31
// elements) and its own flags, the fixed check matrix every version runs: B=2, H=8, T in
// {128,256,1024}, KV in {8,2}, hd in {64,80,128}; the documents check; documents and their
// predicted cost; the timed table's rows.
//
// Documents (--docs LIST; llmc/attention.cuh's doc): each N of the list times every --sizes shape with N equal
// documents per sequence (token t's document starts at (t / (T/N)) * (T/N); N must divide T); N = 1 is the plain
// causal mask (doc null, the kernels' path without documents). The list is timed in increasing order, so when it
// holds 1 each row also gets its time relative to the docs 1 row of the same kernel, version and shape, beside the
// predicted fraction: the tensor-core work left, counted by replaying the kernels' loop bounds over the same doc
// array (attention_tiles below; dev/cuda/notes_attention.md, "Documents: predicted cost"). The work unit is one
// 64 x 64 x hd product: the forward does 2 per 64 x 64 tile (S = Q K^T, O += P V), the dQ kernel 3 per 64 x 64 tile
// (S, dP, dQ), the dK/dV kernel 4 per 64-key x 32-query tile (S^T, dP^T, dV, dK: 2 units); the backward's
// preprocess (D = rowsum(dO * O), memory-bound, about 1%) is not counted. Version 1 (the rowwise kernels) loops over
// exactly the visible keys: its prediction is the visible fraction (pairs (query, key) with doc[t] <= key <= t,
// against causal). Version 2 of each program takes no documents: timed at docs 1 only.
// With --docs the table gets the columns docs, ms / docs 1, predicted, visible, and TFLOP/s counts the visible
// work (the causal count times the visible fraction); without it the table is the one these programs always printed.
#pragma once
#include <algorithm>
#include <vector>
#include "dev/cuda/common.h"
#include "llmc/attention.cuh"

struct AttentionArgs : Args {
    std::vector<int> docs = {1};  // --docs: documents per sequence, distinct, increasing
    bool docs_given = false;      // the table gets the documents columns
    bool skip_matrix = false;     // --skip-matrix: no fixed check matrix (the documents check still runs)
};

// "1,4,16" -> {1, 4, 16} (sorted, duplicates dropped); every N a positive integer dividing every size's T
static std::vector<int> parse_docs(const char* s, const std::vector<std::vector<long>>& sizes) {
    std::vector<int> out;
    std::string all(s);
    size_t pos = 0;
    while (true) {
        const size_t comma = all.find(',', pos);
        const std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        char* end = nullptr;
        const long n = strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || n <= 0 || n > (1l << 30))
            die("--docs: '%s' is not a positive integer (documents per sequence; a comma-separated list such as 1,4,16)",
                item.c_str());
        for (const std::vector<long>& sz : sizes)
            if (sz[1] % n != 0)
                die("--docs: %ld documents do not divide T=%ld (--sizes %ldx%ldx%ldx%ldx%ld): N equal documents need T "
                    "a multiple of N", n, sz[1], sz[0], sz[1], sz[2], sz[3], sz[4]);
        out.push_back((int)n);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

static AttentionArgs attention_parse_args(int argc, char** argv, const char* about, int n_versions) {
    const char* docs = nullptr;
    bool skip_matrix = false;
    ExtraFlags extra = {
        " [--docs LIST] [--skip-matrix]",
        "  --docs LIST    comma-separated documents per sequence, each N dividing every T: each timed shape runs\n"
        "                 with N equal documents per row (llmc/attention.cuh's doc; 1 = the plain causal mask, the\n"
        "                 default); each row gets the predicted fraction of the work left (the kernels' tile\n"
        "                 counts) and, with 1 in the list, its time / the docs 1 time. Version 2 takes no documents.\n"
        "  --skip-matrix  skip the fixed check matrix (the one documents check, a small shape, still runs)\n",
        [&](const char* flag, const std::function<const char*()>& value) {
            if (!strcmp(flag, "--docs")) docs = value();
            else if (!strcmp(flag, "--skip-matrix")) skip_matrix = true;
            else return false;
            return true;
        }};
    AttentionArgs a;
    static_cast<Args&>(a) = parse_args(argc, argv, about, "BxTxHxKVxhd (T a multiple of 64, H a multiple of KV, hd 64, 80 or 128)",
                                       "4x4096x32x32x128", 5, n_versions, &extra);
    for (const std::vector<long>& s : a.sizes) {
        if (s[0] * s[1] * (s[2] + 2 * s[3]) * s[4] > (1l << 31))
            die("--sizes: %ldx%ldx%ldx%ldx%ld: the qkv tensor may hold at most 2^31 elements", s[0], s[1], s[2], s[3], s[4]);
        attention_check_shape((int)s[0], (int)s[1], (int)s[2], (int)s[3], (int)s[4]);
    }
    if (docs) {
        a.docs = parse_docs(docs, a.sizes);
        a.docs_given = true;
    }
    a.skip_matrix = skip_matrix;
    return a;
}

// Runs check(version, B, T, H, KV, hd, case_index, doc) -> bool over the matrix for the chosen
// versions (doc null: causal); returns the number of failed cases. None with --skip-matrix.
template <typename Check>
static int attention_check_all(const AttentionArgs& a, int n_versions, Check check) {
    if (a.skip_matrix) {
        printf("# --skip-matrix: the fixed check matrix is not run\n");
        return 0;
    }
    int failures = 0;
    const int Ts[3] = {128, 256, 1024}, KVs[2] = {8, 2}, hds[3] = {64, 80, 128};
    for (int v = 1; v <= n_versions; v++) {
        if (a.version && v != a.version) continue;
        size_t case_index = 0;
        for (int T : Ts)
            for (int KV : KVs)
                for (int hd : hds) failures += !check(v, 2, T, 8, KV, hd, case_index++, (const int32_t*)nullptr);
    }
    return failures;
}

// ---- documents ----------------------------------------------------------------------------------------

// doc [B*T] of n equal documents per row: token t's document starts at (t / (T/n)) * (T/n)
static std::vector<int32_t> equal_documents(int B, int T, int n) {
    std::vector<int32_t> doc((size_t)B * T);
    const int len = T / n;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) doc[(size_t)b * T + t] = (t / len) * len;
    return doc;
}

// doc [B*T] from each row's document starts (the first must be 0)
static std::vector<int32_t> documents_from_starts(int T, const std::vector<std::vector<int>>& starts) {
    std::vector<int32_t> doc(starts.size() * T);
    for (size_t b = 0; b < starts.size(); b++) {
        size_t k = 0;
        for (int t = 0; t < T; t++) {
            while (k + 1 < starts[b].size() && starts[b][k + 1] <= t) k++;
            doc[b * T + t] = starts[b][k];
        }
    }
    return doc;
}

// The documents check: one small shape (GQA, hd 128 as gpt3_1.3b's) with documents of unequal lengths whose starts
// fall inside tiles, on a tile edge and 2 tokens apart: the per-row compare of the boundary tiles, the key tiles
// skipped before a block's first row's start, the end of the dK/dV query loop, a two-token document.
static const int ATT_DOC_CHECK_B = 2, ATT_DOC_CHECK_T = 256, ATT_DOC_CHECK_H = 4, ATT_DOC_CHECK_KV = 2,
                 ATT_DOC_CHECK_HD = 128;
static std::vector<int32_t> attention_check_documents() {
    return documents_from_starts(ATT_DOC_CHECK_T, {{0, 37, 128, 130, 250}, {0, 64, 191}});
}
static std::string documents_label(const std::vector<int32_t>& doc, int B, int T) {
    std::string s;
    for (int b = 0; b < B; b++) {
        s += b ? " | " : "";
        for (int t = 0; t < T; t++)
            if (t == 0 || doc[(size_t)b * T + t] != doc[(size_t)b * T + t - 1]) s += (t ? "," : "") + std::to_string(t);
    }
    return s;
}

// Runs check(version, B, T, H, KV, hd, case_index, doc) at the documents check's shape for the chosen versions
// that take documents (takes_doc(v)); returns the number of failed cases.
template <typename TakesDoc, typename Check>
static int attention_check_docs(const AttentionArgs& a, int n_versions, TakesDoc takes_doc, Check check) {
    const std::vector<int32_t> doc = attention_check_documents();
    int failures = 0;
    for (int v = 1; v <= n_versions; v++) {
        if ((a.version && v != a.version) || !takes_doc(v)) continue;
        failures += !check(v, ATT_DOC_CHECK_B, ATT_DOC_CHECK_T, ATT_DOC_CHECK_H, ATT_DOC_CHECK_KV, ATT_DOC_CHECK_HD, 1000,
                           doc.data());
    }
    return failures;
}

// The tiles the kernels' loops visit over all batch rows, per head, replayed from llmc/attention.cuh's bounds
// (doc null: causal). fwd: the forward's and the dQ kernel's 64 x 64 tiles (ATT_FWD_BM == ATT_FWD_BN == ATT_DQ_BM ==
// ATT_BWD_BN): query tile qt visits key tiles doc[qt's first row] / 64 .. qt. dkdv: the dK/dV kernels' 64-key x
// 32-query tiles: key tile kt visits query tiles 2 kt .. up to (not including) the first after 2 kt whose first
// row's document starts past the key tile's last key (att_doc_qtile_end), or all. pairs: the visible (query, key)
// pairs, doc[t] <= key <= t.
static const int ATT_DKDV_BM = 32;  // attention_backward_hd's BM (query rows per dK/dV tile)
struct AttentionTiles {
    double fwd = 0, dkdv = 0, pairs = 0;
};
static AttentionTiles attention_tiles(const int32_t* doc, int B, int T) {
    static_assert(ATT_FWD_BM == ATT_FWD_BN && ATT_DQ_BM == ATT_BWD_BN && ATT_FWD_BM == ATT_DQ_BM, "square 64 tiles");
    AttentionTiles n;
    for (int b = 0; b < B; b++) {
        const int32_t* d = doc ? doc + (size_t)b * T : nullptr;
        for (int qt = 0; qt < T / ATT_FWD_BM; qt++) n.fwd += qt - (d ? d[qt * ATT_FWD_BM] : 0) / ATT_FWD_BN + 1;
        const int n_qt = T / ATT_DKDV_BM;
        for (int kt = 0; kt < T / ATT_BWD_BN; kt++) {
            const int first_qt = kt * ATT_BWD_BN / ATT_DKDV_BM, key_last = kt * ATT_BWD_BN + ATT_BWD_BN - 1;
            int end = n_qt;
            if (d)
                for (int qt = first_qt + 1; qt < n_qt; qt++)
                    if (d[qt * ATT_DKDV_BM] > key_last) { end = qt; break; }
            n.dkdv += end - first_qt;
        }
        for (int t = 0; t < T; t++) n.pairs += t - (d ? d[t] : 0) + 1;
    }
    return n;
}

// The predicted fractions of the causal work left with doc (attention_tiles against doc null), in 64 x 64 x hd
// tensor-core products: forward 2 per fwd tile; backward 3 per dQ tile + 2 per dK/dV tile; both, the sum.
struct AttentionPrediction {
    double fwd = 1, bwd = 1, fwd_bwd = 1, visible = 1;
};
static AttentionPrediction attention_predict(const int32_t* doc, int B, int T) {
    const AttentionTiles c = attention_tiles(nullptr, B, T), d = attention_tiles(doc, B, T);
    AttentionPrediction p;
    p.fwd = d.fwd / c.fwd;
    p.bwd = (3 * d.fwd + 2 * d.dkdv) / (3 * c.fwd + 2 * c.dkdv);
    p.fwd_bwd = (5 * d.fwd + 2 * d.dkdv) / (5 * c.fwd + 2 * c.dkdv);
    p.visible = d.pairs / c.pairs;
    return p;
}

// ---- the timed table --------------------------------------------------------------------------------------

static void attention_table_header(const AttentionArgs& a, double target_tflops) {
    if (a.docs_given) {
        printf("| kernel | size BxTxHxKVxhd | docs | version | sets | ms | TFLOP/s | %% of %.0f target | ms / docs 1 | "
               "predicted | visible |\n", target_tflops);
        printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    } else {
        printf("| kernel | size BxTxHxKVxhd | version | sets | ms | TFLOP/s | %% of %.0f target |\n", target_tflops);
        printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    }
}

// One row. flops: the causal count of the shape; visible: the fraction documents leave of it (TFLOP/s counts that
// work); ms_docs1: the docs 1 time of the same kernel, version and shape, or < 0 when not measured; predicted: the
// fraction of the work left (attention_predict).
static void attention_row(const AttentionArgs& a, const char* what, const std::vector<long>& s, int docs, int version,
                          int sets, double ms, double flops, double visible, double ms_docs1, double predicted,
                          double target_tflops) {
    const double tflops = flops * visible / (ms * 1e-3) / 1e12;
    char size[96];
    snprintf(size, sizeof(size), "%ldx%ldx%ldx%ldx%ld", s[0], s[1], s[2], s[3], s[4]);
    if (a.docs_given) {
        char ratio[32] = "-";
        if (ms_docs1 > 0) snprintf(ratio, sizeof(ratio), "%.3f", ms / ms_docs1);
        printf("| %s | %s | %d | %d | %d | %.3f | %.1f | %.1f | %s | %.3f | %.3f |\n", what, size, docs, version, sets, ms,
               tflops, 100.0 * tflops / target_tflops, ratio, predicted, visible);
    } else {
        printf("| %s | %s | %d | %d | %.3f | %.1f | %.1f |\n", what, size, version, sets, ms, tflops,
               100.0 * tflops / target_tflops);
    }
    fflush(stdout);
}
