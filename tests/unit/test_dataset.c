/*
 * test_dataset.c — `selfsup dataset fashion-mnist DIR` end to end, through the real binary;
 * and the decode stage's dataset (stages/decode/dataset.h): label .npy files of rows.
 *
 *  - a small conversion (--limit 50) checked by an independent reader: Python reads the
 *    package's IDX files itself (gzip + struct), numpy.load reads the file lists, PIL reads
 *    every PNG, and the folder layout, labels, paths and catalog must all agree;
 *  - the completion marker: a second run says "already converted", --force converts again, an
 *    interrupted run (no marker) is converted again with stale files removed;
 *  - usage errors exit 2, missing package files exit 1 with the apt-get line;
 *  - `selfsup dataset jigsaw-perms`: the permutation sets VISSL's generate_jigsaw_permutations.py
 *    makes (tests/golden/make_jigsaw_fixtures.py runs its loop), element for element;
 *  - `selfsup dataset voc2007|voc2012`: the files VISSL's create_voc_data_files.py writes from the
 *    same class lists (tests/golden/make_voc_fixtures.py runs its functions), byte for byte;
 *  - `selfsup dataset coco2014`: the files create_coco_data_files.py writes from the same
 *    instance files (make_coco_fixtures.py), byte for byte;
 *  - `selfsup dataset imagenet`: create_imagenet_data_files.py's files (make_imagenet_fixtures.py:
 *    its order sorted, the command's default) byte for byte, and with --listdir-order the order
 *    this test reads from the directories itself;
 *  - `selfsup dataset inaturalist2018`: create_inaturalist2018_data_files.py's files
 *    (make_inat_fixtures.py) byte for byte, and a file name it cannot read refused.
 */
#include "config.h"
#include "decode/dataset.h"
#include "decode/filelist.h"
#include "npy.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FMNIST_SRC "/usr/share/datasets/fashion-mnist"

static const char *const CLASS_DIRS[10] = {
    "0_tshirt_top", "1_trouser", "2_pullover", "3_dress", "4_coat",
    "5_sandal",     "6_shirt",   "7_sneaker",  "8_bag",   "9_ankle_boot",
};

static void need_package(void)
{
    if (!path_exists(FMNIST_SRC "/train-images-idx3-ubyte.gz") && !path_exists(FMNIST_SRC "/train-images-idx3-ubyte"))
        cr_skip_test("dataset-fashion-mnist is not installed (make deps)");
}

static bool have_python_readers(void)
{
    return system("/usr/bin/python3 -c 'import numpy, PIL.Image' >/dev/null 2>&1") == 0;
}

/* Run `selfsup dataset ARGS`; returns the exit status. */
static int dataset(const char *args, char **output)
{
    char *bin = test_build_path("selfsup");
    char *cmd = xasprintf("'%s' dataset %s", bin, args);
    int rc = test_run(cmd, output);
    free(cmd);
    free(bin);
    return rc;
}

static void rm_tree(char *dir)
{
    char *cmd = xasprintf("rm -rf '%s'", dir), *out;
    test_run(cmd, &out);
    free(out);
    free(cmd);
    free(dir);
}

static size_t count_pngs(const char *dir, const char *split)
{
    size_t n = 0;
    for (int c = 0; c < 10; c++) {
        char *cls = xasprintf("%s/disk_folder/%s/%s", dir, split, CLASS_DIRS[c]);
        n += test_count_files(cls);
        free(cls);
    }
    return n;
}

/* The independent reader: argv[1] = converted DIR, argv[2] = images per split, argv[3] = the
 * package's directory. Prints OK or raises. */
