/*
 * test_cuda_multi.c — a session split over two GPUs (docs/MULTIGPU.md)
 * against llama.cpp's logits (../shared/ref) and against the same model on
 * one GPU: the 200-token prompt in one batch and token by token reach the
 * reference's KL and top-1 bars, and the greedy continuation equals the
 * one-GPU session's token for token (hybrid: the KL bars only, its misses
 * computed on the CPU and its slab admissions per device); -sm layer and
 * -sm tensor (heads, FFN columns and experts spread, one all-reduce per
 * sublayer).  Also: -ts shares and --main-gpu, the
 * hybrid slab spread over both devices (layer split: each part its layers'
 * hot experts; tensor split: each part the hot ones among its experts, the
 * CPU pass once on the main part), a split that cannot fit, and
 * closing gives both devices' memory back.
 * Skips with fewer than two CUDA devices.
 */
#include "gpu_test.h"
#include "hydra.h"
#include "refcheck.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE_TWO_GPUS()                                                                                     \
    do {                                                                                                       \
        REQUIRE_GPU();                                                                                         \
        if (gpu_device_count() < 2)                                                                            \
            SKIP("%d CUDA device present, the split needs 2", gpu_device_count());                            \
        REQUIRE_SHARED();                                                                                      \
    } while (0)

typedef struct split_cfg {
    hydra_split_mode mode;
    float ts[2];
    int main_gpu;
    bool hybrid;
    const char *desc;
    bool kl_only; /* the KL bars only, not the greedy ids (hybrid: misses on the CPU) */
    uint64_t budget; /* --vram-budget per device; 0: none (hybrid: a 50% slab) */
} split_cfg;

static hydra_status open_session(hydra_model *m, const split_cfg *c, hydra_session **s)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 512;
    p.backend = HYDRA_BACKEND_CUDA;
    if (c != NULL) {
        p.split_mode = c->mode;
        p.tensor_split[0] = c->ts[0];
        p.tensor_split[1] = c->ts[1];
        p.main_gpu = c->main_gpu;
        if (c->hybrid) {
            p.hybrid = HYDRA_HYBRID_CUDA;
            p.resident_fraction = 0.5;
        }
        p.vram_budget = c->budget;
    }
    return hydra_session_create(s, m, &p);
}

/* The prompt's rows (one batch, then token by token) and the greedy ids.
 * The greedy run continues the prompt evaluated in one batch, as the
 * reference's did (llama.cpp's prompt batch, ../shared/ref/README.md) and
 * as test_cuda_model.c's: after the token-by-token prompt instead,
 * qwen3moe-kq-q4_k_m's token 6 flips on one GPU already (a near-tie
 * between the decode and the prefill kernels' rounding). */
typedef struct run_out {
    float *batch, *tbt;
    int32_t greedy[REF_GREEDY];
} run_out;

static hydra_status run(hydra_model *m, const split_cfg *c, const ref_case *r, run_out *o)
{
    hydra_session *s = NULL;
    hydra_status st = open_session(m, c, &s);
    if (st == HYDRA_OK)
        st = ref_run_greedy(s, r, o->batch, o->greedy);
    hydra_session_clear(s);
    for (int i = 0; i < REF_PROMPT && st == HYDRA_OK; i++)
        st = hydra_session_eval(s, r->prompt + i, 1, o->tbt + (size_t)i * r->n_vocab);
    hydra_session_free(s);
    return st;
}

