// llmc/embedding.cuh: token (+ learned position) embedding, forward and a deterministic backward. The fastest
// versions of dev/cuda/embedding.cu.
//   embedding_forward(out, tok, wte, wpe, N, T, C, stream, v0, vl, pos)
//       out[N,C] = wte[tok[n]] (+ wpe[pos[n]]); wpe may be null; pos [N] each token's position (llmc/documents.h),
//       null: n % T
//   (--reset-position-ids' dwpe: embedding_backward on a plan of the positions instead of the tokens, dwpe as the
//   table: the same deterministic sums by position)
//   EmbeddingPlan            the rows of each distinct token, on the device: one int32 block [3N+1] =
//                            token [N] | offset [N+1] | rows [N] (the first unique, unique+1 and N entries used)
//   embedding_plan_rows(tok, N, V, packed, &unique, &max_count)   the host counting sort, into that layout
//   embedding_plan_alloc(plan, N), embedding_plan_upload(plan, packed, unique, max_count, N, stream)
//       the device block, and one asynchronous copy into it (packed in pinned memory: no host wait)
//   embedding_plan_build(plan, tok_host, N, V)   all three at once, with a synchronous copy (tools, tests)
//   embedding_backward(dwte, dwpe, dout, plan, N, T, C, stream)
//       dwte[v] += sum of dout rows whose token is v; dwpe[t] += sum over the batch of dout[b*T + t] (if dwpe)
// Tensor parallel (vocabulary-parallel embedding): both take the vocabulary rows [v0, v0 + vl) that wte / dwte hold
// (default: all of them); a token outside them reads zeros in the forward (the sum over the tp ranks fills it in)
// and adds nothing in the backward.
// Deterministic backward without float atomics, in the manner of llm.c's encoder backward: the host (which has
// the tokens before the step) groups row indices by token, ascending, in a counting sort; on the device, one
// thread per (distinct token, 8 channels) sums that token's rows in that order in fp32 and adds the sum to
// dwte once. The same launch has T further blocks for dwpe, summing the batch in order. Needs C % 8 == 0.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>
#include <cuda_bf16.h>
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/utils.h"

static const int EMBEDDING_THREADS = 128;

__global__ void embedding_forward_kernel(floatX* __restrict__ out, const int32_t* __restrict__ tok,
                                         const floatX* __restrict__ wte, const floatX* __restrict__ wpe,
                                         int N, int T, int C, int v0, int vl, const int32_t* __restrict__ pos) {
    const size_t per_row = C / 8, v = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (v >= (size_t)N * per_row) return;
    const int n = (int)(v / per_row), c = 8 * (int)(v % per_row), row = tok[n] - v0;
    Pack8 e;
    if (row >= 0 && row < vl) {
        e = load8(wte + (size_t)row * C + c);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) e.v[j] = to_floatX(0.0f);
    }
    if (wpe) {
        Pack8 p = load8(wpe + (size_t)(pos ? pos[n] : n % T) * C + c);
#pragma unroll
        for (int j = 0; j < 8; j++) e.v[j] = to_floatX(to_float(e.v[j]) + to_float(p.v[j]));
    }
    store8(out + (size_t)n * C + c, e);
}

static void embedding_check_shape(const char* what, int N, int T, int C) {
    if (N <= 0 || T <= 0 || C <= 0 || C % 8 != 0 || N % T != 0)
        die("%s: needs N a multiple of T and C a multiple of 8, got N %d T %d C %d", what, N, T, C);
}

static void embedding_forward(floatX* out, const int32_t* tok, const floatX* wte, const floatX* wpe,
                              int N, int T, int C, cudaStream_t stream, int v0 = 0, int vl = INT_MAX,
                              const int32_t* pos = nullptr) {
    embedding_check_shape("embedding_forward", N, T, C);
    const size_t work = (size_t)N * (C / 8);
    embedding_forward_kernel<<<(unsigned)ceil_div(work, 256), 256, 0, stream>>>(out, tok, wte, wpe, N, T, C, v0, vl, pos);
    cudaCheck(cudaGetLastError());
}

// The rows of each distinct token: token[u] owns rows[offset[u] .. offset[u+1]), ascending. The device
// arrays are views into one block d_plan [3N+1], laid out as embedding_plan_rows writes the host copy.
struct EmbeddingPlan {
    int n = 0;               // rows the plan describes
    int unique = 0;          // distinct tokens in this batch
    int max_count = 0;       // most rows of one token (for tolerances and load-balance notes)
    int* d_plan = nullptr;   // [3 * capacity + 1]
    int* d_token = nullptr;  // [unique]      = d_plan
    int* d_offset = nullptr; // [unique + 1]  = d_plan + N
    int* d_rows = nullptr;   // [N]           = d_plan + 2N + 1
    int capacity = 0;        // N the device block was sized for
};

// int32 entries of a packed plan of N rows
static inline size_t embedding_plan_ints(int N) { return 3 * (size_t)N + 1; }

