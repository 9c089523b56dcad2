/*
 * collate.c — VISSL's collators over records (see collate.h).
 *
 * Every collator is a few loops over two primitives: stack (N equal tensors → one tensor
 * with a new first axis, or concatenated along the first axis for Jigsaw's towers) and a
 * vector of per-sample integers (labels, validity, indices), in the order VISSL builds its
 * Python lists. The samples arrive here already in sampler order.
 */
#include "collate/collate.h"

#include "augment/img.h"
#include "rng.h"
#include "util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- reading the samples ------------------------------------------------------------------ */

static int find_item(const rec_view *v, const char *prefix, int k)
{
    char name[REC_NAME_MAX + 1];
    snprintf(name, sizeof name, "%s.%d", prefix, k);
    return rec_find(v, name);
}

/* The number of items data.0, data.1, ... in a sample. */
static int count_items(const rec_view *v)
{
    int k = 0;
    while (k < REC_MAX_TENSORS && find_item(v, "data", k) >= 0)
        k++;
    return k;
}

static const int64_t *int_vector(const rec_view *v, const char *name, int *n)
{
    int i = rec_find(v, name);
    if (i < 0 || v->tensors[i].dtype != REC_I64 || v->tensors[i].ndim != 1)
        return NULL;
    *n = (int)v->tensors[i].shape[0];
    return rec_data(v, i);
}

typedef struct {
    const rec_view *v;
    int t; /* tensor index in v */
} tensor_ref;

/* ---- writing ---------------------------------------------------------------------------- */

/* Stack m equal tensors under a new first axis ([m, ...]), or, with `concat`, join them along
 * their first axis ([m * d0, ...]); `squeeze` then drops every axis of size 1 (torch's
 * .squeeze()). */
/* memcpy into a batch record. A batch (SimCLR: 32 x 2 x 150 KB) is far bigger than the cache
 * and is read next by another process, so big copies stream past the cache (non-temporal
 * stores) instead of evicting everything to make room for it. */
static void copy_out(uint8_t *dst, const uint8_t *src, size_t n)
{
#if defined(__x86_64__)
    if (n >= 64 * 1024 && ((uintptr_t)dst & 15) == 0) {
        size_t k = 0;
        for (; k + 64 <= n; k += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(src + k)), b = _mm_loadu_si128((const __m128i *)(src + k + 16)),
                    c = _mm_loadu_si128((const __m128i *)(src + k + 32)),
                    d = _mm_loadu_si128((const __m128i *)(src + k + 48));
            _mm_stream_si128((__m128i *)(dst + k), a);
            _mm_stream_si128((__m128i *)(dst + k + 16), b);
            _mm_stream_si128((__m128i *)(dst + k + 32), c);
            _mm_stream_si128((__m128i *)(dst + k + 48), d);
        }
        memcpy(dst + k, src + k, n - k);
        _mm_sfence(); /* the streamed bytes are visible before the record is published */
        return;
    }
#endif
    memcpy(dst, src, n);
}

