// llmc/rng.h: deterministic random numbers.
// Initialisation is counter-based: element i of parameter tensor k gets
// normal(hash(seed, k, i)), so the values do not depend on thread count, on how a tensor is
// sharded across ranks, or on the order tensors are visited. Sampling uses a small
// sequential generator whose state is one uint64 (saved in checkpoints).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// uniform in (0, 1), 53 bits
static inline double u01_from_bits(uint64_t b) { return ((b >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// The standard normal of the initialisation, by Box-Muller on two uniforms hashed from (seed, stream, index):
//   z = sqrt(-2 log u1) cos(2 pi u2),   u1 = (2k + 1) / 2^53 (k: 52 bits of h),   u2 = (v + 1/2) / 2^53 (v: 53 bits)
// log and cos are polynomials here, not the C library's: they vectorise (a loop of normal_at runs at about 1.5 ns a
// value on one AVX-512 core against 23 ns for std::log and std::cos), and they use only IEEE operations and explicit
// fma, which round the same way whether the compiler has FMA instructions, contracts a*b+c or not, so both trainers
// (g++ and nvcc's host compiler, any -march) make the same bits. Both are within a few 1e-16 of the exact functions
// (test_gpt_cpu units compares them with logl and cosl).

// c[0] x^(n-1) + c[1] x^(n-2) + ... + c[n-1] by Horner's rule, each step one explicit fma, written out at compile
// time (a loop here would keep the caller's loop from vectorising)
template <int i, int n>
static inline double horner_step(double x, const double (&c)[n], double p) {
    if constexpr (i == n) return p;
    else return horner_step<i + 1>(x, c, std::fma(p, x, c[i]));
}
template <int n>
static inline double horner_fma(double x, const double (&c)[n]) { return horner_step<1>(x, c, c[0]); }

// log x for a positive normal double x (the initialisation's u1 in (0, 1); the CPU trainer's cross-entropy takes the
// log of its sums of exponentials, at least 1, through it too): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh s with
// s = (m - 1) / (m + 1), |s| < 0.172, as t (1 + w/3 + w^2/5 + ... + w^10/21) with t = 2s, w = s^2 (the next term is
// below 3e-17 of the sum).
static constexpr double LOG_ATANH_C[] = {1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
                                         1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3};
static inline double log_pos(double x) {
    uint64_t b;
    std::memcpy(&b, &x, 8);
    // e from the exponent bits of x / sqrt(1/2): x's bits plus a constant that keeps them positive for the shift
    const uint64_t eb = (b + (0x3ff0000000000000ull - 0x3fe6a09e667f3bcdull)) >> 52;
    const uint64_t mb = b - ((eb - 0x3ff) << 52);
    const double e = (double)((int32_t)eb - 0x3ff);
    double m;
    std::memcpy(&m, &mb, 8);
    const double s = (m - 1.0) / (m + 1.0), w = s * s, t = 2.0 * s;
    return std::fma(e, 0.6931471805599453094, std::fma(t * w, horner_fma(w, LOG_ATANH_C), t));  // e log 2 + log m
}

// cos(2 pi (v + 1/2) / 2^53) for a 53-bit integer v. In quarter turns the angle is (v + 1/2) / 2^51 = q + r, q the
// nearest whole quarter and r in [-1/2, 1/2], both from v's bits exactly; then cos = c, -s, -c, s for q = 0, 1, 2, 3
// with c = cos(pi/2 r) and s = sin(pi/2 r), Taylor polynomials in r (the next terms are below 1e-17).
static constexpr double COS_QUARTER_C[] = {  // (-1)^n (pi/2)^2n / (2n)!, n = 9 down to 0
    -5.2944002007346237619e-13, 6.5659631149794723622e-11, -6.3866030837918522411e-9, 4.7108747788181715037e-7,
    -2.5202042373060605481e-5,  9.1926027483942658024e-4,  -2.0863480763352960873e-2, 2.5366950790104801364e-1,
    -1.2337005501361698274,     1.0};
static constexpr double SIN_QUARTER_C[] = {  // (-1)^n (pi/2)^(2n+1) / (2n+1)!, n = 8 down to 0
    6.0669357311061956671e-12, -6.6880351098114672325e-10, 5.6921729219679268118e-8, -3.5988432352120853405e-6,
    1.6044118478735982187e-4,  -4.6817541353186881007e-3,  7.9692626246167045121e-2, -6.4596409750624625366e-1,
    1.5707963267948966192};
static inline double cos_turn(uint64_t v) {
    const uint64_t a = v + (1ull << 50);
    const uint64_t q = (a >> 51) & 3;
    const uint64_t fb = 0x4330000000000000ull | (a & ((1ull << 51) - 1));  // the double 2^52 + a's low 51 bits
    double f;
    std::memcpy(&f, &fb, 8);
    const double r = ((f - 4503599627370496.0) - (1125899906842624.0 - 0.5)) * (1.0 / 2251799813685248.0);
    const double r2 = r * r;
    const double c = horner_fma(r2, COS_QUARTER_C), s = horner_fma(r2, SIN_QUARTER_C) * r;
    // chosen and signed with bit masks: no branch, so the caller's loop vectorises
    uint64_t cb, sb;
    std::memcpy(&cb, &c, 8);
    std::memcpy(&sb, &s, 8);
    const uint64_t odd = 0 - (q & 1), neg = ((q + 1) >> 1) & 1;
    const uint64_t yb = ((sb & odd) | (cb & ~odd)) ^ (neg << 63);
    double y;
    std::memcpy(&y, &yb, 8);
    return y;
}

// The two uniforms' integers for (seed, stream, index): k (52 bits) and v (53 bits).
static inline uint64_t normal_hash(uint64_t seed, uint64_t stream, uint64_t index) {
    return splitmix64(splitmix64(seed ^ (stream * 0xD1B54A32D192ED03ull)) + index);
}

static inline double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    const uint64_t h = normal_hash(seed, stream, index);
    const uint64_t ub = 0x3ff0000000000000ull | (h >> 12);  // the double 1 + k / 2^52, in [1, 2)
    double u1;
    std::memcpy(&u1, &ub, 8);
    u1 = (u1 - 1.0) + 0x1p-53;  // (2k + 1) / 2^53, both steps exact
    return std::sqrt(-2.0 * log_pos(u1)) * cos_turn(splitmix64(h) >> 11);
}

// The sampling generator's first state for the run's --seed (TrainState.rng, saved in checkpoints), the same in both
// trainers: the seed mixed with a fixed constant.
static inline uint64_t rng_sampling_seed(uint64_t seed) { return seed ^ 0x5DEECE66Dull; }

// sequential generator for sampling
static inline double rng_next_u01(uint64_t* state) {
    *state = splitmix64(*state);
    return u01_from_bits(*state);
}
