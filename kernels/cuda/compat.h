/*
 * compat.h — the one place that names the CUDA runtime.  Host C files and
 * kernel files use the gpu* names below; a HIP build maps them to hip*
 * here (hipcc compiles the same .cu files), so no other file needs an
 * #ifdef for the vendor.
 *
 * Kernels assume 32-lane warps (GPU_WARP); on AMD that means wave32
 * (RDNA); CDNA's wave64 needs its own reductions and is not handled yet.
 */
#ifndef HYDRA_GPU_COMPAT_H
#define HYDRA_GPU_COMPAT_H

#if defined(HYDRA_HIP)
#include <hip/hip_runtime_api.h>
#define GPU_RT(name) hip##name
#define GPU_ENUM(name) hip##name
#else
#include <cuda_runtime_api.h>
#define GPU_RT(name) cuda##name
#define GPU_ENUM(name) cuda##name
#endif

typedef GPU_RT(Error_t) gpuError_t;
typedef GPU_RT(Stream_t) gpuStream_t;
typedef GPU_RT(Event_t) gpuEvent_t;
typedef GPU_RT(Graph_t) gpuGraph_t;
typedef GPU_RT(GraphExec_t) gpuGraphExec_t;

#define gpuSuccess GPU_ENUM(Success)
#define gpuErrorInvalidValue GPU_ENUM(ErrorInvalidValue)
#define gpuErrorMemoryAllocation GPU_ENUM(ErrorMemoryAllocation)
#define gpuMemcpyHostToDevice GPU_ENUM(MemcpyHostToDevice)
#define gpuMemcpyDeviceToHost GPU_ENUM(MemcpyDeviceToHost)
#define gpuMemcpyDeviceToDevice GPU_ENUM(MemcpyDeviceToDevice)
#define gpuStreamNonBlocking GPU_ENUM(StreamNonBlocking)
#define gpuStreamCaptureModeThreadLocal GPU_ENUM(StreamCaptureModeThreadLocal)
#define gpuHostAllocDefault GPU_ENUM(HostAllocDefault)

#define gpuGetDeviceCount GPU_RT(GetDeviceCount)
#define gpuSetDevice GPU_RT(SetDevice)
#define gpuGetDevice GPU_RT(GetDevice)
#define gpuDeviceGetAttribute GPU_RT(DeviceGetAttribute)
#define gpuDevAttrMultiProcessorCount GPU_ENUM(DevAttrMultiProcessorCount)
#define gpuDevAttrKernelExecTimeout GPU_ENUM(DevAttrKernelExecTimeout)
#define gpuGetErrorString GPU_RT(GetErrorString)
#define gpuGetLastError GPU_RT(GetLastError)
#define gpuMalloc GPU_RT(Malloc)
#define gpuFree GPU_RT(Free)
#define gpuHostAlloc GPU_RT(HostAlloc)
#define gpuHostGetDevicePointer GPU_RT(HostGetDevicePointer)
#define gpuFreeHost GPU_RT(FreeHost)
#define gpuMemGetInfo GPU_RT(MemGetInfo)
#define gpuMemcpy GPU_RT(Memcpy)
#define gpuMemcpyAsync GPU_RT(MemcpyAsync)
#define gpuMemcpy2DAsync GPU_RT(Memcpy2DAsync)
#define gpuMemset GPU_RT(Memset)
#define gpuMemsetAsync GPU_RT(MemsetAsync)
#define gpuStreamCreateWithFlags GPU_RT(StreamCreateWithFlags)
#define gpuStreamDestroy GPU_RT(StreamDestroy)
#define gpuStreamSynchronize GPU_RT(StreamSynchronize)
#define gpuDeviceSynchronize GPU_RT(DeviceSynchronize)
#define gpuEventCreate GPU_RT(EventCreate)
#define gpuEventDestroy GPU_RT(EventDestroy)
#define gpuEventRecord GPU_RT(EventRecord)
#define gpuEventSynchronize GPU_RT(EventSynchronize)
#define gpuEventElapsedTime GPU_RT(EventElapsedTime)
#define gpuStreamBeginCapture GPU_RT(StreamBeginCapture)
#define gpuStreamEndCapture GPU_RT(StreamEndCapture)
#define gpuGraphLaunch GPU_RT(GraphLaunch)
#define gpuGraphDestroy GPU_RT(GraphDestroy)
#define gpuGraphExecDestroy GPU_RT(GraphExecDestroy)
#define gpuGraphGetNodes GPU_RT(GraphGetNodes)

/* Instantiates a captured graph (the two runtimes' signatures differ). */
static inline gpuError_t gpu_graph_instantiate(gpuGraphExec_t *exec, gpuGraph_t graph)
{
#if defined(HYDRA_HIP)
    return hipGraphInstantiate(exec, graph, NULL, NULL, 0);
#else
    return cudaGraphInstantiate(exec, graph, 0);
#endif
}

/* ---- device-side names (only in .cu files) ---- */
#if defined(__CUDACC__) || defined(__HIPCC__)

#define GPU_WARP 32

#if defined(HYDRA_HIP)
#include <hip/hip_fp16.h>
#define gpu_shfl_xor(v, m) __shfl_xor((v), (m))
#define gpu_shfl(v, l) __shfl((v), (l))
#else
#include <cuda_fp16.h>
#include <mma.h>
#define gpu_shfl_xor(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define gpu_shfl(v, l) __shfl_sync(0xffffffffu, (v), (l))
namespace gpu_wmma = nvcuda::wmma;
#endif

/* Signed 8-bit dot product of four lanes, plus c.  The host version lets
 * the block decoders' integer dot products run in host-side checks. */
static inline __host__ __device__ int gpu_dp4a(int a, int b, int c)
{
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#elif defined(__HIP_DEVICE_COMPILE__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
#endif
}

/* IEEE half bits to float, on device and host alike. */
static inline __host__ __device__ float gpu_half_bits_to_float(unsigned short h)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __half2float(__ushort_as_half(h));
#else
    const unsigned sign = (unsigned)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    unsigned bits;
    if (exp == 0x1F)
        bits = sign | 0x7F800000u | (man << 13);
    else if (exp != 0)
        bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0)
        bits = sign;
    else { /* subnormal: normalise */
        int e = -1;
        unsigned m = man;
        do {
            m <<= 1;
            e++;
        } while ((m & 0x400) == 0);
        bits = sign | ((unsigned)(112 - e) << 23) | ((m & 0x3FF) << 13);
    }
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
#endif
}

#endif /* device side */
#endif
