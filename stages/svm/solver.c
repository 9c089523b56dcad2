/*
 * solver.c — one binary linear SVM (see solver.h): liblinear's dual coordinate descent on
 * dense float32 rows, and liblinear itself.
 *
 * The dense solver is solve_l2r_l1l2_svc of liblinear (Hsieh et al., ICML 2008, Algorithm 1
 * with shrinking), written afresh for rows that stay where the caller keeps them:
 *
 *   dual:  min_α ½ αᵀ(Q + D)α − Σα_i   subject to 0 ≤ α_i ≤ U_i,   Q_ij = y_i y_j x̃_i·x̃_j
 *          squared hinge: D_i = 0.5 / C_i, U_i = ∞;   hinge: D_i = 0, U_i = C_i
 *   primal from dual: w = Σ y_i α_i x̃_i   (kept up to date after every coordinate step)
 *
 * Each outer iteration shuffles the active coordinates, then for each one computes the
 * gradient G = y_i w·x̃_i − 1 + D_i α_i, its projection PG onto the box, takes the exact
 * one-dimensional Newton step α_i ← clip(α_i − G / (‖x̃_i‖² + D_i)) and moves w by the
 * change. Coordinates stuck at a bound whose gradient points outward by more than last
 * iteration's extremes are shrunk (dropped from the active set); when the spread of PG,
 * max − min, falls to eps the active set is restored and, if that was already everything,
 * the solver stops. This is liblinear's rule exactly, so sklearn's tol means the same here.
 *
 * The appended intercept feature x̃_i[dim] = bias is never stored: it is the last weight of
 * w and the constant added to every dot product and norm.
 *
 * Speed: a coordinate step is one pass over the row for the gradient and, when α_i moves,
 * one more to move w; the gradients use float weights when eps allows (see the kernels),
 * and a warm start from the previous cost's α skips most of the early iterations. Several
 * problems on the same rows (the classes and folds of a benchmark) are solved as tasks of
 * one call that share each sweep over the rows, so a row is fetched from memory once for
 * all of them. A call runs on one thread; the caller runs groups of tasks side by side.
 *
 * The liblinear path copies the rows into liblinear's sparse double format and calls
 * train(); it serves the problems the dense solver does not (primal, penalty l1) and acts as
 * the reference.
 */
#include "svm/solver.h"

#include "rng.h"
#include "util.h"

#include <linear.h>

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the problem's rows ---------------------------------------------------------------- */

static size_t problem_row(const svm_problem *prob, size_t r)
{
    return prob->rows ? prob->rows[r] : r;
}

static const float *row_features(const svm_problem *prob, size_t r)
{
    return prob->x + problem_row(prob, r) * prob->stride;
}

static int row_label_of(const svm_problem *prob, const int8_t *y, size_t r)
{
    return y[problem_row(prob, r)];
}

static bool task_has_row(const svm_problem *prob, const svm_task *task, size_t r)
{
    return !task->in || task->in[problem_row(prob, r)];
}

/* C_i for each class: sklearn's class_weight multiplies C per class. */
static double cost_of(const svm_params *p, int label)
{
    return p->C * (label > 0 ? p->weight_pos : p->weight_neg);
}

/* ---- checks ---------------------------------------------------------------------------- */

