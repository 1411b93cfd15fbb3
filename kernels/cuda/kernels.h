/*
 * kernels.h — the CUDA kernels as C functions that enqueue work on a
 * stream.  Host code (src/gpu/) calls only these; the .cu files hold the
 * kernels, one file per op family:
 *
 *   quantize.cu   activation rows -> 8-bit rows with per-32 scales, or f16
 *   matvec.cu     decode: weight rows . few activation rows (integer dot
 *                 products for quantised weights), dense or per route
 *   matmul.cu     prefill: quantised weights decoded to f16 tiles for
 *                 tensor-core products (mmq.cu), F16 in f16 tiles (WMMA),
 *                 F32/BF16 in f32 tiles; dense or grouped by expert
 *   attention.cu  flash-decoding over the KV cache, GQA
 *   moe.cu        gating + top-k, grouping routes by expert, combine
 *   ops.cu        embedding, RMSNorm, QK-norm + RoPE + KV store, SwiGLU,
 *                 residual adds
 *
 * Values that change from step to step (token ids, the first position) are
 * read from device memory (gk_step), so a captured graph replays without
 * new parameters.  Every launcher returns 0 or a gpuError_t; launchers
 * never synchronise.
 */
#ifndef HYDRA_CUDA_KERNELS_H
#define HYDRA_CUDA_KERNELS_H

#include "compat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Per-step values in device memory. */
typedef struct gk_step {
    int32_t pos0;   /* position of the step's first token */
    int32_t n_tok;
    uint32_t seq;   /* the step's number in its session (gk_route_word's tag) */
} gk_step;

/* Routes handed from the launch that picks them to the experts' launch
 * by words instead of by that launch's completion: the picking launch
 * stores route k's expert, the FFN norm's scale and the step's seq into
 * words[k] (common.cuh's gk_route_word_of) once x, which the experts norm,
 * is visible, and each of the experts' blocks, resident while it runs,
 * polls its route's word.  Why: the experts' blocks could ask for their weights
 * only once the router launch had completed and its writes were flushed
 * (the PDL wait), then read the routes back (docs/PERFORMANCE.md, "CUDA
 * decode, session 15").  A layer has its own words: they hold an earlier
 * step's tag until the routes of this one are out (gpu_step_launch resets
 * them before a one-token step that follows any other step, so no word is
 * old enough for its tag to come round again).  words NULL: no hand-off. */
typedef struct gk_route_word {
    unsigned long long *words; /* n_used */
    const gk_step *step;
} gk_route_word;
enum { GK_RW_SEQ_BITS = 20, GK_RW_EXPERT_BITS = 12 }; /* a word's fields (common.cuh's gk_route_word_of) */
enum { GK_RW_SEQ_MASK = (1 << GK_RW_SEQ_BITS) - 1 };  /* the seq's bits a word keeps (its tag) */

/* One (token, expert, weight) assignment, laid out as moe_route (src/moe.h). */
typedef struct gk_route {
    int32_t token, expert;
    float weight;
} gk_route;

/* Activation rows of n values: float rows, and their 8-bit form (q: n
 * bytes per row; meta: n / 32 entries per row of {float d as bits, sum of
 * q over values 0..15, over 16..31, unused}).  h: the rows as f16 bits
 * (gk_rows_to_f16), which the prefill matmul of quantised weights reads;
 * NULL elsewhere. */
typedef struct gk_act {
    const float *f;
    const int8_t *q;
    const int32_t *meta; /* 4 int32 per 32 values */
    int64_t n;
    const uint16_t *h;
} gk_act;

/* A weight matrix (or a stack of expert matrices). */
typedef struct gk_mat {
    const uint8_t *data;
    uint32_t type;       /* ggml type id */
    int64_t n_rows, n_cols;
    size_t row_bytes, mat_bytes;
    const uint8_t *const *expert_data; /* device table: expert e's matrix; NULL: data + e * mat_bytes */
} gk_mat;

/* Where a launch's rows come from and go to.
 *   dense:  activation row t and output row t for t < n_tok
 *   routed: (routes != NULL) one route per output row r < n_routes: the
 *           route's expert's matrix, activation row routes[r].token
 *           (act_by_token) or r, output row r */
typedef struct gk_rows {
    int n_tok;
    const gk_route *routes;
    int n_routes;
    bool act_by_token;
} gk_rows;

/* Output: y[row * y_stride + r] = (accumulate ? y : 0) + W[r] . x + bias[r]. */
typedef struct gk_out {
    float *y;
    int64_t y_stride;
    const float *bias; /* NULL: none */
    bool accumulate;
} gk_out;

