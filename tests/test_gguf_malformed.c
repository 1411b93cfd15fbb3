/*
 * The malformed-file suite.  It takes valid files (its own, written with the
 * GGUF writer and by hand, plus a few of ../shared/ref/dequant and
 * ../shared/models), finds every header field with a walker of its own (not
 * the reader under test), and opens corrupted copies through the public API,
 * mapped and read:
 *   - truncated at every byte of the header region (sampled on the shared
 *     models, whose vocabularies make the header long) and at points of the
 *     data section;
 *   - each count, length, type, dimension and offset set to boundary values;
 *   - tensors moved onto each other, off the alignment, out of the data;
 *   - the rejections the loader promises by name: duplicate keys and tensor
 *     names, n_dims, zero and overflowing dimensions, unknown types, rows
 *     that are not whole blocks, alignment, key value types, magic, version.
 * A refused file must give HYDRA_ERR_FORMAT and a message naming the byte
 * offset (and, for the named rejections, the field).  A corrupted file the
 * reader accepts (changing a value nobody checks can leave a valid file)
 * must keep every tensor inside the file and every getter working.  Crashes,
 * leaks and out-of-bounds reads show under `make SAN=1 test`.
 */
#include "error.h"
#include "gguf_builder.h"
#include "gguf_write.h"
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* ------------------------------------------------- an independent walker */

typedef enum field_kind {
    F_MAGIC, F_VERSION, F_N_TENSORS, F_N_KV,
    F_KEY_LEN, F_VALUE_TYPE, F_STR_LEN, F_ARR_TYPE, F_ARR_LEN, F_SCALAR,
    F_NAME_LEN, F_N_DIMS, F_DIM, F_TENSOR_TYPE, F_TENSOR_OFFSET,
} field_kind;

static const char *const kind_names[] = {
    [F_MAGIC] = "magic",           [F_VERSION] = "version",         [F_N_TENSORS] = "tensor count",
    [F_N_KV] = "metadata count",   [F_KEY_LEN] = "key length",      [F_VALUE_TYPE] = "value type",
    [F_STR_LEN] = "string length", [F_ARR_TYPE] = "array type",     [F_ARR_LEN] = "array length",
    [F_SCALAR] = "scalar value",   [F_NAME_LEN] = "name length",    [F_N_DIMS] = "n_dims",
    [F_DIM] = "dimension",         [F_TENSOR_TYPE] = "tensor type", [F_TENSOR_OFFSET] = "tensor offset",
};

typedef struct field {
    field_kind kind;
    uint32_t width;  /* bytes: 4 or 8 */
    uint64_t offset; /* in the file */
    uint64_t value;
    uint64_t owner;  /* index of the key or tensor it belongs to */
    bool in_array;   /* inside an array value: vocabularies make many */
} field;

typedef struct layout {
    field *fields;
    size_t n_fields, cap;
    uint64_t n_tensors;
    char **tensor_names;       /* NUL-terminated copies */
    int64_t alignment_field;   /* index of general.alignment's value, -1 if absent */
    uint64_t alignment;
    uint64_t header_end;       /* end of the tensor infos */
    uint64_t data_offset;
    uint64_t last_tensor_start; /* largest tensor offset, relative to the data */
} layout;

typedef struct walker {
    const uint8_t *p;
    uint64_t size, pos;
    layout *lay;
    bool ok;
    unsigned depth;
} walker;

static void add_field(walker *w, field f)
{
    layout *lay = w->lay;
    if (lay->n_fields == lay->cap) {
        size_t cap = lay->cap ? 2 * lay->cap : 256;
        field *p = realloc(lay->fields, cap * sizeof *p);
        if (p == NULL) {
            w->ok = false;
            return;
        }
        lay->fields = p;
        lay->cap = cap;
    }
    lay->fields[lay->n_fields++] = f;
}

static bool skip(walker *w, uint64_t n)
{
    if (!w->ok || w->size - w->pos < n)
        return w->ok = false;
    w->pos += n;
    return true;
}

/* Reads a 4- or 8-byte field and records it. */
static uint64_t take(walker *w, field_kind kind, uint32_t width, uint64_t owner, bool in_array)
{
    uint64_t at = w->pos, v = 0;
    if (!skip(w, width))
        return 0;
    memcpy(&v, w->p + at, width);
    add_field(w, (field){kind, width, at, v, owner, in_array});
    return v;
}

static void walk_value(walker *w, uint32_t type, uint64_t owner, bool in_array)
{
    /* Bytes per scalar by GGUF value type; 0: string, array or unknown. */
    static const uint8_t width[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == HYDRA_VALUE_STRING) {
        skip(w, take(w, F_STR_LEN, 8, owner, in_array));
    } else if (type == HYDRA_VALUE_ARRAY) {
        uint32_t elem = (uint32_t)take(w, F_ARR_TYPE, 4, owner, in_array);
        uint64_t n = take(w, F_ARR_LEN, 8, owner, in_array);
        if (elem < 13 && width[elem] != 0) {
            if (n > (w->size - w->pos) / width[elem])
                w->ok = false;
            skip(w, n * width[elem]);
            return;
        }
        if (++w->depth > 16)
            w->ok = false;
        for (uint64_t i = 0; i < n && w->ok; i++)
            walk_value(w, elem, owner, true);
        w->depth--;
    } else if (type < 13 && (width[type] == 4 || width[type] == 8) && !in_array) {
        take(w, F_SCALAR, width[type], owner, false);
    } else if (type < 13 && width[type] != 0) {
        skip(w, width[type]);
    } else {
        w->ok = false;
    }
}

static void walk_kv(walker *w, uint64_t i)
{
    uint64_t key_len = take(w, F_KEY_LEN, 8, i, false);
    uint64_t key_at = w->pos;
    if (!skip(w, key_len))
        return;
    uint32_t type = (uint32_t)take(w, F_VALUE_TYPE, 4, i, false);
    bool is_alignment = key_len == 17 && memcmp(w->p + key_at, "general.alignment", 17) == 0 &&
                        type == HYDRA_VALUE_U32;
    if (is_alignment)
        w->lay->alignment_field = (int64_t)w->lay->n_fields;
    walk_value(w, type, i, false);
    if (is_alignment && w->ok)
        w->lay->alignment = w->lay->fields[w->lay->alignment_field].value;
}

