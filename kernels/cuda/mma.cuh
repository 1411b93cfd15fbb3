/*
 * mma.cuh — the warp-level 8-bit integer matrix products and the
 * asynchronous global-to-shared copy that mmq.cu builds on (sm_80 and
 * later: every architecture the Makefile builds for).
 *
 * Fragments of mma.sync m16n8k32 (PTX ISA, "Matrix Fragments for
 * mma.m16n8k32"), lane = 4 g + t:
 *   A (16 x 32, row-major): a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..],
 *                           a[2] = A[g][16+4t..],  a[3] = A[g+8][16+4t..]
 *   B (32 x 8, col-major):  b[0] = B[4t..4t+3][g], b[1] = B[16+4t..][g]
 *   D (16 x 8, s32):        d[0] = D[g][2t], d[1] = D[g][2t+1],
 *                           d[2] = D[g+8][2t], d[3] = D[g+8][2t+1]
 * m16n8k16 is its first half: A regs a[0], a[1], B reg b[0].
 *
 * A HIP build takes the portable versions below (lanes exchange the
 * fragments by shuffles and sum with gpu_dp4a): correct, not fast.
 */
#ifndef HYDRA_CUDA_MMA_CUH
#define HYDRA_CUDA_MMA_CUH

#include "compat.h"

#if defined(HYDRA_HIP)
/* D = A . B over k_words 4-byte words of k (4: m16n8k16, 8: m16n8k32). */
static inline __device__ void mma_s8_lanes(int d[4], const int a[4], const int b[2], int k_words)
{
    const int lane = threadIdx.x % GPU_WARP, g = lane / 4, t = lane % 4;
    d[0] = d[1] = d[2] = d[3] = 0;
    for (int w = 0; w < k_words; w++) {
        const int hi = w / 4, src = w % 4;
        const int a_lo = gpu_shfl(a[2 * hi], 4 * g + src), a_hi = gpu_shfl(a[2 * hi + 1], 4 * g + src);
        const int b0 = gpu_shfl(b[hi], 4 * (2 * t) + src), b1 = gpu_shfl(b[hi], 4 * (2 * t + 1) + src);
        d[0] = gpu_dp4a(a_lo, b0, d[0]);
        d[1] = gpu_dp4a(a_lo, b1, d[1]);
        d[2] = gpu_dp4a(a_hi, b0, d[2]);
        d[3] = gpu_dp4a(a_hi, b1, d[3]);
    }
}

static inline __device__ void mma_s8_16832(int d[4], const int a[4], const int b[2])
{
    mma_s8_lanes(d, a, b, 8);
}

static inline __device__ void mma_s8_16816(int d[4], int a0, int a1, int b0)
{
    const int a[4] = {a0, a1, 0, 0}, b[2] = {b0, 0};
    mma_s8_lanes(d, a, b, 4);
}

static inline __device__ void cp_async16(void *dst, const void *src)
{
    *(int4 *)dst = *(const int4 *)src;
}

static inline __device__ void cp_async_commit(void) {}
static inline __device__ void cp_async_wait_all(void) {}
#else
/* d = A . B (s8 x s8 -> s32, starting from zero). */
static inline __device__ void mma_s8_16832(int d[4], const int a[4], const int b[2])
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

static inline __device__ void mma_s8_16816(int d[4], int a0, int a1, int b0)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

/* 16 bytes global -> shared without a register round trip; both 16-byte
 * aligned.  Visible after cp_async_wait_all() and a barrier. */
static inline __device__ void cp_async16(void *dst, const void *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

static inline __device__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

static inline __device__ void cp_async_wait_all(void)
{
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}
#endif

#endif
