/*
 * The MoE steps (src/moe.h) on their own: gating and top-k on crafted
 * logits (ties, renormalisation, scale, sigmoid), and the expert
 * computation against a double-precision re-computation from dequantised
 * weights — over all routes (grouped by expert), over one token's routes
 * (the decode path), over a split of them (the hybrid's partial sums), and
 * with the routes in another order.
 */
#include "hydra.h"
#include "moe.h"
#include "quant.h"
#include "test.h"
#include "threads.h"
#include "weights.h"

#include <math.h>
#include <stdlib.h>

static moe_scratch scratch_for(int n_expert)
{
    moe_scratch s = {0};
    s.n_expert = n_expert;
    s.probs = malloc(sizeof(float) * (size_t)n_expert);
    s.chosen = malloc((size_t)n_expert);
    return s;
}

TEST(engine_moe_topk_breaks_ties_to_the_lower_expert)
{
    const float logits[8] = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f, 1.0f, 2.0f, 0.0f};
    moe_scratch s = scratch_for(8);
    CHECK(s.probs && s.chosen);
    moe_route r[4];
    const moe_gating g = {.func = GATING_SOFTMAX, .n_expert = 8, .n_used = 4, .renorm = false, .scale = 1.0f};
    moe_select(&g, &s, logits, 1, r);
    free(s.probs);
    free(s.chosen);
    /* 2.0 at experts 1, 3, 6; then 1.0 at 2 and 5: the lower id first */
    CHECK_EQ_INT(r[0].expert, 1);
    CHECK_EQ_INT(r[1].expert, 3);
    CHECK_EQ_INT(r[2].expert, 6);
    CHECK_EQ_INT(r[3].expert, 2);
    for (int k = 0; k < 4; k++)
        CHECK_EQ_INT(r[k].token, 0);
}

TEST(engine_moe_weights_renormalised_scaled_or_sigmoid)
{
    const float logits[2][4] = {{1.0f, 3.0f, 0.0f, 2.0f}, {0.0f, 0.0f, 4.0f, -2.0f}};
    double z[2] = {0, 0};
    for (int t = 0; t < 2; t++)
        for (int e = 0; e < 4; e++)
            z[t] += exp(logits[t][e]);
    moe_scratch s = scratch_for(4);
    CHECK(s.probs && s.chosen);
    moe_route r[4];
    moe_gating g = {.func = GATING_SOFTMAX, .n_expert = 4, .n_used = 2, .renorm = false, .scale = 1.0f};
    moe_select(&g, &s, &logits[0][0], 2, r);
    /* token 0: experts 1 and 3 with their softmax probabilities */
    bool plain = r[0].expert == 1 && r[1].expert == 3 && fabs(r[0].weight - exp(3) / z[0]) < 1e-6 &&
                 fabs(r[1].weight - exp(2) / z[0]) < 1e-6 && r[2].token == 1 && r[2].expert == 2;
    g.renorm = true;
    g.scale = 2.5f;
    moe_select(&g, &s, &logits[0][0], 2, r);
    double p1 = exp(3) / (exp(3) + exp(2));
    bool renormed = fabs(r[0].weight - 2.5 * p1) < 1e-6 && fabs(r[1].weight - 2.5 * (1 - p1)) < 1e-6;
    g = (moe_gating){.func = GATING_SIGMOID, .n_expert = 4, .n_used = 2, .renorm = false, .scale = 1.0f};
    moe_select(&g, &s, &logits[0][0], 2, r);
    bool sigmoid = fabs(r[0].weight - 1 / (1 + exp(-3.0))) < 1e-6 && fabs(r[1].weight - 1 / (1 + exp(-2.0))) < 1e-6;
    free(s.probs);
    free(s.chosen);
    CHECK(plain);
    CHECK(renormed);
    CHECK(sigmoid);
}

/* --- the expert computation on a real layer */

enum { N_TOK = 5 };

typedef struct moe_fixture {
    hydra_model *m;
    model_weights w;
    thread_pool *pool;
    moe_scratch s;
    act_set x_act;
    float x[N_TOK * 64];
    float logits[N_TOK * 8];
    moe_route routes[N_TOK * 2];
} moe_fixture;

static void fixture_free(moe_fixture *f)
{
    act_free(&f->x_act);
    moe_scratch_free(&f->s);
    pool_destroy(f->pool);
    weights_free(&f->w);
    hydra_model_close(f->m);
}

