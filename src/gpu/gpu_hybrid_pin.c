/*
 * gpu_hybrid_pin.c — the pinned copies of the expert stacks (hybrid
 * decode, gpu_hybrid_internal.h), and where a byte of the mapping is read
 * from through them.
 */
#include "gpu_hybrid_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The region holding a byte of the mapping, or NULL. */
static const hy_region *region_of(const gpu_hybrid *hy, const uint8_t *host)
{
    for (int i = 0; i < hy->n_region && host != NULL; i++)
        if (host >= hy->region[i].host && host < hy->region[i].host + hy->region[i].bytes)
            return &hy->region[i];
    return NULL;
}

/* The device address of a byte of the mapping through its pinned copy, or
 * NULL when the stacks are not pinned. */
const uint8_t *hy_mapped_of(const gpu_hybrid *hy, const uint8_t *host)
{
    const hy_region *r = region_of(hy, host);
    return r != NULL ? r->dev + (host - r->host) : NULL;
}

/* Where copies to the device read a byte of the mapping from: its pinned
 * copy (a true asynchronous DMA) when there is one. */
const uint8_t *hy_copy_src(const gpu_hybrid *hy, const uint8_t *host)
{
    const hy_region *r = region_of(hy, host);
    return r != NULL ? r->copy + (host - r->host) : host;
}

/* --- pinned copies of the expert stacks.  Registering the mapping itself
 * (cudaHostRegister, read-only) worked on the small test files but had not
 * returned after 150 s for the 16.3 GiB of expert stacks of the benchmark
 * file (H200, 2026-11-29), so the stacks are copied once into page-locked
 * memory of our own: the GPU reads missed experts from it in prefill, and
 * admissions copy from it without the driver's staging. */

static int cmp_region(const void *a, const void *b)
{
    const hy_region *x = a, *y = b;
    return x->host < y->host ? -1 : x->host > y->host;
}

void hy_unpin_all(gpu_hybrid *hy)
{
    for (int i = 0; i < hy->n_region; i++)
        gpu_mem_free(GPU_MEM_PINNED, hy->region[i].copy, hy->region[i].bytes);
    hy->n_region = 0;
    hy->registered = false;
}

/* Page-aligned ranges covering every expert stack (or its experts
 * [pin_exp0, pin_exp1)), merged where they touch (two stacks may share a
 * page). */
static int collect_regions(gpu_hybrid *hy, hy_region *r)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    int n = 0;
    for (int l = 0; l < hy->n_layer && n + N_PARTS <= MAX_REGIONS; l++)
        for (int p = 0; p < N_PARTS; p++) {
            const wtensor *t = &hy->w->layer[l].w[part_role[p]];
            if (t->data == NULL || !is_moe(hy, l))
                continue;
            const bool some = hy->o.pin_exp1 > hy->o.pin_exp0 && hy->o.pin_exp1 <= (int)t->ne[2];
            const size_t e0 = some ? (size_t)hy->o.pin_exp0 : 0, e1 = some ? (size_t)hy->o.pin_exp1 : (size_t)t->ne[2];
            const uintptr_t a = ((uintptr_t)t->data + t->mat_bytes * e0) / page * page;
            const uintptr_t b = ((uintptr_t)t->data + t->mat_bytes * e1 + page - 1) / page * page;
            r[n++] = (hy_region){(uint8_t *)a, NULL, NULL, b - a};
        }
    qsort(r, (size_t)n, sizeof *r, cmp_region);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && r[i].host <= r[m - 1].host + r[m - 1].bytes) {
            uint8_t *end = r[i].host + r[i].bytes;
            if (end > r[m - 1].host + r[m - 1].bytes)
                r[m - 1].bytes = (size_t)(end - r[m - 1].host);
        } else {
            r[m++] = r[i];
        }
    }
    return m;
}

typedef struct copy_job {
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes;
} copy_job;

static void copy_task(void *ctx, int idx, int n_threads)
{
    const copy_job *j = ctx;
    const size_t per = (j->bytes / (size_t)n_threads + 4095) / 4096 * 4096;
    const size_t a = per * (size_t)idx, b = a + per < j->bytes ? a + per : j->bytes;
    if (a < b)
        memcpy(j->dst + a, j->src + a, b - a);
}

void hy_pin_experts(gpu_hybrid *hy)
{
    hy->region = calloc(MAX_REGIONS, sizeof *hy->region);
    if (hy->region == NULL)
        return;
    const int n = collect_regions(hy, hy->region);
    const uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        hy_region *r = &hy->region[i];
        void *copy = NULL, *dev = NULL;
        hydra_status st = gpu_mem_alloc(GPU_MEM_PINNED, r->bytes, &copy, "pinned expert stacks");
        gpuError_t e = st == HYDRA_OK ? GPU_RT(HostGetDevicePointer)(&dev, copy, 0) : gpuSuccess;
        if (st != HYDRA_OK || e != gpuSuccess) {
            if (hy->o.verbose)
                fprintf(stderr, "hybrid: expert stacks not pinned (%s): prefill misses on the CPU, admissions "
                        "staged by the driver\n", st != HYDRA_OK ? hydra_last_error() : gpuGetErrorString(e));
            gpuGetLastError();
            if (copy != NULL)
                gpu_mem_free(GPU_MEM_PINNED, copy, r->bytes);
            hy_unpin_all(hy);
            return;
        }
        r->copy = copy;
        r->dev = dev;
        hy->n_region = i + 1;
        copy_job j = {r->copy, r->host, r->bytes};
        pool_run(hy->pool, copy_task, &j);
    }
    hy->registered = true;
    hy->c.register_ms = (double)(now_ns() - t0) / 1e6;
}
