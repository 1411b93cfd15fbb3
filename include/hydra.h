/*
 * hydra.h — the one public header of libhydra, an inference engine for
 * Mixture-of-Experts language models stored as GGUF.
 *
 * Conventions
 *   - Every function that can fail returns a hydra_status.  HYDRA_OK is 0.
 *   - When a call fails it leaves a human-readable message, retrievable with
 *     hydra_last_error().  The message is per thread (like errno), so a
 *     failed hydra_model_open, which has no handle yet, can still explain
 *     itself.  A successful call does not clear the message.
 *   - Handles are opaque.  Whatever a handle returns (strings, tensor data
 *     pointers) stays valid until the handle is closed.
 *   - Only symbols prefixed hydra_ are exported.
 */
#ifndef HYDRA_H
#define HYDRA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HYDRA_BUILD)
#define HYDRA_API __attribute__((visibility("default")))
#else
#define HYDRA_API
#endif

/* ---------------------------------------------------------------- status */

/* One table generates the enum and hydra_strerror(): X(name, text). */
#define HYDRA_STATUS_TABLE(X)                                                 \
    X(HYDRA_OK, "success")                                                    \
    X(HYDRA_ERR_INVALID_ARG, "invalid argument")                              \
    X(HYDRA_ERR_IO, "input/output error")                                     \
    X(HYDRA_ERR_FORMAT, "malformed file")                                     \
    X(HYDRA_ERR_UNSUPPORTED, "unsupported feature")                           \
    X(HYDRA_ERR_NOMEM, "out of memory")                                       \
    X(HYDRA_ERR_CANCELLED, "cancelled by the caller")                         \
    X(HYDRA_ERR_NOT_FOUND, "not found")                                       \
    X(HYDRA_ERR_TYPE, "value has another type")                               \
    X(HYDRA_ERR_RANGE, "value out of range")

typedef enum hydra_status {
#define HYDRA_STATUS_ENUM_(name, text) name,
    HYDRA_STATUS_TABLE(HYDRA_STATUS_ENUM_)
#undef HYDRA_STATUS_ENUM_
    HYDRA_STATUS_COUNT
} hydra_status;

/* A static description of a status ("malformed file"); never NULL. */
HYDRA_API const char *hydra_strerror(hydra_status status);

/* The message the last failing hydra_ call on this thread left, naming what
 * was wrong (for a file: the field and its byte offset).  "" if none. */
HYDRA_API const char *hydra_last_error(void);

/* ------------------------------------------------------------ GGUF types */

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum hydra_value_type {
    HYDRA_VALUE_U8 = 0,
    HYDRA_VALUE_I8 = 1,
    HYDRA_VALUE_U16 = 2,
    HYDRA_VALUE_I16 = 3,
    HYDRA_VALUE_U32 = 4,
    HYDRA_VALUE_I32 = 5,
    HYDRA_VALUE_F32 = 6,
    HYDRA_VALUE_BOOL = 7,
    HYDRA_VALUE_STRING = 8,
    HYDRA_VALUE_ARRAY = 9,
    HYDRA_VALUE_U64 = 10,
    HYDRA_VALUE_I64 = 11,
    HYDRA_VALUE_F64 = 12,
} hydra_value_type;

/* Name of a metadata value type ("u32", "string", ...), "?" if unknown. */
HYDRA_API const char *hydra_value_type_name(uint32_t type);

/* Tensor element types use ggml's numbering (0 = F32, 1 = F16, 8 = Q8_0, ...).
 * Name of a tensor type ("Q4_K"), or NULL for an id no GGUF may contain. */
HYDRA_API const char *hydra_type_name(uint32_t type);

/* One past the largest tensor type id hydra knows. */
HYDRA_API uint32_t hydra_type_count(void);

/* ------------------------------------------------------------------ model */

typedef struct hydra_model hydra_model;

/* Loading progress: fraction in [0, 1].  Return false to cancel loading;
 * hydra_model_open then fails with HYDRA_ERR_CANCELLED. */
typedef bool (*hydra_progress_fn)(float fraction, void *user);

typedef struct hydra_model_params {
    const char *path;           /* GGUF file (required) */
    hydra_progress_fn progress; /* optional */
    void *progress_user;        /* passed to progress */
    bool use_mmap;              /* map the file (default) or read it into memory */
    bool use_mlock;             /* lock the weights in RAM (needs RLIMIT_MEMLOCK) */
} hydra_model_params;

/* Defaults: no path, no progress callback, mmap on, mlock off. */
HYDRA_API hydra_model_params hydra_model_default_params(void);

/* Opens and validates a GGUF file.  On success *out owns the model; on
 * failure *out is NULL and hydra_last_error() says what is wrong. */
HYDRA_API hydra_status hydra_model_open(hydra_model **out, const hydra_model_params *params);

/* Frees everything the model owns.  NULL is allowed. */
HYDRA_API void hydra_model_close(hydra_model *model);

/* general.architecture ("qwen3moe", "llama", ...); "" when absent. */
HYDRA_API const char *hydra_model_arch(const hydra_model *model);

/* GGUF format version (2 or 3). */
HYDRA_API uint32_t hydra_model_gguf_version(const hydra_model *model);

/* --- metadata.  Keys are full names ("qwen3moe.expert_count"). */

HYDRA_API size_t hydra_model_meta_count(const hydra_model *model);

/* Key and value type of the i-th metadata entry, in file order. */
HYDRA_API hydra_status hydra_model_meta_at(const hydra_model *model, size_t i, const char **key,
                                           hydra_value_type *type);

/* Type of a key; HYDRA_ERR_NOT_FOUND if absent. */
HYDRA_API hydra_status hydra_model_meta_type(const hydra_model *model, const char *key,
                                             hydra_value_type *type);

