/*
 * extract.h — VISSL's extract_features engine on the model engine: batch records in, VISSL's
 * feature files out (features.h; vissl/engines/extract_features.py).
 *
 * extractor_new builds the model of config.MODEL (PyTorch's default init from SEED_VALUE,
 * then MODEL.WEIGHTS_INIT: a selfsup checkpoint, a VISSL or torchvision .torch/.pth file) and
 * keeps it in eval mode throughout. The layers are VISSL's get_trunk_output_feature_names:
 * the names of LINEAR_EVAL_FEAT_POOL_OPS_MAP for a feature-extractor model (EVAL_MODE_ON,
 * FREEZE_TRUNK_ONLY and a non-empty map), each reading the model output of its position (the
 * pooled trunk feature with EXTRACT_TRUNK_FEATURES_ONLY, the head on it otherwise), or else
 * the one layer "heads", the model's first output.
 *
 * extractor_batch runs one batch record (data.0 images, label.0 targets, data_idx.0 dataset
 * indices, as the collate stage writes them) and keeps each row's features flattened to
 * N × D, its targets and its index. The features wait in a spill file in the output folder
 * (unlinked, so it never outlives the process), not in memory: a split's memory is its
 * targets and indices, 16 bytes a row for one label. extractor_write_split de-duplicates the rows by index
 * (the first kept, which removes a distributed sampler's padding) and sorts them, writes
 * rank{R}_{split}_{layer}_{features,targets,inds}.npy for every layer, and starts over for
 * the next split.
 */
#ifndef SELFSUP_EXTRACT_EXTRACT_H
#define SELFSUP_EXTRACT_EXTRACT_H

#include "config.h"
#include "model.h"
#include "record.h"

#include <stddef.h>

typedef struct extractor extractor;

/* NULL with err ("file:line: key: why") for a model or weights file that cannot be built or
 * loaded, or an output folder `dir` (where the spill files go) that cannot be created or
 * written; the exit status is then 2. threads 0: every core. */
extractor *extractor_new(const cfg_node *config, int threads, const char *dir, cfg_err *err);
/* What extractor_new and the stage check before any input is read, without building the model
 * or making the output folder `dir` (CHECKPOINT.DIR unless --output names one): the model's
 * options, its weights file, the device, and a folder the features can be written in. For
 * `selfsup config validate` and `selfsup run`'s preflight. */
bool extractor_check_config(const cfg_node *config, const char *dir, cfg_err *err);
void extractor_free(extractor *x);

/* The layers a model of options mo writes (VISSL's get_trunk_output_feature_names, or
 * "heads"): at most MODEL_MAX_FEATURES names, pointing into config; returns how many. */
int extractor_layer_names(const cfg_node *config, const model_options *mo, const char **names);

int extractor_layer_count(const extractor *x);
const char *extractor_layer(const extractor *x, int i);

/* One batch of the split being read. 0, or -1 with *err (a record without images or indices,
 * a batch whose feature width differs from the first one's). */
int extractor_batch(extractor *x, const rec_view *v, char **err);
/* Rows kept so far in the split being read (before de-duplication). */
size_t extractor_rows(const extractor *x);

/* Write the split's files into dir, then forget its rows. 0, or -1 with *err. */
int extractor_write_split(extractor *x, const char *dir, int rank, const char *split, char **err);

#endif
