/*
 * run.h — the parts of hydra-run: the options the flag table fills
 * (run_args.c), the model it opens (run.c, run_default.c), and the modes:
 * describe (run_info.c), tokenize and generate (run_modes.c), chat
 * (run_chat.c), over one generation loop (run_gen.c) whose output passes
 * through the stop-string filter (run_stop.c).
 */
#ifndef HYDRA_RUN_H
#define HYDRA_RUN_H

#include "hydra.h"

#include <signal.h>
#include <stdio.h>

enum { RUN_MAX_STOPS = 16 };

/* Exit statuses: every error is one line on stderr and status 1. */
enum { RUN_OK = 0, RUN_ERROR = 1, RUN_INTERRUPTED = 130 };

typedef enum run_conversation { CONV_AUTO = -1, CONV_OFF = 0, CONV_ON = 1 } run_conversation;

typedef struct run_opts {
    const char *model;         /* -m; NULL: the built-in default */
    const char *prompt;        /* -p */
    const char *prompt_file;   /* -f */
    const char *system_prompt; /* -sys */
    const char *chat_template; /* --chat-template */
    const char *logits_out;    /* --logits-out */
    const char *profile_experts; /* --profile-experts: the expert profile written at the end */
    const char *trace_experts;   /* --trace-experts: the routing trace written at the end */
    const char *model_draft;     /* -md: a draft model for speculative decoding (run_spec.c); NULL: none */
    bool spec_mtp;               /* --spec-mtp: speculative decoding drafted by the model's MTP block */
    hydra_spec_params spec;      /* --spec-draft-n-max, --spec-draft-p-min */
    hydra_token *prompt_ids;   /* --prompt-tokens (owned) */
    size_t n_prompt_ids;
    const char *stops[RUN_MAX_STOPS]; /* --stop, repeatable */
    int n_stops;
    int n_predict;     /* -n; -1: until an end-of-generation token or a full context */
    int n_ctx;         /* -c; -1: 4096 or the model's context when smaller; 0: the model's */
    int n_threads;     /* -t; 0: physical cores */
    long long seed;    /* -s; -1: random */
    int repeat_last_n; /* -1: the context size */
    hydra_kv_type kv_type;
    hydra_sampler_params sampling; /* seed and penalty_last_n are set from the fields above */
    int conversation;              /* run_conversation */
    int hybrid;                    /* --hybrid: a hydra_hybrid_mode */
    float resident;                /* --resident: share of each MoE layer's experts in the slab */
    float vram_budget_gib;         /* --vram-budget; 0: none */
    const char *pin_file;          /* --pin-file */
    int split_mode;                /* -sm: a hydra_split_mode (docs/MULTIGPU.md) */
    float tensor_split[HYDRA_MAX_DEVICES]; /* -ts */
    int main_gpu;                  /* --main-gpu */
    int n_gpu_layers;              /* -ngl: 0 the CPU; the model's layer count or more: all on CUDA */
    bool stats;                    /* --stats: the hybrid split's counters after the run */
    bool info, verbose, tokenize, print_ids, verbose_prompt, ignore_eos, special, no_display_prompt, help;
} run_opts;

/* run_args.c */
void run_opts_init(run_opts *o);
void run_opts_free(run_opts *o);
/* RUN_OK, or RUN_ERROR after one line on stderr naming the flag. */
int run_parse_args(int argc, char **argv, run_opts *o);
void run_usage(FILE *fp);

/* run_default.c: the cached built-in model's path, after saying so on
 * stderr; NULL (and a message) when it cannot be written. */
const char *run_default_model(char *path, size_t len);

/* run_info.c */
void run_print_info(const hydra_model *m, const char *path, bool verbose);

/* run_hybrid.c: the split's session parameters from the flags; the
 * placement plan of --info --vram-budget (RUN_OK or RUN_ERROR, said); the
 * counters of --stats. */
void run_hybrid_params(const run_opts *o, hydra_session_params *sp);
int run_check_gpu_layers(const run_opts *o, const hydra_model *m);
int run_print_plan(const run_opts *o, const hydra_model *m);
void run_print_hybrid_stats(const hydra_session *s, FILE *fp);
/* run_spec.c: the CUDA step and graph counters (--stats; nothing on the CPU). */
void run_print_graph_stats(const hydra_session *s, FILE *fp);

/* run_gen.c: the context a session gets from -c (0: the model's). */
uint32_t gen_context_size(const run_opts *o, const hydra_model *m);

/* run.c: one line on stderr, "hydra-run: ..." */
void run_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* run_modes.c: the text of -p or -f (at most one of them, and not with
 * --prompt-tokens).  RUN_OK or RUN_ERROR (said); free owned after. */
typedef struct prompt_text {
    char *owned;      /* the -f file's bytes */
    const char *text; /* NULL: no text given */
    size_t len;
} prompt_text;
int run_prompt_text(const run_opts *o, prompt_text *p);

/* run_modes.c and run_chat.c: each returns the exit status. */
int run_tokenize(const run_opts *o, const hydra_model *m);
int run_generate(const run_opts *o, const hydra_model *m, double load_start);
int run_chat(const run_opts *o, const hydra_model *m, double load_start);