static int stack(rec_writer *w, const char *name, const tensor_ref *refs, int m, bool concat, bool squeeze,
                 char *why, size_t why_len)
{
    const rec_tensor *t0 = &refs[0].v->tensors[refs[0].t];
    for (int i = 1; i < m; i++) {
        const rec_tensor *ti = &refs[i].v->tensors[refs[i].t];
        if (ti->dtype != t0->dtype || ti->ndim != t0->ndim || memcmp(ti->shape, t0->shape, sizeof ti->shape)) {
            snprintf(why, why_len, "%s: the samples' tensors differ in type or shape (sample 0: %s, sample %d: %s)",
                     name, t0->name, i, ti->name);
            return -1;
        }
    }
    uint64_t shape[REC_MAX_DIMS + 1];
    int nd = 0;
    if (concat) {
        shape[nd++] = (uint64_t)m * t0->shape[0];
        for (int d = 1; d < t0->ndim; d++)
            shape[nd++] = t0->shape[d];
    } else {
        shape[nd++] = (uint64_t)m;
        for (int d = 0; d < t0->ndim; d++)
            shape[nd++] = t0->shape[d];
    }
    if (nd > REC_MAX_DIMS) {
        snprintf(why, why_len, "%s: too many dimensions to stack", name);
        return -1;
    }
    if (squeeze) {
        int out = 0;
        for (int d = 0; d < nd; d++)
            if (shape[d] != 1)
                shape[out++] = shape[d];
        nd = out;
    }
    uint8_t *dst = rec_add(w, name, (rec_dtype)t0->dtype, nd, shape);
    if (!dst)
        return 0; /* rec_finish reports the overflow with the bytes it needed */
    for (int i = 0; i < m; i++) {
        copy_out(dst, rec_data(refs[i].v, refs[i].t), t0->nbytes);
        dst += t0->nbytes;
    }
    return 0;
}

static void add_ints(rec_writer *w, const char *name, const int64_t *vals, int ndim, const uint64_t *shape,
                     bool as_bool)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (!as_bool) {
        rec_add_copy(w, name, REC_I64, ndim, shape, vals);
        return;
    }
    uint8_t *b = rec_add(w, name, REC_BOOL, ndim, shape);
    for (uint64_t i = 0; b && i < n; i++)
        b[i] = vals[i] != 0;
}

/* ---- the per-sample lists --------------------------------------------------------------- */

typedef struct {
    int n_items, n_label;
    int label_width;  /* values per label: 1 for a 1-D label [L], M for a 2-D label [L, M] */
    bool label_rows;  /* the label is 2-D [L, M]: label j of sample i is label[i][j*M .. j*M+M) */
    const int64_t *label[1024], *valid[1024], *idx[1024]; /* per sample */
} lists;

/* The sample's label: int64 [L] (one value per label) or [L, M] (a row of M per label). */
static const int64_t *label_matrix(const rec_view *v, int *n, int *width, bool *rows)
{
    int i = rec_find(v, "label");
    if (i < 0 || v->tensors[i].dtype != REC_I64 || v->tensors[i].ndim < 1 || v->tensors[i].ndim > 2)
        return NULL;
    const rec_tensor *t = &v->tensors[i];
    if (t->shape[0] > 1u << 20 || (t->ndim == 2 && t->shape[1] > 1u << 20))
        return NULL;
    *n = (int)t->shape[0];
    *rows = t->ndim == 2;
    *width = *rows ? (int)t->shape[1] : 1;
    return rec_data(v, i);
}

/* Collators that take one integer label per crop: refuse rows of labels. */
static int need_scalar_labels(const char *collator, const lists *l, char *why, size_t wl)
{
    if (!l->label_rows)
        return 0;
    snprintf(why, wl,
             "%s takes one integer label per crop, but the samples' labels are rows of %d values (int64 [%d, %d], "
             "from a 2-D label .npy): only default_collate, simclr_collator, multicrop_collator, "
             "multicrop_mixup_collator and targets_one_hot_default_collator take those",
             collator, l->label_width, l->n_label, l->label_width);
    return -1;
}

static int read_lists(const rec_view *s, int n, lists *l, char *why, size_t why_len)
{
    if (n > 1024) {
        snprintf(why, why_len, "a batch of %d samples is more than selfsup's collator takes (1024)", n);
        return -1;
    }
    l->n_items = count_items(&s[0]);
    for (int i = 0; i < n; i++) {
        int nl = 0, nv = 0, ni = 0, width = 1;
        bool rows = false;
        l->label[i] = label_matrix(&s[i], &nl, &width, &rows);
        l->valid[i] = int_vector(&s[i], "data_valid", &nv);
        l->idx[i] = int_vector(&s[i], "data_idx", &ni);
        if (!l->label[i] || !l->valid[i] || !l->idx[i]) {
            snprintf(why, why_len, "sample %d lacks int64 label, data_valid or data_idx", i);
            return -1;
        }
        if (i == 0)
            l->n_label = nl, l->label_width = width, l->label_rows = rows;
        if (width != l->label_width || rows != l->label_rows) {
            snprintf(why, why_len, "samples of one batch differ in the shape of their labels (sample %d)", i);
            return -1;
        }
        if (count_items(&s[i]) != l->n_items || nl != l->n_label || nv != l->n_items || ni != l->n_items) {
            snprintf(why, why_len, "samples of one batch differ in their number of items or labels (sample %d)", i);
            return -1;
        }
    }
    if (l->n_items == 0) {
        snprintf(why, why_len, "the samples have no data.0");
        return -1;
    }
    return 0;
}

