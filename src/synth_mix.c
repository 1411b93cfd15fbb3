/*
 * synth_mix.c — per-tensor type mixes named as llama-quantize's file types
 * (synth.h).  The rules are llama.cpp's llama_tensor_get_type for these
 * file types (llama.cpp d32676d77), written as data:
 *
 *   output.weight                  Q6_K
 *   attn_v.weight                  Q6_K where use_more_bits(i, n) (i counts
 *                                  attn_v tensors in file order); Q8_0 for
 *                                  any layer when the model has exactly 8
 *                                  experts (that override comes last)
 *   attn_k.weight                  Q8_0 with exactly 8 experts
 *   attn_output.weight             Q5_K with exactly 8 experts
 *   every name containing ffn_down Q6_K where use_more_bits(i, n), n the
 *                                  number of such tensors and i the block
 *                                  number in the name when the model has
 *                                  experts (the running count otherwise)
 *
 * use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2: the
 * first and last eighth of the layers and every third one between.  The
 * tests compare the result with ../shared/models/qwen3moe-kq-q4_k_m.gguf,
 * which llama-quantize wrote.
 */
#include "synth_mix.h"

#include "quant.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef enum mix_when {
    MW_ALWAYS,
    MW_MORE_BITS,    /* use_more_bits over the tensors this rule matches */
    MW_EIGHT_EXPERTS /* the model has exactly 8 experts */
} mix_when;

typedef struct mix_rule {
    const char *match; /* exact name when global, else a substring of the name */
    bool global;
    mix_when when;
    bool index_by_block; /* MW_MORE_BITS: i is the block number when the model has experts */
    uint32_t type;
} mix_rule;

/* In llama.cpp's order: a later rule that applies overrides an earlier one. */
static const mix_rule k_m_rules[] = {
    {"output.weight", true, MW_ALWAYS, false, QT_Q6_K},
    {"attn_v.weight", false, MW_MORE_BITS, false, QT_Q6_K},
    {"attn_v.weight", false, MW_EIGHT_EXPERTS, false, QT_Q8_0},
    {"attn_k.weight", false, MW_EIGHT_EXPERTS, false, QT_Q8_0},
    {"attn_output.weight", false, MW_EIGHT_EXPERTS, false, QT_Q5_K},
    {"ffn_down", false, MW_MORE_BITS, true, QT_Q6_K},
};

/* Not llama-quantize's: the "dynamic" low-bit mix of the popular DeepSeek
 * and Kimi downloads (issue 11), routed experts (ffn_*_exps) in IQ2_XXS,
 * attention and shared experts in Q4_K, output and attn_v in Q6_K. */
static const mix_rule iq2_xxs_exps_rules[] = {
    {"output.weight", true, MW_ALWAYS, false, QT_Q6_K},
    {"attn_v.weight", false, MW_ALWAYS, false, QT_Q6_K},
    {"_exps.weight", false, MW_ALWAYS, false, QT_IQ2_XXS},
};

typedef struct mix_def {
    const char *name;
    uint32_t base;      /* every weight matrix no rule changes */
    uint32_t file_type; /* llama.cpp's enum llama_ftype */
    const mix_rule *rules;
    size_t n_rules;
} mix_def;

static const mix_def mixes[] = {
    [SYNTH_MIX_Q4_K_M] = {"Q4_K_M", QT_Q4_K, 15, k_m_rules, sizeof k_m_rules / sizeof k_m_rules[0]},
    [SYNTH_MIX_Q5_K_M] = {"Q5_K_M", QT_Q5_K, 17, k_m_rules, sizeof k_m_rules / sizeof k_m_rules[0]},
    [SYNTH_MIX_IQ2_XXS_EXPS] = {"IQ2_XXS_EXPS", QT_Q4_K, 19, iq2_xxs_exps_rules,
                                sizeof iq2_xxs_exps_rules / sizeof iq2_xxs_exps_rules[0]},
};
enum { N_MIXES = sizeof mixes / sizeof mixes[0] };

static const mix_def *mix_of(synth_mix m)
{
    return m > SYNTH_MIX_NONE && (size_t)m < N_MIXES ? &mixes[m] : NULL;
}

const char *synth_mix_name(synth_mix m)
{
    return mix_of(m) ? mix_of(m)->name : NULL;
}

bool synth_mix_find(const char *name, synth_mix *out)
{
    for (size_t m = 1; name != NULL && m < N_MIXES; m++)
        if (strcasecmp(mixes[m].name, name) == 0)
            return *out = (synth_mix)m, true;
    return false;
}

uint32_t synth_mix_base_type(synth_mix m)
{
    return mix_of(m) ? mix_of(m)->base : QT_COUNT;
}

uint32_t synth_mix_file_type(synth_mix m)
{
    return mix_of(m) ? mix_of(m)->file_type : 0;
}

static bool rule_matches(const mix_rule *r, const char *name)
{
    return r->global ? strcmp(name, r->match) == 0 : strncmp(name, "blk.", 4) == 0 && strstr(name, r->match);
}

static bool use_more_bits(long i, long n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Whether rule r applies to the `seen`-th (0-based) of the `count` tensors
 * it matches, named name. */
static bool rule_applies(const mix_rule *r, const synth_params *p, const char *name, long seen, long count)
{
    switch (r->when) {
    case MW_ALWAYS:
        return true;
    case MW_EIGHT_EXPERTS:
        return p->n_expert == 8;
    case MW_MORE_BITS: {
        long block = seen;
        if (r->index_by_block && p->n_expert > 1 && sscanf(name, "blk.%ld.", &block) != 1)
            return false;
        return use_more_bits(block, count);
    }
    }
    return false;
}

void synth_mix_apply(const synth_params *p, synth_mix_tensor *t, size_t n)
{
    const mix_def *def = mix_of(p->mix);
    if (def == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        t[i].type = def->base;
    for (size_t k = 0; k < def->n_rules; k++) {
        const mix_rule *r = &def->rules[k];
        long count = 0, seen = 0;
        for (size_t i = 0; i < n; i++)
            count += rule_matches(r, t[i].name);
        for (size_t i = 0; i < n; i++)
            if (rule_matches(r, t[i].name) && rule_applies(r, p, t[i].name, seen++, count))
                t[i].type = r->type;
    }
}
