/*
 * gpu_alloc.c — the device check and hydra's device allocator: every
 * device (and page-locked host) allocation goes through gpu_mem_alloc with
 * a purpose, so the bytes held per purpose are known at any time and a
 * test can check that closing everything gives them all back.
 */
#include "gpu_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static _Atomic uint64_t held[GPU_MEM_COUNT];

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static const char *probe_why;

static void probe(void)
{
    int n = 0;
    gpuError_t e = gpuGetDeviceCount(&n);
    if (e != gpuSuccess)
        probe_why = gpuGetErrorString(e);
    else if (n == 0)
        probe_why = "no CUDA device is present";
    else if ((e = gpuSetDevice(0)) != gpuSuccess)
        probe_why = gpuGetErrorString(e);
}

bool gpu_available(const char **why)
{
    pthread_once(&probe_once, probe);
    if (why != NULL)
        *why = probe_why;
    return probe_why == NULL;
}

hydra_status gpu_fail(gpuError_t e, const char *what)
{
    return hydra_fail(e == gpuErrorMemoryAllocation ? HYDRA_ERR_NOMEM : HYDRA_ERR_IO, "CUDA: %s: %s", what,
                      gpuGetErrorString(e));
}

const char *gpu_purpose_name(gpu_purpose p)
{
    static const char *const names[GPU_MEM_COUNT] = {"weights", "KV cache", "scratch", "pinned host"};
    return p < GPU_MEM_COUNT ? names[p] : "?";
}

hydra_status gpu_mem_alloc(gpu_purpose p, size_t bytes, void **out, const char *what)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 1;
    gpuError_t e = p == GPU_MEM_PINNED ? gpuHostAlloc(out, bytes, gpuHostAllocDefault) : gpuMalloc(out, bytes);
    if (e != gpuSuccess) {
        *out = NULL;
        gpuGetLastError(); /* clear the sticky-free error state of a failed allocation */
        return hydra_fail(HYDRA_ERR_NOMEM, "CUDA: %s: %zu bytes of %s: %s", what, bytes, gpu_purpose_name(p),
                          gpuGetErrorString(e));
    }
    atomic_fetch_add(&held[p], bytes);
    return HYDRA_OK;
}

void gpu_mem_free(gpu_purpose p, void *ptr, size_t bytes)
{
    if (ptr == NULL)
        return;
    if (bytes == 0)
        bytes = 1;
    if (p == GPU_MEM_PINNED)
        gpuFreeHost(ptr);
    else
        gpuFree(ptr);
    atomic_fetch_sub(&held[p], bytes);
}

void gpu_mem_usage(uint64_t bytes[GPU_MEM_COUNT])
{
    for (int p = 0; p < GPU_MEM_COUNT; p++)
        bytes[p] = atomic_load(&held[p]);
}

hydra_status gpu_mem_device(uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (!gpu_available(NULL))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "no CUDA device");
    size_t f = 0, t = 0;
    gpuError_t e = gpuMemGetInfo(&f, &t);
    if (e != gpuSuccess)
        return gpu_fail(e, "memory info");
    *free_bytes = f;
    *total_bytes = t;
    return HYDRA_OK;
}

void gpu_mem_describe(char *buf, size_t cap)
{
    uint64_t b[GPU_MEM_COUNT], f = 0, t = 0;
    gpu_mem_usage(b);
    size_t len = 0;
    for (int p = 0; p < GPU_MEM_COUNT && len < cap; p++)
        len += (size_t)snprintf(buf + len, cap - len, "  %-12s %10.1f MiB\n", gpu_purpose_name((gpu_purpose)p),
                                (double)b[p] / (1 << 20));
    if (len < cap && gpu_mem_device(&f, &t) == HYDRA_OK)
        snprintf(buf + len, cap - len, "  device free %.1f of %.1f MiB\n", (double)f / (1 << 20),
                 (double)t / (1 << 20));
}

/* --- carving one allocation into many buffers */

void carve_add(carve *c, void **slot, size_t bytes)
{
    if (c->n < CARVE_MAX) {
        c->slot[c->n] = slot;
        c->offset[c->n] = c->total;
        c->n++;
    } else {
        c->overflow = true;
    }
    c->total += (bytes + 255) / 256 * 256; /* 256: the kernels' vector loads need far less */
}

hydra_status carve_alloc(carve *c, gpu_purpose p, void **base, const char *what)
{
    if (c->overflow)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: more than %d buffers in one allocation", what, CARVE_MAX);
    hydra_status st = gpu_mem_alloc(p, c->total, base, what);
    if (st != HYDRA_OK)
        return st;
    for (int i = 0; i < c->n; i++)
        *c->slot[i] = (uint8_t *)*base + c->offset[i];
    return HYDRA_OK;
}

hydra_status gpu_copy_probe(int mib, int reps, double *gb_per_s)
{
    *gb_per_s = 0;
    if (!gpu_available(NULL))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "no CUDA device");
    const size_t bytes = (size_t)mib << 20;
    void *buf = NULL;
    hydra_status st = gpu_mem_alloc(GPU_MEM_SCRATCH, 2 * bytes, &buf, "copy probe");
    if (st != HYDRA_OK)
        return st;
    gpuEvent_t a = NULL, b = NULL;
    gpuError_t e = gpuEventCreate(&a);
    if (e == gpuSuccess)
        e = gpuEventCreate(&b);
    if (e == gpuSuccess)
        e = gpuMemset(buf, 1, 2 * bytes);
    for (int r = 0; r <= reps && e == gpuSuccess; r++) { /* the first pass warms up */
        float ms = 0;
        e = gpuEventRecord(a, 0);
        if (e == gpuSuccess)
            e = gpuMemcpyAsync((uint8_t *)buf + bytes, buf, bytes, gpuMemcpyDeviceToDevice, 0);
        if (e == gpuSuccess)
            e = gpuEventRecord(b, 0);
        if (e == gpuSuccess)
            e = gpuEventSynchronize(b);
        if (e == gpuSuccess)
            e = gpuEventElapsedTime(&ms, a, b);
        if (e == gpuSuccess && r > 0 && ms > 0 && 2.0 * bytes / (ms * 1e6) > *gb_per_s)
            *gb_per_s = 2.0 * bytes / (ms * 1e6);
    }
    if (a != NULL)
        gpuEventDestroy(a);
    if (b != NULL)
        gpuEventDestroy(b);
    gpu_mem_free(GPU_MEM_SCRATCH, buf, 2 * bytes);
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "copy probe");
}