static void run_model(test_ctx *t_, const char *name, const split_cfg *cfgs, int n_cfg)
{
    REQUIRE_TWO_GPUS();
    ref_case r;
    float *ref = NULL;
    char why_ref[600];
    if (!ref_load_with_logits(name, &r, &ref, why_ref, sizeof why_ref))
        FAIL("%s", why_ref);
    const size_t rows = (size_t)REF_PROMPT * (size_t)r.n_vocab;
    run_out one = {malloc(sizeof(float) * rows), malloc(sizeof(float) * rows), {0}};
    run_out two = {malloc(sizeof(float) * rows), malloc(sizeof(float) * rows), {0}};
    hydra_model *m = NULL;
    hydra_status st = ref && one.batch && one.tbt && two.batch && two.tbt ? util_open_shared_model(name, &m) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = run(m, NULL, &r, &one);
    char why[700] = "";
    for (int i = 0; i < n_cfg && st == HYDRA_OK && why[0] == '\0'; i++) {
        st = run(m, &cfgs[i], &r, &two);
        if (st != HYDRA_OK)
            break;
        const ref_score b = ref_score_rows(ref, two.batch, REF_PROMPT, r.n_vocab);
        const ref_score tb = ref_score_rows(ref, two.tbt, REF_PROMPT, r.n_vocab);
        const ref_score vs1 = ref_score_rows(one.tbt, two.tbt, REF_PROMPT, r.n_vocab);
        const int same = ref_same_prefix(one.greedy, two.greedy, REF_GREEDY);
        const int as_ref = ref_same_prefix(r.greedy, two.greedy, REF_GREEDY);
        printf("  %-20s %-26s batch KL %.2e top1 %.3f | tokenwise KL %.2e top1 %.3f | vs 1 GPU KL %.2e | greedy "
               "same as 1 GPU %d/%d, as llama.cpp %d (bar %d)\n", name, cfgs[i].desc, b.kl, b.top1, tb.kl, tb.top1,
               vs1.kl, same, REF_GREEDY, as_ref, r.min_greedy_match);
        if (!ref_passes(&r, b) || !ref_passes(&r, tb) || !ref_passes(&r, vs1))
            snprintf(why, sizeof why, "%s %s: KL %.3g / %.3g / vs one GPU %.3g (max %.3g)", name, cfgs[i].desc, b.kl,
                     tb.kl, vs1.kl, r.max_kl_mean);
        else if (cfgs[i].hybrid || cfgs[i].kl_only) /* hybrid: misses on the CPU, the KL bars only */
            continue;
        else if (same < REF_GREEDY)
            snprintf(why, sizeof why, "%s %s: greedy differs from one GPU at token %d", name, cfgs[i].desc, same);
        else if (as_ref < r.min_greedy_match)
            snprintf(why, sizeof why, "%s %s: greedy matches llama.cpp's for %d tokens, the bar is %d", name,
                     cfgs[i].desc, as_ref, r.min_greedy_match);
    }
    if (st != HYDRA_OK)
        snprintf(why, sizeof why, "%s: %s: %s", name, hydra_strerror(st), hydra_last_error());
    hydra_model_close(m);
    free(ref);
    free(one.batch);
    free(one.tbt);
    free(two.batch);
    free(two.tbt);
    if (st == HYDRA_ERR_UNSUPPORTED)
        SKIP("%s", why);
    if (why[0] != '\0')
        FAIL("%s", why);
}

static const split_cfg layer_cfgs[] = {
    {HYDRA_SPLIT_LAYER, {0, 0}, 0, false, "-sm layer", false, 0},
    {HYDRA_SPLIT_LAYER, {3, 1}, 1, false, "-sm layer -ts 3,1 -mg 1", false, 0},
};

