/*
 * cmd_slurm.c — `selfsup slurm CONFIG [overrides...] [options]`: run a config on a Slurm
 * cluster, as VISSL's SLURM keys (and dev/launch_slurm.sh) do.
 *
 * It composes and checks the config as `selfsup run` would on every node (a config that
 * would be refused there is refused here, exit 2, and nothing is submitted), writes the
 * batch script (slurm.h) to SLURM.LOG_FOLDER/selfsup-NAME-DATE-TIME.sbatch and submits it
 * with `sbatch --parsable`. The job runs one `selfsup run CONFIG overrides --role auto` per
 * node, each in RUN_DIR/JOB_ID/nodeN (RUN_DIR: --run-dir, else SLURM.LOG_FOLDER); with
 * --farm-nodes K, node 0 trains and nodes 1..K decode and augment for it, as the second
 * component of a heterogeneous job (SELFSUP.FARM.SLURM: their partition, CPUs, memory, no GPU).
 *
 * The options are overrides by another name: --partition P is config.SLURM.PARTITION=P,
 * --nodes N config.DISTRIBUTED.NUM_NODES=N, --gpus-per-node G
 * config.DISTRIBUTED.NUM_PROC_PER_NODE=G, --farm-nodes K config.SELFSUP.FARM.NODES=K,
 * --farm-partition P config.SELFSUP.FARM.SLURM.PARTITION=P,
 * --time H:MM config.SLURM.TIME_HOURS=H and TIME_MINUTES=MM; the job's runs get them too.
 * --dry-run prints the script and submits nothing.
 */
#include "cmd.h"

#include "atomic_file.h"
#include "log.h"
#include "slurm.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char **run_argv; /* "run", CONFIG, overrides (the options' included), NULL */
    int run_argc;
    char **owned;    /* the overrides made from options, to free */
    int n_owned;
    const char *run_dir;
    bool dry_run;
} slurm_args;

static void slurm_usage(FILE *out)
{
    fputs("usage: selfsup slurm CONFIG [overrides...] [--partition P] [--nodes N] [--gpus-per-node G]\n"
          "                     [--farm-nodes K] [--farm-partition P] [--time H[:MM]] [--run-dir DIR]\n"
          "                     [--dry-run]\n"
          "\n"
          "Write the Slurm batch script of `selfsup run CONFIG overrides` and submit it (sbatch):\n"
          "one task per node, in RUN_DIR/JOB_ID/nodeN. The script takes its #SBATCH lines from\n"
          "the config's SLURM keys (NAME, COMMENT, PARTITION, CONSTRAINT, TIME_HOURS, TIME_MINUTES,\n"
          "MEM_GB, NUM_CPU_PER_PROC, LOG_FOLDER, ADDITIONAL_PARAMETERS) and DISTRIBUTED's counts.\n"
          "\n"
          "  --partition P       config.SLURM.PARTITION\n"
          "  --nodes N           config.DISTRIBUTED.NUM_NODES (trainer nodes)\n"
          "  --gpus-per-node G   config.DISTRIBUTED.NUM_PROC_PER_NODE\n"
          "  --farm-nodes K      config.SELFSUP.FARM.NODES: K more nodes decode and augment for\n"
          "                      node 0 (the decode farm; the README's \"Several machines\"), in a\n"
          "                      component of the job of their own, without GPUs\n"
          "  --farm-partition P  config.SELFSUP.FARM.SLURM.PARTITION: the farm nodes' partition\n"
          "  --time H[:MM]       config.SLURM.TIME_HOURS and TIME_MINUTES\n"
          "  --run-dir DIR       where the nodes' run directories go (default: SLURM.LOG_FOLDER)\n"
          "  --dry-run           print the script; submit nothing\n"
          "\n"
          "Submit the same script again to go on from the last checkpoint. `selfsup run` with\n"
          "config.SLURM.USE_SLURM=True submits the same way.\n",
          out);
}

static void add_run_arg(slurm_args *s, char *arg, bool owned)
{
    s->run_argv = xrealloc(s->run_argv, (size_t)(s->run_argc + 2) * sizeof *s->run_argv);
    s->run_argv[s->run_argc++] = arg;
    s->run_argv[s->run_argc] = NULL;
    if (owned) {
        s->owned = xrealloc(s->owned, (size_t)(s->n_owned + 1) * sizeof *s->owned);
        s->owned[s->n_owned++] = arg;
    }
}

