/*
 * expert_rank.h — how often each expert of each MoE layer is selected, and
 * the ranking that follows from it: the hybrid split (issue 10) pins the
 * most used experts of every layer in the device slab.
 *
 * Counts are lookups: a token routed to k experts adds 1 to each of the k
 * (not unique experts per batch).  The forward pass records them with
 * expert_rank_add after moe_select; a profile is saved as text and loaded
 * back as a pin file.
 *
 * Pin file / profile format (docs/HYBRID.md, "Pin files"): UTF-8 text,
 * one entry a line,
 *
 *     # comment (also after an entry)
 *     LAYER EXPERT [COUNT]
 *
 * decimal, separated by spaces or tabs.  COUNT defaults to 1 (a plain pin
 * list); an entry with COUNT 0 is allowed and pins nothing.  Lines are at
 * most EXPERT_RANK_MAX_LINE bytes.  A repeated (LAYER, EXPERT) is merged
 * into one entry whose count is the sum (so concatenated profiles add up).
 * Loading fails (HYDRA_ERR_FORMAT / HYDRA_ERR_IO, the message naming file,
 * line and reason) on an unreadable file, an unparseable line, a layer or
 * expert out of range or a layer without experts, a negative or
 * overflowing count (also when summed), an over-long line, or bytes that
 * are not text (NUL, control characters).
 *
 * Usage:
 *
 *   expert_rank r;
 *   expert_rank_init(&r, n_layer, n_expert, moe_layers);  // at session init
 *   expert_rank_add(&r, layer, routes, n_routes);         // per MoE layer step
 *   expert_rank_save(&r, "profile.txt");
 *   expert_rank_load(&r, "pins.txt");                     // replaces counts
 *   expert_rank_order(&r, layer, ids);                    // most used first
 *   expert_rank_free(&r);
 */
#ifndef HYDRA_EXPERT_RANK_H
#define HYDRA_EXPERT_RANK_H

#include "hydra.h"
#include "moe.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    EXPERT_RANK_MAX_LINE = 256,   /* bytes of one line, newline excluded */
    EXPERT_RANK_SUMMARY = 160,    /* bytes expert_rank_summary writes at most */
};

typedef struct expert_rank {
    int n_layer;        /* every block of the model; dense ones keep zero counts */
    int n_expert;       /* experts per MoE layer */
    uint8_t *moe;       /* n_layer: 1 where the layer has experts */
    uint64_t *count;    /* n_layer x n_expert lookups, layer-major */
    uint64_t *tokens;   /* n_layer: tokens routed through the layer (expert_rank_add's n_routes / k) */
    /* Optional routing trace (the slab policy simulator's input,
     * src/expert_trace.c): the k experts of each of the first trace_cap
     * tokens of every layer, in the order they were recorded. */
    int k;               /* routes per token of the trace */
    uint64_t trace_cap;  /* 0: no trace */
    uint64_t *trace_len; /* n_layer: tokens recorded */
    int32_t *trace;      /* n_layer x trace_cap x k */
} expert_rank;

/* Zero counts for n_layer layers of n_expert experts.  moe_layers: n_layer
 * flags, nonzero where the layer is a MoE layer (NULL: every layer is). */
hydra_status expert_rank_init(expert_rank *r, int n_layer, int n_expert, const uint8_t *moe_layers);
void expert_rank_free(expert_rank *r); /* safe on a zeroed one */
void expert_rank_clear(expert_rank *r);

static inline uint64_t expert_rank_count(const expert_rank *r, int layer, int expert)
{
    return r->count[(size_t)layer * (size_t)r->n_expert + (size_t)expert];
}

/* Records the routes of one step of one layer: +1 per route's expert.  k
 * is the routes per token (tokens += n_routes / k).  No allocation; routes
 * with an expert id out of range are ignored (moe_select never makes
 * them).  With a trace of the same k, also appends the tokens' experts
 * while it has room. */
void expert_rank_add(expert_rank *r, int layer, const moe_route *routes, int64_t n_routes, int k);

/* Writes the counts in the pin-file format: a comment header, then per
 * layer its experts with a nonzero count, most used first. */
hydra_status expert_rank_save(const expert_rank *r, const char *path);

/* Replaces the counts with those of a pin file / profile (see above).  On
 * failure the counts are cleared and the message names path:line. */
hydra_status expert_rank_load(expert_rank *r, const char *path);

/* The same from text in memory; `name` names it in messages. */
hydra_status expert_rank_parse(expert_rank *r, const char *text, size_t len, const char *name);

/* ids[0 .. n_expert-1]: the layer's experts, most used first, ties to the
 * lower id.  No allocation. */
void expert_rank_order(const expert_rank *r, int layer, int32_t *ids);

/* Experts of the layer with a nonzero count (the pinned ones of a pin file). */
int expert_rank_pinned(const expert_rank *r, int layer);

/* Lookups recorded in the layer (the sum of its counts). */
uint64_t expert_rank_lookups(const expert_rank *r, int layer);

/* Share of the layer's lookups that its n most used experts served (0 if
 * none recorded). */
double expert_rank_coverage(const expert_rank *r, int layer, int n);

/* One line for init: "expert ranking: 48 MoE layers x 128 experts, 1536
 * pinned (32.0 per layer), 2.25 GiB".  expert_bytes: bytes of one expert
 * (gate+up+down) per layer, NULL if unknown (then no bytes).  Writes at
 * most EXPERT_RANK_SUMMARY bytes. */
void expert_rank_summary(const expert_rank *r, const uint64_t *expert_bytes, char *buf, size_t cap);

/* A whole text file (at most 64 MiB), NUL-terminated; *len its bytes;
 * free *text. */
hydra_status expert_rank_read_text(const char *path, char **text, size_t *len);

/* --- routing traces (src/expert_trace.c)
 *
 * Text, one token of one layer a line, each layer's lines in token order:
 *
 *     # comment
 *     trace LAYERS EXPERTS K        (the first entry)
 *     LAYER E1 .. EK                (K expert ids)
 */

/* Starts a trace of up to cap_tokens tokens per layer of k experts each
 * (replacing one there was). */
hydra_status expert_rank_trace_init(expert_rank *r, int k, uint64_t cap_tokens);

/* The k experts of token `token` (< trace_len[layer]) of a layer. */
static inline const int32_t *expert_rank_trace_at(const expert_rank *r, int layer, uint64_t token)
{
    return r->trace + ((size_t)layer * r->trace_cap + token) * (size_t)r->k;
}

hydra_status expert_rank_save_trace(const expert_rank *r, const char *path);

/* Reads a trace into a zeroed r, sized from its header: counts, tokens and
 * the trace; layers without lines count as dense.  Fails naming file:line
 * on anything malformed (ids out of range, a line with other than K
 * experts, a repeated expert in one token, no header). */
hydra_status expert_rank_load_trace(expert_rank *r, const char *path);
hydra_status expert_rank_parse_trace(expert_rank *r, const char *text, size_t len, const char *name);

#endif
