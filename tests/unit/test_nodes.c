/*
 * test_nodes.c — trainers on several CPU nodes (DISTRIBUTED.NUM_NODES > 1): `selfsup run
 * --node-rank N` once per node, the trainers meeting at DISTRIBUTED.RUN_ID over CURVE
 * (shm/coll_net.h). The nodes here are two orchestrators on this machine, on the loopback.
 *
 *  - two nodes of one trainer train bit for bit the model that one node of two trainers
 *    (the shm world) trains: the same checkpoint files, byte for byte;
 *  - a trainer killed on one node stops both nodes, the other naming the lost rank, with no
 *    process left behind;
 *  - what a node cannot start with is refused before anything starts (exit 2).
 *
 * Every trainer computes on one thread (a selfsup-train wrapper adds --threads 1): on one
 * machine two nodes would otherwise take every core each, and the CPU engine's sums follow
 * its thread count.
 */
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* dir: Fashion-MNIST (256 images), keys (a client key "nodes" allowed world.*), the wrapper. */
static char *prepare(void)
{
    char *dir = test_make_tmpdir(), *bin = test_build_path("selfsup"), *train = test_build_path("selfsup-train");
    char *cmd = xasprintf("'%s' dataset fashion-mnist %s/fm --limit 256 && '%s' keygen %s/keys --clients "
                          "'nodes:world.*' && mkdir %s/w && printf '#!/bin/sh\\nexec %s \"$@\" --threads 1\\n' > "
                          "%s/w/selfsup-train && chmod +x %s/w/selfsup-train",
                          bin, dir, bin, dir, dir, train, dir, dir);
    char *out;
    cr_assert_eq(test_run(cmd, &out), 0, "%s: %s", cmd, out);
    free(out), free(cmd), free(bin), free(train);
    return dir;
}

/* quickstart/swav on 256 images, 16 a trainer, `epochs` epochs of 8 steps, checkpoints in
 * dir/<name>, the run folder dir/run_<name><node>; `how` says how many nodes and trainers. */
static char *swav_cmd(const char *dir, const char *name, int node, int epochs, const char *how)
{
    char *bin = test_build_path("selfsup"), *configs = test_path("configs");
    char *cmd = xasprintf(
        "SELFSUP_CONFIGS='%s' exec '%s' run quickstart/swav "
        "config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy] "
        "config.DATA.TRAIN.DATA_LIMIT=256 config.DATA.NUM_DATALOADER_WORKERS=1 config.LOG_FREQUENCY=1 "
        "config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=16 config.OPTIMIZER.num_epochs=%d "
        "config.LOSS.swav_loss.queue.queue_length=64 config.LOSS.swav_loss.queue.start_iter=2 "
        "+config.SELFSUP.STAGES.train=%s/w/selfsup-train %s config.CHECKPOINT.DIR=%s/%s --run-dir %s/run_%s%d",
        configs, bin, dir, epochs, dir, how, dir, name, dir, name, node);
    free(bin), free(configs);
    return cmd;
}

/* Two nodes of one trainer each, meeting at 127.0.0.1:port: node 1 in the background. */
static char *two_nodes_cmd(const char *dir, const char *name, int epochs, int port)
{
    char *how = xasprintf("config.DISTRIBUTED.NUM_NODES=2 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "
                          "config.DISTRIBUTED.RUN_ID=127.0.0.1:%d config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=%s/keys "
                          "config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s/keys/nodes.key",
                          port, dir, dir);
    char *n0 = swav_cmd(dir, name, 0, epochs, how), *n1 = swav_cmd(dir, name, 1, epochs, how);
    char *cmd = xasprintf("(%s --node-rank 1) > %s/node1.log 2>&1 & n1=$!; (%s --node-rank 0); rc0=$?; "
                          "wait $n1; rc1=$?; echo \"node 0: $rc0, node 1: $rc1\"",
                          n1, dir, n0);
    free(how), free(n0), free(n1);
    return cmd;
}

static char *log_text(const char *dir, const char *rel)
{
    char *path = xasprintf("%s/%s", dir, rel);
    size_t n;
    char *text = read_whole_file(path, &n);
    free(path);
    return text ? text : xstrdup("(no log)");
}

/* The net world sums in rank order with the shm world's arithmetic, so the checkpoints of
 * both runs are the same bytes (1 epoch: 8 steps of SwAV with its queue, BatchNorm). */
