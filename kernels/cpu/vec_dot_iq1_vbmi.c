/*
 * vec_dot_iq1_vbmi.c — IQ1_S against Q8_K for AVX-512 VBMI (Ice Lake,
 * Sapphire Rapids and later), over 512-bit registers: the one-token GEMV
 * (vec_dot) of the 1.6-bit experts.  The AVX-512 set's 256-bit code
 * (vec_dot_iq_x86.inc) takes about 175 instructions a super-block, about
 * 95 of them with a memory operand (an index load and a grid load per 8
 * values); this one's rows loop takes 44 a row, with 32 loads inside two
 * gathers (objdump of the loops).  The vector ports are what binds it with two
 * threads a core, so every step below is counted in them
 * (docs/PERFORMANCE.md, "IQ kernels, session 9").
 *
 * Per super-block (256 values, 50 bytes, read by one masked load):
 *   - the 32 11-bit grid indices in two vectors of 16 dwords: a zero-masked
 *     vpermw puts each dword pair's two qs bytes and its qh word in one
 *     qword, one vpmultishiftqb moves the qs byte and the qh bits 3k.. of
 *     each index k into its dword, an and keeps 11 bits;
 *   - the grid points g + 1 (iq1s_grid_p1_nib, 4 bytes a point, coordinate
 *     j in nibble j) by two vpgatherdd of 16 points; of each, an and keeps
 *     the even coordinates (low nibbles) and one vgf2p8affineqb moves the odd
 *     ones (high nibbles) down.  The activations are split once per
 *     super-block for all rows into their even and odd bytes (vpermt2b), so
 *     the points need no shuffle: two vpdpbusd a half give each dword the
 *     entry's 8 products (|sum| <= 8 * 2 * 128);
 *   - vpackssdw of the two halves (exact) and one vpdpwssd by 8 (2l + 1) of
 *     each word's sub-block;
 *   - the "- 1" of g + 1 and the delta: sum (8 g + delta) a = 8 sum (g + 1)
 *     a + (delta - 8) sum a per sub-block, the latter from the activations'
 *     block sums (one vpmaddwd), as the AVX2 set does; both factors come
 *     from 16-word tables indexed by qh >> 12 = l | delta bit << 3 (vpermw),
 *     placed once per row as vpackssdw's words are (lsign_words).
 * Against four vpgatherdq of 8 qword points (the same 32 loads) this halves
 * the gathers and cuts the rows loop from 206 instructions, 80 port-5 ops
 * and 16 gathers per four rows and super-block to 176, 49 and 8: IQ1_S with
 * 32 threads 98.9 GB/s against 91.1 (1.086x, faster in each of four
 * interleaved rounds), one thread 5.2-5.7 against 4.9 (docs/PERFORMANCE.md,
 * "IQ kernels, session 12: IQ1_S").
 * The integer total of each super-block is the exact one (no saturating
 * step), so it equals the other sets' and the reference's; the float step
 * is gemm_x86_tokens.inc's one-token step (acc + (dw * d_a) * total, one
 * fused multiply-add), so vec_dot equals the AVX2 set's bit for bit.
 * A GEMV takes SIMD_ROWS rows a call (vec_dot_rows): one super-block of each
 * a step, the activations loaded once for the four, their totals reduced
 * together and the four float steps in one vector, each lane the scalar
 * step's roundings (docs/PERFORMANCE.md, "IQ kernels, session 10").
 * Several tokens (gemm) go to the AVX-512 set's kernel, whose outputs equal
 * its vec_dot and so this one's.
 */
#include "vec_dot_iq.h"
#include "x86_target.h"

#if defined(__x86_64__)
#include "iq_blocks.h"
#include "iq_grids.h"

#include <immintrin.h>
#include <math.h>

X86_TARGET_BEGIN(X86_SET_AVX512VBMI)

#include "vec_dot_iq_vbmi.h"

#define IQ1_INLINE static inline __attribute__((always_inline))

