/*
 * selfsup-collate — turn augmented samples into VISSL batches, in sampler order.
 *
 * Samples arrive from any number of augment workers in whatever order they finished. This
 * stage keeps them until batch b of the epoch is complete — samples b*B … b*B+B-1 by their
 * header seq (their position in the sampler's order) — and then writes one batch record with
 * DATA.<split>.COLLATE_FUNCTION (collate.h). So batches never depend on how many workers ran
 * or how they were scheduled. The sample that carries SAMPLE_FLAG_EPOCH_LAST gives the
 * epoch's length, which closes its last, partial batch (dropped with DROP_LAST). An input
 * that ends inside an epoch, before that sample or with samples missing, is an error: the
 * epoch was cut short upstream.
 *
 *   selfsup-collate -c CONFIG [--split train|test] [--in URI] [--out URI] [overrides]
 *
 * The batch header's seq is the batch number within the epoch; its epoch is the epoch.
 *
 * The decode farm (farm_server.h): with --lease-serve ENDPOINT this stage also deals the
 * leases of sampler positions that the farm hosts' selfsup-decode --lease stages decode, for
 * --epochs N epochs from --epoch E and batch --start-iter K, and reads their crops from a
 * `tcp://…?open` input. It knows each sample from its lease book: a duplicate (a sample dealt
 * again after its host was lost, whose first copy came after all) is dropped and counted, as
 * is a sample no lease covered (a host of an earlier run, say: logged), and
 * the stage ends when every sample of those epochs has come, whatever the writers' streams
 * say. SELFSUP.FARM: LEASE_SAMPLES, WINDOW_SAMPLES, HOST_TIMEOUT_S.
 */
#include "collate/collate.h"
#include "collate/farm_server.h"
#include "log.h"
#include "sample.h"
#include "stage.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sample kept until its batch is complete: a private copy of the record. */
typedef struct {
    uint32_t epoch;
    uint64_t seq;
    void *bytes;
    rec_view view;
} held;

typedef struct {
    const char *split;
    collate_kind kind;
    int batch;       /* BATCHSIZE_PER_REPLICA */
    bool drop_last;
    uint64_t seed;   /* SEED_VALUE, for multicrop_mixup_collator's lambda */
    int64_t num_classes; /* COLLATE_FUNCTION_PARAMS.num_classes (targets_one_hot_default_collator) */
    /* the cursor: the next batch to write */
    bool started;
    uint32_t epoch;
    uint64_t next_batch;
    int64_t epoch_len; /* samples in `epoch`, -1 until its last sample is seen */
    int64_t later_len[8]; uint32_t later_epoch[8]; int n_later; /* lengths of epochs ahead */
    held *pending;
    size_t n_pending, cap_pending;
    rec_view *gather;
    /* --lease-serve: the decode farm's lease server, and the epochs it deals */
    const char *lease_endpoint;
    long epochs, first_epoch, start_iter;
    lease_plan plan;
    double host_timeout_s;
    farm_server *farm;
} collate;


static int option(void *state, int argc, char **argv)
{
    collate *c = state;
    if (!strcmp(argv[0], "--lease-serve") && argc > 1) {
        c->lease_endpoint = argv[1];
        return 2;
    }
    int used = stage_long_option(argc, argv, "--epochs", 1, &c->epochs);
    if (!used)
        used = stage_long_option(argc, argv, "--epoch", 0, &c->first_epoch);
    if (!used)
        used = stage_long_option(argc, argv, "--start-iter", 0, &c->start_iter);
    if (used)
        return used;
    if (!strcmp(argv[0], "--split") && argc > 1) {
        if (!strcasecmp(argv[1], "train") || !strcasecmp(argv[1], "test")) {
            c->split = !strcasecmp(argv[1], "train") ? "TRAIN" : "TEST";
            return 2;
        }
        log_error("--split must be train or test, not '%s'", argv[1]);
        return -1;
    }
    return 0;
}

