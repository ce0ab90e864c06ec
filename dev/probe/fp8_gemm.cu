// dev/probe/fp8_gemm.cu: why cuBLASLt refuses the fp8 GEMMs on this machine, pinned in under a minute.
// On the one H100 run, every fp8 GEMM (train_gpt --fp8, test_fp8, ceilings) got CUBLAS_STATUS_NOT_SUPPORTED from
// cublasLtMatmul although the heuristic had offered an algorithm. This program prints what was loaded (cuBLASLt's,
// the runtime's and the driver's versions, the file libcublasLt came from: dladdr and /proc/self/maps), then runs one
// fp8 GEMM as PyTorch's scaled_mm sets it up (E4M3 x E4M3 -> bf16, "TN", compute and scale type 32F, C = none at
// beta 0, each scale in an allocation of its own, fast accumulation off, 32 MiB workspace, the alignment
// preferences given), and then variants that each change one thing:
//   c_is_d        C = D, the same descriptor (as the trainer did)        c_is_d_desc2  C = D, an equal descriptor of its own
//   c_separate    C a buffer of its own (zeros), beta 0                   beta1         C = D and beta 1 (accumulating)
//   scale_off4    both scales in one allocation, B's 4 bytes after A's    no_scales     no scale pointers
//   fast_accum    fast accumulation on                                    ws0, ws1m     workspace 0 and 1 MiB
//   no_align_pref no alignment preferences                                bias          the BIAS epilogue (bf16 bias)
//   e5m2_e4m3     an E5M2 operand (the backward's)                        out_fp32      fp32 output
//   out_fp8       E4M3 output with a D scale and the amax of D            bf16_control  the same GEMM in bf16
// For each: the heuristic's status and the number of algorithms it offered; for each algorithm, what
// cublasLtMatmulAlgoCheck and the call itself answered; for the first that ran, a host check of 64 sampled
// elements against the product in double. Last, `--trainer` runs the trainer's own call (llmc/matmul_fp8.cuh:
// every algorithm in order, the first that runs kept, a message naming the refusals otherwise).
// Run it twice on a GPU machine: as it is, and with PyTorch's libcublasLt first (LD_LIBRARY_PATH), both under
// CUBLASLT_LOG_LEVEL=5, so that cuBLASLt's own trace can be diffed against torch._scaled_mm's (docs/fp8.md).
//   usage: fp8_gemm [--m M] [--n N] [--k K] [--only NAME] [--trainer] [--help]
// Exit status: 0 when the PyTorch-style call ran and its samples check, 1 otherwise (the table is printed either way).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "llmc/utils.h"
#include "llmc/cuda_common.cuh"
#include "llmc/matmul_fp8.cuh"

static const size_t WORKSPACE = 32ull << 20;

struct Variant {
    const char* name;
    cudaDataType_t a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E4M3, d_type = CUDA_R_16BF;
    int c_mode = 0;        // 0 none, 1 C = D same descriptor, 2 C = D equal descriptor, 3 a buffer of its own
    float beta = 0.0f;
    int scales = 0;        // 0 separate allocations, 1 one allocation with B's 4 bytes after A's, 2 none
    int8_t fast_accum = 0;
    size_t workspace = WORKSPACE;
    bool align_pref = true, bias = false, d_scale = false;
};

static std::vector<Variant> variants() {
    std::vector<Variant> v;
    auto add = [&](const char* name) { v.push_back(Variant()); v.back().name = name; return &v.back(); };
    add("pytorch");
    add("c_is_d")->c_mode = 1;
    add("c_is_d_desc2")->c_mode = 2;
    add("c_separate")->c_mode = 3;
    { Variant* x = add("beta1"); x->c_mode = 1; x->beta = 1.0f; }
    add("scale_off4")->scales = 1;
    add("no_scales")->scales = 2;
    add("fast_accum")->fast_accum = 1;
    add("ws0")->workspace = 0;
    add("ws1m")->workspace = 1 << 20;
    add("no_align_pref")->align_pref = false;
    add("bias")->bias = true;
    add("e5m2_e4m3")->b_type = CUDA_R_8F_E5M2;
    add("out_fp32")->d_type = CUDA_R_32F;
    { Variant* x = add("out_fp8"); x->d_type = CUDA_R_8F_E4M3; x->d_scale = true; }
    { Variant* x = add("bf16_control"); x->a_type = x->b_type = CUDA_R_16BF; x->scales = 2; }
    return v;
}

