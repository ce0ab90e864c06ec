// dev/cuda/fused_classifier.cu: LM head + softmax cross-entropy, forward and backward, numbered
// versions checked against the CPU reference (llmc/ref_ops.h matmul_forward, crossentropy_forward,
// crossentropy_backward, matmul_backward) and timed at vocabularies 50304 and 128256.
//   version 1  baseline on full logits [N, Vp]: one cuBLASLt GEMM for all logits, a softmax kernel
//              (max, sum, write probabilities in place; three reads of the row), a cross-entropy
//              loss kernel (-log p[target]), a backward kernel ((p - onehot) * scale in place), then
//              the dX and dW GEMMs over all rows.
//   version 2  panels of rows (logits [panel, Vp] only) and one fused row kernel: max pass, sum
//              pass, write pass, scalar bf16 loads.
//   version 3  llmc/classifier.cuh: panels, fused row kernel with 128-bit loads and a one-pass
//              online max / sum, then the dlogits write pass.
// FLOPs: 6 * N * C * Vp per call (logits, dX, dW GEMMs); the row kernels are memory-bound.
// Tolerances (derived in notes_attention.md), u = 2^-8, zmax = max |logit|:
//   loss sum <= (2u zmax + 2u) * valid rows; lse <= u zmax + 1e-5 |lse|;
//   dX row n <= 2 maxW scale (2u zmax + 3u) + u |ref|; dW[v, :] <= 2 maxX scale sum_n (p_nv (2u zmax + 2u) + u [t_n = v]) + 1e-6.
// Usage: fused_classifier [version] [--check-only] [--sizes NxCxV,...] [--reps N] [--warmup N] [--help]
// The check (N=300, C=128, V=1000, Vp=1024, panel 128) always runs; --sizes sets the timed shapes, default
// 16384 tokens at C in {2048, 4096} and V in {50304, 128256}; versions 2 and 3 use panels of PANEL rows.
// Harness: dev/cuda/common.h (command line, inputs, device buffer sets, timing).
#include "dev/cuda/common.h"
#include "llmc/ref_ops.h"
#include "llmc/classifier.cuh"

// ---- version 1: separate kernels on full logits ----------------------------------------------------

// probs in place of logits [N, Vp] (0 on padded columns), lse [N]. One block per row, three reads.
__global__ void softmax_forward_kernel(__nv_bfloat16* logits, float* lse, int V, int Vp) {
    __shared__ float red[32];
    __shared__ float bcast;
    __nv_bfloat16* x = logits + (size_t)blockIdx.x * Vp;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < V; c += blockDim.x) m = fmaxf(m, __bfloat162float(x[c]));
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nwarps; w++) red[0] = fmaxf(red[0], red[w]);
        bcast = red[0];
    }
    __syncthreads();
    m = bcast;
    float s = 0.0f;
    for (int c = threadIdx.x; c < V; c += blockDim.x) s += __expf(__bfloat162float(x[c]) - m);
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    __syncthreads();  // red[] is reused
    if (lane == 0) red[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nwarps; w++) red[0] += red[w];
        bcast = m + __logf(red[0]);
        lse[blockIdx.x] = bcast;
    }
    __syncthreads();
    const float l = bcast;
    for (int c = threadIdx.x; c < Vp; c += blockDim.x)
        x[c] = __float2bfloat16(c < V ? __expf(__bfloat162float(x[c]) - l) : 0.0f);
}

// losses[n] = -log probs[n, target] (0 when ignored).
__global__ void crossentropy_loss_kernel(float* losses, const __nv_bfloat16* probs, const int32_t* targets, int N, int Vp) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const int t = targets[n];
    losses[n] = t >= 0 ? -__logf(__bfloat162float(probs[(size_t)n * Vp + t])) : 0.0f;
}

