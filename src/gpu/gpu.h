/*
 * gpu.h — the CUDA backend as the rest of hydra sees it.  A gpu_session
 * holds a model's weights in device memory (one allocation), the KV cache
 * and the scratch of one session (one allocation each), a stream, and the
 * cache of captured decode graphs.  gpu_forward is the CUDA twin of
 * forward() (src/forward.h): same inputs, same outputs.
 *
 * Built with CUDA=1 these are src/gpu/gpu_*.c over kernels/cuda; otherwise
 * src/gpu/gpu_off.c answers that no device is available.
 */
#ifndef HYDRA_GPU_H
#define HYDRA_GPU_H

#include "hydra.h"

#include "../weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether this build has the CUDA backend and a device is present.  When
 * not, *why (optional) says which. */
bool gpu_available(const char **why);

/* --- device memory, accounted per purpose */
typedef enum gpu_purpose {
    GPU_MEM_WEIGHTS, /* one allocation per model upload */
    GPU_MEM_KV,      /* one per session */
    GPU_MEM_SCRATCH, /* one per session */
    GPU_MEM_PINNED,  /* page-locked host staging, per session */
    GPU_MEM_COUNT
} gpu_purpose;

const char *gpu_purpose_name(gpu_purpose p);
/* Bytes hydra holds now, per purpose (all sessions of the process). */
void gpu_mem_usage(uint64_t bytes[GPU_MEM_COUNT]);
/* The device's free and total memory. */
hydra_status gpu_mem_device(uint64_t *free_bytes, uint64_t *total_bytes);
/* One line per purpose plus the device's free memory, into buf. */
void gpu_mem_describe(char *buf, size_t cap);

/* --- sessions */
typedef struct gpu_session gpu_session;

struct hybrid_state;

/* A split over several devices (src/split.h): mode SPLIT_NONE, SPLIT_LAYER
 * or SPLIT_TENSOR; -ts ratios (n_ratio 0: by free memory); the main GPU;
 * bytes per device to plan in (0: its free memory less a margin). */
typedef struct gpu_split {
    int mode;
    int n_ratio;
    float ratio[16];
    int main_gpu;
    uint64_t budget;
} gpu_split;

/* CUDA devices present (0 without a device or a CUDA build); a device's
 * free and total memory (gpu_multi.c). */
int gpu_device_count(void);
hydra_status gpu_mem_device_of(int device, uint64_t *free_bytes, uint64_t *total_bytes);
/* The all-reduce of -sm tensor over devices 0..n_dev-1, eager and
 * replayed from captured graphs: NCCL's (loaded at run time), or with peer
 * the peer-access sum of decode-sized rows (gpu_tensor_p2p.c); the
 * largest error of count sums. */
hydra_status gpu_multi_allreduce_check(int n_dev, size_t count, bool peer, double *max_err);

typedef struct gpu_options {
    int64_t n_ctx, n_batch;
    uint32_t kv_type; /* QT_F16 or QT_F32 */
    bool graphs;      /* capture steps as CUDA graphs and replay them */
    /* The experts' launch waits for the router launch's completion instead
     * of taking the routes by their word (kernels.h's gk_route_word): only
     * to compare the two (tests). */
    bool no_route_words;
    bool profile;     /* time every op with events (graphs off) */
    /* Hybrid decode (issue 10, docs/HYBRID.md): the routed experts live in
     * a VRAM slab of whole experts, the CPU computes the others. */
    bool hybrid;
    double slab_fraction;            /* share of each MoE layer's experts resident, 0..1 */
    int cpu_threads;                 /* threads of the CPU pass (>= 1) */
    bool cpu_pin;                    /* pin the CPU pass's workers (and the flag thread) to CPUs, one per core first */
    uint64_t admit_bytes_per_token;  /* bus budget of admissions per token of a step; 0: static slab */
    bool stream_prefill;             /* prefill streams missed experts from a pinned host copy of the stacks */
    /* Prefill steps of at least this many tokens stream (the stacks of each
     * MoE layer copied into a double-buffered device staging area a layer
     * ahead); shorter ones split like decode.  0: the crossover measured at
     * creation (docs/HYBRID.md "Prefill"). */
    int stream_min_tokens;
    bool handoff_flags;              /* CPU side: a spinning thread on mapped flags, not graph host nodes */
    /* With handoff_flags: how long the GPU waits for the CPU side's reply
     * to a layer before the step fails (ns).  0: hy_handoff_bound_ns's
     * bound (2 s on a device with a kernel watchdog, else 30 s). */
    uint64_t handoff_bound_ns;
    /* The initial slab, when not NULL: each MoE layer's slot count and the
     * experts in its slots, from a split state built by hybrid_setup (the
     * session's pin file ranking, vram_budget placement or fraction);
     * slab_fraction is then unused.  Read by gpu_session_create only (the
     * session keeps its own copy of the tables). */
    const struct hybrid_state *slab_init;
    bool verbose;
    /* Multi-GPU (docs/MULTIGPU.md, gpu_multi.c).  device: the CUDA device
     * of this session; [layer0, layer1): the layers it runs (layer1 0: to
     * the last); the embedding runs when layer0 is 0, the output head when
     * the range ends at the last layer.  split: with a mode other than
     * SPLIT_NONE, gpu_session_create plans the devices (src/split.h) and
     * makes one session per part, which gpu_forward drives in turn. */
    int device, layer0, layer1;
    gpu_split split;
    /* A tensor split's part (gpu_tensor.c): its sublayers end in partial
     * sums, so the MoE combine does not norm the next layer's input. */
    bool tensor_part;
    /* Hybrid: [pin_exp0, pin_exp1) the experts whose bytes the pinned copy
     * of the stacks covers (a tensor part other than the main one admits
     * only its own and has no misses); both 0: every expert. */
    int pin_exp0, pin_exp1;
} gpu_options;

