/*
 * test_sched.c — lib/sched against values derived by hand from VISSL's schedulers and an
 * independent reference.
 *
 * Three layers: exact values worked out by hand from VISSL 0.1.5's schedulers (ClassyVision's
 * param schedulers and VISSL's own; tolerance 1e-9 relative where they were worked to 9-10
 * significant digits, 1e-6 where fewer);
 * the constructor assertions as error returns; and every scheduler kind on a grid of
 * `where` values against tests/golden/fixtures/sched/values.txt, made by the pure-Python
 * transcription tests/golden/make_sched_fixture.py (1e-12 relative). The scheduler ids and
 * parameters below must match that script's SCHEDULERS table.
 */
#include "test_util.h"

#include <criterion/criterion.h>

#include "log.h"
#include "sched.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPEC_TIGHT 1e-9 /* values worked to 9-10 significant digits */
#define SPEC_LOOSE 1e-6 /* values worked to fewer */
#define FIXTURE_REL 1e-12

/* |got - want| <= rel*|want| + abs_tol; `what` says which value failed. */
static void assert_close(double got, double want, double rel, double abs_tol, const char *what)
{
    cr_assert(fabs(got - want) <= rel * fabs(want) + abs_tol, "%s: got %.17g, want %.17g", what,
              got, want);
}

static void assert_value(const sched *s, double where, double want, double rel)
{
    char what[96];
    snprintf(what, sizeof what, "%s at where %.17g", sched_kind_name(s->kind), where);
    assert_close(sched_value(s, where), want, rel, 0.0, what);
}

/* ---- builders ----------------------------------------------------------------------------- */

static void build_constant(sched *s, double value)
{
    sched_init(s, SCHED_CONSTANT);
    s->value = value;
}

static void build_linear(sched *s, double start, double end)
{
    sched_init(s, SCHED_LINEAR);
    s->start_value = start;
    s->end_value = end;
}

static void build_cosine(sched *s, double start, double end)
{
    sched_init(s, SCHED_COSINE);
    s->start_value = start;
    s->end_value = end;
}

/* milestones NULL: the key is absent (equal spacing). */
static void build_multistep(sched *s, const double *values, size_t n_values, const int *milestones,
                            size_t n_milestones, int num_epochs)
{
    sched_init(s, SCHED_MULTISTEP);
    sched_set_values(s, values, n_values);
    if (milestones)
        sched_set_milestones(s, milestones, n_milestones);
    s->num_epochs = num_epochs;
}

static void build_step(sched *s, const double *values, size_t n_values, int num_epochs)
{
    sched_init(s, SCHED_STEP);
    sched_set_values(s, values, n_values);
    s->num_epochs = num_epochs;
}

static void build_step_with_fixed_gamma(sched *s, double base, double gamma, int num_decays,
                                        int num_epochs)
{
    sched_init(s, SCHED_STEP_WITH_FIXED_GAMMA);
    s->base_value = base;
    s->gamma = gamma;
    s->num_decays = num_decays;
    s->num_epochs = num_epochs;
}

static void build_cwr(sched *s, double start, double end, double interval, sched_wave_type wave,
                      double lr_multiplier, bool adaptive)
{
    sched_init(s, SCHED_COSINE_WARM_RESTART);
    s->start_value = start;
    s->end_value = end;
    s->restart_interval_length = interval;
    s->wave_type = wave;
    s->lr_multiplier = lr_multiplier;
    s->is_adaptive = adaptive;
}

static void build_inverse_sqrt(sched *s, double start, double warmup)
{
    sched_init(s, SCHED_INVERSE_SQRT);
    s->start_value = start;
    s->warmup_interval_length = warmup;
}

/* scaling NULL: the key is absent (all rescaled). Returns the children to fill in. */
static sched *build_composite(sched *s, size_t n, const double *lengths,
                              const sched_interval_scaling *scaling)
{
    sched_init(s, SCHED_COMPOSITE);
    sched_set_lengths(s, lengths, n);
    if (scaling)
        sched_set_interval_scaling(s, scaling, n);
    return sched_alloc_children(s, n);
}

