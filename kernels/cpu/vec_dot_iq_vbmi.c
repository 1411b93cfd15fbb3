/*
 * vec_dot_iq_vbmi.c — IQ2_XXS and IQ3_XXS against Q8_K on AVX-512 VBMI +
 * GFNI, 64 values a register, with no table load in the inner loop.
 * Dispatched only where cpu_features reports VBMI and GFNI beside the
 * AVX-512 set (cpu_has_avx512vbmi_set).  Other files may add sets of this
 * tier for other formats: each registers its own table in dispatch.c.
 *
 * The grid points become codes: an IQ2_XXS point is 8 levels of {8, 25,
 * 43}, 2 bits each, and an IQ3_XXS point 4 of {4, 12, ..., 52, 62}, 3 bits
 * each, so either grid's 256 points fit in 16-bit codes, 512 bytes, held in
 * 8 zmm registers for a row.  Per super-block:
 *   - one vpermb places its grid indices (doubled, plus which byte of the
 *     code) and four vpermi2b with three blends (by index bits 6 and 7)
 *     look up 32 codes at once; the codes are stored, and each 64 values
 *     broadcast from that store (a load, not a shuffle) into the qwords
 *     whose values they give;
 *   - vpmultishiftqb moves each value's 2 or 3 code bits into its byte,
 *     and gf2p8affineqb (IQ2_XXS: any map of 3 points of 2 bits is affine
 *     over GF(2)) or vpermb (IQ3_XXS: 62 breaks 4 + 8c) makes the level;
 *   - the 7-bit sign indices come out of the words by vpmultishiftqb, and
 *     gf2p8affineqb adds bit 7, the parity of the other 7 (iq_ksigns'
 *     definition); those bits negate the activations under a mask;
 *   - vpdpbusd sums 4 products a dword lane (|sum| <= 4 * 62 * 128, inside
 *     int16), vpackssdw packs two registers' lanes exactly, and vpmaddwd
 *     / vpdpwssd multiply them by the sub-block scales 2l + 1.
 * The super-block's integer total is the reference's, and the float step
 * is vec_dot_iq_x86.inc's one-token step (acc + (dw * d_a) * total, one
 * fused rounding), so every output equals the AVX2 set's bit for bit.
 * Several tokens at once go to the AVX-512 set's gemm, whose one-token
 * outputs these equal.
 */
#include "vec_dot_iq.h"
#include "x86_target.h"

#if defined(__x86_64__)

#include "iq_blocks.h"
#include "iq_grids.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

/* ---- the constants, built once (plain C, before the target pragma) -------- */

/* Byte vectors (loaded as zmm) and the code tables.  A "slot" is one 16-bit
 * code of the stored codes r[]: IQ2_XXS stores 32 a super-block, IQ3_XXS
 * 64 (two lookups).  The slot order is chosen so that the 16 (IQ2_XXS) or
 * 32 (IQ3_XXS) bytes of a chunk of 64 values, broadcast to every 128-bit
 * (256-bit) lane, put each 8 values' codes in their own qword. */
typedef struct vbmi_consts {
    _Alignas(64) uint16_t code2[256]; /* IQ2_XXS point -> 8 x 2-bit level index */
    _Alignas(64) uint16_t code3[256]; /* IQ3_XXS point -> 4 x 3-bit level index */
    _Alignas(64) uint8_t slots2[64];  /* IQ2_XXS: lookup byte p <- qs byte of slot p / 2 */
    _Alignas(64) uint8_t slots3[2][64]; /* IQ3_XXS: the same, slots 0..31 and 32..63 */
    _Alignas(64) uint8_t low_high[64];  /* p % 2: which byte of the code */
    _Alignas(64) uint8_t bits2[64];   /* vpmultishiftqb: value k of qword g, IQ2_XXS */
    _Alignas(64) uint8_t bits3[64];   /* the same, IQ3_XXS */
    _Alignas(64) uint8_t levels3[64]; /* IQ3_XXS level of code x & 7 */
    _Alignas(64) uint8_t words2[64];  /* IQ2_XXS: qs -> its 8 words in bytes 0..31 */
    _Alignas(64) uint8_t sign_bits[64]; /* words -> 32 seven-bit sign indices */
    _Alignas(64) uint8_t scale_bytes[2][64]; /* words -> the scale byte of each packed word */
} vbmi_consts;

