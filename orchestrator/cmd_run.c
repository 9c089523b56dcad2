/*
 * cmd_run.c — `selfsup run CONFIG [overrides...]`: compose and check the config, make the
 * run directory, build the topology (topology.h), create its rings, bind the control
 * socket, start and supervise the stages (supervise.h), and clean up whatever way it ends.
 *
 * The run directory (mode 0700) holds config.yaml (the composed config, as the stages see
 * it) and logs/ID.log for every stage; with a tcp control endpoint, keys/ID.key too while the
 * run lasts: a CURVE key of its own for each stage, allowed its own id only (auth.h). Nothing
 * in /dev/shm survives the run: the rings are created here and unlinked here, and segments
 * left by an earlier orchestrator that was killed outright are swept first.
 */
#include "cmd.h"

#include "atomic_file.h"
#include "augment/transforms.h"
#include "collate/collate.h"
#include "config.h"
#include "control.h"
#include "log.h"
#include "preflight.h"
#include "ring.h"
#include "slurm.h"
#include "supervise.h"
#include "timer.h"
#include "topology.h"
#include "train/checkpoint.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ipc:// paths must fit in sockaddr_un.sun_path (108 bytes with the NUL). */
#define IPC_PATH_MAX 100

typedef struct {
    const char *config_arg;
    char **overrides;
    int n_overrides;
    const char *run_dir;
    int node_rank;
    topo_role role;
    bool role_auto; /* --role auto: decided once the config is known (resolve_auto_role) */
    char *auto_overrides[2]; /* what --role auto adds to the overrides */
    int n_auto;
} run_args;

static void usage(FILE *out)
{
    fputs("usage: selfsup run CONFIG [overrides...] [--run-dir DIR] [--node-rank N]\n"
          "\n"
          "Run the pipeline the config describes (decode → augment × workers → collate → train\n"
          "or extract), each stage its own process, connected by shared-memory rings.\n"
          "\n"
          "  --run-dir DIR    where config.yaml and logs/ go (default: SELFSUP.RUN_DIR, else\n"
          "                   runs/DATE-TIME-NAME)\n"
          "  --node-rank N    this node's index in a multi-node run (default: $SLURM_NODEID or 0)\n"
          "  --role ROLE      all (default): the whole run on this machine; farm: decode and\n"
          "                   augment for the trainer nodes (SELFSUP.FARM.TRAINER_HOST), as farm\n"
          "                   host N of --node-rank N; train: collate and train on this host\n"
          "                   (trainer node N), fed by the farm hosts (see the README's \"Several\n"
          "                   machines\"); auto: in a Slurm job with SELFSUP.FARM.NODES farm nodes,\n"
          "                   train on the job's first NUM_NODES nodes and farm on the others (as\n"
          "                   `selfsup slurm` does), else all\n"
          "\n"
          "On a terminal a progress line shows each stage's throughput and the ring fill.\n"
          "^C stops every stage cleanly (the trainer finishes its step); a second ^C kills them.\n",
          out);
}

/* topo_role's names, in its order */
static const char *const role_names[] = {"all", "farm", "train"};

static int parse_role(const char *name, run_args *a)
{
    a->role_auto = !strcmp(name, "auto");
    for (int i = 0; i < (int)ARRAY_LEN(role_names); i++)
        if (!strcmp(name, role_names[i])) {
            a->role = (topo_role)i;
            return 0;
        }
    if (a->role_auto)
        return 0;
    log_error("--role %s: expected all, farm, train or auto", name);
    return -1;
}

static int parse_run_args(int argc, char **argv, run_args *a)
{
    const char *slurm = getenv("SLURM_NODEID");
    a->node_rank = slurm ? atoi(slurm) : 0;
    a->overrides = xcalloc((size_t)argc + 1, sizeof *a->overrides);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--run-dir") || !strcmp(argv[i], "--node-rank") || !strcmp(argv[i], "--role")) {
            if (i + 1 >= argc) {
                log_error("%s needs a value", argv[i]);
                return EXIT_USAGE;
            }
            if (!strcmp(argv[i], "--role") && parse_role(argv[++i], a) != 0)
                return EXIT_USAGE;
            else if (!strcmp(argv[i], "--run-dir"))
                a->run_dir = argv[++i];
            else if (!strcmp(argv[i], "--node-rank"))
                a->node_rank = atoi(argv[++i]);
        } else if (argv[i][0] == '-') {
            log_error("unknown option '%s'; see selfsup run --help", argv[i]);
            return EXIT_USAGE;
        } else if (!a->config_arg && !strchr(argv[i], '=')) {
            a->config_arg = argv[i];
        } else {
            a->overrides[a->n_overrides++] = argv[i];
        }
    }
    if (!a->config_arg && a->n_overrides == 0) {
        usage(stderr);
        return EXIT_USAGE;
    }
    return -1;
}