static int check_params(const svm_params *p, char **err)
{
    if (!(p->C > 0) || !isfinite(p->C))
        return report_failure(err, "svm: the cost C must be a positive number (got %g)", p->C);
    if (!(p->weight_pos > 0) || !(p->weight_neg > 0) || !isfinite(p->weight_pos) ||
        !isfinite(p->weight_neg))
        return report_failure(err, "svm: class weights must be positive (got %g for +1, %g for -1)",
                              p->weight_pos, p->weight_neg);
    if (!(p->eps > 0))
        return report_failure(err, "svm: the tolerance must be positive (got %g)", p->eps);
    if (p->max_iter <= 0)
        return report_failure(err, "svm: max_iter must be positive (got %d)", p->max_iter);
    if (!isfinite(p->bias))
        return report_failure(err, "svm: the intercept scaling must be finite");
    if (p->penalty == SVM_PENALTY_L1 && p->loss == SVM_HINGE)
        return report_failure(err, "svm: penalty l1 with the hinge loss is not supported "
                                   "(sklearn refuses it too)");
    if (p->penalty == SVM_PENALTY_L1 && p->dual)
        return report_failure(err, "svm: penalty l1 with the squared hinge needs dual = False "
                                   "(as in sklearn)");
    if (p->penalty == SVM_PENALTY_L2 && p->loss == SVM_HINGE && !p->dual)
        return report_failure(err, "svm: penalty l2 with the hinge loss needs dual = True "
                                   "(as in sklearn)");
    return 0;
}

static int check_rows(const svm_problem *prob, char **err)
{
    if (prob->n == 0)
        return report_failure(err, "svm: no training rows");
    if (prob->dim == 0)
        return report_failure(err, "svm: the rows have no features");
    if (prob->stride < prob->dim)
        return report_failure(err, "svm: row stride %zu is shorter than a row (%zu features)",
                              prob->stride, prob->dim);
    if (!prob->x)
        return report_failure(err, "svm: no features");
    return 0;
}

/* A task's labels: ±1 on its rows, and both present. */
static int check_task(const svm_problem *prob, const svm_task *task, char **err)
{
    if (!task->y)
        return report_failure(err, "svm: no labels");
    size_t positives = 0, members = 0;
    for (size_t r = 0; r < prob->n; r++) {
        if (!task_has_row(prob, task, r))
            continue;
        int label = row_label_of(prob, task->y, r);
        if (label != 1 && label != -1)
            return report_failure(err, "svm: row %zu has label %d; labels must be +1 or -1",
                                  problem_row(prob, r), label);
        positives += label == 1;
        members++;
    }
    if (members == 0)
        return report_failure(err, "svm: no training rows");
    if (positives == 0 || positives == members)
        return report_failure(err, "svm: the rows are all of class %+d; a fit needs samples of "
                                   "at least 2 classes",
                              positives ? 1 : -1);
    return 0;
}

/* ---- dense kernels ----------------------------------------------------------------------
 * The solver's inner loops: a row's dot product with the weights (every coordinate step) and
 * weights += a · row (every step that moves α). Written with GCC's vector types and
 * independent accumulators, so they run at the vector units' throughput rather than an
 * add's latency, and the sum order is fixed by the code, not by the compiler: every build
 * and both clones (AVX2 and the SSE2 baseline) give the same bits.
 *
 * Two precisions. Double weights (float rows widened) cost a conversion per element and
 * half the lanes; float weights do 8 products per instruction with nothing to convert, about
 * 3x faster per row (83 ns against 265 ns for a 2048-float dot product on the dev machine).
 * A float weight vector that takes millions of small updates would drift, so its updates
 * are compensated (Kahan: `comp` keeps what each addition rounded away and feeds it back
 * into the next), which bounds the error by the updates' own rounding, not by |w|'s. */

typedef float f32x4 __attribute__((vector_size(16), aligned(4), may_alias));
typedef float f32x8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef double f64x4 __attribute__((vector_size(32), aligned(8), may_alias));

/* four floats from x, as doubles (a macro: a function returning a 32-byte vector would
 * change the ABI between the clones) */
#define load_widened(x) __builtin_convertvector(*(const f32x4 *)(x), f64x4)

/* Σ w[j] x[j], double weights, double sums. */
__attribute__((target_clones("avx2", "default"))) static double dot_row(const double *w,
                                                                        const float *x, size_t n)
{
    f64x4 acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        acc0 += *(const f64x4 *)(w + j) * load_widened(x + j);
        acc1 += *(const f64x4 *)(w + j + 4) * load_widened(x + j + 4);
        acc2 += *(const f64x4 *)(w + j + 8) * load_widened(x + j + 8);
        acc3 += *(const f64x4 *)(w + j + 12) * load_widened(x + j + 12);
    }
    f64x4 acc = (acc0 + acc1) + (acc2 + acc3);
    double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (; j < n; j++)
        s += w[j] * (double)x[j];
    return s;
}

