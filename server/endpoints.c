/*
 * endpoints.c — everything but the completions: /health, /v1/models,
 * /metrics, /tokenize and /detokenize (on a work thread: a body may be
 * megabytes of text), /v1/embeddings (501), /slots and
 * /slots/{id}?action=save|restore|erase.
 */
#include "api.h"

#include "metrics.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ simple */

void ep_health(server_ctx *sc, http_request *req)
{
    const engine_state st = engine_get_state(sc->eng);
    if (st == ENGINE_READY) {
        static const char ok[] = "{\"status\":\"ok\"}";
        http_respond(req, 200, "application/json", "", ok, sizeof ok - 1);
    } else {
        api_error(req, 503, st == ENGINE_LOADING ? "Loading model" : "the model failed to load");
    }
}

void ep_models(server_ctx *sc, http_request *req)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON *m = cJSON_CreateObject();
    bool ok = data != NULL && m != NULL && cJSON_AddStringToObject(root, "object", "list") &&
              cJSON_AddStringToObject(m, "id", sc->model_name) && cJSON_AddStringToObject(m, "object", "model") &&
              cJSON_AddNumberToObject(m, "created", (double)sc->started) &&
              cJSON_AddStringToObject(m, "owned_by", "hydra");
    if (ok && engine_get_state(sc->eng) == ENGINE_READY) {
        cJSON *meta = cJSON_AddObjectToObject(m, "meta");
        const hydra_model *model = engine_model(sc->eng);
        ok = meta != NULL && cJSON_AddStringToObject(meta, "arch", hydra_model_arch(model)) &&
             cJSON_AddNumberToObject(meta, "n_params", (double)hydra_model_n_params(model)) &&
             cJSON_AddNumberToObject(meta, "size", (double)hydra_model_n_bytes(model)) &&
             cJSON_AddNumberToObject(meta, "n_vocab", hydra_vocab_size(model)) &&
             cJSON_AddNumberToObject(meta, "n_ctx_slot", engine_slot_ctx(sc->eng)) &&
             cJSON_AddNumberToObject(meta, "n_slots", engine_n_slots(sc->eng));
    }
    if (ok) {
        cJSON_AddItemToArray(data, m);
    } else {
        cJSON_Delete(m);
        cJSON_Delete(root);
        root = NULL; /* api_json answers 503 */
    }
    api_json(req, 200, root);
}

void ep_metrics(server_ctx *sc, http_request *req)
{
    if (!sc->o->metrics) {
        api_error(req, 501, "the metrics endpoint is off: start hydra-serve with --metrics");
        return;
    }
    metrics_gauges g = {0};
    if (engine_get_state(sc->eng) == ENGINE_READY) {
        engine_load(sc->eng, &g.running, &g.waiting, &g.kv_used, &g.kv_total);
        g.n_slots = engine_n_slots(sc->eng);
    }
    sbuf text = {0};
    if (!metrics_render(&text, &g)) {
        sbuf_free(&text);
        api_error(req, 503, "out of memory");
        return;
    }
    http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", "", text.data, text.len);
    sbuf_free(&text);
}

void ep_embeddings(server_ctx *sc, http_request *req)
{
    (void)sc;
    api_error(req, 501, "embeddings are not supported by this server");
}

void ep_slots(server_ctx *sc, http_request *req)
{
    char *json = engine_slots_json(sc->eng);
    if (json == NULL) {
        api_error(req, 503, "out of memory");
        return;
    }
    http_respond(req, 200, "application/json", "", json, strlen(json));
    free(json);
}

/* ------------------------------------------------------------ offloaded */

/* A request answered from a work thread: run() reads the body and leaves
 * either a JSON result or a status and message. */
typedef struct job job;
struct job {
    uv_work_t work;
    server_ctx *sc;
    http_request *req; /* NULL once the client is gone */
    char *body;
    size_t body_len;
    void (*run)(job *j);
    cJSON *result;
    int status;
    char err[512];
};

static void job_abort(http_request *req)
{
    ((job *)req->handler_data)->req = NULL;
}

static void job_run(uv_work_t *w)
{
    job *j = w->data;
    j->run(j);
}

