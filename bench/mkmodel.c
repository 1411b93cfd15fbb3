/*
 * hydra-mkmodel — writes a synthetic MoE model (random weights, seeded) as
 * GGUF v3: the source of test and benchmark models of any size.
 *
 *   hydra-mkmodel -o tiny.gguf
 *   hydra-mkmodel -o big.gguf --preset qwen3-30b-a3b --layers 4
 *   hydra-mkmodel -o mix.gguf --arch llama --experts 16 --type F16
 *   hydra-mkmodel -o bench.gguf --preset qwen3moe-bench      (Q4_K_M, 1.85 GiB)
 *   hydra-mkmodel -o 30b.gguf --preset qwen3-30b-a3b --type Q4_K_M --fast --router-skew 1
 *   hydra-mkmodel -o mtp.gguf --preset deepseek2-mtp-tiny --zero-head-norms   (every draft kept)
 *
 * Exit status: 0 written, 1 the file could not be written, 2 bad arguments.
 */
#include "hydra.h"
#include "quant.h"
#include "synth.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Options that set one u32 field of synth_params. */
typedef struct u32_option {
    const char *flag;
    size_t offset;
    const char *help;
} u32_option;

static const u32_option u32_options[] = {
    {"--layers", offsetof(synth_params, n_layer), "transformer blocks"},
    {"--embd", offsetof(synth_params, n_embd), "embedding size"},
    {"--heads", offsetof(synth_params, n_head), "attention heads"},
    {"--kv-heads", offsetof(synth_params, n_head_kv), "KV heads (GQA)"},
    {"--head-dim", offsetof(synth_params, head_dim), "size of one head"},
    {"--experts", offsetof(synth_params, n_expert), "experts per MoE layer"},
    {"--experts-used", offsetof(synth_params, n_expert_used), "experts per token (top-k)"},
    {"--ff-exp", offsetof(synth_params, n_ff_exp), "hidden size of one expert"},
    {"--ff", offsetof(synth_params, n_ff), "dense FFN size (feed_forward_length)"},
    {"--vocab", offsetof(synth_params, n_vocab), "vocabulary size (pads with [PADn] tokens)"},
    {"--ctx", offsetof(synth_params, n_ctx), "context length"},
    {"--nextn", offsetof(synth_params, n_nextn), "MTP (NextN) blocks after the layers (deepseek2; docs/SPECULATIVE.md)"},
    {"--threads", offsetof(synth_params, n_threads), "generating threads (default: all processors)"},
};
enum { N_U32_OPTIONS = sizeof u32_options / sizeof u32_options[0] };

typedef struct mk_opts {
    const char *out;
    const char *preset;
    const char *arch;
    const char *type;
    const char *seed;
    const char *router_skew;
    const char *u32_values[N_U32_OPTIONS]; /* NULL: keep the preset's */
    bool help;
    bool fast;
    bool zero_head_norms;
} mk_opts;

static void usage(FILE *fp)
{
    fprintf(fp, "usage: hydra-mkmodel -o FILE [--preset NAME] [--arch A] [options]\n\n"
                "Writes a synthetic MoE model (random weights) as GGUF v3.\n\n"
                "  -o, --output FILE   where to write (required)\n"
                "  --preset NAME       starting shape (default: tiny, or the --arch's own)\n"
                "  --arch A            qwen3moe, llama, qwen2moe, deepseek2, gpt-oss\n");
    for (size_t i = 0; i < N_U32_OPTIONS; i++) {
        char flag[32];
        snprintf(flag, sizeof flag, "%s N", u32_options[i].flag);
        fprintf(fp, "  %-19s %s\n", flag, u32_options[i].help);
    }
    fprintf(fp, "  --type NAME         weight matrices' type:");
    for (uint32_t t = 0; t < QT_COUNT; t++)
        if (synth_type_writable(t))
            fprintf(fp, " %s", quant_traits_of(t)->name);
    fprintf(fp, "\n                      or a llama-quantize mix:");
    for (int m = SYNTH_MIX_NONE + 1; synth_mix_name((synth_mix)m) != NULL; m++)
        fprintf(fp, " %s", synth_mix_name((synth_mix)m));
    fprintf(fp, "\n  --seed S            random seed (same seed, same file)\n"
                "  --fast              weight rows copied from %d rows quantised once per tensor: random valid\n"
                "                      blocks at disk speed, for benchmarks (not for accuracy)\n"
                "  --router-skew S     Zipf-like expert popularity, exponent ~S (0 .. %g; default 0: uniform)\n"
                "  --zero-head-norms   output_norm and the MTP blocks' shared_head_norm written as zeros: every\n"
                "                      logit is 0, greedy picks token 0 and every MTP draft is kept\n"
                "  -h, --help          this text\n\npresets:\n",
            SYNTH_FAST_POOL_ROWS, (double)SYNTH_MAX_ROUTER_SKEW);
    for (size_t i = 0; i < synth_preset_count(); i++)
        fprintf(fp, "  %-15s %s\n", synth_preset_name(i), synth_preset_summary(i));
}

