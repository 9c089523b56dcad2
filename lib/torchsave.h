/*
 * torchsave.h — write PyTorch checkpoints (what `torch.save` writes, zip format) so that
 * `torch.load` opens selfsup's weights directly: a state dict of tensors, optionally inside
 * nested dicts (a VISSL checkpoint's classy_state_dict.base_model.model.{trunk,heads}).
 *
 * The caller builds a small tree of dicts (ts_dict) whose leaves are borrowed tensor buffers
 * (or booleans),
 * then ts_save writes it: archive/data.pkl (a protocol-2 pickle: collections.OrderedDict or
 * dict, tensors as torch._utils._rebuild_tensor_v2 over a persistent id ('storage',
 * torch.FloatStorage, KEY, 'cpu', numel)), one uncompressed archive/data/KEY record per
 * tensor, archive/version "3" and archive/byteorder "little", through libzip, atomically
 * (atomic_file). torchfile.h reads the result back.
 *
 * Errors follow the other format modules: 0 on success, -1 with a malloc'd message in *err
 * naming the file and the problem (or logged when err is NULL).
 */
#ifndef SELFSUP_TORCHSAVE_H
#define SELFSUP_TORCHSAVE_H

#include "safetensors.h" /* st_dtype */

#include <stdbool.h>
#include <stddef.h>

#define TS_MAX_DIMS 16

typedef struct ts_dict ts_dict;

/* An empty dict: `ordered` pickles it as collections.OrderedDict (what state_dict() returns),
 * else as a plain dict (a checkpoint's outer levels). */
ts_dict *ts_dict_new(bool ordered);
/* Free the dict and its children (never the tensor data); NULL is fine. */
void ts_dict_free(ts_dict *d);

/* Add a tensor under `key` (keys are copied; the order of adds is the dict's order). `data`
 * is C-contiguous little-endian, numel(shape) elements of `dtype`; it is borrowed and must
 * stay valid until ts_save returns. ndim ≤ TS_MAX_DIMS (0 is a scalar). */
void ts_dict_add_tensor(ts_dict *d, const char *key, st_dtype dtype, int ndim, const size_t *shape,
                        const void *data);
/* Add True or False under `key` (Detectron2's "matching_heuristics"). */
void ts_dict_add_bool(ts_dict *d, const char *key, bool value);
/* Add a nested dict under `key`; it belongs to `d` (do not free it). */
ts_dict *ts_dict_add_dict(ts_dict *d, const char *key, bool ordered);

/* Write `root` to `path` in torch.save's zip format, atomically. Fails (nothing written) for a
 * dtype torch has no storage class for (U16, U32, U64, F8_*) or a name collision. */
int ts_save(const char *path, const ts_dict *root, char **err);

#endif
