/*
 * session_hidden.h — what a session lends the MTP drafter (src/mtp.c):
 * its bound weights, thread pool (or CUDA session) and cache settings, and
 * the final hidden states (the residual stream before output_norm) of the
 * rows of its last forward step: copied to the host on the CPU, left in the
 * device session's scratch on CUDA (src/gpu/gpu_mtp.h reads them there).
 * Implemented in src/session.c.
 */
#ifndef HYDRA_SESSION_HIDDEN_H
#define HYDRA_SESSION_HIDDEN_H

#include "hydra.h"

#include "threads.h"
#include "weights.h"

typedef struct session_parts {
    const model_weights *w;
    thread_pool *pool;
    uint32_t kv_type; /* QT_F16 or QT_F32 */
    int64_t n_batch, n_ctx;
    int n_threads;
    struct gpu_session *gpu; /* the CUDA backend's session; NULL on the CPU */
} session_parts;

/* Starts keeping the hidden rows of every step from now on and lends the
 * parts. */
hydra_status session_keep_hidden(hydra_session *s, session_parts *out);

/* The final hidden state (n_embd floats, before output_norm) of position
 * pos, when pos was a row of the last evaluation step of hydra_session_eval
 * and is still below n_past; NULL otherwise. */
const float *session_hidden_row(const hydra_session *s, int64_t pos);

/* The index of position pos among the rows of the last evaluation step
 * (the row of the device session's residual rows on CUDA), under the same
 * conditions; -1 otherwise. */
int64_t session_hidden_index(const hydra_session *s, int64_t pos);

#endif