static void job_done(uv_work_t *w, int status)
{
    job *j = w->data;
    server_ctx *sc = j->sc;
    if (j->req != NULL) {
        j->req->on_abort = NULL;
        if (status != 0)
            api_error(j->req, 503, "the server is shutting down");
        else if (j->status != 0)
            api_error(j->req, j->status, "%s", j->err);
        else
            api_json(j->req, 200, j->result);
        j->result = NULL;
    }
    cJSON_Delete(j->result);
    free(j->body);
    free(j);
    api_work_end(sc);
}

static void offload(server_ctx *sc, http_request *req, void (*run)(job *))
{
    job *j = calloc(1, sizeof *j);
    if (j == NULL || (j->body = http_take_body(req, &j->body_len)) == NULL) {
        free(j);
        api_error(req, 503, "out of memory");
        return;
    }
    j->sc = sc;
    j->req = req;
    j->run = run;
    if (api_queue_work(sc, req, &j->work, j, job_abort, job_run, job_done) != 0) {
        free(j->body);
        free(j);
        api_error(req, 503, "cannot queue the request");
    }
}

static int job_fail(job *j, int status, const char *message)
{
    j->status = status;
    snprintf(j->err, sizeof j->err, "%s", message);
    return -1;
}

/* A boolean field; absent or null: fallback. */
static int get_flag(job *j, const cJSON *obj, const char *name, bool fallback, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    *out = fallback;
    if (v == NULL || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        char message[96];
        snprintf(message, sizeof message, "%s: expected a boolean", name);
        return job_fail(j, 400, message);
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

static cJSON *token_list(const hydra_model *m, const hydra_token *ids, size_t n, bool with_pieces)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n && arr != NULL; i++) {
        cJSON *item = NULL;
        if (with_pieces) {
            char piece[256];
            size_t len = 0;
            if (hydra_token_to_piece(m, ids[i], true, piece, sizeof piece, &len) != HYDRA_OK)
                len = 0;
            item = cJSON_CreateObject();
            cJSON *text = shape_string(piece, len);
            if (item != NULL && text != NULL && cJSON_AddNumberToObject(item, "id", ids[i]))
                cJSON_AddItemToObject(item, "piece", text);
            else
                cJSON_Delete(text);
        } else {
            item = cJSON_CreateNumber(ids[i]);
        }
        if (item == NULL) {
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, item);
    }
    return arr;
}

/* {"content": text, "add_special": false, "parse_special": true, "with_pieces": false} -> {"tokens": [...]} */
static void run_tokenize(job *j)
{
    cJSON *obj = request_object(j->body, j->body_len, j->err, sizeof j->err);
    const cJSON *content = obj ? cJSON_GetObjectItemCaseSensitive(obj, "content") : NULL;
    bool add_special, parse_special, with_pieces;
    if (obj == NULL)
        j->status = 400;
    else if (!cJSON_IsString(content))
        job_fail(j, 400, "content: required, a string");
    else if (get_flag(j, obj, "add_special", false, &add_special) == 0 &&
             get_flag(j, obj, "parse_special", true, &parse_special) == 0 &&
             get_flag(j, obj, "with_pieces", false, &with_pieces) == 0) {
        const hydra_model *m = engine_model(j->sc->eng);
        hydra_token *ids = NULL;
        size_t n = 0;
        if (prepare_tokenize(m, content->valuestring, strlen(content->valuestring), add_special, parse_special, &ids,
                             &n) != HYDRA_OK)
            job_fail(j, 400, hydra_last_error());
        else if ((j->result = cJSON_CreateObject()) != NULL)
            cJSON_AddItemToObject(j->result, "tokens", token_list(m, ids, n, with_pieces));
        free(ids);
    }
    cJSON_Delete(obj);
}

