/*
 * grid_sync.cuh — a barrier across every block of a persistent launch,
 * for decode kernels that run several dependent phases (a matvec, then
 * what reads all of its rows) in one launch instead of one launch each:
 * a decode step is a chain of small launches, each bound by its own
 * latency more than by its bytes (docs/PERFORMANCE.md, "CUDA decode,
 * session 6").
 *
 * State: two words of the session's zeroed counters (kernels.h,
 * GK_CTR_*): bar[0] counts arrivals and is back at zero after every
 * barrier, so a launch leaves it as it found it and a graph replays with
 * no reset; bar[1] is a generation that only grows (waiters wait for it
 * to change, so wrapping is harmless).
 *
 * Memory: a block's writes before the barrier are visible to every block
 * after it at L2.  L1 is not coherent between SMs, so data that another
 * block wrote in this launch must be read with __ldcg (or volatile), never
 * with a plain load that could hit a line this SM cached earlier.
 *
 * Safety: the barrier deadlocks unless every block of the grid is
 * resident at once.  Launchers size the grid with gk_coresident_blocks and
 * never signal a dependent launch early (its blocks could take the room a
 * block of this grid still needs).
 */
#ifndef HYDRA_CUDA_GRID_SYNC_CUH
#define HYDRA_CUDA_GRID_SYNC_CUH

#include "kernels.h"

static inline __device__ void gk_grid_barrier(unsigned int *bar, unsigned int n_blocks)
{
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        volatile unsigned int *gen = bar + 1;
        /* Read before arriving: the generation cannot move on until this
         * block has arrived, and it has already passed the last change. */
        const unsigned int seen = *gen;
        __threadfence(); /* this block's writes, before its arrival */
        if (atomicAdd(bar, 1u) == n_blocks - 1) {
            atomicExch(bar, 0u); /* no one arrives again before the generation moves */
            __threadfence();
            atomicAdd((unsigned int *)gen, 1u);
        } else {
            while (*gen == seen)
                ;
        }
        __threadfence(); /* the other blocks' writes, after the wait */
    }
    __syncthreads();
}

/* The most blocks of kernel (threads a block, smem bytes of dynamic
 * shared memory) that the current device holds resident at once: the
 * largest grid gk_grid_barrier may span.  0 on error.  It asks the
 * runtime each time: cache the answer per device where launches repeat
 * outside a graph. */
template <typename Kernel>
static inline int gk_coresident_blocks(Kernel kernel, int threads, size_t smem)
{
    int dev = 0, n_sm = 0, per_sm = 0;
    if (gpuGetDevice(&dev) != gpuSuccess ||
        gpuDeviceGetAttribute(&n_sm, gpuDevAttrMultiProcessorCount, dev) != gpuSuccess)
        return 0;
#if defined(HYDRA_HIP)
    if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != hipSuccess)
        return 0;
#else
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess)
        return 0;
#endif
    return n_sm * per_sm;
}

#endif
