/*
 * selfsup-decode — read and decode the images of a VISSL dataset, one record per sample.
 *
 * The first stage of every pipeline, VISSL's GenericSSLDataset + sampler in a process:
 *
 *   selfsup-decode -c CONFIG [--split train|test] [--epoch E] [--epochs N] --out URI
 *
 * Which images: DATA.<split> of the config — DATA_SOURCES disk_folder (a torchvision
 * ImageFolder), disk_filelist (a .npy of paths plus a .npy of labels) or synthetic (gray
 * images), paths from DATA_PATHS or the dataset catalog, DATA_LIMIT, LABEL_SOURCES and
 * LABEL_TYPE. Several sources give several images per sample (data.0, data.1, ...).
 *
 * In which order: the rank's share of each epoch, as VISSL's sampler would give it under
 * torch.distributed (DistributedSampler; USE_STATEFUL_DISTRIBUTED_SAMPLER; the debugging
 * sampler), shuffled from SEED_VALUE and the epoch. --start-iter K resumes an epoch after K
 * batches of BATCHSIZE_PER_REPLICA.
 *
 * What comes out (stages/sample.h): per sample, data.S uint8 [H, W, 3] in RGB with PIL's
 * pixels, label, data_valid and data_idx int64 [sources]; header seq = position in the
 * rank's epoch order, epoch = the epoch.
 *
 * Broken images never stop a run: an unreadable, truncated, corrupt, unsupported or too
 * large image becomes VISSL's gray image (DEFAULT_GRAY_IMG_SIZE², value 128) with
 * data_valid = -1, or with ENABLE_QUEUE_DATASET an earlier valid image with data_valid = 1.
 * Each such path is logged once and counted ("invalid_images"), each image once; at an
 * epoch's end a warning says how many of its images were invalid ("split train: N of M
 * images invalid (x%)"), and the stage fails (exit 1) when that share is more than
 * SELFSUP.MAX_INVALID_IMAGES_SHARE (default 1: report only).
 *
 * Files are read ahead of the decoder with io_uring (--io-depth reads in flight), or with
 * pread where io_uring is not available (--no-io-uring forces that), and decoded on
 * --threads threads; neither changes a byte of the output. COPY_TO_LOCAL_DISK reads the data
 * from a copy on the node's disk. With --crop (which selfsup run passes), only the part of
 * each JPEG that the augment stage's crops will read is decoded: the same crop boxes are
 * drawn here from the image's size (augment/roi.c), and the record says where the window
 * sits. --dct-downscale M trades exactness for speed: JPEGs are decoded at 1/2, 1/4 or 1/8
 * of their size in the DCT domain while both sides stay at least M (PIL's Image.draft);
 * off by default, because those are not the pixels VISSL sees. Exit status 2 on a config
 * error, found before anything is written; 1 when the machine fails (a COPY_TO_LOCAL_DISK
 * that cannot copy) or an epoch's invalid images pass SELFSUP.MAX_INVALID_IMAGES_SHARE.
 *
 * On a host of the decode farm (selfsup run --role farm), --lease ENDPOINT --lease-id
 * farm.N: the samples to decode come as leases from the trainer host's collate
 * (decode/farm_client.h), ranges of positions in one epoch of the rank's order, until it says
 * the run is done; --epoch, --epochs and --start-iter are then the trainer side's business.
 * Each lease's samples are the bytes a one-machine run makes of those positions.
 */
#include "augment/transforms.h"
#include "decode/dataset.h"
#include "decode/decoder.h"
#include "decode/farm_client.h"
#include "decode/pool.h"
#include "decode/queue.h"
#include "decode/reader.h"
#include "decode/sampler.h"
#include "log.h"
#include "sample.h"
#include "stage.h"
#include "timer.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *split; /* "TRAIN" or "TEST" */
    long epoch;        /* first epoch; -1: the framework's current epoch */
    long epochs;
    long start_iter;
    long limit;        /* cap on samples, -1 none */
    long io_depth;
    long threads;
    bool no_io_uring;
    bool crop;         /* decode only what DATA.<split>.TRANSFORMS' crops read */
    long dct_min_side; /* --dct-downscale: 0 off */
    const char *lease, *lease_id; /* the decode farm: where leases come from, and who asks */
} decode_opts;

