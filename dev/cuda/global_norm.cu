// dev/cuda/global_norm.cu: the global gradient norm over the flat gradient buffer (bf16 or fp32), fp32 sums,
// deterministic, plus the clipping coefficient. Checked against a double-precision sum (as train_gpt_cpu.cpp
// grad_norm), and for bitwise-identical results over repeated runs.
// Versions (predictions, written before any measurement):
//   1  fixed grid of 1024 x 256 threads, each thread sums single elements j, j + G, ... with scalar loads, then a
//      fixed-order block tree and a one-block final sum. Scalar 2-byte loads of bf16 need many loads in flight;
//      expect 50-70% of the copy ceiling (read-only traffic counts once).
//   2  llmc/grad_norm.cuh: the same fixed partition over 8-element vectors, 128-bit loads, four loads issued
//      before they are summed. Expect 85-95% (a reduction only reads, so it can beat the copy figure's mix).
#include "dev/cuda/common.h"
#include "llmc/grad_norm.cuh"

static const float CLIP = 1.0f;

template <typename T>
__global__ void global_norm_v1_kernel(float* partial, const T* g, size_t n) {
    const size_t G = (size_t)GLOBAL_NORM_BLOCKS * GLOBAL_NORM_THREADS;
    float s = 0.0f;
    for (size_t i = blockIdx.x * (size_t)GLOBAL_NORM_THREADS + threadIdx.x; i < n; i += G) {
        float x = to_float(g[i]);
        s += x * x;
    }
    float tot = block_sum_fixed(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = tot;
}

template <typename T>
static void norm_launch(int version, float* out, float* partial, const T* g, size_t n, cudaStream_t st) {
    if (version == 1) {
        global_norm_v1_kernel<T><<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, st>>>(partial, g, n);
        cudaCheck(cudaGetLastError());
        global_norm_final_kernel<<<1, GLOBAL_NORM_THREADS, 0, st>>>(out, partial, CLIP, 1.0f);
    } else {
        global_norm(out, partial, g, n, CLIP, st);
    }
    cudaCheck(cudaGetLastError());
}

template <typename T>
static void run(Bench* bench, int version, size_t n, size_t size_index) {
    const bool is_bf16 = sizeof(T) == 2;
    std::vector<float> g;
    fill_uniform(&g, n, seed_for(is_bf16 ? "global_norm_bf16" : "global_norm_fp32", version, size_index), -1.0f, 1.0f);
    std::vector<bf16> gh;
    if (is_bf16) gh = to_bf16(&g);
    Layout lay;
    size_t og = lay.add(n * sizeof(T)), oout = lay.add(2 * 4), opart = lay.add(GLOBAL_NORM_BLOCKS * 4);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, og, is_bf16 ? (const void*)gh.data() : (const void*)g.data(), n * sizeof(T));
    auto launch = [&](int s) {
        norm_launch(version, sets.ptr<float>(s, oout), sets.ptr<float>(s, opart), sets.ptr<T>(s, og), n, bench->stream);
    };
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<float> got = download(sets.ptr<float>(0, oout), 2);
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<float> again = download(sets.ptr<float>(0, oout), 2);

    double sum = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
    const double norm = std::sqrt(sum), coef = std::min(1.0, CLIP / (norm + 1e-6));
    // the longest fp32 chain: n / (8 G) vectors of 8 per thread, then the block and final trees (about 40 adds);
    // every term is positive, so the scale is the sum itself (the norm's relative error is half the sum's)
    const double chain = (double)n / (GLOBAL_NORM_BLOCKS * GLOBAL_NORM_THREADS) + 48.0;
    std::string report;
    double worst = check_close("norm", std::vector<float>{got[0]}, std::vector<double>{norm}, tolerance(U_FP32, chain, norm), &report);
    worst = std::max(worst, check_close("clip_coef", std::vector<float>{got[1]}, std::vector<double>{coef},
                                        tolerance(U_FP32, chain, coef), &report));
    if (memcmp(got.data(), again.data(), 2 * sizeof(float)) != 0) {
        char buf[160];
        snprintf(buf, sizeof(buf), "not deterministic: norm %.9g then %.9g on the same data; ", got[0], again[0]);
        report += buf;
        worst = INFINITY;
    }

    double ms = bench->args.check_only ? -1.0 : time_kernel(bench->args, sets, bench->stream, launch);
    double bytes = (double)n * sizeof(T);  // read the gradients once
    char size[64];
    snprintf(size, sizeof(size), "%zu", n);
    bench_row(bench, "global_norm", is_bf16 ? "bf16 grads" : "fp32 grads", size, version, sets.count, ms, bytes, worst, report);
    device_sets_free(&sets);
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  Global gradient L2 norm and clipping coefficient over a flat bf16 or fp32 gradient buffer,\n"
                        "  deterministic (fixed partition, fixed-order reductions). Versions: 1 scalar loads,\n"
                        "  2 llmc/grad_norm.cuh (128-bit loads).\n",
                        "N (number of gradient elements)", "125000000,1300000003", 1, 2);
    Bench bench = bench_start(a, "global_norm");
    for (size_t si = 0; si < a.sizes.size(); si++)
        for (int bf = 1; bf >= 0; bf--)
            for (int v = 1; v <= 2; v++) {
                if (a.version != 0 && a.version != v) continue;
                if (bf) run<bf16>(&bench, v, (size_t)a.sizes[si][0], si);
                else run<float>(&bench, v, (size_t)a.sizes[si][0], si);
            }
    return bench_finish(&bench);
}
