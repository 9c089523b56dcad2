/*
 * test_farm.c — the decode farm end to end, on one machine over loopback tcp (no network
 * namespaces: the test runs unprivileged): `selfsup run --role train` (collate, which deals
 * the leases, and a trainer) fed by `selfsup run --role farm` hosts (decode + augment), each
 * host its own orchestrator in its own session, so that "losing a host" is kill -9 of every
 * process it has.
 *
 * What a user relies on: the batches the trainer sees are byte-identical to a one-machine
 * run's (`--role all`), with two hosts, with a host started late, and with a host killed in
 * mid-epoch (its leases are dealt again and logged); a host whose key is not on the trainer's
 * list gets nothing in and takes no lease; a host whose dataset differs is refused; when every
 * host is lost the trainer stops, keeps a checkpoint, and the run names the cause; when the
 * trainer host dies its farm hosts stop and say so; and what the farm does not do yet is
 * refused before anything starts, naming the key.
 */
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT 1200
#define BATCH 16

static char *g_dir;  /* scratch: the dataset, keys, configs, outputs */
static char *g_cfg;  /* the farm's config */
static int g_data_port, g_lease_port;

static void run_ok(const char *cmd)
{
    char *out = NULL;
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 0, "`%s` exited %d:\n%s", cmd, rc, out);
    free(out);
}

static void write_config(void)
{
    g_cfg = xasprintf("%s/farm.yaml", g_dir);
    FILE *f = fopen(g_cfg, "w");
    cr_assert(f);
    fprintf(f,
            "# @package _global_\n"
            "config:\n"
            "  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 1}\n"
            "  TEST_MODEL: False\n"
            "  LOG_FREQUENCY: 1\n"
            "  OPTIMIZER: {num_epochs: 2, param_schedulers: {lr: {name: constant, value: 0.1}}}\n"
            "  SELFSUP:\n"
            "    FARM: {TRAINER_HOST: 127.0.0.1, BIND_ADDRESS: 127.0.0.1, DATA_PORT: %d, LEASE_PORT: %d,\n"
            "           HOST_TIMEOUT_S: 1, WORKERS: 1}\n"
            "  DATA:\n"
            "    NUM_DATALOADER_WORKERS: 1\n"
            "    TRAIN:\n"
            "      DATA_SOURCES: [disk_folder]\n"
            "      LABEL_SOURCES: [disk_folder]\n"
            "      DATASET_NAMES: [fashion_mnist_folder]\n"
            "      DATA_PATHS: [\"%s/fm/disk_folder/train\"]\n"
            "      LABEL_PATHS: [\"%s/fm/disk_folder/train\"]\n"
            "      BATCHSIZE_PER_REPLICA: %d\n"
            "      COLLATE_FUNCTION: simclr_collator\n"
            "      TRANSFORMS:\n"
            "        - {name: ImgReplicatePil, num_times: 2}\n"
            "        - {name: RandomResizedCrop, size: 64, scale: [0.2, 1.0]}\n"
            "        - {name: RandomHorizontalFlip}\n"
            "        - {name: ImgPilColorDistortion, strength: 0.5}\n"
            "        - {name: ToTensor}\n"
            "        - {name: Normalize, mean: [0.286, 0.286, 0.286], std: [0.353, 0.353, 0.353]}\n"
            "  MACHINE: {DEVICE: cpu}\n"
            "  MODEL:\n"
            "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}\n"
            "    HEAD: {PARAMS: [[mlp, {dims: [512, 16]}]]}\n"
            "  LOSS: {name: simclr_info_nce_loss, simclr_info_nce_loss: {buffer_params: {embedding_dim: 16}}}\n",
            g_data_port, g_lease_port, g_dir, g_dir, BATCH);
    fclose(f);
}

static void setup(void)
{
    g_dir = test_make_tmpdir();
    g_data_port = test_free_port();
    do
        g_lease_port = test_free_port();
    while (g_lease_port == g_data_port);
    char *selfsup = test_build_path("selfsup");
    char *cmd = xasprintf("%s dataset fashion-mnist %s/fm --limit %d && cd %s && %s keygen keys --clients "
                          "'hostA:farm.*' 'hostB:farm.*' && %s keygen other --clients 'stranger:farm.*'",
                          selfsup, g_dir, LIMIT, g_dir, selfsup, selfsup);
    run_ok(cmd);
    free(cmd), free(selfsup);
    write_config();
}

