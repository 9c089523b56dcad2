/*
 * cmd_dataset.c — `selfsup dataset NAME DIR`: write a dataset that a Debian package ships in
 * VISSL's layouts, so that real data is at hand on a machine with no internet.
 *
 *   selfsup dataset fashion-mnist DIR [--limit N] [--force] [--from SRC]
 *   selfsup dataset voc2007|voc2012 SRC DST [...]  (cmd_dataset_voc.c)
 *   selfsup dataset coco2014 ANNOTATIONS DST [...] (cmd_dataset_coco.c)
 *   selfsup dataset imagenet SRC DST [...]         (cmd_dataset_imagenet.c)
 *   selfsup dataset inaturalist2018 SRC DST        (cmd_dataset_inat.c)
 *   selfsup dataset jigsaw-perms N K OUT [...]     (cmd_jigsaw.c)
 *   selfsup dataset low-shot TARGETS OUT [...]     (cmd_lowshot.c)
 *
 * reads the IDX files of Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
 * gzip-compressed or not) and writes
 *
 *   DIR/disk_folder/{train,val}/CLASS/NNNNN.png   torchvision ImageFolder layout; 28x28 8-bit
 *                                                  grayscale PNGs, NNNNN = index in the IDX file
 *   DIR/disk_filelist/{train,val}_images.npy       numpy '<U' array of the PNGs' absolute paths
 *   DIR/disk_filelist/{train,val}_labels.npy       int64 labels, in IDX order
 *   DIR/dataset_catalog.json                       fashion_mnist_folder and fashion_mnist_filelist
 *                                                  entries pointing at the above (absolute paths)
 *   DIR/.complete                                  written last: the conversion is whole
 *
 * "val" is Fashion-MNIST's test set (t10k): VISSL's TEST split reads a catalog entry's "val".
 * CLASS is the class name prefixed by its label ("0_tshirt_top" ... "9_ankle_boot"), so that
 * ImageFolder's sorted class order is the label order.
 *
 * Interruption: .complete is removed before anything is written and written (atomically, after
 * a syncfs) only once every file is in place, so a killed run is never mistaken for a whole one;
 * the next run converts again. A run that finds .complete for the same conversion says so
 * and exits 0 (--force converts again). Converting again rewrites only the PNGs whose bytes
 * differ (a truncated one, say) and removes those of an earlier, larger conversion.
 *
 * zlib: the IDX files are gzip files, read with zlib's gzopen/gzread (which read uncompressed
 * files too).
 *
 * PNGs are encoded in memory with libpng and written with one write() each, by one thread per
 * online CPU (at most 16).
 *
 * Exit codes: 0 done (or already done), 1 runtime failure (package files missing, write
 * errors), 2 usage errors (unknown dataset name, bad options).
 */
#include "cmd.h"
#include "dataset_files.h"

#include "atomic_file.h"
#include "log.h"
#include "npy.h"
#include "util.h"

#include <dirent.h>
#include <zlib.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FMNIST_DEFAULT_SRC "/usr/share/datasets/fashion-mnist"
#define FMNIST_CLASSES 10
#define FMNIST_SIDE 28
#define MAX_THREADS 16

static const char *const FMNIST_CLASS_DIRS[FMNIST_CLASSES] = {
    "0_tshirt_top", "1_trouser", "2_pullover", "3_dress",   "4_coat",
    "5_sandal",     "6_shirt",   "7_sneaker",  "8_bag",     "9_ankle_boot",
};

