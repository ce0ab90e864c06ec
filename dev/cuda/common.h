// dev/cuda/common.h: the harness every dev/cuda program shares.
//   Args, parse_args       [version] [--check-only] [--sizes LIST] [--reps N] [--warmup N] [--help], and a
//                          program's own flags (ExtraFlags: dev/cuda/attention_cases.h's --docs, --skip-matrix)
//   host_uniform, to_bf16  random inputs (counter-based, so every version gets its own fresh inputs)
//   Layout, DeviceSets     one "set" of device buffers per launch, several sets rotated while timing
//   time_kernel            CUDA-event timing after warm-up, median of many runs, rotating the sets
//   Tolerance, check_close validation against the double-precision CPU reference of llmc/ref_ops.h
//   Bench                  the copy-bandwidth ceiling of this run, and one markdown table row per result
//
// Validation tolerances. Each checked value must satisfy |got - ref| <= SAFETY * (rtol * |ref| + atol), where
// ref is the CPU reference computed in double from exactly the (bf16-rounded) inputs the GPU read, so the
// inputs carry no error and the bound only has to cover what the GPU does:
//   rtol = u_out + MATH_ULPS * u_fp32
//       u_out: rounding the result to its storage type, half an ulp: bf16 has 8 significant bits, u = 2^-8;
//       fp32 has 24, u = 2^-24. MATH_ULPS covers the fp32 arithmetic of the elementwise formula (a handful of
//       operations, each within 1-2 ulp with --use_fast_math intrinsics).
//   atol = (sqrt(K) + MATH_ULPS) * u_fp32 * S
//       K: the length of the fp32 sums that feed the value (C for a norm's statistics, the row count for a
//       weight gradient); S: the magnitude of the summed terms (or of the terms that cancel in the final
//       formula). sqrt(K) * u is the usual estimate of fp32 accumulation error with randomly signed rounding
//       errors (Higham, ch. 3); the worst case K * u is far above what is observed and would hide bugs.
//   SAFETY = 2 for the looseness of both estimates.
// A wrong index, a wrong formula or a missed tail gives errors of the order of the values themselves, far above
// these bounds. (A bf16 output cannot reveal an error below its own rounding, e.g. one dropped row out of
// thousands in a weight gradient; the structure of the kernels makes such partial errors unlikely.)
//
// Timing. Inputs are rotated across DeviceSets copies so that together they exceed 3x the L2 cache (50 MiB
// on H100): when a set is used again its data has been evicted and the kernel reads from HBM, as in training.
// One timed sample launches the kernel once on every set between two CUDA events and divides by the set
// count (this also averages away the per-launch event overhead); the figure is the median of --reps samples
// after --warmup untimed ones. GB/s counts the bytes the kernel must read plus write (each version of a
// kernel is charged the same minimal traffic, so a version that re-reads data shows up as slower).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include <cuda_bf16.h>
#include "llmc/utils.h"
#include "llmc/rng.h"
#include "llmc/cuda_common.cuh"
#include "dev/cuda/ceilings.h"

typedef __nv_bfloat16 bf16;

static const double U_BF16 = 1.0 / 256.0;         // bf16 unit roundoff 2^-8
static const double U_FP32 = 1.0 / 16777216.0;    // fp32 unit roundoff 2^-24
static const double MATH_ULPS = 8.0;
static const double TOL_SAFETY = 2.0;

// ----------------------------------------------------------------------------------------------
// command line

struct Args {
    const char* prog = "";
    int version = 0;          // 0: every version
    bool check_only = false;  // validate, do not time
    std::vector<std::vector<long>> sizes;  // each entry: the dims of one problem size, e.g. {16384, 2048}
    int warmup = 5;
    int reps = 30;
};

// A program's own flags beyond the common ones (dev/cuda/attention_cases.h's): parse_args offers each argument it
// does not know to take(flag, value) first, which returns whether it took it (value() consumes and returns the
// argument after the flag, or stops with an error when there is none); synopsis goes into the usage line
// (" [--docs LIST]"), help after the common flags' lines.
struct ExtraFlags {
    const char* synopsis;
    const char* help;
    std::function<bool(const char* flag, const std::function<const char*()>& value)> take;
};

