/*
 * test_split_view.c — -sm tensor's partition without a GPU (src/split.h,
 * split_view.c): on the shared models, every part's view is checked
 * against the model's own tensors — Q/K/V rows and their biases, the
 * attention output's and FFN down's columns (decoded by the reference
 * dequantiser, in the model's own type, starting and ending on a block
 * boundary: no slice cuts a quant block), an unsplit sublayer (the main
 * part's matrix, zero blocks elsewhere), the shared expert, the routed
 * experts and their down bias, the summed biases and the head on the main
 * part only — with equal and uneven -ts and 2 to 4 parts; fewer KV heads
 * (in block granules) than devices leaves attention unsplit; a split that
 * cannot fit says so with the numbers.  Latent attention (deepseek2) is cut
 * by query heads: q / q_b rows, the heads' k_b and v_b matrices, their
 * output columns; the latent projections whole on every part.
 * (test_split_mla.c runs a simulated split of deepseek2's CPU forward.)
 */
#include "test.h"
#include "util.h"

#include "error.h"
#include "quant.h"
#include "split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded {
    hydra_model *model;
    model_weights w;
} loaded;

static hydra_status load(const char *name, loaded *ld)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s.gguf", test_shared_dir(), name);
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    memset(ld, 0, sizeof *ld);
    hydra_status st = hydra_model_open(&ld->model, &mp);
    return st == HYDRA_OK ? weights_bind(&ld->w, ld->model) : st;
}

static void unload(loaded *ld)
{
    weights_free(&ld->w);
    hydra_model_close(ld->model);
}

static hydra_status plan_of(const model_weights *w, const float *ts, int main_gpu, split_plan *p)
{
    split_model m;
    uint64_t *lb = NULL;
    const uint64_t avail[2] = {1ull << 40, 1ull << 40};
    hydra_status st = split_model_of(&m, &lb, w, 256, 64, QT_F16, false);
    const split_request r = {.mode = SPLIT_TENSOR, .n_dev = 2, .avail = avail, .ratios = ts, .main_gpu = main_gpu};
    if (st == HYDRA_OK)
        st = split_plan_make(p, &m, &r);
    free(lb);
    return st;
}

/* Values [c0, c0 + n) of row r of t, decoded. */
static void row_values(const wtensor *t, int64_t r, int64_t c0, int64_t n, float *out)
{
    float *all = malloc(sizeof(float) * (size_t)t->ne[0]);
    quant_traits_of(t->type)->to_float(t->data + (size_t)r * t->row_bytes, all, t->ne[0]);
    memcpy(out, all + c0, sizeof(float) * (size_t)n);
    free(all);
}

/* Every row of the view's column slice equals columns [c0, c0 + its
 * width) of the model's tensor, value for value. */
static bool cols_match(const wtensor *whole, const wtensor *part, int64_t c0)
{
    if (whole->data == NULL)
        return part->data == NULL;
    const int64_t n = part->ne[0];
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    bool same = part->ne[1] == whole->ne[1];
    for (int64_t r = 0; same && r < whole->ne[1] * whole->ne[2]; r++) {
        row_values(whole, r, c0, n, a);
        row_values(part, r, 0, n, b);
        same = memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    }
    free(a);
    free(b);
    return same;
}

/* The view's rows are rows [r0, ..) of the model's (a pointer into it). */
static bool rows_at(const wtensor *whole, const wtensor *part, int64_t r0)
{
    if (whole->data == NULL)
        return part->data == NULL;
    const bool vector = whole->ne[1] == 1;
    return part->data == whole->data + (size_t)r0 * (vector ? sizeof(float) : whole->row_bytes);
}

static bool all_zero(const wtensor *t)
{
    const size_t n = t->mat_bytes * (size_t)t->ne[2];
    for (size_t i = 0; i < n; i++)
        if (t->data[i] != 0)
            return false;
    return true;
}

/* An output projection (attention output, FFN down) of a part: a slice of
 * whole quant blocks in the model's own type starting at column c0 (never
 * decoded to F32, never cut inside a block), or, unsplit (the part holds
 * every column), the model's matrix on the main part and zero blocks of the
 * same type and shape elsewhere.  *cols: the columns this part adds. */
