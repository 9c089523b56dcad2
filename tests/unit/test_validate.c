/*
 * test_validate.c — `selfsup config validate` makes every check a run makes (issue 20).
 *
 *  - keys that ask for what nothing implements yet (AMP on the cpu, another
 *    train step) are refused with exit 2 naming the key; SyncBN passes with a warning that it
 *    changes nothing on one trainer; `show` only warns, so VISSL's recipes still compose;
 *  - what the trainer refuses before it builds the model (a loss or an optimizer it does not
 *    run, a device this machine lacks, more than one trainer) is refused by validate with the
 *    trainer's own words, and by `selfsup run` before any stage starts;
 *  - every config under configs/ gets the same verdict from validate and from the trainer's
 *    dry start (`selfsup-train --check`), and the same message when both refuse it.
 *
 * Data: a clean clone has no data/, and VISSL's recipes name placeholder paths, so a config
 * refused only for a file this machine lacks is checked again with its data made synthetic
 * (and no weights file), which gets the rest of its checks run everywhere.
 */
#include "nn.h"
#include "safetensors.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Both splits read the synthetic source, and no weights file is loaded. */
#define SYNTHETIC_DATA                                                                                   \
    "config.DATA.TRAIN.DATA_SOURCES=[synthetic] config.DATA.TRAIN.DATASET_NAMES=[synthetic] "           \
    "config.DATA.TRAIN.DATA_PATHS=[] config.DATA.TRAIN.LABEL_SOURCES=[] config.DATA.TRAIN.LABEL_PATHS=[] " \
    "config.DATA.TEST.DATA_SOURCES=[synthetic] config.DATA.TEST.DATASET_NAMES=[synthetic] "             \
    "config.DATA.TEST.DATA_PATHS=[] config.DATA.TEST.LABEL_SOURCES=[] config.DATA.TEST.LABEL_PATHS=[] "   \
    "config.MODEL.WEIGHTS_INIT.PARAMS_FILE=''"

/* `selfsup config ACTION CONFIG ARGS` over the source tree's configs; the exit status. */
static int config_cmd(const char *action, const char *config, const char *args, char **out)
{
    char *bin = test_build_path("selfsup"), *configs = test_path("configs");
    char *cmd = xasprintf("'%s' config %s '%s' %s --configs '%s'", bin, action, config, args, configs);
    int rc = test_run(cmd, out);
    free(cmd), free(bin), free(configs);
    return rc;
}

/* `selfsup-train -c CONFIG --check ARGS`: the trainer's dry start; the exit status. */
static int dry_start(const char *config, const char *args, char **out)
{
    char *bin = test_build_path("selfsup-train"), *configs = test_path("configs");
    char *cmd = xasprintf("SELFSUP_CONFIGS='%s' '%s' -c '%s' --check %s </dev/null", configs, bin, config, args);
    int rc = test_run(cmd, out);
    free(cmd), free(bin), free(configs);
    return rc;
}

/* The message of validate's refusal (after "error: ", to the end of its line), or NULL. */
static char *refusal(const char *out)
{
    const char *tag = "selfsup config: error: ", *at = strstr(out, tag);
    if (!at)
        return NULL;
    at += strlen(tag);
    return xstrndup(at, strcspn(at, "\n"));
}

/* Whether a GPU runs here: MACHINE.DEVICE=gpu is then a config that starts. */
static bool have_gpu(void)
{
    char *why = NULL;
    eng_backend *be = eng_backend_open("cuda", NULL, &why);
    bool have = be != NULL;
    free(why);
    eng_backend_close(be);
    return have;
}

/* Validate refuses `args` over `config` (its data made synthetic) with exit 2 and `expect`,
 * and the dry start refuses it with the same message. */
static void expect_refused(const char *config, const char *args, const char *expect)
{
    char *all = xasprintf("%s %s", SYNTHETIC_DATA, args), *out, *train_out;
    int rc = config_cmd("validate", config, all, &out);
    cr_expect_eq(rc, 2, "validate %s %s: exit %d\n%s", config, args, rc, out);
    cr_expect(strstr(out, expect), "validate %s %s:\n  expected: %s\n  got: %s", config, args, expect, out);
    char *msg = refusal(out);
    int trc = dry_start(config, all, &train_out);
    cr_expect_eq(trc, 2, "selfsup-train --check %s %s: exit %d\n%s", config, args, trc, train_out);
    cr_expect(msg && strstr(train_out, msg), "the run says otherwise:\n  validate: %s\n  train: %s", msg ? msg : out,
              train_out);
    free(msg), free(out), free(train_out), free(all);
}

