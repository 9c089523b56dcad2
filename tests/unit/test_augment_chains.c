/*
 * test_augment_chains.c — whole VISSL transform lists (SimCLR, SwAV, RotNet, Jigsaw, PIRL,
 * eval) on a real photo, against torchvision 0.14 + PIL 9.4.
 *
 * CIFAR-style RandomCrop with padding (constant with a colour, reflect, symmetric, edge,
 * pad_if_needed) is a chain too.
 *
 * tests/golden/make_augment_fixtures.py ran each list through selfsup once, recorded every
 * random decision (trace.txt), and made the same crops, flips, jitters, blurs, rotations and
 * patches with torchvision's functional API and PIL (expected.K.npy). Here the list runs
 * again and must (1) take exactly the recorded decisions — the random stream is a fixed
 * function of (seed, epoch, index, transform) — and (2) produce torchvision's bytes exactly:
 * every kernel on the way is PIL-exact, so no tolerance is needed.
 */
#include "augment/transforms.h"
#include "config.h"
#include "npy.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEED 7
#define EPOCH 2

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "missing fixture %s", path);
    strbuf sb = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        sb_putn(&sb, buf, n);
    fclose(f);
    return sb.s ? sb.s : xstrdup("");
}

/* The list with PERM_FILE pointing at the fixtures' permutation file. */
static char *transforms_yaml(const char *dir)
{
    char *p = xasprintf("%s/transforms.yaml", dir);
    char *text = read_text(p);
    free(p);
    char *at = strstr(text, "PERM_FILE");
    if (!at)
        return text;
    char *perms = test_fixture("augment", "perms.npy");
    char *out = xasprintf("%.*s%s%s", (int)(at - text), text, perms, at + strlen("PERM_FILE"));
    free(perms);
    free(text);
    return out;
}

static void check_chain(const char *chain, int idx)
{
    char name[64];
    snprintf(name, sizeof name, "%s.%d", chain, idx);
    char *dir = test_fixture("augment", name);
    char *yaml = transforms_yaml(dir);
    cfg_err err;
    cfg_node *root = cfg_parse_yaml(yaml, strlen(yaml), "transforms.yaml", &err);
    cr_assert(root, "%s", err.msg);
    aug_pipeline *p = aug_pipeline_build(cfg_map_get(root, "t"), "t", &err);
    cr_assert(p, "%s: %s", name, err.msg);

    char *input = test_fixture("augment", "input.npy"), *why = NULL;
    npy_array a = {0};
    cr_assert_eq(npy_read(input, &a, &why), 0, "%s", why);
    img_u8 im = img_alloc((int)a.shape[1], (int)a.shape[0], 3);
    memcpy(im.px, a.data, a.nbytes);
    npy_close(&a);
    int64_t label = 0, valid = 1, sample = idx;
    aug_sample s = {0};
    aug_sample_init(&s, &im, 1, &label, 1, &valid, &sample);
    strbuf trace = {0};
    char msg[256];
    cr_assert_eq(aug_apply_traced(p, &s, SEED, EPOCH, (uint64_t)idx, &trace, msg, sizeof msg), 0, "%s", msg);

    char *tpath = xasprintf("%s/trace.txt", dir);
    char *want = read_text(tpath);
    cr_assert_str_eq(sb_str(&trace), want, "%s: the random decisions changed", name);
    for (int k = 0; k < s.n; k++) {
        char *epath = xasprintf("%s/expected.%d.npy", dir, k);
        npy_array e = {0};
        cr_assert_eq(npy_read(epath, &e, &why), 0, "%s: %s", name, why);
        const aug_item *it = &s.items[k];
        size_t bytes = (size_t)it->im.w * (size_t)it->im.h * 3;
        cr_assert_eq(e.nbytes, bytes, "%s item %d: %zu bytes, torchvision has %zu", name, k, bytes, e.nbytes);
        size_t off = 0, worst = 0;
        for (size_t i = 0; i < bytes; i++) {
            int d = abs((int)it->im.px[i] - (int)((const uint8_t *)e.data)[i]);
            if ((size_t)d > worst)
                worst = (size_t)d, off = i;
        }
        cr_assert_eq(worst, 0, "%s item %d: byte %zu differs from torchvision by %zu", name, k, off, worst);
        npy_close(&e);
        free(epath);
    }
    char *last = xasprintf("%s/expected.%d.npy", dir, s.n);
    cr_assert(access(last, F_OK) != 0, "%s: torchvision made more than %d items", name, s.n);
    free(last);
    free(want), free(tpath), sb_free(&trace);
    aug_sample_clear(&s);
    aug_pipeline_free(p);
    cfg_free(root);
    free(input), free(yaml), free(dir);
}

Test(augment_chains, simclr)
{
    check_chain("simclr", 3);
    check_chain("simclr", 8);
    check_chain("simclr", 21);
}

Test(augment_chains, swav_multicrop)
{
    check_chain("swav", 5);
    check_chain("swav", 13);
}

Test(augment_chains, rotnet)
{
    check_chain("rotnet", 1);
    check_chain("rotnet", 2);
    check_chain("rotnet", 6);
}

Test(augment_chains, jigsaw)
{
    check_chain("jigsaw", 4);
    check_chain("jigsaw", 9);
}

Test(augment_chains, pirl)
{
    check_chain("pirl", 7);
    check_chain("pirl", 11);
}

Test(augment_chains, eval_resize_center_crop)
{
    check_chain("eval", 0);
}

Test(augment_chains, random_crop_padding_modes)
{
    check_chain("cifar", 2);
    check_chain("cifar", 5);
    check_chain("padmodes", 1);
    check_chain("padmodes", 4);
}

/* ImgPil2LabTensor after a crop and a flip: OpenCV's Lab bytes (the float step is
 * test_augment.c's lab_tensor_is_vissls_float_arithmetic). */
Test(augment_chains, colorization)
{
    check_chain("colorization", 3);
    check_chain("colorization", 10);
}

/* ImgRotatePil(num_angles=7): angles of 51.43 degrees and its multiples, PIL's affine
 * nearest-neighbour rotation with black corners. */
Test(augment_chains, rotnet_seven_angles)
{
    check_chain("rotnet7", 1);
    check_chain("rotnet7", 2);
    check_chain("rotnet7", 3);
    check_chain("rotnet7", 5);
    check_chain("rotnet7", 8);
}