/* Typed getters.  Integer getters accept any integer type whose value fits
 * (HYDRA_ERR_RANGE otherwise); the float getter accepts f32 and f64.  A key
 * of another type gives HYDRA_ERR_TYPE, a missing key HYDRA_ERR_NOT_FOUND. */
HYDRA_API hydra_status hydra_model_get_u64(const hydra_model *model, const char *key, uint64_t *out);
HYDRA_API hydra_status hydra_model_get_i64(const hydra_model *model, const char *key, int64_t *out);
HYDRA_API hydra_status hydra_model_get_f64(const hydra_model *model, const char *key, double *out);
HYDRA_API hydra_status hydra_model_get_bool(const hydra_model *model, const char *key, bool *out);
/* String values are NUL-terminated copies; *len (optional) excludes the NUL.
 * GGUF strings may contain NUL bytes: trust *len, not strlen. */
HYDRA_API hydra_status hydra_model_get_str(const hydra_model *model, const char *key,
                                           const char **out, size_t *len);

/* Arrays: element type and length; then elements by index.  Element getters
 * follow the scalar getters' rules.  Nested arrays are described (their
 * element type is HYDRA_VALUE_ARRAY) but not read through this API. */
HYDRA_API hydra_status hydra_model_get_arr(const hydra_model *model, const char *key,
                                           hydra_value_type *elem_type, size_t *n);
HYDRA_API hydra_status hydra_model_get_arr_str(const hydra_model *model, const char *key,
                                               size_t i, const char **out, size_t *len);
HYDRA_API hydra_status hydra_model_get_arr_i64(const hydra_model *model, const char *key,
                                               size_t i, int64_t *out);
HYDRA_API hydra_status hydra_model_get_arr_f64(const hydra_model *model, const char *key,
                                               size_t i, double *out);

/* --- tensors */

typedef struct hydra_tensor_info {
    const char *name;
    uint32_t type;          /* ggml type id */
    const char *type_name;  /* "Q4_K" */
    uint32_t n_dims;        /* 1..4 */
    uint64_t ne[4];         /* ggml order: ne[0] is the row length; unused dims are 1 */
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t file_offset;   /* absolute byte offset of the data in the file */
    const void *data;       /* the bytes, inside the mapping */
} hydra_tensor_info;

HYDRA_API size_t hydra_model_tensor_count(const hydra_model *model);
HYDRA_API hydra_status hydra_model_tensor_at(const hydra_model *model, size_t i, hydra_tensor_info *out);
HYDRA_API hydra_status hydra_model_tensor_find(const hydra_model *model, const char *name,
                                               hydra_tensor_info *out);

/* --- totals */

HYDRA_API uint64_t hydra_model_n_params(const hydra_model *model);     /* elements of all tensors */
HYDRA_API uint64_t hydra_model_n_bytes(const hydra_model *model);      /* tensor data bytes */
HYDRA_API uint64_t hydra_model_file_size(const hydra_model *model);
/* Tensor data bytes of one type (0 if none), for the quant mix. */
HYDRA_API uint64_t hydra_model_bytes_of_type(const hydra_model *model, uint32_t type);

/* ---------------------------------------------------------------- session */

/* A session is one conversation with a model: it owns the KV cache, the
 * positions evaluated so far, the logits of the last position, its working
 * buffers (sized once at creation: evaluating allocates nothing) and a pool
 * of worker threads.  A model may serve several sessions; it must outlive
 * them.  A session is used by one thread at a time. */
typedef struct hydra_session hydra_session;

/* Element type of the KV cache. */
typedef enum hydra_kv_type {
    HYDRA_KV_F16 = 0, /* default: half the memory; logits within the reference tolerances */
    HYDRA_KV_F32 = 1,
} hydra_kv_type;

/* Where a session computes. */
typedef enum hydra_backend {
    HYDRA_BACKEND_CPU = 0,  /* default */
    HYDRA_BACKEND_CUDA = 1, /* the whole model in the memory of CUDA device 0 */
} hydra_backend;

/* How a session splits the experts of its MoE layers (hybrid decode). */
typedef enum hydra_hybrid_mode {
    HYDRA_HYBRID_OFF = 0,       /* default: every expert on the session's backend */
    HYDRA_HYBRID_CPU_SPLIT = 1, /* both sides on the CPU backend, the slab a host buffer: the partition,
                                   slot table and combine without a GPU (CI) */
    HYDRA_HYBRID_CUDA = 2,      /* slab in VRAM, misses on the CPU (backend CUDA) */
} hydra_hybrid_mode;

/* How a CUDA session spreads over several GPUs (llama.cpp's -sm). */
typedef enum hydra_split_mode {
    HYDRA_SPLIT_NONE = 0,   /* default: one device (main_gpu) */
    HYDRA_SPLIT_LAYER = 1,  /* contiguous layers per device */
    HYDRA_SPLIT_TENSOR = 2, /* heads, FFN columns and experts per device, all-reduced per sublayer */
} hydra_split_mode;

#define HYDRA_MAX_DEVICES 16

