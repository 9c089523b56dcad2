/*
 * cfg_compose.c — defaults.yaml <- config file(s) <- command-line overrides.
 *
 * defaults.yaml is kept untouched as the schema; composition edits a copy of it. Every
 * value that enters the copy is checked against the schema node at the same path:
 *   - a key must exist in the schema, unless its parent map is open (`{}` in defaults.yaml,
 *     or listed in OPEN_MAPS) or it is added on the command line with `+`;
 *   - the value must have the default's type (a float key takes ints, a string key takes
 *     numbers, a null default takes anything; list items are checked against the type of
 *     the default list's items).
 * Maps merge key by key; lists and scalars are replaced whole, as OmegaConf does.
 *
 * Hydra's order is kept: config files first (the primary config, then `+config/GROUP=NAME`
 * group files in command-line order), then value overrides in command-line order.
 */
#include "config.h"

#include "log.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Maps whose defaults are not empty but whose keys are free-form keyword arguments. */
static const char *const OPEN_MAPS[] = {
    "config.MODEL.AMP_PARAMS.AMP_ARGS",
};

/* Open maps whose keys VISSL's own command lines set without '+': the trunks' parameter maps
 * (VISSL's documentation trains RegNets with config.MODEL.TRUNK.TRUNK_PARAMS.REGNET.name=…).
 * The model checks their keys against the trunk's parameter list (nn/model_config.c). */
static const char *const KEYWORD_MAPS[] = {
    "config.MODEL.TRUNK.TRUNK_PARAMS.REGNET", "config.MODEL.TRUNK.TRUNK_PARAMS.EFFICIENT_NETS",
    "config.MODEL.TRUNK.REGNET", "config.MODEL.TRUNK.EFFICIENT_NETS",
};

static bool is_keyword_map(const char *path)
{
    for (size_t k = 0; k < ARRAY_LEN(KEYWORD_MAPS); k++)
        if (!strcmp(KEYWORD_MAPS[k], path))
            return true;
    return false;
}

static const char CMDLINE[] = "<command line>";

/* Mark a subtree as set by the current composition step (see cfg_node.stamp). */
static void stamp_tree(cfg_node *n, int stamp)
{
    n->stamp = stamp;
    for (size_t k = 0; k < n->len; k++)
        stamp_tree(n->items[k], stamp);
}

/* ---- schema checks ----------------------------------------------------------------------- */

static bool is_open_map(const cfg_node *schema, const char *path)
{
    if (!schema)
        return true; /* under an open map or a null default: free-form */
    if (schema->kind == CFG_NULL)
        return true;
    if (schema->kind == CFG_MAP && schema->len == 0)
        return true;
    for (size_t k = 0; k < ARRAY_LEN(OPEN_MAPS); k++)
        if (!strcmp(OPEN_MAPS[k], path))
            return true;
    return false;
}

/* The type the items of a default list must have, or NULL when any item is fine. */
static const cfg_node *list_item_schema(const cfg_node *schema_list)
{
    if (!schema_list || schema_list->kind != CFG_LIST || schema_list->len == 0)
        return NULL;
    const cfg_node *first = schema_list->items[0];
    for (size_t k = 1; k < schema_list->len; k++) {
        cfg_kind kind = schema_list->items[k]->kind;
        bool numeric_mix = (kind == CFG_INT || kind == CFG_FLOAT) &&
                           (first->kind == CFG_INT || first->kind == CFG_FLOAT);
        if (kind != first->kind && !numeric_mix)
            return NULL;
        if (kind == CFG_FLOAT)
            first = schema_list->items[k]; /* [1, 0.5] is a float list */
    }
    return first->kind == CFG_MAP || first->kind == CFG_LIST ? NULL : first;
}

static const char *type_word(cfg_kind kind)
{
    switch (kind) {
    case CFG_BOOL: return "a bool (true/false)";
    case CFG_INT: return "an integer";
    case CFG_FLOAT: return "a number";
    case CFG_STR: return "a string";
    case CFG_LIST: return "a list";
    case CFG_MAP: return "a map";
    default: return "null";
    }
}

