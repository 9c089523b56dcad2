/*
 * cfg_yaml.c — YAML text to config tree and back, through libyaml.
 *
 * Every node keeps its line. Plain scalars are resolved the way VISSL's stack (PyYAML +
 * OmegaConf) resolves them: YAML 1.1 null/bool/int, and OmegaConf's float rule, under which
 * `1e-5` is a float (plain YAML 1.1 would make it a string). Quoted scalars, and scalars
 * tagged !!str, are always strings.
 *
 * Loading reads libyaml's events and builds the tree as they come, so that every limit on
 * untrusted input (cfg_internal.h) is checked while libyaml parses: a config file must be a
 * regular file of at most CFG_MAX_FILE_BYTES (a FIFO or /dev/zero is refused before it is
 * read), nesting deeper than CFG_MAX_DEPTH, more than CFG_MAX_MAP_KEYS keys in one map and
 * alias expansion beyond CFG_MAX_NODES are errors, so neither a recursive alias, a "billion
 * laughs" file nor a deep or wide one can exhaust memory or time.
 *
 * Printing goes through libyaml's emitter, which takes care of escaping; we only choose
 * styles: maps in block style, lists of scalars in flow style, and quotes on any string
 * that would otherwise read back as another type.
 */
#include "cfg_internal.h"

#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ---- scalar resolution ------------------------------------------------------------------- */

static bool is_null_text(const char *s)
{
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

static int bool_text(const char *s)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    for (size_t k = 0; k < ARRAY_LEN(yes); k++) {
        if (!strcmp(s, yes[k]))
            return 1;
        if (!strcmp(s, no[k]))
            return 0;
    }
    return -1;
}

/* Copy `s` without '_' separators (YAML 1.1 allows 1_000). */
static void strip_underscores(const char *s, char *out, size_t size)
{
    size_t k = 0;
    for (; *s && k + 1 < size; s++)
        if (*s != '_')
            out[k++] = *s;
    out[k] = '\0';
}

static bool digits(const char *s, int (*ok)(int))
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!ok((unsigned char)*s) && *s != '_')
            return false;
    return true;
}

static int is_octal(int c)
{
    return c >= '0' && c <= '7';
}

/* YAML 1.1 int: [-+]?(0|[1-9][0-9_]*), 0x[0-9a-fA-F_]+, 0[0-7_]+ (octal). */

bool cfg_text_to_int(const char *text, int64_t *out)
{
    const char *s = text;
    int base = 10;
    bool neg = false;
    if (*s == '-' || *s == '+')
        neg = *s++ == '-';
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        if (!digits(s + 2, isxdigit))
            return false;
        base = 16, s += 2;
    } else if (s[0] == '0' && s[1]) {
        if (!digits(s + 1, is_octal))
            return false;
        base = 8, s += 1;
    } else if (!isdigit((unsigned char)s[0]) || !digits(s, isdigit)) {
        return false;
    }
    char buf[128];
    strip_underscores(s, buf, sizeof buf);
    errno = 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, base);
    if (errno || *end || v > (unsigned long long)INT64_MAX + neg)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* OmegaConf's float: digits with a dot and/or an exponent, .inf, .nan. */

bool cfg_text_to_float(const char *text, double *out)
{
    const char *s = text;
    bool neg = false;
    if (*s == '-' || *s == '+')
        neg = *s++ == '-';
    if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, ".INF")) {
        *out = neg ? -INFINITY : INFINITY;
        return true;
    }
    if (s == text && (!strcmp(s, ".nan") || !strcmp(s, ".NaN") || !strcmp(s, ".NAN"))) {
        *out = NAN;
        return true;
    }
    /* mantissa: D+ '.' D*  |  '.' D+  |  D+ (then an exponent is required) */
    const char *p = s;
    size_t int_digits = 0, frac_digits = 0;
    while (isdigit((unsigned char)*p) || (*p == '_' && int_digits)) {
        int_digits += *p != '_';
        p++;
    }
    bool dot = *p == '.';
    if (dot) {
        p++;
        while (isdigit((unsigned char)*p) || (*p == '_' && frac_digits)) {
            frac_digits += *p != '_';
            p++;
        }
    }
    if (!int_digits && !frac_digits)
        return false;
    bool exp = *p == 'e' || *p == 'E';
    if (exp) {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!isdigit((unsigned char)*p))
            return false;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p || (!dot && !exp))
        return false;
    char buf[128];
    strip_underscores(text, buf, sizeof buf);
    *out = strtod(buf, NULL);
    return true;
}

