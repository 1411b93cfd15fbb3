/*
 * synth_vocab.c — the synthetic models' byte-level BPE vocabulary (see
 * synth_vocab.h).
 *
 * Byte tokens follow GPT-2's bytes_to_unicode: the 188 printable Latin-1
 * bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves and come first
 * (token ids 0..187, in byte order), the other 68 bytes are written as
 * U+0100, U+0101, ... in byte order (ids 188..255) — so a space is "Ġ"
 * (U+0120).  Merges are learned by plain BPE training: split the text into
 * GPT-2-style pieces (a word keeps its leading space), then repeatedly merge
 * the most frequent adjacent pair (ties: the lowest pair of ids).
 */
#include "synth_vocab.h"

#include "error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- the families */

typedef struct special_token {
    const char *text;
    int32_t type;
} special_token;

struct synth_family {
    const char *name;
    const char *pre;               /* tokenizer.ggml.pre */
    const special_token *specials; /* appended after the BPE tokens */
    uint32_t n_specials;
    int bos, eos, unk, pad;        /* indices into specials; -1: no such key */
    int add_bos, add_eos;          /* 0/1; -1: no key */
    const char *chat_template;
};

#define CTRL(s) {s, SYNTH_TOKEN_CONTROL}
#define USER(s) {s, SYNTH_TOKEN_USER_DEFINED}
#define COUNT(a) (uint32_t)(sizeof(a) / sizeof((a)[0]))

/* Special tokens and their types as llama.cpp's converter marks them in the
 * reference files of ../shared/models (README.md there, "Tokenizer"). */
static const special_token qwen3_specials[] = {
    CTRL("<|endoftext|>"), CTRL("<|im_start|>"),   CTRL("<|im_end|>"),
    USER("<tool_call>"),   USER("</tool_call>"),   USER("<think>"),
    USER("</think>"),      USER("<tool_response>"), USER("</tool_response>"),
};
static const special_token qwen2_specials[] = {
    CTRL("<|endoftext|>"), CTRL("<|im_start|>"),    CTRL("<|im_end|>"),       USER("<tool_call>"),
    USER("</tool_call>"),  USER("<tool_response>"), USER("</tool_response>"),
};
static const special_token mistral_specials[] = {
    CTRL("<unk>"),         CTRL("<s>"),            CTRL("</s>"),           CTRL("[INST]"),
    CTRL("[/INST]"),       CTRL("[AVAILABLE_TOOLS]"), CTRL("[/AVAILABLE_TOOLS]"), CTRL("[TOOL_RESULTS]"),
    CTRL("[/TOOL_RESULTS]"), CTRL("[TOOL_CALLS]"),
};
static const special_token deepseek_specials[] = {
    CTRL("<｜begin▁of▁sentence｜>"), CTRL("<｜end▁of▁sentence｜>"), CTRL("<｜▁pad▁｜>"),
    CTRL("<｜User｜>"),              CTRL("<｜Assistant｜>"),       USER("<think>"),
    USER("</think>"),               CTRL("<｜tool▁calls▁begin｜>"), CTRL("<｜tool▁calls▁end｜>"),
    CTRL("<｜tool▁call▁begin｜>"),   CTRL("<｜tool▁call▁end｜>"),   CTRL("<｜tool▁outputs▁begin｜>"),
    CTRL("<｜tool▁outputs▁end｜>"),  CTRL("<｜tool▁output▁begin｜>"), CTRL("<｜tool▁output▁end｜>"),
    CTRL("<｜tool▁sep｜>"),
};
static const special_token gptoss_specials[] = {
    CTRL("<|startoftext|>"), CTRL("<|endoftext|>"), CTRL("<|return|>"), CTRL("<|constrain|>"), CTRL("<|channel|>"),
    CTRL("<|start|>"),       CTRL("<|end|>"),       CTRL("<|message|>"), CTRL("<|call|>"),
};

/* Short templates in each family's prompt format (the real ones are pages
 * long; these say only how turns are marked). */
