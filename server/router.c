/*
 * router.c — a request's first stop: unreadable requests get their error,
 * then the route table (method + path) picks the handler; an unknown path
 * is 404, a known one with another method 405 (with Allow).  With API keys
 * every route but /health wants "Authorization: Bearer KEY" (401
 * otherwise); routes that need the model answer 503 while it loads.
 * OPTIONS answers CORS preflights for any path.
 */
#include "api.h"

#include <http_parser.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef void (*route_fn)(server_ctx *sc, http_request *req);

typedef struct route {
    int method;
    const char *path; /* ending in '/': a prefix */
    route_fn fn;
    bool is_public;   /* no API key needed */
    bool needs_model;
} route;

static const route routes[] = {
    {HTTP_GET, "/health", ep_health, true, false},
    {HTTP_GET, "/v1/health", ep_health, true, false},
    {HTTP_GET, "/v1/models", ep_models, false, false},
    {HTTP_GET, "/models", ep_models, false, false},
    {HTTP_POST, "/v1/chat/completions", ep_chat_completions, false, true},
    {HTTP_POST, "/chat/completions", ep_chat_completions, false, true},
    {HTTP_POST, "/v1/completions", ep_completions, false, true},
    {HTTP_POST, "/completions", ep_completions, false, true},
    {HTTP_GET, "/metrics", ep_metrics, false, false},
    {HTTP_POST, "/tokenize", ep_tokenize, false, true},
    {HTTP_POST, "/detokenize", ep_detokenize, false, true},
    {HTTP_POST, "/v1/embeddings", ep_embeddings, false, false},
    {HTTP_POST, "/embeddings", ep_embeddings, false, false},
    {HTTP_GET, "/slots", ep_slots, false, true},
    {HTTP_POST, "/slots/", ep_slot_action, false, true},
};
enum { N_ROUTES = sizeof routes / sizeof routes[0] };

static bool path_matches(const route *r, const char *path)
{
    const size_t n = strlen(r->path);
    return r->path[n - 1] == '/' ? strncmp(path, r->path, n) == 0 && path[n] != '\0' : strcmp(path, r->path) == 0;
}

void api_json(http_request *req, int status, cJSON *json)
{
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (text == NULL) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"unavailable_error\",\"code\":503}}";
        http_respond(req, 503, "application/json", "", oom, sizeof oom - 1);
        return;
    }
    char extra[64] = "";
    if (status == 429 || status == 503)
        snprintf(extra, sizeof extra, "Retry-After: 1\r\n");
    else if (status == 401)
        snprintf(extra, sizeof extra, "WWW-Authenticate: Bearer\r\n");
    http_respond(req, status, "application/json", extra, text, strlen(text));
    free(text);
}

void api_error(http_request *req, int status, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    api_json(req, status, shape_error(status, message));
}

/* Compares every byte whatever the first difference, so the time taken
 * does not tell how much of a guess was right. */
static bool same_secret(const char *a, const char *b)
{
    const size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = la != lb;
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0 && lb > 0;
}

static bool authorized(const server_ctx *sc, const http_request *req)
{
    if (sc->o->n_api_keys == 0)
        return true;
    const char *h = req->authorization;
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    bool ok = false;
    for (int i = 0; i < sc->o->n_api_keys; i++)
        ok |= same_secret(h, sc->o->api_keys[i]);
    return ok;
}

static void preflight(http_request *req)
{
    http_respond(req, 204, NULL,
                 "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
                 "Access-Control-Allow-Headers: Authorization, Content-Type\r\n"
                 "Access-Control-Max-Age: 86400\r\n",
                 "", 0);
}

/* Allow: the methods the path has. */
static void not_allowed(http_request *req)
{
    char allow[128] = "Allow: ";
    for (size_t i = 0; i < N_ROUTES; i++)
        if (path_matches(&routes[i], req->path) && strstr(allow, http_method_str(routes[i].method)) == NULL) {
            strncat(allow, http_method_str(routes[i].method), sizeof allow - strlen(allow) - 16);
            strcat(allow, ", ");
        }
    allow[strlen(allow) - 2] = '\0'; /* the last ", " */
    strcat(allow, "\r\n");
    char message[256];
    snprintf(message, sizeof message, "%s is not allowed on %.128s", http_method_str((enum http_method)req->method),
             req->path);
    cJSON *body = shape_error(405, message);
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    http_respond(req, 405, "application/json", allow, text ? text : "", text ? strlen(text) : 0);
    free(text);
}

void api_handle(http_request *req, void *user)
{
    server_ctx *sc = user;
    if (req->error_status != 0) {
        api_error(req, req->error_status, "%s", req->error_message);
        return;
    }
    if (req->method == HTTP_OPTIONS) {
        preflight(req);
        return;
    }
    const route *found = NULL;
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES && found == NULL; i++)
        if (path_matches(&routes[i], req->path)) {
            path_known = true;
            if (routes[i].method == req->method)
                found = &routes[i];
        }
    if (found == NULL) {
        if (path_known)
            not_allowed(req);
        else
            api_error(req, 404, "no such endpoint: %.200s", req->path);
        return;
    }
    if (!found->is_public && !authorized(sc, req)) {
        api_error(req, 401, "invalid or missing API key (Authorization: Bearer KEY)");
        return;
    }
    if (found->needs_model && engine_get_state(sc->eng) != ENGINE_READY) {
        api_error(req, 503, "the model is loading");
        return;
    }
    found->fn(sc, req);
}
