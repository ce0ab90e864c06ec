// tests/cuda_emu/include/cuda_emu.h: the CUDA runtime and the kernel thread model emulated on the host, so
// that train_gpt.cu and test_gpt.cu compile with g++ and run their kernels on the CPU (tests/t_gpu_emulated.sh;
// cuBLASLt is in cublasLt.h beside this file, the tensor-core primitives in llmc/mma.cuh beside it). It checks
// the program's logic: indexing, barriers, warp collectives, the tensor-core fragment layouts as llmc/mma.cuh
// documents them, launch shapes, and in EMU_SCHED=random mode shared-memory races (below); not speed or the
// GPU's fast-math intrinsics (exact host math here).
// Thread model: a block's CUDA threads are fibers (user-level contexts, an x86-64 stack switch) run by one
// OS thread; __syncthreads and the warp collectives (shuffles, mma.sync, ldmatrix) are counting barriers on
// which a fiber yields until its group (block, or warp of 32) has arrived. Default schedule: round-robin,
// each thread runs until it waits at a barrier. EMU_SCHED=random (seeded per launch and block): warps in a
// random order, each run ahead (its lanes in a random order, again and again) until all its threads wait at
// a __syncthreads or have returned, so one warp runs through a whole barrier interval before another
// starts; and a race detector on the dynamic shared memory (DYNAMIC_SMEM: llmc/attention.cuh's tiles): per
// byte, the warp and barrier interval of its last write and last read, as written by cp.async and read by
// ldmatrix and lds32; a read of bytes another warp wrote in the same interval (no __syncthreads between),
// a write of bytes another warp wrote or read in it, and a read of bytes whose cp.async the issuing thread
// has not yet waited for, are emulation errors. Plain C++ loads and stores of shared memory
// (static __shared__ arrays, the fp32 rows of the attention backward) are not tracked: there only the
// schedule can expose a race, through wrong results.
// cp.async (every mode): the destination is poisoned (0xff: NaN in bf16) when the copy is issued and the
// data lands when the issuing thread's cp.async.wait_group retires its group, so a read before the wait, or
// by another thread before the barrier after it, sees NaN or the old contents.
// A thread that returns drops out of its block's and warp's barriers; a collective after that, a deadlock,
// a misaligned ldmatrix or cp.async address is an emulation error, and cudaGetLastError then fails.
// Blocks run one after another (EMU_ORDER=0 ascending (default), 1 descending, 2 pseudo-random per launch).
// __shared__ is `static` (one block at a time). Device memory is host memory filled with 0xff bytes (NaN
// in bf16 and fp32), so a read of memory never written shows in the results. Streams: by default every kernel,
// copy and memset runs when it is called (streams never overlap); built with -DEMU_STREAMS, the stream mode queues
// them per stream and checks their ordering (cuda_emu_streams.h). The sources compile unchanged
// but for their launches (tests/cuda_emu/rewrite.py); the inline PTX of llmc/mma.cuh is replaced by the
// emulation's own llmc/mma.cuh, found first on the include path (that file says how).
#pragma once
#define CUDA_EMU 1  // what a test reads the emulation's own counters under
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <vector>
#include <sys/mman.h>
#ifdef EMU_STREAMS
#include "cuda_emu_streams.h"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)
#define __restrict__ __restrict

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
static inline float2 make_float2(float a, float b) { return {a, b}; }

// external linkage on purpose: an opaque context switch may change them (the compiler must reload)
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

// ---------------------------------------------------------------- bf16
static inline uint16_t emu_f2bf_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
struct __nv_bfloat16 {
    uint16_t __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(emu_f2bf_bits(f)) {}
    __nv_bfloat16(double f) : __x(emu_f2bf_bits((float)f)) {}
    __nv_bfloat16(int f) : __x(emu_f2bf_bits((float)f)) {}
    operator float() const {
        uint32_t u = (uint32_t)__x << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
};
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }

