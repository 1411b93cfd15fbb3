/*
 * hybrid_pass.c — one decode token's missed experts on the CPU (hybrid_pass.h).
 *
 * Why not moe_experts' one-token path: it hands matvec_batch every gate and
 * up matrix, and matvec_batch cuts each matrix into CHUNKS_PER_THREAD
 * chunks per thread as if it ran alone.  With 8 missed experts on 14
 * threads a 768-row gate matrix goes in chunks of 4 rows (4.6 KB of Q4_K):
 * every thread streams hundreds of short pieces, each starting cold (the
 * row kernels prefetch the next group of rows, which is another thread's
 * chunk), and claims each from a shared counter.  The hybrid decode's CPU
 * pass read the missed experts at ~40-46 GB/s of the H200 host's 95 GB/s
 * (docs/PERFORMANCE.md, session 3).  Here the chunks of all the matrices of
 * a region together number about CHUNKS_PER_THREAD per thread, and a chunk
 * is at least MIN_CHUNK_ROWS rows.
 *
 * Same bits as moe_experts: every row goes through the same row kernels
 * (vec_dot_rows and vec_dot give the same bits per row, simd.h), the input
 * and hidden rows through the same conversions (act_for), the same SwiGLU
 * runs over the same packed hidden rows (ascending expert), and the
 * outputs are added in ascending expert order, as moe_experts adds them.
 */
#include "hybrid_pass.h"

#include "../kernels/cpu/ops.h"
#include "../kernels/cpu/simd.h"
#include "error.h"
#include "quant.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNKS_PER_THREAD = 8, MIN_CHUNK_ROWS = 16, MAX_ITEMS = 2 * 64 };

hydra_status hybrid_pass_init(hybrid_pass *p, const model_weights *w)
{
    memset(p, 0, sizeof *p);
    p->max_experts = (int)w->hp.n_expert_used;
    p->ff = w->hp.n_ff_exp;
    p->embd = w->hp.n_embd;
    if (p->max_experts <= 0 || p->max_experts > MAX_ITEMS / 2 || p->ff <= 0)
        return HYDRA_OK; /* nothing this pass takes: hybrid_pass_token declines */
    const size_t k = (size_t)p->max_experts;
    p->h_gate = malloc(sizeof(float) * k * (size_t)p->ff);
    p->h_up = malloc(sizeof(float) * k * (size_t)p->ff);
    p->y = malloc(sizeof(float) * k * (size_t)p->embd);
    if (p->h_gate == NULL || p->h_up == NULL || p->y == NULL) {
        hybrid_pass_free(p);
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid pass: buffers for %d experts", p->max_experts);
    }
    hydra_status st = act_init(&p->hidden, w, p->ff, p->max_experts);
    if (st != HYDRA_OK)
        hybrid_pass_free(p);
    return st;
}

void hybrid_pass_free(hybrid_pass *p)
{
    free(p->h_gate);
    free(p->h_up);
    free(p->y);
    act_free(&p->hidden);
    memset(p, 0, sizeof *p);
}

/* One matrix-vector product of a region: y[r] = W[r] . x. */
typedef struct pass_item {
    quant_vec_dot_fn vec_dot;
    quant_vec_dot_rows_fn vec_dot_rows; /* SIMD_ROWS rows at once, or NULL */
    const uint8_t *w;
    size_t row_stride;
    int64_t n_rows, n;
    const uint8_t *x;
    float *y;
    int64_t first_chunk; /* chunks of the items before it; items[n_items]: the total */
} pass_item;

typedef struct pass_job {
    pass_item *items;
    int n_items;
    int64_t chunk_rows;
    _Atomic int64_t next;
} pass_job;

static pass_item item_of(const wtensor *t, int e, const void *x, float *y)
{
    return (pass_item){quant_traits_of(t->type)->vec_dot, quant_cpu_vec_dot_rows(t->type),
                       t->data + (size_t)e * t->mat_bytes, t->row_bytes, t->ne[1], t->ne[0], x, y, 0};
}

/* Rows r0 .. r1 of an item: groups of SIMD_ROWS through the multi-row
 * kernel where the type has one, the rest one by one. */
static void item_rows(const pass_item *it, int64_t r0, int64_t r1)
{
    int64_t r = r0;
    if (it->vec_dot_rows != NULL)
        for (; r + SIMD_ROWS <= r1; r += SIMD_ROWS)
            it->vec_dot_rows(it->n, &it->y[r], it->w + (size_t)r * it->row_stride, it->row_stride, it->x);
    for (; r < r1; r++)
        it->vec_dot(it->n, &it->y[r], it->w + (size_t)r * it->row_stride, it->x);
}

