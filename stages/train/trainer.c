/*
 * trainer.c — VISSL's training task on the model engine (see trainer.h).
 *
 * The state is one struct (trainer_internal.h): the engine objects (backend, model, loss,
 * optimizer), the two schedules, the counters VISSL keeps (iteration, phase, batches done)
 * and the output files. A step is a straight line through standard_train_step's order; the
 * test phases follow the train phases phases.h names; the checkpoints are what VISSL's
 * always-on checkpoint hook writes. What the logging hooks write is monitor.c's.
 */
#include "train/trainer_internal.h"

#include "decode/dataset.h"
#include "decode/sampler.h"
#include "log.h"
#include "torchsave.h"
#include "train/checkpoint.h"
#include "util.h"
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- building ---------------------------------------------------------------------------- */

/* Batches per epoch for this rank: the DATA.<split> dataset ("TRAIN", "TEST") through
 * VISSL's sampler. */
static bool count_steps(const cfg_node *config, const char *split, const trainer_options *o, int64_t *out,
                        cfg_err *err)
{
    char key[64], path[80];
    snprintf(key, sizeof key, "DATA.%s", split);
    snprintf(path, sizeof path, "config.DATA.%s", split);
    decode_dataset ds;
    char *why = NULL;
    if (decode_dataset_load(&ds, config, split, NULL, &why) != 0) {
        cfg_fail(err, cfg_get(config, key), path, "%s", why ? why : "cannot load");
        free(why);
        return false;
    }
    const cfg_node *data = cfg_get(config, key);
    decode_sampler s = {.kind = cfg_bool(data, "USE_STATEFUL_DISTRIBUTED_SAMPLER") ? DECODE_SAMPLER_STATEFUL
                                                                                   : DECODE_SAMPLER_DISTRIBUTED,
                        .dataset_len = ds.length, .rank = o->rank, .world_size = o->world_size};
    int64_t n = (int64_t)decode_sampler_len(&s), b = cfg_int(data, "BATCHSIZE_PER_REPLICA");
    decode_dataset_free(&ds);
    *out = b < 1 ? 0 : cfg_bool(data, "DROP_LAST") ? n / b : (n + b - 1) / b;
    if (*out < 1) {
        snprintf(path, sizeof path, "config.DATA.%s.BATCHSIZE_PER_REPLICA", split);
        cfg_fail(err, cfg_get(data, "BATCHSIZE_PER_REPLICA"), path, "%lld images per rank make no batch of %lld",
                 (long long)n, (long long)b);
    }
    return *out >= 1;
}

/* SyncBN's group size in a world of `world` trainers (MODEL.SYNC_BN_CONFIG.GROUP_SIZE, as
 * VISSL's convert_sync_bn reads it: −1, a node's trainers; 0, all of them; k > 0, k of them
 * at most), or 0 without SyncBN. */
static int64_t sync_bn_group(const cfg_node *config, int64_t world)
{
    if (!cfg_bool(config, "MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN"))
        return 0;
    int64_t k = cfg_int(config, "MODEL.SYNC_BN_CONFIG.GROUP_SIZE");
    int64_t per_node = cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    int64_t size = k < 0 ? per_node : k == 0 ? world : k;
    return size < world ? size : world;
}

/* SyncBN's groups must cut the world into whole groups of consecutive ranks. */
static bool check_sync_bn(const cfg_node *config, int64_t world, cfg_err *err)
{
    int64_t size = sync_bn_group(config, world);
    if (size <= 1 || world % size == 0)
        return true;
    cfg_fail(err, cfg_get(config, "MODEL.SYNC_BN_CONFIG.GROUP_SIZE"),
             "config.MODEL.SYNC_BN_CONFIG.GROUP_SIZE",
             "SyncBN groups of %lld trainers do not divide the %lld trainers (world size)", (long long)size,
             (long long)world);
    return false;
}

/* A world above 1 (the config's, whose size the LR scaling and the losses read, or the one
 * --world-size says) trains as one model only with a world to share it (o->world, or
 * o->world_promised when validating for a run that will join one) and where the
 * data-parallel step covers the config. Anything else would be several trainers each training
 * a model of its own and writing the same checkpoint files: a configuration error. */
static bool check_world(const cfg_node *config, const trainer_options *o, cfg_err *err)
{
    int64_t nodes = cfg_int(config, "DISTRIBUTED.NUM_NODES");
    int64_t world = nodes * cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    world = o->world_size > world ? o->world_size : world;
    if (world <= 1)
        return true;
    bool cpu = !strcmp(cfg_str(config, "MACHINE.DEVICE"), "cpu");
    const char *backend = cfg_str(config, "DISTRIBUTED.BACKEND");
    if (strcmp(backend, cpu ? "gloo" : "nccl")) {
        cfg_fail(err, cfg_get(config, "DISTRIBUTED.BACKEND"), "config.DISTRIBUTED.BACKEND",
                 cpu ? "%s needs GPUs (MACHINE.DEVICE: gpu); %lld trainers on the CPU share their model through gloo's "
                       "role (the shm collectives): set DISTRIBUTED.BACKEND: gloo"
                     : "is %s, but %lld GPU trainers share their model through NCCL: set DISTRIBUTED.BACKEND: nccl",
                 backend, (long long)world);
        return false;
    }
    const char *key = nodes > 1 ? "config.DISTRIBUTED.NUM_NODES" : "config.DISTRIBUTED.NUM_PROC_PER_NODE";
    if (o->world || o->world_promised)
        return check_sync_bn(config, world, err);
    cfg_fail(err, cfg_get(config, key + strlen("config.")), key,
             "world size %lld: this trainer was given no world to share (--coll), so it would train a model of "
             "its own: selfsup run gives each trainer its world; alone, train one process (NUM_NODES=1, "
             "NUM_PROC_PER_NODE=1)",
             (long long)world);
    return false;
}

/* INPUT_KEY_NAMES as the keys MULTI_INPUT_HEAD_MAPPING gives its heads, each key once: the
 * model reads input i from the mapping's i-th key (inputs.h). */
static bool mapped_inputs(const cfg_node *config, const cfg_node *keys)
{
    const cfg_node *mapping = cfg_get(config, "MODEL.MULTI_INPUT_HEAD_MAPPING");
    if (keys->kind != CFG_LIST || mapping->kind != CFG_LIST || keys->len == 0 || keys->len != mapping->len)
        return false;
    for (size_t i = 0; i < keys->len; i++) {
        bool found = false;
        for (size_t j = 0; keys->items[i]->kind == CFG_STR && j < mapping->len; j++) {
            const cfg_node *entry = mapping->items[j];
            found |= entry->kind == CFG_LIST && entry->len >= 1 && entry->items[0]->kind == CFG_STR &&
                     !strcmp(entry->items[0]->s, keys->items[i]->s);
        }
        for (size_t j = 0; found && j < i; j++)
            found = strcmp(keys->items[j]->s, keys->items[i]->s) != 0;
        if (!found)
            return false;
    }
    return true;
}

