/*
 * kv_state.h — a KV cache's contents as a byte stream and back
 * (hydra_session_state_write / _read, hydra-serve's slot files).
 *
 * Stream, version 1, little-endian (the host's float and F16 bits):
 *   0   8 bytes  magic "HYDRAKV\0"
 *   8   u32      version (1)
 *   12  u32      cache type (QT_F16 or QT_F32)
 *   16  u32      layers
 *   20  u32      reserved, 0
 *   24  u64      n_past: positions whose keys and values follow
 *   32  u64      n_written: 1 + the highest position the cache wrote
 *   40  u64      bytes of a K row, 48 u64 bytes of a V row (0: none)
 *   56  per layer: u64 ring slots (0: the layer holds every position),
 *       u64 first position stored, then the K rows of positions
 *       [first, n_past), then their V rows
 * A full layer stores [0, n_past); a sliding-window ring stores what it
 * still holds, [max(0, n_written - slots), n_past), so a restored cache
 * can rewind exactly as far as the saved one could.
 */
#ifndef HYDRA_KV_STATE_H
#define HYDRA_KV_STATE_H

#include "forward.h"
#include "hydra.h"

/* Bytes kv_state_write writes for the first n_past positions. */
uint64_t kv_state_size(const kv_cache *kv, int64_t n_past);

/* Writes the stream through write; HYDRA_ERR_IO when it refuses bytes,
 * HYDRA_ERR_RANGE when a ring no longer holds what evaluation at n_past
 * reads (kv_can_resume). */
hydra_status kv_state_write(const kv_cache *kv, int64_t n_past, hydra_state_write_fn write, void *user);

/* Reads a stream into kv, whose geometry must match the stream's (type,
 * row bytes, layers; a ring layer the same slots, a full layer room for
 * n_past); *n_past receives its positions.  On failure the cache may hold
 * part of the stream: the caller clears it. */
hydra_status kv_state_read(kv_cache *kv, hydra_state_read_fn read, void *user, int64_t *n_past);

#endif
