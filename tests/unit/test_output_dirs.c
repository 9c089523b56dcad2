/*
 * test_output_dirs.c — every stage that writes results checks where they go before it does
 * any work: the folder can be made, a file can be created in it, and (where the size is
 * known) there is room. A folder that fails is refused at the start with exit 2, naming the
 * key or option (and the config line) that chose it, instead of after an epoch of training
 * or every layer's evaluation.
 *
 * Folders that fail, made without privileges: a path under a regular file (cannot be made)
 * and /proc (exists, but nobody, root included, can create a file there: permission bits do
 * not stop root, a read-only or special file system does). Room: a small tmpfs mounted in a
 * private mount namespace (unshare), skipped where the machine does not allow one; the
 * checkpoint size estimate is checked against a checkpoint actually written.
 */
#include "model.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A small supervised ResNet-18 trained with SGD and momentum: a checkpoint holds the
 * parameters, the BN statistics and a momentum buffer per parameter. */
#define TRAIN_YAML                                                                                              \
    "# @package _global_\n"                                                                                     \
    "config:\n"                                                                                                 \
    "  TEST_MODEL: False\n"                                                                                     \
    "  MACHINE: {DEVICE: cpu}\n"                                                                                \
    "  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n"                                                                   \
    "  DATA: {TRAIN: {DATA_SOURCES: [synthetic], DATASET_NAMES: [synthetic], BATCHSIZE_PER_REPLICA: 4}}\n"       \
    "  MODEL:\n"                                                                                                \
    "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"                       \
    "    HEAD: {PARAMS: [[mlp, {dims: [512, 10]}]]}\n"                                                           \
    "  LOSS: {name: CrossEntropyLoss}\n"                                                                        \
    "  OPTIMIZER: {name: sgd, momentum: 0.9, num_epochs: 1,\n"                                                  \
    "    param_schedulers: {lr: {name: constant, value: 0.1}}}\n"

/* trainer_new on TRAIN_YAML with CHECKPOINT.DIR = dir: NULL, or the refusal's message. */
static char *trainer_refusal(const char *dir)
{
    char *yaml = xasprintf(TRAIN_YAML "  CHECKPOINT: {DIR: '%s'}\n", dir);
    cfg_t cfg = {0};
    cfg_err err;
    cr_assert(test_compose(&cfg, &err, yaml, NULL), "%s", err.msg);
    free(yaml);
    trainer_options o = {.world_size = 1, .threads = 2, .steps_per_epoch = 1};
    trainer *t = trainer_new(cfg_map_get(cfg.root, "config"), &o, &err);
    cfg_destroy(&cfg);
    if (t) {
        trainer_free(t);
        return NULL;
    }
    return xstrdup(err.msg);
}

