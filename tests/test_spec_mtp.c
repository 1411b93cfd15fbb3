/*
 * Speculative decoding with the model's own MTP (NextN) block (src/mtp.c,
 * src/spec.c) on hydra-mkmodel's deepseek2-mtp-tiny (three blocks plus one
 * MTP block, F32):
 *   - greedy with MTP drafting equals plain greedy decoding, token for
 *     token (prompt chunks smaller than the prompt, several draft lengths);
 *   - the engine's MTP logits equal a reference computation of the formula
 *     x = eh_proj [enorm(embed(t)) | hnorm(h)], the block, shared_head_norm
 *     and the head: x in double here, the block run as a one-block model
 *     file whose embedding rows are the x rows (positions 0 ..);
 *   - after rejected drafts the MTP cache gives, bit for bit, the logits of
 *     a drafter that only saw the accepted tokens;
 *   - a mis-shaped nextn tensor and a model without MTP block fail clearly.
 */
#include "gguf_write.h"
#include "hydra.h"
#include "mtp.h"
#include "quant.h"
#include "session_hidden.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hydra_status spec_test_copy_meta(const hydra_model *m, uint32_t block_count, const char *const *drop, gguf_writer *w);

enum { N_GEN = 24, MTP_BLOCK = 3 };

static const hydra_token prompt[] = {1, 17, 200, 33, 250, 64, 7, 140, 9, 77, 18};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

/* deepseek2-mtp-tiny, written once per run into the scratch folder. */
static hydra_status mtp_model(hydra_model **m)
{
    static char path[512];
    if (path[0] == '\0') {
        synth_params p;
        snprintf(path, sizeof path, "%s", util_scratch_path("spec-mtp-tiny.gguf"));
        hydra_status st = synth_preset("deepseek2-mtp-tiny", &p);
        if (st == HYDRA_OK)
            st = synth_write(path, &p);
        if (st != HYDRA_OK) {
            path[0] = '\0';
            return st;
        }
    }
    return util_open_model(path, m);
}

static hydra_status make_session_on(const hydra_model *m, uint32_t n_batch, hydra_backend backend, hydra_session **s)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 128;
    p.n_batch = n_batch;
    p.n_threads = 2;
    p.kv_type = HYDRA_KV_F32;
    p.backend = backend;
    return hydra_session_create(s, m, &p);
}

static hydra_status make_session(const hydra_model *m, uint32_t n_batch, hydra_session **s)
{
    return make_session_on(m, n_batch, HYDRA_BACKEND_CPU, s);
}