static void dataset_usage(FILE *out)
{
    fputs("usage: selfsup dataset NAME DIR [options]\n"
          "\n"
          "Write a dataset shipped by a Debian package in VISSL's layouts under DIR.\n"
          "\n"
          "datasets:\n"
          "  fashion-mnist   from dataset-fashion-mnist (apt-get install dataset-fashion-mnist):\n"
          "                  DIR/disk_folder/{train,val}/CLASS/NNNNN.png (28x28 grayscale),\n"
          "                  DIR/disk_filelist/{train,val}_{images,labels}.npy and\n"
          "                  DIR/dataset_catalog.json with the fashion_mnist_folder and\n"
          "                  fashion_mnist_filelist entries; val is the test set (10,000 images)\n"
          "\n"
          "options:\n"
          "  --limit N    convert only the first N images of each split\n"
          "  --force      convert again even if DIR holds a complete conversion\n"
          "  --from SRC   read the IDX files from SRC (default " FMNIST_DEFAULT_SRC ")\n"
          "  --help       show this help\n"
          "\n"
          "Also: selfsup dataset voc2007|voc2012 SRC DST [--separate-partitions] [--generate-json]\n"
          "  (VISSL's VOC data files from a VOCdevkit folder, as create_voc_data_files.py; --help there)\n"
          "      selfsup dataset imagenet SRC DST [--generate-json] [--listdir-order]\n"
          "  (an ImageNet-style folder's file lists, as create_imagenet_data_files.py; --help there)\n"
          "      selfsup dataset inaturalist2018 SRC DST\n"
          "  (iNaturalist 2018's file lists, as create_inaturalist2018_data_files.py)\n"
          "      selfsup dataset coco2014 ANNOTATIONS DST --train-images DIR --val-images DIR\n"
          "  (COCO's multi-label data files, as create_coco_data_files.py; --help there)\n"
          "      selfsup dataset jigsaw-perms N K OUT [--method max_avg|max_min] [--first J | --seed S]\n"
          "  (Jigsaw's permutation set, as VISSL's generate_jigsaw_permutations.py; --help there)\n"
          "      selfsup dataset low-shot TARGETS OUT --dataset voc|places [--layer NAME] [--images FILE]\n"
          "  (the low-shot SVM's samples, as create_low_shot_samples.py; --help there)\n",
          out);
}

/* Read a whole (gzip-compressed or plain) file into memory. */
static uint8_t *gz_read_all(const char *path, size_t *len, char **err)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        report_failure(err, "%s: cannot open: %s", path, strerror(errno ? errno : ENOMEM));
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = xmalloc(cap);
    for (;;) {
        if (cap - n < (1 << 20))
            buf = xrealloc(buf, cap *= 2);
        int got = gzread(f, buf + n, (unsigned)(cap - n < (1u << 30) ? cap - n : (1u << 30)));
        if (got < 0) {
            int code;
            report_failure(err, "%s: cannot decompress: %s", path, gzerror(f, &code));
            gzclose(f);
            free(buf);
            return NULL;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    gzclose(f);
    *len = n;
    return buf;
}

/* ---- IDX files -------------------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct {
    size_t count;
    uint8_t *images_file; /* whole IDX image file; pixels at +16 */
    uint8_t *labels_file; /* whole IDX label file; labels at +8 */
} idx_split;

/* SRC/NAME.gz, else SRC/NAME (malloc'd), or NULL if neither exists. */
static char *find_source(const char *src, const char *name)
{
    char *gzname = xasprintf("%s/%s.gz", src, name);
    if (path_exists(gzname))
        return gzname;
    free(gzname);
    char *plain = xasprintf("%s/%s", src, name);
    if (path_exists(plain))
        return plain;
    free(plain);
    return NULL;
}

static int idx_load(const char *src, const char *prefix, idx_split *s, char **err)
{
    char *iname = xasprintf("%s-images-idx3-ubyte", prefix), *lname = xasprintf("%s-labels-idx1-ubyte", prefix);
    char *ipath = find_source(src, iname), *lpath = find_source(src, lname);
    int rc = -1;
    size_t ilen = 0, llen = 0;
    *s = (idx_split){0};
    if (!ipath || !lpath) {
        report_failure(err, "%s/%s.gz not found; install Debian's Fashion-MNIST with "
                            "'apt-get install dataset-fashion-mnist'", src, ipath ? lname : iname);
        goto out;
    }
    if (!(s->images_file = gz_read_all(ipath, &ilen, err)) || !(s->labels_file = gz_read_all(lpath, &llen, err)))
        goto out;
    if (ilen < 16 || be32(s->images_file) != 0x803) {
        report_failure(err, "%s: not an IDX file of 3-d uint8 arrays (magic 0x00000803)", ipath);
        goto out;
    }
    if (llen < 8 || be32(s->labels_file) != 0x801) {
        report_failure(err, "%s: not an IDX file of 1-d uint8 arrays (magic 0x00000801)", lpath);
        goto out;
    }
    size_t n = be32(s->images_file + 4), h = be32(s->images_file + 8), w = be32(s->images_file + 12);
    if (h != FMNIST_SIDE || w != FMNIST_SIDE) {
        report_failure(err, "%s: images are %zux%zu, expected %dx%d", ipath, h, w, FMNIST_SIDE, FMNIST_SIDE);
        goto out;
    }
    if (ilen != 16 + n * h * w) {
        report_failure(err, "%s: %zu bytes, expected %zu for %zu images (truncated or corrupt)", ipath, ilen,
                       16 + n * h * w, n);
        goto out;
    }
    if (be32(s->labels_file + 4) != n || llen != 8 + n) {
        report_failure(err, "%s: holds %u labels in %zu bytes, expected %zu labels (one per image of %s)", lpath,
                       be32(s->labels_file + 4), llen, n, ipath);
        goto out;
    }
    for (size_t k = 0; k < n; k++)
        if (s->labels_file[8 + k] >= FMNIST_CLASSES) {
            report_failure(err, "%s: label %u of image %zu is out of range 0..9", lpath, s->labels_file[8 + k], k);
            goto out;
        }
    s->count = n;
    rc = 0;
out:
    if (rc < 0) {
        free(s->images_file);
        free(s->labels_file);
        *s = (idx_split){0};
    }
    free(iname);
    free(lname);
    free(ipath);
    free(lpath);
    return rc;
}