static void prepare_ok(sched *s)
{
    char err[512];
    int rc = sched_prepare(s, err, sizeof err);
    cr_assert_eq(rc, 0, "sched_prepare failed: %s", err);
}

/* Expect sched_prepare to fail with a message containing `needle`. */
static void expect_invalid(sched *s, const char *needle)
{
    char err[512];
    int rc = sched_prepare(s, err, sizeof err);
    cr_assert_eq(rc, -1, "accepted, expected an error about \"%s\"", needle);
    cr_assert(strstr(err, needle) != NULL, "error \"%s\" does not mention \"%s\"", err, needle);
}

/* ---- the schedulers of the worked examples (shared with the fixture) ---------------------------- */

static const sched_interval_scaling RESCALED_FIXED[] = {SCHED_RESCALED, SCHED_FIXED};
static const sched_interval_scaling ALL_RESCALED[] = {SCHED_RESCALED, SCHED_RESCALED,
                                                      SCHED_RESCALED, SCHED_RESCALED};

static void build_multistep_t2(sched *s)
{
    build_multistep(s, (const double[]){0.1, 0.01, 0.001}, 3, (const int[]){30, 60}, 2, 90);
}

/* Example 3: linear warm-up (rescaled) then a cosine over the global where (fixed). */
static void build_composite_ex3(sched *s)
{
    sched *c = build_composite(s, 2, (const double[]){0.1, 0.9}, RESCALED_FIXED);
    build_linear(&c[0], 0.6, 4.8);
    build_cosine(&c[1], 4.8, 0.0048);
}

static void build_composite_ex5(sched *s)
{
    sched *c = build_composite(s, 2, (const double[]){0.1, 0.9}, ALL_RESCALED);
    build_linear(&c[0], 0.6, 4.8);
    build_cwr(&c[1], 4.8, 0.0048, 0.334, SCHED_WAVE_FULL, 1.0, false);
}

static void build_composite_ex6(sched *s)
{
    sched *c = build_composite(s, 4, (const double[]){0.0256, 0.48722, 0.0256, 0.46166},
                               ALL_RESCALED);
    build_linear(&c[0], 0.6, 4.8);
    build_cosine(&c[1], 4.8, 0.0048);
    build_linear(&c[2], 0.0048, 2.114);
    build_cosine(&c[3], 2.114, 0.0048);
}

/* The outer num_epochs (50) reaches the multistep (milestone 25) and the nested step. */
static void build_composite_nested(sched *s)
{
    sched *outer = build_composite(s, 2, (const double[]){0.5, 0.5}, ALL_RESCALED);
    s->num_epochs = 50;
    build_multistep(&outer[0], (const double[]){1.0, 0.1}, 2, NULL, 0, 0);
    static const sched_interval_scaling fixed_rescaled[] = {SCHED_FIXED, SCHED_RESCALED};
    sched *inner = build_composite(&outer[1], 2, (const double[]){0.3, 0.7}, fixed_rescaled);
    build_constant(&inner[0], 0.5);
    build_step(&inner[1], (const double[]){0.3, 0.2, 0.1}, 3, 0);
}

static void build_cwr_half_t4(sched *s)
{
    build_cwr(s, 0.15, 0.00015, 0.5, SCHED_WAVE_HALF, 1.0, false);
}

static void build_cwr_full_t5(sched *s)
{
    build_cwr(s, 4.8, 0.0048, 0.334, SCHED_WAVE_FULL, 1.0, false);
}

static void build_swfg_t8(sched *s)
{
    build_step_with_fixed_gamma(s, 0.1, 0.1, 3, 120);
}

/* ---- worked examples: the scheduler kinds ---------------------------------------------------- */