/* Resolve a plain scalar to the node PyYAML + OmegaConf would produce. */
static cfg_node *resolve_plain(const char *text, const char *file, int line)
{
    int64_t iv;
    double fv;
    int bv;
    if (is_null_text(text))
        return cfg_new(CFG_NULL, file, line);
    if ((bv = bool_text(text)) >= 0)
        return cfg_new_bool(bv, file, line);
    if (cfg_text_to_int(text, &iv))
        return cfg_new_int(iv, file, line);
    if (cfg_text_to_float(text, &fv))
        return cfg_new_float(fv, file, line);
    return cfg_new_str(text, file, line);
}

/* ---- libyaml events -> tree -------------------------------------------------------------- */

typedef struct {
    yaml_parser_t parser;
    const char *file;   /* interned */
    size_t budget;      /* nodes left before we call it an alias bomb */
    cfg_node *anchors;  /* anchor name -> a copy of its node, once that node is complete */
    const char *open_anchors[CFG_MAX_DEPTH + 1]; /* of the collections being read: an alias */
    int n_open;                                  /* to one of them is a recursive alias */
    cfg_err *err;
} loader;

static cfg_node *parse_node(loader *ld, yaml_event_t *ev, int depth);

/* The next event, or false with the parser's complaint in ld->err. */
static bool next_event(loader *ld, yaml_event_t *ev)
{
    if (yaml_parser_parse(&ld->parser, ev))
        return true;
    yaml_parser_t *p = &ld->parser;
    cfg_fail(ld->err, NULL, NULL, "%s:%zu:%zu: invalid YAML: %s%s%s", ld->file, p->problem_mark.line + 1,
             p->problem_mark.column + 1, p->problem ? p->problem : "syntax error", p->context ? " " : "",
             p->context ? p->context : "");
    return false;
}

/* An explicit tag; "!" alone is none (libyaml's loader gives such a node its default tag). */
static bool tagged(const yaml_char_t *tag)
{
    return tag && strcmp((const char *)tag, "!");
}

/* Whether `tag` is the core tag !!suffix. */
static bool tag_is(const yaml_char_t *tag, const char *suffix)
{
    static const char prefix[] = "tag:yaml.org,2002:";
    const char *t = (const char *)tag;
    return t && !strncmp(t, prefix, sizeof prefix - 1) && !strcmp(t + sizeof prefix - 1, suffix);
}

static cfg_node *unsupported_tag(loader *ld, const yaml_char_t *tag, int line)
{
    cfg_fail(ld->err, NULL, NULL, "%s:%d: unsupported YAML tag '%s' (only plain YAML values are allowed)",
             ld->file, line, (const char *)tag);
    return NULL;
}

/* An explicit core tag on a scalar: the resolved kind must agree with it. */
static cfg_node *check_scalar_tag(loader *ld, cfg_node *n, const yaml_event_t *ev, int line)
{
    static const struct { const char *tag; cfg_kind kind; } tags[] = {
        {"int", CFG_INT}, {"float", CFG_FLOAT}, {"bool", CFG_BOOL}, {"null", CFG_NULL}};
    const yaml_char_t *tag = ev->data.scalar.tag;
    for (size_t k = 0; k < ARRAY_LEN(tags); k++) {
        if (!tag_is(tag, tags[k].tag))
            continue;
        if (n->kind == CFG_INT && tags[k].kind == CFG_FLOAT) {
            n->kind = CFG_FLOAT;
            n->f = (double)n->i;
        }
        if (n->kind == tags[k].kind)
            return n;
        cfg_fail(ld->err, NULL, NULL, "%s:%d: '%s' is not a valid !!%s", ld->file, line,
                 (const char *)ev->data.scalar.value, tags[k].tag);
        cfg_free(n);
        return NULL;
    }
    cfg_free(n);
    return unsupported_tag(ld, tag, line);
}