/* w += a · x, double weights. */
__attribute__((target_clones("avx2", "default"))) static void add_scaled_row(double a,
                                                                             const float *x,
                                                                             double *w, size_t n)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        *(f64x4 *)(w + j) += a * load_widened(x + j);
        *(f64x4 *)(w + j + 4) += a * load_widened(x + j + 4);
    }
    for (; j < n; j++)
        w[j] += a * (double)x[j];
}

/* Σ w[j] x[j], float weights: float products, 32 float partial sums added up in double. */
__attribute__((target_clones("avx2", "default"))) static double dot_row_single(const float *w,
                                                                               const float *x,
                                                                               size_t n)
{
    f32x8 acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
    size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        acc0 += *(const f32x8 *)(w + j) * *(const f32x8 *)(x + j);
        acc1 += *(const f32x8 *)(w + j + 8) * *(const f32x8 *)(x + j + 8);
        acc2 += *(const f32x8 *)(w + j + 16) * *(const f32x8 *)(x + j + 16);
        acc3 += *(const f32x8 *)(w + j + 24) * *(const f32x8 *)(x + j + 24);
    }
    double s = 0;
    for (int k = 0; k < 8; k++)
        s += ((double)acc0[k] + acc1[k]) + ((double)acc2[k] + acc3[k]);
    for (; j < n; j++)
        s += (double)w[j] * x[j];
    return s;
}

/* w += a · x, float weights, Kahan-compensated: w − comp is the running sum to about twice
 * float's precision. */
__attribute__((target_clones("avx2", "default"))) static void add_scaled_row_compensated(
    float a, const float *x, float *w, float *comp, size_t n)
{
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        f32x8 step = a * *(const f32x8 *)(x + j) - *(f32x8 *)(comp + j);
        f32x8 sum = *(f32x8 *)(w + j) + step;
        *(f32x8 *)(comp + j) = (sum - *(f32x8 *)(w + j)) - step;
        *(f32x8 *)(w + j) = sum;
    }
    for (; j < n; j++) {
        float step = a * x[j] - comp[j];
        float sum = w[j] + step;
        comp[j] = (sum - w[j]) - step;
        w[j] = sum;
    }
}

/* ‖x‖² in double: finite exactly when every feature is finite (a float squared cannot
 * overflow a double), so this is also the check for NaN and infinite features. */
__attribute__((target_clones("avx2", "default"))) static double squared_norm(const float *x,
                                                                             size_t n)
{
    f64x4 acc0 = {0}, acc1 = {0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        f64x4 lo = load_widened(x + j), hi = load_widened(x + j + 4);
        acc0 += lo * lo;
        acc1 += hi * hi;
    }
    f64x4 acc = acc0 + acc1;
    double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (; j < n; j++)
        s += (double)x[j] * x[j];
    return s;
}

/* ---- the dense dual coordinate descent, many tasks side by side ------------------------
 * A task is one binary problem on the call's rows (all of them, or those its `in` marks).
 * The tasks of a call share one sweep: each outer iteration visits the rows in one random
 * order, and a row, once loaded, serves every task that still has it in its active set. On
 * rows too many for the caches a coordinate step is bound by memory, not arithmetic (a
 * 2048-float row is 8 KB; 5000 of them overflow a 32 MB L3), so the second and later
 * tasks get the row almost for free from L1.
 *
 * Each task still follows liblinear's Algorithm 1 exactly: its coordinates come in the
 * shared order restricted to its active rows (a uniformly random order of them, as
 * liblinear's per-iteration shuffle gives), with its own shrinking, stopping rule and
 * iteration count. The shared order depends only on the seed and the number of rows, so a
 * task's fit is the same, to the bit, whatever other tasks share its call. */

