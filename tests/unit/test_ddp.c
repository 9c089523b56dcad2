/*
 * test_ddp.c — several trainers, one model (stages/train/dist.h over shm/collective.h).
 *
 * The equivalence that data parallelism promises, checked on the trainer itself: 2 trainers of
 * batch 4, each given the rows a DistributedSampler gives its rank (r, r + 2, …), against 1
 * trainer of batch 8 on the same rows, for 5 SGD steps with momentum and weight decay. The
 * trunk is a ResNet-18 with LayerNorm (VISSL's RESNETS.NORM: LayerNorm), whose normalisation is
 * per sample, so the global batch's gradient is exactly the mean of the two halves' means and
 * the only difference left is the order of float sums. Each rank starts from another seed: the
 * broadcast of rank 0's model at the start is what makes them one model. Checked:
 *   - after every step both ranks hold the same bits (they stay one model);
 *   - the weights after 5 steps match the single trainer's within fp32 rounding (relative to
 *     the largest update), and so do the logged losses (the mean over the ranks);
 *   - only rank 0 writes: stdout.json has one line per step, not one per rank.
 */
#include "collective.h"
#include "model.h"
#include "record.h"
#include "safetensors.h"
#include "ring.h"
#include "train/trainer.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS 5
#define GLOBAL_BATCH 8
#define SIDE 16
#define MAX_VALUES ((size_t)12 << 20) /* a ResNet-18 and its head: 11.2 M parameters */

/* What each trainer leaves: its parameters after the last step, its logged losses, its error. */
typedef struct {
    int ok;
    size_t n;
    double loss[STEPS];
    char err[600];
    float params[MAX_VALUES];
} result;

static result *g_res; /* [0]: the single trainer; [1], [2]: ranks 0 and 1 */
static float *g_init; /* the single trainer's parameters before its first step */