// probs [N, Vp] -> dlogits = (probs - onehot) * scale in place (0 on ignored rows).
__global__ void crossentropy_backward_kernel(__nv_bfloat16* probs, const int32_t* targets, int N, int Vp, float scale) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * Vp) return;
    const int n = (int)(i / Vp), c = (int)(i % Vp), t = targets[n];
    const float p = __bfloat162float(probs[i]);
    probs[i] = __float2bfloat16(t >= 0 ? (p - (c == t ? 1.0f : 0.0f)) * scale : 0.0f);
}

// ---- version 2: fused row kernel, scalar loads, three passes ---------------------------------------

__global__ void fused_classifier_v2_kernel(__nv_bfloat16* logits, float* losses, float* lse, const int32_t* targets,
                                           int V, int Vp, float scale) {
    __shared__ float red[32];
    __shared__ float bcast[2];
    __nv_bfloat16* x = logits + (size_t)blockIdx.x * Vp;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int target = targets[blockIdx.x];
    float m = -INFINITY;
    for (int c = threadIdx.x; c < V; c += blockDim.x) m = fmaxf(m, __bfloat162float(x[c]));
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nwarps; w++) red[0] = fmaxf(red[0], red[w]);
        bcast[0] = red[0];
        bcast[1] = target >= 0 ? __bfloat162float(x[target]) : 0.0f;
    }
    __syncthreads();
    m = bcast[0];
    float s = 0.0f;
    for (int c = threadIdx.x; c < V; c += blockDim.x) s += __expf(__bfloat162float(x[c]) - m);
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    __syncthreads();
    if (lane == 0) red[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nwarps; w++) red[0] += red[w];
        const float l = m + __logf(red[0]);
        lse[blockIdx.x] = l;
        losses[blockIdx.x] = target >= 0 ? l - bcast[1] : 0.0f;
        bcast[0] = l;
    }
    __syncthreads();
    const float l = bcast[0];
    for (int c = threadIdx.x; c < Vp; c += blockDim.x) {
        float d = 0.0f;
        if (target >= 0 && c < V) d = (__expf(__bfloat162float(x[c]) - l) - (c == target ? 1.0f : 0.0f)) * scale;
        x[c] = __float2bfloat16(d);
    }
}

// ---- the three versions, same interface ------------------------------------------------------------

struct Problem {
    int N, C, V, Vp, panel;
    float scale;
    __nv_bfloat16 *x, *w, *dx, *logits;  // logits: [N, Vp] for version 1, [panel, Vp] otherwise
    float *dw, *losses, *lse;
    int32_t* targets;
    MatmulContext* mm;  // llmc/matmul.cuh: the cuBLASLt handle and workspace every GEMM below uses
};

static void run_version(int version, const Problem& p) {
    cudaCheck(cudaMemsetAsync(p.dw, 0, (size_t)p.Vp * p.C * sizeof(float), 0));
    if (version == 1) {
        // the LM head as a linear layer of IC = C inputs and OC = Vp outputs over N tokens:
        // logits[N, Vp] = x W^T, dx[N, C] = dlogits W, dW[Vp, C] += dlogits^T x (fp32)
        matmul_forward(p.mm, 0, p.logits, p.x, p.w, nullptr, p.N, p.C, p.Vp);
        softmax_forward_kernel<<<p.N, 512>>>(p.logits, p.lse, p.V, p.Vp);
        cudaCheck(cudaGetLastError());
        crossentropy_loss_kernel<<<(p.N + 255) / 256, 256>>>(p.losses, p.logits, p.targets, p.N, p.Vp);
        cudaCheck(cudaGetLastError());
        const size_t n = (size_t)p.N * p.Vp;
        crossentropy_backward_kernel<<<(unsigned)((n + 255) / 256), 256>>>(p.logits, p.targets, p.N, p.Vp, p.scale);
        cudaCheck(cudaGetLastError());
        matmul_backward_input(p.mm, 0, p.dx, p.logits, p.w, p.N, p.C, p.Vp);
        matmul_backward_weight(p.mm, 0, p.dw, nullptr, p.logits, p.x, p.N, p.C, p.Vp, true);
    } else if (version == 2) {
        for (int r0 = 0; r0 < p.N; r0 += p.panel) {
            const int rows = std::min(p.panel, p.N - r0);
            const __nv_bfloat16* xc = p.x + (size_t)r0 * p.C;
            matmul_forward(p.mm, 0, p.logits, xc, p.w, nullptr, rows, p.C, p.Vp);
            fused_classifier_v2_kernel<<<rows, 512>>>(p.logits, p.losses + r0, p.lse + r0, p.targets + r0, p.V, p.Vp,
                                                      p.scale);
            cudaCheck(cudaGetLastError());
            matmul_backward_input(p.mm, 0, p.dx + (size_t)r0 * p.C, p.logits, p.w, rows, p.C, p.Vp);
            matmul_backward_weight(p.mm, 0, p.dw, nullptr, p.logits, xc, rows, p.C, p.Vp, true);
        }
    } else {
        fused_classifier(p.dx, p.dw, p.losses, p.lse, p.logits, p.x, p.w, p.targets, p.N, p.C, p.V, p.Vp, p.panel,
                         p.scale, true, p.mm, 0);
    }
}