// ---------------------------------------------------------------- fp16 (IEEE binary16: 5 exponent bits, 10 fraction bits)
// float -> half rounds to nearest even, with subnormals (multiples of 2^-24 below 2^-14) and overflow to infinity at
// 65520 and beyond, as the GPU's cvt.rn.f16.f32 does
static inline uint16_t emu_f2h_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) return sign | 0x7e00;  // NaN stays NaN
    if (a < 0x38800000) {                      // |f| < 2^-14: a subnormal half (or zero, or the smallest normal)
        float af;
        memcpy(&af, &a, 4);
        return sign | (uint16_t)std::nearbyint(af * 16777216.0f);  // in units of 2^-24, ties to even
    }
    a += 0xfff + ((a >> 13) & 1);            // round the fraction to 10 bits, ties to even
    if (a >= 0x47800000) return sign | 0x7c00;  // 2^16 or more after rounding: infinity
    return sign | (uint16_t)((a - 0x38000000) >> 13);  // rebias the exponent from 127 to 15
}
static inline float emu_h2f(uint16_t h) {
    const uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) return s ? -std::ldexp((float)m, -24) : std::ldexp((float)m, -24);
    const uint32_t u = e == 31 ? s | 0x7f800000 | (m << 13) : s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
struct __half {
    uint16_t __x;
    __half() = default;
    __half(float f) : __x(emu_f2h_bits(f)) {}
    __half(double f) : __x(emu_f2h_bits((float)f)) {}
    __half(int f) : __x(emu_f2h_bits((float)f)) {}
    operator float() const { return emu_h2f(__x); }
};
struct __half2 { __half x, y; };
typedef __half half;
static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return (float)h; }
static inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }

// math intrinsics: exact host versions (the GPU build's --use_fast_math uses approximations), except tanhf
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline float emu_expf(float x) { return std::exp(x); }
static inline float emu_logf(float x) { return std::log(x); }
static inline float emu_log2f(float x) { return std::log2(x); }
#define __expf emu_expf
// tanhf: the GPU build's --use_fast_math makes it the hardware's tanh.approx.f32 (relative error up to about 2^-11),
// modelled as tanh rounded to 11 significant bits, so that code which relies on it shows that error here too
static inline float emu_tanhf(float x) {
    int e;
    const float m = std::frexp(std::tanh(x), &e);
    return std::ldexp(std::nearbyint(m * 2048.0f) / 2048.0f, e);
}
#define tanhf emu_tanhf
#define __logf emu_logf
#define __log2f emu_log2f
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
// atomics: one block runs at a time on one OS thread and fibers switch only at barriers, so a plain
// read-modify-write is atomic here
static inline unsigned int atomicMax(unsigned int* p, unsigned int v) { const unsigned int o = *p; if (v > o) *p = v; return o; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

// ---------------------------------------------------------------- fibers
extern "C" void emu_switch(void** save_sp, void* to_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_switch, .-emu_switch
)");

struct EmuGroup {  // a counting barrier: block or warp
    int expected = 0, arrived = 0, exited = 0;
    long gen = 0;
};
struct EmuWarpData {
    uint32_t u[32][6];
    const void* addr[32];
    float f[32];
};
struct EmuCpAsync {  // one cp.async in flight: destination, the 16 source bytes, its commit group
    unsigned char* dst;
    unsigned char data[16];
    long group;
};
struct EmuWgmma {  // one wgmma product queued by a thread (tests/cuda_emu/include/llmc/mma.cuh), run at its group's wait
    float* d;              // the thread's n / 2 accumulators
    int n, accumulate, tb;  // N; D = A B (+ D if accumulate); B MN-major if tb
    long group;            // its commit group (-1: not committed yet)
    bool a_regs;           // A from the warp's registers (a), else from the descriptor da
    uint64_t da, db;
    uint32_t a[32][4];     // a_regs: every lane's A fragment at the issue
};
struct EmuShadow {  // race detector: per shared byte, the barrier interval (gen + 1; 0 = never) and warp
    uint32_t w_gen, r_gen;
    int16_t w_warp, r_warp;  // r_warp -1: read by several warps in r_gen
    uint8_t pending;         // written by a cp.async not yet waited for
};
struct EmuState {
    static const int MAXT = 1024;
    static const size_t STACK = 256 << 10;
    char* stacks = nullptr;
    void* sp[MAXT];
    bool done[MAXT];
    void* sched_sp = nullptr;
    int cur = 0, nt = 0;
    dim3 block;
    EmuGroup blk;
    EmuGroup warp[32];
    EmuWarpData wd[2][32];  // the warp collectives' exchange areas (emu_warp_area)
    unsigned coll[MAXT];    // warp collectives per thread so far in the block
    void (*body)(void*) = nullptr;
    void* ctx = nullptr;
    long progress = 0;
    std::vector<unsigned char> smem;
    long errors = 0;
    bool in_kernel = false;
    std::vector<EmuCpAsync> cp[MAXT];  // cp.async in flight per thread
    long cp_groups[MAXT];              // groups committed per thread
    std::vector<EmuShadow> shadow;     // per byte of smem (EMU_SCHED=random)
    // wgmma per thread: the products in flight, groups committed, a wgmma.fence since the last wait, the accumulators'
    // running values while products that write them are in flight (the registers themselves hold NaN until the wait)
    std::vector<EmuWgmma> wg[MAXT];
    long wg_groups[MAXT];
    bool wg_fenced[MAXT];
    std::vector<std::pair<float*, std::vector<float>>> wg_acc[MAXT];
    // the async proxy: per 16-byte chunk of smem, 1 + the thread whose cp.async data landed there with no
    // fence.proxy.async of that thread since (0: none); per thread the chunks it marked
    std::vector<int16_t> proxy;
    std::vector<int> proxy_chunks[MAXT];
};
inline EmuState g_emu;

inline bool g_emu_random = getenv("EMU_SCHED") && strcmp(getenv("EMU_SCHED"), "random") == 0;
static inline void emu_error(const char* what) {
    if (g_emu.errors++ < 20)
        fprintf(stderr, "EMU ERROR: %s (block %u,%u,%u thread %d)\n", what, blockIdx.x, blockIdx.y, blockIdx.z, g_emu.cur);
}
static inline int emu_tid() { return g_emu.cur; }
// thread t becomes the current one (its index and threadIdx); the caller then switches to its fiber
static inline void emu_enter(int t) {
    const dim3 b = g_emu.block;
    g_emu.cur = t;
    threadIdx = dim3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
}
// The current thread waits: in the default order the next thread of the block that has not returned runs at once (one
// switch, not two through the scheduler: the order emu_run_grid's pass would run them in); after the last one, and in
// the random order always, the scheduler does.
static inline void emu_yield() {
    EmuState& E = g_emu;
    const int t = E.cur;
    if (!g_emu_random)
        for (int u = t + 1; u < E.nt; u++)
            if (!E.done[u]) {
                emu_enter(u);
                emu_switch(&E.sp[t], E.sp[u]);
                return;
            }
    emu_switch(&E.sp[t], E.sched_sp);
}
static inline void emu_arrive_wait(EmuGroup& g) {
    const long gen = g.gen;
    if (++g.arrived >= g.expected) {
        g.arrived = 0;
        g.gen++;
        g_emu.progress++;
        return;
    }
    while (g.gen == gen) emu_yield();
}
static inline void emu_drop(EmuGroup& g) {
    g.expected--;
    g.exited++;
    if (g.arrived > 0 && g.arrived >= g.expected) {
        g.arrived = 0;
        g.gen++;
    }
    g_emu.progress++;
}
static void emu_fiber_entry() {
    g_emu.body(g_emu.ctx);
    const int t = g_emu.cur;
    emu_drop(g_emu.blk);
    emu_drop(g_emu.warp[t / 32]);
    g_emu.done[t] = true;
    emu_switch(&g_emu.sp[t], g_emu.sched_sp);
    abort();  // never resumed
}

static inline void __syncthreads() {
    if (g_emu.blk.exited) emu_error("__syncthreads after some threads of the block returned");
    emu_arrive_wait(g_emu.blk);
}
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_arrive_wait(g_emu.warp[emu_tid() / 32]); }
static inline void emu_warp_sync_checked() {
    EmuGroup& w = g_emu.warp[emu_tid() / 32];
    if (w.exited || w.expected + w.exited != 32) emu_error("warp collective in a warp with exited or missing lanes");
    emu_arrive_wait(w);
}
// The exchange area of the current thread's next warp collective (shuffle, mma, ldmatrix): each lane deposits its
// operands there, waits once for the whole warp (emu_warp_sync_checked) and reads the others'. A thread's collectives
// alternate between two areas, so no second wait guards the area's reuse: a lane writes this area again two collectives
// later, past the wait of the one in between, which no lane reaches before it has read this one.
static inline EmuWarpData& emu_warp_area() {
    const int t = emu_tid();
    return g_emu.wd[g_emu.coll[t]++ & 1][t / 32];
}

