/*
 * retrieval.h — VISSL's instance-retrieval benchmark (VISSL 0.1.5's tools/instance_retrieval_test.py
 * and vissl/utils/instance_retrieval_utils/): the contract of selfsup-retrieval's parts.
 *
 * The benchmark: every image goes through the trunk alone, at its own size (the longer side
 * resized to IMG_RETRIEVAL.RESIZE_IMG), and the first layer of LINEAR_EVAL_FEAT_POOL_OPS_MAP's
 * activation map becomes one descriptor (R-MAC, GeM or the map itself, L2-normalised); PCA
 * whitening learned on another dataset's descriptors is applied; queries are ranked against the
 * database by dot product and scored with the revisited Oxford/Paris protocol (mAP and mP@k for
 * Easy, Medium and Hard) or the classic Oxford/Paris one (mean of compute_ap.cpp's AP).
 *
 * Files: descriptors.c (R-MAC regions and pooling, GeM, L2), pca.c (the whitening, on LAPACK),
 * evaluate.c (AP, mAP, precision at k, rankings), datasets.c (the ground-truth layouts),
 * image.c (an image as the tool prepares it). main.c runs them in the tool's order.
 *
 * Where selfsup parts from VISSL 0.1.5 (each one a place where the tool crashes or computes
 * something its authors did not mean; main.c logs which applies):
 *   - R-MAC without PCA: the tool returns the region vectors unsummed, and its dot product of
 *     3-D arrays is not a similarity. Here the regions are summed and L2-normalised (R-MAC
 *     without whitening).
 *   - GeM: the tool concatenates every image's map, which fails unless all maps have one size;
 *     here each image is pooled alone (the same numbers when the sizes agree). Without PCA the
 *     tool calls None.apply; here the pooled vector is used as it is.
 *   - l2_norm: the tool normalises over the batch dimension (dim 0, of size 1), turning every
 *     value into its sign; here the flattened map is L2-normalised. Its PCA is learned and never
 *     applied by the tool; here it is not learned.
 *   - DEBUG_MODE on a revisited dataset takes 50 queries and then scores all of them (an index
 *     error); here the scored queries are the ones ranked.
 *   - Equal similarities: numpy's argsort (introsort) orders them arbitrarily; here the lower
 *     database index ranks first (descending sort by similarity, stable).
 *   - The classic datasets' AP is compute_ap.cpp's (EVAL_BINARY_PATH), computed here; the
 *     binary prints it with 6 decimals, which this does not round to.
 */
#ifndef SELFSUP_RETRIEVAL_H
#define SELFSUP_RETRIEVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- descriptors.c ------------------------------------------------------------------------ */

/* R-MAC's square regions (Tolias et al., as rmac.py's get_rmac_region_coordinates) of an H × W
 * map at levels 1..L, each {x, y, w, h}: level order, then rows, then columns. Returns the count;
 * `out` may be NULL to count. */
int rmac_regions(int H, int W, int L, int (*out)[4]);
/* The regions' max-pooled, L2-normalised vectors (normalize_L2: no epsilon) of one map C × H ×
 * W (C-contiguous): out is nr × C. */
void rmac_region_vectors(const float *map, int C, int H, int W, const int (*regions)[4], int nr, float *out);
/* Sum nr rows of width n and L2-normalise the sum (get_rmac_descriptors' last step): out is n. */
void rmac_aggregate(const float *rows, int nr, int n, float *out);
/* gem(map, p, add_bias=True) then l2n: clamp to 1e-6, p-th power, mean, 1/p-th power (p = inf:
 * max, p = 1: mean), a last channel of 1, x / (‖x‖ + 1e-6). out is C + 1. */
void gem_descriptor(const float *map, int C, int H, int W, double p, float *out);
/* x / ‖x‖ in place, n values (nothing when the norm is 0). */
void l2_normalize(float *x, size_t n);

/* ---- pca.c -------------------------------------------------------------------------------- */

