// llmc/matmul.cuh: every matmul of the project through one cuBLASLt call (cublaslt_matmul), with the
// epilogues fused where cuBLASLt offers them: the bias add (forward) and the bias gradient
// (backward), and on request (train_gpt --gelu-fusion on) GELU: fc1's forward with GELU_AUX_BIAS and fc2's input
// gradient with DGELU_BGRAD. Users: the linear layers of train_gpt.cu and the LM head of the fused classifier
// (llmc/classifier.cuh).
//
// Row-major shapes as the callers see them (W is [out, in], nn.Linear's layout):
//   matmul_forward:         out[N,OC] = inp[N,IC] @ W[OC,IC]^T (+ bias[OC])
//   matmul_backward_input:  dinp[N,IC] = dout[N,OC] @ W[OC,IC]           (overwritten)
//   matmul_backward_weight: dW[OC,IC] += dout[N,OC]^T @ inp[N,IC]; dbias[OC] += sum_n dout[n,:]
//                           (dW floatX for the layers, fp32 for the classifier's LM head gradient)
//   matmul_forward_gelu:    act[N,OC] = gelu(pre), pre[N,OC] = inp[N,IC] @ W[OC,IC]^T (+ bias[OC])  (GELU_AUX_BIAS)
//   matmul_backward_input_dgelu: dpre[N,IC] = (dout[N,OC] @ W[OC,IC]) * gelu'(pre[N,IC]);
//                           dbias[IC] += sum_n dpre[n,:]                                   (DGELU_BGRAD)
// Inputs are floatX; outputs floatX except dW, which may be fp32. Every matrix is dense (leading
// dimension = its row length). MatmulContext holds the one cuBLASLt handle, its workspace, the
// bias-gradient scratch and the algorithms cuBLASLt's heuristic chose, one per key (shape, transposes,
// epilogue, output and bias types, pointer alignments): the heuristic runs once per distinct key, not on
// every call (each micro-batch makes 12 per layer, 4 forward and 8 backward, plus the head's: hundreds per
// step; the keys are the few shapes of a layer and the LM head times the
// alignments their pointers happen to have). Where the heuristic offers no algorithm for
// an epilogue (BIAS, BGRADB), the call runs with the default epilogue and our own deterministic kernel
// does the epilogue's work (the bias add; the bias gradient as fixed-order column sums, no atomics).
// GELU in the epilogue (fc1 and fc2 of the GELU MLP). It used to be never fused: the separate kernels of
// llmc/mlp_act.cuh compute exactly the reference's tanh form from the stored fc1, which the selective recompute reads
// again. It is fused now, on request, because it saves about two of the MLP's memory passes forward and two backward:
// act is written by fc1's GEMM instead of read back from fc1 and written by a kernel, and dfc1 and fc1's bias gradient
// come out of fc2's input-gradient GEMM instead of a kernel reading dact and fc1 and writing dfc1. Predicted: about
// 7 ms of gpt3_1.3b's 287 ms step on an H200 (~2.5%), if the GEMMs keep their speed with the epilogue; llm.c found the
// fused GELU slower on H100 for some shapes, so it is a measured choice: --gelu-fusion, off by default until a GPU has
// timed both. The epilogue applies cuBLASLt's GELU (the same tanh approximation) to the fp32 accumulator + bias and
// rounds once, where the kernel reads fc1 rounded to floatX: act (and dfc1, whose dact is no longer rounded) may differ
// from the unfused path's in the last bit. Both functions return false where cuBLASLt has no algorithm with the
// epilogue (logged once per epilogue); the caller then runs the plain GEMM and llmc/mlp_act.cuh's kernel, the unfused
// path bit for bit. The fp8 GEMMs (llmc/matmul_fp8.cuh) are never fused with GELU.
// cuBLASLt is column-major; a row-major [R, C] matrix is a column-major [C, R] one, so each
// call below is written with the transposes that make the column-major product come out as
// the row-major result (derivations beside each call).
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/precision.cuh"
#include "llmc/utils.h"