static void setup(void)
{
    g_res = mmap(NULL, 3 * sizeof *g_res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    g_init =
        mmap(NULL, MAX_VALUES * sizeof *g_init, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(g_res != MAP_FAILED && g_init != MAP_FAILED);
}

static void teardown(void)
{
    munmap(g_res, 3 * sizeof *g_res);
    munmap(g_init, MAX_VALUES * sizeof *g_init);
}

TestSuite(ddp, .init = setup, .fini = teardown);

/* Image value i of global row `row` at step `step`, and the row's label. */
static float pixel(int step, int row, size_t i)
{
    uint32_t h = (uint32_t)(step * 1000003 + row * 7919) ^ (uint32_t)(i * 2654435761u);
    h = h * 1664525u + 1013904223u;
    return (float)(h >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* The batch record of `step` for `rank` of `world`: global rows rank, rank + world, … (0 when
 * it does not fit). */
static size_t batch_record(int step, int rank, int world, void *buf, size_t cap)
{
    int n = GLOBAL_BATCH / world;
    size_t per = 3 * SIDE * SIDE;
    float *images = xmalloc((size_t)n * per * sizeof *images);
    int64_t labels[GLOBAL_BATCH], index[GLOBAL_BATCH];
    for (int k = 0; k < n; k++) {
        int row = rank + k * world;
        for (size_t i = 0; i < per; i++)
            images[(size_t)k * per + i] = pixel(step, row, i);
        labels[k] = (row * 3 + step) % 10;
        index[k] = step * GLOBAL_BATCH + row;
    }
    rec_writer w;
    uint64_t ishape[4] = {(uint64_t)n, 3, SIDE, SIDE}, lshape[1] = {(uint64_t)n};
    bool ok = rec_writer_init(&w, buf, cap, REC_DATA, (uint64_t)step, 0, 3) == 0 &&
              rec_add_copy(&w, "data.0", REC_F32, 4, ishape, images) == 0 &&
              rec_add_copy(&w, "label.0", REC_I64, 1, lshape, labels) == 0 &&
              rec_add_copy(&w, "data_idx.0", REC_I64, 1, lshape, index) == 0;
    free(images);
    return ok ? rec_finish(&w) : 0;
}

static char *config_yaml(int world, int seed, const char *dir)
{
    return xasprintf(
        "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: %d}\n  MACHINE: {DEVICE: cpu}\n  SEED_VALUE: %d\n"
        "  LOG_FREQUENCY: 1\n  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: %d}}\n"
        "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true, "
        "NORM: LayerNorm}}}\n"
        "    HEAD: {PARAMS: [[mlp, {dims: [512, 10]}]]}\n"
        "  LOSS: {name: CrossEntropyLoss}\n"
        "  OPTIMIZER: {name: sgd, momentum: 0.9, weight_decay: 0.0001, num_epochs: 1,\n"
        "    param_schedulers: {lr: {name: constant, value: 0.02}}}\n"
        "  CHECKPOINT: {DIR: '%s', CHECKPOINT_FREQUENCY: 1}\n",
        world, seed, GLOBAL_BATCH / world, dir);
}

/* The trainer's parameters into out (at most MAX_VALUES); how many. */
static size_t params_of(trainer *t, float *out)
{
    eng_tensor p = model_params(trainer_model(t));
    size_t n = (size_t)eng_numel(&p.shape);
    if (n <= MAX_VALUES)
        eng_download(trainer_backend(t), &p, out);
    return n;
}

/* One trainer's life (a forked child: no Criterion asserts here): build, STEPS steps, finish,
 * leave its parameters and losses in *res. */
static void trainer_main(result *res, int rank, int world, const char *world_name, const char *dir)
{
    char *yaml = config_yaml(world, 1 + 6 * rank, dir), *err = NULL;
    cfg_t cfg = {0};
    cfg_err cerr;
    coll_shm_options co = {.timeout_ms = 60000};
    trainer *t = NULL;
    coll *c = NULL;
    if (!test_compose(&cfg, &cerr, yaml, NULL))
        err = xstrdup(cerr.msg);
    else if (world > 1 && !(c = coll_shm_join(world_name, rank, world, &co, &err)))
        ;
    else {
        trainer_options o = {
            .rank = rank, .world_size = world, .world = c, .threads = 1, .steps_per_epoch = STEPS};
        if (!(t = trainer_new(cfg_map_get(cfg.root, "config"), &o, &cerr)))
            err = xstrdup(cerr.msg);
    }
    int rc = t ? 0 : -1;
    if (t && world == 1)
        params_of(t, g_init);
    size_t cap = 1 << 20, len;
    void *buf = aligned_alloc(64, cap);
    for (int step = 0; rc == 0 && step < STEPS; step++) {
        rec_view v;
        rc = (len = batch_record(step, rank, world, buf, cap)) && !rec_parse(buf, len, &v, &err) &&
                     !trainer_step(t, &v, 0, &err)
                 ? 0
                 : -1;
        if (rc == 0)
            res->loss[step] = trainer_last_loss(t);
    }
    rc = rc ? rc : trainer_finish(t, false, &err);
    if (rc == 0 && (res->n = params_of(t, res->params)) > MAX_VALUES)
        rc = -1, err = xstrdup("more parameters than the test holds");
    snprintf(res->err, sizeof res->err, "%s", err ? err : "");
    res->ok = rc == 0;
    _exit(rc == 0 ? 0 : 1);
}

static pid_t start(result *res, int rank, int world, const char *world_name, const char *dir)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0)
        trainer_main(res, rank, world, world_name, dir);
    return pid;
}

static int count_lines(const char *path)
{
    size_t len;
    char *text = read_whole_file(path, &len);
    int n = 0;
    for (size_t i = 0; text && i < len; i++)
        n += text[i] == '\n';
    free(text);
    return n;
}

Test(ddp, two_trainers_of_batch_4_are_one_trainer_of_batch_8, .timeout = 300)
{
    char *one = test_make_tmpdir(), *two = test_make_tmpdir(), *name = ring_name("ddptest");
    memset(g_res, 0, 3 * sizeof *g_res);
    pid_t single = start(&g_res[0], 0, 1, NULL, one);
    cr_assert_eq(test_wait_child(single, 240000), 0, "the single trainer: %s", g_res[0].err);
    pid_t r0 = start(&g_res[1], 0, 2, name, two), r1 = start(&g_res[2], 1, 2, name, two);
    int s0 = test_wait_child(r0, 240000), s1 = test_wait_child(r1, 240000);
    cr_assert(s0 == 0 && s1 == 0, "rank 0: %s\nrank 1: %s", g_res[1].err, g_res[2].err);

    const result *a = &g_res[0], *b = &g_res[1], *c = &g_res[2];
    cr_assert_eq(b->n, a->n);
    cr_assert_eq(c->n, a->n);
    cr_assert_arr_eq(b->params, c->params, a->n * sizeof(float), "the two ranks are no longer one model");
    for (int k = 0; k < STEPS; k++) {
        cr_expect_eq(b->loss[k], c->loss[k], "step %d: the ranks log different losses", k);
        cr_expect_leq(fabs(b->loss[k] - a->loss[k]), 1e-5 * fabs(a->loss[k]),
                      "step %d: loss %.9g, one trainer's %.9g", k, b->loss[k], a->loss[k]);
    }
    /* Against the update w5 - w0 (rank 0's seed is the single trainer's: one starting model). */
    double worst = 0, top = 0;
    for (size_t i = 0; i < a->n; i++) {
        worst = fmax(worst, fabs((double)b->params[i] - (double)a->params[i]));
        top = fmax(top, fabs((double)a->params[i] - (double)g_init[i]));
    }
    cr_expect_gt(top, 1e-3, "the single trainer hardly moved (largest update %.3g)", top);
    cr_expect_leq(worst, 1e-4 * top, "largest difference %.3g against the largest update %.3g", worst, top);
    if (getenv("DDP_VERBOSE"))
        fprintf(stderr, "ddp: largest difference %.3g, largest update %.3g (%.2g of it)\n", worst, top,
                worst / top);

    char *json = xasprintf("%s/stdout.json", two);
    cr_expect_eq(count_lines(json), STEPS, "stdout.json: one line per step, written by rank 0 alone");
    free(json);
    char *shm = xasprintf("/dev/shm/%s", name);
    cr_expect_neq(access(shm, F_OK), 0, "%s was left behind", shm);
    free(shm);
    test_rm_rf(one), test_rm_rf(two);
    free(one), free(two), free(name);
}

/* ---- under selfsup run ------------------------------------------------------------------------- */

/* `selfsup run quickstart/supervised` on a small Fashion-MNIST (LayerNorm trunk, 2 epochs of
 * 4 steps, a test phase after each) with `procs` trainers of `batch` images, then `extra`
 * overrides; its folders under dir (CHECKPOINT.DIR "one" or "two", run_1 or run_2). */
static char *supervised_cmd(const char *dir, int procs, int batch, const char *extra)
{
    char *bin = test_build_path("selfsup"), *configs = test_path("configs");
    char *cmd = xasprintf(
        "SELFSUP_CONFIGS='%s' '%s' run quickstart/supervised "
        "config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy] "
        "config.DATA.TRAIN.LABEL_PATHS=[%s/fm/disk_filelist/train_labels.npy] "
        "config.DATA.TEST.DATA_PATHS=[%s/fm/disk_filelist/val_images.npy] "
        "config.DATA.TEST.LABEL_PATHS=[%s/fm/disk_filelist/val_labels.npy] "
        "config.DATA.TRAIN.DATA_LIMIT=256 config.DATA.TEST.DATA_LIMIT=128 "
        "config.DATA.NUM_DATALOADER_WORKERS=1 "
        "config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.NORM=LayerNorm "
        "config.OPTIMIZER.param_schedulers.lr.values=[0.001,0.0001] "
        "config.OPTIMIZER.param_schedulers.lr.auto_lr_scaling.auto_scale=false config.LOG_FREQUENCY=1 "
        "config.DISTRIBUTED.NUM_PROC_PER_NODE=%d config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=%d "
        "config.DATA.TEST.BATCHSIZE_PER_REPLICA=%d config.CHECKPOINT.DIR=%s/%s %s --run-dir %s/run_%d",
        configs, bin, dir, dir, dir, dir, procs, batch, batch, dir, procs == 1 ? "one" : "two", extra, dir,
        procs);
    free(bin), free(configs);
    return cmd;
}

/* The run of supervised_cmd: its exit status, its output in *out. */
static int supervised_run(const char *dir, int procs, int batch, const char *extra, char **out)
{
    char *cmd = supervised_cmd(dir, procs, batch, extra);
    int rc = test_run_within(cmd, 300, out);
    free(cmd);
    return rc;
}

static void make_fashion_mnist(const char *dir)
{
    char *bin = test_build_path("selfsup"), *out;
    char *cmd = xasprintf("'%s' dataset fashion-mnist %s/fm --limit 256", bin, dir);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    free(out), free(cmd), free(bin);
}

/* The largest difference between two checkpoints' model tensors, and the largest value. */
static void compare_checkpoints(const char *a_path, const char *b_path, double *worst, double *top)
{
    st_file *a, *b;
    char *err = NULL;
    cr_assert_eq(st_open(a_path, &a, &err), 0, "%s", err);
    cr_assert_eq(st_open(b_path, &b, &err), 0, "%s", err);
    cr_assert_eq(st_count(a), st_count(b));
    *worst = *top = 0;
    for (size_t i = 0; i < st_count(a); i++) {
        const st_tensor *x = st_at(a, i), *y = st_find(b, x->name);
        cr_assert(y && y->nbytes == x->nbytes, "%s", x->name);
        if (x->dtype != ST_F32 || !strncmp(x->name, "optimizer.", 10)) /* the model's tensors */
            continue;
        const float *p = x->data, *q = y->data;
        for (size_t k = 0; k < x->nbytes / sizeof(float); k++) {
            *worst = fmax(*worst, fabs((double)p[k] - (double)q[k]));
            *top = fmax(*top, fabs((double)p[k]));
        }
    }
    st_close(a), st_close(b);
}

/* The numbers in a JSON-lines file under `key` ("loss" in stdout.json), in order; how many. */
static int json_numbers(const char *path, const char *key, double *out, int max)
{
    size_t len;
    char *text = read_whole_file(path, &len);
    int n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line && n < max; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *v = j ? json_object_get(j, key) : NULL;
        if (json_is_number(v))
            out[n++] = json_number_value(v);
        json_decref(j);
    }
    free(text);
    return n;
}

/* Every accuracy in a metrics.json, in order ("top_1" and "top_5" of each line's meter). */
static int accuracies(const char *path, double *out, int max)
{
    size_t len;
    char *text = read_whole_file(path, &len);
    int n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL), *meter;
        const char *name;
        json_object_foreach(j, name, meter)
        {
            if (!strstr(name, "accuracy_list_meter"))
                continue;
            for (int k = 0; k < 2 && n < max; k++) {
                json_t *top = json_object_get(json_object_get(meter, k ? "top_5" : "top_1"), "0");
                out[n++] = json_number_value(top);
            }
        }
        json_decref(j);
    }
    free(text);
    return n;
}

