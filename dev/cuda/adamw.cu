// dev/cuda/adamw.cu: the multi-tensor AdamW update over a GPT-3-shaped parameter table (llmc/param_table.h), fp32
// master weights, fp32 or bf16 moments, bf16 weights and gradients, the clipping coefficient read from device
// memory. Checked against a double-precision host copy of train_gpt_cpu.cpp adamw_update (decay on matrices
// only, bias corrections for step t).
// Versions (predictions, written before any measurement):
//   1  one launch per tensor, one element per thread, scalar loads. About 150 launches for a 12-layer model:
//      the small vectors (norm weights, biases) are each a tiny launch, so launch gaps cost a few percent;
//      scalar 4-byte accesses are coalesced. Expect 60-75% of the copy ceiling.
//   2  one launch for all tensors: blocks map to tensors through the prefix table (binary search), still one
//      element per thread per step with 8 coalesced scalar steps per thread. No launch gaps; expect 70-80%.
//   3  llmc/adamw.cuh: the same single launch with 8 consecutive elements per thread, 128-bit loads and stores
//      of every array. Fewer memory instructions in flight per byte; expect 85-90%.
#include "dev/cuda/common.h"
#include "llmc/adamw.cuh"
#include "llmc/param_table.h"

static const AdamWHyper HYPER = {1e-2f, 0.9f, 0.95f, 1e-8f};
static const float WEIGHT_DECAY = 0.1f;
static const int STEP = 3;            // 1-based step: bias corrections are far from 1
static const float GRAD_SCALE = 0.5f;  // the clipping coefficient, in device memory

__device__ __forceinline__ float moment_get(const float* p) { return *p; }
__device__ __forceinline__ float moment_get(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void moment_put(float* p, float x) { *p = x; }
__device__ __forceinline__ void moment_put(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

template <typename Moment>
__device__ __forceinline__ void adamw_scalar(const AdamWTensor<Moment>& t, size_t i, const AdamWHyper& h, float step,
                                             float rsbc2, float gs) {
    float p = t.master[i], m = moment_get(t.m + i), v = moment_get(t.v + i);
    adamw_element(&p, &m, &v, __bfloat162float(t.grad[i]) * gs, 1.0f - h.lr * t.weight_decay, h.beta1, h.beta2, h.eps,
                  step, rsbc2);
    t.master[i] = p;
    moment_put(t.m + i, m);
    moment_put(t.v + i, v);
    t.param[i] = __float2bfloat16(p);
}

template <typename Moment>
__global__ void adamw_v1_kernel(AdamWTensor<Moment> t, AdamWHyper h, float step, float rsbc2, const float* grad_scale) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < t.n) adamw_scalar(t, i, h, step, rsbc2, *grad_scale);
}

template <typename Moment>
__global__ void adamw_v2_kernel(const AdamWTensor<Moment>* tensors, int count, AdamWHyper h, float step, float rsbc2,
                                const float* grad_scale) {
    const AdamWTensor<Moment> t = tensors[adamw_find_tensor(tensors, count, blockIdx.x)];
    const size_t base = (blockIdx.x - t.first_block) * (size_t)ADAMW_BLOCK_ELEMS;
    const float gs = *grad_scale;
    for (int k = 0; k < 8; k++) {
        const size_t i = base + threadIdx.x + (size_t)k * ADAMW_THREADS;
        if (i < t.n) adamw_scalar(t, i, h, step, rsbc2, gs);
    }
}

// flat buffers of one set, all indexed by the parameter table's offsets
template <typename Moment>
struct Flat {
    bf16 *param, *grad;
    float* master;
    Moment *m, *v;
    float* grad_scale;
};

template <typename Moment>
static std::vector<AdamWTensor<Moment>> tensors_of(const ParamTable& table, const Flat<Moment>& f) {
    std::vector<AdamWTensor<Moment>> out;
    for (const ParamSpec& s : table.specs)
        out.push_back({f.param + s.offset, f.grad + s.offset, f.master + s.offset, f.m + s.offset, f.v + s.offset, s.numel(),
                       s.is_matrix ? WEIGHT_DECAY : 0.0f, 0});
    return out;
}

