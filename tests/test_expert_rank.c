/*
 * Expert ranking (src/expert_rank.h): recording lookups, the ranking,
 * profile save -> load, and the pin-file parser — every malformed kind
 * with its own message naming the line, empty and full files, and random
 * bytes that must never crash it.
 */
#include "expert_rank.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <stdlib.h>

enum { N_LAYER = 4, N_EXPERT = 8 };

/* Layers 0, 2, 3 have experts; layer 1 is dense. */
static const uint8_t moe_layers[N_LAYER] = {1, 0, 1, 1};

static hydra_status parse(expert_rank *r, const char *text)
{
    return expert_rank_parse(r, text, strlen(text), "pins.txt");
}

TEST(expert_rank_add_counts_lookups)
{
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, N_LAYER, N_EXPERT, moe_layers));
    const moe_route routes[6] = {{0, 3, .5f}, {0, 1, .5f}, {1, 3, .5f}, {1, 7, .5f}, {2, 3, .5f}, {2, 1, .5f}};
    expert_rank_add(&r, 2, routes, 6, 2);
    expert_rank_add(&r, 2, routes, 2, 2);
    CHECK_EQ_U64(expert_rank_count(&r, 2, 3), 4);
    CHECK_EQ_U64(expert_rank_count(&r, 2, 1), 3);
    CHECK_EQ_U64(expert_rank_count(&r, 2, 7), 1);
    CHECK_EQ_U64(expert_rank_count(&r, 0, 3), 0);
    CHECK_EQ_U64(r.tokens[2], 4);
    CHECK_EQ_U64(expert_rank_lookups(&r, 2), 8);
    int32_t ids[N_EXPERT];
    expert_rank_order(&r, 2, ids);
    const int32_t want[N_EXPERT] = {3, 1, 7, 0, 2, 4, 5, 6}; /* ties to the lower id */
    for (int i = 0; i < N_EXPERT; i++)
        CHECK_EQ_INT(ids[i], want[i]);
    CHECK(expert_rank_coverage(&r, 2, 1) == 0.5);
    CHECK(expert_rank_coverage(&r, 2, 2) == 7.0 / 8.0);
    CHECK_EQ_INT(expert_rank_pinned(&r, 2), 3);
    expert_rank_free(&r);
}

TEST(expert_rank_parses_pins_and_merges_duplicates)
{
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, N_LAYER, N_EXPERT, moe_layers));
    CHECK_OK(parse(&r, "# a pin list\n0 5\n\t0 2 10  # hot\r\n3 7 0\n\n0 5 4\n  # done"));
    CHECK_EQ_U64(expert_rank_count(&r, 0, 5), 5); /* 1 (no count) + 4: duplicates add up */
    CHECK_EQ_U64(expert_rank_count(&r, 0, 2), 10);
    CHECK_EQ_U64(expert_rank_count(&r, 3, 7), 0);
    CHECK_EQ_INT(expert_rank_pinned(&r, 0), 2);
    CHECK_EQ_INT(expert_rank_pinned(&r, 3), 0);
    char line[EXPERT_RANK_SUMMARY];
    const uint64_t bytes[N_LAYER] = {1u << 29, 0, 1u << 29, 1u << 29};
    expert_rank_summary(&r, bytes, line, sizeof line);
    CHECK_EQ_STR(line, "expert ranking: 3 MoE layers x 8 experts, 2 pinned (0.7 per layer), 1.00 GiB");
    expert_rank_free(&r);
}

TEST(expert_rank_empty_and_full_files)
{
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, N_LAYER, N_EXPERT, moe_layers));
    CHECK_OK(parse(&r, ""));
    char line[EXPERT_RANK_SUMMARY];
    expert_rank_summary(&r, NULL, line, sizeof line);
    CHECK_EQ_STR(line, "expert ranking: 3 MoE layers x 8 experts, 0 pinned (0.0 per layer)");
    char full[2048] = "";
    for (int l = 0; l < N_LAYER; l++)
        for (int e = 0; moe_layers[l] && e < N_EXPERT; e++)
            snprintf(full + strlen(full), sizeof full - strlen(full), "%d %d %d\n", l, e, 100 - e);
    CHECK_OK(parse(&r, full));
    for (int l = 0; l < N_LAYER; l++)
        CHECK_EQ_INT(expert_rank_pinned(&r, l), moe_layers[l] ? N_EXPERT : 0);
    expert_rank_summary(&r, NULL, line, sizeof line);
    CHECK_EQ_STR(line, "expert ranking: 3 MoE layers x 8 experts, 24 pinned (8.0 per layer)");
    expert_rank_free(&r);
}

