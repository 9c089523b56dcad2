/*
 * test_data_pipeline.c — decode → augment → collate on real data (Fashion-MNIST from Debian's
 * dataset-fashion-mnist, converted by `selfsup dataset`), as a shell pipeline and under the
 * orchestrator.
 *
 * Checks what a VISSL user relies on: the same config gives byte-identical batches whether
 * the stages run in a shell pipeline or under `selfsup run`, with 1 augment worker or 4; each
 * epoch serves every sample exactly once; the labels are the ImageFolder classes of the
 * samples' files (recomputed here from the directory listing, as torchvision does); crops
 * have the configured size and SimCLR's crop-major layout; a bad transform list stops the
 * run before anything starts (exit 2). And the whole train run: decode → augment → collate →
 * train under `selfsup run`, interrupted (SIGINT) and resumed, ends with the same final
 * checkpoint, byte for byte, as a run that was never interrupted.
 */
#include "npy.h"
#include "record.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT 60
#define BATCH 16

static char *g_dir;  /* scratch: the dataset, configs, outputs */
static char *g_data; /* g_dir/fm */

static char *build_bin(const char *name)
{
    return test_build_path(name);
}

static void run_ok(const char *cmd)
{
    char *out = NULL;
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 0, "`%s` exited %d:\n%s", cmd, rc, out);
    free(out);
}

static char *write_config_at(const char *name, const char *data, const char *transforms);

static char *write_config(const char *name, const char *transforms)
{
    return write_config_at(name, g_data, transforms);
}

/* A config for the disk_folder `data`/disk_folder/train. */
static char *write_config_at(const char *name, const char *data, const char *transforms)
{
    char *path = xasprintf("%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "# @package _global_\n"
            "config:\n"
            "  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 1}\n"
            "  TEST_MODEL: False\n"
            "  OPTIMIZER: {num_epochs: 1, param_schedulers: {lr: {name: constant, value: 0.1}}}\n"
            "  SELFSUP: {RUN_DIR: \"%s/runs\"}\n"
            "  DATA:\n"
            "    NUM_DATALOADER_WORKERS: 1\n"
            "    TRAIN:\n"
            "      DATA_SOURCES: [disk_folder]\n"
            "      LABEL_SOURCES: [disk_folder]\n"
            "      DATASET_NAMES: [fashion_mnist_folder]\n"
            "      DATA_PATHS: [\"%s/disk_folder/train\"]\n"
            "      LABEL_PATHS: [\"%s/disk_folder/train\"]\n"
            "      BATCHSIZE_PER_REPLICA: %d\n"
            "      COLLATE_FUNCTION: simclr_collator\n"
            "      TRANSFORMS:\n%s",
            g_dir, data, data, BATCH, transforms);
    fclose(f);
    return path;
}

static const char *simclr_transforms = "        - {name: ImgReplicatePil, num_times: 2}\n"
                                       "        - {name: RandomResizedCrop, size: 24, scale: [0.2, 1.0]}\n"
                                       "        - {name: RandomHorizontalFlip}\n"
                                       "        - {name: ImgPilColorDistortion, strength: 0.5}\n"
                                       "        - {name: ImgPilGaussianBlur, p: 0.5}\n"
                                       "        - {name: ToTensor}\n"
                                       "        - {name: Normalize, mean: [0.286, 0.286, 0.286], std: [0.353, 0.353, 0.353]}\n";

static void setup(void)
{
    g_dir = test_make_tmpdir();
    g_data = xasprintf("%s/fm", g_dir);
    char *selfsup = build_bin("selfsup");
    char *cmd = xasprintf("%s dataset fashion-mnist %s --limit %d", selfsup, g_data, LIMIT);
    run_ok(cmd);
    free(cmd);
    free(selfsup);
}

