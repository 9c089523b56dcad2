/*
 * test_augment.c — the transform list of selfsup-augment (stages/augment/transforms.h).
 *
 * What VISSL's SSLTransformsWrapper and torchvision do with a sample, checked on small
 * synthetic images whose expected results are derived by hand: copies flatten and replicate
 * label/data_valid/data_idx, label transforms overwrite the last label, `indices` limits a
 * transform, ToTensor/Normalize fold into the pending normalisation, sizes follow
 * torchvision's rules (Resize's shorter side, CenterCrop's padding), random parameters stay
 * inside their distributions' support, and everything is a pure function of (seed, epoch,
 * sample index). Bad lists are refused with the position of the bad key. Pixel parity with
 * PIL is tested with the kernels (test_img_resample.c, test_img_color.c) and the chains.
 */
#include "augment/transforms.h"
#include "config.h"
#include "npy.h"
#include "record.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static cfg_node *g_root;

/* Parse a YAML list of transforms (the value of `t:` in the document). */
static aug_pipeline *build(const char *yaml, cfg_err *err)
{
    cfg_err perr;
    cfg_free(g_root);
    g_root = cfg_parse_yaml(yaml, strlen(yaml), "t.yaml", &perr);
    cr_assert(g_root, "yaml: %s", perr.msg);
    return aug_pipeline_build(cfg_map_get(g_root, "t"), "config.DATA.TRAIN.TRANSFORMS", err);
}

static aug_pipeline *build_ok(const char *yaml)
{
    cfg_err err;
    aug_pipeline *p = build(yaml, &err);
    cr_assert(p, "refused: %s", err.msg);
    return p;
}

/* A w x h RGB image whose pixel (x, y) is (x, y, x + y) mod 256: positions are readable back. */
static img_u8 coords_image(int w, int h)
{
    img_u8 im = img_alloc(w, h, 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = im.px + (size_t)y * im.stride + (size_t)x * 3;
            p[0] = (uint8_t)x, p[1] = (uint8_t)y, p[2] = (uint8_t)(x + y);
        }
    return im;
}

static void one_sample(aug_sample *s, int w, int h, int64_t label, int64_t idx)
{
    img_u8 im = coords_image(w, h);
    int64_t valid = 1;
    aug_sample_init(s, &im, 1, &label, 1, &valid, &idx);
}

static void run_ok(const aug_pipeline *p, aug_sample *s, uint64_t seed, uint32_t epoch)
{
    char err[256];
    int rc = aug_apply(p, s, seed, epoch, (uint64_t)s->idx[0], err, sizeof err);
    cr_assert_eq(rc, 0, "aug_apply: %s", err);
}

/* A list built and applied to one coordinate image; applied_free frees both. */
typedef struct {
    aug_pipeline *p;
    aug_sample s;
} applied;

/* The list `yaml` applied (epoch 0, `seed`) to a w x h coordinate image with `label`, index `idx`. */
static applied apply_to_coords(const char *yaml, int w, int h, int64_t label, int64_t idx, uint64_t seed)
{
    applied a = {.p = build_ok(yaml)};
    one_sample(&a.s, w, h, label, idx);
    run_ok(a.p, &a.s, seed, 0);
    return a;
}

static void applied_free(applied *a)
{
    aug_sample_clear(&a->s);
    aug_pipeline_free(a->p);
}

/* The sample written as one record (float32 pixels if to_float) into a buffer the caller frees. */
static void *written(const aug_sample *s, bool to_float, rec_view *v)
{
    size_t cap = 1 << 16;
    void *buf = aligned_alloc(64, cap);
    rec_writer w;
    cr_assert_eq(rec_writer_init(&w, buf, cap, REC_DATA, 0, 0, aug_sample_tensors(s)), 0);
    aug_normalize none = {0};
    cr_assert_eq(aug_sample_write(s, &none, to_float, &w), 0);
    size_t len = rec_finish(&w);
    char *err = NULL;
    cr_assert(len && rec_parse(buf, len, v, &err) == 0, "%s", err ? err : "empty record");
    return buf;
}

static bool same_pixels(const img_u8 *a, const img_u8 *b)
{
    if (a->w != b->w || a->h != b->h || a->c != b->c)
        return false;
    for (int y = 0; y < a->h; y++)
        if (memcmp(a->px + (size_t)y * a->stride, b->px + (size_t)y * b->stride, (size_t)a->w * (size_t)a->c))
            return false;
    return true;
}

static void teardown(void)
{
    cfg_free(g_root);
    g_root = NULL;
}

TestSuite(augment, .fini = teardown);

/* ---- the wrapper's list rules ------------------------------------------------------------ */

