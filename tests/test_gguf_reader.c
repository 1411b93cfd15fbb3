/*
 * The GGUF reader on files it must accept, built by hand (gguf_builder.h) so
 * every expected value below is written by the test, not computed by the
 * code under test: both versions, every metadata value type, nested arrays,
 * general.alignment, tensor shapes, sizes and data pointers, lookups, and the
 * typed getters' errors.  Each file is opened both mapped and read.
 */
#include "gguf_builder.h"
#include "gguf_write.h"
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <unistd.h>

/* Opens an image both ways; the test body runs once per way. */
#define FOR_EACH_WAY(use_mmap) for (int use_mmap = 1; use_mmap >= 0; use_mmap--)

/* ------------------------------------------------------- value types */

enum { N_VALUE_KEYS = 30 };

/* One key per scalar type, edge values; arrays of every element type,
 * strings with NUL bytes, empty arrays, arrays of arrays. */
static void build_value_file(gguf_builder *b, uint32_t version)
{
    gb_header(b, version, 0, N_VALUE_KEYS);
    gb_key(b, "t.u8", HYDRA_VALUE_U8), gb_u8(b, 200);
    gb_key(b, "t.i8", HYDRA_VALUE_I8), gb_u8(b, (uint8_t)-100);
    gb_key(b, "t.u16", HYDRA_VALUE_U16), gb_u16(b, 60000);
    gb_key(b, "t.i16", HYDRA_VALUE_I16), gb_u16(b, (uint16_t)-30000);
    gb_key(b, "t.u32", HYDRA_VALUE_U32), gb_u32(b, 4000000000u);
    gb_key(b, "t.i32", HYDRA_VALUE_I32), gb_u32(b, (uint32_t)-2000000000);
    gb_key(b, "t.f32", HYDRA_VALUE_F32), gb_f32(b, 1.5f);
    gb_key(b, "t.bool", HYDRA_VALUE_BOOL), gb_u8(b, 1);
    gb_key(b, "t.bool0", HYDRA_VALUE_BOOL), gb_u8(b, 0);
    gb_key(b, "t.str", HYDRA_VALUE_STRING), gb_cstr(b, "hello");
    gb_key(b, "t.str_nul", HYDRA_VALUE_STRING), gb_str(b, "a\0b", 3);
    gb_key(b, "t.str_empty", HYDRA_VALUE_STRING), gb_str(b, "", 0);
    gb_key(b, "t.u64", HYDRA_VALUE_U64), gb_u64(b, UINT64_MAX);
    gb_key(b, "t.i64", HYDRA_VALUE_I64), gb_u64(b, (uint64_t)INT64_MIN);
    gb_key(b, "t.f64", HYDRA_VALUE_F64), gb_f64(b, -2.25);
    gb_key(b, "t.arr_u8", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_U8, 3);
    gb_u8(b, 1), gb_u8(b, 2), gb_u8(b, 255);
    gb_key(b, "t.arr_i8", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_I8, 3);
    gb_u8(b, 0xff), gb_u8(b, 127), gb_u8(b, 0x80);
    gb_key(b, "t.arr_u16", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_U16, 1), gb_u16(b, 65535);
    gb_key(b, "t.arr_i16", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_I16, 1), gb_u16(b, 0x8000);
    gb_key(b, "t.arr_u32", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_U32, 1), gb_u32(b, UINT32_MAX);
    gb_key(b, "t.arr_i32", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_I32, 2);
    gb_u32(b, (uint32_t)-5), gb_u32(b, 7);
    gb_key(b, "t.arr_f32", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_F32, 2), gb_f32(b, 0.5f), gb_f32(b, -8.0f);
    gb_key(b, "t.arr_bool", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_BOOL, 2), gb_u8(b, 1), gb_u8(b, 0);
    gb_key(b, "t.arr_u64", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_U64, 2), gb_u64(b, UINT64_MAX), gb_u64(b, 3);
    gb_key(b, "t.arr_i64", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_I64, 1), gb_u64(b, (uint64_t)INT64_MIN);
    gb_key(b, "t.arr_f64", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_F64, 1), gb_f64(b, 1e300);
    gb_key(b, "t.arr_str", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_STRING, 4);
    gb_cstr(b, "x"), gb_str(b, "", 0), gb_str(b, "a\0c", 3), gb_cstr(b, "longer string");
    gb_key(b, "t.arr_empty", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_U32, 0);
    /* [[1, 2] as i32, [] as u8, [["deep"]]]: each inner array has its own type. */
    gb_key(b, "t.arr_nested", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_ARRAY, 3);
    gb_array(b, HYDRA_VALUE_I32, 2), gb_u32(b, 1), gb_u32(b, 2);
    gb_array(b, HYDRA_VALUE_U8, 0);
    gb_array(b, HYDRA_VALUE_ARRAY, 1), gb_array(b, HYDRA_VALUE_STRING, 1), gb_cstr(b, "deep");
    gb_key(b, "t.arr_nested_str", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_ARRAY, 2);
    gb_array(b, HYDRA_VALUE_STRING, 2), gb_cstr(b, "a"), gb_cstr(b, "b");
    gb_array(b, HYDRA_VALUE_STRING, 1), gb_cstr(b, "c");
}

