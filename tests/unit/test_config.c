/*
 * test_config.c — the config system against VISSL's behaviour.
 *
 * Expected values come from results derived by hand from VISSL 0.1.5's code (its
 * infer_and_assert_hydra_config and defaults.yaml: LR scaling, effective batch sizes, phases),
 * from PyYAML/OmegaConf's scalar rules, and from PyYAML itself reading what we print. The real
 * configs/defaults.yaml is the schema throughout.
 */
#include "config.h"
#include "sched.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static char *configs_dir(void)
{
    return test_path("configs");
}

/* Compose `yaml` (a user config) with `n` overrides; returns true on success. */
static bool compose_text(cfg_t *cfg, cfg_err *err, const char *yaml, int n, char *const *overrides)
{
    char *file = NULL;
    if (yaml)
        file = test_write_temp("user.yaml", yaml);
    char *dir = configs_dir();
    cfg_options opt = {.configs_dir = dir, .check_paths = false};
    bool ok = cfg_compose(cfg, &opt, file, n, overrides, err);
    free(dir);
    if (file)
        test_remove_temp(file);
    return ok;
}

static cfg_node *C(const cfg_t *cfg, const char *path)
{
    return cfg_path(cfg_map_get(cfg->root, "config"), path);
}

static double Cnum(const cfg_t *cfg, const char *path)
{
    cfg_node *n = C(cfg, path);
    cr_assert(n && cfg_is_number(n), "%s is not a number", path);
    return cfg_number(n);
}

static const char *Cstr(const cfg_t *cfg, const char *path)
{
    cfg_node *n = C(cfg, path);
    cr_assert(n && n->kind == CFG_STR, "%s is not a string", path);
    return n->s;
}

/* `yaml` (or BASE) with one override must be refused with `expect` in the message. */
static void expect_refused(const char *yaml, const char *override, const char *expect)
{
    cfg_t cfg;
    cfg_err err = {{0}};
    char *ov[] = {(char *)override};
    cr_assert(!compose_text(&cfg, &err, yaml, override ? 1 : 0, ov), "accepted %s", override ? override : yaml);
    cr_assert(strstr(err.msg, expect), "'%s' gave '%s'", override ? override : yaml, err.msg);
    cfg_destroy(&cfg);
}

#define assert_near(a, b, tol) cr_assert(fabs((double)(a) - (double)(b)) <= (tol), "%.12g != %.12g", (double)(a), (double)(b))

/* A minimal runnable pretraining config: the inference tests start from it. */
static const char BASE[] =
    "# @package _global_\n"
    "config:\n"
    "  DATA:\n"
    "    TRAIN:\n"
    "      DATA_SOURCES: [synthetic]\n"
    "      DATASET_NAMES: [synthetic]\n"
    "      BATCHSIZE_PER_REPLICA: 64\n"
    "  TEST_MODEL: False\n";

/* ---- YAML scalars, positions, errors ----------------------------------------------------- */