template <typename T, typename F>
static inline T emu_shuffle(unsigned mask, T v, F src) {
    static_assert(sizeof(T) == 4, "4-byte shuffles only");
    if (mask != 0xffffffffu) emu_error("partial shuffle mask not emulated");
    EmuWarpData& w = emu_warp_area();
    const int l = emu_tid() % 32;
    memcpy(&w.f[l], &v, 4);
    emu_warp_sync_checked();
    const int s = src(l);
    T r = v;
    if (s >= 0 && s < 32) memcpy(&r, &w.f[s], 4);
    return r;
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int = 32) {
    return emu_shuffle(mask, v, [m](int l) { return l ^ m; });
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int = 32) {
    return emu_shuffle(mask, v, [src](int) { return src & 31; });
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int = 32) {
    return emu_shuffle(mask, v, [d](int l) { return l + (int)d < 32 ? l + (int)d : l; });
}

// Race detector (EMU_SCHED=random): an access of n bytes at p by the current thread's warp.
static inline bool emu_in_smem(const void* p) {
    const unsigned char* c = (const unsigned char*)p;
    return c >= g_emu.smem.data() && c < g_emu.smem.data() + g_emu.smem.size();
}
static inline void emu_shadow_access(const void* p, int n, bool write, bool async) {
    if (!g_emu_random || !emu_in_smem(p)) return;
    EmuState& E = g_emu;
    const uint32_t gen = (uint32_t)E.blk.gen + 1;
    const int16_t w = (int16_t)(E.cur / 32);
    EmuShadow* sh = E.shadow.data() + ((const unsigned char*)p - E.smem.data());
    for (int i = 0; i < n; i++) {
        EmuShadow& b = sh[i];
        if (write) {
            if (b.r_gen == gen && b.r_warp != w)
                emu_error("race: shared memory written while another warp reads it in the same barrier interval");
            else if (b.w_gen == gen && b.w_warp != w)
                emu_error("race: shared memory written by two warps in the same barrier interval");
            b.w_gen = gen;
            b.w_warp = w;
            b.pending = async;
        } else {
            if (b.pending) emu_error("race: shared memory read before its cp.async completed (cp.async.wait_group)");
            else if (b.w_gen == gen && b.w_warp != w)
                emu_error("race: shared memory read in the barrier interval in which another warp wrote it");
            b.r_warp = (b.r_gen == gen && b.r_warp != w) ? -1 : w;
            b.r_gen = gen;
        }
    }
}

// ---------------------------------------------------------------- launches
struct EmuStream { int idx; };  // the stream mode's index (cuda_emu_streams.h); 0 is the legacy default stream
typedef EmuStream* cudaStream_t;
static inline int emu_stream_index(cudaStream_t s) { return s ? s->idx : 0; }
inline int g_emu_order = getenv("EMU_ORDER") ? atoi(getenv("EMU_ORDER")) : 0;
inline long g_emu_launches = 0;