static bool compose(cfg_t *cfg, const run_args *a, bool check_paths, char **file_out)
{
    cfg_options opt = {.check_paths = check_paths};
    char *dir = cfg_find_configs_dir();
    opt.configs_dir = dir;
    char *file = NULL;
    if (a->config_arg) {
        file = dir ? cfg_resolve_config_file(dir, a->config_arg) : NULL;
        if (!file)
            file = xstrdup(a->config_arg);
        char *abs = realpath(file, NULL);
        if (abs) {
            free(file);
            file = abs;
        }
    }
    cfg_err err;
    bool ok = cfg_compose(cfg, &opt, file, a->n_overrides, a->overrides, &err);
    if (dir) /* the stages compose the same config: they must find the same defaults */
        setenv("SELFSUP_CONFIGS", dir, 1);
    free(dir);
    if (!ok) {
        log_error("%s", err.msg);
        cfg_destroy(cfg);
        free(file);
        return false;
    }
    for (size_t i = 0; i < cfg->n_warnings; i++)
        log_warn("%s", cfg->warnings[i]);
    *file_out = file;
    return true;
}

static char *make_run_dir(const cfg_node *config, const run_args *a)
{
    const char *dir = a->run_dir ? a->run_dir : cfg_str(config, "SELFSUP.RUN_DIR");
    char *path;
    if (dir[0]) {
        path = xstrdup(dir);
    } else {
        char stamp[32];
        time_t now = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        const char *base = a->config_arg ? strrchr(a->config_arg, '/') : NULL;
        base = base ? base + 1 : (a->config_arg ? a->config_arg : "defaults");
        char *name = xstrndup(base, strcspn(base, "."));
        path = xasprintf("runs/%s-%s", stamp, name);
        free(name);
    }
    char *logs = path_join(path, "logs");
    char *err = NULL;
    if (make_dirs(path, 0700, &err) != 0 || make_dirs(logs, 0700, &err) != 0) {
        log_error("cannot make the run directory: %s", err);
        free(err);
        free(path);
        path = NULL;
    }
    free(logs);
    if (path) {
        char *abs = realpath(path, NULL);
        free(path);
        path = abs;
    }
    return path;
}

static int write_config(const cfg_t *cfg, const char *run_dir)
{
    char *path = path_join(run_dir, "config.yaml");
    char *yaml = cfg_to_yaml(cfg->root);
    char *err = NULL;
    int rc = atomic_file_write_whole(path, yaml, strlen(yaml), &err);
    if (rc != 0)
        log_error("%s", err);
    free(err);
    free(yaml);
    free(path);
    return rc;
}

/* The control endpoint, and the socket file to remove at the end (NULL for tcp). A deep run
 * directory gets its socket in a fresh private directory of /tmp: the path must stay short,
 * and the directory ours alone (control.c refuses one that others can enter). */
static char *control_endpoint(const cfg_node *config, const char *run_dir, char **socket_file)
{
    const char *ep = cfg_str(config, "SELFSUP.CONTROL.ENDPOINT");
    *socket_file = NULL;
    if (ep[0])
        return xstrdup(ep);
    char *sock = path_join(run_dir, "control.sock");
    if (strlen(sock) > IPC_PATH_MAX) {
        free(sock);
        char dir[] = "/tmp/selfsup-XXXXXX";
        if (!mkdtemp(dir)) {
            log_error("cannot make a directory for the control socket: mkdtemp %s: %s", dir, strerror(errno));
            return NULL;
        }
        sock = path_join(dir, "control.sock");
    }
    *socket_file = sock;
    return xasprintf("ipc://%s", sock);
}

/* Remove the control socket, and the directory made for it in /tmp. */
static void remove_socket(const char *socket_file, const char *run_dir)
{
    unlink(socket_file);
    char *dir = path_dirname(socket_file);
    if (strcmp(dir, run_dir) != 0)
        rmdir(dir);
    free(dir);
}

/* ---- keys for a tcp control endpoint ---------------------------------------------------------- */

/* Tell a stage where its key is, as a config override, the last word (quoted: any path). */
static void add_key_override(topo_stage *ts, const char *path)
{
    strbuf sb = {0};
    sb_puts(&sb, "config.SELFSUP.CONTROL.CLIENT_KEY_FILE='");
    for (const char *c = path; *c; c++) {
        if (*c == '\'' || *c == '\\')
            sb_putc(&sb, '\\');
        sb_putc(&sb, *c);
    }
    sb_putc(&sb, '\'');
    size_t n = 0;
    while (ts->argv[n])
        n++;
    ts->argv = xrealloc(ts->argv, (n + 2) * sizeof *ts->argv);
    ts->argv[n] = xstrdup(sb_str(&sb));
    ts->argv[n + 1] = NULL;
    sb_free(&sb);
}

