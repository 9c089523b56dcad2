/*
 * data_bench — selfsup's side of the data-pipeline benchmark: the work of selfsup-decode,
 * selfsup-augment and selfsup-collate on one core, in one process, per image.
 *
 *   data_bench --dir CORPUS [--n N] [--pipelines decode,simclr,swav,eval] [--batch B]
 *              [--variants main,float,nocrop] [--reps R] [--cpu C] [--hash]
 *
 * The same pipelines and options as bench/data_bench.py (VISSL's way), on the same files:
 * read the file, decode it (stages/decode/decoder.h), run the VISSL transform list
 * (stages/augment/transforms.h), write the sample record as the augment stage writes it into
 * a ring slot, and every --batch samples collate them into a batch record as the collate
 * stage does. Only the rings between the processes are left out (bench/ring.sh measures
 * them). Each pipeline runs three times: as selfsup runs it (JPEGs decoded only as far as the
 * crops need, as selfsup-decode --crop does under selfsup run; uint8 crops, normalisation left
 * to the trainer), with "+float" (ToTensor/Normalize done here, float32 CHW, as VISSL hands
 * them over), and with "+nocrop" (whole images decoded), so every comparison is on the table;
 * --variants picks some of them (main, float, nocrop), e.g. to profile one.
 *
 * Output, one line per pipeline: "selfsup_data PIPELINE IMAGES_PER_SECOND", '#' lines for
 * details. Median of --reps timed passes after one untimed warm-up batch. --hash folds every
 * byte of every batch record into the "# checksum" line (FNV-1a), to check that a change to a
 * kernel keeps every output byte; it costs a pass over the batches, so time without it.
 */
#include "augment/transforms.h"
#include "collate/collate.h"
#include "config.h"
#include "decode/decoder.h"
#include "record.h"
#include "timer.h"
#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define MEAN_STD "mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]"

static const struct {
    const char *name, *collator, *yaml;
} pipelines[] = {
    {"decode", NULL, NULL},
    {"simclr", "simclr_collator",
     "t:\n  - {name: ImgReplicatePil, num_times: 2}\n  - {name: RandomResizedCrop, size: 224}\n"
     "  - {name: RandomHorizontalFlip, p: 0.5}\n  - {name: ImgPilColorDistortion, strength: 1.0}\n"
     "  - {name: ImgPilGaussianBlur, p: 0.5, radius_min: 0.1, radius_max: 2.0}\n  - {name: ToTensor}\n"
     "  - {name: Normalize, " MEAN_STD "}\n"},
    {"swav", "multicrop_collator",
     "t:\n  - {name: ImgPilToMultiCrop, total_num_crops: 8, num_crops: [2, 6], size_crops: [224, 96],"
     " crop_scales: [[0.14, 1], [0.05, 0.14]]}\n"
     "  - {name: RandomHorizontalFlip, p: 0.5}\n  - {name: ImgPilColorDistortion, strength: 1.0}\n"
     "  - {name: ImgPilGaussianBlur, p: 0.5, radius_min: 0.1, radius_max: 2.0}\n  - {name: ToTensor}\n"
     "  - {name: Normalize, " MEAN_STD "}\n"},
    {"eval", "default_collate",
     "t:\n  - {name: Resize, size: 256}\n  - {name: CenterCrop, size: 224}\n  - {name: ToTensor}\n"
     "  - {name: Normalize, " MEAN_STD "}\n"},
};

/* ---- the corpus ---------------------------------------------------------------------------- */

typedef struct {
    char **paths;
    size_t n, cap;
} file_list;

static bool is_image(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".png"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void walk(const char *dir, file_list *fl)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *p = xasprintf("%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            walk(p, fl);
            free(p);
        } else if (is_image(e->d_name)) {
            if (fl->n == fl->cap) {
                fl->cap = fl->cap ? 2 * fl->cap : 256;
                fl->paths = xrealloc(fl->paths, fl->cap * sizeof *fl->paths);
            }
            fl->paths[fl->n++] = p;
        } else {
            free(p);
        }
    }
    closedir(d);
}

static uint8_t *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die(EXIT_RUNTIME, "%s: %s", path, strerror(errno));
    struct stat st;
    fstat(fd, &st);
    uint8_t *buf = xmalloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0)
            die(EXIT_RUNTIME, "%s: short read", path);
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return buf;
}

/* ---- one pipeline -------------------------------------------------------------------------- */

