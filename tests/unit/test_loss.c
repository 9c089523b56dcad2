/*
 * test_loss.c — the trainer's losses (stages/train/loss.c) against VISSL's, rebuilt in
 * PyTorch float64 by tests/golden/make_loss_fixtures.py: the value and d(loss)/d(output) of
 * simclr_info_nce_loss, multicrop_simclr_info_nce_loss (3 crops), cross_entropy_multiple_output_
 * single_target (two outputs, normalize_output, temperature, an ignored label; class weights),
 * CrossEntropyLoss, bce_logits_multiple_output_single_target (−1 targets) and swav_loss (two
 * prototype heads; with a queue; with hard assignments), within 1e-5 (relative, fp32 inputs),
 * and SwAV's embedding queue. Then the invariants: multi-crop SimCLR with 2 crops IS SimCLR, and
 * the refusals (widths, batch sizes, labels) and the config.
 */
#include "config.h"
#include "nn.h"
#include "npy.h"
#include "train/loss.h"
#include "util.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

static npy_array load(const char *kase, const char *what) { return test_fixture_npy("loss", kase, what); }

typedef struct {
    eng_backend *be;
    int n;
    eng_tensor out[4];
    const eng_tensor *outs[4];
    eng_shape shapes[4];
    npy_array label;
    loss_batch batch;
} fixture;

static void open_case(fixture *f, const char *kase, int n)
{
    f->be = nnt_open_cpu();
    f->n = n;
    for (int k = 0; k < n; k++) {
        char what[16];
        snprintf(what, sizeof what, "out%d", k);
        npy_array a = load(kase, what);
        f->shapes[k] = eng_shape2((int64_t)a.shape[0], (int64_t)a.shape[1]);
        f->out[k] = eng_tensor_new(f->be, f->shapes[k]);
        eng_upload(f->be, &f->out[k], a.data);
        f->outs[k] = &f->out[k];
        npy_close(&a);
    }
    f->label = load(kase, "label");
    f->batch = (loss_batch){.batch = (int64_t)f->label.shape[0], .label = f->label.data,
                            .label_cols = f->label.ndim == 2 ? (int)f->label.shape[1] : 1};
}

static void close_case(fixture *f)
{
    for (int k = 0; k < f->n; k++)
        eng_tensor_free(f->be, &f->out[k]);
    npy_close(&f->label);
    eng_backend_close(f->be);
}

/* SwAV's queue case: the fixture's queue scores into the state, as the forward hook leaves them. */
static void set_queue_scores(fixture *f, loss_state *st, const char *kase)
{
    const eng_entry *e;
    int n = loss_state_entries(st, &e);
    cr_assert_eq(n, 3, "two score queues and the embedding queue");
    for (int h = 0; h < 2; h++) {
        char what[16];
        snprintf(what, sizeof what, "queue%d", h);
        npy_array q = load(kase, what);
        cr_assert_eq(q.count, (size_t)eng_numel(&e[h].value.shape));
        eng_upload(f->be, &e[h].value, q.data);
        npy_close(&q);
    }
}

/* The loss's value and gradients against the fixture's. */
static void check_case(const char *kase, int n, const loss_options *o)
{
    fixture f;
    open_case(&f, kase, n);
    char *err = NULL;
    loss_state *st = loss_state_new(f.be, o, 1, NULL);
    if (o->name == LOSS_SWAV && o->swav.queue_length)
        set_queue_scores(&f, st, kase);
    loss *l = loss_new(f.be, o, st, f.shapes, n, &err);
    cr_assert(l, "%s: %s", kase, err);
    double v;
    cr_assert_eq(loss_compute(f.be, l, f.outs, &f.batch, &v, &err), 0, "%s: %s", kase, err);
    npy_array want = load(kase, "loss");
    double w = ((const double *)want.data)[0];
    cr_expect_leq(fabs(v - w), TOL * fabs(w), "%s: loss %.9g, VISSL's %.9g", kase, v, w);
    npy_close(&want);
    for (int k = 0; k < n; k++) {
        char what[16];
        snprintf(what, sizeof what, "dout%d", k);
        npy_array d = load(kase, what);
        float *got = nnt_download(f.be, loss_grad(l, k));
        double worst = 0.0, top = 0.0;
        for (size_t i = 0; i < d.count; i++) {
            worst = fmax(worst, fabs(got[i] - ((const double *)d.data)[i]));
            top = fmax(top, fabs(((const double *)d.data)[i]));
        }
        cr_expect_leq(worst, TOL * top, "%s: d(output %d) error %g of %g", kase, k, worst, top);
        free(got);
        npy_close(&d);
    }
    loss_free(f.be, l);
    loss_state_free(f.be, st);
    close_case(&f);
}

