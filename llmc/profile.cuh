// llmc/profile.cuh: train_gpt's step profile (--profile N, docs/cuda_trainer.md "Reading the profile"): the kernel
// classes, the event pool that times them, and the table that reports them.
//   classes   each linear layer's forward, input gradient (dgrad) and weight gradient (wgrad), the LM head's three GEMMs,
//             the cross-entropy, attention, RoPE, norms, activations, embeddings, the gradient norm, AdamW, fp8 scaling,
//             and the communication the compute stream spends time on (dp: the gradients' fp32 casts and every wait of
//             the compute stream on the dp or world stream; tp: the collectives themselves, on the compute stream; pp:
//             the send / receive groups and the wait for them)
//   scopes    PROF(class, work, call) runs `call` inside the class (ProfScope, the same as an object for a whole
//             function). A scope inside another is the inner class's time, not the outer's: each boundary records one
//             CUDA event on the compute stream, and the time between two consecutive events belongs to the innermost
//             scope open between them (none: the time is "unaccounted"). Every scope is also an NVTX range for nsys.
//   steps     the N steps after the run's first (the warm-up) are profiled; each ends with a wait for its last event.
//             The table is printed after the last of them by rank 0, of its own compute stream.
//   work      a GEMM's FLOPs (2 m n k, its cuBLAS shape), attention's FLOPs (the causal half that the kernels compute),
//             or the bytes a memory-bound kernel must read and write at least; achieved = work / time, against the
//             ceilings of --ceilings FILE (dev/probe/ceilings.cu --json: the GEMM of the same shape, else the best
//             measured one; the copy bandwidth), or else the device's nominal peaks.
// Built against the emulation (tests/cuda_emu, CUDA_EMU), the profile also counts the kernel launches and cuBLASLt
// matmuls of the profiled steps and the ones issued outside every class, and prints both (tests/t_profile.sh).
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>
#include "llmc/cuda_common.cuh"
#include "llmc/param_table.h"
#include "llmc/json.h"
#include "llmc/precision.cuh"
#include "llmc/utils.h"

// The classes. Linear layer k (LINEAR_QKV .. LINEAR_FC2) of pass p (PROF_FWD, PROF_DGRAD, PROF_WGRAD) is class 3k + p.
enum { PROF_FWD = 0, PROF_DGRAD = 1, PROF_WGRAD = 2 };
enum ProfClass {
    PROF_HEAD_FWD = 3 * LINEARS_PER_LAYER, PROF_HEAD_DGRAD, PROF_HEAD_WGRAD, PROF_XENT, PROF_ATTN_FWD, PROF_ATTN_BWD,
    PROF_ROPE, PROF_NORM_FWD, PROF_NORM_BWD, PROF_ACT_FWD, PROF_ACT_BWD, PROF_EMB_FWD, PROF_EMB_BWD, PROF_GRAD_ZERO,
    PROF_GRAD_NORM, PROF_ADAMW, PROF_FP8_SCALING, PROF_DP_CAST, PROF_DP_WAIT, PROF_TP_COMM, PROF_PP_COMM, PROF_CLASSES
};
static inline int prof_linear(int k, int pass) { return 3 * k + pass; }

