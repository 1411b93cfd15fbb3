/*
 * hydra-serve generating: response and stream shapes, max_tokens, stop
 * strings, seeds, the prompt cache (same output with and without it at
 * temperature 0), slot files, metrics, chat templates, and requests that
 * go away (disconnect mid-stream, mid-prefill, while queued; a full queue).
 */
#include "server/server_util.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

/* What a non-streaming response said. */
typedef struct reply {
    int status;
    char text[4096];
    char finish[16];
    int prompt_tokens, completion_tokens, cached_tokens;
} reply;

/* POSTs body to path and reads the reply (chat message or completion text). */
static bool post(int port, const char *path, const char *body, reply *out)
{
    ts_resp r;
    memset(out, 0, sizeof *out);
    if (!ts_request(port, "POST", path, NULL, body, &r))
        return false;
    out->status = r.status;
    cJSON *j = ts_json(&r);
    ts_resp_free(&r);
    ts_first_choice(j, out->text, sizeof out->text, out->finish, sizeof out->finish);
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    out->prompt_tokens = ts_number(usage, "prompt_tokens", NULL);
    out->completion_tokens = ts_number(usage, "completion_tokens", NULL);
    out->cached_tokens = ts_number(usage, "prompt_tokens_details", "cached_tokens");
    cJSON_Delete(j);
    return true;
}

static const char *PROMPT = "The river runs past the old mill and under the stone bridge, where the children of "
                            "the village stand in the evening and throw small boats";

TEST(server_completion_shapes_length_and_usage)
{
    test_server s;
    reply a;
    TS_START(s, NULL, "");
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":7,\"temperature\":0,\"ignore_eos\":true}", PROMPT);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &a) && a.status == 200);
    TS_CHECK(s, strcmp(a.finish, "length") == 0 && a.completion_tokens == 7 && a.prompt_tokens > 10);
    /* chat: message.role, the same accounting */
    TS_CHECK(s, post(s.port, "/v1/chat/completions",
                   "{\"model\":\"anything\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}]}],"
                   "\"max_completion_tokens\":5,\"ignore_eos\":true}",
                   &a) &&
                  a.status == 200 && strcmp(a.finish, "length") == 0 && a.completion_tokens == 5);
    ts_resp r;
    TS_CHECK(s, ts_request(s.port, "POST", "/v1/chat/completions", NULL,
                         "{\"model\":\"anything\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}",
                         &r) &&
                  r.status == 200 && strstr(r.body, "\"object\":\"chat.completion\"") &&
                  strstr(r.body, "\"role\":\"assistant\"") && strstr(r.body, "\"model\":\"anything\"") &&
                  strstr(r.body, "\"timings\":{") && strstr(r.body, "\"id\":\"chatcmpl-"));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* Streams body and parses the events. */
static bool stream(int port, const char *path, const char *body, ts_stream *st)
{
    ts_resp r;
    if (!ts_request(port, "POST", path, NULL, body, &r) || r.status != 200 ||
        strcmp(ts_header(&r, "Content-Type") ? ts_header(&r, "Content-Type") : "", "text/event-stream") != 0) {
        ts_resp_free(&r);
        return false;
    }
    ts_parse_stream(r.body, r.body_len, st);
    ts_resp_free(&r);
    return true;
}

