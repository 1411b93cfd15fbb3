/*
 * synth.h — synthetic MoE models: valid GGUF v3 files of a given
 * architecture and shape, with seeded random weights and a small byte-level
 * BPE vocabulary, laid out as llama.cpp's converter lays out the real ones
 * (key names, tensor names and shapes, F32 norms/routers/biases).  They are
 * hydra's built-in default model and the source of test and benchmark
 * models of any size: the writer streams, holding one chunk of rows at a
 * time, so a 30 GB file needs a few MB of memory.
 *
 *   synth_params p;
 *   synth_preset("tiny", &p);          // or fill the fields yourself
 *   p.n_layer = 4;
 *   synth_write("model.gguf", &p);
 */
#ifndef HYDRA_SYNTH_H
#define HYDRA_SYNTH_H

#include "hydra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Progress of synth_write in tensor-data bytes; return false to cancel
 * (synth_write then removes the partial file and fails with
 * HYDRA_ERR_CANCELLED). */
typedef bool (*synth_progress_fn)(uint64_t bytes_done, uint64_t bytes_total, void *user);

/* Per-tensor type mixes named as llama-quantize's file types: most weight
 * matrices in the mix's base type (Q4_K for Q4_K_M), some in wider types
 * by llama.cpp's rules (synth_mix.c: output.weight, part of attn_v and of
 * ffn_down in Q6_K, ...). */
/* The largest router_skew synth_check accepts (beyond it nearly every
 * token picks the same k experts). */
#define SYNTH_MAX_ROUTER_SKEW 8.0f

/* The most MTP blocks synth_check accepts (released models have 1). */
#define SYNTH_MAX_NEXTN 8

/* Rows quantised per weight matrix in the fast style (synth_params.fast). */
enum { SYNTH_FAST_POOL_ROWS = 256 };

typedef enum synth_mix { SYNTH_MIX_NONE = 0, SYNTH_MIX_Q4_K_M, SYNTH_MIX_Q5_K_M, SYNTH_MIX_IQ2_XXS_EXPS } synth_mix;

typedef struct synth_params {
    const char *arch;          /* "qwen3moe", "llama", "qwen2moe", "deepseek2", "gpt-oss" */
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_head, n_head_kv;
    uint32_t head_dim;         /* deepseek2: the per-head "nope" and value size */
    uint32_t n_expert, n_expert_used;
    uint32_t n_ff_exp;         /* hidden size of one expert */
    uint32_t n_ff;             /* feed_forward_length: deepseek2's dense blocks use it; llama must
                                  leave it 0 (its feed_forward_length is the expert size) */
    uint32_t n_ff_shexp;       /* qwen2moe: the shared expert's hidden size */
    uint32_t n_expert_shared;  /* deepseek2: shared experts, n_ff_exp each */
    uint32_t n_dense_lead;     /* deepseek2: leading dense (non-MoE) blocks */
    uint32_t q_lora_rank, kv_lora_rank, n_rot; /* deepseek2 MLA: ranks, RoPE dims per head */
    uint32_t n_expert_group, n_expert_group_used; /* deepseek2 group-limited routing */
    uint32_t n_nextn;          /* deepseek2: MTP (NextN) blocks after the n_layer main ones, as
                                  llama.cpp's converters store them (nextn_predict_layers; a full
                                  block plus blk.N.nextn.{eh_proj,enorm,hnorm,shared_head_norm}) */
    uint32_t n_vocab;          /* 0: the vocabulary's natural size (a few hundred tokens) */
    uint32_t n_ctx;            /* context_length */
    uint32_t type;             /* weight matrices: a type synth_type_writable() accepts */
    synth_mix mix;             /* SYNTH_MIX_NONE: every weight matrix in `type`; otherwise the mix
                                  picks each matrix's type and `type` is ignored */
    uint64_t seed;
    bool fast;                 /* weight matrices' rows copied from a pool of rows quantised once per
                                  tensor: random valid blocks written at disk speed, for benchmarks only
                                  (synth_weights.h) */
    float router_skew;         /* 0: uniform expert popularity; S > 0: roughly Zipf with exponent ~S
                                  (synth_weights.h; measured in docs/HYBRID.md) */
    bool zero_head_norms;      /* output_norm and every MTP block's shared_head_norm written as zeros:
                                  every logit of the model and of its MTP heads is 0, so greedy picks
                                  token 0 and every draft is kept (100%-acceptance benchmarks;
                                  docs/SPECULATIVE.md) */
    uint32_t n_threads;        /* generating threads; 0 = one per processor (the bytes do not depend on it) */
    synth_progress_fn progress; /* optional */
    void *progress_user;
} synth_params;

/* Named shapes: "tiny" (the quick-start default, qwen3moe), one per
 * architecture mirroring ../shared/models ("qwen3moe-tiny", "mixtral-tiny",
 * "qwen2moe-tiny", "deepseek2-tiny", "gptoss-tiny"), and "qwen3-30b-a3b". */
size_t synth_preset_count(void);
const char *synth_preset_name(size_t i);
/* A one-line description of preset i ("qwen3moe, 2 layers, ..."). */
const char *synth_preset_summary(size_t i);
hydra_status synth_preset(const char *name, synth_params *out);

/* The preset an architecture starts from when only --arch is given. */
hydra_status synth_arch_preset(const char *arch, synth_params *out);

/* Checks the parameters (every dimension present, rows divisible by the
 * type's block size, architecture rules) without writing anything. */
hydra_status synth_check(const synth_params *p);

/* Tensor data bytes the file will hold (0 if the parameters are invalid). */
uint64_t synth_data_bytes(const synth_params *p);

/* Whether weight matrices can be stored in this type: it has a reference
 * quantiser (from_float) and is a weight format (a reference dot product;
 * activation-only formats such as Q8_K are not). */
bool synth_type_writable(uint32_t type);

/* The mix named `name` ("Q4_K_M", any case): false if there is none. */
bool synth_mix_find(const char *name, synth_mix *out);
/* "Q4_K_M"; NULL for SYNTH_MIX_NONE or an unknown value. */
const char *synth_mix_name(synth_mix m);

/* Writes the model.  Same parameters and seed give a byte-identical file. */
hydra_status synth_write(const char *path, const synth_params *p);

#endif
