/*
 * gpu_tensor.c — -sm tensor (issue 13, docs/MULTIGPU.md).  Every device
 * runs every layer over its part's model view (split_view.c): its KV heads
 * with their query heads, its columns of the dense / shared-expert FFN and
 * its routed experts.  A step, enqueued from one thread:
 *
 *   every part:  embed the tokens (each part holds the embedding)
 *   each layer, each sublayer (attention, then the FFN/MoE block):
 *       every part: input norm of the full x; x zeroed except on the main
 *                   part; the sublayer adds its partial output into x
 *       one all-reduce (sum) of x over the parts' streams: x + every
 *       partial, on every device (NCCL; decode-sized rows through peer
 *       access, gpu_tensor_p2p.c)
 *   main part:   output norm and head, logits back
 *
 * Routed experts: every part computes the router and top-k from the same
 * x, so all agree on the routes; each part's expert stacks hold only its
 * experts [exp0, exp1), and its device table of expert matrices
 * (gk_mat.expert_data, kernels.h) points every other expert at a zeroed
 * matrix, whose output is exactly 0, so the combine adds nothing for it
 * and the all-reduce adds the owner's.  Zero matrices are read from L2 in
 * decode; in prefill their tiles are still multiplied (compute, no DRAM).
 *
 * Graphs: one per part per step shape, captured together (relaxed mode,
 * since the NCCL calls of one group touch every stream) and keyed by the
 * shape and the split cache's generation.
 */
#include "gpu_tensor.h"

#include "gpu_tensor_p2p.h"

#include "../hybrid.h"

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

enum { TENSOR_GRAPHS = 8 };

typedef struct tensor_graph {
    uint64_t key;
    gpuGraphExec_t exec[SPLIT_MAX_DEV];
} tensor_graph;

struct gpu_tensor {
    int n_part, main;
    int device[SPLIT_MAX_DEV];
    split_view view[SPLIT_MAX_DEV];
    gpu_nccl *nccl;
    gpu_p2p *p2p;                   /* decode-sized sums over peer access; NULL: NCCL for all */
    void *zero[SPLIT_MAX_DEV];      /* a zeroed expert matrix per device */
    size_t zero_bytes;
    void *table[SPLIT_MAX_DEV];     /* expert pointer tables per device */
    size_t table_bytes;
    tensor_graph graph[TENSOR_GRAPHS];
    int n_graphs, next_evict;
    split_slab slab;                /* --hybrid cuda: which part's slab holds which experts */
};

static const arch_role expert_roles[] = {W_MOE_GATE, W_MOE_UP, W_MOE_DOWN};
enum { N_EXPERT_ROLES = sizeof expert_roles / sizeof expert_roles[0] };

/* The largest expert matrix as uploaded (gw) or as a slab slot holds it
 * (the mapping's bytes, hybrid). */
static size_t largest_expert(const gpu_session *p)
{
    size_t most = 0;
    for (int l = 0; l < p->gw.n_layer; l++)
        for (int r = 0; r < N_EXPERT_ROLES; r++) {
            const size_t up = gw_at(&p->gw, l, expert_roles[r])->mat_bytes;
            const size_t host = p->w->layer[l].w[expert_roles[r]].mat_bytes;
            const size_t b = up > host ? up : host;
            most = b > most ? b : most;
        }
    return most;
}

static hydra_status alloc_zero(gpu_tensor *t, const gpu_session *p, int i)
{
    t->zero_bytes = largest_expert(p);
    TRY_ST(gpu_mem_alloc(GPU_MEM_WEIGHTS, t->zero_bytes, &t->zero[i], "-sm tensor: zero expert"));
    TRY(gpuMemset(t->zero[i], 0, t->zero_bytes), "-sm tensor: zeroing the zero expert");
    return HYDRA_OK;
}

/* Part i's table: expert e of each stack at its place in the part's
 * upload when the part owns it, else the zero matrix. */