// What the heuristic's answer depends on (besides the workspace size, fixed per context). The operand types and
// the fp8 flags (fast accumulation, the amax of D) tell the fp8 GEMMs of llmc/matmul_fp8.cuh from these (floatX
// operands, both flags off).
struct MatmulKey {
    int m, n, k;
    bool trans_a, trans_b;
    cublasLtEpilogue_t epilogue;
    cudaDataType_t d_type, bias_type;
    uint32_t align_a, align_b, align_d;
    cudaDataType_t a_type, b_type;
    bool fast_accum, amax_d;
    uint32_t align_aux;  // the GELU epilogues' aux matrix (0: none); the heuristic reads its alignment from the pointer
    bool operator==(const MatmulKey& o) const {
        return m == o.m && n == o.n && k == o.k && trans_a == o.trans_a && trans_b == o.trans_b &&
               epilogue == o.epilogue && d_type == o.d_type && bias_type == o.bias_type && align_a == o.align_a &&
               align_b == o.align_b && align_d == o.align_d && a_type == o.a_type && b_type == o.b_type &&
               fast_accum == o.fast_accum && amax_d == o.amax_d && align_aux == o.align_aux;
    }
};

// The heuristic's algorithms for a key, best first, and the one the first call found to work (chosen; -1 before
// the first call). None left (the heuristic offered none, or each was refused at the call; refused says which): the
// caller falls back (another epilogue) or stops.
struct MatmulAlgo {
    MatmulKey key;
    std::vector<cublasLtMatmulAlgo_t> algos;
    int chosen;
    std::string refused;
    const char* source = "heuristic";  // how chosen was picked: "heuristic", "tuned" or "file"
    float ms = 0, ms_first = 0;         // --gemm-algos tune: the chosen algorithm's time and the heuristic's first's
};
static const int MATMUL_HEURISTIC_ALGOS = 8;  // asked of the heuristic per key

// --gemm-algos (train_gpt): how a key's algorithm is chosen at its first call.
//   heuristic (default)  the heuristic's first algorithm that runs (matmul_settle)
//   tune                 each of the heuristic's algorithms that runs is timed on the call's own operands (one run to
//                        warm up, then MATMUL_TUNE_RUNS; an accumulating call times on a copy of its output, so the
//                        real product is made once) and the fastest is kept. A choice made by timing can differ from run
//                        to run, and algorithms may round differently: the choices are written to OUT/gemm_algos.txt
//                        so that a later run can replay them
//   FILE                 the algorithms of FILE (a tune run's gemm_algos.txt) replayed: a key FILE holds runs its
//                        recorded algorithm, exactly (cuBLASLt refusing it stops the run, naming FILE); a key it lacks
//                        is settled by the heuristic. Either way the table of every key is printed after the first step
enum GemmAlgoMode { GEMM_ALGOS_HEURISTIC, GEMM_ALGOS_TUNE, GEMM_ALGOS_FILE };
static const int MATMUL_TUNE_RUNS = 3;
struct MatmulRecord {
    MatmulKey key;
    cublasLtMatmulAlgo_t algo;
};
struct GemmAlgos {  // the flag's value (llmc/matmul_algos.cuh gemm_algos_parse)
    GemmAlgoMode mode = GEMM_ALGOS_HEURISTIC;
    std::string path;                  // FILE
    std::vector<MatmulRecord> replay;  // FILE's records
    std::string recorded_on;           // FILE's "# device:" line: the GPU and cuBLASLt it was tuned on ("": none)
};

struct MatmulContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_size = 32ull << 20;   // 32 MiB, what Hopper kernels ask for
    floatX* bias_scratch = nullptr;         // [max bias length] one micro-batch's bias gradient (BGRADB output)
    int bias_scratch_len = 0;
    std::vector<MatmulAlgo> algos;         // the heuristic's answers so far (few keys: a linear search)
    std::string why;                       // why the last cublaslt_run that found no algorithm found none
    // --fp8's start-up check (llmc/gpt/fp8_linear.cuh): while fp8_check is set, an fp8 GEMM that cuBLASLt refuses
    // sets fp8_refused (why names the GEMM and cuBLASLt's answers) and returns, where a step's GEMM would stop
    bool fp8_check = false, fp8_refused = false;
    std::vector<int> gelu_fallbacks;       // the GELU epilogues found without an algorithm so far (each logged once)
    GemmAlgos gemm_algos;                  // --gemm-algos
};