static vbmi_consts consts;
static pthread_once_t consts_once = PTHREAD_ONCE_INIT;

static const uint8_t levels2[3] = {8, 25, 43};
static const uint8_t levels3_list[8] = {4, 12, 20, 28, 36, 44, 52, 62};

/* Index of level v in list, or 0 where absent (the grids hold only these
 * levels: iq_grid_tables_hold_their_levels_and_sign_parity). */
static unsigned level_index(const uint8_t *list, int count, uint8_t v)
{
    for (int c = 0; c < count; c++)
        if (list[c] == v)
            return (unsigned)c;
    return 0;
}

/* The slot of IQ2_XXS group g (8 values) of chunk h: chunk h's 16 bytes are
 * qwords 2h (groups 0 2 4 6) and 2h + 1 (1 3 5 7) of r, and a 128-bit
 * broadcast gives qword g the code of its group as word g / 2. */
static int slot2(int h, int g)
{
    return 8 * h + 4 * (g % 2) + g / 2;
}

/* The slot of IQ3_XXS group q (4 values) of chunk h: qword g = q / 2 of a
 * 256-bit broadcast is r's qword 4h + g % 4, holding the codes of qwords g
 * (words 0, 1) and g + 4 (words 2, 3). */
static int slot3(int h, int q)
{
    const int g = q / 2;
    return 16 * h + 4 * (g % 4) + 2 * (g / 4) + q % 2;
}

/* Sub-block sb's scale byte in the words vector (l in its high nibble). */
static uint8_t scale_byte(int sb)
{
    return (uint8_t)(4 * sb + 3);
}

static void build_consts(void)
{
    vbmi_consts *c = &consts;
    for (int i = 0; i < 256; i++) {
        unsigned v2 = 0, v3 = 0;
        for (int k = 0; k < 8; k++)
            v2 |= level_index(levels2, 3, (uint8_t)(iq2xxs_grid[i] >> (8 * k))) << (2 * k);
        for (int k = 0; k < 4; k++)
            v3 |= level_index(levels3_list, 8, (uint8_t)(iq3xxs_grid[i] >> (8 * k))) << (3 * k);
        c->code2[i] = (uint16_t)v2;
        c->code3[i] = (uint16_t)v3;
    }
    for (int h = 0; h < 4; h++)
        for (int g = 0; g < 8; g++) {
            const int group = 8 * h + g; /* sub-block group / 4, index group % 4 */
            for (int b = 0; b < 2; b++)
                c->slots2[2 * slot2(h, g) + b] = (uint8_t)(8 * (group / 4) + group % 4);
        }
    for (int h = 0; h < 4; h++)
        for (int q = 0; q < 16; q++) {
            const int s = slot3(h, q);
            for (int b = 0; b < 2; b++)
                c->slots3[s / 32][2 * (s % 32) + b] = (uint8_t)(16 * h + q);
        }
    for (int p = 0; p < 64; p++) {
        const int g = p / 8, k = p % 8;
        c->low_high[p] = (uint8_t)(p % 2);
        c->bits2[p] = (uint8_t)(16 * (g / 2) + 2 * k);
        c->bits3[p] = (uint8_t)(16 * (2 * (g / 4) + k / 4) + 3 * (k % 4));
        c->levels3[p] = levels3_list[p % 8];
        c->words2[p] = p < 32 ? (uint8_t)(8 * (p / 4) + 4 + p % 4) : 0;
        /* qword m of the words holds words 2m, 2m + 1: index k of each at 7k, 32 + 7k */
        c->sign_bits[p] = p < 32 ? (uint8_t)(32 * (k / 4) + 7 * (k % 4)) : 0;
    }
    /* vpackssdw(A, B) word w: lane L = w / 8, from A (w % 8 < 4) or B, dword
     * 4L + w % 4 of it; A's dwords 0..7 are its chunk's first sub-block. */
    for (int pair = 0; pair < 2; pair++)
        for (int w = 0; w < 32; w++) {
            const int sb = 4 * pair + (w % 8 < 4 ? 0 : 2) + (w / 8) / 2;
            c->scale_bytes[pair][2 * w] = scale_byte(sb);
            c->scale_bytes[pair][2 * w + 1] = 0;
        }
}

static const vbmi_consts *get_consts(void)
{
    pthread_once(&consts_once, build_consts);
    return &consts;
}