Test(augment, replicate_flattens_and_replicates_metadata)
{
    applied a = apply_to_coords("t:\n  - {name: ImgReplicatePil, num_times: 3}\n", 5, 4, 7, 42, 0);
    cr_assert_eq(a.s.n, 3);
    cr_assert_eq(a.s.n_label, 3);
    img_u8 ref = coords_image(5, 4);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(a.s.label[k], 7);
        cr_assert_eq(a.s.idx[k], 42);
        cr_assert_eq(a.s.valid[k], 1);
        cr_assert(same_pixels(&a.s.items[k].im, &ref), "copy %d differs from the image", k);
    }
    img_free(&ref);
    applied_free(&a);
}

Test(augment, multicrop_makes_crops_in_type_order)
{
    applied a =
        apply_to_coords("t:\n  - name: ImgPilToMultiCrop\n    total_num_crops: 5\n    num_crops: [2, 3]\n"
                        "    size_crops: [24, 8]\n    crop_scales: [[0.14, 1], [0.05, 0.14]]\n",
                        64, 48, 3, 9, 1);
    cr_assert_eq(a.s.n, 5);
    for (int k = 0; k < 5; k++) {
        int want = k < 2 ? 24 : 8;
        cr_assert_eq(a.s.items[k].im.w, want, "crop %d is %d wide", k, a.s.items[k].im.w);
        cr_assert_eq(a.s.items[k].im.h, want);
        cr_assert_eq(a.s.label[k], 3);
    }
    applied_free(&a);
}

Test(augment, rotate_overwrites_the_last_label_with_the_angle_index)
{
    /* A square image: rotation is a transposition, so the angle can be read back from where
     * pixel (0,0) went. Label index = angle / 90. */
    int seen[4] = {0};
    for (int idx = 0; idx < 64; idx++) {
        applied a = apply_to_coords("t:\n  - {name: ImgRotatePil}\n", 6, 6, 100, idx, 5);
        cr_assert_eq(a.s.n_label, 1);
        int64_t l = a.s.label[0];
        cr_assert(l >= 0 && l < 4, "label %lld", (long long)l);
        seen[l]++;
        /* counter-clockwise by 90*l: the top-left source corner (0,0,0) lands at top-left
         * (0), bottom-left (90), bottom-right (180), top-right (270). */
        int cx[4] = {0, 0, 5, 5}, cy[4] = {0, 5, 5, 0};
        const img_u8 *o = &a.s.items[0].im;
        const uint8_t *px = o->px + (size_t)cy[l] * o->stride + (size_t)cx[l] * 3;
        cr_assert(px[0] == 0 && px[1] == 0, "label %lld: corner (0,0) not where a %lld-degree turn puts it",
                  (long long)l, (long long)l * 90);
        applied_free(&a);
    }
    for (int l = 0; l < 4; l++)
        cr_assert(seen[l] > 0, "angle %d never drawn in 64 samples", l * 90);
}

Test(augment, indices_limit_a_transform)
{
    /* Crop copy 1 only; copy 0 keeps its size. */
    applied a = apply_to_coords("t:\n  - {name: ImgReplicatePil, num_times: 2}\n"
                                "  - {name: CenterCrop, size: 3, indices: [1]}\n",
                                9, 7, 0, 0, 0);
    cr_assert_eq(a.s.items[0].im.w, 9);
    cr_assert_eq(a.s.items[1].im.w, 3);
    applied_free(&a);
}

Test(augment, indices_past_the_list_fail_at_run_time)
{
    aug_pipeline *p = build_ok("t:\n  - {name: CenterCrop, size: 3, indices: [2]}\n");
    aug_sample s = {0};
    one_sample(&s, 9, 7, 0, 0);
    char err[256];
    cr_assert_neq(aug_apply(p, &s, 0, 0, 0, err, sizeof err), 0);
    cr_assert(strstr(err, "indices"), "%s", err);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
}

/* ---- torchvision's sizes ---------------------------------------------------------------- */

Test(augment, resize_int_sets_the_shorter_side_and_truncates_the_longer)
{
    /* 500x375 -> 341x256 (int(256 * 500 / 375) = 341); 375x500 -> 256x341. */
    const char *resize = "t:\n  - {name: Resize, size: 256}\n";
    applied a = apply_to_coords(resize, 500, 375, 0, 0, 0);
    cr_assert_eq(a.s.items[0].im.w, 341);
    cr_assert_eq(a.s.items[0].im.h, 256);
    applied_free(&a);
    a = apply_to_coords(resize, 375, 500, 0, 0, 0);
    cr_assert_eq(a.s.items[0].im.w, 256);
    cr_assert_eq(a.s.items[0].im.h, 341);
    applied_free(&a);
}