/* The stages this orchestrator starts get keys of their own: a fresh keypair each in
 * RUN_DIR/keys/ID.key (0600, in a 0700 directory), allowed their own id only. */
static int give_stage_keys(topology *t, const char *run_dir, const auth_keys *server, auth_allow *allow, char **err)
{
    char *dir = path_join(run_dir, "keys");
    int rc = make_dirs(dir, 0700, err);
    for (int i = 0; rc == 0 && i < t->n_stages; i++) {
        auth_keys k;
        char *name = xasprintf("%s.key", t->stages[i].id), *path = path_join(dir, name);
        rc = auth_new_keys(&k, server->public_key, err);
        if (rc == 0)
            rc = auth_write_keys(path, &k, err);
        if (rc == 0)
            rc = auth_allow_add(allow, k.public_key, t->stages[i].id, t->stages[i].id, err);
        if (rc == 0)
            add_key_override(&t->stages[i], path);
        auth_wipe(&k);
        free(name);
        free(path);
    }
    free(dir);
    return rc;
}

/* The stages' keys are of no use once the run is over: remove them. */
static void remove_stage_keys(const topology *t, const char *run_dir)
{
    char *dir = path_join(run_dir, "keys");
    for (int i = 0; i < t->n_stages; i++) {
        char *name = xasprintf("%s.key", t->stages[i].id), *path = path_join(dir, name);
        unlink(path);
        free(name);
        free(path);
    }
    rmdir(dir);
    free(dir);
}

/* A tcp control endpoint: the configured key directory (for stages on other nodes) or a fresh
 * keypair, and the keys of the stages started here on the allow-list. */
static ctl_server *bind_tcp(const char *endpoint, const cfg_node *config, const char *run_dir, topology *t,
                            char **err)
{
    const char *dir = cfg_str(config, "SELFSUP.CONTROL.SERVER_KEYS_DIR");
    auth_keys server;
    auth_allow allow = {0};
    int rc = *dir ? auth_load_server_dir(dir, &server, &allow, err) : auth_new_keys(&server, NULL, err);
    int others = allow.n;
    if (rc == 0)
        rc = give_stage_keys(t, run_dir, &server, &allow, err);
    ctl_server *ctl = rc == 0 ? ctl_bind_keys(endpoint, &server, &allow, err) : NULL;
    if (ctl)
        log_info("control endpoint %s: CURVE; admits the %d stages started here%s", ctl_server_endpoint(ctl),
                 t->n_stages, others ? " and the clients of SELFSUP.CONTROL.SERVER_KEYS_DIR" : " only");
    auth_wipe(&server);
    auth_allow_free(&allow);
    return ctl;
}

/* A configured key directory is checked before anything starts: a bad one is a config error. */
static bool check_control_keys(const cfg_node *config)
{
    const char *dir = cfg_str(config, "SELFSUP.CONTROL.SERVER_KEYS_DIR");
    if (!*dir || strncmp(cfg_str(config, "SELFSUP.CONTROL.ENDPOINT"), "tcp://", 6))
        return true;
    auth_keys k;
    auth_allow a = {0};
    char *err = NULL;
    int rc = auth_load_server_dir(dir, &k, &a, &err);
    auth_wipe(&k);
    auth_allow_free(&a);
    if (rc < 0)
        log_error("config.SELFSUP.CONTROL.SERVER_KEYS_DIR: %s", err);
    free(err);
    return rc == 0;
}

static ring **create_rings(const topology *t)
{
    ring **rings = xcalloc((size_t)t->n_rings + 1, sizeof *rings);
    for (int i = 0; i < t->n_rings; i++) {
        char *err = NULL;
        rings[i] = ring_create(t->rings[i].name, &t->rings[i].geo, RING_OBSERVER, &err);
        if (!rings[i]) {
            log_error("cannot create the ring %s: %s", t->rings[i].label, err);
            free(err);
            for (int k = 0; k < i; k++)
                ring_close(rings[k]);
            free(rings);
            return NULL;
        }
    }
    return rings;
}

static void destroy_rings(const topology *t, ring **rings)
{
    for (int i = 0; rings && i < t->n_rings; i++)
        ring_close(rings[i]);
    for (int i = 0; i < t->n_rings; i++)
        ring_unlink(t->rings[i].name); /* whatever a stage left behind */
    free(rings);
}

