/*
 * ap.c — VOC all-point interpolated average precision (see ap.h): one sort, one pass.
 */
#include "ap.h"

#include "util.h"

#include <stdlib.h>

typedef struct {
    float score;
    size_t row;
    int8_t positive;
} ranked;

/* Descending score; among equal scores the later row first. */
static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->row < y->row ? 1 : x->row > y->row ? -1 : 0;
}

double ap_voc(const float *scores, const int8_t *targets, size_t n, size_t stride)
{
    ranked *r = xmalloc((n ? n : 1) * sizeof *r);
    size_t m = 0, positives = 0;
    for (size_t i = 0; i < n; i++) {
        int8_t t = targets[i * stride];
        if (t == -1)
            continue;
        r[m++] = (ranked){.score = scores[i * stride], .row = i, .positive = t > 0};
        positives += t > 0;
    }
    if (positives == 0) {
        free(r);
        return -1.0;
    }
    qsort(r, m, sizeof *r, by_score);
    /* precision at each rank, then its running maximum from the right; the recall moves by
     * 1/positives exactly at the positive rows */
    double *prec = xmalloc(m * sizeof *prec);
    size_t tp = 0;
    for (size_t k = 0; k < m; k++) {
        tp += r[k].positive;
        prec[k] = (double)tp / (double)(k + 1);
    }
    for (size_t k = m - 1; k > 0; k--)
        if (prec[k - 1] < prec[k])
            prec[k - 1] = prec[k];
    double ap = 0.0;
    for (size_t k = 0; k < m; k++)
        if (r[k].positive)
            ap += prec[k] / (double)positives;
    free(prec);
    free(r);
    return ap;
}
