// llmc/ref_ops.h: the reference implementation of every layer, forward and backward, on the
// CPU with OpenMP, templated on the float type (float for training, double for the
// finite-difference check). train_gpt_cpu.cpp builds the model from these; the CUDA kernels
// in dev/cuda and llmc/*.cuh are checked against them.
//
// Determinism: every parallel loop writes disjoint outputs and reduces in a fixed order, so
// results do not depend on the number of threads. Nor on the machine: the Makefile builds with
// -ffp-contract=off (fused multiply-adds only where written, std::fma), and the float exponential
// and logarithm are ours (exp_vec here, log_pos in llmc/rng.h), not the C library's, whose code
// is chosen at run time by the CPU's features.
// Shapes: B batch, T time, C channels, H query heads, KV kv heads, hd head dim,
// qd = H*hd, kvd = KV*hd, F ffn, F1 = F (gelu) or 2F (swiglu: gate then up), Vp padded vocab.
// The RoPE tables are in llmc/rope_tables.h (included here), which the CUDA trainer uses without this file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "llmc/cpu_gemm.h"
#include "llmc/model_config.h"
#include "llmc/rope_tables.h"

// e^x for float with no library call, so that the loops over it vectorise: x = n ln2 + r, |r| <= ln2 / 2 (n by
// rounding x log2(e) with the 1.5 * 2^23 trick; r with one fused multiply-add each for ln2's two parts), e^r by its
// Taylor series to r^7 (the rest below 2^-27 of it; each step one fma), times 2^n put in the exponent bits. x is
// clamped to [-87, 88], where e^x is a normal float. Within 2 x 2^-24 of e^x (test_gpt_cpu units). double (the
// finite-difference check) keeps std::exp.
static inline float exp_vec(float x) {
    x = std::min(std::max(x, -87.0f), 88.0f);
    const float n = (x * 1.44269504089f + 12582912.0f) - 12582912.0f;
    const float r = std::fma(-n, 1.42860682030941723e-6f, std::fma(-n, 0.693145751953125f, x));  // ln2's two parts
    const float p = std::fma(r, std::fma(r, std::fma(r, std::fma(r, std::fma(r, std::fma(r, std::fma(r, 1.0f / 5040,
                    1.0f / 720), 1.0f / 120), 1.0f / 24), 1.0f / 6), 0.5f), 1.0f), 1.0f);  // Taylor, by Horner's rule
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, 4);
    return p * two_n;
}
static inline double exp_vec(double x) { return std::exp(x); }

// Backward functions accumulate (+=) into parameter gradients;
// input gradients are accumulated too unless stated, and the caller zeroes them.

// out[N,C] = wte[tok] (+ wpe[t]); pos [N] (or null: t = n % T) each token's position (llmc/documents.h)
template <typename real>
void embedding_forward(real* out, const int32_t* tok, const real* wte, const real* wpe, int N, int T, int C,
                       const int32_t* pos = nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real* e = wte + (size_t)tok[n] * C;
        const real* p = wpe ? wpe + (size_t)(pos ? pos[n] : n % T) * C : nullptr;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = e[c] + (p ? p[c] : (real)0);
    }
}

// Parallel over channels, so repeated tokens add up in a fixed order (deterministic).
template <typename real>
void embedding_backward(real* dwte, real* dwpe, const real* dout, const int32_t* tok, int N, int T, int C,
                        const int32_t* pos = nullptr) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (int n = 0; n < N; n++) {
            real d = dout[(size_t)n * C + c];
            dwte[(size_t)tok[n] * C + c] += d;
            if (dwpe) dwpe[(size_t)(pos ? pos[n] : n % T) * C + c] += d;
        }
}

