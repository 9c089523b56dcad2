/*
 * inputs.h — a batch record's images into the model's inputs, for the trainer and the
 * feature extractor alike.
 *
 * The inputs are data.0 (one tensor) or data.0.0, data.0.1, … (one per crop, as the multicrop
 * collator writes them; MoCo's momentum encoder reads data_momentum.0 the same way), each uint8 N×H×W×3 with the `normalize` rows the augment stage left
 * for the consumer (normalised here in float32 with torchvision's arithmetic), or float32
 * N×3×H×W. batch_input_shapes finds them and their shapes (what model_plan needs);
 * batch_upload writes them into the planned model's inputs.
 */
#ifndef SELFSUP_TRAIN_INPUTS_H
#define SELFSUP_TRAIN_INPUTS_H

#include "model.h"
#include "record.h"

#include <stddef.h>

/* A reusable host buffer for one input as float32 N × 3 × H × W. */
typedef struct {
    float *host;
    size_t floats;
} batch_host;

/* The input tensors' indices in v and their shapes (N × 3 × H × W). Returns how many, or -1
 * with *err (no data.0, a tensor that is not an image batch). */
int batch_input_shapes(const rec_view *v, int idx[MODEL_MAX_INPUTS], eng_shape shapes[MODEL_MAX_INPUTS], char **err);
/* The same for the inputs named KEY.0 or KEY.0.0, KEY.0.1, … (key "data": batch_input_shapes). */
int batch_input_shapes_of(const rec_view *v, const char *key, int idx[MODEL_MAX_INPUTS],
                          eng_shape shapes[MODEL_MAX_INPUTS], char **err);
/* The inputs of a model of options o: with MULTI_INPUT_HEAD_MAPPING, input i is the tensor
 * KEY.0 of the mapping's i-th key (PIRL: patches.0, images.0, as patch_and_image_collator
 * writes them); without it, batch_input_shapes. */
int batch_model_input_shapes(const rec_view *v, const model_options *o, int idx[MODEL_MAX_INPUTS],
                             eng_shape shapes[MODEL_MAX_INPUTS], char **err);

/* Write the n inputs into model_input(m, k) (the model planned for their shapes). 0, or -1 with
 * *err (uint8 images without normalize rows). */
int batch_upload(eng_backend *be, model *m, batch_host *h, const rec_view *v, const int *idx, int n, char **err);

void batch_host_free(batch_host *h);

#endif
