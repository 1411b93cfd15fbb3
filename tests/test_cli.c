/*
 * The command-line tools as a user runs them: hydra-run --info on good,
 * missing and corrupt files and with no model at all (the built-in
 * default), and hydra-mkmodel's arguments.  Each tool runs in a child shell
 * with stdout and stderr captured to scratch files.
 */
#include "hydra.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static bool contains(const char *text, const char *what)
{
    return text != NULL && strstr(text, what) != NULL;
}

/* A synthetic model in the scratch folder; its path in `path`. */
static hydra_status scratch_model(const char *preset, const char *name, char *path, size_t len)
{
    synth_params p;
    hydra_status st = synth_preset(preset, &p);
    snprintf(path, len, "%s", util_scratch_path(name));
    return st != HYDRA_OK ? st : synth_write(path, &p);
}

/* An absolute scratch folder (XDG_CACHE_HOME must be absolute). */
static void scratch_dir(const char *name, char *path, size_t len)
{
    char cwd[2048] = ".";
    if (getcwd(cwd, sizeof cwd) == NULL)
        snprintf(cwd, sizeof cwd, ".");
    snprintf(path, len, "%s/%s", cwd, util_scratch_path(name));
    mkdir(path, 0755);
}

/* ------------------------------------------------------------ hydra-run --info */

TEST(cli_info_prints_arch_hparams_and_quant_mix)
{
    char path[4096], args[4200];
    tool_run r;
    CHECK_OK(scratch_model("mixtral-tiny", "cli-llama.gguf", path, sizeof path));
    snprintf(args, sizeof args, "--info -m %s", path);
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    bool ok = contains(r.out, "architecture:  llama") && contains(r.out, "llama.expert_count") &&
              contains(r.out, "quant mix:") && contains(r.out, "Q8_0") && contains(r.out, "F32") &&
              contains(r.out, "parameters:") && contains(r.out, "tokenizer:     gpt2 (pre tekken)");
    int status = r.status;
    if (!ok)
        printf("hydra-run printed:\n%s\n", r.out ? r.out : "");
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    CHECK(ok);
}

TEST(cli_info_verbose_lists_tensors)
{
    char path[4096], args[4200];
    tool_run r;
    CHECK_OK(scratch_model("mixtral-tiny", "cli-llama-v.gguf", path, sizeof path));
    snprintf(args, sizeof args, "--info -v -m %s", path);
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    bool ok = contains(r.out, "blk.1.ffn_down_exps.weight") && contains(r.out, "[128, 128, 8]") &&
              contains(r.out, "tensors:");
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    CHECK(ok);
}

TEST(cli_missing_file_exits_1_with_the_loaders_message)
{
    char path[4096], args[4200];
    tool_run r;
    snprintf(path, sizeof path, "%s", util_scratch_path("no-such-model.gguf"));
    remove(path);
    snprintf(args, sizeof args, "--info -m %s", path);
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    bool ok = contains(r.err, path) && contains(r.err, "hydra-run:") && r.out[0] == '\0';
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 1);
    CHECK(ok);
}

TEST(cli_truncated_file_exits_1_with_the_loaders_message)
{
    char path[4096], args[4200];
    tool_run r;
    size_t n;
    CHECK_OK(scratch_model("tiny", "cli-truncated.gguf", path, sizeof path));
    uint8_t *bytes = util_read_file(path, &n);
    CHECK(bytes != NULL);
    int wrote = util_write_file(path, bytes, n / 2);
    free(bytes);
    CHECK_EQ_INT(wrote, 0);
    snprintf(args, sizeof args, "--info -m %s", path);
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    /* The reader names what is cut short and where ("... at byte N"). */
    bool ok = contains(r.err, hydra_strerror(HYDRA_ERR_FORMAT)) && contains(r.err, "byte");
    int status = r.status;
    if (!ok)
        printf("stderr: %s\n", r.err ? r.err : "");
    tool_run_free(&r);
    CHECK_EQ_INT(status, 1);
    CHECK(ok);
}

TEST(cli_bad_option_exits_1)
{
    tool_run r;
    CHECK(util_run_tool(NULL, "hydra-run", "--no-such-option", NULL, &r));
    bool ok = contains(r.err, "--no-such-option");
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 1);
    CHECK(ok);
}

/* ------------------------------------------------------------ the built-in default */

TEST(cli_default_model_is_written_once_then_reused)
{
    char xdg[4096], env[8400], model[4200];
    tool_run first, second;
    scratch_dir("cli-xdg", xdg, sizeof xdg);
    snprintf(model, sizeof model, "%s/hydra/default-tiny.gguf", xdg);
    remove(model);
    snprintf(env, sizeof env, "env XDG_CACHE_HOME=%s HOME=%s", xdg, xdg);
    CHECK(util_run_tool(env, "hydra-run", "--info", NULL, &first));
    CHECK(util_run_tool(env, "hydra-run", "--info", NULL, &second));
    bool said = contains(first.err, "built-in default") && contains(first.err, model) &&
                contains(first.err, "written") && contains(second.err, "cached");
    bool described = contains(first.out, "architecture:  qwen3moe") && contains(second.out, "qwen3moe");
    int s1 = first.status, s2 = second.status;
    tool_run_free(&first);
    tool_run_free(&second);
    CHECK_EQ_INT(s1, 0);
    CHECK_EQ_INT(s2, 0);
    CHECK(said);
    CHECK(described);
    CHECK(access(model, R_OK) == 0);
}

