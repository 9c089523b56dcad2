/*
 * topology.c — the run's processes and rings, from the config (see topology.h).
 */
#include "topology.h"

#include "augment/transforms.h"
#include "log.h"
#include "train/phases.h"
#if HAVE_CUDA
#include "cuda/coll_nccl.h"
#endif

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A NULL-terminated argv under construction. */
typedef struct {
    char **v;
    int n, cap;
} argvec;

static void arg_push(argvec *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->v = xrealloc(a->v, (size_t)a->cap * sizeof *a->v);
    }
    a->v[a->n++] = xstrdup(s);
    a->v[a->n] = NULL;
}

/* Bytes of one augmented sample of `data` (DATA.TRAIN or DATA.TEST) when its transforms fix
 * every crop size. */
static bool sample_bytes(const cfg_node *data, size_t *bytes)
{
    cfg_err err;
    aug_pipeline *p = aug_pipeline_build(cfg_path(data, "TRANSFORMS"), "config.DATA.TRANSFORMS", &err);
    const cfg_node *src = cfg_path(data, "DATA_SOURCES");
    int sources = src && src->kind == CFG_LIST && src->len > 0 ? (int)src->len : 1;
    bool ok = p && aug_pipeline_sample_bytes(p, sources, 1, bytes);
    aug_pipeline_free(p);
    return ok;
}

static size_t round_mib(size_t bytes)
{
    return (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
}

size_t topology_slot_bytes(const cfg_node *config, const char *ring_label)
{
    int64_t b = cfg_int(config, "SELFSUP.RING.SLOT_BYTES");
    if (b > 0)
        return (size_t)b;
    /* Decoded images come at any size: 32 MiB holds a 3,200 x 3,400 RGB photo (ImageNet's
     * largest few are bigger; the decoder replaces and logs an image too big for its slot,
     * naming this setting). The ring reserves depth x slot of /dev/shm up front. */
    /* the test chain's rings ("test_decoded", …) are sized from DATA.TEST */
    bool test = !strncmp(ring_label, "test_", 5);
    const cfg_node *data = cfg_get(config, test ? "DATA.TEST" : "DATA.TRAIN");
    ring_label += test ? 5 : 0;
    if (!strcmp(ring_label, "decoded"))
        return (size_t)32 << 20;
    size_t sample;
    int64_t batch = cfg_int(data, "BATCHSIZE_PER_REPLICA");
    batch = batch > 0 ? batch : 1;
    if (sample_bytes(data, &sample)) {
        if (!strcmp(ring_label, "augmented"))
            return round_mib(sample + ((size_t)1 << 16));
        /* A batch: the samples' tensors stacked, plus metadata; mixup's floats are 2x (half
         * the samples, 4 bytes a value). */
        const char *collator = cfg_str(data, "COLLATE_FUNCTION");
        size_t factor = collator && !strcmp(collator, "multicrop_mixup_collator") ? 2 : 1;
        return round_mib((size_t)batch * sample * factor + ((size_t)1 << 20));
    }
    /* Sizes that depend on the image (e.g. Resize without a crop): 32 MiB a sample, and the
     * common SSL batch (two 224 px crops a sample) for batches. */
    if (!strcmp(ring_label, "augmented"))
        return (size_t)32 << 20;
    return round_mib((size_t)batch * 2 * 224 * 224 * 3 + ((size_t)1 << 20));
}

/* The command words of stage `name`: SELFSUP.STAGES.name split on spaces, else
 * BIN_DIR/selfsup-name (a bare "selfsup-X" as the first word is BIN_DIR/selfsup-X too). The
 * program must exist and be executable. */
static bool stage_command(argvec *a, const cfg_node *config, const char *name, const topo_options *opt,
                          cfg_err *err)
{
    const cfg_node *stages = cfg_path(config, "SELFSUP.STAGES");
    const cfg_node *custom = stages ? cfg_map_get(stages, name) : NULL;
    if (custom && custom->kind == CFG_STR && custom->s[0]) {
        char *copy = xstrdup(custom->s), *save = NULL;
        for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
            /* A bare selfsup-NAME is one of ours: take it from the same place as the rest. */
            char *prog = a->n == 0 && !strchr(w, '/') && !strncmp(w, "selfsup-", 8) ? xasprintf("%s/%s", opt->bin_dir, w)
                                                                                   : xstrdup(w);
            arg_push(a, prog);
            free(prog);
        }
        free(copy);
    } else if (custom && custom->kind != CFG_NULL) {
        cfg_fail(err, custom, "config.SELFSUP.STAGES", "%s: expected a command line (a string)", name);
        return false;
    } else {
        char *prog = xasprintf("%s/selfsup-%s", opt->bin_dir, name);
        arg_push(a, prog);
        free(prog);
    }
    if (a->n == 0 || access(a->v[0], X_OK) != 0) {
        cfg_fail(err, custom, "config.SELFSUP.STAGES",
                 "the %s stage's program '%s' is not there (or not executable)%s", name, a->n ? a->v[0] : "",
                 custom ? "" : "; it is not built yet in this version of selfsup");
        return false;
    }
    return true;
}