static const struct {
    const char *key;
    hydra_value_type type;
} value_keys[N_VALUE_KEYS] = {
    {"t.u8", HYDRA_VALUE_U8},         {"t.i8", HYDRA_VALUE_I8},          {"t.u16", HYDRA_VALUE_U16},
    {"t.i16", HYDRA_VALUE_I16},       {"t.u32", HYDRA_VALUE_U32},        {"t.i32", HYDRA_VALUE_I32},
    {"t.f32", HYDRA_VALUE_F32},       {"t.bool", HYDRA_VALUE_BOOL},      {"t.bool0", HYDRA_VALUE_BOOL},
    {"t.str", HYDRA_VALUE_STRING},    {"t.str_nul", HYDRA_VALUE_STRING}, {"t.str_empty", HYDRA_VALUE_STRING},
    {"t.u64", HYDRA_VALUE_U64},       {"t.i64", HYDRA_VALUE_I64},        {"t.f64", HYDRA_VALUE_F64},
    {"t.arr_u8", HYDRA_VALUE_ARRAY},  {"t.arr_i8", HYDRA_VALUE_ARRAY},   {"t.arr_u16", HYDRA_VALUE_ARRAY},
    {"t.arr_i16", HYDRA_VALUE_ARRAY}, {"t.arr_u32", HYDRA_VALUE_ARRAY},  {"t.arr_i32", HYDRA_VALUE_ARRAY},
    {"t.arr_f32", HYDRA_VALUE_ARRAY}, {"t.arr_bool", HYDRA_VALUE_ARRAY}, {"t.arr_u64", HYDRA_VALUE_ARRAY},
    {"t.arr_i64", HYDRA_VALUE_ARRAY}, {"t.arr_f64", HYDRA_VALUE_ARRAY},  {"t.arr_str", HYDRA_VALUE_ARRAY},
    {"t.arr_empty", HYDRA_VALUE_ARRAY}, {"t.arr_nested", HYDRA_VALUE_ARRAY},
    {"t.arr_nested_str", HYDRA_VALUE_ARRAY},
};

/* Opens the value file of one version one way, or fails the test. */
#define OPEN_VALUE_FILE(m, version, use_mmap)                                 \
    do {                                                                      \
        gguf_builder b_ = {0};                                                \
        build_value_file(&b_, version);                                       \
        hydra_status open_st = gb_open(&b_, use_mmap, &m);                    \
        gb_free(&b_);                                                         \
        CHECK_OK(open_st);                                                    \
    } while (0)

/* Runs a check on an open model; closes it before failing. */
#define CHECK_M(m, cond)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            hydra_model_close(m);                                             \
            FAIL("CHECK(%s) failed", #cond);                                  \
        }                                                                     \
    } while (0)

TEST(gguf_reader_lists_keys_in_file_order_v2_and_v3)
{
    for (uint32_t version = 2; version <= 3; version++)
        FOR_EACH_WAY(use_mmap) {
            hydra_model *m;
            OPEN_VALUE_FILE(m, version, use_mmap);
            CHECK_M(m, hydra_model_gguf_version(m) == version);
            CHECK_M(m, hydra_model_meta_count(m) == N_VALUE_KEYS);
            CHECK_M(m, hydra_model_tensor_count(m) == 0);
            CHECK_M(m, strcmp(hydra_model_arch(m), "") == 0);
            for (size_t i = 0; i < N_VALUE_KEYS; i++) {
                const char *key;
                hydra_value_type type, by_name;
                CHECK_M(m, hydra_model_meta_at(m, i, &key, &type) == HYDRA_OK);
                CHECK_M(m, strcmp(key, value_keys[i].key) == 0 && type == value_keys[i].type);
                CHECK_M(m, hydra_model_meta_type(m, key, &by_name) == HYDRA_OK && by_name == type);
            }
            const char *key;
            hydra_value_type type;
            CHECK_M(m, hydra_model_meta_at(m, N_VALUE_KEYS, &key, &type) == HYDRA_ERR_RANGE);
            hydra_model_close(m);
        }
}

