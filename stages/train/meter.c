/*
 * meter.c — accuracy_list_meter, mean_ap_list_meter and mean_ap_meter (see meter.h): the
 * outputs are downloaded once per batch; the accuracy counts each row's rank of its target on
 * the host, mean AP keeps every row's scores and targets for the phase's end.
 */
#include "train/meter.h"
#include "train/dist.h"

#include "ap.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* num_meters and meter_names of METERS.<name>. */
static bool read_outputs(const cfg_node *config, const char *name, acc_meter *m, cfg_err *err)
{
    char key[96], path[112];
    snprintf(key, sizeof key, "METERS.%s", name);
    snprintf(path, sizeof path, "config.METERS.%s", name);
    const cfg_node *mc = cfg_get(config, key), *names = cfg_get(mc, "meter_names");
    m->num_meters = (int)cfg_int(mc, "num_meters");
    if (m->num_meters < 1 || m->num_meters > METER_MAX_OUTPUTS || names->kind != CFG_LIST ||
        (names->len && (int)names->len != m->num_meters)) {
        cfg_fail(err, mc, path, "num_meters must be 1 to %d, meter_names empty or one per meter", METER_MAX_OUTPUTS);
        return false;
    }
    for (size_t i = 0; i < names->len; i++)
        m->names[i] = names->items[i]->kind == CFG_STR ? names->items[i]->s : NULL;
    return true;
}

static bool read_accuracy(const cfg_node *config, acc_meter *m, cfg_err *err)
{
    const cfg_node *k = cfg_get(config, "METERS.accuracy_list_meter.topk_values");
    if (k->kind != CFG_LIST || k->len < 1 || k->len > METER_MAX_TOPK) {
        cfg_fail(err, k, "config.METERS.accuracy_list_meter.topk_values", "must list 1 to %d values", METER_MAX_TOPK);
        return false;
    }
    for (size_t i = 0; i < k->len; i++)
        m->topk[i] = k->items[i]->kind == CFG_INT ? (int)k->items[i]->i : 0;
    m->ntopk = (int)k->len;
    return read_outputs(config, "accuracy_list_meter", m, err);
}

/* METERS.<meter>.num_classes, which must be positive. */
static bool read_num_classes(const cfg_node *config, const char *meter, acc_meter *m, cfg_err *err)
{
    char key[96], path[112];
    snprintf(key, sizeof key, "METERS.%s.num_classes", meter);
    snprintf(path, sizeof path, "config.%s", key);
    m->num_classes = (int)cfg_int(config, key);
    if (m->num_classes < 1) {
        cfg_fail(err, cfg_get(config, key), path, "must be positive%s",
                 strcmp(meter, "mean_ap_meter") ? "" : " (VISSL 0.1.5 has no default: name the classes)");
        return false;
    }
    return true;
}

static bool read_mean_ap(const cfg_node *config, acc_meter *m, cfg_err *err)
{
    return read_num_classes(config, "mean_ap_list_meter", m, err) && read_outputs(config, "mean_ap_list_meter", m, err);
}

bool meter_from_config(const cfg_node *config, acc_meter *m, bool *on, cfg_err *err)
{
    *m = (acc_meter){0};
    const char *name = cfg_str(config, "METERS.name");
    *on = false;
    if (!*name)
        return true;
    bool ok;
    if (!strcmp(name, "accuracy_list_meter")) {
        m->kind = METER_ACCURACY, m->name = "accuracy_list_meter";
        ok = read_accuracy(config, m, err);
    } else if (!strcmp(name, "mean_ap_list_meter")) {
        m->kind = METER_MEAN_AP, m->name = "mean_ap_list_meter";
        ok = read_mean_ap(config, m, err);
    } else if (!strcmp(name, "mean_ap_meter")) {
        m->kind = METER_MEAN_AP_ONE, m->name = "mean_ap_manual_meter", m->num_meters = 1;
        ok = read_num_classes(config, "mean_ap_meter", m, err);
    } else {
        cfg_fail(err, cfg_get(config, "METERS.name"), "config.METERS.name",
                 "'%s' is not run by this trainer (accuracy_list_meter, mean_ap_list_meter, mean_ap_meter)", name);
        return false;
    }
    *on = ok && cfg_bool(config, "METERS.enable_training_meter");
    return ok;
}

/* How many classes of a row score strictly higher than the target's. */
static int64_t rank_of(const float *row, int64_t c, int64_t target)
{
    int64_t above = 0;
    for (int64_t j = 0; j < c; j++)
        above += row[j] > row[target];
    return above;
}