Test(nodes, two_cpu_nodes_train_bit_for_bit_the_model_one_node_of_two_trainers_trains, .timeout = 300)
{
    char *dir = prepare(), *out;
    char *one = swav_cmd(dir, "one", 0, 1, "config.DISTRIBUTED.NUM_PROC_PER_NODE=2");
    cr_assert_eq(test_run_within(one, 280, &out), 0, "one node of two trainers: %s", out);
    free(out);
    char *two = two_nodes_cmd(dir, "two", 1, test_free_port());
    cr_assert_eq(test_run_within(two, 280, &out), 0, "%s", out);
    char *node1 = log_text(dir, "node1.log");
    cr_assert(strstr(out, "node 0: 0, node 1: 0"), "%s\nnode 1:\n%s", out, node1);
    free(out), free(node1);
    static const char *files[] = {"model_final_checkpoint_phase0.torch", "checkpoint.torch"};
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        char *a = xasprintf("%s/one/%s", dir, files[i]), *b = xasprintf("%s/two/%s", dir, files[i]);
        cr_expect(test_same_bytes(a, b), "%s differs between one node of two trainers and two nodes", files[i]);
        free(a), free(b);
    }
    char *log = log_text(dir, "run_two1/logs/train.0.log");
    cr_expect(strstr(log, "rank 1 of 2"), "node 1's trainer is rank 1 of 2:\n%s", log);
    free(log), free(one), free(two);
    test_rm_rf(dir);
    free(dir);
}

/* kill -9 of node 1's trainer after its second iteration: node 1's run stops naming its stage,
 * node 0's trainer learns of it in its collective and names rank 1; both runs exit 1. */
Test(nodes, a_trainer_killed_on_one_node_stops_every_node, .timeout = 300)
{
    char *dir = prepare(), *out;
    char *killer = xasprintf("(for i in $(seq 1200); do grep -q 'iter: 2;' %s/run_k1/logs/train.0.log 2>/dev/null "
                             "&& break; sleep 0.1; done; pkill -9 -f -- '--id [t]rain.0 .*%s/run_k1') & ",
                             dir, dir);
    char *two = two_nodes_cmd(dir, "k", 8, test_free_port());
    char *cmd = xasprintf("%s %s; wait", killer, two);
    cr_assert_eq(test_run_within(cmd, 280, &out), 0, "%s", out);
    char *node1 = log_text(dir, "node1.log");
    cr_expect(strstr(out, "node 0: 1, node 1: 1"), "%s\nnode 1:\n%s", out, node1);
    cr_expect(strstr(node1, "stage train.0 (pid ") && strstr(node1, "was killed by signal 9"), "%s", node1);
    char *peer = log_text(dir, "run_k0/logs/train.0.log");
    cr_expect(strstr(peer, "rank 1 (pid ") && strstr(peer, "left the world"), "node 0's trainer:\n%s", peer);
    char *left = xasprintf("pgrep -f -- '[r]un_k[01]' >/dev/null"), *ps;
    int found = 1;
    for (int i = 0; i < 100 && (found = test_run(left, &ps)) == 0; i++)
        free(ps), usleep(20000);
    cr_expect_neq(found, 0, "a process of the runs outlived them");
    free(left), free(peer), free(node1), free(out), free(cmd), free(two), free(killer);
    test_rm_rf(dir);
    free(dir);
}

/* Refused before anything starts, naming the key: a node rank past NUM_NODES, another
 * INIT_METHOD, node 0 without its key directory, node 1 without its client key. */
Test(nodes, what_a_node_cannot_start_with_is_refused, .timeout = 120)
{
    char *dir = prepare();
    const struct {
        const char *args, *says;
    } cases[] = {
        {"config.DISTRIBUTED.RUN_ID=127.0.0.1:5000 --node-rank 2", "node 2 of 2: config.DISTRIBUTED.NUM_NODES"},
        {"config.DISTRIBUTED.INIT_METHOD=file config.DISTRIBUTED.RUN_ID=/tmp/x", "config.DISTRIBUTED.INIT_METHOD"},
        {"config.DISTRIBUTED.RUN_ID=127.0.0.1:5000", "node 0 of 2: config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR"},
        {"config.DISTRIBUTED.RUN_ID=127.0.0.1:5000 --node-rank 1",
         "node 1 of 2: config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE"},
        {"config.DISTRIBUTED.RUN_ID=auto", "config.DISTRIBUTED.RUN_ID: 'auto' must be HOST:PORT"},
    };
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        char *how = xasprintf("config.DISTRIBUTED.NUM_NODES=2 %s", cases[k].args);
        char *cmd = swav_cmd(dir, "refused", 0, 1, how), *out;
        int rc = test_run_within(cmd, 60, &out);
        cr_expect_eq(rc, 2, "%s: exit %d: %s", cases[k].args, rc, out);
        cr_expect(strstr(out, cases[k].says), "%s: %s", cases[k].args, out);
        free(out), free(cmd), free(how);
    }
    char *ran = xasprintf("%s/refused", dir);
    cr_expect(!path_exists(ran), "a refused run made its checkpoint folder");
    free(ran);
    /* validate, which knows no node, takes the config of three nodes */
    char *bin = test_build_path("selfsup"), *configs = test_path("configs"), *out;
    char *cmd = xasprintf("SELFSUP_CONFIGS='%s' '%s' config validate quickstart/swav config.DISTRIBUTED.NUM_NODES=3 "
                          "config.DISTRIBUTED.RUN_ID=node0:29500 "
                          "config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy]",
                          configs, bin, dir);
    cr_expect_eq(test_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "world size 3"), "%s", out);
    free(out), free(cmd), free(bin), free(configs);
    test_rm_rf(dir);
    free(dir);
}
