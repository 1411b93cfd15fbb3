/*
 * logprobs.c — per-token log-probabilities, OpenAI's `logprobs`.
 *
 * Engine side: the chosen token's log-probability and the n_top most
 * probable tokens' under the model's distribution at that position (the
 * log-softmax of the raw logits: before penalties, temperature and the
 * truncations, as OpenAI reports them), into a fixed-size record.
 * Loop side: records to JSON, chat's shape ({"content":[{"token",
 * "logprob","bytes","top_logprobs":[...]}]}) or the legacy completions'
 * ({"tokens","token_logprobs","top_logprobs":[{token: logprob}],
 * "text_offset"}).
 */
#include "api.h"
#include "slot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ engine */

/* log(sum(exp(logits))) with the maximum factored out; NaN logits count
 * as -infinity, as the sampler treats them. */
static double log_sum_exp(const float *logits, int32_t n)
{
    float max = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > max)
            max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > -INFINITY) /* false for NaN too */
            sum += exp((double)logits[i] - max);
    return max + log(sum);
}

/* Inserts (id, v) into the descending top list of *n (capacity k); ties
 * keep the lower id first (ids arrive ascending). */
static void keep_top(hydra_token *ids, float *vals, int *n, int k, hydra_token id, float v)
{
    if (*n == k && !(v > vals[k - 1]))
        return;
    int i = *n < k ? (*n)++ : k - 1;
    for (; i > 0 && v > vals[i - 1]; i--) {
        ids[i] = ids[i - 1];
        vals[i] = vals[i - 1];
    }
    ids[i] = id;
    vals[i] = v;
}

void logprobs_of(const float *logits, int32_t n_vocab, hydra_token tok, int n_top, logprob_entry *out)
{
    const double lse = log_sum_exp(logits, n_vocab);
    out->id = tok;
    out->logprob = logits[tok] > -INFINITY ? (float)(logits[tok] - lse) : -INFINITY;
    out->n_top = 0;
    const int k = n_top < LOGPROBS_MAX_TOP ? n_top : LOGPROBS_MAX_TOP;
    for (int32_t i = 0; i < n_vocab && k > 0; i++)
        if (logits[i] > -INFINITY)
            keep_top(out->top_id, out->top_logprob, &out->n_top, k, i, logits[i]);
    for (int i = 0; i < out->n_top; i++)
        out->top_logprob[i] = (float)(out->top_logprob[i] - lse);
}

/* ------------------------------------------------------------ loop */

/* A token's bytes (its text, control tokens none). */
static bool piece_of(const hydra_model *m, hydra_token id, sbuf *b)
{
    char small[256];
    size_t len = 0;
    b->len = 0;
    hydra_status st = hydra_token_to_piece(m, id, false, small, sizeof small, &len);
    if (st == HYDRA_OK)
        return sbuf_add(b, small, len);
    char *big = st == HYDRA_ERR_RANGE ? malloc(len) : NULL;
    const bool ok = big != NULL && hydra_token_to_piece(m, id, false, big, len, &len) == HYDRA_OK && sbuf_add(b, big, len);
    free(big);
    return ok;
}

/* logprob as JSON: -infinity (a token the model ruled out) is not a JSON
 * number, so it is reported as -9999 (what OpenAI reports for it). */
static double json_logprob(float lp)
{
    return isfinite(lp) ? lp : -9999.0;
}

static cJSON *bytes_array(const sbuf *piece)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a != NULL && i < piece->len; i++) {
        cJSON *v = cJSON_CreateNumber((unsigned char)piece->data[i]);
        if (v == NULL) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, v);
    }
    return a;
}