typedef struct hydra_session_params {
    uint32_t n_ctx;        /* positions the cache holds; 0 = the model's context_length */
    uint32_t n_batch;      /* most tokens computed in one step (longer inputs are split); 0 = 512 */
    int n_threads;         /* worker threads including the caller; 0 = the machine's physical cores */
    hydra_kv_type kv_type; /* HYDRA_KV_F16 by default */
    hydra_backend backend; /* HYDRA_BACKEND_CPU by default */
    bool cuda_graphs;      /* CUDA: capture each step's structure once as a graph and replay it (default true) */
    /* Hybrid decode (issue 10, docs/HYBRID.md): the most used experts of
     * every MoE layer sit in a slab, the rest are computed by the CPU from
     * the model's mapping, and the two partial sums are combined.  Which
     * experts: the pin file's ranking (NULL: expert id order).  How many
     * per layer: the placement of vram_budget when nonzero (hydra-run
     * --info --vram-budget prints it), else the pin file's pins per layer,
     * else resident_fraction of each layer's experts. */
    hydra_hybrid_mode hybrid;  /* HYDRA_HYBRID_OFF by default */
    double resident_fraction;  /* 0..1 (default 0.5) */
    const char *pin_file;      /* expert ranking / pin file (src/expert_rank.h); NULL: none */
    uint64_t vram_budget;      /* bytes for the device (the slab in the CPU split); 0: none */
    /* Several GPUs (backend CUDA; docs/MULTIGPU.md): HYDRA_SPLIT_LAYER gives
     * each device a contiguous range of layers, the hidden state copied
     * device to device once per boundary; HYDRA_SPLIT_TENSOR splits every
     * layer's heads, FFN columns and experts (needs NCCL at run time).
     * tensor_split: each device's share (all zero: by free memory).
     * main_gpu: the device of HYDRA_SPLIT_NONE, else the one holding the
     * output head.  With a split, vram_budget is per device. */
    hydra_split_mode split_mode;            /* HYDRA_SPLIT_NONE by default */
    float tensor_split[HYDRA_MAX_DEVICES];  /* -ts */
    int main_gpu;                           /* --main-gpu, 0 by default */
} hydra_session_params;

/* CUDA devices this process sees (0 without a CUDA build or device). */
HYDRA_API int hydra_cuda_device_count(void);

/* Whether this build has the CUDA backend and a CUDA device is present. */
HYDRA_API bool hydra_cuda_available(void);

/* Defaults: n_ctx 0 (model's), n_batch 512, n_threads 0 (physical cores), F16 cache, CPU backend,
 * CUDA graphs on, no hybrid split (resident_fraction 0.5 when one is chosen). */
HYDRA_API hydra_session_params hydra_session_default_params(void);

/* Binds the model's tensors by its architecture and allocates the session.
 * Fails with HYDRA_ERR_UNSUPPORTED for an architecture or tensor type hydra
 * cannot run (on the chosen backend; also for the CUDA backend without a
 * CUDA build or device), HYDRA_ERR_FORMAT for a missing key or a missing or mis-shaped
 * tensor (the message names it and its expected shape). */
HYDRA_API hydra_status hydra_session_create(hydra_session **out, const hydra_model *model,
                                            const hydra_session_params *params);

/* Frees the session.  NULL is allowed. */
HYDRA_API void hydra_session_free(hydra_session *session);

/* Evaluates n_tokens tokens at the next positions (prefill: computed as
 * matrix-matrix products, experts grouped by the tokens that chose them).
 * logits: NULL, or room for n_tokens x n_vocab floats that receives the
 * logits of every position, row i for tokens[i].  The last position's
 * logits are kept in either case (hydra_session_logits).  Fails, evaluating
 * nothing, on an empty input, a token id >= n_vocab (HYDRA_ERR_INVALID_ARG)
 * or when the cache would overflow n_ctx (HYDRA_ERR_RANGE). */
HYDRA_API hydra_status hydra_session_eval(hydra_session *session, const int32_t *tokens, size_t n_tokens,
                                          float *logits);

/* Evaluates tokens of several sessions of one model in one forward pass
 * (continuous batching: a server steps all its conversations together).
 * Session i gets tokens[i][0, n_tokens[i]) at its next positions.  Every
 * weight matrix is read once for the rows of all sessions; attention runs
 * per session over its own cache.  Afterwards each session is as if
 * hydra_session_eval(sessions[i], tokens[i], n_tokens[i], NULL) had run:
 * its positions advanced and its last token's logits kept, the same
 * logits as evaluating it alone.  The pass uses the first session's
 * threads and working buffers: the tokens in all must be at most its
 * n_batch (and each session's at most its own), and no session's context
 * larger than its context.  Fails, evaluating nothing, when a session
 * appears twice, sessions belong to different models or are not on the
 * CPU backend, a token id is >= n_vocab or n_tokens[i] is 0
 * (HYDRA_ERR_INVALID_ARG), or a session's cache would overflow or the
 * tokens exceed n_batch (HYDRA_ERR_RANGE).  Unlike
 * hydra_session_eval it allocates: the list of sequences and one row of
 * logits per session, for the call. */
HYDRA_API hydra_status hydra_session_eval_batch(hydra_session *const *sessions, const int32_t *const *tokens,
                                                const size_t *n_tokens, size_t n_sessions);

/* hydra_session_eval_batch, keeping every row's logits of the sessions
 * that ask for them (a speculative verify pass beside other sessions'
 * decode rows and prompt chunks, in the same forward pass).  rows: NULL
 * (= hydra_session_eval_batch), or one pointer per session: NULL keeps
 * only that session's last logits, else room for n_tokens[i] x n_vocab
 * floats that receives the logits of every one of its rows, row t for
 * tokens[i][t], the same logits as hydra_session_eval(sessions[i],
 * tokens[i], n_tokens[i], rows[i]) alone.  Every session's last logits
 * are kept as well.  Same checks and failures as hydra_session_eval_batch. */
HYDRA_API hydra_status hydra_session_eval_batch_logits(hydra_session *const *sessions, const int32_t *const *tokens,
                                                       const size_t *n_tokens, size_t n_sessions,
                                                       float *const *rows);

/* Evaluates one token (decode); same as hydra_session_eval(s, &token, 1, NULL). */
HYDRA_API hydra_status hydra_session_decode(hydra_session *session, int32_t token);

/* The n_vocab logits of the last evaluated position; NULL when none (new,
 * cleared or truncated session).  Valid until the next call on the session. */
HYDRA_API const float *hydra_session_logits(const hydra_session *session);

