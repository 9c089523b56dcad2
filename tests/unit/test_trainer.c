/*
 * test_trainer.c — the training task (stages/train/trainer.c) end to end on batch records,
 * against VISSL's way in PyTorch float64 (tests/golden/make_train_fixtures.py).
 *
 * Each case composes a real config, builds the trainer from it, sets the model by the closed
 * formulas the fixture script uses (model_init_formula), feeds it the fixture's batch records
 * (uint8 crops with the `normalize` rows, as the collate stage writes them) and compares the
 * loss of every step (relative 1e-4) and the weight updates w5 − w0 of every trained tensor
 * (relative to the largest, 1e-3), each at least 3x torch's own float32 error. Cases: SimCLR
 * with SGD + LARC and a cosine LR read per step; cross-entropy with Nesterov SGD and a
 * multistep LR read per epoch over five epochs (with their checkpoints and metrics.json);
 * AdamW. Then the files a run leaves, and the refusals that stop a run before it starts.
 * TRAINER_VERBOSE=1 prints the measured errors.
 */
#include "config.h"
#include "model.h"
#include "npy.h"
#include "record.h"
#include "train/loss.h"
#include "train/trainer.h"
#include "util.h"
#include "weights.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <jansson.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS 5

#define BASE                                                                                                    \
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n"                                        \
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4}}\n"
#define MODEL_PART                                                                                              \
    "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"             \
    "    FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: true, FREEZE_TRUNK_ONLY: true}\n"
#define COMMON BASE "  MACHINE: {DEVICE: cpu}\n" MODEL_PART
#define SIMCLR_MODEL                                                                                            \
    "    HEAD: {PARAMS: [[mlp, {dims: [512, 64], use_relu: true}], [mlp, {dims: [64, 16]}]]}\n"                  \
    "  LOSS: {name: simclr_info_nce_loss, simclr_info_nce_loss: {temperature: 0.1, buffer_params: {embedding_dim: "  \
    "16}}}\n"

static const char *const CASE_YAML[] = {
    COMMON SIMCLR_MODEL
    "  OPTIMIZER: {name: sgd, use_larc: true, larc_config: {trust_coefficient: 0.02}, weight_decay: 0.0001,\n"
    "    momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n",

    COMMON "    HEAD: {PARAMS: [[mlp, {dims: [512, 10]}]]}\n"
    "  LOSS: {name: CrossEntropyLoss}\n"
    "  OPTIMIZER: {name: sgd, nesterov: true, weight_decay: 0.0005, momentum: 0.9, num_epochs: 5,\n"
    "    param_schedulers: {lr: {name: multistep, values: [0.1, 0.01, 0.001], milestones: [2, 4],\n"
    "      update_interval: epoch}}}\n",

    COMMON SIMCLR_MODEL
    "  OPTIMIZER: {name: adamw, weight_decay: 0.05, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: constant, value: 0.01}}}\n",
};

/* SwAV (make_train_fixtures.py's SWAV): multi-crop batches, the queue from iteration 2, hard
 * assignments at iteration 0, prototypes0 frozen at iteration 1, prototypes normalised. */
static const char SWAV_YAML[] =
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: multicrop_collator}}\n" MODEL_PART
    "    HEAD: {PARAMS: [[swav_head, {dims: [512, 32, 16], use_bn: true, num_clusters: [20, 12]}]]}\n"
    "    TEMP_FROZEN_PARAMS_ITER_MAP: [[module.heads.0.prototypes0.weight, 2]]\n"
    "  LOSS: {name: swav_loss, swav_loss: {num_crops: 4, temp_hard_assignment_iters: 1, crops_for_assign: [0, 1],\n"
    "    queue: {queue_length: 8, start_iter: 2}}}\n"
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n";

/* MoCo (make_train_fixtures.py's MOCO): moco_collator batches, a queue of 16 keys, the momentum
 * encoder at 0.9. */
static const char MOCO_YAML[] =
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: moco_collator}}\n" MODEL_PART
    "    HEAD: {PARAMS: [[mlp, {dims: [512, 64], use_relu: true}], [mlp, {dims: [64, 16]}]]}\n"
    "  LOSS: {name: moco_loss, moco_loss: {embedding_dim: 16, queue_size: 16, momentum: 0.9, temperature: 0.2}}\n"
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n";

/* NPID (make_train_fixtures.py's NPID): a memory bank of 32 samples, 8 negatives; loss_type %s. */
#define NPID_YAML(type)                                                                                         \
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"              \
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4}}\n" MODEL_PART                                                    \
    "    HEAD: {PARAMS: [[mlp, {dims: [512, 64], use_relu: true}], [mlp, {dims: [64, 16]}]]}\n"                  \
    "  LOSS: {name: nce_loss_with_memory, nce_loss_with_memory: {loss_type: " type ", num_train_samples: 32,\n"   \
    "    negative_sampling_params: {num_negatives: 8}, memory_params: {embedding_dim: 16}}}\n"                     \
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"                             \
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n"

/* PIRL (make_train_fixtures.py's pirl): patches and images through one trunk, a head each, the
 * NCE loss on both outputs, the memory updated by the images' only. */
static const char PIRL_YAML[] =
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: patch_and_image_collator,\n"
    "    INPUT_KEY_NAMES: [patches, images]}}\n" MODEL_PART
    "    MULTI_INPUT_HEAD_MAPPING: [[patches, [flatten]], [images, [flatten]]]\n"
    "    HEAD: {PARAMS: [[[mlp, {dims: [512, 16]}], [siamese_concat_view, {num_towers: 9}], [mlp, {dims: [144, 16]}]],\n"
    "      [[mlp, {dims: [512, 16]}]]]}\n"
    "  LOSS: {name: nce_loss_with_memory, nce_loss_with_memory: {num_train_samples: 32, loss_weights: [0.5, 0.5],\n"
    "    update_mem_with_emb_index: 1, negative_sampling_params: {num_negatives: 8},\n"
    "    memory_params: {embedding_dim: 16, update_mem_on_forward: false}}}\n"
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n";

/* SwAV with a momentum network (make_train_fixtures.py's SWAVM), on swav_queue's batches. */
static const char SWAV_MOMENTUM_YAML[] =
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: multicrop_collator}}\n" MODEL_PART
    "    HEAD: {PARAMS: [[swav_head, {dims: [512, 32, 16], use_bn: true, num_clusters: [20, 12]}]]}\n"
    "  LOSS: {name: swav_momentum_loss, swav_momentum_loss: {num_crops: 4, crops_for_assign: [0, 1], momentum: 0.9,\n"
    "    momentum_eval_mode_iter_start: 2, queue: {queue_length: 8, start_iter: 2}}}\n"
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n";

static npy_array load(const char *kase, const char *what) { return test_fixture_npy("train", kase, what); }

/* A records file as one of the trainer's other inputs (test phases, DeepClusterV2's memory pass). */
typedef struct {
    int fd;
    rec_buf buf;
} rec_file_input;

static int read_record(void *ctx, rec_view *v)
{
    rec_file_input *in = ctx;
    char *err = NULL;
    int rc = rec_fd_read(in->fd, &in->buf, v, NULL, &err);
    free(err);
    return rc == 1 && v->hdr->kind == REC_DATA ? 1 : -1;
}

static void record_done(void *ctx) { (void)ctx; }

/* The composed config with CHECKPOINT.DIR = dir (and `memory` as the memory pass's input);
 * kept alive in *cfg. Its engine runs `threads` threads. */
static trainer *make_trainer_threads(const char *yaml, const char *dir, int64_t steps, bool resume,
                                     const char *extra, const trainer_test_input *memory, int threads, cfg_t *cfg)
{
    char *full = xasprintf("%s  CHECKPOINT: {DIR: '%s', AUTO_RESUME: %s%s}\n", yaml, dir, resume ? "true" : "false",
                           extra);
    cfg_err err;
    *cfg = (cfg_t){0};
    cr_assert(test_compose(cfg, &err, full, NULL), "%s", err.msg);
    free(full);
    trainer_options o = {.world_size = 1, .threads = threads, .steps_per_epoch = steps, .memory_input = memory};
    trainer *t = trainer_new(cfg_map_get(cfg->root, "config"), &o, &err);
    cr_assert(t, "%s", err.msg);
    return t;
}

static trainer *make_trainer_full(const char *yaml, const char *dir, int64_t steps, bool resume, const char *extra,
                                  const trainer_test_input *memory, cfg_t *cfg)
{
    return make_trainer_threads(yaml, dir, steps, resume, extra, memory, 2, cfg);
}

static trainer *make_trainer_with(const char *yaml, const char *dir, int64_t steps, bool resume, const char *extra,
                                  cfg_t *cfg)
{
    return make_trainer_full(yaml, dir, steps, resume, extra, NULL, cfg);
}

static trainer *make_trainer(const char *yaml, const char *dir, int64_t steps, bool resume, cfg_t *cfg)
{
    return make_trainer_with(yaml, dir, steps, resume, "", cfg);
}

