/*
 * gguf_write.h — a streaming GGUF v3 writer.  Metadata and tensor infos are
 * gathered in memory (they are small); tensor data is streamed to the file
 * in declaration order, so a writer of a 17 GB model holds one row at a time.
 *
 *   gguf_writer *w; gguf_writer_open(&w, path);
 *   gguf_writer_add_str(w, "general.architecture", "qwen3moe"); ...
 *   gguf_writer_add_tensor(w, "token_embd.weight", QT_F16, 2, ne); ...
 *   for each tensor, in order: gguf_writer_write(w, bytes, n) until its size is reached
 *   gguf_writer_close(w);   // checks every declared byte was written
 */
#ifndef HYDRA_GGUF_WRITE_H
#define HYDRA_GGUF_WRITE_H

#include "hydra.h"

#include <stddef.h>
#include <stdint.h>

typedef struct gguf_writer gguf_writer;

hydra_status gguf_writer_open(gguf_writer **out, const char *path);

hydra_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
hydra_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
hydra_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
hydra_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
hydra_status gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
hydra_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
hydra_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *v, size_t n);
hydra_status gguf_writer_add_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n);
hydra_status gguf_writer_add_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n);

/* Declares a tensor (all before the first write). ne in ggml order. */
hydra_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const uint64_t *ne);

/* Appends data of the current tensor; padding between tensors is automatic. */
hydra_status gguf_writer_write(gguf_writer *w, const void *data, size_t n);

/* Finishes the file and frees the writer (also on failure; w may be NULL). */
hydra_status gguf_writer_close(gguf_writer *w);

/* Frees the writer and removes the partial file (after an error). */
void gguf_writer_abort(gguf_writer *w);

/* The end of a write whose calls so far returned st: gguf_writer_close
 * when st is HYDRA_OK (its status returned), else gguf_writer_abort and
 * st. */
hydra_status gguf_writer_finish(gguf_writer *w, hydra_status st);

#endif
