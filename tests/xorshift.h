/*
 * xorshift.h — the tests' input generator: xorshift64 (Marsaglia, 2003,
 * shifts 13, 7, 17), fast and reproducible from a nonzero seed.  Inputs
 * only: what must reproduce across the engine draws from src/rng.h.
 */
#ifndef HYDRA_TEST_XORSHIFT_H
#define HYDRA_TEST_XORSHIFT_H

#include <stdint.h>

static inline uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline float rng_float(uint64_t *s) /* uniform in [-1, 1) */
{
    return (float)((double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

#endif
