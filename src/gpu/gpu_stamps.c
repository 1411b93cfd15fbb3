/*
 * gpu_stamps.c — a profiling build's phase stamps: the ring, its arming,
 * its report (gpu_stamps.h).  Compiled in every CUDA build, empty but in
 * the profiling one.
 */
#include "gpu_stamps.h"

#if defined(HYDRA_STAMPS)
#include "../../kernels/cuda/stamp_sites.h"

#include <stdbool.h>
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

/* The Q/K/V launch's sites come before their layer's attention launch;
 * every other site after it. */
static bool before_attention(unsigned site)
{
    return site == GS_QKV_WAIT || site == GS_QKV_DOTS;
}

/* A layer's anchor is its attention launch's wait, the one site every
 * layer stamps once and whose launch no other layer's overlaps (the Q/K/V
 * launch of layer l + 1 overlaps layer l's combine).  A stamp's offset is
 * from the anchor of its layer: the next anchor for the Q/K/V sites, the
 * last one for the others; none where that anchor is missing. */
static bool offset_of(const unsigned long long *st, unsigned n, unsigned i, double *us)
{
    const int step = before_attention((unsigned)st[2 * i + 1]) ? 1 : -1;
    for (long j = (long)i + step; j >= 0 && j < (long)n; j += step)
        if (st[2 * j + 1] == GS_ATT_WAIT) {
            *us = ((double)st[2 * i] - (double)st[2 * j]) / 1e3;
            return true;
        }
    return false;
}

/* The sorted stamps, one "ns site" line each, for a timeline of every
 * layer (HYDRA_STAMP_DUMP names the file). */
static void dump(const unsigned long long *st, unsigned n)
{
    const char *path = getenv("HYDRA_STAMP_DUMP");
    FILE *f = path != NULL ? fopen(path, "w") : NULL;
    if (f == NULL)
        return;
    for (unsigned i = 0; i < n; i++)
        fprintf(f, "%llu %s\n", st[2 * i], site_name[st[2 * i + 1]]);
    fclose(f);
}

/* Each site's quartiles of its offset from its layer's attention wait. */
static void report(const gk_stamp_ring *r)
{
    const unsigned n = r->n < GK_STAMP_MAX ? r->n : GK_STAMP_MAX;
    unsigned long long *st = malloc(sizeof *st * 2 * (size_t)n);
    double *since = malloc(sizeof *since * (size_t)n);
    if (st == NULL || since == NULL) {
        free(st);
        free(since);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        st[2 * i] = r->t[i];
        st[2 * i + 1] = r->site[i] < GS_N ? r->site[i] : GS_N - 1;
    }
    qsort(st, n, 2 * sizeof *st, by_time);
    dump(st, n);
    fprintf(stderr, "phase stamps: %u (us from the layer's attn.wait: 25%%, median, 75%%; stamps)\n", n);
    for (unsigned s = 0; s < GS_N; s++) {
        size_t k = 0;
        for (unsigned i = 0; i < n; i++)
            if (st[2 * i + 1] == s && offset_of(st, n, i, &since[k]))
                k++;
        if (k == 0)
            continue;
        qsort(since, k, sizeof *since, by_value);
        fprintf(stderr, "  %-16s %8.2f %8.2f %8.2f  (%zu)\n", site_name[s], since[k / 4], since[k / 2],
                since[3 * k / 4], k);
    }
    free(st);
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
