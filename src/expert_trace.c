/*
 * expert_trace.c — routing traces of an expert_rank: recording room,
 * the text file (format in expert_rank.h) and its loader.  The slab policy
 * simulator (bench/bench_slab.c) replays them.
 *
 * The loader reads the text twice: once to size the trace (tokens per
 * layer), once to fill it.  Both passes share one line parser, which never
 * reads past the line it was given.
 */
#include "expert_rank.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    TRACE_MAX_K = 64,       /* experts per token a trace line may hold */
    TRACE_MAX_LINE = 1024,  /* bytes of one line */
    TRACE_MAX_DIM = 1 << 16,     /* layers or experts a header may declare */
    TRACE_MAX_CELLS = 1 << 20,   /* layers x experts (DeepSeek-V3: 61 x 256) */
};

/* Bytes a loaded trace may take: the trace holds every layer at the
 * longest layer's length, so a file whose layers differ wildly could ask
 * for far more than its own size. */
static const uint64_t TRACE_MAX_BYTES = (uint64_t)1 << 30;

hydra_status expert_rank_trace_init(expert_rank *r, int k, uint64_t cap_tokens)
{
    free(r->trace_len);
    free(r->trace);
    r->trace_len = NULL, r->trace = NULL, r->trace_cap = 0, r->k = 0;
    if (k <= 0 || k > TRACE_MAX_K || cap_tokens == 0 || cap_tokens > (SIZE_MAX / sizeof(int32_t)) / (size_t)k /
                                                                        (size_t)r->n_layer)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "expert trace: k %d, %" PRIu64 " tokens", k, cap_tokens);
    r->trace_len = calloc((size_t)r->n_layer, sizeof *r->trace_len);
    r->trace = malloc(sizeof *r->trace * (size_t)r->n_layer * cap_tokens * (size_t)k);
    if (r->trace_len == NULL || r->trace == NULL) {
        free(r->trace_len);
        free(r->trace);
        r->trace_len = NULL, r->trace = NULL;
        return hydra_fail(HYDRA_ERR_NOMEM, "expert trace: out of memory for %" PRIu64 " tokens", cap_tokens);
    }
    r->trace_cap = cap_tokens, r->k = k;
    return HYDRA_OK;
}

hydra_status expert_rank_save_trace(const expert_rank *r, const char *path)
{
    if (r->trace_cap == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "expert trace %s: nothing was traced", path);
    FILE *fp = fopen(path, "w");
    if (fp == NULL)
        return hydra_fail(HYDRA_ERR_IO, "expert trace %s: cannot write: %s", path, strerror(errno));
    fprintf(fp, "# hydra expert trace: each layer's tokens in order, one a line: LAYER and its K experts\n");
    fprintf(fp, "trace %d %d %d\n", r->n_layer, r->n_expert, r->k);
    for (int l = 0; l < r->n_layer; l++)
        for (uint64_t t = 0; t < r->trace_len[l]; t++) {
            const int32_t *e = expert_rank_trace_at(r, l, t);
            fprintf(fp, "%d", l);
            for (int i = 0; i < r->k; i++)
                fprintf(fp, " %d", (int)e[i]);
            fputc('\n', fp);
        }
    bool bad = ferror(fp) != 0;
    if (fclose(fp) != 0 || bad)
        return hydra_fail(HYDRA_ERR_IO, "expert trace %s: write failed: %s", path, strerror(errno));
    return HYDRA_OK;
}

/* ------------------------------------------------------------ parsing */

typedef struct trace_line {
    const char *name;
    size_t number;
    int n;                         /* numbers on the line */
    uint64_t v[TRACE_MAX_K + 4];
    bool header;                   /* starts with the word "trace" */
} trace_line;

static hydra_status trace_fail(const trace_line *c, const char *reason)
{
    return hydra_fail(HYDRA_ERR_FORMAT, "expert trace %s:%zu: %s", c->name, c->number, reason);
}

/* Splits [p, end) (no newline, comment cut) into decimal numbers. */
static hydra_status split_numbers(trace_line *c, const char *p, const char *end)
{
    c->n = 0, c->header = false;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (end - p >= 5 && memcmp(p, "trace", 5) == 0)
        c->header = true, p += 5;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end)
            return HYDRA_OK;
        if (c->n == (int)(sizeof c->v / sizeof c->v[0]))
            return trace_fail(c, "too many numbers");
        uint64_t v = 0;
        const char *start = p;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (v > (UINT32_MAX - (uint64_t)(*p - '0')) / 10)
                return trace_fail(c, "number too large");
            v = v * 10 + (uint64_t)(*p - '0');
        }
        if (p == start || (p < end && *p != ' ' && *p != '\t'))
            return trace_fail(c, "not a decimal number");
        c->v[c->n++] = v;
    }
}

/* The header's dimensions, checked. */
static hydra_status read_header(const trace_line *c, int *n_layer, int *n_expert, int *k)
{
    if (!c->header || c->n != 3)
        return trace_fail(c, "expected the header 'trace LAYERS EXPERTS K' first");
    if (c->v[0] == 0 || c->v[0] > TRACE_MAX_DIM || c->v[1] == 0 || c->v[1] > TRACE_MAX_DIM || c->v[2] == 0 ||
        c->v[2] > TRACE_MAX_K || c->v[2] > c->v[1] || c->v[0] * c->v[1] > TRACE_MAX_CELLS)
        return trace_fail(c, "header dimensions out of range");
    *n_layer = (int)c->v[0], *n_expert = (int)c->v[1], *k = (int)c->v[2];
    return HYDRA_OK;
}

