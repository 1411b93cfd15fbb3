/*
 * test_split.c — the multi-GPU partition (src/split.h) without a GPU:
 * shares by -ts ratio, uneven layer counts, the main GPU's place, the
 * message of a split that cannot fit, tensor-split units, and the split
 * state cache (hits, evictions, generation).
 */
#include "test.h"
#include "util.h"

#include "error.h"
#include "split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GIB = 1 << 30 };

/* A model of n_layer layers of 1 GiB each, 0.5 GiB embedding and head. */
static split_model toy(int n_layer, uint64_t *lb)
{
    for (int l = 0; l < n_layer; l++)
        lb[l] = (uint64_t)GIB;
    return (split_model){.n_layer = n_layer, .layer_bytes = lb, .embed_bytes = GIB / 2, .head_bytes = GIB / 2,
                         .scratch_bytes = 0, .n_head_kv = 4, .n_ff = 6144, .ff_granule = 256, .n_expert = 128};
}

TEST(split_shares_follow_ratios)
{
    int64_t b[4];
    split_shares(48, 1, (const double[]){3, 1}, 2, b);
    CHECK_EQ_INT(b[0], 0);
    CHECK_EQ_INT(b[1], 36);
    CHECK_EQ_INT(b[2], 48);
    split_shares(5, 1, (const double[]){1, 1, 1}, 3, b); /* 1.67 -> 2, 3.33 -> 3 */
    CHECK_EQ_INT(b[1], 2);
    CHECK_EQ_INT(b[2], 3);
    CHECK_EQ_INT(b[3], 5);
    split_shares(6144, 256, (const double[]){1, 2}, 2, b); /* 24 granules: 8 and 16 */
    CHECK_EQ_INT(b[1], 2048);
    CHECK_EQ_INT(b[2], 6144);
    split_shares(10, 1, (const double[]){0, 0}, 2, b); /* all zero: equal */
    CHECK_EQ_INT(b[1], 5);
}

TEST(split_layer_uneven_and_main_gpu)
{
    uint64_t lb[47];
    const split_model m = toy(47, lb);
    const uint64_t avail[2] = {64ull * GIB, 64ull * GIB};
    split_plan p;
    split_request r = {.mode = SPLIT_LAYER, .n_dev = 2, .avail = avail, .main_gpu = 1};
    CHECK_OK(split_plan_make(&p, &m, &r));
    CHECK_EQ_INT(p.n_part, 2);
    CHECK_EQ_INT(p.part[0].device, 0);
    CHECK_EQ_INT(p.part[0].layer0, 0);
    CHECK_EQ_INT(p.part[0].layer1, 24); /* 23.5 rounds up */
    CHECK_EQ_INT(p.part[1].layer0, 24);
    CHECK_EQ_INT(p.part[1].layer1, 47);
    CHECK(p.part[0].embed && !p.part[0].head && p.part[1].head && !p.part[1].embed);
    CHECK_EQ_INT(p.part[0].need, 24ull * GIB + GIB / 2);
    /* --main-gpu 0: device 0 runs last and holds the head */
    r.main_gpu = 0;
    CHECK_OK(split_plan_make(&p, &m, &r));
    CHECK_EQ_INT(p.part[0].device, 1);
    CHECK_EQ_INT(p.part[1].device, 0);
    CHECK(p.part[1].head && p.part[0].embed);
    /* -ts 3,1 with the main GPU 1: device 0 takes 3/4 of the layers */
    const float ts[2] = {3, 1};
    r = (split_request){.mode = SPLIT_LAYER, .n_dev = 2, .avail = avail, .ratios = ts, .main_gpu = 1};
    CHECK_OK(split_plan_make(&p, &m, &r));
    CHECK_EQ_INT(p.part[0].layer1, 35); /* 35.25 */
    /* -ts 1,0 with the main GPU 0: one part */
    const float one[2] = {1, 0};
    r = (split_request){.mode = SPLIT_LAYER, .n_dev = 2, .avail = avail, .ratios = one, .main_gpu = 0};
    CHECK_OK(split_plan_make(&p, &m, &r));
    CHECK_EQ_INT(p.n_part, 1);
    CHECK(p.part[0].embed && p.part[0].head && p.part[0].layer1 == 47);
    /* the main GPU with a zero share cannot hold the head */
    r.main_gpu = 1;
    CHECK_EQ_INT(split_plan_make(&p, &m, &r), HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(hydra_last_error(), "main GPU 1") != NULL);
}