Test(augment, center_crop_takes_the_middle_with_round_half_even)
{
    /* 9 wide -> 4: left = round(2.5) = 2 (Python rounds half to even); 7 high -> 4: top = round(1.5) = 2. */
    applied a = apply_to_coords("t:\n  - {name: CenterCrop, size: 4}\n", 9, 7, 0, 0, 0);
    const uint8_t *px = a.s.items[0].im.px;
    cr_assert_eq(px[0], 2, "left offset %d", px[0]);
    cr_assert_eq(px[1], 2, "top offset %d", px[1]);
    applied_free(&a);
}

Test(augment, center_crop_larger_than_the_image_pads_with_zeros)
{
    /* 3x3 -> 6x6: pad left (6-3)//2 = 1, right 2; the source pixel (0,0) lands at (1,1). */
    aug_pipeline *p = build_ok("t:\n  - {name: CenterCrop, size: 6}\n");
    aug_sample s = {0};
    img_u8 im = img_alloc(3, 3, 3);
    img_fill(&im, 200);
    int64_t zero = 0, one = 1;
    aug_sample_init(&s, &im, 1, &zero, 1, &one, &zero);
    run_ok(p, &s, 0, 0);
    const img_u8 *o = &s.items[0].im;
    for (int y = 0; y < 6; y++)
        for (int x = 0; x < 6; x++) {
            bool inside = x >= 1 && x <= 3 && y >= 1 && y <= 3;
            cr_assert_eq(o->px[(size_t)y * o->stride + (size_t)x * 3], inside ? 200 : 0, "(%d,%d)", x, y);
        }
    aug_sample_clear(&s);
    aug_pipeline_free(p);
}

Test(augment, random_resized_crop_draws_boxes_inside_the_distribution)
{
    /* scale [0.5, 0.5] and ratio [1, 1] on a 40x40 coordinate image: the box is 28x28
     * (round(sqrt(800)) = 28); with size 28 and no scaling, the crop is an exact copy whose
     * top-left pixel tells the offset, which must be uniform over 0..12. */
    int hits[13] = {0};
    for (int idx = 0; idx < 400; idx++) {
        applied a =
            apply_to_coords("t:\n  - {name: RandomResizedCrop, size: 28, scale: [0.5, 0.5], ratio: [1, 1]}\n",
                            40, 40, 0, idx, 11);
        const img_u8 *o = &a.s.items[0].im;
        int x0 = o->px[0], y0 = o->px[1];
        cr_assert(x0 <= 12 && y0 <= 12, "offset (%d,%d)", x0, y0);
        /* a plain copy: every pixel is its source coordinate shifted by the offset */
        cr_assert_eq(o->px[(size_t)27 * o->stride + 27 * 3], x0 + 27);
        hits[x0]++;
        applied_free(&a);
    }
    for (int i = 0; i <= 12; i++)
        cr_assert(hits[i] > 5, "x offset %d drawn %d times in 400", i, hits[i]);
}

Test(augment, random_resized_crop_falls_back_to_the_central_crop)
{
    /* A 100x10 image with ratio [1, 1] and scale [0.9, 1]: no square of 90%+ of the area fits,
     * so torchvision takes the centre clamped to ratio 1: 10x10 at x = 45. */
    applied a = apply_to_coords(
        "t:\n  - {name: RandomResizedCrop, size: 10, scale: [0.9, 1], ratio: [1, 1]}\n", 100, 10, 0, 3, 0);
    cr_assert_eq(a.s.items[0].im.px[0], 45);
    cr_assert_eq(a.s.items[0].im.px[1], 0);
    applied_free(&a);
}

/* ---- determinism -------------------------------------------------------------------------- */

static img_u8 simclr_view(uint64_t seed, uint32_t epoch, int64_t idx, int copy)
{
    aug_pipeline *p = build_ok("t:\n  - {name: ImgReplicatePil, num_times: 2}\n"
                               "  - {name: RandomResizedCrop, size: 16}\n"
                               "  - {name: RandomHorizontalFlip}\n"
                               "  - {name: ImgPilColorDistortion, strength: 1.0}\n"
                               "  - {name: ImgPilGaussianBlur, p: 0.5, radius_min: 0.1, radius_max: 2.0}\n");
    aug_sample s = {0};
    one_sample(&s, 50, 40, 0, idx);
    run_ok(p, &s, seed, epoch);
    img_u8 out = img_alloc(s.items[copy].im.w, s.items[copy].im.h, 3);
    img_copy(&s.items[copy].im, &out);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
    return out;
}

Test(augment, output_is_a_function_of_seed_epoch_and_index_only)
{
    img_u8 a = simclr_view(3, 1, 17, 0), b = simclr_view(3, 1, 17, 0);
    cr_assert(same_pixels(&a, &b), "same key, different crops");
    img_u8 c = simclr_view(3, 2, 17, 0), d = simclr_view(4, 1, 17, 0), e = simclr_view(3, 1, 18, 0),
           f = simclr_view(3, 1, 17, 1);
    cr_assert(!same_pixels(&a, &c), "the epoch does not change the crop");
    cr_assert(!same_pixels(&a, &d), "the seed does not change the crop");
    cr_assert(!same_pixels(&a, &e), "the sample index does not change the crop");
    cr_assert(!same_pixels(&a, &f), "both SimCLR views are the same");
    img_free(&a), img_free(&b), img_free(&c), img_free(&d), img_free(&e), img_free(&f);
}