/* {"token","logprob","bytes"} of one token. */
static cJSON *chat_token(const hydra_model *m, hydra_token id, float lp, sbuf *piece)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *token = piece_of(m, id, piece) ? shape_string(piece->data ? piece->data : "", piece->len) : NULL;
    cJSON *bytes = token != NULL ? bytes_array(piece) : NULL;
    if (o == NULL || token == NULL || bytes == NULL) {
        cJSON_Delete(o);
        cJSON_Delete(token);
        cJSON_Delete(bytes);
        return NULL;
    }
    cJSON_AddItemToObject(o, "token", token);
    cJSON_AddNumberToObject(o, "logprob", json_logprob(lp));
    cJSON_AddItemToObject(o, "bytes", bytes);
    return o;
}

static cJSON *chat_entry(const hydra_model *m, const logprob_entry *e, sbuf *piece)
{
    cJSON *o = chat_token(m, e->id, e->logprob, piece);
    cJSON *top = o ? cJSON_AddArrayToObject(o, "top_logprobs") : NULL;
    for (int i = 0; top != NULL && i < e->n_top; i++) {
        cJSON *alt = chat_token(m, e->top_id[i], e->top_logprob[i], piece);
        if (alt == NULL)
            top = NULL;
        else
            cJSON_AddItemToArray(top, alt);
    }
    if (top == NULL) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *chat_logprobs(const hydra_model *m, const logprob_entry *e, size_t n, sbuf *piece)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *content = o ? cJSON_AddArrayToObject(o, "content") : NULL;
    bool ok = content != NULL && cJSON_AddNullToObject(o, "refusal") != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *entry = chat_entry(m, &e[i], piece);
        ok = entry != NULL;
        if (ok)
            cJSON_AddItemToArray(content, entry);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* One token of the legacy shape into its four arrays. */
static bool completion_entry(const hydra_model *m, const logprob_entry *e, cJSON *tokens, cJSON *lps, cJSON *tops,
                             cJSON *offsets, long long *offset, sbuf *piece)
{
    cJSON *top = cJSON_CreateObject();
    bool ok = top != NULL && piece_of(m, e->id, piece);
    cJSON *token = ok ? shape_string(piece->data ? piece->data : "", piece->len) : NULL;
    ok = ok && token != NULL;
    if (ok) {
        cJSON_AddItemToArray(tokens, token);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(json_logprob(e->logprob)));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)*offset));
        *offset += (long long)piece->len;
    }
    for (int i = 0; ok && i < e->n_top; i++) {
        ok = piece_of(m, e->top_id[i], piece);
        cJSON *alt = ok ? shape_string(piece->data ? piece->data : "", piece->len) : NULL;
        ok = alt != NULL && alt->valuestring != NULL;
        if (ok && cJSON_GetObjectItemCaseSensitive(top, alt->valuestring) == NULL)
            cJSON_AddNumberToObject(top, alt->valuestring, json_logprob(e->top_logprob[i]));
        cJSON_Delete(alt);
    }
    if (!ok) {
        cJSON_Delete(top);
        return false;
    }
    cJSON_AddItemToArray(tops, top);
    return true;
}

static cJSON *completion_logprobs(const hydra_model *m, const logprob_entry *e, size_t n, long long *offset,
                                  sbuf *piece)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = o ? cJSON_AddArrayToObject(o, "tokens") : NULL;
    cJSON *lps = o ? cJSON_AddArrayToObject(o, "token_logprobs") : NULL;
    cJSON *tops = o ? cJSON_AddArrayToObject(o, "top_logprobs") : NULL;
    cJSON *offsets = o ? cJSON_AddArrayToObject(o, "text_offset") : NULL;
    bool ok = tokens && lps && tops && offsets;
    for (size_t i = 0; ok && i < n; i++)
        ok = completion_entry(m, &e[i], tokens, lps, tops, offsets, offset, piece);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *logprobs_json(const hydra_model *m, api_kind kind, const sbuf *records, long long *text_offset)
{
    const size_t n = records->len / sizeof(logprob_entry);
    const logprob_entry *e = (const logprob_entry *)records->data;
    sbuf piece = {0};
    cJSON *o = kind == API_CHAT ? chat_logprobs(m, e, n, &piece) : completion_logprobs(m, e, n, text_offset, &piece);
    sbuf_free(&piece);
    return o;
}
