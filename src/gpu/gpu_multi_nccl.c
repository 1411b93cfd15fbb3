/*
 * gpu_multi_nccl.c — the all-reduce of -sm tensor through NCCL, loaded at
 * run time: libhydra has no link dependency on NCCL (docs/DEPENDENCIES.md),
 * so a machine without libnccl.so.2 runs everything but the tensor split,
 * which fails saying so.  The few entry points are resolved with dlsym;
 * their types and the two enum values used (ncclFloat32 = 7, ncclSum = 0)
 * are NCCL's public ABI (nccl.h).
 *
 * One process drives every GPU: one communicator per device from
 * ncclCommInitAll, and each all-reduce is issued for all devices inside
 * one ncclGroupStart/ncclGroupEnd (NCCL's rule for one thread driving
 * several ranks).  NVLink SHARP / multicast stays off: NCCL_NVLS_ENABLE=0
 * is set before the communicators exist, and nothing here calls
 * cuMulticastCreate.
 */
#include "gpu_tensor_p2p.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef struct nccl_comm *nccl_comm_t;
typedef int nccl_result_t; /* ncclSuccess = 0 */
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0, NCCL_MAX_DEV = 16 };

typedef struct gpu_nccl {
    void *lib;
    int n;
    int device[NCCL_MAX_DEV];
    nccl_comm_t comm[NCCL_MAX_DEV];
    nccl_result_t (*init_all)(nccl_comm_t *, int, const int *);
    nccl_result_t (*destroy)(nccl_comm_t);
    nccl_result_t (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, gpuStream_t);
    nccl_result_t (*group_start)(void);
    nccl_result_t (*group_end)(void);
    const char *(*error_string)(nccl_result_t);
} gpu_nccl;

static hydra_status nccl_fail(const gpu_nccl *c, nccl_result_t r, const char *what)
{
    return hydra_fail(HYDRA_ERR_IO, "NCCL: %s: %s", what, c->error_string != NULL ? c->error_string(r) : "error");
}

/* Resolves name into *slot; false when the library lacks it. */
static bool resolve(void *lib, const char *name, void *slot)
{
    void *f = dlsym(lib, name);
    memcpy(slot, &f, sizeof f);
    return f != NULL;
}

static hydra_status load(gpu_nccl *c)
{
    c->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (c->lib == NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "-sm tensor needs NCCL (libnccl.so.2, from the CUDA toolkit or the "
                          "nccl package), which cannot be loaded: %s", dlerror());
    const bool ok = resolve(c->lib, "ncclCommInitAll", &c->init_all) &&
                    resolve(c->lib, "ncclCommDestroy", &c->destroy) &&
                    resolve(c->lib, "ncclAllReduce", &c->all_reduce) &&
                    resolve(c->lib, "ncclGroupStart", &c->group_start) &&
                    resolve(c->lib, "ncclGroupEnd", &c->group_end) &&
                    resolve(c->lib, "ncclGetErrorString", &c->error_string);
    return ok ? HYDRA_OK : hydra_fail(HYDRA_ERR_UNSUPPORTED, "libnccl.so.2 lacks an entry point hydra uses");
}

void gpu_nccl_close(gpu_nccl *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->n; i++)
        if (c->comm[i] != NULL)
            c->destroy(c->comm[i]);
    if (c->lib != NULL)
        dlclose(c->lib);
    free(c);
}