/* Whether the kernels handle a weight type in matvec / matmul. */
bool gk_type_supported(uint32_t type);

/* --- quantize.cu */
int gk_quantize_rows(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, int8_t *q, int32_t *meta);
/* The rows as f16 bits, rounded to nearest (n % 4 == 0). */
int gk_rows_to_f16(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, uint16_t *h);

/* --- matvec.cu.  Decode: at most GK_MATVEC_MAX_TOK tokens for dense rows.
 * glu (dense or routed): y = silu(W . x) * (W2 . x) with W2 a second matrix
 * of the same type and shape (up), for gate/up FFN pairs. */
enum { GK_MATVEC_MAX_TOK = 8, GK_MATVEC_MAX_MATS = 3 };
int gk_matvec(gpuStream_t s, const gk_mat *w, const gk_mat *w2_glu, const gk_act *x, const gk_rows *rows,
              const gk_out *out);
/* gk_matvec of a quantised matrix whose blocks quantise their activation
 * row (x->f; x->q and meta unused) into shared memory themselves, by
 * gk_quantize_rows' rule: one row per block (routed, or n_tok == 1), no
 * glu, x->n % 32 == 0 and <= 32768.  Saves the quantize launch. */
int gk_matvec_staged(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_rows *rows, const gk_out *out);
/* --- experts.cu: one decode token's routed experts in one launch, the
 * same bits as gk_matvec(gate, up) into h then gk_matvec_staged(down, h):
 * route r (rows.routes, activation row routes[r].token with
 * act_by_token; x's 8-bit form) into output row r of out; expert -1
 * skipped.  Plain SwiGLU, no gate/up bias (out may carry the down bias).
 * Where gk_experts_fits: compute capability 9.0 (bulk copies), the type
 * pairs and shapes of experts.cu, at most GK_EXPERTS_MAX_ROUTES routes,
 * the matrices' expert e at data + e * mat_bytes, 16-byte aligned, and
 * every block of the launch resident at once on the device. */
enum { GK_EXPERTS_MAX_ROUTES = 32, GK_EXPERTS_SYNC_WORDS = 5 * GK_EXPERTS_MAX_ROUTES };
typedef struct gk_experts_job {
    gk_mat gate, up, down;
    gk_act x;
    gk_rows rows;
    gk_out out;
    float *h;           /* scratch: n_routes rows of gate.n_rows (the hidden rows) */
    unsigned int *sync; /* GK_EXPERTS_SYNC_WORDS, zero before a session's first launch; launches leave them valid */
    /* With ready.words: the routes come by those words (one token), and the
     * token's row is normed by each block from x_raw (x.f's n values),
     * written by the launch that sets the word, gain (NULL: none) and the
     * RMSNorm's scale that the word carries; x.q and x.meta are not read. */
    gk_route_word ready;
    const float *x_raw, *gain;
} gk_experts_job;
bool gk_experts_fits(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes);
int gk_experts(gpuStream_t s, const gk_experts_job *e);
/* Dense, n_mats (<= GK_MATVEC_MAX_MATS) matrices of one type and row
 * length over the same n_tok activation rows, in one launch (Q, K, V);
 * for one token the last matrix may have another type where
 * gk_matvec_mixed(type, last type) says so. */
int gk_matvec_multi(gpuStream_t s, const gk_mat *const *w, const gk_out *out, int n_mats, const gk_act *x, int n_tok);
bool gk_matvec_mixed(uint32_t type, uint32_t last);
/* matvec_head.cu: gk_matvec of one token through a matrix read at the
 * memory's pace (the output projection): each row staged in shared memory
 * by coalesced loads, the same bits.  Dense, no glu; types and row sizes
 * where gk_matvec_head_fits. */
bool gk_matvec_head_fits(const gk_mat *w);
/* With norm (not NULL): x->f is the raw row, and the launch applies the
 * RMSNorm first (norm's gain and eps, gk_rmsnorm's bits): in the launch
 * itself where the row fits (norm's y, q, meta are then not written), else
 * by gk_rmsnorm into norm's y, q, meta.  Without: x->q, x->meta. */
struct gk_norm_out;
int gk_matvec_head(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_out *out,
                   const struct gk_norm_out *norm);

/* --- matmul.cu.  Prefill, dense: rows.n_tok activation rows.  Grouped:
 * tiles of GK_TILE_TOK slots of one expert each (built by gk_moe_group):
 * activation row of slot s is routes[order[s]].token (gather) or s, output
 * row s.  Quantised weights read x's f16 form (x.h: gk_rows_to_f16
 * first), float weights x.f. */