static const char chatml_template[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
static const char mistral_template[] =
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}{%- endif %}"
    "{%- endfor %}";
static const char deepseek_template[] =
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- '<｜User｜>' + message['content'] }}"
    "{%- elif message['role'] == 'assistant' %}{{- '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<｜Assistant｜>' }}{%- endif %}";
static const char harmony_template[] =
    "{%- for message in messages %}"
    "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}";

static const synth_family families[] = {
    {"qwen3", "qwen2", qwen3_specials, COUNT(qwen3_specials), 0, 2, -1, 0, 0, -1, chatml_template},
    {"qwen2", "qwen2", qwen2_specials, COUNT(qwen2_specials), 0, 2, -1, 0, 0, -1, chatml_template},
    {"mistral", "tekken", mistral_specials, COUNT(mistral_specials), 1, 2, 0, -1, 1, 0, mistral_template},
    {"deepseek-v3", "deepseek-v3", deepseek_specials, COUNT(deepseek_specials), 0, 1, -1, 2, 1, 0, deepseek_template},
    {"gpt-oss", "gpt-4o", gptoss_specials, COUNT(gptoss_specials), 0, 2, -1, 1, -1, -1, harmony_template},
};

const synth_family *synth_family_find(const char *name)
{
    for (uint32_t i = 0; i < COUNT(families); i++)
        if (strcmp(families[i].name, name) == 0)
            return &families[i];
    return NULL;
}

/* ------------------------------------------------------ training corpus */

/* Original prose; its only job is to give a few hundred frequent pairs. */
static const char corpus[] =
    "The river runs past the old mill and under the stone bridge, where the children of the village "
    "stand in the evening and throw small boats made of paper into the water. Some of the boats sink "
    "at once; others turn in the current and drift out of sight, and the children argue about which one "
    "will reach the sea. Their parents remember doing the same thing when they were young, and their "
    "grandparents remember it too. Nobody has ever seen a boat arrive anywhere, but that has never "
    "stopped anyone from trying.\n"
    "In the morning the baker opens the shop before the sun comes up. He mixes flour, water, salt and "
    "a little yeast, folds the dough, and leaves it to rise while he sweeps the floor and counts the "
    "coins in the drawer. By seven o'clock there is a line at the door. People buy bread, and they also "
    "buy the news: who is getting married, whose roof is leaking, which field will be planted first this "
    "year. The baker listens more than he talks, and that is why everyone likes him.\n"
    "A machine that reads text does something similar. It listens to every word, keeps a short summary "
    "of what it has heard, and uses that summary to guess what comes next. When the guess is good, the "
    "machine seems to understand; when the guess is bad, it seems to be dreaming. The numbers inside it "
    "are only numbers, and the words it writes are only the words it has seen most often in places like "
    "this one.\n"
    "There are many ways to build such a machine. One way is to give it a large number of small experts "
    "and a router that chooses, for every word, which experts should work on it. Each expert learns a "
    "little, the router learns where to send each question, and the whole system costs less to run "
    "than one giant network of the same size. The difficulty is that the experts must be kept busy in a "
    "fair way, or some of them will learn everything while others learn nothing at all.\n"
    "Winter is long in the hills. The snow arrives in November and stays until the end of March, and "
    "during those months the roads are closed for days at a time. Families keep wood stacked against "
    "the walls of their houses and food stored in the cellar. In the evenings they sit together, tell "
    "stories, mend clothes, and listen to the wind. When spring comes at last, the river rises with the "
    "melting snow, and the children run back to the bridge with new boats in their hands.\n"
    "Counting is the first thing a student learns and the last thing a scientist forgets: one, two, "
    "three, four, five, six, seven, eight, nine, ten. Every measurement is a count of something, and "
    "every count is a promise that the thing counted stayed the same while it was being counted. That "
    "promise is often broken, which is why careful people count twice and write down what they found.\n";

/* ------------------------------------------------------ byte tokens */

