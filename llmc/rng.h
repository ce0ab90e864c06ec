// llmc/rng.h: deterministic random numbers.
// Initialisation is counter-based: element i of parameter tensor k gets
// normal(hash(seed, k, i)), so the values do not depend on thread count, on how a tensor is
// sharded across ranks, or on the order tensors are visited. Sampling uses a small
// sequential generator whose state is one uint64 (saved in checkpoints).
#pragma once
#include <cmath>
#include <cstdint>

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// uniform in (0, 1), 53 bits
static inline double u01_from_bits(uint64_t b) { return ((b >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// standard normal for (seed, stream, index) by Box-Muller on two hashed uniforms
static inline double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h = splitmix64(splitmix64(seed ^ (stream * 0xD1B54A32D192ED03ull)) + index);
    double u1 = u01_from_bits(h), u2 = u01_from_bits(splitmix64(h));
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// The sampling generator's first state for the run's --seed (TrainState.rng, saved in checkpoints), the same in both
// trainers: the seed mixed with a fixed constant.
static inline uint64_t rng_sampling_seed(uint64_t seed) { return seed ^ 0x5DEECE66Dull; }

// sequential generator for sampling
static inline double rng_next_u01(uint64_t* state) {
    *state = splitmix64(*state);
    return u01_from_bits(*state);
}
