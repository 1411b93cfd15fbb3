/*
 * stamp.cuh — phase stamps of one decode step, for a profiling build only
 * (`make CUDA=1 STAMPS=1`, objects in build/cuda/stamps; docs/PERFORMANCE.md
 * says how to read them).  Why: a layer's launches overlap through
 * programmatic dependent launch, so what each phase costs the step shows
 * only on one clock for every SM (%globaltimer, ns), not in a profiler that
 * serialises launches (session 14's timeline, which this makes repeatable).
 *
 * A designated thread calls GK_STAMP_IF(its condition, site) at a phase;
 * while the ring is armed (src/gpu/gpu_stamps.c: the steps at the position
 * HYDRA_STAMP_POS names) it appends (time, site) to it, one atomic a stamp.
 * Every translation unit that stamps declares GK_STAMP_TU(name) once: the
 * build has no relocatable device code, so each has its own pointer to the
 * ring, which gpu_stamps.c sets through the setter that macro defines.  In
 * other builds all of it compiles to nothing.
 */
#ifndef HYDRA_CUDA_STAMP_CUH
#define HYDRA_CUDA_STAMP_CUH

#include "common.cuh"
#include "stamp_sites.h"

#if defined(HYDRA_STAMPS)
static __device__ gk_stamp_ring *gk_ring;

static inline __device__ void gk_stamp(unsigned site)
{
    gk_stamp_ring *r = gk_ring;
    if (r == NULL || *(volatile unsigned *)&r->armed == 0)
        return;
    const unsigned long long t = gpu_clock_ns();
    const unsigned i = atomicAdd(&r->n, 1u);
    if (i < GK_STAMP_MAX) {
        r->t[i] = t;
        r->site[i] = site;
    }
}

#define GK_STAMP_IF(cond, site)                                                                                  \
    do {                                                                                                         \
        if (cond)                                                                                                \
            gk_stamp(site);                                                                                      \
    } while (0)
#define GK_STAMP_TU(name)                                                                                        \
    extern "C" int gk_stamps_bind_##name(gk_stamp_ring *r)                                                       \
    {                                                                                                            \
        return (int)cudaMemcpyToSymbol(gk_ring, &r, sizeof r);                                                   \
    }
#else
#define GK_STAMP_IF(cond, site) ((void)0)
#define GK_STAMP_TU(name)
#endif

#endif
