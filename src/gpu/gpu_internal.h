/*
 * gpu_internal.h — what the files of the CUDA backend share: the session
 * struct, the device copy of the weights, activation sets, the allocator's
 * internals, and the graph cache.
 */
#ifndef HYDRA_GPU_INTERNAL_H
#define HYDRA_GPU_INTERNAL_H

#include "gpu.h"

#include "../../kernels/cuda/compat.h"
#include "../../kernels/cuda/kernels.h"
#include "../error.h"

/* Return from the enclosing function with a failed CUDA call's status (the
 * message names what was being done), or with a failed hydra call's. */
#define TRY(call, what)                                                                                        \
    do {                                                                                                       \
        const int e_ = (call);                                                                                 \
        if (e_ != 0)                                                                                           \
            return gpu_fail((gpuError_t)e_, what);                                                             \
    } while (0)

#define TRY_ST(call)                                                                                           \
    do {                                                                                                       \
        const hydra_status st_ = (call);                                                                       \
        if (st_ != HYDRA_OK)                                                                                   \
            return st_;                                                                                        \
    } while (0)

/* --- allocator (gpu_alloc.c) */
hydra_status gpu_fail(gpuError_t e, const char *what);
hydra_status gpu_mem_alloc(gpu_purpose p, size_t bytes, void **out, const char *what);
void gpu_mem_free(gpu_purpose p, void *ptr, size_t bytes);

/* Many buffers carved from one allocation: add each buffer's slot and size,
 * then allocate once; every slot receives its address (256-byte aligned). */
enum { CARVE_MAX = 64 };
typedef struct carve {
    void **slot[CARVE_MAX];
    size_t offset[CARVE_MAX];
    int n;
    size_t total;
    bool overflow;
} carve;
void carve_add(carve *c, void **slot, size_t bytes);
hydra_status carve_alloc(carve *c, gpu_purpose p, void **base, const char *what);
#define CARVE(c, ptr, bytes) carve_add((c), (void **)&(ptr), (bytes))

/* --- weights in device memory (gpu_weights.c) */
typedef struct gpu_weights {
    void *base;
    size_t bytes;
    gk_mat global[W_COUNT];
    gk_mat *layer; /* n_layer x W_COUNT; data NULL where the host binding is empty */
    int n_layer;
    int layer0, layer1; /* the layers copied (a layer split's part); the others' gk_mat stay zero */
} gpu_weights;

/* Checks that the kernels can run every bound tensor, then copies them into
 * one device allocation.  skip_experts (hybrid): the routed expert stacks
 * stay on the host; their gk_mat keeps shape and type, data NULL.  Only
 * layers [layer0, layer1) are copied (with the embedding when layer0 is 0,
 * the output head when layer1 is the last). */
hydra_status gpu_weights_upload(gpu_weights *gw, const model_weights *w, bool skip_experts, int layer0, int layer1);
void gpu_weights_free(gpu_weights *gw);

static inline const gk_mat *gw_at(const gpu_weights *gw, int layer, arch_role role)
{
    return &gw->layer[(size_t)layer * W_COUNT + role];
}

static inline const float *gw_vec(const gk_mat *m)
{
    return (const float *)m->data;
}

/* --- activation rows and their 8-bit form, converted once per contents */
typedef struct gpu_act {
    float *f;
    int8_t *q;
    int32_t *meta;
    uint16_t *h;     /* f16 bits (prefill matmuls of quantised weights) */
    int64_t n;       /* values per row */
    int n_rows;      /* current rows */
    bool q_ready;    /* q/meta hold the current contents */
    bool h_ready;    /* h holds them */
} gpu_act;

/* An activation set of up to rows rows of n values, with its 8-bit form,
 * carved from c (gpu_session.c). */
void carve_act(carve *c, gpu_act *a, int64_t rows, int64_t n);

