/*
 * collate.h — VISSL's collators: N sample records in, one batch record out.
 *
 * A collator reads the samples' tensors (data.K, label, data_valid, data_idx; sample.h) and
 * writes VISSL's batch dict with the naming rule of sample.h (list entry i of key K is "K.i").
 * The tensor order is VISSL's exactly: crop-major for simclr_collator and multicrop_collator,
 * image-major towers for siamese_collator, and so on (vissl/data/collators/).
 */
#ifndef SELFSUP_COLLATE_H
#define SELFSUP_COLLATE_H

#include "config.h"
#include "record.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    COLLATE_DEFAULT,       /* default_collate */
    COLLATE_SIMCLR,        /* simclr_collator */
    COLLATE_MULTICROP,     /* multicrop_collator */
    COLLATE_MOCO,          /* moco_collator */
    COLLATE_SIAMESE,       /* siamese_collator */
    COLLATE_PATCH_AND_IMAGE, /* patch_and_image_collator */
    COLLATE_MIXUP,           /* multicrop_mixup_collator */
    COLLATE_ONE_HOT,         /* targets_one_hot_default_collator */
} collate_kind;

/* Labels: a sample's `label` is int64 [L] (one integer per label) or int64 [L, M] (each label
 * a row of M values, from a 2-D [N, M] label .npy). default_collate writes label.j as [N] or
 * [N, M]; simclr_collator, multicrop_collator and multicrop_mixup_collator stack the crop-major
 * rows to [k*N, M]; moco_collator, siamese_collator and patch_and_image_collator refuse rows
 * (VISSL would squeeze or nest them into shapes nothing downstream reads).
 *
 * targets_one_hot_default_collator: VISSL's label[0] = [pos_list, neg_list] is encoded as the
 * row label[0] of an int64 [L, 2K] label: values 0..K-1 are the positive class indices, K..2K-1
 * the negative ones, each list padded with -1 (a -1 anywhere is "no entry"; any other
 * negative index is an error, as torch's scatter_ raises). A matching LABEL_PATHS file is a
 * 2-D int .npy [N, 2K]. A 1-D label is refused, as VISSL's len(label[0]) raises on an int.
 * The batch: data.0 [N, ...] (exactly one data source), label.0 int64 [N, num_classes] from
 * convert_to_one_hot (all -1, positives 1, then negatives 0: a class in both lists is 0),
 * data_valid.0 and data_idx.0 int64 [N]. Every index must be < num_classes. */

/* What a collator draws at random, drawn by the caller (collate_mixup_lambda) so that tests
 * can fix it, and its COLLATE_FUNCTION_PARAMS. */
typedef struct {
    double mixup_lambda; /* multicrop_mixup_collator's mixing factor */
    int64_t num_classes; /* targets_one_hot_default_collator's COLLATE_FUNCTION_PARAMS.num_classes (> 0) */
} collate_options;

/* multicrop_mixup_collator's lambda ~ Beta(0.2, 0.2), one per batch, from the counter-based
 * stream (seed, RNG_PURPOSE_COLLATOR, epoch, batch). */
double collate_mixup_lambda(uint64_t seed, uint32_t epoch, uint64_t batch);

/* The collator for a COLLATE_FUNCTION name; -1 when selfsup does not have it (`why` says
 * whether VISSL knows the name). */
int collate_from_name(const char *name, collate_kind *kind, char *why, size_t why_len);

/* DATA.<split>.COLLATE_FUNCTION_PARAMS (`params`, NULL or a map) for the collator `kind`
 * named `name`, into *opt: targets_one_hot_default_collator needs num_classes, an integer
 * > 0, and takes nothing else; the others take no parameters. 0, or -1 with `why` (a config
 * error: the stage and the orchestrator exit 2 before anything runs). */
int collate_read_params(collate_kind kind, const char *name, const cfg_node *params, collate_options *opt, char *why,
                        size_t why_len);

/* Upper bound on the tensors a batch of these samples needs (for stage_record_begin). */
uint32_t collate_max_tensors(collate_kind kind, const rec_view *first);

/* Write the batch of samples[0..n) into w. Returns 0, or -1 with `why` set when the samples
 * do not fit the collator (VISSL would raise): missing tensors, mismatched shapes. */
int collate_batch(collate_kind kind, const rec_view *samples, int n, const collate_options *opt, rec_writer *w,
                  char *why, size_t why_len);

#endif