TEST(split_ratios_default_to_free_memory)
{
    uint64_t lb[40];
    const split_model m = toy(40, lb);
    const uint64_t avail[2] = {90ull * GIB, 30ull * GIB};
    split_plan p;
    const split_request r = {.mode = SPLIT_LAYER, .n_dev = 2, .avail = avail, .main_gpu = 1};
    CHECK_OK(split_plan_make(&p, &m, &r));
    CHECK_EQ_INT(p.part[0].layer1, 30);
}

TEST(split_cannot_fit_names_the_numbers)
{
    uint64_t lb[48];
    const split_model m = toy(48, lb);
    const uint64_t avail[2] = {30ull * GIB, 20ull * GIB};
    const float ts[2] = {1, 1};
    split_plan p;
    const split_request r = {.mode = SPLIT_LAYER, .n_dev = 2, .avail = avail, .ratios = ts, .main_gpu = 1};
    CHECK_EQ_INT(split_plan_make(&p, &m, &r), HYDRA_ERR_RANGE);
    const char *msg = hydra_last_error();
    CHECK(strstr(msg, "device 1 needs 24.50 GiB") != NULL);
    CHECK(strstr(msg, "layers 24-47") != NULL);
    CHECK(strstr(msg, "has 20.00 GiB") != NULL);
    const split_request none = {.mode = SPLIT_NONE, .n_dev = 2, .avail = avail, .main_gpu = 0};
    CHECK_EQ_INT(split_plan_make(&p, &m, &none), HYDRA_ERR_RANGE);
    CHECK(strstr(hydra_last_error(), "-sm none: device 0 needs 49.00 GiB") != NULL);
    const split_request bad = {.mode = SPLIT_LAYER, .n_dev = 2, .avail = avail, .main_gpu = 2};
    CHECK_EQ_INT(split_plan_make(&p, &m, &bad), HYDRA_ERR_INVALID_ARG);
}

TEST(split_tensor_units)
{
    uint64_t lb[8];
    const split_model m = toy(8, lb);
    const uint64_t avail[2] = {64ull * GIB, 64ull * GIB};
    const float ts[2] = {3, 1};
    split_plan p;
    const split_request r = {.mode = SPLIT_TENSOR, .n_dev = 2, .avail = avail, .ratios = ts, .main_gpu = 0};
    CHECK_OK(split_plan_make(&p, &m, &r));
    CHECK_EQ_INT(p.n_part, 2);
    CHECK_EQ_INT(p.part[0].head0, 0);
    CHECK_EQ_INT(p.part[0].head1, 3);
    CHECK_EQ_INT(p.part[1].head1, 4);
    CHECK_EQ_INT(p.part[0].ff1 % 256, 0);
    CHECK_EQ_INT(p.part[0].ff1, 4608);
    CHECK_EQ_INT(p.part[0].exp1, 96);
    CHECK_EQ_INT(p.part[1].exp1, 128);
    CHECK(p.part[0].head && !p.part[1].head && p.part[0].embed && p.part[1].embed);
    CHECK_EQ_INT(p.part[1].layer0, 0);
    CHECK_EQ_INT(p.part[1].layer1, 8);
    char buf[512];
    split_plan_describe(&p, buf, sizeof buf);
    CHECK(strstr(buf, "GPU 1: layers 0-7, KV heads 3-3") != NULL);
}