static hydra_status install_experts(gpu_tensor *t, gpu_session *p, int i)
{
    const int n_expert = (int)p->w->hp.n_expert, n_layer = p->gw.n_layer;
    const split_view *v = &t->view[i];
    if (n_expert == 0)
        return HYDRA_OK;
    TRY_ST(alloc_zero(t, p, i));
    t->table_bytes = sizeof(uint8_t *) * (size_t)n_layer * N_EXPERT_ROLES * (size_t)n_expert;
    TRY_ST(gpu_mem_alloc(GPU_MEM_WEIGHTS, t->table_bytes, &t->table[i], "-sm tensor: expert tables"));
    const uint8_t **host = malloc(t->table_bytes);
    if (host == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor: expert tables");
    const uint8_t **dev = t->table[i];
    for (int l = 0; l < n_layer; l++)
        for (int r = 0; r < N_EXPERT_ROLES; r++) {
            gk_mat *m = &p->gw.layer[(size_t)l * W_COUNT + expert_roles[r]];
            const size_t at = ((size_t)l * N_EXPERT_ROLES + (size_t)r) * (size_t)n_expert;
            for (int e = 0; e < n_expert; e++)
                host[at + (size_t)e] = m->data != NULL && e >= v->exp0 && e < v->exp1
                                           ? m->data + (size_t)(e - v->exp0) * m->mat_bytes
                                           : (const uint8_t *)t->zero[i];
            if (m->mat_bytes > 0)
                m->expert_data = dev + at;
        }
    const gpuError_t e = gpuMemcpy(t->table[i], host, t->table_bytes, gpuMemcpyHostToDevice);
    free(host);
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "-sm tensor: copying the expert tables");
}

/* --- --hybrid cuda: each part a hybrid session over its view (every
 * expert's weights in its mapping, split_view all_experts), its slab the
 * experts split_slab gives it, every expert held by another part's slab
 * (and, off the main part, every expert of the CPU pass) pointed at the
 * zero matrix; only the main part's CPU pass has misses, so its sum is
 * added once, on the main part's x, before the all-reduce. */

/* Each MoE layer's experts hottest first: the session's initial slab (its
 * pooled --vram-budget placement or pin file) in slot order, then the
 * rest ascending; NULL rows (ascending) without one. */
static hydra_status plan_slab(gpu_tensor *t, const split_plan *plan, const model_weights *w, const gpu_options *o)
{
    const int n_layer = (int)w->hp.n_layer, n_expert = (int)w->hp.n_expert;
    uint64_t *bytes = calloc((size_t)n_layer + 1, sizeof *bytes);
    int32_t *ids = malloc(sizeof *ids * ((size_t)n_layer * (size_t)n_expert + 1));
    const int32_t **order = calloc((size_t)n_layer + 1, sizeof *order);
    hydra_status st = bytes && ids && order ? HYDRA_OK : hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor: slab plan");
    const hybrid_state *init = o->slab_init;
    for (int l = 0; l < n_layer && st == HYDRA_OK; l++) {
        if (w->layer[l].w[W_MOE_DOWN_BIAS].data != NULL)
            st = hydra_fail(HYDRA_ERR_UNSUPPORTED, "-sm tensor with --hybrid cuda: %s's per-expert biases are not "
                            "split between the parts' slabs yet; use -sm layer", w->arch->name);
        bytes[l] = w->layer[l].moe ? hybrid_expert_bytes(w, (uint32_t)l) : 0;
        if (init == NULL || init->n_layer != (uint32_t)n_layer || init->layer[l].n_expert != n_expert)
            continue;
        const hybrid_layer *L = &init->layer[l];
        int32_t *row = ids + (size_t)l * (size_t)n_expert, n = 0;
        for (int s = 0; s < L->n_slots; s++)
            if (L->expert_in[s] >= 0)
                row[n++] = L->expert_in[s];
        memcpy(row + n, L->host_only, sizeof *row * (size_t)L->n_host_only);
        order[l] = n + L->n_host_only == n_expert ? row : NULL;
    }
    const split_slab_input in = {.plan = plan, .n_layer = n_layer, .n_expert = n_expert, .expert_bytes = bytes,
                                 .order = order, .fraction = o->split.budget > 0 ? -1.0 : o->slab_fraction};
    if (st == HYDRA_OK)
        st = split_slab_make(&t->slab, &in);
    free(bytes);
    free(ids);
    free(order);
    return st;
}

