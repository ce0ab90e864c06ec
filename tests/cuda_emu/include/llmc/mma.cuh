// tests/cuda_emu/include/llmc/mma.cuh: the emulation's llmc/mma.cuh, the same functions and macro on the host
// (llmc/mma.cuh lists them and documents the fragment layouts these follow):
//   mma_bf16_16816, mma_f16_16816, ldmatrix_x4, ldmatrix_x4_trans   warp collectives: each lane deposits its registers or row
//       address in the warp's exchange area, waits for the whole warp (an emulation error where lanes have
//       returned), and reads back its own result
//   lds32                                            a 32-bit load, seen by the race detector as a read
//   cp_async16, cp_async_commit, cp_async_wait<N>    the copy is queued per thread and its destination
//       poisoned (0xff) at once; the data lands when cp_async_wait retires its group
//   DYNAMIC_SMEM(name)                               name = the block's dynamic shared memory (emu_smem)
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