hydra_status gpu_nccl_open(gpu_nccl **out, int n, const int *devices)
{
    *out = NULL;
    if (n < 1 || n > NCCL_MAX_DEV)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "NCCL: %d devices", n);
    gpu_nccl *c = calloc(1, sizeof *c);
    if (c == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "NCCL state");
    /* Multicast objects (NVLS) stay off on every machine hydra runs on. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    hydra_status st = load(c);
    if (st == HYDRA_OK) {
        c->n = n;
        memcpy(c->device, devices, sizeof(int) * (size_t)n);
        const nccl_result_t r = c->init_all(c->comm, n, devices);
        if (r != 0) {
            memset(c->comm, 0, sizeof c->comm);
            st = nccl_fail(c, r, "creating the communicators");
        }
    }
    if (st != HYDRA_OK) {
        gpu_nccl_close(c);
        return st;
    }
    *out = c;
    return HYDRA_OK;
}

hydra_status gpu_nccl_sum(gpu_nccl *c, float *const *buf, size_t count, const gpuStream_t *streams)
{
    nccl_result_t r = c->group_start();
    for (int i = 0; i < c->n && r == 0; i++)
        r = c->all_reduce(buf[i], buf[i], count, NCCL_FLOAT32, NCCL_SUM, c->comm[i], streams[i]);
    const nccl_result_t e = c->group_end();
    if (r == 0)
        r = e;
    return r == 0 ? HYDRA_OK : nccl_fail(c, r, "all-reduce");
}

/* The self-checks of both sums (NCCL's, and gpu_tensor_p2p.c's for
 * decode-sized rows): device i holds count values (i + 1) * (j % 7);
 * after the sum every device must hold n (n + 1) / 2 * (j % 7), in
 * CHECK_ROUNDS eager rounds and as many replays of a graph captured on
 * every device's stream (the peer sum's generations alternate its
 * buffers). */
enum { CHECK_ROUNDS = 3 };

typedef struct check_dev {
    gpuStream_t stream;
    float *buf;
    float *host;
} check_dev;

typedef struct summer {
    int n;
    hydra_status (*sum)(void *ctx, float *const *buf, size_t count, const gpuStream_t *streams);
    void *ctx;
} summer;

static hydra_status nccl_sum_of(void *ctx, float *const *buf, size_t count, const gpuStream_t *streams)
{
    return gpu_nccl_sum(ctx, buf, count, streams);
}

static hydra_status p2p_sum_of(void *ctx, float *const *buf, size_t count, const gpuStream_t *streams)
{
    return gpu_p2p_sum(ctx, buf, count, streams);
}

static hydra_status check_fill(check_dev *d, int i, size_t count)
{
    for (size_t j = 0; j < count; j++)
        d->host[j] = (float)(i + 1) * (float)(j % 7);
    TRY(gpuMemcpyAsync(d->buf, d->host, sizeof(float) * count, gpuMemcpyHostToDevice, d->stream), "check fill");
    return HYDRA_OK;
}

static hydra_status check_read(check_dev *d, int n, size_t count, double *max_err)
{
    TRY(gpuMemcpyAsync(d->host, d->buf, sizeof(float) * count, gpuMemcpyDeviceToHost, d->stream), "check read");
    TRY(gpuStreamSynchronize(d->stream), "check read");
    for (size_t j = 0; j < count; j++) {
        const double want = (double)n * (n + 1) / 2 * (double)(j % 7), err = d->host[j] - want;
        if ((err < 0 ? -err : err) > *max_err)
            *max_err = err < 0 ? -err : err;
    }
    return HYDRA_OK;
}

/* One round: fill, sum (exec NULL: eagerly, else the captured graphs),
 * read back. */
static hydra_status check_round(const summer *s, check_dev *d, size_t count, gpuGraphExec_t *exec, double *max_err)
{
    float *bufs[NCCL_MAX_DEV];
    gpuStream_t streams[NCCL_MAX_DEV];
    for (int i = 0; i < s->n; i++) {
        TRY(gpuSetDevice(i), "check device");
        TRY_ST(check_fill(&d[i], i, count));
        bufs[i] = d[i].buf;
        streams[i] = d[i].stream;
    }
    if (exec == NULL)
        TRY_ST(s->sum(s->ctx, bufs, count, streams));
    for (int i = 0; i < s->n && exec != NULL; i++) {
        TRY(gpuSetDevice(i), "check device");
        TRY(gpuGraphLaunch(exec[i], streams[i]), "replaying the all-reduce");
    }
    for (int i = 0; i < s->n; i++) {
        TRY(gpuSetDevice(i), "check device");
        TRY_ST(check_read(&d[i], s->n, count, max_err));
    }
    return HYDRA_OK;
}

