/*
 * hydra-run — runs a model from the shell, with llama-cli's flags:
 *
 *   hydra-run -m model.gguf -p "Once upon a time" -n 32   # continue a prompt
 *   hydra-run -m model.gguf                               # chat (a terminal, a chat template)
 *   hydra-run -m model.gguf --info [-v]                   # describe the file
 *   hydra-run -m vocab.gguf --tokenize -p "text"          # token ids
 *   hydra-run -m model.gguf --prompt-tokens 1,2,3 --logits-out l.f32 -n 0
 *   hydra-run                                             # the built-in default model
 *
 * main() reads the flags into run_opts (run_args.c), opens the model and
 * hands it to one mode.  docs/CLI.md describes every flag.
 */
#include "run.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void run_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hydra-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* A bar on stderr, redrawn at each whole percent. */
static bool show_progress(float fraction, void *user)
{
    enum { WIDTH = 40 };
    int *last = user, percent = (int)(fraction * 100.0f);
    if (percent == *last)
        return true;
    *last = percent;
    int filled = percent * WIDTH / 100;
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "########################################",
            WIDTH - filled, "", percent);
    return true;
}

static hydra_model *open_model(const char *path)
{
    hydra_model *m;
    hydra_model_params mp = hydra_model_default_params();
    int last_percent = -1;
    mp.path = path;
    if (isatty(STDERR_FILENO)) {
        mp.progress = show_progress;
        mp.progress_user = &last_percent;
    }
    hydra_status st = hydra_model_open(&m, &mp);
    if (mp.progress != NULL)
        fputs("\r\033[K", stderr); /* the bar's line, cleared */
    if (st != HYDRA_OK) {
        run_error("cannot open the model (%s): %s", hydra_strerror(st), hydra_last_error());
        return NULL;
    }
    return m;
}

/* Chat when asked, or by default when the model has a template, stdin is
 * a terminal and no prompt was given (llama-cli's rule). */
static bool wants_chat(const run_opts *o, const hydra_model *m)
{
    if (o->conversation != CONV_AUTO)
        return o->conversation == CONV_ON;
    const char *text;
    bool prompted = o->prompt || o->prompt_file || o->prompt_ids || o->logits_out || o->print_ids;
    return !prompted && isatty(STDIN_FILENO) && hydra_chat_model_template(m, o->chat_template, &text) == HYDRA_OK;
}

static int run_mode(const run_opts *o)
{
    const double load_start = run_now_ms();
    char default_path[4200];
    const char *path = o->model ? o->model : run_default_model(default_path, sizeof default_path);
    hydra_model *m = path ? open_model(path) : NULL;
    if (m == NULL)
        return RUN_ERROR;
    int rc = RUN_OK;
    if (o->info) {
        run_print_info(m, path, o->verbose);
        if (o->vram_budget_gib > 0 || o->hybrid != HYDRA_HYBRID_OFF)
            rc = run_print_plan(o, m);
    } else if (o->tokenize)
        rc = run_tokenize(o, m);
    else if (wants_chat(o, m))
        rc = run_chat(o, m, load_start);
    else
        rc = run_generate(o, m, load_start);
    hydra_model_close(m);
    return rc;
}

int main(int argc, char **argv)
{
    run_opts opts;
    run_opts_init(&opts);
    int rc = run_parse_args(argc, argv, &opts);
    if (rc == RUN_OK && opts.help)
        run_usage(stdout);
    else if (rc == RUN_OK)
        rc = run_mode(&opts);
    run_opts_free(&opts);
    return rc;
}
