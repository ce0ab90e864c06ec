// tests/cuda_emu/include/cublasLt.h: the part of cuBLASLt that llmc/matmul.cuh uses, on the host: a
// column-major GEMM with fp32 accumulation (one rounding to bf16 for bf16 outputs), transposes, leading
// dimensions, alpha/beta, and the epilogues BIAS (bias[i] added to row i of D), BGRADB (bias[j] = the
// sum over k of op(B)[k, j], stored, not added) and the GELU ones, as cuBLASLt documents them: GELU_AUX_BIAS
// (GELU_AUX without the bias) writes x = the fp32 accumulator + bias[i] to the aux matrix (rounded to its type) and
// gelu(x) to D, gelu the tanh approximation computed in fp32 before D's rounding; DGELU_BGRAD (DGELU without the
// bias gradient) writes D = the fp32 product * gelu'(aux), rounded once, and bias[i] = the sum over row i of D
// (column-major: over the columns j) in fp32 before that rounding, stored, not added. Shapes and types are checked
// as cuBLASLt documents them, including the bias type, which must be the output's, and the aux matrix: its pointer
// and leading dimension (a multiple of 8, at least D's rows) set, its type D's (INVALID_VALUE otherwise). The
// heuristic finds an algorithm for every valid call except for the epilogues named in EMU_LT_NO_ALGO (a
// comma-separated list of BIAS, BGRADB, BGRADA, GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, DEFAULT (then every GEMM
// has none, and the trainer stops) or numbers, read on each call), for which it answers as cuBLASLt does when it
// has none: no result and CUBLAS_STATUS_NOT_SUPPORTED. g_emu_heuristic_calls counts its calls, g_emu_gemms the products.
// fp8 (llmc/matmul_fp8.cuh): A and B of CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 (not both E5M2), read exactly
// (tests/cuda_emu/include/cuda_fp8.h), with the A/B scale pointers applied as D = alpha * scale_a * scale_b *
// (op(A) op(B)) + beta C, bf16 or fp32 D, and the amax of D (CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: set to the
// largest |D| before D is rounded to its type). As cuBLASLt on Hopper, an fp8 GEMM must be "TN" (transa = T,
// transb = N: both operands stored along K) with K and the leading dimensions multiples of 16; other fp8 calls
// get CUBLAS_STATUS_NOT_SUPPORTED. CUBLASLT_MATMUL_DESC_FAST_ACCUM is accepted and recorded but changes nothing:
// the emulation accumulates in fp32 in order, which the GPU's fast mode (fewer promotions of the tensor cores'
// partial sums to fp32) does not; a test of fast-accumulation accuracy needs a GPU.
// The heuristic offers up to EMU_LT_ALGOS (default 3) algorithms, numbered 0, 1, ... in algo.data[0];
// cublasLtMatmulAlgoCheck accepts each. Two refusals the H100 showed (the heuristic offers, the call refuses) can be
// planted, read on each call: EMU_LT_REFUSE_ALGOS=K refuses algorithms 0..K-1 of every fp8 GEMM at the call
// (CUBLAS_STATUS_NOT_SUPPORTED; K at or above EMU_LT_ALGOS refuses them all), EMU_LT_SCALE_ALIGN=B refuses an fp8
// call whose A or B scale pointer is not B-byte aligned. And a wrong product: EMU_LT_WRONG_ALGOS=K makes algorithms
// 0..K-1 of every fp8 GEMM run and write twice the product (what --fp8's start-up check must catch).
// cublasLtMatmulAlgoCheck refuses an algorithm numbered EMU_LT_ALGOS or more (one this cuBLASLt never offered), and
// EMU_LT_SLOW_ALGOS=K makes algorithms 0..K-1 of every GEMM take 100 ms longer (--gemm-algos tune's timing).
#pragma once
#include "cuda_emu.h"
#include "cuda_fp8.h"
#include "library_types.h"
#include <omp.h>
#include <chrono>
#include <string>
#include <thread>

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_DGELU = 192,
    CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
    CUBLASLT_EPILOGUE_BGRADA = 256,
    CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA,
    CUBLASLT_MATMUL_DESC_TRANSB,
    CUBLASLT_MATMUL_DESC_EPILOGUE,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_AMAX_D_POINTER,
    CUBLASLT_MATMUL_DESC_FAST_ACCUM,
    CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
} cublasLtMatmulPreferenceAttributes_t;