/* Every trained (head) parameter, flattened in state-dict order. */
static float *trained_values(trainer *t, size_t *n)
{
    model *m = trainer_model(t);
    *n = 0;
    float *all = NULL;
    for (int i = 0; i < model_entry_count(m); i++) {
        const eng_entry *e = model_entry_at(m, i);
        if (e->kind != ENG_PARAM || strncmp(e->name, "heads.", 6))
            continue;
        size_t k = (size_t)eng_numel(&e->value.shape);
        all = realloc(all, (*n + k) * sizeof *all);
        eng_download(trainer_backend(t), &e->value, all + *n);
        *n += k;
    }
    return all;
}

/* The case's records through trainer_step; the loss after each. */
static void feed(trainer *t, const char *kase, double losses[STEPS])
{
    char *file = xasprintf("%s_batches.rec", kase), *path = test_fixture("train", file), *err = NULL;
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0, "%s", path);
    rec_buf buf = {0};
    rec_view v;
    int k = 0, rc;
    while ((rc = rec_fd_read(fd, &buf, &v, NULL, &err)) == 1 && v.hdr->kind == REC_DATA) {
        cr_assert_lt(k, STEPS);
        cr_assert_eq(trainer_step(t, &v, v.hdr->epoch, &err), 0, "%s step %d: %s", kase, k, err);
        losses[k++] = trainer_last_loss(t);
    }
    cr_assert_neq(rc, -1, "%s", err);
    cr_assert_eq(k, STEPS);
    cr_assert_eq(trainer_finish(t, false, &err), 0, "%s", err);
    rec_buf_free(&buf);
    close(fd);
    free(path);
    free(file);
}

/* The losses of the five steps and the update w1 − w0 against the case's fixture. */
static void check_training(const char *kase, const double losses[STEPS], const float *w0, const float *w1, size_t n)
{
    npy_array want_loss = load(kase, "loss"), delta = load(kase, "delta"), floor = load(kase, "floor");
    const double *fl = floor.data;
    double loss_tol = fmax(1e-4, 3 * fl[0]), update_tol = fmax(1e-3, 3 * fl[1]);
    for (int k = 0; k < STEPS; k++) {
        double w = ((const double *)want_loss.data)[k];
        cr_expect_leq(fabs(losses[k] - w), loss_tol * fabs(w), "%s step %d: loss %.9g, VISSL's %.9g", kase, k,
                      losses[k], w);
    }
    cr_assert_eq(n, delta.count, "%s: trained values", kase);
    double worst = 0.0, top = 0.0, err2 = 0.0, ref2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)w1[i] - (double)w0[i], r = ((const double *)delta.data)[i];
        worst = fmax(worst, fabs(d - r));
        top = fmax(top, fabs(r));
        err2 += (d - r) * (d - r), ref2 += r * r;
    }
    size_t strays = 0;
    for (size_t i = 0; i < n; i++)
        strays += fabs((double)w1[i] - (double)w0[i] - ((const double *)delta.data)[i]) > update_tol * top;
    if (getenv("TRAINER_VERBOSE")) {
        double lw = 0.0;
        for (int k = 0; k < STEPS; k++)
            lw = fmax(lw, fabs(losses[k] - ((const double *)want_loss.data)[k]) / fabs(((const double *)want_loss.data)[k]));
        fprintf(stderr, "trainer: %-14s loss error %.3g, update error %.3g (torch fp32: %.3g, %.3g)\n", kase, lw,
                worst / top, fl[0], fl[1]);
    }
    cr_expect_gt(top, 0.0);
    if (strncmp(kase, "adam", 4) != 0) {
        cr_expect_leq(worst, update_tol * top, "%s: update error %g of %g (tolerance %g)", kase, worst, top, update_tol);
    } else {
        /* Adam divides each gradient by its own running RMS, so an element whose gradient is
         * near eps turns a rounding difference in the convolutions (which differ between
         * CPUs) into a visible one: the update is held to its norm, and at most one element
         * in 10,000 may stray past the element bound. */
        cr_expect_leq(sqrt(err2), update_tol * sqrt(ref2), "%s: update error %g in norm of %g (tolerance %g)", kase,
                      sqrt(err2), sqrt(ref2), update_tol);
        cr_expect_leq(strays * 10000, n, "%s: %zu of %zu elements off by more than %g (worst %g)", kase, strays, n,
                      update_tol * top, worst);
    }
    npy_close(&want_loss), npy_close(&delta), npy_close(&floor);
}

/* Train trainer t (fresh, formula weights) on the case's records and check it. */
static void train_and_check(trainer *t, const char *kase)
{
    model_init_formula(trainer_backend(t), trainer_model(t));
    size_t n0, n1;
    float *w0 = trained_values(t, &n0);
    double losses[STEPS];
    feed(t, kase, losses);
    float *w1 = trained_values(t, &n1);
    cr_assert_eq(n0, n1);
    check_training(kase, losses, w0, w1, n1);
    free(w0), free(w1);
}

static void run_case(int which, const char *kase, int64_t steps_per_epoch, char **dir_out)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    trainer *t = make_trainer(CASE_YAML[which], dir, steps_per_epoch, false, &cfg);
    train_and_check(t, kase);
    trainer_free(t);
    cfg_destroy(&cfg);
    if (dir_out)
        *dir_out = dir;
    else
        test_rm_dir(dir);
}

Test(trainer, simclr_sgd_larc_cosine_matches_vissl, .timeout = 300) { run_case(0, "simclr_larc", 5, NULL); }

Test(trainer, adamw_matches_torch, .timeout = 300) { run_case(2, "adamw", 5, NULL); }

/* The loss state's tensor `name`. */
static const eng_entry *loss_entry(trainer *t, const char *name)
{
    const eng_entry *e;
    int n = loss_state_entries(trainer_loss_state(t), &e);
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name))
            return &e[i];
    cr_assert_fail("the loss state has no %s", name);
    return NULL;
}

/* The fixture's starting embedding queue into the trainer's loss state (VISSL's torch.rand draw). */
static void set_swav_queue(trainer *t)
{
    npy_array q = load("swav_queue", "queue0");
    const eng_entry *e = loss_entry(t, "loss.swav_criterion.local_emb_queue");
    cr_assert_eq(q.count, (size_t)eng_numel(&e->value.shape));
    eng_upload(trainer_backend(t), &e->value, q.data);
    npy_close(&q);
}

/* SwAV through the trainer: the loss's state and both hooks at their moments, against VISSL's
 * step order in float64. */
Test(trainer, swav_with_queue_and_hooks_matches_vissl, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    trainer *t = make_trainer(SWAV_YAML, dir, 5, false, &cfg);
    model_init_formula(trainer_backend(t), trainer_model(t));
    set_swav_queue(t);
    size_t n0, n1;
    float *w0 = trained_values(t, &n0);
    double losses[STEPS];
    feed(t, "swav_queue", losses);
    float *w1 = trained_values(t, &n1);
    cr_assert_eq(n0, n1);
    check_training("swav_queue", losses, w0, w1, n1);
    cr_expect_eq(loss_state_iterations(trainer_loss_state(t)), STEPS);
    free(w0), free(w1);
    trainer_free(t);
    cfg_destroy(&cfg);
    test_rm_dir(dir);
}

/* The largest difference between float values and a float64 fixture, relative to its largest. */
static double relative_error(const float *got, const npy_array *want, size_t n)
{
    cr_assert_eq(n, want->count);
    double worst = 0.0, top = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)got[i] - ((const double *)want->data)[i]));
        top = fmax(top, fabs(((const double *)want->data)[i]));
    }
    return worst / top;
}

/* The head parameters of the loss state's encoder named by prefix ("loss.moco_encoder.heads."), in
 * state-dict order. */
static float *encoder_heads(trainer *t, const char *prefix, size_t *n)
{
    const eng_entry *e;
    int ne = loss_state_entries(trainer_loss_state(t), &e);
    float *all = NULL;
    *n = 0;
    for (int i = 0; i < ne; i++) {
        if (strncmp(e[i].name, prefix, strlen(prefix)) || strstr(e[i].name, "running_"))
            continue;
        size_t k = (size_t)eng_numel(&e[i].value.shape);
        all = realloc(all, (*n + k) * sizeof *all);
        eng_download(trainer_backend(t), &e[i].value, all + *n);
        *n += k;
    }
    return all;
}

/* A fresh trainer of yaml (formula weights) whose loss state `entry` starts at the case's fixture
 * `start`: the reference's random start (a queue, a memory bank). */
static trainer *trainer_from(const char *yaml, const char *dir, const char *kase, const char *entry,
                             const char *start, cfg_t *cfg)
{
    trainer *t = make_trainer(yaml, dir, 5, false, cfg);
    model_init_formula(trainer_backend(t), trainer_model(t));
    npy_array a = load(kase, start);
    const eng_entry *e = loss_entry(t, entry);
    cr_assert_eq(a.count, (size_t)eng_numel(&e->value.shape), "%s: %s", kase, entry);
    eng_upload(trainer_backend(t), &e->value, a.data);
    npy_close(&a);
    return t;
}

