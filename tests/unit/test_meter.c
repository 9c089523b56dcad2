/*
 * test_meter.c — accuracy_list_meter, mean_ap_list_meter and mean_ap_meter (stages/train/meter.c) on
 * hand-computed batches: top-k counts per output, VISSL's value dict (percentages rounded to
 * 6 decimals of the fraction, keyed top_K then the meter's name or index), the reset between
 * phases, the config; VOC AP (lib/ap.c) on an example worked by hand, ignored rows and a
 * class without positives.
 */
#include "ap.h"
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
    acc_meter m = {.name = "accuracy_list_meter", .topk = {1, 2}, .ntopk = 2, .num_meters = 2, .names = {NULL, "res5"}};
    char *err = NULL;
    /* output 0: sample 0's target (1) is the best, sample 1's (2) second, sample 2's is -1
     * (counted wrong, as ClassyVision's meter counts it); output 1: sample 0's target is last
     * of 3, sample 1's first. */
    const float o0[] = {0.1f, 0.9f, 0.0f, 0.5f, 0.2f, 0.3f, 1.0f, 0.0f, 0.0f};
    const float o1[] = {0.9f, 0.1f, 0.5f, 0.0f, 0.0f, 1.0f, 2.0f, 0.0f, 0.0f};
    const int64_t label[] = {1, 2, -1};
    eng_tensor a = upload(be, 3, 3, o0), b = upload(be, 3, 3, o1);
    const eng_tensor *outs[] = {&a, &b};
    cr_assert_eq(meter_update(be, &m, outs, 2, label, 3, 1, &err), 0, "%s", err);
    json_t *v = meter_value(&m);
    char *text = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(15));
    cr_expect_str_eq(text, "{\"top_1\":{\"0\":33.3333,\"res5\":33.3333},\"top_2\":{\"0\":66.6667,\"res5\":33.3333}}");
    free(text);
    json_decref(v);
    meter_reset(&m);
    cr_assert_eq(meter_update(be, &m, outs, 2, (const int64_t[]){0, 0, 0}, 3, 1, &err), 0, "%s", err);
    v = meter_value(&m);
    text = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(15));
    cr_expect_str_eq(text, "{\"top_1\":{\"0\":66.6667,\"res5\":66.6667},\"top_2\":{\"0\":100.0,\"res5\":100.0}}",
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
    cr_assert(test_compose(&cfg, &err, "config:\n  METERS: {name: mean_ap_list_meter, mean_ap_list_meter: {num_classes: 20}}\n",
                           NULL),
              "%s", err.msg);
    cr_assert(meter_from_config(cfg_map_get(cfg.root, "config"), &m, &on, &err), "%s", err.msg);
    cr_expect(on && m.kind == METER_MEAN_AP && m.num_classes == 20 && m.num_meters == 1);
    cfg_destroy(&cfg);
    cfg = (cfg_t){0};
    cr_assert(test_compose(&cfg, &err, "config:\n  METERS: {name: precision_at_k_list_meter}\n", NULL), "%s", err.msg);
    cr_expect(!meter_from_config(cfg_map_get(cfg.root, "config"), &m, &on, &err));
    cr_expect(strstr(err.msg, "precision_at_k_list_meter") && strstr(err.msg, "not run"), "%s", err.msg);
    cfg_destroy(&cfg);
}

/* Spec part 2, derived value 1: targets [1,0,1,1,0], scores [.9,.8,.7,.3,.2] → 0.833333;
 * rows with target -1 do not count, whatever their score; no positive → -1. */
Test(meter, voc_ap_by_hand)
{
    const float s[] = {0.9f, 0.8f, 0.7f, 0.3f, 0.2f};
    const int8_t t[] = {1, 0, 1, 1, 0};
    cr_expect_float_eq(ap_voc(s, t, 5, 1), 5.0 / 6.0, 1e-12);
    const float s2[] = {0.99f, 0.9f, 0.8f, 0.7f, 0.3f, 0.95f, 0.2f};
    const int8_t t2[] = {-1, 1, 0, 1, 1, -1, 0};
    cr_expect_float_eq(ap_voc(s2, t2, 7, 1), 5.0 / 6.0, 1e-12);
    const int8_t none[] = {0, 0, -1, 0, 0};
    cr_expect_eq(ap_voc(s, none, 5, 1), -1.0);
    /* every positive first: 1 */
    const int8_t top[] = {1, 1, 0, 0, 0};
    cr_expect_float_eq(ap_voc(s, top, 5, 1), 1.0, 1e-12);
}

