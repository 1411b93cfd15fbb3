/*
 * refcheck.h — llama.cpp's reference outputs in ../shared/ref (README.md
 * there): a model's prompt, greedy continuation and pass bars, its logits,
 * and the KL / top-1 score of candidate logits against them.  The engine
 * tests (test_engine_ref.c) and the hydra-run tests (test_run_generate.c)
 * judge by the same rules.
 */
#ifndef HYDRA_TEST_REFCHECK_H
#define HYDRA_TEST_REFCHECK_H

#include "hydra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ../shared/ref/README.md: every reference has a 200-token prompt and a
 * 32-token greedy continuation. */
enum { REF_PROMPT = 200, REF_GREEDY = 32 };

typedef struct ref_case {
    int32_t prompt[REF_PROMPT];
    int32_t greedy[REF_GREEDY];
    int n_vocab;
    double max_kl_mean, min_top1; /* tolerances.json */
    int min_greedy_match;
} ref_case;

/* Reads NAME.json and NAME's bars in tolerances.json; false if either is
 * missing or malformed. */
bool ref_load(const char *name, ref_case *r);

/* A file of REF_PROMPT x n_vocab floats, such as NAME.logits.f32; NULL if
 * it cannot be read or has another size.  *size (may be NULL) gets the
 * bytes read, 0 if none.  Free with free(). */
float *ref_read_logits(const char *path, int n_vocab, size_t *size);

/* "<shared>/ref/NAME.logits.f32" into path. */
const char *ref_logits_path(const char *name, char *path, size_t len);

/* ref_load, then NAME's logits into *logits (free with free()); false,
 * saying which file could not be read into why, when either fails. */
bool ref_load_with_logits(const char *name, ref_case *r, float **logits, char *why, size_t why_len);

/* ../shared/ref/dequant/dequant-f32.f32, the quantisers' shared source:
 * REF_QUANT_SOURCE floats, ffn_up's 8 rows of 512 (row 2 starts with 256
 * zeros), then ffn_down_exps' 4 rows of 768.  Its path goes into path and
 * the bytes read into *size; NULL if it cannot be read or has another
 * size.  Free with free(). */
enum { REF_QUANT_SOURCE = 7168 };
float *ref_read_quant_source(char *path, size_t len, size_t *size);

/* The first maximum of x[0, n): the reference's greedy and top-1 take it. */
int ref_argmax(const float *x, int n);

typedef struct ref_score {
    double kl;   /* mean KL(softmax(ref) || softmax(got)) per row, in double; INFINITY if not finite */
    double top1; /* fraction of rows whose argmax (first maximum) agrees */
} ref_score;

ref_score ref_score_rows(const float *ref, const float *got, int n_rows, int n_vocab);

/* Whether a score is within the case's bars. */
bool ref_passes(const ref_case *r, ref_score s);

/* The reference's run on s: the prompt in one batch (every row's logits
 * into batch), then REF_GREEDY greedy ids into greedy, each decoded. */
hydra_status ref_run_greedy(hydra_session *s, const ref_case *r, float *batch, int32_t *greedy);

/* How many leading ids of a and b (n each) agree. */
int ref_same_prefix(const int32_t *a, const int32_t *b, int n);

#endif
