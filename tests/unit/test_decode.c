/*
 * test_decode.c — selfsup-decode: its decoder against PIL, its dataset listing against
 * torchvision, its samplers, queue and reader, and the stage binary end to end.
 *
 *   - golden: photos re-encoded as 4:2:0 / 4:2:2 / 4:4:4 / progressive / grayscale JPEGs, and
 *     every file of the broken-input corpus (tests/data/broken, made by make_broken.py):
 *     a file PIL decodes must give PIL's exact pixels (tests/golden/make_decode_fixtures.py
 *     stored them), a file PIL refuses — or that is not JPEG/PNG — must be refused;
 *   - the stage: a small disk_folder tree with broken files, two ranks writing to files,
 *     read back: every sample exactly once per epoch across the ranks, labels, data_valid,
 *     order; io_uring and pread, 1 and 3 decoding threads giving the same bytes; the
 *     queue dataset; images too big for the output slot (counted once, as invalid); the
 *     end-of-epoch summary of invalid images and SELFSUP.MAX_INVALID_IMAGES_SHARE stopping a
 *     run of broken files; config errors exit 2.
 */
#include "decode/dataset.h"
#include "decode/decoder.h"
#include "decode/filelist.h"
#include "decode/imagefolder.h"
#include "decode/queue.h"
#include "decode/reader.h"
#include "decode/sampler.h"
#include "npy.h"
#include "record.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static uint8_t *read_file(const char *path, size_t *len)
{
    char *data = read_whole_file(path, len);
    cr_assert(data, "cannot read %s: %s", path, strerror(errno));
    return (uint8_t *)data;
}

static void copy_file(const char *from, const char *to)
{
    size_t len;
    uint8_t *data = read_file(from, &len);
    FILE *f = fopen(to, "wb");
    cr_assert(f, "cannot write %s", to);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
    free(data);
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void make_subdirs(const char *root, const char *rel)
{
    char *path = path_join(root, rel), *err = NULL;
    cr_assert_eq(make_dirs(path, 0700, &err), 0, "%s", err);
    free(path);
}

static void rm_tree(char *dir)
{
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    free(dir);
}

static char *corpus(const char *name)
{
    char *rel = xasprintf("tests/data/broken/%s", name);
    char *p = test_path(rel);
    free(rel);
    return p;
}

/* Decode `path` and compare with PIL's decode stored as fixtures/decode/<npy_name>. */
static void expect_pil_pixels(decode_ctx *ctx, const char *path, const char *npy_name)
{
    size_t len;
    uint8_t *data = read_file(path, &len);
    decode_rgb im;
    char why[256] = "";
    cr_assert_eq(decode_image(ctx, data, len, &im, why, sizeof why), 0, "%s: refused: %s", path, why);
    char *fixture = test_fixture("decode", npy_name);
    npy_array want;
    char *err = NULL;
    cr_assert_eq(npy_read(fixture, &want, &err), 0, "%s", err);
    cr_assert(want.ndim == 3 && want.shape[0] == (size_t)im.h && want.shape[1] == (size_t)im.w && want.shape[2] == 3,
              "%s: %dx%d, PIL says %zux%zu", path, im.w, im.h, want.shape[1], want.shape[0]);
    size_t n = (size_t)im.w * (size_t)im.h * 3, differ = 0;
    for (size_t k = 0; k < n; k++)
        differ += im.px[k] != ((const uint8_t *)want.data)[k];
    cr_assert_eq(differ, 0, "%s: %zu of %zu values differ from PIL's", path, differ, n);
    npy_close(&want);
    free(fixture);
    free(data);
}

/* ---- decoder against PIL --------------------------------------------------------------------- */

/* fn(ctx, photo, fixture) for every golden photo (3 photos x 5 JPEG variants); the fixture is
 * `prefix`_NAME_VARIANT`suffix`.npy (PIL's decode of it). */
static void each_photo(decode_ctx *ctx, const char *prefix, const char *suffix,
                       void (*fn)(decode_ctx *, const char *, const char *))
{
    static const char *const photos[] = {"Aqua", "LadyBird", "Storm"};
    static const char *const variants[] = {"420", "422", "444", "progressive", "gray"};
    for (size_t p = 0; p < ARRAY_LEN(photos); p++)
        for (size_t v = 0; v < ARRAY_LEN(variants); v++) {
            char *name = xasprintf("photo_%s_%s.jpg", photos[p], variants[v]);
            char *npy = xasprintf("%s_%s_%s%s.npy", prefix, photos[p], variants[v], suffix);
            char *path = test_fixture("decode", name);
            fn(ctx, path, npy);
            free(path);
            free(name);
            free(npy);
        }
}

Test(decode, photos_match_pil_exactly)
{
    decode_ctx *ctx = decode_ctx_new(NULL);
    each_photo(ctx, "photo", "", expect_pil_pixels);
    decode_ctx_free(ctx);
}

/* Every corpus file is handled as MANIFEST.tsv says: valid = PIL's pixels, invalid = refused. */
Test(decode, broken_corpus_as_pil)
{
    char *manifest = test_fixture("decode", "MANIFEST.tsv");
    size_t len;
    char *text = (char *)read_file(manifest, &len);
    decode_ctx *ctx = decode_ctx_new(NULL);
    int valid = 0, invalid = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128], verdict[16];
        cr_assert_eq(sscanf(line, "%127[^\t]\t%15[^\t]", name, verdict), 2, "bad manifest line: %s", line);
        char *path = corpus(name);
        if (!strcmp(verdict, "valid")) {
            char *npy = xasprintf("broken_%s.npy", name);
            for (char *c = npy + 7; *c && strcmp(c, ".npy"); c++)
                if (*c == '.')
                    *c = '_';
            expect_pil_pixels(ctx, path, npy);
            free(npy);
            valid++;
        } else {
            size_t n;
            uint8_t *data = read_file(path, &n);
            decode_rgb im;
            char why[256] = "";
            cr_assert_eq(decode_image(ctx, data, n, &im, why, sizeof why), -1, "%s: decoded, PIL refuses it", name);
            cr_assert(why[0], "%s: no reason given", name);
            free(data);
            invalid++;
        }
        free(path);
    }
    cr_assert(valid >= 15 && invalid >= 12, "manifest too small: %d valid, %d invalid", valid, invalid);
    decode_ctx_free(ctx);
    free(text);
    free(manifest);
}

