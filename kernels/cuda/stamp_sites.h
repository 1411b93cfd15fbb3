/*
 * stamp_sites.h — the phases a profiling build stamps (stamp.cuh) and the
 * ring they go to, shared by the kernels and the host side that arms and
 * prints it (src/gpu/gpu_stamps.c).  X(site, name, what): in a decode
 * layer's order; "first" is the launch's block 0 (thread 0), "tail" the
 * block that ends the launch's work.
 */
#ifndef HYDRA_CUDA_STAMP_SITES_H
#define HYDRA_CUDA_STAMP_SITES_H

#include <stdint.h>

#define GK_STAMP_SITES(X)                                                                                        \
    X(GS_QKV_WAIT, "qkv.wait", "Q/K/V launch, first block past its PDL wait")                                   \
    X(GS_QKV_DOTS, "qkv.dots", "... its dots summed (its trigger)")                                              \
    X(GS_ATT_WAIT, "attn.wait", "attention, first block past its PDL wait")                                      \
    X(GS_ATT_ATTEND, "attn.attend", "... softmax and values summed (its trigger)")                               \
    X(GS_ATT_STORE, "attn.store", "... its heads' output stored")                                                \
    X(GS_AOR_WAIT, "aor.wait", "attention output + router, first block past its PDL wait")                       \
    X(GS_AOR_COUNT, "aor.count", "... the first block's cluster counted")                                       \
    X(GS_AOR_TAIL, "aor.tail", "... the tail block found (the last count)")                                      \
    X(GS_AOR_PARTIALS, "aor.partials", "... the tail's partials and scale loaded")                               \
    X(GS_AOR_RANKED, "aor.ranked", "... the tail's top-k ranked")                                                \
    X(GS_AOR_ROUTES, "aor.routes", "... the routes written (and handed over)")                                   \
    X(GS_XT_ROUTE, "experts.route", "experts, block (0, 0) has its route")                                       \
    X(GS_XT_GATEUP, "experts.gateup", "... its gate/up pairs done")                                              \
    X(GS_XT_HIDDEN, "experts.hidden", "... the route's hidden row staged (the route barrier passed)")            \
    X(GS_XT_DOWN, "experts.down", "... its down rows stored")                                                    \
    X(GS_CB_WAIT, "combine.wait", "combine, block 0 past its PDL wait")                                          \
    X(GS_CB_X, "combine.x", "... x stored (its trigger)")                                                        \
    X(GS_CB_NORM, "combine.norm", "... the next layer's normed row stored")                                      \
    X(GS_HEAD_WAIT, "head.wait", "output head, block 0 past its PDL wait")                                       \
    X(GS_HEAD_DONE, "head.done", "... block 0's tiles done")

#define GK_STAMP_ENUM_(site, name, what) site,
enum { GK_STAMP_SITES(GK_STAMP_ENUM_) GS_N };
#undef GK_STAMP_ENUM_

/* Appended while armed: a token's 48 layers at ~20 stamps is ~1000. */
enum { GK_STAMP_MAX = 16384 };
typedef struct gk_stamp_ring {
    unsigned armed, n;
    unsigned long long t[GK_STAMP_MAX];
    unsigned site[GK_STAMP_MAX];
} gk_stamp_ring;

#endif
