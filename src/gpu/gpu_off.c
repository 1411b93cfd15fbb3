/*
 * gpu_off.c — the CUDA backend's entry points in a build without CUDA=1:
 * no device is ever available, so sessions asking for one fail with a
 * message that says how to get it, and GPU tests skip.
 */
#include "gpu.h"
#include "gpu_check_ops.h"
#include "gpu_mtp.h"
#include "gpu_check_fused.h"
#include "gpu_check_glu.h"
#include "gpu_check_experts.h"
#include "gpu_check_stack.h"
#include "gpu_check_aor.h"

#include "../error.h"

static const char *const why_off = "hydra was built without CUDA (build with make CUDA=1)";

bool gpu_available(const char **why)
{
    if (why != NULL)
        *why = why_off;
    return false;
}

int gpu_device_count(void)
{
    return 0;
}

hydra_status gpu_mem_device_of(int device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    (void)device;
    return gpu_mem_device(free_bytes, total_bytes);
}

hydra_status gpu_multi_allreduce_check(int n_dev, size_t count, bool peer, double *max_err)
{
    (void)n_dev, (void)count, (void)peer;
    *max_err = 0;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
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

float *gpu_session_logits_row(gpu_session *g)
{
    (void)g;
    return NULL;
}

void gpu_session_stats(const gpu_session *g, gpu_stats *out)
{
    (void)g;
    *out = (gpu_stats){0};
}

hydra_status gpu_mtp_create(gpu_mtp **out, gpu_session *target, const model_weights *target_w,
                            const model_weights *view, const layer_weights *mtp)
{
    (void)target, (void)target_w, (void)view, (void)mtp;
    *out = NULL;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

void gpu_mtp_free(gpu_mtp *m)
{
    (void)m;
}

hydra_status gpu_mtp_set_width(gpu_mtp *m, int64_t width)
{
    (void)m, (void)width;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_mtp_rows(gpu_mtp *m, const int32_t *tokens, int64_t n, int64_t pos0, gpu_mtp_source src,
                          int64_t row0, float *logits)
{
    (void)m, (void)tokens, (void)n, (void)pos0, (void)src, (void)row0, (void)logits;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

void gpu_mtp_stats(const gpu_mtp *m, gpu_stats *out)
{
    (void)m;
    *out = (gpu_stats){0};
}

void gpu_hybrid_counters_get(const gpu_session *g, gpu_hybrid_counters *out)
{
    (void)g;
    *out = (gpu_hybrid_counters){0};
}

void gpu_hybrid_counters_reset(gpu_session *g)
{
    (void)g;
}

const struct hybrid_state *gpu_hybrid_split_state(const gpu_session *g)
{
    (void)g;
    return NULL;
}

void gpu_hybrid_stall_cpu_side(gpu_session *g, bool stall)
{
    (void)g;
    (void)stall;
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

/* --- gpu_check_ops.h */

hydra_status gpu_check_rmsnorm(const float *x, const float *gain, float eps, int n_rows, int64_t n, bool q8, float *y,
                               int8_t *q, float *d)
{
    (void)x, (void)gain, (void)eps, (void)n_rows, (void)n, (void)q8, (void)y, (void)q, (void)d;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_rope(const gpu_rope_check *c, float *q, float *k)
{
    (void)c, (void)q, (void)k;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_attention(const gpu_attn_check *c, const float *q, const float *k_rows, const float *v_rows,
                                 float *out)
{
    (void)c, (void)q, (void)k_rows, (void)v_rows, (void)out;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_select(const gpu_select_check *c, const float *logits, int n_tok, int32_t *experts,
                              float *weights)
{
    (void)c, (void)logits, (void)n_tok, (void)experts, (void)weights;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_glu(const gpu_glu_check *c, const float *gate, const float *up, float *h)
{
    (void)c, (void)gate, (void)up, (void)h;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_combine(const float *weights, const float *y, int n_tok, int n_used, int64_t n, float *x)
{
    (void)weights, (void)y, (void)n_tok, (void)n_used, (void)n, (void)x;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_add_rows(const float *y, const float *gate, int n_tok, int64_t n, float *x)
{
    (void)y, (void)gate, (void)n_tok, (void)n, (void)x;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_mla_prepare(const gpu_mla_prep_check *c, const float *latent, const float *kv_norm,
                                   const float *q, float *cache_rows, float *q_nope, float *q_lat)
{
    (void)c, (void)latent, (void)kv_norm, (void)q, (void)cache_rows, (void)q_nope, (void)q_lat;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_route_bias(const float *bias, int n_expert, const int32_t *experts, int n_routes,
                                  const int32_t *order, int64_t n_rows, int64_t width, float *y)
{
    (void)bias, (void)n_expert, (void)experts, (void)n_routes, (void)order, (void)n_rows, (void)width, (void)y;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_router_topk(const gpu_router_check *c, const void *w, const float *x, float *logits,
                                   int32_t *experts, float *weights)
{
    (void)c, (void)w, (void)x, (void)logits, (void)experts, (void)weights;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_matvec_staged(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                     float *y)
{
    (void)type, (void)w, (void)n_rows, (void)n_cols, (void)x, (void)y;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_glu_pair(const gpu_glu_pair_check *c, const void *gate, const void *up, const float *x,
                                float *h_glu, float *h_ref)
{
    (void)c, (void)gate, (void)up, (void)x, (void)h_glu, (void)h_ref;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_experts(const gpu_experts_check *c, const void *gate, const void *up, const void *down,
                               const float *x, const gpu_experts_out *out)
{
    (void)c, (void)gate, (void)up, (void)down, (void)x, (void)out;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_matvec_head(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                   float *y)
{
    (void)type, (void)w, (void)n_rows, (void)n_cols, (void)x, (void)y;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_head_norm(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                 const float *gain, float eps, float *y, float *y_ref)
{
    (void)type, (void)w, (void)n_rows, (void)n_cols, (void)x, (void)gain, (void)eps, (void)y, (void)y_ref;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_embed_norm(uint32_t type, const void *table, int64_t n_rows, int64_t n_cols,
                                  const int32_t *tokens, int n_tok, const float *gain, float eps,
                                  const gpu_embed_norm_out *ref, const gpu_embed_norm_out *fused)
{
    (void)type, (void)table, (void)n_rows, (void)n_cols, (void)tokens, (void)n_tok, (void)gain, (void)eps, (void)ref,
        (void)fused;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_rope_attention(const gpu_rope_attn_check *c, const float *q, const float *k, const float *v,
                                      float *out_ref, float *out_fused, int8_t *out_q, float *out_d,
                                      bool *same_cache)
{
    (void)c, (void)q, (void)k, (void)v, (void)out_ref, (void)out_fused, (void)out_q, (void)out_d, (void)same_cache;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_matvec_mixed(uint32_t type, uint32_t last, const void *const w[3], const int64_t n_rows[3],
                                    int64_t n_cols, const float *x, float *y)
{
    (void)type, (void)last, (void)w, (void)n_rows, (void)n_cols, (void)x, (void)y;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_matmul_stack(const gpu_stack_mat *m, int n_mats, const float *x, int64_t x_n, int n_tok,
                                    float *y_stack, float *y_each)
{
    (void)m, (void)n_mats, (void)x, (void)x_n, (void)n_tok, (void)y_stack, (void)y_each;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}

hydra_status gpu_check_attn_out_router(const gpu_aor_check *c, const gpu_aor_in *in, const gpu_aor_out *ref,
                                       const gpu_aor_out *fused, bool *fits)
{
    (void)c, (void)in, (void)ref, (void)fused;
    *fits = false;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s", why_off);
}