static int32_t argmax(const float *x, int64_t n)
{
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

/* ------------------------------------------------------------ greedy */

/* Plain greedy decoding with the sampler the decoder uses (ties broken
 * the same way). */
static hydra_status plain_greedy(const hydra_model *m, hydra_backend backend, hydra_token *out)
{
    hydra_session *s = NULL;
    hydra_status st = make_session_on(m, 64, backend, &s);
    if (st == HYDRA_OK)
        st = util_greedy_decode(s, prompt, N_PROMPT, out, N_GEN);
    hydra_session_free(s);
    return st;
}

static hydra_status mtp_greedy(const hydra_model *m, hydra_backend backend, uint32_t n_batch, hydra_spec_params pp,
                               hydra_token *out, hydra_spec_stats *stats)
{
    hydra_session *s = NULL;
    hydra_spec *spec = NULL;
    const hydra_sampler_params sp = util_greedy_params();
    hydra_status st = make_session_on(m, n_batch, backend, &s);
    if (st == HYDRA_OK)
        st = hydra_spec_new(s, NULL, &sp, &pp, &spec);
    if (st == HYDRA_OK)
        st = hydra_spec_start(spec, prompt, N_PROMPT);
    for (size_t done = 0, got = 0; st == HYDRA_OK && done < N_GEN; done += got)
        st = hydra_spec_step(spec, N_GEN - done, out + done, &got);
    hydra_spec_get_stats(spec, stats);
    hydra_spec_free(spec);
    hydra_session_free(s);
    return st;
}

/* MTP greedy equals plain greedy on backend, over several draft lengths,
 * prompt chunkings and widths. */
static void check_greedy_runs(hydra_backend backend, test_ctx *t_)
{
    hydra_model *m = NULL;
    CHECK_OK(mtp_model(&m));
    hydra_token want[N_GEN], got[N_GEN];
    hydra_status st = plain_greedy(m, backend, want);
    static const struct {
        int32_t n_draft_max;
        uint32_t n_batch; /* 4: the prompt reaches the target (and the drafter) in three steps */
        bool fixed_width;
    } runs[] = {{1, 64, true}, {3, 4, true}, {4, 64, false}, {6, 8, true}};
    for (size_t r = 0; st == HYDRA_OK && r < sizeof runs / sizeof runs[0]; r++) {
        hydra_spec_params pp = hydra_spec_default_params();
        pp.n_draft_max = runs[r].n_draft_max;
        pp.p_min = 0;
        pp.fixed_width = runs[r].fixed_width;
        hydra_spec_stats stats = {0};
        st = mtp_greedy(m, backend, runs[r].n_batch, pp, got, &stats);
        if (st != HYDRA_OK)
            break;
        for (int i = 0; i < N_GEN; i++)
            if (want[i] != got[i]) {
                hydra_model_close(m);
                FAIL("n_draft_max %d: token %d is %d, plain greedy gives %d", (int)pp.n_draft_max, i, (int)got[i],
                     (int)want[i]);
            }
        CHECK(stats.n_generated == N_GEN);
        CHECK(stats.n_drafted > 0);
        printf("    n_draft_max %d, n_batch %u: %llu of %llu MTP drafts kept over %llu steps, %llu graphs captured\n",
               (int)pp.n_draft_max, runs[r].n_batch, (unsigned long long)stats.n_accepted,
               (unsigned long long)stats.n_drafted, (unsigned long long)stats.n_steps,
               (unsigned long long)stats.n_captures);
    }
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
}

TEST(spec_mtp_greedy_equals_plain)
{
    check_greedy_runs(HYDRA_BACKEND_CPU, TEST_CTX);
}

/* ------------------------------------------------------------ rewriting files */

/* One tensor of a rewritten file: data NULL writes zeros. */
typedef struct out_tensor {
    char name[96];
    uint32_t type, n_dims;
    uint64_t ne[4];
    const void *data;
    uint64_t n_bytes;
} out_tensor;

/* Writes m's metadata (block_count replaced when block_count > 0, keys
 * named in drop left out) and the tensors t[0, n). */
static hydra_status write_file(const hydra_model *m, const char *path, uint32_t block_count, const char *const *drop,
                               const out_tensor *t, size_t n)
{
    gguf_writer *w = NULL;
    hydra_status st = gguf_writer_open(&w, path);
    if (st == HYDRA_OK)
        st = spec_test_copy_meta(m, block_count, drop, w);
    for (size_t i = 0; st == HYDRA_OK && i < n; i++)
        st = gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne);
    static const uint8_t zeros[4096];
    for (size_t i = 0; st == HYDRA_OK && i < n; i++) {
        if (t[i].data != NULL) {
            st = gguf_writer_write(w, t[i].data, t[i].n_bytes);
            continue;
        }
        for (uint64_t left = t[i].n_bytes; st == HYDRA_OK && left > 0;) {
            const size_t k = left < sizeof zeros ? (size_t)left : sizeof zeros;
            st = gguf_writer_write(w, zeros, k);
            left -= k;
        }
    }
    return gguf_writer_finish(w, st);
}

static out_tensor tensor_like(const hydra_tensor_info *ti, const char *name)
{
    out_tensor t = {.type = ti->type, .n_dims = ti->n_dims, .ne = {ti->ne[0], ti->ne[1], ti->ne[2], ti->ne[3]},
                    .data = ti->data, .n_bytes = ti->n_bytes};
    snprintf(t.name, sizeof t.name, "%s", name);
    return t;
}

/* ------------------------------------------------------------ the reference */

typedef struct ref_ctx {
    const hydra_model *m;
    int64_t n_embd, n_vocab;
    float eps;
    const float *embd, *eh_proj, *enorm, *hnorm, *out_norm, *head_norm; /* F32 in the file */
} ref_ctx;

