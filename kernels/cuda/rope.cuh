/*
 * rope.cuh — RoPE angles on the device as op_rope_cache_ext computes them
 * (kernels/cpu/ops.c): theta_extrap = pos * theta_scale^i as a running
 * float product (ggml's recurrence), theta_interp = freq_scale *
 * theta_extrap; with YaRN (ext_factor != 0) the two mixed by the ramp over
 * the correction dimensions and cos/sin scaled by 1 + 0.1 ln(1 /
 * freq_scale); always scaled by attn_factor.  R is any launch struct with
 * those fields (gk_rope, gk_mla).
 */
#ifndef HYDRA_CUDA_ROPE_CUH
#define HYDRA_CUDA_ROPE_CUH

#include "common.cuh"

/* cos and sin of pair i from its theta_extrap (pos * theta_scale^i by
 * the running product). */
template <class R> static inline __device__ void rope_cos_sin_of(const R &r, float theta_extrap, int i, float *c, float *s)
{
    const float theta_interp = r.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = r.attn_factor;
    if (r.ext_factor != 0.0f) {
        const float y = ((float)i - r.corr_low) / fmaxf(0.001f, r.corr_high - r.corr_low);
        const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * r.ext_factor;
        theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / r.freq_scale);
    }
    *c = cosf(theta) * mscale;
    *s = sinf(theta) * mscale;
}

template <class R> static inline __device__ void rope_cos_sin(const R &r, int pos, int i, float *c, float *s)
{
    float theta_extrap = (float)pos;
    for (int k = 0; k < i; k++)
        theta_extrap *= r.theta_scale;
    rope_cos_sin_of(r, theta_extrap, i, c, s);
}

/* The two dimensions pair i of a head rotates: neighbours (normal, GPT-J)
 * or i and i + n_rot / 2 (NeoX). */
static inline __device__ void rope_pair(bool neox, int n_rot, int i, int *a, int *b)
{
    *a = neox ? i : 2 * i;
    *b = neox ? i + n_rot / 2 : 2 * i + 1;
}

#endif
