/*
 * solver.h — one binary linear SVM, as sklearn's LinearSVC fits it for VISSL's svm_trainer.py.
 *
 * The problem: minimise ½‖w‖² + Σ_i C_i · loss(y_i (w·x̃_i)), y_i ∈ {−1, +1}, where x̃_i is
 * the row x_i with the constant `bias` appended when bias > 0 (liblinear's intercept, which is
 * regularised like any weight, as sklearn's intercept_scaling is), C_i = C · weight_pos for
 * y_i = +1 and C · weight_neg for y_i = −1 (sklearn's class_weight {1: 2, -1: 1} gives
 * weight_pos 2, weight_neg 1), and loss is the squared hinge max(0, 1 − m)² or the hinge
 * max(0, 1 − m).
 *
 * Two solvers:
 *   SVM_SOLVER_DENSE     liblinear's dual coordinate descent (solve_l2r_l1l2_svc, Hsieh et
 *                        al. 2008: the same shrinking and the same stopping rule on the
 *                        projected gradient, tolerance eps) run directly on dense float32
 *                        rows, with a warm start: `alpha` in is the previous cost's dual
 *                        solution (any alpha ≥ 0 is feasible for the squared hinge; for the
 *                        hinge it is clipped to the new box [0, C_i]).
 *                        With eps >= 1e-5 (VISSL's 1e-4) the gradients read float weights
 *                        (compensated updates), about 3x less work per row; below, double
 *                        weights. Either way the w handed back is Σ y_i α_i x̃_i recomputed
 *                        in double from the dual solution.
 *                        It solves the dual of the l2 problems (dual = True); it hands the
 *                        others (dual = False, penalty l1) to liblinear.
 *   SVM_SOLVER_LIBLINEAR Debian's liblinear itself (solver 1 / 3 for the dual, 2 for the
 *                        primal with dual = False, 5 for penalty l1), the rows copied into its
 *                        sparse double format; alpha is not used. liblinear 2.3 has no
 *                        max_iter: its dual solvers stop after 1000 iterations whatever
 *                        max_iter says (sklearn's bundled copy takes max_iter), and it orders
 *                        coordinates with the C library's rand() (seeded from `seed`, but
 *                        shared by all threads, so parallel fits are not reproducible).
 * Both reach the same optimum within the tolerance (tests/unit/test_svm_solver.c); the dense
 * solver is the fast path. Refused, as sklearn refuses them: penalty l1 with the hinge,
 * penalty l1 with dual = True, the hinge with dual = False.
 */
#ifndef SELFSUP_SVM_SOLVER_H
#define SELFSUP_SVM_SOLVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SVM_SQUARED_HINGE, SVM_HINGE } svm_loss;
typedef enum { SVM_PENALTY_L2, SVM_PENALTY_L1 } svm_penalty;
typedef enum { SVM_SOLVER_DENSE, SVM_SOLVER_LIBLINEAR } svm_solver;

typedef struct {
    double C;                     /* cost */
    double weight_pos, weight_neg; /* class weights (1, 1 when none) */
    double bias;                  /* intercept_scaling (sklearn: 1.0); <= 0: no intercept */
    double eps;                   /* tol (VISSL: 1e-4) */
    int max_iter;                 /* outer iterations (VISSL: 2000) */
    svm_loss loss;
    svm_penalty penalty;
    bool dual;
    svm_solver solver;
    uint64_t seed;                /* the coordinate order's random permutations */
} svm_params;

/* The rows a fit reads: row r of the problem is x + rows[r] * stride (rows NULL: r itself),
 * its label y[rows[r]] (or y[r]), +1 or −1. Nothing is copied for the dense solver, so the
 * folds of a cross-validation share one feature matrix. */
typedef struct {
    const float *x;
    size_t dim, stride;   /* features per row, floats between rows (>= dim) */
    const int8_t *y;
    const uint32_t *rows; /* NULL: rows 0 .. n-1 */
    size_t n;
} svm_problem;

/* A fitted model: decision(x) = w·x + w[dim] · bias. */
typedef struct {
    size_t dim;
    double bias;
    double *w;     /* dim + 1 (the last is the intercept's weight; 0 without an intercept) */
    int iterations; /* outer iterations used; == max_iter when it did not converge;
                       -1 from liblinear (it does not say) */
} svm_model;

/* Fit one problem; `alpha` (n doubles, or NULL) is the warm start in and the dual solution out (dense
 * solver; untouched otherwise). 0, or -1 with *err and *out zeroed: C, a class weight, eps or
 * max_iter not positive, no rows, no features, a label other than ±1, only one class, a
 * non-finite feature, a combination sklearn refuses, liblinear's refusal. The fit runs on
 * the calling thread only (run several at once for parallelism). */
int svm_fit(const svm_problem *prob, const svm_params *p, double *alpha, svm_model *out, char **err);

/* One of several problems fitted together on the same rows (svm_fit_tasks). */
typedef struct {
    const int8_t *y;   /* labels (±1 on the task's rows), indexed like svm_problem.y */
    const uint8_t *in; /* NULL: every row of the problem; else the rows whose in[...] (indexed
                          like y) is non-zero, e.g. a cross-validation fold's training rows */
    double *alpha;     /* n (problem rows) or NULL: the warm start in and the dual solution out,
                          as svm_fit's; 0 outside the task */
    svm_model model;   /* out: free with svm_model_free */
} svm_task;

/* Fit several problems that share the rows of `prob` (whose y is not read: each task brings
 * its own labels and subset), all with the parameters p. The dense solver serves them all
 * from one sweep over the rows, so a row is fetched from memory once per outer iteration
 * for every task instead of once per task: on rows that do not fit in the caches, K tasks
 * take far less than K times one task's time. Each task's fit is exactly the fit it would
 * get alone in a call on the same rows (the coordinate order depends only on the seed and
 * prob->n), so how tasks are grouped changes no result. 0, or -1 with *err ("task K: ..."
 * when there are several) and every model freed; the refusals are svm_fit's, per task. */
int svm_fit_tasks(const svm_problem *prob, const svm_params *p, svm_task *tasks, size_t ntasks,
                  char **err);
void svm_model_free(svm_model *m);

/* w·x + w[dim]·bias for one row (float32 in, double accumulation). */
double svm_decision(const svm_model *m, const float *x);

#endif
