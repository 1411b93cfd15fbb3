/*
 * The CPU-only hybrid split (HYDRA_HYBRID_CPU_SPLIT) through the public
 * API, on the tiny models of ../shared/models: with 0%, 50% and 100% of
 * every MoE layer's experts in the host slab, the prompt's logits (one
 * batch) must equal the un-split engine's within the model's bars in
 * ../shared/ref/tolerances.json (and still pass llama.cpp's reference),
 * and the 32-token greedy continuation (decode steps) must be the same
 * tokens.  With no expert resident the split computes exactly what the
 * un-split engine does, so its logits are bit-identical.  One test per
 * architecture; the quantised files put real block layouts in the slab.
 */
#include "hydra.h"
#include "refcheck.h"
#include "test.h"
#include "util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_CTX = 512, N_FRACTIONS = 3 };

static const double fractions[N_FRACTIONS] = {0.0, 0.5, 1.0};

/* One configuration's outputs. */
typedef struct run_out {
    float *rows;               /* REF_PROMPT x n_vocab */
    int32_t greedy[REF_GREEDY];
    hydra_hybrid_stats stats;
} run_out;

/* The prompt in one batch (every row's logits), then greedy decode. */
static hydra_status run(hydra_model *m, const ref_case *r, hydra_hybrid_mode mode, double fraction, run_out *out)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = N_CTX;
    p.n_threads = 2;
    p.kv_type = HYDRA_KV_F32;
    p.hybrid = mode;
    p.resident_fraction = fraction;
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, m, &p);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, r->prompt, REF_PROMPT, out->rows);
    for (int i = 0; i < REF_GREEDY && st == HYDRA_OK; i++) {
        out->greedy[i] = ref_argmax(hydra_session_logits(s), r->n_vocab);
        st = hydra_session_decode(s, out->greedy[i]);
    }
    if (st == HYDRA_OK)
        st = hydra_session_hybrid_stats(s, &out->stats);
    hydra_session_free(s);
    return st;
}

static bool bit_identical(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, sizeof(float) * n) == 0;
}

static void check_split(test_ctx *t_, const char *name)
{
    REQUIRE_SHARED();
    ref_case r = {0};
    if (!ref_load(name, &r))
        FAIL("%s: cannot read its reference or tolerances", name);
    char path[512];
    float *want = ref_read_logits(ref_logits_path(name, path, sizeof path), r.n_vocab, NULL);
    hydra_model *m = NULL;
    const size_t n_rows = (size_t)REF_PROMPT * (size_t)r.n_vocab;
    run_out base = {.rows = malloc(sizeof(float) * n_rows)}, split = {.rows = malloc(sizeof(float) * n_rows)};
    hydra_status st = want && base.rows && split.rows ? util_open_shared_model(name, &m) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = run(m, &r, HYDRA_HYBRID_OFF, 0.0, &base);
    char fails[1024] = "";
    for (int f = 0; f < N_FRACTIONS && st == HYDRA_OK; f++) {
        if ((st = run(m, &r, HYDRA_HYBRID_CPU_SPLIT, fractions[f], &split)) != HYDRA_OK)
            break;
        const ref_score vs_base = ref_score_rows(base.rows, split.rows, REF_PROMPT, r.n_vocab);
        const ref_score vs_ref = ref_score_rows(want, split.rows, REF_PROMPT, r.n_vocab);
        const bool same_greedy = memcmp(base.greedy, split.greedy, sizeof base.greedy) == 0;
        const bool exact = bit_identical(base.rows, split.rows, n_rows);
        printf("  %s %3.0f%% resident (%" PRIu64 " of %" PRIu64 " slots): KL vs un-split %.3g, vs llama.cpp %.3g, "
               "top-1 %.3f, greedy %s, %s\n", name, 100 * fractions[f], split.stats.n_resident,
               split.stats.n_experts, vs_base.kl, vs_ref.kl, vs_base.top1, same_greedy ? "same" : "DIFFERS",
               exact ? "bit-identical" : "not bit-identical");
        if (!ref_passes(&r, vs_base) || !ref_passes(&r, vs_ref) || !same_greedy || (fractions[f] == 0.0 && !exact))
            snprintf(fails + strlen(fails), sizeof fails - strlen(fails), " %.0f%%", 100 * fractions[f]);
    }
    const char *err = hydra_last_error();
    hydra_model_close(m);
    free(base.rows);
    free(split.rows);
    free(want);
    if (st != HYDRA_OK)
        FAIL("%s: %s: %s", name, hydra_strerror(st), err);
    if (fails[0] != '\0')
        FAIL("%s: the split differs from the un-split engine at%s resident", name, fails);
}