static cfg_node *convert_scalar(loader *ld, const yaml_event_t *ev, int line)
{
    const char *text = (const char *)ev->data.scalar.value;
    if (strlen(text) != ev->data.scalar.length) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: NUL byte inside a scalar", ld->file, line);
        return NULL;
    }
    bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (!tagged(ev->data.scalar.tag))
        return plain ? resolve_plain(text, ld->file, line) : cfg_new_str(text, ld->file, line);
    if (tag_is(ev->data.scalar.tag, "str"))
        return cfg_new_str(text, ld->file, line);
    return check_scalar_tag(ld, resolve_plain(text, ld->file, line), ev, line);
}

/* Nodes in n's tree, counting on only while they fit in `limit`; its height in *height. */
static size_t tree_size(const cfg_node *n, size_t limit, int *height)
{
    size_t total = 1;
    *height = 0;
    for (size_t k = 0; k < n->len && total <= limit; k++) {
        int h;
        total += tree_size(n->items[k], limit - total, &h);
        *height = h + 1 > *height ? h + 1 : *height;
    }
    return total;
}

/* Spend the nodes a copy of `n` at `depth` costs: false (ld->err set) past a limit. */
static bool afford(loader *ld, const cfg_node *n, int depth, int line)
{
    int height;
    size_t size = tree_size(n, ld->budget, &height);
    if (depth + height > CFG_MAX_DEPTH) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: nesting deeper than %d levels", ld->file, line, CFG_MAX_DEPTH);
        return false;
    }
    if (size > ld->budget) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: the document expands to more than %d nodes (alias bomb?)",
                 ld->file, line, CFG_MAX_NODES);
        return false;
    }
    ld->budget -= size;
    return true;
}

static cfg_node *resolve_alias(loader *ld, const char *name, int depth, int line)
{
    for (int k = 0; k < ld->n_open; k++)
        if (ld->open_anchors[k] && !strcmp(ld->open_anchors[k], name)) {
            cfg_fail(ld->err, NULL, NULL, "%s:%d: alias *%s inside the node it names (a recursive alias)",
                     ld->file, line, name);
            return NULL;
        }
    const cfg_node *target = cfg_map_get(ld->anchors, name);
    if (!target) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: alias *%s names no anchor &%s before it", ld->file, line, name, name);
        return NULL;
    }
    return afford(ld, target, depth, line) ? cfg_copy(target) : NULL;
}

/* Keep a copy of an anchored node for the aliases to come; the copy counts as nodes too, so
 * that nested anchors cannot multiply memory behind the budget's back. */
static cfg_node *remember_anchor(loader *ld, const char *anchor, cfg_node *n, int line)
{
    if (!afford(ld, n, 0, line)) {
        cfg_free(n);
        return NULL;
    }
    cfg_map_set(ld->anchors, anchor, cfg_copy(n));
    return n;
}

/* One more value at `depth`: false (ld->err set) past the depth or node limits. */
static bool enter(loader *ld, int depth, int line)
{
    if (depth > CFG_MAX_DEPTH) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: nesting deeper than %d levels", ld->file, line, CFG_MAX_DEPTH);
        return false;
    }
    if (ld->budget == 0) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: the document expands to more than %d nodes (alias bomb?)",
                 ld->file, line, CFG_MAX_NODES);
        return false;
    }
    ld->budget--;
    return true;
}

static cfg_node *parse_list(loader *ld, int line, int depth)
{
    cfg_node *list = cfg_new(CFG_LIST, ld->file, line);
    yaml_event_t ev;
    while (next_event(ld, &ev)) {
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return list;
        }
        cfg_node *item = parse_node(ld, &ev, depth + 1);
        if (!item)
            break;
        cfg_list_push(list, item);
    }
    cfg_free(list);
    return NULL;
}

