/*
 * loss_dc.c — VISSL's deepclusterv2_loss (vissl/losses/deepclusterv2_loss.py) with its two hooks,
 * InitMemoryHook and ClusterMemoryHook (vissl/hooks/deepclusterv2_hooks.py).
 *
 * The state, per trainer: memory banks of S rows (S = ceil(N / W), less S mod B with DROP_LAST:
 * the rows one epoch of this rank's batches fills), one bank per crop of crops_for_mb, each row
 * the L2-normalised head output of one image, with the sample index of every row; and, the same
 * on every trainer, each head's K_h centroids and the assignment of every training sample to a
 * centroid (−100: not in any memory, ignored by the loss).
 *
 * Its life:
 *   before the first epoch of a fresh run (InitMemoryHook), a pass over one epoch of training
 *     batches, the model in training mode without a backward, fills the banks crop by crop
 *     (loss_memory_fill, loss_memory_advance: the trainer runs the forwards);
 *   at the start of every training epoch (ClusterMemoryHook), k-means per head on bank
 *     h mod n_banks: K rows of rank 0's bank as the first centroids, then kmeans_iters rounds of
 *     E-step (each row's nearest centroid by dot product) and M-step (each non-empty cluster's
 *     mean over every rank's rows; every centroid L2-normalised), a last E-step, and the
 *     assignments of every rank's rows gathered into the samples' assignment table;
 *   every step, for each head, CE(z·C_hᵀ / T, assignment_h[sample]) with ignore_index −100 over
 *     all B·C rows (z = the normalised outputs), averaged over the heads; then the batch's z of
 *     crop c (crops_for_mb) replace the next B rows of bank c, and the rows' samples are noted.
 *
 * Where the work runs. The E-step is a product of the bank with the centroids on the model
 * engine (oneDNN or cuBLAS, in row blocks of at most 2^24 scores) and a row argmax
 * (eng_argmax_rows); only the S assignments come back to the host. The M-step sums the bank's
 * rows per cluster on the host, in double, from one download of the bank per head, and the ranks
 * add their sums up in double (dist_reduce). FAISS was not used: its k-means has its own
 * initialisation and point sampling (not VISSL's), and Debian's build searches on the CPU, so
 * the bank would leave the GPU every iteration for a product the engine already does there.
 *
 * Two choices differ from VISSL, both for exact resume: the first centroids are rows
 * permuted by selfsup's counter-based generator keyed by (SEED_VALUE, epoch, head), not torch's
 * global generator; and a run resumed inside an epoch does not cluster again (VISSL's
 * on_phase_start would, with a fresh draw), it goes on from the checkpoint's centroids and
 * assignments with the bank's write position of the batch it resumes at. Test phases are
 * refused at config time (VISSL's would write test samples into the training memory).
 * The init pass reads its batches from a second input (selfsup run wires a chain that decodes
 * epoch 0 once more), so it sees epoch 0's crops, in epoch 0's order.
 *
 * Checkpoint names (VISSL's buffers): loss.local_memory_embeddings (n_banks × S × D),
 * loss.local_memory_index (S), per rank (rank<r>. on rank r > 0); loss.assignments (H × N) and
 * loss.centroids<h> (K_h × D), once, rank 0's (they are every rank's). Indices are kept as
 * float32, exact below 2^24 samples (num_train_samples is refused above that).
 */
#include "train/loss_internal.h"

#include "log.h"
#include "rng.h"
#include "timer.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_IGNORE (-100)
#define DC_MAX_SAMPLES (1 << 24) /* indices are float32 in the checkpoint */
#define DC_SCORE_BLOCK (1 << 24) /* the E-step's scores per block of rows */

struct dc_state {
    int64_t rows, start;  /* S, and where the next batch's rows go */
    int64_t *index;       /* S: each row's sample (host mirror of local_memory_index) */
    int64_t *assign;      /* H × N (host mirror of assignments) */
    float *host;          /* S × D: a bank on the host (the M-step) */
    int first;            /* the state's entry of the banks; index, assignments, centroids<h> follow */
};