/* pca.py's PCA, fitted from rows streamed in one at a time (pca.c says how): eigenvalues of
 * the centred XᵀX below max·1e-5 raised to it, the n_components largest kept (all when
 * n_components <= 0), DVt = diag(1/sqrt(d))·Vᵀ. apply: (x − mean)·DVtᵀ. */
typedef struct {
    int dim;           /* input width */
    int out;           /* kept components */
    int64_t rows;      /* rows the fit saw */
    float *shift;      /* while fitting: the first block's mean */
    bool shifted;
    float *block;      /* while fitting: rows waiting for their product */
    int pending;
    double *sum, *xtx; /* while fitting */
    float *mean;       /* dim */
    float *dvt;        /* out × dim */
    double energy;     /* fraction of the total eigenvalue sum kept */
    int clamped;       /* eigenvalues raised to max·1e-5 */
} pca_model;

void pca_init(pca_model *p, int dim);
void pca_add(pca_model *p, const float *row);
/* 0, or -1 with *err (no rows, LAPACK failed). */
int pca_fit(pca_model *p, int n_components, char **err);
/* n rows of dim in, n rows of out width out. */
void pca_apply(const pca_model *p, const float *x, size_t n, float *y);
/* C = op(A)·op(B), row-major, on oneDNN's sgemm ('N' or 'T'); dies if oneDNN fails. */
void retr_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                int64_t ldb, float *c, int64_t ldc);
void pca_free(pca_model *p);

/* ---- evaluate.c --------------------------------------------------------------------------- */

/* compute_ap / score_ap_from_ranks_1: the trapezoidal AP of zero-based ranks of the positives
 * (ascending), nres positives in all. */
double retr_ap_from_ranks(const int64_t *ranks, size_t n, size_t nres);

/* For each query q, db indices by descending sim[q][·] (ties: lower index first): ranks is
 * nq × ndb. */
void retr_rank(const float *sim, size_t nq, size_t ndb, int64_t *ranks);

/* One query's ground truth: database indices of positives and of junk. */
typedef struct {
    const int64_t *ok, *junk;
    size_t n_ok, n_junk;
} retr_gnd;

#define RETR_KAPPAS 3 /* k = 1, 5, 10 */
extern const int retr_kappas[RETR_KAPPAS];

/* revisitop's compute_map over nq queries (ranks nq × ndb as retr_rank gives them): junk
 * positions removed, queries without positives left out. map and mpk[k] (fractions) are NaN
 * when every query is left out; aps (nq, may be NULL) gets each AP (NaN when left out). */
void retr_compute_map(const int64_t *ranks, size_t nq, size_t ndb, const retr_gnd *gnd, double *map,
                      double mpk[RETR_KAPPAS], double *aps);

/* compute_ap.cpp (the classic Oxford/Paris scorer): one query's AP over its ranked database,
 * `positive[i]` / `junk[i]` flags by database index, in compute_ap.cpp's float arithmetic. */
double retr_oxford_ap(const int64_t *ranked, size_t ndb, const bool *positive, const bool *junk, size_t n_pos);

/* ---- datasets.c --------------------------------------------------------------------------- */

typedef enum { RETR_CLASSIC, RETR_REVISITED, RETR_WHITENING } retr_kind;

/* A dataset: the database images, and for the evaluated ones the queries with their regions of
 * interest and ground truth. Revisited: DIR/NAME/gnd_NAME.pkl (imlist, qimlist, gnd[i] with bbx,
 * easy, hard, junk) and DIR/NAME/jpg/. Classic (Oxford, Paris): DIR/NAME/jpg/ (*.jpg) and
 * DIR/NAME/lab/Q_query.txt, Q_good.txt, Q_ok.txt, Q_junk.txt, Paris's corrupt images left out as
 * VISSL leaves them out. Whitening: DIR/NAME plus an image list file. */