// ---- host side ------------------------------------------------------------------------------------

static const int N_VERSIONS = 3;
static const int PANEL = 4096;  // rows per panel in the timed runs of versions 2 and 3

// inputs: x ~ uniform(-1, 1), W ~ uniform(-w_amp, w_amp), rounded to bf16 (float copies in *x_f, *w_f);
// targets uniform in [0, V) with about 10% set to -1 (ignored)
static void make_inputs(int N, int C, int V, int Vp, float w_amp, uint64_t seed, std::vector<float>* x_f,
                        std::vector<float>* w_f, std::vector<bf16>* x_h, std::vector<bf16>* w_h,
                        std::vector<int32_t>* targets) {
    fill_uniform(x_f, (size_t)N * C, seed, -1.0f, 1.0f);
    fill_uniform(w_f, (size_t)Vp * C, seed + 1, -w_amp, w_amp);
    *x_h = to_bf16(x_f);
    *w_h = to_bf16(w_f);
    targets->resize(N);
    for (int n = 0; n < N; n++) {
        const float r = host_uniform(seed + 2, n, 0.0f, 1.0f);
        (*targets)[n] = r < 0.1f ? -1 : std::min(V - 1, (int)(host_uniform(seed + 3, n, 0.0f, 1.0f) * V));
    }
}

