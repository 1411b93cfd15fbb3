/*
 * Tokenizers against the reference vectors of ../shared/vocab (made by the
 * Hugging Face tokenizers, transformers and tiktoken; README.md there), the
 * tokenizers the shared tiny models carry (ids from ../shared/models'
 * README), round trips, the streaming detokenizer, hostile input, speed.
 */
#include "hydra.h"
#include "gguf_write.h"
#include "test.h"
#include "unicode.h"
#include "util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

/* The vocabularies and what ../shared/vocab/README.md says of them. */
typedef struct vocab_ref {
    const char *name;
    int32_t n_tokens, bos, eos;
    bool add_bos; /* with add_special */
} vocab_ref;

static const vocab_ref vocabs[] = {
    {"gpt-2", 50257, 50256, 50256, false},
    {"llama-spm", 32000, 1, 2, true},
    {"qwen3", 151936, 151643, 151645, false},
    {"llama-bpe", 128256, 128000, 128001, true},
    {"deepseek-v3", 129280, 0, 1, true},
    {"gpt-oss", 201088, 199998, 200002, false},
    {"deepseek-coder", 32256, 32013, 32014, true},
    {"deepseek-llm", 102400, 100000, 100001, true},
    {"falcon", 65024, 11, 11, false},
    {"starcoder", 49152, 0, 0, false},
    {"phi-3", 32064, 1, 32000, true},
    {"refact", 49216, 0, 0, false},
    {"mpt", 50432, 0, 0, false},
};

/* ------------------------------------------------------- Unicode tables */

/* Facts from the Unicode Character Database 15.0 (UnicodeData.txt,
 * PropList.txt, CaseFolding.txt), one per category the patterns tell apart. */
TEST(tokenizer_unicode_tables_know_categories_spaces_and_folding)
{
    static const struct {
        uint32_t cp;
        ucat cat;
        bool space;
    } facts[] = {
        {'A', UCAT_Lu, false},     {'z', UCAT_Ll, false},     {0x01C5, UCAT_Lt, false}, /* ǅ */
        {0x02B0, UCAT_Lm, false},  {0x4E00, UCAT_Lo, false},  {0x0301, UCAT_Mn, false},
        {0x17B6, UCAT_Mc, false},  {0x0488, UCAT_Me, false},  {0x0660, UCAT_Nd, false},
        {0x2167, UCAT_Nl, false},  {0x00BD, UCAT_No, false},  {'_', UCAT_Pc, false},
        {'-', UCAT_Pd, false},     {'(', UCAT_Ps, false},     {')', UCAT_Pe, false},
        {0x00AB, UCAT_Pi, false},  {0x00BB, UCAT_Pf, false},  {'!', UCAT_Po, false},
        {'+', UCAT_Sm, false},     {'$', UCAT_Sc, false},     {'^', UCAT_Sk, false},
        {0x1F600, UCAT_So, false}, {' ', UCAT_Zs, true},      {0x3000, UCAT_Zs, true},
        {0x2028, UCAT_Zl, true},   {0x2029, UCAT_Zp, true},   {'\n', UCAT_Cc, true},
        {0x0085, UCAT_Cc, true},   {0x001C, UCAT_Cc, false},  {0x200B, UCAT_Cf, false},
        {0xD800, UCAT_Cs, false},  {0xE000, UCAT_Co, false},  {0x0378, UCAT_Cn, false},
        {0x10FFFF, UCAT_Cn, false}, {0x31350, UCAT_Lo, false}, /* CJK Extension H, new in 15.0 */
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        if (unicode_category(facts[i].cp) != facts[i].cat || unicode_is_space(facts[i].cp) != facts[i].space)
            FAIL("U+%04X: category %d space %d, want %d %d", (unsigned)facts[i].cp, (int)unicode_category(facts[i].cp),
                 unicode_is_space(facts[i].cp), (int)facts[i].cat, facts[i].space);
    }
    CHECK_EQ_INT(unicode_fold('S'), 's');
    CHECK_EQ_INT(unicode_fold(0x017F), 's'); /* ſ: why (?i:'s) matches 'ſ */
    CHECK_EQ_INT(unicode_fold(0x212A), 'k'); /* Kelvin sign */
    CHECK_EQ_INT(unicode_fold(0x0100), 0x0101);
    CHECK_EQ_INT(unicode_fold(0x0101), 0x0101);
    CHECK_EQ_INT(unicode_fold(0x10400), 0x10428);
}

