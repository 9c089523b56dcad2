/*
 * fuzz_transforms.c — libFuzzer target for selfsup-augment's transform lists: a YAML list
 * (the value of `t`) is parsed, checked (stages/augment/transforms.c) and, when it passes and
 * its sizes stay small, run on a small image with selfsup's random draws, then collated.
 *
 * A config is untrusted input; no list may crash, hang, leak or read out of bounds, whatever
 * its numbers (negative sizes, empty scales, indices past the list, towers of patches fed to
 * crops, a permutation file that does not exist). Errors are fine.
 */
#include "augment/transforms_internal.h"
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sizes a fuzzed list may ask for before it runs: big enough for every code path, small
 * enough to stay fast. */
static bool small_enough(const aug_pipeline *p)
{
    for (int i = 0; i < p->n_ops; i++) {
        const aug_op *op = &p->ops[i];
        if (op->size[0] > 96 || op->size[1] > 96 || op->size2 > 128 || op->num_times > 16 || op->num_patches > 25 ||
            op->pad[0] > 64 || op->pad[1] > 64 || op->pad[2] > 64 || op->pad[3] > 64 || (op->sub && !small_enough(op->sub)))
            return false;
        for (int t = 0; t < op->n_types; t++)
            if (op->multicrop[t].size > 96 || op->multicrop[t].count > 8)
                return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cfg_err err;
    cfg_node *root = cfg_parse_yaml((const char *)data, size, "fuzz.yaml", &err);
    if (!root)
        return 0;
    aug_pipeline *p = root->kind == CFG_MAP ? aug_pipeline_build(cfg_map_get(root, "t"), "t", &err) : NULL;
    if (p && small_enough(p)) {
        img_u8 im = img_alloc(48 + (int)(size % 17), 40 + (int)(size % 13), 3);
        for (int y = 0; y < im.h; y++)
            for (int x = 0; x < im.w * 3; x++)
                im.px[(size_t)y * im.stride + (size_t)x] = (uint8_t)(x * 7 + y * 3);
        int64_t label = 1, valid = 1, idx = (int64_t)(size % 1000);
        aug_sample s = {0};
        aug_sample_borrow(&s, &im, 1, &label, 1, &valid, &idx);
        char why[256];
        size_t bytes;
        aug_pipeline_sample_bytes(p, 1, 1, &bytes);
        aug_apply(p, &s, 1, 0, (uint64_t)idx, why, sizeof why);
        aug_sample_clear(&s);
        img_free(&im);
    }
    aug_pipeline_free(p);
    cfg_free(root);
    return 0;
}
