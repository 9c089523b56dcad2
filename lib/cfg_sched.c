/*
 * cfg_sched.c — build a lib/sched scheduler from a param_schedulers config node.
 *
 * The config keys are VISSL's (name, update_interval, values, milestones, start_value,
 * end_value, value, base_value, gamma, num_decays, schedulers, lengths, interval_scaling,
 * restart_interval_length, wave_type, lr_multiplier, is_adaptive, warmup_interval_length).
 * Every key of defaults.yaml is present in a composed config, as in VISSL, so a key the
 * scheduler kind does not use is simply ignored; a composite's children carry only what
 * the config file gave them.
 */
#include "cfg_internal.h"
#include "sched.h"

#include "util.h"

#include <stdlib.h>
#include <string.h>

static bool get_number(const cfg_node *map, const char *key, double *out)
{
    cfg_node *n = cfg_map_get(map, key);
    if (!cfg_is_number(n))
        return false;
    *out = cfg_number(n);
    return true;
}

static bool number_list(const cfg_node *list, double **out, size_t *n)
{
    if (!list || list->kind != CFG_LIST)
        return false;
    *out = xcalloc(list->len, sizeof **out);
    *n = list->len;
    for (size_t k = 0; k < list->len; k++) {
        if (!cfg_is_number(list->items[k])) {
            free(*out);
            return false;
        }
        (*out)[k] = cfg_number(list->items[k]);
    }
    return true;
}

static bool set_enum(const cfg_node *map, const char *key, const char *path, int (*from_name)(const char *, void *),
                     void *out, cfg_err *err)
{
    cfg_node *n = cfg_map_get(map, key);
    if (!n)
        return true;
    if (n->kind == CFG_STR && from_name(n->s, out) == 0)
        return true;
    cfg_fail(err, n, path, "invalid %s '%s'", key, n->kind == CFG_STR ? n->s : cfg_kind_name(n->kind));
    return false;
}

static bool build(const cfg_node *node, const char *path, int64_t num_epochs, sched *s, cfg_err *err);

static bool build_lists(const cfg_node *node, const char *path, sched *s, cfg_err *err)
{
    double *values;
    size_t n;
    cfg_node *v = cfg_map_get(node, "values");
    if (v && number_list(v, &values, &n)) {
        sched_set_values(s, values, n);
        free(values);
    } else if (v) {
        cfg_fail(err, v, path, "'values' must be a list of numbers");
        return false;
    }
    cfg_node *m = cfg_map_get(node, "milestones");
    if (m && m->kind == CFG_LIST) {
        int *milestones = xcalloc(m->len, sizeof *milestones);
        for (size_t k = 0; k < m->len; k++)
            milestones[k] = m->items[k]->kind == CFG_INT ? (int)m->items[k]->i : -1;
        sched_set_milestones(s, milestones, m->len);
        free(milestones);
    }
    cfg_node *l = cfg_map_get(node, "lengths");
    if (l && number_list(l, &values, &n)) {
        sched_set_lengths(s, values, n);
        free(values);
    }
    cfg_node *scaling = cfg_map_get(node, "interval_scaling");
    if (scaling && scaling->kind == CFG_LIST) {
        sched_interval_scaling *kinds = xcalloc(scaling->len, sizeof *kinds);
        for (size_t k = 0; k < scaling->len; k++) {
            cfg_node *item = scaling->items[k];
            if (item->kind != CFG_STR || sched_interval_scaling_from_name(item->s, &kinds[k])) {
                cfg_fail(err, item, path, "interval_scaling entries must be 'rescaled' or 'fixed'");
                free(kinds);
                return false;
            }
        }
        sched_set_interval_scaling(s, kinds, scaling->len);
        free(kinds);
    }
    return true;
}

