// test_gpt.cu: checks of the CUDA trainer on a GPU, against the PyTorch reference states that
// train_gpt.py --ref writes (tests/t_gpu.sh makes them with shapes the kernels take: head dim 64,
// T a multiple of 64).
//   test_gpt ref FILE...   per reference state:
//     logits and loss of the first micro-batch; every gradient; the vocabulary padding rows' zero
//     gradient; --recompute act, selective and full against none (same loss, same gradients, less memory), and
//     under each the memory estimate equal to the bytes allocated, and the plan's (--plan) to them plus the reserve;
//     GELU models: --gelu-fusion on against the reference and the unfused run, in each recompute mode, and (emulation)
//     its fallback bitwise the unfused run (test_gelu_fusion); gradient accumulation against the sum of the micro-batches' gradients (test_accumulation); the
//     optimizer alone, two AdamW steps per element against PyTorch's in float64 (test_optimizer); the
//     reference's AdamW steps (losses, gradient norms, learning rates, the weight update per tensor);
//     bitwise determinism of two runs; bit-exact resume from a checkpoint written half-way; ZeRO 1, 2 and 3 on one
//     GPU (the data-parallel code at dp 1: fp32 bucket gradients, the norm over ranges, the sharded AdamW table,
//     ZeRO 2's cast buffers and ZeRO 3's gather buffers on the group's stream): the reference's losses, each level's
//     memory estimate equal to its allocation, and the three levels bitwise identical to each other.
// Each check prints "[PASS] name" or "[FAIL] name: detail"; the exit status is 1 on any failure.
//
// Tolerances, derived from bf16 (8 significant bits, unit roundoff u = 2^-8: a rounding to nearest moves a
// value by at most half a unit in the last place, 2^-8 of it just above a power of two). The fp16 build keeps 11
// significant bits: the same bounds with u = 2^-11 (U16 below), since this model's activations and the largest
// gradient of every tensor stay inside fp16's normal range (2^-14 to 65504; a gradient below it loses bits, but
// against its tensor's largest element that is under u). The reference is fp32 PyTorch; this model rounds its weights to bf16 and rounds activations at
// every stored tensor: the embedding sum, then per layer the ln1 output, qkv (and RoPE), the attention
// output, the projection and residual, ln2, fc1, the activation, fc2 and residual (about 5 roundings on a
// path through a layer that each carry an error of at most u of their tensor's scale, the
// matmuls accumulating in fp32), then lnf and the logits. Adding the bounds linearly:
//   logits:     max |ours - ref| <= (3 + 5L) * u * max |ref|          (L = 2 here, bf16: 13 * 2^-8 = 0.051)
//   loss:       |ours - ref| <= 2 * max |logit error|  (d loss / d logit_i sums to at most 2 in absolute
//               value over a row: softmax - onehot), so <= 2 * tol_logits * max |ref logits|
//   gradients:  the backward repeats the forward's path in reverse and rounds once more per stage
//               (dres, dln, datty, dqkv, dfc1, dact), and the weight gradients are accumulated in bf16:
//               twice the logits bound, per Hugging Face tensor relative to its max |ref|
//   step losses: the loss bound, doubled for the drift of 10 AdamW steps on bf16-rounded weights,
//               relative to the loss; gradient norms: the gradient bound, relative
//   weight update: per tensor (matrices, biases, norm weights; key biases without RoPE left out, see
//               tests/ref_state.h) ||(final - init) - (ref final - init)|| / ||ref final - init||. AdamW's step
//               m^ / sqrt(v^) is a ratio of an element's gradient history, so a relative error e of the
//               gradients moves it by about 2e (e through m, e through sqrt v); the gradients are within the
//               gradient bound, and the weights that drift over the 10 steps feed back into the gradients
//               about as much again: 4 * tol_grad (0.41 at L = 2). Elements whose gradient is within its error
//               of zero can step the other way and are not covered by that argument; they are few and later
//               steps average them (observed 0.005-0.039 per tensor). A worst-case bound this wide is coarse: an
//               applied learning rate off by 40% scores about 0.44 on every tensor, barely above it, and the
//               optimizer's details (weight decay and which tensors get it, beta2, clipping) change 10 steps
//               too little to show here: test_optimizer checks
//               them per element against PyTorch, the same in both builds (its comment derives the bound).
//   accumulation: per tensor, within 2 n u of the micro-batches' summed maxima (test_accumulation).
// These are bounds a correct implementation stays well inside; llm.c's check of its GPT-2 logits
// allowed an absolute 25.0 on logits of order 100 (0.25 relative), five times looser.
//
// The fp32 build (make test_gpt_fp32: PRECISION=FP32) stores every tensor in fp32, so the roundings
// above shrink by 2^16 and what is left is summation order (cuBLASLt's split-K and tiles, warp trees)
// and the fast-math intrinsics (__expf, rsqrtf: 2 ulp). The CPU trainer, another fp32 implementation
// with its own summation order, stays within 1e-5 of the same reference states (tests/t_reference.sh);
// the fp32 build is allowed ten times that on the logits, tol_logits = 1e-4, and the same chain of
// factors from there (gradients 2e-4, loss 2e-4 of the largest logit, steps 4e-4 of it, the weight update
// per tensor 8e-4): about 500 times tighter than bf16 (the CPU trainer's whole update: 1e-3, observed 4e-5 at most).
#define TESTING
#include "train_gpt.cu"