static size_t type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 1; }
static double host_value(const std::vector<uint8_t>& raw, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_8F_E4M3) { __nv_fp8_e4m3 q; memcpy(&q, &raw[i], 1); return (double)(float)q; }
    if (t == CUDA_R_8F_E5M2) { __nv_fp8_e5m2 q; memcpy(&q, &raw[i], 1); return (double)(float)q; }
    if (t == CUDA_R_16BF) { __nv_bfloat16 q; memcpy(&q, &raw[2 * i], 2); return (double)(float)q; }
    float f;
    memcpy(&f, &raw[4 * i], 4);
    return f;
}
// random operand bytes of type t: values in about [-2, 2] (fp8 codes of small magnitude, bf16 from floats)
static std::vector<uint8_t> random_operand(cudaDataType_t t, size_t n, uint64_t seed) {
    std::vector<uint8_t> raw(n * type_size(t));
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float x = (float)((s >> 40) & 0xffff) / 16384.0f - 2.0f;
        if (t == CUDA_R_8F_E4M3) { __nv_fp8_e4m3 q(x); memcpy(&raw[i], &q, 1); }
        else if (t == CUDA_R_8F_E5M2) { __nv_fp8_e5m2 q(x); memcpy(&raw[i], &q, 1); }
        else { __nv_bfloat16 q(x); memcpy(&raw[2 * i], &q, 2); }
    }
    return raw;
}

static const char* status_name(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "ok" : s == CUBLAS_STATUS_NOT_SUPPORTED ? "NOT_SUPPORTED"
         : s == CUBLAS_STATUS_INVALID_VALUE ? "INVALID_VALUE" : "other";
}