static const float *f32_tensor(const hydra_model *m, const char *name)
{
    hydra_tensor_info ti;
    if (hydra_model_tensor_find(m, name, &ti) != HYDRA_OK || ti.type != QT_F32)
        return NULL;
    return ti.data;
}

static bool ref_init(ref_ctx *r, const hydra_model *m)
{
    double eps = 0;
    *r = (ref_ctx){.m = m, .n_embd = 64};
    hydra_model_get_f64(m, "deepseek2.attention.layer_norm_rms_epsilon", &eps);
    r->eps = (float)eps;
    r->embd = f32_tensor(m, "token_embd.weight");
    r->eh_proj = f32_tensor(m, "blk.3.nextn.eh_proj.weight");
    r->enorm = f32_tensor(m, "blk.3.nextn.enorm.weight");
    r->hnorm = f32_tensor(m, "blk.3.nextn.hnorm.weight");
    r->out_norm = f32_tensor(m, "output_norm.weight");
    r->head_norm = f32_tensor(m, "blk.3.nextn.shared_head_norm.weight");
    hydra_value_type et;
    size_t nv = 0;
    hydra_model_get_arr(m, "tokenizer.ggml.tokens", &et, &nv);
    r->n_vocab = (int64_t)nv;
    return r->embd && r->eh_proj && r->enorm && r->hnorm && r->out_norm && r->head_norm && nv > 0;
}

/* y = x / sqrt(mean(x^2) + eps) * g, in double. */
static void ref_rmsnorm(double *y, const double *x, const float *g, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double s = 1.0 / sqrt(ss / (double)n + (double)eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * s * g[i];
}

/* x = eh_proj . [enorm(embed(token)) | hnorm(state)] */
static void ref_input(const ref_ctx *r, hydra_token token, const double *state, float *x)
{
    const int64_t ne = r->n_embd;
    double e[256] = {0}, cat[512] = {0};
    for (int64_t i = 0; i < ne; i++)
        e[i] = r->embd[(size_t)token * ne + i];
    ref_rmsnorm(cat, e, r->enorm, ne, r->eps);
    ref_rmsnorm(cat + ne, state, r->hnorm, ne, r->eps);
    for (int64_t o = 0; o < ne; o++) {
        double acc = 0;
        for (int64_t i = 0; i < 2 * ne; i++)
            acc += (double)r->eh_proj[(size_t)o * 2 * ne + i] * cat[i];
        x[o] = (float)acc;
    }
}

/* The MTP block as a model of its own: blk.0 = blk.3 (but the nextn.*
 * tensors), its embedding the x rows (rows past n_rows zero), output_norm
 * = shared_head_norm, the shared head = output. */
static hydra_status write_block_model(const ref_ctx *r, const char *path, const float *x_rows, int64_t n_rows)
{
    const hydra_model *m = r->m;
    const size_t n_all = hydra_model_tensor_count(m);
    out_tensor *t = calloc(n_all + 3, sizeof *t);
    float *table = calloc((size_t)(r->n_vocab * r->n_embd), sizeof *table);
    if (t == NULL || table == NULL) {
        free(t);
        free(table);
        return HYDRA_ERR_NOMEM;
    }
    memcpy(table, x_rows, sizeof(float) * (size_t)(n_rows * r->n_embd));
    size_t n = 0;
    hydra_tensor_info ti;
    hydra_status st = hydra_model_tensor_find(m, "token_embd.weight", &ti);
    if (st == HYDRA_OK) {
        t[n] = tensor_like(&ti, "token_embd.weight");
        t[n++].data = table;
        st = hydra_model_tensor_find(m, "blk.3.nextn.shared_head_norm.weight", &ti);
    }
    if (st == HYDRA_OK) {
        t[n++] = tensor_like(&ti, "output_norm.weight");
        st = hydra_model_tensor_find(m, "output.weight", &ti);
    }
    if (st == HYDRA_OK)
        t[n++] = tensor_like(&ti, "output.weight");
    for (size_t i = 0; st == HYDRA_OK && i < n_all; i++) {
        st = hydra_model_tensor_at(m, i, &ti);
        if (st != HYDRA_OK || strncmp(ti.name, "blk.3.", 6) != 0 || strncmp(ti.name + 6, "nextn.", 6) == 0)
            continue;
        char name[96];
        snprintf(name, sizeof name, "blk.0.%s", ti.name + 6);
        t[n++] = tensor_like(&ti, name);
    }
    static const char *const drop[] = {"deepseek2.nextn_predict_layers", "deepseek2.leading_dense_block_count", NULL};
    if (st == HYDRA_OK)
        st = write_file(m, path, 1, drop, t, n);
    free(t);
    free(table);
    return st;
}

/* The block model over x rows [0, n_rows): the last row's logits, and its
 * final hidden state normed by shared_head_norm (what a chained row reads). */
static hydra_status run_block_model(const ref_ctx *r, const float *x_rows, int64_t n_rows, float *logits,
                                    double *state)
{
    const char *path = util_scratch_path("spec-mtp-block.gguf");
    hydra_model *bm = NULL;
    hydra_session *s = NULL;
    session_parts parts;
    hydra_token ids[64];
    for (int64_t i = 0; i < n_rows; i++)
        ids[i] = (hydra_token)i;
    hydra_status st = write_block_model(r, path, x_rows, n_rows);
    if (st == HYDRA_OK)
        st = util_open_model(path, &bm);
    if (st == HYDRA_OK)
        st = make_session(bm, 64, &s);
    if (st == HYDRA_OK)
        st = session_keep_hidden(s, &parts);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, ids, (size_t)n_rows, NULL);
    if (st == HYDRA_OK) {
        memcpy(logits, hydra_session_logits(s), sizeof(float) * (size_t)r->n_vocab);
        const float *y = session_hidden_row(s, n_rows - 1);
        double yd[256];
        for (int64_t i = 0; i < r->n_embd; i++)
            yd[i] = y[i];
        ref_rmsnorm(state, yd, r->head_norm, r->n_embd, r->eps);
    }
    hydra_session_free(s);
    hydra_model_close(bm);
    return st;
}

