/*
 * gpu_stamps.c — a profiling build's phase stamps: the ring, its arming,
 * its report (gpu_stamps.h).  Compiled in every CUDA build, empty but in
 * the profiling one.
 */
#include "gpu_stamps.h"

#if defined(HYDRA_STAMPS)
#include "../../kernels/cuda/stamp_sites.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each stamping kernel file's setter of its pointer to the ring
 * (stamp.cuh's GK_STAMP_TU). */
#define STAMP_TUS(X) X(matvec) X(attn_decode) X(attn_out_router) X(experts) X(moe) X(matvec_head)
#define STAMP_DECL_(name) int gk_stamps_bind_##name(gk_stamp_ring *r);
STAMP_TUS(STAMP_DECL_)
#undef STAMP_DECL_

#define STAMP_NAME_(site, name, what) name,
static const char *const site_name[GS_N] = {GK_STAMP_SITES(STAMP_NAME_)};
#undef STAMP_NAME_

static gk_stamp_ring *ring_of(const gpu_session *g)
{
    return (gk_stamp_ring *)g->stamps;
}

static int bind_all(gk_stamp_ring *r)
{
    int e = 0;
#define STAMP_BIND_(name) e = e != 0 ? e : gk_stamps_bind_##name(r);
    STAMP_TUS(STAMP_BIND_)
#undef STAMP_BIND_
    return e;
}

hydra_status gpu_stamps_open(gpu_session *g)
{
    const char *pos = getenv("HYDRA_STAMP_POS");
    g->stamp_pos = -1;
    if (pos == NULL || g->multi != NULL)
        return HYDRA_OK;
    g->stamp_pos = atoll(pos);
    TRY_ST(gpu_mem_alloc(GPU_MEM_SCRATCH, sizeof(gk_stamp_ring), &g->stamps, "phase stamps"));
    gpuError_t e = gpuMemsetAsync(g->stamps, 0, sizeof(gk_stamp_ring), g->stream);
    if (e == gpuSuccess)
        e = (gpuError_t)bind_all(ring_of(g));
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "setting up the phase stamps");
}

hydra_status gpu_stamps_arm(gpu_session *g, int64_t pos0, int64_t n_tok)
{
    if (g->stamps == NULL)
        return HYDRA_OK;
    const int armed = n_tok == 1 && pos0 == g->stamp_pos;
    const gpuError_t e = gpuMemsetAsync(&ring_of(g)->armed, armed, sizeof(unsigned), g->stream); /* any byte set: armed */
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "arming the phase stamps");
}

static int by_time(const void *a, const void *b)
{
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return (x > y) - (x < y);
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Each site's median of (its time - its layer's qkv.wait), in us. */
static void report(const gk_stamp_ring *r)
{
    const unsigned n = r->n < GK_STAMP_MAX ? r->n : GK_STAMP_MAX;
    unsigned long long *ts = malloc(sizeof *ts * 2 * (size_t)n);
    double *since = malloc(sizeof *since * (size_t)n);
    if (ts == NULL || since == NULL) {
        free(ts);
        free(since);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        ts[2 * i] = r->t[i];
        ts[2 * i + 1] = r->site[i];
    }
    qsort(ts, n, 2 * sizeof *ts, by_time);
    fprintf(stderr, "phase stamps: %u (median us after the layer's qkv.wait)\n", n);
    for (unsigned s = 0; s < GS_N; s++) {
        size_t k = 0;
        unsigned long long origin = 0;
        for (unsigned i = 0; i < n; i++) {
            if (ts[2 * i + 1] == GS_QKV_WAIT)
                origin = ts[2 * i];
            else if (ts[2 * i + 1] == s && origin != 0)
                since[k++] = (double)(ts[2 * i] - origin) / 1e3;
        }
        if (k == 0)
            continue;
        qsort(since, k, sizeof *since, by_value);
        fprintf(stderr, "  %-16s %8.2f us  (%zu)\n", site_name[s], since[k / 2], k);
    }
    free(ts);
    free(since);
}

void gpu_stamps_close(gpu_session *g)
{
    if (g->stamps == NULL)
        return;
    gk_stamp_ring *host = malloc(sizeof *host);
    if (host != NULL && gpuMemcpy(host, g->stamps, sizeof *host, gpuMemcpyDeviceToHost) == gpuSuccess)
        report(host);
    free(host);
    bind_all(NULL);
    gpu_mem_free(GPU_MEM_SCRATCH, g->stamps, sizeof(gk_stamp_ring));
    g->stamps = NULL;
}
#endif
