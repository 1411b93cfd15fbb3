/*
 * gpu_mtp.h — the MTP (NextN) block on the CUDA device, for the drafter of
 * src/mtp.c when the target session runs on CUDA (formula and row
 * convention in src/mtp.h).
 *
 * The block runs as a CUDA session of its own over the one-block view of
 * the model that src/mtp.c builds (its weights, its KV cache, its graphs),
 * whose "embedding table" is an F32 table of n_batch rows in device memory
 * that the rows' inputs x_i are written into.  x_i is made on the device
 * from the target's residual rows, which stay in the target session's
 * scratch until its next step, so no hidden state crosses the bus: only
 * the token ids go up and the last row's logits come back.
 *
 * Without CUDA=1, gpu_off.c answers HYDRA_ERR_UNSUPPORTED.
 */
#ifndef HYDRA_GPU_MTP_H
#define HYDRA_GPU_MTP_H

#include "gpu.h"

typedef struct gpu_mtp gpu_mtp;

/* Where the states of a call's rows come from. */
typedef enum gpu_mtp_source {
    GPU_MTP_TARGET, /* rows row0 .. of the target's last step (output_norm applied here) */
    GPU_MTP_KEPT,   /* one row: the target state of the last sync's last row, kept on the device */
    GPU_MTP_CHAIN,  /* one row: the block's own last row (shared_head_norm applied here) */
} gpu_mtp_source;

/* The block of view (one layer, the MTP block without its nextn.* roles;
 * its embedding the F32 table of n_batch rows; its head the MTP head) on
 * target's device; mtp: the MTP block with its nextn.* roles (eh_proj,
 * enorm, hnorm, embed_tokens when bound); target_w: the target's weights.
 * view and its layer are copied.  HYDRA_ERR_UNSUPPORTED for a target split
 * over several devices. */
hydra_status gpu_mtp_create(gpu_mtp **out, gpu_session *target, const model_weights *target_w,
                            const model_weights *view, const layer_weights *mtp);
void gpu_mtp_free(gpu_mtp *m); /* NULL is allowed */

/* From now on catch-up calls (sources other than GPU_MTP_CHAIN) of at
 * most width rows evaluate width rows, every row's logits computed, where
 * the context holds them: one step structure, one captured graph.  The
 * rows after the real ones repeat the last token; their cache positions
 * are rewritten before anything reads them.  0: exact rows. */
hydra_status gpu_mtp_set_width(gpu_mtp *m, int64_t width);

/* n rows at positions pos0 ..: tokens[r] with the states of src.  logits:
 * row n - 1's (n_vocab floats). */
hydra_status gpu_mtp_rows(gpu_mtp *m, const int32_t *tokens, int64_t n, int64_t pos0, gpu_mtp_source src,
                          int64_t row0, float *logits);

/* The block session's step and graph counters. */
void gpu_mtp_stats(const gpu_mtp *m, gpu_stats *out);

#endif
