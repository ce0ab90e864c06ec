// tests/cuda_emu/include/llmc/mma.cuh: the emulation's llmc/mma.cuh, the same functions and macro on the host
// (llmc/mma.cuh lists them and documents the fragment layouts these follow):
//   mma_bf16_16816, mma_f16_16816, ldmatrix_x4, ldmatrix_x4_trans   warp collectives: each lane deposits its registers or row
//       address in the warp's exchange area, waits for the whole warp (an emulation error where lanes have
//       returned), and reads back its own result
//   lds32                                            a 32-bit load, seen by the race detector as a read
//   cp_async16, cp_async_commit, cp_async_wait<N>    the copy is queued per thread and its destination
//       poisoned (0xff) at once; the data lands when cp_async_wait retires its group
//   DYNAMIC_SMEM(name)                               name = the block's dynamic shared memory (emu_smem)
//   wgmma_* and fence_proxy_async                    the Hopper part, at the end of this file: products queued per
//       thread and run at their group's wait, the operands read through the descriptors as the hardware reads them
// The race detector, the cp.async queues and the shared memory itself are in cuda_emu.h (the launch resets
// them per block). How it replaces the real header: the emulated builds (tests/t_gpu_emulated.sh,
// t_attention.sh, t_matmul_emulated.sh) compile with -Itests/cuda_emu/include before the sources' -I, and the
// sources include it as "llmc/mma.cuh" from llmc/ (a quoted include looks beside the including file first:
// llmc/llmc/mma.cuh does not exist), so this file is found first; tests/cuda_emu/rewrite.py only rewrites the
// kernel launches.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>
#include "cuda_emu.h"

