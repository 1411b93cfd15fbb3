/*
 * hydra-run as a generator, run as a user runs it (a child shell, stdin
 * from a file, stdout and stderr captured):
 *   - the conformance hooks against ../shared/ref: --logits-out within the
 *     model's KL / top-1 tolerances, --print-ids equal to `greedy`;
 *   - --tokenize against ../shared/vocab vectors, and special tokens;
 *   - text generation: prompt echo, end-of-generation tokens, stop
 *     strings, seeds, the timing summary;
 *   - the chat REPL: the template's rendering, /exit, Ctrl-C;
 *   - every error: exit status 1 and one line on stderr naming the cause;
 *   - docs/CLI.md names every flag --help lists.
 */
#include "hydra.h"
#include "refcheck.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* hydra-run with these arguments; input (may be NULL) as its stdin. */
static bool hydra_run(const char *args, const char *input, tool_run *r)
{
    return util_run_tool(NULL, "hydra-run", args, input, r);
}

static bool has(const char *text, const char *what) { return text != NULL && strstr(text, what) != NULL; }

/* The synthetic tiny qwen3moe (chat template, BOS/EOS) in the scratch folder. */
static const char *tiny_model(char *path, size_t len)
{
    synth_params p;
    snprintf(path, len, "%s", util_scratch_path("gen-tiny.gguf"));
    struct stat sb;
    if (stat(path, &sb) == 0 && sb.st_size > 0)
        return path;
    return synth_preset("tiny", &p) == HYDRA_OK && synth_write(path, &p) == HYDRA_OK ? path : NULL;
}

/* ------------------------------------------------------------ references */

/* A reference case and its prompt as --prompt-tokens takes it. */
typedef struct reference {
    ref_case c;
    char prompt_arg[REF_PROMPT * 8]; /* "1,2,3" */
} reference;

static bool load_reference(const char *name, reference *ref)
{
    if (!ref_load(name, &ref->c))
        return false;
    size_t used = 0;
    for (int i = 0; i < REF_PROMPT; i++)
        used += (size_t)snprintf(ref->prompt_arg + used, sizeof ref->prompt_arg - used, i ? ",%d" : "%d",
                                 (int)ref->c.prompt[i]);
    return true;
}

/* hydra-run on a reference's model and prompt ids, then `extra`. */
static bool run_on_reference(const char *name, const reference *ref, const char *extra, tool_run *r)
{
    char model[512];
    size_t cap = sizeof ref->prompt_arg + strlen(extra) + sizeof model + 64;
    char *args = malloc(cap);
    if (args == NULL)
        return false;
    snprintf(args, cap, "-m %s --prompt-tokens %s %s", util_shared_model_path(name, model, sizeof model), ref->prompt_arg,
             extra);
    bool ran = hydra_run(args, NULL, r);
    free(args);
    return ran;
}

/* One qwen3moe F32 file (the tight bars) and one quantised Mixtral. */
static const char *const ref_models[] = {"qwen3moe-tiny-f32", "mixtral-tiny-q4_0"};

TEST(run_logits_out_matches_the_reference_within_tolerance)
{
    REQUIRE_SHARED();
    for (size_t k = 0; k < sizeof ref_models / sizeof ref_models[0]; k++) {
        static reference ref;
        char out[4096], extra[4200], ref_path[512];
        CHECK(load_reference(ref_models[k], &ref));
        snprintf(out, sizeof out, "%s", util_scratch_path("gen-logits.f32"));
        remove(out);
        snprintf(extra, sizeof extra, "--logits-out %s -n 0", out);
        tool_run r;
        bool ran = run_on_reference(ref_models[k], &ref, extra, &r);
        int status = r.status;
        bool quiet = ran && r.out[0] == '\0';
        tool_run_free(&r);
        CHECK(ran);
        CHECK_EQ_INT(status, 0);
        CHECK(quiet); /* the logits go to the file, nothing to stdout */
        float *want = ref_read_logits(ref_logits_path(ref_models[k], ref_path, sizeof ref_path), ref.c.n_vocab, NULL);
        float *got = ref_read_logits(out, ref.c.n_vocab, NULL);
        ref_score sc = want && got ? ref_score_rows(want, got, REF_PROMPT, ref.c.n_vocab) : (ref_score){INFINITY, 0};
        free(want);
        free(got);
        printf("    hydra-run --logits-out %s: KL %.3g (max %.3g), top-1 %.3f (min %.3f)\n", ref_models[k], sc.kl,
               ref.c.max_kl_mean, sc.top1, ref.c.min_top1);
        if (!ref_passes(&ref.c, sc))
            FAIL("%s: KL %.3g, top-1 %.3f: outside the tolerance (or the file is not %d x %d floats)",
                 ref_models[k], sc.kl, sc.top1, REF_PROMPT, ref.c.n_vocab);
    }
}

