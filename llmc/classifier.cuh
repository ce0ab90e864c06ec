// llmc/classifier.cuh: the fused classifier: LM head plus softmax cross-entropy, forward and
// backward, in panels of rows (up to `panel` consecutive tokens each) so that full-batch logits never
// exist (a 128K vocabulary times 16K tokens would be 4 GiB of bf16). Per panel of rows:
//   1. matmul_forward: logits[rows, Vp] = x[rows, C] W[Vp, C]^T      (floatX out, fp32 accumulate)
//   2. fused_classifier_kernel, one block per row: max and sum of exps in one online pass with
//      8-element vector loads, loss = lse - logit[target], then dlogits = (softmax - onehot) * scale
//      written over the logits (padded columns >= V and ignored rows (target -1) get 0)
//   3. matmul_backward_input: dx[rows, C] = dlogits W                    (floatX)
//   4. matmul_backward_weight: dW[Vp, C] += dlogits^T x[rows, C]         (fp32, accumulated; or written by the
//                                                                          first panel, when dW holds nothing yet)
// The GEMMs are llmc/matmul.cuh's (one cuBLASLt call for the whole project), with the LM head as a
// linear layer of IC = C inputs and OC = Vp outputs over N = rows tokens.
// Launchers:
//   fused_classifier_rows(...)              step 2 on `rows` rows of logits
//   fused_classifier(...)                   steps 1-4 over all N rows, a panel at a time; its optional `phase`
//                                           hook is told each step as it starts (step, rows, C, Vp; 4: done), as
//                                           train_gpt's step profile times them (llmc/profile.cuh)
// Tensor parallel (vocabulary-parallel cross-entropy, Megatron): a rank holds the head rows [v0, v0 + Vpl) and
// computes only those logit columns [rows, Vpl] per panel; the trainer combines the rows' statistics over the tp
// ranks between these steps, so no rank ever holds full logits:
//   vocab_parallel_max_target   mx[row] = max over its valid columns (v0 + col < V), tgt[row] = the target's logit
//                               when this rank holds it, else 0        (then: max of mx, sum of tgt over tp)
//   vocab_parallel_sum_exp      sum[row] = sum over its valid columns of exp(logit - mx[row])  (then: sum over tp)
//   vocab_parallel_loss_grad    lse = mx + log(sum), losses[row] = lse - tgt (0 when target < 0), and dlogits =
//                               (softmax - onehot) * scale over its columns, in place
// NormHead (Baichuan2, --norm-head): the classifier reads the head's rows of unit length instead:
//   norm_head_forward           wn = rows of W over their lengths, rnorm = 1 / lengths (once per forward)
//   norm_head_backward          the step's fp32 dW of wn turned into dW of W, in place (once per step)
// Shapes: N tokens, C channels, V vocabulary, Vp = V padded to a multiple of 8 (the trainer pads
// to 128); targets [N] int32 with -1 = ignore; losses [N] fp32 (0 on ignored rows); lse [N] fp32.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "llmc/cuda_common.cuh"
#include "llmc/matmul.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"

// ---- the fused row kernel ---------------------------------------------------------------------------

static const int CLS_THREADS = 512;

// Merges the softmax statistics (m, s) = (max, sum of exp(x - max)) of two sets.
__device__ __forceinline__ void online_merge(float* m, float* s, float m2, float s2) {
    const float mn = fmaxf(*m, m2);
    if (mn == -INFINITY) return;  // both empty
    *s = *s * __expf(*m - mn) + s2 * __expf(m2 - mn);
    *m = mn;
}

