/*
 * x86_target.h — the x86 instruction sets the kernel files are compiled
 * for, named once: the target string of each set and the pragmas that
 * compile the rest of a file for it (GCC's "#pragma GCC target" holds to
 * the end of the file; clang's "attribute push" applies to the functions
 * up to the matching pop).  The CPU test for each set is in
 * cpu_features.h (cpu_has_*_set), so that a file is chosen only on a CPU
 * that has every instruction its target string allows.
 */
#ifndef HYDRA_X86_TARGET_H
#define HYDRA_X86_TARGET_H

#define X86_SET_AVX2 "avx2,fma,f16c"
#define X86_SET_AVXVNNI "avxvnni,avx2,fma,f16c"
#define X86_SET_AVX512 "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define X86_SET_AVX512VBMI "avx512vbmi,gfni," X86_SET_AVX512

/* The set argument is expanded before X86_PRAGMA turns it into the
 * pragma's text (C11 6.10.3.1: # does not expand, a plain argument does). */
#define X86_PRAGMA(...) _Pragma(#__VA_ARGS__)
#if defined(__clang__)
#define X86_TARGET_BEGIN(set) X86_PRAGMA(clang attribute push(__attribute__((target(set))), apply_to = function))
#define X86_TARGET_END X86_PRAGMA(clang attribute pop)
#else
#define X86_TARGET_BEGIN(set) X86_PRAGMA(GCC target(set))
#define X86_TARGET_END
#endif

#endif
