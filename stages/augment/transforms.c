/*
 * transforms.c — parse DATA.<split>.TRANSFORMS into a list of ops (see transforms.h).
 *
 * Each VISSL/torchvision transform becomes one `aug_op` with its parameters checked and
 * defaults filled in exactly as the Python constructors do; apply.c runs them. Parameters
 * a constructor would not accept are refused here, before any data moves, with the file,
 * line and key of the offending value (the caller exits 2).
 */
#include "augment/transforms_internal.h"

#define REC_BOUND_ITEMS 256

#include "npy.h"
#include "record.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading parameters ------------------------------------------------------------------ */

typedef struct {
    const cfg_node *map; /* the transform's {name: ..., params...} */
    const char *key;     /* "config.DATA.TRAIN.TRANSFORMS[3]" for messages */
    cfg_err *err;
    bool failed;
} params;

static void bad(params *pr, const cfg_node *node, const char *fmt, const char *what)
{
    if (pr->failed)
        return;
    pr->failed = true;
    cfg_fail(pr->err, node ? node : pr->map, pr->key, fmt, what);
}

/* A string parameter, or NULL when it is missing or not a string (cfg_str would die). */
static const char *str_param(const cfg_node *map, const char *key)
{
    const cfg_node *n = map && map->kind == CFG_MAP ? cfg_map_get(map, key) : NULL;
    return n && n->kind == CFG_STR ? n->s : NULL;
}

static double p_number(params *pr, const char *name, double def)
{
    const cfg_node *n = cfg_map_get(pr->map, name);
    if (!n || n->kind == CFG_NULL)
        return def;
    if (!cfg_is_number(n) || !isfinite(cfg_number(n))) {
        bad(pr, n, "%s must be a finite number", name);
        return def;
    }
    return cfg_number(n);
}

static int p_int(params *pr, const char *name, int def)
{
    const cfg_node *n = cfg_map_get(pr->map, name);
    if (!n || n->kind == CFG_NULL)
        return def;
    if (n->kind != CFG_INT || n->i < INT32_MIN || n->i > INT32_MAX) {
        bad(pr, n, "%s must be an integer", name);
        return def;
    }
    return (int)n->i;
}

static bool p_bool(params *pr, const char *name, bool def)
{
    const cfg_node *n = cfg_map_get(pr->map, name);
    if (!n || n->kind == CFG_NULL)
        return def;
    if (n->kind != CFG_BOOL) {
        bad(pr, n, "%s must be true or false", name);
        return def;
    }
    return n->b;
}

/* A list of exactly `len` numbers, or keep the defaults in out. */
static void p_numbers(params *pr, const char *name, int len, double *out)
{
    const cfg_node *n = cfg_map_get(pr->map, name);
    if (!n || n->kind == CFG_NULL)
        return;
    if (n->kind != CFG_LIST || (int)n->len != len) {
        bad(pr, n, "%s must be a list of numbers of the expected length", name);
        return;
    }
    for (int i = 0; i < len; i++) {
        if (!cfg_is_number(n->items[i]) || !isfinite(cfg_number(n->items[i]))) {
            bad(pr, n->items[i], "%s must hold finite numbers", name);
            return;
        }
        out[i] = cfg_number(n->items[i]);
    }
}

/* The largest crop or resize side: config validation's bound (MAX_CROP_SIDE in
 * lib/cfg_check.c), kept here too for pipelines built from raw YAML (tests, benchmarks). */
#define MAX_SIDE 8192
#define MAX_SIDE_TEXT "8192" /* bad() takes one string argument */

static bool side_ok(const cfg_node *n)
{
    return n->kind == CFG_INT && n->i >= 1 && n->i <= MAX_SIDE;
}

/* torchvision's `size`: an int (square, or the shorter side for Resize) or [h, w]. */
static void p_size(params *pr, const char *name, int def, int size[2], bool *is_int)
{
    const cfg_node *n = cfg_map_get(pr->map, name);
    size[0] = size[1] = def;
    if (is_int)
        *is_int = true;
    if (!n || n->kind == CFG_NULL) {
        if (def <= 0)
            bad(pr, NULL, "%s is required", name);
        return;
    }
    bool is_list = n->kind == CFG_LIST && (n->len == 1 || n->len == 2);
    if (n->kind != CFG_INT && !(is_list && n->items[0]->kind == CFG_INT && n->items[n->len - 1]->kind == CFG_INT)) {
        bad(pr, n, "%s must be an integer or a list [h, w]", name);
        return;
    }
    const cfg_node *h = is_list ? n->items[0] : n, *w = is_list ? n->items[n->len - 1] : n;
    if (!side_ok(h) || !side_ok(w)) { /* checked before the cast: 2^32 + 224 is not 224 */
        bad(pr, n, "%s must be between 1 and " MAX_SIDE_TEXT, name);
        return;
    }
    size[0] = (int)h->i;
    size[1] = (int)w->i;
    if (is_int)
        *is_int = !is_list || n->len == 1;
}

