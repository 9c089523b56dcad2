/*
 * monitor.c — what VISSL's logging hooks write around the training step (trainer_internal.h):
 * LogLossLrEtaHook's line and stdout.json, LogLossMetricsCheckpointHook's metrics.json,
 * LogPerfTimeMetricsHook's perf stats, the memory summary, SSLModelComplexityHook's line and
 * SSLTensorboardHook's event files. The trainer calls the monitor_* functions at the hooks'
 * moments; each decides from the config whether, and what, to write.
 */
#include "train/trainer_internal.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const char *const perf_name[PERF_N] = {"data_wait",     "read_sample", "forward",       "loss_compute",
                                              "meters_update", "backward",    "optimizer_step"};

/* Python's str(round(x, 4)): at most 4 decimals, trailing zeros dropped but one kept. */
static void py_round4(double x, char out[32])
{
    snprintf(out, 32, "%.4f", x);
    size_t n = strlen(out);
    while (n > 2 && out[n - 1] == '0' && out[n - 2] != '.')
        out[--n] = '\0';
}

/* VISSL's SSLModelComplexityHook (MODEL.MODEL_COMPLEXITY or HOOKS.MODEL_COMPLEXITY): the
 * model's parameters, FLOPs (multiply-adds) and convolution activations on one image of
 * INPUT_SHAPE, in its words. Counting never stops a run: what cannot be counted is said. */
void monitor_log_complexity(const trainer *t)
{
    const char *key = cfg_bool(t->config, "HOOKS.MODEL_COMPLEXITY.COMPUTE_COMPLEXITY") ? "HOOKS.MODEL_COMPLEXITY"
                                                                                      : "MODEL.MODEL_COMPLEXITY";
    const cfg_node *mc = cfg_get(t->config, key), *shape = cfg_get(mc, "INPUT_SHAPE");
    if (!cfg_bool(mc, "COMPUTE_COMPLEXITY") || t->rank != 0)
        return;
    if (shape->kind != CFG_LIST || shape->len != 3) {
        log_warn("%s.INPUT_SHAPE must be [C, H, W]: model complexity skipped", key);
        return;
    }
    eng_shape in = eng_shape4(1, shape->items[0]->i, shape->items[1]->i, shape->items[2]->i);
    eng_layer_cost *rows;
    int n;
    char *err = NULL;
    if (model_costs(t->m, &in, &rows, &n, &err) != 0) {
        log_warn("model complexity skipped: %s", err);
        free(err);
        return;
    }
    eng_layer_cost total = eng_costs_total(rows, n);
    eng_costs_free(rows, n);
    if (total.flops == ENG_COST_UNKNOWN)
        log_warn("Unsupported modules found in model. FLOPs calculation skipped");
    char p[32], f[32], a[32];
    py_round4((double)total.params / 1e6, p);
    py_round4(total.flops == ENG_COST_UNKNOWN ? 0.0 : (double)total.flops / 1e9, f);
    py_round4((double)total.activations / 1e6, a);
    log_info("#params (10^6): %s #FLOPs (10^9): %s #activations (10^6): %s", p, f, a);
}

/* TENSORBOARD_SETUP (or newer VISSL's HOOKS.TENSORBOARD_SETUP): rank 0 writes event files into
 * LOG_DIR/EXPERIMENT_LOG_DIR, LOG_DIR "." meaning CHECKPOINT.DIR. */
static bool open_tensorboard(trainer *t, cfg_err *err)
{
    const char *key = cfg_bool(t->config, "HOOKS.TENSORBOARD_SETUP.USE_TENSORBOARD") ? "HOOKS.TENSORBOARD_SETUP"
                                                                                      : "TENSORBOARD_SETUP";
    const cfg_node *tb = cfg_get(t->config, key);
    if (!cfg_bool(tb, "USE_TENSORBOARD") || t->rank != 0)
        return true;
    const char *log_dir = cfg_str(tb, "LOG_DIR");
    char *dir = xasprintf("%s/%s", strcmp(log_dir, ".") ? log_dir : t->dir, cfg_str(tb, "EXPERIMENT_LOG_DIR")), *why = NULL;
    t->tb = tb_open(dir, &why);
    free(dir);
    if (!t->tb) {
        cfg_fail(err, tb, "config.TENSORBOARD_SETUP", "%s", why);
        free(why);
        return false;
    }
    t->tb_flush_every = 60.0 * cfg_float(tb, "FLUSH_EVERY_N_MIN");
    t->tb_params = cfg_bool(tb, "LOG_PARAMS");
    t->tb_grads = cfg_bool(tb, "LOG_PARAMS_GRADIENTS");
    t->tb_params_every = cfg_int(tb, "LOG_PARAMS_EVERY_N_ITERS");
    t->tb_last_flush = t->tb_t_last = now_seconds();
    log_info("TensorBoard: %s", tb_path(t->tb));
    return true;
}