/* The super-block as 25 words (one masked load of its 50 bytes): word 0 d,
 * words 1..16 the qs pairs (word 1 + i: qs bytes 2i, 2i + 1), words 17..24
 * qh of sub-blocks 0..7. */
enum { IQ1_QS_WORD = 1, IQ1_QH_WORD = 17 };
#define IQ1_BLOCK_BYTES ((1ull << sizeof(block_iq1_s)) - 1)
_Static_assert(sizeof(block_iq1_s) == 50, "IQ1_S layout");

/* The loop-invariant controls, 64-byte aligned so each is one load. */
static const struct iq1_controls {
    /* half h's qword m (dword lanes 2m, 2m + 1: entries 16h + 2m, + 1,
     * sub-block 4h + m / 2): word 0 their qs pair, word 1 their qh (words
     * 2, 3 zeroed by the mask) */
    _Alignas(64) uint16_t index_words[2][32];
    /* vpmultishiftqb: a lane's byte 0 its qs byte, byte 1 the qh bits 3k..
     * of its index k = lane % 4 (3 bits kept), bytes 2, 3 from the zero words */
    _Alignas(64) uint8_t index_bits[64];
    /* word 8q + i (128-bit lane q) <- qh of sub-block q (i < 4) or 4 + q
     * (i >= 4): the sub-blocks of vpackssdw's words of the two halves' dots */
    _Alignas(64) uint16_t lsign_words[32];
    /* the block sums 2s, 2s + 1 of sub-block s at words 8q, 8q + 1 (s = q)
     * and 8q + 4, 8q + 5 (s = 4 + q); the other words zeroed by the mask */
    _Alignas(64) uint16_t bsum_words[32];
    /* by qh >> 12 = l | delta bit << 3: the block-sum factor (delta - 8) (2l + 1),
     * delta = -1 where the bit is set, and the grid factor 8 (2l + 1);
     * words 16..31 unused (vpermw of 32 words) */
    _Alignas(64) int16_t bsum_factor[32];
    _Alignas(64) int16_t grid_factor[32];
    /* vpermt2b of a half's 128 activations: byte k <- byte 2k / 2k + 1 */
    _Alignas(64) uint8_t even_bytes[64];
    _Alignas(64) uint8_t odd_bytes[64];
} iq1_ctl = {
#define IQ1_Q(h, m) IQ1_QS_WORD + 8 * (h) + (m), IQ1_QH_WORD + 4 * (h) + (m) / 2, 0, 0
#define IQ1_H(h) IQ1_Q(h, 0), IQ1_Q(h, 1), IQ1_Q(h, 2), IQ1_Q(h, 3), IQ1_Q(h, 4), IQ1_Q(h, 5), IQ1_Q(h, 6), IQ1_Q(h, 7)
    .index_words = {{IQ1_H(0)}, {IQ1_H(1)}},
#undef IQ1_H
#undef IQ1_Q
    /* lanes of k = 0, 1 (even qwords) and 2, 3 (odd): qh at bit 16 + 3k */
#define IQ1_B(k) 0, 16 + 3 * (k), 32, 32, 8, 19 + 3 * (k), 32, 32
    .index_bits = {IQ1_B(0), IQ1_B(2), IQ1_B(0), IQ1_B(2), IQ1_B(0), IQ1_B(2), IQ1_B(0), IQ1_B(2)},
#undef IQ1_B
#define IQ1_S(q) IQ1_QH_WORD + (q), IQ1_QH_WORD + (q), IQ1_QH_WORD + (q), IQ1_QH_WORD + (q), \
                 IQ1_QH_WORD + 4 + (q), IQ1_QH_WORD + 4 + (q), IQ1_QH_WORD + 4 + (q), IQ1_QH_WORD + 4 + (q)
    .lsign_words = {IQ1_S(0), IQ1_S(1), IQ1_S(2), IQ1_S(3)},
#undef IQ1_S
#define IQ1_S(q) 2 * (q), 2 * (q) + 1, 0, 0, 8 + 2 * (q), 9 + 2 * (q), 0, 0
    .bsum_words = {IQ1_S(0), IQ1_S(1), IQ1_S(2), IQ1_S(3)},
#undef IQ1_S
    .bsum_factor = {-7, -21, -35, -49, -63, -77, -91, -105, -9, -27, -45, -63, -81, -99, -117, -135},
    .grid_factor = {8, 24, 40, 56, 72, 88, 104, 120, 8, 24, 40, 56, 72, 88, 104, 120},
#define IQ1_E(k, o) 2 * (k) + (o), 2 * (k) + 2 + (o), 2 * (k) + 4 + (o), 2 * (k) + 6 + (o), \
                    2 * (k) + 8 + (o), 2 * (k) + 10 + (o), 2 * (k) + 12 + (o), 2 * (k) + 14 + (o)
    .even_bytes = {IQ1_E(0, 0), IQ1_E(8, 0), IQ1_E(16, 0), IQ1_E(24, 0), IQ1_E(32, 0), IQ1_E(40, 0), IQ1_E(48, 0), IQ1_E(56, 0)},
    .odd_bytes = {IQ1_E(0, 1), IQ1_E(8, 1), IQ1_E(16, 1), IQ1_E(24, 1), IQ1_E(32, 1), IQ1_E(40, 1), IQ1_E(48, 1), IQ1_E(56, 1)},
#undef IQ1_E
};

