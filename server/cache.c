/*
 * cache.c — the prompt cache: each slot's KV cache holds the tokens of its
 * last request (prompt and reply), and a new request goes to the idle slot
 * whose tokens share the longest prefix with its own, so only the rest is
 * evaluated.
 *
 * Prefixes are compared a block of CACHE_BLOCK tokens at a time through
 * chained hashes: block i's hash is XXH64 of its tokens seeded with block
 * i-1's hash, so equal hashes at block i mean (up to 64-bit collisions)
 * equal tokens in all blocks up to i, and a slot's longest shared prefix is
 * found by comparing one hash per block.  The match is then confirmed
 * token by token (a collision can never reuse wrong keys and values) and
 * extended into the first block that differs.
 */
#include "slot.h"

#include <string.h>
#include <xxhash.h>

static uint64_t block_hash(const hydra_token *block, uint64_t prev)
{
    return XXH64(block, sizeof *block * CACHE_BLOCK, prev);
}

size_t cache_hashes(const hydra_token *t, size_t n, uint64_t *out)
{
    const size_t n_blocks = n / CACHE_BLOCK;
    uint64_t prev = 0;
    for (size_t b = 0; b < n_blocks; b++)
        prev = out[b] = block_hash(t + b * CACHE_BLOCK, prev);
    return n_blocks;
}

void cache_append(slot *s, const hydra_token *t, size_t n)
{
    memcpy(s->tokens + s->n_tokens, t, sizeof *t * n);
    const size_t from = s->n_tokens / CACHE_BLOCK;
    s->n_tokens += n;
    for (size_t b = from; b < s->n_tokens / CACHE_BLOCK; b++)
        s->hashes[b] = block_hash(s->tokens + b * CACHE_BLOCK, b > 0 ? s->hashes[b - 1] : 0);
}

size_t cache_truncate(slot *s, size_t n)
{
    if (n >= s->n_tokens)
        return s->n_tokens;
    /* A sliding-window model's session cannot always rewind (its rings keep
     * only the window plus one step): then the slot starts over. */
    if (hydra_session_truncate(s->session, (uint32_t)n) != HYDRA_OK) {
        hydra_session_clear(s->session);
        n = 0;
    }
    s->n_tokens = n;
    return n;
}

/* The tokens s's cache shares with prompt[0, n). */
static size_t shared_prefix(const slot *s, const hydra_token *prompt, size_t n, const uint64_t *hashes)
{
    const size_t limit = n < s->n_tokens ? n : s->n_tokens;
    size_t blocks = 0;
    while (blocks < limit / CACHE_BLOCK && s->hashes[blocks] == hashes[blocks])
        blocks++;
    size_t k = blocks * CACHE_BLOCK;
    if (memcmp(s->tokens, prompt, sizeof *prompt * k) != 0)
        k = 0; /* a hash collision: start over, token by token */
    while (k < limit && s->tokens[k] == prompt[k])
        k++;
    return k;
}

slot *cache_choose(slot *slots, int n_slots, const hydra_token *prompt, size_t n, const uint64_t *hashes,
                   size_t *shared)
{
    slot *best = NULL;
    size_t best_shared = 0;
    for (int i = 0; i < n_slots; i++) {
        slot *s = &slots[i];
        if (s->state != SLOT_IDLE)
            continue;
        const size_t k = shared_prefix(s, prompt, n, hashes);
        if (best == NULL || k > best_shared || (k == best_shared && s->last_used < best->last_used)) {
            best = s;
            best_shared = k;
        }
    }
    *shared = best_shared;
    return best;
}