TEST(server_streams_match_the_whole_response)
{
    test_server s;
    reply a;
    ts_stream st;
    TS_START(s, NULL, "");
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about the river\"}],"
                       "\"max_tokens\":24,\"temperature\":0%s}";
    char body[512];
    snprintf(body, sizeof body, chat, "");
    TS_CHECK(s, post(s.port, "/v1/chat/completions", body, &a) && a.status == 200);
    snprintf(body, sizeof body, chat, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    TS_CHECK(s, stream(s.port, "/v1/chat/completions", body, &st));
    const bool ok = st.well_formed && st.done && st.role_first && strcmp(st.text, a.text) == 0 &&
                    strcmp(st.finish, a.finish) == 0 && st.usage_choices_empty &&
                    ts_number(st.usage, "completion_tokens", NULL) == a.completion_tokens &&
                    ts_number(st.usage, "prompt_tokens", NULL) == a.prompt_tokens;
    if (!ok)
        printf("stream: %s / text '%s' vs '%s'\n", st.error, st.text, a.text);
    ts_stream_free(&st);
    TS_CHECK(s, ok);
    /* completions stream, no usage asked: no usage chunk */
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":6,\"stream\":true,\"ignore_eos\":true}", PROMPT);
    TS_CHECK(s, stream(s.port, "/v1/completions", body, &st));
    const bool ok2 = st.well_formed && st.done && st.usage == NULL && strcmp(st.finish, "length") == 0;
    ts_stream_free(&st);
    TS_CHECK(s, ok2);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_stop_strings_cut_the_text)
{
    test_server s;
    reply a, b;
    TS_START(s, NULL, "");
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}", PROMPT);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &a) && a.status == 200 && strlen(a.text) >= 12);
    /* a stop string from the middle of the greedy text: printable ASCII only, so it survives JSON as is */
    const size_t len = strlen(a.text);
    size_t at = len / 2;
    while (at < len - 3 && !(a.text[at] > 0x20 && a.text[at] < 0x7f && a.text[at] != '"' && a.text[at] != '\\'))
        at++;
    if (at >= len - 3) {
        ts_stop(&s);
        SKIP("the greedy text has no printable ASCII to use as a stop string: %s", a.text);
    }
    char stop[2] = {a.text[at], 0};
    const char *first = strstr(a.text, stop);
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true,\"stop\":[\"zzz-none\",\"%s\"]}",
             PROMPT, stop);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &b) && b.status == 200);
    TS_CHECK(s, strcmp(b.finish, "stop") == 0 && strlen(b.text) == (size_t)(first - a.text) &&
                  strncmp(b.text, a.text, strlen(b.text)) == 0);
    /* the same through a stream */
    ts_stream st;
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"stop\":\"%s\"}",
             PROMPT, stop);
    TS_CHECK(s, stream(s.port, "/v1/completions", body, &st));
    const bool ok = st.done && strcmp(st.text, b.text) == 0 && strcmp(st.finish, "stop") == 0;
    ts_stream_free(&st);
    TS_CHECK(s, ok);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_seed_reproduces_sampling)
{
    test_server s;
    reply a, b, c;
    TS_START(s, NULL, "");
    char body[1024];
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":1.0,\"top_k\":0,\"top_p\":1,\"min_p\":0,"
             "\"seed\":%d,\"ignore_eos\":true}",
             PROMPT, 1234);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &a) && a.status == 200);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &b) && b.status == 200);
    TS_CHECK(s, strcmp(a.text, b.text) == 0 && b.cached_tokens > 0); /* the second from the cache */
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":1.0,\"top_k\":0,\"top_p\":1,\"min_p\":0,"
             "\"seed\":%d,\"ignore_eos\":true}",
             PROMPT, 99);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &c) && c.status == 200);
    TS_CHECK(s, strcmp(a.text, c.text) != 0); /* 24 draws from ~500 tokens at temperature 1 */
    CHECK_EQ_INT(ts_stop(&s), 0);
}

static bool erase_all(int port, int n_slots)
{
    bool ok = true;
    for (int i = 0; i < n_slots && ok; i++) {
        char path[64];
        ts_resp r;
        snprintf(path, sizeof path, "/slots/%d?action=erase", i);
        ok = ts_request(port, "POST", path, NULL, "{}", &r) && r.status == 200;
        ts_resp_free(&r);
    }
    return ok;
}