// op folded over f(c) for c in [0, n), in 16 interleaved lanes (term c into lane c % 16, each lane from `init`) joined
// pairwise at the end: a fixed order, and the compiler keeps the 16 in vector registers (one chain would run at the
// latency of one op). sum16 and max16 are the two the layers use.
template <typename real, typename F, typename Op>
static inline real fold16(int n, real init, F f, Op op) {
    real s[16];
    for (int j = 0; j < 16; j++) s[j] = init;
    int c = 0;
    for (; c + 16 <= n; c += 16)
        for (int j = 0; j < 16; j++) s[j] = op(s[j], f(c + j));
    for (int j = 0; c + j < n; j++) s[j] = op(s[j], f(c + j));
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) s[j] = op(s[j], s[j + w]);
    return s[0];
}
template <typename real, typename F>
static inline real sum16(int n, F f) {
    return fold16<real>(n, (real)0, f, [](real a, real b) { return a + b; });
}
template <typename real>
static inline real max16(int n, const real* x) {  // -inf for n = 0
    return fold16<real>(n, -INFINITY, [&](int c) { return x[c]; }, [](real a, real b) { return a > b ? a : b; });
}

// LayerNorm: (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps). RMSNorm: x * rstd * w,
// rstd = 1/sqrt(mean(x^2) + eps), mean stored as 0. x, out [N,C]; mean, rstd [N].
template <typename real>
void norm_forward(real* out, real* mean, real* rstd, const real* x, const real* w, const real* b, int N, int C,
                  float eps, bool rms) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real* xn = x + (size_t)n * C;
        const real m = rms ? (real)0 : sum16<real>(C, [&](int c) { return xn[c]; }) / C;
        const real v = sum16<real>(C, [&](int c) { return (xn[c] - m) * (xn[c] - m); }) / C;
        const real r = (real)1 / std::sqrt(v + (real)eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xn[c] - m) * r * w[c] + (b ? b[c] : (real)0);
        mean[n] = m;
        rstd[n] = r;
    }
}

// dx += rstd * (dn - mean(dn) - xhat * mean(dn * xhat)), dn = dout * w; RMSNorm drops mean(dn).
// dw += sum over rows of dout * xhat, db += sum of dout: each thread a block of channels, the rows in order (so each
// sum has the same order at any thread count), the channels of a row contiguous.
template <typename real>
void norm_backward(real* dx, real* dw, real* db, const real* dout, const real* x, const real* w, const real* mean,
                   const real* rstd, int N, int C, bool rms) {
#pragma omp parallel  // one region, the channels then the rows (a barrier between: dx may be dout)
    {
        const int blk = 64, nblk = (C + blk - 1) / blk;
#pragma omp for schedule(static)
        for (int k = 0; k < nblk; k++) {
            const int c0 = k * blk, c1 = std::min(C, c0 + blk);
            real sw[blk] = {}, sb[blk] = {};
            for (int n = 0; n < N; n++) {
                const real* dn = dout + (size_t)n * C;
                const real* xn = x + (size_t)n * C;
                const real mn = mean[n], rn = rstd[n];
                for (int c = c0; c < c1; c++) {
                    sw[c - c0] += dn[c] * (xn[c] - mn) * rn;
                    sb[c - c0] += dn[c];
                }
            }
            for (int c = c0; c < c1; c++) {
                dw[c] += sw[c - c0];
                if (db) db[c] += sb[c - c0];
            }
        }
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const real* xn = x + (size_t)n * C;
            const real* dn = dout + (size_t)n * C;
            const real mn = mean[n], rn = rstd[n];
            const real m_dn = rms ? (real)0 : sum16<real>(C, [&](int c) { return dn[c] * w[c]; }) / C;
            const real m_dnx = sum16<real>(C, [&](int c) { return dn[c] * w[c] * ((xn[c] - mn) * rn); }) / C;
            for (int c = 0; c < C; c++) {
                const real xhat = (xn[c] - mn) * rn;
                dx[(size_t)n * C + c] += rn * (dn[c] * w[c] - m_dn - xhat * m_dnx);
            }
        }
    }
}

// out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias[OC]: llmc/cpu_gemm.h with B = w^T (b(i, o) = w[o * IC + i]).
template <typename real>
void matmul_forward(real* out, const real* inp, const real* w, const real* bias, int N, int IC, int OC) {
#pragma omp parallel
    gemm(out, OC, inp, IC, 1, w, 1, IC, N, OC, IC, false, bias);
}