/* An entry: its layer and K distinct expert ids in range. */
static hydra_status check_entry(const trace_line *c, int n_layer, int n_expert, int k)
{
    if (c->header)
        return trace_fail(c, "a second header");
    if (c->n != k + 1)
        return trace_fail(c, "expected LAYER and K expert ids");
    if (c->v[0] >= (uint64_t)n_layer)
        return trace_fail(c, "unknown layer");
    for (int i = 1; i <= k; i++) {
        if (c->v[i] >= (uint64_t)n_expert)
            return trace_fail(c, "unknown expert");
        for (int j = 1; j < i; j++)
            if (c->v[j] == c->v[i])
                return trace_fail(c, "an expert twice in one token");
    }
    return HYDRA_OK;
}

/* Reads the line at *p (advancing *p past it) into c. */
static hydra_status read_line(trace_line *c, const char **p, const char *end)
{
    const char *start = *p, *nl = memchr(start, '\n', (size_t)(end - start)), *le = nl ? nl : end;
    *p = nl ? nl + 1 : end;
    c->number++;
    if (le > start && le[-1] == '\r')
        le--;
    if (le - start > TRACE_MAX_LINE)
        return trace_fail(c, "line too long");
    for (const char *q = start; q < le; q++)
        if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f)
            return trace_fail(c, "not text");
    const char *hash = memchr(start, '#', (size_t)(le - start));
    return split_numbers(c, start, hash ? hash : le);
}

/* The passes of the loader over the text. */
typedef enum trace_pass_kind { PASS_HEADER, PASS_COUNT, PASS_FILL } trace_pass_kind;

static void fill_entry(expert_rank *r, const trace_line *c, int k)
{
    moe_route routes[TRACE_MAX_K];
    for (int i = 0; i < k; i++)
        routes[i] = (moe_route){.token = 0, .expert = (int32_t)c->v[i + 1], .weight = 0};
    expert_rank_add(r, (int)c->v[0], routes, k, k);
}

/* PASS_HEADER: dims from the header.  PASS_COUNT: each layer's tokens
 * into r->trace_len.  PASS_FILL: every entry through expert_rank_add. */
static hydra_status trace_pass(expert_rank *r, const char *text, size_t len, const char *name, trace_pass_kind kind,
                               int dims[3])
{
    trace_line c = {.name = name};
    bool have_header = false;
    for (const char *p = text, *end = text + len; p < end;) {
        hydra_status st = read_line(&c, &p, end);
        if (st != HYDRA_OK)
            return st;
        if (c.n == 0 && !c.header)
            continue;
        if (!have_header) {
            have_header = true;
            st = read_header(&c, &dims[0], &dims[1], &dims[2]);
            if (st != HYDRA_OK || kind == PASS_HEADER)
                return st;
            continue;
        }
        st = check_entry(&c, dims[0], dims[1], dims[2]);
        if (st != HYDRA_OK)
            return st;
        if (kind == PASS_COUNT)
            r->trace_len[c.v[0]]++;
        else
            fill_entry(r, &c, dims[2]);
    }
    if (!have_header)
        return hydra_fail(HYDRA_ERR_FORMAT, "expert trace %s: no 'trace LAYERS EXPERTS K' header", name);
    return HYDRA_OK;
}

/* Sizes r from the header and the counting pass. */
static hydra_status trace_size(expert_rank *r, const char *text, size_t len, const char *name, int dims[3])
{
    hydra_status st = trace_pass(r, text, len, name, PASS_HEADER, dims);
    if (st == HYDRA_OK)
        st = expert_rank_init(r, dims[0], dims[1], NULL);
    if (st == HYDRA_OK)
        st = expert_rank_trace_init(r, dims[2], 1);
    if (st == HYDRA_OK)
        st = trace_pass(r, text, len, name, PASS_COUNT, dims);
    uint64_t cap = 1;
    for (int l = 0; st == HYDRA_OK && l < r->n_layer; l++) {
        cap = r->trace_len[l] > cap ? r->trace_len[l] : cap;
        r->moe[l] = r->trace_len[l] != 0;
    }
    if (st == HYDRA_OK && (uint64_t)r->n_layer * cap * (uint64_t)dims[2] * sizeof(int32_t) > TRACE_MAX_BYTES)
        return hydra_fail(HYDRA_ERR_FORMAT, "expert trace %s: %d layers of up to %" PRIu64 " tokens exceed %" PRIu64
                          " MiB (layers of very unequal length?)", name, r->n_layer, cap, TRACE_MAX_BYTES >> 20);
    if (st == HYDRA_OK)
        st = expert_rank_trace_init(r, dims[2], cap);
    return st;
}

hydra_status expert_rank_parse_trace(expert_rank *r, const char *text, size_t len, const char *name)
{
    int dims[3] = {0, 0, 0};
    memset(r, 0, sizeof *r);
    hydra_status st = trace_size(r, text, len, name, dims);
    if (st == HYDRA_OK)
        st = trace_pass(r, text, len, name, PASS_FILL, dims);
    if (st != HYDRA_OK)
        expert_rank_free(r);
    return st;
}

hydra_status expert_rank_load_trace(expert_rank *r, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    memset(r, 0, sizeof *r);
    hydra_status st = expert_rank_read_text(path, &text, &len);
    if (st == HYDRA_OK)
        st = expert_rank_parse_trace(r, text, len, path);
    free(text);
    return st;
}