/* What this trainer refuses before anything runs: a world it cannot train as one model, and
 * inputs other than VISSL's default "data" key or the keys of a multi-input mapping. (A device it has no backend for is refused
 * when the backend opens: model_backend_open.) */
static bool check_supported(const cfg_node *config, const trainer_options *o, cfg_err *err)
{
    if (!check_world(config, o, err))
        return false;
    const cfg_node *keys = cfg_get(config, "DATA.TRAIN.INPUT_KEY_NAMES"), *mapping = cfg_get(config, "MODEL.MULTI_INPUT_HEAD_MAPPING");
    bool mapped = mapping->kind == CFG_LIST && mapping->len > 0;
    bool data = keys->kind == CFG_LIST && keys->len == 1 && keys->items[0]->kind == CFG_STR &&
                !strcmp(keys->items[0]->s, "data");
    if (mapped ? !mapped_inputs(config, keys) : !data) {
        cfg_fail(err, keys, "config.DATA.TRAIN.INPUT_KEY_NAMES", mapped ? "must be the inputs "
                 "MODEL.MULTI_INPUT_HEAD_MAPPING names, each once (PIRL: [patches, images])" : "must be [data] "
                 "(other keys come with MODEL.MULTI_INPUT_HEAD_MAPPING)");
        return false;
    }
    const char *collator = cfg_str(config, "DATA.TRAIN.COLLATE_FUNCTION");
    if (mapped && strcmp(collator, "patch_and_image_collator")) { /* the one collator that writes them */
        cfg_fail(err, cfg_get(config, "DATA.TRAIN.COLLATE_FUNCTION"), "config.DATA.TRAIN.COLLATE_FUNCTION",
                 "is '%s', which writes no patches and images: the inputs of MULTI_INPUT_HEAD_MAPPING come from "
                 "patch_and_image_collator", collator);
        return false;
    }
    return true;
}

/* CHECKPOINT.DIR: made, writable and with room for one checkpoint, or refused now rather
 * than at the first save, an epoch later. A checkpoint already there is resumed under
 * AUTO_RESUME (VISSL's choice: the file checkpoint.torch links, i.e. the latest); otherwise
 * it is refused unless OVERWRITE_EXISTING. Called once the model and the optimizer exist. */
static int load_state(trainer *t, ckpt_state *st, char **err);
static eng_entry *checkpoint_entries(const trainer *t, int *n, eng_entry **opt_entries, int *nopt);

/* Bytes of one checkpoint: the model's, the optimizer's and the loss's state. TEST_ONLY
 * trains nothing and saves none. */
static uint64_t checkpoint_bytes(const trainer *t)
{
    if (t->plan.test_only)
        return 0;
    int n, nopt;
    eng_entry *opt_entries, *all = checkpoint_entries(t, &n, &opt_entries, &nopt);
    uint64_t bytes = ckpt_size_estimate(all, n);
    free(all);
    optim_state_entries_free(opt_entries, nopt);
    return bytes;
}

/* Whether CHECKPOINT.DIR holds a checkpoint (its checkpoint.torch link, even if what it names
 * is gone). */
static bool holds_checkpoint(const char *dir)
{
    char *link = path_join(dir, "checkpoint.torch");
    struct stat st;
    bool exists = lstat(link, &st) == 0;
    free(link);
    return exists;
}

/* A checkpoint there is refused unless the run resumes it, overwrites it, or only tests. */
static bool refuse_to_overwrite(const cfg_node *config, const char *dir, bool test_only, cfg_err *err)
{
    if (test_only || cfg_bool(config, "CHECKPOINT.AUTO_RESUME") ||
        cfg_bool(config, "CHECKPOINT.OVERWRITE_EXISTING"))
        return false;
    cfg_fail(
        err, cfg_get(config, "CHECKPOINT.OVERWRITE_EXISTING"), "config.CHECKPOINT.OVERWRITE_EXISTING",
        "%s already holds a checkpoint: set AUTO_RESUME=True to resume from it, or OVERWRITE_EXISTING=True "
        "to start over",
        dir);
    return true;
}

/* What prepare_dir will find in CHECKPOINT.DIR, seen without making or writing anything (a
 * dry start and validate): a folder the run can make or write into, and no checkpoint it
 * would refuse to overwrite. Whether there is room, and whether a checkpoint to resume loads,
 * the run finds out when the model exists. */
static bool probe_dir(const cfg_node *config, bool test_only, cfg_err *err)
{
    const char *dir = cfg_str(config, "CHECKPOINT.DIR");
    char *why = NULL;
    if (ckpt_probe_output_dir(dir, &why) != 0) {
        cfg_fail(err, cfg_get(config, "CHECKPOINT.DIR"), "config.CHECKPOINT.DIR", "%s", why);
        free(why);
        return false;
    }
    return !(holds_checkpoint(dir) && refuse_to_overwrite(config, dir, test_only, err));
}

static bool prepare_dir(trainer *t, cfg_err *err)
{
    const char *dir = cfg_str(t->config, "CHECKPOINT.DIR");
    char *why = NULL;
    if (ckpt_check_output_dir(dir, checkpoint_bytes(t), &why) != 0) {
        cfg_fail(err, cfg_get(t->config, "CHECKPOINT.DIR"), "config.CHECKPOINT.DIR", "%s", why);
        free(why);
        return false;
    }
    t->dir = xstrdup(dir);
    ckpt_remove_stale(dir);
    if (!holds_checkpoint(dir))
        return true;
    if (cfg_bool(t->config, "CHECKPOINT.AUTO_RESUME")) {
        ckpt_state cs;
        if (load_state(t, &cs, &why) == 1)
            return true;
        cfg_fail(err, cfg_get(t->config, "CHECKPOINT.AUTO_RESUME"), "config.CHECKPOINT.AUTO_RESUME",
                 "cannot resume from %s: %s", dir, why ? why : "no checkpoint");
        free(why);
        return false;
    }
    return !refuse_to_overwrite(t->config, dir, t->plan.test_only, err);
}

/* The GPU this process uses: its rank among the processes on its node. */
static int local_rank(const cfg_node *config, int rank)
{
    int64_t per_node = cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    return per_node > 0 ? (int)(rank % per_node) : 0;
}