// dinp[N,IC] += dout @ w; dw[OC,IC] += dout^T @ inp; dbias[OC] += sum_n dout (in n order). One parallel region:
// the three share out their work and none waits for another.
template <typename real>
void matmul_backward(real* dinp, real* dw, real* dbias, const real* dout, const real* inp, const real* w, int N, int IC,
                     int OC) {
#pragma omp parallel
    {
        gemm(dinp, IC, dout, OC, 1, w, IC, 1, N, IC, OC, true, (const real*)nullptr);  // a(n, o) = dout, b(o, i) = w
        gemm(dw, IC, dout, 1, OC, inp, IC, 1, OC, IC, N, true, (const real*)nullptr);   // a(o, n) = dout^T, b(n, i) = inp
        if (dbias) {
            const int OB = 64;
#pragma omp for schedule(static) nowait
            for (int o0 = 0; o0 < OC; o0 += OB) {
                const int o1 = std::min(OC, o0 + OB);
                real sb[OB] = {};
                for (int n = 0; n < N; n++)
                    for (int o = o0; o < o1; o++) sb[o - o0] += dout[(size_t)n * OC + o];
                for (int o = o0; o < o1; o++) dbias[o] += sb[o - o0];
            }
        }
    }
}

// NormHead (Baichuan2): the LM head's rows scaled to unit length before the product, wn[v] = w[v] / max(|w[v]|, 1e-12)
// as torch.nn.functional.normalize; rnorm[v] = 1 / max(|w[v]|, 1e-12). A padding row (zero) stays zero. w, wn [V,C].
template <typename real>
void norm_rows_forward(real* wn, real* rnorm, const real* w, int V, int C) {
#pragma omp parallel for schedule(static)
    for (int v = 0; v < V; v++) {
        const real* r = w + (size_t)v * C;
        real ss = 0;
        for (int i = 0; i < C; i++) ss += r[i] * r[i];
        const real inv = (real)1 / std::max(std::sqrt(ss), (real)1e-12);
        rnorm[v] = inv;
        for (int i = 0; i < C; i++) wn[(size_t)v * C + i] = r[i] * inv;
    }
}

// Its backward: dw[v] += (dwn[v] - wn[v] (wn[v] . dwn[v])) * rnorm[v], the gradient through the row's scaling (the
// projection of dwn off the row, over its length).
template <typename real>
void norm_rows_backward(real* dw, const real* dwn, const real* wn, const real* rnorm, int V, int C) {
#pragma omp parallel for schedule(static)
    for (int v = 0; v < V; v++) {
        const real *d = dwn + (size_t)v * C, *u = wn + (size_t)v * C;
        real dot = 0;
        for (int i = 0; i < C; i++) dot += u[i] * d[i];
        for (int i = 0; i < C; i++) dw[(size_t)v * C + i] += (d[i] - u[i] * dot) * rnorm[v];
    }
}

// QK-norm (Qwen3): an RMSNorm over each q head and each k head of qkv [N,qd+2kvd] in place, with one weight [hd] for
// the q heads and one for the k heads, rstd = 1/sqrt(mean(x^2) + eps) per head. raw [N,H+KV,hd] keeps the heads as
// they were (the backward's input). v is untouched.
template <typename real>
void qk_norm_forward(real* qkv, real* raw, const real* wq, const real* wk, int N, int H, int KV, int hd, float eps) {
    const size_t row = (size_t)(H + 2 * KV) * hd;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int j = 0; j < H + KV; j++) {
            real* x = qkv + n * row + (size_t)j * hd;
            real* r = raw + ((size_t)n * (H + KV) + j) * hd;
            const real* w = j < H ? wq : wk;
            const real ss = sum16<real>(hd, [&](int e) { return x[e] * x[e]; });
            const real rstd = (real)1 / std::sqrt(ss / hd + (real)eps);
            for (int e = 0; e < hd; e++) {
                r[e] = x[e];
                x[e] = x[e] * rstd * w[e];
            }
        }
}

