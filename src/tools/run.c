/*
 * hydra-run — runs a model.  Today it describes one (`--info`): the text
 * generation arrives with the CPU engine (issue 4).
 *
 *   hydra-run --info -m model.gguf [-v]
 *   hydra-run --info                  # the built-in default: a synthetic tiny qwen3moe
 *
 * Exit status: 0 done, 1 the model could not be opened or written, 2 bad
 * arguments.
 */
#include "hydra.h"
#include "synth.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct run_opts {
    const char *model; /* NULL: the built-in default */
    bool info;
    bool verbose;
    bool help;
} run_opts;

static void usage(FILE *fp)
{
    fprintf(fp, "usage: hydra-run [-m FILE] [--info] [-v]\n\n"
                "  -m, --model FILE  GGUF model (default: a synthetic tiny qwen3moe, written once to\n"
                "                    $XDG_CACHE_HOME/hydra/ or ~/.cache/hydra/)\n"
                "  --info            describe the model: architecture, hyper-parameters, size, quant mix\n"
                "  -v, --verbose     with --info, also list every tensor\n"
                "  -h, --help        this text\n");
}

/* 0 when parsed; otherwise the exit status. */
static int parse_args(int argc, char **argv, run_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "hydra-run: %s needs a file\n", a);
                return 2;
            }
            o->model = argv[++i];
        } else if (strcmp(a, "--info") == 0) {
            o->info = true;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            o->verbose = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            o->help = true;
        } else {
            fprintf(stderr, "hydra-run: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ formatting */

static const char *human_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0])
        v /= 1024.0, u++;
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

/* "3.19 B", "322.56 K" */
static const char *human_count(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"", " K", " M", " B", " T"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1000.0 && u + 1 < sizeof units / sizeof units[0])
        v /= 1000.0, u++;
    snprintf(buf, len, u == 0 ? "%.0f%s" : "%.2f%s", v, units[u]);
    return buf;
}

static bool is_float_type(hydra_value_type t) { return t == HYDRA_VALUE_F32 || t == HYDRA_VALUE_F64; }

static void print_scalar(const hydra_model *m, const char *key, hydra_value_type type)
{
    int64_t i;
    uint64_t u;
    double f;
    bool b;
    const char *s;
    size_t len;
    if (type == HYDRA_VALUE_STRING && hydra_model_get_str(m, key, &s, &len) == HYDRA_OK)
        printf("\"%.*s\"", len > 60 ? 60 : (int)len, s);
    else if (type == HYDRA_VALUE_BOOL && hydra_model_get_bool(m, key, &b) == HYDRA_OK)
        printf("%s", b ? "true" : "false");
    else if (is_float_type(type) && hydra_model_get_f64(m, key, &f) == HYDRA_OK)
        printf("%g", f);
    else if (hydra_model_get_i64(m, key, &i) == HYDRA_OK)
        printf("%" PRId64, i);
    else if (hydra_model_get_u64(m, key, &u) == HYDRA_OK)
        printf("%" PRIu64, u);
    else
        printf("?");
}

enum { SHORT_ARRAY = 8 }; /* arrays up to this long print their values */

static void print_array(const hydra_model *m, const char *key)
{
    hydra_value_type elem;
    size_t n;
    if (hydra_model_get_arr(m, key, &elem, &n) != HYDRA_OK)
        return (void)printf("?");
    bool numeric = elem != HYDRA_VALUE_STRING && elem != HYDRA_VALUE_ARRAY;
    if (!numeric || n > SHORT_ARRAY)
        return (void)printf("[%s × %zu]", hydra_value_type_name(elem), n);
    printf("[");
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        double f;
        if (is_float_type(elem) && hydra_model_get_arr_f64(m, key, i, &f) == HYDRA_OK)
            printf("%s%g", i ? ", " : "", f);
        else if (hydra_model_get_arr_i64(m, key, i, &v) == HYDRA_OK)
            printf("%s%" PRId64, i ? ", " : "", v);
        else
            printf("%s?", i ? ", " : "");
    }
    printf("]");
}

/* ------------------------------------------------------------ sections */