TEST(tokenizer_utf8_decoding_survives_any_bytes)
{
    static const struct {
        const char *bytes;
        uint32_t cp;
        size_t len;
    } cases[] = {
        {"A", 'A', 1},
        {"\xc3\xa9", 0xE9, 2},
        {"\xe2\x82\xac", 0x20AC, 3},
        {"\xf0\x9f\x8e\x89", 0x1F389, 4},
        {"\xc0\xaf", UNICODE_INVALID, 1},         /* overlong */
        {"\xed\xa0\x80", UNICODE_INVALID, 1},     /* surrogate */
        {"\xf4\x90\x80\x80", UNICODE_INVALID, 1}, /* past U+10FFFF */
        {"\xe2\x82", UNICODE_INVALID, 1},         /* truncated */
        {"\x80", UNICODE_INVALID, 1},             /* stray continuation */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t cp;
        size_t len = utf8_decode((const uint8_t *)cases[i].bytes, strlen(cases[i].bytes), &cp);
        if (cp != cases[i].cp || len != cases[i].len)
            FAIL("case %zu: U+%X in %zu bytes, want U+%X in %zu", i, (unsigned)cp, len, (unsigned)cases[i].cp,
                 cases[i].len);
    }
    CHECK_EQ_INT(utf8_incomplete_tail((const uint8_t *)"ab\xf0\x9f\x8e", 5), 3);
    CHECK_EQ_INT(utf8_incomplete_tail((const uint8_t *)"ab\xf0\x9f\x8e\x89", 6), 0);
    CHECK_EQ_INT(utf8_incomplete_tail((const uint8_t *)"ab\xc3", 3), 1);
    CHECK_EQ_INT(utf8_incomplete_tail((const uint8_t *)"ab\xe0\x80", 4), 0); /* E0 80 can never complete */
    CHECK_EQ_INT(utf8_incomplete_tail((const uint8_t *)"\x80\x80\x80", 3), 0);
}

/* ------------------------------------------------------------ helpers */

/* ggml-vocab-NAME.gguf unpacked into the scratch folder (once: later runs
 * reuse it; a partial unpack never takes the final name). */
static const char *unpack_vocab(const char *name, char *path, size_t cap)
{
    char file[128], tmp[600], cmd[2048];
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf", name);
    snprintf(path, cap, "%s", util_scratch_path(file));
    struct stat sb;
    if (stat(path, &sb) == 0 && sb.st_size > 0)
        return path;
    snprintf(tmp, sizeof tmp, "%s.part", path);
    snprintf(cmd, sizeof cmd, "xz -dc '%s/vocab/%s.xz' > '%s' && mv '%s' '%s'", test_shared_dir(), file, tmp, tmp,
             path);
    return system(cmd) == 0 ? path : NULL;
}

/* Each vocabulary is opened once per run, its tokenizer built (a large one
 * takes a few hundred milliseconds), and closed at exit. */
static hydra_model *opened[sizeof vocabs / sizeof vocabs[0]];

__attribute__((destructor)) static void close_vocabs(void)
{
    for (size_t k = 0; k < sizeof vocabs / sizeof vocabs[0]; k++)
        hydra_model_close(opened[k]);
}

/* The model of a vocabulary, or NULL with the reason in why. */
static hydra_model *vocab_model(const char *name, char *why, size_t why_len)
{
    size_t k = 0;
    while (k < sizeof vocabs / sizeof vocabs[0] && strcmp(vocabs[k].name, name) != 0)
        k++;
    if (k == sizeof vocabs / sizeof vocabs[0])
        return snprintf(why, why_len, "%s is not a shared vocabulary", name), NULL;
    if (opened[k] != NULL)
        return opened[k];
    char path[600];
    if (unpack_vocab(name, path, sizeof path) == NULL)
        return snprintf(why, why_len, "%s: cannot unpack %s/vocab/ggml-vocab-%s.gguf.xz with xz", name,
                        test_shared_dir(), name),
               NULL;
    hydra_model *m;
    hydra_status st = util_open_model(path, &m);
    if (st == HYDRA_OK)
        st = hydra_tokenizer_load(m);
    if (st != HYDRA_OK) {
        snprintf(why, why_len, "%s: %s: %s", name, hydra_strerror(st), hydra_last_error());
        hydra_model_close(m);
        return NULL;
    }
    return opened[k] = m;
}

