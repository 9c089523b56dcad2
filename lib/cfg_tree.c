/*
 * cfg_tree.c — the config tree: nodes, map/list editing, dotted-path lookup, typed access
 * and error formatting. See config.h for the model.
 *
 * Maps keep insertion order (VISSL users read `config show` output top to bottom, in the
 * order of defaults.yaml) and index their keys in a hash table, because although the widest
 * map of a real config has a few dozen keys, an open map (COLLATE_FUNCTION_PARAMS: {}) takes
 * whatever a file holds, and a linear search per key made loading 40,000 keys take 19 s.
 * The table lives in the allocation of `keys`, right after its `cap` pointers, so config.h's
 * node and every reader of map->keys stay as they are; only this file allocates `keys`.
 */
#include "config.h"

#include "log.h"
#include "util.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* File names are interned once and live for the whole process: nodes point at them. */
typedef struct interned {
    struct interned *next;
    char s[];
} interned;
static interned *g_interned;

const char *cfg_intern(const char *s)
{
    if (!s)
        return NULL;
    for (interned *it = g_interned; it; it = it->next)
        if (strcmp(it->s, s) == 0)
            return it->s;
    size_t n = strlen(s);
    interned *it = xmalloc(sizeof *it + n + 1);
    memcpy(it->s, s, n + 1);
    it->next = g_interned;
    g_interned = it;
    return it->s;
}

const char *cfg_kind_name(cfg_kind kind)
{
    static const char *const names[] = {"null", "bool", "int", "float", "string", "list", "map"};
    return kind <= CFG_MAP ? names[kind] : "?";
}

cfg_node *cfg_new(cfg_kind kind, const char *file, int line)
{
    cfg_node *n = xcalloc(1, sizeof *n);
    n->kind = kind;
    n->file = cfg_intern(file);
    n->line = line;
    return n;
}

cfg_node *cfg_new_str(const char *s, const char *file, int line)
{
    cfg_node *n = cfg_new(CFG_STR, file, line);
    n->s = xstrdup(s);
    return n;
}

cfg_node *cfg_new_int(int64_t v, const char *file, int line)
{
    cfg_node *n = cfg_new(CFG_INT, file, line);
    n->i = v;
    return n;
}

cfg_node *cfg_new_float(double v, const char *file, int line)
{
    cfg_node *n = cfg_new(CFG_FLOAT, file, line);
    n->f = v;
    return n;
}

cfg_node *cfg_new_bool(bool v, const char *file, int line)
{
    cfg_node *n = cfg_new(CFG_BOOL, file, line);
    n->b = v;
    return n;
}

cfg_node *cfg_copy(const cfg_node *n)
{
    if (!n)
        return NULL;
    cfg_node *c = cfg_new(n->kind, n->file, n->line);
    c->stamp = n->stamp;
    c->b = n->b;
    c->i = n->i;
    c->f = n->f;
    if (n->s)
        c->s = xstrdup(n->s);
    if (n->kind == CFG_MAP)
        for (size_t k = 0; k < n->len; k++)
            cfg_map_set(c, n->keys[k], cfg_copy(n->items[k]));
    if (n->kind == CFG_LIST)
        for (size_t k = 0; k < n->len; k++)
            cfg_list_push(c, cfg_copy(n->items[k]));
    return c;
}

void cfg_free(cfg_node *n)
{
    if (!n)
        return;
    for (size_t k = 0; k < n->len; k++) {
        if (n->keys)
            free(n->keys[k]);
        cfg_free(n->items[k]);
    }
    free(n->keys);
    free(n->items);
    free(n->s);
    free(n);
}

/* ---- map index: 2 × cap slots, each 0 (empty) or 1 + the position of its key ---------------- */

static uint32_t *map_slots(const cfg_node *map)
{
    return (uint32_t *)(map->keys + map->cap);
}

static size_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)h;
}