TEST(hybrid_split_matches_unsplit_qwen3moe)
{
    check_split(t_, "qwen3moe-tiny-q8_0");
}

TEST(hybrid_split_matches_unsplit_mixtral)
{
    check_split(t_, "mixtral-tiny-q4_0");
}

TEST(hybrid_split_matches_unsplit_qwen2moe_shared_expert)
{
    check_split(t_, "qwen2moe-tiny-q8_0");
}

TEST(hybrid_split_matches_unsplit_deepseek2)
{
    check_split(t_, "deepseek2-tiny-q8_0");
}

TEST(hybrid_split_matches_unsplit_gptoss_expert_biases)
{
    check_split(t_, "gptoss-tiny-mxfp4");
}

TEST(hybrid_split_matches_unsplit_qwen3moe_k_quants)
{
    check_split(t_, "qwen3moe-kq-q4_k_m");
}

/* --- counters, batches, parameters */

static hydra_status split_session(hydra_model *m, double fraction, hydra_session **s)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = N_CTX;
    p.n_batch = 64;
    p.n_threads = 2;
    p.hybrid = HYDRA_HYBRID_CPU_SPLIT;
    p.resident_fraction = fraction;
    return hydra_session_create(s, m, &p);
}

enum { N_DECODE = 10 };

/* Prompt (prefill steps), then N_DECODE decode steps; the counters. */
static hydra_status counted_run(hydra_model *m, const ref_case *r, double fraction, hydra_hybrid_stats *st,
                                hydra_hybrid_layer_stats *sum)
{
    hydra_session *s = NULL;
    hydra_status rc = split_session(m, fraction, &s);
    if (rc == HYDRA_OK)
        rc = hydra_session_eval(s, r->prompt, REF_PROMPT, NULL);
    for (int i = 0; i < N_DECODE && rc == HYDRA_OK; i++)
        rc = hydra_session_decode(s, r->greedy[i]);
    if (rc == HYDRA_OK)
        rc = hydra_session_hybrid_stats(s, st);
    memset(sum, 0, sizeof *sum);
    for (uint32_t l = 0; rc == HYDRA_OK && (rc = hydra_session_hybrid_layer_stats(s, l, &sum[1])) == HYDRA_OK; l++) {
        sum->lookups += sum[1].lookups;
        sum->hits += sum[1].hits;
        sum->prefill_lookups += sum[1].prefill_lookups;
        sum->n_resident += sum[1].n_resident;
    }
    if (rc == HYDRA_ERR_RANGE) /* past the last layer */
        rc = HYDRA_OK;
    hydra_session_free(s);
    return rc;
}