static loss_options simclr_options(loss_name name, int64_t effective, int crops)
{
    return (loss_options){.name = name, .temperature = 0.1, .embedding_dim = 8, .effective_batch_size = effective,
                          .world_size = 1, .num_crops = crops, .ignore_index = -1};
}

Test(loss, simclr_info_nce_matches_vissl) { loss_options o = simclr_options(LOSS_SIMCLR, 8, 2); check_case("simclr", 1, &o); }

Test(loss, multicrop_simclr_three_crops_matches_vissl)
{
    loss_options o = simclr_options(LOSS_MULTICROP_SIMCLR, 4, 3);
    check_case("multicrop3", 1, &o);
}

Test(loss, cross_entropy_multiple_outputs_normalised_with_temperature)
{
    loss_options o = {.name = LOSS_CE_MULTI_OUTPUT, .temperature = 0.5, .ignore_index = -1, .normalize_output = true};
    check_case("ce_multi", 2, &o);
}

Test(loss, cross_entropy_with_class_weights)
{
    loss_options o = {.name = LOSS_CE_MULTI_OUTPUT, .temperature = 1.0, .ignore_index = -1,
                      .weight = {0.5f, 1.0f, 2.0f, 1.5f, 0.25f}, .nweight = 5};
    check_case("ce_weighted", 1, &o);
}

Test(loss, classy_cross_entropy_ignores_minus_one)
{
    loss_options o = {.name = LOSS_CROSS_ENTROPY, .temperature = 1.0, .ignore_index = -1};
    check_case("cross_entropy", 1, &o);
}

Test(loss, bce_logits_per_class_normalised)
{
    loss_options o = {.name = LOSS_BCE_MULTI_OUTPUT, .temperature = 1.0};
    check_case("bce", 2, &o);
}

/* swav_loss on 3 crops of 4 images, prototype heads of 6 and 5 (make_loss_fixtures.py). */
static loss_options swav_case(int a0, int a1, int64_t queue, int64_t hard_iters)
{
    loss_options o = {.name = LOSS_SWAV, .temperature = 0.1, .embedding_dim = 8, .num_crops = 3};
    o.swav = (swav_options){.epsilon = 0.05, .num_iters = 3, .crops_for_assign = {a0, a1}, .ncrops_for_assign = 2,
                            .num_prototypes = {6, 5}, .nheads = 2, .queue_length = queue,
                            .temp_hard_assignment_iters = hard_iters};
    return o;
}

Test(loss, swav_two_prototype_heads_match_vissl) { loss_options o = swav_case(0, 1, 0, 0); check_case("swav", 3, &o); }

Test(loss, swav_with_the_queue_below_the_batch_matches_vissl)
{
    loss_options o = swav_case(0, 1, 8, 0);
    check_case("swav_queue", 3, &o);
}

Test(loss, swav_hard_assignments_in_the_first_iterations_match_vissl)
{
    loss_options o = swav_case(1, 2, 0, 1);
    check_case("swav_hard", 3, &o);
}

/* update_emb_queue: after a forward with the queue on, each assignment crop's queue holds that
 * crop's embeddings on top and its old first rows below; the forward count moved on. Before
 * start_iter the queue is left alone. */