TEST(gguf_reader_integer_getters_convert_only_what_fits)
{
    for (uint32_t version = 2; version <= 3; version++)
        FOR_EACH_WAY(use_mmap) {
            hydra_model *m;
            OPEN_VALUE_FILE(m, version, use_mmap);
            uint64_t u = 0;
            int64_t i = 0;
            CHECK_M(m, hydra_model_get_u64(m, "t.u8", &u) == HYDRA_OK && u == 200);
            CHECK_M(m, hydra_model_get_u64(m, "t.u16", &u) == HYDRA_OK && u == 60000);
            CHECK_M(m, hydra_model_get_u64(m, "t.u32", &u) == HYDRA_OK && u == 4000000000u);
            CHECK_M(m, hydra_model_get_u64(m, "t.u64", &u) == HYDRA_OK && u == UINT64_MAX);
            CHECK_M(m, hydra_model_get_i64(m, "t.u8", &i) == HYDRA_OK && i == 200);
            CHECK_M(m, hydra_model_get_i64(m, "t.u32", &i) == HYDRA_OK && i == 4000000000);
            CHECK_M(m, hydra_model_get_i64(m, "t.i8", &i) == HYDRA_OK && i == -100);
            CHECK_M(m, hydra_model_get_i64(m, "t.i16", &i) == HYDRA_OK && i == -30000);
            CHECK_M(m, hydra_model_get_i64(m, "t.i32", &i) == HYDRA_OK && i == -2000000000);
            CHECK_M(m, hydra_model_get_i64(m, "t.i64", &i) == HYDRA_OK && i == INT64_MIN);
            /* Out of range: a negative as unsigned, u64 max as signed. */
            CHECK_M(m, hydra_model_get_u64(m, "t.i8", &u) == HYDRA_ERR_RANGE);
            CHECK_M(m, hydra_model_get_u64(m, "t.i64", &u) == HYDRA_ERR_RANGE);
            CHECK_M(m, hydra_model_get_i64(m, "t.u64", &i) == HYDRA_ERR_RANGE);
            CHECK_M(m, strstr(hydra_last_error(), "t.u64") != NULL);
            /* Not integers at all. */
            static const char *const not_int[] = {"t.f32", "t.f64", "t.bool", "t.str", "t.arr_u8"};
            for (size_t k = 0; k < sizeof not_int / sizeof not_int[0]; k++) {
                CHECK_M(m, hydra_model_get_u64(m, not_int[k], &u) == HYDRA_ERR_TYPE);
                CHECK_M(m, hydra_model_get_i64(m, not_int[k], &i) == HYDRA_ERR_TYPE);
                CHECK_M(m, strstr(hydra_last_error(), not_int[k]) != NULL);
            }
            hydra_model_close(m);
        }
}

TEST(gguf_reader_float_bool_and_string_getters)
{
    for (uint32_t version = 2; version <= 3; version++)
        FOR_EACH_WAY(use_mmap) {
            hydra_model *m;
            OPEN_VALUE_FILE(m, version, use_mmap);
            double f = 0;
            bool flag = false;
            const char *s = NULL;
            size_t len = 99;
            CHECK_M(m, hydra_model_get_f64(m, "t.f32", &f) == HYDRA_OK && f == 1.5);
            CHECK_M(m, hydra_model_get_f64(m, "t.f64", &f) == HYDRA_OK && f == -2.25);
            CHECK_M(m, hydra_model_get_f64(m, "t.u8", &f) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_f64(m, "t.str", &f) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_bool(m, "t.bool", &flag) == HYDRA_OK && flag);
            CHECK_M(m, hydra_model_get_bool(m, "t.bool0", &flag) == HYDRA_OK && !flag);
            CHECK_M(m, hydra_model_get_bool(m, "t.u8", &flag) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_str(m, "t.str", &s, &len) == HYDRA_OK && len == 5 &&
                           strcmp(s, "hello") == 0);
            CHECK_M(m, hydra_model_get_str(m, "t.str", &s, NULL) == HYDRA_OK && strcmp(s, "hello") == 0);
            CHECK_M(m, hydra_model_get_str(m, "t.str_nul", &s, &len) == HYDRA_OK && len == 3 &&
                           memcmp(s, "a\0b", 4) == 0);
            CHECK_M(m, hydra_model_get_str(m, "t.str_empty", &s, &len) == HYDRA_OK && len == 0 && s[0] == '\0');
            CHECK_M(m, hydra_model_get_str(m, "t.u32", &s, &len) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_str(m, "t.arr_str", &s, &len) == HYDRA_ERR_TYPE);
            hydra_model_close(m);
        }
}

