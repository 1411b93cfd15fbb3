/*
 * gpu_graph.c — the cache of captured steps.  A step's structure (tokens
 * in the batch, context bucket, which logits rows) decides every kernel
 * and grid of gpu_enqueue_step; what changes from token to token (ids,
 * position) is read from device memory.  So a step is captured once per
 * structure, keyed by an xxHash of it, and replayed for every later step
 * of that structure.  The cache keeps GRAPH_CACHE graphs and replaces the
 * oldest when full.
 */
#include "gpu_internal.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t shape_key(const step_shape *sh)
{
    return XXH3_64bits(sh, sizeof *sh);
}

static hydra_status capture(gpu_session *g, const step_shape *sh, gpuGraphExec_t *exec)
{
    gpuError_t e = gpuStreamBeginCapture(g->stream, gpuStreamCaptureModeThreadLocal);
    if (e != gpuSuccess)
        return gpu_fail(e, "beginning a graph capture");
    const hydra_status st = gpu_enqueue_step(g, sh);
    gpuGraph_t graph = NULL;
    e = gpuStreamEndCapture(g->stream, &graph);
    if (st != HYDRA_OK || e != gpuSuccess) {
        if (graph != NULL)
            gpuGraphDestroy(graph);
        return st != HYDRA_OK ? st : gpu_fail(e, "ending a graph capture");
    }
    e = gpu_graph_instantiate(exec, graph);
    gpuGraphDestroy(graph);
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "instantiating a captured step");
}

static gpuGraphExec_t *find(gpu_session *g, uint64_t key)
{
    for (int i = 0; i < g->n_graphs; i++)
        if (g->graphs[i].key == key)
            return &g->graphs[i].exec;
    return NULL;
}

static gpuGraphExec_t *insert(gpu_session *g, uint64_t key, gpuGraphExec_t exec)
{
    graph_entry *slot;
    if (g->n_graphs < GRAPH_CACHE) {
        slot = &g->graphs[g->n_graphs++];
    } else {
        slot = &g->graphs[g->next_evict];
        g->next_evict = (g->next_evict + 1) % GRAPH_CACHE;
        gpuGraphExecDestroy(slot->exec);
    }
    *slot = (graph_entry){key, exec};
    return &slot->exec;
}

hydra_status gpu_graph_run(gpu_session *g, const step_shape *sh)
{
    const uint64_t key = shape_key(sh);
    gpuGraphExec_t *exec = find(g, key);
    if (exec == NULL) {
        gpuGraphExec_t fresh = NULL;
        const hydra_status st = capture(g, sh, &fresh);
        if (st != HYDRA_OK)
            return st;
        exec = insert(g, key, fresh);
        g->stats.captures++;
    } else {
        g->stats.replays++;
    }
    const gpuError_t e = gpuGraphLaunch(*exec, g->stream);
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "launching a captured step");
}

void gpu_graph_free_all(gpu_session *g)
{
    for (int i = 0; i < g->n_graphs; i++)
        gpuGraphExecDestroy(g->graphs[i].exec);
    g->n_graphs = 0;
    g->next_evict = 0;
}
