/*
 * synth_mix.h — how synth.c applies a type mix (synth.h's synth_mix) to
 * the weight matrices of a planned file.
 */
#ifndef HYDRA_SYNTH_MIX_H
#define HYDRA_SYNTH_MIX_H

#include "synth.h"

#include <stddef.h>
#include <stdint.h>

typedef struct synth_mix_tensor {
    const char *name; /* "blk.3.ffn_down_exps.weight" */
    uint32_t type;    /* receives the mix's choice */
} synth_mix_tensor;

/* The type every weight matrix gets unless a rule says otherwise (QT_COUNT
 * for SYNTH_MIX_NONE), and llama.cpp's general.file_type of the mix. */
uint32_t synth_mix_base_type(synth_mix m);
uint32_t synth_mix_file_type(synth_mix m);

/* Sets t[i].type for the weight matrices t[0..n), listed in file order, by
 * p->mix and the model's shape; does nothing for SYNTH_MIX_NONE. */
void synth_mix_apply(const synth_params *p, synth_mix_tensor *t, size_t n);

#endif
