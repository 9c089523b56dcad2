/*
 * datasets.c — the retrieval datasets' ground truth, read as data_util.py reads it.
 *
 * Revisited Oxford/Paris (roxford5k, rparis6k): NAME/gnd_NAME.pkl, a pickle of {"imlist",
 * "qimlist", "gnd": [{"bbx", "easy", "hard", "junk"}]}, read by the restricted unpickler of
 * torchfile.h (lists of str and int; nothing else is allowed to run). Images are NAME/jpg/X.jpg.
 *
 * Classic Oxford/Paris (any other name): the database is NAME/jpg's files in sorted order, each
 * name's last four characters dropped, Paris's twenty corrupt images left out; every
 * lab/Q_query.txt (in sorted order) is a query "IMAGE x0 y0 x1 y1" ("oxc1_" dropped from the
 * image), with Q_good.txt, Q_ok.txt and Q_junk.txt. compute_ap.cpp counts as positives the
 * names in good ∪ ok, whether or not the database holds them; flags mark those it holds.
 *
 * Whitening: NAME/LINE for every line of the image list.
 */
#include "retrieval/retrieval.h"
#include "torchfile.h"
#include "util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX_BYTES ((size_t)256 << 20)

/* Paris's corrupt images (robots.ox.ac.uk/~vgg/data/parisbuildings/corrupt.txt), which VISSL skips. */
static const char *const PARIS_CORRUPT[] = {
    "paris_louvre_000136",     "paris_louvre_000146",     "paris_moulinrouge_000422", "paris_museedorsay_001059",
    "paris_notredame_000188",  "paris_pantheon_000284",   "paris_pantheon_000960",    "paris_pantheon_000974",
    "paris_pompidou_000195",   "paris_pompidou_000196",   "paris_pompidou_000201",    "paris_pompidou_000467",
    "paris_pompidou_000640",   "paris_sacrecoeur_000299", "paris_sacrecoeur_000330",  "paris_sacrecoeur_000353",
    "paris_triomphe_000662",   "paris_triomphe_000833",   "paris_triomphe_000863",    "paris_triomphe_000867",
};

bool retr_is_revisited(const char *name)
{
    return !strcmp(name, "roxford5k") || !strcmp(name, "rparis6k");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool in_sorted(char *const *names, size_t n, const char *s)
{
    return n && bsearch(&s, names, n, sizeof *names, cmp_str) != NULL;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

/* A folder's entries (not . and ..), sorted. NULL with *err when it cannot be read. */
static char **list_dir(const char *dir, size_t *n, char **err)
{
    DIR *d = opendir(dir);
    if (!d)
        return report_failure(err, "%s: cannot read the folder", dir), NULL;
    char **names = NULL;
    size_t cap = 0;
    *n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (*n == cap)
            names = xrealloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[(*n)++] = xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, *n, sizeof *names, cmp_str);
    return names;
}

/* A text file's lines, whitespace stripped at both ends, empty ones skipped. */
static char **read_lines(const char *path, size_t *n, char **err)
{
    size_t len;
    char *text = read_regular_file(path, LIST_MAX_BYTES, &len, err);
    if (!text)
        return NULL;
    char **lines = NULL;
    *n = 0;
    for (char *save = NULL, *line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        while (*line == ' ' || *line == '\t')
            line++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == ' ' || line[l - 1] == '\t'))
            l--;
        if (!l)
            continue;
        lines = xrealloc(lines, (*n + 1) * sizeof *lines);
        lines[(*n)++] = xstrndup(line, l);
    }
    free(text);
    return lines;
}

/* ---- revisited ------------------------------------------------------------------------------- */

static bool str_list(const tf_value *v, char ***out, size_t *n)
{
    if (!v || (v->kind != TF_LIST && v->kind != TF_TUPLE))
        return false;
    *out = xcalloc(v->u.seq.n + 1, sizeof **out);
    for (*n = 0; *n < v->u.seq.n; (*n)++) {
        if (v->u.seq.items[*n]->kind != TF_STR)
            return false;
        (*out)[*n] = xstrdup(v->u.seq.items[*n]->u.str.s);
    }
    return true;
}