TEST(run_print_ids_is_the_reference_greedy_continuation)
{
    REQUIRE_SHARED();
    for (size_t k = 0; k < sizeof ref_models / sizeof ref_models[0]; k++) {
        static reference ref;
        CHECK(load_reference(ref_models[k], &ref));
        tool_run r;
        CHECK(run_on_reference(ref_models[k], &ref, "-n 32 --temp 0 --print-ids", &r));
        int ids[REF_GREEDY + 1], n = 0, used = 0;
        for (const char *p = r.out; n <= REF_GREEDY && sscanf(p, "%d%n", &ids[n], &used) == 1; p += used)
            n++;
        bool one_line = strchr(r.out, '\n') == r.out + strlen(r.out) - 1;
        int status = r.status;
        tool_run_free(&r);
        CHECK_EQ_INT(status, 0);
        CHECK(one_line);
        CHECK_EQ_INT(n, REF_GREEDY); /* an end-of-generation id does not end the list */
        int match = 0;
        while (match < REF_GREEDY && ids[match] == ref.c.greedy[match])
            match++;
        if (match < ref.c.min_greedy_match)
            FAIL("%s: the first %d ids match the reference's greedy, want %d", ref_models[k], match,
                 ref.c.min_greedy_match);
    }
}

/* ------------------------------------------------------------ --tokenize */

/* ggml-vocab-NAME.gguf unpacked into the scratch folder (the tokenizer
 * tests use the same place, so it is unpacked once). */
static const char *vocab_file(const char *name, char *path, size_t cap)
{
    char file[128], cmd[2048];
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf", name);
    snprintf(path, cap, "%s", util_scratch_path(file));
    struct stat sb;
    if (stat(path, &sb) == 0 && sb.st_size > 0)
        return path;
    snprintf(cmd, sizeof cmd, "xz -dc '%s/vocab/%s.xz' > '%s.part' && mv '%s.part' '%s'", test_shared_dir(), file,
             path, path, path);
    return system(cmd) == 0 ? path : NULL;
}

/* Every `step`-th case of a vocabulary's .inp/.out through --tokenize -f. */
static void tokenize_cases(test_ctx *t_, const char *name, int step)
{
    char vocab[600], path[600], text_path[4096], args[8400];
    CHECK(vocab_file(name, vocab, sizeof vocab) != NULL);
    size_t inp_len, out_len;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", test_shared_dir(), name);
    char *inp = (char *)util_read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", test_shared_dir(), name);
    char *out = (char *)util_read_file(path, &out_len);
    CHECK(inp != NULL && out != NULL);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    snprintf(text_path, sizeof text_path, "%s", util_scratch_path("gen-tokenize.txt"));
    snprintf(args, sizeof args, "-m %s --tokenize -f %s", vocab, text_path);
    int index = 0, checked = 0;
    char *failure = NULL;
    for (char *text = inp, *line = out, *end; failure == NULL && (end = strstr(text, sep)) != NULL;
         text = end + strlen(sep), index++) {
        char *nl = strchr(line, '\n');
        if (nl == NULL)
            break;
        *nl = '\0';
        const char *want = line + (line[0] == ' ');
        line = nl + 1;
        if (index % step != 0)
            continue;
        tool_run r;
        if (util_write_file(text_path, text, (size_t)(end - text)) != 0 || !hydra_run(args, NULL, &r))
            break;
        size_t n = strlen(r.out);
        if (n > 0 && r.out[n - 1] == '\n')
            r.out[n - 1] = '\0';
        if (r.status != 0 || strcmp(r.out, want) != 0)
            failure = strdup(r.out);
        tool_run_free(&r);
        checked++;
    }
    free(inp);
    free(out);
    if (failure != NULL) {
        printf("    %s case %d: hydra-run printed '%s'\n", name, index, failure);
        free(failure);
        FAIL("%s: case %d differs from the .out line", name, index);
    }
    CHECK(checked >= 5);
}

