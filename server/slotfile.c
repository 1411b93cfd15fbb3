/*
 * slotfile.c — a slot's cache saved to a file and read back.
 *
 * Format, version 2, little-endian:
 *   0   8 bytes  magic "HYDRASLT"
 *   8   u32      version (2)
 *   12  u32      reserved, 0
 *   16  u64      the model's fingerprint (engine_model_hash)
 *   24  u64      n: tokens
 *   32  n x i32  the tokens the slot's KV cache holds, in order
 *   ..  u64      S: bytes of the session's state
 *   ..  S bytes  hydra_session_state_write's stream: the keys and values
 *                of those n positions (src/kv_state.h)
 *   ..  u64      XXH64 (seed 0) of every byte before it
 * A restore checks the whole file's checksum before it touches the slot,
 * then reads the keys and values back: nothing is evaluated.  Version 1
 * (the same without S and the state) is still read: its tokens are
 * evaluated again.  Files are written to "<path>.tmp" and renamed, so a
 * reader never sees a half-written file.
 */
#include "slot.h"

#include "byteorder.h"
#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

static const char MAGIC[8] = {'H', 'Y', 'D', 'R', 'A', 'S', 'L', 'T'};
enum { VERSION_TOKENS = 1, VERSION = 2, HEADER = 32, TRAILER = 8, CHUNK = 1 << 20 };

/* ------------------------------------------------------------ saving */

/* Bytes to the file and to the running checksum. */
typedef struct sink {
    FILE *f;
    XXH64_state_t *hash;
} sink;

static bool sink_write(void *user, const void *data, size_t n)
{
    sink *s = user;
    XXH64_update(s->hash, data, n);
    return fwrite(data, 1, n, s->f) == n;
}

static bool write_body(sink *k, uint64_t model_hash, const hydra_token *tokens, size_t n, const hydra_session *session)
{
    uint8_t h[HEADER], word[8];
    memcpy(h, MAGIC, sizeof MAGIC);
    put_u32(h + 8, VERSION);
    put_u32(h + 12, 0);
    put_u64(h + 16, model_hash);
    put_u64(h + 24, n);
    bool ok = sink_write(k, h, sizeof h);
    for (size_t i = 0; i < n && ok; i++) {
        put_u32(word, (uint32_t)tokens[i]);
        ok = sink_write(k, word, 4);
    }
    put_u64(word, hydra_session_state_size(session));
    ok = ok && sink_write(k, word, 8) && hydra_session_state_write(session, sink_write, k) == HYDRA_OK;
    put_u64(word, XXH64_digest(k->hash));
    return ok && fwrite(word, 1, 8, k->f) == 8;
}

hydra_status slotfile_save(const char *path, uint64_t model_hash, const hydra_token *tokens, size_t n,
                           const hydra_session *session, long long *bytes)
{
    if (hydra_session_n_past(session) != n)
        return hydra_fail(HYDRA_ERR_IO, "the slot holds %zu tokens but its cache %u positions", n,
                          hydra_session_n_past(session));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    XXH64_state_t *hash = XXH64_createState();
    FILE *f = hash != NULL ? fopen(tmp, "wb") : NULL;
    bool ok = f != NULL && XXH64_reset(hash, 0) == XXH_OK;
    sink k = {f, hash};
    ok = ok && write_body(&k, model_hash, tokens, n, session);
    const long long size = f != NULL ? (long long)ftell(f) : 0;
    ok = f != NULL && fclose(f) == 0 && ok;
    XXH64_freeState(hash);
    if (!ok || rename(tmp, path) != 0) {
        const int err = errno;
        remove(tmp);
        return hydra_fail(HYDRA_ERR_IO, "cannot write the slot file: %s", err ? strerror(err) : "out of memory");
    }
    *bytes = size;
    return HYDRA_OK;
}

/* ------------------------------------------------------------ loading */

typedef struct source {
    FILE *f;
    uint64_t left; /* bytes the state may still take */
} source;

static bool source_read(void *user, void *data, size_t n)
{
    source *s = user;
    if (n > s->left)
        return false;
    s->left -= n;
    return fread(data, 1, n, s->f) == n;
}

/* XXH64 of the file's first `len` bytes against the u64 after them. */
static hydra_status check_sum(FILE *f, uint64_t len)
{
    uint8_t *buf = malloc(CHUNK);
    XXH64_state_t *hash = XXH64_createState();
    bool ok = buf != NULL && hash != NULL && XXH64_reset(hash, 0) == XXH_OK && fseek(f, 0, SEEK_SET) == 0;
    for (uint64_t done = 0, n; ok && done < len; done += n) {
        n = len - done < CHUNK ? len - done : CHUNK;
        ok = fread(buf, 1, (size_t)n, f) == n;
        if (ok)
            XXH64_update(hash, buf, (size_t)n);
    }
    uint8_t word[8];
    const bool read = ok && fread(word, 1, 8, f) == 8;
    const bool same = read && XXH64_digest(hash) == get_u64(word);
    free(buf);
    XXH64_freeState(hash);
    if (!read)
        return hydra_fail(HYDRA_ERR_IO, "cannot read the slot file");
    return same ? HYDRA_OK : hydra_fail(HYDRA_ERR_FORMAT, "slot file: checksum mismatch (damaged)");
}

/* The header's promises against the file's size: *state the state's bytes
 * (0 for version 1), *n the tokens. */