// Its backward, in place on the q and k heads of dqkv [N,qd+2kvd]: dx = rstd (dn - xhat mean(dn xhat)), dn = dout w;
// dwq, dwk [hd] += sum over tokens and heads of dout xhat (each element's sum over them in order: a fixed order).
template <typename real>
void qk_norm_backward(real* dqkv, real* dwq, real* dwk, const real* raw, const real* wq, const real* wk, int N, int H,
                      int KV, int hd, float eps) {
    const size_t row = (size_t)(H + 2 * KV) * hd, heads = (size_t)N * (H + KV);
    std::vector<real> rstd(heads);
#pragma omp parallel  // one region: rstd, then the weight gradients, then dqkv in place (barriers between)
    {
#pragma omp for schedule(static)
        for (size_t i = 0; i < heads; i++) {
            const real* x = raw + i * hd;
            const real ss = sum16<real>(hd, [&](int e) { return x[e] * x[e]; });
            rstd[i] = (real)1 / std::sqrt(ss / hd + (real)eps);
        }
        const int blk = 16, nblk = (hd + blk - 1) / blk;  // each thread blocks of 16 elements, the heads in order
#pragma omp for schedule(static)
        for (int k = 0; k < nblk; k++) {
            const int e0 = k * blk, e1 = std::min(hd, e0 + blk);
            real sq[blk] = {}, sk[blk] = {};
            for (int n = 0; n < N; n++)
                for (int j = 0; j < H + KV; j++) {
                    const size_t i = (size_t)n * (H + KV) + j;
                    const real* d = dqkv + n * row + (size_t)j * hd;
                    const real* x = raw + i * hd;
                    real* s = j < H ? sq : sk;
                    for (int e = e0; e < e1; e++) s[e - e0] += d[e] * x[e] * rstd[i];
                }
            for (int e = e0; e < e1; e++) {
                dwq[e] += sq[e - e0];
                dwk[e] += sk[e - e0];
            }
        }
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++)
            for (int j = 0; j < H + KV; j++) {
                const size_t i = (size_t)n * (H + KV) + j;
                real* d = dqkv + n * row + (size_t)j * hd;
                const real* x = raw + i * hd;
                const real* w = j < H ? wq : wk;
                const real m = sum16<real>(hd, [&](int e) { return d[e] * w[e] * x[e] * rstd[i]; }) / hd;
                for (int e = 0; e < hd; e++) d[e] = rstd[i] * (d[e] * w[e] - x[e] * rstd[i] * m);
            }
    }
}