static void teardown(void)
{
    test_rm_rf(g_dir);
    free(g_dir);
    free(g_cfg);
}

TestSuite(farm, .init = setup, .fini = teardown, .timeout = 240);

/* ---- hosts: each a `selfsup run` in a session of its own ------------------------------------- */

/* The network namespace of the trainer host [0] and of farm host k [1 + k] (the netns tests);
 * NULL: this machine's. */
static char *g_netns[3];

/* `selfsup run g_cfg ARGS`, in the background (in network namespace `ns` unless NULL), output
 * to DIR/LOG; returns its pid (its session). */
static pid_t spawn(const char *ns, const char *args, const char *log)
{
    char *selfsup = test_build_path("selfsup"), *in = ns ? xasprintf("ip netns exec %s ", ns) : xstrdup("");
    char *cmd = xasprintf("exec %s%s run %s %s", in, selfsup, g_cfg, args), *out = xasprintf("%s/%s", g_dir, log);
    free(in);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        setsid();
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1), dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(selfsup), free(cmd), free(out);
    return pid;
}

static pid_t trainer(const char *name, const char *stage, const char *extra)
{
    char *args = xasprintf("--role train --run-dir %s/%s config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=%s/keys "
                           "config.CHECKPOINT.DIR=%s/%s/ck '+config.SELFSUP.STAGES.train=%s' %s",
                           g_dir, name, g_dir, g_dir, name, stage, extra ? extra : "");
    char *log = xasprintf("%s.log", name);
    pid_t pid = spawn(g_netns[0], args, log);
    free(args), free(log);
    return pid;
}

static pid_t farm_host(int rank, const char *key, const char *extra)
{
    char *args = xasprintf("--role farm --node-rank %d --run-dir %s/farm%d config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s %s",
                           rank, g_dir, rank, key, extra ? extra : "");
    char *log = xasprintf("farm%d.log", rank);
    pid_t pid = spawn(g_netns[1 + rank], args, log);
    free(args), free(log);
    return pid;
}

static char *key_of(const char *name)
{
    return xasprintf("%s/keys/%s.key", g_dir, name);
}

/* kill -9 every process of session `sid`: a host lost, with all it ran. */
static void kill_session(pid_t sid)
{
    DIR *d = opendir("/proc");
    cr_assert(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *close_paren = strrchr(buf, ')');
        int pid, ppid, pgrp, session;
        char state;
        if (close_paren && sscanf(buf, "%d", &pid) == 1 &&
            sscanf(close_paren + 2, "%c %d %d %d", &state, &ppid, &pgrp, &session) == 4 && session == sid)
            kill(pid, SIGKILL);
    }
    closedir(d);
    waitpid(sid, NULL, 0);
}

static char *slurp_text(const char *rel)
{
    char *path = xasprintf("%s/%s", g_dir, rel);
    FILE *f = fopen(path, "r");
    free(path);
    if (!f)
        return xstrdup("");
    char *text = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&text, &cap, '\0', f);
    fclose(f);
    if (n < 0) {
        free(text);
        return xstrdup("");
    }
    return text;
}

/* Wait up to timeout_ms for `text` to appear in the file g_dir/rel. */
static bool wait_for_text(const char *rel, const char *text, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        char *all = slurp_text(rel);
        bool found = strstr(all, text) != NULL;
        free(all);
        if (found)
            return true;
        usleep(50 * 1000);
    }
    return false;
}

static bool same_file(const char *a, const char *b)
{
    char *pa = xasprintf("%s/%s", g_dir, a), *pb = xasprintf("%s/%s", g_dir, b);
    char *cmd = xasprintf("cmp -s '%s' '%s'", pa, pb);
    bool same = system(cmd) == 0;
    free(pa), free(pb), free(cmd);
    return same;
}

/* The one-machine run's batches, the reference. */
static void one_machine(const char *out)
{
    char *selfsup = test_build_path("selfsup");
    char *cmd = xasprintf("%s run %s --run-dir %s/all '+config.SELFSUP.STAGES.train=selfsup-sink --save %s/%s'",
                          selfsup, g_cfg, g_dir, g_dir, out);
    run_ok(cmd);
    free(selfsup), free(cmd);
}