TEST(run_tokenize_matches_the_vocabulary_vectors)
{
    REQUIRE_SHARED();
    tokenize_cases(t_, "llama-spm", 6); /* SentencePiece: no BOS added, leading space */
    if (t_->result == TEST_FAIL)
        return;
    tokenize_cases(t_, "gpt-2", 8); /* byte-level BPE (one process per case: a few cases each) */
}

TEST(run_tokenize_recognises_special_tokens)
{
    REQUIRE_SHARED();
    char model[512];
    tool_run r;
    char args[1024];
    /* ../shared/models/README.md: qwen3moe appends <|endoftext|> <|im_start|> <|im_end|> from id 896 */
    snprintf(args, sizeof args, "-m %s --tokenize -p '<|im_start|><|im_end|><|endoftext|>'",
             util_shared_model_path("qwen3moe-tiny-f32", model, sizeof model));
    CHECK(hydra_run(args, NULL, &r));
    bool ok = r.status == 0 && strcmp(r.out, "897 898 896\n") == 0;
    if (!ok)
        printf("    stdout '%s', stderr '%s'\n", r.out, r.err);
    tool_run_free(&r);
    CHECK(ok);
}

/* ------------------------------------------------------------ text */

TEST(run_echoes_the_prompt_then_continues_it_and_reports_timing)
{
    char model[4096], args[4400];
    CHECK(tiny_model(model, sizeof model) != NULL);
    snprintf(args, sizeof args, "-m %s -p 'Once upon a time' -n 8 --ignore-eos -s 3", model);
    tool_run r;
    CHECK(hydra_run(args, NULL, &r));
    bool echoed = strncmp(r.out, "Once upon a time", 16) == 0 && strlen(r.out) > 17;
    bool timed = has(r.err, "load time") && has(r.err, "prompt eval time") && has(r.err, "eval time") &&
                 has(r.err, "tokens per second") && has(r.err, "total time") && has(r.err, "/     7 tokens");
    int status = r.status;
    if (!timed)
        printf("    stderr: %s\n", r.err);
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    CHECK(echoed);
    CHECK(timed);
}

TEST(run_same_seed_same_text_other_seed_other_text)
{
    char model[4096], args[4400];
    CHECK(tiny_model(model, sizeof model) != NULL);
    char *outs[3] = {0};
    static const int seeds[3] = {11, 11, 12};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "-m %s -p 'Hello' -n 24 --ignore-eos --temp 1.5 --top-k 0 -s %d", model,
                 seeds[i]);
        tool_run r;
        CHECK(hydra_run(args, NULL, &r));
        outs[i] = r.out;
        free(r.err);
    }
    bool same = strcmp(outs[0], outs[1]) == 0, differ = strcmp(outs[0], outs[2]) != 0;
    for (int i = 0; i < 3; i++)
        free(outs[i]);
    CHECK(same);
    CHECK(differ);
}

/* Mixtral's reference greedy continuation holds </s> (898, EOS): text
 * generation stops there, printing the tokens before it. */
