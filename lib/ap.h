/*
 * ap.h — VISSL's average precision (svm_utils.evaluate.get_precision_recall + calculate_ap):
 * VOC2010+ all-point interpolated AP, used by mean_ap_list_meter and the VOC07 SVM protocol.
 *
 * Rows whose target is -1 are left out, targets > 0 are positives. The rest are ranked by
 * descending score; precision P and recall R at every rank; mrec = [0, R, 1],
 * mpre = [0, P, 0]; mpre made non-increasing from the right; AP = Σ (mrec[i] - mrec[i-1]) ·
 * mpre[i] over the i where the recall moves. Ties in score: the later row ranks first (numpy's
 * argsort()[::-1] of a stable order; VISSL's unstable quicksort agrees for 16 rows or fewer).
 */
#ifndef SELFSUP_AP_H
#define SELFSUP_AP_H

#include <stddef.h>
#include <stdint.h>

/* AP of n rows (scores[i * stride], targets[i * stride]); -1 when no row is positive (VISSL
 * then leaves the class out of the mean). */
double ap_voc(const float *scores, const int8_t *targets, size_t n, size_t stride);

#endif