static void walk_tensor(walker *w, uint64_t i)
{
    uint64_t name_len = take(w, F_NAME_LEN, 8, i, false);
    uint64_t name_at = w->pos;
    if (!skip(w, name_len) || (w->lay->tensor_names[i] = malloc(name_len + 1)) == NULL)
        return (void)(w->ok = false);
    memcpy(w->lay->tensor_names[i], w->p + name_at, name_len);
    w->lay->tensor_names[i][name_len] = '\0';
    uint32_t n_dims = (uint32_t)take(w, F_N_DIMS, 4, i, false);
    if (n_dims > 4)
        return (void)(w->ok = false);
    for (uint32_t d = 0; d < n_dims; d++)
        take(w, F_DIM, 8, i, false);
    take(w, F_TENSOR_TYPE, 4, i, false);
    uint64_t offset = take(w, F_TENSOR_OFFSET, 8, i, false);
    if (offset > w->lay->last_tensor_start)
        w->lay->last_tensor_start = offset;
}

static void layout_free(layout *lay)
{
    for (uint64_t i = 0; lay->tensor_names != NULL && i < lay->n_tensors; i++)
        free(lay->tensor_names[i]);
    free(lay->tensor_names);
    free(lay->fields);
    *lay = (layout){0};
}

/* Walks a valid file; false if the walker cannot follow it. */
static bool walk(const uint8_t *p, uint64_t size, layout *lay)
{
    *lay = (layout){.alignment_field = -1, .alignment = 32};
    walker w = {.p = p, .size = size, .lay = lay, .ok = true};
    take(&w, F_MAGIC, 4, 0, false);
    take(&w, F_VERSION, 4, 0, false);
    uint64_t n_tensors = take(&w, F_N_TENSORS, 8, 0, false);
    uint64_t n_kv = take(&w, F_N_KV, 8, 0, false);
    if (!w.ok || n_tensors > size || n_kv > size)
        return false;
    lay->tensor_names = calloc(n_tensors + 1, sizeof *lay->tensor_names);
    lay->n_tensors = lay->tensor_names != NULL ? n_tensors : 0;
    for (uint64_t i = 0; i < n_kv && w.ok; i++)
        walk_kv(&w, i);
    for (uint64_t i = 0; i < lay->n_tensors && w.ok; i++)
        walk_tensor(&w, i);
    lay->header_end = w.pos;
    lay->data_offset = (w.pos + lay->alignment - 1) / lay->alignment * lay->alignment;
    return w.ok && lay->tensor_names != NULL && lay->n_tensors > 0 && lay->data_offset <= size;
}

/* -------------------------------------------------------------- subjects */

/* A valid file, its walk, and a scratch copy that mutations patch in place. */
typedef struct subject {
    char label[64];
    uint8_t *img; /* the valid image; patched and restored around each case */
    uint64_t size;
    layout lay;
    uint64_t *tensor_bytes; /* n_bytes of each tensor, from opening the valid file */
    char path[4096];        /* scratch copy of img */
    char cut_path[4096];    /* scratch file for truncated copies */
    int fd;
    bool exhaustive;        /* every field and cut; else a sample */
} subject;

static const field *tensor_field(const subject *s, uint64_t tensor, field_kind kind, unsigned nth)
{
    for (size_t i = 0; i < s->lay.n_fields; i++) {
        const field *f = &s->lay.fields[i];
        if (f->kind == kind && f->owner == tensor && !f->in_array && nth-- == 0)
            return f;
    }
    return NULL;
}

static void scratch_name(char *out, size_t len, const char *label, const char *suffix)
{
    snprintf(out, len, "%s", util_scratch_path(""));
    size_t n = strlen(out);
    snprintf(out + n, len - n, "malformed-%ld-%s%s.gguf", (long)getpid(), label, suffix);
}

static void subject_free(subject *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        unlink(s->path);
        unlink(s->cut_path);
    }
    layout_free(&s->lay);
    free(s->tensor_bytes);
    free(s->img);
    *s = (subject){.fd = -1};
}

/* Takes ownership of img.  Checks the file is valid, walks it, writes its
 * scratch copy.  On failure returns false with why filled in. */
static bool subject_init(subject *s, const char *label, uint8_t *img, uint64_t size, bool exhaustive, char *why,
                         size_t why_len)
{
    *s = (subject){.img = img, .size = size, .exhaustive = exhaustive, .fd = -1};
    snprintf(s->label, sizeof s->label, "%s", label);
    if (!walk(img, size, &s->lay))
        return snprintf(why, why_len, "%s: the walker cannot follow the valid file", label), false;
    scratch_name(s->path, sizeof s->path, s->label, "");
    scratch_name(s->cut_path, sizeof s->cut_path, s->label, "-cut");
    if (util_write_file(s->path, img, size) != 0 || (s->fd = open(s->path, O_RDWR)) < 0)
        return snprintf(why, why_len, "%s: cannot write %s", label, s->path), false;
    hydra_model_params p = hydra_model_default_params();
    p.path = s->path;
    hydra_model *m;
    hydra_status st = hydra_model_open(&m, &p);
    if (st != HYDRA_OK)
        return snprintf(why, why_len, "%s: the valid file does not open: %s", label, hydra_last_error()), false;
    bool ok = hydra_model_tensor_count(m) == s->lay.n_tensors;
    s->tensor_bytes = calloc(s->lay.n_tensors, sizeof *s->tensor_bytes);
    for (uint64_t i = 0; ok && s->tensor_bytes != NULL && i < s->lay.n_tensors; i++) {
        hydra_tensor_info ti;
        ok = hydra_model_tensor_at(m, i, &ti) == HYDRA_OK && strcmp(ti.name, s->lay.tensor_names[i]) == 0 &&
             ti.file_offset == s->lay.data_offset + tensor_field(s, i, F_TENSOR_OFFSET, 0)->value;
        s->tensor_bytes[i] = ti.n_bytes;
    }
    hydra_model_close(m);
    if (!ok || s->tensor_bytes == NULL)
        return snprintf(why, why_len, "%s: hydra and the walker disagree on the tensors", label), false;
    return true;
}

static bool subject_from_file(subject *s, const char *path, const char *label, bool exhaustive, char *why,
                              size_t why_len)
{
    size_t size;
    uint8_t *img = util_read_file(path, &size);
    if (img == NULL)
        return snprintf(why, why_len, "cannot read %s", path), false;
    return subject_init(s, label, img, size, exhaustive, why, why_len);
}

/* A qwen3moe-shaped file from the writer: the loader's keys with their
 * types, arrays of strings, floats and ints, four tensors of four types. */
