/*
 * quant_iq.h — the scalar references of the lattice formats IQ1_S, IQ1_M,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (quant_iq.c) and the ternary
 * TQ1_0, TQ2_0 (quant_tq.c), all against Q8_K, with the contract of
 * quant_ref.h: exact to_float, integer sums per sub-block in vec_dot, a
 * plain quantiser (no importance matrix) in from_float.
 */
#ifndef HYDRA_QUANT_IQ_H
#define HYDRA_QUANT_IQ_H

#include "quant_ref.h"

QUANT_REF_WEIGHT(iq2_xxs) /* . Q8_K */
QUANT_REF_WEIGHT(iq2_xs)  /* . Q8_K */
QUANT_REF_WEIGHT(iq2_s)   /* . Q8_K */
QUANT_REF_WEIGHT(iq3_xxs) /* . Q8_K */
QUANT_REF_WEIGHT(iq3_s)   /* . Q8_K */
QUANT_REF_WEIGHT(iq1_s)   /* . Q8_K */
QUANT_REF_WEIGHT(iq1_m)   /* . Q8_K */
QUANT_REF_WEIGHT(tq1_0)   /* . Q8_K */
QUANT_REF_WEIGHT(tq2_0)   /* . Q8_K */

#endif