/* Below this tolerance the gradients are computed with double weights: the float dot
 * product's own error (~1e-7 of |w|·|x|) must stay well under what the stopping rule
 * compares. VISSL's 1e-4 runs in single precision. */
#define SINGLE_PRECISION_MIN_EPS 1e-5

/* One task's solver state. */
typedef struct {
    svm_task *out;
    const int8_t *y;    /* labels, indexed like svm_problem.y */
    double *alpha;      /* n, the caller's */
    uint8_t *active;    /* n: row r is in the active set */
    size_t members;     /* rows in the task */
    size_t nactive;     /* of them, active now */
    double diag[2];     /* D_i for y = −1 ([0]) and y = +1 ([1]) */
    double upper[2];    /* U_i, likewise */
    double *w;          /* dim + 1; in single precision only w[dim] (the intercept) is live
                           until the fit ends */
    float *w_f, *comp;  /* dim each, single precision: the weights and their compensation */
    double pg_max_old, pg_min_old; /* last iteration's extremes of PG; ±∞: no shrinking */
    double pg_max, pg_min;         /* this iteration's */
    int iter;
    bool done;
} cd_task;

typedef struct {
    const svm_problem *prob;
    size_t dim, n;
    double bias;     /* the intercept feature's value, 0 without one */
    bool single;     /* float weights for the gradients (w_f, comp) rather than w */
    double *norm;    /* n: ‖x̃_r‖² */
    uint32_t *order; /* n: the visiting order */
    cd_task *tasks;
    size_t ntasks;
} dual_cd;

static int label_slot(int label)
{
    return label > 0;
}

static double task_margin(const dual_cd *cd, const cd_task *t, const float *x)
{
    double dot = cd->single ? dot_row_single(t->w_f, x, cd->dim) : dot_row(t->w, x, cd->dim);
    return dot + t->w[cd->dim] * cd->bias;
}

static void task_move(const dual_cd *cd, cd_task *t, double a, const float *x)
{
    if (cd->single)
        add_scaled_row_compensated((float)a, x, t->w_f, t->comp, cd->dim);
    else
        add_scaled_row(a, x, t->w, cd->dim);
    t->w[cd->dim] += a * cd->bias;
}

/* w = Σ y_i α_i x̃_i, in double, from α itself, for every task: rows in the outer loop, so
 * each is read once for all the tasks (each task's sum still runs over the rows in order). */
static void weights_from_alpha(const dual_cd *cd)
{
    for (size_t k = 0; k < cd->ntasks; k++)
        memset(cd->tasks[k].w, 0, (cd->dim + 1) * sizeof(double));
    for (size_t r = 0; r < cd->n; r++) {
        const float *x = row_features(cd->prob, r);
        for (size_t k = 0; k < cd->ntasks; k++) {
            cd_task *t = &cd->tasks[k];
            if (t->alpha[r] == 0)
                continue;
            double a = row_label_of(cd->prob, t->y, r) * t->alpha[r];
            add_scaled_row(a, x, t->w, cd->dim);
            t->w[cd->dim] += a * cd->bias;
        }
    }
}

/* The weights the gradients read, from the double ones. */
static void task_load_single_weights(const dual_cd *cd, cd_task *t)
{
    for (size_t j = 0; j < cd->dim; j++) {
        t->w_f[j] = (float)t->w[j];
        t->comp[j] = 0;
    }
}

/* ‖x̃_r‖² of every row; -1 on a non-finite feature. */
static int dual_cd_norms(dual_cd *cd, char **err)
{
    for (size_t r = 0; r < cd->n; r++) {
        double norm = squared_norm(row_features(cd->prob, r), cd->dim);
        if (!isfinite(norm))
            return report_failure(err, "svm: row %zu has a non-finite feature",
                                  problem_row(cd->prob, r));
        cd->norm[r] = norm + cd->bias * cd->bias;
        cd->order[r] = (uint32_t)r;
    }
    return 0;
}