/* Everything run() needs while it loops. */
typedef struct {
    stage *s;
    decode_dataset ds;
    decode_sampler sampler;
    decode_reader *reader;
    decode_pool *pool;      /* decodes in sampler order, on --threads threads */
    size_t files;           /* files per sample (sources that are not synthetic) */
    decode_queue *queues;   /* one per source with ENABLE_QUEUE_DATASET, else NULL */
    uint8_t **logged;       /* per source, per sample: invalid image already logged */
    uint8_t *gray;          /* VISSL's mean image */
    int64_t invalid, decoded; /* images of the whole run, each counted once */
    int64_t epoch_invalid, epoch_decoded; /* the same, of the epoch being written */
    aug_pipeline *crops;    /* --crop: the transforms whose crop boxes bound each decode */
    uint64_t seed;          /* SEED_VALUE, which keys those boxes */
} decode_run;

/* One source's image for the sample being assembled: w x h pixels, rows `stride` bytes
 * apart, at (x0, y0) of a full_w x full_h image (a window with --crop, else all of it). */
typedef struct {
    const uint8_t *px;
    int w, h;
    size_t stride;
    int x0, y0, full_w, full_h;
    int64_t valid;
    uint8_t *owned; /* a queued replacement, freed after the record */
    bool decoded;   /* a decoded file image, counted as decoded once it fits the record */
} source_image;

/* A whole, packed image. */
static source_image whole_image(const uint8_t *px, int w, int h, int64_t valid, uint8_t *owned)
{
    return (source_image){.px = px, .w = w, .h = h, .stride = (size_t)w * 3, .full_w = w, .full_h = h,
                          .valid = valid, .owned = owned};
}

/* ---- options ------------------------------------------------------------------------------ */


static int option(void *state, int argc, char **argv)
{
    decode_opts *o = state;
    if (!strcmp(argv[0], "--split")) {
        if (argc < 2 || (strcmp(argv[1], "train") && strcmp(argv[1], "test"))) {
            log_error("--split wants train or test");
            return -1;
        }
        o->split = !strcmp(argv[1], "test") ? "TEST" : "TRAIN";
        return 2;
    }
    if (!strcmp(argv[0], "--no-io-uring")) {
        o->no_io_uring = true;
        return 1;
    }
    if (!strcmp(argv[0], "--crop")) {
        o->crop = true;
        return 1;
    }
    if (!strcmp(argv[0], "--lease") && argc > 1) {
        o->lease = argv[1];
        return 2;
    }
    if (!strcmp(argv[0], "--lease-id") && argc > 1) {
        o->lease_id = argv[1];
        return 2;
    }
    static const char *const names[] = {"--epoch",    "--epochs",  "--start-iter",   "--limit",
                                        "--io-depth", "--threads", "--dct-downscale"};
    long *const targets[] = {&o->epoch,    &o->epochs,  &o->start_iter,  &o->limit,
                             &o->io_depth, &o->threads, &o->dct_min_side};
    static const long mins[] = {0, 1, 0, 1, 1, 1, 1};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        int used = stage_long_option(argc, argv, names[i], mins[i], targets[i]);
        if (used)
            return used;
    }
    return 0;
}

/* ---- setup -------------------------------------------------------------------------------- */

static bool split_bool(const cfg_node *config, const char *split, const char *key)
{
    char *path = xasprintf("DATA.%s.%s", split, key);
    const cfg_node *n = cfg_path(config, path);
    free(path);
    return n && n->kind == CFG_BOOL && n->b;
}

static int64_t split_int(const cfg_node *config, const char *split, const char *key, int64_t fallback)
{
    char *path = xasprintf("DATA.%s.%s", split, key);
    const cfg_node *n = cfg_path(config, path);
    free(path);
    return n && n->kind == CFG_INT ? n->i : fallback;
}