static bool byte_stands_for_itself(unsigned b)
{
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

/* token_of_byte[b]: the id of byte b's token; text[id]: its UTF-8 form. */
typedef struct byte_tokens {
    uint32_t token_of_byte[256];
    char text[256][3];
} byte_tokens;

static void byte_tokens_init(byte_tokens *bt)
{
    uint32_t id = 0, extra = 0;
    uint32_t codepoint[256];
    for (unsigned b = 0; b < 256; b++)
        if (byte_stands_for_itself(b))
            codepoint[id] = b, bt->token_of_byte[b] = id++;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_stands_for_itself(b))
            codepoint[id] = 0x100 + extra++, bt->token_of_byte[b] = id++;
    for (id = 0; id < 256; id++) {
        uint32_t c = codepoint[id]; /* < 0x800: one or two UTF-8 bytes */
        if (c < 0x80)
            bt->text[id][0] = (char)c, bt->text[id][1] = 0;
        else
            bt->text[id][0] = (char)(0xc0 | (c >> 6)), bt->text[id][1] = (char)(0x80 | (c & 0x3f)),
            bt->text[id][2] = 0;
    }
}

/* ------------------------------------------------------ BPE training */

enum { MAX_LEARNED_TOKENS = 400 };

typedef struct bpe {
    char **tok;          /* token strings: 256 byte tokens, then learned ones */
    uint32_t n_tok, cap_tok;
    char **merges;
    uint32_t n_merges, cap_merges;
    uint32_t *sym;       /* every piece's symbols, back to back */
    uint32_t *piece_len; /* symbols in each piece (shrinks as merges apply) */
    size_t *piece_at;    /* where each piece starts in sym */
    size_t n_pieces;
    uint64_t *pairs;     /* scratch: (left << 32 | right) per adjacent pair */
} bpe;

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static int char_class(char c)
{
    return is_space(c) ? 0 : is_alpha(c) ? 1 : is_digit(c) ? 2 : 3;
}

/* End of the GPT-2-style piece starting at i: a run of one class with an
 * optional leading space, or a whitespace run that leaves its last space to
 * the word after it. */
static size_t piece_end(const char *s, size_t n, size_t i)
{
    if (is_space(s[i]) && !(s[i] == ' ' && i + 1 < n && !is_space(s[i + 1]))) {
        size_t j = i;
        while (j < n && is_space(s[j]))
            j++;
        return (j < n && s[j - 1] == ' ' && j - 1 > i) ? j - 1 : j;
    }
    if (s[i] == ' ')
        i++;
    int cls = char_class(s[i]);
    while (i < n && char_class(s[i]) == cls)
        i++;
    return i;
}

static hydra_status bpe_split(bpe *b, const byte_tokens *bt)
{
    size_t n = sizeof corpus - 1;
    b->sym = malloc(n * sizeof *b->sym);
    b->piece_len = malloc(n * sizeof *b->piece_len);
    b->piece_at = malloc(n * sizeof *b->piece_at);
    b->pairs = malloc(n * sizeof *b->pairs);
    if (!b->sym || !b->piece_len || !b->piece_at || !b->pairs)
        return hydra_fail(HYDRA_ERR_NOMEM, "synthetic vocabulary: out of memory");
    for (size_t i = 0; i < n; i++)
        b->sym[i] = bt->token_of_byte[(unsigned char)corpus[i]];
    for (size_t i = 0; i < n;) {
        size_t end = piece_end(corpus, n, i);
        b->piece_at[b->n_pieces] = i;
        b->piece_len[b->n_pieces++] = (uint32_t)(end - i);
        i = end;
    }
    return HYDRA_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The most frequent adjacent pair (lowest ids on ties) and its count. */
static uint32_t most_frequent_pair(bpe *b, uint64_t *best)
{
    size_t n = 0;
    for (size_t p = 0; p < b->n_pieces; p++) {
        const uint32_t *s = b->sym + b->piece_at[p];
        for (uint32_t i = 0; i + 1 < b->piece_len[p]; i++)
            b->pairs[n++] = (uint64_t)s[i] << 32 | s[i + 1];
    }
    qsort(b->pairs, n, sizeof *b->pairs, cmp_u64);
    uint32_t best_count = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && b->pairs[j] == b->pairs[i])
            j++;
        if (j - i > best_count)
            best_count = (uint32_t)(j - i), *best = b->pairs[i];
        i = j;
    }
    return best_count;
}

