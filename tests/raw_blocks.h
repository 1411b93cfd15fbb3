/*
 * raw_blocks.h — weights of raw random bytes for the SIMD kernel tests
 * (test_simd.c, test_gemm.c): every scale and bit pattern a file may hold,
 * with ordinary f16 scales.
 */
#ifndef HYDRA_TEST_RAW_BLOCKS_H
#define HYDRA_TEST_RAW_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

/* n_blocks raw random blocks of a quantised type into w, from *rng; false
 * (w untouched) for the float types, which have no meaningful raw form. */
bool fill_raw_blocks(uint32_t type, uint8_t *w, int64_t n_blocks, uint64_t *rng);

#endif