/* Bind the control socket: the configured endpoint, else ipc in the run directory. The real
 * endpoint (a tcp port 0 becomes the port the kernel chose) goes to the stages. */
static ctl_server *bind_control(const cfg_node *config, const char *run_dir, topology *t, char **socket_file)
{
    char *endpoint = control_endpoint(config, run_dir, socket_file);
    if (!endpoint)
        return NULL;
    char *msg = NULL;
    ctl_server *ctl = strncmp(endpoint, "tcp://", 6) ? ctl_bind(endpoint, NULL, &msg)
                                                      : bind_tcp(endpoint, config, run_dir, t, &msg);
    if (!ctl)
        log_error("cannot open the control endpoint %s: %s", endpoint, msg);
    free(msg);
    free(endpoint);
    return ctl;
}

/* Everything after the topology is known to be buildable: run directory, control socket,
 * rings, the stages themselves. */
static int launch(const cfg_t *cfg, topology *t, const run_args *a)
{
    const cfg_node *config = cfg_map_get(cfg->root, "config");
    char *socket_file = NULL;
    ctl_server *ctl = NULL;
    ring **rings = NULL;
    int status = EXIT_RUNTIME;
    char *run_dir = make_run_dir(config, a);
    if (run_dir && write_config(cfg, run_dir) == 0 && (ctl = bind_control(config, run_dir, t, &socket_file))) {
        topology_set_control(t, ctl_server_endpoint(ctl));
        ring_sweep_stale();
        rings = create_rings(t);
    }
    if (rings) {
        log_info("run directory %s: %d stages, %d rings", run_dir, t->n_stages, t->n_rings);
        double t0 = now_seconds();
        supervise_options sopt = {.run_dir = run_dir, .rings = rings, .role = role_names[a->role],
                                  .node_rank = a->node_rank,
                                  .heartbeat_timeout_s = cfg_float(config, "SELFSUP.CONTROL.HEARTBEAT_TIMEOUT_S")};
        status = supervise(t, ctl, &sopt);
        if (status == 0)
            log_info("run finished in %.1f s; logs in %s/logs", now_seconds() - t0, run_dir);
        destroy_rings(t, rings);
    }
    ctl_server_close(ctl);
    if (socket_file)
        remove_socket(socket_file, run_dir);
    if (run_dir)
        remove_stage_keys(t, run_dir);
    free(socket_file);
    free(run_dir);
    return status;
}

/* What the data stages would refuse in their prepare step (transform lists, collators),
 * refused here first, so a typo stops the run before any process starts. */
static bool check_data_stages(const cfg_node *config, const char *engine)
{
    /* VISSL reads DATA.TEST for TEST_MODEL's test phases (TEST_MODEL is True by default) */
    const cfg_node *test_sources = cfg_get(config, "DATA.TEST.DATA_SOURCES"),
                   *custom_train = cfg_path(config, "SELFSUP.STAGES.train");
    bool our_trainer = !custom_train || custom_train->kind != CFG_STR || !custom_train->s[0];
    if (!strcmp(engine, "train") && our_trainer && (cfg_bool(config, "TEST_MODEL") || cfg_bool(config, "TEST_ONLY")) &&
        (!test_sources || test_sources->kind != CFG_LIST || test_sources->len == 0)) {
        log_error("config.TEST_MODEL is True (VISSL's default) but config.DATA.TEST has no "
                  "DATA_SOURCES to test on: set config.TEST_MODEL=False, or describe DATA.TEST");
        return false;
    }
    static const char *const splits[] = {"TRAIN", "TEST"};
    for (int i = 0; i < 2; i++) {
        char key[64], why[256];
        snprintf(key, sizeof key, "config.DATA.%s.TRANSFORMS", splits[i]);
        cfg_err err;
        aug_pipeline *p = aug_pipeline_build(cfg_get(config, key + strlen("config.")), key, &err);
        if (!p) {
            log_error("%s", err.msg);
            return false;
        }
        aug_pipeline_free(p);
        snprintf(key, sizeof key, "DATA.%s.COLLATE_FUNCTION", splits[i]);
        const char *name = cfg_str(config, key);
        collate_kind kind;
        if (name && collate_from_name(name, &kind, why, sizeof why) != 0) {
            log_error("config.%s: %s", key, why);
            return false;
        }
        snprintf(key, sizeof key, "DATA.%s.COLLATE_FUNCTION_PARAMS", splits[i]);
        collate_options copt = {0};
        if (name && collate_read_params(kind, name, cfg_get(config, key), &copt, why, sizeof why) != 0) {
            log_error("config.%s: %s", key, why);
            return false;
        }
    }
    return true;
}