static bool write_own_file(const char *path)
{
    static const char *const tokens[] = {"a", "bc", "", "def"};
    static const float scores[] = {0, -1, -2, -3};
    static const int32_t types[] = {1, 1, 3, 1};
    gguf_writer *w;
    if (gguf_writer_open(&w, path) != HYDRA_OK)
        return false;
    gguf_writer_add_str(w, "general.architecture", "qwen3moe");
    gguf_writer_add_u32(w, "general.alignment", 32);
    gguf_writer_add_str(w, "general.name", "malformed-suite");
    gguf_writer_add_u32(w, "qwen3moe.block_count", 1);
    gguf_writer_add_u32(w, "qwen3moe.expert_count", 2);
    gguf_writer_add_f32(w, "qwen3moe.rope.freq_base", 1e6f);
    gguf_writer_add_bool(w, "qwen3moe.expert_weights_norm", true);
    gguf_writer_add_u64(w, "t.u64", 12345);
    gguf_writer_add_i32(w, "t.i32", -3);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, 4);
    gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", scores, 4);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, 4);
    static const struct {
        const char *name;
        uint32_t type, n_dims;
        uint64_t ne[3], bytes;
    } ts[] = {
        {"token_embd.weight", 0, 2, {4, 3, 1}, 48},
        {"blk.0.ffn_down_exps.weight", 8, 3, {64, 2, 2}, 4 * 2 * 34},
        {"blk.0.attn_norm.weight", 1, 1, {8, 1, 1}, 16},
        {"output.weight", 30, 2, {4, 2, 1}, 16},
    };
    for (size_t i = 0; i < 4; i++)
        gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne);
    uint8_t data[4 * 2 * 34];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 37 + 1);
    for (size_t i = 0; i < 4; i++)
        gguf_writer_write(w, data, (size_t)ts[i].bytes);
    return gguf_writer_close(w) == HYDRA_OK;
}

/* A v2 file by hand: every scalar type, nested arrays, alignment 8. */
static void build_nested_file(gguf_builder *b)
{
    gb_header(b, 2, 2, 8);
    gb_key(b, "general.alignment", HYDRA_VALUE_U32), gb_u32(b, 8);
    gb_key(b, "n.u8", HYDRA_VALUE_U8), gb_u8(b, 7);
    gb_key(b, "n.i16", HYDRA_VALUE_I16), gb_u16(b, 0xfffe);
    gb_key(b, "n.f64", HYDRA_VALUE_F64), gb_f64(b, 0.5);
    gb_key(b, "n.i64", HYDRA_VALUE_I64), gb_u64(b, 1);
    gb_key(b, "n.bool", HYDRA_VALUE_BOOL), gb_u8(b, 1);
    gb_key(b, "n.nested", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_ARRAY, 3);
    gb_array(b, HYDRA_VALUE_U16, 2), gb_u16(b, 1), gb_u16(b, 2);
    gb_array(b, HYDRA_VALUE_STRING, 2), gb_cstr(b, "xy"), gb_cstr(b, "");
    gb_array(b, HYDRA_VALUE_ARRAY, 1), gb_array(b, HYDRA_VALUE_I8, 1), gb_u8(b, 0x80);
    gb_key(b, "n.strs", HYDRA_VALUE_ARRAY), gb_array(b, HYDRA_VALUE_STRING, 2), gb_cstr(b, "q"), gb_cstr(b, "rs");
    gb_tensor_info(b, "v", 0, 1, (uint64_t[]){3}, 16);
    gb_tensor_info(b, "m", 1, 2, (uint64_t[]){2, 2}, 0);
    gb_pad(b, 8);
    for (int i = 0; i < 28; i++)
        gb_u8(b, (uint8_t)i);
}

typedef enum subject_id { S_OWN, S_NESTED, S_DEQUANT_F32, S_DEQUANT_Q4_K, S_DEQUANT_MXFP4, S_QWEN3, S_DEEPSEEK2,
                          S_GPTOSS } subject_id;

static const struct {
    const char *label;
    const char *shared; /* path under ../shared, NULL for the suite's own */
    bool exhaustive;
} subjects[] = {
    [S_OWN] = {"own", NULL, true},
    [S_NESTED] = {"nested", NULL, true},
    [S_DEQUANT_F32] = {"dequant-f32", "ref/dequant/dequant-f32.gguf", true},
    [S_DEQUANT_Q4_K] = {"dequant-q4_k", "ref/dequant/dequant-q4_k.gguf", true},
    [S_DEQUANT_MXFP4] = {"dequant-mxfp4", "ref/dequant/dequant-mxfp4.gguf", true},
    [S_QWEN3] = {"qwen3moe-tiny-q8_0", "models/qwen3moe-tiny-q8_0.gguf", false},
    [S_DEEPSEEK2] = {"deepseek2-tiny-q8_0", "models/deepseek2-tiny-q8_0.gguf", false},
    [S_GPTOSS] = {"gptoss-tiny-mxfp4", "models/gptoss-tiny-mxfp4.gguf", false},
};
enum { N_SUBJECTS = sizeof subjects / sizeof subjects[0] };

/* Loads a subject.  Shared ones are absent without ../shared: *skip. */
static bool subject_load(subject *s, subject_id id, bool *absent, char *why, size_t why_len)
{
    *absent = false;
    *s = (subject){.fd = -1};
    if (id == S_OWN) {
        char path[4096];
        scratch_name(path, sizeof path, "own", "-src");
        bool ok = write_own_file(path);
        if (!ok)
            snprintf(why, why_len, "cannot write %s: %s", path, hydra_last_error());
        ok = ok && subject_from_file(s, path, "own", true, why, why_len);
        unlink(path);
        return ok;
    }
    if (id == S_NESTED) {
        gguf_builder b = {0};
        build_nested_file(&b);
        if (b.failed)
            return snprintf(why, why_len, "out of memory"), false;
        return subject_init(s, "nested", b.p, b.len, true, why, why_len);
    }
    if (test_shared_dir() == NULL)
        return *absent = true, false;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", test_shared_dir(), subjects[id].shared);
    return subject_from_file(s, path, subjects[id].label, subjects[id].exhaustive, why, why_len);
}

/* ------------------------------------------------------------- one case */

typedef enum expect { MAY_OPEN, MUST_FAIL } expect;

/* Ends a bool helper's case with a failure. */
#define CASE_FAIL(...)                                                        \
    do {                                                                      \
        test_failf(TEST_CTX, __FILE__, __LINE__, __VA_ARGS__);                \
        return false;                                                         \
    } while (0)