static decode_sampler make_sampler(const decode_run *r, const decode_opts *o, const cfg_node *config)
{
    decode_sampler sm = {.dataset_len = r->ds.length, .rank = stage_rank(r->s), .world_size = stage_world_size(r->s)};
    const cfg_node *seed = cfg_path(config, "SEED_VALUE");
    sm.seed = seed && seed->kind == CFG_INT ? (uint64_t)seed->i : 0;
    sm.kind = split_bool(config, o->split, "USE_STATEFUL_DISTRIBUTED_SAMPLER") ? DECODE_SAMPLER_STATEFUL
              : split_bool(config, o->split, "USE_DEBUGGING_SAMPLER")          ? DECODE_SAMPLER_DEBUGGING
                                                                               : DECODE_SAMPLER_DISTRIBUTED;
    return sm;
}

static void setup_per_source(decode_run *r, bool queue, size_t queue_size)
{
    size_t n = r->ds.n_sources;
    r->logged = xcalloc(n, sizeof *r->logged);
    for (size_t i = 0; i < n; i++) {
        r->logged[i] = xcalloc(r->ds.length ? r->ds.length : 1, 1);
        r->files += r->ds.sources[i].kind != DECODE_SOURCE_SYNTHETIC;
    }
    if (queue) {
        r->queues = xcalloc(n, sizeof *r->queues);
        for (size_t i = 0; i < n; i++)
            decode_queue_init(&r->queues[i], queue_size);
    }
    size_t g = (size_t)r->ds.gray_size, bytes = g * g * 3;
    r->gray = xmalloc(bytes > 0 ? bytes : 1);
    memset(r->gray, SAMPLE_GRAY_VALUE, bytes);
}

static void teardown(decode_run *r)
{
    for (size_t i = 0; i < r->ds.n_sources; i++) {
        if (r->logged)
            free(r->logged[i]);
        if (r->queues)
            decode_queue_free(&r->queues[i]);
    }
    decode_pool_free(r->pool);
    free(r->logged);
    free(r->queues);
    free(r->gray);
    decode_reader_free(r->reader);
    decode_dataset_free(&r->ds);
    aug_pipeline_free(r->crops);
}

/* ---- one sample ----------------------------------------------------------------------------- */

static void count_invalid(decode_run *r)
{
    r->invalid++;
    r->epoch_invalid++;
    stage_count(r->s, "invalid_images", 1);
}

/* An image that could not be used: log it (once per path), count it, and substitute. */
static source_image invalid_image(decode_run *r, size_t src, size_t idx, const char *path, const char *why)
{
    count_invalid(r);
    if (!r->logged[src][idx]) {
        r->logged[src][idx] = 1;
        log_warn("invalid image %s: %s", path, why);
    }
    decode_queued_image q;
    if (r->queues && decode_queue_on_failure(&r->queues[src], &q))
        return whole_image(q.px, q.w, q.h, 1, q.px);
    return whole_image(r->gray, r->ds.gray_size, r->ds.gray_size, -1, NULL);
}

static source_image image_of_job(decode_run *r, size_t src, size_t idx, const decode_job *job)
{
    if (job->rc != 0)
        return invalid_image(r, src, idx, job->file.path, job->why);
    const decode_rgb *im = &job->im;
    if (r->queues) /* never with --crop, so the image is whole and packed */
        decode_queue_on_success(&r->queues[src], im->px, im->w, im->h);
    return (source_image){.px = im->px, .w = im->w, .h = im->h, .stride = im->stride, .x0 = im->x0, .y0 = im->y0,
                          .full_w = im->full_w, .full_h = im->full_h, .valid = 1, .decoded = true};
}

/* Source src's image of sample idx. The k-th file source of the sample is the pool's k-th
 * oldest job: jobs go in and come out in (sample, source) order. */
static source_image source_image_of(decode_run *r, size_t src, size_t idx, unsigned *file_k)
{
    if (r->ds.sources[src].kind == DECODE_SOURCE_SYNTHETIC)
        return whole_image(r->gray, r->ds.gray_size, r->ds.gray_size, 1, NULL);
    decode_job *job = decode_pool_get(r->pool, (*file_k)++);
    if (!job)
        return invalid_image(r, src, idx, r->ds.sources[src].paths[idx], "internal: decode was never queued");
    return image_of_job(r, src, idx, job);
}