// max_bias_len: the longest bias whose gradient matmul_backward_weight computes (0: no bias gradients).
static inline void matmul_init(MatmulContext* ctx, int max_bias_len) {
    cublasCheck(cublasLtCreate(&ctx->handle));
    cudaCheck(cudaMalloc(&ctx->workspace, ctx->workspace_size));
    if (max_bias_len > 0) cudaCheck(cudaMalloc(&ctx->bias_scratch, sizeof(floatX) * (size_t)max_bias_len));
    ctx->bias_scratch_len = max_bias_len;
}

static inline void matmul_free(MatmulContext* ctx) {
    cudaCheck(cudaFree(ctx->workspace));
    cudaCheck(cudaFree(ctx->bias_scratch));
    cublasCheck(cublasLtDestroy(ctx->handle));
}

// cuBLASLt's name for the element type behind an output pointer.
static inline cudaDataType_t cublaslt_type(const float*) { return CUDA_R_32F; }
static inline cudaDataType_t cublaslt_type(const __nv_bfloat16*) { return CUDA_R_16BF; }
static inline cudaDataType_t cublaslt_type(const __half*) { return CUDA_R_16F; }

static inline const char* cuda_type_name(cudaDataType_t t) {
    switch (t) {
        case CUDA_R_8F_E4M3: return "E4M3";
        case CUDA_R_8F_E5M2: return "E5M2";
        case CUDA_R_16BF: return "bf16";
        case CUDA_R_16F: return "fp16";
        case CUDA_R_32F: return "fp32";
        default: return "an unknown type";
    }
}

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment preferences).
static inline uint32_t pointer_alignment(const void* p) {
    uint32_t align = 256;
    while (align > 1 && ((uintptr_t)p % align) != 0) align /= 2;
    return align;
}

// y[i, j] (column-major [m, n], floatX) += bias[i]: the BIAS epilogue's work when cuBLASLt has no
// algorithm with it. One rounding more than the epilogue in bf16 (the product is stored first).
__global__ static void matmul_bias_add_kernel(floatX* y, const floatX* bias, int m, int n) {
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)m * n) return;
    const int i = (int)(idx % m);
    y[idx] = to_floatX(to_float(y[idx]) + to_float(bias[i]));
}

// bias[j] = sum over r < k of op(B)[r, j] (op(B) [k, n], element (r, j) at b[r * sr + j * sj]): the BGRADB
// epilogue's work when cuBLASLt has no algorithm with it. Block (32, 16) owns 32 columns: thread row y
// sums rows y, y + 16, ... in fp32, then thread row 0 adds the 16 partials in order; no atomics, so the
// result is the same on every run.
__global__ static void matmul_bias_grad_kernel(floatX* bias, const floatX* b, int k, int n, size_t sr, size_t sj) {
    __shared__ float part[16][33];
    const int j = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (j < n)
        for (int r = threadIdx.y; r < k; r += 16) s += to_float(b[(size_t)r * sr + (size_t)j * sj]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || j >= n) return;
    float t = 0.0f;
    for (int y = 0; y < 16; y++) t += part[y][threadIdx.x];
    bias[j] = to_floatX(t);
}

// The heuristic's answers for this key, asked once and kept in the context (up to MATMUL_HEURISTIC_ALGOS, best
// first). cuBLASLt reports "none" either as CUBLAS_STATUS_NOT_SUPPORTED or as success with no result; both are kept
// as an empty list.
static inline MatmulAlgo& matmul_algo(MatmulContext* ctx, const MatmulKey& key, cublasLtMatmulDesc_t desc,
                                      cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld_) {
    for (MatmulAlgo& a : ctx->algos)
        if (a.key == key) return a;
    // The heuristic may otherwise assume 256-byte aligned matrices (its default); ours are 16-byte aligned
    // (tensor offsets are multiples of 8 elements), so tell it the alignment each pointer really has.
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx->workspace_size,
                                                     sizeof(ctx->workspace_size)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a,
                                                     sizeof(key.align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b,
                                                     sizeof(key.align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_d,
                                                     sizeof(key.align_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d,
                                                     sizeof(key.align_d)));
    cublasLtMatmulHeuristicResult_t heur[MATMUL_HEURISTIC_ALGOS];
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, la, lb, ld_, ld_, pref,
                                                             MATMUL_HEURISTIC_ALGOS, heur, &found);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(st);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    MatmulAlgo a{key, {}, -1, ""};
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; i++)
        if (heur[i].state == CUBLAS_STATUS_SUCCESS) a.algos.push_back(heur[i].algo);
    if (a.algos.empty()) a.refused = "the heuristic offered no algorithm (status " + std::to_string((int)st) + ")";
    for (const MatmulRecord& r : ctx->gemm_algos.replay)  // --gemm-algos FILE: the recorded algorithm alone
        if (r.key == key) {
            a.algos.assign(1, r.algo);
            a.source = "file";
        }
    ctx->algos.push_back(a);
    return ctx->algos.back();
}

