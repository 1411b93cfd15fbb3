/*
 * quant_iq_fit.h — the search behind the lattice formats' quantisers
 * (quant_iq_fit.c): fits a 256-value super-block to sub-block scales
 * d * unit * (2l + 1) and grid points, leaving the packing to each format
 * (quant_iq.c).  No importance matrix: every value weighs the same.
 */
#ifndef HYDRA_QUANT_IQ_FIT_H
#define HYDRA_QUANT_IQ_FIT_H

#include <stdint.h>

/* The grids of iq_grids.h. */
enum { IQ_GRID_2XXS, IQ_GRID_2XS, IQ_GRID_2S, IQ_GRID_3XXS, IQ_GRID_3S, IQ_GRID_1S, IQ_GRID_COUNT };

/* Delta of the IQ1 formats: none, one per 32 values (IQ1_S), one per 8
 * (IQ1_M). */
enum { IQ_DELTA_NONE = 0, IQ_DELTA_PER_32 = 32, IQ_DELTA_PER_8 = 8 };

typedef struct iq_shape {
    int grid;       /* IQ_GRID_* */
    int scale_sub;  /* values per sub-block scale: 16 or 32 */
    int l_max;      /* scale codes 0..l_max */
    float unit;     /* sub-block scale = d * unit * (2l + 1) */
    int even_signs; /* signs of each 8 values negate an even count (7 stored bits) */
    int delta;      /* IQ_DELTA_* */
} iq_shape;

/* A fitted super-block, ready to pack.  Grid points cover 8 values (IQ1,
 * IQ2: idx[0..31]) or 4 (IQ3: idx[0..63]), in value order. */
typedef struct iq_fit {
    uint16_t d;            /* f16 bits */
    uint8_t l[16];         /* scale code per scale sub-block */
    uint16_t idx[64];      /* grid index per grid point */
    uint8_t sign[32];      /* per 8 values: bit j set = value j negative (IQ2, IQ3) */
    uint8_t neg_delta[32]; /* per 8 values: 1 = delta -1/8 (IQ1) */
} iq_fit;

void iq_fit_superblock(const float *x, const iq_shape *shape, iq_fit *fit);

#endif