static bool out_proj_ok(const wtensor *whole, const wtensor *part, int64_t c0, bool main, int64_t *cols)
{
    *cols = 0;
    if (whole->data == NULL)
        return part->data == NULL;
    if (part->type != whole->type || part->ne[1] != whole->ne[1] || part->ne[2] != whole->ne[2])
        return false;
    if (part->ne[0] == whole->ne[0]) { /* unsplit */
        *cols = main ? whole->ne[0] : 0;
        return main ? part->data == whole->data : part->data != whole->data && all_zero(part);
    }
    const int64_t bs = quant_traits_of(whole->type)->block_size;
    *cols = part->ne[0];
    return c0 % bs == 0 && (c0 + part->ne[0]) % bs == 0 && cols_match(whole, part, c0);
}

typedef struct sums {
    int64_t kv, q_rows, out_cols, ff, shexp, experts;
} sums;

/* Query heads per unit of the plan's head cut: a KV head's group, or one
 * for latent attention (cut by query heads, split_model_of). */
static int64_t head_group(const model_weights *w)
{
    return w->arch->attention != NULL ? 1 : w->hp.n_head / w->hp.n_head_kv;
}

/* The query projection: attn_q, or q_b behind the latent bottleneck. */
static const wtensor *q_rows_of(const layer_weights *lw)
{
    return lw->w[W_ATTN_Q].data != NULL ? &lw->w[W_ATTN_Q] : &lw->w[W_ATTN_Q_B];
}

/* Latent attention: the heads' matrices of k_b and v_b (pointers into the
 * stacks), the latent projections and norms the model's own on every part. */
static void check_latent(test_ctx *t_, const layer_weights *a, const layer_weights *b, const split_part *q)
{
    static const arch_role stacks[] = {W_ATTN_K_B, W_ATTN_V_B};
    static const arch_role whole[] = {W_ATTN_Q_A, W_ATTN_Q_A_NORM, W_ATTN_KV_A_MQA, W_ATTN_KV_A_NORM};
    for (size_t r = 0; r < sizeof stacks / sizeof stacks[0]; r++) {
        CHECK(b->w[stacks[r]].data == a->w[stacks[r]].data + (size_t)q->head0 * a->w[stacks[r]].mat_bytes);
        CHECK_EQ_INT(b->w[stacks[r]].ne[2], q->head1 - q->head0);
        CHECK_EQ_INT(b->w[stacks[r]].ne[1], a->w[stacks[r]].ne[1]);
    }
    for (size_t r = 0; r < sizeof whole / sizeof whole[0]; r++) {
        CHECK(b->w[whole[r]].data == a->w[whole[r]].data);
        CHECK_EQ_INT(b->w[whole[r]].ne[1], a->w[whole[r]].ne[1]);
    }
}