// Rotates every q and k head of qkv [B,T,qd+2kvd] in place, in Hugging Face's rotate_half
// convention: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) with x1, x2 the two halves of
// the head. sign = -1 rotates back, which is the backward pass (the rotation is orthogonal).
// pos [B*T] (or null: t) each token's position, the row of the tables (llmc/documents.h).
template <typename real>
void rope_rotate(real* qkv, const real* cosv, const real* sinv, int B, int T, int H, int KV, int hd, int sign,
                 const int32_t* pos = nullptr) {
    const int half = hd / 2, stride = (H + 2 * KV) * hd;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = pos ? pos[bt] : bt % T;
        for (int h = 0; h < H + KV; h++) {  // the H q heads, then the KV k heads
            real* x = qkv + (size_t)bt * stride + (size_t)h * hd;
            for (int i = 0; i < half; i++) {
                real c = cosv[t * half + i], s = sign * sinv[t * half + i];
                real x1 = x[i], x2 = x[i + half];
                x[i] = x1 * c - x2 * s;
                x[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

// Causal attention with GQA: query head h reads kv head h / (H/KV).
// qkv [B,T,qd+2kvd] -> out [B,T,qd]; att [B,H,T,T] keeps the probabilities for backward.
// alibi [H] (or null): ALiBi's slope of each head, adding alibi[h] * (key - query) to the scaled scores. The
// backward reads the probabilities only, so it is the same with ALiBi.
// doc [B*T] (or null: 0) the first key each query sees, its document's start (--reset-attention-mask,
// llmc/documents.h): query t attends to keys doc[t] .. t, the probabilities of the others are 0.
template <typename real>
void attention_forward(real* out, real* att, const real* qkv, int B, int T, int H, int KV, int hd,
                       const real* alibi = nullptr, const int32_t* doc = nullptr) {
    const int stride = (H + 2 * KV) * hd, qd = H * hd, kvd = KV * hd, group = H / KV;
    const real scale = (real)1 / std::sqrt((real)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / group;
            for (int t = 0; t < T; t++) {
                const real* q = qkv + ((size_t)b * T + t) * stride + h * hd;
                real* a = att + (((size_t)b * H + h) * T + t) * T;
                const int lo = doc ? doc[(size_t)b * T + t] : 0;  // the first key it sees
                for (int t2 = 0; t2 < lo; t2++) a[t2] = 0;
                real mx = -INFINITY;
                for (int t2 = lo; t2 <= t; t2++) {
                    const real* k = qkv + ((size_t)b * T + t2) * stride + qd + kh * hd;
                    real s = 0;
                    for (int i = 0; i < hd; i++) s += q[i] * k[i];
                    a[t2] = s * scale + (alibi ? alibi[h] * (real)(t2 - t) : (real)0);
                    mx = std::max(mx, a[t2]);
                }
                real sum = 0;
                for (int t2 = lo; t2 <= t; t2++) { a[t2] = exp_vec(a[t2] - mx); sum += a[t2]; }
                for (int t2 = lo; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
                real* o = out + ((size_t)b * T + t) * qd + h * hd;
                for (int i = 0; i < hd; i++) o[i] = 0;
                for (int t2 = lo; t2 <= t; t2++) {
                    const real* v = qkv + ((size_t)b * T + t2) * stride + qd + kvd + kh * hd;
                    for (int i = 0; i < hd; i++) o[i] += a[t2] * v[i];
                }
            }
        }
}

// dqkv [B,T,qd+2kvd] is overwritten. With documents (attention_forward's doc) the probabilities outside a query's
// document are 0, so the same loops give their gradients 0. Parallel over (batch, kv head): each thread owns the dk
// and dv of its kv head and loops over the query heads that share it.
template <typename real>
void attention_backward(real* dqkv, const real* dout, const real* qkv, const real* att, int B, int T, int H, int KV, int hd) {
    const int stride = (H + 2 * KV) * hd, qd = H * hd, kvd = KV * hd, group = H / KV;
    const real scale = (real)1 / std::sqrt((real)hd);
    std::fill(dqkv, dqkv + (size_t)B * T * stride, (real)0);
#pragma omp parallel
    {
        std::vector<real> da(T);
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < KV; kh++)
                for (int h = kh * group; h < (kh + 1) * group; h++)
                    for (int t = 0; t < T; t++) {
                        const real* a = att + (((size_t)b * H + h) * T + t) * T;
                        const real* dy = dout + ((size_t)b * T + t) * qd + h * hd;
                        const real* q = qkv + ((size_t)b * T + t) * stride + h * hd;
                        real* dq = dqkv + ((size_t)b * T + t) * stride + h * hd;
                        // through the weighted sum of values
                        real dot = 0;
                        for (int t2 = 0; t2 <= t; t2++) {
                            const real* v = qkv + ((size_t)b * T + t2) * stride + qd + kvd + kh * hd;
                            real* dv = dqkv + ((size_t)b * T + t2) * stride + qd + kvd + kh * hd;
                            real s = 0;
                            for (int i = 0; i < hd; i++) { s += dy[i] * v[i]; dv[i] += a[t2] * dy[i]; }
                            da[t2] = s;
                            dot += a[t2] * s;
                        }
                        // through the softmax, then the scaled scores
                        for (int t2 = 0; t2 <= t; t2++) {
                            const real ds = a[t2] * (da[t2] - dot) * scale;
                            const real* k = qkv + ((size_t)b * T + t2) * stride + qd + kh * hd;
                            real* dk = dqkv + ((size_t)b * T + t2) * stride + qd + kh * hd;
                            for (int i = 0; i < hd; i++) { dq[i] += ds * k[i]; dk[i] += ds * q[i]; }
                        }
                    }
    }
}

// GELU (tanh form) as the CUDA kernels (llmc/mlp_act.cuh) write it: with s = (1 + tanh u) / 2 = 1 / (1 + e^-2u) and
// s' = (1 - tanh u) / 2 = e^-2u s, u = k (x + 0.044715 x^3), gelu = x s and gelu' = s + 2 x s s' k (1 + 3 0.044715 x^2),
// no cancellation in 1 - tanh^2 u = 4 s s'. e^-2u is kept finite (u >= -40).
template <typename real>
static inline real gelu_tanh(real x) {
    const real u = (real)0.7978845608028654 * (x + (real)0.044715 * x * x * x);  // sqrt(2/pi) (...)
    return x / ((real)1 + exp_vec(std::min((real)-2 * u, (real)80)));
}
template <typename real>
static inline real gelu_tanh_grad(real x) {
    const real k = (real)0.7978845608028654, u = k * (x + (real)0.044715 * x * x * x);
    const real e = exp_vec(std::min((real)-2 * u, (real)80)), s = (real)1 / ((real)1 + e), s_minus = e * s;
    return s + (real)2 * x * s * s_minus * k * ((real)1 + (real)3 * (real)0.044715 * x * x);
}

// gelu: act[N,F] = gelu(fc1[N,F]); swiglu: act[N,F] = silu(gate) * up, fc1[N,2F] = [gate | up]
template <typename real>
void mlp_act_forward(real* act, const real* fc1, int N, int F, bool swiglu) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real* a = act + (size_t)n * F;
        if (swiglu) {
            const real *gate = fc1 + (size_t)n * 2 * F, *up = gate + F;
#pragma omp simd
            for (int f = 0; f < F; f++) a[f] = gate[f] / ((real)1 + exp_vec(-gate[f])) * up[f];
        } else {
            const real* x = fc1 + (size_t)n * F;
#pragma omp simd
            for (int f = 0; f < F; f++) a[f] = gelu_tanh(x[f]);
        }
    }
}

// dfc1 (overwritten) from dact
template <typename real>
void mlp_act_backward(real* dfc1, const real* dact, const real* fc1, int N, int F, bool swiglu) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real* d = dact + (size_t)n * F;
        if (swiglu) {
            const real *gate = fc1 + (size_t)n * 2 * F, *up = gate + F;
            real *dgate = dfc1 + (size_t)n * 2 * F, *dup = dgate + F;
#pragma omp simd
            for (int f = 0; f < F; f++) {
                const real g = gate[f], sig = (real)1 / ((real)1 + exp_vec(-g));
                dgate[f] = d[f] * up[f] * sig * ((real)1 + g * ((real)1 - sig));
                dup[f] = d[f] * g * sig;
            }
        } else {
            const real* x = fc1 + (size_t)n * F;
            real* dx = dfc1 + (size_t)n * F;
#pragma omp simd
            for (int f = 0; f < F; f++) dx[f] = d[f] * gelu_tanh_grad(x[f]);
        }
    }
}