/* {"tokens": [ids]} -> {"content": text} */
static void run_detokenize(job *j)
{
    cJSON *obj = request_object(j->body, j->body_len, j->err, sizeof j->err);
    const cJSON *arr = obj ? cJSON_GetObjectItemCaseSensitive(obj, "tokens") : NULL;
    const hydra_model *m = engine_model(j->sc->eng);
    const int n = cJSON_GetArraySize(arr);
    hydra_token *ids = malloc(sizeof *ids * (size_t)(n + 1));
    if (obj == NULL)
        j->status = 400;
    else if (!cJSON_IsArray(arr))
        job_fail(j, 400, "tokens: required, an array of token ids");
    else if (ids == NULL)
        job_fail(j, 503, "out of memory");
    int i = 0;
    for (const cJSON *v = j->status ? NULL : arr->child; v != NULL; v = v->next, i++) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= hydra_vocab_size(m) ||
            v->valuedouble != (double)(hydra_token)v->valuedouble) {
            j->status = 400;
            snprintf(j->err, sizeof j->err, "tokens[%d]: not a token id of this vocabulary (0 to %d)", i,
                     (int)hydra_vocab_size(m) - 1);
            break;
        }
        ids[i] = (hydra_token)v->valuedouble;
    }
    size_t len = 0;
    char *text = NULL;
    if (j->status == 0 && hydra_detokenize(m, ids, (size_t)n, false, NULL, 0, &len) == HYDRA_ERR_RANGE &&
        (text = malloc(len + 1)) != NULL &&
        hydra_detokenize(m, ids, (size_t)n, false, text, len + 1, &len) == HYDRA_OK) {
        if ((j->result = cJSON_CreateObject()) != NULL)
            cJSON_AddItemToObject(j->result, "content", shape_string(text, len));
    } else if (j->status == 0 && n == 0) {
        j->result = cJSON_CreateObject();
        cJSON_AddStringToObject(j->result, "content", "");
    } else if (j->status == 0) {
        job_fail(j, 503, "out of memory");
    }
    free(text);
    free(ids);
    cJSON_Delete(obj);
}

void ep_tokenize(server_ctx *sc, http_request *req)
{
    offload(sc, req, run_tokenize);
}

void ep_detokenize(server_ctx *sc, http_request *req)
{
    offload(sc, req, run_detokenize);
}

/* ------------------------------------------------------------ slot files */

typedef struct slot_req {
    server_ctx *sc;
    http_request *req;
    srv_task *task;
    char filename[129];
} slot_req;

static const struct {
    const char *name;
    task_kind kind;
    bool needs_file;
} actions[] = {
    {"save", TASK_SLOT_SAVE, true},
    {"restore", TASK_SLOT_RESTORE, true},
    {"erase", TASK_SLOT_ERASE, false},
};
enum { N_ACTIONS = sizeof actions / sizeof actions[0] };

static void slot_abort(http_request *req)
{
    slot_req *s = req->handler_data;
    s->req = NULL;
    engine_cancel(s->sc->eng, s->task);
}

static cJSON *slot_result(const slot_req *s, const task_out *out)
{
    static const char *const keys[][3] = {
        [TASK_SLOT_SAVE] = {"n_saved", "n_written", "save_ms"},
        [TASK_SLOT_RESTORE] = {"n_restored", "n_read", "restore_ms"},
        [TASK_SLOT_ERASE] = {"n_erased", NULL, NULL},
    };
    const char *const *k = keys[s->task->kind];
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL && cJSON_AddNumberToObject(o, "id_slot", out->slot) &&
              cJSON_AddNumberToObject(o, k[0], (double)out->n_tokens);
    if (ok && k[1] != NULL) {
        cJSON *timings = cJSON_AddObjectToObject(o, "timings");
        ok = cJSON_AddStringToObject(o, "filename", s->filename) &&
             cJSON_AddNumberToObject(o, k[1], (double)out->n_bytes) && timings != NULL &&
             cJSON_AddNumberToObject(timings, k[2], out->action_ms);
    }
    if (ok && s->task->kind == TASK_SLOT_RESTORE)
        ok = cJSON_AddNumberToObject(o, "n_evaluated", (double)out->n_evaluated) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static void slot_output(srv_task *t)
{
    slot_req *s = t->user;
    sbuf none = {0};
    task_out out;
    engine_take(s->sc->eng, t, &none, &out);
    sbuf_free(&none);
    sbuf_free(&out.logprobs);
    if (!out.done)
        return;
    if (s->req != NULL) {
        s->req->on_abort = NULL;
        if (out.finish == FINISH_ERROR)
            api_error(s->req, out.error_status, "%s", out.error);
        else if (out.finish == FINISH_CANCELLED)
            api_error(s->req, 503, "the server is shutting down");
        else
            api_json(s->req, 200, slot_result(s, &out));
    }
    task_free(s->task);
    free(s);
}

/* A file name in the slot folder: letters, digits, '.', '_', '-', not
 * starting with '.', at most 128 bytes, so it can never leave the folder. */
static bool valid_filename(const char *name)
{
    const size_t n = strlen(name);
    if (n == 0 || n > 128 || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && strchr("._-", name[i]) == NULL)
            return false;
    return true;
}

/* The value of key in a query string "a=1&b=2"; false when absent. */
static bool query_value(const char *query, const char *key, char *out, size_t cap)
{
    const size_t klen = strlen(key);
    for (const char *p = query; *p != '\0';) {
        const char *end = strchr(p, '&');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            snprintf(out, cap, "%.*s", (int)(len - klen - 1), p + klen + 1);
            return true;
        }
        p += len + (end != NULL);
    }
    return false;
}