static void check_part(test_ctx *t_, const model_weights *w, const split_plan *p, int i, sums *s)
{
    split_view v;
    CHECK_OK(split_view_make(&v, w, p, i, false));
    const arch_hparams *hp = &w->hp;
    const split_part *q = &p->part[i];
    const bool latent = w->arch->attention != NULL;
    const int64_t group = head_group(w), dq = group * hp->head_dim_k, dv = group * hp->head_dim_v;
    const int units = latent ? (int)hp->n_head : (int)hp->n_head_kv;
    CHECK_EQ_INT(v.w.hp.n_head_kv, latent ? hp->n_head_kv : (uint32_t)(q->head1 - q->head0));
    CHECK_EQ_INT(v.w.hp.n_head, (q->head1 - q->head0) * group);
    CHECK(q->head1 > q->head0); /* at least one KV head each */
    CHECK(!p->heads_whole || (q->head0 == 0 && q->head1 == units));
    int64_t out_cols = 0, shexp_cols = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *a = &w->layer[l], *b = &v.layer[l];
        CHECK(rows_at(&a->w[W_ATTN_Q], &b->w[W_ATTN_Q], q->head0 * dq));
        CHECK(rows_at(&a->w[W_ATTN_Q_B], &b->w[W_ATTN_Q_B], q->head0 * dq));
        CHECK_EQ_INT(q_rows_of(b)->ne[1], (q->head1 - q->head0) * dq);
        if (latent)
            check_latent(t_, a, b, q);
        CHECK(rows_at(&a->w[W_ATTN_Q_BIAS], &b->w[W_ATTN_Q_BIAS], q->head0 * dq));
        CHECK(rows_at(&a->w[W_ATTN_K], &b->w[W_ATTN_K], q->head0 * (int64_t)hp->head_dim_k));
        CHECK(rows_at(&a->w[W_ATTN_K_BIAS], &b->w[W_ATTN_K_BIAS], q->head0 * (int64_t)hp->head_dim_k));
        CHECK(rows_at(&a->w[W_ATTN_V], &b->w[W_ATTN_V], q->head0 * (int64_t)hp->head_dim_v));
        CHECK(rows_at(&a->w[W_ATTN_SINKS], &b->w[W_ATTN_SINKS], q->head0 * group));
        CHECK(out_proj_ok(&a->w[W_ATTN_OUT], &b->w[W_ATTN_OUT], q->head0 * dv, q->head, &out_cols));
        CHECK(p->heads_whole == (b->w[W_ATTN_OUT].ne[0] == a->w[W_ATTN_OUT].ne[0] && p->n_part > 1));
        CHECK((b->w[W_ATTN_OUT_BIAS].data != NULL) == (q->head && a->w[W_ATTN_OUT_BIAS].data != NULL));
        const int64_t f0 = b->w[W_SHEXP_UP].data != NULL ? (b->w[W_SHEXP_UP].data - a->w[W_SHEXP_UP].data) /
                                                             (int64_t)a->w[W_SHEXP_UP].row_bytes : 0;
        CHECK(out_proj_ok(&a->w[W_SHEXP_DOWN], &b->w[W_SHEXP_DOWN], f0, q->head, &shexp_cols));
        CHECK(rows_at(&a->w[W_SHEXP_GATE], &b->w[W_SHEXP_GATE], f0));
        CHECK(b->w[W_MOE_DOWN].data == a->w[W_MOE_DOWN].data + (size_t)q->exp0 * a->w[W_MOE_DOWN].mat_bytes);
        if (a->w[W_MOE_GATE].data != NULL) /* deepseek2's leading layers are dense */
            CHECK_EQ_INT(b->w[W_MOE_GATE].ne[2], q->exp1 - q->exp0);
        const wtensor *bias = &b->w[W_MOE_DOWN_BIAS];
        for (int e = 0; bias->data != NULL && e < (int)hp->n_expert; e++) {
            const bool own = e >= q->exp0 && e < q->exp1;
            const uint8_t *row = bias->data + (size_t)e * bias->row_bytes;
            const float *orig = wt_f32(&a->w[W_MOE_DOWN_BIAS]) + (size_t)e * hp->n_embd;
            bool zero = true, same = memcmp(row, orig, bias->row_bytes) == 0;
            for (uint32_t d = 0; d < hp->n_embd; d++)
                zero &= ((const float *)row)[d] == 0.0f;
            CHECK(own ? same : zero);
        }
    }
    CHECK((v.w.global[W_OUTPUT].data != NULL) == (q->head && w->global[W_OUTPUT].data != NULL));
    CHECK(v.w.global[W_TOKEN_EMBD].data == w->global[W_TOKEN_EMBD].data);
    s->kv += p->heads_whole ? 0 : q->head1 - q->head0;
    s->q_rows += p->heads_whole ? 0 : q_rows_of(&v.layer[0])->ne[1];
    s->out_cols += out_cols; /* the last layer's; every layer is cut alike */
    s->shexp += shexp_cols;
    s->experts += v.exp1 - v.exp0;
    split_view_free(&v);
}

/* Every part of plans with equal and uneven -ts and either main GPU;
 * heads_whole: the attention output has fewer whole blocks (in KV heads)
 * than parts, so the plan must leave attention unsplit. */
