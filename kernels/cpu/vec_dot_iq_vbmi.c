/*
 * vec_dot_iq_vbmi.c — IQ2_XXS and IQ3_XXS against Q8_K on AVX-512 VBMI +
 * GFNI, 64 values a register, with no table load in the inner loop.
 * Dispatched only where cpu_features reports VBMI and GFNI beside the
 * AVX-512 set (cpu_has_avx512vbmi_set).  Other files may add sets of this
 * tier for other formats: each registers its own table in dispatch.c.
 *
 * The grid points become codes: an IQ2_XXS point is 8 levels of {8, 25,
 * 43}, 2 bits each, and an IQ3_XXS point 4 of {4, 12, ..., 52, 62}, 3 bits
 * each, so either grid's 256 points fit in 16-bit codes, kept as two
 * 256-byte tables (the codes' low and high bytes) in 8 zmm registers for a
 * row.  Super-blocks go in pairs:
 *   - 64 grid indices at once (IQ2_XXS: both super-blocks' 32, picked out
 *     of their two qs vectors by one vpermi2b; IQ3_XXS: one super-block's
 *     64, put in order by one vpermb) look up their codes' low bytes by two
 *     vpermi2b and a blend by index bit 7, the high bytes likewise, and
 *     vpunpck[lh]bw join them into 64 codes, stored; each 64 values then
 *     broadcast their codes from that store (a load, not a shuffle) into the
 *     qwords whose values they give;
 *   - vpmultishiftqb moves each value's 2 or 3 code bits into its byte,
 *     and gf2p8affineqb (IQ2_XXS: any map of 3 points of 2 bits is affine
 *     over GF(2)) or vpermb (IQ3_XXS: 62 breaks 4 + 8c) makes the level;
 *   - both super-blocks' 7-bit sign indices come out of their 16 words by
 *     one vpmultishiftqb, and gf2p8affineqb adds bit 7, the parity of the
 *     other 7 (iq_ksigns' definition); those bits negate the activations
 *     under a mask; a second gf2p8affineqb turns each scale byte into 2l + 1;
 *   - vpdpbusd sums 4 products a dword lane (|sum| <= 4 * 62 * 128, inside
 *     int16), vpackssdw packs two registers' lanes exactly, and vpmaddwd
 *     / vpdpwssd multiply them by the sub-block scales 2l + 1; the two
 *     super-blocks' lanes are summed in one reduction.
 * The super-block's integer total is the reference's, and the float step
 * is vec_dot_iq_x86.inc's one-token step (acc + (dw * d_a) * total, one
 * fused rounding, super-blocks in order), so every output equals the AVX2
 * set's bit for bit.  Several tokens at once go to the AVX-512 set's gemm,
 * whose one-token outputs these equal.
 */
#include "vec_dot_iq.h"
#include "x86_target.h"

#if defined(__x86_64__)

#include "iq_blocks.h"
#include "iq_grids.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* ---- the constants, built once (plain C, before the target pragma) -------- */

/* Byte vectors (loaded as zmm) and the code tables.  A "slot" is one 16-bit
 * code of a stored block of 64 codes r[]: an IQ2_XXS pair stores 32 of each
 * super-block, an IQ3_XXS super-block 64.  The slot order is chosen so
 * that the 16 (IQ2_XXS) or 32 (IQ3_XXS) bytes of a chunk of 64 values,
 * broadcast to every 128-bit (256-bit) lane, put each 8 values' codes in
 * their own qword; the index order that the lookup takes is the one that
 * vpunpck[lh]bw turn into that slot order. */
typedef struct vbmi_consts {
    _Alignas(64) uint8_t codes[2][2][256]; /* [format][byte]: byte 0 or 1 of each grid point's code */
    _Alignas(64) uint8_t place2[64];  /* IQ2_XXS: vpermi2b over (qs, next qs): lookup byte p <- index */
    _Alignas(64) uint8_t place3[64];  /* IQ3_XXS: vpermb over qs: the same */
    _Alignas(64) uint8_t words2[64];  /* IQ2_XXS: (qs, next qs) -> 8 words each, in bytes 0..31, 32..63 */
    _Alignas(64) uint8_t bits2[64];   /* vpmultishiftqb: value k of qword g, IQ2_XXS */
    _Alignas(64) uint8_t bits3[64];   /* the same, IQ3_XXS */
    _Alignas(64) uint8_t levels3[64]; /* IQ3_XXS level of code x & 7 */
    _Alignas(64) uint8_t sign_bits[64]; /* 16 words -> 64 seven-bit sign indices */
    _Alignas(64) uint8_t scale_bytes[2][2][64]; /* [super-block][chunk pair]: the scale byte of each packed word */
} vbmi_consts;

