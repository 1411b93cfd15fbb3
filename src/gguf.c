/*
 * gguf.c — the GGUF reader (see gguf.h for the layout).
 *
 * Rules this file keeps, because the file may be hostile:
 *   - no read without a bounds check against the bytes left;
 *   - no allocation sized by a count before the count is bounded by the bytes
 *     left (each element needs a known minimum of bytes);
 *   - every multiplication and addition of file values is checked;
 *   - no assert on file content; every failure names the field and offset.
 */
#include "gguf.h"

#include "error.h"
#include "quant.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Names from the file (keys, tensor names) are printed at most this long,
 * so the byte offset after them always fits in the message (error.c keeps
 * 1024 bytes). */
#define NAME_FMT "%.200s"

/* ------------------------------------------------------------------ arena */

struct gguf_arena_chunk {
    gguf_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

static void *arena_alloc(gguf_file *f, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    gguf_arena_chunk *c = f->arena;
    if (c == NULL || c->cap - c->used < bytes) {
        size_t cap = bytes > (1u << 20) ? bytes : (1u << 20);
        c = malloc(sizeof *c + cap);
        if (c == NULL)
            return NULL;
        c->next = f->arena;
        c->used = 0;
        c->cap = cap;
        f->arena = c;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    return p;
}

/* ----------------------------------------------------------------- reader */

typedef struct reader {
    gguf_file *f;
    uint64_t pos;
    unsigned depth; /* array nesting */
} reader;

static uint64_t bytes_left(const reader *r)
{
    return r->f->size - r->pos;
}

static hydra_status need(const reader *r, uint64_t n, const char *what)
{
    if (bytes_left(r) < n)
        return hydra_fail(HYDRA_ERR_FORMAT,
                          "gguf: truncated: " NAME_FMT " at byte %" PRIu64 " needs %" PRIu64
                          " bytes, the file has %" PRIu64 " left",
                          what, r->pos, n, bytes_left(r));
    return HYDRA_OK;
}

static hydra_status read_bytes(reader *r, void *out, size_t n, const char *what)
{
    hydra_status st = need(r, n, what);
    if (st != HYDRA_OK)
        return st;
    memcpy(out, r->f->image + r->pos, n); /* GGUF is little-endian, as are hydra's hosts */
    r->pos += n;
    return HYDRA_OK;
}

static hydra_status read_u32(reader *r, uint32_t *v, const char *what)
{
    return read_bytes(r, v, 4, what);
}

static hydra_status read_u64(reader *r, uint64_t *v, const char *what)
{
    return read_bytes(r, v, 8, what);
}

/* A string: u64 length, bytes.  Copied NUL-terminated into the arena. */
static hydra_status read_string(reader *r, char **out, uint64_t *len, const char *what)
{
    uint64_t at = r->pos;
    hydra_status st = read_u64(r, len, what);
    if (st != HYDRA_OK)
        return st;
    if (*len > bytes_left(r))
        return hydra_fail(HYDRA_ERR_FORMAT,
                          "gguf: " NAME_FMT " at byte %" PRIu64 " has length %" PRIu64
                          ", more than the %" PRIu64 " bytes left in the file",
                          what, at, *len, bytes_left(r));
    char *s = arena_alloc(r->f, (size_t)*len + 1);
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf: out of memory copying %s", what);
    memcpy(s, r->f->image + r->pos, (size_t)*len);
    s[*len] = '\0';
    r->pos += *len;
    *out = s;
    return HYDRA_OK;
}

size_t gguf_scalar_size(uint32_t type)
{
    static const size_t size[] = {
        [HYDRA_VALUE_U8] = 1,  [HYDRA_VALUE_I8] = 1,  [HYDRA_VALUE_U16] = 2,
        [HYDRA_VALUE_I16] = 2, [HYDRA_VALUE_U32] = 4, [HYDRA_VALUE_I32] = 4,
        [HYDRA_VALUE_F32] = 4, [HYDRA_VALUE_BOOL] = 1, [HYDRA_VALUE_U64] = 8,
        [HYDRA_VALUE_I64] = 8, [HYDRA_VALUE_F64] = 8,
    };
    return type < sizeof size / sizeof size[0] ? size[type] : 0;
}

/* Decodes one little-endian scalar of a known type from p. */
static gguf_value decode_scalar(uint32_t type, const uint8_t *p)
{
    gguf_value v = {.type = type};
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    float f32;
    switch (type) {
    case HYDRA_VALUE_U8: memcpy(&u8, p, 1); v.u = u8; break;
    case HYDRA_VALUE_I8: memcpy(&u8, p, 1); v.i = (int8_t)u8; break;
    case HYDRA_VALUE_U16: memcpy(&u16, p, 2); v.u = u16; break;
    case HYDRA_VALUE_I16: memcpy(&u16, p, 2); v.i = (int16_t)u16; break;
    case HYDRA_VALUE_U32: memcpy(&u32, p, 4); v.u = u32; break;
    case HYDRA_VALUE_I32: memcpy(&u32, p, 4); v.i = (int32_t)u32; break;
    case HYDRA_VALUE_F32: memcpy(&f32, p, 4); v.f = f32; break;
    case HYDRA_VALUE_BOOL: memcpy(&u8, p, 1); v.u = u8; break;
    case HYDRA_VALUE_U64: memcpy(&v.u, p, 8); break;
    case HYDRA_VALUE_I64: memcpy(&v.i, p, 8); break;
    case HYDRA_VALUE_F64: memcpy(&v.f, p, 8); break;
    }
    return v;
}

gguf_value gguf_array_elem(const gguf_value *arr, uint64_t i)
{
    size_t sz = gguf_scalar_size(arr->arr.type);
    return decode_scalar(arr->arr.type, arr->arr.raw + i * sz);
}

static hydra_status read_value(reader *r, uint32_t type, gguf_value *v, const char *what);

/* Smallest encoding of one element: bounds a count by the bytes left. */
static uint64_t min_elem_bytes(uint32_t type)
{
    if (type == HYDRA_VALUE_STRING)
        return 8;
    if (type == HYDRA_VALUE_ARRAY)
        return 12;
    return gguf_scalar_size(type);
}

static hydra_status read_array(reader *r, gguf_value *v, const char *what)
{
    uint64_t at = r->pos;
    hydra_status st;
    if ((st = read_u32(r, &v->arr.type, what)) != HYDRA_OK ||
        (st = read_u64(r, &v->arr.n, what)) != HYDRA_OK)
        return st;
    uint64_t min = min_elem_bytes(v->arr.type);
    if (min == 0)
        return hydra_fail(HYDRA_ERR_FORMAT,
                          "gguf: " NAME_FMT " at byte %" PRIu64 ": unknown array element type %" PRIu32, what, at,
                          v->arr.type);
    if (v->arr.n > bytes_left(r) / min)
        return hydra_fail(HYDRA_ERR_FORMAT,
                          "gguf: " NAME_FMT " at byte %" PRIu64 ": array of %" PRIu64
                          " %s elements needs at least %" PRIu64 " bytes per element, the file has %" PRIu64 " left",
                          what, at, v->arr.n, hydra_value_type_name(v->arr.type), min, bytes_left(r));
    if (v->arr.type != HYDRA_VALUE_STRING && v->arr.type != HYDRA_VALUE_ARRAY) {
        v->arr.raw = r->f->image + r->pos;
        r->pos += v->arr.n * min;
        return HYDRA_OK;
    }
    if (v->arr.type == HYDRA_VALUE_ARRAY && r->depth >= GGUF_MAX_ARRAY_DEPTH)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: " NAME_FMT " at byte %" PRIu64 ": arrays nested deeper than %d",
                          what, at, GGUF_MAX_ARRAY_DEPTH);
    v->arr.items = arena_alloc(r->f, (size_t)v->arr.n * sizeof(gguf_value) + 1);
    if (v->arr.items == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf: out of memory for %s", what);
    r->depth++;
    for (uint64_t i = 0; i < v->arr.n; i++)
        if ((st = read_value(r, v->arr.type, &v->arr.items[i], what)) != HYDRA_OK)
            break;
    r->depth--;
    return st;
}

static hydra_status read_value(reader *r, uint32_t type, gguf_value *v, const char *what)
{
    memset(v, 0, sizeof *v);
    v->type = type;
    if (type == HYDRA_VALUE_STRING)
        return read_string(r, &v->str.ptr, &v->str.len, what);
    if (type == HYDRA_VALUE_ARRAY)
        return read_array(r, v, what);
    size_t sz = gguf_scalar_size(type);
    if (sz == 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: " NAME_FMT " at byte %" PRIu64 ": unknown value type %" PRIu32,
                          what, r->pos - 4, type);
    hydra_status st = need(r, sz, what);
    if (st != HYDRA_OK)
        return st;
    *v = decode_scalar(type, r->f->image + r->pos);
    r->pos += sz;
    return HYDRA_OK;
}

/* ------------------------------------------------------------ sorted index */

typedef struct name_ref {
    const char *s;
    uint64_t len;
} name_ref;

static int name_cmp(name_ref a, name_ref b)
{
    uint64_t n = a.len < b.len ? a.len : b.len;
    int c = memcmp(a.s, b.s, (size_t)n);
    if (c != 0)
        return c;
    return (a.len > b.len) - (a.len < b.len);
}

/* qsort has no context argument in C11: the current table rides in these. */
static _Thread_local const gguf_file *sort_file;

static name_ref kv_name(const gguf_file *f, uint32_t i)
{
    return (name_ref){f->kvs[i].key, f->kvs[i].key_len};
}

static name_ref tensor_name(const gguf_file *f, uint32_t i)
{
    return (name_ref){f->tensors[i].name, f->tensors[i].name_len};
}

static int cmp_kv_idx(const void *a, const void *b)
{
    return name_cmp(kv_name(sort_file, *(const uint32_t *)a), kv_name(sort_file, *(const uint32_t *)b));
}

static int cmp_tensor_idx(const void *a, const void *b)
{
    return name_cmp(tensor_name(sort_file, *(const uint32_t *)a), tensor_name(sort_file, *(const uint32_t *)b));
}

static uint32_t *sorted_index(const gguf_file *f, uint64_t n, int (*cmp)(const void *, const void *))
{
    uint32_t *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (idx == NULL)
        return NULL;
    for (uint64_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    sort_file = f;
    qsort(idx, (size_t)n, sizeof *idx, cmp);
    return idx;
}

/* Binary search in a sorted index; -1 if absent. */
static int64_t index_find(const gguf_file *f, const uint32_t *idx, uint64_t n, name_ref key,
                          name_ref (*name_of)(const gguf_file *, uint32_t))
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = name_cmp(name_of(f, idx[mid]), key);
        if (c == 0)
            return idx[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key)
{
    int64_t i = index_find(f, f->kv_by_key, f->n_kv, (name_ref){key, strlen(key)}, kv_name);
    return i < 0 ? NULL : &f->kvs[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    int64_t i = index_find(f, f->tensor_by_name, f->n_tensors, (name_ref){name, strlen(name)}, tensor_name);
    return i < 0 ? NULL : &f->tensors[i];
}

/* ----------------------------------------------------------------- header */

static hydra_status read_header(reader *r)
{
    gguf_file *f = r->f;
    char magic[4];
    hydra_status st = read_bytes(r, magic, 4, "magic");
    if (st != HYDRA_OK)
        return st;
    if (memcmp(magic, "GGUF", 4) != 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: not a GGUF file: magic at byte 0 is %02x %02x %02x %02x, not \"GGUF\"",
                          (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    if ((st = read_u32(r, &f->version, "version")) != HYDRA_OK)
        return st;
    if (f->version != 2 && f->version != 3)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: version at byte 4 is %" PRIu32 "; hydra reads versions 2 and 3%s",
                          f->version, f->version > 0xffff ? " (a big-endian file?)" : "");
    uint64_t tensors_at = r->pos;
    if ((st = read_u64(r, &f->n_tensors, "tensor count")) != HYDRA_OK ||
        (st = read_u64(r, &f->n_kv, "metadata count")) != HYDRA_OK)
        return st;
    /* A key-value pair takes at least 13 bytes, a tensor info at least 32. */
    if (f->n_kv > bytes_left(r) / 13 || f->n_kv > UINT32_MAX)
        return hydra_fail(HYDRA_ERR_FORMAT,
                          "gguf: metadata count at byte %" PRIu64 " is %" PRIu64 ", more than the %" PRIu64
                          " bytes left could hold",
                          tensors_at + 8, f->n_kv, bytes_left(r));
    if (f->n_tensors > bytes_left(r) / 32 || f->n_tensors > UINT32_MAX)
        return hydra_fail(HYDRA_ERR_FORMAT,
                          "gguf: tensor count at byte %" PRIu64 " is %" PRIu64 ", more than the %" PRIu64
                          " bytes left could hold",
                          tensors_at, f->n_tensors, bytes_left(r));
    return HYDRA_OK;
}

static hydra_status read_metadata(reader *r)
{
    gguf_file *f = r->f;
    f->kvs = calloc((size_t)(f->n_kv ? f->n_kv : 1), sizeof *f->kvs);
    if (f->kvs == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf: out of memory for %" PRIu64 " metadata entries", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        kv->offset = r->pos;
        uint32_t type;
        hydra_status st = read_string(r, &kv->key, &kv->key_len, "metadata key");
        if (st == HYDRA_OK && kv->key_len == 0)
            st = hydra_fail(HYDRA_ERR_FORMAT, "gguf: metadata entry %" PRIu64 " at byte %" PRIu64 " has an empty key",
                            i, kv->offset);
        if (st == HYDRA_OK)
            st = read_u32(r, &type, kv->key);
        if (st == HYDRA_OK)
            st = read_value(r, type, &kv->value, kv->key);
        if (st != HYDRA_OK)
            return st;
    }
    f->kv_by_key = sorted_index(f, f->n_kv, cmp_kv_idx);
    if (f->kv_by_key == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf: out of memory indexing metadata");
    for (uint64_t i = 1; i < f->n_kv; i++) {
        const gguf_kv *a = &f->kvs[f->kv_by_key[i - 1]], *b = &f->kvs[f->kv_by_key[i]];
        if (name_cmp((name_ref){a->key, a->key_len}, (name_ref){b->key, b->key_len}) == 0)
            return hydra_fail(HYDRA_ERR_FORMAT,
                              "gguf: duplicate metadata key '" NAME_FMT "' at bytes %" PRIu64 " and %" PRIu64,
                              a->key, a->offset < b->offset ? a->offset : b->offset,
                              a->offset < b->offset ? b->offset : a->offset);
    }
    return HYDRA_OK;
}

/* general.alignment, if present, must be a u32 power of two. */
static hydra_status read_alignment(gguf_file *f)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (kv == NULL)
        return HYDRA_OK;
    if (kv->value.type != HYDRA_VALUE_U32)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: general.alignment at byte %" PRIu64 " is a %s, expected u32",
                          kv->offset, hydra_value_type_name(kv->value.type));
    uint64_t a = kv->value.u;
    if (a == 0 || (a & (a - 1)) != 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: general.alignment at byte %" PRIu64 " is %" PRIu64
                          ", not a power of two", kv->offset, a);
    f->alignment = a;
    return HYDRA_OK;
}

/* ---------------------------------------------------------------- tensors */

static hydra_status tensor_shape(reader *r, gguf_tensor *t)
{
    hydra_status st;
    uint64_t at = r->pos;
    if ((st = read_u32(r, &t->n_dims, t->name)) != HYDRA_OK)
        return st;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: tensor '" NAME_FMT "': n_dims at byte %" PRIu64 " is %" PRIu32
                          ", expected 1 to %d", t->name, at, t->n_dims, GGUF_MAX_DIMS);
    t->n_elements = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = r->pos;
        if ((st = read_u64(r, &t->ne[d], t->name)) != HYDRA_OK)
            return st;
        if (t->ne[d] == 0 || t->ne[d] > INT64_MAX)
            return hydra_fail(HYDRA_ERR_FORMAT,
                              "gguf: tensor '" NAME_FMT "': dimension %" PRIu32 " at byte %" PRIu64 " is %" PRIu64,
                              t->name, d, at, t->ne[d]);
        if (t->n_elements > INT64_MAX / t->ne[d])
            return hydra_fail(HYDRA_ERR_FORMAT,
                              "gguf: tensor '" NAME_FMT "': element count overflows at dimension %" PRIu32
                              " (byte %" PRIu64 ")", t->name, d, at);
        t->n_elements *= t->ne[d];
    }
    return HYDRA_OK;
}

static hydra_status tensor_type(reader *r, gguf_tensor *t)
{
    uint64_t at = r->pos;
    hydra_status st = read_u32(r, &t->type, t->name);
    if (st != HYDRA_OK)
        return st;
    const quant_traits *q = quant_traits_of(t->type);
    if (q == NULL)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: tensor '" NAME_FMT "': type at byte %" PRIu64 " is %" PRIu32
                          ", not a known ggml type", t->name, at, t->type);
    if (t->ne[0] % q->block_size != 0)
        return hydra_fail(HYDRA_ERR_FORMAT,
                          "gguf: tensor '" NAME_FMT "' (info at byte %" PRIu64 "): row length %" PRIu64
                          " is not a multiple of %s's block size %" PRIu32, t->name, t->info_offset, t->ne[0], q->name,
                          q->block_size);
    uint64_t rows = t->n_elements / t->ne[0], row_bytes;
    if (!quant_row_bytes(t->type, t->ne[0], &row_bytes) || rows > INT64_MAX / row_bytes)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: tensor '" NAME_FMT "' (info at byte %" PRIu64
                          "): its size in bytes overflows", t->name, t->info_offset);
    t->n_bytes = rows * row_bytes;
    return HYDRA_OK;
}

static hydra_status read_tensor_infos(reader *r)
{
    gguf_file *f = r->f;
    f->tensors = calloc((size_t)(f->n_tensors ? f->n_tensors : 1), sizeof *f->tensors);
    if (f->tensors == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf: out of memory for %" PRIu64 " tensor infos", f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        t->info_offset = r->pos;
        hydra_status st = read_string(r, &t->name, &t->name_len, "tensor name");
        if (st == HYDRA_OK && t->name_len == 0)
            st = hydra_fail(HYDRA_ERR_FORMAT, "gguf: tensor %" PRIu64 " at byte %" PRIu64 " has an empty name", i,
                            t->info_offset);
        if (st == HYDRA_OK)
            st = tensor_shape(r, t);
        if (st == HYDRA_OK)
            st = tensor_type(r, t);
        if (st == HYDRA_OK)
            st = read_u64(r, &t->offset, t->name);
        if (st != HYDRA_OK)
            return st;
    }
    f->tensor_by_name = sorted_index(f, f->n_tensors, cmp_tensor_idx);
    if (f->tensor_by_name == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf: out of memory indexing tensors");
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        const gguf_tensor *a = &f->tensors[f->tensor_by_name[i - 1]], *b = &f->tensors[f->tensor_by_name[i]];
        if (name_cmp((name_ref){a->name, a->name_len}, (name_ref){b->name, b->name_len}) == 0)
            return hydra_fail(HYDRA_ERR_FORMAT,
                              "gguf: duplicate tensor name '" NAME_FMT "' at bytes %" PRIu64 " and %" PRIu64,
                              a->name, a->info_offset < b->info_offset ? a->info_offset : b->info_offset,
                              a->info_offset < b->info_offset ? b->info_offset : a->info_offset);
    }
    return HYDRA_OK;
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const gguf_tensor *x = &sort_file->tensors[*(const uint32_t *)a];
    const gguf_tensor *y = &sort_file->tensors[*(const uint32_t *)b];
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Data placement: aligned, inside the data section, no two tensors overlapping. */
static hydra_status check_placement(gguf_file *f, uint64_t header_end)
{
    uint64_t pad = (f->alignment - header_end % f->alignment) % f->alignment;
    f->data_offset = header_end + pad;
    if (f->n_tensors == 0)
        return HYDRA_OK;
    if (f->data_offset > f->size)
        return hydra_fail(HYDRA_ERR_FORMAT, "gguf: truncated: the data section would start at byte %" PRIu64
                          " but the file has %" PRIu64 " bytes", f->data_offset, f->size);
    uint64_t data_size = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0)
            return hydra_fail(HYDRA_ERR_FORMAT,
                              "gguf: tensor '" NAME_FMT "': data offset %" PRIu64 " (info at byte %" PRIu64
                              ") is not a multiple of the alignment %" PRIu64, t->name, t->offset, t->info_offset,
                              f->alignment);
        if (t->offset > data_size || t->n_bytes > data_size - t->offset)
            return hydra_fail(HYDRA_ERR_FORMAT, "gguf: tensor '" NAME_FMT "': data [%" PRIu64 ", +%" PRIu64
                              ") (info at byte %" PRIu64 ") lies outside the %" PRIu64 "-byte data section",
                              t->name, t->offset, t->n_bytes, t->info_offset, data_size);
    }
    uint32_t *by_offset = sorted_index(f, f->n_tensors, cmp_tensor_offset);
    if (by_offset == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf: out of memory checking tensor placement");
    hydra_status st = HYDRA_OK;
    for (uint64_t i = 1; i < f->n_tensors && st == HYDRA_OK; i++) {
        const gguf_tensor *a = &f->tensors[by_offset[i - 1]], *b = &f->tensors[by_offset[i]];
        if (a->offset + a->n_bytes > b->offset)
            st = hydra_fail(HYDRA_ERR_FORMAT,
                            "gguf: tensors '" NAME_FMT "' [%" PRIu64 ", +%" PRIu64 ") and '" NAME_FMT "' [%" PRIu64
                            ", +%" PRIu64 ") (infos at bytes %" PRIu64 " and %" PRIu64 ") overlap",
                            a->name, a->offset, a->n_bytes, b->name, b->offset, b->n_bytes, a->info_offset,
                            b->info_offset);
    }
    free(by_offset);
    return st;
}

hydra_status gguf_parse(gguf_file *f, const void *image, uint64_t size)
{
    memset(f, 0, sizeof *f);
    f->image = image;
    f->size = size;
    reader r = {.f = f};
    hydra_status st = read_header(&r);
    if (st == HYDRA_OK)
        st = read_metadata(&r);
    if (st == HYDRA_OK)
        st = read_alignment(f);
    if (st == HYDRA_OK)
        st = read_tensor_infos(&r);
    if (st == HYDRA_OK)
        st = check_placement(f, r.pos);
    if (st != HYDRA_OK)
        gguf_free(f);
    return st;
}

void gguf_free(gguf_file *f)
{
    if (f == NULL)
        return;
    while (f->arena != NULL) {
        gguf_arena_chunk *next = f->arena->next;
        free(f->arena);
        f->arena = next;
    }
    free(f->kvs);
    free(f->tensors);
    free(f->kv_by_key);
    free(f->tensor_by_name);
    memset(f, 0, sizeof *f);
}