TEST(cli_default_model_falls_back_to_home_cache)
{
    char home[4096], env[8400], model[4200];
    tool_run r;
    scratch_dir("cli-home", home, sizeof home);
    snprintf(model, sizeof model, "%s/.cache/hydra/default-tiny.gguf", home);
    remove(model);
    snprintf(env, sizeof env, "env -u XDG_CACHE_HOME HOME=%s", home);
    CHECK(util_run_tool(env, "hydra-run", "--info", NULL, &r));
    bool said = contains(r.err, model);
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    CHECK(said);
    CHECK(access(model, R_OK) == 0);
}

TEST(cli_without_info_generates_text)
{
    char path[4096], args[4200];
    tool_run r;
    CHECK_OK(scratch_model("tiny", "cli-nogen.gguf", path, sizeof path));
    snprintf(args, sizeof args, "-m %s -no-cnv -n 4", path);
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    bool ok = contains(r.err, "eval time") && !contains(r.out, "architecture:");
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    CHECK(ok);
}

/* ------------------------------------------------------------ hydra-mkmodel */

TEST(mkmodel_writes_the_requested_shape)
{
    char path[4096], args[4400];
    tool_run r;
    snprintf(path, sizeof path, "%s", util_scratch_path("mk-llama.gguf"));
    snprintf(args, sizeof args, "-o %s --arch llama --layers 3 --experts 4 --experts-used 1 --type f16 --seed 9",
             path);
    CHECK(util_run_tool(NULL, "hydra-mkmodel", args, NULL, &r));
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    hydra_model *m;
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    CHECK_OK(hydra_model_open(&m, &mp));
    uint64_t layers = 0, experts = 0, used = 0;
    hydra_tensor_info ti = {0};
    hydra_model_get_u64(m, "llama.block_count", &layers);
    hydra_model_get_u64(m, "llama.expert_count", &experts);
    hydra_model_get_u64(m, "llama.expert_used_count", &used);
    hydra_model_tensor_find(m, "blk.2.ffn_gate_exps.weight", &ti);
    hydra_model_close(m);
    CHECK_EQ_U64(layers, 3);
    CHECK_EQ_U64(experts, 4);
    CHECK_EQ_U64(used, 1);
    CHECK_EQ_INT(ti.type, 1); /* F16 */
    CHECK_EQ_U64(ti.ne[2], 4);
}

/* Each bad command line exits 2 and says what is wrong (and writes nothing). */
TEST(mkmodel_bad_arguments_exit_2_with_a_message)
{
    static const struct {
        const char *args; /* after "-o FILE" unless it starts with '!' */
        const char *says;
    } cases[] = {
        {"--frobnicate 3", "--frobnicate"},
        {"!--preset tiny", "-o"},
        {"--layers two", "--layers"},
        {"--layers -1", "--layers"},
        {"--type Q9_9", "Q9_9"},
        {"--preset huge", "huge"},
        {"--arch gpt-2", "gpt-2"},
        {"--preset tiny --arch llama", "--arch"},
        {"--experts 4 --experts-used 5", "experts"},
        {"--embd 48", "blocks"},
        {"!-o", "-o"},
    };
    char path[4096], args[4400];
    snprintf(path, sizeof path, "%s", util_scratch_path("mk-bad.gguf"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tool_run r;
        remove(path);
        if (cases[i].args[0] == '!')
            snprintf(args, sizeof args, "%s", cases[i].args + 1);
        else
            snprintf(args, sizeof args, "-o %s %s", path, cases[i].args);
        CHECK(util_run_tool(NULL, "hydra-mkmodel", args, NULL, &r));
        bool ok = r.status == 2 && contains(r.err, "hydra-mkmodel:") && contains(r.err, cases[i].says) &&
                  access(path, F_OK) != 0;
        if (!ok)
            printf("hydra-mkmodel %s: exit %d, stderr: %s\n", args, r.status, r.err ? r.err : "");
        tool_run_free(&r);
        if (!ok)
            FAIL("hydra-mkmodel %s: wanted exit 2, no file, and a message naming '%s'", args, cases[i].says);
    }
}

TEST(mkmodel_help_lists_presets_and_types)
{
    tool_run r;
    CHECK(util_run_tool(NULL, "hydra-mkmodel", "--help", NULL, &r));
    bool ok = contains(r.out, "qwen3-30b-a3b") && contains(r.out, "Q8_0") && contains(r.out, "--experts-used");
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    CHECK(ok);
}