static void check_model(test_ctx *t_, const char *name, bool heads_whole)
{
    loaded ld;
    CHECK_OK(load(name, &ld));
    static const float equal[2] = {1, 1}, uneven[2] = {3, 1};
    const float *ts[2] = {equal, uneven};
    for (int k = 0; k < 2; k++)
        for (int main_gpu = 0; main_gpu < 2; main_gpu++) {
            split_plan p;
            CHECK_OK(plan_of(&ld.w, ts[k], main_gpu, &p));
            CHECK_EQ_INT(p.n_part, 2);
            CHECK(p.heads_whole == heads_whole);
            sums s = {0};
            for (int i = 0; i < p.n_part; i++)
                check_part(t_, &ld.w, &p, i, &s);
            if (t_->result == TEST_FAIL) { /* keep the part's message (the last failure is the one shown) */
                unload(&ld);
                return;
            }
            const wtensor *shexp = &ld.w.layer[ld.w.hp.n_layer - 1].w[W_SHEXP_DOWN]; /* check_part's last layer */
            CHECK_EQ_INT(s.kv, (heads_whole ? 0 : ld.w.arch->attention != NULL ? ld.w.hp.n_head : ld.w.hp.n_head_kv));
            CHECK_EQ_INT(s.q_rows, heads_whole ? 0 : q_rows_of(&ld.w.layer[0])->ne[1]);
            CHECK_EQ_INT(s.out_cols, ld.w.layer[0].w[W_ATTN_OUT].ne[0]);
            CHECK_EQ_INT(s.shexp, shexp->data != NULL ? shexp->ne[0] : 0);
            CHECK_EQ_INT(s.experts, ld.w.hp.n_expert);
        }
    unload(&ld);
}

/* One shared model's parts; heads_whole: its attention must stay unsplit. */
#define VIEW_TEST(id, file, heads_whole)                                                                       \
    TEST(split_view_##id)                                                                                      \
    {                                                                                                          \
        REQUIRE_SHARED();                                                                                      \
        check_model(TEST_CTX, file, heads_whole);                                                              \
    }

/* Q5_K attention output, 4 heads x 64 = one 256-value block per row: no
 * cut on a block boundary for 2 parts, so attention is unsplit (the main
 * part's output, zero blocks on the other). */
VIEW_TEST(qwen3moe_kq_q4_k_m, "qwen3moe-kq-q4_k_m", true)
/* Q/K/V biases and a shared expert with its gate. */
VIEW_TEST(qwen2moe_tiny_q8_0, "qwen2moe-tiny-q8_0", false)
/* Sinks, the output bias, per-expert biases, MXFP4 experts. */
VIEW_TEST(gptoss_tiny_mxfp4, "gptoss-tiny-mxfp4", false)
VIEW_TEST(mixtral_tiny_q4_0, "mixtral-tiny-q4_0", false)
VIEW_TEST(qwen3moe_tiny_q8_0, "qwen3moe-tiny-q8_0", false)
/* Latent attention by query heads: 4 heads x 32 output columns, one Q8_0
 * block each; the shared expert (32 columns, one block) unsplit. */
VIEW_TEST(deepseek2_tiny_q8_0, "deepseek2-tiny-q8_0", false)
VIEW_TEST(deepseek2_tiny_f32, "deepseek2-tiny-f32", false)

/* Every shared model, 2 to 4
 * parts with equal and skewed shares: no part's output projection slice
 * cuts a quant block or changes type (out_proj_ok), whatever the shares. */
TEST(split_view_no_slice_cuts_a_block)
{
    REQUIRE_SHARED();
    static const char *const models[] = {"qwen3moe-kq-q4_k_m", "qwen3moe-kq-iq2_xxs", "qwen3moe-kq-iq3_xxs",
                                         "qwen3moe-kq-iq4_xs", "qwen3moe-tiny-q8_0", "qwen3moe-tiny-f32",
                                         "mixtral-tiny-q4_0", "mixtral-tiny-f16", "qwen2moe-tiny-q8_0",
                                         "gptoss-tiny-mxfp4", "deepseek2-tiny-q8_0", "deepseek2-tiny-f32"};
    static const float shares[][4] = {{1, 1, 0, 0}, {1, 3, 0, 0}, {1, 1, 1, 0}, {5, 1, 1, 0}, {1, 1, 1, 1}};
    const uint64_t avail[4] = {1ull << 40, 1ull << 40, 1ull << 40, 1ull << 40};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        loaded ld;
        CHECK_OK(load(models[k], &ld));
        split_model m;
        uint64_t *lb = NULL;
        CHECK_OK(split_model_of(&m, &lb, &ld.w, 256, 64, QT_F16, false));
        for (size_t c = 0; c < sizeof shares / sizeof shares[0]; c++) {
            const split_request r = {.mode = SPLIT_TENSOR, .n_dev = 4, .avail = avail, .ratios = shares[c]};
            split_plan p;
            CHECK_OK(split_plan_make(&p, &m, &r));
            for (int i = 0; i < p.n_part; i++) {
                split_view v;
                CHECK_OK(split_view_make(&v, &ld.w, &p, i, false));
                int64_t cols = 0;
                for (uint32_t l = 0; l < ld.w.hp.n_layer; l++) {
                    static const arch_role outs[] = {W_ATTN_OUT, W_FFN_DOWN, W_SHEXP_DOWN};
                    const int64_t at[] = {p.part[i].head0 * head_group(&ld.w) * ld.w.hp.head_dim_v,
                                          v.layer[l].w[W_FFN_UP].data == NULL ? 0 :
                                          (v.layer[l].w[W_FFN_UP].data - ld.w.layer[l].w[W_FFN_UP].data) /
                                              (int64_t)ld.w.layer[l].w[W_FFN_UP].row_bytes,
                                          v.layer[l].w[W_SHEXP_UP].data == NULL ? 0 :
                                          (v.layer[l].w[W_SHEXP_UP].data - ld.w.layer[l].w[W_SHEXP_UP].data) /
                                              (int64_t)ld.w.layer[l].w[W_SHEXP_UP].row_bytes};
                    for (size_t o = 0; o < sizeof outs / sizeof outs[0]; o++)
                        if (!out_proj_ok(&ld.w.layer[l].w[outs[o]], &v.layer[l].w[outs[o]], at[o], p.part[i].head,
                                         &cols))
                            FAIL("%s, -ts %g,%g,%g,%g, part %d, layer %u: %s is not whole blocks of the model's",
                                 models[k], shares[c][0], shares[c][1], shares[c][2], shares[c][3], i, l,
                                 arch_tensor_specs[outs[o]].name);
                }
                split_view_free(&v);
            }
        }
        free(lb);
        unload(&ld);
    }
}