Test(sched, t1_cosine)
{
    sched s;
    build_cosine(&s, 0.15, 0.0);
    prepare_ok(&s);
    assert_value(&s, 0.0, 0.15, SPEC_TIGHT);
    assert_value(&s, 0.5, 0.075, SPEC_TIGHT);
    assert_close(sched_value(&s, 1.0 - 1e-9), 0.0, 0.0, 1e-12, "f -> 1");
    sched_free(&s);
}

Test(sched, t2_multistep_epsilon)
{
    sched s;
    build_multistep_t2(&s);
    prepare_ok(&s);
    cr_assert_eq(s.update_interval, SCHED_UPDATE_EPOCH, "multistep defaults to epoch");
    assert_value(&s, 0.0, 0.1, SPEC_TIGHT);
    assert_value(&s, 0.333, 0.1, SPEC_TIGHT);
    assert_value(&s, 1.0 / 3, 0.01, SPEC_TIGHT);
    assert_value(&s, 0.333333, 0.01, SPEC_TIGHT); /* 29.99997 + 90e-6 -> epoch 30 */
    assert_value(&s, 0.33333, 0.1, SPEC_TIGHT);
    assert_value(&s, 2.0 / 3, 0.001, SPEC_TIGHT);
    assert_value(&s, 0.6666, 0.01, SPEC_TIGHT);
    sched_free(&s);
}

Test(sched, t3_composite_linear_then_fixed_cosine)
{
    sched s;
    build_composite_ex3(&s);
    prepare_ok(&s);
    assert_value(&s, 0.0, 0.6, SPEC_TIGHT);
    assert_value(&s, 0.05, 2.7, SPEC_TIGHT);
    assert_value(&s, 0.1, 4.682653103, SPEC_TIGHT); /* the cosine sees where = 0.1, not 0 */
    assert_value(&s, 0.55, 2.027332727, SPEC_TIGHT);
    sched_free(&s);
}

Test(sched, t4_cosine_warm_restart_half)
{
    sched s;
    build_cwr_half_t4(&s);
    prepare_ok(&s);
    cr_assert_eq(s.n_restarts, 2u);
    cr_assert_eq(s.restart_steps[0], 0.0);
    cr_assert_eq(s.restart_steps[1], 0.5);
    assert_value(&s, 0.0, 0.15, SPEC_TIGHT);
    assert_value(&s, 0.25, 0.075075, SPEC_TIGHT);
    assert_value(&s, 0.5, 0.15, SPEC_TIGHT);
    assert_value(&s, 0.75, 0.075075, SPEC_TIGHT);
    assert_value(&s, 0.999, 0.000151479, SPEC_LOOSE);
    sched_free(&s);
}

Test(sched, t5_cosine_warm_restart_full)
{
    sched s;
    build_cwr_full_t5(&s);
    prepare_ok(&s);
    cr_assert_eq(s.n_restarts, 2u);
    cr_assert_eq(s.restart_steps[0], 0.0);
    cr_assert_eq(s.restart_steps[1], 0.334);
    assert_value(&s, 0.0, 4.8, SPEC_TIGHT);
    assert_value(&s, 0.167, 2.4024, SPEC_TIGHT);
    assert_value(&s, 0.334, 0.0048, SPEC_TIGHT);
    assert_value(&s, 0.5, 2.379848588, SPEC_TIGHT);
    assert_value(&s, 0.668, 4.8, SPEC_TIGHT);
    assert_value(&s, 0.9, 1.026167029, SPEC_TIGHT);
    sched_free(&s);
}

Test(sched, t6_inverse_sqrt)
{
    sched s;
    build_inverse_sqrt(&s, 4.8, 0.1);
    prepare_ok(&s);
    assert_close(s.decay_factor, 1.517893277, SPEC_TIGHT, 0.0, "decay = 4.8 sqrt(0.1)");
    assert_value(&s, 0.0, 1.517893277, SPEC_TIGHT);
    assert_value(&s, 0.1, 4.8, SPEC_TIGHT);
    assert_value(&s, 0.4, 2.4, SPEC_TIGHT);
    assert_value(&s, 1.0 - 1e-9, 1.517893, SPEC_LOOSE);
    sched_free(&s);
}

