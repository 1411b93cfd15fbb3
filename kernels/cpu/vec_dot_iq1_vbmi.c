/*
 * vec_dot_iq1_vbmi.c — IQ1_S against Q8_K for AVX-512 VBMI (Ice Lake,
 * Sapphire Rapids and later), over 512-bit registers: the one-token GEMV
 * (vec_dot) of the 1.6-bit experts, which the AVX-512 set's 256-bit code
 * (vec_dot_iq_x86.inc) runs at about 40 cycles a super-block, bound by
 * its 85 loads (32 index loads, 32 grid loads, the rest).
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
#include <pthread.h>

/* ---- the code table and controls, built once (plain C, before the target pragma) ---- */

/* Gather lane l of half h (entries 16h .. 16h + 15) takes entry 16h + e(l):
 * the order that makes the two vpmultishiftqb of the gathered dwords
 * (the low dword of each qword, the high one) and vpunpck[lh]qdq give the
 * entries in order (iq1_points). */
static int lane_entry(int l)
{
    return (l % 4 >= 2 ? 8 : 0) + 2 * (l / 4) + l % 2;
}

typedef struct iq1_consts {
    /* point i: g + 1 as 8 2-bit codes, value m at bits 2m; one more entry
     * for the upper half of the last point's dword */
    _Alignas(64) uint16_t codes[2048 + 2];
    _Alignas(64) uint8_t qs_byte[2][64];   /* half h: byte 4l <- qs byte of lane l's entry */
    _Alignas(64) uint16_t qh_word[2][32];  /* half h: word 2l + 1 <- qh word of lane l's sub-block */
    _Alignas(64) uint32_t qh_shift[16];    /* lane l: puts its index's 3 high bits (qh bits 3k.., at 16 + 3k) at 8..10 */
    _Alignas(64) uint8_t code_bits[2][64]; /* byte m of a qword <- bits 2m (low dword) or 32 + 2m (high dword) */
    _Alignas(64) uint8_t scale_spread[64]; /* T byte 4s + c <- byte 4s (the low byte of word 2s) */
    _Alignas(64) uint8_t sub_block[4][64]; /* pair p's byte v: 4 (2p + v / 32), the sub-block part of vpermb's index */
    _Alignas(32) uint16_t qh_pairs[16];    /* word i <- qh word i / 2: a sub-block's qh beside its two block sums */
} iq1_consts;

static iq1_consts consts;
static pthread_once_t consts_once = PTHREAD_ONCE_INIT;

static void build_consts(void)
{
    iq1_consts *c = &consts;
    for (int i = 0; i < 2048; i++) {
        unsigned code = 0;
        for (int m = 0; m < 8; m++)
            code |= (unsigned)(iq1s_grid_p1[i] >> (8 * m) & 3) << (2 * m);
        c->codes[i] = (uint16_t)code;
    }
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 16; l++) {
            const int entry = 16 * h + lane_entry(l);
            c->qs_byte[h][4 * l] = (uint8_t)entry;
            c->qh_word[h][2 * l + 1] = (uint16_t)(entry / 4);
            c->qh_shift[l] = (uint32_t)(8 + 3 * (entry % 4));
        }
    for (int v = 0; v < 64; v++) {
        c->code_bits[0][v] = (uint8_t)(2 * (v % 8));
        c->code_bits[1][v] = (uint8_t)(32 + 2 * (v % 8));
        c->scale_spread[v] = (uint8_t)(v < 32 ? 4 * (v / 4) : 0);
        for (int p = 0; p < 4; p++)
            c->sub_block[p][v] = (uint8_t)(4 * (2 * p + v / 32));
    }
    for (int i = 0; i < 16; i++)
        c->qh_pairs[i] = (uint16_t)(i / 2);
}

static const iq1_consts *get_consts(void)
{
    pthread_once(&consts_once, build_consts);
    return &consts;
}

/* ---- the kernel -------------------------------------------------------------- */

X86_TARGET_BEGIN(X86_SET_AVX512VBMI)

#define IQ1_INLINE static inline __attribute__((always_inline))

/* T's bytes with c = 1 or 2 (the others are 0), and those with c = 2. */
#define IQ1_C12 0x6666666666666666ull
#define IQ1_C2 0x4444444444444444ull

/* Half h's 16 grid indices (lane l: entry 16h + lane_entry(l)). */
IQ1_INLINE __m512i iq1_indices(const iq1_consts *c, __m512i qs, __m512i qh, int h)
{
    const __m512i low = _mm512_maskz_permutexvar_epi8(0x1111111111111111ull, _mm512_load_si512(c->qs_byte[h]), qs);
    const __m512i high = _mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, _mm512_load_si512(c->qh_word[h]), qh);
    const __m512i at8 = _mm512_srlv_epi32(high, _mm512_load_si512(c->qh_shift));
    return _mm512_ternarylogic_epi32(low, at8, _mm512_set1_epi32(0x700), 0xF8); /* low | (at8 & 0x700) */
}