/* ---- decoding a window (decode_image_roi, for selfsup-decode --crop) ------------------------ */

/* A box in eighths of the image's size, x0 y0 x1 y1 (the roi callback's view). */
typedef struct {
    int e[4];
    int calls;
} eighths;

static void box_in_eighths(void *arg, int w, int h, int box[4])
{
    eighths *b = arg;
    b->calls++;
    box[0] = w * b->e[0] / 8, box[1] = h * b->e[1] / 8;
    box[2] = (w * b->e[2] + 7) / 8, box[3] = (h * b->e[3] + 7) / 8;
    if (box[2] <= box[0])
        box[2] = box[0] + 1;
    if (box[3] <= box[1])
        box[3] = box[1] + 1;
}

/* Decode the windows of `path` for many boxes; each must hold PIL's pixels (the fixture) at
 * its place, and say where it is. */
static void expect_windows_of_pil(decode_ctx *ctx, const char *path, const char *npy_name, bool jpeg)
{
    size_t len;
    uint8_t *data = read_file(path, &len);
    char *fixture = test_fixture("decode", npy_name), *err = NULL;
    npy_array want;
    cr_assert_eq(npy_read(fixture, &want, &err), 0, "%s", err);
    const uint8_t *pil = want.data;
    int W = (int)want.shape[1], H = (int)want.shape[0];
    uint64_t lcg = 12345;
    for (int trial = 0; trial < 40; trial++) {
        eighths b = {.e = {0, 0, 8, 8}};
        if (trial > 0) /* then random boxes: edges, corners, strips, single cells */
            for (int k = 0; k < 2; k++) {
                lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
                int lo = (int)(lcg >> 33) % 8, hi = (int)(lcg >> 40) % 8 + 1;
                b.e[k] = lo < hi ? lo : hi - 1, b.e[k + 2] = lo < hi ? hi : lo + 1;
            }
        decode_rgb im;
        char why[256] = "";
        cr_assert_eq(decode_image_roi(ctx, data, len, box_in_eighths, &b, &im, why, sizeof why), 0, "%s: %s", path,
                     why);
        cr_assert_eq(b.calls, jpeg ? 1 : 0, "%s: the box was asked for %d times", path, b.calls);
        cr_assert(im.full_w == W && im.full_h == H, "%s: full size %dx%d, PIL %dx%d", path, im.full_w, im.full_h, W, H);
        if (jpeg) {
            int box[4];
            box_in_eighths(&b, W, H, box);
            cr_assert(im.x0 == box[0] && im.y0 == box[1] && im.w == box[2] - box[0] && im.h == box[3] - box[1],
                      "%s: window %d,%d %dx%d for box %d,%d,%d,%d", path, im.x0, im.y0, im.w, im.h, box[0], box[1],
                      box[2], box[3]);
        } else {
            cr_assert(im.x0 == 0 && im.y0 == 0 && im.w == W && im.h == H, "%s: a PNG comes out whole", path);
        }
        size_t differ = 0;
        for (int y = 0; y < im.h; y++)
            differ += memcmp(im.px + (size_t)y * im.stride, pil + ((size_t)(im.y0 + y) * W + im.x0) * 3,
                             (size_t)im.w * 3) != 0;
        cr_assert_eq(differ, 0, "%s: %zu rows of the window %d,%d %dx%d differ from PIL's", path, differ, im.x0, im.y0,
                     im.w, im.h);
    }
    npy_close(&want);
    free(fixture);
    free(data);
}

static void expect_jpeg_windows_of_pil(decode_ctx *ctx, const char *path, const char *npy_name)
{
    expect_windows_of_pil(ctx, path, npy_name, true);
}

static void expect_whole_and_windows_of_pil(decode_ctx *ctx, const char *path, const char *npy_name)
{
    expect_pil_pixels(ctx, path, npy_name);
    expect_windows_of_pil(ctx, path, npy_name, true);
}

Test(decode, windows_hold_the_full_decodes_pixels)
{
    decode_ctx *ctx = decode_ctx_new(NULL);
    each_photo(ctx, "photo", "", expect_jpeg_windows_of_pil);
    /* the odd ones of the corpus: arithmetic coding, CMYK, YCCK, 1x1, trailing garbage, PNG */
    static const char *const odd[][2] = {
        {"valid_arithmetic.jpg", "broken_valid_arithmetic_jpg.npy"},
        {"valid_cmyk.jpg", "broken_valid_cmyk_jpg.npy"},
        {"valid_ycck.jpg", "broken_valid_ycck_jpg.npy"},
        {"valid_1x1.jpg", "broken_valid_1x1_jpg.npy"},
        {"valid_trailing_garbage.jpg", "broken_valid_trailing_garbage_jpg.npy"},
        {"valid_alpha.png", "broken_valid_alpha_png.npy"},
    };
    for (size_t i = 0; i < ARRAY_LEN(odd); i++) {
        char *path = corpus(odd[i][0]);
        expect_windows_of_pil(ctx, path, odd[i][1], strstr(odd[i][0], ".jpg") != NULL);
        free(path);
    }
    decode_ctx_free(ctx);
}

/* A window refuses exactly the files a full decode refuses: the top-left corner of a JPEG
 * truncated further down is still "truncated", as PIL, which reads the whole file, says. */