// One call of algorithm i of a key: checked first (cublasLtMatmulAlgoCheck, and its workspace against ours), then run.
// CUBLAS_STATUS_NOT_SUPPORTED or INVALID_VALUE: refused (the H100 refused every fp8 GEMM at the call with an algorithm
// the heuristic had offered); any other failure stops the program.
static inline cublasStatus_t matmul_try(MatmulContext* ctx, MatmulAlgo* algo, int i, cublasLtMatmulDesc_t desc,
                                        cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld_,
                                        const float* alpha, const float* beta, const void* a, const void* b,
                                        const void* c, void* d, cudaStream_t stream) {
    cublasLtMatmulHeuristicResult_t check;
    cublasStatus_t st = cublasLtMatmulAlgoCheck(ctx->handle, desc, la, lb, ld_, ld_, &algo->algos[i], &check);
    if (st == CUBLAS_STATUS_SUCCESS && check.workspaceSize > ctx->workspace_size) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul(ctx->handle, desc, alpha, a, la, b, lb, beta, c, ld_, d, ld_, &algo->algos[i], ctx->workspace,
                            ctx->workspace_size, stream);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) cublasCheck(st);
    return st;
}

static inline size_t cuda_type_size(cudaDataType_t t) {
    return t == CUDA_R_32F ? 4 : (t == CUDA_R_16BF || t == CUDA_R_16F) ? 2 : 1;
}