/* mean_ap_list_meter over two batches of 3 classes: class 0 is the worked example (AP 5/6),
 * class 1 has no positive (AP -1, left out of the mean), class 2 ranks a negative above its
 * two positives once its ignored rows are set aside (precisions 0, 1/2, 2/3 → AP 2/3).
 * mAP = (5/6 + 2/3) / 2 = 75%. Logits order as the sigmoids do. */
Test(meter, mean_ap_by_hand)
{
    eng_backend *be = nnt_open_cpu();
    acc_meter m = {.kind = METER_MEAN_AP, .name = "mean_ap_list_meter", .num_meters = 1, .num_classes = 3};
    const float o[5][3] = {{2.0f, 0.0f, 5.0f}, {1.0f, 0.0f, 0.2f}, {0.5f, 0.0f, 0.4f},
                           {-1.0f, 0.0f, -0.1f}, {-2.0f, 0.0f, 3.0f}};
    const int64_t t[5][3] = {{1, 0, -1}, {0, 0, 1}, {1, -1, 0}, {1, 0, 1}, {0, 0, -1}};
    eng_tensor a = upload(be, 3, 3, &o[0][0]), b = upload(be, 2, 3, &o[3][0]);
    char *err = NULL;
    cr_assert_eq(meter_update(be, &m, (const eng_tensor *[]){&a}, 1, &t[0][0], 3, 3, &err), 0, "%s", err);
    cr_assert_eq(meter_update(be, &m, (const eng_tensor *[]){&b}, 1, &t[3][0], 2, 3, &err), 0, "%s", err);
    json_t *v = meter_value(&m);
    cr_expect_float_eq(json_real_value(json_object_get(json_object_get(v, "mAP"), "0")), 75.0, 1e-9);
    json_t *ap = json_object_get(json_object_get(v, "AP"), "0");
    cr_assert_eq(json_array_size(ap), 3);
    cr_expect_float_eq(json_real_value(json_array_get(ap, 0)), 5.0 / 6.0, 1e-9);
    cr_expect_float_eq(json_real_value(json_array_get(ap, 1)), -1.0, 1e-12);
    cr_expect_float_eq(json_real_value(json_array_get(ap, 2)), 2.0 / 3.0, 1e-9);
    json_decref(v);
    /* a target that is not N × num_classes is refused, naming the meter */
    cr_expect_eq(meter_update(be, &m, (const eng_tensor *[]){&a}, 1, &t[0][0], 3, 1, &err), -1);
    cr_expect(err && strstr(err, "mean_ap_list_meter"), "%s", err);
    free(err);
    meter_free(&m);
    eng_tensor_free(be, &a);
    eng_tensor_free(be, &b);
    eng_backend_close(be);
}

/* mean_ap_meter, VISSL 0.1.5's MeanAPMeter: named "mean_ap_manual_meter", its num_classes has no
 * default (0 is refused, naming the key). */
Test(meter, mean_ap_meter_from_the_config)
{
    cfg_t cfg = {0};
    cfg_err err;
    cr_assert(test_compose(&cfg, &err, "config:\n  METERS: {name: mean_ap_meter, mean_ap_meter: {num_classes: 20}}\n",
                           NULL),
              "%s", err.msg);
    acc_meter m;
    bool on;
    cr_assert(meter_from_config(cfg_map_get(cfg.root, "config"), &m, &on, &err), "%s", err.msg);
    cr_expect(on && m.kind == METER_MEAN_AP_ONE && m.num_classes == 20 && m.num_meters == 1);
    cr_expect_str_eq(m.name, "mean_ap_manual_meter");
    cfg_destroy(&cfg);
    cfg = (cfg_t){0};
    cr_assert(test_compose(&cfg, &err, "config:\n  METERS: {name: mean_ap_meter}\n", NULL), "%s", err.msg);
    cr_expect(!meter_from_config(cfg_map_get(cfg.root, "config"), &m, &on, &err));
    cr_expect(strstr(err.msg, "METERS.mean_ap_meter.num_classes") && strstr(err.msg, "no default"), "%s", err.msg);
    cfg_destroy(&cfg);
}