static const char CHECK_PY[] =
    "import gzip, json, os, struct, sys\n"
    "import numpy as np\n"
    "from PIL import Image\n"
    "root, limit, src = os.path.realpath(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
    "classes = ['0_tshirt_top', '1_trouser', '2_pullover', '3_dress', '4_coat', '5_sandal',\n"
    "           '6_shirt', '7_sneaker', '8_bag', '9_ankle_boot']\n"
    "def idx(name):\n"
    "    path = os.path.join(src, name)\n"
    "    data = gzip.open(path + '.gz').read() if os.path.exists(path + '.gz') else open(path, 'rb').read()\n"
    "    magic, = struct.unpack('>I', data[:4])\n"
    "    assert magic >> 8 == 8, hex(magic)\n"
    "    nd = magic & 0xff\n"
    "    dims = struct.unpack('>' + 'I' * nd, data[4:4 + 4 * nd])\n"
    "    flat = data[4 + 4 * nd:]\n"
    "    assert len(flat) == int(np.prod(dims))\n"
    "    return dims, flat\n"
    "cat = json.load(open(os.path.join(root, 'dataset_catalog.json')))\n"
    "assert sorted(cat) == ['fashion_mnist_filelist', 'fashion_mnist_folder'], sorted(cat)\n"
    "for split, prefix in (('train', 'train'), ('val', 't10k')):\n"
    "    (n, h, w), pixels = idx(prefix + '-images-idx3-ubyte')\n"
    "    (nl,), labels = idx(prefix + '-labels-idx1-ubyte')\n"
    "    assert (h, w) == (28, 28) and nl == n\n"
    "    count = min(limit, n)\n"
    "    folder = os.path.join(root, 'disk_folder', split)\n"
    "    images_npy = os.path.join(root, 'disk_filelist', split + '_images.npy')\n"
    "    labels_npy = os.path.join(root, 'disk_filelist', split + '_labels.npy')\n"
    "    assert cat['fashion_mnist_folder'][split] == [folder, folder], cat\n"
    "    assert cat['fashion_mnist_filelist'][split] == [images_npy, labels_npy], cat\n"
    "    paths = np.load(images_npy)\n"
    "    assert paths.dtype.kind == 'U' and paths.shape == (count,), (paths.dtype, paths.shape)\n"
    "    lab = np.load(labels_npy, allow_pickle=True, mmap_mode='r')\n"
    "    assert lab.dtype == np.int64 and lab.shape == (count,), (lab.dtype, lab.shape)\n"
    "    # ImageFolder's view: sorted class folders, in label order\n"
    "    assert sorted(os.listdir(folder)) == classes, os.listdir(folder)\n"
    "    seen = sorted(os.path.join(folder, c, f) for c in classes for f in os.listdir(os.path.join(folder, c)))\n"
    "    assert seen == sorted(paths.tolist()), (len(seen), count)\n"
    "    for k in range(count):\n"
    "        assert lab[k] == labels[k], (split, k, lab[k], labels[k])\n"
    "        p = str(paths[k])\n"
    "        assert p == os.path.join(folder, classes[labels[k]], '%05d.png' % k), p\n"
    "        im = Image.open(p)\n"
    "        assert im.format == 'PNG' and im.mode == 'L' and im.size == (28, 28), (p, im.mode, im.size)\n"
    "        want = np.frombuffer(pixels, np.uint8, 784, k * 784).reshape(28, 28)\n"
    "        assert (np.asarray(im) == want).all(), p\n"
    "print('OK')\n";

Test(dataset, fashion_mnist_limit_50_agrees_with_an_independent_reader)
{
    need_package();
    if (!have_python_readers())
        cr_skip_test("/usr/bin/python3 with numpy and PIL is not installed (make deps)");
    char *tmp = test_make_tmpdir();
    char *dir = path_join(tmp, "fmnist");
    char *args = xasprintf("fashion-mnist '%s' --limit 50", dir), *out;
    int rc = dataset(args, &out);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    free(out);
    cr_expect_eq(count_pngs(dir, "train"), 50);
    cr_expect_eq(count_pngs(dir, "val"), 50);
    char *marker = path_join(dir, ".complete");
    cr_expect(path_exists(marker), "no completion marker %s", marker);
    free(marker);

    char *script = test_write_temp("check_fmnist.py", CHECK_PY);
    char *cmd = xasprintf("/usr/bin/python3 '%s' '%s' 50 '%s'", script, dir, FMNIST_SRC);
    rc = test_run(cmd, &out);
    cr_expect_eq(rc, 0, "%s: exit %d\n%s", cmd, rc, out);
    cr_expect(strstr(out, "OK"), "%s", out);
    free(out);
    free(cmd);
    rm_tree(path_dirname(script));
    free(script);
    free(args);
    free(dir);
    rm_tree(tmp);
}

Test(dataset, complete_marker_skips_and_force_converts_again)
{
    need_package();
    char *dir = test_make_tmpdir();
    char *args = xasprintf("fashion-mnist '%s' --limit 10", dir), *out;
    int rc = dataset(args, &out);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    free(out);

    rc = dataset(args, &out);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "already converted"), "%s", out);
    free(out);

    /* a file of the conversion removed: --force writes it again */
    char *png = xasprintf("%s/disk_folder/val/%s", dir, "9_ankle_boot/00000.png");
    cr_assert(path_exists(png), "%s missing", png);
    unlink(png);
    char *forced = xasprintf("%s --force", args);
    rc = dataset(forced, &out);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    cr_expect(!strstr(out, "already converted"), "%s", out);
    cr_expect(path_exists(png), "--force did not write %s again", png);
    free(out);
    free(forced);
    free(png);
    free(args);
    rm_tree(dir);
}

Test(dataset, interrupted_conversion_is_redone_and_stale_files_removed)
{
    need_package();
    char *dir = test_make_tmpdir();
    char *args = xasprintf("fashion-mnist '%s' --limit 30", dir), *out;
    int rc = dataset(args, &out);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    free(out);
    cr_assert_eq(count_pngs(dir, "train"), 30);

    /* as if killed mid-run: no marker, a truncated PNG and a file of a larger conversion */
    char *marker = path_join(dir, ".complete");
    cr_assert_eq(unlink(marker), 0);
    char *stale = xasprintf("%s/disk_folder/train/3_dress/59999.png", dir);
    char *keep = xasprintf("%s/disk_folder/train/3_dress/notes.txt", dir);
    char *trunc = xasprintf("%s/disk_folder/train/9_ankle_boot/00000.png", dir);
    char *cmd = xasprintf("echo x > '%s'; echo y > '%s'; : > '%s'", stale, keep, trunc);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    free(out);
    free(cmd);

    free(args);
    args = xasprintf("fashion-mnist '%s' --limit 20", dir);
    rc = dataset(args, &out);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    cr_expect(!strstr(out, "already converted"), "%s", out);
    free(out);
    cr_expect(path_exists(marker));
    cr_expect(!path_exists(stale), "stale %s was kept", stale);
    cr_expect(path_exists(keep), "%s (not ours) was removed", keep);
    cr_expect_eq(count_pngs(dir, "train"), 20 + 1 /* notes.txt */);
    cr_expect_eq(count_pngs(dir, "val"), 20);
    size_t len = 0;
    char *png = read_whole_file(trunc, &len);
    cr_expect(png && len > 8 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8), "%s was not rewritten", trunc);
    free(png);

    /* the same request again, now complete */
    rc = dataset(args, &out);
    cr_expect_eq(rc, 0);
    cr_expect(strstr(out, "already converted"), "%s", out);
    free(out);
    free(marker);
    free(stale);
    free(keep);
    free(trunc);
    free(args);
    rm_tree(dir);
}