/* One super-block's activations as the rows read them (made once for all
 * rows of a call): half h's even and odd bytes (values 128h + 2k and
 * 128h + 2k + 1 in byte k), and the block sums in the words of lsign_words'
 * layout (bsum_words). */
typedef struct {
    __m512i even[2], odd[2], bsums;
} iq1_act;

/* Half h's 16 grid indices (dword lane l: entry 16h + l). */
IQ1_INLINE __m512i iq1_indices(__m512i words, int h)
{
    const __m512i placed = _mm512_maskz_permutexvar_epi16(0x33333333u, _mm512_load_si512(iq1_ctl.index_words[h]), words);
    return _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_load_si512(iq1_ctl.index_bits), placed),
                            _mm512_set1_epi32(0x7FF));
}

/* Grid points g + 1 of 16 indices as nibbles: 64 bytes.  A gather merges
 * into its destination, so the destination is an input; with a full mask GCC
 * takes any register for it, one that the previous super-block's lookups
 * wrote, which chains every super-block's gathers to the one before.  A fresh
 * zero hidden from the compiler makes it zero the destination each time.
 * The gather clears its mask, so each takes a fresh one: kxnorw of k0 with
 * itself (all ones whatever k0 holds; GCC writes k0 nowhere in these loops,
 * objdump, so no mask waits on a gather) is a port-0 op, where GCC's kmovw
 * from a register is a port-5 one.  Alone it was not measurably faster
 * (docs/PERFORMANCE.md, "IQ kernels, session 12: IQ1_S", v2). */
IQ1_INLINE __m512i iq1_gather(__m512i idx)
{
    __m512i zero = _mm512_setzero_si512();
    __mmask16 all;
    __asm__ volatile("kxnorw %%k0, %%k0, %0" : "=k"(all), "+v"(zero));
    return _mm512_mask_i32gather_epi32(zero, all, idx, (const void *)iq1s_grid_p1_nib, 4);
}

/* Half h's dot products: dword lane l the exact sum over entry 16h + l's 8
 * coordinates of (g + 1) a, |sum| <= 8 * 2 * 128 (the even coordinates from
 * the low nibbles of each byte, the odd ones from the high). */
IQ1_INLINE __m512i iq1_half_dot(__m512i words, const iq1_act *act, int h)
{
    const __m512i nib = iq1_gather(iq1_indices(words, h)), low = _mm512_set1_epi8(0x0F);
    /* each byte's high nibble to its low one, in one op: row 7 - i of the bit
     * matrix selects source bit 4 + i for result bit i < 4, none for i >= 4 */
    const __m512i even = _mm512_and_si512(nib, low),
                  odd = _mm512_gf2p8affine_epi64_epi8(nib, _mm512_set1_epi64(0x1020408000000000ll), 0);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), even, act->even[h]), odd, act->odd[h]);
}