/* MeanAPMeter scores the raw outputs, where the list meter's sigmoid rounds 30 and 40 both to
 * 1.0f: class 0's positive (30) ranks second, behind a negative (40): precision 1/2 at its
 * recall, AP 1/2. Class 1's ignored row (-1) is set aside and its positive leads: AP 1. Class 2
 * has no positive: -1, out of the mean. mAP = 3/4, a fraction (the list meter reports 100×). */
Test(meter, mean_ap_meter_by_hand)
{
    eng_backend *be = nnt_open_cpu();
    acc_meter m = {.kind = METER_MEAN_AP_ONE, .name = "mean_ap_manual_meter", .num_meters = 1, .num_classes = 3};
    const float o[3][3] = {{30.0f, 1.0f, 0.5f}, {40.0f, 2.0f, 0.7f}, {-5.0f, 3.0f, 0.1f}};
    const int64_t t[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, -1, -1}};
    eng_tensor a = upload(be, 3, 3, &o[0][0]);
    char *err = NULL;
    cr_assert_eq(meter_update(be, &m, (const eng_tensor *[]){&a}, 1, &t[0][0], 3, 3, &err), 0, "%s", err);
    json_t *v = meter_value(&m);
    cr_expect_float_eq(json_real_value(json_object_get(v, "mAP")), 0.75, 1e-12);
    json_t *ap = json_object_get(v, "AP");
    cr_assert_eq(json_array_size(ap), 3);
    cr_expect_float_eq(json_real_value(json_array_get(ap, 0)), 0.5, 1e-12);
    cr_expect_float_eq(json_real_value(json_array_get(ap, 1)), 1.0, 1e-12);
    cr_expect_float_eq(json_real_value(json_array_get(ap, 2)), -1.0, 1e-12);
    json_decref(v);
    meter_free(&m);
    eng_tensor_free(be, &a);
    eng_backend_close(be);
}

/* What MeanAPMeter asserts is refused, naming the meter: a target other than 1, 0 or -1, and a
 * model with several outputs (a list, which MeanAPMeter cannot read); with no positive at all
 * the mean is null (torch's mean of nothing is NaN). */
Test(meter, mean_ap_meter_refuses_what_vissl_asserts)
{
    eng_backend *be = nnt_open_cpu();
    acc_meter m = {.kind = METER_MEAN_AP_ONE, .name = "mean_ap_manual_meter", .num_meters = 1, .num_classes = 2};
    const float o[2][2] = {{1.0f, 2.0f}, {3.0f, 4.0f}};
    eng_tensor a = upload(be, 2, 2, &o[0][0]);
    char *err = NULL;
    const int64_t two[2][2] = {{1, 0}, {2, 0}};
    cr_expect_eq(meter_update(be, &m, (const eng_tensor *[]){&a}, 1, &two[0][0], 2, 2, &err), -1);
    cr_expect(err && strstr(err, "mean_ap_meter") && strstr(err, "target 2"), "%s", err);
    free(err), err = NULL;
    const int64_t none[2][2] = {{0, 0}, {0, -1}};
    cr_expect_eq(meter_update(be, &m, (const eng_tensor *[]){&a, &a}, 2, &none[0][0], 2, 2, &err), -1);
    cr_expect(err && strstr(err, "mean_ap_list_meter"), "%s", err);
    free(err), err = NULL;
    cr_assert_eq(meter_update(be, &m, (const eng_tensor *[]){&a}, 1, &none[0][0], 2, 2, &err), 0, "%s", err);
    json_t *v = meter_value(&m);
    cr_expect(json_is_null(json_object_get(v, "mAP")));
    json_decref(v);
    meter_free(&m);
    eng_tensor_free(be, &a);
    eng_backend_close(be);
}
