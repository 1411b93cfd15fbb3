/*
 * cpu_features.c — CPUID and XGETBV decoding (cpu_features.h).  Bit
 * positions are Intel SDM vol. 2A, CPUID: leaf 1 ECX (FMA 12, OSXSAVE 27,
 * AVX 28, F16C 29); leaf 7 subleaf 0 EBX (AVX2 5, AVX512F 16, AVX512BW 30,
 * AVX512VL 31), ECX (AVX512_VBMI 1, GFNI 8, AVX512_VNNI 11); leaf 7 subleaf
 * 1 EAX (AVX_VNNI 4).
 * XCR0: bits 1-2 SSE/AVX state, bits 5-7 opmask and ZMM state.
 */
#include "cpu_features.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static bool bit(uint32_t word, int n)
{
    return (word >> n) & 1u;
}

static void detect(cpu_features *f)
{
    uint32_t a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    if (!bit(c, 27) || !bit(c, 28)) /* no OSXSAVE or no AVX: no YMM at all */
        return;
    uint64_t xcr0 = read_xcr0();
    bool ymm_saved = (xcr0 & 0x6) == 0x6;
    bool zmm_saved = ymm_saved && (xcr0 & 0xe0) == 0xe0;
    if (!ymm_saved)
        return;
    bool fma = bit(c, 12), f16c = bit(c, 29);
    uint32_t max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = bit(b, 5);
    f->fma = fma;
    f->f16c = f16c;
    f->avx512f = zmm_saved && bit(b, 16);
    f->avx512bw = zmm_saved && bit(b, 30);
    f->avx512vl = zmm_saved && bit(b, 31);
    f->avx512vnni = zmm_saved && bit(c, 11);
    f->avx512vbmi = zmm_saved && bit(c, 1);
    f->gfni = bit(c, 8);
    if (a >= 1) { /* leaf 7 reports its last subleaf in EAX */
        uint32_t a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        f->avx_vnni = bit(a1, 4);
    }
}
#elif defined(__aarch64__)
static void detect(cpu_features *f)
{
    f->neon = true; /* mandatory in AArch64 */
#if defined(__ARM_FEATURE_DOTPROD)
    f->dotprod = true;
#endif
}
#else
static void detect(cpu_features *f)
{
    (void)f;
}
#endif

static cpu_features features;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

static void detect_features(void)
{
    detect(&features);
}

const cpu_features *cpu_features_get(void)
{
    pthread_once(&detect_once, detect_features);
    return &features;
}

const char *cpu_features_describe(const cpu_features *f, char *buf, int size)
{
    static const struct {
        const char *name;
        size_t offset;
    } names[] = {
        {"avx2", offsetof(cpu_features, avx2)},         {"fma", offsetof(cpu_features, fma)},
        {"f16c", offsetof(cpu_features, f16c)},         {"avx512f", offsetof(cpu_features, avx512f)},
        {"avx512bw", offsetof(cpu_features, avx512bw)}, {"avx512vl", offsetof(cpu_features, avx512vl)},
        {"avx512vnni", offsetof(cpu_features, avx512vnni)}, {"avx512vbmi", offsetof(cpu_features, avx512vbmi)},
        {"gfni", offsetof(cpu_features, gfni)},         {"avxvnni", offsetof(cpu_features, avx_vnni)},
        {"neon", offsetof(cpu_features, neon)},         {"dotprod", offsetof(cpu_features, dotprod)},
    };
    int used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        bool on;
        memcpy(&on, (const char *)f + names[i].offset, sizeof on);
        if (on && used < size)
            used += snprintf(buf + used, (size_t)(size - used), "%s%s", used ? " " : "", names[i].name);
    }
    if (used == 0)
        snprintf(buf, (size_t)size, "scalar");
    return buf;
}

bool cpu_has_avx2_set(const cpu_features *f)
{
    return f->avx2 && f->fma && f->f16c;
}

bool cpu_has_avxvnni_set(const cpu_features *f)
{
    return f->avx_vnni && cpu_has_avx2_set(f);
}

bool cpu_has_avx512_set(const cpu_features *f)
{
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && cpu_has_avx2_set(f);
}

bool cpu_has_avx512vbmi_set(const cpu_features *f)
{
    return f->avx512vbmi && f->gfni && cpu_has_avx512_set(f);
}