/* With AUTO_RESUME and a checkpoint in CHECKPOINT.DIR, training goes on where it stopped: the
 * data stages start at that batch (the trainer loads the rest). Returns false when the
 * checkpoint says the run is already complete (nothing to start), or cannot be read. */
static bool resume_point(const cfg_node *config, const char *engine, topo_options *topt, int *status)
{
    /* TEST_ONLY trains nothing: it tests the checkpoint's weights, whatever epoch it is at */
    if (strcmp(engine, "train") || !cfg_bool(config, "CHECKPOINT.AUTO_RESUME") || cfg_bool(config, "TEST_ONLY"))
        return true;
    ckpt_state cs;
    char *err = NULL;
    int rc = ckpt_resume_point(cfg_str(config, "CHECKPOINT.DIR"), &cs, &err);
    if (rc < 0) {
        log_error("cannot resume: %s", err);
        free(err);
        *status = EXIT_USAGE;
        return false;
    }
    if (rc == 0)
        return true;
    if (cs.next_epoch >= cfg_int(config, "OPTIMIZER.num_epochs")) {
        log_info("%s/checkpoint.torch is the final checkpoint (%lld epochs): the run is complete",
                 cfg_str(config, "CHECKPOINT.DIR"), (long long)cs.next_epoch);
        *status = 0;
        return false;
    }
    log_info("resuming from %s/checkpoint.torch: epoch %lld, batch %lld", cfg_str(config, "CHECKPOINT.DIR"),
             (long long)cs.next_epoch, (long long)cs.next_batch);
    topt->resume_epoch = (long)cs.next_epoch;
    topt->resume_batch = (long)cs.next_batch;
    /* a phase checkpoint is resumed at the phase after it: its epoch's test phase, if any */
    topt->resume_tests_from = (long)cs.next_epoch - (!strcmp(cs.kind, "phase") ? 1 : 0);
    return true;
}

/* Whether two of the trainer nodes' ports meet: rank r's crops on DATA_PORT + 2r, its leases on
 * LEASE_PORT + 2r (topology.h). */
static bool farm_ports_meet(const cfg_node *config)
{
    int64_t data = cfg_int(config, "SELFSUP.FARM.DATA_PORT"), lease = cfg_int(config, "SELFSUP.FARM.LEASE_PORT");
    int64_t world = cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE") * cfg_int(config, "DISTRIBUTED.NUM_NODES");
    int64_t gap = lease > data ? lease - data : data - lease;
    return gap % 2 == 0 && gap < 2 * world;
}

/* SELFSUP.FARM.TRAINER_HOST: one address per trainer node, comma-separated, none empty. */
static bool farm_hosts_fit(const cfg_node *config)
{
    const char *hosts = cfg_str(config, "SELFSUP.FARM.TRAINER_HOST");
    int64_t n = 1;
    for (const char *c = hosts; *c; c++)
        n += *c == ',';
    return n == cfg_int(config, "DISTRIBUTED.NUM_NODES") && *hosts && !strstr(hosts, ",,") &&
           hosts[strlen(hosts) - 1] != ',' && hosts[0] != ',';
}

/* The decode farm (--role farm|train): what it does not do yet is refused before anything
 * starts, naming the key; its tcp endpoints need their keys (every tcp endpoint is CURVE). */
static bool check_farm(const cfg_node *config, const char *engine, topo_role role)
{
    if (role == TOPO_ALL)
        return true;
    const char *why = NULL, *key = NULL;
    if (strcmp(engine, "train"))
        key = "engine_name", why = "the decode farm feeds training runs (engine_name: train)";
    else if (role == TOPO_FARM && !farm_hosts_fit(config))
        key = "SELFSUP.FARM.TRAINER_HOST", why = "a farm host feeds every trainer node: TRAINER_HOST lists their "
                                                 "addresses in node order, comma-separated, one per "
                                                 "DISTRIBUTED.NUM_NODES";
    else if (farm_ports_meet(config))
        key = "SELFSUP.FARM.LEASE_PORT", why = "trainer rank r listens on DATA_PORT + 2r and LEASE_PORT + 2r: with "
                                               "these ports and NUM_NODES × NUM_PROC_PER_NODE ranks two would share one";
    else if (cfg_bool(config, "DATA.TRAIN.ENABLE_QUEUE_DATASET"))
        key = "DATA.TRAIN.ENABLE_QUEUE_DATASET", why = "the queue of earlier images depends on one decoder's order, "
                                                       "which a farm does not have";
    else if (role == TOPO_TRAIN && !*cfg_str(config, "SELFSUP.TRANSPORT.SERVER_KEYS_DIR"))
        key = "SELFSUP.TRANSPORT.SERVER_KEYS_DIR", why = "the trainer host's tcp endpoints need its key directory "
                                                         "(selfsup keygen DIR --clients NAME:farm.* ...)";
    else if (role == TOPO_FARM && !*cfg_str(config, "SELFSUP.TRANSPORT.CLIENT_KEY_FILE"))
        key = "SELFSUP.TRANSPORT.CLIENT_KEY_FILE", why = "a farm host needs its key file (DIR/NAME.key from the "
                                                         "trainer host's keygen)";
    if (why)
        log_error("--role %s: config.%s: %s", role == TOPO_FARM ? "farm" : "train", key, why);
    return !why;
}