TEST(split_parse_ratios)
{
    float ts[4];
    CHECK_EQ_INT(split_parse_ratios("3,1", ts, 4), 2);
    CHECK(ts[0] == 3.0f && ts[1] == 1.0f);
    CHECK_EQ_INT(split_parse_ratios("1,x", ts, 4), -1);
    CHECK_EQ_INT(split_parse_ratios("1,", ts, 4), -1);
    CHECK_EQ_INT(split_parse_ratios("-1,1", ts, 4), -1);
    CHECK_EQ_INT(split_parse_ratios("1,1,1,1,1", ts, 4), -1);
}

TEST(split_cache_hits_evictions_generation)
{
    uint64_t lb[4];
    const split_model m = toy(4, lb);
    const uint64_t avail[2] = {64ull * GIB, 64ull * GIB};
    split_plan p;
    const split_request r = {.mode = SPLIT_LAYER, .n_dev = 2, .avail = avail, .main_gpu = 1};
    CHECK_OK(split_plan_make(&p, &m, &r));
    split_cache c = {0};
    const split_shape prefill = {512, 1024, 0}, decode = {1, 1024, 0}, verify = {5, 1024, 1};
    const split_state *a = split_cache_get(&c, &p, 2048, &prefill);
    CHECK_EQ_INT(a->boundary_floats, 512 * 2048);
    split_cache_get(&c, &p, 2048, &decode);
    split_cache_get(&c, &p, 2048, &verify);
    for (int i = 0; i < 3; i++) { /* alternating shapes: no rebuild */
        split_cache_get(&c, &p, 2048, &decode);
        split_cache_get(&c, &p, 2048, &prefill);
        split_cache_get(&c, &p, 2048, &verify);
    }
    CHECK_EQ_INT(c.builds, 3);
    CHECK_EQ_INT(c.hits, 9);
    CHECK_EQ_INT(c.evictions, 0);
    /* two more shapes: the least recently used (decode) goes */
    split_cache_get(&c, &p, 2048, &(split_shape){1, 2048, 0});
    split_cache_get(&c, &p, 2048, &(split_shape){1, 4096, 0});
    CHECK_EQ_INT(c.evictions, 1);
    split_cache_get(&c, &p, 2048, &decode);
    CHECK_EQ_INT(c.evictions, 2);
    CHECK_EQ_INT(c.builds, 6);
    /* a generation bump: the next get of a cached shape rebuilds it */
    const uint64_t g0 = c.generation;
    split_cache_bump(&c);
    const split_state *s = split_cache_get(&c, &p, 2048, &decode);
    CHECK_EQ_INT(s->generation, g0 + 1);
    CHECK_EQ_INT(c.builds, 7);
    s = split_cache_get(&c, &p, 2048, &decode);
    CHECK_EQ_INT(c.builds, 7);
}

TEST(split_model_of_shared_model)
{
    REQUIRE_SHARED();
    char path[512];
    snprintf(path, sizeof path, "%s/models/qwen3moe-tiny-q8_0.gguf", test_shared_dir());
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    hydra_model *model = NULL;
    model_weights w;
    CHECK_OK(hydra_model_open(&model, &mp));
    CHECK_OK(weights_bind(&w, model));
    split_model m;
    uint64_t *lb = NULL, *lb_skip = NULL;
    CHECK_OK(split_model_of(&m, &lb, &w, 256, 64, 1, false));
    split_model ms;
    CHECK_OK(split_model_of(&ms, &lb_skip, &w, 256, 64, 1, true));
    CHECK_EQ_INT(m.n_layer, (int)w.hp.n_layer);
    CHECK(lb[0] > lb_skip[0]); /* the routed experts left out */
    CHECK(m.embed_bytes > 0 && m.head_bytes > 0);
    CHECK_EQ_INT(m.n_expert, (int)w.hp.n_expert);
    free(lb);
    free(lb_skip);
    weights_free(&w);
    hydra_model_close(model);
}
