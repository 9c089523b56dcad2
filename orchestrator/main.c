/*
 * selfsup — the front door.
 *
 *   selfsup config show CONFIG [overrides...]      print the composed, inferred config
 *   selfsup config validate CONFIG [overrides...]  check it (exit 2 on any error)
 *   selfsup config lr CONFIG [overrides...]        print the LR schedule, epoch by epoch
 *   selfsup run CONFIG [overrides...]              run the pipeline: every stage, supervised
 *   selfsup status RUN_DIR                          what a run is doing (stages, rings, farm hosts)
 *   selfsup slurm CONFIG [overrides...] [options]   submit the run to Slurm (sbatch)
 *   selfsup svm CONFIG [overrides...]              extract features, then VISSL's SVM benchmark
 *   selfsup knn CONFIG [overrides...]              extract features, then VISSL's kNN benchmark
 *   selfsup retrieval CONFIG [overrides...]        VISSL's instance-retrieval benchmark
 *   selfsup clusterfit CONFIG [overrides...]       extract, k-means (FAISS), pseudo-labels [--then TRAIN]
 *   selfsup inspect FILE|-                          print records (a record file or a stream)
 *   selfsup keygen DIR --clients NAME[:IDS]...      CURVE keys for tcp endpoints (control, data)
 *   selfsup dataset fashion-mnist DIR               Fashion-MNIST in VISSL's layouts
 *   selfsup convert IN OUT [--to L] [--format F]    model weights between layouts and formats
 *   selfsup NAME [args...]                          run selfsup-NAME, as git does
 *
 * CONFIG is a file, or a VISSL name such as pretrain/simclr/simclr_8node_resnet (or
 * config=pretrain/simclr/simclr_8node_resnet) looked up under the configs directory.
 */
#include "cmd.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fputs("usage: selfsup COMMAND [args...]\n"
          "\n"
          "commands:\n"
          "  config show CONFIG [overrides...]      print the composed config (VISSL YAML)\n"
          "  config validate CONFIG [overrides...]  check a config; exit 2 if it is wrong\n"
          "  config lr CONFIG [overrides...]        print the learning-rate schedule\n"
          "  run CONFIG [overrides...]              run the pipeline (see selfsup run --help)\n"
          "  status RUN_DIR [--json]                what a run is doing: stages, rings, farm hosts\n"
          "  slurm CONFIG [overrides...] [--dry-run] submit the run to Slurm (see selfsup slurm --help)\n"
          "  svm CONFIG [overrides...]              extract features, then train and test SVMs\n"
          "  knn CONFIG [overrides...]              extract features, then the kNN benchmark\n"
          "  retrieval CONFIG [overrides...]        the instance-retrieval benchmark (Oxford/Paris mAP)\n"
          "  clusterfit CONFIG [overrides...] [--then TRAIN_CONFIG [overrides...]]\n"
          "                                         ClusterFit: extract, cluster (FAISS), label, train\n"
          "  inspect FILE|-                         print the records of a file or stream\n"
          "  keygen DIR --clients NAME[:IDS]...     make the CURVE keys a tcp endpoint needs\n"
          "  dataset fashion-mnist DIR              write Fashion-MNIST in VISSL's layouts\n"
          "  convert IN OUT [--to vissl|torchvision] [--format safetensors|torch]\n"
          "                                         convert model weights (VISSL, torchvision)\n"
          "  NAME [args...]                         run the stage selfsup-NAME\n"
          "\n"
          "CONFIG is a YAML file or a VISSL config name (pretrain/simclr/simclr_8node_resnet).\n"
          "Overrides use VISSL/Hydra syntax: config.OPTIMIZER.num_epochs=100, +config.NEW=1,\n"
          "+config/pretrain/swav/transforms=NAME.\n"
          "\n"
          "options: --help, --version\n", out);
}

/* `selfsup NAME args` runs selfsup-NAME from the same directory, then from PATH. */
static int run_stage(const char *name, char **argv)
{
    char *dir = exe_dir();
    char *prog = xasprintf("selfsup-%s", name);
    char *local = dir ? path_join(dir, prog) : NULL;
    argv[0] = prog;
    if (local && access(local, X_OK) == 0)
        execv(local, argv);
    execvp(prog, argv);
    log_init_command("selfsup");
    log_error("'%s' is not a selfsup command (%s: %s); see 'selfsup --help'", name, prog, strerror(errno));
    return EXIT_USAGE;
}

/* `selfsup retrieval CONFIG [...]` is `selfsup-retrieval -c CONFIG [...]`: the first argument
 * that is neither an option nor an override is the config. */
static int run_retrieval(int argc, char **argv)
{
    char **args = xcalloc((size_t)argc + 2, sizeof *args);
    int n = 0;
    bool have_config = false;
    args[n++] = argv[1];
    for (int i = 2; i < argc; i++) {
        bool value = !strcmp(argv[i - 1], "--output") || !strcmp(argv[i - 1], "--threads") ||
                     !strcmp(argv[i - 1], "-c") || !strcmp(argv[i - 1], "--config");
        if (!have_config && !value && argv[i][0] != '-' && !strchr(argv[i], '=')) {
            args[n++] = "-c";
            have_config = true;
        }
        args[n++] = argv[i];
    }
    return run_stage("retrieval", args);
}

int main(int argc, char **argv)
{
    log_init("selfsup");
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("selfsup %s\n", SELFSUP_VERSION);
        return 0;
    }
    /* Every command but run (whose lines sit in logs beside its stages') speaks as a tool. */
    static const char *const COMMANDS[] = {"config", "status", "slurm", "svm", "knn", "clusterfit", "inspect", "keygen", "dataset", "convert"};
    static char command[64];
    for (size_t i = 0; i < ARRAY_LEN(COMMANDS); i++)
        if (!strcmp(argv[1], COMMANDS[i])) {
            snprintf(command, sizeof command, "selfsup %s", argv[1]);
            log_init_command(command);
        }
    if (!strcmp(argv[1], "config"))
        return cmd_config(argc - 1, argv + 1);
    if (!strcmp(argv[1], "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "slurm"))
        return cmd_slurm(argc - 1, argv + 1);
    if (!strcmp(argv[1], "status"))
        return cmd_status(argc - 1, argv + 1);
    if (!strcmp(argv[1], "svm") || !strcmp(argv[1], "knn") || !strcmp(argv[1], "clusterfit"))
        return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "inspect"))
        return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(argv[1], "keygen"))
        return cmd_keygen(argc - 1, argv + 1);
    if (!strcmp(argv[1], "dataset"))
        return cmd_dataset(argc - 1, argv + 1);
    if (!strcmp(argv[1], "convert"))
        return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(argv[1], "retrieval"))
        return run_retrieval(argc, argv);
    return run_stage(argv[1], argv + 1);
}
