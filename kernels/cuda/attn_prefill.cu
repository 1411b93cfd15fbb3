/*
 * attn_prefill.cu — causal attention of a prefill batch over an F16 KV
 * cache on the tensor cores, tiled flash-attention style: one block per
 * (64 tokens, query head); for every 64-position tile of the cache up to
 * the tile's last token the block computes the scores S = Q K^T (mma.cuh's
 * m16n8k16, f16 inputs, f32 accumulators), the running softmax (max and
 * sum per row, earlier partial sums rescaled as the max grows), and
 * O += P V with P rounded to f16, so the cache rows are read once per
 * token tile instead of once per token (attention.cu's flash-decoding
 * kernel, which prefill used before, reads them for every token).
 *
 * The same function as gk_attention: token t of the launch sits at
 * position pos0 + tok0 + t and sees the cache rows 0 .. its position.
 * Rounding: the cache is F16 already; the queries and the probabilities
 * are rounded to f16 (2^-11 relative), the sums stay f32.
 *
 * A warp owns 16 query rows.  The scores' accumulator layout is the A
 * fragment layout of the P V product, so P never leaves registers; V's
 * fragments come from shared memory through ldmatrix's transposing form.
 */
#include "common.cuh"
#include "mma.cuh"

enum { AP_BQ = 64, AP_BK = 64, AP_THREADS = 128 };

static_assert(AP_BQ == 16 * (AP_THREADS / GPU_WARP), "a warp owns 16 query rows");

/* Two f32 as an f16 pair (low first), in an int as the fragments hold it. */
static inline __device__ int ap_pack(float lo, float hi)
{
    const half2 p = __floats2half2_rn(lo, hi);
    return *(const int *)&p;
}

/* b[0], b[1] of the B fragment B[k][n] = V[kv0 + k][n0 + n] for k < 16,
 * n < 8 from a row-major [position][dim] tile (ld halves a row). */
static inline __device__ void ap_ld_v(const half *tile, int ld, int k0, int n0, int b[2])
{
    const int lane = threadIdx.x % GPU_WARP;
#if defined(HYDRA_HIP)
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 2; i++) {
        const half lo = tile[(k0 + 8 * i + 2 * t) * ld + n0 + g], hi = tile[(k0 + 8 * i + 2 * t + 1) * ld + n0 + g];
        const half2 p = __halves2half2(lo, hi);
        b[i] = *(const int *)&p;
    }
#else
    /* lanes 0-7 address rows k0 .. k0 + 7, lanes 8-15 rows k0 + 8 .. (the
     * .x2 form reads the first 16 addresses) */
    const half *row = tile + (k0 + lane % 16) * ld + n0;
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(addr));
#endif
}

template <int D> struct ap_smem {
    half k[AP_BK * (D + 8)];
    half v[AP_BK * (D + 8)];
};

/* Copies cache rows kv0 .. kv0 + AP_BK - 1 of KV head g (rows past last
 * as zeros, so masked products stay finite). */
template <int D>
static inline __device__ void ap_load_kv(ap_smem<D> &sm, const gk_attn &a, int g, int kv0, int last)
{
    enum { LD = D + 8, PIECES = D / 8 };
    for (int i = threadIdx.x; i < AP_BK * PIECES; i += AP_THREADS) {
        const int r = i / PIECES, p = i % PIECES;
        half *dk = sm.k + r * LD + 8 * p, *dv = sm.v + r * LD + 8 * p;
        if (kv0 + r <= last) {
            cp_async16(dk, (const half *)a.k + (int64_t)(kv0 + r) * a.k_row + (int64_t)g * D + 8 * p);
            cp_async16(dv, (const half *)a.v + (int64_t)(kv0 + r) * a.v_row + (int64_t)g * D + 8 * p);
        } else {
            *(int4 *)dk = make_int4(0, 0, 0, 0);
            *(int4 *)dv = make_int4(0, 0, 0, 0);
        }
    }
    cp_async_commit();
}