TEST(gguf_reader_scalar_arrays_by_element)
{
    for (uint32_t version = 2; version <= 3; version++)
        FOR_EACH_WAY(use_mmap) {
            hydra_model *m;
            OPEN_VALUE_FILE(m, version, use_mmap);
            static const struct {
                const char *key;
                hydra_value_type elem;
                size_t n;
                int64_t first;
            } ints[] = {
                {"t.arr_u8", HYDRA_VALUE_U8, 3, 1},       {"t.arr_i8", HYDRA_VALUE_I8, 3, -1},
                {"t.arr_u16", HYDRA_VALUE_U16, 1, 65535}, {"t.arr_i16", HYDRA_VALUE_I16, 1, -32768},
                {"t.arr_u32", HYDRA_VALUE_U32, 1, UINT32_MAX}, {"t.arr_i32", HYDRA_VALUE_I32, 2, -5},
                {"t.arr_i64", HYDRA_VALUE_I64, 1, INT64_MIN},
            };
            hydra_value_type et;
            size_t n;
            int64_t i;
            double f;
            for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
                CHECK_M(m, hydra_model_get_arr(m, ints[k].key, &et, &n) == HYDRA_OK);
                CHECK_M(m, et == ints[k].elem && n == ints[k].n);
                CHECK_M(m, hydra_model_get_arr_i64(m, ints[k].key, 0, &i) == HYDRA_OK && i == ints[k].first);
                CHECK_M(m, hydra_model_get_arr_i64(m, ints[k].key, n, &i) == HYDRA_ERR_RANGE);
                CHECK_M(m, hydra_model_get_arr_f64(m, ints[k].key, 0, &f) == HYDRA_ERR_TYPE);
            }
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_u8", 2, &i) == HYDRA_OK && i == 255);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_i8", 1, &i) == HYDRA_OK && i == 127);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_i8", 2, &i) == HYDRA_OK && i == -128);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_i32", 1, &i) == HYDRA_OK && i == 7);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_u64", 0, &i) == HYDRA_ERR_RANGE);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_u64", 1, &i) == HYDRA_OK && i == 3);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_bool", 0, &i) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_arr(m, "t.arr_bool", &et, &n) == HYDRA_OK && et == HYDRA_VALUE_BOOL && n == 2);
            CHECK_M(m, hydra_model_get_arr_f64(m, "t.arr_f32", 0, &f) == HYDRA_OK && f == 0.5);
            CHECK_M(m, hydra_model_get_arr_f64(m, "t.arr_f32", 1, &f) == HYDRA_OK && f == -8.0);
            CHECK_M(m, hydra_model_get_arr_f64(m, "t.arr_f64", 0, &f) == HYDRA_OK && f == 1e300);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_f64", 0, &i) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_arr(m, "t.arr_empty", &et, &n) == HYDRA_OK && et == HYDRA_VALUE_U32 && n == 0);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_empty", 0, &i) == HYDRA_ERR_RANGE);
            CHECK_M(m, hydra_model_get_arr(m, "t.u8", &et, &n) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.u8", 0, &i) == HYDRA_ERR_TYPE);
            hydra_model_close(m);
        }
}

TEST(gguf_reader_string_and_nested_arrays)
{
    for (uint32_t version = 2; version <= 3; version++)
        FOR_EACH_WAY(use_mmap) {
            hydra_model *m;
            OPEN_VALUE_FILE(m, version, use_mmap);
            hydra_value_type et;
            size_t n, len;
            const char *s;
            int64_t i;
            CHECK_M(m, hydra_model_get_arr(m, "t.arr_str", &et, &n) == HYDRA_OK && et == HYDRA_VALUE_STRING && n == 4);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_str", 0, &s, &len) == HYDRA_OK && len == 1 &&
                           strcmp(s, "x") == 0);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_str", 1, &s, &len) == HYDRA_OK && len == 0 && s[0] == 0);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_str", 2, &s, &len) == HYDRA_OK && len == 3 &&
                           memcmp(s, "a\0c", 4) == 0);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_str", 3, &s, NULL) == HYDRA_OK &&
                           strcmp(s, "longer string") == 0);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_str", 4, &s, &len) == HYDRA_ERR_RANGE);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_str", 0, &i) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_i32", 0, &s, &len) == HYDRA_ERR_TYPE);
            /* Nested arrays are described, not read, through the API. */
            CHECK_M(m, hydra_model_get_arr(m, "t.arr_nested", &et, &n) == HYDRA_OK && et == HYDRA_VALUE_ARRAY &&
                           n == 3);
            CHECK_M(m, hydra_model_get_arr(m, "t.arr_nested_str", &et, &n) == HYDRA_OK &&
                           et == HYDRA_VALUE_ARRAY && n == 2);
            CHECK_M(m, hydra_model_get_arr_i64(m, "t.arr_nested", 0, &i) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_nested_str", 0, &s, &len) == HYDRA_ERR_TYPE);
            CHECK_M(m, hydra_model_get_arr_str(m, "t.arr_nested", 3, &s, &len) == HYDRA_ERR_RANGE);
            hydra_model_close(m);
        }
}