/* ---- tensors ------------------------------------------------------------------------------- */

Test(augment, to_tensor_and_normalize_fold_into_the_pending_normalisation)
{
    aug_pipeline *p = build_ok("t:\n  - {name: CenterCrop, size: 4}\n  - {name: ToTensor}\n"
                               "  - {name: Normalize, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n");
    aug_normalize n = aug_pipeline_normalize(p);
    cr_assert(n.pending);
    cr_assert_eq(n.div, 255.0f);
    cr_assert_eq(n.mean[1], 0.456f);
    cr_assert_eq(n.std[2], 0.225f);
    aug_pipeline_free(p);
    p = build_ok("t:\n  - {name: ImgPilToRawTensor}\n");
    n = aug_pipeline_normalize(p);
    cr_assert(n.pending && n.div == 1.0f && n.mean[0] == 0.0f && n.std[0] == 1.0f);
    aug_pipeline_free(p);
    p = build_ok("t:\n  - {name: CenterCrop, size: 4}\n");
    cr_assert(!aug_pipeline_normalize(p).pending);
    aug_pipeline_free(p);
}

Test(augment, jigsaw_patches_are_cut_from_the_grid_and_shuffled_by_a_permutation)
{
    /* A 255x255 coordinate image (mod 256) -> 9 patches of 64 from 85-pixel cells, column-major;
     * then a permutation file with one permutation (reverse order): the label must be 0 and
     * tower k must be patch 8 - k, whose top-left lies in cell (i, j) = ((8-k)/3, (8-k)%3). */
    char path[] = "/tmp/selfsup-perm-XXXXXX.npy";
    int fd = mkstemps(path, 4);
    cr_assert(fd >= 0);
    close(fd);
    int64_t perm[9] = {8, 7, 6, 5, 4, 3, 2, 1, 0};
    size_t shape[2] = {1, 9};
    char *why = NULL;
    cr_assert_eq(npy_write(path, NPY_I8, 2, shape, perm, &why), 0, "%s", why);
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "t:\n  - {name: ToTensor}\n  - {name: ImgPatchesFromTensor, num_patches: 9, patch_jitter: 21}\n"
             "  - {name: ShuffleImgPatches, perm_file: \"%s\"}\n", path);
    applied a = apply_to_coords(yaml, 255, 255, 5, 1, 0);
    unlink(path);
    const img_u8 *o = &a.s.items[0].im;
    cr_assert_eq(a.s.n, 1);
    cr_assert_eq(a.s.items[0].towers, 9);
    cr_assert_eq(o->w, 64);
    cr_assert_eq(o->h, 9 * 64);
    cr_assert_eq(a.s.label[0], 0, "label %lld", (long long)a.s.label[0]);
    for (int k = 0; k < 9; k++) {
        int src = 8 - k, i = src / 3, j = src % 3;
        const uint8_t *px = o->px + (size_t)(k * 64) * o->stride;
        int x0 = px[0], y0 = px[1];
        cr_assert(x0 >= i * 85 && x0 < i * 85 + 21, "tower %d: x %d not in cell column %d", k, x0, i);
        cr_assert(y0 >= j * 85 && y0 < j * 85 + 21, "tower %d: y %d not in cell row %d", k, y0, j);
    }
    applied_free(&a);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static void refused(const char *yaml, const char *needle)
{
    cfg_err err;
    aug_pipeline *p = build(yaml, &err);
    cr_assert_null(p, "accepted: %s", yaml);
    cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
    cr_assert(strstr(err.msg, "t.yaml:"), "message '%s' lacks the file and line", err.msg);
}

