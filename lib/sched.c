/*
 * sched.c — see sched.h. Each kind has a validate_*, (where needed) a prepare_* and a
 * value_* function; the generic entry points dispatch on the kind. Formulas follow the
 * Python sources operation by operation (same order of floating-point operations, Python's
 * bisect_right and float modulo, numpy's arange), so values agree to the last bit on the
 * same libm.
 */
#include "sched.h"

#include "log.h"
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ClassyVision: abs(sum(lengths) - 1.0) < 1e-3. */
#define COMPOSITE_LENGTH_TOLERANCE 1e-3
/* Guards against tables Python would build but that are surely a config mistake. */
#define MAX_RESTARTS 10000000.0
#define MAX_DECAYS 1000000

/* ---- names ------------------------------------------------------------------------------ */

static const char *const KIND_NAMES[SCHED_KIND_COUNT] = {
    [SCHED_CONSTANT] = "constant",
    [SCHED_LINEAR] = "linear",
    [SCHED_COSINE] = "cosine",
    [SCHED_MULTISTEP] = "multistep",
    [SCHED_STEP] = "step",
    [SCHED_STEP_WITH_FIXED_GAMMA] = "step_with_fixed_gamma",
    [SCHED_COMPOSITE] = "composite",
    [SCHED_COSINE_WARM_RESTART] = "cosine_warm_restart",
    [SCHED_INVERSE_SQRT] = "inverse_sqrt",
};
static const char *const UPDATE_NAMES[SCHED_UPDATE_COUNT] = {"step", "epoch"};
static const char *const SCALING_NAMES[SCHED_SCALING_COUNT] = {"rescaled", "fixed"};
static const char *const WAVE_NAMES[SCHED_WAVE_COUNT] = {"half", "full"};

static const char *name_of(const char *const *names, int count, int v)
{
    return v >= 0 && v < count ? names[v] : "?";
}

