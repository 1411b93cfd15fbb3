/*
 * mtp.h — drafting with a model's own multi-token-prediction (MTP / NextN)
 * block (DeepSeek-V3 technical report, section 2.2; GLM-4.5), for the
 * speculative decoder (src/spec.c, docs/SPECULATIVE.md).
 *
 * MTP row i reads the token t_{i+1} and the target's hidden state h_i of
 * position i, and predicts t_{i+2}:
 *
 *   x_i    = eh_proj . [enorm(embed(t_{i+1})) | hnorm(h_i)]
 *   y_i    = the MTP block (attention over its own cache, row i at
 *            position i; then its FFN) applied to x_i
 *   logits = head(shared_head_norm(y_i))
 *
 * h_i is the state the target's head reads, output_norm of its residual
 * stream (DeepSeek's modeling code hands the main model's normed output to
 * the MTP module).  Drafting k > 1 chains the block on its own output: the
 * row after i reads the drafted token and shared_head_norm(y_i) in place
 * of the target's state (as llama.cpp and vLLM chain one MTP block).
 * Rows from the target's states are "true" rows; chained rows are dropped
 * by the next mtp_sync, which recomputes them from the verify pass's
 * states once the target has evaluated their tokens.
 */
#ifndef HYDRA_MTP_H
#define HYDRA_MTP_H

#include "hydra.h"

#include <stdint.h>

typedef struct mtp_drafter mtp_drafter;

/* A drafter over target's first MTP block, its own cache as long as the
 * target's context; on the target's device when it runs on CUDA
 * (src/gpu/gpu_mtp.h).  HYDRA_ERR_UNSUPPORTED when the model has no bound
 * MTP block or the target is split over several GPUs.  From now on the
 * target keeps the hidden states of its steps. */
hydra_status mtp_new(hydra_session *target, mtp_drafter **out);
void mtp_free(mtp_drafter *m);

/* Rows [0, n) of the cache from the target: row i from tokens[i + 1] and
 * the target's hidden state of position i, which must be among the rows of
 * its last evaluation step unless the drafter already holds row i (true
 * rows it holds are kept; chained rows are recomputed).  tokens holds at
 * least n + 1 entries.  Afterwards mtp_logits is row n - 1's prediction
 * (none when n is 0). */
hydra_status mtp_sync(mtp_drafter *m, const hydra_token *tokens, int64_t n);

/* One chained row: token t at the next position with the state the last
 * row produced. */
hydra_status mtp_chain(mtp_drafter *m, hydra_token t);

/* The last row's logits (n_vocab), NULL when there is none. */
const float *mtp_logits(const mtp_drafter *m);

/* True rows held (from the target's states). */
int64_t mtp_n_rows(const mtp_drafter *m);

/* Keeps rows [0, n) at most. */
void mtp_truncate(mtp_drafter *m, int64_t n);

/* The most rows one step evaluates (the target's n_batch). */
int64_t mtp_n_batch(const mtp_drafter *m);

/* On CUDA, catch-up steps evaluate width rows (padded; the speculative
 * decoder's verify width) where the context and n_batch allow, so that
 * one captured graph serves them all; 0: the rows needed.  The CPU
 * ignores it (a padded CPU row is only extra work). */
hydra_status mtp_set_width(mtp_drafter *m, int64_t width);

/* CUDA graphs the drafter's block session captured (0 on the CPU). */
uint64_t mtp_graph_captures(const mtp_drafter *m);

#endif
