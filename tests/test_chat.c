/*
 * test_chat.c — chat templates: every rendering in ../shared/chat/goldens.json
 * (jinja2 as transformers configures it) reproduced byte for byte; Jinja
 * semantics against outputs recorded from jinja2 3.1; error messages with
 * line and column; limits against hostile templates.
 */
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* strftime_now's fixed time in the goldens: 2024-07-26 00:00:00. */
#define GOLDEN_TIME 1721952000

/* ------------------------------------------------------------ helpers */

/* bytes[0..n) with \n, \t, \r, " and \\ escaped, into out (truncated). */
static void escape_into(char *out, size_t size, const char *bytes, size_t n)
{
    size_t o = 0;
    for (size_t k = 0; k < n && o + 5 < size; k++) {
        char c = bytes[k];
        const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '"' ? "\\\"" : c == '\\' ? "\\\\" : NULL;
        if (esc) {
            memcpy(out + o, esc, 2);
            o += 2;
        } else {
            out[o++] = c;
        }
    }
    out[o] = '\0';
}

/* Writes "first difference at byte N" with both strings around it. */
static void describe_difference(const char *got, size_t got_len, const char *want, size_t want_len, char *msg,
                                size_t size)
{
    size_t k = 0;
    while (k < got_len && k < want_len && got[k] == want[k])
        k++;
    size_t from = k > 40 ? k - 40 : 0;
    char got_text[256], want_text[256];
    escape_into(got_text, sizeof got_text, got + from, (got_len > k + 40 ? k + 40 : got_len) - from);
    escape_into(want_text, sizeof want_text, want + from, (want_len > k + 40 ? k + 40 : want_len) - from);
    snprintf(msg, size,
             "first difference at byte %zu (lengths %zu vs %zu), from byte %zu:\n      got:      \"%s\"\n"
             "      expected: \"%s\"",
             k, got_len, want_len, from, got_text, want_text);
}

/* A string item of a cJSON object, or NULL. */
static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

typedef struct golden_case {
    const char *template_file;
    const char *conversation;
    const char *expected;
    hydra_chat_params params;
    char *tools_json, *extra_json, *messages_json; /* owned */
} golden_case;

static void golden_case_read(const cJSON *c, golden_case *g)
{
    memset(g, 0, sizeof *g);
    g->template_file = json_str(c, "template");
    g->conversation = json_str(c, "conversation");
    g->expected = json_str(c, "expected");
    g->params = hydra_chat_default_params();
    g->params.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
    g->params.bos_token = json_str(c, "bos_token");
    g->params.eos_token = json_str(c, "eos_token");
    g->params.fixed_time = true;
    g->params.fixed_now = GOLDEN_TIME;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
    if (tools && !cJSON_IsNull(tools))
        g->tools_json = cJSON_PrintUnformatted(tools);
    const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(c, "kwargs");
    if (kwargs && cJSON_GetArraySize(kwargs) > 0)
        g->extra_json = cJSON_PrintUnformatted(kwargs);
    g->messages_json = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "messages"));
    g->params.tools_json = g->tools_json;
    g->params.extra_json = g->extra_json;
}

static void golden_case_free(golden_case *g)
{
    free(g->tools_json);
    free(g->extra_json);
    free(g->messages_json);
}

static char *read_template(const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/chat/%s", test_shared_dir(), file);
    size_t size;
    uint8_t *bytes = util_read_file(path, &size);
    if (bytes == NULL)
        return NULL;
    char *text = realloc(bytes, size + 1);
    if (text)
        text[size] = '\0';
    return text;
}

static cJSON *read_goldens(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/chat/goldens.json", test_shared_dir());
    return util_read_json(path);
}

/* Renders one golden case with `apply`; on mismatch writes why into msg. */
typedef hydra_status (*apply_fn)(const hydra_chat_template *tmpl, const cJSON *c, const golden_case *g, char **out,
                                 size_t *len);