Test(config, yaml_scalars_resolve_like_pyyaml_and_omegaconf)
{
    static const struct { const char *text; cfg_kind kind; double num; const char *str; } cases[] = {
        {"True", CFG_BOOL, 1, NULL},     {"false", CFG_BOOL, 0, NULL},   {"yes", CFG_BOOL, 1, NULL},
        {"~", CFG_NULL, 0, NULL},        {"null", CFG_NULL, 0, NULL},    {"", CFG_NULL, 0, NULL},
        {"42", CFG_INT, 42, NULL},       {"-7", CFG_INT, -7, NULL},      {"0x1F", CFG_INT, 31, NULL},
        {"1_000", CFG_INT, 1000, NULL},  {"1e-5", CFG_FLOAT, 1e-5, NULL}, {"1.0e-06", CFG_FLOAT, 1e-6, NULL},
        {"0.1", CFG_FLOAT, 0.1, NULL},   {".5", CFG_FLOAT, 0.5, NULL},   {"3.", CFG_FLOAT, 3, NULL},
        {"-.inf", CFG_FLOAT, -INFINITY, NULL}, {"'1'", CFG_STR, 0, "1"}, {"\"True\"", CFG_STR, 0, "True"},
        {"resnet", CFG_STR, 0, "resnet"}, {"1e", CFG_STR, 0, "1e"},      {"localhost:40", CFG_STR, 0, "localhost:40"},
        {"0.1.2", CFG_STR, 0, "0.1.2"},  {"-x", CFG_STR, 0, "-x"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char doc[128];
        snprintf(doc, sizeof doc, "v: %s\n", cases[k].text);
        cfg_err err;
        cfg_node *root = cfg_parse_yaml(doc, strlen(doc), "t", &err);
        cr_assert(root, "parse of %s failed: %s", cases[k].text, err.msg);
        cfg_node *v = cfg_map_get(root, "v");
        cr_assert_eq(v->kind, cases[k].kind, "'%s' resolved to %s", cases[k].text, cfg_kind_name(v->kind));
        if (v->kind == CFG_BOOL)
            cr_assert_eq(v->b, cases[k].num != 0);
        if (v->kind == CFG_INT || v->kind == CFG_FLOAT)
            cr_assert(cfg_number(v) == cases[k].num, "'%s' -> %g", cases[k].text, cfg_number(v));
        if (v->kind == CFG_STR)
            cr_assert_str_eq(v->s, cases[k].str);
        cfg_free(root);
    }
}

Test(config, yaml_nodes_keep_file_and_line)
{
    const char *doc = "a:\n  b: 1\n  c:\n    - x\n    - y\n";
    cfg_err err;
    cfg_node *root = cfg_parse_yaml(doc, strlen(doc), "pos.yaml", &err);
    cr_assert(root);
    cr_assert_str_eq(cfg_path(root, "a.b")->file, "pos.yaml");
    cr_assert_eq(cfg_path(root, "a.b")->line, 2);
    cr_assert_eq(cfg_path(root, "a.c.1")->line, 5);
    cr_assert_str_eq(cfg_path(root, "a.c[0]")->s, "x");
    cfg_free(root);
}

Test(config, yaml_anchors_and_merge_keys)
{
    const char *doc = "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\nl: &l [1, 2]\nm: *l\n";
    cfg_err err;
    cfg_node *root = cfg_parse_yaml(doc, strlen(doc), "t", &err);
    cr_assert(root, "%s", err.msg);
    cr_assert_eq(cfg_path(root, "d.x")->i, 1);
    cr_assert_eq(cfg_path(root, "d.y")->i, 3, "an explicit key wins over a merged one");
    cr_assert_eq(cfg_path(root, "m")->len, 2);
    cfg_free(root);
}

Test(config, yaml_bad_input_is_an_error_not_a_crash)
{
    static const struct { const char *doc; const char *expect; } cases[] = {
        {"a: [1, 2\n", "invalid YAML"},
        {"a: 1\na: 2\n", "appears twice"},
        {"a: 1\n---\nb: 2\n", "more than one YAML document"},
        {"a: !!python/tuple [1, 2]\n", "unsupported YAML tag"},
        {"a: !!int abc\n", "not a valid !!int"},
        {"a: &a [*a]\n", "recursive alias"},
        {"{[1]: 2}\n", "map keys must be plain names"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cfg_err err = {{0}};
        cfg_node *root = cfg_parse_yaml(cases[k].doc, strlen(cases[k].doc), "bad.yaml", &err);
        cr_assert_null(root, "accepted: %s", cases[k].doc);
        cr_assert(strstr(err.msg, cases[k].expect), "'%s' gave '%s'", cases[k].doc, err.msg);
        cr_assert(strstr(err.msg, "bad.yaml"), "no file name in '%s'", err.msg);
    }
}

Test(config, yaml_alias_bomb_is_bounded)
{
    /* Ten levels of ten-fold aliases expand to 10^10 nodes. */
    strbuf doc = {0};
    sb_puts(&doc, "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for (int k = 1; k < 10; k++) {
        char line[256];
        snprintf(line, sizeof line, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", k, k,
                 k - 1, k - 1, k - 1, k - 1, k - 1, k - 1, k - 1, k - 1, k - 1, k - 1);
        sb_puts(&doc, line);
    }
    cfg_err err;
    cfg_node *root = cfg_parse_yaml(doc.s, doc.len, "bomb.yaml", &err);
    cr_assert_null(root);
    cr_assert(strstr(err.msg, "alias bomb"), "%s", err.msg);
    free(doc.s);
}

Test(config, printed_yaml_reads_back_identically)
{
    char *dir = configs_dir();
    char *path = path_join(dir, "defaults.yaml");
    cfg_err err;
    cfg_node *defaults = cfg_load_yaml_file(path, &err);
    cr_assert(defaults, "%s", err.msg);
    char *printed = cfg_to_yaml(defaults);
    cfg_node *again = cfg_parse_yaml(printed, strlen(printed), "printed", &err);
    cr_assert(again, "%s", err.msg);
    cr_assert(cfg_equal(defaults, again));
    cfg_free(defaults);
    cfg_free(again);
    free(printed);
    free(path);
    free(dir);
}

/* PyYAML, an independent reader, must read `config show` output as the values we hold. */
Test(config, pyyaml_reads_our_output)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.OPTIMIZER.weight_decay=1e-6", "+config.SELFSUP.note='True'", "+config.SELFSUP.odd=':x'"};
    cr_assert(compose_text(&cfg, &err, BASE, 3, ov), "%s", err.msg);
    char *printed = cfg_to_yaml(cfg.root);
    char *file = test_write_temp("printed.yaml", printed);
    char *cmd = xasprintf(
        "/usr/bin/python3 -c \"import yaml,sys; c=yaml.safe_load(open(sys.argv[1]))['config'];"
        "assert c['OPTIMIZER']['weight_decay']==1e-6, c['OPTIMIZER']['weight_decay'];"
        "assert c['SELFSUP']['note']=='True'; assert c['SELFSUP']['odd']==':x';"
        "assert c['DATA']['TRAIN']['BATCHSIZE_PER_REPLICA']==64;"
        "assert c['OPTIMIZER']['param_schedulers']['lr']['values']==[0.1,0.01,0.001]\" %s",
        file);
    cr_assert_eq(system(cmd), 0, "PyYAML disagrees with our printout");
    test_remove_temp(file);
    free(cmd);
    free(printed);
    cfg_destroy(&cfg);
}

/* ---- Hydra override values ---------------------------------------------------------------- */

Test(config, override_values_follow_hydra_grammar)
{
    cfg_err err;
    cfg_node *v = cfg_parse_override_value("[1, 2.5, abc, 'q,d', null, TRUE]", &err);
    cr_assert(v, "%s", err.msg);
    cr_assert_eq(v->len, 6);
    cr_assert_eq(v->items[0]->kind, CFG_INT);
    cr_assert_eq(v->items[1]->kind, CFG_FLOAT);
    cr_assert_str_eq(v->items[2]->s, "abc");
    cr_assert_str_eq(v->items[3]->s, "q,d");
    cr_assert_eq(v->items[4]->kind, CFG_NULL);
    cr_assert(v->items[5]->kind == CFG_BOOL && v->items[5]->b);
    cfg_free(v);

    v = cfg_parse_override_value("{a:1, b: [x, {c: 'it\\'s'}]}", &err);
    cr_assert(v, "%s", err.msg);
    cr_assert_eq(cfg_path(v, "a")->i, 1);
    cr_assert_str_eq(cfg_path(v, "b.1.c")->s, "it's");
    cfg_free(v);

    static const struct { const char *text; cfg_kind kind; } scalars[] = {
        {"1e-5", CFG_FLOAT}, {"inf", CFG_FLOAT}, {"-3", CFG_INT}, {"007", CFG_STR}, {"0x10", CFG_STR},
        {"a b", CFG_STR}, {"", CFG_STR}, {"Null", CFG_NULL}, {"localhost:4000", CFG_STR}, {"\"1\"", CFG_STR},
    };
    for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
        v = cfg_parse_override_value(scalars[k].text, &err);
        cr_assert(v && v->kind == scalars[k].kind, "'%s'", scalars[k].text);
        cfg_free(v);
    }
}

