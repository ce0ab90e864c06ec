// llmc/matmul_algos.cuh: --gemm-algos heuristic|tune|FILE, the cuBLASLt algorithm of each GEMM key (llmc/matmul.cuh
// says how each mode chooses): the flag's value, FILE read and written, the table printed after the first step.
//   gemm_algos_parse(value)           the mode; FILE is read here (a message naming it and its line, exit 1)
//   gemm_algos_records(ctx)           the keys settled so far, each with its algorithm
//   gemm_algos_gather(world, rank, r) every rank's records, to every rank: a key once, the lowest rank's algorithm (a
//                                     pipeline's stages run different GEMMs; tp and dp ranks the same ones)
//   gemm_algos_write(records, path, gpu)  one line each (what a tune run leaves in OUT), after a "# device:" line
//                                     naming the GPU and the cuBLASLt version they were timed on
//   gemm_algos_check_device(g, gpu)   FILE against this run's GPU and cuBLASLt: a note where they differ (an algorithm
//                                     timed elsewhere may be refused here, which stops the run, or be slower)
//   gemm_algos_print(ctx)             the table: per key its shape, layout, types, epilogue, the algorithm chosen and
//                                     how; under tune its time and TFLOP/s beside the heuristic's first algorithm's
// FILE's lines (# starts a comment): the key's 16 fields in MatmulKey's order, ':', the algorithm's 8 words
// (cublasLtMatmulAlgo_t, opaque to us: replayed as cuBLASLt gave it):
//   m n k trans_a trans_b epilogue d_type bias_type align_a align_b align_d a_type b_type fast_accum amax_d align_aux
//   : data0 ... data7
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include "llmc/matmul.cuh"
#include "llmc/utils.h"

static const int GEMM_KEY_FIELDS = 16;

static inline void gemm_key_fields(const MatmulKey& k, long long f[GEMM_KEY_FIELDS]) {
    const long long v[GEMM_KEY_FIELDS] = {k.m, k.n, k.k, k.trans_a, k.trans_b, (long long)k.epilogue, (long long)k.d_type,
                                          (long long)k.bias_type, k.align_a, k.align_b, k.align_d, (long long)k.a_type,
                                          (long long)k.b_type, k.fast_accum, k.amax_d, k.align_aux};
    for (int i = 0; i < GEMM_KEY_FIELDS; i++) f[i] = v[i];
}
static inline MatmulKey gemm_key_from(const long long f[GEMM_KEY_FIELDS]) {
    MatmulKey k;
    k.m = (int)f[0]; k.n = (int)f[1]; k.k = (int)f[2];
    k.trans_a = f[3] != 0; k.trans_b = f[4] != 0;
    k.epilogue = (cublasLtEpilogue_t)f[5];
    k.d_type = (cudaDataType_t)f[6]; k.bias_type = (cudaDataType_t)f[7];
    k.align_a = (uint32_t)f[8]; k.align_b = (uint32_t)f[9]; k.align_d = (uint32_t)f[10];
    k.a_type = (cudaDataType_t)f[11]; k.b_type = (cudaDataType_t)f[12];
    k.fast_accum = f[13] != 0; k.amax_d = f[14] != 0;
    k.align_aux = (uint32_t)f[15];
    return k;
}

static const char GEMM_ALGOS_DEVICE[] = "# device: ";

// The GPU and the cuBLASLt of this run, as a FILE records them: "NVIDIA H100 80GB HBM3, cuBLASLt 130000".
static inline std::string gemm_algos_device(const char* gpu) {
    return std::string(gpu) + ", cuBLASLt " + std::to_string((unsigned long long)cublasLtGetVersion());
}