static void print_usage(FILE* out, const char* prog, const char* about, const char* sizes_help, const char* default_sizes,
                        int versions, const ExtraFlags* extra = nullptr) {
    fprintf(out,
            "usage: %s [version] [--check-only] [--sizes LIST] [--reps N] [--warmup N]%s [--help]\n"
            "%s"
            "  version        1..%d runs that version of every kernel in this program (default: all versions)\n"
            "  --check-only   validate against the CPU reference, skip timing\n"
            "  --sizes LIST   comma-separated problem sizes, each %s (default %s)\n"
            "  --reps N       timed samples, median reported (default 30)\n"
            "  --warmup N     untimed samples before timing (default 5)\n"
            "%s"
            "  --help         this text\n"
            "Needs an NVIDIA GPU; prints one markdown table row per kernel, version and size.\n",
            prog, extra ? extra->synopsis : "", about, versions, sizes_help, default_sizes, extra ? extra->help : "");
}

// "16384x2048,16384x4096" -> {{16384, 2048}, {16384, 4096}}; every size must have `dims` positive numbers.
static std::vector<std::vector<long>> parse_sizes(const char* s, int dims, const char* sizes_help) {
    std::vector<std::vector<long>> out;
    std::string all(s);
    size_t pos = 0;
    while (pos <= all.size()) {
        size_t comma = all.find(',', pos);
        std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        std::vector<long> dv;
        size_t p = 0;
        while (p <= item.size()) {
            size_t x = item.find('x', p);
            std::string num = item.substr(p, x == std::string::npos ? std::string::npos : x - p);
            char* end = nullptr;
            long v = strtol(num.c_str(), &end, 10);
            if (num.empty() || *end != '\0' || v <= 0)
                die("--sizes: '%s' is not a size; each size is %s (positive integers)", item.c_str(), sizes_help);
            dv.push_back(v);
            if (x == std::string::npos) break;
            p = x + 1;
        }
        if ((int)dv.size() != dims) die("--sizes: '%s' has %zu numbers; each size is %s", item.c_str(), dv.size(), sizes_help);
        out.push_back(dv);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

// Parses the common command line (and the program's own flags, extra) and answers --help (no GPU needed:
// bench_start requires one).
static Args parse_args(int argc, char** argv, const char* about, const char* sizes_help, const char* default_sizes,
                       int dims, int versions, const ExtraFlags* extra = nullptr) {
    Args a;
    a.prog = argv[0];
    const char* sizes = default_sizes;
    for (int i = 1; i < argc; i++) {
        const char* s = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) die("%s needs a value (see %s --help)", s, a.prog);
            return argv[++i];
        };
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) { print_usage(stdout, a.prog, about, sizes_help, default_sizes, versions, extra); exit(0); }
        else if (!strcmp(s, "--check-only")) a.check_only = true;
        else if (!strcmp(s, "--sizes")) sizes = value();
        else if (!strcmp(s, "--reps")) a.reps = (int)parse_long("--reps", value(), 1, 100000);
        else if (!strcmp(s, "--warmup")) a.warmup = (int)parse_long("--warmup", value(), 0, 100000);
        else if (s[0] != '-' && a.version == 0) a.version = (int)parse_long("version", s, 1, versions);
        else if (extra && extra->take(s, value)) {}
        else die("unknown argument '%s' (see %s --help)", s, a.prog);
    }
    a.sizes = parse_sizes(sizes, dims, sizes_help);
    return a;
}

// ----------------------------------------------------------------------------------------------
// random inputs

// uniform in [lo, hi) for element i of stream `seed`; counter-based, so filling is parallel and reproducible
static inline float host_uniform(uint64_t seed, uint64_t i, float lo, float hi) {
    return lo + (hi - lo) * (float)u01_from_bits(splitmix64(splitmix64(seed) + i));
}

static void fill_uniform(std::vector<float>* v, size_t n, uint64_t seed, float lo, float hi) {
    v->resize(n);
    float* p = v->data();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = host_uniform(seed, i, lo, hi);
}

// rounds in place to bf16 (so the CPU reference sees exactly what the GPU reads) and returns the bf16 copy
static std::vector<bf16> to_bf16(std::vector<float>* v) {
    std::vector<bf16> out(v->size());
    float* p = v->data();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < v->size(); i++) {
        out[i] = __float2bfloat16(p[i]);
        p[i] = __bfloat162float(out[i]);
    }
    return out;
}