Test(config, override_value_errors)
{
    static const struct { const char *text; const char *expect; } cases[] = {
        {"1,2", "sweep"},         {"choice(1,2)", "sweep functions"}, {"[1, 2", "expected ',' or ']'"},
        {"{a 1}", "expected ':'"}, {"'abc", "unterminated"},          {"[1] x", "unexpected text"},
        {"a=b", "quote the value"}, {"{a: 1, a: 2}", "duplicate dict key"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cfg_err err = {{0}};
        cfg_node *v = cfg_parse_override_value(cases[k].text, &err);
        cr_assert_null(v, "accepted '%s'", cases[k].text);
        cr_assert(strstr(err.msg, cases[k].expect), "'%s' gave '%s'", cases[k].text, err.msg);
    }
}

/* ---- composition -------------------------------------------------------------------------- */

Test(config, defaults_alone_compose)
{
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, NULL, 0, NULL), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "OPTIMIZER.num_epochs"), 90);
    cr_assert_str_eq(cfg_str(cfg.root, "engine_name"), "train");
    cfg_destroy(&cfg);
}

Test(config, file_then_overrides_in_order_and_types_coerced)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.OPTIMIZER.num_epochs=100", "config.OPTIMIZER.weight_decay=0", "config.OPTIMIZER.num_epochs=70",
                  "config.DISTRIBUTED.RUN_ID=4000", "+config.SELFSUP.flag=true", "++config.SELFSUP.flag=false"};
    cr_assert(compose_text(&cfg, &err, BASE, 6, ov), "%s", err.msg);
    cr_assert_eq(C(&cfg, "OPTIMIZER.num_epochs")->i, 70, "later overrides win");
    cr_assert_eq(C(&cfg, "OPTIMIZER.weight_decay")->kind, CFG_FLOAT, "an int given to a float key becomes a float");
    cr_assert_str_eq(Cstr(&cfg, "DISTRIBUTED.RUN_ID"), "4000", "a number given to a string key becomes a string");
    cr_assert(!C(&cfg, "SELFSUP.flag")->b);
    cr_assert_eq(Cnum(&cfg, "DATA.TRAIN.BATCHSIZE_PER_REPLICA"), 64, "the file's value survives");
    cr_assert_eq(Cnum(&cfg, "DATA.TEST.BATCHSIZE_PER_REPLICA"), 256, "the default is kept where nothing overrides");
    cfg_destroy(&cfg);
}