static void gather_item(const rec_view *s, int n, const char *prefix, int k, tensor_ref *refs)
{
    for (int i = 0; i < n; i++)
        refs[i] = (tensor_ref){&s[i], find_item(&s[i], prefix, k)};
}

/* ---- the collators ----------------------------------------------------------------------- */

/* torch's default_collate on VISSL's sample dicts: one stacked tensor per list position. */
static int collate_default(const rec_view *s, int n, const lists *l, rec_writer *w, char *why, size_t wl)
{
    tensor_ref refs[1024];
    int64_t v[1024];
    uint64_t shape[1] = {(uint64_t)n};
    char name[REC_NAME_MAX + 1];
    for (int k = 0; k < l->n_items; k++) {
        gather_item(s, n, "data", k, refs);
        snprintf(name, sizeof name, "data.%d", k);
        if (stack(w, name, refs, n, false, false, why, wl) != 0)
            return -1;
    }
    for (int j = 0; j < l->n_label; j++) {
        snprintf(name, sizeof name, "label.%d", j);
        if (l->label_rows) { /* torch stacks the N rows of M values: [N, M] */
            size_t m = (size_t)l->label_width;
            uint64_t rows[2] = {(uint64_t)n, (uint64_t)m};
            int64_t *dst = rec_add(w, name, REC_I64, 2, rows);
            for (int i = 0; dst && i < n; i++)
                memcpy(dst + (size_t)i * m, l->label[i] + (size_t)j * m, m * sizeof *dst);
            continue;
        }
        for (int i = 0; i < n; i++)
            v[i] = l->label[i][j];
        add_ints(w, name, v, 1, shape, false);
    }
    for (int k = 0; k < l->n_items; k++) {
        for (int i = 0; i < n; i++)
            v[i] = l->valid[i][k];
        snprintf(name, sizeof name, "data_valid.%d", k);
        add_ints(w, name, v, 1, shape, false);
        for (int i = 0; i < n; i++)
            v[i] = l->idx[i][k];
        snprintf(name, sizeof name, "data_idx.%d", k);
        add_ints(w, name, v, 1, shape, false);
    }
    return 0;
}

/* Crop-major metadata: entry pos of every `step`-th sample, for pos = 0..K-1 (simclr and
 * multicrop take every sample, multicrop_mixup the first of each blended pair). */
static int crop_major_meta(int n, int step, const lists *l, rec_writer *w, char *why, size_t wl)
{
    if (l->n_label < l->n_items) {
        snprintf(why, wl, "the collator takes label[k] for each of the %d crops, but the samples have %d labels",
                 l->n_items, l->n_label);
        return -1;
    }
    static int64_t val[1024 * 64], idx[1024 * 64];
    if ((size_t)n * (size_t)l->n_items > sizeof val / sizeof val[0]) {
        snprintf(why, wl, "too many crops in one batch");
        return -1;
    }
    size_t width = (size_t)l->label_width;
    int64_t *lab = xmalloc(((size_t)n * (size_t)l->n_items * width + 1) * sizeof *lab);
    int m = 0;
    for (int pos = 0; pos < l->n_items; pos++)
        for (int i = 0; i < n; i += step, m++) {
            memcpy(lab + (size_t)m * width, l->label[i] + (size_t)pos * width, width * sizeof *lab);
            val[m] = l->valid[i][pos], idx[m] = l->idx[i][pos];
        }
    /* Rows of labels stack to [k*N, M] (torch.stack / LongTensor of the row arrays). */
    uint64_t shape[2] = {(uint64_t)m, (uint64_t)width};
    add_ints(w, "label.0", lab, l->label_rows ? 2 : 1, shape, false);
    add_ints(w, "data_valid.0", val, 1, shape, false);
    add_ints(w, "data_idx.0", idx, 1, shape, false);
    free(lab);
    return 0;
}