typedef struct {
    retr_kind kind;
    char *name;
    char **images;    /* database image paths */
    size_t n_images;
    char **queries;   /* query image paths */
    char **qnames;    /* query names (classic: the label file's; revisited: the image's) */
    float (*roi)[4];  /* xmin, ymin, xmax, ymax per query */
    size_t n_queries;
    /* revisited: per query, easy, hard and junk database indices */
    int64_t **easy, **hard, **junk;
    size_t *n_easy, *n_hard, *n_junk;
    /* classic: per query, flags over the database (positives = good ∪ ok) */
    bool **positive, **cjunk;
    size_t *n_positive;
} retr_dataset;

bool retr_is_revisited(const char *name);
/* Load dataset `name` under `root` (whitening: `image_list` names the images, one per line,
 * relative to root/name). 0, or -1 with *err naming the file and the fault. */
int retr_dataset_load(const char *root, const char *name, const char *image_list, retr_dataset *d, char **err);
/* Keep the first n database images / queries (n < 0: all). Classic ground truth is by index,
 * so the database limit only shortens what is ranked, as VISSL's num_samples does. */
void retr_dataset_limit(retr_dataset *d, long long n_images, long long n_queries);
void retr_dataset_free(retr_dataset *d);
/* A revisited dataset's gnd pickle in memory (`name` for messages, `jpg` the image folder)
 * into d (zeroed; free it with retr_dataset_free either way). For retr_dataset_load and the
 * fuzz target. */
int retr_gnd_parse(const void *buf, size_t len, const char *name, const char *jpg, retr_dataset *d, char **err);

/* ---- image.c ------------------------------------------------------------------------------ */

/* How an image is prepared (InstanceRetrievalImageLoader): resize_s > 0 resizes the longer side
 * to it (PIL bilinear, sizes rounded half to even), -1 keeps the size, -2 resizes to 1024 above
 * 124 pixels; no_resize skips the step (the whitening images, which the tool does not resize);
 * roi (may be NULL) crops the normalised tensor at the box scaled by the same ratio (the classic
 * queries). Then ToTensor and ImageNet's Normalize. */
typedef struct {
    float *chw; /* 3 × h × w */
    int h, w;
} retr_image;

struct decode_ctx;

/* 0, or -1 with *err (unreadable, not an image, an empty crop). ctx: the decoder's context
 * (decoder.h), reused from image to image. */
int retr_image_load(struct decode_ctx *ctx, const char *path, int resize_s, bool no_resize, const float *roi,
                    retr_image *out, char **err);
void retr_image_free(retr_image *im);

/* ---- describe.c --------------------------------------------------------------------------- */

typedef enum { RETR_FEATS_RAW, RETR_FEATS_RMAC, RETR_FEATS_GEM, RETR_FEATS_L2 } retr_feats;

struct eng_backend;
struct model;

/* The trunk and what is made of its map: the tool's FEATS_PROCESSING_TYPE ("", rmac, gem,
 * l2_norm), SPATIAL_LEVELS, GEM_POOL_POWER. */
typedef struct {
    struct eng_backend *be;
    struct model *m;
    retr_feats type;
    int levels;
    double gem_p;
    struct decode_ctx *decoder; /* made at the first image, freed by retr_describer_free */
    float *map; /* the last image's first model output, C × H × W (or its flattened D × 1 × 1) */
    int C, H, W;
    size_t cap;
} retr_describer;

/* One image file, prepared (retr_image_load's arguments), through the model in eval mode
 * (planned for its size): the map. 0, or -1 with *err (the image's, or rmac and gem given a
 * flattened feature instead of a map). */
int retr_forward_file(retr_describer *d, const char *path, int resize_s, bool no_resize, const float *roi,
                      char **err);
/* The decoder context and the map (not the model or the backend, which the caller owns). */
void retr_describer_free(retr_describer *d);
/* The rows the PCA learns from (rmac: the regions' vectors; gem: the pooled vector), *n of
 * width *width, malloc'd. */
float *retr_training_rows(const retr_describer *d, int *n, int *width);
/* The image's descriptor (pca may be NULL), malloc'd, *width wide. */
float *retr_descriptor(const retr_describer *d, const pca_model *pca, int *width);

#endif