#include "tests/check.h"
#include "tests/ref_state.h"

// floatX's unit roundoff in the 16-bit builds (the fp32 build's tolerances are set apart, by summation order)
#ifdef ENABLE_FP16
static const double U16 = 1.0 / 2048;
#else
static const double U16 = 1.0 / 256;
#endif

static Comms g_one_rank;  // every group of one rank, for the ZeRO levels on one GPU (main makes them)

// The memory estimate train_gpt prints before it allocates (estimate_memory) is what gpt_build then allocates,
// byte for byte, under the model's recompute mode: both read the buffer table.
static void check_estimate(const GPT& g, const std::string& tag) {
    const MemoryEstimate e = estimate_memory(g.cfg, g.B, g.T, g.recompute, g.bf16_moments, g.L);
    check(e.allocations() == g.mem.allocated, tag + " --recompute " + recompute_name(g.recompute) +
          ": the memory estimate is the allocation", "estimate %.0f vs allocated %.0f bytes", e.allocations(), g.mem.allocated);
    // --plan and the layout planner (llmc/parallel/planner.h through cuda_plan_bytes) see the same bytes: the plan of this
    // layout peaks at the allocation plus the reserve, to the byte
    TrainConfig tc;
    tc.B = g.B; tc.T = g.T; tc.dp = g.L.topo.dp; tc.zero = g.L.zero;
    tc.total_batch = (long)g.B * g.T * g.L.topo.dp;
    const Plan p = plan_make(g.cfg, tc, g.L.topo.dp, (int)g.recompute, PLAN_COMM, plan_hardware(tc),
                             cuda_plan_bytes_fn(g.bf16_moments), false);
    check(p.err.empty() && p.peak == g.mem.allocated + MEMORY_RESERVE_BYTES, tag + " --recompute " +
          recompute_name(g.recompute) + ": the plan's bytes are the allocation plus the reserve",
          "plan %.0f vs allocated %.0f + reserve %.0f bytes%s%s", p.peak, g.mem.allocated, MEMORY_RESERVE_BYTES,
          p.err.empty() ? "" : ": ", p.err.c_str());
}

static std::vector<float> download_floatX(const floatX* d, size_t n) {
    std::vector<floatX> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = to_float(h[i]);
    return f;
}

// The gradients of one micro-batch (loss scale 1) at the current weights, head gradient folded in.
static std::vector<float> micro_batch_grads(GPT* g, const int32_t* in, const int32_t* tg) {
    gpt_zero_grad(g);
    gpt_forward(g, in, tg);
    gpt_backward(g, in, 1.0);
    gpt_fold_head_grad(g);
    cudaCheck(cudaStreamSynchronize(g->stream));
    return download_floatX(g->grads, g->table.total);
}

// Steps [s0, s1) of the reference's training run; losses and norms appended.
static void run_steps(GPT* g, const RefState& ref, int s0, int s1, std::vector<double>* losses,
                      std::vector<double>* norms, std::vector<double>* lrs) {
    const TrainConfig& tc = ref.tc;
    for (int s = s0; s < s1; s++) {
        std::vector<std::vector<int32_t>> in, tg;
        ref_step_batches(ref, s, &in, &tg);
        double lr = lr_at(s, ref.S, tc.warmup, tc.lr, tc.min_lr, tc.schedule, tc.decay_frac);
        double norm = 0;
        GuardVerdict verdict;
        double loss = train_step(g, in, tg, s, tc, lr, TrainState(), TestCorrupt(), &norm, &verdict);
        losses->push_back(loss);
        norms->push_back(norm);
        if (lrs) lrs->push_back(lr);
    }
}

