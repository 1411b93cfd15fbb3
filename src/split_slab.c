/*
 * split_slab.c — the hybrid slab of a tensor split (split.h,
 * docs/MULTIGPU.md "Tensor split with the hybrid slab"): which part's slab
 * holds which hot experts, decided on the host from the plan, so it is
 * tested in CI (tests/test_split_slab.c).
 *
 * A part's experts are its plan's [exp0, exp1); its slab budget is what
 * its device has left once its share of everything else is placed (the
 * plan's avail - need, the plan made with the routed experts left out).
 * Every (layer, expert) is then computed exactly once: by the GPU of the
 * part whose slab holds it, else by the main part's CPU miss pass, whose
 * sum the main part adds before the all-reduce.
 */
#include "split.h"

#include "error.h"
#include "hybrid.h"

#include <stdlib.h>
#include <string.h>

/* holder entries that are not a part */
enum { HOLDER_CPU = -1, HOLDER_DENSE = -2 };

/* Slots per MoE layer of one part: the same count c in every layer with
 * c the most the budget allows, then one more per layer from the first
 * on while the rest of the budget allows; at most `owned` each
 * (placement.h's rule without a profile). */
static void plan_part_slots(const split_slab_input *in, uint64_t budget, int owned, int32_t *n_slots)
{
    uint64_t per_round = 0;
    for (int l = 0; l < in->n_layer; l++)
        per_round += in->expert_bytes[l];
    const uint64_t rounds = per_round == 0 ? 0 : budget / per_round;
    const int32_t even = rounds >= (uint64_t)owned ? owned : (int32_t)rounds;
    uint64_t left = budget - (uint64_t)even * per_round;
    for (int l = 0; l < in->n_layer; l++) {
        const uint64_t b = in->expert_bytes[l];
        n_slots[l] = b == 0 ? 0 : even;
        if (b > 0 && even < owned && left >= b) {
            n_slots[l]++;
            left -= b;
        }
    }
}

static hydra_status check_order(const split_slab_input *in, int l, uint8_t *seen)
{
    const int32_t *order = in->order != NULL ? in->order[l] : NULL;
    if (order == NULL)
        return HYDRA_OK;
    memset(seen, 0, (size_t)in->n_expert);
    for (int k = 0; k < in->n_expert; k++) {
        const int32_t e = order[k];
        if (e < 0 || e >= in->n_expert || seen[e])
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "-sm tensor slab: layer %d's expert order is not a "
                              "permutation of its %d experts (entry %d is %d)", l, in->n_expert, k, e);
        seen[e] = 1;
    }
    return HYDRA_OK;
}

/* Part i's slots of layer l go to its hottest owned experts. */
static void fill_layer(split_slab *s, const split_slab_input *in, int i, int l)
{
    const split_part *q = &in->plan->part[i];
    const int32_t *order = in->order != NULL ? in->order[l] : NULL;
    int32_t left = s->n_slots[(size_t)i * (size_t)s->n_layer + (size_t)l];
    for (int k = 0; k < s->n_expert && left > 0; k++) {
        const int32_t e = order != NULL ? order[k] : k;
        if (e >= q->exp0 && e < q->exp1) {
            s->holder[(size_t)l * (size_t)s->n_expert + (size_t)e] = (int16_t)i;
            left--;
        }
    }
}

static hydra_status make_parts(split_slab *s, const split_slab_input *in)
{
    uint8_t *seen = malloc((size_t)in->n_expert + 1);
    if (seen == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor slab: expert flags");
    hydra_status st = HYDRA_OK;
    for (int l = 0; l < in->n_layer && st == HYDRA_OK; l++)
        st = check_order(in, l, seen);
    free(seen);
    for (int i = 0; i < s->n_part && st == HYDRA_OK; i++) {
        const split_part *q = &in->plan->part[i];
        s->budget[i] = q->avail > q->need ? q->avail - q->need : 0;
        s->exp0[i] = q->exp0;
        s->exp1[i] = q->exp1;
        s->main = q->head ? i : s->main;
        int32_t *n_slots = s->n_slots + (size_t)i * (size_t)s->n_layer;
        if (in->fraction >= 0.0)
            for (int l = 0; l < s->n_layer; l++)
                n_slots[l] = in->expert_bytes[l] > 0 ? hybrid_slots_for_fraction(q->exp1 - q->exp0, in->fraction) : 0;
        else
            plan_part_slots(in, s->budget[i], q->exp1 - q->exp0, n_slots);
        for (int l = 0; l < s->n_layer; l++)
            fill_layer(s, in, i, l);
    }
    return st;
}

hydra_status split_slab_make(split_slab *s, const split_slab_input *in)
{
    memset(s, 0, sizeof *s);
    if (in->plan == NULL || in->plan->mode != SPLIT_TENSOR)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "-sm tensor slab: the plan is not a tensor split");
    if (in->fraction > 1.0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "-sm tensor slab: fraction %g above 1", in->fraction);
    if (in->n_layer < 0 || in->n_expert < 0 || in->n_expert > INT16_MAX)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "-sm tensor slab: %d layers of %d experts", in->n_layer,
                          in->n_expert);
    *s = (split_slab){.n_part = in->plan->n_part, .n_layer = in->n_layer, .n_expert = in->n_expert};
    const size_t cells = (size_t)in->n_layer * (size_t)in->n_expert;
    s->n_slots = calloc((size_t)s->n_part * (size_t)s->n_layer + 1, sizeof *s->n_slots);
    s->holder = malloc(sizeof *s->holder * (cells + 1));
    hydra_status st = s->n_slots != NULL && s->holder != NULL
                          ? HYDRA_OK
                          : hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor slab: %zu slot entries", cells);
    if (st == HYDRA_OK) {
        for (size_t c = 0; c < cells; c++)
            s->holder[c] = in->expert_bytes[c / (size_t)in->n_expert] > 0 ? HOLDER_CPU : HOLDER_DENSE;
        st = make_parts(s, in);
    }
    if (st != HYDRA_OK)
        split_slab_free(s);
    return st;
}

void split_slab_free(split_slab *s)
{
    free(s->n_slots);
    free(s->holder);
    memset(s, 0, sizeof *s);
}

split_slab_role split_slab_role_of(const split_slab *s, int part, int l, int e)
{
    const int holder = s->holder[(size_t)l * (size_t)s->n_expert + (size_t)e];
    if (holder == part)
        return SPLIT_SLAB_HERE;
    return holder == HOLDER_CPU && part == s->main ? SPLIT_SLAB_CPU : SPLIT_SLAB_ELSEWHERE;
}

void split_slab_hold(split_slab *s, int part, int l, int e, bool held)
{
    int16_t *holder = &s->holder[(size_t)l * (size_t)s->n_expert + (size_t)e];
    if (*holder == HOLDER_DENSE || e < s->exp0[part] || e >= s->exp1[part])
        return;
    *holder = held ? (int16_t)part : (int16_t)HOLDER_CPU;
}

int32_t split_slab_order(const split_slab *s, int part, int l, int32_t *ids)
{
    const int16_t *holder = s->holder + (size_t)l * (size_t)s->n_expert;
    int32_t n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int e = 0; e < s->n_expert; e++)
            if ((holder[e] == part) == (pass == 0))
                ids[n++] = e;
    return s->n_slots[(size_t)part * (size_t)s->n_layer + (size_t)l];
}
