/*
 * bench_cuda.c — hydra-bench --cuda: the whole model on the CUDA backend,
 * in llama-bench's conventions (ppN: N random tokens in one batch from an
 * empty context; tgN: N tokens decoded one at a time from an empty
 * context, through hydra_session_decode as hydra-run decodes, so the
 * logits land in the session's page-locked row in one copy (the hybrid
 * and kernel-split loops pass gpu_forward that same row); t/s as mean ± sample standard deviation over -r repetitions
 * after one untimed warm-up, which also captures the CUDA graphs), plus
 * what says how far from the hardware it is:
 *   - a device-to-device copy probe in the same process (bytes read plus
 *     written per second), and tg's weight bytes per token x t/s against it;
 *   - where the memory went (weights, KV cache, scratch);
 *   - a prefill and the decode step split into kernels, timed with events
 *     between launches (graphs off for that part, so launch gaps count):
 *     --split N decoded tokens (0: none), after a prompt of -p tokens (64
 *     with -p 0); -p 0 -n 0 --split N prints the split alone.
 *
 *   hydra-bench --cuda -m FILE [-p 512] [-n 128] [-r 3] [--no-graphs] [--split N]
 *               [--hybrid F1,F2,.. [--cpu-threads N] [--cpu-pin] [--admit MIB] [--no-stream-prefill]
 *                [--handoff-flags] [--hybrid-only]] [-sm none|layer|tensor] [-ts A,B,..] [--main-gpu I]
 *
 * --hybrid: hybrid decode (issue 10) instead, one session per fraction of
 * each MoE layer's experts resident in the VRAM slab: pp and tg as above
 * (the warm-up also lets the dynamic slab learn), then the decode hit rate,
 * the hand-off p50/p99, the CPU pass and its exposed part per MoE layer,
 * host->device bytes per decoded token and admissions over the timed tg
 * runs.  --admit: the admission bus budget in MiB per token of a step (0:
 * static slab); --cpu-threads: threads of the CPU pass; --cpu-pin: pin
 * them to CPUs, one per physical core first; --handoff-flags:
 * the CPU side answers mapped flags from a spinning thread instead of graph
 * host nodes; --hybrid-only: skip the all-VRAM session.
 */
#include "bench_cuda.h"

#include "gpu/gpu.h"
#include "hydra.h"
#include "quant.h"
#include "split.h"
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_REPS = 100, PROBE_MIB = 2048 };

enum { MAX_FRACTIONS = 8 };

typedef struct cuda_opts {
    const char *model;
    int prompt, gen, reps, split;
    bool graphs;
    int n_fractions, cpu_threads;
    double fraction[MAX_FRACTIONS], admit_mib;
    bool stream_prefill, handoff_flags, hybrid_only, cpu_pin;
    gpu_split gpus; /* -sm, -ts, --main-gpu (docs/MULTIGPU.md) */
} cuda_opts;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Weight bytes a decoded token reads: every bound matrix whole, except the
 * experts (n_used of n_expert) and the embedding (one row, unless the
 * output projection reads the same matrix). */
static double token_bytes(const model_weights *w)
{
    double bytes = 0;
    for (int r = 0; r < W_COUNT; r++) {
        const wtensor *t = &w->global[r];
        if (t->data == NULL || (r == W_OUTPUT && t->data == w->global[W_TOKEN_EMBD].data))
            continue;
        const bool tied = r == W_TOKEN_EMBD && w->global[W_OUTPUT].data == t->data;
        bytes += r == W_TOKEN_EMBD && !tied ? (double)t->row_bytes : (double)t->mat_bytes * (double)t->ne[2];
    }
    for (uint32_t l = 0; l < w->hp.n_layer; l++)
        for (int r = 0; r < W_COUNT; r++) {
            const wtensor *t = &w->layer[l].w[r];
            if (t->data == NULL)
                continue;
            const bool expert = r == W_MOE_GATE || r == W_MOE_UP || r == W_MOE_DOWN;
            bytes += (double)t->mat_bytes * (expert ? (double)w->hp.n_expert_used : (double)t->ne[2]);
        }
    return bytes;
}

static void random_tokens(int32_t *tok, int n, uint32_t n_vocab)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int32_t)(s % n_vocab);
    }
}

/* One run from an empty context: tokens per second, -1 on failure. */
static double run_once(hydra_session *s, const int32_t *tokens, int n, bool gen)
{
    hydra_session_clear(s);
    const double t0 = now_s();
    hydra_status st = HYDRA_OK;
    if (gen)
        for (int i = 0; i < n && st == HYDRA_OK; i++)
            st = hydra_session_decode(s, tokens[i]);
    else
        st = hydra_session_eval(s, tokens, (size_t)n, NULL);
    const double dt = now_s() - t0;
    if (st != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s\n", hydra_last_error());
        return -1;
    }
    return n / dt;
}