Test(loss, swav_queue_takes_the_batch_on_top_once_it_is_on)
{
    fixture f;
    open_case(&f, "swav_queue", 3);
    loss_options o = swav_case(0, 1, 8, 0);
    o.swav.queue_start_iter = 1;
    loss_state *st = loss_state_new(f.be, &o, 7, NULL);
    set_queue_scores(&f, st, "swav_queue");
    const eng_entry *e;
    loss_state_entries(st, &e);
    cr_assert_str_eq(e[2].name, "loss.swav_criterion.local_emb_queue");
    cr_assert_eq(e[2].value.shape.ndim, 3);
    cr_assert(e[2].value.shape.dim[0] == 2 && e[2].value.shape.dim[1] == 8 && e[2].value.shape.dim[2] == 8);
    float *before = nnt_download(f.be, &e[2].value), *emb = nnt_download(f.be, f.outs[0]);
    double bound = 1.0 / sqrt(8.0 / 3.0), top = 0.0;
    for (int i = 0; i < 128; i++)
        top = fmax(top, fabs(before[i]));
    cr_expect(top > 0.5 * bound && top <= bound, "VISSL's U(-s, s) start, s = %g: largest %g", bound, top);
    char *err = NULL;
    loss *l = loss_new(f.be, &o, st, f.shapes, 3, &err);
    cr_assert(l, "%s", err);
    double v;
    cr_assert_eq(loss_compute(f.be, l, f.outs, &f.batch, &v, &err), 0, "%s", err);
    float *after = nnt_download(f.be, &e[2].value);
    cr_expect(memcmp(before, after, 128 * sizeof(float)) == 0, "iteration 0 < start_iter 1: the queue waits");
    cr_expect_eq(loss_state_iterations(st), 1);
    free(after);
    cr_assert_eq(loss_compute(f.be, l, f.outs, &f.batch, &v, &err), 0, "%s", err);
    after = nnt_download(f.be, &e[2].value);
    for (int i = 0; i < 2; i++) /* crops_for_assign [0, 1]: crop i is rows 4i … 4i + 3 */
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < 8; c++) {
                float want = r < 4 ? emb[(4 * i + r) * 8 + c] : before[(i * 8 + r - 4) * 8 + c];
                cr_expect_eq(after[(i * 8 + r) * 8 + c], want, "queue %d row %d column %d", i, r, c);
            }
    cr_expect_eq(loss_state_iterations(st), 2);
    free(before), free(after), free(emb);
    loss_free(f.be, l);
    loss_state_free(f.be, st);
    close_case(&f);
}

/* Spec part 2 §1.2: with 2 crops and one process the multi-crop loss is SimCLR's. */
Test(loss, multicrop_with_two_crops_is_simclr)
{
    fixture f;
    open_case(&f, "simclr", 1);
    loss_options a = simclr_options(LOSS_SIMCLR, 8, 2), b = simclr_options(LOSS_MULTICROP_SIMCLR, 4, 2);
    char *err = NULL;
    loss *la = loss_new(f.be, &a, NULL, f.shapes, 1, &err), *lb = loss_new(f.be, &b, NULL, f.shapes, 1, &err);
    cr_assert(la && lb, "%s", err);
    double va, vb;
    cr_assert_eq(loss_compute(f.be, la, f.outs, &f.batch, &va, &err), 0);
    cr_assert_eq(loss_compute(f.be, lb, f.outs, &f.batch, &vb, &err), 0);
    cr_expect_eq(va, vb);
    float *ga = nnt_download(f.be, loss_grad(la, 0)), *gb = nnt_download(f.be, loss_grad(lb, 0));
    cr_expect(memcmp(ga, gb, 64 * sizeof(float)) == 0);
    free(ga), free(gb);
    loss_free(f.be, la);
    loss_free(f.be, lb);
    close_case(&f);
}