enum { GK_TILE_TOK = 64, GK_MATMUL_K = 64 }; /* rows of n_cols % GK_MATMUL_K == 0 only */
int gk_matmul(gpuStream_t s, const gk_mat *w, const gk_act *x, int n_tok, const gk_out *out);
/* Dense, n_mats (<= 3) quantised matrices of one row length over the same
 * n_tok rows in one launch (a layer's Q, K, V), matrix m into out[m],
 * reading activation columns x_col[m] on (x_col NULL: all 0); one type,
 * except that the last may be another where gk_matmul_stacks says so (it
 * says whether the launch takes the matrices at all).  Whether a matrix's
 * launch would run faster as its two column halves (then stacked, each
 * reading its half of the activation columns): gk_matmul_split_pays. */
bool gk_matmul_stacks(const gk_mat *const *w, int n_mats);
int gk_matmul_multi(gpuStream_t s, const gk_mat *const *w, const gk_out *out, int n_mats, const gk_act *x,
                    const int64_t *x_col, int n_tok);
bool gk_matmul_split_pays(const gk_mat *w, int n_tok);

typedef struct gk_groups {
    const int32_t *order;    /* slot -> route index */
    const int32_t *slot_of;  /* route index -> slot */
    const int32_t *tiles;    /* 4 int32 per tile: expert, first slot, slots */
    const int32_t *n_tiles;  /* device count */
    int max_tiles;
} gk_groups;

int gk_matmul_grouped(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_route *routes, const gk_groups *g,
                      bool gather, const gk_out *out);
/* The gate and up matrices of a GLU pair (quantised, one type and shape)
 * in one grouped launch sharing the activation tiles: out = silu(gate . x)
 * * (up . x), the plain SwiGLU of gk_glu_act. */
int gk_matmul_grouped_glu(gpuStream_t s, const gk_mat *gate, const gk_mat *up, const gk_act *x,
                          const gk_route *routes, const gk_groups *g, bool gather, const gk_out *out);

/* --- attention.cu.  Queries of n_tok tokens (rows of n_head * head_dim_k),
 * cache rows of n_head_kv heads; token t sees positions [0, pos0 + t].
 * Partial results per chunk of at most GK_ATTN_CHUNK positions go to
 * scratch (gk_attention_scratch floats), whose first GK_ATTN_COUNTERS
 * words are launch counters: zero before the first launch, and the
 * launches leave them zero (gk_attention_ext's scratch likewise). */
enum { GK_ATTN_CHUNK = 128, GK_ATTN_MAX_GROUP = 16, GK_ATTN_COUNTERS = 256, GK_ATTN_DECODE_MAX_KV = 2048 };
typedef struct gk_attn {
    const float *q;
    const void *k, *v;        /* this layer's cache: n_ctx rows */
    bool kv_f16;
    int64_t k_row, v_row;     /* elements per cache row */
    int n_head, n_head_kv, head_dim_k, head_dim_v;
    float scale;
    int n_tok;
    int tok0;                 /* token t of this launch is token tok0 + t of the step */
    int max_kv;               /* grid bound: pos0 + tok0 + n_tok <= max_kv */
    int chunk;                /* positions per block: set by gk_attention */
    float *scratch;
    float *out;               /* n_tok rows of n_head * head_dim_v */
    int8_t *out_q;            /* NULL, or out's 8-bit form too (gk_act's q, meta; */
    int32_t *out_meta;        /* head_dim_v % 32 == 0; gk_attention only) */
} gk_attn;

size_t gk_attention_scratch(int n_tok, int n_head, int n_head_kv, int head_dim_v, int max_kv);
/* Shared memory of one block; head_dim_k % 8 == 0, at most
 * GK_ATTN_MAX_GROUP query heads per KV head, and 48 KiB. */
size_t gk_attention_smem(int group, int head_dim_k);
int gk_attention(gpuStream_t s, const gk_attn *a, const gk_step *step);
/* attn_prefill.cu: the same attention for prefill on the tensor cores
 * (F16 cache, head_dim_k == head_dim_v of 64 or 128, no out_q, no
 * scratch); gk_attention_tiles_fit says whether a launch qualifies. */
bool gk_attention_tiles_fit(const gk_attn *a);
int gk_attention_tiles(gpuStream_t s, const gk_attn *a, const gk_step *step);

/* An RMSNorm's output: y = x / rms(x) * gain (gain NULL: none), and with q
 * the 8-bit form of y (meta as gk_act's). */