/* The state's tensors (by place, not pointer: the entry list may grow). */
static const eng_tensor *banks_of(const loss_state *s) { return &s->entries[s->dc->first].value; }
static const eng_tensor *index_of(const loss_state *s) { return &s->entries[s->dc->first + 1].value; }
static const eng_tensor *assignments_of(const loss_state *s) { return &s->entries[s->dc->first + 2].value; }
static const eng_tensor *centroids_of(const loss_state *s, int h) { return &s->entries[s->dc->first + 3 + h].value; }

/* ---- config ------------------------------------------------------------------------------- */

static bool read_ints(const cfg_node *l, const char *key, int64_t *out, int max, int *n, cfg_err *err)
{
    const cfg_node *v = cfg_get(l, key);
    bool ok = v->kind == CFG_LIST && v->len >= 1 && (int)v->len <= max;
    for (size_t i = 0; ok && i < v->len; i++)
        ok = cfg_is_number(v->items[i]) && (out[i] = (int64_t)cfg_number(v->items[i])) == cfg_number(v->items[i]);
    if (!ok)
        cfg_fail(err, v, key, "must be a list of 1 to %d integers", max);
    *n = ok ? (int)v->len : 0;
    return ok;
}

/* VISSL's memory size per process: ceil(N / W), less its remainder by B with DROP_LAST. */
static int64_t memory_rows(const dc_options *d, int64_t world)
{
    int64_t rows = (d->num_train_samples + world - 1) / world;
    return d->drop_last ? rows - rows % d->batch : rows;
}

static const char *bad_value(const loss_options *o, const dc_options *d)
{
    for (int h = 0; h < d->nheads; h++)
        if (d->num_clusters[h] < 1)
            return "num_clusters must be positive";
    return !(o->temperature > 0.0)   ? "temperature must be > 0"
           : d->kmeans_iters < 0     ? "kmeans_iters must be ≥ 0"
           : o->embedding_dim < 1    ? "memory_params.embedding_dim must be ≥ 1"
           : d->batch < 1            ? "BATCHSIZE_PER_REPLICA must be ≥ 1"
                                     : NULL;
}

/* What the method needs from the rest of the config: sample indices as labels, no test phases. */
static bool fits_the_run(const cfg_node *config, cfg_err *err)
{
    if (strcmp(cfg_str(config, "DATA.TRAIN.LABEL_TYPE"), "sample_index")) {
        cfg_fail(err, cfg_get(config, "DATA.TRAIN.LABEL_TYPE"), "config.DATA.TRAIN.LABEL_TYPE",
                 "is '%s', but deepclusterv2_loss looks each image's cluster up by its sample index: set it to "
                 "sample_index", cfg_str(config, "DATA.TRAIN.LABEL_TYPE"));
        return false;
    }
    if (cfg_bool(config, "TEST_MODEL") && !cfg_bool(config, "TEST_ONLY")) {
        cfg_fail(err, cfg_get(config, "TEST_MODEL"), "config.TEST_MODEL",
                 "deepclusterv2_loss has no test phases: its forward writes every batch into the training "
                 "memory (VISSL's would store the test samples there); evaluate the trunk with the benchmarks");
        return false;
    }
    return true;
}

