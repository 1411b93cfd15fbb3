/*
 * cpu_features.h — what this CPU and its OS let hydra run, read once from
 * CPUID (x86-64) or the build target (aarch64).  A feature counts only when
 * the OS also saves its registers (XCR0), since an instruction the kernel
 * does not context-switch corrupts state across threads.
 */
#ifndef HYDRA_CPU_FEATURES_H
#define HYDRA_CPU_FEATURES_H

#include <stdbool.h>

typedef struct cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni;
    bool avx512vbmi; /* vpermb, vpermi2b, vpmultishiftqb */
    bool gfni;       /* gf2p8affineqb: bit-matrix maps of each byte */
    bool avx_vnni;  /* the VEX-encoded vpdpbusd on 256-bit registers */
    bool neon, dotprod;
} cpu_features;

/* This CPU's features; computed on first call, thread-safe, never NULL. */
const cpu_features *cpu_features_get(void);

/* Whether f has every instruction of x86_target.h's X86_SET_AVX2,
 * X86_SET_AVXVNNI, X86_SET_AVX512 and X86_SET_AVX512VBMI. */
bool cpu_has_avx2_set(const cpu_features *f);
bool cpu_has_avxvnni_set(const cpu_features *f);
bool cpu_has_avx512_set(const cpu_features *f);
bool cpu_has_avx512vbmi_set(const cpu_features *f);

/* "avx2 fma f16c avx512f ..." into buf, for logs and the benchmark. */
const char *cpu_features_describe(const cpu_features *f, char *buf, int size);

#endif
