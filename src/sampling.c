/*
 * sampling.c — the next token from a position's logits: penalties, top-k,
 * top-p, min-p, temperature and a seeded draw, in llama.cpp's order (the
 * contract is in hydra.h).
 *
 * Top-k, top-p and min-p each keep a prefix of the logits sorted largest
 * first (min-p's bar is relative to the largest logit, which every step
 * keeps), so the kept set is the shortest of those prefixes.  The logits
 * are made a max-heap in O(n) and popped in order only as far as the
 * shortest prefix reaches: a few dozen pops with the defaults, never a full
 * sort of a 150k vocabulary per token.
 */
#include "hydra.h"

#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PENALTY_WINDOW = 1 << 24 };

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct hydra_sampler {
    hydra_sampler_params p;
    int32_t n_vocab;
    cand *heap;         /* [n_vocab] the penalised logits; a max-heap while truncating */
    cand *kept;         /* [n_vocab] popped from the heap, largest first */
    double *weight;     /* [n_vocab] unnormalised probabilities of the final set */
    int32_t *count;     /* [n_vocab] occurrences in the penalty window */
    uint8_t *penalised; /* [n_vocab] set while the penalties run, so a repeated token is penalised once */
    int32_t *window;    /* [penalty_last_n] ring of the last accepted tokens */
    int32_t window_len, window_next;
    uint64_t rng[4];
};

/* The set the draw uses: kept[0, n) largest first, or all of heap[0, n_vocab) in id order. */
typedef struct final_set {
    const cand *c;
    size_t n;
    float max_logit;
} final_set;

/* ------------------------------------------------------------ random stream */

/* splitmix64 expands the seed into xoshiro256**'s state (Blackman and
 * Vigna's recommended seeding, so that no state is all zero). */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1): the top 53 bits as a double's mantissa. */
static double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

static void seed_stream(hydra_sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
}

/* ------------------------------------------------------------ creation */

HYDRA_API hydra_sampler_params hydra_sampler_default_params(void)
{
    return (hydra_sampler_params){.temperature = 0.8f,
                                  .top_k = 40,
                                  .top_p = 0.95f,
                                  .min_p = 0.05f,
                                  .repeat_penalty = 1.0f,
                                  .presence_penalty = 0.0f,
                                  .frequency_penalty = 0.0f,
                                  .penalty_last_n = 64,
                                  .seed = 0};
}

static hydra_status check_params(const hydra_sampler_params *p, int32_t n_vocab)
{
    if (n_vocab <= 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "sampler: n_vocab %d must be positive", (int)n_vocab);
    if (!isfinite(p->temperature))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "sampler: temperature %g must be finite", (double)p->temperature);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "sampler: top_p %g is outside [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "sampler: min_p %g is outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "sampler: repeat_penalty %g must be positive and finite",
                          (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "sampler: presence_penalty %g and frequency_penalty %g must be finite",
                          (double)p->presence_penalty, (double)p->frequency_penalty);
    if (p->penalty_last_n < 0 || p->penalty_last_n > MAX_PENALTY_WINDOW)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "sampler: penalty_last_n %d is outside [0, %d]",
                          (int)p->penalty_last_n, MAX_PENALTY_WINDOW);
    return HYDRA_OK;
}

HYDRA_API void hydra_sampler_free(hydra_sampler *s)
{
    if (s == NULL)
        return;
    free(s->heap);
    free(s->kept);
    free(s->weight);
    free(s->count);
    free(s->penalised);
    free(s->window);
    free(s);
}

HYDRA_API hydra_status hydra_sampler_new(const hydra_sampler_params *params, int32_t n_vocab, hydra_sampler **out)
{
    if (out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_sampler_new: out is required");
    *out = NULL;
    const hydra_sampler_params p = params ? *params : hydra_sampler_default_params();
    hydra_status st = check_params(&p, n_vocab);
    if (st != HYDRA_OK)
        return st;
    hydra_sampler *s = calloc(1, sizeof *s);
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "sampler");
    const size_t n = (size_t)n_vocab;
    s->p = p;
    s->n_vocab = n_vocab;
    s->heap = malloc(n * sizeof *s->heap);
    s->kept = malloc(n * sizeof *s->kept);
    s->weight = malloc(n * sizeof *s->weight);
    s->count = calloc(n, sizeof *s->count);
    s->penalised = calloc(n, sizeof *s->penalised);
    s->window = malloc(((size_t)p.penalty_last_n + 1) * sizeof *s->window);
    if (!s->heap || !s->kept || !s->weight || !s->count || !s->penalised || !s->window) {
        hydra_sampler_free(s);
        return hydra_fail(HYDRA_ERR_NOMEM, "sampler buffers for %d tokens", (int)n_vocab);
    }
    seed_stream(s);
    *out = s;
    return HYDRA_OK;
}