bool dc_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err)
{
    const cfg_node *l = cfg_get(config, "LOSS.deepclusterv2_loss");
    dc_options *d = &o->dc;
    o->temperature = cfg_float(l, "temperature");
    o->embedding_dim = cfg_int(l, "memory_params.embedding_dim");
    d->kmeans_iters = (int)cfg_int(l, "kmeans_iters");
    d->num_crops = (int)cfg_int(l, "num_crops");
    d->batch = cfg_int(l, "BATCHSIZE_PER_REPLICA");
    d->drop_last = cfg_bool(l, "DROP_LAST");
    int64_t crops[LOSS_MAX_CROPS];
    if (!read_ints(l, "num_clusters", d->num_clusters, LOSS_MAX_PROTOTYPES, &d->nheads, err) ||
        !read_ints(l, "memory_params.crops_for_mb", crops, LOSS_MAX_CROPS, &d->nbanks, err))
        return false;
    for (int i = 0; i < d->nbanks; i++)
        if ((d->crops_for_mb[i] = (int)crops[i]) < 0 || crops[i] >= d->num_crops) {
            cfg_fail(err, cfg_get(l, "memory_params.crops_for_mb"), "config.LOSS.deepclusterv2_loss.memory_params."
                     "crops_for_mb", "crop %lld is not one of the batch's %d crops (num_crops)", (long long)crops[i],
                     d->num_crops);
            return false;
        }
    const char *bad = bad_value(o, d);
    if (bad) {
        cfg_fail(err, l, "config.LOSS.deepclusterv2_loss", "%s", bad);
        return false;
    }
    if (!fits_the_run(config, err) ||
        !loss_train_samples(config, l, "config.LOSS.deepclusterv2_loss.num_train_samples",
                            "the assignments need a place", DC_MAX_SAMPLES - 1, &d->num_train_samples, err))
        return false;
    int64_t world = cfg_int(config, "DISTRIBUTED.NUM_NODES") * cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    int64_t rows = memory_rows(d, world < 1 ? 1 : world);
    for (int h = 0; h < d->nheads; h++)
        if (d->num_clusters[h] > rows) {
            cfg_fail(err, cfg_get(l, "num_clusters"), "config.LOSS.deepclusterv2_loss.num_clusters",
                     "%lld clusters, but k-means starts from distinct rows of rank 0's memory bank of %lld (VISSL: "
                     "\"please reduce the number of centroids\")",
                     (long long)d->num_clusters[h], (long long)rows);
            return false;
        }
    return true;
}

/* ---- state -------------------------------------------------------------------------------- */

static eng_entry *add(eng_backend *be, loss_state *s, const char *rank, const char *name, eng_shape shape)
{
    char full[96];
    snprintf(full, sizeof full, "%sloss.%s", rank, name);
    eng_entry *e = loss_state_add_entry(s, full, ENG_BUFFER);
    e->value = eng_tensor_new(be, shape);
    eng_zero(be, &e->value);
    return e;
}

/* The assignments' row h from the host mirror, as float32. */
static void upload_assignments(eng_backend *be, const loss_state *s, int h)
{
    const struct dc_state *d = s->dc;
    int64_t n = s->o.dc.num_train_samples;
    float *v = xmalloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)d->assign[h * n + i];
    eng_tensor row = eng_rows(be, assignments_of(s), h, 1);
    eng_upload(be, &row, v);
    free(v);
}

/* Rows [from, from + n) of local_memory_index from the host mirror, as float32. */
static void upload_index(eng_backend *be, const loss_state *s, int64_t from, int64_t n)
{
    const struct dc_state *d = s->dc;
    float *v = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)d->index[from + i];
    eng_tensor column = eng_reshape(index_of(s), eng_shape2(d->rows, 1)), rows = eng_rows(be, &column, from, n);
    eng_upload(be, &rows, v);
    free(v);
}

/* Entries in this order: the rank's own (banks, index), then the shared ones (assignments,
 * centroids), which s->nshared marks for the checkpoint (loss_state_rank_entries). */
void dc_state_init(eng_backend *be, loss_state *s)
{
    const dc_options *o = &s->o.dc;
    struct dc_state *d = s->dc = xcalloc(1, sizeof *d);
    int64_t dim = s->o.embedding_dim, n = o->num_train_samples;
    d->rows = memory_rows(o, dist_world(s->world));
    d->index = xcalloc((size_t)d->rows, sizeof *d->index);
    d->assign = xmalloc((size_t)(o->nheads * n) * sizeof *d->assign);
    for (int64_t i = 0; i < o->nheads * n; i++)
        d->assign[i] = DC_IGNORE;
    d->host = xmalloc_large((size_t)(d->rows * dim) * sizeof *d->host);
    char rank[24];
    loss_state_rank_prefix(s, rank);
    d->first = s->nentries;
    add(be, s, rank, "local_memory_embeddings", eng_shape3(o->nbanks, d->rows, dim));
    add(be, s, rank, "local_memory_index", (eng_shape){.ndim = 1, .dim = {d->rows}});
    add(be, s, "", "assignments", eng_shape2(o->nheads, n));
    for (int h = 0; h < o->nheads; h++) {
        char name[32];
        snprintf(name, sizeof name, "centroids%d", h);
        add(be, s, "", name, eng_shape2(o->num_clusters[h], dim));
    }
    s->nowned = s->nentries;
    s->nshared = 1 + o->nheads;
    for (int h = 0; h < o->nheads; h++)
        upload_assignments(be, s, h);
}

