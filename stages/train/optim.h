/*
 * optim.h — VISSL's optimizer over a model's parameters: its parameter groups, SGD / Adam /
 * AdamW, LARC, and the state a checkpoint keeps (vissl/optimizers/, vissl/utils/optimizer_utils.py).
 *
 * Groups (VISSL 0.1.5's get_optimizer_param_groups), from the entries' names:
 *   trunk regularised    lr,      OPTIMIZER.weight_decay
 *   trunk unregularised  lr,      0
 *   head regularised     lr_head, head_optimizer_params.weight_decay if use_different_wd,
 *                                 else OPTIMIZER.weight_decay
 *   head unregularised   lr_head, 0
 *   remaining            lr,      OPTIMIZER.weight_decay (parameters of modules VISSL's rules
 *                                 do not name: LayerNorm2d, which is a GroupNorm)
 * A parameter belongs to the head when its module's name contains "head". Conv and Linear
 * weights are regularised; a head bias only with regularize_bias, a trunk bias always (VISSL
 * 0.1.5's quirk: both branches append it to the regularised list); BatchNorm weights with
 * regularize_bn, BatchNorm biases with regularize_bn and regularize_bias. A module is a
 * BatchNorm when it has a running_mean, a Conv/Linear when its weight has 2 or more
 * dimensions. MODEL.NON_TRAINABLE_PARAMS (exact names) and frozen parts are not updated;
 * MODEL.TEMP_FROZEN_PARAMS_ITER_MAP holds parameters out of the first steps.
 *
 * The update is torch.optim's (nn/cpu/optim.c), every tensor's in one backend call over the
 * model's flat buffer (eng_sgd_step_many, eng_adam_step_many); the state (momentum buffers, or Adam's two
 * moments) lives in flat buffers laid out like the parameters. LARC (NVIDIA Apex, SGD only)
 * rescales each tensor's gradient by trust·‖p‖ / (‖g‖ + ‖p‖·wd + eps), capped at 1 after
 * dividing by the group's LR in clip mode, applies the weight decay itself, and leaves a
 * tensor with ‖p‖ = 0 or ‖g‖ = 0 alone (no decay either) that step.
 */
#ifndef SELFSUP_TRAIN_OPTIM_H
#define SELFSUP_TRAIN_OPTIM_H

#include "config.h"
#include "nn.h"
#include "params.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW } optim_name;

typedef enum {
    OPTIM_TRUNK_REG,
    OPTIM_TRUNK_UNREG,
    OPTIM_HEAD_REG,
    OPTIM_HEAD_UNREG,
    OPTIM_REMAINING,
    OPTIM_NGROUPS,
    OPTIM_NOT_UPDATED = -1, /* a buffer, a frozen or a non-trainable parameter */
} optim_group;

#define OPTIM_MAX_NON_TRAINABLE 64
#define OPTIM_MAX_TEMP_FROZEN 64

typedef struct {
    optim_name name;
    double weight_decay, momentum;
    bool nesterov;
    double beta1, beta2, eps; /* Adam, AdamW (torch's eps 1e-8) */
    bool use_larc, larc_clip;
    double larc_eps, larc_trust;
    bool regularize_bn, regularize_bias;
    double head_weight_decay; /* already resolved: use_different_wd ? its value : weight_decay */
    const char *non_trainable[OPTIM_MAX_NON_TRAINABLE];
    int n_non_trainable;
    /* MODEL.TEMP_FROZEN_PARAMS_ITER_MAP: parameter `name` sits out every step whose iteration
     * (1 for the first step) is below `until` (VISSL's FreezeParametersHook sets its grad to
     * None: no update, no momentum, no decay, and Adam's step count waits too). */
    struct {
        const char *name;
        int64_t until;
    } temp_frozen[OPTIM_MAX_TEMP_FROZEN];
    int n_temp_frozen;
} optim_options;

/* VISSL's defaults: sgd, weight decay 1e-4, momentum 0.9, no LARC (clip off, eps 1e-8, trust
 * 1e-3), regularize_bn off, regularize_bias on, betas (0.9, 0.999). */
optim_options optim_defaults(void);

/* OPTIMIZER and MODEL.NON_TRAINABLE_PARAMS of a composed config's `config` map. Refuses (false,
 * "file:line: key: why") what this trainer does not run: other optimizers, LARC around
 * anything but SGD. Strings point into the config. */
bool optim_options_from_config(const cfg_node *config, optim_options *out, cfg_err *err);

typedef struct optim optim;

/* An optimizer over `entries` (a model's, whose parameters all live in the allocation
 * `params` views). trainable[i] false (or NULL for all true) leaves entry i alone. NULL with
 * *err when the entries do not share one parameter allocation, or a TEMP_FROZEN_PARAMS_ITER_MAP
 * name is not one of them. */
optim *optim_new(eng_backend *be, const eng_entry *entries, int n, const eng_tensor *params, const bool *trainable,
                 const optim_options *o, char **err);
void optim_free(eng_backend *be, optim *opt);

/* The group of entry i. */
optim_group optim_group_of(const optim *opt, int i);
/* One update from the gradients in the entries' grad tensors, with the scheduled rates: the
 * step of iteration optim_step_count() + 1. */
void optim_step(eng_backend *be, optim *opt, double lr, double lr_head);
/* Bytes of the optimizer's state (momentum buffers, Adam's moments). */
size_t optim_state_bytes(const optim *opt);
/* Updates made so far (Adam's t; a checkpoint keeps it), and setting it on resume. */
int64_t optim_step_count(const optim *opt);
void optim_set_step_count(optim *opt, int64_t steps);

/* The optimizer's state as named tensors for a checkpoint, one per updated parameter and kind:
 * "optimizer.momentum_buffer.<name>" (SGD with momentum), "optimizer.exp_avg.<name>" and
 * "optimizer.exp_avg_sq.<name>" (Adam, AdamW) — torch.optim's names. Returns the count; free
 * the array and its names with optim_state_entries_free. */
int optim_state_entries(const optim *opt, eng_entry **out);
void optim_state_entries_free(eng_entry *entries, int n);

#endif