struct EmuLtHandle { int dummy; };
struct EmuLtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
    void* bias = nullptr;
    cudaDataType_t bias_type = CUDA_R_32F;
    bool bias_type_set = false;
    const float* a_scale = nullptr;  // fp8: device pointers to the operands' dequantization scales
    const float* b_scale = nullptr;
    float* amax_d = nullptr;         // fp8: set to max |D|
    int8_t fast_accum = 0;
    void* aux = nullptr;             // the GELU epilogues' pre-activation matrix: written (GELU_AUX*), read (DGELU*)
    int64_t aux_ld = 0;
    cudaDataType_t aux_type = CUDA_R_32F;
    bool aux_type_set = false;
};
struct EmuLtLayout { cudaDataType_t type; uint64_t rows, cols; int64_t ld; };
struct EmuLtPref { size_t ws = 0; uint32_t align[4] = {256, 256, 256, 256}; };
typedef EmuLtHandle* cublasLtHandle_t;
typedef EmuLtDesc* cublasLtMatmulDesc_t;
typedef EmuLtLayout* cublasLtMatrixLayout_t;
typedef EmuLtPref* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t { uint64_t data[8]; };
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
};

inline long g_emu_gemms = 0;

static inline const char* cublasLtGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_NOT_SUPPORTED";
}
static inline const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasLtGetStatusName(s); }
static inline size_t cublasLtGetVersion() { return 130000; }  // the emulation answers as cuBLASLt 13.0
static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new EmuLtHandle{0}; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t c, cudaDataType_t s) {
    *d = new EmuLtDesc;
    (*d)->compute = c;
    (*d)->scale = s;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                            const void* buf, size_t size) {
    switch (a) {
        case CUBLASLT_MATMUL_DESC_TRANSA: if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->ta, buf, 4); break;
        case CUBLASLT_MATMUL_DESC_TRANSB: if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->tb, buf, 4); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->ep, buf, 4); break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->bias, buf, sizeof(void*)); break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->bias_type, buf, 4); d->bias_type_set = true; break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->a_scale, buf, sizeof(void*)); break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->b_scale, buf, sizeof(void*)); break;
        case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->amax_d, buf, sizeof(void*)); break;
        case CUBLASLT_MATMUL_DESC_FAST_ACCUM: if (size != sizeof(int8_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->fast_accum, buf, 1); break;
        case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; break;  // fp8 D: not emulated
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux, buf, sizeof(void*)); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux_ld, buf, 8); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux_type, buf, 4); d->aux_type_set = true; break;
        default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows,
                                                        uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new EmuLtLayout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = new EmuLtPref; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t a, const void* buf,
                                                                  size_t size) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->ws, buf, 8);
    } else {
        if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
    }
    return CUBLAS_STATUS_SUCCESS;
}