void dc_state_free(loss_state *s)
{
    struct dc_state *d = s->dc;
    if (!d)
        return;
    free(d->index), free(d->assign), free(d->host);
    free(d);
    s->dc = NULL;
}

/* An index read back from its float32 entry: a whole number in [lo, hi), or `ignore`. */
static int whole(float v, int64_t lo, int64_t hi, int64_t ignore, int64_t *out)
{
    *out = (int64_t)v;
    return (float)*out == v && ((*out >= lo && *out < hi) || *out == ignore) ? 0 : -1;
}

int dc_loaded(eng_backend *be, loss_state *s, char **err)
{
    struct dc_state *d = s->dc;
    const dc_options *o = &s->o.dc;
    int64_t n = o->num_train_samples, total = (int64_t)o->nheads * n;
    float *v = xmalloc((size_t)(total > d->rows ? total : d->rows) * sizeof *v);
    eng_download(be, index_of(s), v);
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < d->rows; i++)
        if (whole(v[i], 0, n, 0, &d->index[i]) != 0)
            rc = report_failure(err, "the checkpoint's loss.local_memory_index[%lld] is %g, not a sample of %lld",
                                (long long)i, (double)v[i], (long long)n);
    eng_download(be, assignments_of(s), v);
    for (int64_t i = 0; rc == 0 && i < total; i++) {
        int64_t k = o->num_clusters[i / n];
        if (whole(v[i], 0, k, DC_IGNORE, &d->assign[i]) != 0)
            rc = report_failure(err, "the checkpoint's loss.assignments[%lld][%lld] is %g, not a cluster of %lld",
                                (long long)(i / n), (long long)(i % n), (double)v[i], (long long)k);
    }
    free(v);
    return rc;
}

void dc_resume_at(loss_state *s, int64_t batch_in_epoch) { s->dc->start = batch_in_epoch * s->o.dc.batch; }

/* ---- the memory ---------------------------------------------------------------------------- */

int dc_memory_crops(const loss_state *s, const int **crops)
{
    *crops = s->o.dc.crops_for_mb;
    return s->o.dc.nbanks;
}

/* Bank j as an S × D matrix. */
static eng_tensor bank_of(eng_backend *be, const loss_state *s, int j)
{
    const struct dc_state *d = s->dc;
    eng_tensor all = eng_reshape(banks_of(s), eng_shape2(s->o.dc.nbanks * d->rows, s->o.embedding_dim));
    return eng_rows(be, &all, j * d->rows, d->rows);
}

/* The b rows from `start` of bank j. */
static eng_tensor bank_rows(eng_backend *be, const loss_state *s, int j, int64_t b)
{
    eng_tensor bank = bank_of(be, s, j);
    return eng_rows(be, &bank, s->dc->start, b);
}

static int check_room(const loss_state *s, int64_t b, char **err)
{
    const struct dc_state *d = s->dc;
    if (d->start + b <= d->rows)
        return 0;
    return report_failure(err, "deepclusterv2_loss: %lld more rows do not fit the memory bank of %lld (%lld written "
                          "this epoch): the epoch has more batches than the memory was sized for",
                          (long long)b, (long long)d->rows, (long long)d->start);
}

