/*
 * transforms.h — VISSL's transform list (DATA.<split>.TRANSFORMS), parsed once and applied to
 * one sample at a time.
 *
 * A sample is VISSL's sample dict: a list of items ("data": images, or stacks of patches),
 * a label list, and per-item data_valid / data_idx. aug_apply() runs every transform in
 * order with SSLTransformsWrapper's rules: `indices` picks the items a transform touches;
 * copy transforms (ImgReplicatePil, ImgPilToMultiCrop, ImgPilToPatchesAndImage) flatten
 * their copies into the list and replicate label, data_valid and data_idx; label transforms
 * (ImgRotatePil, ShuffleImgPatches) overwrite the LAST label (VISSL's `label[-1] = ...`);
 * grouping transforms (ImgPilMultiCropRandomApply) see the whole list.
 *
 * Randomness: transform number t draws from the counter-based stream
 * (seed, RNG_PURPOSE_TRANSFORM, epoch, data_idx, t), items in list order, so a sample's
 * crops depend on nothing but those five numbers — not on the worker that made them.
 *
 * Pixels stay 8-bit: ToTensor / ImgToTensor / ImgPilToRawTensor and Normalize only record
 * the arithmetic (divide, subtract mean, divide by std) for whoever turns the bytes into
 * floats (aug_normalize), which is exact because every transform allowed after them only
 * moves pixels (patches, shuffles, flips).
 */
#ifndef SELFSUP_AUGMENT_TRANSFORMS_H
#define SELFSUP_AUGMENT_TRANSFORMS_H

#include "augment/img.h"
#include "config.h"
#include "record.h"
#include "util.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct aug_pipeline aug_pipeline;

/* One entry of the sample's data list: an RGB image, or `towers` equal patches stacked
 * top to bottom (im.h = towers * patch height), as ImgPatchesFromTensor makes them.
 * `borrowed` pixels belong to someone else (the input record): read, never written or freed;
 * a transform that changes pixels in place copies them first. */
typedef struct {
    img_u8 im;
    int towers;
    bool borrowed;
    /* A window of a larger image (selfsup-decode --crop): `im` holds the pixels at
     * (win_x, win_y) of a full_w x full_h image, and full_w = 0 for an ordinary item. Only
     * the crop transforms take a window: they draw their boxes from the full size, and a box
     * that leaves the window is an error, never a wrong pixel. */
    int win_x, win_y, full_w, full_h;
    /* ImgPil2LabTensor made this item: its bytes are OpenCV's 8-bit L, a, b, and it leaves as
     * VISSL's float tensor (L * (100/255) - 50, a - 128, b - 128), whatever --float says. */
    bool lab;
} aug_item;

typedef struct {
    aug_item *items;
    int64_t *valid, *idx; /* per item */
    int n, cap;
    int64_t *label;       /* n_label labels, each a row of label_width values */
    int n_label, cap_label;
    int label_width;      /* 1, or M for a 2-D label .npy (sample.h); 0 counts as 1 */
} aug_sample;

/* The arithmetic that turns a byte into the float VISSL's model sees:
 * (px / div - mean[c]) / std[c], in float32, in that order. */
typedef struct {
    bool pending; /* false: the transforms never asked for a tensor */
    float div, mean[3], std[3];
} aug_normalize;

/* Parse a TRANSFORMS list. NULL with err filled (file, line, key) on a bad list: an unknown
 * transform or parameter, a wrong value, or a pixel transform after ToTensor. */
aug_pipeline *aug_pipeline_build(const cfg_node *transforms, const char *key, cfg_err *err);
void aug_pipeline_free(aug_pipeline *p);
aug_normalize aug_pipeline_normalize(const aug_pipeline *p);

/* The bytes of one augmented sample record when the transforms fix every crop's size (true),
 * for `sources` decoded images and 1 (uint8) or 4 (float32) bytes per value; false when a
 * size depends on the image (e.g. Resize to a shorter side with no crop after it). */
bool aug_pipeline_sample_bytes(const aug_pipeline *p, int sources, int bytes_per_value, size_t *bytes);

/* Start a sample from decoded images: n_src items that the sample takes over (freed by
 * aug_sample_release), with their labels, validity and indices. */
void aug_sample_init(aug_sample *s, const img_u8 *images, int n_src, const int64_t *label, int n_label,
                     const int64_t *valid, const int64_t *idx);
/* The same with images the sample only borrows: they must stay valid until the caller is
 * done with the result, and are never written (a record in a ring slot, say). Saves copying
 * a decoded photo when the first transform crops it anyway. */
void aug_sample_borrow(aug_sample *s, const img_u8 *images, int n_src, const int64_t *label, int n_label,
                       const int64_t *valid, const int64_t *idx);
/* Replace the sample's labels by n_label rows of `width` values each (a record's 2-D
 * `label`): copies replicate whole rows; label transforms refuse them. */
void aug_sample_set_labels(aug_sample *s, const int64_t *label, int n_label, int width);

/* Mark item i as a window at (x, y) of a full_w x full_h image (decode_image_roi). */
void aug_sample_set_window(aug_sample *s, int i, int x, int y, int full_w, int full_h);

/* The part of a w x h image that aug_apply will read for a sample of that one image:
 * box = {x0, y0, x1, y1} (x1, y1 exclusive), the union of the boxes its leading
 * RandomResizedCrop / ImgPilToMultiCrop / ImgPilToPatchesAndImage transforms draw, or the
 * whole image when a transform needs all of it (roi.c). aug_apply on that window, marked
 * with aug_sample_set_window, gives the same bytes as on the whole image. */
void aug_pipeline_roi(const aug_pipeline *p, uint64_t seed, uint32_t epoch, uint64_t sample_index, int w, int h,
                      int box[4]);

/* Free the items' own pixels and empty the lists, keeping their memory for the next sample. */
void aug_sample_release(aug_sample *s);
/* aug_sample_release, then free the lists. */
void aug_sample_clear(aug_sample *s);

/* Run the pipeline on `s` in place. Returns 0, or -1 with a message in err (a runtime
 * impossibility VISSL would also raise on, e.g. RandomCrop larger than the image). */
int aug_apply(const aug_pipeline *p, aug_sample *s, uint64_t seed, uint32_t epoch, uint64_t sample_index,
              char *err, size_t err_len);

/* Write an augmented sample into w as selfsup-augment sends it (sample.h): data.K per item
 * (uint8 HWC, or float32 CHW with to_float), label, data_valid, data_idx, and `normalize`
 * while the tensor arithmetic is still pending. w needs aug_sample_tensors(s) descriptors.
 * Returns 0, or -1 when a tensor did not fit (rec_finish says how much was needed). */
int aug_sample_write(const aug_sample *s, const aug_normalize *norm, bool to_float, rec_writer *w);
static inline uint32_t aug_sample_tensors(const aug_sample *s)
{
    return (uint32_t)s->n + 4;
}

/* aug_apply, writing every random decision to `trace` as one line each, in the order they
 * were taken ("rrc ITEM X Y W H OUT_W OUT_H FILTER", "flip ITEM", "jitter ITEM ORDER... ON...
 * FACTORS...", ...): tests/golden/make_augment_fixtures.py replays these with torchvision and
 * PIL to make the chain fixtures. */
int aug_apply_traced(const aug_pipeline *p, aug_sample *s, uint64_t seed, uint32_t epoch, uint64_t sample_index,
                     strbuf *trace, char *err, size_t err_len);

#endif