TEST(gguf_reader_missing_keys_are_not_found)
{
    hydra_model *m;
    OPEN_VALUE_FILE(m, 3, true);
    /* Absent keys, including prefixes and extensions of present ones. */
    static const char *const absent[] = {"t.u", "t.u8x", "t", "", "T.U8", "t.arr_nested.0"};
    for (size_t k = 0; k < sizeof absent / sizeof absent[0]; k++) {
        const char *key = absent[k];
        uint64_t u;
        int64_t i;
        double f;
        bool flag;
        const char *s;
        size_t n;
        hydra_value_type t;
        CHECK_M(m, hydra_model_meta_type(m, key, &t) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_u64(m, key, &u) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_i64(m, key, &i) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_f64(m, key, &f) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_bool(m, key, &flag) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_str(m, key, &s, &n) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_arr(m, key, &t, &n) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_arr_str(m, key, 0, &s, &n) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_arr_i64(m, key, 0, &i) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_get_arr_f64(m, key, 0, &f) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, strstr(hydra_last_error(), "not in the model") != NULL);
    }
    hydra_model_close(m);
}

/* ------------------------------------------------------------ tensors */

typedef struct tensor_spec {
    const char *name;
    uint32_t type; /* ggml id */
    const char *type_name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t n_elements; /* written out by hand */
    uint64_t n_bytes;    /* from the public block layouts */
    uint64_t offset;     /* relative to the data section */
} tensor_spec;

/* Sizes from the block layouts: F32 4 B, F16/BF16 2 B, Q8_0 34 B per 32,
 * Q4_K 144 B per 256, I8 1 B, I32 4 B. */
static const tensor_spec mixed_tensors[] = {
    {"blk.0.ffn_down_exps.weight", 8, "Q8_0", 3, {64, 3, 2, 1}, 384, 12 * 34, 0},
    {"token_embd.weight", 1, "F16", 2, {16, 5, 1, 1}, 80, 160, 480},
    {"output_norm.weight", 0, "F32", 1, {16, 1, 1, 1}, 16, 64, 416},
    {"blk.0.ffn_up_exps.weight", 12, "Q4_K", 4, {256, 2, 1, 2}, 1024, 4 * 144, 640},
    {"x", 30, "BF16", 1, {1, 1, 1, 1}, 1, 2, 1216},
    {"blk.1.attn_k.weight", 24, "I8", 2, {3, 3, 1, 1}, 9, 9, 1248},
    {"blk.1.attn_v.weight", 26, "I32", 1, {2, 1, 1, 1}, 2, 8, 1280},
};
enum { N_MIXED = sizeof mixed_tensors / sizeof mixed_tensors[0] };

static uint8_t data_byte(uint64_t at)
{
    return (uint8_t)(at * 131 + 7);
}

/* A file of the given tensors; every data byte is data_byte(offset in the
 * data section), padding included, so any pointer can be checked. */
static void build_tensor_file(gguf_builder *b, const tensor_spec *ts, size_t n, int64_t alignment,
                              uint64_t *data_offset)
{
    gb_header(b, 3, n, alignment >= 0 ? 2 : 1);
    gb_key(b, "general.architecture", HYDRA_VALUE_STRING), gb_cstr(b, "testarch");
    if (alignment >= 0)
        gb_key(b, "general.alignment", HYDRA_VALUE_U32), gb_u32(b, (uint32_t)alignment);
    uint64_t end = 0;
    for (size_t i = 0; i < n; i++) {
        gb_tensor_info(b, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, ts[i].offset);
        if (ts[i].offset + ts[i].n_bytes > end)
            end = ts[i].offset + ts[i].n_bytes;
    }
    gb_pad(b, alignment >= 0 ? (uint64_t)alignment : 32);
    *data_offset = b->len;
    for (uint64_t at = 0; at < end; at++)
        gb_u8(b, data_byte(at));
}

/* Every field of one tensor, and that its data pointer sees the bytes the
 * file holds at data_offset + offset. */
