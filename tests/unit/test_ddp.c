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
#include "npy.h"
#include "test_hooks.h"
#include "record.h"
#include "safetensors.h"
#include "ring.h"
#include "rng.h"
#include "train/buckets.h"
#include "train/dist.h"
#include "train/loss.h"
#include "train/meter.h"
#include "train/trainer.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

/* cap_mb: DATA.DDP_BUCKET_CAP_MB */
static char *config_yaml(int world, int seed, const char *dir, double cap_mb)
{
    return xasprintf(
        "config:\n  DISTRIBUTED: {BACKEND: gloo, NUM_PROC_PER_NODE: %d}\n  MACHINE: {DEVICE: cpu}\n  "
        "SEED_VALUE: %d\n"
        "  LOG_FREQUENCY: 1\n  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: %d}, DDP_BUCKET_CAP_MB: %g}\n"
        "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true, "
        "NORM: LayerNorm}}}\n"
        "    HEAD: {PARAMS: [[mlp, {dims: [512, 10]}]]}\n"
        "  LOSS: {name: CrossEntropyLoss}\n"
        "  OPTIMIZER: {name: sgd, momentum: 0.9, weight_decay: 0.0001, num_epochs: 1,\n"
        "    param_schedulers: {lr: {name: constant, value: 0.02}}}\n"
        "  CHECKPOINT: {DIR: '%s', CHECKPOINT_FREQUENCY: 1}\n",
        world, seed, GLOBAL_BATCH / world, cap_mb, dir);
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
static void trainer_main(result *res, int rank, int world, const char *world_name, const char *dir, double cap_mb)
{
    char *yaml = config_yaml(world, 1 + 6 * rank, dir, cap_mb), *err = NULL;
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

static pid_t start(result *res, int rank, int world, const char *world_name, const char *dir, double cap_mb)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0)
        trainer_main(res, rank, world, world_name, dir, cap_mb);
    return pid;
}

/* Two trainers of batch 4 into res[0] and res[1]; their run's folder (remove it). */
static char *train_two(result *res, double cap_mb)
{
    char *dir = test_make_tmpdir(), *name = ring_name("ddptest");
    pid_t r0 = start(&res[0], 0, 2, name, dir, cap_mb), r1 = start(&res[1], 1, 2, name, dir, cap_mb);
    int s0 = test_wait_child(r0, 240000), s1 = test_wait_child(r1, 240000);
    cr_assert(s0 == 0 && s1 == 0, "rank 0: %s\nrank 1: %s", res[0].err, res[1].err);
    char *shm = xasprintf("/dev/shm/%s", name);
    cr_expect_neq(access(shm, F_OK), 0, "%s was left behind", shm);
    free(shm);
    free(name);
    return dir;
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
    char *one = test_make_tmpdir();
    memset(g_res, 0, 3 * sizeof *g_res);
    pid_t single = start(&g_res[0], 0, 1, NULL, one, 25);
    cr_assert_eq(test_wait_child(single, 240000), 0, "the single trainer: %s", g_res[0].err);
    char *two = train_two(&g_res[1], 25);

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
    test_rm_rf(one), test_rm_rf(two);
    free(one), free(two);
}

/* DDP's buckets start each all-reduce as soon as the backward is done with its gradients
 * (buckets.h). A bucket started early would all-reduce gradients the backward still adds to,
 * and the result would depend on where buckets end: a bucket per tensor (0 MiB), DDP's 1 MiB
 * and then one for everything else (1000 MiB) and the default 25 MiB must train to the same
 * bits (each value is the ranks' values summed in rank order, whatever bucket it is in). */
Test(ddp, where_gradient_buckets_end_does_not_change_a_bit, .timeout = 300)
{
    static const double caps[] = {0, 1000, 25};
    memset(g_res, 0, 3 * sizeof *g_res);
    char *dir = train_two(&g_res[1], caps[0]);
    cr_assert_arr_eq(g_res[1].params, g_res[2].params, g_res[1].n * sizeof(float), "a bucket per tensor: the ranks differ");
    g_res[0] = g_res[1];
    test_rm_rf(dir);
    free(dir);
    for (int k = 1; k < 3; k++) {
        dir = train_two(&g_res[1], caps[k]);
        cr_assert_eq(g_res[1].n, g_res[0].n);
        cr_expect_arr_eq(g_res[1].params, g_res[2].params, g_res[0].n * sizeof(float), "%g MiB: the ranks differ",
                         caps[k]);
        cr_expect_arr_eq(g_res[1].params, g_res[0].params, g_res[0].n * sizeof(float),
                         "buckets of %g MiB train other weights than a bucket per tensor", caps[k]);
        for (int s = 0; s < STEPS; s++)
            cr_expect_eq(g_res[1].loss[s], g_res[0].loss[s], "%g MiB, step %d: another loss", caps[k], s);
        test_rm_rf(dir);
        free(dir);
    }
}

/* The buckets of VISSL's SimCLR ResNet-50 are DDP's (torch's own assignment, in the order it
 * rebuilds them after its first iteration: make_buckets_fixtures.py), for 25 MiB (the default),
 * 1, 0 and 100 MiB. */
Test(ddp, gradient_buckets_are_torch_ddps, .timeout = 120)
{
    model_options o = nnt_model_options("config:\n  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 50}}}\n"
                                        "    HEAD: {PARAMS: [[mlp, {dims: [2048, 2048, 128]}]]}\n",
                                        NULL);
    eng_backend *be = nnt_open_cpu();
    char *err = NULL;
    model *m = model_new(be, &o, 1, &err);
    cr_assert(m, "%s", err);
    int n = model_entry_count(m), *param_index = xmalloc((size_t)n * sizeof *param_index), params = 0;
    for (int i = 0; i < n; i++)
        param_index[i] = model_entry_at(m, i)->kind == ENG_PARAM ? params++ : -1;
    static const int caps[] = {25, 1, 0, 100};
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) {
        char kase[32];
        snprintf(kase, sizeof kase, "cap%d", caps[c]);
        npy_array want = test_fixture_npy("buckets", "resnet50_simclr", kase);
        grad_buckets g;
        grad_buckets_plan(&g, m, GRAD_BUCKETS_FIRST_BYTES, (size_t)caps[c] << 20, NULL, be);
        cr_assert_eq((size_t)g.n, want.count, "%d MiB: %d buckets, torch's DDP makes %zu", caps[c], g.n, want.count);
        int64_t floats = 0;
        for (int b = 0; b < g.n; b++) {
            int first = g.b[b].first;
            while (param_index[first] < 0) /* a bucket may start at a buffer: its first parameter follows */
                first++;
            cr_expect_eq(param_index[first], ((const int64_t *)want.data)[b], "%d MiB, bucket %d: from parameter %d, "
                         "torch's from %lld", caps[c], b, param_index[first], (long long)((const int64_t *)want.data)[b]);
            cr_expect_eq(g.b[b].end, b ? g.b[b - 1].first : n, "buckets follow each other");
            floats += eng_numel(&g.b[b].grads.shape);
        }
        cr_expect_eq(floats, model_param_count(m), "the buckets hold every gradient once");
        npy_close(&want);
        grad_buckets_free(&g);
    }
    free(param_index);
    model_free(be, m);
    eng_backend_close(be);
}

/* ---- a forked world for the library-level tests ---------------------------------------------- */

/* What every rank's result slot starts with. */
typedef struct {
    int ok;
    char err[300];
} rank_status;

/* One rank of a test world: its cpu backend (one thread), its place in the world, the test's
 * argument and its result slot (which starts with a rank_status). */
typedef struct {
    eng_backend *be;
    dist d;
    int rank;
    const void *arg;
    void *res;
} rank_ctx;

/* A rank's work: 0, or -1 with *err. */
typedef int (*rank_body)(rank_ctx *c, char **err);

static void rank_main(rank_body body, rank_ctx *c, int world, const char *name)
{
    char *err = NULL;
    coll_shm_options co = {.timeout_ms = 30000};
    eng_backend_options bo = {.threads = 1};
    c->be = eng_backend_open("cpu", &bo, &err);
    c->d.world = c->be ? coll_shm_join(name, c->rank, world, &co, &err) : NULL;
    rank_status *st = c->res;
    st->ok = c->d.world && body(c, &err) == 0;
    snprintf(st->err, sizeof st->err, "%s", err ? err : "");
    coll_close(c->d.world);
    dist_free(&c->d);
    if (c->be)
        eng_backend_close(c->be);
    _exit(st->ok ? 0 : 1);
}

/* `world` forked ranks running body, each with a result slot of `size` bytes in memory shared
 * with the test; returns the slots once every rank succeeded (unmap with munmap(…, world·size)). */
static void *run_ranks(rank_body body, size_t size, int world, const void *arg)
{
    uint8_t *res =
        mmap(NULL, (size_t)world * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(res != MAP_FAILED);
    memset(res, 0, (size_t)world * size);
    char *name = ring_name("ddptest");
    pid_t pids[COLL_MAX_WORLD];
    for (int r = 0; r < world; r++) {
        cr_assert((pids[r] = fork()) >= 0);
        if (pids[r] == 0) {
            rank_ctx c = {.rank = r, .arg = arg, .res = res + (size_t)r * size};
            rank_main(body, &c, world, name);
        }
    }
    for (int r = 0; r < world; r++)
        cr_assert_eq(test_wait_child(pids[r], 50000), 0, "rank %d: %s", r,
                     ((rank_status *)(res + (size_t)r * size))->err);
    free(name);
    return res;
}

/* Two ranks' gradients of 2 crops × n rows × cols, each ÷ 2 (DDP's mean), against one trainer's
 * over both ranks' images (rank r's row c·n + i is its row c·2n + r·n + i): the largest gap,
 * and in *top the largest of one trainer's values. */
static double ranks_rows_gap(const float *rank0, const float *rank1, const float *whole, int n, int cols,
                             double *top)
{
    const float *ranks[2] = {rank0, rank1};
    double worst = 0;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < n; i++)
                for (int k = 0; k < cols; k++) {
                    double mine = ranks[r][(c * n + i) * cols + k] / 2.0;
                    double want = whole[(c * 2 * n + r * n + i) * cols + k];
                    worst = fmax(worst, fabs(mine - want));
                    *top = fmax(*top, fabs(want));
                }
    return worst;
}

/* A cpu backend for the test's own reference runs. */
static eng_backend *reference_backend(void)
{
    char *err = NULL;
    eng_backend_options bo = {.threads = 1};
    eng_backend *be = eng_backend_open("cpu", &bo, &err);
    cr_assert(be, "%s", err);
    return be;
}

/* ---- the losses' gathers ----------------------------------------------------------------------- */

#define LB 4 /* images per rank */
#define LD 8 /* embedding width */
#define LCROPS 3

/* What a rank's loss gives: its value and d(loss)/d(output), for SimCLR (2 crops) and
 * multi-crop SimCLR (LCROPS crops). */
