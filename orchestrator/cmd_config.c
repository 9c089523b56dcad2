/*
 * cmd_config.c — `selfsup config show|validate|lr CONFIG [overrides...]`.
 *
 * show      prints the composed and inferred config as VISSL YAML (stdout); findings that
 *           would stop a run, such as missing data folders, are printed as warnings.
 * validate  runs every check a run would, including that data and weights files exist and,
 *           for the train engine, the trainer's own checks before it builds the model
 *           (trainer_check_config: loss, optimizer, meter, schedules, batches per epoch,
 *           model options, the device), and prints a one-line summary; any problem exits 2
 *           with file, line and key, worded as the run would word it.
 * lr        prints the learning-rate schedule (lr and lr_head) epoch by epoch, or step by
 *           step with --steps-per-epoch N, evaluated exactly as the trainer will.
 */
#include "cmd.h"

#include "config.h"
#include "log.h"
#include "sched.h"
#include "preflight.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *action;
    const char *config;
    const char *key;
    const char *configs_dir;
    long steps_per_epoch;
    int n_overrides;
    char **overrides;
} config_args;

static void config_usage(FILE *out)
{
    fputs("usage: selfsup config show|validate|lr CONFIG [overrides...] [options]\n"
          "\n"
          "  show       print the composed, inferred config as VISSL YAML\n"
          "  validate   check everything a run would check (exit 2 on an error)\n"
          "  lr         print the learning-rate schedule per epoch (or per step)\n"
          "\n"
          "options:\n"
          "  --key PATH             show only this part, e.g. config.OPTIMIZER.param_schedulers\n"
          "  --steps-per-epoch N    lr: print every step, N steps per epoch\n"
          "  --configs DIR          where defaults.yaml lives (default: $SELFSUP_CONFIGS or the install)\n", out);
}

static int parse_args(int argc, char **argv, config_args *a)
{
    memset(a, 0, sizeof *a);
    a->overrides = xcalloc((size_t)argc, sizeof *a->overrides);
    for (int k = 1; k < argc; k++) {
        const char *arg = argv[k];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            config_usage(stdout);
            exit(0);
        } else if ((!strcmp(arg, "--key") || !strcmp(arg, "--configs") || !strcmp(arg, "--steps-per-epoch")) &&
                   k + 1 < argc) {
            const char *v = argv[++k];
            if (!strcmp(arg, "--key"))
                a->key = v;
            else if (!strcmp(arg, "--configs"))
                a->configs_dir = v;
            else if ((a->steps_per_epoch = strtol(v, NULL, 10)) <= 0)
                return log_error("--steps-per-epoch needs a positive number"), EXIT_USAGE;
        } else if (!strncmp(arg, "--", 2)) {
            log_error("unknown option '%s'", arg);
            return EXIT_USAGE;
        } else if (!a->action) {
            a->action = arg;
        } else if (!a->config && !strchr(arg, '=') && arg[0] != '~' && arg[0] != '+') {
            a->config = arg;
        } else {
            a->overrides[a->n_overrides++] = argv[k];
        }
    }
    if (!a->action || (strcmp(a->action, "show") && strcmp(a->action, "validate") && strcmp(a->action, "lr"))) {
        config_usage(stderr);
        return EXIT_USAGE;
    }
    return 0;
}

static void print_warnings(const cfg_t *cfg)
{
    for (size_t k = 0; k < cfg->n_warnings; k++)
        log_warn("%s", cfg->warnings[k]);
}

static int show(const cfg_t *cfg, const char *key)
{
    const cfg_node *node = key ? cfg_path(cfg->root, key) : cfg->root;
    if (!node) {
        log_error("no key '%s' in the composed config", key);
        return EXIT_USAGE;
    }
    char *yaml = cfg_to_yaml(node);
    if (!key)
        fputs("# @package _global_\n", stdout);
    fputs(yaml, stdout);
    free(yaml);
    return 0;
}

