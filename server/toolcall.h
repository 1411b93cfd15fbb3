/*
 * toolcall.h — tool calls in a chat model's output, as OpenAI's
 * `tool_calls`.  Models whose chat template writes calls between
 * <tool_call> and </tool_call> (Qwen2.5, Qwen3 and other Hermes-style
 * templates: a JSON object {"name", "arguments"}; GLM-4.5/4.6: the name,
 * then <arg_key>K</arg_key><arg_value>V</arg_value> pairs) are parsed;
 * templates whose calls are marked by control tokens (Llama 3, Mistral,
 * DeepSeek, Kimi, gpt-oss's harmony) never show their markers in the text
 * and are not.
 *
 * The filter takes the reply's text piece by piece (as it streams) and
 * passes on what is not part of a call; text that may begin a call is
 * held until it is known.  A block that does not parse as a call is passed
 * on as text.  Depends on cJSON and libc only (tests include it).
 */
#ifndef HYDRA_SERVE_TOOLCALL_H
#define HYDRA_SERVE_TOOLCALL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum toolcall_format {
    TOOLCALL_NONE,   /* the template writes no textual call markers */
    TOOLCALL_TAGGED, /* <tool_call>...</tool_call> */
} toolcall_format;

/* The format of a chat template's text (NULL: none). */
toolcall_format toolcall_format_of(const char *template_text);

typedef struct toolcall_filter {
    char *held;         /* text that may be (part of) a call */
    size_t held_len, held_cap;
    char *out;          /* the text passed on by the last push or flush */
    size_t out_len, out_cap;
    bool in_call;       /* held is a call's body so far */
    bool with_index;    /* streaming deltas number their calls ("index") */
    int n_calls;
    uint64_t id_state;  /* makes the calls' ids */
} toolcall_filter;

/* id_seed: any number that differs between requests (the ids are
 * "call_" and 24 hex digits derived from it). */
void toolcall_init(toolcall_filter *f, bool with_index, uint64_t id_seed);
void toolcall_free(toolcall_filter *f);

/* Takes text[0, len).  *pass (owned by the filter, valid until its next
 * call) receives the text to show now; *calls a new array of the calls
 * completed by this text (the caller owns it), or NULL.  False when out
 * of memory. */
bool toolcall_push(toolcall_filter *f, const char *text, size_t len, const char **pass, size_t *pass_len,
                   cJSON **calls);

/* The end of the reply: what is still held (a call never closed) as text. */
bool toolcall_flush(toolcall_filter *f, const char **pass, size_t *pass_len);

#endif
