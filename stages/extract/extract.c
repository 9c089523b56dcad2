/*
 * extract.c — VISSL's extract_features engine (extract.h).
 *
 * Each layer's features go to a spill file as they arrive (an unlinked temp file in the
 * output folder: a layer of ImageNet's train split is 10 GB, more than a node may have to
 * spare, and a crash leaves nothing behind); only the targets and indices stay in memory.
 * Nothing is de-duplicated until the split ends, so a batch costs one forward, one download
 * and one write per layer. At the split's end the spill is memory-mapped and its rows are
 * streamed into the .npy file in index order, first occurrence of each index kept.
 */
#include "extract/extract.h"

#include "features.h"
#include "log.h"
#include "model.h"
#include "train/checkpoint.h"
#include "train/inputs.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_LAYERS MODEL_MAX_FEATURES

struct extractor {
    eng_backend *be;
    model *m;
    batch_host host;
    int nlayers;
    const char *layers[MAX_LAYERS]; /* point into the config */
    feat_set rows[MAX_LAYERS];      /* the split's rows so far: targets and inds (features NULL) */
    size_t cap[MAX_LAYERS];         /* rows allocated for them */
    int spill[MAX_LAYERS];          /* each layer's features, n × dim float32, in arrival order */
    float *out;                     /* one output downloaded */
    size_t out_floats;
};

int extractor_layer_names(const cfg_node *config, const model_options *mo, const char **names)
{
    names[0] = "heads";
    if (!model_is_feature_extractor(mo))
        return 1;
    const cfg_node *map = cfg_get(config, "MODEL.FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP");
    int n = 0;
    for (size_t i = 0; i < map->len && n < MAX_LAYERS; i++)
        names[n++] = map->items[i]->items[0]->s; /* model_options_from_config checked the shape */
    return n;
}

/* An unlinked temp file in dir (which exists) for a layer's features. */
static int open_spill(const char *dir, char **err)
{
    char *path = xasprintf("%s/.selfsup-extract-XXXXXX", dir); /* mkstemp's name template */
    int fd = mkstemp(path);
    if (fd < 0)
        report_failure(err, "%s: cannot create the features' spill file: %s", path, strerror(errno));
    else
        unlink(path);
    free(path);
    return fd;
}

extractor *extractor_new(const cfg_node *config, int threads, const char *dir, cfg_err *err)
{
    extractor *x = xcalloc(1, sizeof *x);
    for (int k = 0; k < MAX_LAYERS; k++)
        x->spill[k] = -1;
    if (!model_build_from_config(config, threads, 0, &x->be, &x->m, err)) {
        extractor_free(x);
        return NULL;
    }
    x->nlayers = extractor_layer_names(config, model_opts(x->m), x->layers);
    char *why = NULL;
    int rc = make_dirs(dir, 0777, &why);
    for (int k = 0; k < x->nlayers && rc == 0; k++)
        rc = (x->spill[k] = open_spill(dir, &why)) < 0 ? -1 : 0;
    if (rc != 0) {
        snprintf(err->msg, sizeof err->msg, "%s", why);
        free(why);
        extractor_free(x);
        return NULL;
    }
    return x;
}

bool extractor_check_config(const cfg_node *config, const char *dir, cfg_err *err)
{
    if (!model_check_config(config, 0, err))
        return false;
    char *why = NULL;
    if (ckpt_probe_output_dir(dir, &why) == 0)
        return true;
    cfg_fail(err, cfg_get(config, "CHECKPOINT.DIR"), "config.CHECKPOINT.DIR", "%s", why);
    free(why);
    return false;
}

void extractor_free(extractor *x)
{
    if (!x)
        return;
    for (int i = 0; i < x->nlayers; i++) {
        feat_free(&x->rows[i]);
        if (x->spill[i] >= 0)
            close(x->spill[i]);
    }
    batch_host_free(&x->host);
    free(x->out);
    if (x->m)
        model_free(x->be, x->m);
    if (x->be)
        eng_backend_close(x->be);
    free(x);
}

int extractor_layer_count(const extractor *x) { return x->nlayers; }
const char *extractor_layer(const extractor *x, int i) { return x->layers[i]; }
size_t extractor_rows(const extractor *x) { return x->rows[0].n; }

/* Room for n more rows' targets and indices (doubling, so a split costs O(log N) copies). */
static void reserve(extractor *x, int layer, size_t n)
{
    feat_set *f = &x->rows[layer];
    size_t cap = x->cap[layer];
    if (f->n + n <= cap)
        return;
    cap = cap ? cap : 1024;
    while (cap < f->n + n)
        cap *= 2;
    f->targets = xrealloc(f->targets, cap * f->ntargets * sizeof *f->targets + 1);
    f->inds = xrealloc(f->inds, cap * sizeof *f->inds);
    x->cap[layer] = cap;
}

/* The batch's targets (label.0: N or N × L int64) and indices (data_idx.0). Without labels
 * (a dataset with no LABEL_SOURCES) the target is the sample's index, VISSL's sample_index
 * label. */