int dc_memory_fill(eng_backend *be, loss_state *s, int bank, const eng_tensor *out, char **err)
{
    int64_t b = out->shape.dim[0];
    if (check_room(s, b, err) != 0)
        return -1;
    if (out->shape.ndim != 2 || out->shape.dim[1] != s->o.embedding_dim)
        return report_failure(err, "deepclusterv2_loss: the head's output is not %lld wide "
                              "(memory_params.embedding_dim)", (long long)s->o.embedding_dim);
    eng_tensor rows = bank_rows(be, s, bank, b);
    eng_l2norm_forward(be, out, &rows);
    return 0;
}

void dc_memory_advance(eng_backend *be, loss_state *s, const int64_t *samples, int64_t b)
{
    struct dc_state *d = s->dc;
    memcpy(d->index + d->start, samples, (size_t)b * sizeof *samples);
    upload_index(be, s, d->start, b);
    d->start += b;
}

/* ---- k-means (ClusterMemoryHook) ------------------------------------------------------------ */

/* Rank 0's K rows of bank j, permuted by the epoch's and the head's stream, to every rank. */
static int first_centroids(eng_backend *be, loss_state *s, int64_t epoch, int h, int j, const eng_tensor *c,
                           char **err)
{
    struct dc_state *d = s->dc;
    if (dist_rank(s->world) == 0) {
        size_t *perm = xmalloc((size_t)d->rows * sizeof *perm);
        rng_stream r;
        rng_stream_init(&r, (rng_key){.seed = s->seed, .purpose = RNG_PURPOSE_CLUSTER, .epoch = (uint32_t)epoch,
                                      .sample_index = (uint64_t)h});
        rng_permutation(&r, (size_t)d->rows, perm);
        eng_tensor bank = bank_of(be, s, j);
        for (int64_t k = 0; k < c->shape.dim[0]; k++) {
            eng_tensor from = eng_rows(be, &bank, (int64_t)perm[k], 1), to = eng_rows(be, c, k, 1);
            eng_copy(be, &from, &to);
        }
        free(perm);
    }
    return dist_broadcast(s->world, be, c, err);
}

/* E-step: each of the bank's rows to its nearest centroid by dot product (host out[S]). */
static void nearest(eng_backend *be, const eng_tensor *bank, const eng_tensor *c, eng_tensor *scores, int64_t *out)
{
    int64_t rows = bank->shape.dim[0], block = scores->shape.dim[0];
    for (int64_t r = 0; r < rows; r += block) {
        int64_t n = rows - r < block ? rows - r : block;
        eng_tensor x = eng_rows(be, bank, r, n), y = eng_rows(be, scores, 0, n);
        eng_linear_forward(be, &x, c, NULL, &y);
        eng_argmax_rows(be, &y, out + r);
    }
}

/* M-step: every non-empty cluster's mean over every rank's rows (sums and counts in double,
 * added up over the ranks), then every centroid L2-normalised; the host's centroids `ch` and
 * the device's c follow. */
static int move_centroids(eng_backend *be, loss_state *s, const int64_t *assign, float *ch, const eng_tensor *c,
                          char **err)
{
    const struct dc_state *d = s->dc;
    int64_t k = c->shape.dim[0], dim = s->o.embedding_dim;
    double *sums = xcalloc((size_t)(k * dim + k), sizeof *sums), *counts = sums + k * dim;
    for (int64_t i = 0; i < d->rows; i++) {
        counts[assign[i]] += 1.0;
        for (int64_t f = 0; f < dim; f++)
            sums[assign[i] * dim + f] += d->host[i * dim + f];
    }
    int rc = dist_reduce(s->world, sums, (size_t)(k * dim + k), false, err);
    for (int64_t q = 0; rc == 0 && q < k; q++)
        for (int64_t f = 0; counts[q] > 0.0 && f < dim; f++)
            ch[q * dim + f] = (float)(sums[q * dim + f] / counts[q]);
    free(sums);
    if (rc != 0)
        return -1;
    loss_normalize_rows(ch, k, dim);
    eng_upload(be, c, ch);
    return 0;
}

