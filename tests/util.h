/*
 * util.h — small helpers shared by tests: whole-file reads, JSON loading,
 * scratch paths in the build folder, running a built tool, opening a
 * shared model.
 */
#ifndef HYDRA_TEST_UTIL_H
#define HYDRA_TEST_UTIL_H

#include "hydra.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reads a whole file; NULL on failure.  Free with free(). */
uint8_t *util_read_file(const char *path, size_t *size);

/* Writes bytes to a file; 0 on success. */
int util_write_file(const char *path, const void *data, size_t size);

/* Parses a JSON file; NULL on failure.  Free with cJSON_Delete(). */
cJSON *util_read_json(const char *path);

/* "<build dir>/test-scratch/<name>", creating the folder. */
const char *util_scratch_path(const char *name);

/* A tool's output file as a string: NUL bytes (a random-weight model may
 * print them) become 0x01, so that string functions see all of it.  NULL
 * on failure; free with free(). */
char *util_read_output(const char *path);

/* A tool run as a user runs it: its exit status (-1 if it did not exit
 * normally) and what it printed, as util_read_output reads it. */
typedef struct tool_run {
    int status;
    char *out, *err;
} tool_run;

/* Runs "ENV <build dir>/TOOL ARGS" in a child shell (env may be NULL),
 * input (may be NULL: empty) as its stdin, stdout and stderr captured in
 * scratch files; false if the output could not be read back. */
bool util_run_tool(const char *env, const char *tool, const char *args, const char *input, tool_run *r);
void tool_run_free(tool_run *r);

/* Opens the GGUF file at path with the default model parameters. */
hydra_status util_open_model(const char *path, hydra_model **m);

/* Writes the synthetic model p (src/synth.h) to the scratch file NAME
 * and opens it. */
struct synth_params;
hydra_status util_open_synth(const struct synth_params *p, const char *name, hydra_model **m);

/* The model of a synth preset, written to the scratch file
 * "PREFIX-PRESET.gguf" and opened. */
hydra_status util_open_synth_preset(const char *preset, const char *prefix, hydra_model **m);

/* Writes the synthetic model p to the scratch file NAME and reads the file
 * back whole; NULL on failure.  Free with free(). */
uint8_t *util_synth_bytes(const struct synth_params *p, const char *name, size_t *size);

/* Whether the synthetic models a and b (written to the scratch files
 * name_a and name_b) are the same bytes: the writer's reproducibility. */
bool util_synth_same_bytes(const struct synth_params *a, const char *name_a, const struct synth_params *b,
                           const char *name_b);

/* Evaluates tokens 1, 100, 200 and 300 in s and counts the non-finite
 * logits after them into *nonfinite (untouched when the evaluation fails). */
hydra_status util_eval_nonfinite(hydra_session *s, size_t *nonfinite);

/* util_eval_nonfinite in a new CPU session over m (32 positions, 2
 * threads; freed after): the session's creation status, else the
 * evaluation's. */
hydra_status util_model_nonfinite(const hydra_model *m, size_t *nonfinite);

/* A session over m with the default parameters but n_ctx, n_batch and
 * n_threads. */
hydra_status util_new_session(const hydra_model *m, uint32_t n_ctx, uint32_t n_batch, int n_threads, hydra_session **s);

/* The default sampler parameters at temperature 0: greedy. */
hydra_sampler_params util_greedy_params(void);

/* Plain greedy decoding on s (the sampler at temperature 0, ties broken as
 * the decoders break them): evaluates prompt, then samples n_out tokens
 * into out, decoding each but the last. */
hydra_status util_greedy_decode(hydra_session *s, const hydra_token *prompt, size_t n_prompt, hydra_token *out,
                                int n_out);

/* "<shared>/models/NAME.gguf" into path; returns path. */
const char *util_shared_model_path(const char *name, char *path, size_t len);

/* Opens ../shared/models/NAME.gguf with the default model parameters. */
hydra_status util_open_shared_model(const char *name, hydra_model **m);

#endif