HYDRA_API void hydra_sampler_reset(hydra_sampler *s)
{
    if (s == NULL)
        return;
    for (int32_t i = 0; i < s->window_len; i++)
        s->count[s->window[i]] = 0;
    s->window_len = s->window_next = 0;
    seed_stream(s);
}

HYDRA_API hydra_status hydra_sampler_accept(hydra_sampler *s, hydra_token token)
{
    if (s == NULL || token < 0 || token >= s->n_vocab)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_sampler_accept: token %d is outside the vocabulary of %d",
                          (int)token, s ? (int)s->n_vocab : 0);
    const int32_t cap = s->p.penalty_last_n;
    if (cap == 0)
        return HYDRA_OK;
    if (s->window_len == cap)
        s->count[s->window[s->window_next]]--; /* the oldest leaves the window */
    else
        s->window_len++;
    s->window[s->window_next] = token;
    s->count[token]++;
    s->window_next = (s->window_next + 1) % cap;
    return HYDRA_OK;
}

/* ------------------------------------------------------------ steps */

static void load_logits(hydra_sampler *s, const float *logits)
{
    for (int32_t i = 0; i < s->n_vocab; i++)
        s->heap[i] = (cand){isnan(logits[i]) ? -INFINITY : logits[i], i};
}

static bool penalties_active(const hydra_sampler_params *p)
{
    return p->penalty_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

/* Step 1, once per distinct token of the window (heap[] is still in id order). */
static void apply_penalties(hydra_sampler *s)
{
    if (!penalties_active(&s->p))
        return;
    for (int32_t i = 0; i < s->window_len; i++) {
        const int32_t id = s->window[i];
        if (s->penalised[id])
            continue;
        s->penalised[id] = 1;
        float *logit = &s->heap[id].logit;
        *logit = *logit > 0.0f ? *logit / s->p.repeat_penalty : *logit * s->p.repeat_penalty;
        *logit -= (float)s->count[id] * s->p.frequency_penalty + s->p.presence_penalty;
    }
    for (int32_t i = 0; i < s->window_len; i++)
        s->penalised[s->window[i]] = 0;
}

/* The order every step uses: larger logit first, then lower id. */
static bool ranks_before(cand a, cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

static void sift_down(cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t best = i, l = 2 * i + 1, r = l + 1;
        if (l < n && ranks_before(h[l], h[best]))
            best = l;
        if (r < n && ranks_before(h[r], h[best]))
            best = r;
        if (best == i)
            return;
        cand t = h[i];
        h[i] = h[best];
        h[best] = t;
        i = best;
    }
}

static void heapify(cand *h, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(h, n, i);
}

/* The heap's first entry to kept[*n_kept]; the heap shrinks to *heap_n. */
static void pop_into(cand *h, size_t *heap_n, cand *kept, size_t *n_kept)
{
    kept[(*n_kept)++] = h[0];
    h[0] = h[--*heap_n];
    sift_down(h, *heap_n, 0);
}

static size_t argmax(const cand *c, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (ranks_before(c[i], c[best]))
            best = i;
    return best;
}

static double sum_exp(const cand *c, size_t n, float max_logit)
{
    double z = 0.0;
    for (size_t i = 0; i < n; i++)
        z += exp((double)c[i].logit - max_logit);
    return z;
}

/* Steps 2-4 on the penalised logits.  sorted: the caller wants the set in
 * rank order even when no step cuts it (the heap is then popped whole). */
static final_set truncate_logits(hydra_sampler *s, bool sorted)
{
    const size_t n = (size_t)s->n_vocab;
    const size_t limit = s->p.top_k > 0 && (size_t)s->p.top_k < n ? (size_t)s->p.top_k : n;
    const bool top_p = s->p.top_p < 1.0f, min_p = s->p.min_p > 0.0f;
    if (limit == n && !top_p && !min_p && !sorted)
        return (final_set){s->heap, n, s->heap[argmax(s->heap, n)].logit};
    size_t heap_n = n, n_kept = 0;
    heapify(s->heap, heap_n);
    const float max_logit = s->heap[0].logit;
    /* Top-p's softmax is over what top-k kept: pop all of those first. */
    double target = 0.0;
    if (top_p) {
        while (limit < n && n_kept < limit)
            pop_into(s->heap, &heap_n, s->kept, &n_kept);
        target = s->p.top_p * (limit < n ? sum_exp(s->kept, n_kept, max_logit) : sum_exp(s->heap, n, max_logit));
    }
    const float min_logit = min_p ? max_logit + logf(s->p.min_p) : -INFINITY; /* p >= min_p * p_max */
    double cum = 0.0;
    size_t m = 0;
    while (m < limit) {
        if (n_kept == m)
            pop_into(s->heap, &heap_n, s->kept, &n_kept);
        if (m > 0 && s->kept[m].logit < min_logit)
            break;
        cum += exp((double)s->kept[m++].logit - max_logit);
        if (top_p && cum >= target)
            break;
    }
    return (final_set){s->kept, m, max_logit};
}

/* Step 5: the unnormalised probabilities into weight[]; their sum. */
static double weigh(hydra_sampler *s, final_set f)
{
    const double t = s->p.temperature;
    double z = 0.0;
    for (size_t i = 0; i < f.n; i++)
        z += s->weight[i] = exp(((double)f.c[i].logit - f.max_logit) / t);
    return z;
}

/* Steps 1-5.  Greedy leaves the one token in kept[0]. */
static hydra_status prepare(hydra_sampler *s, const float *logits, bool sorted, final_set *f, double *z)
{
    load_logits(s, logits);
    apply_penalties(s);
    if (s->p.temperature <= 0.0f) {
        s->kept[0] = s->heap[argmax(s->heap, (size_t)s->n_vocab)];
        *f = (final_set){s->kept, 1, s->kept[0].logit};
    } else {
        *f = truncate_logits(s, sorted);
    }
    if (!isfinite(f->max_logit))
        return hydra_fail(HYDRA_ERR_RANGE, "sampler: no logit is finite");
    *z = s->p.temperature <= 0.0f ? (s->weight[0] = 1.0) : weigh(s, *f);
    return HYDRA_OK;
}

/* ------------------------------------------------------------ public */

HYDRA_API hydra_status hydra_sampler_sample(hydra_sampler *s, const float *logits, hydra_token *out)
{
    if (s == NULL || logits == NULL || out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_sampler_sample: sampler, logits and out are required");
    final_set f;
    double z;
    hydra_status st = prepare(s, logits, false, &f, &z);
    if (st != HYDRA_OK)
        return st;
    size_t pick = 0;
    if (f.n > 1) {
        /* Step 6: the first token whose running sum passes u; the last one
         * if rounding leaves u beyond every sum. */
        const double u = uniform01(s->rng) * z;
        double cum = 0.0;
        for (pick = 0; pick + 1 < f.n; pick++)
            if ((cum += s->weight[pick]) > u)
                break;
    }
    *out = f.c[pick].id;
    return hydra_sampler_accept(s, *out);
}

HYDRA_API hydra_status hydra_sampler_candidates(hydra_sampler *s, const float *logits, hydra_token *ids,
                                                float *probs, size_t capacity, size_t *n)
{
    if (s == NULL || logits == NULL || n == NULL || (capacity > 0 && (ids == NULL || probs == NULL)))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_sampler_candidates: sampler, logits, n and room are required");
    final_set f;
    double z;
    hydra_status st = prepare(s, logits, true, &f, &z);
    if (st != HYDRA_OK)
        return st;
    *n = f.n;
    if (f.n > capacity)
        return hydra_fail(HYDRA_ERR_RANGE, "hydra_sampler_candidates: %zu tokens, room for %zu", f.n, capacity);
    for (size_t i = 0; i < f.n; i++) {
        ids[i] = f.c[i].id;
        probs[i] = (float)(s->weight[i] / z);
    }
    return HYDRA_OK;
}