enum vb_kind { VB_IQ2_XXS, VB_IQ3_XXS };

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

/* The lookup byte that lands in slot s: vpunpcklbw (stored first) joins
 * bytes 0..7 of each 128-bit lane L into words 8L..8L + 7, vpunpckhbw
 * (stored second) bytes 8..15 into words 32 + 8L.. */
static int position_of_slot(int s)
{
    return 16 * ((s % 32) / 8) + 8 * (s / 32) + s % 8;
}

/* Sub-block sb's scale byte in the words vector (l in its high nibble). */
static uint8_t scale_byte(int sb)
{
    return (uint8_t)(4 * sb + 3);
}

static void build_tables(vbmi_consts *c)
{
    for (int i = 0; i < 256; i++) {
        unsigned v2 = 0, v3 = 0;
        for (int k = 0; k < 8; k++)
            v2 |= level_index(levels2, 3, (uint8_t)(iq2xxs_grid[i] >> (8 * k))) << (2 * k);
        for (int k = 0; k < 4; k++)
            v3 |= level_index(levels3_list, 8, (uint8_t)(iq3xxs_grid[i] >> (8 * k))) << (3 * k);
        for (int b = 0; b < 2; b++) {
            c->codes[VB_IQ2_XXS][b][i] = (uint8_t)(v2 >> (8 * b));
            c->codes[VB_IQ3_XXS][b][i] = (uint8_t)(v3 >> (8 * b));
        }
    }
    for (int t = 0; t < 2; t++) /* IQ2_XXS: super-block t's 32 codes in slots 32t.. */
        for (int h = 0; h < 4; h++)
            for (int g = 0; g < 8; g++) {
                const int group = 8 * h + g; /* sub-block group / 4, index group % 4 */
                c->place2[position_of_slot(32 * t + slot2(h, g))] = (uint8_t)(64 * t + 8 * (group / 4) + group % 4);
            }
    for (int h = 0; h < 4; h++)
        for (int q = 0; q < 16; q++)
            c->place3[position_of_slot(slot3(h, q))] = (uint8_t)(16 * h + q);
}

static void build_consts(void)
{
    vbmi_consts *c = &consts;
    build_tables(c);
    for (int p = 0; p < 64; p++) {
        const int g = p / 8, k = p % 8;
        c->bits2[p] = (uint8_t)(16 * (g / 2) + 2 * k);
        c->bits3[p] = (uint8_t)(16 * (2 * (g / 4) + k / 4) + 3 * (k % 4));
        c->levels3[p] = levels3_list[p % 8];
        /* super-block p / 32's word (p % 32) / 4: bytes 8j + 4.. of its qs */
        c->words2[p] = (uint8_t)(64 * (p / 32) + 8 * ((p % 32) / 4) + 4 + p % 4);
        /* qword m of the words holds words 2m, 2m + 1: index k of each at 7k, 32 + 7k */
        c->sign_bits[p] = (uint8_t)(32 * (k / 4) + 7 * (k % 4));
    }
    /* vpackssdw(A, B) word w: lane L = w / 8, from A (w % 8 < 4) or B, dword
     * 4L + w % 4 of it; A's dwords 0..7 are its chunk's first sub-block. */
    for (int t = 0; t < 2; t++)
        for (int pair = 0; pair < 2; pair++)
            for (int w = 0; w < 32; w++) {
                const int sb = 4 * pair + (w % 8 < 4 ? 0 : 2) + (w / 8) / 2;
                c->scale_bytes[t][pair][2 * w] = (uint8_t)(32 * t + scale_byte(sb));
                c->scale_bytes[t][pair][2 * w + 1] = 0;
            }
}