/* VISSL's promise, through the whole pipeline: 2 trainers of batch 32, each fed its rank's
 * DistributedSampler shard by a chain of its own, train the model 1 trainer of batch 64 trains
 * (the same samples per step, the same augmentations, the same global batch), and log the
 * same losses (the mean over the ranks) and accuracies (counts summed over the ranks), up to
 * fp32's order of sums. Measured: losses within 8e-6 relative, weights within 4.2e-6 of the
 * largest weight after 8 steps; an accuracy may differ by one sample where two logits tie to
 * fp32 precision. */
Test(ddp, selfsup_run_with_two_trainers_trains_the_model_one_trainer_trains, .timeout = 600)
{
    char *dir = test_make_tmpdir(), *out;
    make_fashion_mnist(dir);
    int rc = supervised_run(dir, 1, 64, "", &out);
    cr_assert_eq(rc, 0, "one trainer: %s", out);
    free(out);
    rc = supervised_run(dir, 2, 32, "", &out);
    cr_assert_eq(rc, 0, "two trainers: %s", out);
    cr_expect(strstr(out, "14 stages, 12 rings"), "a chain per trainer and its test chain: %s", out);
    free(out);
    char *m1 = xasprintf("%s/one/metrics.json", dir), *m2 = xasprintf("%s/two/metrics.json", dir);
    double acc1[16], acc2[16];
    int na = accuracies(m1, acc1, 16);
    cr_assert_eq(na, 8, "2 train and 2 test phases, top-1 and top-5 each");
    cr_assert_eq(accuracies(m2, acc2, 16), na);
    for (int k = 0; k < na; k++) /* one sample of 256 is 0.39 points */
        cr_expect_leq(fabs(acc1[k] - acc2[k]), 0.4, "accuracy %d: %.4f and %.4f", k, acc1[k], acc2[k]);
    char *s1 = xasprintf("%s/one/stdout.json", dir), *s2 = xasprintf("%s/two/stdout.json", dir);
    double l1[16], l2[16];
    int nl = json_numbers(s1, "loss", l1, 16);
    cr_assert_eq(nl, 8, "8 steps logged by the single trainer");
    cr_assert_eq(json_numbers(s2, "loss", l2, 16), nl, "8 steps logged, by rank 0 alone");
    for (int k = 0; k < nl; k++)
        cr_expect_leq(fabs(l1[k] - l2[k]), 1e-4 * fabs(l1[k]), "step %d: loss %.9g against %.9g", k + 1,
                      l2[k], l1[k]);
    free(s1), free(s2);
    char *c1 = xasprintf("%s/one/model_final_checkpoint_phase2.torch", dir),
         *c2 = xasprintf("%s/two/model_final_checkpoint_phase2.torch", dir);
    double worst, top;
    compare_checkpoints(c1, c2, &worst, &top);
    cr_expect_leq(worst, 2e-5 * top, "final weights: largest difference %.3g, largest value %.3g", worst,
                  top);
    if (getenv("DDP_VERBOSE"))
        fprintf(stderr, "ddp run: largest difference %.3g, largest value %.3g\n", worst, top);
    free(m1), free(m2), free(c1), free(c2);
    test_rm_rf(dir);
    free(dir);
}