static bool build_model(trainer *t, const trainer_options *o, cfg_err *err)
{
    if (!model_build_from_config(t->config, o->threads, local_rank(t->config, o->rank), &t->be, &t->m, err))
        return false;
    int64_t group = sync_bn_group(t->config, dist_world(&t->dist));
    if (group > 1) { /* SyncBN: the batch norms train over the group's batches */
        dist_group_init(&t->bn_group, &t->dist, (int)group);
        model_set_batchnorm_reducer(t->m, &t->bn_group.reducer);
        log_info("SyncBN: batch norm over ranks %d to %d", t->bn_group.first,
                 t->bn_group.first + t->bn_group.size - 1);
    }
    if (dist_world(&t->dist) > 1) {
        double cap_mb = cfg_number(cfg_path(t->config, "DATA.DDP_BUCKET_CAP_MB"));
        grad_buckets_plan(&t->buckets, t->m, GRAD_BUCKETS_FIRST_BYTES, (size_t)(cap_mb * 1024 * 1024), &t->dist,
                          t->be);
        log_info("DDP: %d gradient buckets (DDP_BUCKET_CAP_MB %g)", t->buckets.n, cap_mb);
    }
    return true;
}

/* The optimizer over every entry that is not frozen (FEATURE_EVAL_SETTINGS). */
static bool build_optimizer(trainer *t, cfg_err *err)
{
    const model_options *mo = model_opts(t->m);
    int n = model_entry_count(t->m);
    bool *trainable = xmalloc((size_t)n * sizeof *trainable);
    for (int i = 0; i < n; i++) {
        const char *name = model_entry_at(t->m, i)->name;
        trainable[i] = !strncmp(name, "trunk.", 6) ? !model_trunk_frozen(mo) : !model_heads_frozen(mo);
    }
    eng_tensor params = model_params(t->m);
    char *why = NULL;
    t->opt = optim_new(t->be, model_entry_at(t->m, 0), n, &params, trainable, &t->oo, &why);
    free(trainable);
    if (!t->opt) {
        cfg_fail(err, NULL, "config.OPTIMIZER", "%s", why);
        free(why);
    }
    return t->opt != NULL;
}

/* DDP's start: every rank takes rank 0's parameters and buffers (a resumed run's, when it
 * resumed), so the ranks are one model whatever their seeds did. */
static bool join_world(trainer *t, const trainer_options *o, cfg_err *err)
{
    if (!o->world)
        return true;
    eng_tensor params = model_params(t->m), buffers = model_buffers(t->m);
    char *why = NULL;
    if (dist_broadcast(&t->dist, t->be, &params, &why) == 0 &&
        dist_broadcast(&t->dist, t->be, &buffers, &why) == 0) {
        log_info("rank %d of %d: the model is rank 0's", coll_rank(o->world), coll_world(o->world));
        return true;
    }
    cfg_fail(err, NULL, "config.DISTRIBUTED", "%s", why);
    free(why);
    return false;
}

/* The loss state's part that needs the model (MoCo's momentum encoder). */
static bool attach_loss_state(trainer *t, cfg_err *err)
{
    char *why = NULL;
    if (loss_state_attach(t->be, t->loss_st, t->m, &why) == 0)
        return true;
    cfg_fail(err, cfg_get(t->config, "LOSS"), "config.LOSS", "%s", why);
    free(why);
    return false;
}

/* A trainer with nothing built yet: the counters and the values read straight from the
 * config, and schedules trainer_free can free. */
static trainer *trainer_alloc(const cfg_node *config, const trainer_options *o)
{
    trainer *t = xcalloc(1, sizeof *t);
    t->config = config;
    t->rank = o->rank;
    t->dist.world = o->world; /* before the loss state, which names its tensors by rank */
    t->broadcast_buffers = cfg_bool(config, "DISTRIBUTED.BROADCAST_BUFFERS");
    t->num_epochs = cfg_int(config, "OPTIMIZER.num_epochs");
    t->log_frequency = cfg_int(config, "LOG_FREQUENCY");
    t->batch_size = cfg_int(config, "DATA.TRAIN.BATCHSIZE_PER_REPLICA");
    t->checkpoint_frequency = cfg_int(config, "CHECKPOINT.CHECKPOINT_FREQUENCY");
    t->checkpoint_iter_frequency = cfg_int(config, "CHECKPOINT.CHECKPOINT_ITER_FREQUENCY");
    t->phase = -1;
    t->pending_test = -1;
    t->plan = phase_plan_from_config(config);
    sched_init(&t->lr, SCHED_CONSTANT);
    sched_init(&t->lr_head, SCHED_CONSTANT);
    return t;
}

/* What the config alone decides, read into t: the supported inputs, the optimizer, the loss,
 * the meter, both schedules and the batches per epoch (and per test phase, when test batches
 * will come). trainer_new and trainer_check_config both start here, so a check validate
 * makes cannot drift from the run's. */
static bool read_config(trainer *t, const cfg_node *config, const trainer_options *o, cfg_err *err)
{
    bool ok = check_supported(config, o, err) && optim_options_from_config(config, &t->oo, err) &&
              loss_options_from_config(config, &t->lo, err) &&
              meter_from_config(config, &t->meter, &t->meter_on, err);
    ok = ok && cfg_build_scheduler(cfg_get(config, "OPTIMIZER.param_schedulers.lr"),
                                   "config.OPTIMIZER.param_schedulers.lr", t->num_epochs, &t->lr, err);
    ok = ok && cfg_build_scheduler(cfg_get(config, "OPTIMIZER.param_schedulers.lr_head"),
                                   "config.OPTIMIZER.param_schedulers.lr_head", t->num_epochs, &t->lr_head, err);
    t->test_meter = t->meter;
    t->steps_per_epoch = o->steps_per_epoch;
    if (t->plan.test_only) /* nothing trains: the schedules' `where` is never read */
        t->steps_per_epoch = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
    ok = ok && (t->steps_per_epoch > 0 || count_steps(config, "TRAIN", o, &t->steps_per_epoch, err));
    if (t->plan.test_model && !t->plan.test_only && o->test_input)
        ok = ok && (o->test_steps > 0 ? (t->test_steps = o->test_steps) > 0
                                      : count_steps(config, "TEST", o, &t->test_steps, err));
    return ok;
}

/* A fresh run of a loss with memory banks (DeepClusterV2) fills them first, from its own input. */
static bool plan_memory_pass(trainer *t, cfg_err *err)
{
    const int *crops;
    t->memory_due = !t->plan.test_only && t->batches_done == 0 && t->phase < 0 &&
                    loss_memory_crops(t->loss_st, &crops) > 0;
    if (!t->memory_due || t->memory_in.read)
        return true;
    cfg_fail(err, cfg_get(t->config, "LOSS.name"), "config.LOSS.name",
             "%s fills its memory banks from one pass over the training data before the first epoch, and this "
             "trainer has no input for it: give it those batches with --memory-in URI (selfsup run wires a chain "
             "for it)", loss_display_name(t->lo.name));
    return false;
}

bool trainer_check_config(const cfg_node *config, const trainer_options *o, cfg_err *err)
{
    trainer *t = trainer_alloc(config, o);
    bool ok = read_config(t, config, o, err) &&
              model_check_config(config, local_rank(config, o->rank), err) &&
              probe_dir(config, t->plan.test_only, err);
    trainer_free(t);
    return ok;
}