/* ---- PNG encoding ----------------------------------------------------------------------- */

typedef struct {
    uint8_t *buf;
    size_t len, cap;
} membuf;

static void png_mem_write(png_structp png, png_bytep data, png_size_t n)
{
    membuf *m = png_get_io_ptr(png);
    if (m->len + n > m->cap) {
        while (m->len + n > m->cap)
            m->cap = m->cap ? m->cap * 2 : 4096;
        m->buf = xrealloc(m->buf, m->cap);
    }
    memcpy(m->buf + m->len, data, n);
    m->len += n;
}

static void png_mem_flush(png_structp png)
{
    (void)png;
}

/* Encode a side x side 8-bit grayscale image into m (m->len reset). */
static int png_encode_gray(membuf *m, const uint8_t *pixels, int side)
{
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    if (!png)
        return -1;
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return -1;
    }
    m->len = 0;
    png_set_write_fn(png, m, png_mem_write, png_mem_flush);
    png_set_IHDR(png, info, (png_uint_32)side, (png_uint_32)side, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < side; y++)
        png_write_row(png, (png_const_bytep)(pixels + (size_t)y * (size_t)side));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

static int pwrite_fully(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    off_t off = 0;
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        off += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Make `path` hold exactly buf[0..n): a file that already does is left untouched (a rerun
 * after an interruption, or --force, rewrites only what differs). `scratch` holds n + 1 bytes. */
static int write_if_changed(const char *path, const void *buf, size_t n, uint8_t *scratch)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    ssize_t got = pread(fd, scratch, n + 1, 0);
    if (got == (ssize_t)n && !memcmp(scratch, buf, n))
        return close(fd);
    if ((got > 0 && ftruncate(fd, 0) < 0) || pwrite_fully(fd, buf, n) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return close(fd);
}

/* ---- the work: one job per split, shared by the threads --------------------------------- */

typedef struct {
    const idx_split *split;
    size_t count;       /* images to write */
    const char *folder; /* DIR/disk_folder/SPLIT */
} split_job;

typedef struct {
    split_job jobs[2];
    size_t total; /* jobs[0].count + jobs[1].count */
    size_t next;  /* atomic: next global image index to take */
    pthread_mutex_t lock;
    char *error; /* first error, under lock */
} work;

static void work_fail(work *w, char *msg)
{
    pthread_mutex_lock(&w->lock);
    if (!w->error)
        __atomic_store_n(&w->error, msg, __ATOMIC_RELAXED); /* workers poll it unlocked */
    else
        free(msg);
    pthread_mutex_unlock(&w->lock);
}

#define CHUNK 256

static void *png_worker(void *arg)
{
    work *w = arg;
    membuf m = {0};
    uint8_t *scratch = NULL;
    size_t scratch_len = 0;
    char path[PATH_MAX];
    for (;;) {
        size_t begin = __atomic_fetch_add(&w->next, CHUNK, __ATOMIC_RELAXED);
        if (begin >= w->total || __atomic_load_n(&w->error, __ATOMIC_RELAXED))
            break;
        size_t end = begin + CHUNK < w->total ? begin + CHUNK : w->total;
        for (size_t g = begin; g < end; g++) {
            const split_job *j = g < w->jobs[0].count ? &w->jobs[0] : &w->jobs[1];
            size_t k = g < w->jobs[0].count ? g : g - w->jobs[0].count;
            const uint8_t *pixels = j->split->images_file + 16 + k * FMNIST_SIDE * FMNIST_SIDE;
            unsigned label = j->split->labels_file[8 + k];
            int n = snprintf(path, sizeof path, "%s/%s/%05zu.png", j->folder, FMNIST_CLASS_DIRS[label], k);
            if (n < 0 || (size_t)n >= sizeof path) {
                work_fail(w, xasprintf("%s/...: path too long", j->folder));
                goto done;
            }
            if (png_encode_gray(&m, pixels, FMNIST_SIDE) < 0) {
                work_fail(w, xasprintf("%s: libpng could not encode the image", path));
                goto done;
            }
            if (m.len + 1 > scratch_len)
                scratch = xrealloc(scratch, scratch_len = m.cap + 1);
            if (write_if_changed(path, m.buf, m.len, scratch) < 0) {
                work_fail(w, xasprintf("%s: cannot write: %s", path, strerror(errno)));
                goto done;
            }
        }
    }
done:
    free(m.buf);
    free(scratch);
    return NULL;
}

/* ---- file helpers ----------------------------------------------------------------------- */

static int make_dir(const char *path, char **err) { return make_dirs(path, 0777, err); }

/* Remove what an earlier run left in class folder `cls` of a split and this run will not
 * write: NNNNN.png files whose index is past `count` or whose label is another class. Files
 * this run writes are kept, to be compared and rewritten only if they differ (see
 * write_if_changed): unlinking tens of thousands of files and creating them again right
 * away is slow on ext4 (freed inodes and blocks are not reused before a journal commit).
 * Other files are left alone. */
static int remove_stale_pngs(const char *dir, const idx_split *split, size_t count, unsigned cls, char **err)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : report_failure(err, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        size_t len = strlen(name), digits = strspn(name, "0123456789");
        if (digits < 5 || len != digits + 4 || strcmp(name + digits, ".png"))
            continue;
        errno = 0;
        unsigned long long k = strtoull(name, NULL, 10);
        if (!errno && digits == 5 && k < count && split->labels_file[8 + k] == cls)
            continue; /* ours: NNNNN with 5 digits, as this run names it */
        if (unlinkat(dirfd(d), name, 0) < 0 && errno != ENOENT) {
            rc = report_failure(err, "%s/%s: cannot remove: %s", dir, name, strerror(errno));
            break;
        }
    }
    closedir(d);
    return rc;
}