/* An opened corrupt file must still be self-consistent: every tensor inside
 * the file (its first and last byte are read, so a bad pointer faults or
 * shows under ASan) and every key readable by the getters. */
static bool model_is_sound(hydra_model *m, uint64_t size, char *why, size_t why_len)
{
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info ti;
        if (hydra_model_tensor_at(m, i, &ti) != HYDRA_OK)
            return snprintf(why, why_len, "tensor %zu: tensor_at fails", i), false;
        if (ti.n_bytes == 0 || ti.file_offset > size || ti.n_bytes > size - ti.file_offset)
            return snprintf(why, why_len, "tensor '%s' [%llu, +%llu) is not inside the %llu-byte file", ti.name,
                            (unsigned long long)ti.file_offset, (unsigned long long)ti.n_bytes,
                            (unsigned long long)size),
                   false;
        sink ^= ((const uint8_t *)ti.data)[0] ^ ((const uint8_t *)ti.data)[ti.n_bytes - 1];
    }
    for (size_t i = 0; i < hydra_model_meta_count(m); i++) {
        const char *key, *s;
        hydra_value_type type, elem;
        uint64_t u;
        int64_t v;
        double f;
        bool flag;
        size_t len, n;
        if (hydra_model_meta_at(m, i, &key, &type) != HYDRA_OK)
            return snprintf(why, why_len, "metadata %zu: meta_at fails", i), false;
        hydra_model_get_u64(m, key, &u);
        hydra_model_get_i64(m, key, &v);
        hydra_model_get_f64(m, key, &f);
        hydra_model_get_bool(m, key, &flag);
        if (hydra_model_get_str(m, key, &s, &len) == HYDRA_OK)
            sink ^= (uint8_t)s[len];
        if (hydra_model_get_arr(m, key, &elem, &n) == HYDRA_OK && n > 0) {
            hydra_model_get_arr_str(m, key, n - 1, &s, &len);
            hydra_model_get_arr_i64(m, key, n - 1, &v);
            hydra_model_get_arr_f64(m, key, n - 1, &f);
        }
    }
    (void)sink;
    return true;
}

/* Opens path both ways and checks the outcome. */
static bool check_open(test_ctx *t_, const char *path, uint64_t size, expect e, const char *mention,
                       const char *mention2, const char *what)
{
    for (int use_mmap = 1; use_mmap >= 0; use_mmap--) {
        hydra_model_params p = hydra_model_default_params();
        p.path = path;
        p.use_mmap = use_mmap;
        hydra_model *m = (hydra_model *)&p;
        hydra_fail(HYDRA_OK, "%s", ""); /* so a stale message cannot pass for this case's */
        hydra_status st = hydra_model_open(&m, &p);
        const char *way = use_mmap ? "mmap" : "read";
        if (st == HYDRA_OK) {
            char why[512] = "";
            bool sound = model_is_sound(m, size, why, sizeof why);
            hydra_model_close(m);
            if (e == MUST_FAIL)
                CASE_FAIL("%s (%s): opened, but must be refused", what, way);
            if (!sound)
                CASE_FAIL("%s (%s): opened a corrupt file: %s", what, way, why);
            continue;
        }
        const char *msg = hydra_last_error();
        if (m != NULL)
            CASE_FAIL("%s (%s): a failed open left a model", what, way);
        if (st != HYDRA_ERR_FORMAT)
            CASE_FAIL("%s (%s): %s, expected \"malformed file\": %s", what, way, hydra_strerror(st), msg);
        if (size > 0 && strstr(msg, "byte") == NULL)
            CASE_FAIL("%s (%s): the message names no byte offset: \"%s\"", what, way, msg);
        if (msg[0] == '\0')
            CASE_FAIL("%s (%s): empty message", what, way);
        if (mention != NULL && strstr(msg, mention) == NULL)
            CASE_FAIL("%s (%s): the message does not name '%s': \"%s\"", what, way, mention, msg);
        if (mention2 != NULL && strstr(msg, mention2) == NULL)
            CASE_FAIL("%s (%s): the message does not name '%s': \"%s\"", what, way, mention2, msg);
    }
    return true;
}

/* Sets width bytes at offset to value (in memory and in the scratch copy),
 * checks the open, restores. */
static bool check_patch(test_ctx *t_, subject *s, uint64_t offset, uint32_t width, uint64_t value, expect e,
                        const char *mention, const char *mention2, const char *what)
{
    uint8_t saved[8];
    memcpy(saved, s->img + offset, width);
    memcpy(s->img + offset, &value, width);
    bool wrote = pwrite(s->fd, s->img + offset, width, (off_t)offset) == (ssize_t)width;
    bool ok = wrote && check_open(t_, s->path, s->size, e, mention, mention2, what);
    memcpy(s->img + offset, saved, width);
    if (pwrite(s->fd, saved, width, (off_t)offset) != (ssize_t)width || !wrote)
        CASE_FAIL("%s: cannot patch %s", what, s->path);
    return ok;
}

/* The first `cut` bytes of the subject as a file of their own. */
static bool check_cut(test_ctx *t_, subject *s, uint64_t cut)
{
    /* A fresh file each time: truncating the old one would make ext4
     * flush it on close (auto_da_alloc), which costs seconds over a suite. */
    unlink(s->cut_path);
    if (util_write_file(s->cut_path, s->img, (size_t)cut) != 0)
        CASE_FAIL("%s: cannot write %s", s->label, s->cut_path);
    /* Before the start of the last tensor's data the file cannot hold all
     * tensors: refusal is the only answer.  After it, only trailing
     * padding may be missing. */
    expect e = cut <= s->lay.data_offset + s->lay.last_tensor_start ? MUST_FAIL : MAY_OPEN;
    char what[128];
    snprintf(what, sizeof what, "%s cut to %llu of %llu bytes", s->label, (unsigned long long)cut,
             (unsigned long long)s->size);
    return check_open(t_, s->cut_path, cut, e, NULL, NULL, what);
}

/* ------------------------------------------------------- (a) truncation */