static bool check_case(const cJSON *c, apply_fn apply, char *msg, size_t size)
{
    golden_case g;
    golden_case_read(c, &g);
    bool ok = false;
    char *text = read_template(g.template_file);
    hydra_chat_template *tmpl = NULL;
    char *out = NULL;
    size_t len = 0;
    if (text == NULL || g.expected == NULL || g.messages_json == NULL) {
        snprintf(msg, size, "cannot read the case or its template");
    } else if (hydra_chat_template_new(text, &tmpl) != HYDRA_OK) {
        snprintf(msg, size, "template does not parse: %s", hydra_last_error());
    } else if (apply(tmpl, c, &g, &out, &len) != HYDRA_OK) {
        snprintf(msg, size, "render failed: %s", hydra_last_error());
    } else if (len != strlen(g.expected) || memcmp(out, g.expected, len) != 0) {
        describe_difference(out, len, g.expected, strlen(g.expected), msg, size);
    } else {
        ok = true;
    }
    free(out);
    hydra_chat_template_free(tmpl);
    free(text);
    golden_case_free(&g);
    return ok;
}

/* Runs the cases `wanted` accepts (all when NULL) through apply; returns
 * how many render exactly, *total how many ran, failure the first miss. */
static int run_goldens(apply_fn apply, bool (*wanted)(const cJSON *c), const char *label, int *total, char *failure,
                       size_t size)
{
    *total = 0;
    snprintf(failure, size, "cannot read goldens.json");
    cJSON *goldens = read_goldens();
    if (goldens == NULL)
        return -1;
    failure[0] = '\0';
    int exact = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(goldens, "cases"))
    {
        if (wanted && !wanted(c))
            continue;
        ++*total;
        char msg[1024];
        if (check_case(c, apply, msg, sizeof msg))
            exact++;
        else if (failure[0] == '\0')
            snprintf(failure, size, "%s, conversation %s, add_generation_prompt %s: %s", json_str(c, "template"),
                     json_str(c, "conversation"),
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")) ? "true" : "false",
                     msg);
    }
    printf("  chat goldens (%s): %d/%d exact\n", label, exact, *total);
    cJSON_Delete(goldens);
    return exact;
}

#define CHECK_GOLDENS(apply, wanted, label, expected_total)                   \
    do {                                                                      \
        int total_;                                                           \
        char failure_[1536];                                                  \
        int exact_ = run_goldens(apply, wanted, label, &total_, failure_, sizeof failure_); \
        if (exact_ != total_ || total_ != (expected_total))                   \
            FAIL("%d/%d exact (expected %d cases); first failure: %s", exact_, total_, expected_total, failure_); \
    } while (0)

/* ------------------------------------------------------------- goldens */

static hydra_status apply_json(const hydra_chat_template *tmpl, const cJSON *c, const golden_case *g, char **out,
                               size_t *len)
{
    (void)c;
    return hydra_chat_apply_json(tmpl, g->messages_json, &g->params, out, len);
}

TEST(chat_goldens_exact)
{
    REQUIRE_SHARED();
    CHECK_GOLDENS(apply_json, NULL, "messages as JSON", 132);
}

/* The same conversations through hydra_chat_message: the reasoning field
 * (reasoning_content, or thinking for gpt-oss) goes in reasoning_content. */
static hydra_status apply_struct(const hydra_chat_template *tmpl, const cJSON *c, const golden_case *g, char **out,
                                 size_t *len)
{
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(c, "messages");
    int n = cJSON_GetArraySize(messages);
    hydra_chat_message *m = calloc((size_t)n + 1, sizeof *m);
    char **calls = calloc((size_t)n + 1, sizeof *calls);
    hydra_status st = HYDRA_ERR_NOMEM;
    if (m && calls) {
        for (int k = 0; k < n; k++) {
            const cJSON *msg = cJSON_GetArrayItem(messages, k);
            m[k].role = json_str(msg, "role");
            m[k].content = json_str(msg, "content");
            m[k].reasoning_content = json_str(msg, "reasoning_content");
            if (m[k].reasoning_content == NULL)
                m[k].reasoning_content = json_str(msg, "thinking");
            m[k].tool_call_id = json_str(msg, "tool_call_id");
            m[k].name = json_str(msg, "name");
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
            if (tc)
                m[k].tool_calls_json = calls[k] = cJSON_PrintUnformatted(tc);
        }
        st = hydra_chat_apply(tmpl, m, (size_t)n, &g->params, out, len);
    }
    for (int k = 0; calls && k < n; k++)
        free(calls[k]);
    free(calls);
    free(m);
    return st;
}

TEST(chat_goldens_message_structs)
{
    REQUIRE_SHARED();
    CHECK_GOLDENS(apply_struct, NULL, "hydra_chat_message", 132);
}