/* The slot id of "/slots/N": -1 when not a number in range. */
static int slot_id_of(const server_ctx *sc, const char *path)
{
    const char *digits = path + strlen("/slots/");
    char *end;
    const long id = strtol(digits, &end, 10);
    if (!isdigit((unsigned char)*digits) || *end != '\0' || id < 0 || id >= engine_n_slots(sc->eng))
        return -1;
    return (int)id;
}

static int slot_filename(http_request *req, slot_req *s)
{
    char err[256];
    cJSON *obj = request_object(req->body, req->body_len, err, sizeof err);
    const cJSON *name = obj ? cJSON_GetObjectItemCaseSensitive(obj, "filename") : NULL;
    int rc = -1;
    if (obj == NULL)
        api_error(req, 400, "%s", err);
    else if (!cJSON_IsString(name))
        api_error(req, 400, "filename: required, a string");
    else if (!valid_filename(name->valuestring))
        api_error(req, 400, "filename: 1 to 128 letters, digits, '.', '_' or '-', not starting with '.'");
    else {
        snprintf(s->filename, sizeof s->filename, "%s", name->valuestring);
        rc = 0;
    }
    cJSON_Delete(obj);
    return rc;
}

void ep_slot_action(server_ctx *sc, http_request *req)
{
    char action[32] = "";
    const int id = slot_id_of(sc, req->path);
    if (id < 0) {
        api_error(req, 400, "slot id: an integer from 0 to %d", engine_n_slots(sc->eng) - 1);
        return;
    }
    query_value(req->query, "action", action, sizeof action);
    int a = 0;
    while (a < N_ACTIONS && strcmp(actions[a].name, action) != 0)
        a++;
    if (a == N_ACTIONS) {
        api_error(req, 400, "action: save, restore or erase (as ?action=...)");
        return;
    }
    if (actions[a].needs_file && sc->o->slot_save_path == NULL) {
        api_error(req, 501, "slot files are off: start hydra-serve with --slot-save-path DIR");
        return;
    }
    slot_req *s = calloc(1, sizeof *s);
    srv_task *t = task_new(actions[a].kind);
    if (s == NULL || t == NULL) {
        free(s);
        task_free(t);
        api_error(req, 503, "out of memory");
        return;
    }
    *s = (slot_req){.sc = sc, .req = req, .task = t};
    t->slot_id = id;
    t->on_output = slot_output;
    t->user = s;
    t->t_submit = serve_now_ms();
    if (actions[a].needs_file) {
        if (slot_filename(req, s) != 0) {
            task_free(t);
            free(s);
            return;
        }
        const size_t len = strlen(sc->o->slot_save_path) + strlen(s->filename) + 2;
        if ((t->slot_file = malloc(len)) != NULL)
            snprintf(t->slot_file, len, "%s/%s", sc->o->slot_save_path, s->filename);
    }
    if ((actions[a].needs_file && t->slot_file == NULL) || engine_submit(sc->eng, t) != 0) {
        task_free(t);
        free(s);
        api_error(req, 503, "the server is busy: retry later");
        return;
    }
    req->handler_data = s;
    req->on_abort = slot_abort;
}