Test(decode, windows_refuse_what_the_full_decode_refuses)
{
    char *manifest = test_fixture("decode", "MANIFEST.tsv");
    size_t len;
    char *text = (char *)read_file(manifest, &len);
    decode_ctx *ctx = decode_ctx_new(NULL);
    int refused = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128], verdict[16];
        cr_assert_eq(sscanf(line, "%127[^\t]\t%15[^\t]", name, verdict), 2);
        char *path = corpus(name);
        size_t n;
        uint8_t *data = read_file(path, &n);
        for (int corner = 0; corner < 2; corner++) {
            eighths b = {.e = {0, 0, corner ? 8 : 1, 1}};
            decode_rgb im, whole;
            char why[256] = "", why_whole[256] = "";
            int rc = decode_image_roi(ctx, data, n, box_in_eighths, &b, &im, why, sizeof why);
            int rc_whole = decode_image(ctx, data, n, &whole, why_whole, sizeof why_whole);
            cr_assert_eq(rc, rc_whole, "%s: window %s, whole image %s (%s%s)", name, rc ? "refused" : "decoded",
                         rc_whole ? "refused" : "decoded", why, why_whole);
            cr_assert_eq(rc, !strcmp(verdict, "valid") ? 0 : -1, "%s: %s", name, why);
            refused += rc != 0;
        }
        free(data);
        free(path);
    }
    char *path = corpus("valid_420.jpg");
    size_t n;
    uint8_t *data = read_file(path, &n);
    decode_rgb im;
    char why[256] = "";
    eighths top = {.e = {0, 0, 2, 1}};
    for (size_t cut = n / 2; cut < n - 2; cut += (n - cut) / 3 + 1) { /* ends inside the scan */
        cr_assert_eq(decode_image_roi(ctx, data, cut, box_in_eighths, &top, &im, why, sizeof why), -1,
                     "valid_420.jpg cut at %zu of %zu bytes: decoded", cut, n);
        cr_assert(strstr(why, "truncated"), "%s", why);
    }
    free(data);
    free(path);
    cr_assert(refused >= 24, "only %d refusals", refused);
    decode_ctx_free(ctx);
    free(text);
    free(manifest);
}

/* --dct-downscale M is PIL's Image.draft("RGB", (M, M)): the same 1/2, 1/4 or 1/8 scale and
 * the same pixels (libjpeg's scaled IDCT), whole or in a window. */
Test(decode, dct_downscale_is_pils_draft)
{
    static const int mins[] = {40, 20, 10, 6};
    for (size_t m = 0; m < ARRAY_LEN(mins); m++) {
        decode_ctx *ctx = decode_ctx_new(&(decode_options){.dct_min_side = mins[m]});
        char suffix[16];
        snprintf(suffix, sizeof suffix, "_%d", mins[m]);
        each_photo(ctx, "draft", suffix, expect_whole_and_windows_of_pil);
        decode_ctx_free(ctx);
    }
}

/* The handle survives errors: a valid image right after each broken one still decodes. */
Test(decode, recovers_after_errors)
{
    static const char *const bad[] = {"bad_truncated.jpg", "bad_precision.jpg", "bad_header_only.jpg", "bad_crc.png",
                                      "bad_truncated.png"};
    decode_ctx *ctx = decode_ctx_new(NULL);
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char *path = corpus(bad[i]);
        size_t n;
        uint8_t *data = read_file(path, &n);
        decode_rgb im;
        char why[256];
        cr_assert_eq(decode_image(ctx, data, n, &im, why, sizeof why), -1);
        free(data);
        free(path);
        char *good = corpus("valid_444.jpg");
        expect_pil_pixels(ctx, good, "broken_valid_444_jpg.npy");
        free(good);
    }
    decode_ctx_free(ctx);
}

Test(decode, pixel_limit_read_from_header)
{
    decode_ctx *ctx = decode_ctx_new(&(decode_options){.max_pixels = 67 * 45 - 1});
    char *path = corpus("valid_420.jpg");
    size_t n;
    uint8_t *data = read_file(path, &n);
    decode_rgb im;
    char why[256];
    cr_assert_eq(decode_image(ctx, data, n, &im, why, sizeof why), -1);
    cr_assert(strstr(why, "exceeds"), "%s", why);
    free(data);
    free(path);
    decode_ctx_free(ctx);
}

Test(decode, sniffs_formats_by_content)
{
    cr_assert_str_eq(decode_sniff_format((const uint8_t *)"\xff\xd8\xff\xe0", 4), "JPEG");
    cr_assert_str_eq(decode_sniff_format((const uint8_t *)"\x89PNG\r\n\x1a\n", 8), "PNG");
    cr_assert_str_eq(decode_sniff_format((const uint8_t *)"GIF89a", 6), "GIF");
    cr_assert_str_eq(decode_sniff_format((const uint8_t *)"RIFF\0\0\0\0WEBP", 12), "WEBP");
    cr_assert_null(decode_sniff_format((const uint8_t *)"hello", 5));
    cr_assert_null(decode_sniff_format((const uint8_t *)"\xff", 1));
}

/* ---- dataset sources ------------------------------------------------------------------------- */

Test(decode, imagefolder_order_is_torchvision)
{
    char *root = test_make_tmpdir();
    make_subdirs(root, "b_dogs/sub");
    make_subdirs(root, "a_cats");
    make_subdirs(root, "b_dogs/sub-x");
    const char *files[] = {"a_cats/Z.JPG", "a_cats/a.png", "a_cats/notes.txt", "b_dogs/sub/y.jpeg",
                           "b_dogs/x.webp", "b_dogs/sub-x/w.tif", "a_cats/b.Jpeg"};
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        char *p = path_join(root, files[i]);
        write_bytes(p, "x", 1);
        free(p);
    }
    decode_imagefolder f;
    char *err = NULL;
    cr_assert_eq(decode_imagefolder_scan(root, &f, &err), 0, "%s", err);
    /* torchvision: classes sorted; folders of a class sorted by path ("sub-x" < "sub" + "/"
     * is false: "b_dogs/sub" < "b_dogs/sub-x"), files sorted, extensions case-insensitive. */
    const char *want[] = {"a_cats/Z.JPG", "a_cats/a.png", "a_cats/b.Jpeg", "b_dogs/x.webp", "b_dogs/sub/y.jpeg",
                          "b_dogs/sub-x/w.tif"};
    const int64_t targets[] = {0, 0, 0, 1, 1, 1};
    cr_assert_eq(f.count, ARRAY_LEN(want));
    cr_assert_eq(f.n_classes, 2);
    for (size_t i = 0; i < f.count; i++) {
        char *p = path_join(root, want[i]);
        cr_assert_str_eq(f.paths[i], p);
        cr_assert_eq(f.targets[i], targets[i]);
        free(p);
    }
    decode_imagefolder_free(&f);
    make_subdirs(root, "c_empty");
    cr_assert_eq(decode_imagefolder_scan(root, &f, &err), -1);
    cr_assert(strstr(err, "c_empty"), "%s", err);
    free(err);
    rm_tree(root);
}