static size_t aligned(size_t n)
{
    return (n + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN;
}

/* Bytes the sample's record takes (header, descriptors, payloads at 64-byte offsets). */
static size_t record_bytes(const decode_run *r, const source_image *imgs)
{
    size_t n = r->ds.n_sources;
    size_t bytes = REC_HEADER_BYTES + (n + 4) * REC_TENSOR_BYTES;
    for (size_t i = 0; i < n; i++)
        bytes = aligned(bytes) + (size_t)imgs[i].w * (size_t)imgs[i].h * 3;
    bytes = aligned(aligned(bytes) + 8 * decode_dataset_label_count(&r->ds) * decode_dataset_label_width(&r->ds));
    bytes = aligned(aligned(bytes + 8 * n) + 8 * n);
    return r->crops ? aligned(bytes + 32 * n) : bytes;
}

/* An image too big for the output slot is a bad input like any other, not a reason to stop
 * the run: the largest image of the sample becomes the gray one until the record fits. It
 * counts as invalid, and so only once: a decoded image is counted as decoded only after this,
 * and a queued replacement stands for an image already counted invalid. */
static void fit_to_slot(decode_run *r, size_t idx, source_image *imgs, size_t cap)
{
    while (record_bytes(r, imgs) > cap) {
        size_t big = 0;
        for (size_t i = 1; i < r->ds.n_sources; i++)
            if ((size_t)imgs[i].w * imgs[i].h > (size_t)imgs[big].w * imgs[big].h)
                big = i;
        if (imgs[big].px == r->gray)
            return; /* even gray images do not fit: rec_finish will say so */
        if (imgs[big].decoded)
            count_invalid(r);
        if (!r->logged[big][idx])
            log_warn("invalid image %s: %dx%d pixels do not fit the output slot of %zu bytes "
                     "(raise SELFSUP.RING.SLOT_BYTES)",
                     r->ds.sources[big].paths ? r->ds.sources[big].paths[idx] : "(synthetic)", imgs[big].w,
                     imgs[big].h, cap);
        r->logged[big][idx] = 1;
        free(imgs[big].owned);
        imgs[big] = whole_image(r->gray, r->ds.gray_size, r->ds.gray_size, -1, NULL);
    }
}

static int write_sample(decode_run *r, uint64_t seq, uint32_t epoch, size_t idx, source_image *imgs, bool last)
{
    size_t n = r->ds.n_sources, n_labels = decode_dataset_label_count(&r->ds),
           width = decode_dataset_label_width(&r->ds);
    rec_writer *w = stage_record_begin(r->s, REC_DATA, seq, epoch, (uint32_t)(n + 4));
    if (!w)
        return stage_exit_status(r->s) ? -1 : 1;
    /* The epoch's last sample says so: collate then knows the epoch's length and closes its
     * last, partial batch without waiting for the stream to end. */
    if (last)
        rec_writer_header(w)->flags |= SAMPLE_FLAG_EPOCH_LAST;
    fit_to_slot(r, idx, imgs, w->cap);
    for (size_t i = 0; i < n; i++) {
        r->decoded += imgs[i].decoded;
        r->epoch_decoded += imgs[i].decoded;
    }
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "data.%zu", i);
        uint64_t shape[3] = {(uint64_t)imgs[i].h, (uint64_t)imgs[i].w, 3};
        uint8_t *px = rec_add(w, name, REC_U8, 3, shape);
        size_t row = (size_t)imgs[i].w * 3;
        for (int y = 0; px && y < imgs[i].h; y++)
            memcpy(px + (size_t)y * row, imgs[i].px + (size_t)y * imgs[i].stride, row);
    }
    if (r->crops) { /* where each window sits (sample.h) */
        uint64_t shape[2] = {n, 4};
        int64_t *win = rec_add(w, "data_window", REC_I64, 2, shape);
        for (size_t i = 0; win && i < n; i++) {
            win[4 * i] = imgs[i].x0, win[4 * i + 1] = imgs[i].y0;
            win[4 * i + 2] = imgs[i].full_w, win[4 * i + 3] = imgs[i].full_h;
        }
    }
    /* int64 [labels], or [labels, M] when each label is a row of M (a 2-D label .npy) */
    uint64_t ns = n, nl[2] = {n_labels, width};
    int64_t *label = rec_add(w, "label", REC_I64, width > 1 ? 2 : 1, nl);
    int64_t *valid = rec_add(w, "data_valid", REC_I64, 1, &ns);
    int64_t *index = rec_add(w, "data_idx", REC_I64, 1, &ns);
    if (label)
        decode_dataset_labels(&r->ds, idx, label);
    for (size_t i = 0; valid && index && i < n; i++) {
        valid[i] = imgs[i].valid;
        index[i] = (int64_t)idx;
    }
    return stage_record_end(r->s) == 0 ? 0 : -1;
}