static int index_of(const char *const *names, int count, const char *name)
{
    for (int i = 0; name && i < count; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

const char *sched_kind_name(sched_kind kind)
{
    return name_of(KIND_NAMES, SCHED_KIND_COUNT, (int)kind);
}

int sched_kind_from_name(const char *name, sched_kind *out)
{
    int i = index_of(KIND_NAMES, SCHED_KIND_COUNT, name);
    if (i < 0)
        return -1;
    *out = (sched_kind)i;
    return 0;
}

const char *sched_update_interval_name(sched_update_interval u)
{
    return name_of(UPDATE_NAMES, SCHED_UPDATE_COUNT, (int)u);
}

int sched_update_interval_from_name(const char *name, sched_update_interval *out)
{
    int i = index_of(UPDATE_NAMES, SCHED_UPDATE_COUNT, name);
    if (i < 0)
        return -1;
    *out = (sched_update_interval)i;
    return 0;
}

const char *sched_interval_scaling_name(sched_interval_scaling v)
{
    return name_of(SCALING_NAMES, SCHED_SCALING_COUNT, (int)v);
}

int sched_interval_scaling_from_name(const char *name, sched_interval_scaling *out)
{
    int i = index_of(SCALING_NAMES, SCHED_SCALING_COUNT, name);
    if (i < 0)
        return -1;
    *out = (sched_interval_scaling)i;
    return 0;
}

const char *sched_wave_type_name(sched_wave_type w)
{
    return name_of(WAVE_NAMES, SCHED_WAVE_COUNT, (int)w);
}

int sched_wave_type_from_name(const char *name, sched_wave_type *out)
{
    int i = index_of(WAVE_NAMES, SCHED_WAVE_COUNT, name);
    if (i < 0)
        return -1;
    *out = (sched_wave_type)i;
    return 0;
}

sched_update_interval sched_default_update_interval(sched_kind kind)
{
    return kind == SCHED_MULTISTEP ? SCHED_UPDATE_EPOCH : SCHED_UPDATE_STEP;
}

/* ---- building --------------------------------------------------------------------------- */

void sched_init(sched *s, sched_kind kind)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->update_interval = sched_default_update_interval(kind);
    s->lr_multiplier = 1.0;
    s->wave_type = SCHED_WAVE_HALF;
}

static void *copy_array(const void *src, size_t n, size_t elem_size)
{
    void *dst = xmalloc(n * elem_size);
    if (n)
        memcpy(dst, src, n * elem_size);
    return dst;
}

void sched_set_values(sched *s, const double *values, size_t n)
{
    free(s->values);
    s->values = copy_array(values, n, sizeof *values);
    s->n_values = n;
}

void sched_set_milestones(sched *s, const int *milestones, size_t n)
{
    free(s->milestones);
    s->milestones = copy_array(milestones, n, sizeof *milestones);
    s->n_milestones = n;
    s->has_milestones = true;
}

void sched_set_lengths(sched *s, const double *lengths, size_t n)
{
    free(s->lengths);
    s->lengths = copy_array(lengths, n, sizeof *lengths);
    s->n_lengths = n;
}

void sched_set_interval_scaling(sched *s, const sched_interval_scaling *v, size_t n)
{
    free(s->interval_scaling);
    s->interval_scaling = copy_array(v, n, sizeof *v);
    s->n_interval_scaling = n;
    s->has_interval_scaling = true;
}

static void free_children(sched *s)
{
    for (size_t i = 0; i < s->n_children; i++)
        sched_free(&s->children[i]);
    free(s->children);
    s->children = NULL;
    s->n_children = 0;
}

sched *sched_alloc_children(sched *s, size_t n)
{
    free_children(s);
    s->children = xcalloc(n ? n : 1, sizeof *s->children);
    s->n_children = n;
    return s->children;
}

void sched_free(sched *s)
{
    if (!s)
        return;
    free_children(s);
    free(s->values);
    free(s->milestones);
    free(s->lengths);
    free(s->interval_scaling);
    free(s->restart_steps);
    free(s->restart_values);
    memset(s, 0, sizeof *s);
}

/* ---- Python semantics ------------------------------------------------------------------ */

/* bisect.bisect_right: the index after the last element <= x. */
static size_t bisect_right(const double *a, size_t n, double x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static size_t bisect_right_int(const int *a, size_t n, double x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x < (double)a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Python's float %: the result takes the sign of the divisor. */
static double python_mod(double x, double y)
{
    double mod = fmod(x, y);
    if (mod != 0.0) {
        if ((y < 0) != (mod < 0))
            mod += y;
    } else {
        mod = copysign(0.0, y);
    }
    return mod;
}

/* len(numpy.arange(start, stop, step)) for floats: ceil((stop - start) / step), >= 0. */
static double arange_length(double start, double stop, double step)
{
    double len = ceil((stop - start) / step);
    return len > 0 ? len : 0; /* NaN -> 0 */
}

/* numpy.arange's fill: a[0] = start, a[1] = start + step, a[i] = start + i*(a[1] - a[0]). */
static void arange_fill(double *a, size_t n, double start, double step)
{
    if (n == 0)
        return;
    a[0] = start;
    if (n == 1)
        return;
    a[1] = start + step;
    double delta = a[1] - a[0];
    for (size_t i = 2; i < n; i++)
        a[i] = start + (double)i * delta;
}

/* ---- validation -------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len;
    char path[256]; /* "schedulers[1].schedulers[0]" or "" at the top */
} errctx;

static int fail(errctx *e, const sched *s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(errctx *e, const sched *s, const char *fmt, ...)
{
    if (!e->buf || e->len == 0)
        return -1;
    int n;
    if (e->path[0])
        n = snprintf(e->buf, e->len, "%s (%s): ", e->path, sched_kind_name(s->kind));
    else
        n = snprintf(e->buf, e->len, "%s: ", sched_kind_name(s->kind));
    if (n >= 0 && (size_t)n < e->len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->buf + n, e->len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Milestones as MultiStepParamScheduler uses them: given, or equally spaced
   ceil(num_epochs / len(values)) * (i+1). Caller frees. */
static long long *effective_milestones(const sched *s, int num_epochs)
{
    size_t n = s->has_milestones ? s->n_milestones : (s->n_values ? s->n_values - 1 : 0);
    long long *m = xmalloc((n ? n : 1) * sizeof *m);
    long long step_width = (long long)ceil((double)num_epochs / (double)s->n_values);
    for (size_t i = 0; i < n; i++)
        m[i] = s->has_milestones ? s->milestones[i] : step_width * (long long)(i + 1);
    return m;
}

static int validate_multistep(const sched *s, int num_epochs, errctx *e)
{
    if (s->n_values == 0)
        return fail(e, s, "needs a non-empty list of values");
    if (num_epochs <= 0)
        return fail(e, s, "num_epochs must be greater than 0 (got %d)", num_epochs);
    if ((size_t)num_epochs < s->n_values)
        return fail(e, s, "num_epochs (%d) must be at least the number of values (%zu)",
                    num_epochs, s->n_values);
    if (s->has_milestones && s->n_milestones != s->n_values - 1)
        return fail(e, s, "needs %zu milestones (one fewer than values), got %zu",
                    s->n_values - 1, s->n_milestones);
    long long *milestones = effective_milestones(s, num_epochs);
    int rc = 0;
    long long previous = 0;
    for (size_t i = 0; rc == 0 && i + 1 < s->n_values; i++) {
        if (milestones[i] >= num_epochs)
            rc = fail(e, s, "milestone %lld must be smaller than num_epochs %d%s", milestones[i],
                      num_epochs, s->has_milestones ? "" : " (equal spacing, no milestones given)");
        else if (milestones[i] <= previous)
            rc = fail(e, s, "milestones must be positive and strictly increasing: %lld after %lld",
                      milestones[i], previous);
        previous = milestones[i];
    }
    free(milestones);
    return rc;
}

static int validate_step(const sched *s, int num_epochs, errctx *e)
{
    if (s->n_values == 0)
        return fail(e, s, "needs a non-empty list of values");
    if (num_epochs <= 0)
        return fail(e, s, "num_epochs must be greater than 0 (got %d)", num_epochs);
    return 0;
}

static int validate_step_with_fixed_gamma(const sched *s, int num_epochs, errctx *e)
{
    if (!(s->base_value > 0))
        return fail(e, s, "base_value must be a positive number (got %g)", s->base_value);
    if (!(s->gamma > 0))
        return fail(e, s, "gamma must be a positive number (got %g)", s->gamma);
    if (s->num_decays <= 0)
        return fail(e, s, "num_decays must be a positive integer (got %d)", s->num_decays);
    if (s->num_decays > MAX_DECAYS)
        return fail(e, s, "num_decays %d is unreasonably large (at most %d)", s->num_decays,
                    MAX_DECAYS);
    if (num_epochs <= 0)
        return fail(e, s, "num_epochs must be a positive integer (got %d)", num_epochs);
    return 0;
}

static double restart_step_spacing(const sched *s)
{
    return s->wave_type == SCHED_WAVE_FULL ? 2 * s->restart_interval_length
                                           : s->restart_interval_length;
}

static int validate_cosine_warm_restart(const sched *s, errctx *e)
{
    if ((unsigned)s->wave_type >= SCHED_WAVE_COUNT)
        return fail(e, s, "wave_type must be half or full");
    double L = s->restart_interval_length;
    if (!(L > 0) || !isfinite(L))
        return fail(e, s, "restart_interval_length must be a positive fraction of training (got %g)", L);
    if (arange_length(L, 1.0, restart_step_spacing(s)) > MAX_RESTARTS)
        return fail(e, s, "restart_interval_length %g gives more than %.0f restarts", L, MAX_RESTARTS);
    return 0;
}

static int validate_node(const sched *s, int num_epochs, errctx *e);

static double sequential_sum(const double *a, size_t n)
{
    double sum = 0.0; /* Python's sum() starts from 0 and adds left to right */
    for (size_t i = 0; i < n; i++)
        sum += a[i];
    return sum;
}

static int validate_composite(const sched *s, int num_epochs, errctx *e)
{
    if (s->n_children != s->n_lengths)
        return fail(e, s, "schedulers and lengths must be the same length (%zu vs %zu)",
                    s->n_children, s->n_lengths);
    if (s->n_children == 0)
        return fail(e, s, "there must be at least one scheduler");
    double sum = sequential_sum(s->lengths, s->n_lengths);
    if (!(fabs(sum - 1.0) < COMPOSITE_LENGTH_TOLERANCE))
        return fail(e, s, "the lengths must sum to 1 (got %.17g)", sum);
    for (size_t i = 0; i < s->n_lengths; i++)
        if (s->lengths[i] < 0) /* not checked by ClassyVision; a negative share is nonsense */
            return fail(e, s, "lengths[%zu] is negative (%g)", i, s->lengths[i]);
    if (s->has_interval_scaling && s->n_interval_scaling != s->n_children)
        return fail(e, s,
                    "schedulers and interval_scaling must be the same length (%zu vs %zu); "
                    "VISSL's defaults set interval_scaling: [], so list one per scheduler",
                    s->n_children, s->n_interval_scaling);
    for (size_t i = 0; s->has_interval_scaling && i < s->n_interval_scaling; i++)
        if ((unsigned)s->interval_scaling[i] >= SCHED_SCALING_COUNT)
            return fail(e, s, "interval_scaling[%zu] must be fixed or rescaled", i);

    size_t path_len = strlen(e->path);
    for (size_t i = 0; i < s->n_children; i++) {
        const sched *child = &s->children[i];
        snprintf(e->path + path_len, sizeof e->path - path_len, "%sschedulers[%zu]",
                 path_len ? "." : "", i);
        int child_epochs = num_epochs > 0 ? num_epochs : child->num_epochs;
        if (validate_node(child, child_epochs, e) != 0)
            return -1;
    }
    e->path[path_len] = '\0';
    return 0;
}

/* num_epochs: the value the scheduler will see (an enclosing composite's, or its own). */
static int validate_node(const sched *s, int num_epochs, errctx *e)
{
    if ((unsigned)s->kind >= SCHED_KIND_COUNT)
        return fail(e, s, "unknown scheduler kind %d", (int)s->kind);
    if ((unsigned)s->update_interval >= SCHED_UPDATE_COUNT)
        return fail(e, s, "update_interval must be step or epoch");
    switch (s->kind) {
    case SCHED_MULTISTEP:
        return validate_multistep(s, num_epochs, e);
    case SCHED_STEP:
        return validate_step(s, num_epochs, e);
    case SCHED_STEP_WITH_FIXED_GAMMA:
        return validate_step_with_fixed_gamma(s, num_epochs, e);
    case SCHED_COMPOSITE:
        return validate_composite(s, num_epochs, e);
    case SCHED_COSINE_WARM_RESTART:
        return validate_cosine_warm_restart(s, e);
    case SCHED_CONSTANT:
    case SCHED_LINEAR:
    case SCHED_COSINE:
    case SCHED_INVERSE_SQRT:
    case SCHED_KIND_COUNT:
        break;
    }
    return 0;
}

int sched_validate(const sched *s, char *err, size_t errlen)
{
    errctx e = {.buf = err, .len = errlen};
    if (err && errlen)
        err[0] = '\0';
    return validate_node(s, s->num_epochs, &e);
}

/* ---- preparation (after validation, cannot fail) ------------------------------------------ */

static void prepare_multistep(sched *s)
{
    if (s->has_milestones)
        return;
    long long *m = effective_milestones(s, s->num_epochs);
    size_t n = s->n_values - 1;
    int *milestones = xmalloc((n ? n : 1) * sizeof *milestones);
    for (size_t i = 0; i < n; i++)
        milestones[i] = (int)m[i]; /* validated: < num_epochs */
    free(m);
    free(s->milestones);
    s->milestones = milestones;
    s->n_milestones = n;
    s->has_milestones = true;
}

static void prepare_step_with_fixed_gamma(sched *s)
{
    /* values = [base]; then values.append(values[-1] * gamma), num_decays times. */
    size_t n = (size_t)s->num_decays + 1;
    double *values = xmalloc(n * sizeof *values);
    values[0] = s->base_value;
    for (size_t i = 1; i < n; i++)
        values[i] = values[i - 1] * s->gamma;
    free(s->values);
    s->values = values;
    s->n_values = n;
}

static double half_cosine(double start, double end, double where)
{
    return end + 0.5 * (start - end) * (1 + cos(M_PI * where));
}

static void prepare_cosine_warm_restart(sched *s)
{
    double L = s->restart_interval_length;
    size_t n_arange = (size_t)arange_length(L, 1.0, restart_step_spacing(s));
    size_t n = n_arange + 1;
    double *steps = xmalloc(n * sizeof *steps);
    double *values = xmalloc(n * sizeof *values);
    steps[0] = 0.0;
    arange_fill(steps + 1, n_arange, L, restart_step_spacing(s));
    for (size_t k = 0; k < n; k++) {
        if (!s->is_adaptive)
            values[k] = s->start_value * pow(s->lr_multiplier, (double)k);
        else if (s->wave_type == SCHED_WAVE_HALF)
            values[k] = half_cosine(s->start_value, s->end_value, steps[k]);
        else
            values[k] = half_cosine(s->start_value, s->end_value, L + steps[k]);
    }
    free(s->restart_steps);
    free(s->restart_values);
    s->restart_steps = steps;
    s->restart_values = values;
    s->n_restarts = n;
}

static void prepare_composite(sched *s)
{
    /* ClassyVision: if sum(lengths) != 1.0: lengths[-1] = 1.0 - sum(lengths[:-1]). */
    if (sequential_sum(s->lengths, s->n_lengths) != 1.0)
        s->lengths[s->n_lengths - 1] = 1.0 - sequential_sum(s->lengths, s->n_lengths - 1);
    if (!s->has_interval_scaling) {
        free(s->interval_scaling);
        s->interval_scaling = xcalloc(s->n_children, sizeof *s->interval_scaling);
        for (size_t i = 0; i < s->n_children; i++)
            s->interval_scaling[i] = SCHED_RESCALED;
        s->n_interval_scaling = s->n_children;
        s->has_interval_scaling = true;
    }
}

static void prepare_node(sched *s)
{
    switch (s->kind) {
    case SCHED_MULTISTEP:
        prepare_multistep(s);
        break;
    case SCHED_STEP_WITH_FIXED_GAMMA:
        prepare_step_with_fixed_gamma(s);
        break;
    case SCHED_COSINE_WARM_RESTART:
        prepare_cosine_warm_restart(s);
        break;
    case SCHED_INVERSE_SQRT:
        s->decay_factor = s->warmup_interval_length > 0
                              ? s->start_value * sqrt(s->warmup_interval_length)
                              : s->start_value;
        break;
    case SCHED_COMPOSITE:
        prepare_composite(s);
        for (size_t i = 0; i < s->n_children; i++) {
            if (s->num_epochs > 0) /* ClassyVision propagates num_epochs into every child */
                s->children[i].num_epochs = s->num_epochs;
            prepare_node(&s->children[i]);
        }
        break;
    case SCHED_CONSTANT:
    case SCHED_LINEAR:
    case SCHED_COSINE:
    case SCHED_STEP:
    case SCHED_KIND_COUNT:
        break;
    }
    s->prepared = true;
}

int sched_prepare(sched *s, char *err, size_t errlen)
{
    if (sched_validate(s, err, errlen) != 0)
        return -1;
    prepare_node(s);
    return 0;
}

/* ---- evaluation -------------------------------------------------------------------------- */

/* values[int((where + eps) * n)], clamped to the list (see sched.h). */
static double value_step(const sched *s, double where)
{
    double index = trunc((where + SCHED_WHERE_EPSILON) * (double)s->n_values);
    if (!(index >= 0))
        index = 0;
    if (index > (double)(s->n_values - 1))
        index = (double)(s->n_values - 1);
    return s->values[(size_t)index];
}

static double value_multistep(const sched *s, double where)
{
    double epoch = trunc((where + SCHED_WHERE_EPSILON) * (double)s->num_epochs);
    return s->values[bisect_right_int(s->milestones, s->n_milestones, epoch)];
}

static double value_composite(const sched *s, double where)
{
    /* The first child whose cumulative end reaches where + eps, else the last. The running
       total is accumulated exactly as ClassyVision does, since it also gives the start. */
    size_t i = 0;
    double running_total = s->lengths[0];
    while (where + SCHED_WHERE_EPSILON > running_total && i < s->n_children - 1) {
        i++;
        running_total += s->lengths[i];
    }
    double child_where = where;
    if (s->interval_scaling[i] == SCHED_RESCALED) {
        double child_start = running_total - s->lengths[i];
        child_where = (where - child_start) / s->lengths[i];
    }
    return sched_value(&s->children[i], child_where);
}

static double value_cosine_warm_restart(const sched *s, double where)
{
    size_t after = bisect_right(s->restart_steps, s->n_restarts, where);
    size_t restart = after > 0 ? after - 1 : 0;
    double L = s->restart_interval_length;
    double w = s->wave_type == SCHED_WAVE_HALF ? python_mod(where, L) / L : where / L;
    return half_cosine(s->restart_values[restart], s->end_value, w);
}

static double value_inverse_sqrt(const sched *s, double where)
{
    return where > 0 ? s->decay_factor * pow(where, -0.5) : s->decay_factor;
}

double sched_value(const sched *s, double where)
{
    if (!s->prepared)
        die(EXIT_RUNTIME, "sched_value: %s scheduler used before sched_prepare",
            sched_kind_name(s->kind));
    switch (s->kind) {
    case SCHED_CONSTANT:
        return s->value;
    case SCHED_LINEAR:
        return s->end_value * where + s->start_value * (1 - where);
    case SCHED_COSINE:
        return half_cosine(s->start_value, s->end_value, where);
    case SCHED_MULTISTEP:
        return value_multistep(s, where);
    case SCHED_STEP:
    case SCHED_STEP_WITH_FIXED_GAMMA:
        return value_step(s, where);
    case SCHED_COMPOSITE:
        return value_composite(s, where);
    case SCHED_COSINE_WARM_RESTART:
        return value_cosine_warm_restart(s, where);
    case SCHED_INVERSE_SQRT:
        return value_inverse_sqrt(s, where);
    case SCHED_KIND_COUNT:
        break;
    }
    die(EXIT_RUNTIME, "sched_value: unknown scheduler kind %d", (int)s->kind);
}
