// dev/cuda/mlp_act.cu: the MLP activations GELU (tanh approximation) and SwiGLU (fc1 [N,2F] = [gate | up]),
// forward and backward, bf16 tensors with fp32 math. Checked against mlp_act_forward / mlp_act_backward of
// llmc/ref_ops.h (in double).
// Versions (predictions, written before any measurement):
//   1  one thread per output element, scalar bf16 loads and stores (2-byte accesses, 64 bytes per warp
//      instruction), one element of work per thread. Expect 50-70% of the copy ceiling.
//   2  llmc/mlp_act.cuh: 8 elements per thread with 128-bit loads and stores, grid-stride loop over at most
//      16 blocks per SM. Four times fewer memory instructions; expect 85-90%, with tanhf the largest ALU cost
//      (GELU stays memory-bound at 8 elements per 16-byte load). Measured on an H100: 91-94% but for
//      swiglu_backward, 53.8% and 55.7%, below version 1's 72.8% and 72.5% (its grid-stride kernel is kept here).
//   3  swiglu_backward only, llmc/mlp_act.cuh: version 2's vectors in version 1's order (one vector per thread,
//      no loop, the blocks in address order); the same values bit for bit as version 2 (checked). Expect at least
//      version 1's 73% and up to the forward's 90%: five streams in address order, 8 times fewer memory
//      instructions than version 1. In the trainer, llama3.2_1b's "activation bwd" on an H200 (5.66 ms a step,
//      39.5% of the nominal 4.8 TB/s) would fall to about 3 ms.
#include "dev/cuda/common.h"
#include "llmc/mlp_act.cuh"
#include "llmc/ref_ops.h"

enum Act { GELU_FWD, GELU_BWD, SWIGLU_FWD, SWIGLU_BWD };
static const char* ACT_NAMES[] = {"gelu_forward", "gelu_backward", "swiglu_forward", "swiglu_backward"};

__global__ void act_v1_kernel(bf16* out, const bf16* a, const bf16* b, int N, int F, int kind) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * F) return;
    const size_t n = i / F, f = i % F;
    if (kind == GELU_FWD) out[i] = __float2bfloat16(gelu_tanh_f(__bfloat162float(a[i])));
    else if (kind == GELU_BWD) out[i] = __float2bfloat16(__bfloat162float(a[i]) * gelu_tanh_grad_f(__bfloat162float(b[i])));
    else if (kind == SWIGLU_FWD) {
        float g = __bfloat162float(a[n * 2 * F + f]), u = __bfloat162float(a[n * 2 * F + F + f]);
        out[i] = __float2bfloat16(g * sigmoid_f(g) * u);
    } else {  // a = dact [N,F], b = fc1 [N,2F], out = dfc1 [N,2F]
        float d = __bfloat162float(a[i]), g = __bfloat162float(b[n * 2 * F + f]), u = __bfloat162float(b[n * 2 * F + F + f]);
        float sig = sigmoid_f(g);
        out[n * 2 * F + f] = __float2bfloat16(d * u * sig * (1.0f + g * (1.0f - sig)));
        out[n * 2 * F + F + f] = __float2bfloat16(d * g * sig);
    }
}

// swiglu_backward version 2: the grid-stride form llmc/mlp_act.cuh's other kernels keep (vector v covers dact[n, 8f ..
// 8f+7] with n = v / (F/8), f = v % (F/8))
__global__ void swiglu_backward_v2_kernel(bf16* __restrict__ dfc1, const bf16* __restrict__ dact,
                                          const bf16* __restrict__ fc1, int N, int F) {
    const size_t per_row = F / 8, nvec = (size_t)N * per_row;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < nvec; v += (size_t)gridDim.x * blockDim.x) {
        const size_t n = v / per_row, f = 8 * (v % per_row);
        Pack8 g = load8(fc1 + n * 2 * F + f), u = load8(fc1 + n * 2 * F + F + f), d = load8(dact + n * F + f), dg, du;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float gj = __bfloat162float(g.v[j]), uj = __bfloat162float(u.v[j]), dj = __bfloat162float(d.v[j]);
            float sig = sigmoid_f(gj);
            dg.v[j] = __float2bfloat16(dj * uj * sig * (1.0f + gj * (1.0f - sig)));
            du.v[j] = __float2bfloat16(dj * gj * sig);
        }
        store8(dfc1 + n * 2 * F + f, dg);
        store8(dfc1 + n * 2 * F + F + f, du);
    }
}

// the versions each kernel has (swiglu_backward: 3)
static int act_versions(int kind) { return kind == SWIGLU_BWD ? 3 : 2; }

