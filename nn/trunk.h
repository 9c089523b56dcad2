/*
 * trunk.h — the trunk a model is built on, whichever MODEL.TRUNK.NAME chose: one interface over
 * resnet.h and regnet.h, so model.c, the complexity counter and the configuration reader do not
 * care which.
 *
 * Features are numbered in network order (0 is the stem's) and named as VISSL names them for
 * that trunk: resnet's conv1, res1 … res5, res5avg, flatten; regnet's conv1, res2 … res{S+1},
 * avgpool, flatten; the AlexNets' conv1, pool1, conv2, pool2, conv3, conv4, conv5, pool5,
 * flatten; EfficientNet's conv1, block0 … block{B−1}, conv_final, avgpool, flatten, dropout.
 * For the first three the last feature is `flatten` (N × F), and the one before it the same
 * numbers as N × C × H × W (res5avg / avgpool / pool5): a trainable trunk passes gradients from
 * those two only. EfficientNet's last feature is `dropout`, and a trainable one passes gradients
 * from it alone (VISSL's default output; flatten is the same numbers only in evaluation).
 */
#ifndef SELFSUP_NN_TRUNK_H
#define SELFSUP_NN_TRUNK_H

#include "alexnet.h"
#include "efficientnet.h"
#include "nn.h"
#include "params.h"
#include "regnet.h"
#include "resnet.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { TRUNK_RESNET, TRUNK_REGNET, TRUNK_ALEXNET, TRUNK_EFFICIENTNET } trunk_kind;

enum { TRUNK_MAX_FEATURES = EFFICIENTNET_MAX_BLOCKS + 5 }; /* conv1, the blocks, conv_final … dropout */

/* What MODEL.TRUNK says: the kind and that kind's options (the other's are unused). */
typedef struct {
    trunk_kind kind;
    resnet_options resnet;
    regnet_options regnet;
    alexnet_variant alexnet;
    efficientnet_options efficientnet;
    regnet_stages stages; /* regnet: regnet_expand's, filled by trunk_options_check */
} trunk_options;

/* resnet's defaults (VISSL's MODEL.TRUNK default). */
trunk_options trunk_defaults(void);
/* Check the options and work out what depends on them (a RegNet's stages). 0, or -1 with *err. */
int trunk_options_check(trunk_options *o, char **err);
/* 0, or -1 with *err when the trunk cannot take an input of that shape (an AlexNet's pools
 * need a minimum size). */
int trunk_check_input(const trunk_options *o, const eng_shape *input, char **err);
/* The trunk's features: how many, by name (-1 when it has none of that name), and names. */
int trunk_feature_count(const trunk_options *o);
int trunk_feature_by_name(const trunk_options *o, const char *name);
const char *trunk_feature_name(const trunk_options *o, int f, char *buf, size_t len);
/* The feature names, comma-separated, into buf (for a message). */
const char *trunk_feature_list(const trunk_options *o, char *buf, size_t len);
/* flatten, or its N × C × 1 × 1 twin: the features a trainable trunk passes gradients from. */
bool trunk_feature_is_last(const trunk_options *o, int f);

typedef struct trunk trunk;

/* Build and initialise (the trunk's own VISSL init). NULL with *err for impossible options. */
trunk *trunk_new(eng_backend *be, const trunk_options *o, uint64_t seed, char **err);
void trunk_free(eng_backend *be, trunk *t);
/* The named-tensor table (params.h), for re-homing into a model or sharing with a view. */
eng_params *trunk_param_table(trunk *t);
/* The flatten feature's width (an AlexNet's: at the planned input, 0 before trunk_plan). */
int64_t trunk_out_dim(const trunk *t);
/* The ResNet underneath, or NULL (the complexity counter and tools that need it). */
resnet *trunk_resnet(const trunk *t);
regnet *trunk_regnet(const trunk *t);
alexnet *trunk_alexnet(const trunk *t);
efficientnet *trunk_efficientnet(const trunk *t);

/* As resnet.h's functions of the same names. */
void trunk_plan(eng_backend *be, trunk *t, const eng_shape *input);
size_t trunk_activation_bytes(const trunk *t);
const eng_tensor *trunk_forward(eng_backend *be, trunk *t, const eng_tensor *x, bool train);
const eng_tensor *trunk_feature(const trunk *t, int f);
void trunk_expose(trunk *t, int f);
void trunk_backward(eng_backend *be, trunk *t, const eng_tensor *dfeat);
/* The same, telling `ready` (NULL: no one) which of the trunk's gradients are final as it goes
 * (params.h), the last time with 0. */
void trunk_backward_watched(eng_backend *be, trunk *t, const eng_tensor *dfeat, const eng_grads_ready *ready);
void trunk_set_batchnorm_reducer(trunk *t, const eng_reducer *across);
/* The train step (and which of the model's trunk views this is), for the trunk's dropout masks:
 * EfficientNet's drop-connect and dropout; the other trunks have none. */
void trunk_set_train_step(trunk *t, uint64_t step, uint64_t view);

#endif