/* A numpy '<U' array as np.save writes it (header padded to 128 bytes). */
static size_t unicode_npy(uint8_t *out, const char *const *items, size_t n, size_t width)
{
    char dict[128];
    int len = snprintf(dict, sizeof dict, "{'descr': '<U%zu', 'fortran_order': False, 'shape': (%zu,), }", width, n);
    size_t header = 128;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)(header - 10);
    out[9] = 0;
    memset(out + 10, ' ', header - 10);
    memcpy(out + 10, dict, (size_t)len);
    out[header - 1] = '\n';
    uint32_t *cp = (uint32_t *)(out + header);
    memset(cp, 0, n * width * 4);
    for (size_t i = 0; i < n; i++) {
        /* Tiny UTF-8 decoder for the test strings (ASCII and two-byte sequences). */
        const unsigned char *s = (const unsigned char *)items[i];
        for (size_t k = 0; *s; k++)
            if (*s < 0x80) {
                cp[i * width + k] = *s++;
            } else {
                cp[i * width + k] = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
                s += 2;
            }
    }
    return header + n * width * 4;
}

Test(decode, filelist_reads_numpy_unicode)
{
    const char *const items[] = {"/data/a.jpg", "relative/b.png", "/data/caf\xc3\xa9.jpg"};
    uint8_t buf[1024];
    size_t len = unicode_npy(buf, items, 3, 16);
    char **paths;
    size_t count;
    char *err = NULL;
    cr_assert_eq(decode_filelist_parse(buf, len, "test", &paths, &count, &err), 0, "%s", err);
    cr_assert_eq(count, 3);
    for (size_t i = 0; i < 3; i++)
        cr_assert_str_eq(paths[i], items[i]);
    decode_filelist_free(paths, count);
    cr_assert_eq(decode_filelist_parse(buf, len - 4, "test", &paths, &count, &err), -1, "short file accepted");
    free(err);
    err = NULL;
    memcpy(buf + 21, "<f4", 3); /* 'descr': '<f4' is not a file list */
    cr_assert_eq(decode_filelist_parse(buf, len, "test", &paths, &count, &err), -1);
    free(err);
}

Test(decode, labels_int32_become_int64)
{
    char *dir = test_make_tmpdir();
    char *path = path_join(dir, "labels.npy");
    const int32_t values[] = {3, -1, 7, 2147483647};
    size_t shape[] = {4};
    cr_assert_eq(npy_write(path, NPY_I4, 1, shape, values, NULL), 0);
    int64_t *labels;
    size_t count;
    char *err = NULL;
    cr_assert_eq(decode_labels_read(path, &labels, &count, &err), 0, "%s", err);
    cr_assert_eq(count, 4);
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(labels[i], values[i]);
    free(labels);
    unlink(path);
    free(path);
    test_rm_dir(dir);
}

/* ---- samplers, queue, reader ----------------------------------------------------------------- */

/* Over all ranks: how often each index appears in one epoch. */
static void count_epoch(decode_sampler s, int world, uint32_t epoch, int *seen)
{
    for (int r = 0; r < world; r++) {
        s.rank = r;
        s.world_size = world;
        size_t n = decode_sampler_len(&s);
        size_t *order = xmalloc((n ? n : 1) * sizeof *order);
        decode_sampler_epoch(&s, epoch, order);
        for (size_t k = 0; k < n; k++) {
            cr_assert_lt(order[k], s.dataset_len);
            seen[order[k]]++;
        }
        free(order);
    }
}

Test(decode, distributed_sampler_covers_each_index_once)
{
    decode_sampler s = {.kind = DECODE_SAMPLER_DISTRIBUTED, .dataset_len = 12, .seed = 5};
    int seen[12] = {0};
    count_epoch(s, 3, 0, seen);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(seen[i], 1, "index %d seen %d times", i, seen[i]);
    /* 10 samples on 4 ranks: padded to 12 by repeating 2 from the shuffled start. */
    s.dataset_len = 10;
    int seen2[10] = {0}, total = 0, twice = 0;
    count_epoch(s, 4, 1, seen2);
    for (int i = 0; i < 10; i++) {
        cr_assert(seen2[i] == 1 || seen2[i] == 2);
        total += seen2[i];
        twice += seen2[i] == 2;
    }
    cr_assert_eq(total, 12);
    cr_assert_eq(twice, 2);
}

Test(decode, sampler_shuffles_per_epoch_deterministically)
{
    decode_sampler s = {.kind = DECODE_SAMPLER_DISTRIBUTED, .dataset_len = 50, .world_size = 1, .seed = 1};
    size_t a[50], b[50], c[50];
    decode_sampler_epoch(&s, 0, a);
    decode_sampler_epoch(&s, 0, b);
    decode_sampler_epoch(&s, 1, c);
    cr_assert_arr_eq(a, b, sizeof a);
    cr_assert(memcmp(a, c, sizeof a), "epochs 0 and 1 gave the same order");
    s.kind = DECODE_SAMPLER_DEBUGGING;
    s.world_size = 2;
    s.rank = 1;
    decode_sampler_epoch(&s, 3, a);
    for (size_t k = 0; k < decode_sampler_len(&s); k++)
        cr_assert_eq(a[k], 1 + 2 * k);
}

