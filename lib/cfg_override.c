/*
 * cfg_override.c — values of Hydra command-line overrides ("key=VALUE").
 *
 * The grammar is Hydra's, not YAML's (so `{a:1}` is a dict and `a b` is one string):
 *
 *     value     := element | ""                      (an empty value is the empty string)
 *     element   := list | dict | quoted | primitive
 *     list      := '[' [element (',' element)*] ']'
 *     dict      := '{' [key ':' element (',' key ':' element)*] '}'
 *     quoted    := '...' | "..."                     (\' \" \\ escape)
 *     primitive := text up to , ] } — typed like Hydra: null, true/false (any case),
 *                  int, float (incl. 1e-5, inf, nan), else a string
 *
 * Hydra's sweeps (a,b and choice()/range()) start several runs; selfsup runs one config at
 * a time, so they are refused with a message that says so.
 */
#include "cfg_internal.h"

#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>




enum { MAX_VALUE_DEPTH = 64 };

typedef struct {
    const char *text; /* the whole value, for messages */
    const char *p;
    cfg_err *err;
    bool failed;
} vparser;

static const char OVERRIDE_FILE[] = "<command line>";

static void vfail(vparser *vp, const char *what)
{
    if (vp->failed)
        return;
    vp->failed = true;
    cfg_fail(vp->err, NULL, NULL, "value '%s': %s (at column %d)", vp->text, what,
             (int)(vp->p - vp->text) + 1);
}

static void skip_ws(vparser *vp)
{
    while (*vp->p == ' ' || *vp->p == '\t')
        vp->p++;
}

static cfg_node *parse_element(vparser *vp, int depth);

static char *parse_quoted_text(vparser *vp)
{
    char q = *vp->p++;
    strbuf sb = {0};
    while (*vp->p && *vp->p != q) {
        if (vp->p[0] == '\\' && (vp->p[1] == q || vp->p[1] == '\\'))
            vp->p++;
        sb_putc(&sb, *vp->p++);
    }
    if (*vp->p != q) {
        vfail(vp, "unterminated quoted string");
        sb_free(&sb);
        return NULL;
    }
    vp->p++;
    return sb.s ? sb.s : xstrdup("");
}

static cfg_node *typed_primitive(const char *t)
{
    int64_t iv;
    double fv;
    if (!strcasecmp(t, "null"))
        return cfg_new(CFG_NULL, OVERRIDE_FILE, 0);
    if (!strcasecmp(t, "true") || !strcasecmp(t, "false"))
        return cfg_new_bool(!strcasecmp(t, "true"), OVERRIDE_FILE, 0);
    if (cfg_text_to_int(t, &iv) && !(t[0] == '0' && t[1]) && !(t[1] == '0' && t[2] && (t[0] == '-' || t[0] == '+')))
        return cfg_new_int(iv, OVERRIDE_FILE, 0);
    const char *u = (*t == '-' || *t == '+') ? t + 1 : t;
    if (!strcasecmp(u, "inf") || !strcasecmp(u, "nan"))
        return cfg_new_float(!strcasecmp(u, "nan") ? NAN : (*t == '-' ? -INFINITY : INFINITY), OVERRIDE_FILE, 0);
    if (cfg_text_to_float(t, &fv) && !strstr(t, ".inf") && !strstr(t, ".nan"))
        return cfg_new_float(fv, OVERRIDE_FILE, 0);
    return cfg_new_str(t, OVERRIDE_FILE, 0);
}

static cfg_node *parse_primitive(vparser *vp, int depth)
{
    const char *start = vp->p;
    while (*vp->p && !strchr(",]}", *vp->p)) {
        if (strchr("[{'\"=", *vp->p)) {
            vfail(vp, *vp->p == '=' ? "'=' inside a value: quote the value"
                                    : "unexpected character: quote strings that contain [ ] { } ' \"");
            return NULL;
        }
        if (*vp->p == '(') {
            vfail(vp, "Hydra sweep functions (choice, range, ...) are not supported: selfsup runs one config at a time");
            return NULL;
        }
        vp->p++;
    }
    if (*vp->p == ',' && depth == 0) {
        vfail(vp, "a top-level ',' is a Hydra sweep, which selfsup does not run; "
                  "run once per value, or write a list as [a, b]");
        return NULL;
    }
    const char *end = vp->p;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end == start) {
        vfail(vp, "missing value");
        return NULL;
    }
    char *t = xstrndup(start, (size_t)(end - start));
    cfg_node *n = typed_primitive(t);
    free(t);
    return n;
}

