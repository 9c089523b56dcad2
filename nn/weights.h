/*
 * weights.h — model weights in and out of the model engine: VISSL's MODEL.WEIGHTS_INIT
 * (init_model_from_consolidated_weights, v0.1.5) and safetensors export.
 *
 * A model is seen only as an array of eng_entry (params.h) whose names are FULL state-dict
 * names: "trunk._feature_blocks.conv1.weight", "heads.0.clf.0.weight". Nothing here knows a
 * model struct, so any trunk/head combination loads and saves the same way.
 *
 * Files are recognised by their content, not their name: torch.save zip archives and legacy
 * files (torchfile.h, a restricted unpickler) and safetensors files (safetensors.h).
 *
 * weights_load follows VISSL and is stricter where VISSL only logs (vissl/utils/checkpoint.py's
 * init_model_from_consolidated_weights): the whole file is checked before the first tensor is copied, so a refused file leaves
 * the model as it was.
 *   1. STATE_DICT_KEY_NAME: descend into that top-level key (an error names the keys there);
 *      "classy_state_dict" takes base_model.model.trunk / .heads as "trunk." / "heads." keys
 *      (VISSL's get_checkpoint_model_state_dict: a feature extractor reads a pretraining
 *      trunk as "trunk.base_model.…", a trained model a feature extractor's trunk without
 *      "base_model."); "" takes the whole file as a flat state dict.
 *   2. REMOVE_PREFIX (stripped where a key starts with it), then APPEND_PREFIX.
 *   3. VISSL's compatibility check: every key starts with "trunk._feature_blocks." (or
 *      "trunk.base_model._feature_blocks." for a feature extractor) or "heads.", else the
 *      hint to set APPEND_PREFIX / REMOVE_PREFIX.
 *   4. Model entries whose name contains a SKIP_LAYERS string are skipped, and so are head
 *      entries when load_heads is false (eval mode without EVAL_TRUNK_AND_HEAD).
 *   5. Errors: a trunk entry missing from the file, a trunk key the model does not have
 *      (torchvision's classifier "…_feature_blocks.fc.*" excepted: a warning, as VISSL's heads
 *      are configured separately), a shape mismatch, an integer or bool tensor for a float
 *      entry. Warnings: head entries missing (fresh heads) and head keys the model lacks.
 *      num_batches_tracked keys are ignored. F16, BF16 and F64 are converted to fp32.
 *
 * Errors: 0 on success, -1 with a malloc'd message in *err (naming the file and the keys), or
 * logged when err is NULL.
 */
#ifndef SELFSUP_NN_WEIGHTS_H
#define SELFSUP_NN_WEIGHTS_H

#include "nn.h"
#include "params.h"
#include "safetensors.h"

#include <stdbool.h>
#include <stddef.h>

/* MODEL.WEIGHTS_INIT, plus the model facts VISSL reads elsewhere in the config. */
typedef struct {
    const char *params_file;
    const char *state_dict_key_name;
    const char *const *skip_layers;
    int n_skip_layers;
    const char *remove_prefix; /* NULL or "" = none */
    const char *append_prefix; /* NULL or "" = none */
    bool feature_extractor;    /* trunk keys are "trunk.base_model._feature_blocks." */
    bool load_heads;           /* false: eval mode without EVAL_TRUNK_AND_HEAD */
} weights_init_options;

/* VISSL's defaults: STATE_DICT_KEY_NAME "classy_state_dict", SKIP_LAYERS
 * ["num_batches_tracked"], no prefixes, load_heads true, no file. */
weights_init_options weights_init_defaults(void);

/* Load o->params_file into the model's entries (see the top of this file). */
int weights_load(eng_backend *be, const eng_entry *entries, int n, const weights_init_options *o, char **err);

/* Every entry (parameters and buffers) in fp32 under its full name, with optional string
 * metadata (n_meta 0: none), atomically. */
int weights_save_safetensors(eng_backend *be, const eng_entry *entries, int n, const char *path,
                             const st_meta *meta, size_t n_meta, char **err);

/* ---- the reader on its own (selfsup convert) ------------------------------------------------ */

#define WEIGHTS_MAX_DIMS 16

/* One tensor of a file under its state-dict name (after step 1, before the prefix rules). */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    size_t shape[WEIGHTS_MAX_DIMS];
    size_t numel;
    const void *data; /* C-contiguous little-endian, owned by the file; maybe unaligned */
} weights_tensor;

typedef struct weights_file weights_file;

/* Read `path` and apply step 1 for `state_dict_key_name`; NULL picks "classy_state_dict"
 * when the file has it at the top level, else the whole file. In a safetensors file (flat by
 * nature, as selfsup's checkpoints are) "classy_state_dict" selects the "trunk.*" and
 * "heads.*" tensors (a checkpoint's other state is not model weights), or every tensor when
 * there are none; another key K selects the tensors named "K.*", without that prefix. */
int weights_read(const char *path, const char *state_dict_key_name, weights_file **out, char **err);
size_t weights_count(const weights_file *f);
const weights_tensor *weights_at(const weights_file *f, size_t i);
void weights_close(weights_file *f);

/* All of t's elements as fp32 into out (F32, F16, BF16, F64 only: weights_dtype_is_float). */
void weights_to_f32(const weights_tensor *t, float *out);
bool weights_dtype_is_float(st_dtype dtype);

#endif