static void expect_exit(pid_t pid, int want, const char *log)
{
    int rc = test_wait_child(pid, 120 * 1000);
    char *text = slurp_text(log);
    cr_assert_eq(rc, want, "%s: exit %d, not %d:\n%s", log, rc, want, text);
    free(text);
}

static void expect_in_log(const char *rel, const char *text)
{
    char *all = slurp_text(rel);
    size_t n = strlen(all);
    cr_assert(strstr(all, text), "%s does not say \"%s\"; it ends:\n%s", rel, text, all + (n > 3000 ? n - 3000 : 0));
    free(all);
}

/* `selfsup status g_dir/run`, into g_dir/OUT (the log of what it printed). */
static void status_of(const char *run, const char *out)
{
    char *selfsup = test_build_path("selfsup");
    char *cmd = xasprintf("%s status %s/%s > %s/%s 2>&1", selfsup, g_dir, run, g_dir, out);
    cr_assert_eq(system(cmd), 0, "`%s` failed", cmd);
    free(selfsup), free(cmd);
}

/* The line of the status print that starts (after its indent) with `id`. */
static char *status_line(const char *out, const char *id)
{
    char *all = slurp_text(out), *want = xasprintf("\n  %s ", id), *at = strstr(all, want);
    cr_assert(at, "%s has no line for %s:\n%s", out, id, all);
    char *line = xstrndup(at + 1, strcspn(at + 1, "\n"));
    free(all), free(want);
    return line;
}

/* ---- the tests ------------------------------------------------------------------------------ */

Test(farm, two_farm_hosts_give_the_batches_of_one_machine)
{
    one_machine("one.rec");
    char *sink = xasprintf("selfsup-sink --save %s/two.rec", g_dir), *ka = key_of("hostA"), *kb = key_of("hostB");
    pid_t t = trainer("t2", sink, NULL), a = farm_host(0, ka, NULL), b = farm_host(1, kb, NULL);
    expect_exit(t, 0, "t2.log");
    expect_exit(a, 0, "farm0.log");
    expect_exit(b, 0, "farm1.log");
    cr_assert(same_file("one.rec", "two.rec"), "two farm hosts gave other batches than one machine");
    expect_in_log("t2/logs/collate.0.log", "farm host farm.0 joined");
    expect_in_log("t2/logs/collate.0.log", "farm host farm.1 joined");
    free(sink), free(ka), free(kb);
}

/* Two trainers on the trainer host: a collate each (ports DATA_PORT + 2r, LEASE_PORT + 2r), and
 * on each farm host a chain for each, reading that rank's shard. */
Test(farm, two_farm_hosts_feed_two_trainers_with_the_batches_of_one_machine)
{
    char *selfsup = test_build_path("selfsup");
    char *cmd = xasprintf("%s run %s --run-dir %s/all2 config.DISTRIBUTED.NUM_PROC_PER_NODE=2 "
                          "'+config.SELFSUP.STAGES.train=\"selfsup-sink --save %s/one_r{rank}.rec\"'",
                          selfsup, g_cfg, g_dir, g_dir);
    run_ok(cmd);
    const char *two = "config.DISTRIBUTED.NUM_PROC_PER_NODE=2";
    char *sink = xasprintf("\"selfsup-sink --save %s/farm_r{rank}.rec\"", g_dir), *ka = key_of("hostA"),
         *kb = key_of("hostB");
    pid_t t = trainer("t22", sink, two), a = farm_host(0, ka, two), b = farm_host(1, kb, two);
    expect_exit(t, 0, "t22.log");
    expect_exit(a, 0, "farm0.log");
    expect_exit(b, 0, "farm1.log");
    cr_assert(same_file("one_r0.rec", "farm_r0.rec"), "rank 0's batches differ from one machine's");
    cr_assert(same_file("one_r1.rec", "farm_r1.rec"), "rank 1's batches differ from one machine's");
    expect_in_log("t22/logs/collate.1.log", "farm host farm.1 joined");
    free(sink), free(ka), free(kb), free(cmd), free(selfsup);
}

/* Two trainer nodes (one trainer each, on this machine: rank r at DATA_PORT + 2r), both fed by
 * each of two farm hosts, which send rank r's crops to the r-th TRAINER_HOST: each rank sees the
 * batches of one machine with two trainers. */
