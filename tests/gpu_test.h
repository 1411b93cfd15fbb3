/*
 * gpu_test.h — what the CUDA tests (tests/test_cuda_*.c) share: the skip
 * when no device is usable.
 */
#ifndef HYDRA_TEST_GPU_TEST_H
#define HYDRA_TEST_GPU_TEST_H

#include "gpu/gpu.h"
#include "test.h"

/* Skips the test, saying why, when no CUDA device is usable (always in a
 * build without CUDA). */
#define REQUIRE_GPU()                                                         \
    do {                                                                      \
        const char *why_gpu_;                                                 \
        if (!gpu_available(&why_gpu_))                                        \
            SKIP("%s", why_gpu_);                                             \
    } while (0)

#endif
