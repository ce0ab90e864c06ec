// llmc/matmul_fp8.cuh: the fp8 linear layers through cuBLASLt (cublaslt_matmul_fp8), with the same context,
// cached heuristic (one query per distinct key: the key also holds the operand types and the fast-accumulation
// flag and whether the amax of D is asked for) and bias fallback as the bf16 GEMMs of llmc/matmul.cuh. Operands come from llmc/fp8.cuh's casts, each
// with the device pointer to its scale_inv (the dequantization factor); outputs are floatX (bf16; the fp8 path
// exists only in the bf16 build, fp8_require_device() refuses the fp32 one) with fp32 accumulation:
//   D = scale_inv_a * scale_inv_b * (op(A) @ op(B)) (+ bias) (+ D when accumulating)
//
// Row-major shapes as the callers see them (W is [out, in], nn.Linear's layout); E4M3 for weights and
// activations, E5M2 for gradients (docs/fp8.md):
//   matmul_fp8_forward:         out[N,OC] = inp8[N,IC] @ w8[OC,IC]^T (+ bias[OC])                 E4M3 x E4M3
//   matmul_fp8_backward_input:  dinp[N,IC] = dout8[N,OC] @ W[OC,IC], W given transposed: wt8[IC,OC]  E5M2 x E4M3
//   matmul_fp8_backward_weight: dW[OC,IC] += dout^T @ inp, both given transposed: doutt8[OC,N], inpt8[IC,N];
//                               dbias[OC] += column sums of the bf16 dout[N,OC]                   E5M2 x E4M3
//
// Layout: cuBLASLt's fp8 GEMMs on Hopper take only "TN", transa = T and transb = N (cuBLAS documentation,
// cublasLtMatmul, the FP8 requirements: "A must be transposed and B non-transposed"), i.e. both operands stored
// contiguous along K: in row-major terms D^T[n, m] = B[n, k] @ A[m, k]^T. That is nn.Linear's forward as it is;
// the backward GEMMs need the transposed fp8 copies fp8_cast_transpose makes (W^T for the input gradient; the
// activation and the output gradient transposed for the weight gradient, whose K is the N = B*T tokens). K and
// the leading dimensions must be multiples of 16. Neither operand pair may be E5M2 x E5M2.
//
// Fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM; cublasLt.h: "faster but at the cost of lower accuracy
// because intermediate results will not periodically be promoted to a higher precision"): on for the forward, off
// for both backward GEMMs, as TransformerEngine does (transformer_engine/pytorch/module/base.py: _2X_ACC_FPROP =
// False, _2X_ACC_DGRAD = True, _2X_ACC_WGRAD = True; "2X_ACC", the split accumulator, is fast accumulation off).
// Why: Hopper's fp8 tensor cores keep partial sums with fewer bits than fp32 (about 14, DeepSeek-V3 technical
// report, arXiv:2412.19437, section 3.3.2), and the error grows with K: the weight gradient sums over all B*T
// tokens of the micro-batch, the input gradient's E5M2 operand has one mantissa bit less; the forward's K is
// the layer width (C or the ffn size), and it is the GEMM whose speed matters most.
//
// The amax of D (CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, set to max |D|): what a GEMM writing an fp8 D would need
// for the next cast's scale; the GEMMs here write bf16 and the next GEMM's cast computes its input's amax itself,
// so the callers pass null unless they want it.
#pragma once
#include <cublasLt.h>
#include <cuda_fp8.h>
#include "llmc/fp8.cuh"
#include "llmc/matmul.cuh"

// An fp8 GEMM in words, for messages: its shape, layout and types.
static inline std::string fp8_gemm_words(int m, int n, int k, cudaDataType_t a_type, cudaDataType_t b_type,
                                         cudaDataType_t d_type, bool fast_accum, bool bias) {
    char s[320];
    snprintf(s, sizeof(s), "m=%d n=%d k=%d, TN (A [k, m] and B [k, n] stored along k), %s x %s -> %s, fast "
             "accumulation %s%s", m, n, k, cuda_type_name(a_type), cuda_type_name(b_type), cuda_type_name(d_type),
             fast_accum ? "on" : "off", bias ? ", bias epilogue" : "");
    return s;
}

