/*
 * pretok.c — the pre-tokenizer patterns as data, and the matcher that runs
 * them.  Each pattern is the regex its tokenizer.json (or llama.cpp, where
 * llama.cpp's reading is the one its test vectors were made with) gives;
 * the regex is quoted above each table.
 */
#include "pretok.h"

#include "unicode.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ the data */

/* A character class: code points whose mask meets `mask` or that lie in one
 * of `ranges` (ascending, disjoint); `negate` takes the complement ([^...]). */
typedef struct uclass {
    uint32_t mask;
    const unicode_range *ranges;
    size_t n_ranges;
    bool negate;
} uclass;

typedef enum item_kind {
    IT_CLASS,       /* cls{min,max}, greedy */
    IT_CONTRACTION, /* 's|'t|'re|'ve|'m|'ll|'d, optional when min is 0 */
    IT_NOT_BEFORE,  /* (?!cls): the next code point is not in cls (or there is none) */
    IT_END,         /* $: the end of the piece */
} item_kind;

typedef struct pitem {
    item_kind kind;
    const uclass *cls;
    size_t min, max;
    bool fold; /* IT_CONTRACTION: (?i:...), compared after simple case folding */
} pitem;

typedef struct palt {
    const pitem *items;
    size_t n;
} palt;

typedef struct pattern { /* alternatives, tried in order: the first that matches wins */
    const palt *alts;
    size_t n;
} pattern;

struct pretok_spec { /* stages: each splits every piece the one before made */
    const pattern *stages;
    size_t n;
};

#define COUNT_OF(type, ...) (sizeof((const type[]){__VA_ARGS__}) / sizeof(type))
#define LIST(type, ...) (const type[]){__VA_ARGS__}, COUNT_OF(type, __VA_ARGS__)
#define RANGES(...) .ranges = LIST(unicode_range, __VA_ARGS__)
#define ALT(...) {LIST(pitem, __VA_ARGS__)}
#define PATTERN(...) {LIST(palt, __VA_ARGS__)}
#define SPEC(...) {LIST(pattern, __VA_ARGS__)}

enum { MANY = SIZE_MAX };
#define ONE(c) {.kind = IT_CLASS, .cls = &(c), .min = 1, .max = 1}
#define OPT(c) {.kind = IT_CLASS, .cls = &(c), .min = 0, .max = 1}
#define STAR(c) {.kind = IT_CLASS, .cls = &(c), .min = 0, .max = MANY}
#define PLUS(c) {.kind = IT_CLASS, .cls = &(c), .min = 1, .max = MANY}
#define REPEAT(c, lo, hi) {.kind = IT_CLASS, .cls = &(c), .min = (lo), .max = (hi)}
#define NOT_BEFORE(c) {.kind = IT_NOT_BEFORE, .cls = &(c)}
#define END {.kind = IT_END}
#define CONTRACTION {.kind = IT_CONTRACTION, .min = 1, .max = 1}
#define CONTRACTION_I {.kind = IT_CONTRACTION, .min = 1, .max = 1, .fold = true}
#define OPT_CONTRACTION_I {.kind = IT_CONTRACTION, .min = 0, .max = 1, .fold = true}

#define UPPERISH (UBIT(Lu) | UBIT(Lt) | UBIT(Lm) | UBIT(Lo) | UMASK_M)
#define LOWERISH (UBIT(Ll) | UBIT(Lm) | UBIT(Lo) | UMASK_M)

static const uclass space = {.mask = UMASK_SPACE};                                         /* \s */
static const uclass not_space = {.mask = UMASK_SPACE, .negate = true};                     /* \S */
static const uclass letter = {.mask = UMASK_L};                                            /* \p{L} */
static const uclass number = {.mask = UMASK_N};                                            /* \p{N} */
static const uclass punct = {.mask = UMASK_P};                                             /* \p{P} */
static const uclass one_space = {RANGES({' ', ' '})};                                      /* ' ' */
static const uclass crlf = {RANGES({'\n', '\n'}, {'\r', '\r'})};                           /* [\r\n] */
static const uclass crlf_slash = {RANGES({'\n', '\n'}, {'\r', '\r'}, {'/', '/'})};         /* [\r\n/] */
static const uclass ascii_digit = {RANGES({'0', '9'})};                                    /* [0-9] */
static const uclass ascii_letter = {RANGES({'A', 'Z'}, {'a', 'z'})};                       /* [A-Za-z] */
static const uclass not_space_letter_number = {.mask = UMASK_SPACE | UMASK_L | UMASK_N, .negate = true};
static const uclass not_crlf_letter_number = {.mask = UMASK_L | UMASK_N, RANGES({'\n', '\n'}, {'\r', '\r'}),
                                              .negate = true};