// One block per row of logits [rows, Vp] (floatX, Vp % 8 == 0, rows 16-byte aligned). Reads the row
// once for the statistics (per thread: online max and sum over 8-wide vectors), reduces them over
// the block, then reads it again to write dlogits = (softmax - onehot) * scale in place.
// losses[row] = lse - logit[target] (0 when target < 0); lse[row] when lse is not null.
__global__ void __launch_bounds__(CLS_THREADS)
fused_classifier_kernel(floatX* logits, float* losses, float* lse, const int32_t* targets, int V, int Vp,
                        float scale) {
    __shared__ float red_m[CLS_THREADS / 32], red_s[CLS_THREADS / 32];
    __shared__ float stats[2];  // lse, target logit
    const int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    floatX* x = logits + (size_t)row * Vp;
    const int target = targets[row];
    if (threadIdx.x == 0) stats[1] = target >= 0 ? to_float(x[target]) : 0.0f;  // read before overwrite
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x * 8; c < Vp; c += CLS_THREADS * 8) {
        const Pack8 raw = load8(x + c);
        float f[8], vmax = -INFINITY;
        for (int i = 0; i < 8; i++) {
            f[i] = (c + i < V) ? to_float(raw.v[i]) : -INFINITY;
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
            if (target >= 0 && col < V) d = (__expf(to_float(raw.v[i]) - l) - (col == target ? 1.0f : 0.0f)) * scale;
            raw.v[i] = to_floatX(d);
        }
        store8(x + c, raw);
    }
}

// Step 2 on rows rows of logits (row-major [rows, Vp]); targets, losses, lse start at the panel's first row.
static void fused_classifier_rows(floatX* logits, float* losses, float* lse, const int32_t* targets, int rows,
                                  int V, int Vp, float scale, cudaStream_t stream) {
    if (Vp % 8 != 0 || V > Vp) die("fused_classifier: need V <= Vp and Vp a multiple of 8 (V=%d, Vp=%d)", V, Vp);
    fused_classifier_kernel<<<rows, CLS_THREADS, 0, stream>>>(logits, losses, lse, targets, V, Vp, scale);
    cudaCheck(cudaGetLastError());
}

// Forward and backward of the LM head and the loss over N rows, a panel of rows at a time.
//   dx [N, C] floatX (overwritten), dw [Vp, C] fp32 (accumulated; with accumulate false the first panel writes it,
//   beta 0, so the caller need not zero it),
//   losses [N], lse [N] (may be null) <- x [N, C], w [Vp, C], targets [N]; scale is usually
//   1 / (number of valid targets). logits_panel [panel, Vp] floatX is scratch. mm: the matmul context
//   (its bias scratch is not used).
static void fused_classifier(floatX* dx, float* dw, float* losses, float* lse, floatX* logits_panel,
                             const floatX* x, const floatX* w, const int32_t* targets, int N, int C,
                             int V, int Vp, int panel, float scale, bool accumulate, MatmulContext* mm,
                             cudaStream_t stream, void (*phase)(int step, int rows, int C, int Vp) = nullptr) {
    if (panel < 1) die("fused_classifier: panel must be positive (got %d)", panel);
    for (int r0 = 0; r0 < N; r0 += panel) {
        const int rows = N - r0 < panel ? N - r0 : panel;
        const floatX* xc = x + (size_t)r0 * C;
        if (phase) phase(0, rows, C, Vp);
        // logits[rows, Vp] = x[rows, C] W[Vp, C]^T. Column-major: D[Vp, rows] = W^T[Vp, C] @ x[C, rows]
        // (m = Vp, n = rows, k = C; A = W stored column-major [C, Vp], transposed; B = x not transposed).
        matmul_forward(mm, stream, logits_panel, xc, w, nullptr, rows, C, Vp);
        if (phase) phase(1, rows, C, Vp);
        fused_classifier_rows(logits_panel, losses + r0, lse ? lse + r0 : nullptr, targets + r0, rows, V, Vp, scale,
                              stream);
        // dx[rows, C] = dlogits[rows, Vp] W[Vp, C]. Column-major: D[C, rows] = W[C, Vp] @ dlogits[Vp, rows]
        // (m = C, n = rows, k = Vp; neither transposed).
        if (phase) phase(2, rows, C, Vp);
        matmul_backward_input(mm, stream, dx + (size_t)r0 * C, logits_panel, w, rows, C, Vp);
        // dW[Vp, C] += dlogits^T x[rows, C]. Column-major: D[C, Vp] += x[C, rows] @ dlogits^T[rows, Vp]
        // (m = C, n = Vp, k = rows; B = dlogits stored column-major [Vp, rows], transposed); D fp32, beta 1 (0 for the
        // first panel when !accumulate).
        if (phase) phase(3, rows, C, Vp);
        matmul_backward_weight(mm, stream, dw, nullptr, logits_panel, xc, rows, C, Vp, accumulate || r0 > 0);
        if (phase) phase(4, rows, C, Vp);
    }
}