/* Part i's initial slab: its experts of the plan, in slots 0, 1, ... */
static hydra_status part_slab_init(const gpu_tensor *t, const model_weights *view, int i, hybrid_state *init)
{
    const size_t nl = (size_t)t->slab.n_layer, ne = (size_t)t->slab.n_expert;
    int32_t *ids = malloc(sizeof *ids * (nl * ne + 1)), *n_slots = calloc(nl + 1, sizeof *n_slots);
    const int32_t **order = calloc(nl + 1, sizeof *order);
    hydra_status st = ids && n_slots && order ? HYDRA_OK : hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor: a part's slab");
    for (size_t l = 0; l < nl && st == HYDRA_OK; l++) {
        n_slots[l] = split_slab_order(&t->slab, i, (int)l, ids + l * ne);
        order[l] = ids + l * ne;
    }
    /* only the tables are read (gpu_hybrid.c's init_split): one row of step buffers */
    const hybrid_config cfg = {.mode = HYBRID_CUDA, .order = order, .n_slots = n_slots, .max_rows = 1};
    if (st == HYDRA_OK)
        st = hybrid_init(init, view, &cfg);
    free(ids);
    free(n_slots);
    free(order);
    return st;
}

static hydra_status create_hybrid_part(gpu_tensor *t, gpu_session **part, int i, gpu_options *po)
{
    /* Only the main part has misses, so only it streams them in prefill
     * (its staged rows of experts computed elsewhere read the zero
     * matrix, gpu_hybrid_join_tensor); each part admits its own experts. */
    po->stream_prefill = po->stream_prefill && i == t->main;
    if (i != t->main) { /* its pinned copy: its own experts, the only ones it copies */
        po->pin_exp0 = t->view[i].exp0;
        po->pin_exp1 = t->view[i].exp1;
    }
    /* No misses off the main part: its CPU pass has nothing to do, but its
     * flag thread spins during a step, so the main part's pool leaves it
     * a core (the layer split's pools oversubscribed the host: MULTIGPU.md). */
    if (i != t->main)
        po->cpu_threads = 1;
    else if (po->cpu_threads > t->n_part)
        po->cpu_threads -= t->n_part - 1;
    hybrid_state init = {0};
    TRY_ST(part_slab_init(t, &t->view[i].w, i, &init));
    po->slab_init = &init;
    const hydra_status st = gpu_session_create(&part[i], &t->view[i].w, po);
    hybrid_free(&init);
    TRY_ST(st);
    return alloc_zero(t, part[i], i);
}

/* Every part joins the split's slab plan once all exist (a part's
 * admissions rewrite the main part's rows). */
static hydra_status join_hybrid_parts(gpu_tensor *t, gpu_session **part)
{
    for (int i = 0; i < t->n_part; i++) {
        TRY(gpuSetDevice(t->device[i]), "selecting a part's device");
        TRY_ST(gpu_hybrid_join_tensor(part[i], &t->slab, i, t->zero[i], part[t->main]));
    }
    return HYDRA_OK;
}

static hydra_status create_part(gpu_tensor *t, gpu_session **part, const split_plan *plan, int i,
                                const model_weights *w, const gpu_options *o)
{
    TRY_ST(split_view_make(&t->view[i], w, plan, i, o->hybrid));
    gpu_options po = *o;
    po.split = (gpu_split){0};
    po.device = plan->part[i].device;
    po.layer0 = 0;
    po.layer1 = 0;
    po.tensor_part = true;
    if (o->hybrid)
        return create_hybrid_part(t, part, i, &po);
    TRY_ST(gpu_session_create(&part[i], &t->view[i].w, &po));
    return install_experts(t, part[i], i);
}

