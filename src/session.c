/*
 * session.c — hydra_session: the KV cache, the positions evaluated so far,
 * the last logits, and the forward pass's buffers, all allocated at
 * creation.  Evaluation splits its input into steps of at most n_batch
 * tokens and hands each to forward().
 */
#include "hydra.h"

#include "error.h"
#include "forward.h"
#include "kv_state.h"
#include "gpu/gpu.h"
#include "expert_rank.h"
#include "hybrid.h"
#include "quant.h"
#include "session_hidden.h"
#include "threads.h"
#include "weights.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { DEFAULT_N_BATCH = 512, MAX_N_BATCH = 1 << 16, MAX_THREADS = 1024 };

struct hydra_session {
    const hydra_model *model;
    model_weights w;
    thread_pool *pool;
    int n_threads;
    int64_t n_batch;
    kv_cache kv;
    fwd_scratch f;
    gpu_session *gpu; /* the CUDA backend's state; NULL on the CPU */
    hybrid_state hybrid; /* the expert split (mode HYBRID_OFF: none) */
    expert_rank profile; /* expert lookups while profiling (f.profile points here); zeroed: none */
    int64_t n_ctx;
    int64_t n_past;
    /* n_vocab: the last evaluated position.  On CUDA the device session's
     * page-locked row (gpu_session_logits_row, freed with s->gpu), which a
     * decode step's logits reach in one copy; else logits_heap. */
    float *logits;
    float *logits_heap; /* malloc'd, owned here: the CPU's logits (NULL when the device session holds them) */
    bool have_logits;
    bool keep_hidden; /* session_keep_hidden was called */
    float *hidden; /* n_batch x n_embd: the last step's final hidden rows on the CPU; NULL: not kept */
    int64_t hidden_pos0, hidden_n; /* their positions (on CUDA: of the device session's rows) */
    /* A batched step's per-sequence descriptors and logits rows when this
     * session leads the batch: grown to the largest batch seen, kept, so a
     * server's steady state allocates nothing per step. */
    fwd_seq *batch_seqs;
    size_t batch_seqs_cap;
    float *batch_logits;
    size_t batch_logits_cap; /* floats */
};

HYDRA_API hydra_session_params hydra_session_default_params(void)
{
    return (hydra_session_params){.n_ctx = 0, .n_batch = DEFAULT_N_BATCH, .n_threads = 0, .kv_type = HYDRA_KV_F16,
                                  .backend = HYDRA_BACKEND_CPU, .cuda_graphs = true, .hybrid = HYDRA_HYBRID_OFF,
                                  .resident_fraction = 0.5};
}

HYDRA_API bool hydra_cuda_available(void)
{
    return gpu_available(NULL);
}

HYDRA_API int hydra_cuda_device_count(void)
{
    return gpu_available(NULL) ? gpu_device_count() : 0;
}

/* Several GPUs (docs/MULTIGPU.md): the split the device side plans, and
 * the devices it will use (the nonzero -ts shares, else all). */
static int cuda_split_options(const hydra_session_params *p, gpu_options *go)
{
    go->device = p->main_gpu;
    if (p->split_mode == HYDRA_SPLIT_NONE)
        return 1;
    go->split = (gpu_split){.mode = (int)p->split_mode, .main_gpu = p->main_gpu, .budget = p->vram_budget};
    int used = 0;
    for (int d = 0; d < HYDRA_MAX_DEVICES; d++)
        if (p->tensor_split[d] > 0) {
            go->split.n_ratio = d + 1;
            used++;
        }
    memcpy(go->split.ratio, p->tensor_split, sizeof go->split.ratio);
    return used > 0 ? used : gpu_device_count();
}

static long read_long(const char *fmt, int cpu)
{
    char path[128];
    snprintf(path, sizeof path, fmt, cpu);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f != NULL) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* Distinct (package, core) pairs among the CPUs this process may run on:
 * SMT siblings share a core's execution units, and a second thread per core
 * slows memory-bound decoding down. */