/* --- profile: op classes timed with events */
#define GPU_OP_TABLE(X)                                                                                        \
    X(OP_EMBED, "embed") X(OP_NORM, "rmsnorm") X(OP_QUANT, "quantize act") X(OP_QKV, "q/k/v proj")           \
        X(OP_ROPE, "qk-norm+rope+kv") X(OP_ATTN, "attention") X(OP_ATTN_OUT, "attn out proj")                 \
            X(OP_AOR, "attn out proj + router + top-k (one launch)") X(OP_ROUTER, "router") X(OP_TOPK, "top-k") \
                X(OP_GROUP, "group by expert") X(OP_EXP_UP, "experts gate/up") X(OP_EXP_DOWN, "experts down")   \
                    X(OP_EXPERTS, "experts gate/up + down (one launch)") X(OP_COMBINE, "combine")             \
                        X(OP_FFN, "dense/shared FFN") X(OP_OUTPUT, "output proj")
typedef enum gpu_op {
#define GPU_OP_ENUM_(id, name) id,
    GPU_OP_TABLE(GPU_OP_ENUM_)
#undef GPU_OP_ENUM_
        OP_COUNT
} gpu_op;

enum { PROF_MAX_EVENTS = 4096, GRAPH_CACHE = 16 };

/* The structure of one step: what a captured graph depends on. */
typedef struct step_shape {
    int64_t n_tok;
    int64_t max_kv;   /* context bucket: the attention grid's bound */
    int64_t all_rows; /* logits of every row (else the last) */
    uint64_t generation; /* multi-GPU: the split cache's generation (split.h); 0 alone */
} step_shape;

/* step_shape.max_kv for a step that needs `need` positions: a power of two
 * from 256, capped at the context, so that decode captures one graph per
 * doubling of the context, not per position (single and multi-GPU alike). */
static inline int64_t gpu_context_bucket(int64_t need, int64_t n_ctx)
{
    int64_t b = 256;
    while (b < need)
        b *= 2;
    return b < n_ctx ? b : n_ctx;
}

typedef struct graph_entry {
    uint64_t key;
    gpuGraphExec_t exec;
} graph_entry;

struct gpu_session {
    const model_weights *w;
    gpu_options o;
    gpu_weights gw;
    gpuStream_t stream;

    void *kv_base;
    size_t kv_bytes;
    uint8_t *k_cache, *v_cache; /* n_layer x n_ctx rows */
    int64_t k_row, v_row;       /* elements per cache row */
    size_t kv_elem;

    void *scratch_base;
    size_t scratch_bytes;
    gk_step *d_step;
    int32_t *d_tokens;         /* right after *d_step, as h_tokens after *h_step: one copy a step */
    float *x, *q, *k, *v, *router, *shexp_gate, *attn_scratch, *h_gate, *h_up, *y, *logits;
    size_t attn_scratch_floats;
    gpu_act xn, att, h;        /* matrix inputs: normed rows, attention output, FFN hidden */
    bool xn_normed;            /* enqueueing: xn already holds the next layer's normed input */
    gk_route *routes;
    int32_t *order, *slot_of, *tiles, *n_tiles;
    unsigned int *counter;     /* the launch tails' block counter (tail.cuh), zero between launches */
    unsigned int *experts_sync; /* gk_experts' route counts (GK_EXPERTS_SYNC_WORDS), zeroed at creation */
    unsigned long long *route_words; /* gk_route_word's, n_expert_used a layer, zeroed at creation */
    uint32_t step_seq;         /* the last step's gk_step.seq */
    bool route_words_current;  /* the last step was a one-token step that went without error so far */
#if defined(HYDRA_STAMPS)
    void *stamps;              /* the phase stamps' ring (gpu_stamps.h); NULL: none asked */
    int64_t stamp_pos;         /* the position whose steps are stamped */
#endif
    int max_tiles;
    int64_t ff_max;            /* widest FFN hidden row */

    struct gpu_mla *mla;       /* latent attention's buffers (gpu_mla.c); NULL for other attentions */