// What a class's rate is measured in: FLOP/s (GEMMs, attention), bytes/s (memory-bound kernels), bytes/s of the
// messages with no ceiling (tp and pp collectives), nothing (waits, casts mixed with waits).
enum ProfKind { PROF_KIND_FLOPS, PROF_KIND_BYTES, PROF_KIND_COMM, PROF_KIND_TIME };
struct ProfClassInfo {
    const char* name;
    ProfKind kind;
};
static const ProfClassInfo PROF_INFO[PROF_CLASSES] = {
    {"qkv fwd", PROF_KIND_FLOPS}, {"qkv dgrad", PROF_KIND_FLOPS}, {"qkv wgrad", PROF_KIND_FLOPS},
    {"attn_out fwd", PROF_KIND_FLOPS}, {"attn_out dgrad", PROF_KIND_FLOPS}, {"attn_out wgrad", PROF_KIND_FLOPS},
    {"fc1 fwd", PROF_KIND_FLOPS}, {"fc1 dgrad", PROF_KIND_FLOPS}, {"fc1 wgrad", PROF_KIND_FLOPS},
    {"fc2 fwd", PROF_KIND_FLOPS}, {"fc2 dgrad", PROF_KIND_FLOPS}, {"fc2 wgrad", PROF_KIND_FLOPS},
    {"lm head fwd", PROF_KIND_FLOPS}, {"lm head dgrad", PROF_KIND_FLOPS}, {"lm head wgrad", PROF_KIND_FLOPS},
    {"cross-entropy", PROF_KIND_BYTES}, {"attention fwd", PROF_KIND_FLOPS}, {"attention bwd", PROF_KIND_FLOPS},
    {"rope", PROF_KIND_BYTES}, {"norm fwd", PROF_KIND_BYTES}, {"norm bwd", PROF_KIND_BYTES},
    {"activation fwd", PROF_KIND_BYTES}, {"activation bwd", PROF_KIND_BYTES}, {"embedding fwd", PROF_KIND_BYTES},
    {"embedding bwd", PROF_KIND_BYTES}, {"grad zero", PROF_KIND_BYTES}, {"grad norm", PROF_KIND_BYTES}, {"adamw", PROF_KIND_BYTES},
    {"fp8 scaling", PROF_KIND_TIME}, {"dp grad cast", PROF_KIND_BYTES}, {"dp wait", PROF_KIND_TIME},
    {"tp comm", PROF_KIND_COMM}, {"pp comm", PROF_KIND_COMM},
};

// The work of one call: FLOPs, bytes, and a GEMM's cuBLAS shape (m, n, k) for its ceiling.
struct ProfWork {
    double flops = 0, bytes = 0;
    int m = 0, n = 0, k = 0;
};
static inline ProfWork prof_gemm(int m, int n, int k) { return {2.0 * m * n * k, 0.0, m, n, k}; }
static inline ProfWork prof_flops(double flops) { return {flops, 0.0, 0, 0, 0}; }
static inline ProfWork prof_bytes(double bytes) { return {0.0, bytes, 0, 0, 0}; }

// A measured GEMM of --ceilings: its cuBLAS shape, type ("bf16", "fp8e4m3", ...) and TFLOP/s.
struct ProfGemmCeiling {
    int m, n, k;
    std::string dtype;
    double tflops;
};

struct ProfClassStats {
    long calls = 0;
    double ms = 0, flops = 0, bytes = 0;
    int m = 0, n = 0, k = 0;  // the shape of its last GEMM call (0: none)
};

struct Profiler {
    int steps = 0;                 // --profile N (0: off)
    int done = 0;                  // profiled steps so far
    bool active = false;           // inside a profiled step
    bool fp8 = false;              // --fp8: the layers' linears run fp8 GEMMs (their ceiling is the fp8 one)
    cudaStream_t stream = nullptr; // the compute stream, where every event is recorded
    std::vector<int> open;         // the classes of the open scopes, innermost last
    std::vector<cudaEvent_t> pool; // the events of a step, reused by the next; [used] recorded this step
    std::vector<int> owner;        // owner[i]: the class of the interval from event i to event i + 1 (-1: none)
    size_t used = 0;
    ProfClassStats cls[PROF_CLASSES];
    double wall_ms = 0;            // the profiled steps' wall-clock time, as their step lines print it
    // ceilings: from --ceilings (ceilings_path), else nominal
    std::string ceilings_path;
    std::vector<ProfGemmCeiling> gemms;
    double copy_gbs = 0;           // the best measured copy, GB/s (bytes read + written)
    double peak_flops = 0, peak_bw = 0;  // the device's nominal bf16 peak (FLOP/s) and memory bandwidth (B/s)
    // the emulation's launch accounting (CUDA_EMU)
    long launches = 0, unclassed = 0, mark = 0;
    std::string unclassed_example;
};
static Profiler g_prof;