/* `selfsup run CONFIG ARGS` (data made synthetic, CHECKPOINT.DIR in a scratch folder unless
 * ARGS names one) is refused with exit 2 and `expect` before any stage starts: no
 * CHECKPOINT.DIR made, no stage log. */
static void expect_run_refused(const char *config, const char *args, const char *expect)
{
    char *dir = test_make_tmpdir(), *bin = test_build_path("selfsup"), *configs = test_path("configs"), *out;
    char *cmd =
        xasprintf("SELFSUP_CONFIGS='%s' '%s' run %s " SYNTHETIC_DATA " config.CHECKPOINT.DIR=%s/ckpt %s "
                  "--run-dir %s/run",
                  configs, bin, config, dir, args, dir);
    int rc = test_run(cmd, &out);
    cr_expect_eq(rc, 2, "selfsup run %s %s: exit %d\n%s", config, args, rc, out);
    cr_expect(strstr(out, expect), "%s", out);
    char *ckpt = xasprintf("%s/ckpt", dir), *logs = xasprintf("%s/run/logs", dir);
    struct stat st;
    cr_expect_neq(stat(ckpt, &st), 0, "the refused run made %s", ckpt);
    cr_expect_neq(stat(logs, &st), 0, "the refused run started stages (%s)", logs);
    free(ckpt), free(logs), free(out), free(cmd), free(configs), free(bin);
    test_rm_rf(dir);
    free(dir);
}

Test(validate, features_nothing_implements_are_refused_naming_the_key, .timeout = 120)
{
    expect_refused("quickstart/simclr", "config.MODEL.AMP_PARAMS.USE_AMP=true",
                   "config.MODEL.AMP_PARAMS.USE_AMP: mixed precision runs on the GPU (MACHINE.DEVICE: gpu); the cpu "
                   "trains in fp32: set USE_AMP: False");
    expect_refused("quickstart/simclr", "config.TRAINER.TRAIN_STEP_NAME=foo",
                   "config.TRAINER.TRAIN_STEP_NAME: 'foo': train steps other than standard_train_step are not "
                   "implemented yet");
}

/* With one trainer SyncBN is BatchNorm: VISSL's recipes turn it on, and they must still run. */
/* Every meter VISSL 0.1.5 can build (its registry: its own three and ClassyVision's four)
 * either validates or is refused with exit 2, naming config.METERS.name; none is accepted and
 * then ignored. */
Test(validate, every_meter_vissl_registers_works_or_is_refused, .timeout = 120)
{
    static const char *const WORK[] = {"accuracy_list_meter", "mean_ap_list_meter", "mean_ap_meter"};
    static const char *const REFUSED[] = {"accuracy", "precision_at_k", "recall_at_k", "video_accuracy"};
    for (size_t i = 0; i < ARRAY_LEN(WORK); i++) {
        char *args = xasprintf("%s config.METERS.name=%s config.METERS.mean_ap_meter.num_classes=10", SYNTHETIC_DATA,
                               WORK[i]),
             *out;
        int rc = config_cmd("validate", "quickstart/supervised", args, &out);
        cr_expect_eq(rc, 0, "%s: exit %d\n%s", WORK[i], rc, out);
        free(args), free(out);
    }
    for (size_t i = 0; i < ARRAY_LEN(REFUSED); i++) {
        char *args = xasprintf("config.METERS.name=%s", REFUSED[i]);
        expect_refused("quickstart/supervised", args, "config.METERS.name");
        free(args);
    }
}

Test(validate, sync_bn_passes_with_a_warning_that_it_changes_nothing, .timeout = 60)
{
    char *out;
    int rc = config_cmd("validate", "quickstart/simclr",
                        SYNTHETIC_DATA " config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN=true", &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "warning: config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN: has no effect"), "%s", out);
    cr_expect(strstr(out, "quickstart/simclr: OK"), "%s", out);
    free(out);
}