static bool too_many_keys(loader *ld, const cfg_node *map, int line)
{
    if (map->len <= CFG_MAX_MAP_KEYS)
        return false;
    cfg_fail(ld->err, NULL, NULL, "%s:%d: more than %d keys in the map that starts at line %d", ld->file, line,
             CFG_MAX_MAP_KEYS, map->line);
    return true;
}

/* `<<: *anchor` (or a list of anchors) adds the keys the map does not set itself. The merged
 * values move over: `merge` belongs to this map alone (an alias's copy, or written inline). */
static bool apply_merge_key(loader *ld, cfg_node *map, cfg_node *merge, int line)
{
    cfg_node *one[1] = {merge};
    cfg_node **srcs = merge->kind == CFG_LIST ? merge->items : one;
    size_t n = merge->kind == CFG_LIST ? merge->len : 1;
    for (size_t k = 0; k < n; k++) {
        if (srcs[k]->kind != CFG_MAP) {
            cfg_fail(ld->err, NULL, NULL, "%s:%d: a merge key '<<' needs a map or a list of maps",
                     ld->file, line);
            return false;
        }
        for (size_t j = 0; j < srcs[k]->len; j++)
            if (!cfg_map_get(map, srcs[k]->keys[j])) {
                cfg_map_set(map, srcs[k]->keys[j], srcs[k]->items[j]);
                srcs[k]->items[j] = NULL; /* cfg_free skips it */
            }
    }
    return !too_many_keys(ld, map, line);
}

/* The text of a key event, or NULL (ld->err set) when the key is not a plain name. */
static char *key_text(loader *ld, const yaml_event_t *kev, int line)
{
    if (kev->type == YAML_SCALAR_EVENT &&
        strlen((const char *)kev->data.scalar.value) == kev->data.scalar.length)
        return xstrdup((const char *)kev->data.scalar.value);
    cfg_fail(ld->err, NULL, NULL, "%s:%d: map keys must be plain names", ld->file, line);
    return NULL;
}

/* The key event `kev` (consumed) of `map` and the value that follows it. */
static bool parse_pair(loader *ld, cfg_node *map, yaml_event_t *kev, cfg_node **merge, int depth)
{
    int line = (int)kev->start_mark.line + 1;
    char *key = key_text(ld, kev, line);
    bool is_merge = key && !strcmp(key, "<<") && kev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    yaml_event_delete(kev);
    if (key && !is_merge && cfg_map_get(map, key)) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: key '%s' appears twice in the same map", ld->file, line, key);
        free(key);
        key = NULL;
    }
    yaml_event_t vev;
    cfg_node *value = key && next_event(ld, &vev) ? parse_node(ld, &vev, depth + 1) : NULL;
    if (value && is_merge) {
        cfg_free(*merge);
        *merge = value;
    } else if (value) {
        cfg_map_set(map, key, value);
    }
    free(key);
    return value && !too_many_keys(ld, map, line);
}

static cfg_node *parse_map(loader *ld, int line, int depth)
{
    cfg_node *map = cfg_new(CFG_MAP, ld->file, line), *merge = NULL;
    yaml_event_t ev;
    while (next_event(ld, &ev)) {
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            bool ok = !merge || apply_merge_key(ld, map, merge, line);
            cfg_free(merge);
            if (ok)
                return map;
            cfg_free(map);
            return NULL;
        }
        if (!parse_pair(ld, map, &ev, &merge, depth))
            break;
    }
    cfg_free(merge);
    cfg_free(map);
    return NULL;
}

/* A sequence or mapping: its items are read while its anchor counts as open. */
static cfg_node *parse_collection(loader *ld, yaml_event_t *ev, const char *anchor, int line, int depth)
{
    bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
    const yaml_char_t *tag = seq ? ev->data.sequence_start.tag : ev->data.mapping_start.tag;
    if (tagged(tag) && !tag_is(tag, seq ? "seq" : "map"))
        return unsupported_tag(ld, tag, line);
    ld->open_anchors[ld->n_open++] = anchor;
    cfg_node *n = seq ? parse_list(ld, line, depth) : parse_map(ld, line, depth);
    ld->n_open--;
    return n;
}

