/*
 * weights.h — a model's tensors bound to their roles by the architecture
 * descriptor, every shape checked against the hyperparameters, every type
 * checked against what the type table can compute.  The tensors stay in the
 * model's mapping: a binding is a pointer and a shape.
 */
#ifndef HYDRA_WEIGHTS_H
#define HYDRA_WEIGHTS_H

#include "hydra.h"

#include "../model/arch.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wtensor {
    const uint8_t *data; /* in the model's image; NULL when not bound */
    uint32_t type;
    int64_t ne[3];
    size_t row_bytes; /* one row of ne[0] values */
    size_t mat_bytes; /* one ne[0] x ne[1] matrix: one expert of a stacked tensor */
} wtensor;

typedef struct layer_weights {
    wtensor w[W_COUNT]; /* per-layer roles; the model-wide slots stay empty */
    bool moe;           /* experts (else a dense FFN) */
    uint32_t window;    /* sliding-window attention over this many positions; 0: all */
} layer_weights;

typedef struct model_weights {
    const arch_desc *arch;
    arch_hparams hp;
    wtensor global[W_COUNT]; /* model-wide roles */
    layer_weights *layer;    /* hp.n_layer entries */
    layer_weights *nextn;    /* n_nextn MTP blocks (blocks hp.n_layer ..), with their nextn.* roles */
    uint32_t n_nextn;        /* 0: the file has none (or stores hp.n_nextn blocks without nextn.eh_proj) */
} model_weights;

/* Binds model's tensors by its architecture's descriptor.  Fails naming the
 * architecture, key or tensor (with its expected shape) that is missing,
 * mis-shaped or of a type hydra cannot compute.  Free with weights_free. */
hydra_status weights_bind(model_weights *out, const hydra_model *model);
void weights_free(model_weights *w); /* zeroes *w; safe on a zeroed one */

/* The F32 values of a vector tensor (gain, bias); NULL when not bound. */
static inline const float *wt_f32(const wtensor *t)
{
    return (const float *)t->data;
}

#endif