/* Trainers on several nodes meet at DISTRIBUTED.RUN_ID over CURVE (shm/coll_net.h; GPUs get
 * NCCL's id there): the node rank, the rendezvous and this node's keys are checked before
 * anything starts. A Slurm submission (rendezvous_later) may leave RUN_ID auto: --role auto
 * sets it in the job. */
static bool check_nodes(const cfg_node *config, const char *engine, const run_args *a, bool rendezvous_later)
{
    int64_t nodes = cfg_int(config, "DISTRIBUTED.NUM_NODES"), procs = cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    if (nodes <= 1 || strcmp(engine, "train") || a->role == TOPO_FARM)
        return true;
    const char *key = NULL, *why = NULL;
    if (a->node_rank < 0 || a->node_rank >= nodes)
        key = "DISTRIBUTED.NUM_NODES", why = "--node-rank must be 0 to NUM_NODES - 1";
    else if (strcmp(cfg_str(config, "DISTRIBUTED.INIT_METHOD"), "tcp"))
        key = "DISTRIBUTED.INIT_METHOD", why = "trainers on several nodes meet at DISTRIBUTED.RUN_ID, node 0's "
                                               "HOST:PORT: INIT_METHOD must be tcp";
    else if (!strchr(cfg_str(config, "DISTRIBUTED.RUN_ID"), ':') &&
             !(rendezvous_later && !strcmp(cfg_str(config, "DISTRIBUTED.RUN_ID"), "auto")))
        key = "DISTRIBUTED.RUN_ID", why = "trainers on several nodes meet at node 0's HOST:PORT (under Slurm, "
                                          "--role auto sets it from the job)";
    else if (a->node_rank == 0 && !*cfg_str(config, "SELFSUP.TRANSPORT.SERVER_KEYS_DIR"))
        key = "SELFSUP.TRANSPORT.SERVER_KEYS_DIR", why = "rank 0 admits the other trainers at RUN_ID by their keys: "
                                                         "node 0 needs its key directory (selfsup keygen DIR "
                                                         "--clients 'NODE:world.*' ...)";
    else if ((a->node_rank > 0 || procs > 1) && !*cfg_str(config, "SELFSUP.TRANSPORT.CLIENT_KEY_FILE"))
        key = "SELFSUP.TRANSPORT.CLIENT_KEY_FILE", why = "this node's trainers connect to rank 0 at RUN_ID: they "
                                                         "need a client key file whose ids allow world.* (DIR/NODE.key "
                                                         "from node 0's keygen)";
    if (why)
        log_error("node %d of %lld: config.%s: %s", a->node_rank, (long long)nodes, key, why);
    return !why;
}

static int start(cfg_t *cfg, const run_args *a, const char *file, const char *forced_engine)
{
    const cfg_node *config = cfg_map_get(cfg->root, "config");
    char *bin_dir = exe_dir();
    topo_options topt = {.config_file = file, .overrides = a->overrides, .n_overrides = a->n_overrides,
                         .node_rank = a->node_rank, .bin_dir = bin_dir ? bin_dir : ".", .role = a->role};
    const cfg_node *engine = cfg_map_get(cfg->root, "engine_name");
    topology t;
    cfg_err err;
    int status = EXIT_USAGE; /* a stage that cannot be started is a config error: nothing starts */
    const char *engine_name = forced_engine ? forced_engine : engine && engine->kind == CFG_STR ? engine->s : "train";
    /* A farm host trains nothing: no model to check, no checkpoint to resume from. */
    bool farm_host = a->role == TOPO_FARM;
    if (!check_farm(config, engine_name, a->role) || !check_nodes(config, engine_name, a, false) ||
        !check_data_stages(config, engine_name) || !check_control_keys(config) ||
        (!farm_host && !preflight_engine(config, engine_name)) ||
        (!farm_host && !resume_point(config, engine_name, &topt, &status))) {
        free(bin_dir);
        return status;
    }
    if (topology_build(&t, config, engine_name, &topt, &err)) {
        status = launch(cfg, &t, a);
        topology_free(&t);
    } else {
        log_error("%s", err.msg);
    }
    free(bin_dir);
    return status;
}