Test(farm, two_farm_hosts_feed_two_trainer_nodes_with_the_batches_of_one_machine)
{
    char *selfsup = test_build_path("selfsup");
    char *cmd = xasprintf("%s run %s --run-dir %s/all2 config.DISTRIBUTED.NUM_PROC_PER_NODE=2 "
                          "'+config.SELFSUP.STAGES.train=\"selfsup-sink --save %s/one_r{rank}.rec\"'",
                          selfsup, g_cfg, g_dir, g_dir);
    run_ok(cmd);
    char *ka = key_of("hostA"), *kb = key_of("hostB");
    char *nodes = xasprintf("config.DISTRIBUTED.NUM_NODES=2 config.DISTRIBUTED.RUN_ID=127.0.0.1:%d "
                            "'config.SELFSUP.FARM.TRAINER_HOST=\"127.0.0.1,127.0.0.1\"'",
                            test_free_port());
    char *sink = xasprintf("\"selfsup-sink --save %s/nodes_r{rank}.rec\"", g_dir);
    char *n1 = xasprintf("%s --node-rank 1 config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s", nodes, kb);
    pid_t t0 = trainer("n0", sink, nodes), t1 = trainer("n1", sink, n1), a = farm_host(0, ka, nodes),
          b = farm_host(1, kb, nodes);
    expect_exit(t0, 0, "n0.log");
    expect_exit(t1, 0, "n1.log");
    expect_exit(a, 0, "farm0.log");
    expect_exit(b, 0, "farm1.log");
    cr_assert(same_file("one_r0.rec", "nodes_r0.rec"), "rank 0's batches (node 0) differ from one machine's");
    cr_assert(same_file("one_r1.rec", "nodes_r1.rec"), "rank 1's batches (node 1) differ from one machine's");
    expect_in_log("n1/logs/collate.0.log", "farm host farm.1 joined");
    /* a farm host told fewer trainer nodes than NUM_NODES is refused before it starts */
    char *one_host = xasprintf("%s config.SELFSUP.FARM.TRAINER_HOST=127.0.0.1", nodes);
    pid_t refused = farm_host(0, ka, one_host);
    expect_exit(refused, 2, "farm0.log");
    expect_in_log("farm0.log", "config.SELFSUP.FARM.TRAINER_HOST: a farm host feeds every trainer node");
    free(one_host), free(n1), free(sink), free(nodes), free(ka), free(kb), free(cmd), free(selfsup);
}

Test(farm, a_host_killed_in_mid_epoch_loses_no_sample_and_a_late_host_takes_its_leases)
{
    one_machine("one.rec");
    /* host A is slow (50 samples a second: a lease takes it 1.3 s), so it is killed in mid-lease */
    char *sink = xasprintf("selfsup-sink --save %s/kill.rec", g_dir), *ka = key_of("hostA"), *kb = key_of("hostB");
    pid_t t = trainer("tk", sink, NULL),
          a = farm_host(0, ka, "'+config.SELFSUP.STAGES.augment=selfsup-augment --pace 20'");
    cr_assert(wait_for_text("tk/logs/collate.0.log", "farm host farm.0 joined", 30000), "host A never joined");
    usleep(800 * 1000);
    pid_t b = farm_host(1, kb, NULL); /* started late */
    cr_assert(wait_for_text("tk/logs/collate.0.log", "farm host farm.1 joined", 30000), "the late host never joined");
    /* selfsup status, while it runs, shows both hosts at work */
    cr_assert(wait_for_text("tk/status.json", "\"farm.1\"", 10000), "the status never showed the late host");
    status_of("tk", "status-running.txt");
    expect_in_log("status-running.txt", "running for");
    char *line = status_line("status-running.txt", "farm.1");
    cr_assert(strstr(line, " live "), "%s", line);
    free(line);
    usleep(500 * 1000);
    kill_session(a); /* host A and everything it ran, in mid-epoch */
    expect_exit(t, 0, "tk.log");
    expect_exit(b, 0, "farm1.log");
    expect_in_log("tk/logs/collate.0.log", "farm host farm.0 is lost");
    expect_in_log("tk/logs/collate.0.log", "farm host farm.0 lost lease");
    cr_assert(same_file("one.rec", "kill.rec"), "losing a host changed the batches");
    /* and once it ended: host A lost once, its leases dealt again, host B done */
    status_of("tk", "status-ended.txt");
    expect_in_log("status-ended.txt", "finished after");
    line = status_line("status-ended.txt", "farm.0");
    cr_assert(strstr(line, " lost ") && strstr(line, "(lost 1 time)"), "%s", line);
    free(line);
    line = status_line("status-ended.txt", "farm.1");
    cr_assert(strstr(line, " done "), "%s", line);
    free(line);
    char *all = slurp_text("status-ended.txt"), *again = strstr(all, "dealt, ");
    cr_assert(again && atoi(again + strlen("dealt, ")) >= 1, "no lease dealt again:\n%s", all);
    free(all);
    free(sink), free(ka), free(kb);
}

