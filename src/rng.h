/*
 * rng.h — the engine's random streams: xoshiro256** (Blackman and Vigna,
 * 2018) seeded through splitmix64 (Steele, Lea and Flood, 2014), the
 * seeding its authors recommend (no state is all zero).  Every stream that
 * must reproduce from a seed (sampling, speculative acceptance, synthetic
 * weights) draws from these, so one seed means the same bits everywhere.
 */
#ifndef HYDRA_RNG_H
#define HYDRA_RNG_H

#include <stdint.h>

/* Advances *state and returns its next output (full period 2^64). */
static inline uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static inline uint64_t rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* A xoshiro256** state from a 64-bit seed. */
static inline void rng_seed(uint64_t s[4], uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        s[i] = splitmix64(&seed);
}

static inline uint64_t xoshiro_next(uint64_t s[4])
{
    const uint64_t result = rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1): the top 53 bits as a double's mantissa. */
static inline double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

#endif