/* MoCo through the trainer: the loss, the queue the keys fill, and the momentum encoder that
 * follows the model, against VISSL's MoCoHook and MoCoLoss in float64. */
Test(trainer, moco_with_its_queue_and_momentum_encoder_matches_vissl, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    trainer *t = trainer_from(MOCO_YAML, dir, "moco", "loss.queue", "queue0", &cfg);
    size_t n0, n1, ne, nq = (size_t)eng_numel(&loss_entry(t, "loss.queue")->value.shape);
    float *w0 = trained_values(t, &n0);
    double losses[STEPS];
    feed(t, "moco", losses);
    float *w1 = trained_values(t, &n1), *enc = encoder_heads(t, "loss.moco_encoder.heads.", &ne),
          *q = xmalloc(nq * sizeof *q), ptr;
    cr_assert_eq(n0, n1);
    check_training("moco", losses, w0, w1, n1);
    eng_download(trainer_backend(t), &loss_entry(t, "loss.queue")->value, q);
    eng_download(trainer_backend(t), &loss_entry(t, "loss.queue_ptr")->value, &ptr);
    npy_array want_q = load("moco", "queue"), want_enc = load("moco", "enc");
    double eq = relative_error(q, &want_q, nq), ee = relative_error(enc, &want_enc, ne);
    if (getenv("TRAINER_VERBOSE"))
        fprintf(stderr, "trainer: moco queue error %.3g, encoder error %.3g\n", eq, ee);
    cr_expect_leq(eq, 1e-3, "the queue after 5 steps: error %g", eq);
    cr_expect_leq(ee, 1e-3, "the momentum encoder's heads after 5 steps: error %g", ee);
    cr_expect_eq(ptr, 4.0f, "5 batches of 4 keys into a queue of 16 leave the pointer at 4, not %g", (double)ptr);
    npy_close(&want_q), npy_close(&want_enc);
    free(w0), free(w1), free(enc), free(q);
    trainer_free(t);
    cfg_destroy(&cfg);
    test_rm_dir(dir);
}

/* NPID through the trainer: the scores against the memory bank, Z from the first batch, the
 * NCE criterion (or InfoNCE), the memory's update, against VISSL's NCELossWithMemory in float64
 * with the negatives selfsup draws. */
static void check_npid(const char *yaml, const char *kase)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    trainer *t = trainer_from(yaml, dir, kase, "loss.nce_average.memory", "memory0", &cfg);
    size_t n0, n1, nm = (size_t)eng_numel(&loss_entry(t, "loss.nce_average.memory")->value.shape);
    float *w0 = trained_values(t, &n0), *mem = xmalloc(nm * sizeof *mem), params[4];
    double losses[STEPS];
    feed(t, kase, losses);
    float *w1 = trained_values(t, &n1);
    cr_assert_eq(n0, n1);
    check_training(kase, losses, w0, w1, n1);
    eng_download(trainer_backend(t), &loss_entry(t, "loss.nce_average.memory")->value, mem);
    eng_download(trainer_backend(t), &loss_entry(t, "loss.nce_average.params")->value, params);
    npy_array want_m = load(kase, "memory");
    double em = relative_error(mem, &want_m, nm);
    cr_expect_leq(em, 1e-3, "%s: the memory bank after 5 steps: error %g", kase, em);
    if (!strcmp(kase, "npid")) { /* the first batch's Z */
        npy_array z = load(kase, "z");
        double want_z = ((const double *)z.data)[0];
        cr_expect_leq(fabs(params[2] - want_z), 1e-4 * want_z, "Z %.9g, VISSL's %.9g", (double)params[2], want_z);
        npy_close(&z);
    }
    cr_expect(params[0] == 8.0f && params[1] == 0.07f && params[3] == 0.5f && (params[2] > 0) == !strstr(kase, "infonce"),
              "params [K, T, Z, momentum]: %g %g %g %g",
              (double)params[0], (double)params[1], (double)params[2], (double)params[3]);
    if (getenv("TRAINER_VERBOSE"))
        fprintf(stderr, "trainer: %s memory error %.3g, Z %.9g\n", kase, em, (double)params[2]);
    npy_close(&want_m);
    free(w0), free(w1), free(mem);
    trainer_free(t);
    cfg_destroy(&cfg);
    test_rm_dir(dir);
}

Test(trainer, npid_nce_with_its_memory_bank_matches_vissl, .timeout = 300)
{
    check_npid(NPID_YAML("nce"), "npid");
    check_npid(NPID_YAML("cross_entropy"), "npid_infonce");
}

/* PIRL: two inputs (patches.0, images.0) through the multi-input mapping, two NCE terms, one of
 * them updating the memory. */
Test(trainer, pirl_patches_and_images_match_vissl, .timeout = 300) { check_npid(PIRL_YAML, "pirl"); }

/* SwAV's momentum variant: the network follows the model (parameters by momentum, running
 * statistics copied), gives the codes and the queue's embeddings and scores, in train then eval
 * mode, against VISSL's SwAVMomentumLoss and its hooks in float64. */
Test(trainer, swav_momentum_matches_vissl, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    trainer *t = trainer_from(SWAV_MOMENTUM_YAML, dir, "swav_momentum", "loss.local_emb_queue", "queue0", &cfg);
    size_t n0, n1, ne;
    float *w0 = trained_values(t, &n0);
    double losses[STEPS];
    feed(t, "swav_queue", losses);
    float *w1 = trained_values(t, &n1), *enc = encoder_heads(t, "loss.momentum_encoder.heads.", &ne);
    cr_assert_eq(n0, n1);
    check_training("swav_momentum", losses, w0, w1, n1);
    npy_array want_enc = load("swav_momentum", "enc");
    double ee = relative_error(enc, &want_enc, ne);
    if (getenv("TRAINER_VERBOSE"))
        fprintf(stderr, "trainer: swav_momentum encoder error %.3g\n", ee);
    cr_expect_leq(ee, 1e-3, "the momentum network's heads after 5 steps: error %g", ee);
    npy_close(&want_enc);
    free(w0), free(w1), free(enc);
    trainer_free(t);
    cfg_destroy(&cfg);
    test_rm_dir(dir);
}

/* DeepClusterV2 (make_train_fixtures.py's DC): 8 samples, one batch of both crops per epoch, two
 * heads of 3 and 4 clusters on a bank each. */
#define DC_YAML(batch)                                                                                   \
    "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"              \
    "  TEST_MODEL: false\n"                                                                                    \
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: " batch ", LABEL_TYPE: sample_index, DROP_LAST: true,\n"            \
    "    COLLATE_FUNCTION: multicrop_collator, TRANSFORMS: [{name: ImgPilToMultiCrop, total_num_crops: 2,\n"        \
    "    size_crops: [16], num_crops: [2], crop_scales: [[0.5, 1]]}]}}\n"
#define DC_LOSS_AND_OPTIMIZER(epochs)                                                                            \
    "    HEAD: {PARAMS: [[mlp, {dims: [512, 64], use_relu: true}], [mlp, {dims: [64, 16]}]]}\n"                  \
    "  LOSS: {name: deepclusterv2_loss, deepclusterv2_loss: {num_train_samples: 8, temperature: 0.1,\n"           \
    "    num_clusters: [3, 4], kmeans_iters: 2, memory_params: {crops_for_mb: [0, 1], embedding_dim: 16}}}\n"      \
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: " epochs ",\n"                      \
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n"

/* A records fixture opened as an input for the trainer (`in` keeps the file; close it after). */
static trainer_test_input record_input(const char *file, rec_file_input *in)
{
    char *path = test_fixture("train", file);
    *in = (rec_file_input){.fd = open(path, O_RDONLY)};
    cr_assert(in->fd >= 0, "%s", path);
    free(path);
    return (trainer_test_input){.read = read_record, .done = record_done, .ctx = in};
}

static void record_input_close(rec_file_input *in)
{
    rec_buf_free(&in->buf);
    close(in->fd);
}

/* The loss state's tensor `name` against the case's float64 fixture `what`: the error relative
 * to the fixture's largest value. */
static double state_error(trainer *t, const char *name, const char *kase, const char *what)
{
    const eng_entry *e = loss_entry(t, name);
    size_t n = (size_t)eng_numel(&e->value.shape);
    float *got = xmalloc(n * sizeof *got);
    eng_download(trainer_backend(t), &e->value, got);
    npy_array want = load(kase, what);
    double err = relative_error(got, &want, n);
    npy_close(&want);
    free(got);
    return err;
}

/* DeepClusterV2 through the trainer: the memory pass, k-means at every epoch's start (selfsup's
 * first centroids), the loss over both heads, the banks' update, against VISSL's
 * DeepClusterV2Loss and its hooks in float64. The assignments must be VISSL's exactly. */