static const vbmi_consts *get_consts(void)
{
    pthread_once(&consts_once, build_consts);
    return &consts;
}

/* ---- the kernels ----------------------------------------------------------- */

X86_TARGET_BEGIN(X86_SET_AVX512VBMI)

#include "vec_dot_iq_vbmi.h"

#define VB_INLINE static inline __attribute__((always_inline))

static const struct vb_format {
    size_t block_bytes;
    size_t codes_bytes; /* a super-block's stored codes */
    float d_factor;     /* quant_iq.c's: d * d_factor * (2l + 1) * q */
} vb_formats[] = {
    [VB_IQ2_XXS] = {sizeof(block_iq2_xxs), 64, 0.125f},
    [VB_IQ3_XXS] = {sizeof(block_iq3_xxs), 128, 0.25f},
};

/* gf2p8affineqb matrices (qword byte 7 - i: the input bits of output bit i).
 * Level of a 2-bit code c = b0 + 2 b1: 8 ^ b0 * 0x11 ^ b1 * 0x23 gives 8,
 * 25, 43; bits 2..7 of the input are ignored. */
#define VB_LEVELS2 0x0302000001020000ll
#define VB_LEVELS2_XOR 0x08
/* Sign byte of a 7-bit index: bits 0..6 kept, bit 7 their parity. */
#define VB_PARITY7 0x010204081020407Fll
/* Scale byte (l in bits 4..7) to 2l + 1: bits 4..7 to 1..4, xor 1. */
#define VB_SCALE 0x0010204080000000ll
#define VB_SCALE_XOR 0x01

/* The loaded code tables and the constant vectors of one row. */
typedef struct vb_row {
    __m512i low[4], high[4]; /* the codes' bytes 0 and 1, 64 points a register */
    __m512i bits, levels3;
} vb_row;

VB_INLINE void vb_row_begin(const int kind, const vbmi_consts *c, vb_row *v)
{
    for (int t = 0; t < 4; t++) {
        v->low[t] = _mm512_load_si512(c->codes[kind][0] + 64 * t);
        v->high[t] = _mm512_load_si512(c->codes[kind][1] + 64 * t);
    }
    v->bits = _mm512_load_si512(kind == VB_IQ2_XXS ? c->bits2 : c->bits3);
    v->levels3 = _mm512_load_si512(c->levels3);
}

/* Byte b of the codes of 64 grid indices: two 128-entry halves by index
 * bits 0..6, picked by bit 7. */
VB_INLINE __m512i vb_lookup(const __m512i *table, __m512i idx, __mmask64 bit7)
{
    return _mm512_mask_blend_epi8(bit7, _mm512_permutex2var_epi8(table[0], idx, table[1]),
                                  _mm512_permutex2var_epi8(table[2], idx, table[3]));
}

/* The codes of the 64 grid indices idx into r[0..127], in slot order. */
VB_INLINE void vb_codes(const vb_row *v, __m512i idx, uint8_t *r)
{
    const __mmask64 bit7 = _mm512_movepi8_mask(idx);
    const __m512i low = vb_lookup(v->low, idx, bit7), high = vb_lookup(v->high, idx, bit7);
    _mm512_store_si512(r, _mm512_unpacklo_epi8(low, high));
    _mm512_store_si512(r + 64, _mm512_unpackhi_epi8(low, high));
}

/* What a pair's chunks read back from memory: the codes, the sign bits
 * (bit 8m + i of neg[4t + h]: value i of the m-th 8 values of super-block
 * t's chunk h negative) and the scales of the packed sums' words. */
typedef struct vb_pair {
    _Alignas(64) uint8_t r[256];
    _Alignas(64) uint64_t neg[8];
    __m512i scales[2][2]; /* [super-block][chunks 0, 1 or 2, 3] */
} vb_pair;

/* Keeps a pair in memory once stored, so the chunks read it with loads
 * (broadcasts, mask-register loads, memory operands: the load ports)
 * instead of shuffles. */
#define VB_IN_MEMORY(v) __asm__("" : "+m"(v))