/* Positions evaluated so far (the next token's position). */
HYDRA_API uint32_t hydra_session_n_past(const hydra_session *session);
HYDRA_API uint32_t hydra_session_n_ctx(const hydra_session *session);
HYDRA_API uint32_t hydra_session_n_vocab(const hydra_session *session);
HYDRA_API int hydra_session_n_threads(const hydra_session *session);

/* Forgets every position: the next evaluation starts at position 0. */
HYDRA_API void hydra_session_clear(hydra_session *session);

/* Keeps the first n_past positions and forgets the rest, so a client can
 * rewind (n_past <= hydra_session_n_past, else HYDRA_ERR_RANGE).  The
 * kept positions are not recomputed.  A model with sliding-window layers
 * (gpt-oss) keeps only their window plus one step (n_batch) of positions
 * there: rewinding further back than n_batch positions from the furthest
 * position evaluated fails with HYDRA_ERR_RANGE, changing nothing (clear
 * and evaluate again). */
HYDRA_API hydra_status hydra_session_truncate(hydra_session *session, uint32_t n_past);

/* The CUDA backend's step counters: steps run, steps captured as a CUDA
 * graph (one per step structure: tokens in the step, context bucket, which
 * logits rows; src/gpu/gpu_graph.c) and steps replayed from one, graphs held.  A
 * steady state (decode, or speculative verify at one width) captures
 * nothing.  All zero on the CPU. */
typedef struct hydra_graph_stats {
    uint64_t steps, captures, replays;
    uint32_t graphs_cached;
} hydra_graph_stats;

HYDRA_API hydra_status hydra_session_graph_stats(const hydra_session *session, hydra_graph_stats *out);

/* Saving and restoring a session's cache (hydra-serve's slot files): the
 * positions evaluated so far with their keys and values, as a versioned
 * byte stream (src/kv_state.h) that hydra_session_state_read puts back
 * without evaluating anything; the restored session continues with the
 * same logits as the saved one would.  The stream holds no checksum and
 * no model identity: a file that keeps it adds both.  The callbacks return
 * false to stop (a full disk, a short file). */
typedef bool (*hydra_state_write_fn)(void *user, const void *data, size_t n);
typedef bool (*hydra_state_read_fn)(void *user, void *data, size_t n);

/* Bytes hydra_session_state_write writes now (0 without a session). */
HYDRA_API uint64_t hydra_session_state_size(const hydra_session *session);

/* Writes the cache of the hydra_session_n_past positions.  HYDRA_ERR_IO
 * when write refuses bytes, HYDRA_ERR_UNSUPPORTED for a CUDA session. */
HYDRA_API hydra_status hydra_session_state_write(const hydra_session *session, hydra_state_write_fn write,
                                                 void *user);

/* Replaces the session's cache with a stream's; afterwards n_past is the
 * stream's and no logits are held (evaluate the next token).  The session
 * must have the saved one's cache type and, where a model has sliding-window
 * layers, its n_ctx and n_batch; its context must hold the positions.
 * HYDRA_ERR_FORMAT for a damaged or short stream, HYDRA_ERR_UNSUPPORTED
 * for a newer version, HYDRA_ERR_INVALID_ARG / HYDRA_ERR_RANGE (naming
 * what) for another geometry; on any failure the session is cleared. */
HYDRA_API hydra_status hydra_session_state_read(hydra_session *session, hydra_state_read_fn read, void *user);

/* Engagement of the hybrid split, summed over the MoE layers.  Lookups
 * are routes (k per token); the decode counters cover only decode steps
 * (every sequence of the step one token), prefill has its own. */
typedef struct hydra_hybrid_stats {
    hydra_hybrid_mode mode;
    uint32_t n_moe_layers;
    uint64_t n_experts, n_slots, n_resident; /* routed experts, slab slots, slots holding one */
    uint64_t slab_bytes;                     /* the slab's size */
    uint64_t lookups, hits;                  /* decode only */
    uint64_t prefill_lookups, prefill_hits;
    uint64_t decode_tokens;
    uint64_t h2d_bytes;                      /* host-to-device bytes of decode steps (CUDA) */
    double h2d_bytes_per_token;              /* h2d_bytes / decode_tokens; 0 when none */
    uint64_t hit_ns, miss_ns, overlap_ns;    /* computing hits (slab side) and misses (CPU), both at once */
    uint64_t repins;                         /* slot table changes after init */
    uint64_t version;                        /* of the split state: bumped by every table change */
    uint64_t miss_routes, miss_experts;      /* routes computed on the CPU (each token's misses summed) and
                                                the distinct experts per step that computed them: a step of
                                                several rows (a verify pass) runs each missed expert once */
} hydra_hybrid_stats;

/* One MoE layer's share; hand-off round trips (CUDA) as p50/p99 of the
 * latest samples. */
typedef struct hydra_hybrid_layer_stats {
    bool moe;                                /* false: a dense layer, everything else 0 */
    int32_t n_expert, n_slots, n_resident;
    uint64_t lookups, hits, prefill_lookups, prefill_hits;
    uint64_t hit_ns, miss_ns, overlap_ns;
    uint64_t n_handoff, handoff_p50_ns, handoff_p99_ns;
    uint64_t miss_routes, miss_experts;
    uint64_t version;
} hydra_hybrid_layer_stats;

/* The split's counters.  HYDRA_ERR_INVALID_ARG without a session or an
 * out; a session without the split reports mode HYDRA_HYBRID_OFF and
 * zeros. */
HYDRA_API hydra_status hydra_session_hybrid_stats(const hydra_session *session, hydra_hybrid_stats *out);
/* HYDRA_ERR_RANGE for a layer >= the model's. */
HYDRA_API hydra_status hydra_session_hybrid_layer_stats(const hydra_session *session, uint32_t layer,
                                                        hydra_hybrid_layer_stats *out);
/* Zeroes the counters (not the slot tables). */
HYDRA_API void hydra_session_hybrid_reset_stats(hydra_session *session);

