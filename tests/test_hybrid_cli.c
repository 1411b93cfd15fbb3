/*
 * hydra-run's hybrid flags: --info --vram-budget prints the placement plan
 * (its parts and experts per layer; an expected hit rate with a
 * --pin-file profile), a budget below the fixed part fails naming the
 * numbers, a CPU-only build without --vram-budget says it needs one, and
 * --hybrid cpu --stats prints engaged counters after a run.
 */
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

static bool contains(const char *text, const char *part)
{
    return text != NULL && strstr(text, part) != NULL;
}

static const char *model_path(char *buf, size_t len)
{
    snprintf(buf, len, "%s/models/qwen3moe-kq-q4_k_m.gguf", test_shared_dir());
    return buf;
}

/* Runs hydra-run with flags and the shared model; true when it exits 1
 * and stderr names every part (NULL ends the list early); prints what it
 * said otherwise. */
static bool refused_saying(const char *flags, const char *part1, const char *part2, const char *part3)
{
    char path[512], args[1200];
    tool_run r;
    snprintf(args, sizeof args, "%s -m %s", flags, model_path(path, sizeof path));
    if (!util_run_tool(NULL, "hydra-run", args, NULL, &r))
        return false;
    const char *parts[3] = {part1, part2, part3};
    bool ok = r.status == 1;
    for (int i = 0; i < 3 && parts[i] != NULL; i++)
        ok = ok && contains(r.err, parts[i]);
    if (!ok)
        printf("hydra-run %s: status %d\n%s%s", flags, r.status, r.out ? r.out : "", r.err ? r.err : "");
    tool_run_free(&r);
    return ok;
}

TEST(hybrid_cli_info_prints_the_placement_plan)
{
    REQUIRE_SHARED();
    char path[512], args[1200];
    tool_run r;
    snprintf(args, sizeof args, "--info -c 256 --vram-budget 0.0175 -m %s", model_path(path, sizeof path));
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    const bool ok = r.status == 0 && contains(r.out, "architecture:  qwen3moe") && contains(r.out, "placement for") &&
                    contains(r.out, "non-expert weights") && contains(r.out, "KV cache") &&
                    contains(r.out, "expert slab") && contains(r.out, "experts resident") &&
                    contains(r.out, "hit rate: unknown (no profile)");
    if (!ok)
        printf("%s%s", r.out ? r.out : "", r.err ? r.err : "");
    tool_run_free(&r);
    CHECK(ok);
}

TEST(hybrid_cli_info_with_a_profile_prints_the_expected_hit_rate)
{
    REQUIRE_SHARED();
    char path[512], args[1400];
    const char *pins = util_scratch_path("hybrid-cli-pins.txt");
    const char *text = "0 3 40\n0 1 30\n0 2 20\n0 0 10\n1 5 50\n1 6 50\n";
    CHECK(util_write_file(pins, text, strlen(text)) == 0);
    tool_run r;
    snprintf(args, sizeof args, "--info -c 256 --vram-budget 0.0175 --pin-file %s -m %s", pins,
             model_path(path, sizeof path));
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    const bool ok = r.status == 0 && contains(r.out, "expected decode hit rate") &&
                    contains(r.out, "from the profile") && contains(r.out, "of lookups");
    if (!ok)
        printf("%s%s", r.out ? r.out : "", r.err ? r.err : "");
    tool_run_free(&r);
    CHECK(ok);
}

TEST(hybrid_cli_info_budget_too_small_names_the_numbers)
{
    REQUIRE_SHARED();
    CHECK(refused_saying("--info -c 256 --vram-budget 0.001", "cannot hold the non-expert part", "weights 646002",
                         "KV cache 262144"));
}

TEST(hybrid_cli_info_hybrid_without_a_budget_or_device_asks_for_one)
{
    REQUIRE_SHARED();
    if (hydra_cuda_available())
        SKIP("a CUDA device sizes the plan by its free memory");
    CHECK(refused_saying("--info --hybrid cpu", "--vram-budget", NULL, NULL));
}

TEST(hybrid_cli_stats_after_a_split_run)
{
    REQUIRE_SHARED();
    char path[512], args[1200];
    tool_run r;
    snprintf(args, sizeof args, "-c 128 -t 2 -n 6 -s 1 --hybrid cpu --resident 0.5 --stats -p Hello -m %s",
             model_path(path, sizeof path));
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    const bool ok = r.status == 0 && contains(r.err, "hybrid: 8 of 16 experts resident") &&
                    contains(r.err, "decode hit rate") && contains(r.err, "layer 0:") && contains(r.err, "layer 1:");
    if (!ok)
        printf("%s", r.err ? r.err : "");
    tool_run_free(&r);
    CHECK(ok);
}

/* -ngl below the layer count is llama.cpp's partial offload, which hydra
 * refuses with the layer count and the flag that does the job instead. */
TEST(cli_gpu_layers_below_the_layer_count_is_refused_naming_hybrid)
{
    REQUIRE_SHARED();
    CHECK(refused_saying("-ngl 1 -n 2 --prompt-tokens 1,2", "-ngl 1: the model has", "--hybrid cuda", NULL));
}

/* -ngl 99 asks for the whole model in VRAM: without a CUDA device that is
 * an error saying so, not a silent CPU run. */
TEST(cli_gpu_layers_without_a_device_says_so)
{
    REQUIRE_SHARED();
    if (hydra_cuda_available())
        SKIP("a CUDA device is present: -ngl 99 would run");
    CHECK(refused_saying("-ngl 99 -n 2 --prompt-tokens 1,2", "CUDA", NULL, NULL));
}
