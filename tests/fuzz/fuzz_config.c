/*
 * fuzz_config.c — libFuzzer target for the config parsers (YAML files and Hydra
 * override values), built with clang by `make fuzz`.
 *
 * The input is tried three ways:
 *   1. as a YAML config file: parse; if it parses, print it and parse the print again,
 *      which must give an equal tree (the printer and parser agree on every value);
 *      then merge it into a small defaults tree, infer and check (errors are fine,
 *      crashes and leaks are not);
 *   2. every line as a Hydra override value;
 *   3. every line as a whole override ("key=value") applied to the defaults.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char DEFAULTS[] =
    "VERSION: 1\n"
    "engine_name: train\n"
    "config:\n"
    "  TEST_ONLY: False\n"
    "  TEST_MODEL: False\n"
    "  MACHINE: {DEVICE: gpu}\n"
    "  DATA: {NUM_DATALOADER_WORKERS: 4, TRAIN: {DATA_SOURCES: [], DATASET_NAMES: [x], DATA_PATHS: [],\n"
    "         LABEL_SOURCES: [], LABEL_PATHS: [], LABEL_TYPE: standard, BATCHSIZE_PER_REPLICA: 256,\n"
    "         TRANSFORMS: [], COLLATE_FUNCTION: default_collate, COLLATE_FUNCTION_PARAMS: {}, DROP_LAST: False}}\n"
    "  METERS: {name: ''}\n"
    "  MODEL: {INPUT_TYPE: rgb, TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 50, LAYER4_STRIDE: 2,\n"
    "          NORM: BatchNorm, WIDTH_MULTIPLIER: 1, GROUPS: 1}}}, HEAD: {PARAMS: []},\n"
    "          FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: False, FREEZE_TRUNK_ONLY: False,\n"
    "          EXTRACT_TRUNK_FEATURES_ONLY: False, LINEAR_EVAL_FEAT_POOL_OPS_MAP: []},\n"
    "          AMP_PARAMS: {AMP_TYPE: apex}, SYNC_BN_CONFIG: {SYNC_BN_TYPE: pytorch}, WEIGHTS_INIT: {PARAMS_FILE: ''}}\n"
    "  LOSS: {name: CrossEntropyLoss, swav_loss: {num_crops: 2, queue: {queue_length: 0, local_queue_length: 0}},\n"
    "         simclr_info_nce_loss: {buffer_params: {world_size: 1, effective_batch_size: 1}}}\n"
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, num_epochs: 90,\n"
    "    head_optimizer_params: {use_different_lr: False, use_different_wd: False, weight_decay: 0.0001},\n"
    "    param_schedulers: {lr: {auto_lr_scaling: {auto_scale: False, base_value: 0.1, base_lr_batch_size: 256},\n"
    "      name: multistep, update_interval: epoch, values: [0.1, 0.01, 0.001], milestones: [30, 60],\n"
    "      schedulers: [], interval_scaling: [], lengths: [], start_value: 0.1, end_value: 0.0, value: 0.1},\n"
    "      lr_head: {}}}\n"
    "  DISTRIBUTED: {BACKEND: nccl, NUM_NODES: 1, NUM_PROC_PER_NODE: 8, INIT_METHOD: tcp, RUN_ID: auto}\n"
    "  CHECKPOINT: {DIR: '.', APPEND_DISTR_RUN_ID: False, BACKEND: disk, CHECKPOINT_FREQUENCY: 1,\n"
    "               LATEST_CHECKPOINT_RESUME_FILE_NUM: 1}\n";

static void start(cfg_t *cfg)
{
    cfg_err err;
    memset(cfg, 0, sizeof *cfg);
    cfg->defaults = cfg_parse_yaml(DEFAULTS, sizeof DEFAULTS - 1, "defaults", &err);
    if (!cfg->defaults)
        abort();
    cfg->root = cfg_copy(cfg->defaults);
    cfg->configs_dir = strdup("/nonexistent");
}

static void try_yaml(const char *text, size_t len)
{
    cfg_err err;
    cfg_node *tree = cfg_parse_yaml(text, len, "fuzz", &err);
    if (!tree)
        return;
    char *printed = cfg_to_yaml(tree);
    if (!strstr(printed, "(YAML emitter error)")) {
        cfg_node *again = cfg_parse_yaml(printed, strlen(printed), "printed", &err);
        if (!again || !cfg_equal(tree, again))
            abort(); /* printing lost or changed a value */
        cfg_free(again);
    }
    free(printed);
    cfg_t cfg;
    start(&cfg);
    cfg_options opt = {0};
    if (cfg_merge_file(&cfg, tree, "fuzz", &err) && cfg_infer(&cfg, &err))
        cfg_check(&cfg, &opt, &err);
    cfg_destroy(&cfg);
    cfg_free(tree);
}

static void try_lines(const char *text, size_t len)
{
    cfg_t cfg;
    start(&cfg);
    const char *p = text, *end = text + len;
    int index = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char *line = strndup(p, n);
        cfg_err err;
        cfg_node *v = cfg_parse_override_value(line, &err);
        cfg_free(v);
        if (strchr(line, '=') && !strchr(line, '/')) /* group overrides would read files */
            cfg_apply_override(&cfg, line, index++, &err);
        free(line);
        p += n + 1;
    }
    cfg_destroy(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    try_yaml(text, size);
    try_lines(text, strnlen(text, size));
    free(text);
    return 0;
}
