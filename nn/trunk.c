/*
 * trunk.c — one interface over the trunks (see trunk.h): each function hands the call to the
 * trunk that was built, by a switch on its kind. Feature numbers are resnet_feature_id's for a
 * ResNet, and regnet.h's, alexnet.h's and efficientnet.h's for the others, all in network order.
 */
#include "trunk.h"
#include "test_hooks.h"

#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct trunk {
    trunk_kind kind;
    trunk_options opt;
    resnet *resnet;
    regnet *regnet;
    alexnet *alexnet;
    efficientnet *efficientnet;
};

static const char *const RESNET_NAMES[RESNET_NFEATURES] = {"conv1", "res1", "res2", "res3",
                                                           "res4", "res5", "res5avg", "flatten"};

trunk_options trunk_defaults(void)
{
    return (trunk_options){.kind = TRUNK_RESNET, .resnet = resnet_defaults(), .regnet = regnet_defaults(),
                           .efficientnet = efficientnet_defaults()};
}

int trunk_options_check(trunk_options *o, char **err)
{
    switch (o->kind) {
    case TRUNK_REGNET: return regnet_expand(&o->regnet, &o->stages, err);
    case TRUNK_EFFICIENTNET: return efficientnet_check(&o->efficientnet, err);
    default: return 0;
    }
}

int trunk_check_input(const trunk_options *o, const eng_shape *input, char **err)
{
    return o->kind == TRUNK_ALEXNET ? alexnet_check_input(o->alexnet, input, err) : 0;
}

int trunk_feature_count(const trunk_options *o)
{
    switch (o->kind) {
    case TRUNK_REGNET: return regnet_feature_count(&o->stages);
    case TRUNK_ALEXNET: return ALEXNET_NFEATURES;
    case TRUNK_EFFICIENTNET: return efficientnet_feature_count(&o->efficientnet);
    default: return RESNET_NFEATURES;
    }
}

int trunk_feature_by_name(const trunk_options *o, const char *name)
{
    switch (o->kind) {
    case TRUNK_REGNET: return regnet_feature_by_name(&o->stages, name);
    case TRUNK_ALEXNET: return alexnet_feature_by_name(name);
    case TRUNK_EFFICIENTNET: return efficientnet_feature_by_name(&o->efficientnet, name);
    default: return resnet_feature_by_name(name);
    }
}

const char *trunk_feature_name(const trunk_options *o, int f, char *buf, size_t len)
{
    switch (o->kind) {
    case TRUNK_REGNET: return regnet_feature_name(&o->stages, f, buf, len);
    case TRUNK_EFFICIENTNET: return efficientnet_feature_name(&o->efficientnet, f, buf, len);
    case TRUNK_ALEXNET: snprintf(buf, len, "%s", alexnet_feature_name(f)); return buf;
    default: snprintf(buf, len, "%s", f >= 0 && f < RESNET_NFEATURES ? RESNET_NAMES[f] : "?"); return buf;
    }
}

const char *trunk_feature_list(const trunk_options *o, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int f = 0; f < trunk_feature_count(o) && at < len; f++) {
        char name[16];
        at += (size_t)snprintf(buf + at, len - at, "%s%s", f ? ", " : "", trunk_feature_name(o, f, name, sizeof name));
    }
    return buf;
}

bool trunk_feature_is_last(const trunk_options *o, int f)
{
    return f >= trunk_feature_count(o) - (o->kind == TRUNK_EFFICIENTNET ? 1 : 2);
}

trunk *trunk_new(eng_backend *be, const trunk_options *o, uint64_t seed, char **err)
{
    trunk *t = xcalloc(1, sizeof *t);
    t->opt = *o;
    t->kind = o->kind;
    if (trunk_options_check(&t->opt, err) != 0) {
        free(t);
        return NULL;
    }
    switch (o->kind) {
    case TRUNK_REGNET: t->regnet = regnet_new(be, &o->regnet, seed, err); break;
    case TRUNK_ALEXNET: t->alexnet = alexnet_new(be, o->alexnet, seed); break;
    case TRUNK_EFFICIENTNET: t->efficientnet = efficientnet_new(be, &o->efficientnet, seed, err); break;
    default: t->resnet = resnet_new(be, &o->resnet, seed, err); break;
    }
    if (!t->resnet && !t->regnet && !t->alexnet && !t->efficientnet) {
        free(t);
        return NULL;
    }
    return t;
}

void trunk_free(eng_backend *be, trunk *t)
{
    if (!t)
        return;
    resnet_free(be, t->resnet);
    regnet_free(be, t->regnet);
    alexnet_free(be, t->alexnet);
    efficientnet_free(be, t->efficientnet);
    free(t);
}

resnet *trunk_resnet(const trunk *t) { return t->resnet; }
regnet *trunk_regnet(const trunk *t) { return t->regnet; }
alexnet *trunk_alexnet(const trunk *t) { return t->alexnet; }
efficientnet *trunk_efficientnet(const trunk *t) { return t->efficientnet; }

