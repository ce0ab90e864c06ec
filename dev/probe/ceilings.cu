// dev/probe/ceilings.cu: measured performance ceilings of one GPU, the figures kernels are judged by.
//   1. device-to-device copy bandwidth on a buffer far larger than L2: a vectorized copy kernel and
//      cudaMemcpyAsync; GB/s counts bytes read plus bytes written.
//   2. cuBLASLt GEMM throughput, bf16 (fp32 accumulate) and fp8 E4M3 (per-tensor scales, TN layout,
//      bf16 output by default), at 8192^3 and at the forward GEMMs of gpt3_1.3b / gpt3_6.7b training
//      plus the two backward GEMMs of fc1. TFLOP/s = 2*M*N*K / time, and the fraction of dense peak.
// The copy measurement lives in dev/cuda/ceilings.h (the dev/cuda harness measures the same ceiling).
// Every figure is the median of many runs timed with CUDA events after warm-up, on random data.
// GEMM dimensions are cuBLAS's column-major M, N, K: the trainer's row-major out(BT, OC) = in(BT, C) W(OC, C)^T
// is D(M=OC, N=BT) = op(A)(OC, C) op(B)(C, BT) with A = W transposed ("T") and B = in ("N"), K = C.
// Usage: ceilings [--quick] [--json FILE] [--device-info] [--help] (see usage() for all flags).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "llmc/utils.h"
#include "llmc/cuda_common.cuh"
#include "dev/cuda/ceilings.h"

static const size_t GEMM_WORKSPACE_BYTES = 32ull << 20;  // 32 MiB, what the trainer gives cuBLASLt
static const int HEURISTIC_REQUEST = 8;                   // algorithms asked from the heuristic

struct Options {
    bool quick = false;
    const char* json_path = nullptr;
    size_t copy_mib = 2048;   // copy buffer size (each of source and destination)
    int warmup = 10;          // untimed runs before timing
    int reps = 50;            // timed runs; the median is reported
    int algos_to_time = 4;    // how many of the heuristic's top algorithms are timed to pick the best
    double peak_bf16 = 0.0;   // dense peak TFLOP/s; 0 = pick from the device
    double peak_fp8 = 0.0;
    bool fp8_out_e4m3 = false;  // fp8 GEMM output: bf16 (default) or E4M3 with a D scale
};

static void usage(FILE* out) {
    fprintf(out,
        "usage: ceilings [options]\n"
        "  Measures device copy bandwidth and cuBLASLt bf16 / fp8 GEMM throughput on this GPU.\n"
        "  --quick            short run: 512 MiB copy, 2 warm-up + 5 timed runs, heuristic's first algorithm\n"
        "  --json FILE        also write every figure to FILE as JSON\n"
        "  --copy-mib N       copy buffer size in MiB (default 2048; source and destination each)\n"
        "  --reps N           timed runs per figure (default 50; median reported)\n"
        "  --algos N          heuristic algorithms timed per GEMM, best kept (default 4)\n"
        "  --fp8-out TYPE     fp8 GEMM output type: bf16 (default) or e4m3 (uses a D scale pointer)\n"
        "  --peak-bf16 T      dense bf16 peak in TFLOP/s for the %%peak column (default: from the device)\n"
        "  --peak-fp8 T       dense fp8 peak in TFLOP/s\n"
        "  --device-info      print the device properties and exit\n"
        "  --help             this text\n");
}

static double parse_double(const char* flag, const char* value) {
    char* end = nullptr;
    double v = strtod(value, &end);
    if (*value == '\0' || *end != '\0' || v <= 0.0) die("%s expects a positive number, got '%s'", flag, value);
    return v;
}

// ----------------------------------------------------------------------------------------------
// results (CopyResult and measure_copy live in dev/cuda/ceilings.h)

struct GemmShape {
    std::string name;   // e.g. "fc1", "fc1_dgrad"
    std::string model;  // "square", "gpt3_1.3b", "gpt3_6.7b"
    int m, n, k;        // cuBLAS column-major dimensions
    cublasOperation_t transa, transb;  // bf16 layout (the trainer's); fp8 always runs TN
};