/* Largest |a - b| over n, and the largest |b|. */
static void max_diff(const float *a, const float *b, int64_t n, double *diff, double *scale)
{
    *diff = 0;
    *scale = 0;
    for (int64_t i = 0; i < n; i++) {
        *diff = fmax(*diff, fabs((double)a[i] - (double)b[i]));
        *scale = fmax(*scale, fabs((double)b[i]));
    }
}

TEST(spec_mtp_draft_matches_the_formula)
{
    hydra_model *m = NULL;
    CHECK_OK(mtp_model(&m));
    ref_ctx r;
    if (!ref_init(&r, m)) {
        hydra_model_close(m);
        FAIL("deepseek2-mtp-tiny lacks an F32 tensor the reference reads");
    }
    enum { N_ROWS = N_PROMPT - 1 };
    hydra_session *target = NULL;
    mtp_drafter *d = NULL;
    float *eng1 = malloc(sizeof(float) * (size_t)r.n_vocab), *eng2 = malloc(sizeof(float) * (size_t)r.n_vocab);
    float *ref = malloc(sizeof(float) * (size_t)r.n_vocab);
    static float x[(N_ROWS + 1) * 64];
    double state[64], h[64];
    hydra_token d1 = -1;
    hydra_status st = eng1 && eng2 && ref ? make_session(m, 64, &target) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = mtp_new(target, &d);
    /* the engine: rows 0 .. N_ROWS - 1 from the prompt, then one chained row */
    if (st == HYDRA_OK)
        st = hydra_session_eval(target, prompt, N_ROWS, NULL);
    if (st == HYDRA_OK)
        st = mtp_sync(d, prompt, N_ROWS);
    if (st == HYDRA_OK) {
        memcpy(eng1, mtp_logits(d), sizeof(float) * (size_t)r.n_vocab);
        d1 = argmax(eng1, r.n_vocab);
        st = mtp_chain(d, d1);
    }
    if (st == HYDRA_OK)
        memcpy(eng2, mtp_logits(d), sizeof(float) * (size_t)r.n_vocab);
    /* the reference: row i reads prompt[i + 1] and output_norm(h_i) */
    for (int64_t i = 0; st == HYDRA_OK && i < N_ROWS; i++) {
        const float *hi = session_hidden_row(target, i);
        double hd[64];
        for (int64_t k = 0; k < 64; k++)
            hd[k] = hi[k];
        ref_rmsnorm(h, hd, r.out_norm, 64, r.eps);
        ref_input(&r, prompt[i + 1], h, x + i * 64);
    }
    double diff1 = 0, scale1 = 0, diff2 = 0, scale2 = 0;
    if (st == HYDRA_OK)
        st = run_block_model(&r, x, N_ROWS, ref, state);
    if (st == HYDRA_OK) {
        max_diff(eng1, ref, r.n_vocab, &diff1, &scale1);
        ref_input(&r, d1, state, x + N_ROWS * 64); /* the chained row */
        st = run_block_model(&r, x, N_ROWS + 1, ref, state);
    }
    if (st == HYDRA_OK)
        max_diff(eng2, ref, r.n_vocab, &diff2, &scale2);
    mtp_free(d);
    hydra_session_free(target);
    hydra_model_close(m);
    free(eng1);
    free(eng2);
    free(ref);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    printf("    MTP logits vs the formula: max |diff| %.2e of %.2e (row %d), %.2e of %.2e (chained row)\n", diff1,
           scale1, N_ROWS - 1, diff2, scale2);
    CHECK(scale1 > 0 && diff1 <= 1e-4 * scale1);
    CHECK(scale2 > 0 && diff2 <= 1e-4 * scale2);
}