static int bad_arg(const char *fmt, const char *what)
{
    fprintf(stderr, "hydra-mkmodel: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n(hydra-mkmodel --help lists the options)\n");
    return 2;
}

/* The slot an option's value goes to, or NULL for an unknown option. */
static const char **value_slot(mk_opts *o, const char *flag)
{
    static const struct {
        const char *flag;
        size_t offset;
    } named[] = {
        {"-o", offsetof(mk_opts, out)},           {"--output", offsetof(mk_opts, out)},
        {"--preset", offsetof(mk_opts, preset)},  {"--arch", offsetof(mk_opts, arch)},
        {"--type", offsetof(mk_opts, type)},      {"--seed", offsetof(mk_opts, seed)},
        {"--router-skew", offsetof(mk_opts, router_skew)},
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (strcmp(flag, named[i].flag) == 0)
            return (const char **)((char *)o + named[i].offset);
    for (size_t i = 0; i < N_U32_OPTIONS; i++)
        if (strcmp(flag, u32_options[i].flag) == 0)
            return &o->u32_values[i];
    return NULL;
}

/* The switch a flag without a value sets, or NULL for none. */
static bool *switch_slot(mk_opts *o, const char *flag)
{
    static const struct {
        const char *flag;
        size_t offset;
    } switches[] = {
        {"-h", offsetof(mk_opts, help)},
        {"--help", offsetof(mk_opts, help)},
        {"--fast", offsetof(mk_opts, fast)},
        {"--zero-head-norms", offsetof(mk_opts, zero_head_norms)},
    };
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++)
        if (strcmp(flag, switches[i].flag) == 0)
            return (bool *)((char *)o + switches[i].offset);
    return NULL;
}

