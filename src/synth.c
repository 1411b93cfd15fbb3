/*
 * synth.c — writes synthetic MoE models (see synth.h).  Two passes: a plan
 * (the tensor list with names, types and shapes, checked before any file
 * exists), then the file: metadata, tensor infos, and tensor data that
 * synth_weights.c generates and quantises a batch of row chunks at a time,
 * streamed through the GGUF writer.  A 32 GB Qwen3-30B-A3B-shaped Q8_0 file
 * is written with about 22 MB resident.
 */
#include "synth.h"

#include "error.h"
#include "gguf_write.h"
#include "quant.h"
#include "synth_arch.h"
#include "synth_mix.h"
#include "synth_vocab.h"
#include "synth_weights.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct planned_tensor {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[3];
    uint64_t n_bytes;
    synth_role role;
} planned_tensor;

typedef struct plan {
    const synth_arch *arch;
    synth_params p; /* n_vocab resolved */
    synth_vocab vocab;
    planned_tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t data_bytes;
} plan;

/* ------------------------------------------------------------ checks */

bool synth_type_writable(uint32_t type)
{
    const quant_traits *qt = quant_traits_of(type);
    return qt != NULL && qt->from_float != NULL && qt->vec_dot_ref != NULL;
}

static hydra_status check_type(uint32_t type)
{
    const quant_traits *qt = quant_traits_of(type);
    if (qt == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "synthetic model: tensor type %" PRIu32 " does not exist", type);
    if (!synth_type_writable(type))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "synthetic model: weights cannot be stored as %s: hydra has no "
                          "%s for it", qt->name, qt->from_float == NULL ? "quantiser" : "weight dot product");
    return HYDRA_OK;
}

static hydra_status check_mla(const synth_params *p)
{
    if (p->n_head_kv != 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "deepseek2: MLA stores one latent KV head, not %" PRIu32, p->n_head_kv);
    if (p->n_rot % 2 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "deepseek2: RoPE dims per head (%" PRIu32 ") must be even", p->n_rot);
    if (p->n_dense_lead >= p->n_layer)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "deepseek2: %" PRIu32 " leading dense blocks leave no MoE block "
                          "of %" PRIu32, p->n_dense_lead, p->n_layer);
    uint32_t groups = p->n_expert_group, used = p->n_expert_group_used;
    if (groups == 0 || p->n_expert % groups != 0 || used == 0 || used > groups)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "deepseek2: %" PRIu32 " experts cannot form %" PRIu32 " groups "
                          "with %" PRIu32 " used", p->n_expert, groups, used);
    if ((uint64_t)used * (p->n_expert / groups) < p->n_expert_used)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "deepseek2: %" PRIu32 " groups of %" PRIu32 " experts cannot "
                          "supply %" PRIu32 " experts per token", used, p->n_expert / groups, p->n_expert_used);
    return HYDRA_OK;
}

/* Rules of the architecture that no single tensor shape shows. */
static hydra_status check_rules(const synth_arch *a, const synth_params *p)
{
    if (p->n_layer == 0 || p->n_ctx == 0 || p->n_expert_used == 0 || p->n_head == 0 || p->n_head_kv == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: layers, context, heads, KV heads and experts per token "
                          "must all be at least 1", a->name);
    if (p->n_expert_used > p->n_expert)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: %" PRIu32 " experts per token but only %" PRIu32 " experts",
                          a->name, p->n_expert_used, p->n_expert);
    if (p->n_head % p->n_head_kv != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: %" PRIu32 " heads do not split into %" PRIu32 " KV groups",
                          a->name, p->n_head, p->n_head_kv);
    if (p->head_dim % 2 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: head size %" PRIu32 " must be even (RoPE rotates pairs)",
                          a->name, p->head_dim);
    if ((a->rules & SA_HEADS_SPAN_EMBD) && (uint64_t)p->n_head * p->head_dim != p->n_embd)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s stores no head size: llama.cpp takes n_embd / n_head, so "
                          "heads x head size (%" PRIu32 " x %" PRIu32 ") must equal n_embd %" PRIu32,
                          a->name, p->n_head, p->head_dim, p->n_embd);
    if (!(a->rules & SA_NEXTN) && p->n_nextn != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: MTP (nextn) blocks are written for deepseek2 only", a->name);
    if (p->n_nextn > SYNTH_MAX_NEXTN)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: %" PRIu32 " MTP blocks: at most %d", a->name, p->n_nextn,
                          SYNTH_MAX_NEXTN);
    if ((a->rules & SA_FF_IS_EXPERT) && p->n_ff != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s has no dense FFN: its feed_forward_length is the expert FFN "
                          "size; leave the dense FFN size 0", a->name);
    return (a->rules & SA_MLA) ? check_mla(p) : HYDRA_OK;
}