/* One model under both configurations of a split mode. */
#define MULTI_TEST(mode, id, file)                                                                             \
    TEST(cuda_multi_##mode##_##id)                                                                             \
    {                                                                                                          \
        run_model(TEST_CTX, file, mode##_cfgs, 2);                                                             \
    }

MULTI_TEST(layer, qwen3moe_kq_q4_k_m, "qwen3moe-kq-q4_k_m")
MULTI_TEST(layer, qwen3moe_tiny_q8_0, "qwen3moe-tiny-q8_0")
MULTI_TEST(layer, mixtral_tiny_q4_0, "mixtral-tiny-q4_0")
MULTI_TEST(layer, qwen2moe_tiny_q8_0, "qwen2moe-tiny-q8_0")
MULTI_TEST(layer, deepseek2_tiny_q8_0, "deepseek2-tiny-q8_0")
MULTI_TEST(layer, gptoss_tiny_mxfp4, "gptoss-tiny-mxfp4")

TEST(cuda_multi_layer_hybrid_slab)
{
    static const split_cfg c[] = {{HYDRA_SPLIT_LAYER, {0, 0}, 0, true, "-sm layer, hybrid 50%", false, 0}};
    run_model(TEST_CTX, "qwen3moe-kq-q4_k_m", c, 1);
}

/* -sm tensor: partial sums in another order than one GPU's, so the KL
 * bars against one GPU and llama.cpp; the greedy ids equal one GPU's and
 * match llama.cpp's for tolerances.json's min_greedy_match.  Every shared
 * model (deepseek2's latent attention cut by query heads, the latent and
 * its cache on both devices).  The qwen3moe-kq files' attention output
 * is one 256-value block per row (4 heads x 64), so their attention is
 * not split (split_view.c): the main part's, bit for bit one GPU's. */
static const split_cfg tensor_cfgs[] = {
    {HYDRA_SPLIT_TENSOR, {0, 0}, 0, false, "-sm tensor", false, 0},
    {HYDRA_SPLIT_TENSOR, {3, 1}, 1, false, "-sm tensor -ts 3,1 -mg 1", false, 0},
};

MULTI_TEST(tensor, qwen3moe_kq_q4_k_m, "qwen3moe-kq-q4_k_m")
MULTI_TEST(tensor, qwen3moe_kq_iq4_xs, "qwen3moe-kq-iq4_xs")
MULTI_TEST(tensor, qwen3moe_kq_iq2_xxs, "qwen3moe-kq-iq2_xxs")
MULTI_TEST(tensor, qwen3moe_kq_iq3_xxs, "qwen3moe-kq-iq3_xxs")
MULTI_TEST(tensor, qwen3moe_tiny_f32, "qwen3moe-tiny-f32")
MULTI_TEST(tensor, qwen3moe_tiny_q8_0, "qwen3moe-tiny-q8_0")
MULTI_TEST(tensor, mixtral_tiny_f16, "mixtral-tiny-f16")
MULTI_TEST(tensor, mixtral_tiny_q4_0, "mixtral-tiny-q4_0")
MULTI_TEST(tensor, qwen2moe_tiny_f32, "qwen2moe-tiny-f32")
MULTI_TEST(tensor, qwen2moe_tiny_q8_0, "qwen2moe-tiny-q8_0")
MULTI_TEST(tensor, gptoss_tiny_f32, "gptoss-tiny-f32")
MULTI_TEST(tensor, gptoss_tiny_mxfp4, "gptoss-tiny-mxfp4")
MULTI_TEST(tensor, deepseek2_tiny_f32, "deepseek2-tiny-f32")
MULTI_TEST(tensor, deepseek2_tiny_q8_0, "deepseek2-tiny-q8_0")

/* -sm tensor with the hybrid slab (split_slab.c): each part's slab the
 * hot experts among its own, the rest computed once by the main part's
 * CPU pass and added on the main part before the all-reduce.  Misses run
 * on the CPU: the KL bars only (as cuda_multi_layer_hybrid_slab). */
static const split_cfg tensor_hybrid_cfgs[] = {
    {HYDRA_SPLIT_TENSOR, {0, 0}, 0, true, "-sm tensor, hybrid 50%", true, 0},
    {HYDRA_SPLIT_TENSOR, {3, 1}, 1, true, "-sm tensor -ts 3,1 -mg 1, hy 50%", true, 0},
};

MULTI_TEST(tensor_hybrid, qwen3moe_tiny_q8_0, "qwen3moe-tiny-q8_0")
MULTI_TEST(tensor_hybrid, mixtral_tiny_q4_0, "mixtral-tiny-q4_0")
MULTI_TEST(tensor_hybrid, qwen2moe_tiny_q8_0, "qwen2moe-tiny-q8_0")

/* --stats of -sm tensor --hybrid: the slab counts summed over every
 * part's slab (each holds half of its own experts at 50%), so the same
 * count as one GPU's 50% slab; per layer too. */
TEST(cuda_multi_tensor_hybrid_stats_count_every_part)
{
    REQUIRE_TWO_GPUS();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    static const split_cfg one = {HYDRA_SPLIT_NONE, {0, 0}, 0, true, "hybrid 50%", true, 0};
    static const split_cfg two = {HYDRA_SPLIT_TENSOR, {0, 0}, 0, true, "-sm tensor, hybrid 50%", true, 0};
    const split_cfg *cfg[2] = {&one, &two};
    hydra_hybrid_stats hs[2];
    hydra_hybrid_layer_stats ls[2];
    hydra_status st = HYDRA_OK;
    for (int k = 0; k < 2 && st == HYDRA_OK; k++) {
        hydra_session *s = NULL;
        const int32_t prompt[4] = {1, 2, 3, 4};
        st = open_session(m, cfg[k], &s);
        if (st == HYDRA_OK)
            st = hydra_session_eval(s, prompt, 4, NULL);
        if (st == HYDRA_OK)
            st = hydra_session_hybrid_stats(s, &hs[k]);
        if (st == HYDRA_OK)
            st = hydra_session_hybrid_layer_stats(s, 1, &ls[k]);
        hydra_session_free(s);
    }
    hydra_model_close(m);
    CHECK_OK(st);
    printf("  resident: one GPU %llu in %llu slots, -sm tensor %llu in %llu slots (layer 1: %d / %d, %d / %d)\n",
           (unsigned long long)hs[0].n_resident, (unsigned long long)hs[0].n_slots,
           (unsigned long long)hs[1].n_resident, (unsigned long long)hs[1].n_slots, (int)ls[0].n_resident,
           (int)ls[0].n_slots, (int)ls[1].n_resident, (int)ls[1].n_slots);
    /* slots: 50% of each part's own = one GPU's 50% (the main part's alone
     * would be half); residents move with admissions, so only bounded */
    CHECK_EQ_U64(hs[1].n_slots, hs[0].n_slots);
    CHECK_EQ_INT(ls[1].n_slots, ls[0].n_slots);
    CHECK(hs[1].n_resident > 0 && hs[1].n_resident <= hs[1].n_slots);
    CHECK(ls[1].n_resident <= ls[1].n_slots);
}

/* The smallest --vram-budget (in steps of 1/8) under which -sm tensor
 * --hybrid opens: each part's slab is what is left after its share of the
 * rest, so a few slots at most (and at most every expert at 4x it). */
static hydra_status smallest_budget(hydra_model *m, uint64_t *budget)
{
    for (uint64_t b = 1 << 20; b < (1ull << 34); b += b / 8) {
        hydra_session *s = NULL;
        const split_cfg c = {HYDRA_SPLIT_TENSOR, {0, 0}, 0, true, "", true, b};
        const hydra_status st = open_session(m, &c, &s);
        hydra_session_free(s);
        if (st != HYDRA_ERR_RANGE) {
            *budget = b;
            return st;
        }
    }
    return HYDRA_ERR_RANGE;
}

/* Per-device budgets: the slab planned per part (avail - need) instead of
 * a fraction; the smallest budget that opens, then four times it. */
TEST(cuda_multi_tensor_hybrid_budget_qwen3moe_tiny_q8_0)
{
    REQUIRE_TWO_GPUS();
    hydra_model *m = NULL;
    uint64_t b = 0;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    const hydra_status st = smallest_budget(m, &b);
    hydra_model_close(m);
    CHECK_OK(st);
    printf("  smallest -sm tensor --hybrid budget: %.2f MiB per device\n", (double)b / 1048576.0);
    const split_cfg c[] = {
        {HYDRA_SPLIT_TENSOR, {0, 0}, 0, true, "-sm tensor, budget min", true, b},
        {HYDRA_SPLIT_TENSOR, {3, 1}, 1, true, "-sm tensor -ts 3,1, budget 4x", true, 4 * b},
    };
    run_model(TEST_CTX, "qwen3moe-tiny-q8_0", c, 2);
}

/* What -sm tensor does not split yet says so: the hybrid slab of a model
 * with per-expert biases. */
TEST(cuda_multi_tensor_refusals)
{
    REQUIRE_TWO_GPUS();
    static const struct {
        const char *model;
        bool hybrid;
        const char *says;
    } cases[] = {{"gptoss-tiny-mxfp4", true, "per-expert biases"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hydra_model *m = NULL;
        hydra_session *s = NULL;
        CHECK_OK(util_open_shared_model(cases[i].model, &m));
        const split_cfg c = {HYDRA_SPLIT_TENSOR, {0, 0}, 0, cases[i].hybrid, "tensor", false, 0};
        CHECK(open_session(m, &c, &s) != HYDRA_OK);
        CHECK(strstr(hydra_last_error(), cases[i].says) != NULL);
        hydra_session_free(s);
        hydra_model_close(m);
    }
}

/* NCCL (loaded at run time), and the peer sum of decode-sized rows, sum
 * across both devices exactly, eagerly and from captured graphs. */
static void allreduce_exact(test_ctx *t_, size_t count, bool peer)
{
    REQUIRE_TWO_GPUS();
    double err = -1;
    const hydra_status st = gpu_multi_allreduce_check(2, count, peer, &err);
    if (st == HYDRA_ERR_UNSUPPORTED)
        SKIP("%s", hydra_last_error());
    CHECK_OK(st);
    CHECK(err == 0.0);
}

TEST(cuda_multi_nccl_allreduce)
{
    allreduce_exact(TEST_CTX, 1 << 20, false);
}

TEST(cuda_multi_peer_allreduce)
{
    allreduce_exact(TEST_CTX, 8 * 2048, true); /* 8 tokens of 2048 */
}

TEST(cuda_multi_cannot_fit_says_the_numbers)
{
    REQUIRE_TWO_GPUS();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-kq-q4_k_m", &m));
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 512;
    p.backend = HYDRA_BACKEND_CUDA;
    p.split_mode = HYDRA_SPLIT_LAYER;
    p.vram_budget = 1 << 20; /* 1 MiB per device */
    hydra_session *s = NULL;
    const hydra_status st = hydra_session_create(&s, m, &p);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", hydra_last_error());
    hydra_session_free(s);
    hydra_model_close(m);
    CHECK_EQ_INT(st, HYDRA_ERR_RANGE);
    CHECK(strstr(msg, "needs") != NULL && strstr(msg, "GiB") != NULL);
}

/* Closing a split session gives back everything it took on both devices. */
TEST(cuda_multi_close_returns_memory)
{
    REQUIRE_TWO_GPUS();
    uint64_t start[2] = {0}, total = 0;
    for (int cycle = 0; cycle <= 7; cycle++) {
        hydra_model *m = NULL;
        hydra_session *s = NULL;
        CHECK_OK(util_open_shared_model("qwen3moe-kq-q4_k_m", &m));
        /* layer, layer hybrid, tensor, tensor hybrid */
        const hydra_split_mode mode = cycle % 4 >= 2 ? HYDRA_SPLIT_TENSOR : HYDRA_SPLIT_LAYER;
        const split_cfg c = {mode, {0, 0}, 0, cycle % 2 == 1, "split", false, 0};
        CHECK_OK(open_session(m, &c, &s));
        const int32_t prompt[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        CHECK_OK(hydra_session_eval(s, prompt, 12, NULL));
        CHECK_OK(hydra_session_decode(s, 5));
        hydra_session_free(s);
        hydra_model_close(m);
        CHECK_NO_GPU_MEMORY_HELD(cycle);
        for (int d = 0; d < 2; d++) {
            uint64_t free_now = 0;
            CHECK_OK(gpu_mem_device_of(d, &free_now, &total));
            if (cycle <= 3) /* after a cycle of each kind: the kernels' modules (and NCCL) are loaded */
                start[d] = free_now;
            else if (free_now < start[d])
                FAIL("cycle %d: device %d free memory %llu, after the first cycle %llu", cycle, d,
                     (unsigned long long)free_now, (unsigned long long)start[d]);
        }
    }
}