Test(loss, shapes_and_labels_that_do_not_fit_are_refused)
{
    fixture f;
    open_case(&f, "simclr", 1);
    char *err = NULL;
    loss_options o = simclr_options(LOSS_SIMCLR, 8, 2);
    o.embedding_dim = 128;
    cr_expect_null(loss_new(f.be, &o, NULL, f.shapes, 1, &err));
    cr_expect(err && strstr(err, "8-wide embeddings") && strstr(err, "128"), "%s", err);
    free(err), err = NULL;
    o = simclr_options(LOSS_SIMCLR, 16, 2); /* a batch of 8 images configured, 4 given */
    cr_expect_null(loss_new(f.be, &o, NULL, f.shapes, 1, &err));
    cr_expect(err && strstr(err, "effective_batch_size 16"), "%s", err);
    free(err), err = NULL;
    o = simclr_options(LOSS_SIMCLR, 8, 2);
    o.world_size = 2; /* the config's world, against a run of one trainer */
    cr_expect_null(loss_new(f.be, &o, NULL, f.shapes, 1, &err));
    cr_expect(err && strstr(err, "buffer_params.world_size is 2, but the run has 1 trainer"), "%s", err);
    free(err), err = NULL;
    close_case(&f);

    open_case(&f, "cross_entropy", 1);
    o = (loss_options){.name = LOSS_CROSS_ENTROPY, .temperature = 1.0, .ignore_index = -1};
    loss *l = loss_new(f.be, &o, NULL, f.shapes, 1, &err);
    cr_assert(l, "%s", err);
    int64_t bad[6] = {0, 1, 5, 2, 3, 4}; /* 5 classes: label 5 is out of range */
    loss_batch b = {.batch = 6, .label = bad, .label_cols = 1};
    double v;
    cr_expect_eq(loss_compute(f.be, l, f.outs, &b, &v, &err), -1);
    cr_expect(err && strstr(err, "label 5 of sample 2"), "%s", err);
    free(err), err = NULL;
    int64_t none[6] = {-1, -1, -1, -1, -1, -1}; /* every row ignored: NaN, as torch */
    b.label = none;
    cr_expect_eq(loss_compute(f.be, l, f.outs, &b, &v, &err), 0);
    cr_expect(isnan(v));
    loss_free(f.be, l);
    close_case(&f);
}

/* ---- from the config ---------------------------------------------------------------------- */

Test(loss, options_from_the_config)
{
    cfg_t cfg = {0};
    cfg_err err;
    cr_assert(test_compose(&cfg, &err,
                           "config:\n  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}\n  DATA: {TRAIN: {BATCHSIZE_PER_REPLICA: 32}}\n"
                           "  LOSS:\n    name: simclr_info_nce_loss\n"
                           "    simclr_info_nce_loss: {temperature: 0.2, buffer_params: {embedding_dim: 64}}\n",
                           NULL),
              "%s", err.msg);
    loss_options o;
    cr_assert(loss_options_from_config(cfg_map_get(cfg.root, "config"), &o, &err), "%s", err.msg);
    cr_expect(o.name == LOSS_SIMCLR);
    cr_expect_float_eq(o.temperature, 0.2, 1e-15);
    cr_expect_eq(o.embedding_dim, 64);
    cr_expect_eq(o.world_size, 1, "inferred from one process");
    cr_expect_eq(o.effective_batch_size, 64, "inferred 2 x 32 x 1");
    cfg_destroy(&cfg);
    /* eight processes (VISSL's default): inferred; a run of one trainer refuses it when the
     * loss is planned (and the trainer before anything runs: test_validate.c) */
    cfg = (cfg_t){0};
    cr_assert(test_compose(&cfg, &err, "config:\n  LOSS:\n    name: simclr_info_nce_loss\n", NULL), "%s", err.msg);
    cr_expect(loss_options_from_config(cfg_map_get(cfg.root, "config"), &o, &err), "%s", err.msg);
    cr_expect_eq(o.world_size, 8);
    cr_expect_eq(o.effective_batch_size, 2 * 256 * 8, "VISSL's default batch of 256 on each of 8 trainers");
    cfg_destroy(&cfg);

    cfg = (cfg_t){0};
    cr_assert(test_compose(&cfg, &err,
                           "config:\n  LOSS:\n    name: cross_entropy_multiple_output_single_target\n"
                           "    cross_entropy_multiple_output_single_target: {weight: [1, 2.5], temperature: 0.1,\n"
                           "      normalize_output: true}\n",
                           NULL),
              "%s", err.msg);
    cr_assert(loss_options_from_config(cfg_map_get(cfg.root, "config"), &o, &err), "%s", err.msg);
    cr_expect(o.name == LOSS_CE_MULTI_OUTPUT && o.normalize_output && o.nweight == 2);
    cr_expect_float_eq(o.weight[1], 2.5f, 1e-7);
    cfg_destroy(&cfg);

    cfg = (cfg_t){0};
    cr_assert(test_compose(&cfg, &err, "config:\n  LOSS:\n    name: MSELoss\n", NULL), "%s", err.msg);
    cr_expect(!loss_options_from_config(cfg_map_get(cfg.root, "config"), &o, &err));
    cr_expect(strstr(err.msg, ":3:") && strstr(err.msg, "'MSELoss' is not run by this trainer yet"), "%s",
              err.msg);
    cfg_destroy(&cfg);
}

