/*
 * kv_state.c — a KV cache's contents as a byte stream and back (kv_state.h).
 */
#include "kv_state.h"

#include "byteorder.h"
#include "error.h"

#include <string.h>

static const char MAGIC[8] = {'H', 'Y', 'D', 'R', 'A', 'K', 'V', '\0'};
enum { VERSION = 1, HEADER = 56, LAYER_HEADER = 16 };
/* No real cache comes near this many positions; it bounds the arithmetic
 * on a hostile stream's numbers. */
#define MAX_POSITIONS ((uint64_t)1 << 40)

static bool is_ring(const kv_cache *kv, const kv_layer *l)
{
    return l->n_slots < kv->n_ctx;
}

/* The first position a layer stores: every one for a full layer, what a
 * ring still holds for a sliding one (never past n_past). */
static int64_t first_stored(const kv_cache *kv, const kv_layer *l, int64_t n_past)
{
    if (!is_ring(kv, l))
        return 0;
    const int64_t oldest = kv->n_written - l->n_slots > 0 ? kv->n_written - l->n_slots : 0;
    return oldest < n_past ? oldest : n_past;
}

uint64_t kv_state_size(const kv_cache *kv, int64_t n_past)
{
    uint64_t bytes = HEADER;
    for (uint32_t i = 0; i < kv->n_layer; i++) {
        const int64_t n = n_past - first_stored(kv, &kv->layer[i], n_past);
        bytes += LAYER_HEADER + (uint64_t)n * (kv->k_row_bytes + kv->v_row_bytes);
    }
    return bytes;
}

/* Rows of positions [first, end) are consecutive slots of a ring except
 * where it wraps: at most two runs. */
static int64_t run_rows(int64_t pos, int64_t end, int64_t n_slots)
{
    const int64_t to_wrap = n_slots - pos % n_slots;
    return end - pos < to_wrap ? end - pos : to_wrap;
}

static bool write_rows(const uint8_t *base, size_t row_bytes, int64_t n_slots, int64_t first, int64_t end,
                       hydra_state_write_fn write, void *user)
{
    for (int64_t pos = first, n; row_bytes > 0 && pos < end; pos += n) {
        n = run_rows(pos, end, n_slots);
        if (!write(user, base + (size_t)(pos % n_slots) * row_bytes, (size_t)n * row_bytes))
            return false;
    }
    return true;
}

static bool read_rows(uint8_t *base, size_t row_bytes, int64_t n_slots, int64_t first, int64_t end,
                      hydra_state_read_fn read, void *user)
{
    for (int64_t pos = first, n; row_bytes > 0 && pos < end; pos += n) {
        n = run_rows(pos, end, n_slots);
        if (!read(user, base + (size_t)(pos % n_slots) * row_bytes, (size_t)n * row_bytes))
            return false;
    }
    return true;
}

hydra_status kv_state_write(const kv_cache *kv, int64_t n_past, hydra_state_write_fn write, void *user)
{
    if (!kv_can_resume(kv, n_past))
        return hydra_fail(HYDRA_ERR_RANGE, "saving %lld positions: a sliding-window layer no longer holds them",
                          (long long)n_past);
    uint8_t h[HEADER];
    memcpy(h, MAGIC, sizeof MAGIC);
    put_u32(h + 8, VERSION);
    put_u32(h + 12, kv->type);
    put_u32(h + 16, kv->n_layer);
    put_u32(h + 20, 0);
    put_u64(h + 24, (uint64_t)n_past);
    put_u64(h + 32, (uint64_t)kv->n_written);
    put_u64(h + 40, kv->k_row_bytes);
    put_u64(h + 48, kv->v_row_bytes);
    bool ok = write(user, h, sizeof h);
    for (uint32_t i = 0; i < kv->n_layer && ok; i++) {
        const kv_layer *l = &kv->layer[i];
        const int64_t first = first_stored(kv, l, n_past);
        uint8_t lh[LAYER_HEADER];
        put_u64(lh, is_ring(kv, l) ? (uint64_t)l->n_slots : 0);
        put_u64(lh + 8, (uint64_t)first);
        ok = write(user, lh, sizeof lh) && write_rows(l->k, kv->k_row_bytes, l->n_slots, first, n_past, write, user) &&
             write_rows(l->v, kv->v_row_bytes, l->n_slots, first, n_past, write, user);
    }
    return ok ? HYDRA_OK : hydra_fail(HYDRA_ERR_IO, "saving the KV cache: the writer refused the bytes");
}

