/*
 * selfsup-train — VISSL's training loop: batches in, a trained model out.
 *
 *   selfsup-train -c CONFIG [--threads N] [--steps-per-epoch N] [--in URI] [--test-in URI]
 *                 [--memory-in URI] [overrides]
 *   selfsup-train -c CONFIG --check [overrides]
 *   selfsup-decode -c CONFIG --epochs E | selfsup-augment -c CONFIG | selfsup-collate -c CONFIG \
 *       | selfsup-train -c CONFIG
 *
 * Reads the collate stage's batch records and runs VISSL's standard_train_step on each
 * (trainer.h; on a GPU the input ring's memory is pinned, so a batch goes from its slot to
 * the device by DMA): forward, loss, backward, optimizer step at the scheduled learning rate, a log
 * line every LOG_FREQUENCY iterations. At every epoch's end it appends to metrics.json and
 * checkpoints per CHECKPOINT_FREQUENCY into CHECKPOINT.DIR (the last epoch writes
 * model_final_checkpoint_phase{N}.torch; checkpoint.torch links the latest). A stop (Ctrl-C,
 * SIGTERM or the orchestrator's STOP) ends the run with model_iteration{N}.torch and exit
 * status 128 + the signal. The input must carry every batch of every planned epoch: a stream
 * that ends early, or whose writer was stopped, is an error (exit 1) after the same iteration
 * checkpoint, never a finished run.
 * With CHECKPOINT.AUTO_RESUME and a checkpoint there, training goes on exactly where it stopped
 * (batches it had already trained are skipped if they come again).
 *
 * Test phases (TEST_MODEL, TEST_EVERY_NUM_EPOCH): the DATA.TEST batches come from a second
 * input, --test-in (selfsup run wires a decode → augment → collate chain of DATA.TEST to it);
 * after the epochs VISSL tests, the model runs in eval mode over one test epoch and
 * metrics.json gets its test_accuracy_list_meter line. Without --test-in the test phases are
 * skipped with a warning. TEST_ONLY: the --in batches are all test batches (no training).
 *
 * DeepClusterV2 (deepclusterv2_loss) fills its memory banks before the first epoch of a fresh
 * run with one epoch of training batches that it reads from a third input, --memory-in
 * (selfsup run wires a chain that decodes epoch 0 once more for it; in a shell pipeline, give
 * it a file of one epoch's batches). A resumed run does not read it.
 *
 * The config is checked before the first batch is read: the model, the loss, the optimizer,
 * the schedules and the dataset's length (for the schedules' `where`) must all build, or the
 * stage exits 2 naming the key. A non-finite loss stops the run (exit 1) naming the iteration.
 * Several trainers (--coll): before every step, train or test, they agree on their inputs
 * (trainer_agree): all train the batch, or all stop at it, or all fail, so a stop of any one
 * (Ctrl-C, a stage that died) leaves one checkpoint, written by rank 0 with every rank's own
 * state in it, from which the same world resumes exactly.
 * --check is a dry start: the config is composed and put through the trainer's checks
 * (trainer_check_config: what `selfsup config validate` runs), and the stage exits 0 or 2
 * without opening its input, building the model or touching CHECKPOINT.DIR.
 *
 * Options:
 *   --threads N          compute threads (default: every core)
 *   --steps-per-epoch N  batches per epoch, when the dataset is not readable here (default:
 *                        counted from DATA.TRAIN, as the decode stage will read it)
 *   --test-in URI        where the test phases' batches come from (shm:NAME, -, file:PATH,
 *                        tcp://…)
 *   --test-steps N       batches per test phase (default: counted from DATA.TEST)
 *   --memory-in URI      the batches of DeepClusterV2's memory pass (one epoch of DATA.TRAIN)
 *   --check              check the config as a start would, then exit (0: it would start)
 *   --coll NAME          the world of trainers this one is a rank of (--rank, --world-size):
 *                        the shared segment NAME of shm/collective.h, where the trainers meet
 *                        to be one model (train/dist.h); nccl:ID, a world of GPUs
 *                        (nn/cuda/coll_nccl.h); net:HOST:PORT, trainers on several CPU
 *                        nodes meeting at rank 0's address (shm/coll_net.h, with the keys of
 *                        SELFSUP.TRANSPORT); or nccl-net:HOST:PORT, GPUs on several nodes,
 *                        which get NCCL's id from rank 0 there; selfsup run gives it to each trainer when
 *                        NUM_NODES × NUM_PROC_PER_NODE > 1
 */