template <typename Fn>
static void emu_run_grid(dim3 grid, dim3 block, size_t smem, Fn& fn) {
    EmuState& E = g_emu;
    const int nt = (int)(block.x * block.y * block.z);
    const long nb = (long)grid.x * grid.y * grid.z;
    g_emu_launches++;
    if (nt <= 0 || nt > 1024 || nb <= 0 || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "EMU: bad launch grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y, grid.z, block.x, block.y,
                block.z);
        E.errors++;
        return;
    }
    if (smem > 227 * 1024) { fprintf(stderr, "EMU: dynamic shared memory %zu > 227 KiB\n", smem); E.errors++; }
    if (!E.stacks) {
        E.stacks = (char*)mmap(nullptr, EmuState::STACK * EmuState::MAXT, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (E.stacks == MAP_FAILED) { perror("mmap"); abort(); }
    }
    E.body = [](void* c) { (*(Fn*)c)(); };
    E.ctx = &fn;
    E.nt = nt;
    E.block = block;
    blockDim = block;
    gridDim = grid;
    std::vector<long> order(nb);
    std::iota(order.begin(), order.end(), 0L);
    if (g_emu_order == 1) std::reverse(order.begin(), order.end());
    if (g_emu_order == 2) {
        uint64_t s = 12345 + g_emu_launches;
        for (long i = nb - 1; i > 0; i--) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            std::swap(order[i], order[(s >> 33) % (i + 1)]);
        }
    }
    E.in_kernel = true;
    for (long k = 0; k < nb; k++) {
        const long b = order[k];
        blockIdx = dim3((unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y), (unsigned)(b / ((long)grid.x * grid.y)));
        E.smem.assign(smem + 16, 0xff);  // fresh shared memory, NaN-filled
        if (g_emu_random) E.shadow.assign(smem + 16, EmuShadow{0, 0, 0, 0, 0});
        E.proxy.assign((smem + 16 + 15) / 16, 0);
        E.blk = EmuGroup{nt, 0, 0, 0};
        for (int w = 0; w < (nt + 31) / 32; w++) E.warp[w] = EmuGroup{std::min(32, nt - 32 * w), 0, 0, 0};
        for (int t = 0; t < nt; t++) {
            // stack: [6 callee-saved][return address = entry][pad], return address slot 16-byte aligned
            // (the tops staggered by a cache line per thread, so that the threads' frames do not all fall in the same
            // cache sets: every switch touches two of them)
            char* top = E.stacks + (size_t)(t + 1) * EmuState::STACK - (size_t)(t % 64) * 64 - (size_t)(t / 64 % 16) * 4096;
            void** slot = (void**)(top - 16);
            slot[0] = (void*)&emu_fiber_entry;
            slot[1] = nullptr;
            void** sp = slot - 6;
            for (int i = 0; i < 6; i++) sp[i] = nullptr;
            E.sp[t] = sp;
            E.done[t] = false;
            E.cp[t].clear();
            E.cp_groups[t] = 0;
            E.coll[t] = 0;
            E.wg[t].clear();
            E.wg_groups[t] = 0;
            E.wg_fenced[t] = false;
            E.wg_acc[t].clear();
            E.proxy_chunks[t].clear();
        }
        int remaining = nt;
        // thread t until it waits at a barrier or returns (the default order: or, having handed over to the next ones
        // (emu_yield), until the last of those does); returns the thread that switched back
        auto run = [&](int t) {
            emu_enter(t);
            emu_switch(&E.sched_sp, E.sp[t]);
            if (E.done[E.cur]) remaining--;
            return E.cur;
        };
        const int nw = (nt + 31) / 32;
        uint64_t rs = 0x9E3779B97F4A7C15ull * (uint64_t)(g_emu_launches * 1000003 + b + 1);
        auto rnd = [&](int n) {  // 0..n-1
            rs = rs * 6364136223846793005ull + 1442695040888963407ull;
            return (int)((rs >> 33) % (uint64_t)n);
        };
        while (g_emu_random && remaining > 0) {
            // the warps in a random order, each run ahead until all its threads wait at __syncthreads or returned
            const long p0 = E.progress;
            int wo[32], lo[32];
            for (int w = 0; w < nw; w++) wo[w] = w;
            for (int i = nw - 1; i > 0; i--) std::swap(wo[i], wo[rnd(i + 1)]);
            for (int k = 0; k < nw; k++) {
                const int w = wo[k], nl = std::min(32, nt - 32 * w);
                for (long pw = -1; pw != E.progress;) {
                    pw = E.progress;
                    for (int i = 0; i < nl; i++) lo[i] = i;
                    for (int i = nl - 1; i > 0; i--) std::swap(lo[i], lo[rnd(i + 1)]);
                    for (int i = 0; i < nl; i++)
                        if (!E.done[32 * w + lo[i]]) run(32 * w + lo[i]);
                }
            }
            if (remaining > 0 && E.progress == p0) {
                fprintf(stderr, "EMU: deadlock in block (%u,%u,%u): %d threads wait at barriers that cannot complete\n",
                        blockIdx.x, blockIdx.y, blockIdx.z, remaining);
                abort();
            }
        }
        while (remaining > 0) {
            const long p0 = E.progress;
            for (int t = 0; t < nt; t++)
                if (!E.done[t]) t = run(t);
            if (remaining > 0 && E.progress == p0) {
                fprintf(stderr, "EMU: deadlock in block (%u,%u,%u): %d threads wait at barriers that cannot complete\n",
                        blockIdx.x, blockIdx.y, blockIdx.z, remaining);
                abort();
            }
        }
        for (int t = 0; t < nt; t++)
            if (!E.wg[t].empty()) {
                E.cur = t;
                emu_error("wgmma products still in flight when the thread returned (no wgmma_wait for their group)");
            }
    }
    E.in_kernel = false;
}

