/*
 * write.c — an augmented sample as a record (sample.h), the one writer behind selfsup-augment
 * and bench/data_bench.c, so the benchmark times exactly what the stage does.
 */
#include "augment/transforms.h"

#include <stdio.h>

/* VISSL's ImgPil2LabTensor after OpenCV: float32 CHW of L * (100/255) - 50, a - 128,
 * b - 128, in numpy's float32 arithmetic (the Python constant 100/255 becomes a float32). */
static int write_lab(const img_u8 *im, const char *name, rec_writer *w)
{
    uint64_t shape[3] = {3, (uint64_t)im->h, (uint64_t)im->w};
    float *out = rec_add(w, name, REC_F32, 3, shape);
    if (!out)
        return -1;
    const float l_scale = (float)(100.0 / 255.0);
    const size_t plane = (size_t)im->w * (size_t)im->h;
    for (int y = 0; y < im->h; y++) {
        const uint8_t *p = im->px + (size_t)y * im->stride;
        float *o = out + (size_t)y * (size_t)im->w;
        for (int x = 0; x < im->w; x++, p += 3) {
            float l = (float)p[0] * l_scale;
            o[x] = l - 50.0f;
            o[plane + x] = (float)p[1] - 128.0f;
            o[2 * plane + x] = (float)p[2] - 128.0f;
        }
    }
    return 0;
}

/* data.K: uint8 [H, W, 3] (or [T, H, W, 3] for patches), or float32 [3, H, W] / [T, 3, H, W]. */
static int write_item(const aug_item *it, int k, const aug_normalize *norm, bool to_float, rec_writer *w)
{
    char name[16];
    snprintf(name, sizeof name, "data.%d", k);
    const img_u8 *im = &it->im;
    if (it->lab)
        return write_lab(im, name, w);
    int ph = im->h / it->towers;
    bool stack = it->towers > 1;
    if (!to_float) {
        uint64_t shape[4] = {(uint64_t)it->towers, (uint64_t)ph, (uint64_t)im->w, 3};
        uint8_t *out = rec_add(w, name, REC_U8, stack ? 4 : 3, stack ? shape : shape + 1);
        if (!out)
            return -1;
        img_u8 dst = {.px = out, .w = im->w, .h = im->h, .c = 3, .stride = (size_t)im->w * 3};
        img_copy(im, &dst);
        return 0;
    }
    uint64_t shape[4] = {(uint64_t)it->towers, 3, (uint64_t)ph, (uint64_t)im->w};
    float *out = rec_add(w, name, REC_F32, stack ? 4 : 3, stack ? shape : shape + 1);
    if (!out)
        return -1;
    for (int t = 0; t < it->towers; t++) {
        img_u8 tower = img_view(im, 0, t * ph, im->w, ph);
        img_normalize_chw(&tower, norm->div, norm->mean, norm->std, out + (size_t)t * 3 * (size_t)ph * (size_t)im->w);
    }
    return 0;
}

int aug_sample_write(const aug_sample *s, const aug_normalize *norm, bool to_float, rec_writer *w)
{
    for (int k = 0; k < s->n; k++)
        if (write_item(&s->items[k], k, norm, to_float, w) != 0)
            return -1;
    uint64_t nl[2] = {(uint64_t)s->n_label, (uint64_t)(s->label_width > 1 ? s->label_width : 1)}, ni = (uint64_t)s->n;
    int rc = rec_add_copy(w, "label", REC_I64, nl[1] > 1 ? 2 : 1, nl, s->label);
    rc |= rec_add_copy(w, "data_valid", REC_I64, 1, &ni, s->valid);
    rc |= rec_add_copy(w, "data_idx", REC_I64, 1, &ni, s->idx);
    if (norm->pending && !to_float) {
        float rows[3][3];
        for (int c = 0; c < 3; c++)
            rows[0][c] = norm->div, rows[1][c] = norm->mean[c], rows[2][c] = norm->std[c];
        uint64_t shape[2] = {3, 3};
        rc |= rec_add_copy(w, "normalize", REC_F32, 2, shape, rows);
    }
    return rc ? -1 : 0;
}