Test(dataset, unknown_dataset_name_exits_2)
{
    char *dir = test_make_tmpdir(), *out;
    char *args = xasprintf("imagenet-21k '%s'", dir);
    int rc = dataset(args, &out);
    cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "unknown dataset 'imagenet-21k'"), "%s", out);
    cr_expect(strstr(out, "fashion-mnist"), "the message should list the known names: %s", out);
    cr_expect_eq(test_count_files(dir), 0, "nothing may be written");
    free(out);
    free(args);
    rm_tree(dir);
}

Test(dataset, usage_errors_exit_2)
{
    const char *cases[][2] = {
        {"", "usage: selfsup dataset"},
        {"fashion-mnist", "no DIR"},
        {"fashion-mnist /tmp/x --limit", "--limit needs a positive number"},
        {"fashion-mnist /tmp/x --limit 0", "--limit needs a positive number"},
        {"fashion-mnist /tmp/x --limit -3", "--limit needs a positive number"},
        {"fashion-mnist /tmp/x --limit 5x", "--limit needs a positive number"},
        {"fashion-mnist /tmp/x --bogus", "unknown option '--bogus'"},
        {"fashion-mnist /tmp/x /tmp/y", "is extra"},
    };
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        char *out;
        int rc = dataset(cases[k][0], &out);
        cr_expect_eq(rc, 2, "'%s': exit %d: %s", cases[k][0], rc, out);
        cr_expect(strstr(out, cases[k][1]), "'%s': expected '%s' in: %s", cases[k][0], cases[k][1], out);
        free(out);
    }
}

Test(dataset, help_exits_0)
{
    char *out;
    int rc = dataset("--help", &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "fashion-mnist"), "%s", out);
    cr_expect(strstr(out, "--limit"), "%s", out);
    free(out);
}

Test(dataset, missing_package_files_exit_1_with_the_apt_line)
{
    char *src = test_make_tmpdir(), *dir = test_make_tmpdir(), *out;
    char *args = xasprintf("fashion-mnist '%s/out' --from '%s'", dir, src);
    int rc = dataset(args, &out);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "apt-get install dataset-fashion-mnist"), "%s", out);
    char *made = path_join(dir, "out");
    cr_expect(!path_exists(made), "%s was created though nothing could be converted", made);
    free(made);
    free(out);
    free(args);
    rm_tree(src);
    rm_tree(dir);
}

Test(dataset, corrupt_idx_file_exits_1)
{
    need_package();
    /* a copy of the package with the training labels cut short */
    char *src = test_make_tmpdir(), *dir = test_make_tmpdir(), *out;
    char *cmd = xasprintf("cp " FMNIST_SRC "/*-ubyte* '%s'/ && cd '%s' && "
                          "(gzip -dc train-labels-idx1-ubyte.gz 2>/dev/null || cat train-labels-idx1-ubyte) | "
                          "head -c 1000 > t && rm -f train-labels-idx1-ubyte* && mv t train-labels-idx1-ubyte",
                          src, src);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    free(out);
    free(cmd);
    char *args = xasprintf("fashion-mnist '%s/out' --from '%s' --limit 5", dir, src);
    int rc = dataset(args, &out);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "train-labels-idx1-ubyte"), "%s", out);
    char *marker = xasprintf("%s/out/.complete", dir);
    cr_expect(!path_exists(marker));
    free(marker);
    free(out);
    free(args);
    rm_tree(src);
    rm_tree(dir);
}

/* ---- selfsup dataset jigsaw-perms ------------------------------------------------------------- */

/* Both .npy files hold the same int64 array. */
static void expect_same_perms(const char *got_path, const char *want_path)
{
    npy_array got = {0}, want = {0};
    char *why = NULL;
    cr_assert_eq(npy_read(got_path, &got, &why), 0, "%s: %s", got_path, why);
    cr_assert_eq(npy_read(want_path, &want, &why), 0, "%s: %s", want_path, why);
    cr_expect(got.dtype == NPY_I8 && got.ndim == 2 && got.shape[0] == want.shape[0] && got.shape[1] == want.shape[1],
              "%s: not an int64 array of VISSL's shape", got_path);
    if (got.count == want.count) {
        const int64_t *g = got.data, *w = want.data;
        size_t first_diff = got.count;
        for (size_t i = 0; i < got.count && first_diff == got.count; i++)
            if (g[i] != w[i])
                first_diff = i;
        cr_expect_eq(first_diff, got.count, "%s: row %zu differs from VISSL's script", got_path,
                     first_diff / (size_t)want.shape[1]);
    }
    npy_close(&got), npy_close(&want);
}

