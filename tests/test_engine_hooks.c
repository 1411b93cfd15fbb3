/*
 * The pieces deepseek2 and gpt-oss add to the engine, each against an
 * independent formula or a hand-worked case: expert groups, the
 * selection-only bias, softmax over the chosen experts, the sliding
 * window's edges (through the ring of cache rows), attention sinks, the
 * clamped SwiGLU, YaRN's RoPE table, MLA's latent-space attention against
 * the expanded per-head K/V computation, the latent cache's size, and
 * gpt-oss's rewinding rules.
 */
#include "forward.h"
#include "hydra.h"
#include "moe.h"
#include "quant.h"
#include "test.h"
#include "util.h"
#include "threads.h"
#include "weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ routing */

typedef struct select_fixture {
    moe_scratch s;
    moe_route r[8];
} select_fixture;

static bool select_init(select_fixture *x, int n_expert)
{
    x->s = (moe_scratch){.n_expert = n_expert};
    x->s.probs = malloc(sizeof(float) * (size_t)n_expert);
    x->s.chosen = malloc((size_t)n_expert);
    x->s.group_score = malloc(sizeof(float) * (size_t)n_expert);
    x->s.group_taken = malloc((size_t)n_expert);
    return x->s.probs && x->s.chosen && x->s.group_score && x->s.group_taken;
}

static void select_free(select_fixture *x)
{
    free(x->s.probs);
    free(x->s.chosen);
    free(x->s.group_score);
    free(x->s.group_taken);
}

static float logit_of(double p)
{
    return (float)log(p / (1 - p));
}

static bool chose(const moe_route *r, int k, const int *want)
{
    for (int i = 0; i < k; i++)
        if (r[i].expert != want[i])
            return false;
    return true;
}

/* 4 groups of 4.  By the sum of their two best, groups 1 (0.8 + 0.8) and
 * 2 (0.7 + 0.7) win over 0 (0.99 + 0.1) and 3 (0.95 + 0.05), although 0 and
 * 3 hold the two best experts: ranking groups by their best expert, or not
 * grouping, would choose those. */
TEST(engine_hooks_expert_groups_rank_by_their_two_best)
{
    const double p[16] = {0.99, 0.1, 0.1, 0.1, 0.8, 0.8, 0.2, 0.2, 0.7, 0.7, 0.3, 0.1, 0.95, 0.05, 0.05, 0.05};
    float logits[16];
    for (int e = 0; e < 16; e++)
        logits[e] = logit_of(p[e]);
    select_fixture x;
    bool ok = select_init(&x, 16);
    moe_gating g = {.func = GATING_SIGMOID, .n_expert = 16, .n_used = 4, .renorm = true, .scale = 1.0f,
                    .n_group = 4, .n_group_used = 2};
    bool grouped = false, ungrouped = false;
    double weight_sum = 0;
    if (ok) {
        moe_select(&g, &x.s, logits, 1, x.r);
        /* rank order within the allowed groups, lower id first on a tie */
        grouped = chose(x.r, 4, (const int[]){4, 5, 8, 9});
        for (int k = 0; k < 4; k++)
            weight_sum += x.r[k].weight;
        g.n_group = 0;
        moe_select(&g, &x.s, logits, 1, x.r);
        ungrouped = chose(x.r, 4, (const int[]){0, 12, 4, 5});
    }
    select_free(&x);
    CHECK(ok);
    CHECK(grouped);
    CHECK(ungrouped);
    CHECK(fabs(weight_sum - 1.0) < 1e-6);
}

/* The bias moves expert 2 (p 0.3) ahead of 0 (0.9) and 1 (0.8) for the
 * choice; the weights are the sigmoid outputs 0.3 and 0.9, renormalised
 * (0.25, 0.75) and scaled by 2.5. */
TEST(engine_hooks_selection_bias_chooses_but_does_not_weigh)
{
    const double p[8] = {0.9, 0.8, 0.3, 0.1, 0.2, 0.1, 0.05, 0.6};
    const float bias[8] = {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, -1.0f};
    float logits[8];
    for (int e = 0; e < 8; e++)
        logits[e] = logit_of(p[e]);
    select_fixture x;
    bool ok = select_init(&x, 8);
    const moe_gating g = {.func = GATING_SIGMOID, .n_expert = 8, .n_used = 2, .renorm = true, .scale = 2.5f,
                          .sel_bias = bias};
    if (ok)
        moe_select(&g, &x.s, logits, 1, x.r);
    select_free(&x);
    CHECK(ok);
    CHECK_EQ_INT(x.r[0].expert, 2);
    CHECK_EQ_INT(x.r[1].expert, 0);
    CHECK(fabs(x.r[0].weight - 0.625) < 1e-6);
    CHECK(fabs(x.r[1].weight - 1.875) < 1e-6);
}