// ---- vocabulary-parallel cross-entropy (tensor parallel) ---------------------------------------------

static const int VP_THREADS = 256;

// Block-wide max (is_max) or sum of v over VP_THREADS threads; every thread gets the result.
__device__ __forceinline__ float vp_block_reduce(float v, bool is_max) {
    __shared__ float red[VP_THREADS / 32];
    __shared__ float out;
    for (int off = 16; off > 0; off /= 2) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = is_max ? fmaxf(v, o) : v + o;
    }
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = red[0];
        for (int w = 1; w < VP_THREADS / 32; w++) r = is_max ? fmaxf(r, red[w]) : r + red[w];
        out = r;
    }
    __syncthreads();
    return out;
}

// One block per row of logits [rows, Vpl] (this rank's columns, global column v0 + col).
__global__ void __launch_bounds__(VP_THREADS)
vocab_parallel_max_target_kernel(const floatX* logits, float* mx, float* tgt, const int32_t* targets, int v0, int V,
                                 int Vpl) {
    const int row = blockIdx.x, nv = min(Vpl, V - v0);
    const floatX* x = logits + (size_t)row * Vpl;
    float m = -INFINITY;
    for (int c = threadIdx.x * 8; c < nv; c += VP_THREADS * 8) {
        const Pack8 raw = load8(x + c);
        for (int i = 0; i < 8; i++)
            if (c + i < nv) m = fmaxf(m, to_float(raw.v[i]));
    }
    m = vp_block_reduce(m, true);
    if (threadIdx.x == 0) {
        const int t = targets[row] - v0;
        mx[row] = m;
        tgt[row] = targets[row] >= 0 && t >= 0 && t < nv ? to_float(x[t]) : 0.0f;
    }
}

__global__ void __launch_bounds__(VP_THREADS)
vocab_parallel_sum_exp_kernel(const floatX* logits, const float* mx, float* sum, int v0, int V, int Vpl) {
    const int row = blockIdx.x, nv = min(Vpl, V - v0);
    const floatX* x = logits + (size_t)row * Vpl;
    const float m = mx[row];
    float s = 0.0f;
    for (int c = threadIdx.x * 8; c < nv; c += VP_THREADS * 8) {
        const Pack8 raw = load8(x + c);
        for (int i = 0; i < 8; i++)
            if (c + i < nv) s += __expf(to_float(raw.v[i]) - m);
    }
    s = vp_block_reduce(s, false);
    if (threadIdx.x == 0) sum[row] = s;
}

__global__ void __launch_bounds__(VP_THREADS)
vocab_parallel_loss_grad_kernel(floatX* logits, float* losses, const float* mx, const float* sum, const float* tgt,
                                const int32_t* targets, int v0, int V, int Vpl, float scale) {
    const int row = blockIdx.x, target = targets[row];
    floatX* x = logits + (size_t)row * Vpl;
    const float l = mx[row] + __logf(sum[row]);
    if (threadIdx.x == 0) losses[row] = target >= 0 ? l - tgt[row] : 0.0f;
    for (int c = threadIdx.x * 8; c < Vpl; c += VP_THREADS * 8) {
        Pack8 raw = load8(x + c);
        for (int i = 0; i < 8; i++) {
            const int col = v0 + c + i;
            float d = 0.0f;
            if (target >= 0 && col < V) d = (__expf(to_float(raw.v[i]) - l) - (col == target ? 1.0f : 0.0f)) * scale;
            raw.v[i] = to_floatX(d);
        }
        store8(x + c, raw);
    }
}