static inline bool emu_lt_is_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
static inline bool emu_lt_gelu(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
           e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
static inline bool emu_lt_dgelu(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
// the epilogues that read a bias (BIAS, GELU_AUX_BIAS) or store a bias gradient (BGRADB, DGELU_BGRAD) at the bias pointer
static inline bool emu_lt_uses_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_BGRADB || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
// cuBLASLt's GELU, documented as the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its
// derivative 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), both in fp32 on the accumulator (written
// here from the formula, apart from llmc/mlp_act.cuh's kernels, so that a test of one checks the other). The tanh is
// the C library's float one (std::tanh), not cuda_emu.h's model of the fast-math tanhf: the library's own code.
static inline float emu_gelu(float x) {
    const float t = std::tanh(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * x * (1.0f + t);
}
static inline float emu_gelu_grad(float x) {
    const float t = std::tanh(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

// shape and type checks shared by the heuristic and the matmul
static inline cublasStatus_t emu_lt_check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                          cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, int* M, int* N, int* K) {
    const uint64_t m = dd->rows, n = dd->cols;
    const uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != m || bn != n || ak != bk || c->rows != m || c->cols != n || c->ld != dd->ld || c->type != dd->type) {
        fprintf(stderr, "EMU cuBLASLt: inconsistent shapes op(A) %llux%llu op(B) %llux%llu D %llux%llu\n",
                (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
                (unsigned long long)m, (unsigned long long)n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const bool fp8 = emu_lt_is_fp8(a->type) || emu_lt_is_fp8(b->type);
    if (fp8) {
        if (!emu_lt_is_fp8(a->type) || !emu_lt_is_fp8(b->type) || (a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2) ||
            (dd->type != CUDA_R_16BF && dd->type != CUDA_R_32F)) {
            fprintf(stderr, "EMU cuBLASLt: unsupported fp8 types A %d B %d D %d\n", a->type, b->type, dd->type);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        // Hopper's fp8 kernels: "TN" only, K and the leading dimensions multiples of 16
        if (d->ta != CUBLAS_OP_T || d->tb != CUBLAS_OP_N || ak % 16 || a->ld % 16 || b->ld % 16)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    } else if (d->a_scale || d->b_scale || d->amax_d) {
        fprintf(stderr, "EMU cuBLASLt: A/B scale or amax-D pointers on a GEMM without fp8 operands\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    } else if (a->type != b->type || (a->type != CUDA_R_16BF && a->type != CUDA_R_16F && a->type != CUDA_R_32F) ||
               (dd->type != CUDA_R_16BF && dd->type != CUDA_R_16F && dd->type != CUDA_R_32F) ||
               (a->type != CUDA_R_32F && dd->type != CUDA_R_32F && a->type != dd->type)) {
        fprintf(stderr, "EMU cuBLASLt: unsupported types A %d B %d D %d\n", a->type, b->type, dd->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (a->type == CUDA_R_32F && dd->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    const bool gelu = emu_lt_gelu(d->ep), uses_bias = emu_lt_uses_bias(d->ep);
    if (d->ep != CUBLASLT_EPILOGUE_DEFAULT && !uses_bias && !gelu) {
        fprintf(stderr, "EMU cuBLASLt: epilogue %d not emulated\n", (int)d->ep);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (uses_bias && !d->bias) {
        fprintf(stderr, "EMU cuBLASLt: epilogue %d without a bias pointer\n", (int)d->ep);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (gelu) {
        // documented: the GELU epilogues need the aux pointer and its leading dimension, a multiple of 8 no less than
        // D's rows; the aux type defaults to D's, and a type cuBLASLt does not pair with D's is INVALID_VALUE. fp8
        // operands with these epilogues are not emulated (llmc/matmul_fp8.cuh never asks for them).
        if (fp8) {
            fprintf(stderr, "EMU cuBLASLt: epilogue %d with fp8 operands not emulated\n", (int)d->ep);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (!d->aux) {
            fprintf(stderr, "EMU cuBLASLt: epilogue %d without an aux pointer (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)\n",
                    (int)d->ep);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if (d->aux_ld < (int64_t)m || d->aux_ld % 8 != 0) {
            fprintf(stderr, "EMU cuBLASLt: epilogue %d: aux leading dimension %lld must be a multiple of 8 and at least "
                    "D's %llu rows\n", (int)d->ep, (long long)d->aux_ld, (unsigned long long)m);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if (d->aux_type_set && d->aux_type != dd->type) {
            fprintf(stderr, "EMU cuBLASLt: epilogue %d: aux type %d differs from D type %d\n", (int)d->ep, (int)d->aux_type,
                    (int)dd->type);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (uses_bias) {
        // documented: the bias type defaults to, and for bf16/fp32 outputs must be, the output type
        cudaDataType_t bt = d->bias_type_set ? d->bias_type : dd->type;
        if (bt != dd->type) {
            fprintf(stderr, "EMU cuBLASLt: bias type %d differs from D type %d\n", (int)bt, (int)dd->type);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    *M = (int)m; *N = (int)n; *K = (int)ak;
    return CUBLAS_STATUS_SUCCESS;
}

inline long g_emu_heuristic_calls = 0;

// true when EMU_LT_NO_ALGO names this epilogue (by its name without CUBLASLT_EPILOGUE_, or its number)
// an integer from the environment (read on each call), fallback when unset; a malformed value stops the program
static inline int64_t emu_env_int(const char* name, int64_t fallback) {
    const char* e = getenv(name);
    if (!e || !*e) return fallback;
    char* end = nullptr;
    const long long v = strtoll(e, &end, 10);
    if (*end || v < 0) { fprintf(stderr, "EMU cuBLASLt: %s='%s' is not a non-negative integer\n", name, e); exit(2); }
    return v;
}
static inline bool emu_lt_no_algo(cublasLtEpilogue_t ep) {
    const char* env = getenv("EMU_LT_NO_ALGO");
    if (!env) return false;
    const char* name = ep == CUBLASLT_EPILOGUE_BIAS ? "BIAS" : ep == CUBLASLT_EPILOGUE_BGRADB ? "BGRADB"
                     : ep == CUBLASLT_EPILOGUE_BGRADA ? "BGRADA" : ep == CUBLASLT_EPILOGUE_DEFAULT ? "DEFAULT"
                     : ep == CUBLASLT_EPILOGUE_GELU_AUX ? "GELU_AUX" : ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? "GELU_AUX_BIAS"
                     : ep == CUBLASLT_EPILOGUE_DGELU ? "DGELU" : ep == CUBLASLT_EPILOGUE_DGELU_BGRAD ? "DGELU_BGRAD" : "";
    const std::string list = std::string(",") + env + ",", number = std::to_string((int)ep);
    return list.find("," + std::string(name) + ",") != std::string::npos || list.find("," + number + ",") != std::string::npos;
}

static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                                            cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p,
                                                            int requested, cublasLtMatmulHeuristicResult_t* res, int* found) {
    int M, N, K;
    *found = 0;
    cublasStatus_t s = emu_lt_check(d, a, b, c, dd, &M, &N, &K);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    for (int i = 0; i < 4; i++)
        if (p->align[i] < 4 && !(i < 2 && (a->type == CUDA_R_16BF || a->type == CUDA_R_16F) && p->align[i] >= 2) && !(i < 2 && emu_lt_is_fp8(a->type))) {
            fprintf(stderr, "EMU cuBLASLt: alignment preference %u of operand %d is below the element size\n", p->align[i], i);
        }
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    g_emu_heuristic_calls++;
    if (emu_lt_no_algo(d->ep)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const int offered = (int)std::min<int64_t>(requested, emu_env_int("EMU_LT_ALGOS", 3));
    for (int i = 0; i < offered; i++) {
        memset(&res[i], 0, sizeof(res[i]));
        res[i].algo.data[0] = (uint64_t)i;
        res[i].state = CUBLAS_STATUS_SUCCESS;
        res[i].wavesCount = 1.0f;
    }
    *found = offered;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                                     cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t* algo,
                                                     cublasLtMatmulHeuristicResult_t* res) {
    int M, N, K;
    cublasStatus_t s = emu_lt_check(d, a, b, c, dd, &M, &N, &K);
    // an algorithm this cuBLASLt never offers (another version's, replayed from a file) is not supported
    if (s == CUBLAS_STATUS_SUCCESS && algo && (int64_t)algo->data[0] >= emu_env_int("EMU_LT_ALGOS", 3))
        s = CUBLAS_STATUS_NOT_SUPPORTED;
    memset(res, 0, sizeof(*res));
    res->state = s;
    return s;
}
// The planted refusals of an fp8 call (the header comment): algorithm `algo` refused, or a scale pointer misaligned
static inline bool emu_lt_refused(const EmuLtDesc* d, const cublasLtMatmulAlgo_t* algo, bool fp8) {
    if (!fp8) return false;
    if (algo && (int64_t)algo->data[0] < emu_env_int("EMU_LT_REFUSE_ALGOS", 0)) return true;
    const int64_t align = emu_env_int("EMU_LT_SCALE_ALIGN", 1);
    return ((uintptr_t)d->a_scale % align) != 0 || ((uintptr_t)d->b_scale % align) != 0;
}

static inline float emu_ld(const void* p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_8F_E4M3) return (float)((const __nv_fp8_e4m3*)p)[i];
    if (t == CUDA_R_8F_E5M2) return (float)((const __nv_fp8_e5m2*)p)[i];
    if (t == CUDA_R_16F) return (float)((const __half*)p)[i];
    return t == CUDA_R_16BF ? (float)((const __nv_bfloat16*)p)[i] : ((const float*)p)[i];
}
static inline void emu_st(void* p, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __nv_bfloat16(v);
    else if (t == CUDA_R_16F) ((__half*)p)[i] = __half(v);
    else ((float*)p)[i] = v;
}

// dst[r * cols + c] = element r * rs + c * cs of src (of type t), in fp32
template <typename T>
static inline void emu_lt_unpack_t(float* dst, const T* src, int rows, int cols, size_t rs, size_t cs) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)r * cols + c] = (float)src[(size_t)r * rs + (size_t)c * cs];
}
static inline void emu_lt_unpack(float* dst, const void* src, cudaDataType_t t, int rows, int cols, size_t rs, size_t cs) {
    if (t == CUDA_R_8F_E4M3) emu_lt_unpack_t(dst, (const __nv_fp8_e4m3*)src, rows, cols, rs, cs);
    else if (t == CUDA_R_8F_E5M2) emu_lt_unpack_t(dst, (const __nv_fp8_e5m2*)src, rows, cols, rs, cs);
    else if (t == CUDA_R_16F) emu_lt_unpack_t(dst, (const __half*)src, rows, cols, rs, cs);
    else if (t == CUDA_R_16BF) emu_lt_unpack_t(dst, (const __nv_bfloat16*)src, rows, cols, rs, cs);
    else emu_lt_unpack_t(dst, (const float*)src, rows, cols, rs, cs);
}

// D = alpha op(A) op(B) + beta C (+ bias[i] per row: BIAS); BGRADB: bias[j] = sum_k op(B)[k, j] (stored). GELU_AUX(_BIAS):
// aux = that value (with the bias), D = gelu(it); DGELU(_BGRAD): D = that value * gelu'(aux), bias[i] = sum_j D[i, j].
// The shapes are checked and alpha, beta, the descriptor and the layouts read when the call is made; the product runs
// on the stream (at once, or queued in the stream mode, cuda_emu_streams.h).
static inline void emu_lt_product(const EmuLtDesc* d, float al0, float be, const void* A, const EmuLtLayout* la,
                                  const void* Bm, const EmuLtLayout* lb, void* D, const EmuLtLayout* ldd, int M, int N, int K,
                                  bool wrong = false) {
    g_emu_gemms++;
    // alpha times the fp8 operands' scales (1 where no pointer is set); doubled where a wrong product is planted
    const float al = al0 * (d->a_scale ? *d->a_scale : 1.0f) * (d->b_scale ? *d->b_scale : 1.0f) * (wrong ? 2.0f : 1.0f);
    // op(A) as columns of M (acol[p * M + i]), op(B) as columns of K, in fp32 (exact for bf16 and fp8)
    std::vector<float> acol((size_t)M * K), b((size_t)N * K);
    const bool ta = d->ta == CUBLAS_OP_T, tb = d->tb == CUBLAS_OP_T;
    emu_lt_unpack(acol.data(), A, la->type, K, M, ta ? 1 : la->ld, ta ? la->ld : 1);  // (p, i) at A[i + p ld] or A[p + i ld]
    emu_lt_unpack(b.data(), Bm, lb->type, N, K, tb ? 1 : lb->ld, tb ? lb->ld : 1);    // (j, p) at B[p + j ld] or B[j + p ld]
    const cudaDataType_t dt = ldd->type;
    const bool bias = d->ep == CUBLASLT_EPILOGUE_BIAS || d->ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool gelu = d->ep == CUBLASLT_EPILOGUE_GELU_AUX || d->ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dgelu = emu_lt_dgelu(d->ep);
    const cudaDataType_t at = d->aux_type_set ? d->aux_type : dt;  // the aux type defaults to D's
    std::vector<float> dgrad(d->ep == CUBLASLT_EPILOGUE_DGELU_BGRAD ? (size_t)M * N : 0);  // DGELU_BGRAD: D before rounding
    std::vector<float> col_amax(N, 0.0f);
    // Each output sums its K products in fp32 in the order p = 0, 1, ..., K - 1; R = 16 outputs of a column at a time,
    // side by side in four 4-wide vectors (independent sums: the same bits as one output at a time, several times faster)
    typedef float v4 __attribute__((vector_size(16)));
    constexpr int R = 16;
#pragma omp parallel for schedule(dynamic, 4)
    for (int j = 0; j < N; j++) {
        const float* bj = &b[(size_t)j * K];
        for (int i0 = 0; i0 < M; i0 += R) {
            float acc[R] = {};
            if (i0 + R <= M) {
                v4 s0 = {}, s1 = {}, s2 = {}, s3 = {}, x;
                for (int p = 0; p < K; p++) {
                    const float* ap = &acol[(size_t)p * M + i0];
                    const v4 bp = {bj[p], bj[p], bj[p], bj[p]};
                    memcpy(&x, ap, 16), s0 += x * bp;
                    memcpy(&x, ap + 4, 16), s1 += x * bp;
                    memcpy(&x, ap + 8, 16), s2 += x * bp;
                    memcpy(&x, ap + 12, 16), s3 += x * bp;
                }
                memcpy(acc, &s0, 16), memcpy(acc + 4, &s1, 16), memcpy(acc + 8, &s2, 16), memcpy(acc + 12, &s3, 16);
            } else {
                for (int p = 0; p < K; p++)
                    for (int r = 0; r < M - i0; r++) acc[r] += acol[(size_t)p * M + i0 + r] * bj[p];
            }
            for (int i = i0; i < std::min(M, i0 + R); i++) {
                const size_t o = (size_t)i + (size_t)j * ldd->ld;
                float v = al * acc[i - i0];
                if (be != 0.0f) v += be * emu_ld(D, dt, o);
                if (bias) v += emu_ld(d->bias, dt, i);
                if (gelu) {  // the pre-activation to aux (rounded to its type), gelu of the fp32 value to D
                    emu_st(d->aux, at, (size_t)i + (size_t)j * d->aux_ld, v);
                    v = emu_gelu(v);
                } else if (dgelu) {  // the product times gelu' of the stored pre-activation, in fp32
                    v *= emu_gelu_grad(emu_ld(d->aux, at, (size_t)i + (size_t)j * d->aux_ld));
                    if (!dgrad.empty()) dgrad[(size_t)i + (size_t)j * M] = v;
                }
                col_amax[j] = std::max(col_amax[j], std::fabs(v));
                emu_st(D, dt, o, v);
            }
        }
    }
    if (d->amax_d) *d->amax_d = *std::max_element(col_amax.begin(), col_amax.end());
    if (d->ep == CUBLASLT_EPILOGUE_BGRADB) {
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++) acc += b[(size_t)j * K + p];
            emu_st(d->bias, dt, j, acc);
        }
    }
    if (!dgrad.empty()) {  // DGELU_BGRAD: bias[i] = the sum over the columns of D's row i, in fp32 before D's rounding, stored
        for (int i = 0; i < M; i++) {
            float acc = 0.0f;
            for (int j = 0; j < N; j++) acc += dgrad[(size_t)i + (size_t)j * M];
            emu_st(d->bias, dt, i, acc);
        }
    }
}
// The GELU epilogues' aux matrix [M, N] at its leading dimension lies inside the allocation its pointer is in (a GPU
// would fault, or read or write another buffer); a pointer cudaMalloc did not return (a test's own) is not checked.
static inline bool emu_lt_aux_fits(const EmuLtDesc* d, cudaDataType_t dt, int M, int N) {
    const cudaDataType_t at = d->aux_type_set ? d->aux_type : dt;
    const size_t elem = at == CUDA_R_16BF || at == CUDA_R_16F ? 2 : 4;
    const char* p = (const char*)d->aux;
    const size_t bytes = ((size_t)(N - 1) * (size_t)d->aux_ld + (size_t)M) * elem;
    for (const auto& a : g_emu_allocs) {
        const char* base = (const char*)a.first;
        if (p >= base && p < base + a.second) return p + bytes <= base + a.second;
    }
    return true;
}
static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                                            cublasLtMatrixLayout_t la, const void* Bm, cublasLtMatrixLayout_t lb,
                                            const void* beta, const void* Cm, cublasLtMatrixLayout_t lc, void* D,
                                            cublasLtMatrixLayout_t ldd, const cublasLtMatmulAlgo_t* algo, void*, size_t,
                                            cudaStream_t stream, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    int M, N, K;
    cublasStatus_t s = emu_lt_check(d, la, lb, lc, ldd, &M, &N, &K);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (emu_lt_refused(d, algo, emu_lt_is_fp8(la->type))) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (emu_lt_gelu(d->ep) && !emu_lt_aux_fits(d, ldd->type, M, N)) {
        fprintf(stderr, "EMU cuBLASLt: epilogue %d: the aux matrix (%d x %d, leading dimension %lld) runs past the end of "
                "its allocation (%s:%d; on a GPU an illegal memory access)\n", (int)d->ep, M, N, (long long)d->aux_ld, file, line);
        exit(1);
    }
    const float be = *(const float*)beta, al = *(const float*)alpha;
    if (Cm != D && be != 0.0f) {
        fprintf(stderr, "EMU cuBLASLt: C != D not emulated\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const EmuLtDesc dc = *d;
    const EmuLtLayout lac = *la, lbc = *lb, ldc = *ldd;
    const bool wrong = emu_lt_is_fp8(la->type) && algo && (int64_t)algo->data[0] < emu_env_int("EMU_LT_WRONG_ALGOS", 0);
    emu_count_launch("cublasLtMatmul", file, line);
    // EMU_LT_SLOW_ALGOS=K: algorithms 0..K-1 of every GEMM take 100 ms longer (what --gemm-algos tune must notice)
    const bool slow = algo && (int64_t)algo->data[0] < emu_env_int("EMU_LT_SLOW_ALGOS", 0);
    emu_submit(stream, "cublasLtMatmul", file, line, [=]() {
        if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        emu_lt_product(&dc, al, be, A, &lac, Bm, &lbc, D, &ldc, M, N, K, wrong);
    });
    return CUBLAS_STATUS_SUCCESS;
}