/* gpt-oss: top-k of the raw logits, weights the softmax of the k chosen. */
TEST(engine_hooks_softmax_over_the_chosen_logits)
{
    const float logits[2][4] = {{1.0f, 3.0f, 2.0f, 0.0f}, {-5.0f, 0.5f, 0.25f, 0.5f}};
    select_fixture x;
    bool ok = select_init(&x, 4);
    const moe_gating g = {.func = GATING_SOFTMAX_WEIGHT, .n_expert = 4, .n_used = 2, .scale = 1.0f};
    if (ok)
        moe_select(&g, &x.s, &logits[0][0], 2, x.r);
    select_free(&x);
    CHECK(ok);
    const double w1 = 1.0 / (1.0 + exp(-1.0)); /* e^3 / (e^3 + e^2) */
    CHECK(x.r[0].expert == 1 && x.r[1].expert == 2);
    CHECK(fabs(x.r[0].weight - w1) < 1e-6 && fabs(x.r[1].weight - (1 - w1)) < 1e-6);
    CHECK(x.r[2].expert == 1 && x.r[3].expert == 3); /* tie: the lower id first */
    CHECK(fabs(x.r[2].weight - 0.5) < 1e-6 && fabs(x.r[3].weight - 0.5) < 1e-6);
}

/* ------------------------------------------------------------ attention */

enum { SW_WINDOW = 4, SW_STEP = 3, SW_DK = 8, SW_DV = 40, SW_POSITIONS = 37 };

/* A sliding layer's ring (window 4, steps of 3: 6 rows) with zero keys, so
 * every visible position gets the same score, and one-hot values at the
 * position: head 0's output is 1 / n_visible on exactly the visible
 * positions.  Head 1 has a sink of logit ln 2, which counts as two more
 * positions in the denominator.  Written a step at a time as the forward
 * pass does, so later steps overwrite rows of earlier ones. */
TEST(engine_hooks_sliding_window_edges_through_the_ring)
{
    kv_layer layer = {.n_slots = SW_WINDOW + SW_STEP - 1, .window = SW_WINDOW};
    kv_cache kv = {.type = QT_F32, .n_ctx = 64, .k_row_bytes = SW_DK * sizeof(float),
                   .v_row_bytes = SW_DV * sizeof(float), .n_layer = 1, .layer = &layer};
    layer.k = calloc((size_t)layer.n_slots, kv.k_row_bytes);
    layer.v = calloc((size_t)layer.n_slots, kv.v_row_bytes);
    const float sinks[2] = {-INFINITY, logf(2.0f)};
    const fwd_attn_geom g = {.n_head = 2, .n_head_kv = 1, .head_dim_k = SW_DK, .head_dim_v = SW_DV,
                             .k_head_bytes = 0, .v_head_bytes = 0, .scale = 1.0f, .sinks = sinks};
    fwd_scratch f = {.kern = op_kernels_best()};
    const size_t per_thread = fwd_attend_scratch(&g, 64);
    float *scratch = malloc(sizeof(float) * per_thread);
    float q[SW_STEP][2][SW_DK] = {{{0}}}, out[SW_STEP][2][SW_DV];
    char why[256] = "";
    for (int pos0 = 0; pos0 < SW_POSITIONS && layer.k && layer.v && scratch && !why[0]; pos0 += SW_STEP) {
        const int n = pos0 + SW_STEP <= SW_POSITIONS ? SW_STEP : SW_POSITIONS - pos0;
        for (int t = 0; t < n; t++) {
            float *v = (float *)kv_v_row(&kv, &layer, pos0 + t);
            for (int i = 0; i < SW_DV; i++)
                v[i] = i == pos0 + t ? 1.0f : 0.0f;
        }
        const fwd_layer c = {.layer = 0, .kv = &kv, .f = &f, .pos0 = pos0, .n = n};
        fwd_attend(&c, &g, &q[0][0][0], &out[0][0][0], scratch, per_thread);
        for (int t = 0; t < n && !why[0]; t++) {
            const int pos = pos0 + t, lo = pos - SW_WINDOW + 1 > 0 ? pos - SW_WINDOW + 1 : 0;
            const double n_vis = pos - lo + 1;
            for (int i = 0; i < SW_DV; i++) {
                const bool visible = i >= lo && i <= pos;
                const double want[2] = {visible ? 1 / n_vis : 0, visible ? 1 / (n_vis + 2) : 0};
                for (int h = 0; h < 2; h++)
                    if (fabs(out[t][h][i] - want[h]) > 1e-6)
                        snprintf(why, sizeof why, "query at %d, head %d, position %d: weight %g, want %g", pos, h, i,
                                 out[t][h][i], want[h]);
            }
        }
    }
    bool allocated = layer.k && layer.v && scratch;
    free(layer.k);
    free(layer.v);
    free(scratch);
    CHECK(allocated);
    if (why[0])
        FAIL("%s", why);
}