Test(trainer, deepclusterv2_with_its_memory_and_kmeans_matches_vissl, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    rec_file_input in;
    trainer_test_input memory = record_input("dc_memory.rec", &in);
    trainer *t = make_trainer_full(DC_YAML("8") MODEL_PART DC_LOSS_AND_OPTIMIZER("5"), dir, 1, false, "",
                                   &memory, &cfg);
    train_and_check(t, "dc");
    double em = state_error(t, "loss.local_memory_embeddings", "dc", "memory");
    const eng_entry *c1 = loss_entry(t, "loss.centroids1"), *as = loss_entry(t, "loss.assignments");
    size_t nc = (size_t)eng_numel(&c1->value.shape) + 3 * 16, na = (size_t)eng_numel(&as->value.shape);
    float *cents = xmalloc(nc * sizeof *cents), *assign = xmalloc(na * sizeof *assign);
    eng_download(trainer_backend(t), &loss_entry(t, "loss.centroids0")->value, cents);
    eng_download(trainer_backend(t), &c1->value, cents + 3 * 16);
    eng_download(trainer_backend(t), &as->value, assign);
    npy_array want_c = load("dc", "centroids"), want_a = load("dc", "assign");
    double ec = relative_error(cents, &want_c, nc);
    cr_assert_eq(na, want_a.count);
    for (size_t i = 0; i < na; i++)
        cr_expect_eq((double)assign[i], ((const double *)want_a.data)[i], "assignment %zu: %g, VISSL's %g", i,
                     (double)assign[i], ((const double *)want_a.data)[i]);
    if (getenv("TRAINER_VERBOSE"))
        fprintf(stderr, "trainer: dc memory error %.3g, centroids error %.3g\n", em, ec);
    cr_expect_leq(em, 1e-3, "the memory banks after 5 steps: error %g", em);
    cr_expect_leq(ec, 1e-3, "the centroids of the last k-means: error %g", ec);
    npy_close(&want_c), npy_close(&want_a);
    free(cents), free(assign);
    trainer_free(t);
    record_input_close(&in);
    cfg_destroy(&cfg);
    test_rm_dir(dir);
}

/* A fresh DeepClusterV2 run without the memory pass's input is refused before it starts; a
 * memory input that ends before its epoch is a failure of the first step, named. */
Test(trainer, deepclusterv2_needs_its_memory_pass, .timeout = 120)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg = {0};
    cfg_err err;
    char *yaml = xasprintf("%s  CHECKPOINT: {DIR: '%s'}\n", DC_YAML("4") MODEL_PART DC_LOSS_AND_OPTIMIZER("3"),
                           dir);
    cr_assert(test_compose(&cfg, &err, yaml, NULL), "%s", err.msg);
    trainer_options o = {.world_size = 1, .threads = 2, .steps_per_epoch = 2};
    cr_expect_null(trainer_new(cfg_map_get(cfg.root, "config"), &o, &err));
    cr_expect(strstr(err.msg, "--memory-in") != NULL, "%s", err.msg);
    cfg_destroy(&cfg);
    rec_file_input in;
    trainer_test_input memory = record_input("dc_memory.rec", &in); /* one batch of 8: the pass wants 2 of 4 */
    trainer *t = make_trainer_full(DC_YAML("4") MODEL_PART DC_LOSS_AND_OPTIMIZER("3"), dir, 2, false, "",
                                   &memory, &cfg);
    char *path = test_fixture("train", "dc_half_batches.rec"), *msg = NULL;
    rec_file_input batches = {.fd = open(path, O_RDONLY)};
    rec_view v;
    cr_assert_eq(read_record(&batches, &v), 1);
    cr_expect_eq(trainer_step(t, &v, v.hdr->epoch, &msg), -1);
    cr_expect(msg && strstr(msg, "memory"), "%s", msg ? msg : "(no error)");
    free(msg), free(path), free(yaml);
    trainer_free(t);
    record_input_close(&in);
    record_input_close(&batches);
    cfg_destroy(&cfg);
    test_rm_dir(dir);
}

/* Five epochs of one batch: the multistep LR moves at epochs 2 and 4, every epoch ends with a
 * metrics.json line and a checkpoint, the last one final, and checkpoint.torch loads back. */
Test(trainer, cross_entropy_multistep_over_five_epochs_with_checkpoints, .timeout = 300)
{
    char *dir;
    run_case(1, "ce_multistep", 1, &dir);
    for (int p = 0; p < 4; p++) {
        char *f = xasprintf("%s/model_phase%d.torch", dir, p);
        cr_expect(path_exists(f), "%s", f);
        free(f);
    }
    char *final = xasprintf("%s/model_final_checkpoint_phase4.torch", dir), *link = xasprintf("%s/checkpoint.torch", dir);
    cr_expect(path_exists(final), "%s", final);
    char target[256] = "";
    ssize_t len = readlink(link, target, sizeof target - 1);
    cr_expect(len > 0 && !strcmp(target, "model_final_checkpoint_phase4.torch"), "checkpoint.torch -> %s", target);
    weights_file *wf = NULL;
    char *err = NULL;
    cr_assert_eq(weights_read(link, "", &wf, &err), 0, "%s", err);
    bool found = false;
    for (size_t i = 0; i < weights_count(wf); i++)
        found |= !strcmp(weights_at(wf, i)->name, "heads.0.clf.0.weight");
    cr_expect(found, "the head's weight is in the checkpoint under its VISSL name");
    weights_close(wf);
    char *metrics = xasprintf("%s/metrics.json", dir);
    size_t n = 0;
    char *text = read_whole_file(metrics, &n);
    cr_assert(text, "%s", metrics);
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += text[i] == '\n';
    cr_expect_eq(lines, 5, "one metrics.json line per epoch");
    cr_expect(strstr(text, "{\"iteration\":5,\"phase_idx\":4,\"train_phase_idx\":4}"), "%s", text);
    free(text), free(metrics), free(final), free(link);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    free(dir);
}

/* ---- test phases ----------------------------------------------------------------------------- */


/* The metrics.json lines that hold `key`, parsed. */
static int metrics_lines(const char *dir, const char *key, json_t **out, int max)
{
    char *path = xasprintf("%s/metrics.json", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, key) && n < max)
            cr_assert((out[n++] = json_loads(line, 0, NULL)), "%s", line);
    fclose(f);
    free(path);
    return n;
}

/* The scalars of `tag` in the event files under dir/tensorboard, in file order: value and
 * step (SummaryWriter's Event: wall_time, step, summary{value{tag, simple_value}}); with
 * `histo`, its histograms instead, the value being the histogram's count (num). */
static int tb_events(const char *dir, const char *tag, bool histo, float *values, int64_t *steps, int max)
{
    char *sub = xasprintf("%s/tensorboard", dir);
    DIR *d = opendir(sub);
    cr_assert(d, "%s", sub);
    struct dirent *e;
    int n = 0;
    size_t tlen = strlen(tag);
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20))
            continue;
        char *path = xasprintf("%s/%s", sub, e->d_name);
        size_t len;
        uint8_t *p = (uint8_t *)read_whole_file(path, &len);
        for (size_t off = 0; off + 12 <= len;) {
            uint64_t rl = 0;
            memcpy(&rl, p + off, 8);
            const uint8_t *ev = p + off + 12, *end = ev + rl;
            /* wall_time (09 + 8), step (10 + varint), summary (2A len 0A len 0A taglen tag 15 float) */
            const uint8_t *q = ev + 10;
            uint64_t bits = 0; /* a varint of the two's complement (10 bytes for -1) */
            for (int shift = 0; q < end && shift < 64; shift += 7) {
                bits |= (uint64_t)(*q & 0x7f) << shift;
                if (!(*q++ & 0x80))
                    break;
            }
            int64_t step = (int64_t)bits;
            /* 2A len(Summary) 0A len(Value), then the Value: 0A taglen tag field */
            const uint8_t *v = q;
            for (int k = 0; k < 2 && v < end; k++) { /* a key, then its varint length */
                v++;
                while (v < end && (*v & 0x80))
                    v++;
                v++;
            }
            if (q[0] == 0x2a && v + 2 + tlen + 5 <= end && v[0] == 0x0a && v[1] == (uint8_t)tlen &&
                !memcmp(v + 2, tag, tlen) && v[2 + tlen] == (histo ? 0x2a : 0x15) && n < max) {
                const uint8_t *f = v + 3 + tlen;
                if (histo) { /* varint length, then min (09 …), max (11 …), num (19 …) */
                    while (*f & 0x80)
                        f++;
                    double num;
                    memcpy(&num, f + 1 + 18 + 1, 8);
                    values[n] = (float)num;
                } else {
                    memcpy(&values[n], f, 4);
                }
                steps[n++] = step;
            }
            off += 16 + rl;
        }
        free(p), free(path);
    }
    closedir(d);
    free(sub);
    return n;
}

/* The cross-entropy case with test phases after epochs 0, 2 and 4, its test batches read
 * through `ti` (2 a phase), its accuracy meter on, checkpoints in dir; kept alive in *cfg. */