/* Check `v` against `schema` and coerce it in place (int -> float, number -> string). */
static bool fit_type(const cfg_node *schema, cfg_node *v, const char *path, cfg_err *err)
{
    if (!schema || schema->kind == CFG_NULL)
        return true;
    bool ok;
    switch (schema->kind) {
    case CFG_BOOL:
    case CFG_INT:
    case CFG_MAP:
        ok = v->kind == schema->kind;
        break;
    case CFG_FLOAT:
        ok = v->kind == CFG_FLOAT || v->kind == CFG_INT;
        if (v->kind == CFG_INT) {
            v->kind = CFG_FLOAT;
            v->f = (double)v->i;
        }
        break;
    case CFG_STR:
        ok = v->kind == CFG_STR || v->kind == CFG_NULL || cfg_is_number(v);
        if (cfg_is_number(v)) {
            char buf[64];
            if (v->kind == CFG_INT)
                snprintf(buf, sizeof buf, "%lld", (long long)v->i);
            else
                format_double(buf, sizeof buf, v->f);
            v->s = xstrdup(buf);
            v->kind = CFG_STR;
        }
        break;
    case CFG_LIST:
        ok = v->kind == CFG_LIST;
        if (ok) {
            const cfg_node *item = list_item_schema(schema);
            for (size_t k = 0; k < v->len; k++) {
                char *ipath = xasprintf("%s.%zu", path, k);
                bool fits = fit_type(item, v->items[k], ipath, err);
                free(ipath);
                if (!fits)
                    return false;
            }
        }
        break;
    default:
        ok = true;
    }
    if (!ok) {
        char shown[64] = "";
        if (v->kind == CFG_STR)
            snprintf(shown, sizeof shown, " '%.40s'", v->s);
        cfg_fail(err, v, path, "expected %s, got %s%s", type_word(schema->kind),
                 type_word(v->kind), shown);
    }
    return ok;
}

/* "did you mean": a sibling with a close name, else the same name elsewhere in the schema,
 * the shallowest first (OPTIMIZER.num_epochs before LOSS.ibot_loss.num_epochs). */
static void find_key_at_depth(const cfg_node *n, const char *key, const char *path, int depth, char **out)
{
    if (!n || n->kind != CFG_MAP || *out)
        return;
    for (size_t k = 0; k < n->len && !*out; k++) {
        char *child = xasprintf("%s.%s", path, n->keys[k]);
        if (depth == 0 && !strcasecmp(n->keys[k], key)) {
            *out = child;
            continue;
        }
        if (depth > 0)
            find_key_at_depth(n->items[k], key, child, depth - 1, out);
        free(child);
    }
}

static bool find_key_anywhere(const cfg_node *n, const char *key, const char *path, char **out)
{
    for (int depth = 0; depth < 8 && !*out; depth++)
        find_key_at_depth(n, key, path, depth, out);
    return *out != NULL;
}

static char *suggest_key(const cfg_t *cfg, const cfg_node *schema_map, const char *parent, const char *key)
{
    if (schema_map && schema_map->kind == CFG_MAP) {
        const char *near = cfg_suggest(key, (const char *const *)schema_map->keys, schema_map->len);
        if (near)
            return *parent ? xasprintf("%s.%s", parent, near) : xstrdup(near);
    }
    char *elsewhere = NULL;
    find_key_anywhere(cfg_map_get(cfg->defaults, "config"), key, "config", &elsewhere);
    return elsewhere;
}

/* Fill err for an unknown key met in a config file. */
static void unknown_key(const cfg_t *cfg, cfg_err *err, const cfg_node *where, const cfg_node *schema_map,
                        const char *parent, const char *key)
{
    char *near = suggest_key(cfg, schema_map, parent, key);
    char *full = xasprintf("%s.%s", parent, key);
    cfg_fail(err, where, full, "unknown key '%s'%s%s%s", key, near ? "; did you mean '" : "", near ? near : "",
             near ? "'?" : "");
    free(full);
    free(near);
}