/* A task's constants, its active set (its rows) and the warm start clipped into the box. */
static void task_setup(const dual_cd *cd, cd_task *t, svm_task *in, const svm_params *p)
{
    *t = (cd_task){
        .out = in,
        .y = in->y,
        .alpha = in->alpha,
        .active = xmalloc(cd->n),
        .w = xcalloc(cd->dim + 1, sizeof(double)),
        .w_f = cd->single ? xcalloc(cd->dim, sizeof(float)) : NULL,
        .comp = cd->single ? xcalloc(cd->dim, sizeof(float)) : NULL,
        .pg_max_old = INFINITY,
        .pg_min_old = -INFINITY,
    };
    for (int s = 0; s < 2; s++) {
        double c = cost_of(p, s ? 1 : -1);
        t->diag[s] = p->loss == SVM_SQUARED_HINGE ? 0.5 / c : 0.0;
        t->upper[s] = p->loss == SVM_SQUARED_HINGE ? INFINITY : c;
    }
    for (size_t r = 0; r < cd->n; r++) {
        t->active[r] = task_has_row(cd->prob, in, r);
        t->members += t->active[r];
        double a = t->active[r] ? t->alpha[r] : 0.0;
        double upper = t->upper[label_slot(row_label_of(cd->prob, t->y, r))];
        t->alpha[r] = a > 0 ? fmin(a, upper) : 0.0; /* NaN and negatives → 0 */
    }
    t->nactive = t->members;
}