/* Every case of fixtures/jigsaw/cases.txt ("N K METHOD FIRST"), made here from the same first
 * permutation: VISSL's permutations, row for row (the K = 9 case's float ties included). */
Test(dataset, jigsaw_perms_are_vissls, .timeout = 120)
{
    char *cases = test_path("tests/golden/fixtures/jigsaw/cases.txt"), *dir = test_make_tmpdir();
    FILE *f = fopen(cases, "r");
    cr_assert(f, "%s", cases);
    long n, k, first;
    char method[16];
    int seen = 0;
    while (fscanf(f, "%ld %ld %15s %ld", &n, &k, method, &first) == 4) {
        char *out, *got = xasprintf("%s/%ld_%ld.npy", dir, n, k);
        char *args = xasprintf("jigsaw-perms %ld %ld '%s' --method %s --first %ld", n, k, got, method, first);
        int rc = dataset(args, &out);
        cr_expect_eq(rc, 0, "%s: exit %d: %s", args, rc, out);
        char *fixtures = test_path("tests/golden/fixtures/jigsaw");
        char *want = xasprintf("%s/perms_%ld_%ld_%s_%ld.npy", fixtures, n, k, method, first);
        if (rc == 0)
            expect_same_perms(got, want);
        free(want), free(fixtures), free(args), free(got), free(out);
        seen++;
    }
    fclose(f);
    cr_expect_geq(seen, 5, "%d cases in %s", seen, cases);
    free(cases);
    rm_tree(dir);
}

/* A seed names one set (two runs agree) and draws the first permutation; a directory gets
 * VISSL's file name; what cannot be made exits 2 and writes nothing. */