/* ------------------------------------------------------------ ops */

TEST(engine_hooks_clamped_swiglu_matches_its_formula)
{
    enum { N = 9 };
    const float gate[N] = {-9.0f, -1.0f, 0.0f, 0.5f, 3.0f, 6.9f, 7.0f, 8.0f, 20.0f};
    const float up[N] = {-20.0f, -7.5f, 1.0f, -0.5f, 2.0f, 7.0f, 7.5f, -8.0f, 3.0f};
    float out[N];
    op_swiglu_oai(out, gate, up, N, 1.702f, 7.0f);
    for (int i = 0; i < N; i++) {
        const double g = fmin(gate[i], 7.0), u = fmax(fmin(up[i], 7.0), -7.0);
        const double want = g / (1 + exp(-1.702 * g)) * (u + 1);
        if (fabs(out[i] - want) > 1e-5 * fmax(1, fabs(want)))
            FAIL("gate %g up %g: %g, want %g", gate[i], up[i], out[i], want);
    }
}

/* YaRN as the paper defines it, in double: per pair i, the angle mixes the
 * interpolated theta/s with the original by a ramp over the correction
 * dims, and cos/sin carry 1 + 0.1 ln s.  gpt-oss's parameters: the ramp
 * runs from pair 4 to pair 9. */
TEST(engine_hooks_yarn_rope_table_matches_its_formula)
{
    enum { ROT = 32 };
    const double base = 150000, factor = 32, n_orig = 4096;
    rope_params p = op_rope_plain(ROT, (float)base);
    p.freq_scale = (float)(1 / factor);
    p.ext_factor = 1.0f;
    op_rope_yarn_corr(&p, (uint32_t)n_orig, 32.0f, 1.0f);
    const double low = floor(ROT * log(n_orig / (32 * 2 * M_PI)) / (2 * log(base)));
    const double high = ceil(ROT * log(n_orig / (1 * 2 * M_PI)) / (2 * log(base)));
    CHECK(p.corr_low == (float)low && p.corr_high == (float)high);
    CHECK_EQ_INT((int)low, 4);
    CHECK_EQ_INT((int)high, 9);
    float cs[ROT];
    const int64_t positions[] = {0, 1, 127, 129, 3000};
    for (size_t k = 0; k < sizeof positions / sizeof positions[0]; k++) {
        op_rope_cache_ext(cs, positions[k], &p);
        for (int i = 0; i < ROT / 2; i++) {
            const double theta = (double)positions[k] * pow(base, -2.0 * i / ROT);
            const double ramp = 1 - fmin(1, fmax(0, (i - low) / fmax(0.001, high - low)));
            const double angle = theta / factor * (1 - ramp) + theta * ramp, m = 1 + 0.1 * log(factor);
            const double tol = 2e-6 * fmax(1.0, theta);
            if (fabs(cs[2 * i] - m * cos(angle)) > tol || fabs(cs[2 * i + 1] - m * sin(angle)) > tol)
                FAIL("pos %lld pair %d: (%g, %g), want (%g, %g)", (long long)positions[k], i, cs[2 * i],
                     cs[2 * i + 1], m * cos(angle), m * sin(angle));
        }
    }
}

/* ------------------------------------------------------------ MLA */

enum { MLA_PREFILL = 5, MLA_TOKENS = MLA_PREFILL + 1, MLA_CTX = 16 };