/* Expert profiling (hydra-run --profile-experts, docs/HYBRID.md): from
 * now on every step counts each MoE layer's expert lookups (k per token),
 * and with trace_tokens > 0 also keeps the experts of the first
 * trace_tokens tokens of every layer, in order (the slab policy
 * simulator's input).  Turning it on again restarts it; off drops it.
 * HYDRA_ERR_UNSUPPORTED on the CUDA backend. */
HYDRA_API hydra_status hydra_session_set_expert_profile(hydra_session *session, bool on, uint32_t trace_tokens);
/* Writes the counts as a pin file (trace false: "layer expert count", most
 * used first) or the trace (true).  HYDRA_ERR_INVALID_ARG when profiling
 * is off (or, for a trace, was started without one). */
HYDRA_API hydra_status hydra_session_save_expert_profile(const hydra_session *session, const char *path, bool trace);

/* Bytes of the session's KV cache, every layer: n_ctx rows per layer of
 * the K and V rows the architecture caches (MLA: the compressed latent and
 * the RoPE key, kv_lora_rank + rope dims per position), fewer for
 * sliding-window layers. */
HYDRA_API uint64_t hydra_session_kv_bytes(const hydra_session *session);

/* -------------------------------------------------------------- tokenizer */

/* A token id: an index into the model's tokenizer.ggml.tokens. */
typedef int32_t hydra_token;

/* The tokenizer is built from the model's tokenizer.ggml.* metadata the
 * first time a function below needs it (safe from several threads) and is
 * freed by hydra_model_close; it works on vocab-only GGUFs.  Supported:
 *   tokenizer.ggml.model "gpt2"  byte-level BPE; tokenizer.ggml.pre picks the
 *                                pre-tokenizer: default, gpt-2, mpt, gpt-neox,
 *                                llama-bpe (llama3), qwen2, deepseek-llm,
 *                                deepseek-coder, deepseek-v3, gpt-4o, tekken,
 *                                falcon, starcoder, refact and aliases
 *   tokenizer.ggml.model "llama" SentencePiece BPE: merges by score, byte
 *                                fallback <0xNN>, a leading "▁" before the
 *                                text (tokenizer.ggml.add_space_prefix,
 *                                default true) and after each special token
 * Builds the tokenizer now; fails, naming the cause (no vocabulary, an
 * unknown tokenizer.ggml.pre or .model named in the message, a bad id), when
 * it cannot be built.  Every function below fails the same way. */
HYDRA_API hydra_status hydra_tokenizer_load(const hydra_model *model);

/* Tokenizes text[0, len) into out[0, capacity); *n_tokens is the number of
 * tokens of the text.  When they do not fit, returns HYDRA_ERR_RANGE with
 * *n_tokens still the number needed (out may be NULL with capacity 0 to
 * ask for it).
 *   add_special    BOS first when tokenizer.ggml.add_bos_token says so
 *                  (absent: true for SentencePiece, false for BPE) and EOS
 *                  last when tokenizer.ggml.add_eos_token does (absent: false)
 *   parse_special  control and unknown tokens written in the text (e.g.
 *                  "<|im_start|>") become their ids, the longest at the
 *                  leftmost place; when false, their text is plain text and
 *                  is tokenized like any other, so user input can never
 *                  forge one.  User-defined tokens (added tokens that are not
 *                  special: Qwen3's <think>, GPT-NeoX's runs of spaces) are
 *                  recognised either way, as Hugging Face tokenizers and
 *                  llama.cpp do and the reference vectors require
 * Any bytes are accepted.  Bytes that are not well-formed UTF-8 count as
 * U+FFFD for pre-tokenization and are encoded as their own byte tokens (BPE)
 * or byte-fallback tokens <0xNN> (SentencePiece), so decoding gives them
 * back unchanged, except where a BPE vocabulary has no token for the byte
 * (many lack C0, C1 and F5..FF, which UTF-8 never uses): U+FFFD's tokens
 * stand in for it then. */
HYDRA_API hydra_status hydra_tokenize(const hydra_model *model, const char *text, size_t len, bool add_special,
                                      bool parse_special, hydra_token *out, size_t capacity, size_t *n_tokens);

/* The number of tokens, 0 when the model has no usable tokenizer. */
HYDRA_API int32_t hydra_vocab_size(const hydra_model *model);

/* tokenizer.ggml.bos_token_id / eos_token_id; -1 when absent or unusable. */
HYDRA_API hydra_token hydra_token_bos(const hydra_model *model);
HYDRA_API hydra_token hydra_token_eos(const hydra_model *model);

/* Whether a token is of type control ("<|im_end|>", "<s>"); false for ids
 * outside the vocabulary. */
HYDRA_API bool hydra_token_is_control(const hydra_model *model, hydra_token token);

/* Whether a token ends generation: EOS, tokenizer.ggml.eot_token_id and
 * eom_token_id, and the control tokens the families use to end a turn
 * (<|im_end|>, <|eot_id|>, <|eom_id|>, <|end|>, <|return|>, <|call|>,
 * <|endoftext|>, <end_of_turn>, <｜end▁of▁sentence｜>, ...).  For harmony
 * vocabularies (those with <|return|>) <|end|> only closes a message and
 * does not end generation. */
HYDRA_API bool hydra_token_is_eog(const hydra_model *model, hydra_token token);

/* The bytes of one token into buf[0, capacity), *len of them; no NUL is
 * added.  The bytes may be part of a UTF-8 sequence that the next tokens
 * complete.  Control, unknown and unused tokens give their text only when
 * special is true and nothing otherwise.  HYDRA_ERR_RANGE when buf is too
 * small (*len is the size needed); HYDRA_ERR_INVALID_ARG for an id outside
 * the vocabulary. */
HYDRA_API hydra_status hydra_token_to_piece(const hydra_model *model, hydra_token token, bool special, char *buf,
                                            size_t capacity, size_t *len);