static void format_eta(double seconds, char *out, size_t size)
{
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    snprintf(out, size, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}

/* VISSL's peak_mem(M) is torch.cuda.max_memory_allocated: the device's peak where the model
 * runs on one (eng_memory_peak), else the process's peak resident size (the cpu's memory). */
static double peak_mem_mb(const trainer *t)
{
    size_t device = eng_memory_peak(t->be);
    return device ? (double)device / (1024.0 * 1024.0) : peak_rss_mb();
}

/* Appends one JSON object (sorted keys, as VISSL's json.dumps(sort_keys=True)) to a file in
 * CHECKPOINT.DIR, kept open for stdout.json. */
static void append_json(trainer *t, FILE **f, const char *name, json_t *obj)
{
    if (t->rank != 0) { /* the ranks are one model: rank 0 logs it */
        json_decref(obj);
        return;
    }
    if (!*f) {
        char *path = path_join(t->dir, name);
        *f = fopen(path, "a");
        if (!*f)
            log_warn("cannot open %s: %s", path, strerror(errno));
        free(path);
    }
    if (*f) {
        char *line = json_dumps(obj, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(15));
        fprintf(*f, "%s\n", line);
        fflush(*f);
        free(line);
    }
    json_decref(obj);
}

/* VISSL's LogLossLrEtaHook line, every LOG_FREQUENCY iterations (and the first). */
static void log_progress(trainer *t, double lr)
{
    if (t->iteration != 1 && t->log_frequency > 0 && t->iteration % t->log_frequency != 0)
        return;
    double now = now_seconds(), its = (double)(t->iteration - t->it_last_log), btime = (now - t->t_last_log) / its,
           wait = (t->perf[PERF_WAIT] - t->perf_at_log[PERF_WAIT]) / its;
    int64_t left = t->num_epochs * t->steps_per_epoch - t->batches_done;
    char eta[32];
    format_eta(btime * (double)left, eta, sizeof eta);
    double images = (double)t->batch_size / btime, mem = peak_mem_mb(t);
    log_info("Rank: %d; [ep: %lld] iter: %lld; lr: %.5g; loss: %.5g; btime(ms): %.0f; data wait(ms): %.0f; eta: %s; "
             "images/s: %.1f; peak_mem(M): %.0f",
             t->rank, (long long)t->phase, (long long)t->iteration, lr, t->last_loss, btime * 1e3, wait * 1e3, eta,
             images, mem);
    json_t *line = json_pack("{s:i, s:I, s:I, s:f, s:f, s:f, s:s, s:f}", "Rank", t->rank, "ep", (json_int_t)t->phase,
                             "iter", (json_int_t)t->iteration, "lr", lr, "loss", t->last_loss, "btime(ms)",
                             btime * 1e3, "eta", eta, "peak_mem(M)", mem);
    for (int k = 0; k < PERF_N; k++) { /* where the step's time went, per step since the last line */
        char key[32];
        snprintf(key, sizeof key, "%s(ms)", perf_name[k]);
        json_object_set_new(line, key, json_real((t->perf[k] - t->perf_at_log[k]) / its * 1e3));
    }
    append_json(t, &t->stdout_json, "stdout.json", line);
    t->t_last_log = now;
    memcpy(t->perf_at_log, t->perf, sizeof t->perf);
    t->it_last_log = t->iteration;
}

/* VISSL's LogPerfTimeMetricsHook (MONITOR_PERF_STATS): the phase's average batch time and the
 * mean time per step of each timer. */
static void log_perf(trainer *t)
{
    int64_t batches = t->iteration - t->it_phase_start;
    if (!t->perf_on || batches <= 0)
        return;
    log_info("Average train batch time (ms) for %lld batches: %d", (long long)batches,
             (int)(1000.0 * (now_seconds() - t->t_phase_start) / (double)batches));
    char text[512];
    size_t len = 0;
    for (int k = 0; k < PERF_N && len < sizeof text; k++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%s %.2f ms", k ? ", " : "", perf_name[k],
                                1e3 * (t->perf[k] - t->perf_at_phase[k]) / (double)batches);
    log_info("Train step time breakdown (rank %d): %s", t->rank, text);
}

/* HOOKS.MEMORY_SUMMARY, once: what the training holds, by kind (VISSL prints CUDA's allocator
 * summary; here the model's allocations on its backend and the process's peak resident size). */
static void memory_summary(trainer *t)
{
    if (t->rank != 0 || t->memory_summary_at < 0 || t->iteration != (t->memory_summary_at > 1 ? t->memory_summary_at : 1))
        return;
    eng_tensor p = model_params(t->m), g = model_grads(t->m), b = model_buffers(t->m);
    const double mib = 1024.0 * 1024.0;
    char device[64] = "";
    size_t peak = eng_memory_peak(t->be);
    if (peak)
        snprintf(device, sizeof device, ", peak device memory %.0f MiB", (double)peak / mib);
    log_info("Memory summary (rank %d, %s): parameters %.1f MiB, gradients %.1f MiB, optimizer state %.1f MiB, "
             "buffers %.2f MiB%s, peak resident %.0f MiB (host)",
             t->rank, eng_backend_name(t->be), p.base ? (double)eng_bytes(t->be, &p.shape) / mib : 0.0,
             g.base ? (double)eng_bytes(t->be, &g.shape) / mib : 0.0, (double)optim_state_bytes(t->opt) / mib,
             b.base ? (double)eng_bytes(t->be, &b.shape) / mib : 0.0, device, peak_rss_mb());
}

/* SSLTensorboardHook.on_phase_end: every number of the meter's value as
 * "<Training|Testing>/<meter>_<metric>_Output_<key>" at step train_phase_idx. */
static void tb_meter(trainer *t, const char *phase, const char *name, json_t *value, int64_t step)
{
    if (!t->tb)
        return;
    const char *metric, *key;
    json_t *per, *v;
    json_object_foreach(value, metric, per) {
        json_object_foreach(per, key, v) {
            if (!json_is_number(v))
                continue; /* mean AP's per-class lists */
            char tag[256];
            snprintf(tag, sizeof tag, "%s/%s_%s_Output_%s", phase, name, metric, key);
            tb_scalar(t->tb, tag, round(json_number_value(v) * 1e5) / 1e5, step);
        }
    }
    tb_flush(t->tb);
    t->tb_last_flush = now_seconds();
}

/* Histograms of every trained parameter ("Parameters/<name>") or of its gradient
 * ("Gradients/<name>") at `step`, as SSLTensorboardHook writes them. */
static void tb_histograms(trainer *t, bool grads, int64_t step)
{
    if (!t->tb || !(grads ? t->tb_grads : t->tb_params))
        return;
    float *host = NULL;
    size_t cap = 0;
    for (int i = 0; i < model_entry_count(t->m); i++) {
        const eng_entry *e = model_entry_at(t->m, i);
        /* a frozen parameter has no gradient in PyTorch (grad None): VISSL skips it */
        if (e->kind != ENG_PARAM || (grads && (!e->grad.base || optim_group_of(t->opt, i) == OPTIM_NOT_UPDATED)))
            continue;
        size_t n = (size_t)eng_numel(&e->value.shape);
        if (n > cap)
            host = xrealloc(host, (cap = n) * sizeof *host);
        eng_download(t->be, grads ? &e->grad : &e->value, host);
        char tag[256];
        snprintf(tag, sizeof tag, "%s/%s", grads ? "Gradients" : "Parameters", e->name);
        tb_histogram(t->tb, tag, host, n, step);
    }
    free(host);
}

/* SSLTensorboardHook.on_update: every LOG_FREQUENCY iterations, and every 5 of the first 100. */
static void tb_step(trainer *t, double lr)
{
    if (!t->tb || !((t->log_frequency > 0 && t->iteration % t->log_frequency == 0) ||
                    (t->iteration <= 100 && t->iteration % 5 == 0)))
        return;
    double now = now_seconds(), btime = (now - t->tb_t_last) / (double)(t->iteration - t->tb_it_last);
    int64_t it = t->iteration, left = t->num_epochs * t->steps_per_epoch - t->batches_done;
    tb_scalar(t->tb, "Training/Loss", round(t->last_loss * 1e5) / 1e5, it);
    tb_scalar(t->tb, "Training/Learning_rate", round(lr * 1e5) / 1e5, it);
    tb_scalar(t->tb, "Speed/Batch_processing_time_ms", (double)(int64_t)(1000.0 * btime), it);
    tb_scalar(t->tb, "Speed/img_per_sec_per_gpu", btime > 0 ? (double)(int64_t)((double)t->batch_size / btime) : 0.0, it);
    tb_scalar(t->tb, "Speed/ETA_hours", btime * (double)left / 3600.0, it);
    tb_scalar(t->tb, "Memory/Peak_RSS_MiB", peak_rss_mb(), it); /* the host's, on any device */
    size_t peak = eng_memory_peak(t->be);
    if (peak) /* VISSL's name for torch.cuda.max_memory_allocated */
        tb_scalar(t->tb, "Memory/Peak_GPU_Memory_allocated_MiB", (double)peak / (1024.0 * 1024.0), it);
    t->tb_t_last = now;
    t->tb_it_last = it;
    if (now - t->tb_last_flush >= t->tb_flush_every) {
        tb_flush(t->tb);
        t->tb_last_flush = now;
    }
}

/* One metrics.json line: {iteration, phase_idx, train_phase_idx} and, when the meter ran,
 * "<kind>_<meter name>" (also logged); the meter starts over. */
void monitor_metrics_line(trainer *t, const char *kind, int64_t phase_idx, int64_t train_phase_idx, acc_meter *m,
                          bool meter_on)
{
    FILE *metrics = NULL;
    json_t *line = json_pack("{s:I, s:I, s:I}", "iteration", (json_int_t)t->iteration, "phase_idx",
                             (json_int_t)phase_idx, "train_phase_idx", (json_int_t)train_phase_idx);
    if (meter_on) {
        json_t *v = meter_value(m);
        tb_meter(t, strcmp(kind, "train") ? "Testing" : "Training", m->name, v, train_phase_idx);
        char *text = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(15));
        char key[64];
        snprintf(key, sizeof key, "%s_%s", kind, m->name);
        log_info("Rank: %d, name: %s, value: %s", t->rank, key, text);
        free(text);
        json_object_set_new(line, key, v);
        meter_reset(m);
    }
    append_json(t, &metrics, "metrics.json", line);
    if (metrics)
        fclose(metrics);
}

