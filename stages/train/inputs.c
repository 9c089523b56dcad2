/*
 * inputs.c — a batch record's images into the model's inputs (inputs.h).
 */
#include "train/inputs.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int batch_input_shapes(const rec_view *v, int idx[MODEL_MAX_INPUTS], eng_shape shapes[MODEL_MAX_INPUTS], char **err)
{
    return batch_input_shapes_of(v, "data", idx, shapes, err);
}

int batch_input_shapes_of(const rec_view *v, const char *key, int idx[MODEL_MAX_INPUTS],
                          eng_shape shapes[MODEL_MAX_INPUTS], char **err)
{
    int n = 0;
    char name[64];
    snprintf(name, sizeof name, "%s.0", key);
    if ((idx[0] = rec_find(v, name)) >= 0)
        n = 1;
    else
        for (; n < MODEL_MAX_INPUTS; n++) {
            snprintf(name, sizeof name, "%s.0.%d", key, n);
            if ((idx[n] = rec_find(v, name)) < 0)
                break;
        }
    if (n == 0)
        return report_failure(err, "batch %llu has no %s.0 tensor (is the collate stage before this one%s?)",
                              (unsigned long long)v->hdr->seq, key,
                              strcmp(key, "data") ? ", and is it the method's collator" : "");
    for (int k = 0; k < n; k++) {
        const rec_tensor *d = &v->tensors[idx[k]];
        if (d->dtype == REC_U8 && d->ndim == 4 && d->shape[3] == 3)
            shapes[k] = eng_shape4((int64_t)d->shape[0], 3, (int64_t)d->shape[1], (int64_t)d->shape[2]);
        else if (d->dtype == REC_F32 && d->ndim == 4 && d->shape[1] == 3)
            shapes[k] = eng_shape4((int64_t)d->shape[0], 3, (int64_t)d->shape[2], (int64_t)d->shape[3]);
        else
            return report_failure(err,
                                  "%s: expected uint8 N×H×W×3 or float32 N×3×H×W images, got %s with %d dimensions",
                                  d->name, rec_dtype_name(d->dtype), d->ndim);
    }
    return n;
}

int batch_model_input_shapes(const rec_view *v, const model_options *o, int idx[MODEL_MAX_INPUTS],
                             eng_shape shapes[MODEL_MAX_INPUTS], char **err)
{
    if (o->nmapping == 0)
        return batch_input_shapes(v, idx, shapes, err);
    for (int i = 0; i < o->nmapping; i++) {
        int one[MODEL_MAX_INPUTS];
        eng_shape shape[MODEL_MAX_INPUTS];
        int n = batch_input_shapes_of(v, o->mapping[i].key, one, shape, err);
        if (n < 0)
            return -1;
        if (n != 1)
            return report_failure(err, "batch %llu has %d tensors for the input '%s' (one, %s.0, is read)",
                                  (unsigned long long)v->hdr->seq, n, o->mapping[i].key, o->mapping[i].key);
        idx[i] = one[0];
        shapes[i] = shape[0];
    }
    return o->nmapping;
}

/* Input k from tensor i: float32 N × 3 × H × W images as they are, or uint8 crops (N × H × W
 * × 3) that the backend normalises as the augment stage's `normalize` rows say (torchvision's
 * ToTensor / Normalize arithmetic), so only the bytes travel to a GPU. */
static int upload_one(eng_backend *be, model *m, batch_host *h, const rec_view *v, int i, int k, char **err)
{
    if (v->tensors[i].dtype == REC_F32) {
        size_t floats = rec_numel(v, i);
        if (floats > h->floats) { /* the record's memory may not be aligned for floats */
            free(h->host);
            h->host = xmalloc_large(floats * sizeof(float));
            h->floats = floats;
        }
        memcpy(h->host, rec_data(v, i), floats * sizeof(float));
        model_upload_input(be, m, k, h->host);
        return 0;
    }
    int ni = rec_find(v, "normalize");
    if (ni < 0 || v->tensors[ni].dtype != REC_F32 || rec_numel(v, ni) != 9)
        return report_failure(err, "%s holds uint8 images but the batch has no normalize rows: end "
                                   "the DATA split's TRANSFORMS with ToTensor (and Normalize)", v->tensors[i].name);
    model_upload_images(be, m, k, rec_data(v, i), rec_data(v, ni));
    return 0;
}

int batch_upload(eng_backend *be, model *m, batch_host *h, const rec_view *v, const int *idx, int n, char **err)
{
    for (int k = 0; k < n; k++)
        if (upload_one(be, m, h, v, idx[k], k, err) != 0)
            return -1;
    return 0;
}

void batch_host_free(batch_host *h)
{
    free(h->host);
    h->host = NULL;
    h->floats = 0;
}