/* Head h's assignments: every rank's rows' clusters at their samples (idx: every rank's memory
 * indices, gathered once an epoch), −100 elsewhere. */
static int gather_assignments(eng_backend *be, loss_state *s, int h, const int64_t *assign, const int64_t *idx,
                              char **err)
{
    struct dc_state *d = s->dc;
    int64_t n = s->o.dc.num_train_samples, total, *all = NULL;
    if (dist_gather_rows(s->world, assign, sizeof *assign, d->rows, (void **)&all, &total, err) != 0)
        return -1;
    int64_t *row = d->assign + h * n;
    for (int64_t i = 0; i < n; i++)
        row[i] = DC_IGNORE;
    for (int64_t r = 0; r < total; r++)
        row[idx[r]] = all[r];
    free(all);
    upload_assignments(be, s, h);
    return 0;
}

/* One head's k-means on bank j (loss_dc.c's top comment). */
static int cluster_head(eng_backend *be, loss_state *s, int64_t epoch, int h, int j, const int64_t *idx, char **err)
{
    struct dc_state *d = s->dc;
    const eng_tensor *c = centroids_of(s, h);
    int64_t k = c->shape.dim[0], dim = s->o.embedding_dim, *assign = xmalloc((size_t)d->rows * sizeof *assign);
    int64_t per_block = DC_SCORE_BLOCK / k < 1 ? 1 : DC_SCORE_BLOCK / k;
    float *ch = xmalloc((size_t)(k * dim) * sizeof *ch);
    eng_tensor bank = bank_of(be, s, j), block = eng_tensor_new(be, eng_shape2(per_block < d->rows ? per_block : d->rows, k));
    eng_download(be, &bank, d->host);
    int rc = first_centroids(be, s, epoch, h, j, c, err);
    if (rc == 0)
        eng_download(be, c, ch);
    for (int it = 0; rc == 0; it++) {
        nearest(be, &bank, c, &block, assign);
        if (it == s->o.dc.kmeans_iters)
            break;
        rc = move_centroids(be, s, assign, ch, c, err);
    }
    rc = rc == 0 ? gather_assignments(be, s, h, assign, idx, err) : -1;
    eng_tensor_free(be, &block);
    free(assign), free(ch);
    return rc;
}

int dc_on_phase_start(eng_backend *be, loss_state *s, int64_t epoch, char **err)
{
    s->dc->start = 0;
    double t0 = now_seconds();
    int64_t *idx = NULL, total;
    int rc = dist_gather_rows(s->world, s->dc->index, sizeof *s->dc->index, s->dc->rows, (void **)&idx, &total, err);
    for (int h = 0; rc == 0 && h < s->o.dc.nheads; h++)
        rc = cluster_head(be, s, epoch, h, h % s->o.dc.nbanks, idx, err);
    free(idx);
    if (rc == 0)
        log_info("k-means of epoch %lld: %d head(s) on %lld memory rows a rank, %d iterations, %.1f s", (long long)epoch,
                 s->o.dc.nheads, (long long)s->dc->rows, s->o.dc.kmeans_iters, now_seconds() - t0);
    return rc;
}

/* ---- the loss ------------------------------------------------------------------------------ */

struct dc_plan {
    eng_tensor z, dz, scores[LOSS_MAX_PROTOTYPES], dscores[LOSS_MAX_PROTOTYPES];
    int64_t *target;
};

