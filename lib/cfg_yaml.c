/*
 * cfg_yaml.c — YAML text to config tree and back, through libyaml.
 *
 * Loading uses libyaml's document API, then converts its node graph into our tree, keeping
 * each node's line. Plain scalars are resolved the way VISSL's stack (PyYAML + OmegaConf)
 * resolves them: YAML 1.1 null/bool/int, and OmegaConf's float rule, under which `1e-5` is
 * a float (plain YAML 1.1 would make it a string). Quoted scalars are always strings.
 *
 * Untrusted input is bounded: nesting deeper than MAX_DEPTH and alias expansion beyond
 * MAX_NODES are errors, so neither a recursive alias nor a "billion laughs" file can
 * exhaust memory.
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

enum { MAX_DEPTH = 64, MAX_NODES = 1000000 };

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

/* ---- libyaml document -> tree ------------------------------------------------------------ */

typedef struct {
    yaml_document_t *doc;
    const char *file;
    size_t budget; /* nodes left before we call it an alias bomb */
    cfg_err *err;
} loader;

static cfg_node *convert(loader *ld, yaml_node_t *yn, int depth);

static bool tag_is(const yaml_node_t *yn, const char *suffix)
{
    static const char prefix[] = "tag:yaml.org,2002:";
    const char *tag = (const char *)yn->tag;
    return tag && !strncmp(tag, prefix, sizeof prefix - 1) && !strcmp(tag + sizeof prefix - 1, suffix);
}

static cfg_node *convert_scalar(loader *ld, yaml_node_t *yn, int line)
{
    const char *text = (const char *)yn->data.scalar.value;
    if (strlen(text) != yn->data.scalar.length) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: NUL byte inside a scalar", ld->file, line);
        return NULL;
    }
    bool plain = yn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (tag_is(yn, "str"))
        return plain ? resolve_plain(text, ld->file, line) : cfg_new_str(text, ld->file, line);
    cfg_node *n = resolve_plain(text, ld->file, line);
    /* An explicit core tag on a scalar: the resolved kind must agree with it. */
    static const struct { const char *tag; cfg_kind kind; } tags[] = {
        {"int", CFG_INT}, {"float", CFG_FLOAT}, {"bool", CFG_BOOL}, {"null", CFG_NULL}};
    for (size_t k = 0; k < ARRAY_LEN(tags); k++) {
        if (!tag_is(yn, tags[k].tag))
            continue;
        if (n->kind == CFG_INT && tags[k].kind == CFG_FLOAT) {
            n->kind = CFG_FLOAT;
            n->f = (double)n->i;
        }
        if (n->kind != tags[k].kind) {
            cfg_fail(ld->err, NULL, NULL, "%s:%d: '%s' is not a valid !!%s", ld->file, line,
                     text, tags[k].tag);
            cfg_free(n);
            return NULL;
        }
        return n;
    }
    cfg_fail(ld->err, NULL, NULL, "%s:%d: unsupported YAML tag '%s' (only plain YAML values are allowed)",
             ld->file, line, yn->tag ? (const char *)yn->tag : "?");
    cfg_free(n);
    return NULL;
}

static cfg_node *convert_list(loader *ld, yaml_node_t *yn, int line, int depth)
{
    cfg_node *list = cfg_new(CFG_LIST, ld->file, line);
    for (yaml_node_item_t *it = yn->data.sequence.items.start; it < yn->data.sequence.items.top; it++) {
        cfg_node *item = convert(ld, yaml_document_get_node(ld->doc, *it), depth + 1);
        if (!item) {
            cfg_free(list);
            return NULL;
        }
        cfg_list_push(list, item);
    }
    return list;
}

/* `<<: *anchor` (or a list of anchors) adds the keys the map does not set itself. */
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
            if (!cfg_map_get(map, srcs[k]->keys[j]))
                cfg_map_set(map, srcs[k]->keys[j], cfg_copy(srcs[k]->items[j]));
    }
    return true;
}