/* Put two more words into a stage's command line, before the config overrides. */
static void stage_add_args(topo_stage *st, const char *a, const char *b)
{
    size_t n = 0;
    while (st->argv[n])
        n++;
    /* the overrides are last: find where they start (after "--world-size W") */
    size_t at = n;
    for (size_t i = 0; i + 1 < n; i++)
        if (!strcmp(st->argv[i], "--world-size"))
            at = i + 2;
    size_t k = b ? 2 : 1; /* an option with a value, or a flag */
    st->argv = xrealloc(st->argv, (n + k + 1) * sizeof *st->argv);
    memmove(&st->argv[at + k], &st->argv[at], (n - at + 1) * sizeof *st->argv);
    st->argv[at] = xstrdup(a);
    if (b)
        st->argv[at + 1] = xstrdup(b);
}

static int add_ring(topology *t, const char *label, const cfg_node *config, uint32_t producers)
{
    t->rings = xrealloc(t->rings, (size_t)(t->n_rings + 1) * sizeof *t->rings);
    topo_ring *r = &t->rings[t->n_rings];
    r->label = xstrdup(label);
    r->name = ring_name(label);
    r->geo = (ring_geometry){
        .slot_bytes = topology_slot_bytes(config, label),
        .n_slots = (uint32_t)cfg_int(config, "SELFSUP.RING.DEPTH"),
        .n_producers = producers,
    };
    return t->n_rings++;
}

static bool add_stage(topology *t, const cfg_node *config, const char *name, int index, int rank, int world,
                      int in_ring, int out_ring, const topo_options *opt, cfg_err *err)
{
    argvec a = {0};
    if (!stage_command(&a, config, name, opt, err)) {
        for (int i = 0; i < a.n; i++)
            free(a.v[i]);
        free(a.v);
        return false;
    }
    char *id = xasprintf("%s.%d", name, index);
    char num[32];
    if (opt->config_file) {
        arg_push(&a, "--config");
        arg_push(&a, opt->config_file);
    }
    const char *flags[] = {"--in", "--out"};
    const int rings[] = {in_ring, out_ring};
    for (int k = 0; k < 2; k++)
        if (rings[k] >= 0) {
            char *uri = xasprintf("shm:%s", t->rings[rings[k]].name);
            arg_push(&a, flags[k]);
            arg_push(&a, uri);
            free(uri);
        }
    arg_push(&a, "--id");
    arg_push(&a, id);
    snprintf(num, sizeof num, "%d", rank);
    arg_push(&a, "--rank");
    arg_push(&a, num);
    snprintf(num, sizeof num, "%d", world);
    arg_push(&a, "--world-size");
    arg_push(&a, num);
    for (int i = 0; i < opt->n_overrides; i++)
        arg_push(&a, opt->overrides[i]);

    t->stages = xrealloc(t->stages, (size_t)(t->n_stages + 1) * sizeof *t->stages);
    t->stages[t->n_stages++] = (topo_stage){
        .name = xstrdup(name), .id = id, .argv = a.v, .in_ring = in_ring, .out_ring = out_ring};
    return true;
}

/* Whether stage k runs our own program `prog` ("selfsup-decode"), not a test's stand-in. */
static bool runs(const topology *t, int k, const char *prog)
{
    const char *p = t->stages[k].argv[0];
    size_t n = strlen(p), m = strlen(prog);
    return n >= m && !strcmp(p + n - m, prog) && (n == m || p[n - m - 1] == '/');
}

/* decode → augment × workers → collate of one split, into the ring `batches`. The decode
 * stage reads `epochs` epochs from (first_epoch, first_batch). Stage ids count on from
 * `index` (the test chain's stages are decode.1, augment.W, …). */
