/*
 * run_chat.c — the chat REPL (-cnv): each turn renders the whole
 * conversation with the model's chat template (or --chat-template), so the
 * prompt is exactly what the template makes of it; the session keeps the
 * tokens the new rendering shares with what it holds and evaluates only
 * the rest.  /exit or the end of input leaves; Ctrl-C stops the reply
 * being written (at the input prompt, it leaves).
 */
#include "run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct conversation {
    hydra_chat_message *msgs; /* contents owned */
    size_t n, cap;
} conversation;

static void conversation_free(conversation *c)
{
    for (size_t i = 0; i < c->n; i++)
        free((char *)c->msgs[i].content);
    free(c->msgs);
}

static int add_message(conversation *c, const char *role, const char *content, size_t len)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        hydra_chat_message *msgs = realloc(c->msgs, sizeof *msgs * cap);
        if (msgs == NULL) {
            run_error("out of memory for the conversation");
            return RUN_ERROR;
        }
        c->msgs = msgs;
        c->cap = cap;
    }
    char *copy = strndup(content, len);
    if (copy == NULL) {
        run_error("out of memory for a message of %zu bytes", len);
        return RUN_ERROR;
    }
    c->msgs[c->n++] = (hydra_chat_message){.role = role, .content = copy};
    return RUN_OK;
}

/* One line of input without its newline; NULL at the end of input or on Ctrl-C. */
static char *read_line(char **buf, size_t *cap)
{
    fputs("> ", stdout);
    fflush(stdout);
    errno = 0;
    ssize_t n = getline(buf, cap, stdin);
    if (n < 0) {
        fputs("\n", stdout); /* the shell's prompt starts on a line of its own */
        return NULL;
    }
    if (n > 0 && (*buf)[n - 1] == '\n')
        (*buf)[--n] = '\0';
    return *buf;
}

typedef struct chat {
    const run_opts *o;
    gen_ctx g;
    hydra_chat_template *tmpl;
    hydra_chat_params params;
    conversation conv;
} chat;

static int open_chat(chat *c, const run_opts *o, const hydra_model *m, double load_start)
{
    const char *text;
    *c = (chat){.o = o, .params = hydra_chat_default_params()};
    if (o->prompt_ids || o->logits_out || o->print_ids) {
        run_error("chat mode takes text: --prompt-tokens, --logits-out and --print-ids need -no-cnv");
        return RUN_ERROR;
    }
    hydra_status st = hydra_chat_model_template(m, o->chat_template, &text);
    if (st == HYDRA_OK)
        st = hydra_chat_template_new(text, &c->tmpl);
    if (st != HYDRA_OK) {
        run_error("chat template: %s", hydra_last_error());
        return RUN_ERROR;
    }
    c->params.add_generation_prompt = true;
    hydra_chat_model_tokens(m, &c->params);
    if (o->system_prompt != NULL &&
        add_message(&c->conv, "system", o->system_prompt, strlen(o->system_prompt)) != RUN_OK)
        return RUN_ERROR;
    return gen_open(&c->g, o, m, 0, load_start);
}

static void close_chat(chat *c)
{
    gen_close(&c->g);
    hydra_chat_template_free(c->tmpl);
    conversation_free(&c->conv);
}

/* The conversation rendered and evaluated, up to the assistant's header. */
static int feed_conversation(chat *c)
{
    char *text = NULL;
    size_t len = 0, n = 0;
    hydra_token *ids = NULL;
    if (hydra_chat_apply(c->tmpl, c->conv.msgs, c->conv.n, &c->params, &text, &len) != HYDRA_OK) {
        run_error("chat template: %s", hydra_last_error());
        return RUN_ERROR;
    }
    int rc = run_tokenize_text(c->g.model, text, len, true, &ids, &n);
    if (rc == RUN_OK && c->o->verbose_prompt) {
        fprintf(stderr, "hydra-run: the conversation as the template renders it:\n%s\n", text);
        run_print_tokens(c->g.model, ids, n);
    }
    if (rc == RUN_OK)
        rc = gen_feed(&c->g, ids, n, NULL);
    free(ids);
    free(text);
    return rc;
}

/* One exchange: the user's message in, the reply streamed and kept. */
static int turn(chat *c, const char *user, size_t len, gen_end *end)
{
    run_interrupted = 0; /* a Ctrl-C from now on stops this reply */
    if (add_message(&c->conv, "user", user, len) != RUN_OK || feed_conversation(c) != RUN_OK)
        return RUN_ERROR;
    gen_output out = {.text_start = true, .keep = true};
    *end = gen_run(&c->g, c->o->n_predict, &out);
    run_interrupted = 0; /* and one at the input prompt leaves */
    printf("\n");
    int rc = add_message(&c->conv, "assistant", out.reply ? out.reply : "", out.reply_len);
    free(out.reply);
    if (*end == GEN_CONTEXT)
        fprintf(stderr, "hydra-run: the context is full (%u tokens; -c sets its size)\n",
                hydra_session_n_ctx(c->g.session));
    return *end == GEN_ERROR ? RUN_ERROR : rc;
}

int run_chat(const run_opts *o, const hydra_model *m, double load_start)
{
    chat c;
    prompt_text first;
    if (run_prompt_text(o, &first) != RUN_OK)
        return RUN_ERROR;
    run_catch_interrupts();
    int rc = open_chat(&c, o, m, load_start);
    char *line = NULL;
    size_t cap = 0;
    if (rc == RUN_OK)
        gen_print_sampling(&c.g);
    gen_end end = GEN_LENGTH;
    const char *pending = first.text; /* -p or -f: the first message */
    while (rc == RUN_OK && end != GEN_CONTEXT) {
        const char *user = pending ? pending : read_line(&line, &cap);
        const size_t len = pending ? first.len : user ? strlen(user) : 0;
        pending = NULL;
        if (user == NULL || strcmp(user, "/exit") == 0)
            break;
        if (len > 0)
            rc = turn(&c, user, len, &end);
    }
    if (c.g.session != NULL)
        gen_print_timing(&c.g);
    free(line);
    if (rc == RUN_OK)
        rc = gen_save_profile(&c.g);
    close_chat(&c);
    free(first.owned);
    return rc;
}