#define VOCAB(name, m)                                                                        \
    do {                                                                                      \
        char why_[1200];                                                                      \
        if (((m) = vocab_model(name, why_, sizeof why_)) == NULL)                             \
            FAIL("%s", why_);                                                                 \
    } while (0)

/* Tokens of a text into a fresh array (*n of them); NULL on failure. */
static hydra_token *tokenize(hydra_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                             size_t *n)
{
    size_t cap = len + 8;
    hydra_token *ids = malloc(cap * sizeof *ids);
    if (ids == NULL || hydra_tokenize(m, text, len, add_special, parse_special, ids, cap, n) != HYDRA_OK) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* decode(ids) == text[0, len) */
static bool round_trips(hydra_model *m, const hydra_token *ids, size_t n, const char *text, size_t len)
{
    char *buf = malloc(len + 1);
    size_t out_len = 0;
    bool ok = buf != NULL && hydra_detokenize(m, ids, n, false, buf, len + 1, &out_len) == HYDRA_OK &&
              out_len == len && memcmp(buf, text, len) == 0;
    free(buf);
    return ok;
}

/* Test texts and expected id lines of one vocabulary. */
typedef struct vectors {
    char *inp, *out; /* file contents, cut in place */
    const char *text[64];
    size_t text_len[64];
    const char *ids[64];
    size_t n;
} vectors;

static const char separator[] = "\n__ggml_vocab_test__\n";

static bool read_vectors(const char *name, vectors *v)
{
    char path[512];
    size_t inp_len, out_len;
    memset(v, 0, sizeof *v);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", test_shared_dir(), name);
    v->inp = (char *)util_read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", test_shared_dir(), name);
    v->out = (char *)util_read_file(path, &out_len);
    if (v->inp == NULL || v->out == NULL)
        return false;
    for (char *p = v->inp, *sep; (sep = strstr(p, separator)) != NULL && v->n < 64; p = sep + strlen(separator)) {
        v->text[v->n] = p;
        v->text_len[v->n++] = (size_t)(sep - p);
    }
    size_t lines = 0;
    for (char *p = v->out, *nl; (nl = strchr(p, '\n')) != NULL && lines < 64; p = nl + 1) {
        *nl = '\0';
        v->ids[lines++] = p;
    }
    return lines == v->n && v->n > 0;
}

static void free_vectors(vectors *v)
{
    free(v->inp);
    free(v->out);
}

/* Ids as the .out files write them: " id" each. */
static void format_ids(const hydra_token *ids, size_t n, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, " %d", (int)ids[i]);
}

/* ------------------------------------------------ reference vectors */

typedef struct vocab_score {
    size_t exact, round_trip, n;
    char first_miss[400];
} vocab_score;

/* One text, with parse_special off and on (the texts hold no control
 * token, so both must give the expected ids), and its round trip. */
static void score_case(hydra_model *m, const vectors *v, size_t i, vocab_score *score)
{
    static char got[8192];
    size_t n[2] = {0, 0};
    hydra_token *ids[2];
    bool exact = true;
    for (int parse = 0; parse < 2; parse++) {
        ids[parse] = tokenize(m, v->text[i], v->text_len[i], false, parse == 1, &n[parse]);
        if (ids[parse] != NULL)
            format_ids(ids[parse], n[parse], got, sizeof got);
        else
            snprintf(got, sizeof got, "(failed: %s)", hydra_last_error());
        if (ids[parse] != NULL && strcmp(got, v->ids[i]) == 0)
            continue;
        if (exact && score->first_miss[0] == '\0')
            snprintf(score->first_miss, sizeof score->first_miss,
                     "case %zu, parse_special %d: want \"%.150s\" got \"%.150s\"", i, parse, v->ids[i], got);
        exact = false;
    }
    score->exact += exact;
    if (ids[1] != NULL && round_trips(m, ids[1], n[1], v->text[i], v->text_len[i]))
        score->round_trip++;
    free(ids[0]);
    free(ids[1]);
}