static const uclass upperish = {.mask = UPPERISH};      /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
static const uclass lowerish = {.mask = LOWERISH};      /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
static const uclass letter_mark = {.mask = UMASK_L | UMASK_M};             /* [\p{L}\p{M}] */
static const uclass punct_symbol = {.mask = UMASK_P | UMASK_S};            /* [\p{P}\p{S}] */
static const uclass not_crlf_letter_punct_symbol = {.mask = UMASK_L | UMASK_P | UMASK_S,
                                                    RANGES({'\n', '\n'}, {'\r', '\r'}), .negate = true};
/* [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]: ASCII punctuation and symbols */
static const uclass ascii_punct = {RANGES({0x21, 0x2F}, {0x3A, 0x40}, {0x5B, 0x60}, {0x7B, 0x7E})};
/* [\p{P}\$\+<=>\^~\|`] (falcon) and the same without ` (llama.cpp's default) */
static const uclass falcon_punct = {.mask = UMASK_P, RANGES({'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'},
                                                            {'`', '`'}, {'|', '|'}, {'~', '~'})};
static const uclass default_punct = {.mask = UMASK_P, RANGES({'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'},
                                                             {'|', '|'}, {'~', '~'})};

/* deepseek-llm's tokenizer.json letter class, verbatim as code points:
 * [A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝ
 *  Ὗ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ
 *  𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃] (a subset of the cased letters; note U+1F7D, U+1FBE, U+1FD3,
 * U+1FDB, U+2126 and U+212A, which NFC would turn into other code points). */
static const uclass deepseek_letter = {RANGES(
    {0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6},
    {0x00F8, 0x01BA}, {0x01BC, 0x01BF}, {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373},
    {0x0376, 0x0377}, {0x037B, 0x037D}, {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A},
    {0x038C, 0x038C}, {0x038E, 0x03A1}, {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F},
    {0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107},
    {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F},
    {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F},
    {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943})};
/* [!-/:-~！-／：-～‘-‟　-。] */
static const uclass deepseek_punct = {RANGES({0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002},
                                             {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E})};
/* [一-龥ࠀ-一가-퟿]: U+4E00-9FA5, U+0800-4E00 (which meet), U+AC00-D7FF */
static const uclass deepseek_cjk = {RANGES({0x0800, 0x9FA5}, {0xAC00, 0xD7FF})};
/* [一-龥぀-ゟ゠-ヿ] */
static const uclass deepseek3_cjk = {RANGES({0x3040, 0x309F}, {0x30A0, 0x30FF}, {0x4E00, 0x9FA5})};

/* The whitespace alternatives the later patterns share: \s*[\r\n]+|\s+(?!\S)|\s+ */
#define SPACE_ALTS ALT(STAR(space), PLUS(crlf)), ALT(PLUS(space), NOT_BEFORE(not_space)), ALT(PLUS(space))

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
#define GPT2_PATTERN                                                                                \
    PATTERN(ALT(CONTRACTION), ALT(OPT(one_space), PLUS(letter)), ALT(OPT(one_space), PLUS(number)), \
            ALT(OPT(one_space), PLUS(not_space_letter_number)), ALT(PLUS(space), NOT_BEFORE(not_space)), \
            ALT(PLUS(space)))

/* cl100k (Llama 3) and Qwen2, which has \p{N} for \p{N}{1,3}:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
 * \s+(?!\S)|\s+ */