TEST(run_text_generation_stops_at_an_end_of_generation_token)
{
    REQUIRE_SHARED();
    static reference ref;
    char path[512];
    CHECK(load_reference("mixtral-tiny-q4_0", &ref));
    int eog = 0;
    while (eog < REF_GREEDY && ref.c.greedy[eog] != 898)
        eog++;
    CHECK(eog < REF_GREEDY);
    hydra_model *m;
    hydra_model_params mp = hydra_model_default_params();
    mp.path = util_shared_model_path("mixtral-tiny-q4_0", path, sizeof path);
    CHECK_OK(hydra_model_open(&m, &mp));
    char want[4096];
    size_t want_len = 0;
    hydra_status st = hydra_detokenize(m, ref.c.greedy, (size_t)eog, false, want, sizeof want - 1, &want_len);
    hydra_model_close(m);
    CHECK_OK(st);
    want[want_len] = '\n';
    want[want_len + 1] = '\0';
    tool_run r;
    CHECK(run_on_reference("mixtral-tiny-q4_0", &ref, "-n 32 --temp 0", &r));
    char evaluated[64];
    snprintf(evaluated, sizeof evaluated, "/ %5d tokens", eog); /* each printed token, none after */
    bool ok = r.status == 0 && strcmp(r.out, want) == 0 && has(r.err, evaluated);
    if (!ok)
        printf("    got '%s', want '%s' (%d tokens)\n    %s\n", r.out, want, eog, r.err);
    tool_run_free(&r);
    CHECK(ok);
}

/* A stop string taken from the greedy text itself: the output ends right
 * before its first occurrence (the stop string is not printed). */
TEST(run_stop_string_ends_the_text_before_it)
{
    char model[4096], args[4600];
    CHECK(tiny_model(model, sizeof model) != NULL);
    snprintf(args, sizeof args, "-m %s -p 'The' --no-display-prompt -n 40 --ignore-eos --temp 0", model);
    tool_run full;
    CHECK(hydra_run(args, NULL, &full));
    /* three letters at least 4 bytes in */
    const char *stop = NULL;
    for (const char *p = full.out + 4; stop == NULL && p[0] && p[1] && p[2]; p++)
        if (isalpha((unsigned char)p[0]) && isalpha((unsigned char)p[1]) && isalpha((unsigned char)p[2]))
            stop = p;
    if (stop == NULL) {
        printf("    greedy text: '%s'\n", full.out);
        tool_run_free(&full);
        FAIL("no three letters in a row in the greedy text");
    }
    char word[4] = {stop[0], stop[1], stop[2], 0};
    size_t cut = (size_t)(strstr(full.out, word) - full.out);
    snprintf(args, sizeof args, "-m %s -p 'The' --no-display-prompt -n 40 --ignore-eos --temp 0 --stop %s", model,
             word);
    tool_run r;
    bool ran = hydra_run(args, NULL, &r);
    bool ok = ran && r.status == 0 && strlen(r.out) == cut + 1 && strncmp(r.out, full.out, cut) == 0;
    if (!ok)
        printf("    full '%s'\n    stop '%s' -> '%s'\n", full.out, word, ran ? r.out : "");
    tool_run_free(&full);
    if (ran)
        tool_run_free(&r);
    CHECK(ok);
}

TEST(run_ctrl_c_ends_plain_generation_with_status_130_and_timing)
{
    char model[4096], cmd[8400], err[4096];
    CHECK(tiny_model(model, sizeof model) != NULL);
    snprintf(err, sizeof err, "%s", util_scratch_path("gen-int-stderr.txt"));
    snprintf(cmd, sizeof cmd,
             "%s/hydra-run -m %s -p 'Hello' -n -1 --ignore-eos -c 16384 </dev/null >/dev/null 2>%s & pid=$!; "
             "sleep 0.4; kill -INT $pid; wait $pid",
             test_build_dir(), model, err);
    int rc = system(cmd);
    size_t n;
    char *text = (char *)util_read_file(err, &n);
    bool timed = has(text, "eval time") && !has(text, "context is full");
    free(text);
    CHECK(rc != -1 && WIFEXITED(rc));
    CHECK_EQ_INT(WEXITSTATUS(rc), 130);
    CHECK(timed);
}

