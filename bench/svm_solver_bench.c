/*
 * svm_solver_bench.c — how fast stages/svm/solver fits one binary linear SVM: the dense dual
 * coordinate descent beside Debian's liblinear (what sklearn's LinearSVC runs), on features
 * shaped like VISSL's VOC07 SVM benchmark.
 *
 *   build/bench/svm_solver_bench [--n 5000] [--dim 2048] [--classes 20] [--cls 0]
 *                                [--reps 3] [--save PREFIX] [--no-liblinear]
 *
 * The data: --classes cluster centres c_k ~ N(0, 1)^dim; row i of class k(i) = i mod classes
 * is relu(0.5 c_k + N(0, 1)^dim), normalised as VISSL does (x / (‖x‖ + 1e-5)), float32: a
 * post-ReLU trunk feature, about half zeros. The fit is one-vs-rest for class --cls (+1) against
 * the rest (−1), with VISSL's LinearSVC settings (class_weight {1: 2, -1: 1}, intercept
 * scaling 1, squared hinge, dual, tol 1e-4, max_iter 2000).
 *
 * Measured (the fit call's time on its thread's CPU clock, which includes liblinear's copy
 * into its sparse rows, the median of --reps runs, one thread; the CPU clock rather than the
 * wall clock because the machines this runs on are shared, and a fit never waits on I/O):
 *   fit1      one fit at C = 1: dense, then liblinear
 *   sweep     VOC07's costs 0.01 … 1000 one after another: dense cold (every fit from α = 0),
 *             dense warm (each cost starts from the previous cost's α), liblinear
 *   classes   every class against the rest at C = 1 (what the VOC07 benchmark fits for each
 *             cost and fold): one svm_fit after another, then all as tasks of one
 *             svm_fit_tasks call, which sweeps the rows once for all of them (the models must
 *             come out the same to the bit)
 * Each fit's primal objective is printed as a '#' line, so the solvers can be seen to reach
 * the same optimum. --save PREFIX writes PREFIX_x.npy and PREFIX_y.npy (±1) for timing sklearn
 * on the very same problem.
 *
 * Output: `svm_solver_bench <fit1|sweep> <dense|dense_warm|liblinear> <seconds>` lines, and
 * `svm_solver_bench ratio <what> <x>` lines for liblinear's time over the dense solver's.
 */
#include "npy.h"
#include "rng.h"
#include "svm/solver.h"
#include "timer.h"
#include "util.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 20

static const double VOC07_COSTS[] = {0.01, 0.1, 1.0, 2, 5, 10, 15, 20, 50, 100, 1000};
#define N_COSTS (sizeof VOC07_COSTS / sizeof VOC07_COSTS[0])

typedef struct {
    size_t n, dim, classes, cls;
    int reps;
    const char *save;
    bool liblinear;
} options;

/* ---- the synthetic problem ------------------------------------------------------------- */

static float *make_features(const options *o)
{
    rng_stream rng;
    rng_stream_init(&rng, (rng_key){.seed = 12345, .purpose = RNG_PURPOSE_BENCHMARK});
    double *centres = xmalloc(o->classes * o->dim * sizeof(double));
    for (size_t k = 0; k < o->classes * o->dim; k++)
        centres[k] = rng_normal(&rng, 0, 1);
    float *x = xmalloc_large(o->n * o->dim * sizeof(float));
    for (size_t i = 0; i < o->n; i++) {
        const double *c = centres + (i % o->classes) * o->dim;
        float *row = x + i * o->dim;
        double norm = 0;
        for (size_t j = 0; j < o->dim; j++) {
            double v = fmax(0.0, 0.5 * c[j] + rng_normal(&rng, 0, 1));
            row[j] = (float)v;
            norm += v * v;
        }
        for (size_t j = 0; j < o->dim; j++)
            row[j] = (float)(row[j] / (sqrt(norm) + 1e-5));
    }
    free(centres);
    return x;
}

static int8_t *make_labels(const options *o)
{
    int8_t *y = xmalloc(o->n);
    for (size_t i = 0; i < o->n; i++)
        y[i] = i % o->classes == o->cls ? 1 : -1;
    return y;
}

static void save_problem(const options *o, const float *x, const int8_t *y)
{
    char *err = NULL, *px = xasprintf("%s_x.npy", o->save), *py = xasprintf("%s_y.npy", o->save);
    size_t shape[2] = {o->n, o->dim};
    if (npy_write(px, NPY_F4, 2, shape, x, &err) != 0 || npy_write(py, NPY_I1, 1, shape, y, &err) != 0) {
        fprintf(stderr, "svm_solver_bench: %s\n", err);
        exit(1);
    }
    printf("# saved %s and %s\n", px, py);
    free(px);
    free(py);
}