struct GemmResult {
    GemmShape shape;
    std::string dtype;   // "bf16", "fp8e4m3", "fp8e4m3 fast-acc"
    std::string layout;  // "TN", "NN", "NT"
    std::string status;  // "ok", or why there is no figure
    int algos_tried = 0;
    double ms = 0.0, tflops = 0.0, peak_fraction = 0.0;
    bool check_ok = false;
    double check_err = 0.0;  // largest |D - reference| / tolerance over the sampled entries (see check_gemm)
};

// forward GEMMs of one GPT-3 block and the LM head, plus fc1's two backward GEMMs, for bt tokens per micro-batch
static void add_model_shapes(std::vector<GemmShape>* shapes, const char* model, int C, int ffn, int vocab, int bt) {
    const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
    shapes->push_back({"qkv", model, 3 * C, bt, C, T, N});       // qkv(BT, 3C) = x(BT, C) Wqkv(3C, C)^T
    shapes->push_back({"attn_out", model, C, bt, C, T, N});      // y(BT, C) = att(BT, C) Wo(C, C)^T
    shapes->push_back({"fc1", model, ffn, bt, C, T, N});         // h(BT, F) = x(BT, C) W1(F, C)^T
    shapes->push_back({"fc2", model, C, bt, ffn, T, N});         // y(BT, C) = h(BT, F) W2(C, F)^T
    shapes->push_back({"lm_head", model, vocab, bt, C, T, N});   // logits(BT, V) = x(BT, C) Wte(V, C)^T
    shapes->push_back({"fc1_dgrad", model, C, bt, ffn, N, N});   // dx(BT, C) = dh(BT, F) W1(F, C)
    shapes->push_back({"fc1_wgrad", model, C, ffn, bt, N, T});   // dW1(F, C) = dh(BT, F)^T x(BT, C)
}

static const char* layout_name(cublasOperation_t ta, cublasOperation_t tb) {
    if (ta == CUBLAS_OP_T && tb == CUBLAS_OP_N) return "TN";
    if (ta == CUBLAS_OP_N && tb == CUBLAS_OP_N) return "NN";
    if (ta == CUBLAS_OP_N && tb == CUBLAS_OP_T) return "NT";
    return "TT";
}

// ----------------------------------------------------------------------------------------------
// copy bandwidth


// ----------------------------------------------------------------------------------------------
// GEMM

struct GemmBuffers {
    void* a;          // bf16 A, max m*k elements
    void* b;          // bf16 B, max k*n elements
    void* a8;         // fp8 A, max m*k elements (null when fp8 is skipped)
    void* b8;         // fp8 B
    void* d;          // bf16 D, max m*n elements (also C; beta = 0 so C is never read)
    void* d8;         // fp8 D when --fp8-out e4m3
    float* scales;    // device: [a_scale, b_scale, d_scale], all 1
    void* workspace;  // GEMM_WORKSPACE_BYTES
};

// element (row, col) of op(X) with X stored column-major, leading dimension ld
static size_t op_index(cublasOperation_t t, int row, int col, int ld) {
    return t == CUBLAS_OP_N ? (size_t)row + (size_t)col * ld : (size_t)col + (size_t)row * ld;
}

static float load_elem(const void* base, size_t idx, bool fp8) {
    if (fp8) {
        __nv_fp8_e4m3 v;
        cudaCheck(cudaMemcpy(&v, (const uint8_t*)base + idx, 1, cudaMemcpyDeviceToHost));
        return (float)v;
    }
    __nv_bfloat16 v;
    cudaCheck(cudaMemcpy(&v, (const __nv_bfloat16*)base + idx, 2, cudaMemcpyDeviceToHost));
    return __bfloat162float(v);
}

