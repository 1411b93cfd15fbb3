/*
 * fp16.h — IEEE half and bfloat16 conversions, scalar and exact.
 * float -> half rounds to nearest even, keeps NaN a NaN and saturates to inf,
 * as the hardware conversion instructions (F16C, CUDA __float2half_rn) do.
 */
#ifndef HYDRA_FP16_H
#define HYDRA_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fp32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float fp32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf or NaN */
        return fp32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: value = man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return fp32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t fp32_to_fp16(float f)
{
    uint32_t u = fp32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: keep it quiet and non-zero */
        return sign | 0x7e00 | (uint16_t)((abs >> 13) & 0x3ff);
    if (abs >= 0x477ff000u) /* rounds to or beyond 65520: inf */
        return sign | 0x7c00;
    if (abs < 0x38800000u) {
        /* result is subnormal or zero: scale to units of 2^-24 and round */
        if (abs < 0x33000000u) /* below half of the smallest subnormal */
            return sign;
        uint32_t exp = abs >> 23;
        uint32_t man = (abs & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - exp; /* 14..24 */
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return sign | (uint16_t)q;
    }
    /* normal: rebias exponent, round the 13 dropped bits to nearest even */
    uint32_t r = abs - 0x38000000u;
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
        q++;
    return sign | (uint16_t)q;
}

static inline float bf16_to_fp32(uint16_t h)
{
    return fp32_from_bits((uint32_t)h << 16);
}

static inline uint16_t fp32_to_bf16(float f)
{
    uint32_t u = fp32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

#endif