/* ------------------------------------------------------------ the plan */

/* t->n_bytes from its type and shape, added to the plan's total. */
static hydra_status size_tensor(plan *pl, planned_tensor *t)
{
    uint64_t n_rows = t->ne[1], row_bytes;
    if (__builtin_mul_overflow(n_rows, t->ne[2], &n_rows))
        return hydra_fail(HYDRA_ERR_RANGE, "%s: tensor %s is too large", pl->arch->name, t->name);
    if (!quant_row_bytes(t->type, t->ne[0], &row_bytes))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: tensor %s: rows of %" PRIu64 " values do not divide into "
                          "%s blocks of %" PRIu32, pl->arch->name, t->name, t->ne[0],
                          quant_traits_of(t->type)->name, quant_traits_of(t->type)->block_size);
    if (__builtin_mul_overflow(n_rows, row_bytes, &t->n_bytes) ||
        __builtin_add_overflow(pl->data_bytes, t->n_bytes, &pl->data_bytes))
        return hydra_fail(HYDRA_ERR_RANGE, "%s: tensor %s is too large", pl->arch->name, t->name);
    return HYDRA_OK;
}

static hydra_status plan_push(plan *pl, const char *name, uint32_t type, uint32_t n_dims, const uint64_t ne[3],
                              synth_role role)
{
    if (pl->n_tensors == pl->cap_tensors) {
        size_t cap = pl->cap_tensors ? 2 * pl->cap_tensors : 64;
        planned_tensor *t = realloc(pl->tensors, cap * sizeof *t);
        if (t == NULL)
            return hydra_fail(HYDRA_ERR_NOMEM, "synthetic model: out of memory");
        pl->tensors = t, pl->cap_tensors = cap;
    }
    planned_tensor *t = &pl->tensors[pl->n_tensors];
    *t = (planned_tensor){.type = type, .role = role, .ne = {ne[0], ne[1], ne[2]}, .n_dims = n_dims};
    snprintf(t->name, sizeof t->name, "%s", name);
    hydra_status st = size_tensor(pl, t);
    if (st == HYDRA_OK)
        pl->n_tensors++;
    return st;
}

/* Gives every weight matrix the type p.mix picks for it. */
static hydra_status apply_mix(plan *pl)
{
    if (pl->p.mix == SYNTH_MIX_NONE)
        return HYDRA_OK;
    synth_mix_tensor *mt = malloc(sizeof *mt * (pl->n_tensors + 1));
    if (mt == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "synthetic model: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < pl->n_tensors; i++)
        if (pl->tensors[i].role == SR_WEIGHT)
            mt[n++] = (synth_mix_tensor){pl->tensors[i].name, pl->tensors[i].type};
    synth_mix_apply(&pl->p, mt, n);
    hydra_status st = HYDRA_OK;
    pl->data_bytes = 0;
    for (size_t i = 0, k = 0; i < pl->n_tensors && st == HYDRA_OK; i++) {
        planned_tensor *t = &pl->tensors[i];
        if (t->role == SR_WEIGHT)
            t->type = mt[k++].type;
        st = size_tensor(pl, t);
    }
    free(mt);
    return st;
}

/* A spec's shape and rank (its dims that are not SQ_NONE, so a router of
 * one expert stays 2-D); a dimension of 0 gets the name of what is missing. */
static hydra_status spec_shape(const plan *pl, const synth_tensor *spec, uint64_t ne[3], uint32_t *n_dims)
{
    *n_dims = 0;
    for (int d = 0; d < 3; d++) {
        if (spec->ne[d] != SQ_NONE)
            *n_dims = (uint32_t)d + 1;
        ne[d] = synth_qty_value(&pl->p, spec->ne[d]);
        if (ne[d] == 0)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: tensor %s needs a %s of at least 1", pl->arch->name,
                              spec->name, synth_qty_name(spec->ne[d]));
    }
    return HYDRA_OK;
}