enum { GK_NORM_THREADS = 256 };
typedef struct gk_norm_out {
    const float *gain;
    float eps;
    float *y;
    int8_t *q;
    int32_t *meta;
} gk_norm_out;

/* --- moe.cu */
typedef struct gk_gating {
    int n_expert, n_used;
    bool sigmoid;  /* else softmax */
    bool renorm;
    float scale;
} gk_gating;

/* routes[t * n_used + k] for t < n_tok from logits rows of n_expert. */
int gk_moe_topk(gpuStream_t s, const gk_gating *g, const float *logits, int n_tok, gk_route *routes);

/* Groups n_routes routes by expert into tiles of GK_TILE_TOK slots
 * (n_expert <= 4096). */
int gk_moe_group(gpuStream_t s, const gk_route *routes, int n_routes, int n_expert, const gk_groups *g);
/* Upper bound of tiles for n_routes routes over n_expert experts. */
int gk_moe_max_tiles(int n_routes, int n_expert);

/* x[t] += sum over k of routes[t*n_used+k].weight * y[slot(t*n_used+k)]
 * (slot_of NULL: the route index), in rank order; then, with norm (not
 * NULL), the RMSNorm of the new rows as gk_rmsnorm writes it (the next
 * layer's input, saving its launch). */
int gk_moe_combine(gpuStream_t s, const gk_route *routes, const int32_t *slot_of, const float *y, int n_tok,
                   int n_used, int64_t n_embd, float *x, const gk_norm_out *norm);

/* Router logits and the top-k in one launch (tail.cuh): the float matvec
 * of n_tok <= GK_MATVEC_MAX_TOK rows (F32/F16/BF16 router, out as
 * gk_matvec's), whose last block to finish then selects each token's
 * experts into routes as gk_moe_topk does (softmax or sigmoid, renorm,
 * scale; no selection bias or expert groups), saving the top-k launch.
 * n_expert <= GK_TAIL_MAX_EXPERTS, n_used <= GK_TAIL_MAX_USED; counter: a
 * device word that is zero between launches (the last block resets it).
 * With norm (one token, x->n % 32 == 0, x->n <= GK_ROUTER_NORM_MAX): x->f
 * is the raw row; the router dots its RMSNorm (norm's gain and eps,
 * gk_rmsnorm's formulas) and also writes it to norm's y, q, meta, saving
 * the RMSNorm launch. */
enum { GK_TAIL_MAX_EXPERTS = 256, GK_TAIL_MAX_USED = 32, GK_ROUTER_NORM_MAX = 2048 };
typedef struct gk_tail {
    unsigned int *counter;
    gk_gating gating;
    gk_route *routes;
} gk_tail;
int gk_router_topk(gpuStream_t s, const gk_mat *w, const gk_act *x, int n_tok, const gk_out *out,
                   const gk_tail *tail, const gk_norm_out *norm);

/* --- hybrid.cu: one MoE layer split between the VRAM slab (hits) and the
 * CPU (misses), issue 10.  Pointers marked "mapped" are device addresses of
 * pinned host memory. */
typedef struct gk_hy_split_args {
    const gk_route *routes;      /* n_tok * n_used, from gk_moe_topk */
    int n_tok, n_used;
    const int32_t *slot_of;      /* this layer's device slot table: expert -> slot, or < 0 */
    gk_route *hits;              /* every route in place, misses with expert -1 */
    int32_t *n_miss_dev;         /* the miss count, device */
    uint32_t *counts;            /* lookups per expert of this layer (device), or NULL */
    gk_route *miss;              /* mapped: the misses, compacted in route order */
    int32_t *n_miss_host;        /* mapped */
    const float *xn;             /* the layer's normed rows (n_tok x n_embd) ... */
    int64_t n_embd;
    float *x_host;               /* ... copied here (mapped) when there is a miss */
    unsigned long long *stamp;   /* mapped: the GPU clock (ns) when done, or NULL */
    /* The flag hand-off (NULL seq: host nodes instead): the layer and a new
     * request number go to mapped memory, the number also to seq. */
    uint32_t *seq;               /* device */
    uint32_t *req_host;          /* mapped */
    int32_t *layer_host;         /* mapped */
    int layer;
} gk_hy_split_args;
int gk_hy_split(gpuStream_t s, const gk_hy_split_args *a);

typedef struct gk_hy_combine_args {
    const gk_route *hits;        /* from gk_hy_split */
    const float *y;              /* one output row per route (the routed down matvec's) */
    const float *part;           /* mapped: the CPU's partial sums, n_tok x n_embd */
    const int32_t *n_miss;       /* device: part is added only when > 0 */
    int n_tok, n_used;
    int64_t n_embd;
    float *x;
    unsigned long long *stamp;   /* mapped: the GPU clock when the combine starts, or NULL */
} gk_hy_combine_args;
/* x[t] += hits in rank order, then part[t]; then, with norm, the next
 * layer's input as gk_moe_combine writes it. */
