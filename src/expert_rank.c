/*
 * expert_rank.c — per-layer expert selection counts, their pin-file text
 * form, and the ranking (see expert_rank.h for the format).
 *
 * The parser reads a line at a time and names the first thing wrong with
 * it; it never reads past the buffer it was given, so any bytes are safe
 * to feed it (tests/test_expert_rank.c feeds it random ones).
 */
#include "expert_rank.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pin file is a few lines per expert; a file past this is not one. */
enum { EXPERT_RANK_MAX_FILE = 64 << 20 };

hydra_status expert_rank_init(expert_rank *r, int n_layer, int n_expert, const uint8_t *moe_layers)
{
    memset(r, 0, sizeof *r);
    if (n_layer <= 0 || n_expert <= 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "expert ranking: %d layers x %d experts", n_layer, n_expert);
    r->n_layer = n_layer, r->n_expert = n_expert;
    r->moe = malloc((size_t)n_layer);
    r->count = calloc((size_t)n_layer * (size_t)n_expert, sizeof *r->count);
    r->tokens = calloc((size_t)n_layer, sizeof *r->tokens);
    if (r->moe == NULL || r->count == NULL || r->tokens == NULL) {
        expert_rank_free(r);
        return hydra_fail(HYDRA_ERR_NOMEM, "expert ranking: out of memory for %d x %d counts", n_layer, n_expert);
    }
    for (int l = 0; l < n_layer; l++)
        r->moe[l] = moe_layers == NULL || moe_layers[l] != 0;
    return HYDRA_OK;
}

void expert_rank_free(expert_rank *r)
{
    free(r->moe);
    free(r->count);
    free(r->tokens);
    free(r->trace_len);
    free(r->trace);
    memset(r, 0, sizeof *r);
}

void expert_rank_clear(expert_rank *r)
{
    memset(r->count, 0, sizeof *r->count * (size_t)r->n_layer * (size_t)r->n_expert);
    memset(r->tokens, 0, sizeof *r->tokens * (size_t)r->n_layer);
    if (r->trace_len != NULL)
        memset(r->trace_len, 0, sizeof *r->trace_len * (size_t)r->n_layer);
}

void expert_rank_add(expert_rank *r, int layer, const moe_route *routes, int64_t n_routes, int k)
{
    if (layer < 0 || layer >= r->n_layer)
        return;
    uint64_t *row = r->count + (size_t)layer * (size_t)r->n_expert;
    for (int64_t i = 0; i < n_routes; i++)
        if (routes[i].expert >= 0 && routes[i].expert < r->n_expert)
            row[routes[i].expert]++;
    if (k > 0)
        r->tokens[layer] += (uint64_t)(n_routes / k);
    if (r->trace_cap == 0 || k != r->k)
        return;
    for (int64_t t = 0; t + k <= n_routes && r->trace_len[layer] < r->trace_cap; t += k) {
        int32_t *dst = r->trace + ((size_t)layer * r->trace_cap + r->trace_len[layer]++) * (size_t)k;
        for (int i = 0; i < k; i++)
            dst[i] = routes[t + i].expert;
    }
}

/* ------------------------------------------------------------ ranking */

/* Expert e's place in its layer: how many experts come before it (a higher
 * count, or the same count and a lower id).  Quadratic in n_expert (at
 * most a few hundred), and needs no memory. */
static int place_of(const uint64_t *row, int n_expert, int e)
{
    int place = 0;
    for (int j = 0; j < n_expert; j++)
        place += row[j] > row[e] || (row[j] == row[e] && j < e);
    return place;
}

void expert_rank_order(const expert_rank *r, int layer, int32_t *ids)
{
    const uint64_t *row = r->count + (size_t)layer * (size_t)r->n_expert;
    for (int e = 0; e < r->n_expert; e++)
        ids[place_of(row, r->n_expert, e)] = e;
}

int expert_rank_pinned(const expert_rank *r, int layer)
{
    int n = 0;
    for (int e = 0; e < r->n_expert; e++)
        n += expert_rank_count(r, layer, e) != 0;
    return n;
}

uint64_t expert_rank_lookups(const expert_rank *r, int layer)
{
    uint64_t sum = 0;
    for (int e = 0; e < r->n_expert; e++)
        sum += expert_rank_count(r, layer, e);
    return sum;
}

double expert_rank_coverage(const expert_rank *r, int layer, int n)
{
    const uint64_t *row = r->count + (size_t)layer * (size_t)r->n_expert;
    uint64_t top = 0, all = expert_rank_lookups(r, layer);
    for (int e = 0; e < r->n_expert; e++)
        if (place_of(row, r->n_expert, e) < n)
            top += row[e];
    return all ? (double)top / (double)all : 0.0;
}