static bool build_children(const cfg_node *node, const char *path, int64_t num_epochs, sched *s, cfg_err *err)
{
    cfg_node *list = cfg_map_get(node, "schedulers");
    if (!list || list->kind != CFG_LIST)
        return true;
    sched *children = sched_alloc_children(s, list->len);
    for (size_t k = 0; k < list->len; k++) {
        char *child_path = xasprintf("%s.schedulers.%zu", path, k);
        bool ok = list->items[k]->kind == CFG_MAP;
        if (!ok)
            cfg_fail(err, list->items[k], child_path, "each composite child must be a scheduler map with a 'name'");
        ok = ok && build(list->items[k], child_path, num_epochs, &children[k], err);
        free(child_path);
        if (!ok)
            return false;
    }
    return true;
}

static int interval_from_name(const char *name, void *out)
{
    return sched_update_interval_from_name(name, out);
}
static int wave_from_name(const char *name, void *out)
{
    return sched_wave_type_from_name(name, out);
}

static bool build(const cfg_node *node, const char *path, int64_t num_epochs, sched *s, cfg_err *err)
{
    cfg_node *name = cfg_map_get(node, "name");
    sched_kind kind;
    if (!name || name->kind != CFG_STR || sched_kind_from_name(name->s, &kind)) {
        size_t n;
        const char *const *names = cfg_known_names("scheduler", &n);
        const char *near = name && name->kind == CFG_STR ? cfg_suggest(name->s, names, n) : NULL;
        cfg_fail(err, name ? name : node, path, "unknown scheduler '%s'%s%s%s",
                 name && name->kind == CFG_STR ? name->s : "(no name)", near ? "; did you mean '" : "",
                 near ? near : "", near ? "'?" : "");
        sched_init(s, SCHED_CONSTANT);
        return false;
    }
    sched_init(s, kind);
    s->num_epochs = (int)num_epochs;
    get_number(node, "value", &s->value);
    get_number(node, "start_value", &s->start_value);
    get_number(node, "end_value", &s->end_value);
    get_number(node, "base_value", &s->base_value);
    get_number(node, "gamma", &s->gamma);
    get_number(node, "restart_interval_length", &s->restart_interval_length);
    get_number(node, "lr_multiplier", &s->lr_multiplier);
    get_number(node, "warmup_interval_length", &s->warmup_interval_length);
    double decays;
    if (get_number(node, "num_decays", &decays))
        s->num_decays = (int)decays;
    cfg_node *adaptive = cfg_map_get(node, "is_adaptive");
    s->is_adaptive = adaptive && adaptive->kind == CFG_BOOL && adaptive->b;
    return set_enum(node, "update_interval", path, interval_from_name, &s->update_interval, err) &&
           set_enum(node, "wave_type", path, wave_from_name, &s->wave_type, err) &&
           build_lists(node, path, s, err) && build_children(node, path, num_epochs, s, err);
}

/* The value to blame in an error: the scheduler map itself usually comes from defaults.yaml,
 * so point at what the user changed, a command-line override first, else the config file. */
static const cfg_node *user_set_child(const cfg_node *node)
{
    const cfg_node *from_file = NULL;
    for (size_t k = 0; k < node->len; k++) {
        const cfg_node *child = node->items[k];
        if (child->file == node->file || (child->file && !strcmp(child->file, "<inferred>")))
            continue;
        if (child->file && !strncmp(child->file, "override", 8))
            return child;
        if (!from_file)
            from_file = child;
    }
    return from_file ? from_file : node;
}

bool cfg_build_scheduler(const cfg_node *node, const char *path, int64_t num_epochs, sched *out, cfg_err *err)
{
    if (!node || node->kind != CFG_MAP) {
        cfg_fail(err, node, path, "expected a scheduler map");
        sched_init(out, SCHED_CONSTANT);
        return false;
    }
    if (!build(node, path, num_epochs, out, err))
        return false;
    char msg[512];
    if (sched_prepare(out, msg, sizeof msg)) {
        cfg_fail(err, user_set_child(node), path, "%s", msg);
        return false;
    }
    return true;
}

bool cfg_check_scheduler(const cfg_node *node, const char *path, int64_t num_epochs, cfg_err *err)
{
    sched s;
    bool ok = cfg_build_scheduler(node, path, num_epochs, &s, err);
    sched_free(&s);
    return ok;
}