/* ---- fashion-mnist ---------------------------------------------------------------------- */

static const char *const SPLITS[2] = {"train", "val"};
static const char *const IDX_PREFIX[2] = {"train", "t10k"};

static int convert_fashion_mnist(const char *dir_arg, const char *src, size_t limit, bool force)
{
    char *err = NULL;
    int rc = EXIT_RUNTIME;
    idx_split idx[2] = {{0}};
    char *dir = NULL, *marker = NULL, *want = NULL, *folder[2] = {0}, *filelist = NULL, *catalog = NULL;
    strbuf marker_text = {0};
    char **paths[2] = {0};
    int64_t *labels[2] = {0};
    size_t count[2] = {0};

    /* the marker's first line says what was converted; the rest, how many images */
    char limit_text[32] = "all";
    if (limit)
        snprintf(limit_text, sizeof limit_text, "%zu", limit);
    want = xasprintf("selfsup dataset fashion-mnist limit=%s\n", limit_text);
    marker = path_join(dir_arg, ".complete");
    if (!force && path_exists(marker)) {
        size_t len;
        char *have = read_whole_file(marker, &len);
        bool same = have && !strncmp(have, want, strlen(want));
        if (same) {
            size_t ntrain = 0, nval = 0;
            sscanf(have + strlen(want), "train %zu val %zu", &ntrain, &nval);
            log_info("%s: already converted (train %zu, val %zu images); "
                     "--force converts again",
                     dir_arg, ntrain, nval);
            free(have);
            rc = 0;
            goto out;
        }
        free(have);
        log_info("%s holds a different conversion; converting again", dir_arg);
    }
    free(marker);
    marker = NULL;

    for (int s = 0; s < 2; s++)
        if (idx_load(src, IDX_PREFIX[s], &idx[s], &err) < 0)
            goto fail;
    for (int s = 0; s < 2; s++)
        count[s] = limit && limit < idx[s].count ? limit : idx[s].count;
    sb_puts(&marker_text, want);
    sb_printf(&marker_text, "train %zu\nval %zu\n", count[0], count[1]);

    if (make_dirs(dir_arg, 0777, &err) < 0)
        goto fail;
    dir = realpath(dir_arg, NULL);
    if (!dir) {
        err = xasprintf("%s: %s", dir_arg, strerror(errno));
        goto fail;
    }
    marker = path_join(dir, ".complete");
    if (unlink(marker) < 0 && errno != ENOENT) {
        err = xasprintf("%s: cannot remove: %s", marker, strerror(errno));
        goto fail;
    }

    /* folders, without the PNGs of earlier runs that this one will not write */
    char *root = path_join(dir, "disk_folder");
    filelist = path_join(dir, "disk_filelist");
    int mk = make_dir(root, &err) < 0 || make_dir(filelist, &err) < 0 ? -1 : 0;
    for (int s = 0; mk == 0 && s < 2; s++) {
        folder[s] = path_join(root, SPLITS[s]);
        mk = make_dir(folder[s], &err);
        for (int c = 0; mk == 0 && c < FMNIST_CLASSES; c++) {
            char *cls = path_join(folder[s], FMNIST_CLASS_DIRS[c]);
            mk = make_dir(cls, &err) < 0 || remove_stale_pngs(cls, &idx[s], count[s], (unsigned)c, &err) < 0 ? -1 : 0;
            free(cls);
        }
    }
    free(root);
    if (mk < 0) {
        goto fail;
    }

    /* the PNGs, on every CPU */
    work w = {.total = count[0] + count[1]};
    pthread_mutex_init(&w.lock, NULL);
    for (int s = 0; s < 2; s++)
        w.jobs[s] = (split_job){.split = &idx[s], .count = count[s], .folder = folder[s]};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = ncpu < 1 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;
    pthread_t threads[MAX_THREADS];
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&threads[started], NULL, png_worker, &w) != 0)
            break;
    if (started == 0)
        png_worker(&w);
    for (int t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    pthread_mutex_destroy(&w.lock);
    if (w.error) {
        err = w.error;
        goto fail;
    }

    /* the file lists, in IDX order */
    for (int s = 0; s < 2; s++) {
        paths[s] = xcalloc(count[s] ? count[s] : 1, sizeof(char *));
        labels[s] = xcalloc(count[s] ? count[s] : 1, sizeof(int64_t));
        for (size_t k = 0; k < count[s]; k++) {
            unsigned label = idx[s].labels_file[8 + k];
            labels[s][k] = label;
            paths[s][k] = xasprintf("%s/%s/%05zu.png", folder[s], FMNIST_CLASS_DIRS[label], k);
        }
        char *images_npy = xasprintf("%s/%s_images.npy", filelist, SPLITS[s]);
        char *labels_npy = xasprintf("%s/%s_labels.npy", filelist, SPLITS[s]);
        size_t shape[1] = {count[s]};
        int wr = write_unicode_npy(images_npy, paths[s], count[s], &err) < 0 ||
                         npy_write(labels_npy, NPY_I8, 1, shape, labels[s], &err) < 0
                     ? -1
                     : 0;
        free(images_npy);
        free(labels_npy);
        if (wr < 0) {
            goto fail;
        }
    }

    /* the catalog */
    json_t *cat = json_object(), *fold = json_object(), *flist = json_object();
    for (int s = 0; s < 2; s++) {
        char *images_npy = xasprintf("%s/%s_images.npy", filelist, SPLITS[s]);
        char *labels_npy = xasprintf("%s/%s_labels.npy", filelist, SPLITS[s]);
        json_object_set_new(fold, SPLITS[s], catalog_pair(folder[s], folder[s]));
        json_object_set_new(flist, SPLITS[s], catalog_pair(images_npy, labels_npy));
        free(images_npy);
        free(labels_npy);
    }
    json_object_set_new(cat, "fashion_mnist_folder", fold);
    json_object_set_new(cat, "fashion_mnist_filelist", flist);
    int cw = write_catalog(dir, cat, &err);
    json_decref(cat);
    catalog = path_join(dir, "dataset_catalog.json");
    if (cw < 0)
        goto fail;

    /* everything on disk, then the marker */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        syncfs(dfd);
        close(dfd);
    }
    if (write_text_atomic(marker, marker_text.s, &err) < 0)
        goto fail;
    log_info("wrote Fashion-MNIST to %s: train %zu, val %zu images", dir, count[0], count[1]);
    log_info("catalog %s (fashion_mnist_folder, fashion_mnist_filelist)", catalog);
    rc = 0;
    goto out;