/* y = W x in double for an F32 matrix of ne {n_in, n_out}. */
static void matvec_d(const wtensor *w, size_t offset, const double *x, double *y)
{
    const float *m = (const float *)w->data + offset;
    for (int64_t r = 0; r < w->ne[1]; r++) {
        double s = 0;
        for (int64_t k = 0; k < w->ne[0]; k++)
            s += (double)m[r * w->ne[0] + k] * x[k];
        y[r] = s;
    }
}

static void rmsnorm_d(double *x, const wtensor *gain, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double scale = 1 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        x[i] *= scale * wt_f32(gain)[i];
}

/* Normal (GPT-J) RoPE with the engine's cos/sin table. */
static void rope_d(double *x, const float *cs, int n_rot)
{
    for (int i = 0; i < n_rot / 2; i++) {
        const double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cs[2 * i] - b * cs[2 * i + 1];
        x[2 * i + 1] = a * cs[2 * i + 1] + b * cs[2 * i];
    }
}

/* Width limits of the expanded reference (deepseek2-tiny: 4 heads, keys of
 * 32 + 16, values of 32, latent 64, q_lora 64, n_embd 64). */
enum { R_HEADS = 4, R_DK = 48, R_DV = 32, R_LORA = 64, R_ROT = 16, R_EMBD = 64 };

/* The attention output of MLA_TOKENS rows as the paper writes it: every
 * head's key k_b c_j | rope(k_r) and value v_b c_j formed explicitly. */
static void expanded_attention(const model_weights *w, int l, const float *xn, const float *rope, double *out)
{
    const layer_weights *lw = &w->layer[l];
    const arch_hparams *hp = &w->hp;
    static double q[MLA_TOKENS][R_HEADS * R_DK], k[MLA_TOKENS][R_HEADS][R_DK], v[MLA_TOKENS][R_HEADS][R_DV];
    double x[R_EMBD], qa[R_LORA], lat[R_LORA + R_ROT], att[R_HEADS * R_DV];
    const int nope = R_DK - R_ROT;
    for (int t = 0; t < MLA_TOKENS; t++) {
        for (int i = 0; i < R_EMBD; i++)
            x[i] = xn[t * R_EMBD + i];
        matvec_d(&lw->w[W_ATTN_Q_A], 0, x, qa);
        rmsnorm_d(qa, &lw->w[W_ATTN_Q_A_NORM], R_LORA, hp->norm_eps);
        matvec_d(&lw->w[W_ATTN_Q_B], 0, qa, q[t]);
        matvec_d(&lw->w[W_ATTN_KV_A_MQA], 0, x, lat);
        rmsnorm_d(lat, &lw->w[W_ATTN_KV_A_NORM], R_LORA, hp->norm_eps);
        rope_d(lat + R_LORA, rope + t * R_ROT, R_ROT);
        for (int h = 0; h < R_HEADS; h++) {
            rope_d(q[t] + h * R_DK + nope, rope + t * R_ROT, R_ROT);
            /* k_b[h] is ne {nope, lora}: row c holds the weights of latent c */
            const float *kb = (const float *)lw->w[W_ATTN_K_B].data + (size_t)h * R_LORA * nope;
            for (int d = 0; d < nope; d++) {
                k[t][h][d] = 0;
                for (int c = 0; c < R_LORA; c++)
                    k[t][h][d] += (double)kb[c * nope + d] * lat[c];
            }
            for (int d = 0; d < R_ROT; d++)
                k[t][h][nope + d] = lat[R_LORA + d];
            matvec_d(&lw->w[W_ATTN_V_B], (size_t)h * R_DV * R_LORA, lat, v[t][h]);
        }
    }
    for (int t = 0; t < MLA_TOKENS; t++) {
        for (int h = 0; h < R_HEADS; h++) {
            double s[MLA_TOKENS], max = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                s[j] = 0;
                for (int d = 0; d < R_DK; d++)
                    s[j] += q[t][h * R_DK + d] * k[j][h][d];
                s[j] *= hp->kq_scale;
                max = fmax(max, s[j]);
            }
            for (int j = 0; j <= t; j++)
                sum += (s[j] = exp(s[j] - max));
            for (int i = 0; i < R_DV; i++) {
                att[h * R_DV + i] = 0;
                for (int j = 0; j <= t; j++)
                    att[h * R_DV + i] += s[j] / sum * v[j][h][i];
            }
        }
        matvec_d(&lw->w[W_ATTN_OUT], 0, att, out + t * R_EMBD);
    }
}