static bool tensor_matches(const hydra_tensor_info *ti, const tensor_spec *ts, uint64_t data_offset, char *why,
                           size_t why_len)
{
    if (strcmp(ti->name, ts->name) != 0 || ti->type != ts->type || strcmp(ti->type_name, ts->type_name) != 0 ||
        ti->n_dims != ts->n_dims || ti->n_elements != ts->n_elements || ti->n_bytes != ts->n_bytes)
        return snprintf(why, why_len, "'%s': name/type/shape/size differ", ts->name), false;
    for (int d = 0; d < 4; d++)
        if (ti->ne[d] != ts->ne[d])
            return snprintf(why, why_len, "'%s': ne[%d] = %llu", ts->name, d, (unsigned long long)ti->ne[d]), false;
    if (ti->file_offset != data_offset + ts->offset)
        return snprintf(why, why_len, "'%s': file_offset %llu, expected %llu", ts->name,
                        (unsigned long long)ti->file_offset, (unsigned long long)(data_offset + ts->offset)),
               false;
    const uint8_t *p = ti->data;
    for (uint64_t k = 0; k < ts->n_bytes; k++)
        if (p[k] != data_byte(ts->offset + k))
            return snprintf(why, why_len, "'%s': data byte %llu differs", ts->name, (unsigned long long)k), false;
    return true;
}

TEST(gguf_reader_tensor_infos_sizes_and_data_pointers)
{
    FOR_EACH_WAY(use_mmap) {
        gguf_builder b = {0};
        uint64_t data_offset;
        build_tensor_file(&b, mixed_tensors, N_MIXED, -1, &data_offset);
        uint64_t file_size = b.len;
        hydra_model *m;
        hydra_status st = gb_open(&b, use_mmap, &m);
        gb_free(&b);
        CHECK_OK(st);
        CHECK_M(m, hydra_model_tensor_count(m) == N_MIXED);
        CHECK_M(m, strcmp(hydra_model_arch(m), "testarch") == 0);
        char why[256] = "";
        uint64_t params = 0, bytes = 0, q8_bytes = 0;
        for (size_t i = 0; i < N_MIXED; i++) {
            hydra_tensor_info at, found;
            CHECK_M(m, hydra_model_tensor_at(m, i, &at) == HYDRA_OK);
            CHECK_M(m, tensor_matches(&at, &mixed_tensors[i], data_offset, why, sizeof why));
            CHECK_M(m, hydra_model_tensor_find(m, mixed_tensors[i].name, &found) == HYDRA_OK);
            CHECK_M(m, found.data == at.data && found.file_offset == at.file_offset);
            params += mixed_tensors[i].n_elements;
            bytes += mixed_tensors[i].n_bytes;
            q8_bytes += mixed_tensors[i].type == 8 ? mixed_tensors[i].n_bytes : 0;
        }
        hydra_tensor_info ti;
        CHECK_M(m, hydra_model_tensor_at(m, N_MIXED, &ti) == HYDRA_ERR_RANGE);
        CHECK_M(m, hydra_model_tensor_find(m, "token_embd", &ti) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, hydra_model_tensor_find(m, "token_embd.weightx", &ti) == HYDRA_ERR_NOT_FOUND);
        CHECK_M(m, strstr(hydra_last_error(), "token_embd.weightx") != NULL);
        CHECK_M(m, hydra_model_n_params(m) == params);
        CHECK_M(m, hydra_model_n_bytes(m) == bytes);
        CHECK_M(m, hydra_model_bytes_of_type(m, 8) == q8_bytes);
        CHECK_M(m, hydra_model_bytes_of_type(m, 2) == 0);
        CHECK_M(m, hydra_model_file_size(m) == file_size);
        hydra_model_close(m);
        if (why[0] != '\0')
            FAIL("%s", why);
    }
}

/* Three tensors packed as tightly as an alignment allows. */
static void aligned_layout(tensor_spec ts[3], uint64_t alignment)
{
    static const tensor_spec base[3] = {
        {"a", 0, "F32", 1, {5, 1, 1, 1}, 5, 20, 0},
        {"b", 1, "F16", 2, {3, 2, 1, 1}, 6, 12, 0},
        {"c", 24, "I8", 1, {7, 1, 1, 1}, 7, 7, 0},
    };
    uint64_t at = 0;
    for (int i = 0; i < 3; i++) {
        ts[i] = base[i];
        ts[i].offset = (at + alignment - 1) / alignment * alignment;
        at = ts[i].offset + ts[i].n_bytes;
    }
}

