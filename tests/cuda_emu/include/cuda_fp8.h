// tests/cuda_emu/include/cuda_fp8.h: the fp8 types of CUDA's cuda_fp8.h on the host, as llmc/fp8.cuh uses them:
// __nv_fp8_e4m3 and __nv_fp8_e5m2 (one byte, __x), built from a float with round-to-nearest-even and
// __NV_SATFINITE (what CUDA's constructors do), read back with an explicit conversion to float, and
// __nv_cvt_float_to_fp8 with both saturation modes.
//   E4M3 ("fn"): bias 7, 3 mantissa bits, subnormals down to 2^-9, largest finite 448 (0x7e), no infinities,
//                NaN = 0x7f / 0xff.
//   E5M2:        bias 15, 2 mantissa bits, subnormals down to 2^-16, largest finite 57344 (0x7b), inf 0x7c,
//                NaN 0x7d-0x7f (and negative).
// Encoding, as CUDA documents it: NaN -> 0x7f (the sign is dropped); |x| beyond the largest finite value ->
// +-largest finite with __NV_SATFINITE (inf included), with __NV_NOSAT -> NaN (E4M3) or +-inf (E5M2) for |x| at
// or past the midpoint to the next binade step; otherwise the nearest grid value, ties to the even mantissa; a
// value rounding to 0 keeps its sign (0x80 = -0).
#pragma once
#include "cuda_emu.h"

typedef unsigned char __nv_fp8_storage_t;
typedef enum { __NV_NOSAT = 0, __NV_SATFINITE = 1 } __nv_saturation_t;
typedef enum { __NV_E4M3 = 0, __NV_E5M2 = 1 } __nv_fp8_interpretation_t;

// the format's mantissa bits, exponent bias, largest finite value and its code
struct EmuFp8Spec { int mbits, bias; double max; unsigned char max_code; };
static inline EmuFp8Spec emu_fp8_spec(__nv_fp8_interpretation_t f) {
    return f == __NV_E4M3 ? EmuFp8Spec{3, 7, 448.0, 0x7e} : EmuFp8Spec{2, 15, 57344.0, 0x7b};
}

static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat, __nv_fp8_interpretation_t f) {
    const EmuFp8Spec s = emu_fp8_spec(f);
    if (std::isnan(x)) return 0x7f;
    const unsigned char sign = std::signbit(x) ? 0x80 : 0x00;
    const double a = std::fabs((double)x);
    const int emin = 1 - s.bias;  // exponent of the smallest normal; subnormals share its quantum
    // the quantum (grid spacing) at a: 2^(e - mbits) with e = max(floor(log2 a), emin); a is a float, so a / q is
    // exact in double and nearbyint rounds it to nearest even (the default rounding mode)
    int e = emin;
    if (a > 0 && std::isfinite(a)) {
        int ex;
        std::frexp(a, &ex);  // a = m 2^ex, m in [0.5, 1)
        e = std::max(ex - 1, emin);
    }
    const double q = std::ldexp(1.0, e - s.mbits);
    const double r = std::isfinite(a) ? std::nearbyint(a / q) * q : a;
    if (r > s.max) {
        if (sat == __NV_SATFINITE) return (unsigned char)(sign | s.max_code);
        return f == __NV_E4M3 ? 0x7f : (unsigned char)(sign | 0x7c);
    }
    if (r == 0) return sign;
    // encode r: normal when r >= 2^emin (exponent field e + bias, the leading 1 dropped), else subnormal
    int ex;
    std::frexp(r, &ex);
    const int er = ex - 1;
    if (er < emin) return (unsigned char)(sign | (int)(r / std::ldexp(1.0, emin - s.mbits)));
    const int mant = (int)(r / std::ldexp(1.0, er - s.mbits)) - (1 << s.mbits);
    return (unsigned char)(sign | ((er + s.bias) << s.mbits) | mant);
}

static inline float emu_fp8_to_float(__nv_fp8_storage_t b, __nv_fp8_interpretation_t f) {
    const EmuFp8Spec s = emu_fp8_spec(f);
    const int mmask = (1 << s.mbits) - 1, emask = f == __NV_E4M3 ? 0xf : 0x1f;
    const int ef = (b >> s.mbits) & emask, m = b & mmask;
    const double sign = (b & 0x80) ? -1.0 : 1.0;
    if (f == __NV_E4M3 && ef == 0xf && m == mmask) return NAN;
    if (f == __NV_E5M2 && ef == 0x1f) return m == 0 ? (float)(sign * INFINITY) : NAN;
    if (ef == 0) return (float)(sign * std::ldexp((double)m, 1 - s.bias - s.mbits));
    return (float)(sign * std::ldexp((double)((1 << s.mbits) | m), ef - s.bias - s.mbits));
}

struct __nv_fp8_e4m3 {
    __nv_fp8_storage_t __x;
    __nv_fp8_e4m3() = default;
    explicit __nv_fp8_e4m3(float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3)) {}
    explicit operator float() const { return emu_fp8_to_float(__x, __NV_E4M3); }
};
struct __nv_fp8_e5m2 {
    __nv_fp8_storage_t __x;
    __nv_fp8_e5m2() = default;
    explicit __nv_fp8_e5m2(float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2)) {}
    explicit operator float() const { return emu_fp8_to_float(__x, __NV_E5M2); }
};