static hydra_status check_header(const kv_cache *kv, const uint8_t *h, int64_t *n_past, int64_t *n_written)
{
    if (memcmp(h, MAGIC, sizeof MAGIC) != 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "not a hydra KV cache stream");
    if (get_u32(h + 8) != VERSION)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "KV cache stream version %u: this build reads version %d",
                          get_u32(h + 8), VERSION);
    if (get_u32(h + 12) != kv->type || get_u32(h + 16) != kv->n_layer || get_u64(h + 40) != kv->k_row_bytes ||
        get_u64(h + 48) != kv->v_row_bytes)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "KV cache stream of type %u, %u layers, rows of %llu + %llu bytes; "
                          "this session's: type %u, %u layers, %zu + %zu", get_u32(h + 12), get_u32(h + 16),
                          (unsigned long long)get_u64(h + 40), (unsigned long long)get_u64(h + 48), kv->type,
                          kv->n_layer, kv->k_row_bytes, kv->v_row_bytes);
    const uint64_t past = get_u64(h + 24), written = get_u64(h + 32);
    if (past > (uint64_t)kv->n_ctx || written < past || written > MAX_POSITIONS)
        return hydra_fail(HYDRA_ERR_RANGE, "KV cache stream of %llu positions (%llu written) into a context of %lld",
                          (unsigned long long)past, (unsigned long long)written, (long long)kv->n_ctx);
    *n_past = (int64_t)past;
    *n_written = (int64_t)written;
    return HYDRA_OK;
}

/* A layer's header must describe what this cache's layer would store. */
static hydra_status check_layer(const kv_cache *kv, uint32_t i, const uint8_t *lh, int64_t n_past)
{
    const kv_layer *l = &kv->layer[i];
    const uint64_t slots = get_u64(lh), first = get_u64(lh + 8);
    if (slots != (is_ring(kv, l) ? (uint64_t)l->n_slots : 0))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "KV cache stream layer %u: a ring of %llu positions where this "
                          "session's holds %lld (another context or batch size)", i, (unsigned long long)slots,
                          (long long)(is_ring(kv, l) ? l->n_slots : 0));
    if (first != (uint64_t)first_stored(kv, l, n_past))
        return hydra_fail(HYDRA_ERR_FORMAT, "KV cache stream layer %u: first position %llu, expected %lld", i,
                          (unsigned long long)first, (long long)first_stored(kv, l, n_past));
    return HYDRA_OK;
}

hydra_status kv_state_read(kv_cache *kv, hydra_state_read_fn read, void *user, int64_t *n_past)
{
    uint8_t h[HEADER];
    if (!read(user, h, sizeof h))
        return hydra_fail(HYDRA_ERR_FORMAT, "KV cache stream: cut short in its header");
    int64_t past = 0, written = 0;
    hydra_status st = check_header(kv, h, &past, &written);
    if (st != HYDRA_OK)
        return st;
    kv->n_written = written; /* first_stored reads it: the stream's rings */
    for (uint32_t i = 0; i < kv->n_layer; i++) {
        kv_layer *l = &kv->layer[i];
        uint8_t lh[LAYER_HEADER];
        if (!read(user, lh, sizeof lh))
            return hydra_fail(HYDRA_ERR_FORMAT, "KV cache stream: cut short at layer %u", i);
        if ((st = check_layer(kv, i, lh, past)) != HYDRA_OK)
            return st;
        const int64_t first = (int64_t)get_u64(lh + 8);
        if (!read_rows(l->k, kv->k_row_bytes, l->n_slots, first, past, read, user) ||
            !read_rows(l->v, kv->v_row_bytes, l->n_slots, first, past, read, user))
            return hydra_fail(HYDRA_ERR_FORMAT, "KV cache stream: cut short in layer %u's rows", i);
    }
    *n_past = past;
    return HYDRA_OK;
}
