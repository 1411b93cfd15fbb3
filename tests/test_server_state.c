/*
 * hydra_session_state_write / _read (hydra-serve's slot files): a session
 * restored from a saved stream continues with the same logits, bit for
 * bit, as the session that was saved (it evaluates nothing on restore), on
 * the generic attention, MLA's latent cache and gpt-oss's sliding-window
 * rings after they wrapped; damaged, short, newer or mismatched streams
 * fail naming why and leave the session cleared.
 */
#include "hydra.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_CTX = 512, N_BATCH = 32, N_PROMPT = 200, N_NEXT = 6 };

typedef struct membuf {
    uint8_t *data;
    size_t len, cap, pos;
} membuf;

static bool mem_write(void *user, const void *data, size_t n)
{
    membuf *m = user;
    if (m->len + n > m->cap) {
        size_t cap = (m->len + n) * 2;
        uint8_t *p = realloc(m->data, cap);
        if (p == NULL)
            return false;
        m->data = p;
        m->cap = cap;
    }
    memcpy(m->data + m->len, data, n);
    m->len += n;
    return true;
}

static bool mem_read(void *user, void *data, size_t n)
{
    membuf *m = user;
    if (n > m->len - m->pos)
        return false;
    memcpy(data, m->data + m->pos, n);
    m->pos += n;
    return true;
}

typedef struct fixture {
    hydra_model *model;
    hydra_session *saved, *restored;
    int32_t n_vocab;
    membuf stream;
} fixture;

static void fixture_free(fixture *fx)
{
    hydra_session_free(fx->saved);
    hydra_session_free(fx->restored);
    hydra_model_close(fx->model);
    free(fx->stream.data);
}

static hydra_status session_of(const fixture *fx, uint32_t n_ctx, uint32_t n_batch, hydra_session **out)
{
    return util_new_session(fx->model, n_ctx, n_batch, 2, out);
}

static int32_t token_of(const fixture *fx, int k)
{
    return (int32_t)((3 + k * 53) % fx->n_vocab);
}

/* A model of the preset, a session that read N_PROMPT tokens and saved
 * its state into fx->stream, and a second session of restored_ctx and
 * restored_batch. */
static hydra_status fixture_open(fixture *fx, const char *preset, uint32_t restored_ctx, uint32_t restored_batch)
{
    memset(fx, 0, sizeof *fx);
    hydra_status st = util_open_synth_preset(preset, "state", &fx->model);
    if (st == HYDRA_OK)
        st = session_of(fx, N_CTX, N_BATCH, &fx->saved);
    if (st == HYDRA_OK)
        st = session_of(fx, restored_ctx, restored_batch, &fx->restored);
    if (st != HYDRA_OK)
        return st;
    fx->n_vocab = (int32_t)hydra_session_n_vocab(fx->saved);
    int32_t prompt[N_PROMPT];
    for (int k = 0; k < N_PROMPT; k++)
        prompt[k] = token_of(fx, k);
    st = hydra_session_eval(fx->saved, prompt, N_PROMPT, NULL);
    if (st == HYDRA_OK)
        st = hydra_session_state_write(fx->saved, mem_write, &fx->stream);
    return st;
}

/* Both sessions evaluate the same N_NEXT tokens one at a time; their
 * logits must be equal bit for bit at every step. */
static bool continue_same(fixture *fx, char *why, size_t len)
{
    for (int k = 0; k < N_NEXT; k++) {
        const int32_t tok = token_of(fx, N_PROMPT + k);
        if (hydra_session_decode(fx->saved, tok) != HYDRA_OK || hydra_session_decode(fx->restored, tok) != HYDRA_OK) {
            snprintf(why, len, "decode %d: %s", k, hydra_last_error());
            return false;
        }
        const float *a = hydra_session_logits(fx->saved), *b = hydra_session_logits(fx->restored);
        if (memcmp(a, b, sizeof(float) * (size_t)fx->n_vocab) != 0) {
            snprintf(why, len, "step %d: the restored session's logits differ", k);
            return false;
        }
    }
    return true;
}

static void check_restore(test_ctx *t_, const char *preset, uint32_t restored_ctx)
{
    fixture fx;
    char why[256];
    if (fixture_open(&fx, preset, restored_ctx, N_BATCH) != HYDRA_OK) {
        fixture_free(&fx);
        FAIL("%s: %s", preset, hydra_last_error());
    }
    const bool size_ok = fx.stream.len == hydra_session_state_size(fx.saved);
    const hydra_status st = hydra_session_state_read(fx.restored, mem_read, &fx.stream);
    const bool restored = st == HYDRA_OK && hydra_session_n_past(fx.restored) == N_PROMPT &&
                          hydra_session_logits(fx.restored) == NULL && fx.stream.pos == fx.stream.len;
    const bool same = restored && continue_same(&fx, why, sizeof why);
    fixture_free(&fx);
    if (!size_ok)
        FAIL("%s: hydra_session_state_size disagrees with the bytes written", preset);
    if (!restored)
        FAIL("%s: restoring: %s", preset, st != HYDRA_OK ? hydra_last_error() : "wrong n_past, logits or length");
    if (!same)
        FAIL("%s: %s", preset, why);
}