Test(decode, stateful_sampler_keeps_contiguous_shards)
{
    decode_sampler s = {.kind = DECODE_SAMPLER_STATEFUL, .dataset_len = 11, .world_size = 3, .rank = 1};
    cr_assert_eq(decode_sampler_len(&s), 3); /* 11 - 11 % 3 = 9 samples, 3 per rank */
    size_t order[3];
    decode_sampler_epoch(&s, 2, order);
    int seen[3] = {0};
    for (size_t k = 0; k < 3; k++) {
        cr_assert(order[k] >= 3 && order[k] < 6, "rank 1 got %zu", order[k]);
        seen[order[k] - 3]++;
    }
    cr_assert(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
}

Test(decode, queue_dataset_moves_as_vissl)
{
    decode_queue q;
    decode_queue_init(&q, 2);
    uint8_t a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[3] = {7, 8, 9};
    decode_queued_image out;
    decode_queue_on_success(&q, a, 1, 1);
    cr_assert_not(decode_queue_on_failure(&q, &out), "a replacement before queue_size images");
    decode_queue_on_success(&q, b, 1, 1); /* enqueue full → both move to dequeue */
    decode_queue_on_success(&q, c, 1, 1);
    cr_assert(decode_queue_on_failure(&q, &out));
    cr_assert_eq(out.px[0], 1);
    free(out.px);
    cr_assert(decode_queue_on_failure(&q, &out));
    cr_assert_eq(out.px[0], 4);
    free(out.px);
    cr_assert_not(decode_queue_on_failure(&q, &out), "an image handed out twice");
    decode_queue_free(&q);
}

static void check_reader(bool force_pread)
{
    char *dir = test_make_tmpdir();
    char *paths[6];
    for (int i = 0; i < 6; i++)
        paths[i] = xasprintf("%s/f%d", dir, i);
    for (int i = 0; i < 4; i++) {
        char text[32];
        int n = snprintf(text, sizeof text, "file number %d", i);
        write_bytes(paths[i], text, i == 2 ? 0 : (size_t)n);
    }
    mkdir(paths[4], 0700); /* a folder named like a file */
    /* paths[5] does not exist */
    decode_reader *r = decode_reader_new(2, force_pread);
    cr_assert_eq(decode_reader_uses_io_uring(r) && force_pread, false);
    int pushed = 0, popped = 0;
    while (popped < 6) {
        while (pushed < 6 && decode_reader_room(r) > 0) {
            decode_reader_push(r, paths[pushed], (uint64_t)pushed);
            pushed++;
        }
        decode_file f;
        cr_assert_eq(decode_reader_pop(r, &f), 1);
        cr_assert_eq(f.tag, (uint64_t)popped);
        if (popped == 2) {
            cr_assert(f.error == 0 && f.len == 0);
        } else if (popped < 4) {
            char want[32];
            snprintf(want, sizeof want, "file number %d", popped);
            cr_assert(f.error == 0 && f.len == strlen(want) && !memcmp(f.data, want, f.len));
        } else {
            cr_assert_eq(f.error, popped == 4 ? EISDIR : ENOENT, "file %d: error %d", popped, f.error);
        }
        free(f.data);
        popped++;
    }
    decode_file f;
    cr_assert_eq(decode_reader_pop(r, &f), 0);
    decode_reader_free(r);
    for (int i = 0; i < 6; i++)
        free(paths[i]);
    rm_tree(dir);
}

Test(decode, reader_io_uring_in_order)
{
    check_reader(false);
}

Test(decode, reader_pread_fallback)
{
    check_reader(true);
}

/* ---- the stage, end to end ------------------------------------------------------------------- */

typedef struct {
    int64_t idx, label, valid;
    uint64_t seq;
    uint32_t epoch;
    uint64_t h, w;
} sample_seen;

/* Read back every record of a file: write them to `out` (up to cap), return how many. */
static size_t read_records(const char *path, sample_seen *out, size_t cap)
{
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0, "cannot open %s", path);
    rec_buf b = {0};
    rec_view v;
    char *err = NULL;
    size_t n = 0;
    int rc;
    while ((rc = rec_fd_read(fd, &b, &v, NULL, &err)) == 1) {
        if (v.hdr->kind == REC_EOS)
            break;
        cr_assert_lt(n, cap);
        int d = rec_find(&v, "data.0"), l = rec_find(&v, "label"), va = rec_find(&v, "data_valid"),
            ix = rec_find(&v, "data_idx");
        cr_assert(d >= 0 && l >= 0 && va >= 0 && ix >= 0, "record %zu lacks a tensor", n);
        cr_assert_eq(v.tensors[d].dtype, REC_U8);
        cr_assert_eq(v.tensors[d].shape[2], 3);
        out[n] = (sample_seen){.idx = *(const int64_t *)rec_data(&v, ix), .label = *(const int64_t *)rec_data(&v, l),
                               .valid = *(const int64_t *)rec_data(&v, va), .seq = v.hdr->seq, .epoch = v.hdr->epoch,
                               .h = v.tensors[d].shape[0], .w = v.tensors[d].shape[1]};
        n++;
    }
    cr_assert_neq(rc, -1, "%s: %s", path, err);
    rec_buf_free(&b);
    close(fd);
    return n;
}

/* A disk_folder tree: class 0 "bad" holds broken files, class 1 "good" valid ones. */
static const char *const tree_bad[] = {"bad_truncated.jpg", "bad_text.jpg", "bad_zero.jpg"};
static const char *const tree_good[] = {"valid_420.jpg", "valid_cmyk.jpg", "valid_alpha.png", "valid_gray16.png",
                                        "valid_progressive.jpg", "valid_1x1.jpg", "valid_palette.png"};

static char *make_tree(void)
{
    char *root = test_make_tmpdir();
    make_subdirs(root, "bad");
    make_subdirs(root, "good");
    for (size_t i = 0; i < ARRAY_LEN(tree_bad); i++) {
        char *from = corpus(tree_bad[i]), *to = xasprintf("%s/bad/%zu.jpg", root, i);
        copy_file(from, to);
        free(from);
        free(to);
    }
    for (size_t i = 0; i < ARRAY_LEN(tree_good); i++) {
        char *from = corpus(tree_good[i]), *to = xasprintf("%s/good/%zu_%s", root, i, tree_good[i]);
        copy_file(from, to);
        free(from);
        free(to);
    }
    return root;
}

static char *write_config(const char *root, const char *extra)
{
    char *text = xasprintf("# @package _global_\nconfig:\n  SEED_VALUE: 7\n  DATA:\n    TRAIN:\n"
                           "      DATA_SOURCES: [disk_folder]\n      DATASET_NAMES: [test_tree]\n"
                           "      DATA_PATHS: [%s]\n      LABEL_SOURCES: [disk_folder]\n      LABEL_PATHS: [%s]\n"
                           "      BATCHSIZE_PER_REPLICA: 2\n      DEFAULT_GRAY_IMG_SIZE: 16\n%s",
                           root, root, extra);
    char *path = path_join(root, "config.yaml");
    write_bytes(path, text, strlen(text));
    free(text);
    return path;
}