eng_params *trunk_param_table(trunk *t)
{
    switch (t->kind) {
    case TRUNK_REGNET: return regnet_param_table(t->regnet);
    case TRUNK_ALEXNET: return alexnet_param_table(t->alexnet);
    case TRUNK_EFFICIENTNET: return efficientnet_param_table(t->efficientnet);
    default: return resnet_param_table(t->resnet);
    }
}

void trunk_init_formula(eng_backend *be, trunk *t)
{
    if (t->kind == TRUNK_ALEXNET)
        alexnet_init_formula(be, t->alexnet); /* Sobel's fixed weights stay */
    else
        eng_params_init_formula(be, trunk_param_table(t));
}

int64_t trunk_out_dim(const trunk *t)
{
    switch (t->kind) {
    case TRUNK_REGNET: return regnet_out_dim(t->regnet);
    case TRUNK_ALEXNET: return alexnet_out_dim(t->alexnet);
    case TRUNK_EFFICIENTNET: return efficientnet_out_dim(t->efficientnet);
    default: return resnet_out_dim(t->resnet);
    }
}

void trunk_plan(eng_backend *be, trunk *t, const eng_shape *input)
{
    switch (t->kind) {
    case TRUNK_REGNET: regnet_plan(be, t->regnet, input); break;
    case TRUNK_ALEXNET: alexnet_plan(be, t->alexnet, input); break;
    case TRUNK_EFFICIENTNET: efficientnet_plan(be, t->efficientnet, input); break;
    default: resnet_plan(be, t->resnet, input); break;
    }
}

size_t trunk_activation_bytes(const trunk *t)
{
    switch (t->kind) {
    case TRUNK_REGNET: return regnet_activation_bytes(t->regnet);
    case TRUNK_ALEXNET: return alexnet_activation_bytes(t->alexnet);
    case TRUNK_EFFICIENTNET: return efficientnet_activation_bytes(t->efficientnet);
    default: return resnet_activation_bytes(t->resnet);
    }
}

const eng_tensor *trunk_forward(eng_backend *be, trunk *t, const eng_tensor *x, bool train)
{
    switch (t->kind) {
    case TRUNK_REGNET: return regnet_forward(be, t->regnet, x, train);
    case TRUNK_ALEXNET: return alexnet_forward(be, t->alexnet, x, train);
    case TRUNK_EFFICIENTNET: return efficientnet_forward(be, t->efficientnet, x, train);
    default: return resnet_forward(be, t->resnet, x, train);
    }
}

const eng_tensor *trunk_feature(const trunk *t, int f)
{
    switch (t->kind) {
    case TRUNK_REGNET: return regnet_feature(t->regnet, f);
    case TRUNK_ALEXNET: return alexnet_feature(t->alexnet, f);
    case TRUNK_EFFICIENTNET: return efficientnet_feature(t->efficientnet, f);
    default: return resnet_feature(t->resnet, (resnet_feature_id)f);
    }
}

/* AlexNet keeps every activation logical: nothing to expose. */
void trunk_expose(trunk *t, int f)
{
    if (t->kind == TRUNK_REGNET)
        regnet_expose(t->regnet, f);
    else if (t->kind == TRUNK_EFFICIENTNET)
        efficientnet_expose(t->efficientnet, f);
    else if (t->kind == TRUNK_RESNET)
        resnet_expose(t->resnet, (resnet_feature_id)f);
}

void trunk_backward(eng_backend *be, trunk *t, const eng_tensor *dfeat) { trunk_backward_watched(be, t, dfeat, NULL); }

/* ResNet and RegNet say block by block what is final; AlexNet and EfficientNet only at the end. */
void trunk_backward_watched(eng_backend *be, trunk *t, const eng_tensor *dfeat, const eng_grads_ready *ready)
{
    switch (t->kind) {
    case TRUNK_REGNET: regnet_backward_watched(be, t->regnet, dfeat, ready); return;
    case TRUNK_ALEXNET: alexnet_backward(be, t->alexnet, dfeat); break;
    case TRUNK_EFFICIENTNET: efficientnet_backward(be, t->efficientnet, dfeat); break;
    default: resnet_backward_watched(be, t->resnet, dfeat, ready); return;
    }
    eng_grads_tell(ready, 0);
}

void trunk_set_batchnorm_reducer(trunk *t, const eng_reducer *across)
{
    switch (t->kind) {
    case TRUNK_REGNET: regnet_set_batchnorm_reducer(t->regnet, across); break;
    case TRUNK_ALEXNET: alexnet_set_batchnorm_reducer(t->alexnet, across); break;
    case TRUNK_EFFICIENTNET: efficientnet_set_batchnorm_reducer(t->efficientnet, across); break;
    default: resnet_set_batchnorm_reducer(t->resnet, across); break;
    }
}

void trunk_set_train_step(trunk *t, uint64_t step, uint64_t view)
{
    if (t->kind == TRUNK_EFFICIENTNET)
        efficientnet_set_step(t->efficientnet, step, view);
}