typedef struct {
    rank_status st;
    double simclr, multicrop;
    float dsimclr[2 * LB * LD], dmulticrop[LCROPS * LB * LD];
} loss_result;

/* Value k of image `image`'s crop `crop` embedding (before the loss normalises it). */
static float embedding_value(int image, int crop, int k)
{
    uint32_t h = (uint32_t)(image * 7919 + crop * 104729 + k * 31) * 2654435761u;
    return (float)(h >> 8) / (float)(1u << 24) * 2.0f - 1.0f + (k == crop ? 1.5f : 0.0f);
}

/* The crop-major rows a trainer feeds its loss: crop c of images first..first+n-1. */
static float *embeddings(int first, int n, int crops)
{
    float *e = xmalloc((size_t)(crops * n * LD) * sizeof *e);
    for (int c = 0; c < crops; c++)
        for (int i = 0; i < n; i++)
            for (int k = 0; k < LD; k++)
                e[((size_t)c * n + i) * LD + k] = embedding_value(first + i, c, k);
    return e;
}

/* One loss of `o` on rows (crops × n) of images first.., with `world` (NULL: alone): its value
 * and gradient into *value and grad. 0, or -1 with *err. */
static int run_loss(eng_backend *be, const loss_options *o, dist *world, int first, int n, int crops,
                    double *value, float *grad, char **err)
{
    loss_state *st = loss_state_new(be, o, 1, world);
    eng_shape shape = eng_shape2(crops * n, LD);
    eng_tensor out = eng_tensor_new(be, shape);
    float *e = embeddings(first, n, crops);
    eng_upload(be, &out, e);
    const eng_tensor *outs[1] = {&out};
    loss_batch b = {.batch = n};
    loss *l = loss_new(be, o, st, &shape, 1, err);
    int rc = l && loss_compute(be, l, outs, &b, value, err) == 0 ? 0 : -1;
    if (rc == 0)
        eng_download(be, loss_grad(l, 0), grad);
    loss_free(be, l);
    loss_state_free(be, st);
    eng_tensor_free(be, &out);
    free(e);
    return rc;
}

static loss_options gather_options(loss_name name, int world, int crops)
{
    return (loss_options){.name = name,
                          .temperature = 0.1,
                          .embedding_dim = LD,
                          .world_size = world,
                          .effective_batch_size = (name == LOSS_SIMCLR ? 2 : 1) * LB * world,
                          .num_crops = crops,
                          .ignore_index = -1};
}

static int loss_rank(rank_ctx *c, char **err)
{
    loss_result *res = c->res;
    loss_options a = gather_options(LOSS_SIMCLR, 2, 2), b = gather_options(LOSS_MULTICROP_SIMCLR, 2, LCROPS);
    if (run_loss(c->be, &a, &c->d, c->rank * LB, LB, 2, &res->simclr, res->dsimclr, err) != 0)
        return -1;
    return run_loss(c->be, &b, &c->d, c->rank * LB, LB, LCROPS, &res->multicrop, res->dmulticrop, err);
}

/* VISSL's gather_from_all with its backward, on 2 trainers of 4 images: each rank's SimCLR loss
 * reads the 16 embeddings of both, so the mean of the two ranks' losses is the loss of one
 * trainer on all 8 images, and each rank's gradient, averaged over the ranks as DDP does (÷ 2),
 * is that trainer's gradient for its rows (rank r's row c·4 + i is row c·8 + 4r + i there).
 * Multi-crop SimCLR keeps its negatives local (VISSL's masks): each rank's loss is the loss of
 * one trainer on its own 4 images, exactly. */
Test(ddp, simclr_gathers_every_ranks_embeddings_forward_and_backward, .timeout = 60)
{
    loss_result *res = run_ranks(loss_rank, sizeof *res, 2, NULL);
    eng_backend *be = reference_backend();
    char *err = NULL;
    loss_options whole = gather_options(LOSS_SIMCLR, 1, 2);
    whole.effective_batch_size = 2 * 2 * LB;
    double v;
    float g[2 * 2 * LB * LD];
    cr_assert_eq(run_loss(be, &whole, NULL, 0, 2 * LB, 2, &v, g, &err), 0, "%s", err);
    cr_expect_leq(fabs((res[0].simclr + res[1].simclr) / 2 - v), 1e-6 * v, "mean %.9g, one trainer %.9g",
                  (res[0].simclr + res[1].simclr) / 2, v);
    cr_expect_neq(res[0].simclr, res[1].simclr, "each rank's loss is over its own rows");
    double top = 0, worst = ranks_rows_gap(res[0].dsimclr, res[1].dsimclr, g, LB, LD, &top);
    cr_expect_gt(top, 1e-3);
    cr_expect_leq(worst, 1e-5 * top, "gradients: largest difference %.3g, largest %.3g", worst, top);

    for (int r = 0; r < 2; r++) {
        loss_options local = gather_options(LOSS_MULTICROP_SIMCLR, 1, LCROPS);
        float gl[LCROPS * LB * LD];
        cr_assert_eq(run_loss(be, &local, NULL, r * LB, LB, LCROPS, &v, gl, &err), 0, "%s", err);
        cr_expect_eq(res[r].multicrop, v, "rank %d: multi-crop loss %.9g, alone on its rows %.9g", r,
                     res[r].multicrop, v);
        cr_expect(memcmp(res[r].dmulticrop, gl, sizeof gl) == 0, "rank %d: multi-crop gradient", r);
    }
    eng_backend_close(be);
    munmap(res, 2 * sizeof *res);
}

/* ---- mean AP over the ranks ------------------------------------------------------------------- */

#define AP_CLASSES 5
#define AP_OUTPUTS 2
#define AP_MAX_ROWS 16
static const int AP_ROWS[3] = {6, 0, 9}; /* rank r's rows (global rows in rank order): they may differ */

typedef struct {
    rank_status st;
    double map[AP_OUTPUTS], ap[AP_OUTPUTS][AP_CLASSES];
} ap_result;

/* Output k's logit for global row i and class c; row i's target for c (1, 0, or −1: ignored).
 * Each class has a positive every 5 rows, so each rank's rows alone rank them differently. */
static float ap_logit(int k, int i, int c) { return 3.0f * sinf(1.3f * (float)i + 0.7f * (float)c + (float)k); }
static int64_t ap_target(int i, int c) { return (i * 7 + c * 3) % 5 == 0 ? 1 : (i + c) % 7 == 0 ? -1 : 0; }

/* A mean AP meter fed global rows [first, first + n) in one batch. */
static int ap_meter_feed(eng_backend *be, acc_meter *m, int first, int n, char **err)
{
    *m = (acc_meter){.kind = METER_MEAN_AP, .name = "mean_ap_list_meter", .num_meters = AP_OUTPUTS,
                     .num_classes = AP_CLASSES};
    if (n == 0)
        return 0;
    float logits[AP_MAX_ROWS * AP_CLASSES];
    int64_t label[AP_MAX_ROWS * AP_CLASSES];
    eng_tensor out[AP_OUTPUTS];
    const eng_tensor *outs[AP_OUTPUTS];
    for (int k = 0; k < AP_OUTPUTS; k++) {
        for (int i = 0; i < n * AP_CLASSES; i++) {
            logits[i] = ap_logit(k, first + i / AP_CLASSES, i % AP_CLASSES);
            label[i] = ap_target(first + i / AP_CLASSES, i % AP_CLASSES);
        }
        out[k] = eng_tensor_new(be, eng_shape2(n, AP_CLASSES));
        eng_upload(be, &out[k], logits);
        outs[k] = &out[k];
    }
    int rc = meter_update(be, m, outs, AP_OUTPUTS, label, n, AP_CLASSES, err);
    for (int k = 0; k < AP_OUTPUTS; k++)
        eng_tensor_free(be, &out[k]);
    return rc;
}

/* The meter's mAP and per-class AP of each output, as VISSL's dict gives them. */
static void ap_values(const acc_meter *m, double map[AP_OUTPUTS], double ap[AP_OUTPUTS][AP_CLASSES])
{
    json_t *v = meter_value(m);
    for (int k = 0; k < AP_OUTPUTS; k++) {
        char key[8];
        snprintf(key, sizeof key, "%d", k);
        map[k] = json_number_value(json_object_get(json_object_get(v, "mAP"), key));
        json_t *list = json_object_get(json_object_get(v, "AP"), key);
        for (int c = 0; c < AP_CLASSES; c++)
            ap[k][c] = json_number_value(json_array_get(list, (size_t)c));
    }
    json_decref(v);
}

static int ap_rank(rank_ctx *c, char **err)
{
    ap_result *res = c->res;
    int first = 0;
    for (int r = 0; r < c->rank; r++)
        first += AP_ROWS[r];
    acc_meter m;
    int rc = ap_meter_feed(c->be, &m, first, AP_ROWS[c->rank], err);
    if (rc == 0 && (rc = meter_reduce(&m, &c->d, err)) == 0)
        ap_values(&m, res->map, res->ap);
    meter_free(&m);
    return rc;
}

/* VISSL's MeanAPListMeter gathers every process's scores and targets before it computes AP:
 * 3 ranks holding 6, 0 and 9 rows each report the AP of one meter that saw all 15 rows, bit
 * for bit (the same rows in the same order), while rank 0's rows alone give another value. */
Test(ddp, mean_ap_is_computed_over_every_ranks_rows, .timeout = 60)
{
    ap_result *res = run_ranks(ap_rank, sizeof *res, 3, NULL);
    eng_backend *be = reference_backend();
    char *err = NULL;
    acc_meter whole, alone;
    cr_assert_eq(ap_meter_feed(be, &whole, 0, AP_ROWS[0] + AP_ROWS[1] + AP_ROWS[2], &err), 0, "%s", err);
    cr_assert_eq(ap_meter_feed(be, &alone, 0, AP_ROWS[0], &err), 0, "%s", err);
    double map[AP_OUTPUTS], ap[AP_OUTPUTS][AP_CLASSES], map0[AP_OUTPUTS], ap0[AP_OUTPUTS][AP_CLASSES];
    ap_values(&whole, map, ap);
    ap_values(&alone, map0, ap0);
    cr_expect_neq(map0[0], map[0], "rank 0's rows alone: mAP %.6f, all rows %.6f", map0[0], map[0]);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < AP_OUTPUTS; k++) {
            cr_expect_eq(res[r].map[k], map[k], "rank %d output %d: mAP %.9g, one meter %.9g", r, k, res[r].map[k],
                         map[k]);
            for (int c = 0; c < AP_CLASSES; c++)
                cr_expect_eq(res[r].ap[k][c], ap[k][c], "rank %d output %d class %d", r, k, c);
        }
    meter_free(&whole), meter_free(&alone);
    eng_backend_close(be);
    munmap(res, 3 * sizeof *res);
}