/* --lease-serve: the plan of the leases, from SELFSUP.FARM and the options. 0 or 2. */
static int prepare_farm(collate *c, const cfg_node *cfg)
{
    int64_t lease_len = cfg_int(cfg, "SELFSUP.FARM.LEASE_SAMPLES"), window = cfg_int(cfg, "SELFSUP.FARM.WINDOW_SAMPLES");
    c->plan = (lease_plan){
        .first_epoch = (uint32_t)c->first_epoch,
        .epochs = (uint32_t)c->epochs,
        .first_pos = (uint64_t)c->start_iter * (uint64_t)c->batch,
        .lease_len = (uint64_t)(lease_len > 0 ? lease_len : 4 * c->batch),
    };
    c->plan.window = window > 0 ? (uint64_t)window : 8 * c->plan.lease_len;
    c->host_timeout_s = cfg_float(cfg, "SELFSUP.FARM.HOST_TIMEOUT_S");
    if (c->plan.window < c->plan.lease_len || c->plan.window < (uint64_t)c->batch) {
        log_error("config.SELFSUP.FARM.WINDOW_SAMPLES (%llu) must hold a lease (%llu samples) and a batch (%d)",
                  (unsigned long long)c->plan.window, (unsigned long long)c->plan.lease_len, c->batch);
        return 2;
    }
    if (c->host_timeout_s <= 0) {
        log_error("config.SELFSUP.FARM.HOST_TIMEOUT_S must be a number of seconds > 0");
        return 2;
    }
    return 0;
}

static int prepare(stage *s, void *state)
{
    collate *c = state;
    const cfg_node *cfg = stage_config(s);
    char key[96];
    snprintf(key, sizeof key, "DATA.%s.COLLATE_FUNCTION", c->split);
    const char *name = cfg_str(cfg, key);
    char why[256];
    if (!name || collate_from_name(name, &c->kind, why, sizeof why) != 0) {
        log_error("config.%s: %s", key, name ? why : "missing");
        return 2;
    }
    snprintf(key, sizeof key, "DATA.%s.COLLATE_FUNCTION_PARAMS", c->split);
    const cfg_node *params = cfg_get(cfg, key);
    collate_options opt = {0};
    if (collate_read_params(c->kind, name, params, &opt, why, sizeof why) != 0) {
        log_error("config.%s: %s", key, why);
        return 2;
    }
    c->num_classes = opt.num_classes;
    snprintf(key, sizeof key, "DATA.%s.BATCHSIZE_PER_REPLICA", c->split);
    int64_t b = cfg_int(cfg, key);
    if (b < 1 || b > 1024) {
        log_error("config.%s: %lld is outside 1..1024", key, (long long)b);
        return 2;
    }
    c->batch = (int)b;
    snprintf(key, sizeof key, "DATA.%s.DROP_LAST", c->split);
    c->drop_last = cfg_bool(cfg, key);
    c->seed = (uint64_t)cfg_int(cfg, "SEED_VALUE");
    c->gather = xcalloc((size_t)c->batch, sizeof *c->gather);
    c->epoch_len = -1;
    return c->lease_endpoint ? prepare_farm(c, cfg) : 0;
}

/* ---- the reorder buffer ----------------------------------------------------------------- */

static void hold(collate *c, const rec_view *v)
{
    if (c->n_pending == c->cap_pending) {
        c->cap_pending = c->cap_pending ? 2 * c->cap_pending : 64;
        c->pending = xrealloc(c->pending, c->cap_pending * sizeof *c->pending);
    }
    size_t len = v->hdr->size;
    void *copy = aligned_alloc(REC_ALIGN, len);
    if (!copy)
        die(EXIT_RUNTIME, "out of memory holding a %zu-byte sample", len);
    memcpy(copy, v->base, len);
    held *h = &c->pending[c->n_pending++];
    *h = (held){.epoch = v->hdr->epoch, .seq = v->hdr->seq, .bytes = copy};
    char *err = NULL;
    if (rec_parse(copy, len, &h->view, &err) != 0) /* cannot fail: the transport validated it */
        die(EXIT_RUNTIME, "held record: %s", err);
}