Test(dataset, jigsaw_perms_seed_directory_and_refusals)
{
    char *dir = test_make_tmpdir(), *out;
    char *args = xasprintf("jigsaw-perms 20 5 '%s/a.npy' --seed 3", dir);
    cr_assert_eq(dataset(args, &out), 0, "%s", out);
    free(out), free(args);
    args = xasprintf("jigsaw-perms 20 5 '%s/b.npy' --seed 3", dir);
    cr_assert_eq(dataset(args, &out), 0, "%s", out);
    free(out), free(args);
    char *a = xasprintf("%s/a.npy", dir), *b = xasprintf("%s/b.npy", dir);
    expect_same_perms(a, b);
    free(a), free(b);
    args = xasprintf("jigsaw-perms 10 4 '%s' --method max_min --first 2", dir);
    cr_assert_eq(dataset(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "hamming_perms_10_patches_4_max_min.npy"), "%s", out);
    free(out), free(args);
    const char *bad[][2] = {
        {"jigsaw-perms 10 11 x.npy", "K must be a number of patches from 2 to 10"},
        {"jigsaw-perms 25 4 x.npy", "N must be 1 to 24"},
        {"jigsaw-perms 5 4 x.npy --first 24", "there are 24 permutations"},
        {"jigsaw-perms 5 4 x.npy --method max", "bad option"},
        {"jigsaw-perms 5 4", "usage: selfsup dataset jigsaw-perms"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int rc = dataset(bad[i][0], &out);
        cr_expect_eq(rc, 2, "'%s': exit %d: %s", bad[i][0], rc, out);
        cr_expect(strstr(out, bad[i][1]), "'%s': expected '%s' in: %s", bad[i][0], bad[i][1], out);
        free(out);
    }
    cr_expect_eq(test_count_files(dir), 3, "only the three sets asked for");
    rm_tree(dir);
}

/* ---- selfsup dataset voc2007 | voc2012 ------------------------------------------------------------ */

/* Run a shell command (set up a fixture tree) and assert it worked. */
static void shell_ok(char *cmd)
{
    char *out;
    cr_assert_eq(test_run(cmd, &out), 0, "%s: %s", cmd, out);
    free(out), free(cmd);
}

/* `selfsup dataset ARGS` exits `code` and says `expect`. */
static void expect_dataset_exit(int code, const char *expect, char *args)
{
    char *out;
    int rc = dataset(args, &out);
    cr_expect_eq(rc, code, "%s: exit %d: %s", args, rc, out);
    cr_expect(strstr(out, expect), "%s: expected '%s' in: %s", args, expect, out);
    free(out), free(args);
}

/* Whether two files hold the same bytes (false, with a message, when either cannot be read). */
/* `selfsup dataset NAME SRC OUT ARGS` run from the VOC fixtures' folder (SRC relative, as the
 * generator gave it to VISSL's script); its exit status. */
static int voc_in_fixtures(const char *name, const char *src, const char *out_dir, const char *args, char **output)
{
    char *fixtures = test_path("tests/golden/fixtures/dataset_voc"), *bin = test_build_path("selfsup");
    char *cmd = xasprintf("cd '%s' && '%s' dataset %s %s '%s' %s", fixtures, bin, name, src, out_dir, args);
    int rc = test_run(cmd, output);
    free(cmd), free(bin), free(fixtures);
    return rc;
}

/* Every file VISSL's script wrote for the three runs of make_voc_fixtures.py (VOC2007 as it is
 * and with separate partitions and JSON targets; VOC2012 without test lists), byte for byte. */
Test(dataset, voc_files_are_vissls_byte_for_byte, .timeout = 60)
{
    static const char *const RUNS[][4] = {
        /* dataset name, SRC, fixture folder, options */
        {"voc2007", "VOC2007", "voc2007", ""},
        {"voc2007", "VOC2007", "voc2007_separate", "--separate-partitions --generate-json"},
        {"voc2012", "VOC2012", "voc2012", ""},
    };
    static const char *const FILES[] = {"train_images.npy", "train_labels.npy", "test_images.npy", "test_labels.npy",
                                        "val_images.npy",   "val_labels.npy",   "train_targets.json",
                                        "val_targets.json", "test_targets.json"};
    char *dir = test_make_tmpdir(), *fixtures = test_path("tests/golden/fixtures/dataset_voc");
    for (size_t r = 0; r < ARRAY_LEN(RUNS); r++) {
        char *out, *dst = xasprintf("%s/%s", dir, RUNS[r][2]);
        int rc = voc_in_fixtures(RUNS[r][0], RUNS[r][1], dst, RUNS[r][3], &out);
        cr_expect_eq(rc, 0, "%s %s: exit %d: %s", RUNS[r][0], RUNS[r][3], rc, out);
        int compared = 0;
        for (size_t f = 0; f < ARRAY_LEN(FILES); f++) {
            char *want = xasprintf("%s/%s/%s", fixtures, RUNS[r][2], FILES[f]), *got = xasprintf("%s/%s", dst, FILES[f]);
            if (access(want, F_OK) == 0) {
                cr_expect(test_same_bytes(got, want), "%s: %s differs from VISSL's", RUNS[r][2], FILES[f]);
                compared++;
            } else {
                cr_expect(access(got, F_OK) != 0, "%s: %s written, VISSL writes none", RUNS[r][2], FILES[f]);
            }
            free(want), free(got);
        }
        cr_expect_geq(compared, 4, "%s", RUNS[r][2]);
        free(out), free(dst);
    }
    /* the catalog entry VISSL's VOC07 benchmark reads, absolute */
    size_t len = 0;
    char *cat_path = xasprintf("%s/voc2007/dataset_catalog.json", dir), *cat = read_whole_file(cat_path, &len);
    cr_assert(cat, "%s", cat_path);
    char *want = xasprintf("\"voc2007\": {\n        \"train\": [\n            \"%s/voc2007/train_images.npy\"", dir);
    cr_expect(strstr(cat, want), "%s:\n%s", cat_path, cat);
    free(want), free(cat), free(cat_path), free(fixtures);
    rm_tree(dir);
}

/* A year folder whose splits list different classes is refused (VISSL's "Missing classes"), a
 * folder without ImageSets/Main too (exit 1); usage errors exit 2. */
Test(dataset, voc_refusals)
{
    char *src = test_make_tmpdir();
    shell_ok(xasprintf("mkdir -p '%s/ImageSets/Main' && cd '%s/ImageSets/Main' && echo '1 1' > a_trainval.txt && "
                       "echo '1 1' > b_trainval.txt && echo '2 1' > a_test.txt",
                       src, src));
    expect_dataset_exit(1, "missing classes: 2 train, 1 test", xasprintf("voc2007 '%s' '%s/out'", src, src));
    expect_dataset_exit(1, "ImageSets/Main", xasprintf("voc2012 '%s/nothing' '%s/out'", src, src));
    expect_dataset_exit(2, "usage: selfsup dataset voc2007", xstrdup("voc2007"));
    expect_dataset_exit(2, "unknown option '--bogus'", xstrdup("voc2007 a b --bogus"));
    expect_dataset_exit(2, "is extra", xstrdup("voc2007 a b c"));
    rm_tree(src);
}

/* ---- selfsup dataset coco2014 --------------------------------------------------------------------- */

/* The three partitions VISSL's script wrote from make_coco_fixtures.py's instance files (object
 * validity, gapped category ids, shared file names, images without objects), byte for byte; the
 * missing valminusminival file is skipped. */
Test(dataset, coco_files_are_vissls_byte_for_byte, .timeout = 60)
{
    static const char *const PARTS[] = {"train", "val", "minival"};
    char *dir = test_make_tmpdir(), *fixtures = test_path("tests/golden/fixtures/dataset_coco"), *out;
    char *args = xasprintf("coco2014 '%s/annotations' '%s/coco' --train-images train2014 --val-images val2014", fixtures, dir);
    int rc = dataset(args, &out);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "valminusminival2014.json") && strstr(out, "skipped"), "%s", out);
    for (size_t p = 0; p < ARRAY_LEN(PARTS); p++)
        for (int k = 0; k < 2; k++) {
            const char *kind = k ? "labels" : "images";
            char *want = xasprintf("%s/coco/%s_%s.npy", fixtures, PARTS[p], kind);
            char *got = xasprintf("%s/coco/%s_%s.npy", dir, PARTS[p], kind);
            cr_expect(test_same_bytes(got, want), "%s_%s.npy differs from VISSL's", PARTS[p], kind);
            free(want), free(got);
        }
    free(out), free(args), free(fixtures);
    rm_tree(dir);
}

