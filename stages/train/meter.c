/*
 * meter.c — accuracy_list_meter (see meter.h): the outputs are downloaded once per batch and
 * each row's rank of its target counted on the host; outputs are small (a batch of logits).
 */
#include "train/meter.h"

#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool meter_from_config(const cfg_node *config, acc_meter *m, bool *on, cfg_err *err)
{
    *m = (acc_meter){0};
    const char *name = cfg_str(config, "METERS.name");
    *on = false;
    if (!*name)
        return true;
    if (strcmp(name, "accuracy_list_meter") != 0) {
        cfg_fail(err, cfg_get(config, "METERS.name"), "config.METERS.name",
                 "'%s' is not run by this trainer yet (accuracy_list_meter)", name);
        return false;
    }
    const cfg_node *k = cfg_get(config, "METERS.accuracy_list_meter.topk_values"),
                   *names = cfg_get(config, "METERS.accuracy_list_meter.meter_names");
    m->num_meters = (int)cfg_int(config, "METERS.accuracy_list_meter.num_meters");
    if (k->kind != CFG_LIST || k->len < 1 || k->len > METER_MAX_TOPK || m->num_meters < 1 ||
        m->num_meters > METER_MAX_OUTPUTS || names->kind != CFG_LIST ||
        (names->len && (int)names->len != m->num_meters)) {
        cfg_fail(err, cfg_get(config, "METERS.accuracy_list_meter"), "config.METERS.accuracy_list_meter",
                 "topk_values must list 1 to %d values, num_meters be 1 to %d, meter_names empty or one per meter",
                 METER_MAX_TOPK, METER_MAX_OUTPUTS);
        return false;
    }
    for (size_t i = 0; i < k->len; i++)
        m->topk[i] = k->items[i]->kind == CFG_INT ? (int)k->items[i]->i : 0;
    m->ntopk = (int)k->len;
    for (size_t i = 0; i < names->len; i++)
        m->names[i] = names->items[i]->kind == CFG_STR ? names->items[i]->s : NULL;
    *on = cfg_bool(config, "METERS.enable_training_meter");
    return true;
}

/* How many classes of a row score strictly higher than the target's. */
static int64_t rank_of(const float *row, int64_t c, int64_t target)
{
    int64_t above = 0;
    for (int64_t j = 0; j < c; j++)
        above += row[j] > row[target];
    return above;
}

void meter_update(eng_backend *be, acc_meter *m, const eng_tensor *const *outputs, int n, const int64_t *label)
{
    for (int k = 0; k < n && k < m->num_meters; k++) {
        int64_t rows = outputs[k]->shape.dim[0], c = outputs[k]->shape.dim[1];
        float *h = xmalloc((size_t)(rows * c) * sizeof *h);
        eng_download(be, outputs[k], h);
        for (int64_t i = 0; i < rows; i++) {
            int64_t r = label[i] >= 0 && label[i] < c ? rank_of(h + i * c, c, label[i]) : c;
            for (int t = 0; t < m->ntopk; t++)
                m->correct[k][t] += r < m->topk[t];
        }
        m->total[k] += rows;
        free(h);
    }
}

json_t *meter_value(const acc_meter *m)
{
    json_t *v = json_object();
    for (int t = 0; t < m->ntopk; t++) {
        json_t *per = json_object();
        for (int k = 0; k < m->num_meters; k++) {
            double acc = m->total[k] ? (double)m->correct[k][t] / (double)m->total[k] : 0.0;
            char idx[16];
            snprintf(idx, sizeof idx, "%d", k);
            json_object_set_new(per, m->names[k] ? m->names[k] : idx, json_real(100.0 * round(acc * 1e6) / 1e6));
        }
        char key[16];
        snprintf(key, sizeof key, "top_%d", m->topk[t]);
        json_object_set_new(v, key, per);
    }
    return v;
}

void meter_reset(acc_meter *m)
{
    memset(m->correct, 0, sizeof m->correct);
    memset(m->total, 0, sizeof m->total);
}