static held *find_held(collate *c, uint32_t epoch, uint64_t seq)
{
    for (size_t i = 0; i < c->n_pending; i++)
        if (c->pending[i].epoch == epoch && c->pending[i].seq == seq)
            return &c->pending[i];
    return NULL;
}

static void release(collate *c, uint32_t epoch, uint64_t from, uint64_t to)
{
    size_t out = 0;
    for (size_t i = 0; i < c->n_pending; i++) {
        held *h = &c->pending[i];
        if (h->epoch == epoch && h->seq >= from && h->seq < to)
            free(h->bytes);
        else
            c->pending[out++] = *h;
    }
    c->n_pending = out;
}

/* Remember the length of an epoch whose last sample just arrived. */
static void note_epoch_len(collate *c, uint32_t epoch, int64_t len)
{
    if (epoch == c->epoch) {
        c->epoch_len = len;
    } else if (c->n_later < 8) {
        c->later_epoch[c->n_later] = epoch;
        c->later_len[c->n_later++] = len;
    }
}

/* Move the cursor to the start of epoch `epoch`, picking up its length if it came early. */
static void start_epoch(collate *c, uint32_t epoch)
{
    c->epoch = epoch;
    c->next_batch = 0;
    c->epoch_len = -1;
    for (int i = 0; i < c->n_later; i++)
        if (c->later_epoch[i] == epoch) {
            c->epoch_len = c->later_len[i];
            c->later_epoch[i] = c->later_epoch[--c->n_later];
            c->later_len[i] = c->later_len[c->n_later];
            break;
        }
}

/* The earliest epoch among the samples held (after the current one). */
static uint32_t next_held_epoch(const collate *c)
{
    uint32_t e = UINT32_MAX;
    for (size_t i = 0; i < c->n_pending; i++)
        if (c->pending[i].epoch < e)
            e = c->pending[i].epoch;
    return e;
}

/* Whether a sample of `epoch` at or after `seq` is held. */
static bool held_from(const collate *c, uint32_t epoch, uint64_t seq)
{
    for (size_t i = 0; i < c->n_pending; i++)
        if (c->pending[i].epoch == epoch && c->pending[i].seq >= seq)
            return true;
    return false;
}

/* ---- writing batches ----------------------------------------------------------------------- */

static int write_batch(stage *s, collate *c, uint64_t from, uint64_t to)
{
    int n = (int)(to - from);
    for (int i = 0; i < n; i++)
        c->gather[i] = find_held(c, c->epoch, from + (uint64_t)i)->view;
    rec_writer *w = stage_record_begin(s, REC_DATA, c->next_batch, c->epoch, collate_max_tensors(c->kind, &c->gather[0]));
    if (!w)
        return 1;
    char why[256];
    collate_options opts = {.num_classes = c->num_classes};
    if (c->kind == COLLATE_MIXUP)
        opts.mixup_lambda = collate_mixup_lambda(c->seed, c->epoch, c->next_batch);
    if (collate_batch(c->kind, c->gather, n, &opts, w, why, sizeof why) != 0) {
        log_error("epoch %u batch %llu: %s", c->epoch, (unsigned long long)c->next_batch, why);
        return -1;
    }
    return stage_record_end(s) != 0 ? -1 : 0;
}

static bool all_held(collate *c, uint64_t from, uint64_t to)
{
    for (uint64_t q = from; q < to; q++)
        if (!find_held(c, c->epoch, q))
            return false;
    return true;
}

/* The length of the current epoch: known from its flagged last sample (the sampler's
 * epoch length). -1: not known yet. Once the input has ended, an epoch whose last sample never
 * came is a short stream (-2), unless nothing of it came at all (the input ended between
 * epochs: 0). */