int gk_hy_combine(gpuStream_t s, const gk_hy_combine_args *c, const gk_norm_out *norm);
/* counts[routes[r].expert] += 1 for r < n_routes. */
int gk_hy_count(gpuStream_t s, const gk_route *routes, int n_routes, uint32_t *counts);
int gk_hy_stamp(gpuStream_t s, unsigned long long *stamp);
/* Waits (one thread) until the mapped done_host reaches *seq, the CPU's
 * reply to the request of gk_hy_split; after timeout_ns it gives up and
 * sets *err_host (mapped), so a missing reply cannot hang the device. */
int gk_hy_wait(gpuStream_t s, const uint32_t *seq, const uint32_t *done_host, int32_t *err_host,
               unsigned long long timeout_ns);

/* --- ops.cu */

int gk_embed(gpuStream_t s, const gk_mat *table, const int32_t *tokens, int n_tok, float *x);
/* gk_embed, then each row's RMSNorm into norm's y (q, meta: as gk_rmsnorm
 * writes them), gk_rmsnorm's bits: one launch where the row fits a
 * block's registers, else the two. */
int gk_embed_norm(gpuStream_t s, const gk_mat *table, const int32_t *tokens, int n_tok, float *x,
                  const gk_norm_out *norm);
/* y = x / rms(x) * gain, rows of n; with q (n % 32 == 0), also y's 8-bit
 * form as gk_quantize_rows writes it. */
int gk_rmsnorm(gpuStream_t s, const float *x, const float *gain, float eps, int n_rows, int64_t n, float *y, int8_t *q,
               int32_t *meta);

typedef struct gk_rope {
    float *q, *k;                  /* n_tok rows of n_head (n_head_kv) heads */
    const float *v;
    const float *q_norm, *k_norm;  /* per-head RMSNorm gains, NULL: none */
    float eps;
    int n_head, n_head_kv, head_dim_k, head_dim_v, n_rot;
    bool neox;
    float theta_scale;             /* base^(-2 / n_rot), computed on the host as the CPU does */
    float freq_scale, attn_factor; /* linear scaling: theta * freq_scale; cos and sin * attn_factor */
    float ext_factor, corr_low, corr_high; /* YaRN (rope.cuh); ext_factor 0: none */
    void *k_cache, *v_cache;       /* this layer's cache */
    bool kv_f16;
    int n_tok;
} gk_rope;

/* QK-norm, RoPE at position pos0 + t, then K and V rows into the cache. */
int gk_rope_store(gpuStream_t s, const gk_rope *r, const gk_step *step);
/* Decode (one token): gk_rope_store and gk_attention in the attention's
 * launches, the same bits (attention.cu); r and a describe the same heads
 * and cache (rows of n_head_kv heads), head_dim_k <= 256.  r's q, k are
 * read, not rotated in place. */
int gk_attention_rope(gpuStream_t s, const gk_attn *a, const gk_rope *r, const gk_step *step);
/* attn_decode.cu: the one-token case over a cache of max_kv <=
 * GK_ATTN_DECODE_MAX_KV (head sizes <= 128), which gk_attention and
 * gk_attention_rope take where gk_attention_decode_fits: one launch, more
 * blocks (rope NULL: none). */
bool gk_attention_decode_fits(const gk_attn *a);
int gk_attention_decode(gpuStream_t s, const gk_attn *a, const gk_rope *rope, const gk_step *step);

/* h = silu(g) * u over n values. */
int gk_swiglu(gpuStream_t s, const float *g, const float *u, int64_t n, float *h);

/* x[t] += (gate ? sigmoid(gate[t]) : 1) * y[t], rows of n. */
int gk_add_rows(gpuStream_t s, float *x, const float *y, const float *gate, int n_tok, int64_t n);

/* --- host-side checks of the block decoders (no GPU needed) */
/* The 32 values of chunk c of a row of type, as the kernels decode them;
 * false for a type without a decoder. */
bool gk_host_decode_chunk(uint32_t type, const void *row, int c, float out[32]);
/* The integer dot of chunk c with 32 activation bytes, before the
 * activation scale, as the kernels compute it. */
bool gk_host_chunk_dot(uint32_t type, const void *row, int c, const int8_t a[32], float *out);

#ifdef __cplusplus
}
#endif
#endif