/* ------------------------------------------------------------ chat */

TEST(run_chat_renders_the_template_and_exits_on_slash_exit)
{
    char model[4096], args[4400];
    CHECK(tiny_model(model, sizeof model) != NULL);
    snprintf(args, sizeof args, "-m %s -cnv -n 4 --temp 0 -sys 'Be brief.' --verbose-prompt", model);
    tool_run r;
    CHECK(hydra_run(args, "Hi there\nAnd you?\n/exit\nnever sent\n", &r));
    /* the synthetic model's ChatML template, both turns, the system message first */
    bool first = has(r.err, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                            "<|im_start|>assistant\n");
    bool second = has(r.err, "<|im_start|>user\nAnd you?<|im_end|>\n<|im_start|>assistant\n");
    bool prompts = strncmp(r.out, "> ", 2) == 0 && has(r.out + 2, "\n> ") && !has(r.err, "never sent");
    int status = r.status;
    if (!(first && second && prompts))
        printf("    stdout: %s\n    stderr: %s\n", r.out, r.err);
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    CHECK(first);
    CHECK(second);
    CHECK(prompts);
}

TEST(run_chat_ctrl_c_stops_the_reply_not_the_program)
{
    char model[4096], cmd[8400], out[4096], err[4096];
    CHECK(tiny_model(model, sizeof model) != NULL);
    snprintf(out, sizeof out, "%s", util_scratch_path("gen-chat-int-stdout.txt"));
    snprintf(err, sizeof err, "%s", util_scratch_path("gen-chat-int-stderr.txt"));
    /* The reply would run for many seconds to the end of a 16384-token
     * context; Ctrl-C comes after 0.4 s, /exit after 1 s. */
    snprintf(cmd, sizeof cmd,
             "(printf 'Hi\\n'; sleep 1; printf '/exit\\n') | %s/hydra-run -m %s -cnv -n -1 --ignore-eos -c 16384 "
             ">%s 2>%s & pid=$!; sleep 0.4; kill -INT $pid; wait $pid",
             test_build_dir(), model, out, err);
    int rc = system(cmd);
    char *o = util_read_output(out), *e = util_read_output(err);
    bool stopped = has(e, "total time") && !has(e, "context is full");
    bool asked_again = o != NULL && has(o + 2, "\n> ");
    free(o);
    free(e);
    CHECK(rc != -1 && WIFEXITED(rc));
    CHECK_EQ_INT(WEXITSTATUS(rc), 0);
    CHECK(stopped);
    CHECK(asked_again);
}

/* ------------------------------------------------------------ errors */

