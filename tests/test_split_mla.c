/*
 * test_split_mla.c — -sm tensor on deepseek2 without a GPU: a simulated
 * tensor split of the CPU forward over the parts' model views
 * (split_view.c), the same partial sums the CUDA parts compute
 * (gpu_tensor.c), summed in part order where the GPUs all-reduce:
 *
 *   each layer: every part norms the full x; latent attention over its
 *   query heads (model/mla.c's hook on the view: its q_b rows, k_b / v_b
 *   heads and attention output columns, the latent computed whole and
 *   cached in the part's own cache); x += sum of the parts' outputs; then
 *   the FFN: the dense layer's columns, the routed experts the part owns
 *   (the others' routes dropped, as their zero matrices add 0 on a GPU),
 *   the shared expert (one Q8_0 block wide: whole on the main part, zero
 *   blocks elsewhere); x += the sum; the head on the main part.
 *
 * The 200-token prompt in one batch then 32 greedy decode steps, with
 * 2 parts (equal, -ts 3,1 -mg 1), 4, and 2 with attention unsplit (whole
 * on both, its output projection zero blocks off the main part): the logits reach llama.cpp's KL
 * and top-1 bars (../shared/ref, tolerances.json) and the unsplit CPU
 * session's, and the greedy ids equal the unsplit session's and match
 * llama.cpp's for min_greedy_match.
 */
#include "test.h"
#include "util.h"

#include "forward.h"
#include "quant.h"
#include "refcheck.h"
#include "split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SIM_CTX = 256, SIM_THREADS = 2 };

typedef struct sim_part {
    split_view v;
    fwd_scratch f;
    kv_cache kv;
} sim_part;

typedef struct sim {
    const model_weights *w;
    split_plan plan;
    thread_pool *pool;
    sim_part part[SPLIT_MAX_DEV];
    float *x; /* REF_PROMPT x n_embd: the residual stream every part shares after a sum */
} sim;

static void sim_close(sim *s)
{
    for (int i = 0; i < s->plan.n_part; i++) {
        kv_free(&s->part[i].kv);
        fwd_free(&s->part[i].f);
        split_view_free(&s->part[i].v);
    }
    pool_destroy(s->pool);
    free(s->x);
    memset(s, 0, sizeof *s);
}

/* head_granule > 0 replaces the model's (split_col_granule): more heads
 * per whole block run than the model has leaves attention unsplit. */
static hydra_status sim_open(sim *s, const model_weights *w, const float *ts, int n_dev, int main_gpu,
                             int head_granule)
{
    memset(s, 0, sizeof *s);
    s->w = w;
    split_model m;
    uint64_t *lb = NULL;
    uint64_t avail[SPLIT_MAX_DEV];
    for (int d = 0; d < SPLIT_MAX_DEV; d++)
        avail[d] = 1ull << 40; /* the fit is split.c's tests' business */
    hydra_status st = split_model_of(&m, &lb, w, SIM_CTX, REF_PROMPT, QT_F16, false);
    m.head_granule = head_granule > 0 ? head_granule : m.head_granule;
    const split_request r = {.mode = SPLIT_TENSOR, .n_dev = n_dev, .avail = avail, .ratios = ts, .main_gpu = main_gpu};
    if (st == HYDRA_OK)
        st = split_plan_make(&s->plan, &m, &r);
    free(lb);
    if (st == HYDRA_OK)
        st = pool_create(&s->pool, SIM_THREADS);
    s->x = malloc(sizeof(float) * REF_PROMPT * w->hp.n_embd);
    if (st == HYDRA_OK && s->x == NULL)
        st = HYDRA_ERR_NOMEM;
    for (int i = 0; i < s->plan.n_part && st == HYDRA_OK; i++) {
        sim_part *p = &s->part[i];
        st = split_view_make(&p->v, w, &s->plan, i, false);
        if (st == HYDRA_OK)
            st = fwd_init(&p->f, &p->v.w, REF_PROMPT, SIM_CTX, SIM_THREADS);
        if (st == HYDRA_OK)
            st = kv_init(&p->kv, &p->v.w, QT_F16, SIM_CTX, REF_PROMPT);
    }
    if (st != HYDRA_OK)
        sim_close(s);
    return st;
}

/* Every part's xn: the rows of x normed by gain (each part norms the full
 * x, as on the GPUs). */
static void norm_rows(sim *s, const wtensor *gain, int64_t n)
{
    const int64_t embd = s->w->hp.n_embd;
    for (int i = 0; i < s->plan.n_part; i++)
        for (int64_t t = 0; t < n; t++)
            op_rmsnorm(s->part[i].f.xn + t * embd, s->x + t * embd, wt_f32(gain), embd, s->w->hp.norm_eps);
}

