/*
 * cmd_eval.c — `selfsup svm|knn|clusterfit CONFIG [overrides...] [--run-dir DIR] [--no-extract]`:
 * VISSL's tools/train_svm.py, tools/nearest_neighbor_test.py and
 * tools/cluster_features_and_label.py in one command each.
 *
 * First the features: the config runs as `selfsup run` with engine_name extract_features
 * (decode → augment → collate → selfsup-extract per split), writing VISSL's feature files into
 * CHECKPOINT.DIR; --no-extract skips this and reads what a previous run left there. Then the
 * tool, selfsup-svm, selfsup-knn or selfsup-cluster, runs on the same config and overrides (it
 * reads the SVM, NEAREST_NEIGHBOR or CLUSTERFIT keys and the files in CHECKPOINT.DIR).
 *
 * ClusterFit's second step, training on the pseudo-labels, follows with `--then TRAIN_CONFIG
 * [overrides...]` (everything after --then is that run's): `selfsup run TRAIN_CONFIG` with
 * config.DATA.TRAIN.LABEL_PATHS set to the labels file. The CLUSTERFIT keys, the layer (one the
 * extraction writes) and the training config are checked before the extraction starts, so a
 * mistake in any of them costs no extraction. The exit status is the first failing step's.
 */
#include "cmd.h"

#include "cluster/clusterfit.h"
#include "extract/extract.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* command: svm, knn or clusterfit; tool: the stage it runs (svm, knn, cluster). */
static void usage(FILE *out, const char *command, const char *tool)
{
    bool clusterfit = !strcmp(tool, "cluster");
    fprintf(out,
            "usage: selfsup %s CONFIG [overrides...] [--run-dir DIR] [--node-rank N] [--no-extract]%s\n"
            "\n"
            "Extract the features the config describes (engine extract_features, as selfsup run),\n"
            "then run selfsup-%s on them (see selfsup-%s --help). The features, and the results,\n"
            "go to config.CHECKPOINT.DIR.\n"
            "\n"
            "  --run-dir DIR    where the extraction's config.yaml and logs/ go\n"
            "  --node-rank N    this node's index in a multi-node extraction\n"
            "  --no-extract     use the feature files already in CHECKPOINT.DIR\n"
            "Other options, after CONFIG, go to selfsup-%s (e.g. --threads N).\n"
            "%s",
            command, clusterfit ? "\n                          [--then TRAIN_CONFIG [overrides...]]" : "",
            tool, tool, tool,
            !clusterfit ? ""
                        : "  --then TRAIN_CONFIG [overrides...]\n"
                          "                   then train on the labels: selfsup run TRAIN_CONFIG with\n"
                          "                   config.DATA.TRAIN.LABEL_PATHS=[the labels file]\n");
}

/* Run selfsup-TOOL (beside this binary, else on PATH) with argv and wait for it. */
static int run_tool(const char *tool, char **argv)
{
    char *prog = xasprintf("selfsup-%s", tool), *dir = exe_dir();
    char *local = dir ? path_join(dir, prog) : NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        argv[0] = prog;
        if (local && access(local, X_OK) == 0)
            execv(local, argv);
        execvp(prog, argv);
        log_error("cannot run %s", prog);
        _exit(EXIT_USAGE);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) {
        log_error("selfsup %s: cannot start %s", tool, prog);
        st = EXIT_RUNTIME << 8;
    }
    free(prog);
    free(dir);
    free(local);
    return WIFEXITED(st) ? WEXITSTATUS(st) : EXIT_RUNTIME;
}

/* The command line split by destination: `selfsup run`'s (extraction), the tool's, and
 * ClusterFit's training run after --then. */
typedef struct {
    char **run_argv, **tool_argv, **overrides; /* overrides: the config's, for composing it here */
    int nrun, ntool, noverrides;
    bool extract, help;
    const char *config, *output; /* the tool's -c CONFIG and --output DIR */
    int then;                    /* argv index of --then, or argc */
} eval_args;

/* An option of the tool's, with its value when one follows. */
static int tool_option(eval_args *a, int argc, char **argv, int i)
{
    a->tool_argv[a->ntool++] = argv[i];
    if (a->config && i + 1 < argc && argv[i + 1][0] != '-' && !strchr(argv[i + 1], '=')) {
        if (!strcmp(argv[i], "--output"))
            a->output = argv[i + 1];
        a->tool_argv[a->ntool++] = argv[++i];
    }
    return i;
}

static void parse(eval_args *a, int argc, char **argv)
{
    a->run_argv = xcalloc((size_t)argc + 2, sizeof *a->run_argv);
    a->tool_argv = xcalloc((size_t)argc + 3, sizeof *a->tool_argv);
    a->overrides = xcalloc((size_t)argc + 1, sizeof *a->overrides);
    a->ntool = 1, a->extract = true;
    a->run_argv[a->nrun++] = "run";
    for (int i = 1; i < a->then; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help"))
            a->help = true;
        else if (!strcmp(s, "--no-extract"))
            a->extract = false;
        else if ((!strcmp(s, "--run-dir") || !strcmp(s, "--node-rank")) && i + 1 < a->then) {
            a->run_argv[a->nrun++] = argv[i];
            a->run_argv[a->nrun++] = argv[++i];
        } else if (s[0] == '-')
            i = tool_option(a, a->then, argv, i);
        else {
            a->run_argv[a->nrun++] = argv[i];
            bool config_eq = !strncmp(s, "config=", 7);
            if (!a->config && (config_eq || !strchr(s, '='))) {
                a->tool_argv[a->ntool++] = "-c";
                a->tool_argv[a->ntool++] = argv[i] + (config_eq ? 7 : 0);
                a->config = argv[i] + (config_eq ? 7 : 0);
            } else
                a->tool_argv[a->ntool++] = a->overrides[a->noverrides++] = argv[i];
        }
    }
}