/* torchvision's interpolation: an InterpolationMode name or PIL's number. */
static img_filter p_filter(params *pr, img_filter def)
{
    const cfg_node *n = cfg_map_get(pr->map, "interpolation");
    if (!n || n->kind == CFG_NULL)
        return def;
    if (n->kind == CFG_INT && (n->i == 0 || n->i == 2 || n->i == 3))
        return (img_filter)n->i;
    if (n->kind == CFG_STR) {
        if (!strcasecmp(n->s, "bilinear"))
            return IMG_BILINEAR;
        if (!strcasecmp(n->s, "bicubic"))
            return IMG_BICUBIC;
        if (!strcasecmp(n->s, "nearest"))
            return IMG_NEAREST;
    }
    bad(pr, n, "%s must be nearest (0), bilinear (2) or bicubic (3)", "interpolation");
    return def;
}

static void p_probability(params *pr, const char *name, double def, double *out)
{
    *out = p_number(pr, name, def);
    if (*out < 0 || *out > 1)
        bad(pr, cfg_map_get(pr->map, name), "%s must be a probability in [0, 1]", name);
}

/* Refuse keys the transform's constructor does not take. */
static void check_keys(params *pr, const char *const *allowed)
{
    for (size_t i = 0; i < pr->map->len && !pr->failed; i++) {
        const char *k = pr->map->keys[i];
        if (!strcmp(k, "name") || !strcmp(k, "indices"))
            continue;
        bool ok = false;
        size_t n = 0;
        for (; allowed[n]; n++)
            ok = ok || !strcmp(k, allowed[n]);
        if (!ok) {
            const char *near = cfg_suggest(k, allowed, n);
            cfg_fail(pr->err, pr->map->items[i], pr->key, "%s does not take a parameter '%s'%s%s%s",
                     str_param(pr->map, "name"), k, near ? " (did you mean '" : "", near ? near : "",
                     near ? "'?)" : "");
            pr->failed = true;
        }
    }
}

/* ---- one parser per transform ----------------------------------------------------------- */

/* ColorJitter's argument: a number v gives [max(0, center - v), center + v]; a pair is a range. */
static void jitter_range(params *pr, const char *name, double v_default, bool hue, aug_range *out)
{
    const cfg_node *n = cfg_map_get(pr->map, name);
    double lo, hi;
    if (n && n->kind == CFG_LIST) {
        double pair[2] = {0, 0};
        p_numbers(pr, name, 2, pair);
        lo = pair[0], hi = pair[1];
    } else {
        double v = p_number(pr, name, v_default);
        if (v < 0) {
            bad(pr, n, "%s must be non-negative", name);
            return;
        }
        lo = hue ? -v : fmax(0.0, 1.0 - v);
        hi = hue ? v : 1.0 + v;
    }
    if (lo > hi || (hue && (lo < -0.5 || hi > 0.5))) {
        bad(pr, n, hue ? "%s must lie in [-0.5, 0.5]" : "%s range is empty", name);
        return;
    }
    /* torchvision skips a factor whose range is the identity ({1} or {0} for hue). */
    out->on = !(lo == hi && lo == (hue ? 0.0 : 1.0));
    out->lo = lo, out->hi = hi;
}

static void color_jitter_set(aug_op *op, double b, double c, double s, double h)
{
    op->jitter[0] = (aug_range){b > 0, fmax(0.0, 1 - b), 1 + b};
    op->jitter[1] = (aug_range){c > 0, fmax(0.0, 1 - c), 1 + c};
    op->jitter[2] = (aug_range){s > 0, fmax(0.0, 1 - s), 1 + s};
    op->jitter[3] = (aug_range){h > 0, -h, h};
}

static void parse_scale_ratio(params *pr, aug_op *op, double s0, double s1)
{
    op->scale[0] = s0, op->scale[1] = s1;
    op->ratio[0] = 3.0 / 4.0, op->ratio[1] = 4.0 / 3.0;
    p_numbers(pr, "scale", 2, op->scale);
    p_numbers(pr, "ratio", 2, op->ratio);
    if (!(op->scale[0] >= 0 && op->scale[0] <= op->scale[1] && op->ratio[0] > 0 && op->ratio[0] <= op->ratio[1]) ||
        !isfinite(op->scale[1]) || !isfinite(op->ratio[1]))
        bad(pr, NULL, "%s: scale and ratio must be increasing positive pairs", "RandomResizedCrop");
}

