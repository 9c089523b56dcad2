/*
 * model_config.c — config.MODEL read into model_options (model.h).
 *
 * The composed config has already been checked against defaults.yaml (types of the fixed
 * keys), so this file checks what the schema cannot: the trunk this engine builds, the
 * heads' [name, {kwargs}] pairs (names and arguments of VISSL's head constructors), the
 * pool ops of LINEAR_EVAL_FEAT_POOL_OPS_MAP (torch.nn constructors called with *args) and
 * the MULTI_INPUT_HEAD_MAPPING; and WEIGHTS_INIT, the weights a run starts from. Every refusal
 * points at the config line that caused it.
 */
#include "model.h"

#include "util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cfg_err *err;
    bool failed;
} reader;

/* Record the first failure only: later ones are usually its echo. */
static bool fail(reader *r, const cfg_node *at, const char *key, const char *why)
{
    if (!r->failed)
        cfg_fail(r->err, at, key, "%s", why);
    r->failed = true;
    return false;
}

static const cfg_node *need(reader *r, const cfg_node *map, const char *path)
{
    const cfg_node *n = cfg_path(map, path);
    if (!n)
        fail(r, map, path, "missing (defaults.yaml should provide it)");
    return n;
}

static int64_t get_int(reader *r, const cfg_node *map, const char *path)
{
    const cfg_node *n = need(r, map, path);
    if (n && n->kind != CFG_INT)
        return fail(r, n, path, "must be an integer"), 0;
    return n ? n->i : 0;
}

static bool get_bool(reader *r, const cfg_node *map, const char *path)
{
    const cfg_node *n = need(r, map, path);
    if (n && n->kind != CFG_BOOL)
        return fail(r, n, path, "must be true or false");
    return n && n->b;
}

static const char *get_str(reader *r, const cfg_node *map, const char *path)
{
    const cfg_node *n = need(r, map, path);
    if (n && n->kind != CFG_STR)
        return fail(r, n, path, "must be a string"), "";
    return n ? n->s : "";
}

/* ---- the trunk ---------------------------------------------------------------------------- */

static void read_resnet(reader *r, const cfg_node *mc, resnet_options *t)
{
    const cfg_node *rn = need(r, mc, "TRUNK.TRUNK_PARAMS.RESNETS");
    if (!rn)
        return;
    t->depth = (int)get_int(r, rn, "DEPTH");
    t->width_multiplier = (int)get_int(r, rn, "WIDTH_MULTIPLIER");
    t->groups = (int)get_int(r, rn, "GROUPS");
    t->width_per_group = (int)get_int(r, rn, "WIDTH_PER_GROUP");
    t->zero_init_residual = get_bool(r, rn, "ZERO_INIT_RESIDUAL");
    t->layer4_stride = (int)get_int(r, rn, "LAYER4_STRIDE");
    t->small_stem = get_bool(r, rn, "SMALL_STEM");
    int norm = resnet_norm_by_name(get_str(r, rn, "NORM"));
    if (!r->failed && norm < 0)
        fail(r, cfg_map_get(rn, "NORM"), "TRUNK.TRUNK_PARAMS.RESNETS.NORM", "must be BatchNorm or LayerNorm");
    t->norm = norm < 0 ? t->norm : (resnet_norm)norm;
    if (get_bool(r, rn, "STANDARDIZE_CONVOLUTIONS"))
        fail(r, cfg_map_get(rn, "STANDARDIZE_CONVOLUTIONS"), "TRUNK.TRUNK_PARAMS.RESNETS.STANDARDIZE_CONVOLUTIONS",
             "weight-standardised convolutions are not built by this engine");
}

/* ---- RegNet: ClassyVision's keyword arguments ----------------------------------------------- */

static bool arg_bool(reader *r, const cfg_node *v, const char *key, bool *out);
static bool arg_pos_int(reader *r, const cfg_node *v, const char *key, int64_t *out);

/* RegNet.from_config's keys (ClassyVision), each with where it goes in regnet_options. */
typedef enum { RK_INT, RK_NUMBER, RK_BOOL, RK_STEM, RK_BLOCK, RK_ACTIVATION } regnet_key_kind;
static const struct {
    const char *name;
    regnet_key_kind kind;
    size_t offset;
} REGNET_KEYS[] = {
    {"depth", RK_INT, offsetof(regnet_options, depth)},
    {"w_0", RK_INT, offsetof(regnet_options, w_0)},
    {"w_a", RK_NUMBER, offsetof(regnet_options, w_a)},
    {"w_m", RK_NUMBER, offsetof(regnet_options, w_m)},
    {"group_width", RK_INT, offsetof(regnet_options, group_width)},
    {"bottleneck_multiplier", RK_NUMBER, offsetof(regnet_options, bottleneck_multiplier)},
    {"stem_type", RK_STEM, offsetof(regnet_options, stem_type)},
    {"stem_width", RK_INT, offsetof(regnet_options, stem_width)},
    {"block_type", RK_BLOCK, offsetof(regnet_options, block_type)},
    {"activation", RK_ACTIVATION, offsetof(regnet_options, activation)},
    {"use_se", RK_BOOL, offsetof(regnet_options, use_se)},
    {"se_ratio", RK_NUMBER, offsetof(regnet_options, se_ratio)},
    {"bn_epsilon", RK_NUMBER, offsetof(regnet_options, bn_epsilon)},
    {"bn_momentum", RK_NUMBER, offsetof(regnet_options, bn_momentum)},
};

