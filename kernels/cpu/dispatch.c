/*
 * dispatch.c — picks the kernels this CPU runs: the scalar references, then
 * each SIMD set (simd.h) that cpu_features says runs here, in ascending
 * preference, each overriding the entries it implements.  vec_dot_ref is
 * never touched: it stays the definition of correct.
 */
#include "simd.h"
#include "vec_dot_iq.h"

#include <stddef.h>

const simd_kernels *const simd_kernel_sets[] = {
#if defined(__x86_64__)
    &simd_avx2,
    &simd_iq_avx2,
    &simd_avxvnni,
    &simd_avx512,
    &simd_iq_avx512,
    &simd_iq_avx512vbmi,
    &simd_iq1_avx512vbmi,
#elif defined(__aarch64__)
    &simd_neon,
#endif
    NULL, /* keeps the array non-empty on targets without a SIMD set */
};
const int simd_kernel_set_count = (int)(sizeof simd_kernel_sets / sizeof simd_kernel_sets[0]) - 1;

void quant_cpu_dispatch(quant_traits *table, uint32_t n)
{
    const cpu_features *f = cpu_features_get();
    for (uint32_t i = 0; i < n; i++)
        table[i].vec_dot = table[i].vec_dot_ref;
    for (int s = 0; s < simd_kernel_set_count; s++) {
        const simd_kernels *set = simd_kernel_sets[s];
        if (!set->runs_on(f))
            continue;
        for (uint32_t i = 0; i < n && i < QT_COUNT; i++)
            if (set->vec_dot[i] != NULL && table[i].vec_dot_ref != NULL)
                table[i].vec_dot = set->vec_dot[i];
    }
}

/* The best running set with a vec_dot for wtype: the one dispatch chose. */
static const simd_kernels *set_of_vec_dot(uint32_t wtype)
{
    const cpu_features *f = cpu_features_get();
    const simd_kernels *best = NULL;
    for (int s = 0; s < simd_kernel_set_count; s++)
        if (simd_kernel_sets[s]->vec_dot[wtype] != NULL && simd_kernel_sets[s]->runs_on(f))
            best = simd_kernel_sets[s];
    return best;
}

quant_vec_dot_rows_fn quant_cpu_vec_dot_rows(uint32_t wtype)
{
    if (wtype >= QT_COUNT)
        return NULL;
    const simd_kernels *set = set_of_vec_dot(wtype);
    return set != NULL ? set->vec_dot_rows[wtype] : NULL;
}

quant_gemm_fn quant_cpu_gemm(uint32_t wtype)
{
    if (wtype >= QT_COUNT)
        return NULL;
    const simd_kernels *set = set_of_vec_dot(wtype);
    return set != NULL ? set->gemm[wtype] : NULL;
}

quant_from_float_fn quant_cpu_act_quantizer(uint32_t act_type)
{
    if (act_type >= QT_COUNT)
        return NULL;
    const cpu_features *f = cpu_features_get();
    quant_from_float_fn best = NULL;
    for (int s = 0; s < simd_kernel_set_count; s++)
        if (simd_kernel_sets[s]->quantize[act_type] != NULL && simd_kernel_sets[s]->runs_on(f))
            best = simd_kernel_sets[s]->quantize[act_type];
    return best;
}