/* ------------------------------------------------------------ rollback */

/* After chained rows of rejected drafts and a verify pass, the drafter's
 * next logits equal those of a drafter on a target that only evaluated the
 * accepted tokens, bit for bit. */
TEST(spec_mtp_rollback_leaves_the_rows_of_the_accepted_tokens)
{
    hydra_model *m = NULL;
    CHECK_OK(mtp_model(&m));
    enum { N0 = 6, N_KEPT = 2 };
    hydra_session *ta = NULL, *tb = NULL;
    mtp_drafter *a = NULL, *b = NULL;
    enum { N_VOCAB_MAX = 1 << 16 };
    uint32_t n_vocab = 0;
    float *la = malloc(sizeof(float) * N_VOCAB_MAX * 4), *lb = malloc(sizeof(float) * N_VOCAB_MAX);
    /* history: prompt[0, N0) accepted, prompt[N0 - 1] pending; drafts are
     * prompt[N0 .. N0 + 2], of which N_KEPT are kept, then the target's own */
    hydra_token hist[N_PROMPT];
    memcpy(hist, prompt, sizeof hist);
    hydra_status st = la && lb ? make_session(m, 64, &ta) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = make_session(m, 64, &tb);
    n_vocab = hydra_session_n_vocab(ta);
    if (st == HYDRA_OK && n_vocab > N_VOCAB_MAX)
        st = HYDRA_ERR_RANGE;
    if (st == HYDRA_OK)
        st = mtp_new(ta, &a);
    if (st == HYDRA_OK)
        st = mtp_new(tb, &b);
    if (st == HYDRA_OK)
        st = hydra_session_eval(ta, hist, N0 - 1, NULL);
    if (st == HYDRA_OK)
        st = mtp_sync(a, hist, N0 - 1);
    for (int i = 0; st == HYDRA_OK && i < 3; i++)
        st = mtp_chain(a, (hydra_token)(90 + i)); /* drafts the verify rejects */
    if (st == HYDRA_OK)
        st = hydra_session_eval(ta, hist + N0 - 1, 4, la); /* verify: pending + 3 drafts */
    if (st == HYDRA_OK)
        st = hydra_session_truncate(ta, N0 + N_KEPT);
    /* the target's own token after the kept drafts becomes pending */
    const int64_t n_hist = N0 + N_KEPT + 1;
    if (st == HYDRA_OK)
        st = mtp_sync(a, hist, n_hist - 1);
    if (st == HYDRA_OK)
        memcpy(la, mtp_logits(a), sizeof(float) * n_vocab);
    if (st == HYDRA_OK)
        st = hydra_session_eval(tb, hist, (size_t)n_hist - 1, NULL);
    if (st == HYDRA_OK)
        st = mtp_sync(b, hist, n_hist - 1);
    if (st == HYDRA_OK)
        memcpy(lb, mtp_logits(b), sizeof(float) * n_vocab);
    mtp_free(a);
    mtp_free(b);
    hydra_session_free(ta);
    hydra_session_free(tb);
    hydra_model_close(m);
    const bool same = st == HYDRA_OK && memcmp(la, lb, sizeof(float) * n_vocab) == 0;
    free(la);
    free(lb);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    CHECK(same);
}

