/*
 * cluster_async.cuh — values sent into another block's shared memory
 * inside a thread-block cluster (compute capability 9.0 and later) without
 * cluster barriers on the path: the receiver initialises an mbarrier that
 * expects the bytes (cla_expect), a relaxed cluster barrier before the PDL
 * wait (cla_cluster_started) makes every mbarrier visible before any block
 * sends and overlaps the previous launch, each sender stores with st.async
 * (cla_send), whose bytes count down the receiver's mbarrier, and the
 * receiver waits on its own mbarrier (cla_wait).  A block exits only after
 * the bytes sent into it have landed (its wait), so nobody writes into a
 * finished block; a sender may exit at once.  Why not cluster barriers:
 * their arrive is a MEMBAR.GPU, which waits for the block's global stores,
 * and the data is read one round trip later (docs/PERFORMANCE.md, "CUDA
 * decode, session 9: the router").  Older architectures and HIP compile
 * these to nothing: clusters are never launched there
 * (gk_clusters_supported), and there a cluster is one block.
 */
#ifndef HYDRA_CUDA_CLUSTER_ASYNC_CUH
#define HYDRA_CUDA_CLUSTER_ASYNC_CUH

#include "common.cuh"

/* p's address in this block's shared window (PTX .shared::cta). */
static inline __device__ uint32_t cla_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* The address (PTX .shared::cluster) of this block's shared variable p in
 * the block of cluster rank r. */
static inline __device__ uint32_t cla_in_block(const void *p, unsigned r)
{
    uint32_t a = cla_smem(p);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(a) : "r"(r));
#else
    (void)r;
#endif
    return a;
}

/* v into the word at `at` (a cla_in_block address), its 4 bytes counted
 * on the mbarrier at bar (in the same block as at). */
static inline __device__ void cla_send(uint32_t at, float v, uint32_t bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(at),
                 "r"(__float_as_uint(v)), "r"(bar)
                 : "memory");
#else
    (void)at, (void)v, (void)bar;
#endif
}

/* The same for a double: 8 bytes, `at` 8-byte aligned. */
static inline __device__ void cla_send(uint32_t at, double v, uint32_t bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(at),
                 "l"(__double_as_longlong(v)), "r"(bar)
                 : "memory");
#else
    (void)at, (void)v, (void)bar;
#endif
}

/* One thread: bar becomes an mbarrier of one arrival a phase. */
static inline __device__ void cla_init(uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
                 "fence.mbarrier_init.release.cluster;" ::"r"(cla_smem(bar))
                 : "memory");
#else
    (void)bar;
#endif
}

/* One thread: bar's current phase completes once `bytes` have landed (its
 * one arrival, made here). */
static inline __device__ void cla_arm(uint64_t *bar, uint32_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(cla_smem(bar)),
                 "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
#endif
}

/* One thread of the receiving block: bar becomes an mbarrier whose phase 0
 * completes once `bytes` have landed. */
static inline __device__ void cla_expect(uint64_t *bar, uint32_t bytes)
{
    cla_init(bar);
    cla_arm(bar, bytes);
}

/* Until bar's phase of the given parity (its uses so far, mod 2) has
 * completed; the bytes sent are then visible to the calling thread
 * (acquire at cluster scope). */
static inline __device__ void cla_wait_parity(uint64_t *bar, uint32_t parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(cla_smem(bar)), "r"(parity)
                     : "memory");
#else
    (void)bar, (void)parity;
#endif
}

/* One thread, after a block barrier: the block's earlier accesses of
 * shared memory ordered before the bulk copies it issues next (the copies
 * write through the async proxy). */
static inline __device__ void cla_async_fence(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/* Until bar's phase 0 has completed. */
static inline __device__ void cla_wait(uint64_t *bar)
{
    cla_wait_parity(bar, 0);
}

/* One thread: bytes (a multiple of 16; both addresses 16-byte aligned)
 * from global src into this block's shared dst by one bulk copy, counted
 * on bar (cp.async.bulk, compute capability 9.0: one instruction a run,
 * no registers held while the bytes are in flight).  Where the block read
 * or wrote dst before, cla_async_fence first. */
static inline __device__ void cla_bulk(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     cla_smem(dst)),
                 "l"(src), "r"(bytes), "r"(cla_smem(bar))
                 : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)bar;
#endif
}

/* cla_bulk for weights that a step reads once: their L2 lines marked
 * evict-first (createpolicy, PTX ISA 7.4), so that they are the first to
 * go when later lines need room.  A decode step streams ~21 MB of expert
 * rows a layer and the 255 MB output head through the 50 MB L2 of an
 * H200; with normal priority they pushed out lines the next launches read
 * again (code, parameters, small activations: which of them mattered was
 * not separated).  The experts' and the head's copies evict-first: tg128
 * on the H200 566-572 -> 577-582 t/s over three calls (docs/PERFORMANCE.md,
 * "CUDA decode, session 19"); the Q/K/V and attention output rows as an
 * evict-first access window on top gained nothing more. */
static inline __device__ void cla_bulk_once(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
                 "[%3], %4;" ::"r"(cla_smem(dst)),
                 "l"(src), "r"(bytes), "r"(cla_smem(bar)), "l"(policy)
                 : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)bar;
#endif
}

/* Every thread of the cluster: every block runs and every mbarrier
 * initialised before this is visible (no ordering of other memory:
 * relaxed, no MEMBAR). */
static inline __device__ void cla_cluster_started(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}

#endif