/* `show` is for reading a config, not running it: VISSL's SwAV recipe sets USE_AMP and shows. */
Test(validate, show_only_warns_about_what_a_run_would_refuse, .timeout = 60)
{
    char *out;
    int rc = config_cmd("show", "quickstart/simclr",
                        "config.MODEL.AMP_PARAMS.USE_AMP=true --key config.MODEL.AMP_PARAMS", &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "warning: config.MODEL.AMP_PARAMS.USE_AMP: mixed precision runs on the GPU"),
              "%s", out);
    free(out);
}

Test(validate, what_the_trainer_refuses_is_refused_in_its_words, .timeout = 120)
{
    expect_refused("quickstart/simclr", "config.LOSS.name=MSELoss",
                   "config.LOSS.name: 'MSELoss' is not run by this trainer yet");
    expect_refused("quickstart/simclr", "config.OPTIMIZER.name=zero",
                   "config.OPTIMIZER.name: 'zero' is not run by this trainer");
    /* the quickstarts whose losses are not there yet: refused at the line that names them */
    /* MoCo's data: its collator, and a queue each step's keys fill a whole block of */
    expect_refused("quickstart/moco", "config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=48",
                   "config.LOSS.moco_loss.queue_size: 1024 is not a multiple of the global batch, 48");
    expect_refused("quickstart/moco", "config.DATA.TRAIN.COLLATE_FUNCTION=default_collate",
                   "config.DATA.TRAIN.COLLATE_FUNCTION: is 'default_collate', but moco_loss reads the key view");
    /* NPID's memory bank: a row per training sample, which its target names */
    expect_refused("quickstart/npid", "config.LOSS.nce_loss_with_memory.num_train_samples=5000",
                   "config.LOSS.nce_loss_with_memory.num_train_samples: 5000: the memory bank needs a row for each "
                   "of the 10000 training samples");
}

/* Several trainers train as one model where the data-parallel step covers the config; where it
 * does not, they would each train a model of their own and write the same checkpoint files,
 * so validate, the trainer and `selfsup run` refuse it before any stage starts. */
Test(validate, a_world_size_the_trainers_cannot_train_as_one_model_is_refused_before_anything_starts,
     .timeout = 120)
{
    char *out;
    int rc = config_cmd("validate", "quickstart/supervised",
                        SYNTHETIC_DATA " config.DISTRIBUTED.NUM_PROC_PER_NODE=2", &out);
    cr_expect_eq(rc, 0, "cross-entropy on 2 trainers is one model: %s", out);
    cr_expect(strstr(out, "world size 2, global batch 128"), "%s", out);
    free(out);
    /* the losses that compute over every rank's rows: gathers and Sinkhorn's sums */
    static const char *const gathering[] = {"quickstart/simclr", "quickstart/swav", "quickstart/moco",
                                            "quickstart/npid"};
    for (size_t k = 0; k < ARRAY_LEN(gathering); k++) {
        rc = config_cmd("validate", gathering[k], SYNTHETIC_DATA " config.DISTRIBUTED.NUM_PROC_PER_NODE=2",
                        &out);
        cr_expect_eq(rc, 0, "%s on 2 trainers is one model: %s", gathering[k], out);
        free(out);
    }
    /* TEST_ONLY tests each rank's shard, its meters and loss reduced over the ranks */
    rc = config_cmd("validate", "quickstart/supervised",
                    SYNTHETIC_DATA " config.DISTRIBUTED.NUM_PROC_PER_NODE=2 config.TEST_ONLY=true", &out);
    cr_expect_eq(rc, 0, "TEST_ONLY on 2 trainers: %s", out);
    free(out);
    /* SyncBN's groups must be whole */
    rc = config_cmd(
        "validate", "quickstart/supervised",
        SYNTHETIC_DATA
        " config.DISTRIBUTED.NUM_PROC_PER_NODE=2 config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN=true",
        &out);
    cr_expect_eq(rc, 0, "SyncBN on 2 trainers: %s", out);
    free(out);
    expect_refused(
        "quickstart/supervised",
        "config.DISTRIBUTED.NUM_PROC_PER_NODE=4 config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN=true "
        "config.MODEL.SYNC_BN_CONFIG.GROUP_SIZE=3",
        "config.MODEL.SYNC_BN_CONFIG.GROUP_SIZE: SyncBN groups of 3 trainers do not divide the 4 trainers");
    /* GPUs share their model through NCCL, never through gloo's role */
    expect_refused("quickstart/supervised", "config.DISTRIBUTED.NUM_PROC_PER_NODE=2 config.MACHINE.DEVICE=gpu",
                   "config.DISTRIBUTED.BACKEND: is gloo, but 2 GPU trainers share their model through NCCL: set "
                   "DISTRIBUTED.BACKEND: nccl");

    expect_run_refused("quickstart/supervised", "config.DISTRIBUTED.NUM_PROC_PER_NODE=2 config.MACHINE.DEVICE=gpu",
                       "set DISTRIBUTED.BACKEND: nccl");
}