/* The text of tokens[0, n) into buf[0, capacity), *len bytes, no NUL; the
 * inverse of hydra_tokenize for text without special tokens: the leading
 * space a SentencePiece tokenizer adds is removed from the first text token.
 * Buffer and special rules as hydra_token_to_piece. */
HYDRA_API hydra_status hydra_detokenize(const hydra_model *model, const hydra_token *tokens, size_t n, bool special,
                                        char *buf, size_t capacity, size_t *len);

/* Streaming detokenizer, for printing tokens as they are generated: each
 * push gives back the text that is ready.  A token that ends inside a UTF-8
 * sequence is held back until the tokens after it complete the sequence, so
 * what comes out is always whole characters (bytes that can never complete
 * a character are let through as they are).  Control tokens print nothing
 * unless special is true.  text_start: the first token pushed begins the
 * text (so the SentencePiece leading space is removed, as hydra_detokenize
 * does); false when continuing after a prompt. */
typedef struct hydra_detokenizer hydra_detokenizer;

HYDRA_API hydra_status hydra_detokenizer_new(const hydra_model *model, bool special, bool text_start,
                                             hydra_detokenizer **out);

/* Adds a token; *text / *len receive the bytes ready now (possibly none),
 * valid until the next call on d. */
HYDRA_API hydra_status hydra_detokenizer_push(hydra_detokenizer *d, hydra_token token, const char **text,
                                              size_t *len);

/* Gives back whatever is held (an unfinished sequence at the end of the
 * stream), as it is. */
HYDRA_API void hydra_detokenizer_flush(hydra_detokenizer *d, const char **text, size_t *len);

/* NULL is allowed.  The model must outlive the detokenizer. */
HYDRA_API void hydra_detokenizer_free(hydra_detokenizer *d);

/* --------------------------------------------------------- chat templates */

/* A model's chat template (tokenizer.chat_template, a Jinja template) turns
 * a conversation into the prompt text the model was trained on.  hydra runs
 * the template itself, with a Jinja interpreter that renders like Hugging
 * Face transformers' apply_chat_template (jinja2 with trim_blocks and
 * lstrip_blocks, raise_exception, strftime_now, transformers' tojson).
 * docs/CHAT_TEMPLATES.md lists what it supports. */

typedef struct hydra_chat_template hydra_chat_template;

/* One message.  role and content are what every template reads; the other
 * fields are passed to the template only when not NULL. */
typedef struct hydra_chat_message {
    const char *role;              /* "system", "user", "assistant", "tool", ... */
    const char *content;           /* NULL: content is null (None) */
    const char *reasoning_content; /* an assistant's reasoning; given to the template as both
                                      `reasoning_content` (Qwen, GLM, DeepSeek) and `thinking`
                                      (gpt-oss), the two names templates use */
    const char *tool_calls_json;   /* the OpenAI `tool_calls` array, as JSON */
    const char *tool_call_id;      /* a tool result: the call it answers */
    const char *name;              /* a tool result: the tool's name */
} hydra_chat_message;

typedef struct hydra_chat_params {
    bool add_generation_prompt; /* end with the header of an assistant turn */
    const char *bos_token;      /* NULL: the variable is undefined */
    const char *eos_token;      /* NULL: the variable is undefined */
    const char *tools_json;     /* the OpenAI `tools` array as JSON; NULL: tools is None */
    const char *extra_json;     /* a JSON object of more variables, e.g.
                                   {"enable_thinking": false}; set last, so they win */
    bool fixed_time;            /* strftime_now() shows fixed_now (unix seconds, UTC) ... */
    int64_t fixed_now;          /* ... instead of the current local time */
    /* Limits for hostile templates; 0 = the default. */
    size_t max_output;          /* bytes of rendered text (16 MiB) */
    size_t max_memory;          /* bytes of values alive during a render (256 MiB) */
    uint64_t max_steps;         /* loop iterations + macro calls + filtered items (10 million) */
    unsigned max_depth;         /* nesting of evaluation: blocks, expressions, macro
                                   calls (200; loading a template always allows 200) */
} hydra_chat_params;

/* No generation prompt, no tokens, no tools, current time, default limits. */
HYDRA_API hydra_chat_params hydra_chat_default_params(void);

/* Parses a template (NUL-terminated).  A syntax error, or a filter or test
 * hydra does not have, fails here with the line and column in
 * hydra_last_error().  A parsed template is read-only: several threads may
 * apply it at once. */
HYDRA_API hydra_status hydra_chat_template_new(const char *text, hydra_chat_template **out);

/* NULL is allowed. */
HYDRA_API void hydra_chat_template_free(hydra_chat_template *tmpl);

/* Renders messages[0..n).  On success *out is the text, NUL-terminated and
 * malloc'd (release it with free()), *len its length (optional).  Runtime
 * errors, including the template's own raise_exception("..."), fail with
 * the line and column and leave *out NULL. */
HYDRA_API hydra_status hydra_chat_apply(const hydra_chat_template *tmpl, const hydra_chat_message *messages,
                                        size_t n, const hydra_chat_params *params, char **out, size_t *len);

/* The same with the messages as a JSON array of objects, passed to the
 * template as they are (any fields: OpenAI chat-completions messages with
 * tool_calls, content parts, reasoning_content...). */
HYDRA_API hydra_status hydra_chat_apply_json(const hydra_chat_template *tmpl, const char *messages_json,
                                             const hydra_chat_params *params, char **out, size_t *len);

/* A built-in template by name (chatml, qwen3, llama3, mistral-nemo,
 * deepseek-v3.1, gpt-oss, glm-4.6, kimi-k2).  An unknown name fails with
 * HYDRA_ERR_NOT_FOUND and a message naming --chat-template and the names. */
