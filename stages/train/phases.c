/*
 * phases.c — VISSL's phase list (see phases.h), counted rather than stored.
 */
#include "train/phases.h"

phase_plan phase_plan_from_config(const cfg_node *config)
{
    int64_t every = cfg_int(config, "TEST_EVERY_NUM_EPOCH");
    return (phase_plan){.num_epochs = cfg_int(config, "OPTIMIZER.num_epochs"),
                        .test_every = every > 0 ? every : 1,
                        .test_model = cfg_bool(config, "TEST_MODEL"),
                        .test_only = cfg_bool(config, "TEST_ONLY")};
}

bool phase_plan_test_after(const phase_plan *p, int64_t epoch)
{
    if (!p->test_model || p->test_only || epoch < 0 || epoch >= p->num_epochs)
        return false;
    return epoch % p->test_every == 0 || epoch == p->num_epochs - 1;
}

/* Test phases after train phases 0 .. epoch - 1. */
static int64_t tests_before(const phase_plan *p, int64_t epoch)
{
    if (!p->test_model || p->test_only || epoch <= 0)
        return 0;
    int64_t last = epoch - 1 < p->num_epochs - 1 ? epoch - 1 : p->num_epochs - 1;
    int64_t n = last / p->test_every + 1; /* 0, every, 2 every, … up to last */
    if (epoch >= p->num_epochs && (p->num_epochs - 1) % p->test_every != 0)
        n++; /* the test after the last epoch */
    return n;
}

int64_t phase_plan_train_index(const phase_plan *p, int64_t epoch) { return epoch + tests_before(p, epoch); }

int64_t phase_plan_test_index(const phase_plan *p, int64_t epoch) { return phase_plan_train_index(p, epoch) + 1; }

int64_t phase_plan_tests_from(const phase_plan *p, int64_t from_epoch)
{
    if (from_epoch < 0)
        from_epoch = 0;
    if (p->test_only)
        return from_epoch < p->num_epochs ? p->num_epochs - from_epoch : 0;
    return tests_before(p, p->num_epochs) - tests_before(p, from_epoch);
}