/* ---- the epoch loop ------------------------------------------------------------------------- */

/* Queue reads for the samples order[*next ...] while the reader has room for a whole sample. */
static void read_ahead(decode_run *r, const size_t *order, size_t end, size_t *next)
{
    while (*next < end && r->files > 0 && decode_reader_room(r->reader) >= r->files) {
        size_t idx = order[*next];
        for (size_t i = 0; i < r->ds.n_sources; i++)
            if (r->ds.sources[i].kind != DECODE_SOURCE_SYNTHETIC)
                decode_reader_push(r->reader, r->ds.sources[i].paths[idx], idx);
        (*next)++;
    }
}

/* Hand the files read so far (samples *next ... read_end) to the decoders, whole samples at
 * a time, while the pool has room. */
static void decode_ahead(decode_run *r, uint32_t epoch, size_t read_end, size_t *next)
{
    while (*next < read_end && r->files > 0 && decode_pool_room(r->pool) >= r->files) {
        for (size_t k = 0; k < r->files; k++) {
            decode_file f;
            if (decode_reader_pop(r->reader, &f) != 1)
                return; /* cannot happen: read_ahead queued the whole sample */
            decode_pool_submit(r->pool, &f, epoch);
        }
        (*next)++;
    }
}

/* Forget the jobs and reads still queued (after a stop in mid-epoch), so that the next
 * epoch, if any, starts clean. */
static void drain(decode_run *r)
{
    while (decode_pool_get(r->pool, 0))
        decode_pool_release(r->pool);
    decode_file f;
    while (decode_reader_pop(r->reader, &f) == 1)
        free(f.data);
}

/* Positions [start, end) of the epoch whose sampler order is `order`: 0 when written, 1 when
 * the stage should stop, -1 on a failure. `stop_early` (the farm said the run is done) ends
 * it quietly before the end. */
static int run_range(decode_run *r, uint32_t epoch, size_t start, size_t end, const size_t *order, size_t per_rank,
                     bool (*stop_early)(const farm_client *), const farm_client *farm)
{
    size_t next_read = start, next_decode = start;
    source_image *imgs = xcalloc(r->ds.n_sources, sizeof *imgs);
    int rc = 0;
    for (size_t pos = start; rc == 0 && pos < end && !(stop_early && stop_early(farm)); pos++) {
        read_ahead(r, order, end, &next_read);
        decode_ahead(r, epoch, next_read, &next_decode);
        unsigned file_k = 0;
        for (size_t i = 0; i < r->ds.n_sources; i++)
            imgs[i] = source_image_of(r, i, order[pos], &file_k);
        rc = write_sample(r, pos, epoch, order[pos], imgs, pos + 1 == per_rank);
        for (size_t i = 0; i < r->ds.n_sources; i++)
            free(imgs[i].owned);
        for (unsigned k = 0; k < file_k; k++)
            decode_pool_release(r->pool); /* only now: the record held the slots' pixels */
    }
    drain(r);
    free(imgs);
    return rc;
}

/* 0 at the end of the epoch, 1 when the stage should stop, -1 on a failure. */
static int run_epoch(decode_run *r, uint32_t epoch, size_t start, size_t *order, size_t per_rank)
{
    decode_sampler_epoch(&r->sampler, epoch, order);
    return run_range(r, epoch, start, per_rank, order, per_rank, NULL, NULL);
}