TEST(server_prompt_cache_gives_identical_greedy_output)
{
    test_server s;
    reply first, again, longer, cold;
    TS_START(s, NULL, "");
    char body[2048];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":20,\"temperature\":0,"
             "\"ignore_eos\":true}",
             PROMPT);
    TS_CHECK(s, post(s.port, "/v1/chat/completions", body, &first) && first.status == 200 && first.cached_tokens == 0);
    TS_CHECK(s, post(s.port, "/v1/chat/completions", body, &again) && again.status == 200);
    TS_CHECK(s, again.cached_tokens == again.prompt_tokens - 1 && strcmp(again.text, first.text) == 0);
    /* a follow-up turn shares the first turn's tokens */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"},{\"role\":\"assistant\",\"content\":\"ok\"},"
             "{\"role\":\"user\",\"content\":\"and then?\"}],\"max_tokens\":20,\"temperature\":0,\"ignore_eos\":true}",
             PROMPT);
    TS_CHECK(s, post(s.port, "/v1/chat/completions", body, &longer) && longer.status == 200);
    TS_CHECK(s, longer.cached_tokens >= first.prompt_tokens - 4);
    TS_CHECK(s, erase_all(s.port, 4));
    TS_CHECK(s, post(s.port, "/v1/chat/completions", body, &cold) && cold.status == 200 && cold.cached_tokens == 0);
    TS_CHECK(s, strcmp(cold.text, longer.text) == 0);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_slot_save_and_restore)
{
    char dir[4096], args[4200], file[4300];
    snprintf(dir, sizeof dir, "%s", util_scratch_path("server-slots"));
    snprintf(args, sizeof args, "-np 1 --slot-save-path %s", dir);
    char mk[4200];
    snprintf(mk, sizeof mk, "mkdir -p %s", dir);
    CHECK(system(mk) == 0);
    test_server s;
    reply a, b;
    ts_resp r;
    TS_START(s, NULL, args);
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}", PROMPT);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &a) && a.status == 200);
    TS_CHECK(s, ts_request(s.port, "POST", "/slots/0?action=save", NULL, "{\"filename\":\"one.slot\"}", &r) &&
                  r.status == 200 && strstr(r.body, "\"n_saved\":"));
    cJSON *j = ts_json(&r);
    const int n_saved = ts_number(j, "n_saved", NULL);
    cJSON_Delete(j);
    ts_resp_free(&r);
    TS_CHECK(s, n_saved == a.prompt_tokens + 3); /* the prompt and all but the last generated token */
    TS_CHECK(s, erase_all(s.port, 1));
    TS_CHECK(s, ts_request(s.port, "POST", "/slots/0?action=restore", NULL, "{\"filename\":\"one.slot\"}", &r) &&
                  r.status == 200);
    j = ts_json(&r);
    const int n_restored = ts_number(j, "n_restored", NULL);
    cJSON_Delete(j);
    ts_resp_free(&r);
    TS_CHECK(s, n_restored == n_saved);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &b) && b.status == 200 && b.cached_tokens == b.prompt_tokens - 1 &&
                  strcmp(a.text, b.text) == 0);
    /* hostile names and files */
    TS_CHECK(s, ts_request(s.port, "POST", "/slots/0?action=save", NULL, "{\"filename\":\"../evil\"}", &r) &&
                  ts_is_error(&r, 400, "invalid_request_error", "filename"));
    ts_resp_free(&r);
    TS_CHECK(s, ts_request(s.port, "POST", "/slots/0?action=restore", NULL, "{\"filename\":\"absent.slot\"}", &r) &&
                  r.status == 404);
    ts_resp_free(&r);
    TS_CHECK(s, ts_request(s.port, "POST", "/slots/7?action=save", NULL, "{\"filename\":\"x\"}", &r) && r.status == 400);
    ts_resp_free(&r);
    TS_CHECK(s, ts_request(s.port, "POST", "/slots/0?action=fly", NULL, "{}", &r) && r.status == 400);
    ts_resp_free(&r);
    snprintf(file, sizeof file, "%s/one.slot", dir);
    size_t size;
    uint8_t *bytes = util_read_file(file, &size);
    TS_CHECK(s, bytes != NULL && size > 40);
    bytes[34] ^= 1; /* a token's byte: the checksum no longer holds */
    util_write_file(file, bytes, size);
    free(bytes);
    TS_CHECK(s, ts_request(s.port, "POST", "/slots/0?action=restore", NULL, "{\"filename\":\"one.slot\"}", &r) &&
                  ts_is_error(&r, 400, "invalid_request_error", "checksum"));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* A slot action's JSON answer; NULL unless the status is 200. */
static cJSON *slot_action(int port, int slot, const char *action, const char *filename)
{
    char path[64], body[256];
    snprintf(path, sizeof path, "/slots/%d?action=%s", slot, action);
    snprintf(body, sizeof body, "{\"filename\":\"%s\"}", filename);
    ts_resp r;
    if (!ts_request(port, "POST", path, NULL, body, &r))
        return NULL;
    cJSON *j = r.status == 200 ? ts_json(&r) : NULL;
    ts_resp_free(&r);
    return j;
}