Test(config, group_file_merges_like_hydra)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=32", "+config/pretrain/swav/transforms=multicrop_2x224_6x96"};
    cr_assert(compose_text(&cfg, &err, BASE, 2, ov), "%s", err.msg);
    cfg_node *t = C(&cfg, "DATA.TRAIN.TRANSFORMS.0");
    cr_assert(t, "the group file set the transforms");
    cr_assert_str_eq(cfg_map_get(t, "name")->s, "ImgPilToMultiCrop");
    cr_assert_eq(cfg_map_get(t, "total_num_crops")->i, 8);
    cr_assert_eq(Cnum(&cfg, "DATA.TRAIN.BATCHSIZE_PER_REPLICA"), 32, "value overrides apply after group files");
    cfg_destroy(&cfg);
}

Test(config, unknown_keys_suggest_the_nearest)
{
    static const struct { const char *yaml; const char *override; const char *expect; } cases[] = {
        {"config:\n  OPTIMIZER:\n    num_epoch: 3\n", NULL, "user.yaml:3: config.OPTIMIZER.num_epoch: unknown key 'num_epoch'; did you mean 'config.OPTIMIZER.num_epochs'?"},
        {"config:\n  OPTIMZER: {num_epochs: 3}\n", NULL, "did you mean 'config.OPTIMIZER'?"},
        {"config:\n  num_epochs: 3\n", NULL, "did you mean 'config.OPTIMIZER.num_epochs'?"},
        {NULL, "config.OPTIMZER.num_epochs=3", "unknown key 'config.OPTIMZER'; did you mean 'config.OPTIMIZER'?"},
        {NULL, "OPTIMIZER.num_epochs=3", "did you mean 'config.OPTIMIZER.num_epochs'?"},
        {NULL, "config.OPTIMIZER.num_epoch=3", "to add a new key, write +config.OPTIMIZER.num_epoch=3"},
        {NULL, "+config.OPTIMIZER.num_epochs=3", "already exists"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        expect_refused(cases[k].yaml, cases[k].override, cases[k].expect);
}

Test(config, wrong_types_are_refused)
{
    static const struct { const char *override; const char *expect; } cases[] = {
        {"config.OPTIMIZER.num_epochs=1.5", "expected an integer, got a number"},
        {"config.OPTIMIZER.nesterov=1", "expected a bool"},
        {"config.OPTIMIZER.param_schedulers.lr.values=[0.1,a]", "values.1: expected a number"},
        {"config.OPTIMIZER.name=[sgd]", "expected a string, got a list"},
        {"config.OPTIMIZER={name: sgd, bogus: 1}", "unknown key 'bogus'"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        expect_refused(BASE, cases[k].override, cases[k].expect);
}

Test(config, null_over_a_map_keeps_the_defaults)
{
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, "config:\n  METERS: null\n  TEST_MODEL: False\n", 0, NULL), "%s", err.msg);
    cr_assert_str_eq(Cstr(&cfg, "METERS.name"), "");
    cfg_destroy(&cfg);
}

/* ---- inference (VISSL's assert_hydra_conf) ------------------------------------------------ */

static const char COSINE[] =
    "# @package _global_\n"
    "config:\n"
    "  TEST_MODEL: False\n"
    "  DATA: {TRAIN: {DATA_SOURCES: [synthetic], DATASET_NAMES: [synthetic], BATCHSIZE_PER_REPLICA: 64}}\n"
    "  OPTIMIZER:\n"
    "    param_schedulers:\n"
    "      lr:\n"
    "        auto_lr_scaling: {auto_scale: true, base_value: 0.3, base_lr_batch_size: 256}\n"
    "        name: cosine\n"
    "        start_value: 0.15\n"
    "        end_value: 0.00015\n";

Test(config, T9_auto_scaling_cosine)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.DISTRIBUTED.NUM_NODES=4", "config.DISTRIBUTED.NUM_PROC_PER_NODE=8"};
    cr_assert(compose_text(&cfg, &err, COSINE, 2, ov), "%s", err.msg);
    assert_near(Cnum(&cfg, "OPTIMIZER.param_schedulers.lr.start_value"), 2.4, 1e-12);
    assert_near(Cnum(&cfg, "OPTIMIZER.param_schedulers.lr.end_value"), 0.0024, 1e-12);
    /* T12: use_different_lr False -> lr_head is lr; use_different_wd False -> head wd = wd */
    cr_assert(cfg_equal(C(&cfg, "OPTIMIZER.param_schedulers.lr"), C(&cfg, "OPTIMIZER.param_schedulers.lr_head")));
    cr_assert_eq(Cnum(&cfg, "OPTIMIZER.head_optimizer_params.weight_decay"), Cnum(&cfg, "OPTIMIZER.weight_decay"));
    cfg_destroy(&cfg);
}

Test(config, T10_auto_scaling_multistep_rounds_like_python)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.DISTRIBUTED.NUM_NODES=1", "config.DISTRIBUTED.NUM_PROC_PER_NODE=8",
                  "config.OPTIMIZER.param_schedulers.lr.auto_lr_scaling.auto_scale=true"};
    cr_assert(compose_text(&cfg, &err, BASE, 3, ov), "%s", err.msg); /* 64 x 8 = 512, base 0.1 / 256 */
    cfg_node *values = C(&cfg, "OPTIMIZER.param_schedulers.lr.values");
    cr_assert_eq(values->len, 3);
    cr_assert_eq(cfg_number(values->items[0]), 0.2);
    cr_assert_eq(cfg_number(values->items[1]), 0.02);
    cr_assert_eq(cfg_number(values->items[2]), 0.002);
    cfg_destroy(&cfg);
}