static void parse_multicrop(params *pr, aug_op *op)
{
    const cfg_node *nc = cfg_map_get(pr->map, "num_crops"), *sc = cfg_map_get(pr->map, "size_crops"),
                   *cs = cfg_map_get(pr->map, "crop_scales");
    int total = p_int(pr, "total_num_crops", 0);
    if (!nc || !sc || !cs || nc->kind != CFG_LIST || sc->kind != CFG_LIST || cs->kind != CFG_LIST ||
        nc->len != sc->len || nc->len != cs->len || nc->len == 0) {
        bad(pr, NULL, "%s needs num_crops, size_crops and crop_scales lists of equal length", "ImgPilToMultiCrop");
        return;
    }
    op->n_types = (int)nc->len;
    op->multicrop = xcalloc(nc->len, sizeof *op->multicrop);
    int sum = 0;
    for (size_t i = 0; i < nc->len && !pr->failed; i++) {
        aug_crop_type *t = &op->multicrop[i];
        const cfg_node *sci = cs->items[i];
        if (nc->items[i]->kind != CFG_INT || sc->items[i]->kind != CFG_INT || sci->kind != CFG_LIST ||
            sci->len != 2 || !cfg_is_number(sci->items[0]) || !cfg_is_number(sci->items[1])) {
            bad(pr, nc, "%s: num_crops and size_crops hold integers, crop_scales pairs", "ImgPilToMultiCrop");
            return;
        }
        int64_t count = nc->items[i]->i;
        t->count = count < 0 || count > INT32_MAX ? -1 : (int)count;
        t->size = side_ok(sc->items[i]) ? (int)sc->items[i]->i : 0;
        t->scale[0] = cfg_number(sci->items[0]), t->scale[1] = cfg_number(sci->items[1]);
        if (!isfinite(t->scale[1]))
            t->scale[0] = NAN; /* refused just below */
        if (t->count < 0 || t->size <= 0)
            bad(pr, nc, "%s: bad crop count or size (sizes from 1 to " MAX_SIDE_TEXT ")", "ImgPilToMultiCrop");
        if (!(t->scale[0] >= 0 && t->scale[0] <= t->scale[1]))
            bad(pr, sci, "%s: a crop scale must be an increasing pair of non-negative numbers", "ImgPilToMultiCrop");
        sum += t->count;
    }
    /* VISSL asserts sum(num_crops) == total_num_crops. */
    if (!pr->failed && sum != total)
        bad(pr, cfg_map_get(pr->map, "total_num_crops"), "%s: total_num_crops must equal sum(num_crops)",
            "ImgPilToMultiCrop");
}

static void parse_perm_file(params *pr, aug_op *op)
{
    const char *path = str_param(pr->map, "perm_file");
    if (!path || !*path) {
        bad(pr, NULL, "%s needs perm_file (a .npy of permutations)", "ShuffleImgPatches");
        return;
    }
    if (strstr(path, "://")) {
        bad(pr, cfg_map_get(pr->map, "perm_file"),
            "%s: perm_file must be a local .npy file (selfsup never downloads; fetch it once and point here)",
            "ShuffleImgPatches");
        return;
    }
    npy_array a = {0};
    char *why = NULL;
    if (npy_read(path, &a, &why) != 0) {
        cfg_fail(pr->err, cfg_map_get(pr->map, "perm_file"), pr->key, "cannot read perm_file: %s", why);
        free(why);
        pr->failed = true;
        return;
    }
    if (a.ndim != 2 || a.count == 0 || (a.dtype != NPY_I8 && a.dtype != NPY_I4 && a.dtype != NPY_U1)) {
        bad(pr, cfg_map_get(pr->map, "perm_file"), "%s must hold a 2-D int64, int32 or uint8 array", "perm_file");
        npy_close(&a);
        return;
    }
    op->n_perms = (int)a.shape[0];
    op->perm_len = (int)a.shape[1];
    op->perms = xcalloc(a.count, sizeof *op->perms);
    int64_t lo = INT64_MAX;
    for (size_t i = 0; i < a.count; i++) {
        op->perms[i] = a.dtype == NPY_I8 ? ((const int64_t *)a.data)[i]
                     : a.dtype == NPY_I4 ? ((const int32_t *)a.data)[i]
                                         : ((const uint8_t *)a.data)[i];
        lo = op->perms[i] < lo ? op->perms[i] : lo;
    }
    npy_close(&a);
    /* VISSL: a file of 1-based permutations is shifted to 0-based. */
    if (lo == 1)
        for (int i = 0; i < op->n_perms * op->perm_len; i++)
            op->perms[i] -= 1;
}

static void parse_indices(params *pr, aug_op *op)
{
    const cfg_node *n = cfg_map_get(pr->map, "indices");
    if (!n || n->kind == CFG_NULL)
        return;
    if (n->kind == CFG_INT) {
        op->indices = xcalloc(1, sizeof *op->indices);
        op->indices[0] = (int)n->i;
        op->n_indices = 1;
        return;
    }
    if (n->kind != CFG_LIST) {
        bad(pr, n, "%s must be a list of item indices", "indices");
        return;
    }
    op->indices = xcalloc(n->len + 1, sizeof *op->indices);
    for (size_t i = 0; i < n->len; i++) {
        if (n->items[i]->kind != CFG_INT || n->items[i]->i < 0) {
            bad(pr, n->items[i], "%s must hold non-negative integers", "indices");
            return;
        }
        /* VISSL makes a set: duplicates apply once, in ascending order. */
        bool dup = false;
        for (int j = 0; j < op->n_indices; j++)
            dup = dup || op->indices[j] == (int)n->items[i]->i;
        if (!dup)
            op->indices[op->n_indices++] = (int)n->items[i]->i;
    }
    for (int i = 1; i < op->n_indices; i++)
        for (int j = i; j > 0 && op->indices[j - 1] > op->indices[j]; j--) {
            int t = op->indices[j];
            op->indices[j] = op->indices[j - 1], op->indices[j - 1] = t;
        }
}