trainer *trainer_new(const cfg_node *config, const trainer_options *o, cfg_err *err)
{
    trainer *t = trainer_alloc(config, o);
    bool ok = read_config(t, config, o, err);
    if (o->test_input)
        t->test_in = *o->test_input; /* test_in.read: whether there is a test input */
    if (o->memory_input)
        t->memory_in = *o->memory_input;
    ok = ok && build_model(t, o, err) && build_optimizer(t, err);
    if (ok) /* before prepare_dir: a resumed checkpoint restores it */
        t->loss_st = loss_state_new(t->be, &t->lo, (uint64_t)cfg_int(config, "SEED_VALUE"), &t->dist);
    ok = ok && attach_loss_state(t, err);
    ok = ok && prepare_dir(t, err) && join_world(t, o, err) && monitor_open(t, err) && plan_memory_pass(t, err);
    if (!ok) {
        trainer_free(t);
        return NULL;
    }
    monitor_log_complexity(t);
    if (t->plan.test_only)
        log_info("TEST_ONLY: %lld test phases of the model in eval mode, no training", (long long)t->num_epochs);
    else if (t->plan.test_model && !t->test_in.read) {
        log_warn("TEST_MODEL is on but this trainer has no test input (--test-in URI; selfsup run wires one): the "
                 "test phases are skipped");
        t->plan.test_model = false; /* and the phases are numbered as the ones that run */
    } else if (t->plan.test_model)
        log_info("TEST_MODEL: a test phase of %lld batches after epochs 0, %lld, … and the last (TEST_EVERY_NUM_EPOCH "
                 "%lld)", (long long)t->test_steps, (long long)t->plan.test_every, (long long)t->plan.test_every);
    log_info("training %lld epochs of %lld batches; %lld parameters; loss %s; optimizer %s%s", (long long)t->num_epochs,
             (long long)t->steps_per_epoch, (long long)model_param_count(t->m), loss_display_name(t->lo.name),
             t->oo.name == OPTIM_SGD ? "sgd" : t->oo.name == OPTIM_ADAM ? "adam" : "adamw", t->oo.use_larc ? " + LARC" : "");
    t->t_start = t->t_last_log = now_seconds();
    return t;
}

void trainer_free(trainer *t)
{
    if (!t)
        return;
    meter_free(&t->meter);
    meter_free(&t->test_meter);
    loss_free(t->be, t->train_loss.ls);
    loss_free(t->be, t->test_loss.ls);
    loss_state_free(t->be, t->loss_st);
    optim_free(t->be, t->opt);
    if (t->m)
        model_free(t->be, t->m);
    dist_group_free(&t->bn_group);
    grad_buckets_free(&t->buckets);
    eng_backend_close(t->be);
    sched_free(&t->lr);
    sched_free(&t->lr_head);
    if (t->stdout_json)
        fclose(t->stdout_json);
    tb_close(t->tb);
    batch_host_free(&t->host);
    dist_free(&t->dist);
    free(t->dir);
    free(t);
}

int64_t trainer_iteration(const trainer *t) { return t->iteration; }
model *trainer_model(trainer *t) { return t->m; }
eng_backend *trainer_backend(trainer *t) { return t->be; }
struct loss_state *trainer_loss_state(trainer *t) { return t->loss_st; }
double trainer_last_loss(const trainer *t) { return t->last_loss; }
double trainer_last_test_loss(const trainer *t) { return t->last_test_loss; }
int64_t trainer_steps_per_epoch(const trainer *t) { return t->steps_per_epoch; }

/* ---- the batch --------------------------------------------------------------------------- */

/* Plan the model for these input shapes (nothing when they are the last planned ones), and
 * the slot's loss for the model's outputs on them (once per shape list). */
static int plan(trainer *t, const eng_shape *shapes, int n, loss_slot *slot, char **err)
{
    if (model_plan(t->be, t->m, shapes, n, err) != 0)
        return -1;
    bool same = slot->ls && n == slot->ninputs;
    for (int k = 0; same && k < n; k++)
        same = eng_shape_equal(&shapes[k], &slot->in_shape[k]);
    if (same)
        return 0;
    eng_shape outs[MAX_OUTPUTS];
    int nout = model_output_count(t->m);
    if (nout > MAX_OUTPUTS)
        return report_failure(err, "the model has %d outputs (at most %d)", nout, MAX_OUTPUTS);
    for (int k = 0; k < nout; k++)
        outs[k] = model_output(t->m, k)->shape;
    loss_free(t->be, slot->ls);
    if (!(slot->ls = loss_new(t->be, &t->lo, t->loss_st, outs, nout, err)))
        return -1;
    slot->ninputs = n;
    memcpy(slot->in_shape, shapes, (size_t)n * sizeof *shapes);
    return 0;
}

static int load_inputs(trainer *t, const rec_view *v, loss_slot *slot, char **err)
{
    int idx[MAX_INPUTS];
    eng_shape shapes[MAX_INPUTS];
    int n = batch_model_input_shapes(v, model_opts(t->m), idx, shapes, err);
    if (n < 0 || plan(t, shapes, n, slot, err) != 0)
        return -1;
    return batch_upload(t->be, t->m, &t->host, v, idx, n, err);
}

/* label.0 as the loss reads it (absent: no labels, as SimCLR needs none), and data_idx.0, the
 * samples' dataset indices (memory banks), when the collate stage wrote one per image. */
static loss_batch batch_labels(const rec_view *v)
{
    int li = rec_find(v, "label.0"), ii = rec_find(v, "data_idx.0");
    if (li < 0 || v->tensors[li].dtype != REC_I64 || v->tensors[li].ndim < 1)
        return (loss_batch){0};
    const rec_tensor *d = &v->tensors[li];
    loss_batch b = {.batch = (int64_t)d->shape[0], .label = rec_data(v, li),
                    .label_cols = d->ndim == 2 ? (int)d->shape[1] : 1};
    if (ii >= 0 && v->tensors[ii].dtype == REC_I64 && v->tensors[ii].ndim == 1 &&
        (int64_t)v->tensors[ii].shape[0] == b.batch)
        b.sample_index = rec_data(v, ii);
    return b;
}

/* ---- checkpoints -------------------------------------------------------------------------- */

/* Every tensor a checkpoint holds: the model's, the optimizer's state, the loss's state. */
static eng_entry *checkpoint_entries(const trainer *t, int *n, eng_entry **opt_entries, int *nopt)
{
    int nm = model_entry_count(t->m);
    const eng_entry *loss_entries;
    int nl = loss_state_entries(t->loss_st, &loss_entries);
    *nopt = optim_state_entries(t->opt, opt_entries);
    eng_entry *all = xmalloc((size_t)(nm + *nopt + nl + 1) * sizeof *all);
    memcpy(all, model_entry_at(t->m, 0), (size_t)nm * sizeof *all);
    memcpy(all + nm, *opt_entries, (size_t)*nopt * sizeof *all);
    if (nl)
        memcpy(all + nm + *nopt, loss_entries, (size_t)nl * sizeof *all);
    *n = nm + *nopt + nl;
    return all;
}