static void teardown(void)
{
    char *cmd = xasprintf("rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    free(cmd);
    free(g_dir);
    free(g_data);
}

TestSuite(data_pipeline, .init = setup, .fini = teardown, .timeout = 120);

/* ---- reading the batches back ------------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "no %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = aligned_alloc(64, ((size_t)n + 63) & ~(size_t)63);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* torchvision ImageFolder's targets: classes = sorted folder names, files sorted inside. */
/* The next data record of a saved stream at *off (false at the end-of-stream record or the
 * end of the buffer); each is validated. */
static bool next_record(const uint8_t *buf, size_t len, size_t *off, rec_view *v)
{
    if (*off >= len)
        return false;
    char *err = NULL;
    size_t size = ((const rec_header *)(buf + *off))->size;
    cr_assert_eq(rec_parse(buf + *off, size, v, &err), 0, "%s", err);
    *off += size;
    return v->hdr->kind != REC_EOS;
}

static int scandir_sorted(const char *dir, struct dirent ***list)
{
    return scandir(dir, list, NULL, alphasort);
}

static int folder_labels(int64_t *labels, int cap)
{
    char *root = xasprintf("%s/disk_folder/train", g_data);
    struct dirent **classes;
    int nc = scandir_sorted(root, &classes), n = 0, cls = 0;
    for (int c = 0; c < nc; c++) {
        if (classes[c]->d_name[0] != '.') {
            char *sub = xasprintf("%s/%s", root, classes[c]->d_name);
            struct dirent **files;
            int nf = scandir_sorted(sub, &files);
            for (int f = 0; f < nf; f++) {
                if (files[f]->d_name[0] != '.' && n < cap)
                    labels[n++] = cls;
                free(files[f]);
            }
            free(files);
            free(sub);
            cls++;
        }
        free(classes[c]);
    }
    free(classes);
    free(root);
    return n;
}

/* Walk a record stream: every sample index once per epoch, labels from the folders, SimCLR's
 * layout (2 crops of one image at positions i and i + n). Returns the number of batches. */
static int check_batches(const char *path, int epochs)
{
    size_t len;
    uint8_t *buf = slurp(path, &len);
    int64_t truth[LIMIT];
    cr_assert_eq(folder_labels(truth, LIMIT), LIMIT);
    int seen[8][LIMIT] = {{0}};
    int batches = 0;
    rec_view v;
    for (size_t off = 0; next_record(buf, len, &off, &v);) {
        batches++;
        int d = rec_find(&v, "data.0"), l = rec_find(&v, "label.0"), x = rec_find(&v, "data_idx.0");
        cr_assert(d >= 0 && l >= 0 && x >= 0 && rec_find(&v, "normalize") >= 0);
        const rec_tensor *t = &v.tensors[d];
        cr_assert(t->dtype == REC_U8 && t->ndim == 4 && t->shape[1] == 24 && t->shape[2] == 24 && t->shape[3] == 3);
        int n2 = (int)t->shape[0], n = n2 / 2;
        const int64_t *lab = rec_data(&v, l), *idx = rec_data(&v, x);
        for (int i = 0; i < n; i++) {
            cr_assert_eq(idx[i], idx[i + n], "crop-major: sample %d's second crop is not at %d", i, i + n);
            cr_assert(idx[i] >= 0 && idx[i] < LIMIT);
            cr_assert_eq(lab[i], truth[idx[i]], "sample %lld: label %lld, its folder says %lld", (long long)idx[i],
                         (long long)lab[i], (long long)truth[idx[i]]);
            cr_assert(v.hdr->epoch < 8);
            seen[v.hdr->epoch][idx[i]]++;
        }
    }
    for (int e = 0; e < epochs; e++)
        for (int i = 0; i < LIMIT; i++)
            cr_assert_eq(seen[e][i], 1, "epoch %d: sample %d served %d times", e, i, seen[e][i]);
    free(buf);
    return batches;
}

/* ---- the tests ---------------------------------------------------------------------------- */

static char *shell_pipeline(const char *cfg, const char *out, const char *extra)
{
    char *dec = build_bin("selfsup-decode"), *aug = build_bin("selfsup-augment"), *col = build_bin("selfsup-collate"),
         *sink = build_bin("selfsup-sink");
    char *cmd = xasprintf("%s -c %s %s | %s -c %s | %s -c %s | %s --save %s", dec, cfg, extra, aug, cfg, col, cfg,
                          sink, out);
    free(dec), free(aug), free(col), free(sink);
    return cmd;
}

static char *orchestrated(const char *cfg, int workers, const char *out)
{
    char *selfsup = build_bin("selfsup");
    char *cmd = xasprintf("%s run %s config.DATA.NUM_DATALOADER_WORKERS=%d "
                          "'+config.SELFSUP.STAGES.train=selfsup-sink --save %s'",
                          selfsup, cfg, workers, out);
    free(selfsup);
    return cmd;
}

static bool same_file(const char *a, const char *b)
{
    size_t la, lb;
    uint8_t *x = slurp(a, &la), *y = slurp(b, &lb);
    bool same = la == lb && !memcmp(x, y, la);
    free(x), free(y);
    return same;
}

Test(data_pipeline, shell_and_orchestrator_give_the_same_batches_with_1_or_4_workers)
{
    char *cfg = write_config("simclr.yaml", simclr_transforms);
    char *a = xasprintf("%s/pipe.rec", g_dir), *b = xasprintf("%s/w1.rec", g_dir), *c = xasprintf("%s/w4.rec", g_dir);
    char *cmd = shell_pipeline(cfg, a, "");
    run_ok(cmd);
    free(cmd);
    cmd = orchestrated(cfg, 1, b);
    run_ok(cmd);
    free(cmd);
    cmd = orchestrated(cfg, 4, c);
    run_ok(cmd);
    free(cmd);
    /* 60 samples in batches of 16: 3 full batches and one of 12. */
    cr_assert_eq(check_batches(a, 1), 4);
    cr_assert(same_file(a, b), "shell pipeline and `selfsup run` with 1 worker differ");
    cr_assert(same_file(b, c), "1 and 4 augment workers give different batches");
    free(a), free(b), free(c), free(cfg);
}

Test(data_pipeline, epochs_follow_each_other_and_drop_last_drops_the_partial_batch)
{
    char *cfg = write_config("simclr2.yaml", simclr_transforms);
    char *a = xasprintf("%s/two.rec", g_dir), *b = xasprintf("%s/drop.rec", g_dir);
    char *cmd = shell_pipeline(cfg, a, "--epochs 2");
    run_ok(cmd);
    free(cmd);
    cr_assert_eq(check_batches(a, 2), 8);
    /* Under selfsup run, a training run reads OPTIMIZER.num_epochs epochs. */
    char *c = xasprintf("%s/orch2.rec", g_dir), *selfsup = build_bin("selfsup");
    cmd = xasprintf("%s run %s config.OPTIMIZER.num_epochs=2 '+config.SELFSUP.STAGES.train=selfsup-sink --save %s'",
                    selfsup, cfg, c);
    run_ok(cmd);
    free(cmd);
    cr_assert_eq(check_batches(c, 2), 8);
    cr_assert(same_file(a, c), "two epochs differ between the shell pipeline and selfsup run");
    free(c), free(selfsup);
    char *dec = build_bin("selfsup-decode"), *aug = build_bin("selfsup-augment"), *col = build_bin("selfsup-collate"),
         *sink = build_bin("selfsup-sink");
    cmd = xasprintf("%s -c %s --epochs 2 | %s -c %s | %s -c %s config.DATA.TRAIN.DROP_LAST=true | %s --save %s", dec,
                    cfg, aug, cfg, col, cfg, sink, b);
    run_ok(cmd);
    free(cmd);
    size_t len;
    uint8_t *buf = slurp(b, &len);
    int n = 0;
    for (size_t off = 0; off < len; n++)
        off += ((const rec_header *)(buf + off))->size;
    cr_assert_eq(n, 2 * 3 + 1, "DROP_LAST: %d records, want 6 full batches and the end of stream", n);
    free(buf);
    free(dec), free(aug), free(col), free(sink);
    free(a), free(b), free(cfg);
}

Test(data_pipeline, a_bad_transform_list_stops_the_run_before_it_starts)
{
    char *cfg = write_config("bad.yaml", "        - {name: RandomResizedCrop, size: 24, scael: [0.2, 1.0]}\n");
    char *aug = build_bin("selfsup-augment");
    char *cmd = xasprintf("%s -c %s --in file:/dev/null --out file:%s/never.rec", aug, cfg, g_dir);
    char *out = NULL;
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 2, "augment exited %d:\n%s", rc, out);
    cr_assert(strstr(out, "scael") && strstr(out, "bad.yaml:"), "%s", out);
    free(out), free(cmd);
    char *never = xasprintf("%s/never.rec", g_dir);
    cr_assert_neq(access(never, F_OK), 0, "a refused config still wrote its output");
    free(never);
    char *selfsup = build_bin("selfsup");
    cmd = xasprintf("%s run %s", selfsup, cfg);
    rc = test_run(cmd, &out);
    cr_assert_eq(rc, 2, "selfsup run exited %d:\n%s", rc, out);
    free(out), free(cmd), free(selfsup), free(aug), free(cfg);
}