/* BOS/EOS ids and the add_special rule, per the README's table. */
static void check_special_ids(hydra_model *m, const vocab_ref *ref, char *why, size_t why_len)
{
    size_t n = 0;
    hydra_token ids[64];
    hydra_status st = hydra_tokenize(m, "Hello", 5, true, false, ids, 64, &n);
    if (st != HYDRA_OK || hydra_vocab_size(m) != ref->n_tokens || hydra_token_bos(m) != ref->bos ||
        hydra_token_eos(m) != ref->eos || n == 0 || (ids[0] == ref->bos) != ref->add_bos || ids[n - 1] == ref->eos)
        snprintf(why, why_len, "vocab %d bos %d eos %d first id %d (n %zu), want vocab %d bos %d eos %d add_bos %d",
                 hydra_vocab_size(m), hydra_token_bos(m), hydra_token_eos(m), n > 0 ? ids[0] : -1, n,
                 ref->n_tokens, ref->bos, ref->eos, ref->add_bos);
}

TEST(tokenizer_reproduces_every_reference_vector)
{
    REQUIRE_SHARED();
    char failures[1500] = "";
    for (size_t k = 0; k < sizeof vocabs / sizeof vocabs[0]; k++) {
        const vocab_ref *ref = &vocabs[k];
        char why[1200] = "";
        vectors v;
        bool have_vectors = read_vectors(ref->name, &v);
        hydra_model *m = have_vectors ? vocab_model(ref->name, why, sizeof why) : NULL;
        vocab_score score = {.n = v.n};
        for (size_t i = 0; m != NULL && i < v.n; i++)
            score_case(m, &v, i, &score);
        if (m != NULL)
            check_special_ids(m, ref, why, sizeof why);
        free_vectors(&v);
        printf("  tokenizer %-15s %2zu/%zu exact, %2zu/%zu round trip\n", ref->name, score.exact, score.n,
               score.round_trip, score.n);
        size_t used = strlen(failures);
        if (!have_vectors)
            snprintf(failures + used, sizeof failures - used, "%s: cannot read the .inp/.out vectors. ", ref->name);
        else if (why[0] != '\0')
            snprintf(failures + used, sizeof failures - used, "%s: %s. ", ref->name, why);
        else if (score.exact != score.n || score.round_trip != score.n)
            snprintf(failures + used, sizeof failures - used, "%s: %zu/%zu exact, %zu round trip; %s. ", ref->name,
                     score.exact, score.n, score.round_trip, score.first_miss);
    }
    if (failures[0] != '\0')
        FAIL("%s", failures);
}

/* ------------------------------------------------------ special tokens */

/* Qwen3: <|im_start|> <|im_end|> are control tokens (151644, 151645),
 * <think> </think> user-defined ones (README: 6 USER_DEFINED) above the
 * 151643 BPE tokens. */
static size_t count_above_bpe(const hydra_token *ids, size_t n, size_t *control, hydra_model *m)
{
    size_t above = 0;
    *control = 0;
    for (size_t i = 0; i < n; i++) {
        above += ids[i] >= 151643;
        *control += hydra_token_is_control(m, ids[i]);
    }
    return above;
}

TEST(tokenizer_parses_control_tokens_only_when_asked)
{
    REQUIRE_SHARED();
    hydra_model *m;
    VOCAB("qwen3", m);
    static const char text[] = "<|im_start|>user\nhi<think>ok</think><|im_end|>";
    size_t n_on = 0, n_off = 0, control_on = 0, control_off = 0, above_on = 0, above_off = 0;
    hydra_token *on = tokenize(m, text, strlen(text), false, true, &n_on);
    hydra_token *off = tokenize(m, text, strlen(text), false, false, &n_off);
    bool ends_ok = on != NULL && n_on >= 4 && on[0] == 151644 && on[n_on - 1] == hydra_token_eos(m);
    if (on != NULL && off != NULL) {
        above_on = count_above_bpe(on, n_on, &control_on, m);
        above_off = count_above_bpe(off, n_off, &control_off, m);
    }
    bool off_round_trips = off != NULL && round_trips(m, off, n_off, text, strlen(text));
    bool eog_ok = hydra_token_is_eog(m, 151645) && !hydra_token_is_eog(m, 151644) && !hydra_token_is_eog(m, 40);
    free(on);
    free(off);
    CHECK(ends_ok);
    CHECK_EQ_INT(above_on, 4);
    CHECK_EQ_INT(control_on, 2);
    CHECK_EQ_INT(above_off, 2); /* <think> and </think> only */
    CHECK_EQ_INT(control_off, 0);
    CHECK(off_round_trips);
    CHECK(eog_ok);
}

