/*
 * gpu_check_aor.c — the attention output + router launch and the two
 * launches it replaces over the same inputs (gpu_check_aor.h).  Each way
 * has its own copy of x and its own outputs and counter, carved from one
 * zeroed allocation by gpu_check_run (gpu_internal.h).
 */
#include "gpu_check_aor.h"

#include "gpu_internal.h"

#include "../../kernels/cuda/attn_out_router.h"
#include "../quant.h"

#include <stdlib.h>

/* The inputs, the quantised attention row, then each way's outputs. */
enum { AO_WO, AO_ATT, AO_AQ, AO_AMETA, AO_ROUTER, AO_GAIN, AO_WO_BIAS, AO_R_BIAS, AO_PARTIAL, AO_SIDE0 };
enum { AS_X, AS_LOGITS, AS_ROUTES, AS_COUNTER, AS_XN, AS_Q, AS_META, AS_N };
enum { AO_REF = AO_SIDE0, AO_FUSED = AO_SIDE0 + AS_N, AO_N = AO_SIDE0 + 2 * AS_N };

typedef struct aor_ctx {
    const gpu_aor_check *c;
    const gpu_aor_in *in;
    size_t wo_bytes;
    bool fits;
} aor_ctx;

static void *dev_if(const gpu_check_buf *b, const void *host)
{
    return host != NULL ? b->dev : NULL;
}

static gk_tail side_tail(const aor_ctx *x, const gpu_check_buf *side)
{
    const gpu_aor_check *c = x->c;
    return (gk_tail){.counter = side[AS_COUNTER].dev,
                     .gating = {.n_expert = c->n_expert, .n_used = c->n_used, .sigmoid = c->sigmoid,
                                .renorm = c->renorm, .scale = c->scale},
                     .routes = side[AS_ROUTES].dev};
}

static gk_norm_out side_norm(const aor_ctx *x, const gpu_check_buf *b, const gpu_check_buf *side)
{
    return (gk_norm_out){.gain = b[AO_GAIN].dev, .eps = x->c->eps, .y = side[AS_XN].dev, .q = side[AS_Q].dev,
                         .meta = side[AS_META].dev};
}

static int launch_aor(const void *ctx, const gpu_check_buf *b)
{
    const aor_ctx *x = ctx;
    const gpu_aor_check *c = x->c;
    const gk_mat wo = {.data = b[AO_WO].dev, .type = c->wo_type, .n_rows = c->n_embd, .n_cols = c->n_att,
                       .row_bytes = x->wo_bytes, .mat_bytes = x->wo_bytes * (size_t)c->n_embd};
    const gk_mat router = {.data = b[AO_ROUTER].dev, .type = QT_F32, .n_rows = c->n_expert, .n_cols = c->n_embd,
                           .row_bytes = sizeof(float) * (size_t)c->n_embd,
                           .mat_bytes = sizeof(float) * (size_t)(c->n_embd * c->n_expert)};
    const gk_act att = {.f = b[AO_ATT].dev, .q = b[AO_AQ].dev, .meta = b[AO_AMETA].dev, .n = c->n_att};
    int e = gk_quantize_rows(0, att.f, 1, c->n_att, b[AO_AQ].dev, b[AO_AMETA].dev);
    const gpu_check_buf *ref = b + AO_REF, *fused = b + AO_FUSED;
    /* the two launches */
    const gk_rows one = {.n_tok = 1};
    const gk_out ox = {.y = ref[AS_X].dev, .y_stride = c->n_embd, .bias = dev_if(&b[AO_WO_BIAS], x->in->wo_bias),
                       .accumulate = true};
    if (e == 0)
        e = gk_matvec(0, &wo, NULL, &att, &one, &ox);
    const gk_act xr = {.f = ref[AS_X].dev, .n = c->n_embd};
    const gk_out ol = {.y = ref[AS_LOGITS].dev, .y_stride = c->n_expert,
                       .bias = dev_if(&b[AO_R_BIAS], x->in->router_bias)};
    const gk_tail tr = side_tail(x, ref);
    const gk_norm_out nr = side_norm(x, b, ref);
    if (e == 0)
        e = gk_router_topk(0, &router, &xr, 1, &ol, &tr, &nr);
    /* the one */
    const gk_aor a = {.wo = wo, .wo_bias = ox.bias, .x = fused[AS_X].dev, .router = router,
                      .router_bias = ol.bias, .logits = fused[AS_LOGITS].dev, .tail = side_tail(x, fused),
                      .norm = side_norm(x, b, fused), .partial = b[AO_PARTIAL].dev};
    if (e == 0 && x->fits)
        e = gk_attn_out_router(0, &a, &att);
    return e;
}