static int physical_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (int)n : 1;
    }
    uint64_t seen[CPU_SETSIZE];
    int n_seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        long core = read_long("/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        long pkg = read_long("/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        /* without topology, count the CPU itself */
        uint64_t key = core < 0 || pkg < 0 ? (1ull << 63) | (uint64_t)cpu : ((uint64_t)pkg << 32) | (uint64_t)core;
        int i = 0;
        while (i < n_seen && seen[i] != key)
            i++;
        if (i == n_seen)
            seen[n_seen++] = key;
    }
    return n_seen > 0 ? n_seen : 1;
}

HYDRA_API void hydra_session_free(hydra_session *s)
{
    if (s == NULL)
        return;
    gpu_session_free(s->gpu);
    hybrid_free(&s->hybrid);
    expert_rank_free(&s->profile);
    fwd_free(&s->f);
    kv_free(&s->kv);
    pool_destroy(s->pool);
    weights_free(&s->w);
    free(s->logits_heap);
    free(s->hidden);
    free(s->batch_seqs);
    free(s->batch_logits);
    free(s);
}

static hydra_status check_params(const hydra_session_params *p)
{
    if (p->n_threads < 0 || p->n_threads > MAX_THREADS)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "n_threads %d: must be in [0, %d]", p->n_threads, MAX_THREADS);
    if (p->n_batch > MAX_N_BATCH)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "n_batch %u: at most %d", p->n_batch, MAX_N_BATCH);
    if (p->kv_type != HYDRA_KV_F16 && p->kv_type != HYDRA_KV_F32)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "kv_type %d: HYDRA_KV_F16 or HYDRA_KV_F32", (int)p->kv_type);
    if (p->backend != HYDRA_BACKEND_CPU && p->backend != HYDRA_BACKEND_CUDA)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "backend %d: HYDRA_BACKEND_CPU or HYDRA_BACKEND_CUDA", (int)p->backend);
    if (p->hybrid == HYDRA_HYBRID_CPU_SPLIT && p->backend != HYDRA_BACKEND_CPU)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid mode cpu_split runs on the CPU backend");
    const char *why = NULL;
    if (p->hybrid == HYDRA_HYBRID_CUDA && !gpu_available(&why))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "hybrid mode cuda puts the expert slab on a CUDA device: %s", why);
    if (p->hybrid == HYDRA_HYBRID_CUDA && p->backend != HYDRA_BACKEND_CUDA)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid mode cuda runs on the CUDA backend (HYDRA_BACKEND_CUDA)");
    if (p->split_mode < HYDRA_SPLIT_NONE || p->split_mode > HYDRA_SPLIT_TENSOR || p->main_gpu < 0 ||
        p->main_gpu >= HYDRA_MAX_DEVICES)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "split mode %d (none, layer or tensor), main GPU %d (0 to %d)",
                          (int)p->split_mode, p->main_gpu, HYDRA_MAX_DEVICES - 1);
    if ((p->split_mode != HYDRA_SPLIT_NONE || p->main_gpu != 0) && p->backend != HYDRA_BACKEND_CUDA)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "a split over GPUs (split mode, main GPU) needs the CUDA backend");
    if (p->hybrid != HYDRA_HYBRID_OFF && p->hybrid != HYDRA_HYBRID_CPU_SPLIT && p->hybrid != HYDRA_HYBRID_CUDA)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid mode %d: off, cpu_split or cuda", (int)p->hybrid);
    return HYDRA_OK;
}

/* Hybrid decode on CUDA (docs/HYBRID.md "GPU side"): the initial slab is
 * the split of the session's parameters (pin file ranking; slots from the
 * vram_budget placement, the pins or resident_fraction), built here and
 * copied by the device side, which then keeps its own; it is freed once
 * the GPU session exists.  The CPU pass gets the explicit n_threads, else
 * the physical cores less two: one for the thread that waits on the step,
 * one for the driver (measured on the H200 host, hydra-bench: all cores
 * busy oversubscribe it).  Admissions may move 8 MiB per token of a step
 * (a decode step moves at most one expert per layer; a prefill of 512
 * tokens may re-pin the slab from the prompt's counts). */