/* all_experts (the hybrid slab of a tensor split): the routed stacks and
 * the per-expert bias stay the model's, the attention is still the part's. */
TEST(split_view_all_experts_gptoss_tiny_mxfp4)
{
    REQUIRE_SHARED();
    loaded ld;
    CHECK_OK(load("gptoss-tiny-mxfp4", &ld));
    split_plan p;
    CHECK_OK(plan_of(&ld.w, (const float[]){3, 1}, 1, &p));
    for (int i = 0; i < p.n_part; i++) {
        split_view v;
        CHECK_OK(split_view_make(&v, &ld.w, &p, i, true));
        for (uint32_t l = 0; l < ld.w.hp.n_layer; l++) {
            static const arch_role whole[] = {W_MOE_GATE, W_MOE_UP, W_MOE_DOWN, W_MOE_DOWN_BIAS};
            for (size_t r = 0; r < sizeof whole / sizeof whole[0]; r++) {
                CHECK(v.layer[l].w[whole[r]].data == ld.w.layer[l].w[whole[r]].data);
                CHECK_EQ_INT(v.layer[l].w[whole[r]].ne[2], ld.w.layer[l].w[whole[r]].ne[2]);
            }
            CHECK_EQ_INT(v.layer[l].w[W_ATTN_K].ne[1],
                         (p.part[i].head1 - p.part[i].head0) * (int64_t)ld.w.hp.head_dim_k);
        }
        split_view_free(&v);
    }
    unload(&ld);
}

/* Latent attention's plan: query heads as the head units (one latent KV
 * head), and what every part holds whole whatever the cut (q_a, kv_a_mqa,
 * their norms, the latent cache) counted in full on each part's need. */
