/*
 * hydra-bench — the whole model in llama-bench's conventions, or the
 * kernels alone, each beside the machine's memory bandwidth measured in
 * the same process (markdown tables, mean ± stddev over -r repetitions).
 *
 *   hydra-bench -m model.gguf -p 128 -n 32 -t 2 -r 3   pp128 and tg32 (bench_model.c)
 *   hydra-bench --kernels                               every computed type, synthetic matrix
 *   hydra-bench --kernels -T q4_k,q8_0 -t 2 -r 5 -s 512 --cols 4096 -p 16
 *   hydra-bench --kernels -m model.gguf                 the model's own 2-D+ tensors, by type
 *   hydra-bench --cuda ...                              the CUDA backend (bench_cuda.c)
 *
 * Without -m, --kernels is implied.  The memory-read probe (bench_probe.c)
 * runs once on its own (printed above the table) and once before every
 * repetition of every row: on a shared machine the load changes by the
 * second, so only a probe run beside the measurement says how far it is
 * from the memory limit of that moment.
 *
 * Exit status: 0 done, 1 a run failed (memory, model), 2 bad arguments.
 */
#include "bench.h"
#include "bench_cuda.h"

#include "../kernels/cpu/cpu_features.h"
#include "hydra.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- command line ----------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: hydra-bench -m FILE [-p N] [-n N] [-t THREADS] [-r REPS] [--probe-mib MIB]\n"
            "       hydra-bench --kernels [-m FILE] [-T TYPES] [-t THREADS] [-r REPS] [--cols N] [-s MIB] [-p N]\n"
            "       hydra-bench --cuda ...   the CUDA backend's run (bench_cuda.c)\n"
            "  -m FILE     the model: pp and tg tests (with --kernels: its tensors, grouped by type)\n"
            "  -p N        prompt tokens of the pp test (default 512); with --kernels tokens of the matmul row\n"
            "              (default 16); 0 skips the pp test\n"
            "  -n N        tokens of the tg test (default 128); 0 skips it\n"
            "  -t THREADS  threads (default: online CPUs); the probe runs on as many\n"
            "  -r REPS     repetitions (default 5)\n"
            "  --kernels   kernel tables instead of the whole model\n"
            "  -T TYPES    kernel types, comma-separated (default: every type hydra computes)\n"
            "  --cols N    values per row of the synthetic matrix (default 4096)\n"
            "  -s MIB      size of the synthetic matrix (default 512)\n"
            "  --probe-mib MIB  memory probe buffer (default 1024)\n");
}

static bool parse_types(const char *list, bool *want)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (uint32_t t = 0; t < QT_COUNT; t++) {
            const quant_traits *tr = quant_traits_of(t);
            if (tr != NULL && tr->vec_dot != NULL && strcasecmp(tr->name, tok) == 0)
                want[t] = found = true;
        }
        if (!found) {
            fprintf(stderr, "hydra-bench: unknown or uncomputed type '%s'\n", tok);
            return false;
        }
    }
    return true;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, bench_options *o)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (bench_options){.threads = cpus > 0 ? (int)cpus : 1, .reps = 5, .prompt = -1, .gen = 128, .cols = 4096,
                         .size_mib = 512, .probe_mib = 1024};
    bool any_type = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (strcmp(a, "--kernels") == 0) {
            o->kernels = true;
            continue;
        }
        if (v == NULL) {
            usage();
            return 2;
        }
        if (strcmp(a, "-m") == 0)
            o->model = v;
        else if (strcmp(a, "-T") == 0 && parse_types(v, o->want))
            any_type = true;
        else if (strcmp(a, "-t") == 0 && parse_int(v, 1, 1024, &x))
            o->threads = (int)x;
        else if (strcmp(a, "-r") == 0 && parse_int(v, 1, BENCH_MAX_REPS, &x))
            o->reps = (int)x;
        else if (strcmp(a, "--cols") == 0 && parse_int(v, 256, 1 << 20, &x) && x % 256 == 0)
            o->cols = x;
        else if (strcmp(a, "-s") == 0 && parse_int(v, 1, 1 << 20, &x))
            o->size_mib = x;
        else if (strcmp(a, "-p") == 0 && parse_int(v, 0, 1 << 16, &x))
            o->prompt = (int)x;
        else if (strcmp(a, "-n") == 0 && parse_int(v, 0, 1 << 16, &x))
            o->gen = (int)x;
        else if (strcmp(a, "--probe-mib") == 0 && parse_int(v, 64, 1 << 20, &x))
            o->probe_mib = x;
        else {
            usage();
            return 2;
        }
        i++;
    }
    o->kernels = o->kernels || o->model == NULL;
    if (o->prompt < 0)
        o->prompt = o->kernels ? 16 : 512;
    if (o->kernels && o->prompt < 2) {
        fprintf(stderr, "hydra-bench: --kernels needs -p of at least 2 (tokens of the matmul row)\n");
        return 2;
    }
    if (!any_type)
        for (uint32_t t = 0; t < QT_COUNT; t++) {
            const quant_traits *tr = quant_traits_of(t);
            o->want[t] = tr != NULL && tr->vec_dot_ref != NULL;
        }
    return 0;
}

/* /proc/cpuinfo's model name (lscpu's "Model name"), or "unknown". */
static void cpu_model(char *out, size_t len)
{
    snprintf(out, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            snprintf(out, len, "%s", colon + 2);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    }
    if (f != NULL)
        fclose(f);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--cuda") == 0) /* the CUDA backend's own run: bench_cuda.c */
        return bench_cuda(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "--slab-sim") == 0) /* slab policies over routing traces: bench_slab.c */
        return bench_slab_sim(argc - 1, argv + 1);
    bench_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    char features[256], model_name[256];
    cpu_features_describe(cpu_features_get(), features, sizeof features);
    cpu_model(model_name, sizeof model_name);
    bench_probe probe;
    if (!bench_probe_init(&probe, o.probe_mib, o.threads)) {
        fprintf(stderr, "hydra-bench: cannot allocate the %lld MiB probe buffer\n", (long long)o.probe_mib);
        return 1;
    }
    bench_stats alone = bench_probe_alone(&probe, o.reps);
    printf("cpu: %s; features: %s; threads %d; reps %d\n\n", model_name, features, o.threads, o.reps);
    printf("memory read probe (%d threads, %lld MiB, 32-byte loads, 8 accumulators): best %.2f GB/s, median "
           "%.2f GB/s, mean %.2f ± %.2f\n\n",
           o.threads, (long long)o.probe_mib, alone.best, alone.median, alone.mean, alone.sd);
    fflush(stdout);
    rc = o.kernels ? bench_kernels(&o, &probe) : bench_model(&o, &probe);
    bench_probe_free(&probe);
    return rc;
}
