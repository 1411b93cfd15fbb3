/*
 * vec_dot_iq1_vbmi.c — IQ1_S against Q8_K for AVX-512 VBMI (Ice Lake,
 * Sapphire Rapids and later), over 512-bit registers: the one-token GEMV
 * (vec_dot) of the 1.6-bit experts.  The AVX-512 set's 256-bit code
 * (vec_dot_iq_x86.inc) takes about 175 instructions a super-block, about
 * 95 of them with a memory operand (an index load and a grid load per 8
 * values); this loop takes about 72, with 32 loads inside four gathers
 * (objdump of both loops).  On the lent Xeon host:
 * 1.22-1.37x with all 32 threads, 1.14-1.31x on one (docs/PERFORMANCE.md,
 * "IQ kernels, session 8: IQ1_S").
 *
 * Per super-block (256 values, 50 bytes):
 *   - the 32 11-bit grid indices in two vectors of 16 dwords (the low
 *     bytes zero-extended, the high 3 bits moved out of qh by a word
 *     permute and a variable shift);
 *   - the grid points g + 1 (iq1s_grid_p1, 8 bytes 0..2 each) by four
 *     vpgatherdq of 8 points, 64 values each (32 loads in all, no index
 *     loads);
 *   - the sub-block scale folded into the weight byte by one vpermb per 64
 *     values from a 32-byte table T[4s + c] = c * 8 (2l_s + 1) (c = g + 1,
 *     s the sub-block; at most 2 * 8 * 15 = 240, an unsigned byte), so
 *     one vpdpbusd per 64 values makes the scaled four-product sums
 *     (|T a| * 4 <= 240 * 128 * 4, far inside int32);
 *   - the "- 1" of g + 1 and the delta: sum (8 g + delta) a = 8 sum (g + 1)
 *     a + (delta - 8) sum a per sub-block, the latter from the activations'
 *     block sums (one vpmaddwd), as the AVX2 set does.
 * The integer total of each super-block is the exact one (no saturating
 * step), so it equals the other sets' and the reference's; the float step
 * is gemm_x86_tokens.inc's one-token step (acc + (dw * d_a) * total, one
 * fused multiply-add), so vec_dot equals the AVX2 set's bit for bit.
 * Several tokens (gemm) go to the AVX-512 set's kernel, whose outputs equal
 * its vec_dot and so this one's.
 */
#include "vec_dot_iq.h"
#include "x86_target.h"

#if defined(__x86_64__)
#include "iq_blocks.h"
#include "iq_grids.h"

#include <immintrin.h>

X86_TARGET_BEGIN(X86_SET_AVX512VBMI)

#define IQ1_INLINE static inline __attribute__((always_inline))

/* The loop-invariant controls, 64-byte aligned so each is one load. */
static const struct iq1_controls {
    /* half h's dword lane l = entry 16h + l: qh word 4h + l/4 into the
     * high word of the lane (vpermw, even words zeroed by the mask) */
    _Alignas(64) uint16_t qh_word[2][32];
    /* the variable shift that puts index l % 4's 3 bits (qh bits 3k..3k+2,
     * at 16 + 3k) at bits 8..10 */
    _Alignas(64) uint32_t qh_shift[16];
    /* word i <- qh word i / 2: each sub-block's qh in the two words of its
     * block-sum pair */
    _Alignas(32) uint16_t qh_pairs[16];
    /* T byte 4s + c <- byte 4s (the low byte of word 2s) */
    _Alignas(64) uint8_t scale_spread[64];
    /* pair p's byte v: 4 * (2p + v / 32), the sub-block part of vpermb's index */
    _Alignas(64) uint8_t sub_block[4][64];
} iq1_ctl = {
#define IQ1_W4(h, q) 0, 4 * (h) + (q), 0, 4 * (h) + (q), 0, 4 * (h) + (q), 0, 4 * (h) + (q)
    .qh_word = {{IQ1_W4(0, 0), IQ1_W4(0, 1), IQ1_W4(0, 2), IQ1_W4(0, 3)},
                {IQ1_W4(1, 0), IQ1_W4(1, 1), IQ1_W4(1, 2), IQ1_W4(1, 3)}},
#undef IQ1_W4
    .qh_shift = {8, 11, 14, 17, 8, 11, 14, 17, 8, 11, 14, 17, 8, 11, 14, 17},
    .qh_pairs = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7},