/* The slot file holds the keys and values: restored into another slot it
 * evaluates nothing, and the next request reuses it and answers the same. */
TEST(server_slot_restore_reads_the_kv_cache)
{
    char dir[4096], args[4200], mk[4200];
    snprintf(dir, sizeof dir, "%s", util_scratch_path("server-slots-kv"));
    snprintf(args, sizeof args, "-np 2 --slot-save-path %s", dir);
    snprintf(mk, sizeof mk, "mkdir -p %s", dir);
    CHECK(system(mk) == 0);
    test_server s;
    reply a, b;
    TS_START(s, NULL, args);
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true}", PROMPT);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &a) && a.status == 200);
    /* the request ran in one of the two slots: save both, keep the full one */
    cJSON *saved[2] = {slot_action(s.port, 0, "save", "s0.slot"), slot_action(s.port, 1, "save", "s1.slot")};
    const int n0 = ts_number(saved[0], "n_saved", NULL), n1 = ts_number(saved[1], "n_saved", NULL);
    const int full = n0 > 0 ? 0 : 1, n_saved = n0 > 0 ? n0 : n1;
    const int n_written = ts_number(saved[full], "n_written", NULL);
    cJSON_Delete(saved[0]);
    cJSON_Delete(saved[1]);
    TS_CHECK(s, n_saved == a.prompt_tokens + 5 && n_written > 40 + 4 * n_saved + 1000); /* tokens and their K/V rows */
    TS_CHECK(s, erase_all(s.port, 2));
    cJSON *restored = slot_action(s.port, 1 - full, "restore", full == 0 ? "s0.slot" : "s1.slot");
    const int n_restored = ts_number(restored, "n_restored", NULL), n_evaluated = ts_number(restored, "n_evaluated", NULL);
    cJSON_Delete(restored);
    TS_CHECK(s, n_restored == n_saved && n_evaluated == 0);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &b) && b.status == 200 && b.cached_tokens == b.prompt_tokens - 1 &&
                  strcmp(a.text, b.text) == 0);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* Offering tools switches on the reply's tool-call parsing (the tiny
 * model's template writes <tool_call> blocks); a reply without a call is
 * an ordinary message: content text, no tool_calls, finish_reason length. */
TEST(server_chat_with_tools_and_no_call_is_a_plain_message)
{
    test_server s;
    TS_START(s, NULL, "");
    ts_resp r;
    TS_CHECK(s, ts_request(s.port, "POST", "/v1/chat/completions", NULL,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":6,"
                         "\"ignore_eos\":true,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                         "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}",
                         &r) &&
                  r.status == 200);
    cJSON *j = ts_json(&r);
    ts_resp_free(&r);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(choice, "message");
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    const bool plain = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(msg, "content")) &&
                       cJSON_GetObjectItemCaseSensitive(msg, "tool_calls") == NULL && cJSON_IsString(finish) &&
                       strcmp(finish->valuestring, "length") == 0;
    cJSON_Delete(j);
    TS_CHECK(s, plain);
    TS_CHECK(s, ts_request(s.port, "POST", "/v1/chat/completions", NULL,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[],\"tool_choice\":3}", &r) &&
                  ts_is_error(&r, 400, "invalid_request_error", "tool_choice"));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_metrics_count_tokens_and_latency)
{
    test_server s;
    reply a;
    ts_resp r;
    TS_START(s, NULL, "--metrics");
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":5,\"ignore_eos\":true}", PROMPT);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &a) && a.status == 200);
    TS_CHECK(s, post(s.port, "/v1/completions", body, &a) && a.status == 200 && a.cached_tokens > 0);
    TS_CHECK(s, ts_request(s.port, "GET", "/metrics", NULL, NULL, &r) && r.status == 200);
    char line[128];
    snprintf(line, sizeof line, "hydra:tokens_generated_total 10\n");
    const bool ok = strstr(r.body, line) && strstr(r.body, "hydra:prompt_cache_hits_total 1\n") &&
                    strstr(r.body, "hydra:time_to_first_token_seconds_count 2\n") &&
                    strstr(r.body, "hydra:inter_token_latency_seconds_count 8\n") &&
                    strstr(r.body, "hydra:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n") &&
                    strstr(r.body, "# TYPE hydra:requests_running gauge") &&
                    strstr(r.body, "hydra:requests_finished_total{reason=\"length\"} 2\n") &&
                    strstr(r.body, "hydra:kv_cache_usage_ratio");
    if (!ok)
        printf("%s\n", r.body);
    ts_resp_free(&r);
    TS_CHECK(s, ok);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* The tiny model with its tokenizer.chat_template key renamed (same length). */