    void *pinned_base;
    size_t pinned_bytes;
    gk_step *h_step;
    int32_t *h_tokens;
    float *h_logits;           /* one row: staging for a caller's pageable buffer */
    /* One row the caller reads directly: the hydra_session's last logits
     * (gpu_session_logits_row); the one-row head writes it (logits_row_dev),
     * other steps whose destination it is copy there without staging.  NULL
     * without the output head. */
    float *logits_row;
    /* logits_row as the device addresses it, where the one-row output head
     * writes it directly (gpu_head_to_row); NULL where it may not (a
     * tensor split part, whose logits come back through its own copy). */
    float *logits_row_dev;

    struct gpu_hybrid *hy;     /* hybrid decode (o.hybrid), else NULL: gpu_hybrid*.c (gpu_hybrid_internal.h) */
    struct gpu_multi *multi;   /* a split over devices: this session only drives its parts (gpu_multi.c) */

    graph_entry graphs[GRAPH_CACHE];
    int n_graphs, next_evict;
    gpu_stats stats;

    gpuEvent_t *events;        /* profile only */
    gpu_op ev_op[PROF_MAX_EVENTS];
    int n_ev;
    double prof_ms[OP_COUNT];
    uint64_t prof_steps;
};

/* --- the step (gpu_forward.c): enqueues every kernel of one step on the
 * session's stream; reads token ids and pos0 from device memory. */
hydra_status gpu_enqueue_step(gpu_session *g, const step_shape *sh);
/* Its pieces for a tensor split's part (gpu_tensor.c): one sublayer of
 * layer l (attention, or with ffn the FFN/MoE block) from its input norm,
 * x zeroed after the norm when zero_x; the output head. */
hydra_status gpu_enqueue_sublayer(gpu_session *g, int l, const step_shape *sh, bool ffn, bool zero_x);
hydra_status gpu_enqueue_head(gpu_session *g, const step_shape *sh);

/* --- MoE experts (gpu_forward.c): every route's expert and the combine
 * into x (next: the next layer's input norm, or NULL); the routed matvecs
 * alone over a list of routes (expert -1: skipped). */
hydra_status gpu_moe_experts(gpu_session *g, int l, int n, const gk_norm_out *next);
hydra_status gpu_experts_routed(gpu_session *g, int l, const gk_route *routes, int n_routes);

/* --- hybrid decode (gpu_hybrid*.c, state in gpu_hybrid_internal.h): the slab, the split of each MoE layer
 * between it and the CPU, admissions between steps. */
typedef struct gpu_hybrid gpu_hybrid;
hydra_status gpu_hybrid_create(gpu_session *g); /* after the weights, KV cache and scratch */
void gpu_hybrid_free(gpu_session *g);
/* Replaces gpu_moe_experts for layer l when the session is hybrid. */
hydra_status gpu_hybrid_experts(gpu_session *g, int l, int n, const gk_norm_out *next);
/* Around a step: before its launch (landed admissions into the tables),
 * before its final synchronisation (counts back), after it (counters,
 * admission decisions and their copies). */
hydra_status gpu_hybrid_begin_step(gpu_session *g, int64_t n);
hydra_status gpu_hybrid_enqueue_tail(gpu_session *g);
hydra_status gpu_hybrid_end_step(gpu_session *g);
/* -sm tensor: g becomes part `part` of the split whose slab plan is s
 * (kept current by the parts' admissions): the experts split_slab_role_of
 * calls ELSEWHERE for it read the zeroed matrix zero, and its admissions
 * and evictions of its own experts rewrite main_part's rows of them
 * (gpu_hybrid_table.c).  Every part joins once all exist. */
struct split_slab;
hydra_status gpu_hybrid_join_tensor(gpu_session *g, struct split_slab *s, int part, const uint8_t *zero,
                                    gpu_session *main_part);

/* --- multi-GPU (gpu_multi.c): a session over several devices, each part
 * a session of its own running a layer range (gpu_options.split). */