/* ---- the kernels ----------------------------------------------------------- */

X86_TARGET_BEGIN(X86_SET_AVX512VBMI)

#define VB_INLINE static inline __attribute__((always_inline))

enum vb_kind { VB_IQ2_XXS, VB_IQ3_XXS };

static const struct vb_format {
    size_t block_bytes;
    float d_factor; /* quant_iq.c's: d * d_factor * (2l + 1) * q */
} vb_formats[] = {
    [VB_IQ2_XXS] = {sizeof(block_iq2_xxs), 0.125f},
    [VB_IQ3_XXS] = {sizeof(block_iq3_xxs), 0.25f},
};

/* gf2p8affineqb matrices (qword byte 7 - i: the input bits of output bit i).
 * Level of a 2-bit code c = b0 + 2 b1: 8 ^ b0 * 0x11 ^ b1 * 0x23 gives 8,
 * 25, 43; bits 2..7 of the input are ignored. */
#define VB_LEVELS2 0x0302000001020000ll
#define VB_LEVELS2_XOR 0x08
/* Sign byte of a 7-bit index: bits 0..6 kept, bit 7 their parity. */
#define VB_PARITY7 0x010204081020407Fll

/* The loaded code table and the constant vectors of one row. */
typedef struct vb_row {
    __m512i table[8];
    __m512i low_high, bits, levels3, sign_bits, scale01, scale23;
} vb_row;

VB_INLINE void vb_row_begin(const int kind, const vbmi_consts *c, vb_row *v)
{
    const uint16_t *codes = kind == VB_IQ2_XXS ? c->code2 : c->code3;
    for (int t = 0; t < 8; t++)
        v->table[t] = _mm512_load_si512(codes + 32 * t);
    v->low_high = _mm512_load_si512(c->low_high);
    v->bits = _mm512_load_si512(kind == VB_IQ2_XXS ? c->bits2 : c->bits3);
    v->levels3 = _mm512_load_si512(c->levels3);
    v->sign_bits = _mm512_load_si512(c->sign_bits);
    v->scale01 = _mm512_load_si512(c->scale_bytes[0]);
    v->scale23 = _mm512_load_si512(c->scale_bytes[1]);
}

/* The codes of the 32 grid indices that slots (a vpermb control over src)
 * picks, into r[0..63]: byte 2s + b of r is byte b of slot s's code. */
VB_INLINE void vb_codes(const vb_row *v, __m512i slots, __m512i src, uint8_t *r)
{
    const __m512i idx = _mm512_permutexvar_epi8(slots, src);
    const __mmask64 bit7 = _mm512_movepi8_mask(idx);
    const __m512i twice = _mm512_add_epi8(idx, idx);
    const __mmask64 bit6 = _mm512_movepi8_mask(twice);
    /* (2 index + b) mod 128: the byte within a 128-byte quarter of the
     * table; index bits 6 and 7 pick the quarter */
    const __m512i at = _mm512_or_si512(twice, v->low_high);
    const __m512i q0 = _mm512_permutex2var_epi8(v->table[0], at, v->table[1]);
    const __m512i q1 = _mm512_permutex2var_epi8(v->table[2], at, v->table[3]);
    const __m512i q2 = _mm512_permutex2var_epi8(v->table[4], at, v->table[5]);
    const __m512i q3 = _mm512_permutex2var_epi8(v->table[6], at, v->table[7]);
    const __m512i low = _mm512_mask_blend_epi8(bit6, q0, q1), high = _mm512_mask_blend_epi8(bit6, q2, q3);
    _mm512_store_si512(r, _mm512_mask_blend_epi8(bit7, low, high));
}

/* What a super-block's chunks read back from memory: the codes and the
 * sign bits (bit 8m + i of u64 h: value i of the m-th 8 values of chunk h
 * negative), stored whole and read by parts; and its two scale vectors. */
typedef struct vb_super {
    _Alignas(64) uint8_t r[128];
    _Alignas(64) uint64_t neg[4];
    __m512i sc01, sc23;
} vb_super;

/* Keeps an array in memory once stored, so the chunks read it with loads
 * (broadcasts, mask-register loads: the load ports) instead of shuffles. */
#define VB_IN_MEMORY(v) __asm__("" : "+m"(v))