static void print_summary(const hydra_model *m, const char *path)
{
    char a[32], b[32], c[32];
    const char *name;
    printf("model:         %s\n", path);
    printf("architecture:  %s\n", hydra_model_arch(m)[0] ? hydra_model_arch(m) : "(none)");
    if (hydra_model_get_str(m, "general.name", &name, NULL) == HYDRA_OK)
        printf("name:          %s\n", name);
    printf("gguf version:  %" PRIu32 "\n", hydra_model_gguf_version(m));
    printf("parameters:    %s\n", human_count(hydra_model_n_params(m), a, sizeof a));
    printf("file size:     %s (tensor data %s, %zu tensors)\n", human_bytes(hydra_model_file_size(m), b, sizeof b),
           human_bytes(hydra_model_n_bytes(m), c, sizeof c), hydra_model_tensor_count(m));
}

/* Every "<arch>." key, in file order. */
static void print_hparams(const hydra_model *m)
{
    const char *arch = hydra_model_arch(m);
    size_t prefix = strlen(arch);
    printf("hyper-parameters:\n");
    for (size_t i = 0; i < hydra_model_meta_count(m); i++) {
        const char *key;
        hydra_value_type type;
        if (hydra_model_meta_at(m, i, &key, &type) != HYDRA_OK || prefix == 0 || strncmp(key, arch, prefix) != 0 ||
            key[prefix] != '.')
            continue;
        printf("  %-50s ", key);
        if (type == HYDRA_VALUE_ARRAY)
            print_array(m, key);
        else
            print_scalar(m, key, type);
        printf("\n");
    }
}

static void print_token_id(const hydra_model *m, const char *label, const char *key)
{
    uint64_t id;
    if (hydra_model_get_u64(m, key, &id) == HYDRA_OK)
        printf(", %s %" PRIu64, label, id);
}

static void print_tokenizer(const hydra_model *m)
{
    const char *model = "(none)", *pre = NULL;
    hydra_value_type elem;
    size_t n_tokens = 0, n_merges = 0;
    hydra_model_get_str(m, "tokenizer.ggml.model", &model, NULL);
    hydra_model_get_str(m, "tokenizer.ggml.pre", &pre, NULL);
    hydra_model_get_arr(m, "tokenizer.ggml.tokens", &elem, &n_tokens);
    if (hydra_model_get_arr(m, "tokenizer.ggml.merges", &elem, &n_merges) != HYDRA_OK)
        n_merges = 0;
    printf("tokenizer:     %s", model);
    if (pre != NULL)
        printf(" (pre %s)", pre);
    printf(", %zu tokens", n_tokens);
    if (n_merges > 0)
        printf(", %zu merges", n_merges);
    print_token_id(m, "bos", "tokenizer.ggml.bos_token_id");
    print_token_id(m, "eos", "tokenizer.ggml.eos_token_id");
    printf("\n");
}

static size_t tensors_of_type(const hydra_model *m, uint32_t type)
{
    size_t n = 0;
    hydra_tensor_info ti;
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++)
        n += hydra_model_tensor_at(m, i, &ti) == HYDRA_OK && ti.type == type;
    return n;
}

static void print_quant_mix(const hydra_model *m)
{
    uint64_t total = hydra_model_n_bytes(m);
    printf("quant mix:\n");
    for (uint32_t t = 0; t < hydra_type_count(); t++) {
        uint64_t bytes = hydra_model_bytes_of_type(m, t);
        char buf[32];
        if (bytes > 0)
            printf("  %-8s %5zu tensors %12s  %5.1f %%\n", hydra_type_name(t), tensors_of_type(m, t),
                   human_bytes(bytes, buf, sizeof buf), total ? 100.0 * (double)bytes / (double)total : 0.0);
    }
}

static void print_tensors(const hydra_model *m)
{
    printf("tensors:\n  %-40s %-8s %-24s %14s %14s\n", "name", "type", "shape", "bytes", "offset");
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info ti;
        char shape[64];
        if (hydra_model_tensor_at(m, i, &ti) != HYDRA_OK)
            continue;
        int n = snprintf(shape, sizeof shape, "[%" PRIu64, ti.ne[0]);
        for (uint32_t d = 1; d < ti.n_dims && n > 0 && (size_t)n < sizeof shape; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, ", %" PRIu64, ti.ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("  %-40s %-8s %-24s %14" PRIu64 " %14" PRIu64 "\n", ti.name, ti.type_name, shape, ti.n_bytes,
               ti.file_offset);
    }
}