// --gemm-algos tune: each algorithm that runs is timed (matmul_try warms it up, then MATMUL_TUNE_RUNS calls between two
// events), the fastest is kept and run once more on the real output, so the product is the chosen algorithm's. An
// accumulating call (beta != 0) reads its output: it is timed on a copy (cudaMalloc'd for the moment; where that
// fails, the key is settled by the heuristic's rule). Returns 1 when the product is done, 0 when every algorithm was
// refused (*refused: the statuses), -1 when the heuristic's rule must settle it (no memory for the copy, or the
// fastest refused on the real output).
static inline int matmul_tune(MatmulContext* ctx, MatmulAlgo* algo, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                              cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld_, const float* alpha, const float* beta,
                              const void* a, const void* b, const void* c, void* d, cudaStream_t stream,
                              std::string* refused) {
    void* out = d;
    void* copy = nullptr;
    if (*beta != 0.0f) {
        const size_t bytes = (size_t)algo->key.m * algo->key.n * cuda_type_size(algo->key.d_type);
        if (cudaMalloc(&copy, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            return -1;
        }
        cudaCheck(cudaMemcpyAsync(copy, d, bytes, cudaMemcpyDeviceToDevice, stream));
        out = copy;
    }
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    int best = -1;
    for (int i = 0; i < (int)algo->algos.size(); i++) {
        const cublasStatus_t st = matmul_try(ctx, algo, i, desc, la, lb, ld_, alpha, beta, a, b, c ? out : nullptr, out, stream);
        if (st != CUBLAS_STATUS_SUCCESS) {
            *refused += (refused->empty() ? "status " : ", ") + std::to_string((int)st);
            continue;
        }
        cudaCheck(cudaEventRecord(e0, stream));
        for (int r = 0; r < MATMUL_TUNE_RUNS; r++)
            cublasCheck(cublasLtMatmul(ctx->handle, desc, alpha, a, la, b, lb, beta, c ? out : nullptr, ld_, out, ld_,
                                       &algo->algos[i], ctx->workspace, ctx->workspace_size, stream));
        cudaCheck(cudaEventRecord(e1, stream));
        cudaCheck(cudaEventSynchronize(e1));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        ms /= MATMUL_TUNE_RUNS;
        if (i == 0) algo->ms_first = ms;  // the heuristic's first (0 when it was refused)
        if (best < 0 || ms < algo->ms) best = i, algo->ms = ms;
    }
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    if (copy) cudaCheck(cudaFree(copy));
    if (best < 0) return 0;
    // the real product (refused on the real pointers, which the copy's did not show: the heuristic's rule takes over)
    if (matmul_try(ctx, algo, best, desc, la, lb, ld_, alpha, beta, a, b, c, d, stream) != CUBLAS_STATUS_SUCCESS) return -1;
    algo->chosen = best;
    algo->source = "tuned";
    return 1;
}

// The algorithm a key's first call settles on, kept for every later call: under --gemm-algos tune the fastest
// (matmul_tune), else the heuristic's first that runs (or FILE's one, matmul_algo), each tried in order and a refusal
// moving on to the next. fp8 keys print the choice, others only when it is not the heuristic's first. Returns whether
// one ran (the product is then done). A replayed algorithm that cuBLASLt refuses stops the run.
static inline bool matmul_settle(MatmulContext* ctx, MatmulAlgo* algo, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                 cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld_, const float* alpha, const float* beta,
                                 const void* a, const void* b, const void* c, void* d, cudaStream_t stream) {
    const bool fp8 = algo->key.a_type != CUDA_FLOATX;
    std::string refused;
    int tuned = -1;
    if (ctx->gemm_algos.mode == GEMM_ALGOS_TUNE && std::string(algo->source) == "heuristic")
        tuned = matmul_tune(ctx, algo, desc, la, lb, ld_, alpha, beta, a, b, c, d, stream, &refused);
    if (tuned == 1) return true;
    for (int i = 0; tuned == -1 && i < (int)algo->algos.size(); i++) {
        const cublasStatus_t st = matmul_try(ctx, algo, i, desc, la, lb, ld_, alpha, beta, a, b, c, d, stream);
        if (st == CUBLAS_STATUS_SUCCESS) {
            algo->chosen = i;
            if (fp8 || i > 0)
                printf("cuBLASLt: m=%d n=%d k=%d, %s x %s -> %s%s: algorithm %d of the heuristic's %d%s%s\n",
                       algo->key.m, algo->key.n, algo->key.k, cuda_type_name(algo->key.a_type),
                       cuda_type_name(algo->key.b_type), cuda_type_name(algo->key.d_type), algo->key.fast_accum ? ", fast accumulation" : "", i + 1,
                       (int)algo->algos.size(), i > 0 ? " (the ones before refused: " : "", i > 0 ? (refused + ")").c_str() : "");
            return true;
        }
        refused += (refused.empty() ? "status " : ", ") + std::to_string((int)st);
    }
    if (std::string(algo->source) == "file")
        die("--gemm-algos %s: cuBLASLt refuses the algorithm recorded for m=%d n=%d k=%d (%s): record the choices again "
            "with --gemm-algos tune on this GPU and cuBLASLt", ctx->gemm_algos.path.c_str(), algo->key.m, algo->key.n,
            algo->key.k, refused.c_str());
    algo->refused = "each of the heuristic's " + std::to_string(algo->algos.size()) + " algorithms refused (" + refused + ")";
    algo->algos.clear();  // later calls of this key fall back at once
    return false;
}

// d = a b (+ d when accumulate) with the cached algorithm of key (matmul_algo), when cuBLASLt has one; the descriptor
// and the layouts are destroyed either way. Returns whether it ran (else the caller falls back). Used by the bf16 and
// fp8 GEMMs (llmc/matmul_fp8.cuh).
static inline bool cublaslt_run(MatmulContext* ctx, const MatmulKey& key, cublasLtMatmulDesc_t desc,
                                cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld_,
                                const void* a, const void* b, void* d, bool accumulate, cudaStream_t stream) {
    MatmulAlgo& algo = matmul_algo(ctx, key, desc, la, lb, ld_);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    // C (= D) is read only when accumulating. An fp8 GEMM at beta 0 passes none, as PyTorch's scaled_mm does (the
    // H100 refused the fp8 calls that passed C = D); the bf16 GEMMs keep C = D, the setup measured on the H100.
    const void* c = accumulate || key.a_type == CUDA_FLOATX ? d : nullptr;
    bool ran = false;
    if (algo.chosen >= 0) {
        cublasCheck(cublasLtMatmul(ctx->handle, desc, &alpha, a, la, b, lb, &beta, c, ld_, d, ld_, &algo.algos[algo.chosen],
                                   ctx->workspace, ctx->workspace_size, stream));
        ran = true;
    } else if (!algo.algos.empty()) {
        ran = matmul_settle(ctx, &algo, desc, la, lb, ld_, &alpha, &beta, a, b, c, d, stream);
    }
    if (!ran) ctx->why = algo.refused;
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld_));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return ran;
}