/* num_patches: a perfect square (a side x side grid), as VISSL asserts for PIRL. */
static void check_num_patches(params *pr, int n)
{
    int side = n > 0 ? (int)sqrt((double)n) : 0;
    if (n < 1 || n > 1024 || side * side != n)
        bad(pr, cfg_map_get(pr->map, "num_patches"), "%s must be a perfect square between 1 and 1024", "num_patches");
}

/* RandomCrop's padding (an int, [left/right, top/bottom] or [l, t, r, b]), fill (a number or
 * one per channel), padding_mode and pad_if_needed, as torchvision reads them. */
static void parse_crop_padding(params *pr, aug_op *op)
{
    const cfg_node *pad = cfg_map_get(pr->map, "padding");
    double v[4] = {0, 0, 0, 0};
    if (pad && pad->kind == CFG_INT) {
        v[0] = v[1] = v[2] = v[3] = (double)pad->i;
    } else if (pad && pad->kind == CFG_LIST && (pad->len == 2 || pad->len == 4)) {
        p_numbers(pr, "padding", (int)pad->len, v);
        if (pad->len == 2)
            v[2] = v[0], v[3] = v[1];
    } else if (pad && pad->kind != CFG_NULL) {
        bad(pr, pad, "%s must be an integer, [left/right, top/bottom] or [left, top, right, bottom]", "padding");
    }
    for (int k = 0; k < 4; k++) {
        if (!(v[k] >= 0 && v[k] <= 4096) || v[k] != (int)v[k]) {
            bad(pr, pad, "%s values must be integers between 0 and 4096", "padding");
            return;
        }
        op->pad[k] = (int)v[k];
    }
    op->pad_if_needed = p_bool(pr, "pad_if_needed", false);
    const cfg_node *fill = cfg_map_get(pr->map, "fill");
    double f[3] = {0, 0, 0};
    if (fill && fill->kind == CFG_LIST)
        p_numbers(pr, "fill", 3, f);
    else
        f[0] = f[1] = f[2] = p_number(pr, "fill", 0);
    for (int c = 0; c < 3; c++) {
        if (!(f[c] >= 0 && f[c] <= 255)) {
            bad(pr, fill, "%s must be between 0 and 255", "fill");
            return;
        }
        op->fill[c] = (uint8_t)f[c]; /* PIL truncates a float colour */
    }
    const cfg_node *mode = cfg_map_get(pr->map, "padding_mode");
    const char *m = mode && mode->kind == CFG_STR ? mode->s : mode && mode->kind != CFG_NULL ? "?" : "constant";
    static const char *const modes[] = {"constant", "edge", "reflect", "symmetric"};
    op->pad_mode = (img_pad_mode)-1;
    for (int k = 0; k < 4; k++)
        if (!strcmp(m, modes[k]))
            op->pad_mode = (img_pad_mode)k;
    if ((int)op->pad_mode < 0)
        bad(pr, mode, "%s must be constant, edge, reflect or symmetric", "padding_mode");
}

static aug_pipeline *pipeline_parse(const cfg_node *list, const char *key, cfg_err *err, bool nested);