static const char WARMUP[] =
    "# @package _global_\n"
    "config:\n"
    "  TEST_MODEL: False\n"
    "  DATA: {TRAIN: {DATA_SOURCES: [synthetic], DATASET_NAMES: [synthetic], BATCHSIZE_PER_REPLICA: 64}}\n"
    "  OPTIMIZER:\n"
    "    num_epochs: 100\n"
    "    param_schedulers:\n"
    "      lr:\n"
    "        auto_lr_scaling: {auto_scale: true, base_value: 0.3, base_lr_batch_size: 256}\n"
    "        name: composite\n"
    "        schedulers:\n"
    "          - {name: linear, start_value: 0.6, end_value: 4.8}\n"
    "          - {name: cosine, start_value: 4.8, end_value: 0.0048}\n"
    "        update_interval: step\n"
    "        interval_scaling: [rescaled, fixed]\n"
    "        lengths: [0.1, 0.9]\n";

Test(config, T11_single_node_drops_the_linear_warmup)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.DISTRIBUTED.NUM_NODES=1", "config.DISTRIBUTED.NUM_PROC_PER_NODE=8"};
    cr_assert(compose_text(&cfg, &err, WARMUP, 2, ov), "%s", err.msg);
    cr_assert_str_eq(Cstr(&cfg, "OPTIMIZER.param_schedulers.lr.name"), "cosine", "the cosine is promoted");
    assert_near(Cnum(&cfg, "OPTIMIZER.param_schedulers.lr.start_value"), 0.6, 1e-12);
    assert_near(Cnum(&cfg, "OPTIMIZER.param_schedulers.lr.end_value"), 0.0006, 1e-12);
    cr_assert_eq(C(&cfg, "OPTIMIZER.param_schedulers.lr.schedulers")->len, 1);
    cfg_destroy(&cfg);
}

Test(config, T11_four_nodes_keep_the_warmup_from_the_per_node_batch)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.DISTRIBUTED.NUM_NODES=4", "config.DISTRIBUTED.NUM_PROC_PER_NODE=8"};
    cr_assert(compose_text(&cfg, &err, WARMUP, 2, ov), "%s", err.msg);
    cr_assert_str_eq(Cstr(&cfg, "OPTIMIZER.param_schedulers.lr.name"), "composite");
    assert_near(Cnum(&cfg, "OPTIMIZER.param_schedulers.lr.schedulers.0.start_value"), 0.6, 1e-12);
    assert_near(Cnum(&cfg, "OPTIMIZER.param_schedulers.lr.schedulers.0.end_value"), 2.4, 1e-12);
    assert_near(Cnum(&cfg, "OPTIMIZER.param_schedulers.lr.schedulers.1.start_value"), 2.4, 1e-12);
    cfg_destroy(&cfg);
}

/* T3 through the config path: the composite of Example 3, evaluated by lib/sched. */
Test(config, T3_composite_schedule_from_yaml)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.OPTIMIZER.param_schedulers.lr.auto_lr_scaling.auto_scale=false"};
    cr_assert(compose_text(&cfg, &err, WARMUP, 1, ov), "%s", err.msg);
    sched s;
    cr_assert(cfg_build_scheduler(C(&cfg, "OPTIMIZER.param_schedulers.lr"), "lr", 100, &s, &err), "%s", err.msg);
    assert_near(sched_value(&s, 0.0), 0.6, 1e-9);
    assert_near(sched_value(&s, 0.05), 2.7, 1e-9);
    assert_near(sched_value(&s, 0.1), 4.682653103, 1e-9);
    assert_near(sched_value(&s, 0.55), 2.027332727, 1e-9);
    sched_free(&s);
    cfg_destroy(&cfg);
}

static const char SWAV[] =
    "# @package _global_\n"
    "config:\n"
    "  TEST_MODEL: False\n"
    "  DATA:\n"
    "    TRAIN:\n"
    "      DATA_SOURCES: [synthetic]\n"
    "      DATASET_NAMES: [synthetic]\n"
    "      BATCHSIZE_PER_REPLICA: 64\n"
    "      COLLATE_FUNCTION: multicrop_collator\n"
    "      TRANSFORMS:\n"
    "        - {name: ImgPilToMultiCrop, total_num_crops: 8, size_crops: [224, 96], num_crops: [2, 6],\n"
    "           crop_scales: [[0.14, 1], [0.05, 0.14]]}\n"
    "  MODEL:\n"
    "    HEAD:\n"
    "      PARAMS: [[swav_head, {dims: [2048, 2048, 128], use_bn: True, num_clusters: [3000]}]]\n"
    "  LOSS:\n"
    "    name: swav_loss\n"
    "    swav_loss: {queue: {queue_length: 3840}}\n"
    "  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 8}\n"
    "  CHECKPOINT: {DIR: /ckpt}\n";