/* ------------------------------------------------------------ run_stop.c */

/* Holds back generated text that might be the start of a stop string, so a
 * stop string is never printed, even when it arrives split across tokens. */
typedef struct stop_filter {
    const char *const *stops;
    int n_stops;
    char *held;      /* [0, released): handed out by the last call; then the held tail */
    size_t held_len, held_cap, released;
    bool stopped; /* a stop string was found: nothing more is released */
} stop_filter;

void stop_filter_init(stop_filter *f, const char *const *stops, int n_stops);
void stop_filter_free(stop_filter *f);
/* Adds text; *out / *out_len: what is safe to print now (valid until the
 * next call).  After a stop string, the text before it and then nothing. */
hydra_status stop_filter_push(stop_filter *f, const char *text, size_t len, const char **out, size_t *out_len);
/* The end of the stream: whatever is still held. */
void stop_filter_flush(stop_filter *f, const char **out, size_t *out_len);

/* ------------------------------------------------------------ run_gen.c */

typedef struct run_timing {
    double load_start, load_ms;
    double prompt_ms, eval_ms, sample_ms;
    long n_prompt, n_eval, n_sampled;
} run_timing;

typedef enum gen_end { GEN_LENGTH, GEN_EOG, GEN_STOP, GEN_CONTEXT, GEN_INTERRUPTED, GEN_ERROR } gen_end;

/* A session with its sampler and the tokens it holds. */
typedef struct gen_ctx {
    const run_opts *o;
    const hydra_model *model;
    hydra_session *session;
    hydra_sampler *sampler;
    hydra_sampler_params sampling; /* as the sampler was made (the seed chosen) */
    hydra_token *history; /* the tokens in the session, [n_ctx] */
    size_t n_history;
    run_timing timing;
    /* -md: the draft model and session and the decoder over both; its
     * tokens wait in spec_out[spec_next, spec_n) (run_spec.c) */
    hydra_model *draft_model;
    hydra_session *draft;
    hydra_spec *spec;
    hydra_token *spec_out;
    size_t spec_n, spec_next;
} gen_ctx;

/* Where generated text goes: stdout, and the reply text when a chat keeps it. */
typedef struct gen_output {
    bool text_start; /* the first token begins the text (no prompt text before it) */
    bool keep;       /* collect the printed text in reply (NUL-terminated, malloc'd) */
    char *reply;
    size_t reply_len, reply_cap;
} gen_output;

double run_now_ms(void);

/* The Ctrl-C flag: set by SIGINT once run_catch_interrupts() ran. */
extern volatile sig_atomic_t run_interrupted;
void run_catch_interrupts(void);

/* Session and sampler for the options; RUN_OK or RUN_ERROR (said). */
int gen_open(gen_ctx *g, const run_opts *o, const hydra_model *m, size_t n_batch, double load_start);
void gen_close(gen_ctx *g);
/* Writes --profile-experts / --trace-experts, when given.  RUN_OK or RUN_ERROR (said). */
int gen_save_profile(const gen_ctx *g);

/* Makes the session hold exactly tokens[0, n): keeps the longest prefix
 * it already holds and evaluates the rest (at least the last token, so
 * that its logits are there).  all_logits: NULL, or room for n x n_vocab
 * floats, which then receives every position's logits (and every token
 * is evaluated, in one call).  RUN_OK or RUN_ERROR (said). */
int gen_feed(gen_ctx *g, const hydra_token *tokens, size_t n, float *all_logits);

/* Samples up to n_predict tokens (-1: no limit) after what the session
 * holds, printing them (text through the stop filter, or ids). */
gen_end gen_run(gen_ctx *g, int n_predict, gen_output *out);

/* The sampler's settings and seed, one line on stderr. */
void gen_print_sampling(const gen_ctx *g);

/* The timing summary on stderr. */
void gen_print_timing(const gen_ctx *g);

/* ------------------------------------------------------------ run_spec.c */

/* With -md: opens the draft model, checks its vocabulary against the
 * target's, and builds the speculative decoder.  RUN_OK or RUN_ERROR (said). */
int gen_spec_open(gen_ctx *g);
void gen_spec_close(gen_ctx *g);
/* The next generated token (a step drafts and verifies at most remaining
 * tokens, <= 0: no limit).  The decoder evaluates the tokens itself. */
hydra_status gen_spec_next(gen_ctx *g, int remaining, hydra_token *tok);
/* Acceptance and widths, one line on stderr. */
void gen_spec_print(const gen_ctx *g);

/* Tokenizes text for the model: special tokens recognised; add_bos: the
 * model's BOS first when it wants one and the text has none.  *out owned
 * by the caller.  RUN_OK or RUN_ERROR (said). */
int run_tokenize_text(const hydra_model *m, const char *text, size_t len, bool add_bos, hydra_token **out, size_t *n);

/* Prints the tokens of a prompt, one per line, on stderr (--verbose-prompt). */
void run_print_tokens(const hydra_model *m, const hydra_token *tokens, size_t n);

#endif