TEST(split_model_latent_heads_and_replicated_bytes)
{
    REQUIRE_SHARED();
    loaded ld;
    CHECK_OK(load("deepseek2-tiny-q8_0", &ld));
    split_model m;
    uint64_t *lb = NULL;
    CHECK_OK(split_model_of(&m, &lb, &ld.w, 256, 64, QT_F16, false));
    CHECK_EQ_INT(m.n_head_kv, ld.w.hp.n_head);
    CHECK_EQ_INT(m.head_granule, 1); /* 32 output columns a head, one Q8_0 block */
    uint64_t latent = 0;
    for (uint32_t l = 0; l < ld.w.hp.n_layer; l++) {
        static const arch_role roles[] = {W_ATTN_Q_A, W_ATTN_Q_A_NORM, W_ATTN_KV_A_MQA, W_ATTN_KV_A_NORM};
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++)
            latent += ld.w.layer[l].w[roles[r]].mat_bytes;
        latent += 256ull * (ld.w.hp.kv_lora_rank + ld.w.hp.n_rot) * 2; /* F16 cache rows */
    }
    CHECK_EQ_U64(m.replicated_bytes, latent);
    CHECK(m.attn_bytes > m.replicated_bytes);
    const uint64_t avail[2] = {1ull << 40, 1ull << 40};
    const split_request r = {.mode = SPLIT_TENSOR, .n_dev = 2, .avail = avail, .ratios = (const float[]){3, 1}};
    split_plan p;
    CHECK_OK(split_plan_make(&p, &m, &r));
    CHECK(!p.heads_whole);
    uint64_t layers = 0;
    for (int l = 0; l < m.n_layer; l++)
        layers += lb[l];
    const uint64_t cut = (uint64_t)(0.25 * (double)(layers - latent - (p.ff_whole ? m.ffn_bytes : 0)));
    CHECK_EQ_U64(p.part[1].need - m.scratch_bytes - m.embed_bytes, cut + latent + (p.ff_whole ? m.ffn_bytes : 0));
    free(lb);
    unload(&ld);
}

/* Uneven -ts: every part keeps at least one unit of each cut, the rest
 * follows the ratios; fewer KV heads (in whole-block granules) than
 * devices: attention unsplit, every part all heads, the FFN still cut. */
TEST(split_tensor_min_one_unit_and_too_few_heads)
{
    int64_t b[4];
    const double w31[2] = {3, 1}, w100[3] = {100, 1, 1};
    split_shares_min1(2, 1, w31, 2, b);
    CHECK_EQ_INT(b[1], 1); /* plain shares would give the 1/4 part no head */
    split_shares_min1(768, 256, w100, 3, b);
    CHECK_EQ_INT(b[1], 256);
    CHECK_EQ_INT(b[2], 512);
    CHECK_EQ_INT(b[3], 768);
    split_shares_min1(96, 32, w31, 2, b); /* 3 blocks: 2 + 1 */
    CHECK_EQ_INT(b[1], 64);
    uint64_t lb[4] = {1, 1, 1, 1};
    const split_model m = {.n_layer = 4, .layer_bytes = lb, .n_head_kv = 2, .n_ff = 512, .ff_granule = 32,
                           .n_expert = 8};
    const uint64_t avail[3] = {1ull << 40, 1ull << 40, 1ull << 40};
    split_plan p;
    const split_request three = {.mode = SPLIT_TENSOR, .n_dev = 3, .avail = avail, .main_gpu = 0};
    CHECK_OK(split_plan_make(&p, &m, &three));
    CHECK(p.heads_whole && !p.ff_whole);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(p.part[i].head0, 0);
        CHECK_EQ_INT(p.part[i].head1, 2);
        CHECK(p.part[i].ff0 % 32 == 0 && p.part[i].ff1 % 32 == 0 && p.part[i].ff1 > p.part[i].ff0);
        CHECK_EQ_INT(p.part[i].ff0, i == 0 ? 0 : p.part[i - 1].ff1);
    }
    CHECK_EQ_INT(p.part[2].ff1, 512);
    split_model grouped = m; /* 8 KV heads whose output columns make a block every 2 heads */
    grouped.n_head_kv = 8;
    grouped.head_granule = 2;
    CHECK_OK(split_plan_make(&p, &grouped, &three));
    CHECK(!p.heads_whole);
    for (int i = 0; i < 3; i++)
        CHECK(p.part[i].head0 % 2 == 0 && p.part[i].head1 % 2 == 0 && p.part[i].head1 > p.part[i].head0);
    grouped.head_granule = 4; /* 2 granules for 3 devices */
    grouped.ff_granule = 256; /* 2 blocks for 3 devices */
    CHECK_OK(split_plan_make(&p, &grouped, &three));
    CHECK(p.heads_whole && p.ff_whole);
    const float ts[3] = {1, 0, 1}; /* a zero share takes no part */
    const split_request two = {.mode = SPLIT_TENSOR, .n_dev = 3, .avail = avail, .ratios = ts, .main_gpu = 2};
    CHECK_OK(split_plan_make(&p, &m, &two));
    CHECK_EQ_INT(p.n_part, 2);
    CHECK_EQ_INT(p.part[1].device, 2);
    CHECK(p.part[1].head && !p.part[0].head);
    const float no_main[3] = {1, 1, 0};
    const split_request bad = {.mode = SPLIT_TENSOR, .n_dev = 3, .avail = avail, .ratios = no_main, .main_gpu = 2};
    CHECK_EQ_INT(split_plan_make(&p, &m, &bad), HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(hydra_last_error(), "-sm tensor: the main GPU 2") != NULL);
}