typedef struct {
    const char *split;      /* "train" or "test" */
    const char *prefix;     /* ring labels: "", "test_", "r1_", "r1_test_" */
    int index, workers;
    int rank, world; /* the shard its decode stage reads (DistributedSampler's) */
    long epochs, first_epoch, first_batch;
} chain;

static bool add_chain(topology *t, const cfg_node *config, const chain *c, const topo_options *opt, int *batches,
                      cfg_err *err)
{
    char label[64], num[32];
    snprintf(label, sizeof label, "%sdecoded", c->prefix);
    int decoded = add_ring(t, label, config, 1);
    snprintf(label, sizeof label, "%saugmented", c->prefix);
    int augmented = add_ring(t, label, config, (uint32_t)c->workers);
    snprintf(label, sizeof label, "%sbatches", c->prefix);
    *batches = add_ring(t, label, config, 1);
    int dec = t->n_stages;
    if (!add_stage(t, config, "decode", c->index, c->rank, c->world, -1, decoded, opt, err))
        return false;
    bool ours = runs(t, dec, "selfsup-decode");
    if (ours && c->epochs >= 0) {
        snprintf(num, sizeof num, "%ld", c->epochs);
        stage_add_args(&t->stages[dec], "--epochs", num);
        if (c->first_epoch || c->first_batch) { /* a resumed run reads on from its checkpoint */
            snprintf(num, sizeof num, "%ld", c->first_epoch);
            stage_add_args(&t->stages[dec], "--epoch", num);
            snprintf(num, sizeof num, "%ld", c->first_batch);
            stage_add_args(&t->stages[dec], "--start-iter", num);
        }
    }
    int first_aug = t->n_stages;
    for (int i = 0; i < c->workers; i++)
        if (!add_stage(t, config, "augment", c->index * c->workers + i, opt->node_rank, 1, decoded, augmented, opt, err))
            return false;
    /* Our decode feeding our augment, with the same config: decode only what the crops read
     * (selfsup-decode --crop; the same pixels come out). */
    if (ours && runs(t, first_aug, "selfsup-augment"))
        stage_add_args(&t->stages[dec], "--crop", NULL);
    int collate = t->n_stages;
    if (!add_stage(t, config, "collate", c->index, opt->node_rank, 1, augmented, *batches, opt, err))
        return false;
    for (int k = dec; k <= collate; k++)
        t->stages[k].split = c->split;
    if (strcmp(c->split, "train") != 0)
        for (int k = dec; k <= collate; k++)
            if (runs(t, k, "selfsup-decode") || runs(t, k, "selfsup-augment") || runs(t, k, "selfsup-collate"))
                stage_add_args(&t->stages[k], "--split", c->split);
    return true;
}

/* ---- the decode farm ---------------------------------------------------------------------- */

/* Trainer rank `rank`'s endpoint: tcp://HOST:PORT + 2·rank (crops on DATA_PORT, leases on
 * LEASE_PORT: cmd_run refuses ports that would meet), HOST the `node`-th of the comma-separated
 * list at host_key (TRAINER_HOST has one per trainer node; BIND_ADDRESS one for all). */
static char *farm_uri(const cfg_node *config, const char *host_key, int node, const char *port_key, int rank,
                      const char *query)
{
    const char *hosts = cfg_str(config, host_key);
    for (int k = 0; k < node && strchr(hosts, ','); k++)
        hosts = strchr(hosts, ',') + 1;
    int len = (int)strcspn(hosts, ",");
    return xasprintf("tcp://%.*s:%lld%s", len, hosts, (long long)cfg_int(config, port_key) + 2 * rank, query);
}

static int farm_workers(const cfg_node *config)
{
    int workers = (int)cfg_int(config, "SELFSUP.FARM.WORKERS");
    if (workers < 1)
        workers = (int)cfg_int(config, "DATA.NUM_DATALOADER_WORKERS");
    return workers < 1 ? 1 : workers;
}

/* A farm host's chain for trainer rank `rank` of `world`: decode (leases from that rank's
 * lease server, the rank's shard) → augment × FARM.WORKERS → tcp to the rank's collate. */
