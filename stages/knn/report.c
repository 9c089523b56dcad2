/*
 * report.c — selfsup-knn's table and JSON (report.h). The JSON document is built with
 * jansson as the layers finish, so a later layer's failure still leaves the earlier results
 * in the file, and written once at the end through atomic_file.
 */
#include "knn/report.h"

#include "atomic_file.h"
#include "log.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void knn_report_init(knn_report *rep)
{
    rep->json = json_object();
    rep->n_rows = 0;
}

void knn_report_add(knn_report *rep, const char *layer, const knn_options *opt, const knn_result *r)
{
    json_t *doc = rep->json, *layers = json_object_get(doc, "layers");
    if (!layers) {
        json_object_set_new(doc, "benchmark", json_string("nearest_neighbor"));
        json_object_set_new(doc, "sigma", json_real(opt->sigma));
        json_object_set_new(doc, "topk", json_integer(opt->topk));
        json_object_set_new(doc, "l2_norm_feats", json_boolean(opt->l2_norm));
        json_object_set_new(doc, "layers", layers = json_object());
    }
    json_t *row = json_object();
    json_object_set_new(row, "top1", json_real(r->top1));
    json_object_set_new(row, "top5", json_real(r->top5));
    json_object_set_new(row, "n_train", json_integer((json_int_t)r->n_train));
    json_object_set_new(row, "n_test", json_integer((json_int_t)r->n_test));
    json_object_set_new(row, "dim", json_integer((json_int_t)r->dim));
    json_object_set_new(row, "num_classes", json_integer(r->num_classes));
    json_object_set_new(row, "k", json_integer(r->k));
    json_object_set_new(row, "overflow_rows", json_integer((json_int_t)r->overflow_rows));
    json_object_set_new(row, "seconds", json_real(r->seconds));
    json_object_set_new(layers, layer, row);
    rep->n_rows++;
}

void knn_report_print_header(FILE *out)
{
    fprintf(out, "%-16s %10s %9s %6s %6s %8s %9s %9s %9s\n", "layer", "N train", "N test", "dim", "k", "sigma",
            "top-1", "top-5", "time");
    fflush(out);
}

void knn_report_print_row(FILE *out, const char *layer, const knn_options *opt, const knn_result *r)
{
    fprintf(out, "%-16s %10zu %9zu %6zu %6lld %8g %9.4f %9.4f %8.2fs\n", layer, r->n_train, r->n_test, r->dim,
            (long long)r->k, opt->sigma, r->top1, r->top5, r->seconds);
    fflush(out);
}

int knn_report_write_json(const knn_report *rep, const char *path)
{
    char *err = NULL;
    int rc = json_write_file(rep->json, path, &err);
    if (rc) {
        log_error("cannot write the results to %s: %s", path, err ? err : "?");
        free(err);
    }
    return rc;
}

void knn_report_free(knn_report *rep)
{
    json_decref(rep->json);
    rep->json = NULL;
}
