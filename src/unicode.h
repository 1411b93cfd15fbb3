/*
 * unicode.h — what the tokenizers need to know about code points: UTF-8
 * decoding that survives any bytes, the general category, White_Space and
 * simple case folding.  The tables are generated (src/unicode_tables.c, by
 * src/gen_unicode_tables.py from the Unicode Character Database 15.0.0).
 */
#ifndef HYDRA_UNICODE_H
#define HYDRA_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* General categories (Unicode chapter 4.5).  Cn also stands for code points
 * the database does not list. */
typedef enum ucat {
    UCAT_Cn, UCAT_Lu, UCAT_Ll, UCAT_Lt, UCAT_Lm, UCAT_Lo, UCAT_Mn, UCAT_Mc, UCAT_Me,
    UCAT_Nd, UCAT_Nl, UCAT_No, UCAT_Pc, UCAT_Pd, UCAT_Ps, UCAT_Pe, UCAT_Pi, UCAT_Pf, UCAT_Po,
    UCAT_Sm, UCAT_Sc, UCAT_Sk, UCAT_So, UCAT_Zs, UCAT_Zl, UCAT_Zp, UCAT_Cc, UCAT_Cf, UCAT_Cs, UCAT_Co,
    UCAT_COUNT
} ucat;

/* Class masks: bit c for category c, plus one bit for White_Space, so one
 * 32-bit word per code point answers \p{L}, \p{N}, \s and their mixes. */
#define UBIT(cat) (1u << UCAT_##cat)
enum {
    UMASK_L = UBIT(Lu) | UBIT(Ll) | UBIT(Lt) | UBIT(Lm) | UBIT(Lo),
    UMASK_M = UBIT(Mn) | UBIT(Mc) | UBIT(Me),
    UMASK_N = UBIT(Nd) | UBIT(Nl) | UBIT(No),
    UMASK_P = UBIT(Pc) | UBIT(Pd) | UBIT(Ps) | UBIT(Pe) | UBIT(Pi) | UBIT(Pf) | UBIT(Po),
    UMASK_S = UBIT(Sm) | UBIT(Sc) | UBIT(Sk) | UBIT(So),
    UMASK_SPACE = 1u << UCAT_COUNT, /* the White_Space property: \s */
};

/* A byte that is not part of well-formed UTF-8 decodes to this value with
 * length 1; it classifies as U+FFFD (So) would, and keeps its byte. */
#define UNICODE_INVALID 0x110000u

/* Decodes one code point from s[0, n), n >= 1.  Returns the bytes it used
 * (1..4).  Overlong forms, surrogates, values above U+10FFFF and truncated
 * sequences give UNICODE_INVALID for their first byte only. */
size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Encodes a code point (<= U+10FFFF) into out; returns 1..4. */
size_t utf8_encode(uint32_t cp, char out[4]);

/* Bytes at the end of s[0, n) that begin a well-formed sequence still
 * waiting for its continuation bytes (0..3). */
size_t utf8_incomplete_tail(const uint8_t *s, size_t n);

ucat unicode_category(uint32_t cp);
bool unicode_is_space(uint32_t cp);

/* The class mask of a code point: UBIT(category) | UMASK_SPACE if White_Space. */
uint32_t unicode_mask(uint32_t cp);

/* Simple case folding (CaseFolding.txt C + S); cp itself if none. */
uint32_t unicode_fold(uint32_t cp);

/* ------------------------------------------------ generated tables */

enum { UNICODE_RUN_SHIFT = 5 }; /* run entry: first code point << 5 | category */

typedef struct unicode_range {
    uint32_t first, last;
} unicode_range;

typedef struct unicode_fold_run {
    uint32_t first, last; /* first, first + stride, ..., last */
    uint32_t stride;
    int32_t delta; /* folded = cp + delta */
} unicode_fold_run;

extern const uint32_t unicode_category_runs[];
extern const size_t unicode_category_run_count;
extern const unicode_range unicode_white_space[];
extern const size_t unicode_white_space_count;
extern const unicode_fold_run unicode_fold_runs[];
extern const size_t unicode_fold_run_count;

#endif