// Runs fn on the stream now (the default mode) or queues it (the stream mode, cuda_emu_streams.h); what, file and
// line name the operation in the stream mode's messages.
template <typename Fn>
static inline void emu_submit(cudaStream_t st, const char* what, const char* file, int line, Fn fn) {
#ifdef EMU_STREAMS
    emu_streams::enqueue(emu_stream_index(st), what, file, line, std::function<void()>(fn));
#else
    (void)st, (void)what, (void)file, (void)line;
    fn();
#endif
}
// Kernel launches and cuBLASLt matmuls issued so far (counted when issued, in either mode) and the last one's name and
// place: train_gpt's --profile checks with them that every launch of a profiled step falls inside a class
// (llmc/profile.cuh, tests/t_profile.sh).
struct EmuLaunchCount {
    long n = 0;
    const char* what = "";
    const char* file = "";
    int line = 0;
};
inline EmuLaunchCount g_emu_launch_count;
static inline void emu_count_launch(const char* what, const char* file, int line) {
    g_emu_launch_count.n++;
    g_emu_launch_count.what = what, g_emu_launch_count.file = file, g_emu_launch_count.line = line;
}
template <typename F, typename... Args>
static void emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t st, const char* what, const char* file, int line,
                       F f, Args... args) {
    emu_count_launch(what, file, line);
    emu_submit(st, what, file, line, [=]() {
        auto fn = [&]() { f(args...); };
        emu_run_grid(grid, block, smem, fn);
    });
}
// EmuLaunch(grid, block, smem, stream).go(kernel, "kernel", __FILE__, __LINE__)(args...) stands for
// kernel<<<grid, block, smem, stream>>>(args...)
struct EmuLaunch {
    dim3 g, b;
    size_t s;
    cudaStream_t st;
    EmuLaunch(dim3 g_, dim3 b_, size_t s_ = 0, cudaStream_t st_ = nullptr) : g(g_), b(b_), s(s_), st(st_) {}
    template <typename K> auto go(K k, const char* what = "kernel", const char* file = "", int line = 0) {
        return [=, *this](auto... a) { emu_launch(g, b, s, st, what, file, line, k, a...); };
    }
};