TEST(server_state_restore_continues_qwen3moe)
{
    check_restore(TEST_CTX, "qwen3moe-tiny", N_CTX);
}

TEST(server_state_restore_continues_mla)
{
    check_restore(TEST_CTX, "deepseek2-tiny", N_CTX);
}

TEST(server_state_restore_continues_sliding_window)
{
    check_restore(TEST_CTX, "gptoss-tiny", N_CTX); /* window 128 + batch 32: the rings wrapped */
}

TEST(server_state_restore_same_rings_other_context)
{
    check_restore(TEST_CTX, "gptoss-tiny", 2 * N_CTX); /* the rings' sizes depend on window and batch only */
}

TEST(server_state_restore_into_larger_context)
{
    check_restore(TEST_CTX, "qwen3moe-tiny", 2 * N_CTX); /* no rings: any context that holds the positions */
}

/* Reading a stream cut at byte `cut` (or with byte `flip` changed) must
 * fail with `want` and leave the session cleared. */
static bool refused(fixture *fx, size_t cut, long flip, hydra_status want)
{
    membuf bad = {.data = malloc(fx->stream.len), .len = cut};
    if (bad.data == NULL)
        return false;
    memcpy(bad.data, fx->stream.data, fx->stream.len);
    if (flip >= 0)
        bad.data[flip] ^= 0x40;
    const hydra_status st = hydra_session_state_read(fx->restored, mem_read, &bad);
    free(bad.data);
    return st == want && hydra_session_n_past(fx->restored) == 0 && hydra_session_logits(fx->restored) == NULL;
}

TEST(server_state_rejects_bad_streams)
{
    fixture fx;
    if (fixture_open(&fx, "gptoss-tiny", N_CTX, N_BATCH) != HYDRA_OK) {
        fixture_free(&fx);
        FAIL("%s", hydra_last_error());
    }
    const size_t len = fx.stream.len;
    bool ok = true;
    for (size_t cut = 0; cut < len && ok; cut += cut < 200 ? 1 : len / 97)
        ok = refused(&fx, cut, -1, HYDRA_ERR_FORMAT);
    const bool magic = refused(&fx, len, 0, HYDRA_ERR_FORMAT);
    const bool version = refused(&fx, len, 8, HYDRA_ERR_UNSUPPORTED);
    const bool type = refused(&fx, len, 12, HYDRA_ERR_INVALID_ARG);
    const bool row_bytes = refused(&fx, len, 41, HYDRA_ERR_INVALID_ARG);
    const bool first = refused(&fx, len, 56 + 8, HYDRA_ERR_FORMAT); /* layer 0's first position */
    fixture_free(&fx);
    CHECK(ok);
    CHECK(magic);
    CHECK(version);
    CHECK(type);
    CHECK(row_bytes);
    CHECK(first);
}

TEST(server_state_rejects_other_ring_geometry)
{
    fixture fx;
    if (fixture_open(&fx, "gptoss-tiny", N_CTX, 2 * N_BATCH) != HYDRA_OK) {
        fixture_free(&fx);
        FAIL("%s", hydra_last_error());
    }
    const hydra_status st = hydra_session_state_read(fx.restored, mem_read, &fx.stream);
    const bool cleared = hydra_session_n_past(fx.restored) == 0;
    fixture_free(&fx);
    CHECK_EQ_INT(st, HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(hydra_last_error(), "ring") != NULL);
    CHECK(cleared);
}

TEST(server_state_rejects_too_small_context)
{
    fixture fx;
    if (fixture_open(&fx, "qwen3moe-tiny", N_PROMPT - 1, N_BATCH) != HYDRA_OK) {
        fixture_free(&fx);
        FAIL("%s", hydra_last_error());
    }
    const hydra_status st = hydra_session_state_read(fx.restored, mem_read, &fx.stream);
    fixture_free(&fx);
    CHECK_EQ_INT(st, HYDRA_ERR_RANGE);
}

static bool refuse_write(void *user, const void *data, size_t n)
{
    (void)data;
    size_t *left = user;
    if (n > *left)
        return false;
    *left -= n;
    return true;
}

TEST(server_state_writer_failure_is_io)
{
    fixture fx;
    if (fixture_open(&fx, "qwen3moe-tiny", N_CTX, N_BATCH) != HYDRA_OK) {
        fixture_free(&fx);
        FAIL("%s", hydra_last_error());
    }
    size_t room = fx.stream.len / 2; /* a disk that fills half way */
    const hydra_status st = hydra_session_state_write(fx.saved, refuse_write, &room);
    const hydra_status none = hydra_session_state_write(fx.saved, NULL, NULL);
    fixture_free(&fx);
    CHECK_EQ_INT(st, HYDRA_ERR_IO);
    CHECK_EQ_INT(none, HYDRA_ERR_INVALID_ARG);
}
