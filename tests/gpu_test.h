/*
 * gpu_test.h — what the CUDA tests (tests/test_cuda_*.c) share: the skip
 * when no device is usable, the check that freed sessions hold no memory.
 */
#ifndef HYDRA_TEST_GPU_TEST_H
#define HYDRA_TEST_GPU_TEST_H

#include "gpu/gpu.h"
#include "test.h"

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

#endif