void expert_rank_summary(const expert_rank *r, const uint64_t *expert_bytes, char *buf, size_t cap)
{
    int n_moe = 0;
    uint64_t pinned = 0, bytes = 0;
    for (int l = 0; l < r->n_layer; l++) {
        if (!r->moe[l])
            continue;
        int p = expert_rank_pinned(r, l);
        n_moe++;
        pinned += (uint64_t)p;
        bytes += expert_bytes ? (uint64_t)p * expert_bytes[l] : 0;
    }
    char tail[48] = "";
    if (expert_bytes != NULL)
        snprintf(tail, sizeof tail, ", %.2f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
    if (cap > EXPERT_RANK_SUMMARY)
        cap = EXPERT_RANK_SUMMARY;
    snprintf(buf, cap, "expert ranking: %d MoE layers x %d experts, %" PRIu64 " pinned (%.1f per layer)%s", n_moe,
             r->n_expert, pinned, n_moe ? (double)pinned / n_moe : 0.0, tail);
}

/* ------------------------------------------------------------ saving */

hydra_status expert_rank_save(const expert_rank *r, const char *path)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)r->n_expert);
    if (ids == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "expert profile %s: out of memory", path);
    FILE *fp = fopen(path, "w");
    if (fp == NULL) {
        free(ids);
        return hydra_fail(HYDRA_ERR_IO, "expert profile %s: cannot write: %s", path, strerror(errno));
    }
    fprintf(fp, "# hydra expert profile: %d layers x %d experts; lookups = k per token\n# layer expert count\n",
            r->n_layer, r->n_expert);
    for (int l = 0; l < r->n_layer; l++) {
        if (!r->moe[l])
            continue;
        fprintf(fp, "# layer %d: %" PRIu64 " tokens, %" PRIu64 " lookups\n", l, r->tokens[l],
                expert_rank_lookups(r, l));
        expert_rank_order(r, l, ids);
        for (int i = 0; i < r->n_expert && expert_rank_count(r, l, ids[i]) != 0; i++)
            fprintf(fp, "%d %d %" PRIu64 "\n", l, ids[i], expert_rank_count(r, l, ids[i]));
    }
    free(ids);
    bool bad = ferror(fp) != 0;
    if (fclose(fp) != 0 || bad)
        return hydra_fail(HYDRA_ERR_IO, "expert profile %s: write failed: %s", path, strerror(errno));
    return HYDRA_OK;
}

/* ------------------------------------------------------------ parsing */

/* One line being parsed: its text (no newline) and where it is. */
typedef struct line_ctx {
    const char *name;
    size_t number;
    const char *p, *end;
} line_ctx;

static hydra_status line_fail(const line_ctx *c, const char *reason, const char *detail)
{
    return hydra_fail(HYDRA_ERR_FORMAT, "pin file %s:%zu: %s%s", c->name, c->number, reason, detail);
}

static bool is_blank(char ch) { return ch == ' ' || ch == '\t'; }

/* The next space-separated field, or false at the end of the line. */
static bool next_field(line_ctx *c, const char **start, size_t *len)
{
    while (c->p < c->end && is_blank(*c->p))
        c->p++;
    if (c->p >= c->end)
        return false;
    *start = c->p;
    while (c->p < c->end && !is_blank(*c->p))
        c->p++;
    *len = (size_t)(c->p - *start);
    return true;
}

/* A field as a decimal number up to max; what names it in messages. */
static hydra_status parse_number(const line_ctx *c, const char *s, size_t len, uint64_t max, const char *what,
                                 uint64_t *out)
{
    char detail[96];
    int shown = len > 24 ? 24 : (int)len;
    if (s[0] == '-' && len > 1) {
        snprintf(detail, sizeof detail, " '%.*s'", shown, s);
        return line_fail(c, strcmp(what, "count") == 0 ? "negative count" : "negative id", detail);
    }
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            snprintf(detail, sizeof detail, " %s '%.*s'", what, shown, s);
            return line_fail(c, "not a decimal number:", detail);
        }
        unsigned digit = (unsigned)(s[i] - '0');
        if (v > (max - digit) / 10) {
            snprintf(detail, sizeof detail, " %s '%.*s' (largest %" PRIu64 ")", what, shown, s, max);
            return line_fail(c, "number too large:", detail);
        }
        v = v * 10 + digit;
    }
    *out = v;
    return HYDRA_OK;
}

/* Rejects bytes that are not text: NUL and control characters other than
 * tab (a CR before the newline was already cut). */
static hydra_status check_text(const line_ctx *c)
{
    for (const char *q = c->p; q < c->end; q++) {
        unsigned char ch = (unsigned char)*q;
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            char detail[48];
            snprintf(detail, sizeof detail, " (byte 0x%02x at column %zu)", ch, (size_t)(q - c->p) + 1);
            return line_fail(c, "not text", detail);
        }
    }
    return HYDRA_OK;
}