/* ---- Slurm ----------------------------------------------------------------------------------- */

/* What --role auto found, the string `value` of SECTION.KEY: set in the composed config, and
 * said to every stage as an override (they compose the same config). */
static void add_auto_value(cfg_node *config, run_args *a, const char *section, const char *key, const char *value)
{
    cfg_map_set(cfg_get(config, section), key, cfg_new_str(value, "<slurm>", 0));
    char *override = xasprintf("config.%s.%s='%s'", section, key, value);
    a->auto_overrides[a->n_auto++] = override;
    a->overrides = xrealloc(a->overrides, (size_t)(a->n_overrides + 2) * sizeof *a->overrides);
    a->overrides[a->n_overrides++] = override;
    a->overrides[a->n_overrides] = NULL;
}

/* VISSL's Slurm launch: trainers on several nodes meet at the job's first node, port
 * SLURM.PORT_ID (unless DISTRIBUTED.RUN_ID names an address already). false after logging a
 * first node whose name cannot go into the override. */
static bool add_rendezvous(cfg_node *config, run_args *a, const slurm_job *job)
{
    if (cfg_int(config, "DISTRIBUTED.NUM_NODES") <= 1 || strcmp(cfg_str(config, "DISTRIBUTED.RUN_ID"), "auto"))
        return true;
    if (strpbrk(job->nodes.names[0], "'\\")) {
        log_error("--role auto: the first node's name %s cannot be a host name", job->nodes.names[0]);
        return false;
    }
    char *id = xasprintf("%s:%lld", job->nodes.names[0], (long long)cfg_int(config, "SLURM.PORT_ID"));
    add_auto_value(config, a, "DISTRIBUTED", "RUN_ID", id);
    log_info("--role auto: the trainers of Slurm job %s meet at %s (DISTRIBUTED.RUN_ID)", job->job_id, id);
    free(id);
    return true;
}

/* This node's part in a Slurm job with farm nodes: the first DISTRIBUTED.NUM_NODES train,
 * the next are farm hosts 0, 1, ..., and the trainer host is the job's first node. In a
 * heterogeneous job the trainer nodes are its first component. */
static bool split_job(cfg_node *config, const slurm_job *job, run_args *a)
{
    int64_t train = cfg_int(config, "DISTRIBUTED.NUM_NODES"), farm = cfg_int(config, "SELFSUP.FARM.NODES");
    if (job->nodes.n != (size_t)(train + farm)) {
        log_error("--role auto: Slurm job %s has %zu nodes, but DISTRIBUTED.NUM_NODES + SELFSUP.FARM.NODES = %lld",
                  job->job_id, job->nodes.n, (long long)(train + farm));
        return false;
    }
    if (job->first_component_nodes && job->first_component_nodes != (size_t)train) {
        log_error("--role auto: heterogeneous Slurm job %s has %zu nodes in its first component (the trainer "
                  "nodes), but DISTRIBUTED.NUM_NODES = %lld",
                  job->job_id, job->first_component_nodes, (long long)train);
        return false;
    }
    for (int64_t k = 0; k < train; k++)
        if (strpbrk(job->nodes.names[k], "'\\,")) {
            log_error("--role auto: the trainer node's name %s cannot be a host name", job->nodes.names[k]);
            return false;
        }
    a->role = job->node_rank < train ? TOPO_TRAIN : TOPO_FARM;
    a->node_rank = a->role == TOPO_FARM ? job->node_rank - (int)train : job->node_rank;
    strbuf hosts = {0};
    for (int64_t k = 0; k < train; k++)
        sb_printf(&hosts, "%s%s", k ? "," : "", job->nodes.names[k]);
    add_auto_value(config, a, "SELFSUP.FARM", "TRAINER_HOST", sb_str(&hosts));
    log_info("--role auto: node %s of Slurm job %s is %s %d; the trainer node%s %s",
             job->nodes.names[job->node_rank], job->job_id, a->role == TOPO_TRAIN ? "trainer node" : "farm host",
             a->node_rank, train > 1 ? "s are" : " is", sb_str(&hosts));
    sb_free(&hosts);
    return true;
}

/* --role auto, as `selfsup slurm`'s batch script runs: in a Slurm job with SELFSUP.FARM.NODES
 * farm nodes, split_job decides; elsewhere, or without farm nodes, all (the node rank from
 * SLURM_NODEID). false after logging why not. */
