/*
 * mm_tile.cuh — what the prefill tile kernels share (matmul.cu: float
 * weights; mmq.cu: quantised weights): which weight matrix and which
 * activation and output rows a block works on, and the output store.
 *
 * Dense launches: grid row y is activation rows BN y .. BN y + BN - 1.
 * Grouped launches (experts): a tile of gk_moe_group holds up to
 * GK_TILE_TOK slots of one expert; a kernel with BN < GK_TILE_TOK takes a
 * tile in GK_TILE_TOK / BN grid rows, y / parts the tile and y % parts
 * the part.
 */
#ifndef HYDRA_CUDA_MM_TILE_CUH
#define HYDRA_CUDA_MM_TILE_CUH

#include "common.cuh"

/* Which rows a block reads and writes. */
struct mm_tile {
    const uint8_t *w;
    int expert; /* grouped: the tile's expert; dense: -1 */
    int count;  /* valid activation rows */
};

/* Fills act_row / out_row (-1 beyond the tile) and returns the matrix; a
 * block past the last tile gets count 0. */
template <int BN>
static inline __device__ mm_tile mm_setup(const gk_mat &w, int n_tok, const gk_route *routes, const gk_groups &g,
                                          bool grouped, bool gather, int32_t *act_row, int32_t *out_row)
{
    static_assert(GK_TILE_TOK % BN == 0, "a grouped tile splits into whole parts");
    enum { PARTS = GK_TILE_TOK / BN };
    mm_tile t;
    int first;
    if (grouped) {
        const int tile = (int)blockIdx.y / PARTS, part = (int)blockIdx.y % PARTS;
        if (tile >= *g.n_tiles) {
            t.w = NULL;
            t.expert = -1;
            t.count = 0;
            return t;
        }
        const int32_t *e = g.tiles + 4 * tile;
        t.expert = e[0];
        t.w = expert_matrix(w, e[0]);
        first = e[1] + BN * part;
        t.count = min(BN, e[2] - BN * part);
    } else {
        t.w = w.data;
        t.expert = -1;
        first = (int)blockIdx.y * BN;
        t.count = min(BN, n_tok - first);
    }
    for (int n = threadIdx.x; n < BN; n += blockDim.x) {
        const bool valid = n < t.count;
        const int slot = first + n;
        out_row[n] = valid ? slot : -1;
        act_row[n] = !valid ? -1 : grouped && gather ? routes[g.order[slot]].token : slot;
    }
    return t;
}

/* Grid rows of a launch: activation-row tiles (dense) or gk_moe_group
 * tiles in parts. */
template <int BN> static inline unsigned mm_grid_rows(int n_tok, const gk_groups *g, bool grouped)
{
    return grouped ? (unsigned)g->max_tiles * (GK_TILE_TOK / BN) : (unsigned)((n_tok + BN - 1) / BN);
}

static inline __device__ void mm_store(const gk_out &out, int64_t r, int64_t row, float v)
{
    if (out.bias != NULL)
        v += out.bias[r];
    float *dst = out.y + row * out.y_stride + r;
    *dst = out.accumulate ? *dst + v : v;
}

/* mmq.cu: the quantised formats' launch (w->type a GQ_FOR_EACH_QUANT type,
 * n_cols % 64 == 0; x's f16 form read).  w2 not NULL: the up
 * matrix of a GLU pair with w (same type and shape); the output is then
 * silu(W . x) * (W2 . x). */
int mmq_launch(gpuStream_t s, const gk_mat *w, const gk_mat *w2, const gk_act *x, int n_tok, const gk_out *out,
               const gk_route *routes, const gk_groups *g, bool grouped, bool gather);
/* Whether mmq_launch_stack takes these matrices: quantised, one row length,
 * one type but the last, which may be another in a supported pair. */
bool mmq_stacks(const gk_mat *const *w, int n_mats);
/* n_mats (<= 3) dense matrices over the same n_tok rows of x in one launch,
 * matrix m into out[m], reading x's columns x_col[m] on (x_col NULL: 0). */
int mmq_launch_stack(gpuStream_t s, const gk_mat *const *w, const gk_out *out, int n_mats, const gk_act *x,
                     const int64_t *x_col, int n_tok);
enum { MQ_TILE_ROWS = 64, MQ_TILE_TOK = 64 }; /* mmq.cu's block tile */

#endif