int dc_plan(eng_backend *be, loss *l, char **err)
{
    const dc_options *o = &l->o.dc;
    if (!l->st || !l->st->dc)
        return report_failure(err, "deepclusterv2_loss: planned without its memory");
    if (l->n != 1 || l->shape[0].ndim != 2 || l->shape[0].dim[1] != l->o.embedding_dim)
        return report_failure(err, "deepclusterv2_loss: the model must have one output of "
                                   "memory_params.embedding_dim (%lld) columns", (long long)l->o.embedding_dim);
    int64_t rows = l->shape[0].dim[0];
    if (rows % o->num_crops)
        return report_failure(err, "deepclusterv2_loss: %lld output rows are not num_crops (%d) crops of the batch",
                              (long long)rows, o->num_crops);
    struct dc_plan *p = l->dc = xcalloc(1, sizeof *p);
    p->z = eng_tensor_new(be, l->shape[0]);
    p->dz = eng_tensor_new(be, l->shape[0]);
    for (int h = 0; h < o->nheads; h++) {
        p->scores[h] = eng_tensor_new(be, eng_shape2(rows, o->num_clusters[h]));
        p->dscores[h] = eng_tensor_new(be, eng_shape2(rows, o->num_clusters[h]));
    }
    p->target = xmalloc((size_t)rows * sizeof *p->target);
    return 0;
}

void dc_free(eng_backend *be, loss *l)
{
    struct dc_plan *p = l->dc;
    if (!p)
        return;
    eng_tensor_free(be, &p->z);
    eng_tensor_free(be, &p->dz);
    for (int h = 0; h < l->o.dc.nheads; h++) {
        eng_tensor_free(be, &p->scores[h]);
        eng_tensor_free(be, &p->dscores[h]);
    }
    free(p->target);
    free(p);
    l->dc = NULL;
}

static int check_samples(const loss *l, const loss_batch *b, int64_t rows, char **err)
{
    if (!b->label || b->batch != rows || b->label_cols != 1)
        return report_failure(err, "deepclusterv2_loss: the batch has no sample index per crop (label.0 of "
                                   "LABEL_TYPE sample_index, crop-major as multicrop_collator writes it)");
    for (int64_t i = 0; i < rows; i++)
        if (b->label[i] < 0 || b->label[i] >= l->o.dc.num_train_samples)
            return report_failure(err, "deepclusterv2_loss: crop row %lld's sample %lld is not one of the %lld "
                                       "(num_train_samples)", (long long)i, (long long)b->label[i],
                                  (long long)l->o.dc.num_train_samples);
    return 0;
}

/* The bank update: crop c's rows of z replace the next b rows of its bank. */
static int update_memory(eng_backend *be, loss *l, const loss_batch *bt, int64_t b, char **err)
{
    loss_state *s = l->st;
    if (check_room(s, b, err) != 0)
        return -1;
    for (int i = 0; i < l->o.dc.nbanks; i++) {
        eng_tensor from = eng_rows(be, &l->dc->z, l->o.dc.crops_for_mb[i] * b, b), to = bank_rows(be, s, i, b);
        eng_copy(be, &from, &to);
    }
    dc_memory_advance(be, s, bt->label, b);
    return 0;
}

int dc_compute(eng_backend *be, loss *l, const eng_tensor *out, const loss_batch *bt, double *value, char **err)
{
    const dc_options *o = &l->o.dc;
    struct dc_plan *p = l->dc;
    int64_t rows = l->shape[0].dim[0], n = o->num_train_samples;
    if (check_samples(l, bt, rows, err) != 0)
        return -1;
    eng_l2norm_forward(be, out, &p->z);
    eng_zero(be, &p->dz);
    double total = 0.0;
    for (int h = 0; h < o->nheads; h++) {
        for (int64_t i = 0; i < rows; i++)
            p->target[i] = l->st->dc->assign[h * n + bt->label[i]];
        const eng_tensor *c = centroids_of(l->st, h);
        eng_linear_forward(be, &p->z, c, NULL, &p->scores[h]);
        total += eng_cross_entropy(be, &p->scores[h], (float)(1.0 / l->o.temperature), p->target, NULL, DC_IGNORE,
                                   &p->dscores[h]);
        eng_linear_backward(be, &p->z, c, &p->dscores[h], &p->dz, NULL, NULL);
    }
    *value = total / o->nheads;
    eng_scale(be, (float)(1.0 / o->nheads), &p->dz);
    eng_zero(be, &l->dout[0]);
    eng_l2norm_backward(be, out, &p->dz, &l->dout[0]);
    return update_memory(be, l, bt, rows / o->num_crops, err);
}
