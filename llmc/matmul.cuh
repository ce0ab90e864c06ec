// llmc/matmul.cuh: every matmul of the project through one cuBLASLt call (cublaslt_matmul), with the
// epilogues fused where cuBLASLt offers them: the bias add (forward) and the bias gradient
// (backward). Users: the linear layers of train_gpt.cu and the LM head of the fused classifier
// (llmc/classifier.cuh). The MLP activations stay in llmc/mlp_act.cuh, whose GELU is exactly the
// reference's tanh form and which the selective recompute calls on its own.
//
// Row-major shapes as the callers see them (W is [out, in], nn.Linear's layout):
//   matmul_forward:         out[N,OC] = inp[N,IC] @ W[OC,IC]^T (+ bias[OC])
//   matmul_backward_input:  dinp[N,IC] = dout[N,OC] @ W[OC,IC]           (overwritten)
//   matmul_backward_weight: dW[OC,IC] += dout[N,OC]^T @ inp[N,IC]; dbias[OC] += sum_n dout[n,:]
//                           (dW floatX for the layers, fp32 for the classifier's LM head gradient)
// Inputs are floatX; outputs floatX except dW, which may be fp32. Every matrix is dense (leading
// dimension = its row length). MatmulContext holds the one cuBLASLt handle, its workspace and the
// bias-gradient scratch; each call asks cuBLASLt's heuristic for an algorithm (nothing is cached).
// cuBLASLt is column-major; a row-major [R, C] matrix is a column-major [C, R] one, so each
// call below is written with the transposes that make the column-major product come out as
// the row-major result (derivations beside each call).
#pragma once
#include <cstdint>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include "llmc/cuda_common.cuh"
#include "llmc/precision.cuh"

struct MatmulContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_size = 32ull << 20;   // 32 MiB, what Hopper kernels ask for
    floatX* bias_scratch = nullptr;         // [max bias length] one micro-batch's bias gradient (BGRADB output)
    int bias_scratch_len = 0;
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

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment preferences).
static inline uint32_t pointer_alignment(const void* p) {
    uint32_t align = 256;
    while (align > 1 && ((uintptr_t)p % align) != 0) align /= 2;
    return align;
}

// The one cuBLASLt call: D[m,n] (column-major) = op(A)[m,k] @ op(B)[k,n] (+ D if accumulate),
// with an epilogue, fp32 accumulation. A and B are floatX, D is d_type (floatX or fp32; C = D).
// All three are dense: the leading dimension is the stored matrix's column-major row count.
// bias: the epilogue's bias input or bias-gradient output, of type bias_type; cuBLASLt documents the
// bias type as the output's for bf16 and fp32 outputs, so the callers pass floatX biases with floatX D.
static inline void cublaslt_matmul(MatmulContext* ctx, cudaStream_t stream, void* d, cudaDataType_t d_type,
                                   const floatX* a, const floatX* b, int m, int n, int k, bool trans_a, bool trans_b,
                                   bool accumulate, cublasLtEpilogue_t epilogue, const void* bias,
                                   cudaDataType_t bias_type) {
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
    // column-major layouts of the stored matrices (before op)
    cublasLtMatrixLayout_t la, lb, ld_;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_FLOATX, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_FLOATX, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld_, d_type, m, n, m));

    // The heuristic may otherwise assume 256-byte aligned matrices (its default); ours are 16-byte aligned
    // (tensor offsets are multiples of 8 elements), so tell it the alignment each pointer really has.
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx->workspace_size,
                                                     sizeof(ctx->workspace_size)));
    const uint32_t align_a = pointer_alignment(a), align_b = pointer_alignment(b), align_d = pointer_alignment(d);
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                     sizeof(align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                     sizeof(align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                     sizeof(align_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                     sizeof(align_d)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, la, lb, ld_, ld_, pref, 1, &heur, &found));
    if (found == 0) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for m=%d n=%d k=%d transA=%d transB=%d epilogue=%d "
                        "output type %d (shapes must be multiples of 8 for tensor cores)\n", m, n, k,
                (int)trans_a, (int)trans_b, (int)epilogue, (int)d_type);
        exit(1);
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasCheck(cublasLtMatmul(ctx->handle, desc, &alpha, a, la, b, lb, &beta, d, ld_, d, ld_, &heur.algo,
                               ctx->workspace, ctx->workspace_size, stream));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld_));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
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

// Adds the bias gradient of one micro-batch into the parameter gradient (the sum in fp32, one rounding).
__global__ static void bias_grad_accumulate_kernel(floatX* dbias, const floatX* scratch, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dbias[i] = to_floatX(to_float(dbias[i]) + to_float(scratch[i]));
}

// dW[OC,IC] += dout[N,OC]^T @ inp[N,IC]; dbias[OC] += column sums of dout. Column-major: inp is
// [IC,N], dout is [OC,N] so op(B) = B^T is [N,OC]: D[IC,OC] = A[IC,N] @ B^T[N,OC], which is
// dW row-major [OC,IC]. BGRADB reduces op(B) over k = N: one value per output channel, which it stores
// (it does not add), so it goes to the context's scratch and a small kernel adds it into dbias.
// GradT (dW's element type) is floatX or float: cuBLASLt accumulates into either (beta = 1); a bias
// gradient needs GradT = floatX (its type is the output's).
template <typename GradT>
static inline void matmul_backward_weight(MatmulContext* ctx, cudaStream_t stream, GradT* dw, floatX* dbias,
                                          const floatX* dout, const floatX* inp, int N, int IC, int OC) {
    if (dbias && OC > ctx->bias_scratch_len) {
        fprintf(stderr, "error: bias of %d channels exceeds the matmul scratch of %d\n", OC, ctx->bias_scratch_len);
        exit(1);
    }
    if (dbias && cublaslt_type(dw) != CUDA_FLOATX) {
        fprintf(stderr, "error: matmul_backward_weight: a bias gradient needs dW of the element type floatX\n");
        exit(1);
    }
    cublasLtEpilogue_t ep = dbias ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
    cublaslt_matmul(ctx, stream, dw, cublaslt_type(dw), inp, dout, IC, OC, N, false, true, true, ep,
                    dbias ? ctx->bias_scratch : nullptr, CUDA_FLOATX);
    if (dbias) {
        bias_grad_accumulate_kernel<<<(OC + 255) / 256, 256, 0, stream>>>(dbias, ctx->bias_scratch, OC);
        cudaCheck(cudaGetLastError());
    }
}
