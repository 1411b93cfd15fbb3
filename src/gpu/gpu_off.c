/*
 * gpu_off.c — the CUDA backend's entry points in a build without CUDA=1:
 * no device is ever available, so sessions asking for one fail with a
 * message that says how to get it, and GPU tests skip.
 */
#include "gpu.h"

#include "../error.h"

static const char *const why_off = "hydra was built without CUDA (build with make CUDA=1)";

bool gpu_available(const char **why)
{
    if (why != NULL)
        *why = why_off;
    return false;
}

const char *gpu_purpose_name(gpu_purpose p)
{
    (void)p;
    return "?";
}

void gpu_mem_usage(uint64_t bytes[GPU_MEM_COUNT])
{
    for (int p = 0; p < GPU_MEM_COUNT; p++)
        bytes[p] = 0;
}

hydra_status gpu_mem_device(uint64_t *free_bytes, uint64_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

void gpu_mem_describe(char *buf, size_t cap)
{
    if (cap > 0)
        buf[0] = '\0';
}

hydra_status gpu_session_create(gpu_session **out, const model_weights *w, const gpu_options *o)
{
    (void)w;
    (void)o;
    *out = NULL;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: %s", why_off);
}

void gpu_session_free(gpu_session *g)
{
    (void)g;
}

hydra_status gpu_forward(gpu_session *g, int64_t pos0, const int32_t *tokens, int64_t n, bool all_rows,
                         float *logits)
{
    (void)g, (void)pos0, (void)tokens, (void)n, (void)all_rows, (void)logits;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

void gpu_session_stats(const gpu_session *g, gpu_stats *out)
{
    (void)g;
    *out = (gpu_stats){0};
}

void gpu_profile_describe(const gpu_session *g, char *buf, size_t cap)
{
    (void)g;
    if (cap > 0)
        buf[0] = '\0';
}

void gpu_profile_reset(gpu_session *g)
{
    (void)g;
}

hydra_status gpu_copy_probe(int mib, int reps, double *gb_per_s)
{
    (void)mib, (void)reps;
    *gb_per_s = 0;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_linear(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                              int n_tok, bool matmul, float *y, int8_t *xq, float *xd)
{
    (void)type, (void)w, (void)n_rows, (void)n_cols, (void)x, (void)n_tok, (void)matmul, (void)y, (void)xq, (void)xd;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_dequant(uint32_t type, const void *rows, int64_t n_rows, int64_t n_cols, float *out)
{
    (void)type, (void)rows, (void)n_rows, (void)n_cols, (void)out;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

bool gpu_host_decode_chunk(uint32_t type, const void *row, int c, float out[32])
{
    (void)type, (void)row, (void)c, (void)out;
    return false;
}

bool gpu_host_chunk_dot(uint32_t type, const void *row, int c, const int8_t a[32], float *out)
{
    (void)type, (void)row, (void)c, (void)a, (void)out;
    return false;
}