/* liblinear's shuffle: a uniform swap partner for each position. */
static void shuffle_order(uint32_t *order, size_t n, rng_stream *rng)
{
    for (size_t i = 0; i + 1 < n; i++) {
        size_t j = i + (size_t)rng_randint(rng, 0, (int64_t)(n - i));
        uint32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

/* v clipped to [0, upper]; v is finite (a gradient over a positive curvature). */
static double clamp_to(double v, double upper)
{
    return v < 0 ? 0.0 : v > upper ? upper : v;
}

/* The new α_r after the exact line minimisation along coordinate r, clipped to [0, U_r].
 * A zero curvature (hinge, no intercept, an all-zero row) makes the dual linear in α_r:
 * it goes to whichever bound the gradient points at. */
static double coordinate_step(double alpha, double qd, double upper, double g)
{
    if (qd > 0)
        return clamp_to(alpha - g / qd, upper);
    return g < 0 ? upper : 0.0;
}

/* The projected gradient of a coordinate, or false when it should be shrunk: it sits at a
 * bound, its gradient pushes it further out, and by more than last iteration's extremes,
 * so it will most likely stay there. */
static bool projected_gradient(const cd_task *t, double alpha, double upper, double g,
                               double *pg)
{
    *pg = 0.0;
    if (alpha == 0) {
        if (g > t->pg_max_old)
            return false;
        if (g < 0)
            *pg = g;
    } else if (alpha == upper) {
        if (g < t->pg_min_old)
            return false;
        if (g > 0)
            *pg = g;
    } else {
        *pg = g;
    }
    return true;
}

/* One coordinate step of task t on row r (in its active set). */
static void task_visit(const dual_cd *cd, cd_task *t, size_t r, const float *x)
{
    int y = row_label_of(cd->prob, t->y, r), s = label_slot(y);
    double g = y * task_margin(cd, t, x) - 1.0 + t->alpha[r] * t->diag[s];
    double pg;
    if (!projected_gradient(t, t->alpha[r], t->upper[s], g, &pg)) {
        t->active[r] = 0;
        t->nactive--;
        return;
    }
    if (pg > t->pg_max) /* not fmax: libm's call costs more than the step itself on short rows */
        t->pg_max = pg;
    if (pg < t->pg_min)
        t->pg_min = pg;
    if (fabs(pg) > 1.0e-12) {
        double old = t->alpha[r];
        t->alpha[r] = coordinate_step(old, cd->norm[r] + t->diag[s], t->upper[s], g);
        task_move(cd, t, (t->alpha[r] - old) * y, x);
    }
}

/* liblinear's end of an outer iteration: stop, restore the active set, or tighten the
 * shrinking thresholds. */
static void task_end_iteration(const dual_cd *cd, cd_task *t, const svm_params *p)
{
    t->iter++;
    if (t->pg_max - t->pg_min <= p->eps) {
        if (t->nactive == t->members) {
            t->done = true;
            return;
        }
        /* converged on the active set: check once more on everything, no shrinking */
        for (size_t r = 0; r < cd->n; r++)
            t->active[r] = task_has_row(cd->prob, t->out, r);
        t->nactive = t->members;
        t->pg_max_old = INFINITY;
        t->pg_min_old = -INFINITY;
    } else {
        t->pg_max_old = t->pg_max > 0 ? t->pg_max : INFINITY;
        t->pg_min_old = t->pg_min < 0 ? t->pg_min : -INFINITY;
    }
    t->done = t->iter >= p->max_iter;
}

/* Algorithm 1 with shrinking for every task, one shared sweep per outer iteration. */
static void dual_cd_run(dual_cd *cd, const svm_params *p)
{
    rng_stream rng;
    rng_stream_init(&rng, (rng_key){.seed = p->seed, .purpose = RNG_PURPOSE_BENCHMARK});
    size_t *running = xmalloc(cd->ntasks * sizeof *running), nrunning = 0;
    for (size_t k = 0; k < cd->ntasks; k++)
        if (!cd->tasks[k].done)
            running[nrunning++] = k;
    while (nrunning > 0) {
        shuffle_order(cd->order, cd->n, &rng);
        for (size_t k = 0; k < nrunning; k++) {
            cd->tasks[running[k]].pg_max = -INFINITY;
            cd->tasks[running[k]].pg_min = INFINITY;
        }
        for (size_t s = 0; s < cd->n; s++) {
            size_t r = cd->order[s];
            const float *x = row_features(cd->prob, r);
            for (size_t k = 0; k < nrunning; k++) {
                cd_task *t = &cd->tasks[running[k]];
                if (t->active[r])
                    task_visit(cd, t, r, x);
            }
        }
        size_t still = 0;
        for (size_t k = 0; k < nrunning; k++) {
            task_end_iteration(cd, &cd->tasks[running[k]], p);
            if (!cd->tasks[running[k]].done)
                running[still++] = running[k];
        }
        nrunning = still;
    }
    free(running);
}

/* The model of each task: the primal point of its dual solution, exactly. */
static void tasks_finish(dual_cd *cd)
{
    if (cd->single)
        weights_from_alpha(cd);
    for (size_t k = 0; k < cd->ntasks; k++) {
        cd_task *t = &cd->tasks[k];
        t->out->model.w = t->w;
        t->out->model.iterations = t->iter;
        t->w = NULL;
    }
}

static void task_free(cd_task *t)
{
    free(t->active);
    free(t->w);
    free(t->w_f);
    free(t->comp);
}

static int fit_dense(const svm_problem *prob, const svm_params *p, svm_task *tasks, size_t ntasks,
                     char **err)
{
    if (prob->n > UINT32_MAX)
        return report_failure(err, "svm: %zu rows are more than the dense solver indexes",
                              prob->n);
    dual_cd cd = {
        .prob = prob,
        .dim = prob->dim,
        .n = prob->n,
        .bias = p->bias > 0 ? p->bias : 0.0,
        .single = p->eps >= SINGLE_PRECISION_MIN_EPS,
        .norm = xmalloc(prob->n * sizeof(double)),
        .order = xmalloc(prob->n * sizeof(uint32_t)),
        .tasks = xcalloc(ntasks, sizeof(cd_task)),
        .ntasks = ntasks,
    };
    int rc = dual_cd_norms(&cd, err);
    if (rc == 0) {
        for (size_t k = 0; k < ntasks; k++)
            task_setup(&cd, &cd.tasks[k], &tasks[k], p);
        weights_from_alpha(&cd);
        for (size_t k = 0; cd.single && k < ntasks; k++)
            task_load_single_weights(&cd, &cd.tasks[k]);
        dual_cd_run(&cd, p);
        tasks_finish(&cd);
    }
    for (size_t k = 0; k < ntasks; k++)
        task_free(&cd.tasks[k]);
    free(cd.tasks);
    free(cd.norm);
    free(cd.order);
    return rc;
}

/* ---- liblinear ------------------------------------------------------------------------- */

static void print_nothing(const char *s)
{
    (void)s;
}

static pthread_once_t liblinear_quiet_once = PTHREAD_ONCE_INIT;

static void silence_liblinear(void)
{
    set_print_string_function(print_nothing);
}

static int liblinear_solver_type(const svm_params *p)
{
    if (p->penalty == SVM_PENALTY_L1)
        return L1R_L2LOSS_SVC;
    if (!p->dual)
        return L2R_L2LOSS_SVC;
    return p->loss == SVM_HINGE ? L2R_L1LOSS_SVC_DUAL : L2R_L2LOSS_SVC_DUAL;
}

/* The rows as liblinear's sparse double rows: the nonzero features (1-based), the intercept
 * node (index dim + 1) when there is one, then the -1 terminator. One block for all rows. */
typedef struct {
    struct problem prob;
    struct feature_node *nodes;
} liblinear_rows;

static int liblinear_rows_build(liblinear_rows *lr, const svm_problem *prob, double bias,
                                char **err)
{
    size_t n = prob->n, dim = prob->dim, nonzeros = 0;
    for (size_t r = 0; r < n; r++) {
        const float *x = row_features(prob, r);
        for (size_t j = 0; j < dim; j++) {
            if (!isfinite(x[j]))
                return report_failure(err, "svm: row %zu has a non-finite feature",
                                      problem_row(prob, r));
            nonzeros += x[j] != 0;
        }
    }
    bool with_bias = bias > 0;
    lr->nodes = xmalloc((nonzeros + n * (with_bias ? 2 : 1)) * sizeof *lr->nodes);
    lr->prob = (struct problem){
        .l = (int)n,
        .n = (int)dim + (with_bias ? 1 : 0),
        .y = xmalloc(n * sizeof(double)),
        .x = xmalloc(n * sizeof(struct feature_node *)),
        .bias = with_bias ? bias : -1.0,
    };
    struct feature_node *node = lr->nodes;
    for (size_t r = 0; r < n; r++) {
        const float *x = row_features(prob, r);
        lr->prob.x[r] = node;
        lr->prob.y[r] = row_label_of(prob, prob->y, r);
        for (size_t j = 0; j < dim; j++)
            if (x[j] != 0)
                *node++ = (struct feature_node){.index = (int)j + 1, .value = x[j]};
        if (with_bias)
            *node++ = (struct feature_node){.index = (int)dim + 1, .value = bias};
        *node++ = (struct feature_node){.index = -1, .value = 0};
    }
    return 0;
}

static void liblinear_rows_free(liblinear_rows *lr)
{
    free(lr->nodes);
    free(lr->prob.y);
    free(lr->prob.x);
}

static int fit_liblinear(const svm_problem *prob, const svm_params *p, svm_model *out, char **err)
{
    if (prob->n > INT_MAX || prob->dim >= INT_MAX)
        return report_failure(err, "svm: %zu rows of %zu features are too many for liblinear",
                              prob->n, prob->dim);
    pthread_once(&liblinear_quiet_once, silence_liblinear);
    liblinear_rows lr = {0};
    if (liblinear_rows_build(&lr, prob, p->bias, err) != 0)
        return -1;
    int weight_label[2] = {+1, -1};
    double weight[2] = {p->weight_pos, p->weight_neg};
    struct parameter param = {
        .solver_type = liblinear_solver_type(p),
        .eps = p->eps,
        .C = p->C,
        .nr_weight = 2,
        .weight_label = weight_label,
        .weight = weight,
    };
    const char *refusal = check_parameter(&lr.prob, &param);
    if (refusal) {
        liblinear_rows_free(&lr);
        return report_failure(err, "svm: liblinear refuses the parameters: %s", refusal);
    }
    /* liblinear orders the coordinates with the C library's rand() */
    srand((unsigned)p->seed);
    struct model *model = train(&lr.prob, &param);
    liblinear_rows_free(&lr);
    /* liblinear's binary decision value is for its label[0], the first label it met */
    double sign = model->label[0] == -1 ? -1.0 : 1.0;
    out->w = xcalloc(prob->dim + 1, sizeof(double));
    size_t weights = prob->dim + (p->bias > 0 ? 1 : 0);
    for (size_t j = 0; j < weights; j++)
        out->w[j] = sign * model->w[j];
    out->iterations = -1; /* liblinear does not report them */
    free_and_destroy_model(&model);
    return 0;
}

/* ---- the API --------------------------------------------------------------------------- */

/* liblinear fits one problem at a time: each task on the rows it has, as a row view. */
static int fit_liblinear_tasks(const svm_problem *prob, const svm_params *p, svm_task *tasks,
                               size_t ntasks, char **err)
{
    uint32_t *rows = xmalloc(prob->n * sizeof *rows);
    int rc = 0;
    for (size_t k = 0; k < ntasks && rc == 0; k++) {
        svm_problem view = *prob;
        view.y = tasks[k].y;
        view.rows = rows;
        view.n = 0;
        for (size_t r = 0; r < prob->n; r++)
            if (task_has_row(prob, &tasks[k], r))
                rows[view.n++] = (uint32_t)problem_row(prob, r);
        rc = fit_liblinear(&view, p, &tasks[k].model, err);
    }
    free(rows);
    return rc;
}

int svm_fit_tasks(const svm_problem *prob, const svm_params *p, svm_task *tasks, size_t ntasks,
                  char **err)
{
    for (size_t k = 0; k < ntasks; k++)
        tasks[k].model = (svm_model){.dim = prob->dim, .bias = p->bias > 0 ? p->bias : 0.0};
    if (check_params(p, err) != 0 || check_rows(prob, err) != 0)
        return -1;
    for (size_t k = 0; k < ntasks; k++) {
        char *why = NULL;
        if (check_task(prob, &tasks[k], &why) != 0) {
            int rc = ntasks == 1 ? report_failure(err, "%s", why)
                                 : report_failure(err, "task %zu: %s", k, why);
            free(why);
            return rc;
        }
    }
    /* the dense solver runs the dual of the l2 problems; the rest is liblinear's */
    bool dense = p->solver == SVM_SOLVER_DENSE && p->dual && p->penalty == SVM_PENALTY_L2;
    double **scratch = xcalloc(ntasks + 1, sizeof *scratch);
    for (size_t k = 0; k < ntasks; k++)
        if (dense && !tasks[k].alpha)
            tasks[k].alpha = scratch[k] = xcalloc(prob->n, sizeof(double));
    int rc = dense ? fit_dense(prob, p, tasks, ntasks, err)
                   : fit_liblinear_tasks(prob, p, tasks, ntasks, err);
    for (size_t k = 0; k < ntasks; k++) {
        if (scratch[k]) {
            tasks[k].alpha = NULL;
            free(scratch[k]);
        }
        if (rc != 0)
            svm_model_free(&tasks[k].model);
    }
    free(scratch);
    return rc;
}

int svm_fit(const svm_problem *prob, const svm_params *p, double *alpha, svm_model *out, char **err)
{
    svm_task task = {.y = prob->y, .alpha = alpha};
    int rc = svm_fit_tasks(prob, p, &task, 1, err);
    *out = rc == 0 ? task.model : (svm_model){0};
    return rc;
}

void svm_model_free(svm_model *m)
{
    free(m->w);
    m->w = NULL;
}

double svm_decision(const svm_model *m, const float *x)
{
    return dot_row(m->w, x, m->dim) + m->w[m->dim] * m->bias;
}
