/*
 * test_cuda_logits.c — the logits' way back to the host (docs/PERFORMANCE.md
 * "the logits' return"): a step whose destination is the session's
 * page-locked row (gpu_session_logits_row) copies there directly, any other
 * destination through the staging row and a memcpy, the way every step did
 * before.  Both must give the same bits: the same position evaluated twice,
 * once each way, on one GPU and split over two (-sm layer, -sm tensor);
 * through the public API, a session's decode (its logits in the row) equals
 * another's eval into the caller's buffer.  Closing a session gives the
 * row's pinned bytes back.  Skips without a CUDA device.
 */
#include "gpu_test.h"
#include "hydra.h"
#include "quant.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 24, PROMPT = 12 };

static const char *const MODEL = "qwen3moe-tiny-q8_0";

/* Each position twice (staged into heap, then directly into the row), the
 * prompt in one step first; a message into why at the first difference. */
static hydra_status staged_vs_row(gpu_session *g, uint32_t n_vocab, char *why, size_t cap)
{
    float *row = gpu_session_logits_row(g);
    float *heap = malloc(sizeof(float) * n_vocab);
    if (row == NULL || heap == NULL) {
        free(heap);
        snprintf(why, cap, "no pinned logits row (%p) or no heap row", (void *)row);
        return HYDRA_OK;
    }
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)((i * 131 + 7) % (int)n_vocab);
    hydra_status st = HYDRA_OK;
    for (int step = 0; step <= STEPS && st == HYDRA_OK && why[0] == '\0'; step++) {
        const int64_t pos = step == 0 ? 0 : PROMPT + step - 1, n = step == 0 ? PROMPT : 1;
        const int32_t *tok = step == 0 ? prompt : &prompt[step % PROMPT];
        st = gpu_forward(g, pos, tok, n, false, heap);
        memset(row, 0xff, sizeof(float) * n_vocab); /* NaNs: a row the step did not write fails */
        if (st == HYDRA_OK)
            st = gpu_forward(g, pos, tok, n, false, row);
        if (st == HYDRA_OK && memcmp(heap, row, sizeof(float) * n_vocab) != 0)
            snprintf(why, cap, "step %d (position %lld): the row's logits differ from the staged copy's", step,
                     (long long)pos);
    }
    free(heap);
    return st;
}

static void check_staged_vs_row(test_ctx *t_, const gpu_options *o, const char *desc)
{
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model(MODEL, &m));
    model_weights w;
    CHECK_OK(weights_bind(&w, m));
    gpu_session *g = NULL;
    char why[200] = "";
    hydra_status st = gpu_session_create(&g, &w, o);
    if (st == HYDRA_OK)
        st = staged_vs_row(g, w.hp.n_vocab, why, sizeof why);
    gpu_session_free(g);
    weights_free(&w);
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s: %s: %s", desc, hydra_strerror(st), hydra_last_error());
    if (why[0] != '\0')
        FAIL("%s: %s", desc, why);
    printf("  %s: %d steps, the pinned row's logits equal the staged copy's bit for bit\n", desc, STEPS + 1);
}

TEST(cuda_logits_row_equals_staged_copy)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    const gpu_options graphs = {.n_ctx = 256, .n_batch = 64, .kv_type = QT_F16, .graphs = true};
    const gpu_options plain = {.n_ctx = 256, .n_batch = 64, .kv_type = QT_F16, .graphs = false};
    check_staged_vs_row(TEST_CTX, &graphs, "one GPU, graphs");
    check_staged_vs_row(TEST_CTX, &plain, "one GPU, no graphs");
}

