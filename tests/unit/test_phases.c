/*
 * test_phases.c — VISSL's phase list (stages/train/phases.h) against the lists
 * SelfSupervisionTask._build_phases makes, written out by hand from its rule: a test phase
 * after train phase i when i % TEST_EVERY_NUM_EPOCH == 0 or i is the last.
 */
#include "train/phases.h"

#include <criterion/criterion.h>

/* The phase list as a string, "T" for train and "t" for test, from the plan's answers. */
static void phase_string(const phase_plan *p, char *out)
{
    int64_t idx = 0;
    for (int64_t e = 0; e < p->num_epochs; e++) {
        cr_assert_eq(phase_plan_train_index(p, e), idx, "train phase %lld", (long long)e);
        out[idx++] = 'T';
        if (phase_plan_test_after(p, e)) {
            cr_assert_eq(phase_plan_test_index(p, e), idx, "the test after %lld", (long long)e);
            out[idx++] = 't';
        }
    }
    out[idx] = '\0';
}

static int64_t tests_in(const char *s)
{
    int64_t n = 0;
    for (; *s; s++)
        n += *s == 't';
    return n;
}

Test(phases, vissl_build_phases_lists)
{
    static const struct {
        int64_t epochs, every;
        bool test_model;
        const char *want;
    } cases[] = {
        {5, 1, true, "TtTtTtTtTt"},
        {5, 2, true, "TtTTtTTt"},       /* after 0, 2, 4 */
        {6, 2, true, "TtTTtTTtTt"},     /* after 0, 2, 4 and the last, 5 */
        {5, 3, true, "TtTTTtTt"},       /* after 0, 3 and the last, 4 */
        {1, 4, true, "Tt"},
        {4, 10, true, "TtTTTt"},        /* after 0 and the last */
        {5, 1, false, "TTTTT"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        phase_plan p = {.num_epochs = cases[i].epochs, .test_every = cases[i].every, .test_model = cases[i].test_model};
        char got[64];
        phase_string(&p, got);
        cr_expect_str_eq(got, cases[i].want, "%lld epochs, every %lld", (long long)cases[i].epochs,
                         (long long)cases[i].every);
        /* the tests still to run from each epoch on: those after it in the list */
        for (int64_t e = 0; e <= p.num_epochs; e++) {
            const char *from = got;
            for (int64_t k = 0; k < e; k++) /* skip train phase k and its test */
                from += 1 + (from[1] == 't');
            cr_expect_eq(phase_plan_tests_from(&p, e), tests_in(from), "tests from epoch %lld of %s", (long long)e,
                         got);
        }
    }
}

Test(phases, test_only_runs_num_epochs_test_phases_and_no_training_tests)
{
    phase_plan p = {.num_epochs = 3, .test_every = 1, .test_model = true, .test_only = true};
    cr_expect_eq(phase_plan_tests_from(&p, 0), 3);
    cr_expect_eq(phase_plan_tests_from(&p, 2), 1);
    cr_expect_eq(phase_plan_tests_from(&p, 3), 0);
    for (int64_t e = 0; e < 3; e++)
        cr_expect(!phase_plan_test_after(&p, e), "no train phase to follow");
}
