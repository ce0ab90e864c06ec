// llmc/classifier.cuh: the fused classifier: LM head plus softmax cross-entropy, forward and
// backward, in chunks of tokens so that full-batch logits never exist (a 128K vocabulary times
// 16K tokens would be 4 GiB of bf16). Per chunk of rows:
//   1. cuBLASLt: logits[rows, Vp] = x[rows, C] W[Vp, C]^T            (bf16 out, fp32 accumulate)
//   2. fused_classifier_kernel, one block per row: max and sum of exps in one online pass with
//      128-bit loads, loss = lse - logit[target], then dlogits = (softmax - onehot) * scale
//      written over the logits (padded columns >= V and ignored rows (target -1) get 0)
//   3. cuBLASLt: dx[rows, C] = dlogits W                                  (bf16)
//   4. cuBLASLt: dW[Vp, C] += dlogits^T x[rows, C]                         (fp32, accumulated)
// Launchers:
//   matmul_lt(...)                          one cuBLASLt GEMM in row-major terms (below)
//   fused_classifier_rows(...)              step 2 on `rows` rows of logits
//   fused_classifier(...)                   steps 1-4 over all N rows, chunk rows at a time
// Shapes: N tokens, C channels, V vocabulary, Vp = V padded to a multiple of 8 (the trainer pads
// to 128); targets [N] int32 with -1 = ignore; losses [N] fp32 (0 on ignored rows); lse [N] fp32.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"

// ---- cuBLASLt -------------------------------------------------------------------------------------

// Row-major D[m, n] (ldd) = alpha * opA(A) opB(B) + beta * D, fp32 accumulate, where opA(A) is
// [m, k] and opB(B) is [k, n]; a_trans means A is stored as [k, m] (row-major, lda), b_trans that
// B is stored as [n, k] (ldb). A and B are bf16; D is bf16 or fp32 (d_type). cuBLASLt is
// column-major, so this computes D^T = opB(B)^T opA(A)^T with the operands swapped.
static void matmul_lt(cublasLtHandle_t lt, void* d, cudaDataType_t d_type, int ldd, const __nv_bfloat16* a,
                      bool a_trans, int lda, const __nv_bfloat16* b, bool b_trans, int ldb, int m, int n, int k,
                      float beta, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // column-major view: D^T[n, m] = opB'(B) [n, k] * opA'(A) [k, m]
    cublasOperation_t op_first = b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;   // B row-major [k,n] = col-major [n,k]
    cublasOperation_t op_second = a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // A row-major [m,k] = col-major [k,m]
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    cublasLtMatrixLayout_t la, lb, lc;
    // first operand (B): col-major [n, k] when not transposed, stored [k, n] when transposed
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, b_trans ? k : n, b_trans ? n : k, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, a_trans ? m : k, a_trans ? k : m, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, d_type, n, m, ldd));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                     sizeof(workspace_bytes)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found));
    if (found == 0)
        die("matmul_lt: cuBLASLt has no algorithm for m=%d n=%d k=%d (a_trans %d, b_trans %d, lda %d, ldb %d, ldd %d)",
            m, n, k, (int)a_trans, (int)b_trans, lda, ldb, ldd);
    const float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, d, lc, d, lc, &heur.algo, workspace,
                               workspace_bytes, stream));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
}

// ---- the fused row kernel ---------------------------------------------------------------------------

static const int CLS_THREADS = 512;

// Merges the softmax statistics (m, s) = (max, sum of exp(x - max)) of two sets.
__device__ __forceinline__ void online_merge(float* m, float* s, float m2, float s2) {
    const float mn = fmaxf(*m, m2);
    if (mn == -INFINITY) return;  // both empty
    *s = *s * __expf(*m - mn) + s2 * __expf(m2 - mn);
    *m = mn;
}

