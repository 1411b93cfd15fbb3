/*
 * The public API's contract: statuses and messages, exported symbols,
 * loading options (progress, cancel, mmap or read), typed metadata access.
 */
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <stdlib.h>

TEST(api_every_status_has_a_distinct_description)
{
    for (int i = 0; i < HYDRA_STATUS_COUNT; i++) {
        const char *s = hydra_strerror((hydra_status)i);
        CHECK(s != NULL && s[0] != '\0');
        for (int j = 0; j < i; j++)
            if (strcmp(s, hydra_strerror((hydra_status)j)) == 0)
                FAIL("statuses %d and %d share the description \"%s\"", i, j, s);
    }
    CHECK_EQ_STR(hydra_strerror(HYDRA_OK), "success");
    CHECK_EQ_STR(hydra_strerror((hydra_status)9999), "unknown status");
}

TEST(api_shared_library_exports_only_hydra_symbols)
{
    char cmd[512], line[512];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s/libhydra.so", test_build_dir());
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        FAIL("cannot run %s", cmd);
    int exported = 0;
    char bad[256] = "";
    while (fgets(line, sizeof line, p) != NULL) {
        char addr[64], kind[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, kind, name) != 3)
            continue;
        if (strncmp(name, "hydra_", 6) == 0)
            exported++;
        else if (bad[0] == '\0' && strcmp(kind, "A") != 0 && strncmp(name, "_", 1) != 0)
            snprintf(bad, sizeof bad, "%s", name);
    }
    int rc = pclose(p);
    CHECK_EQ_INT(rc, 0);
    if (bad[0] != '\0')
        FAIL("libhydra.so exports '%s', which lacks the hydra_ prefix", bad);
    CHECK(exported >= 20);
}

TEST(api_open_missing_file_names_the_path)
{
    hydra_model_params p = hydra_model_default_params();
    p.path = "/nonexistent/dir/model.gguf";
    hydra_model *m = (hydra_model *)1;
    CHECK_EQ_INT(hydra_model_open(&m, &p), HYDRA_ERR_IO);
    CHECK(m == NULL);
    CHECK(strstr(hydra_last_error(), "/nonexistent/dir/model.gguf") != NULL);
}