/* From both super-blocks' words (bytes 32t..32t + 31 of words; sub-block
 * j's u32: four 7-bit sign indices, l in bits 28..31): the sign bits and,
 * for the packed sums of chunks 0, 1 and of 2, 3, the scale 2l + 1 of each
 * word. */
VB_INLINE void vb_words(const vbmi_consts *c, __m512i words, vb_pair *p)
{
    const __m512i idx7 = _mm512_multishift_epi64_epi8(_mm512_load_si512(c->sign_bits), words);
    _mm512_store_si512(p->neg, _mm512_gf2p8affine_epi64_epi8(idx7, _mm512_set1_epi64(VB_PARITY7), 0));
    const __m512i scales = _mm512_gf2p8affine_epi64_epi8(words, _mm512_set1_epi64(VB_SCALE), VB_SCALE_XOR);
    const __mmask64 even = 0x5555555555555555ull;
    for (int t = 0; t < 2; t++)
        for (int pair = 0; pair < 2; pair++)
            p->scales[t][pair] = _mm512_maskz_permutexvar_epi8(even, _mm512_load_si512(c->scale_bytes[t][pair]), scales);
}

/* Decodes super-blocks a and b (b = a for a row's odd last one) into p. */
VB_INLINE void vb_begin(const int kind, const vbmi_consts *c, const vb_row *v, const uint8_t *a, const uint8_t *b,
                        vb_pair *p)
{
    if (kind == VB_IQ2_XXS) {
        const __m512i qa = _mm512_loadu_si512(((const block_iq2_xxs *)a)->qs);
        const __m512i qb = _mm512_loadu_si512(((const block_iq2_xxs *)b)->qs);
        vb_codes(v, _mm512_permutex2var_epi8(qa, _mm512_load_si512(c->place2), qb), p->r);
        vb_words(c, _mm512_permutex2var_epi8(qa, _mm512_load_si512(c->words2), qb), p);
    } else {
        const uint8_t *qa = ((const block_iq3_xxs *)a)->qs, *qb = ((const block_iq3_xxs *)b)->qs;
        const __m512i place = _mm512_load_si512(c->place3);
        vb_codes(v, _mm512_permutexvar_epi8(place, _mm512_loadu_si512(qa)), p->r);
        vb_codes(v, _mm512_permutexvar_epi8(place, _mm512_loadu_si512(qb)), p->r + 128);
        vb_words(c, _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(qa + 64))),
                                       _mm256_loadu_si256((const __m256i *)(qb + 64)), 1),
                 p);
    }
    VB_IN_MEMORY(*p);
}

/* The 64 magnitudes of chunk h of the super-block whose codes are at r. */
VB_INLINE __m512i vb_magnitudes(const int kind, const vb_row *v, const uint8_t *r, int h)
{
    if (kind == VB_IQ2_XXS) {
        const __m512i codes = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(r + 16 * h)));
        return _mm512_gf2p8affine_epi64_epi8(_mm512_multishift_epi64_epi8(v->bits, codes),
                                             _mm512_set1_epi64(VB_LEVELS2), VB_LEVELS2_XOR);
    }
    const __m512i codes = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(r + 32 * h)));
    return _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(v->bits, codes), v->levels3);
}

/* Chunk h of super-block t's sums, 4 products a dword lane: lanes 0..7 its
 * first sub-block, 8..15 its second. */
VB_INLINE __m512i vb_chunk(const int kind, const vb_row *v, const vb_pair *p, int t, const block_q8_K *y, int h)
{
    const __m512i act = _mm512_loadu_si512(y->qs + 64 * h);
    uint64_t neg;
    memcpy(&neg, &p->neg[4 * t + h], sizeof neg);
    const __m512i signed_act = _mm512_mask_sub_epi8(act, _cvtu64_mask64(neg), _mm512_setzero_si512(), act);
    const uint8_t *r = p->r + vb_formats[kind].codes_bytes * (size_t)t;
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), vb_magnitudes(kind, v, r, h), signed_act);
}

/* Super-block t's 16 lanes, whose sum is its integer total: the chunk sums
 * packed to words (exact: |lane| <= 4 * 62 * 128 < 2^15) times their
 * sub-blocks' scales. */
