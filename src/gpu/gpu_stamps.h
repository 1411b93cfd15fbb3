/*
 * gpu_stamps.h — the host side of a profiling build's phase stamps
 * (kernels/cuda/stamp.cuh; `make CUDA=1 STAMPS=1`).  With HYDRA_STAMP_POS=P
 * in the environment, a session's one-token steps at position P are
 * stamped, and freeing the session prints to stderr each site's quartiles
 * of its time from its layer's attention launch passing its PDL wait, over
 * the layers and steps stamped (and with HYDRA_STAMP_DUMP=file, writes the
 * stamps themselves there, in time order).  One session at a time, on one device (each kernel
 * file's pointer to the ring is a device global).  In other builds these
 * do nothing.
 */
#ifndef HYDRA_GPU_STAMPS_H
#define HYDRA_GPU_STAMPS_H

#include "gpu_internal.h"

#if defined(HYDRA_STAMPS)
hydra_status gpu_stamps_open(gpu_session *g);
/* Before a step's launches, in its stream: armed for the position asked. */
hydra_status gpu_stamps_arm(gpu_session *g, int64_t pos0, int64_t n_tok);
void gpu_stamps_close(gpu_session *g);
#else
static inline hydra_status gpu_stamps_open(gpu_session *g)
{
    (void)g;
    return HYDRA_OK;
}
static inline hydra_status gpu_stamps_arm(gpu_session *g, int64_t pos0, int64_t n_tok)
{
    (void)g, (void)pos0, (void)n_tok;
    return HYDRA_OK;
}
static inline void gpu_stamps_close(gpu_session *g)
{
    (void)g;
}
#endif

#endif