/* The codes of 16 indices, one a dword lane (its low 16 bits).  A gather
 * merges into its destination, so the destination is an input; with a
 * full mask GCC takes any register for it, one that the previous
 * super-block's lookups wrote, which chains every super-block's gathers to
 * the one before.  A fresh zero and the full mask, both hidden from the
 * compiler here, make it zero the destination each time. */
IQ1_INLINE __m512i iq1_gather(const iq1_consts *c, __m512i idx)
{
    __m512i zero = _mm512_setzero_si512();
    __mmask16 all = 0xFFFF;
    __asm__ volatile("" : "+v"(zero), "+k"(all));
    return _mm512_mask_i32gather_epi32(zero, all, idx, (const void *)c->codes, 2);
}

/* Half h's 128 values g + 1 (pairs 2h and 2h + 1, 64 bytes each) from its
 * gathered codes: each qword's two codes spread to bytes (code bits in
 * bits 0..1, the next codes above), then the qwords interleaved. */
IQ1_INLINE void iq1_points(const iq1_consts *c, __m512i codes, __m512i *pair)
{
    const __m512i low = _mm512_multishift_epi64_epi8(_mm512_load_si512(c->code_bits[0]), codes);
    const __m512i high = _mm512_multishift_epi64_epi8(_mm512_load_si512(c->code_bits[1]), codes);
    pair[0] = _mm512_unpacklo_epi64(low, high);
    pair[1] = _mm512_unpackhi_epi64(low, high);
}

/* A super-block's gathered codes (two vectors of 16), the long-latency
 * part, begun a step before they are used (iq1s_dot). */
IQ1_INLINE void iq1s_begin(const iq1_consts *c, const block_iq1_s *b, __m512i *codes)
{
    const __m512i qh = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)b->qh));
    const __m512i qs = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)b->qs));
    codes[0] = iq1_gather(c, iq1_indices(c, qs, qh, 0));
    codes[1] = iq1_gather(c, iq1_indices(c, qs, qh, 1));
}

/* One super-block against y from its codes: 16 int32 lanes whose sum is
 * its exact integer total. */
IQ1_INLINE __m512i iq1s_super(const iq1_consts *c, const block_iq1_s *b, const block_q8_K *y, const __m512i *codes)
{
    const __m128i qh128 = _mm_loadu_si128((const __m128i *)b->qh);
    __m512i g[4];
    iq1_points(c, codes[0], g);
    iq1_points(c, codes[1], g + 2);
    /* word 2s and 2s + 1: 8 (2l + 1) = (qh >> 8 & 0x70) | 8, l = qh bits 12..14 */
    const __m256i qd = _mm256_permutexvar_epi16(_mm256_load_si256((const __m256i *)c->qh_pairs),
                                                _mm256_castsi128_si256(qh128));
    const __m256i sc8 = _mm256_ternarylogic_epi32(_mm256_srli_epi16(qd, 8), _mm256_set1_epi16(0x70),
                                                  _mm256_set1_epi16(8), 0xEA); /* (a & b) | c */
    const __m512i t1 = _mm512_maskz_permutexvar_epi8(IQ1_C12, _mm512_load_si512(c->scale_spread),
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
        const __m512i at = _mm512_ternarylogic_epi32(g[p], _mm512_set1_epi8(3), _mm512_load_si512(c->sub_block[p]),
                                                     0xEA); /* (g & 3) | sub-block */
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
    const iq1_consts *c = get_consts();
    const int64_t nb = n / QK_K;
    __m128 acc = _mm_setzero_ps();
    __m512i codes[4], next[4]; /* super-blocks i, i + 1 and i + 2, i + 3 */
    int64_t i = 0;
    if (nb >= 2) {
        iq1s_begin(c, x, codes);
        iq1s_begin(c, x + 1, codes + 2);
    }
    for (; i + 1 < nb; i += 2) { /* two super-blocks a step, their steps in order; the next two begun first */
        _mm_prefetch((const char *)(x + i) + 1024, _MM_HINT_T0); /* as vec_dot_iq_x86.inc's iq_prefetch */
        _mm_prefetch((const char *)(x + i + 1) + 1024, _MM_HINT_T0);
        if (i + 3 < nb) {
            iq1s_begin(c, x + i + 2, next);
            iq1s_begin(c, x + i + 3, next + 2);
        }
        const __m512 totals = iq1_totals2(iq1s_super(c, x + i, y + i, codes), iq1s_super(c, x + i + 1, y + i + 1, codes + 2));
        acc = iq1_step(acc, x + i, y + i, _mm512_castps512_ps128(totals));
        acc = iq1_step(acc, x + i + 1, y + i + 1, _mm512_extractf32x4_ps(totals, 2));
        if (i + 3 < nb)
            for (int k = 0; k < 4; k++)
                codes[k] = next[k];
    }
    if (i < nb) {
        iq1s_begin(c, x + i, codes);
        acc = iq1_step(acc, x + i, y + i,
                       _mm512_castps512_ps128(iq1_totals2(iq1s_super(c, x + i, y + i, codes), _mm512_setzero_si512())));
    }
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
