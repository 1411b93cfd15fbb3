/*
 * unicode.c — UTF-8 and lookups in the generated tables (binary searches;
 * the tokenizers classify each code point of a text once).
 */
#include "unicode.h"

_Static_assert(UCAT_COUNT < 31, "category bits and the White_Space bit share one 32-bit mask");

/* Well-formed UTF-8 (Unicode table 3-7): the lead byte fixes the length and
 * the range of the second byte; later bytes are 80..BF. */
typedef struct utf8_lead {
    uint8_t len;
    uint8_t lo, hi; /* second byte range */
} utf8_lead;

static utf8_lead lead_of(uint8_t b)
{
    if (b < 0x80) return (utf8_lead){1, 0, 0};
    if (b < 0xC2) return (utf8_lead){0, 0, 0};
    if (b < 0xE0) return (utf8_lead){2, 0x80, 0xBF};
    if (b == 0xE0) return (utf8_lead){3, 0xA0, 0xBF};
    if (b == 0xED) return (utf8_lead){3, 0x80, 0x9F};
    if (b < 0xF0) return (utf8_lead){3, 0x80, 0xBF};
    if (b == 0xF0) return (utf8_lead){4, 0x90, 0xBF};
    if (b < 0xF4) return (utf8_lead){4, 0x80, 0xBF};
    if (b == 0xF4) return (utf8_lead){4, 0x80, 0x8F};
    return (utf8_lead){0, 0, 0};
}

/* How many bytes of s[0, n) continue the sequence lead says starts at s[0]. */
static size_t valid_prefix(utf8_lead lead, const uint8_t *s, size_t n)
{
    size_t ok = 1;
    for (; ok < lead.len && ok < n; ok++) {
        uint8_t lo = ok == 1 ? lead.lo : 0x80, hi = ok == 1 ? lead.hi : 0xBF;
        if (s[ok] < lo || s[ok] > hi)
            break;
    }
    return ok;
}

size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    utf8_lead lead = lead_of(s[0]);
    if (lead.len == 1) {
        *cp = s[0];
        return 1;
    }
    if (lead.len == 0 || valid_prefix(lead, s, n) != lead.len) {
        *cp = UNICODE_INVALID;
        return 1;
    }
    static const uint8_t lead_bits[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = s[0] & lead_bits[lead.len];
    for (size_t i = 1; i < lead.len; i++)
        v = v << 6 | (s[i] & 0x3F);
    *cp = v;
    return lead.len;
}

size_t utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_incomplete_tail(const uint8_t *s, size_t n)
{
    /* A sequence is at most 4 bytes, so only a lead among the last 3 can
     * still be waiting for bytes. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const uint8_t *p = s + n - back;
        if ((*p & 0xC0) == 0x80)
            continue;
        utf8_lead lead = lead_of(*p);
        return lead.len > back && valid_prefix(lead, p, back) == back ? back : 0;
    }
    return 0;
}

ucat unicode_category(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return UCAT_So; /* UNICODE_INVALID: as U+FFFD */
    size_t lo = 0, hi = unicode_category_run_count; /* last run starting <= cp */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (unicode_category_runs[mid] >> UNICODE_RUN_SHIFT <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return (ucat)(unicode_category_runs[lo] & ((1u << UNICODE_RUN_SHIFT) - 1));
}

bool unicode_is_space(uint32_t cp)
{
    for (size_t i = 0; i < unicode_white_space_count && unicode_white_space[i].first <= cp; i++)
        if (cp <= unicode_white_space[i].last)
            return true;
    return false;
}

uint32_t unicode_mask(uint32_t cp)
{
    uint32_t mask = 1u << unicode_category(cp);
    return unicode_is_space(cp) ? mask | UMASK_SPACE : mask;
}

uint32_t unicode_fold(uint32_t cp)
{
    size_t lo = 0, hi = unicode_fold_run_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const unicode_fold_run *r = &unicode_fold_runs[mid];
        if (cp < r->first)
            hi = mid;
        else if (cp > r->last)
            lo = mid + 1;
        else
            return (cp - r->first) % r->stride == 0 ? (uint32_t)((int32_t)cp + r->delta) : cp;
    }
    return cp;
}