static Problem alloc_problem(int N, int C, int V, int Vp, int panel, int version, MatmulContext* mm) {
    Problem p{N, C, V, Vp, panel, 0.0f, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, mm};
    const size_t logit_rows = version == 1 ? (size_t)N : (size_t)std::min(panel, N);
    cudaCheck(cudaMalloc(&p.x, (size_t)N * C * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&p.w, (size_t)Vp * C * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&p.dx, (size_t)N * C * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&p.logits, logit_rows * Vp * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc(&p.dw, (size_t)Vp * C * sizeof(float)));
    cudaCheck(cudaMalloc(&p.losses, (size_t)N * sizeof(float)));
    cudaCheck(cudaMalloc(&p.lse, (size_t)N * sizeof(float)));
    cudaCheck(cudaMalloc(&p.targets, (size_t)N * sizeof(int32_t)));
    return p;
}

static void free_problem(Problem* p) {
    void* ptrs[] = {p->x, p->w, p->dx, p->logits, p->dw, p->losses, p->lse, p->targets};
    for (void* q : ptrs) cudaCheck(cudaFree(q));
}

static void upload_problem(Problem* p, const std::vector<bf16>& x, const std::vector<bf16>& w,
                           const std::vector<int32_t>& targets) {
    int valid = 0;
    for (int32_t t : targets) valid += t >= 0;
    p->scale = 1.0f / std::max(valid, 1);
    cudaCheck(cudaMemcpy(p->x, x.data(), x.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(p->w, w.data(), w.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(p->targets, targets.data(), targets.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
}

static bool check_version(int version, MatmulContext* mm) {
    const int N = 300, C = 128, V = 1000, Vp = 1024, panel = 128;
    std::vector<float> x_f, w_f;
    std::vector<bf16> x_h, w_h;
    std::vector<int32_t> targets;
    make_inputs(N, C, V, Vp, 0.35f, seed_for("fused_classifier", version, 0), &x_f, &w_f, &x_h, &w_h, &targets);
    Problem p = alloc_problem(N, C, V, Vp, panel, version, mm);
    upload_problem(&p, x_h, w_h, targets);
    run_version(version, p);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> dx_h((size_t)N * C);
    std::vector<float> dw_h((size_t)Vp * C), loss_h(N), lse_h(N);
    cudaCheck(cudaMemcpy(dx_h.data(), p.dx, dx_h.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(dw_h.data(), p.dw, dw_h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(loss_h.data(), p.losses, N * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(lse_h.data(), p.lse, N * sizeof(float), cudaMemcpyDeviceToHost));
    const float scale = p.scale;
    free_problem(&p);

    // reference in fp32 from the same bf16 inputs
    std::vector<float> logits((size_t)N * Vp), lse(N), dx((size_t)N * C, 0.0f), dw((size_t)Vp * C, 0.0f);
    matmul_forward(logits.data(), x_f.data(), w_f.data(), (const float*)nullptr, N, C, Vp);
    double zmax = 0, maxw = 0, maxx = 0;
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) zmax = std::max(zmax, (double)std::fabs(logits[(size_t)n * Vp + v]));
    for (float v : w_f) maxw = std::max(maxw, (double)std::fabs(v));
    for (float v : x_f) maxx = std::max(maxx, (double)std::fabs(v));
    const double ref_loss = crossentropy_forward(lse.data(), logits.data(), targets.data(), N, V, Vp);
    crossentropy_backward(logits.data(), lse.data(), targets.data(), N, V, Vp, scale);  // logits := dlogits
    matmul_backward(dx.data(), dw.data(), (float*)nullptr, logits.data(), x_f.data(), w_f.data(), N, C, Vp);

    const double u = U_BF16, per_row = 2 * u * zmax + 2 * u;
    int valid = 0, bad = 0;
    double got_loss = 0, worst_lse = 0, worst_dx = 0, worst_dw = 0;
    for (int n = 0; n < N; n++) {
        got_loss += loss_h[n];
        if (targets[n] < 0) {
            bad += loss_h[n] != 0.0f;
            continue;
        }
        valid++;
        const double e = std::fabs((double)lse_h[n] - lse[n]);
        worst_lse = std::max(worst_lse, std::isnan(e) ? INFINITY : e);
        bad += !(e <= u * zmax + 1e-5 * std::fabs(lse[n]));
    }
    const double loss_err = std::fabs(got_loss - ref_loss);
    bad += !(loss_err <= per_row * valid);
    for (int n = 0; n < N; n++) {
        const double tol_row = targets[n] < 0 ? 0.0 : 2 * maxw * scale * (2 * u * zmax + 3 * u);
        for (int c = 0; c < C; c++) {
            const double ref = dx[(size_t)n * C + c], e = std::fabs((double)__bfloat162float(dx_h[(size_t)n * C + c]) - ref);
            worst_dx = std::max(worst_dx, std::isnan(e) ? INFINITY : e);
            bad += !(e <= tol_row + u * std::fabs(ref));
        }
    }
    for (int v = 0; v < Vp; v++) {
        double budget = 0;  // sum_n of the bound on |dlogit error| of column v
        for (int n = 0; n < N; n++) {
            if (targets[n] < 0 || v >= V) continue;
            const double prob = logits[(size_t)n * Vp + v] / scale + (targets[n] == v ? 1.0 : 0.0);
            budget += scale * (prob * (2 * u * zmax + 2 * u) + (targets[n] == v ? u : 0.0));
        }
        for (int c = 0; c < C; c++) {
            const double e = std::fabs((double)dw_h[(size_t)v * C + c] - dw[(size_t)v * C + c]);
            worst_dw = std::max(worst_dw, std::isnan(e) ? INFINITY : e);
            bad += !(e <= 2 * maxx * budget + 1e-6);
        }
    }
    printf("[%s] classifier v%d N=%d C=%d V=%d Vp=%d panel=%d: loss sum %.6f vs ref %.6f (err %.2e), max err "
           "lse %.2e dx %.2e dw %.2e (zmax %.2f)%s\n", bad ? "FAIL" : "PASS", version, N, C, V, Vp, panel, got_loss,
           ref_loss, loss_err, worst_lse, worst_dx, worst_dw, zmax, bad ? "; elements beyond tolerance" : "");
    return bad == 0;
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  LM head + softmax cross-entropy, forward and backward (logits, loss, dlogits in place, dX, dW).\n"
                        "  Versions: 1 full logits + separate softmax / loss / backward kernels, 2 panels + fused row kernel,\n"
                        "  3 llmc/classifier.cuh (panels, 128-bit loads, one-pass online softmax). Checks against the CPU\n"
                        "  reference (N=300 C=128 V=1000), then times the --sizes shapes (panels of 4096 rows).\n",
                        "NxCxV (C a multiple of 8; Vp = V rounded up to 128)",
                        "16384x2048x50304,16384x2048x128256,16384x4096x50304,16384x4096x128256", 3, N_VERSIONS);
    for (const std::vector<long>& s : a.sizes)
        if (s[1] % 8 != 0 || s[0] * s[1] > (1l << 31))
            die("--sizes: %ldx%ldx%ld: C must be a multiple of 8 and N*C at most 2^31", s[0], s[1], s[2]);
    cuda_require_device();
    print_device_info(0);
    MatmulContext mm;
    matmul_init(&mm, 0);  // no bias gradients here

    int failures = 0;
    for (int v = 1; v <= N_VERSIONS; v++)
        if (!a.version || v == a.version) failures += !check_version(v, &mm);
    if (!a.check_only) {
        printf("| kernel | size NxCxV (Vp) | version | ms | TFLOP/s (6*N*C*Vp) | logits buffer MiB | speed-up vs v1 |\n");
        printf("| --- | --- | --- | --- | --- | --- | --- |\n");
        for (const std::vector<long>& s : a.sizes) {
            const int N = (int)s[0], C = (int)s[1], V = (int)s[2], Vp = (V + 127) / 128 * 128;
            const double flops = 6.0 * N * C * Vp;
            std::vector<float> x_f, w_f;
            std::vector<bf16> x_h, w_h;
            std::vector<int32_t> targets;
            make_inputs(N, C, V, Vp, 0.02f, seed_for("fused_classifier_bench", 0, 0), &x_f, &w_f, &x_h, &w_h, &targets);
            double base_ms = 0.0;
            for (int v = 1; v <= N_VERSIONS; v++) {
                if (a.version && v != a.version) continue;
                Problem p = alloc_problem(N, C, V, Vp, PANEL, v, &mm);
                upload_problem(&p, x_h, w_h, targets);
                // one buffer set: every size here is far above 3x L2 (W alone is 0.2-1 GiB)
                DeviceSets one;
                one.count = 1;
                const double ms = time_kernel(a, one, 0, [&](int) { run_version(v, p); });
                free_problem(&p);
                if (v == 1) base_ms = ms;
                const double logit_mib = (double)(v == 1 ? N : std::min(PANEL, N)) * Vp * 2 / 1048576.0;
                char speedup[32] = "-";
                if (v != 1 && base_ms > 0.0) snprintf(speedup, sizeof(speedup), "%.2fx", base_ms / ms);
                printf("| fused_classifier | %dx%dx%d (%d) | %d | %.3f | %.1f | %.1f | %s |\n", N, C, V, Vp, v, ms,
                       flops / (ms * 1e-3) / 1e12, logit_mib, speedup);
                fflush(stdout);
            }
        }
    }
    matmul_free(&mm);
    if (failures) {
        fprintf(stderr, "error: %d fused_classifier check(s) failed (lines marked [FAIL])\n", failures);
        return 1;
    }
    return 0;
}