static std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

static std::vector<float> bf16_to_float(const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = __bfloat162float(v[i]);
    return out;
}

// a fresh seed per (kernel, version, size): no version is validated on data another version saw
static uint64_t seed_for(const char* kernel, int version, size_t size_index) {
    uint64_t h = 1469598103934665603ull;
    for (const char* p = kernel; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return splitmix64(h + 1000003ull * version + size_index);
}

// ----------------------------------------------------------------------------------------------
// device buffer sets

// Offsets of the buffers within one set (256-byte aligned, so 16-byte vector loads are always aligned).
struct Layout {
    size_t total = 0;
    size_t add(size_t bytes) {
        size_t off = (total + 255) & ~(size_t)255;
        total = off + bytes;
        return off;
    }
};

struct DeviceSets {
    int count = 0;           // number of identical sets rotated while timing
    size_t bytes = 0;        // bytes per set
    std::vector<char*> base;
    template <typename T> T* ptr(int set, size_t offset) const { return (T*)(base[set] + offset); }
};

// How many sets rotate: enough that they span 3x L2, at least 1, at most 64, and within 80% of free memory.
static int rotation_count(size_t set_bytes, size_t l2_bytes, size_t free_bytes) {
    size_t want = set_bytes >= 3 * l2_bytes ? 1 : (3 * l2_bytes + set_bytes - 1) / set_bytes;
    size_t fit = set_bytes ? (size_t)(0.8 * (double)free_bytes) / set_bytes : 1;
    return (int)std::max<size_t>(1, std::min<size_t>({want, fit, 64}));
}

static DeviceSets device_sets_alloc(size_t set_bytes) {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    int l2 = 0;
    cudaCheck(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (set_bytes > free_b)
        die("this size needs %.2f GiB of GPU memory and %.2f GiB are free; pass smaller --sizes", set_bytes / 1073741824.0,
            free_b / 1073741824.0);
    DeviceSets s;
    s.count = rotation_count(set_bytes, (size_t)l2, free_b);
    s.bytes = set_bytes;
    for (int i = 0; i < s.count; i++) {
        char* p = nullptr;
        cudaCheck(cudaMalloc(&p, set_bytes));
        s.base.push_back(p);
    }
    return s;
}

// copies host data to one buffer in every set
static void device_sets_upload(const DeviceSets& s, size_t offset, const void* host, size_t bytes) {
    for (int i = 0; i < s.count; i++) cudaCheck(cudaMemcpy(s.base[i] + offset, host, bytes, cudaMemcpyHostToDevice));
}

static void device_sets_free(DeviceSets* s) {
    for (char* p : s->base) cudaCheck(cudaFree(p));
    s->base.clear();
    s->count = 0;
}

template <typename T>
static std::vector<T> download(const T* dev, size_t n) {
    std::vector<T> out(n);
    cudaCheck(cudaMemcpy(out.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
}

template <typename T>
static T* upload(const std::vector<T>& host) {
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(1, host.size()) * sizeof(T)));
    if (!host.empty()) cudaCheck(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

// ----------------------------------------------------------------------------------------------
// timing

// Median milliseconds of one launch. launch(set) enqueues the kernel on `stream` with set `set`'s buffers.
template <typename F>
static double time_kernel(const Args& a, const DeviceSets& sets, cudaStream_t stream, F launch) {
    EventTimer timer = event_timer_create();
    std::vector<float> samples;
    for (int r = 0; r < a.warmup + a.reps; r++) {
        event_timer_start(&timer, stream);
        for (int s = 0; s < sets.count; s++) launch(s);
        cudaCheck(cudaGetLastError());
        float ms = event_timer_stop(&timer, stream);
        if (r >= a.warmup) samples.push_back(ms / sets.count);
    }
    event_timer_destroy(&timer);
    return median(samples);
}

// ----------------------------------------------------------------------------------------------
// validation

struct Tolerance {
    double rtol, atol;
};

// u_out: the output type's unit roundoff (U_BF16 or U_FP32); acc_len: K, the length of the fp32 sums feeding
// each value (1 for purely elementwise results); scale: S, the magnitude of the summed or cancelling terms.
static Tolerance tolerance(double u_out, double acc_len, double scale) {
    return {u_out + MATH_ULPS * U_FP32, (std::sqrt(acc_len) + MATH_ULPS) * U_FP32 * scale};
}

static double max_abs(const std::vector<double>& v) {
    double m = 0.0;
    for (double x : v) m = std::max(m, std::fabs(x));
    return m;
}

// Compares got (as float) with ref; prints nothing on success. Returns the worst error / allowed error (<= 1
// passes) and reports the worst element on failure. Non-finite values always fail.
template <typename G>
static double check_close(const char* what, const std::vector<G>& got, const std::vector<double>& ref, Tolerance tol,
                          std::string* report) {
    if (got.size() != ref.size()) die("check_close(%s): %zu values against %zu reference values", what, got.size(), ref.size());
    double worst = 0.0;
    size_t worst_i = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double g = (double)(float)got[i];
        double allowed = TOL_SAFETY * (tol.rtol * std::fabs(ref[i]) + tol.atol);
        double diff = std::fabs(g - ref[i]);
        double r = !std::isfinite(g) ? INFINITY : diff == 0.0 ? 0.0 : diff / allowed;  // exact matches pass at atol 0
        if (r > worst) { worst = r; worst_i = i; }
    }
    if (worst > 1.0) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s[%zu] = %.7g, reference %.7g (error %.2fx the tolerance); ", what, worst_i,
                 (double)(float)got[worst_i], ref[worst_i], worst);
        *report += buf;
    }
    return worst;
}

// ----------------------------------------------------------------------------------------------
// the run: ceiling and result rows

struct Bench {
    Args args;
    cudaStream_t stream;
    int sms = 0;
    double ceiling_gbs = 0.0;  // best measured device copy bandwidth this run
    int failures = 0;
};

static Bench bench_start(const Args& a, const char* program) {
    cuda_require_device();
    Bench b;
    b.args = a;
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    b.sms = prop.multiProcessorCount;
    cudaCheck(cudaStreamCreate(&b.stream));
    printf("# %s on %s (sm_%d%d, %d SMs, L2 %.0f MiB)\n", program, prop.name, prop.major, prop.minor, b.sms,
           prop.l2CacheSize / 1048576.0);
    if (!a.check_only) {
        std::vector<CopyResult> copies = measure_copy(1024, 3, 20, b.sms, b.stream);
        for (const CopyResult& c : copies) b.ceiling_gbs = std::max(b.ceiling_gbs, c.gbs);
        printf("# copy ceiling: %.1f GB/s (best of a copy kernel and cudaMemcpyAsync, 1 GiB, median of 20)\n", b.ceiling_gbs);
        printf("# timing: median of %d samples after %d warm-up, inputs rotated over enough buffer sets to span 3x L2\n",
               a.reps, a.warmup);
    }
    printf("| kernel | variant | size | version | sets | ms | GB/s | %% of copy | check |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    fflush(stdout);
    return b;
}

// prints one result row; ms < 0 means not timed (--check-only)
static void bench_row(Bench* b, const char* kernel, const char* variant, const char* size, int version, int sets,
                      double ms, double bytes, double worst, const std::string& report) {
    bool ok = worst <= 1.0;
    if (!ok) b->failures++;
    char check[64];
    snprintf(check, sizeof(check), "%s (%.2f of tol)", ok ? "ok" : "FAIL", worst);
    if (ms < 0) printf("| %s | %s | %s | %d | %d | - | - | - | %s |\n", kernel, variant, size, version, sets, check);
    else {
        double gbs = bytes / (ms * 1e-3) / 1e9;
        printf("| %s | %s | %s | %d | %d | %.4f | %.1f | %.1f | %s |\n", kernel, variant, size, version, sets, ms, gbs,
               100.0 * gbs / b->ceiling_gbs, check);
    }
    if (!ok) fprintf(stderr, "%s v%d %s %s: %s\n", kernel, version, variant, size, report.c_str());
    fflush(stdout);
}

// exit status: 1 when any version failed validation
static int bench_finish(Bench* b) {
    cudaCheck(cudaStreamDestroy(b->stream));
    if (b->failures) {
        fprintf(stderr, "error: %d result(s) differ from the CPU reference beyond tolerance (rows marked FAIL)\n", b->failures);
        return 1;
    }
    return 0;
}