TEST(gguf_reader_honours_general_alignment)
{
    /* -1: key absent, so the default of 32 applies. */
    static const int64_t alignments[] = {-1, 1, 2, 8, 32, 64, 256, 4096};
    for (size_t k = 0; k < sizeof alignments / sizeof alignments[0]; k++)
        FOR_EACH_WAY(use_mmap) {
            uint64_t a = alignments[k] < 0 ? 32 : (uint64_t)alignments[k];
            tensor_spec ts[3];
            aligned_layout(ts, a);
            gguf_builder b = {0};
            uint64_t data_offset;
            build_tensor_file(&b, ts, 3, alignments[k], &data_offset);
            hydra_model *m;
            hydra_status st = gb_open(&b, use_mmap, &m);
            gb_free(&b);
            if (st != HYDRA_OK)
                FAIL("alignment %lld: %s: %s", (long long)alignments[k], hydra_strerror(st), hydra_last_error());
            CHECK_M(m, data_offset % a == 0);
            char why[256] = "";
            for (size_t i = 0; i < 3 && why[0] == '\0'; i++) {
                hydra_tensor_info ti;
                CHECK_M(m, hydra_model_tensor_at(m, i, &ti) == HYDRA_OK);
                tensor_matches(&ti, &ts[i], data_offset, why, sizeof why);
            }
            hydra_model_close(m);
            if (why[0] != '\0')
                FAIL("alignment %lld: %s", (long long)alignments[k], why);
        }
}

TEST(gguf_reader_finds_each_of_many_keys_and_tensors)
{
    /* Names inserted in scrambled order; some are prefixes of others. */
    enum { N = 300 };
    char names[N][32];
    for (int i = 0; i < N; i++) {
        int j = (i * 137) % N; /* 137 is coprime to 300: a permutation */
        snprintf(names[i], sizeof names[i], j % 3 == 0 ? "k%d" : j % 3 == 1 ? "k%d.x" : "k%d.xy", j / 3);
    }
    gguf_builder b = {0};
    gb_header(&b, 3, N, N);
    for (int i = 0; i < N; i++)
        gb_key(&b, names[i], HYDRA_VALUE_U32), gb_u32(&b, (uint32_t)i * 7u);
    for (int i = 0; i < N; i++)
        gb_tensor_info(&b, names[i], 0, 1, (uint64_t[]){1}, (uint64_t)i * 32);
    gb_pad(&b, 32);
    for (int i = 0; i < N; i++) {
        gb_f32(&b, (float)i);
        gb_pad(&b, 32);
    }
    hydra_model *m;
    hydra_status st = gb_open(&b, true, &m);
    gb_free(&b);
    CHECK_OK(st);
    for (int i = 0; i < N; i++) {
        uint64_t u;
        hydra_tensor_info ti;
        CHECK_M(m, hydra_model_get_u64(m, names[i], &u) == HYDRA_OK && u == (uint64_t)i * 7);
        CHECK_M(m, hydra_model_tensor_find(m, names[i], &ti) == HYDRA_OK && strcmp(ti.name, names[i]) == 0);
        float v;
        memcpy(&v, ti.data, 4);
        CHECK_M(m, v == (float)i);
    }
    hydra_model_close(m);
}

TEST(gguf_reader_accepts_a_file_without_tensors_or_padding)
{
    /* With no tensors there is no data section; the file may end right
     * after the metadata. */
    gguf_builder b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.architecture", HYDRA_VALUE_STRING), gb_cstr(&b, "abc");
    FOR_EACH_WAY(use_mmap) {
        hydra_model *m;
        hydra_status st = gb_open(&b, use_mmap, &m);
        if (st != HYDRA_OK)
            gb_free(&b);
        CHECK_OK(st);
        CHECK_M(m, strcmp(hydra_model_arch(m), "abc") == 0 && hydra_model_n_bytes(m) == 0);
        hydra_model_close(m);
    }
    gb_free(&b);
}