static void print_info(const hydra_model *m, const char *path, bool verbose)
{
    print_summary(m, path);
    print_hparams(m);
    print_tokenizer(m);
    print_quant_mix(m);
    if (verbose)
        print_tensors(m);
}

/* ------------------------------------------------------------ the default model */

/* mkdir -p; 0 on success. */
static int make_dirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* A cached default is reused only if it opens and has the preset's size,
 * so a file left by another version of the writer is rewritten. */
static bool default_is_valid(const char *path, const synth_params *tiny)
{
    hydra_model *m;
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    if (access(path, R_OK) != 0 || hydra_model_open(&m, &mp) != HYDRA_OK)
        return false;
    bool ok = strcmp(hydra_model_arch(m), tiny->arch) == 0 && hydra_model_n_bytes(m) == synth_data_bytes(tiny);
    hydra_model_close(m);
    return ok;
}

/* Writes through a temporary name, so a concurrent reader never sees half a file. */
static bool write_default(const char *path, const synth_params *tiny)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (synth_write(tmp, tiny) != HYDRA_OK)
        return false;
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return false;
    }
    return true;
}

/* The first folder of $XDG_CACHE_HOME/hydra, $HOME/.cache/hydra, build/
 * that holds a valid default or can take one; NULL if none can. */
static const char *default_model(char *path, size_t len, bool *written)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dirs[3][4096] = {{0}};
    if (xdg != NULL && xdg[0] == '/')
        snprintf(dirs[0], sizeof dirs[0], "%s/hydra", xdg);
    if (home != NULL && home[0] == '/')
        snprintf(dirs[1], sizeof dirs[1], "%s/.cache/hydra", home);
    snprintf(dirs[2], sizeof dirs[2], "build");
    synth_params tiny;
    if (synth_preset("tiny", &tiny) != HYDRA_OK)
        return NULL;
    for (int i = 0; i < 3; i++) {
        if (dirs[i][0] == '\0' || make_dirs(dirs[i]) != 0)
            continue;
        snprintf(path, len, "%s/default-tiny.gguf", dirs[i]);
        if (default_is_valid(path, &tiny))
            return *written = false, path;
        if (write_default(path, &tiny))
            return *written = true, path;
    }
    return NULL;
}

/* ------------------------------------------------------------ main */

static hydra_model *open_model(const char *path)
{
    hydra_model *m;
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    hydra_status st = hydra_model_open(&m, &mp);
    if (st != HYDRA_OK) {
        fprintf(stderr, "hydra-run: cannot open the model (%s): %s\n", hydra_strerror(st), hydra_last_error());
        return NULL;
    }
    return m;
}

static const char *resolve_model(const run_opts *o, char *buf, size_t len)
{
    if (o->model != NULL)
        return o->model;
    bool written = false;
    synth_params tiny;
    const char *path = synth_preset("tiny", &tiny) == HYDRA_OK ? default_model(buf, len, &written) : NULL;
    if (path == NULL) {
        fprintf(stderr, "hydra-run: no model given, and the built-in default could not be written: %s\n",
                hydra_last_error());
        return NULL;
    }
    fprintf(stderr, "hydra-run: no model given: using the built-in default, a synthetic %s (%" PRIu32 " layers, "
                    "%" PRIu32 " experts top-%" PRIu32 ", %s, random weights) %s %s\n",
            tiny.arch, tiny.n_layer, tiny.n_expert, tiny.n_expert_used, hydra_type_name(tiny.type),
            written ? "written now to" : "cached at", path);
    return path;
}

int main(int argc, char **argv)
{
    run_opts opts = {0};
    int rc = parse_args(argc, argv, &opts);
    if (rc != 0 || opts.help) {
        if (opts.help)
            usage(stdout);
        return rc;
    }
    char default_path[4200];
    const char *path = resolve_model(&opts, default_path, sizeof default_path);
    hydra_model *m = path ? open_model(path) : NULL;
    if (m == NULL)
        return 1;
    print_info(m, path, opts.verbose);
    hydra_model_close(m);
    if (!opts.info)
        fprintf(stderr, "hydra-run: text generation arrives with the CPU engine (issue 4); "
                        "this build only describes the model (--info)\n");
    return 0;
}
