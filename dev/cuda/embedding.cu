// dev/cuda/embedding.cu: token (+ learned position) embedding, forward and deterministic backward, bf16 tables
// and activations, fp32 accumulation. Tokens follow a skewed distribution (id = V * u^4), so some ids repeat
// hundreds of times, as common tokens do. Checked against embedding_forward / embedding_backward of
// llmc/ref_ops.h (in double); backward is also checked for bitwise-identical results over two runs.
// Versions (predictions, written before any measurement):
//   forward
//   1  one thread per output element, scalar loads of the table rows. Expect 50-65% of the copy ceiling.
//   2  llmc/embedding.cuh: one thread per 8 channels with 128-bit loads and stores. Expect 85-90%.
//   backward (the per-token row lists are built on the host before timing, as the trainer does before a step)
//   1  one thread per (distinct token, channel) over the token's rows in order, scalar loads, plus a second
//      kernel for the position table. Scalar 2-byte loads, and dout is read twice with wpe. Expect 25-40%.
//   2  llmc/embedding.cuh: one thread per (distinct token, 8 channels), 128-bit loads, the position table's
//      rows as extra blocks of the same launch. Still reads dout twice with wpe (once for each table): expect
//      55-65% of the minimal-traffic figure with wpe, 80% without. Rows of frequent tokens are summed serially
//      by one thread: a token with hundreds of rows is the tail of the launch.
#include "dev/cuda/common.h"
#include "llmc/embedding.cuh"
#include "llmc/ref_ops.h"

static const int VOCAB = 50304;

__global__ void embedding_forward_v1_kernel(bf16* out, const int32_t* tok, const bf16* wte, const bf16* wpe, int N, int T, int C) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    const int n = (int)(i / C), c = (int)(i % C);
    float e = __bfloat162float(wte[(size_t)tok[n] * C + c]);
    if (wpe) e += __bfloat162float(wpe[(size_t)(n % T) * C + c]);
    out[i] = __float2bfloat16(e);
}

__global__ void embedding_backward_v1_wte_kernel(bf16* dwte, const bf16* dout, const int* token, const int* offset,
                                                 const int* rows, int unique, int C) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)unique * C) return;
    const int u = (int)(i / C), c = (int)(i % C);
    float s = 0.0f;
    for (int k = offset[u]; k < offset[u + 1]; k++) s += __bfloat162float(dout[(size_t)rows[k] * C + c]);
    bf16* d = dwte + (size_t)token[u] * C + c;
    *d = __float2bfloat16(__bfloat162float(*d) + s);
}

__global__ void embedding_backward_v1_wpe_kernel(bf16* dwpe, const bf16* dout, int N, int T, int C) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    const int t = (int)(i / C), c = (int)(i % C);
    float s = 0.0f;
    for (int n = t; n < N; n += T) s += __bfloat162float(dout[(size_t)n * C + c]);
    dwpe[i] = __float2bfloat16(__bfloat162float(dwpe[i]) + s);
}