/* --time H or H:MM into the two SLURM keys. */
static int time_overrides(slurm_args *s, const char *value)
{
    char *end;
    long hours = strtol(value, &end, 10), minutes = 0;
    if (*end == ':')
        minutes = strtol(end + 1, &end, 10);
    if (*end || end == value || hours < 0 || minutes < 0 || minutes > 59) {
        log_error("--time %s: expected H or H:MM", value);
        return -1;
    }
    add_run_arg(s, xasprintf("config.SLURM.TIME_HOURS=%ld", hours), true);
    add_run_arg(s, xasprintf("config.SLURM.TIME_MINUTES=%ld", minutes), true);
    return 0;
}

/* An option that stands for an override: its key, or NULL when `name` is no such option. */
static const char *override_key(const char *name)
{
    static const char *const map[][2] = {{"--partition", "SLURM.PARTITION"},
                                         {"--nodes", "DISTRIBUTED.NUM_NODES"},
                                         {"--gpus-per-node", "DISTRIBUTED.NUM_PROC_PER_NODE"},
                                         {"--farm-nodes", "SELFSUP.FARM.NODES"},
                                         {"--farm-partition", "SELFSUP.FARM.SLURM.PARTITION"}};
    for (size_t i = 0; i < ARRAY_LEN(map); i++)
        if (!strcmp(name, map[i][0]))
            return map[i][1];
    return NULL;
}

static int option(slurm_args *s, const char *name, const char *value)
{
    const char *key = override_key(name);
    if (key) {
        /* quoted: a partition named 1 or true stays a string; numbers are checked as numbers */
        bool text = strstr(key, "PARTITION") != NULL;
        add_run_arg(s, xasprintf(text ? "config.%s='%s'" : "config.%s=%s", key, value), true);
        return 0;
    }
    if (!strcmp(name, "--time"))
        return time_overrides(s, value);
    if (!strcmp(name, "--run-dir")) {
        s->run_dir = value;
        return 0;
    }
    log_error("unknown option '%s'; see selfsup slurm --help", name);
    return -1;
}

/* -1: go on; otherwise the exit status. argv[0] is "slurm" (or "run", for SLURM.USE_SLURM). */
static int parse_slurm_args(int argc, char **argv, slurm_args *s)
{
    add_run_arg(s, "run", false);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            slurm_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--dry-run"))
            s->dry_run = true;
        else if (argv[i][0] == '-') {
            if (i + 1 >= argc) {
                log_error("%s needs a value", argv[i]);
                return EXIT_USAGE;
            }
            if (option(s, argv[i], argv[i + 1]) != 0)
                return EXIT_USAGE;
            i++;
        } else {
            add_run_arg(s, argv[i], false);
        }
    }
    if (s->run_argc < 2) {
        slurm_usage(stderr);
        return EXIT_USAGE;
    }
    return -1;
}