static hydra_status plan_spec(plan *pl, const char *name, const synth_tensor *spec)
{
    uint64_t ne[3];
    uint32_t n_dims;
    hydra_status st = spec_shape(pl, spec, ne, &n_dims);
    if (st != HYDRA_OK)
        return st;
    uint32_t type = spec->role == SR_WEIGHT ? pl->p.type : QT_F32;
    return plan_push(pl, name, type, n_dims, ne, spec->role);
}

/* Blocks n_layer .. are the MTP blocks: MoE blocks with the nextn tensors. */
static bool in_block(const synth_params *p, synth_blocks blocks, uint32_t layer)
{
    const bool dense = layer < p->n_dense_lead, mtp = layer >= p->n_layer;
    if (blocks == SB_NEXTN)
        return mtp;
    return blocks == SB_ALL || (blocks == SB_DENSE) == dense;
}

static hydra_status plan_tensors(plan *pl)
{
    static const synth_tensor embd = {"token_embd.weight", {SQ_EMBD, SQ_VOCAB, SQ_NONE}, SR_WEIGHT, SB_ALL};
    static const synth_tensor out_norm = {"output_norm.weight", {SQ_EMBD, SQ_NONE, SQ_NONE}, SR_HEAD_NORM, SB_ALL};
    static const synth_tensor out = {"output.weight", {SQ_EMBD, SQ_VOCAB, SQ_NONE}, SR_WEIGHT, SB_ALL};
    hydra_status st = plan_spec(pl, embd.name, &embd);
    char name[64];
    for (uint32_t layer = 0; layer < pl->p.n_layer + pl->p.n_nextn && st == HYDRA_OK; layer++)
        for (size_t i = 0; i < pl->arch->n_tensors && st == HYDRA_OK; i++) {
            const synth_tensor *spec = &pl->arch->tensors[i];
            if (!in_block(&pl->p, spec->blocks, layer))
                continue;
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", layer, spec->name);
            st = plan_spec(pl, name, spec);
        }
    if (st == HYDRA_OK)
        st = plan_spec(pl, out_norm.name, &out_norm);
    return st == HYDRA_OK ? plan_spec(pl, out.name, &out) : st;
}

/* Every u32 key must hold its value. */
static hydra_status check_keys(const plan *pl)
{
    for (size_t i = 0; i < pl->arch->n_keys; i++) {
        const synth_key *k = &pl->arch->keys[i];
        if ((k->kind == SK_U32 || k->kind == SK_U32_NONZERO) && synth_qty_value(&pl->p, k->qty) > UINT32_MAX)
            return hydra_fail(HYDRA_ERR_RANGE, "%s.%s: %s exceeds 32 bits", pl->arch->name, k->suffix,
                              synth_qty_name(k->qty));
    }
    return HYDRA_OK;
}

static void plan_free(plan *pl)
{
    synth_vocab_free(&pl->vocab);
    free(pl->tensors);
}