TEST(gguf_reader_accepts_the_shapes_loaded_keys_may_take)
{
    /* Integers of any width; per-layer arrays where a key allows them. */
    gguf_builder b = {0};
    gb_header(&b, 3, 0, 8);
    gb_key(&b, "general.architecture", HYDRA_VALUE_STRING), gb_cstr(&b, "qwen3moe");
    gb_key(&b, "qwen3moe.expert_count", HYDRA_VALUE_U64), gb_u64(&b, 8);
    gb_key(&b, "qwen3moe.block_count", HYDRA_VALUE_I32), gb_u32(&b, 2);
    gb_key(&b, "qwen3moe.feed_forward_length", HYDRA_VALUE_ARRAY), gb_array(&b, HYDRA_VALUE_U32, 2);
    gb_u32(&b, 64), gb_u32(&b, 128);
    gb_key(&b, "qwen3moe.attention.head_count", HYDRA_VALUE_U16), gb_u16(&b, 4);
    gb_key(&b, "qwen3moe.rope.freq_base", HYDRA_VALUE_F64), gb_f64(&b, 1e6);
    gb_key(&b, "tokenizer.ggml.tokens", HYDRA_VALUE_ARRAY), gb_array(&b, HYDRA_VALUE_STRING, 2);
    gb_cstr(&b, "a"), gb_cstr(&b, "b");
    gb_key(&b, "tokenizer.ggml.scores", HYDRA_VALUE_ARRAY), gb_array(&b, HYDRA_VALUE_F32, 2);
    gb_f32(&b, 0), gb_f32(&b, -1);
    hydra_model *m;
    hydra_status st = gb_open(&b, true, &m);
    gb_free(&b);
    CHECK_OK(st);
    uint64_t u;
    CHECK_M(m, hydra_model_get_u64(m, "qwen3moe.attention.head_count", &u) == HYDRA_OK && u == 4);
    hydra_model_close(m);
}

TEST(gguf_reader_reads_what_the_writer_wrote)
{
    const char *path = util_scratch_path("gguf-reader-writer.gguf");
    gguf_writer *w;
    CHECK_OK(gguf_writer_open(&w, path));
    static const char *const tokens[] = {"<s>", "", "hello"};
    static const float scores[] = {0.0f, -1.5f, 2.0f};
    static const int32_t types[] = {1, 3, -1};
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "llama.block_count", 3);
    gguf_writer_add_i32(w, "t.i32", -7);
    gguf_writer_add_u64(w, "t.u64", 1ull << 40);
    gguf_writer_add_f32(w, "t.f32", 0.25f);
    gguf_writer_add_bool(w, "t.bool", true);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, 3);
    gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", scores, 3);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, 3);
    gguf_writer_add_tensor(w, "a", 0, 2, (uint64_t[]){3, 2});
    gguf_writer_add_tensor(w, "b", 8, 1, (uint64_t[]){32});
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint8_t q[34];
    for (int i = 0; i < 34; i++)
        q[i] = (uint8_t)i;
    gguf_writer_write(w, a, sizeof a);
    gguf_writer_write(w, q, sizeof q);
    CHECK_OK(gguf_writer_close(w));
    FOR_EACH_WAY(use_mmap) {
        hydra_model_params p = hydra_model_default_params();
        p.path = path;
        p.use_mmap = use_mmap;
        hydra_model *m;
        CHECK_OK(hydra_model_open(&m, &p));
        uint64_t u;
        int64_t i;
        double f;
        bool flag;
        const char *s;
        size_t len;
        hydra_tensor_info ta, tb;
        CHECK_M(m, hydra_model_gguf_version(m) == 3 && strcmp(hydra_model_arch(m), "llama") == 0);
        CHECK_M(m, hydra_model_get_u64(m, "llama.block_count", &u) == HYDRA_OK && u == 3);
        CHECK_M(m, hydra_model_get_i64(m, "t.i32", &i) == HYDRA_OK && i == -7);
        CHECK_M(m, hydra_model_get_u64(m, "t.u64", &u) == HYDRA_OK && u == 1ull << 40);
        CHECK_M(m, hydra_model_get_f64(m, "t.f32", &f) == HYDRA_OK && f == 0.25);
        CHECK_M(m, hydra_model_get_bool(m, "t.bool", &flag) == HYDRA_OK && flag);
        CHECK_M(m, hydra_model_get_arr_str(m, "tokenizer.ggml.tokens", 2, &s, &len) == HYDRA_OK && len == 5 &&
                       strcmp(s, "hello") == 0);
        CHECK_M(m, hydra_model_get_arr_f64(m, "tokenizer.ggml.scores", 1, &f) == HYDRA_OK && f == -1.5);
        CHECK_M(m, hydra_model_get_arr_i64(m, "tokenizer.ggml.token_type", 2, &i) == HYDRA_OK && i == -1);
        CHECK_M(m, hydra_model_tensor_find(m, "a", &ta) == HYDRA_OK && ta.n_bytes == 24 &&
                       memcmp(ta.data, a, sizeof a) == 0);
        CHECK_M(m, hydra_model_tensor_find(m, "b", &tb) == HYDRA_OK && tb.n_bytes == 34 &&
                       memcmp(tb.data, q, sizeof q) == 0 && tb.file_offset % 32 == 0);
        hydra_model_close(m);
    }
    unlink(path);
}