/* simclr_collator: every crop of the batch in one tensor, crop-major. */
static int collate_simclr(const rec_view *s, int n, const lists *l, rec_writer *w, char *why, size_t wl)
{
    static tensor_ref refs[1024 * 64];
    if ((size_t)n * (size_t)l->n_items > sizeof refs / sizeof refs[0]) {
        snprintf(why, wl, "too many crops in one batch");
        return -1;
    }
    for (int pos = 0; pos < l->n_items; pos++)
        gather_item(s, n, "data", pos, refs + (size_t)pos * (size_t)n);
    if (stack(w, "data.0", refs, n * l->n_items, false, false, why, wl) != 0)
        return -1;
    return crop_major_meta(n, 1, l, w, why, wl);
}

/* multicrop_collator: one tensor per crop position (resolutions may differ), crop-major meta. */
static int collate_multicrop(const rec_view *s, int n, const lists *l, rec_writer *w, char *why, size_t wl)
{
    tensor_ref refs[1024];
    char name[REC_NAME_MAX + 1];
    for (int pos = 0; pos < l->n_items; pos++) {
        gather_item(s, n, "data", pos, refs);
        snprintf(name, sizeof name, "data.0.%d", pos);
        if (stack(w, name, refs, n, false, false, why, wl) != 0)
            return -1;
    }
    return crop_major_meta(n, 1, l, w, why, wl);
}

/* moco_collator: crop 0 for the encoder, crop 1 for the momentum encoder; metadata stacked
 * per sample and squeezed, as torch.stack(...).squeeze() leaves it. */
static int collate_moco(const rec_view *s, int n, const lists *l, rec_writer *w, char *why, size_t wl)
{
    if (need_scalar_labels("moco_collator", l, why, wl) != 0)
        return -1;
    if (l->n_items < 2) {
        snprintf(why, wl, "moco_collator needs 2 crops per sample (ImgReplicatePil num_times: 2), not %d", l->n_items);
        return -1;
    }
    tensor_ref refs[1024];
    gather_item(s, n, "data", 0, refs);
    if (stack(w, "data.0", refs, n, false, true, why, wl) != 0)
        return -1;
    gather_item(s, n, "data", 1, refs);
    if (stack(w, "data_momentum.0", refs, n, false, true, why, wl) != 0)
        return -1;
    static int64_t lab[1024 * 64], val[1024 * 64], idx[1024 * 64];
    if ((size_t)n * (size_t)(l->n_items > l->n_label ? l->n_items : l->n_label) > sizeof lab / sizeof lab[0]) {
        snprintf(why, wl, "too many crops in one batch");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        memcpy(lab + (size_t)i * (size_t)l->n_label, l->label[i], (size_t)l->n_label * sizeof *lab);
        memcpy(val + (size_t)i * (size_t)l->n_items, l->valid[i], (size_t)l->n_items * sizeof *val);
        memcpy(idx + (size_t)i * (size_t)l->n_items, l->idx[i], (size_t)l->n_items * sizeof *idx);
    }
    /* [N, L] and [N, K] after squeeze: axes of size 1 go. */
    uint64_t sl[2] = {(uint64_t)n, (uint64_t)l->n_label}, sk[2] = {(uint64_t)n, (uint64_t)l->n_items};
    int nl = 0, nk = 0;
    uint64_t ql[2], qk[2];
    for (int d = 0; d < 2; d++) {
        if (sl[d] != 1)
            ql[nl++] = sl[d];
        if (sk[d] != 1)
            qk[nk++] = sk[d];
    }
    add_ints(w, "label.0", lab, nl, ql, false);
    add_ints(w, "data_valid.0", val, nk, qk, false);
    add_ints(w, "data_idx.0", idx, nk, qk, false);
    return 0;
}