// FILE's records: every non-comment line must hold exactly the 16 integers, ':', 8 unsigned integers, and no key twice.
// *recorded_on: its "# device:" line's text ("" where it has none).
static inline std::vector<MatmulRecord> gemm_algos_read(const std::string& path, std::string* recorded_on) {
    std::vector<MatmulRecord> replay;
    std::ifstream in(path);
    if (!in) die("flag --gemm-algos: cannot read '%s' (expected heuristic, tune or a file a tune run wrote)", path.c_str());
    std::string line;
    for (int no = 1; std::getline(in, line); no++) {
        if (line.rfind(GEMM_ALGOS_DEVICE, 0) == 0) *recorded_on = line.substr(sizeof(GEMM_ALGOS_DEVICE) - 1);
        const size_t hash = line.find('#');
        if (hash != std::string::npos) line.resize(hash);
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        std::istringstream ls(line);
        long long f[GEMM_KEY_FIELDS];
        std::string colon, extra;
        MatmulRecord r;
        bool ok = true;
        for (int i = 0; i < GEMM_KEY_FIELDS && ok; i++) ok = (bool)(ls >> f[i]);
        ok = ok && (ls >> colon) && colon == ":";
        for (int i = 0; i < 8 && ok; i++) {
            std::string w;
            ok = (bool)(ls >> w) && w.find_first_not_of("0123456789") == std::string::npos;
            if (ok) {
                errno = 0;
                r.algo.data[i] = strtoull(w.c_str(), nullptr, 10);
                ok = errno == 0;
            }
        }
        if (!ok || (ls >> extra))
            die("--gemm-algos %s:%d: expected 16 integers (the GEMM's key), ':' and 8 unsigned integers (its algorithm), "
                "got '%.120s'", path.c_str(), no, line.c_str());
        bool in_range = true;
        for (int i : {0, 1, 2}) in_range = in_range && f[i] >= 1 && f[i] <= INT32_MAX;                // m n k
        for (int i : {3, 4, 13, 14}) in_range = in_range && (f[i] == 0 || f[i] == 1);               // the flags
        for (int i : {5, 6, 7, 11, 12}) in_range = in_range && f[i] >= 0 && f[i] <= 1024;           // enums
        for (int i : {8, 9, 10, 15}) in_range = in_range && f[i] >= 0 && f[i] <= 256 && !(f[i] & (f[i] - 1));  // alignments
        if (!in_range)
            die("--gemm-algos %s:%d: a field out of range (m, n, k from 1; trans and flags 0 or 1; alignments powers of "
                "two up to 256): '%.120s'", path.c_str(), no, line.c_str());
        r.key = gemm_key_from(f);
        for (const MatmulRecord& o : replay)
            if (o.key == r.key) die("--gemm-algos %s:%d: the GEMM m=%lld n=%lld k=%lld is recorded twice", path.c_str(), no,
                                    f[0], f[1], f[2]);
        replay.push_back(r);
    }
    if (replay.empty()) die("--gemm-algos %s: no GEMM recorded in it", path.c_str());
    return replay;
}

static inline GemmAlgos gemm_algos_parse(const std::string& v) {
    GemmAlgos g;
    if (v == "tune") g.mode = GEMM_ALGOS_TUNE;
    else if (v != "heuristic") {
        g.mode = GEMM_ALGOS_FILE;
        g.path = v;
        g.replay = gemm_algos_read(v, &g.recorded_on);
    }
    return g;
}

static inline void gemm_algos_check_device(const GemmAlgos& g, const char* gpu) {
    if (g.mode != GEMM_ALGOS_FILE) return;
    const std::string here = gemm_algos_device(gpu);
    if (g.recorded_on == here) return;
    printf("note: --gemm-algos %s was timed on %s; this run has %s: cuBLASLt here may refuse one of its algorithms "
           "(the run then stops, naming the GEMM) or run it slower than its own choice (--gemm-algos tune times them "
           "on this GPU)\n",
           g.path.c_str(), g.recorded_on.empty() ? "a device it does not name" : g.recorded_on.c_str(), here.c_str());
}

static inline std::vector<MatmulRecord> gemm_algos_records(const MatmulContext* ctx) {
    std::vector<MatmulRecord> out;
    for (const MatmulAlgo& a : ctx->algos)
        if (a.chosen >= 0) out.push_back({a.key, a.algos[a.chosen]});
    return out;
}

// Every rank's records on every rank, through sums of doubles (comm_host_sum, as memory_rows_gather): a record is its
// key's 16 fields and the algorithm's 8 words, each word as two exact 32-bit halves; rank r fills its own rows of a
// zeroed [ranks][most records][48] table. A key recorded by several ranks keeps the lowest rank's algorithm.
template <typename CommT>
static inline std::vector<MatmulRecord> gemm_algos_gather(const CommT& world, int rank, const std::vector<MatmulRecord>& mine) {
    const int W = 2 * (GEMM_KEY_FIELDS + 8);
    double most = (double)mine.size();
    comm_host_max(world, &most, 1);
    const size_t per = (size_t)most, row = (size_t)W * per + 1;  // a rank's records, then its count
    std::vector<double> all(row * (size_t)world.size, 0.0);
    auto put = [](double* p, uint64_t w) { p[0] = (double)(w & 0xFFFFFFFFu), p[1] = (double)(w >> 32); };
    auto get = [](const double* p) { return (uint64_t)p[0] | ((uint64_t)p[1] << 32); };
    for (size_t j = 0; j < mine.size(); j++) {
        double* p = all.data() + row * rank + (size_t)W * j;
        long long k[GEMM_KEY_FIELDS];
        gemm_key_fields(mine[j].key, k);
        for (int i = 0; i < GEMM_KEY_FIELDS; i++) put(p + 2 * i, (uint64_t)k[i]);
        for (int i = 0; i < 8; i++) put(p + 2 * (GEMM_KEY_FIELDS + i), (uint64_t)mine[j].algo.data[i]);
    }
    all[row * rank + row - 1] = (double)mine.size();
    comm_host_sum(world, all.data(), all.size());
    std::vector<MatmulRecord> out;
    for (int r = 0; r < world.size; r++)
        for (size_t j = 0; j < (size_t)all[row * r + row - 1]; j++) {
            const double* p = all.data() + row * r + (size_t)W * j;
            long long k[GEMM_KEY_FIELDS];
            for (int i = 0; i < GEMM_KEY_FIELDS; i++) k[i] = (long long)get(p + 2 * i);
            MatmulRecord rec;
            rec.key = gemm_key_from(k);
            for (int i = 0; i < 8; i++) rec.algo.data[i] = get(p + 2 * (GEMM_KEY_FIELDS + i));
            bool seen = false;
            for (const MatmulRecord& o : out) seen = seen || o.key == rec.key;
            if (!seen) out.push_back(rec);
        }
    return out;
}