/* Parse one entry; returns false when it failed (err filled). */
static bool parse_op(const cfg_node *map, const char *key, cfg_err *err, aug_op *op)
{
    params pr = {.map = map, .key = key, .err = err};
    const char *name = str_param(map, "name");
    if (!name) {
        cfg_fail(err, map, key, "a transform must be a map with a name");
        return false;
    }
    op->name = name;
    parse_indices(&pr, op);
#define IS(n) (!strcmp(name, n))
#define KEYS(...) check_keys(&pr, (const char *const[]){__VA_ARGS__, NULL})
    if (IS("RandomResizedCrop")) {
        KEYS("size", "scale", "ratio", "interpolation", "antialias");
        op->kind = OP_RANDOM_RESIZED_CROP;
        p_size(&pr, "size", 0, op->size, NULL);
        parse_scale_ratio(&pr, op, 0.08, 1.0);
        op->filter = p_filter(&pr, IMG_BILINEAR);
    } else if (IS("Resize")) {
        KEYS("size", "interpolation", "max_size", "antialias");
        op->kind = OP_RESIZE;
        p_size(&pr, "size", 0, op->size, &op->size_is_int);
        op->filter = p_filter(&pr, IMG_BILINEAR);
        op->max_size = p_int(&pr, "max_size", 0);
    } else if (IS("CenterCrop")) {
        KEYS("size");
        op->kind = OP_CENTER_CROP;
        p_size(&pr, "size", 0, op->size, NULL);
    } else if (IS("RandomCrop")) {
        KEYS("size", "padding", "pad_if_needed", "fill", "padding_mode");
        op->kind = OP_RANDOM_CROP;
        p_size(&pr, "size", 0, op->size, NULL);
        parse_crop_padding(&pr, op);
    } else if (IS("RandomHorizontalFlip")) {
        KEYS("p");
        op->kind = OP_HFLIP;
        p_probability(&pr, "p", 0.5, &op->p);
    } else if (IS("ColorJitter")) {
        KEYS("brightness", "contrast", "saturation", "hue");
        op->kind = OP_COLOR_JITTER;
        op->p = 1.0;
        jitter_range(&pr, "brightness", 0, false, &op->jitter[0]);
        jitter_range(&pr, "contrast", 0, false, &op->jitter[1]);
        jitter_range(&pr, "saturation", 0, false, &op->jitter[2]);
        jitter_range(&pr, "hue", 0, true, &op->jitter[3]);
    } else if (IS("RandomGrayscale")) {
        KEYS("p");
        op->kind = OP_GRAYSCALE;
        p_probability(&pr, "p", 0.1, &op->p);
    } else if (IS("ImgPilColorDistortion")) {
        KEYS("strength");
        op->kind = OP_COLOR_DISTORTION;
        double s = p_number(&pr, "strength", 1.0);
        if (s < 0 || 0.2 * s > 0.5)
            bad(&pr, cfg_map_get(map, "strength"), "%s must be in [0, 2.5] (hue = 0.2 x strength <= 0.5)", "strength");
        color_jitter_set(op, 0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s);
        op->p = 0.8, op->p2 = 0.2;
    } else if (IS("ImgPilRandomColorJitter")) {
        KEYS("strength", "p");
        op->kind = OP_COLOR_JITTER;
        double s = p_number(&pr, "strength", 1.0);
        if (s < 0 || 0.2 * s > 0.5)
            bad(&pr, cfg_map_get(map, "strength"), "%s must be in [0, 2.5] (hue = 0.2 x strength <= 0.5)", "strength");
        color_jitter_set(op, 0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s);
        p_probability(&pr, "p", 0.8, &op->p);
    } else if (IS("ImgPilGaussianBlur")) {
        KEYS("p", "radius_min", "radius_max");
        op->kind = OP_BLUR;
        p_probability(&pr, "p", 0.5, &op->p);
        op->radius[0] = p_number(&pr, "radius_min", 0.1);
        op->radius[1] = p_number(&pr, "radius_max", 2.0);
        /* PIL's float arithmetic (radius squared, the 8.24 box weights) overflows long
         * before a radius this large, and any blur this wide is already the image's mean. */
        if (op->radius[0] < 0 || op->radius[0] > op->radius[1] || op->radius[1] > IMG_BLUR_RADIUS_MAX)
            bad(&pr, NULL, "%s: need 0 <= radius_min <= radius_max <= 1000", "ImgPilGaussianBlur");
    } else if (IS("ImgPilRandomPhotometric")) {
        KEYS("p");
        op->kind = OP_PHOTOMETRIC;
        p_probability(&pr, "p", 0.66, &op->p);
    } else if (IS("ImgPilRandomSolarize")) {
        KEYS("p");
        op->kind = OP_SOLARIZE;
        p_probability(&pr, "p", 0.66, &op->p);
    } else if (IS("ImgReplicatePil")) {
        KEYS("num_times");
        op->kind = OP_REPLICATE;
        op->num_times = p_int(&pr, "num_times", 2);
        if (op->num_times <= 0)
            bad(&pr, cfg_map_get(map, "num_times"), "%s must be a positive integer", "num_times");
    } else if (IS("ImgPilToMultiCrop")) {
        KEYS("total_num_crops", "num_crops", "size_crops", "crop_scales");
        op->kind = OP_MULTICROP;
        parse_multicrop(&pr, op);
    } else if (IS("ImgPilToPatchesAndImage")) {
        KEYS("crop_scale_image", "crop_size_image", "crop_scale_patches", "crop_size_patches", "permute_patches",
             "num_patches");
        op->kind = OP_PATCHES_AND_IMAGE;
        op->scale[0] = 0.08, op->scale[1] = 1.0, op->scale2[0] = 0.6, op->scale2[1] = 1.0;
        op->ratio[0] = 3.0 / 4.0, op->ratio[1] = 4.0 / 3.0;
        p_numbers(&pr, "crop_scale_image", 2, op->scale);
        p_numbers(&pr, "crop_scale_patches", 2, op->scale2);
        if (!(op->scale[0] >= 0 && op->scale[0] <= op->scale[1] && op->scale2[0] >= 0 && op->scale2[0] <= op->scale2[1]) ||
            !isfinite(op->scale[1]) || !isfinite(op->scale2[1]))
            bad(&pr, NULL, "%s: crop scales must be increasing pairs of non-negative numbers", "ImgPilToPatchesAndImage");
        op->size[0] = op->size[1] = p_int(&pr, "crop_size_image", 224);
        op->size2 = p_int(&pr, "crop_size_patches", 255);
        p_bool(&pr, "permute_patches", true); /* VISSL ignores it: the patches are always permuted */
        op->num_patches = p_int(&pr, "num_patches", 9);
        op->patch_jitter = 21;
        check_num_patches(&pr, op->num_patches);
        if (op->size[0] <= 0 || op->size2 <= 0 || op->size[0] > MAX_SIDE || op->size2 > MAX_SIDE)
            bad(&pr, NULL, "%s: crop sizes must be between 1 and " MAX_SIDE_TEXT, "ImgPilToPatchesAndImage");
    } else if (IS("ImgRotatePil")) {
        KEYS("num_angles", "num_rotations_per_img");
        op->kind = OP_ROTATE;
        op->num_angles = p_int(&pr, "num_angles", 4);
        if (p_int(&pr, "num_rotations_per_img", 1) != 1)
            bad(&pr, cfg_map_get(map, "num_rotations_per_img"), "%s must be 1 (as in VISSL)", "num_rotations_per_img");
        if (op->num_angles < 1 || op->num_angles > 65536)
            bad(&pr, cfg_map_get(map, "num_angles"), "%s must be between 1 and 65536", "num_angles");
    } else if (IS("ImgPatchesFromTensor")) {
        KEYS("num_patches", "patch_jitter");
        op->kind = OP_PATCHES;
        op->num_patches = p_int(&pr, "num_patches", 9);
        op->patch_jitter = p_int(&pr, "patch_jitter", 21);
        check_num_patches(&pr, op->num_patches);
        if (op->patch_jitter <= 0)
            bad(&pr, cfg_map_get(map, "patch_jitter"), "%s must be positive (VISSL asserts it)", "patch_jitter");
    } else if (IS("ShuffleImgPatches")) {
        KEYS("perm_file");
        op->kind = OP_SHUFFLE_PATCHES;
        parse_perm_file(&pr, op);
    } else if (IS("ImgPilMultiCropRandomApply")) {
        KEYS("transforms", "prob");
        op->kind = OP_MULTICROP_RANDOM_APPLY;
        const cfg_node *tl = cfg_map_get(map, "transforms"), *pl = cfg_map_get(map, "prob");
        if (!tl || tl->kind != CFG_LIST || !pl || pl->kind != CFG_LIST) {
            bad(&pr, NULL, "%s needs a transforms list and a prob list", "ImgPilMultiCropRandomApply");
        } else {
            char sub[300];
            snprintf(sub, sizeof sub, "%s.transforms", key);
            op->sub = pipeline_parse(tl, sub, err, true);
            pr.failed = pr.failed || !op->sub;
            op->n_probs = (int)pl->len;
            op->probs = xcalloc(pl->len + 1, sizeof *op->probs);
            p_numbers(&pr, "prob", op->n_probs, op->probs);
        }
    } else if (IS("ToTensor") || IS("ImgToTensor")) {
        KEYS("_");
        op->kind = OP_TO_TENSOR;
        op->div = 255.0f;
    } else if (IS("ImgPilToRawTensor")) {
        KEYS("_");
        op->kind = OP_TO_TENSOR;
        op->div = 1.0f;
    } else if (IS("Normalize")) {
        KEYS("mean", "std", "inplace");
        op->kind = OP_NORMALIZE;
        double mean[3] = {NAN, NAN, NAN}, std[3] = {NAN, NAN, NAN};
        p_numbers(&pr, "mean", 3, mean);
        p_numbers(&pr, "std", 3, std);
        for (int c = 0; c < 3 && !pr.failed; c++) {
            if (isnan(mean[c]) || isnan(std[c]) || std[c] == 0)
                bad(&pr, NULL, "%s needs mean and std lists of 3 numbers, std non-zero", "Normalize");
            op->mean[c] = (float)mean[c], op->std[c] = (float)std[c];
        }
    } else if (IS("ImgPil2LabTensor")) {
        KEYS("_");
        op->kind = OP_LAB;
    } else {
        size_t n;
        const char *const *known = cfg_known_names("transform", &n);
        const char *near = cfg_suggest(name, known, n);
        cfg_fail(err, cfg_map_get(map, "name"), key, "unknown transform '%s'%s%s%s", name,
                 near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
        return false;
    }
#undef IS
#undef KEYS
    return !pr.failed;
}

/* Transforms that only move pixels commute with per-pixel normalisation, so they may follow
 * ToTensor while the bytes stay 8-bit. */
static bool moves_pixels_only(aug_op_kind k)
{
    return k == OP_PATCHES || k == OP_SHUFFLE_PATCHES || k == OP_HFLIP || k == OP_NORMALIZE || k == OP_TO_TENSOR;
}

/* Check the order of tensor transforms and fold ToTensor/Normalize into p->norm.
 * ImgPil2LabTensor makes VISSL's float tensor itself (its arithmetic is not the divide,
 * subtract, divide of `normalize`), so it must come last and on PIL images. */
static bool fold_normalize(aug_pipeline *p, const cfg_node *list, const char *key, cfg_err *err)
{
    p->norm = (aug_normalize){.div = 255.0f, .mean = {0, 0, 0}, .std = {1, 1, 1}};
    for (int i = 0; i < p->n_ops; i++) {
        aug_op *op = &p->ops[i];
        if (i > 0 && p->ops[i - 1].kind == OP_LAB && op->kind != OP_LAB) {
            cfg_fail(err, list->items[i], key, "%s after ImgPil2LabTensor is not supported: put it before", op->name);
            return false;
        }
        if (op->kind == OP_LAB && p->norm.pending) {
            cfg_fail(err, list->items[i], key, "ImgPil2LabTensor needs a PIL image, not the tensor of ToTensor");
            return false;
        }
        bool tensor_op = op->kind == OP_TO_TENSOR || op->kind == OP_NORMALIZE;
        if (tensor_op && op->n_indices) {
            cfg_fail(err, list->items[i], key, "%s with indices is not supported: every item must become a tensor",
                     op->name);
            return false;
        }
        if (op->kind == OP_TO_TENSOR) {
            if (p->norm.pending) {
                cfg_fail(err, list->items[i], key, "%s on a tensor (ToTensor given twice)", op->name);
                return false;
            }
            p->norm.pending = true;
            p->norm.div = op->div;
        } else if (op->kind == OP_NORMALIZE) {
            if (!p->norm.pending) {
                cfg_fail(err, list->items[i], key, "Normalize needs a tensor: put ToTensor before it");
                return false;
            }
            /* Normalize twice composes; keep it exact by refusing it instead. */
            if (p->norm.std[0] != 1 || p->norm.mean[0] != 0 || p->norm.std[1] != 1 || p->norm.std[2] != 1) {
                cfg_fail(err, list->items[i], key, "Normalize given twice is not supported");
                return false;
            }
            memcpy(p->norm.mean, op->mean, sizeof op->mean);
            memcpy(p->norm.std, op->std, sizeof op->std);
        } else if (p->norm.pending && !moves_pixels_only(op->kind)) {
            cfg_fail(err, list->items[i], key,
                     "%s after ToTensor is not supported: selfsup keeps pixels 8-bit until the model; put it before ToTensor",
                     op->name);
            return false;
        }
    }
    return true;
}

/* The most items one image can become (copies multiply them). */
static double items_bound(const aug_pipeline *p)
{
    double n = 1;
    for (int i = 0; i < p->n_ops; i++) {
        const aug_op *op = &p->ops[i];
        double k = op->kind == OP_REPLICATE ? op->num_times : op->kind == OP_PATCHES_AND_IMAGE ? op->num_patches + 1 : 1;
        for (int t = 0; op->kind == OP_MULTICROP && t < op->n_types; t++)
            k += op->multicrop[t].count - (t == 0);
        n *= k;
    }
    return n;
}

static aug_pipeline *pipeline_parse(const cfg_node *list, const char *key, cfg_err *err, bool nested)
{
    if (!list || list->kind != CFG_LIST) {
        cfg_fail(err, list, key, "must be a list of transforms");
        return NULL;
    }
    aug_pipeline *p = xcalloc(1, sizeof *p);
    p->ops = xcalloc(list->len + 1, sizeof *p->ops);
    for (size_t i = 0; i < list->len; i++) {
        char k[256];
        snprintf(k, sizeof k, "%s[%zu]", key, i);
        p->n_ops++;
        if (!parse_op(list->items[i], k, err, &p->ops[i])) {
            aug_pipeline_free(p);
            return NULL;
        }
        bool copies = p->ops[i].kind == OP_REPLICATE || p->ops[i].kind == OP_MULTICROP ||
                      p->ops[i].kind == OP_PATCHES_AND_IMAGE || p->ops[i].kind == OP_MULTICROP_RANDOM_APPLY;
        if (nested && (copies || p->ops[i].kind == OP_TO_TENSOR || p->ops[i].kind == OP_NORMALIZE ||
                       p->ops[i].kind == OP_LAB)) {
            cfg_fail(err, list->items[i], k, "%s cannot be nested in ImgPilMultiCropRandomApply", p->ops[i].name);
            aug_pipeline_free(p);
            return NULL;
        }
    }
    if (!nested && !fold_normalize(p, list, key, err)) {
        aug_pipeline_free(p);
        return NULL;
    }
    /* A sample record holds at most REC_MAX_TENSORS tensors (4 go to metadata). */
    if (!nested && items_bound(p) > REC_MAX_TENSORS - 4) {
        cfg_fail(err, list, key, "these transforms make up to %.0f crops of one image; a sample holds at most %d",
                 items_bound(p), REC_MAX_TENSORS - 4);
        aug_pipeline_free(p);
        return NULL;
    }
    return p;
}

aug_pipeline *aug_pipeline_build(const cfg_node *transforms, const char *key, cfg_err *err)
{
    return pipeline_parse(transforms, key, err, false);
}

void aug_pipeline_free(aug_pipeline *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_ops; i++) {
        aug_op *op = &p->ops[i];
        free(op->indices);
        free(op->multicrop);
        free(op->perms);
        free(op->probs);
        aug_pipeline_free(op->sub);
    }
    free(p->ops);
    free(p);
}

