/*
 * torchfile.h — read PyTorch checkpoints (`torch.save` files) into a tree of plain values and
 * host tensors, so that selfsup can import torchvision state_dicts and VISSL checkpoints.
 *
 * Both of torch.save's formats are read: the zip format (PyTorch >= 1.6: PREFIX/data.pkl,
 * one PREFIX/data/KEY record per storage, PREFIX/byteorder) through libzip, and the legacy
 * format (pickled magic number, protocol version and sys_info, the main pickle, the pickled
 * list of storage keys, then each storage as an int64 element count and raw bytes). So is a
 * plain pickle of numpy arrays (Caffe2's and Detectron's .pkl weights, from Python 2 or 3):
 * each array becomes a tensor.
 *
 * The pickles go through a restricted unpickler: only the opcodes torch's pickler writes for
 * tensors and plain containers (protocols 2-5), and only the globals torch needs to rebuild
 * tensors (torch._utils._rebuild_tensor_v2 / _rebuild_tensor / _rebuild_parameter,
 * collections.OrderedDict, torch.*Storage) and numpy arrays (numpy's _reconstruct, ndarray,
 * dtype and scalar, and _codecs.encode for the bytes Python 3's protocol 2 writes). Any other
 * global is refused by name before anything could run: "'posix.system' is not allowed in a checkpoint: ...". Memo size, stack
 * size, MARK depth, container nesting and the bytes allocated for tensor data are bounded by
 * fixed limits and by the file's size, so hostile files fail cleanly.
 *
 * Errors follow the other format modules (npy.h, safetensors.h): 0 on success, -1 with a
 * malloc'd message in *err naming the file and the problem, or logged when err is NULL.
 */
#ifndef SELFSUP_TORCHFILE_H
#define SELFSUP_TORCHFILE_H

#include "safetensors.h" /* st_dtype */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TF_MAX_DIMS 16

/* A tensor as torch saved it, with its data made C-contiguous. */
typedef struct {
    st_dtype dtype;
    int ndim;
    size_t shape[TF_MAX_DIMS];
    int64_t stride[TF_MAX_DIMS]; /* as saved, in elements */
    size_t storage_offset;       /* as saved, in elements */
    size_t numel, nbytes;
    const void *data;            /* C-contiguous, little-endian, nbytes; owned by the file */
    bool requires_grad;
    bool is_parameter;           /* saved as an nn.Parameter */
} tf_tensor;

typedef enum {
    TF_NONE,
    TF_BOOL,
    TF_INT,
    TF_FLOAT,
    TF_STR,   /* UTF-8 as pickled, NUL-terminated (may contain NULs: use len) */
    TF_BYTES,
    TF_LIST,
    TF_TUPLE,
    TF_DICT,  /* dict or OrderedDict, in insertion order */
    TF_TENSOR,
    TF_OTHER, /* a storage class, a bare storage or an int wider than 64 bits: skip it */
} tf_kind;

typedef struct tf_value tf_value;
struct tf_value {
    tf_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *s;
            size_t len;
        } str;                          /* TF_STR, TF_BYTES */
        struct {
            tf_value **items;
            size_t n;
        } seq;                          /* TF_LIST, TF_TUPLE */
        struct {
            tf_value **keys, **vals;
            size_t n;
        } dict;                         /* TF_DICT; keys are str, int, bool, None, float or tuple */
        tf_tensor *tensor;              /* TF_TENSOR */
    } u;
};

typedef struct torchfile torchfile;

/* Read the checkpoint at `path` (either format). */
int torchfile_open(const char *path, torchfile **out, char **err);
/* The same from a whole file image in memory; nothing points into `buf` afterwards. `name`
 * is only used in messages. */
int torchfile_parse(const void *buf, size_t len, const char *name, torchfile **out, char **err);
/* Unpickle one bare pickle (no storages: persistent ids are refused). For tests and fuzzing. */
int torchfile_unpickle(const void *buf, size_t len, const char *name, torchfile **out,
                       char **err);
/* Release everything, including every value and tensor; NULL is fine. */
void torchfile_close(torchfile *f);

/* The unpickled object (the checkpoint's top level). */
const tf_value *torchfile_root(const torchfile *f);

/* Value of string key `key` in dict `v`, or NULL (also when v is not a dict). */
const tf_value *tf_dict_get(const tf_value *v, const char *key);
/* Follow a dotted path of string keys ("classy_state_dict.base_model.model"), or NULL. */
const tf_value *tf_lookup(const tf_value *v, const char *dotted);
const char *tf_kind_name(tf_kind kind);

/* One entry of a flattened state dict. */
typedef struct {
    char *name; /* dotted, e.g. "trunk.layer1.0.conv1.weight" */
    const tf_tensor *tensor;
} tf_named;

/* Flatten the tensors of a (nested) dict into dotted names, in insertion order: nested dicts
 * add "key." prefixes (int keys in decimal); non-tensor leaves are skipped; lists and tuples
 * are skipped. `prefix` (may be NULL or "") starts every name. *out is malloc'd; free it with
 * tf_named_free. Fails on nesting past the unpickler's limit (cyclic values). */
int tf_flatten(const tf_value *v, const char *prefix, tf_named **out, size_t *n_out, char **err);
void tf_named_free(tf_named *named, size_t n);

#endif