#define IQ1_S4(s) 4 * (s), 4 * (s), 4 * (s), 4 * (s)
    .scale_spread = {IQ1_S4(0), IQ1_S4(1), IQ1_S4(2), IQ1_S4(3), IQ1_S4(4), IQ1_S4(5), IQ1_S4(6), IQ1_S4(7)},
#define IQ1_S32(s) IQ1_S4(s), IQ1_S4(s), IQ1_S4(s), IQ1_S4(s), IQ1_S4(s), IQ1_S4(s), IQ1_S4(s), IQ1_S4(s)
    .sub_block = {{IQ1_S32(0), IQ1_S32(1)}, {IQ1_S32(2), IQ1_S32(3)}, {IQ1_S32(4), IQ1_S32(5)}, {IQ1_S32(6), IQ1_S32(7)}},
#undef IQ1_S32
#undef IQ1_S4
};

/* T's bytes with c = 1 or 2 (the others are 0), and those with c = 2. */
#define IQ1_C12 0x6666666666666666ull
#define IQ1_C2 0x4444444444444444ull

/* Half h's 16 grid indices (dword lane l: entry 16h + l, sub-block 4h + l / 4). */
IQ1_INLINE __m512i iq1_indices(const block_iq1_s *b, __m512i qh, int h)
{
    const __m512i low = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * h)));
    const __m512i high = _mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, _mm512_load_si512(iq1_ctl.qh_word[h]), qh);
    const __m512i at8 = _mm512_srlv_epi32(high, _mm512_load_si512(iq1_ctl.qh_shift));
    return _mm512_ternarylogic_epi32(low, at8, _mm512_set1_epi32(0x700), 0xF8); /* low | (at8 & 0x700) */
}

/* Grid points g + 1 of 8 indices: 64 bytes.  A gather merges into its
 * destination, so the destination is an input; with a full mask GCC takes
 * any register for it, one that the previous super-block's lookups wrote,
 * which chains every super-block's gathers to the one before.  A fresh zero
 * and the full mask, both hidden from the compiler here, make it zero the
 * destination each time. */
IQ1_INLINE __m512i iq1_gather(__m256i idx)
{
    __m512i zero = _mm512_setzero_si512();
    __mmask8 all = 0xFF;
    __asm__ volatile("" : "+v"(zero), "+k"(all));
    return _mm512_mask_i32gather_epi64(zero, all, idx, (const void *)iq1s_grid_p1, 8);
}

/* One super-block against y: 16 int32 lanes whose sum is its exact integer total. */
IQ1_INLINE __m512i iq1s_super(const block_iq1_s *b, const block_q8_K *y)
{
    const __m128i qh128 = _mm_loadu_si128((const __m128i *)b->qh);
    const __m512i qh = _mm512_zextsi128_si512(qh128);
    const __m512i idx0 = iq1_indices(b, qh, 0), idx1 = iq1_indices(b, qh, 1);
    const __m512i g[4] = {iq1_gather(_mm512_castsi512_si256(idx0)), iq1_gather(_mm512_extracti64x4_epi64(idx0, 1)),
                          iq1_gather(_mm512_castsi512_si256(idx1)), iq1_gather(_mm512_extracti64x4_epi64(idx1, 1))};
    /* word 2s and 2s + 1: 8 (2l + 1) = (qh >> 8 & 0x70) | 8, l = qh bits 12..14 */
    const __m256i qd = _mm256_permutexvar_epi16(_mm256_load_si256((const __m256i *)iq1_ctl.qh_pairs),
                                                _mm256_castsi128_si256(qh128));
    const __m256i sc8 = _mm256_ternarylogic_epi32(_mm256_srli_epi16(qd, 8), _mm256_set1_epi16(0x70),
                                                  _mm256_set1_epi16(8), 0xEA); /* (a & b) | c */
    const __m512i t1 = _mm512_maskz_permutexvar_epi8(IQ1_C12, _mm512_load_si512(iq1_ctl.scale_spread),
                                                     _mm512_castsi256_si512(sc8));
    const __m512i table = _mm512_mask_add_epi8(t1, IQ1_C2, t1, t1);
    /* (delta - 8) * (2l + 1) per word: delta * sc - 8 sc, delta = -1 where qh bit 15 is set */
    const __m256i sc = _mm256_srli_epi16(sc8, 3);
    const __m256i delta_sc = _mm256_mask_sub_epi16(sc, _mm256_movepi16_mask(qd), _mm256_setzero_si256(), sc);
    const __m256i bsum_factor = _mm256_sub_epi16(delta_sc, sc8);
    __m512i acc[2] = {_mm512_setzero_si512(),
                      _mm512_zextsi256_si512(_mm256_madd_epi16(bsum_factor, _mm256_loadu_si256((const __m256i *)y->bsums)))};
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 4; p++) {
        const __m512i at = _mm512_or_si512(g[p], _mm512_load_si512(iq1_ctl.sub_block[p]));
        const __m512i w = _mm512_permutexvar_epi8(at, table);
        acc[p % 2] = _mm512_dpbusd_epi32(acc[p % 2], w, _mm512_loadu_si512(y->qs + 64 * p));
    }
    return _mm512_add_epi32(acc[0], acc[1]);
}

