/*
 * cmd_eval.c — `selfsup svm|knn CONFIG [overrides...] [--run-dir DIR] [--no-extract]`: VISSL's
 * tools/train_svm.py and tools/nearest_neighbor_test.py in one command.
 *
 * First the features: the config runs as `selfsup run` with engine_name extract_features
 * (decode → augment → collate → selfsup-extract per split), writing VISSL's feature files into
 * CHECKPOINT.DIR; --no-extract skips this and reads what a previous run left there. Then the
 * evaluator, selfsup-svm or selfsup-knn, runs on the same config and overrides (it reads the
 * SVM or NEAREST_NEIGHBOR keys and the files in CHECKPOINT.DIR). The exit status is the first
 * failing step's.
 */
#include "cmd.h"

#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void usage(FILE *out, const char *tool)
{
    fprintf(out,
            "usage: selfsup %s CONFIG [overrides...] [--run-dir DIR] [--node-rank N] [--no-extract]\n"
            "\n"
            "Extract the features the config describes (engine extract_features, as selfsup run),\n"
            "then run selfsup-%s on them (see selfsup-%s --help). The features, and the results,\n"
            "go to config.CHECKPOINT.DIR.\n"
            "\n"
            "  --run-dir DIR    where the extraction's config.yaml and logs/ go\n"
            "  --node-rank N    this node's index in a multi-node extraction\n"
            "  --no-extract     use the feature files already in CHECKPOINT.DIR\n"
            "Other options, after CONFIG, go to selfsup-%s (e.g. --threads N, --layers a,b).\n",
            tool, tool, tool, tool);
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

int cmd_eval(int argc, char **argv)
{
    const char *tool = argv[0];
    /* run_argv: what `selfsup run` takes; tool_argv: -c CONFIG and the overrides. */
    char **run_argv = xcalloc((size_t)argc + 2, sizeof *run_argv), **tool_argv = xcalloc((size_t)argc + 3, sizeof *tool_argv);
    int nrun = 0, ntool = 1;
    bool extract = true, have_config = false;
    run_argv[nrun++] = "run";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, tool);
            free(run_argv);
            free(tool_argv);
            return 0;
        }
        if (!strcmp(a, "--no-extract")) {
            extract = false;
            continue;
        }
        if ((!strcmp(a, "--run-dir") || !strcmp(a, "--node-rank")) && i + 1 < argc) {
            run_argv[nrun++] = argv[i];
            run_argv[nrun++] = argv[++i];
            continue;
        }
        if (a[0] == '-') { /* the evaluator's own option, with its value when one follows */
            tool_argv[ntool++] = argv[i];
            if (have_config && i + 1 < argc && argv[i + 1][0] != '-' && !strchr(argv[i + 1], '='))
                tool_argv[ntool++] = argv[++i];
            continue;
        }
        run_argv[nrun++] = argv[i];
        bool config_eq = !strncmp(a, "config=", 7);
        if (!have_config && (config_eq || !strchr(a, '='))) {
            tool_argv[ntool++] = "-c";
            tool_argv[ntool++] = argv[i] + (config_eq ? 7 : 0);
            have_config = true;
        } else
            tool_argv[ntool++] = argv[i];
    }
    int status = 0;
    if (!have_config) {
        usage(stderr, tool);
        status = EXIT_USAGE;
    }
    if (status == 0 && extract) {
        log_info("step 1 of 2: extracting features (engine extract_features)");
        status = cmd_run_engine(nrun, run_argv, "extract_features");
    }
    if (status == 0) {
        log_info("step %d of %d: selfsup-%s", extract ? 2 : 1, extract ? 2 : 1, tool);
        status = run_tool(tool, tool_argv);
    }
    free(run_argv);
    free(tool_argv);
    return status;
}