/* A stem_type / block_type / activation value: its enum, or a failure naming the choices. */
static bool regnet_enum(reader *r, const cfg_node *v, const char *key, regnet_key_kind kind, int *out)
{
    static const char *const CHOICES[] = {
        [RK_STEM] = "must be res_stem_cifar, res_stem_in or simple_stem_in",
        [RK_BLOCK] = "must be vanilla_block, res_basic_block, res_bottleneck_block or res_bottleneck_linear_block",
        [RK_ACTIVATION] = "must be relu or silu",
    };
    const char *s = v->kind == CFG_STR ? v->s : "";
    *out = kind == RK_STEM ? regnet_stem_by_name(s) : kind == RK_BLOCK ? regnet_block_by_name(s)
                                                                      : regnet_activation_by_name(s);
    return *out >= 0 || fail(r, v, key, CHOICES[kind]);
}

/* One key of the REGNET map into *o: false (and a failure) for a key RegNet.from_config does not
 * read, or a value of the wrong kind. */
static bool regnet_key(reader *r, const char *name, const cfg_node *v, const char *key, regnet_options *o)
{
    for (size_t i = 0; i < ARRAY_LEN(REGNET_KEYS); i++) {
        if (strcmp(REGNET_KEYS[i].name, name) != 0)
            continue;
        void *at = (char *)o + REGNET_KEYS[i].offset;
        int64_t n;
        int e;
        switch (REGNET_KEYS[i].kind) {
        case RK_INT: return arg_pos_int(r, v, key, &n) && (*(int *)at = (int)n, true);
        case RK_NUMBER:
            return cfg_is_number(v) ? (*(double *)at = cfg_number(v), true) : fail(r, v, key, "must be a number");
        case RK_BOOL: return arg_bool(r, v, key, (bool *)at);
        default: return regnet_enum(r, v, key, REGNET_KEYS[i].kind, &e) && (*(int *)at = e, true);
        }
    }
    return fail(r, v, key, "RegNet takes name, depth, w_0, w_a, w_m, group_width, bottleneck_multiplier, stem_type, "
                           "stem_width, block_type, activation, use_se, se_ratio, bn_epsilon, bn_momentum");
}

/* A preset: VISSL builds ClassyVision's registered model from the name alone and ignores every
 * other key of the map, which would silently train another network than the config says, so
 * other keys are refused here. */