/* The MTP test model written again to path with every tensor passed
 * through edit (which may change its shape or drop its data). */
static hydra_status write_edited_mtp_model(const char *path, void (*edit)(out_tensor *, const hydra_tensor_info *))
{
    hydra_model *m = NULL;
    hydra_status st = mtp_model(&m);
    if (st != HYDRA_OK)
        return st;
    const size_t n = hydra_model_tensor_count(m);
    out_tensor *t = calloc(n, sizeof *t);
    st = t ? HYDRA_OK : HYDRA_ERR_NOMEM;
    for (size_t i = 0; st == HYDRA_OK && i < n; i++) {
        hydra_tensor_info ti;
        st = hydra_model_tensor_at(m, i, &ti);
        t[i] = tensor_like(&ti, ti.name);
        edit(&t[i], &ti);
    }
    if (st == HYDRA_OK)
        st = write_file(m, path, 0, NULL, t, n);
    free(t);
    hydra_model_close(m);
    return st;
}

/* ------------------------------------------------------------ errors */

/* eh_proj as {n_embd, n_embd}: the concat's half */
static void halve_eh_proj(out_tensor *t, const hydra_tensor_info *ti)
{
    if (strcmp(ti->name, "blk.3.nextn.eh_proj.weight") == 0) {
        t->ne[0] = ti->ne[1];
        t->n_bytes = ti->n_bytes / 2;
        t->data = NULL;
    }
}

TEST(spec_mtp_refuses_a_misshaped_nextn_tensor)
{
    const char *path = util_scratch_path("spec-mtp-bad-eh-proj.gguf");
    CHECK_OK(write_edited_mtp_model(path, halve_eh_proj));
    hydra_model *bad = NULL;
    hydra_session *s = NULL;
    CHECK_OK(util_open_model(path, &bad));
    const hydra_status refused = make_session(bad, 64, &s);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", hydra_last_error());
    hydra_session_free(s);
    hydra_model_close(bad);
    printf("    %s\n", msg);
    CHECK_EQ_INT(refused, HYDRA_ERR_FORMAT);
    CHECK(strstr(msg, "blk.3.nextn.eh_proj.weight") != NULL);
    CHECK(strstr(msg, "expected {128, 64, 1}") != NULL);
}

/* A session of n_batch over m and an MTP drafter (greedy) on it, where
 * the drafter is expected to be refused: the status, the error message in
 * msg and in *made whether a drafter came back; both freed. */
static hydra_status try_mtp_spec(const hydra_model *m, uint32_t n_batch, const hydra_spec_params *pp, char *msg,
                                 size_t len, bool *made)
{
    hydra_session *s = NULL;
    hydra_spec *spec = NULL;
    const hydra_sampler_params sp = util_greedy_params();
    hydra_status st = make_session(m, n_batch, &s);
    if (st == HYDRA_OK)
        st = hydra_spec_new(s, NULL, &sp, pp, &spec);
    snprintf(msg, len, "%s", hydra_last_error());
    *made = spec != NULL;
    hydra_spec_free(spec);
    hydra_session_free(s);
    return st;
}

TEST(spec_mtp_needs_an_mtp_block)
{
    synth_params p;
    CHECK_OK(synth_preset("deepseek2-tiny", &p));
    p.type = QT_F32;
    const char *path = util_scratch_path("spec-mtp-none.gguf");
    CHECK_OK(synth_write(path, &p));
    hydra_model *m = NULL;
    CHECK_OK(util_open_model(path, &m));
    const hydra_spec_params pp = hydra_spec_default_params();
    char msg[512];
    bool made = false;
    hydra_status st = try_mtp_spec(m, 64, &pp, msg, sizeof msg, &made);
    hydra_model_close(m);
    CHECK_EQ_INT(st, HYDRA_ERR_UNSUPPORTED);
    CHECK(strstr(msg, "MTP") != NULL);
    CHECK(!made);
}

