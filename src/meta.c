/*
 * meta.c — typed access to GGUF metadata through the public API.  Integer
 * getters convert between widths only when the value fits, so a caller that
 * asks for a u64 from an i32 key gets the number or a range error, never a
 * silently wrapped value.
 */
#include "error.h"
#include "model.h"

#include <inttypes.h>

HYDRA_API const char *hydra_value_type_name(uint32_t type)
{
    static const char *const names[] = {
        [HYDRA_VALUE_U8] = "u8",   [HYDRA_VALUE_I8] = "i8",     [HYDRA_VALUE_U16] = "u16",
        [HYDRA_VALUE_I16] = "i16", [HYDRA_VALUE_U32] = "u32",   [HYDRA_VALUE_I32] = "i32",
        [HYDRA_VALUE_F32] = "f32", [HYDRA_VALUE_BOOL] = "bool", [HYDRA_VALUE_STRING] = "string",
        [HYDRA_VALUE_ARRAY] = "array", [HYDRA_VALUE_U64] = "u64", [HYDRA_VALUE_I64] = "i64",
        [HYDRA_VALUE_F64] = "f64",
    };
    return type < sizeof names / sizeof names[0] ? names[type] : "?";
}

static bool is_unsigned(uint32_t t)
{
    return t == HYDRA_VALUE_U8 || t == HYDRA_VALUE_U16 || t == HYDRA_VALUE_U32 || t == HYDRA_VALUE_U64;
}

static bool is_signed(uint32_t t)
{
    return t == HYDRA_VALUE_I8 || t == HYDRA_VALUE_I16 || t == HYDRA_VALUE_I32 || t == HYDRA_VALUE_I64;
}

static hydra_status find(const hydra_model *m, const char *key, const gguf_kv **kv)
{
    if (m == NULL || key == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "metadata lookup: NULL model or key");
    *kv = gguf_find_kv(&m->gguf, key);
    if (*kv == NULL)
        return hydra_fail(HYDRA_ERR_NOT_FOUND, "metadata key '%s' is not in the model", key);
    return HYDRA_OK;
}

static hydra_status wrong_type(const char *key, const gguf_value *v, const char *wanted)
{
    return hydra_fail(HYDRA_ERR_TYPE, "metadata '%s' is a %s, not %s", key, hydra_value_type_name(v->type), wanted);
}

static hydra_status value_u64(const char *key, const gguf_value *v, uint64_t *out)
{
    if (is_unsigned(v->type)) {
        *out = v->u;
        return HYDRA_OK;
    }
    if (!is_signed(v->type))
        return wrong_type(key, v, "an integer");
    if (v->i < 0)
        return hydra_fail(HYDRA_ERR_RANGE, "metadata '%s' is %" PRId64 ", negative", key, v->i);
    *out = (uint64_t)v->i;
    return HYDRA_OK;
}

static hydra_status value_i64(const char *key, const gguf_value *v, int64_t *out)
{
    if (is_signed(v->type)) {
        *out = v->i;
        return HYDRA_OK;
    }
    if (!is_unsigned(v->type))
        return wrong_type(key, v, "an integer");
    if (v->u > INT64_MAX)
        return hydra_fail(HYDRA_ERR_RANGE, "metadata '%s' is %" PRIu64 ", beyond int64", key, v->u);
    *out = (int64_t)v->u;
    return HYDRA_OK;
}

static hydra_status value_f64(const char *key, const gguf_value *v, double *out)
{
    if (v->type != HYDRA_VALUE_F32 && v->type != HYDRA_VALUE_F64)
        return wrong_type(key, v, "a float");
    *out = v->f;
    return HYDRA_OK;
}

HYDRA_API size_t hydra_model_meta_count(const hydra_model *m)
{
    return (size_t)m->gguf.n_kv;
}