static void run_forward(Bench* bench, int version, int B, int T, int C, bool pos, size_t size_index) {
    const int N = B * T;
    const size_t NC = (size_t)N * C;
    uint64_t seed = seed_for(pos ? "embedding_forward_wpe" : "embedding_forward", version, size_index);
    std::vector<float> wte, wpe;
    fill_uniform(&wte, (size_t)VOCAB * C, seed + 1, -1.0f, 1.0f);
    fill_uniform(&wpe, (size_t)T * C, seed + 2, -1.0f, 1.0f);
    std::vector<bf16> wteh = to_bf16(&wte), wpeh = to_bf16(&wpe);
    std::vector<int32_t> tok(N);
    for (int n = 0; n < N; n++) tok[n] = (int32_t)(VOCAB * std::pow(host_uniform(seed + 3, n, 0.0f, 1.0f), 4.0f)) % VOCAB;
    Layout lay;
    size_t owte = lay.add((size_t)VOCAB * C * 2), owpe = lay.add((size_t)T * C * 2), otok = lay.add(N * 4ull), oout = lay.add(NC * 2);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, owte, wteh.data(), (size_t)VOCAB * C * 2);
    device_sets_upload(sets, owpe, wpeh.data(), (size_t)T * C * 2);
    device_sets_upload(sets, otok, tok.data(), N * 4ull);
    auto launch = [&](int s) {
        bf16 *out = sets.ptr<bf16>(s, oout), *wt = sets.ptr<bf16>(s, owte), *wp = pos ? sets.ptr<bf16>(s, owpe) : nullptr;
        int32_t* tk = sets.ptr<int32_t>(s, otok);
        if (version == 1) embedding_forward_v1_kernel<<<(unsigned)ceil_div(NC, 256), 256, 0, bench->stream>>>(out, tk, wt, wp, N, T, C);
        else embedding_forward(out, tk, wt, wp, N, T, C, bench->stream);
        cudaCheck(cudaGetLastError());
    };
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<bf16> got = download(sets.ptr<bf16>(0, oout), NC);
    std::vector<double> ref(NC), wted = to_double(wte), wped = to_double(wpe);
    embedding_forward<double>(ref.data(), tok.data(), wted.data(), pos ? wped.data() : nullptr, N, T, C);
    std::string report;
    double worst = check_close("out", got, ref, tolerance(U_BF16, 2, 2.0), &report);  // a two-term sum of |x| <= 1

    double ms = bench->args.check_only ? -1.0 : time_kernel(bench->args, sets, bench->stream, launch);
    // bytes: the distinct wte rows (repeats can come from L2), the wpe rows, the tokens, the output
    std::vector<char> seen(VOCAB, 0);
    size_t unique = 0;
    for (int n = 0; n < N; n++) unique += seen[tok[n]] ? 0 : (seen[tok[n]] = 1);
    double bytes = 2.0 * unique * C + (pos ? 2.0 * T * C : 0.0) + 4.0 * N + 2.0 * NC;
    char size[64];
    snprintf(size, sizeof(size), "%dx%dx%d", B, T, C);
    bench_row(bench, "embedding_forward", pos ? "wte+wpe" : "wte", size, version, sets.count, ms, bytes, worst, report);
    device_sets_free(&sets);
}