/* A verify pass longer than n_batch would be two steps, and the drafter
 * would miss the first one's hidden states: refused up front. */
TEST(spec_mtp_needs_the_verify_pass_in_one_step)
{
    hydra_model *m = NULL;
    CHECK_OK(mtp_model(&m));
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 8;
    char msg[512];
    bool made = false;
    hydra_status st = try_mtp_spec(m, 8, &pp, msg, sizeof msg, &made);
    hydra_model_close(m);
    CHECK_EQ_INT(st, HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(msg, "n_batch 8") != NULL);
}

/* data NULL: written as zeros */
static void zero_head_norms(out_tensor *t, const hydra_tensor_info *ti)
{
    if (strcmp(ti->name, "output_norm.weight") == 0 || strcmp(ti->name, "blk.3.nextn.shared_head_norm.weight") == 0)
        t->data = NULL;
}

/* output_norm and shared_head_norm zeroed: every logit of the target and of
 * the drafter is 0, both pick the same token, and every draft is kept, so
 * the accepted path runs (catch-up of n_draft + 1 rows, the bonus token)
 * with the MTP block's rows computed as usual underneath. */
TEST(spec_mtp_keeps_every_draft_when_they_agree)
{
    const char *path = util_scratch_path("spec-mtp-agree.gguf");
    CHECK_OK(write_edited_mtp_model(path, zero_head_norms));
    hydra_model *agree = NULL;
    CHECK_OK(util_open_model(path, &agree));
    hydra_token want[N_GEN], got[N_GEN];
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 3;
    pp.p_min = 0;
    hydra_spec_stats stats = {0};
    hydra_status st = plain_greedy(agree, HYDRA_BACKEND_CPU, want);
    if (st == HYDRA_OK)
        st = mtp_greedy(agree, HYDRA_BACKEND_CPU, 64, pp, got, &stats);
    hydra_model_close(agree);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    for (int i = 0; i < N_GEN; i++)
        if (want[i] != got[i])
            FAIL("token %d is %d, plain greedy gives %d", i, (int)got[i], (int)want[i]);
    printf("    %llu of %llu drafts kept over %llu steps\n", (unsigned long long)stats.n_accepted,
           (unsigned long long)stats.n_drafted, (unsigned long long)stats.n_steps);
    CHECK(stats.n_drafted > 0);
    CHECK(stats.n_accepted == stats.n_drafted);
    CHECK(stats.n_steps < N_GEN);
}

/* ------------------------------------------------------------ on CUDA */

/* The same runs with the target and the MTP block on the GPU: greedy MTP
 * equals plain greedy decoding on the GPU, token for token. */
TEST(cuda_spec_mtp_greedy_equals_plain)
{
    if (!hydra_cuda_available())
        SKIP("no CUDA device");
    check_greedy_runs(HYDRA_BACKEND_CUDA, TEST_CTX);
}

/* The largest |a - b| over the largest |b|. */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* The device drafter's logits against the CPU drafter's (an independent
 * formula check of which is test spec_mtp_draft_matches_the_formula): the
 * prompt's catch-up rows from the target's device rows, then a chained
 * row from the block's own output. */
