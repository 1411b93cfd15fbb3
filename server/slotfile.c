/*
 * slotfile.c — a slot's cache saved to a file and read back.
 *
 * Format, version 1, little-endian:
 *   0   8 bytes  magic "HYDRASLT"
 *   8   u32      version (1)
 *   12  u32      reserved, 0
 *   16  u64      the model's fingerprint (engine_model_hash)
 *   24  u64      n: tokens
 *   32  n x i32  the tokens the slot's KV cache held, in order
 *   ..  u64      XXH64 (seed 0) of every byte before it
 * A restored slot evaluates the tokens again (one prefill), so the file
 * depends on the model only through the fingerprint, not on the KV layout.
 * Files are written to "<path>.tmp" and renamed, so a reader never sees a
 * half-written file.
 */
#include "slot.h"

#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char MAGIC[8] = {'H', 'Y', 'D', 'R', 'A', 'S', 'L', 'T'};
enum { VERSION = 1, HEADER = 32, TRAILER = 8 };

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

hydra_status slotfile_save(const char *path, uint64_t model_hash, const hydra_token *tokens, size_t n,
                           long long *bytes)
{
    const size_t size = HEADER + 4 * n + TRAILER;
    uint8_t *buf = malloc(size);
    if (buf == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "slot file of %zu bytes", size);
    memcpy(buf, MAGIC, sizeof MAGIC);
    put_u32(buf + 8, VERSION);
    put_u32(buf + 12, 0);
    put_u64(buf + 16, model_hash);
    put_u64(buf + 24, n);
    for (size_t i = 0; i < n; i++)
        put_u32(buf + HEADER + 4 * i, (uint32_t)tokens[i]);
    put_u64(buf + size - TRAILER, XXH64(buf, size - TRAILER, 0));

    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f != NULL && fwrite(buf, 1, size, f) == size;
    ok = f != NULL && fclose(f) == 0 && ok;
    free(buf);
    if (!ok || rename(tmp, path) != 0) {
        const int err = errno;
        remove(tmp);
        return hydra_fail(HYDRA_ERR_IO, "cannot write the slot file: %s", strerror(err));
    }
    *bytes = (long long)size;
    return HYDRA_OK;
}

static hydra_status read_whole(const char *path, uint8_t **data, size_t *size, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return errno == ENOENT ? hydra_fail(HYDRA_ERR_NOT_FOUND, "no such slot file")
                               : hydra_fail(HYDRA_ERR_IO, "cannot open the slot file: %s", strerror(errno));
    uint8_t *buf = malloc(max + 1);
    size_t got = buf ? fread(buf, 1, max + 1, f) : 0;
    fclose(f);
    if (buf == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "slot file buffer of %zu bytes", max + 1);
    if (got > max) {
        free(buf);
        return hydra_fail(HYDRA_ERR_RANGE, "the slot file holds more tokens than a slot's context");
    }
    *data = buf;
    *size = got;
    return HYDRA_OK;
}

static hydra_status check(const uint8_t *buf, size_t size, uint64_t model_hash, int32_t n_vocab, size_t *n)
{
    if (size < HEADER + TRAILER || memcmp(buf, MAGIC, sizeof MAGIC) != 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "not a hydra slot file");
    if (get_u32(buf + 8) != VERSION)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "slot file version %u: this server reads version %d",
                          get_u32(buf + 8), VERSION);
    const uint64_t n_tokens = get_u64(buf + 24);
    if (n_tokens != (size - HEADER - TRAILER) / 4 || (size - HEADER - TRAILER) % 4 != 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "slot file: %llu tokens do not match its %zu bytes",
                          (unsigned long long)n_tokens, size);
    if (XXH64(buf, size - TRAILER, 0) != get_u64(buf + size - TRAILER))
        return hydra_fail(HYDRA_ERR_FORMAT, "slot file: checksum mismatch (damaged)");
    if (get_u64(buf + 16) != model_hash)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "the slot file was saved from another model");
    for (uint64_t i = 0; i < n_tokens; i++) {
        const int32_t tok = (int32_t)get_u32(buf + HEADER + 4 * i);
        if (tok < 0 || tok >= n_vocab)
            return hydra_fail(HYDRA_ERR_FORMAT, "slot file: token %llu is id %d, outside the vocabulary",
                              (unsigned long long)i, (int)tok);
    }
    *n = (size_t)n_tokens;
    return HYDRA_OK;
}

hydra_status slotfile_load(const char *path, uint64_t model_hash, size_t max_tokens, int32_t n_vocab,
                           hydra_token **tokens, size_t *n, long long *bytes)
{
    uint8_t *buf = NULL;
    size_t size = 0;
    hydra_status st = read_whole(path, &buf, &size, HEADER + 4 * max_tokens + TRAILER);
    if (st != HYDRA_OK)
        return st;
    st = check(buf, size, model_hash, n_vocab, n);
    hydra_token *out = st == HYDRA_OK ? malloc(sizeof *out * (*n + 1)) : NULL;
    if (st == HYDRA_OK && out == NULL)
        st = hydra_fail(HYDRA_ERR_NOMEM, "%zu tokens", *n);
    if (st == HYDRA_OK) {
        for (size_t i = 0; i < *n; i++)
            out[i] = (hydra_token)get_u32(buf + HEADER + 4 * i);
        *tokens = out;
        *bytes = (long long)size;
    }
    free(buf);
    return st;
}
