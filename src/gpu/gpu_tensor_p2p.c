/*
 * gpu_tensor_p2p.c — -sm tensor's all-reduce for decode-sized rows
 * through peer access (kernels/cuda/allreduce.cu): one kernel per device,
 * no NCCL call: each device writes its rows once, raises a flag and
 * reads its peers' rows over NVLink.  On the 2x H200 it made tg128 228 t/s
 * against 212 with NCCL's all-reduce of the same 8 KiB (3.5 us less per
 * call, 96 calls per token; docs/PERFORMANCE.md "Multi-GPU, session 5").  Needs peer access between every pair of devices; without it
 * (or for more rows than it was sized for) the caller keeps NCCL.
 */
#include "gpu_tensor_p2p.h"

#include "../../kernels/cuda/allreduce.h"

#include <stdlib.h>
#include <string.h>

/* A peer that has not raised its flag by then is lost (a failed step on
 * another device); the step fails instead of hanging.  SM clock cycles:
 * about 2 s at the H200's 1.98 GHz, longer at lower clocks. */
static const unsigned long long P2P_TIMEOUT_CYCLES = 4000000000ull;

struct gpu_p2p {
    int n;
    int device[GK_AR_MAX_DEV];
    void *base[GK_AR_MAX_DEV];   /* per device: publish buffers, flag, generation, error */
    size_t bytes;
    gk_ar ar[GK_AR_MAX_DEV];     /* per device, count set per call */
    int32_t *err_host;           /* pinned: each device's error word, copied back by gpu_p2p_fetch */
};

static hydra_status enable_all_peers(int n, const int *devices)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int can = 0;
            if (i == j)
                continue;
            if (GPU_RT(DeviceCanAccessPeer)(&can, devices[i], devices[j]) != gpuSuccess || !can)
                return hydra_fail(HYDRA_ERR_UNSUPPORTED, "-sm tensor: no peer access from device %d to %d",
                                  devices[i], devices[j]);
            TRY(gpuSetDevice(devices[i]), "selecting a device");
            const gpuError_t e = GPU_RT(DeviceEnablePeerAccess)(devices[j], 0);
            if (e == GPU_ENUM(ErrorPeerAccessAlreadyEnabled))
                gpuGetLastError(); /* enabled earlier: clear the sticky error */
            else if (e != gpuSuccess)
                return gpu_fail(e, "enabling peer access between devices");
        }
    return HYDRA_OK;
}

/* Device i's buffers; every device's gk_ar gets their addresses. */
static hydra_status alloc_device(gpu_p2p *p, int i, int64_t count_max)
{
    carve c = {0};
    float *pub = NULL;
    unsigned *flag = NULL, *gen = NULL;
    int32_t *err = NULL;
    CARVE(&c, pub, sizeof(float) * 2 * (size_t)count_max);
    CARVE(&c, flag, sizeof(unsigned));
    CARVE(&c, gen, sizeof(unsigned));
    CARVE(&c, err, sizeof(int32_t));
    TRY(gpuSetDevice(p->device[i]), "selecting a device");
    TRY_ST(carve_alloc(&c, GPU_MEM_SCRATCH, &p->base[i], "-sm tensor: peer sum buffers"));
    p->bytes = c.total;
    TRY(gpuMemset(p->base[i], 0, c.total), "zeroing the peer sum buffers");
    for (int k = 0; k < p->n; k++) {
        p->ar[k].pub[i] = pub;
        p->ar[k].flag[i] = flag;
    }
    p->ar[i].count_max = count_max;
    p->ar[i].rank = i;
    p->ar[i].n_dev = p->n;
    p->ar[i].gen = gen;
    p->ar[i].err = err;
    p->ar[i].timeout_cycles = P2P_TIMEOUT_CYCLES;
    return HYDRA_OK;
}

hydra_status gpu_p2p_open(gpu_p2p **out, int n, const int *devices, int64_t count_max)
{
    *out = NULL;
    if (n < 2 || n > GK_AR_MAX_DEV || count_max % 4 != 0)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "-sm tensor: peer sums for %d devices of %lld floats", n,
                          (long long)count_max);
    TRY_ST(enable_all_peers(n, devices));
    gpu_p2p *p = calloc(1, sizeof *p);
    if (p == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor: peer sums");
    p->n = n;
    memcpy(p->device, devices, sizeof(int) * (size_t)n);
    hydra_status st = gpu_mem_alloc(GPU_MEM_PINNED, sizeof(int32_t) * (size_t)n, (void **)&p->err_host,
                                    "-sm tensor: peer sum errors");
    for (int i = 0; i < n && st == HYDRA_OK; i++)
        st = alloc_device(p, i, count_max);
    if (st == HYDRA_OK)
        memset(p->err_host, 0, sizeof(int32_t) * (size_t)n);
    if (st != HYDRA_OK) {
        gpu_p2p_close(p);
        return st;
    }
    *out = p;
    return HYDRA_OK;
}

void gpu_p2p_close(gpu_p2p *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->n; i++)
        if (p->base[i] != NULL) {
            gpuSetDevice(p->device[i]);
            gpu_mem_free(GPU_MEM_SCRATCH, p->base[i], p->bytes);
        }
    gpu_mem_free(GPU_MEM_PINNED, p->err_host, sizeof(int32_t) * (size_t)p->n);
    free(p);
}

bool gpu_p2p_fits(const gpu_p2p *p, size_t count)
{
    return p != NULL && count % 4 == 0 && (int64_t)count <= p->ar[0].count_max;
}

hydra_status gpu_p2p_sum(gpu_p2p *p, float *const *buf, size_t count, const gpuStream_t *streams)
{
    for (int i = 0; i < p->n; i++) {
        gk_ar a = p->ar[i];
        a.x = buf[i];
        a.count = (int64_t)count;
        TRY(gpuSetDevice(p->device[i]), "selecting a device");
        TRY(gk_allreduce_p2p(streams[i], &a), "peer sum");
    }
    return HYDRA_OK;
}

hydra_status gpu_p2p_fetch(gpu_p2p *p, int i, gpuStream_t stream)
{
    TRY(gpuMemcpyAsync(&p->err_host[i], p->ar[i].err, sizeof(int32_t), gpuMemcpyDeviceToHost, stream),
        "reading the peer sum's error word");
    return HYDRA_OK;
}

hydra_status gpu_p2p_check(const gpu_p2p *p)
{
    for (int i = 0; i < p->n; i++)
        if (p->err_host[i] != 0)
            return hydra_fail(HYDRA_ERR_IO, "-sm tensor: device %d waited %llu clock cycles for a peer's rows "
                              "in vain (a step failed on another device); the session cannot continue",
                              p->device[i], P2P_TIMEOUT_CYCLES);
    return HYDRA_OK;
}
