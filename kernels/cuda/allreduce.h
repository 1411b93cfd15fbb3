/*
 * allreduce.h — a one-shot sum of small rows over the GPUs of one host
 * through peer access (allreduce.cu), for -sm tensor's decode steps
 * (src/gpu/gpu_tensor_p2p.c); larger sums take NCCL.
 *
 * Each device publishes its rows into its own buffer (two, alternating by
 * generation), raises its flag to the generation, waits until every
 * peer's flag reaches it, then sums every device's published rows in
 * device order: every device gets the same bits.  A device cannot publish
 * generation g + 2 into the buffer of g before every peer has raised its
 * flag to g + 1, which each does only after reading g, so one pair of
 * buffers suffices.  A flag that does not come within timeout_cycles sets
 * *err (the sum is then not made), so a lost peer cannot hang the device.
 */
#ifndef HYDRA_CUDA_ALLREDUCE_H
#define HYDRA_CUDA_ALLREDUCE_H

#include "compat.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { GK_AR_MAX_DEV = 8 };

typedef struct gk_ar {
    float *x;                          /* this device's rows: its partial in, the sum out */
    int64_t count;                     /* floats, a multiple of 4, at most count_max */
    int64_t count_max;                 /* floats per publish buffer */
    int rank, n_dev;
    float *pub[GK_AR_MAX_DEV];         /* each device's 2 x count_max publish floats (peer addresses) */
    unsigned *flag[GK_AR_MAX_DEV];     /* each device's published generation (peer addresses) */
    unsigned *gen;                     /* this device's generation counter */
    int32_t *err;                      /* this device's: set on a timeout */
    unsigned long long timeout_cycles; /* SM clock cycles */
} gk_ar;

int gk_allreduce_p2p(gpuStream_t s, const gk_ar *a);

#ifdef __cplusplus
}
#endif
#endif