/* 0 when parsed; otherwise the exit status. */
static int parse_args(int argc, char **argv, mk_opts *o)
{
    for (int i = 1; i < argc; i++) {
        bool *on = switch_slot(o, argv[i]);
        if (on != NULL) {
            *on = true;
            continue;
        }
        const char **slot = value_slot(o, argv[i]);
        if (slot == NULL)
            return bad_arg("unknown option '%s'", argv[i]);
        if (i + 1 >= argc)
            return bad_arg("%s needs a value", argv[i]);
        *slot = argv[++i];
    }
    if (!o->help && o->out == NULL)
        return bad_arg("%s", "no output file: give -o FILE");
    return 0;
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (s[0] == '-' || s[0] == '\0' || *end != '\0' || errno != 0 || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_skew(const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || !(v >= 0 && v <= SYNTH_MAX_ROUTER_SKEW))
        return false;
    *out = (float)v;
    return true;
}

static bool find_type(const char *name, uint32_t *type)
{
    for (uint32_t t = 0; t < QT_COUNT; t++)
        if (quant_traits_of(t) && strcasecmp(quant_traits_of(t)->name, name) == 0)
            return *type = t, true;
    return false;
}

/* The starting shape: --preset, else --arch's own preset, else tiny. */
static int base_params(const mk_opts *o, synth_params *p)
{
    hydra_status st = o->preset ? synth_preset(o->preset, p) : o->arch ? synth_arch_preset(o->arch, p)
                                                                        : synth_preset("tiny", p);
    if (st != HYDRA_OK)
        return bad_arg("%s", hydra_last_error());
    if (o->arch && strcmp(o->arch, p->arch) != 0)
        return bad_arg("--arch conflicts with the preset's architecture; give one of them (preset is %s)", p->arch);
    return 0;
}

static int build_params(const mk_opts *o, synth_params *p)
{
    int rc = base_params(o, p);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < N_U32_OPTIONS; i++) {
        uint64_t v;
        if (o->u32_values[i] == NULL)
            continue;
        if (!parse_u64(o->u32_values[i], UINT32_MAX, &v))
            return bad_arg("%s needs a whole number below 2^32", u32_options[i].flag);
        *(uint32_t *)((char *)p + u32_options[i].offset) = (uint32_t)v;
    }
    if (o->type && synth_mix_find(o->type, &p->mix))
        p->type = QT_COUNT; /* unused: the mix picks every type */
    else if (o->type && find_type(o->type, &p->type))
        p->mix = SYNTH_MIX_NONE;
    else if (o->type)
        return bad_arg("--type: unknown tensor type or mix '%s'", o->type);
    if (o->seed && !parse_u64(o->seed, UINT64_MAX, &p->seed))
        return bad_arg("--seed needs a whole number, not '%s'", o->seed);
    if (o->router_skew && !parse_skew(o->router_skew, &p->router_skew))
        return bad_arg("--router-skew needs a number from 0 to 8, not '%s'", o->router_skew);
    p->fast = o->fast;
    p->zero_head_norms = o->zero_head_norms;
    if (synth_check(p) != HYDRA_OK)
        return bad_arg("%s", hydra_last_error());
    return 0;
}

/* ------------------------------------------------------------ progress */

enum { PROGRESS_MIN_BYTES = 64u << 20 }; /* smaller files are written silently */

typedef struct progress_state {
    const char *path;
    int last_percent;
} progress_state;

static bool show_progress(uint64_t done, uint64_t total, void *user)
{
    progress_state *ps = user;
    int percent = total ? (int)(100 * done / total) : 100;
    if (total >= PROGRESS_MIN_BYTES && percent != ps->last_percent) {
        fprintf(stderr, "\rwriting %s: %3d%% (%.2f of %.2f GiB)", ps->path, percent, done / 1073741824.0,
                total / 1073741824.0);
        ps->last_percent = percent;
    }
    return true;
}

static int write_model(const char *path, synth_params *p)
{
    progress_state ps = {path, -1};
    p->progress = show_progress;
    p->progress_user = &ps;
    hydra_status st = synth_write(path, p);
    if (ps.last_percent >= 0)
        fputc('\n', stderr);
    if (st != HYDRA_OK) {
        fprintf(stderr, "hydra-mkmodel: %s: %s\n", hydra_strerror(st), hydra_last_error());
        return 1;
    }
    fprintf(stderr, "wrote %s: %s, %" PRIu32 " layers, n_embd %" PRIu32 ", %" PRIu32 " experts top-%" PRIu32
                    ", %s, %.1f MiB of tensors\n",
            path, p->arch, p->n_layer, p->n_embd, p->n_expert, p->n_expert_used,
            p->mix != SYNTH_MIX_NONE ? synth_mix_name(p->mix) : quant_traits_of(p->type)->name,
            synth_data_bytes(p) / 1048576.0);
    return 0;
}

int main(int argc, char **argv)
{
    mk_opts opts = {0};
    synth_params params;
    int rc = parse_args(argc, argv, &opts);
    if (rc != 0 || opts.help) {
        if (opts.help)
            usage(stdout);
        return rc;
    }
    rc = build_params(&opts, &params);
    return rc != 0 ? rc : write_model(opts.out, &params);
}