static void accuracy_update(acc_meter *m, int k, const float *h, int64_t rows, int64_t c, const int64_t *label)
{
    for (int64_t i = 0; i < rows; i++) {
        int64_t r = label[i] >= 0 && label[i] < c ? rank_of(h + i * c, c, label[i]) : c;
        for (int t = 0; t < m->ntopk; t++)
            m->correct[k][t] += r < m->topk[t];
    }
    m->total[k] += rows;
}

/* Room for `more` rows of every output's sigmoids and of the targets. */
static void mean_ap_reserve(acc_meter *m, int64_t more)
{
    if (m->rows + more <= m->cap)
        return;
    int64_t cap = m->cap ? m->cap : 256;
    while (cap < m->rows + more)
        cap *= 2;
    size_t row = (size_t)m->num_classes;
    for (int k = 0; k < m->num_meters; k++)
        m->scores[k] = xrealloc(m->scores[k], (size_t)cap * row * sizeof *m->scores[k]);
    m->targets = xrealloc(m->targets, (size_t)cap * row);
    m->cap = cap;
}

/* A batch's targets for mean AP, as 1, 0 or -1: the list meter takes a target's sign;
 * MeanAPMeter asserts that every value is one of the three (verify_target). */
static int mean_ap_add_targets(acc_meter *m, const int64_t *label, int64_t rows, char **err)
{
    int64_t cells = rows * m->num_classes;
    if (m->kind == METER_MEAN_AP_ONE)
        for (int64_t i = 0; i < cells; i++)
            if (label[i] < -1 || label[i] > 1)
                return report_failure(err, "mean_ap_meter: target %lld of row %lld, class %lld: the meter takes 1, 0 "
                                      "or -1", (long long)label[i], (long long)(i / m->num_classes),
                                      (long long)(i % m->num_classes));
    mean_ap_reserve(m, rows);
    for (int64_t i = 0; i < cells; i++)
        m->targets[m->rows * m->num_classes + i] = (int8_t)(label[i] > 0 ? 1 : label[i] < 0 ? -1 : 0);
    return 0;
}

int meter_update(eng_backend *be, acc_meter *m, const eng_tensor *const *outputs, int n, const int64_t *label,
                 int64_t label_rows, int label_cols, char **err)
{
    if (n < m->num_meters)
        return report_failure(err, "%s: %d meters but the model has %d outputs", m->name, m->num_meters, n);
    if (m->kind == METER_MEAN_AP_ONE && n != 1)
        return report_failure(err, "mean_ap_meter measures one output and the model has %d: use mean_ap_list_meter",
                              n);
    bool ap = m->kind != METER_ACCURACY;
    int64_t rows = outputs[0]->shape.dim[0];
    if (label_rows != rows || label_cols != (ap ? m->num_classes : 1))
        return report_failure(err, "%s: the batch's target is %lld × %d, the meter needs %lld × %d", m->name,
                              (long long)label_rows, label_cols, (long long)rows, ap ? m->num_classes : 1);
    if (ap && mean_ap_add_targets(m, label, rows, err) != 0)
        return -1;
    for (int k = 0; k < m->num_meters; k++) {
        int64_t c = outputs[k]->shape.dim[1];
        if (outputs[k]->shape.dim[0] != rows || (ap && c != m->num_classes))
            return report_failure(err, "%s: output %d is %lld × %lld for %lld targets of %d classes", m->name, k,
                                  (long long)outputs[k]->shape.dim[0], (long long)c, (long long)rows,
                                  ap ? m->num_classes : 1);
        float *h = xmalloc((size_t)(rows * c) * sizeof *h);
        eng_download(be, outputs[k], h);
        if (m->kind == METER_MEAN_AP_ONE)
            memcpy(m->scores[k] + m->rows * c, h, (size_t)(rows * c) * sizeof *h);
        else if (ap)
            for (int64_t i = 0; i < rows * c; i++) /* torch.sigmoid in float32 */
                m->scores[k][m->rows * c + i] = 1.0f / (1.0f + expf(-h[i]));
        else
            accuracy_update(m, k, h, rows, c, label);
        free(h);
    }
    if (ap)
        m->rows += rows;
    return 0;
}

/* The key of output k: its meter name, else its index. */
static const char *output_key(const acc_meter *m, int k, char buf[16])
{
    snprintf(buf, 16, "%d", k);
    return m->names[k] ? m->names[k] : buf;
}

