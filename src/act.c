/*
 * act.c — activation rows converted once per format (act.h).
 */
#include "act.h"

#include "../kernels/cpu/matmul.h"
#include "error.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

static hydra_status add_format(act_set *a, uint32_t wtype)
{
    uint32_t type = quant_traits_of(wtype)->vec_dot_type;
    if (type == QT_F32)
        return HYDRA_OK; /* F32 weights read the rows as they are */
    for (int i = 0; i < a->n_formats; i++)
        if (a->format[i].type == type)
            return HYDRA_OK;
    if (a->n_formats == ACT_MAX_FORMATS)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "more than %d activation formats for rows of %lld values",
                          ACT_MAX_FORMATS, (long long)a->n);
    act_format *f = &a->format[a->n_formats];
    f->type = type;
    f->row_bytes = matmul_act_bytes(wtype, a->n);
    f->rows = malloc(f->row_bytes * (size_t)a->max_rows);
    if (f->rows == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "activation buffer of %lld rows x %zu bytes", (long long)a->max_rows,
                          f->row_bytes);
    a->n_formats++;
    return HYDRA_OK;
}

/* A matrix reads rows of n values when it is bound, is a matrix, and its
 * rows have n values. */
static hydra_status add_if_reader(act_set *a, const wtensor *t, arch_role role)
{
    if (t->data == NULL || arch_tensor_specs[role].kind != TK_MATRIX || t->ne[0] != a->n)
        return HYDRA_OK;
    return add_format(a, t->type);
}

hydra_status act_init(act_set *a, const model_weights *w, int64_t n, int64_t max_rows)
{
    memset(a, 0, sizeof *a);
    a->n = n;
    a->max_rows = max_rows;
    hydra_status st = add_if_reader(a, &w->global[W_OUTPUT], W_OUTPUT);
    for (uint32_t l = 0; l < w->hp.n_layer && st == HYDRA_OK; l++)
        for (int r = 0; r < W_COUNT && st == HYDRA_OK; r++)
            st = add_if_reader(a, &w->layer[l].w[r], (arch_role)r);
    if (st != HYDRA_OK)
        act_free(a);
    return st;
}

void act_free(act_set *a)
{
    for (int i = 0; i < a->n_formats; i++)
        free(a->format[i].rows);
    memset(a, 0, sizeof *a);
}

void act_bind(act_set *a, const float *x, int64_t n_rows)
{
    a->x = x;
    a->n_rows = n_rows;
    for (int i = 0; i < a->n_formats; i++)
        a->format[i].ready = false;
}

typedef struct convert_job {
    const act_set *a;
    act_format *f;
    uint32_t wtype;
} convert_job;

static void convert_task(void *ctx, int thread_idx, int n_threads)
{
    const convert_job *job = ctx;
    const act_set *a = job->a;
    for (int64_t r = thread_idx; r < a->n_rows; r += n_threads)
        matmul_quantize_act(job->wtype, a->x + r * a->n, job->f->rows + (size_t)r * job->f->row_bytes, a->n);
}

const void *act_for(act_set *a, thread_pool *pool, uint32_t wtype, size_t *stride)
{
    uint32_t type = quant_traits_of(wtype)->vec_dot_type;
    if (type == QT_F32) {
        *stride = (size_t)a->n * sizeof(float);
        return a->x;
    }
    act_format *f = NULL;
    for (int i = 0; i < a->n_formats && f == NULL; i++)
        if (a->format[i].type == type)
            f = &a->format[i];
    /* act_init saw every matrix of the model, so the format exists. */
    if (!f->ready) {
        convert_job job = {a, f, wtype};
        if (a->n_rows == 1)
            convert_task(&job, 0, 1);
        else
            pool_run(pool, convert_task, &job);
        f->ready = true;
    }
    *stride = f->row_bytes;
    return f->rows;
}