TEST(api_open_without_path_is_invalid_argument)
{
    hydra_model_params p = hydra_model_default_params();
    hydra_model *m;
    CHECK_EQ_INT(hydra_model_open(&m, &p), HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(hydra_model_open(&m, NULL), HYDRA_ERR_INVALID_ARG);
    CHECK(hydra_last_error()[0] != '\0');
}

TEST(api_open_a_directory_is_refused)
{
    hydra_model_params p = hydra_model_default_params();
    p.path = ".";
    hydra_model *m;
    CHECK_EQ_INT(hydra_model_open(&m, &p), HYDRA_ERR_IO);
    CHECK(strstr(hydra_last_error(), "not a regular file") != NULL);
}

TEST(api_close_accepts_null)
{
    hydra_model_close(NULL);
}

static char shared_model[512];

static const char *qwen3_q8(void)
{
    snprintf(shared_model, sizeof shared_model, "%s/models/qwen3moe-tiny-q8_0.gguf", test_shared_dir());
    return shared_model;
}

typedef struct progress_log {
    int calls;
    float last;
    bool monotonic;
    int cancel_at; /* 0 = never */
} progress_log;

static bool on_progress(float fraction, void *user)
{
    progress_log *log = user;
    if (fraction < log->last)
        log->monotonic = false;
    log->last = fraction;
    log->calls++;
    return log->cancel_at == 0 || log->calls < log->cancel_at;
}

TEST(api_progress_reaches_one_and_never_goes_back)
{
    REQUIRE_SHARED();
    for (int use_mmap = 0; use_mmap <= 1; use_mmap++) {
        progress_log log = {.monotonic = true};
        hydra_model_params p = hydra_model_default_params();
        p.path = qwen3_q8();
        p.use_mmap = use_mmap;
        p.progress = on_progress;
        p.progress_user = &log;
        hydra_model *m;
        CHECK_OK(hydra_model_open(&m, &p));
        hydra_model_close(m);
        CHECK(log.monotonic);
        CHECK(log.last == 1.0f);
    }
}

TEST(api_progress_callback_can_cancel_loading)
{
    REQUIRE_SHARED();
    for (int use_mmap = 0; use_mmap <= 1; use_mmap++) {
        progress_log log = {.monotonic = true, .cancel_at = 1};
        hydra_model_params p = hydra_model_default_params();
        p.path = qwen3_q8();
        p.use_mmap = use_mmap;
        p.progress = on_progress;
        p.progress_user = &log;
        hydra_model *m = (hydra_model *)1;
        CHECK_EQ_INT(hydra_model_open(&m, &p), HYDRA_ERR_CANCELLED);
        CHECK(m == NULL);
        CHECK(strstr(hydra_last_error(), "cancelled") != NULL);
    }
}

TEST(api_read_and_mmap_give_the_same_tensor_bytes)
{
    REQUIRE_SHARED();
    hydra_model *a, *b;
    hydra_model_params p = hydra_model_default_params();
    p.path = qwen3_q8();
    CHECK_OK(hydra_model_open(&a, &p));
    p.use_mmap = false;
    hydra_status st = hydra_model_open(&b, &p);
    if (st != HYDRA_OK) {
        hydra_model_close(a);
        CHECK_OK(st);
    }
    size_t n = hydra_model_tensor_count(a), differing = n;
    if (n == hydra_model_tensor_count(b)) {
        differing = 0;
        for (size_t i = 0; i < n; i++) {
            hydra_tensor_info x, y;
            hydra_model_tensor_at(a, i, &x);
            hydra_model_tensor_at(b, i, &y);
            differing += x.n_bytes != y.n_bytes || memcmp(x.data, y.data, x.n_bytes) != 0;
        }
    }
    hydra_model_close(a);
    hydra_model_close(b);
    CHECK_EQ_U64(differing, 0);
}

TEST(api_typed_getters_convert_only_what_fits)
{
    REQUIRE_SHARED();
    hydra_model *m;
    hydra_model_params p = hydra_model_default_params();
    p.path = qwen3_q8();
    CHECK_OK(hydra_model_open(&m, &p));
    uint64_t u;
    int64_t i;
    double f;
    const char *s;
    size_t len;
    hydra_status not_found = hydra_model_get_u64(m, "no.such.key", &u);
    hydra_status str_as_int = hydra_model_get_u64(m, "general.architecture", &u);
    hydra_status int_as_float = hydra_model_get_f64(m, "qwen3moe.block_count", &f);
    hydra_status int_as_i64 = hydra_model_get_i64(m, "qwen3moe.block_count", &i);
    hydra_status str = hydra_model_get_str(m, "general.architecture", &s, &len);
    hydra_status past_end = hydra_model_get_arr_str(m, "tokenizer.ggml.tokens", 100000, &s, &len);
    hydra_status tok0 = hydra_model_get_arr_str(m, "tokenizer.ggml.tokens", 0, &s, &len);
    char first_token[16];
    snprintf(first_token, sizeof first_token, "%s", tok0 == HYDRA_OK ? s : "");
    hydra_model_close(m);
    CHECK_EQ_INT(not_found, HYDRA_ERR_NOT_FOUND);
    CHECK_EQ_INT(str_as_int, HYDRA_ERR_TYPE);
    CHECK_EQ_INT(int_as_float, HYDRA_ERR_TYPE);
    CHECK_EQ_INT(int_as_i64, HYDRA_OK);
    CHECK_EQ_INT(i, 2);
    CHECK_EQ_INT(str, HYDRA_OK);
    CHECK_EQ_INT(past_end, HYDRA_ERR_RANGE);
    CHECK_EQ_INT(tok0, HYDRA_OK);
    CHECK_EQ_STR(first_token, "!"); /* GPT-2's byte-level vocabulary starts with '!' */
}

TEST(api_totals_add_up_over_tensors)
{
    REQUIRE_SHARED();
    hydra_model *m;
    hydra_model_params p = hydra_model_default_params();
    p.path = qwen3_q8();
    CHECK_OK(hydra_model_open(&m, &p));
    uint64_t params = 0, bytes = 0, by_type = 0;
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info t;
        hydra_model_tensor_at(m, i, &t);
        params += t.n_elements;
        bytes += t.n_bytes;
    }
    for (uint32_t t = 0; t < hydra_type_count(); t++)
        by_type += hydra_model_bytes_of_type(m, t);
    uint64_t n_params = hydra_model_n_params(m), n_bytes = hydra_model_n_bytes(m), size = hydra_model_file_size(m);
    hydra_model_close(m);
    CHECK_EQ_U64(n_params, params);
    CHECK_EQ_U64(n_bytes, bytes);
    CHECK_EQ_U64(by_type, bytes);
    CHECK(size > bytes);
}