/* A run whose train stage is another program (SELFSUP.STAGES.train: a sink that saves the
 * batches) starts no trainer, so the trainer's refusals are not validate's either. */
Test(validate, no_trainer_checks_when_another_program_takes_the_train_stage, .timeout = 60)
{
    char *out;
    int rc = config_cmd("validate", "quickstart/simclr",
                        SYNTHETIC_DATA " config.LOSS.name=MSELoss "
                        "'+config.SELFSUP.STAGES.train=selfsup-sink --save /dev/null'", &out);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    rc = config_cmd("validate", "quickstart/simclr",
                    SYNTHETIC_DATA " config.LOSS.name=MSELoss '+config.SELFSUP.STAGES.train=/opt/x/selfsup-train'",
                    &out);
    cr_expect_eq(rc, 2, "selfsup-train from elsewhere is still the trainer: %s", out);
    cr_expect(strstr(out, "'MSELoss' is not run by this trainer yet"), "%s", out);
    free(out);
}

/* The device is checked by opening it, as the run does: refused where no GPU runs. */
Test(validate, a_device_this_machine_lacks_is_refused_as_the_run_refuses_it, .timeout = 60)
{
    if (!have_gpu()) {
        expect_refused("quickstart/simclr", "config.MACHINE.DEVICE=gpu", "config.MACHINE.DEVICE: gpu: ");
        return;
    }
    char *out;
    cr_expect_eq(config_cmd("validate", "quickstart/simclr", SYNTHETIC_DATA " config.MACHINE.DEVICE=gpu", &out), 0,
                 "%s", out);
    free(out);
}

/* A dry start checks and leaves: no input read (stdin is /dev/null, not a record stream), no
 * CHECKPOINT.DIR made. */
Test(validate, the_dry_start_reads_nothing_and_writes_nothing, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *ckpt = xasprintf("%s/never", dir);
    char *args = xasprintf("%s config.CHECKPOINT.DIR=%s", SYNTHETIC_DATA, ckpt), *out;
    int rc = dry_start("quickstart/simclr", args, &out);
    cr_expect_eq(rc, 0, "%s", out);
    struct stat st;
    cr_expect_neq(stat(ckpt, &st), 0, "--check made %s", ckpt);
    free(out), free(args), free(ckpt);
    test_rm_rf(dir);
    free(dir);
}

/* CHECKPOINT.DIR as the run will find it, without making it: a folder it cannot make, and a
 * checkpoint there that the run would not overwrite, are refused in the run's words. */