/* ---- SwAV's Sinkhorn over the ranks ------------------------------------------------------------ */

#define SB 4 /* images per rank */
#define SK 5 /* prototypes */
#define SQ 8 /* queue rows per rank and assignment crop */

typedef struct {
    rank_status st;
    double value[2];               /* without and with the queue */
    float dscores[2][2 * SB * SK]; /* d(loss)/d(scores) */
} swav_result;

static loss_options swav_test_options(int64_t queue)
{
    loss_options o = {
        .name = LOSS_SWAV, .temperature = 0.1, .embedding_dim = LD, .num_crops = 2, .world_size = 1};
    o.swav = (swav_options){.epsilon = 0.05,
                            .num_iters = 3,
                            .crops_for_assign = {0, 1},
                            .ncrops_for_assign = 2,
                            .num_prototypes = {SK},
                            .nheads = 1,
                            .queue_length = queue};
    return o;
}

/* Score k of image `image`'s crop `crop` (a cosine), and of queue row `row` of crop `crop`. */
static float score_value(int image, int crop, int k)
{
    uint32_t h = (uint32_t)(image * 7919 + crop * 104729 + k * 31 + 5) * 2654435761u;
    return (float)(h >> 8) / (float)(1u << 24) * 1.6f - 0.8f;
}

/* The queue's scores of rows first.. (each rank's queue rows are its slice of the world's). */
static void fill_queue(eng_backend *be, loss_state *st, int first, int rows)
{
    const eng_entry *e;
    loss_state_entries(st, &e); /* local_queue0 (2 × rows × SK) comes first */
    float *v = xmalloc((size_t)(2 * rows * SK) * sizeof *v);
    for (int a = 0; a < 2; a++)
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < SK; k++)
                v[(a * rows + r) * SK + k] = score_value(1000 + first + r, a, k);
    eng_upload(be, &e[0].value, v);
    free(v);
}

/* SwAV's loss on images first..first+n-1 (and queue rows first_q..first_q+q-1 when q > 0). */
static int run_swav(eng_backend *be, dist *world, int first, int n, int first_q, int q, double *value,
                    float *dscores, char **err)
{
    loss_options o = swav_test_options(q);
    o.world_size = dist_world(world);
    loss_state *st = loss_state_new(be, &o, 1, world);
    if (q)
        fill_queue(be, st, first_q, q);
    eng_shape shapes[2] = {eng_shape2(2 * n, LD), eng_shape2(2 * n, SK)};
    eng_tensor emb = eng_tensor_new(be, shapes[0]), scores = eng_tensor_new(be, shapes[1]);
    float *e = embeddings(first, n, 2), *sv = xmalloc((size_t)(2 * n * SK) * sizeof *sv);
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < n; i++)
            for (int k = 0; k < SK; k++)
                sv[(c * n + i) * SK + k] = score_value(first + i, c, k);
    eng_upload(be, &emb, e);
    eng_upload(be, &scores, sv);
    const eng_tensor *outs[2] = {&emb, &scores};
    loss_batch b = {.batch = n};
    loss *l = loss_new(be, &o, st, shapes, 2, err);
    int rc = l && loss_compute(be, l, outs, &b, value, err) == 0 ? 0 : -1;
    if (rc == 0)
        eng_download(be, loss_grad(l, 1), dscores);
    loss_free(be, l);
    loss_state_free(be, st);
    eng_tensor_free(be, &emb), eng_tensor_free(be, &scores);
    free(e), free(sv);
    return rc;
}

static int swav_rank(rank_ctx *c, char **err)
{
    swav_result *res = c->res;
    int first = c->rank * SB;
    if (run_swav(c->be, &c->d, first, SB, 0, 0, &res->value[0], res->dscores[0], err) != 0)
        return -1;
    return run_swav(c->be, &c->d, first, SB, c->rank * SQ, SQ, &res->value[1], res->dscores[1], err);
}

/* VISSL's distributed_sinkhornknopp: 2 trainers of 4 images, the codes computed over both
 * ranks' scores (the max, the total and the prototypes' sums all-reduced; the samples'
 * marginal 1/N over both), give the loss of one trainer of 8 images: the ranks' mean loss is
 * its loss and each rank's score gradients ÷ 2 are its gradients for those rows. With a queue
 * of 8 rows per rank, against one trainer whose queue holds both ranks' 16. */
Test(ddp, swav_sinkhorn_sums_over_every_ranks_scores, .timeout = 60)
{
    swav_result *res = run_ranks(swav_rank, sizeof *res, 2, NULL);
    eng_backend *be = reference_backend();
    char *err = NULL;
    for (int withq = 0; withq < 2; withq++) {
        double v;
        float g[2 * 2 * SB * SK];
        cr_assert_eq(run_swav(be, NULL, 0, 2 * SB, 0, withq ? 2 * SQ : 0, &v, g, &err), 0, "%s", err);
        double mean = (res[0].value[withq] + res[1].value[withq]) / 2;
        cr_expect_leq(fabs(mean - v), 1e-6 * v, "queue %d: mean %.9g, one trainer %.9g", withq, mean, v);
        double top = 0, worst = ranks_rows_gap(res[0].dscores[withq], res[1].dscores[withq], g, SB, SK, &top);
        cr_expect_gt(top, 1e-3);
        cr_expect_leq(worst, 1e-5 * top, "queue %d: gradients differ by %.3g (largest %.3g)", withq, worst,
                      top);
    }
    cr_expect_neq(res[0].value[0], res[1].value[0], "each rank's loss is over its own rows");
    eng_backend_close(be);
    munmap(res, 2 * sizeof *res);
}

/* ---- SyncBN ------------------------------------------------------------------------------------- */

#define BN_N 3 /* images per rank */
#define BN_C 5
#define BN_S 6 /* H·W */
#define BN_WORLD 4
#define BN_VALUES (BN_N * BN_C * BN_S)

/* What a batch norm's training step gives: y and dx, then per channel dγ, dβ and the running
 * mean and variance after it. */
typedef struct {
    float *y, *dx;
    float chan[4][BN_C];
} bn_out;

typedef struct {
    rank_status st;
    float y[BN_VALUES], dx[BN_VALUES], chan[4][BN_C];
} bn_result;

/* Value i of image `image`: its input (channel c centred near c), or the gradient reaching it. */
static float bn_value(int image, int i, bool grad)
{
    uint32_t h = (uint32_t)(image * 7919 + i * 31 + (grad ? 99991 : 7)) * 2654435761u;
    float v = (float)(h >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    return grad ? v : 3.0f * v + (float)(i / BN_S);
}

static void bn_inputs(eng_backend *be, const eng_tensor *x, const eng_tensor *dy, int first, int n)
{
    float *hx = xmalloc((size_t)n * BN_C * BN_S * sizeof *hx),
          *hdy = xmalloc((size_t)n * BN_C * BN_S * sizeof *hdy);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < BN_C * BN_S; k++) {
            hx[i * BN_C * BN_S + k] = bn_value(first + i, k, false);
            hdy[i * BN_C * BN_S + k] = bn_value(first + i, k, true);
        }
    eng_upload(be, x, hx), eng_upload(be, dy, hdy);
    free(hx), free(hdy);
}

/* Batch norm (with its ReLU when relu) forward and backward in training over images
 * first..first+n-1, over the ranks of `across` (NULL: alone), into *out. */
static void bn_run(eng_backend *be, int first, int n, bool relu, const eng_reducer *across, bn_out *out)
{
    eng_shape xs = eng_shape4(n, BN_C, 2, 3), cs = {.ndim = 1, .dim = {BN_C}};
    eng_tensor x = eng_tensor_new(be, xs), y = eng_tensor_new(be, xs), dy = eng_tensor_new(be, xs),
               dx = eng_tensor_new(be, xs), c[8];
    for (int k = 0; k < 8; k++)
        c[k] = eng_tensor_new(be, cs);
    eng_tensor *g = &c[0], *b = &c[1], *rm = &c[2], *rv = &c[3], *mean = &c[4], *invstd = &c[5], *dg = &c[6],
               *db = &c[7];
    static const float gv[BN_C] = {1.5f, 0.5f, -1.0f, 2.0f, 1.0f}, bv[BN_C] = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f},
                       ones[BN_C] = {1, 1, 1, 1, 1}, zeros[BN_C] = {0};
    bn_inputs(be, &x, &dy, first, n);
    eng_upload(be, g, gv), eng_upload(be, b, bv), eng_upload(be, rm, zeros), eng_upload(be, rv, ones);
    eng_zero(be, &dx), eng_zero(be, dg), eng_zero(be, db);
    if (relu) {
        eng_batchnorm_relu_forward_train(be, 0.1, 1e-5, &x, g, b, rm, rv, mean, invstd, &y, across);
        eng_batchnorm_relu_backward(be, &x, g, mean, invstd, &y, &dy, &dx, dg, db, across);
    } else {
        eng_batchnorm_forward_train(be, 0.1, 1e-5, &x, g, b, rm, rv, mean, invstd, &y, across);
        eng_batchnorm_backward(be, &x, g, mean, invstd, &dy, &dx, dg, db, across);
    }
    eng_download(be, &y, out->y), eng_download(be, &dx, out->dx);
    const eng_tensor *per[4] = {dg, db, rm, rv};
    for (int k = 0; k < 4; k++)
        eng_download(be, per[k], out->chan[k]);
    eng_tensor *all[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        eng_tensor_free(be, all[i]);
    for (int k = 0; k < 8; k++)
        eng_tensor_free(be, &c[k]);
}

/* What the SyncBN ranks run: groups of `group`, with or without the fused ReLU. */
typedef struct {
    int group;
    bool relu;
} bn_case;

/* A rank of BN_WORLD: its batch norm synced over its group. */
static int bn_rank(rank_ctx *c, char **err)
{
    const bn_case *k = c->arg;
    bn_result *res = c->res;
    dist_group g;
    dist_group_init(&g, &c->d, k->group);
    bn_out out = {.y = res->y, .dx = res->dx};
    bn_run(c->be, c->rank * BN_N, BN_N, k->relu, &g.reducer, &out);
    memcpy(res->chan, out.chan, sizeof out.chan);
    int rc = dist_group_check(&g, err);
    dist_group_free(&g);
    return rc;
}

/* The largest |a − b| and, into *top, the largest |b|. */
static double largest_gap(const float *a, const float *b, int n, double *top)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
        *top = fmax(*top, fabs((double)b[i]));
    }
    return worst;
}