TEST(tokenizer_reports_too_small_output_and_bad_ids)
{
    REQUIRE_SHARED();
    hydra_model *m;
    VOCAB("gpt-2", m);
    hydra_token ids[2];
    size_t n = 0, len = 0;
    char piece[8];
    hydra_status small = hydra_tokenize(m, "Hello world, again", 18, false, false, ids, 2, &n);
    hydra_status query = hydra_tokenize(m, "Hello world, again", 18, false, false, NULL, 0, &len);
    hydra_status bad_id = hydra_token_to_piece(m, 50257, false, piece, sizeof piece, &len);
    hydra_status hidden = hydra_token_to_piece(m, 50256, false, piece, sizeof piece, &len);
    size_t hidden_len = len;
    CHECK_EQ_INT(small, HYDRA_ERR_RANGE);
    CHECK_EQ_INT(query, HYDRA_ERR_RANGE);
    CHECK_EQ_INT(n, 4); /* Hello| world|,| again */
    CHECK_EQ_INT(bad_id, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(hidden, HYDRA_OK);
    CHECK_EQ_INT(hidden_len, 0); /* <|endoftext|> is control: silent unless asked */
}

/* ------------------------------------------------------- hostile input */

/* stray continuation, lone lead bytes, an overlong form, a surrogate, a
 * value past U+10FFFF, a truncated sequence, a lead byte at the end */
#define INVALID_UTF8(ff, fe, c0) "ok \x80" ff fe " caf\xc3\xa9 " c0 "\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82 x\xc3"
#define FFFD "\xef\xbf\xbd"

TEST(tokenizer_takes_invalid_utf8_and_gives_it_back)
{
    REQUIRE_SHARED();
    static const char text[] = INVALID_UTF8("\xff", "\xfe", "\xc0");
    static const struct {
        const char *name, *decoded;
    } cases[] = {
        {"gpt-2", text}, {"llama-spm", text}, {"gpt-oss", text}, {"qwen3", text},
        /* deepseek-llm has no tokens for the bytes UTF-8 never uses (its
         * "ÿ", "þ", "À" are added tokens that stand for those characters) */
        {"deepseek-llm", INVALID_UTF8(FFFD, FFFD, FFFD)},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        hydra_model *m;
        VOCAB(cases[k].name, m);
        size_t n = 0;
        hydra_token *ids = tokenize(m, text, sizeof text - 1, false, true, &n);
        bool ok = ids != NULL && round_trips(m, ids, n, cases[k].decoded, strlen(cases[k].decoded));
        free(ids);
        if (!ok)
            FAIL("%s: invalid UTF-8 did not come back as expected (%s)", cases[k].name, hydra_last_error());
    }
}

static hydra_status write_vocab_gguf(const char *path, const char *model, const char *pre)
{
    static const char *const tokens[] = {"a", "b", "ab"};
    gguf_writer *w;
    hydra_status st = gguf_writer_open(&w, path);
    if (st != HYDRA_OK)
        return st;
    if ((st = gguf_writer_add_str(w, "general.architecture", "llama")) != HYDRA_OK ||
        (st = gguf_writer_add_str(w, "tokenizer.ggml.model", model)) != HYDRA_OK ||
        (st = gguf_writer_add_str(w, "tokenizer.ggml.pre", pre)) != HYDRA_OK ||
        (st = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, 3)) != HYDRA_OK) {
        gguf_writer_abort(w);
        return st;
    }
    return gguf_writer_close(w);
}

