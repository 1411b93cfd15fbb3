/*
 * flags.c — hydra-serve's command line: one table of flags (names, the
 * field each fills, its range, its help) drives both the parser
 * (src/tools/flag_parse.c, shared with hydra-run) and the usage text.
 * Names and defaults follow llama-server's where it has the flag.
 */
#include "serve.h"

#include "tools/flag_parse.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool add_key(serve_opts *o, const char *key, const char *name)
{
    if (key[0] == '\0')
        return true;
    if (o->n_api_keys == SERVE_MAX_API_KEYS) {
        serve_log("%s: at most %d API keys", name, SERVE_MAX_API_KEYS);
        return false;
    }
    o->api_keys[o->n_api_keys++] = key;
    return true;
}

/* --api-key KEY[,KEY...] (repeatable). */
static bool parse_api_key(const flag *f, const char *name, const char *value, const flag_target *t)
{
    (void)f;
    serve_opts *o = t->opts;
    char *keys = o->n_keys_owned < SERVE_MAX_API_KEYS ? strdup(value) : NULL;
    if (keys == NULL) {
        serve_log("%s: too many keys", name);
        return false;
    }
    o->keys_owned[o->n_keys_owned++] = keys;
    for (char *save, *k = strtok_r(keys, ",", &save); k != NULL; k = strtok_r(NULL, ",", &save))
        if (!add_key(o, k, name))
            return false;
    return true;
}

/* --api-key-file FILE: one key per line; blank lines ignored. */
static bool parse_api_key_file(const flag *f, const char *name, const char *value, const flag_target *t)
{
    FILE *fp = fopen(value, "r");
    if (fp == NULL) {
        serve_log("%s %s: %s", name, value, strerror(errno));
        return false;
    }
    sbuf text = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0)
        sbuf_add(&text, chunk, n);
    fclose(fp);
    for (char *p = text.data; p != NULL && *p != '\0'; p++)
        if (*p == '\n' || *p == '\r')
            *p = ',';
    const bool ok = parse_api_key(f, name, text.data ? text.data : "", t);
    sbuf_free(&text);
    return ok;
}

#define OFF(field_name) offsetof(serve_opts, field_name)
#define SAMPLING(field_name) (offsetof(serve_opts, sampling) + offsetof(hydra_sampler_params, field_name))