static hydra_status cuda_hybrid_options(hydra_session *s, const hydra_session_params *p, gpu_options *go,
                                        int n_devices)
{
    hydra_session_params pooled = *p; /* a split's slab plan: the devices' budgets pooled */
    pooled.vram_budget = p->vram_budget * (uint64_t)n_devices;
    hydra_status st = hybrid_setup(&s->hybrid, &s->w, &pooled, go->n_ctx, go->n_batch, go->kv_type);
    if (st != HYDRA_OK)
        return st;
    const int cores_left = physical_cores() - 2;
    go->hybrid = true;
    go->slab_fraction = p->resident_fraction;
    go->slab_init = &s->hybrid;
    go->cpu_threads = p->n_threads ? p->n_threads : cores_left > 1 ? cores_left : 1;
    go->admit_bytes_per_token = 8ull << 20;
    go->stream_prefill = true;
    go->handoff_flags = true;
    s->n_threads = go->cpu_threads;
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_session_create(hydra_session **out, const hydra_model *model,
                                            const hydra_session_params *params)
{
    if (out == NULL || model == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_create: out and model are required");
    *out = NULL;
    const hydra_session_params p = params ? *params : hydra_session_default_params();
    hydra_status st = check_params(&p);
    if (st != HYDRA_OK)
        return st;
    hydra_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "session");
    s->model = model;
    st = weights_bind(&s->w, model);
    const int64_t n_ctx = p.n_ctx ? p.n_ctx : s->w.hp.n_ctx_train;
    const int64_t n_batch = p.n_batch ? p.n_batch : DEFAULT_N_BATCH;
    s->n_batch = n_batch < n_ctx ? n_batch : n_ctx;
    s->n_threads = p.n_threads ? p.n_threads : physical_cores();
    s->n_ctx = n_ctx;
    const uint32_t kv_type = p.kv_type == HYDRA_KV_F32 ? QT_F32 : QT_F16;
    if (st == HYDRA_OK && p.backend == HYDRA_BACKEND_CUDA) {
        gpu_options go = {.n_ctx = n_ctx, .n_batch = s->n_batch, .kv_type = kv_type, .graphs = p.cuda_graphs};
        const int n_devices = cuda_split_options(&p, &go);
        if (p.hybrid == HYDRA_HYBRID_CUDA)
            st = cuda_hybrid_options(s, &p, &go, n_devices);
        if (st == HYDRA_OK)
            st = gpu_session_create(&s->gpu, &s->w, &go);
        hybrid_free(&s->hybrid); /* the device side keeps its own split */
    } else {
        if (st == HYDRA_OK)
            st = pool_create(&s->pool, s->n_threads);
        if (st == HYDRA_OK)
            st = kv_init(&s->kv, &s->w, kv_type, n_ctx, s->n_batch);
        if (st == HYDRA_OK)
            st = fwd_init(&s->f, &s->w, s->n_batch, n_ctx, s->n_threads);
    }
    if (st == HYDRA_OK && p.hybrid == HYDRA_HYBRID_CPU_SPLIT) {
        st = hybrid_setup(&s->hybrid, &s->w, &p, n_ctx, s->n_batch, kv_type);
        s->f.hybrid = st == HYDRA_OK ? &s->hybrid : NULL;
    }
    if (st == HYDRA_OK && s->gpu != NULL)
        s->logits = gpu_session_logits_row(s->gpu);
    if (st == HYDRA_OK && s->logits == NULL)
        s->logits = s->logits_heap = malloc(sizeof(float) * s->w.hp.n_vocab);
    if (st == HYDRA_OK && s->logits == NULL)
        st = hydra_fail(HYDRA_ERR_NOMEM, "logits of %u tokens", s->w.hp.n_vocab);
    if (st != HYDRA_OK) {
        hydra_session_free(s);
        return st;
    }
    *out = s;
    return HYDRA_OK;
}

/* After a CPU step of n rows: forward() leaves their final hidden states
 * in f.x (forward.h). */
static void keep_hidden_rows(hydra_session *s, int64_t n)
{
    if (!s->keep_hidden)
        return;
    if (s->hidden != NULL)
        memcpy(s->hidden, s->f.x, sizeof(float) * (size_t)n * s->w.hp.n_embd);
    s->hidden_pos0 = s->n_past;
    s->hidden_n = n;
}

/* Forgets the kept hidden rows of positions from pos on: a later step that
 * does not keep its rows (a restored cache) may put other tokens there. */
static void drop_hidden_from(hydra_session *s, int64_t pos)
{
    if (s->hidden_pos0 + s->hidden_n > pos)
        s->hidden_n = pos > s->hidden_pos0 ? pos - s->hidden_pos0 : 0;
}

hydra_status session_keep_hidden(hydra_session *s, session_parts *out)
{
    if (s->gpu == NULL && s->hidden == NULL &&
        (s->hidden = malloc(sizeof(float) * (size_t)s->n_batch * s->w.hp.n_embd)) == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hidden states of %lld rows", (long long)s->n_batch);
    s->keep_hidden = true;
    *out = (session_parts){.w = &s->w, .pool = s->pool, .kv_type = s->kv.type, .n_batch = s->n_batch,
                           .n_ctx = s->n_ctx, .n_threads = s->n_threads, .gpu = s->gpu};
    return HYDRA_OK;
}

int64_t session_hidden_index(const hydra_session *s, int64_t pos)
{
    if (!s->keep_hidden || pos < s->hidden_pos0 || pos >= s->hidden_pos0 + s->hidden_n || pos >= s->n_past)
        return -1;
    return pos - s->hidden_pos0;
}

const float *session_hidden_row(const hydra_session *s, int64_t pos)
{
    const int64_t i = session_hidden_index(s, pos);
    if (s->hidden == NULL || i < 0)
        return NULL;
    return s->hidden + (size_t)i * s->w.hp.n_embd;
}

HYDRA_API hydra_status hydra_session_eval(hydra_session *s, const int32_t *tokens, size_t n_tokens, float *logits)
{
    if (s == NULL || tokens == NULL || n_tokens == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_eval: a session and at least one token are required");
    if (n_tokens > (size_t)(s->n_ctx - s->n_past))
        return hydra_fail(HYDRA_ERR_RANGE, "%zu tokens after %lld positions exceed the context of %lld", n_tokens,
                          (long long)s->n_past, (long long)s->n_ctx);
    const uint32_t n_vocab = s->w.hp.n_vocab;
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= n_vocab)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "token %zu is id %d, outside the vocabulary of %u", i,
                              (int)tokens[i], n_vocab);
    s->have_logits = false;
    for (size_t done = 0; done < n_tokens;) {
        const int64_t n = (int64_t)(n_tokens - done) < s->n_batch ? (int64_t)(n_tokens - done) : s->n_batch;
        float *out = logits ? logits + done * n_vocab : s->logits;
        if (s->gpu != NULL) {
            hydra_status st = gpu_forward(s->gpu, s->n_past, tokens + done, n, logits != NULL, out);
            if (st != HYDRA_OK) {
                s->hidden_n = 0; /* the device rows are a failed step's */
                return st;
            }
            keep_hidden_rows(s, n); /* the rows stay in the device session's scratch */
        } else {
            forward(&s->w, s->pool, &s->kv, &s->f, s->n_past, tokens + done, n, logits != NULL, out);
            keep_hidden_rows(s, n);
        }
        s->n_past += n;
        done += (size_t)n;
    }
    if (logits != NULL)
        memcpy(s->logits, logits + (n_tokens - 1) * n_vocab, sizeof(float) * n_vocab);
    s->have_logits = true;
    return HYDRA_OK;
}

/* The checks of hydra_session_eval for a batch of sessions, and the batch's own. */
static hydra_status check_batch(hydra_session *const *ss, const int32_t *const *tokens, const size_t *n_tokens,
                                size_t n)
{
    if (ss == NULL || tokens == NULL || n_tokens == NULL || n == 0 || n > INT32_MAX)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_eval_batch: sessions and tokens are required");
    const hydra_session *first = ss[0];
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const hydra_session *s = ss[i];
        if (s == NULL || tokens[i] == NULL || n_tokens[i] == 0)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "batch entry %zu: a session and at least one token are required", i);
        if (s->model != first->model || s->gpu != NULL)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "batch entry %zu: sessions must be of one model, on the CPU", i);
        if (s->n_ctx > first->n_ctx)
            return hydra_fail(HYDRA_ERR_RANGE, "batch entry %zu: a context of %lld exceeds the first session's %lld",
                              i, (long long)s->n_ctx, (long long)first->n_ctx);
        for (size_t k = 0; k < i; k++)
            if (ss[k] == s)
                return hydra_fail(HYDRA_ERR_INVALID_ARG, "batch entries %zu and %zu are the same session", k, i);
        if (n_tokens[i] > (size_t)s->n_batch) /* a sliding layer's ring holds one step of n_batch */
            return hydra_fail(HYDRA_ERR_RANGE, "batch entry %zu: %zu tokens exceed its session's n_batch of %lld", i,
                              n_tokens[i], (long long)s->n_batch);
        if (n_tokens[i] > (size_t)(s->n_ctx - s->n_past))
            return hydra_fail(HYDRA_ERR_RANGE, "batch entry %zu: %zu tokens after %lld positions exceed the context "
                              "of %lld", i, n_tokens[i], (long long)s->n_past, (long long)s->n_ctx);
        for (size_t t = 0; t < n_tokens[i]; t++)
            if (tokens[i][t] < 0 || (uint32_t)tokens[i][t] >= s->w.hp.n_vocab)
                return hydra_fail(HYDRA_ERR_INVALID_ARG, "batch entry %zu: token %zu is id %d, outside the "
                                  "vocabulary of %u", i, t, (int)tokens[i][t], s->w.hp.n_vocab);
        total += n_tokens[i];
    }
    if (total > (size_t)first->n_batch)
        return hydra_fail(HYDRA_ERR_RANGE, "a batch of %zu tokens exceeds the first session's n_batch of %lld", total,
                          (long long)first->n_batch);
    return HYDRA_OK;
}