TEST(tokenizer_names_an_unknown_pre_tokenizer)
{
    const char *path = util_scratch_path("tokenizer-unknown-pre.gguf");
    CHECK_OK(write_vocab_gguf(path, "gpt2", "no-such-splitter"));
    hydra_model *m;
    CHECK_OK(util_open_model(path, &m));
    hydra_status load = hydra_tokenizer_load(m);
    char message[1024];
    snprintf(message, sizeof message, "%s", hydra_last_error());
    size_t n = 0;
    hydra_status tokenize_st = hydra_tokenize(m, "a", 1, false, false, NULL, 0, &n);
    int32_t vocab = hydra_vocab_size(m);
    hydra_model_close(m);
    CHECK_EQ_INT(load, HYDRA_ERR_UNSUPPORTED);
    CHECK_EQ_INT(tokenize_st, HYDRA_ERR_UNSUPPORTED);
    CHECK_EQ_INT(vocab, 0);
    if (strstr(message, "'no-such-splitter'") == NULL || strstr(message, "tokenizer.ggml.pre") == NULL)
        FAIL("message does not name the pre-tokenizer: %s", message);

    CHECK_OK(write_vocab_gguf(path, "wordpiece-ish", "default"));
    CHECK_OK(util_open_model(path, &m));
    load = hydra_tokenizer_load(m);
    snprintf(message, sizeof message, "%s", hydra_last_error());
    hydra_model_close(m);
    CHECK_EQ_INT(load, HYDRA_ERR_UNSUPPORTED);
    CHECK(strstr(message, "'wordpiece-ish'") != NULL);
}

/* ------------------------------------------------------------ streaming */

/* Well-formed UTF-8, checked here without the library's decoder. */
static bool whole_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t len = s[i] < 0x80 ? 1 : s[i] >= 0xF0 ? 4 : s[i] >= 0xE0 ? 3 : s[i] >= 0xC2 ? 2 : 0;
        if (len == 0 || i + len > n)
            return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

/* Pushes ids one by one; every chunk must be whole characters and the
 * chunks together the text.  *held: pushes that gave nothing. */
static bool stream_matches(hydra_model *m, const hydra_token *ids, size_t n, bool special, bool text_start,
                           const char *want, size_t *held)
{
    hydra_detokenizer *d;
    if (hydra_detokenizer_new(m, special, text_start, &d) != HYDRA_OK)
        return false;
    char out[512];
    size_t used = 0;
    bool ok = true;
    *held = 0;
    for (size_t i = 0; i < n && ok; i++) {
        const char *chunk;
        size_t len;
        ok = hydra_detokenizer_push(d, ids[i], &chunk, &len) == HYDRA_OK &&
             whole_utf8((const unsigned char *)chunk, len) && used + len < sizeof out;
        if (ok) {
            memcpy(out + used, chunk, len);
            used += len;
            *held += len == 0;
        }
    }
    const char *rest;
    size_t rest_len;
    hydra_detokenizer_flush(d, &rest, &rest_len);
    hydra_detokenizer_free(d);
    return ok && rest_len == 0 && used == strlen(want) && memcmp(out, want, used) == 0;
}

#define PLAIN "a\xc3\xb1o \xf0\x9f\x8e\x89\xe2\x82\xac \xe6\x97\xa5\xe6\x9c\xac" /* año 🎉€ 日本 */

TEST(tokenizer_stream_holds_back_partial_utf8_and_hides_control_tokens)
{
    REQUIRE_SHARED();
    hydra_model *m;
    VOCAB("gpt-2", m);
    static const char text[] = PLAIN "<|endoftext|>";
    size_t n = 0, held = 0;
    hydra_token *ids = tokenize(m, text, strlen(text), false, true, &n);
    CHECK(ids != NULL);
    bool quiet = stream_matches(m, ids, n, false, true, PLAIN, &held);
    size_t held_quiet = held;
    bool loud = stream_matches(m, ids, n, true, true, text, &held);
    /* GPT-2 spells 🎉 with byte tokens: the first, a part of the
     * character, stays held until flushed */
    size_t n_party = 0, rest_len = 0, len = 0;
    hydra_token *party = tokenize(m, "\xf0\x9f\x8e\x89", 4, false, false, &n_party);
    hydra_detokenizer *d;
    const char *chunk, *rest;
    bool flushed = party != NULL && n_party > 1 && hydra_detokenizer_new(m, false, true, &d) == HYDRA_OK;
    if (flushed) {
        flushed = hydra_detokenizer_push(d, party[0], &chunk, &len) == HYDRA_OK && len == 0;
        hydra_detokenizer_flush(d, &rest, &rest_len);
        flushed = flushed && rest_len > 0 && rest_len < 4 && (unsigned char)rest[0] == 0xf0;
        hydra_detokenizer_free(d);
    }
    free(party);
    free(ids);
    CHECK(quiet);
    CHECK(held_quiet >= 1); /* some push gave nothing: it ended inside a character */
    CHECK(loud);
    CHECK(flushed);
}

