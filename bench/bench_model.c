/*
 * bench_model.c — hydra-bench -m FILE: the whole model, in llama-bench's
 * conventions.  Test ppN evaluates N random tokens in one batch from an
 * empty context; tgN decodes N random tokens one at a time from an empty
 * context; t/s is tokens over wall time, mean ± sample standard deviation
 * over -r repetitions after one untimed warm-up run of each test (which
 * also faults the mapped weights in).
 *
 * Beside llama-bench's columns: the probe GB/s measured by one probe pass
 * just before every repetition of the row (median), and for tg the weight
 * bytes a decoded token reads times the median t/s, as GB/s and as a share
 * of that probe median.  A decoded token reads every matrix whole except
 * the expert tensors (n_expert_used of n_expert experts per layer) and the
 * token embeddings (one row).
 */
#include "bench.h"

#include "hydra.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* After a timed run the session's workers spin a while before sleeping
 * (src/threads.c); the probe waits this long so they do not share its
 * cores. */
enum { SETTLE_NS = 20 * 1000 * 1000 };

typedef struct model_facts {
    char desc[160];
    double gib, params_b;
    double token_bytes; /* weight bytes a decoded token reads */
    uint32_t n_vocab;
} model_facts;

/* llama.cpp's names of general.file_type (enum llama_ftype), as
 * llama-bench prints them. */
static const struct {
    uint32_t id;
    const char *name;
} file_types[] = {
    {0, "all F32"},       {1, "F16"},           {2, "Q4_0"},         {3, "Q4_1"},          {7, "Q8_0"},
    {8, "Q5_0"},          {9, "Q5_1"},          {10, "Q2_K - Medium"}, {11, "Q3_K - Small"}, {12, "Q3_K - Medium"},
    {13, "Q3_K - Large"}, {14, "Q4_K - Small"}, {15, "Q4_K - Medium"}, {16, "Q5_K - Small"}, {17, "Q5_K - Medium"},
    {18, "Q6_K"},         {25, "IQ4_NL - 4.5 bpw"}, {30, "IQ4_XS - 4.25 bpw"}, {32, "BF16"}, {38, "MXFP4 MoE"},
};

static const char *file_type_name(const hydra_model *m)
{
    uint64_t ft;
    if (hydra_model_get_u64(m, "general.file_type", &ft) != HYDRA_OK)
        return "?";
    for (size_t i = 0; i < sizeof file_types / sizeof file_types[0]; i++)
        if (file_types[i].id == ft)
            return file_types[i].name;
    return "?";
}

static uint64_t arch_u64(const hydra_model *m, const char *suffix)
{
    char key[128];
    uint64_t v = 0;
    snprintf(key, sizeof key, "%s.%s", hydra_model_arch(m), suffix);
    hydra_model_get_u64(m, key, &v);
    return v;
}

static void describe(const hydra_model *m, model_facts *f)
{
    snprintf(f->desc, sizeof f->desc, "%s %s", hydra_model_arch(m), file_type_name(m));
    f->gib = (double)hydra_model_n_bytes(m) / (1024.0 * 1024.0 * 1024.0);
    f->params_b = (double)hydra_model_n_params(m) / 1e9;
    const double n_expert = (double)arch_u64(m, "expert_count"), n_used = (double)arch_u64(m, "expert_used_count");
    f->token_bytes = 0;
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info ti;
        if (hydra_model_tensor_at(m, i, &ti) != HYDRA_OK)
            continue;
        double bytes = (double)ti.n_bytes;
        if (strcmp(ti.name, "token_embd.weight") == 0) {
            bytes /= (double)(ti.n_elements / ti.ne[0]);
            f->n_vocab = (uint32_t)(ti.n_elements / ti.ne[0]);
        } else if (strstr(ti.name, "_exps.") != NULL && n_expert > 0) {
            bytes *= n_used / n_expert;
        }
        f->token_bytes += bytes;
    }
}

/* xorshift64: random token ids, as llama-bench feeds random tokens. */
static void random_tokens(int32_t *tok, int n, uint32_t n_vocab)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int32_t)(s % n_vocab);
    }
}

typedef struct bench_test {
    bool gen;   /* tg: one token at a time */
    int n;
    const int32_t *tokens;
} bench_test;