// The one cuBLASLt call: D[m,n] (column-major) = op(A)[m,k] @ op(B)[k,n] (+ D if accumulate),
// with an epilogue, fp32 accumulation. A and B are floatX, D is d_type (floatX or fp32; C = D).
// All three are dense: the leading dimension is the stored matrix's column-major row count.
// bias: the epilogue's bias input or bias-gradient output, of type bias_type; cuBLASLt documents the
// bias type as the output's for bf16 and fp32 outputs, so the callers pass floatX biases with floatX D.
// aux: the GELU epilogues' pre-activation matrix [m,n], dense like D and of D's type (cuBLASLt's default aux type;
// its leading dimension m must be a multiple of 8: every m here is a width the kernels need in multiples of 8).
// Returns false, with nothing written, when cuBLASLt has no algorithm for the epilogue.
static inline bool cublaslt_matmul_try(MatmulContext* ctx, cudaStream_t stream, void* d, cudaDataType_t d_type,
                                       const floatX* a, const floatX* b, int m, int n, int k, bool trans_a, bool trans_b,
                                       bool accumulate, cublasLtEpilogue_t epilogue, const void* bias,
                                       cudaDataType_t bias_type, const void* aux) {
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));  // fp32 accumulation
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    if (aux) {
        const int64_t aux_ld = m;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &d_type, sizeof(d_type)));
    }
    // column-major layouts of the stored matrices (before op)
    cublasLtMatrixLayout_t la, lb, ld_;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_FLOATX, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_FLOATX, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld_, d_type, m, n, m));

    const MatmulKey key{m, n, k, trans_a, trans_b, epilogue, d_type, bias ? bias_type : d_type,
                        pointer_alignment(a), pointer_alignment(b), pointer_alignment(d), CUDA_FLOATX, CUDA_FLOATX, false, false,
                        aux ? pointer_alignment(aux) : 0};
    return cublaslt_run(ctx, key, desc, la, lb, ld_, a, b, d, accumulate, stream);
}

// cublaslt_matmul_try without aux; without an algorithm for the epilogue: the same product with the default
// epilogue, then our kernel.
static inline void cublaslt_matmul(MatmulContext* ctx, cudaStream_t stream, void* d, cudaDataType_t d_type,
                                   const floatX* a, const floatX* b, int m, int n, int k, bool trans_a, bool trans_b,
                                   bool accumulate, cublasLtEpilogue_t epilogue, const void* bias,
                                   cudaDataType_t bias_type) {
    if (cublaslt_matmul_try(ctx, stream, d, d_type, a, b, m, n, k, trans_a, trans_b, accumulate, epilogue, bias, bias_type,
                            nullptr))
        return;
    if (epilogue == CUBLASLT_EPILOGUE_DEFAULT)
        die("cuBLASLt has no algorithm for m=%d n=%d k=%d transA=%d transB=%d output type %d: %s (llmc/matmul.cuh; "
            "shapes must be multiples of 8 for tensor cores)", m, n, k, (int)trans_a, (int)trans_b, (int)d_type, ctx->why.c_str());
    // no algorithm with this epilogue: the plain product, then the epilogue's work in our own kernel
    cublaslt_matmul(ctx, stream, d, d_type, a, b, m, n, k, trans_a, trans_b, accumulate, CUBLASLT_EPILOGUE_DEFAULT,
                    nullptr, bias_type);
    if (epilogue == CUBLASLT_EPILOGUE_BIAS && d_type == CUDA_FLOATX) {
        matmul_bias_add_kernel<<<(unsigned)ceil_div((size_t)m * n, 256), 256, 0, stream>>>((floatX*)d, (const floatX*)bias,
                                                                                           m, n);
    } else if (epilogue == CUBLASLT_EPILOGUE_BGRADB) {
        // op(B) [k, n]: element (r, j) is b[j + r * n] when B is stored transposed ([n, k]), else b[r + j * k]
        const size_t sr = trans_b ? (size_t)n : 1, sj = trans_b ? 1 : (size_t)k;
        matmul_bias_grad_kernel<<<(unsigned)ceil_div(n, 32), dim3(32, 16), 0, stream>>>((floatX*)bias, b, k, n, sr, sj);
    } else {
        die("llmc/matmul.cuh: no fallback for epilogue %d with output type %d (only BIAS and BGRADB are used)",
            (int)epilogue, (int)d_type);
    }
    cudaCheck(cudaGetLastError());
}

