/*
 * gpu_test.h — what the CUDA tests (tests/test_cuda_*.c) share: the skip
 * when no device is usable, the check that freed sessions hold no memory,
 * the kernels' 8-bit activation rule on the host.
 */
#ifndef HYDRA_TEST_GPU_TEST_H
#define HYDRA_TEST_GPU_TEST_H

#include "gpu/gpu.h"
#include "test.h"

#include <math.h>
#include <stdint.h>

/* Skips the test, saying why, when no CUDA device is usable (always in a
 * build without CUDA). */
#define REQUIRE_GPU()                                                         \
    do {                                                                      \
        const char *why_gpu_;                                                 \
        if (!gpu_available(&why_gpu_))                                        \
            SKIP("%s", why_gpu_);                                             \
    } while (0)

/* After a cycle's sessions are freed, hydra's accounting (gpu_mem_usage)
 * must hold no bytes of any purpose; fails naming the cycle and purpose. */
#define CHECK_NO_GPU_MEMORY_HELD(cycle)                                       \
    do {                                                                      \
        uint64_t held_[GPU_MEM_COUNT];                                        \
        gpu_mem_usage(held_);                                                 \
        for (int p_ = 0; p_ < GPU_MEM_COUNT; p_++)                            \
            if (held_[p_] != 0)                                               \
                FAIL("cycle %d: %llu bytes of %s still held", (cycle),        \
                     (unsigned long long)held_[p_], gpu_purpose_name((gpu_purpose)p_)); \
    } while (0)

/* The 8-bit activation rule of quantize.cu and the matvec kernels, for one
 * block of 32 values: d = amax / 127, q = round-half-even(x * 127 / amax). */
static inline void gpu_test_q8_block(const float *x, int8_t *q, float *d)
{
    float amax = 0;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    *d = amax / 127.0f;
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < 32; i++)
        q[i] = (int8_t)nearbyintf(x[i] * iscale);
}

/* The rule over n values (a multiple of 32): n / 32 scales into d. */
static inline void gpu_test_q8_rule(const float *x, int n, int8_t *q, float *d)
{
    for (int b = 0; b < n / 32; b++)
        gpu_test_q8_block(x + 32 * b, q + 32 * b, &d[b]);
}

#endif
