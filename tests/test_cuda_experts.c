/*
 * GPU parity of the one-launch experts of a decode token (gk_experts:
 * every route's gate/up and down in one launch, blocks of a route meeting
 * at a barrier) against the two launches it replaces (the GLU gate/up
 * launch, then the staged down launch), bit for bit in the down rows: both
 * run the same per-chunk terms in the same order (matvec_rows.cuh), and
 * twice, the second launch finding the route barriers as the first left
 * them.  Q4_K gate/up with Q4_K and Q6_K down (Q4_K_M's experts) at
 * Qwen3-30B-A3B's shapes with repeated experts (16 blocks a route), a
 * skipped route with 8 blocks a route, Q8_0 and Q5_K pairs.  Skips without
 * a device, or where the device does not take the launch (compute
 * capability below 9.0).
 */
#include "gpu/gpu.h"
#include "gpu/gpu_check_experts.h"
#include "quant.h"
#include "test.h"
#include "gpu_test.h"

#include <stdlib.h>
#include <string.h>

static float ex_float(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n rows of n_cols by the reference quantiser, values of varied size. */
static uint8_t *ex_rows(uint32_t type, int64_t n, int64_t n_cols, uint64_t *seed)
{
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n_cols, &rb);
    uint8_t *w = malloc(rb * (size_t)n);
    float *src = malloc(sizeof(float) * (size_t)n_cols);
    if (w == NULL || src == NULL) {
        free(w);
        free(src);
        return NULL;
    }
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < n_cols; i++)
            src[i] = ex_float(seed) * (float)(1 + (i / 32) % 5);
        quant_traits_of(type)->from_float(src, w + r * rb, n_cols);
    }
    free(src);
    return w;
}

/* Every down row of the one launch has the two launches' bits (a skipped
 * route's row stays NaN in both). */
static void ex_same(test_ctx *t_, const gpu_experts_check *c, const char *which, const float *got,
                    const float *want)
{
    for (int64_t i = 0; i < c->n_routes * c->n_down; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            FAIL("%s/%s ff %lld n_embd %lld down %lld: route %lld row %lld: %s %.9g, two launches %.9g",
                 quant_traits_of(c->gu)->name, quant_traits_of(c->down)->name, (long long)c->ff,
                 (long long)c->n_embd, (long long)c->n_down, (long long)(i / c->n_down),
                 (long long)(i % c->n_down), which, got[i], want[i]);
            return;
        }
}

/* *taken false: the device does not take the launch (the test skips). */
static void ex_case(test_ctx *t_, const gpu_experts_check *c, uint64_t *seed, bool *taken)
{
    uint8_t *gate = ex_rows(c->gu, c->ff * c->n_expert, c->n_embd, seed);
    uint8_t *up = ex_rows(c->gu, c->ff * c->n_expert, c->n_embd, seed);
    uint8_t *down = ex_rows(c->down, c->n_down * c->n_expert, c->ff, seed);
    float *x = malloc(sizeof(float) * (size_t)c->n_embd);
    const size_t ny = (size_t)(c->n_routes * c->n_down);
    float *buf = malloc(sizeof(float) * 3 * ny);
    hydra_status st = HYDRA_ERR_NOMEM;
    if (gate && up && down && x && buf) {
        for (int64_t i = 0; i < c->n_embd; i++)
            x[i] = ex_float(seed) * (i % 61 == 0 ? 6.0f : 1.0f);
        const gpu_experts_out o = {.y_ref = buf, .y = buf + ny, .y_again = buf + 2 * ny};
        st = gpu_check_experts(c, gate, up, down, x, &o);
        if (st == HYDRA_OK) {
            ex_same(t_, c, "one launch", o.y, o.y_ref);
            ex_same(t_, c, "second launch", o.y_again, o.y_ref);
        }
    }
    *taken = st != HYDRA_ERR_UNSUPPORTED;
    free(gate);
    free(up);
    free(down);
    free(x);
    free(buf);
    if (*taken && st != HYDRA_OK)
        FAIL("%s/%s ff %lld n_embd %lld: %s: %s", quant_traits_of(c->gu)->name, quant_traits_of(c->down)->name,
             (long long)c->ff, (long long)c->n_embd, hydra_strerror(st), hydra_last_error());
}

TEST(cuda_experts_one_launch_equals_gate_up_then_staged_down)
{
    REQUIRE_GPU();
    static const int32_t eight[] = {2, 0, 2, 3, 1, 0, 2, 1}, skip[] = {1, -1, 1}, one[] = {0};
    uint64_t seed = 0xE7u;
    static const gpu_experts_check cases[] = {
        /* Qwen3-30B-A3B's experts, 8 routes over 4 experts (repeats) */
        {.gu = QT_Q4_K, .down = QT_Q4_K, .ff = 768, .n_embd = 2048, .n_down = 2048, .n_expert = 4, .n_routes = 8,
         .experts = eight},
        {.gu = QT_Q4_K, .down = QT_Q6_K, .ff = 768, .n_embd = 2048, .n_down = 2048, .n_expert = 4, .n_routes = 8,
         .experts = eight},
        /* a skipped route; 4 Q6_K rows a block are not whole 16-byte runs, so 8 blocks a route */
        {.gu = QT_Q4_K, .down = QT_Q6_K, .ff = 256, .n_embd = 512, .n_down = 64, .n_expert = 2, .n_routes = 3,
         .experts = skip},
        /* one route; one gate/up pair a block, rows that leave most warps idle */
        {.gu = QT_Q8_0, .down = QT_Q8_0, .ff = 32, .n_embd = 256, .n_down = 128, .n_expert = 1, .n_routes = 1,
         .experts = one},
        {.gu = QT_Q5_K, .down = QT_Q6_K, .ff = 512, .n_embd = 1024, .n_down = 1024, .n_expert = 2, .n_routes = 3,
         .experts = skip},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool taken = false;
        ex_case(t_, &cases[i], &seed, &taken);
        if (t_->result == TEST_FAIL)
            return;
        if (!taken)
            SKIP("the device does not take the one launch (needs compute capability 9.0)");
    }
}