static void free_slurm_args(slurm_args *s)
{
    for (int i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    free(s->owned);
    free(s->run_argv);
}

/* ---- checking and writing ---------------------------------------------------------------------- */

/* Whether `selfsup run ARGS OPTION VALUE` would be refused (logged). */
static bool refused_with(slurm_args *s, const char *option, const char *value)
{
    add_run_arg(s, (char *)option, false);
    add_run_arg(s, (char *)value, false);
    char *file = NULL;
    cfg_node *root = cmd_run_config(s->run_argc, s->run_argv, &file);
    s->run_argc -= 2;
    s->run_argv[s->run_argc] = NULL;
    free(file);
    cfg_free(root);
    return !root;
}

/* The config as the job runs it, checked as every node will: with farm nodes, as the trainer
 * node and as a farm node; with several trainer nodes, as node 1 too (node 0 listens where the
 * others connect: their keys differ). */
static cfg_node *checked_config(slurm_args *s, char **file)
{
    cfg_node *root = cmd_run_config(s->run_argc, s->run_argv, file);
    const cfg_node *config = root ? cfg_map_get(root, "config") : NULL;
    bool farm = config && cfg_int(config, "SELFSUP.FARM.NODES") > 0,
         nodes = config && cfg_int(config, "DISTRIBUTED.NUM_NODES") > 1;
    if ((farm && (refused_with(s, "--role", "train") || refused_with(s, "--role", "farm"))) ||
        (nodes && refused_with(s, "--node-rank", "1"))) {
        cfg_free(root);
        free(*file);
        *file = NULL;
        return NULL;
    }
    return root;
}

/* `path` made absolute; made too, unless for a dry run (which writes nothing). */
static char *absolute(const char *path, bool make)
{
    char *err = NULL;
    if (make && make_dirs(path, 0755, &err) != 0) {
        log_error("%s", err);
        free(err);
        return NULL;
    }
    char *abs = realpath(path, NULL), *cwd = NULL;
    if (!abs && !make && path[0] != '/' && (cwd = getcwd(NULL, 0)))
        abs = path_join(cwd, path);
    else if (!abs && !make)
        abs = xstrdup(path);
    if (!abs)
        log_error("%s: %s", path, strerror(errno));
    free(cwd);
    return abs;
}

/* The job's `selfsup run` arguments: the config file by its absolute path, then the overrides. */
static char *script_for(const cfg_node *config, const slurm_args *s, const char *file, const char *log_folder,
                        const char *run_dir, char **err)
{
    char *dir = exe_dir(), *selfsup = path_join(dir ? dir : ".", "selfsup"), *found = cfg_find_configs_dir();
    char *configs = found ? realpath(found, NULL) : NULL, *cwd = getcwd(NULL, 0);
    char **args = xcalloc((size_t)s->run_argc, sizeof *args);
    int n = 0;
    for (int i = 1; i < s->run_argc; i++)
        args[n++] = i == 1 && file && !strchr(s->run_argv[1], '=') ? (char *)file : s->run_argv[i];
    slurm_job_spec spec = {.selfsup = selfsup, .configs_dir = configs, .run_args = args, .n_run_args = n,
                           .run_dir = run_dir, .log_folder = log_folder, .work_dir = cwd ? cwd : ".",
                           .farm_nodes = (int)cfg_int(config, "SELFSUP.FARM.NODES")};
    char *script = slurm_batch_script(config, &spec, err);
    free(args), free(configs), free(found), free(cwd), free(selfsup), free(dir);
    return script;
}

/* ---- submitting ---------------------------------------------------------------------------------- */

static char *write_script(const char *log_folder, const char *name, const char *script)
{
    char stamp[32];
    time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
    char *base = xasprintf("selfsup-%s-%s.sbatch", name, stamp);
    for (char *c = base; *c; c++) /* a job name is free text; a file name is not */
        *c = *c == '/' || *c == ' ' ? '_' : *c;
    char *path = path_join(log_folder, base), *err = NULL;
    free(base);
    if (atomic_file_write_whole(path, script, strlen(script), &err) != 0) {
        log_error("%s", err);
        free(err);
        free(path);
        return NULL;
    }
    return path;
}

/* `sbatch --parsable SCRIPT`: the job id it prints ("123" or "123;cluster"), NULL if it
 * failed (its own message is on stderr). */
static char *sbatch(const char *script)
{
    int fds[2];
    if (pipe(fds) != 0)
        return NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]), close(fds[1]);
        execlp("sbatch", "sbatch", "--parsable", script, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[256] = "";
    ssize_t n = pid > 0 ? read(fds[0], line, sizeof line - 1) : -1;
    close(fds[0]);
    int st = 0;
    if (pid > 0)
        waitpid(pid, &st, 0);
    if (pid < 0 || n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        log_error("sbatch %s %s (is this a Slurm cluster's login node?); the script is kept", script,
                  WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "was not found" : "failed");
        return NULL;
    }
    line[n] = '\0';
    line[strcspn(line, ";\n")] = '\0';
    return xstrdup(line);
}

static int submit(const cfg_node *config, const char *log_folder, const char *run_dir, const char *script)
{
    char *path = write_script(log_folder, cfg_str(config, "SLURM.NAME"), script);
    char *job = path ? sbatch(path) : NULL;
    if (job) {
        printf("submitted batch job %s (%s)\n", job, path);
        printf("run directories: %s/%s/node*; follow node 0 with: selfsup status %s/%s/node0\n", run_dir, job, run_dir,
               job);
    }
    int status = job ? 0 : 1;
    free(job);
    free(path);
    return status;
}

int cmd_slurm(int argc, char **argv)
{
    slurm_args s = {0};
    int status = parse_slurm_args(argc, argv, &s);
    char *file = NULL, *log_folder = NULL, *run_dir = NULL, *script = NULL, *err = NULL;
    cfg_node *root = status < 0 ? checked_config(&s, &file) : NULL;
    const cfg_node *config = root ? cfg_map_get(root, "config") : NULL;
    if (status < 0 && !root)
        status = EXIT_USAGE;
    if (config && (log_folder = absolute(cfg_str(config, "SLURM.LOG_FOLDER"), !s.dry_run)) &&
        (run_dir = absolute(s.run_dir ? s.run_dir : log_folder, !s.dry_run))) {
        script = script_for(config, &s, file, log_folder, run_dir, &err);
        if (!script)
            log_error("%s", err), status = EXIT_USAGE;
        else if (s.dry_run)
            fputs(script, stdout), status = 0;
        else
            status = submit(config, log_folder, run_dir, script);
    } else if (config) {
        status = 1;
    }
    free(script), free(err), free(run_dir), free(log_folder), free(file);
    cfg_free(root);
    free_slurm_args(&s);
    return status;
}