#include "coll_net.h"
#include "collective.h"
#if HAVE_CUDA
#include "cuda/coll_nccl.h"
#endif
#include "log.h"
#include "nn.h"
#include "stage.h"
#include "train/trainer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A second input of the trainer (the test phases', the memory pass's). */
typedef struct {
    const char *uri, *what;
    stage *s;
    stage_input *in;
    trainer_test_input cb;
} extra_input;

typedef struct {
    trainer_options opt;
    extra_input test, memory;
    stage *s;
    trainer *t;
    bool check; /* --check: a dry start */
    const char *coll_name; /* --coll */
} train_stage;

/* How long a trainer waits for the others in a collective: generous, because a rank whose
 * batch is late is normal; a rank that is dead is seen at once, and a hung one by the
 * orchestrator's heartbeats. */
#define WORLD_TIMEOUT_MS 600000

static int option(void *state, int argc, char **argv)
{
    train_stage *ts = state;
    if (!strcmp(argv[0], "--test-in") && argc > 1) {
        ts->test.uri = argv[1];
        return 2;
    }
    if (!strcmp(argv[0], "--memory-in") && argc > 1) {
        ts->memory.uri = argv[1];
        return 2;
    }
    if (!strcmp(argv[0], "--check")) {
        ts->check = true;
        return 1;
    }
    if (!strcmp(argv[0], "--coll") && argc > 1) {
        ts->coll_name = argv[1];
        return 2;
    }
    bool threads = !strcmp(argv[0], "--threads"), steps = !strcmp(argv[0], "--steps-per-epoch"),
         test_steps = !strcmp(argv[0], "--test-steps");
    if ((!threads && !steps && !test_steps) || argc < 2)
        return 0;
    char *end;
    long v = strtol(argv[1], &end, 10);
    if (*end || v < (threads ? 0 : 1)) {
        log_error("%s needs a %s number, not '%s'", argv[0], threads ? "non-negative" : "positive", argv[1]);
        return -1;
    }
    if (threads)
        ts->opt.threads = (int)v;
    else if (steps)
        ts->opt.steps_per_epoch = v;
    else
        ts->opt.test_steps = v;
    return 2;
}

/* A second input for the trainer: a record, 0 on a stop, -1 on a failure or an early end. */
static int read_extra(void *ctx, rec_view *v)
{
    extra_input *x = ctx;
    int st = stage_input_read(x->in, v);
    if (st == STAGE_RECORD)
        return 1;
    if (st == STAGE_END && stage_stopping(x->s))
        return 0;
    if (st == STAGE_END)
        log_error("the %s input %s ended before the %s did", x->what, x->uri,
                  !strcmp(x->what, "test") ? "test phase" : "memory pass");
    return -1;
}

static void extra_done(void *ctx) { stage_input_read_done(((extra_input *)ctx)->in); }

static const trainer_test_input *extra_callbacks(extra_input *x, const char *what)
{
    if (!x->uri)
        return NULL;
    x->what = what;
    x->cb = (trainer_test_input){.read = read_extra, .done = extra_done, .ctx = x};
    return &x->cb;
}

/* --check: the config through trainer_check_config, then the end of the process. It exits
 * here because the stage framework runs a stage whenever prepare returns 0, and a dry start
 * must not open its input (stdin may be a terminal, a ring may not exist yet). */
static int check(stage *s, train_stage *ts)
{
    cfg_err err;
    ts->opt.world_promised = true; /* as the run will start it: selfsup run gives the world */
    if (!trainer_check_config(stage_config(s), &ts->opt, &err)) {
        log_error("%s", err.msg);
        return EXIT_USAGE;
    }
    log_info("the config passes the trainer's checks");
    exit(0);
}