/* No train or val instance file, one that is not JSON, or an annotation of a category the file
 * does not list: exit 1 naming the file or the annotation; usage: 2. */
Test(dataset, coco_refusals)
{
    char *dir = test_make_tmpdir();
    shell_ok(xasprintf("mkdir -p '%s/a' && echo '{\"images\": [' > '%s/a/instances_train2014.json' && "
                       "echo '{}' > '%s/a/instances_val2014.json'",
                       dir, dir, dir));
    expect_dataset_exit(1, "instances_train2014.json",
                        xasprintf("coco2014 '%s/a' '%s/out' --train-images t --val-images v", dir, dir));
    expect_dataset_exit(1, "instances_val2014.json",
                        xasprintf("coco2014 '%s/none' '%s/out' --train-images t --val-images v", dir, dir));
    expect_dataset_exit(2, "usage: selfsup dataset coco2014", xstrdup("coco2014 a b --train-images t"));
    shell_ok(xasprintf("mkdir -p '%s/c' && echo '{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 9, "
                       "\"height\": 9}], \"annotations\": [{\"image_id\": 1, \"category_id\": 5, \"bbox\": [1, 1, 4, 4], "
                       "\"area\": 16}], \"categories\": [{\"id\": 1, \"name\": \"x\"}]}' > '%s/c/instances_val2014.json'",
                       dir, dir));
    expect_dataset_exit(1, "annotation 0 names a category that is not in the file",
                        xasprintf("coco2014 '%s/c' '%s/out' --train-images t --val-images v", dir, dir));
    rm_tree(dir);
}

/* ---- selfsup dataset imagenet --------------------------------------------------------------------- */

/* The fixture tree's two splits in the command's default order (sorted), with the JSON targets:
 * VISSL's script's files byte for byte; train and val hold different classes, which is warned of. */
Test(dataset, imagenet_files_are_vissls_sorted_byte_for_byte, .timeout = 60)
{
    static const char *const FILES[] = {"train_images.npy", "train_labels.npy", "train_targets.json",
                                        "val_images.npy",   "val_labels.npy",   "val_targets.json"};
    char *dir = test_make_tmpdir(), *fixtures = test_path("tests/golden/fixtures/dataset_imagenet"), *bin = test_build_path("selfsup");
    char *cmd = xasprintf("cd '%s' && '%s' dataset imagenet tree '%s/out' --generate-json", fixtures, bin, dir), *out;
    int rc = test_run(cmd, &out);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "train has 3 classes and val 2"), "%s", out);
    for (size_t f = 0; f < ARRAY_LEN(FILES); f++) {
        char *want = xasprintf("%s/imagenet/%s", fixtures, FILES[f]), *got = xasprintf("%s/out/%s", dir, FILES[f]);
        cr_expect(test_same_bytes(got, want), "%s differs from VISSL's", FILES[f]);
        free(want), free(got);
    }
    free(out), free(cmd), free(bin), free(fixtures);
    rm_tree(dir);
}

/* dir's entries but . and .., in readdir's order (at most cap, each a new string). */
static size_t readdir_names(const char *dir, char **names, size_t cap)
{
    DIR *d = opendir(dir);
    cr_assert(d, "%s", dir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            names[n++] = xstrdup(e->d_name);
    closedir(d);
    return n;
}

/* --listdir-order: the train split's classes numbered, and their images listed, in the order the
 * file system gives them (read here with readdir, as os.listdir does); a stray file among the
 * classes is skipped with a warning (VISSL's script stops on it). */
Test(dataset, imagenet_listdir_order_is_the_file_systems, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *fixtures = test_path("tests/golden/fixtures/dataset_imagenet"), *out;
    char *cmd = xasprintf("cp -r '%s/tree' '%s/tree' && echo x > '%s/tree/train/LOC_synset_mapping.txt'", fixtures, dir, dir);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    free(out), free(cmd);
    char *args = xasprintf("imagenet '%s/tree' '%s/out' --listdir-order", dir, dir);
    int rc = dataset(args, &out);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "LOC_synset_mapping.txt is not a class folder"), "%s", out);
    char *classes[8], *images[8], *want[16], *train = xasprintf("%s/tree/train", dir);
    size_t nc = readdir_names(train, classes, 8), n = 0, label_of[16], numbered = 0;
    for (size_t c = 0; c < nc; c++) {
        char *cdir = xasprintf("%s/%s", train, classes[c]);
        struct stat st;
        if (stat(cdir, &st) == 0 && S_ISDIR(st.st_mode)) {
            size_t ni = readdir_names(cdir, images, 8);
            for (size_t i = 0; i < ni; i++) {
                if (n < 16) {
                    want[n] = xasprintf("%s/%s", cdir, images[i]);
                    label_of[n++] = numbered;
                }
                free(images[i]);
            }
            numbered++;
        }
        free(cdir), free(classes[c]);
    }
    char **paths = NULL, *why = NULL, *images_npy = xasprintf("%s/out/train_images.npy", dir),
         *labels_npy = xasprintf("%s/out/train_labels.npy", dir);
    int64_t *labels = NULL;
    size_t np = 0, nl = 0;
    cr_assert_eq(decode_filelist_read(images_npy, &paths, &np, &why), 0, "%s", why);
    cr_assert_eq(decode_labels_read(labels_npy, &labels, &nl, &why), 0, "%s", why);
    cr_expect(np == n && nl == n, "%zu paths, %zu labels, %zu images", np, nl, n);
    for (size_t i = 0; i < n && i < np && i < nl; i++) {
        cr_expect_str_eq(paths[i], want[i], "image %zu", i);
        cr_expect_eq(labels[i], (int64_t)label_of[i], "image %zu (%s)", i, want[i]);
    }
    decode_filelist_free(paths, np);
    for (size_t i = 0; i < n; i++)
        free(want[i]);
    free(labels), free(images_npy), free(labels_npy), free(train), free(out), free(args), free(fixtures);
    rm_tree(dir);
}