static hydra_status fixture_init(moe_fixture *f)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/qwen3moe-tiny-f32.gguf", test_shared_dir());
    hydra_model_params p = hydra_model_default_params();
    p.path = path;
    hydra_status st = hydra_model_open(&f->m, &p);
    if (st == HYDRA_OK)
        st = weights_bind(&f->w, f->m);
    if (st == HYDRA_OK)
        st = pool_create(&f->pool, 2);
    if (st == HYDRA_OK)
        st = moe_scratch_init(&f->s, &f->w, N_TOK);
    if (st == HYDRA_OK)
        st = act_init(&f->x_act, &f->w, 64, N_TOK);
    if (st != HYDRA_OK)
        return st;
    unsigned seed = 12345;
    for (int i = 0; i < N_TOK * 64; i++) {
        seed = seed * 1664525u + 1013904223u;
        f->x[i] = (float)((seed >> 8) / 8388608.0 - 1.0);
    }
    act_bind(&f->x_act, f->x, N_TOK);
    const moe_gating g = moe_gating_of(&f->w, &f->w.layer[0]);
    moe_router(f->pool, &f->w.layer[0], &f->x_act, f->logits);
    moe_select(&g, &f->s, f->logits, N_TOK, f->routes);
    return HYDRA_OK;
}

/* out += weight * down(silu(gate x) * up x) for each route, in double from
 * the dequantised F32 expert matrices. */
static void reference_experts(const layer_weights *lw, const float *x, const moe_route *routes, int n, double *out)
{
    const wtensor *g = &lw->w[W_MOE_GATE], *u = &lw->w[W_MOE_UP], *d = &lw->w[W_MOE_DOWN];
    const int64_t embd = g->ne[0], ff = g->ne[1];
    double h[64];
    for (int i = 0; i < n; i++) {
        const moe_route *r = &routes[i];
        const float *gw = (const float *)(g->data + (size_t)r->expert * g->mat_bytes);
        const float *uw = (const float *)(u->data + (size_t)r->expert * u->mat_bytes);
        const float *dw = (const float *)(d->data + (size_t)r->expert * d->mat_bytes);
        const float *xt = x + r->token * embd;
        for (int64_t j = 0; j < ff; j++) {
            double a = 0, b = 0;
            for (int64_t k = 0; k < embd; k++) {
                a += (double)gw[j * embd + k] * xt[k];
                b += (double)uw[j * embd + k] * xt[k];
            }
            h[j] = a / (1 + exp(-a)) * b;
        }
        for (int64_t j = 0; j < embd; j++) {
            double y = 0;
            for (int64_t k = 0; k < ff; k++)
                y += (double)dw[j * ff + k] * h[k];
            out[r->token * embd + j] += r->weight * y;
        }
    }
}

TEST(engine_moe_experts_match_double_reference_over_any_split_of_routes)
{
    REQUIRE_SHARED();
    moe_fixture *f = calloc(1, sizeof *f);
    CHECK(f != NULL);
    hydra_status st = fixture_init(f);
    if (st != HYDRA_OK) {
        fixture_free(f);
        free(f);
        FAIL("fixture: %s", hydra_last_error());
    }
    const int n_routes = N_TOK * 2;
    const layer_weights *lw = &f->w.layer[0];
    double want[N_TOK * 64] = {0};
    reference_experts(lw, f->x, f->routes, n_routes, want);
    float all[N_TOK * 64] = {0}, split[N_TOK * 64] = {0}, reversed[N_TOK * 64] = {0};
    moe_experts(f->pool, &f->s, lw, &f->x_act, f->routes, n_routes, all, 64);
    /* the hybrid's shape: one pass over the even routes, one over the odd */
    moe_route part[2][N_TOK];
    for (int i = 0; i < n_routes; i++)
        part[i % 2][i / 2] = f->routes[i];
    moe_experts(f->pool, &f->s, lw, &f->x_act, part[0], N_TOK, split, 64);
    moe_experts(f->pool, &f->s, lw, &f->x_act, part[1], N_TOK, split, 64);
    moe_route rev[N_TOK * 2];
    for (int i = 0; i < n_routes; i++)
        rev[i] = f->routes[n_routes - 1 - i];
    moe_experts(f->pool, &f->s, lw, &f->x_act, rev, n_routes, reversed, 64);
    /* one token's routes: the decode path (every expert has one token) */
    double want_one[N_TOK * 64] = {0};
    float one[N_TOK * 64] = {0};
    reference_experts(lw, f->x, f->routes + 2, 2, want_one);
    moe_experts(f->pool, &f->s, lw, &f->x_act, f->routes + 2, 2, one, 64);
    int distinct_experts = 0;
    for (int e = 0; e < 8; e++)
        for (int i = 0; i < n_routes; i++)
            if (f->routes[i].expert == e) {
                distinct_experts++;
                break;
            }
    fixture_free(f);
    free(f);
    double worst = 0, worst_split = 0;
    for (int i = 0; i < N_TOK * 64; i++) {
        worst = fmax(worst, fabs(all[i] - want[i]));
        worst = fmax(worst, fabs(one[i] - want_one[i]));
        worst_split = fmax(worst_split, fabs(split[i] - all[i]));
        if (reversed[i] != all[i])
            FAIL("route order changed out[%d]: %g vs %g", i, reversed[i], all[i]);
    }
    CHECK(distinct_experts >= 3); /* the rows really exercise grouping */
    if (worst > 1e-5)
        FAIL("experts differ from the double reference by %g", worst);
    if (worst_split > 1e-6)
        FAIL("partial sums over a split differ by %g", worst_split);
}