HYDRA_API hydra_status hydra_chat_builtin(const char *name, const char **text);

/* The names of the built-in templates, ", "-separated. */
HYDRA_API const char *hydra_chat_builtin_names(void);

/* The template text for a model: `override` when given (a built-in name, or
 * a template text itself when it contains "{{" or "{%"), else the model's
 * tokenizer.chat_template.  HYDRA_ERR_NOT_FOUND when there is neither, or
 * for an unknown override name. */
HYDRA_API hydra_status hydra_chat_model_template(const hydra_model *model, const char *override,
                                                 const char **text);

/* Fills params->bos_token and eos_token with the text of the model's
 * tokenizer.ggml.bos_token_id / eos_token_id tokens (left NULL when the
 * model has none).  The strings belong to the model. */
HYDRA_API void hydra_chat_model_tokens(const hydra_model *model, hydra_chat_params *params);

/* ---------------------------------------------------------------- sampler */

/* Chooses the next token from a position's logits, in llama.cpp's order:
 *   1. penalties    over the last penalty_last_n accepted tokens: a token
 *                   seen c > 0 times has its logit divided by
 *                   repeat_penalty when positive, multiplied when not, then
 *                   lowered by c x frequency_penalty + presence_penalty
 *   2. top-k        keep the top_k largest logits
 *   3. top-p        keep the shortest most-probable-first run whose
 *                   probabilities (softmax over what step 2 kept) sum to at
 *                   least top_p
 *   4. min-p        keep tokens whose probability is at least min_p times
 *                   the largest
 *   5. temperature  divide the kept logits by temperature
 *   6. draw         one token from their softmax, with the sampler's own
 *                   random stream (xoshiro256** seeded from seed)
 * temperature <= 0 is greedy: after step 1, the largest logit.  Wherever
 * logits are equal the lower id ranks first, so greedy and top-k 1 give the
 * first maximum.  Every step keeps at least one token; NaN logits count as
 * -infinity.  Same params, same seed, same logits: same tokens.  The
 * buffers are sized at creation from n_vocab; sampling allocates nothing. */
typedef struct hydra_sampler hydra_sampler;

typedef struct hydra_sampler_params {
    float temperature;       /* 0.8; <= 0: greedy */
    int32_t top_k;           /* 40; <= 0: off */
    float top_p;             /* 0.95, in [0, 1]; 1: off */
    float min_p;             /* 0.05, in [0, 1]; 0: off */
    float repeat_penalty;    /* 1 (off); > 0 */
    float presence_penalty;  /* 0 (off) */
    float frequency_penalty; /* 0 (off) */
    int32_t penalty_last_n;  /* 64: the window of the penalties; 0: no penalties */
    uint64_t seed;           /* 0 */
} hydra_sampler_params;

/* The defaults above (llama.cpp's). */
HYDRA_API hydra_sampler_params hydra_sampler_default_params(void);

/* A sampler for logits of n_vocab entries; HYDRA_ERR_INVALID_ARG, naming
 * the field, for a parameter outside its range. */
HYDRA_API hydra_status hydra_sampler_new(const hydra_sampler_params *params, int32_t n_vocab, hydra_sampler **out);

/* NULL is allowed. */
HYDRA_API void hydra_sampler_free(hydra_sampler *sampler);

/* Chooses a token from logits[0, n_vocab) and accepts it (adds it to the
 * penalty window).  HYDRA_ERR_RANGE when no logit is finite. */
HYDRA_API hydra_status hydra_sampler_sample(hydra_sampler *sampler, const float *logits, hydra_token *out);

/* Adds a token the sampler did not choose (the prompt's, the user's) to the
 * penalty window.  HYDRA_ERR_INVALID_ARG for an id outside [0, n_vocab). */
HYDRA_API hydra_status hydra_sampler_accept(hydra_sampler *sampler, hydra_token token);

/* Empties the penalty window and restarts the random stream from the seed. */
HYDRA_API void hydra_sampler_reset(hydra_sampler *sampler);

/* The distribution the draw would use for these logits: the tokens steps
 * 1-5 keep, most probable first, and their probabilities (greedy: the one
 * token, probability 1).  Neither accepts a token nor advances the random
 * stream.  ids and probs have room for capacity entries; when the tokens
 * do not fit, HYDRA_ERR_RANGE with *n the number needed. */
HYDRA_API hydra_status hydra_sampler_candidates(hydra_sampler *sampler, const float *logits, hydra_token *ids,
                                                float *probs, size_t capacity, size_t *n);

/* --------------------------------------------------- speculative decoding */

/* Speculative decoding (docs/SPECULATIVE.md): a cheap drafter proposes up
 * to n_draft_max tokens, the target session checks them all in one
 * batched forward pass (every row's logits), the longest agreeing prefix
 * is kept plus one token of the target's own, and the rejected tail is
 * rolled back from both caches (hydra_session_truncate).  The output
 * follows the target's distribution exactly:
 *   greedy (temperature <= 0)  a draft is kept when it is the target's
 *                              choice, so the tokens equal plain decoding's
 *   sampling                   draft x drawn from the draft's distribution q
 *                              is kept with probability min(1, p(x)/q(x));
 *                              at the first rejection the token is drawn
 *                              from norm(max(0, p - q)); when every draft
 *                              is kept, a bonus token is drawn from p
 * p and q are the sampler's distributions (hydra_sampler_candidates): the
 * target's with the caller's parameters and penalty window, the draft's
 * with the same parameters but no penalties.  The draws use the spec's own
 * random stream, seeded from the sampler seed: the tokens follow the same
 * distribution as hydra_sampler_sample's, not the same sequence.
 *
 * The target holds every accepted token but the last ("pending"), which the
 * next verify pass evaluates as its row 0.  The verify pass always has
 * n_draft_max + 1 rows when fixed_width is set (fewer drafts are padded),
 * so that one captured graph per width serves every step; the stats count
 * the distinct widths used.  The target session's n_batch must be at least
 * n_draft_max + 1 (a sliding-window ring keeps one step of n_batch
 * positions for the rollback). */