static void mean_sd(const double *v, int n, double *mean, double *sd)
{
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++)
        ss += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
}

static bool run_test(hydra_session *s, const int32_t *tokens, int n, bool gen, const cuda_opts *o, const char *desc,
                     double gib, double params_b, double tok_bytes, double probe)
{
    double tps[MAX_REPS];
    if (run_once(s, tokens, n, gen) < 0)
        return false;
    hydra_graph_stats warm, done; /* a steady state captures nothing after the warm-up */
    hydra_session_graph_stats(s, &warm);
    for (int r = 0; r < o->reps; r++)
        if ((tps[r] = run_once(s, tokens, n, gen)) < 0)
            return false;
    hydra_session_graph_stats(s, &done);
    fprintf(stderr, "%s%d: %llu CUDA graphs captured after the warm-up, %llu steps replayed\n", gen ? "tg" : "pp", n,
            (unsigned long long)(done.captures - warm.captures), (unsigned long long)(done.replays - warm.replays));
    double mean, sd;
    mean_sd(tps, o->reps, &mean, &sd);
    char extra[96] = "| - | - |";
    if (gen)
        snprintf(extra, sizeof extra, "| %.0f | %.1f%% |", tok_bytes * mean / 1e9, 100.0 * tok_bytes * mean / 1e9 / probe);
    static const char *const sm[] = {"", " -sm layer", " -sm tensor"};
    printf("| %s | %.2f GiB | %.2f B | CUDA%s%s | 99 | %s%d | %.2f ± %.2f %s\n", desc, gib, params_b,
           o->graphs ? "" : " (no graphs)", sm[o->gpus.mode], gen ? "tg" : "pp", n, mean, sd, extra);
    fflush(stdout);
    return true;
}

/* Prefill and decode split into kernels: a profiling session (graphs off,
 * events between launches, so launch gaps count), one prefill of the
 * prompt, then o->split decoded tokens. */
static int kernel_split(const hydra_model *m, const cuda_opts *o)
{
    model_weights w;
    if (weights_bind(&w, m) != HYDRA_OK)
        return 1;
    const int prompt = o->prompt > 0 ? o->prompt : 64;
    gpu_session *g = NULL;
    const gpu_options go = {.n_ctx = prompt + o->split + 1, .n_batch = prompt, .kv_type = QT_F16, .profile = true};
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)prompt);
    hydra_status st = tokens ? gpu_session_create(&g, &w, &go) : HYDRA_ERR_NOMEM;
    float *logits = st == HYDRA_OK ? gpu_session_logits_row(g) : NULL; /* where a session's decode lands */
    static char buf[8192];
    if (st == HYDRA_OK) {
        random_tokens(tokens, prompt, w.hp.n_vocab);
        st = gpu_forward(g, 0, tokens, prompt, false, logits); /* loads the kernels */
    }
    if (st == HYDRA_OK) {
        gpu_profile_reset(g);
        const double t0 = now_s();
        st = gpu_forward(g, 0, tokens, prompt, false, logits);
        gpu_profile_describe(g, buf, sizeof buf);
        printf("\nprefill of %d tokens split into kernels (events between launches, graphs off; wall %.2f ms):\n\n%s",
               prompt, 1e3 * (now_s() - t0), buf);
        gpu_profile_reset(g);
    }
    const double t0 = now_s();
    for (int i = 0; i < o->split && st == HYDRA_OK; i++)
        st = gpu_forward(g, prompt + i, &tokens[i % prompt], 1, false, logits);
    const double dt = now_s() - t0;
    if (st == HYDRA_OK) {
        gpu_profile_describe(g, buf, sizeof buf);
        printf("\ndecode step split into kernels (%d tokens after the prompt, events between launches, graphs "
               "off; wall %.1f us per token):\n\n%s", o->split, 1e6 * dt / o->split, buf);
    } else {
        fprintf(stderr, "hydra-bench: kernel split: %s\n", hydra_last_error());
    }
    gpu_session_free(g);
    weights_free(&w);
    free(tokens);
    return st == HYDRA_OK ? 0 : 1;
}