TEST(hybrid_counters_engaged_hits_plus_misses_are_lookups)
{
    REQUIRE_SHARED();
    ref_case r;
    CHECK(ref_load("qwen3moe-tiny-q8_0", &r));
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    hydra_hybrid_stats st[N_FRACTIONS];
    hydra_hybrid_layer_stats sum[N_FRACTIONS][2];
    hydra_status rc = HYDRA_OK;
    for (int f = 0; f < N_FRACTIONS && rc == HYDRA_OK; f++)
        rc = counted_run(m, &r, fractions[f], &st[f], sum[f]);
    hydra_model_close(m);
    CHECK_OK(rc);
    for (int f = 0; f < N_FRACTIONS; f++) {
        CHECK_EQ_INT(st[f].mode, HYDRA_HYBRID_CPU_SPLIT);
        CHECK(st[f].n_moe_layers > 0);
        CHECK_EQ_U64(st[f].decode_tokens, N_DECODE);
        /* k lookups per token per MoE layer, the same k in prefill and decode */
        CHECK(st[f].lookups > 0 && st[f].lookups % (N_DECODE * st[f].n_moe_layers) == 0);
        CHECK_EQ_U64(st[f].prefill_lookups / REF_PROMPT, st[f].lookups / N_DECODE);
        CHECK(st[f].hits <= st[f].lookups && st[f].prefill_hits <= st[f].prefill_lookups);
        CHECK(st[f].miss_ns + st[f].hit_ns > 0);
        CHECK_EQ_U64(sum[f][0].lookups, st[f].lookups);
        CHECK_EQ_U64(sum[f][0].hits, st[f].hits);
        CHECK_EQ_U64(sum[f][0].prefill_lookups, st[f].prefill_lookups);
        CHECK_EQ_U64((uint64_t)sum[f][0].n_resident, st[f].n_resident);
        CHECK_EQ_U64(st[f].h2d_bytes, 0); /* nothing crosses a bus on the CPU */
    }
    CHECK_EQ_U64(st[0].hits + st[0].prefill_hits, 0);
    CHECK(st[1].hits > 0 && st[1].hits < st[1].lookups);
    CHECK_EQ_U64(st[2].hits, st[2].lookups);
    CHECK_EQ_U64(st[2].prefill_hits, st[2].prefill_lookups);
    CHECK_EQ_U64(st[2].n_resident, st[2].n_experts);
    CHECK(st[1].slab_bytes > 0 && st[1].slab_bytes < st[2].slab_bytes);
}

TEST(hybrid_counters_off_report_zero_and_reset)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    hydra_session *off = NULL, *split = NULL;
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 64;
    p.n_threads = 1;
    hydra_status rc = hydra_session_create(&off, m, &p);
    if (rc == HYDRA_OK)
        rc = split_session(m, 0.5, &split);
    const int32_t tok = 1;
    if (rc == HYDRA_OK)
        rc = hydra_session_decode(off, tok);
    if (rc == HYDRA_OK)
        rc = hydra_session_decode(split, tok);
    hydra_hybrid_stats a = {.lookups = 1}, b = {0}, c = {.lookups = 1};
    if (rc == HYDRA_OK)
        rc = hydra_session_hybrid_stats(off, &a);
    if (rc == HYDRA_OK)
        rc = hydra_session_hybrid_stats(split, &b);
    hydra_session_hybrid_reset_stats(split);
    if (rc == HYDRA_OK)
        rc = hydra_session_hybrid_stats(split, &c);
    hydra_session_free(off);
    hydra_session_free(split);
    hydra_model_close(m);
    CHECK_OK(rc);
    CHECK_EQ_INT(a.mode, HYDRA_HYBRID_OFF);
    CHECK_EQ_U64(a.lookups + a.n_slots + a.decode_tokens, 0);
    CHECK(b.lookups > 0 && b.decode_tokens == 1);
    CHECK_EQ_U64(c.lookups + c.decode_tokens + c.hit_ns + c.miss_ns, 0);
    CHECK_EQ_U64(c.n_slots, b.n_slots); /* tables stay */
    CHECK_EQ_INT(hydra_session_hybrid_stats(NULL, &a), HYDRA_ERR_INVALID_ARG);
}

enum { N_SEQ = 3 };

/* Prompt chunks of different lengths, then decode steps, of N_SEQ split
 * sessions through one hydra_session_eval_batch per step (forward_seqs)
 * and of N_SEQ sessions alone: the same logits, bit for bit. */