/* The group of ranks first..first+group-1 against one batch norm over all their images. */
static void expect_group_is_one_batch_norm(eng_backend *be, const bn_result *res, int first, int group,
                                           bool relu)
{
    size_t values = (size_t)group * BN_VALUES;
    bn_out one = {.y = xmalloc(values * sizeof(float)), .dx = xmalloc(values * sizeof(float))};
    bn_run(be, first * BN_N, group * BN_N, relu, NULL, &one);
    double worst = 0, top = 0;
    for (int r = 0; r < group; r++) {
        worst = fmax(worst, largest_gap(res[first + r].y, one.y + (size_t)r * BN_VALUES, BN_VALUES, &top));
        worst = fmax(worst, largest_gap(res[first + r].dx, one.dx + (size_t)r * BN_VALUES, BN_VALUES, &top));
        for (int k = 2; k < 4; k++) /* the running statistics: the group's, on every rank */
            worst = fmax(worst, largest_gap(res[first + r].chan[k], one.chan[k], BN_C, &top));
    }
    for (int k = 0; k < 2; k++) { /* dγ, dβ: each rank's own sums, adding up to the group's */
        float sum[BN_C] = {0};
        for (int r = 0; r < group; r++)
            for (int c = 0; c < BN_C; c++)
                sum[c] += res[first + r].chan[k][c];
        worst = fmax(worst, largest_gap(sum, one.chan[k], BN_C, &top));
    }
    cr_expect_gt(top, 0.5);
    cr_expect_leq(worst, 2e-6 * top, "group of %d from rank %d (relu %d): largest difference %.3g of %.3g",
                  group, first, relu, worst, top);
    free(one.y), free(one.dx);
}

/* torch's SyncBatchNorm: 4 ranks of 3 images in SyncBN groups of 2 (GROUP_SIZE 2) and of 4
 * (all) each train as one batch norm over their group's images: outputs, running statistics
 * and dx are those of one rank holding the group's images, and the ranks' dγ and dβ (each its
 * own sums, as torch's) add up to that rank's. With and without the fused ReLU. */
Test(ddp, syncbn_normalises_over_the_groups_batch, .timeout = 60)
{
    eng_backend *be = reference_backend();
    for (int group = 2; group <= BN_WORLD; group += 2)
        for (int relu = 0; relu < 2; relu++) {
            bn_case k = {group, relu};
            bn_result *res = run_ranks(bn_rank, sizeof *res, BN_WORLD, &k);
            for (int first = 0; first < BN_WORLD; first += group)
                expect_group_is_one_batch_norm(be, res, first, group, relu);
            munmap(res, BN_WORLD * sizeof *res);
        }
    eng_backend_close(be);
}

/* ---- against PyTorch's DistributedDataParallel ------------------------------------------------- */

#define GOLDEN_STEPS 5
#define GOLDEN_MAX_TRAINED (64 * 1024)

/* make_ddp_fixtures.py's cases, as each rank's config (2 trainers of 4 images; a frozen
 * formula trunk in eval mode; heads that train). */
#define GOLDEN_BASE                                                                                          \
    "config:\n  DISTRIBUTED: {BACKEND: gloo, NUM_PROC_PER_NODE: 2}\n  LOG_FREQUENCY: 1\n"                    \
    "  MACHINE: {DEVICE: cpu}\n"                                                                             \
    "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"          \
    "    FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: true, FREEZE_TRUNK_ONLY: true}\n"
static const char GOLDEN_SIMCLR[] = GOLDEN_BASE
    "    HEAD: {PARAMS: [[mlp, {dims: [512, 64], use_relu: true}], [mlp, {dims: [64, 16]}]]}\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4}}\n"
    "  LOSS: {name: simclr_info_nce_loss, simclr_info_nce_loss: {temperature: 0.1, buffer_params: "
    "{embedding_dim: 16}}}\n"
    "  OPTIMIZER: {name: sgd, use_larc: true, larc_config: {trust_coefficient: 0.02}, weight_decay: "
    "0.0001,\n    momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n";
static const char GOLDEN_SWAV[] = GOLDEN_BASE
    "    HEAD: {PARAMS: [[swav_head, {dims: [512, 32, 16], use_bn: true, num_clusters: [20, 12]}]]}\n"
    "    TEMP_FROZEN_PARAMS_ITER_MAP: [[module.heads.0.prototypes0.weight, 2]]\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 4, COLLATE_FUNCTION: multicrop_collator}}\n"
    "  LOSS: {name: swav_loss, swav_loss: {num_crops: 4, temp_hard_assignment_iters: 1, "
    "crops_for_assign: [0, 1]}}\n"
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n";

typedef struct {
    int ok;
    char err[400];
    double loss[GOLDEN_STEPS];
    size_t n;
    float w0[GOLDEN_MAX_TRAINED], w1[GOLDEN_MAX_TRAINED];
} golden_result;

/* Every trained (head) parameter, flattened in state-dict order, into out; how many. */
static size_t head_values(trainer *t, float *out)
{
    model *m = trainer_model(t);
    size_t n = 0;
    for (int i = 0; i < model_entry_count(m); i++) {
        const eng_entry *e = model_entry_at(m, i);
        size_t k = (size_t)eng_numel(&e->value.shape);
        if (e->kind != ENG_PARAM || strncmp(e->name, "heads.", 6))
            continue;
        if (n + k <= GOLDEN_MAX_TRAINED)
            eng_download(trainer_backend(t), &e->value, out + n);
        n += k;
    }
    return n;
}

/* Rank `rank`'s batches (the fixture's records) through trainer_step; its logged losses. */
static int feed_rank(trainer *t, const char *kase, int rank, double *losses, char **err)
{
    char *file = xasprintf("%s_rank%d_batches.rec", kase, rank), *path = test_fixture("ddp", file);
    int fd = open(path, O_RDONLY), k = 0, rc = fd < 0 ? report_failure(err, "%s: cannot open", path) : 0;
    rec_buf buf = {0};
    rec_view v;
    while (rc == 0 && k < GOLDEN_STEPS && rec_fd_read(fd, &buf, &v, NULL, err) == 1 &&
           v.hdr->kind == REC_DATA) {
        rc = trainer_step(t, &v, v.hdr->epoch, err);
        losses[k++] = trainer_last_loss(t);
    }
    rc = rc ? rc : k == GOLDEN_STEPS ? trainer_finish(t, false, err) : report_failure(err, "%d steps", k);
    rec_buf_free(&buf);
    if (fd >= 0)
        close(fd);
    free(path), free(file);
    return rc;
}

/* Rank `rank` of the 2-trainer world `name`: its trainer on yaml (checkpoints in dir/rank<r>), or
 * NULL with *err. */
static trainer *rank_trainer(const char *yaml, const char *dir, int rank, const char *name, cfg_t *cfg, char **err)
{
    char *full = xasprintf("%s  CHECKPOINT: {DIR: '%s/rank%d'}\n", yaml, dir, rank);
    cfg_err cerr;
    coll_shm_options co = {.timeout_ms = 60000};
    coll *world = coll_shm_join(name, rank, 2, &co, err);
    trainer *t = NULL;
    if (world && test_compose(cfg, &cerr, full, NULL)) {
        trainer_options o = {
            .rank = rank, .world_size = 2, .world = world, .threads = 1, .steps_per_epoch = GOLDEN_STEPS};
        if (!(t = trainer_new(cfg_map_get(cfg->root, "config"), &o, &cerr)))
            *err = xstrdup(cerr.msg);
    } else if (world) {
        *err = xstrdup(cerr.msg);
    }
    free(full);
    return t;
}

static void golden_rank_main(golden_result *res, const char *yaml, const char *kase, int rank,
                             const char *name, const char *dir)
{
    char *err = NULL;
    cfg_t cfg = {0};
    trainer *t = rank_trainer(yaml, dir, rank, name, &cfg, &err);
    if (t) {
        model_init_formula(trainer_backend(t), trainer_model(t)); /* make_model_fixtures.py's weights */
        res->n = head_values(t, res->w0);
        res->ok = res->n <= GOLDEN_MAX_TRAINED && feed_rank(t, kase, rank, res->loss, &err) == 0 &&
                  head_values(t, res->w1) == res->n;
    }
    snprintf(res->err, sizeof res->err, "%s", err ? err : "");
    _exit(res->ok ? 0 : 1);
}

/* Two trainers on make_ddp_fixtures.py's batches against two PyTorch DDP processes (gloo) in
 * float64: the logged losses and the heads' update, within 3× torch's own float32 error (at
 * least 1e-4 and 1e-3, as test_trainer.c holds one trainer to VISSL). */
static void expect_ddp_golden(const char *kase, const char *yaml)
{
    golden_result *res =
        mmap(NULL, 2 * sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(res != MAP_FAILED);
    memset(res, 0, 2 * sizeof *res);
    char *dir = test_make_tmpdir(), *name = ring_name("ddpgold");
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        cr_assert((pids[r] = fork()) >= 0);
        if (pids[r] == 0)
            golden_rank_main(&res[r], yaml, kase, r, name, dir);
    }
    for (int r = 0; r < 2; r++)
        cr_assert_eq(test_wait_child(pids[r], 200000), 0, "%s rank %d: %s", kase, r, res[r].err);
    cr_assert_arr_eq(res[0].w1, res[1].w1, res[0].n * sizeof(float), "%s: the ranks are not one model", kase);
    npy_array want = test_fixture_npy("ddp", kase, "loss"), delta = test_fixture_npy("ddp", kase, "delta"),
              floor = test_fixture_npy("ddp", kase, "floor");
    const double *wl = want.data, *wd = delta.data, *fl = floor.data;
    double loss_tol = fmax(1e-4, 3 * fl[0]), update_tol = fmax(1e-3, 3 * fl[1]), worst_loss = 0;
    for (int k = 0; k < GOLDEN_STEPS; k++) {
        worst_loss = fmax(worst_loss, fabs(res[0].loss[k] - wl[k]) / fabs(wl[k]));
        cr_expect_leq(fabs(res[0].loss[k] - wl[k]), loss_tol * fabs(wl[k]),
                      "%s step %d: loss %.9g, DDP's %.9g", kase, k, res[0].loss[k], wl[k]);
    }
    cr_assert_eq(res[0].n, delta.count, "%s: trained values", kase);
    double worst = 0, top = 0;
    for (size_t i = 0; i < res[0].n; i++) {
        worst = fmax(worst, fabs((double)res[0].w1[i] - (double)res[0].w0[i] - wd[i]));
        top = fmax(top, fabs(wd[i]));
    }
    cr_expect_gt(top, 0.0);
    cr_expect_leq(worst, update_tol * top, "%s: update error %.3g of %.3g (tolerance %.3g)", kase, worst, top,
                  update_tol);
    if (getenv("DDP_VERBOSE"))
        fprintf(stderr, "ddp golden %s: loss error %.3g, update error %.3g (torch fp32: %.3g, %.3g)\n", kase,
                worst_loss, worst / top, fl[0], fl[1]);
    npy_close(&want), npy_close(&delta), npy_close(&floor);
    test_rm_rf(dir);
    free(dir), free(name);
    munmap(res, 2 * sizeof *res);
}