static bool add_farm_chain(topology *t, const cfg_node *config, const topo_options *opt, int rank, int world,
                           cfg_err *err)
{
    int workers = farm_workers(config);
    char label[32];
    snprintf(label, sizeof label, world > 1 ? "r%d_decoded" : "decoded", rank);
    int decoded = add_ring(t, label, config, 1);
    int dec = t->n_stages;
    if (!add_stage(t, config, "decode", rank, rank, world, -1, decoded, opt, err))
        return false;
    int node = rank / (int)cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    char *lease = farm_uri(config, "SELFSUP.FARM.TRAINER_HOST", node, "SELFSUP.FARM.LEASE_PORT", rank, ""),
         *data = farm_uri(config, "SELFSUP.FARM.TRAINER_HOST", node, "SELFSUP.FARM.DATA_PORT", rank, "?open"),
         *id = xasprintf("farm.%d", opt->node_rank);
    stage_add_args(&t->stages[dec], "--lease", lease);
    stage_add_args(&t->stages[dec], "--lease-id", id);
    bool ok = true;
    for (int i = 0; ok && i < workers; i++) {
        ok = add_stage(t, config, "augment", rank * workers + i, rank, world, decoded, -1, opt, err);
        if (ok)
            stage_add_args(&t->stages[t->n_stages - 1], "--out", data);
    }
    if (ok && runs(t, dec, "selfsup-decode") && runs(t, dec + 1, "selfsup-augment"))
        stage_add_args(&t->stages[dec], "--crop", NULL);
    for (int k = dec; k < t->n_stages; k++)
        t->stages[k].split = "train";
    free(lease), free(data), free(id);
    return ok;
}