/* ---- ClusterFit ------------------------------------------------------------------------------ */

/* Whether the extraction writes the layer ClusterFit clusters. */
static bool extracts_layer(const cfg_node *config, const char *layer, cfg_err *err)
{
    model_options mo;
    const char *names[MODEL_MAX_FEATURES];
    if (!model_options_from_config(cfg_get(config, "MODEL"), &mo, err))
        return false;
    int n = extractor_layer_names(config, &mo, names);
    strbuf all = {0};
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], layer))
            return sb_free(&all), true;
        sb_printf(&all, "%s%s", i ? ", " : "", names[i]);
    }
    cfg_fail(err, cfg_get(config, "CLUSTERFIT.FEATURES.LAYER_NAME"), "config.CLUSTERFIT.FEATURES.LAYER_NAME",
             "is '%s', but the extraction writes %s (MODEL.FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP)",
             layer, sb_str(&all));
    sb_free(&all);
    return false;
}

/* The labels file the clustering will write (NULL after logging why the CLUSTERFIT keys or the
 * layer are refused). */
static char *labels_path(const eval_args *a)
{
    cfg_t cfg = {0};
    cfg_err err;
    clusterfit_options o;
    char *path = NULL;
    bool ok = cfg_compose_arg(&cfg, false, a->config, a->noverrides, a->overrides, &err) &&
              clusterfit_options_from_config(&cfg, &o, &err);
    if (ok && (!a->extract || extracts_layer(cfg_map_get(cfg.root, "config"), o.layer, &err))) {
        if (a->output)
            free(o.dir), o.dir = xstrdup(a->output);
        path = clusterfit_path(&o, "_lbls.npy");
    }
    if (ok)
        clusterfit_options_free(&o);
    if (!path)
        log_error("%s", err.msg);
    cfg_destroy(&cfg);
    return path;
}

/* `selfsup run` of the training config after --then, with the labels as DATA.TRAIN's
 * (train_argv[0] is "run"). */
static char **train_argv(int argc, char **argv, int then, const char *labels, int *n)
{
    char **t = xcalloc((size_t)(argc - then) + 3, sizeof *t);
    *n = 0;
    t[(*n)++] = "run";
    for (int i = then + 1; i < argc; i++)
        t[(*n)++] = argv[i];
    t[(*n)++] = xasprintf("config.DATA.TRAIN.LABEL_PATHS=['%s']", labels);
    return t;
}

/* A composed training config as it will read once the labels exist: until then its
 * DATA.TRAIN reads no labels (they change no count the checks make; `selfsup run` checks the
 * file itself when the training starts). */
static void without_missing_labels(cfg_node *config, const void *labels)
{
    if (path_exists(labels))
        return;
    cfg_node *train = cfg_get(config, "DATA.TRAIN");
    cfg_map_set(train, "LABEL_SOURCES", cfg_new(CFG_LIST, NULL, 0));
    cfg_map_set(train, "LABEL_PATHS", cfg_new(CFG_LIST, NULL, 0));
}

/* The steps: extraction, the tool, then ClusterFit's training. */
static int run_steps(eval_args *a, const char *tool, char **train, int ntrain, const char *labels)
{
    int steps = 1 + a->extract + (train != NULL), step = 0, status = 0;
    if (a->extract) {
        log_info("step %d of %d: extracting features (engine extract_features)", ++step, steps);
        status = cmd_run_engine(a->nrun, a->run_argv, "extract_features");
    }
    if (status == 0) {
        log_info("step %d of %d: selfsup-%s", ++step, steps, tool);
        status = run_tool(tool, a->tool_argv);
    }
    if (status == 0 && train) {
        log_info("step %d of %d: training on the cluster labels (%s)", ++step, steps, labels);
        status = cmd_run_engine(ntrain, train, NULL);
    }
    return status;
}

int cmd_eval(int argc, char **argv)
{
    const char *tool = strcmp(argv[0], "clusterfit") ? argv[0] : "cluster";
    eval_args a = {.then = argc};
    for (int i = 1; !strcmp(tool, "cluster") && i < argc; i++)
        if (!strcmp(argv[i], "--then") && a.then == argc)
            a.then = i;
    parse(&a, argc, argv);
    int status = 0, ntrain = 0;
    char **train = NULL, *labels = NULL;
    if (a.help)
        usage(stdout, argv[0], tool);
    else if (!a.config) {
        usage(stderr, argv[0], tool);
        status = EXIT_USAGE;
    } else if (!strcmp(tool, "cluster") && !(labels = labels_path(&a)))
        status = EXIT_USAGE;
    if (status == 0 && labels && a.then == argc - 1) {
        log_error("--then needs the training config");
        status = EXIT_USAGE;
    } else if (status == 0 && labels && a.then < argc) {
        train = train_argv(argc, argv, a.then, labels, &ntrain);
        status = cmd_run_check(ntrain, train, without_missing_labels, labels) ? 0 : EXIT_USAGE;
    }
    if (!a.help && status == 0)
        status = run_steps(&a, tool, train, ntrain, labels);
    if (train)
        free(train[ntrain - 1]);
    free(train), free(labels), free(a.run_argv), free(a.tool_argv), free(a.overrides);
    return status;
}