Test(augment, bad_lists_are_refused_with_their_position)
{
    refused("t:\n  - {name: RandomResizedCrap, size: 3}\n", "RandomResizedCrop");
    refused("t:\n  - {name: RandomResizedCrop, sise: 3}\n", "did you mean 'size'");
    refused("t:\n  - {name: RandomHorizontalFlip, p: 1.5}\n", "probability");
    refused("t:\n  - {name: ImgPilToMultiCrop, total_num_crops: 3, num_crops: [1, 1], size_crops: [8, 4],"
            " crop_scales: [[0.1, 1], [0.05, 0.1]]}\n",
            "total_num_crops");
    refused("t:\n  - {name: Normalize, mean: [0, 0, 0], std: [1, 1, 1]}\n", "ToTensor");
    refused("t:\n  - {name: ToTensor}\n  - {name: ColorJitter, brightness: 0.4}\n", "after ToTensor");
    refused("t:\n  - {name: ImgRotatePil, num_angles: 0}\n", "num_angles");
    refused("t:\n  - {name: ShuffleImgPatches, perm_file: \"https://example.invalid/p.npy\"}\n", "never downloads");
    refused("t:\n  - {name: ColorJitter, hue: 0.7}\n", "hue");
    refused("t:\n  - {name: RandomCrop, size: 8, padding: 2, padding_mode: wrap}\n", "padding_mode");
    refused("t:\n  - {name: RandomCrop, size: 8, padding: [1, 2, 3]}\n", "padding");
    refused("t:\n  - {name: ImgReplicatePil, num_times: 16}\n  - {name: ImgReplicatePil, num_times: 16}\n", "at most");
    refused("t:\n  - {name: ImgPatchesFromTensor, num_patches: 8}\n", "perfect square");
    refused("t:\n  - {name: RandomResizedCrop, size: 8, scale: [-0.5, 1]}\n", "increasing");
    refused("t:\n  - {name: ImgPilGaussianBlur, radius_max: .nan}\n", "finite");
    refused("t:\n  - {name: ImgPilGaussianBlur, radius_max: 8.0e23}\n", "radius_max <= 1000");
}

/* ---- ring sizing ------------------------------------------------------------------------- */

Test(augment, sample_bytes_follow_the_crops_the_transforms_fix)
{
    /* SwAV 2x224 + 6x96: 2*224*224*3 + 6*96*96*3 = 466,944 bytes of pixels. */
    aug_pipeline *p = build_ok("t:\n  - {name: ImgPilToMultiCrop, total_num_crops: 8, num_crops: [2, 6],"
                               " size_crops: [224, 96], crop_scales: [[0.14, 1], [0.05, 0.14]]}\n"
                               "  - {name: RandomHorizontalFlip}\n  - {name: ToTensor}\n");
    size_t bytes = 0;
    cr_assert(aug_pipeline_sample_bytes(p, 1, 1, &bytes));
    cr_assert(bytes >= 466944 && bytes <= 466944 + 8192, "%zu", bytes);
    cr_assert(aug_pipeline_sample_bytes(p, 1, 4, &bytes));
    cr_assert(bytes >= 4 * 466944 && bytes <= 4 * 466944 + 8192, "%zu", bytes);
    aug_pipeline_free(p);
    /* Jigsaw: Resize 256 then RandomCrop 255 fixes the size; 9 patches of 64. */
    p = build_ok("t:\n  - {name: Resize, size: 256}\n  - {name: RandomCrop, size: 255}\n"
                 "  - {name: ImgPatchesFromTensor, num_patches: 9, patch_jitter: 21}\n");
    cr_assert(aug_pipeline_sample_bytes(p, 1, 1, &bytes));
    cr_assert(bytes >= 9 * 64 * 64 * 3 && bytes <= 9 * 64 * 64 * 3 + 8192, "%zu", bytes);
    aug_pipeline_free(p);
    /* Resize to a shorter side alone: the size depends on the image. */
    p = build_ok("t:\n  - {name: Resize, size: 256}\n");
    cr_assert(!aug_pipeline_sample_bytes(p, 1, 1, &bytes));
    aug_pipeline_free(p);
}

Test(augment, borrowed_pixels_are_never_written_and_give_the_same_crops)
{
    /* Replicate + flip + colour on a borrowed image: the copies borrow it until a transform
     * changes pixels, then own a copy. The source must come out untouched and the crops equal
     * those of an owned run. */
    aug_pipeline *p = build_ok("t:\n  - {name: ImgReplicatePil, num_times: 2}\n"
                               "  - {name: RandomHorizontalFlip, p: 1.0}\n"
                               "  - {name: ColorJitter, brightness: 0.5, hue: 0.2}\n"
                               "  - {name: ImgPilGaussianBlur, p: 1.0}\n");
    img_u8 src = coords_image(37, 29), pristine = coords_image(37, 29);
    int64_t label = 0, valid = 1, idx = 5;
    aug_sample a = {0}, b = {0};
    aug_sample_borrow(&a, &src, 1, &label, 1, &valid, &idx);
    run_ok(p, &a, 9, 0);
    cr_assert(same_pixels(&src, &pristine), "a transform wrote into borrowed pixels");
    aug_sample_init(&b, &pristine, 1, &label, 1, &valid, &idx);
    run_ok(p, &b, 9, 0);
    cr_assert_eq(a.n, 2);
    for (int k = 0; k < 2; k++) {
        cr_assert(!a.items[k].borrowed, "copy %d still borrows after being changed", k);
        cr_assert(same_pixels(&a.items[k].im, &b.items[k].im), "copy %d differs from the owned run", k);
    }
    aug_sample_clear(&a);
    aug_sample_clear(&b);
    img_free(&src);
    aug_pipeline_free(p);
}