static cfg_node *parse_list(vparser *vp, int depth)
{
    cfg_node *list = cfg_new(CFG_LIST, OVERRIDE_FILE, 0);
    vp->p++; /* '[' */
    skip_ws(vp);
    if (*vp->p == ']') {
        vp->p++;
        return list;
    }
    for (;;) {
        cfg_node *item = parse_element(vp, depth + 1);
        if (!item)
            break;
        cfg_list_push(list, item);
        skip_ws(vp);
        if (*vp->p == ',') {
            vp->p++;
            continue;
        }
        if (*vp->p == ']') {
            vp->p++;
            return list;
        }
        vfail(vp, "expected ',' or ']' in a list");
        break;
    }
    cfg_free(list);
    return NULL;
}

static char *parse_dict_key(vparser *vp)
{
    skip_ws(vp);
    if (*vp->p == '\'' || *vp->p == '"')
        return parse_quoted_text(vp);
    const char *start = vp->p;
    while (isalnum((unsigned char)*vp->p) || (*vp->p && strchr("_-./$@", *vp->p)))
        vp->p++;
    if (vp->p == start) {
        vfail(vp, "expected a dict key");
        return NULL;
    }
    return xstrndup(start, (size_t)(vp->p - start));
}

static cfg_node *parse_dict(vparser *vp, int depth)
{
    cfg_node *dict = cfg_new(CFG_MAP, OVERRIDE_FILE, 0);
    vp->p++; /* '{' */
    skip_ws(vp);
    if (*vp->p == '}') {
        vp->p++;
        return dict;
    }
    for (;;) {
        char *key = parse_dict_key(vp);
        if (!key)
            break;
        skip_ws(vp);
        if (*vp->p != ':') {
            free(key);
            vfail(vp, "expected ':' after a dict key");
            break;
        }
        vp->p++;
        cfg_node *value = parse_element(vp, depth + 1);
        if (!value) {
            free(key);
            break;
        }
        if (cfg_map_get(dict, key)) {
            vfail(vp, "duplicate dict key");
            free(key);
            cfg_free(value);
            break;
        }
        cfg_map_set(dict, key, value);
        free(key);
        skip_ws(vp);
        if (*vp->p == ',') {
            vp->p++;
            continue;
        }
        if (*vp->p == '}') {
            vp->p++;
            return dict;
        }
        vfail(vp, "expected ',' or '}' in a dict");
        break;
    }
    cfg_free(dict);
    return NULL;
}

static cfg_node *parse_element(vparser *vp, int depth)
{
    if (depth > MAX_VALUE_DEPTH) {
        vfail(vp, "nested too deeply");
        return NULL;
    }
    skip_ws(vp);
    switch (*vp->p) {
    case '[':
        return parse_list(vp, depth);
    case '{':
        return parse_dict(vp, depth);
    case '\'':
    case '"': {
        char *s = parse_quoted_text(vp);
        if (!s)
            return NULL;
        cfg_node *n = cfg_new(CFG_STR, OVERRIDE_FILE, 0);
        n->s = s;
        return n;
    }
    default:
        return parse_primitive(vp, depth);
    }
}

cfg_node *cfg_parse_override_value(const char *text, cfg_err *err)
{
    vparser vp = {text, text, err, false};
    skip_ws(&vp);
    if (!*vp.p)
        return cfg_new_str("", OVERRIDE_FILE, 0);
    cfg_node *n = parse_element(&vp, 0);
    if (!n)
        return NULL;
    skip_ws(&vp);
    if (*vp.p) {
        vfail(&vp, *vp.p == ',' ? "a top-level ',' is a Hydra sweep, which selfsup does not run; "
                                  "run once per value, or write a list as [a, b]"
                                : "unexpected text after the value");
        cfg_free(n);
        return NULL;
    }
    return n;
}