/* selfsup-decode --crop (which `selfsup run` passes) decodes only the part of each JPEG the
 * crops read: the batches must be byte-identical to whole-image decoding, and the decoded
 * records must really be windows. Photos: the decode fixtures (4:2:0, 4:2:2, 4:4:4,
 * progressive, grayscale JPEGs) in a two-class folder. */
Test(data_pipeline, decoding_only_the_crops_changes_no_byte)
{
    static const char *const photos[] = {"Aqua", "LadyBird", "Storm"};
    static const char *const variants[] = {"420", "422", "444", "progressive", "gray"};
    char *root = xasprintf("%s/photos", g_dir);
    for (size_t p = 0; p < ARRAY_LEN(photos); p++)
        for (size_t v = 0; v < ARRAY_LEN(variants); v++) {
            char *name = xasprintf("photo_%s_%s.jpg", photos[p], variants[v]), *src = test_fixture("decode", name);
            char *cmd = xasprintf("mkdir -p %s/disk_folder/train/c%zu && cp %s %s/disk_folder/train/c%zu/", root, v % 2,
                                  src, root, v % 2);
            run_ok(cmd);
            free(cmd), free(src), free(name);
        }
    char *cfg = write_config_at("photos.yaml", root, simclr_transforms);
    char *whole = xasprintf("%s/whole.rec", g_dir), *cropped = xasprintf("%s/cropped.rec", g_dir),
         *run = xasprintf("%s/run.rec", g_dir), *decoded = xasprintf("%s/decoded.rec", g_dir);
    char *cmd = shell_pipeline(cfg, whole, "");
    run_ok(cmd);
    free(cmd);
    cmd = shell_pipeline(cfg, cropped, "--crop");
    run_ok(cmd);
    free(cmd);
    cmd = orchestrated(cfg, 2, run);
    run_ok(cmd);
    free(cmd);
    cr_assert(same_file(whole, cropped), "decode --crop changed the batches");
    cr_assert(same_file(whole, run), "selfsup run (decode --crop) changed the batches");
    /* the decoded records: windows, smaller than their images */
    char *dec = build_bin("selfsup-decode"), *sink = build_bin("selfsup-sink");
    cmd = xasprintf("%s -c %s --crop | %s --save %s", dec, cfg, sink, decoded);
    run_ok(cmd);
    size_t len;
    uint8_t *buf = slurp(decoded, &len);
    int windows = 0, samples = 0;
    rec_view v;
    for (size_t off = 0; next_record(buf, len, &off, &v);) {
        int d = rec_find(&v, "data.0"), w = rec_find(&v, "data_window");
        cr_assert(d >= 0 && w >= 0, "a --crop record without data.0 and data_window");
        const int64_t *win = rec_data(&v, w);
        samples++;
        windows += (int64_t)v.tensors[d].shape[0] * (int64_t)v.tensors[d].shape[1] < win[2] * win[3];
    }
    cr_assert_eq(samples, 15);
    cr_assert_geq(windows, 10, "only %d of 15 images were decoded in part", windows);
    free(buf), free(cmd), free(dec), free(sink);
    free(whole), free(cropped), free(run), free(decoded), free(cfg), free(root);
}