static void index_put(cfg_node *map, size_t pos)
{
    uint32_t *slots = map_slots(map);
    size_t mask = 2 * map->cap - 1; /* cap is a power of two */
    size_t h = hash_key(map->keys[pos]) & mask;
    while (slots[h])
        h = (h + 1) & mask;
    slots[h] = (uint32_t)pos + 1;
}

static void index_rebuild(cfg_node *map)
{
    memset(map_slots(map), 0, 2 * map->cap * sizeof(uint32_t));
    for (size_t k = 0; k < map->len; k++)
        index_put(map, k);
}

static void grow(cfg_node *n)
{
    if (n->len < n->cap)
        return;
    n->cap = n->cap ? n->cap * 2 : 8;
    n->items = xrealloc(n->items, n->cap * sizeof *n->items);
    if (n->kind != CFG_MAP)
        return;
    n->keys = xrealloc(n->keys, n->cap * sizeof *n->keys + 2 * n->cap * sizeof(uint32_t));
    index_rebuild(n);
}

static long map_index(const cfg_node *map, const char *key)
{
    if (!map || map->kind != CFG_MAP || !map->cap)
        return -1;
    const uint32_t *slots = map_slots(map);
    size_t mask = 2 * map->cap - 1;
    for (size_t h = hash_key(key) & mask; slots[h]; h = (h + 1) & mask)
        if (strcmp(map->keys[slots[h] - 1], key) == 0)
            return (long)slots[h] - 1;
    return -1;
}

cfg_node *cfg_map_get(const cfg_node *map, const char *key)
{
    long k = map_index(map, key);
    return k < 0 ? NULL : map->items[k];
}

void cfg_map_set(cfg_node *map, const char *key, cfg_node *value)
{
    long k = map_index(map, key);
    if (k >= 0) {
        if (map->items[k] != value)
            cfg_free(map->items[k]);
        map->items[k] = value;
        return;
    }
    grow(map);
    map->keys[map->len] = xstrdup(key);
    map->items[map->len] = value;
    index_put(map, map->len++);
}

bool cfg_map_del(cfg_node *map, const char *key)
{
    long k = map_index(map, key);
    if (k < 0)
        return false;
    free(map->keys[k]);
    cfg_free(map->items[k]);
    size_t rest = map->len - (size_t)k - 1;
    memmove(map->keys + k, map->keys + k + 1, rest * sizeof *map->keys);
    memmove(map->items + k, map->items + k + 1, rest * sizeof *map->items);
    map->len--;
    index_rebuild(map); /* the later keys moved down one place */
    return true;
}

void cfg_list_push(cfg_node *list, cfg_node *item)
{
    grow(list);
    list->items[list->len++] = item;
}

void cfg_list_del(cfg_node *list, size_t index)
{
    if (index >= list->len)
        return;
    cfg_free(list->items[index]);
    memmove(list->items + index, list->items + index + 1,
            (list->len - index - 1) * sizeof *list->items);
    list->len--;
}

/* One step of a path: a map key, or a list index. */
static cfg_node *path_step(const cfg_node *n, const char *step)
{
    if (!n)
        return NULL;
    if (n->kind == CFG_MAP)
        return cfg_map_get(n, step);
    if (n->kind == CFG_LIST) {
        char *end;
        long idx = strtol(step, &end, 10);
        if (*step == '\0' || *end != '\0' || idx < 0 || (size_t)idx >= n->len)
            return NULL;
        return n->items[idx];
    }
    return NULL;
}

cfg_node *cfg_path(const cfg_node *root, const char *path)
{
    const cfg_node *n = root;
    char step[256];
    const char *p = path;
    while (n && *p) {
        size_t k = 0;
        while (*p && *p != '.' && *p != '[' && *p != ']' && k < sizeof step - 1)
            step[k++] = *p++;
        step[k] = '\0';
        while (*p == '.' || *p == '[' || *p == ']')
            p++;
        if (k > 0)
            n = path_step(n, step);
    }
    return (cfg_node *)n;
}

