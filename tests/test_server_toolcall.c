/*
 * hydra-serve's tool-call parser (server/toolcall.c): a chat model's
 * <tool_call> blocks become OpenAI tool_calls, whole or streamed a byte at
 * a time, in Qwen's JSON form and GLM's arg_key/arg_value form; what is not
 * a call stays text.  The server's source is compiled in here: the test
 * binary does not link the server, and the parser depends on cJSON only.
 */
#include "../server/toolcall.c"

#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text passed and the calls found for input pushed in pieces of
 * `step` bytes (0: whole), then flushed. */
typedef struct parsed {
    char text[1024];
    cJSON *calls; /* array, possibly empty */
} parsed;

static bool run(const char *input, size_t step, bool with_index, parsed *out)
{
    toolcall_filter f;
    toolcall_init(&f, with_index, 42);
    out->text[0] = '\0';
    out->calls = cJSON_CreateArray();
    const size_t len = strlen(input);
    const size_t piece = step ? step : len;
    bool ok = out->calls != NULL;
    const char *pass;
    size_t pass_len;
    for (size_t at = 0; ok && at < len; at += piece) {
        cJSON *calls = NULL;
        const size_t n = len - at < piece ? len - at : piece;
        ok = toolcall_push(&f, input + at, n, &pass, &pass_len, &calls);
        strncat(out->text, pass, pass_len);
        for (cJSON *c; calls != NULL && (c = cJSON_DetachItemFromArray(calls, 0)) != NULL;)
            cJSON_AddItemToArray(out->calls, c);
        cJSON_Delete(calls);
    }
    ok = ok && toolcall_flush(&f, &pass, &pass_len);
    strncat(out->text, pass, pass_len);
    toolcall_free(&f);
    return ok;
}

static const char *fn_field(const cJSON *call, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(call, "function"), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *QWEN = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                          "</tool_call>";

TEST(server_toolcall_qwen_json_call)
{
    parsed p;
    CHECK(run(QWEN, 0, false, &p));
    const cJSON *call = cJSON_GetArrayItem(p.calls, 0);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(call, "type");
    const bool shape = cJSON_GetArraySize(p.calls) == 1 && cJSON_IsString(id) && strncmp(id->valuestring, "call_", 5) == 0 &&
                       strlen(id->valuestring) == 29 && cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0 &&
                       cJSON_GetObjectItemCaseSensitive(call, "index") == NULL;
    char name[64], args[128];
    snprintf(name, sizeof name, "%s", fn_field(call, "name"));
    snprintf(args, sizeof args, "%s", fn_field(call, "arguments"));
    cJSON_Delete(p.calls);
    CHECK(shape);
    CHECK_EQ_STR(p.text, "Let me check.\n");
    CHECK_EQ_STR(name, "get_weather");
    CHECK_EQ_STR(args, "{\"city\":\"Paris\"}");
}

TEST(server_toolcall_streamed_byte_by_byte)
{
    parsed whole, bytes;
    CHECK(run(QWEN, 0, true, &whole));
    CHECK(run(QWEN, 1, true, &bytes));
    const bool same = cJSON_GetArraySize(bytes.calls) == 1 &&
                      strcmp(fn_field(cJSON_GetArrayItem(bytes.calls, 0), "arguments"),
                             fn_field(cJSON_GetArrayItem(whole.calls, 0), "arguments")) == 0;
    cJSON_Delete(whole.calls);
    cJSON_Delete(bytes.calls);
    CHECK(same);
    CHECK_EQ_STR(bytes.text, whole.text);
}

TEST(server_toolcall_two_calls_numbered_when_streaming)
{
    parsed p;
    CHECK(run("<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"x\\\":1}\"}"
              "</tool_call>", 7, true, &p));
    const cJSON *second = cJSON_GetArrayItem(p.calls, 1);
    const int n = cJSON_GetArraySize(p.calls);
    const int index = cJSON_GetObjectItemCaseSensitive(second, "index") ? cJSON_GetObjectItemCaseSensitive(second, "index")->valueint : -1;
    char args[64];
    snprintf(args, sizeof args, "%s", fn_field(second, "arguments"));
    cJSON_Delete(p.calls);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(index, 1);
    CHECK_EQ_STR(args, "{\"x\":1}"); /* string arguments are passed as they are */
    CHECK_EQ_STR(p.text, "\n");
}

TEST(server_toolcall_glm_arg_pairs)
{
    parsed p;
    CHECK(run("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
              "<arg_value>3</arg_value>\n</tool_call>", 5, false, &p));
    char name[64], args[128];
    snprintf(name, sizeof name, "%s", fn_field(cJSON_GetArrayItem(p.calls, 0), "name"));
    snprintf(args, sizeof args, "%s", fn_field(cJSON_GetArrayItem(p.calls, 0), "arguments"));
    cJSON_Delete(p.calls);
    CHECK_EQ_STR(name, "get_weather");
    CHECK_EQ_STR(args, "{\"city\":\"Paris\",\"days\":3}");
    CHECK_EQ_STR(p.text, "");
}

TEST(server_toolcall_non_calls_stay_text)
{
    static const char *inputs[] = {
        "a <toolbox> b <tool_cal",                       /* a near miss, and a prefix at the very end */
        "x <tool_call>{oops</tool_call> y",              /* not JSON, not a name */
        "<tool_call>hello world</tool_call>",            /* prose, not a function name */
        "<tool_call>{\"arguments\":{}}</tool_call>",     /* no name */
        "before <tool_call>{\"name\":\"f\"",             /* never closed */
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        parsed p;
        CHECK(run(inputs[i], 3, true, &p));
        const int n = cJSON_GetArraySize(p.calls);
        cJSON_Delete(p.calls);
        CHECK_EQ_INT(n, 0);
        CHECK_EQ_STR(p.text, inputs[i]);
    }
}

TEST(server_toolcall_format_of_shared_templates)
{
    REQUIRE_SHARED();
    static const struct {
        const char *file;
        toolcall_format format;
    } cases[] = {
        {"Qwen-Qwen3-0.6B.jinja", TOOLCALL_TAGGED},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", TOOLCALL_TAGGED},
        {"GLM-4.6.jinja", TOOLCALL_TAGGED},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", TOOLCALL_NONE},
        {"openai-gpt-oss-120b.jinja", TOOLCALL_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/chat/%s", test_shared_dir(), cases[i].file);
        size_t size;
        uint8_t *text = util_read_file(path, &size);
        CHECK(text != NULL);
        char *z = realloc(text, size + 1);
        CHECK(z != NULL);
        z[size] = '\0';
        const toolcall_format got = toolcall_format_of(z);
        free(z);
        CHECK_EQ_INT(got, cases[i].format);
    }
}