/* The network world at address "HOST:PORT", with the keys of SELFSUP.TRANSPORT. */
static coll *join_net(const char *address, int rank, int world, const cfg_node *config, char **err)
{
    coll_net_options no = {.timeout_ms = WORLD_TIMEOUT_MS,
                           .keys_dir = cfg_str(config, "SELFSUP.TRANSPORT.SERVER_KEYS_DIR"),
                           .key_file = cfg_str(config, "SELFSUP.TRANSPORT.CLIENT_KEY_FILE")};
    return coll_net_join(address, rank, world, &no, err);
}

/* A world of GPUs: "nccl:<id>" on one node, "nccl-net:HOST:PORT" on several (the id handed out
 * by rank 0 in the network world there), the trainer on its local GPU (rank mod
 * NUM_PROC_PER_NODE). */
static coll *join_gpus(const char *name, int rank, int world, const cfg_node *config, char **err)
{
#if HAVE_CUDA
    int64_t per_node = cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    int device = per_node > 0 ? (int)(rank % per_node) : 0;
    if (!strncmp(name, "nccl:", 5))
        return coll_nccl_join(name + 5, rank, world, device, err);
    coll *bootstrap = join_net(name + strlen("nccl-net:"), rank, world, config, err);
    return bootstrap ? coll_nccl_join_via(bootstrap, device, err) : NULL; /* it keeps bootstrap, watched */
#else
    (void)rank, (void)world, (void)config;
    report_failure(err, "--coll %.9s…: this build has no CUDA, so no NCCL", name);
    return NULL;
#endif
}

/* The world --coll names: a world of GPUs (join_gpus), "net:HOST:PORT" (CPU nodes) or a
 * shared-memory segment. NULL with *err. */
static coll *join_world(const char *name, int rank, int world, const cfg_node *config, char **err)
{
    if (!strncmp(name, "net:", 4))
        return join_net(name + 4, rank, world, config, err);
    if (!strncmp(name, "nccl:", 5) || !strncmp(name, "nccl-net:", 9))
        return join_gpus(name, rank, world, config, err);
    coll_shm_options co = {.timeout_ms = WORLD_TIMEOUT_MS};
    return coll_shm_join(name, rank, world, &co, err);
}

