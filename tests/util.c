#include "util.h"

#include "synth.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

uint8_t *util_read_file(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    uint8_t *buf = NULL;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long n = ftell(fp);
        buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
        if (buf != NULL && (fseek(fp, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, fp) != (size_t)n)) {
            free(buf);
            buf = NULL;
        }
        if (buf != NULL) {
            buf[n] = 0;
            *size = (size_t)n;
        }
    }
    fclose(fp);
    return buf;
}

int util_write_file(const char *path, const void *data, size_t size)
{
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return -1;
    size_t w = fwrite(data, 1, size, fp);
    return (fclose(fp) == 0 && w == size) ? 0 : -1;
}

cJSON *util_read_json(const char *path)
{
    size_t n;
    char *text = (char *)util_read_file(path, &n);
    if (text == NULL)
        return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

const char *util_scratch_path(const char *name)
{
    static _Thread_local char path[4096];
    snprintf(path, sizeof path, "%s/test-scratch", test_build_dir());
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/test-scratch/%s", test_build_dir(), name);
    return path;
}

char *util_read_output(const char *path)
{
    size_t n = 0;
    char *text = (char *)util_read_file(path, &n);
    for (size_t i = 0; text != NULL && i < n; i++)
        text[i] = text[i] == '\0' ? '\x01' : text[i];
    return text;
}

bool util_run_tool(const char *env, const char *tool, const char *args, const char *input, tool_run *r)
{
    char in[4096], out[4096], err[4096];
    snprintf(in, sizeof in, "%s", util_scratch_path("tool-stdin.txt"));
    snprintf(out, sizeof out, "%s", util_scratch_path("tool-stdout.txt"));
    snprintf(err, sizeof err, "%s", util_scratch_path("tool-stderr.txt"));
    *r = (tool_run){.status = -1};
    if (util_write_file(in, input ? input : "", input ? strlen(input) : 0) != 0)
        return false;
    size_t cap = (env ? strlen(env) : 0) + strlen(tool) + strlen(args) + 3 * sizeof in + 256;
    char *cmd = malloc(cap);
    if (cmd == NULL)
        return false;
    snprintf(cmd, cap, "%s %s/%s %s <%s >%s 2>%s", env ? env : "", test_build_dir(), tool, args, in, out, err);
    int rc = system(cmd);
    free(cmd);
    r->status = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r->out = util_read_output(out);
    r->err = util_read_output(err);
    return r->out != NULL && r->err != NULL;
}

void tool_run_free(tool_run *r)
{
    free(r->out);
    free(r->err);
}

const char *util_shared_model_path(const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/models/%s.gguf", test_shared_dir(), name);
    return path;
}

hydra_status util_open_model(const char *path, hydra_model **m)
{
    hydra_model_params p = hydra_model_default_params();
    p.path = path;
    return hydra_model_open(m, &p);
}

hydra_status util_open_synth(const synth_params *p, const char *name, hydra_model **m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", util_scratch_path(name));
    hydra_status st = synth_write(path, p);
    return st != HYDRA_OK ? st : util_open_model(path, m);
}

hydra_status util_open_synth_preset(const char *preset, const char *prefix, hydra_model **m)
{
    char name[128];
    snprintf(name, sizeof name, "%s-%s.gguf", prefix, preset);
    synth_params p;
    hydra_status st = synth_preset(preset, &p);
    return st != HYDRA_OK ? st : util_open_synth(&p, name, m);
}

uint8_t *util_synth_bytes(const synth_params *p, const char *name, size_t *size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", util_scratch_path(name));
    return synth_write(path, p) == HYDRA_OK ? util_read_file(path, size) : NULL;
}

bool util_synth_same_bytes(const synth_params *a, const char *name_a, const synth_params *b, const char *name_b)
{
    size_t na = 0, nb = 0;
    uint8_t *bytes_a = util_synth_bytes(a, name_a, &na), *bytes_b = util_synth_bytes(b, name_b, &nb);
    bool same = bytes_a && bytes_b && na == nb && memcmp(bytes_a, bytes_b, na) == 0;
    free(bytes_a);
    free(bytes_b);
    return same;
}

hydra_status util_eval_nonfinite(hydra_session *s, size_t *nonfinite)
{
    static const int32_t tokens[4] = {1, 100, 200, 300};
    hydra_status st = hydra_session_eval(s, tokens, 4, NULL);
    for (uint32_t i = 0; st == HYDRA_OK && i < hydra_session_n_vocab(s); i++)
        *nonfinite += !isfinite(hydra_session_logits(s)[i]);
    return st;
}

hydra_status util_model_nonfinite(const hydra_model *m, size_t *nonfinite)
{
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = 32, sp.n_threads = 2;
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, m, &sp);
    if (st == HYDRA_OK)
        st = util_eval_nonfinite(s, nonfinite);
    hydra_session_free(s);
    return st;
}

hydra_status util_new_session(const hydra_model *m, uint32_t n_ctx, uint32_t n_batch, int n_threads, hydra_session **s)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.n_threads = n_threads;
    return hydra_session_create(s, m, &p);
}

hydra_sampler_params util_greedy_params(void)
{
    hydra_sampler_params sp = hydra_sampler_default_params();
    sp.temperature = 0;
    return sp;
}

hydra_status util_greedy_decode(hydra_session *s, const hydra_token *prompt, size_t n_prompt, hydra_token *out,
                                int n_out)
{
    hydra_sampler *sm = NULL;
    const hydra_sampler_params sp = util_greedy_params();
    hydra_status st = hydra_sampler_new(&sp, (int32_t)hydra_session_n_vocab(s), &sm);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, prompt, n_prompt, NULL);
    for (int i = 0; st == HYDRA_OK && i < n_out; i++) {
        st = hydra_sampler_sample(sm, hydra_session_logits(s), &out[i]);
        if (st == HYDRA_OK && i + 1 < n_out)
            st = hydra_session_decode(s, out[i]);
    }
    hydra_sampler_free(sm);
    return st;
}

hydra_status util_open_shared_model(const char *name, hydra_model **m)
{
    char path[512];
    return util_open_model(util_shared_model_path(name, path, sizeof path), m);
}