Test(validate, the_checkpoint_folder_is_probed_without_being_made, .timeout = 60)
{
    expect_refused(
        "quickstart/simclr", "config.CHECKPOINT.DIR=/etc/passwd/ckpt",
        "config.CHECKPOINT.DIR: cannot make the folder /etc/passwd/ckpt (/etc/passwd is not a folder)");
    char *dir = test_make_tmpdir(), *link = xasprintf("%s/checkpoint.torch", dir), *out;
    cr_assert_eq(symlink("model_phase3.torch", link), 0);
    char *args = xasprintf("config.CHECKPOINT.DIR=%s config.CHECKPOINT.AUTO_RESUME=false", dir),
         *want = xasprintf(
             "config.CHECKPOINT.OVERWRITE_EXISTING: %s already holds a checkpoint: set AUTO_RESUME=True",
             dir);
    expect_refused("quickstart/simclr", args, want);
    /* resuming it is the run's business once the model exists: validate lets it through */
    char *resume =
        xasprintf("%s config.CHECKPOINT.DIR=%s config.CHECKPOINT.AUTO_RESUME=true", SYNTHETIC_DATA, dir);
    cr_expect_eq(config_cmd("validate", "quickstart/simclr", resume, &out), 0, "%s", out);
    free(out), free(resume), free(want), free(args), free(link);
    test_rm_rf(dir);
    free(dir);
}

/* A weights file for another model is refused by validate (and by both stages' start) as the
 * run refuses it: its contents are read into the model, built on the cpu for the check. */
Test(validate, a_weights_file_for_another_model_is_refused, .timeout = 120)
{
    char *dir = test_make_tmpdir(), *file = xasprintf("%s/other.safetensors", dir), *err = NULL, *out;
    float v[4] = {0};
    size_t shape[1] = {4};
    st_tensor t = {
        .name = "trunk._feature_blocks.conv1.weight", .dtype = ST_F32, .ndim = 1, .shape = shape, .data = v};
    cr_assert_eq(st_write(file, &t, 1, NULL, 0, &err), 0, "%s", err);
    char *args = xasprintf("config.MODEL.WEIGHTS_INIT.PARAMS_FILE=%s", file),
         *want = xasprintf("config.MODEL: %s: ", file);
    expect_refused("quickstart/simclr", args, want);
    char *all = xasprintf("%s %s", SYNTHETIC_DATA, args);
    cr_expect_eq(config_cmd("validate", "quickstart/extract_features", all, &out), 2, "%s", out);
    cr_expect(strstr(out, want), "%s", out);
    free(out), free(all), free(want), free(args), free(file);
    test_rm_rf(dir);
    free(dir);
}

/* The extractor's own checks are made too, by validate and by `selfsup run` before any stage
 * starts: its model, its device, the folder its features go to. */
Test(validate, the_extractors_checks_are_made_before_it_starts, .timeout = 60)
{
    char *out;
    int rc = config_cmd("validate", "quickstart/extract_features",
                        SYNTHETIC_DATA " config.CHECKPOINT.DIR=/etc/passwd/f", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(
        strstr(out,
               "config.CHECKPOINT.DIR: cannot make the folder /etc/passwd/f (/etc/passwd is not a folder)"),
        "%s", out);
    free(out);
    rc = config_cmd("validate", "quickstart/extract_features",
                    SYNTHETIC_DATA " config.MODEL.TRUNK.NAME=efficientnet", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "EFFICIENT_NETS: the efficientnet trunk needs a model_version"), "%s", out);
    free(out);
    expect_run_refused("quickstart/extract_features", "config.CHECKPOINT.DIR=/etc/passwd/f",
                       "/etc/passwd is not a folder");
}

/* engine_name as the file sets it (the configs set it at the top level), else train. */
static char *engine_of(const char *file)
{
    size_t len;
    char *text = read_whole_file(file, &len);
    cr_assert(text, "cannot read %s", file);
    const char *at = strstr(text, "\nengine_name:");
    char *engine = xstrdup("train");
    if (at) {
        at += strlen("\nengine_name:");
        at += strspn(at, " \"'");
        free(engine);
        engine = xstrndup(at, strcspn(at, " \"'\n#"));
    }
    free(text);
    return engine;
}

/* A refusal for a file this machine lacks: the data, the weights (a clean clone has neither). */
static bool for_a_missing_file(const char *out)
{
    return strstr(out, "does not exist") || strstr(out, "DATA_SOURCES is empty") || strstr(out, "is a URL");
}

/* The dry start agrees with validate's verdict on `file` with `args` (exit status rc, output
 * out): both 0, or both 2 with validate's message in the trainer's log. */
