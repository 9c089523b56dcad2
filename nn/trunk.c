/*
 * trunk.c — one interface over the trunks (see trunk.h): each function hands the call to the
 * trunk that was built. Feature numbers are resnet_feature_id's for a ResNet and regnet.h's for
 * a RegNet, both in network order.
 */
#include "trunk.h"
#include "test_hooks.h"

#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct trunk {
    trunk_options opt;
    resnet *resnet;
    regnet *regnet;
};

static const char *const RESNET_NAMES[RESNET_NFEATURES] = {"conv1", "res1", "res2", "res3",
                                                           "res4", "res5", "res5avg", "flatten"};

trunk_options trunk_defaults(void)
{
    return (trunk_options){.kind = TRUNK_RESNET, .resnet = resnet_defaults(), .regnet = regnet_defaults()};
}

int trunk_options_check(trunk_options *o, char **err)
{
    if (o->kind == TRUNK_REGNET)
        return regnet_expand(&o->regnet, &o->stages, err);
    return 0;
}

int trunk_feature_count(const trunk_options *o)
{
    return o->kind == TRUNK_REGNET ? regnet_feature_count(&o->stages) : RESNET_NFEATURES;
}

int trunk_feature_by_name(const trunk_options *o, const char *name)
{
    return o->kind == TRUNK_REGNET ? regnet_feature_by_name(&o->stages, name) : resnet_feature_by_name(name);
}

const char *trunk_feature_name(const trunk_options *o, int f, char *buf, size_t len)
{
    if (o->kind == TRUNK_REGNET)
        return regnet_feature_name(&o->stages, f, buf, len);
    snprintf(buf, len, "%s", f >= 0 && f < RESNET_NFEATURES ? RESNET_NAMES[f] : "?");
    return buf;
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

bool trunk_feature_is_last(const trunk_options *o, int f) { return f >= trunk_feature_count(o) - 2; }

trunk *trunk_new(eng_backend *be, const trunk_options *o, uint64_t seed, char **err)
{
    trunk *t = xcalloc(1, sizeof *t);
    t->opt = *o;
    if (trunk_options_check(&t->opt, err) == 0) {
        if (o->kind == TRUNK_REGNET)
            t->regnet = regnet_new(be, &o->regnet, seed, err);
        else
            t->resnet = resnet_new(be, &o->resnet, seed, err);
    }
    if (!t->resnet && !t->regnet) {
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
    free(t);
}

resnet *trunk_resnet(const trunk *t) { return t->resnet; }
regnet *trunk_regnet(const trunk *t) { return t->regnet; }

eng_params *trunk_param_table(trunk *t)
{
    return t->regnet ? regnet_param_table(t->regnet) : resnet_param_table(t->resnet);
}

void trunk_init_formula(eng_backend *be, trunk *t) { eng_params_init_formula(be, trunk_param_table(t)); }

int64_t trunk_out_dim(const trunk *t) { return t->regnet ? regnet_out_dim(t->regnet) : resnet_out_dim(t->resnet); }

void trunk_plan(eng_backend *be, trunk *t, const eng_shape *input)
{
    if (t->regnet)
        regnet_plan(be, t->regnet, input);
    else
        resnet_plan(be, t->resnet, input);
}

size_t trunk_activation_bytes(const trunk *t)
{
    return t->regnet ? regnet_activation_bytes(t->regnet) : resnet_activation_bytes(t->resnet);
}

const eng_tensor *trunk_forward(eng_backend *be, trunk *t, const eng_tensor *x, bool train)
{
    return t->regnet ? regnet_forward(be, t->regnet, x, train) : resnet_forward(be, t->resnet, x, train);
}

const eng_tensor *trunk_feature(const trunk *t, int f)
{
    return t->regnet ? regnet_feature(t->regnet, f) : resnet_feature(t->resnet, (resnet_feature_id)f);
}

void trunk_expose(trunk *t, int f)
{
    if (t->regnet)
        regnet_expose(t->regnet, f);
    else
        resnet_expose(t->resnet, (resnet_feature_id)f);
}

void trunk_backward(eng_backend *be, trunk *t, const eng_tensor *dfeat)
{
    if (t->regnet)
        regnet_backward(be, t->regnet, dfeat);
    else
        resnet_backward(be, t->resnet, dfeat);
}

void trunk_set_batchnorm_reducer(trunk *t, const eng_reducer *across)
{
    if (t->regnet)
        regnet_set_batchnorm_reducer(t->regnet, across);
    else
        resnet_set_batchnorm_reducer(t->resnet, across);
}
