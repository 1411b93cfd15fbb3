/*
 * synth_weights.h — the tensor data of synthetic models: seeded
 * pseudo-random values, quantised by the type table's reference
 * quantisers, produced in order a batch of row chunks at a time.  A tensor
 * is cut into chunks of a fixed number of rows and every chunk has its own
 * seed, so the bytes depend on the seed and the tensor alone, never on the
 * number of threads.
 *
 * Three options change what is drawn (synth_weight_style):
 *  - fast: a weight matrix's rows are copies of a small pool of
 *    SYNTH_FAST_POOL_ROWS rows quantised once per tensor, each row's pick
 *    drawn from the chunk's seed, so a file is written at the speed of
 *    memcpy and the disk instead of the reference quantisers' ~200 ns a
 *    value.  The blocks are valid and random; the matrices have low rank
 *    (benchmarks only, never accuracy).
 *  - router_skew S > 0: expert popularity like trained models' (roughly
 *    Zipf).  Every token embedding gets a shared unit direction m (and is
 *    drawn larger, so that each token's identity survives 48 random
 *    layers); row e of every MoE router gets b_e * m / sqrt(n_embd), with
 *    b_e = -2 S ln(1 + rank_e) centred over the layer, rank_e a per-layer
 *    random permutation.  The normed hidden state keeps a component along
 *    m, so expert e's logit carries a bias proportional to b_e: popularity
 *    falls with rank roughly as a power law (measured exponent ~0.9 at
 *    S 1; constants and measurements in synth_weights.c and
 *    docs/HYBRID.md).  S 0 leaves files exactly as before.
 *  - zero_head_norms: the head norms (SR_HEAD_NORM) are zeros, so every
 *    logit is 0; other tensors are drawn as without it.
 */
#ifndef HYDRA_SYNTH_WEIGHTS_H
#define HYDRA_SYNTH_WEIGHTS_H

#include "hydra.h"
#include "synth_arch.h"

#include <stdbool.h>
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

typedef struct synth_weight_style {
    bool fast;            /* weight matrices from a pool of quantised rows */
    float router_skew;    /* 0: routers as drawn (uniform popularity) */
    bool zero_head_norms; /* SR_HEAD_NORM tensors written as zeros */
} synth_weight_style;

typedef struct synth_weights synth_weights;

/* n_threads 0: one per online processor.  style NULL: neither option. */
hydra_status synth_weights_create(synth_weights **out, int n_threads, const synth_weight_style *style);
void synth_weights_free(synth_weights *w); /* NULL allowed */

/* Generates one tensor's data and hands it to sink, batch by batch. */
hydra_status synth_weights_stream(synth_weights *w, const synth_weight_tensor *t, uint64_t seed, synth_sink_fn sink,
                                  void *user);

#endif