static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The optimizer alone against PyTorch's AdamW in float64 (train_gpt.py optimizer_ref, ref.opt.*): from the
// initial weights and zero moments, gpt_update on the reference's bf16 gradients ref.opt.grad1 (step 1, norm
// 2 * clip: clipped) and ref.opt.grad2 (step 2, norm clip / 2: not clipped) at the schedule's learning rates
// of steps 1 and 2; (final - init) compared per element with ref.opt.update. Both sides see the same gradient
// values (bf16 numbers, exact in either build), so what is left is the fp32 arithmetic of the update, the
// same in both builds: per step, p * (1 - lr wd) and p - u each round once (2^-24 |p| each), and the step
// u = lr/bc1 * m / (sqrt(v) / sqrt(bc2) + eps) goes through about ten fp32 roundings and fast-math sqrt and
// division (2 ulp each), with a clip coefficient from an fp32 norm (relative error well under 2^-20; it
// moves step 2 through m's mix of the two gradients): an error under 2^-18 |u|. And |u| <= lr (step 1:
// exactly lr |g| / (|g| + eps); step 2: |m^| / sqrt(v^) <= 1.01 for beta1 0.9, beta2 0.95, by Cauchy-Schwarz).
// Hence per element
//   |(ours - init) - ref update| <= 2^-22 (|init| + |final|) + 2^-18 (lr_1 + lr_2).
// What that bound separates: weight decay moves a weight by lr wd |p| per step, 1e-4 |p| at lr 1e-3 and
// wd 0.1, 400 times 2^-22 |p| (so no decay, 10x decay, decay of the norm weights of value 1 stand out);
// beta2 enters from step 2 (v^ = (beta2 g1^2 + g2^2) / (1 + beta2)), changing u by ~1e-3 lr for 0.999 vs 0.95;
// without clipping step 1's gradient weighs twice as much in step 2's m; a scaled lr scales u.
static void test_optimizer(GPT* g, const RefState& ref, const ParamTable& table, const std::vector<float>& init,
                           const std::string& tag) {
    const TrainConfig& tc = ref.tc;
    std::vector<float> grad(table.total), want(table.total), fin;
    std::vector<floatX> gx(table.total);
    std::vector<char> skip(table.total, 0);  // elements whose gradient floatX cannot hold (fp16, below)
    size_t inexact = 0;
    bool tiny = true;
    gpt_set_weights(g, init.data(), nullptr, nullptr);
    double lr_sum = 0;
    for (int s = 0; s < 2; s++) {
        hf_read_tensors(&ref.st, table, s == 0 ? "ref.opt.grad1." : "ref.opt.grad2.", grad.data());
        // the fp16 build: the gradients scaled by a power of two that puts the largest at 2^14 or just under, as a
        // loss scale would, and unscaled by the norm's pass (llmc/grad_clip.h). A scaled bf16 value is then an fp16
        // number unless it lies below 2^-17 (fp16's subnormals keep fewer than 8 significant bits): those few
        // elements (round-off of gradients that are zero in exact arithmetic, like the key biases') see another
        // gradient than PyTorch did and are left out of the comparison.
        double scale = 1.0;
#ifdef ENABLE_FP16
        float mx = 0;
        for (size_t i = 0; i < table.total; i++) mx = std::max(mx, std::fabs(grad[i]));
        scale = std::ldexp(1.0, 14 - (int)std::ceil(std::log2((double)mx)));
#endif
        for (size_t i = 0; i < table.total; i++) {
            gx[i] = to_floatX((float)(grad[i] * scale));
            if (to_float(gx[i]) != (float)(grad[i] * scale)) {
                inexact += !skip[i];
                skip[i] = 1;
                tiny = tiny && std::fabs(grad[i] * scale) < std::ldexp(1.0, -17);
            }
        }
        // the reference's gradients are the whole step's: no head gradient joins them (gpt_zero_grad leaves head_grad
        // to the classifier's first write)
        cudaCheck(cudaMemcpy(g->grads, gx.data(), table.total * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(g->head_grad, 0, (size_t)g->Vpl * g->cfg.n_embd * sizeof(float)));
        const double lr = lr_at(s, ref.S, tc.warmup, tc.lr, tc.min_lr, tc.schedule, tc.decay_frac);
        lr_sum += lr;
        gpt_grad_norm(g, tc, scale);
        gpt_update(g, s + 1, lr, tc);
    }
    gpt_get_weights(g, &fin, nullptr, nullptr);
    hf_read_tensors(&ref.st, table, "ref.opt.update.", want.data());
    double worst = 0;
    std::string worst_name;
    for (const ParamSpec& sp : table.specs) {
        double r = 0;
        for (size_t i = sp.offset; i < sp.offset + sp.numel(); i++) {
            if (skip[i]) continue;
            const double err = std::fabs(((double)fin[i] - init[i]) - want[i]);
            const double tol = std::ldexp(std::fabs(init[i]) + std::fabs(fin[i]), -22) + std::ldexp(lr_sum, -18);
            r = std::isfinite(err) ? std::max(r, err / tol) : INFINITY;
        }
        if (!(r <= worst)) { worst = r; worst_name = sp.name; }
    }
    check(worst <= 1.0, tag + " AdamW: 2 steps per element vs PyTorch float64", "%s: error %.3g times the bound",
          worst_name.c_str(), worst);
    check(tiny, tag + " AdamW: the gradients floatX cannot hold are below 2^-17 scaled", "a larger one is inexact");
    printf("  AdamW 2 steps: worst error %.3g of the bound (%s)", worst, worst_name.c_str());
    if (inexact) printf("; %zu of %zu elements left out (gradient below fp16's precision)", inexact, table.total);
    printf("\n");
}

// Gradient accumulation: the gradient of several micro-batches accumulated into the buffers (what train_step
// does, loss scale 1 here) against the sum of each micro-batch's gradient computed alone, per tensor relative
// to the sum's largest element. The micro-batches of step 0 (of steps 0 and 1 when the reference has accum 1).
// The same kernels run on the same inputs; what differs is where the results round. Accumulated, each
// micro-batch rounds acc + g_a once (u |acc + g_a| <= u sum_a max |g_a|; a rounding moves x by at most u |x|,
// u = U16: 2^-8 in bf16, 2^-11 in fp16), alone each g_a
// rounds once (u max |g_a|): with n micro-batches, |acc - sum| <= 2 n u sum_a max |g_a|. In fp32 u is 2^-24,
// and a cuBLASLt algorithm that differs between accumulating and overwriting may reorder the fp32 sums: the fp32
// build allows u = 5e-5 (half its logits tolerance, which is set by summation order).
static void test_accumulation(GPT* g, const RefState& ref, const ParamTable& table, const std::vector<float>& init,
                              const std::string& tag) {
    std::vector<std::vector<int32_t>> in, tg, in1, tg1;
    ref_step_batches(ref, 0, &in, &tg);
    if (in.size() < 2) {
        ref_step_batches(ref, 1, &in1, &tg1);
        in.push_back(in1[0]);
        tg.push_back(tg1[0]);
    }
    const int n = (int)in.size();
    gpt_set_weights(g, init.data(), nullptr, nullptr);
    std::vector<double> sum(table.total, 0.0), max_sum(table.specs.size(), 0.0);
    for (int a = 0; a < n; a++) {
        const std::vector<float> ga = micro_batch_grads(g, in[a].data(), tg[a].data());
        for (size_t k = 0; k < table.specs.size(); k++) {
            const ParamSpec& s = table.specs[k];
            double mx = 0;
            for (size_t i = s.offset; i < s.offset + s.numel(); i++) {
                sum[i] += ga[i];
                mx = std::max(mx, (double)std::fabs(ga[i]));
            }
            max_sum[k] += mx;
        }
    }
    gpt_zero_grad(g);
    for (int a = 0; a < n; a++) {
        gpt_forward(g, in[a].data(), tg[a].data());
        gpt_backward(g, in[a].data(), 1.0);
    }
    gpt_fold_head_grad(g);
    cudaCheck(cudaStreamSynchronize(g->stream));
    const std::vector<float> acc = download_floatX(g->grads, table.total);
#ifdef ENABLE_FP32
    const double u = 5e-5;
#else
    const double u = U16;
#endif
    double worst = 0;
    std::string worst_name;
    for (size_t k = 0; k < table.specs.size(); k++) {
        const ParamSpec& s = table.specs[k];
        double md = 0, ms = 0;
        for (size_t i = s.offset; i < s.offset + s.numel(); i++) {
            const double d = std::fabs(acc[i] - sum[i]);
            md = std::isfinite(d) ? std::max(md, d) : INFINITY;
            ms = std::max(ms, std::fabs(sum[i]));
        }
        if (ms == 0) continue;  // a tensor with no gradient in these micro-batches (none in the test cases)
        const double r = (md / ms) / (2.0 * n * u * max_sum[k] / ms);
        if (!(r <= worst)) { worst = r; worst_name = s.name; }
    }
    check(worst <= 1.0, tag + " gradient accumulation: per tensor the sum of the micro-batches' gradients",
          "%s: error %.3g times the bound", worst_name.c_str(), worst);
    printf("  accumulation over %d micro-batches: worst error %.3g of the bound (%s)\n", n, worst, worst_name.c_str());
}

// The worst relative difference of two gradient buffers over the parameter table's tensors, each against its own
// scale (the second buffer's largest value).
static double worst_tensor_diff(const ParamTable& table, const std::vector<float>& a, const std::vector<float>& b) {
    double w = 0;
    for (const ParamSpec& s : table.specs) w = max_err(w, rel_err(a.data() + s.offset, b.data() + s.offset, s.numel()));
    return w;
}

// --gelu-fusion on (GELU models; llmc/matmul.cuh's header): the first micro-batch again with GELU in fc1's and fc2's
// cuBLASLt epilogues, against the unfused run of the same model (loss0, grads0) and the reference's loss.
// Tolerance between the two (u = U16): the runs differ only where the epilogue rounds. The fused act is gelu of
// the fp32 pre-activation rounded once; the unfused one gelu of fc1 rounded, then rounded: gelu's slope is at most 1.13,
// so they are up to about 2u of act apart. The fused dfc1 is the fp32 product times gelu', rounded once; the unfused
// one rounds dact first: one u more. In the header's chain that is 2 of the (3 + 5L) roundings of a layer's forward
// path: logits within 2L u of max |logit|, the loss within twice that times max |logit|, and the gradients within
// twice the logits' figure plus the backward's one rounding per layer, (4L + L) u per tensor against its own scale.
// The fp32 build: its tol_logits (the two GELU formulas in fp32 differ by a few ulps), the gradients twice that.
//   1. recompute none: the epilogues run (the emulation has an algorithm for them; on a GPU where cuBLASLt has none,
//      the run must be the unfused one bit for bit instead); the loss against the reference as unfused; loss and
//      gradients within the tolerance above of the unfused run and, in the emulation, not all bitwise equal to it;
//   2. recompute full: the loss bitwise 1.'s (the fused forward recomputed), the gradients within u of 1.'s;
//      recompute act and selective: the forward unfused by design (train_gpt.cu gelu_fused_forward), so the loss
//      bitwise the unfused run's, the gradients (the backward fused) within the tolerance of 1.'s;
//   3. emulation only: EMU_LT_NO_ALGO=GELU_AUX_BIAS,DGELU_BGRAD: cuBLASLt has no algorithm, the trainer falls back to
//      the unfused path: loss and gradients bitwise the unfused run's, each epilogue noted once.
static void test_gelu_fusion(const ModelConfig& c, int B, int T, float wd, const std::vector<float>& init,
                             const int32_t* in, const int32_t* tg, double loss0, const std::vector<float>& grads0,
                             double ref_loss, double max_logit, double tol_logits, const std::string& tag) {
#ifdef ENABLE_FP32
    const double tol_f_logits = tol_logits, tol_f_grad = 2.0 * tol_logits;
#else
    (void)tol_logits;
    const double tol_f_logits = 2.0 * c.n_layer * U16, tol_f_grad = 5.0 * c.n_layer * U16;
#endif
    const double tol_f_loss = 2.0 * tol_f_logits * max_logit, tol_loss = 2.0 * tol_logits * max_logit;
    const std::string name = tag + " --gelu-fusion on";
    struct Run { double loss; std::vector<float> grads; size_t fallbacks; };
    auto run = [&](Recompute r) {
        GPT h;
        gpt_build(&h, c, B, T, r, false, wd);
        h.gelu_fusion = true;
        gpt_set_weights(&h, init.data(), nullptr, nullptr);
        Run x;
        x.grads = micro_batch_grads(&h, in, tg);
        x.loss = h.io.loss;
        x.fallbacks = h.mm.gelu_fallbacks.size();
        gpt_free(&h);
        return x;
    };
    const ParamTable table = build_param_table(c);

    // 1. recompute none
    const Run f = run(RECOMPUTE_NONE);
    const double dl = std::fabs(f.loss - loss0), dg = worst_tensor_diff(table, f.grads, grads0);
    check(std::fabs(f.loss - ref_loss) <= tol_loss, name + ": loss", "ours %.7f ref %.7f, |diff| %.3g > %.3g", f.loss,
          ref_loss, std::fabs(f.loss - ref_loss), tol_loss);
    if (f.fallbacks > 0) {  // a GPU's cuBLASLt without the epilogues at these shapes: the unfused path
        printf("  --gelu-fusion on: cuBLASLt has no algorithm with %zu of the GELU epilogues here: the unfused path\n",
               f.fallbacks);
        check(f.loss == loss0 && f.grads == grads0, name + " without the epilogues is the unfused run bit for bit",
              "loss %.9g vs %.9g, gradients worst rel diff %.3g", f.loss, loss0, dg);
    } else {
        check(dl <= tol_f_loss, name + ": loss within the fusion's tolerance of unfused", "|diff| %.3g > %.3g", dl, tol_f_loss);
        check(dg <= tol_f_grad, name + ": gradients within the fusion's tolerance of unfused", "worst rel diff %.3g > %.3g",
              dg, tol_f_grad);
#ifdef CUDA_EMU
        check(f.loss != loss0 || f.grads != grads0, name + ": the epilogues ran (the results are not the unfused ones)");
#endif
    }
#ifdef CUDA_EMU
    check(f.fallbacks == 0, name + ": the emulated cuBLASLt has the GELU epilogues", "%zu noted without", f.fallbacks);
#endif
    printf("  --gelu-fusion on: loss %.7f vs unfused %.7f, |diff| %.3g (tolerance %.3g); gradients worst rel diff %.3g "
           "(tolerance %.3g)\n", f.loss, loss0, dl, tol_f_loss, dg, tol_f_grad);

    // 2. the recompute modes, each consistent with itself
    const Run full = run(RECOMPUTE_FULL);
    const double d_full = worst_tensor_diff(table, full.grads, f.grads);
    check(full.loss == f.loss, name + " --recompute full: loss bitwise that of none", "%.9g vs %.9g", full.loss, f.loss);
    check(d_full <= U16, name + " --recompute full: gradients match none", "worst rel diff %.3g > u %.3g", d_full, U16);
    double d_part[2];
    for (Recompute r : {RECOMPUTE_ACT, RECOMPUTE_SELECTIVE}) {
        const Run x = run(r);
        const std::string m = name + " --recompute " + recompute_name(r);
        const double d = d_part[r == RECOMPUTE_SELECTIVE] = worst_tensor_diff(table, x.grads, f.grads);
        check(x.loss == loss0, m + ": loss bitwise the unfused run's (its forward is unfused)", "%.9g vs %.9g", x.loss, loss0);
        check(d <= tol_f_grad, m + ": gradients within the fusion's tolerance of none", "worst rel diff %.3g > %.3g", d,
              tol_f_grad);
    }
    printf("  --gelu-fusion on, --recompute full / act / selective: gradients rel diff %.3g / %.3g / %.3g from none\n",
           d_full, d_part[0], d_part[1]);

#ifdef CUDA_EMU
    // 3. no algorithm with the GELU epilogues: the fallback is the unfused path
    setenv("EMU_LT_NO_ALGO", "GELU_AUX_BIAS,DGELU_BGRAD", 1);
    const Run fb = run(RECOMPUTE_NONE);
    unsetenv("EMU_LT_NO_ALGO");
    check(fb.loss == loss0 && fb.grads == grads0,
          name + " with EMU_LT_NO_ALGO=GELU_AUX_BIAS,DGELU_BGRAD falls back to the unfused run bit for bit",
          "loss %.9g vs %.9g, gradients worst rel diff %.3g", fb.loss, loss0, worst_tensor_diff(table, fb.grads, grads0));
    check(fb.fallbacks == 2, name + " without the epilogues notes each once", "%zu noted", fb.fallbacks);
#endif
}

static void test_reference(const char* path, bool core) {
    RefState ref;
    ref_state_open(&ref, path);
    const SafeTensors& st = ref.st;
    const ModelConfig& c = ref.c;
    const TrainConfig& tc = ref.tc;
    const std::string tag = ref.tag + "_" + PRECISION_NAME;  // the case and the build (bf16 or fp32)
    const int B = ref.B, T = ref.T, A = ref.A, S = ref.S;
    const std::vector<int32_t>& inputs = ref.inputs;
    const std::vector<int32_t>& targets = ref.targets;

#ifdef ENABLE_FP32
    const double tol_logits = 1e-4;
#else
    const double tol_logits = (3.0 + 5.0 * c.n_layer) * U16;
#endif
    const double tol_grad = 2.0 * tol_logits;
    printf("%s: L=%d C=%d H=%d KV=%d hd=%d B=%d T=%d accum=%d steps=%d; tolerances logits %.3g, gradients %.3g\n",
           tag.c_str(), c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, B, T, A, S, tol_logits, tol_grad);

    ParamTable table = build_param_table(c);
    std::vector<float> init(table.total, 0.0f);
    hf_read_tensors(&st, table, "", init.data());
    const int N = B * T, V = c.vocab_size, Vp = c.padded_vocab;

    GPT g;
    gpt_build(&g, c, B, T, RECOMPUTE_NONE, false, (float)tc.weight_decay);
    g.docs = tc.docs;  // train_gpt.py --eod-token: packed documents
    gpt_set_weights(&g, init.data(), nullptr, nullptr);
    check_estimate(g, tag);

    // logits and loss of the first micro-batch
    gpt_forward(&g, inputs.data(), targets.data());
    std::vector<float> logits((size_t)N * V), ref_logits((size_t)N * V);
    for (int r0 = 0; r0 < N; r0 += g.scratch.cls_panel) {
        const int rows = std::min(g.scratch.cls_panel, N - r0);
        gpt_logits(&g, r0, rows);
        std::vector<float> panel = download_floatX(g.scratch.logits, (size_t)rows * Vp);
        for (int n = 0; n < rows; n++)
            for (int v = 0; v < V; v++) logits[(size_t)(r0 + n) * V + v] = panel[(size_t)n * Vp + v];
    }
    st_read_f32(&st, st_require(&st, "ref.logits", (int64_t)ref_logits.size()), ref_logits.data());
    double e = rel_err(logits.data(), ref_logits.data(), logits.size());
    check(e < tol_logits, tag + " logits", "relative error %.3g >= %.3g", e, tol_logits);
    printf("  logits rel err %.3g (tolerance %.3g)\n", e, tol_logits);
    double max_logit = 0;
    for (float x : ref_logits) max_logit = std::max(max_logit, (double)std::fabs(x));
    float ref_loss;
    st_read_f32(&st, st_require(&st, "ref.loss", 1), &ref_loss);
    const double loss = gpt_loss(&g), tol_loss = 2.0 * tol_logits * max_logit;
    check(std::fabs(loss - ref_loss) <= tol_loss, tag + " loss", "ours %.7f ref %.7f, |diff| %.3g > %.3g", loss, ref_loss,
          std::fabs(loss - ref_loss), tol_loss);
    printf("  loss ours %.7f ref %.7f |diff| %.3g (tolerance %.3g)\n", loss, ref_loss, std::fabs(loss - ref_loss), tol_loss);

    // every gradient, per Hugging Face tensor (q, k and v apart where the reference names them apart, so a
    // wrong query or key gradient is not hidden under the larger value gradient), against its own scale;
    // a key bias without RoPE (tests/ref_state.h key_bias_mask: its exact gradient is zero) is left out
    const std::vector<float> grads = micro_batch_grads(&g, inputs.data(), targets.data());
    const std::vector<bool> kbias = key_bias_mask(c, table);
    double worst = 0;
    std::string worst_name;
    for (const ParamSpec& s : table.specs) {
        for (const HfPiece& p : s.hf) {
            if (kbias[s.offset + (size_t)p.row0 * s.cols] && kbias[s.offset + (size_t)(p.row0 + p.rows) * s.cols - 1])
                continue;
            const StTensor* rt = st_require(&st, "ref.grad." + p.name, p.rows * s.cols);
            std::vector<float> r((size_t)rt->numel()), o((size_t)rt->numel());
            st_read_f32(&st, rt, r.data());
            hf_pack(grads.data() + s.offset, p.row0, p.rows, s.cols, p.transpose, o.data());
            double ge = rel_err(o.data(), r.data(), o.size());
            if (ge >= worst) { worst = ge; worst_name = p.name; }
        }
    }
    check(worst < tol_grad, tag + " gradients (all tensors)", "worst %s rel err %.3g >= %.3g", worst_name.c_str(), worst,
          tol_grad);
    printf("  gradients: worst rel err %.3g (%s)\n", worst, worst_name.c_str());
    bool pad_zero = true;
    for (int idx : {table.wte, table.lm_head}) {
        if (idx < 0) continue;
        const ParamSpec& s = table.specs[idx];
        for (size_t i = (size_t)(s.live_rows * s.cols); i < s.numel(); i++) pad_zero &= grads[s.offset + i] == 0.0f;
    }
    check(pad_zero, tag + " vocab padding rows get zero gradient");

    // recompute: the recomputed layers are the same kernels on the same inputs and no kernel uses float
    // atomics, so the loss and the gradients should come out bitwise the same; the gradients are allowed
    // one rounding (u) so that a cuBLASLt algorithm choice that differs with the workspace state
    // does not fail the check, and the loss must be bitwise equal. Each mode keeps less than the one before it.
    double before = g.mem.allocated;
    const char* before_name = "none";
    for (Recompute r : {RECOMPUTE_ACT, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL}) {
        GPT h;
        gpt_build(&h, c, B, T, r, false, (float)tc.weight_decay);
        h.docs = tc.docs;
        gpt_set_weights(&h, init.data(), nullptr, nullptr);
        const std::vector<float> hg = micro_batch_grads(&h, inputs.data(), targets.data());
        const std::string name = tag + " --recompute " + recompute_name(r);
        check(h.io.loss == g.io.loss, name + " loss is bitwise that of none", "%.9g vs %.9g", h.io.loss, g.io.loss);
        double rw = 0;
        for (const ParamSpec& s : table.specs)
            rw = std::max(rw, rel_err(hg.data() + s.offset, grads.data() + s.offset, s.numel()));
        check(rw <= U16, name + " gradients match none", "worst rel diff %.3g > u %.3g", rw, U16);
        check(h.mem.allocated < before, name + " allocates less than " + before_name, "%.0f vs %.0f bytes",
              h.mem.allocated, before);
        before = h.mem.allocated, before_name = recompute_name(r);
        check_estimate(h, tag);
        printf("  --recompute %s: %.2f MiB allocated vs %.2f MiB (none); gradients rel diff %.3g\n", recompute_name(r),
               h.mem.allocated / 1048576.0, g.mem.allocated / 1048576.0, rw);
        gpt_free(&h);
    }
    if (c.mlp == MLP_GELU && !tc.docs.any())  // (the fusion is the same with documents: checked without them)
        test_gelu_fusion(c, B, T, (float)tc.weight_decay, init, inputs.data(), targets.data(), g.io.loss, grads, ref_loss,
                         max_logit, tol_logits, tag);

    test_accumulation(&g, ref, table, init, tag);
    test_optimizer(&g, ref, table, init, tag);

    // the reference's AdamW steps with accumulation, clipping and the schedule
    std::vector<float> ref_losses(S), ref_norms(S), ref_lrs(S);
    st_read_f32(&st, st_require(&st, "ref.losses", S), ref_losses.data());
    st_read_f32(&st, st_require(&st, "ref.grad_norms", S), ref_norms.data());
    st_read_f32(&st, st_require(&st, "ref.lrs", S), ref_lrs.data());
    std::vector<double> losses, norms, lrs;
    gpt_set_weights(&g, init.data(), nullptr, nullptr);
    run_steps(&g, ref, 0, S, &losses, &norms, &lrs);
    const double tol_train = 2.0 * tol_loss / std::fabs(ref_loss);
    double worst_loss = 0, worst_norm = 0, worst_lr = 0;
    for (int s = 0; s < S; s++) {
        worst_loss = max_err(worst_loss, scalar_rel_err(losses[s], ref_losses[s]));
        worst_norm = max_err(worst_norm, scalar_rel_err(norms[s], ref_norms[s]));
        worst_lr = max_err(worst_lr, scalar_rel_err(lrs[s], ref_lrs[s]));
        printf("  step %2d loss ours %.6f ref %.6f | norm ours %.5f ref %.5f | lr %.4e\n", s + 1, losses[s], ref_losses[s],
               norms[s], ref_norms[s], lrs[s]);
    }
    check(worst_lr < 1e-6, tag + " lr schedule matches", "rel err %.3g", worst_lr);
    check(worst_loss < tol_train, tag + " training losses", "worst rel err %.3g >= %.3g", worst_loss, tol_train);
    check(worst_norm < tol_grad, tag + " gradient norms", "worst rel err %.3g >= %.3g", worst_norm, tol_grad);
    std::vector<float> final_a;
    gpt_get_weights(&g, &final_a, nullptr, nullptr);
    // the 10-step update per tensor: matrices, biases and norm weights (key biases without RoPE left out)
    const double tol_update = 4.0 * tol_grad;
    std::vector<double> num, den;
    update_err_parts(ref, table, init.data(), final_a.data(), &num, &den);
    double worst_update = 0;
    std::string worst_tensor;
    for (size_t k = 0; k < table.specs.size(); k++) {
        if (den[k] == 0) continue;  // every element masked
        const double e = std::sqrt(num[k] / den[k]);
        if (!(e <= worst_update)) { worst_update = e; worst_tensor = table.specs[k].name; }
    }
    check(worst_update < tol_update, tag + " 10-step weight update per tensor", "%s: relative L2 error %.3g >= %.3g",
          worst_tensor.c_str(), worst_update, tol_update);
    printf("  weight update: worst tensor %s relative L2 error %.3g (tolerance %.3g); all tensors together %.3g\n",
           worst_tensor.c_str(), worst_update, tol_update, update_rel_err(ref, table, init.data(), final_a.data()));

    // bitwise determinism: the same run again from the same weights
    std::vector<double> losses_b, norms_b;
    gpt_set_weights(&g, init.data(), nullptr, nullptr);
    run_steps(&g, ref, 0, S, &losses_b, &norms_b, nullptr);
    std::vector<float> final_b;
    gpt_get_weights(&g, &final_b, nullptr, nullptr);
    check(losses_b == losses && norms_b == norms && same_bits(final_a, final_b), tag + " two runs are bitwise identical",
          "losses %s, norms %s, weights %s", losses_b == losses ? "same" : "differ", norms_b == norms ? "same" : "differ",
          same_bits(final_a, final_b) ? "same" : "differ");

    // --core: the checks above only; the resume and the ZeRO levels below exercise no kernel the checks above have not
    if (core) {
        gpt_free(&g);
        return;
    }
    // bit-exact resume: a checkpoint after half the steps, loaded into a fresh model, finishes the run
    // with the same losses and the same weights and moments as the uninterrupted run
    const int half = S / 2;
    const std::string dir = "build/t_gpu/ckpt_" + tag;
    std::error_code ec;
    fs::remove_all(dir, ec);
    std::vector<double> l1, n1, l2, n2;
    TrainState state;
    gpt_set_weights(&g, init.data(), nullptr, nullptr);
    run_steps(&g, ref, 0, half, &l1, &n1, nullptr);
    state.step = half;
    {
        std::vector<float> p, m, v;
        gpt_get_weights(&g, &p, &m, &v);
        checkpoint_save_whole(dir, c, table, p.data(), m.data(), v.data(), state, 1);
    }
    run_steps(&g, ref, half, S, &l1, &n1, nullptr);
    std::vector<float> pa, ma, va;
    gpt_get_weights(&g, &pa, &ma, &va);
    gpt_free(&g);
    GPT r;
    gpt_build(&r, c, B, T, RECOMPUTE_NONE, false, (float)tc.weight_decay);
    {
        std::vector<float> p(table.total), m(table.total), v(table.total);
        TrainState rs;
        checkpoint_load_whole(checkpoint_resolve("auto", dir), c, table, p.data(), m.data(), v.data(), &rs);
        check(rs.step == half, tag + " checkpoint step", "%d vs %d", rs.step, half);
        gpt_set_weights(&r, p.data(), m.data(), v.data());
    }
    run_steps(&r, ref, half, S, &l2, &n2, nullptr);
    std::vector<float> pb, mb, vb;
    gpt_get_weights(&r, &pb, &mb, &vb);
    const bool same_losses = std::equal(l2.begin(), l2.end(), l1.begin() + half);
    check(same_losses && same_bits(pa, pb) && same_bits(ma, mb) && same_bits(va, vb), tag + " resume is bit-exact",
          "losses %s, weights %s, moments %s", same_losses ? "same" : "differ", same_bits(pa, pb) ? "same" : "differ",
          same_bits(ma, mb) && same_bits(va, vb) ? "same" : "differ");
    gpt_free(&r);

    // ZeRO 1, 2 and 3 with dp 1, the first steps: at dp 1 every stage updates the same elements in the same order
    // (the shard is the whole padded table), so the runs agree bit for bit; the data-parallel path reduces the
    // buckets in fp32 and adds the head gradient there (one GPU folds it into floatX), so against the reference
    // it has the training tolerance.
    const int Z = std::min(S, 2);
    std::vector<float> zero_final[3];
    std::vector<double> zero_losses[3];
    for (int zero = 1; zero <= 3; zero++) {
        Layout L = layout_single(c);
        L.zero = zero;
        GPT z;
        gpt_build(&z, c, B, T, RECOMPUTE_NONE, false, (float)tc.weight_decay, &L, &g_one_rank);
        const std::string name = tag + " ZeRO " + std::to_string(zero) + " on one GPU";
        check_estimate(z, name);
        gpt_set_weights(&z, init.data(), nullptr, nullptr);
        std::vector<double> zn;
        run_steps(&z, ref, 0, Z, &zero_losses[zero - 1], &zn, nullptr);
        double worst = 0;
        for (int s = 0; s < Z; s++) worst = max_err(worst, scalar_rel_err(zero_losses[zero - 1][s], ref_losses[s]));
        check(worst < tol_train, name + ": training losses", "worst rel err %.3g >= %.3g", worst, tol_train);
        gpt_get_weights(&z, &zero_final[zero - 1], nullptr, nullptr);
        gpt_free(&z);
    }
    const bool same_zero_losses = zero_losses[1] == zero_losses[0] && zero_losses[2] == zero_losses[0];
    const bool same_zero_weights = same_bits(zero_final[0], zero_final[1]) && same_bits(zero_final[0], zero_final[2]);
    check(same_zero_losses && same_zero_weights, tag + " ZeRO 1, 2 and 3 on one GPU are bitwise identical",
          "losses %s, weights %s", same_zero_losses ? "same" : "differ", same_zero_weights ? "same" : "differ");
}

int main(int argc, char** argv) {
    if (argc >= 3 && std::string(argv[1]) == "ref") {
        cuda_require_device();
        int one_argc = 1;
        char* one_argv[] = {argv[0], nullptr};
        char** one_argv_p = one_argv;
        g_one_rank.world = g_one_rank.dp = g_one_rank.pp = g_one_rank.emb = comm_init(&one_argc, &one_argv_p);
        bool core = false;  // --core: the states after it get every check but the resume and the ZeRO levels
        for (int i = 2; i < argc; i++) {
            if (std::string(argv[i]) == "--core") core = true;
            else test_reference(argv[i], core);
        }
        comm_finalize();
    } else {
        fprintf(stderr, "usage: %s ref [--core] FILE...   (reference states of train_gpt.py --ref; see tests/t_gpu.sh; "
                "--core: the states after it without the resume and the ZeRO levels on one GPU)\n", argv[0]);
        return 2;
    }
    return g_failed ? 1 : 0;
}
