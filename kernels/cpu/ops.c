/*
 * ops.c — the forward pass's per-row operations, in scalar C.  Formulas are
 * the ones llama.cpp's graph uses for these models (RMSNorm without mean
 * subtraction, RoPE with ggml's angle recurrence, max-subtracted softmax),
 * so that results agree with the reference logits in ../shared/ref.
 */
#include "ops.h"

#include "fp16.h"
#include "quant.h"

#include <math.h>

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    /* The sum of squares in double: it is one reduction per row, and its
     * rounding would otherwise grow with n. */
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    if (w == NULL) {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * scale;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale * w[i];
}

void op_rope_cache(float *cs, int64_t pos, int n_rot, float base)
{
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        cs[2 * i] = cosf(theta);
        cs[2 * i + 1] = sinf(theta);
        theta *= theta_scale;
    }
}

void op_rope(float *x, const float *cs, int n_rot, rope_style style)
{
    const int half = n_rot / 2;
    /* NORMAL rotates neighbours, NEOX rotates dimension i with i + half. */
    const int step = style == ROPE_NEOX ? 1 : 2;
    const int partner = style == ROPE_NEOX ? half : 1;
    for (int i = 0; i < half; i++) {
        float *a = &x[i * step];
        float *b = a + partner;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = *a, x1 = *b;
        *a = x0 * c - x1 * s;
        *b = x0 * s + x1 * c;
    }
}

void op_softmax(float *x, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void op_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = op_silu(gate[i]) * up[i];
}

void op_axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* --- KV cache rows: one entry per storable type. */

typedef float (*kv_dot_fn)(const void *row, const float *q, int n);
typedef void (*kv_axpy_fn)(float *out, float a, const void *row, int n);

static float dot_f32(const void *row, const float *q, int n)
{
    const float *k = row;
    float sum = 0.0f;
    for (int i = 0; i < n; i++)
        sum += k[i] * q[i];
    return sum;
}

static float dot_f16(const void *row, const float *q, int n)
{
    const uint16_t *k = row;
    float sum = 0.0f;
    for (int i = 0; i < n; i++)
        sum += fp16_to_fp32(k[i]) * q[i];
    return sum;
}

static void axpy_f32(float *out, float a, const void *row, int n)
{
    op_axpy(out, a, row, n);
}

static void axpy_f16(float *out, float a, const void *row, int n)
{
    const uint16_t *v = row;
    for (int i = 0; i < n; i++)
        out[i] += a * fp16_to_fp32(v[i]);
}

typedef struct kv_kind {
    uint32_t type;
    size_t elem_size;
    kv_dot_fn dot;
    kv_axpy_fn axpy;
} kv_kind;

static const kv_kind kv_kinds[] = {
    {QT_F32, 4, dot_f32, axpy_f32},
    {QT_F16, 2, dot_f16, axpy_f16},
};

static const kv_kind *kv_kind_of(uint32_t type)
{
    for (size_t i = 0; i < sizeof kv_kinds / sizeof kv_kinds[0]; i++)
        if (kv_kinds[i].type == type)
            return &kv_kinds[i];
    return NULL;
}

size_t op_kv_elem_size(uint32_t kv_type)
{
    const kv_kind *k = kv_kind_of(kv_type);
    return k ? k->elem_size : 0;
}

void op_kv_store(void *dst, uint32_t kv_type, const float *src, int64_t n)
{
    if (kv_type == QT_F32) {
        float *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = src[i];
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = fp32_to_fp16(src[i]);
}

void op_attention_head(const float *q, const attn_head_args *a, float *scores, float *out)
{
    const kv_kind *kind = kv_kind_of(a->kv_type);
    const uint8_t *k = a->k, *v = a->v;
    for (int64_t j = 0; j < a->n_kv; j++)
        scores[j] = a->scale * kind->dot(k + (size_t)j * a->k_stride, q, a->head_dim_k);
    op_softmax(scores, a->n_kv);
    for (int i = 0; i < a->head_dim_v; i++)
        out[i] = 0.0f;
    for (int64_t j = 0; j < a->n_kv; j++)
        kind->axpy(out, scores[j], v + (size_t)j * a->v_stride, a->head_dim_v);
}