TEST(hybrid_split_batch_of_sessions_matches_alone)
{
    REQUIRE_SHARED();
    ref_case r;
    CHECK(ref_load("qwen3moe-kq-q4_k_m", &r));
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-kq-q4_k_m", &m));
    hydra_session *batched[N_SEQ] = {0}, *alone[N_SEQ] = {0};
    hydra_status rc = HYDRA_OK;
    for (int i = 0; i < N_SEQ && rc == HYDRA_OK; i++) {
        rc = split_session(m, 0.5, &batched[i]);
        if (rc == HYDRA_OK)
            rc = split_session(m, 0.5, &alone[i]);
    }
    bool same = true;
    for (int step = 0; step < 6 && rc == HYDRA_OK; step++) {
        const int32_t *toks[N_SEQ];
        size_t n[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            n[i] = step == 0 ? (size_t)(5 + 7 * i) : 1; /* prefill of 5, 12, 19, then decode */
            toks[i] = r.prompt + 20 * i + step;
        }
        rc = hydra_session_eval_batch(batched, toks, n, N_SEQ);
        for (int i = 0; i < N_SEQ && rc == HYDRA_OK; i++)
            rc = hydra_session_eval(alone[i], toks[i], n[i], NULL);
        for (int i = 0; i < N_SEQ && rc == HYDRA_OK; i++)
            same = same && memcmp(hydra_session_logits(batched[i]), hydra_session_logits(alone[i]),
                                  sizeof(float) * (size_t)r.n_vocab) == 0;
    }
    hydra_hybrid_stats st = {0};
    if (rc == HYDRA_OK)
        rc = hydra_session_hybrid_stats(batched[0], &st);
    for (int i = 0; i < N_SEQ; i++) {
        hydra_session_free(batched[i]);
        hydra_session_free(alone[i]);
    }
    hydra_model_close(m);
    CHECK_OK(rc);
    CHECK(same);
    CHECK_EQ_U64(st.decode_tokens, 5 * N_SEQ); /* the batch ran through the first session's split */
}