aug_normalize aug_pipeline_normalize(const aug_pipeline *p)
{
    return p->norm;
}

/* ---- how big a sample gets --------------------------------------------------------------- */

/* The size of each item as the list goes, where the transforms fix it (-1: depends on the
 * image). */
typedef struct {
    int w[REC_BOUND_ITEMS], h[REC_BOUND_ITEMS], towers[REC_BOUND_ITEMS];
    int n;
} size_sim;

static bool sim_copies(size_sim *z, int i, const aug_op *op)
{
    int add = 0, w[REC_BOUND_ITEMS], h[REC_BOUND_ITEMS];
    if (op->kind == OP_REPLICATE) {
        for (int k = 0; k < op->num_times && add < REC_BOUND_ITEMS; k++, add++)
            w[add] = z->w[i], h[add] = z->h[i];
    } else if (op->kind == OP_MULTICROP) {
        for (int t = 0; t < op->n_types; t++)
            for (int k = 0; k < op->multicrop[t].count && add < REC_BOUND_ITEMS; k++, add++)
                w[add] = h[add] = op->multicrop[t].size;
    } else { /* OP_PATCHES_AND_IMAGE */
        int patch = op->size2 / (int)sqrt((double)op->num_patches) - op->patch_jitter;
        if (patch <= 0)
            return false;
        w[add] = op->size[1], h[add++] = op->size[0];
        for (int k = 0; k < op->num_patches && add < REC_BOUND_ITEMS; k++, add++)
            w[add] = h[add] = patch;
    }
    if (z->n - 1 + add > REC_BOUND_ITEMS)
        return false;
    memmove(&z->w[i + add], &z->w[i + 1], (size_t)(z->n - i - 1) * sizeof z->w[0]);
    memmove(&z->h[i + add], &z->h[i + 1], (size_t)(z->n - i - 1) * sizeof z->h[0]);
    memmove(&z->towers[i + add], &z->towers[i + 1], (size_t)(z->n - i - 1) * sizeof z->towers[0]);
    for (int k = 0; k < add; k++)
        z->w[i + k] = w[k], z->h[i + k] = h[k], z->towers[i + k] = 1;
    z->n += add - 1;
    return true;
}