static int64_t epoch_length(collate *c, bool at_end)
{
    if (c->epoch_len >= 0 || !at_end)
        return c->epoch_len;
    return c->next_batch == 0 && !held_from(c, c->epoch, 0) ? 0 : -2;
}

static int input_short(const collate *c)
{
    log_error("the input ended in epoch %u after %llu batches without the epoch's last sample (%zu samples held): "
              "the stream lost samples or was cut short", c->epoch, (unsigned long long)c->next_batch, c->n_pending);
    return -1;
}

/* Write every batch that is complete. `at_end`: the input ended, so whatever is held is all
 * there will be. Returns 0, 1 to stop quietly, -1 on failure. */
static int flush(stage *s, collate *c, bool at_end)
{
    while (c->started) {
        uint64_t from = c->next_batch * (uint64_t)c->batch, to = from + (uint64_t)c->batch;
        int64_t len = epoch_length(c, at_end);
        if (len == -2)
            return input_short(c);
        if (at_end && len >= 0 && (uint64_t)len > from && !find_held(c, c->epoch, from)) {
            log_error("the input ended with samples of epoch %u missing", c->epoch);
            return -1;
        }
        if (len >= 0 && from >= (uint64_t)len) { /* the epoch is done */
            if (c->n_pending == 0) {
                if (at_end)
                    return 0;
                start_epoch(c, c->epoch + 1);
                return 0;
            }
            start_epoch(c, next_held_epoch(c));
            continue;
        }
        if (len >= 0 && to > (uint64_t)len)
            to = (uint64_t)len;
        if (!all_held(c, from, to)) {
            if (at_end) {
                log_error("the input ended with samples of epoch %u missing", c->epoch);
                return -1;
            }
            return 0;
        }
        int rc = 0;
        if (to - from == (uint64_t)c->batch || !c->drop_last)
            rc = write_batch(s, c, from, to);
        release(c, c->epoch, from, to);
        if (rc != 0)
            return rc;
        c->next_batch++;
    }
    return 0;
}

static void start_cursor(collate *c, const rec_header *h)
{
    /* The first sample names where this run starts (a resumed epoch starts mid-way); an
     * earlier one from a slower worker moves the cursor back while nothing is written. */
    uint64_t b = h->seq / (uint64_t)c->batch;
    if (!c->started || h->epoch < c->epoch || (h->epoch == c->epoch && b < c->next_batch)) {
        if (c->started && h->epoch < c->epoch) {
            c->later_epoch[c->n_later % 8] = c->epoch;
            c->later_len[c->n_later % 8] = c->epoch_len;
            c->n_later += c->n_later < 8;
            c->epoch_len = -1;
        }
        c->epoch = h->epoch;
        c->next_batch = b;
        c->started = true;
    }
}

/* ---- the decode farm ------------------------------------------------------------------------ */

/* Bind the lease server and start the cursor where the plan starts (samples come from several
 * hosts, in any order: the first to come says nothing of where the run starts). */
static int start_farm(stage *s, collate *c)
{
    char *err = NULL;
    const char *keys = cfg_str(stage_config(s), "SELFSUP.TRANSPORT.SERVER_KEYS_DIR");
    c->farm = farm_server_open(c->lease_endpoint, keys, &c->plan, c->host_timeout_s, s, &err);
    if (!c->farm) {
        log_error("--lease-serve %s: %s", c->lease_endpoint, err);
        free(err);
        return -1;
    }
    stage_set_poll_hook(s, farm_server_poll, c->farm);
    farm_server_expect_hosts(c->farm, (int)cfg_int(stage_config(s), "SELFSUP.FARM.NODES"));
    c->started = true;
    c->epoch = (uint32_t)c->first_epoch;
    c->next_batch = (uint64_t)c->start_iter;
    return 0;
}