/* The decode farm: lease after lease until the trainer's side says the run is done. Returns
 * as run_epoch does. */
static int run_leases(decode_run *r, const decode_opts *o, size_t *order, size_t per_rank)
{
    const cfg_node *config = stage_config(r->s);
    char *err = NULL;
    farm_client *c = farm_client_open(r->s, o->lease, o->lease_id ? o->lease_id : "farm.0",
                                      cfg_str(config, "SELFSUP.TRANSPORT.CLIENT_KEY_FILE"), per_rank,
                                      cfg_float(config, "SELFSUP.FARM.HOST_TIMEOUT_S"), &err);
    if (!c) {
        log_error("--lease %s: %s", o->lease, err);
        free(err);
        return -1;
    }
    int64_t sorted_epoch = -1, leases = 0;
    farm_lease l;
    int got, rc = 0;
    while (rc == 0 && (got = farm_client_next(c, &l)) == 1) {
        if (l.end > per_rank) {
            log_error("lease %llu: samples %llu-%llu, but an epoch here has %zu", (unsigned long long)l.id,
                      (unsigned long long)l.start, (unsigned long long)l.end - 1, per_rank);
            rc = -1;
            break;
        }
        if ((int64_t)l.epoch != sorted_epoch)
            decode_sampler_epoch(&r->sampler, l.epoch, order), sorted_epoch = l.epoch;
        rc = run_range(r, l.epoch, l.start, l.end, order, per_rank, farm_client_done, c);
        leases++;
    }
    if (rc == 0 && got < 0)
        rc = -1;
    /* Our readers left before the server said the run is done: the trainer's side ended
     * (done, we are about to hear) or died (it will fall silent) — wait for which. */
    if (rc >= 0 && !stage_stop_asked(r->s) && !farm_client_done(c))
        rc = farm_client_await_end(c) == 0 ? 0 : -1;
    if (rc == 0 && !farm_client_done(c))
        rc = 1; /* stopped */
    log_info("%lld leases decoded", (long long)leases);
    farm_client_close(c, rc == 0);
    return rc;
}

/* At an epoch's end: how many of its images were invalid, when any was, and whether that is
 * more than SELFSUP.MAX_INVALID_IMAGES_SHARE allows (a folder of broken files, a wrong
 * path in a file list: a run on gray images is not worth finishing). 0, or -1 to fail. */
static int epoch_summary(decode_run *r, uint32_t epoch)
{
    int64_t bad = r->epoch_invalid, total = r->epoch_invalid + r->epoch_decoded;
    r->epoch_invalid = r->epoch_decoded = 0;
    if (bad == 0)
        return 0;
    const cfg_node *limit = cfg_path(stage_config(r->s), "SELFSUP.MAX_INVALID_IMAGES_SHARE");
    double share = (double)bad / (double)total, most = cfg_is_number(limit) ? cfg_number(limit) : 1.0;
    const char *split = strcmp(r->ds.split, "TEST") ? "train" : "test";
    if (share <= most) {
        log_warn("split %s: %lld of %lld images invalid (%.1f%%), epoch %u", split, (long long)bad, (long long)total,
                 100.0 * share, epoch);
        return 0;
    }
    log_error("split %s: %lld of %lld images invalid (%.1f%%), epoch %u: more than "
              "config.SELFSUP.MAX_INVALID_IMAGES_SHARE (%g) allows; stopping",
              split, (long long)bad, (long long)total, 100.0 * share, epoch, most);
    return -1;
}

/* Building the dataset can take long: scanning a million-file folder, or COPY_TO_LOCAL_DISK
 * copying ImageNet (VISSL: ~20 minutes). It runs on a helper thread while this one keeps the
 * heartbeats going, so the orchestrator does not take a busy stage for a hung one. */
typedef struct {
    decode_dataset *ds;
    const cfg_node *config;
    const char *split;
    char *err;
    int rc;
    atomic_bool done;
    atomic_bool cancel; /* set here on SIGTERM / STOP: the folder walk gives up */
} dataset_job;

static void *dataset_thread(void *arg)
{
    dataset_job *job = arg;
    job->rc = decode_dataset_load_cancellable(job->ds, job->config, job->split, NULL, &job->cancel, &job->err);
    atomic_store(&job->done, true);
    return NULL;
}