static void apply_merge(bpe *b, uint32_t left, uint32_t right, uint32_t merged)
{
    for (size_t p = 0; p < b->n_pieces; p++) {
        uint32_t *s = b->sym + b->piece_at[p];
        uint32_t out = 0;
        for (uint32_t i = 0; i < b->piece_len[p]; i++) {
            bool hit = i + 1 < b->piece_len[p] && s[i] == left && s[i + 1] == right;
            s[out++] = hit ? merged : s[i];
            i += hit;
        }
        b->piece_len[p] = out;
    }
}

static hydra_status push_str(char ***arr, uint32_t *n, uint32_t *cap, char *s)
{
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "synthetic vocabulary: out of memory");
    if (*n == *cap) {
        uint32_t c = *cap ? 2 * *cap : 512;
        char **q = realloc(*arr, c * sizeof *q);
        if (q == NULL) {
            free(s);
            return hydra_fail(HYDRA_ERR_NOMEM, "synthetic vocabulary: out of memory");
        }
        *arr = q, *cap = c;
    }
    (*arr)[(*n)++] = s;
    return HYDRA_OK;
}

static char *concat(const char *a, const char *sep, const char *b)
{
    size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
    char *s = malloc(n);
    if (s != NULL)
        snprintf(s, n, "%s%s%s", a, sep, b);
    return s;
}

static int64_t token_id(const bpe *b, const char *text)
{
    for (uint32_t i = 0; i < b->n_tok; i++)
        if (strcmp(b->tok[i], text) == 0)
            return i;
    return -1;
}

/* One merge step; *done when no pair repeats or the budget is spent. */
static hydra_status learn_one(bpe *b, uint32_t budget, bool *done)
{
    uint64_t pair = 0;
    if (most_frequent_pair(b, &pair) < 2)
        return *done = true, HYDRA_OK;
    uint32_t left = (uint32_t)(pair >> 32), right = (uint32_t)pair;
    char *text = concat(b->tok[left], "", b->tok[right]);
    if (text == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "synthetic vocabulary: out of memory");
    /* Two merges can spell the same string ("a"+"bc", "ab"+"c"): reuse it. */
    int64_t merged = token_id(b, text);
    if (merged < 0 && b->n_tok - 256 >= budget) {
        free(text);
        return *done = true, HYDRA_OK;
    }
    hydra_status st = HYDRA_OK;
    if (merged < 0) {
        merged = b->n_tok;
        st = push_str(&b->tok, &b->n_tok, &b->cap_tok, text);
    } else {
        free(text);
    }
    if (st == HYDRA_OK)
        st = push_str(&b->merges, &b->n_merges, &b->cap_merges, concat(b->tok[left], " ", b->tok[right]));
    if (st == HYDRA_OK)
        apply_merge(b, left, right, (uint32_t)merged);
    return st;
}

static hydra_status bpe_train(bpe *b, uint32_t budget)
{
    byte_tokens bt;
    byte_tokens_init(&bt);
    hydra_status st = HYDRA_OK;
    for (uint32_t i = 0; i < 256 && st == HYDRA_OK; i++)
        st = push_str(&b->tok, &b->n_tok, &b->cap_tok, strdup(bt.text[i]));
    if (st == HYDRA_OK)
        st = bpe_split(b, &bt);
    for (bool done = false; st == HYDRA_OK && !done;)
        st = learn_one(b, budget, &done);
    return st;
}

static void bpe_free_scratch(bpe *b)
{
    free(b->sym);
    free(b->piece_len);
    free(b->piece_at);
    free(b->pairs);
}

/* ------------------------------------------------------ the vocabulary */