/* SimCLR's gather_from_all with LARC, and SwAV's distributed Sinkhorn with a head batch norm on
 * each rank's own batch (no SyncBN), against VISSL's way in PyTorch: two processes of gloo
 * under DistributedDataParallel. */
Test(ddp, two_trainers_train_as_pytorch_ddp_does, .timeout = 300)
{
    expect_ddp_golden("simclr_larc", GOLDEN_SIMCLR);
    expect_ddp_golden("swav", GOLDEN_SWAV);
}

/* ---- methods with state: one trainer's golden split over two ----------------------------------- */

#define STATE_MAX 1024 /* floats of the state checked: MoCo's queue (16 × 16), NPID's memory (32 × 16) */

#define SPLIT_HEADS "    HEAD: {PARAMS: [[mlp, {dims: [512, 64], use_relu: true}], [mlp, {dims: [64, 16]}]]}\n"
#define SPLIT_SGD                                                                                            \
    "  OPTIMIZER: {name: sgd, weight_decay: 0.0001, momentum: 0.9, num_epochs: 1,\n"                          \
    "    param_schedulers: {lr: {name: cosine, start_value: 0.3, end_value: 0.0, update_interval: step}}}\n"
static const char GOLDEN_MOCO[] = GOLDEN_BASE SPLIT_HEADS
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 2, COLLATE_FUNCTION: moco_collator}}\n"
    "  LOSS: {name: moco_loss, moco_loss: {embedding_dim: 16, queue_size: 16, momentum: 0.9, temperature: 0.2}}\n"
    SPLIT_SGD;
static const char GOLDEN_NPID[] = GOLDEN_BASE SPLIT_HEADS
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 2}}\n"
    "  LOSS: {name: nce_loss_with_memory, nce_loss_with_memory: {num_train_samples: 32,\n"
    "    negative_sampling_params: {num_negatives: 8}, memory_params: {embedding_dim: 16}}}\n" SPLIT_SGD;

static const char GOLDEN_PIRL[] = GOLDEN_BASE
    "    MULTI_INPUT_HEAD_MAPPING: [[patches, [flatten]], [images, [flatten]]]\n"
    "    HEAD: {PARAMS: [[[mlp, {dims: [512, 16]}], [siamese_concat_view, {num_towers: 9}], [mlp, {dims: [144, 16]}]],\n"
    "      [[mlp, {dims: [512, 16]}]]]}\n"
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 2, COLLATE_FUNCTION: patch_and_image_collator,\n"
    "    INPUT_KEY_NAMES: [patches, images]}}\n"
    "  LOSS: {name: nce_loss_with_memory, nce_loss_with_memory: {num_train_samples: 32, loss_weights: [0.5, 0.5],\n"
    "    update_mem_with_emb_index: 1, negative_sampling_params: {num_negatives: 8},\n"
    "    memory_params: {embedding_dim: 16, update_mem_on_forward: false}}}\n" SPLIT_SGD;

/* A case of make_train_fixtures.py (1 trainer of 4) run as 2 trainers of 2, and its state. */
typedef struct {
    const char *kase, *yaml;
    const char *state, *state0, *state_want; /* the state entry, its fixture start, its fixture end */
} split_case;

typedef struct {
    golden_result g;
    float state[STATE_MAX];
} split_result;

/* Images [first, first + n) of the 4 of every tensor of v but its normalize rows (kept whole),
 * as a record in buf: rows along dim 0, shape[0] / 4 of them per image (PIRL's patches: 9). */
static size_t rows_of(const rec_view *v, int first, int n, void *buf, size_t cap)
{
    rec_writer w;
    if (rec_writer_init(&w, buf, cap, REC_DATA, v->hdr->seq, v->hdr->epoch, v->hdr->n_tensors) != 0)
        return 0;
    for (int i = 0; i < (int)v->hdr->n_tensors; i++) {
        const rec_tensor *t = &v->tensors[i];
        uint64_t shape[REC_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        const uint8_t *data = rec_data(v, i);
        if (strcmp(t->name, "normalize")) {
            uint64_t per = t->shape[0] / 4;
            data += (size_t)first * per * (t->nbytes / t->shape[0]);
            shape[0] = (uint64_t)n * per;
        }
        if (rec_add_copy(&w, t->name, (rec_dtype)t->dtype, t->ndim, shape, data) != 0)
            return 0;
    }
    return rec_finish(&w);
}

static const eng_entry *state_entry(trainer *t, const char *name)
{
    const eng_entry *e;
    int n = loss_state_entries(trainer_loss_state(t), &e);
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name))
            return &e[i];
    return NULL;
}

/* Images [first, first + n) of every batch of the one-trainer fixture through trainer_step. */
static int feed_rows(trainer *t, const char *kase, int first, int n, double *losses, char **err)
{
    char *file = xasprintf("%s_batches.rec", kase), *path = test_fixture("train", file);
    int fd = open(path, O_RDONLY), k = 0, rc = fd < 0 ? report_failure(err, "%s: cannot open", path) : 0;
    rec_buf buf = {0};
    rec_view v, part;
    size_t cap = 1 << 20, len;
    void *out = aligned_alloc(64, cap);
    while (rc == 0 && k < GOLDEN_STEPS && rec_fd_read(fd, &buf, &v, NULL, err) == 1 && v.hdr->kind == REC_DATA) {
        rc = (len = rows_of(&v, first, n, out, cap)) && !rec_parse(out, len, &part, err) &&
                     !trainer_step(t, &part, part.hdr->epoch, err)
                 ? 0
                 : -1;
        losses[k++] = trainer_last_loss(t);
    }
    rc = rc ? rc : k == GOLDEN_STEPS ? trainer_finish(t, false, err) : report_failure(err, "%d steps", k);
    rec_buf_free(&buf);
    free(out);
    if (fd >= 0)
        close(fd);
    free(path), free(file);
    return rc;
}

/* Rank `rank`'s half of every batch of the one-trainer fixture through trainer_step. */
static int feed_half(trainer *t, const char *kase, int rank, double *losses, char **err)
{
    return feed_rows(t, kase, 2 * rank, 2, losses, err);
}

static void split_rank_main(split_result *res, const split_case *c, int rank, const char *name, const char *dir)
{
    char *err = NULL, *state_name = xasprintf("%s%s", rank ? "rank1." : "", c->state);
    cfg_t cfg = {0};
    trainer *t = rank_trainer(c->yaml, dir, rank, name, &cfg, &err);
    const eng_entry *state = t ? state_entry(t, state_name) : NULL;
    if (state && eng_numel(&state->value.shape) <= STATE_MAX) {
        model_init_formula(trainer_backend(t), trainer_model(t));
        npy_array s0 = test_fixture_npy("train", c->kase, c->state0);
        eng_upload(trainer_backend(t), &state->value, s0.data);
        npy_close(&s0);
        res->g.n = head_values(t, res->g.w0);
        res->g.ok = feed_half(t, c->kase, rank, res->g.loss, &err) == 0 && head_values(t, res->g.w1) == res->g.n;
        eng_download(trainer_backend(t), &state->value, res->state);
    }
    snprintf(res->g.err, sizeof res->g.err, "%s", err ? err : t && !state ? "no such state entry" : "");
    _exit(res->g.ok ? 0 : 1);
}

/* Case c on 2 trainers of 2 images against VISSL's one trainer of 4 (test_trainer.c's golden):
 * the trunk is frozen in eval mode and the heads have no batch norm, so every row is its image's
 * alone and the ranks' mean loss, averaged gradients and shared state are the one trainer's. */
static void expect_split_golden(const split_case *c)
{
    split_result *res = mmap(NULL, 2 * sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(res != MAP_FAILED);
    memset(res, 0, 2 * sizeof *res);
    char *dir = test_make_tmpdir(), *name = ring_name("ddpsplit");
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        cr_assert((pids[r] = fork()) >= 0);
        if (pids[r] == 0)
            split_rank_main(&res[r], c, r, name, dir);
    }
    int status[2];
    for (int r = 0; r < 2; r++)
        status[r] = test_wait_child(pids[r], 200000);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(status[r], 0, "%s rank %d: %s (rank %d: %s)", c->kase, r, res[r].g.err, 1 - r,
                     res[1 - r].g.err);
    cr_assert_arr_eq(res[0].g.w1, res[1].g.w1, res[0].g.n * sizeof(float), "%s: the ranks are not one model", c->kase);
    npy_array want = test_fixture_npy("train", c->kase, "loss"), delta = test_fixture_npy("train", c->kase, "delta"),
              state = test_fixture_npy("train", c->kase, c->state_want);
    cr_assert_arr_eq(res[0].state, res[1].state, state.count * sizeof(float), "%s: the ranks' states differ", c->kase);
    const double *wl = want.data, *wd = delta.data, *ws = state.data;
    for (int k = 0; k < GOLDEN_STEPS; k++)
        cr_expect_leq(fabs(res[0].g.loss[k] - wl[k]), 1e-4 * fabs(wl[k]), "%s step %d: loss %.9g, VISSL's %.9g",
                      c->kase, k, res[0].g.loss[k], wl[k]);
    cr_assert_eq(res[0].g.n, delta.count);
    double worst = 0, top = 0, worst_s = 0;
    for (size_t i = 0; i < res[0].g.n; i++) {
        worst = fmax(worst, fabs((double)res[0].g.w1[i] - (double)res[0].g.w0[i] - wd[i]));
        top = fmax(top, fabs(wd[i]));
    }
    for (size_t i = 0; i < state.count; i++)
        worst_s = fmax(worst_s, fabs((double)res[0].state[i] - ws[i]));
    cr_expect_leq(worst, 1e-3 * top, "%s: update error %.3g of %.3g", c->kase, worst, top);
    cr_expect_leq(worst_s, 1e-3, "%s: %s error %.3g", c->kase, c->state, worst_s);
    if (getenv("DDP_VERBOSE"))
        fprintf(stderr, "ddp %s: update error %.3g, %s error %.3g\n", c->kase, worst / top, c->state, worst_s);
    npy_close(&want), npy_close(&delta), npy_close(&state);
    test_rm_rf(dir);
    free(dir), free(name);
    munmap(res, 2 * sizeof *res);
}

/* MoCo: the batch shuffle across the ranks (MoCo's BN trick, on without SyncBN) must hand each
 * rank its own keys back in order (a key in the wrong row breaks the positives, and the losses),
 * and the queue must take the world's 4 keys in rank order. */
Test(ddp, moco_with_two_trainers_shuffles_the_keys_and_trains_the_model_one_trainer_trains, .timeout = 300)
{
    expect_split_golden(&(split_case){"moco", GOLDEN_MOCO, "loss.queue", "queue0", "queue"});
}

/* NPID and PIRL: Z from the mean of the ranks' means, the memory updated with every rank's rows,
 * and each row's negatives the ones it draws in one trainer of 4 (its stream is its place in the
 * global batch). */