HYDRA_API hydra_status hydra_model_meta_at(const hydra_model *m, size_t i, const char **key,
                                           hydra_value_type *type)
{
    if (i >= m->gguf.n_kv)
        return hydra_fail(HYDRA_ERR_RANGE, "metadata index %zu: the model has %" PRIu64 " entries", i, m->gguf.n_kv);
    *key = m->gguf.kvs[i].key;
    *type = (hydra_value_type)m->gguf.kvs[i].value.type;
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_model_meta_type(const hydra_model *m, const char *key, hydra_value_type *type)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    if (st == HYDRA_OK)
        *type = (hydra_value_type)kv->value.type;
    return st;
}

HYDRA_API hydra_status hydra_model_get_u64(const hydra_model *m, const char *key, uint64_t *out)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    return st != HYDRA_OK ? st : value_u64(key, &kv->value, out);
}

HYDRA_API hydra_status hydra_model_get_i64(const hydra_model *m, const char *key, int64_t *out)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    return st != HYDRA_OK ? st : value_i64(key, &kv->value, out);
}

HYDRA_API hydra_status hydra_model_get_f64(const hydra_model *m, const char *key, double *out)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    return st != HYDRA_OK ? st : value_f64(key, &kv->value, out);
}

HYDRA_API hydra_status hydra_model_get_bool(const hydra_model *m, const char *key, bool *out)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    if (st != HYDRA_OK)
        return st;
    if (kv->value.type != HYDRA_VALUE_BOOL)
        return wrong_type(key, &kv->value, "a bool");
    *out = kv->value.u != 0;
    return HYDRA_OK;
}

static hydra_status string_of(const char *key, const gguf_value *v, const char **out, size_t *len)
{
    if (v->type != HYDRA_VALUE_STRING)
        return wrong_type(key, v, "a string");
    *out = v->str.ptr;
    if (len != NULL)
        *len = (size_t)v->str.len;
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_model_get_str(const hydra_model *m, const char *key, const char **out, size_t *len)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    return st != HYDRA_OK ? st : string_of(key, &kv->value, out, len);
}

HYDRA_API hydra_status hydra_model_get_arr(const hydra_model *m, const char *key, hydra_value_type *elem_type,
                                           size_t *n)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    if (st != HYDRA_OK)
        return st;
    if (kv->value.type != HYDRA_VALUE_ARRAY)
        return wrong_type(key, &kv->value, "an array");
    *elem_type = (hydra_value_type)kv->value.arr.type;
    *n = (size_t)kv->value.arr.n;
    return HYDRA_OK;
}

/* Element i of an array key, decoded; strings and nested arrays by reference. */
static hydra_status elem(const hydra_model *m, const char *key, size_t i, gguf_value *out)
{
    const gguf_kv *kv;
    hydra_status st = find(m, key, &kv);
    if (st != HYDRA_OK)
        return st;
    const gguf_value *a = &kv->value;
    if (a->type != HYDRA_VALUE_ARRAY)
        return wrong_type(key, a, "an array");
    if (i >= a->arr.n)
        return hydra_fail(HYDRA_ERR_RANGE, "metadata '%s': index %zu, the array has %" PRIu64 " elements", key, i,
                          a->arr.n);
    *out = a->arr.items != NULL ? a->arr.items[i] : gguf_array_elem(a, i);
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_model_get_arr_str(const hydra_model *m, const char *key, size_t i, const char **out,
                                               size_t *len)
{
    gguf_value v;
    hydra_status st = elem(m, key, i, &v);
    return st != HYDRA_OK ? st : string_of(key, &v, out, len);
}

HYDRA_API hydra_status hydra_model_get_arr_i64(const hydra_model *m, const char *key, size_t i, int64_t *out)
{
    gguf_value v;
    hydra_status st = elem(m, key, i, &v);
    return st != HYDRA_OK ? st : value_i64(key, &v, out);
}

HYDRA_API hydra_status hydra_model_get_arr_f64(const hydra_model *m, const char *key, size_t i, double *out)
{
    gguf_value v;
    hydra_status st = elem(m, key, i, &v);
    return st != HYDRA_OK ? st : value_f64(key, &v, out);
}