const char *cfg_path_leaf(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

char *cfg_path_parent(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? xstrndup(path, (size_t)(dot - path)) : xstrdup("");
}

bool cfg_is_number(const cfg_node *n)
{
    return n && (n->kind == CFG_INT || n->kind == CFG_FLOAT);
}

bool cfg_equal(const cfg_node *a, const cfg_node *b)
{
    if (!a || !b)
        return a == b;
    if (a->kind != b->kind || a->len != b->len)
        return false;
    switch (a->kind) {
    case CFG_NULL: return true;
    case CFG_BOOL: return a->b == b->b;
    case CFG_INT: return a->i == b->i;
    case CFG_FLOAT: return a->f == b->f || (a->f != a->f && b->f != b->f);
    case CFG_STR: return strcmp(a->s, b->s) == 0;
    case CFG_LIST:
    case CFG_MAP:
        for (size_t k = 0; k < a->len; k++) {
            if (a->kind == CFG_MAP && strcmp(a->keys[k], b->keys[k]))
                return false;
            if (!cfg_equal(a->items[k], b->items[k]))
                return false;
        }
        return true;
    }
    return false;
}

double cfg_number(const cfg_node *n)
{
    return n->kind == CFG_INT ? (double)n->i : n->f;
}

static cfg_node *must_get(const cfg_node *root, const char *path, cfg_kind want)
{
    cfg_node *n = cfg_path(root, path);
    if (!n)
        die(EXIT_RUNTIME, "internal: config key %s is missing", path);
    bool ok = n->kind == want || (want == CFG_FLOAT && n->kind == CFG_INT);
    if (!ok)
        die(EXIT_RUNTIME, "internal: config key %s is a %s, expected a %s", path,
            cfg_kind_name(n->kind), cfg_kind_name(want));
    return n;
}

int64_t cfg_int(const cfg_node *root, const char *path)
{
    return must_get(root, path, CFG_INT)->i;
}

double cfg_float(const cfg_node *root, const char *path)
{
    return cfg_number(must_get(root, path, CFG_FLOAT));
}

bool cfg_bool(const cfg_node *root, const char *path)
{
    return must_get(root, path, CFG_BOOL)->b;
}

const char *cfg_str(const cfg_node *root, const char *path)
{
    return must_get(root, path, CFG_STR)->s;
}

cfg_node *cfg_get(const cfg_node *root, const char *path)
{
    cfg_node *n = cfg_path(root, path);
    if (!n)
        die(EXIT_RUNTIME, "internal: config key %s is missing", path);
    return n;
}

/* How far `word` is from `cand`: the edit distance, but a typo'd prefix or suffix of a
 * long name ("simclr_info_nce" for "simclr_info_nce_loss") counts as one edit. */
static size_t suggestion_distance(const char *word, const char *cand, size_t limit)
{
    size_t lw = strlen(word), lc = strlen(cand);
    if (lw >= 4 && lc >= 4) {
        size_t shorter = lw < lc ? lw : lc;
        if (!strncasecmp(word, cand, shorter) || !strcasecmp(word + lw - shorter, cand + lc - shorter))
            return lw == lc ? 0 : 1;
    }
    return edit_distance(word, cand, limit);
}

const char *cfg_suggest(const char *word, const char *const *candidates, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    /* Allow about a third of the word to differ: catches typos, not unrelated names. */
    size_t limit = strlen(word) / 3 + 1;
    if (limit > 4)
        limit = 4;
    for (size_t k = 0; k < n; k++) {
        size_t d = suggestion_distance(word, candidates[k], limit);
        if (d <= limit && d < best_d) {
            best = candidates[k];
            best_d = d;
        }
    }
    return best;
}

void cfg_fail(cfg_err *err, const cfg_node *node, const char *key, const char *fmt, ...)
{
    if (!err)
        return;
    strbuf sb = {0};
    if (node && node->file && node->line > 0)
        sb_printf(&sb, "%s:%d: ", node->file, node->line);
    else if (node && node->file)
        sb_printf(&sb, "%s: ", node->file);
    if (key && *key)
        sb_printf(&sb, "%s: ", key);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    snprintf(err->msg, sizeof err->msg, "%s", sb_str(&sb));
    sb_free(&sb);
}