/* One super-block (its 25 words) against its activations: 16 int32 lanes
 * whose sum is its exact integer total. */
IQ1_INLINE __m512i iq1s_super_act(__m512i words, const iq1_act *act)
{
    const __m512i lsign = _mm512_srli_epi16(_mm512_permutexvar_epi16(_mm512_load_si512(iq1_ctl.lsign_words), words), 12);
    const __m512i bsum = _mm512_madd_epi16(_mm512_permutexvar_epi16(lsign, _mm512_load_si512(iq1_ctl.bsum_factor)),
                                           act->bsums);
    const __m512i dots = _mm512_packs_epi32(iq1_half_dot(words, act, 0), iq1_half_dot(words, act, 1));
    return _mm512_dpwssd_epi32(bsum, dots, _mm512_permutexvar_epi16(lsign, _mm512_load_si512(iq1_ctl.grid_factor)));
}

IQ1_INLINE __m512i iq1_load_words(const block_iq1_s *b)
{
    return _mm512_maskz_loadu_epi8(IQ1_BLOCK_BYTES, b);
}

IQ1_INLINE void iq1_load_act(const block_q8_K *y, iq1_act *act)
{
    const __m512i even = _mm512_load_si512(iq1_ctl.even_bytes), odd = _mm512_load_si512(iq1_ctl.odd_bytes);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        const __m512i a0 = _mm512_loadu_si512(y->qs + 128 * h), a1 = _mm512_loadu_si512(y->qs + 128 * h + 64);
        act->even[h] = _mm512_permutex2var_epi8(a0, even, a1);
        act->odd[h] = _mm512_permutex2var_epi8(a0, odd, a1);
    }
    act->bsums = _mm512_maskz_permutexvar_epi16(0x33333333u, _mm512_load_si512(iq1_ctl.bsum_words),
                                                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y->bsums)));
}

/* One super-block against y: 16 int32 lanes whose sum is its exact integer total. */
IQ1_INLINE __m512i iq1s_super(const block_iq1_s *b, const block_q8_K *y)
{
    iq1_act act;
    iq1_load_act(y, &act);
    return iq1s_super_act(iq1_load_words(b), &act);
}

/* gemm_x86_tokens.inc's one-token float step: acc + (dw * d_a) * total, one
 * fused rounding (fmaf). */
IQ1_INLINE float iq1_step(float acc, const block_iq1_s *b, const block_q8_K *y, float total)
{
    const float dw = _cvtsh_ss(b->d) * 0.125f;
    return fmaf(dw * y->d, total, acc);
}

static void iq1s_dot(int64_t n, float *out, const void *w, const void *a)
{
    const block_iq1_s *x = w;
    const block_q8_K *y = a;
    const int64_t nb = n / QK_K;
    float acc = 0.0f;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) { /* two super-blocks a step, their steps in order */
        _mm_prefetch((const char *)(x + i) + 1024, _MM_HINT_T0); /* as vec_dot_iq_x86.inc's iq_prefetch */
        _mm_prefetch((const char *)(x + i + 1) + 1024, _MM_HINT_T0);
        const __m512 totals = vbmi_totals2(iq1s_super(x + i, y + i), iq1s_super(x + i + 1, y + i + 1));
        acc = iq1_step(acc, x + i, y + i, _mm512_cvtss_f32(totals));
        acc = iq1_step(acc, x + i + 1, y + i + 1, _mm_cvtss_f32(_mm512_extractf32x4_ps(totals, 2)));
    }
    if (i < nb)
        acc = iq1_step(acc, x + i, y + i, _mm512_cvtss_f32(vbmi_totals2(iq1s_super(x + i, y + i), _mm512_setzero_si512())));
    *out = acc;
}

/* SIMD_ROWS rows' lanes (one super-block each) to their four totals, row r
 * in dword r: dwords of two rows interleaved and added (each 128-bit lane
 * then holds both rows' partial sums), then qwords of the two pairs, then
 * the four 128-bit lanes.  13 vector ops for four rows, against 18 for two
 * vbmi_totals2 (plus the three extractions of their floats). */
