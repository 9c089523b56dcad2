/*
 * describe.c — an image's activation map and what the tool makes of it
 * (instance_retrieval_test.py's process_eval_image and get_train_features).
 *
 * Each image goes through the model alone, at its own size: model_plan re-plans when the size
 * changes, so a dataset of a few image shapes (Oxford's are 1024 × 768 or 768 × 1024 at the
 * default RESIZE_IMG) plans a few times. The map is the model's first output (the tool's
 * `model(x)[0]`): LINEAR_EVAL_FEAT_POOL_OPS_MAP's first entry.
 *
 * Descriptors, by FEATS_PROCESSING_TYPE (retrieval.h lists where they part from the tool's):
 *   rmac     regions max-pooled and L2-normalised; with PCA each region is whitened and
 *            L2-normalised; summed; L2-normalised.
 *   gem      GeM pooled with the bias channel, L2-normalised; with PCA, whitened (the tool does
 *            not normalise again).
 *   l2_norm  the flattened map, L2-normalised.
 *   ""       the flattened map.
 */
#include "decode/decoder.h"
#include "model.h"
#include "retrieval/retrieval.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* A prepared image through the model: the map into d. */
static int forward(retr_describer *d, const retr_image *im, char **err)
{
    eng_shape in = eng_shape4(1, 3, im->h, im->w);
    if (model_plan(d->be, d->m, &in, 1, err) != 0)
        return -1;
    model_upload_input(d->be, d->m, 0, im->chw);
    model_forward(d->be, d->m, false);
    const eng_tensor *o = model_output(d->m, 0);
    bool map = o->shape.ndim == 4;
    if (!map && (d->type == RETR_FEATS_RMAC || d->type == RETR_FEATS_GEM))
        return report_failure(err, "%s needs the layer's activation map, but the model gives a %d-D feature: set "
                                   "LINEAR_EVAL_FEAT_POOL_OPS_MAP's first entry to [LAYER, [\"Identity\", []]] and "
                                   "SHOULD_FLATTEN_FEATS to False",
                              d->type == RETR_FEATS_RMAC ? "rmac" : "gem", o->shape.ndim);
    size_t n = (size_t)eng_numel(&o->shape);
    if (n > d->cap)
        d->map = xrealloc(d->map, (d->cap = n) * sizeof *d->map);
    eng_download(d->be, o, d->map);
    d->C = map ? (int)o->shape.dim[1] : (int)n;
    d->H = map ? (int)o->shape.dim[2] : 1;
    d->W = map ? (int)o->shape.dim[3] : 1;
    return 0;
}

int retr_forward_file(retr_describer *d, const char *path, int resize_s, bool no_resize, const float *roi,
                      char **err)
{
    if (!d->decoder)
        d->decoder = decode_ctx_new(&(decode_options){0});
    retr_image im;
    int rc = retr_image_load(d->decoder, path, resize_s, no_resize, roi, &im, err);
    if (rc == 0)
        rc = forward(d, &im, err);
    retr_image_free(&im);
    return rc;
}

void retr_describer_free(retr_describer *d)
{
    if (d->decoder)
        decode_ctx_free(d->decoder);
    free(d->map);
    d->decoder = NULL;
    d->map = NULL;
    d->cap = 0;
}

/* The regions' vectors of the map: *nr × C. */
static float *region_rows(const retr_describer *d, int *nr)
{
    *nr = rmac_regions(d->H, d->W, d->levels, NULL);
    int (*reg)[4] = xmalloc((size_t)*nr * sizeof *reg);
    rmac_regions(d->H, d->W, d->levels, reg);
    float *rows = xmalloc((size_t)*nr * d->C * sizeof *rows);
    rmac_region_vectors(d->map, d->C, d->H, d->W, (const int(*)[4])reg, *nr, rows);
    free(reg);
    return rows;
}

float *retr_training_rows(const retr_describer *d, int *n, int *width)
{
    if (d->type == RETR_FEATS_RMAC) {
        *width = d->C;
        return region_rows(d, n);
    }
    *n = 1;
    *width = d->C + 1;
    float *v = xmalloc((size_t)*width * sizeof *v);
    gem_descriptor(d->map, d->C, d->H, d->W, d->gem_p, v);
    return v;
}

static float *rmac_descriptor(const retr_describer *d, const pca_model *pca, int *width)
{
    int nr;
    float *rows = region_rows(d, &nr), *white = rows;
    *width = d->C;
    if (pca) {
        white = xmalloc((size_t)nr * pca->out * sizeof *white);
        pca_apply(pca, rows, (size_t)nr, white);
        for (int k = 0; k < nr; k++)
            l2_normalize(white + (size_t)k * pca->out, (size_t)pca->out);
        *width = pca->out;
    }
    float *v = xmalloc((size_t)*width * sizeof *v);
    rmac_aggregate(white, nr, *width, v);
    if (white != rows)
        free(white);
    free(rows);
    return v;
}

static float *gem_with_pca(const retr_describer *d, const pca_model *pca, int *width)
{
    int n;
    float *g = retr_training_rows(d, &n, width);
    if (!pca)
        return g;
    float *v = xmalloc((size_t)pca->out * sizeof *v);
    pca_apply(pca, g, 1, v);
    free(g);
    *width = pca->out;
    return v;
}

float *retr_descriptor(const retr_describer *d, const pca_model *pca, int *width)
{
    if (d->type == RETR_FEATS_RMAC)
        return rmac_descriptor(d, pca, width);
    if (d->type == RETR_FEATS_GEM)
        return gem_with_pca(d, pca, width);
    *width = d->C * d->H * d->W;
    float *v = xmalloc((size_t)*width * sizeof *v);
    memcpy(v, d->map, (size_t)*width * sizeof *v);
    if (d->type == RETR_FEATS_L2)
        l2_normalize(v, (size_t)*width);
    return v;
}
