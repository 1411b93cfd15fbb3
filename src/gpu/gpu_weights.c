/*
 * gpu_weights.c — a model's bound tensors copied into one device
 * allocation.  A tensor bound to two roles (tied embeddings: the output
 * projection reads token_embd) is copied once.
 */
#include "gpu_internal.h"

#include <stdlib.h>
#include <string.h>

static size_t tensor_bytes(const wtensor *t)
{
    return t->mat_bytes * (size_t)t->ne[2];
}

/* Matrices must be of a type the kernels decode; rows of float matrices
 * are read two values at a time, embedding rows 32 at a time. */
static hydra_status check_tensor(const wtensor *t, arch_role role, int layer)
{
    const arch_tensor_kind kind = arch_tensor_specs[role].kind;
    const char *name = arch_tensor_specs[role].name;
    if (kind == TK_VECTOR)
        return HYDRA_OK;
    if (!gk_type_supported(t->type))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: tensor %s (layer %d) has type id %u, which the GPU "
                          "kernels do not decode", name, layer, t->type);
    if (t->ne[0] % 2 != 0 || (kind == TK_ROWS && t->ne[0] % 32 != 0))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: tensor %s (layer %d) has rows of %lld values", name,
                          layer, (long long)t->ne[0]);
    return HYDRA_OK;
}

typedef struct placed {
    const uint8_t *host;
    size_t offset;
} placed;

/* Offset of t in the allocation, placing it if it is new. */
static size_t place(placed *p, int *n, size_t *total, const wtensor *t)
{
    for (int i = 0; i < *n; i++)
        if (p[i].host == t->data)
            return p[i].offset;
    p[*n] = (placed){t->data, *total};
    *total += (tensor_bytes(t) + 255) / 256 * 256;
    return p[(*n)++].offset;
}

static gk_mat mat_of(const wtensor *t, const uint8_t *dev)
{
    return (gk_mat){.data = dev, .type = t->type, .n_rows = t->ne[1], .n_cols = t->ne[0], .row_bytes = t->row_bytes,
                    .mat_bytes = t->mat_bytes, .expert_data = NULL};
}

/* Visits every bound tensor: global roles as layer -1. */
typedef hydra_status (*visit_fn)(void *ctx, const wtensor *t, arch_role role, int layer, gk_mat *dst);

/* A part of a layer split (gpu_multi.c) holds its layers, the embedding
 * only when it runs the first layer, the output head only with the last. */
static bool in_part(const model_weights *w, const gpu_weights *gw, int r)
{
    if (r == W_TOKEN_EMBD)
        return gw->layer0 == 0;
    if (r == W_OUTPUT || r == W_OUTPUT_NORM)
        return gw->layer1 == (int)w->hp.n_layer;
    return true;
}

static hydra_status visit_all(const model_weights *w, gpu_weights *gw, visit_fn fn, void *ctx)
{
    for (int r = 0; r < W_COUNT; r++)
        if (w->global[r].data != NULL && in_part(w, gw, r)) {
            hydra_status st = fn(ctx, &w->global[r], (arch_role)r, -1, &gw->global[r]);
            if (st != HYDRA_OK)
                return st;
        }
    for (uint32_t l = (uint32_t)gw->layer0; l < (uint32_t)gw->layer1; l++)
        for (int r = 0; r < W_COUNT; r++)
            if (w->layer[l].w[r].data != NULL) {
                hydra_status st = fn(ctx, &w->layer[l].w[r], (arch_role)r, (int)l, &gw->layer[l * W_COUNT + r]);
                if (st != HYDRA_OK)
                    return st;
            }
    return HYDRA_OK;
}

typedef struct layout {
    placed *p;
    int n;
    size_t total;
    size_t *offset_of; /* per visited tensor, in visit order; NOT_PLACED: stays on the host */
    int n_visited;
    bool skip_experts;
} layout;

static const size_t NOT_PLACED = (size_t)-1;

static bool routed_expert(arch_role role)
{
    return role == W_MOE_GATE || role == W_MOE_UP || role == W_MOE_DOWN;
}

static hydra_status plan_one(void *ctx, const wtensor *t, arch_role role, int layer, gk_mat *dst)
{
    (void)dst;
    layout *lo = ctx;
    hydra_status st = check_tensor(t, role, layer);
    if (st == HYDRA_OK)
        lo->offset_of[lo->n_visited++] = lo->skip_experts && routed_expert(role) ? NOT_PLACED
                                                                                 : place(lo->p, &lo->n, &lo->total, t);
    return st;
}

typedef struct copier {
    gpu_weights *gw;
    const layout *lo;
    int i;
    bool *copied; /* per placed tensor */
} copier;

static hydra_status copy_one(void *ctx, const wtensor *t, arch_role role, int layer, gk_mat *dst)
{
    (void)role;
    (void)layer;
    copier *c = ctx;
    const size_t off = c->lo->offset_of[c->i++];
    if (off == NOT_PLACED) { /* the hybrid slab (gpu_hybrid.c) holds what the device gets of it */
        *dst = mat_of(t, NULL);
        return HYDRA_OK;
    }
    uint8_t *dev = (uint8_t *)c->gw->base + off;
    *dst = mat_of(t, dev);
    for (int k = 0; k < c->lo->n; k++)
        if (c->lo->p[k].offset == off && !c->copied[k]) {
            c->copied[k] = true;
            gpuError_t e = gpuMemcpy(dev, t->data, tensor_bytes(t), gpuMemcpyHostToDevice);
            if (e != gpuSuccess)
                return gpu_fail(e, "copying weights to the device");
        }
    return HYDRA_OK;
}

hydra_status gpu_weights_upload(gpu_weights *gw, const model_weights *w, bool skip_experts, int layer0, int layer1)
{
    memset(gw, 0, sizeof *gw);
    gw->layer0 = layer0;
    gw->layer1 = layer1;
    const size_t max_tensors = (size_t)W_COUNT * (w->hp.n_layer + 1);
    gw->n_layer = (int)w->hp.n_layer;
    gw->layer = calloc((size_t)w->hp.n_layer * W_COUNT, sizeof *gw->layer);
    layout lo = {.p = calloc(max_tensors, sizeof *lo.p), .offset_of = calloc(max_tensors, sizeof(size_t)),
                 .skip_experts = skip_experts};
    bool *copied = calloc(max_tensors, sizeof(bool));
    hydra_status st = HYDRA_OK;
    if (gw->layer == NULL || lo.p == NULL || lo.offset_of == NULL || copied == NULL)
        st = hydra_fail(HYDRA_ERR_NOMEM, "CUDA backend: tables for %u layers", w->hp.n_layer);
    if (st == HYDRA_OK)
        st = visit_all(w, gw, plan_one, &lo);
    if (st == HYDRA_OK)
        st = gpu_mem_alloc(GPU_MEM_WEIGHTS, lo.total, &gw->base, "model weights");
    if (st == HYDRA_OK) {
        gw->bytes = lo.total;
        copier c = {.gw = gw, .lo = &lo, .copied = copied};
        st = visit_all(w, gw, copy_one, &c);
    }
    free(lo.p);
    free(lo.offset_of);
    free(copied);
    if (st != HYDRA_OK)
        gpu_weights_free(gw);
    return st;
}

void gpu_weights_free(gpu_weights *gw)
{
    gpu_mem_free(GPU_MEM_WEIGHTS, gw->base, gw->bytes);
    free(gw->layer);
    memset(gw, 0, sizeof *gw);
}
