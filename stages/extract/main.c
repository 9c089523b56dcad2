/*
 * selfsup-extract — VISSL's extract_features engine: batch records in, feature files out.
 *
 *   selfsup-extract -c CONFIG [--split NAME] [--test-in URI] [--output DIR] [--threads N] [overrides]
 *   selfsup-decode -c CONFIG | selfsup-augment -c CONFIG | selfsup-collate -c CONFIG \
 *       | selfsup-extract -c CONFIG
 *
 * Builds the model of config.MODEL in eval mode, loads MODEL.WEIGHTS_INIT (a selfsup
 * checkpoint, or a VISSL / torchvision .torch or .pth file with VISSL's prefix rules), runs
 * every batch of the input through it and writes, per layer, VISSL's files into
 * CHECKPOINT.DIR (or --output):
 *   rank{R}_{split}_{layer}_features.npy   float32 N × D
 *   rank{R}_{split}_{layer}_targets.npy    int64 N × L
 *   rank{R}_{split}_{layer}_inds.npy       int64 (N,)
 * rows unique by dataset index and sorted by it. The layers are the names of
 * MODEL.FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP for a feature-extractor model,
 * otherwise "heads" (the model's output). R is the global rank (--rank), not the local one.
 * selfsup-svm and selfsup-knn read these files; so does numpy.load.
 *
 * selfsup run (engine_name: extract_features) wires a decode → augment → collate chain per
 * split VISSL extracts (train unless TEST_ONLY, test when TEST_MODEL): the first into --in,
 * the test chain into --test-in.
 *
 * Options:
 *   --split NAME     the split the --in batches belong to (default: train)
 *   --test-in URI    the test split's batches, read after --in ends (shm:NAME, -, file:PATH, tcp://…)
 *   --output DIR     where the files go (default: config.CHECKPOINT.DIR)
 *   --threads N      compute threads (default: every core)
 */
#include "extract/extract.h"
#include "log.h"
#include "stage.h"
#include "timer.h"
#include "train/checkpoint.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *split, *test_uri, *output;
    int threads;
    extractor *x;
} extract_stage;

static int option(void *state, int argc, char **argv)
{
    extract_stage *es = state;
    if (argc < 2)
        return 0;
    if (!strcmp(argv[0], "--split")) {
        if (strcmp(argv[1], "train") != 0 && strcmp(argv[1], "test") != 0) {
            log_error("--split is train or test, not '%s'", argv[1]);
            return -1;
        }
        es->split = argv[1];
    } else if (!strcmp(argv[0], "--test-in"))
        es->test_uri = argv[1];
    else if (!strcmp(argv[0], "--output"))
        es->output = argv[1];
    else if (!strcmp(argv[0], "--threads")) {
        char *end;
        long v = strtol(argv[1], &end, 10);
        if (*end || v < 0) {
            log_error("--threads needs a non-negative number, not '%s'", argv[1]);
            return -1;
        }
        es->threads = (int)v;
    } else
        return 0;
    return 2;
}

/* The output folder, made and tried before the model is even built, named by the option or
 * the config line that chose it. How much the features will take is not known before the
 * splits are read (rows × width), so only a folder that cannot be made or written to is
 * refused here. */
static bool check_output(const cfg_node *config, const char *dir, bool from_option, cfg_err *err)
{
    return ckpt_output_dir_usable(dir, 0, from_option ? "--output" : "config.CHECKPOINT.DIR",
                                  from_option ? NULL : cfg_get(config, "CHECKPOINT.DIR"), err);
}

static int prepare(stage *s, void *state)
{
    extract_stage *es = state;
    cfg_err err;
    bool from_option = es->output != NULL;
    if (!es->output)
        es->output = cfg_str(stage_config(s), "CHECKPOINT.DIR");
    if (!check_output(stage_config(s), es->output, from_option, &err) ||
        !(es->x = extractor_new(stage_config(s), es->threads, es->output, &err))) {
        log_error("%s", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

/* Every batch of one input, then its split's files. The read functions are the stage's main
 * input's or a second input's. */
typedef struct {
    int (*read)(void *in, rec_view *v);
    void (*done)(void *in);
    void *in;
} input;

static int main_read(void *in, rec_view *v) { return stage_read(in, v); }
static void main_done(void *in) { stage_read_done(in); }
static int other_read(void *in, rec_view *v) { return stage_input_read(in, v); }
static void other_done(void *in) { stage_input_read_done(in); }

static int extract_split(stage *s, extract_stage *es, const input *in, const char *split)
{
    double t0 = now_seconds();
    rec_view v;
    int st;
    char *err = NULL;
    while ((st = in->read(in->in, &v)) == STAGE_RECORD) {
        int rc = extractor_batch(es->x, &v, &err);
        in->done(in->in);
        if (rc != 0) {
            log_error("%s split: %s", split, err);
            free(err);
            return EXIT_RUNTIME;
        }
    }
    if (st == STAGE_FAILED)
        return EXIT_RUNTIME;
    if (stage_stopping(s)) {
        log_warn("stopped before the %s split ended: its features are not written", split);
        return stage_exit_status(s);
    }
    if (extractor_rows(es->x) == 0) {
        log_error("the %s split's input held no images: no features to write", split);
        return EXIT_RUNTIME;
    }
    size_t rows = extractor_rows(es->x);
    if (extractor_write_split(es->x, es->output, stage_rank(s), split, &err) != 0) {
        log_error("%s", err);
        free(err);
        return EXIT_RUNTIME;
    }
    double dt = now_seconds() - t0;
    log_info("%s split: %zu images in %.1f s (%.0f images/s)", split, rows, dt, dt > 0 ? (double)rows / dt : 0.0);
    return 0;
}

static int run(stage *s, void *state)
{
    extract_stage *es = state;
    input first = {main_read, main_done, s};
    int rc = extract_split(s, es, &first, es->split);
    if (rc != 0 || !es->test_uri || stage_stopping(s))
        return rc ? rc : stage_exit_status(s);
    stage_input *test_in = stage_open_input(s, es->test_uri);
    if (!test_in)
        return EXIT_RUNTIME;
    input second = {other_read, other_done, test_in};
    rc = extract_split(s, es, &second, "test");
    stage_input_close(test_in);
    return rc ? rc : stage_exit_status(s);
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "extract",
        .summary = "Extract features of batch records into VISSL's .npy files (extract_features).",
        .role = "consumer",
        .reads = true,
        .writes = false,
        .option = option,
        .prepare = prepare,
        .options = "  --split NAME     the split of the --in batches: train (default) or test\n"
                   "  --test-in URI    the test split's batches, read after --in ends\n"
                   "  --output DIR     where the feature files go (default: CHECKPOINT.DIR)\n"
                   "  --threads N      compute threads (default: every core)\n",
    };
    extract_stage es = {.split = "train"};
    int status = stage_main(argc, argv, &info, &es, run);
    extractor_free(es.x);
    return status;
}