Test(config, T34_swav_queue_crops_prototypes_output_dir)
{
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, SWAV, 0, NULL), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "LOSS.swav_loss.queue.queue_length"), 3584);
    cr_assert_eq(Cnum(&cfg, "LOSS.swav_loss.queue.local_queue_length"), 448);
    cr_assert_eq(Cnum(&cfg, "LOSS.swav_loss.num_crops"), 8);
    cr_assert_eq(Cnum(&cfg, "LOSS.swav_loss.embedding_dim"), 128);
    cr_assert_eq(Cnum(&cfg, "LOSS.swav_loss.num_prototypes.0"), 3000);
    cr_assert_str_eq(Cstr(&cfg, "LOSS.swav_loss.output_dir"), "/ckpt");
    cfg_destroy(&cfg);
}

Test(config, T36_swav_needs_one_swav_head_and_a_multicrop_collator)
{
    cfg_t cfg;
    cfg_err err = {{0}};
    char *two_heads[] = {"config.MODEL.HEAD.PARAMS=[[swav_head, {dims: [8, 4], num_clusters: [3]}], [mlp, {dims: [8, 4]}]]"};
    cr_assert(!compose_text(&cfg, &err, SWAV, 1, two_heads));
    cr_assert(strstr(err.msg, "needs exactly one head"), "%s", err.msg);
    cfg_destroy(&cfg);
    char *collator[] = {"config.DATA.TRAIN.COLLATE_FUNCTION=simclr_collator"};
    cr_assert(!compose_text(&cfg, &err, SWAV, 1, collator));
    cr_assert(strstr(err.msg, "swav_loss needs multicrop_collator"), "%s", err.msg);
    cfg_destroy(&cfg);
}

Test(config, T35_simclr_effective_batch_and_multicrop_variant)
{
    cfg_t cfg;
    cfg_err err;
    char *simclr[] = {"config.LOSS.name=simclr_info_nce_loss", "config.DISTRIBUTED.NUM_PROC_PER_NODE=8"};
    cr_assert(compose_text(&cfg, &err, BASE, 2, simclr), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "LOSS.simclr_info_nce_loss.buffer_params.effective_batch_size"), 1024);
    cr_assert_eq(Cnum(&cfg, "LOSS.simclr_info_nce_loss.buffer_params.world_size"), 8);
    cfg_destroy(&cfg);
    char *multicrop[] = {"config.LOSS.name=multicrop_simclr_info_nce_loss", "config.DISTRIBUTED.NUM_PROC_PER_NODE=8"};
    cr_assert(compose_text(&cfg, &err, BASE, 2, multicrop), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "LOSS.multicrop_simclr_info_nce_loss.buffer_params.effective_batch_size"), 512);
    cr_assert_eq(Cnum(&cfg, "LOSS.multicrop_simclr_info_nce_loss.buffer_params.world_size"), 8,
                 "the substring match of VISSL also sets the world size here");
    cr_assert_str_eq(Cstr(&cfg, "DATA.TRAIN.COLLATE_FUNCTION"), "multicrop_collator");
    cfg_destroy(&cfg);
}

Test(config, T32_no_label_source_means_sample_index)
{
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, BASE, 0, NULL), "%s", err.msg);
    cr_assert_str_eq(Cstr(&cfg, "DATA.TRAIN.LABEL_TYPE"), "sample_index");
    cfg_destroy(&cfg);
    char *labels[] = {"config.DATA.TRAIN.LABEL_SOURCES=[synthetic]"};
    cr_assert(compose_text(&cfg, &err, BASE, 1, labels), "%s", err.msg);
    cr_assert_str_eq(Cstr(&cfg, "DATA.TRAIN.LABEL_TYPE"), "standard");
    cfg_destroy(&cfg);
}

Test(config, deepclusterv2_memory_size_per_process)
{
    cfg_t cfg;
    cfg_err err;
    char *ov[] = {"config.LOSS.name=deepclusterv2_loss", "config.DISTRIBUTED.NUM_NODES=8",
                  "config.DISTRIBUTED.NUM_PROC_PER_NODE=8", "config.DATA.TRAIN.DROP_LAST=true"};
    cr_assert(compose_text(&cfg, &err, BASE, 4, ov), "%s", err.msg);
    /* ImageNet by hand: N = 1,281,167, W = 64, B = 64, DROP_LAST -> ceil = 20019 -> 19968 */
    cr_assert_eq(cfg_infer_dataset_size(&cfg, 1281167), 19968);
    cr_assert_eq(Cnum(&cfg, "LOSS.deepclusterv2_loss.num_train_samples"), 1281167);
    cr_assert_str_eq(Cstr(&cfg, "DATA.TRAIN.COLLATE_FUNCTION"), "multicrop_collator");
    cfg_destroy(&cfg);
}