/* ---- fits ------------------------------------------------------------------------------ */

static svm_params vissl_params(double C, svm_solver solver)
{
    return (svm_params){.C = C, .weight_pos = 2, .weight_neg = 1, .bias = 1.0, .eps = 1e-4,
                        .max_iter = 2000, .loss = SVM_SQUARED_HINGE, .penalty = SVM_PENALTY_L2,
                        .dual = true, .solver = solver, .seed = 1};
}

/* ½‖w‖² + Σ C_i max(0, 1 − y_i w·x̃_i)², to show both solvers reach the same optimum. */
static double primal_objective(const svm_model *m, const svm_problem *prob, const svm_params *p)
{
    double obj = 0;
    for (size_t j = 0; j <= m->dim; j++)
        obj += 0.5 * m->w[j] * m->w[j];
    for (size_t i = 0; i < prob->n; i++) {
        double slack = fmax(0.0, 1.0 - prob->y[i] * svm_decision(m, prob->x + i * prob->stride));
        obj += p->C * (prob->y[i] > 0 ? p->weight_pos : p->weight_neg) * slack * slack;
    }
    return obj;
}

/* CPU seconds used by this thread. */
static double thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double fit_once(const svm_problem *prob, const svm_params *p, double *alpha, const char *what)
{
    svm_model m;
    char *err = NULL;
    double t0 = now_seconds(), c0 = thread_seconds();
    if (svm_fit(prob, p, alpha, &m, &err) != 0) {
        fprintf(stderr, "svm_solver_bench: %s\n", err);
        exit(1);
    }
    double dt = thread_seconds() - c0, wall = now_seconds() - t0;
    printf("# %-10s C=%-6g cpu %.3f s  wall %.3f s  objective %.9g  iterations %d\n", what, p->C, dt, wall,
           primal_objective(&m, prob, p), m.iterations);
    svm_model_free(&m);
    return dt;
}

/* The costs one after another; `warm` carries α from each cost to the next. */
static double sweep(const svm_problem *prob, svm_solver solver, bool warm, const char *what)
{
    double *alpha = warm ? xcalloc(prob->n, sizeof(double)) : NULL;
    double total = 0;
    for (size_t k = 0; k < N_COSTS; k++) {
        svm_params p = vissl_params(VOC07_COSTS[k], solver);
        total += fit_once(prob, &p, alpha, what);
    }
    free(alpha);
    return total;
}

/* Every class against the rest at C = 1: one fit after another (together = false) or all as
 * tasks of one call. The models go to w (classes × (dim + 1)). */
static double fit_classes(const options *o, const svm_problem *prob, bool together, double *w)
{
    int8_t *labels = xmalloc(o->classes * o->n);
    svm_task *tasks = xcalloc(o->classes, sizeof *tasks);
    for (size_t k = 0; k < o->classes; k++) {
        for (size_t i = 0; i < o->n; i++)
            labels[k * o->n + i] = i % o->classes == k ? 1 : -1;
        tasks[k].y = labels + k * o->n;
    }
    svm_params p = vissl_params(1.0, SVM_SOLVER_DENSE);
    char *err = NULL;
    double c0 = thread_seconds();
    int rc = 0;
    if (together)
        rc = svm_fit_tasks(prob, &p, tasks, o->classes, &err);
    else
        for (size_t k = 0; k < o->classes && rc == 0; k++)
            rc = svm_fit_tasks(prob, &p, &tasks[k], 1, &err);
    double dt = thread_seconds() - c0;
    if (rc != 0) {
        fprintf(stderr, "svm_solver_bench: %s\n", err);
        exit(1);
    }
    for (size_t k = 0; k < o->classes; k++) {
        memcpy(w + k * (o->dim + 1), tasks[k].model.w, (o->dim + 1) * sizeof(double));
        svm_model_free(&tasks[k].model);
    }
    printf("# classes %-10s cpu %.3f s\n", together ? "tasks" : "one_by_one", dt);
    free(tasks);
    free(labels);
    return dt;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, by_value);
    return t[n / 2];
}