static void side_bufs(gpu_check_buf *side, const gpu_aor_check *c, const float *x0, const gpu_aor_out *o,
                      gk_route *routes)
{
    side[AS_X] = (gpu_check_buf){.in = x0, .out = o->x, .bytes = sizeof(float) * (size_t)c->n_embd};
    side[AS_LOGITS] = (gpu_check_buf){.out = o->logits, .bytes = sizeof(float) * (size_t)c->n_expert};
    side[AS_ROUTES] = (gpu_check_buf){.out = routes, .bytes = sizeof(gk_route) * (size_t)c->n_used};
    side[AS_COUNTER] = (gpu_check_buf){.bytes = sizeof(unsigned int)};
    side[AS_XN] = (gpu_check_buf){.out = o->xn, .bytes = sizeof(float) * (size_t)c->n_embd};
    side[AS_Q] = (gpu_check_buf){.out = o->q, .bytes = (size_t)c->n_embd};
    side[AS_META] = (gpu_check_buf){.out = o->meta, .bytes = 16 * (size_t)(c->n_embd / 32)};
}

static void routes_out(const gk_route *r, int n_used, const gpu_aor_out *o)
{
    for (int k = 0; k < n_used; k++) {
        o->experts[k] = r[k].token == 0 ? r[k].expert : -2;
        o->weights[k] = r[k].weight;
    }
}

hydra_status gpu_check_attn_out_router(const gpu_aor_check *c, const gpu_aor_in *in, const gpu_aor_out *ref,
                                       const gpu_aor_out *fused, bool *fits)
{
    uint64_t rb = 0;
    *fits = false;
    if (!quant_row_bytes(c->wo_type, (uint64_t)c->n_att, &rb) || c->n_embd < 32 || c->n_embd % 32 != 0 ||
        c->n_att % 32 != 0 || c->n_expert < 1 || c->n_used < 1 || c->n_used > c->n_expert ||
        c->n_used > GK_TAIL_MAX_USED)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_attn_out_router: %lld x %lld of type %u, %d of %d experts",
                          (long long)c->n_embd, (long long)c->n_att, c->wo_type, c->n_used, c->n_expert);
    aor_ctx x = {.c = c, .in = in, .wo_bytes = (size_t)rb};
    const gk_mat wo = {.type = c->wo_type, .n_rows = c->n_embd, .n_cols = c->n_att, .row_bytes = x.wo_bytes};
    const gk_mat router = {.type = QT_F32, .n_rows = c->n_expert, .n_cols = c->n_embd,
                           .row_bytes = sizeof(float) * (size_t)c->n_embd};
    const gk_gating gating = {.n_expert = c->n_expert, .n_used = c->n_used};
    x.fits = gpu_available(NULL) && gk_attn_out_router_fits(&wo, &router, &gating);
    gk_route *routes = malloc(2 * sizeof *routes * (size_t)c->n_used);
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_attn_out_router: %d routes", c->n_used);
    const size_t fe = sizeof(float) * (size_t)c->n_embd;
    gpu_check_buf b[AO_N] = {
        [AO_WO] = {.in = in->wo, .bytes = x.wo_bytes * (size_t)c->n_embd},
        [AO_ATT] = {.in = in->att, .bytes = sizeof(float) * (size_t)c->n_att},
        [AO_AQ] = {.bytes = (size_t)c->n_att},
        [AO_AMETA] = {.bytes = 16 * (size_t)(c->n_att / 32)},
        [AO_ROUTER] = {.in = in->router, .bytes = fe * (size_t)c->n_expert},
        [AO_GAIN] = {.in = in->gain, .bytes = fe},
        [AO_WO_BIAS] = {.in = in->wo_bias, .bytes = fe},
        [AO_R_BIAS] = {.in = in->router_bias, .bytes = sizeof(float) * (size_t)c->n_expert},
        [AO_PARTIAL] = {.bytes = sizeof(float) * (size_t)gk_attn_out_router_scratch(c->n_embd, c->n_expert)},
    };
    side_bufs(b + AO_REF, c, in->x, ref, routes);
    side_bufs(b + AO_FUSED, c, in->x, x.fits ? fused : &(gpu_aor_out){0}, routes + c->n_used);
    const hydra_status st = gpu_check_run(b, AO_N, launch_aor, &x, "attention output + router check");
    if (st == HYDRA_OK) {
        routes_out(routes, c->n_used, ref);
        if (x.fits)
            routes_out(routes + c->n_used, c->n_used, fused);
        *fits = x.fits;
    }
    free(routes);
    return st;
}