Test(sched, t7_composite_length_fixup)
{
    sched s;
    build_composite_ex6(&s);
    prepare_ok(&s); /* |sum - 1| = 8e-5 < 1e-3 */
    cr_assert_eq(s.lengths[0], 0.0256);
    cr_assert_eq(s.lengths[1], 0.48722);
    cr_assert_eq(s.lengths[2], 0.0256);
    assert_close(s.lengths[3], 0.46158, SPEC_TIGHT, 0.0, "last length");
    assert_value(&s, 0.0, 0.6, SPEC_TIGHT);
    sched_free(&s);
}

Test(sched, t8_step_with_fixed_gamma)
{
    sched s;
    build_swfg_t8(&s);
    prepare_ok(&s);
    cr_assert_eq(s.n_values, 4u);
    const double want[] = {0.1, 0.01, 0.001, 0.0001};
    for (size_t i = 0; i < 4; i++) {
        char what[32];
        snprintf(what, sizeof what, "values[%zu]", i);
        assert_close(s.values[i], want[i], SPEC_TIGHT, 0.0, what);
    }
    assert_value(&s, 0.2499, 0.1, SPEC_TIGHT);
    assert_value(&s, 0.25, 0.01, SPEC_TIGHT);
    assert_value(&s, 0.75, 0.0001, SPEC_TIGHT);
    assert_value(&s, 0.25 - 1e-7, 0.01, SPEC_TIGHT); /* the 1e-6 epsilon */
    assert_value(&s, 0.25 - 2e-6, 0.1, SPEC_TIGHT);
    sched_free(&s);
}

/* ---- worked examples: composite and cosine-restart schedules --------------------------------- */

Test(sched, part2_item11_cosine_warm_restart_adaptive)
{
    sched plain, adaptive;
    build_cwr(&plain, 0.1, 0.0001, 0.5, SCHED_WAVE_HALF, 1.0, false);
    build_cwr(&adaptive, 0.1, 0.0001, 0.5, SCHED_WAVE_HALF, 1.0, true);
    prepare_ok(&plain);
    prepare_ok(&adaptive);
    assert_value(&plain, 0.25, 0.05005, SPEC_TIGHT);
    assert_value(&plain, 0.5, 0.1, SPEC_TIGHT);
    assert_value(&adaptive, 0.5, 0.05005, SPEC_TIGHT);
    assert_value(&adaptive, 0.75, 0.025075, SPEC_TIGHT);
    sched_free(&plain);
    sched_free(&adaptive);
}

Test(sched, part2_item12_inverse_sqrt)
{
    sched s;
    build_inverse_sqrt(&s, 4.8, 0.1);
    prepare_ok(&s);
    assert_value(&s, 0.0, 1.5178933, SPEC_LOOSE);
    assert_value(&s, 0.4, 2.4, SPEC_TIGHT);
    sched_free(&s);
}

/* ---- other behaviour ---------------------------------------------------------------------- */

Test(sched, multistep_default_milestones_are_equally_spaced)
{
    sched s;
    build_multistep(&s, (const double[]){0.1, 0.01, 0.001}, 3, NULL, 0, 90);
    prepare_ok(&s);
    cr_assert(s.has_milestones);
    cr_assert_eq(s.n_milestones, 2u);
    cr_assert_eq(s.milestones[0], 30); /* ceil(90/3) * (i+1) */
    cr_assert_eq(s.milestones[1], 60);
    sched_free(&s);

    build_multistep(&s, (const double[]){1, 2, 3, 4}, 4, NULL, 0, 10);
    prepare_ok(&s);
    cr_assert_eq(s.milestones[0], 3); /* ceil(2.5) = 3 */
    cr_assert_eq(s.milestones[2], 9);
    sched_free(&s);
}