static bool truncations(test_ctx *t_, subject *s)
{
    const layout *lay = &s->lay;
    uint64_t data_points[] = {
        lay->data_offset - (lay->data_offset > 0), lay->data_offset, lay->data_offset + 1,
        lay->data_offset + lay->last_tensor_start, lay->data_offset + lay->last_tensor_start + 1,
        (lay->data_offset + s->size) / 2, s->size - 1,
    };
    for (size_t i = 0; i < sizeof data_points / sizeof data_points[0]; i++)
        if (data_points[i] < s->size && !check_cut(t_, s, data_points[i]))
            return false;
    if (s->exhaustive) {
        for (uint64_t cut = 0; cut <= lay->header_end; cut++)
            if (!check_cut(t_, s, cut))
                return false;
        return true;
    }
    /* Sampled: around every field outside arrays, and at evenly spaced points. */
    for (size_t i = 0; i < lay->n_fields; i++) {
        const field *f = &lay->fields[i];
        if (f->in_array && i % 97 != 0)
            continue;
        uint64_t cuts[] = {f->offset, f->offset + 1, f->offset + f->width - 1, f->offset + f->width};
        for (size_t k = 0; k < 4; k++)
            if (!check_cut(t_, s, cuts[k]))
                return false;
    }
    for (uint64_t k = 0; k < 256; k++)
        if (!check_cut(t_, s, lay->header_end * k / 256))
            return false;
    return check_cut(t_, s, lay->header_end);
}

static void for_each_subject(test_ctx *t_, bool (*run)(test_ctx *, subject *), bool small)
{
    for (int id = 0; id < N_SUBJECTS; id++) {
        if (subjects[id].exhaustive != small)
            continue;
        subject s;
        bool absent;
        char why[512];
        if (!subject_load(&s, (subject_id)id, &absent, why, sizeof why)) {
            subject_free(&s);
            if (absent)
                SKIP("../shared is absent: only the suite's own files were corrupted");
            FAIL("%s", why);
        }
        bool ok = run(t_, &s);
        subject_free(&s);
        if (!ok)
            return;
    }
}

TEST(gguf_malformed_truncated_small_files)
{
    for_each_subject(t_, truncations, true);
}

TEST(gguf_malformed_truncated_shared_models_sampled)
{
    REQUIRE_SHARED();
    for_each_subject(t_, truncations, false);
}

/* --------------------------------------------------- (b) boundary values */

static bool is_power_of_two(uint64_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

/* Corruptions no valid file can contain, whatever the rest holds. */
static expect expectation(const subject *s, const field *f, uint64_t v)
{
    uint64_t left = s->size - f->offset;
    switch (f->kind) {
    case F_MAGIC: return MUST_FAIL;
    case F_VERSION: return v != 2 && v != 3 ? MUST_FAIL : MAY_OPEN;
    case F_N_TENSORS:
    case F_N_KV: return v > s->size ? MUST_FAIL : MAY_OPEN;
    case F_KEY_LEN:
    case F_NAME_LEN: return v == 0 || v > left ? MUST_FAIL : MAY_OPEN;
    case F_STR_LEN:
    case F_ARR_LEN: return v > left ? MUST_FAIL : MAY_OPEN;
    case F_VALUE_TYPE:
    case F_ARR_TYPE: return v > HYDRA_VALUE_F64 ? MUST_FAIL : MAY_OPEN;
    case F_N_DIMS: return v == 0 || v > 4 ? MUST_FAIL : MAY_OPEN;
    case F_DIM: return v == 0 || v > INT64_MAX ? MUST_FAIL : MAY_OPEN;
    case F_TENSOR_TYPE: return v >= 1000 ? MUST_FAIL : MAY_OPEN; /* ggml ids are far below */
    case F_TENSOR_OFFSET: return v % s->lay.alignment != 0 || v >= s->size ? MUST_FAIL : MAY_OPEN;
    case F_SCALAR:
        return (int64_t)(f - s->lay.fields) == s->lay.alignment_field && !is_power_of_two(v) ? MUST_FAIL
                                                                                             : MAY_OPEN;
    }
    return MAY_OPEN;
}

static bool boundary_values(test_ctx *t_, subject *s)
{
    size_t in_arrays = 0;
    for (size_t i = 0; i < s->lay.n_fields; i++)
        in_arrays += s->lay.fields[i].in_array;
    /* Sampled subjects: every field outside arrays, about 24 inside them. */
    size_t stride = s->exhaustive || in_arrays < 24 ? 1 : in_arrays / 24, seen = 0;
    for (size_t i = 0; i < s->lay.n_fields; i++) {
        const field *f = &s->lay.fields[i];
        if (f->in_array && seen++ % stride != 0)
            continue;
        uint64_t max = f->width == 4 ? UINT32_MAX : UINT64_MAX, sign = max / 2 + 1;
        uint64_t values[] = {0, 1, max, max - 1, sign, sign - 1, f->value - 1, f->value + 1,
                             s->size - f->offset, s->size};
        for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
            uint64_t v = values[k] & max;
            bool repeated = v == f->value;
            for (size_t j = 0; j < k && !repeated; j++)
                repeated = (values[j] & max) == v;
            if (repeated)
                continue;
            char what[160];
            snprintf(what, sizeof what, "%s: %s at byte %llu set from %llu to %llu", s->label, kind_names[f->kind],
                     (unsigned long long)f->offset, (unsigned long long)f->value, (unsigned long long)v);
            if (!check_patch(t_, s, f->offset, f->width, v, expectation(s, f, v), NULL, NULL, what))
                return false;
        }
    }
    return true;
}

TEST(gguf_malformed_boundary_values_small_files)
{
    for_each_subject(t_, boundary_values, true);
}

TEST(gguf_malformed_boundary_values_shared_models_sampled)
{
    REQUIRE_SHARED();
    for_each_subject(t_, boundary_values, false);
}

/* ------------------------------------------------- (c) tensor placement */