/* targets_one_hot_default_collator end to end: a disk_filelist whose LABEL_PATHS file holds a
 * row per sample (2 positives, then 2 negatives, -1 padded; sample.h), through decode,
 * augment and collate. Each batch's label.0 row must be VISSL's convert_to_one_hot of the
 * sample's lists, worked out here: -1 everywhere, 1 at the positives, then 0 at the negatives. */
Test(data_pipeline, one_hot_targets_from_a_2d_label_file)
{
    enum { K = 2, CLASSES = 10 };
    int64_t rows[LIMIT][2 * K];
    for (int i = 0; i < LIMIT; i++) {
        rows[i][0] = i % CLASSES, rows[i][1] = i % 3 ? (i * 7) % CLASSES : -1; /* positives */
        rows[i][2] = (i + 5) % CLASSES, rows[i][3] = i % 4 ? (i * 3) % CLASSES : -1; /* negatives */
    }
    char *labels = xasprintf("%s/rows.npy", g_dir), *err = NULL;
    size_t shape[2] = {LIMIT, 2 * K};
    cr_assert_eq(npy_write(labels, NPY_I8, 2, shape, rows, &err), 0, "%s", err);
    char *cfg = xasprintf("%s/onehot.yaml", g_dir), *out = xasprintf("%s/onehot.rec", g_dir);
    FILE *f = fopen(cfg, "w");
    cr_assert(f);
    fprintf(f,
            "# @package _global_\n"
            "config:\n"
            "  DATA:\n"
            "    TRAIN:\n"
            "      DATA_SOURCES: [disk_filelist]\n"
            "      LABEL_SOURCES: [disk_filelist]\n"
            "      DATASET_NAMES: [fm_filelist]\n"
            "      DATA_PATHS: [\"%s/disk_filelist/train_images.npy\"]\n"
            "      LABEL_PATHS: [\"%s\"]\n"
            "      DATA_LIMIT: %d\n"
            "      BATCHSIZE_PER_REPLICA: %d\n"
            "      COLLATE_FUNCTION: targets_one_hot_default_collator\n"
            "      COLLATE_FUNCTION_PARAMS: {num_classes: %d}\n"
            "      TRANSFORMS:\n"
            "        - {name: RandomResizedCrop, size: 20}\n"
            "        - {name: ToTensor}\n",
            g_data, labels, LIMIT, BATCH, CLASSES);
    fclose(f);
    char *cmd = shell_pipeline(cfg, out, "");
    run_ok(cmd);
    size_t len;
    uint8_t *buf = slurp(out, &len);
    int seen = 0;
    rec_view v;
    for (size_t off = 0; next_record(buf, len, &off, &v);) {
        int l = rec_find(&v, "label.0"), x = rec_find(&v, "data_idx.0");
        cr_assert(l >= 0 && x >= 0 && v.tensors[l].ndim == 2 && v.tensors[l].shape[1] == CLASSES);
        const int64_t *lab = rec_data(&v, l), *idx = rec_data(&v, x);
        for (uint64_t i = 0; i < v.tensors[l].shape[0]; i++, seen++) {
            int64_t want[CLASSES];
            for (int c = 0; c < CLASSES; c++)
                want[c] = -1;
            const int64_t *r = rows[idx[i]];
            for (int k = 0; k < K; k++)
                if (r[k] >= 0)
                    want[r[k]] = 1;
            for (int k = K; k < 2 * K; k++)
                if (r[k] >= 0)
                    want[r[k]] = 0;
            cr_assert_arr_eq(lab + i * CLASSES, want, sizeof want, "sample %lld", (long long)idx[i]);
        }
    }
    cr_assert_eq(seen, LIMIT);
    free(buf), free(cmd), free(cfg), free(out), free(labels);
}

/* ---- training: interrupted and resumed --------------------------------------------------- */

/* The SimCLR config above, training a small-stem ResNet-18 for two epochs of three batches
 * (DROP_LAST), with its checkpoints in `dir`. */
static char *write_train_config(const char *name, const char *dir)
{
    char *base = write_config(name, simclr_transforms);
    FILE *f = fopen(base, "a");
    cr_assert(f);
    fprintf(f,
            "  MACHINE: {DEVICE: cpu}\n"
            "  LOG_FREQUENCY: 1\n"
            "  MODEL:\n"
            "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
            "    HEAD: {PARAMS: [[mlp, {dims: [512, 16]}]]}\n"
            "  LOSS: {name: simclr_info_nce_loss, simclr_info_nce_loss: {buffer_params: {embedding_dim: 16}}}\n"
            "  CHECKPOINT: {DIR: \"%s\", AUTO_RESUME: true}\n",
            dir);
    fclose(f);
    /* two epochs, whole batches only: the OPTIMIZER and DROP_LAST lines of the base config */
    char *cmd = xasprintf("sed -i 's/num_epochs: 1/num_epochs: 2/; s/COLLATE_FUNCTION: simclr_collator/"
                          "COLLATE_FUNCTION: simclr_collator\\n      DROP_LAST: true/' '%s'",
                          base);
    run_ok(cmd);
    free(cmd);
    return base;
}