static hydra_status append_tail(synth_vocab *v, uint32_t *cap, uint32_t n_vocab)
{
    const synth_family *f = v->family;
    hydra_status st = HYDRA_OK;
    for (uint32_t i = 0; i < f->n_specials && st == HYDRA_OK; i++)
        st = push_str(&v->tokens, &v->n_tokens, cap, strdup(f->specials[i].text));
    char pad[32];
    while (st == HYDRA_OK && v->n_tokens < n_vocab) {
        snprintf(pad, sizeof pad, "[PAD%u]", v->n_tokens);
        st = push_str(&v->tokens, &v->n_tokens, cap, strdup(pad));
    }
    return st;
}

static hydra_status assign_types(synth_vocab *v, uint32_t n_bpe)
{
    v->types = malloc(v->n_tokens * sizeof *v->types);
    if (v->types == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "synthetic vocabulary: out of memory");
    const synth_family *f = v->family;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        v->types[i] = i < n_bpe ? SYNTH_TOKEN_NORMAL
                    : i < n_bpe + f->n_specials ? f->specials[i - n_bpe].type
                                                : SYNTH_TOKEN_UNUSED;
    return HYDRA_OK;
}

hydra_status synth_vocab_build(synth_vocab *v, const synth_family *family, uint32_t n_vocab)
{
    memset(v, 0, sizeof *v);
    v->family = family;
    uint32_t fixed = 256 + family->n_specials;
    if (n_vocab != 0 && n_vocab < fixed)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "vocabulary of %u tokens: the %s tokenizer needs at least %u "
                          "(256 byte tokens + %u special)", n_vocab, family->name, fixed, family->n_specials);
    uint32_t budget = n_vocab == 0 || n_vocab - fixed > MAX_LEARNED_TOKENS ? MAX_LEARNED_TOKENS : n_vocab - fixed;
    bpe b = {0};
    hydra_status st = bpe_train(&b, budget);
    bpe_free_scratch(&b);
    v->tokens = b.tok, v->n_tokens = b.n_tok;
    v->merges = b.merges, v->n_merges = b.n_merges;
    uint32_t n_bpe = b.n_tok, cap = b.cap_tok;
    v->first_special = n_bpe;
    if (st == HYDRA_OK)
        st = append_tail(v, &cap, n_vocab);
    if (st == HYDRA_OK)
        st = assign_types(v, n_bpe);
    if (st != HYDRA_OK)
        synth_vocab_free(v);
    return st;
}

void synth_vocab_free(synth_vocab *v)
{
    for (uint32_t i = 0; i < v->n_tokens; i++)
        free(v->tokens[i]);
    for (uint32_t i = 0; i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->merges);
    free(v->types);
    memset(v, 0, sizeof *v);
}

/* An id key for special token `index`, when the family has one. */
static hydra_status add_special_id(const synth_vocab *v, gguf_writer *w, const char *key, int index)
{
    if (index < 0)
        return HYDRA_OK;
    return gguf_writer_add_u32(w, key, v->first_special + (uint32_t)index);
}

static hydra_status add_flag(gguf_writer *w, const char *key, int value)
{
    return value < 0 ? HYDRA_OK : gguf_writer_add_bool(w, key, value != 0);
}

hydra_status synth_vocab_write_keys(const synth_vocab *v, gguf_writer *w)
{
    const synth_family *f = v->family;
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(w, "tokenizer.ggml.pre", f->pre);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n_tokens);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", v->types, v->n_tokens);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    add_special_id(v, w, "tokenizer.ggml.bos_token_id", f->bos);
    add_special_id(v, w, "tokenizer.ggml.eos_token_id", f->eos);
    add_special_id(v, w, "tokenizer.ggml.unknown_token_id", f->unk);
    add_special_id(v, w, "tokenizer.ggml.padding_token_id", f->pad);
    add_flag(w, "tokenizer.ggml.add_bos_token", f->add_bos);
    add_flag(w, "tokenizer.ggml.add_eos_token", f->add_eos);
    return gguf_writer_add_str(w, "tokenizer.chat_template", f->chat_template);
}