/* Checks the ids of an entry against the model's shape. */
static hydra_status check_ids(const line_ctx *c, const expert_rank *r, uint64_t layer, uint64_t expert)
{
    char detail[96];
    if (layer >= (uint64_t)r->n_layer) {
        snprintf(detail, sizeof detail, " %" PRIu64 " (the model has layers 0 .. %d)", layer, r->n_layer - 1);
        return line_fail(c, "unknown layer", detail);
    }
    if (!r->moe[layer]) {
        snprintf(detail, sizeof detail, " %" PRIu64 " (a dense block)", layer);
        return line_fail(c, "no experts in layer", detail);
    }
    if (expert >= (uint64_t)r->n_expert) {
        snprintf(detail, sizeof detail, " %" PRIu64 " (layers have experts 0 .. %d)", expert, r->n_expert - 1);
        return line_fail(c, "unknown expert", detail);
    }
    return HYDRA_OK;
}

/* One line: blank, a comment, or LAYER EXPERT [COUNT] (added to r). */
static hydra_status parse_line(line_ctx *c, expert_rank *r)
{
    hydra_status st = check_text(c);
    const char *hash = memchr(c->p, '#', (size_t)(c->end - c->p));
    if (st != HYDRA_OK)
        return st;
    if (hash != NULL)
        c->end = hash;
    const char *f[4];
    size_t len[4];
    int n = 0;
    while (n < 4 && next_field(c, &f[n], &len[n]))
        n++;
    if (n == 0)
        return HYDRA_OK;
    if (n < 2)
        return line_fail(c, "expected LAYER EXPERT [COUNT]", ", found one field");
    if (n > 3)
        return line_fail(c, "expected LAYER EXPERT [COUNT]", ", found more than three fields");
    uint64_t layer, expert, count = 1;
    st = parse_number(c, f[0], len[0], UINT32_MAX, "layer", &layer);
    if (st == HYDRA_OK)
        st = parse_number(c, f[1], len[1], UINT32_MAX, "expert", &expert);
    if (st == HYDRA_OK && n == 3)
        st = parse_number(c, f[2], len[2], UINT64_MAX, "count", &count);
    if (st == HYDRA_OK)
        st = check_ids(c, r, layer, expert);
    if (st != HYDRA_OK)
        return st;
    uint64_t *slot = r->count + (size_t)layer * (size_t)r->n_expert + (size_t)expert;
    if (*slot > UINT64_MAX - count)
        return line_fail(c, "count overflows 64 bits when added to the same expert's earlier lines", "");
    *slot += count; /* duplicates merge: counts add up */
    return HYDRA_OK;
}

hydra_status expert_rank_parse(expert_rank *r, const char *text, size_t len, const char *name)
{
    expert_rank_clear(r);
    line_ctx c = {.name = name, .number = 0};
    const char *p = text, *end = text + len;
    hydra_status st = HYDRA_OK;
    while (p < end && st == HYDRA_OK) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        c.number++;
        c.p = p, c.end = line_end;
        if (c.end > c.p && c.end[-1] == '\r')
            c.end--;
        if ((size_t)(c.end - c.p) > EXPERT_RANK_MAX_LINE) {
            char detail[48];
            snprintf(detail, sizeof detail, " (%zu bytes, at most %d)", (size_t)(c.end - c.p), EXPERT_RANK_MAX_LINE);
            st = line_fail(&c, "line too long", detail);
        } else {
            st = parse_line(&c, r);
        }
        p = nl ? nl + 1 : end;
    }
    if (st != HYDRA_OK)
        expert_rank_clear(r);
    return st;
}

hydra_status expert_rank_read_text(const char *path, char **text, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return hydra_fail(HYDRA_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    hydra_status st = HYDRA_OK;
    for (;;) {
        if (n == cap) {
            size_t grown = cap ? cap * 2 : 4096;
            if (grown > EXPERT_RANK_MAX_FILE) {
                st = hydra_fail(HYDRA_ERR_FORMAT, "%s: larger than %d MiB (not a pin file or trace)", path,
                                EXPERT_RANK_MAX_FILE >> 20);
                break;
            }
            char *p = realloc(buf, grown + 1);
            if (p == NULL) {
                st = hydra_fail(HYDRA_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = p, cap = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    if (st == HYDRA_OK && ferror(fp))
        st = hydra_fail(HYDRA_ERR_IO, "%s: read error: %s", path, strerror(errno));
    fclose(fp);
    if (st != HYDRA_OK) {
        free(buf);
        return st;
    }
    if (buf == NULL && (buf = malloc(1)) == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "%s: out of memory", path);
    buf[n] = '\0';
    *text = buf, *len = n;
    return HYDRA_OK;
}

hydra_status expert_rank_load(expert_rank *r, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    hydra_status st = expert_rank_read_text(path, &text, &len);
    if (st != HYDRA_OK) {
        expert_rank_clear(r);
        return st;
    }
    st = expert_rank_parse(r, text, len, path);
    free(text);
    return st;
}