hydra_status gpu_session_create(gpu_session **out, const model_weights *w, const gpu_options *o);
void gpu_session_free(gpu_session *g); /* NULL is allowed */

/* As forward(): n (1..n_batch) tokens at positions pos0 .., logits of every
 * row (all_rows) or of the last. */
hydra_status gpu_forward(gpu_session *g, int64_t pos0, const int32_t *tokens, int64_t n, bool all_rows,
                         float *logits);

/* The session's row of n_vocab logits in page-locked host memory, owned by
 * the session (GPU_MEM_PINNED, freed by gpu_session_free): gpu_forward of
 * one row (all_rows false) into this row copies device -> row directly,
 * into any other buffer through a staging row and a memcpy (~42 us more a
 * token for 151936 logits on the H200 host, docs/PERFORMANCE.md "the
 * logits' return").  hydra_session keeps its last logits here.  NULL when
 * no part of the session runs the output head. */
float *gpu_session_logits_row(gpu_session *g);

typedef struct gpu_stats {
    uint64_t steps, captures, replays;
    int graphs_cached;
    uint64_t route_words; /* layers enqueued whose routes went by their word (gk_route_word) */
} gpu_stats;
void gpu_session_stats(const gpu_session *g, gpu_stats *out);

/* Hybrid decode's counters (all zero, engaged false, for a session that is
 * not hybrid).  lookups/hits: routes of decode steps (one token), k per
 * token; h2d_bytes: weights and tables copied host->device during decode
 * steps (0 with a static slab); times in ns summed over MoE layers and
 * decode steps (layer_steps of them); hand-off: per MoE layer, the
 * combine's start minus the split's end less the CPU pass, over the
 * recorded samples. */
typedef struct gpu_hybrid_counters {
    bool engaged, registered;
    uint64_t decode_tokens, lookups, hits, resident, slab_bytes;
    uint64_t h2d_bytes, admit_bytes, table_bytes, admissions, table_version, unsafe_replays;
    uint64_t handoff_p50_ns, handoff_p99_ns;
    uint64_t cpu_ns, hit_ns, exposed_ns, layer_steps;
    double register_ms;
    /* Staged prefill: steps that streamed through the staging area, the
     * bytes they copied host->device, stale references to a staging
     * generation (expected 0); the crossover and what it was measured from
     * (DMA rate of one layer's stacks, the CPU pass per expert and per
     * route). */
    uint64_t staged_steps, stage_bytes, stale_stage_refs;
    int stream_min_tokens;
    double stage_gbps, cpu_expert_us, cpu_route_us;
} gpu_hybrid_counters;
void gpu_hybrid_counters_get(const gpu_session *g, gpu_hybrid_counters *out);
void gpu_hybrid_counters_reset(gpu_session *g);
/* The split state (src/hybrid.h) the CUDA side keeps: slot tables and the
 * per-layer counters (lookups, hits, hit/miss/overlap time, hand-off
 * rings), for hydra_session_hybrid_stats and --stats; NULL when the
 * session is not hybrid. */
const struct hybrid_state *gpu_hybrid_split_state(const gpu_session *g);
/* Fault injection, for tests: while stalled, the flag hand-off's CPU side
 * answers no request, as a starved or stuck one would, so a step fails at
 * handoff_bound_ns; unstalled, it answers the last request and the next
 * step runs.  No effect on a session without the flag hand-off. */
void gpu_hybrid_stall_cpu_side(gpu_session *g, bool stall);

/* Profile (o->profile): milliseconds per op class summed over the steps
 * since the last reset, as "name ms" lines into buf. */
void gpu_profile_describe(const gpu_session *g, char *buf, size_t cap);
void gpu_profile_reset(gpu_session *g);

/* Device-to-device copy bandwidth over a buffer of mib MiB (bytes read plus
 * bytes written per second), best of reps. */
hydra_status gpu_copy_probe(int mib, int reps, double *gb_per_s);

/* --- op-level checks (tests/test_cuda_ops.c): each copies its inputs to
 * the device, runs one launcher, and copies the result back. */

/* y[t][r] = W[r] . x[t] for n_tok rows of x (n_cols floats each); the
 * 8-bit activations the kernels read go to xq/xd (n_tok * n_cols bytes,
 * n_tok * n_cols / 32 scales) when not NULL.  matmul: the prefill kernel,
 * else matvec (n_tok <= 8). */
hydra_status gpu_check_linear(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                              int n_tok, bool matmul, float *y, int8_t *xq, float *xd);

/* out = the n_rows rows of n_cols values as the device decodes them
 * (through the embedding kernel, which reads every type the kernels do). */
hydra_status gpu_check_dequant(uint32_t type, const void *rows, int64_t n_rows, int64_t n_cols, float *out);

/* The kernels' block decoders run on the host (no device needed): the 32
 * values of chunk c of a row, and the integer dot of that chunk with 32
 * activation bytes before the activation scale.  false when this build has
 * no CUDA kernels or the type has no GPU decoder. */
bool gpu_host_decode_chunk(uint32_t type, const void *row, int c, float out[32]);
bool gpu_host_chunk_dot(uint32_t type, const void *row, int c, const int8_t a[32], float *out);

#endif
