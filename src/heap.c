/*
 * heap.c — the cold half of heap.h: growing and freeing the items.
 */
#include "heap.h"

#include "error.h"

#include <stdlib.h>

hydra_status heap_grow(heap *h, const heap_order *order)
{
    size_t cap = h->cap ? 2 * h->cap : 256;
    unsigned char *items = realloc(h->items, cap * order->item_size);
    if (items == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "%s: out of memory for %zu items", order->what, cap);
    h->items = items;
    h->cap = cap;
    return HYDRA_OK;
}

void heap_free(heap *h)
{
    free(h->items);
    *h = (heap){0};
}