template <int D>
__global__ void __launch_bounds__(AP_THREADS) k_attn_tiles(gk_attn a, const gk_step *step)
{
    enum { LD = D + 8, KD = D / 16, ND = D / 8, NS = AP_BK / 8 };
    gpu_pdl_wait();
    __shared__ __align__(16) ap_smem<D> sm;
    const int h = blockIdx.y, g = h / (a.n_head / a.n_head_kv);
    const int t0 = blockIdx.x * AP_BQ, n_rows = min(AP_BQ, a.n_tok - t0);
    const int lane = threadIdx.x % GPU_WARP, gr = lane / 4, tq = lane % 4, w = threadIdx.x / GPU_WARP;
    const int first = step->pos0 + a.tok0 + t0; /* the position of the tile's first token */
    const int last = first + n_rows - 1;
    /* this lane's query rows (tile rows 16 w + gr and + 8) as A fragments,
     * scaled by the softmax scale and log2(e) so the exponentials are exp2 */
    const float qs = a.scale * 1.44269504f;
    int qa[KD][4];
    for (int e = 0; e < 2; e++) {
        const int row = 16 * w + gr + 8 * e;
        const float *qr = a.q + (int64_t)(t0 + row) * a.n_head * D + (int64_t)h * D;
        const bool valid = row < n_rows;
#pragma unroll
        for (int kd = 0; kd < KD; kd++)
            for (int hi = 0; hi < 2; hi++) {
                const float2 v = valid ? *(const float2 *)(qr + 16 * kd + 8 * hi + 2 * tq) : make_float2(0.0f, 0.0f);
                qa[kd][e + 2 * hi] = ap_pack(v.x * qs, v.y * qs);
            }
    }
    float o[ND][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int pos_row[2] = {first + 16 * w + gr, first + 16 * w + gr + 8};
    for (int kv0 = 0; kv0 <= last; kv0 += AP_BK) {
        ap_load_kv<D>(sm, a, g, kv0, last);
        cp_async_wait_all();
        __syncthreads();
        float s[NS][4] = {};
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int kd = 0; kd < KD; kd++) {
                const half *kr = sm.k + (8 * j + gr) * LD + 16 * kd + 2 * tq;
                const int b[2] = {*(const int *)kr, *(const int *)(kr + 8)};
                mma_f16_16816(s[j], qa[kd], b);
            }
        /* causal mask, then the running max and sum of each of the two rows */
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int j = 0; j < NS; j++)
            for (int e = 0; e < 4; e++) {
                const int pos = kv0 + 8 * j + 2 * tq + (e & 1);
                if (pos > pos_row[e / 2])
                    s[j][e] = -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
            }
        float corr[2], sum[2] = {0.0f, 0.0f};
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], gpu_shfl_xor(mx[r], 1));
            mx[r] = fmaxf(mx[r], gpu_shfl_xor(mx[r], 2));
            corr[r] = exp2f(m[r] - mx[r]); /* m = -inf on the first tile: 0 */
            m[r] = mx[r];
        }
        int pa[AP_BK / 16][4];
#pragma unroll
        for (int j = 0; j < NS; j++) {
            float p[4];
            for (int e = 0; e < 4; e++) {
                p[e] = exp2f(s[j][e] - m[e / 2]);
                sum[e / 2] += p[e];
            }
            pa[j / 2][2 * (j % 2)] = ap_pack(p[0], p[1]);
            pa[j / 2][2 * (j % 2) + 1] = ap_pack(p[2], p[3]);
        }
        for (int r = 0; r < 2; r++) {
            sum[r] += gpu_shfl_xor(sum[r], 1);
            sum[r] += gpu_shfl_xor(sum[r], 2);
            l[r] = l[r] * corr[r] + sum[r];
        }
#pragma unroll
        for (int nd = 0; nd < ND; nd++) {
            o[nd][0] *= corr[0];
            o[nd][1] *= corr[0];
            o[nd][2] *= corr[1];
            o[nd][3] *= corr[1];
#pragma unroll
            for (int kb = 0; kb < AP_BK / 16; kb++) {
                int b[2];
                ap_ld_v(sm.v, LD, 16 * kb, 8 * nd, b);
                mma_f16_16816(o[nd], pa[kb], b);
            }
        }
        __syncthreads();
    }
    for (int e = 0; e < 2; e++) {
        const int row = 16 * w + gr + 8 * e;
        if (row >= n_rows)
            continue;
        const float inv = 1.0f / l[e];
        float *out = a.out + (int64_t)(t0 + row) * a.n_head * D + (int64_t)h * D;
#pragma unroll
        for (int nd = 0; nd < ND; nd++)
            *(float2 *)(out + 8 * nd + 2 * tq) = make_float2(o[nd][2 * e] * inv, o[nd][2 * e + 1] * inv);
    }
}

extern "C" bool gk_attention_tiles_fit(const gk_attn *a)
{
    const int d = a->head_dim_k;
    return a->kv_f16 && d == a->head_dim_v && (d == 64 || d == 128) && a->n_head % a->n_head_kv == 0 &&
           a->k_row % 8 == 0 && a->v_row % 8 == 0 && a->out_q == NULL;
}

extern "C" int gk_attention_tiles(gpuStream_t s, const gk_attn *a, const gk_step *step)
{
    if (!gk_attention_tiles_fit(a))
        return (int)gpuErrorInvalidValue;
    if (a->n_tok == 0)
        return 0;
    const dim3 grid((unsigned)((a->n_tok + AP_BQ - 1) / AP_BQ), (unsigned)a->n_head);
    if (a->head_dim_k == 64)
        return gk_launch(k_attn_tiles<64>, grid, AP_THREADS, 0, s, *a, step);
    return gk_launch(k_attn_tiles<128>, grid, AP_THREADS, 0, s, *a, step);
}
