/*
 * test_hooks.h — engine entry points that only tests (and the fixture scripts' twins in
 * tests/golden/) need: weights set by closed formulas instead of a random generator, so that
 * PyTorch can rebuild the same model without a stored file, and the cpu backend held to one
 * channel blocking whatever this CPU would choose. Production code never includes this header;
 * the definitions live beside what they reach into (resnet.c, model.c, cpu/cpu.c).
 */
#ifndef SELFSUP_NN_TEST_HOOKS_H
#define SELFSUP_NN_TEST_HOOKS_H

#include "model.h"
#include "regnet.h"
#include "resnet.h"
#include "trunk.h"

/* Every parameter and running statistic set by the closed formula documented in
 * tests/golden/make_resnet_fixtures.py. */
void resnet_init_formula(eng_backend *be, resnet *net);
/* The same formula for the other trunks (eng_params_init_formula; make_regnet_fixtures.py). */
void regnet_init_formula(eng_backend *be, regnet *net);
void trunk_init_formula(eng_backend *be, trunk *t);
/* The trunk by resnet_init_formula, the heads by head_init_formula
 * (tests/golden/make_model_fixtures.py reproduces both in PyTorch). */
void model_init_formula(eng_backend *be, model *m);
/* The cpu backend uses channel block b (8 or 16) from now on; 0 goes back to the CPU's own. */
void cpu_force_block(int b);

#endif