TEST(run_errors_exit_1_with_one_line_naming_the_cause)
{
    char model[4096], junk[4096], long_prompt[3000];
    CHECK(tiny_model(model, sizeof model) != NULL);
    snprintf(junk, sizeof junk, "%s", util_scratch_path("gen-not-a-gguf.txt"));
    CHECK_EQ_INT(util_write_file(junk, "plain text, not a model\n", 24), 0);
    memset(long_prompt, 'a', sizeof long_prompt - 1);
    for (size_t i = 0; i < sizeof long_prompt - 1; i += 2)
        long_prompt[i] = ' '; /* " a a a": one token per word */
    long_prompt[sizeof long_prompt - 1] = '\0';
    const struct {
        const char *args; /* %s: the tiny model */
        const char *says;
    } cases[] = {
        {"--frobnicate", "--frobnicate"},
        {"-m %s --temp abc", "--temp"},
        {"-m %s --top-p 1.5", "--top-p"},
        {"-m %s --min-p -0.1", "--min-p"},
        {"-m %s --top-k -2", "--top-k"},
        {"-m %s --repeat-penalty 0", "--repeat-penalty"},
        {"-m %s -n", "-n"},
        {"-m %s -n 1.5", "-n"},
        {"-m %s -c -1", "-c"},
        {"-m %s --seed x", "--seed"},
        {"-m %s --kv-type q8", "--kv-type"},
        {"-m %s --prompt-tokens 1,x", "--prompt-tokens"},
        {"-m %s --prompt-tokens 1,99999 -n 1", "99999"},
        {"-m %s -p hi -f /no/such/prompt.txt", "prompt"},
        {"-m %s -f /no/such/prompt.txt", "/no/such/prompt.txt"},
        {"-m %s --chat-template no-such-template -cnv", "--chat-template"},
        {"-m %s --tokenize", "--tokenize"},
        {"-m /no/such/model.gguf -p hi", "/no/such/model.gguf"},
        {"-m %s -c 16 -p 'LONG'", "context"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[8400], *long_at;
        snprintf(args, sizeof args, cases[i].args, model);
        if ((long_at = strstr(args, "LONG")) != NULL)
            snprintf(long_at, sizeof args - (size_t)(long_at - args), "%s'", long_prompt);
        tool_run r;
        CHECK(hydra_run(args, NULL, &r));
        const char *nl = strchr(r.err, '\n');
        bool ok = r.status == 1 && strncmp(r.err, "hydra-run: ", 11) == 0 && nl != NULL && nl[1] == '\0' &&
                  has(r.err, cases[i].says);
        if (!ok)
            printf("    hydra-run %.200s: exit %d, stderr: %s\n", args, r.status, r.err);
        tool_run_free(&r);
        if (!ok)
            FAIL("case %zu: wanted exit 1 and one line naming '%s'", i, cases[i].says);
    }
    tool_run r;
    char args[8400];
    snprintf(args, sizeof args, "-m %s -p hi", junk);
    CHECK(hydra_run(args, NULL, &r));
    bool says = r.status == 1 && has(r.err, "not a GGUF");
    tool_run_free(&r);
    CHECK(says);
}

TEST(run_unsupported_architecture_exits_1_naming_it)
{
    REQUIRE_SHARED();
    char model[512], args[1024];
    /* A gpt2 vocabulary: a GGUF hydra reads, of an architecture it does not run. */
    CHECK(vocab_file("gpt-2", model, sizeof model) != NULL);
    snprintf(args, sizeof args, "-m %s -p hi", model);
    tool_run r;
    CHECK(hydra_run(args, NULL, &r));
    bool ok = r.status == 1 && has(r.err, "gpt2") && has(r.err, "not supported");
    if (!ok)
        printf("    exit %d, stderr: %s\n", r.status, r.err);
    tool_run_free(&r);
    CHECK(ok);
}

/* ------------------------------------------------------------ docs */

/* Whether the doc spells the flag in backquotes: `-m` or `-m FILE`. */
static bool documents(const char *doc, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = doc; (p = strchr(p, '`')) != NULL; p++)
        if (strncmp(p + 1, name, len) == 0 && (p[1 + len] == '`' || p[1 + len] == ' '))
            return true;
    return false;
}

TEST(run_docs_cli_names_every_flag_of_help)
{
    tool_run r;
    CHECK(hydra_run("--help", NULL, &r));
    size_t n;
    char *doc = (char *)util_read_file("docs/CLI.md", &n);
    char missing[512] = "";
    int names = 0;
    /* Help lines: "  -m, --model FILE   text": names up to the first one without a comma. */
    for (const char *p = r.out; doc != NULL && (p = strstr(p, "\n  -")) != NULL;) {
        p += 3;
        char name[64];
        int used = 0;
        while (sscanf(p, "%63[^, ]%n", name, &used) == 1 && name[0] == '-') {
            names++;
            if (!documents(doc, name) && strlen(missing) + strlen(name) + 2 < sizeof missing)
                strcat(strcat(missing, " "), name);
            if (p[used] != ',')
                break;
            p += used + 2;
        }
    }
    int status = r.status;
    tool_run_free(&r);
    bool read = doc != NULL;
    free(doc);
    CHECK_EQ_INT(status, 0);
    CHECK(read);
    CHECK(names > 40);
    if (missing[0] != '\0')
        FAIL("docs/CLI.md does not name:%s", missing);
}