Test(ddp, npid_with_two_trainers_trains_the_model_one_trainer_trains, .timeout = 300)
{
    expect_split_golden(&(split_case){"npid", GOLDEN_NPID, "loss.nce_average.memory", "memory0", "memory"});
    expect_split_golden(&(split_case){"pirl", GOLDEN_PIRL, "loss.nce_average.memory", "memory0", "memory"});
}

/* ---- swav_momentum_loss: the momentum network's batch norms over the world -------------------- */

/* make_train_fixtures.py's swav_momentum model and batches (test_trainer.c holds one trainer of
 * 4 to VISSL's code) without the queue: VISSL's queue takes rows / num_crops embeddings of the
 * first crops' rows a step, so 2 trainers of 2 fill theirs with other images than one trainer
 * of 4 does, in VISSL as here; without it, 2 trainers of 2 with SyncBN are one trainer of 4. */
#define SWAVM_YAML(procs, batch)                                                                            \
    "config:\n  DISTRIBUTED: {BACKEND: gloo, NUM_PROC_PER_NODE: " #procs "}\n  LOG_FREQUENCY: 1\n"         \
    "  MACHINE: {DEVICE: cpu}\n"                                                                             \
    "  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"          \
    "    FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: true, FREEZE_TRUNK_ONLY: true}\n"                             \
    "    SYNC_BN_CONFIG: {CONVERT_BN_TO_SYNC_BN: true}\n"                                                    \
    "    HEAD: {PARAMS: [[swav_head, {dims: [512, 32, 16], use_bn: true, num_clusters: [20, 12]}]]}\n"      \
    "  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: " #batch ", COLLATE_FUNCTION: multicrop_collator}}\n"           \
    "  LOSS: {name: swav_momentum_loss, swav_momentum_loss: {num_crops: 4, crops_for_assign: [0, 1],\n"       \
    "    momentum: 0.9, momentum_eval_mode_iter_start: 2}}\n" SPLIT_SGD

#define SWAVM_ENC_MAX (32 * 1024) /* the network's head values: 17,552 */

typedef struct {
    golden_result g;
    float enc[SWAVM_ENC_MAX];
    size_t nenc;
} swavm_result;

/* The momentum network's head parameters (its trunk is frozen), as test_trainer.c reads them. */
static size_t encoder_heads(trainer *t, const char *prefix, float *out)
{
    const eng_entry *e;
    int ne = loss_state_entries(trainer_loss_state(t), &e);
    size_t n = 0;
    for (int i = 0; i < ne; i++) {
        size_t k = (size_t)eng_numel(&e[i].value.shape);
        if (strncmp(e[i].name, prefix, strlen(prefix)) || strstr(e[i].name, "running_"))
            continue;
        if (n + k <= SWAVM_ENC_MAX)
            eng_download(trainer_backend(t), &e[i].value, out + n);
        n += k;
    }
    return n;
}

/* Rank `rank` of `world` (1: the one trainer of 4, no world to join) on swav_queue's batches. */
static void swavm_main(swavm_result *res, int rank, int world, const char *name, const char *dir)
{
    char *err = NULL, *enc = xasprintf("%sloss.momentum_encoder.heads.", rank ? "rank1." : "");
    cfg_t cfg = {0};
    trainer *t = NULL;
    if (world == 2)
        t = rank_trainer(SWAVM_YAML(2, 2), dir, rank, name, &cfg, &err);
    else {
        char *yaml = xasprintf("%s  CHECKPOINT: {DIR: '%s/one'}\n", SWAVM_YAML(1, 4), dir);
        cfg_err cerr;
        trainer_options o = {.world_size = 1, .threads = 1, .steps_per_epoch = GOLDEN_STEPS};
        if (!test_compose(&cfg, &cerr, yaml, NULL) || !(t = trainer_new(cfg_map_get(cfg.root, "config"), &o, &cerr)))
            err = xstrdup(cerr.msg);
        free(yaml);
    }
    if (t) {
        model_init_formula(trainer_backend(t), trainer_model(t));
        res->g.n = head_values(t, res->g.w0);
        res->g.ok = feed_rows(t, "swav_queue", 2 * rank, 4 / world, res->g.loss, &err) == 0 &&
                    head_values(t, res->g.w1) == res->g.n;
        res->nenc = encoder_heads(t, enc, res->enc);
    }
    snprintf(res->g.err, sizeof res->g.err, "%s", err ? err : res->nenc > SWAVM_ENC_MAX ? "network size" : "");
    _exit(res->g.ok && res->nenc <= SWAVM_ENC_MAX ? 0 : 1);
}

/* SwAV's momentum variant: 2 trainers of 2 with SyncBN against one trainer of 4. The network's
 * batch norms (VISSL converts them to SyncBatchNorm whatever the config says) must normalise
 * over both ranks' crops in its train-mode iterations (the first 2) and hold rank 0's running
 * statistics in its eval-mode ones (VISSL wraps it in DDP, which broadcasts them); the Sinkhorn
 * codes sum over both ranks' scores. Losses, the update, and the network's heads after 5 steps,
 * within float32's rounding. */