// D[m,n] (column-major, d_type floatX or fp32, dense) = a_scale_inv * b_scale_inv * A^T[m,k] @ B[k,n] (+ bias[m]
// per row) (+ D if accumulate). A stored column-major [k, m] (row-major [m, k]), B column-major [k, n] (row-major
// [n, k]), both fp8 of the given types. amax_d (or null): set to max |D|.
static inline void cublaslt_matmul_fp8(MatmulContext* ctx, cudaStream_t stream, void* d, cudaDataType_t d_type,
                                       const void* a, cudaDataType_t a_type, const float* a_scale_inv, const void* b,
                                       cudaDataType_t b_type, const float* b_scale_inv, int m, int n, int k,
                                       bool accumulate, bool fast_accum, const floatX* bias, float* amax_d) {
    const cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));  // fp32 accumulation and scales
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;                     // "TN", the only fp8 layout
    const int8_t fast = fast_accum ? 1 : 0;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale_inv, sizeof(a_scale_inv)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale_inv, sizeof(b_scale_inv)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    if (amax_d) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax_d, sizeof(amax_d)));
    if (bias) {
        const cudaDataType_t bias_type = CUDA_FLOATX;  // a bf16 D takes a bf16 bias, fp8 operands or not
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    cublasLtMatrixLayout_t la, lb, ld_;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, a_type, k, m, k));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, b_type, k, n, k));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld_, d_type, m, n, m));

    const MatmulKey key{m, n, k, true, false, epilogue, d_type, d_type, pointer_alignment(a), pointer_alignment(b),
                        pointer_alignment(d), a_type, b_type, fast_accum, amax_d != nullptr, 0};
    if (cublaslt_run(ctx, key, desc, la, lb, ld_, a, b, d, accumulate, stream)) return;
    if (epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
        if (ctx->fp8_check) {  // why: cuBLASLt's answers
            ctx->fp8_refused = true;
            return;
        }
        die("cuBLASLt has no fp8 algorithm for %s: %s (llmc/matmul_fp8.cuh; fp8 GEMMs need compute capability 8.9+, K a "
            "multiple of 16 and not both operands E5M2; dev/probe/fp8_gemm pins the cause on a GPU)",
            fp8_gemm_words(m, n, k, a_type, b_type, d_type, fast_accum, false).c_str(), ctx->why.c_str());
    }
    // no algorithm with the bias epilogue: the plain product, then matmul.cuh's bias kernel
    if (amax_d || d_type != CUDA_FLOATX)
        die("llmc/matmul_fp8.cuh: no cuBLASLt algorithm with the bias epilogue, and its fallback supports neither "
            "the amax of D nor an output other than floatX");
    cublaslt_matmul_fp8(ctx, stream, d, d_type, a, a_type, a_scale_inv, b, b_type, b_scale_inv, m, n, k, accumulate,
                        fast_accum, nullptr, nullptr);
    if (ctx->fp8_refused) return;  // the start-up check: refused without the epilogue too
    matmul_bias_add_kernel<<<(unsigned)ceil_div((size_t)m * n, 256), 256, 0, stream>>>((floatX*)d, bias, m, n);
    cudaCheck(cudaGetLastError());
}

// out[N,OC] = inp8[N,IC] @ w8[OC,IC]^T (+ bias). Column-major: A = w8 stored [IC, OC] (op(A) = A^T [OC, IC]),
// B = inp8 stored [IC, N]: D[OC, N] is out row-major [N, OC]. Fast accumulation on.
static inline void matmul_fp8_forward(MatmulContext* ctx, cudaStream_t stream, floatX* out, const __nv_fp8_e4m3* inp8,
                                      const float* inp_scale_inv, const __nv_fp8_e4m3* w8, const float* w_scale_inv,
                                      const floatX* bias, int N, int IC, int OC) {
    cublaslt_matmul_fp8(ctx, stream, out, CUDA_FLOATX, w8, CUDA_R_8F_E4M3, w_scale_inv, inp8, CUDA_R_8F_E4M3,
                        inp_scale_inv, OC, N, IC, false, true, bias, nullptr);
}

// dinp[N,IC] = dout8[N,OC] @ W[OC,IC], with W given as wt8[IC,OC] = W^T. Column-major: A = wt8 stored [OC, IC]
// (op(A) [IC, OC]), B = dout8 stored [OC, N]: D[IC, N] is dinp row-major [N, IC]. Fast accumulation off.
static inline void matmul_fp8_backward_input(MatmulContext* ctx, cudaStream_t stream, floatX* dinp,
                                             const __nv_fp8_e5m2* dout8, const float* dout_scale_inv,
                                             const __nv_fp8_e4m3* wt8, const float* w_scale_inv, int N, int IC, int OC) {
    cublaslt_matmul_fp8(ctx, stream, dinp, CUDA_FLOATX, wt8, CUDA_R_8F_E4M3, w_scale_inv, dout8, CUDA_R_8F_E5M2,
                        dout_scale_inv, IC, N, OC, false, false, nullptr, nullptr);
}

// dW[OC,IC] += dout^T[OC,N] @ inp[N,IC], from doutt8[OC,N] and inpt8[IC,N]. Column-major: A = inpt8 stored [N, IC]
// (op(A) [IC, N]), B = doutt8 stored [N, OC]: D[IC, OC] is dW row-major [OC, IC]. Fast accumulation off.
// dbias (or null): += column sums of dout[N,OC] (the bf16 gradient, not its fp8 copy), through matmul.cuh's
// fixed-order kernel and the context's scratch. GradT: floatX or float (the fp32 gradient accumulator).
template <typename GradT>
static inline void matmul_fp8_backward_weight(MatmulContext* ctx, cudaStream_t stream, GradT* dw, floatX* dbias,
                                              const floatX* dout, const __nv_fp8_e5m2* doutt8, const float* dout_scale_inv,
                                              const __nv_fp8_e4m3* inpt8, const float* inp_scale_inv, int N, int IC,
                                              int OC) {
    if (dbias && OC > ctx->bias_scratch_len)
        die("llmc/matmul_fp8.cuh: bias of %d channels exceeds the matmul scratch of %d", OC, ctx->bias_scratch_len);
    cublaslt_matmul_fp8(ctx, stream, dw, cublaslt_type(dw), inpt8, CUDA_R_8F_E4M3, inp_scale_inv, doutt8,
                        CUDA_R_8F_E5M2, dout_scale_inv, IC, OC, N, true, false, nullptr, nullptr);
    if (!dbias) return;
    // op(B) = dout as [k = N, n = OC]: element (r, j) at dout[r * OC + j]
    matmul_bias_grad_kernel<<<(unsigned)ceil_div(OC, 32), dim3(32, 16), 0, stream>>>(ctx->bias_scratch, dout, N, OC,
                                                                                      (size_t)OC, 1);
    cudaCheck(cudaGetLastError());
    bias_grad_accumulate_kernel<<<(OC + 255) / 256, 256, 0, stream>>>(dbias, ctx->bias_scratch, OC, true);
    cudaCheck(cudaGetLastError());
}
