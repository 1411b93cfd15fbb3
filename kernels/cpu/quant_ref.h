/*
 * quant_ref.h — scalar reference conversions between float and the stored
 * formats.  They define what "correct" means for every faster path.
 */
#ifndef HYDRA_QUANT_REF_H
#define HYDRA_QUANT_REF_H

#include <stdint.h>

#define QUANT_REF_DECLARE(fn)                                                 \
    void quant_ref_##fn##_to_float(const void *src, float *dst, int64_t n);   \
    void quant_ref_##fn##_from_float(const float *src, void *dst, int64_t n);

QUANT_REF_DECLARE(f32)
QUANT_REF_DECLARE(f16)
QUANT_REF_DECLARE(bf16)
QUANT_REF_DECLARE(q8_0)

#endif