/* The value that starts with `ev` (consumed), read to its end. */
static cfg_node *parse_node(loader *ld, yaml_event_t *ev, int depth)
{
    int line = (int)ev->start_mark.line + 1;
    cfg_node *n = NULL;
    const yaml_char_t *anchor = ev->type == YAML_SCALAR_EVENT           ? ev->data.scalar.anchor
                                : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
                                : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.anchor
                                                                        : NULL;
    char *name = anchor ? xstrdup((const char *)anchor) : NULL;
    if (ev->type == YAML_ALIAS_EVENT)
        n = resolve_alias(ld, (const char *)ev->data.alias.anchor, depth, line);
    else if (!enter(ld, depth, line))
        n = NULL;
    else if (ev->type == YAML_SCALAR_EVENT)
        n = convert_scalar(ld, ev, line);
    else if (ev->type == YAML_SEQUENCE_START_EVENT || ev->type == YAML_MAPPING_START_EVENT)
        n = parse_collection(ld, ev, name, line, depth);
    else
        cfg_fail(ld->err, NULL, NULL, "%s:%d: empty YAML node", ld->file, line);
    yaml_event_delete(ev);
    if (n && name)
        n = remember_anchor(ld, name, n, line);
    free(name);
    return n;
}

/* After the first document: the stream must end. */
static bool stream_ends(loader *ld)
{
    yaml_event_t ev;
    if (!next_event(ld, &ev)) /* the document's end */
        return false;
    yaml_event_delete(&ev);
    if (!next_event(ld, &ev))
        return false;
    bool more = ev.type != YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev);
    if (more)
        cfg_fail(ld->err, NULL, NULL, "%s: more than one YAML document ('---'); a config is one document", ld->file);
    return !more;
}

/* A second document would be silently ignored by a careless loader: refuse it. */
static cfg_node *parse_stream(loader *ld)
{
    yaml_event_t ev;
    if (!next_event(ld, &ev)) /* the stream's start */
        return NULL;
    yaml_event_delete(&ev);
    if (!next_event(ld, &ev))
        return NULL;
    bool empty = ev.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev);
    if (empty)
        return cfg_new(CFG_MAP, ld->file, 1); /* an empty file is an empty config */
    if (!next_event(ld, &ev))
        return NULL;
    cfg_node *root = parse_node(ld, &ev, 0);
    if (root && !stream_ends(ld)) {
        cfg_free(root);
        root = NULL;
    }
    return root;
}

/* Events, not libyaml's document API: that builds the whole node graph before we could look
 * at it, so a file nested 200,000 deep took minutes before its depth error. Reading events,
 * every limit is checked as the parser reaches it. */
cfg_node *cfg_parse_yaml(const char *text, size_t len, const char *file, cfg_err *err)
{
    loader ld = {.file = cfg_intern(file), .budget = CFG_MAX_NODES, .err = err};
    if (!yaml_parser_initialize(&ld.parser)) {
        cfg_fail(err, NULL, NULL, "%s: cannot initialise the YAML parser", file);
        return NULL;
    }
    yaml_parser_set_input_string(&ld.parser, (const unsigned char *)text, len);
    ld.anchors = cfg_new(CFG_MAP, NULL, 0);
    cfg_node *root = parse_stream(&ld);
    cfg_free(ld.anchors);
    yaml_parser_delete(&ld.parser);
    return root;
}

cfg_node *cfg_load_yaml_file(const char *path, cfg_err *err)
{
    size_t len;
    char *why = NULL;
    char *text = read_regular_file(path, CFG_MAX_FILE_BYTES, &len, &why);
    if (!text) {
        cfg_fail(err, NULL, NULL, "%s", why);
        free(why);
        return NULL;
    }
    cfg_node *root = cfg_parse_yaml(text, len, path, err);
    free(text);
    return root;
}

/* ---- tree -> YAML text ------------------------------------------------------------------- */