static bool int_list(const tf_value *v, int64_t **out, size_t *n)
{
    if (!v || (v->kind != TF_LIST && v->kind != TF_TUPLE))
        return false;
    *out = xcalloc(v->u.seq.n + 1, sizeof **out);
    for (*n = 0; *n < v->u.seq.n; (*n)++) {
        if (v->u.seq.items[*n]->kind != TF_INT)
            return false;
        (*out)[*n] = v->u.seq.items[*n]->u.i;
    }
    return true;
}

/* gnd[q]'s easy, hard and junk lists; the name of the first that is missing or not ints. */
static const char *read_gnd_entry(const tf_value *g, retr_dataset *d, size_t q)
{
    if (!g || g->kind != TF_DICT)
        return "gnd entry";
    if (!int_list(tf_dict_get(g, "easy"), &d->easy[q], &d->n_easy[q]))
        return "easy";
    if (!int_list(tf_dict_get(g, "hard"), &d->hard[q], &d->n_hard[q]))
        return "hard";
    if (!int_list(tf_dict_get(g, "junk"), &d->junk[q], &d->n_junk[q]))
        return "junk";
    return NULL;
}

static char **image_paths(const char *dir, char *const *names, size_t n)
{
    char **paths = xcalloc(n + 1, sizeof *paths);
    for (size_t i = 0; i < n; i++)
        paths[i] = xasprintf("%s/%s.jpg", dir, names[i]);
    return paths;
}

static int read_revisited(const char *file, const tf_value *root, const char *jpg, retr_dataset *d, char **err)
{
    char **im = NULL, **qim = NULL;
    size_t nim = 0, nqim = 0;
    const tf_value *gnd = tf_dict_get(root, "gnd");
    int rc = 0;
    if (!str_list(tf_dict_get(root, "imlist"), &im, &nim) || !str_list(tf_dict_get(root, "qimlist"), &qim, &nqim))
        rc = report_failure(err, "%s: imlist and qimlist must be lists of names", file);
    else if (!gnd || gnd->kind != TF_LIST || gnd->u.seq.n != nqim)
        rc = report_failure(err, "%s: gnd must be a list with one entry per query (%zu)", file, nqim);
    if (rc == 0) {
        d->images = image_paths(jpg, im, nim);
        d->queries = image_paths(jpg, qim, nqim);
        d->qnames = qim;
        qim = NULL;
        d->n_images = nim;
        d->n_queries = nqim;
        d->easy = xcalloc(nqim + 1, sizeof *d->easy);
        d->hard = xcalloc(nqim + 1, sizeof *d->hard);
        d->junk = xcalloc(nqim + 1, sizeof *d->junk);
        d->n_easy = xcalloc(nqim + 1, sizeof *d->n_easy);
        d->n_hard = xcalloc(nqim + 1, sizeof *d->n_hard);
        d->n_junk = xcalloc(nqim + 1, sizeof *d->n_junk);
    }
    for (size_t q = 0; rc == 0 && q < nqim; q++) {
        const char *bad = read_gnd_entry(gnd->u.seq.items[q], d, q);
        if (bad)
            rc = report_failure(err, "%s: gnd[%zu]: %s must be a dict of lists of database indices", file, q, bad);
    }
    free_names(im, nim);
    free_names(qim, nqim);
    return rc;
}

int retr_gnd_parse(const void *buf, size_t len, const char *name, const char *jpg, retr_dataset *d, char **err)
{
    torchfile *f = NULL;
    int rc = torchfile_unpickle(buf, len, name, &f, err);
    if (rc == 0)
        rc = read_revisited(name, torchfile_root(f), jpg, d, err);
    torchfile_close(f);
    return rc;
}

static int load_revisited(const char *root, const char *name, retr_dataset *d, char **err)
{
    char *file = xasprintf("%s/%s/gnd_%s.pkl", root, name, name), *jpg = xasprintf("%s/%s/jpg", root, name);
    size_t len;
    char *buf = read_regular_file(file, LIST_MAX_BYTES, &len, err);
    int rc = buf ? retr_gnd_parse(buf, len, file, jpg, d, err) : -1;
    free(buf);
    free(file);
    free(jpg);
    return rc;
}

/* ---- classic --------------------------------------------------------------------------------- */

static bool paris_corrupt(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(PARIS_CORRUPT); i++)
        if (!strcmp(name, PARIS_CORRUPT[i]))
            return true;
    return false;
}