static inline void gemm_algos_write(const std::vector<MatmulRecord>& records, const std::string& path, const char* gpu) {
    FILE* f = fopen(path.c_str(), "w");
    if (!f) die("cannot write %s", path_label(path).c_str());
    fprintf(f, "# train_gpt --gemm-algos: one cuBLASLt algorithm per GEMM (llmc/matmul_algos.cuh): m n k trans_a trans_b "
               "epilogue d_type bias_type align_a align_b align_d a_type b_type fast_accum amax_d align_aux : algo[8]\n");
    fprintf(f, "%s%s\n", GEMM_ALGOS_DEVICE, gemm_algos_device(gpu).c_str());
    for (const MatmulRecord& r : records) {
        long long k[GEMM_KEY_FIELDS];
        gemm_key_fields(r.key, k);
        for (int i = 0; i < GEMM_KEY_FIELDS; i++) fprintf(f, "%lld ", k[i]);
        fprintf(f, ":");
        for (int i = 0; i < 8; i++) fprintf(f, " %llu", (unsigned long long)r.algo.data[i]);
        fprintf(f, "\n");
    }
    if (fclose(f) != 0) die("cannot write %s", path_label(path).c_str());
}

static inline const char* gemm_epilogue_name(cublasLtEpilogue_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT: return "-";
        case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
        case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
        case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
        case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
        default: return "other";
    }
}

static inline void gemm_algos_print(const MatmulContext* ctx) {
    const GemmAlgos& g = ctx->gemm_algos;
    const char* mode = g.mode == GEMM_ALGOS_TUNE ? "tune" : g.mode == GEMM_ALGOS_FILE ? g.path.c_str()
                                                                                            : "heuristic";
    int n = 0;
    for (const MatmulAlgo& a : ctx->algos) n += a.chosen >= 0;
    printf("GEMM algorithms (--gemm-algos %s), %d GEMMs of the first step (m n k: cuBLASLt's column-major D[m,n] = "
           "op(A)[m,k] op(B)[k,n]):\n", mode, n);
    printf("  %6s %6s %6s  op  %-22s %-13s  %-9s %-12s %9s %8s  %s\n", "m", "n", "k", "A x B -> D", "epilogue", "how",
           "algorithm", "ms", "TFLOP/s", "the heuristic's first: ms, TFLOP/s");
    for (const MatmulAlgo& a : ctx->algos) {
        if (a.chosen < 0) continue;
        const MatmulKey& k = a.key;
        const double flop = 2.0 * k.m * k.n * k.k;
        const std::string types = std::string(cuda_type_name(k.a_type)) + " x " + cuda_type_name(k.b_type) + " -> " +
                                  cuda_type_name(k.d_type);
        char pick[32], tail[64] = "";
        snprintf(pick, sizeof(pick), "%d of %d", a.chosen + 1, (int)a.algos.size());
        auto tflops = [&](float ms) { return ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0; };
        if (std::string(a.source) == "tuned" && a.ms_first > 0)
            snprintf(tail, sizeof(tail), "%9.4f %8.1f  %.4f, %.1f", a.ms, tflops(a.ms), a.ms_first, tflops(a.ms_first));
        else if (std::string(a.source) == "tuned")
            snprintf(tail, sizeof(tail), "%9.4f %8.1f  refused", a.ms, tflops(a.ms));
        else snprintf(tail, sizeof(tail), "%9s %8s  -", "-", "-");
        printf("  %6d %6d %6d  %c%c  %-22s %-13s  %-9s %-12s %s\n", k.m, k.n, k.k, k.trans_a ? 'T' : 'N',
               k.trans_b ? 'T' : 'N', types.c_str(), gemm_epilogue_name(k.epilogue), a.source, pick, tail);
    }
}
