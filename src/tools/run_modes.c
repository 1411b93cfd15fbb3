/*
 * run_modes.c — hydra-run's non-interactive modes: --tokenize (ids of a
 * text) and plain generation (continue a prompt given as text or as ids;
 * optionally write every prompt position's logits, or print ids instead of
 * text: the conformance hooks other engines are checked with).
 */
#include "run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The floats of --logits-out are written as they lie in memory. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "--logits-out writes little-endian float32: add a byte swap for this host"
#endif

static int read_file(const char *path, prompt_text *p)
{
    FILE *fp = fopen(path, "rb");
    long size = -1;
    if (fp != NULL && fseek(fp, 0, SEEK_END) == 0 && (size = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0 &&
        (p->owned = malloc((size_t)size + 1)) != NULL && fread(p->owned, 1, (size_t)size, fp) == (size_t)size) {
        fclose(fp);
        p->owned[size] = '\0';
        p->text = p->owned;
        p->len = (size_t)size;
        return RUN_OK;
    }
    run_error("cannot read the prompt file %s: %s", path, errno ? strerror(errno) : "read failed");
    if (fp != NULL)
        fclose(fp);
    free(p->owned);
    p->owned = NULL;
    return RUN_ERROR;
}

int run_prompt_text(const run_opts *o, prompt_text *p)
{
    *p = (prompt_text){0};
    if ((o->prompt != NULL) + (o->prompt_file != NULL) + (o->prompt_ids != NULL) > 1) {
        run_error("give the prompt once: -p TEXT, -f FILE or --prompt-tokens IDS");
        return RUN_ERROR;
    }
    if (o->prompt_file != NULL)
        return read_file(o->prompt_file, p);
    if (o->prompt != NULL)
        *p = (prompt_text){NULL, o->prompt, strlen(o->prompt)};
    return RUN_OK;
}

int run_tokenize(const run_opts *o, const hydra_model *m)
{
    prompt_text p;
    if (run_prompt_text(o, &p) != RUN_OK)
        return RUN_ERROR;
    hydra_token *ids = NULL;
    size_t n = 0;
    int rc = RUN_ERROR;
    if (p.text == NULL)
        run_error("--tokenize needs a text: -p TEXT or -f FILE");
    else
        rc = run_tokenize_text(m, p.text, p.len, false, &ids, &n);
    for (size_t i = 0; rc == RUN_OK && i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    if (rc == RUN_OK)
        printf("\n");
    free(ids);
    free(p.owned);
    return rc;
}

/* ------------------------------------------------------------ generation */

/* The prompt's tokens: the ids given, the text tokenized, or a lone BOS. */
static int prompt_tokens(const run_opts *o, const hydra_model *m, const prompt_text *p, hydra_token **ids, size_t *n)
{
    if (o->prompt_ids != NULL) {
        *ids = malloc(sizeof **ids * o->n_prompt_ids);
        if (*ids == NULL) {
            run_error("out of memory for %zu prompt tokens", o->n_prompt_ids);
            return RUN_ERROR;
        }
        memcpy(*ids, o->prompt_ids, sizeof **ids * o->n_prompt_ids);
        *n = o->n_prompt_ids;
        return RUN_OK;
    }
    if (p->text == NULL && hydra_token_bos(m) < 0) {
        run_error("no prompt: give one with -p TEXT, -f FILE or --prompt-tokens IDS");
        return RUN_ERROR;
    }
    if (p->text == NULL) {
        *ids = malloc(sizeof **ids);
        if (*ids == NULL)
            return RUN_ERROR;
        **ids = hydra_token_bos(m);
        *n = 1;
        return RUN_OK;
    }
    return run_tokenize_text(m, p->text, p->len, true, ids, n);
}

static int write_logits(const char *path, const float *logits, size_t n)
{
    FILE *fp = fopen(path, "wb");
    bool ok = fp != NULL && fwrite(logits, sizeof *logits, n, fp) == n;
    if (fp != NULL && fclose(fp) != 0)
        ok = false;
    if (!ok)
        run_error("cannot write the logits to %s: %s", path, strerror(errno));
    return ok ? RUN_OK : RUN_ERROR;
}

/* Evaluates the prompt; with --logits-out, in one batch, writing every row. */
static int feed_prompt(gen_ctx *g, const hydra_token *ids, size_t n)
{
    if (g->o->logits_out == NULL)
        return gen_feed(g, ids, n, NULL);
    const size_t n_floats = n * hydra_session_n_vocab(g->session);
    float *logits = malloc(sizeof *logits * n_floats);
    if (logits == NULL) {
        run_error("out of memory for the logits of %zu tokens", n);
        return RUN_ERROR;
    }
    int rc = gen_feed(g, ids, n, logits);
    if (rc == RUN_OK)
        rc = write_logits(g->o->logits_out, logits, n_floats);
    free(logits);
    return rc;
}

static int status_of(gen_end end, const gen_ctx *g)
{
    if (end == GEN_CONTEXT)
        fprintf(stderr, "\nhydra-run: the context is full (%u tokens; -c sets its size)\n",
                hydra_session_n_ctx(g->session));
    return end == GEN_ERROR ? RUN_ERROR : end == GEN_INTERRUPTED ? RUN_INTERRUPTED : RUN_OK;
}

static int generate_from(const run_opts *o, gen_ctx *g, const prompt_text *p, const hydra_token *ids, size_t n)
{
    if (o->verbose_prompt)
        run_print_tokens(g->model, ids, n);
    int rc = feed_prompt(g, ids, n);
    if (rc != RUN_OK || o->n_predict == 0) {
        if (rc == RUN_OK)
            gen_print_timing(g);
        return rc;
    }
    const bool show_prompt = p->text != NULL && !o->no_display_prompt && !o->print_ids;
    if (show_prompt)
        fwrite(p->text, 1, p->len, stdout);
    gen_output out = {.text_start = p->text == NULL && o->prompt_ids == NULL};
    gen_print_sampling(g);
    gen_end end = gen_run(g, o->n_predict, &out);
    if (!o->print_ids)
        printf("\n");
    rc = status_of(end, g);
    gen_print_timing(g);
    return rc;
}

int run_generate(const run_opts *o, const hydra_model *m, double load_start)
{
    prompt_text p;
    hydra_token *ids = NULL;
    size_t n = 0;
    if (run_prompt_text(o, &p) != RUN_OK)
        return RUN_ERROR;
    gen_ctx g = {0};
    run_catch_interrupts();
    int rc = prompt_tokens(o, m, &p, &ids, &n);
    if (rc == RUN_OK)
        rc = gen_open(&g, o, m, o->logits_out ? n : 0, load_start);
    if (rc == RUN_OK)
        rc = generate_from(o, &g, &p, ids, n);
    if (rc == RUN_OK)
        rc = gen_save_profile(&g);
    gen_close(&g);
    free(ids);
    free(p.owned);
    return rc;
}