static void expect_agreement(const char *file, const char *args, int rc, const char *out)
{
    char *train_out;
    int trc = dry_start(file, args, &train_out);
    cr_expect_eq(trc, rc, "%s %s: validate exits %d, the dry start %d\nvalidate: %s\ntrain: %s", file, args, rc, trc,
                 out, train_out);
    char *msg = rc == 2 ? refusal(out) : NULL;
    cr_expect(rc != 2 || (msg && strstr(train_out, msg)), "%s: not the run's words\n  validate: %s\n  train: %s", file,
              msg ? msg : out, train_out);
    free(msg), free(train_out);
}

/* The shipped configs (every .yaml under configs/ but defaults, transforms and bad/), sorted. */
static char *shipped_configs(char **configs)
{
    *configs = test_path("configs");
    char *cmd = xasprintf("find '%s' -name '*.yaml' ! -name defaults.yaml ! -path '*/transforms/*' "
                          "! -path '%s/bad/*' | sort",
                          *configs, *configs), *list;
    cr_assert_eq(test_run(cmd, &list), 0);
    free(cmd);
    return list;
}

/* Quickstarts that train as shipped (on synthetic data where the clone has none). */
static bool must_start(const char *file)
{
    static const char *const names[] = {"quickstart/simclr.yaml", "quickstart/swav.yaml", "quickstart/supervised.yaml",
                                        "quickstart/moco.yaml"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (strlen(file) >= strlen(names[i]) && !strcmp(file + strlen(file) - strlen(names[i]), names[i]))
            return true;
    return false;
}

/* validate's verdict on `file`, first as shipped, then on synthetic data when it was refused for
 * a file this clone lacks; the dry start must agree with it (train engine). */
static void check_shipped(const char *file, const char *dir)
{
    char *shipped = xasprintf("config.CHECKPOINT.DIR=%s/ckpt", dir), *synthetic = xasprintf("%s %s", shipped,
                                                                                            SYNTHETIC_DATA);
    char *engine = engine_of(file), *out;
    const char *args = shipped;
    int rc = config_cmd("validate", file, args, &out);
    if (rc == 2 && for_a_missing_file(out)) {
        free(out);
        args = synthetic;
        rc = config_cmd("validate", file, args, &out);
    }
    cr_expect(rc == 0 || rc == 2, "validate %s %s: exit %d\n%s", file, args, rc, out);
    cr_expect(rc == 0 || !must_start(file), "%s: refused\n%s", file, out);
    if (!strcmp(engine, "train")) {
        expect_agreement(file, args, rc, out);
    } else { /* the extractor's checks: only a GPU this machine lacks may refuse a shipped config */
        bool no_gpu_here = rc == 2 && strstr(out, "config.MACHINE.DEVICE: gpu: ") && !have_gpu();
        cr_expect(rc == 0 || no_gpu_here, "%s (engine %s) %s: exit %d\n%s", file, engine, args, rc, out);
    }
    free(out), free(engine), free(shipped), free(synthetic);
}

#define SHIPPED_SHARDS 8

ParameterizedTestParameters(validate, every_shipped_config_gets_the_verdict_a_dry_start_gives)
{
    static int shards[SHIPPED_SHARDS];
    for (int k = 0; k < SHIPPED_SHARDS; k++)
        shards[k] = k;
    return cr_make_param_array(int, shards, SHIPPED_SHARDS);
}

/* Shard k of SHIPPED_SHARDS takes every SHIPPED_SHARDS-th config from the k-th: the suite's jobs
 * share the shards, and each has a timeout of its own (under ASan a config takes seconds). */
ParameterizedTest(int *shard, validate, every_shipped_config_gets_the_verdict_a_dry_start_gives, .timeout = 240)
{
    char *configs, *list = shipped_configs(&configs);
    size_t count = 0, mine = 0;
    /* checkpoints of earlier runs in this checkout (./runs/…) are not the configs' business */
    char *dir = test_make_tmpdir();
    for (char *file = strtok(list, "\n"); file; file = strtok(NULL, "\n"), count++)
        if ((int)(count % SHIPPED_SHARDS) == *shard)
            check_shipped(file, dir), mine++;
    cr_assert_geq(count, 20, "only %zu configs found under %s", count, configs);
    cr_expect_gt(mine, 0);
    free(list), free(configs);
    test_rm_rf(dir);
    free(dir);
}