Test(sched, composite_passes_num_epochs_to_children)
{
    sched s;
    build_composite_nested(&s);
    prepare_ok(&s);
    cr_assert_eq(s.children[0].num_epochs, 50);
    cr_assert_eq(s.children[0].milestones[0], 25);
    cr_assert_eq(s.children[1].children[1].num_epochs, 50);
    cr_assert_eq(s.children[1].interval_scaling[0], SCHED_FIXED);
    sched_free(&s);
}

Test(sched, composite_without_interval_scaling_rescales)
{
    sched s;
    sched *c = build_composite(&s, 2, (const double[]){0.5, 0.5}, NULL);
    build_linear(&c[0], 0.0, 1.0);
    build_linear(&c[1], 1.0, 3.0);
    prepare_ok(&s);
    assert_value(&s, 0.25, 0.5, 1e-15);
    assert_value(&s, 0.75, 2.0, 1e-15);
    cr_assert_eq(s.update_interval, SCHED_UPDATE_STEP);
    sched_free(&s);
}

Test(sched, prepare_is_idempotent)
{
    sched s;
    build_composite_ex6(&s);
    prepare_ok(&s);
    double first[20];
    for (int i = 0; i < 20; i++)
        first[i] = sched_value(&s, i / 20.0);
    prepare_ok(&s);
    for (int i = 0; i < 20; i++) {
        double again = sched_value(&s, i / 20.0);
        cr_assert_eq(again, first[i]);
    }
    sched_free(&s);
}

Test(sched, step_index_is_clamped_past_the_end)
{
    /* Python raises IndexError here (where + 1e-6 >= 1); see sched.h. */
    sched s;
    build_step(&s, (const double[]){3.0, 2.0, 1.0}, 3, 10);
    prepare_ok(&s);
    assert_value(&s, 1.0 - 1e-7, 1.0, 0.0);
    assert_value(&s, -0.5, 3.0, 0.0);
    sched_free(&s);
}

Test(sched, value_before_prepare_dies, .exit_code = EXIT_RUNTIME)
{
    sched s;
    build_linear(&s, 0.0, 1.0);
    (void)sched_value(&s, 0.5);
}

Test(sched, names_round_trip)
{
    for (int k = 0; k < SCHED_KIND_COUNT; k++) {
        sched_kind back;
        cr_assert_eq(sched_kind_from_name(sched_kind_name((sched_kind)k), &back), 0);
        cr_assert_eq(back, (sched_kind)k);
    }
    sched_kind kind;
    cr_assert_eq(sched_kind_from_name("cosine_warm_restart", &kind), 0);
    cr_assert_eq(kind, SCHED_COSINE_WARM_RESTART);
    cr_assert_eq(sched_kind_from_name("cosine_annealing", &kind), -1);
    sched_update_interval u;
    cr_assert_eq(sched_update_interval_from_name("epoch", &u), 0);
    cr_assert_eq(u, SCHED_UPDATE_EPOCH);
    sched_interval_scaling v;
    cr_assert_eq(sched_interval_scaling_from_name("fixed", &v), 0);
    cr_assert_eq(v, SCHED_FIXED);
    cr_assert_eq(sched_interval_scaling_from_name("FIXED", &v), -1);
    sched_wave_type w;
    cr_assert_eq(sched_wave_type_from_name("full", &w), 0);
    cr_assert_eq(w, SCHED_WAVE_FULL);
    cr_assert_str_eq(sched_wave_type_name(SCHED_WAVE_HALF), "half");
    cr_assert_str_eq(sched_kind_name((sched_kind)99), "?");
}

/* ---- constructor assertions ---------------------------------------------------------------- */