TEST(hybrid_session_refuses_bad_split_parameters)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    hydra_session *s = NULL;
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 64;
    p.hybrid = HYDRA_HYBRID_CPU_SPLIT;
    p.resident_fraction = 1.5;
    const hydra_status frac = hydra_session_create(&s, m, &p);
    p.resident_fraction = 0.5;
    p.backend = HYDRA_BACKEND_CUDA;
    const hydra_status backend = hydra_session_create(&s, m, &p);
    p.backend = HYDRA_BACKEND_CPU;
    p.hybrid = (hydra_hybrid_mode)7;
    const hydra_status mode = hydra_session_create(&s, m, &p);
    hydra_model_close(m);
    CHECK_EQ_INT(frac, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(backend, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(mode, HYDRA_ERR_INVALID_ARG);
    CHECK(s == NULL);
}

/* --- pin files */

/* A session whose split follows a pin file of the given text. */
static hydra_status pinned_session(hydra_model *m, const char *text, hydra_session **s)
{
    const char *path = util_scratch_path("hybrid-pins.txt");
    if (util_write_file(path, text, strlen(text)) != 0)
        return HYDRA_ERR_IO;
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = N_CTX;
    p.n_threads = 2;
    p.kv_type = HYDRA_KV_F32;
    p.hybrid = HYDRA_HYBRID_CPU_SPLIT;
    p.pin_file = path;
    return hydra_session_create(s, m, &p);
}

/* Random pins (layer, expert, count) of every MoE layer, as text. */
static void random_pin_text(hydra_model *m, uint32_t seed, char *buf, size_t cap, uint64_t *n_pins)
{
    hydra_session *probe = NULL;
    buf[0] = '\0';
    *n_pins = 0;
    if (split_session(m, 0.0, &probe) != HYDRA_OK)
        return;
    size_t len = (size_t)snprintf(buf, cap, "# random pins, seed %u\n", seed);
    for (uint32_t l = 0;; l++) {
        hydra_hybrid_layer_stats ls;
        if (hydra_session_hybrid_layer_stats(probe, l, &ls) != HYDRA_OK)
            break;
        for (int32_t e = 0; ls.moe && e < ls.n_expert && len < cap; e++) {
            seed = seed * 1664525u + 1013904223u;
            if ((seed >> 16) % 3 == 0) {
                len += (size_t)snprintf(buf + len, cap - len, "%u %d %u\n", l, (int)e, (seed >> 8) % 50 + 1);
                ++*n_pins;
            }
        }
    }
    hydra_session_free(probe);
}

TEST(hybrid_pin_file_random_pins_match_unsplit)
{
    REQUIRE_SHARED();
    ref_case r;
    CHECK(ref_load("qwen3moe-kq-q4_k_m", &r));
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-kq-q4_k_m", &m));
    const size_t n_rows = (size_t)REF_PROMPT * (size_t)r.n_vocab;
    run_out base = {.rows = malloc(sizeof(float) * n_rows)};
    float *rows = malloc(sizeof(float) * n_rows);
    hydra_status st = base.rows && rows ? run(m, &r, HYDRA_HYBRID_OFF, 0.0, &base) : HYDRA_ERR_NOMEM;
    char text[8192];
    bool ok = true;
    for (uint32_t seed = 1; seed <= 3 && st == HYDRA_OK; seed++) {
        uint64_t n_pins;
        random_pin_text(m, seed, text, sizeof text, &n_pins);
        hydra_session *s = NULL;
        hydra_hybrid_stats hs = {0};
        st = pinned_session(m, text, &s);
        if (st == HYDRA_OK)
            st = hydra_session_eval(s, r.prompt, REF_PROMPT, rows);
        if (st == HYDRA_OK)
            st = hydra_session_hybrid_stats(s, &hs);
        hydra_session_free(s);
        const ref_score sc = ref_score_rows(base.rows, rows, REF_PROMPT, r.n_vocab);
        printf("  pin file seed %u: %" PRIu64 " pins, %" PRIu64 " resident, KL vs un-split %.3g\n", seed, n_pins,
               hs.n_resident, sc.kl);
        ok = ok && n_pins > 0 && hs.n_resident == n_pins && ref_passes(&r, sc);
    }
    hydra_model_close(m);
    free(base.rows);
    free(rows);
    CHECK_OK(st);
    CHECK(ok);
}

TEST(hybrid_pin_file_empty_and_full_pin_sets)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("mixtral-tiny-q4_0", &m));
    hydra_session *probe = NULL, *empty = NULL, *full = NULL;
    hydra_status st = split_session(m, 0.0, &probe);
    char text[4096] = "";
    size_t len = 0;
    for (uint32_t l = 0; st == HYDRA_OK; l++) {
        hydra_hybrid_layer_stats ls;
        if (hydra_session_hybrid_layer_stats(probe, l, &ls) != HYDRA_OK)
            break;
        for (int32_t e = 0; ls.moe && e < ls.n_expert; e++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%u %d\n", l, (int)e);
    }
    hydra_hybrid_stats a = {0}, b = {0};
    if (st == HYDRA_OK)
        st = pinned_session(m, "# nothing pinned\n", &empty);
    if (st == HYDRA_OK)
        st = pinned_session(m, text, &full);
    const int32_t tok[3] = {1, 2, 3};
    if (st == HYDRA_OK)
        st = hydra_session_eval(empty, tok, 3, NULL);
    if (st == HYDRA_OK)
        st = hydra_session_eval(full, tok, 3, NULL);
    if (st == HYDRA_OK)
        st = hydra_session_hybrid_stats(empty, &a);
    if (st == HYDRA_OK)
        st = hydra_session_hybrid_stats(full, &b);
    hydra_session_free(probe);
    hydra_session_free(empty);
    hydra_session_free(full);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK_EQ_U64(a.n_resident, 0);
    CHECK(a.prefill_lookups > 0 && a.prefill_hits == 0);
    CHECK_EQ_U64(b.n_resident, b.n_experts);
    CHECK_EQ_U64(b.prefill_hits, b.prefill_lookups);
}

TEST(hybrid_pin_file_errors_reach_the_session)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("mixtral-tiny-q4_0", &m));
    hydra_session *s = NULL;
    const hydra_status bad_line = pinned_session(m, "0 1\nzero one\n", &s);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", hydra_last_error());
    const hydra_status bad_expert = pinned_session(m, "0 9999\n", &s);
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = N_CTX;
    p.hybrid = HYDRA_HYBRID_CPU_SPLIT;
    p.pin_file = util_scratch_path("hybrid-no-such-pins.txt");
    const hydra_status missing = hydra_session_create(&s, m, &p);
    hydra_model_close(m);
    CHECK_EQ_INT(bad_line, HYDRA_ERR_FORMAT);
    CHECK(strstr(msg, "hybrid-pins.txt:2") != NULL);
    CHECK_EQ_INT(bad_expert, HYDRA_ERR_FORMAT);
    CHECK_EQ_INT(missing, HYDRA_ERR_IO);
    CHECK(s == NULL);
}