typedef struct {
    decode_ctx *dec;
    aug_pipeline *aug;
    aug_normalize norm;
    bool to_float;
    bool crop; /* decode only what the crops read (selfsup-decode --crop) */
    collate_kind collator;
    int batch;
    uint8_t **slots; /* one "ring slot" per sample of a batch */
    rec_view *views;
    uint8_t *batch_buf;
    size_t slot_bytes, batch_bytes;
    uint64_t checksum; /* keeps the compiler from skipping work; every byte with --hash */
    bool hash;
} bench;

/* FNV-1a over n bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* What selfsup-augment writes for one sample, into a "ring slot". */
static void write_sample(bench *b, aug_sample *s, int slot, uint64_t seq)
{
    rec_writer w;
    if (rec_writer_init(&w, b->slots[slot], b->slot_bytes, REC_DATA, seq, 0, aug_sample_tensors(s)) != 0)
        die(EXIT_RUNTIME, "slot: %s", w.error);
    aug_sample_write(s, &b->norm, b->to_float, &w);
    size_t len = rec_finish(&w);
    char *err = NULL;
    if (!len || rec_parse(b->slots[slot], len, &b->views[slot], &err) != 0)
        die(EXIT_RUNTIME, "sample record: %s", len ? err : w.error);
}

static void flush_batch(bench *b, int n)
{
    rec_writer w;
    char why[256];
    if (rec_writer_init(&w, b->batch_buf, b->batch_bytes, REC_DATA, 0, 0, collate_max_tensors(b->collator, &b->views[0])) != 0 ||
        collate_batch(b->collator, b->views, n, &(collate_options){0}, &w, why, sizeof why) != 0 || !rec_finish(&w))
        die(EXIT_RUNTIME, "collate: %s %s", why, w.error);
    if (b->hash)
        b->checksum = fnv1a(b->checksum ? b->checksum : 0xcbf29ce484222325ull, b->batch_buf, w.used);
    else
        b->checksum += b->batch_buf[w.used - 1];
}

/* Decode (and augment and collate) files[first .. first+count) modulo the corpus. */
/* The crop boxes of sample `index` (epoch 0, seed 0), as selfsup-decode --crop draws them. */
typedef struct {
    const aug_pipeline *aug;
    uint64_t index;
} crop_key;

static void crop_box(void *arg, int w, int h, int box[4])
{
    const crop_key *k = arg;
    aug_pipeline_roi(k->aug, 0, 0, k->index, w, h, box);
}