typedef struct mla_fixture {
    hydra_model *m;
    model_weights w;
    thread_pool *pool;
    kv_cache kv;
    fwd_scratch f;
} mla_fixture;

static hydra_status mla_open(mla_fixture *x)
{
    hydra_status st = util_open_shared_model("deepseek2-tiny-f32", &x->m);
    if (st == HYDRA_OK)
        st = weights_bind(&x->w, x->m);
    if (st == HYDRA_OK)
        st = pool_create(&x->pool, 2);
    if (st == HYDRA_OK)
        st = kv_init(&x->kv, &x->w, QT_F32, MLA_CTX, MLA_PREFILL);
    if (st == HYDRA_OK)
        st = fwd_init(&x->f, &x->w, MLA_PREFILL, MLA_CTX, 2);
    return st;
}

static void mla_close(mla_fixture *x)
{
    fwd_free(&x->f);
    kv_free(&x->kv);
    pool_destroy(x->pool);
    weights_free(&x->w);
    hydra_model_close(x->m);
}

/* Runs the MLA hook of layer l on rows [pos0, pos0 + n) of xn; their
 * outputs into sub. */
static void mla_step(mla_fixture *x, int l, const float *xn, const float *rope, int pos0, int n, float *sub)
{
    const arch_hparams *hp = &x->w.hp;
    memcpy(x->f.xn, xn + pos0 * hp->n_embd, sizeof(float) * (size_t)n * hp->n_embd);
    memcpy(x->f.rope, rope + pos0 * hp->n_rot, sizeof(float) * (size_t)n * hp->n_rot);
    const fwd_layer c = {.w = &x->w, .layer = l, .pool = x->pool, .kv = &x->kv, .f = &x->f, .pos0 = pos0, .n = n};
    x->w.arch->attention->run(&c);
    memcpy(sub + pos0 * hp->n_embd, x->f.sub, sizeof(float) * (size_t)n * hp->n_embd);
}

/* A prefill of 5 rows then one decode step through the latent cache equal
 * the expanded computation (in double) on every row, on a MoE layer. */
TEST(engine_hooks_latent_attention_equals_expanded_kv)
{
    REQUIRE_SHARED();
    mla_fixture x = {0};
    hydra_status st = mla_open(&x);
    const arch_hparams *hp = &x.w.hp;
    bool shapes = st == HYDRA_OK && hp->n_head == R_HEADS && hp->head_dim_k == R_DK && hp->head_dim_v == R_DV &&
                  hp->kv_lora_rank == R_LORA && hp->n_rot == R_ROT && hp->n_embd == R_EMBD &&
                  hp->q_lora_rank == R_LORA;
    static float xn[MLA_TOKENS * R_EMBD], rope[MLA_TOKENS * R_ROT], sub[MLA_TOKENS * R_EMBD];
    static double want[MLA_TOKENS * R_EMBD];
    double max_diff = 0, max_want = 0;
    if (shapes) {
        unsigned seed = 7;
        for (int i = 0; i < MLA_TOKENS * R_EMBD; i++) {
            seed = seed * 1664525u + 1013904223u;
            xn[i] = (float)((seed >> 8) / 8388608.0 - 1.0);
        }
        for (int t = 0; t < MLA_TOKENS; t++)
            op_rope_cache_ext(rope + t * R_ROT, t, &hp->rope);
        mla_step(&x, 2, xn, rope, 0, MLA_PREFILL, sub);
        mla_step(&x, 2, xn, rope, MLA_PREFILL, 1, sub);
        expanded_attention(&x.w, 2, xn, rope, want);
        for (int i = 0; i < MLA_TOKENS * R_EMBD; i++) {
            max_diff = fmax(max_diff, fabs(sub[i] - want[i]));
            max_want = fmax(max_want, fabs(want[i]));
        }
    }
    mla_close(&x);
    CHECK_OK(st);
    CHECK(shapes);
    if (!(max_diff <= 1e-5 * max_want) || max_want == 0)
        FAIL("latent vs expanded: max |diff| %g of max |value| %g", max_diff, max_want);
}

/* ------------------------------------------------------------ sessions */

/* deepseek2 caches kv_lora_rank + rope dims per position and layer (F16:
 * 2 bytes each); gpt-oss's sliding layers (0 and 2) hold their window plus
 * a step, the others every position. */