static inline uint16_t emu_half(uint32_t r, int hi) { return hi ? (uint16_t)(r >> 16) : (uint16_t)(r & 0xffff); }
static inline float emu_bf(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; memcpy(&f, &u, 4); return f; }
// d[4] += A[16x16] B[16x8], fragments as documented in llmc/mma.cuh (PTX ISA m16n8k16 layouts); Elem turns one
// 16-bit value into fp32 (bf16 or fp16)
template <float (*Elem)(uint16_t)>
static inline void emu_mma_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    EmuWarpData& w = emu_warp_area();
    const int l = emu_tid() % 32;
    for (int i = 0; i < 4; i++) w.u[l][i] = a[i];
    w.u[l][4] = b0;
    w.u[l][5] = b1;
    emu_warp_sync_checked();
    const int g = l / 4, q = l % 4;
    // this lane's rows g and g + 8 of A and columns 2q and 2q + 1 of B, in fp32. A: a0 (row g, cols 2q..2q+1) a1 (row
    // g+8) a2 (row g, cols 2q+8..) a3 (row g+8, cols 2q+8..); B: b0 (rows 2q..2q+1, col g) b1 (rows 2q+8..)
    float ar[2][16], bc[2][16];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++) {
            ar[h][k] = Elem(emu_half(w.u[g * 4 + (k % 8) / 2][h + 2 * (k >= 8)], k % 2));
            bc[h][k] = Elem(emu_half(w.u[(2 * q + h) * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2));
        }
    for (int e = 0; e < 4; e++) {  // d[e]: row g + 8 (e / 2), column 2q + e % 2
        const float* ra = ar[e >> 1];
        const float* cb = bc[e & 1];
        float s = 0;
        for (int k = 0; k < 16; k++) s += ra[k] * cb[k];
        d[e] += s;
    }
}
static inline void mma_bf16_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emu_mma_16816<emu_bf>(d, a, b0, b1); }
static inline void mma_f16_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emu_mma_16816<emu_h2f>(d, a, b0, b1); }
// lane l gives the address of row l % 8 of tile l / 8. Plain: r[i] = (row g; cols 2q, 2q+1) of tile i.
// Transposed: r[i] = (rows 2q, 2q+1; col g) of tile i.
static inline void emu_ldmatrix_x4(uint32_t* r, const void* row, bool trans) {
    EmuWarpData& w = emu_warp_area();
    const int l = emu_tid() % 32;
    if (((uintptr_t)row & 15) != 0) emu_error("ldmatrix row address not 16-byte aligned");
    emu_shadow_access(row, 16, false, false);
    w.addr[l] = row;
    emu_warp_sync_checked();
    const int g = l / 4, q = l % 4;
    for (int i = 0; i < 4; i++) {
        // the two 16-bit values of register i: (row g; cols 2q, 2q+1), or transposed (rows 2q, 2q+1; col g)
        const uint16_t* lo = trans ? (const uint16_t*)w.addr[8 * i + 2 * q] + g : (const uint16_t*)w.addr[8 * i + g] + 2 * q;
        const uint16_t* hi = trans ? (const uint16_t*)w.addr[8 * i + 2 * q + 1] + g : lo + 1;
        r[i] = (uint32_t)*lo | ((uint32_t)*hi << 16);
    }
}
static inline void ldmatrix_x4(uint32_t* r, const void* row) { emu_ldmatrix_x4(r, row, false); }
static inline void ldmatrix_x4_trans(uint32_t* r, const void* row) { emu_ldmatrix_x4(r, row, true); }
// the async proxy: a cp.async's data landed at p (16 bytes) by the current thread; wgmma may read it only after that
// thread's fence_proxy_async
static inline void emu_proxy_mark(const unsigned char* p) {
    if (!emu_in_smem(p)) return;
    const int t = emu_tid(), c = (int)((p - g_emu.smem.data()) / 16);
    g_emu.proxy[c] = (int16_t)(t + 1);
    g_emu.proxy_chunks[t].push_back(c);
}
// cp.async: the destination poisoned now, the data delivered when the group retires (cp_async_wait)
static inline void cp_async16(void* s, const void* g) {
    if (((uintptr_t)s & 15) || ((uintptr_t)g & 15)) emu_error("cp.async 16 with a misaligned address");
    EmuCpAsync c;
    c.dst = (unsigned char*)s;
    memcpy(c.data, g, 16);
    c.group = -1;  // not committed yet
    g_emu.cp[emu_tid()].push_back(c);
    emu_shadow_access(s, 16, true, true);
    memset(s, 0xff, 16);
}
static inline void cp_async_commit() {
    const int t = emu_tid();
    for (EmuCpAsync& c : g_emu.cp[t])
        if (c.group < 0) c.group = g_emu.cp_groups[t];
    g_emu.cp_groups[t]++;
}
// retires every committed group but the newest N of this thread: their data lands
template <int N> static inline void cp_async_wait() {
    const int t = emu_tid();
    std::vector<EmuCpAsync>& q = g_emu.cp[t];
    size_t k = 0;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group >= 0 && q[i].group < g_emu.cp_groups[t] - N) {
            memcpy(q[i].dst, q[i].data, 16);
            emu_proxy_mark(q[i].dst);
            if (g_emu_random && emu_in_smem(q[i].dst))
                for (int b = 0; b < 16; b++) g_emu.shadow[q[i].dst - g_emu.smem.data() + b].pending = 0;
        } else {
            q[k++] = q[i];
        }
    }
    q.resize(k);
}
// 32-bit shared load: one fragment register, watched by the race detector
static inline uint32_t lds32(const void* p) {
    emu_shadow_access(p, 4, false, false);
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
// the block's dynamic shared memory: a fresh NaN-filled buffer of the launch's size per block (emu_run_grid)
static inline unsigned char* emu_smem() { return g_emu.smem.data(); }
#define DYNAMIC_SMEM(name) unsigned char* name = emu_smem()

// ---- wgmma (llmc/mma.cuh's Hopper part; the layouts and rules are documented there) ----------------------------------
// A product is queued when issued: each lane deposits its A registers and the descriptors in the warp's exchange area
// (the descriptors must agree across the warp), the accumulators' value is kept aside and the registers filled with NaN,
// so that a read before the wait shows. wgmma_wait<N> runs the products of every group but the newest N, in order: each
// lane computes its own accumulators (rows 16 (warp % 4) + g, + 8; columns 8j + 2q, + 1), A and B read from shared
// memory at that moment through the descriptor (128-byte swizzle only), the swizzle applied to the shared-memory
// address, whose window here starts at EMU_SMEM_BASE (not 1024-aligned: a kernel must align its tiles itself).
// Errors: a block that is not whole warpgroups, a product with no wgmma_fence since the thread's last wait (or the
// kernel's start; stricter than PTX, which asks for the fence only where the registers were touched in between),
// differing descriptors within a warp (not checked across the warpgroup's four warps), another layout than the
// 128-byte swizzle or a base offset, an address outside shared memory, a read of bytes that a cp.async delivered with no
// fence_proxy_async of its thread since, products never waited for at the thread's return. Not seen: plain stores to
// shared memory (for the async proxy), and the compiler's moves of register accesses across the fence (the source's
// order runs here; tests/t_resources.sh reads the PTX for them).
#define LLMC_WGMMA 1
// the shared-memory address of the dynamic shared memory's first byte: 16-byte aligned as on a GPU, but not 1024-byte
// aligned, so that smem_align1024 moves the kernels' swizzled tiles as it may on a GPU
static const uint32_t EMU_SMEM_BASE = 1040;
static inline uint32_t smem_u32(const void* p) {
    if (!emu_in_smem(p)) emu_error("shared-memory address of a pointer outside the block's shared memory");
    return EMU_SMEM_BASE + (uint32_t)((const unsigned char*)p - g_emu.smem.data());
}
static inline unsigned char* smem_align1024(unsigned char* p) { return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u); }
static inline uint64_t wgmma_desc(const void* tile, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((smem_u32(tile) & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
static inline void fence_proxy_async() {
    const int t = emu_tid();
    for (int c : g_emu.proxy_chunks[t])
        if (g_emu.proxy[c] == t + 1) g_emu.proxy[c] = 0;
    g_emu.proxy_chunks[t].clear();
}
static inline void wgmma_fence() { g_emu.wg_fenced[emu_tid()] = true; }
// the compiler's ordering around the fence: nothing to do where the source's order is the order that runs
template <typename T, int R, int C> static inline void wgmma_fence_operands(T (&)[R][C]) {}
static inline void wgmma_commit() {
    const int t = emu_tid();
    for (EmuWgmma& op : g_emu.wg[t])
        if (op.group < 0) op.group = g_emu.wg_groups[t];
    g_emu.wg_groups[t]++;
}
#ifdef ENABLE_FP16
static inline float emu_wg_elem_value(uint16_t v) { return emu_h2f(v); }
#else
static inline float emu_wg_elem_value(uint16_t v) { return emu_bf(v); }
#endif
// element (mn, k) of an operand through its descriptor: K-major (mn the M or N index) or MN-major
static inline float emu_wgmma_elem(uint64_t desc, int mn, int k, bool mn_major) {
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4,
                   sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
    if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0) {
        emu_error("wgmma descriptor: only the 128-byte swizzle with base offset 0 is emulated");
        return 0.0f;
    }
    uint32_t addr = mn_major ? start + (uint32_t)(mn / 64) * lbo + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128 + 2 * (uint32_t)(mn % 64)
                             : start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 128 + 2 * (uint32_t)k;
    addr ^= ((addr >> 7) & 7) << 4;  // the 128-byte swizzle: address bits 4-6 ^= bits 7-9
    if (addr < EMU_SMEM_BASE || addr - EMU_SMEM_BASE + 2 > g_emu.smem.size()) {
        emu_error("wgmma operand outside the block's shared memory");
        return 0.0f;
    }
    const size_t off = addr - EMU_SMEM_BASE;
    const unsigned char* p = g_emu.smem.data() + off;
    if (g_emu.proxy[off / 16])
        emu_error("wgmma reads shared memory that a cp.async wrote, with no fence.proxy.async of the writing thread since");
    emu_shadow_access(p, 2, false, false);
    uint16_t v;
    memcpy(&v, p, 2);
    return emu_wg_elem_value(v);
}
static inline void emu_wgmma_issue(float* d, int n, const uint32_t* a, uint64_t da, uint64_t db, int accumulate, int tb) {
    EmuState& E = g_emu;
    const int t = emu_tid(), l = t % 32;
    if (E.nt % 128) emu_error("wgmma in a block that is not whole warpgroups (128 threads)");
    if (!E.wg_fenced[t]) emu_error("wgmma product with no wgmma_fence since the thread's last wgmma_wait (or its start)");
    EmuWarpData& w = emu_warp_area();
    if (a)
        for (int i = 0; i < 4; i++) w.u[l][i] = a[i];
    else
        w.u[l][0] = (uint32_t)da, w.u[l][1] = (uint32_t)(da >> 32);
    w.u[l][4] = (uint32_t)db;
    w.u[l][5] = (uint32_t)(db >> 32);
    emu_warp_sync_checked();
    if (w.u[0][4] != w.u[l][4] || w.u[0][5] != w.u[l][5] || (!a && (w.u[0][0] != w.u[l][0] || w.u[0][1] != w.u[l][1])))
        emu_error("wgmma: the lanes of a warp give different descriptors");
    EmuWgmma op;
    op.d = d, op.n = n, op.accumulate = accumulate, op.tb = tb, op.group = -1, op.a_regs = a != nullptr, op.da = da, op.db = db;
    if (a)
        for (int j = 0; j < 32; j++)
            for (int i = 0; i < 4; i++) op.a[j][i] = w.u[j][i];
    bool known = false;
    for (auto& e : E.wg_acc[t]) known |= e.first == d;
    if (!known) E.wg_acc[t].push_back({d, std::vector<float>(d, d + n / 2)});
    for (int i = 0; i < n / 2; i++) d[i] = NAN;
    E.wg[t].push_back(op);
}
// the current lane's part of one product, into its running accumulators acc[n / 2]
static inline void emu_wgmma_run(const EmuWgmma& op, float* acc) {
    const int t = emu_tid(), l = t % 32, g = l / 4, q = l % 4, row0 = 16 * ((t / 32) % 4) + g;
    float ar[2][16];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++)
            ar[h][k] = op.a_regs ? emu_wg_elem_value(emu_half(op.a[g * 4 + (k % 8) / 2][h + 2 * (k >= 8)], k % 2))
                                 : emu_wgmma_elem(op.da, row0 + 8 * h, k, false);
    for (int j = 0; j < op.n / 8; j++)
        for (int c = 0; c < 2; c++) {
            const int col = 8 * j + 2 * q + c;
            float bk[16];
            for (int k = 0; k < 16; k++) bk[k] = emu_wgmma_elem(op.db, col, k, op.tb != 0);
            for (int h = 0; h < 2; h++) {
                float s = 0;
                for (int k = 0; k < 16; k++) s += ar[h][k] * bk[k];
                float& x = acc[4 * j + 2 * h + c];
                x = op.accumulate ? x + s : s;
            }
        }
}
template <int N> static inline void wgmma_wait() {
    EmuState& E = g_emu;
    const int t = emu_tid();
    std::vector<EmuWgmma>& q = E.wg[t];
    size_t k = 0;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group >= 0 && q[i].group < E.wg_groups[t] - N) {
            for (auto& e : E.wg_acc[t])
                if (e.first == q[i].d) emu_wgmma_run(q[i], e.second.data());
        } else {
            q[k++] = q[i];
        }
    }
    q.resize(k);
    // accumulators that no product in flight writes get their values back
    std::vector<std::pair<float*, std::vector<float>>>& acc = E.wg_acc[t];
    size_t m = 0;
    for (size_t i = 0; i < acc.size(); i++) {
        bool busy = false;
        for (const EmuWgmma& op : q) busy |= op.d == acc[i].first;
        if (busy) {
            acc[m++] = std::move(acc[i]);
        } else {
            memcpy(acc[i].first, acc[i].second.data(), acc[i].second.size() * sizeof(float));
        }
    }
    acc.resize(m);
    E.wg_fenced[t] = false;
}
template <int TB> static inline void wgmma_ss_n64(float* d, uint64_t da, uint64_t db, int acc) { emu_wgmma_issue(d, 64, nullptr, da, db, acc, TB); }
template <int TB> static inline void wgmma_ss_n128(float* d, uint64_t da, uint64_t db, int acc) { emu_wgmma_issue(d, 128, nullptr, da, db, acc, TB); }
template <int TB> static inline void wgmma_rs_n64(float* d, const uint32_t* a, uint64_t db, int acc) { emu_wgmma_issue(d, 64, a, 0, db, acc, TB); }
template <int TB> static inline void wgmma_rs_n128(float* d, const uint32_t* a, uint64_t db, int acc) { emu_wgmma_issue(d, 128, a, 0, db, acc, TB); }