/* A checkpoint of everything exact resume needs; the next batch to train is (next_epoch, next_batch).
 * Rank 0 writes it, with every rank's own loss state (SwAV's queues) gathered into it. */
static int save_checkpoint(trainer *t, const char *file, const char *kind, int64_t next_epoch, int64_t next_batch,
                           char **err)
{
    const eng_entry *mine;
    eng_entry *ranks = NULL;
    int nranks = 0, nmine = loss_state_rank_entries(t->loss_st, &mine);
    if (dist_gather_entries(&t->dist, t->be, mine, nmine, &ranks, &nranks, err) != 0)
        return -1;
    if (t->rank != 0) { /* the ranks are one model: rank 0 writes it */
        t->checkpointed_batches = t->batches_done;
        return 0;
    }
    int n, nopt;
    eng_entry *opt_entries, *own = checkpoint_entries(t, &n, &opt_entries, &nopt);
    eng_entry *all = xmalloc((size_t)(n + nranks + 1) * sizeof *all);
    memcpy(all, own, (size_t)n * sizeof *all);
    if (nranks)
        memcpy(all + n, ranks, (size_t)nranks * sizeof *all);
    ckpt_state cs = {.kind = kind, .phase = t->phase, .iteration = t->iteration, .batches_done = t->batches_done,
                     .next_epoch = next_epoch, .next_batch = next_batch, .num_epochs = t->num_epochs,
                     .loss_iterations = loss_state_iterations(t->loss_st)};
    int rc = ckpt_save(t->be, t->dir, file, all, n + nranks, &cs, err);
    if (rc == 0)
        t->checkpointed_batches = t->batches_done;
    if (rc == 0)
        log_info("checkpoint: %s/%s (%s, phase %lld, iteration %lld)", t->dir, file, kind, (long long)t->phase,
                 (long long)t->iteration);
    free(all);
    free(own);
    dist_entries_free(t->be, ranks, nranks);
    optim_state_entries_free(opt_entries, nopt);
    return rc;
}

/* Everything a checkpoint holds back into the model, the optimizer and the counters. */
static int load_state(trainer *t, ckpt_state *cs, char **err)
{
    int n, nopt;
    eng_entry *opt_entries, *all = checkpoint_entries(t, &n, &opt_entries, &nopt);
    int rc = ckpt_load(t->be, t->dir, all, n, cs, err);
    free(all);
    optim_state_entries_free(opt_entries, nopt);
    if (rc != 1)
        return rc;
    if (loss_state_loaded(t->be, t->loss_st, err) != 0)
        return -1;
    t->iteration = cs->iteration;
    t->batches_done = cs->batches_done;
    loss_state_set_iterations(t->loss_st, cs->loss_iterations);
    t->resume_epoch = cs->next_epoch;
    t->resume_batch = cs->next_batch;
    optim_set_step_count(t->opt, cs->batches_done);
    model_set_train_step(t->m, (uint64_t)cs->iteration);
    t->checkpointed_batches = t->batches_done;
    if (!strcmp(cs->kind, "iteration") && cs->phase >= 0) { /* stopped inside an epoch: it goes on */
        t->phase = cs->phase;
        t->in_phase = true;
        t->phase_batches = cs->next_batch;
        loss_state_resume_at(t->loss_st, cs->next_batch);
    }
    /* VISSL resumes a phase checkpoint at the phase after it: the test phase, if one follows */
    if (!strcmp(cs->kind, "phase") && phase_plan_test_after(&t->plan, cs->phase))
        t->pending_test = cs->phase;
    if (t->plan.test_only)
        log_info("testing the weights of %s/checkpoint.torch (%s, iteration %lld)", t->dir, cs->kind,
                 (long long)cs->iteration);
    else
        log_info("resumed from %s/checkpoint.torch (%s): iteration %lld, training on from epoch %lld, batch %lld%s",
                 t->dir, cs->kind, (long long)cs->iteration, (long long)cs->next_epoch, (long long)cs->next_batch,
                 cs->next_epoch >= t->num_epochs ? " (the run is already complete)" : "");
    return 1;
}





static int run_test_phase(trainer *t, int64_t epoch, char **err);

/* VISSL's on_phase_end of a train phase: the metrics.json line, then a checkpoint when
 * phase_idx % CHECKPOINT_FREQUENCY == 0 and at the last epoch; then the test phase that
 * follows it, if one does. */
/* A phase's accuracy counts, mean AP's rows (and a test phase's loss) over the ranks, before
 * rank 0 logs them: VISSL's meters and loss are reduced across the processes the same way. */
static int reduce_phase(trainer *t, acc_meter *m, bool meter_on, double *loss_sum, char **err)
{
    if (!t->dist.world)
        return 0;
    if (meter_on && meter_reduce(m, &t->dist, err) != 0)
        return -1;
    return loss_sum ? dist_mean(&t->dist, loss_sum, err) : 0;
}

static int phase_end(trainer *t, char **err)
{
    int64_t phase_idx = phase_plan_train_index(&t->plan, t->phase);
    if (reduce_phase(t, &t->meter, t->meter_on, NULL, err) != 0)
        return -1;
    monitor_train_phase_end(t);
    monitor_metrics_line(t, "train", phase_idx, t->phase, &t->meter, t->meter_on);
    t->in_phase = false;
    bool final = t->phase + 1 >= t->num_epochs;
    if (final || (t->checkpoint_frequency > 0 && phase_idx % t->checkpoint_frequency == 0)) {
        char file[96];
        snprintf(file, sizeof file, final ? "model_final_checkpoint_phase%lld.torch" : "model_phase%lld.torch",
                 (long long)phase_idx);
        if (save_checkpoint(t, file, final ? "final" : "phase", t->phase + 1, 0, err) != 0)
            return -1;
    }
    return phase_plan_test_after(&t->plan, t->phase) ? run_test_phase(t, t->phase, err) : 0;
}

/* ---- test phases -------------------------------------------------------------------------- */