hydra_status gpu_multi_create(gpu_session **out, const model_weights *w, const gpu_options *o);
void gpu_multi_free(gpu_session *g);
hydra_status gpu_multi_forward(gpu_session *g, int64_t pos0, const int32_t *tokens, int64_t n, bool all_rows,
                               float *logits);
void gpu_multi_stats(const gpu_session *g, gpu_stats *out);
void gpu_multi_hybrid_counters(const gpu_session *g, gpu_hybrid_counters *out, bool reset);
/* The parts' split states as one (layer l from the part that runs it,
 * the model-wide counters summed), rebuilt at each call; NULL when not
 * hybrid. */
const struct hybrid_state *gpu_multi_split_state(const gpu_session *g);

/* NCCL, loaded at run time (gpu_multi_nccl.c): one communicator per device
 * of one process; gpu_nccl_sum all-reduces buf[i] (count floats, in
 * place) on streams[i] of every device as one group. */
typedef struct gpu_nccl gpu_nccl;
hydra_status gpu_nccl_open(gpu_nccl **out, int n, const int *devices);
void gpu_nccl_close(gpu_nccl *c); /* NULL is allowed */
hydra_status gpu_nccl_sum(gpu_nccl *c, float *const *buf, size_t count, const gpuStream_t *streams);

/* One step of a session in two halves (gpu_session.c), so that several
 * sessions can be chained on their streams: launch copies the step's
 * tokens and enqueues it (or replays its graph); finish copies the logits
 * back when the session runs the output head, waits for the stream, and
 * ends the hybrid step. */
hydra_status gpu_step_launch(gpu_session *g, int64_t pos0, const int32_t *tokens, int64_t n, bool all_rows,
                             uint64_t generation);
hydra_status gpu_step_finish(gpu_session *g, int64_t n, bool all_rows, float *logits);
/* Where the device copies a step's logits for the destination logits: the
 * destination itself when it takes every row or is the session's pinned
 * logits_row, else the pinned staging row h_logits, which the caller then
 * copies to logits (a copy into pageable memory costs more than staging
 * plus memcpy: docs/PERFORMANCE.md "the logits' return"). */
static inline float *gpu_logits_landing(const gpu_session *g, bool all_rows, float *logits)
{
    return all_rows || logits == g->logits_row ? logits : g->h_logits;
}
/* Whether a step of n tokens (all_rows: every row's logits) ends in the
 * one-row output head writing the session's pinned logits_row directly
 * (gpu_forward.c). */
bool gpu_head_to_row(const gpu_session *g, int64_t n, bool all_rows);
/* The pinned logits row of the part that runs the output head. */
float *gpu_multi_logits_row(const gpu_session *g);

/* The end of the session's layer range. */
static inline int gpu_layer_end(const gpu_session *g)
{
    return g->o.layer1 > 0 ? g->o.layer1 : (int)g->w->hp.n_layer;
}

/* --- graph cache (gpu_graph.c): runs the step of this shape, capturing it
 * on first use, replaying it after. */
hydra_status gpu_graph_run(gpu_session *g, const step_shape *sh);
void gpu_graph_free_all(gpu_session *g);

/* --- profile marks (gpu_forward.c): records an event attributing the time
 * since the previous mark to op. */
void gpu_prof_mark(gpu_session *g, gpu_op op);

/* --- single-launch checks (gpu_check_ops.c, used by gpu_check_*.c): each
 * buffer is carved from one zeroed device allocation, `in` copied there
 * before the launch and the device copy read back into `out` after it. */
typedef struct gpu_check_buf {
    const void *in; /* copied to the device before the launch; NULL: zeros */
    void *out;      /* copied back after it; NULL: not */
    size_t bytes;
    void *dev;
} gpu_check_buf;

typedef int (*gpu_check_launch)(const void *ctx, const gpu_check_buf *b);

/* Fails with HYDRA_ERR_UNSUPPORTED without a device. */
hydra_status gpu_check_run(gpu_check_buf *b, int n, gpu_check_launch launch, const void *ctx, const char *what);

#endif