// One variant at m x n x k; prints its row. Returns whether an algorithm ran and its samples checked.
static bool run_variant(cublasLtHandle_t lt, const Variant& v, int m, int n, int k) {
    const size_t na = (size_t)k * m, nb = (size_t)k * n, nd = (size_t)m * n;
    const std::vector<uint8_t> ha = random_operand(v.a_type, na, 1), hb = random_operand(v.b_type, nb, 2);
    void *a, *b, *d, *c = nullptr, *ws = nullptr;
    float *scales = nullptr, *sa = nullptr, *sb = nullptr, *dscale = nullptr, *amax = nullptr;
    __nv_bfloat16* bias = nullptr;
    cudaCheck(cudaMalloc(&a, ha.size()));
    cudaCheck(cudaMalloc(&b, hb.size()));
    cudaCheck(cudaMalloc(&d, nd * type_size(v.d_type)));
    cudaCheck(cudaMemcpy(a, ha.data(), ha.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(b, hb.data(), hb.size(), cudaMemcpyHostToDevice));
    const float scale_a = 0.5f, scale_b = 0.25f, one = 1.0f;
    if (v.scales == 0) {
        cudaCheck(cudaMalloc(&sa, 256));
        cudaCheck(cudaMalloc(&sb, 256));
    } else if (v.scales == 1) {
        cudaCheck(cudaMalloc(&scales, 256));
        sa = scales;
        sb = scales + 1;
    }
    if (sa) cudaCheck(cudaMemcpy(sa, &scale_a, 4, cudaMemcpyHostToDevice));
    if (sb) cudaCheck(cudaMemcpy(sb, &scale_b, 4, cudaMemcpyHostToDevice));
    if (v.workspace) cudaCheck(cudaMalloc(&ws, v.workspace));
    const cudaDataType_t c_type = v.d_type == CUDA_R_8F_E4M3 ? CUDA_R_16BF : v.d_type;
    if (v.c_mode == 3) {
        cudaCheck(cudaMalloc(&c, nd * type_size(c_type)));
        cudaCheck(cudaMemset(c, 0, nd * type_size(c_type)));
    }
    cudaCheck(cudaMemset(d, 0, nd * type_size(v.d_type)));

    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const bool fp8 = v.a_type != CUDA_R_16BF;
    if (fp8) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &v.fast_accum, 1));
    if (sa) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)));
    if (sb) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)));
    if (v.bias) {
        cudaCheck(cudaMalloc(&bias, (size_t)m * 2));
        cudaCheck(cudaMemset(bias, 0, (size_t)m * 2));
        const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        const cudaDataType_t bt = CUDA_R_16BF;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (v.d_scale) {
        cudaCheck(cudaMalloc(&dscale, 256));
        cudaCheck(cudaMalloc(&amax, 256));
        cudaCheck(cudaMemcpy(dscale, &one, 4, cudaMemcpyHostToDevice));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &dscale, sizeof(dscale)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax, sizeof(amax)));
    }
    cublasLtMatrixLayout_t la, lb, lc, lc2, ld;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, v.a_type, k, m, k));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, v.b_type, k, n, k));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, v.d_type, m, n, m));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc2, c_type, m, n, m));
    lc = v.c_mode == 1 && c_type == v.d_type ? ld : lc2;
    const void* c_ptr = v.c_mode == 0 ? nullptr : v.c_mode == 3 ? c : d;

    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &v.workspace,
                                                     sizeof(v.workspace)));
    if (v.align_pref) {
        const uint32_t al = 256;
        const cublasLtMatmulPreferenceAttributes_t which[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4; i++) cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al, sizeof(al)));
    }
    cublasLtMatmulHeuristicResult_t heur[8];
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 8, heur, &found);
    std::string calls;
    int ran = -1;
    const float alpha = 1.0f;
    for (int i = 0; hs == CUBLAS_STATUS_SUCCESS && i < found && ran < 0; i++) {
        cublasLtMatmulHeuristicResult_t chk;
        const cublasStatus_t cs = cublasLtMatmulAlgoCheck(lt, desc, la, lb, lc, ld, &heur[i].algo, &chk);
        const cublasStatus_t ms = cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &v.beta, c_ptr, lc, d, ld, &heur[i].algo,
                                                 ws, v.workspace, 0);
        const cudaError_t ce = cudaDeviceSynchronize();
        calls += std::string(calls.empty() ? "" : ", ") + std::to_string(i + 1) + ": check " + status_name(cs) + " call " +
                 status_name(ms) + (ms == CUBLAS_STATUS_SUCCESS || (int)ms == 0 ? "" : "(" + std::to_string((int)ms) + ")") +
                 (ce == cudaSuccess ? "" : std::string(" cuda ") + cudaGetErrorString(ce));
        if (ms == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess) ran = i;
    }
    // 64 sampled elements against the product in double (D = scale_a scale_b A^T B; C is zero or D's zeros)
    double worst = -1;
    if (ran >= 0) {
        std::vector<uint8_t> hd(nd * type_size(v.d_type));
        cudaCheck(cudaMemcpy(hd.data(), d, hd.size(), cudaMemcpyDeviceToHost));
        const double s = (sa ? scale_a : 1.0) * (sb ? scale_b : 1.0);
        worst = 0;
        for (int t = 0; t < 64; t++) {
            const int i = (int)((t * 2654435761u) % (unsigned)m), j = (int)((t * 40503u + 7) % (unsigned)n);
            double ref = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                const double x = host_value(ha, v.a_type, (size_t)i * k + p) * host_value(hb, v.b_type, (size_t)j * k + p);
                ref += x;
                mag += std::fabs(x);
            }
            const double got = host_value(hd, v.d_type, (size_t)i + (size_t)j * m);
            worst = std::max(worst, std::fabs(got - s * ref) / (s * mag + 1e-30));
        }
    }
    // bf16 output rounds to 2^-9 of the value, fp8 output to 2^-4; fast accumulation adds about 2^-14 per term
    const double tol = v.d_type == CUDA_R_8F_E4M3 ? 0.0625 : 0.01;
    const bool ok = ran >= 0 && worst <= tol;
    printf("%-14s | heuristic %-13s %d algorithm%s | %s | %s\n", v.name, status_name(hs), found, found == 1 ? " " : "s",
           calls.empty() ? "no call" : calls.c_str(),
           ran < 0 ? "NONE RAN" : (std::string(ok ? "ran, samples ok" : "ran, samples WRONG") + " (worst " +
                                   std::to_string(worst) + " of sum |a b|)").c_str());
    fflush(stdout);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {la, lb, ld, lc2}) cublasCheck(cublasLtMatrixLayoutDestroy(l));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    // sa is its own allocation or the shared one; sb is its own only with separate scales
    for (void* p : {a, b, d, c, ws, (void*)sa, v.scales == 0 ? (void*)sb : nullptr, (void*)dscale, (void*)amax, (void*)bias})
        if (p) cudaCheck(cudaFree(p));
    return ok;
}

static int parse_dim(const char* flag, const char* s) {
    char* end = nullptr;
    const long x = s ? strtol(s, &end, 10) : 0;
    if (!s || *end || x < 16 || x > 65536 || x % 16) die("%s expects a multiple of 16 in [16, 65536], got '%s'", flag, s ? s : "");
    return (int)x;
}