// out[N,OC] = inp[N,IC] @ W[OC,IC]^T + bias. Column-major: W row-major [OC,IC] is column-major
// [IC,OC], so op(A) = A^T is [OC,IC]; inp is column-major [IC,N]: D[OC,N] = A^T[OC,IC] @ B[IC,N],
// which is out row-major [N,OC]. The bias (length OC = m) is added to every column of D.
static inline void matmul_forward(MatmulContext* ctx, cudaStream_t stream, floatX* out, const floatX* inp,
                                  const floatX* w, const floatX* bias, int N, int IC, int OC) {
    cublasLtEpilogue_t ep = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublaslt_matmul(ctx, stream, out, CUDA_FLOATX, w, inp, OC, N, IC, true, false, false, ep, bias, CUDA_FLOATX);
}

// dinp[N,IC] = dout[N,OC] @ W[OC,IC]. Column-major: W is [IC,OC] as stored, dout is [OC,N]:
// D[IC,N] = A[IC,OC] @ B[OC,N].
static inline void matmul_backward_input(MatmulContext* ctx, cudaStream_t stream, floatX* dinp, const floatX* dout,
                                         const floatX* w, int N, int IC, int OC) {
    cublaslt_matmul(ctx, stream, dinp, CUDA_FLOATX, w, dout, IC, N, OC, false, false, false, CUBLASLT_EPILOGUE_DEFAULT,
                    nullptr, CUDA_R_32F);
}

// Adds the bias gradient of one micro-batch into the parameter gradient (the sum in fp32, one rounding), or with
// accumulate false stores it.
__global__ static void bias_grad_accumulate_kernel(floatX* dbias, const floatX* scratch, int n, bool accumulate) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dbias[i] = accumulate ? to_floatX(to_float(dbias[i]) + to_float(scratch[i])) : scratch[i];
}

// dW[OC,IC] += dout[N,OC]^T @ inp[N,IC]; dbias[OC] += column sums of dout. Column-major: inp is
// [IC,N], dout is [OC,N] so op(B) = B^T is [N,OC]: D[IC,OC] = A[IC,N] @ B^T[N,OC], which is
// dW row-major [OC,IC]. BGRADB reduces op(B) over k = N: one value per output channel, which it stores
// (it does not add), so it goes to the context's scratch and a small kernel adds it into dbias.
// GradT (dW's element type) is floatX or float: cuBLASLt accumulates into either (beta = 1); a bias
// gradient needs GradT = floatX (its type is the output's). accumulate false: dW = and dbias = instead (beta 0, dW
// not read: a step's first micro-batch writes its gradients without a memset before it). The values are the same
// bits as adding to zeros: the epilogue's alpha acc + beta C with C = 0 adds an exact zero before the one rounding.
template <typename GradT>
static inline void matmul_backward_weight(MatmulContext* ctx, cudaStream_t stream, GradT* dw, floatX* dbias,
                                          const floatX* dout, const floatX* inp, int N, int IC, int OC, bool accumulate) {
    if (dbias && OC > ctx->bias_scratch_len) {
        fprintf(stderr, "error: bias of %d channels exceeds the matmul scratch of %d\n", OC, ctx->bias_scratch_len);
        exit(1);
    }
    if (dbias && cublaslt_type(dw) != CUDA_FLOATX) {
        fprintf(stderr, "error: matmul_backward_weight: a bias gradient needs dW of the element type floatX\n");
        exit(1);
    }
    cublasLtEpilogue_t ep = dbias ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
    cublaslt_matmul(ctx, stream, dw, cublaslt_type(dw), inp, dout, IC, OC, N, false, true, accumulate, ep,
                    dbias ? ctx->bias_scratch : nullptr, CUDA_FLOATX);
    if (dbias) {
        bias_grad_accumulate_kernel<<<(OC + 255) / 256, 256, 0, stream>>>(dbias, ctx->bias_scratch, OC, accumulate);
        cudaCheck(cudaGetLastError());
    }
}

