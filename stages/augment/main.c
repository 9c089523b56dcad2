/*
 * selfsup-augment — VISSL's transforms, one sample at a time, PIL-exact.
 *
 * Reads decoded samples (data.S uint8 HWC, label, data_valid, data_idx; see sample.h),
 * runs DATA.<split>.TRANSFORMS on each (transforms.h), and writes one record per sample
 * with its crops data.0 … data.K-1. Several workers may share one input and one output
 * ring; every sample's randomness is keyed by (SEED_VALUE, epoch, data_idx, transform), so
 * the crops do not depend on which worker made them, and the collate stage restores order.
 *
 * Pixels leave as uint8 HWC with a `normalize` tensor (divisor, mean, std) that the trainer
 * applies on its device — 4x less traffic than float. --float applies it here instead and
 * writes float32 CHW, which is what VISSL's transforms hand to its collator.
 *
 *   selfsup-augment -c CONFIG [--split train|test] [--float] [--in URI] [--out URI] [overrides]
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
    return 0;
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

static const int64_t *int64_tensor(const rec_view *v, const char *name, int *n)
{
    int i = rec_find(v, name);
    if (i < 0 || v->tensors[i].dtype != REC_I64 || v->tensors[i].ndim != 1)
        return NULL;
    *n = (int)v->tensors[i].shape[0];
    return rec_data(v, i);
}

/* Start a sample on the record's images, borrowed in place (the transforms copy them only if
 * they change pixels in place before cropping). Returns 0, or -1 when the record is not a
 * decoded sample. The record must stay until the sample has been written. */
static int load_sample(augment *a, const rec_view *v, char *why, size_t why_len)
{
    int n_label = 0, n_valid = 0, n_idx = 0;
    const int64_t *label = int64_tensor(v, "label", &n_label), *valid = int64_tensor(v, "data_valid", &n_valid),
                  *idx = int64_tensor(v, "data_idx", &n_idx);
    if (!label || !valid || !idx || n_valid != n_idx || n_valid < 1 || n_valid > REC_MAX_TENSORS) {
        snprintf(why, why_len, "needs int64 label, data_valid and data_idx vectors of the same length");
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
    aug_sample_borrow(&a->sample, ims, n_valid, label, n_label, valid, idx);
    return 0;
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
                   "                      uint8 HWC plus a `normalize` tensor for the trainer\n",
    };
    augment a = {.split = "TRAIN"};
    int status = stage_main(argc, argv, &info, &a, run);
    aug_sample_clear(&a.sample);
    aug_pipeline_free(a.pipeline);
    return status;
}
