/*
 * slab_policy.h — which experts the hybrid slab holds, decided between
 * decode steps (issue 10, docs/HYBRID.md "Policies").
 *
 * The slab of each MoE layer has n_slots slots.  A policy starts from a
 * ranking (a profile / pin file: the most used experts first, or expert id
 * order) and then, per layer:
 *
 *   slab_policy_observe(sp, layer, experts, n)   after each step: the
 *       experts the step's tokens chose (k per token); O(n), no allocation;
 *       returns how many were resident (hits).
 *   slab_policy_next_admission(sp, layer, &expert, &slot)   between steps:
 *       the copy the policy wants (a recently missed expert into a victim
 *       slot), or false.  At most one admission per layer is in flight;
 *       O(n_slots) when one is proposed, O(1) otherwise.
 *   slab_policy_commit(sp, layer, expert, slot)   when the copy has landed
 *       (the slot table changes only then; hybrid_admit follows it).
 *   slab_policy_abort(sp, layer)   the copy was not made.
 *
 * Kinds:
 *   SLAB_STATIC  the ranking's first n_slots experts, never changed.
 *   SLAB_LRU     a missed expert replaces the least recently used one.
 *   SLAB_LFU     decayed frequency: every lookup adds 1 to the expert's
 *                score and all scores decay by `decay` per token; a missed
 *                expert replaces the lowest-scored resident when its score
 *                is higher by the factor `hysteresis` (no thrashing between
 *                two equally hot experts).
 * Any dynamic kind can be throttled by a bus budget: at most bus_budget
 * admissions per token per layer on average (a credit that grows by
 * bus_budget each observed token, capped at SLAB_MAX_CREDIT; an admission
 * costs 1).  bus_budget <= 0: unthrottled.
 */
#ifndef HYDRA_SLAB_POLICY_H
#define HYDRA_SLAB_POLICY_H

#include "hydra.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum slab_policy_kind { SLAB_STATIC = 0, SLAB_LRU = 1, SLAB_LFU = 2 } slab_policy_kind;

enum {
    SLAB_NO_SLOT = -1,
    SLAB_MAX_CANDIDATES = 64, /* recent misses remembered per layer */
};

#define SLAB_MAX_CREDIT 2.0

typedef struct slab_policy_params {
    slab_policy_kind kind;
    double bus_budget; /* admissions per token per layer; <= 0: no limit */
    double decay;      /* SLAB_LFU: score multiplier per token (0 < decay <= 1) */
    double hysteresis; /* SLAB_LFU: a candidate must score this factor above its victim (>= 1) */
} slab_policy_params;

/* The default: decayed LFU (decay 0.99: half-life ~69 tokens, hysteresis
 * 1.25), throttled to one copy per layer every four tokens.  On a trace
 * with drifting context it beats the static profile pins by ~2 points of
 * hit rate at 25% and 50% resident, and loses < 0.5 where routing has no
 * locality (docs/PERFORMANCE.md "Hybrid: slab policies"). */
slab_policy_params slab_policy_default_params(void);

/* Parses "static", "lru", "lfu" (any case). */
bool slab_policy_kind_parse(const char *name, slab_policy_kind *out);
const char *slab_policy_kind_name(slab_policy_kind kind);

typedef struct slab_layer_policy {
    int32_t n_slots;
    int32_t *slot_of;    /* n_expert: slot or SLAB_NO_SLOT */
    int32_t *expert_in;  /* n_slots: expert or SLAB_NO_SLOT */
    uint64_t *last_use;  /* n_expert: tick of the last lookup (LRU) */
    double *score;       /* n_expert: decayed frequency, in units of `unit` (LFU) */
    double unit;         /* what one lookup adds now: grows 1/decay per token instead of every score decaying */
    uint64_t tick;       /* tokens observed */
    double credit;       /* bus budget left */
    int32_t cand[SLAB_MAX_CANDIDATES]; /* recent misses, newest last */
    int32_t n_cand;
    int32_t in_flight;   /* expert being copied, or SLAB_NO_SLOT */
    uint64_t admissions; /* committed copies */
} slab_layer_policy;

typedef struct slab_policy {
    slab_policy_params p;
    int n_layer, n_expert;
    slab_layer_policy *layer; /* n_layer; n_slots 0 for dense layers */
} slab_policy;

/* n_slots: per layer (0: a dense layer or no slab).  order: per layer the
 * experts most used first (n_expert ids, a permutation), NULL or a NULL
 * entry: id order; the first n_slots get slots 0, 1, ...  Fails on bad
 * parameters or shapes, or no memory. */
hydra_status slab_policy_init(slab_policy *sp, const slab_policy_params *p, int n_layer, int n_expert,
                              const int32_t *n_slots, const int32_t *const *order);
void slab_policy_free(slab_policy *sp); /* safe on a zeroed one */

/* See the top of this file. */
int slab_policy_observe(slab_policy *sp, int layer, const int32_t *experts, int n, int k);
bool slab_policy_next_admission(slab_policy *sp, int layer, int32_t *expert, int32_t *victim_slot);
void slab_policy_commit(slab_policy *sp, int layer, int32_t expert, int32_t slot);
void slab_policy_abort(slab_policy *sp, int layer);

#endif
