#include "gguf_builder.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void gb_free(gguf_builder *b)
{
    free(b->p);
    *b = (gguf_builder){0};
}

void gb_bytes(gguf_builder *b, const void *src, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

void gb_u8(gguf_builder *b, uint8_t v) { gb_bytes(b, &v, 1); }
void gb_u16(gguf_builder *b, uint16_t v) { gb_bytes(b, &v, 2); }
void gb_u32(gguf_builder *b, uint32_t v) { gb_bytes(b, &v, 4); }
void gb_u64(gguf_builder *b, uint64_t v) { gb_bytes(b, &v, 8); }
void gb_f32(gguf_builder *b, float v) { gb_bytes(b, &v, 4); }
void gb_f64(gguf_builder *b, double v) { gb_bytes(b, &v, 8); }

void gb_str(gguf_builder *b, const char *s, size_t n)
{
    gb_u64(b, n);
    gb_bytes(b, s, n);
}

void gb_cstr(gguf_builder *b, const char *s)
{
    gb_str(b, s, strlen(s));
}

void gb_header(gguf_builder *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_key(gguf_builder *b, const char *key, uint32_t value_type)
{
    gb_cstr(b, key);
    gb_u32(b, value_type);
}

void gb_array(gguf_builder *b, uint32_t elem_type, uint64_t n)
{
    gb_u32(b, elem_type);
    gb_u64(b, n);
}

void gb_tensor_info(gguf_builder *b, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                    uint64_t offset)
{
    gb_cstr(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

void gb_pad(gguf_builder *b, uint64_t alignment)
{
    while (b->len % alignment != 0 && !b->failed)
        gb_u8(b, 0);
}

/* FNV-1a: a stable name for a seed file, so equal images share one file. */
static uint64_t image_hash(const gguf_builder *b)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < b->len; i++)
        h = (h ^ b->p[i]) * 0x100000001b3ull;
    return h;
}

static void save_seed(const gguf_builder *b)
{
    const char *dir = getenv("HYDRA_GGUF_SEED_DIR");
    if (dir == NULL || dir[0] == '\0')
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/built-%016llx.gguf", dir, (unsigned long long)image_hash(b));
    util_write_file(path, b->p, b->len);
}

hydra_status gb_open(const gguf_builder *b, bool use_mmap, hydra_model **m)
{
    *m = NULL;
    if (b->failed)
        return HYDRA_ERR_NOMEM;
    save_seed(b);
    char name[64];
    snprintf(name, sizeof name, "gguf-builder-%ld.gguf", (long)getpid());
    const char *path = util_scratch_path(name);
    if (util_write_file(path, b->p, b->len) != 0)
        return HYDRA_ERR_IO;
    hydra_model_params p = hydra_model_default_params();
    p.path = path;
    p.use_mmap = use_mmap;
    hydra_status st = hydra_model_open(m, &p);
    unlink(path); /* a mapping outlives the name; a read copy never needed it */
    return st;
}