static int write_to_strbuf(void *data, unsigned char *buffer, size_t size)
{
    sb_putn((strbuf *)data, (const char *)buffer, size);
    return 1;
}

static bool emit_scalar(yaml_emitter_t *em, const char *text, yaml_scalar_style_t style)
{
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text), 1, 1, style);
    return yaml_emitter_emit(em, &ev);
}

/* A string must be quoted when, written plain, it would read back as something else. */
static bool needs_quotes(const char *s)
{
    cfg_node *n = resolve_plain(s, NULL, 0);
    bool other = n->kind != CFG_STR;
    cfg_free(n);
    return other || !*s || !strcmp(s, "<<");
}

static size_t leaf_count(const cfg_node *n)
{
    if (n->kind != CFG_LIST && n->kind != CFG_MAP)
        return 1;
    size_t total = 0;
    for (size_t k = 0; k < n->len; k++)
        total += leaf_count(n->items[k]);
    return total;
}

/* Flow style for short lists without maps directly inside ([0.1, 0.01], [["mlp", {...}]]). */
static bool list_prefers_flow(const cfg_node *list)
{
    for (size_t k = 0; k < list->len; k++)
        if (list->items[k]->kind == CFG_MAP)
            return false;
    return leaf_count(list) <= 32;
}

static bool emit_node(yaml_emitter_t *em, const cfg_node *n, bool flow)
{
    yaml_event_t ev;
    char buf[64];
    switch (n->kind) {
    case CFG_NULL:
        return emit_scalar(em, "null", YAML_PLAIN_SCALAR_STYLE);
    case CFG_BOOL:
        return emit_scalar(em, n->b ? "true" : "false", YAML_PLAIN_SCALAR_STYLE);
    case CFG_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)n->i);
        return emit_scalar(em, buf, YAML_PLAIN_SCALAR_STYLE);
    case CFG_FLOAT:
        format_double(buf, sizeof buf, n->f);
        return emit_scalar(em, buf, YAML_PLAIN_SCALAR_STYLE);
    case CFG_STR:
        return emit_scalar(em, n->s, needs_quotes(n->s) ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE);
    case CFG_LIST:
        flow = flow || n->len == 0 || list_prefers_flow(n);
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                             flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
        if (!yaml_emitter_emit(em, &ev))
            return false;
        for (size_t k = 0; k < n->len; k++)
            if (!emit_node(em, n->items[k], flow))
                return false;
        yaml_sequence_end_event_initialize(&ev);
        return yaml_emitter_emit(em, &ev);
    case CFG_MAP:
        flow = flow || n->len == 0;
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                            flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
        if (!yaml_emitter_emit(em, &ev))
            return false;
        for (size_t k = 0; k < n->len; k++) {
            const char *key = n->keys[k];
            if (!emit_scalar(em, key, needs_quotes(key) ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE) ||
                !emit_node(em, n->items[k], flow))
                return false;
        }
        yaml_mapping_end_event_initialize(&ev);
        return yaml_emitter_emit(em, &ev);
    }
    return false;
}

char *cfg_to_yaml(const cfg_node *root)
{
    strbuf sb = {0};
    yaml_emitter_t em;
    yaml_event_t ev;
    yaml_emitter_initialize(&em);
    yaml_emitter_set_output(&em, write_to_strbuf, &sb);
    yaml_emitter_set_width(&em, 100);
    yaml_emitter_set_unicode(&em, 1);
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    bool ok = yaml_emitter_emit(&em, &ev);
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    ok = ok && yaml_emitter_emit(&em, &ev);
    ok = ok && emit_node(&em, root, false);
    yaml_document_end_event_initialize(&ev, 1);
    ok = ok && yaml_emitter_emit(&em, &ev);
    yaml_stream_end_event_initialize(&ev);
    ok = ok && yaml_emitter_emit(&em, &ev);
    yaml_emitter_delete(&em);
    if (!ok)
        sb_puts(&sb, "\n# (YAML emitter error)\n");
    return sb.s ? sb.s : xstrdup("");
}