Test(data_pipeline, training_interrupted_and_resumed_ends_bitwise_like_an_uninterrupted_run, .timeout = 300)
{
    char *a = xasprintf("%s/ckpt_a", g_dir), *b = xasprintf("%s/ckpt_b", g_dir);
    char *cfg_a = write_train_config("train_a.yaml", a), *cfg_b = write_train_config("train_b.yaml", b);
    char *selfsup = build_bin("selfsup");
    char *cmd = xasprintf("%s run %s", selfsup, cfg_a);
    run_ok(cmd);
    free(cmd);
    /* Stop the second run part-way (wherever it is: the run may be anywhere, even done), then
     * run it again: it resumes from its checkpoint, or finds the run complete. */
    cmd = xasprintf("%s run %s & pid=$!; sleep 2; kill -INT $pid; wait $pid; %s run %s", selfsup, cfg_b, selfsup, cfg_b);
    run_ok(cmd);
    free(cmd);
    char *fa = xasprintf("%s/model_final_checkpoint_phase1.torch", a),
         *fb = xasprintf("%s/model_final_checkpoint_phase1.torch", b);
    cr_assert(path_exists(fa) && path_exists(fb), "%s, %s", fa, fb);
    cr_expect(same_file(fa, fb), "the resumed run's final checkpoint differs from the uninterrupted run's");
    char *ma = xasprintf("%s/metrics.json", a), *mb = xasprintf("%s/metrics.json", b);
    cr_expect(same_file(ma, mb), "metrics.json differs");
    free(fa), free(fb), free(ma), free(mb), free(a), free(b), free(cfg_a), free(cfg_b), free(selfsup);
}

/* ---- a stage stopped from outside --------------------------------------------------------- */

/* The pid of stage `id` (decode.0, augment.0) of a run whose command lines mention `tag`, read
 * from /proc; 0 while there is none. */
static pid_t stage_pid(const char *id, const char *tag)
{
    char *want = xasprintf("--id %s ", id);
    DIR *d = opendir("/proc");
    cr_assert(d);
    struct dirent *e;
    pid_t found = 0;
    while (!found && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        char *path = xasprintf("/proc/%d/cmdline", pid);
        size_t len = 0;
        char *cmd = pid > 0 ? read_whole_file(path, &len) : NULL;
        for (size_t i = 0; cmd && i + 1 < len; i++)
            cmd[i] = cmd[i] ? cmd[i] : ' ';
        if (cmd && len && strstr(cmd, want) && strstr(cmd, tag))
            found = pid;
        free(cmd), free(path);
    }
    closedir(d);
    free(want);
    return found;
}

/* Does `path` hold `text`? (A log still being written: read it whole each time.) */
static bool file_says(const char *path, const char *text)
{
    size_t len;
    char *s = read_whole_file(path, &len);
    bool yes = s && strstr(s, text);
    free(s);
    return yes;
}

/* SIGTERM to one augment worker of a training run, from outside the run (a user, a job
 * scheduler): the worker ends its stream as stopped and says so, and `selfsup run` must fail
 * naming it, with no final checkpoint that would make the run look complete. */