static hydra_status plan_build(plan *pl, const synth_params *p)
{
    memset(pl, 0, sizeof *pl);
    pl->p = *p;
    pl->arch = synth_arch_find(p->arch);
    if (pl->arch == NULL)
        return synth_arch_preset(p->arch, &pl->p); /* fails, naming the known architectures */
    if (p->mix != SYNTH_MIX_NONE && synth_mix_name(p->mix) == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "synthetic model: unknown type mix %d", (int)p->mix);
    if (p->mix != SYNTH_MIX_NONE)
        pl->p.type = synth_mix_base_type(p->mix);
    hydra_status st = check_type(pl->p.type);
    if (st == HYDRA_OK && !(p->router_skew >= 0 && p->router_skew <= SYNTH_MAX_ROUTER_SKEW))
        st = hydra_fail(HYDRA_ERR_INVALID_ARG, "synthetic model: router skew %g outside 0 .. %g", (double)p->router_skew,
                        (double)SYNTH_MAX_ROUTER_SKEW);
    if (st == HYDRA_OK)
        st = check_rules(pl->arch, p);
    if (st == HYDRA_OK)
        st = synth_vocab_build(&pl->vocab, synth_family_find(pl->arch->tokenizer), p->n_vocab);
    pl->p.n_vocab = pl->vocab.n_tokens;
    if (st == HYDRA_OK)
        st = check_keys(pl);
    if (st == HYDRA_OK)
        st = plan_tensors(pl);
    if (st == HYDRA_OK)
        st = apply_mix(pl);
    if (st != HYDRA_OK)
        plan_free(pl);
    return st;
}

hydra_status synth_check(const synth_params *p)
{
    plan pl;
    hydra_status st = plan_build(&pl, p);
    if (st == HYDRA_OK)
        plan_free(&pl);
    return st;
}

uint64_t synth_data_bytes(const synth_params *p)
{
    plan pl;
    if (plan_build(&pl, p) != HYDRA_OK)
        return 0;
    uint64_t bytes = pl.data_bytes;
    plan_free(&pl);
    return bytes;
}

/* ------------------------------------------------------------ metadata */

/* llama.cpp's general.file_type (enum llama_ftype) for a file whose weight
 * matrices are all of one type; a type missing here gets no such key (a
 * mix has its own, synth_mix.c). */
static const struct {
    uint32_t type, file_type;
} file_types[] = {
    {QT_F32, 0},      {QT_F16, 1},     {QT_Q4_0, 2},    {QT_Q4_1, 3},    {QT_Q8_0, 7},      {QT_Q5_0, 8},
    {QT_Q5_1, 9},     {QT_Q2_K, 10},   {QT_Q3_K, 11},   {QT_Q4_K, 14},   {QT_Q5_K, 16},     {QT_Q6_K, 18},
    {QT_IQ2_XXS, 19}, {QT_IQ2_XS, 20}, {QT_IQ3_XXS, 23}, {QT_IQ1_S, 24}, {QT_IQ4_NL, 25},   {QT_IQ3_S, 26},
    {QT_IQ2_S, 28},   {QT_IQ4_XS, 30}, {QT_IQ1_M, 31},  {QT_BF16, 32},   {QT_TQ1_0, 36},    {QT_TQ2_0, 37},
    {QT_MXFP4, 38},
};

static hydra_status add_general_keys(gguf_writer *w, const plan *pl)
{
    char name[160], style[64] = "";
    if (pl->p.fast || pl->p.router_skew > 0)
        snprintf(style, sizeof style, "%s, router skew %g", pl->p.fast ? ", fast pool rows" : "",
                 (double)pl->p.router_skew);
    if (pl->p.zero_head_norms)
        strcat(style, ", zero head norms"); /* at most 31 + 17 bytes */
    snprintf(name, sizeof name, "hydra synthetic %s (random weights, seed %" PRIu64 "%s)", pl->arch->name, pl->p.seed,
             style);
    gguf_writer_add_str(w, "general.architecture", pl->arch->name);
    gguf_writer_add_str(w, "general.type", "model");
    gguf_writer_add_str(w, "general.name", name);
    if (pl->p.mix != SYNTH_MIX_NONE)
        gguf_writer_add_u32(w, "general.file_type", synth_mix_file_type(pl->p.mix));
    for (size_t i = 0; i < sizeof file_types / sizeof file_types[0] && pl->p.mix == SYNTH_MIX_NONE; i++)
        if (file_types[i].type == pl->p.type)
            gguf_writer_add_u32(w, "general.file_type", file_types[i].file_type);
    return gguf_writer_add_u32(w, "general.quantization_version", 2);
}

