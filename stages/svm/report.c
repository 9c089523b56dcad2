/*
 * report.c — what selfsup-svm shows and keeps of a run: loading a layer's features into the
 * protocol's form, the printed table and the JSON result file.
 */
#include "svm/report.h"

#include "log.h"
#include "util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Single-label targets: every class index below SVM_MAX_CLASSES (negative ones mean "no
 * label" and are kept, see svm_targets_convert). */
static int check_class_indices(const feat_set *f, const char *what, char **err)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->targets[i] >= SVM_MAX_CLASSES)
            return report_failure(err, "%s: row %zu: class index %lld, past the %d classes selfsup-svm supports", what,
                                  i, (long long)f->targets[i], SVM_MAX_CLASSES);
    return 0;
}

int svm_data_from_features(feat_set *train, feat_set *test, bool normalize, const char *const what[2], svm_data *tr,
                           svm_data *te, char **err)
{
    memset(tr, 0, sizeof *tr);
    memset(te, 0, sizeof *te);
    if (train->n == 0)
        return report_failure(err, "the training split has no rows");
    if (test->n == 0)
        return report_failure(err, "the test split has no rows");
    if (train->dim != test->dim)
        return report_failure(err, "train features have %zu columns, test features %zu: they must come from the "
                                   "same layer", train->dim, test->dim);
    int64_t max_tr, max_te;
    bool idx_tr = svm_targets_are_indices(train->targets, train->n, train->ntargets, &max_tr);
    bool idx_te = svm_targets_are_indices(test->targets, test->n, test->ntargets, &max_te);
    size_t nclasses = 0; /* VOC style unless either side holds class indices */
    if ((idx_tr || idx_te) && train->ntargets == 1 && test->ntargets == 1) {
        if (check_class_indices(train, what[0], err) || check_class_indices(test, what[1], err))
            return -1;
        nclasses = (size_t)(max_tr > max_te ? max_tr : max_te) + 1;
        log_info("targets are single class indices: %zu classes, trained one-vs-rest", nclasses);
    }
    if (svm_targets_convert(train->targets, train->n, train->ntargets, nclasses, what[0], &tr->t, &tr->C, err) ||
        svm_targets_convert(test->targets, test->n, test->ntargets, nclasses, what[1], &te->t, &te->C, err))
        return -1;
    if (tr->C != te->C)
        return report_failure(err, "train targets have %zu classes, test targets %zu", tr->C, te->C);
    tr->n = train->n, tr->dim = train->dim, tr->x = train->features;
    te->n = test->n, te->dim = test->dim, te->x = test->features;
    train->features = test->features = NULL; /* the svm_data own them now */
    if (normalize) {
        svm_normalize_rows(tr->x, tr->n, tr->dim);
        svm_normalize_rows(te->x, te->n, te->dim);
    }
    return 0;
}

/* Rows of column c holding 1. */
static size_t positives(const svm_data *d, size_t c)
{
    size_t pos = 0;
    for (size_t i = 0; i < d->n; i++)
        pos += d->t[i * d->C + c] == 1;
    return pos;
}

int svm_check_positives(const svm_opts *o, const svm_data *tr, const svm_data *te, const char *const what[2],
                        char **err)
{
    size_t ncls = o->ncls_list ? o->ncls_list : tr->C, trainable = 0;
    for (size_t j = 0; j < ncls; j++) {
        size_t c = o->ncls_list ? (size_t)o->cls_list[j] : j;
        if (c >= tr->C || c >= te->C)
            return 0; /* a bad cls_list entry: svm_voc07 names it */
        size_t pos = positives(tr, c);
        if (pos == 0 || pos == tr->n)
            continue;
        trainable++;
        if (positives(te, c) > 0)
            return 0;
    }
    if (!trainable)
        return report_failure(err,
                              "%s: no class has both positive (1) and negative rows, so no SVM can be trained and "
                              "there is no AP to report",
                              what[0]);
    return report_failure(err, "%s: none of the %zu trainable classes has a positive (1) row, so there is no AP to "
                               "report",
                          what[1], trainable);
}