static bool placements(test_ctx *t_, subject *s)
{
    uint64_t a = s->lay.alignment, data_size = s->size - s->lay.data_offset;
    for (uint64_t i = 0; i < s->lay.n_tensors; i++) {
        const field *off = tensor_field(s, i, F_TENSOR_OFFSET, 0);
        const char *name = s->lay.tensor_names[i];
        uint64_t n_bytes = s->tensor_bytes[i];
        char what[200];
        /* Onto the start of another tensor, and into its middle. */
        for (uint64_t j = 0; j < s->lay.n_tensors; j++) {
            const field *other = tensor_field(s, j, F_TENSOR_OFFSET, 0);
            if (j == i)
                continue;
            snprintf(what, sizeof what, "%s: tensor '%s' moved onto '%s'", s->label, name, s->lay.tensor_names[j]);
            if (!check_patch(t_, s, off->offset, 8, other->value, MUST_FAIL, name, NULL, what))
                return false;
            uint64_t inside = (other->value + s->tensor_bytes[j] / 2) / a * a;
            if (inside > other->value && inside < other->value + s->tensor_bytes[j]) {
                snprintf(what, sizeof what, "%s: tensor '%s' moved into '%s'", s->label, name,
                         s->lay.tensor_names[j]);
                if (!check_patch(t_, s, off->offset, 8, inside, MUST_FAIL, name, NULL, what))
                    return false;
            }
        }
        /* Off the alignment. */
        uint64_t misaligned[] = {off->value + 1, off->value + a / 2, off->value + a - 1};
        for (size_t k = 0; k < 3 && a > 1; k++) {
            snprintf(what, sizeof what, "%s: tensor '%s' at misaligned offset %llu", s->label, name,
                     (unsigned long long)misaligned[k]);
            if (!check_patch(t_, s, off->offset, 8, misaligned[k], MUST_FAIL, name, NULL, what))
                return false;
        }
        /* Past the end, straddling it, and at the far end of u64. */
        uint64_t outside[] = {(data_size + a - 1) / a * a, (data_size - n_bytes + a) / a * a, UINT64_MAX / a * a};
        for (size_t k = 0; k < 3; k++) {
            if (outside[k] + n_bytes <= data_size && outside[k] <= UINT64_MAX - n_bytes)
                continue;
            snprintf(what, sizeof what, "%s: tensor '%s' at offset %llu, outside the %llu-byte data", s->label,
                     name, (unsigned long long)outside[k], (unsigned long long)data_size);
            if (!check_patch(t_, s, off->offset, 8, outside[k], MUST_FAIL, name, NULL, what))
                return false;
        }
    }
    return true;
}

TEST(gguf_malformed_overlapping_misaligned_and_outside_tensors)
{
    for_each_subject(t_, placements, true);
}

TEST(gguf_malformed_overlapping_tensors_in_a_shared_model)
{
    REQUIRE_SHARED();
    subject s;
    bool absent;
    char why[512];
    if (!subject_load(&s, S_QWEN3, &absent, why, sizeof why)) {
        subject_free(&s);
        FAIL("%s", why);
    }
    placements(t_, &s); /* a failure is already recorded in the test */
    subject_free(&s);
}

/* ----------------------------------------------- (d) named rejections */

/* Loads the suite's own file, or fails the test. */
#define LOAD_OWN(s)                                                           \
    do {                                                                      \
        bool absent_;                                                         \
        char why_[512];                                                       \
        if (!subject_load(&(s), S_OWN, &absent_, why_, sizeof why_)) {        \
            subject_free(&(s));                                               \
            FAIL("%s", why_);                                                 \
        }                                                                     \
    } while (0)

/* Patches one field of each tensor to each value; all must be refused
 * with the tensor's name and `mention` in the message. */
static bool refuse_each_tensor(test_ctx *t_, subject *s, field_kind kind, unsigned nth, const uint64_t *values,
                               size_t n_values, const char *mention)
{
    for (uint64_t i = 0; i < s->lay.n_tensors; i++) {
        const field *f = tensor_field(s, i, kind, nth);
        for (size_t k = 0; f != NULL && k < n_values; k++) {
            char what[160];
            snprintf(what, sizeof what, "%s: tensor '%s' %s set to %llu", s->label, s->lay.tensor_names[i],
                     kind_names[kind], (unsigned long long)values[k]);
            if (!check_patch(t_, s, f->offset, f->width, values[k], MUST_FAIL, s->lay.tensor_names[i], mention,
                             what))
                return false;
        }
    }
    return true;
}

TEST(gguf_malformed_n_dims_outside_1_to_4)
{
    subject s;
    LOAD_OWN(s);
    static const uint64_t values[] = {0, 5, 8, 0x80000000u, UINT32_MAX};
    refuse_each_tensor(t_, &s, F_N_DIMS, 0, values, 5, "n_dims");
    subject_free(&s);
}

TEST(gguf_malformed_zero_dimension)
{
    subject s;
    LOAD_OWN(s);
    static const uint64_t zero[] = {0};
    bool ok = true;
    for (unsigned d = 0; d < 4 && ok; d++)
        ok = refuse_each_tensor(t_, &s, F_DIM, d, zero, 1, "dimension");
    subject_free(&s);
}

TEST(gguf_malformed_overflowing_dimensions)
{
    /* token_embd.weight is F32 {4, 3}: 2^40 × 2^40 elements overflow,
     * 2^61 × 3 elements pass int64, 2^60 × 3 elements fit but their bytes
     * (2^62 per row × 3) do not, 2^63 is beyond int64 on its own. */
    static const struct {
        uint64_t ne0, ne1;
    } cases[] = {{1ull << 40, 1ull << 40}, {1ull << 61, 3}, {1ull << 60, 3}, {1ull << 63, 3}, {UINT64_MAX, 3}};
    subject s;
    LOAD_OWN(s);
    const field *ne0 = tensor_field(&s, 0, F_DIM, 0), *ne1 = tensor_field(&s, 0, F_DIM, 1);
    if (strcmp(s.lay.tensor_names[0], "token_embd.weight") != 0 || ne1 == NULL) {
        subject_free(&s);
        FAIL("the suite's own file lost token_embd.weight");
    }
    bool ok = true;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0] && ok; k++) {
        char what[128];
        snprintf(what, sizeof what, "token_embd.weight ne {%llu, %llu}", (unsigned long long)cases[k].ne0,
                 (unsigned long long)cases[k].ne1);
        memcpy(s.img + ne1->offset, &cases[k].ne1, 8);
        ok = pwrite(s.fd, &cases[k].ne1, 8, (off_t)ne1->offset) == 8 &&
             check_patch(t_, &s, ne0->offset, 8, cases[k].ne0, MUST_FAIL, "token_embd.weight", NULL, what);
        memcpy(s.img + ne1->offset, &ne1->value, 8);
        ok = pwrite(s.fd, &ne1->value, 8, (off_t)ne1->offset) == 8 && ok;
    }
    subject_free(&s);
}

TEST(gguf_malformed_unknown_tensor_type)
{
    /* Ids ggml retired (4, 5: Q4_2/Q4_3; 31-33, 36-38: repacked Q4_0/IQ4_NL
     * variants) and ids no version of ggml used. */
    static const uint64_t values[] = {4, 5, 31, 32, 33, 36, 37, 38, 1000, 0x80000000u, UINT32_MAX};
    subject s;
    LOAD_OWN(s);
    refuse_each_tensor(t_, &s, F_TENSOR_TYPE, 0, values, sizeof values / sizeof values[0], "type");
    subject_free(&s);
}