Test(farm, when_every_host_is_lost_the_trainer_stops_keeps_a_checkpoint_and_says_why)
{
    char *ka = key_of("hostA");
    pid_t t = trainer("tl", "selfsup-train", NULL), a = farm_host(0, ka, NULL);
    cr_assert(wait_for_text("tl/logs/train.0.log", "iter: 3;", 60000), "the trainer never trained");
    kill_session(a);
    expect_exit(t, 1, "tl.log");
    expect_in_log("tl.log", "no farm host is left");
    expect_in_log("tl/logs/train.0.log", "checkpoint");
    char *ck = xasprintf("%s/tl/ck/checkpoint.torch", g_dir);
    struct stat st;
    cr_assert_eq(stat(ck, &st), 0, "no checkpoint was kept in %s", ck);
    free(ck), free(ka);
}

Test(farm, a_host_whose_trainer_host_dies_stops_and_says_so)
{
    char *ka = key_of("hostA");
    pid_t t = trainer("tg", "selfsup-sink --pace 20", NULL), a = farm_host(0, ka, NULL);
    cr_assert(wait_for_text("tg/logs/collate.0.log", "farm host farm.0 joined", 30000));
    usleep(500 * 1000);
    kill_session(t);
    expect_exit(a, 1, "farm0.log");
    expect_in_log("farm0.log", "has not answered for");
    expect_in_log("farm0.log", "the trainer's side is gone");
    /* the trainer host's orchestrator died without a word: its status says so */
    status_of("tg", "status-lost.txt");
    expect_in_log("status-lost.txt", "lost for");
    expect_in_log("status-lost.txt", "the orchestrator is gone");
    /* the farm host's own run ended as failed, naming its stage */
    status_of("farm0", "status-farm.txt");
    expect_in_log("status-farm.txt", "failed after");
    expect_in_log("status-farm.txt", "failure: stage decode");
    free(ka);
}

/* A key made for another server, its server key set to ours: the handshake reaches the right
 * server, which does not know the key. */
static char *stranger_key(void)
{
    char *path = xasprintf("%s/stranger.key", g_dir);
    char *cmd = xasprintf("cd %s && { grep -v '^server' other/stranger.key; grep '^server' keys/hostA.key; } > "
                          "stranger.key && chmod 600 stranger.key",
                          g_dir);
    run_ok(cmd);
    free(cmd);
    return path;
}

Test(farm, a_host_whose_key_is_not_listed_gets_no_lease_and_sends_nothing)
{
    one_machine("one.rec");
    char *sink = xasprintf("selfsup-sink --pace 10 --save %s/k.rec", g_dir), *ks = stranger_key(),
         *ka = key_of("hostA");
    pid_t t = trainer("tx", sink, NULL), x = farm_host(1, ks, NULL);
    cr_assert(wait_for_text("tx/logs/collate.0.log", "refused", 30000), "the stranger's key was not refused");
    pid_t a = farm_host(0, ka, NULL);
    expect_exit(t, 0, "tx.log");
    expect_exit(a, 0, "farm0.log");
    kill_session(x); /* it waits for an answer it will never get */
    char *log = slurp_text("tx/logs/collate.0.log");
    cr_assert_null(strstr(log, "farm.1"), "the stranger took part:\n%s", log);
    cr_assert(same_file("one.rec", "k.rec"));
    free(log), free(sink), free(ks), free(ka);
}

/* Records that no lease covered (a writer of an earlier run, with a key still listed) are
 * dropped and logged; they neither stop the run nor enter a batch. */