Test(sched, multistep_rejections)
{
    sched s;
    build_multistep(&s, (const double[]){0.1, 0.01, 0.001}, 3, (const int[]){30}, 1, 90);
    expect_invalid(&s, "needs 2 milestones");
    sched_free(&s);
    build_multistep(&s, (const double[]){0.1, 0.01, 0.001}, 3, (const int[]){60, 30}, 2, 90);
    expect_invalid(&s, "strictly increasing");
    sched_free(&s);
    build_multistep(&s, (const double[]){0.1, 0.01, 0.001}, 3, (const int[]){30, 30}, 2, 90);
    expect_invalid(&s, "strictly increasing");
    sched_free(&s);
    build_multistep(&s, (const double[]){0.1, 0.01}, 2, (const int[]){0}, 1, 90);
    expect_invalid(&s, "positive");
    sched_free(&s);
    build_multistep(&s, (const double[]){0.1, 0.01, 0.001}, 3, (const int[]){30, 90}, 2, 90);
    expect_invalid(&s, "smaller than num_epochs 90");
    sched_free(&s);
    build_multistep(&s, (const double[]){0.1, 0.01, 0.001}, 3, (const int[]){1, 2}, 2, 2);
    expect_invalid(&s, "at least the number of values");
    sched_free(&s);
    build_multistep(&s, (const double[]){0.1}, 1, NULL, 0, 0);
    expect_invalid(&s, "num_epochs must be greater than 0");
    sched_free(&s);
    build_multistep(&s, NULL, 0, NULL, 0, 10);
    expect_invalid(&s, "non-empty list of values");
    sched_free(&s);
    /* equal spacing can overshoot: ceil(5/4) = 2 -> milestones 2, 4, 6 */
    build_multistep(&s, (const double[]){1, 2, 3, 4}, 4, NULL, 0, 5);
    expect_invalid(&s, "milestone 6 must be smaller than num_epochs 5");
    sched_free(&s);
}

Test(sched, step_rejections)
{
    sched s;
    build_step(&s, NULL, 0, 10);
    expect_invalid(&s, "non-empty list of values");
    sched_free(&s);
    build_step(&s, (const double[]){1.0}, 1, 0);
    expect_invalid(&s, "num_epochs");
    sched_free(&s);
}

Test(sched, step_with_fixed_gamma_rejections)
{
    sched s;
    build_step_with_fixed_gamma(&s, 0.0, 0.1, 3, 120);
    expect_invalid(&s, "base_value must be a positive number");
    build_step_with_fixed_gamma(&s, 0.1, -0.1, 3, 120);
    expect_invalid(&s, "gamma must be a positive number");
    build_step_with_fixed_gamma(&s, 0.1, 0.1, 0, 120);
    expect_invalid(&s, "num_decays must be a positive integer");
    build_step_with_fixed_gamma(&s, 0.1, 0.1, 3, 0);
    expect_invalid(&s, "num_epochs must be a positive integer");
    sched_free(&s);
}

Test(sched, composite_rejections)
{
    sched s;
    sched *c = build_composite(&s, 2, (const double[]){0.1, 0.898}, RESCALED_FIXED);
    build_linear(&c[0], 0, 1);
    build_linear(&c[1], 1, 0);
    expect_invalid(&s, "must sum to 1"); /* off by 2e-3 */
    sched_free(&s);

    c = build_composite(&s, 2, (const double[]){0.5, 0.5}, NULL);
    build_linear(&c[0], 0, 1);
    build_linear(&c[1], 1, 0);
    sched_set_interval_scaling(&s, NULL, 0); /* VISSL's defaults: interval_scaling: [] */
    expect_invalid(&s, "interval_scaling must be the same length");
    sched_free(&s);

    c = build_composite(&s, 2, (const double[]){0.5, 0.5}, NULL);
    build_linear(&c[0], 0, 1);
    build_linear(&c[1], 1, 0);
    sched_set_lengths(&s, (const double[]){1.0}, 1);
    expect_invalid(&s, "schedulers and lengths must be the same length");
    sched_free(&s);

    build_composite(&s, 0, NULL, NULL);
    expect_invalid(&s, "at least one scheduler");
    sched_free(&s);

    c = build_composite(&s, 2, (const double[]){0.5, 0.5}, NULL);
    build_linear(&c[0], 0, 1);
    sched_set_interval_scaling(&s, (const sched_interval_scaling[]){SCHED_RESCALED, 7}, 2);
    expect_invalid(&s, "interval_scaling[1] must be fixed or rescaled");
    sched_free(&s);
}

