/*
 * common.cuh — what every kernel file shares: warp reductions, launch
 * error reporting, the float weight formats, and the type dispatch that
 * turns a runtime ggml type id into a template instance.
 */
#ifndef HYDRA_CUDA_COMMON_CUH
#define HYDRA_CUDA_COMMON_CUH

#include "kernels.h"
#include "quant.cuh"

#include <math.h>

static inline __device__ float warp_sum(float v)
{
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
        v += gpu_shfl_xor(v, m);
    return v;
}

static inline __device__ float warp_max(float v)
{
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
        v = fmaxf(v, gpu_shfl_xor(v, m));
    return v;
}

/* The exponential half of a softmax by one warp: out[i] = e^(x[i] - max)
 * for i < n (in place when out is x), their sum added up in Acc (double
 * where the sum must not depend on float rounding, float for attention's
 * partials) and reduced over the warp; returns the max, both on every lane. */
template <typename Acc>
static inline __device__ float warp_exp_shifted(const float *x, float *out, int n, Acc *sum)
{
    const int lane = threadIdx.x % GPU_WARP;
    float mx = -INFINITY;
    for (int i = lane; i < n; i += GPU_WARP)
        mx = fmaxf(mx, x[i]);
    mx = warp_max(mx);
    Acc s = 0;
    for (int i = lane; i < n; i += GPU_WARP) {
        const float e = expf(x[i] - mx);
        out[i] = e;
        s += e;
    }
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
        s += gpu_shfl_xor(s, m);
    *sum = s;
    return mx;
}

/* The device's global clock in ns (%globaltimer): one count for every SM,
 * so a wait that gives up after a time and stamps taken by different
 * blocks compare. */
static inline __device__ unsigned long long gpu_clock_ns(void)
{
#if defined(HYDRA_HIP)
    return wall_clock64();
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}

/* Reads one word of every 32-byte line of a launch's parameter p; called
 * before gpu_pdl_wait().  Kernel parameters live in a constant bank, a
 * copy for each launch, so an SM's first read of a line misses the
 * constant cache (Nsight's "IMC miss" stalls), and a field first read
 * behind the wait puts that miss on the step's chain of launches; read
 * here, the misses overlap the previous launch.  tg128 on the H200 578.3
 * -> 584.9 t/s for the decode kernels, and a gk_attn 16 bytes larger had
 * cost ~2% without it (docs/PERFORMANCE.md, "CUDA decode, session 19"). */
template <class T> static __device__ __forceinline__ void gpu_params_warm(const T &p)
{
    const uint32_t *w = reinterpret_cast<const uint32_t *>(&p);
    uint32_t seen = 0;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 4); i += 8)
        seen ^= w[i];
    asm volatile("" ::"r"(seen)); /* the loads happen here, not where a field is used */
}

/* Programmatic dependent launch (Hopper and later): a kernel may be
 * scheduled while the one before it in the stream is still finishing;
 * its first statement waits, with gpu_pdl_wait(), until that kernel has
 * completed and its writes are visible.  Every kernel here starts with the
 * wait, before it reads or writes anything, so stream order still holds;
 * what is saved is the launch gap between kernels of a step.  (One
 * exception: the experts' launch that takes its routes by their words,
 * kernels.h's gk_route_word, starts on those words and waits only before
 * its own trigger.) */
static inline __device__ void gpu_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
}

/* A load that later loads of the thread (and, after a barrier, of its
 * block) cannot overtake, and a store that no earlier access of the
 * thread can pass once fenced: the release/acquire pair of a word that
 * hands data from one running launch to another (kernels.h's
 * gk_route_word).  fence.acq_rel rather than __threadfence(), which is
 * fence.sc: no total order is needed, only this pair's. */
/* A route word (kernels.h's gk_route_word): the step's seq in the top
 * GK_RW_SEQ_BITS bits, the expert in the next GK_RW_EXPERT_BITS, the FFN
 * norm's scale (float bits) in the low 32, so that the experts' blocks
 * need no load after the poll.  seq is compared modulo 2^GK_RW_SEQ_BITS:
 * a decode step finds its layer's words as the previous decode step or
 * gpu_step_launch's reset left them, never with its own tag. */
static_assert(GK_TAIL_MAX_EXPERTS <= 1 << GK_RW_EXPERT_BITS, "an expert id fits its field");

static inline __device__ unsigned long long gk_route_word_of(unsigned seq, int expert, float scale)
{
    const unsigned long long tag = seq & GK_RW_SEQ_MASK;
    return tag << (64 - GK_RW_SEQ_BITS) | (unsigned long long)(unsigned)expert << 32 | __float_as_uint(scale);
}