static hydra_status add_arch_keys(gguf_writer *w, const plan *pl)
{
    char key[128];
    hydra_status st = HYDRA_OK;
    for (size_t i = 0; i < pl->arch->n_keys && st == HYDRA_OK; i++) {
        const synth_key *k = &pl->arch->keys[i];
        snprintf(key, sizeof key, "%s.%s", pl->arch->name, k->suffix);
        if (k->kind == SK_U32_NONZERO && synth_qty_value(&pl->p, k->qty) != 0)
            st = gguf_writer_add_u32(w, key, (uint32_t)synth_qty_value(&pl->p, k->qty));
        else if (k->kind == SK_U32_NONZERO)
            continue;
        else if (k->kind == SK_U32)
            st = gguf_writer_add_u32(w, key, k->qty == SQ_NONE ? (uint32_t)k->num
                                                               : (uint32_t)synth_qty_value(&pl->p, k->qty));
        else if (k->kind == SK_F32)
            st = gguf_writer_add_f32(w, key, (float)k->num);
        else if (k->kind == SK_BOOL)
            st = gguf_writer_add_bool(w, key, k->num != 0);
        else
            st = gguf_writer_add_str(w, key, k->s);
    }
    return st;
}

static hydra_status declare_tensors(gguf_writer *w, const plan *pl)
{
    hydra_status st = HYDRA_OK;
    for (size_t i = 0; i < pl->n_tensors && st == HYDRA_OK; i++) {
        const planned_tensor *t = &pl->tensors[i];
        st = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    return st;
}

/* ------------------------------------------------------------ tensor data */

typedef struct sink_state {
    gguf_writer *w;
    const synth_params *p;
    const char *tensor;
    uint64_t done, total;
} sink_state;

static hydra_status write_bytes(const void *bytes, size_t n, void *user)
{
    sink_state *s = user;
    hydra_status st = gguf_writer_write(s->w, bytes, n);
    s->done += n;
    if (st == HYDRA_OK && s->p->progress != NULL && !s->p->progress(s->done, s->total, s->p->progress_user))
        return hydra_fail(HYDRA_ERR_CANCELLED, "synthetic model: cancelled at %s", s->tensor);
    return st;
}

static hydra_status write_data(gguf_writer *w, const plan *pl)
{
    synth_weights *gen;
    const synth_weight_style style = {.fast = pl->p.fast, .router_skew = pl->p.router_skew,
                                      .zero_head_norms = pl->p.zero_head_norms};
    hydra_status st = synth_weights_create(&gen, (int)pl->p.n_threads, &style);
    sink_state sink = {.w = w, .p = &pl->p, .total = pl->data_bytes};
    for (size_t i = 0; i < pl->n_tensors && st == HYDRA_OK; i++) {
        const planned_tensor *t = &pl->tensors[i];
        synth_weight_tensor wt = {t->name, t->type, t->ne[0], t->ne[1] * t->ne[2], t->role};
        sink.tensor = t->name;
        st = synth_weights_stream(gen, &wt, pl->p.seed, write_bytes, &sink);
    }
    synth_weights_free(gen);
    return st;
}

/* ------------------------------------------------------------ the file */

static hydra_status write_plan(gguf_writer *w, const plan *pl)
{
    hydra_status st = add_general_keys(w, pl);
    if (st == HYDRA_OK)
        st = add_arch_keys(w, pl);
    if (st == HYDRA_OK)
        st = synth_vocab_write_keys(&pl->vocab, w);
    if (st == HYDRA_OK)
        st = declare_tensors(w, pl);
    return st == HYDRA_OK ? write_data(w, pl) : st;
}

hydra_status synth_write(const char *path, const synth_params *p)
{
    if (path == NULL || p == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "synth_write: NULL path or parameters");
    plan pl;
    hydra_status st = plan_build(&pl, p);
    if (st != HYDRA_OK)
        return st;
    gguf_writer *w;
    st = gguf_writer_open(&w, path);
    if (st == HYDRA_OK)
        st = write_plan(w, &pl);
    if (st == HYDRA_OK)
        st = gguf_writer_close(w);
    else
        gguf_writer_abort(w);
    plan_free(&pl);
    return st;
}