static int batch_meta(const rec_view *v, int64_t n, const int64_t **label, size_t *cols, const int64_t **inds,
                      char **err)
{
    int ii = rec_find(v, "data_idx.0"), li = rec_find(v, "label.0");
    if (ii < 0 || v->tensors[ii].dtype != REC_I64 || rec_numel(v, ii) != (size_t)n)
        return report_failure(err, "batch %llu has no data_idx.0 with one int64 index per image",
                              (unsigned long long)v->hdr->seq);
    *inds = rec_data(v, ii);
    *label = *inds;
    *cols = 1;
    if (li < 0)
        return 0;
    const rec_tensor *d = &v->tensors[li];
    if (d->dtype != REC_I64 || d->ndim < 1 || d->ndim > 2 || (int64_t)d->shape[0] != n)
        return report_failure(err, "batch %llu: label.0 must be int64 N or N × L for its %lld images",
                              (unsigned long long)v->hdr->seq, (long long)n);
    *label = rec_data(v, li);
    *cols = d->ndim == 2 ? d->shape[1] : 1;
    return 0;
}

/* Download model output `k` (N × …) and append it, with the batch's targets and indices, to
 * layer k's rows. */
static int keep_layer(extractor *x, int k, int64_t n, const int64_t *label, size_t cols, const int64_t *inds,
                      char **err)
{
    const eng_tensor *o = model_output(x->m, k);
    size_t floats = (size_t)eng_numel(&o->shape), dim = floats / (size_t)n;
    feat_set *f = &x->rows[k];
    if (f->dim == 0 && f->n == 0) {
        f->dim = dim;
        f->ntargets = cols;
    } else if (f->dim != dim || f->ntargets != cols)
        return report_failure(err, "layer %s: this batch gives %zu values and %zu targets per image, earlier ones %zu and %zu",
                              x->layers[k], dim, cols, f->dim, f->ntargets);
    if (floats > x->out_floats) {
        free(x->out);
        x->out = xmalloc_large(floats * sizeof *x->out);
        x->out_floats = floats;
    }
    eng_download(x->be, o, x->out);
    char *why = NULL;
    if (rec_fd_write(x->spill[k], x->out, floats * sizeof *x->out, &why) != 0) {
        report_failure(err, "layer %s: the features' spill file: %s", x->layers[k], why);
        free(why);
        return -1;
    }
    reserve(x, k, (size_t)n);
    memcpy(f->targets + f->n * cols, label, (size_t)n * cols * sizeof *label);
    memcpy(f->inds + f->n, inds, (size_t)n * sizeof *inds);
    f->n += (size_t)n;
    return 0;
}

int extractor_batch(extractor *x, const rec_view *v, char **err)
{
    int idx[MODEL_MAX_INPUTS];
    eng_shape shapes[MODEL_MAX_INPUTS];
    int n = batch_input_shapes(v, idx, shapes, err);
    if (n < 0)
        return -1;
    if (n != 1)
        return report_failure(err, "batch %llu holds %d crops; extraction takes one image per sample (use the "
                                   "evaluation transforms)", (unsigned long long)v->hdr->seq, n);
    int64_t rows = shapes[0].dim[0];
    const int64_t *label = NULL, *inds = NULL;
    size_t cols = 1;
    if (batch_meta(v, rows, &label, &cols, &inds, err) != 0 || model_plan(x->be, x->m, shapes, 1, err) != 0 ||
        batch_upload(x->be, x->m, &x->host, v, idx, 1, err) != 0)
        return -1;
    if (model_output_count(x->m) < x->nlayers)
        return report_failure(err, "the model gives %d outputs for %d layers", model_output_count(x->m), x->nlayers);
    model_forward(x->be, x->m, false);
    for (int k = 0; k < x->nlayers; k++)
        if (keep_layer(x, k, rows, label, cols, inds, err) != 0)
            return -1;
    return 0;
}

/* Layer k's files from its spill, then an empty spill for the next split. */
static int write_layer(extractor *x, int k, const char *dir, int rank, const char *split, char **err)
{
    feat_set *f = &x->rows[k];
    size_t bytes = f->n * f->dim * sizeof(float);
    void *map = bytes ? mmap(NULL, bytes, PROT_READ, MAP_SHARED, x->spill[k], 0) : NULL;
    if (map == MAP_FAILED)
        return report_failure(err, "layer %s: cannot map the features' spill file: %s", x->layers[k],
                              strerror(errno));
    if (map)
        madvise(map, bytes, MADV_SEQUENTIAL);
    f->features = map;
    size_t *order = xmalloc(f->n * sizeof *order + 1);
    size_t m = feat_dedup_order(f->inds, f->n, order);
    int rc = feat_write_rows(dir, rank, split, x->layers[k], f, order, m, err);
    if (rc == 0)
        log_info("%s %s: %zu rows of %zu features (%zu repeated indices dropped) -> %s/rank%d_%s_%s_*.npy", split,
                 x->layers[k], m, f->dim, f->n - m, dir, rank, split, x->layers[k]);
    free(order);
    if (map)
        munmap(map, bytes);
    f->features = NULL;
    if (rc == 0 && (ftruncate(x->spill[k], 0) != 0 || lseek(x->spill[k], 0, SEEK_SET) != 0))
        rc = report_failure(err, "layer %s: cannot empty the features' spill file: %s", x->layers[k], strerror(errno));
    feat_free(f);
    x->cap[k] = 0;
    return rc;
}

int extractor_write_split(extractor *x, const char *dir, int rank, const char *split, char **err)
{
    char *why = NULL;
    if (make_dirs(dir, 0777, &why) != 0) {
        report_failure(err, "%s", why);
        free(why);
        return -1;
    }
    for (int k = 0; k < x->nlayers; k++)
        if (write_layer(x, k, dir, rank, split, err) != 0)
            return -1;
    return 0;
}