static inline __device__ bool gk_route_word_is(unsigned long long w, unsigned seq)
{
    return (unsigned)(w >> (64 - GK_RW_SEQ_BITS)) == (seq & GK_RW_SEQ_MASK);
}

static inline __device__ int gk_route_word_expert(unsigned long long w)
{
    return (int)((w >> 32) & ((1u << GK_RW_EXPERT_BITS) - 1));
}

static inline __device__ float gk_route_word_scale(unsigned long long w)
{
    return __uint_as_float((unsigned)w);
}

static inline __device__ unsigned long long gpu_ld_acquire_u64(const unsigned long long *p)
{
    unsigned long long v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
#else
    v = *(const volatile unsigned long long *)p;
    __threadfence();
#endif
    return v;
}

static inline __device__ unsigned gpu_ld_acquire_u32(const unsigned *p)
{
    unsigned v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#else
    v = *(const volatile unsigned *)p;
    __threadfence();
#endif
    return v;
}

/* An atomic add that releases what the thread (and, after a barrier, its
 * block) wrote before it and acquires what the adds before it released:
 * a count of blocks done without a fence on either side. */
static inline __device__ unsigned gpu_atom_add_acq_rel_u32(unsigned *p, unsigned v)
{
    unsigned old;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
#else
    __threadfence();
    old = atomicAdd(p, v);
    __threadfence();
#endif
    return old;
}

static inline __device__ void gpu_fence_acq_rel(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
    __threadfence();
#endif
}

/* Lets the next kernel of the stream be scheduled once every block of this
 * one has called it (or exited): its blocks take the SMs this launch no
 * longer fills and stop at their gpu_pdl_wait(), which still waits for
 * this kernel's completion and writes, so where the call sits changes
 * timing only.  The decode kernels call it late, when their weight loads
 * are consumed and only reductions and stores are left: the next launch's
 * dispatch then overlaps this one's tail.  (Called right after the wait,
 * it made decode slower on the H200, the waiting blocks holding SM slots
 * the launch still needed: docs/PERFORMANCE.md, "Session 4: decode".)
 * Two launches call it at their start instead, each measured alone
 * (docs/PERFORMANCE.md, "CUDA decode, session 20"): the one-token Q/K/V
 * launch, whose 1,280 blocks fill every SM in one wave, so the attention's
 * 32 blocks land on the SMs its early rows free and do their pre-wait part
 * (cache rows, rope angles) inside its tail, where the grid's dispatch
 * otherwise began ~2 us after its last block (tg128 +1.7%); and the
 * attention output launch, whose successor (the experts' launch) then
 * starts polling its route words sooner (+0.2-0.5%).  The same at the start of
 * the attention, the combine or the experts' launch lost 0.4-2.7%.  Safe
 * wherever the successor reads nothing before its own wait but data that
 * no launch of the step writes: the launch before this one has triggered,
 * so it and everything before it have started, and this launch cannot
 * complete before its own wait has seen its predecessor complete. */
static inline __device__ void gpu_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

/* The warp asks L2 for every 128-byte line of [p, p + bytes), lane l for
 * lines l, l + 32, ... of the run.  prefetch.global.L2 is a hint: it holds
 * no register, returns nothing and cannot change a value that a load reads
 * (L2 is where every SM's global accesses meet), so it may stand before
 * gpu_pdl_wait() where the address is known there: a kernel's static
 * weights, or a matrix picked by data that is final before the launch
 * starts.  The dependent launch's blocks, scheduled at the previous
 * launch's gpu_pdl_trigger(), then have their DRAM latency overlap that
 * launch's tail.  It paid only where that tail is long: the Q/K/V launch
 * after the combine's norm, tg128 +0.5% on the H200; before the wait in
 * the experts' down launch (-2.6%) and in the attention output + router
 * launch (-1.7%) it cost more than it saved (docs/PERFORMANCE.md, "CUDA
 * decode, session 12: weights in L2 before the PDL wait"). */
static inline __device__ void warp_prefetch_l2(const void *p, size_t bytes)
{
#if defined(HYDRA_HIP)
    (void)p, (void)bytes;
#else
    enum { LINE = 128 };
    const uintptr_t end = (uintptr_t)p + bytes;
    for (uintptr_t line = ((uintptr_t)p & ~(uintptr_t)(LINE - 1)) + (uintptr_t)LINE * (threadIdx.x % GPU_WARP);
         line < end; line += (uintptr_t)LINE * GPU_WARP)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
#endif
}