template <typename Moment>
static void run(Bench* bench, int version, int L, int C, size_t size_index) {
    const bool bf16m = sizeof(Moment) == 2;
    ModelConfig cfg;
    cfg.name = "adamw_bench";
    cfg.n_layer = L;
    cfg.n_embd = C;
    cfg.n_head = std::max(1, C / 64);
    cfg.ffn = 4 * C;
    cfg.vocab_size = 50257;
    cfg.seq_len = 2048;
    config_finalize(cfg);
    const ParamTable table = build_param_table(cfg);
    const size_t n = table.total;

    uint64_t seed = seed_for(bf16m ? "adamw_bf16_moments" : "adamw", version, size_index);
    std::vector<float> master, grad, m, v, u;
    fill_uniform(&master, n, seed + 1, -0.1f, 0.1f);
    fill_uniform(&grad, n, seed + 2, -0.02f, 0.02f);
    fill_uniform(&m, n, seed + 3, -0.01f, 0.01f);
    fill_uniform(&u, n, seed + 4, 1.0f, 4.0f);
    v.resize(n);
    // v of the order of m^2, as in training: the normalized update m / sqrt(v) stays of order 1
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) v[i] = m[i] * m[i] * u[i] + 1e-8f;
    std::vector<bf16> gradh = to_bf16(&grad), paramh(n, __float2bfloat16(0.0f)), mh, vh;
    if (bf16m) { mh = to_bf16(&m); vh = to_bf16(&v); }

    Layout lay;
    size_t oparam = lay.add(n * 2), ograd = lay.add(n * 2), omaster = lay.add(n * 4), om = lay.add(n * sizeof(Moment)),
           ov = lay.add(n * sizeof(Moment)), oscale = lay.add(4);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, oparam, paramh.data(), n * 2);
    device_sets_upload(sets, ograd, gradh.data(), n * 2);
    device_sets_upload(sets, omaster, master.data(), n * 4);
    device_sets_upload(sets, om, bf16m ? (const void*)mh.data() : (const void*)m.data(), n * sizeof(Moment));
    device_sets_upload(sets, ov, bf16m ? (const void*)vh.data() : (const void*)v.data(), n * sizeof(Moment));
    device_sets_upload(sets, oscale, &GRAD_SCALE, 4);
    std::vector<Flat<Moment>> flats;
    std::vector<AdamWTable<Moment>> tables;
    for (int s = 0; s < sets.count; s++) {
        flats.push_back({sets.ptr<bf16>(s, oparam), sets.ptr<bf16>(s, ograd), sets.ptr<float>(s, omaster),
                         sets.ptr<Moment>(s, om), sets.ptr<Moment>(s, ov), sets.ptr<float>(s, oscale)});
        tables.push_back(adamw_table_upload(tensors_of(table, flats.back())));
    }
    float step, rsbc2;
    adamw_step_constants(HYPER, STEP, &step, &rsbc2);
    std::vector<std::vector<AdamWTensor<Moment>>> host_tensors;  // with first_block, for version 1
    for (int s = 0; s < sets.count; s++) host_tensors.push_back(tensors_of(table, flats[s]));
    auto launch = [&](int s) {
        cudaStream_t st = bench->stream;
        if (version == 1) {
            for (const AdamWTensor<Moment>& t : host_tensors[s])
                adamw_v1_kernel<Moment><<<(unsigned)ceil_div(t.n, 256), 256, 0, st>>>(t, HYPER, step, rsbc2, flats[s].grad_scale);
        } else if (version == 2) {
            adamw_v2_kernel<Moment><<<(unsigned)tables[s].blocks, ADAMW_THREADS, 0, st>>>(tables[s].d_tensors, tables[s].count,
                                                                                         HYPER, step, rsbc2, flats[s].grad_scale);
        } else {
            adamw_update(tables[s], HYPER, STEP, flats[s].grad_scale, st);
        }
        cudaCheck(cudaGetLastError());
    };
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<bf16> g_param = download(flats[0].param, n);
    std::vector<float> g_master = download(flats[0].master, n);
    std::vector<Moment> g_m = download(flats[0].m, n), g_v = download(flats[0].v, n);

    // reference: train_gpt_cpu.cpp adamw_update in double, from the moments as stored (rounded when bf16)
    std::vector<double> r_master(n), r_m(n), r_v(n), r_param(n);
    const double bc1 = 1.0 - std::pow((double)HYPER.beta1, STEP), bc2 = 1.0 - std::pow((double)HYPER.beta2, STEP);
    for (const ParamSpec& s : table.specs) {
        const double wd = s.is_matrix ? WEIGHT_DECAY : 0.0, b1 = HYPER.beta1, b2 = HYPER.beta2;
#pragma omp parallel for schedule(static)
        for (size_t i = s.offset; i < s.offset + s.numel(); i++) {
            double g = (double)grad[i] * GRAD_SCALE;
            double mi = bf16m ? (double)__bfloat162float(mh[i]) : m[i], vi = bf16m ? (double)__bfloat162float(vh[i]) : v[i];
            double p = master[i] * (1.0 - (double)HYPER.lr * wd);
            mi = b1 * mi + (1.0 - b1) * g;
            vi = b2 * vi + (1.0 - b2) * g * g;
            p -= (double)HYPER.lr / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + (double)HYPER.eps);
            r_master[i] = p;
            r_m[i] = mi;
            r_v[i] = vi;
            r_param[i] = p;
        }
    }
    std::string report;
    const double u_mom = bf16m ? U_BF16 : U_FP32;
    // master: |p| <= 0.1 plus an update of at most lr / bc1 * |m| / sqrt(v) (of order 1 here, 5 allowed)
    const double s_p = max_abs(r_master) + HYPER.lr / bc1 * 5.0;
    double worst = check_close("master", g_master, r_master, tolerance(U_FP32, 1, s_p), &report);
    worst = std::max(worst, check_close("param", g_param, r_param, tolerance(U_BF16, 1, s_p), &report));
    worst = std::max(worst, check_close("m", g_m, r_m, tolerance(u_mom, 2, max_abs(r_m)), &report));
    worst = std::max(worst, check_close("v", g_v, r_v, tolerance(u_mom, 2, max_abs(r_v)), &report));

    double ms = bench->args.check_only ? -1.0 : time_kernel(bench->args, sets, bench->stream, launch);
    // bytes: read grad, master, m, v; write param, master, m, v
    double bytes = (double)n * (2 + 4 + 2 * sizeof(Moment)) + (double)n * (2 + 4 + 2 * sizeof(Moment));
    char size[96];
    snprintf(size, sizeof(size), "%dx%d (%.0fM params, %zu tensors)", L, C, n / 1e6, table.specs.size());
    bench_row(bench, "adamw", bf16m ? "bf16 moments" : "fp32 moments", size, version, sets.count, ms, bytes, worst, report);
    for (AdamWTable<Moment>& t : tables) adamw_table_free(&t);
    device_sets_free(&sets);
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  Multi-tensor AdamW over a GPT-3-shaped parameter table (L layers, C channels, ffn 4C, vocab 50257),\n"
                        "  fp32 master weights, fp32 or bf16 moments. Versions: 1 launch per tensor, 2 one launch scalar,\n"
                        "  3 llmc/adamw.cuh (one launch, 8 elements per thread).\n",
                        "LxC (layers x channels, C a multiple of 64)", "12x768,24x1024", 2, 3);
    for (const std::vector<long>& s : a.sizes)
        if (s[1] % 64 != 0 || s[0] > 1000 || s[1] > 65536) die("--sizes: %ldx%ld: C must be a multiple of 64 (at most 65536), L at most 1000", s[0], s[1]);
    Bench bench = bench_start(a, "adamw");
    for (size_t si = 0; si < a.sizes.size(); si++)
        for (int bf = 0; bf < 2; bf++)
            for (int v = 1; v <= 3; v++) {
                if (a.version != 0 && a.version != v) continue;
                if (bf) run<bf16>(&bench, v, (int)a.sizes[si][0], (int)a.sizes[si][1], si);
                else run<float>(&bench, v, (int)a.sizes[si][0], (int)a.sizes[si][1], si);
            }
    return bench_finish(&bench);
}