static void run_backward(Bench* bench, int version, int B, int T, int C, bool pos, size_t size_index) {
    const int N = B * T;
    const size_t NC = (size_t)N * C;
    uint64_t seed = seed_for(pos ? "embedding_backward_wpe" : "embedding_backward", version, size_index);
    std::vector<float> dout, dwte, dwpe;
    fill_uniform(&dout, NC, seed + 1, -1.0f, 1.0f);
    fill_uniform(&dwte, (size_t)VOCAB * C, seed + 2, -1.0f, 1.0f);
    fill_uniform(&dwpe, (size_t)T * C, seed + 3, -1.0f, 1.0f);
    std::vector<bf16> douth = to_bf16(&dout), dwteh = to_bf16(&dwte), dwpeh = to_bf16(&dwpe);
    std::vector<int32_t> tok(N);
    for (int n = 0; n < N; n++) tok[n] = (int32_t)(VOCAB * std::pow(host_uniform(seed + 4, n, 0.0f, 1.0f), 4.0f)) % VOCAB;
    EmbeddingPlan plan;
    embedding_plan_build(&plan, tok.data(), N, VOCAB);

    Layout lay;
    size_t odwte = lay.add((size_t)VOCAB * C * 2), odwpe = lay.add((size_t)T * C * 2), odout = lay.add(NC * 2);
    DeviceSets sets = device_sets_alloc(lay.total);
    device_sets_upload(sets, odwte, dwteh.data(), (size_t)VOCAB * C * 2);
    device_sets_upload(sets, odwpe, dwpeh.data(), (size_t)T * C * 2);
    device_sets_upload(sets, odout, douth.data(), NC * 2);
    auto launch = [&](int s) {
        bf16 *dwt = sets.ptr<bf16>(s, odwte), *dwp = pos ? sets.ptr<bf16>(s, odwpe) : nullptr, *dout_d = sets.ptr<bf16>(s, odout);
        if (version == 1) {
            embedding_backward_v1_wte_kernel<<<(unsigned)ceil_div((size_t)plan.unique * C, 256), 256, 0, bench->stream>>>(
                dwt, dout_d, plan.d_token, plan.d_offset, plan.d_rows, plan.unique, C);
            if (dwp) embedding_backward_v1_wpe_kernel<<<(unsigned)ceil_div((size_t)T * C, 256), 256, 0, bench->stream>>>(dwp, dout_d, N, T, C);
        } else {
            embedding_backward(dwt, dwp, dout_d, plan, N, T, C, bench->stream);
        }
        cudaCheck(cudaGetLastError());
    };
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<bf16> g_dwte = download(sets.ptr<bf16>(0, odwte), (size_t)VOCAB * C), g_dwpe = download(sets.ptr<bf16>(0, odwpe), (size_t)T * C);
    // determinism: the same launch on the same inputs must give the same bits (dwte restored in between)
    device_sets_upload(sets, odwte, dwteh.data(), (size_t)VOCAB * C * 2);
    launch(0);
    cudaCheck(cudaStreamSynchronize(bench->stream));
    std::vector<bf16> again = download(sets.ptr<bf16>(0, odwte), (size_t)VOCAB * C);
    device_sets_upload(sets, odwte, dwteh.data(), (size_t)VOCAB * C * 2);

    std::vector<double> r_dwte = to_double(dwte), r_dwpe = to_double(dwpe), doutd = to_double(dout);
    embedding_backward<double>(r_dwte.data(), pos ? r_dwpe.data() : nullptr, doutd.data(), tok.data(), N, T, C);
    std::string report;
    // dwte: up to max_count rows of |dout| <= 1 summed, plus the old value; dwpe: B rows
    double worst = check_close("dwte", g_dwte, r_dwte, tolerance(U_BF16, plan.max_count, plan.max_count + 1.0), &report);
    if (pos) worst = std::max(worst, check_close("dwpe", g_dwpe, r_dwpe, tolerance(U_BF16, B, B + 1.0), &report));
    if (memcmp(again.data(), g_dwte.data(), again.size() * sizeof(bf16)) != 0) {
        report += "dwte differs between two runs on the same inputs (not deterministic); ";
        worst = INFINITY;
    }

    double ms = bench->args.check_only ? -1.0 : time_kernel(bench->args, sets, bench->stream, launch);
    // bytes: read dout once, read and write the touched dwte rows (and every dwpe row), read the plan
    double bytes = 2.0 * NC + 2.0 * 2.0 * plan.unique * C + (pos ? 2.0 * 2.0 * T * C : 0.0) + 4.0 * (2.0 * plan.unique + N);
    char size[96];
    snprintf(size, sizeof(size), "%dx%dx%d (%d distinct, max %d)", B, T, C, plan.unique, plan.max_count);
    bench_row(bench, "embedding_backward", pos ? "wte+wpe" : "wte", size, version, sets.count, ms, bytes, worst, report);
    embedding_plan_free(&plan);
    device_sets_free(&sets);
}

int main(int argc, char** argv) {
    Args a = parse_args(argc, argv,
                        "  Token (+ position) embedding forward and deterministic backward, bf16, vocabulary 50304.\n"
                        "  Versions: 1 scalar, 2 llmc/embedding.cuh (128-bit access; backward by token buckets).\n",
                        "BxTxC (batch x sequence x channels, C a multiple of 8)", "8x2048x2048,8x2048x4096", 3, 2);
    for (const std::vector<long>& s : a.sizes)
        if (s[2] % 8 != 0 || s[0] * s[1] * s[2] > (1l << 31) || (long)VOCAB * s[2] > (1l << 31))
            die("--sizes: %ldx%ldx%ld: C must be a multiple of 8 and B*T*C, 50304*C at most 2^31", s[0], s[1], s[2]);
    Bench bench = bench_start(a, "embedding");
    for (size_t si = 0; si < a.sizes.size(); si++) {
        int B = (int)a.sizes[si][0], T = (int)a.sizes[si][1], C = (int)a.sizes[si][2];
        for (int pos = 1; pos >= 0; pos--) {
            for (int v = 1; v <= 2; v++)
                if (a.version == 0 || a.version == v) run_forward(&bench, v, B, T, C, pos, si);
            for (int v = 1; v <= 2; v++)
                if (a.version == 0 || a.version == v) run_backward(&bench, v, B, T, C, pos, si);
        }
    }
    return bench_finish(&bench);
}