void svm_data_free(svm_data *d)
{
    free(d->x);
    free(d->t);
    memset(d, 0, sizeof *d);
}

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *reals(const double *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, real_or_null(v[i]));
    return a;
}

/* VISSL's report: round(100 · mean(test AP), 3). */
static double map_percent(double mAP)
{
    char b[64];
    if (mAP < 0)
        return -1;
    snprintf(b, sizeof b, "%.3f", 100.0 * mAP);
    return strtod(b, NULL);
}

json_t *svm_result_json(const svm_opts *o, const svm_result *r)
{
    json_t *j = json_object();
    json_object_set_new(j, "mAP", json_real(map_percent(r->mAP)));
    json_t *cls = json_array();
    for (size_t i = 0; i < r->ncls; i++)
        json_array_append_new(cls, json_integer(r->cls[i]));
    json_object_set_new(j, "classes", cls);
    json_object_set_new(j, "AP", reals(r->test_ap, r->ncls));
    json_object_set_new(j, "chosen_cost", reals(r->chosen, r->ncls));
    json_object_set_new(j, "costs", reals(o->costs, o->ncosts));
    json_t *cv = json_array();
    for (size_t i = 0; i < r->ncls; i++)
        json_array_append_new(cv, reals(r->crossval + i * o->ncosts, o->ncosts));
    json_object_set_new(j, "crossval_ap", cv);
    json_object_set_new(j, "seconds", json_real(r->seconds));
    return j;
}

json_t *svm_lowshot_json(const svm_opts *o, const svm_lowshot_result *r)
{
    json_t *j = json_object();
    for (size_t k = 0; k < r->nk; k++) {
        json_t *s = json_object();
        static const char *const names[4] = {"mean", "min", "max", "std"};
        for (int i = 0; i < 4; i++)
            json_object_set_new(s, names[i], real_or_null(r->stats[k * 4 + (size_t)i]));
        char key[32];
        snprintf(key, sizeof key, "k=%d", o->k_values[k]);
        json_object_set_new(j, key, s);
    }
    json_object_set_new(j, "seconds", json_real(r->seconds));
    return j;
}

void svm_print_result(FILE *out, const char *layer, const svm_result *r)
{
    fprintf(out, "layer %s: mAP %.3f (%zu classes, %.1f s%s)\n", layer, map_percent(r->mAP), r->ncls, r->seconds,
            r->reused ? ", some reused" : "");
    fprintf(out, "  %-6s %9s %12s\n", "class", "test AP", "chosen cost");
    for (size_t i = 0; i < r->ncls; i++) {
        char cost[40] = "-";
        if (!isnan(r->chosen[i]))
            svm_cost_name(r->chosen[i], cost, sizeof cost);
        if (r->test_ap[i] < 0)
            fprintf(out, "  %-6d %9s %12s\n", r->cls[i], "skipped", cost);
        else
            fprintf(out, "  %-6d %9.3f %12s\n", r->cls[i], 100.0 * r->test_ap[i], cost);
    }
}

void svm_print_lowshot(FILE *out, const char *layer, const svm_opts *o, const svm_lowshot_result *r)
{
    fprintf(out, "layer %s: low-shot test mAP over %zu samples (%.1f s)\n", layer, r->nsamples, r->seconds);
    fprintf(out, "  %-6s %8s %8s %8s %8s\n", "k", "mean", "min", "max", "std");
    for (size_t k = 0; k < r->nk; k++)
        fprintf(out, "  %-6d %8.2f %8.2f %8.2f %8.2f\n", o->k_values[k], r->stats[k * 4], r->stats[k * 4 + 1],
                r->stats[k * 4 + 2], r->stats[k * 4 + 3]);
}