static void run_images(bench *b, const file_list *fl, size_t first, size_t count)
{
    aug_sample s = {0};
    int in_batch = 0;
    for (size_t i = first; i < first + count; i++) {
        size_t len;
        uint8_t *buf = read_file(fl->paths[i % fl->n], &len);
        decode_rgb rgb;
        char why[256];
        crop_key key = {.aug = b->aug, .index = i};
        if (decode_image_roi(b->dec, buf, len, b->aug && b->crop ? crop_box : NULL, &key, &rgb, why, sizeof why) != 0)
            die(EXIT_RUNTIME, "%s: %s", fl->paths[i % fl->n], why);
        free(buf);
        if (!b->aug) {
            b->checksum += rgb.px[0];
            continue;
        }
        /* Borrowed, as selfsup-augment borrows the decoded image in its input ring slot. */
        img_u8 im = {.px = rgb.px, .w = rgb.w, .h = rgb.h, .c = 3, .stride = rgb.stride};
        int64_t label = 0, valid = 1, idx = (int64_t)i;
        aug_sample_borrow(&s, &im, 1, &label, 1, &valid, &idx);
        if (rgb.w != rgb.full_w || rgb.h != rgb.full_h)
            aug_sample_set_window(&s, 0, rgb.x0, rgb.y0, rgb.full_w, rgb.full_h);
        if (aug_apply(b->aug, &s, 0, 0, (uint64_t)i, why, sizeof why) != 0)
            die(EXIT_RUNTIME, "augment: %s", why);
        write_sample(b, &s, in_batch, i);
        aug_sample_release(&s);
        if (++in_batch == b->batch) {
            flush_batch(b, in_batch);
            in_batch = 0;
        }
    }
    if (in_batch)
        flush_batch(b, in_batch);
    aug_sample_clear(&s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double measure(bench *b, const file_list *fl, size_t n, int reps)
{
    run_images(b, fl, 0, (size_t)b->batch); /* warm-up: caches, allocator, page cache */
    double ips[16];
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        run_images(b, fl, 0, n);
        ips[r] = (double)n / (now_seconds() - t0);
    }
    qsort(ips, (size_t)reps, sizeof *ips, cmp_double);
    return ips[reps / 2];
}

static void setup(bench *b, int p, bool to_float, int batch)
{
    *b = (bench){.dec = decode_ctx_new(&(decode_options){0}), .to_float = to_float, .batch = batch};
    if (!pipelines[p].yaml)
        return;
    cfg_err err;
    cfg_node *root = cfg_parse_yaml(pipelines[p].yaml, strlen(pipelines[p].yaml), pipelines[p].name, &err);
    if (!root || !(b->aug = aug_pipeline_build(cfg_map_get(root, "t"), "t", &err)))
        die(EXIT_RUNTIME, "%s: %s", pipelines[p].name, err.msg);
    cfg_free(root);
    b->norm = aug_pipeline_normalize(b->aug);
    char why[160];
    if (collate_from_name(pipelines[p].collator, &b->collator, why, sizeof why) != 0)
        die(EXIT_RUNTIME, "%s", why);
    b->slot_bytes = 8u << 20;
    b->batch_bytes = (size_t)batch * b->slot_bytes;
    b->slots = xcalloc((size_t)batch, sizeof *b->slots);
    b->views = xcalloc((size_t)batch, sizeof *b->views);
    for (int i = 0; i < batch; i++)
        b->slots[i] = aligned_alloc(64, b->slot_bytes);
    b->batch_buf = aligned_alloc(64, b->batch_bytes);
}

static void teardown(bench *b)
{
    decode_ctx_free(b->dec);
    aug_pipeline_free(b->aug);
    for (int i = 0; b->slots && i < b->batch; i++)
        free(b->slots[i]);
    free(b->slots);
    free(b->views);
    free(b->batch_buf);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *which = "decode,simclr,swav,eval", *variants = "main,float,nocrop";
    size_t n = 200;
    int batch = 32, reps = 3, cpu = 0;
    bool hash = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dir") && v) dir = v, i++;
        else if (!strcmp(a, "--n") && v) n = strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--pipelines") && v) which = v, i++;
        else if (!strcmp(a, "--variants") && v) variants = v, i++;
        else if (!strcmp(a, "--batch") && v) batch = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--cpu") && v) cpu = atoi(v), i++;
        else if (!strcmp(a, "--hash")) hash = true;
        else {
            fprintf(stderr, "usage: data_bench --dir CORPUS [--n N] [--pipelines decode,simclr,swav,eval] "
                            "[--variants main,float,nocrop] [--batch B] [--reps R] [--cpu C] [--hash]\n");
            return 2;
        }
    }
    if (!dir || n == 0 || batch < 1 || batch > 1024 || reps < 1 || reps > 16) {
        fprintf(stderr, "data_bench: --dir is required; --n > 0, --batch 1..1024, --reps 1..16\n");
        return 2;
    }
    /* As stage_main does for every stage: keep big freed buffers in the heap. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        fprintf(stderr, "data_bench: could not pin to cpu %d: %s\n", cpu, strerror(errno));
    file_list fl = {0};
    char *train = xasprintf("%s/train", dir);
    struct stat st;
    walk(stat(train, &st) == 0 ? train : dir, &fl);
    free(train);
    if (!fl.n)
        die(EXIT_USAGE, "data_bench: no .jpg/.jpeg/.png under %s", dir);
    qsort(fl.paths, fl.n, sizeof *fl.paths, cmp_str);
    printf("# data_bench: %zu images (corpus %zu files), batch %d, %d reps, cpu %d, one thread\n", n, fl.n, batch,
           reps, cpu);
    for (size_t p = 0; p < sizeof pipelines / sizeof pipelines[0]; p++) {
        if (!strstr(which, pipelines[p].name))
            continue;
        /* as selfsup runs it, then +float, then without --crop's partial decoding */
        static const char *const variant[] = {"", "+float", "+nocrop"};
        static const char *const variant_key[] = {"main", "float", "nocrop"};
        for (int f = 0; f < (pipelines[p].yaml ? 3 : 1); f++) {
            if (pipelines[p].yaml && !strstr(variants, variant_key[f]))
                continue;
            bench b;
            setup(&b, (int)p, f == 1, batch);
            b.hash = hash;
            b.crop = f != 2;
            double ips = measure(&b, &fl, n, reps);
            printf("selfsup_data %s%s %.1f\n", pipelines[p].name, variant[f], ips);
            printf("# checksum %llu\n", (unsigned long long)b.checksum);
            fflush(stdout);
            teardown(&b);
        }
    }
    for (size_t i = 0; i < fl.n; i++)
        free(fl.paths[i]);
    free(fl.paths);
    return 0;
}