static int run_farm(stage *s, collate *c)
{
    if (start_farm(s, c) != 0)
        return 1;
    rec_view v;
    int st, rc = 0;
    while (rc == 0 && !farm_server_done(c->farm) && (st = stage_read(s, &v)) == STAGE_RECORD) {
        /* a duplicate, or a sample no lease covered, is dropped (the book counts and logs it) */
        int keep = farm_server_received(c->farm, v.hdr->epoch, v.hdr->seq);
        if (keep > 0) {
            if (v.hdr->flags & SAMPLE_FLAG_EPOCH_LAST)
                note_epoch_len(c, v.hdr->epoch, (int64_t)v.hdr->seq + 1);
            hold(c, &v);
        }
        stage_read_done(s);
        rc = flush(s, c, false);
        farm_server_consumed(c->farm, c->epoch, c->next_batch * (uint64_t)c->batch);
    }
    if (rc == 0 && farm_server_done(c->farm))
        rc = flush(s, c, true);
    else if (rc == 0)
        rc = stage_failed(s) ? -1 : 1; /* stopped, or the farm is gone */
    farm_server_finish(c->farm);
    return rc < 0 ? 1 : stage_exit_status(s);
}

static int run(stage *s, void *state)
{
    collate *c = state;
    if (c->lease_endpoint)
        return run_farm(s, c);
    rec_view v;
    int st;
    bool wrote_any = false;
    while ((st = stage_read(s, &v)) == STAGE_RECORD) {
        if (!wrote_any)
            start_cursor(c, v.hdr);
        else if (v.hdr->epoch < c->epoch ||
                 (v.hdr->epoch == c->epoch && v.hdr->seq < c->next_batch * (uint64_t)c->batch)) {
            log_error("sample %llu of epoch %u arrived after its batch was written (a duplicate?)",
                      (unsigned long long)v.hdr->seq, v.hdr->epoch);
            stage_read_done(s);
            return 1;
        }
        if (v.hdr->flags & SAMPLE_FLAG_EPOCH_LAST)
            note_epoch_len(c, v.hdr->epoch, (int64_t)v.hdr->seq + 1);
        hold(c, &v);
        stage_read_done(s);
        uint64_t before = c->next_batch;
        uint32_t before_epoch = c->epoch;
        int rc = flush(s, c, false);
        wrote_any = wrote_any || c->next_batch != before || c->epoch != before_epoch;
        if (rc != 0)
            return rc < 0 ? 1 : stage_exit_status(s);
    }
    if (st == STAGE_FAILED)
        return 1;
    if (stage_stopping(s))
        return stage_exit_status(s);
    int rc = flush(s, c, true);
    return rc < 0 ? 1 : stage_exit_status(s);
}

int main(int argc, char **argv)
{
    static const stage_info info = {
        .name = "collate",
        .summary = "Stack augmented samples into VISSL batches (DATA.<split>.COLLATE_FUNCTION), in sampler order.",
        .role = "worker",
        .reads = true,
        .writes = true,
        .option = option,
        .prepare = prepare,
        .options = "  --split train|test  which DATA.<split> settings to use (default train)\n"
                   "  --lease-serve ENDPOINT\n"
                   "                      deal leases of sampler positions to the decode farm's hosts\n"
                   "                      (tcp://ADDR:PORT with SELFSUP.TRANSPORT.SERVER_KEYS_DIR, or ipc://PATH);\n"
                   "                      the input is then a tcp://...?open stream from their augment stages\n"
                   "  --epochs N, --epoch E, --start-iter K\n"
                   "                      with --lease-serve: the epochs to deal, from epoch E, batch K\n",
    };
    collate c = {.split = "TRAIN", .epochs = 1};
    int status = stage_main(argc, argv, &info, &c, run);
    farm_server_free(c.farm); /* after stage_main: its final report shows the farm hosts */
    for (size_t i = 0; i < c.n_pending; i++)
        free(c.pending[i].bytes);
    free(c.pending);
    free(c.gather);
    return status;
}