/* One test batch: eval-mode forward, the loss (for its mean) and the test meter. */
static int test_step(trainer *t, const rec_view *batch, char **err)
{
    if (load_inputs(t, batch, &t->test_loss, err) != 0)
        return -1;
    model_forward(t->be, t->m, false);
    if (loss_on_forward(t->be, t->loss_st, t->m, batch, err) != 0)
        return -1;
    const eng_tensor *outs[MAX_OUTPUTS];
    for (int k = 0; k < model_output_count(t->m); k++)
        outs[k] = model_output(t->m, k);
    loss_batch lb = batch_labels(batch);
    double value;
    if (loss_compute(t->be, t->test_loss.ls, outs, &lb, &value, err) != 0)
        return -1;
    if (t->test_meter.name && lb.label && /* the test meter runs whenever METERS.name is set */
        meter_update(t->be, &t->test_meter, outs, model_output_count(t->m), lb.label, lb.batch, lb.label_cols, err) != 0)
        return -1;
    t->test.loss_sum += value;
    t->test.batches++;
    return 0;
}

static void test_phase_end(trainer *t, int64_t phase_idx, int64_t train_phase_idx)
{
    t->last_test_loss = t->test.batches ? t->test.loss_sum / (double)t->test.batches : 0.0;
    log_info("Rank: %d; test phase %lld: %lld batches, mean loss %.5g", t->rank, (long long)phase_idx,
             (long long)t->test.batches, t->last_test_loss);
    monitor_metrics_line(t, "test", phase_idx, train_phase_idx, &t->test_meter, t->test_meter.name != NULL);
    t->test = (test_run){0};
}

int trainer_agree(trainer *t, trainer_input mine, trainer_input *all, char **err)
{
    double worst = (double)mine;
    if (dist_reduce(&t->dist, &worst, 1, true, err) != 0)
        return -1;
    *all = (trainer_input)worst;
    return 0;
}

/* The next test batch into *v, as every rank's test input allows: 1, 0 on a stop (any rank's),
 * -1 on a failure (any rank's; *err says whose). */
static int read_test_batch(trainer *t, rec_view *v, char **err)
{
    int st = t->test_in.read(t->test_in.ctx, v);
    trainer_input mine = st > 0 ? TRAINER_INPUT_BATCH : TRAINER_INPUT_STOPPED, all;
    if (st < 0)
        mine = TRAINER_INPUT_FAILED;
    if (trainer_agree(t, mine, &all, err) != 0)
        return -1;
    if (all != TRAINER_INPUT_BATCH && st > 0)
        t->test_in.done(t->test_in.ctx); /* another rank's input stopped or failed: not tested */
    if (all == TRAINER_INPUT_FAILED && mine != TRAINER_INPUT_FAILED)
        *err = xstrdup("another trainer's test input failed");
    return all == TRAINER_INPUT_BATCH ? 1 : all == TRAINER_INPUT_STOPPED ? 0 : -1;
}

/* The test phase after train phase `epoch`: test_steps batches from the test input. A stop
 * or the end of that input leaves it unfinished (no metrics line); returns 0 then too. */
static int run_test_phase(trainer *t, int64_t epoch, char **err)
{
    t->pending_test = -1;
    if (!t->test_in.read)
        return 0; /* said at the start */
    t->test = (test_run){.epoch = epoch};
    log_info("Starting phase %lld [test]", (long long)phase_plan_test_index(&t->plan, epoch));
    for (int64_t b = 0; b < t->test_steps; b++) {
        rec_view v;
        char *why = NULL;
        int st = read_test_batch(t, &v, &why);
        if (st < 0) {
            report_failure(err,
                           "the test input failed after %lld of the %lld batches of the test phase after "
                           "epoch %lld%s%s",
                           (long long)b, (long long)t->test_steps, (long long)epoch, why ? ": " : "",
                           why ? why : "");
            free(why);
            return -1;
        }
        if (st == 0) { /* a stop: the run ends here, this test phase unfinished */
            log_info("stopped in the test phase after epoch %lld (%lld of %lld batches)", (long long)epoch,
                     (long long)b, (long long)t->test_steps);
            t->test = (test_run){0};
            meter_reset(&t->test_meter);
            t->test_interrupted = true;
            return 0;
        }
        int rc = test_step(t, &v, err);
        t->test_in.done(t->test_in.ctx);
        if (rc != 0)
            return -1;
    }
    if (reduce_phase(t, &t->test_meter, t->test_meter.name != NULL, &t->test.loss_sum, err) != 0)
        return -1;
    test_phase_end(t, phase_plan_test_index(&t->plan, epoch), epoch);
    return 0;
}

/* TEST_ONLY's phase ends: its meter and loss over the ranks (which reach it together: their
 * shards hold as many batches, and trainer_agree keeps them in step), then the logs. */
static int test_only_phase_end(trainer *t, char **err)
{
    if (reduce_phase(t, &t->test_meter, t->test_meter.name != NULL, &t->test.loss_sum, err) != 0)
        return -1;
    test_phase_end(t, t->test.epoch, -1);
    return 0;
}

/* TEST_ONLY: each batch is a test batch; the record's epoch tells the phases apart. */
static int test_only_step(trainer *t, const rec_view *batch, uint32_t epoch, char **err)
{
    if (t->test.open && (int64_t)epoch != t->test.epoch && test_only_phase_end(t, err) != 0)
        return -1;
    if (!t->test.open) {
        t->test = (test_run){.epoch = epoch, .open = true};
        log_info("Starting phase %lld [test]", (long long)epoch);
    }
    return test_step(t, batch, err);
}

/* ---- a non-finite loss --------------------------------------------------------------------- */

static st_dtype st_of(int code)
{
    switch (code) {
    case REC_U8: return ST_U8;
    case REC_I8: return ST_I8;
    case REC_I16: return ST_I16;
    case REC_I32: return ST_I32;
    case REC_I64: return ST_I64;
    case REC_F16: return ST_F16;
    case REC_BF16: return ST_BF16;
    case REC_F64: return ST_F64;
    case REC_BOOL: return ST_BOOL;
    default: return ST_F32;
    }
}

/* What VISSL's LogLossMetricsCheckpointHook leaves when the model's output is not finite:
 * a checkpoint of this iteration, rank{R}_model_output.pth (the outputs, by position) and
 * rank{R}_input_sample.pth (the batch's tensors by name), for torch.load. */