TEST(tokenizer_stream_removes_the_sentencepiece_space_at_the_start_only)
{
    REQUIRE_SHARED();
    hydra_model *m;
    VOCAB("llama-spm", m);
    size_t n = 0, held;
    hydra_token *ids = tokenize(m, "Hello world", 11, true, false, &n);
    CHECK(ids != NULL);
    bool start = stream_matches(m, ids, n, false, true, "Hello world", &held);
    bool continued = stream_matches(m, ids, n, false, false, " Hello world", &held);
    bool with_bos = stream_matches(m, ids, n, true, true, "<s>Hello world", &held);
    free(ids);
    CHECK(start);
    CHECK(continued);
    CHECK(with_bos);
}

/* ------------------------------------------------- the shared tiny models */

/* ../shared/models/README.md: 896 GPT-2 tokens, then each family's special
 * tokens from id 896 in the order listed there. */
typedef struct tiny_ref {
    const char *file;
    int32_t n_vocab, bos, eos;
    const char *special; /* one of the appended tokens */
    int32_t special_id;
    int32_t not_eog;     /* a control token that must not end generation, -1 for none */
} tiny_ref;

static const tiny_ref tiny_models[] = {
    {"qwen3moe-tiny-f32", 905, 896, 898, "<|im_start|>", 897, 897},
    {"qwen2moe-tiny-f32", 903, 896, 898, "<|im_end|>", 898, 897},
    {"mixtral-tiny-f16", 906, 897, 898, "[INST]", 899, 899},
    {"deepseek2-tiny-f32", 912, 896, 897, "<\xef\xbd\x9cUser\xef\xbd\x9c>", 899, 899},
    {"gptoss-tiny-f32", 905, 896, 898, "<|channel|>", 900, 902}, /* <|end|> closes a message only */
};

TEST(tokenizer_of_every_shared_model_loads_and_round_trips)
{
    REQUIRE_SHARED();
    vectors v;
    if (!read_vectors("gpt-2", &v)) {
        free_vectors(&v);
        FAIL("cannot read the gpt-2 vectors");
    }
    for (size_t k = 0; k < sizeof tiny_models / sizeof tiny_models[0]; k++) {
        const tiny_ref *ref = &tiny_models[k];
        char path[512], text[256], why[256] = "";
        util_shared_model_path(ref->file, path, sizeof path);
        hydra_model *m;
        hydra_status st = util_open_model(path, &m);
        if (st == HYDRA_OK)
            st = hydra_tokenizer_load(m);
        if (st != HYDRA_OK) {
            free_vectors(&v);
            hydra_model_close(m);
            FAIL("%s: %s: %s", ref->file, hydra_strerror(st), hydra_last_error());
        }
        for (size_t i = 0; i < v.n && why[0] == '\0'; i++) {
            size_t n = 0;
            hydra_token *ids = tokenize(m, v.text[i], v.text_len[i], false, false, &n);
            if (ids == NULL || !round_trips(m, ids, n, v.text[i], v.text_len[i]))
                snprintf(why, sizeof why, "text %zu does not round-trip", i);
            free(ids);
        }
        snprintf(text, sizeof text, "Hi %s there", ref->special);
        size_t n = 0;
        hydra_token *ids = tokenize(m, text, strlen(text), false, true, &n);
        if (why[0] == '\0' && (ids == NULL || n < 3 || ids[n - 2] != ref->special_id))
            snprintf(why, sizeof why, "'%s' is not token %d", ref->special, ref->special_id);
        if (why[0] == '\0' && (hydra_vocab_size(m) != ref->n_vocab || hydra_token_bos(m) != ref->bos ||
                               hydra_token_eos(m) != ref->eos))
            snprintf(why, sizeof why, "vocab %d bos %d eos %d", hydra_vocab_size(m), hydra_token_bos(m),
                     hydra_token_eos(m));
        if (why[0] == '\0' && (!hydra_token_is_eog(m, ref->eos) || hydra_token_is_eog(m, ref->not_eog)))
            snprintf(why, sizeof why, "end-of-generation set: eos %d, token %d", ref->eos, ref->not_eog);
        free(ids);
        hydra_model_close(m);
        if (why[0] != '\0') {
            free_vectors(&v);
            FAIL("%s: %s", ref->file, why);
        }
    }
    free_vectors(&v);
}