/* Merge map `src` into map `dst`; `schema` is the defaults map at the same `path`. */
static bool merge_map(cfg_t *cfg, cfg_node *dst, const cfg_node *schema, const cfg_node *src,
                      const char *path, cfg_err *err)
{
    bool open = is_open_map(schema, path);
    for (size_t k = 0; k < src->len; k++) {
        const char *key = src->keys[k];
        cfg_node *value = src->items[k];
        const cfg_node *sub_schema = schema && schema->kind == CFG_MAP ? cfg_map_get(schema, key) : NULL;
        char *sub_path = xasprintf("%s.%s", path, key);
        bool ok = true;
        cfg_node *old = cfg_map_get(dst, key);
        if (!sub_schema && !open && !old) {
            unknown_key(cfg, err, value, schema, path, key);
            ok = false;
        } else if (old && old->kind == CFG_MAP && value->kind == CFG_MAP) {
            ok = merge_map(cfg, old, sub_schema, value, sub_path, err);
        } else if (old && old->kind == CFG_MAP && value->kind == CFG_NULL && sub_schema) {
            /* `METERS: null` in VISSL's configs means "none of this": the defaults
             * (no meter, no tensorboard, ...) say the same, so they stay. */
        } else {
            cfg_node *copy = cfg_copy(value);
            ok = fit_type(sub_schema, copy, sub_path, err);
            if (ok) {
                stamp_tree(copy, cfg->stamp);
                cfg_map_set(dst, key, copy);
            } else
                cfg_free(copy);
        }
        free(sub_path);
        if (!ok)
            return false;
    }
    return true;
}

/* ---- config files ------------------------------------------------------------------------ */

bool cfg_merge_file(cfg_t *cfg, const cfg_node *file_root, const char *file, cfg_err *err)
{
    cfg->stamp++;
    if (file_root->kind != CFG_MAP) {
        cfg_fail(err, file_root, NULL, "a config file must be a map with a top-level 'config:' key");
        return false;
    }
    for (size_t k = 0; k < file_root->len; k++) {
        const char *key = file_root->keys[k];
        cfg_node *value = file_root->items[k];
        if (!strcmp(key, "config")) {
            if (value->kind == CFG_NULL)
                continue;
            if (value->kind != CFG_MAP) {
                cfg_fail(err, value, "config", "expected a map");
                return false;
            }
            if (!merge_map(cfg, cfg_map_get(cfg->root, "config"), cfg_map_get(cfg->defaults, "config"),
                           value, "config", err))
                return false;
        } else if (!strcmp(key, "engine_name")) {
            cfg_node *copy = cfg_copy(value);
            if (!fit_type(cfg_map_get(cfg->defaults, key), copy, key, err)) {
                cfg_free(copy);
                return false;
            }
            cfg_map_set(cfg->root, key, copy);
        } else if (!strcmp(key, "VERSION")) {
            if (value->kind != CFG_INT || value->i != 1) {
                cfg_fail(err, value, "VERSION", "only config VERSION 1 exists (VISSL 0.1.5)");
                return false;
            }
        } else if (!strcmp(key, "hydra")) {
            continue; /* Hydra's own settings: nothing for selfsup to do */
        } else if (!strcmp(key, "defaults")) {
            cfg_fail(err, value, "defaults", "Hydra defaults lists are not supported in config files; "
                                             "add group files with +config/GROUP=NAME on the command line");
            return false;
        } else {
            static const char *const top[] = {"config", "engine_name", "VERSION"};
            const char *near = cfg_suggest(key, top, ARRAY_LEN(top));
            cfg_fail(err, value, key, "unknown top-level key '%s' in %s%s%s%s", key, file,
                     near ? "; did you mean '" : " (a VISSL config keeps everything under 'config:')",
                     near ? near : "", near ? "'?" : "");
            return false;
        }
    }
    return true;
}