static trainer *test_phase_trainer(const char *dir, bool resume, bool tensorboard, const trainer_test_input *ti,
                                   cfg_t *cfg)
{
    char *yaml = xasprintf("%s  TEST_MODEL: true\n  TEST_EVERY_NUM_EPOCH: 2\n"
                           "  METERS: {name: accuracy_list_meter, accuracy_list_meter: {num_meters: 1, "
                           "topk_values: [1, 5]}}\n  CHECKPOINT: {DIR: '%s', AUTO_RESUME: %s}\n"
                           "  TENSORBOARD_SETUP: {USE_TENSORBOARD: %s}\n",
                           CASE_YAML[1], dir, resume ? "true" : "false", tensorboard ? "true" : "false");
    *cfg = (cfg_t){0};
    cfg_err err;
    cr_assert(test_compose(cfg, &err, yaml, NULL), "%s", err.msg);
    free(yaml);
    trainer_options o = {.world_size = 1, .threads = 2, .steps_per_epoch = 1, .test_input = ti, .test_steps = 2};
    trainer *t = trainer_new(cfg_map_get(cfg->root, "config"), &o, &err);
    cr_assert(t, "%s", err.msg);
    return t;
}

/* The cross-entropy case with VISSL's test phases (TEST_MODEL, TEST_EVERY_NUM_EPOCH 2: after
 * epochs 0, 2 and 4): training is the same to the last bit of the fixture's tolerance, each
 * test phase's top-1 / top-5 in metrics.json and the last one's mean loss are PyTorch's on the
 * same test batches, and phase_idx and the checkpoint names count the test phases as
 * VISSL's do (train phases 0, 2, 3, 5, 6). */
Test(trainer, test_phases_score_as_vissl_and_leave_training_alone, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    char *path = test_fixture("train", "ce_multistep_test_batches.rec");
    rec_file_input in = {.fd = open(path, O_RDONLY)};
    cr_assert(in.fd >= 0, "%s", path);
    trainer_test_input ti = {.read = read_record, .done = record_done, .ctx = &in};
    cfg_t cfg;
    trainer *t = test_phase_trainer(dir, false, true, &ti, &cfg);
    train_and_check(t, "ce_multistep");

    npy_array want = load("ce_multistep", "test");
    const double *w = want.data; /* [3][3]: mean loss, top-1 %, top-5 % */
    cr_expect_leq(fabs(trainer_last_test_loss(t) - w[6]), 1e-4 * fabs(w[6]), "last test loss %.9g, PyTorch's %.9g",
                  trainer_last_test_loss(t), w[6]);
    json_t *lines[8];
    int n = metrics_lines(dir, "test_accuracy_list_meter", lines, 8);
    cr_assert_eq(n, 3, "three test phases");
    static const int phase_idx[] = {1, 4, 7}, after[] = {0, 2, 4};
    for (int i = 0; i < n; i++) {
        json_t *m = json_object_get(lines[i], "test_accuracy_list_meter");
        double top1 = json_number_value(json_object_get(json_object_get(m, "top_1"), "0")),
               top5 = json_number_value(json_object_get(json_object_get(m, "top_5"), "0"));
        cr_expect_eq(json_integer_value(json_object_get(lines[i], "phase_idx")), phase_idx[i]);
        cr_expect_eq(json_integer_value(json_object_get(lines[i], "train_phase_idx")), after[i]);
        cr_expect_leq(fabs(top1 - w[3 * i + 1]), 1e-3, "test %d top-1 %g, PyTorch's %g", i, top1, w[3 * i + 1]);
        cr_expect_leq(fabs(top5 - w[3 * i + 2]), 1e-3, "test %d top-5 %g, PyTorch's %g", i, top5, w[3 * i + 2]);
        json_decref(lines[i]);
    }
    /* the same scores in TensorBoard (rounded to 5 decimals, at step train_phase_idx), and
     * the loss of every iteration (LOG_FREQUENCY 1) */
    trainer_free(t);
    t = NULL;
    float tv[8];
    int64_t ts[8];
    int nt = tb_events(dir, "Testing/accuracy_list_meter_top_1_Output_0", false, tv, ts, 8);
    cr_expect_eq(nt, 3, "three test top-1 scalars");
    for (int i = 0; i < nt && i < 3; i++) {
        cr_expect_eq(ts[i], after[i]);
        cr_expect_leq(fabs(tv[i] - w[3 * i + 1]), 1e-3, "TensorBoard test %d top-1 %g, PyTorch's %g", i, tv[i],
                      w[3 * i + 1]);
    }
    npy_array want_loss = load("ce_multistep", "loss");
    nt = tb_events(dir, "Training/Loss", false, tv, ts, 8);
    cr_expect_eq(nt, STEPS, "a Training/Loss scalar per iteration");
    for (int i = 0; i < nt && i < STEPS; i++) {
        double wl = ((const double *)want_loss.data)[i];
        cr_expect_eq(ts[i], i + 1);
        cr_expect_leq(fabs(tv[i] - wl), 1e-4 * fabs(wl) + 1e-5, "TensorBoard loss %d: %g, PyTorch's %g", i, tv[i], wl);
    }
    npy_close(&want_loss);
    /* the head weight's histograms, all 5120 values: before training (step -1), at the first
     * forward (iteration 0 is a multiple of LOG_PARAMS_EVERY_N_ITERS, 310) and at each epoch's
     * end (its train_phase_idx); its gradient's at each epoch's end; the frozen trunk has no
     * gradient histogram (PyTorch's grad is None) */
    nt = tb_events(dir, "Parameters/heads.0.clf.0.weight", true, tv, ts, 8);
    static const int64_t hsteps[] = {-1, 0, 0, 1, 2, 3, 4};
    cr_expect_eq(nt, 7, "parameter histograms");
    for (int i = 0; i < nt && i < 7; i++) {
        cr_expect_eq(ts[i], hsteps[i], "histogram %d at step %lld", i, (long long)ts[i]);
        cr_expect_eq(tv[i], 5120.0f);
    }
    cr_expect_eq(tb_events(dir, "Gradients/heads.0.clf.0.weight", true, tv, ts, 8), 5);
    cr_expect_eq(tb_events(dir, "Gradients/trunk._feature_blocks.conv1.weight", true, tv, ts, 8), 0);
    cr_expect_eq(tb_events(dir, "Parameters/trunk._feature_blocks.conv1.weight", true, tv, ts, 8), 7);
    static const char *const files[] = {"model_phase0.torch", "model_phase2.torch", "model_phase3.torch",
                                        "model_phase5.torch", "model_final_checkpoint_phase6.torch"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char *f = xasprintf("%s/%s", dir, files[i]);
        cr_expect(path_exists(f), "%s", f);
        free(f);
    }
    npy_close(&want);
    trainer_free(t);
    cfg_destroy(&cfg);
    rec_buf_free(&in.buf);
    close(in.fd);
    free(path);
    test_rm_rf(dir); /* it holds folders */
    free(dir);
}

/* A test input that reports a stop at once. */
static int read_stop(void *ctx, rec_view *v)
{
    (void)ctx, (void)v;
    return 0;
}

/* Stopped in the test phase after epoch 0 (its phase checkpoint written), then resumed: VISSL
 * resumes a phase checkpoint at the next phase, so the test phase runs first, and the run ends
 * with the uninterrupted run's weights (the fixture's) and its three test phases' scores. */
Test(trainer, a_stop_in_a_test_phase_resumes_with_that_test_phase, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    char *path = test_fixture("train", "ce_multistep_test_batches.rec"),
         *train = test_fixture("train", "ce_multistep_batches.rec"), *err = NULL;
    double losses[STEPS];
    float *w0 = NULL, *w1 = NULL;
    size_t n0 = 0, n1 = 0;
    for (int run = 0; run < 2; run++) {
        rec_file_input in = {.fd = open(path, O_RDONLY)};
        trainer_test_input ti = {.read = run ? read_record : read_stop, .done = record_done, .ctx = &in};
        cfg_t cfg;
        trainer *t = test_phase_trainer(dir, run, false, &ti, &cfg);
        if (!run) {
            model_init_formula(trainer_backend(t), trainer_model(t));
            w0 = trained_values(t, &n0);
        }
        int fd = open(train, O_RDONLY);
        rec_buf buf = {0};
        rec_view v;
        for (int k = 0; rec_fd_read(fd, &buf, &v, NULL, &err) == 1 && v.hdr->kind == REC_DATA; k++) {
            int64_t before = trainer_iteration(t);
            cr_assert_eq(trainer_step(t, &v, v.hdr->epoch, &err), 0, "run %d step %d: %s", run, k, err);
            if (trainer_iteration(t) > before)
                losses[k] = trainer_last_loss(t);
            if (!run && k == 1)
                break; /* the first run stops in the test phase that epoch 1's batch set off */
        }
        cr_assert_eq(trainer_finish(t, !run, &err), 0, "%s", err);
        cr_expect_eq(trainer_iteration(t), run ? 5 : 1, "run %d", run);
        if (run)
            w1 = trained_values(t, &n1);
        rec_buf_free(&buf);
        close(fd);
        close(in.fd);
        rec_buf_free(&in.buf);
        trainer_free(t);
        cfg_destroy(&cfg);
    }
    cr_assert_eq(n0, n1);
    check_training("ce_multistep", losses, w0, w1, n1);
    npy_array want = load("ce_multistep", "test");
    const double *w = want.data;
    json_t *lines[8];
    int n = metrics_lines(dir, "test_accuracy_list_meter", lines, 8);
    cr_assert_eq(n, 3, "the test phase after epoch 0 ran once, when the run resumed, then the other two");
    for (int i = 0; i < n; i++) {
        json_t *m = json_object_get(lines[i], "test_accuracy_list_meter");
        double top1 = json_number_value(json_object_get(json_object_get(m, "top_1"), "0"));
        cr_expect_leq(fabs(top1 - w[3 * i + 1]), 1e-3, "test %d top-1 %g, PyTorch's %g", i, top1, w[3 * i + 1]);
        json_decref(lines[i]);
    }
    npy_close(&want);
    free(w0), free(w1), free(path), free(train);
    test_rm_dir(dir);
}

