/*
 * gpu_tensor_p2p.h — -sm tensor's peer-access all-reduce for decode-sized
 * rows (gpu_tensor_p2p.c, kernels/cuda/allreduce.cu).
 */
#ifndef HYDRA_GPU_TENSOR_P2P_H
#define HYDRA_GPU_TENSOR_P2P_H

#include "gpu_internal.h"

typedef struct gpu_p2p gpu_p2p;

/* Buffers for sums of up to count_max floats over devices[0..n-1], with
 * peer access enabled between every pair; HYDRA_ERR_UNSUPPORTED when a
 * pair has none. */
hydra_status gpu_p2p_open(gpu_p2p **out, int n, const int *devices, int64_t count_max);
void gpu_p2p_close(gpu_p2p *p); /* NULL is allowed */

/* Whether a sum of count floats can take this path. */
bool gpu_p2p_fits(const gpu_p2p *p, size_t count);

/* buf[i] (count floats, on devices[i]) = the sum over every device, on
 * streams[i]; every device gets the same bits. */
hydra_status gpu_p2p_sum(gpu_p2p *p, float *const *buf, size_t count, const gpuStream_t *streams);

/* Enqueues the copy of device i's error word on its stream (before the
 * step's synchronisation); after it, gpu_p2p_check fails naming the
 * device whose peer never came. */
hydra_status gpu_p2p_fetch(gpu_p2p *p, int i, gpuStream_t stream);
hydra_status gpu_p2p_check(const gpu_p2p *p);

#endif
