/*
 * report.h — what selfsup-knn shows and keeps of its results: one table row per layer on
 * stdout as each layer finishes, and at the end one JSON file with every layer's numbers:
 *
 *   {"benchmark": "nearest_neighbor", "sigma": 0.1, "topk": 200, "l2_norm_feats": true,
 *    "layers": {"res5avg": {"top1": 85.31, "top5": 97.12, "n_train": 60000, "n_test": 10000,
 *               "dim": 512, "num_classes": 10, "k": 200, "overflow_rows": 0, "seconds": 3.2}}}
 *
 * top1 and top5 are percentages, as VISSL logs them.
 */
#ifndef SELFSUP_KNN_REPORT_H
#define SELFSUP_KNN_REPORT_H

#include "knn/knn.h"

#include <stdio.h>

typedef struct {
    void *json; /* json_t *: the whole document */
    int n_rows;
} knn_report;

void knn_report_init(knn_report *rep);
void knn_report_add(knn_report *rep, const char *layer, const knn_options *opt, const knn_result *r);
void knn_report_print_header(FILE *out);
void knn_report_print_row(FILE *out, const char *layer, const knn_options *opt, const knn_result *r);
/* Atomically (temp file + rename). 0, or -1 after logging why. */
int knn_report_write_json(const knn_report *rep, const char *path);
void knn_report_free(knn_report *rep);

#endif