/* ---- TEMP_FROZEN_PARAMS_ITER_MAP ----------------------------------------------------------- */

static char *refusal_with(const char *yaml, const char *dir, const char *checkpoint_keys);

/* The case's YAML with `line` added to its MODEL map. */
static char *with_model_line(const char *yaml, const char *line)
{
    const char *at = strstr(yaml, "  MODEL:\n");
    cr_assert(at);
    at += strlen("  MODEL:\n");
    return xasprintf("%.*s    %s\n%s", (int)(at - yaml), yaml, line, at);
}

/* The host values of the model entry `name` (its value, or its gradient). */
static float *entry_values(trainer *t, const char *name, bool grad, size_t *n)
{
    model *m = trainer_model(t);
    for (int i = 0; i < model_entry_count(m); i++) {
        const eng_entry *e = model_entry_at(m, i);
        if (strcmp(e->name, name))
            continue;
        *n = (size_t)eng_numel(&e->value.shape);
        float *v = xmalloc(*n * sizeof *v);
        eng_download(trainer_backend(t), grad ? &e->grad : &e->value, v);
        return v;
    }
    cr_assert_fail("no entry %s", name);
    return NULL;
}

/* The head's weight held out of iterations 1 and 2 (VISSL's name, with DDP's "module."): it
 * does not move while its bias does, and its first step, at iteration 3, is torch's first SGD
 * step: the momentum buffer starts as the gradient plus the decay, so Nesterov moves it by
 * lr · (1 + momentum) · (g + wd · w), with lr 0.01 in epoch 2 of the multistep schedule. */
Test(trainer, temp_frozen_params_sit_out_their_first_iterations, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    char *yaml = with_model_line(CASE_YAML[1], "TEMP_FROZEN_PARAMS_ITER_MAP: [[module.heads.0.clf.0.weight, 3]]");
    cfg_t cfg;
    trainer *t = make_trainer(yaml, dir, 1, false, &cfg);
    model_init_formula(trainer_backend(t), trainer_model(t));
    const char *w_name = "heads.0.clf.0.weight", *b_name = "heads.0.clf.0.bias";
    char *path = test_fixture("train", "ce_multistep_batches.rec"), *err = NULL;
    int fd = open(path, O_RDONLY);
    rec_buf buf = {0};
    rec_view v;
    size_t n, nb;
    float *w0 = entry_values(t, w_name, false, &n), *b0 = entry_values(t, b_name, false, &nb);
    float *w_before = NULL;
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(rec_fd_read(fd, &buf, &v, NULL, &err), 1, "%s", err);
        free(w_before);
        w_before = entry_values(t, w_name, false, &n);
        cr_assert_eq(trainer_step(t, &v, v.hdr->epoch, &err), 0, "%s", err);
    }
    float *w2 = w_before, *w3 = entry_values(t, w_name, false, &n), *g3 = entry_values(t, w_name, true, &n),
          *b2 = entry_values(t, b_name, false, &nb);
    cr_expect_arr_eq(w2, w0, n * sizeof *w0, "the weight moved before iteration 3");
    cr_expect(memcmp(b2, b0, nb * sizeof *b0) != 0, "the bias, not frozen, should have moved");
    const double lr = 0.01, mom = 0.9, wd = 0.0005;
    double worst = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        double want = (double)w2[i] - lr * (1 + mom) * ((double)g3[i] + wd * (double)w2[i]);
        worst = fmax(worst, fabs((double)w3[i] - want));
        top = fmax(top, fabs((double)w3[i] - (double)w2[i]));
    }
    cr_expect_gt(top, 0.0, "the weight did not move at iteration 3");
    cr_expect_leq(worst, 1e-5 * fmax(top, 1e-12) + 1e-7, "first step off by %g (step size %g)", worst, top);
    free(w0), free(b0), free(w2), free(w3), free(g3), free(b2), free(path), free(yaml);
    rec_buf_free(&buf);
    close(fd);
    trainer_free(t);
    cfg_destroy(&cfg);
    test_rm_dir(dir);
}

/* A name the model does not have stops the run before it starts (VISSL would skip it quietly). */
Test(trainer, temp_frozen_params_must_name_a_parameter)
{
    char *dir = test_make_tmpdir();
    char *yaml = with_model_line(CASE_YAML[1], "TEMP_FROZEN_PARAMS_ITER_MAP: [[heads.9.weight, 3]]");
    char *msg = refusal_with(yaml, dir, "");
    cr_expect(msg && strstr(msg, "TEMP_FROZEN_PARAMS_ITER_MAP") && strstr(msg, "heads.9.weight"), "%s", msg);
    free(msg), free(yaml);
    test_rm_dir(dir);
}

/* CHECKPOINT_FREQUENCY 2 over five epochs without test phases: model_phase0, model_phase2 and
 * the final model_final_checkpoint_phase4 (VISSL's rule: phase_idx % frequency == 0). */
Test(trainer, checkpoint_frequency_counts_phase_idx_from_zero, .timeout = 300)
{
    char *dir = test_make_tmpdir();
    char *yaml = xasprintf("%s  TEST_MODEL: false\n", CASE_YAML[1]);
    cfg_t cfg;
    trainer *t = make_trainer_with(yaml, dir, 1, false, ", CHECKPOINT_FREQUENCY: 2", &cfg);
    double losses[STEPS];
    feed(t, "ce_multistep", losses);
    static const char *const present[] = {"model_phase0.torch", "model_phase2.torch",
                                          "model_final_checkpoint_phase4.torch"},
                             *const absent[] = {"model_phase1.torch", "model_phase3.torch", "model_phase4.torch"};
    for (int i = 0; i < 3; i++) {
        char *p = xasprintf("%s/%s", dir, present[i]), *a = xasprintf("%s/%s", dir, absent[i]);
        cr_expect(path_exists(p), "%s", p);
        cr_expect(!path_exists(a), "%s", a);
        free(p), free(a);
    }
    /* stdout.json: every line says where the step's time went, in parts that fit in the step
     * (disjoint intervals of the same wall clock, so their sum cannot exceed it) */
    static const char *const timers[] = {"data_wait(ms)", "read_sample(ms)", "forward(ms)", "loss_compute(ms)",
                                         "meters_update(ms)", "backward(ms)", "optimizer_step(ms)"};
    json_t *lines[8];
    char *path = xasprintf("%s/stdout.json", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char buf[4096];
    int count = 0;
    while (fgets(buf, sizeof buf, f) && count < 8) {
        cr_assert((lines[count] = json_loads(buf, 0, NULL)), "%s", buf);
        double parts = 0.0, btime = json_number_value(json_object_get(lines[count], "btime(ms)"));
        for (size_t k = 0; k < sizeof timers / sizeof *timers; k++) {
            json_t *v = json_object_get(lines[count], timers[k]);
            cr_expect(json_is_number(v), "%s lacks %s: %s", path, timers[k], buf);
            parts += json_number_value(v);
        }
        cr_expect_leq(parts, btime * 1.001 + 0.01, "the parts (%g ms) exceed the step (%g ms)", parts, btime);
        cr_expect_gt(json_number_value(json_object_get(lines[count], "forward(ms)")), 0.0);
        json_decref(lines[count++]);
    }
    cr_expect_eq(count, 5, "one line per iteration (LOG_FREQUENCY 1)");
    fclose(f);
    free(path);
    trainer_free(t);
    cfg_destroy(&cfg);
    free(yaml);
    test_rm_dir(dir);
}

/* ---- refusals before the first batch ------------------------------------------------------ */

static char *refusal_with(const char *yaml, const char *dir, const char *checkpoint_keys)
{
    char *full = xasprintf("%s  CHECKPOINT: {DIR: '%s'%s}\n", yaml, dir, checkpoint_keys);
    cfg_t cfg = {0};
    cfg_err err;
    cr_assert(test_compose(&cfg, &err, full, NULL), "%s", err.msg);
    free(full);
    trainer_options o = {.world_size = 1, .threads = 2, .steps_per_epoch = 5};
    trainer *t = trainer_new(cfg_map_get(cfg.root, "config"), &o, &err);
    cfg_destroy(&cfg);
    if (t) {
        trainer_free(t);
        return NULL;
    }
    return xstrdup(err.msg);
}

static char *refusal(const char *yaml, const char *dir) { return refusal_with(yaml, dir, ""); }

Test(trainer, configs_it_cannot_run_are_refused_before_anything_starts)
{
    char *dir = test_make_tmpdir();
    char *msg = refusal(BASE "  MACHINE: {DEVICE: gpu}\n" MODEL_PART SIMCLR_MODEL, dir);
    cr_expect(msg && strstr(msg, "MACHINE.DEVICE") && strstr(msg, "cpu"), "%s", msg);
    free(msg);
    msg = refusal(COMMON SIMCLR_MODEL "  OPTIMIZER: {name: rmsprop}\n", dir);
    cr_expect(msg && strstr(msg, "rmsprop"), "%s", msg);
    free(msg);
    /* a checkpoint link to nothing: resuming (AUTO_RESUME, VISSL's default) says why it cannot */
    char *link = xasprintf("%s/checkpoint.torch", dir);
    cr_assert_eq(symlink("model_final_checkpoint_phase0.torch", link), 0);
    msg = refusal(COMMON SIMCLR_MODEL, dir);
    cr_expect(msg && strstr(msg, "AUTO_RESUME") && strstr(msg, "cannot resume"), "%s", msg);
    free(msg);
    /* and without AUTO_RESUME a checkpoint is not overwritten unless asked */
    msg = refusal_with(COMMON SIMCLR_MODEL, dir, ", AUTO_RESUME: false");
    cr_expect(msg && strstr(msg, "already holds a checkpoint") && strstr(msg, "OVERWRITE_EXISTING"), "%s", msg);
    free(msg);
    unlink(link);
    free(link);
    test_rm_dir(dir);
}

/* A stop mid-epoch (Ctrl-C, the orchestrator's STOP) leaves model_iteration{N}.torch, linked. */
Test(trainer, a_stop_mid_epoch_saves_an_iteration_checkpoint, .timeout = 300)
{
    char *dir = test_make_tmpdir(), *err = NULL;
    cfg_t cfg;
    trainer *t = make_trainer(CASE_YAML[0], dir, 5, false, &cfg);
    char *path = test_fixture("train", "simclr_larc_batches.rec");
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0, "%s", path);
    rec_buf buf = {0};
    rec_view v;
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(rec_fd_read(fd, &buf, &v, NULL, &err), 1, "%s", err);
        cr_assert_eq(trainer_step(t, &v, v.hdr->epoch, &err), 0, "%s", err);
    }
    cr_assert_eq(trainer_finish(t, true, &err), 0, "%s", err);
    char target[256] = "", *link = xasprintf("%s/checkpoint.torch", dir);
    cr_expect(readlink(link, target, sizeof target - 1) > 0 && !strcmp(target, "model_iteration2.torch"), "%s",
              target);
    char *file = xasprintf("%s/model_iteration2.torch", dir), *metrics = xasprintf("%s/metrics.json", dir);
    cr_expect(path_exists(file));
    cr_expect(!path_exists(metrics), "an unfinished epoch writes no metrics.json line");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    rec_buf_free(&buf);
    close(fd);
    free(path), free(link), free(file), free(metrics), free(dir);
    trainer_free(t);
    cfg_destroy(&cfg);
}