TEST(cuda_spec_mtp_logits_match_the_cpu_drafter)
{
    if (!hydra_cuda_available())
        SKIP("no CUDA device");
    hydra_model *m = NULL;
    CHECK_OK(mtp_model(&m));
    hydra_session *ts[2] = {NULL, NULL};
    mtp_drafter *md[2] = {NULL, NULL};
    static const hydra_backend backends[2] = {HYDRA_BACKEND_CPU, HYDRA_BACKEND_CUDA};
    hydra_status st = HYDRA_OK;
    for (int b = 0; b < 2 && st == HYDRA_OK; b++) {
        st = make_session_on(m, 64, backends[b], &ts[b]);
        if (st == HYDRA_OK)
            st = mtp_new(ts[b], &md[b]);
        if (st == HYDRA_OK)
            st = hydra_session_eval(ts[b], prompt, N_PROMPT - 1, NULL);
        if (st == HYDRA_OK)
            st = mtp_sync(md[b], prompt, N_PROMPT - 1);
    }
    const int64_t nv = st == HYDRA_OK ? hydra_session_n_vocab(ts[0]) : 0;
    const double sync_diff = st == HYDRA_OK ? rel_diff(mtp_logits(md[1]), mtp_logits(md[0]), nv) : 1;
    for (int b = 0; b < 2 && st == HYDRA_OK; b++)
        st = mtp_chain(md[b], 250);
    const double chain_diff = st == HYDRA_OK ? rel_diff(mtp_logits(md[1]), mtp_logits(md[0]), nv) : 1;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", hydra_last_error());
    for (int b = 0; b < 2; b++) {
        mtp_free(md[b]);
        hydra_session_free(ts[b]);
    }
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s", msg);
    printf("    catch-up row: %.2e, chained row: %.2e (largest difference over the largest logit)\n", sync_diff,
           chain_diff);
    CHECK(sync_diff < 1e-3);
    CHECK(chain_diff < 1e-3);
}

/* Speculative steps on the GPU after a warm-up capture no graph: the
 * verify pass keeps one width, the MTP block's catch-up rows are padded to
 * it, its chained rows are single rows; with drafts that always agree (the
 * zeroed head norms of spec_mtp_keeps_every_draft_when_they_agree) and
 * with drafts that never do (random weights). */
TEST(cuda_spec_mtp_steady_state_captures_no_graph)
{
    if (!hydra_cuda_available())
        SKIP("no CUDA device");
    const char *agree_path = util_scratch_path("spec-mtp-agree-cuda.gguf");
    CHECK_OK(write_edited_mtp_model(agree_path, zero_head_norms));
    hydra_model *models[2] = {NULL, NULL};
    CHECK_OK(mtp_model(&models[0]));
    CHECK_OK(util_open_model(agree_path, &models[1]));
    const hydra_sampler_params sp = util_greedy_params();
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 3;
    pp.p_min = 0;
    hydra_status st = HYDRA_OK;
    hydra_spec_stats warm[2] = {{0}}, done[2] = {{0}};
    for (int k = 0; k < 2 && st == HYDRA_OK; k++) {
        hydra_session *s = NULL;
        hydra_spec *spec = NULL;
        hydra_token out[8];
        size_t got = 0;
        st = make_session_on(models[k], 64, HYDRA_BACKEND_CUDA, &s);
        if (st == HYDRA_OK)
            st = hydra_spec_new(s, NULL, &sp, &pp, &spec);
        if (st == HYDRA_OK)
            st = hydra_spec_start(spec, prompt, N_PROMPT);
        for (int i = 0; st == HYDRA_OK && i < 16; i++) {
            if (i == 4)
                hydra_spec_get_stats(spec, &warm[k]);
            st = hydra_spec_step(spec, 8, out, &got);
        }
        hydra_spec_get_stats(spec, &done[k]);
        hydra_spec_free(spec);
        hydra_session_free(s);
    }
    hydra_model_close(models[0]);
    hydra_model_close(models[1]);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    for (int k = 0; k < 2; k++)
        printf("    %s drafts: %llu of %llu kept; graphs captured: %llu in the first 4 steps, %llu in the 12 after\n",
               k ? "agreeing" : "random", (unsigned long long)done[k].n_accepted,
               (unsigned long long)done[k].n_drafted, (unsigned long long)warm[k].n_captures,
               (unsigned long long)(done[k].n_captures - warm[k].n_captures));
    CHECK(warm[0].n_captures > 0);
    CHECK_EQ_U64(done[0].n_captures, warm[0].n_captures);
    CHECK_EQ_U64(done[1].n_captures, warm[1].n_captures);
    CHECK(done[1].n_accepted == done[1].n_drafted);
    CHECK_EQ_INT(done[0].n_widths, 1);
}