// One block per row of logits [rows, Vp] (bf16, Vp % 8 == 0, rows 16-byte aligned). Reads the row
// once for the statistics (per thread: online max and sum over 8-wide vectors), reduces them over
// the block, then reads it again to write dlogits = (softmax - onehot) * scale in place.
// losses[row] = lse - logit[target] (0 when target < 0); lse[row] when lse is not null.
__global__ void __launch_bounds__(CLS_THREADS)
fused_classifier_kernel(__nv_bfloat16* logits, float* losses, float* lse, const int32_t* targets, int V, int Vp,
                        float scale) {
    __shared__ float red_m[CLS_THREADS / 32], red_s[CLS_THREADS / 32];
    __shared__ float stats[2];  // lse, target logit
    const int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __nv_bfloat16* x = logits + (size_t)row * Vp;
    const int target = targets[row];
    if (threadIdx.x == 0) stats[1] = target >= 0 ? __bfloat162float(x[target]) : 0.0f;  // read before overwrite
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x * 8; c < Vp; c += CLS_THREADS * 8) {
        const Pack8 raw = load8(x + c);
        float f[8], vmax = -INFINITY;
        for (int i = 0; i < 8; i++) {
            f[i] = (c + i < V) ? __bfloat162float(raw.v[i]) : -INFINITY;
            vmax = fmaxf(vmax, f[i]);
        }
        if (vmax == -INFINITY) continue;  // all padding
        const float mn = fmaxf(m, vmax);
        float add = 0.0f;
        for (int i = 0; i < 8; i++) add += __expf(f[i] - mn);
        s = s * __expf(m - mn) + add;
        m = mn;
    }
    for (int off = 16; off > 0; off /= 2)
        online_merge(&m, &s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
    if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < CLS_THREADS / 32 ? red_m[lane] : -INFINITY;
        s = lane < CLS_THREADS / 32 ? red_s[lane] : 0.0f;
        for (int off = 16; off > 0; off /= 2)
            online_merge(&m, &s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
        if (lane == 0) {
            const float l = m + __logf(s);
            if (lse) lse[row] = l;
            losses[row] = target >= 0 ? l - stats[1] : 0.0f;
            stats[0] = l;
        }
    }
    __syncthreads();
    const float l = stats[0];
    for (int c = threadIdx.x * 8; c < Vp; c += CLS_THREADS * 8) {
        Pack8 raw = load8(x + c);
        for (int i = 0; i < 8; i++) {
            const int col = c + i;
            float d = 0.0f;
            if (target >= 0 && col < V) d = (__expf(__bfloat162float(raw.v[i]) - l) - (col == target ? 1.0f : 0.0f)) * scale;
            raw.v[i] = __float2bfloat16(d);
        }
        store8(x + c, raw);
    }
}

// Step 2 on rows rows of logits (row-major [rows, Vp]); targets, losses, lse start at the chunk's row.
static void fused_classifier_rows(__nv_bfloat16* logits, float* losses, float* lse, const int32_t* targets, int rows,
                                  int V, int Vp, float scale, cudaStream_t stream) {
    if (Vp % 8 != 0 || V > Vp) die("fused_classifier: need V <= Vp and Vp a multiple of 8 (V=%d, Vp=%d)", V, Vp);
    fused_classifier_kernel<<<rows, CLS_THREADS, 0, stream>>>(logits, losses, lse, targets, V, Vp, scale);
    cudaCheck(cudaGetLastError());
}

// Forward and backward of the LM head and the loss over N rows, chunk rows at a time.
//   dx [N, C] bf16 (overwritten), dw [Vp, C] fp32 (accumulated: the caller zeroes it once per step),
//   losses [N], lse [N] (may be null) <- x [N, C], w [Vp, C], targets [N]; scale is usually
//   1 / (number of valid targets). logits_chunk [chunk, Vp] bf16 is scratch.
static void fused_classifier(__nv_bfloat16* dx, float* dw, float* losses, float* lse, __nv_bfloat16* logits_chunk,
                             const __nv_bfloat16* x, const __nv_bfloat16* w, const int32_t* targets, int N, int C,
                             int V, int Vp, int chunk, float scale, cublasLtHandle_t lt, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
    if (chunk < 1) die("fused_classifier: chunk must be positive (got %d)", chunk);
    for (int r0 = 0; r0 < N; r0 += chunk) {
        const int rows = N - r0 < chunk ? N - r0 : chunk;
        const __nv_bfloat16* xc = x + (size_t)r0 * C;
        // logits[rows, Vp] = x[rows, C] W^T: A = x (not transposed), B = W stored [Vp, C] (transposed)
        matmul_lt(lt, logits_chunk, CUDA_R_16BF, Vp, xc, false, C, w, true, C, rows, Vp, C, 0.0f, workspace,
                  workspace_bytes, stream);
        fused_classifier_rows(logits_chunk, losses + r0, lse ? lse + r0 : nullptr, targets + r0, rows, V, Vp, scale,
                              stream);
        // dx[rows, C] = dlogits[rows, Vp] W[Vp, C]
        matmul_lt(lt, dx + (size_t)r0 * C, CUDA_R_16BF, C, logits_chunk, false, Vp, w, false, C, rows, C, Vp, 0.0f,
                  workspace, workspace_bytes, stream);
        // dW[Vp, C] += dlogits^T x: A = dlogits stored [rows, Vp] (transposed), B = x[rows, C]
        matmul_lt(lt, dw, CUDA_R_32F, C, logits_chunk, true, Vp, xc, false, C, Vp, C, rows, 1.0f, workspace,
                  workspace_bytes, stream);
    }
}