#define CL100K_PATTERN(numbers)                                                                     \
    PATTERN(ALT(CONTRACTION_I), ALT(OPT(not_crlf_letter_number), PLUS(letter)), ALT(numbers),       \
            ALT(OPT(one_space), PLUS(not_space_letter_number), STAR(crlf)), SPACE_ALTS)

/* o200k (gpt-4o, gpt-oss) and tekken's tail: ...| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
#define O200K_TAIL ALT(OPT(one_space), PLUS(not_space_letter_number), STAR(crlf_slash)), SPACE_ALTS

/* [0-9][0-9][0-9] */
#define THREE_DIGITS PATTERN(ALT(ONE(ascii_digit), ONE(ascii_digit), ONE(ascii_digit)))

static const pretok_spec gpt2 = SPEC(GPT2_PATTERN);
static const pretok_spec llama3 = SPEC(CL100K_PATTERN(REPEAT(number, 1, 3)));
static const pretok_spec qwen2 = SPEC(CL100K_PATTERN(ONE(number)));
/* [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static const pretok_spec o200k = SPEC(PATTERN(
    ALT(OPT(not_crlf_letter_number), STAR(upperish), PLUS(lowerish), OPT_CONTRACTION_I),
    ALT(OPT(not_crlf_letter_number), PLUS(upperish), STAR(lowerish), OPT_CONTRACTION_I),
    ALT(REPEAT(number, 1, 3)), O200K_TAIL));
/* [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
 * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|
 * \p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static const pretok_spec tekken = SPEC(PATTERN(ALT(OPT(not_crlf_letter_number), STAR(upperish), PLUS(lowerish)),
                                               ALT(OPT(not_crlf_letter_number), PLUS(upperish), STAR(lowerish)),
                                               ALT(ONE(number)), O200K_TAIL));
/* \p{N} then GPT-2's */
static const pretok_spec starcoder = SPEC(PATTERN(ALT(ONE(number))), GPT2_PATTERN);
/* [\p{P}\$\+<=>\^~\|`]+ then GPT-2's then [0-9][0-9][0-9] */
static const pretok_spec falcon = SPEC(PATTERN(ALT(PLUS(falcon_punct))), GPT2_PATTERN, THREE_DIGITS);
/* llama.cpp's reading of a gpt2 vocabulary without a known pre-tokenizer:
 * [\p{P}\$\+<=>\^~\|]+ then GPT-2's then \p{N}+ then [0-9][0-9][0-9] */
static const pretok_spec fallback = SPEC(PATTERN(ALT(PLUS(default_punct))), GPT2_PATTERN,
                                         PATTERN(ALT(PLUS(number))), THREE_DIGITS);
/* [\r\n] then \s?[deepseek letters]+ then \s?[!-/:-~！-／：-～‘-‟　-。]+ then \s+$ then [一-龥ࠀ-一가-퟿]+
 * then \p{N}+ */
static const pretok_spec deepseek_llm = SPEC(PATTERN(ALT(ONE(crlf))), PATTERN(ALT(OPT(space), PLUS(deepseek_letter))),
                                             PATTERN(ALT(OPT(space), PLUS(deepseek_punct))),
                                             PATTERN(ALT(PLUS(space), END)), PATTERN(ALT(PLUS(deepseek_cjk))),
                                             PATTERN(ALT(PLUS(number))));
/* [\r\n] then \s?\p{L}+ then \s?\p{P}+ then [一-龥ࠀ-一가-퟿]+ then \p{N} */
static const pretok_spec deepseek_coder = SPEC(PATTERN(ALT(ONE(crlf))), PATTERN(ALT(OPT(space), PLUS(letter))),
                                               PATTERN(ALT(OPT(space), PLUS(punct))),
                                               PATTERN(ALT(PLUS(deepseek_cjk))), PATTERN(ALT(ONE(number))));