/* "1,0.5,0.25" into f; the count, or -1 on a bad list. */
static int parse_fractions(const char *v, double *f)
{
    int n = 0;
    for (const char *p = v; *p != '\0' && n < MAX_FRACTIONS; n++) {
        char *end = NULL;
        f[n] = strtod(p, &end);
        if (end == p || f[n] < 0.0 || f[n] > 1.0 || (*end != ',' && *end != '\0'))
            return -1;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int cpu_cores(void)
{
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 1 ? (int)n : 1;
}

/* Tokens per second of one pp (one batch) or tg (one token at a time)
 * run from position 0; -1 on failure. */
static double gpu_run_once(gpu_session *g, const int32_t *tokens, int n, bool gen, float *logits)
{
    const double t0 = now_s();
    hydra_status st = HYDRA_OK;
    if (gen)
        for (int i = 0; i < n && st == HYDRA_OK; i++)
            st = gpu_forward(g, i, &tokens[i], 1, false, logits);
    else
        st = gpu_forward(g, 0, tokens, n, false, logits);
    if (st != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: hybrid: %s\n", hydra_last_error());
        return -1;
    }
    return n / (now_s() - t0);
}

static bool gpu_timed(gpu_session *g, const int32_t *tokens, int n, bool gen, const cuda_opts *o, float *logits,
                      double *mean, double *sd)
{
    double tps[MAX_REPS];
    if (gpu_run_once(g, tokens, n, gen, logits) < 0)
        return false;
    if (gen)
        gpu_hybrid_counters_reset(g);
    for (int r = 0; r < o->reps; r++)
        if ((tps[r] = gpu_run_once(g, tokens, n, gen, logits)) < 0)
            return false;
    mean_sd(tps, o->reps, mean, sd);
    return true;
}

/* One hybrid session per fraction: pp, tg and the split's counters. */
static int bench_hybrid(const hydra_model *m, const cuda_opts *o, const int32_t *tokens)
{
    model_weights w;
    if (weights_bind(&w, m) != HYDRA_OK)
        return 1;
    /* Default: the cores less two, for the thread waiting on the step and the
     * driver's own (measured on the H200 host: all 16 busy oversubscribe it). */
    const int threads = o->cpu_threads > 0 ? o->cpu_threads : cpu_cores() - 2 > 0 ? cpu_cores() - 2 : 1;
    printf("\nhybrid decode: CPU pass on %d threads%s, hand-off by %s, admissions %.1f MiB per token of a step%s, "
           "prefill %s\n\n", threads, o->cpu_pin ? " (pinned)" : "",
           o->handoff_flags ? "mapped flags (spinning thread)" : "graph host nodes", o->admit_mib,
           o->admit_mib > 0 ? "" : " (static slab)",
           o->stream_prefill ? "streams missed experts past the crossover" : "misses on the CPU");
    printf("| resident | slab GiB | pp%d t/s | tg%d t/s | decode hit rate | hand-off p50 / p99 us | CPU pass us "
           "per MoE layer | exposed us per MoE layer | GPU hits us per MoE layer | H2D MB per token | admissions "
           "| unsafe replays |\n", o->prompt, o->gen);
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    int rc = 0;
    for (int i = 0; i < o->n_fractions && rc == 0; i++) {
        const gpu_options go = {.n_ctx = o->prompt + o->gen + 1, .n_batch = o->prompt > 0 ? o->prompt : 1,
                                .kv_type = QT_F16, .graphs = o->graphs, .hybrid = true,
                                .slab_fraction = o->fraction[i], .cpu_threads = threads, .cpu_pin = o->cpu_pin,
                                .admit_bytes_per_token = (uint64_t)(o->admit_mib * 1048576.0),
                                .stream_prefill = o->stream_prefill, .handoff_flags = o->handoff_flags,
                                .verbose = true, .device = o->gpus.main_gpu, .split = o->gpus};
        gpu_session *g = NULL;
        double pp = 0, pp_sd = 0, tg = 0, tg_sd = 0;
        const double t0 = now_s();
        if (gpu_session_create(&g, &w, &go) != HYDRA_OK) {
            fprintf(stderr, "hydra-bench: hybrid %.2f: %s\n", o->fraction[i], hydra_last_error());
            rc = 1;
            break;
        }
        fprintf(stderr, "hybrid %.2f: session created in %.1f s\n", o->fraction[i], now_s() - t0);
        float *logits = gpu_session_logits_row(g); /* where hydra_session's decode lands: no staging copy */
        gpu_hybrid_counters pc; /* prefill's staging, before the tg runs reset the counters */
        if (o->prompt > 0 && !gpu_timed(g, tokens, o->prompt, false, o, logits, &pp, &pp_sd))
            rc = 1;
        gpu_hybrid_counters_get(g, &pc);
        if (rc == 0 && o->gen > 0 && !gpu_timed(g, tokens, o->gen, true, o, logits, &tg, &tg_sd))
            rc = 1;
        gpu_hybrid_counters c;
        gpu_hybrid_counters_get(g, &c);
        const double ls = c.layer_steps > 0 ? (double)c.layer_steps : 1.0;
        const double dt = c.decode_tokens > 0 ? (double)c.decode_tokens : 1.0;
        if (rc == 0)
            printf("| %.0f%% | %.2f | %.1f ± %.1f | %.2f ± %.2f | %.1f%% | %.1f / %.1f | %.1f | %.1f | %.1f | %.3f | "
                   "%llu | %llu |\n", 100 * o->fraction[i], c.slab_bytes / 1073741824.0, pp, pp_sd, tg, tg_sd,
                   c.lookups ? 100.0 * (double)c.hits / (double)c.lookups : 0.0, c.handoff_p50_ns / 1e3,
                   c.handoff_p99_ns / 1e3, c.cpu_ns / 1e3 / ls, c.exposed_ns / 1e3 / ls, c.hit_ns / 1e3 / ls,
                   c.h2d_bytes / 1e6 / dt, (unsigned long long)c.admissions, (unsigned long long)c.unsafe_replays);
        if (rc == 0 && tg > 0)
            fprintf(stderr, "hybrid %.2f: decode %.3f ms per token; CPU pass %.3f ms, exposed %.3f ms, GPU hits %.3f "
                    "ms per token (sums over MoE layers); registration %.0f ms\n", o->fraction[i], 1e3 / tg,
                    c.cpu_ns / 1e6 / dt, c.exposed_ns / 1e6 / dt, c.hit_ns / 1e6 / dt, c.register_ms);
        if (rc == 0)
            fprintf(stderr, "hybrid %.2f: prefill: %llu staged steps, %.2f GB staged per step, crossover %d tokens "
                    "(staging %.1f GB/s, CPU %.1f us per expert + %.2f us per route)\n", o->fraction[i],
                    (unsigned long long)pc.staged_steps, pc.staged_steps ? pc.stage_bytes / 1e9 / pc.staged_steps : 0.0,
                    c.stream_min_tokens, c.stage_gbps, c.cpu_expert_us, c.cpu_route_us);
        fflush(stdout);
        gpu_session_free(g);
    }
    weights_free(&w);
    return rc;
}

static int parse(int argc, char **argv, cuda_opts *o)
{
    *o = (cuda_opts){.prompt = 512, .gen = 128, .reps = 3, .split = 32, .graphs = true, .cpu_threads = 0,
                     .admit_mib = 8, .stream_prefill = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool *flag = strcmp(a, "--no-graphs") == 0           ? &o->graphs
                     : strcmp(a, "--no-stream-prefill") == 0 ? &o->stream_prefill
                     : strcmp(a, "--handoff-flags") == 0     ? &o->handoff_flags
                     : strcmp(a, "--hybrid-only") == 0       ? &o->hybrid_only
                     : strcmp(a, "--cpu-pin") == 0           ? &o->cpu_pin
                                                             : NULL;
        if (flag != NULL) {
            *flag = flag == &o->handoff_flags || flag == &o->hybrid_only || flag == &o->cpu_pin;
            continue;
        }
        if (v == NULL)
            return 2;
        if (strcmp(a, "-m") == 0)
            o->model = v;
        else if (strcmp(a, "-p") == 0)
            o->prompt = atoi(v);
        else if (strcmp(a, "-n") == 0)
            o->gen = atoi(v);
        else if (strcmp(a, "-r") == 0)
            o->reps = atoi(v);
        else if (strcmp(a, "--split") == 0)
            o->split = atoi(v);
        else if (strcmp(a, "--hybrid") == 0)
            o->n_fractions = parse_fractions(v, o->fraction);
        else if (strcmp(a, "--cpu-threads") == 0)
            o->cpu_threads = atoi(v);
        else if (strcmp(a, "--admit") == 0)
            o->admit_mib = atof(v);
        else if (strcmp(a, "-sm") == 0)
            o->gpus.mode = strcmp(v, "layer") == 0 ? 1 : strcmp(v, "tensor") == 0 ? 2 : strcmp(v, "none") == 0 ? 0 : -1;
        else if (strcmp(a, "-ts") == 0)
            o->gpus.n_ratio = split_parse_ratios(v, o->gpus.ratio, 16);
        else if (strcmp(a, "--main-gpu") == 0 || strcmp(a, "-mg") == 0)
            o->gpus.main_gpu = atoi(v);
        else
            return 2;
        i++;
    }
    if (o->model == NULL || o->prompt < 0 || o->gen < 0 || o->reps < 1 || o->reps > MAX_REPS || o->split < 0 ||
        (o->prompt + o->gen == 0 && o->split == 0) || o->n_fractions < 0 || o->cpu_threads < 0 || o->admit_mib < 0 ||
        o->gpus.mode < 0 || o->gpus.n_ratio < 0 || o->gpus.main_gpu < 0 || o->gpus.main_gpu >= 16)
        return 2;
    return 0;
}

int bench_cuda(int argc, char **argv)
{
    cuda_opts o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: hydra-bench --cuda -m FILE [-p N] [-n N] [-r REPS] [--no-graphs] [--split N]\n"
                        "       [--hybrid F1,F2,.. [--cpu-threads N] [--cpu-pin] [--admit MIB] [--no-stream-prefill] "
                        "[--handoff-flags] [--hybrid-only]] [-sm none|layer|tensor] [-ts A,B,..] [--main-gpu I]\n");
        return 2;
    }
    double probe = 0;
    if (gpu_copy_probe(PROBE_MIB, 5, &probe) != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s\n", hydra_last_error());
        return 1;
    }
    hydra_model_params mp = hydra_model_default_params();
    mp.path = o.model;
    hydra_model *m = NULL;
    hydra_session *s = NULL;
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = (uint32_t)(o.prompt + o.gen + 1);
    sp.n_batch = o.prompt > 0 ? (uint32_t)o.prompt : 1;
    sp.backend = HYDRA_BACKEND_CUDA;
    sp.cuda_graphs = o.graphs;
    sp.split_mode = (hydra_split_mode)o.gpus.mode;
    memcpy(sp.tensor_split, o.gpus.ratio, sizeof sp.tensor_split);
    sp.main_gpu = o.gpus.main_gpu;
    const double t_load = now_s();
    if (hydra_model_open(&m, &mp) != HYDRA_OK || hydra_session_create(&s, m, &sp) != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s: %s\n", o.model, hydra_last_error());
        hydra_model_close(m);
        return 1;
    }
    model_weights w;
    int rc = weights_bind(&w, m) == HYDRA_OK ? 0 : 1;
    const double tok_bytes = rc == 0 ? token_bytes(&w) : 0;
    const uint32_t n_vocab = hydra_session_n_vocab(s);
    char desc[128], mem[1024];
    snprintf(desc, sizeof desc, "%s %u layers", hydra_model_arch(m), rc == 0 ? w.hp.n_layer : 0);
    gpu_mem_describe(mem, sizeof mem);
    printf("model loaded and uploaded in %.1f s; device memory held by hydra:\n%s\n", now_s() - t_load, mem);
    printf("device-to-device copy probe (%d MiB, best of 5): %.0f GB/s (bytes read + written)\n", PROBE_MIB, probe);
    printf("weights read per decoded token: %.3f GB; weights GB/s = bytes per token x mean t/s\n\n", tok_bytes / 1e9);
    if (o.prompt + o.gen > 0) {
        printf("| model | size | params | backend | ngl | test | t/s | weights GB/s | of copy probe |\n");
        printf("| ----- | ---: | -----: | ------- | --: | ---: | --: | -----------: | ------------: |\n");
    }
    const int n_tok = o.prompt > o.gen ? o.prompt : o.gen > 0 ? o.gen : 1; /* -p 0 -n 0: the split alone */
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n_tok);
    rc = rc != 0 || tokens == NULL ? 1 : 0;
    if (rc == 0)
        random_tokens(tokens, n_tok, n_vocab);
    const double gib = (double)hydra_model_n_bytes(m) / (1024.0 * 1024.0 * 1024.0);
    const double params_b = (double)hydra_model_n_params(m) / 1e9;
    const bool plain = !(o.hybrid_only && o.n_fractions > 0);
    if (rc == 0 && plain && o.prompt > 0 &&
        !run_test(s, tokens, o.prompt, false, &o, desc, gib, params_b, tok_bytes, probe))
        rc = 1;
    if (rc == 0 && plain && o.gen > 0 && !run_test(s, tokens, o.gen, true, &o, desc, gib, params_b, tok_bytes, probe))
        rc = 1;
    hydra_session_free(s);
    if (rc == 0 && o.n_fractions > 0)
        rc = bench_hybrid(m, &o, tokens);
    if (rc == 0 && o.split > 0)
        rc = kernel_split(m, &o);
    weights_free(&w);
    free(tokens);
    hydra_model_close(m);
    return rc;
}