/* ---- exact resume ------------------------------------------------------------------------- */

/* Runs whose trunk trains too, so BN running statistics and every momentum buffer matter. */
#define TRAINING_TRUNK BASE "  MACHINE: {DEVICE: cpu}\n  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
static const struct {
    const char *records;
    int64_t steps_per_epoch;
    const char *yaml;
    int batches;         /* in the records (0: STEPS) */
    const char *memory;  /* the memory pass's records (DeepClusterV2), or NULL */
} RESUME_CASES[] = {
    {"simclr_larc", 5, /* one epoch of five batches: stops inside the epoch */
     TRAINING_TRUNK SIMCLR_MODEL
     "  OPTIMIZER: {name: sgd, use_larc: true, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
     "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n", 0, NULL},
    {"ce_multistep", 1, /* five epochs of one batch: stops at epoch boundaries */
     TRAINING_TRUNK "    HEAD: {PARAMS: [[mlp, {dims: [512, 10]}]]}\n  LOSS: {name: CrossEntropyLoss}\n"
     "  OPTIMIZER: {name: adamw, weight_decay: 0.05, num_epochs: 5,\n"
     "    param_schedulers: {lr: {name: multistep, values: [0.01, 0.001, 0.0001], milestones: [2, 4],\n"
     "      update_interval: epoch}}}\n", 0, NULL},
    {"swav_queue", 5, /* the loss's queue and forward count must come back too */
     "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
     "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: multicrop_collator}}\n"
     "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
     "    HEAD: {PARAMS: [[swav_head, {dims: [512, 32, 16], use_bn: true, num_clusters: [20, 12]}]]}\n"
     "  LOSS: {name: swav_loss, swav_loss: {num_crops: 4, temp_hard_assignment_iters: 1, queue: {queue_length: 8, "
     "start_iter: 2}}}\n"
     "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
     "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n", 0, NULL},
    {"swav_queue", 5, /* swav_momentum_loss: the momentum network and the queue come back */
     "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
     "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: multicrop_collator}}\n"
     "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
     "    HEAD: {PARAMS: [[swav_head, {dims: [512, 32, 16], use_bn: true, num_clusters: [20, 12]}]]}\n"
     "  LOSS: {name: swav_momentum_loss, swav_momentum_loss: {num_crops: 4, momentum: 0.9,\n"
     "    momentum_eval_mode_iter_start: 2, queue: {queue_length: 8, start_iter: 2}}}\n"
     "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
     "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n", 0, NULL},
    {"moco", 5, /* the queue, its pointer and the momentum encoder (its own BN statistics) come back */
     "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
     "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: moco_collator}}\n"
     "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
     "    HEAD: {PARAMS: [[mlp, {dims: [512, 64], use_relu: true}], [mlp, {dims: [64, 16]}]]}\n"
     "  LOSS: {name: moco_loss, moco_loss: {embedding_dim: 16, queue_size: 8, momentum: 0.9, temperature: 0.2}}\n"
     "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, nesterov: true, num_epochs: 1,\n"
     "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n", 0, NULL},
    {"pirl", 5, /* two inputs, two terms, the memory updated by one of them */
     "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  LOG_FREQUENCY: 1\n  MACHINE: {DEVICE: cpu}\n"
     "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: patch_and_image_collator,\n"
     "    INPUT_KEY_NAMES: [patches, images]}}\n"
     "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
     "    MULTI_INPUT_HEAD_MAPPING: [[patches, [flatten]], [images, [flatten]]]\n"
     "    HEAD: {PARAMS: [[[mlp, {dims: [512, 16]}], [siamese_concat_view, {num_towers: 9}], [mlp, {dims: [144, 16]}]],\n"
     "      [[mlp, {dims: [512, 16]}]]]}\n"
     "  LOSS: {name: nce_loss_with_memory, nce_loss_with_memory: {num_train_samples: 32, loss_weights: [0.5, 0.5],\n"
     "    update_mem_with_emb_index: 1, negative_sampling_params: {num_negatives: 8},\n"
     "    memory_params: {embedding_dim: 16, update_mem_on_forward: false}}}\n"
     "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
     "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n", 0, NULL},
    {"npid", 5, /* the memory bank, Z (set by the first batch) and the negatives' streams come back */
     TRAINING_TRUNK "    HEAD: {PARAMS: [[mlp, {dims: [512, 16]}]]}\n"
     "  LOSS: {name: nce_loss_with_memory, nce_loss_with_memory: {num_train_samples: 32,\n"
     "    negative_sampling_params: {num_negatives: 8}, memory_params: {embedding_dim: 16}}}\n"
     "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
     "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n", 0, NULL},
    {"dc_half", 2, /* three epochs of two batches: the banks' write position inside an epoch, the
                    * centroids and assignments of its k-means, not clustered again on resume */
     DC_YAML("4") "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
     DC_LOSS_AND_OPTIMIZER("3"), 6, "dc_half_memory.rec"},
};

/* Case c's trainer in dir, with its memory pass's input (kept in *in while the trainer lives). */
static trainer *resume_trainer(size_t c, const char *dir, bool resume, rec_file_input *in, cfg_t *cfg)
{
    trainer_test_input memory = {0};
    if (RESUME_CASES[c].memory)
        memory = record_input(RESUME_CASES[c].memory, in);
    else
        *in = (rec_file_input){.fd = -1};
    /* one thread: the suite runs two of these at once on two cores, and two engines of two
     * OpenMP threads each, spinning at their barriers, slowed each other several times over */
    return make_trainer_threads(RESUME_CASES[c].yaml, dir, RESUME_CASES[c].steps_per_epoch, resume, "",
                                RESUME_CASES[c].memory ? &memory : NULL, 1, cfg);
}

/* The number of floats model_state gives. */
static size_t model_state_numel(trainer *t)
{
    model *m = trainer_model(t);
    const eng_entry *loss_entries;
    int nm = model_entry_count(m), nl = loss_state_entries(trainer_loss_state(t), &loss_entries);
    size_t n = 0;
    for (int i = 0; i < nm + nl; i++)
        n += (size_t)eng_numel(&(i < nm ? model_entry_at(m, i) : &loss_entries[i - nm])->value.shape);
    return n;
}