/* The peer sum for steps of up to GK_MATVEC_MAX_TOK rows, where every
 * pair of devices has peer access; HYDRA_TENSOR_REDUCE=nccl keeps NCCL for
 * every sum (the benchmark's comparison, docs/MULTIGPU.md). */
static hydra_status open_p2p(gpu_tensor *t, const model_weights *w)
{
    const char *force = getenv("HYDRA_TENSOR_REDUCE");
    if (t->n_part < 2 || (force != NULL && strcmp(force, "nccl") == 0))
        return HYDRA_OK;
    const hydra_status st = gpu_p2p_open(&t->p2p, t->n_part, t->device, (int64_t)GK_MATVEC_MAX_TOK * w->hp.n_embd);
    return st == HYDRA_ERR_UNSUPPORTED ? HYDRA_OK : st; /* no peer access: NCCL sums everything */
}

hydra_status gpu_tensor_create(gpu_tensor **out, gpu_session **part, const split_plan *plan,
                               const model_weights *w, const gpu_options *o)
{
    *out = NULL;
    gpu_tensor *t = calloc(1, sizeof *t);
    if (t == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor");
    t->n_part = plan->n_part;
    for (int i = 0; i < plan->n_part; i++) {
        t->device[i] = plan->part[i].device;
        if (plan->part[i].head)
            t->main = i;
    }
    hydra_status st = o->hybrid ? plan_slab(t, plan, w, o) : HYDRA_OK;
    if (st == HYDRA_OK)
        st = gpu_nccl_open(&t->nccl, t->n_part, t->device);
    if (st == HYDRA_OK)
        st = open_p2p(t, w);
    for (int i = 0; i < plan->n_part && st == HYDRA_OK; i++)
        st = create_part(t, part, plan, i, w, o);
    if (st == HYDRA_OK && o->hybrid)
        st = join_hybrid_parts(t, part);
    if (st != HYDRA_OK) {
        gpu_tensor_free(t, part);
        return st;
    }
    *out = t;
    return HYDRA_OK;
}

static void drop_graph(gpu_tensor *t, tensor_graph *g)
{
    for (int i = 0; i < t->n_part; i++)
        if (g->exec[i] != NULL) {
            gpuSetDevice(t->device[i]);
            gpuGraphExecDestroy(g->exec[i]);
            g->exec[i] = NULL;
        }
}

void gpu_tensor_free(gpu_tensor *t, gpu_session **part)
{
    if (t == NULL)
        return;
    for (int k = 0; k < t->n_graphs; k++)
        drop_graph(t, &t->graph[k]);
    for (int i = 0; i < t->n_part; i++) {
        gpuSetDevice(t->device[i]);
        gpu_session_free(part[i]); /* waits for its stream */
        part[i] = NULL;
        gpu_mem_free(GPU_MEM_WEIGHTS, t->zero[i], t->zero[i] != NULL ? t->zero_bytes : 0);
        gpu_mem_free(GPU_MEM_WEIGHTS, t->table[i], t->table[i] != NULL ? t->table_bytes : 0);
        split_view_free(&t->view[i]);
    }
    gpu_p2p_close(t->p2p);
    gpu_nccl_close(t->nccl);
    split_slab_free(&t->slab);
    free(t);
}

/* --- the step */

static hydra_status enqueue_all(gpu_tensor *t, gpu_session *const *part, const step_shape *sh)
{
    const int n = (int)sh->n_tok;
    float *x[SPLIT_MAX_DEV];
    gpuStream_t s[SPLIT_MAX_DEV];
    for (int i = 0; i < t->n_part; i++) {
        gpu_session *p = part[i];
        TRY(gpuSetDevice(t->device[i]), "selecting a part's device");
        TRY(gk_embed(p->stream, &p->gw.global[W_TOKEN_EMBD], p->d_tokens, n, p->x), "embedding");
        x[i] = p->x;
        s[i] = p->stream;
    }
    const size_t count = (size_t)n * part[0]->w->hp.n_embd;
    for (int l = 0; l < (int)part[0]->w->hp.n_layer; l++)
        for (int ffn = 0; ffn < 2; ffn++) {
            for (int i = 0; i < t->n_part; i++) {
                TRY(gpuSetDevice(t->device[i]), "selecting a part's device");
                TRY_ST(gpu_enqueue_sublayer(part[i], l, sh, ffn == 1, i != t->main));
            }
            TRY_ST(gpu_p2p_fits(t->p2p, count) ? gpu_p2p_sum(t->p2p, x, count, s)
                                               : gpu_nccl_sum(t->nccl, x, count, s));
        }
    TRY(gpuSetDevice(t->device[t->main]), "selecting the main device");
    return gpu_enqueue_head(part[t->main], sh);
}

/* Every part's stream captured at once; exec[i] is part i's graph. */
static hydra_status capture_all(gpu_tensor *t, gpu_session *const *part, const step_shape *sh, gpuGraphExec_t *exec)
{
    hydra_status st = HYDRA_OK;
    int begun = 0;
    for (; begun < t->n_part && st == HYDRA_OK; begun++) {
        gpuError_t e = gpuSetDevice(t->device[begun]);
        if (e == gpuSuccess)
            e = gpuStreamBeginCapture(part[begun]->stream, GPU_ENUM(StreamCaptureModeRelaxed));
        if (e != gpuSuccess) {
            st = gpu_fail(e, "beginning a part's graph capture");
            break;
        }
    }
    if (st == HYDRA_OK)
        st = enqueue_all(t, part, sh);
    for (int i = 0; i < begun; i++) {
        gpuGraph_t graph = NULL;
        gpuSetDevice(t->device[i]);
        gpuError_t e = gpuStreamEndCapture(part[i]->stream, &graph);
        if (st == HYDRA_OK && e == gpuSuccess)
            e = gpu_graph_instantiate(&exec[i], graph);
        if (st == HYDRA_OK && e != gpuSuccess)
            st = gpu_fail(e, "capturing a part's step");
        if (graph != NULL)
            gpuGraphDestroy(graph);
    }
    return st;
}

static hydra_status run_graphs(gpu_tensor *t, gpu_session *const *part, const step_shape *sh)
{
    const uint64_t key = XXH3_64bits(sh, sizeof *sh);
    tensor_graph *g = NULL;
    for (int k = 0; k < t->n_graphs && g == NULL; k++)
        g = t->graph[k].key == key ? &t->graph[k] : NULL;
    const bool fresh = g == NULL;
    if (fresh) { /* a free entry, else the oldest */
        if (t->n_graphs < TENSOR_GRAPHS) {
            g = &t->graph[t->n_graphs++];
        } else {
            g = &t->graph[t->next_evict];
            t->next_evict = (t->next_evict + 1) % TENSOR_GRAPHS;
            drop_graph(t, g);
        }
        g->key = key;
        const hydra_status st = capture_all(t, part, sh, g->exec);
        if (st != HYDRA_OK) {
            drop_graph(t, g);
            g->key = 0;
            return st;
        }
    }
    for (int i = 0; i < t->n_part; i++) {
        TRY(gpuSetDevice(t->device[i]), "selecting a part's device");
        TRY(gpuGraphLaunch(g->exec[i], part[i]->stream), "launching a part's step");
        part[i]->stats.captures += fresh;
        part[i]->stats.replays += !fresh;
    }
    return HYDRA_OK;
}

static hydra_status copy_step(gpu_session *p, int64_t pos0, const int32_t *tokens, int64_t n)
{
    *p->h_step = (gk_step){.pos0 = (int32_t)pos0, .n_tok = (int32_t)n, .seq = ++p->step_seq};
    memcpy(p->h_tokens, tokens, sizeof(int32_t) * (size_t)n);
    TRY(gpuMemcpyAsync(p->d_step, p->h_step, sizeof(gk_step), gpuMemcpyHostToDevice, p->stream), "step values");
    TRY(gpuMemcpyAsync(p->d_tokens, p->h_tokens, sizeof(int32_t) * (size_t)n, gpuMemcpyHostToDevice, p->stream),
        "step tokens");
    return HYDRA_OK;
}

/* Every part's stream waited for (also after a failure, so no stream runs
 * into the next step's buffers); the main part's logits copied out. */
static hydra_status finish(gpu_tensor *t, gpu_session *const *part, int64_t n, bool all_rows, float *logits,
                           hydra_status st)
{
    const gpu_session *m = part[t->main];
    const uint32_t n_vocab = m->w->hp.n_vocab;
    const size_t bytes = sizeof(float) * (all_rows ? (size_t)n : 1) * n_vocab;
    float *landing = gpu_logits_landing(m, all_rows, logits);
    for (int i = 0; i < t->n_part; i++) {
        gpuSetDevice(t->device[i]);
        gpuError_t e = gpuSuccess;
        if (st == HYDRA_OK && i == t->main)
            e = gpuMemcpyAsync(landing, m->logits, bytes, gpuMemcpyDeviceToHost, m->stream);
        if (st == HYDRA_OK && t->p2p != NULL)
            st = gpu_p2p_fetch(t->p2p, i, part[i]->stream);
        const gpuError_t e_sync = gpuStreamSynchronize(part[i]->stream);
        e = e != gpuSuccess ? e : e_sync;
        if (st == HYDRA_OK && e != gpuSuccess)
            st = gpu_fail(e, "running a part's step");
        part[i]->stats.steps += st == HYDRA_OK;
    }
    if (st == HYDRA_OK && t->p2p != NULL)
        st = gpu_p2p_check(t->p2p);
    if (st == HYDRA_OK && landing != logits)
        memcpy(logits, landing, bytes);
    return st;
}

hydra_status gpu_tensor_forward(gpu_tensor *t, gpu_session *const *part, const split_state *ss, int64_t pos0,
                                const int32_t *tokens, int64_t n, bool all_rows, float *logits)
{
    const step_shape sh = {.n_tok = n, .max_kv = ss->shape.max_kv, .all_rows = all_rows,
                           .generation = ss->generation};
    hydra_status st = HYDRA_OK;
    for (int i = 0; i < t->n_part && st == HYDRA_OK; i++) {
        const gpuError_t e = gpuSetDevice(t->device[i]);
        st = e == gpuSuccess ? copy_step(part[i], pos0, tokens, n) : gpu_fail(e, "selecting a part's device");
    }
    /* the tables uploaded before the step; the main part's last, since the
     * other parts' landed admissions rewrite its rows (gpu_hybrid_join_tensor) */
    for (int k = 1; k <= t->n_part && st == HYDRA_OK; k++) {
        const int i = (t->main + k) % t->n_part;
        const gpuError_t e = part[i]->hy != NULL ? gpuSetDevice(t->device[i]) : gpuSuccess;
        st = e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "selecting a part's device");
        if (st == HYDRA_OK && part[i]->hy != NULL)
            st = gpu_hybrid_begin_step(part[i], n);
    }
    if (st == HYDRA_OK)
        st = part[0]->o.graphs ? run_graphs(t, part, &sh) : enqueue_all(t, part, &sh);
    for (int i = 0; i < t->n_part && st == HYDRA_OK; i++)
        if (part[i]->hy != NULL) { /* the expert counts back */
            gpuSetDevice(t->device[i]);
            st = gpu_hybrid_enqueue_tail(part[i]);
        }
    st = finish(t, part, n, all_rows, logits, st);
    for (int i = 0; i < t->n_part && st == HYDRA_OK; i++)
        if (part[i]->hy != NULL) {
            gpuSetDevice(t->device[i]);
            st = gpu_hybrid_end_step(part[i]);
        }
    return st;
}