IQ1_INLINE __m128i iq1_totals4(const __m512i s[SIMD_ROWS])
{
    const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* The four rows' d (word 0 of each row's words) as floats, row r in float r. */
IQ1_INLINE __m128 iq1_d4(const __m512i words[SIMD_ROWS])
{
    const __m128i d01 = _mm_unpacklo_epi16(_mm512_castsi512_si128(words[0]), _mm512_castsi512_si128(words[1]));
    const __m128i d23 = _mm_unpacklo_epi16(_mm512_castsi512_si128(words[2]), _mm512_castsi512_si128(words[3]));
    return _mm_cvtph_ps(_mm_unpacklo_epi32(d01, d23));
}

/* SIMD_ROWS rows at once, one super-block of each a step: the activations
 * are loaded once for all four rows (64-byte loads at offset 4 of a 292-byte
 * block, so most of them split cache lines), the four totals reduced
 * together, and the float step runs in the four lanes of one vector: lane r
 * does row r's fmaf(dw * d_a, total, acc) of iq1_step, the same roundings
 * in the same order, so out[r] equals iq1s_dot of row r bit for bit.
 * The four rows are four short streams that end where the next group's
 * begin; each row prefetches the same position of the next group, as
 * vec_dot_x86.inc's x86_b32_rows does: with iq1s_dot's 1 KiB ahead
 * instead, 32 threads read 70-76 GB/s from memory against one row at a
 * time's 80-84 although they ran 1.14x faster in cache; with the next
 * group's position 83-94 (docs/PERFORMANCE.md, "IQ kernels, session 10"). */
static void iq1s_dot_rows(int64_t n, float *out, const void *w, size_t row_stride, const void *a)
{
    const uint8_t *w8 = w;
    const block_q8_K *y = a;
    const int64_t nb = n / QK_K;
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i words[SIMD_ROWS], lanes[SIMD_ROWS];
        iq1_act act;
        iq1_load_act(y + i, &act);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < SIMD_ROWS; r++) {
            const block_iq1_s *b = (const block_iq1_s *)(w8 + (size_t)r * row_stride) + i;
            _mm_prefetch((const char *)b + SIMD_ROWS * row_stride, _MM_HINT_T0); /* see above */
            words[r] = iq1_load_words(b);
            lanes[r] = iq1s_super_act(words[r], &act);
        }
        const __m128 dw = _mm_mul_ps(iq1_d4(words), _mm_set1_ps(0.125f));
        acc = _mm_fmadd_ps(_mm_mul_ps(dw, _mm_set1_ps(y[i].d)), _mm_cvtepi32_ps(iq1_totals4(lanes)), acc);
    }
    _mm_storeu_ps(out, acc);
}

/* One token: this set's rows and vec_dot (the same outputs); more: the
 * AVX-512 set's kernel (the same outputs, see above). */
static void iq1s_gemm(int64_t n, const void *w, size_t row_stride, int rows, const void *a, size_t a_stride, int toks,
                      float *y, size_t y_stride)
{
    if (toks > 1) {
        simd_iq_avx512.gemm[QT_IQ1_S](n, w, row_stride, rows, a, a_stride, toks, y, y_stride);
        return;
    }
    int r = 0;
    for (; r + SIMD_ROWS <= rows; r += SIMD_ROWS)
        iq1s_dot_rows(n, y + r, (const uint8_t *)w + (size_t)r * row_stride, row_stride, a);
    for (; r < rows; r++)
        iq1s_dot(n, y + r, (const uint8_t *)w + (size_t)r * row_stride, a);
}

X86_TARGET_END

const simd_kernels simd_iq1_avx512vbmi = {
    .isa = "avx512vbmi-iq1",
    .runs_on = cpu_has_avx512vbmi_set,
    .vec_dot = {[QT_IQ1_S] = iq1s_dot},
    .vec_dot_rows = {[QT_IQ1_S] = iq1s_dot_rows},
    .gemm = {[QT_IQ1_S] = iq1s_gemm},
};

#endif