fail:
    log_error("%s", err ? err : "failed");
    free(err);
    rc = EXIT_RUNTIME;
out:
    for (int s = 0; s < 2; s++) {
        free(idx[s].images_file);
        free(idx[s].labels_file);
        free(folder[s]);
        if (paths[s])
            for (size_t k = 0; k < count[s]; k++)
                free(paths[s][k]);
        free(paths[s]);
        free(labels[s]);
    }
    free(dir);
    free(marker);
    free(want);
    sb_free(&marker_text);
    free(filelist);
    free(catalog);
    return rc;
}

int cmd_dataset(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "jigsaw-perms"))
        return cmd_dataset_jigsaw_perms(argc - 1, argv + 1);
    if (argc > 1 && (!strcmp(argv[1], "voc2007") || !strcmp(argv[1], "voc2012")))
        return cmd_dataset_voc(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "coco2014"))
        return cmd_dataset_coco(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "imagenet"))
        return cmd_dataset_imagenet(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "inaturalist2018"))
        return cmd_dataset_inat(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "low-shot"))
        return cmd_dataset_lowshot(argc - 1, argv + 1);
    const char *name = NULL, *dir = NULL, *src = FMNIST_DEFAULT_SRC;
    size_t limit = 0;
    bool force = false, options_done = false;
    for (int k = 1; k < argc; k++) {
        const char *arg = argv[k];
        if (!options_done && (!strcmp(arg, "--help") || !strcmp(arg, "-h"))) {
            dataset_usage(stdout);
            return 0;
        } else if (!options_done && (!strcmp(arg, "--force") || !strcmp(arg, "-f"))) {
            force = true;
        } else if (!options_done && (!strcmp(arg, "--limit") || !strncmp(arg, "--limit=", 8))) {
            const char *v = arg[7] == '=' ? arg + 8 : k + 1 < argc ? argv[++k] : NULL;
            char *end;
            errno = 0;
            unsigned long long n = v ? strtoull(v, &end, 10) : 0;
            if (!v || !*v || *end || errno || n == 0 || v[0] == '-') {
                log_error("--limit needs a positive number of images%s%s%s", v ? " ('" : "", v ? v : "",
                          v ? "' is not one)" : "");
                return EXIT_USAGE;
            }
            limit = (size_t)n;
        } else if (!options_done && (!strcmp(arg, "--from") || !strncmp(arg, "--from=", 7))) {
            src = arg[6] == '=' ? arg + 7 : k + 1 < argc ? argv[++k] : NULL;
            if (!src || !*src) {
                log_error("--from needs a directory");
                return EXIT_USAGE;
            }
        } else if (!options_done && !strcmp(arg, "--")) {
            options_done = true;
        } else if (!options_done && arg[0] == '-' && arg[1]) {
            log_error("unknown option '%s'; see 'selfsup dataset --help'", arg);
            return EXIT_USAGE;
        } else if (!name) {
            name = arg;
        } else if (!dir) {
            dir = arg;
        } else {
            log_error("one NAME and one DIR only ('%s' is extra)", arg);
            return EXIT_USAGE;
        }
    }
    if (!name) {
        dataset_usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(name, "fashion-mnist") && strcmp(name, "fashion_mnist")) {
        log_error("unknown dataset '%s'; known: fashion-mnist, imagenet, inaturalist2018, voc2007, voc2012, coco2014, "
                  "jigsaw-perms, low-shot",
                  name);
        return EXIT_USAGE;
    }
    if (!dir || !*dir) {
        log_error("no DIR given; usage: selfsup dataset fashion-mnist DIR");
        return EXIT_USAGE;
    }
    return convert_fashion_mnist(dir, src, limit, force);
}