/* A farm host: a chain for each trainer of every trainer node (NUM_NODES × NUM_PROC_PER_NODE). */
static bool add_farm_host(topology *t, const cfg_node *config, const topo_options *opt, cfg_err *err)
{
    int world = (int)(cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE") * cfg_int(config, "DISTRIBUTED.NUM_NODES"));
    bool ok = true;
    for (int r = 0; ok && r < world; r++)
        ok = add_farm_chain(t, config, opt, r, world, err);
    return ok;
}

/* The trainer node's end of the farm for its trainer i, rank `rank` of `world`: a collate that
 * reads the farm's crops and deals the leases of the epochs still to train, into ring *batches. */
static bool add_farm_collate(topology *t, const cfg_node *config, const topo_options *opt, int i, int rank,
                             int world, long epochs, int *batches, cfg_err *err)
{
    char label[32];
    snprintf(label, sizeof label, world > 1 ? "r%d_batches" : "batches", i);
    *batches = add_ring(t, label, config, 1);
    int col = t->n_stages;
    if (!add_stage(t, config, "collate", i, rank, world, -1, *batches, opt, err))
        return false;
    char *data = farm_uri(config, "SELFSUP.FARM.BIND_ADDRESS", 0, "SELFSUP.FARM.DATA_PORT", rank, "?open"),
         *lease = farm_uri(config, "SELFSUP.FARM.BIND_ADDRESS", 0, "SELFSUP.FARM.LEASE_PORT", rank, ""), num[32];
    stage_add_args(&t->stages[col], "--in", data);
    stage_add_args(&t->stages[col], "--lease-serve", lease);
    snprintf(num, sizeof num, "%ld", epochs);
    stage_add_args(&t->stages[col], "--epochs", num);
    snprintf(num, sizeof num, "%ld", opt->resume_epoch);
    stage_add_args(&t->stages[col], "--epoch", num);
    snprintf(num, sizeof num, "%ld", opt->resume_batch);
    stage_add_args(&t->stages[col], "--start-iter", num);
    t->stages[col].split = "train";
    free(data), free(lease);
    return true;
}

/* The trainers' world. Trainers on several nodes meet at rank 0's address, DISTRIBUTED.RUN_ID
 * (shm/coll_net.h): CPU trainers stay in that world, GPU trainers get NCCL's id there. On one
 * node: on GPUs an NCCL world, whose id (made here, once for the run) every trainer gets on its
 * command line; else a collectives segment, named as a ring is (so a run's leftovers are swept
 * as its rings are). */
static char *world_name(const cfg_node *config)
{
    bool cpu = !strcmp(cfg_str(config, "MACHINE.DEVICE"), "cpu");
    if (cfg_int(config, "DISTRIBUTED.NUM_NODES") > 1) /* GPUs: NCCL's id handed out by rank 0 there */
        return xasprintf("%s:%s", cpu ? "net" : "nccl-net", cfg_str(config, "DISTRIBUTED.RUN_ID"));
#if HAVE_CUDA
    if (!cpu) {
        char hex[COLL_NCCL_ID_HEX + 1], *err = NULL;
        if (coll_nccl_unique_id(hex, &err) == 0)
            return xasprintf("nccl:%s", hex);
        log_warn("%s: the trainers cannot meet", err); /* each trainer then fails to join, naming it */
        free(err);
        return xstrdup("nccl:none");
    }
#endif
    return ring_name("world");
}

/* The trainers first_trainer … + procs - 1 (ours) meet in one world and share the cores: each
 * computes on cores / procs threads (torch's launcher likewise sets OMP_NUM_THREADS=1 for
 * several processes). */
static void give_world(topology *t, const cfg_node *config, int first_trainer, int procs)
{
    char *name = world_name(config), threads[32];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(threads, sizeof threads, "%ld", cores / procs > 1 ? cores / procs : 1);
    for (int i = 0; i < procs; i++)
        if (runs(t, first_trainer + i, "selfsup-train")) {
            stage_add_args(&t->stages[first_trainer + i], "--coll", name);
            stage_add_args(&t->stages[first_trainer + i], "--threads", threads);
        }
    free(name);
}

/* The consumers of a run and their main chains, for the chains beside them. */
typedef struct {
    int first_trainer, procs, chains, workers, world;
    bool per_rank; /* a chain per trainer (several trainers), or one for all */
} side_chains;

/* A chain beside each main chain, `epochs` epochs from the start: the test phases' (split test)
 * or DeepClusterV2's memory pass (kind "memory": split train). Rings "<kind>_…" ("r<i>_<kind>_…"
 * with a chain per trainer), stage ids from `index`; its batches reach the chain's consumers
 * as `option` shm:RING. */
static bool add_side_chains(topology *t, const cfg_node *config, const topo_options *opt, const side_chains *sc,
                            const char *kind, long epochs, int index, const char *option, cfg_err *err)
{
    bool ok = true;
    for (int i = 0; ok && i < sc->chains; i++) {
        char prefix[32];
        if (sc->per_rank)
            snprintf(prefix, sizeof prefix, "r%d_%s_", i, kind);
        else
            snprintf(prefix, sizeof prefix, "%s_", kind);
        chain c = {.split = strcmp(kind, "test") ? "train" : "test",
                   .prefix = prefix,
                   .index = index + i,
                   .workers = sc->workers,
                   .rank = sc->per_rank ? opt->node_rank * sc->procs + i : opt->node_rank,
                   .world = sc->per_rank ? sc->world : 1,
                   .epochs = epochs};
        int batches;
        ok = add_chain(t, config, &c, opt, &batches, err);
        char *uri = xasprintf("shm:%s", t->rings[batches].name);
        for (int k = sc->per_rank ? i : 0; ok && k < (sc->per_rank ? i + 1 : sc->procs); k++)
            stage_add_args(&t->stages[sc->first_trainer + k], option, uri);
        free(uri);
    }
    return ok;
}

bool topology_build(topology *t, const cfg_node *config, const char *engine, const topo_options *opt,
                    cfg_err *err)
{
    memset(t, 0, sizeof *t);
    const char *last;
    if (!strcmp(engine, "train"))
        last = "train";
    else if (!strcmp(engine, "extract_features"))
        last = "extract";
    else {
        cfg_fail(err, NULL, "engine_name", "'%s': selfsup runs the engines train and extract_features", engine);
        return false;
    }
    t->engine = engine;
    int workers = (int)cfg_int(config, "DATA.NUM_DATALOADER_WORKERS");
    workers = workers < 1 ? 1 : workers;
    int procs = (int)cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    int world = procs * (int)cfg_int(config, "DISTRIBUTED.NUM_NODES");
    bool training = !strcmp(last, "train");
    phase_plan plan = phase_plan_from_config(config);

    /* Training reads OPTIMIZER.num_epochs epochs (TEST_ONLY: as many test epochs) from where
     * a resumed run stopped; feature extraction reads each split VISSL extracts once (train
     * unless TEST_ONLY, test with TEST_MODEL: set_available_splits). */
    bool extract_train = !training && !plan.test_only, extract_test = !training && cfg_bool(config, "TEST_MODEL");
    if (!training && !extract_train && !extract_test) {
        cfg_fail(err, cfg_get(config, "TEST_MODEL"), "config.TEST_MODEL",
                 "TEST_ONLY without TEST_MODEL leaves no split to extract features of");
        return false;
    }
    bool main_is_test = training ? plan.test_only : !extract_train;
    /* Several trainers: one chain each, its decode stage reading its rank's shard, as VISSL
     * gives each process its own DataLoader (NUM_DATALOADER_WORKERS workers each); the
     * trainers meet in one world (--coll) to be one model. Extractors share one chain. */
    if (opt->role == TOPO_FARM)
        return add_farm_host(t, config, opt, err) || (topology_free(t), false);
    bool per_rank = training && world > 1;
    int chains = per_rank ? procs : 1, *batches = xcalloc((size_t)procs, sizeof *batches);
    bool ok = true;
    for (int i = 0; ok && opt->role == TOPO_TRAIN && i < chains; i++)
        ok = add_farm_collate(t, config, opt, i, per_rank ? opt->node_rank * procs + i : 0, per_rank ? world : 1,
                              (long)plan.num_epochs - opt->resume_epoch, &batches[i], err);
    for (int i = 0; ok && opt->role == TOPO_ALL && i < chains; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, per_rank ? "r%d_" : "", i);
        chain c = {.split = main_is_test ? "test" : "train",
                   .prefix = prefix,
                   .index = i,
                   .workers = workers,
                   .rank = per_rank ? opt->node_rank * procs + i : opt->node_rank,
                   .world = per_rank ? world : 1,
                   .epochs = training ? (long)plan.num_epochs - opt->resume_epoch : -1,
                   .first_epoch = opt->resume_epoch,
                   .first_batch = opt->resume_batch};
        ok = add_chain(t, config, &c, opt, &batches[i], err);
    }
    int first_trainer = t->n_stages;
    for (int i = 0; ok && i < procs; i++)
        ok = add_stage(t, config, last, i, opt->node_rank * procs + i, world, batches[per_rank ? i : 0], -1,
                       opt, err);
    if (ok && !training && main_is_test)
        for (int i = 0; i < procs; i++)
            if (runs(t, first_trainer + i, "selfsup-extract"))
                stage_add_args(&t->stages[first_trainer + i], "--split", "test");
    if (ok && per_rank)
        give_world(t, config, first_trainer, procs);
    /* TEST_MODEL: a second chain makes the DATA.TEST batches of the test phases still to come
     * (phases.h), and our trainer reads them from --test-in (with several trainers, a chain
     * each, of its rank's shard); the extractor reads the test split there after the train
     * split. */
    long tests = training && !plan.test_only ? (long)phase_plan_tests_from(&plan, opt->resume_tests_from) : 0;
    bool test_chain_wanted = training ? tests > 0 : extract_train && extract_test;
    const char *consumer = training ? "selfsup-train" : "selfsup-extract";
    side_chains sides = {.first_trainer = first_trainer, .procs = procs, .chains = chains, .workers = workers,
                         .world = world, .per_rank = per_rank};
    if (ok && test_chain_wanted && runs(t, first_trainer, consumer))
        ok = add_side_chains(t, config, opt, &sides, "test", training ? tests : -1, chains, "--test-in", err);
    /* DeepClusterV2 fills its memory banks before the first epoch of a fresh run (its
     * InitMemoryHook): one more chain decodes epoch 0 of DATA.TRAIN for it, once, and the
     * trainer reads it from --memory-in. A resumed run has its memory in the checkpoint. */
    bool fresh = opt->resume_epoch == 0 && opt->resume_batch == 0;
    bool memory_wanted = training && !plan.test_only && fresh &&
                         !strcmp(cfg_str(config, "LOSS.name"), "deepclusterv2_loss");
    if (ok && memory_wanted && runs(t, first_trainer, "selfsup-train"))
        ok = add_side_chains(t, config, opt, &sides, "memory", 1, 2 * chains, "--memory-in", err);
    free(batches);
    if (!ok)
        topology_free(t);
    return ok;
}

void topology_set_control(topology *t, const char *endpoint)
{
    for (int i = 0; i < t->n_stages; i++) {
        argvec a = {.v = t->stages[i].argv};
        while (a.v[a.n])
            a.n++;
        a.cap = a.n + 1;
        arg_push(&a, "--control");
        arg_push(&a, endpoint);
        t->stages[i].argv = a.v;
    }
}

void topology_free(topology *t)
{
    for (int i = 0; i < t->n_rings; i++) {
        free(t->rings[i].label);
        free(t->rings[i].name);
    }
    for (int i = 0; i < t->n_stages; i++) {
        for (char **a = t->stages[i].argv; *a; a++)
            free(*a);
        free(t->stages[i].argv);
        free(t->stages[i].name);
        free(t->stages[i].id);
    }
    free(t->rings);
    free(t->stages);
    memset(t, 0, sizeof *t);
}