// ---------------------------------------------------------------- runtime
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidDevice = 101,
       cudaErrorNotReady = 600 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount, cudaDevAttrClockRate, cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem;
    int l2CacheSize;
};
static inline const char* cudaGetErrorString(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? "out of memory" : e == cudaErrorInvalidDevice ? "invalid device ordinal"
           : e ? "emulated error" : "no error";
}
static inline const char* cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorEmulated" : "cudaSuccess"; }
static inline long emu_errors() {
#ifdef EMU_STREAMS
    return g_emu.errors + emu_streams::errors();
#else
    return g_emu.errors;
#endif
}
static inline cudaError_t cudaGetLastError() {
    if (emu_errors()) {
        fprintf(stderr, "EMU: %ld emulation errors so far\n", emu_errors());
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
static inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
// Device memory runs out as a GPU's does: the emulated device holds EMU_DEVICE_MIB MiB (default 80 GiB, an H100's),
// cudaMalloc past it fails with cudaErrorMemoryAllocation ("out of memory"), cudaFree gives an allocation back, and
// cudaMemGetInfo reports what is left. emu_device_take / emu_device_give charge memory that no cudaMalloc returns
// (the NCCL emulation's buffers, nccl.h).
inline double g_emu_device_bytes = getenv("EMU_DEVICE_MIB") ? atof(getenv("EMU_DEVICE_MIB")) * 1048576.0 : 80.0 * 1073741824.0;
inline double g_emu_alloc_bytes = 0;
inline std::unordered_map<void*, size_t> g_emu_allocs;  // the size of every live allocation
inline int g_emu_fill = getenv("EMU_FILL") ? atoi(getenv("EMU_FILL")) : 0xff;
static inline bool emu_device_take(double n) {
    if (g_emu_alloc_bytes + n > g_emu_device_bytes) return false;
    g_emu_alloc_bytes += n;
    return true;
}
static inline void emu_device_give(double n) { g_emu_alloc_bytes -= n; }
// cudaMalloc's file and line name the buffer in the stream mode's messages (the caller's, through GCC's builtins)
static inline cudaError_t cudaMalloc(void** p, size_t n, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (g_emu.in_kernel) emu_error("cudaMalloc inside a kernel");
    if (!emu_device_take((double)n)) return cudaErrorMemoryAllocation;
    void* q = nullptr;
#ifdef EMU_STREAMS
    q = emu_streams::alloc(n, false, file, line);  // filled with 0xff
    if (!q) { emu_device_give((double)n); return cudaErrorMemoryAllocation; }
#else
    (void)file, (void)line;
    if (posix_memalign(&q, 256, n ? n : 1)) { emu_device_give((double)n); return cudaErrorMemoryAllocation; }
#endif
    memset(q, g_emu_fill, n);  // 0xff: NaN in bf16 and fp32, to expose reads of unwritten memory
    g_emu_allocs[q] = n;
    *p = q;
    return cudaSuccess;
}
template <typename T> static inline cudaError_t cudaMalloc(T** p, size_t n, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return cudaMalloc((void**)p, n, file, line);
}
static inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    auto it = g_emu_allocs.find(p);
    if (it == g_emu_allocs.end()) { fprintf(stderr, "EMU: cudaFree of %p, which cudaMalloc did not return\n", p); return cudaErrorInvalidValue; }
    emu_device_give((double)it->second);
    g_emu_allocs.erase(it);
#ifdef EMU_STREAMS
    emu_streams::release(p);  // waits for the device first, as cudaFree does
#else
    free(p);
#endif
    return cudaSuccess;
}
#ifdef EMU_STREAMS
static inline cudaError_t cudaMallocHost(void** p, size_t n, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    *p = emu_streams::alloc(n, true, file, line);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFreeHost(void* p) { if (p) emu_streams::release(p); return cudaSuccess; }
#else
static inline cudaError_t cudaMallocHost(void** p, size_t n) { *p = malloc(n ? n : 1); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
static inline cudaError_t cudaFreeHost(void* p) { free(p); return cudaSuccess; }
#endif
// Copies and memsets. The stream mode queues them: a device-to-device copy or a memset reads and writes its ranges
// when it runs; a copy from pinned memory reads it when it runs, from pageable memory when queued (CUDA stages it);
// a copy into pinned memory poisons the destination when queued, and into pageable memory returns when done; the
// blocking cudaMemcpy is queued on the legacy default stream and waited for; cudaMemset is queued there.
static inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st = nullptr,
                                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (!n) return cudaSuccess;
#ifdef EMU_STREAMS
    const bool src_dev = emu_streams::in_arena(s), dst_dev = emu_streams::in_arena(d);
    const bool src_pageable = !src_dev, dst_pageable = !dst_dev;
    std::shared_ptr<std::vector<char>> staged;
    if (src_pageable) staged = std::make_shared<std::vector<char>>((const char*)s, (const char*)s + n);
    if (emu_streams::is_pinned(d)) emu_streams::poison_pinned(d, n);
    const void* pinned_src = emu_streams::is_pinned(s) ? s : nullptr;
    emu_streams::enqueue(emu_stream_index(st), "cudaMemcpyAsync", file, line, [d, s, n, staged]() {
        emu_streams::access(s, n, false);
        emu_streams::access(d, n, true);
        memmove(d, staged ? (const void*)staged->data() : s, n);
    }, {}, pinned_src, pinned_src ? n : 0);
    if (dst_pageable) emu_streams::sync_last(emu_stream_index(st));
#else
    (void)k, (void)st, (void)file, (void)line;
    memmove(d, s, n);
#endif
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k, const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
    if (!n) return cudaSuccess;
#ifdef EMU_STREAMS
    cudaMemcpyAsync(d, s, n, k, nullptr, file, line);
    emu_streams::sync_last(0);
#else
    (void)k, (void)file, (void)line;
    memmove(d, s, n);
#endif
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st = nullptr, const char* file = __builtin_FILE(),
                                          int line = __builtin_LINE()) {
    if (!n) return cudaSuccess;
    emu_submit(st, "cudaMemset", file, line, [d, v, n]() {
#ifdef EMU_STREAMS
        emu_streams::access(d, n, true);
#endif
        memset(d, v, n);
    });
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void* d, int v, size_t n, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return cudaMemsetAsync(d, v, n, nullptr, file, line);
}
// Streams and events. The default mode runs every kernel, copy and collective when it is called, so an event is
// complete once recorded, a wait on it returns at once and a stream is always idle; flags and priorities are accepted
// and change nothing. The stream mode (cuda_emu_streams.h) queues the work and orders it as a GPU does.
typedef struct EmuEvent { double t; int idx; }* cudaEvent_t;
static inline double emu_now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
#ifdef EMU_STREAMS
static inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new EmuStream{emu_streams::stream_create()}; return cudaSuccess; }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { emu_streams::stream_destroy(s->idx); delete s; return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { emu_streams::sync_stream(emu_stream_index(s)); return cudaSuccess; }
static inline cudaError_t cudaStreamQuery(cudaStream_t s) { return emu_streams::query_stream(emu_stream_index(s)) ? cudaSuccess : cudaErrorNotReady; }
static inline cudaError_t cudaDeviceSynchronize() { emu_streams::sync_device(); return cudaSuccess; }
static inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new EmuEvent{0, emu_streams::event_create()}; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    emu_streams::event_record(e->idx, emu_stream_index(s), [e]() { e->t = emu_now_ms(); });
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { emu_streams::event_sync(e->idx); return cudaSuccess; }
static inline cudaError_t cudaEventQuery(cudaEvent_t e) { return emu_streams::event_query(e->idx) ? cudaSuccess : cudaErrorNotReady; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int = 0) {
    emu_streams::event_wait(emu_stream_index(s), e->idx);
    return cudaSuccess;
}
#else
static inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new EmuStream{0}; return cudaSuccess; }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
static inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new EmuEvent{0, 0}; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) { e->t = emu_now_ms(); return cudaSuccess; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int = 0) { return cudaSuccess; }
#endif
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
enum { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) { return cudaStreamCreate(s); }
static inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int, int) { return cudaStreamCreate(s); }
static inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(b->t - a->t); return cudaSuccess; }
// Each process is one emulated GPU, so a node has as many as it has ranks (mpirun's OMPI_COMM_WORLD_LOCAL_SIZE, or
// LOCAL_WORLD_SIZE); EMU_DEVICES=N sets another count, for the refusal of more ranks than GPUs.
static inline cudaError_t cudaGetDeviceCount(int* n) {
    const char* e = getenv("EMU_DEVICES");
    if (!e) e = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!e) e = getenv("LOCAL_WORLD_SIZE");
    *n = e && atoi(e) > 0 ? atoi(e) : 1;
    return cudaSuccess;
}
// an ordinal past the count is refused, as the runtime does (cudaErrorInvalidDevice)
static inline cudaError_t cudaSetDevice(int d) {
    int n = 0;
    cudaGetDeviceCount(&n);
    return d >= 0 && d < n ? cudaSuccess : cudaErrorInvalidDevice;
}
static inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof(*p));
    strcpy(p->name, "NVIDIA H100 80GB HBM3 (emulated)");
    p->major = 9;  // EMU_CC=8.0 (say) reports another compute capability, for the refusals of newer features
    p->minor = 0;
    const char* cc = getenv("EMU_CC");
    if (cc && sscanf(cc, "%d.%d", &p->major, &p->minor) != 2) { fprintf(stderr, "EMU_CC='%s': expected major.minor\n", cc); exit(1); }
    p->multiProcessorCount = 132;
    p->totalGlobalMem = (size_t)g_emu_device_bytes;
    p->l2CacheSize = 50 << 20;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    switch (a) {
        case cudaDevAttrMultiProcessorCount: *v = 132; break;
        case cudaDevAttrClockRate: *v = 1980000; break;
        case cudaDevAttrMemoryClockRate: *v = 2619000; break;
        case cudaDevAttrGlobalMemoryBusWidth: *v = 5120; break;
    }
    return cudaSuccess;
}
static inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    *total_b = (size_t)g_emu_device_bytes;
    *free_b = (size_t)(g_emu_device_bytes - g_emu_alloc_bytes);
    return cudaSuccess;
}
static inline cudaError_t cudaDriverGetVersion(int* v) { *v = 12040; return cudaSuccess; }
static inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = 12040; return cudaSuccess; }
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int v) {
    if (v > 227 * 1024) { fprintf(stderr, "EMU: cudaFuncSetAttribute max dynamic smem %d > 227 KiB\n", v); return cudaErrorInvalidValue; }
    return cudaSuccess;
}
