/*
 * selfsup-augment — VISSL's transforms, one sample at a time, PIL-exact.
 *
 * Reads decoded samples (data.S uint8 HWC, label, data_valid, data_idx, and data_window when
 * selfsup-decode --crop sent only what the crops need; see sample.h),
 * runs DATA.<split>.TRANSFORMS on each (transforms.h), and writes one record per sample
 * with its crops data.0 … data.K-1. Several workers may share one input and one output
 * ring; every sample's randomness is keyed by (SEED_VALUE, epoch, data_idx, transform), so
 * the crops do not depend on which worker made them, and the collate stage restores order.
 *
 * Pixels leave as uint8 HWC with a `normalize` tensor (divisor, mean, std) that the trainer
 * applies on its device — 4x less traffic than float. --float applies it here instead and
 * writes float32 CHW, which is what VISSL's transforms hand to its collator.
 *
 *   selfsup-augment -c CONFIG [--split train|test] [--float] [--pace MS] [--in URI] [--out URI] [overrides]
 *
 * --pace MS takes a sample at most every MS milliseconds: a slower host emulated (the decode
 * farm's tests hold a host in mid-lease with it).
 */
#include "augment/transforms.h"
#include "log.h"
#include "sample.h"
#include "stage.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *split; /* "TRAIN" or "TEST" */
    bool to_float;
    aug_pipeline *pipeline;
    aug_normalize norm;
    uint64_t seed;
    aug_sample sample;
    long pace_ms;
} augment;

static int option(void *state, int argc, char **argv)
{
    augment *a = state;
    if (!strcmp(argv[0], "--float")) {
        a->to_float = true;
        return 1;
    }
    if (!strcmp(argv[0], "--split") && argc > 1) {
        if (!strcasecmp(argv[1], "train"))
            a->split = "TRAIN";
        else if (!strcasecmp(argv[1], "test"))
            a->split = "TEST";
        else {
            log_error("--split must be train or test, not '%s'", argv[1]);
            return -1;
        }
        return 2;
    }
    return stage_pace_option(argc, argv, &a->pace_ms);
}

static int prepare(stage *s, void *state)
{
    augment *a = state;
    char key[64];
    snprintf(key, sizeof key, "config.DATA.%s.TRANSFORMS", a->split);
    cfg_err err;
    a->pipeline = aug_pipeline_build(cfg_get(stage_config(s), key + strlen("config.")), key, &err);
    if (!a->pipeline) {
        log_error("%s", err.msg);
        return 2;
    }
    a->norm = aug_pipeline_normalize(a->pipeline);
    a->seed = (uint64_t)cfg_int(stage_config(s), "SEED_VALUE");
    return 0;
}

/* ---- reading a decoded sample ------------------------------------------------------------ */

/* An int64 vector [n], or with `width` an int64 [n] or [n, M] (then *width = M, else 1). */
static const int64_t *int64_tensor(const rec_view *v, const char *name, int *n, int *width)
{
    int i = rec_find(v, name);
    if (i < 0 || v->tensors[i].dtype != REC_I64)
        return NULL;
    const rec_tensor *t = &v->tensors[i];
    if (t->ndim == 2 && width && t->shape[1] >= 1 && t->shape[1] <= 65536)
        *width = (int)t->shape[1];
    else if (t->ndim != 1)
        return NULL;
    else if (width)
        *width = 1;
    *n = (int)t->shape[0];
    return rec_data(v, i);
}

/* selfsup-decode --crop sends only the part of each image that the crops read, and says
 * where it sits (sample.h, data_window); the crops then draw from the full size. */
static int load_windows(augment *a, const rec_view *v, int n, char *why, size_t why_len)
{
    int t = rec_find(v, "data_window");
    if (t < 0)
        return 0;
    const rec_tensor *d = &v->tensors[t];
    if (d->dtype != REC_I64 || d->ndim != 2 || d->shape[0] != (uint64_t)n || d->shape[1] != 4) {
        snprintf(why, why_len, "data_window must be int64 [%d, 4]", n);
        return -1;
    }
    const int64_t *win = rec_data(v, t);
    for (int s = 0; s < n; s++) {
        const aug_item *it = &a->sample.items[s];
        int64_t x = win[4 * s], y = win[4 * s + 1], fw = win[4 * s + 2], fh = win[4 * s + 3];
        if (x < 0 || y < 0 || fw > 65535 || fh > 65535 || x + it->im.w > fw || y + it->im.h > fh) {
            snprintf(why, why_len, "data_window %d: a %dx%d window at (%lld, %lld) does not fit a %lldx%lld image", s,
                     it->im.w, it->im.h, (long long)x, (long long)y, (long long)fw, (long long)fh);
            return -1;
        }
        if (fw != it->im.w || fh != it->im.h)
            aug_sample_set_window(&a->sample, s, (int)x, (int)y, (int)fw, (int)fh);
    }
    return 0;
}