/* Whether a process whose command line mentions `tag` still runs (zombies aside). */
static bool process_mentioning(const char *tag)
{
    /* "[x]" for the first character: the pattern matches the tag, but not the shell running
     * pgrep, whose command line holds the pattern, not the tag */
    char *cmd = xasprintf("pgrep -f -- '[%c]%s' >/dev/null", tag[0], tag + 1);
    bool found = system(cmd) == 0;
    free(cmd);
    return found;
}

/* kill -9 of a trainer mid-run: its peer learns of it in its collective, the run stops naming
 * the trainer (exit 1), and no stage outlives it. */
Test(ddp, a_trainer_killed_mid_run_stops_the_run_naming_it, .timeout = 300)
{
    char *dir = test_make_tmpdir(), *out;
    make_fashion_mnist(dir);
    char *killer =
        xasprintf("(for i in $(seq 1200); do grep -q 'iter: 2;' %s/run_2/logs/train.1.log 2>/dev/null && "
                  "break; sleep 0.1; done; pkill -9 -f -- '--id [t]rain.1 .*%s/two') & ",
                  dir, dir);
    char *run = supervised_cmd(dir, 2, 32, "config.OPTIMIZER.num_epochs=8");
    char *cmd = xasprintf("%s %s; rc=$?; wait; exit $rc", killer, run);
    int rc = test_run_within(cmd, 280, &out);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "stage train.1 (pid ") && strstr(out, "was killed by signal 9"), "%s", out);
    char *tag = xasprintf("%s/two", dir);
    for (int i = 0; i < 100 && process_mentioning(tag); i++)
        usleep(20000);
    cr_expect(!process_mentioning(tag), "a stage outlived the run");
    char *peer_log = xasprintf("%s/run_2/logs/train.0.log", dir), *text;
    size_t n;
    text = read_whole_file(peer_log, &n);
    cr_expect(text && strstr(text, "rank 1 (pid "), "the peer should name rank 1:\n%s",
              text ? text : "(no log)");
    free(text), free(peer_log), free(tag), free(cmd), free(run), free(killer), free(out);
    test_rm_rf(dir);
    free(dir);
}
