/*
 * vec_dot_neon.c — AArch64 NEON kernels: the start of the ARM set, built
 * and dispatched like the x86 ones (simd.h) but so far compiled only, never
 * run (no ARM machine here; test_simd runs it wherever cpu_features reports
 * NEON).  Types without a kernel here keep their scalar reference.
 *
 * Integer products use vmull_s8 (int16, two products of |q| <= 127 cannot
 * overflow) widened into int32 lanes; block terms are summed in float as in
 * the x86 sets.  The Q8_0 quantiser rounds with vcvtnq (to nearest, ties to
 * even) after the same float multiply as the reference, so its bytes match.
 */
#include "simd.h"

#if defined(__aarch64__)
#include "fp16.h"
#include "quant_blocks.h"

#include <arm_neon.h>
#include <string.h>

static float neon_f16(uint16_t h)
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* sum of the 32 products of two int8 blocks. */
static int32_t neon_dot32(int8x16_t w0, int8x16_t w1, const int8_t *a)
{
    int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16);
    int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(a0)));
    s = vpadalq_s16(s, vmull_high_s8(w0, a0));
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(w1), vget_low_s8(a1)));
    s = vpadalq_s16(s, vmull_high_s8(w1, a1));
    return vaddvq_s32(s);
}

static void neon_f32_dot(int64_t n, float *out, const void *w, const void *a)
{
    const float *x = w, *y = a;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++)
            acc[k] = vfmaq_f32(acc[k], vld1q_f32(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++)
        sum += x[i] * y[i];
    *out = sum;
}

static void neon_f16_dot(int64_t n, float *out, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    float32x4_t acc = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        acc = vfmaq_f32(acc, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))),
                        vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(y + i))));
    float sum = vaddvq_f32(acc);
    for (; i < n; i++)
        sum += neon_f16(x[i]) * neon_f16(y[i]);
    *out = sum;
}

static void neon_q8_0_dot(int64_t n, float *out, const void *w, const void *a)
{
    const block_q8_0 *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_LEGACY; i++) {
        int32_t s = neon_dot32(vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16), y[i].qs);
        sum += neon_f16(x[i].d) * neon_f16(y[i].d) * (float)s;
    }
    *out = sum;
}

/* 16 bytes of nibbles -> values 0-15 (low nibbles) and 16-31 (high). */
static void neon_nibbles(const uint8_t *qs, uint8x16_t *lo, uint8x16_t *hi)
{
    uint8x16_t q = vld1q_u8(qs);
    *lo = vandq_u8(q, vdupq_n_u8(0x0F));
    *hi = vshrq_n_u8(q, 4);
}

static void neon_q4_0_dot(int64_t n, float *out, const void *w, const void *a)
{
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    const int8x16_t eight = vdupq_n_s8(8);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_LEGACY; i++) {
        uint8x16_t lo, hi;
        neon_nibbles(x[i].qs, &lo, &hi);
        int32_t s = neon_dot32(vsubq_s8(vreinterpretq_s8_u8(lo), eight), vsubq_s8(vreinterpretq_s8_u8(hi), eight),
                               y[i].qs);
        sum += neon_f16(x[i].d) * neon_f16(y[i].d) * (float)s;
    }
    *out = sum;
}

static void neon_mxfp4_dot(int64_t n, float *out, const void *w, const void *a)
{
    const block_mxfp4 *x = w;
    const block_q8_0 *y = a;
    const int8x16_t book = vld1q_s8(quant_mxfp4_values);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_LEGACY; i++) {
        uint8x16_t lo, hi;
        neon_nibbles(x[i].qs, &lo, &hi);
        int32_t s = neon_dot32(vqtbl1q_s8(book, lo), vqtbl1q_s8(book, hi), y[i].qs);
        sum += e8m0_half(x[i].e) * neon_f16(y[i].d) * (float)s;
    }
    *out = sum;
}

static void neon_quantize_q8_0(const float *x, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK_LEGACY; i++, x += QK_LEGACY) {
        float32x4_t m = vdupq_n_f32(0);
        for (int j = 0; j < 8; j++)
            m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + 4 * j)));
        float amax = vmaxvq_f32(m);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 8; j++) {
            int32x4_t q = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4 * j), id));
            q = vmaxq_s32(vminq_s32(q, vdupq_n_s32(127)), vdupq_n_s32(-127));
            int8x8_t q8 = vqmovn_s16(vcombine_s16(vqmovn_s32(q), vdup_n_s16(0)));
            int32_t packed = vget_lane_s32(vreinterpret_s32_s8(q8), 0);
            memcpy(b[i].qs + 4 * j, &packed, 4);
        }
        b[i].d = fp32_to_fp16(amax / 127.0f);
    }
}

static bool neon_runs_on(const cpu_features *f)
{
    return f->neon;
}

const simd_kernels simd_neon = {
    .isa = "neon",
    .runs_on = neon_runs_on,
    .vec_dot = {
        [QT_F32] = neon_f32_dot,   [QT_F16] = neon_f16_dot,   [QT_Q8_0] = neon_q8_0_dot,
        [QT_Q4_0] = neon_q4_0_dot, [QT_MXFP4] = neon_mxfp4_dot,
    },
    .quantize = {[QT_Q8_0] = neon_quantize_q8_0},
};

#endif