int main(int argc, char** argv) {
    int m = 6144, n = 4096, k = 2048;  // gpt3_1.3b's qkv forward at B*T = 4096 (D [3C, BT] = W [3C, C] in [C, BT])
    const char* only = nullptr;
    bool trainer = false;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
        if (!strcmp(a, "--m")) { m = parse_dim(a, next); i++; }
        else if (!strcmp(a, "--n")) { n = parse_dim(a, next); i++; }
        else if (!strcmp(a, "--k")) { k = parse_dim(a, next); i++; }
        else if (!strcmp(a, "--only")) { if (!next) die("--only needs a variant name"); only = next; i++; }
        else if (!strcmp(a, "--trainer")) trainer = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: fp8_gemm [--m M] [--n N] [--k K] [--only NAME] [--trainer]\n"
                   "  M N K: the GEMM (multiples of 16; default 6144 4096 2048); NAME: one variant (see the source)\n");
            return 0;
        } else die("unknown argument '%s' (see --help)", a);
    }
    cuda_require_device();
    int rt = 0, drv = 0;
    cudaCheck(cudaRuntimeGetVersion(&rt));
    cudaCheck(cudaDriverGetVersion(&drv));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, compute capability %d.%d; CUDA runtime %d, driver %d; cuBLASLt %zu\n", prop.name, prop.major,
           prop.minor, rt, drv, (size_t)cublasLtGetVersion());
    Dl_info info;
    if (dladdr((void*)&cublasLtMatmul, &info) && info.dli_fname) printf("cublasLtMatmul from: %s\n", info.dli_fname);
    if (FILE* maps = fopen("/proc/self/maps", "r")) {
        char line[4096];
        std::string last;
        while (fgets(line, sizeof(line), maps)) {
            const char* p = strstr(line, "/");
            if (!p || !(strstr(p, "cublasLt") || strstr(p, "libcudart") || strstr(p, "libcuda.so"))) continue;
            if (last != p) printf("mapped: %s", p);
            last = p;
        }
        fclose(maps);
    }
    printf("GEMM m=%d n=%d k=%d, TN (A [k, m], B [k, n] stored along k), D [m, n] column-major\n", m, n, k);
    cublasLtHandle_t lt;
    cublasCheck(cublasLtCreate(&lt));
    bool pytorch_ok = false, any = false;
    for (const Variant& v : variants()) {
        if (only && strcmp(only, v.name)) continue;
        any = true;
        const bool ok = run_variant(lt, v, m, n, k);
        if (!strcmp(v.name, "pytorch")) pytorch_ok = ok;
        if (only) pytorch_ok = ok;
    }
    if (!any) die("--only %s: no such variant (see the source's header)", only);
    cublasCheck(cublasLtDestroy(lt));
    if (trainer) {  // the trainer's own forward call; it stops the program with the refusals when none runs
        printf("trainer (llmc/matmul_fp8.cuh cublaslt_matmul_fp8, forward, fast accumulation on):\n");
        fflush(stdout);
        MatmulContext ctx;
        matmul_init(&ctx, 0);
        const std::vector<uint8_t> ha = random_operand(CUDA_R_8F_E4M3, (size_t)k * m, 1), hb = random_operand(CUDA_R_8F_E4M3, (size_t)k * n, 2);
        void *a, *b;
        floatX* d;
        float *sa, *sb;
        const float one = 1.0f;
        cudaCheck(cudaMalloc(&a, ha.size()));
        cudaCheck(cudaMalloc(&b, hb.size()));
        cudaCheck(cudaMalloc(&d, (size_t)m * n * sizeof(floatX)));
        cudaCheck(cudaMalloc(&sa, 256));
        cudaCheck(cudaMalloc(&sb, 256));
        cudaCheck(cudaMemcpy(a, ha.data(), ha.size(), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(b, hb.data(), hb.size(), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(sa, &one, 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(sb, &one, 4, cudaMemcpyHostToDevice));
        cublaslt_matmul_fp8(&ctx, 0, d, CUDA_FLOATX, a, CUDA_R_8F_E4M3, sa, b, CUDA_R_8F_E4M3, sb, m, n, k, false, true,
                            nullptr, nullptr);
        cudaCheck(cudaDeviceSynchronize());
        printf("trainer call ran\n");
        for (void* p : {a, b, (void*)d, (void*)sa, (void*)sb}) cudaCheck(cudaFree(p));
        matmul_free(&ctx);
    }
    printf("%s\n", pytorch_ok ? "RESULT: the PyTorch-style fp8 GEMM runs and checks" : "RESULT: the PyTorch-style fp8 GEMM does not run or check");
    return pytorch_ok ? 0 : 1;
}
