#include "refcheck.h"

#include "test.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static bool read_ints(const cJSON *arr, int32_t *out, int n)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
        return false;
    for (int i = 0; i < n; i++)
        out[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valueint;
    return true;
}

bool ref_load(const char *name, ref_case *r)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ref/%s.json", test_shared_dir(), name);
    cJSON *j = util_read_json(path);
    snprintf(path, sizeof path, "%s/ref/tolerances.json", test_shared_dir());
    cJSON *tol = util_read_json(path);
    const cJSON *bars = tol ? cJSON_GetObjectItem(tol, name) : NULL;
    bool ok = j && bars && read_ints(cJSON_GetObjectItem(j, "prompt"), r->prompt, REF_PROMPT) &&
              read_ints(cJSON_GetObjectItem(j, "greedy"), r->greedy, REF_GREEDY);
    if (ok) {
        r->n_vocab = cJSON_GetObjectItem(j, "n_vocab")->valueint;
        r->max_kl_mean = cJSON_GetNumberValue(cJSON_GetObjectItem(bars, "max_kl_mean"));
        r->min_top1 = cJSON_GetNumberValue(cJSON_GetObjectItem(bars, "min_top1"));
        r->min_greedy_match = cJSON_GetObjectItem(bars, "min_greedy_match")->valueint;
    }
    cJSON_Delete(j);
    cJSON_Delete(tol);
    return ok;
}

float *ref_read_logits(const char *path, int n_vocab, size_t *size)
{
    size_t n = 0;
    float *l = (float *)util_read_file(path, &n);
    if (size != NULL)
        *size = l != NULL ? n : 0;
    if (l != NULL && n != sizeof(float) * REF_PROMPT * (size_t)n_vocab) {
        free(l);
        return NULL;
    }
    return l;
}

const char *ref_logits_path(const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/ref/%s.logits.f32", test_shared_dir(), name);
    return path;
}

bool ref_load_with_logits(const char *name, ref_case *r, float **logits, char *why, size_t why_len)
{
    *logits = NULL;
    if (!ref_load(name, r))
        return snprintf(why, why_len, "cannot read the reference JSON or tolerances of %s", name), false;
    char path[512];
    size_t size = 0;
    *logits = ref_read_logits(ref_logits_path(name, path, sizeof path), r->n_vocab, &size);
    if (*logits == NULL)
        return snprintf(why, why_len, "%s: %zu bytes, expected %d x %d floats", path, size, REF_PROMPT, r->n_vocab),
               false;
    return true;
}

float *ref_read_quant_source(char *path, size_t len, size_t *size)
{
    snprintf(path, len, "%s/ref/dequant/dequant-f32.f32", test_shared_dir());
    *size = 0;
    float *src = (float *)util_read_file(path, size);
    if (src != NULL && *size != REF_QUANT_SOURCE * sizeof(float)) {
        free(src);
        src = NULL;
    }
    return src;
}

int ref_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* log-softmax of a row in double */
static void log_softmax(const float *x, int n, double *out)
{
    double max = x[0], sum = 0;
    for (int i = 1; i < n; i++)
        max = fmax(max, x[i]);
    for (int i = 0; i < n; i++)
        sum += exp((double)x[i] - max);
    const double lse = max + log(sum);
    for (int i = 0; i < n; i++)
        out[i] = (double)x[i] - lse;
}

ref_score ref_score_rows(const float *ref, const float *got, int n_rows, int n_vocab)
{
    double *lr = malloc(sizeof(double) * (size_t)n_vocab), *lg = malloc(sizeof(double) * (size_t)n_vocab);
    ref_score s = {0, 0};
    if (lr == NULL || lg == NULL) {
        free(lr);
        free(lg);
        return (ref_score){INFINITY, 0};
    }
    for (int r = 0; r < n_rows; r++) {
        const float *a = ref + (size_t)r * n_vocab, *b = got + (size_t)r * n_vocab;
        log_softmax(a, n_vocab, lr);
        log_softmax(b, n_vocab, lg);
        double kl = 0;
        for (int v = 0; v < n_vocab; v++)
            kl += exp(lr[v]) * (lr[v] - lg[v]);
        s.kl += kl;
        s.top1 += ref_argmax(a, n_vocab) == ref_argmax(b, n_vocab);
    }
    free(lr);
    free(lg);
    s.kl /= n_rows;
    s.top1 /= n_rows;
    if (isnan(s.kl))
        s.kl = INFINITY;
    return s;
}

bool ref_passes(const ref_case *r, ref_score s) { return s.kl <= r->max_kl_mean && s.top1 >= r->min_top1; }

hydra_status ref_run_greedy(hydra_session *s, const ref_case *r, float *batch, int32_t *greedy)
{
    hydra_status st = hydra_session_eval(s, r->prompt, REF_PROMPT, batch);
    for (int i = 0; i < REF_GREEDY && st == HYDRA_OK; i++) {
        greedy[i] = ref_argmax(hydra_session_logits(s), r->n_vocab);
        st = hydra_session_decode(s, greedy[i]);
    }
    return st;
}

int ref_same_prefix(const int32_t *a, const int32_t *b, int n)
{
    int same = 0;
    while (same < n && a[same] == b[same])
        same++;
    return same;
}