static int summary(const cfg_t *cfg, const char *name)
{
    const cfg_node *c = cfg_map_get(cfg->root, "config");
    int64_t world = cfg_int(c, "DISTRIBUTED.NUM_NODES") * cfg_int(c, "DISTRIBUTED.NUM_PROC_PER_NODE");
    printf("%s: OK (engine %s, loss %s, world size %lld, global batch %lld, %lld epochs)\n", name,
           cfg_str(cfg->root, "engine_name"), cfg_str(c, "LOSS.name"), (long long)world,
           (long long)(world * cfg_int(c, "DATA.TRAIN.BATCHSIZE_PER_REPLICA")),
           (long long)cfg_int(c, "OPTIMIZER.num_epochs"));
    return 0;
}

static int lr_table(const cfg_t *cfg, long steps_per_epoch)
{
    const cfg_node *c = cfg_map_get(cfg->root, "config");
    int64_t epochs = cfg_int(c, "OPTIMIZER.num_epochs");
    sched lr, head;
    cfg_err err;
    bool ok = cfg_build_scheduler(cfg_get(c, "OPTIMIZER.param_schedulers.lr"), "config.OPTIMIZER.param_schedulers.lr",
                                  epochs, &lr, &err);
    ok = ok && cfg_build_scheduler(cfg_get(c, "OPTIMIZER.param_schedulers.lr_head"),
                                   "config.OPTIMIZER.param_schedulers.lr_head", epochs, &head, &err);
    if (!ok) {
        log_error("%s", err.msg);
        sched_free(&lr);
        sched_free(&head);
        return EXIT_USAGE;
    }
    long steps = steps_per_epoch > 0 ? steps_per_epoch : 1;
    printf("# lr: %s, updated every %s; lr_head: %s\n", sched_kind_name(lr.kind),
           sched_update_interval_name(lr.update_interval), sched_kind_name(head.kind));
    printf("%8s %8s %12s %16s %16s\n", "epoch", "step", "where", "lr", "lr_head");
    for (int64_t e = 0; e < epochs; e++) {
        for (long s = 0; s < steps; s++) {
            double where = ((double)e * (double)steps + (double)s) / ((double)epochs * (double)steps);
            /* Epoch schedulers only move at epoch boundaries, as in the trainer. */
            double w_lr = lr.update_interval == SCHED_UPDATE_EPOCH ? (double)e / (double)epochs : where;
            double w_head = head.update_interval == SCHED_UPDATE_EPOCH ? (double)e / (double)epochs : where;
            printf("%8lld %8ld %12.6f %16.10g %16.10g\n", (long long)e, s, where, sched_value(&lr, w_lr),
                   sched_value(&head, w_head));
        }
    }
    sched_free(&lr);
    sched_free(&head);
    return 0;
}

int cmd_config(int argc, char **argv)
{
    config_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        free(a.overrides);
        return rc;
    }
    char *configs_dir = a.configs_dir ? xstrdup(a.configs_dir) : cfg_find_configs_dir();
    char *file = NULL;
    if (a.config && !(file = cfg_resolve_config_file(configs_dir, a.config))) {
        log_error("no config file '%s' (nor %s/%s.yaml)", a.config, configs_dir ? configs_dir : "<configs>",
                  a.config);
        free(configs_dir);
        free(a.overrides);
        return EXIT_USAGE;
    }
    cfg_options opt = {.configs_dir = configs_dir, .check_paths = !strcmp(a.action, "validate")};
    cfg_t cfg;
    cfg_err err;
    if (!cfg_compose(&cfg, &opt, file, a.n_overrides, a.overrides, &err)) {
        log_error("%s", err.msg);
        rc = EXIT_USAGE;
    } else {
        print_warnings(&cfg);
        if (!strcmp(a.action, "show"))
            rc = show(&cfg, a.key);
        else if (!strcmp(a.action, "validate"))
            rc = preflight_engine(cfg_map_get(cfg.root, "config"), cfg_str(cfg.root, "engine_name"))
                     ? summary(&cfg, a.config ? a.config : "defaults")
                     : EXIT_USAGE;
        else
            rc = lr_table(&cfg, a.steps_per_epoch);
    }
    cfg_destroy(&cfg);
    free(file);
    free(configs_dir);
    free(a.overrides);
    return rc;
}