static int load_dataset(decode_run *r, const cfg_node *config, const char *split)
{
    dataset_job job = {.ds = &r->ds, .config = config, .split = split};
    pthread_t tid;
    if (pthread_create(&tid, NULL, dataset_thread, &job) != 0) {
        dataset_thread(&job); /* no thread to spare: build it here, without heartbeats */
    } else {
        while (!atomic_load(&job.done)) {
            stage_poll(r->s);
            if (stage_stopping(r->s))
                atomic_store(&job.cancel, true);
            usleep(50 * 1000);
        }
        pthread_join(tid, NULL);
    }
    if (job.rc == DECODE_DATASET_CANCELLED) {
        log_info("%s", job.err);
        free(job.err);
        return job.rc;
    }
    if (job.rc != 0) {
        log_error("%s", job.err);
        free(job.err);
        return job.rc;
    }
    return 0;
}

/* decode_sample_roi_fn for --crop: the union of the sample's crop boxes. */
static void crop_box(const void *arg, uint32_t epoch, uint64_t index, int w, int h, int box[4])
{
    const decode_run *r = arg;
    aug_pipeline_roi(r->crops, r->seed, epoch, index, w, h, box);
}

/* --crop: parse the transforms the augment stage will run, to draw the same crop boxes. Only
 * a sample of one image can be cropped (the boxes of a second image depend on the first's
 * size), and not with ENABLE_QUEUE_DATASET (a remembered image replaces another sample,
 * whose crops differ). Returns 0, or -1 on a config error. */
static int setup_crops(decode_run *r, const decode_opts *o, const cfg_node *config)
{
    if (!o->crop)
        return 0;
    if (r->ds.n_sources != 1 || r->files != 1 || r->queues) {
        log_info("--crop: decoding whole images (%s)", r->queues ? "ENABLE_QUEUE_DATASET is on"
                                                                 : "only a one-image sample can be cropped");
        return 0;
    }
    char *key = xasprintf("DATA.%s.TRANSFORMS", o->split), *full = xasprintf("config.%s", key);
    cfg_err err;
    r->crops = aug_pipeline_build(cfg_path(config, key), full, &err);
    free(key);
    free(full);
    if (!r->crops) {
        log_error("--crop: %s", err.msg);
        return -1;
    }
    r->seed = (uint64_t)cfg_int(config, "SEED_VALUE");
    decode_pool_set_roi(r->pool, crop_box, r);
    return 0;
}

/* 0, -1 on a config error, DECODE_DATASET_RUNTIME_ERROR when the machine failed. */
static int load(decode_run *r, const decode_opts *o)
{
    const cfg_node *config = stage_config(r->s);
    int rc = load_dataset(r, config, o->split);
    if (rc != 0)
        return rc;
    if (o->limit > 0 && (size_t)o->limit < r->ds.length)
        r->ds.length = (size_t)o->limit;
    r->sampler = make_sampler(r, o, config);
    size_t batch = (size_t)split_int(config, o->split, "BATCHSIZE_PER_REPLICA", 1);
    setup_per_source(r, split_bool(config, o->split, "ENABLE_QUEUE_DATASET"), batch);
    /* read_ahead and decode_ahead queue whole samples, so each window holds at least one;
     * the decoders get two samples each, so that none waits while the oldest is written. */
    size_t depth = (size_t)o->io_depth > r->files ? (size_t)o->io_depth : r->files;
    size_t slots = (r->files ? r->files : 1) * (2 * (size_t)o->threads + 1);
    r->reader = decode_reader_new((unsigned)depth, o->no_io_uring || getenv("SELFSUP_DECODE_NO_IO_URING"));
    decode_options dopt = {.dct_min_side = o->dct_min_side > 65535 ? 65535 : (int)o->dct_min_side};
    r->pool = decode_pool_new((unsigned)o->threads, (unsigned)slots, &dopt);
    if (setup_crops(r, o, config) != 0)
        return -1;
    log_info("%s split: %zu samples, %zu source(s), %zu per rank per epoch, reading with %s, decoding on %ld thread(s)",
             r->ds.split, r->ds.length, r->ds.n_sources, decode_sampler_len(&r->sampler),
             decode_reader_uses_io_uring(r->reader) ? "io_uring" : "pread", o->threads);
    return 0;
}