TEST(split_tensor_cannot_fit_names_the_numbers)
{
    uint64_t lb[8];
    for (int l = 0; l < 8; l++)
        lb[l] = 1ull << 30;
    const split_model m = {.n_layer = 8, .layer_bytes = lb, .embed_bytes = 1ull << 29, .head_bytes = 1ull << 29,
                           .n_head_kv = 4, .n_ff = 6144, .ff_granule = 256, .n_expert = 128};
    const uint64_t avail[2] = {8ull << 30, 4ull << 30};
    const float ts[2] = {1, 1};
    split_plan p;
    const split_request r = {.mode = SPLIT_TENSOR, .n_dev = 2, .avail = avail, .ratios = ts, .main_gpu = 0};
    CHECK_EQ_INT(split_plan_make(&p, &m, &r), HYDRA_ERR_RANGE);
    /* each part: half of 8 GiB of layers plus the embedding; the head on 0 */
    const char *msg = hydra_last_error();
    CHECK(strstr(msg, "-sm tensor: device 1 needs 4.50 GiB") != NULL);
    CHECK(strstr(msg, "KV heads 2-3") != NULL);
    CHECK(strstr(msg, "experts 64-127") != NULL);
    CHECK(strstr(msg, "has 4.00 GiB") != NULL);
}

/* An unsplit attention is on every part whole: its bytes (weights and KV
 * cache) count in full on each part's need, the rest by share. */
TEST(split_tensor_unsplit_attention_counts_whole)
{
    uint64_t lb[8];
    for (int l = 0; l < 8; l++)
        lb[l] = 1ull << 30;
    const split_model m = {.n_layer = 8, .layer_bytes = lb, .n_head_kv = 2, .head_granule = 2, .n_ff = 6144,
                           .ff_granule = 256, .n_expert = 128, .attn_bytes = 2ull << 30};
    const uint64_t avail[2] = {8ull << 30, 4ull << 30};
    const float ts[2] = {1, 1};
    split_plan p;
    const split_request r = {.mode = SPLIT_TENSOR, .n_dev = 2, .avail = avail, .ratios = ts, .main_gpu = 0};
    CHECK_EQ_INT(split_plan_make(&p, &m, &r), HYDRA_ERR_RANGE);
    CHECK(p.heads_whole && !p.ff_whole);
    /* half of the 6 GiB that split, plus the 2 GiB of attention whole */
    CHECK(strstr(hydra_last_error(), "-sm tensor: device 1 needs 5.00 GiB") != NULL);
    CHECK(strstr(hydra_last_error(), "KV heads 0-1") != NULL);
}
