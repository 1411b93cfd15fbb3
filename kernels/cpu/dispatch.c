/*
 * dispatch.c — picks the SIMD kernels this CPU runs.  Until the SIMD paths
 * land every type keeps its scalar reference.
 */
#include "quant.h"

#include <stddef.h>

void quant_cpu_dispatch(quant_traits *table, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (table[i].vec_dot == NULL)
            table[i].vec_dot = table[i].vec_dot_ref;
}