Test(farm, samples_no_lease_covered_are_dropped)
{
    one_machine("one.rec");
    char *sink = xasprintf("selfsup-sink --save %s/stray.rec", g_dir), *ka = key_of("hostA");
    pid_t t = trainer("ts", sink, NULL);
    cr_assert(wait_for_text("ts/logs/collate.0.log", "dealing leases", 30000));
    char *produce = test_build_path("tests/selfsup-test-produce");
    char *cmd = xasprintf("%s --config %s config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s --count 40 --size 64 "
                          "--out 'tcp://127.0.0.1:%d?open'",
                          produce, g_cfg, ka, g_data_port);
    run_ok(cmd); /* before any host joined: nothing is dealt, so all 40 are strays */
    cr_assert(wait_for_text("ts/logs/collate.0.log", "no lease covered it", 30000), "the strays were not logged");
    pid_t a = farm_host(0, ka, NULL);
    expect_exit(t, 0, "ts.log");
    expect_exit(a, 0, "farm0.log");
    cr_assert(same_file("one.rec", "stray.rec"), "stray records changed the batches");
    free(cmd), free(produce), free(sink), free(ka);
}

Test(farm, a_host_whose_dataset_differs_is_refused)
{
    char *ka = key_of("hostA"), *kb = key_of("hostB");
    pid_t t = trainer("td", "selfsup-sink", NULL), a = farm_host(0, ka, NULL);
    cr_assert(wait_for_text("td/logs/collate.0.log", "farm host farm.0 joined", 30000));
    pid_t b = farm_host(1, kb, "config.DATA.TRAIN.DATA_LIMIT=1000");
    expect_exit(b, 1, "farm1.log");
    expect_in_log("farm1.log", "refused this host: its dataset gives 1000 samples an epoch, the farm's hosts 1200");
    expect_exit(t, 0, "td.log");
    expect_exit(a, 0, "farm0.log");
    free(ka), free(kb);
}