/* \p{N}{1,3} then [一-龥぀-ゟ゠-ヿ]+ then
 * [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static const pretok_spec deepseek_v3 = SPEC(
    PATTERN(ALT(REPEAT(number, 1, 3))), PATTERN(ALT(PLUS(deepseek3_cjk))),
    PATTERN(ALT(ONE(ascii_punct), PLUS(ascii_letter)), ALT(OPT(not_crlf_letter_punct_symbol), PLUS(letter_mark)),
            ALT(OPT(one_space), PLUS(punct_symbol), STAR(crlf)), SPACE_ALTS));

/* Names as llama.cpp's converter writes them; ignore_merges as the
 * tokenizer.json of each family sets it (tiktoken-made vocabularies look a
 * piece up whole before merging). */
static const pretok_kind kinds[] = {
    {"default", &fallback, false},
    {"gpt-2", &gpt2, false},        {"phi-2", &gpt2, false},         {"mpt", &gpt2, false},
    {"gpt-neox", &gpt2, false},     {"olmo", &gpt2, false},          {"jais", &gpt2, false},
    {"llama3", &llama3, true},      {"llama-v3", &llama3, true},     {"llama-bpe", &llama3, true},
    {"falcon3", &llama3, true},     {"pixtral", &llama3, true},      {"dbrx", &llama3, false},
    {"smaug-bpe", &llama3, false},  {"chatglm-bpe", &llama3, false},
    {"qwen2", &qwen2, false},       {"deepseek-r1-qwen", &qwen2, false}, {"stablelm2", &qwen2, false},
    {"deepseek-llm", &deepseek_llm, false}, {"deepseek-coder", &deepseek_coder, false},
    {"deepseek-v3", &deepseek_v3, false},
    {"falcon", &falcon, false},
    {"starcoder", &starcoder, false}, {"refact", &starcoder, false}, {"command-r", &starcoder, false},
    {"smollm", &starcoder, false},  {"codeshell", &starcoder, false},
    {"gpt-4o", &o200k, true},       {"llama4", &o200k, true},
    {"tekken", &tekken, true},
};

const pretok_kind *pretok_find(const char *name)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, name) == 0)
            return &kinds[i];
    return NULL;
}

void pretok_known_names(char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", kinds[i].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* ---------------------------------------------------------- the matcher */

enum { NO_MATCH = SIZE_MAX, RUN_CACHE = 16, LONG_RUN = 16 };

/* Where the run of a class that starts at `from` ends.  Backtracking and the
 * search from each position ask for runs inside runs already measured;
 * remembering the long runs (per class, the last one) keeps a run of, say,
 * 10^5 spaces from being rescanned from every position in it, which would
 * make `\s+$` quadratic.  Short runs are cheaper to rescan than to cache. */
typedef struct run_entry {
    const uclass *cls;
    size_t from, end;
} run_entry;

typedef struct matcher {
    const uint32_t *cps, *masks;
    size_t end; /* of the piece */
    size_t n_runs;
    run_entry runs[RUN_CACHE];
} matcher;

/* Ranges are ascending and disjoint: a binary search finds the one that
 * could hold cp (deepseek's letter class has 84). */
static bool in_ranges(const unicode_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].first)
            hi = mid;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

static bool in_class(const uclass *c, uint32_t cp, uint32_t mask)
{
    bool hit = (mask & c->mask) != 0 || in_ranges(c->ranges, c->n_ranges, cp);
    return hit != c->negate;
}

static void remember_run(matcher *m, const uclass *c, size_t from, size_t end)
{
    size_t slot = 0;
    while (slot < m->n_runs && m->runs[slot].cls != c)
        slot++;
    if (slot == RUN_CACHE) /* more classes than slots: still correct, only slower */
        slot = from % RUN_CACHE;
    else if (slot == m->n_runs)
        m->n_runs++;
    m->runs[slot] = (run_entry){c, from, end};
}

static size_t run_end(matcher *m, const uclass *c, size_t from)
{
    for (size_t i = 0; i < m->n_runs; i++) {
        const run_entry *r = &m->runs[i];
        if (r->cls == c && r->from <= from && from <= r->end)
            return r->end;
    }
    size_t end = from;
    while (end < m->end && in_class(c, m->cps[end], m->masks[end]))
        end++;
    if (end - from >= LONG_RUN)
        remember_run(m, c, from, end);
    return end;
}