/* ------------------------------------------------------------------ speed */

/* CPU time of this thread: the machine may be shared, and the bounds are
 * about the tokenizer's work, not about the neighbours'. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* About 1 MB of the mixed-script test texts (Khmer, emoji, CJK, code,
 * runs of spaces and digits), repeated. */
static char *megabyte_of_text(size_t *len)
{
    char path[512];
    size_t inp_len;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-oss.gguf.inp", test_shared_dir());
    char *inp = (char *)util_read_file(path, &inp_len);
    size_t want = 1 << 20;
    char *text = inp != NULL ? malloc(want + inp_len) : NULL;
    *len = 0;
    while (text != NULL && *len < want) {
        memcpy(text + *len, inp, inp_len);
        *len += inp_len;
    }
    free(inp);
    return text;
}

/* Tokenizes text with a vocabulary, checks that it decodes back, prints
 * the CPU time.  false with the reason in why on failure, or when it took
 * over 3 s (a generous bound, for a loaded CI machine; sanitizer builds only
 * print the time). */
static bool timed_round_trip(const char *name, const char *text, size_t len, const char *what, char *why,
                             size_t why_len)
{
    hydra_model *m = vocab_model(name, why, why_len);
    if (m == NULL)
        return false;
    size_t n = 0;
    double t0 = cpu_seconds();
    hydra_token *ids = tokenize(m, text, len, false, true, &n);
    double elapsed = cpu_seconds() - t0;
    bool back = ids != NULL && round_trips(m, ids, n, text, len);
    free(ids);
    printf("  tokenizer %-12s %s: %zu tokens in %.3f s CPU\n", name, what, n, elapsed);
    if (!back)
        return snprintf(why, why_len, "%s: %s did not tokenize and decode back: %s", name, what, hydra_last_error()),
               false;
#ifndef UNDER_SANITIZER
    if (elapsed > 3.0)
        return snprintf(why, why_len, "%s: %.2f s CPU for %s", name, elapsed, what), false;
#endif
    return true;
}

TEST(tokenizer_tokenizes_a_megabyte_well_under_a_second)
{
    REQUIRE_SHARED();
    static const char *const names[] = {"gpt-oss", "qwen3", "deepseek-llm", "llama-spm"};
    size_t len;
    char *text = megabyte_of_text(&len);
    CHECK(text != NULL);
    char what[64], why[1200];
    snprintf(what, sizeof what, "%zu bytes of mixed text", len);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!timed_round_trip(names[k], text, len, what, why, sizeof why)) {
            free(text);
            FAIL("%s", why);
        }
    free(text);
}

/* Long runs that a naive backtracking matcher rescans from every position. */
TEST(tokenizer_long_runs_stay_linear)
{
    REQUIRE_SHARED();
    static const char *const names[] = {"deepseek-llm", "gpt-oss"};
    size_t len = 200000;
    char *text = malloc(len + 2);
    CHECK(text != NULL);
    memset(text, ' ', len);
    text[len] = '7'; /* spaces before a digit: deepseek-llm's \s+$ fails at every start */
    text[len + 1] = 'A';
    char why[1200];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!timed_round_trip(names[k], text, len + 2, "200000 spaces, a digit", why, sizeof why)) {
            free(text);
            FAIL("%s", why);
        }
    free(text);
}
