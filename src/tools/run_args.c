/*
 * run_args.c — hydra-run's command line: one table of flags (names, what
 * they fill, their range, their help) drives the parser (flag_parse.c,
 * shared with hydra-serve) and the usage text.  Names and defaults follow
 * llama-cli's where it has the flag.
 */
#include "run.h"

#include "split.h"
#include "tools/flag_parse.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static bool parse_stop(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)f;
    run_opts *o = t->opts;
    if (value[0] == '\0' || o->n_stops == RUN_MAX_STOPS) {
        run_error("%s: %s", name, value[0] ? "too many stop strings (at most 16)" : "a stop string cannot be empty");
        return false;
    }
    o->stops[o->n_stops++] = value;
    return true;
}

static bool parse_kv_type(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)f;
    run_opts *o = t->opts;
    if (strcmp(value, "f16") != 0 && strcmp(value, "f32") != 0) {
        run_error("%s '%s': f16 or f32", name, value);
        return false;
    }
    o->kv_type = strcmp(value, "f32") == 0 ? HYDRA_KV_F32 : HYDRA_KV_F16;
    return true;
}

static bool parse_hybrid(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)f;
    run_opts *o = t->opts;
    static const struct { const char *name; hydra_hybrid_mode mode; } modes[] = {
        {"off", HYDRA_HYBRID_OFF}, {"cpu", HYDRA_HYBRID_CPU_SPLIT}, {"cuda", HYDRA_HYBRID_CUDA}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(value, modes[i].name) == 0) {
            o->hybrid = (int)modes[i].mode;
            return true;
        }
    run_error("%s '%s': off, cpu or cuda", name, value);
    return false;
}

static bool parse_split(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)f;
    run_opts *o = t->opts;
    static const char *const modes[] = {"none", "layer", "tensor"}; /* hydra_split_mode order */
    for (int i = 0; i < 3; i++)
        if (strcmp(value, modes[i]) == 0) {
            o->split_mode = i;
            return true;
        }
    run_error("%s '%s': none, layer or tensor", name, value);
    return false;
}

/* "3,1": each device's share. */
static bool parse_ratios(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)f;
    run_opts *o = t->opts;
    float r[HYDRA_MAX_DEVICES] = {0};
    if (split_parse_ratios(value, r, HYDRA_MAX_DEVICES) < 1) {
        run_error("%s '%s': up to %d shares >= 0 separated by commas, e.g. 3,1", name, value, HYDRA_MAX_DEVICES);
        return false;
    }
    memcpy(o->tensor_split, r, sizeof r);
    return true;
}

/* "1,2,3" (commas and/or spaces) into o->prompt_ids. */
static bool parse_ids(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)f;
    run_opts *o = t->opts;
    size_t cap = strlen(value) / 2 + 1, n = 0;
    hydra_token *ids = malloc(cap * sizeof *ids);
    const char *p = value;
    while (ids != NULL && *p != '\0') {
        while (*p == ',' || *p == ' ')
            p++;
        if (*p == '\0')
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || (*end != '\0' && *end != ',' && *end != ' ') || errno != 0 || v < 0 || v > INT32_MAX) {
            run_error("%s: '%.*s' is not a token id (ids are integers from 0, separated by commas)", name,
                      (int)strcspn(p, ", "), p);
            free(ids);
            return false;
        }
        ids[n++] = (hydra_token)v;
        p = end;
    }
    if (ids == NULL || n == 0) {
        run_error("%s: %s", name, ids == NULL ? "out of memory" : "no token ids given");
        free(ids);
        return false;
    }
    free(o->prompt_ids);
    o->prompt_ids = ids;
    o->n_prompt_ids = n;
    return true;
}

#define AT(field) offsetof(run_opts, field)
#define SAMPLING(field) (offsetof(run_opts, sampling) + offsetof(hydra_sampler_params, field))

