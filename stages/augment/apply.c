/*
 * apply.c — run a parsed transform list on one sample (see transforms.h).
 *
 * The random parameters follow torchvision 0.14 and VISSL 0.1.5 draw for draw in their
 * distributions (which crop box, which factor, in which order), drawn from our counter-based
 * stream instead of torch's global generator; the pixels are then made by the PIL-exact
 * kernels of img.h. Python's round() rounds half to even, so does nearbyint() here.
 */
#include "augment/transforms_internal.h"

#include "rng.h"
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    rng_stream rng;
    char *err;
    size_t err_len;
    strbuf *trace; /* NULL, or where every random decision is written (aug_apply_traced) */
} run_ctx;

/* One line of the trace: what was decided, with numbers printed exactly (%.17g). */
static void trace(run_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void trace(run_ctx *c, const char *fmt, ...)
{
    if (!c->trace)
        return;
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(c->trace, fmt, ap);
    va_end(ap);
    sb_putc(c->trace, '\n');
}

/* ---- the sample's lists ------------------------------------------------------------------ */

static void sample_reserve(aug_sample *s, int n)
{
    if (n <= s->cap)
        return;
    int cap = s->cap ? s->cap : 4;
    while (cap < n)
        cap *= 2;
    s->items = xrealloc(s->items, (size_t)cap * sizeof *s->items);
    s->valid = xrealloc(s->valid, (size_t)cap * sizeof *s->valid);
    s->idx = xrealloc(s->idx, (size_t)cap * sizeof *s->idx);
    s->cap = cap;
}

static void label_reserve(aug_sample *s, int n)
{
    if (n <= s->cap_label)
        return;
    int cap = s->cap_label ? s->cap_label : 4;
    while (cap < n)
        cap *= 2;
    s->label = xrealloc(s->label, (size_t)cap * sizeof *s->label);
    s->cap_label = cap;
}

static void sample_start(aug_sample *s, const img_u8 *images, int n_src, const int64_t *label, int n_label,
                         const int64_t *valid, const int64_t *idx, bool borrowed)
{
    s->n = 0;
    s->n_label = 0;
    s->label_width = 1;
    sample_reserve(s, n_src);
    label_reserve(s, n_label);
    for (int i = 0; i < n_src; i++) {
        s->items[i] = (aug_item){.im = images[i], .towers = 1, .borrowed = borrowed};
        s->valid[i] = valid[i];
        s->idx[i] = idx[i];
    }
    s->n = n_src;
    if (n_label > 0) /* no label list may mean no buffer yet */
        memcpy(s->label, label, (size_t)n_label * sizeof *label);
    s->n_label = n_label;
}

void aug_sample_init(aug_sample *s, const img_u8 *images, int n_src, const int64_t *label, int n_label,
                     const int64_t *valid, const int64_t *idx)
{
    sample_start(s, images, n_src, label, n_label, valid, idx, false);
}

void aug_sample_borrow(aug_sample *s, const img_u8 *images, int n_src, const int64_t *label, int n_label,
                       const int64_t *valid, const int64_t *idx)
{
    sample_start(s, images, n_src, label, n_label, valid, idx, true);
}

static int label_width(const aug_sample *s)
{
    return s->label_width > 1 ? s->label_width : 1;
}

void aug_sample_set_labels(aug_sample *s, const int64_t *label, int n_label, int width)
{
    width = width > 1 ? width : 1;
    label_reserve(s, n_label * width);
    if (n_label > 0)
        memcpy(s->label, label, (size_t)n_label * (size_t)width * sizeof *label);
    s->n_label = n_label;
    s->label_width = width;
}

void aug_sample_set_window(aug_sample *s, int i, int x, int y, int full_w, int full_h)
{
    aug_item *it = &s->items[i];
    it->win_x = x, it->win_y = y, it->full_w = full_w, it->full_h = full_h;
}

static void item_release(aug_item *it)
{
    if (!it->borrowed)
        img_free(&it->im);
    *it = (aug_item){0};
}

void aug_sample_release(aug_sample *s)
{
    for (int i = 0; i < s->n; i++)
        item_release(&s->items[i]);
    s->n = 0;
    s->n_label = 0;
}

void aug_sample_clear(aug_sample *s)
{
    aug_sample_release(s);
    free(s->items);
    free(s->valid);
    free(s->idx);
    free(s->label);
    *s = (aug_sample){0};
}

/* Replace item i's image by `im`, which the item owns (freeing the old one if it owned it). */
static void item_set(aug_item *it, img_u8 im)
{
    int towers = it->towers;
    item_release(it);
    it->im = im;
    it->towers = towers;
}

/* Make the item's pixels its own before they are changed in place. */
static void item_own(aug_item *it)
{
    if (!it->borrowed)
        return;
    img_u8 copy = img_alloc(it->im.w, it->im.h, it->im.c);
    img_copy(&it->im, &copy);
    it->im = copy;
    it->borrowed = false;
}

/* ---- torchvision's random parameters ------------------------------------------------------ */

static int py_round(double x)
{
    /* Out of range (or NaN) can only come from a degenerate box; -1 fails every check. */
    return isfinite(x) && fabs(x) < 1e9 ? (int)nearbyint(x) : -1;
}

/* RandomResizedCrop.get_params: 10 tries at a random area and log-uniform aspect ratio,
 * then the central crop clamped to the ratio range. Box = (x, y, w, h). */
void aug_rrc_box(rng_stream *r, int W, int H, const double scale[2], const double ratio[2], int box[4])
{
    double area = (double)W * H;
    double log_r0 = log(ratio[0]), log_r1 = log(ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * rng_uniform_range(r, scale[0], scale[1]);
        double aspect = exp(rng_uniform_range(r, log_r0, log_r1));
        int w = py_round(sqrt(target * aspect)), h = py_round(sqrt(target / aspect));
        if (0 < w && w <= W && 0 < h && h <= H) {
            int y = (int)rng_randint(r, 0, H - h + 1), x = (int)rng_randint(r, 0, W - w + 1);
            box[0] = x, box[1] = y, box[2] = w, box[3] = h;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int w = W, h = H;
    if (in_ratio < ratio[0])
        h = py_round(w / ratio[0]);
    else if (in_ratio > ratio[1])
        w = py_round(h * ratio[1]);
    box[0] = (W - w) / 2, box[1] = (H - h) / 2, box[2] = w, box[3] = h;
}

/* Crop box then resize to out_w x out_h, as F.resized_crop: PIL never reads outside the box. */
static img_u8 crop_resize(const img_u8 *src, const int box[4], int out_w, int out_h, img_filter f)
{
    img_u8 view = img_view(src, box[0], box[1], box[2], box[3]);
    img_u8 out = img_alloc(out_w, out_h, src->c);
    img_resize(&view, &out, f);
    return out;
}

/* RandomResizedCrop of an item into *out. The box is drawn from the full image's size; for a
 * window (aug_item) it must lie inside the window, which holds exactly the pixels the full
 * image has there. Returns 0, or -1 when it does not (decode cropped for other transforms). */
static int random_resized_crop(run_ctx *c, int item, const aug_item *src, int out_h, int out_w,
                               const double scale[2], const double ratio[2], img_filter f, img_u8 *out)
{
    int box[4];
    bool window = src->full_w > 0;
    aug_rrc_box(&c->rng, window ? src->full_w : src->im.w, window ? src->full_h : src->im.h, scale, ratio, box);
    trace(c, "rrc %d %d %d %d %d %d %d %d", item, box[0], box[1], box[2], box[3], out_w, out_h, (int)f);
    if (window) {
        box[0] -= src->win_x, box[1] -= src->win_y;
        if (box[0] < 0 || box[1] < 0 || box[0] + box[2] > src->im.w || box[1] + box[3] > src->im.h) {
            snprintf(c->err, c->err_len,
                     "the crop (%d, %d, %d, %d) leaves the decoded window (%d, %d, %d, %d) of the %dx%d image: "
                     "selfsup-decode --crop ran with other transforms or another SEED_VALUE",
                     box[0] + src->win_x, box[1] + src->win_y, box[2], box[3], src->win_x, src->win_y, src->im.w,
                     src->im.h, src->full_w, src->full_h);
            return -1;
        }
    }
    *out = crop_resize(&src->im, box, out_w, out_h, f);
    return 0;
}

/* torchvision Resize's output size: an int sets the shorter side, the longer keeps the aspect
 * ratio truncated (int(size * long / short)), capped by max_size. */
static void resize_size(const aug_op *op, int W, int H, int *ow, int *oh)
{
    if (!op->size_is_int) {
        *oh = op->size[0], *ow = op->size[1];
        return;
    }
    int shorter = W <= H ? W : H, longer = W <= H ? H : W;
    int new_short = op->size[0], new_long = (int)((double)new_short * longer / shorter);
    if (op->max_size > 0 && new_long > op->max_size) {
        new_short = (int)((double)op->max_size * new_short / new_long);
        new_long = op->max_size;
    }
    *ow = W <= H ? new_short : new_long;
    *oh = W <= H ? new_long : new_short;
}

/* F.center_crop: pad with zeros when the crop is larger, then take the centre with Python's
 * round-half-even offsets. */
static img_u8 center_crop(const img_u8 *src, int ch, int cw)
{
    int pad_l = cw > src->w ? (cw - src->w) / 2 : 0, pad_r = cw > src->w ? (cw - src->w + 1) / 2 : 0;
    int pad_t = ch > src->h ? (ch - src->h) / 2 : 0, pad_b = ch > src->h ? (ch - src->h + 1) / 2 : 0;
    int W = src->w + pad_l + pad_r, H = src->h + pad_t + pad_b;
    int x0 = py_round((W - cw) / 2.0) - pad_l, y0 = py_round((H - ch) / 2.0) - pad_t;
    img_u8 out = img_alloc(cw, ch, src->c);
    img_crop_padded(src, x0, y0, &out);
    return out;
}

/* ---- colour ------------------------------------------------------------------------------- */

/* ColorJitter: factors drawn, then applied in a random order (fn_idx = randperm(4)). */
static void color_jitter(run_ctx *c, int item, img_u8 *im, const aug_range j[4])
{
    rng_stream *r = &c->rng;
    size_t order[4];
    rng_permutation(r, 4, order);
    double f[4];
    for (int k = 0; k < 4; k++)
        f[k] = j[k].on ? rng_uniform_range(r, j[k].lo, j[k].hi) : 0;
    trace(c, "jitter %d %zu %zu %zu %zu %d %d %d %d %.17g %.17g %.17g %.17g", item, order[0], order[1], order[2],
          order[3], j[0].on, j[1].on, j[2].on, j[3].on, f[0], f[1], f[2], f[3]);
    for (int k = 0; k < 4; k++) {
        size_t fn = order[k];
        if (!j[fn].on)
            continue;
        switch (fn) {
        case 0: img_adjust_brightness(im, f[0]); break;
        case 1: img_adjust_contrast(im, f[1]); break;
        case 2: img_adjust_saturation(im, f[2]); break;
        default: img_adjust_hue(im, f[3]); break;
        }
    }
}

/* torchvision's RandomApply applies when p >= rand(); RandomHorizontalFlip and RandomGrayscale
 * when rand() < p; VISSL's blur when rand() <= p. With continuous draws these agree. */
static bool coin(rng_stream *r, double p)
{
    return rng_uniform(r) < p;
}

static void photometric(run_ctx *c, int item, img_u8 *im)
{
    rng_stream *r = &c->rng;
    int bits = (int)rng_randint(r, 4, 9);         /* randint [4, 8] */
    double sharp = rng_uniform_range(r, 0.1, 1.9); /* U(0.1, 1.9) */
    int thr = (int)rng_randint(r, 0, 257);         /* randint [0, 256] */
    trace(c, "photometric %d %d %.17g %d", item, bits, sharp, thr);
    img_posterize(im, bits);
    img_adjust_sharpness(im, sharp);
    img_solarize(im, thr);
    img_autocontrast(im);
}

/* ---- patches ------------------------------------------------------------------------------ */

/* ImgPatchesFromTensor: a side x side grid of cells `grid` pixels wide (grid = int(H / side)),
 * one (grid - jitter)-pixel patch per cell at a random offset, cells column-major (outer loop
 * over x). Returns the patches stacked top to bottom. VISSL 0.1.5's code slices x with
 * jitter[0,i,i] at the end index (a typo that trips its own assert unless the offsets agree);
 * we cut the patch the assert demands: start jitter[0,i,j], width patch. */
static int patches_from_image(run_ctx *c, int item, const img_u8 *src, int num_patches, int jitter, img_u8 *out)
{
    rng_stream *r = &c->rng;
    char *err = c->err;
    size_t err_len = c->err_len;
    int side = (int)sqrt((double)num_patches);
    int grid = src->h / side, patch = grid - jitter;
    if (side * side != num_patches || patch <= 0 || grid * side > src->w) {
        snprintf(err, err_len, "ImgPatchesFromTensor: a %dx%d image cannot give %d patches with jitter %d", src->w,
                 src->h, num_patches, jitter);
        return -1;
    }
    *out = img_alloc(patch, patch * num_patches, src->c);
    int k = 0;
    for (int i = 0; i < side; i++)
        for (int j = 0; j < side; j++, k++) {
            int jx = (int)rng_randint(r, 0, jitter), jy = (int)rng_randint(r, 0, jitter);
            trace(c, "patch %d %d %d %d", item, i * grid + jx, j * grid + jy, patch);
            img_u8 cell = img_view(src, i * grid + jx, j * grid + jy, patch, patch);
            img_u8 dst = img_view(out, 0, k * patch, patch, patch);
            img_copy(&cell, &dst);
        }
    return 0;
}

/* Reorder the towers of a stacked item: tower k of the result = tower perm[k] of the input. */
static void towers_permute(aug_item *it, const int64_t *perm)
{
    int ph = it->im.h / it->towers;
    img_u8 out = img_alloc(it->im.w, it->im.h, it->im.c);
    for (int k = 0; k < it->towers; k++) {
        img_u8 a = img_view(&it->im, 0, (int)perm[k] * ph, it->im.w, ph);
        img_u8 b = img_view(&out, 0, k * ph, it->im.w, ph);
        img_copy(&a, &b);
    }
    item_set(it, out);
}

/* ---- one transform on one item ------------------------------------------------------------- */

/* torchvision RandomCrop: pad (padding, then pad_if_needed on each short side, which pads
 * both ends of that side by the whole shortfall, as torchvision does), then a uniform box. */
static int random_crop(run_ctx *c, const aug_op *op, aug_item *it, int i)
{
    int th = op->size[0], tw = op->size[1];
    int pad[4] = {op->pad[0], op->pad[1], op->pad[2], op->pad[3]};
    int w = it->im.w + pad[0] + pad[2], h = it->im.h + pad[1] + pad[3];
    if (op->pad_if_needed && w < tw)
        pad[0] += tw - w, pad[2] += tw - w;
    if (op->pad_if_needed && h < th)
        pad[1] += th - h, pad[3] += th - h;
    if (pad[0] || pad[1] || pad[2] || pad[3]) {
        trace(c, "pad %d %d %d %d %d %d %d %d %d", i, pad[0], pad[1], pad[2], pad[3], (int)op->pad_mode, op->fill[0],
              op->fill[1], op->fill[2]);
        item_set(it, img_pad(&it->im, pad[0], pad[1], pad[2], pad[3], op->pad_mode, op->fill));
    }
    img_u8 *im = &it->im;
    if (th > im->h || tw > im->w) {
        snprintf(c->err, c->err_len, "RandomCrop: required crop size %dx%d is larger than the %dx%d image", tw, th,
                 im->w, im->h);
        return -1;
    }
    int y = (int)rng_randint(&c->rng, 0, im->h - th + 1), x = (int)rng_randint(&c->rng, 0, im->w - tw + 1);
    trace(c, "crop %d %d %d %d %d", i, x, y, tw, th);
    img_u8 view = img_view(im, x, y, tw, th), out = img_alloc(tw, th, im->c);
    img_copy(&view, &out);
    item_set(it, out);
    return 0;
}

/* Crops, resizes and flips of item i. */
static int apply_geometry(run_ctx *c, const aug_op *op, aug_item *it, int i)
{
    img_u8 *im = &it->im;
    rng_stream *r = &c->rng;
    switch (op->kind) {
    case OP_RANDOM_RESIZED_CROP: {
        img_u8 out;
        if (random_resized_crop(c, i, it, op->size[0], op->size[1], op->scale, op->ratio, op->filter, &out) != 0)
            return -1;
        item_set(it, out);
        return 0;
    }
    case OP_RESIZE: {
        int ow, oh;
        resize_size(op, im->w, im->h, &ow, &oh);
        trace(c, "resize %d %d %d %d", i, ow, oh, (int)op->filter);
        img_u8 out = img_alloc(ow, oh, im->c);
        img_resize(im, &out, op->filter);
        item_set(it, out);
        return 0;
    }
    case OP_CENTER_CROP:
        trace(c, "center_crop %d %d %d", i, op->size[0], op->size[1]);
        item_set(it, center_crop(im, op->size[0], op->size[1]));
        return 0;
    case OP_RANDOM_CROP:
        return random_crop(c, op, it, i);
    default: /* OP_HFLIP */
        if (coin(r, op->p)) {
            trace(c, "flip %d", i);
            item_own(it);
            im = &it->im;
            /* A stack of patches flips each patch (torch.flip on the last axis). */
            int ph = im->h / it->towers;
            for (int k = 0; k < it->towers; k++) {
                img_u8 v = img_view(im, 0, k * ph, im->w, ph);
                img_flip_lr(&v);
            }
        }
        return 0;
    }
}

/* Colour transforms of item i, each behind its coin. */
static void apply_color(run_ctx *c, const aug_op *op, img_u8 *im, int i)
{
    rng_stream *r = &c->rng;
    bool gray = false;
    switch (op->kind) {
    case OP_COLOR_JITTER:
        if (coin(r, op->p))
            color_jitter(c, i, im, op->jitter);
        return;
    case OP_GRAYSCALE:
        gray = coin(r, op->p);
        break;
    case OP_COLOR_DISTORTION:
        if (coin(r, op->p))
            color_jitter(c, i, im, op->jitter);
        gray = coin(r, op->p2);
        break;
    case OP_BLUR:
        if (coin(r, op->p)) {
            double radius = rng_uniform_range(r, op->radius[0], op->radius[1]);
            trace(c, "blur %d %.17g", i, radius);
            img_gaussian_blur(im, radius);
        }
        return;
    case OP_PHOTOMETRIC:
        if (coin(r, op->p))
            photometric(c, i, im);
        return;
    default: /* OP_SOLARIZE */
        if (coin(r, op->p)) {
            int thr = (int)rng_randint(r, 0, 257);
            trace(c, "solarize %d %d", i, thr);
            img_solarize(im, thr);
        }
        return;
    }
    if (gray) {
        trace(c, "gray %d", i);
        img_grayscale3(im);
    }
}

/* Transforms that make a label (VISSL: sample["label"][-1] = label) or patches. */
static int apply_patches_and_labels(run_ctx *c, const aug_op *op, aug_sample *s, int i)
{
    aug_item *it = &s->items[i];
    rng_stream *r = &c->rng;
    if (op->kind == OP_PATCHES) {
        img_u8 out;
        if (patches_from_image(c, i, &it->im, op->num_patches, op->patch_jitter, &out) != 0)
            return -1;
        item_set(it, out);
        it->towers = op->num_patches;
        return 0;
    }
    if (label_width(s) > 1) {
        snprintf(c->err, c->err_len, "%s sets the last label to a number, but the labels are rows of %d", op->name,
                 label_width(s));
        return -1;
    }
    if (s->n_label == 0) {
        snprintf(c->err, c->err_len, "%s sets the last label, but the sample has no label", op->name);
        return -1;
    }
    if (op->kind == OP_ROTATE) {
        int label = (int)rng_randint(r, 0, op->num_angles);
        /* VISSL's angles: torch.linspace(0, 360, num_angles + 1)[:-1], float32 */
        double angle = img_rotate_linspace_angle(label, op->num_angles);
        trace(c, "rotate %d %.17g", i, angle);
        img_u8 out = img_alloc(it->im.w, it->im.h, it->im.c);
        img_rotate(&it->im, &out, angle);
        item_set(it, out);
        s->label[s->n_label - 1] = label;
        return 0;
    }
    /* OP_SHUFFLE_PATCHES */
    if (it->towers != op->perm_len) {
        snprintf(c->err, c->err_len, "ShuffleImgPatches: %d patches but permutations of %d", it->towers, op->perm_len);
        return -1;
    }
    int k = (int)rng_randint(r, 0, op->n_perms);
    trace(c, "shuffle %d %d", i, k);
    towers_permute(it, op->perms + (size_t)k * (size_t)op->perm_len);
    s->label[s->n_label - 1] = k;
    return 0;
}

static int apply_item(run_ctx *c, const aug_op *op, aug_sample *s, int i)
{
    aug_item *it = &s->items[i];
    bool stack = it->towers > 1;
    switch (op->kind) {
    case OP_TO_TENSOR:
    case OP_NORMALIZE:
        return 0; /* folded into the pipeline's pending normalisation */
    case OP_LAB:
        if (stack || it->lab) {
            snprintf(c->err, c->err_len, "ImgPil2LabTensor needs a PIL image, not %s",
                     stack ? "a list of patches" : "a Lab tensor");
            return -1;
        }
        trace(c, "lab %d", i);
        item_own(it);
        img_rgb_to_lab(&it->im, &it->im);
        it->lab = true;
        return 0;
    case OP_HFLIP:
        return apply_geometry(c, op, it, i);
    case OP_SHUFFLE_PATCHES:
        return apply_patches_and_labels(c, op, s, i);
    default:
        break;
    }
    if (stack) {
        snprintf(c->err, c->err_len, "%s cannot take a list of patches", op->name);
        return -1;
    }
    switch (op->kind) {
    case OP_RANDOM_RESIZED_CROP:
    case OP_RESIZE:
    case OP_CENTER_CROP:
    case OP_RANDOM_CROP:
        return apply_geometry(c, op, it, i);
    case OP_ROTATE:
    case OP_PATCHES:
        return apply_patches_and_labels(c, op, s, i);
    default:
        item_own(it);
        apply_color(c, op, &it->im, i);
        return 0;
    }
}

/* ---- copies -------------------------------------------------------------------------------- */

/* What a copy transform made of one item. */
typedef struct {
    img_u8 *ims;
    int n;
    bool borrowed; /* the copies are views of a borrowed source (ImgReplicatePil) */
    const aug_item *window; /* ImgReplicatePil of a window: the copies are that window too */
} copies;

/* Flatten the copies into the data list as SSLTransformsWrapper does: item i becomes its
 * copies (an item the transform skipped stays itself), and label, data_valid and data_idx
 * become label[i], valid[i], idx[i] repeated once per copy — so the label list ends up as long
 * as the data list, and labels past the data list are dropped, as in VISSL. */
static int flatten_copies(run_ctx *c, aug_sample *s, copies *all)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += all[i].n ? all[i].n : 1;
    if (s->n_label < s->n) {
        snprintf(c->err, c->err_len, "a copy transform needs a label per item (%d labels, %d items)", s->n_label, s->n);
        return -1;
    }
    aug_sample out = {.label_width = label_width(s)};
    const size_t lw = (size_t)label_width(s);
    sample_reserve(&out, n);
    label_reserve(&out, n * (int)lw);
    for (int i = 0; i < s->n; i++) {
        int cnt = all[i].n ? all[i].n : 1;
        for (int k = 0; k < cnt; k++, out.n++) {
            out.items[out.n] = all[i].n ? (aug_item){.im = all[i].ims[k], .towers = 1, .borrowed = all[i].borrowed}
                                        : s->items[i];
            if (all[i].window) {
                const aug_item *w = all[i].window;
                aug_sample_set_window(&out, out.n, w->win_x, w->win_y, w->full_w, w->full_h);
            }
            out.valid[out.n] = s->valid[i];
            out.idx[out.n] = s->idx[i];
            memcpy(out.label + (size_t)out.n * lw, s->label + (size_t)i * lw, lw * sizeof *out.label);
        }
        if (all[i].n)
            item_release(&s->items[i]);
    }
    out.n_label = out.n;
    free(s->items), free(s->valid), free(s->idx), free(s->label);
    *s = out;
    return 0;
}

/* ImgReplicatePil's or ImgPilToMultiCrop's copies of one item into *cp. Returns 0, or -1
 * when a crop leaves a decoded window (cp then holds the crops made so far). */
static int make_copies(run_ctx *c, const aug_op *op, const aug_item *it, int item, copies *cp_out)
{
    const img_u8 *src = &it->im;
    copies cp = {0};
    if (op->kind == OP_REPLICATE) {
        cp.window = it->full_w > 0 ? it : NULL;
        cp.ims = xcalloc((size_t)op->num_times, sizeof *cp.ims);
        trace(c, "replicate %d %d", item, op->num_times);
        /* Copies of borrowed pixels can borrow them too: nothing is written until a
         * transform owns its copy (item_own). Owned pixels are copied, each copy owning its own. */
        cp.borrowed = it->borrowed;
        for (int k = 0; k < op->num_times; k++) {
            if (cp.borrowed) {
                cp.ims[k] = *src;
                continue;
            }
            cp.ims[k] = img_alloc(src->w, src->h, src->c);
            img_copy(src, &cp.ims[k]);
        }
        cp.n = op->num_times;
    } else if (op->kind == OP_MULTICROP) {
        int total = 0;
        for (int t = 0; t < op->n_types; t++)
            total += op->multicrop[t].count;
        cp.ims = xcalloc((size_t)total + 1, sizeof *cp.ims);
        for (int t = 0; t < op->n_types; t++) {
            const aug_crop_type *ct = &op->multicrop[t];
            const double ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
            for (int k = 0; k < ct->count; k++) {
                if (random_resized_crop(c, item, it, ct->size, ct->size, ct->scale, ratio, IMG_BILINEAR,
                                        &cp.ims[cp.n]) != 0) {
                    *cp_out = cp;
                    return -1;
                }
                cp.n++;
            }
        }
    }
    *cp_out = cp;
    return 0;
}

/* ImgPilToPatchesAndImage: [RandomResizedCrop image] + num_patches patches, in a random order,
 * cut from a second RandomResizedCrop. */
static int patches_and_image(run_ctx *c, const aug_op *op, const aug_item *src, copies *cp, int item)
{
    img_u8 image, big, stack;
    if (random_resized_crop(c, item, src, op->size[0], op->size[1], op->scale, op->ratio, IMG_BILINEAR, &image) != 0)
        return -1;
    if (random_resized_crop(c, item, src, op->size2, op->size2, op->scale2, op->ratio, IMG_BILINEAR, &big) != 0) {
        img_free(&image);
        return -1;
    }
    int rc = patches_from_image(c, item, &big, op->num_patches, op->patch_jitter, &stack);
    img_free(&big);
    if (rc != 0) {
        img_free(&image);
        return -1;
    }
    size_t *perm = xcalloc((size_t)op->num_patches, sizeof *perm);
    rng_permutation(&c->rng, (size_t)op->num_patches, perm);
    if (c->trace) {
        sb_printf(c->trace, "permute %d", item);
        for (int k = 0; k < op->num_patches; k++)
            sb_printf(c->trace, " %zu", perm[k]);
        sb_putc(c->trace, '\n');
    }
    cp->n = op->num_patches + 1;
    cp->ims = xcalloc((size_t)cp->n, sizeof *cp->ims);
    cp->ims[0] = image;
    int ph = stack.h / op->num_patches;
    for (int k = 0; k < op->num_patches; k++) {
        img_u8 v = img_view(&stack, 0, (int)perm[k] * ph, stack.w, ph);
        cp->ims[k + 1] = img_alloc(stack.w, ph, stack.c);
        img_copy(&v, &cp->ims[k + 1]);
    }
    free(perm);
    img_free(&stack);
    return 0;
}

/* ---- the list ----------------------------------------------------------------------------- */

static int check_indices(run_ctx *c, const aug_op *op, const aug_sample *s)
{
    for (int k = 0; k < op->n_indices; k++)
        if (op->indices[k] >= s->n) {
            snprintf(c->err, c->err_len, "%s: indices has %d but the sample has %d items", op->name, op->indices[k],
                     s->n);
            return -1;
        }
    return 0;
}

static int run_ops(run_ctx *c, const aug_pipeline *p, aug_sample *s, const rng_key *base, int depth);

/* ImgPilMultiCropRandomApply: item i gets the whole sub-list with probability prob[i]. */
static int multicrop_random_apply(run_ctx *c, const aug_op *op, aug_sample *s, const rng_key *key)
{
    if (s->n != op->n_probs) {
        snprintf(c->err, c->err_len, "ImgPilMultiCropRandomApply: %d items but %d probabilities", s->n, op->n_probs);
        return -1;
    }
    for (int i = 0; i < s->n; i++) {
        if (!coin(&c->rng, op->probs[i]))
            continue;
        trace(c, "group_apply %d", i);
        /* Run the sub-list on a one-item view of the sample; its draws come from sub-streams
         * keyed by (transform position, item), so they never collide with ours. */
        aug_sample one = {.items = &s->items[i], .valid = &s->valid[i], .idx = &s->idx[i], .n = 1, .cap = 1,
                          .label = s->label, .n_label = s->n_label, .cap_label = s->n_label,
                          .label_width = s->label_width};
        rng_key sub = *key;
        sub.transform_pos = (uint32_t)(key->transform_pos * 256u + 64u + (unsigned)i) & 0xffffu;
        rng_stream saved = c->rng;
        int rc = run_ops(c, op->sub, &one, &sub, 1);
        c->rng = saved;
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Only the crop transforms (and ImgReplicatePil's copies) take a decoded window; the others
 * need the whole image, which selfsup-decode --crop then never leaves out (roi.c). */
static int check_windows(run_ctx *c, const aug_op *op, const aug_sample *s)
{
    if (op->kind == OP_RANDOM_RESIZED_CROP || op->kind == OP_MULTICROP || op->kind == OP_PATCHES_AND_IMAGE ||
        op->kind == OP_REPLICATE)
        return 0;
    for (int i = 0; i < s->n; i++)
        if (s->items[i].full_w > 0 && (op->kind == OP_MULTICROP_RANDOM_APPLY || aug_op_selects(op, i))) {
            snprintf(c->err, c->err_len,
                     "%s needs the whole image, but item %d is a %dx%d window of it: selfsup-decode --crop ran "
                     "with other transforms",
                     op->name, i, s->items[i].im.w, s->items[i].im.h);
            return -1;
        }
    return 0;
}

static int run_op(run_ctx *c, const aug_op *op, aug_sample *s, const rng_key *key)
{
    if (check_indices(c, op, s) != 0 || check_windows(c, op, s) != 0)
        return -1;
    if (op->kind == OP_MULTICROP_RANDOM_APPLY)
        return multicrop_random_apply(c, op, s, key);
    bool copy_kind = op->kind == OP_REPLICATE || op->kind == OP_MULTICROP || op->kind == OP_PATCHES_AND_IMAGE;
    if (!copy_kind) {
        for (int i = 0; i < s->n; i++)
            if (aug_op_selects(op, i) && apply_item(c, op, s, i) != 0)
                return -1;
        return 0;
    }
    /* Copies: make every item's copies first (draws in item order), then flatten. */
    int n = s->n;
    copies *all = xcalloc((size_t)n, sizeof *all);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!aug_op_selects(op, i))
            continue;
        if (s->items[i].towers > 1) {
            snprintf(c->err, c->err_len, "%s cannot take a list of patches", op->name);
            rc = -1;
        } else if (op->kind == OP_PATCHES_AND_IMAGE) {
            rc = patches_and_image(c, op, &s->items[i], &all[i], i);
        } else {
            rc = make_copies(c, op, &s->items[i], i, &all[i]);
        }
    }
    if (rc == 0)
        rc = flatten_copies(c, s, all);
    trace(c, "flatten");
    for (int i = 0; i < n; i++) {
        if (rc != 0 && !all[i].borrowed)
            for (int k = 0; k < all[i].n; k++)
                img_free(&all[i].ims[k]);
        free(all[i].ims);
    }
    free(all);
    return rc;
}

static int run_ops(run_ctx *c, const aug_pipeline *p, aug_sample *s, const rng_key *base, int depth)
{
    for (int t = 0; t < p->n_ops; t++) {
        rng_key key = *base;
        key.transform_pos = depth ? (base->transform_pos + (uint32_t)t * 4096u) & 0xffffu : (uint32_t)t;
        rng_stream_init(&c->rng, key);
        trace(c, "T %s", p->ops[t].name);
        if (run_op(c, &p->ops[t], s, &key) != 0)
            return -1;
    }
    return 0;
}

int aug_apply(const aug_pipeline *p, aug_sample *s, uint64_t seed, uint32_t epoch, uint64_t sample_index, char *err,
              size_t err_len)
{
    return aug_apply_traced(p, s, seed, epoch, sample_index, NULL, err, err_len);
}

int aug_apply_traced(const aug_pipeline *p, aug_sample *s, uint64_t seed, uint32_t epoch, uint64_t sample_index,
                     strbuf *trace_out, char *err, size_t err_len)
{
    run_ctx c = {.err = err, .err_len = err_len, .trace = trace_out};
    rng_key key = {.seed = seed, .purpose = RNG_PURPOSE_TRANSFORM, .epoch = epoch, .sample_index = sample_index};
    if (sample_index >= (1ull << 32)) {
        snprintf(err, err_len, "sample index %llu is too large for the transform RNG",
                 (unsigned long long)sample_index);
        return -1;
    }
    if (run_ops(&c, p, s, &key, 0) != 0)
        return -1;
    for (int i = 0; i < s->n; i++)
        if (s->items[i].full_w > 0) {
            snprintf(err, err_len, "item %d is still a %dx%d window of the decoded image after the transforms: "
                     "selfsup-decode --crop ran with other transforms", i, s->items[i].im.w, s->items[i].im.h);
            return -1;
        }
    return 0;
}
