/*
 * ops.c — the forward pass's per-row operations, in scalar C.  Formulas are
 * the ones llama.cpp's graph uses for these models (RMSNorm without mean
 * subtraction, RoPE with ggml's angle recurrence, max-subtracted softmax),
 * so that results agree with the reference logits in ../shared/ref.
 */
#include "ops.h"

#include "cpu_features.h"
#include "fp16.h"
#include "quant.h"

#include <math.h>
#include <string.h>

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

rope_params op_rope_plain(int n_rot, float base)
{
    return (rope_params){.n_rot = n_rot, .base = base, .freq_scale = 1.0f, .attn_factor = 1.0f};
}

/* ggml_rope_yarn_corr_dim: the pair index whose wavelength 2 pi / theta_i
 * fits beta times into n_ctx_orig. */
static float yarn_corr_dim(int n_rot, uint32_t n_ctx_orig, float beta, float base)
{
    return (float)n_rot * logf((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void op_rope_yarn_corr(rope_params *p, uint32_t n_ctx_orig, float beta_fast, float beta_slow)
{
    const float low = floorf(yarn_corr_dim(p->n_rot, n_ctx_orig, beta_fast, p->base));
    const float high = ceilf(yarn_corr_dim(p->n_rot, n_ctx_orig, beta_slow, p->base));
    p->corr_low = fmaxf(0.0f, low);
    p->corr_high = fminf((float)(p->n_rot - 1), high);
}

/* 1 for pairs below corr_low (kept unscaled), 0 above corr_high (fully
 * scaled), linear between. */
static float yarn_ramp(float low, float high, int i)
{
    const float y = ((float)i - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

void op_rope_cache_ext(float *cs, int64_t pos, const rope_params *p)
{
    const float theta_scale = powf(p->base, -2.0f / (float)p->n_rot);
    float theta_extrap = (float)pos;
    for (int i = 0; i < p->n_rot / 2; i++) {
        const float theta_interp = p->freq_scale * theta_extrap;
        float theta = theta_interp, mscale = p->attn_factor;
        if (p->ext_factor != 0.0f) {
            const float mix = yarn_ramp(p->corr_low, p->corr_high, i) * p->ext_factor;
            theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
        }
        cs[2 * i] = cosf(theta) * mscale;
        cs[2 * i + 1] = sinf(theta) * mscale;
        theta_extrap *= theta_scale;
    }
}

void op_rope_cache(float *cs, int64_t pos, int n_rot, float base)
{
    const rope_params p = op_rope_plain(n_rot, base);
    op_rope_cache_ext(cs, pos, &p);
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

void op_softmax_sink(float *x, int64_t n, float sink)
{
    float max = sink;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    if (sink != -INFINITY)
        sum += expf(sink - max);
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void op_softmax(float *x, int64_t n)
{
    op_softmax_sink(x, n, -INFINITY);
}

void op_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = op_silu(gate[i]) * up[i];
}

void op_swiglu_oai(float *out, const float *gate, const float *up, int64_t n, float alpha, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = fminf(gate[i], limit);
        const float u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

void op_axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* --- attention */

static float dot_scalar(const float *a, const float *b, int n)
{
    float sum = 0.0f;
    for (int i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static void axpy_scalar(float *y, float a, const float *x, int n)
{
    op_axpy(y, a, x, n);
}

static void f16_to_f32_scalar(const uint16_t *src, float *dst, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = fp16_to_fp32(src[i]);
}

static void f32_to_f16_scalar(const float *src, uint16_t *dst, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = fp32_to_fp16(src[i]);
}

const op_kernels op_kernels_scalar = {
    .isa = "scalar",
    .dot = dot_scalar,
    .axpy = axpy_scalar,
    .f16_to_f32 = f16_to_f32_scalar,
    .f32_to_f16 = f32_to_f16_scalar,
};

const op_kernels *op_kernels_best(void)
{
#if defined(__x86_64__)
    const cpu_features *f = cpu_features_get();
    if (cpu_has_avx2_set(f))
        return &op_kernels_avx2;
#endif
    return &op_kernels_scalar;
}

size_t op_kv_elem_size(uint32_t kv_type)
{
    return kv_type == QT_F32 ? 4 : kv_type == QT_F16 ? 2 : 0;
}

void op_kv_store(const op_kernels *kern, void *dst, uint32_t kv_type, const float *src, int n)
{
    if (kv_type == QT_F32)
        memcpy(dst, src, sizeof(float) * (size_t)n);
    else
        kern->f32_to_f16(src, dst, n);
}

/* A cache row as floats: F32 rows are read in place, F16 rows converted
 * into buf. */
static const float *row_f32(const op_kernels *kern, uint32_t kv_type, const uint8_t *row, int n, float *buf)
{
    if (kv_type == QT_F32)
        return (const float *)row;
    kern->f16_to_f32((const uint16_t *)row, buf, n);
    return buf;
}

static int max_int(int a, int b)
{
    return a > b ? a : b;
}

size_t op_attention_scratch(int n_q, int64_t n_kv, int head_dim_k, int head_dim_v)
{
    return (size_t)max_int(head_dim_k, head_dim_v) + (size_t)n_q * (size_t)n_kv;
}

/* Row j of the n_kv rows read: first + j, wrapped in a ring of n_slots. */
static const uint8_t *ring_row(const uint8_t *base, size_t stride, const attn_args *a, int64_t j)
{
    int64_t slot = a->first + j;
    if (a->n_slots > 0 && slot >= a->n_slots)
        slot -= a->n_slots;
    return base + (size_t)slot * stride;
}

void op_attention_group(const op_kernels *kern, const float *q, int n_q, const attn_args *a, float *scratch,
                        float *out)
{
    const int dk = a->head_dim_k, dv = a->head_dim_v;
    const int64_t n_kv = a->n_kv;
    float *row = scratch;
    float *scores = scratch + max_int(dk, dv); /* n_q rows of n_kv */
    for (int64_t j = 0; j < n_kv; j++) {
        const float *kj = row_f32(kern, a->kv_type, ring_row(a->k, a->k_stride, a, j), dk, row);
        for (int h = 0; h < n_q; h++)
            scores[h * n_kv + j] = a->scale * kern->dot(q + (size_t)h * dk, kj, dk);
    }
    for (int h = 0; h < n_q; h++)
        op_softmax_sink(scores + h * n_kv, n_kv, a->sinks ? a->sinks[h] : -INFINITY);
    memset(out, 0, sizeof(float) * (size_t)n_q * (size_t)dv);
    for (int64_t j = 0; j < n_kv; j++) {
        const float *vj = row_f32(kern, a->kv_type, ring_row(a->v, a->v_stride, a, j), dv, row);
        for (int h = 0; h < n_q; h++)
            kern->axpy(out + (size_t)h * dv, scores[h * n_kv + j], vj, dv);
    }
}