static void dump_nan(trainer *t, const rec_view *batch)
{
    char file[96], *err = NULL;
    snprintf(file, sizeof file, "model_iteration%lld.torch", (long long)t->iteration);
    if (save_checkpoint(t, file, "iteration", t->phase, t->phase_batches, &err) != 0) {
        log_error("%s", err);
        free(err), err = NULL;
    }
    int n = model_output_count(t->m);
    ts_dict *out = ts_dict_new(false), *in = ts_dict_new(false);
    float **host = xcalloc((size_t)n, sizeof *host);
    for (int k = 0; k < n; k++) {
        const eng_tensor *o = model_output(t->m, k);
        size_t shape[NN_MAX_DIMS];
        for (int d = 0; d < o->shape.ndim; d++)
            shape[d] = (size_t)o->shape.dim[d];
        host[k] = xmalloc((size_t)eng_numel(&o->shape) * sizeof(float));
        eng_download(t->be, o, host[k]);
        char key[16];
        snprintf(key, sizeof key, "%d", k);
        ts_dict_add_tensor(out, key, ST_F32, o->shape.ndim, shape, host[k]);
    }
    for (uint32_t i = 0; i < batch->hdr->n_tensors; i++) {
        const rec_tensor *d = &batch->tensors[i];
        size_t shape[REC_MAX_DIMS];
        for (int j = 0; j < d->ndim; j++)
            shape[j] = (size_t)d->shape[j];
        ts_dict_add_tensor(in, d->name, st_of(d->dtype), d->ndim, shape, rec_data(batch, (int)i));
    }
    char *po = xasprintf("%s/rank%d_model_output.pth", t->dir, t->rank),
         *pi = xasprintf("%s/rank%d_input_sample.pth", t->dir, t->rank);
    if (ts_save(po, out, &err) != 0 || ts_save(pi, in, &err) != 0) {
        log_error("%s", err);
        free(err);
    } else {
        log_error("the model's output and its input batch are in %s and %s", po, pi);
    }
    for (int k = 0; k < n; k++)
        free(host[k]);
    free(host), free(po), free(pi);
    ts_dict_free(out);
    ts_dict_free(in);
}

/* ---- DeepClusterV2's memory pass (InitMemoryHook) ---------------------------------------- */

/* The batch's crops, each alone through the model in training mode (no backward), into the
 * memory banks; then its first b sample indices (data_idx.0) for the rows written. */
static int memory_batch(trainer *t, const rec_view *v, const int *crops, int nbanks, char **err)
{
    int idx[MAX_INPUTS], ii = rec_find(v, "data_idx.0");
    eng_shape shapes[MAX_INPUTS];
    int n = batch_input_shapes(v, idx, shapes, err);
    if (n < 0)
        return -1;
    int64_t b = shapes[0].dim[0];
    if (ii < 0 || v->tensors[ii].dtype != REC_I64 || v->tensors[ii].ndim != 1 || (int64_t)v->tensors[ii].shape[0] < b)
        return report_failure(err, "the memory pass's batch has no data_idx.0 of its %lld images", (long long)b);
    for (int i = 0; i < nbanks; i++) {
        if (crops[i] >= n)
            return report_failure(err, "memory_params.crops_for_mb names crop %d, but the batch has %d", crops[i], n);
        eng_tensor buffers = model_buffers(t->m);
        if (model_plan(t->be, t->m, &shapes[crops[i]], 1, err) != 0 ||
            batch_upload(t->be, t->m, &t->host, v, &idx[crops[i]], 1, err) != 0 ||
            (t->broadcast_buffers && dist_broadcast(&t->dist, t->be, &buffers, err) != 0))
            return -1;
        model_forward(t->be, t->m, true);
        if (dist_group_check(&t->bn_group, err) != 0 ||
            loss_memory_fill(t->be, t->loss_st, i, model_output(t->m, 0), err) != 0)
            return -1;
    }
    loss_memory_advance(t->be, t->loss_st, rec_data(v, ii), b);
    return 0;
}

/* One epoch of the memory input's batches before the first epoch: 1 when done, 0 on a stop,
 * -1 with *err (a batch the model cannot take, an input that failed or ended early). */
static int fill_memory(trainer *t, char **err)
{
    const int *crops;
    int nbanks = loss_memory_crops(t->loss_st, &crops);
    log_info("filling the memory banks: %lld batches through the model before the first epoch",
             (long long)t->steps_per_epoch);
    for (int64_t k = 0; k < t->steps_per_epoch; k++) {
        rec_view v;
        int st = t->memory_in.read(t->memory_in.ctx, &v);
        if (st <= 0)
            return st == 0 ? 0
                           : report_failure(err, "the memory input failed after %lld of the %lld batches of the "
                                                 "memory pass", (long long)k, (long long)t->steps_per_epoch);
        int rc = memory_batch(t, &v, crops, nbanks, err);
        t->memory_in.done(t->memory_in.ctx);
        if (rc != 0)
            return -1;
        if (t->log_frequency > 0 && (k + 1) % t->log_frequency == 0)
            log_info("memory pass: %lld of %lld batches", (long long)(k + 1), (long long)t->steps_per_epoch);
    }
    t->memory_due = false;
    log_info("the memory banks are filled");
    return 1;
}

/* ---- the step ----------------------------------------------------------------------------- */

static int step(trainer *t, const rec_view *batch, uint32_t epoch, char **err);

/* A schedule's value now: at `where`, or at the epoch's start for update_interval epoch. */
static double scheduled(const trainer *t, const sched *s, double where)
{
    return sched_value(s, s->update_interval == SCHED_UPDATE_EPOCH ? (double)t->phase / (double)t->num_epochs : where);
}

int trainer_step(trainer *t, const rec_view *batch, uint32_t epoch, char **err)
{
    double start = now_seconds();
    if (t->t_step_end > 0) /* the time since the last step: this batch was awaited */
        t->perf[PERF_WAIT] += start - t->t_step_end;
    int rc = step(t, batch, epoch, err);
    t->t_step_end = now_seconds();
    return rc;
}

/* An epoch ends when the next one starts: it must have had all its batches, and the next must
 * be the one after it. Anything else is a stream that lost batches on the way. */
static int check_epoch_whole(const trainer *t, uint32_t next_epoch, char **err)
{
    if (t->phase_batches != t->steps_per_epoch)
        return report_failure(err, "epoch %lld ended after %lld of its %lld batches (the next batch is of epoch %u): "
                              "batches were lost upstream", (long long)t->phase, (long long)t->phase_batches,
                              (long long)t->steps_per_epoch, next_epoch);
    if ((int64_t)next_epoch != t->phase + 1)
        return report_failure(err, "epoch %u follows epoch %lld: the epochs between were lost upstream", next_epoch,
                              (long long)t->phase);
    return 0;
}

/* When the input ends, every batch the run was planned for must have been trained: a stream
 * that ended early must not end the run as if it were complete. */
static int check_input_whole(const trainer *t, char **err)
{
    int64_t planned = t->num_epochs * t->steps_per_epoch;
    if (t->batches_done == planned)
        return 0;
    return report_failure(err, "the input ended after %lld of the %lld batches this run was planned for (epoch %lld, "
                          "%lld of its %lld batches): the stream was short, so the run is not complete and no final "
                          "checkpoint is written", (long long)t->batches_done, (long long)planned, (long long)t->phase,
                          (long long)t->phase_batches, (long long)t->steps_per_epoch);
}