// Compares a few entries of D with a host dot product of the same (rounded) inputs.
// Returns max |D - ref| / tol, where tol = 2^-10 * sum |a*b| (accumulation order and precision) + r * |ref|
// (rounding of D: r = 2^-7 for bf16, 2^-3 for e4m3, twice their unit roundoff); <= 1 passes. With K >= 2048
// random inputs, a wrong layout or garbage output misses this by a wide margin.
static double check_gemm(const GemmShape& s, cublasOperation_t ta, cublasOperation_t tb, bool fp8,
                         const void* A, const void* B, const void* D, bool d_fp8) {
    int lda = ta == CUBLAS_OP_N ? s.m : s.k;
    int ldb = tb == CUBLAS_OP_N ? s.k : s.n;
    const int samples[3][2] = {{0, 0}, {s.m - 1, s.n - 1}, {s.m / 2, s.n / 3}};
    size_t eb = fp8 ? 1 : 2;
    std::vector<uint8_t> row((size_t)s.k * eb), col((size_t)s.k * eb);
    double worst = 0.0;
    for (const auto& ij : samples) {
        int i = ij[0], j = ij[1];
        // row i of op(A) and column j of op(B): k elements each, strided or contiguous
        size_t a_step = ta == CUBLAS_OP_N ? (size_t)lda : 1, b_step = tb == CUBLAS_OP_N ? 1 : (size_t)ldb;
        cudaCheck(cudaMemcpy2D(row.data(), eb, (const uint8_t*)A + op_index(ta, i, 0, lda) * eb, a_step * eb,
                               eb, s.k, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy2D(col.data(), eb, (const uint8_t*)B + op_index(tb, 0, j, ldb) * eb, b_step * eb,
                               eb, s.k, cudaMemcpyDeviceToHost));
        double ref = 0.0, mag = 0.0;
        for (int p = 0; p < s.k; p++) {
            double x, y;
            if (fp8) {
                x = (float)((const __nv_fp8_e4m3*)row.data())[p];
                y = (float)((const __nv_fp8_e4m3*)col.data())[p];
            } else {
                x = __bfloat162float(((const __nv_bfloat16*)row.data())[p]);
                y = __bfloat162float(((const __nv_bfloat16*)col.data())[p]);
            }
            ref += x * y;
            mag += fabs(x * y);
        }
        double got = load_elem(D, (size_t)i + (size_t)j * s.m, d_fp8);
        double tol = mag / 1024.0 + fabs(ref) * (d_fp8 ? 0.125 : 1.0 / 128.0) + 1e-6;
        worst = std::max(worst, fabs(got - ref) / tol);
    }
    return worst;
}

// Runs one GEMM configuration: heuristic, pick the fastest of the top algorithms, then time it.
static GemmResult run_gemm(cublasLtHandle_t lt, const GemmShape& s, bool fp8, bool fast_accum, const Options& opt,
                           const GemmBuffers& buf, cudaStream_t stream) {
    GemmResult res;
    res.shape = s;
    cublasOperation_t ta = fp8 ? CUBLAS_OP_T : s.transa, tb = fp8 ? CUBLAS_OP_N : s.transb;
    res.dtype = fp8 ? (fast_accum ? "fp8e4m3 fast-acc" : "fp8e4m3") : "bf16";
    res.layout = layout_name(ta, tb);
    if (fp8 && (s.m % 16 || s.n % 16 || s.k % 16)) {
        res.status = "skipped: fp8 needs M, N, K multiples of 16";
        return res;
    }
    bool d_fp8 = fp8 && opt.fp8_out_e4m3;
    cudaDataType_t ab_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    cudaDataType_t d_type = d_fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    int lda = ta == CUBLAS_OP_N ? s.m : s.k;
    int ldb = tb == CUBLAS_OP_N ? s.k : s.n;
    const void* A = fp8 ? buf.a8 : buf.a;
    const void* B = fp8 ? buf.b8 : buf.b;
    void* D = d_fp8 ? buf.d8 : buf.d;

    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (fp8) {
        // per-tensor scales, device pointers to fp32 (the compute type); D's scale only applies to an fp8 D
        const float* a_scale = buf.scales;
        const float* b_scale = buf.scales + 1;
        const float* d_scale = buf.scales + 2;
        int8_t fast = fast_accum ? 1 : 0;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
        if (d_fp8)
            cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &d_scale, sizeof(d_scale)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    }
    cublasLtMatrixLayout_t a_desc, b_desc, c_desc, d_desc;
    cublasCheck(cublasLtMatrixLayoutCreate(&a_desc, ab_type, ta == CUBLAS_OP_N ? s.m : s.k, ta == CUBLAS_OP_N ? s.k : s.m, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&b_desc, ab_type, tb == CUBLAS_OP_N ? s.k : s.n, tb == CUBLAS_OP_N ? s.n : s.k, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&c_desc, CUDA_R_16BF, s.m, s.n, s.m));
    cublasCheck(cublasLtMatrixLayoutCreate(&d_desc, d_type, s.m, s.n, s.m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = GEMM_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));

    cublasLtMatmulHeuristicResult_t heur[HEURISTIC_REQUEST];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, a_desc, b_desc, c_desc, d_desc, pref,
                                                       HEURISTIC_REQUEST, heur, &found);
    const float alpha = 1.0f, beta = 0.0f;
    EventTimer timer = event_timer_create();
    // times one algorithm: `warmup` untimed then `reps` timed runs; returns the median ms or -1 on failure
    auto time_algo = [&](const cublasLtMatmulAlgo_t* algo, int warmup, int reps) -> double {
        std::vector<float> times;
        for (int r = 0; r < warmup + reps; r++) {
            event_timer_start(&timer, stream);
            cublasStatus_t s2 = cublasLtMatmul(lt, desc, &alpha, A, a_desc, B, b_desc, &beta, buf.d, c_desc,
                                               D, d_desc, algo, buf.workspace, ws, stream);
            float ms = event_timer_stop(&timer, stream);
            if (s2 != CUBLAS_STATUS_SUCCESS) return -1.0;
            if (r >= warmup) times.push_back(ms);
        }
        return median(times);
    };

    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        res.status = std::string("unsupported: heuristic returned ") +
                     (st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(st) : "no algorithm");
    } else {
        int best = -1;
        double best_ms = 0.0;
        int candidates = std::min(found, opt.algos_to_time);
        for (int a = 0; a < candidates; a++) {
            if (heur[a].state != CUBLAS_STATUS_SUCCESS || heur[a].workspaceSize > ws) continue;
            double ms = candidates == 1 ? 0.0 : time_algo(&heur[a].algo, 2, 5);
            res.algos_tried++;
            if (ms < 0.0) continue;
            if (best < 0 || ms < best_ms) { best = a; best_ms = ms; }
        }
        double ms = best < 0 ? -1.0 : time_algo(&heur[best].algo, opt.warmup, opt.reps);
        if (ms <= 0.0) {
            res.status = "failed: cublasLtMatmul returned an error for every algorithm tried";
        } else {
            res.status = "ok";
            res.ms = ms;
            res.tflops = 2.0 * s.m * s.n * (double)s.k / (ms * 1e-3) / 1e12;
            double peak = fp8 ? opt.peak_fp8 : opt.peak_bf16;
            res.peak_fraction = peak > 0.0 ? res.tflops / peak : 0.0;
            res.check_err = check_gemm(s, ta, tb, fp8, A, B, D, d_fp8);
            res.check_ok = res.check_err <= 1.0;
        }
    }
    event_timer_destroy(&timer);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(a_desc));
    cublasCheck(cublasLtMatrixLayoutDestroy(b_desc));
    cublasCheck(cublasLtMatrixLayoutDestroy(c_desc));
    cublasCheck(cublasLtMatrixLayoutDestroy(d_desc));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return res;
}