/* Start a sample on the record's images, borrowed in place (the transforms copy them only if
 * they change pixels in place before cropping). Returns 0, or -1 when the record is not a
 * decoded sample. The record must stay until the sample has been written. */
static int load_sample(augment *a, const rec_view *v, char *why, size_t why_len)
{
    int n_label = 0, n_valid = 0, n_idx = 0, width = 1;
    const int64_t *label = int64_tensor(v, "label", &n_label, &width),
                  *valid = int64_tensor(v, "data_valid", &n_valid, NULL), *idx = int64_tensor(v, "data_idx", &n_idx, NULL);
    if (!label || !valid || !idx || n_valid != n_idx || n_valid < 1 || n_valid > REC_MAX_TENSORS) {
        snprintf(why, why_len, "needs int64 label ([L] or [L, M]), data_valid and data_idx vectors of the same length");
        return -1;
    }
    img_u8 ims[REC_MAX_TENSORS];
    for (int s = 0; s < n_valid; s++) {
        char name[16];
        snprintf(name, sizeof name, "data.%d", s);
        int t = rec_find(v, name);
        const rec_tensor *d = t >= 0 ? &v->tensors[t] : NULL;
        if (!d || d->dtype != REC_U8 || d->ndim != 3 || d->shape[2] != 3 || !d->shape[0] || !d->shape[1] ||
            d->shape[0] > 65535 || d->shape[1] > 65535) {
            snprintf(why, why_len, "%s must be a uint8 [H, W, 3] image", name);
            return -1;
        }
        ims[s] = (img_u8){.px = (uint8_t *)rec_data(v, t), .w = (int)d->shape[1], .h = (int)d->shape[0], .c = 3,
                          .stride = (size_t)d->shape[1] * 3};
    }
    aug_sample_borrow(&a->sample, ims, n_valid, label, width > 1 ? 0 : n_label, valid, idx);
    if (width > 1)
        aug_sample_set_labels(&a->sample, label, n_label, width);
    return load_windows(a, v, n_valid, why, why_len);
}

/* ---- writing the augmented sample -------------------------------------------------------- */

static int write_sample(augment *a, stage *s, const rec_header *in)
{
    rec_writer *w = stage_record_begin(s, REC_DATA, in->seq, in->epoch, aug_sample_tensors(&a->sample));
    if (!w)
        return -1;
    rec_writer_header(w)->flags = in->flags;
    aug_sample_write(&a->sample, &a->norm, a->to_float, w); /* an overflow is reported by the end */
    return stage_record_end(s);
}

static int run(stage *s, void *state)
{
    augment *a = state;
    rec_view v;
    int st;
    char why[256];
    while ((st = stage_read(s, &v)) == STAGE_RECORD) {
        rec_header hdr = *v.hdr;
        if (load_sample(a, &v, why, sizeof why) != 0) {
            stage_read_done(s);
            log_error("record %llu (epoch %u) is not a decoded sample: %s", (unsigned long long)hdr.seq, hdr.epoch,
                      why);
            return 1;
        }
        uint64_t sample_index = (uint64_t)a->sample.idx[0];
        if (aug_apply(a->pipeline, &a->sample, a->seed, hdr.epoch, sample_index, why, sizeof why) != 0) {
            aug_sample_release(&a->sample);
            stage_read_done(s);
            log_error("sample %llu (epoch %u): %s", (unsigned long long)sample_index, hdr.epoch, why);
            return 1;
        }
        int rc = write_sample(a, s, &hdr);
        aug_sample_release(&a->sample); /* before the input record goes: items may borrow it */
        stage_read_done(s);
        if (rc != 0) /* a stop, gone readers or a broken output; stage_exit_status knows which */
            return stage_exit_status(s);
        stage_pace(s, a->pace_ms);
    }
    return st == STAGE_FAILED ? 1 : stage_exit_status(s);
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "augment",
        .summary = "Apply VISSL's DATA.<split>.TRANSFORMS to each decoded sample, PIL-exact.",
        .role = "worker",
        .reads = true,
        .writes = true,
        .option = option,
        .prepare = prepare,
        .options = "  --split train|test  which DATA.<split>.TRANSFORMS to run (default train)\n"
                   "  --float             write float32 CHW (ToTensor/Normalize applied here) instead of\n"
                   "                      uint8 HWC plus a `normalize` tensor for the trainer\n"
                   "  --pace MS           take a sample at most every MS milliseconds (a slower host)\n",
    };
    augment a = {.split = "TRAIN"};
    int status = stage_main(argc, argv, &info, &a, run);
    aug_sample_clear(&a.sample);
    aug_pipeline_free(a.pipeline);
    return status;
}