static int step(trainer *t, const rec_view *batch, uint32_t epoch, char **err)
{
    if (t->plan.test_only)
        return test_only_step(t, batch, epoch, err);
    if (t->test_interrupted || t->memory_interrupted) /* a stop came in a test phase or the memory pass */
        return 0;
    if (t->memory_due) {
        int st = fill_memory(t, err);
        if (st <= 0) {
            t->memory_interrupted = st == 0;
            return st;
        }
    }
    if (t->pending_test >= 0 && run_test_phase(t, t->pending_test, err) != 0)
        return -1;
    int64_t seq = (int64_t)batch->hdr->seq;
    if ((int64_t)epoch < t->resume_epoch || ((int64_t)epoch == t->resume_epoch && seq < t->resume_batch)) {
        if (!t->skip_logged)
            log_info("batches before epoch %lld, batch %lld were trained before the resume: skipping them",
                     (long long)t->resume_epoch, (long long)t->resume_batch);
        t->skip_logged = true;
        return 0;
    }
    if (t->in_phase && (int64_t)epoch != t->phase && (check_epoch_whole(t, epoch, err) != 0 || phase_end(t, err) != 0))
        return -1;
    if (t->test_interrupted)
        return 0;
    if (!t->in_phase || (int64_t)epoch != t->phase) {
        t->phase_batches = (int64_t)epoch == t->resume_epoch ? t->resume_batch : 0;
        log_info("Starting phase %lld [train]", (long long)phase_plan_train_index(&t->plan, epoch));
        monitor_train_phase_start(t, epoch);
        if (loss_on_phase_start(t->be, t->loss_st, epoch, err) != 0) /* ClusterMemoryHook */
            return -1;
    }
    t->phase = epoch;
    t->in_phase = true;
    double where = (double)t->batches_done / (double)(t->num_epochs * t->steps_per_epoch);
    if (where >= 1.0) /* VISSL asserts where < 1 */
        return report_failure(err, "batch %lld is past the %lld epochs of %lld batches this run was planned for",
                              (long long)t->batches_done + 1, (long long)t->num_epochs, (long long)t->steps_per_epoch);
    double t0 = now_seconds();
    if (load_inputs(t, batch, &t->train_loss, err) != 0)
        return -1;
    t0 = lap(t, PERF_READ, t0);
    eng_tensor buffers = model_buffers(t->m); /* DDP's broadcast_buffers: rank 0's running statistics */
    if (t->broadcast_buffers && dist_broadcast(&t->dist, t->be, &buffers, err) != 0)
        return -1;
    model_forward(t->be, t->m, true);
    if (dist_group_check(&t->bn_group, err) != 0) /* SyncBN's sums */
        return -1;
    t0 = lap(t, PERF_FORWARD, t0);
    monitor_forward(t);
    if (loss_on_forward(t->be, t->loss_st, t->m, batch, err) != 0)
        return -1;
    t->iteration++;
    const eng_tensor *outs[MAX_OUTPUTS];
    for (int k = 0; k < model_output_count(t->m); k++)
        outs[k] = model_output(t->m, k);
    loss_batch lb = batch_labels(batch);
    if (loss_compute(t->be, t->train_loss.ls, outs, &lb, &t->last_loss, err) != 0)
        return -1;
    t0 = lap(t, PERF_LOSS, t0);
    if (t->meter_on && lb.label &&
        meter_update(t->be, &t->meter, outs, model_output_count(t->m), lb.label, lb.batch, lb.label_cols, err) != 0)
        return -1;
    t0 = lap(t, PERF_METERS, t0);
    if (!isfinite(t->last_loss)) { /* VISSL's CheckNanLossHook, with its checkpoint hook's dump */
        dump_nan(t, batch);
        return report_failure(err, "iteration %lld (epoch %lld, batch %llu): the loss is %s; stopping (the "
                                   "checkpoint, the model's output and its input are in CHECKPOINT.DIR)",
                              (long long)t->iteration, (long long)t->phase, (unsigned long long)batch->hdr->seq,
                              isnan(t->last_loss) ? "NaN" : t->last_loss > 0 ? "+inf" : "-inf");
    }
    const eng_tensor *dout[MAX_OUTPUTS];
    for (int k = 0; k < model_output_count(t->m); k++)
        dout[k] = loss_grad(t->train_loss.ls, k);
    model_zero_grad(t->be, t->m);
    /* DDP: each bucket's all-reduce starts once the backward is done with it (buckets.h) */
    eng_grads_ready ready = grad_buckets_watch(&t->buckets);
    model_backward_watched(t->be, t->m, dout, t->buckets.n ? &ready : NULL);
    if (dist_group_check(&t->bn_group, err) != 0 || grad_buckets_finish(&t->buckets, err) != 0 ||
        dist_mean(&t->dist, &t->last_loss, err) != 0)
        return -1;
    t0 = lap(t, PERF_BACKWARD, t0);
    double lr = scheduled(t, &t->lr, where), lr_head = scheduled(t, &t->lr_head, where);
    optim_step(t->be, t->opt, lr, lr_head);
    if (loss_on_update(t->be, t->loss_st, t->m, err) != 0)
        return -1;
    lap(t, PERF_OPTIM, t0);
    t->batches_done++;
    t->phase_batches++;
    monitor_update(t, lr);
    if (t->checkpoint_iter_frequency > 0 && t->iteration % t->checkpoint_iter_frequency == 0) { /* VISSL's on_step */
        char file[96];
        snprintf(file, sizeof file, "model_iteration%lld.torch", (long long)t->iteration);
        return save_checkpoint(t, file, "iteration", t->phase, t->phase_batches, err);
    }
    return 0;
}

int trainer_finish(trainer *t, bool stopped, char **err)
{
    if (t->plan.test_only)
        return t->test.open && !stopped ? test_only_phase_end(t, err) : 0;
    if (!stopped && t->pending_test >= 0 && run_test_phase(t, t->pending_test, err) != 0)
        return -1;
    char file[96];
    snprintf(file, sizeof file, "model_iteration%lld.torch", (long long)t->iteration);
    if (!stopped && !t->test_interrupted && check_input_whole(t, err) != 0) {
        /* What was trained is sound: keep it to resume from, as after a stop. */
        char *ckpt_err = NULL;
        if (t->in_phase && t->batches_done > t->checkpointed_batches &&
            save_checkpoint(t, file, "iteration", t->phase, t->phase_batches, &ckpt_err) != 0) {
            log_error("%s", ckpt_err);
            free(ckpt_err);
        }
        return -1;
    }
    if (!t->in_phase) {
        /* Stopped between epochs (in a test phase): keep the epoch's training if its phase
         * checkpoint was not due; a resume reruns that test phase, as VISSL's would. */
        if (stopped && t->phase >= 0 && t->batches_done > t->checkpointed_batches)
            return save_checkpoint(t, file, "phase", t->phase + 1, 0, err);
        return 0;
    }
    if (!stopped)
        return phase_end(t, err);
    return save_checkpoint(t, file, "iteration", t->phase, t->phase_batches, err);
}