// A GELU epilogue without an algorithm: said once per epilogue, with cuBLASLt's answer (ctx->why).
static inline void matmul_gelu_fallback_note(MatmulContext* ctx, cublasLtEpilogue_t ep, const char* name, int m, int n, int k) {
    for (int e : ctx->gelu_fallbacks)
        if (e == (int)ep) return;
    ctx->gelu_fallbacks.push_back((int)ep);
    printf("cuBLASLt: no algorithm with the %s epilogue at m=%d n=%d k=%d (%s): the GEMM runs without it, then "
           "llmc/mlp_act.cuh's kernel (--gelu-fusion on falls back to off here)\n", name, m, n, k, ctx->why.c_str());
}

// act[N,OC] = gelu(pre), pre[N,OC] = inp[N,IC] @ W[OC,IC]^T + bias in one GEMM: fc1 and its GELU. Column-major as
// matmul_forward: D[OC,N] = A^T[OC,IC] @ B[IC,N] is act, and the aux matrix [OC,N] (leading dimension OC) is pre, the
// epilogue's input. GELU_AUX_BIAS adds the bias (length OC = m) first; GELU_AUX when bias is null. Returns false with
// nothing written when cuBLASLt has no algorithm (the caller runs matmul_forward and gelu_forward).
static inline bool matmul_forward_gelu(MatmulContext* ctx, cudaStream_t stream, floatX* act, floatX* pre, const floatX* inp,
                                       const floatX* w, const floatX* bias, int N, int IC, int OC) {
    const cublasLtEpilogue_t ep = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (cublaslt_matmul_try(ctx, stream, act, CUDA_FLOATX, w, inp, OC, N, IC, true, false, false, ep, bias, CUDA_FLOATX, pre))
        return true;
    matmul_gelu_fallback_note(ctx, ep, bias ? "GELU_AUX_BIAS" : "GELU_AUX", OC, N, IC);
    return false;
}

// dpre[N,IC] = (dout[N,OC] @ W[OC,IC]) * gelu'(pre[N,IC]), and with dbias also dbias[IC] += sum_n dpre[n,:], in one
// GEMM: fc2's input gradient through the GELU to fc1's output gradient, and fc1's bias gradient. Column-major as
// matmul_backward_input: D[IC,N] = A[IC,OC] @ B[OC,N] is dpre and the aux matrix [IC,N] is pre (what
// matmul_forward_gelu wrote). DGELU_BGRAD's bias gradient, one value per row of D (IC = m: summed over the N columns,
// in fp32 before D's rounding), is stored (not added), so it goes to the context's scratch and a small kernel adds it
// into dbias; DGELU when dbias is null. Returns false with nothing written when cuBLASLt has no algorithm (the caller
// runs matmul_backward_input and gelu_backward, and takes fc1's bias gradient from its weight gradient, BGRADB).
static inline bool matmul_backward_input_dgelu(MatmulContext* ctx, cudaStream_t stream, floatX* dpre, floatX* dbias,
                                               const floatX* dout, const floatX* w, const floatX* pre, int N, int IC, int OC) {
    if (dbias && IC > ctx->bias_scratch_len) {
        fprintf(stderr, "error: bias of %d channels exceeds the matmul scratch of %d\n", IC, ctx->bias_scratch_len);
        exit(1);
    }
    const cublasLtEpilogue_t ep = dbias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    if (!cublaslt_matmul_try(ctx, stream, dpre, CUDA_FLOATX, w, dout, IC, N, OC, false, false, false, ep,
                             dbias ? ctx->bias_scratch : nullptr, CUDA_FLOATX, pre)) {
        matmul_gelu_fallback_note(ctx, ep, dbias ? "DGELU_BGRAD" : "DGELU", IC, N, OC);
        return false;
    }
    if (dbias) {
        bias_grad_accumulate_kernel<<<(IC + 255) / 256, 256, 0, stream>>>(dbias, ctx->bias_scratch, IC, true);
        cudaCheck(cudaGetLastError());
    }
    return true;
}