// --ceilings FILE: the GEMM rows and copy bandwidth of build/ceilings --json (dev/probe/ceilings.cu). Dies naming the
// file when it cannot be read or is not such a file.
static void profile_read_ceilings(Profiler* p, const std::string& path) {
    const std::vector<uint8_t> bytes = read_file_bytes(path, "--ceilings");
    Json j;
    std::string err;
    auto bad = [&](const std::string& why) {
        die("--ceilings '%s': %s; expected the JSON of build/ceilings --json (dev/probe/ceilings.cu)", path.c_str(),
            why.c_str());
    };
    if (!json_parse((const char*)bytes.data(), bytes.size(), &j, &err)) bad("not JSON (" + err + ")");
    const Json* copy = j.kind == Json::OBJ ? j.get("copy") : nullptr;
    const Json* gemm = j.kind == Json::OBJ ? j.get("gemm") : nullptr;
    if (!copy || copy->kind != Json::ARR || !gemm || gemm->kind != Json::ARR) bad("no \"copy\" and \"gemm\" arrays");
    for (const Json& c : copy->arr) {
        const Json* gbs = c.kind == Json::OBJ ? c.get("gb_per_s") : nullptr;
        if (!gbs || gbs->kind != Json::NUM || !(gbs->num > 0)) bad("a \"copy\" row without a positive \"gb_per_s\"");
        p->copy_gbs = std::max(p->copy_gbs, gbs->num);
    }
    for (const Json& r : gemm->arr) {
        const Json* f[5] = {};
        const char* keys[5] = {"m", "n", "k", "dtype", "status"};
        for (int i = 0; i < 5; i++) f[i] = r.kind == Json::OBJ ? r.get(keys[i]) : nullptr;
        if (!f[0] || !f[1] || !f[2] || !f[3] || !f[4] || f[0]->kind != Json::NUM || f[1]->kind != Json::NUM ||
            f[2]->kind != Json::NUM || f[3]->kind != Json::STR || f[4]->kind != Json::STR)
            bad("a \"gemm\" row without m, n, k, dtype and status");
        if (f[4]->str != "ok") continue;  // a shape the probe could not run
        const Json* t = r.get("tflops");
        if (!t || t->kind != Json::NUM || !(t->num > 0)) bad("a \"gemm\" row of status ok without a positive \"tflops\"");
        p->gemms.push_back({(int)f[0]->num, (int)f[1]->num, (int)f[2]->num, f[3]->str, t->num});
    }
    if (p->copy_gbs <= 0) bad("no copy bandwidth");
    p->ceilings_path = path;
}

// --profile N and --ceilings FILE, before the run starts (every rank): the ceilings read, or the nominal peaks kept.
static void profile_open(Profiler* p, int steps, const std::string& ceilings, bool fp8) {
    p->steps = steps;
    p->fp8 = fp8;
    if (!ceilings.empty()) profile_read_ceilings(p, ceilings);
}

// One boundary: an event on the compute stream; the time from it to the next belongs to class `owner` (-1: none).
static void prof_boundary(Profiler* p, int owner) {
    if (p->used == p->pool.size()) {
        cudaEvent_t e;
        cudaCheck(cudaEventCreate(&e));
        p->pool.push_back(e);
        p->owner.push_back(-1);
    }
    cudaCheck(cudaEventRecord(p->pool[p->used], p->stream));
    p->owner[p->used++] = owner;
}

#ifdef CUDA_EMU
// The emulation's launches since the last check that were issued outside every class (the last one named).
static void prof_count_unclassed(Profiler* p) {
    const long n = g_emu_launch_count.n - p->mark;
    if (n > 0 && p->unclassed_example.empty())
        p->unclassed_example = std::string(g_emu_launch_count.what) + " (" + g_emu_launch_count.file + ":" +
                               std::to_string(g_emu_launch_count.line) + ")";
    p->unclassed += n;
}
#endif

static void prof_push(int c, const ProfWork& w) {
    nvtxRangePushA(PROF_INFO[c].name);
    Profiler* p = &g_prof;
    if (!p->active) return;
#ifdef CUDA_EMU
    if (p->open.empty()) prof_count_unclassed(p);
#endif
    prof_boundary(p, c);
    p->open.push_back(c);
    ProfClassStats& s = p->cls[c];
    s.calls++;
    s.flops += w.flops;
    s.bytes += w.bytes;
    if (w.m) s.m = w.m, s.n = w.n, s.k = w.k;
}

static void prof_pop() {
    nvtxRangePop();
    Profiler* p = &g_prof;
    if (!p->active) return;
    p->open.pop_back();
    prof_boundary(p, p->open.empty() ? -1 : p->open.back());
#ifdef CUDA_EMU
    if (p->open.empty()) p->mark = g_emu_launch_count.n;
#endif
}