static const char EXTRACT[] =
    "# @package _global_\n"
    "engine_name: extract_features\n"
    "config:\n"
    "  TEST_MODEL: False\n"
    "  DATA: {TRAIN: {DATA_SOURCES: [synthetic], DATASET_NAMES: [synthetic]}}\n"
    "  METERS: {name: accuracy_list_meter}\n"
    "  MODEL:\n"
    "    FEATURE_EVAL_SETTINGS:\n"
    "      EVAL_MODE_ON: True\n"
    "      FREEZE_TRUNK_ONLY: True\n"
    "      EXTRACT_TRUNK_FEATURES_ONLY: True\n"
    "      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res4, [AvgPool2d, [[8, 8], 3, 0]]], [res5, [AvgPool2d, [[6, 6], 1, 0]]]]\n"
    "  DISTRIBUTED: {NUM_PROC_PER_NODE: 2}\n";

Test(config, feature_extractor_meters_and_dummy_head)
{
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, EXTRACT, 0, NULL), "%s", err.msg);
    cr_assert(cfg_is_feature_extractor_model(&cfg));
    cr_assert_eq(Cnum(&cfg, "METERS.accuracy_list_meter.num_meters"), 2);
    cr_assert_str_eq(Cstr(&cfg, "METERS.accuracy_list_meter.meter_names.1"), "res5");
    cr_assert_str_eq(Cstr(&cfg, "MODEL.HEAD.PARAMS.0.0"), "mlp", "two processes need DDP's dummy head");
    cr_assert_eq(Cnum(&cfg, "MODEL.HEAD.PARAMS.0.1.dims.1"), 1000);
    cfg_destroy(&cfg);
}

/* ---- checks ------------------------------------------------------------------------------- */

Test(config, names_are_checked_with_suggestions)
{
    static const struct { const char *override; const char *expect; } cases[] = {
        {"config.LOSS.name=simclr_info_nce", "did you mean 'simclr_info_nce_loss'?"},
        {"config.MODEL.TRUNK.NAME=resnt", "unknown trunk 'resnt'; did you mean 'resnet'?"},
        {"config.DATA.TRAIN.COLLATE_FUNCTION=simclr_colator", "did you mean 'simclr_collator'?"},
        {"config.DATA.TRAIN.TRANSFORMS=[{name: RandomResizedCorp, size: 224}]", "did you mean 'RandomResizedCrop'?"},
        {"config.DATA.TRAIN.TRANSFORMS=[{name: RandomResizedCrop, szie: 224}]", "no parameter 'szie'; did you mean 'size'?"},
        {"config.OPTIMIZER.param_schedulers.lr.name=cosin", "unknown scheduler 'cosin'; did you mean 'cosine'?"},
        {"config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH=51", "must be one of 18, 34, 50, 101, 152, 200"},
        {"config.MACHINE.DEVICE=tpu", "unknown DEVICE 'tpu'"},
        {"config.MODEL.HEAD.PARAMS=[[mpl, {dims: [2048, 128]}]]", "unknown head 'mpl'; did you mean 'mlp'?"},
        {"config.OPTIMIZER.param_schedulers.lr.milestones=[30]", "milestones"},
        {"config.DATA.TRAIN.DATASET_NAMES=[a, b]", "DATASET_NAMES: has 2 entries but DATA_SOURCES has 1"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        expect_refused(BASE, cases[k].override, cases[k].expect);
        expect_refused(BASE, cases[k].override, "override #1"); /* the error points at the override */
    }
}

Test(config, missing_paths_warn_in_show_and_fail_in_validate)
{
    const char *yaml = "config:\n  TEST_MODEL: False\n  DATA: {TRAIN: {DATA_SOURCES: [disk_folder],"
                       " DATASET_NAMES: [x], DATA_PATHS: [/nonexistent/imgs]}}\n";
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, yaml, 0, NULL), "%s", err.msg);
    cr_assert_eq(cfg.n_warnings, 1);
    cr_assert(strstr(cfg.warnings[0], "/nonexistent/imgs"));
    cfg_destroy(&cfg);

    char *file = test_write_temp("paths.yaml", yaml);
    char *dir = configs_dir();
    cfg_options opt = {.configs_dir = dir, .check_paths = true};
    cr_assert(!cfg_compose(&cfg, &opt, file, 0, NULL, &err));
    cr_assert(strstr(err.msg, "data folder '/nonexistent/imgs' does not exist"), "%s", err.msg);
    cr_assert(strstr(err.msg, "paths.yaml:3"), "%s", err.msg);
    cfg_destroy(&cfg);
    test_remove_temp(file);
    free(dir);
}

