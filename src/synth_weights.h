/*
 * synth_weights.h — the tensor data of synthetic models: seeded
 * pseudo-random values, quantised by the type table's reference
 * quantisers, produced in order a batch of row chunks at a time.  A tensor
 * is cut into chunks of a fixed number of rows and every chunk has its own
 * seed, so the bytes depend on the seed and the tensor alone, never on the
 * number of threads.
 */
#ifndef HYDRA_SYNTH_WEIGHTS_H
#define HYDRA_SYNTH_WEIGHTS_H

#include "hydra.h"
#include "synth_arch.h"

#include <stddef.h>
#include <stdint.h>

typedef struct synth_weight_tensor {
    const char *name;  /* mixed into the seed */
    uint32_t type;     /* a type with from_float */
    uint64_t row_len;  /* ne[0] */
    uint64_t n_rows;   /* the other dims' product */
    synth_role role;   /* how values are drawn */
} synth_weight_tensor;

/* Receives the tensor's bytes in order; a failure stops the stream. */
typedef hydra_status (*synth_sink_fn)(const void *bytes, size_t n, void *user);

typedef struct synth_weights synth_weights;

/* n_threads 0: one per online processor. */
hydra_status synth_weights_create(synth_weights **out, int n_threads);
void synth_weights_free(synth_weights *w); /* NULL allowed */

/* Generates one tensor's data and hands it to sink, batch by batch. */
hydra_status synth_weights_stream(synth_weights *w, const synth_weight_tensor *t, uint64_t seed, synth_sink_fn sink,
                                  void *user);

#endif