static int run(stage *s, void *state)
{
    decode_opts *o = state;
    decode_run r = {.s = s};
    int loaded = load(&r, o);
    if (loaded != 0) {
        teardown(&r);
        return loaded == DECODE_DATASET_CANCELLED        ? stage_exit_status(s)
               : loaded == DECODE_DATASET_RUNTIME_ERROR ? 1
                                                        : EXIT_USAGE;
    }
    const cfg_node *config = stage_config(s);
    size_t per_rank = decode_sampler_len(&r.sampler);
    size_t skip = (size_t)o->start_iter * (size_t)split_int(config, o->split, "BATCHSIZE_PER_REPLICA", 1);
    uint32_t first = o->epoch >= 0 ? (uint32_t)o->epoch : stage_epoch(s);
    if (!o->lease) /* a farm host decodes what its leases say: the ETA is the trainer host's */
        stage_count(s, "expected", (int64_t)(per_rank * (size_t)o->epochs - (skip < per_rank ? skip : per_rank)));
    size_t *order = xmalloc((per_rank ? per_rank : 1) * sizeof *order);
    double t0 = now_seconds();
    int rc = 0;
    if (o->lease)
        rc = run_leases(&r, o, order, per_rank);
    for (long e = 0; !o->lease && rc == 0 && e < o->epochs; e++) {
        rc = run_epoch(&r, first + (uint32_t)e, e == 0 ? (skip < per_rank ? skip : per_rank) : 0, order, per_rank);
        if (rc == 0)
            rc = epoch_summary(&r, first + (uint32_t)e);
    }
    double took = now_seconds() - t0;
    log_info("%lld images decoded, %lld invalid, in %.2f s (%.0f images/s)", (long long)r.decoded, (long long)r.invalid,
             took, took > 0 ? (double)(r.decoded + r.invalid) / took : 0.0);
    free(order);
    teardown(&r);
    if (rc < 0)
        return 1;
    return rc > 0 ? stage_exit_status(s) : 0;
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "decode",
        .summary = "Read and decode a VISSL dataset's images in sampler order, one record per sample.",
        .role = "producer",
        .writes = true,
        .option = option,
        .options = "  --split train|test     DATA.TRAIN (default) or DATA.TEST (the catalog's \"val\" entry)\n"
                   "  --epoch E              first epoch (shuffle seed; default: the current epoch, 0)\n"
                   "  --epochs N             epochs to emit (default 1)\n"
                   "  --start-iter K         resume: skip the first K batches of the first epoch\n"
                   "  --limit N              use only the first N samples (like DATA_LIMIT)\n"
                   "  --io-depth N           file reads kept in flight (default 32)\n"
                   "  --no-io-uring          read with pread (also: SELFSUP_DECODE_NO_IO_URING=1)\n"
                   "  --threads N            decode on N threads (default 1); the output does not change\n"
                   "  --dct-downscale M      decode JPEGs at 1/2, 1/4 or 1/8 scale in the DCT domain while\n"
                   "                         both sides stay >= M (PIL's draft; faster, other pixels)\n"
                   "  --crop                 decode only the part of each image that the crops of\n"
                   "                         DATA.<split>.TRANSFORMS read (for selfsup-augment with the same\n"
                   "                         config: same pixels, less work; records carry data_window)\n"
                   "  --lease ENDPOINT       a host of the decode farm: decode the leases that the trainer\n"
                   "                         host's collate --lease-serve deals (tcp with\n"
                   "                         SELFSUP.TRANSPORT.CLIENT_KEY_FILE, or ipc://PATH)\n"
                   "  --lease-id ID          this host's name there (default farm.0; its key must allow it)\n",
    };
    decode_opts o = {.split = "TRAIN", .epoch = -1, .epochs = 1, .limit = -1, .io_depth = 32, .threads = 1};
    return stage_main(argc, argv, &info, &o, run);
}
