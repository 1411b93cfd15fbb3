/*
 * heap.h — a growing binary heap of fixed-size items, copied in and out by
 * value; pop returns an item that nothing left in the heap goes before.
 * The tokenizers queue their merge candidates in one (tok_bpe.c,
 * tok_spm.c).  What the items are and how they are ordered is a
 * heap_order, passed to every call:
 *
 *     static const heap_order by_rank = {sizeof(candidate), candidate_before, "tokenize: merge candidates"};
 *     heap q = {0};
 *     heap_push(&q, &c, &by_rank); ... heap_pop(&q, &c, &by_rank); ... heap_free(&q);
 *
 * Push and pop are inline so that, given a static const order, the
 * compiler copies items of a known size and calls `before` directly:
 * SentencePiece encoding is largely heap work, and out of line (a call
 * through the pointer, a memcpy of a variable size) it ran 58% more
 * instructions on the tokenizer's megabyte test (callgrind), inline 2%.
 */
#ifndef HYDRA_HEAP_H
#define HYDRA_HEAP_H

#include "hydra.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct heap_order {
    size_t item_size;
    bool (*before)(const void *a, const void *b); /* a must pop before b: a strict order */
    const char *what;                             /* names the items in an out-of-memory message */
} heap_order;

typedef struct heap {
    unsigned char *items;
    size_t n;   /* items held; setting it to 0 empties the heap and keeps its room */
    size_t cap; /* items there is room for */
} heap;

/* Doubles the room (heap.c); HYDRA_ERR_NOMEM if it cannot. */
hydra_status heap_grow(heap *h, const heap_order *order);

/* Frees the items; the heap can be pushed to again. */
void heap_free(heap *h);

/* Both sifts keep the heap's fields in locals: the items are copied as
 * bytes, which may alias anything, so the compiler would reload fields
 * read through h after every copy. */

/* Adds a copy of *item, moving the hole for it up from the end (item i's
 * parent is (i - 1) / 2). */
static inline hydra_status heap_push(heap *h, const void *item, const heap_order *order)
{
    if (h->n == h->cap) {
        hydra_status st = heap_grow(h, order);
        if (st != HYDRA_OK)
            return st;
    }
    unsigned char *items = h->items;
    const size_t size = order->item_size;
    size_t i = h->n++;
    for (; i > 0 && order->before(item, items + (i - 1) / 2 * size); i = (i - 1) / 2)
        memcpy(items + i * size, items + (i - 1) / 2 * size, size);
    memcpy(items + i * size, item, size);
    return HYDRA_OK;
}

/* Moves the first item into *out; the heap must not be empty.  The last
 * item fills the hole at the top, moved down past children that go before
 * it (item i's children are 2i + 1 and 2i + 2); it stays where it is, just
 * past the shrunk heap, until its place is found: the moves only write
 * below it. */
static inline void heap_pop(heap *h, void *out, const heap_order *order)
{
    unsigned char *items = h->items;
    const size_t size = order->item_size, n = --h->n;
    const unsigned char *last = items + n * size;
    memcpy(out, items, size);
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && order->before(items + (child + 1) * size, items + child * size))
            child++;
        if (!order->before(items + child * size, last))
            break;
        memcpy(items + i * size, items + child * size, size);
        i = child;
    }
    if (n > 0)
        memcpy(items + i * size, last, size);
}

#endif