/* jpg/'s names without their last four characters, sorted, corrupt ones left out. */
static char **classic_images(const char *jpg, size_t *n, char **err)
{
    size_t nfiles;
    char **files = list_dir(jpg, &nfiles, err);
    if (!files)
        return NULL;
    char **names = xcalloc(nfiles + 1, sizeof *names);
    *n = 0;
    for (size_t i = 0; i < nfiles; i++) {
        size_t l = strlen(files[i]);
        char *stem = xstrndup(files[i], l > 4 ? l - 4 : 0);
        if (paris_corrupt(stem))
            free(stem);
        else
            names[(*n)++] = stem;
    }
    free_names(files, nfiles);
    return names;
}

/* Q_SUFFIX.txt's names, sorted (for lookups), into *out. */
static int label_set(const char *lab, const char *q, const char *suffix, char ***out, size_t *n, char **err)
{
    char *path = xasprintf("%s/%s_%s.txt", lab, q, suffix);
    *out = read_lines(path, n, err);
    free(path);
    if (!*out && *err)
        return -1;
    if (*n)
        qsort(*out, *n, sizeof **out, cmp_str);
    return 0;
}

/* Sorted names without repeats: how many stay. */
static size_t dedupe(char **names, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && !strcmp(names[k - 1], names[i])) {
            free(names[i]);
            continue;
        }
        names[k++] = names[i];
    }
    return k;
}

/* good ∪ ok and junk of query q as flags over the database. */
static int classic_truth(const char *lab, const char *q, char *const *db, size_t ndb, retr_dataset *d, size_t k,
                         char **err)
{
    char **good = NULL, **ok = NULL, **junk = NULL;
    size_t ngood = 0, nok = 0, njunk = 0;
    int rc = label_set(lab, q, "good", &good, &ngood, err);
    if (rc == 0)
        rc = label_set(lab, q, "ok", &ok, &nok, err);
    if (rc == 0)
        rc = label_set(lab, q, "junk", &junk, &njunk, err);
    if (rc == 0) {
        good = xrealloc(good, (ngood + nok + 1) * sizeof *good);
        memcpy(good + ngood, ok, nok * sizeof *ok);
        ngood += nok;
        nok = 0;
        qsort(good, ngood, sizeof *good, cmp_str);
        ngood = dedupe(good, ngood);
        d->positive[k] = xcalloc(ndb + 1, sizeof **d->positive);
        d->cjunk[k] = xcalloc(ndb + 1, sizeof **d->cjunk);
        d->n_positive[k] = ngood;
        for (size_t i = 0; i < ndb; i++) {
            d->positive[k][i] = in_sorted(good, ngood, db[i]);
            d->cjunk[k][i] = in_sorted(junk, njunk, db[i]);
        }
    }
    free_names(good, ngood);
    free(ok);
    free_names(junk, njunk);
    return rc;
}

/* "IMAGE x0 y0 x1 y1": the database index of IMAGE and the region. */
static int classic_query(const char *path, char *const *db, size_t ndb, size_t *index, float roi[4], char **err)
{
    size_t n;
    char **lines = read_lines(path, &n, err);
    if (!lines)
        return -1;
    char image[512];
    int got = n ? sscanf(lines[0], "%511s %f %f %f %f", image, &roi[0], &roi[1], &roi[2], &roi[3]) : 0;
    free_names(lines, n);
    if (got != 5)
        return report_failure(err, "%s: the first line must be \"IMAGE xmin ymin xmax ymax\"", path);
    const char *want = strncmp(image, "oxc1_", 5) ? image : image + 5;
    for (*index = 0; *index < ndb; (*index)++)
        if (!strcmp(db[*index], want))
            return 0;
    return report_failure(err, "%s: the query image %s is not in the database", path, want);
}

static void classic_alloc(retr_dataset *d, size_t nq)
{
    d->queries = xcalloc(nq + 1, sizeof *d->queries);
    d->qnames = xcalloc(nq + 1, sizeof *d->qnames);
    d->roi = xcalloc(nq + 1, sizeof *d->roi);
    d->positive = xcalloc(nq + 1, sizeof *d->positive);
    d->cjunk = xcalloc(nq + 1, sizeof *d->cjunk);
    d->n_positive = xcalloc(nq + 1, sizeof *d->n_positive);
}