/* Whether device 0 runs programmatic dependent launches (compute
 * capability 9.0 or later); asked once. */
static inline bool gpu_pdl_supported(void)
{
    static int major = -1;
    if (major < 0 && gpuDeviceGetAttribute(&major, GPU_ENUM(DevAttrComputeCapabilityMajor), 0) != gpuSuccess)
        major = 0;
    return major >= 9;
}

/* Launches kernel(args) on stream s, with programmatic dependent launch
 * where the device has it (not on the legacy default stream, which the
 * op checks use); returns 0 or the launch's error. */
template <typename... Params, typename... Args>
static inline int gk_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, gpuStream_t s,
                            Args... args)
{
#if defined(HYDRA_HIP)
    hipLaunchKernelGGL(kernel, grid, block, smem, s, args...);
    return (int)gpuGetLastError();
#else
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = s != 0 && gpu_pdl_supported() ? 1 : 0;
    return (int)cudaLaunchKernelEx(&cfg, kernel, args...);
#endif
}

/* The most blocks of kernel (threads a block, smem bytes of dynamic
 * shared memory) that the current device holds resident at once: the grid
 * of a persistent launch that walks its work in tiles.  0 on error.  A
 * host-side query of the runtime (no synchronisation): a captured graph
 * asks it once, at capture; with graphs off, every launch asks again. */
template <typename Kernel> static inline int gk_coresident_blocks(Kernel kernel, int threads, size_t smem)
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

static inline __device__ float silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* The matrix of expert e of a stack. */
static inline __device__ const uint8_t *expert_matrix(const gk_mat &w, int e)
{
    return w.expert_data != NULL ? w.expert_data[e] : w.data + (size_t)e * w.mat_bytes;
}

/* Float formats as chunks of 32 values. */
static inline __host__ __device__ float bf16_bits_to_float(uint16_t h)
{
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

/* Values 32c .. 32c + 31 of a row of any supported type, as floats. */
template <int T> static inline __device__ void chunk_floats(const uint8_t *row, int c, float *out)
{
    if constexpr (T == GQ_F32) {
        const float4 *p = (const float4 *)(row + (size_t)c * 128);
        for (int k = 0; k < 8; k++) {
            const float4 v = p[k];
            out[4 * k] = v.x;
            out[4 * k + 1] = v.y;
            out[4 * k + 2] = v.z;
            out[4 * k + 3] = v.w;
        }
    } else if constexpr (T == GQ_F16 || T == GQ_BF16) {
        const uint32_t *p = (const uint32_t *)(row + (size_t)c * 64);
        for (int k = 0; k < 16; k++) {
            const uint32_t v = p[k];
            if constexpr (T == GQ_F16) {
                out[2 * k] = gpu_half_bits_to_float((unsigned short)(v & 0xFFFF));
                out[2 * k + 1] = gpu_half_bits_to_float((unsigned short)(v >> 16));
            } else {
                out[2 * k] = bf16_bits_to_float((uint16_t)(v & 0xFFFF));
                out[2 * k + 1] = bf16_bits_to_float((uint16_t)(v >> 16));
            }
        }
    } else {
        gq_chunk ch;
        gq_decode<T>(row, c, &ch);
        for (int i = 0; i < 32; i++)
            out[i] = gq_value(&ch, i);
    }
}

/* Two consecutive values (i even) of a float-format row. */
template <int T> static inline __device__ float2 float_pair(const uint8_t *row, int64_t i)
{
    if constexpr (T == GQ_F32)
        return *(const float2 *)(row + 4 * i);
    const uint32_t v = *(const uint32_t *)(row + 2 * i);
    if constexpr (T == GQ_F16)
        return make_float2(gpu_half_bits_to_float((unsigned short)(v & 0xFFFF)),
                           gpu_half_bits_to_float((unsigned short)(v >> 16)));
    return make_float2(bf16_bits_to_float((uint16_t)(v & 0xFFFF)), bf16_bits_to_float((uint16_t)(v >> 16)));
}

#define GK_FOR_EACH_FLOAT(X) X(GQ_F32) X(GQ_F16) X(GQ_BF16)

static inline bool gk_is_float_type(uint32_t t)
{
    return t == GQ_F32 || t == GQ_F16 || t == GQ_BF16;
}

static inline bool gk_is_quant_type(uint32_t t)
{
    switch (t) {
#define GK_CASE_(T) case T:
        GQ_FOR_EACH_QUANT(GK_CASE_)
#undef GK_CASE_
        return true;
    default:
        return false;
    }
}

#endif