TEST(cuda_multi_logits_row_equals_staged_copy)
{
    REQUIRE_GPU();
    if (gpu_device_count() < 2)
        SKIP("%d CUDA device present, the split needs 2", gpu_device_count());
    REQUIRE_SHARED();
    const gpu_options layer = {.n_ctx = 256, .n_batch = 64, .kv_type = QT_F16, .graphs = true,
                               .split = {.mode = HYDRA_SPLIT_LAYER}};
    const gpu_options tensor = {.n_ctx = 256, .n_batch = 64, .kv_type = QT_F16, .graphs = true,
                                .split = {.mode = HYDRA_SPLIT_TENSOR}};
    check_staged_vs_row(TEST_CTX, &layer, "-sm layer");
    check_staged_vs_row(TEST_CTX, &tensor, "-sm tensor");
}

static hydra_session_params cuda_params(void)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 256;
    p.backend = HYDRA_BACKEND_CUDA;
    return p;
}

/* Public API: a session's decode keeps its logits in the row; another
 * session's eval of the same tokens into the caller's buffer (every row
 * copied there directly) must give the same bits, and its kept logits too. */
TEST(cuda_session_decode_logits_equal_eval_into_buffer)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model(MODEL, &m));
    const hydra_session_params p = cuda_params();
    hydra_session *a = NULL, *b = NULL;
    hydra_status st = hydra_session_create(&a, m, &p);
    if (st == HYDRA_OK)
        st = hydra_session_create(&b, m, &p);
    const uint32_t n_vocab = hydra_session_n_vocab(a);
    float *buf = malloc(sizeof(float) * n_vocab);
    char why[200] = "";
    for (int i = 0; i < STEPS && st == HYDRA_OK && buf != NULL && why[0] == '\0'; i++) {
        const int32_t tok = (int32_t)((i * 977 + 3) % (int)n_vocab);
        st = hydra_session_decode(a, tok);
        if (st == HYDRA_OK)
            st = hydra_session_eval(b, &tok, 1, buf);
        if (st != HYDRA_OK)
            break;
        if (memcmp(hydra_session_logits(a), buf, sizeof(float) * n_vocab) != 0)
            snprintf(why, sizeof why, "token %d: decode's logits differ from eval's into the caller's buffer", i);
        else if (memcmp(hydra_session_logits(b), buf, sizeof(float) * n_vocab) != 0)
            snprintf(why, sizeof why, "token %d: eval's kept logits differ from its caller's buffer", i);
    }
    free(buf);
    hydra_session_free(a);
    hydra_session_free(b);
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s: %s", hydra_strerror(st), hydra_last_error());
    CHECK(buf != NULL);
    if (why[0] != '\0')
        FAIL("%s", why);
}

/* The row is pinned memory the session holds (with the staging row, at
 * least two rows of pinned bytes) and gives back when closed. */
TEST(cuda_session_close_frees_pinned_logits)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model(MODEL, &m));
    const hydra_session_params p = cuda_params();
    uint64_t before[GPU_MEM_COUNT], open[GPU_MEM_COUNT], after[GPU_MEM_COUNT];
    gpu_mem_usage(before);
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, m, &p);
    gpu_mem_usage(open);
    const uint64_t two_rows = 2ull * sizeof(float) * hydra_session_n_vocab(s);
    const int32_t tok = 5;
    if (st == HYDRA_OK)
        st = hydra_session_decode(s, tok);
    hydra_session_free(s);
    hydra_model_close(m);
    gpu_mem_usage(after);
    CHECK_OK(st);
    if (open[GPU_MEM_PINNED] < before[GPU_MEM_PINNED] + two_rows)
        FAIL("an open session holds %llu pinned bytes, less than its two logits rows (%llu)",
             (unsigned long long)(open[GPU_MEM_PINNED] - before[GPU_MEM_PINNED]), (unsigned long long)two_rows);
    for (int i = 0; i < GPU_MEM_COUNT; i++)
        if (after[i] != before[i])
            FAIL("closed: %llu bytes of %s held, %llu before the session", (unsigned long long)after[i],
                 gpu_purpose_name((gpu_purpose)i), (unsigned long long)before[i]);
}