/* From the 8 sub-blocks' words (bytes 0..31 of words; sub-block j's u32:
 * four 7-bit sign indices, l in bits 28..31): the sign bits and, for the
 * packed sums of chunks 0, 1 and of 2, 3, the scale 2l + 1 of each word
 * (the scale byte's high nibble l and bit 3, a sign bit, shifted down to
 * 2l + bit; the | 1 sets bit 0 anyway). */
VB_INLINE void vb_words(const vb_row *v, __m512i words, vb_super *s)
{
    const __m512i idx7 = _mm512_multishift_epi64_epi8(v->sign_bits, words);
    const __m512i signs = _mm512_gf2p8affine_epi64_epi8(idx7, _mm512_set1_epi64(VB_PARITY7), 0);
    _mm256_store_si256((__m256i *)s->neg, _mm512_castsi512_si256(signs));
    VB_IN_MEMORY(s->neg);
    const __mmask64 even = 0x5555555555555555ull;
    const __m512i one = _mm512_set1_epi16(1);
    s->sc01 = _mm512_or_si512(_mm512_srli_epi16(_mm512_maskz_permutexvar_epi8(even, v->scale01, words), 3), one);
    s->sc23 = _mm512_or_si512(_mm512_srli_epi16(_mm512_maskz_permutexvar_epi8(even, v->scale23, words), 3), one);
}

VB_INLINE void vb_begin(const int kind, const vbmi_consts *c, const vb_row *v, const uint8_t *blk, vb_super *s)
{
    if (kind == VB_IQ2_XXS) {
        const __m512i qs = _mm512_loadu_si512(((const block_iq2_xxs *)blk)->qs);
        vb_codes(v, _mm512_load_si512(c->slots2), qs, s->r);
        vb_words(v, _mm512_permutexvar_epi8(_mm512_load_si512(c->words2), qs), s);
    } else {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const __m512i qs = _mm512_loadu_si512(b->qs);
        vb_codes(v, _mm512_load_si512(c->slots3[0]), qs, s->r);
        vb_codes(v, _mm512_load_si512(c->slots3[1]), qs, s->r + 64);
        vb_words(v, _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(b->qs + 64))), s);
    }
    VB_IN_MEMORY(s->r);
}

/* The 64 magnitudes of chunk h (unsigned bytes). */
VB_INLINE __m512i vb_magnitudes(const int kind, const vb_row *v, const vb_super *s, int h)
{
    if (kind == VB_IQ2_XXS) {
        const __m512i codes = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(s->r + 16 * h)));
        return _mm512_gf2p8affine_epi64_epi8(_mm512_multishift_epi64_epi8(v->bits, codes),
                                             _mm512_set1_epi64(VB_LEVELS2), VB_LEVELS2_XOR);
    }
    const __m512i codes = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(s->r + 32 * h)));
    return _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(v->bits, codes), v->levels3);
}

/* Chunk h's sums, 4 products a dword lane: lanes 0..7 its first sub-block,
 * 8..15 its second. */
VB_INLINE __m512i vb_chunk(const int kind, const vb_row *v, const vb_super *s, const block_q8_K *y, int h)
{
    const __m512i act = _mm512_loadu_si512(y->qs + 64 * h);
    uint64_t neg;
    memcpy(&neg, &s->neg[h], sizeof neg);
    const __m512i signed_act = _mm512_mask_sub_epi8(act, _cvtu64_mask64(neg), _mm512_setzero_si512(), act);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), vb_magnitudes(kind, v, s, h), signed_act);
}

/* The super-block's integer total, in lane 0 (and every lane): the chunk
 * sums packed to words (exact: |lane| <= 4 * 62 * 128 < 2^15) times their
 * sub-blocks' scales, then the 16 lanes added in vector registers. */
VB_INLINE __m128i vb_total(const int kind, const vb_row *v, const vb_super *s, const block_q8_K *y)
{
    const __m512i p01 = _mm512_packs_epi32(vb_chunk(kind, v, s, y, 0), vb_chunk(kind, v, s, y, 1));
    const __m512i p23 = _mm512_packs_epi32(vb_chunk(kind, v, s, y, 2), vb_chunk(kind, v, s, y, 3));
    const __m512i t = _mm512_dpwssd_epi32(_mm512_madd_epi16(p01, s->sc01), p23, s->sc23);
    const __m256i t8 = _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t8), _mm256_extracti128_si256(t8, 1));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
    return _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
}

