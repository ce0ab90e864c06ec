// llmc/rope.cuh: rotary position embedding on the q and k heads inside the fused qkv activation, in Hugging
// Face's rotate_half convention (as llmc/ref_ops.h rope_rotate). The fastest version of dev/cuda/rope.cu. And
// ALiBi's slopes, the other position table the trainer uploads.
//   rope_upload_tables(config, T, &cos, &sin)   fp32 cos, sin [T, hd/2] on the device, computed on the host by
//                                              llmc/rope_tables.h (Llama 3.1 frequency scaling included);
//                                              the caller frees both with cudaFree
//   rope_rotate_inplace(qkv, cos, sin, B, T, H, KV, hd, sign, stream, pos = null)
//       qkv [B,T,(H+2KV)*hd] floatX, in place on the H q heads and KV k heads; the v heads are not touched.
//       pos [B*T] each token's position, the row of the tables (llmc/documents.h); null: t.
//       sign +1 is the forward rotation, -1 the backward pass (the inverse rotation: the map is orthogonal).
//   alibi_upload_slopes(d, config, h0, n)      --pos alibi: the slopes of heads h0 .. h0 + n (llmc/rope_tables.h) to
//                                              the device buffer d [n] fp32 (the attention kernels add the bias)
// One thread per (token, head, 8 consecutive rotation pairs): 8-element vector loads of both halves of its head and
// of the 8 cos and sin (the table rows are read again for each head, from L1/L2). Needs hd % 16 == 0. Looping one
// thread over its token's heads, with the cos and sin loaded once (dev/cuda/rope.cu's version 3), left too few
// threads at hd 64: 70% of the copy ceiling on an H100 against 91% for this form (92.8% against 87.3% at hd 128).
#pragma once
#include <climits>
#include <vector>
#include <cuda_bf16.h>
#include "llmc/model_config.h"
#include "llmc/cuda_common.cuh"
#include "llmc/packed.cuh"
#include "llmc/rope_tables.h"
#include "llmc/utils.h"

static void rope_upload_tables(const ModelConfig& c, int T, float** d_cos, float** d_sin) {
    std::vector<double> cd, sd;
    rope_tables<double>(c, T, &cd, &sd);
    std::vector<float> cf(cd.begin(), cd.end()), sf(sd.begin(), sd.end());
    cudaCheck(cudaMalloc(d_cos, cf.size() * sizeof(float)));
    cudaCheck(cudaMalloc(d_sin, sf.size() * sizeof(float)));
    cudaCheck(cudaMemcpy(*d_cos, cf.data(), cf.size() * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(*d_sin, sf.data(), sf.size() * sizeof(float), cudaMemcpyHostToDevice));
}

__global__ void rope_rotate_kernel(floatX* __restrict__ qkv, const float* __restrict__ cosv,
                                   const float* __restrict__ sinv, int BT, int T, int H, int KV, int hd, float sign,
                                   const int32_t* __restrict__ pos) {
    const int half = hd / 2, groups = half / 8;
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * (H + KV) * groups) return;
    const int i = 8 * (int)(idx % groups), h = (int)(idx / groups % (H + KV));  // h: the H q heads, then the KV k heads
    const int bt = (int)(idx / ((size_t)groups * (H + KV))), t = pos ? pos[bt] : bt % T;
    const float4* cp = (const float4*)(cosv + (size_t)t * half + i);
    const float4* sp = (const float4*)(sinv + (size_t)t * half + i);
    const float4 c0 = cp[0], c1 = cp[1], s0 = sp[0], s1 = sp[1];
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float s[8] = {sign * s0.x, sign * s0.y, sign * s0.z, sign * s0.w, sign * s1.x, sign * s1.y, sign * s1.z, sign * s1.w};
    floatX* x = qkv + (size_t)bt * (H + 2 * KV) * hd + (size_t)h * hd + i;
    Pack8 a = load8(x), b = load8(x + half), oa, ob;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float x1 = to_float(a.v[j]), x2 = to_float(b.v[j]);
        oa.v[j] = to_floatX(x1 * c[j] - x2 * s[j]);
        ob.v[j] = to_floatX(x2 * c[j] + x1 * s[j]);
    }
    store8(x, oa);
    store8(x + half, ob);
}

static void rope_rotate_inplace(floatX* qkv, const float* cosv, const float* sinv, int B, int T, int H, int KV,
                                int hd, int sign, cudaStream_t stream, const int32_t* pos = nullptr) {
    if (hd % 16 != 0) die("rope_rotate_inplace: head dim %d is not a multiple of 16 (8-element vector access of each half)", hd);
    if (sign != 1 && sign != -1) die("rope_rotate_inplace: sign must be +1 (forward) or -1 (backward), got %d", sign);
    const int threads = 256;
    const size_t work = (size_t)B * T * (H + KV) * (hd / 16), blocks = ceil_div(work, threads);
    if (blocks > (size_t)INT_MAX)  // one thread per (token, head, 8 pairs)
        die("rope_rotate_inplace: %zu blocks of %d threads is past the grid's limit (%d): lower -b or -t", blocks,
            threads, INT_MAX);
    rope_rotate_kernel<<<(unsigned)blocks, threads, 0, stream>>>(qkv, cosv, sinv, B * T, T, H, KV, hd, (float)sign, pos);
    cudaCheck(cudaGetLastError());
}

static void alibi_upload_slopes(float* d, const ModelConfig& c, int h0, int n) {
    const std::vector<double> mine = alibi_slopes(c.n_head, h0, n);
    const std::vector<float> s(mine.begin(), mine.end());
    cudaCheck(cudaMemcpy(d, s.data(), (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
}