/* siamese_collator (Jigsaw): per item position, every sample's towers one after another
 * (image-major); label[k] per sample; data_valid[0] per sample as booleans. No data_idx. */
static int collate_siamese(const rec_view *s, int n, const lists *l, rec_writer *w, char *why, size_t wl)
{
    tensor_ref refs[1024];
    int64_t v[1024];
    uint64_t shape[1] = {(uint64_t)n};
    char name[REC_NAME_MAX + 1];
    if (need_scalar_labels("siamese_collator", l, why, wl) != 0)
        return -1;
    if (l->n_label < l->n_items) {
        snprintf(why, wl, "siamese_collator takes label[k] for each of the %d items, but the samples have %d labels",
                 l->n_items, l->n_label);
        return -1;
    }
    for (int k = 0; k < l->n_items; k++) {
        gather_item(s, n, "data", k, refs);
        const rec_tensor *t0 = &s[0].tensors[refs[0].t];
        if (t0->ndim != 4) {
            snprintf(why, wl, "siamese_collator needs stacked patches [towers, ...] (ShuffleImgPatches) in data.%d", k);
            return -1;
        }
        snprintf(name, sizeof name, "data.%d", k);
        if (stack(w, name, refs, n, true, false, why, wl) != 0)
            return -1;
        for (int i = 0; i < n; i++)
            v[i] = l->label[i][k];
        snprintf(name, sizeof name, "label.%d", k);
        add_ints(w, name, v, 1, shape, false);
    }
    for (int i = 0; i < n; i++)
        v[i] = l->valid[i][0];
    add_ints(w, "data_valid.0", v, 1, shape, true);
    return 0;
}

/* patch_and_image_collator (PIRL): item 0 is the image, items 1..P the patches. */
static int collate_patch_and_image(const rec_view *s, int n, const lists *l, rec_writer *w, char *why, size_t wl)
{
    static tensor_ref refs[1024 * 64];
    if (need_scalar_labels("patch_and_image_collator", l, why, wl) != 0)
        return -1;
    int p = l->n_items - 1;
    if (p < 1 || (size_t)n * (size_t)p > sizeof refs / sizeof refs[0]) {
        snprintf(why, wl, "patch_and_image_collator needs an image and its patches (ImgPilToPatchesAndImage)");
        return -1;
    }
    gather_item(s, n, "data", 0, refs);
    if (stack(w, "images.0", refs, n, false, false, why, wl) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < p; k++)
            refs[(size_t)i * (size_t)p + (size_t)k] = (tensor_ref){&s[i], find_item(&s[i], "data", k + 1)};
    if (stack(w, "patches.0", refs, n * p, false, false, why, wl) != 0)
        return -1;
    int64_t v[1024];
    uint64_t shape[1] = {(uint64_t)n};
    for (int i = 0; i < n; i++)
        v[i] = l->label[i][0];
    add_ints(w, "label.0", v, 1, shape, false);
    for (int i = 0; i < n; i++)
        v[i] = l->valid[i][0];
    add_ints(w, "data_valid.0", v, 1, shape, true);
    return 0;
}

/* multicrop_mixup_collator: pairs (2j, 2j+1) blended as lambda * a + (1 - lambda) * b on the
 * float tensors, per crop position; metadata of the even sample, crop-major. Bytes become
 * floats first with the pending normalisation, exactly as ToTensor/Normalize would have. */