static void read_regnet_preset(reader *r, const cfg_node *map, const char *path, regnet_options *o)
{
    const cfg_node *name = cfg_map_get(map, "name");
    char key[96];
    snprintf(key, sizeof key, "%s.name", path);
    if (name->kind != CFG_STR || regnet_preset(name->s, o) != 0) {
        char list[512] = "";
        for (const char *const *p = regnet_preset_names(); *p; p++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", p == regnet_preset_names() ? "" : ", ", *p);
        char why[640];
        snprintf(why, sizeof why, "is not one of ClassyVision's RegNets: %s", list);
        fail(r, name, key, why);
        return;
    }
    if (map->len > 1)
        fail(r, map, path, "with a preset `name`, VISSL builds that RegNet and ignores the other keys: give the name "
                           "alone, or the parameters (depth, w_0, w_a, w_m, group_width, ...) without a name");
}

/* A trunk's parameter map: VISSL 0.1.5 reads TRUNK_PARAMS.<name>; later VISSL moved it to
 * TRUNK.<name>. The composer mirrors moved keys, so both usually hold the same map; where they
 * differ, the one set last. Its path goes to *path (a buffer of 64). */
static const cfg_node *trunk_param_map(const cfg_node *mc, const char *name, char *path)
{
    char old_path[64], new_path[64];
    snprintf(old_path, sizeof old_path, "TRUNK.TRUNK_PARAMS.%s", name);
    snprintf(new_path, sizeof new_path, "TRUNK.%s", name);
    const cfg_node *old = cfg_path(mc, old_path), *newer = cfg_path(mc, new_path);
    bool has_old = old && old->kind == CFG_MAP && old->len, has_new = newer && newer->kind == CFG_MAP && newer->len;
    bool use_new = has_new && (!has_old || newer->stamp > old->stamp);
    snprintf(path, 64, "%s", use_new ? new_path : old_path);
    return use_new ? newer : old;
}

static void read_regnet(reader *r, const cfg_node *mc, regnet_options *o)
{
    char path[64];
    const cfg_node *map = trunk_param_map(mc, "REGNET", path);
    if (!map || map->kind != CFG_MAP || map->len == 0) {
        fail(r, map ? map : mc, path, "the regnet trunk needs a `name` (regnet_y_400mf, ...) or depth, w_0, w_a, w_m "
                                      "and group_width");
        return;
    }
    if (cfg_map_get(map, "name")) {
        read_regnet_preset(r, map, path, o);
        return;
    }
    for (size_t i = 0; i < map->len && !r->failed; i++) {
        char key[96];
        snprintf(key, sizeof key, "%s.%s", path, map->keys[i]);
        regnet_key(r, map->keys[i], map->items[i], key, o);
    }
    static const char *const REQUIRED[] = {"depth", "w_0", "w_a", "w_m", "group_width"};
    for (size_t i = 0; i < ARRAY_LEN(REQUIRED) && !r->failed; i++)
        if (!cfg_map_get(map, REQUIRED[i]))
            fail(r, map, path, "RegNet's parameters need depth, w_0, w_a, w_m and group_width (or a preset `name`)");
}

/* One key of TRUNK_PARAMS.EFFICIENT_NETS (ClassyVision's EfficientNet arguments). */
static bool efficientnet_key(reader *r, const char *name, const cfg_node *v, const char *key, efficientnet_options *o)
{
    int64_t n;
    if (!strcmp(name, "model_version"))
        return v->kind == CFG_STR && efficientnet_preset(v->s, o) == 0 ? true
                                                                        : fail(r, v, key, "must be B0, B1, ... or B7");
    if (!strcmp(name, "width_divisor"))
        return arg_pos_int(r, v, key, &n) && (o->width_divisor = (int)n, true);
    if (!strcmp(name, "min_width"))
        return v->kind == CFG_NULL ? (o->min_width = 0, true) : arg_pos_int(r, v, key, &n) && (o->min_width = (int)n, true);
    if (!strcmp(name, "use_se"))
        return arg_bool(r, v, key, &o->use_se);
    double *number = !strcmp(name, "bn_momentum")         ? &o->bn_momentum
                     : !strcmp(name, "bn_epsilon")        ? &o->bn_epsilon
                     : !strcmp(name, "drop_connect_rate") ? &o->drop_connect_rate
                                                          : NULL;
    if (number)
        return cfg_is_number(v) ? (*number = cfg_number(v), true) : fail(r, v, key, "must be a number");
    return fail(r, v, key, "EfficientNet takes model_version, bn_momentum, bn_epsilon, drop_connect_rate, "
                           "width_divisor, min_width, use_se");
}

/* VISSL requires model_version; the other keys default to ClassyVision's efficientnet_bN values
 * (bn_momentum 0.01, bn_epsilon 1e-3, drop_connect_rate 0.2, width_divisor 8, min_width None,
 * use_se True), which every VISSL config spells out anyway. */
static void read_efficientnet(reader *r, const cfg_node *mc, efficientnet_options *o)
{
    char path[64];
    const cfg_node *map = trunk_param_map(mc, "EFFICIENT_NETS", path);
    if (!map || map->kind != CFG_MAP || !cfg_map_get(map, "model_version")) {
        fail(r, map ? map : mc, path, "the efficientnet trunk needs a model_version (B0 ... B7)");
        return;
    }
    *o = efficientnet_defaults();
    for (size_t i = 0; i < map->len && !r->failed; i++) {
        char key[96];
        snprintf(key, sizeof key, "%s.%s", path, map->keys[i]);
        efficientnet_key(r, map->keys[i], map->items[i], key, o);
    }
}

/* The colorization AlexNet reads the L of a LAB image, as VISSL asserts; the others read all
 * three channels, which the model's LAB input (the L channel only) cannot give them. */
static void read_alexnet(reader *r, const cfg_node *mc, const char *name, model_options *o)
{
    o->trunk.kind = TRUNK_ALEXNET;
    o->trunk.alexnet = (alexnet_variant)alexnet_variant_by_name(name);
    bool lab = o->input_type == MODEL_INPUT_LAB, wants_lab = o->trunk.alexnet == ALEXNET_COLORIZATION;
    if (lab != wants_lab)
        fail(r, cfg_path(mc, "INPUT_TYPE"), "INPUT_TYPE",
             wants_lab ? "alexnet_colorization takes lab input only (VISSL asserts it)"
                       : "this AlexNet takes rgb or bgr input; only alexnet_colorization reads lab");
}

static void read_trunk(reader *r, const cfg_node *mc, model_options *o)
{
    const char *name = get_str(r, mc, "TRUNK.NAME");
    const char *input = get_str(r, mc, "INPUT_TYPE");
    o->input_type = !strcmp(input, "bgr") ? MODEL_INPUT_BGR : !strcmp(input, "lab") ? MODEL_INPUT_LAB : MODEL_INPUT_RGB;
    if (!r->failed && !strcmp(name, "regnet")) {
        o->trunk.kind = TRUNK_REGNET;
        if (o->input_type == MODEL_INPUT_LAB)
            fail(r, cfg_path(mc, "INPUT_TYPE"), "INPUT_TYPE",
                 "the regnet trunk takes rgb or bgr input (VISSL asserts it)");
        read_regnet(r, mc, &o->trunk.regnet);
    } else if (!r->failed && !strcmp(name, "resnet")) {
        o->trunk.kind = TRUNK_RESNET;
        read_resnet(r, mc, &o->trunk.resnet);
        o->trunk.resnet.in_channels = o->input_type == MODEL_INPUT_LAB ? 1 : 3;
    } else if (!r->failed && !strcmp(name, "efficientnet")) {
        o->trunk.kind = TRUNK_EFFICIENTNET;
        if (o->input_type == MODEL_INPUT_LAB)
            fail(r, cfg_path(mc, "INPUT_TYPE"), "INPUT_TYPE",
                 "the efficientnet trunk takes rgb or bgr input (VISSL asserts it)");
        read_efficientnet(r, mc, &o->trunk.efficientnet);
    } else if (!r->failed && alexnet_variant_by_name(name) >= 0) {
        read_alexnet(r, mc, name, o);
    } else if (!r->failed) {
        fail(r, cfg_path(mc, "TRUNK.NAME"), "TRUNK.NAME", "this engine builds the 'resnet' (ResNet/ResNeXt), 'regnet', "
                                                          "'efficientnet', 'alexnet_bvlc', 'alexnet_colorization', 'alexnet_deepcluster', "
                                                          "'alexnet_jigsaw' and 'alexnet_rotnet' trunks");
        return;
    }
    if (get_bool(r, mc, "ACTIVATION_CHECKPOINTING.USE_ACTIVATION_CHECKPOINTING")) {
        int64_t splits = get_int(r, mc, "ACTIVATION_CHECKPOINTING.NUM_ACTIVATION_CHECKPOINTING_SPLITS");
        if (!r->failed && splits < 1)
            fail(r, cfg_path(mc, "ACTIVATION_CHECKPOINTING.NUM_ACTIVATION_CHECKPOINTING_SPLITS"),
                 "ACTIVATION_CHECKPOINTING.NUM_ACTIVATION_CHECKPOINTING_SPLITS", "must be at least 1");
        o->trunk.resnet.checkpoint_splits = o->trunk.regnet.checkpoint_splits = (int)splits;
    }
    char *why = NULL;
    if (!r->failed && trunk_options_check(&o->trunk, &why) != 0) {
        fail(r, cfg_path(mc, "TRUNK.NAME"), "TRUNK", why);
        free(why);
    }
}

/* ---- heads -------------------------------------------------------------------------------- */

static bool arg_int_list(reader *r, const cfg_node *v, const char *key, int64_t *out, int max, int *n)
{
    if (v->kind != CFG_LIST || v->len < 1 || (int)v->len > max)
        return fail(r, v, key, "must be a list of 1 to 16 integers");
    for (size_t i = 0; i < v->len; i++) {
        if (v->items[i]->kind != CFG_INT || v->items[i]->i < 1)
            return fail(r, v->items[i], key, "must hold positive integers");
        out[i] = v->items[i]->i;
    }
    *n = (int)v->len;
    return true;
}

static bool arg_bool(reader *r, const cfg_node *v, const char *key, bool *out)
{
    if (v->kind != CFG_BOOL)
        return fail(r, v, key, "must be true or false");
    *out = v->b;
    return true;
}

static bool arg_pos_int(reader *r, const cfg_node *v, const char *key, int64_t *out)
{
    if (v->kind != CFG_INT || v->i < 1)
        return fail(r, v, key, "must be a positive integer");
    *out = v->i;
    return true;
}

/* One keyword argument of a head constructor; false (and a failure) when the head takes no
 * such argument. */
static bool head_arg(reader *r, head_options *h, const char *head_name, const char *k, const cfg_node *v)
{
    bool mlp = h->type == HEAD_MLP, eval = h->type == HEAD_EVAL_MLP, swav = h->type == HEAD_SWAV;
    int64_t tmp = 0;
    if ((mlp || eval || swav) && !strcmp(k, "dims"))
        return arg_int_list(r, v, k, h->dims, HEAD_MAX_DIMS, &h->ndims);
    if ((mlp || eval || swav) && !strcmp(k, "use_bn"))
        return arg_bool(r, v, k, &h->use_bn);
    if ((mlp || eval) && !strcmp(k, "use_relu"))
        return arg_bool(r, v, k, &h->use_relu);
    if (mlp && !strcmp(k, "use_dropout"))
        return arg_bool(r, v, k, &h->use_dropout);
    if (mlp && !strcmp(k, "skip_last_layer_relu_bn"))
        return arg_bool(r, v, k, &h->skip_last_layer_relu_bn);
    if ((mlp || swav) && !strcmp(k, "use_bias"))
        return arg_bool(r, v, k, &h->use_bias);
    if (eval && !strcmp(k, "in_channels"))
        return arg_pos_int(r, v, k, &h->in_channels);
    if (h->type == HEAD_SIAMESE_CONCAT_VIEW && !strcmp(k, "num_towers")) {
        bool ok = arg_pos_int(r, v, k, &tmp);
        h->num_towers = (int)tmp;
        return ok;
    }
    if (swav && !strcmp(k, "num_clusters"))
        return arg_int_list(r, v, k, h->num_clusters, HEAD_MAX_PROTOTYPES, &h->nclusters);
    if (swav && !strcmp(k, "return_embeddings"))
        return arg_bool(r, v, k, &h->return_embeddings);
    if (swav && !strcmp(k, "skip_last_bn"))
        return arg_bool(r, v, k, &h->skip_last_bn);
    if (swav && !strcmp(k, "normalize_feats"))
        return arg_bool(r, v, k, &h->normalize_feats);
    char why[160];
    snprintf(why, sizeof why, "head %s takes no argument '%s'", head_name, k);
    return fail(r, v, k, why);
}

/* [name, {kwargs}] → head_options. */
static bool read_head(reader *r, const cfg_node *pair, head_options *h)
{
    if (pair->kind != CFG_LIST || pair->len < 1 || pair->len > 2 || pair->items[0]->kind != CFG_STR)
        return fail(r, pair, "HEAD.PARAMS", "a head is [name, {arguments}]");
    const char *name = pair->items[0]->s;
    int type = head_type_by_name(name);
    if (type < 0) {
        static const char *const names[] = {"mlp", "eval_mlp", "siamese_concat_view", "swav_head"};
        const char *near = cfg_suggest(name, names, ARRAY_LEN(names));
        char why[200];
        snprintf(why, sizeof why, "this engine has no head '%s'%s%s%s", name, near ? " (did you mean '" : "",
                 near ? near : "", near ? "'?)" : "");
        return fail(r, pair->items[0], "HEAD.PARAMS", why);
    }
    *h = head_defaults((head_type)type);
    const cfg_node *kw = pair->len == 2 ? pair->items[1] : NULL;
    if (kw && kw->kind != CFG_MAP)
        return fail(r, kw, "HEAD.PARAMS", "a head's arguments are a map");
    for (size_t i = 0; kw && i < kw->len; i++)
        if (!head_arg(r, h, name, kw->keys[i], kw->items[i]))
            return false;
    return true;
}

/* A MODEL.HEAD.PARAMS entry: [name, {kwargs}], or a list of such pairs (a chain). */
static bool read_head_entry(reader *r, const cfg_node *entry, model_head_entry *e)
{
    if (entry->kind != CFG_LIST || entry->len == 0)
        return fail(r, entry, "HEAD.PARAMS", "a head is [name, {arguments}] or a list of such pairs");
    e->nested = entry->items[0]->kind == CFG_LIST;
    if (!e->nested) {
        e->n = 1;
        return read_head(r, entry, &e->chain[0]);
    }
    if (entry->len > MODEL_MAX_CHAIN)
        return fail(r, entry, "HEAD.PARAMS", "a chain holds at most 8 heads");
    e->n = (int)entry->len;
    for (size_t j = 0; j < entry->len; j++)
        if (!read_head(r, entry->items[j], &e->chain[j]))
            return false;
    return true;
}

static void read_heads(reader *r, const cfg_node *mc, model_options *o)
{
    const cfg_node *params = need(r, mc, "HEAD.PARAMS");
    if (!params)
        return;
    if (params->kind != CFG_LIST || params->len > MODEL_MAX_HEADS) {
        fail(r, params, "HEAD.PARAMS", "must be a list of at most 8 heads");
        return;
    }
    o->nheads = (int)params->len;
    for (size_t i = 0; i < params->len && !r->failed; i++)
        read_head_entry(r, params->items[i], &o->heads[i]);
    const cfg_node *mult = cfg_path(mc, "HEAD.PARAMS_MULTIPLIER");
    o->head_params_multiplier = mult && cfg_is_number(mult) ? cfg_number(mult) : 1.0;
    /* Every head's BatchNorm (mlp's, eval_mlp's channel_bn, swav_head's) takes these two. */
    const cfg_node *eps = cfg_path(mc, "HEAD.BATCHNORM_EPS"), *mom = cfg_path(mc, "HEAD.BATCHNORM_MOMENTUM");
    if (eps && (!cfg_is_number(eps) || cfg_number(eps) <= 0))
        fail(r, eps, "HEAD.BATCHNORM_EPS", "must be a positive number");
    if (mom && (!cfg_is_number(mom) || cfg_number(mom) < 0 || cfg_number(mom) > 1))
        fail(r, mom, "HEAD.BATCHNORM_MOMENTUM", "must be a number in [0, 1]");
    for (int i = 0; i < o->nheads && !r->failed; i++)
        for (int j = 0; j < o->heads[i].n; j++) {
            o->heads[i].chain[j].bn_eps = eps ? cfg_number(eps) : HEAD_BN_EPS;
            o->heads[i].chain[j].bn_momentum = mom ? cfg_number(mom) : HEAD_BN_MOMENTUM;
        }
}

/* ---- mapping and feature evaluation ---------------------------------------------------------- */

static bool feature_name(reader *r, const model_options *o, const cfg_node *n, const char *key, int *out)
{
    int f = n->kind == CFG_STR ? trunk_feature_by_name(&o->trunk, n->s) : -1;
    if (f < 0) {
        char list[256], why[320];
        snprintf(why, sizeof why, "this trunk's features are %s", trunk_feature_list(&o->trunk, list, sizeof list));
        return fail(r, n, key, why);
    }
    *out = f;
    return true;
}

static void read_mapping(reader *r, const cfg_node *mc, model_options *o)
{
    const cfg_node *map = need(r, mc, "MULTI_INPUT_HEAD_MAPPING");
    if (!map || map->kind != CFG_LIST || map->len == 0)
        return;
    const char *key = "MULTI_INPUT_HEAD_MAPPING";
    if ((int)map->len != o->nheads) {
        fail(r, map, key, "needs one [input_key, [feature names]] entry per head of HEAD.PARAMS");
        return;
    }
    o->nmapping = (int)map->len;
    for (size_t i = 0; i < map->len && !r->failed; i++) {
        const cfg_node *e = map->items[i];
        if (e->kind != CFG_LIST || e->len != 2 || e->items[0]->kind != CFG_STR || e->items[1]->kind != CFG_LIST ||
            e->items[1]->len < 1 || e->items[1]->len > MODEL_MAX_FEATURES ||
            strlen(e->items[0]->s) >= sizeof o->mapping[i].key) {
            fail(r, e, key, "an entry is [input_key, [feature names]]");
            return;
        }
        snprintf(o->mapping[i].key, sizeof o->mapping[i].key, "%s", e->items[0]->s);
        o->mapping[i].nfeat = (int)e->items[1]->len;
        for (size_t j = 0; j < e->items[1]->len; j++)
            if (!feature_name(r, o, e->items[1]->items[j], key, &o->mapping[i].feat[j]))
                return;
    }
}

/* An int or an [h, w] pair (torch's _pair). */
static bool pair_arg(reader *r, const cfg_node *v, const char *key, int64_t lo, int64_t out[2])
{
    if (v->kind == CFG_INT && v->i >= lo) {
        out[0] = out[1] = v->i;
        return true;
    }
    if (v->kind == CFG_LIST && v->len == 2 && v->items[0]->kind == CFG_INT && v->items[1]->kind == CFG_INT &&
        v->items[0]->i >= lo && v->items[1]->i >= lo) {
        out[0] = v->items[0]->i, out[1] = v->items[1]->i;
        return true;
    }
    return fail(r, v, key, lo > 0 ? "must be a positive integer or a pair of them"
                                  : "must be a non-negative integer or a pair of them");
}

/* [op, [args]] → the op, with torch's positional arguments and defaults. */
static bool read_pool_op(reader *r, const cfg_node *spec, model_pool_op *p)
{
    const char *key = "FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP";
    if (spec->kind != CFG_LIST || spec->len < 1 || spec->len > 2 || spec->items[0]->kind != CFG_STR ||
        (spec->len == 2 && spec->items[1]->kind != CFG_LIST))
        return fail(r, spec, key, "a pool op is [name, [arguments]]");
    const char *name = spec->items[0]->s;
    const cfg_node *args = spec->len == 2 ? spec->items[1] : NULL;
    size_t nargs = args ? args->len : 0;
    if (!strcmp(name, "Identity")) {
        p->kind = MODEL_POOL_IDENTITY;
        return true;
    }
    if (!strcmp(name, "AdaptiveAvgPool2d") || !strcmp(name, "AdaptiveMaxPool2d")) {
        p->kind = name[8] == 'A' ? MODEL_POOL_ADAPTIVE_AVG : MODEL_POOL_ADAPTIVE_MAX;
        if (nargs != 1)
            return fail(r, spec, key, "an adaptive pool takes one argument, the output size");
        return pair_arg(r, args->items[0], key, 1, p->out_hw);
    }
    if (strcmp(name, "AvgPool2d") != 0 && strcmp(name, "MaxPool2d") != 0)
        return fail(r, spec->items[0], key,
                    "a pool op is AvgPool2d, MaxPool2d, AdaptiveAvgPool2d, AdaptiveMaxPool2d or Identity");
    p->kind = name[0] == 'A' ? MODEL_POOL_AVG : MODEL_POOL_MAX;
    /* AvgPool2d(kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True);
     * MaxPool2d(kernel, stride=None, padding=0) (a dilation or more is not taken here). */
    if (nargs < 1 || nargs > (p->kind == MODEL_POOL_AVG ? 5u : 3u))
        return fail(r, spec, key, p->kind == MODEL_POOL_AVG
                                      ? "AvgPool2d takes kernel_size[, stride, padding, ceil_mode, count_include_pad]"
                                      : "MaxPool2d takes kernel_size[, stride, padding]");
    p->pool.count_include_pad = true;
    if (!pair_arg(r, args->items[0], key, 1, p->pool.kernel))
        return false;
    if (nargs > 1 && args->items[1]->kind != CFG_NULL && !pair_arg(r, args->items[1], key, 1, p->pool.stride))
        return false;
    if (nargs > 2 && !pair_arg(r, args->items[2], key, 0, p->pool.pad))
        return false;
    if (nargs > 3 && !arg_bool(r, args->items[3], key, &p->pool.ceil_mode))
        return false;
    if (nargs > 4 && !arg_bool(r, args->items[4], key, &p->pool.count_include_pad))
        return false;
    if (2 * p->pool.pad[0] > p->pool.kernel[0] || 2 * p->pool.pad[1] > p->pool.kernel[1])
        return fail(r, spec, key, "padding must be at most half the kernel size (torch's rule)");
    return true;
}

static void read_feature_eval(reader *r, const cfg_node *mc, model_options *o)
{
    const cfg_node *fe = need(r, mc, "FEATURE_EVAL_SETTINGS");
    if (!fe)
        return;
    o->eval_mode_on = get_bool(r, fe, "EVAL_MODE_ON");
    o->freeze_trunk_only = get_bool(r, fe, "FREEZE_TRUNK_ONLY");
    o->freeze_trunk_and_head = get_bool(r, fe, "FREEZE_TRUNK_AND_HEAD");
    o->extract_trunk_features_only = get_bool(r, fe, "EXTRACT_TRUNK_FEATURES_ONLY");
    o->eval_trunk_and_head = get_bool(r, fe, "EVAL_TRUNK_AND_HEAD");
    o->should_flatten_feats = get_bool(r, fe, "SHOULD_FLATTEN_FEATS");
    const cfg_node *map = need(r, fe, "LINEAR_EVAL_FEAT_POOL_OPS_MAP");
    const char *key = "FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP";
    if (!map || r->failed)
        return;
    if (map->kind != CFG_LIST || map->len > MODEL_MAX_FEATURES) {
        fail(r, map, key, "must be a list of at most 8 [layer, [pool op, [arguments]]] entries");
        return;
    }
    o->npool_ops = (int)map->len;
    for (size_t i = 0; i < map->len && !r->failed; i++) {
        const cfg_node *e = map->items[i];
        if (e->kind != CFG_LIST || e->len != 2) {
            fail(r, e, key, "an entry is [layer, [pool op, [arguments]]]");
            return;
        }
        if (feature_name(r, o, e->items[0], key, &o->pool_ops[i].layer))
            read_pool_op(r, e->items[1], &o->pool_ops[i]);
    }
}

bool model_options_from_config(const cfg_node *model_cfg, model_options *out, cfg_err *err)
{
    reader r = {.err = err};
    *out = model_defaults();
    if (!model_cfg || model_cfg->kind != CFG_MAP)
        return fail(&r, model_cfg, "config.MODEL", "must be a map");
    read_trunk(&r, model_cfg, out);
    if (!r.failed)
        read_heads(&r, model_cfg, out);
    if (!r.failed)
        read_mapping(&r, model_cfg, out);
    if (!r.failed)
        out->single_pass_every_crop = get_bool(&r, model_cfg, "SINGLE_PASS_EVERY_CROP");
    if (!r.failed)
        read_feature_eval(&r, model_cfg, out);
    if (!r.failed && out->nmapping && model_is_feature_extractor(out))
        fail(&r, cfg_path(model_cfg, "MULTI_INPUT_HEAD_MAPPING"), "MULTI_INPUT_HEAD_MAPPING",
             "a feature-extractor model (LINEAR_EVAL_FEAT_POOL_OPS_MAP) takes one input");
    return !r.failed;
}

/* ---- WEIGHTS_INIT ------------------------------------------------------------------------- */

static void read_skip_layers(reader *r, const cfg_node *wi, model_weights_init *out)
{
    const char *key = "WEIGHTS_INIT.SKIP_LAYERS";
    const cfg_node *list = need(r, wi, "SKIP_LAYERS");
    if (!list)
        return;
    if (list->kind != CFG_LIST || list->len > MODEL_MAX_SKIP_LAYERS) {
        fail(r, list, key, "must be a list of at most 64 strings");
        return;
    }
    for (size_t i = 0; i < list->len; i++) {
        if (list->items[i]->kind != CFG_STR) {
            fail(r, list->items[i], key, "must be a list of strings (parts of parameter names)");
            return;
        }
        out->skip[i] = list->items[i]->s;
    }
    out->opt.n_skip_layers = (int)list->len;
}

bool model_weights_init_from_config(const cfg_node *model_cfg, const model_options *o, model_weights_init *out,
                                    cfg_err *err)
{
    reader r = {.err = err};
    *out = (model_weights_init){.opt = weights_init_defaults()};
    const cfg_node *wi = model_cfg && model_cfg->kind == CFG_MAP ? need(&r, model_cfg, "WEIGHTS_INIT") : NULL;
    if (!wi)
        return fail(&r, model_cfg, "config.MODEL.WEIGHTS_INIT", "must be a map");
    out->opt.params_file = get_str(&r, wi, "PARAMS_FILE");
    out->opt.state_dict_key_name = get_str(&r, wi, "STATE_DICT_KEY_NAME");
    out->opt.remove_prefix = get_str(&r, wi, "REMOVE_PREFIX");
    out->opt.append_prefix = get_str(&r, wi, "APPEND_PREFIX");
    read_skip_layers(&r, wi, out);
    out->opt.feature_extractor = model_is_feature_extractor(o);
    out->opt.load_heads = !o->eval_mode_on || o->eval_trunk_and_head;
    return !r.failed;
}

const char *model_backend_for_device(const char *device)
{
    return strcmp(device, "cpu") == 0 ? "cpu" : strcmp(device, "gpu") == 0 ? "cuda" : NULL;
}

/* MODEL.AMP_PARAMS.USE_AMP: bf16, whichever AMP_TYPE (apex's O1 and torch.cuda.amp compute in
 * fp16 behind a loss scaler; bf16 has fp32's exponent range and needs none). cfg_check has
 * refused it on the cpu. */
static eng_precision precision_of(const cfg_node *config)
{
    const cfg_node *amp = cfg_get(config, "MODEL.AMP_PARAMS.USE_AMP");
    return amp && amp->kind == CFG_BOOL && amp->b ? ENG_BF16 : ENG_FP32;
}

bool model_backend_open(const cfg_node *config, int threads, int local_rank, eng_backend **be, cfg_err *err)
{
    const char *device = cfg_str(config, "MACHINE.DEVICE"), *name = model_backend_for_device(device);
    const cfg_node *wino = cfg_get(config, "MACHINE.CPU_WINOGRAD");
    eng_backend_options bo = {.threads = threads, .seed = (uint64_t)cfg_int(config, "SEED_VALUE"),
                              .device = local_rank, .deterministic = true, .precision = precision_of(config),
                              .winograd = wino && wino->kind == CFG_BOOL && wino->b};
    char *why = NULL;
    *be = name ? eng_backend_open(name, &bo, &why) : NULL;
    if (*be)
        return true;
    const cfg_node *at = cfg_get(config, "MACHINE.DEVICE");
    if (!name)
        cfg_fail(err, at, "config.MACHINE.DEVICE", "'%s': the devices are cpu and gpu", device);
    else if (strcmp(name, "cuda") == 0 && why && strstr(why, "unknown backend"))
        cfg_fail(err, at, "config.MACHINE.DEVICE",
                 "gpu: this build has no GPU backend (it was built where nvcc was missing); set MACHINE.DEVICE=cpu "
                 "or rebuild with CUDA");
    else
        cfg_fail(err, at, "config.MACHINE.DEVICE", "%s: %s; set MACHINE.DEVICE=cpu to run on the cpu", device,
                 why ? why : "cannot open the backend");
    free(why);
    return false;
}

/* WEIGHTS_INIT.PARAMS_FILE read into the model as the run will read it, on the cpu (one
 * thread) whatever the device: the file's names and shapes against the model's are the check
 * (weights.h), and a GPU need not be there to make it. */
static bool check_weights_file(const cfg_node *mc, const model_options *mo, model_weights_init *wi,
                               cfg_err *err)
{
    if (!wi->opt.params_file || !wi->opt.params_file[0])
        return true;
    char *why = NULL;
    eng_backend *cpu = eng_backend_open("cpu", &(eng_backend_options){.threads = 1}, &why);
    model *m = cpu ? model_new(cpu, mo, 0, &why) : NULL;
    bool ok = m && model_load_weights(cpu, m, wi, &why) == 0;
    if (m)
        model_free(cpu, m);
    if (cpu)
        eng_backend_close(cpu);
    if (!ok)
        cfg_fail(err, mc, "config.MODEL", "%s", why ? why : "cannot build the model");
    free(why);
    return ok;
}

bool model_check_config(const cfg_node *config, int local_rank, cfg_err *err)
{
    const cfg_node *mc = cfg_get(config, "MODEL");
    model_options mo;
    model_weights_init wi;
    eng_backend *be = NULL;
    if (!model_options_from_config(mc, &mo, err) || !model_weights_init_from_config(mc, &mo, &wi, err) ||
        !check_weights_file(mc, &mo, &wi, err) ||
        !model_backend_open(config, 1, local_rank, &be, err)) /* one cpu thread is enough to open it */
        return false;
    eng_backend_close(be);
    return true;
}

bool model_build_from_config(const cfg_node *config, int threads, int local_rank, eng_backend **be, model **m,
                             cfg_err *err)
{
    model_options mo;
    model_weights_init wi;
    const cfg_node *mc = cfg_get(config, "MODEL");
    *be = NULL;
    *m = NULL;
    if (!model_options_from_config(mc, &mo, err) || !model_weights_init_from_config(mc, &mo, &wi, err))
        return false;
    uint64_t seed = (uint64_t)cfg_int(config, "SEED_VALUE");
    if (!model_backend_open(config, threads, local_rank, be, err))
        return false;
    char *why = NULL;
    *m = model_new(*be, &mo, seed, &why);
    if (*m && model_load_weights(*be, *m, &wi, &why) != 0) {
        model_free(*be, *m);
        *m = NULL;
    }
    if (*m)
        return true;
    cfg_fail(err, mc, "config.MODEL", "%s", why ? why : "cannot build the model");
    free(why);
    if (*be)
        eng_backend_close(*be);
    *be = NULL;
    return false;
}
