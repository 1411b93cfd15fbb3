/*
 * test_heap.c — src/heap.h: items come out in the order's sequence, ties
 * broken as the order says, across growth and after emptying.
 */
#include "heap.h"

#include "test.h"

#include <stdint.h>

typedef struct item {
    uint32_t key;
    uint32_t seq; /* order of pushing, for ties */
} item;

static bool item_before(const void *a_, const void *b_)
{
    const item *a = a_, *b = b_;
    return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static const heap_order by_key = {sizeof(item), item_before, "test: items"};

/* 1000 keys from a small range (many ties), more than the first room of
 * 256, so the heap grows twice; they must pop as a stable sort. */
TEST(heap_pops_in_order_across_growth)
{
    enum { N = 1000, KEYS = 37 };
    uint32_t count[KEYS] = {0};
    heap h = {0};
    for (uint32_t i = 0; i < N; i++) {
        item it = {(i * 7919u) % KEYS, i};
        count[it.key]++;
        CHECK_OK(heap_push(&h, &it, &by_key));
    }
    CHECK_EQ_INT(h.n, N);
    item prev = {0, 0};
    for (uint32_t i = 0; i < N; i++) {
        item it;
        heap_pop(&h, &it, &by_key);
        if (i > 0 && !item_before(&prev, &it)) {
            heap_free(&h);
            FAIL("pop %u: (%u, %u) came after (%u, %u)", i, it.key, it.seq, prev.key, prev.seq);
        }
        count[it.key]--;
        prev = it;
    }
    CHECK_EQ_INT(h.n, 0);
    heap_free(&h);
    for (uint32_t k = 0; k < KEYS; k++)
        CHECK_EQ_INT(count[k], 0);
}

/* The tokenizers empty the heap between pieces by setting n = 0. */
TEST(heap_reuses_its_room_after_emptying)
{
    heap h = {0};
    item a = {5, 0}, b = {3, 1}, c = {4, 2}, out;
    CHECK_OK(heap_push(&h, &a, &by_key));
    CHECK_OK(heap_push(&h, &b, &by_key));
    h.n = 0;
    CHECK_OK(heap_push(&h, &c, &by_key));
    CHECK_OK(heap_push(&h, &a, &by_key));
    heap_pop(&h, &out, &by_key);
    CHECK_EQ_INT(out.key, 4);
    heap_pop(&h, &out, &by_key);
    CHECK_EQ_INT(out.key, 5);
    CHECK_EQ_INT(h.n, 0);
    heap_free(&h);
    CHECK(h.items == NULL && h.cap == 0);
}