static bool resolve_auto_role(cfg_node *config, run_args *a)
{
    slurm_job job;
    char *err = NULL;
    int in_job = slurm_job_read(&job, &err);
    bool ok = in_job >= 0;
    a->role = TOPO_ALL;
    if (in_job < 0)
        log_error("--role auto: %s", err);
    else if (in_job && cfg_int(config, "SELFSUP.FARM.NODES") > 0)
        ok = split_job(config, &job, a);
    else if (in_job)
        a->node_rank = job.node_rank;
    if (ok && in_job > 0)
        ok = add_rendezvous(config, a, &job);
    if (in_job > 0)
        slurm_job_free(&job);
    free(err);
    return ok;
}

/* Compose, and for --role auto find this node's part. */
static bool compose_run(cfg_t *cfg, run_args *a, bool check_paths, char **file)
{
    if (!compose(cfg, a, check_paths, file))
        return false;
    if (!a->role_auto || resolve_auto_role(cfg_map_get(cfg->root, "config"), a))
        return true;
    cfg_destroy(cfg);
    free(*file);
    *file = NULL;
    return false;
}

static void free_run_args(run_args *a)
{
    free(a->overrides);
    for (int i = 0; i < a->n_auto; i++)
        free(a->auto_overrides[i]);
}

int cmd_run(int argc, char **argv) { return cmd_run_engine(argc, argv, NULL); }

int cmd_run_engine(int argc, char **argv, const char *engine)
{
    log_init("selfsup");
    run_args a = {0};
    int status = parse_run_args(argc, argv, &a);
    if (status >= 0) {
        free(a.overrides);
        return status;
    }
    cfg_t cfg;
    char *file = NULL;
    status = EXIT_USAGE;
    if (compose_run(&cfg, &a, true, &file)) {
        /* VISSL's SLURM.USE_SLURM: submit the run (inside the job it runs) */
        bool submit = !engine && cfg_bool(cfg_map_get(cfg.root, "config"), "SLURM.USE_SLURM") && !getenv("SLURM_JOB_ID");
        status = submit ? cmd_slurm(argc, argv) : start(&cfg, &a, file, engine);
        cfg_destroy(&cfg);
    }
    free(file);
    free_run_args(&a);
    return status;
}

/* The engine's checks of a run for other machines: their GPUs need not be here, so the model
 * is checked on the cpu (in fp32: AMP is the GPU's), which builds and loads it alike. */
static bool preflight_on_cpu(const cfg_node *config, const char *engine)
{
    cfg_node *cpu = cfg_copy(config);
    cfg_map_set(cfg_get(cpu, "MACHINE"), "DEVICE", cfg_new_str("cpu", "<preflight>", 0));
    cfg_node *amp = cfg_path(cpu, "MODEL.AMP_PARAMS");
    if (amp && amp->kind == CFG_MAP)
        cfg_map_set(amp, "USE_AMP", cfg_new_bool(false, "<preflight>", 0));
    bool ok = preflight_engine(cpu, engine);
    cfg_free(cpu);
    return ok;
}

cfg_node *cmd_run_config(int argc, char **argv, char **file_out)
{
    run_args a = {0};
    cfg_t cfg;
    cfg_node *root = NULL;
    *file_out = NULL;
    if (parse_run_args(argc, argv, &a) < 0 && compose(&cfg, &a, false, file_out)) {
        cfg_node *config = cfg_map_get(cfg.root, "config");
        const char *engine = cfg_str(cfg.root, "engine_name");
        if (check_farm(config, engine, a.role) && check_nodes(config, engine, &a, true) &&
            check_data_stages(config, engine) && check_control_keys(config) &&
            (a.role == TOPO_FARM || preflight_on_cpu(config, engine)))
            root = cfg_copy(cfg.root);
        cfg_destroy(&cfg);
    }
    if (!root) {
        free(*file_out);
        *file_out = NULL;
    }
    free_run_args(&a);
    return root;
}

bool cmd_run_check(int argc, char **argv, void (*edit)(cfg_node *config, const void *ctx), const void *ctx)
{
    run_args a = {0};
    cfg_t cfg;
    char *file = NULL;
    bool ok = parse_run_args(argc, argv, &a) < 0 && compose(&cfg, &a, false, &file);
    if (ok) {
        cfg_node *config = cfg_map_get(cfg.root, "config");
        edit(config, ctx);
        ok = preflight_engine(config, cfg_str(cfg.root, "engine_name"));
        cfg_destroy(&cfg);
    }
    free(file);
    free(a.overrides);
    return ok;
}