/* One run from an empty context: tokens per second, or -1 on failure. */
static double run_once(hydra_session *s, const bench_test *t)
{
    hydra_session_clear(s);
    double t0 = bench_now();
    hydra_status st = HYDRA_OK;
    if (t->gen)
        for (int i = 0; i < t->n && st == HYDRA_OK; i++)
            st = hydra_session_decode(s, t->tokens[i]);
    else
        st = hydra_session_eval(s, t->tokens, (size_t)t->n, NULL);
    double dt = bench_now() - t0;
    if (st != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s\n", hydra_last_error());
        return -1;
    }
    return t->n / dt;
}

static void settle(void)
{
    struct timespec ts = {0, SETTLE_NS};
    nanosleep(&ts, NULL);
}

static bool run_test(hydra_session *s, bench_probe *probe, const bench_test *t, const bench_options *o,
                     const model_facts *f)
{
    double tps[BENCH_MAX_REPS], probe_gbs[BENCH_MAX_REPS];
    if (run_once(s, t) < 0) /* warm-up */
        return false;
    for (int r = 0; r < o->reps; r++) {
        settle();
        probe_gbs[r] = bench_probe_pass(probe);
        if ((tps[r] = run_once(s, t)) < 0)
            return false;
    }
    bench_stats ts = bench_summarise(tps, o->reps), ps = bench_summarise(probe_gbs, o->reps);
    char test[32], weights[32], share[32];
    snprintf(test, sizeof test, "%s%d", t->gen ? "tg" : "pp", t->n);
    snprintf(weights, sizeof weights, "-");
    snprintf(share, sizeof share, "-");
    if (t->gen) {
        double gbs = f->token_bytes * ts.median / 1e9;
        snprintf(weights, sizeof weights, "%.2f", gbs);
        snprintf(share, sizeof share, "%.1f%%", 100.0 * gbs / ps.median);
    }
    printf("| %s | %.2f GiB | %.2f B | CPU | %d | %s | %.2f ± %.2f | %.2f | %s | %.2f | %s |\n", f->desc, f->gib,
           f->params_b, o->threads, test, ts.mean, ts.sd, ts.median, weights, ps.median, share);
    fflush(stdout);
    return true;
}

static hydra_status open_session(const hydra_model *m, const bench_options *o, hydra_session **s)
{
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = (uint32_t)(o->prompt + o->gen + 1);
    sp.n_batch = o->prompt > 0 ? (uint32_t)o->prompt : 1;
    sp.n_threads = o->threads;
    return hydra_session_create(s, m, &sp);
}

int bench_model(const bench_options *o, bench_probe *probe)
{
    hydra_model_params mp = hydra_model_default_params();
    mp.path = o->model;
    hydra_model *m = NULL;
    hydra_session *s = NULL;
    if (hydra_model_open(&m, &mp) != HYDRA_OK || open_session(m, o, &s) != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s: %s\n", o->model, hydra_last_error());
        hydra_model_close(m);
        return 1;
    }
    model_facts f = {0};
    describe(m, &f);
    int n_tok = o->prompt > o->gen ? o->prompt : o->gen;
    int32_t *tokens = malloc(sizeof *tokens * (size_t)(n_tok > 0 ? n_tok : 1));
    int rc = tokens == NULL || f.n_vocab == 0 ? 1 : 0;
    if (rc == 0) {
        random_tokens(tokens, n_tok, f.n_vocab);
        printf("weights read per decoded token: %.3f GB; t/s: mean ± sd and median; probe: median of the probe\n"
               "passes run before each repetition of the row; weights GB/s: per-token weight bytes x median t/s.\n\n",
               f.token_bytes / 1e9);
        printf("| model | size | params | backend | threads | test | t/s | median | weights GB/s | probe GB/s | "
               "of probe |\n");
        printf("| ----- | ---: | -----: | ------- | ------: | ---: | --: | -----: | -----------: | ---------: | "
               "-------: |\n");
        const bench_test pp = {false, o->prompt, tokens}, tg = {true, o->gen, tokens};
        if (o->prompt > 0 && !run_test(s, probe, &pp, o, &f))
            rc = 1;
        if (rc == 0 && o->gen > 0 && !run_test(s, probe, &tg, o, &f))
            rc = 1;
    }
    free(tokens);
    hydra_session_free(s);
    hydra_model_close(m);
    return rc;
}