static void pass_task(void *ctx, int thread_idx, int n_threads)
{
    (void)thread_idx;
    (void)n_threads;
    pass_job *job = ctx;
    const int64_t total = job->items[job->n_items].first_chunk;
    int i = 0; /* a thread's chunks only increase, so its item only moves on */
    for (int64_t c; (c = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < total;) {
        while (c >= job->items[i + 1].first_chunk)
            i++;
        const pass_item *it = &job->items[i];
        const int64_t r0 = (c - it->first_chunk) * job->chunk_rows;
        item_rows(it, r0, r0 + job->chunk_rows < it->n_rows ? r0 + job->chunk_rows : it->n_rows);
    }
}

/* items[0 .. n) in one parallel region; items[n] is the sentinel. */
static void run_items(thread_pool *pool, pass_item *items, int n)
{
    int64_t rows = 0;
    for (int i = 0; i < n; i++)
        rows += items[i].n_rows;
    int64_t chunk = rows / ((int64_t)pool_size(pool) * CHUNKS_PER_THREAD) / SIMD_ROWS * SIMD_ROWS;
    chunk = chunk < MIN_CHUNK_ROWS ? MIN_CHUNK_ROWS : chunk;
    int64_t chunks = 0;
    for (int i = 0; i < n; i++) {
        items[i].first_chunk = chunks;
        chunks += (items[i].n_rows + chunk - 1) / chunk;
    }
    items[n].first_chunk = chunks;
    pass_job job = {.items = items, .n_items = n, .chunk_rows = chunk};
    atomic_init(&job.next, 0);
    pool_run(pool, pass_task, &job);
}

/* The routes' indices by ascending expert; false unless they are one
 * token's, with distinct experts. */
static bool one_token_order(const moe_route *routes, int n, int *idx)
{
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && routes[idx[j - 1]].expert > routes[i].expert; j--)
            idx[j] = idx[j - 1];
        idx[j] = i;
        if (routes[i].token != 0)
            return false;
    }
    for (int i = 1; i < n; i++)
        if (routes[idx[i]].expert == routes[idx[i - 1]].expert)
            return false;
    return true;
}

static bool covered(const hybrid_pass *p, const layer_weights *lw, arch_act act, int n_routes)
{
    const wtensor *gate = &lw->w[W_MOE_GATE], *up = &lw->w[W_MOE_UP], *down = &lw->w[W_MOE_DOWN];
    return p->h_gate != NULL && act == ACT_SWIGLU && n_routes >= 1 && n_routes <= p->max_experts &&
           gate->data != NULL && up->data != NULL && down->data != NULL && lw->w[W_MOE_GATE_BIAS].data == NULL &&
           lw->w[W_MOE_UP_BIAS].data == NULL && lw->w[W_MOE_DOWN_BIAS].data == NULL && gate->ne[1] == p->ff &&
           up->ne[1] == p->ff && down->ne[0] == p->ff && down->ne[1] == p->embd;
}

bool hybrid_pass_token(hybrid_pass *p, thread_pool *pool, const layer_weights *lw, arch_act act, act_set *x,
                       const moe_route *routes, int n_routes, float *out)
{
    int idx[MAX_ITEMS / 2];
    if (!covered(p, lw, act, n_routes) || !one_token_order(routes, n_routes, idx))
        return false;
    const wtensor *gate = &lw->w[W_MOE_GATE], *up = &lw->w[W_MOE_UP], *down = &lw->w[W_MOE_DOWN];
    const int m = n_routes;
    pass_item items[MAX_ITEMS + 1];
    size_t sg, su, sd;
    const void *xg = act_for(x, pool, gate->type, &sg), *xu = act_for(x, pool, up->type, &su);
    for (int k = 0; k < m; k++) {
        const int e = routes[idx[k]].expert;
        items[2 * k] = item_of(gate, e, xg, p->h_gate + k * p->ff);
        items[2 * k + 1] = item_of(up, e, xu, p->h_up + k * p->ff);
    }
    run_items(pool, items, 2 * m);
    op_swiglu(p->h_gate, p->h_gate, p->h_up, m * p->ff);
    act_bind(&p->hidden, p->h_gate, m);
    const uint8_t *hq = act_for(&p->hidden, pool, down->type, &sd);
    for (int k = 0; k < m; k++)
        items[k] = item_of(down, routes[idx[k]].expert, hq + (size_t)k * sd, p->y + k * p->embd);
    run_items(pool, items, m);
    for (int k = 0; k < m; k++)
        op_axpy(out, routes[idx[k]].weight, p->y + k * p->embd, p->embd);
    return true;
}

/* --- pinning */

static int sys_int(int cpu, const char *what)
{
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what);
    FILE *f = fopen(path, "r");
    int v = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static bool listed(const hybrid_cpus *c, int cpu)
{
    for (int i = 0; i < c->n; i++)
        if (c->cpu[i] == cpu)
            return true;
    return false;
}

/* Whether a CPU of the same package and core is listed already. */
static bool core_listed(const hybrid_cpus *c, int cpu)
{
    const int pkg = sys_int(cpu, "physical_package_id"), core = sys_int(cpu, "core_id");
    for (int i = 0; i < c->n; i++)
        if (sys_int(c->cpu[i], "physical_package_id") == pkg && sys_int(c->cpu[i], "core_id") == core)
            return true;
    return false;
}

void hybrid_cpus_find(hybrid_cpus *c)
{
    c->n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    for (int round = 0; round < 2; round++)
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, &set) && !listed(c, cpu) && (round == 1 || !core_listed(c, cpu)))
                c->cpu[c->n++] = cpu;
}

void hybrid_pin_self(const hybrid_cpus *c, int at)
{
    if (c->n < 2)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(c->cpu[at % c->n], &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void pin_task(void *ctx, int thread_idx, int n_threads)
{
    (void)n_threads;
    if (thread_idx > 0)
        hybrid_pin_self(ctx, thread_idx + 1);
}

void hybrid_pin_pool(thread_pool *pool, const hybrid_cpus *c)
{
    pool_run(pool, pin_task, (void *)c);
}