static const char *model_without_template(void)
{
    static char path[4096];
    size_t size;
    uint8_t *bytes = util_read_file(ts_model(), &size);
    static const char key[] = "tokenizer.chat_template";
    uint8_t *at = bytes ? memmem(bytes, size, key, sizeof key - 1) : NULL;
    if (at == NULL) {
        free(bytes);
        return NULL;
    }
    at[sizeof key - 2] = 'X';
    snprintf(path, sizeof path, "%s", util_scratch_path("server-notemplate.gguf"));
    const int rc = util_write_file(path, bytes, size);
    free(bytes);
    return rc == 0 ? path : NULL;
}

TEST(server_chat_without_template_needs_chat_template_flag)
{
    const char *model = model_without_template();
    CHECK(model != NULL);
    test_server s;
    reply a;
    TS_START(s, model, "");
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}";
    ts_resp r;
    TS_CHECK(s, ts_request(s.port, "POST", "/v1/chat/completions", NULL, body, &r) &&
                  ts_is_error(&r, 400, "invalid_request_error", "--chat-template"));
    ts_resp_free(&r);
    TS_CHECK(s, post(s.port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2}", &a) && a.status == 200);
    CHECK_EQ_INT(ts_stop(&s), 0);
    TS_START(s, model, "--chat-template chatml");
    TS_CHECK(s, post(s.port, "/v1/chat/completions", body, &a) && a.status == 200);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* ------------------------------------------------------------ going away */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A generation that would run for a long time, on its own connection;
 * returns once the response head has arrived. */
static bool start_long(ts_conn *c, int port, const char *prompt)
{
    char body[65536];
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":1000000,\"ignore_eos\":true,\"stream\":true}", prompt);
    if (!ts_open(c, port, 20000) || !ts_send_request(c, "POST", "/v1/completions", NULL, body))
        return false;
    char *head = NULL;
    while ((head = memmem(c->buf, c->len, "\r\n\r\n", 4)) == NULL) {
        ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
        if (n <= 0)
            return false;
        c->len += (size_t)n;
    }
    return strncmp(c->buf, "HTTP/1.1 200", 12) == 0;
}

static long metric(int port, const char *name)
{
    ts_resp r;
    long v = -1;
    char line[128];
    snprintf(line, sizeof line, "\n%s", name); /* a sample, not the # HELP line */
    if (ts_request(port, "GET", "/metrics", NULL, NULL, &r) && r.status == 200) {
        const char *at = strstr(r.body, line);
        if (at != NULL)
            v = strtol(at + strlen(line), NULL, 10);
    }
    ts_resp_free(&r);
    return v;
}

/* A short request is served at once (within limit_ms). */
static bool served_quickly(int port, double limit_ms)
{
    reply a;
    const double t0 = now_ms();
    return post(port, "/v1/completions", "{\"prompt\":\"river\",\"max_tokens\":3}", &a) && a.status == 200 &&
           now_ms() - t0 < limit_ms;
}

