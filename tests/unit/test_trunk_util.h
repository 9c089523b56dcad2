/*
 * test_trunk_util.h — what the trunk tests (test_regnet.c, test_alexnet.c, test_efficientnet.c)
 * share: their tolerances, the fixtures make_<trunk>_fixtures.py writes (PREFIX_CASE_NAME.npy,
 * PREFIX_cases.txt, PREFIX_TAG_names.txt, PREFIX_TAG_complexity.txt), the formula's inputs, and
 * the checks every trunk makes against them. PREFIX is the trunk's name ("regnet", "alexnet",
 * "efficientnet"); PREFIX_VERBOSE in upper case (REGNET_VERBOSE …) prints every measured error,
 * =2 also each parameter's gradient error.
 */
#ifndef SELFSUP_TEST_TRUNK_UTIL_H
#define SELFSUP_TEST_TRUNK_UTIL_H

#include "backend.h"
#include "complexity.h"
#include "npy.h"
#include "params.h"

#include <stddef.h>
#include <stdint.h>

/* A forward output's relative error against the float64 reference; a gradient's is held to
 * FLOOR_FACTOR × max(GRAD_TOL, torch float32's own error there, the fixture's grad_floor). */
#define FWD_TOL 1e-4
#define GRAD_TOL 1e-3
#define FLOOR_FACTOR 2.0
#define ZERO_GRAD_SQ 1e-20 /* a gradient that is mathematically zero (make_<trunk>_fixtures.py) */
#define X_ALPHA 0.6180339887498949 /* the formula's input, as the fixture scripts fill it */
#define R_ALPHA 0.3247179572447460 /* the formula's upstream gradient */

/* 0 without PREFIX_VERBOSE, 2 when it starts with '2', else 1. */
int tt_verbose(const char *prefix);
/* Expects e ≤ tol, printing it under PREFIX_VERBOSE. */
void tt_report(const char *prefix, const char *what, double e, double tol);

/* PREFIX_KASE_NAME.npy, float32 (asserts it). */
npy_array tt_load_npy(const char *prefix, const char *kase, const char *name);
/* The first value of PREFIX_KASE_phase.npy: the input's phase in the formula. */
int tt_fixture_phase(const char *prefix, const char *kase);
/* got against PREFIX_KASE_NAME.npy, as many values as the fixture holds. */
void tt_expect_array(const char *prefix, const float *got, const char *kase, const char *name, double tol);
/* The same for n values, which must be as many as the fixture's. */
void tt_expect_array_n(const char *prefix, const float *got, size_t n, const char *kase, const char *name,
                       double tol);

/* One key=value of a fixture list, into whatever `into` is. */
typedef void tt_pair_fn(void *into, const char *key, const char *value);
/* Every key=value of `line` after its first word (the line's name), through set. */
void tt_parse_pairs(char *line, tt_pair_fn *set, void *into);
/* The line of the fixture list nn/FILE whose first word is `name`, through tt_parse_pairs. */
void tt_load_line(const char *file, const char *name, tt_pair_fn *set, void *into);

/* A tensor of shape s holding the formula 2·frac(i·alpha + phase·β) − 1 (nnt_formula_fill). */
eng_tensor tt_formula_tensor(eng_backend *be, eng_shape s, double alpha, int phase);
/* The formula's input image(s) and the upstream gradient of L = Σ feat·r. */
eng_tensor tt_input(eng_backend *be, eng_shape s, int phase);
eng_tensor tt_upstream(eng_backend *be, eng_shape s);

/* Appends the per-channel means over N, H, W of an N × C × H × W tensor to m (*n values so far;
 * returns the grown array), as the fixtures' means_eval concatenate them. */
float *tt_append_channel_means(eng_backend *be, const eng_tensor *t, float *m, int64_t *n);

/* The parameter table's names, kinds and shapes, in order, against PREFIX_TAG_names.txt (`source`:
 * whose model wrote it, for the messages), and its parameter count against want_params. */
void tt_check_names(const char *prefix, const eng_params *p, const char *tag, const char *source,
                    int64_t want_params);
/* Rows of a trunk's costs_upto against PREFIX_TAG_complexity.txt, "name kind flops params
 * activations" per module call, then the total. */
void tt_check_cost_rows(const char *prefix, const char *tag, const eng_layer_cost *rows, int n);

/* Every parameter's gradient against PREFIX_KASE_grads.npy (Σg, Σg² each) times `factor`, within
 * FLOOR_FACTOR × max(GRAD_TOL, PREFIX_KASE_grad_floor.npy's torch float32 error). */
void tt_check_grads(const char *prefix, eng_backend *be, const eng_params *p, const char *kase, double factor);
/* The first entry's (the stem weight's) whole gradient against PREFIX_KASE_stem_grad.npy × factor. */
void tt_check_stem_grad(const char *prefix, eng_backend *be, const eng_params *p, const char *kase, double factor);

/* Counts the backend's allocations from now on (the cpu backend's, through a copy of its ops). */
void tt_count_allocations(eng_backend *be);
/* How many there were since tt_count_allocations. */
int tt_allocations(void);

#endif