/* Makes *buf hold at least n items of size bytes, keeping a larger one. */
static bool grow_buffer(void **buf, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return true;
    void *p = realloc(*buf, n * size);
    if (p == NULL)
        return false;
    *buf = p;
    *cap = n;
    return true;
}

HYDRA_API hydra_status hydra_session_eval_batch(hydra_session *const *ss, const int32_t *const *tokens,
                                                const size_t *n_tokens, size_t n)
{
    return hydra_session_eval_batch_logits(ss, tokens, n_tokens, n, NULL);
}

HYDRA_API hydra_status hydra_session_eval_batch_logits(hydra_session *const *ss, const int32_t *const *tokens,
                                                       const size_t *n_tokens, size_t n, float *const *rows)
{
    hydra_status st = check_batch(ss, tokens, n_tokens, n);
    if (st != HYDRA_OK)
        return st;
    hydra_session *first = ss[0];
    const uint32_t n_vocab = first->w.hp.n_vocab;
    size_t n_out = 0; /* logits rows the pass computes: every row of a session that asks, else its last */
    for (size_t i = 0; i < n; i++)
        n_out += rows != NULL && rows[i] != NULL ? n_tokens[i] : 1;
    if (!grow_buffer((void **)&first->batch_seqs, &first->batch_seqs_cap, n, sizeof(fwd_seq)) ||
        !grow_buffer((void **)&first->batch_logits, &first->batch_logits_cap, (size_t)n_vocab * n_out, sizeof(float)))
        return hydra_fail(HYDRA_ERR_NOMEM, "a batch of %zu sessions, %zu logits rows", n, n_out);
    fwd_seq *seqs = first->batch_seqs;
    float *logits = first->batch_logits;
    for (size_t i = 0; i < n; i++)
        seqs[i] = (fwd_seq){.kv = &ss[i]->kv, .tokens = tokens[i], .pos0 = ss[i]->n_past, .n = (int64_t)n_tokens[i],
                            .all_rows = rows != NULL && rows[i] != NULL};
    forward_seqs(&first->w, first->pool, &first->f, seqs, (int)n, false, logits);
    const float *row = logits;
    const float *hidden = first->f.x; /* every sequence's final rows, in order (forward.h) */
    for (size_t i = 0; i < n; i++) {
        if (ss[i]->keep_hidden) { /* an MTP drafter reads them (src/mtp.c) */
            memcpy(ss[i]->hidden, hidden, sizeof(float) * n_tokens[i] * first->w.hp.n_embd);
            ss[i]->hidden_pos0 = ss[i]->n_past;
            ss[i]->hidden_n = (int64_t)n_tokens[i];
        }
        hidden += n_tokens[i] * first->w.hp.n_embd;
        if (seqs[i].all_rows) {
            memcpy(rows[i], row, sizeof(float) * n_vocab * n_tokens[i]);
            row += (size_t)n_vocab * n_tokens[i];
        } else {
            row += n_vocab;
        }
        memcpy(ss[i]->logits, row - n_vocab, sizeof(float) * n_vocab);
        ss[i]->n_past += (int64_t)n_tokens[i];
        ss[i]->have_logits = true;
    }
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_session_decode(hydra_session *s, int32_t token)
{
    return hydra_session_eval(s, &token, 1, NULL);
}

HYDRA_API const float *hydra_session_logits(const hydra_session *s)
{
    return s != NULL && s->have_logits ? s->logits : NULL;
}

HYDRA_API uint32_t hydra_session_n_past(const hydra_session *s)
{
    return s ? (uint32_t)s->n_past : 0;
}

HYDRA_API uint32_t hydra_session_n_ctx(const hydra_session *s)
{
    return s ? (uint32_t)s->n_ctx : 0;
}

HYDRA_API uint32_t hydra_session_n_vocab(const hydra_session *s)
{
    return s ? s->w.hp.n_vocab : 0;
}

HYDRA_API int hydra_session_n_threads(const hydra_session *s)
{
    return s ? s->n_threads : 0;
}

HYDRA_API void hydra_session_clear(hydra_session *s)
{
    if (s == NULL)
        return;
    s->n_past = 0;
    s->kv.n_written = 0;
    s->have_logits = false;
    drop_hidden_from(s, 0);
}

HYDRA_API uint64_t hydra_session_state_size(const hydra_session *s)
{
    return s != NULL && s->gpu == NULL ? kv_state_size(&s->kv, s->n_past) : 0;
}

HYDRA_API hydra_status hydra_session_state_write(const hydra_session *s, hydra_state_write_fn write, void *user)
{
    if (s == NULL || write == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_state_write: a session and a writer are required");
    if (s->gpu != NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "saving the cache of a CUDA session");
    return kv_state_write(&s->kv, s->n_past, write, user);
}

HYDRA_API hydra_status hydra_session_state_read(hydra_session *s, hydra_state_read_fn read, void *user)
{
    if (s == NULL || read == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_state_read: a session and a reader are required");
    if (s->gpu != NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "restoring the cache of a CUDA session");
    hydra_session_clear(s);
    int64_t n_past = 0;
    const hydra_status st = kv_state_read(&s->kv, read, user, &n_past);
    if (st != HYDRA_OK) {
        hydra_session_clear(s);
        return st;
    }
    s->n_past = n_past;
    return HYDRA_OK;
}

/* The split whose counters a session reports: the device side's on CUDA
 * (NULL when not hybrid: the session's own zeroed state, mode off). */
static const hybrid_state *split_of(const hydra_session *s)
{
    const hybrid_state *dev = s->gpu != NULL ? gpu_hybrid_split_state(s->gpu) : NULL;
    return dev != NULL ? dev : &s->hybrid;
}

HYDRA_API hydra_status hydra_session_hybrid_stats(const hydra_session *s, hydra_hybrid_stats *out)
{
    if (s == NULL || out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_hybrid_stats: a session and out are required");
    hybrid_public_stats(split_of(s), out);
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_session_hybrid_layer_stats(const hydra_session *s, uint32_t layer,
                                                        hydra_hybrid_layer_stats *out)
{
    if (s == NULL || out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_hybrid_layer_stats: a session and out are required");
    if (layer >= s->w.hp.n_layer)
        return hydra_fail(HYDRA_ERR_RANGE, "layer %u: the model has %u", layer, s->w.hp.n_layer);
    hybrid_public_layer_stats(split_of(s), layer, out);
    return HYDRA_OK;
}

HYDRA_API void hydra_session_hybrid_reset_stats(hydra_session *s)
{
    if (s != NULL && s->gpu != NULL)
        gpu_hybrid_counters_reset(s->gpu);
    else if (s != NULL)
        hybrid_reset_stats(&s->hybrid);
}

HYDRA_API hydra_status hydra_session_set_expert_profile(hydra_session *s, bool on, uint32_t trace_tokens)
{
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_set_expert_profile: no session");
    if (on && s->gpu != NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "expert profiling runs on the CPU backend");
    s->f.profile = NULL;
    expert_rank_free(&s->profile);
    if (!on)
        return HYDRA_OK;
    uint8_t *moe = malloc(s->w.hp.n_layer ? s->w.hp.n_layer : 1);
    if (moe == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "expert profile: out of memory");
    for (uint32_t l = 0; l < s->w.hp.n_layer; l++)
        moe[l] = s->w.layer[l].moe;
    hydra_status st = expert_rank_init(&s->profile, (int)s->w.hp.n_layer, (int)s->w.hp.n_expert, moe);
    free(moe);
    if (st == HYDRA_OK && trace_tokens > 0)
        st = expert_rank_trace_init(&s->profile, (int)s->w.hp.n_expert_used, trace_tokens);
    if (st != HYDRA_OK)
        expert_rank_free(&s->profile);
    else
        s->f.profile = &s->profile;
    return st;
}

HYDRA_API hydra_status hydra_session_save_expert_profile(const hydra_session *s, const char *path, bool trace)
{
    if (s == NULL || path == NULL || s->f.profile == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_save_expert_profile: no session, path or profile");
    return trace ? expert_rank_save_trace(&s->profile, path) : expert_rank_save(&s->profile, path);
}

HYDRA_API uint64_t hydra_session_kv_bytes(const hydra_session *s)
{
    return s ? s->kv.n_bytes : 0;
}

HYDRA_API hydra_status hydra_session_graph_stats(const hydra_session *s, hydra_graph_stats *out)
{
    if (s == NULL || out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_graph_stats: a session and out are required");
    gpu_stats g = {0};
    if (s->gpu != NULL)
        gpu_session_stats(s->gpu, &g);
    *out = (hydra_graph_stats){.steps = g.steps, .captures = g.captures, .replays = g.replays,
                               .graphs_cached = (uint32_t)g.graphs_cached};
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_session_truncate(hydra_session *s, uint32_t n_past)
{
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_session_truncate: no session");
    if (n_past > s->n_past)
        return hydra_fail(HYDRA_ERR_RANGE, "truncate to %u: only %lld positions were evaluated", n_past,
                          (long long)s->n_past);
    /* Positions at or past n_past are overwritten before any query reads
     * them: attention only reads positions below the querying token's.  A
     * sliding-window layer's ring may no longer hold the window before
     * n_past (it keeps the window plus one step). */
    if (!kv_can_resume(&s->kv, n_past))
        return hydra_fail(HYDRA_ERR_RANGE, "truncate to %u after %lld written positions: the sliding-window layers "
                          "keep only their window of %u plus a step of %lld positions; clear and evaluate again",
                          n_past, (long long)s->kv.n_written, s->w.hp.n_swa, (long long)s->n_batch);
    s->n_past = n_past;
    s->have_logits = false;
    drop_hidden_from(s, n_past);
    return HYDRA_OK;
}