static int item_as_float(const rec_view *v, int t, const float norm[3][3], float *out, char *why, size_t wl)
{
    const rec_tensor *d = &v->tensors[t];
    if (d->dtype == REC_F32) {
        memcpy(out, rec_data(v, t), d->nbytes);
        return 0;
    }
    if (d->dtype != REC_U8 || d->ndim != 3 || d->shape[2] != 3 || !norm) {
        snprintf(why, wl, "multicrop_mixup_collator blends tensors: end the transforms with ToTensor (and Normalize)");
        return -1;
    }
    img_u8 im = {.px = (uint8_t *)rec_data(v, t), .w = (int)d->shape[1], .h = (int)d->shape[0], .c = 3,
                 .stride = (size_t)d->shape[1] * 3};
    img_normalize_chw(&im, norm[0][0], norm[1], norm[2], out);
    return 0;
}

static int collate_mixup(const rec_view *s, int n, const lists *l, const collate_options *opt, rec_writer *w,
                         char *why, size_t wl)
{
    if (n % 2) {
        snprintf(why, wl, "multicrop_mixup_collator pairs samples: the batch of %d is odd", n);
        return -1;
    }
    const float(*norm)[3] = NULL;
    int ni = rec_find(&s[0], "normalize");
    if (ni >= 0 && s[0].tensors[ni].dtype == REC_F32 && rec_numel(&s[0], ni) == 9)
        norm = rec_data(&s[0], ni);
    /* torch: images[0].mul_(lambda); images[1].mul_(1 - lambda); images[0].add_(images[1]), in
     * float32 with both factors rounded to float32 first. */
    float la = (float)opt->mixup_lambda, lb = (float)(1.0 - opt->mixup_lambda);
    char name[REC_NAME_MAX + 1];
    for (int pos = 0; pos < l->n_items; pos++) {
        int t0 = find_item(&s[0], "data", pos);
        const rec_tensor *d = &s[0].tensors[t0];
        uint64_t chw[3] = {3, d->dtype == REC_F32 ? d->shape[1] : d->shape[0],
                           d->dtype == REC_F32 ? d->shape[2] : d->shape[1]};
        uint64_t shape[4] = {(uint64_t)n / 2, chw[0], chw[1], chw[2]};
        size_t per = (size_t)(chw[0] * chw[1] * chw[2]);
        snprintf(name, sizeof name, "data.0.%d", pos);
        float *out = rec_add(w, name, REC_F32, 4, shape);
        float *b = xmalloc(per * sizeof *b);
        for (int j = 0; out && j < n / 2; j++) {
            float *a = out + (size_t)j * per;
            int ta = find_item(&s[2 * j], "data", pos), tb = find_item(&s[2 * j + 1], "data", pos);
            if (rec_numel(&s[2 * j], ta) != rec_numel(&s[0], t0) || rec_numel(&s[2 * j + 1], tb) != rec_numel(&s[0], t0)) {
                snprintf(why, wl, "crop %d differs in size between the samples of one batch", pos);
                free(b);
                return -1;
            }
            if (item_as_float(&s[2 * j], ta, norm, a, why, wl) != 0 ||
                item_as_float(&s[2 * j + 1], tb, norm, b, why, wl) != 0) {
                free(b);
                return -1;
            }
            for (size_t i = 0; i < per; i++) {
                float x = a[i] * la, y = b[i] * lb;
                a[i] = x + y;
            }
        }
        free(b);
    }
    return crop_major_meta(n, 2, l, w, why, wl);
}

/* targets_one_hot_default_collator(batch, num_classes): one data source; label[0] is
 * [pos_list, neg_list], encoded as a row of 2K values (K positives, then K negatives, -1 for
 * no entry; collate.h). convert_to_one_hot: num_classes values of -1, positives set to 1, then
 * negatives to 0 (so a class in both lists ends at 0). */