/* ---- selfsup dataset inaturalist2018 ----------------------------------------------------------- */

/* The fixture's two annotation files, as VISSL's script turns them into file lists (paths under
 * SRC/train_val2018, the category id of the file name as the label), byte for byte; a file name
 * without a category part stops the command (exit 1) naming the image. */
Test(dataset, inaturalist2018_files_are_vissls_byte_for_byte, .timeout = 60)
{
    static const char *const FILES[] = {"train_images.npy", "train_labels.npy", "val_images.npy", "val_labels.npy"};
    char *dir = test_make_tmpdir(), *fixtures = test_path("tests/golden/fixtures/dataset_inat"), *bin = test_build_path("selfsup");
    char *cmd = xasprintf("cd '%s' && '%s' dataset inaturalist2018 inat '%s/out'", fixtures, bin, dir), *out;
    int rc = test_run(cmd, &out);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
    for (size_t f = 0; f < ARRAY_LEN(FILES); f++) {
        char *want = xasprintf("%s/out/%s", fixtures, FILES[f]), *got = xasprintf("%s/out/%s", dir, FILES[f]);
        cr_expect(test_same_bytes(got, want), "%s differs from VISSL's", FILES[f]);
        free(want), free(got);
    }
    free(out), free(cmd);
    shell_ok(xasprintf("mkdir -p '%s/bad' && echo '{\"images\": [{\"file_name\": \"train_val2018/x.jpg\"}]}' > "
                       "'%s/bad/train2018.json' && cp '%s/inat/val2018.json' '%s/bad/'",
                       dir, dir, fixtures, dir));
    expect_dataset_exit(1, "image 0: file_name 'train_val2018/x.jpg'",
                        xasprintf("inaturalist2018 '%s/bad' '%s/out2'", dir, dir));
    free(bin), free(fixtures);
    rm_tree(dir);
}

/* ---- decode datasets: label files of rows (suite decode_dataset) ---------------------------- */

/* Load DATA.TRAIN: `n` synthetic sources (DATA_LIMIT 4) labelled by the disk_filelist label
 * files paths[0..n). Returns decode_dataset_load's result; *err on failure. */
static int load_with_labels(decode_dataset *ds, const char *const *paths, int n, char **err)
{
    char *srcs = xstrdup(""), *labels = xstrdup("");
    for (int j = 0; j < n; j++) {
        char *a = xasprintf("%s%ssynthetic", srcs, j ? ", " : "");
        char *b = xasprintf("%s%s'%s'", labels, j ? ", " : "", paths[j]);
        free(srcs), free(labels);
        srcs = a, labels = b;
    }
    char *text = xasprintf("DATA:\n  TRAIN:\n    DATA_SOURCES: [%s]\n    DATASET_NAMES: [%s]\n"
                           "    LABEL_SOURCES: [%s]\n    LABEL_PATHS: [%s]\n    DATA_LIMIT: 4\n",
                           srcs, srcs, n == 1 ? "disk_filelist" : "disk_filelist, disk_filelist", labels);
    cr_assert(n == 1 || n == 2);
    cfg_err cerr = {{0}};
    cfg_node *root = cfg_parse_yaml(text, strlen(text), "test.yaml", &cerr);
    cr_assert(root, "%s", cerr.msg);
    int rc = decode_dataset_load(ds, root, "TRAIN", "/nonexistent/dataset_catalog.json", err);
    cfg_free(root);
    free(text), free(srcs), free(labels);
    return rc;
}