static bool merge_file_path(cfg_t *cfg, const char *path, cfg_err *err)
{
    cfg_node *root = cfg_load_yaml_file(path, err);
    if (!root)
        return false;
    bool ok = cfg_merge_file(cfg, root, path, err);
    cfg_free(root);
    return ok;
}

char *cfg_find_configs_dir(void)
{
    const char *env = getenv("SELFSUP_CONFIGS");
    if (env && *env)
        return xstrdup(env);
    char *dir = exe_dir();
    if (!dir)
        return NULL;
    static const char *const rel[] = {"../configs", "../../configs", "../share/selfsup/configs"};
    for (size_t k = 0; k < ARRAY_LEN(rel); k++) {
        char *cand = path_join(dir, rel[k]);
        char *defaults = path_join(cand, "defaults.yaml");
        bool found = path_exists(defaults);
        free(defaults);
        if (found) {
            free(dir);
            return cand;
        }
        free(cand);
    }
    free(dir);
    return NULL;
}

char *cfg_resolve_config_file(const char *configs_dir, const char *arg)
{
    if (path_exists(arg) && !path_is_dir(arg))
        return xstrdup(arg);
    if (!configs_dir || arg[0] == '/')
        return NULL;
    const char *name = arg;
    if (!strncmp(name, "config/", 7))
        name += 7;
    else if (!strncmp(name, "configs/", 8))
        name += 8;
    const char *const suffixes[] = {".yaml", ""};
    for (size_t k = 0; k < ARRAY_LEN(suffixes); k++) {
        char *rel = xasprintf("%s%s", name, suffixes[k]);
        char *cand = path_join(configs_dir, rel);
        free(rel);
        if (path_exists(cand) && !path_is_dir(cand))
            return cand;
        free(cand);
    }
    return NULL;
}

/* ---- overrides --------------------------------------------------------------------------- */

typedef enum { OV_SET, OV_ADD, OV_FORCE, OV_DELETE } override_op;

typedef struct {
    override_op op;
    char *key;
    const char *value; /* points into the override text; NULL for a bare ~key */
    const char *text;  /* the whole override, for messages */
    int index;         /* 1-based position on the command line */
} override;