/* ---- crop windows (selfsup-decode --crop) --------------------------------------------------- */

/* A w x h image of pseudo-random bytes: any pixel read from the wrong place shows. */
static img_u8 noise_image(int w, int h, uint32_t seed)
{
    img_u8 im = img_alloc(w, h, 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w * 3; x++) {
            seed = seed * 1664525u + 1013904223u;
            im.px[(size_t)y * im.stride + (size_t)x] = (uint8_t)(seed >> 24);
        }
    return im;
}

/* For many samples: aug_pipeline_roi's box of the image, then the transforms on that window
 * alone must give the bytes they give on the whole image. Returns how many samples had a box
 * smaller than the image (so the test is not vacuous). */
static int windows_match_whole(const char *yaml, int w, int h)
{
    aug_pipeline *p = build_ok(yaml);
    img_u8 full = noise_image(w, h, 7);
    int smaller = 0;
    for (uint64_t idx = 0; idx < 40; idx++) {
        int box[4];
        aug_pipeline_roi(p, 11, 2, idx, w, h, box);
        cr_assert(box[0] >= 0 && box[1] >= 0 && box[2] <= w && box[3] <= h && box[0] < box[2] && box[1] < box[3],
                  "sample %llu: box %d,%d,%d,%d outside %dx%d", (unsigned long long)idx, box[0], box[1], box[2], box[3], w,
                  h);
        smaller += (box[2] - box[0]) * (box[3] - box[1]) < w * h;
        img_u8 win = img_view(&full, box[0], box[1], box[2] - box[0], box[3] - box[1]);
        int64_t label = 3, valid = 1, index = (int64_t)idx;
        aug_sample a = {0}, b = {0};
        aug_sample_borrow(&a, &full, 1, &label, 1, &valid, &index);
        aug_sample_borrow(&b, &win, 1, &label, 1, &valid, &index);
        aug_sample_set_window(&b, 0, box[0], box[1], w, h);
        char err[512];
        cr_assert_eq(aug_apply(p, &a, 11, 2, idx, err, sizeof err), 0, "%s", err);
        cr_assert_eq(aug_apply(p, &b, 11, 2, idx, err, sizeof err), 0, "sample %llu: %s", (unsigned long long)idx, err);
        cr_assert_eq(a.n, b.n);
        cr_assert_eq(a.n_label, b.n_label);
        for (int k = 0; k < a.n; k++) {
            cr_assert(same_pixels(&a.items[k].im, &b.items[k].im), "sample %llu item %d differs from the whole image's",
                      (unsigned long long)idx, k);
            cr_assert_eq(b.items[k].full_w, 0, "item %d is still a window", k);
        }
        cr_assert_arr_eq(a.label, b.label, sizeof *a.label * (size_t)a.n_label);
        aug_sample_clear(&a);
        aug_sample_clear(&b);
    }
    img_free(&full);
    aug_pipeline_free(p);
    return smaller;
}

Test(augment, crop_windows_give_the_bytes_of_the_whole_image)
{
    /* SimCLR */
    cr_assert_gt(windows_match_whole("t:\n  - {name: ImgReplicatePil, num_times: 2}\n"
                                     "  - {name: RandomResizedCrop, size: 24}\n"
                                     "  - {name: RandomHorizontalFlip, p: 0.5}\n"
                                     "  - {name: ImgPilColorDistortion, strength: 1.0}\n"
                                     "  - {name: ImgPilGaussianBlur, p: 0.5, radius_min: 0.1, radius_max: 2.0}\n"
                                     "  - {name: ToTensor}\n",
                                     61, 47),
                 20);
    /* SwAV */
    cr_assert_gt(windows_match_whole("t:\n  - name: ImgPilToMultiCrop\n    total_num_crops: 5\n    num_crops: [2, 3]\n"
                                     "    size_crops: [20, 8]\n    crop_scales: [[0.14, 1], [0.05, 0.14]]\n"
                                     "  - {name: RandomHorizontalFlip, p: 0.5}\n"
                                     "  - {name: ImgPilColorDistortion, strength: 1.0}\n",
                                     58, 73),
                 10);
    /* PIRL: an image crop and a crop for the patches */
    cr_assert_gt(windows_match_whole("t:\n  - {name: ImgPilToPatchesAndImage, crop_scale_image: [0.08, 1.0],"
                                     " crop_size_image: 16, crop_scale_patches: [0.6, 1.0], crop_size_patches: 75,"
                                     " permute_patches: true, num_patches: 9}\n",
                                     64, 48),
                 10);
    /* a crop straight away, and a second one on a copy (boxes from a cropped item are not
     * the window's business) */
    cr_assert_gt(windows_match_whole("t:\n  - {name: RandomResizedCrop, size: 16, scale: [0.2, 0.5]}\n"
                                     "  - {name: ImgReplicatePil, num_times: 2}\n"
                                     "  - {name: RandomResizedCrop, size: 8, indices: [1]}\n",
                                     50, 50),
                 30);
}