/* VISSL moved some keys after 0.1.5; either place works and the stages see one value. */
Test(config, moved_keys_are_reconciled)
{
    cfg_t cfg;
    cfg_err err;
    char *newer[] = {"config.MODEL.TRUNK.RESNETS.DEPTH=101", "config.HOOKS.TENSORBOARD_SETUP.USE_TENSORBOARD=true",
                     "config.HOOKS.PERF_STATS.MONITOR_PERF_STATS=true"};
    cr_assert(compose_text(&cfg, &err, BASE, 3, newer), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH"), 101);
    cr_assert(C(&cfg, "TENSORBOARD_SETUP.USE_TENSORBOARD")->b);
    cr_assert(C(&cfg, "MONITOR_PERF_STATS")->b);
    cfg_destroy(&cfg);

    char *older[] = {"config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH=152"};
    cr_assert(compose_text(&cfg, &err, BASE, 1, older), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "MODEL.TRUNK.RESNETS.DEPTH"), 152);
    cfg_destroy(&cfg);

    /* Set in both places: the later one wins, in either order. */
    char *both[] = {"config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH=152", "config.MODEL.TRUNK.RESNETS.DEPTH=101"};
    cr_assert(compose_text(&cfg, &err, BASE, 2, both), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH"), 101);
    cfg_destroy(&cfg);
    char *file_then_override[] = {"config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH=34"};
    cr_assert(compose_text(&cfg, &err, "config:\n  TEST_MODEL: False\n  MODEL: {TRUNK: {RESNETS: {DEPTH: 101}}}\n",
                           1, file_then_override), "%s", err.msg);
    cr_assert_eq(Cnum(&cfg, "MODEL.TRUNK.RESNETS.DEPTH"), 34);
    cr_assert_eq(Cnum(&cfg, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH"), 34);
    cfg_destroy(&cfg);
}

/* Auto-scaling rewrites every scheduler kind as VISSL's get_scaled_lr_scheduler does
 * (VISSL's auto_lr_scaling): 64 x 8 = 512 with base 0.1 per 256 gives scaled LR 0.2. */
Test(config, auto_scaling_rewrites_every_scheduler_kind)
{
    static const struct { const char *sched; const char *key; double want; } cases[] = {
        {"{name: constant, value: 0.5}", "value", 0.2},
        {"{name: linear, start_value: 0.0, end_value: 1.0}", "end_value", 0.2},
        {"{name: linear, start_value: 0.0, end_value: 1.0}", "start_value", 0.0},
        {"{name: cosine, start_value: 0.5, end_value: 0.05}", "end_value", 0.02},
        {"{name: cosine_warm_restart, start_value: 0.5, end_value: 0.005, restart_interval_length: 0.5, wave_type: half}",
         "end_value", 0.002},
        {"{name: step, values: [0.1, 0.05]}", "values.1", 0.1},
        {"{name: step_with_fixed_gamma, base_value: 0.3, gamma: 0.1, num_decays: 2}", "base_value", 0.2},
        {"{name: inverse_sqrt, start_value: 4.8, warmup_interval_length: 0.1}", "start_value", 0.2},
        /* gamma = round(0.1 / 0.3, 6) = 0.333333, then round(0.2 * 0.333333^2, 8) = 0.02222218 */
        {"{name: multistep, values: [0.3, 0.1, 0.0333333], milestones: [30, 60]}", "values.2", 0.02222218},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *ov[] = {"config.DISTRIBUTED.NUM_PROC_PER_NODE=8", xasprintf("++config.OPTIMIZER.param_schedulers.lr=%s", cases[k].sched),
                      "config.OPTIMIZER.param_schedulers.lr.auto_lr_scaling={auto_scale: true, base_value: 0.1, base_lr_batch_size: 256}"};
        cfg_t cfg;
        cfg_err err;
        cr_assert(compose_text(&cfg, &err, BASE, 3, ov), "%s: %s", cases[k].sched, err.msg);
        char *path = xasprintf("OPTIMIZER.param_schedulers.lr.%s", cases[k].key);
        assert_near(Cnum(&cfg, path), cases[k].want, 1e-12);
        free(path);
        free(ov[1]);
        cfg_destroy(&cfg);
    }
}

/* The typed API is for stages after validation: a missing key or a wrong type is a bug and
 * stops the process with exit 1, not a silent zero. */
Test(config, typed_access)
{
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, BASE, 0, NULL), "%s", err.msg);
    const cfg_node *c = cfg_map_get(cfg.root, "config");
    cr_assert_eq(cfg_int(c, "DATA.TRAIN.BATCHSIZE_PER_REPLICA"), 64);
    cr_assert_eq(cfg_float(c, "OPTIMIZER.num_epochs"), 90.0, "an int reads as a float");
    cr_assert_str_eq(cfg_str(c, "OPTIMIZER.name"), "sgd");
    cr_assert(!cfg_bool(c, "OPTIMIZER.nesterov"));
    cr_assert_eq(cfg_get(c, "OPTIMIZER.param_schedulers.lr.values")->len, 3);
    cfg_destroy(&cfg);
}

Test(config, typed_access_of_a_wrong_type_exits_1, .exit_code = 1)
{
    cfg_t cfg;
    cfg_err err;
    cr_assert(compose_text(&cfg, &err, BASE, 0, NULL), "%s", err.msg);
    cfg_int(cfg_map_get(cfg.root, "config"), "OPTIMIZER.name");
}