static hydra_status check_capture(const summer *s, check_dev *d, size_t count, gpuGraphExec_t *exec)
{
    float *bufs[NCCL_MAX_DEV];
    gpuStream_t streams[NCCL_MAX_DEV];
    for (int i = 0; i < s->n; i++) {
        bufs[i] = d[i].buf;
        streams[i] = d[i].stream;
        TRY(gpuSetDevice(i), "check device");
        TRY(gpuStreamBeginCapture(streams[i], GPU_ENUM(StreamCaptureModeRelaxed)), "check capture");
    }
    const hydra_status st = s->sum(s->ctx, bufs, count, streams);
    gpuError_t e = gpuSuccess;
    for (int i = 0; i < s->n; i++) {
        gpuGraph_t gr = NULL;
        gpuSetDevice(i);
        gpuError_t ei = gpuStreamEndCapture(streams[i], &gr);
        if (ei == gpuSuccess && st == HYDRA_OK)
            ei = gpu_graph_instantiate(&exec[i], gr);
        if (gr != NULL)
            gpuGraphDestroy(gr);
        e = e != gpuSuccess ? e : ei;
    }
    TRY_ST(st);
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "capturing the all-reduce");
}

static hydra_status check_rounds(const summer *s, check_dev *d, size_t count, double *max_err)
{
    hydra_status st = HYDRA_OK;
    for (int r = 0; r < CHECK_ROUNDS && st == HYDRA_OK; r++)
        st = check_round(s, d, count, NULL, max_err);
    gpuGraphExec_t exec[NCCL_MAX_DEV] = {0};
    if (st == HYDRA_OK)
        st = check_capture(s, d, count, exec);
    for (int r = 0; r < CHECK_ROUNDS && st == HYDRA_OK; r++)
        st = check_round(s, d, count, exec, max_err);
    for (int i = 0; i < s->n; i++)
        if (exec[i] != NULL) {
            gpuSetDevice(i);
            gpuStreamSynchronize(d[i].stream);
            gpuGraphExecDestroy(exec[i]);
        }
    return st;
}

static hydra_status open_summer(summer *s, int n_dev, bool peer, size_t count)
{
    int devices[NCCL_MAX_DEV];
    for (int i = 0; i < n_dev; i++)
        devices[i] = i;
    s->n = n_dev;
    s->sum = peer ? p2p_sum_of : nccl_sum_of;
    if (peer)
        return gpu_p2p_open((gpu_p2p **)&s->ctx, n_dev, devices, (int64_t)count);
    return gpu_nccl_open((gpu_nccl **)&s->ctx, n_dev, devices);
}

hydra_status gpu_multi_allreduce_check(int n_dev, size_t count, bool peer, double *max_err)
{
    *max_err = 0;
    if (n_dev < 2 || n_dev > NCCL_MAX_DEV || gpu_device_count() < n_dev)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "all-reduce check: %d devices asked, %d present", n_dev,
                          gpu_device_count());
    summer s = {0};
    TRY_ST(open_summer(&s, n_dev, peer, count));
    check_dev d[NCCL_MAX_DEV] = {0};
    hydra_status st = HYDRA_OK;
    for (int i = 0; i < n_dev && st == HYDRA_OK; i++) {
        gpuSetDevice(i);
        gpuError_t e = gpuStreamCreateWithFlags(&d[i].stream, gpuStreamNonBlocking);
        st = e == gpuSuccess ? gpu_mem_alloc(GPU_MEM_SCRATCH, sizeof(float) * count, (void **)&d[i].buf, "check")
                             : gpu_fail(e, "check stream");
        if (st == HYDRA_OK && (d[i].host = malloc(sizeof(float) * count)) == NULL)
            st = hydra_fail(HYDRA_ERR_NOMEM, "check buffer");
    }
    if (st == HYDRA_OK)
        st = check_rounds(&s, d, count, max_err);
    for (int i = 0; i < n_dev; i++) {
        gpuSetDevice(i);
        if (d[i].stream != NULL) {
            gpuStreamSynchronize(d[i].stream);
            gpuStreamDestroy(d[i].stream);
        }
        gpu_mem_free(GPU_MEM_SCRATCH, d[i].buf, sizeof(float) * count);
        free(d[i].host);
    }
    if (peer)
        gpu_p2p_close(s.ctx);
    else
        gpu_nccl_close(s.ctx);
    return st;
}