static int collate_one_hot(const rec_view *s, int n, const lists *l, const collate_options *opt, rec_writer *w,
                           char *why, size_t wl)
{
    const int64_t nc = opt ? opt->num_classes : 0;
    if (nc <= 0 || nc > (1 << 24)) {
        snprintf(why, wl, "targets_one_hot_default_collator: num_classes must be in 1..%d, not %lld", 1 << 24,
                 (long long)nc);
        return -1;
    }
    if (l->n_items != 1) {
        snprintf(why, wl, "targets_one_hot_default_collator supports only 1 data source, but the samples have %d",
                 l->n_items);
        return -1;
    }
    if (!l->label_rows || l->n_label < 1) {
        snprintf(why, wl,
                 "targets_one_hot_default_collator takes label[0] = [pos_list, neg_list]: an int64 label [L, 2K] "
                 "(K positive class indices, then K negative ones, -1 padded), not int64 [%d]%s",
                 l->n_label, l->label_rows ? " rows" : "");
        return -1;
    }
    if (l->label_width % 2) {
        snprintf(why, wl,
                 "targets_one_hot_default_collator takes label[0] = [pos_list, neg_list] as a row of 2K values "
                 "(K positives, then K negatives), but the samples' label rows have an odd width %d",
                 l->label_width);
        return -1;
    }
    tensor_ref refs[1024];
    gather_item(s, n, "data", 0, refs);
    if (stack(w, "data.0", refs, n, false, false, why, wl) != 0)
        return -1;
    int k = l->label_width / 2;
    int64_t *hot = xmalloc((size_t)n * (size_t)nc * sizeof *hot);
    for (int i = 0; i < n; i++) {
        int64_t *row = hot + (size_t)i * (size_t)nc;
        for (int64_t c = 0; c < nc; c++)
            row[c] = -1;
        for (int e = 0; e < 2 * k; e++) { /* positives first, then negatives override */
            int64_t c = l->label[i][e];
            if (c == -1)
                continue; /* padding: no entry */
            if (c < -1 || c >= nc) {
                snprintf(why, wl,
                         "targets_one_hot_default_collator: sample %d's %s class index %lld is outside 0..%lld "
                         "(num_classes %lld; -1 only pads the lists)",
                         i, e < k ? "positive" : "negative", (long long)c, (long long)(nc - 1), (long long)nc);
                free(hot);
                return -1;
            }
            row[c] = e < k ? 1 : 0;
        }
    }
    uint64_t shape[2] = {(uint64_t)n, (uint64_t)nc};
    add_ints(w, "label.0", hot, 2, shape, false);
    free(hot);
    int64_t v[1024];
    for (int i = 0; i < n; i++)
        v[i] = l->valid[i][0];
    add_ints(w, "data_valid.0", v, 1, shape, false);
    for (int i = 0; i < n; i++)
        v[i] = l->idx[i][0];
    add_ints(w, "data_idx.0", v, 1, shape, false);
    return 0;
}

double collate_mixup_lambda(uint64_t seed, uint32_t epoch, uint64_t batch)
{
    rng_stream r;
    rng_stream_init(&r, (rng_key){.seed = seed, .purpose = RNG_PURPOSE_COLLATOR, .epoch = epoch,
                                  .sample_index = batch});
    return rng_beta(&r, 0.2, 0.2);
}

/* ---- the table ---------------------------------------------------------------------------- */

static const struct {
    const char *name;
    collate_kind kind;
} collators[] = {
    {"default_collate", COLLATE_DEFAULT},
    {"simclr_collator", COLLATE_SIMCLR},
    {"multicrop_collator", COLLATE_MULTICROP},
    {"moco_collator", COLLATE_MOCO},
    {"siamese_collator", COLLATE_SIAMESE},
    {"patch_and_image_collator", COLLATE_PATCH_AND_IMAGE},
    {"multicrop_mixup_collator", COLLATE_MIXUP},
    {"targets_one_hot_default_collator", COLLATE_ONE_HOT},
};