static double percent6(double fraction) { return 100.0 * round(fraction * 1e6) / 1e6; }

static json_t *accuracy_value(const acc_meter *m)
{
    json_t *v = json_object();
    for (int t = 0; t < m->ntopk; t++) {
        json_t *per = json_object();
        for (int k = 0; k < m->num_meters; k++) {
            double acc = m->total[k] ? (double)m->correct[k][t] / (double)m->total[k] : 0.0;
            char idx[16];
            json_object_set_new(per, output_key(m, k, idx), json_real(percent6(acc)));
        }
        char key[16];
        snprintf(key, sizeof key, "top_%d", m->topk[t]);
        json_object_set_new(v, key, per);
    }
    return v;
}

/* Output k's AP per class (-1: no positive) into a new JSON list; their mean over the classes
 * that have one, NAN when none does. */
static double output_aps(const acc_meter *m, int k, json_t **list)
{
    *list = json_array();
    double sum = 0.0;
    int counted = 0;
    for (int c = 0; c < m->num_classes; c++) {
        double ap = m->rows ? ap_voc(m->scores[k] + c, m->targets + c, (size_t)m->rows, (size_t)m->num_classes) : -1.0;
        json_array_append_new(*list, json_real(ap));
        if (ap != -1.0)
            sum += ap, counted++;
    }
    return counted ? sum / counted : NAN;
}

static json_t *mean_ap_value(const acc_meter *m)
{
    json_t *maps = json_object(), *aps = json_object();
    for (int k = 0; k < m->num_meters; k++) {
        json_t *list;
        double map = output_aps(m, k, &list);
        char idx[16];
        const char *key = output_key(m, k, idx);
        json_object_set_new(maps, key, json_real(percent6(isnan(map) ? 0.0 : map)));
        json_object_set_new(aps, key, list);
    }
    json_t *v = json_object();
    json_object_set_new(v, "mAP", maps);
    json_object_set_new(v, "AP", aps);
    return v;
}

/* MeanAPMeter's {"mAP": fraction, "AP": [per class]}. */
static json_t *mean_ap_one_value(const acc_meter *m)
{
    json_t *list;
    double map = output_aps(m, 0, &list);
    json_t *v = json_object();
    json_object_set_new(v, "mAP", isnan(map) ? json_null() : json_real(map));
    json_object_set_new(v, "AP", list);
    return v;
}

json_t *meter_value(const acc_meter *m)
{
    switch (m->kind) {
    case METER_MEAN_AP: return mean_ap_value(m);
    case METER_MEAN_AP_ONE: return mean_ap_one_value(m);
    default: return accuracy_value(m);
    }
}

/* *rows (n rows of row_bytes) replaced by the world's. */
static int gather_into(dist *d, void **rows, size_t row_bytes, int64_t n, int64_t *total, char **err)
{
    void *all;
    if (dist_gather_rows(d, *rows, row_bytes, n, &all, total, err) != 0)
        return -1;
    free(*rows);
    *rows = all;
    return 0;
}

static int gather_mean_ap(acc_meter *m, dist *d, char **err)
{
    size_t row = (size_t)m->num_classes;
    int64_t total = 0;
    for (int k = 0; k < m->num_meters; k++)
        if (gather_into(d, (void **)&m->scores[k], row * sizeof(float), m->rows, &total, err) != 0)
            return -1;
    if (gather_into(d, (void **)&m->targets, row, m->rows, &total, err) != 0)
        return -1;
    m->rows = m->cap = total;
    return 0;
}

int meter_reduce(acc_meter *m, dist *d, char **err)
{
    if (dist_world(d) == 1)
        return 0;
    if (m->kind != METER_ACCURACY)
        return gather_mean_ap(m, d, err);
    size_t cells = sizeof m->correct / sizeof m->correct[0][0];
    if (dist_sum_counts(d, &m->correct[0][0], cells, err) != 0)
        return -1;
    return dist_sum_counts(d, m->total, METER_MAX_OUTPUTS, err);
}

void meter_reset(acc_meter *m)
{
    memset(m->correct, 0, sizeof m->correct);
    memset(m->total, 0, sizeof m->total);
    m->rows = 0;
}

void meter_free(acc_meter *m)
{
    for (int k = 0; k < METER_MAX_OUTPUTS; k++)
        free(m->scores[k]), m->scores[k] = NULL;
    free(m->targets);
    m->targets = NULL;
    m->rows = m->cap = 0;
}