static const flag flags[] = {
    {"-m --model", "FILE", flag_string, OFF(model_path), 0, 0, 0, "the GGUF model (required)"},
    {"-a --alias", "NAME", flag_string, OFF(alias), 0, 0, 0,
     "the model's name in responses (default: the file's base name)"},
    {"--host", "HOST", flag_string, OFF(host), 0, 0, 0, "address to listen on (default 127.0.0.1)"},
    {"--port", "N", flag_int, OFF(port), 0, 65535, 0, "port to listen on (default 8080; 0: any free port)"},
    {"-np --parallel", "N", flag_int, OFF(n_parallel), 1, 256, 0, "slots: requests served at once (default 4)"},
    {"-c --ctx-size", "N", flag_int, OFF(n_ctx), 0, 1 << 24, 0,
     "context of all slots together, split evenly (default 0: 4096 per slot, at most the model's)"},
    {"-t --threads", "N", flag_int, OFF(n_threads), 0, 1024, 0,
     "threads of a forward pass (default 0: physical cores)"},
    {"-b --batch-size", "N", flag_int, OFF(n_batch), 1, 65536, 0,
     "most tokens one engine step evaluates: every generating slot's next token plus prompt chunks (default 512)"},
    {"-n --n-predict", "N", flag_int, OFF(n_predict), -1, INT32_MAX, 0,
     "tokens a request generates when it sets no max_tokens (default -1: until the end or a full context)"},
    {"--timeout", "SECONDS", flag_int, OFF(timeout_s), 1, 86400, 0,
     "a request must arrive within it, an idle connection is closed after it, and a client that reads nothing of "
     "a response for it is dropped (default 600)"},
    {"--max-queue", "N", flag_int, OFF(max_queue), 0, 1 << 20, 0,
     "requests that may wait for a slot; more get 503 with Retry-After (default 64)"},
    {"--max-body", "BYTES", flag_llong, OFF(max_body), 1, 1LL << 32, 0,
     "largest request body; more get 413 (default 8 MiB)"},
    {"--api-key", "KEY", parse_api_key, 0, 0, 0, 0, "require \"Authorization: Bearer KEY\" (repeatable, or KEY1,KEY2)"},
    {"--api-key-file", "FILE", parse_api_key_file, 0, 0, 0, 0, "API keys from a file, one per line"},
    {"--chat-template", "NAME|TEXT", flag_string, OFF(chat_template), 0, 0, 0,
     "a built-in template by name, or a Jinja template's text, instead of the model's"},
    {"--slot-save-path", "DIR", flag_string, OFF(slot_save_path), 0, 0, 0,
     "folder for POST /slots/{id}?action=save|restore (off by default)"},
    {"--metrics", NULL, flag_switch, OFF(metrics), 0, 0, 0, "answer GET /metrics (Prometheus text)"},
    {"-v --verbose", NULL, flag_switch, OFF(verbose), 0, 0, 0, "log every request on stderr"},
    {"-md --model-draft", "FILE", flag_string, OFF(draft_path), 0, 0, 0,
     "a draft model of the same vocabulary: every slot decodes speculatively (docs/SPECULATIVE.md)"},
    {"--spec-mtp", NULL, flag_switch, OFF(spec_mtp), 0, 0, 0,
     "every slot decodes speculatively, drafted by the model's own MTP (NextN) block instead of -md"},
    {"--spec-draft-n-max --draft-max --draft-n", "N", flag_int, OFF(spec_n_max), 1, 256, 0,
     "with -md: most tokens drafted per step; each generating slot takes N + 1 rows of a step (default 16)"},
    {"--spec-draft-p-min --draft-p-min", "P", flag_float, OFF(spec_p_min), 0, 1, 0,
     "with -md: drafting stops when the draft's most probable token has less (default 0.75)"},
    {"--spec-fixed-width", NULL, flag_switch, OFF(spec_fixed_width), 0, 0, 0,
     "with -md: pad every verify pass to N + 1 rows (one width, as a captured CUDA graph needs; on the CPU the "
     "padded rows cost compute; default: the drafts + 1 rows)"},
    {"--temp", "T", flag_float, SAMPLING(temperature), 0, 2, 0, "default temperature (0.8)"},
    {"--top-k", "N", flag_int32, SAMPLING(top_k), 0, INT32_MAX, 0, "default top-k (40; 0: off)"},
    {"--top-p", "P", flag_float, SAMPLING(top_p), 0, 1, 0, "default top-p (0.95)"},
    {"--min-p", "P", flag_float, SAMPLING(min_p), 0, 1, 0, "default min-p (0.05)"},
    {"--repeat-penalty", "R", flag_float, SAMPLING(repeat_penalty), 1e-6, 10, 0, "default repeat penalty (1: off)"},
    {"--repeat-last-n", "N", flag_int32, SAMPLING(penalty_last_n), 0, INT32_MAX, 0,
     "default window of the penalties (64)"},
    {"--presence-penalty", "P", flag_float, SAMPLING(presence_penalty), -2, 2, 0, "default presence penalty (0)"},
    {"--frequency-penalty", "P", flag_float, SAMPLING(frequency_penalty), -2, 2, 0, "default frequency penalty (0)"},
    {"-s --seed", "S", flag_llong, OFF(seed), -1, 9007199254740992.0, 0,
     "default seed (-1: a fresh one per request)"},
    {"-h --help", NULL, flag_switch, OFF(help), 0, 0, 0, "this text"},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void serve_opts_init(serve_opts *o)
{
    *o = (serve_opts){
        .host = "127.0.0.1",
        .port = 8080,
        .n_parallel = 4,
        .n_batch = 512,
        .n_predict = -1,
        .timeout_s = 600,
        .max_queue = 64,
        .max_body = 8 << 20,
        .spec_n_max = hydra_spec_default_params().n_draft_max,
        .spec_p_min = hydra_spec_default_params().p_min,
        .sampling = hydra_sampler_default_params(),
        .seed = -1,
    };
}

void serve_opts_free(serve_opts *o)
{
    for (int i = 0; i < o->n_keys_owned; i++)
        free(o->keys_owned[i]);
    o->n_keys_owned = 0;
}

int serve_parse_args(int argc, char **argv, serve_opts *o)
{
    const flag_target target = {.opts = o, .error = serve_log};
    if (!flag_parse_args(flags, N_FLAGS, argc, argv, &target))
        return -1;
    if (!o->help && o->model_path == NULL) {
        serve_log("-m FILE is required (--help lists the flags)");
        return -1;
    }
    if (o->n_batch < o->n_parallel) {
        serve_log("-b %d: at least -np (%d), so every generating slot fits in a step", o->n_batch, o->n_parallel);
        return -1;
    }
    if (o->draft_path != NULL && o->spec_mtp) {
        serve_log("-md and --spec-mtp: give one drafter");
        return -1;
    }
    /* a verify pass is spec_n_max + 1 rows of one slot, all slots' in one step */
    const bool spec = o->draft_path != NULL || o->spec_mtp;
    if (spec && (long long)o->n_batch < (long long)o->n_parallel * (o->spec_n_max + 1)) {
        serve_log("-b %d: with %s, at least -np x (--spec-draft-n-max + 1) = %d x %d = %d, so every generating "
                  "slot's verify rows fit in a step", o->n_batch, o->spec_mtp ? "--spec-mtp" : "-md", o->n_parallel,
                  o->spec_n_max + 1, o->n_parallel * (o->spec_n_max + 1));
        return -1;
    }
    return 0;
}

void serve_usage(void)
{
    printf("usage: hydra-serve -m FILE [options]\n\n"
           "An OpenAI-compatible HTTP server for one model (docs/SERVER.md).\n\n");
    for (int i = 0; i < N_FLAGS; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", flags[i].names, flags[i].metavar ? " " : "",
                 flags[i].metavar ? flags[i].metavar : "");
        printf("  %-26s %s\n", left, flags[i].help);
    }
}