static const flag flags[] = {
    {"-m --model", "FILE", flag_string, AT(model), 0, 0, 0,
     "GGUF model (default: a synthetic tiny qwen3moe, written once to $XDG_CACHE_HOME/hydra/ or ~/.cache/hydra/)"},
    {"-p --prompt", "TEXT", flag_string, AT(prompt), 0, 0, 0, "prompt to continue (in chat mode: the first message)"},
    {"-f --file", "FILE", flag_string, AT(prompt_file), 0, 0, 0, "read the prompt from FILE, byte for byte"},
    {"-n --n-predict", "N", flag_int, AT(n_predict), -1, INT_MAX, 0,
     "tokens to generate (default -1: until an end-of-generation token or a full context)"},
    {"-c --ctx-size", "N", flag_int, AT(n_ctx), 0, 1 << 24, 0,
     "context size in tokens (default 4096, or the model's when smaller; 0: the model's)"},
    {"-t --threads", "N", flag_int, AT(n_threads), 0, 1024, 0, "threads (default 0: the physical cores)"},
    {"-s --seed", "N", flag_llong, AT(seed), -1, (double)LLONG_MAX, 0, "random seed (default -1: a new one each run, printed)"},
    {"--temp", "T", flag_float, SAMPLING(temperature), 0, 1e6, 0, "temperature (default 0.8; 0: greedy)"},
    {"--top-k", "N", flag_int32, SAMPLING(top_k), 0, INT32_MAX, 0, "keep the N most likely tokens (default 40; 0: off)"},
    {"--top-p", "P", flag_float, SAMPLING(top_p), 0, 1, 0,
     "keep the most likely tokens up to probability P (default 0.95; 1: off)"},
    {"--min-p", "P", flag_float, SAMPLING(min_p), 0, 1, 0,
     "drop tokens less likely than P x the most likely (default 0.05; 0: off)"},
    {"--repeat-penalty", "X", flag_float, SAMPLING(repeat_penalty), 1e-6, 1e6, 0,
     "penalise tokens of the last --repeat-last-n (default 1: off)"},
    {"--repeat-last-n", "N", flag_int, AT(repeat_last_n), -1, 1 << 24, 0,
     "the window of the penalties (default 64; 0: off; -1: the context size)"},
    {"--presence-penalty", "X", flag_float, SAMPLING(presence_penalty), -1e6, 1e6, 0,
     "subtract X from the logits of tokens in the window (default 0: off)"},
    {"--frequency-penalty", "X", flag_float, SAMPLING(frequency_penalty), -1e6, 1e6, 0,
     "subtract X per occurrence in the window (default 0: off)"},
    {"-r --reverse-prompt --stop", "TEXT", parse_stop, 0, 0, 0, 0,
     "end the reply where TEXT appears (not printed); repeatable"},
    {"--ignore-eos", NULL, flag_switch, AT(ignore_eos), 0, 0, 0, "do not stop at end-of-generation tokens"},
    {"-cnv --conversation", NULL, flag_choice, AT(conversation), 0, 0, CONV_ON,
     "chat with the model's template (default: when the model has one, stdin is a terminal and no -p)"},
    {"-no-cnv --no-conversation", NULL, flag_choice, AT(conversation), 0, 0, CONV_OFF,
     "continue the prompt as plain text"},
    {"--chat-template", "NAME", flag_string, AT(chat_template), 0, 0, 0,
     "a built-in template (chatml, qwen3, llama3, ...) or a Jinja text, instead of the model's"},
    {"-sys --system-prompt", "TEXT", flag_string, AT(system_prompt), 0, 0, 0, "system message of the chat"},
    {"-sp --special", NULL, flag_switch, AT(special), 0, 0, 0, "print control tokens too"},
    {"--no-display-prompt", NULL, flag_switch, AT(no_display_prompt), 0, 0, 0, "do not echo the prompt"},
    {"--verbose-prompt", NULL, flag_switch, AT(verbose_prompt), 0, 0, 0,
     "print the prompt's tokens on stderr before generating"},
    {"--kv-type", "TYPE", parse_kv_type, 0, 0, 0, 0, "KV cache type: f16 (default) or f32"},
    {"--info", NULL, flag_switch, AT(info), 0, 0, 0,
     "describe the model: architecture, hyper-parameters, size, quant mix"},
    {"-v --verbose", NULL, flag_switch, AT(verbose), 0, 0, 0, "with --info, also list every tensor"},
    {"--tokenize", NULL, flag_switch, AT(tokenize), 0, 0, 0,
     "print the token ids of the prompt (special tokens recognised, no BOS/EOS) and exit"},
    {"--prompt-tokens", "IDS", parse_ids, 0, 0, 0, 0, "the prompt as token ids, e.g. 1,2,3"},
    {"--logits-out", "FILE", flag_string, AT(logits_out), 0, 0, 0,
     "evaluate the prompt in one batch; write every position's logits (float32 LE, [n_tokens][n_vocab])"},
    {"--profile-experts", "FILE", flag_string, AT(profile_experts), 0, 0, 0,
     "count each MoE layer's expert lookups over the run and write them as a pin file (docs/HYBRID.md)"},
    {"--trace-experts", "FILE", flag_string, AT(trace_experts), 0, 0, 0,
     "write every token's experts per layer (up to the context size; input of hydra-bench --slab-sim)"},
    {"-md --model-draft", "FILE", flag_string, AT(model_draft), 0, 0, 0,
     "draft model for speculative decoding (same vocabulary; docs/SPECULATIVE.md)"},
    {"--spec-mtp", NULL, flag_switch, AT(spec_mtp), 0, 0, 0,
     "speculative decoding drafted by the model's own MTP (NextN) block instead of -md (on the GPU with -ngl or "
     "--hybrid cuda)"},
    {"--spec-draft-n-max --draft-max --draft", "N", flag_int32, AT(spec.n_draft_max), 1, 256, 0,
     "most tokens drafted per step; every verify pass has N + 1 rows (default 16)"},
    {"--spec-draft-p-min --draft-p-min", "P", flag_float, AT(spec.p_min), 0, 1, 0,
     "stop drafting when the draft's most likely token is below P (default 0.75)"},
    {"--hybrid", "MODE", parse_hybrid, 0, 0, 0, 0,
     "split each MoE layer's experts: off (default), cpu (the slab a host buffer), cuda (docs/HYBRID.md)"},
    {"--resident", "F", flag_float, AT(resident), 0, 1, 0,
     "with --hybrid: share of each MoE layer's experts in the slab (default 0.5)"},
    {"--pin-file", "FILE", flag_string, AT(pin_file), 0, 0, 0,
     "with --hybrid: the experts to pin, most used first (a --profile-experts file)"},
    {"--vram-budget", "GiB", flag_float, AT(vram_budget_gib), 0, 1 << 20, 0,
     "with --hybrid: plan the slab in this budget; with --info: print the plan"},
    {"--stats", NULL, flag_switch, AT(stats), 0, 0, 0, "print the hybrid split's and the CUDA graphs' counters after the run"},
    {"-sm --split-mode", "MODE", parse_split, 0, 0, 0, 0,
     "several GPUs (CUDA): none (default, one GPU), layer (layer ranges), tensor (docs/MULTIGPU.md)"},
    {"-ts --tensor-split", "A,B,..", parse_ratios, 0, 0, 0, 0, "each GPU's share of the split (default: free memory)"},
    {"-mg --main-gpu", "I", flag_int, AT(main_gpu), 0, HYDRA_MAX_DEVICES - 1, 0,
     "the GPU of -sm none; with a split, the one holding the output head (default 0)"},
    {"-ngl --gpu-layers --n-gpu-layers", "N", flag_int, AT(n_gpu_layers), 0, INT_MAX, 0,
     "0 (default): run on the CPU; the model's layer count or more (e.g. 99): the whole model in VRAM (CUDA); "
     "a model larger than the GPU runs with --hybrid cuda instead"},
    {"--print-ids", NULL, flag_switch, AT(print_ids), 0, 0, 0,
     "print the generated token ids (one line) instead of text; implies --ignore-eos"},
    {"-h --help", NULL, flag_switch, AT(help), 0, 0, 0, "this text"},
};

enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void run_opts_init(run_opts *o)
{
    *o = (run_opts){.n_predict = -1,
                    .n_ctx = -1,
                    .seed = -1,
                    .repeat_last_n = 64,
                    .kv_type = HYDRA_KV_F16,
                    .sampling = hydra_sampler_default_params(),
                    .spec = hydra_spec_default_params(),
                    .conversation = CONV_AUTO,
                    .resident = 0.5f};
}

void run_opts_free(run_opts *o)
{
    free(o->prompt_ids);
    o->prompt_ids = NULL;
}

int run_parse_args(int argc, char **argv, run_opts *o)
{
    const flag_target target = {.opts = o, .error = run_error};
    return flag_parse_args(flags, N_FLAGS, argc, argv, &target) ? RUN_OK : RUN_ERROR;
}

void run_usage(FILE *fp)
{
    fprintf(fp, "usage: hydra-run [-m FILE] [-p TEXT | -f FILE | --prompt-tokens IDS] [options]\n"
                "       hydra-run [-m FILE] --info [-v]\n"
                "       hydra-run [-m FILE] --tokenize -p TEXT\n\n");
    for (const flag *f = flags; f < flags + N_FLAGS; f++) {
        char left[64];
        int n = 0;
        for (const char *p = f->names; *p != '\0' && n < (int)sizeof left;) {
            size_t len = strcspn(p, " ");
            n += snprintf(left + n, sizeof left - (size_t)n, "%s%.*s", p == f->names ? "" : ", ", (int)len, p);
            p += len + (p[len] == ' ');
        }
        if (f->metavar != NULL && n < (int)sizeof left)
            snprintf(left + n, sizeof left - (size_t)n, " %s", f->metavar);
        fprintf(fp, "  %-34s %s\n", left, f->help);
    }
    fprintf(fp, "\nExit status: 0 done, 1 an error (one line on stderr), 130 interrupted.\n"
                "In chat mode: /exit or end of input leaves; Ctrl-C stops the reply being written.\n");
}
