/*
 * attn_decode.cu — attention of one token over a short cache (max_kv <=
 * GK_ATTN_DECODE_MAX_KV), the decode step's case.  attention.cu's
 * flash-decoding put one block on each (chunk, KV head), the chunks' partials
 * combined by a second launch; at short contexts that is a few blocks, each
 * a long chain of dependent steps (Nsight, docs/PERFORMANCE.md "CUDA
 * decode, session 5": 4 blocks, 13.6 + 3.4 us a layer).  Here:
 *
 *   - one block per (chunk of AD_CHUNK positions, KV head, AD_QS of the
 *     KV head's query heads): with AD_QS = 1, 8x the blocks, each with an
 *     eighth of the work, for a GQA group of 8 (against AD_QS = 2, tg128
 *     381 -> 389 t/s on the H200, every CUDA test passing: docs/
 *     PERFORMANCE.md, "Final device runs of session 6");
 *   - every cache row of the chunk (K and V) is requested at the start,
 *     before the rope, so their loads overlap it (the token's own row,
 *     not yet in the cache, comes from shared memory, rounded as the cache
 *     holds it, so the scores are those of rope-then-attention);
 *   - the block that finishes a head's last chunk combines the chunks
 *     (tail.cuh's fence-then-count), and a head of one chunk needs no
 *     combine at all: no second launch.
 *
 * Scratch: GK_ATTN_COUNTERS words of counters (zero between launches),
 * then per (query head, chunk) two floats (max, sum of exponentials) and
 * the head_dim_v unnormalised sums, as attention.cu lays them out.
 */
#include "attn_decode.cuh"

template <bool F16, bool ROPE>
__global__ void __launch_bounds__(AD_THREADS) k_attn_decode(gk_attn a, gk_rope r, const gk_step *step)
{
    gpu_pdl_wait();
    ad_item<F16, ROPE>(a, r, step->pos0, blockIdx.x, blockIdx.y);
}

extern "C" bool gk_attention_decode_fits(const gk_attn *a)
{
    const int group = a->n_head_kv > 0 ? a->n_head / a->n_head_kv : 0;
    return a->n_tok == 1 && a->tok0 == 0 && a->max_kv <= GK_ATTN_DECODE_MAX_KV && group >= 1 &&
           a->n_head % a->n_head_kv == 0 && a->n_head / ad_qs(group) <= GK_ATTN_COUNTERS &&
           a->head_dim_k % 8 == 0 && a->head_dim_k <= AD_MAX_DIM && a->head_dim_v % 8 == 0 &&
           a->head_dim_v <= AD_MAX_DIM && a->k_row % 8 == 0 && a->v_row % 8 == 0 &&
           (a->out_q == NULL || a->head_dim_v % GPU_WARP == 0);
}

/* rope NULL: the queries and the token's K, V row are in place already. */
extern "C" int gk_attention_decode(gpuStream_t s, const gk_attn *a, const gk_rope *rope, const gk_step *step)
{
    if (!gk_attention_decode_fits(a))
        return (int)gpuErrorInvalidValue;
    const dim3 grid((unsigned)ad_chunks(a->max_kv), (unsigned)(a->n_head / ad_qs(a->n_head / a->n_head_kv)));
    const gk_rope r = rope != NULL ? *rope : gk_rope{};
    if (rope != NULL)
        return a->kv_f16 ? gk_launch(k_attn_decode<true, true>, grid, AD_THREADS, 0, s, *a, r, step)
                         : gk_launch(k_attn_decode<false, true>, grid, AD_THREADS, 0, s, *a, r, step);
    return a->kv_f16 ? gk_launch(k_attn_decode<true, false>, grid, AD_THREADS, 0, s, *a, r, step)
                     : gk_launch(k_attn_decode<false, false>, grid, AD_THREADS, 0, s, *a, r, step);
}