// ----------------------------------------------------------------------------------------------
// output

static void print_gemm_row(const GemmResult& r) {
    printf("%-10s %-10s %-17s %-3s %6d %6d %6d  ", r.shape.name.c_str(), r.shape.model.c_str(), r.dtype.c_str(),
           r.layout.c_str(), r.shape.m, r.shape.n, r.shape.k);
    if (r.status != "ok") {
        printf("%s\n", r.status.c_str());
    } else {
        char frac[16] = "-";
        if (r.peak_fraction > 0.0) snprintf(frac, sizeof(frac), "%.1f%%", 100.0 * r.peak_fraction);
        printf("%5d %9.3f %8.1f %7s  ", r.algos_tried, r.ms, r.tflops, frac);
        if (r.check_ok) printf("ok\n");
        else printf("FAILED (error %.1f x tolerance)\n", r.check_err);
    }
    fflush(stdout);
}

static void json_escape(FILE* f, const std::string& s) {
    fputc('"', f);
    for (char c : s) {
        if (c == '"' || c == '\\') fputc('\\', f);
        fputc(c, f);
    }
    fputc('"', f);
}

static void write_json(const char* path, const cudaDeviceProp& prop, const Options& opt, const std::string& peak_label,
                       bool fp8_ok, const std::vector<CopyResult>& copies, const std::vector<GemmResult>& gemms) {
    FILE* f = fopen_check(path, "w");
    fprintf(f, "{\n  \"device\": ");
    json_escape(f, prop.name);
    fprintf(f, ",\n  \"compute_capability\": \"%d.%d\",\n  \"sms\": %d,\n", prop.major, prop.minor, prop.multiProcessorCount);
    fprintf(f, "  \"peak_label\": ");
    json_escape(f, peak_label);
    fprintf(f, ",\n  \"peak_bf16_tflops\": %.1f,\n  \"peak_fp8_tflops\": %.1f,\n", opt.peak_bf16, opt.peak_fp8);
    fprintf(f, "  \"fp8\": \"%s\",\n", fp8_ok ? "measured" : "skipped: needs sm_89+");
    fprintf(f, "  \"warmup\": %d,\n  \"reps\": %d,\n  \"statistic\": \"median\",\n  \"copy\": [\n", opt.warmup, opt.reps);
    for (size_t i = 0; i < copies.size(); i++) {
        fprintf(f, "    {\"method\": ");
        json_escape(f, copies[i].method);
        fprintf(f, ", \"bytes\": %zu, \"ms\": %.5f, \"gb_per_s\": %.1f}%s\n", copies[i].bytes, copies[i].ms,
                copies[i].gbs, i + 1 < copies.size() ? "," : "");
    }
    fprintf(f, "  ],\n  \"gemm\": [\n");
    for (size_t i = 0; i < gemms.size(); i++) {
        const GemmResult& r = gemms[i];
        fprintf(f, "    {\"name\": ");
        json_escape(f, r.shape.name);
        fprintf(f, ", \"model\": ");
        json_escape(f, r.shape.model);
        fprintf(f, ", \"dtype\": ");
        json_escape(f, r.dtype);
        fprintf(f, ", \"layout\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"status\": ", r.layout.c_str(),
                r.shape.m, r.shape.n, r.shape.k);
        json_escape(f, r.status);
        if (r.status == "ok")
            fprintf(f, ", \"ms\": %.5f, \"tflops\": %.2f, \"peak_fraction\": %.4f, \"check\": \"%s\", \"check_error\": %.4f",
                    r.ms, r.tflops, r.peak_fraction, r.check_ok ? "ok" : "failed", r.check_err);
        fprintf(f, "}%s\n", i + 1 < gemms.size() ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose_check(f, path);
}

int main(int argc, char** argv) {
    Options opt;
    bool device_info_only = false;
    bool reps_set = false, algos_set = false, copy_set = false;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) die("%s needs a value (see --help)", a);
            return argv[++i];
        };
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--quick")) opt.quick = true;
        else if (!strcmp(a, "--json")) opt.json_path = value();
        else if (!strcmp(a, "--copy-mib")) { opt.copy_mib = (size_t)parse_long(a, value(), 64, 1 << 20); copy_set = true; }
        else if (!strcmp(a, "--reps")) { opt.reps = (int)parse_long(a, value(), 1, 100000); reps_set = true; }
        else if (!strcmp(a, "--algos")) { opt.algos_to_time = (int)parse_long(a, value(), 1, HEURISTIC_REQUEST); algos_set = true; }
        else if (!strcmp(a, "--peak-bf16")) opt.peak_bf16 = parse_double(a, value());
        else if (!strcmp(a, "--peak-fp8")) opt.peak_fp8 = parse_double(a, value());
        else if (!strcmp(a, "--device-info")) device_info_only = true;
        else if (!strcmp(a, "--fp8-out")) {
            const char* v = value();
            if (!strcmp(v, "bf16")) opt.fp8_out_e4m3 = false;
            else if (!strcmp(v, "e4m3")) opt.fp8_out_e4m3 = true;
            else die("--fp8-out expects bf16 or e4m3, got '%s'", v);
        } else {
            fprintf(stderr, "error: unknown argument '%s'\n", a);
            usage(stderr);
            return 1;
        }
    }
    if (opt.quick) {
        opt.warmup = 2;
        if (!reps_set) opt.reps = 5;
        if (!algos_set) opt.algos_to_time = 1;
        if (!copy_set) opt.copy_mib = 512;
    }

    cuda_require_device();
    int device = 0;
    cudaCheck(cudaSetDevice(device));
    print_device_info(device);
    if (device_info_only) return 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));

    // dense peaks (design section 7): H100/H200 SXM bf16 989, fp8 1979; A100 bf16 312; flags override
    bool peak_given = opt.peak_bf16 > 0.0 || opt.peak_fp8 > 0.0;
    double dev_bf16 = 0.0, dev_fp8 = 0.0;
    std::string peak_label = "unknown for this device (pass --peak-bf16 / --peak-fp8)";
    if (prop.major == 9) { dev_bf16 = 989.0; dev_fp8 = 1979.0; peak_label = "H100/H200 SXM dense"; }
    else if (prop.major == 8 && prop.minor == 0) { dev_bf16 = 312.0; peak_label = "A100 dense"; }
    if (opt.peak_bf16 == 0.0) opt.peak_bf16 = dev_bf16;
    if (opt.peak_fp8 == 0.0) opt.peak_fp8 = dev_fp8;
    if (peak_given) peak_label += ", overridden on the command line";
    else if (prop.major == 9 && (strstr(prop.name, "PCIe") || strstr(prop.name, "NVL")))
        printf("note: %s is not an SXM part; the %%peak column uses SXM peaks unless --peak-bf16/--peak-fp8 are given\n",
               prop.name);
    char bf16_str[32] = "-", fp8_str[32] = "-";
    if (opt.peak_bf16 > 0.0) snprintf(bf16_str, sizeof(bf16_str), "%.0f", opt.peak_bf16);
    if (opt.peak_fp8 > 0.0) snprintf(fp8_str, sizeof(fp8_str), "%.0f", opt.peak_fp8);
    printf("peak: %s (bf16 %s, fp8 %s TFLOP/s)\n", peak_label.c_str(), bf16_str, fp8_str);
    printf("timing: median of %d runs after %d warm-up runs (CUDA events), random data\n\n", opt.reps, opt.warmup);

    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));

    // ---- copy bandwidth
    printf("device copy bandwidth (bytes read + bytes written) / time; L2 is %.0f MiB\n", prop.l2CacheSize / 1048576.0);
    printf("%-22s %10s %10s %10s\n", "method", "MiB", "ms", "GB/s");
    std::vector<CopyResult> copies = measure_copy(opt.copy_mib, opt.warmup, opt.reps, prop.multiProcessorCount, stream);
    for (const CopyResult& c : copies) printf("%-22s %10zu %10.3f %10.1f\n", c.method.c_str(), c.bytes >> 20, c.ms, c.gbs);
    printf("\n");
    fflush(stdout);

    // ---- GEMM shapes: 8192^3, then gpt3_1.3b (C 2048, ffn 8192, B*T = 8*2048) and gpt3_6.7b (C 4096,
    //      ffn 16384, B*T = 4*2048), vocab 50257 padded to 50304
    std::vector<GemmShape> shapes;
    shapes.push_back({"square", "8192^3", 8192, 8192, 8192, CUBLAS_OP_T, CUBLAS_OP_N});
    add_model_shapes(&shapes, "gpt3_1.3b", 2048, 8192, 50304, 8 * 2048);
    add_model_shapes(&shapes, "gpt3_6.7b", 4096, 16384, 50304, 4 * 2048);
    size_t max_a = 0, max_b = 0, max_d = 0;
    for (const GemmShape& s : shapes) {
        max_a = std::max(max_a, (size_t)s.m * s.k);
        max_b = std::max(max_b, (size_t)s.k * s.n);
        max_d = std::max(max_d, (size_t)s.m * s.n);
    }
    bool fp8_ok = prop.major * 10 + prop.minor >= 89;
    GemmBuffers buf = {};
    cudaCheck(cudaMalloc(&buf.a, max_a * 2));
    cudaCheck(cudaMalloc(&buf.b, max_b * 2));
    cudaCheck(cudaMalloc(&buf.d, max_d * 2));
    cudaCheck(cudaMalloc(&buf.workspace, GEMM_WORKSPACE_BYTES));
    cudaCheck(cudaMalloc(&buf.scales, 3 * sizeof(float)));
    const float ones[3] = {1.0f, 1.0f, 1.0f};
    cudaCheck(cudaMemcpy(buf.scales, ones, sizeof(ones), cudaMemcpyHostToDevice));
    int grid = grid_for(prop.multiProcessorCount);
    fill_random_bf16<<<grid, 256, 0, stream>>>((__nv_bfloat16*)buf.a, max_a, 11);
    fill_random_bf16<<<grid, 256, 0, stream>>>((__nv_bfloat16*)buf.b, max_b, 22);
    cudaCheck(cudaGetLastError());
    if (fp8_ok) {
        cudaCheck(cudaMalloc(&buf.a8, max_a));
        cudaCheck(cudaMalloc(&buf.b8, max_b));
        if (opt.fp8_out_e4m3) cudaCheck(cudaMalloc(&buf.d8, max_d));
        fill_random_fp8<<<grid, 256, 0, stream>>>((__nv_fp8_e4m3*)buf.a8, max_a, 33);
        fill_random_fp8<<<grid, 256, 0, stream>>>((__nv_fp8_e4m3*)buf.b8, max_b, 44);
        cudaCheck(cudaGetLastError());
    }
    cudaCheck(cudaStreamSynchronize(stream));

    cublasLtHandle_t lt;
    cublasCheck(cublasLtCreate(&lt));
    printf("cuBLASLt GEMM, fp32 accumulate, workspace 32 MiB, alpha 1, beta 0; M N K are cuBLAS column-major;\n"
           "bf16 runs the trainer's layout, fp8 E4M3 runs TN (A, B scales; output %s); best of %d heuristic algorithm(s);\n"
           "check = sampled entries of D against a host dot product\n",
           opt.fp8_out_e4m3 ? "e4m3 with D scale" : "bf16", opt.algos_to_time);
    printf("%-10s %-10s %-17s %-3s %6s %6s %6s  %5s %9s %8s %7s  %s\n", "gemm", "model", "dtype", "lay", "M", "N", "K",
           "algos", "ms", "TFLOP/s", "%peak", "check");
    std::vector<GemmResult> gemms;
    bool any_check_failed = false;
    for (int pass = 0; pass < 3; pass++) {  // bf16, fp8, fp8 with fast accumulation (square only)
        bool fp8 = pass > 0, fast = pass == 2;
        if (fp8 && !fp8_ok) {
            if (pass == 1) printf("fp8 GEMMs skipped: needs sm_89+ (this device is sm_%d%d)\n", prop.major, prop.minor);
            continue;
        }
        for (const GemmShape& s : shapes) {
            if (fast && s.model != "8192^3") continue;
            GemmResult r = run_gemm(lt, s, fp8, fast, opt, buf, stream);
            print_gemm_row(r);
            if (r.status == "ok" && !r.check_ok) any_check_failed = true;
            gemms.push_back(r);
        }
    }
    if (opt.json_path) {
        write_json(opt.json_path, prop, opt, peak_label, fp8_ok, copies, gemms);
        printf("\nwrote %s\n", opt.json_path);
    }

    cublasCheck(cublasLtDestroy(lt));
    cudaCheck(cudaFree(buf.a));
    cudaCheck(cudaFree(buf.b));
    cudaCheck(cudaFree(buf.d));
    cudaCheck(cudaFree(buf.workspace));
    cudaCheck(cudaFree(buf.scales));
    if (buf.a8) cudaCheck(cudaFree(buf.a8));
    if (buf.b8) cudaCheck(cudaFree(buf.b8));
    if (buf.d8) cudaCheck(cudaFree(buf.d8));
    cudaCheck(cudaStreamDestroy(stream));
    if (any_check_failed) {
        fprintf(stderr, "error: a GEMM result differs from the host reference (check column); its timing is not trustworthy\n");
        return 1;
    }
    return 0;
}
