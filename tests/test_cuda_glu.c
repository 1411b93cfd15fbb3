/*
 * GPU parity of the decode gate/up launch (one launch: silu(gate . x) *
 * (up . x) over routes) against its unfused definition on the same device
 * data: a gate launch, an up launch and the SwiGLU activation launch, bit
 * for bit (matvec.cu: both run mv_row_q's per-chunk terms in one order,
 * and mv_store's silu(g) * u is ops.cu's).  Q4_K as the experts of Q4_K_M
 * files, Q6_K (two scales a chunk) and Q8_0 (2-byte aligned blocks).
 * Skips without a device.
 */
#include "gpu/gpu.h"
#include "gpu/gpu_check_glu.h"
#include "quant.h"
#include "test.h"
#include "gpu_test.h"

#include <stdlib.h>
#include <string.h>

static float glu_float(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n rows of n_cols by the reference quantiser, values of varied size. */
static void glu_rows(uint32_t type, int64_t n, int64_t n_cols, uint64_t *seed, uint8_t *w)
{
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n_cols, &rb);
    float *src = malloc(sizeof(float) * (size_t)n_cols);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < n_cols; i++)
            src[i] = glu_float(seed) * (float)(1 + (i / 32) % 5);
        quant_traits_of(type)->from_float(src, w + r * rb, n_cols);
    }
    free(src);
}

enum { GLU_EXPERTS = 3, GLU_TOKENS = 2, GLU_ROUTES = 6 };

static void glu_case(test_ctx *t_, uint32_t type, int64_t n_rows, int64_t n_cols, uint64_t *seed)
{
    static const int32_t tokens[GLU_ROUTES] = {0, 0, 1, 1, 0, 1}, experts[GLU_ROUTES] = {2, 0, 1, -1, 1, 2};
    uint64_t rb = 0;
    CHECK(quant_row_bytes(type, (uint64_t)n_cols, &rb));
    const int64_t n_mat_rows = n_rows * GLU_EXPERTS;
    uint8_t *gate = malloc(rb * (size_t)n_mat_rows), *up = malloc(rb * (size_t)n_mat_rows);
    float *x = malloc(sizeof(float) * (size_t)(GLU_TOKENS * n_cols));
    float *h = malloc(sizeof(float) * (size_t)(GLU_ROUTES * n_rows));
    float *want = malloc(sizeof(float) * (size_t)(GLU_ROUTES * n_rows));
    CHECK(gate && up && x && h && want);
    glu_rows(type, n_mat_rows, n_cols, seed, gate);
    glu_rows(type, n_mat_rows, n_cols, seed, up);
    for (int64_t i = 0; i < GLU_TOKENS * n_cols; i++)
        x[i] = glu_float(seed) * (i % 61 == 0 ? 6.0f : 1.0f);
    const gpu_glu_pair_check c = {.type = type, .n_rows = n_rows, .n_cols = n_cols, .n_expert = GLU_EXPERTS,
                                  .n_tok = GLU_TOKENS, .n_routes = GLU_ROUTES, .tokens = tokens,
                                  .experts = experts};
    CHECK_OK(gpu_check_glu_pair(&c, gate, up, x, h, want));
    for (int64_t i = 0; i < GLU_ROUTES * n_rows; i++)
        if (memcmp(&h[i], &want[i], sizeof(float)) != 0)
            FAIL("%s %lld x %lld route %lld row %lld: gate/up %.9g, gate, up, activation %.9g",
                 quant_traits_of(type)->name, (long long)n_rows, (long long)n_cols, (long long)(i / n_rows),
                 (long long)(i % n_rows), h[i], want[i]);
    free(gate);
    free(up);
    free(x);
    free(h);
    free(want);
}

TEST(cuda_glu_matvec_equals_gate_up_then_activation)
{
    REQUIRE_GPU();
    static const uint32_t types[] = {QT_Q4_K, QT_Q6_K, QT_Q8_0};
    /* 768 x 2048 as Qwen3-30B-A3B's experts; 256 and 768 columns (8 and
     * 24 chunks: lanes with none), 2304 (72: a second, part-filled step);
     * 37 and 45 rows: a last block (and a last warp) part-filled */
    static const int64_t shapes[][2] = {{768, 2048}, {37, 256}, {45, 2304}, {6, 768}};
    uint64_t seed = 0x61u;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            glu_case(t_, types[ti], shapes[si][0], shapes[si][1], &seed);
}