static char *make_file(const char *dir, const char *name)
{
    char *path = path_join(dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fclose(f);
    return path;
}

/* The trainer found an unwritable CHECKPOINT.DIR at its first checkpoint, an epoch in. */
Test(output_dirs, trainer_refuses_a_checkpoint_folder_it_cannot_write_before_training, .timeout = 120)
{
    char *msg = trainer_refusal("/proc");
    cr_expect(msg && strstr(msg, "config.CHECKPOINT.DIR") && strstr(msg, "/proc: cannot create a file"), "%s",
              msg ? msg : "(accepted)");
    free(msg);
    char *dir = test_make_tmpdir(), *file = make_file(dir, "a-file"), *under = path_join(file, "ckpt");
    msg = trainer_refusal(under);
    cr_expect(msg && strstr(msg, "config.CHECKPOINT.DIR") && strstr(msg, "cannot make the folder") &&
                  strstr(msg, under),
              "%s", msg ? msg : "(accepted)");
    free(msg);
    char *fine = path_join(dir, "ckpt");
    msg = trainer_refusal(fine);
    cr_expect(!msg, "a writable folder was refused: %s", msg);
    free(msg), free(fine), free(under), free(file);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    free(cmd), free(dir);
}

/* ckpt_size_estimate is never below what ckpt_save writes, and not far above it. */
Test(output_dirs, checkpoint_size_estimate_covers_a_written_checkpoint, .timeout = 120)
{
    char *dir = test_make_tmpdir(), *yaml = xasprintf(TRAIN_YAML "  CHECKPOINT: {DIR: '%s'}\n", dir);
    cfg_t cfg = {0};
    cfg_err err;
    cr_assert(test_compose(&cfg, &err, yaml, NULL), "%s", err.msg);
    trainer_options o = {.world_size = 1, .threads = 2, .steps_per_epoch = 1};
    trainer *t = trainer_new(cfg_map_get(cfg.root, "config"), &o, &err);
    cr_assert(t, "%s", err.msg);
    model *m = trainer_model(t);
    int n = model_entry_count(m);
    ckpt_state st = {.kind = "iteration", .phase = 12345, .iteration = 1234567, .num_epochs = 100};
    char *why = NULL;
    cr_assert_eq(ckpt_save(trainer_backend(t), dir, "probe.torch", model_entry_at(m, 0), n, &st, &why), 0, "%s", why);
    char *path = path_join(dir, "probe.torch");
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    uint64_t estimate = ckpt_size_estimate(model_entry_at(m, 0), n);
    cr_expect_geq(estimate, (uint64_t)sb.st_size, "estimate %llu < %lld written", (unsigned long long)estimate,
                  (long long)sb.st_size);
    cr_expect_leq(estimate, (uint64_t)sb.st_size + ((uint64_t)64 << 10), "estimate %llu, %lld written",
                  (unsigned long long)estimate, (long long)sb.st_size);
    trainer_free(t);
    cfg_destroy(&cfg);
    free(path), free(yaml);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    free(cmd), free(dir);
}

/* The extractor, kNN and SVM evaluators on an unwritable default folder (CHECKPOINT.DIR):
 * exit 2, the key and the config line named, nothing computed. */
Test(output_dirs, evaluators_and_extractor_name_the_key_of_an_unwritable_folder, .timeout = 120)
{
    char *dir = test_make_tmpdir();
    char *cfg_path = path_join(dir, "c.yaml");
    FILE *f = fopen(cfg_path, "w");
    cr_assert(f);
    fputs(TRAIN_YAML "  CHECKPOINT:\n    DIR: /proc\n", f); /* DIR on line 14 */
    fclose(f);
    static const char *const runs[][2] = {{"selfsup-extract", "--in file:/dev/null"},
                                          {"selfsup-knn", "--features /nonexistent"},
                                          {"selfsup-svm", "--features /nonexistent"}};
    char *where = xasprintf("c.yaml:14: config.CHECKPOINT.DIR");
    for (size_t i = 0; i < ARRAY_LEN(runs); i++) {
        char *bin = test_build_path(runs[i][0]), *cmd = xasprintf("'%s' -c '%s' %s", bin, cfg_path, runs[i][1]);
        char *out = NULL;
        cr_expect_eq(test_run(cmd, &out), 2, "%s: %s", runs[i][0], out);
        cr_expect(strstr(out, where) && strstr(out, "/proc: cannot create a file"), "%s: %s", runs[i][0], out);
        free(out), free(cmd), free(bin);
    }
    free(where), free(cfg_path);
    test_rm_dir(dir);
}

/* Whether a tmpfs can be mounted in a private mount namespace here (unshare -rm needs no
 * privilege where user namespaces are enabled); the tests that need one skip otherwise. */
static bool can_unshare(void)
{
    char *out = NULL;
    int rc = test_run("unshare -rm sh -c 'd=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs \"$d\" && umount \"$d\" "
                      "&& rmdir \"$d\"'",
                      &out);
    free(out);
    return rc == 0;
}

/* selfsup-train on TRAIN_YAML with CHECKPOINT.DIR a fresh tmpfs of `size`. */
static int train_on_tmpfs(const char *size, char **out)
{
    char *dir = test_make_tmpdir(), *mnt = path_join(dir, "mnt"), *cfg_path = path_join(dir, "c.yaml");
    cr_assert_eq(mkdir(mnt, 0777), 0);
    FILE *f = fopen(cfg_path, "w");
    cr_assert(f);
    fprintf(f, TRAIN_YAML "  CHECKPOINT: {DIR: '%s/ckpt'}\n", mnt);
    fclose(f);
    char *bin = test_build_path("selfsup-train");
    char *cmd = xasprintf("unshare -rm sh -c \"mount -t tmpfs -o size=%s tmpfs '%s' && exec '%s' -c '%s' --threads 2 "
                          "--steps-per-epoch 1 --in file:/dev/null\"",
                          size, mnt, bin, cfg_path);
    int rc = test_run(cmd, out);
    free(cmd), free(bin), free(cfg_path);
    rmdir(mnt);
    free(mnt);
    test_rm_dir(dir);
    return rc;
}

/* A checkpoint is the parameters and a momentum buffer each (ResNet-18: about 11 M floats
 * each, 2 × 43 MiB): 60 MiB would take the model alone, not a checkpoint, and used to be
 * found full at the end of the first epoch. */
Test(output_dirs, trainer_refuses_a_checkpoint_folder_without_room_for_one_checkpoint, .timeout = 300)
{
    if (!can_unshare())
        cr_skip_test("no private mount namespace here (unshare -rm): cannot make a small file system");
    char *out = NULL;
    cr_expect_eq(train_on_tmpfs("60m", &out), 2, "%s", out);
    cr_expect(strstr(out, "config.CHECKPOINT.DIR") && strstr(out, "MiB free, but the output needs about"), "%s",
              out);
    free(out);
    /* with room for one the folder passes; the empty input then ends the run (exit 1) */
    cr_expect_eq(train_on_tmpfs("200m", &out), 1, "%s", out);
    cr_expect(!strstr(out, "config.CHECKPOINT.DIR"), "%s", out);
    free(out);
}