static bool roi_is_whole(const char *yaml, int w, int h)
{
    aug_pipeline *p = build_ok(yaml);
    bool whole = true;
    for (uint64_t idx = 0; idx < 10; idx++) {
        int box[4];
        aug_pipeline_roi(p, 1, 0, idx, w, h, box);
        whole = whole && box[0] == 0 && box[1] == 0 && box[2] == w && box[3] == h;
    }
    aug_pipeline_free(p);
    return whole;
}

Test(augment, roi_is_the_whole_image_when_a_transform_needs_it)
{
    cr_assert(roi_is_whole("t:\n  - {name: Resize, size: 32}\n  - {name: CenterCrop, size: 24}\n", 60, 50));
    cr_assert(roi_is_whole("t:\n  - {name: RandomHorizontalFlip, p: 0.5}\n  - {name: RandomResizedCrop, size: 8}\n",
                           60, 50));
    cr_assert(roi_is_whole("t:\n  - {name: ImgReplicatePil, num_times: 2}\n"
                           "  - {name: RandomResizedCrop, size: 8, indices: [0]}\n",
                           60, 50),
              "copy 1 is never cropped: it needs all of the image");
    cr_assert(roi_is_whole("t:\n  - {name: ToTensor}\n", 60, 50));
    cr_assert(!roi_is_whole("t:\n  - {name: RandomResizedCrop, size: 8, scale: [0.1, 0.2]}\n"
                            "  - {name: RandomHorizontalFlip, p: 0.5}\n",
                            60, 50));
}

Test(augment, a_window_the_crops_leave_is_an_error_not_wrong_pixels)
{
    aug_pipeline *p = build_ok("t:\n  - {name: RandomResizedCrop, size: 8, scale: [0.1, 0.2]}\n");
    img_u8 full = noise_image(80, 60, 3);
    int box[4];
    aug_pipeline_roi(p, 1, 0, 5, 80, 60, box); /* the box of another seed than the run's */
    img_u8 win = img_view(&full, box[0], box[1], box[2] - box[0], box[3] - box[1]);
    int64_t label = 0, valid = 1, idx = 5;
    aug_sample s = {0};
    aug_sample_borrow(&s, &win, 1, &label, 1, &valid, &idx);
    aug_sample_set_window(&s, 0, box[0], box[1], 80, 60);
    char err[512] = "";
    cr_assert_eq(aug_apply(p, &s, 2, 0, 5, err, sizeof err), -1, "a crop outside the window went through");
    cr_assert(strstr(err, "leaves the decoded window"), "%s", err);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
    p = build_ok("t:\n  - {name: Resize, size: 8}\n");
    aug_sample_borrow(&s, &win, 1, &label, 1, &valid, &idx);
    aug_sample_set_window(&s, 0, box[0], box[1], 80, 60);
    cr_assert_eq(aug_apply(p, &s, 1, 0, 5, err, sizeof err), -1);
    cr_assert(strstr(err, "needs the whole image"), "%s", err);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
    img_free(&full);
}

/* ---- ImgPil2LabTensor ------------------------------------------------------------------------ */

/* The tensor VISSL hands over after cvtColor: L * (100/255) - 50, a - 128, b - 128 in numpy's
 * float32 arithmetic, CHW (fixtures/lab/float_*.npy, from VISSL's code run by numpy), written
 * as float32 whether or not the stage runs with --float. */
Test(augment, lab_tensor_is_vissls_float_arithmetic)
{
    npy_array in, want;
    char *err = NULL, *pin = test_fixture("lab", "float_input.npy"), *pwant = test_fixture("lab", "float_expected.npy");
    cr_assert_eq(npy_read(pin, &in, &err), 0, "%s", err);
    cr_assert_eq(npy_read(pwant, &want, &err), 0, "%s", err);
    int w = (int)in.shape[1];
    img_u8 im = img_alloc(w, 1, 3);
    memcpy(im.px, in.data, in.nbytes);
    int64_t label = 0, valid = 1, idx = 0;
    aug_sample s = {0};
    aug_sample_init(&s, &im, 1, &label, 1, &valid, &idx);
    s.items[0].lab = true; /* as if ImgPil2LabTensor had made these bytes */
    for (int to_float = 0; to_float < 2; to_float++) {
        rec_view v;
        void *buf = written(&s, to_float, &v);
        int t = rec_find(&v, "data.0");
        cr_assert(t >= 0 && v.tensors[t].dtype == REC_F32 && v.tensors[t].ndim == 3 && v.tensors[t].shape[0] == 3 &&
                  v.tensors[t].shape[1] == 1 && v.tensors[t].shape[2] == (uint64_t)w);
        cr_assert_arr_eq(rec_data(&v, t), want.data, want.nbytes, "Lab floats differ from VISSL's");
        free(buf);
    }
    aug_sample_clear(&s);
    npy_close(&in), npy_close(&want);
    free(pin), free(pwant);
    /* worked by hand: white is (50, 0, 0) after OpenCV's (255, 128, 128) */
    aug_pipeline *p = build_ok("t:\n  - {name: ImgPil2LabTensor}\n");
    one_sample(&s, 2, 2, 0, 0);
    memset(s.items[0].im.px, 255, s.items[0].im.stride * 2); /* white */
    run_ok(p, &s, 0, 0);
    const uint8_t *px = s.items[0].im.px;
    cr_assert(s.items[0].lab && px[0] == 255 && px[1] == 128 && px[2] == 128, "white: %d %d %d", px[0], px[1], px[2]);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
}