/* Lines of the next super-blocks while this one computes (as
 * vec_dot_iq_x86.inc's iq_prefetch). */
VB_INLINE void vb_prefetch(const uint8_t *blk, size_t bytes)
{
    for (size_t at = 0; at < bytes; at += 64)
        _mm_prefetch((const char *)blk + 1024 + at, _MM_HINT_T0);
}

/* Super-block i's float step, from its decode s (vec_dot_iq_x86.inc's
 * one-token step: acc + (dw * d_a) * total, one fused rounding). */
VB_INLINE __m128 vb_step(const int kind, const vb_row *v, const vb_super *s, const uint8_t *blk, const block_q8_K *y,
                         __m128 acc)
{
    const __m128i total = vb_total(kind, v, s, y);
    uint16_t d_bits;
    memcpy(&d_bits, blk, sizeof d_bits);
    const float dw = _cvtsh_ss(d_bits) * vb_formats[kind].d_factor;
    return _mm_fmadd_ss(_mm_set_ss(dw * y->d), _mm_cvtepi32_ps(total), acc);
}

/* One row of nb super-blocks against one Q8_K row, the float steps in
 * order.  Super-block i + 1 is begun (codes, signs, scales: a chain of
 * shuffles ending in stores) before i's chunks, which read what the
 * previous step stored: the two halves do not wait on each other, so
 * the scheduler does not fill with one super-block's dependent chain.
 * Two super-blocks a step keep each decode in a fixed place. */
VB_INLINE float vb_row_dot(const int kind, int64_t nb, const uint8_t *row, const block_q8_K *y)
{
    const vbmi_consts *c = get_consts();
    const size_t bb = vb_formats[kind].block_bytes;
    vb_row v;
    vb_row_begin(kind, c, &v);
    __m128 acc = _mm_setzero_ps();
    vb_super even, odd;
    int64_t i = 0;
    if (nb > 0)
        vb_begin(kind, c, &v, row, &even);
    for (; i + 1 < nb; i += 2) {
        const uint8_t *blk = row + (size_t)i * bb;
        vb_prefetch(blk, 2 * bb);
        vb_begin(kind, c, &v, blk + bb, &odd);
        acc = vb_step(kind, &v, &even, blk, y + i, acc);
        if (i + 2 < nb)
            vb_begin(kind, c, &v, blk + 2 * bb, &even);
        acc = vb_step(kind, &v, &odd, blk + bb, y + i + 1, acc);
    }
    if (i < nb)
        acc = vb_step(kind, &v, &even, row + (size_t)i * bb, y + i, acc);
    return _mm_cvtss_f32(acc);
}

#define VB_KERNELS(fn, kind, QT)                                                                                \
    static void vb_##fn##_dot(int64_t n, float *out, const void *w, const void *a)                              \
    {                                                                                                           \
        *out = vb_row_dot(kind, n / QK_K, w, a);                                                                \
    }                                                                                                           \
    static void vb_##fn##_gemm(int64_t n, const void *w, size_t row_stride, int rows, const void *a,            \
                               size_t a_stride, int toks, float *y, size_t y_stride)                            \
    {                                                                                                           \
        if (toks > 1) {                                                                                         \
            simd_iq_avx512.gemm[QT](n, w, row_stride, rows, a, a_stride, toks, y, y_stride);                    \
            return;                                                                                             \
        }                                                                                                       \
        for (int r = 0; r < rows; r++)                                                                          \
            y[r] = vb_row_dot(kind, n / QK_K, (const uint8_t *)w + (size_t)r * row_stride, a);                  \
    }

VB_KERNELS(iq2_xxs, VB_IQ2_XXS, QT_IQ2_XXS)
VB_KERNELS(iq3_xxs, VB_IQ3_XXS, QT_IQ3_XXS)

X86_TARGET_END

const simd_kernels simd_iq_avx512vbmi = {
    .isa = "avx512vbmi-iq",
    .runs_on = cpu_has_avx512vbmi_set,
    .vec_dot = {[QT_IQ2_XXS] = vb_iq2_xxs_dot, [QT_IQ3_XXS] = vb_iq3_xxs_dot},
    .gemm = {[QT_IQ2_XXS] = vb_iq2_xxs_gemm, [QT_IQ3_XXS] = vb_iq3_xxs_gemm},
};

#endif