/* Waits (up to 10 s) until the cancelled count reaches n. */
static bool cancelled_reaches(int port, long n)
{
    for (int i = 0; i < 1000; i++) {
        if (metric(port, "hydra:requests_finished_total{reason=\"cancelled\"} ") >= n)
            return true;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

TEST(server_disconnects_cancel_and_free_the_slot)
{
    test_server s;
    ts_conn a, b;
    TS_START(s, NULL, "-np 1 -b 16 -c 32768 --metrics --max-queue 1");
    /* mid-stream: the stream has begun; the client leaves */
    TS_CHECK(s, start_long(&a, s.port, "river"));
    char buf[256];
    TS_CHECK(s, recv(a.fd, buf, sizeof buf, 0) > 0); /* a data chunk */
    ts_close(&a);
    TS_CHECK(s, cancelled_reaches(s.port, 1));
    TS_CHECK(s, served_quickly(s.port, 2000));
    /* mid-prefill: a long prompt read 16 tokens a step; the client leaves at once */
    char *prompt = malloc(60000);
    prompt[0] = '\0';
    for (int i = 0; i < 2000; i++)
        strcat(prompt, "mill river ");
    TS_CHECK(s, start_long(&a, s.port, prompt));
    ts_close(&a);
    TS_CHECK(s, cancelled_reaches(s.port, 2));
    TS_CHECK(s, served_quickly(s.port, 2000));
    /* queued: one runs, one waits and leaves, one more finds the queue full.
     * The stream's head is sent when the request is queued, so the first
     * is running only once its first data chunk comes: until then it holds
     * the queue's one place itself. */
    TS_CHECK(s, start_long(&a, s.port, "river"));
    TS_CHECK(s, recv(a.fd, buf, sizeof buf, 0) > 0);
    TS_CHECK(s, ts_open(&b, s.port, 20000) &&
                  ts_send_request(&b, "POST", "/v1/completions", NULL, "{\"prompt\":\"mill\",\"max_tokens\":2}"));
    bool waiting = false;
    for (int i = 0; i < 500 && !waiting; i++) {
        waiting = metric(s.port, "hydra:requests_waiting ") == 1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    TS_CHECK(s, waiting);
    ts_resp r;
    TS_CHECK(s, ts_request(s.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"max_tokens\":2}", &r) &&
                  ts_is_error(&r, 503, "unavailable_error", "queue") && ts_header(&r, "Retry-After") != NULL);
    ts_resp_free(&r);
    ts_close(&b);
    TS_CHECK(s, cancelled_reaches(s.port, 3));
    TS_CHECK(s, metric(s.port, "hydra:requests_waiting ") == 0);
    ts_close(&a);
    TS_CHECK(s, cancelled_reaches(s.port, 4));
    TS_CHECK(s, served_quickly(s.port, 2000));
    free(prompt);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_drops_a_reader_that_stalls)
{
    test_server s;
    ts_conn a;
    TS_START(s, NULL, "-np 1 -c 65536 --metrics --timeout 1");
    /* a stream whose client never reads: once the socket buffers are full
     * nothing is taken for --timeout, and the server drops it */
    const int small = 4096;
    a.len = 0;
    a.fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(a.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s.port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    TS_CHECK(s, connect(a.fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    TS_CHECK(s, ts_send_request(&a, "POST", "/v1/completions", NULL,
                              "{\"prompt\":\"river\",\"max_tokens\":60000,\"ignore_eos\":true,\"stream\":true}"));
    bool dropped = false;
    for (int i = 0; i < 600 && !dropped; i++) { /* up to 60 s: a sanitized server fills the buffers slowly */
        dropped = metric(s.port, "hydra:requests_finished_total{reason=\"cancelled\"} ") == 1;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    ts_close(&a);
    TS_CHECK(s, dropped);
    TS_CHECK(s, served_quickly(s.port, 2000));
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* A prompt as long as a slot (128 positions, below -b) read while another
 * slot generates: a step never holds more tokens than a slot's session
 * takes in one evaluation (its context when that is below -b). */
TEST(server_small_slots_batch_within_their_context)
{
    test_server s;
    ts_conn a;
    reply b;
    TS_START(s, NULL, "-c 256 -np 2");
    TS_CHECK(s, start_long(&a, s.port, "river")); /* generating until the client leaves */
    char body[1024] = "{\"max_tokens\":1,\"prompt\":[";
    for (int i = 0; i < 128; i++)
        snprintf(body + strlen(body), sizeof body - strlen(body), "%s%d", i ? "," : "", 10 + i);
    strcat(body, "]}");
    const bool ok = post(s.port, "/v1/completions", body, &b) && b.status == 200 && b.completion_tokens == 1;
    ts_close(&a);
    TS_CHECK(s, ok);
    CHECK_EQ_INT(ts_stop(&s), 0);
}