// A rank's columns may all be padding (v0 >= V: it adds no logits, its max is -inf, the other ranks' is not).
static void vocab_parallel_check(int V, int Vpl, int v0) {
    if (Vpl % 8 != 0 || v0 < 0)
        die("vocabulary-parallel classifier: need Vpl a multiple of 8 and v0 >= 0 (V=%d, Vpl=%d, v0=%d)", V, Vpl, v0);
}

static void vocab_parallel_max_target(const floatX* logits, float* mx, float* tgt, const int32_t* targets, int rows,
                                      int v0, int V, int Vpl, cudaStream_t stream) {
    vocab_parallel_check(V, Vpl, v0);
    vocab_parallel_max_target_kernel<<<rows, VP_THREADS, 0, stream>>>(logits, mx, tgt, targets, v0, V, Vpl);
    cudaCheck(cudaGetLastError());
}

static void vocab_parallel_sum_exp(const floatX* logits, const float* mx, float* sum, int rows, int v0, int V, int Vpl,
                                   cudaStream_t stream) {
    vocab_parallel_check(V, Vpl, v0);
    vocab_parallel_sum_exp_kernel<<<rows, VP_THREADS, 0, stream>>>(logits, mx, sum, v0, V, Vpl);
    cudaCheck(cudaGetLastError());
}

static void vocab_parallel_loss_grad(floatX* logits, float* losses, const float* mx, const float* sum, const float* tgt,
                                     const int32_t* targets, int rows, int v0, int V, int Vpl, float scale,
                                     cudaStream_t stream) {
    vocab_parallel_check(V, Vpl, v0);
    vocab_parallel_loss_grad_kernel<<<rows, VP_THREADS, 0, stream>>>(logits, losses, mx, sum, tgt, targets, v0, V, Vpl,
                                                                     scale);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------
// NormHead (Baichuan2, --norm-head): the classifier reads the LM head's rows scaled to unit length,
// wn[v] = w[v] / max(|w[v]|, 1e-12) as torch.nn.functional.normalize (a padding row stays zero).

// One warp per row of w [V,C] (8 rows per block of 256): wn [V,C] and rnorm[v] = 1 / max(|w[v]|, 1e-12), summed in
// fp32. Run once per forward of the head's stage (the weights change only at the update).
__global__ void norm_head_forward_kernel(floatX* wn, float* rnorm, const floatX* w, int V, int C) {
    const int v = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (v >= V) return;  // the whole warp
    const floatX* r = w + (size_t)v * C;
    float ss = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float x = to_float(r[i]);
        ss += x * x;
    }
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv = 1.0f / fmaxf(sqrtf(ss), 1e-12f);
    if (lane == 0) rnorm[v] = inv;
    for (int i = lane; i < C; i += 32) wn[(size_t)v * C + i] = to_floatX(to_float(r[i]) * inv);
}

// Its backward on the step's fp32 gradient of the unit rows, in place (once per step, after the last micro-batch):
// g[v] = (g[v] - wn[v] (wn[v] . g[v])) * rnorm[v], the gradient of the head's own rows. One warp per row.
__global__ void norm_head_backward_kernel(float* g, const floatX* wn, const float* rnorm, int V, int C) {
    const int v = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (v >= V) return;
    float* gr = g + (size_t)v * C;
    const floatX* u = wn + (size_t)v * C;
    float dot = 0.0f;
    for (int i = lane; i < C; i += 32) dot += to_float(u[i]) * gr[i];
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float inv = rnorm[v];
    for (int i = lane; i < C; i += 32) gr[i] = (gr[i] - to_float(u[i]) * dot) * inv;
}

static void norm_head_forward(floatX* wn, float* rnorm, const floatX* w, int V, int C, cudaStream_t stream) {
    norm_head_forward_kernel<<<(unsigned)ceil_div(V, 8), 256, 0, stream>>>(wn, rnorm, w, V, C);
    cudaCheck(cudaGetLastError());
}

static void norm_head_backward(float* g, const floatX* wn, const float* rnorm, int V, int C, cudaStream_t stream) {
    norm_head_backward_kernel<<<(unsigned)ceil_div(V, 8), 256, 0, stream>>>(g, wn, rnorm, V, C);
    cudaCheck(cudaGetLastError());
}