typedef struct hydra_spec hydra_spec;

typedef struct hydra_spec_params {
    int32_t n_draft_max; /* 16 (llama.cpp's --spec-draft-n-max): most drafts per step, 1..256 */
    float p_min;         /* 0.75 (--spec-draft-p-min): drafting stops when the draft's most
                            probable token (softmax of its logits) has less; 0: never */
    bool fixed_width;    /* true: every verify pass has n_draft_max + 1 rows (padded) */
} hydra_spec_params;

/* The defaults above. */
HYDRA_API hydra_spec_params hydra_spec_default_params(void);

/* Whether draft can draft for target: the same number of tokens and the
 * same token texts (tokenizer.ggml.tokens).  HYDRA_ERR_INVALID_ARG naming
 * the difference (the two sizes, or the first differing id and both
 * texts). */
HYDRA_API hydra_status hydra_spec_check_vocab(const hydra_model *target, const hydra_model *draft);

/* A speculative decoder over two sessions the caller owns (they must
 * outlive it and are not to be evaluated by anyone else while it runs).
 * draft NULL asks for the target's own MTP/NextN block (HYDRA_ERR_UNSUPPORTED
 * for a model without one; on the target's GPU when it runs on CUDA).  HYDRA_ERR_INVALID_ARG for sessions of different
 * vocabulary sizes or a parameter out of range (named). */
HYDRA_API hydra_status hydra_spec_new(hydra_session *target, hydra_session *draft,
                                      const hydra_sampler_params *sampling, const hydra_spec_params *params,
                                      hydra_spec **out);

/* NULL is allowed; the sessions are not freed. */
HYDRA_API void hydra_spec_free(hydra_spec *spec);

/* Makes both sessions hold prompt[0, n - 1) (keeping what they already
 * hold of it; prompt[n - 1] is the pending token) and resets the target's
 * penalty window to the prompt.  HYDRA_ERR_RANGE when n is 0 or more than
 * the target's context. */
HYDRA_API hydra_status hydra_spec_start(hydra_spec *spec, const hydra_token *prompt, size_t n);

/* hydra_spec_start for a caller that evaluated the prompt on the target
 * itself (a server's batched prefill): the target must hold exactly
 * tokens[0, n - 1) (HYDRA_ERR_INVALID_ARG otherwise); tokens[n - 1] is
 * pending.  Nothing is evaluated: the draft session keeps the prefix it
 * holds of tokens and catches up at the next draft.  sampling: new
 * parameters (a new request's), or NULL to keep the decoder's; the
 * acceptance stream restarts from its seed and the penalty window is
 * tokens. */
HYDRA_API hydra_status hydra_spec_restart(hydra_spec *spec, const hydra_sampler_params *sampling,
                                          const hydra_token *tokens, size_t n);

/* For that caller when the decoder drafts with the target's MTP block
 * (which reads the target's hidden states, kept for one step only):
 * hydra_spec_follow after each step the caller evaluates on the target
 * (tokens[0, n): the sequence as far as it is known, n >= the target's
 * positions) computes the block's rows of that step's positions whose
 * next token is known; hydra_spec_reusable says how many of the first
 * positions of a new sequence tokens[0, n) the caller may keep in the
 * target's cache so that its first step covers every row the block still
 * needs (n for a draft model, which catches up by itself). */
HYDRA_API hydra_status hydra_spec_follow(hydra_spec *spec, const hydra_token *tokens, size_t n);
HYDRA_API size_t hydra_spec_reusable(const hydra_spec *spec, const hydra_token *tokens, size_t n);

/* One draft + verify step: writes 1 .. min(max_tokens, n_draft_max + 1)
 * generated tokens to out[] (*n_out of them).  HYDRA_ERR_RANGE when the
 * target's context is full; HYDRA_ERR_INVALID_ARG before hydra_spec_start. */
HYDRA_API hydra_status hydra_spec_step(hydra_spec *spec, size_t max_tokens, hydra_token *out, size_t *n_out);

/* hydra_spec_step in two phases, for a caller that evaluates the verify
 * pass itself (a server stepping several slots in one batch):
 * hydra_spec_draft drafts and hands out the verify batch tokens[0, *width)
 * (valid until the next call on spec); the caller evaluates it on the
 * target session at its next positions, keeping every row's logits;
 * hydra_spec_accept takes those *width x n_vocab logits and does the rest
 * of the step.  HYDRA_ERR_INVALID_ARG when the target does not hold the
 * positions the phase expects (the step is then undone). */
HYDRA_API hydra_status hydra_spec_draft(hydra_spec *spec, size_t max_tokens, const hydra_token **tokens,
                                        size_t *width);
HYDRA_API hydra_status hydra_spec_accept(hydra_spec *spec, const float *rows, hydra_token *out, size_t *n_out);

typedef struct hydra_spec_stats {
    uint64_t n_steps;       /* verify passes */
    uint64_t n_drafted;     /* draft tokens proposed */
    uint64_t n_accepted;    /* of them kept */
    uint64_t n_generated;   /* tokens handed out (accepted + one per step) */
    uint64_t n_verify_rows; /* rows of the verify passes, padding included */
    uint32_t n_widths;      /* distinct verify widths used (one CUDA graph each) */
    uint64_t n_captures;    /* CUDA graphs captured since hydra_spec_new by the target, the draft
                               session and the MTP block (0 on the CPU); flat in a steady state */
    double draft_ms, verify_ms;
} hydra_spec_stats;

/* The counters since hydra_spec_new. */
HYDRA_API void hydra_spec_get_stats(const hydra_spec *spec, hydra_spec_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* HYDRA_H */