static int prepare(stage *s, void *state)
{
    train_stage *ts = state;
    ts->opt.rank = stage_rank(s);
    ts->opt.world_size = stage_world_size(s);
    ts->opt.test_input = extra_callbacks(&ts->test, "test"); /* opened in run(), before the first batch */
    ts->opt.memory_input = extra_callbacks(&ts->memory, "memory");
    if (ts->check)
        return check(s, ts);
    if (ts->coll_name && ts->opt.world_size > 1) {
        char *why = NULL;
        if (!(ts->opt.world = join_world(ts->coll_name, ts->opt.rank, ts->opt.world_size, stage_config(s), &why))) {
            log_error("%s", why);
            free(why);
            return EXIT_RUNTIME;
        }
    }
    cfg_err err;
    if (!(ts->t = trainer_new(stage_config(s), &ts->opt, &err))) {
        log_error("%s", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

/* What this trainer's input says before a step (trainer.h). */
static trainer_input input_state(stage *s, int st)
{
    if (st == STAGE_RECORD)
        return TRAINER_INPUT_BATCH;
    if (st == STAGE_FAILED) /* a stop upstream: what was trained is kept to resume from */
        return stage_peer_stopped(s) ? TRAINER_INPUT_FAILED_STOPPED : TRAINER_INPUT_FAILED;
    return stage_stopping(s) ? TRAINER_INPUT_STOPPED : TRAINER_INPUT_END;
}

static const char *what_ended(trainer_input all)
{
    return all == TRAINER_INPUT_END ? "ended" : all == TRAINER_INPUT_STOPPED ? "was stopped" : "failed";
}

static int failed(char *err)
{
    log_error("%s", err);
    free(err);
    return EXIT_RUNTIME;
}

/* The batches, while every trainer has one; returns what ended them (the worst input of all
 * the trainers) with *mine this one's. -1 with *err when a step failed. */
static int train_batches(stage *s, train_stage *ts, trainer_input *mine, trainer_input *all, char **err)
{
    rec_view v;
    *all = TRAINER_INPUT_BATCH;
    while (*all == TRAINER_INPUT_BATCH) {
        *mine = input_state(s, stage_read(s, &v));
        if (trainer_agree(ts->t, *mine, all, err) != 0)
            return -1;
        int rc = *all == TRAINER_INPUT_BATCH ? trainer_step(ts->t, &v, v.hdr->epoch, err) : 0;
        if (*mine == TRAINER_INPUT_BATCH) /* trained, or left because another trainer stopped */
            stage_read_done(s);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* The input ring's memory pinned for the GPU's copies of the batches (nothing on the cpu); a
 * refusal only costs speed. Returns what to unpin, or NULL. */
static void *pin_input(stage *s, train_stage *ts)
{
    size_t bytes = 0;
    void *area = stage_input_memory(s, &bytes);
    char *why = NULL;
    if (!area || !eng_pin_host(trainer_backend(ts->t), area, bytes, &why)) {
        if (why)
            log_warn("the input ring's memory is not pinned (%s): batches are copied to the GPU through staging", why);
        free(why);
        return NULL;
    }
    return area;
}

static int train(stage *s, train_stage *ts)
{
    ts->s = ts->test.s = ts->memory.s = s;
    if (ts->test.uri && !(ts->test.in = stage_open_input(s, ts->test.uri)))
        return EXIT_RUNTIME;
    if (ts->memory.uri && !(ts->memory.in = stage_open_input(s, ts->memory.uri)))
        return EXIT_RUNTIME;
    trainer_input mine = TRAINER_INPUT_BATCH, all;
    char *err = NULL;
    if (train_batches(s, ts, &mine, &all, &err) != 0)
        return failed(err);
    if (all != mine && mine == TRAINER_INPUT_BATCH)
        log_info("another trainer's input %s: this one stops with it", what_ended(all));
    if (all == TRAINER_INPUT_FAILED)
        return EXIT_RUNTIME;
    bool stopped = all != TRAINER_INPUT_END;
    if (trainer_finish(ts->t, stopped, &err) != 0)
        return failed(err);
    if (all == TRAINER_INPUT_FAILED_STOPPED)
        return EXIT_RUNTIME;
    log_info("done: %lld iterations, last loss %.5g", (long long)trainer_iteration(ts->t), trainer_last_loss(ts->t));
    return stage_exit_status(s);
}

static int run(stage *s, void *state)
{
    train_stage *ts = state;
    void *pinned = pin_input(s, ts);
    int status = train(s, ts);
    if (pinned)
        eng_unpin_host(trainer_backend(ts->t), pinned);
    return status;
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "train",
        .summary = "Train a model on batch records (VISSL's standard_train_step).",
        .role = "consumer",
        .reads = true,
        .writes = false,
        .option = option,
        .prepare = prepare,
        .options = "  --threads N          compute threads (default: every core)\n"
                   "  --steps-per-epoch N  batches per epoch (default: counted from DATA.TRAIN)\n"
                   "  --test-in URI        the test phases' batches (TEST_MODEL)\n"
                   "  --test-steps N       batches per test phase (default: counted from DATA.TEST)\n"
                   "  --memory-in URI      DeepClusterV2's memory pass: one epoch of training batches\n"
                   "  --check              check the config as a start would, then exit 0 or 2\n"
                   "  --coll NAME          the trainers' world: a segment, or nccl:ID (selfsup run gives it)\n",
    };
    train_stage ts = {0};
    int status = stage_main(argc, argv, &info, &ts, run);
    stage_input_close(ts.test.in);
    stage_input_close(ts.memory.in);
    trainer_free(ts.t);
    (status == 0 ? coll_finish : coll_close)(ts.opt.world); /* a watching world tells finished from lost */
    return status;
}