/* ---- main ------------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: svm_solver_bench [--n N] [--dim D] [--classes K] [--cls C] [--reps R] "
                    "[--save PREFIX] [--no-liblinear]\n");
    exit(2);
}

static options parse_options(int argc, char **argv)
{
    options o = {.n = 5000, .dim = 2048, .classes = 20, .cls = 0, .reps = 3, .liblinear = true};
    static const struct option longs[] = {
        {"n", required_argument, 0, 'n'},       {"dim", required_argument, 0, 'd'},
        {"classes", required_argument, 0, 'k'}, {"cls", required_argument, 0, 'c'},
        {"reps", required_argument, 0, 'r'},    {"save", required_argument, 0, 's'},
        {"no-liblinear", no_argument, 0, 'L'},  {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'n': o.n = strtoul(optarg, NULL, 10); break;
        case 'd': o.dim = strtoul(optarg, NULL, 10); break;
        case 'k': o.classes = strtoul(optarg, NULL, 10); break;
        case 'c': o.cls = strtoul(optarg, NULL, 10); break;
        case 'r': o.reps = atoi(optarg); break;
        case 's': o.save = optarg; break;
        case 'L': o.liblinear = false; break;
        default: usage();
        }
    }
    if (o.n < 2 || o.dim == 0 || o.classes < 2 || o.cls >= o.classes || o.reps < 1 || o.reps > MAX_REPS)
        usage();
    return o;
}

int main(int argc, char **argv)
{
    options o = parse_options(argc, argv);
    float *x = make_features(&o);
    int8_t *y = make_labels(&o);
    if (o.save)
        save_problem(&o, x, y);
    svm_problem prob = {.x = x, .dim = o.dim, .stride = o.dim, .y = y, .n = o.n};
    printf("# %zu x %zu, class %zu of %zu vs the rest, %d reps (median)\n", o.n, o.dim, o.cls,
           o.classes, o.reps);

    double t[MAX_REPS], fit_dense, fit_lib = 0, sweep_cold, sweep_warm, sweep_lib = 0;
    for (int r = 0; r < o.reps; r++) {
        svm_params p = vissl_params(1.0, SVM_SOLVER_DENSE);
        t[r] = fit_once(&prob, &p, NULL, "dense");
    }
    fit_dense = median(t, o.reps);
    if (o.liblinear) {
        for (int r = 0; r < o.reps; r++) {
            svm_params p = vissl_params(1.0, SVM_SOLVER_LIBLINEAR);
            t[r] = fit_once(&prob, &p, NULL, "liblinear");
        }
        fit_lib = median(t, o.reps);
    }
    for (int r = 0; r < o.reps; r++)
        t[r] = sweep(&prob, SVM_SOLVER_DENSE, false, "dense");
    sweep_cold = median(t, o.reps);
    for (int r = 0; r < o.reps; r++)
        t[r] = sweep(&prob, SVM_SOLVER_DENSE, true, "dense_warm");
    sweep_warm = median(t, o.reps);
    double *w_alone = xmalloc(o.classes * (o.dim + 1) * sizeof(double));
    double *w_tasks = xmalloc(o.classes * (o.dim + 1) * sizeof(double));
    for (int r = 0; r < o.reps; r++)
        t[r] = fit_classes(&o, &prob, false, w_alone);
    double classes_alone = median(t, o.reps);
    for (int r = 0; r < o.reps; r++)
        t[r] = fit_classes(&o, &prob, true, w_tasks);
    double classes_tasks = median(t, o.reps);
    bool same = memcmp(w_alone, w_tasks, o.classes * (o.dim + 1) * sizeof(double)) == 0;
    free(w_alone);
    free(w_tasks);
    if (o.liblinear) {
        /* one sweep: liblinear's is the slow one, and its times vary little */
        sweep_lib = sweep(&prob, SVM_SOLVER_LIBLINEAR, false, "liblinear");
    }

    printf("svm_solver_bench fit1 dense %.4f\n", fit_dense);
    printf("svm_solver_bench sweep dense %.4f\n", sweep_cold);
    printf("svm_solver_bench sweep dense_warm %.4f\n", sweep_warm);
    printf("svm_solver_bench classes one_by_one %.4f\n", classes_alone);
    printf("svm_solver_bench classes tasks %.4f\n", classes_tasks);
    printf("svm_solver_bench ratio classes_as_tasks %.2f (models %s)\n", classes_alone / classes_tasks,
           same ? "identical" : "DIFFERENT");
    if (o.liblinear) {
        printf("svm_solver_bench fit1 liblinear %.4f\n", fit_lib);
        printf("svm_solver_bench sweep liblinear %.4f\n", sweep_lib);
        printf("svm_solver_bench ratio fit1 %.2f\n", fit_lib / fit_dense);
        printf("svm_solver_bench ratio sweep_cold %.2f\n", sweep_lib / sweep_cold);
        printf("svm_solver_bench ratio sweep_warm %.2f\n", sweep_lib / sweep_warm);
    }
    free(x);
    free(y);
    return same ? 0 : 1;
}