TEST(gguf_malformed_row_not_whole_blocks)
{
    /* blk.0.ffn_down_exps.weight is Q8_0 (32 values a block), ne0 64. */
    subject s;
    LOAD_OWN(s);
    const field *ne0 = tensor_field(&s, 1, F_DIM, 0);
    if (strcmp(s.lay.tensor_names[1], "blk.0.ffn_down_exps.weight") != 0 || ne0 == NULL) {
        subject_free(&s);
        FAIL("the suite's own file lost blk.0.ffn_down_exps.weight");
    }
    static const uint64_t values[] = {1, 16, 31, 33, 48, 65, 96 + 1};
    bool ok = true;
    for (size_t k = 0; k < sizeof values / sizeof values[0] && ok; k++) {
        char what[128];
        snprintf(what, sizeof what, "Q8_0 row of %llu", (unsigned long long)values[k]);
        ok = check_patch(t_, &s, ne0->offset, 8, values[k], MUST_FAIL, "blk.0.ffn_down_exps.weight", NULL, what);
    }
    subject_free(&s);
}

TEST(gguf_malformed_alignment_not_a_power_of_two)
{
    static const uint64_t values[] = {0, 3, 24, 48, 96, 0x80000001u, UINT32_MAX};
    subject s;
    LOAD_OWN(s);
    if (s.lay.alignment_field < 0) {
        subject_free(&s);
        FAIL("the suite's own file has no general.alignment");
    }
    const field *f = &s.lay.fields[s.lay.alignment_field];
    bool ok = true;
    for (size_t k = 0; k < sizeof values / sizeof values[0] && ok; k++) {
        char what[128];
        snprintf(what, sizeof what, "general.alignment = %llu", (unsigned long long)values[k]);
        ok = check_patch(t_, &s, f->offset, 4, values[k], MUST_FAIL, "general.alignment", NULL, what);
    }
    /* A power of two the tensors' offsets do not follow: 64, when the file
     * packs them at multiples of 32. */
    ok = ok && check_patch(t_, &s, f->offset, 4, 64, MUST_FAIL, "alignment", NULL, "general.alignment = 64");
    subject_free(&s);
}

TEST(gguf_malformed_bad_magic)
{
    static const char *const magics[] = {"GGUX", "gguf", "GGML", "GGJT", "FUGG", "\0GGU", "GGU\0"};
    subject s;
    LOAD_OWN(s);
    bool ok = true;
    for (size_t k = 0; k < sizeof magics / sizeof magics[0] && ok; k++) {
        uint32_t v;
        memcpy(&v, magics[k], 4);
        char what[64];
        snprintf(what, sizeof what, "magic \"%.4s\"", magics[k]);
        ok = check_patch(t_, &s, 0, 4, v, MUST_FAIL, "magic", NULL, what);
    }
    subject_free(&s);
}

TEST(gguf_malformed_unsupported_version)
{
    /* 1 had 32-bit counts; 0x03000000 is version 3 written big-endian. */
    static const uint64_t versions[] = {0, 1, 4, 5, 0x02000000, 0x03000000, 0x80000000u, UINT32_MAX};
    subject s;
    LOAD_OWN(s);
    bool ok = true;
    for (size_t k = 0; k < sizeof versions / sizeof versions[0] && ok; k++) {
        char what[64];
        snprintf(what, sizeof what, "version %llu", (unsigned long long)versions[k]);
        ok = check_patch(t_, &s, 4, 4, versions[k], MUST_FAIL, "version", NULL, what);
    }
    subject_free(&s);
}

/* A writer-built file with one deliberate flaw; checks it is refused with
 * `mention` in the message. */
typedef void (*flaw_fn)(gguf_writer *w);

static bool refuse_written(test_ctx *t_, flaw_fn flaw, const char *mention, const char *what)
{
    char path[4096];
    scratch_name(path, sizeof path, "flaw", "");
    gguf_writer *w;
    if (gguf_writer_open(&w, path) != HYDRA_OK)
        CASE_FAIL("cannot write %s", path);
    gguf_writer_add_str(w, "general.architecture", "qwen3moe");
    flaw(w);
    float data[8] = {0};
    gguf_writer_write(w, data, sizeof data);
    hydra_status st = gguf_writer_close(w);
    if (st != HYDRA_OK)
        CASE_FAIL("%s: the writer failed: %s", what, hydra_last_error());
    size_t size;
    uint8_t *img = util_read_file(path, &size);
    free(img);
    bool ok = img != NULL && check_open(t_, path, size, MUST_FAIL, mention, NULL, what);
    unlink(path);
    return ok;
}

static void one_tensor(gguf_writer *w)
{
    gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 0, 1, (uint64_t[]){8});
}

static void duplicate_key(gguf_writer *w)
{
    gguf_writer_add_u32(w, "qwen3moe.expert_count", 8);
    gguf_writer_add_str(w, "general.name", "x");
    gguf_writer_add_u32(w, "qwen3moe.expert_count", 8);
    one_tensor(w);
}

static void duplicate_key_of_another_type(gguf_writer *w)
{
    gguf_writer_add_u32(w, "t.only_once", 1);
    gguf_writer_add_str(w, "t.only_once", "again");
    one_tensor(w);
}

static void duplicate_architecture(gguf_writer *w)
{
    gguf_writer_add_str(w, "general.architecture", "llama");
    one_tensor(w);
}

static void duplicate_tensor(gguf_writer *w)
{
    gguf_writer_add_tensor(w, "blk.3.dup_tensor", 0, 1, (uint64_t[]){4});
    gguf_writer_add_tensor(w, "blk.3.dup_tensor", 0, 1, (uint64_t[]){4});
}

TEST(gguf_malformed_duplicate_keys_and_tensor_names)
{
    if (!refuse_written(t_, duplicate_key, "qwen3moe.expert_count", "key written twice"))
        return;
    if (!refuse_written(t_, duplicate_key_of_another_type, "t.only_once", "key written twice, two types"))
        return;
    if (!refuse_written(t_, duplicate_architecture, "general.architecture", "general.architecture twice"))
        return;
    refuse_written(t_, duplicate_tensor, "blk.3.dup_tensor", "tensor name written twice");
}