/* Each malformed kind: its text, the words of its reason. */
static const struct {
    const char *text;
    const char *reason;
} malformed[] = {
    {"0 1\n0 x 3\n", "pins.txt:2: not a decimal number: expert 'x'"},
    {"0 1\n2\n", "pins.txt:2: expected LAYER EXPERT [COUNT], found one field"},
    {"0 1\n0 1 2 3\n", "pins.txt:2: expected LAYER EXPERT [COUNT], found more than three fields"},
    {"0 1\n4 1\n", "pins.txt:2: unknown layer 4 (the model has layers 0 .. 3)"},
    {"0 1\n1 1\n", "pins.txt:2: no experts in layer 1 (a dense block)"},
    {"0 1\n0 8\n", "pins.txt:2: unknown expert 8 (layers have experts 0 .. 7)"},
    {"0 1\n0 2 -5\n", "pins.txt:2: negative count '-5'"},
    {"0 1\n-1 2\n", "pins.txt:2: negative id '-1'"},
    {"0 1\n0 2 18446744073709551616\n", "pins.txt:2: number too large: count '18446744073709551616'"},
    {"0 1 18446744073709551615\n0 1 1\n", "pins.txt:2: count overflows 64 bits"},
    {"0 1\n0 2 3 \x01\n", "pins.txt:2: not text (byte 0x01 at column 7)"},
    {"0 1\n0 2 0x10\n", "pins.txt:2: not a decimal number: count '0x10'"},
    {"0 1\n0 99999999999 1\n", "pins.txt:2: number too large: expert '99999999999'"},
};

TEST(expert_rank_each_malformed_line_has_its_message)
{
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, N_LAYER, N_EXPERT, moe_layers));
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        hydra_status st = parse(&r, malformed[i].text);
        if (st != HYDRA_ERR_FORMAT || strstr(hydra_last_error(), malformed[i].reason) == NULL) {
            expert_rank_free(&r);
            FAIL("case %zu: status %d, message '%s', want '%s'", i, (int)st, hydra_last_error(), malformed[i].reason);
        }
        CHECK_EQ_U64(expert_rank_count(&r, 0, 1), 0); /* a failed load leaves no counts */
    }
    expert_rank_free(&r);
}

TEST(expert_rank_rejects_long_lines_and_nul_bytes)
{
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, N_LAYER, N_EXPERT, moe_layers));
    char text[EXPERT_RANK_MAX_LINE + 16];
    memset(text, ' ', sizeof text);
    memcpy(text, "0 1\n0 1", 7);
    text[sizeof text - 1] = '\n';
    CHECK_EQ_INT(expert_rank_parse(&r, text, sizeof text, "long.txt"), HYDRA_ERR_FORMAT);
    CHECK(strstr(hydra_last_error(), "long.txt:2: line too long (267 bytes, at most 256)") != NULL);
    const char nul[] = "0 1\n\n0 2\0 3\n";
    CHECK_EQ_INT(expert_rank_parse(&r, nul, sizeof nul - 1, "nul.txt"), HYDRA_ERR_FORMAT);
    CHECK(strstr(hydra_last_error(), "nul.txt:3: not text (byte 0x00 at column 4)") != NULL);
    expert_rank_free(&r);
}

TEST(expert_rank_unreadable_file_fails)
{
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, N_LAYER, N_EXPERT, moe_layers));
    CHECK_EQ_INT(expert_rank_load(&r, "/nonexistent/pins.txt"), HYDRA_ERR_IO);
    CHECK(strstr(hydra_last_error(), "/nonexistent/pins.txt: cannot read") != NULL);
    CHECK_EQ_INT(expert_rank_load(&r, "/"), HYDRA_ERR_IO); /* a directory */
    expert_rank_free(&r);
}

/* Random counts -> save -> load give the same counts. */
TEST(expert_rank_save_load_round_trip)
{
    expert_rank a, b;
    CHECK_OK(expert_rank_init(&a, N_LAYER, N_EXPERT, moe_layers));
    CHECK_OK(expert_rank_init(&b, N_LAYER, N_EXPERT, moe_layers));
    uint64_t state = 12345;
    for (int l = 0; l < N_LAYER; l++)
        for (int e = 0; moe_layers[l] && e < N_EXPERT; e++) {
            state = state * 6364136223846793005u + 1442695040888963407u;
            a.count[l * N_EXPERT + e] = (state >> 33) % 4 == 0 ? 0 : state >> 20;
        }
    a.count[3 * N_EXPERT + 2] = UINT64_MAX;
    const char *path = util_scratch_path("profile.txt");
    CHECK_OK(expert_rank_save(&a, path));
    hydra_status st = expert_rank_load(&b, path);
    bool same = memcmp(a.count, b.count, sizeof *a.count * N_LAYER * N_EXPERT) == 0;
    expert_rank_free(&a);
    expert_rank_free(&b);
    CHECK_OK(st);
    CHECK(same);
}

/* Any bytes: OK or a format error, never a crash (run under SAN=1 too).
 * Half the inputs draw from the format's own alphabet so that many reach
 * the number and id checks. */