static int run_decode(const char *config, const char *args, char **output)
{
    char *bin = test_build_path("selfsup-decode");
    char *cmd = xasprintf("SELFSUP_LOG=warn %s -c %s %s", bin, config, args);
    int rc = test_run(cmd, output);
    free(cmd);
    free(bin);
    return rc;
}

Test(decode, stage_two_ranks_cover_the_epoch, .timeout = 60)
{
    char *root = make_tree();
    char *config = write_config(root, "");
    enum { N = ARRAY_LEN(tree_bad) + ARRAY_LEN(tree_good) };
    sample_seen seen[2][3 * N];
    size_t got[2];
    for (int rank = 0; rank < 2; rank++) {
        char *args = xasprintf("--rank %d --world-size 2 --epoch 4 --epochs 2 --out file:%s/rank%d.rec", rank, root, rank);
        char *output;
        int rc = run_decode(config, args, &output);
        cr_assert_eq(rc, 0, "selfsup-decode failed: %s", output);
        /* Each broken path is logged once, although it is read in two epochs. */
        for (size_t i = 0; i < ARRAY_LEN(tree_bad); i++) {
            char *name = xasprintf("/bad/%zu.jpg:", i);
            const char *first = strstr(output, name);
            cr_assert(!first || !strstr(first + 1, name), "%s logged twice: %s", name, output);
            free(name);
        }
        free(output);
        free(args);
        char *path = xasprintf("%s/rank%d.rec", root, rank);
        got[rank] = read_records(path, seen[rank], 3 * N);
        free(path);
        cr_assert_eq(got[rank], 2 * (N / 2), "rank %d wrote %zu records", rank, got[rank]);
    }
    for (uint32_t epoch = 4; epoch < 6; epoch++) {
        int count[N] = {0};
        for (int rank = 0; rank < 2; rank++)
            for (size_t k = 0; k < got[rank]; k++) {
                sample_seen *s = &seen[rank][k];
                if (s->epoch != epoch)
                    continue;
                cr_assert_eq(s->seq, k - (epoch - 4) * (N / 2), "seq is not the position in the epoch");
                cr_assert(s->idx >= 0 && s->idx < N);
                count[s->idx]++;
                bool bad = (size_t)s->idx < ARRAY_LEN(tree_bad);
                cr_assert_eq(s->label, bad ? 0 : 1, "index %lld: label %lld", (long long)s->idx, (long long)s->label);
                cr_assert_eq(s->valid, bad ? -1 : 1, "index %lld: data_valid %lld", (long long)s->idx, (long long)s->valid);
                if (bad)
                    cr_assert(s->h == 16 && s->w == 16, "the gray image is DEFAULT_GRAY_IMG_SIZE square");
            }
        for (int i = 0; i < N; i++)
            cr_assert_eq(count[i], 1, "epoch %u: index %d seen %d times", epoch, i, count[i]);
    }
    free(config);
    rm_tree(root);
}

