/*
 * test_meter.c — accuracy_list_meter (stages/train/meter.c) on hand-computed batches: top-k
 * counts per output, VISSL's value dict (percentages rounded to 6 decimals of the fraction,
 * keyed top_K then the meter's name or index), the reset between phases, and the config.
 */
#include "config.h"
#include "nn.h"
#include "train/meter.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static eng_tensor upload(eng_backend *be, int64_t n, int64_t c, const float *v)
{
    eng_tensor t = eng_tensor_new(be, eng_shape2(n, c));
    eng_upload(be, &t, v);
    return t;
}

Test(meter, top_k_of_two_outputs_by_hand)
{
    eng_backend *be = nnt_open_cpu();
    acc_meter m = {.topk = {1, 2}, .ntopk = 2, .num_meters = 2, .names = {NULL, "res5"}};
    /* output 0: sample 0's target (1) is the best, sample 1's (2) second, sample 2's is -1
     * (counted wrong, as ClassyVision's meter counts it); output 1: sample 0's target is last
     * of 3, sample 1's first. */
    const float o0[] = {0.1f, 0.9f, 0.0f, 0.5f, 0.2f, 0.3f, 1.0f, 0.0f, 0.0f};
    const float o1[] = {0.9f, 0.1f, 0.5f, 0.0f, 0.0f, 1.0f, 2.0f, 0.0f, 0.0f};
    const int64_t label[] = {1, 2, -1};
    eng_tensor a = upload(be, 3, 3, o0), b = upload(be, 3, 3, o1);
    const eng_tensor *outs[] = {&a, &b};
    meter_update(be, &m, outs, 2, label);
    json_t *v = meter_value(&m);
    char *text = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(15));
    cr_expect_str_eq(text, "{\"top_1\":{\"0\":33.3333,\"res5\":33.3333},\"top_2\":{\"0\":66.6667,\"res5\":33.3333}}");
    free(text);
    json_decref(v);
    meter_reset(&m);
    meter_update(be, &m, outs, 1, (const int64_t[]){0, 0, 0});
    v = meter_value(&m);
    text = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(15));
    cr_expect_str_eq(text, "{\"top_1\":{\"0\":66.6667,\"res5\":0.0},\"top_2\":{\"0\":100.0,\"res5\":0.0}}",
                     "after a reset only the new batch counts: %s", text);
    free(text);
    json_decref(v);
    eng_tensor_free(be, &a);
    eng_tensor_free(be, &b);
    eng_backend_close(be);
}

Test(meter, from_the_config)
{
    cfg_t cfg = {0};
    cfg_err err;
    cr_assert(test_compose(&cfg, &err,
                           "config:\n  METERS: {name: accuracy_list_meter, accuracy_list_meter: {topk_values: [1, 5]}}\n",
                           NULL),
              "%s", err.msg);
    acc_meter m;
    bool on;
    cr_assert(meter_from_config(cfg_map_get(cfg.root, "config"), &m, &on, &err), "%s", err.msg);
    cr_expect(on && m.ntopk == 2 && m.topk[1] == 5 && m.num_meters == 1);
    cfg_destroy(&cfg);
    cfg = (cfg_t){0};
    cr_assert(test_compose(&cfg, &err, "config:\n  METERS: {name: mean_ap_list_meter}\n", NULL), "%s", err.msg);
    cr_expect(!meter_from_config(cfg_map_get(cfg.root, "config"), &m, &on, &err));
    cr_expect(strstr(err.msg, "mean_ap_list_meter") && strstr(err.msg, "not run"), "%s", err.msg);
    cfg_destroy(&cfg);
}