/* An error about one override: "override #N 'TEXT': ...". */
static void ov_fail(cfg_err *err, const override *ov, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ov_fail(cfg_err *err, const override *ov, const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    cfg_fail(err, NULL, NULL, "override #%d '%s': %s", ov->index, ov->text, sb_str(&sb));
    sb_free(&sb);
}

static bool split_override(const char *text, override *ov, int index, cfg_err *err)
{
    const char *p = text;
    ov->op = OV_SET;
    ov->text = text;
    ov->index = index;
    if (!strncmp(p, "++", 2))
        ov->op = OV_FORCE, p += 2;
    else if (*p == '+')
        ov->op = OV_ADD, p += 1;
    else if (*p == '~')
        ov->op = OV_DELETE, p += 1;
    const char *eq = strchr(p, '=');
    size_t klen = eq ? (size_t)(eq - p) : strlen(p);
    while (klen && (p[klen - 1] == ' '))
        klen--;
    ov->key = xstrndup(p, klen);
    ov->value = eq ? eq + 1 : NULL;
    if (!*ov->key || strspn(ov->key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-@+") != klen) {
        ov_fail(err, ov, "'%s' is not a valid key (expected KEY=VALUE, e.g. config.OPTIMIZER.num_epochs=100)",
                ov->key);
        free(ov->key);
        return false;
    }
    if (!eq && ov->op != OV_DELETE) {
        ov_fail(err, ov, "missing '=' (expected KEY=VALUE, e.g. config.OPTIMIZER.num_epochs=100)");
        free(ov->key);
        return false;
    }
    return true;
}

static bool is_group_key(const char *key)
{
    return !strcmp(key, "config") || strchr(key, '/') != NULL;
}

/* `config=NAME` (primary config) and `+config/GROUP=NAME` (group file). */
static bool apply_group(cfg_t *cfg, const override *ov, cfg_err *err)
{
    bool primary = !strcmp(ov->key, "config");
    if (!primary && ov->op != OV_ADD && ov->op != OV_FORCE) {
        ov_fail(err, ov, "config group '%s' is not in the defaults list; add it with a leading '+': +%s", ov->key,
                ov->text);
        return false;
    }
    const char *group = ov->key;
    if (!strncmp(group, "config/", 7))
        group += 7;
    else if (!strcmp(group, "config"))
        group = "";
    char *rel = *group ? xasprintf("%s/%s", group, ov->value) : xstrdup(ov->value);
    char *path = cfg_resolve_config_file(cfg->configs_dir, rel);
    if (!path) {
        ov_fail(err, ov, "no config file '%s.yaml' under %s", rel, cfg->configs_dir);
        free(rel);
        return false;
    }
    free(rel);
    bool ok = merge_file_path(cfg, path, err);
    free(path);
    return ok;
}

/* Walk `key` (dotted) down the working tree and the schema; returns the parent node (a map,
 * or a list when the last step is an index) and sets *leaf and *schema_parent. */
static cfg_node *walk_to_parent(cfg_t *cfg, const override *ov, bool create, const cfg_node **schema_parent,
                                char **leaf, cfg_err *err)
{
    const char *key = ov->key;
    cfg_node *n = cfg->root;
    const cfg_node *s = cfg->defaults;
    const char *p = key;
    for (;;) {
        const char *dot = strchr(p, '.');
        if (!dot) {
            *leaf = xstrdup(p);
            *schema_parent = s;
            return n;
        }
        char *step = xstrndup(p, (size_t)(dot - p));
        char *parent = xstrndup(key, (size_t)(p - key - (p > key)));
        char *upto = xstrndup(key, (size_t)(dot - key)); /* parent.step, for messages */
        cfg_node *child = n->kind == CFG_MAP ? cfg_map_get(n, step) : cfg_path(n, step);
        if (!child && create && n->kind == CFG_MAP) {
            child = cfg_new(CFG_MAP, CMDLINE, 0);
            cfg_map_set(n, step, child);
        }
        if (!child) {
            char *near = n == cfg->root ? xasprintf("config.%s", key) : suggest_key(cfg, s, parent, step);
            if (n == cfg->root && !cfg_path(cfg->root, near)) {
                free(near);
                near = NULL;
            }
            ov_fail(err, ov, "unknown key '%s'%s%s%s", upto, near ? "; did you mean '" : "", near ? near : "",
                    near ? "'?" : (n == cfg->root ? " (VISSL keys start with 'config.')" : ""));
            free(near);
        } else if (child->kind != CFG_MAP && child->kind != CFG_LIST) {
            ov_fail(err, ov, "'%s' is a %s, not a map", upto, cfg_kind_name(child->kind));
            child = NULL;
        }
        s = s && s->kind == CFG_MAP ? cfg_map_get(s, step) : NULL;
        free(step);
        free(parent);
        free(upto);
        if (!child)
            return NULL;
        n = child;
        p = dot + 1;
    }
}

/* Values from the command line name their override as their source, so later errors
 * (an unknown loss, a bad schedule) point at it. */
static void set_source(cfg_node *n, const char *source)
{
    n->file = source;
    n->line = 0;
    for (size_t k = 0; k < n->len; k++)
        set_source(n->items[k], source);
}

/* A place in the working tree: the parent node, the last key, and the schema beside them. */
typedef struct {
    cfg_node *parent;
    char *leaf;
    cfg_node *old;                /* the current value, if any */
    const cfg_node *schema_parent;
    const cfg_node *schema;       /* the default at this place, if any */
} slot;

static bool delete_value(const override *ov, const slot *at, cfg_err *err)
{
    if (!at->old)
        ov_fail(err, ov, "cannot delete '%s': no such key", ov->key);
    else if (at->schema)
        ov_fail(err, ov, "'%s' is a VISSL key that selfsup needs; set it instead of deleting it", ov->key);
    else if (at->parent->kind != CFG_MAP)
        ov_fail(err, ov, "cannot delete a list item");
    else
        return cfg_map_del(at->parent, at->leaf);
    return false;
}

/* Hydra's rules: `key=` needs the key, `+key=` needs it absent, `++key=` takes either. */
static bool may_set(cfg_t *cfg, const override *ov, const slot *at, cfg_err *err)
{
    if (ov->op == OV_SET && !at->old) {
        char *parent_path = cfg_path_parent(ov->key);
        if (is_keyword_map(parent_path)) {
            free(parent_path);
            return true;
        }
        char *near = suggest_key(cfg, at->schema_parent, parent_path, at->leaf);
        if (near && !strcmp(near, ov->key))
            ov_fail(err, ov, "'%s' is no longer in the config: an earlier value replaced the map that held it",
                    ov->key);
        else
            ov_fail(err, ov, "no key '%s' in the config%s%s%s (to add a new key, write +%s)", ov->key,
                    near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", ov->text);
        free(near);
        free(parent_path);
        return false;
    }
    if (ov->op == OV_ADD && at->old) {
        ov_fail(err, ov, "'%s' already exists; set it without '+' (%s=%s)", ov->key, ov->key, ov->value);
        return false;
    }
    if (!at->schema && !at->old && at->schema_parent && at->schema_parent->kind == CFG_MAP && at->schema_parent->len)
        cfg_warn(cfg, "%s is not a VISSL or selfsup key: it is kept in the config but nothing reads it", ov->key);
    return true;
}

/* Put `value` (owned) at the slot: a map merges into a map (Hydra updates with merge=True,
 * for `=` and `++` alike); anything else replaces. */
static bool store_value(cfg_t *cfg, const override *ov, const slot *at, cfg_node *value, cfg_err *err)
{
    if (at->old && at->old->kind == CFG_MAP && value->kind == CFG_MAP) {
        bool ok = merge_map(cfg, at->old, at->schema, value, ov->key, err);
        cfg_free(value);
        return ok;
    }
    if (!fit_type(at->schema, value, ov->key, err)) {
        cfg_free(value);
        return false;
    }
    stamp_tree(value, cfg->stamp);
    if (at->parent->kind == CFG_MAP) {
        cfg_map_set(at->parent, at->leaf, value);
    } else {
        size_t idx = (size_t)strtoul(at->leaf, NULL, 10);
        cfg_free(at->parent->items[idx]);
        at->parent->items[idx] = value;
    }
    return true;
}

static bool apply_value(cfg_t *cfg, const override *ov, cfg_err *err)
{
    if (!strncmp(ov->key, "hydra.", 6) || !strcmp(ov->key, "hydra")) {
        log_debug("ignoring Hydra setting %s", ov->text);
        return true;
    }
    slot at = {0};
    at.parent = walk_to_parent(cfg, ov, ov->op == OV_ADD || ov->op == OV_FORCE, &at.schema_parent, &at.leaf, err);
    if (!at.parent)
        return false;
    at.old = cfg_path(at.parent, at.leaf);
    at.schema = at.schema_parent && at.schema_parent->kind == CFG_MAP ? cfg_map_get(at.schema_parent, at.leaf) : NULL;
    bool ok = false;
    cfg_node *value;
    if (at.parent->kind != CFG_MAP && !(at.parent->kind == CFG_LIST && at.old)) {
        ov_fail(err, ov, "cannot set '%s' inside a %s", at.leaf, cfg_kind_name(at.parent->kind));
    } else if (ov->op == OV_DELETE) {
        ok = delete_value(ov, &at, err);
    } else if (!(value = cfg_parse_override_value(ov->value, err))) {
        char inner[sizeof err->msg];
        snprintf(inner, sizeof inner, "%s", err->msg);
        ov_fail(err, ov, "%s", inner);
    } else {
        char *source = xasprintf("override #%d '%s'", ov->index, ov->text);
        set_source(value, cfg_intern(source));
        free(source);
        if (may_set(cfg, ov, &at, err))
            ok = store_value(cfg, ov, &at, value, err);
        else
            cfg_free(value);
    }
    free(at.leaf);
    return ok;
}

bool cfg_apply_override(cfg_t *cfg, const char *text, int index, cfg_err *err)
{
    cfg->stamp++;
    override ov;
    if (!split_override(text, &ov, index, err))
        return false;
    bool ok = is_group_key(ov.key) ? apply_group(cfg, &ov, err) : apply_value(cfg, &ov, err);
    free(ov.key);
    return ok;
}

/* ---- the whole composition --------------------------------------------------------------- */

void cfg_warn(cfg_t *cfg, const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    cfg->warnings = xrealloc(cfg->warnings, (cfg->n_warnings + 1) * sizeof *cfg->warnings);
    cfg->warnings[cfg->n_warnings++] = sb.s ? sb.s : xstrdup("");
}

static bool load_defaults(cfg_t *cfg, cfg_err *err)
{
    char *path = path_join(cfg->configs_dir, "defaults.yaml");
    cfg->defaults = cfg_load_yaml_file(path, err);
    free(path);
    if (!cfg->defaults)
        return false;
    cfg_node *config = cfg_map_get(cfg->defaults, "config");
    if (cfg->defaults->kind != CFG_MAP || !config || config->kind != CFG_MAP) {
        cfg_fail(err, cfg->defaults, NULL, "defaults.yaml must be a map with a 'config:' tree");
        return false;
    }
    cfg->root = cfg_copy(cfg->defaults);
    return true;
}

/* Hydra composes files before values: group overrides first, in order, then the rest. */
static bool apply_overrides(cfg_t *cfg, int n, char *const *overrides, bool groups, cfg_err *err)
{
    for (int k = 0; k < n; k++) {
        override ov;
        if (!split_override(overrides[k], &ov, k + 1, err))
            return false;
        bool group = is_group_key(ov.key);
        free(ov.key);
        if (group == groups && !cfg_apply_override(cfg, overrides[k], k + 1, err))
            return false;
    }
    return true;
}

bool cfg_compose(cfg_t *cfg, const cfg_options *opt, const char *file, int n_overrides,
                 char *const *overrides, cfg_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->configs_dir = opt && opt->configs_dir ? xstrdup(opt->configs_dir) : cfg_find_configs_dir();
    if (!cfg->configs_dir) {
        cfg_fail(err, NULL, NULL, "cannot find the configs directory (with defaults.yaml); set SELFSUP_CONFIGS");
        return false;
    }
    if (!load_defaults(cfg, err))
        return false;
    if (file && !merge_file_path(cfg, file, err))
        return false;
    if (!apply_overrides(cfg, n_overrides, overrides, true, err) ||
        !apply_overrides(cfg, n_overrides, overrides, false, err))
        return false;
    cfg_options defaults_opt = {0};
    return cfg_infer(cfg, err) && cfg_check(cfg, opt ? opt : &defaults_opt, err);
}

void cfg_destroy(cfg_t *cfg)
{
    cfg_free(cfg->root);
    cfg_free(cfg->defaults);
    free(cfg->configs_dir);
    for (size_t k = 0; k < cfg->n_warnings; k++)
        free(cfg->warnings[k]);
    free(cfg->warnings);
    memset(cfg, 0, sizeof *cfg);
}

bool cfg_compose_arg(cfg_t *cfg, bool check_paths, const char *arg, int n_overrides, char *const *overrides,
                     cfg_err *err)
{
    cfg_options opt = {.check_paths = check_paths};
    char *dir = cfg_find_configs_dir();
    opt.configs_dir = dir;
    char *file = arg && dir ? cfg_resolve_config_file(dir, arg) : NULL;
    if (arg && !file)
        file = xstrdup(arg);
    bool ok = cfg_compose(cfg, &opt, file, n_overrides, overrides, err);
    free(file);
    free(dir);
    return ok;
}