/* Length of 's|'t|'re|'ve|'m|'ll|'d at p, 0 if none. */
static size_t contraction_at(const matcher *m, size_t p, bool fold)
{
    static const char *const suffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    if (p >= m->end || m->cps[p] != '\'')
        return 0;
    for (size_t s = 0; s < sizeof suffixes / sizeof suffixes[0]; s++) {
        size_t len = strlen(suffixes[s]), j = 0;
        for (; j < len && p + 1 + j < m->end; j++) {
            uint32_t cp = m->cps[p + 1 + j];
            if ((fold ? unicode_fold(cp) : cp) != (uint32_t)suffixes[s][j])
                break;
        }
        if (j == len)
            return 1 + len;
    }
    return 0;
}

/* End of the match of items[i..n) at p, or NO_MATCH; backtracks greedily. */
static size_t match_items(matcher *m, const pitem *items, size_t n, size_t i, size_t p)
{
    if (i == n)
        return p;
    const pitem *it = &items[i];
    switch (it->kind) {
    case IT_CLASS: {
        size_t run = run_end(m, it->cls, p) - p;
        if (run > it->max)
            run = it->max;
        if (run < it->min)
            return NO_MATCH;
        /* Before $ only the longest run can reach the end. */
        size_t least = i + 1 < n && items[i + 1].kind == IT_END ? run : it->min;
        for (size_t k = run;; k--) {
            size_t end = match_items(m, items, n, i + 1, p + k);
            if (end != NO_MATCH || k == least)
                return end;
        }
    }
    case IT_CONTRACTION: {
        size_t len = contraction_at(m, p, it->fold);
        size_t end = len > 0 ? match_items(m, items, n, i + 1, p + len) : NO_MATCH;
        return end == NO_MATCH && it->min == 0 ? match_items(m, items, n, i + 1, p) : end;
    }
    case IT_NOT_BEFORE:
        if (p < m->end && in_class(it->cls, m->cps[p], m->masks[p]))
            return NO_MATCH;
        return match_items(m, items, n, i + 1, p);
    case IT_END:
        return p == m->end ? match_items(m, items, n, i + 1, p) : NO_MATCH;
    }
    return NO_MATCH;
}

/* End of the leftmost-first match at p, or NO_MATCH (empty matches do not count). */
static size_t match_at(matcher *m, const pattern *pat, size_t p)
{
    for (size_t a = 0; a < pat->n; a++) {
        size_t end = match_items(m, pat->alts[a].items, pat->alts[a].n, 0, p);
        if (end != NO_MATCH && end > p)
            return end;
    }
    return NO_MATCH;
}

typedef struct split_ctx {
    const pretok_spec *spec;
    const uint32_t *cps, *masks;
    pretok_emit_fn emit;
    void *user;
} split_ctx;

static hydra_status split_stage(const split_ctx *ctx, size_t stage, size_t first, size_t end)
{
    if (stage == ctx->spec->n)
        return ctx->emit(ctx->user, first, end);
    matcher m; /* set field by field: zeroing the run cache per piece would cost more than matching */
    m.cps = ctx->cps;
    m.masks = ctx->masks;
    m.end = end;
    m.n_runs = 0;
    size_t gap = first;
    for (size_t p = first; p < end;) {
        size_t match_end = match_at(&m, &ctx->spec->stages[stage], p);
        if (match_end == NO_MATCH) {
            p++;
            continue;
        }
        hydra_status st = gap < p ? split_stage(ctx, stage + 1, gap, p) : HYDRA_OK;
        if (st == HYDRA_OK)
            st = split_stage(ctx, stage + 1, p, match_end);
        if (st != HYDRA_OK)
            return st;
        p = gap = match_end;
    }
    return gap < end ? split_stage(ctx, stage + 1, gap, end) : HYDRA_OK;
}

hydra_status pretok_split(const pretok_spec *spec, const uint32_t *cps, const uint32_t *masks, size_t n,
                          pretok_emit_fn emit, void *user)
{
    split_ctx ctx = {spec, cps, masks, emit, user};
    return n > 0 ? split_stage(&ctx, 0, 0, n) : HYDRA_OK;
}
