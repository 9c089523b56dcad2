/*
 * cfg_names.c — the names VISSL knows: transforms (with their parameters), losses,
 * collators, schedulers, trunks, heads, optimizers, data sources, engines.
 *
 * The config layer accepts every name VISSL 0.1.5 registers, plus the later names that
 * VISSL's published configs use, so those configs load unchanged; a name outside these
 * lists is a typo and gets a "did you mean". Whether selfsup implements a name is the
 * business of the stage that builds it, which refuses an unimplemented one by name.
 */
#include "cfg_internal.h"

#include "util.h"

#include <string.h>

/* Transforms: name, then the keyword arguments its constructor/from_config accepts.
 * ANY_PARAMS marks the ones whose parameters are not checked (they vary across versions). */
typedef struct {
    const char *name;
    const char *params[12];
} transform_spec;

#define ANY_PARAMS "*"

static const transform_spec TRANSFORMS[] = {
    /* VISSL 0.1.5 */
    {"ImgPatchesFromTensor", {"num_patches", "patch_jitter"}},
    {"ImgPilColorDistortion", {"strength", "brightness", "contrast", "saturation", "hue"}},
    {"ImgPilGaussianBlur", {"p", "radius_min", "radius_max"}},
    {"ImgPilMultiCropRandomApply", {"transforms", "prob"}},
    {"ImgPilRandomColorJitter", {"strength", "p", "prob"}},
    {"ImgPilRandomPhotometric", {"p"}},
    {"ImgPilRandomSolarize", {"p", "prob"}},
    {"ImgPil2LabTensor", {NULL}},
    {"ImgPilToMultiCrop", {"total_num_crops", "num_crops", "size_crops", "crop_scales"}},
    {"ImgPilToPatchesAndImage", {"crop_scale_image", "crop_size_image", "crop_scale_patches",
                                 "crop_size_patches", "permute_patches", "num_patches"}},
    {"ImgPilToRawTensor", {NULL}},
    {"ImgReplicatePil", {"num_times"}},
    {"ImgRotatePil", {"num_angles", "num_rotations_per_img"}},
    {"ImgToTensor", {NULL}},
    {"ShuffleImgPatches", {"perm_file"}},
    /* torchvision (0.14's constructor arguments) */
    {"ToTensor", {NULL}},
    {"PILToTensor", {NULL}},
    {"ConvertImageDtype", {"dtype"}},
    {"ToPILImage", {"mode"}},
    {"Normalize", {"mean", "std", "inplace"}},
    {"Resize", {"size", "interpolation", "max_size", "antialias"}},
    {"CenterCrop", {"size"}},
    {"Pad", {"padding", "fill", "padding_mode"}},
    {"RandomCrop", {"size", "padding", "pad_if_needed", "fill", "padding_mode"}},
    {"RandomHorizontalFlip", {"p"}},
    {"RandomVerticalFlip", {"p"}},
    {"RandomResizedCrop", {"size", "scale", "ratio", "interpolation", "antialias"}},
    {"FiveCrop", {"size"}},
    {"TenCrop", {"size", "vertical_flip"}},
    {"ColorJitter", {"brightness", "contrast", "saturation", "hue"}},
    {"RandomRotation", {"degrees", "interpolation", "expand", "center", "fill"}},
    {"RandomAffine", {"degrees", "translate", "scale", "shear", "interpolation", "fill", "center"}},
    {"Grayscale", {"num_output_channels"}},
    {"RandomGrayscale", {"p"}},
    {"RandomPerspective", {"distortion_scale", "p", "interpolation", "fill"}},
    {"RandomErasing", {"p", "scale", "ratio", "value", "inplace"}},
    {"GaussianBlur", {"kernel_size", "sigma"}},
    {"RandomInvert", {"p"}},
    {"RandomPosterize", {"bits", "p"}},
    {"RandomSolarize", {"threshold", "p"}},
    {"RandomAdjustSharpness", {"sharpness_factor", "p"}},
    {"RandomAutocontrast", {"p"}},
    {"RandomEqualize", {"p"}},
    {"AutoAugment", {"policy", "interpolation", "fill"}},
    {"RandAugment", {ANY_PARAMS}},
    {"TrivialAugmentWide", {"num_magnitude_bins", "interpolation", "fill"}},
    /* newer than VISSL 0.1.5, used by published configs */
    {"ImgPilRandomGaussianBlur", {ANY_PARAMS}},
    {"MNISTImgPil2ColorImg", {ANY_PARAMS}},
    {"Mixup", {ANY_PARAMS}},
    {"MaskedImageModeling", {ANY_PARAMS}},
    {"RandomSolarization", {ANY_PARAMS}},
    {"ImgPilToTensor", {ANY_PARAMS}},
};

/* Keys every transform entry may carry besides its own parameters. */
static const char *const TRANSFORM_COMMON_KEYS[] = {"name", "indices", "transform_type"};

