/*
 * sched.h — VISSL / ClassyVision parameter schedulers (learning rate, weight decay, ...)
 * as plain C, with no knowledge of the config system.
 *
 * A scheduler is a function f(where) of training progress where in [0,1). The struct holds
 * the kind and its parameters exactly as a config would give them; the life cycle is
 *   sched_init(&s, kind)   zero + per-kind defaults
 *   fill in fields / sched_set_* / sched_alloc_children
 *   sched_prepare(&s, err, len)   ClassyVision's constructor asserts (as an error return),
 *                                 then its derived state: default milestones, the composite
 *                                 length fix-up, num_epochs pushed into composite children,
 *                                 restart tables, step_with_fixed_gamma's value list
 *   sched_value(&s, where)        the formulas of ClassyVision 0.5 / fvcore and VISSL 0.1.5
 *   sched_free(&s)
 * When to evaluate (every step or at epoch boundaries) is the trainer's business; the
 * update_interval field only records the choice.
 *
 * Two deliberate differences from Python, both outside where in [0,1):
 *   - constant raises in ClassyVision for where >= 1; here it returns its value;
 *   - step (and step_with_fixed_gamma) index values[int((where+1e-6)*n)], which raises
 *     IndexError in Python for where >= 1 - 1e-6 (reachable with > 10^6 updates) and wraps
 *     around for where < -1e-6; here the index is clamped to the list.
 */
#ifndef SELFSUP_SCHED_H
#define SELFSUP_SCHED_H

#include <stdbool.h>
#include <stddef.h>

/* ClassyVision's ClassyParamScheduler.WHERE_EPSILON. */
#define SCHED_WHERE_EPSILON 1e-6

typedef enum {
    SCHED_CONSTANT,
    SCHED_LINEAR,
    SCHED_COSINE,
    SCHED_MULTISTEP,
    SCHED_STEP,
    SCHED_STEP_WITH_FIXED_GAMMA,
    SCHED_COMPOSITE,
    SCHED_COSINE_WARM_RESTART,
    SCHED_INVERSE_SQRT,
    SCHED_KIND_COUNT
} sched_kind;

typedef enum { SCHED_UPDATE_STEP, SCHED_UPDATE_EPOCH, SCHED_UPDATE_COUNT } sched_update_interval;
typedef enum { SCHED_RESCALED, SCHED_FIXED, SCHED_SCALING_COUNT } sched_interval_scaling;
typedef enum { SCHED_WAVE_HALF, SCHED_WAVE_FULL, SCHED_WAVE_COUNT } sched_wave_type;

typedef struct sched sched;
struct sched {
    sched_kind kind;
    sched_update_interval update_interval;
    int num_epochs; /* OPTIMIZER.num_epochs; 0 = not given. A composite with num_epochs > 0
                       overwrites its children's, as ClassyVision does. */

    /* constant */
    double value;
    /* linear, cosine, cosine_warm_restart; inverse_sqrt uses start_value only */
    double start_value, end_value;

    /* multistep, step (step_with_fixed_gamma: filled in by sched_prepare) */
    double *values;
    size_t n_values;
    /* multistep; has_milestones false = key absent = equal spacing */
    int *milestones;
    size_t n_milestones;
    bool has_milestones;

    /* step_with_fixed_gamma */
    double base_value, gamma;
    int num_decays;

    /* composite: children owned here, as one array */
    sched *children;
    size_t n_children;
    double *lengths;
    size_t n_lengths;
    sched_interval_scaling *interval_scaling; /* has_interval_scaling false = all rescaled */
    size_t n_interval_scaling;
    bool has_interval_scaling;

    /* cosine_warm_restart */
    double restart_interval_length;
    sched_wave_type wave_type;
    double lr_multiplier; /* default 1.0 */
    bool is_adaptive;

    /* inverse_sqrt */
    double warmup_interval_length;

    /* derived by sched_prepare */
    bool prepared;
    double *restart_steps;  /* cosine_warm_restart: [0] + numpy.arange(...) */
    double *restart_values; /* cosine_warm_restart: max value after each restart */
    size_t n_restarts;
    double decay_factor; /* inverse_sqrt */
};

/* ---- names (config strings) ---------------------------------------------------------- */
const char *sched_kind_name(sched_kind kind); /* "multistep", ...; "?" when out of range */
int sched_kind_from_name(const char *name, sched_kind *out); /* 0, or -1 if unknown */
const char *sched_update_interval_name(sched_update_interval u);
int sched_update_interval_from_name(const char *name, sched_update_interval *out);
const char *sched_interval_scaling_name(sched_interval_scaling v);
int sched_interval_scaling_from_name(const char *name, sched_interval_scaling *out);
const char *sched_wave_type_name(sched_wave_type w);
int sched_wave_type_from_name(const char *name, sched_wave_type *out);
/* ClassyVision's default when the config has no update_interval (multistep: epoch, else step). */
sched_update_interval sched_default_update_interval(sched_kind kind);

/* ---- building -------------------------------------------------------------------------- */
/* Zero `s` and set the defaults: update_interval, lr_multiplier 1.0, wave_type half. */
void sched_init(sched *s, sched_kind kind);
/* Copy arrays in, replacing what was there. */
void sched_set_values(sched *s, const double *values, size_t n);
void sched_set_milestones(sched *s, const int *milestones, size_t n); /* sets has_milestones */
void sched_set_lengths(sched *s, const double *lengths, size_t n);
void sched_set_interval_scaling(sched *s, const sched_interval_scaling *v, size_t n);
/* Replace the children with n zeroed ones (sched_init each) and return the array. */
sched *sched_alloc_children(sched *s, size_t n);

/* ---- checking, preparing, evaluating --------------------------------------------------- */
/* ClassyVision / VISSL constructor assertions. 0 when valid; else -1 and a message naming
   the scheduler (e.g. "schedulers[1] (multistep): ...") in err. Pure: changes nothing. */
int sched_validate(const sched *s, char *err, size_t errlen);
/* sched_validate, then derive what the constructors derive. Idempotent. */
int sched_prepare(sched *s, char *err, size_t errlen);
/* f(where). `s` must be prepared. */
double sched_value(const sched *s, double where);
/* Free everything `s` owns (children too) and zero it; `s` itself is not freed. */
void sched_free(sched *s);

#endif
