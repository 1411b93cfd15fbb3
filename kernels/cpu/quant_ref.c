/*
 * quant_ref.c — scalar reference conversions.  Layouts are the public
 * ggml/GGUF ones; blocks are read with memcpy because GGUF data is only
 * aligned to general.alignment, not to the block's fields.
 */
#include "quant_ref.h"

#include "fp16.h"

#include <math.h>
#include <string.h>

void quant_ref_f32_to_float(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void quant_ref_f32_from_float(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void quant_ref_f16_to_float(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
    }
}

void quant_ref_f16_from_float(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = fp32_to_fp16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

void quant_ref_bf16_to_float(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
    }
}

void quant_ref_bf16_from_float(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = fp32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

/* Q8_0: blocks of 32 values = f16 scale d, then 32 int8 q; value = d * q. */
enum { Q8_0_BLOCK = 32, Q8_0_BYTES = 34 };

void quant_ref_q8_0_to_float(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / Q8_0_BLOCK; i++, b += Q8_0_BYTES) {
        uint16_t h;
        memcpy(&h, b, 2);
        float d = fp16_to_fp32(h);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < Q8_0_BLOCK; j++)
            dst[i * Q8_0_BLOCK + j] = d * (float)q[j];
    }
}

/* Scale so the largest magnitude maps to 127, round to nearest: the
 * reference rule every Q8_0 producer uses. */
void quant_ref_q8_0_from_float(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / Q8_0_BLOCK; i++, b += Q8_0_BYTES) {
        const float *x = src + i * Q8_0_BLOCK;
        float amax = 0.0f;
        for (int j = 0; j < Q8_0_BLOCK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = fp32_to_fp16(d);
        memcpy(b, &h, 2);
        int8_t *q = (int8_t *)(b + 2);
        for (int j = 0; j < Q8_0_BLOCK; j++)
            q[j] = (int8_t)roundf(x[j] * id);
    }
}