VB_INLINE __m512i vb_lanes(const int kind, const vb_row *v, const vb_pair *p, int t, const block_q8_K *y)
{
    const __m512i p01 = _mm512_packs_epi32(vb_chunk(kind, v, p, t, y, 0), vb_chunk(kind, v, p, t, y, 1));
    const __m512i p23 = _mm512_packs_epi32(vb_chunk(kind, v, p, t, y, 2), vb_chunk(kind, v, p, t, y, 3));
    return _mm512_dpwssd_epi32(_mm512_madd_epi16(p01, p->scales[t][0]), p23, p->scales[t][1]);
}

/* Lines of the next super-blocks while these compute (as
 * vec_dot_iq_x86.inc's iq_prefetch). */
VB_INLINE void vb_prefetch(const uint8_t *blk, size_t bytes)
{
    for (size_t at = 0; at < bytes; at += 64)
        _mm_prefetch((const char *)blk + 1024 + at, _MM_HINT_T0);
}

/* One super-block's float step (vec_dot_iq_x86.inc's one-token step: acc +
 * (dw * d_a) * total, one fused rounding), its total in float 0. */
VB_INLINE float vb_step(const int kind, const uint8_t *blk, const block_q8_K *y, float total, float acc)
{
    /* d is the first half of the block: vcvtph2ps from memory (lane 0) */
    const float dw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)blk))) * vb_formats[kind].d_factor;
    return fmaf(dw * y->d, total, acc);
}

/* Super-blocks blk and the next against y, y + 1, from their decode p,
 * their float steps in order. */
VB_INLINE float vb_step2(const int kind, const vb_row *v, const vb_pair *p, const uint8_t *blk, const block_q8_K *y,
                         float acc)
{
    const __m512 totals = vbmi_totals2(vb_lanes(kind, v, p, 0, y), vb_lanes(kind, v, p, 1, y + 1));
    acc = vb_step(kind, blk, y, _mm512_cvtss_f32(totals), acc);
    return vb_step(kind, blk + vb_formats[kind].block_bytes, y + 1, _mm_cvtss_f32(_mm512_extractf32x4_ps(totals, 2)),
                   acc);
}

/* One row of nb super-blocks against one Q8_K row, the float steps in
 * order.  Pair j + 1 is begun (codes, signs, scales: chains of shuffles
 * ending in stores) before pair j's chunks, which read what the previous
 * step stored: the two halves do not wait on each other, so the scheduler
 * does not fill with one pair's dependent chain.  Two pairs a step keep
 * each decode in a fixed place. */
VB_INLINE float vb_row_dot(const int kind, int64_t nb, const uint8_t *row, const block_q8_K *y)
{
    const vbmi_consts *c = get_consts();
    const size_t bb = vb_formats[kind].block_bytes;
    vb_row v;
    vb_row_begin(kind, c, &v);
    float acc = 0.0f;
    vb_pair even, odd;
    const int64_t pairs = nb / 2;
    int64_t j = 0;
    if (pairs > 0)
        vb_begin(kind, c, &v, row, row + bb, &even);
    for (; j + 1 < pairs; j += 2) {
        const uint8_t *blk = row + (size_t)(2 * j) * bb;
        vb_prefetch(blk, 4 * bb);
        vb_begin(kind, c, &v, blk + 2 * bb, blk + 3 * bb, &odd);
        acc = vb_step2(kind, &v, &even, blk, y + 2 * j, acc);
        if (j + 2 < pairs)
            vb_begin(kind, c, &v, blk + 4 * bb, blk + 5 * bb, &even);
        acc = vb_step2(kind, &v, &odd, blk + 2 * bb, y + 2 * j + 2, acc);
    }
    if (j < pairs)
        acc = vb_step2(kind, &v, &even, row + (size_t)(2 * j) * bb, y + 2 * j, acc);
    if (nb % 2) {
        const uint8_t *last = row + (size_t)(nb - 1) * bb;
        vb_begin(kind, c, &v, last, last, &odd);
        const __m512 totals = vbmi_totals2(vb_lanes(kind, &v, &odd, 0, y + nb - 1), _mm512_setzero_si512());
        acc = vb_step(kind, last, y + nb - 1, _mm512_cvtss_f32(totals), acc);
    }
    return acc;
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
