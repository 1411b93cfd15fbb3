/*
 * quant_float.c — reference conversions and dot products of the float
 * formats F32, F16 and BF16.  Each pairs with activations of its own type.
 * Values are read with memcpy: GGUF aligns a tensor only to
 * general.alignment, which may be smaller than the element.
 */
#include "quant_ref.h"

#include "fp16.h"

#include <string.h>

void quant_ref_f32_to_float(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void quant_ref_f32_from_float(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static float f32_at(const uint8_t *p, int64_t i)
{
    float v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

static uint16_t u16_at(const uint8_t *p, int64_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return h;
}

static void u16_put(uint8_t *p, int64_t i, uint16_t h)
{
    memcpy(p + 2 * i, &h, 2);
}

/* Products of two floats are exact in double, so the only rounding is the
 * summation's (about n * 2^-53 relative) and the final one to float. */
void quant_ref_f32_vec_dot(int64_t n, float *out, const void *w, const void *a)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)f32_at(w, i) * (double)f32_at(a, i);
    *out = (float)sum;
}

/* The 16-bit formats, whose values convert with to_fp32 and from_fp32:
 * quant_ref_FN_to_float, _from_float and _vec_dot (exact products in double,
 * as F32's). */
#define HALF_FORMAT(fn, to_fp32, from_fp32)                                              \
    void quant_ref_##fn##_to_float(const void *src, float *dst, int64_t n)               \
    {                                                                                    \
        for (int64_t i = 0; i < n; i++)                                                  \
            dst[i] = to_fp32(u16_at(src, i));                                            \
    }                                                                                    \
    void quant_ref_##fn##_from_float(const float *src, void *dst, int64_t n)             \
    {                                                                                    \
        for (int64_t i = 0; i < n; i++)                                                  \
            u16_put(dst, i, from_fp32(src[i]));                                          \
    }                                                                                    \
    void quant_ref_##fn##_vec_dot(int64_t n, float *out, const void *w, const void *a)   \
    {                                                                                    \
        double sum = 0.0;                                                                \
        for (int64_t i = 0; i < n; i++)                                                  \
            sum += (double)to_fp32(u16_at(w, i)) * (double)to_fp32(u16_at(a, i));        \
        *out = (float)sum;                                                               \
    }

HALF_FORMAT(f16, fp16_to_fp32, fp32_to_fp16)
HALF_FORMAT(bf16, bf16_to_fp32, fp32_to_bf16)