// A class's scope: from construction to destruction. PROF(class, work, call...) runs one call in it.
struct ProfScope {
    ProfScope(int c, const ProfWork& w = ProfWork()) { prof_push(c, w); }
    ~ProfScope() { prof_pop(); }
    ProfScope(const ProfScope&) = delete;
    ProfScope& operator=(const ProfScope&) = delete;
};
#define PROF(cls, work, ...) do { ProfScope prof_scope_(cls, work); __VA_ARGS__; } while (0)

// llmc/classifier.cuh's fused_classifier marks its steps: the logits GEMM, the loss and dlogits, the dx GEMM, the dW
// GEMM (0-3) of a chunk of `rows`, and the end (4).
static void prof_classifier_phase(int phase, int rows, int C, int Vp) {
    static const int cls[4] = {PROF_HEAD_FWD, PROF_XENT, PROF_HEAD_DGRAD, PROF_HEAD_WGRAD};
    if (phase > 0) prof_pop();
    if (phase == 0) prof_push(cls[0], prof_gemm(Vp, rows, C));
    else if (phase == 1) prof_push(cls[1], prof_bytes(2.0 * rows * Vp * sizeof(floatX)));
    else if (phase == 2) prof_push(cls[2], prof_gemm(C, rows, Vp));
    else if (phase == 3) prof_push(cls[3], prof_gemm(C, Vp, rows));
}

// Whether step `index` of this run (0: its first) is profiled: the N after the first. Starts its accounting.
static bool profile_step_begin(int index, cudaStream_t stream) {
    Profiler* p = &g_prof;
    p->active = index >= 1 && index <= p->steps;
    if (!p->active) return false;
    p->stream = stream;
    p->used = 0;
#ifdef CUDA_EMU
    p->mark = g_emu_launch_count.n;
    p->launches -= g_emu_launch_count.n;
#endif
    return true;
}

// The end of a step that began at t0_ms (now_ms): its wall-clock time, as the step line prints it. A profiled step first
// waits for its last event (the step's one extra synchronisation) and adds each interval to its class.
static double profile_step_end(double t0_ms) {
    Profiler* p = &g_prof;
    if (!p->active) return now_ms() - t0_ms;
    if (!p->open.empty()) die("--profile: the scope of class '%s' is still open at the end of the step", PROF_INFO[p->open.back()].name);
#ifdef CUDA_EMU
    prof_count_unclassed(p);
    p->launches += g_emu_launch_count.n;
#endif
    if (p->used) cudaCheck(cudaEventSynchronize(p->pool[p->used - 1]));
    for (size_t i = 0; i + 1 < p->used; i++) {
        if (p->owner[i] < 0) continue;
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, p->pool[i], p->pool[i + 1]));
        p->cls[p->owner[i]].ms += ms;
    }
    p->active = false;
    p->done++;
    const double ms = now_ms() - t0_ms;
    p->wall_ms += ms;
    return ms;
}

// The ceiling of class c in FLOP/s or bytes/s, and where it comes from (0 and "-" when none).
static double prof_ceiling(const Profiler* p, int c, const char** source) {
    const ProfClassStats& s = p->cls[c];
    const ProfKind kind = PROF_INFO[c].kind;
    *source = "-";
    if (kind == PROF_KIND_BYTES) {
        if (p->copy_gbs > 0) { *source = "measured copy"; return p->copy_gbs * 1e9; }
        if (p->peak_bw > 0) { *source = "nominal HBM"; return p->peak_bw; }
        return 0;
    }
    if (kind != PROF_KIND_FLOPS) return 0;
    const bool fp8 = p->fp8 && c < PROF_HEAD_FWD;  // the layers' linears; the LM head and attention stay bf16
    const std::string dtype = fp8 ? "fp8e4m3" : "bf16";
    if (!p->ceilings_path.empty()) {
        double best = 0;
        for (const ProfGemmCeiling& r : p->gemms) {
            if (r.dtype != dtype) continue;
            if (s.m && r.m == s.m && r.n == s.n && r.k == s.k) { *source = "measured, this shape"; return r.tflops * 1e12; }
            best = std::max(best, r.tflops);
        }
        if (best > 0) { *source = "measured, best GEMM"; return best * 1e12; }
    }
    if (p->peak_flops > 0) { *source = fp8 ? "nominal fp8 peak" : "nominal peak"; return (fp8 ? 2 : 1) * p->peak_flops; }
    return 0;
}

