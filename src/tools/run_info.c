/*
 * run_info.c — `hydra-run --info`: what a model file is (architecture,
 * hyper-parameters, tokenizer, size, quant mix; -v: every tensor), read
 * through the public metadata API only.
 */
#include "run.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ formatting */

enum { N_UNITS = 5 };

/* n in the largest of the units (each base times the one before) that
 * keeps it at least 1: two decimals, none in the first unit. */
static const char *human(uint64_t n, double base, const char *const units[N_UNITS], char *buf, size_t len)
{
    double v = (double)n;
    size_t u = 0;
    while (v >= base && u + 1 < N_UNITS)
        v /= base, u++;
    snprintf(buf, len, u == 0 ? "%.0f%s" : "%.2f%s", v, units[u]);
    return buf;
}

/* "512 B", "1.50 MiB" */
static const char *human_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[N_UNITS] = {" B", " KiB", " MiB", " GiB", " TiB"};
    return human(n, 1024.0, units, buf, len);
}

/* "3.19 B", "322.56 K" */
static const char *human_count(uint64_t n, char *buf, size_t len)
{
    static const char *const units[N_UNITS] = {"", " K", " M", " B", " T"};
    return human(n, 1000.0, units, buf, len);
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

void run_print_info(const hydra_model *m, const char *path, bool verbose)
{
    print_summary(m, path);
    print_hparams(m);
    print_tokenizer(m);
    print_quant_mix(m);
    if (verbose)
        print_tensors(m);
}