Test(farm, what_the_farm_cannot_do_is_refused_before_anything_starts)
{
    char *selfsup = test_build_path("selfsup");
    const struct {
        const char *args, *says;
    } cases[] = {
        {"--role train", "config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR"},
        {"--role farm", "config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE"},
        {"--role farm config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=x config.DISTRIBUTED.NUM_NODES=2 "
         "config.DISTRIBUTED.RUN_ID=localhost:5000",
         "config.SELFSUP.FARM.TRAINER_HOST: a farm host feeds every trainer node"},
        {"--role train config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=x config.DISTRIBUTED.NUM_PROC_PER_NODE=2 "
         "config.SELFSUP.FARM.DATA_PORT=6000 config.SELFSUP.FARM.LEASE_PORT=6002",
         "config.SELFSUP.FARM.LEASE_PORT: trainer rank r listens on DATA_PORT + 2r"},
        {"--role train config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=x config.DATA.TRAIN.ENABLE_QUEUE_DATASET=True",
         "config.DATA.TRAIN.ENABLE_QUEUE_DATASET"},
        {"--role sideways", "expected all, farm, train or auto"},
        {"--role train config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=x config.SELFSUP.FARM.HOST_TIMEOUT_S=0",
         "config.SELFSUP.FARM.HOST_TIMEOUT_S"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *cmd = xasprintf("%s run %s --run-dir %s/refused %s", selfsup, g_cfg, g_dir, cases[i].args), *out = NULL;
        int rc = test_run_within(cmd, 60, &out);
        cr_assert_eq(rc, 2, "`%s`: exit %d, not 2:\n%s", cmd, rc, out);
        cr_assert(strstr(out, cases[i].says), "`%s` does not name %s:\n%s", cmd, cases[i].says, out);
        free(cmd), free(out);
    }
    char *dir = xasprintf("%s/refused", g_dir);
    struct stat st;
    cr_assert_neq(stat(dir, &st), 0, "a refused run made its run directory");
    free(dir), free(selfsup);
}

/* ---- hosts in network namespaces ----------------------------------------------------------- */

/* Three network namespaces, the trainer host's and two farm hosts', joined by veth pairs to a
 * bridge in the trainer's: 10.200.N.1 (trainer), .2 and .3, N from the test's pid. Creating
 * them takes CAP_NET_ADMIN; without it the test is skipped, and says so. */
static char g_subnet[32];

/* (after the suite's setup, which made the scratch directory and the config) */
static void netns_setup(void)
{
    if (system("unshare -n true 2>/dev/null") != 0)
        cr_skip_test("network namespaces are not permitted here (the loopback tests stand in)");
    int id = getpid() % 250 + 1;
    snprintf(g_subnet, sizeof g_subnet, "10.200.%d", id);
    for (int i = 0; i < 3; i++)
        g_netns[i] = xasprintf("selfsup-%d-%c", (int)getpid(), i ? '0' + i - 1 : 't');
    char *cmd = xasprintf("set -e; for ns in %s %s %s; do ip netns add $ns; ip -n $ns link set lo up; done; "
                          "ip -n %s link add br0 type bridge; ip -n %s addr add %s.1/24 dev br0; ip -n %s link set br0 up; "
                          "for k in 0 1; do ns=selfsup-%d-$k; "
                          "ip link add name v$k netns %s type veth peer name eth0 netns $ns; "
                          "ip -n %s link set v$k master br0 up; ip -n $ns addr add %s.$((k + 2))/24 dev eth0; "
                          "ip -n $ns link set eth0 up; done",
                          g_netns[0], g_netns[1], g_netns[2], g_netns[0], g_netns[0], g_subnet, g_netns[0], (int)getpid(),
                          g_netns[0], g_netns[0], g_subnet);
    run_ok(cmd);
    free(cmd);
    /* every host's config: the trainer host listens on all its addresses, reached at the bridge's */
    char *edit = xasprintf("sed -i 's/TRAINER_HOST: 127.0.0.1, BIND_ADDRESS: 127.0.0.1/TRAINER_HOST: %s.1, "
                           "BIND_ADDRESS: \"*\"/' %s && grep -q 'TRAINER_HOST: %s.1' %s",
                           g_subnet, g_cfg, g_subnet, g_cfg);
    run_ok(edit);
    free(edit);
}

static void netns_teardown(void)
{
    for (int i = 0; i < 3; i++) {
        char *cmd = xasprintf("ip netns del %s 2>/dev/null", g_netns[i]);
        if (system(cmd) != 0) { /* it was never made: the test was skipped */
        }
        free(cmd), free(g_netns[i]);
        g_netns[i] = NULL;
    }
}

Test(farm, hosts_in_their_own_network_namespaces_give_the_batches_of_one_machine, .init = netns_setup,
     .fini = netns_teardown)
{
    one_machine("one.rec");
    char *sink = xasprintf("selfsup-sink --save %s/ns.rec", g_dir), *ka = key_of("hostA"), *kb = key_of("hostB");
    pid_t t = trainer("tn", sink, NULL), a = farm_host(0, ka, NULL), b = farm_host(1, kb, NULL);
    expect_exit(t, 0, "tn.log");
    expect_exit(a, 0, "farm0.log");
    expect_exit(b, 0, "farm1.log");
    cr_assert(same_file("one.rec", "ns.rec"), "hosts in namespaces gave other batches than one machine");
    free(sink), free(ka), free(kb);
}

/* Not a death but a partition: host A's link goes down in mid-epoch, so its packets vanish and
 * nobody sees a connection close. The trainer host hears nothing for HOST_TIMEOUT_S, deals its
 * leases again and finishes with the same batches; host A hears nothing from the trainer and
 * gives up. */
Test(farm, a_host_cut_off_from_the_network_is_lost_and_the_batches_stay_the_same, .init = netns_setup,
     .fini = netns_teardown)
{
    one_machine("one.rec");
    char *sink = xasprintf("selfsup-sink --save %s/cut.rec", g_dir), *ka = key_of("hostA"), *kb = key_of("hostB");
    pid_t t = trainer("tc", sink, NULL),
          a = farm_host(0, ka, "'+config.SELFSUP.STAGES.augment=selfsup-augment --pace 20'"),
          b = farm_host(1, kb, NULL);
    cr_assert(wait_for_text("tc/logs/collate.0.log", "farm host farm.0 joined", 30000), "host A never joined");
    cr_assert(wait_for_text("tc/logs/collate.0.log", "farm host farm.1 joined", 30000), "host B never joined");
    usleep(500 * 1000);
    char *cut = xasprintf("ip -n %s link set eth0 down", g_netns[1]);
    run_ok(cut);
    expect_exit(t, 0, "tc.log");
    expect_exit(b, 0, "farm1.log");
    expect_exit(a, 1, "farm0.log");
    expect_in_log("tc/logs/collate.0.log", "farm host farm.0 is lost");
    expect_in_log("farm0.log", "the trainer's side is gone");
    cr_assert(same_file("one.rec", "cut.rec"), "a host cut off changed the batches");
    free(cut), free(sink), free(ka), free(kb);
}