Test(data_pipeline, a_stage_stopped_by_a_signal_fails_the_run_naming_it, .timeout = 300)
{
    char *ckpt = xasprintf("%s/ckpt_stopped", g_dir), *cfg = write_train_config("stopped.yaml", ckpt);
    char *selfsup = build_bin("selfsup"), *log = xasprintf("%s/stopped.log", g_dir);
    char *train_log = xasprintf("%s/runs/logs/train.0.log", g_dir);
    /* Ten epochs of 60 images: the worker is far from done when training starts, as the rings
     * let it run only a few batches ahead. */
    char *cmd = xasprintf("exec %s run %s config.OPTIMIZER.num_epochs=10 > %s 2>&1", selfsup, cfg, log);
    pid_t run = fork();
    cr_assert(run >= 0);
    if (run == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    size_t len;
    for (int i = 0; i < 1200 && !file_says(train_log, "Starting phase 0"); i++) {
        int early;
        if (waitpid(run, &early, WNOHANG) != 0) {
            char *text = read_whole_file(log, &len);
            cr_assert_fail("the run ended before training started:\n%s", text ? text : "");
        }
        usleep(100000);
    }
    pid_t worker = stage_pid("augment.0", g_dir);
    cr_assert(worker > 0, "no augment.0 among the run's processes");
    cr_assert_eq(kill(worker, SIGTERM), 0);
    int status = test_wait_child(run, 120000);
    char *out = read_whole_file(log, &len);
    cr_assert(out, "%s", log);
    cr_expect_eq(status, 1, "a run with a stopped stage must fail:\n%s", out);
    char *named = xasprintf("stage augment.0 (pid %d) was stopped before its work was done", (int)worker);
    cr_expect(strstr(out, named), "the run should say '%s':\n%s", named, out);
    DIR *d = opendir(ckpt);
    for (struct dirent *e; d && (e = readdir(d));)
        cr_expect(strncmp(e->d_name, "model_final_checkpoint", 22), "%s/%s: a stopped run looks complete", ckpt,
                  e->d_name);
    if (d)
        closedir(d);
    free(named), free(out), free(cmd), free(train_log), free(log), free(selfsup), free(cfg), free(ckpt);
}

/* ---- invalid images ------------------------------------------------------------------------ */

/* Broken images do not stop a run (MAX_INVALID_IMAGES_SHARE is 1 by default), and the decode
 * stage warns at each epoch's end; `selfsup run` sums them up per split where it ends. */
Test(data_pipeline, the_run_sums_up_its_invalid_images_per_split)
{
    char *cfg = write_config("invalid.yaml", simclr_transforms), *selfsup = build_bin("selfsup");
    char *cmd = xasprintf("%s run %s config.OPTIMIZER.num_epochs=2 '+config.SELFSUP.STAGES.train=selfsup-sink'",
                          selfsup, cfg), *out = NULL;
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    cr_expect(!strstr(out, "invalid"), "a run without invalid images says nothing of them:\n%s", out);
    free(out);
    /* Three of the 60 training images become garbage: 3 invalid of 60 in each of 2 epochs. */
    const char *classes[] = {"0_tshirt_top", "1_trouser", "2_pullover"};
    for (int i = 0; i < 3; i++) {
        char *dir = xasprintf("%s/disk_folder/train/%s", g_data, classes[i]);
        struct dirent **list;
        int n = scandir_sorted(dir, &list), first = 0;
        while (first < n && list[first]->d_name[0] == '.')
            first++;
        cr_assert(first < n, "no image in %s", dir);
        char *path = xasprintf("%s/%s", dir, list[first]->d_name);
        FILE *f = fopen(path, "w");
        cr_assert(f, "%s", path);
        fputs("not an image", f);
        fclose(f);
        for (int k = 0; k < n; k++)
            free(list[k]);
        free(list), free(path), free(dir);
    }
    cr_assert_eq(test_run(cmd, &out), 0, "invalid images must not stop the run:\n%s", out);
    cr_expect(strstr(out, "split train: 6 of the 120 images read in this run were invalid (5.0%"), "%s", out);
    free(out), free(cmd), free(selfsup), free(cfg);
}

/* ---- training with test phases ------------------------------------------------------------ */

/* A supervised run with VISSL's test phases under `selfsup run`: the orchestrator adds a
 * DATA.TEST chain (decode → augment → collate) whose batches the trainer reads after each
 * epoch (TEST_MODEL, TEST_EVERY_NUM_EPOCH 1): metrics.json alternates train and test lines
 * (phase_idx 0 to 3), each test phase scores every one of the 60 test images (4 batches of
 * at most 16), and the checkpoints carry VISSL's phase_idx names. */
Test(data_pipeline, test_phases_run_on_their_own_chain_under_the_orchestrator, .timeout = 300)
{
    char *dir = xasprintf("%s/ckpt_test", g_dir), *cfg = xasprintf("%s/supervised.yaml", g_dir);
    FILE *f = fopen(cfg, "w");
    cr_assert(f);
    const char *tf = "TRANSFORMS: [{name: Resize, size: 24}, {name: ToTensor}, "
                     "{name: Normalize, mean: [0.286, 0.286, 0.286], std: [0.353, 0.353, 0.353]}]";
    fprintf(f,
            "# @package _global_\n"
            "config:\n"
            "  TEST_MODEL: True\n  LOG_FREQUENCY: 1\n"
            "  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 1}\n  MACHINE: {DEVICE: cpu}\n"
            "  SELFSUP: {RUN_DIR: \"%s/runs_test\"}\n"
            "  DATA:\n    NUM_DATALOADER_WORKERS: 1\n"
            "    TRAIN: {DATA_SOURCES: [disk_folder], LABEL_SOURCES: [disk_folder], DATASET_NAMES: [fm],\n"
            "      DATA_PATHS: [\"%s/disk_folder/train\"], LABEL_PATHS: [\"%s/disk_folder/train\"],\n"
            "      BATCHSIZE_PER_REPLICA: %d, DROP_LAST: true, %s}\n"
            "    TEST: {DATA_SOURCES: [disk_folder], LABEL_SOURCES: [disk_folder], DATASET_NAMES: [fm],\n"
            "      DATA_PATHS: [\"%s/disk_folder/val\"], LABEL_PATHS: [\"%s/disk_folder/val\"],\n"
            "      BATCHSIZE_PER_REPLICA: %d, %s}\n"
            "  METERS: {name: accuracy_list_meter, accuracy_list_meter: {num_meters: 1, topk_values: [1, 5]}}\n"
            "  MODEL:\n"
            "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
            "    HEAD: {PARAMS: [[mlp, {dims: [512, 10]}]]}\n"
            "  LOSS: {name: cross_entropy_multiple_output_single_target}\n"
            "  OPTIMIZER: {name: sgd, momentum: 0.9, num_epochs: 2, param_schedulers: {lr: {name: constant, value: 0.01}}}\n"
            "  CHECKPOINT: {DIR: \"%s\", AUTO_RESUME: true}\n",
            g_dir, g_data, g_data, BATCH, tf, g_data, g_data, BATCH, tf, dir);
    fclose(f);
    char *selfsup = build_bin("selfsup");
    char *cmd = xasprintf("%s run %s", selfsup, cfg);
    run_ok(cmd);
    free(cmd);
    char *metrics = xasprintf("%s/metrics.json", dir);
    size_t len = 0;
    char *text = read_whole_file(metrics, &len);
    cr_assert(text, "%s", metrics);
    static const char *const want[] = {"\"phase_idx\":0,\"train_accuracy_list_meter\"",
                                       "\"phase_idx\":1,\"test_accuracy_list_meter\"",
                                       "\"phase_idx\":2,\"train_accuracy_list_meter\"",
                                       "\"phase_idx\":3,\"test_accuracy_list_meter\""};
    const char *at = text;
    for (int i = 0; i < 4; i++) {
        const char *hit = strstr(at, want[i]);
        cr_expect(hit, "metrics.json line %d (%s) missing or out of order:\n%s", i, want[i], text);
        at = hit ? strchr(hit, '\n') : at;
    }
    char *log = xasprintf("%s/runs_test/logs/train.0.log", g_dir);
    char *lt = read_whole_file(log, &len);
    cr_assert(lt, "%s", log);
    cr_expect(strstr(lt, "test phase 1: 4 batches") && strstr(lt, "test phase 3: 4 batches"), "%s", lt);
    char *final = xasprintf("%s/model_final_checkpoint_phase2.torch", dir), *first = xasprintf("%s/model_phase0.torch", dir);
    cr_expect(path_exists(final) && path_exists(first), "%s, %s", first, final);
    /* TEST_ONLY on the same checkpoint: two test phases (num_epochs), nothing trained, and the
     * same scores as the trained run's last test phase (eval mode is deterministic) */
    const char *last = text; /* the 4th (last) line's meter, up to the end of its top_1 */
    for (int i = 0; i < 3; i++)
        last = strchr(last, '\n') + 1;
    const char *from = strstr(last, "\"test_accuracy_list_meter\"");
    cr_assert(from, "%s", last);
    char *meter = xstrdup(from);
    *strchr(meter, '}') = '\0';
    cmd = xasprintf("%s run %s config.TEST_ONLY=True", selfsup, cfg);
    run_ok(cmd);
    free(cmd);
    free(text);
    text = read_whole_file(metrics, &len);
    const char *tail = text;
    for (int i = 0; i < 4; i++)
        tail = strchr(tail, '\n') + 1;
    cr_expect(strstr(tail, "\"phase_idx\":0,") && strstr(tail, "\"phase_idx\":1,") &&
                  strstr(tail, "\"train_phase_idx\":-1") && !strstr(tail, "train_accuracy"),
              "TEST_ONLY lines:\n%s", tail);
    const char *second = strstr(tail, meter);
    cr_expect(second && strstr(second + 1, meter), "TEST_ONLY scores differ from the run's last test phase (%s):\n%s",
              meter, tail);
    free(meter);
    free(text), free(lt), free(log), free(final), free(first), free(metrics), free(selfsup), free(cfg), free(dir);
}

/* The last top-1 of `layer` among the train-phase lines of metrics.json, or -1. */
static double last_train_top1(const char *metrics, const char *layer)
{
    double top1 = -1;
    char *key = xasprintf("\"%s\":", layer);
    for (const char *at = strstr(metrics, "\"train_accuracy_list_meter\""); at;
         at = strstr(at + 1, "\"train_accuracy_list_meter\"")) {
        const char *v = strstr(at, key);
        if (v)
            top1 = strtod(v + strlen(key), NULL);
    }
    free(key);
    return top1;
}

/* quickstart/eval_linear_colorization, VISSL's Colorization benchmark, runs end to end on the
 * LAB path: ImgPil2LabTensor in the augment stage, INPUT_TYPE lab in the trainer (the trunk reads
 * channel 0, L) and the one-channel alexnet_colorization trunk, frozen, under two linear heads.
 * Fashion-MNIST is gray, so a and b are 0 for every pixel: had the trunk been fed a or b its
 * features would be one constant and no head could beat the largest class (10 of these 60
 * images). Linear heads on the L channel's features fit the 60 images within 8 epochs. */
Test(data_pipeline, the_colorization_benchmark_runs_on_the_l_channel, .timeout = 300)
{
    char *dir = xasprintf("%s/colorization", g_dir), *files = xasprintf("%s/disk_filelist", g_data);
    char *selfsup = build_bin("selfsup");
    char *cmd = xasprintf(
        "%s run quickstart/eval_linear_colorization --run-dir %s/run config.DATA.NUM_DATALOADER_WORKERS=1 "
        "'config.DATA.TRAIN.DATA_PATHS=[\"%s/train_images.npy\"]' 'config.DATA.TRAIN.LABEL_PATHS=[\"%s/train_labels.npy\"]' "
        "'config.DATA.TEST.DATA_PATHS=[\"%s/val_images.npy\"]' 'config.DATA.TEST.LABEL_PATHS=[\"%s/val_labels.npy\"]' "
        "config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=12 config.DATA.TEST.BATCHSIZE_PER_REPLICA=12 "
        "config.OPTIMIZER.num_epochs=8 'config.OPTIMIZER.param_schedulers.lr.values=[0.05,0.05]' "
        "config.CHECKPOINT.DIR=%s/ck",
        selfsup, dir, files, files, files, files, dir);
    run_ok(cmd);
    char *metrics = xasprintf("%s/ck/metrics.json", dir);
    size_t len = 0;
    char *text = read_whole_file(metrics, &len);
    cr_assert(text, "%s", metrics);
    double conv3 = last_train_top1(text, "conv3"), conv5 = last_train_top1(text, "conv5");
    cr_expect_gt(conv3, 50.0, "conv3 head: train top-1 %.2f:\n%s", conv3, text);
    cr_expect_gt(conv5, 50.0, "conv5 head: train top-1 %.2f:\n%s", conv5, text);
    cr_expect(strstr(text, "\"test_accuracy_list_meter\""), "no test phase:\n%s", text);
    free(text), free(metrics), free(cmd), free(selfsup), free(files), free(dir);
}

/* ---- feature extraction and the evaluators -------------------------------------------------- */

/* `selfsup svm CONFIG` on an extract_features config (TEST_MODEL: both splits) under the
 * orchestrator: the features of both splits land in CHECKPOINT.DIR as VISSL's files, one row per
 * image, sorted by index, with the folders' labels as targets; then selfsup-svm trains on them
 * and writes its results. */
Test(data_pipeline, extract_features_then_svm_under_the_orchestrator, .timeout = 300)
{
    char *dir = xasprintf("%s/feat", g_dir), *cfg = xasprintf("%s/extract.yaml", g_dir);
    FILE *f = fopen(cfg, "w");
    cr_assert(f);
    const char *tf = "TRANSFORMS: [{name: Resize, size: 24}, {name: ToTensor}, "
                     "{name: Normalize, mean: [0.286, 0.286, 0.286], std: [0.353, 0.353, 0.353]}]";
    fprintf(f,
            "# @package _global_\n"
            "engine_name: extract_features\n"
            "config:\n"
            "  TEST_MODEL: True\n"
            "  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 1}\n  MACHINE: {DEVICE: cpu}\n"
            "  SELFSUP: {RUN_DIR: \"%s/runs_extract\"}\n"
            "  DATA:\n    NUM_DATALOADER_WORKERS: 2\n"
            "    TRAIN: {DATA_SOURCES: [disk_folder], LABEL_SOURCES: [disk_folder], DATASET_NAMES: [fm],\n"
            "      DATA_PATHS: [\"%s/disk_folder/train\"], LABEL_PATHS: [\"%s/disk_folder/train\"],\n"
            "      BATCHSIZE_PER_REPLICA: %d, %s}\n"
            "    TEST: {DATA_SOURCES: [disk_folder], LABEL_SOURCES: [disk_folder], DATASET_NAMES: [fm],\n"
            "      DATA_PATHS: [\"%s/disk_folder/val\"], LABEL_PATHS: [\"%s/disk_folder/val\"],\n"
            "      BATCHSIZE_PER_REPLICA: %d, %s}\n"
            "  MODEL:\n"
            "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18, SMALL_STEM: true}}}\n"
            "    FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: True, FREEZE_TRUNK_ONLY: True, EXTRACT_TRUNK_FEATURES_ONLY: True,\n"
            "      LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res5avg, [Identity, []]]]}\n"
            "  SVM: {costs: {costs_list: [0.1, 1.0]}, cross_val_folds: 2}\n"
            "  CHECKPOINT: {DIR: \"%s\"}\n",
            g_dir, g_data, g_data, BATCH, tf, g_data, g_data, BATCH, tf, dir);
    fclose(f);
    char *selfsup = build_bin("selfsup");
    char *cmd = xasprintf("%s svm %s --threads 1", selfsup, cfg);
    run_ok(cmd);
    int64_t labels[LIMIT];
    int n = folder_labels(labels, LIMIT);
    cr_assert_eq(n, LIMIT);
    const char *splits[] = {"train", "test"};
    for (int s = 0; s < 2; s++) {
        char *base = xasprintf("%s/rank0_%s_res5avg", dir, splits[s]);
        char *fp = xasprintf("%s_features.npy", base), *tp = xasprintf("%s_targets.npy", base),
             *ip = xasprintf("%s_inds.npy", base), *err = NULL;
        npy_array fa, ta, ia;
        cr_assert_eq(npy_read(fp, &fa, &err), 0, "%s", err);
        cr_assert_eq(npy_read(tp, &ta, &err), 0, "%s", err);
        cr_assert_eq(npy_read(ip, &ia, &err), 0, "%s", err);
        cr_expect_eq(fa.dtype, NPY_F4);
        cr_expect(fa.ndim == 2 && fa.shape[1] == 512, "%s: 512 features per row", fp);
        cr_assert(ta.dtype == NPY_I8 && ta.ndim == 2 && ta.shape[1] == 1, "%s: int64 N x 1", tp);
        cr_assert_eq(ia.shape[0], fa.shape[0]);
        cr_assert_eq(ta.shape[0], fa.shape[0]);
        const int64_t *ind = ia.data, *tg = ta.data;
        for (size_t i = 0; i < ia.shape[0]; i++) {
            cr_expect_eq(ind[i], (int64_t)i, "%s: every image once, sorted by index", ip);
            if (s == 0)
                cr_expect_eq(tg[i], labels[i], "train row %zu's target is its folder's class", i);
        }
        cr_expect_eq(fa.shape[0], (size_t)(s == 0 ? LIMIT : fa.shape[0]));
        npy_close(&fa), npy_close(&ta), npy_close(&ia);
        free(base), free(fp), free(tp), free(ip);
    }
    char *res = xasprintf("%s/res5avg/test_ap.npy", dir), *json = xasprintf("%s/svm_results.json", dir);
    cr_expect(path_exists(res), "%s", res);
    cr_expect(path_exists(json), "%s", json);
    free(res), free(json), free(cmd), free(selfsup), free(cfg), free(dir);
}
