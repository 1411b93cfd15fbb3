/*
 * mma.cuh — the warp-level f16 matrix product, the asynchronous
 * global-to-shared copy and the L2 prefetch that mmq.cu builds on (sm_80 and later: every
 * architecture the Makefile builds for).
 *
 * Fragments of mma.sync m16n8k16 with f16 inputs and f32 accumulators (PTX
 * ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
 * lane = 4 g + t, each input register two halves, the lower k first:
 *   A (16 x 16, row-major): a[0] = A[g][2t..2t+1],   a[1] = A[g+8][2t..2t+1],
 *                           a[2] = A[g][8+2t..],     a[3] = A[g+8][8+2t..]
 *   B (16 x 8, col-major):  b[0] = B[2t..2t+1][g],   b[1] = B[8+2t..][g]
 *   D (16 x 8, f32):        d[0] = D[g][2t], d[1] = D[g][2t+1],
 *                           d[2] = D[g+8][2t], d[3] = D[g+8][2t+1]
 *
 * A HIP build takes the portable versions below (lanes exchange the
 * fragments by shuffles): correct, not fast.
 */
#ifndef HYDRA_CUDA_MMA_CUH
#define HYDRA_CUDA_MMA_CUH

#include "compat.h"

#if defined(HYDRA_HIP)
/* The two halves of x times those of y, summed, in f32. */
static inline __device__ float mma_dot2(int x, int y)
{
    const __half2 a = *(const __half2 *)&x, b = *(const __half2 *)&y;
    return __low2float(a) * __low2float(b) + __high2float(a) * __high2float(b);
}

/* d += A . B: lane (g, t) gathers row g's and g + 8's k values from lanes
 * 4 g + src and column n's from lanes 4 n + src. */
static inline __device__ void mma_f16_16816(float d[4], const int a[4], const int b[2])
{
    const int lane = threadIdx.x % GPU_WARP, g = lane / 4, t = lane % 4;
    for (int src = 0; src < 4; src++) {
        const int lo0 = gpu_shfl(a[0], 4 * g + src), lo8 = gpu_shfl(a[2], 4 * g + src);
        const int hi0 = gpu_shfl(a[1], 4 * g + src), hi8 = gpu_shfl(a[3], 4 * g + src);
        for (int e = 0; e < 2; e++) {
            const int col = 4 * (2 * t + e) + src;
            const int b0 = gpu_shfl(b[0], col), b8 = gpu_shfl(b[1], col);
            d[e] += mma_dot2(lo0, b0) + mma_dot2(lo8, b8);
            d[2 + e] += mma_dot2(hi0, b0) + mma_dot2(hi8, b8);
        }
    }
}

static inline __device__ void cp_async16(void *dst, const void *src)
{
    *(int4 *)dst = *(const int4 *)src;
}

static inline __device__ void cp_async_commit(void) {}
static inline __device__ void cp_async_wait_all(void) {}
static inline __device__ void cp_async_wait_prior(void) {}
static inline __device__ void prefetch_l2(const void *p)
{
    (void)p;
}

static inline __device__ void cp_async16_part(void *dst, const void *src, int n)
{
    for (int i = 0; i < 16; i++)
        ((uint8_t *)dst)[i] = i < n ? ((const uint8_t *)src)[i] : 0;
}

static inline int gpu_allow_smem(const void *kernel, int bytes)
{
    return (int)hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
#else
/* d += A . B (f16 x f16 -> f32). */
static inline __device__ void mma_f16_16816(float d[4], const int a[4], const int b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* 16 bytes global -> shared without a register round trip; both 16-byte
 * aligned.  Visible after a wait below and a barrier. */
static inline __device__ void cp_async16(void *dst, const void *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

static inline __device__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* The first n (<= 16) of 16 bytes from src, the rest zeros: src need not
 * be readable past n. */
static inline __device__ void cp_async16_part(void *dst, const void *src, int n)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(n) : "memory");
}

/* Lets kernel launch with bytes of dynamic shared memory (over 48 KiB
 * only when asked). */
static inline int gpu_allow_smem(const void *kernel, int bytes)
{
    return (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

/* Every committed group has landed. */
static inline __device__ void cp_async_wait_all(void)
{
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* Every group but the last committed one has landed. */
static inline __device__ void cp_async_wait_prior(void)
{
    asm volatile("cp.async.wait_group 1;" ::: "memory");
}

/* Asks for the line holding p to be brought into L2 (no register, no
 * wait). */
static inline __device__ void prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
#endif

#endif
