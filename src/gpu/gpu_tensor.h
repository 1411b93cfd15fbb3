/*
 * gpu_tensor.h — the step of -sm tensor (gpu_tensor.c) for gpu_multi.c:
 * one session per part over the part's model view (src/split.h,
 * split_view.c), driven layer by layer across the devices with one NCCL
 * all-reduce per sublayer.
 */
#ifndef HYDRA_GPU_TENSOR_H
#define HYDRA_GPU_TENSOR_H

#include "gpu_internal.h"

#include "../split.h"

typedef struct gpu_tensor gpu_tensor;

/* Builds every part's view and session into part[0 .. plan->n_part) and
 * the all-reduce's communicators.  On failure *out is NULL and what was
 * made is freed. */
hydra_status gpu_tensor_create(gpu_tensor **out, gpu_session **part, const split_plan *plan,
                               const model_weights *w, const gpu_options *o);
/* Frees the graphs, the parts' sessions (part[i] set to NULL), then the
 * views.  NULL is allowed. */
void gpu_tensor_free(gpu_tensor *t, gpu_session **part);

/* One step over every part (as gpu_forward): each part's graph for this
 * step shape replayed, or all captured together (the all-reduces join the
 * devices' streams). */
hydra_status gpu_tensor_forward(gpu_tensor *t, gpu_session *const *part, const split_state *ss, int64_t pos0,
                                const int32_t *tokens, int64_t n, bool all_rows, float *logits);

#endif