/* ---- DeepClusterV2's k-means, one trainer --------------------------------------------------- */

/* Six memory rows in two tight groups (samples 0, 2, 4 near e0; 1, 3, 5 near e1), one trainer
 * (no world: loss.h's NULL), two clusters: k-means finds the two groups whichever rows it
 * starts from, and each centroid is its group's normalised mean. */
Test(loss, deepclusterv2_kmeans_finds_two_groups_on_one_trainer)
{
    eng_backend *be = nnt_open_cpu();
    loss_options o = {.name = LOSS_DEEPCLUSTER_V2, .temperature = 0.1, .embedding_dim = 4, .world_size = 1};
    o.dc = (dc_options){.num_clusters = {2}, .nheads = 1, .kmeans_iters = 3, .crops_for_mb = {0}, .nbanks = 1,
                        .num_crops = 2, .batch = 6, .num_train_samples = 6};
    const float rows[6][4] = {{1, 0.1f, 0, 0}, {0, 1, 0.2f, 0}, {1, 0, 0.1f, 0},
                              {0.1f, 1, 0, 0}, {1, 0, 0, 0.1f}, {0, 1, 0, 0.1f}};
    const int64_t samples[6] = {0, 1, 2, 3, 4, 5};
    loss_state *st = loss_state_new(be, &o, 7, NULL);
    eng_tensor out = eng_tensor_new(be, eng_shape2(6, 4));
    eng_upload(be, &out, &rows[0][0]);
    char *err = NULL;
    cr_assert_eq(loss_memory_fill(be, st, 0, &out, &err), 0, "%s", err);
    loss_memory_advance(be, st, samples, 6);
    cr_assert_eq(loss_on_phase_start(be, st, 0, &err), 0, "%s", err);
    const eng_entry *e;
    cr_assert_eq(loss_state_entries(st, &e), 4); /* banks, index, assignments, centroids0 */
    float assign[6], cent[2][4];
    eng_download(be, &e[2].value, assign);
    eng_download(be, &e[3].value, &cent[0][0]);
    for (int i = 0; i < 6; i++)
        cr_expect_eq(assign[i], assign[i % 2], "sample %d: cluster %g, its group's %g", i, (double)assign[i],
                     (double)assign[i % 2]);
    cr_expect_neq(assign[0], assign[1], "the two groups share a cluster");
    for (int g = 0; g < 2; g++) { /* the group's rows, each normalised, averaged, normalised */
        double mean[4] = {0}, norm = 0;
        for (int i = g; i < 6; i += 2) {
            double n2 = 0;
            for (int k = 0; k < 4; k++)
                n2 += (double)rows[i][k] * rows[i][k];
            for (int k = 0; k < 4; k++)
                mean[k] += rows[i][k] / sqrt(n2) / 3.0;
        }
        for (int k = 0; k < 4; k++)
            norm += mean[k] * mean[k];
        const float *c = cent[(int)assign[g]];
        for (int k = 0; k < 4; k++)
            cr_expect_float_eq(c[k], mean[k] / sqrt(norm), 1e-6, "group %d centroid %d: %.9g", g, k, (double)c[k]);
    }
    eng_tensor_free(be, &out);
    loss_state_free(be, st);
    eng_backend_close(be);
}