int collate_from_name(const char *name, collate_kind *kind, char *why, size_t why_len)
{
    for (size_t i = 0; i < sizeof collators / sizeof collators[0]; i++)
        if (!strcmp(name, collators[i].name)) {
            *kind = collators[i].kind;
            return 0;
        }
    snprintf(why, why_len, "unknown collator '%s'", name);
    return -1;
}

int collate_read_params(collate_kind kind, const char *name, const cfg_node *params, collate_options *opt, char *why,
                        size_t why_len)
{
    bool map = params && params->kind == CFG_MAP;
    if (kind != COLLATE_ONE_HOT) {
        if (map && params->len > 0) {
            snprintf(why, why_len, "%s takes no parameters (got '%s')", name, params->keys[0]);
            return -1;
        }
        return 0;
    }
    /* VISSL: partial(targets_one_hot_default_collator, **params); asserts num_classes > 0. */
    for (size_t i = 0; map && i < params->len; i++)
        if (strcmp(params->keys[i], "num_classes")) {
            snprintf(why, why_len, "%s takes only num_classes (got '%s')", name, params->keys[i]);
            return -1;
        }
    const cfg_node *nc = map ? cfg_map_get(params, "num_classes") : NULL;
    if (!nc || nc->kind != CFG_INT || nc->i <= 0 || nc->i > (1 << 24)) {
        snprintf(why, why_len, "num_classes: %s needs num_classes, an integer in 1..%d (%s)", name, 1 << 24,
                 !nc ? "missing" : nc->kind != CFG_INT ? "not an integer" : "out of range");
        return -1;
    }
    opt->num_classes = nc->i;
    return 0;
}

uint32_t collate_max_tensors(collate_kind kind, const rec_view *first)
{
    (void)kind;
    int nl = 0;
    int li = rec_find(first, "label");
    if (li >= 0 && (first->tensors[li].ndim == 1 || first->tensors[li].ndim == 2) &&
        first->tensors[li].shape[0] < REC_MAX_TENSORS)
        nl = (int)first->tensors[li].shape[0];
    /* default_collate is the widest: items + labels + 2 per item, plus `normalize`. */
    uint32_t n = (uint32_t)(3 * count_items(first) + nl + 4);
    return n > REC_MAX_TENSORS ? REC_MAX_TENSORS : n;
}

int collate_batch(collate_kind kind, const rec_view *samples, int n, const collate_options *opt, rec_writer *w,
                  char *why, size_t why_len)
{
    lists l;
    if (n < 1 || read_lists(samples, n, &l, why, why_len) != 0)
        return -1;
    int rc;
    switch (kind) {
    case COLLATE_DEFAULT: rc = collate_default(samples, n, &l, w, why, why_len); break;
    case COLLATE_SIMCLR: rc = collate_simclr(samples, n, &l, w, why, why_len); break;
    case COLLATE_MULTICROP: rc = collate_multicrop(samples, n, &l, w, why, why_len); break;
    case COLLATE_MOCO: rc = collate_moco(samples, n, &l, w, why, why_len); break;
    case COLLATE_SIAMESE: rc = collate_siamese(samples, n, &l, w, why, why_len); break;
    case COLLATE_PATCH_AND_IMAGE: rc = collate_patch_and_image(samples, n, &l, w, why, why_len); break;
    case COLLATE_ONE_HOT: rc = collate_one_hot(samples, n, &l, opt, w, why, why_len); break;
    default: rc = collate_mixup(samples, n, &l, opt, w, why, why_len); break;
    }
    if (rc != 0)
        return -1;
    /* The pending ToTensor/Normalize travels with the batch to the trainer (mixup did it). */
    int ni = rec_find(&samples[0], "normalize");
    if (ni >= 0 && kind != COLLATE_MIXUP) {
        const rec_tensor *t = &samples[0].tensors[ni];
        rec_add_copy(w, "normalize", (rec_dtype)t->dtype, t->ndim, t->shape, rec_data(&samples[0], ni));
    }
    return 0;
}