Test(sched, errors_name_the_nested_scheduler)
{
    sched s;
    sched *c = build_composite(&s, 2, (const double[]){0.5, 0.5}, ALL_RESCALED);
    build_linear(&c[0], 0, 1);
    build_multistep(&c[1], (const double[]){0.1, 0.01}, 2, (const int[]){5}, 1, 0);
    expect_invalid(&s, "schedulers[1] (multistep): num_epochs must be greater than 0");
    s.num_epochs = 10; /* the composite's num_epochs reaches the child */
    prepare_ok(&s);
    sched_free(&s);
}

Test(sched, cosine_warm_restart_and_update_interval_rejections)
{
    sched s;
    build_cwr(&s, 0.1, 0.0, 0.0, SCHED_WAVE_HALF, 1.0, false);
    expect_invalid(&s, "restart_interval_length must be a positive");
    build_cwr(&s, 0.1, 0.0, 0.5, (sched_wave_type)5, 1.0, false);
    expect_invalid(&s, "wave_type must be half or full");
    build_linear(&s, 0, 1);
    s.update_interval = (sched_update_interval)9;
    expect_invalid(&s, "update_interval must be step or epoch");
    sched_free(&s);
}

Test(sched, validate_changes_nothing)
{
    sched s;
    build_composite_ex6(&s);
    char err[256];
    cr_assert_eq(sched_validate(&s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(s.lengths[3], 0.46166, "validate must not apply the fix-up");
    cr_assert(!s.prepared);
    sched_free(&s);
}

/* ---- the independent Python reference ------------------------------------------------------ */

static void build_fx_constant(sched *s) { build_constant(s, 0.1); }
static void build_fx_linear(sched *s) { build_linear(s, 0.6, 4.8); }
static void build_fx_cosine_t1(sched *s) { build_cosine(s, 0.15, 0.0); }
static void build_fx_cosine_ex3(sched *s) { build_cosine(s, 4.8, 0.0048); }
static void build_fx_multistep_ex2(sched *s)
{
    build_multistep(s, (const double[]){0.01, 0.001}, 2, (const int[]){1}, 1, 5);
}
static void build_fx_multistep_default(sched *s)
{
    build_multistep(s, (const double[]){0.1, 0.01, 0.001, 0.0001}, 4, NULL, 0, 10);
}
static void build_fx_step(sched *s)
{
    build_step(s, (const double[]){1.0, 0.5, 0.25, 0.125, 0.0625}, 5, 10);
}
static void build_fx_cwr_half_adaptive(sched *s)
{
    build_cwr(s, 0.1, 0.0001, 0.5, SCHED_WAVE_HALF, 1.0, true);
}
static void build_fx_cwr_full_adaptive(sched *s)
{
    build_cwr(s, 0.1, 0.0001, 0.25, SCHED_WAVE_FULL, 1.0, true);
}
static void build_fx_cwr_half_mult(sched *s)
{
    build_cwr(s, 1.0, 0.01, 0.2, SCHED_WAVE_HALF, 0.5, false);
}
static void build_fx_cwr_half_l01(sched *s)
{
    build_cwr(s, 0.1, 0.0, 0.1, SCHED_WAVE_HALF, 0.9, false);
}
static void build_fx_inverse_sqrt_t6(sched *s) { build_inverse_sqrt(s, 4.8, 0.1); }
static void build_fx_inverse_sqrt_nowarmup(sched *s) { build_inverse_sqrt(s, 4.8, 0.0); }

static const struct {
    const char *id;
    void (*build)(sched *s);
} FIXTURE_SCHEDULERS[] = {
    {"constant", build_fx_constant},
    {"linear", build_fx_linear},
    {"cosine_t1", build_fx_cosine_t1},
    {"cosine_ex3", build_fx_cosine_ex3},
    {"multistep_t2", build_multistep_t2},
    {"multistep_ex2", build_fx_multistep_ex2},
    {"multistep_default", build_fx_multistep_default},
    {"step", build_fx_step},
    {"step_with_fixed_gamma_t8", build_swfg_t8},
    {"composite_ex3", build_composite_ex3},
    {"composite_ex5", build_composite_ex5},
    {"composite_ex6", build_composite_ex6},
    {"composite_nested", build_composite_nested},
    {"cwr_half_t4", build_cwr_half_t4},
    {"cwr_full_t5", build_cwr_full_t5},
    {"cwr_half_adaptive", build_fx_cwr_half_adaptive},
    {"cwr_full_adaptive", build_fx_cwr_full_adaptive},
    {"cwr_half_mult", build_fx_cwr_half_mult},
    {"cwr_half_l01", build_fx_cwr_half_l01},
    {"inverse_sqrt_t6", build_fx_inverse_sqrt_t6},
    {"inverse_sqrt_nowarmup", build_fx_inverse_sqrt_nowarmup},
};
enum { N_FIXTURE_SCHEDULERS = ARRAY_LEN(FIXTURE_SCHEDULERS) };

/* The fixture lives in the source tree (test_path: $SELFSUP_SRC, else the current dir). */
static FILE *open_fixture(void)
{
    char *path = test_path("tests/golden/fixtures/sched/values.txt");
    FILE *f = fopen(path, "r");
    free(path);
    return f;
}

static int fixture_index(const char *id)
{
    for (int i = 0; i < N_FIXTURE_SCHEDULERS; i++)
        if (strcmp(FIXTURE_SCHEDULERS[i].id, id) == 0)
            return i;
    return -1;
}

Test(sched, matches_python_reference_fixture)
{
    FILE *f = open_fixture();
    cr_assert_not_null(f, "tests/golden/fixtures/sched/values.txt not found; run from the "
                          "repository root or set SELFSUP_SRC");
    sched scheds[N_FIXTURE_SCHEDULERS];
    for (int i = 0; i < N_FIXTURE_SCHEDULERS; i++) {
        FIXTURE_SCHEDULERS[i].build(&scheds[i]);
        prepare_ok(&scheds[i]);
    }
    long rows_per_scheduler[N_FIXTURE_SCHEDULERS] = {0};
    char line[256], id[64];
    int line_no = 0;
    double worst = 0.0;
    while (fgets(line, sizeof line, f)) {
        line_no++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        double where, want;
        cr_assert_eq(sscanf(line, "%63s %lf %lf", id, &where, &want), 3, "line %d: %s", line_no,
                     line);
        int i = fixture_index(id);
        cr_assert_geq(i, 0, "line %d: unknown scheduler id %s", line_no, id);
        rows_per_scheduler[i]++;
        double got = sched_value(&scheds[i], where);
        double rel = fabs(got - want) / fmax(fabs(want), 1e-300);
        if (got != want)
            worst = fmax(worst, rel);
        cr_assert(rel <= FIXTURE_REL || fabs(got - want) <= 1e-18,
                  "line %d: %s(%.17g) = %.17g, reference %.17g", line_no, id, where, got, want);
    }
    fclose(f);
    for (int i = 0; i < N_FIXTURE_SCHEDULERS; i++) {
        cr_assert_gt(rows_per_scheduler[i], 100, "fixture has only %ld rows for %s",
                     rows_per_scheduler[i], FIXTURE_SCHEDULERS[i].id);
        sched_free(&scheds[i]);
    }
    cr_log_info("sched fixture: worst relative difference %.3g", worst);
}