Test(decode, stage_reading_and_threads_do_not_change_the_bytes, .timeout = 60)
{
    char *root = make_tree();
    char *config = write_config(root, "      ENABLE_QUEUE_DATASET: True\n");
    char *output;
    char *args = xasprintf("--epochs 2 --start-iter 1 --io-depth 3 --out file:%s/a.rec", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    free(output);
    free(args);
    args = xasprintf("--epochs 2 --start-iter 1 --no-io-uring --out file:%s/b.rec", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    free(output);
    free(args);
    args = xasprintf("--epochs 2 --start-iter 1 --threads 3 --out file:%s/c.rec", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    free(output);
    free(args);
    char *a = xasprintf("%s/a.rec", root), *b = xasprintf("%s/b.rec", root), *c = xasprintf("%s/c.rec", root);
    size_t na, nb, nc;
    char *da = read_whole_file(a, &na), *db = read_whole_file(b, &nb), *dc = read_whole_file(c, &nc);
    cr_assert(da && db && na == nb && !memcmp(da, db, na), "io_uring and pread runs differ");
    cr_assert(dc && na == nc && !memcmp(da, dc, na), "1 and 3 decoding threads give different records");
    free(dc);
    free(c);
    sample_seen seen[40];
    size_t n = read_records(a, seen, 40);
    /* --start-iter 1 with batch 2 skips the first 2 samples of the first epoch only. */
    enum { N = ARRAY_LEN(tree_bad) + ARRAY_LEN(tree_good) };
    cr_assert_eq(n, 2 * N - 2);
    cr_assert_eq(seen[0].seq, 2);
    free(da);
    free(db);
    free(a);
    free(b);
    free(config);
    rm_tree(root);
}

Test(decode, stage_config_errors_exit_2, .timeout = 60)
{
    char *root = make_tree();
    char *config = write_config(root, "");
    char *output;
    int rc = run_decode(config, "--out file:/dev/null 'config.DATA.TRAIN.DATASET_NAMES=[a,b]'", &output);
    cr_assert_eq(rc, 2, "names/sources mismatch: exit %d: %s", rc, output);
    free(output);
    rc = run_decode(config, "--out file:/dev/null 'config.DATA.TRAIN.DATA_PATHS=[/nonexistent/selfsup]'", &output);
    cr_assert_eq(rc, 2, "missing data path: exit %d: %s", rc, output);
    free(output);
    rc = run_decode(config, "--out file:/dev/null 'config.DATA.TRAIN.DATA_PATHS=[]'", &output);
    cr_assert_eq(rc, 2, "dataset not in the catalog: exit %d: %s", rc, output);
    free(output);
    free(config);
    rm_tree(root);
}

Test(decode, stage_synthetic_and_filelist_sources, .timeout = 60)
{
    char *root = make_tree();
    /* A file list of 4 paths (one broken) and int32 labels, beside a synthetic source. */
    char *p0 = corpus("valid_444.jpg"), *p1 = corpus("bad_text.jpg"), *p2 = corpus("valid_gray.png"),
         *p3 = corpus("valid_rgb16.png");
    char cwd[4096];
    cr_assert(getcwd(cwd, sizeof cwd));
    char *abs[4];
    const char *rel[4] = {p0, p1, p2, p3};
    for (int i = 0; i < 4; i++)
        abs[i] = rel[i][0] == '/' ? xstrdup(rel[i]) : path_join(cwd, rel[i]);
    uint8_t buf[4096];
    size_t len = unicode_npy(buf, (const char *const *)abs, 4, 120);
    char *list = path_join(root, "images.npy"), *labels = path_join(root, "labels.npy");
    write_bytes(list, buf, len);
    const int32_t lv[] = {10, 11, 12, 13};
    size_t shape[] = {4};
    cr_assert_eq(npy_write(labels, NPY_I4, 1, shape, lv, NULL), 0);
    /* Three sources, two of them files, with a read window of 1: the stage must widen it. */
    char *text = xasprintf("# @package _global_\nconfig:\n  DATA:\n    TRAIN:\n"
                           "      DATA_SOURCES: [disk_filelist, synthetic, disk_filelist]\n"
                           "      DATASET_NAMES: [mine, synthetic, mine]\n      DATA_PATHS: [%s, '', %s]\n"
                           "      LABEL_SOURCES: [disk_filelist, disk_filelist, disk_filelist]\n"
                           "      LABEL_PATHS: [%s, %s, %s]\n"
                           "      USE_DEBUGGING_SAMPLER: True\n      DEFAULT_GRAY_IMG_SIZE: 8\n",
                           list, list, labels, labels, labels);
    char *config = path_join(root, "filelist.yaml");
    write_bytes(config, text, strlen(text));
    char *output, *args = xasprintf("--io-depth 1 --out file:%s/fl.rec", root);
    int rc = run_decode(config, args, &output);
    cr_assert_eq(rc, 0, "%s", output);
    free(output);
    char *out = xasprintf("%s/fl.rec", root);
    sample_seen seen[8];
    cr_assert_eq(read_records(out, seen, 8), 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(seen[i].idx, i, "the debugging sampler keeps the order");
        cr_assert_eq(seen[i].label, 10 + i);
        cr_assert_eq(seen[i].valid, i == 1 ? -1 : 1);
    }
    for (int i = 0; i < 4; i++)
        free(abs[i]);
    free(p0), free(p1), free(p2), free(p3);
    free(out), free(args), free(config), free(text), free(list), free(labels);
    rm_tree(root);
}

/* ENABLE_QUEUE_DATASET with a queue of 1 (BATCHSIZE_PER_REPLICA): each broken image is
 * replaced by the valid image before it, with data_valid = 1. */
Test(decode, stage_queue_dataset_replaces_broken_images, .timeout = 60)
{
    char *root = test_make_tmpdir();
    const char *names[] = {"valid_444.jpg", "bad_text.jpg", "valid_1x1.jpg", "bad_zero.jpg"};
    char cwd[4096];
    cr_assert(getcwd(cwd, sizeof cwd));
    char *abs[4];
    for (int i = 0; i < 4; i++) {
        char *p = corpus(names[i]);
        abs[i] = p[0] == '/' ? xstrdup(p) : path_join(cwd, p);
        free(p);
    }
    uint8_t buf[4096];
    size_t len = unicode_npy(buf, (const char *const *)abs, 4, 120);
    char *list = path_join(root, "images.npy");
    write_bytes(list, buf, len);
    char *text = xasprintf("# @package _global_\nconfig:\n  DATA:\n    TRAIN:\n"
                           "      DATA_SOURCES: [disk_filelist]\n      DATASET_NAMES: [mine]\n"
                           "      DATA_PATHS: [%s]\n      USE_DEBUGGING_SAMPLER: True\n"
                           "      ENABLE_QUEUE_DATASET: True\n      BATCHSIZE_PER_REPLICA: 1\n",
                           list);
    char *config = path_join(root, "queue.yaml");
    write_bytes(config, text, strlen(text));
    char *output, *args = xasprintf("--threads 2 --out file:%s/q.rec", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    free(output);
    char *out = xasprintf("%s/q.rec", root);
    sample_seen seen[8];
    cr_assert_eq(read_records(out, seen, 8), 4);
    const uint64_t want_w[] = {67, 67, 1, 1};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(seen[i].valid, 1, "sample %d: data_valid %lld", i, (long long)seen[i].valid);
        cr_assert_eq(seen[i].w, want_w[i], "sample %d: width %llu", i, (unsigned long long)seen[i].w);
        cr_assert_eq(seen[i].label, i, "no label source: the label is the sample index");
    }
    for (int i = 0; i < 4; i++)
        free(abs[i]);
    free(out), free(args), free(config), free(text), free(list);
    rm_tree(root);
}

/* An image too big for the output slot becomes the gray image instead of ending the run. */
Test(decode, stage_image_larger_than_slot_is_invalid, .timeout = 60)
{
    char *root = make_tree();
    char *config = write_config(root, "      USE_DEBUGGING_SAMPLER: True\n");
    char *output, *args = xasprintf("--slot-bytes 8192 --out file:%s/s.rec", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    cr_assert(strstr(output, "do not fit the output slot"), "%s", output);
    free(output);
    char *out = xasprintf("%s/s.rec", root);
    enum { N = ARRAY_LEN(tree_bad) + ARRAY_LEN(tree_good) };
    sample_seen seen[N];
    cr_assert_eq(read_records(out, seen, N), N);
    for (size_t i = 0; i < N; i++) {
        bool tiny = i == ARRAY_LEN(tree_bad) + 5; /* valid_1x1.jpg fits */
        cr_assert_eq(seen[i].valid, tiny ? 1 : -1, "sample %zu: data_valid %lld", i, (long long)seen[i].valid);
        cr_assert_eq(seen[i].w, tiny ? 1u : 16u);
    }
    free(out), free(args), free(config);
    rm_tree(root);
}

/* COPY_TO_LOCAL_DISK: the folder is copied once, read from the copy, and the records do not
 * change. */
Test(decode, stage_copy_to_local_disk, .timeout = 60)
{
    char *root = make_tree();
    char *dest = test_make_tmpdir();
    char *config = write_config(root, "");
    char *output, *args = xasprintf("--out file:%s/plain.rec", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    free(output);
    free(args);
    args = xasprintf("--out file:%s/copied.rec config.DATA.TRAIN.COPY_TO_LOCAL_DISK=True "
                     "config.DATA.TRAIN.COPY_DESTINATION_DIR=%s",
                     root, dest);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    cr_assert(strstr(output, dest), "the invalid images were not read from the copy: %s", output);
    free(output);
    char *marker = xasprintf("%s/%s/copy_complete", dest, strrchr(root, '/') + 1);
    cr_assert(path_exists(marker), "no %s", marker);
    char *a = xasprintf("%s/plain.rec", root), *b = xasprintf("%s/copied.rec", root);
    size_t na, nb;
    char *da = read_whole_file(a, &na), *db = read_whole_file(b, &nb);
    cr_assert(da && db && na == nb && !memcmp(da, db, na), "reading the local copy changed the records");
    free(da), free(db), free(a), free(b), free(marker), free(args);
    /* A copy that cannot be made (the destination is a file) is the machine's failure, not
     * the config's: exit 1, not 2, and nothing written. */
    char *blocker = xasprintf("%s/not-a-dir", dest);
    write_bytes(blocker, "x", 1);
    args = xasprintf("--out file:%s/failed.rec config.DATA.TRAIN.COPY_TO_LOCAL_DISK=True "
                     "config.DATA.TRAIN.COPY_DESTINATION_DIR=%s",
                     root, blocker);
    cr_assert_eq(run_decode(config, args, &output), 1, "%s", output);
    cr_assert(strstr(output, "COPY_TO_LOCAL_DISK"), "%s", output);
    free(output), free(args), free(blocker), free(config);
    rm_tree(dest);
    rm_tree(root);
}

/* run_decode at info level, where the end-of-run counts are logged. */
static int run_decode_info(const char *config, const char *args, char **output)
{
    char *bin = test_build_path("selfsup-decode");
    char *cmd = xasprintf("SELFSUP_LOG=info %s -c %s %s", bin, config, args);
    int rc = test_run(cmd, output);
    free(cmd);
    free(bin);
    return rc;
}

/* An image decoded but too big for the slot becomes the gray one: one invalid image, not a
 * decoded one as well. Of the tree's 10 images only valid_1x1.jpg fits 8 KiB. */
Test(decode, stage_image_larger_than_slot_counts_once_as_invalid, .timeout = 60)
{
    char *root = make_tree();
    char *config = write_config(root, "      USE_DEBUGGING_SAMPLER: True\n");
    char *output, *args = xasprintf("--slot-bytes 8192 --out file:%s/s.rec", root);
    cr_assert_eq(run_decode_info(config, args, &output), 0, "%s", output);
    cr_expect(strstr(output, "1 images decoded, 9 invalid"), "%s", output);
    cr_expect(strstr(output, "split train: 9 of 10 images invalid (90.0%), epoch 0"), "%s", output);
    free(output), free(args), free(config);
    rm_tree(root);
}

/* A tree whose every image is broken: the three bad files of make_tree only. */
static char *make_broken_tree(void)
{
    char *root = test_make_tmpdir();
    make_subdirs(root, "bad");
    for (size_t i = 0; i < ARRAY_LEN(tree_bad); i++) {
        char *from = corpus(tree_bad[i]), *to = xasprintf("%s/bad/%zu.jpg", root, i);
        copy_file(from, to);
        free(from);
        free(to);
    }
    return root;
}

/* Every epoch with an invalid image ends with a summary; the default share (1) only warns,
 * even when every image was invalid; a lower SELFSUP.MAX_INVALID_IMAGES_SHARE stops the stage
 * (exit 1) after the epoch that passes it, naming the split and the key. */
Test(decode, stage_invalid_images_are_summed_up_and_can_stop_the_run, .timeout = 60)
{
    char *root = make_broken_tree(), *config = write_config(root, ""), *output;
    char *args = xasprintf("--epochs 2 --out file:%s/a.rec", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    cr_expect(strstr(output, "split train: 3 of 3 images invalid (100.0%), epoch 0"), "%s", output);
    cr_expect(strstr(output, "split train: 3 of 3 images invalid (100.0%), epoch 1"), "%s", output);
    free(output), free(args);
    args = xasprintf("--epochs 2 --out file:%s/b.rec config.SELFSUP.MAX_INVALID_IMAGES_SHARE=0.99", root);
    cr_assert_eq(run_decode(config, args, &output), 1, "%s", output);
    cr_expect(strstr(output, "split train: 3 of 3 images invalid (100.0%), epoch 0") &&
                  strstr(output, "config.SELFSUP.MAX_INVALID_IMAGES_SHARE"),
              "%s", output);
    cr_expect(!strstr(output, "epoch 1"), "the stage went on after the epoch that failed: %s", output);
    free(output), free(args), free(config);
    rm_tree(root);

    /* 3 of 10: a share of 0.3 is allowed, 0.29 is not */
    root = make_tree();
    config = write_config(root, "");
    args = xasprintf("--out file:%s/c.rec config.SELFSUP.MAX_INVALID_IMAGES_SHARE=0.3", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    cr_expect(strstr(output, "split train: 3 of 10 images invalid (30.0%)"), "%s", output);
    free(output), free(args);
    args = xasprintf("--out file:%s/d.rec config.SELFSUP.MAX_INVALID_IMAGES_SHARE=0.29", root);
    cr_assert_eq(run_decode(config, args, &output), 1, "%s", output);
    cr_expect(strstr(output, "MAX_INVALID_IMAGES_SHARE"), "%s", output);
    free(output), free(args), free(config);
    rm_tree(root);
}

/* Without an invalid image there is nothing to sum up. */
Test(decode, stage_without_invalid_images_says_nothing_of_them, .timeout = 60)
{
    char *root = test_make_tmpdir();
    make_subdirs(root, "good");
    char *from = corpus("valid_420.jpg"), *to = xasprintf("%s/good/a.jpg", root);
    copy_file(from, to);
    free(from), free(to);
    char *config = write_config(root, ""), *output;
    char *args = xasprintf("--out file:%s/a.rec config.SELFSUP.MAX_INVALID_IMAGES_SHARE=0", root);
    cr_assert_eq(run_decode(config, args, &output), 0, "%s", output);
    cr_expect(!strstr(output, "images invalid"), "%s", output);
    free(output), free(args), free(config);
    rm_tree(root);
}
