/*
 * transforms_internal.h — the parsed form of a transform list, shared by transforms.c (which
 * builds it from the config) and apply.c (which runs it). Not for other stages.
 */
#ifndef SELFSUP_AUGMENT_TRANSFORMS_INTERNAL_H
#define SELFSUP_AUGMENT_TRANSFORMS_INTERNAL_H

#include "augment/transforms.h"
#include "rng.h"

typedef enum {
    OP_RANDOM_RESIZED_CROP,
    OP_RESIZE,
    OP_CENTER_CROP,
    OP_RANDOM_CROP,
    OP_HFLIP,
    OP_COLOR_JITTER,       /* ColorJitter, ImgPilRandomColorJitter: RandomApply(jitter, p) */
    OP_GRAYSCALE,
    OP_COLOR_DISTORTION,   /* RandomApply(jitter, p) then RandomGrayscale(p2) */
    OP_BLUR,
    OP_PHOTOMETRIC,
    OP_SOLARIZE,
    OP_REPLICATE,
    OP_MULTICROP,
    OP_PATCHES_AND_IMAGE,
    OP_ROTATE,
    OP_PATCHES,
    OP_SHUFFLE_PATCHES,
    OP_MULTICROP_RANDOM_APPLY,
    OP_TO_TENSOR,
    OP_NORMALIZE,
    OP_LAB,                /* ImgPil2LabTensor: the last transform of its items */
} aug_op_kind;

/* A uniform range for one ColorJitter factor; `on` false when torchvision would skip it. */
typedef struct {
    bool on;
    double lo, hi;
} aug_range;

typedef struct {
    int count, size;
    double scale[2];
} aug_crop_type;

typedef struct aug_op {
    aug_op_kind kind;
    const char *name;
    int *indices, n_indices;   /* empty: every item */
    int size[2];               /* h, w (RandomResizedCrop, Resize, CenterCrop, RandomCrop, image crop) */
    bool size_is_int;          /* Resize: an int is the shorter side */
    int max_size;              /* Resize */
    double scale[2], ratio[2]; /* RandomResizedCrop; the image crop of ImgPilToPatchesAndImage */
    double scale2[2];          /* ImgPilToPatchesAndImage: the crop the patches come from */
    int size2;
    img_filter filter;
    double p, p2;
    aug_range jitter[4];       /* brightness, contrast, saturation, hue */
    double radius[2];
    int num_times;
    aug_crop_type *multicrop;
    int n_types;
    int num_patches, patch_jitter, num_angles;
    int64_t *perms;
    int n_perms, perm_len;
    struct aug_pipeline *sub;
    double *probs;
    int n_probs;
    float div, mean[3], std[3];
    int pad[4];                /* RandomCrop padding: left, top, right, bottom */
    bool pad_if_needed;
    img_pad_mode pad_mode;
    uint8_t fill[3];
} aug_op;

struct aug_pipeline {
    aug_op *ops;
    int n_ops;
    aug_normalize norm;
};

/* SSLTransformsWrapper's `indices`: whether the transform touches item i (empty: all). */
static inline bool aug_op_selects(const aug_op *op, int i)
{
    if (!op->n_indices)
        return true;
    for (int k = 0; k < op->n_indices; k++)
        if (op->indices[k] == i)
            return true;
    return false;
}

/* torchvision's RandomResizedCrop.get_params on a W x H image: box = (x, y, w, h), drawn
 * from r (apply.c; roi.c replays it). */
void aug_rrc_box(rng_stream *r, int W, int H, const double scale[2], const double ratio[2], int box[4]);

#endif