// The table, after the last profiled step (rank 0 prints; every rank calls it: the emulation's launch counts are summed
// over the world). tokens_per_step: the whole step's tokens over n_devices; model and hardware FLOPs per token give MFU
// and HFU against the nominal peak, as the run's summary computes MFU (logger_mfu).
template <typename CommT, typename LoggerT>
static void profile_print(Profiler* p, const CommT& world, const LoggerT& lg, double hw_flops_per_token) {
    const int N = p->steps;
#ifdef CUDA_EMU
    double counts[2] = {(double)p->launches, (double)p->unclassed};
    comm_host_sum(world, counts, 2);
#endif
    if (world.rank != 0) return;
    const double wall = p->wall_ms / N;
    printf("profile of step%s %d%s%s of this run (the %d after the first), rank 0's compute stream%s: per step\n",
           N > 1 ? "s" : "", 2, N > 1 ? "-" : "", N > 1 ? std::to_string(N + 1).c_str() : "", N,
           world.size > 1 ? " (the other ranks are not shown)" : "");
    printf("  %-15s %7s %10s %7s %14s  %-36s %6s\n", "class", "calls", "ms", "share", "achieved", "ceiling", "of it");
    double sum = 0;
    for (int c = 0; c < PROF_CLASSES; c++) {
        const ProfClassStats& s = p->cls[c];
        if (s.calls == 0) continue;
        const double ms = s.ms / N;
        sum += ms;
        printf("  %-15s %7.1f %10.4f %6.1f%%", PROF_INFO[c].name, (double)s.calls / N, ms, wall > 0 ? 100.0 * ms / wall : 0.0);
        const ProfKind kind = PROF_INFO[c].kind;
        const double work = kind == PROF_KIND_FLOPS ? s.flops : s.bytes, rate = s.ms > 0 ? work / (s.ms / 1e3) : 0;
        const char* unit = kind == PROF_KIND_FLOPS ? "TFLOP/s" : "GB/s";
        const double scale = kind == PROF_KIND_FLOPS ? 1e12 : 1e9;
        if (kind == PROF_KIND_TIME || work <= 0) { printf(" %14s\n", "-"); continue; }
        printf(" %6.1f %-7s", rate / scale, unit);
        const char* source;
        const double ceil = prof_ceiling(p, c, &source);
        char cs[64] = "-";
        if (ceil > 0) snprintf(cs, sizeof(cs), "%.1f %s (%s)", ceil / scale, unit, source);
        printf("  %-36s", cs);
        if (ceil > 0) printf(" %5.1f%%", 100.0 * rate / ceil);
        printf("\n");
    }
    printf("  %-15s %7s %10.4f %6.1f%%   host work, copies, memsets and gaps between the classes\n", "unaccounted", "",
           wall - sum, wall > 0 ? 100.0 * (wall - sum) / wall : 0.0);
    printf("  %-15s %7s %10.4f %6.1f%%   the step's wall-clock time (its step line's ms)\n", "step", "", wall, 100.0);
    const double tok_s = logger_tokens_per_s(&lg, wall);
    if (lg.peak_flops > 0)
        printf("  MFU %.2f%%, HFU %.2f%% of the nominal %.0f TFLOP/s peak over these steps (%.4g model, %.4g hardware "
               "FLOPs per token)\n", 100.0 * logger_mfu(&lg, tok_s, lg.flops_per_token),
               100.0 * logger_mfu(&lg, tok_s, hw_flops_per_token), lg.peak_flops / 1e12, lg.flops_per_token,
               hw_flops_per_token);
    else
        printf("  MFU and HFU: no peak known for this device and build\n");
    printf("  ceilings: %s\n", p->ceilings_path.empty() ? "the device's nominal peaks (--ceilings FILE for measured ones)"
                                                        : ("measured, " + p->ceilings_path).c_str());
#ifdef CUDA_EMU
    printf("  emulation: %.0f kernel launches and matmuls in the profiled steps on %d rank%s, %.0f outside every class%s%s\n",
           counts[0], world.size, world.size > 1 ? "s" : "", counts[1], p->unclassed_example.empty() ? "" : "; rank 0's first: ",
           p->unclassed_example.c_str());
#endif
    fflush(stdout);
}