/* ---- the hooks' moments ---------------------------------------------------------------------- */

bool monitor_open(trainer *t, cfg_err *err)
{
    const cfg_node *config = t->config;
    t->memory_summary_at = cfg_bool(config, "HOOKS.MEMORY_SUMMARY.PRINT_MEMORY_SUMMARY")
                               ? cfg_int(config, "HOOKS.MEMORY_SUMMARY.LOG_ITERATION_NUM")
                               : -1;
    t->perf_on = cfg_bool(config, "MONITOR_PERF_STATS") || cfg_bool(config, "HOOKS.PERF_STATS.MONITOR_PERF_STATS");
    t->perf_frequency = cfg_int(config, "PERF_STAT_FREQUENCY") > 0 ? cfg_int(config, "PERF_STAT_FREQUENCY")
                                                                   : cfg_int(config, "HOOKS.PERF_STATS.PERF_STAT_FREQUENCY");
    return open_tensorboard(t, err);
}

void monitor_train_phase_start(trainer *t, int64_t epoch)
{
    t->t_phase_start = now_seconds();
    t->it_phase_start = t->iteration;
    memcpy(t->perf_at_phase, t->perf, sizeof t->perf);
    if (epoch == 0 && t->phase_batches == 0)
        tb_histograms(t, false, -1); /* the weights before any training */
}

void monitor_forward(trainer *t)
{
    if (t->tb_params_every > 0 && t->iteration % t->tb_params_every == 0) /* before counting it */
        tb_histograms(t, false, t->iteration);
}

void monitor_update(trainer *t, double lr)
{
    log_progress(t, lr);
    tb_step(t, lr);
    if (t->tb_params_every > 0 && t->iteration % t->tb_params_every == 0) /* after counting it */
        tb_histograms(t, true, t->iteration);
    memory_summary(t);
    if (t->perf_frequency > 0 && (t->iteration - t->it_phase_start) % t->perf_frequency == 0)
        log_perf(t);
}

void monitor_train_phase_end(trainer *t)
{
    log_perf(t);
    tb_histograms(t, false, t->phase);
    tb_histograms(t, true, t->phase);
}
