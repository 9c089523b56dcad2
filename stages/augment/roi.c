/*
 * roi.c — which part of a decoded image the transforms will read (aug_pipeline_roi).
 *
 * SimCLR's and SwAV's transforms start by cutting RandomResizedCrops out of the photo, and
 * torchvision's crop-then-resize never reads a pixel outside its box. Since every random
 * draw is keyed by (seed, epoch, sample, transform), the decode stage can draw the same
 * boxes from the image's size alone and decode only their union (decode_image_roi) — the
 * biggest saving left in the data path, with not one pixel changed.
 *
 * The walk below replays the leading transforms without pixels. It follows each item that
 * is still the whole source image ("whole") through the list: copies (ImgReplicatePil) keep
 * it whole; RandomResizedCrop, ImgPilToMultiCrop and ImgPilToPatchesAndImage draw their
 * boxes exactly as apply.c does (same stream, same order) and add them to the box; any
 * other transform that touches a whole item, or one left whole at the end, needs all of it.
 * A draw that depends on an item the walk cannot see (one already cropped) makes the rest
 * of that transform's draws unknown, and so needs all of the image too.
 */
#include "augment/transforms_internal.h"

#include "rng.h"

#include <stdbool.h>
#include <string.h>

/* A top-level list makes at most REC_MAX_TENSORS - 4 items (aug_pipeline_build checks), so
 * the walk needs no allocation: it runs per image on the decode threads. */
enum { ROI_MAX_ITEMS = REC_MAX_TENSORS };

typedef struct {
    int w, h;                   /* the source image */
    int box[4];                 /* union of the crop boxes so far: x0, y0, x1, y1 */
    bool any, all;              /* some box drawn; the whole image needed */
    bool whole[ROI_MAX_ITEMS];  /* per item of the walk: still the whole image */
    int n;
} roi_walk;

static void add_box(roi_walk *r, const int b[4])
{
    int x1 = b[0] + b[2], y1 = b[1] + b[3];
    if (!r->any) {
        r->box[0] = b[0], r->box[1] = b[1], r->box[2] = x1, r->box[3] = y1;
        r->any = true;
        return;
    }
    r->box[0] = b[0] < r->box[0] ? b[0] : r->box[0];
    r->box[1] = b[1] < r->box[1] ? b[1] : r->box[1];
    r->box[2] = x1 > r->box[2] ? x1 : r->box[2];
    r->box[3] = y1 > r->box[3] ? y1 : r->box[3];
}

/* Replace the items by `counts[i]` items each (the flattening of a copy transform), whole
 * where `keep_whole[i]`. */
static void flatten(roi_walk *r, const int *counts, const bool *keep_whole)
{
    bool next[ROI_MAX_ITEMS];
    int n = 0;
    for (int i = 0; i < r->n; i++)
        for (int c = 0; c < counts[i]; c++, n++) {
            if (n == ROI_MAX_ITEMS) { /* more than a record holds: aug_apply fails anyway */
                r->all = true;
                return;
            }
            next[n] = keep_whole[i];
        }
    memcpy(r->whole, next, (size_t)n * sizeof *next);
    r->n = n;
}

/* The boxes one item draws from the transform's stream; false when the item is no longer
 * the whole image, so its draws (which depend on its size) are unknown. */
static bool draw_item(roi_walk *r, const aug_op *op, rng_stream *st, int i)
{
    if (!r->whole[i])
        return false;
    int b[4];
    const double ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
    switch (op->kind) {
    case OP_RANDOM_RESIZED_CROP:
        aug_rrc_box(st, r->w, r->h, op->scale, op->ratio, b);
        add_box(r, b);
        return true;
    case OP_MULTICROP:
        for (int t = 0; t < op->n_types; t++)
            for (int k = 0; k < op->multicrop[t].count; k++) {
                aug_rrc_box(st, r->w, r->h, op->multicrop[t].scale, ratio, b);
                add_box(r, b);
            }
        return true;
    default: /* OP_PATCHES_AND_IMAGE: the image crop, then the crop the patches come from */
        aug_rrc_box(st, r->w, r->h, op->scale, op->ratio, b);
        add_box(r, b);
        aug_rrc_box(st, r->w, r->h, op->scale2, op->ratio, b);
        add_box(r, b);
        return true;
    }
}

/* How many items item i becomes under a copy transform. */
static int copies_of(const aug_op *op)
{
    if (op->kind == OP_REPLICATE)
        return op->num_times;
    if (op->kind == OP_PATCHES_AND_IMAGE)
        return op->num_patches + 1;
    int total = 0;
    for (int t = 0; t < op->n_types; t++)
        total += op->multicrop[t].count;
    return total;
}

/* One transform of the list. Returns false when the walk can stop (nothing whole is left,
 * or everything is needed). */
static bool walk_op(roi_walk *r, const aug_op *op, rng_stream *st)
{
    for (int k = 0; k < op->n_indices; k++)
        if (op->indices[k] >= r->n)
            return r->all = true, false; /* aug_apply refuses it anyway */
    bool crops = op->kind == OP_RANDOM_RESIZED_CROP || op->kind == OP_MULTICROP || op->kind == OP_PATCHES_AND_IMAGE;
    bool copies = op->kind == OP_REPLICATE || op->kind == OP_MULTICROP || op->kind == OP_PATCHES_AND_IMAGE;
    int counts[ROI_MAX_ITEMS];
    bool keep[ROI_MAX_ITEMS];
    bool known = true; /* the stream's position is still known */
    for (int i = 0; i < r->n; i++) {
        bool sel = aug_op_selects(op, i);
        counts[i] = sel && copies ? copies_of(op) : 1;
        keep[i] = r->whole[i];
        if (!sel)
            continue;
        if (crops) {
            if (r->whole[i] && !known)
                r->all = true;
            else
                known = draw_item(r, op, st, i) && known;
            keep[i] = false;
        } else if (op->kind != OP_REPLICATE && r->whole[i]) {
            r->all = true; /* a transform of the whole image */
        }
        /* OP_PATCHES_AND_IMAGE draws patch offsets and a permutation after its crops */
        if (op->kind == OP_PATCHES_AND_IMAGE)
            known = false;
    }
    if (copies)
        flatten(r, counts, keep);
    else
        memcpy(r->whole, keep, (size_t)r->n * sizeof *keep);
    bool whole_left = false;
    for (int i = 0; i < r->n; i++)
        whole_left |= r->whole[i];
    return whole_left && !r->all;
}

void aug_pipeline_roi(const aug_pipeline *p, uint64_t seed, uint32_t epoch, uint64_t sample_index, int w, int h,
                      int box[4])
{
    box[0] = 0, box[1] = 0, box[2] = w, box[3] = h;
    if (!p || w <= 0 || h <= 0 || sample_index >= (1ull << 32))
        return;
    roi_walk r = {.w = w, .h = h, .n = 1, .whole = {true}};
    rng_key key = {.seed = seed, .purpose = RNG_PURPOSE_TRANSFORM, .epoch = epoch, .sample_index = sample_index};
    bool more = true;
    for (int t = 0; more && t < p->n_ops; t++) {
        rng_stream st;
        key.transform_pos = (uint32_t)t; /* as run_ops keys the top-level list */
        rng_stream_init(&st, key);
        more = walk_op(&r, &p->ops[t], &st);
    }
    bool whole_left = false;
    for (int i = 0; i < r.n; i++)
        whole_left |= r.whole[i];
    if (r.any && !r.all && !whole_left)
        for (int k = 0; k < 4; k++)
            box[k] = r.box[k];
}