TEST(engine_hooks_cache_sizes_latent_and_windowed)
{
    REQUIRE_SHARED();
    hydra_model *ds = NULL, *oss = NULL;
    hydra_session *s1 = NULL, *s2 = NULL;
    CHECK_OK(util_open_shared_model("deepseek2-tiny-q8_0", &ds));
    hydra_status st = util_open_shared_model("gptoss-tiny-mxfp4", &oss);
    if (st == HYDRA_OK)
        st = util_new_session(ds, 1024, 64, 2, &s1);
    if (st == HYDRA_OK)
        st = util_new_session(oss, 1024, 16, 2, &s2);
    const uint64_t latent = hydra_session_kv_bytes(s1), windowed = hydra_session_kv_bytes(s2);
    hydra_session_free(s1);
    hydra_session_free(s2);
    hydra_model_close(ds);
    hydra_model_close(oss);
    CHECK_OK(st);
    CHECK_EQ_U64(latent, 1024ull * 3 * (64 + 16) * 2);
    const uint64_t row = 2 * 32 * 2 * 2; /* K and V rows: 2 KV heads of 32, F16 */
    CHECK_EQ_U64(windowed, 2 * 1024ull * row + 2 * (128ull + 16 - 1) * row);
}

enum { OSS_PROMPT = 200 };

/* The same 200 positions through a ring that wraps (steps of 64: rows for
 * 191 positions) as through a full cache (one step of 200) give the same
 * logits; a rewind by 50 (to 150, across the window boundary) is held and
 * reproduces them; a rewind to 60 is refused and changes nothing. */
TEST(engine_hooks_gptoss_ring_and_rewinds)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    hydra_session *full = NULL, *ring = NULL;
    CHECK_OK(util_open_shared_model("gptoss-tiny-f32", &m));
    const uint32_t n_vocab = 905;
    int32_t prompt[OSS_PROMPT];
    for (int i = 0; i < OSS_PROMPT; i++)
        prompt[i] = (int32_t)((i * 7919u + 13u) % 896u);
    float *a = malloc(sizeof(float) * OSS_PROMPT * n_vocab), *b = malloc(sizeof(float) * OSS_PROMPT * n_vocab);
    hydra_status st = a && b ? HYDRA_OK : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = util_new_session(m, 256, 256, 2, &full);
    if (st == HYDRA_OK)
        st = util_new_session(m, 256, 64, 2, &ring);
    if (st == HYDRA_OK)
        st = hydra_session_eval(full, prompt, OSS_PROMPT, a);
    if (st == HYDRA_OK)
        st = hydra_session_eval(ring, prompt, OSS_PROMPT, b);
    double ring_diff = 0, rewind_diff = 0;
    for (size_t i = 0; st == HYDRA_OK && i < (size_t)OSS_PROMPT * n_vocab; i++)
        ring_diff = fmax(ring_diff, fabs(a[i] - b[i]));
    hydra_status held = st == HYDRA_OK ? hydra_session_truncate(ring, 150) : st;
    if (held == HYDRA_OK)
        held = hydra_session_eval(ring, prompt + 150, OSS_PROMPT - 150, b);
    for (size_t i = 0; held == HYDRA_OK && i < (size_t)(OSS_PROMPT - 150) * n_vocab; i++)
        rewind_diff = fmax(rewind_diff, fabs(a[150 * (size_t)n_vocab + i] - b[i]));
    hydra_status refused = held == HYDRA_OK ? hydra_session_truncate(ring, 60) : held;
    const uint32_t past_after_refusal = hydra_session_n_past(ring);
    const bool logits_kept = hydra_session_logits(ring) != NULL;
    hydra_session_clear(ring);
    hydra_status after_clear = refused != HYDRA_OK ? hydra_session_eval(ring, prompt, 10, NULL) : refused;
    hydra_session_free(full);
    hydra_session_free(ring);
    hydra_model_close(m);
    free(a);
    free(b);
    CHECK_OK(st);
    CHECK(ring_diff == 0);
    CHECK_OK(held);
    CHECK(rewind_diff == 0);
    CHECK_EQ_INT(refused, HYDRA_ERR_RANGE);
    CHECK_EQ_INT(past_after_refusal, OSS_PROMPT);
    CHECK(logits_kept);
    CHECK_OK(after_clear);
}
