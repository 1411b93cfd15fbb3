/*
 * hydra-serve at the HTTP level, with raw sockets: the small endpoints,
 * error shapes and statuses, malformed and hostile requests (bad JSON,
 * wrong types, huge bodies and headers, garbage, slow clients),
 * pipelining and keep-alive, API keys.  Each test starts its own server
 * on a free port of 127.0.0.1 against the tiny synthetic model.
 */
#include "server/server_util.h"
#include "test.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One request; the response's status must be `status`. */
static bool call(int port, const char *method, const char *path, const char *body, int status, ts_resp *r)
{
    return ts_request(port, method, path, NULL, body, r) && r->status == status;
}

TEST(server_small_endpoints_and_error_shapes)
{
    test_server s;
    ts_resp r;
    TS_START(s, NULL, "");
    TS_CHECK(s, call(s.port, "GET", "/health", NULL, 200, &r) && strstr(r.body, "\"status\":\"ok\"") != NULL);
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "GET", "/v1/models", NULL, 200, &r) && strstr(r.body, "\"object\":\"list\"") &&
                  strstr(r.body, "\"id\":\"server-tiny\""));
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "GET", "/nowhere", NULL, 404, &r) && ts_is_error(&r, 404, "not_found_error", "/nowhere"));
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "DELETE", "/v1/chat/completions", NULL, 405, &r) &&
                  ts_is_error(&r, 405, "invalid_request_error", NULL) && ts_header(&r, "Allow") &&
                  strcmp(ts_header(&r, "Allow"), "POST") == 0);
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "GET", "/v1/completions", NULL, 405, &r));
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "POST", "/v1/embeddings", "{\"input\":\"x\"}", 501, &r) &&
                  ts_is_error(&r, 501, "not_supported_error", NULL));
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "GET", "/metrics", NULL, 501, &r)); /* off without --metrics */
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "OPTIONS", "/v1/chat/completions", NULL, 204, &r) &&
                  ts_header(&r, "Access-Control-Allow-Headers") != NULL);
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "GET", "/slots", NULL, 200, &r) && strstr(r.body, "\"id\":3") != NULL);
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* Every body here is the client's mistake: 400 with the field named. */
TEST(server_rejects_bad_request_bodies_naming_the_field)
{
    static const struct {
        const char *path, *body, *message;
    } cases[] = {
        {"/v1/chat/completions", "{", "not valid JSON"},
        {"/v1/chat/completions", "", "not valid JSON"},
        {"/v1/chat/completions", "[1,2]", "must be a JSON object"},
        {"/v1/chat/completions", "{\"messages\":[]} x", "bytes after"},
        {"/v1/chat/completions", "{}", "messages"},
        {"/v1/chat/completions", "{\"messages\":3}", "messages: expected an array"},
        {"/v1/chat/completions", "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
         "messages[0].content[0]"},
        {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature: expected a number"},
        {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":3}", "temperature: 3 is out of range"},
        {"/v1/completions", "{\"prompt\":\"a\",\"top_p\":-0.5}", "top_p"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1.5}", "max_tokens: expected an integer"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_completion_tokens\":-3}", "max_completion_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\",\"n\":2}", "n: 2"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":7}", "stop"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"x\",3]}", "stop[1]"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stream\":\"yes\"}", "stream: expected a boolean"},
        {"/v1/completions", "{\"prompt\":\"a\",\"seed\":\"1\"}", "seed"},
        {"/v1/completions", "{\"prompt\":\"a\",\"top_k\":-1}", "top_k"},
        {"/v1/completions", "{\"prompt\":\"a\",\"presence_penalty\":9}", "presence_penalty"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":1}}", "include_usage"},
        {"/v1/completions", "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs"},
        {"/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", "prompt: 2 prompts"},
        {"/v1/completions", "{\"prompt\":[1,99999999]}", "prompt: token 1"},
        {"/v1/completions", "{\"prompt\":{}}", "prompt: expected"},
        {"/v1/completions", "{\"prompt\":\"a\",\"model\":7}", "model"},
        {"/tokenize", "{\"content\":3}", "content"},
        {"/detokenize", "{\"tokens\":[1,-2]}", "tokens[1]"},
    };
    test_server s;
    TS_START(s, NULL, "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ts_resp r;
        const bool ok = ts_request(s.port, "POST", cases[i].path, NULL, cases[i].body, &r) &&
                        ts_is_error(&r, 400, "invalid_request_error", cases[i].message);
        if (!ok) {
            ts_stop(&s);
            FAIL("case %zu (%s): status %d, body %.300s", i, cases[i].body, r.status, r.body ? r.body : "");
        }
        ts_resp_free(&r);
    }
    /* unknown fields are ignored; the server still works */
    ts_resp r;
    TS_CHECK(s, call(s.port, "POST", "/v1/completions",
                   "{\"prompt\":\"a\",\"max_tokens\":2,\"user\":\"u\",\"frobnicate\":[1,{}]}", 200, &r));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_prompt_longer_than_the_context_is_400_with_numbers)
{
    test_server s;
    TS_START(s, NULL, "-c 128 -np 2"); /* 64 positions per slot */
    char body[8192] = "{\"prompt\":\"";
    for (int i = 0; i < 200; i++)
        strcat(body, "river mill ");
    strcat(body, "\",\"max_tokens\":2}");
    ts_resp r;
    TS_CHECK(s, call(s.port, "POST", "/v1/completions", body, 400, &r) &&
                  ts_is_error(&r, 400, "invalid_request_error", "more than the context of 64 tokens"));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_limits_body_and_header_sizes)
{
    test_server s;
    ts_conn c;
    ts_resp r;
    TS_START(s, NULL, "");
    /* a Content-Length over 8 MiB is refused before any body is sent */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    TS_CHECK(s, ts_send_str(&c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8388609\r\n\r\n"));
    TS_CHECK(s, ts_read(&c, &r) && ts_is_error(&r, 413, "invalid_request_error", "8388609") && r.closed);
    ts_resp_free(&r);
    ts_close(&c);
    /* a chunked body that grows past the limit */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    TS_CHECK(s, ts_send_str(&c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
    char *chunk = malloc(1 << 20);
    memset(chunk, 'a', 1 << 20);
    bool sent = true;
    for (int i = 0; i < 9 && sent; i++)
        sent = ts_send_str(&c, "100000\r\n") && ts_send(&c, chunk, 1 << 20) && ts_send_str(&c, "\r\n");
    free(chunk);
    TS_CHECK(s, ts_read(&c, &r) && r.status == 413);
    ts_resp_free(&r);
    ts_close(&c);
    /* 40 KiB of headers */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    TS_CHECK(s, ts_send_str(&c, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: "));
    char *big = malloc(40 * 1024 + 1);
    memset(big, 'h', 40 * 1024);
    big[40 * 1024] = '\0';
    TS_CHECK(s, ts_send_str(&c, big) && ts_send_str(&c, "\r\n\r\n"));
    free(big);
    TS_CHECK(s, ts_read(&c, &r) && ts_is_error(&r, 431, "invalid_request_error", NULL));
    ts_resp_free(&r);
    ts_close(&c);
    TS_CHECK(s, call(s.port, "GET", "/health", NULL, 200, &r));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_pipelining_keep_alive_and_close)
{
    test_server s;
    ts_conn c;
    ts_resp r;
    TS_START(s, NULL, "");
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    /* three requests in one write: answered in order on one connection */
    TS_CHECK(s, ts_send_str(&c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                              "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 19\r\n\r\n{\"content\":\"river\"}"
                              "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"));
    TS_CHECK(s, ts_read(&c, &r) && r.status == 200 && strstr(r.body, "ok"));
    ts_resp_free(&r);
    TS_CHECK(s, ts_read(&c, &r) && r.status == 200 && strstr(r.body, "\"tokens\":["));
    ts_resp_free(&r);
    TS_CHECK(s, ts_read(&c, &r) && r.status == 404 && !r.closed);
    ts_resp_free(&r);
    /* the same connection again (keep-alive), then Connection: close */
    TS_CHECK(s, ts_send_request(&c, "POST", "/v1/completions", NULL, "{\"prompt\":\"river\",\"max_tokens\":3}"));
    TS_CHECK(s, ts_read(&c, &r) && r.status == 200 && strstr(r.body, "\"text_completion\""));
    ts_resp_free(&r);
    TS_CHECK(s, ts_send_request(&c, "GET", "/health", "Connection: close\r\n", NULL));
    TS_CHECK(s, ts_read(&c, &r) && r.status == 200 && r.closed);
    ts_resp_free(&r);
    TS_CHECK(s, ts_sees_eof(&c, 5000));
    ts_close(&c);
    /* HTTP/1.0 without keep-alive: answered and closed */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    TS_CHECK(s, ts_send_str(&c, "GET /health HTTP/1.0\r\n\r\n"));
    TS_CHECK(s, ts_read(&c, &r) && r.status == 200);
    ts_resp_free(&r);
    TS_CHECK(s, ts_sees_eof(&c, 5000));
    ts_close(&c);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_survives_garbage_and_slow_clients)
{
    test_server s;
    ts_conn c;
    ts_resp r;
    TS_START(s, NULL, "--timeout 1");
    /* not HTTP at all */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    static const char tls_hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n";
    TS_CHECK(s, ts_send(&c, tls_hello, sizeof tls_hello - 1));
    TS_CHECK(s, ts_read(&c, &r) && r.status == 400 && r.closed);
    ts_resp_free(&r);
    ts_close(&c);
    /* a bad chunk size */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    TS_CHECK(s, ts_send_str(&c, "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"));
    TS_CHECK(s, ts_read(&c, &r) && r.status == 400);
    ts_resp_free(&r);
    ts_close(&c);
    /* a request that never finishes: 408 after --timeout, then closed */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    TS_CHECK(s, ts_send_str(&c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro"));
    TS_CHECK(s, ts_read(&c, &r) && ts_is_error(&r, 408, "timeout_error", NULL));
    ts_resp_free(&r);
    TS_CHECK(s, ts_sees_eof(&c, 5000));
    ts_close(&c);
    /* an idle keep-alive connection is closed after --timeout */
    TS_CHECK(s, ts_open(&c, s.port, 10000));
    TS_CHECK(s, ts_sees_eof(&c, 5000));
    ts_close(&c);
    /* a client that connects and leaves at once */
    for (int i = 0; i < 20; i++) {
        TS_CHECK(s, ts_open(&c, s.port, 10000));
        ts_send_str(&c, "GET /heal");
        ts_close(&c);
    }
    TS_CHECK(s, call(s.port, "GET", "/health", NULL, 200, &r));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_api_key_accepted_and_wrong_one_rejected)
{
    char keyfile[4096], args[4200];
    snprintf(keyfile, sizeof keyfile, "%s", util_scratch_path("server-keys.txt"));
    CHECK(util_write_file(keyfile, "from-file\n\nsecond-key\n", 23) == 0);
    snprintf(args, sizeof args, "--api-key sekrit --api-key-file %s", keyfile);
    test_server s;
    ts_resp r;
    TS_START(s, NULL, args);
    TS_CHECK(s, call(s.port, "GET", "/health", NULL, 200, &r)); /* public */
    ts_resp_free(&r);
    TS_CHECK(s, call(s.port, "GET", "/v1/models", NULL, 401, &r) && ts_is_error(&r, 401, "authentication_error", NULL));
    ts_resp_free(&r);
    TS_CHECK(s, ts_request(s.port, "GET", "/v1/models", "Authorization: Bearer sekriT\r\n", NULL, &r) &&
                  r.status == 401);
    ts_resp_free(&r);
    TS_CHECK(s, ts_request(s.port, "GET", "/v1/models", "Authorization: Bearer sekri\r\n", NULL, &r) && r.status == 401);
    ts_resp_free(&r);
    TS_CHECK(s, ts_request(s.port, "GET", "/v1/models", "Authorization: Bearer sekrit\r\n", NULL, &r) && r.status == 200);
    ts_resp_free(&r);
    TS_CHECK(s, ts_request(s.port, "GET", "/v1/models", "Authorization: Bearer second-key\r\n", NULL, &r) &&
                  r.status == 200);
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_tokenize_detokenize_round_trip)
{
    test_server s;
    ts_resp r;
    TS_START(s, NULL, "");
    TS_CHECK(s, call(s.port, "POST", "/tokenize", "{\"content\":\"The river runs past the old mill\"}", 200, &r));
    cJSON *j = ts_json(&r);
    cJSON *tokens = cJSON_DetachItemFromObject(j, "tokens");
    cJSON_Delete(j);
    ts_resp_free(&r);
    TS_CHECK(s, cJSON_GetArraySize(tokens) > 2);
    cJSON *req = cJSON_CreateObject();
    cJSON_AddItemToObject(req, "tokens", tokens);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    const bool ok = call(s.port, "POST", "/detokenize", body, 200, &r) &&
                    strstr(r.body, "\"content\":\"The river runs past the old mill\"") != NULL;
    free(body);
    ts_resp_free(&r);
    TS_CHECK(s, ok);
    TS_CHECK(s, call(s.port, "POST", "/tokenize", "{\"content\":\"mill\",\"with_pieces\":true}", 200, &r) &&
                  strstr(r.body, "\"piece\":"));
    ts_resp_free(&r);
    CHECK_EQ_INT(ts_stop(&s), 0);
}