static const char *const LOSSES[] = {
    "simclr_info_nce_loss", "multicrop_simclr_info_nce_loss", "swav_loss", "swav_momentum_loss",
    "moco_loss", "nce_loss_with_memory", "deepclusterv2_loss", "cross_entropy_multiple_output_single_target",
    "bce_logits_multiple_output_single_target",
    /* ClassyVision / PyTorch losses VISSL resolves by class name */
    "CrossEntropyLoss", "BCEWithLogitsLoss", "BCELoss", "MSELoss", "L1Loss", "NLLLoss", "SmoothL1Loss",
    "KLDivLoss", "soft_target_cross_entropy", "label_smoothing_cross_entropy",
    /* newer than 0.1.5 */
    "barlow_twins_loss", "byol_loss", "nnclr_info_nce_loss", "dino_loss", "ibot_loss", "msn_loss", "distillation_loss",
    "dino_distillation_loss", "swav_distillation_loss", "ibot_distillation_loss",
    "simclr_info_nce_loss_v2",
};

static const char *const COLLATORS[] = {
    "default_collate", "multicrop_collator", "multicrop_mixup_collator", "simclr_collator", "moco_collator",
    "siamese_collator", "patch_and_image_collator", "targets_one_hot_default_collator",
    /* newer than 0.1.5 */
    "cutmixup_collator", "ibot_multicrop_masking_collator", "multicrop_with_bbox_collator",
};

static const char *const SCHEDULERS[] = {
    "constant", "linear", "cosine", "multistep", "step", "step_with_fixed_gamma", "composite",
    "cosine_warm_restart", "inverse_sqrt",
};

static const char *const TRUNKS[] = {
    "resnet", "regnet", "efficientnet", "alexnet_bvlc", "alexnet_colorization", "alexnet_deepcluster",
    "alexnet_jigsaw", "alexnet_rotnet", "feature_extractor",
    /* newer than 0.1.5 */
    "vision_transformer", "vision_transformer_deit", "xcit", "convit", "convnext", "swin_transformer",
    "regnet_fsdp", "regnet_v2", "resnext",
};

static const char *const HEADS[] = {
    "mlp", "eval_mlp", "siamese_concat_view", "swav_head",
    /* newer than 0.1.5 */
    "swav_head_fsdp", "mlp_fsdp", "eval_mlp_fsdp", "dino_head", "dino_head_fsdp", "ibot_head", "identity",
    "linear_eval_mlp", "msn_head", "vision_transformer_head",
};

static const char *const OPTIMIZERS[] = {"sgd", "adam", "adamw", "rmsprop", "rmsprop_tf", "zero", "sgd_fsdp", "lars"};

static const char *const DATA_SOURCES[] = {"disk_folder", "disk_filelist", "synthetic",
                                           "disk_roi_annotations", "torchvision_dataset"};

static const char *const ENGINES[] = {"train", "extract_features", "extract_label_predictions",
                                      "extract_cluster"};

static const char *TRANSFORM_NAMES[ARRAY_LEN(TRANSFORMS)];

const char *const *cfg_known_names(const char *kind, size_t *count)
{
#define KIND(k, table)                  \
    if (!strcmp(kind, k)) {             \
        *count = ARRAY_LEN(table);      \
        return (const char *const *)table; \
    }
    if (!strcmp(kind, "transform")) {
        for (size_t k = 0; k < ARRAY_LEN(TRANSFORMS); k++)
            TRANSFORM_NAMES[k] = TRANSFORMS[k].name;
        *count = ARRAY_LEN(TRANSFORMS);
        return TRANSFORM_NAMES;
    }
    KIND("loss", LOSSES)
    KIND("collator", COLLATORS)
    KIND("scheduler", SCHEDULERS)
    KIND("trunk", TRUNKS)
    KIND("head", HEADS)
    KIND("optimizer", OPTIMIZERS)
    KIND("data_source", DATA_SOURCES)
    KIND("engine", ENGINES)
#undef KIND
    *count = 0;
    return NULL;
}

/* The parameters of transform `name` (count 0: takes none); NULL when the name is unknown
 * or its parameters are not checked. */

const char *const *cfg_transform_params(const char *name, size_t *count)
{
    for (size_t k = 0; k < ARRAY_LEN(TRANSFORMS); k++) {
        if (strcmp(TRANSFORMS[k].name, name))
            continue;
        if (TRANSFORMS[k].params[0] && !strcmp(TRANSFORMS[k].params[0], ANY_PARAMS))
            return NULL;
        size_t n = 0;
        while (n < ARRAY_LEN(TRANSFORMS[k].params) && TRANSFORMS[k].params[n])
            n++;
        *count = n;
        return TRANSFORMS[k].params;
    }
    return NULL;
}


bool cfg_is_transform_common_key(const char *key)
{
    for (size_t k = 0; k < ARRAY_LEN(TRANSFORM_COMMON_KEYS); k++)
        if (!strcmp(TRANSFORM_COMMON_KEYS[k], key))
            return true;
    return false;
}