/* The all-reduce: x += every part's partial, in part order. */
static void reduce(sim *s, int64_t n)
{
    const int64_t count = n * s->w->hp.n_embd;
    for (int i = 0; i < s->plan.n_part; i++)
        for (int64_t k = 0; k < count; k++)
            s->x[k] += s->part[i].f.sub[k];
}

/* A part's FFN partial into its sub: its columns of a dense FFN, else its
 * routed experts and its share of the shared expert. */
static void part_ffn(sim *s, int i, int l, int64_t n)
{
    sim_part *p = &s->part[i];
    fwd_scratch *f = &p->f;
    const layer_weights *lw = &p->v.layer[l];
    const size_t embd = s->w->hp.n_embd;
    act_bind(&f->xn_act, f->xn, n);
    memset(f->sub, 0, sizeof(float) * (size_t)n * embd);
    if (!lw->moe) {
        ffn_swiglu(s->pool, &f->moe, &lw->w[W_FFN_GATE], &lw->w[W_FFN_UP], &lw->w[W_FFN_DOWN], &f->xn_act, NULL,
                   f->sub, embd);
        return;
    }
    const moe_gating g = moe_gating_of(&p->v.w, lw);
    moe_router(s->pool, lw, &f->xn_act, f->router);
    moe_select(&g, &f->moe, f->router, n, f->routes);
    int64_t kept = 0; /* the part's experts, numbered within its stacks */
    for (int64_t r = 0; r < n * g.n_used; r++)
        if (f->routes[r].expert >= p->v.exp0 && f->routes[r].expert < p->v.exp1)
            f->routes[kept++] = (moe_route){.token = f->routes[r].token, .expert = f->routes[r].expert - p->v.exp0,
                                            .weight = f->routes[r].weight};
    moe_experts(s->pool, &f->moe, lw, &f->xn_act, f->routes, kept, f->sub, embd);
    moe_shared(s->pool, &f->moe, lw, &f->xn_act, f->shexp_gate, f->sub, embd);
}

/* n tokens at pos0 ..; logits of every row (n x n_vocab) from the main part. */
static void sim_step(sim *s, int64_t pos0, const int32_t *tokens, int64_t n, float *logits)
{
    const arch_hparams *hp = &s->w->hp;
    const wtensor *embd_t = &s->w->global[W_TOKEN_EMBD];
    for (int64_t t = 0; t < n; t++)
        quant_traits_of(embd_t->type)->to_float(embd_t->data + (size_t)tokens[t] * embd_t->row_bytes,
                                                s->x + t * hp->n_embd, hp->n_embd);
    for (int i = 0; i < s->plan.n_part; i++)
        for (int64_t t = 0; t < n; t++)
            op_rope_cache_ext(s->part[i].f.rope + t * hp->n_rot, pos0 + t, &hp->rope);
    for (int l = 0; l < (int)hp->n_layer; l++) {
        norm_rows(s, &s->w->layer[l].w[W_ATTN_NORM], n);
        for (int i = 0; i < s->plan.n_part; i++) {
            sim_part *p = &s->part[i];
            const fwd_layer c = {.w = &p->v.w, .layer = l, .pool = s->pool, .kv = &p->kv, .f = &p->f, .pos0 = pos0,
                                 .n = n};
            p->v.w.arch->attention->run(&c);
        }
        reduce(s, n);
        norm_rows(s, &s->w->layer[l].w[W_FFN_NORM], n);
        for (int i = 0; i < s->plan.n_part; i++)
            part_ffn(s, i, l, n);
        reduce(s, n);
    }
    for (int i = 0; i < s->plan.n_part; i++)
        if (s->plan.part[i].head) {
            fwd_scratch *f = &s->part[i].f;
            for (int64_t t = 0; t < n; t++)
                op_rmsnorm(f->xn + t * hp->n_embd, s->x + t * hp->n_embd,
                           wt_f32(&s->part[i].v.w.global[W_OUTPUT_NORM]), hp->n_embd, hp->norm_eps);
            act_bind(&f->xn_act, f->xn, n);
            fwd_project(s->pool, &s->part[i].v.w.global[W_OUTPUT], NULL, &f->xn_act, logits);
        }
}

/* The prompt in one batch (its rows into batch), then REF_GREEDY greedy
 * ids, each decoded as one step (as test_cuda_multi.c's run). */
typedef struct sim_out {
    float *batch;
    int32_t greedy[REF_GREEDY];
} sim_out;