/* The totals of two super-blocks' lanes s0 and s1, as floats (exact up to
 * the int32 -> float rounding, the same as the other sets'): s0's in
 * float 0 of the result, s1's in float 8.  One reduction for both. */
IQ1_INLINE __m512 iq1_totals2(__m512i s0, __m512i s1)
{
    /* 128-bit lanes [s0 0 + 2, s0 1 + 3, s1 0 + 2, s1 1 + 3], then [s0, s0, s1, s1] */
    __m512i h = _mm512_add_epi32(_mm512_shuffle_i64x2(s0, s1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_i64x2(s0, s1, _MM_SHUFFLE(3, 2, 3, 2)));
    h = _mm512_add_epi32(h, _mm512_shuffle_i64x2(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    h = _mm512_add_epi32(h, _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0x4E));
    h = _mm512_add_epi32(h, _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0xB1));
    return _mm512_cvtepi32_ps(h);
}

/* gemm_x86_tokens.inc's one-token float step: acc + (dw * d_a) * total. */
IQ1_INLINE __m128 iq1_step(__m128 acc, const block_iq1_s *b, const block_q8_K *y, __m128 total)
{
    const float dw = _cvtsh_ss(b->d) * 0.125f;
    return _mm_fmadd_ss(_mm_set_ss(dw * y->d), total, acc);
}

static void iq1s_dot(int64_t n, float *out, const void *w, const void *a)
{
    const block_iq1_s *x = w;
    const block_q8_K *y = a;
    const int64_t nb = n / QK_K;
    __m128 acc = _mm_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) { /* two super-blocks a step, their steps in order */
        _mm_prefetch((const char *)(x + i) + 1024, _MM_HINT_T0); /* as vec_dot_iq_x86.inc's iq_prefetch */
        _mm_prefetch((const char *)(x + i + 1) + 1024, _MM_HINT_T0);
        const __m512 totals = iq1_totals2(iq1s_super(x + i, y + i), iq1s_super(x + i + 1, y + i + 1));
        acc = iq1_step(acc, x + i, y + i, _mm512_castps512_ps128(totals));
        acc = iq1_step(acc, x + i + 1, y + i + 1, _mm512_extractf32x4_ps(totals, 2));
    }
    if (i < nb)
        acc = iq1_step(acc, x + i, y + i, _mm512_castps512_ps128(iq1_totals2(iq1s_super(x + i, y + i), _mm512_setzero_si512())));
    *out = _mm_cvtss_f32(acc);
}

/* One token: this set's vec_dot per row; more: the AVX-512 set's kernel
 * (the same outputs, see above). */
static void iq1s_gemm(int64_t n, const void *w, size_t row_stride, int rows, const void *a, size_t a_stride, int toks,
                      float *y, size_t y_stride)
{
    if (toks > 1) {
        simd_iq_avx512.gemm[QT_IQ1_S](n, w, row_stride, rows, a, a_stride, toks, y, y_stride);
        return;
    }
    for (int r = 0; r < rows; r++)
        iq1s_dot(n, y + r, (const uint8_t *)w + (size_t)r * row_stride, a);
}

X86_TARGET_END

const simd_kernels simd_iq1_avx512vbmi = {
    .isa = "avx512vbmi-iq1",
    .runs_on = cpu_has_avx512vbmi_set,
    .vec_dot = {[QT_IQ1_S] = iq1s_dot},
    .gemm = {[QT_IQ1_S] = iq1s_gemm},
};

#endif