// Cross-entropy over the first V of Vp logits; targets of -1 are ignored. Returns the sum of
// losses over valid rows; lse[N] keeps log-sum-exp for backward.
template <typename real>
double crossentropy_forward(real* lse, const real* logits, const int32_t* targets, int N, int V, int Vp) {
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int n = 0; n < N; n++) {
        const real* l = logits + (size_t)n * Vp;
        real mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = std::max(mx, l[v]);
        real s = 0;
        for (int v = 0; v < V; v++) s += std::exp(l[v] - mx);
        lse[n] = mx + std::log(s);
        if (targets[n] >= 0) total += (double)(lse[n] - l[targets[n]]);
    }
    return total;
}

// logits [N,Vp] are overwritten with dloss/dlogits = (softmax - onehot) * scale on valid rows.
template <typename real>
void crossentropy_backward(real* logits, const real* lse, const int32_t* targets, int N, int V, int Vp, real scale) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real* l = logits + (size_t)n * Vp;
        const bool valid = targets[n] >= 0;
        for (int v = 0; v < Vp; v++) {
            real p = (v < V && valid) ? std::exp(l[v] - lse[n]) : (real)0;
            l[v] = (p - (valid && v == targets[n] ? (real)1 : (real)0)) * scale;
        }
    }
}

