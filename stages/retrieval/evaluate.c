/*
 * evaluate.c — scoring a retrieval: rankings, the trapezoidal AP of the Holidays/INSTRE package
 * and of revisitop (evaluate.py: the same formula), revisitop's compute_map with its junk rule
 * and precision at k, and compute_ap.cpp, the classic Oxford/Paris scorer VISSL calls as
 * EVAL_BINARY_PATH.
 */
#include "retrieval/retrieval.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>

const int retr_kappas[RETR_KAPPAS] = {1, 5, 10};

double retr_ap_from_ranks(const int64_t *ranks, size_t n, size_t nres)
{
    double ap = 0, step = 1.0 / (double)nres;
    for (size_t j = 0; j < n; j++) {
        double rank = (double)ranks[j];
        double p0 = ranks[j] == 0 ? 1.0 : (double)j / rank, p1 = (double)(j + 1) / (rank + 1);
        ap += (p0 + p1) * step / 2.0;
    }
    return ap;
}

typedef struct {
    float sim;
    int64_t idx;
} scored;

static int by_sim_desc(const void *pa, const void *pb)
{
    const scored *a = pa, *b = pb;
    if (a->sim != b->sim)
        return a->sim > b->sim ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

void retr_rank(const float *sim, size_t nq, size_t ndb, int64_t *ranks)
{
    scored *s = xmalloc(ndb * sizeof *s);
    for (size_t q = 0; q < nq; q++) {
        for (size_t i = 0; i < ndb; i++)
            s[i] = (scored){isnan(sim[q * ndb + i]) ? -INFINITY : sim[q * ndb + i], (int64_t)i};
        qsort(s, ndb, sizeof *s, by_sim_desc);
        for (size_t i = 0; i < ndb; i++)
            ranks[q * ndb + i] = s[i].idx;
    }
    free(s);
}

/* Positions (ascending) in `ranked` of the indices flagged in `member`. */
static size_t positions(const int64_t *ranked, size_t ndb, const bool *member, int64_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < ndb; i++)
        if (member[ranked[i]])
            out[n++] = (int64_t)i;
    return n;
}

/* Flags over the database for a list of indices (those outside it are ignored, as np.in1d
 * ignores values that never occur). */
static void flag(bool *f, size_t ndb, const int64_t *idx, size_t n)
{
    for (size_t i = 0; i < ndb; i++)
        f[i] = false;
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= 0 && (size_t)idx[i] < ndb)
            f[idx[i]] = true;
}

/* Each positive position moves up by the junk positions before it. */
static void skip_junk(int64_t *pos, size_t npos, const int64_t *junk, size_t njunk)
{
    size_t k = 0, ij = 0;
    for (size_t ip = 0; ip < npos; ip++) {
        while (ij < njunk && pos[ip] > junk[ij]) {
            k++;
            ij++;
        }
        pos[ip] -= (int64_t)k;
    }
}

/* One query's AP and precisions at k; false when it has no positives. */
static bool query_scores(const int64_t *ranked, size_t ndb, const retr_gnd *g, bool *f, int64_t *pos,
                         int64_t *junk, double *ap, double pk[RETR_KAPPAS])
{
    if (g->n_ok == 0)
        return false;
    flag(f, ndb, g->ok, g->n_ok);
    size_t npos = positions(ranked, ndb, f, pos);
    flag(f, ndb, g->junk, g->n_junk);
    size_t njunk = positions(ranked, ndb, f, junk);
    skip_junk(pos, npos, junk, njunk);
    *ap = retr_ap_from_ranks(pos, npos, g->n_ok);
    int64_t last = 0; /* max(pos), 1-based */
    for (size_t i = 0; i < npos; i++)
        last = pos[i] + 1 > last ? pos[i] + 1 : last;
    for (int j = 0; j < RETR_KAPPAS; j++) {
        int64_t kq = last < retr_kappas[j] ? last : retr_kappas[j];
        size_t within = 0;
        for (size_t i = 0; i < npos; i++)
            within += pos[i] + 1 <= kq;
        pk[j] = kq ? (double)within / (double)kq : NAN; /* numpy: 0 / 0 */
    }
    return true;
}

void retr_compute_map(const int64_t *ranks, size_t nq, size_t ndb, const retr_gnd *gnd, double *map,
                      double mpk[RETR_KAPPAS], double *aps)
{
    bool *f = xmalloc((ndb ? ndb : 1) * sizeof *f);
    int64_t *pos = xmalloc((ndb ? ndb : 1) * sizeof *pos), *junk = xmalloc((ndb ? ndb : 1) * sizeof *junk);
    double sum = 0, psum[RETR_KAPPAS] = {0};
    size_t used = 0;
    for (size_t q = 0; q < nq; q++) {
        double ap, pk[RETR_KAPPAS];
        bool ok = query_scores(ranks + q * ndb, ndb, &gnd[q], f, pos, junk, &ap, pk);
        if (aps)
            aps[q] = ok ? ap : NAN;
        if (!ok)
            continue;
        used++;
        sum += ap;
        for (int j = 0; j < RETR_KAPPAS; j++)
            psum[j] += pk[j];
    }
    *map = used ? sum / (double)used : NAN;
    for (int j = 0; j < RETR_KAPPAS; j++)
        mpk[j] = used ? psum[j] / (double)used : NAN;
    free(f);
    free(pos);
    free(junk);
}

double retr_oxford_ap(const int64_t *ranked, size_t ndb, const bool *positive, const bool *junk, size_t n_pos)
{
    float old_recall = 0, old_precision = 1, ap = 0;
    size_t hits = 0, j = 0;
    for (size_t i = 0; i < ndb; i++) {
        if (junk[ranked[i]])
            continue;
        hits += positive[ranked[i]];
        float recall = (float)hits / (float)n_pos;
        float precision = (float)((double)hits / ((double)j + 1.0));
        ap = (float)(ap + (recall - old_recall) * ((old_precision + precision) / 2.0));
        old_recall = recall;
        old_precision = precision;
        j++;
    }
    return ap;
}