static int classic_queries(const char *lab, const char *jpg, char *const *db, size_t ndb, retr_dataset *d, char **err)
{
    size_t nfiles;
    char **files = list_dir(lab, &nfiles, err);
    if (!files)
        return -1;
    classic_alloc(d, nfiles);
    int rc = 0;
    const char *suffix = "_query.txt";
    for (size_t i = 0; i < nfiles && rc == 0; i++) {
        size_t l = strlen(files[i]), ls = strlen(suffix);
        if (l < ls || strcmp(files[i] + l - ls, suffix))
            continue;
        size_t k = d->n_queries++, index;
        d->qnames[k] = xstrndup(files[i], l - ls);
        char *path = path_join(lab, files[i]);
        rc = classic_query(path, db, ndb, &index, d->roi[k], err);
        free(path);
        if (rc == 0) {
            d->queries[k] = xasprintf("%s/%s.jpg", jpg, db[index]);
            rc = classic_truth(lab, d->qnames[k], db, ndb, d, k, err);
        }
    }
    free_names(files, nfiles);
    return rc;
}

static int load_classic(const char *root, const char *name, retr_dataset *d, char **err)
{
    char *jpg = xasprintf("%s/%s/jpg", root, name), *lab = xasprintf("%s/%s/lab", root, name);
    size_t ndb = 0;
    char **db = classic_images(jpg, &ndb, err);
    int rc = db ? 0 : -1;
    if (rc == 0) {
        rc = classic_queries(lab, jpg, db, ndb, d, err);
        d->images = image_paths(jpg, db, ndb);
        d->n_images = ndb;
    }
    free_names(db, ndb);
    free(jpg);
    free(lab);
    return rc;
}

/* ---- whitening ------------------------------------------------------------------------------- */

static int load_whitening(const char *root, const char *name, const char *list, retr_dataset *d, char **err)
{
    if (!list || !*list)
        return report_failure(err, "the whitening dataset needs config.IMG_RETRIEVAL.WHITEN_IMG_LIST");
    size_t n;
    char **lines = read_lines(list, &n, err);
    if (!lines && *err)
        return -1;
    d->images = xcalloc(n + 1, sizeof *d->images);
    for (size_t i = 0; i < n; i++)
        d->images[i] = xasprintf("%s/%s/%s", root, name, lines[i]);
    d->n_images = n;
    free_names(lines, n);
    return 0;
}

int retr_dataset_load(const char *root, const char *name, const char *image_list, retr_dataset *d, char **err)
{
    memset(d, 0, sizeof *d);
    d->name = xstrdup(name);
    *err = NULL;
    int rc;
    if (retr_is_revisited(name))
        rc = (d->kind = RETR_REVISITED, load_revisited(root, name, d, err));
    else if (!strcmp(name, "whitening"))
        rc = (d->kind = RETR_WHITENING, load_whitening(root, name, image_list, d, err));
    else
        rc = (d->kind = RETR_CLASSIC, load_classic(root, name, d, err));
    if (rc)
        retr_dataset_free(d);
    return rc;
}

void retr_dataset_limit(retr_dataset *d, long long n_images, long long n_queries)
{
    if (n_images >= 0 && (size_t)n_images < d->n_images)
        d->n_images = (size_t)n_images; /* the paths past it are still freed: the arrays end in NULL */
    if (n_queries >= 0 && (size_t)n_queries < d->n_queries)
        d->n_queries = (size_t)n_queries;
}

static void free_rows(void **rows)
{
    for (size_t i = 0; rows && rows[i]; i++)
        free(rows[i]);
    free(rows);
}

void retr_dataset_free(retr_dataset *d)
{
    free_rows((void **)d->images);
    free_rows((void **)d->queries);
    free_rows((void **)d->qnames);
    free_rows((void **)d->easy);
    free_rows((void **)d->hard);
    free_rows((void **)d->junk);
    free_rows((void **)d->positive);
    free_rows((void **)d->cjunk);
    free(d->roi);
    free(d->n_easy);
    free(d->n_hard);
    free(d->n_junk);
    free(d->n_positive);
    free(d->name);
    memset(d, 0, sizeof *d);
}