Test(ddp, swav_momentum_with_two_trainers_is_one_trainer_of_their_batch, .timeout = 300)
{
    swavm_result *res = mmap(NULL, 3 * sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(res != MAP_FAILED);
    memset(res, 0, 3 * sizeof *res);
    char *dir = test_make_tmpdir(), *name = ring_name("ddpswavm");
    pid_t pids[3];
    for (int r = 0; r < 3; r++) { /* res[0]: the one trainer; res[1], res[2]: ranks 0 and 1 */
        cr_assert((pids[r] = fork()) >= 0);
        if (pids[r] == 0)
            swavm_main(&res[r], r ? r - 1 : 0, r ? 2 : 1, name, dir);
    }
    int status[3];
    for (int r = 0; r < 3; r++)
        status[r] = test_wait_child(pids[r], 200000);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(status[r], 0, "%s: %s", r ? "a rank" : "the one trainer", res[r].g.err);
    cr_assert_arr_eq(res[1].g.w1, res[2].g.w1, res[1].g.n * sizeof(float), "the ranks are not one model");
    cr_assert_arr_eq(res[1].enc, res[2].enc, res[1].nenc * sizeof(float), "the ranks' momentum networks differ");
    cr_assert_eq(res[0].g.n, res[1].g.n);
    cr_assert_eq(res[0].nenc, res[1].nenc);
    for (int k = 0; k < GOLDEN_STEPS; k++)
        cr_expect_leq(fabs(res[1].g.loss[k] - res[0].g.loss[k]), 1e-5 * fabs(res[0].g.loss[k]),
                      "step %d: loss %.9g, one trainer's %.9g", k, res[1].g.loss[k], res[0].g.loss[k]);
    double worst = 0, top = 0, worst_e = 0, top_e = 0;
    for (size_t i = 0; i < res[0].g.n; i++) {
        double d0 = (double)res[0].g.w1[i] - res[0].g.w0[i], d1 = (double)res[1].g.w1[i] - res[1].g.w0[i];
        worst = fmax(worst, fabs(d1 - d0));
        top = fmax(top, fabs(d0));
    }
    for (size_t i = 0; i < res[0].nenc; i++) {
        worst_e = fmax(worst_e, fabs((double)res[1].enc[i] - res[0].enc[i]));
        top_e = fmax(top_e, fabs((double)res[0].enc[i]));
    }
    cr_expect_gt(top, 0.0);
    cr_expect_leq(worst, 1e-4 * top, "update error %.3g of %.3g", worst, top);
    cr_expect_leq(worst_e, 1e-4 * top_e, "momentum network error %.3g of %.3g", worst_e, top_e);
    if (getenv("DDP_VERBOSE"))
        fprintf(stderr, "ddp swav_momentum: update error %.3g, network error %.3g\n", worst / top, worst_e / top_e);
    test_rm_rf(dir);
    free(dir), free(name);
    munmap(res, 3 * sizeof *res);
}

/* ---- under selfsup run ------------------------------------------------------------------------- */

/* `selfsup run quickstart/<recipe>` on a small Fashion-MNIST (256 images, 2 epochs of 4 steps)
 * with SyncBN, `procs` trainers of `batch` images, the recipe's data overrides, then `extra`;
 * its folders under dir (CHECKPOINT.DIR "one" or "two", run_1 or run_2). The convolutions are
 * direct: Winograd's weight gradient sums its tiles in an order that depends on the batch, so
 * a trainer of 32 and one of 64 would differ by more than the collectives' rounding. */
static char *quickstart_cmd(const char *recipe, const char *data, const char *dir, int procs, int batch,
                            const char *extra)
{
    char *bin = test_build_path("selfsup"), *configs = test_path("configs");
    char *cmd = xasprintf(
        "SELFSUP_CONFIGS='%s' '%s' run quickstart/%s %s "
        "config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy] "
        "config.DATA.TRAIN.DATA_LIMIT=256 "
        "config.DATA.NUM_DATALOADER_WORKERS=1 config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN=true "
        "config.MACHINE.CPU_WINOGRAD=false "
        "config.OPTIMIZER.param_schedulers.lr.auto_lr_scaling.auto_scale=false config.LOG_FREQUENCY=1 "
        "config.DISTRIBUTED.NUM_PROC_PER_NODE=%d config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=%d "
        "config.CHECKPOINT.DIR=%s/%s %s --run-dir %s/run_%d",
        configs, bin, recipe, data, dir, procs, batch, dir, procs == 1 ? "one" : "two", extra, dir, procs);
    free(bin), free(configs);
    return cmd;
}

/* quickstart/supervised, with its labels and a test phase (128 images) after each epoch. */
static char *supervised_cmd(const char *dir, int procs, int batch, const char *extra)
{
    char *data = xasprintf(
        "config.DATA.TRAIN.LABEL_PATHS=[%s/fm/disk_filelist/train_labels.npy] "
        "config.DATA.TEST.DATA_PATHS=[%s/fm/disk_filelist/val_images.npy] "
        "config.DATA.TEST.LABEL_PATHS=[%s/fm/disk_filelist/val_labels.npy] "
        "config.DATA.TEST.DATA_LIMIT=128 config.OPTIMIZER.param_schedulers.lr.values=[0.001,0.0001] "
        "config.DATA.TEST.BATCHSIZE_PER_REPLICA=%d",
        dir, dir, dir, batch);
    char *cmd = quickstart_cmd("supervised", data, dir, procs, batch, extra);
    free(data);
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

/* The runs of one and two trainers under dir trained one model: 8 steps logged, by rank 0
 * alone; the same losses over the first `steps` within loss_tol relative, and the same weights
 * in `checkpoint` within weight_tol of the largest weight. */
static void expect_one_model(const char *dir, int steps, const char *checkpoint, double loss_tol,
                             double weight_tol)
{
    char *s1 = xasprintf("%s/one/stdout.json", dir), *s2 = xasprintf("%s/two/stdout.json", dir);
    double l1[16], l2[16];
    int nl = json_numbers(s1, "loss", l1, 16);
    cr_assert_eq(nl, 8, "8 steps logged by the single trainer");
    cr_assert_eq(json_numbers(s2, "loss", l2, 16), nl, "8 steps logged, by rank 0 alone");
    double worst_loss = 0;
    for (int k = 0; k < steps; k++) {
        cr_expect_leq(fabs(l1[k] - l2[k]), loss_tol * fabs(l1[k]), "step %d: loss %.9g against %.9g", k + 1,
                      l2[k], l1[k]);
        worst_loss = fmax(worst_loss, fabs(l1[k] - l2[k]) / fabs(l1[k]));
        if (getenv("DDP_VERBOSE"))
            fprintf(stderr, "ddp run %s: step %d: losses %.9g and %.9g\n", checkpoint, k + 1, l1[k], l2[k]);
    }
    char *c1 = xasprintf("%s/one/%s", dir, checkpoint), *c2 = xasprintf("%s/two/%s", dir, checkpoint);
    double worst, top;
    compare_checkpoints(c1, c2, &worst, &top);
    cr_expect_leq(worst, weight_tol * top, "final weights: largest difference %.3g, largest value %.3g",
                  worst, top);
    if (getenv("DDP_VERBOSE"))
        fprintf(
            stderr,
            "ddp run %s: losses within %.2g relative; weights: largest difference %.3g, largest value %.3g\n",
            checkpoint, worst_loss, worst, top);
    free(s1), free(s2), free(c1), free(c2);
}

/* A new folder with the small Fashion-MNIST and supervised_run's single trainer of batch 64
 * trained on it (in <folder>/one). */
static char *trained_by_one(void)
{
    char *dir = test_make_tmpdir(), *out;
    make_fashion_mnist(dir);
    int rc = supervised_run(dir, 1, 64, "", &out);
    cr_assert_eq(rc, 0, "one trainer: %s", out);
    free(out);
    return dir;
}

/* VISSL's promise, through the whole pipeline: 2 trainers of batch 32 with SyncBN, each fed its
 * rank's DistributedSampler shard by a chain of its own, train the model 1 trainer of batch 64
 * trains (the same samples per step, the same augmentations, the same global batch, batch norm
 * over it), and log the same losses (the mean over the ranks) and accuracies (counts summed
 * over the ranks), up to fp32's order of sums. Without SyncBN the first loss is already 1.3%
 * off. Compared over the first epoch (its test phase, its checkpoint after 4 steps; the losses
 * of the first 3): this recipe's tiny images leave batch norms whose channels barely vary (res5
 * is one pixel), whose backward magnifies any rounding a hundredfold a step from the third or
 * fourth on: one trainer run with 1 and with 2 threads drifts apart the same way. Every code
 * path runs in the first step, so a fault would show there. Measured (activations in oneDNN's
 * blocked layout, 2026-12-01): losses within 8e-8 relative over 3 steps (the fourth 1.8e-5),
 * weights within 4.8e-5 of the largest; in the logical layout before, 1.4e-7 over 4 steps and
 * 1.6e-5. An accuracy may differ by one sample where two logits tie to fp32 precision. */
Test(ddp, selfsup_run_with_two_trainers_trains_the_model_one_trainer_trains, .timeout = 600)
{
    char *dir = trained_by_one(), *out;
    int rc = supervised_run(dir, 2, 32, "", &out);
    cr_assert_eq(rc, 0, "two trainers: %s", out);
    cr_expect(strstr(out, "14 stages, 12 rings"), "a chain per trainer and its test chain: %s", out);
    free(out);
    char *m1 = xasprintf("%s/one/metrics.json", dir), *m2 = xasprintf("%s/two/metrics.json", dir);
    double acc1[16], acc2[16];
    int na = accuracies(m1, acc1, 16);
    cr_assert_eq(na, 8, "2 train and 2 test phases, top-1 and top-5 each");
    cr_assert_eq(accuracies(m2, acc2, 16), na);
    for (int k = 0; k < 4; k++) /* the first train and test phases; one sample of 256 is 0.39 points */
        cr_expect_leq(fabs(acc1[k] - acc2[k]), 0.4, "accuracy %d: %.4f and %.4f", k, acc1[k], acc2[k]);
    expect_one_model(dir, 3, "model_phase0.torch", 1e-6, 1e-4);
    free(m1), free(m2);
    test_rm_rf(dir);
    free(dir);
}

/* The mean test loss rank 0 logged for its first test phase (after the mean over the ranks). */
static double first_test_loss(const char *run_dir)
{
    char *log = xasprintf("%s/logs/train.0.log", run_dir);
    size_t n;
    char *text = read_whole_file(log, &n), *at = text ? strstr(text, "test phase 0: ") : NULL;
    at = at ? strstr(at, "mean loss ") : NULL;
    double v = at ? strtod(at + strlen("mean loss "), NULL) : NAN;
    free(text), free(log);
    return v;
}

/* TEST_ONLY over the trainers: the weights one trainer trained (its last checkpoint), tested by 1
 * trainer of batch 64 and by 2 of 32 (each its DistributedSampler shard of the 128 test
 * images): the same accuracies (counts summed over the ranks) and the same mean loss (the
 * ranks' means averaged), every rank logging the phase it tested. */
Test(ddp, test_only_with_two_trainers_tests_what_one_trainer_tests, .timeout = 600)
{
    char *dir = trained_by_one(), *out;
    char *test = xasprintf("%s/test", dir), *fm = xasprintf("%s/fm", dir), *link = xasprintf("%s/fm", test);
    cr_assert(mkdir(test, 0755) == 0 && symlink(fm, link) == 0);
    char *only = xasprintf("config.TEST_ONLY=True config.MODEL.WEIGHTS_INIT.PARAMS_FILE=%s/one/checkpoint.torch",
                           dir);
    for (int procs = 1; procs <= 2; procs++) {
        char *cmd = supervised_cmd(test, procs, 64 / procs, only);
        cr_assert_eq(test_run_within(cmd, 300, &out), 0, "TEST_ONLY, %d trainer(s): %s", procs, out);
        free(out), free(cmd);
    }
    char *m1 = xasprintf("%s/one/metrics.json", test), *m2 = xasprintf("%s/two/metrics.json", test);
    double acc1[16], acc2[16];
    int na = accuracies(m1, acc1, 16);
    cr_assert_eq(na, 4, "2 test phases, top-1 and top-5 each");
    cr_assert_eq(accuracies(m2, acc2, 16), na);
    for (int k = 0; k < na; k++) /* one sample of 128 is 0.78 points, where two logits tie */
        cr_expect_leq(fabs(acc1[k] - acc2[k]), 0.8, "accuracy %d: %.4f and %.4f", k, acc1[k], acc2[k]);
    char *r1 = xasprintf("%s/run_1", test), *r2 = xasprintf("%s/run_2", test);
    double l1 = first_test_loss(r1), l2 = first_test_loss(r2);
    cr_expect_leq(fabs(l1 - l2), 1e-4 * fabs(l1), "mean test loss %.6g (2 trainers) against %.6g", l2, l1);
    if (getenv("DDP_VERBOSE"))
        fprintf(stderr, "ddp TEST_ONLY: top-1 %.4f / %.4f, top-5 %.4f / %.4f, mean loss %.6g / %.6g\n", acc1[0],
                acc2[0], acc1[1], acc2[1], l1, l2);
    char *rank1 = xasprintf("%s/logs/train.1.log", r2);
    size_t n;
    char *text = read_whole_file(rank1, &n);
    cr_expect(text && strstr(text, "Rank: 1; test phase 0: 2 batches"), "rank 1 tested its shard: %s", text);
    free(text), free(rank1), free(r1), free(r2), free(m1), free(m2), free(only), free(test), free(fm), free(link);
    test_rm_rf(dir);
    free(dir);
}

/* quickstart/<recipe> with the `data` overrides, by 1 trainer of batch 64 and by 2 of 32, into dir. */
static void run_one_and_two(const char *dir, const char *recipe, const char *data)
{
    for (int procs = 1; procs <= 2; procs++) {
        char *cmd = quickstart_cmd(recipe, data, dir, procs, 64 / procs, ""), *out;
        int rc = test_run_within(cmd, 300, &out);
        cr_assert_eq(rc, 0, "%s, %d trainer(s): %s", recipe, procs, out);
        free(out), free(cmd);
    }
}

/* SimCLR across trainers (gather_from_all) with SyncBN: quickstart/simclr with 2 trainers of 32
 * trains the model 1 trainer of 64 trains. The learning rate starts at 0.03: at the recipe's
 * 0.3 (with LARC) the last bits of the sums' order grow tenfold a step from the fourth on (4e-4
 * apart by step 8 on a LayerNorm trunk), which says nothing about the gathers. Measured (the
 * quickstart's small-image stem, direct convolutions, activations channel-blocked): losses within
 * 1e-6 relative, weights within 1.7e-5 of the largest (3.8e-7 and 5.6e-6 in the logical layout:
 * the same sums in another order, magnified alike). */
Test(ddp, selfsup_run_simclr_with_two_trainers_trains_the_model_one_trainer_trains, .timeout = 600)
{
    char *dir = test_make_tmpdir();
    make_fashion_mnist(dir);
    run_one_and_two(dir, "simclr", "config.OPTIMIZER.param_schedulers.lr.start_value=0.03");
    expect_one_model(dir, 8, "model_final_checkpoint_phase1.torch", 1e-5, 2e-5);
    test_rm_rf(dir);
    free(dir);
}

/* SwAV across trainers (distributed Sinkhorn, queue off): quickstart/swav with 2 trainers of 32
 * trains the model 1 trainer of 64 trains, on a LayerNorm trunk and a head without BatchNorm:
 * with SyncBN the 14-pixel crops' batch norms magnify rounding from the third step (see the
 * supervised test), and Sinkhorn's exp(s/ε) more. Measured on the small stem (28 + 14 px crops):
 * losses within 6.5e-8 relative (the logged mean is fp32), weights within 5.0e-7 of the largest. */
Test(ddp, selfsup_run_swav_with_two_trainers_trains_the_model_one_trainer_trains, .timeout = 600)
{
    char *dir = test_make_tmpdir();
    make_fashion_mnist(dir);
    run_one_and_two(
        dir, "swav",
        "config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN=false "
        "config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.NORM=LayerNorm "
        "'config.MODEL.HEAD.PARAMS=[[swav_head,{dims:[512,512,128],use_bn:false,num_clusters:[100]}]]'");
    expect_one_model(dir, 8, "model_final_checkpoint_phase1.torch", 1e-5, 2e-5);
    test_rm_rf(dir);
    free(dir);
}

/* quickstart/swav on 2 trainers of 16 images, 2 epochs of 8 steps, a queue of 32 rows per
 * rank from iteration 2, its checkpoints in dir/<name>. */
static char *swav_cmd(const char *dir, const char *name)
{
    char *bin = test_build_path("selfsup"), *configs = test_path("configs");
    char *cmd = xasprintf(
        "SELFSUP_CONFIGS='%s' exec '%s' run quickstart/swav "
        "config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy] "
        "config.DATA.TRAIN.DATA_LIMIT=256 config.DATA.NUM_DATALOADER_WORKERS=1 config.LOG_FREQUENCY=1 "
        "config.DISTRIBUTED.NUM_PROC_PER_NODE=2 config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=16 "
        "config.LOSS.swav_loss.queue.queue_length=64 config.LOSS.swav_loss.queue.start_iter=2 "
        "config.CHECKPOINT.DIR=%s/%s --run-dir %s/run_%s",
        configs, bin, dir, dir, name, dir, name);
    free(bin), free(configs);
    return cmd;
}

/* Exact resume with several trainers: SwAV on 2 trainers (each with its own queue, BatchNorm
 * buffers broadcast from rank 0), stopped by Ctrl-C after iteration k (k from 3 to 12, picked
 * per run), then run again (AUTO_RESUME): the final checkpoint is bitwise the uninterrupted
 * run's. The trainers stop at the same batch (trainer_agree) and rank 0's checkpoint holds
 * rank 1's queue (rank1.loss.swav_criterion.*): resumed with rank 0's queue, rank 1 would
 * assign other codes. */
Test(ddp, two_trainers_stopped_at_any_iteration_resume_bitwise_exactly, .timeout = 600)
{
    char *dir = test_make_tmpdir(), *out;
    make_fashion_mnist(dir);
    char *a = swav_cmd(dir, "a"), *b = swav_cmd(dir, "b");
    cr_assert_eq(test_run_within(a, 280, &out), 0, "the uninterrupted run: %s", out);
    free(out);
    int k = 3 + (int)(getpid() % 10);
    char *stop =
        xasprintf("(%s) > %s/b1.log 2>&1 & pid=$!; for i in $(seq 2400); do "
                  "grep -q 'iter: %d;' %s/run_b/logs/train.1.log 2>/dev/null && break; sleep 0.05; done; "
                  "kill -INT $pid; wait $pid; echo stopped $?",
                  b, dir, k, dir);
    cr_assert_eq(test_run_within(stop, 280, &out), 0, "%s", out);
    cr_expect(strstr(out, "stopped 130"), "Ctrl-C after iteration %d: %s", k, out);
    free(out);
    cr_assert_eq(test_run_within(b, 280, &out), 0, "the resumed run: %s", out);
    free(out);
    char *log = xasprintf("%s/run_b/logs/train.1.log", dir), *text;
    size_t n;
    text = read_whole_file(log, &n);
    cr_expect(text && strstr(text, "resumed from"), "rank 1 resumed (stopped after iteration %d)", k);
    free(text), free(log);
    char *fa = xasprintf("%s/a/model_final_checkpoint_phase1.torch", dir),
         *fb = xasprintf("%s/b/model_final_checkpoint_phase1.torch", dir);
    cr_expect(test_same_bytes(fa, fb), "stopped after iteration %d and resumed, the final checkpoint differs", k);
    st_file *f;
    char *err = NULL;
    cr_assert_eq(st_open(fa, &f, &err), 0, "%s", err);
    cr_expect(st_find(f, "rank1.loss.swav_criterion.local_emb_queue") &&
                  st_find(f, "loss.swav_criterion.local_emb_queue"),
              "every rank's queue in the checkpoint");
    st_close(f);
    free(fa), free(fb), free(a), free(b), free(stop);
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

/* ---- DeepClusterV2's k-means over the ranks --------------------------------------------------- */

#define DC_ROWS 6    /* memory rows per rank: 12 samples over 2 ranks, batches of 3 */
#define DC_ITERS 3
static const int64_t DC_K[2] = {3, 2}; /* two heads, both on the one bank */

typedef struct {
    rank_status st;
    float centroids[(3 + 2) * LD];
    float assign[2 * 2 * DC_ROWS]; /* heads × samples */
} dc_result;

static loss_options dc_test_options(void)
{
    loss_options o = {.name = LOSS_DEEPCLUSTER_V2, .temperature = 0.1, .embedding_dim = LD, .world_size = 1};
    o.dc = (dc_options){.num_clusters = {DC_K[0], DC_K[1]}, .nheads = 2, .kmeans_iters = DC_ITERS,
                        .crops_for_mb = {0}, .nbanks = 1, .num_crops = 2, .batch = 3, .drop_last = true,
                        .num_train_samples = 2 * DC_ROWS};
    return o;
}

/* Rank r's memory holds samples r, r + 2, …, each row embedding_value(sample, 0, ·). */
static int dc_rank(rank_ctx *c, char **err)
{
    dc_result *res = c->res;
    loss_options o = dc_test_options();
    loss_state *st = loss_state_new(c->be, &o, 1, &c->d);
    float *rows = xmalloc(DC_ROWS * LD * sizeof *rows);
    int64_t samples[DC_ROWS];
    for (int i = 0; i < DC_ROWS; i++) {
        samples[i] = c->rank + 2 * i;
        for (int k = 0; k < LD; k++)
            rows[i * LD + k] = embedding_value((int)samples[i], 0, k);
    }
    eng_tensor out = eng_tensor_new(c->be, eng_shape2(DC_ROWS, LD));
    eng_upload(c->be, &out, rows);
    int rc = loss_memory_fill(c->be, st, 0, &out, err);
    if (rc == 0) {
        loss_memory_advance(c->be, st, samples, DC_ROWS);
        rc = loss_on_phase_start(c->be, st, 0, err);
    }
    const eng_entry *e;
    int n = loss_state_entries(st, &e); /* banks, index, assignments, centroids0, centroids1 */
    if (rc == 0 && n == 5) {
        eng_download(c->be, &e[2].value, res->assign);
        eng_download(c->be, &e[3].value, res->centroids);
        eng_download(c->be, &e[4].value, res->centroids + DC_K[0] * LD);
    }
    eng_tensor_free(c->be, &out);
    loss_state_free(c->be, st);
    free(rows);
    return rc == 0 && n == 5 ? 0 : -1;
}

/* VISSL's cluster_memory over both ranks' rows, in double: rank 0's rows perm[:K] to start
 * (the stream selfsup keys by seed, epoch and head), then E- and M-steps over all 12 rows.
 * Writes the centroids and every sample's cluster; returns the smallest top-2 gap of any E-step. */
static double dc_reference(int h, double *cent, int64_t *assign)
{
    enum { N = 2 * DC_ROWS };
    double rows[N][LD], gap = INFINITY;
    int64_t k_count = DC_K[h], sample[N];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < DC_ROWS; i++) {
            int at = r * DC_ROWS + i;
            double norm = 0;
            sample[at] = r + 2 * i;
            for (int k = 0; k < LD; k++)
                norm += (double)embedding_value((int)sample[at], 0, k) * embedding_value((int)sample[at], 0, k);
            for (int k = 0; k < LD; k++)
                rows[at][k] = (float)(embedding_value((int)sample[at], 0, k) / sqrt(norm));
        }
    size_t perm[DC_ROWS];
    rng_stream s;
    rng_stream_init(&s, (rng_key){.seed = 1, .purpose = RNG_PURPOSE_CLUSTER, .epoch = 0, .sample_index = (uint64_t)h});
    rng_permutation(&s, DC_ROWS, perm);
    for (int q = 0; q < k_count; q++)
        for (int k = 0; k < LD; k++)
            cent[q * LD + k] = rows[perm[q]][k];
    for (int it = 0;; it++) {
        for (int i = 0; i < N; i++) { /* E-step */
            double best = -INFINITY, second = -INFINITY;
            for (int q = 0; q < k_count; q++) {
                double dot = 0;
                for (int k = 0; k < LD; k++)
                    dot += rows[i][k] * cent[q * LD + k];
                if (dot > best)
                    second = best, best = dot, assign[sample[i]] = q;
                else if (dot > second)
                    second = dot;
            }
            gap = fmin(gap, best - second);
        }
        if (it == DC_ITERS)
            return gap;
        for (int q = 0; q < k_count; q++) { /* M-step, then every centroid normalised */
            double sum[LD] = {0}, count = 0, norm = 0;
            for (int i = 0; i < N; i++)
                if (assign[sample[i]] == q) {
                    count++;
                    for (int k = 0; k < LD; k++)
                        sum[k] += rows[i][k];
                }
            for (int k = 0; k < LD; k++)
                norm += (count ? sum[k] / count : cent[q * LD + k]) * (count ? sum[k] / count : cent[q * LD + k]);
            for (int k = 0; k < LD; k++)
                cent[q * LD + k] = (count ? sum[k] / count : cent[q * LD + k]) / sqrt(norm);
        }
    }
}

/* ClusterMemoryHook on 2 trainers of 6 memory rows each: every rank ends with the same centroids
 * and the same assignments (bitwise), and they are k-means over both ranks' 12 rows as VISSL's
 * distributed k-means computes it (rank 0's rows to start, every rank's sums and counts
 * all-reduced, every rank's assignments gathered by sample index), against a double-precision
 * restatement. */
Test(ddp, deepclusterv2_kmeans_clusters_every_ranks_memory, .timeout = 60)
{
    dc_result *res = run_ranks(dc_rank, sizeof *res, 2, NULL);
    cr_expect(!memcmp(res[0].centroids, res[1].centroids, sizeof res[0].centroids), "the ranks' centroids differ");
    cr_expect(!memcmp(res[0].assign, res[1].assign, sizeof res[0].assign), "the ranks' assignments differ");
    const float *got = res[0].centroids;
    for (int h = 0; h < 2; h++) {
        double cent[3 * LD];
        int64_t assign[2 * DC_ROWS];
        double gap = dc_reference(h, cent, assign);
        cr_assert_gt(gap, 1e-4, "head %d: the reference's E-step nearly ties (%g)", h, gap);
        for (int q = 0; q < DC_K[h] * LD; q++)
            cr_expect_leq(fabs(got[q] - cent[q]), 1e-5, "head %d centroid value %d: %.9g, reference %.9g", h, q,
                          (double)got[q], cent[q]);
        for (int i = 0; i < 2 * DC_ROWS; i++)
            cr_expect_eq((int64_t)res[0].assign[h * 2 * DC_ROWS + i], assign[i], "head %d sample %d: cluster %g, "
                         "reference %lld", h, i, (double)res[0].assign[h * 2 * DC_ROWS + i], (long long)assign[i]);
        got += DC_K[h] * LD;
    }
    munmap(res, 2 * sizeof *res);
}