static void sim_run(sim *s, const ref_case *r, sim_out *o, float *row)
{
    sim_step(s, 0, r->prompt, REF_PROMPT, o->batch);
    const float *last = o->batch + (size_t)(REF_PROMPT - 1) * (size_t)r->n_vocab;
    for (int i = 0; i < REF_GREEDY; i++) {
        o->greedy[i] = ref_argmax(last, r->n_vocab);
        sim_step(s, REF_PROMPT + i, &o->greedy[i], 1, row);
        last = row;
    }
}

/* The unsplit CPU session: the same batch, greedy ids and decode steps. */
static hydra_status unsplit_run(const hydra_model *m, const ref_case *r, sim_out *o)
{
    hydra_session *s = NULL;
    hydra_status st = util_new_session(m, SIM_CTX, REF_PROMPT, SIM_THREADS, &s);
    if (st == HYDRA_OK)
        st = ref_run_greedy(s, r, o->batch, o->greedy);
    hydra_session_free(s);
    return st;
}

typedef struct sim_cfg {
    float ts[4];
    int n_dev, main_gpu;
    int head_granule; /* 0: the model's */
    const char *desc;
} sim_cfg;

/* One configuration against the reference and the unsplit run. */
static void check_cfg(test_ctx *t_, const char *name, const model_weights *w, const ref_case *r, const float *ref,
                      const sim_out *one, const sim_cfg *c)
{
    sim s;
    CHECK_OK(sim_open(&s, w, c->ts, c->n_dev, c->main_gpu, c->head_granule));
    CHECK_EQ_INT(s.plan.n_part, c->n_dev);
    CHECK(s.plan.heads_whole == (c->head_granule > (int)w->hp.n_head));
    sim_out two = {malloc(sizeof(float) * REF_PROMPT * (size_t)r->n_vocab), {0}};
    float *row = malloc(sizeof(float) * (size_t)r->n_vocab);
    if (two.batch == NULL || row == NULL) {
        free(two.batch);
        free(row);
        sim_close(&s);
        FAIL("out of memory");
    }
    sim_run(&s, r, &two, row);
    sim_close(&s);
    const ref_score vs_ref = ref_score_rows(ref, two.batch, REF_PROMPT, r->n_vocab);
    const ref_score vs_one = ref_score_rows(one->batch, two.batch, REF_PROMPT, r->n_vocab);
    free(two.batch);
    free(row);
    const int same = ref_same_prefix(one->greedy, two.greedy, REF_GREEDY);
    const int as_ref = ref_same_prefix(r->greedy, two.greedy, REF_GREEDY);
    printf("  %-20s %-28s KL %.2e top1 %.3f | vs unsplit KL %.2e | greedy same as unsplit %d/%d, as llama.cpp %d "
           "(bar %d)\n", name, c->desc, vs_ref.kl, vs_ref.top1, vs_one.kl, same, REF_GREEDY, as_ref,
           r->min_greedy_match);
    CHECK(ref_passes(r, vs_ref));
    CHECK(ref_passes(r, vs_one));
    CHECK_EQ_INT(same, REF_GREEDY);
    CHECK(as_ref >= r->min_greedy_match);
}

static void check_model(test_ctx *t_, const char *name)
{
    REQUIRE_SHARED();
    ref_case r;
    float *ref = NULL;
    char why[600];
    if (!ref_load_with_logits(name, &r, &ref, why, sizeof why))
        FAIL("%s", why);
    hydra_model *m = NULL;
    model_weights w = {0};
    sim_out one = {malloc(sizeof(float) * REF_PROMPT * (size_t)r.n_vocab), {0}};
    hydra_status st = one.batch != NULL ? util_open_shared_model(name, &m) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = weights_bind(&w, m);
    if (st == HYDRA_OK)
        st = unsplit_run(m, &r, &one);
    static const sim_cfg cfgs[] = {
        {{1, 1}, 2, 0, 0, "2 parts"},
        {{3, 1}, 2, 1, 0, "2 parts -ts 3,1 -mg 1"},
        {{1, 1, 1, 1}, 4, 2, 0, "4 parts -mg 2"},
        /* as a Q4_K attention output of 128-value heads would be cut */
        {{1, 1}, 2, 1, 8, "2 parts, attention unsplit"},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0] && st == HYDRA_OK; i++) {
        check_cfg(t_, name, &w, &r, ref, &one, &cfgs[i]);
        if (t_->result == TEST_FAIL)
            break;
    }
    weights_free(&w);
    hydra_model_close(m);
    free(ref);
    free(one.batch);
    CHECK_OK(st);
}

TEST(split_mla_sim_deepseek2_tiny_q8_0)
{
    check_model(TEST_CTX, "deepseek2-tiny-q8_0");
}

TEST(split_mla_sim_deepseek2_tiny_f32)
{
    check_model(TEST_CTX, "deepseek2-tiny-f32");
}