static bool sim_op(size_sim *z, const aug_op *op)
{
    for (int i = z->n - 1; i >= 0; i--) {
        bool sel = !op->n_indices;
        for (int k = 0; k < op->n_indices; k++)
            sel = sel || op->indices[k] == i;
        if (!sel)
            continue;
        switch (op->kind) {
        case OP_RANDOM_RESIZED_CROP:
        case OP_CENTER_CROP:
        case OP_RANDOM_CROP:
            z->w[i] = op->size[1], z->h[i] = op->size[0];
            break;
        case OP_RESIZE:
            z->w[i] = op->size_is_int ? -1 : op->size[1];
            z->h[i] = op->size_is_int ? -1 : op->size[0];
            break;
        case OP_PATCHES:
            if (z->h[i] < 0)
                return false;
            z->towers[i] = op->num_patches;
            z->w[i] = z->h[i] = z->h[i] / (int)sqrt((double)op->num_patches) - op->patch_jitter;
            if (z->w[i] <= 0)
                return false;
            break;
        case OP_REPLICATE:
        case OP_MULTICROP:
        case OP_PATCHES_AND_IMAGE:
            if (!sim_copies(z, i, op))
                return false;
            break;
        default: /* flips, colour, rotation (same size), shuffles, tensors */
            break;
        }
    }
    return true;
}

bool aug_pipeline_sample_bytes(const aug_pipeline *p, int sources, int bytes_per_value, size_t *bytes)
{
    size_sim z = {.n = sources};
    if (sources < 1 || sources > REC_BOUND_ITEMS)
        return false;
    for (int i = 0; i < sources; i++)
        z.w[i] = z.h[i] = -1, z.towers[i] = 1;
    for (int t = 0; t < p->n_ops; t++) {
        if (!sim_op(&z, &p->ops[t]))
            return false;
        if (p->ops[t].kind == OP_LAB) /* its items leave as float32 */
            bytes_per_value = 4;
    }
    /* header, descriptors, 64-byte padding per tensor, label/valid/idx/normalize */
    size_t total = 64 + (size_t)(z.n + 4) * (128 + 64) + 3 * 64 * (size_t)(z.n + 1) + 64;
    for (int i = 0; i < z.n; i++) {
        if (z.w[i] < 0 || z.h[i] < 0)
            return false;
        total += (size_t)z.towers[i] * (size_t)z.w[i] * (size_t)z.h[i] * 3 * (size_t)bytes_per_value;
    }
    *bytes = total;
    return true;
}