static hydra_status check_header(const uint8_t *h, uint64_t size, FILE *f, uint64_t model_hash, size_t max_tokens,
                                 size_t *n, uint64_t *state)
{
    if (size < HEADER + TRAILER || memcmp(h, MAGIC, sizeof MAGIC) != 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "not a hydra slot file");
    const uint32_t version = get_u32(h + 8);
    if (version != VERSION && version != VERSION_TOKENS)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "slot file version %u: this server reads versions %d and %d",
                          version, VERSION_TOKENS, VERSION);
    const uint64_t n_tokens = get_u64(h + 24), tokens_end = HEADER + 4 * (n_tokens < size ? n_tokens : size);
    *state = 0;
    uint8_t word[8];
    if (version == VERSION) {
        if (tokens_end + 8 + TRAILER > size || fseek(f, (long)tokens_end, SEEK_SET) != 0 || fread(word, 1, 8, f) != 8)
            return hydra_fail(HYDRA_ERR_FORMAT, "slot file: %llu tokens do not fit its %llu bytes",
                              (unsigned long long)n_tokens, (unsigned long long)size);
        *state = get_u64(word);
    }
    const uint64_t expected = tokens_end + (version == VERSION ? 8 + *state : 0) + TRAILER;
    if (*state > size || expected != size)
        return hydra_fail(HYDRA_ERR_FORMAT, "slot file: %llu tokens and %llu bytes of state do not match its %llu "
                          "bytes", (unsigned long long)n_tokens, (unsigned long long)*state,
                          (unsigned long long)size);
    hydra_status st = check_sum(f, size - TRAILER);
    if (st != HYDRA_OK)
        return st;
    if (get_u64(h + 16) != model_hash)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "the slot file was saved from another model");
    if (n_tokens > max_tokens)
        return hydra_fail(HYDRA_ERR_RANGE, "the slot file holds %llu tokens, more than a slot's context of %zu",
                          (unsigned long long)n_tokens, max_tokens);
    *n = (size_t)n_tokens;
    return HYDRA_OK;
}

static hydra_status read_tokens(FILE *f, size_t n, int32_t n_vocab, hydra_token *out)
{
    uint8_t word[4];
    if (fseek(f, HEADER, SEEK_SET) != 0)
        return hydra_fail(HYDRA_ERR_IO, "cannot read the slot file");
    for (size_t i = 0; i < n; i++) {
        if (fread(word, 1, 4, f) != 4)
            return hydra_fail(HYDRA_ERR_IO, "cannot read the slot file");
        out[i] = (hydra_token)get_u32(word);
        if (out[i] < 0 || out[i] >= n_vocab)
            return hydra_fail(HYDRA_ERR_FORMAT, "slot file: token %zu is id %d, outside the vocabulary", i,
                              (int)out[i]);
    }
    return HYDRA_OK;
}

/* The state after the tokens into the session, which must then hold
 * exactly the n tokens' positions. */
static hydra_status read_state(FILE *f, size_t n, uint64_t state, hydra_session *session)
{
    source src = {f, state};
    if (fseek(f, (long)(HEADER + 4 * n + 8), SEEK_SET) != 0)
        return hydra_fail(HYDRA_ERR_IO, "cannot read the slot file");
    hydra_status st = hydra_session_state_read(session, source_read, &src);
    const uint32_t n_past = hydra_session_n_past(session);
    if (st == HYDRA_OK && (src.left != 0 || n_past != n)) {
        hydra_session_clear(session);
        st = hydra_fail(HYDRA_ERR_FORMAT, "slot file: its state holds %u positions for %zu tokens", n_past, n);
    }
    return st;
}

static hydra_status load_open(FILE *f, uint64_t size, const slotfile_target *to, slotfile_loaded *out)
{
    uint8_t h[HEADER];
    if (size < HEADER || fread(h, 1, HEADER, f) != HEADER)
        return hydra_fail(HYDRA_ERR_FORMAT, "not a hydra slot file");
    uint64_t state = 0;
    hydra_status st = check_header(h, size, f, to->model_hash, to->max_tokens, &out->n, &state);
    if (st != HYDRA_OK)
        return st;
    out->tokens = malloc(sizeof *out->tokens * (out->n + 1));
    if (out->tokens == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "%zu tokens", out->n);
    st = read_tokens(f, out->n, to->n_vocab, out->tokens);
    if (st == HYDRA_OK && state > 0) {
        st = read_state(f, out->n, state, to->session);
        out->restored = st == HYDRA_OK;
    }
    if (st != HYDRA_OK) {
        free(out->tokens);
        out->tokens = NULL;
    }
    out->bytes = (long long)size;
    return st;
}

hydra_status slotfile_load(const char *path, const slotfile_target *to, slotfile_loaded *out)
{
    *out = (slotfile_loaded){0};
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return errno == ENOENT ? hydra_fail(HYDRA_ERR_NOT_FOUND, "no such slot file")
                               : hydra_fail(HYDRA_ERR_IO, "cannot open the slot file: %s", strerror(errno));
    struct stat info;
    hydra_status st = fstat(fileno(f), &info) == 0 && S_ISREG(info.st_mode)
                          ? load_open(f, (uint64_t)info.st_size, to, out)
                          : hydra_fail(HYDRA_ERR_FORMAT, "the slot file is not a regular file");
    fclose(f);
    return st;
}
