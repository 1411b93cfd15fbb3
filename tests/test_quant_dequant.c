/*
 * test_quant_dequant.c — every tensor of ../shared/ref/dequant dequantises,
 * through the type table's to_float row by row, to exactly the floats
 * ggml's own dequantisation made of it (bit for bit, -0 included); types
 * hydra cannot compute yet are refused by quant_require() with a message
 * naming the tensor and the type.
 */
#include "test.h"
#include "util.h"

#include "hydra.h"
#include "quant.h"

#include <stdlib.h>

/* The types issues 3 and 11 make hydra compute with (exact dequantisation). */
static const char *const computed_types[] = {
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
    "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4",
    /* issue 11: the lattice and ternary formats */
    "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0",
};
/* Described by the table but refused when used, for now. */
static const char *const refused_types[] = {
    "NVFP4", "Q1_0", "Q2_0",
};

static bool listed(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0)
            return true;
    return false;
}

#define LISTED(name, list) listed(name, list, sizeof list / sizeof list[0])

static char failure[1024];

static const char *dequant_path(const char *file)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/ref/dequant/%s", test_shared_dir(), file);
    return path;
}

/* Dequantises one tensor row by row and compares bits with ref; NULL when
 * equal, else a message naming the first differing value. */
static const char *compare_tensor(const hydra_model *m, const cJSON *tj, const uint8_t *ref, size_t ref_size)
{
    const char *name = cJSON_GetObjectItem(tj, "name")->valuestring;
    size_t offset = (size_t)cJSON_GetObjectItem(tj, "f32_offset")->valuedouble;
    size_t count = (size_t)cJSON_GetObjectItem(tj, "f32_count")->valuedouble;
    hydra_tensor_info info;
    if (hydra_model_tensor_find(m, name, &info) != HYDRA_OK)
        return snprintf(failure, sizeof failure, "tensor %s not found: %s", name, hydra_last_error()), failure;
    const quant_traits *q = quant_traits_of(info.type);
    if (info.n_elements != count || offset + 4 * count > ref_size || q == NULL || q->to_float == NULL)
        return snprintf(failure, sizeof failure, "%s: %s has no to_float or the index disagrees", name, info.type_name),
               failure;
    uint64_t row_len = info.ne[0], row_bytes;
    quant_row_bytes(info.type, row_len, &row_bytes);
    float *row = malloc(row_len * sizeof *row);
    const char *result = NULL;
    for (uint64_t r = 0; r < count / row_len && result == NULL; r++) {
        q->to_float((const uint8_t *)info.data + r * row_bytes, row, (int64_t)row_len);
        for (uint64_t i = 0; i < row_len; i++) {
            float want;
            memcpy(&want, ref + offset + 4 * (r * row_len + i), 4);
            if (memcmp(&want, &row[i], 4) != 0) {
                snprintf(failure, sizeof failure, "%s (%s): value %" PRIu64 " (row %" PRIu64 ") is %.9g, expected %.9g",
                         name, info.type_name, r * row_len + i, r, (double)row[i], (double)want);
                result = failure;
                break;
            }
        }
    }
    free(row);
    return result;
}

/* quant_require must refuse every tensor, naming it and its type. */
static const char *check_refused(const hydra_model *m, const cJSON *tj, const char *type)
{
    const char *name = cJSON_GetObjectItem(tj, "name")->valuestring;
    hydra_tensor_info info;
    if (hydra_model_tensor_find(m, name, &info) != HYDRA_OK)
        return snprintf(failure, sizeof failure, "tensor %s not found: %s", name, hydra_last_error()), failure;
    hydra_status st = quant_require(info.type, name);
    const char *msg = hydra_last_error();
    if (st != HYDRA_ERR_UNSUPPORTED || strstr(msg, type) == NULL || strstr(msg, name) == NULL)
        return snprintf(failure, sizeof failure, "quant_require(%s, %s) gave %s, \"%s\"", type, name,
                        hydra_strerror(st), msg), failure;
    return NULL;
}

static const char *check_file(const cJSON *fj, int *n_computed, int *n_refused)
{
    const char *type = cJSON_GetObjectItem(fj, "type")->valuestring;
    bool computed = LISTED(type, computed_types);
    if (!computed && !LISTED(type, refused_types))
        return snprintf(failure, sizeof failure, "index.json lists type %s, which this test does not know", type), failure;
    hydra_model_params p = hydra_model_default_params();
    p.path = dequant_path(cJSON_GetObjectItem(fj, "gguf")->valuestring);
    hydra_model *m;
    if (hydra_model_open(&m, &p) != HYDRA_OK)
        return snprintf(failure, sizeof failure, "open %s: %s", p.path, hydra_last_error()), failure;
    size_t ref_size = 0;
    uint8_t *ref = computed ? util_read_file(dequant_path(cJSON_GetObjectItem(fj, "reference")->valuestring), &ref_size)
                            : NULL;
    const char *result = computed && ref == NULL ? "cannot read the reference .f32" : NULL;
    const cJSON *tj;
    cJSON_ArrayForEach(tj, cJSON_GetObjectItem(fj, "tensors"))
    {
        if (result == NULL)
            result = computed ? compare_tensor(m, tj, ref, ref_size) : check_refused(m, tj, type);
        if (result == NULL)
            (*(computed ? n_computed : n_refused))++;
    }
    free(ref);
    hydra_model_close(m);
    return result;
}

TEST(quant_dequant_matches_ggml_bit_exactly)
{
    REQUIRE_SHARED();
    cJSON *index = util_read_json(dequant_path("index.json"));
    if (index == NULL)
        FAIL("cannot read %s", dequant_path("index.json"));
    int n_computed = 0, n_refused = 0;
    /* the F32 source is described apart from the quantised files */
    const char *result = check_file(cJSON_GetObjectItem(index, "source"), &n_computed, &n_refused);
    const cJSON *fj;
    cJSON_ArrayForEach(fj, cJSON_GetObjectItem(index, "files"))
    {
        if (result != NULL)
            break;
        result = check_file(fj, &n_computed, &n_refused);
    }
    cJSON_Delete(index);
    if (result != NULL)
        FAIL("%s", result);
    /* two tensors per file */
    CHECK_EQ_INT(n_computed, 2 * (int)(sizeof computed_types / sizeof computed_types[0]));
    CHECK_EQ_INT(n_refused, 2 * (int)(sizeof refused_types / sizeof refused_types[0]));
}

TEST(quant_require_accepts_computed_types_and_names_the_rest)
{
    for (uint32_t t = 0; t < hydra_type_count(); t++) {
        const char *name = hydra_type_name(t);
        if (name == NULL) {
            CHECK_EQ_INT(quant_require(t, "x"), HYDRA_ERR_UNSUPPORTED);
            continue;
        }
        hydra_status st = quant_require(t, "blk.0.ffn_up_exps.weight");
        if (LISTED(name, computed_types)) {
            CHECK_OK(st);
        } else {
            CHECK_EQ_INT(st, HYDRA_ERR_UNSUPPORTED);
            CHECK(strstr(hydra_last_error(), name) != NULL);
            CHECK(strstr(hydra_last_error(), "'blk.0.ffn_up_exps.weight'") != NULL);
        }
    }
    CHECK_EQ_INT(quant_require(hydra_type_count(), "x"), HYDRA_ERR_UNSUPPORTED);
}
