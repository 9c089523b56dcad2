/*
 * report.h — selfsup-svm's input and output around the protocol (svm.h): a layer's feature
 * files made into svm_data, the printed tables and the JSON results.
 *
 * JSON (svm_results.json in the output folder), per layer:
 *   VOC07:    {"mAP": round(100·mean test AP, 3), "classes": […], "AP": […], "chosen_cost": […],
 *              "costs": […], "crossval_ap": [[…]], "seconds": s}   (NaN is null, a skipped
 *              class has AP −1)
 *   low-shot: {"k=K": {"mean", "min", "max", "std"}, …, "seconds": s}  (VISSL's aggregate_stats)
 */
#ifndef SELFSUP_SVM_REPORT_H
#define SELFSUP_SVM_REPORT_H

#include "features.h"
#include "svm/svm.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* Move the features of both splits into svm_data (train->features and test->features are
 * taken), targets in VOC form (class indices, each below SVM_MAX_CLASSES, become one-vs-rest
 * over max + 1 classes of both splits), normalised when asked. what[0] and what[1] name the
 * train and test targets in messages ("train targets (FILE)"). 0, or -1 with *err naming the
 * split and row. */
int svm_data_from_features(feat_set *train, feat_set *test, bool normalize, const char *const what[2], svm_data *tr,
                           svm_data *te, char **err);
void svm_data_free(svm_data *d);

/* Whether the VOC07 protocol can give a mean AP: some class of o->cls_list (all when empty)
 * has positive and negative training rows (the others are skipped, as VISSL skips them), and
 * one of those has a positive test row (the others score AP −1). 0, or -1 with *err naming
 * the split (what[0], what[1]) that lacks them: a run with no AP to average is an error, not
 * a result of −1. */
int svm_check_positives(const svm_opts *o, const svm_data *tr, const svm_data *te, const char *const what[2],
                        char **err);

json_t *svm_result_json(const svm_opts *o, const svm_result *r);
json_t *svm_lowshot_json(const svm_opts *o, const svm_lowshot_result *r);
void svm_print_result(FILE *out, const char *layer, const svm_result *r);
void svm_print_lowshot(FILE *out, const char *layer, const svm_opts *o, const svm_lowshot_result *r);

#endif