/* Every tensor of the model (parameters and running statistics), then the loss state's
 * (queues, a momentum encoder), one array. */
static float *model_state(trainer *t, size_t *n)
{
    model *m = trainer_model(t);
    const eng_entry *loss_entries;
    int nm = model_entry_count(m), nl = loss_state_entries(trainer_loss_state(t), &loss_entries);
    *n = model_state_numel(t);
    /* one allocation: growing it tensor by tensor copied tens of MB a tensor, which under ASan
     * (every block through its quarantine) took minutes per test */
    float *all = xmalloc(*n * sizeof *all), *at = all;
    for (int i = 0; i < nm + nl; i++) {
        const eng_entry *e = i < nm ? model_entry_at(m, i) : &loss_entries[i - nm];
        eng_download(trainer_backend(t), &e->value, at);
        at += eng_numel(&e->value.shape);
    }
    return all;
}

/* Feeds the first `limit` batches of a records file, then ends (stopped or not). With `states`,
 * the model's state after batch k is kept in states[k - 1]. */
static void feed_some(trainer *t, const char *records, int limit, bool stopped, float **states)
{
    char *file = xasprintf("%s_batches.rec", records), *path = test_fixture("train", file), *err = NULL;
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0, "%s", path);
    rec_buf buf = {0};
    rec_view v;
    for (int k = 0; k < limit && rec_fd_read(fd, &buf, &v, NULL, &err) == 1 && v.hdr->kind == REC_DATA; k++) {
        cr_assert_eq(trainer_step(t, &v, v.hdr->epoch, &err), 0, "%s batch %d: %s", records, k, err);
        size_t n;
        if (states)
            states[k] = model_state(t, &n);
    }
    cr_assert_eq(trainer_finish(t, stopped, &err), 0, "%s", err);
    rec_buf_free(&buf);
    close(fd);
    free(path);
    free(file);
}

static void rm_rf(char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    free(dir);
}

/* One run of case c in dir: fresh (formula weights) or resumed from the checkpoint of
 * `resumed_at` iterations, fed `limit` of its batches. */
static trainer *resume_run(size_t c, const char *dir, bool resume, int resumed_at, int limit, bool stopped,
                           cfg_t *cfg, float **states)
{
    rec_file_input in;
    trainer *t = resume_trainer(c, dir, resume, &in, cfg);
    if (resumed_at == 0)
        model_init_formula(trainer_backend(t), trainer_model(t));
    cr_assert_eq(trainer_iteration(t), resumed_at, "%s: resumed at iteration %lld", RESUME_CASES[c].records,
                 (long long)trainer_iteration(t));
    feed_some(t, RESUME_CASES[c].records, limit, stopped, states);
    if (in.fd >= 0)
        record_input_close(&in);
    return t;
}

/* The uninterrupted run of case c in dir: its state after every batch, and its metrics.json. */
static float **uninterrupted_states(size_t c, int batches, size_t *n, char **metrics, size_t *metrics_len)
{
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    float **states = calloc((size_t)batches, sizeof *states);
    trainer *t = resume_run(c, dir, false, 0, batches, false, &cfg, states);
    *n = model_state_numel(t);
    trainer_free(t);
    cfg_destroy(&cfg);
    char *path = path_join(dir, "metrics.json");
    *metrics = read_whole_file(path, metrics_len);
    free(path);
    rm_rf(dir);
    return states;
}

/* One run stopped after every batch: trains batch 1 and stops, resumes from that checkpoint
 * with the same batches coming again from the start (the ones already trained are skipped),
 * trains batch 2 and stops, and so on. After each stop every weight, running statistic and
 * tensor of the loss's state is bitwise the uninterrupted run's after as many batches, and at
 * the end so is metrics.json. Each checkpoint after the first was written by a resumed
 * trainer, so state that a resume restores but never saves again shows too. */
static void resume_case_bitwise(size_t c)
{
    const char *records = RESUME_CASES[c].records;
    int batches = RESUME_CASES[c].batches ? RESUME_CASES[c].batches : STEPS;
    size_t na, nb, la, lb;
    char *ma;
    float **want = uninterrupted_states(c, batches, &na, &ma, &la);
    char *dir = test_make_tmpdir();
    cfg_t cfg;
    for (int k = 1; k <= batches; k++) {
        bool last = k == batches;
        trainer *t = resume_run(c, dir, true, k - 1, k, !last, &cfg, NULL);
        float *got = model_state(t, &nb);
        cr_assert_eq(na, nb);
        cr_expect(memcmp(want[k - 1], got, na * sizeof *got) == 0,
                  "%s: after a resume at %d, batch %d's weights differ", records, k - 1, k);
        free(got);
        trainer_free(t);
        cfg_destroy(&cfg);
    }
    char *metrics = path_join(dir, "metrics.json"), *mb = read_whole_file(metrics, &lb);
    cr_expect(ma && mb && la == lb && !memcmp(ma, mb, la), "%s: metrics.json\n%s\nvs\n%s", records,
              ma ? ma : "", mb ? mb : "");
    for (int k = 0; k < batches; k++)
        free(want[k]);
    free(want), free(ma), free(mb), free(metrics);
    rm_rf(dir);
}

ParameterizedTestParameters(trainer, resume_stopped_after_every_batch_is_bitwise_exact)
{
    static size_t cases[ARRAY_LEN(RESUME_CASES)];
    for (size_t c = 0; c < ARRAY_LEN(cases); c++)
        cases[c] = c;
    return cr_make_param_array(size_t, cases, ARRAY_LEN(cases));
}

/* A test per case: the suite's jobs share them, and each has a timeout of its own. */
ParameterizedTest(size_t *c, trainer, resume_stopped_after_every_batch_is_bitwise_exact, .timeout = 600)
{
    resume_case_bitwise(*c);
}

/* ---- kill -9 ------------------------------------------------------------------------------- */

/* A child process trains on and on, checkpointing after every step (CHECKPOINT_ITER_FREQUENCY
 * 1, resuming from the last checkpoint), and is killed with SIGKILL at a random moment, 20
 * times: each time, the checkpoint that checkpoint.torch names loads whole, and the run goes on
 * from it. Saves take a good share of each step here, so many kills land inside one. */
#define FOREVER_YAML                                                                                            \
    COMMON SIMCLR_MODEL "  OPTIMIZER: {name: sgd, momentum: 0.9, num_epochs: 1000000,\n"                       \
                        "    param_schedulers: {lr: {name: constant, value: 0.01}}}\n"

static void train_forever(const char *dir)
{
    cfg_t cfg;
    trainer *t = make_trainer_with(FOREVER_YAML, dir, 5, true, ", CHECKPOINT_ITER_FREQUENCY: 1", &cfg);
    char *path = test_fixture("train", "simclr_larc_batches.rec"), *err = NULL;
    for (uint32_t epoch = 0;; epoch++) {
        int fd = open(path, O_RDONLY);
        rec_buf buf = {0};
        rec_view v;
        while (fd >= 0 && rec_fd_read(fd, &buf, &v, NULL, &err) == 1 && v.hdr->kind == REC_DATA)
            if (trainer_step(t, &v, epoch, &err) != 0)
                _exit(3);
        rec_buf_free(&buf);
        close(fd);
    }
}

/* What checkpoint.torch names now ("" when there is none). */
static void link_target(const char *dir, char *out, size_t size)
{
    char *link = path_join(dir, "checkpoint.torch");
    ssize_t n = readlink(link, out, size - 1);
    out[n > 0 ? n : 0] = 0;
    free(link);
}

Test(trainer, kill_9_at_random_moments_never_leaves_a_checkpoint_that_does_not_load, .timeout = 900)
{
    char *dir = test_make_tmpdir();
    srand(7);
    int64_t last = 0;
    for (int round = 0; round < 20; round++) {
        char before[256], now[256];
        link_target(dir, before, sizeof before);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0)
            train_forever(dir);
        /* Once the child has written a checkpoint of its own (however slow this build is),
         * kill it 0-300 ms later: inside a step or inside the next save. */
        for (int waited = 0; waited < 6000; waited++) {
            link_target(dir, now, sizeof now);
            if (strcmp(now, before) != 0)
                break;
            usleep(20000);
        }
        cr_assert_str_neq(now, before, "round %d: no new checkpoint within 2 minutes", round);
        usleep((useconds_t)(rand() % 300000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        cr_assert(WIFSIGNALED(status), "round %d: the child ended on its own (status %d)", round, status);
        cfg_t cfg;
        trainer *t = make_trainer(FOREVER_YAML, dir, 5, true, &cfg); /* loads the latest whole */
        /* never backwards (an epoch's end may re-checkpoint the same iteration as a phase) */
        cr_expect_geq(trainer_iteration(t), last, "round %d: back from iteration %lld", round, (long long)last);
        last = trainer_iteration(t);
        trainer_free(t);
        cfg_destroy(&cfg);
    }
    cr_expect_geq(last, 15, "20 rounds made only %lld iterations", (long long)last);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    free(dir);
}