Test(augment, lab_must_come_last_and_on_images)
{
    cfg_err err;
    cr_assert_null(build("t:\n  - {name: ImgPil2LabTensor}\n  - {name: RandomHorizontalFlip}\n", &err));
    cr_assert(strstr(err.msg, "after ImgPil2LabTensor"), "%s", err.msg);
    cr_assert_null(build("t:\n  - {name: ToTensor}\n  - {name: ImgPil2LabTensor}\n", &err));
    cr_assert(strstr(err.msg, "needs a PIL image"), "%s", err.msg);
    applied a = apply_to_coords("t:\n  - {name: ImgReplicatePil, num_times: 2}\n"
                                "  - {name: ImgPil2LabTensor, indices: [1]}\n",
                                5, 4, 0, 0, 0);
    cr_assert(!a.s.items[0].lab && a.s.items[1].lab, "indices: only item 1 becomes Lab");
    applied_free(&a);
}

/* ---- labels that are rows (a 2-D label .npy) ---------------------------------------------- */

Test(augment, label_rows_are_replicated_whole_and_written_as_a_matrix)
{
    aug_pipeline *p = build_ok("t:\n  - {name: ImgReplicatePil, num_times: 3}\n  - {name: RandomHorizontalFlip}\n");
    aug_sample s = {0};
    one_sample(&s, 6, 5, 0, 4);
    const int64_t row[4] = {2, 7, -1, 5};
    aug_sample_set_labels(&s, row, 1, 4);
    run_ok(p, &s, 1, 0);
    cr_assert_eq(s.n, 3);
    cr_assert_eq(s.n_label, 3);
    for (int k = 0; k < 3; k++)
        cr_assert_arr_eq(s.label + 4 * k, row, sizeof row, "copy %d's label row", k);
    rec_view v;
    void *buf = written(&s, false, &v);
    int t = rec_find(&v, "label");
    cr_assert(t >= 0 && v.tensors[t].ndim == 2 && v.tensors[t].shape[0] == 3 && v.tensors[t].shape[1] == 4);
    free(buf);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
    /* ImgRotatePil sets the last label to a number: not a row */
    p = build_ok("t:\n  - {name: ImgRotatePil}\n");
    one_sample(&s, 6, 6, 0, 4);
    aug_sample_set_labels(&s, row, 1, 4);
    char msg[256];
    cr_assert_eq(aug_apply(p, &s, 1, 0, 4, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "rows of 4"), "%s", msg);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
}

/* The jigsaw quickstart's permutations (selfsup dataset jigsaw-perms 100 9): 100 distinct orders of the 9
 * patches, 0-based, each a permutation, as ShuffleImgPatches reads them. */
Test(augment, the_jigsaw_quickstart_permutations_are_100_distinct_permutations)
{
    char *path = test_path("configs/quickstart/jigsaw_perms_100.npy"), *why = NULL;
    npy_array a = {0};
    cr_assert_eq(npy_read(path, &a, &why), 0, "%s: %s", path, why);
    cr_assert(a.ndim == 2 && a.shape[0] == 100 && a.shape[1] == 9 && a.dtype == NPY_I8);
    const int64_t *p = a.data;
    for (int i = 0; i < 100; i++) {
        int seen = 0;
        for (int k = 0; k < 9; k++) {
            cr_assert(p[i * 9 + k] >= 0 && p[i * 9 + k] < 9, "row %d", i);
            seen |= 1 << p[i * 9 + k];
        }
        cr_expect_eq(seen, 511, "row %d is not a permutation of 0..8", i);
        for (int j = 0; j < i; j++)
            cr_expect(memcmp(p + i * 9, p + j * 9, 9 * sizeof *p), "rows %d and %d are the same", j, i);
    }
    npy_close(&a);
    free(path);
}