// out: act (forward) or dfc1 (backward); fc1: the saved input; dact: the gradient (backward only)
static void act_launch(int version, int kind, bf16* out, const bf16* fc1, const bf16* dact, int N, int F, cudaStream_t st) {
    const size_t n = (size_t)N * F;
    if (version == 1) {
        const bf16* a = (kind == GELU_BWD || kind == SWIGLU_BWD) ? dact : fc1;
        act_v1_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, st>>>(out, a, fc1, N, F, kind);
    } else if (kind == GELU_FWD) gelu_forward(out, fc1, n, st);
    else if (kind == GELU_BWD) gelu_backward(out, dact, fc1, n, st);
    else if (kind == SWIGLU_FWD) swiglu_forward(out, fc1, N, F, st);
    else if (version == 2)
        swiglu_backward_v2_kernel<<<mlp_act_grid(n / 8), 256, 0, st>>>(out, dact, fc1, N, F);
    else swiglu_backward(out, dact, fc1, N, F, st);
    cudaCheck(cudaGetLastError());
}

static void run(Bench* bench, int version, int kind, int N, int F, size_t size_index) {
    const bool swiglu = kind == SWIGLU_FWD || kind == SWIGLU_BWD, bwd = kind == GELU_BWD || kind == SWIGLU_BWD;
    const size_t n = (size_t)N * F, n1 = swiglu ? 2 * n : n;  // act [N,F], fc1 [N,F1]
    uint64_t seed = seed_for(ACT_NAMES[kind], version, size_index);
    std::vector<float> fc1, dact;
    fill_uniform(&fc1, n1, seed + 1, -4.0f, 4.0f);
    fill_uniform(&dact, bwd ? n : 0, seed + 2, -1.0f, 1.0f);
    std::vector<bf16> fc1h = to_bf16(&fc1), dacth = to_bf16(&dact);
    const size_t nout = bwd ? n1 : n;
    Layout lay;
    size_t ofc1 = lay.add(n1 * 2), odact = lay.add(bwd ? n * 2 : 0), oout = lay.add(nout * 2);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, ofc1, fc1h.data(), n1 * 2);
    if (bwd) device_sets_upload(sets, odact, dacth.data(), n * 2);
    auto launch = [&](int s) {
        act_launch(version, kind, sets.ptr<bf16>(s, oout), sets.ptr<bf16>(s, ofc1), sets.ptr<bf16>(s, odact), N, F, bench->stream);
    };
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<bf16> got = download(sets.ptr<bf16>(0, oout), nout);
    std::vector<double> ref(nout), fc1d = to_double(fc1), dactd = to_double(dact);
    if (bwd) mlp_act_backward<double>(ref.data(), dactd.data(), fc1d.data(), N, F, swiglu);
    else mlp_act_forward<double>(ref.data(), fc1d.data(), N, F, swiglu);
    std::string report;
    // elementwise formulas; the terms that can cancel (1 + g (1 - sig), 1 + tanh) are of the order of the output
    double worst = check_close(bwd ? "dfc1" : "act", got, ref, tolerance(U_BF16, 1, max_abs(ref)), &report);
    if (kind == SWIGLU_BWD && version == 3) {  // the order of the work changed, not the arithmetic: version 2's bits
        act_launch(2, kind, sets.ptr<bf16>(0, oout), sets.ptr<bf16>(0, ofc1), sets.ptr<bf16>(0, odact), N, F, bench->stream);
        cudaCheck(cudaStreamSynchronize(bench->stream));
        const std::vector<bf16> v2 = download(sets.ptr<bf16>(0, oout), nout);
        if (memcmp(v2.data(), got.data(), nout * sizeof(bf16)) != 0) {
            worst = INFINITY;
            report += " FAIL: not bit for bit version 2's;";
        }
    }

    double ms = bench->args.check_only ? -1.0 : time_kernel(bench->args, sets, bench->stream, launch);
    // bytes: forward reads fc1, writes act; backward reads fc1 and dact, writes dfc1
    double bytes = 2.0 * (bwd ? n1 + n + n1 : n1 + n);
    char size[64];
    snprintf(size, sizeof(size), "%dx%d", N, F);
    bench_row(bench, ACT_NAMES[kind], swiglu ? "swiglu" : "gelu", size, version, sets.count, ms, bytes, worst, report);
    device_sets_free(&sets);
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  GELU (tanh) and SwiGLU activations, forward and backward, bf16 with fp32 math.\n"
                        "  Versions: 1 thread per element, 2 llmc/mlp_act.cuh (8 elements per thread, grid-stride),\n"
                        "  3 swiglu_backward only: llmc/mlp_act.cuh (8 elements per thread, in address order).\n",
                        "NxF (tokens x ffn size, F a multiple of 8)", "16384x8192,8192x14336,8192x8192", 2, 3);
    for (const std::vector<long>& s : a.sizes)
        if (s[1] % 8 != 0 || 2 * s[0] * s[1] > (1l << 31))
            die("--sizes: %ldx%ld: F must be a multiple of 8 and 2*N*F at most 2^31", s[0], s[1]);
    Bench bench = bench_start(a, "mlp_act");
    for (size_t si = 0; si < a.sizes.size(); si++)
        for (int kind = 0; kind < 4; kind++)
            for (int v = 1; v <= act_versions(kind); v++)
                if (a.version == 0 || a.version == v) run(&bench, v, kind, (int)a.sizes[si][0], (int)a.sizes[si][1], si);
    return bench_finish(&bench);
}