TEST(expert_rank_random_bytes_never_crash)
{
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, N_LAYER, N_EXPERT, moe_layers));
    static const char alphabet[] = "0123456789 \t\n#-\r1203 ";
    uint64_t state = 99;
    char buf[600];
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 4000; iter++) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        size_t len = (state >> 33) % sizeof buf;
        for (size_t i = 0; i < len; i++) {
            state = state * 6364136223846793005u + 1442695040888963407u;
            unsigned v = (unsigned)(state >> 40);
            buf[i] = iter % 2 ? (char)(v & 0xff) : alphabet[v % (sizeof alphabet - 1)];
        }
        hydra_status st = expert_rank_parse(&r, buf, len, "random");
        if (st != HYDRA_OK && st != HYDRA_ERR_FORMAT)
            FAIL("iteration %d: status %d", iter, (int)st);
        if (iter % 4 == 0) /* as a trace, behind a valid header */
            memcpy(buf, "trace 4 8 2\n", len > 12 ? 12 : 0);
        expert_rank tr;
        hydra_status st_trace = expert_rank_parse_trace(&tr, buf, len, "random");
        if (st_trace == HYDRA_OK)
            expert_rank_free(&tr);
        else if (st_trace != HYDRA_ERR_FORMAT)
            FAIL("iteration %d: trace status %d", iter, (int)st_trace);
        st == HYDRA_OK ? ok++ : bad++;
    }
    expert_rank_free(&r);
    CHECK(ok > 0 && bad > 0);
}

/* ------------------------------------------------------------ traces */

TEST(expert_rank_trace_round_trip_and_errors)
{
    expert_rank a, b;
    CHECK_OK(expert_rank_init(&a, N_LAYER, N_EXPERT, moe_layers));
    CHECK_OK(expert_rank_trace_init(&a, 2, 3));
    const moe_route routes[8] = {{0, 3, 0}, {0, 1, 0}, {1, 7, 0}, {1, 0, 0},
                                 {2, 2, 0}, {2, 5, 0}, {3, 6, 0}, {3, 4, 0}};
    expert_rank_add(&a, 2, routes, 8, 2); /* 4 tokens, room for 3 */
    expert_rank_add(&a, 0, routes + 2, 2, 2);
    CHECK_EQ_U64(a.trace_len[2], 3);
    CHECK_EQ_INT(expert_rank_trace_at(&a, 2, 1)[0], 7);
    const char *path = util_scratch_path("trace.txt");
    CHECK_OK(expert_rank_save_trace(&a, path));
    hydra_status st = expert_rank_load_trace(&b, path);
    bool same = st == HYDRA_OK && b.k == 2 && b.trace_len[2] == 3 && b.trace_len[0] == 1 && !b.moe[1] &&
                memcmp(expert_rank_trace_at(&b, 2, 0), expert_rank_trace_at(&a, 2, 0), 6 * sizeof(int32_t)) == 0 &&
                expert_rank_count(&b, 2, 7) == 1 && expert_rank_count(&b, 0, 7) == 1;
    expert_rank_free(&a);
    expert_rank_free(&b);
    CHECK_OK(st);
    CHECK(same);
    static const struct {
        const char *text, *reason;
    } bad[] = {
        {"0 1 2\n", "t:1: expected the header"},
        {"trace 2 8 2\n0 1\n", "t:2: expected LAYER and K expert ids"},
        {"trace 2 8 2\n0 1 1\n", "t:2: an expert twice in one token"},
        {"trace 2 8 2\n2 1 3\n", "t:2: unknown layer"},
        {"trace 2 8 2\n1 1 8\n", "t:2: unknown expert"},
        {"trace 2 8 2\n1 1 x\n", "t:2: not a decimal number"},
        {"trace 2 8 9\n", "t:1: header dimensions out of range"},
        {"# nothing\n", "no 'trace LAYERS EXPERTS K' header"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = expert_rank_parse_trace(&b, bad[i].text, strlen(bad[i].text), "t");
        if (st != HYDRA_ERR_FORMAT || strstr(hydra_last_error(), bad[i].reason) == NULL)
            FAIL("case %zu: status %d, '%s'", i, (int)st, hydra_last_error());
    }
}

/* hydra_session_set_expert_profile counts k lookups per token in every
 * MoE layer of a real pass, and the saved profile loads back as pins. */
TEST(expert_rank_session_profile)
{
    synth_params p;
    CHECK_OK(synth_preset("tiny", &p));
    hydra_model *m;
    CHECK_OK(util_open_synth(&p, "profile-tiny.gguf", &m));
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = 32, sp.n_threads = 1;
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, m, &sp);
    const int32_t tokens[5] = {1, 100, 200, 300, 7};
    if (st == HYDRA_OK)
        st = hydra_session_set_expert_profile(s, true, 16);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, tokens, 5, NULL);
    if (st == HYDRA_OK)
        st = hydra_session_decode(s, 9);
    const char *prof = util_scratch_path("profile-tiny.txt");
    if (st == HYDRA_OK)
        st = hydra_session_save_expert_profile(s, prof, false);
    hydra_session_free(s);
    hydra_model_close(m);
    CHECK_OK(st);
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, (int)p.n_layer, (int)p.n_expert, NULL));
    st = expert_rank_load(&r, prof);
    uint64_t lookups0 = expert_rank_lookups(&r, 0), lookups1 = expert_rank_lookups(&r, 1);
    expert_rank_free(&r);
    CHECK_OK(st);
    CHECK_EQ_U64(lookups0, 6 * p.n_expert_used);
    CHECK_EQ_U64(lookups1, 6 * p.n_expert_used);
}