static cfg_node *convert_map(loader *ld, yaml_node_t *yn, int line, int depth)
{
    cfg_node *map = cfg_new(CFG_MAP, ld->file, line);
    cfg_node *merge = NULL;
    for (yaml_node_pair_t *p = yn->data.mapping.pairs.start; p < yn->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(ld->doc, p->key);
        int kline = (int)kn->start_mark.line + 1;
        if (kn->type != YAML_SCALAR_NODE) {
            cfg_fail(ld->err, NULL, NULL, "%s:%d: map keys must be plain names", ld->file, kline);
            goto fail;
        }
        const char *key = (const char *)kn->data.scalar.value;
        cfg_node *value = convert(ld, yaml_document_get_node(ld->doc, p->value), depth + 1);
        if (!value)
            goto fail;
        if (!strcmp(key, "<<") && kn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            cfg_free(merge);
            merge = value;
            continue;
        }
        if (cfg_map_get(map, key)) {
            cfg_fail(ld->err, NULL, NULL, "%s:%d: key '%s' appears twice in the same map",
                     ld->file, kline, key);
            cfg_free(value);
            goto fail;
        }
        value->line = value->line ? value->line : kline;
        cfg_map_set(map, key, value);
    }
    if (merge && !apply_merge_key(ld, map, merge, line))
        goto fail;
    cfg_free(merge);
    return map;
fail:
    cfg_free(merge);
    cfg_free(map);
    return NULL;
}

static cfg_node *convert(loader *ld, yaml_node_t *yn, int depth)
{
    if (!yn) {
        cfg_fail(ld->err, NULL, NULL, "%s: broken YAML node graph", ld->file);
        return NULL;
    }
    int line = (int)yn->start_mark.line + 1;
    if (depth > MAX_DEPTH) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: nesting deeper than %d levels (a recursive alias?)",
                 ld->file, line, MAX_DEPTH);
        return NULL;
    }
    if (ld->budget-- == 0) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: the document expands to more than %d nodes (alias bomb?)",
                 ld->file, line, MAX_NODES);
        return NULL;
    }
    if (yn->type == YAML_SEQUENCE_NODE && yn->tag && !tag_is(yn, "seq")) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: unsupported YAML tag '%s' (only plain YAML values are allowed)",
                 ld->file, line, (const char *)yn->tag);
        return NULL;
    }
    if (yn->type == YAML_MAPPING_NODE && yn->tag && !tag_is(yn, "map")) {
        cfg_fail(ld->err, NULL, NULL, "%s:%d: unsupported YAML tag '%s' (only plain YAML values are allowed)",
                 ld->file, line, (const char *)yn->tag);
        return NULL;
    }
    switch (yn->type) {
    case YAML_SCALAR_NODE:
        return convert_scalar(ld, yn, line);
    case YAML_SEQUENCE_NODE:
        return convert_list(ld, yn, line, depth);
    case YAML_MAPPING_NODE:
        return convert_map(ld, yn, line, depth);
    default:
        cfg_fail(ld->err, NULL, NULL, "%s:%d: empty YAML node", ld->file, line);
        return NULL;
    }
}

cfg_node *cfg_parse_yaml(const char *text, size_t len, const char *file, cfg_err *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        cfg_fail(err, NULL, NULL, "%s: cannot initialise the YAML parser", file);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    cfg_node *root = NULL;
    if (!yaml_parser_load(&parser, &doc)) {
        cfg_fail(err, NULL, NULL, "%s:%zu:%zu: invalid YAML: %s%s%s", file,
                 parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                 parser.problem ? parser.problem : "syntax error",
                 parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return NULL;
    }
    yaml_node_t *top = yaml_document_get_root_node(&doc);
    if (!top) {
        root = cfg_new(CFG_MAP, file, 1); /* an empty file is an empty config */
    } else {
        loader ld = {&doc, cfg_intern(file), MAX_NODES, err};
        root = convert(&ld, top, 0);
    }
    yaml_document_delete(&doc);
    if (root) {
        /* A second document would be silently ignored by a careless loader: refuse it. */
        yaml_document_t next;
        if (!yaml_parser_load(&parser, &next)) {
            cfg_fail(err, NULL, NULL, "%s:%zu: invalid YAML after the first document: %s", file,
                     parser.problem_mark.line + 1, parser.problem ? parser.problem : "syntax error");
            cfg_free(root);
            root = NULL;
        } else {
            bool more = yaml_document_get_root_node(&next) != NULL;
            yaml_document_delete(&next);
            if (more) {
                cfg_fail(err, NULL, NULL, "%s: more than one YAML document ('---'); a config is one document", file);
                cfg_free(root);
                root = NULL;
            }
        }
    }
    yaml_parser_delete(&parser);
    return root;
}

cfg_node *cfg_load_yaml_file(const char *path, cfg_err *err)
{
    size_t len;
    char *text = read_whole_file(path, &len);
    if (!text) {
        cfg_fail(err, NULL, NULL, "%s: cannot read: %s", path, strerror(errno));
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