Test(decode_dataset, label_rows_are_read_back_row_by_row)
{
    char *dir = test_make_tmpdir();
    char *a = path_join(dir, "voc.npy"), *b = path_join(dir, "more.npy"), *flat = path_join(dir, "flat.npy");
    /* VOC07-like {1, 0, -1} [5, 3] as int32, and a second source [4, 3] as int64 */
    const int32_t va[5][3] = {{1, 0, -1}, {-1, -1, 1}, {0, 1, 0}, {1, 1, 1}, {-1, 0, 0}};
    const int64_t vb[4][3] = {{7, 8, 9}, {10, 11, 12}, {-5, 0, 5}, {2147483648LL, -2, 3}};
    cr_assert_eq(npy_write(a, NPY_I4, 2, (const size_t[]){5, 3}, va, NULL), 0);
    cr_assert_eq(npy_write(b, NPY_I8, 2, (const size_t[]){4, 3}, vb, NULL), 0);
    decode_dataset ds;
    char *err = NULL;
    cr_assert_eq(load_with_labels(&ds, (const char *[]){a, b}, 2, &err), 0, "%s", err);
    cr_assert_eq(ds.length, 4);
    cr_assert_eq(decode_dataset_label_count(&ds), 2);
    cr_assert_eq(decode_dataset_label_width(&ds), 3);
    for (size_t idx = 0; idx < 4; idx++) {
        int64_t got[6] = {0};
        decode_dataset_labels(&ds, idx, got);
        for (int m = 0; m < 3; m++) {
            cr_assert_eq(got[m], va[idx][m], "sample %zu source 0 col %d", idx, m);
            cr_assert_eq(got[3 + m], vb[idx][m], "sample %zu source 1 col %d", idx, m);
        }
    }
    decode_dataset_free(&ds);
    /* 1-D labels: width 1, one value per source, as before */
    const uint8_t vf[4] = {3, 0, 255, 9};
    cr_assert_eq(npy_write(flat, NPY_U1, 1, (const size_t[]){4}, vf, NULL), 0);
    cr_assert_eq(load_with_labels(&ds, (const char *[]){flat}, 1, &err), 0, "%s", err);
    cr_assert_eq(decode_dataset_label_count(&ds), 1);
    cr_assert_eq(decode_dataset_label_width(&ds), 1);
    for (size_t idx = 0; idx < 4; idx++) {
        int64_t got[2] = {-7, -7};
        decode_dataset_labels(&ds, idx, got);
        cr_assert_eq(got[0], vf[idx]);
        cr_assert_eq(got[1], -7, "wrote past the one label");
    }
    decode_dataset_free(&ds);
    free(a), free(b), free(flat);
    test_rm_dir(dir);
}

Test(decode_dataset, label_sources_of_different_widths_are_refused)
{
    char *dir = test_make_tmpdir();
    char *a = path_join(dir, "three.npy"), *b = path_join(dir, "two.npy");
    const int64_t v[12] = {0};
    cr_assert_eq(npy_write(a, NPY_I8, 2, (const size_t[]){4, 3}, v, NULL), 0);
    cr_assert_eq(npy_write(b, NPY_I8, 2, (const size_t[]){4, 2}, v, NULL), 0);
    decode_dataset ds;
    char *err = NULL;
    cr_assert_eq(load_with_labels(&ds, (const char *[]){a, b}, 2, &err), -1, "different widths accepted");
    cr_assert(err && strstr(err, a) && strstr(err, b) && strstr(err, "same width"), "%s", err);
    free(err);
    /* a 1-D source beside a 2-D one differs too */
    cr_assert_eq(npy_write(b, NPY_I8, 1, (const size_t[]){4}, v, NULL), 0);
    err = NULL;
    cr_assert_eq(load_with_labels(&ds, (const char *[]){a, b}, 2, &err), -1, "1-D beside 2-D accepted");
    cr_assert(err && strstr(err, "same width"), "%s", err);
    free(err);
    free(a), free(b);
    test_rm_dir(dir);
}

Test(decode_dataset, label_files_of_3_dims_or_fortran_order_are_refused)
{
    char *dir = test_make_tmpdir();
    char *cube = path_join(dir, "cube.npy"), *fortran = path_join(dir, "fortran.npy");
    const int64_t v[16] = {0};
    cr_assert_eq(npy_write(cube, NPY_I8, 3, (const size_t[]){4, 2, 2}, v, NULL), 0);
    decode_dataset ds;
    char *err = NULL;
    cr_assert_eq(load_with_labels(&ds, (const char *[]){cube}, 1, &err), -1, "a 3-D label file accepted");
    cr_assert(err && strstr(err, cube) && strstr(err, "(4, 2, 2)"), "%s", err);
    free(err);
    /* numpy.save of a Fortran-ordered [4, 3] array: the same header with fortran_order True */
    cr_assert_eq(npy_write(fortran, NPY_I8, 2, (const size_t[]){4, 3}, v, NULL), 0);
    size_t len;
    char *bytes = read_whole_file(fortran, &len);
    cr_assert(bytes);
    char *f = memmem(bytes, len, "'fortran_order': False", strlen("'fortran_order': False")); /* past NULs */
    cr_assert(f);
    memcpy(f, "'fortran_order': True ", strlen("'fortran_order': True "));
    FILE *out = fopen(fortran, "wb");
    cr_assert(out && fwrite(bytes, 1, len, out) == len);
    fclose(out);
    free(bytes);
    err = NULL;
    cr_assert_eq(load_with_labels(&ds, (const char *[]){fortran}, 1, &err), -1, "a Fortran-ordered label file accepted");
    cr_assert(err && strstr(err, fortran) && strstr(err, "Fortran"), "%s", err);
    free(err);
    free(cube), free(fortran);
    test_rm_dir(dir);
}
