/*
 * prepare.c — a generation request's prompt as tokens: the chat messages
 * rendered with the chat template, or the completion prompt's text, then
 * tokenized with special tokens recognised (the template writes them as
 * text) and the model's BOS first when it wants one and the text does not
 * already begin with it (templates usually write it).  Runs on libuv's
 * work threads, so a long prompt never holds up the loop: the template
 * and the tokenizer may be used from several threads (hydra.h).
 */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether tokenizing with add_special puts a BOS first for this model. */
static bool model_adds_bos(const hydra_model *m)
{
    hydra_token ids[4];
    size_t n = 0;
    return hydra_token_bos(m) >= 0 && hydra_tokenize(m, "", 0, true, false, ids, 4, &n) == HYDRA_OK && n > 0 &&
           ids[0] == hydra_token_bos(m);
}

hydra_status prepare_tokenize(const hydra_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                              hydra_token **out, size_t *n)
{
    const bool bos = add_bos && model_adds_bos(m);
    size_t cap = len + 8, got = 0;
    hydra_token *ids = malloc(sizeof *ids * (cap + 1)); /* ids[0]: room for the BOS */
    hydra_status st = ids ? hydra_tokenize(m, text, len, false, parse_special, ids + 1, cap, &got) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_ERR_RANGE) { /* more tokens than bytes + 8: a SentencePiece prefix, say */
        hydra_token *more = realloc(ids, sizeof *ids * (got + 1));
        st = more ? hydra_tokenize(m, text, len, false, parse_special, (ids = more) + 1, got, &got) : HYDRA_ERR_NOMEM;
    }
    if (st != HYDRA_OK) {
        free(ids);
        return st;
    }
    const bool add = bos && (got == 0 || ids[1] != hydra_token_bos(m));
    if (add)
        ids[0] = hydra_token_bos(m);
    else
        memmove(ids, ids + 1, sizeof *ids * got);
    *out = ids;
    *n = got + add;
    return HYDRA_OK;
}

static int render_chat(engine *e, const gen_request *r, char **text, size_t *len, char *err, size_t err_len)
{
    const char *why;
    const hydra_chat_template *tmpl = engine_chat_template(e, &why);
    if (tmpl == NULL) {
        snprintf(err, err_len, "%s", why);
        return 400;
    }
    hydra_chat_params cp = hydra_chat_default_params();
    cp.add_generation_prompt = true;
    cp.tools_json = r->tools_json;
    cp.extra_json = r->extra_json;
    hydra_chat_model_tokens(engine_model(e), &cp);
    if (hydra_chat_apply_json(tmpl, r->messages_json, &cp, text, len) != HYDRA_OK) {
        /* the template's own raise_exception (e.g. roles out of order) is the client's doing */
        snprintf(err, err_len, "the chat template cannot render these messages: %s", hydra_last_error());
        return 400;
    }
    return 0;
}

static int check_ids(engine *e, const hydra_token *ids, size_t n, char *err, size_t err_len)
{
    const int32_t n_vocab = hydra_vocab_size(engine_model(e));
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            snprintf(err, err_len, "prompt: token %zu is id %d, outside the vocabulary of %d", i, (int)ids[i],
                     (int)n_vocab);
            return 400;
        }
    return 0;
}

int prepare_prompt(engine *e, gen_request *r, hydra_token **tokens, size_t *n, char *err, size_t err_len)
{
    char *rendered = NULL;
    size_t len = 0;
    int status = 0;
    if (r->kind == API_CHAT)
        status = render_chat(e, r, &rendered, &len, err, err_len);
    if (status != 0)
        return status;
    if (r->kind == API_COMPLETION && r->prompt_ids != NULL) {
        if ((status = check_ids(e, r->prompt_ids, r->n_prompt_ids, err, err_len)) != 0)
            return status;
        *tokens = r->prompt_ids;
        *n = r->n_prompt_ids;
        r->prompt_ids = NULL;
    } else {
        const char *text = rendered ? rendered : r->prompt_text;
        hydra_status st = prepare_tokenize(engine_model(e), text, rendered ? len : r->prompt_len, true, true, tokens, n);
        free(rendered);
        if (st != HYDRA_OK) {
            snprintf(err, err_len, "cannot tokenize the prompt: %s", hydra_last_error());
            return st == HYDRA_ERR_NOMEM ? 503 : 400;
        }
    }
    const uint32_t n_ctx = engine_slot_ctx(e);
    if (*n == 0 || *n > n_ctx) {
        if (*n == 0)
            snprintf(err, err_len, "the prompt is empty");
        else
            snprintf(err, err_len, "the prompt is %zu tokens, more than the context of %u tokens per slot", *n, n_ctx);
        free(*tokens);
        *tokens = NULL;
        return 400;
    }
    return 0;
}