TEST(gguf_malformed_duplicate_keys_compare_every_byte)
{
    /* Keys equal up to an embedded NUL are distinct; equal ones are not. */
    for (int same = 0; same <= 1; same++) {
        gguf_builder b = {0};
        gb_header(&b, 3, 0, 2);
        gb_str(&b, "k\0a", 3), gb_u32(&b, HYDRA_VALUE_U8), gb_u8(&b, 1);
        gb_str(&b, same ? "k\0a" : "k\0b", 3), gb_u32(&b, HYDRA_VALUE_U8), gb_u8(&b, 2);
        hydra_model *m;
        hydra_fail(HYDRA_OK, "%s", "");
        hydra_status st = gb_open(&b, true, &m);
        gb_free(&b);
        hydra_model_close(m);
        if (same)
            CHECK(st == HYDRA_ERR_FORMAT && strstr(hydra_last_error(), "duplicate") != NULL &&
                  strstr(hydra_last_error(), "byte") != NULL);
        else
            CHECK_OK(st);
    }
}

/* Keys the loader reads, stored with the wrong type. */
static void tokens_as_ints(gguf_writer *w)
{
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.tokens", (int32_t[]){1, 2}, 2);
    one_tensor(w);
}
static void tokens_as_string(gguf_writer *w)
{
    gguf_writer_add_str(w, "tokenizer.ggml.tokens", "a b c");
    one_tensor(w);
}
static void alignment_as_u64(gguf_writer *w)
{
    gguf_writer_add_u64(w, "general.alignment", 32);
    one_tensor(w);
}
static void alignment_as_i32(gguf_writer *w)
{
    gguf_writer_add_i32(w, "general.alignment", 32);
    one_tensor(w);
}
static void alignment_as_string(gguf_writer *w)
{
    gguf_writer_add_str(w, "general.alignment", "32");
    one_tensor(w);
}
static void expert_count_as_string(gguf_writer *w)
{
    gguf_writer_add_str(w, "qwen3moe.expert_count", "8");
    one_tensor(w);
}
static void freq_base_as_int(gguf_writer *w)
{
    gguf_writer_add_u32(w, "qwen3moe.rope.freq_base", 1000000);
    one_tensor(w);
}
static void scores_as_strings(gguf_writer *w)
{
    gguf_writer_add_arr_str(w, "tokenizer.ggml.scores", (const char *const[]){"0.5"}, 1);
    one_tensor(w);
}
static void token_type_as_floats(gguf_writer *w)
{
    gguf_writer_add_arr_f32(w, "tokenizer.ggml.token_type", (float[]){1}, 1);
    one_tensor(w);
}
static void add_bos_as_int(gguf_writer *w)
{
    gguf_writer_add_u32(w, "tokenizer.ggml.add_bos_token", 1);
    one_tensor(w);
}
static void head_count_as_float(gguf_writer *w)
{
    gguf_writer_add_f32(w, "qwen3moe.attention.head_count", 4);
    one_tensor(w);
}

TEST(gguf_malformed_loaded_keys_of_the_wrong_type)
{
    static const struct {
        flaw_fn flaw;
        const char *key;
    } cases[] = {
        {tokens_as_ints, "tokenizer.ggml.tokens"},
        {tokens_as_string, "tokenizer.ggml.tokens"},
        {alignment_as_u64, "general.alignment"},
        {alignment_as_i32, "general.alignment"},
        {alignment_as_string, "general.alignment"},
        {expert_count_as_string, "qwen3moe.expert_count"},
        {freq_base_as_int, "qwen3moe.rope.freq_base"},
        {scores_as_strings, "tokenizer.ggml.scores"},
        {token_type_as_floats, "tokenizer.ggml.token_type"},
        {add_bos_as_int, "tokenizer.ggml.add_bos_token"},
        {head_count_as_float, "qwen3moe.attention.head_count"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (!refuse_written(t_, cases[k].flaw, cases[k].key, cases[k].key))
            return;
}

TEST(gguf_malformed_architecture_not_a_string)
{
    gguf_builder b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.architecture", HYDRA_VALUE_U32), gb_u32(&b, 7);
    hydra_model *m;
    hydra_status st = gb_open(&b, true, &m);
    gb_free(&b);
    hydra_model_close(m);
    CHECK_EQ_INT(st, HYDRA_ERR_FORMAT);
    CHECK(strstr(hydra_last_error(), "general.architecture") != NULL);
}

TEST(gguf_malformed_arrays_nested_without_end)
{
    /* Each level is an array of one array: the reader must stop at a
     * fixed depth, not recurse as deep as the file says. */
    static const int depths[] = {64, 5000};
    for (size_t k = 0; k < 2; k++) {
        gguf_builder b = {0};
        gb_header(&b, 3, 0, 1);
        gb_key(&b, "deep.array", HYDRA_VALUE_ARRAY);
        for (int d = 0; d < depths[k]; d++)
            gb_array(&b, HYDRA_VALUE_ARRAY, 1);
        gb_array(&b, HYDRA_VALUE_U8, 0);
        hydra_model *m;
        hydra_fail(HYDRA_OK, "%s", "");
        hydra_status st = gb_open(&b, true, &m);
        gb_free(&b);
        hydra_model_close(m);
        CHECK_EQ_INT(st, HYDRA_ERR_FORMAT);
        CHECK(strstr(hydra_last_error(), "deep.array") != NULL && strstr(hydra_last_error(), "byte") != NULL);
    }
}

TEST(gguf_malformed_long_names_leave_the_offset_in_the_message)
{
    /* A name longer than the message buffer must not push the byte offset
     * out of the message. */
    enum { LONG = 4000 };
    char *name = malloc(LONG + 1);
    if (name == NULL)
        FAIL("out of memory");
    memset(name, 'k', LONG);
    name[LONG] = '\0';
    for (int as_tensor = 0; as_tensor <= 1; as_tensor++) {
        gguf_builder b = {0};
        gb_header(&b, 3, (uint64_t)as_tensor, 1);
        gb_key(&b, as_tensor ? "general.alignment" : name, as_tensor ? HYDRA_VALUE_U32 : 99);
        gb_u32(&b, 32);
        if (as_tensor)
            gb_tensor_info(&b, name, 0, 1, (uint64_t[]){0}, 0); /* a zero dimension */
        hydra_model *m;
        hydra_fail(HYDRA_OK, "%s", "");
        hydra_status st = gb_open(&b, true, &m);
        gb_free(&b);
        hydra_model_close(m);
        if (st != HYDRA_ERR_FORMAT || strstr(hydra_last_error(), "byte") == NULL) {
            free(name);
            FAIL("%s name of %d bytes: %s: \"%s\"", as_tensor ? "tensor" : "key", LONG, hydra_strerror(st),
                 hydra_last_error());
        }
    }
    free(name);
}