// Counting sort of the host tokens by id, stable, so rows stay ascending within a token, into packed [3N+1]:
// token[u] (packed[u]) the distinct ids ascending, offset[u] (packed[N + u]) where their rows start in rows
// (unique + 1 entries), rows (packed[2N + 1 ..]). Also the count of distinct tokens and the largest row
// count of one token.
static void embedding_plan_rows(const int32_t* tok, int N, int V, int* packed, int* unique, int* max_count) {
    int* token = packed;
    int* offset = packed + N;
    int* rows = packed + 2 * (size_t)N + 1;
    std::vector<int> start(V + 1, 0);
    for (int n = 0; n < N; n++) {
        if (tok[n] < 0 || tok[n] >= V) die("embedding_plan_build: token %d at row %d is outside the vocabulary [0, %d)", tok[n], n, V);
        start[tok[n] + 1]++;
    }
    int u = 0;
    *max_count = 0;
    for (int v = 0; v < V; v++) {
        const int count = start[v + 1];
        if (count > 0) {
            token[u] = v;
            offset[u] = start[v];
            u++;
            *max_count = std::max(*max_count, count);
        }
        start[v + 1] += start[v];  // now the first row of token v + 1
    }
    offset[u] = N;
    *unique = u;
    for (int n = 0; n < N; n++) rows[start[tok[n]]++] = n;
}

// The device block for plans of up to N rows (kept when it is large enough).
static void embedding_plan_alloc(EmbeddingPlan* plan, int N) {
    if (plan->capacity >= N) return;
    if (plan->d_plan) cudaCheck(cudaFree(plan->d_plan));
    cudaCheck(cudaMalloc(&plan->d_plan, embedding_plan_ints(N) * sizeof(int)));
    plan->capacity = N;
}

// One asynchronous copy of a packed plan of N rows (from embedding_plan_rows) into the device block. When
// packed is pinned memory the host does not wait; it must stay unchanged until the copy has run.
static void embedding_plan_upload(EmbeddingPlan* plan, const int* packed, int unique, int max_count, int N,
                                  cudaStream_t stream) {
    if (plan->capacity < N) die("embedding_plan_upload: the plan holds %d rows, not %d", plan->capacity, N);
    plan->n = N;
    plan->unique = unique;
    plan->max_count = max_count;
    plan->d_token = plan->d_plan;
    plan->d_offset = plan->d_plan + N;
    plan->d_rows = plan->d_plan + 2 * (size_t)N + 1;
    cudaCheck(cudaMemcpyAsync(plan->d_plan, packed, embedding_plan_ints(N) * sizeof(int), cudaMemcpyHostToDevice, stream));
}

// Builds the plan on the host and uploads it (a synchronous copy), reusing the device block when N fits.
static void embedding_plan_build(EmbeddingPlan* plan, const int32_t* tok, int N, int V) {
    std::vector<int> packed(embedding_plan_ints(N));
    int unique = 0, max_count = 0;
    embedding_plan_rows(tok, N, V, packed.data(), &unique, &max_count);
    embedding_plan_alloc(plan, N);
    embedding_plan_upload(plan, packed.data(), unique, max_count, N, 0);
    cudaCheck(cudaStreamSynchronize(0));
}

static void embedding_plan_free(EmbeddingPlan* plan) {
    if (plan->d_plan) cudaCheck(cudaFree(plan->d_plan));
    *plan = EmbeddingPlan{};
}

// grid (unique + T, ceil(C/8 / threads)): block x < unique sums the rows of token[x] into dwte (row token[x] - v0;
// nothing when that is outside [0, vl)); block x = unique + t (only when dwpe) sums dout[b*T + t] over b into dwpe[t]
__global__ void embedding_backward_kernel(floatX* __restrict__ dwte, floatX* __restrict__ dwpe,
                                          const floatX* __restrict__ dout, const int* __restrict__ token,
                                          const int* __restrict__ offset, const int* __restrict__ rows, int unique,
                                          int N, int T, int C, int v0, int vl) {
    const int c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= C) return;
    if ((int)blockIdx.x < unique && (token[blockIdx.x] < v0 || token[blockIdx.x] - v0 >= vl)) return;
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    floatX* dst;
    if ((int)blockIdx.x < unique) {
        const int u = blockIdx.x;
        for (int k = offset[u]; k < offset[u + 1]; k++) {
            Pack8 d = load8(dout + (size_t)rows[k] * C + c);
#pragma unroll
            for (int j = 0; j < 8; j++) s[j] += to_float(d.v[j]);
        }
        dst = dwte + (size_t)(token[u] - v0) * C + c;
    } else {
        const int t = blockIdx.x - unique;
        for (int n = t; n < N; n += T) {
            Pack8 d = load8(dout + (size_t)n * C + c);
#pragma unroll
            for (int j = 0; j < 8; j++) s[j] += to_float(d.v[j]);
        }
        dst = dwpe + (size_t)t * C + c;
    }
    Pack8 g = load8(dst);
#pragma unroll
    for (int j = 0; j < 8; j++) g.v[j] = to_floatX(to_float(g.v[j]) + s[j]);
    store8(dst, g);
}

static void embedding_backward(floatX* dwte, floatX* dwpe, const floatX* dout,
                               const EmbeddingPlan& plan, int N, int T, int C, cudaStream_t stream, int v0 = 0,
                               int vl = INT_MAX) {
    embedding_check_shape("embedding_backward", N, T, C);
    if (plan.n != N) die("embedding_backward: the plan was built for %d rows, not %d", plan.n, N);
    dim3 grid(plan.unique + (dwpe ? T : 0), (unsigned)ceil_div(C / 8, EMBEDDING_THREADS));
    embedding_backward_kernel<<<grid, EMBEDDING_THREADS, 0, stream>>>(dwte, dwpe, dout, plan.d_token, plan.d_offset,
                                                                      plan.d_rows, plan.unique, N, T, C, v0, vl);
    cudaCheck(cudaGetLastError());
}
