/*
 * checkpoint.c — the trainer's checkpoints (see checkpoint.h).
 *
 * Saving is weights_save_safetensors over the model's and the optimizer's entries, with the
 * train state as metadata, then an atomic re-point of the checkpoint.torch link. Loading maps
 * the linked file and copies each entry's tensor by exact name: a checkpoint is only resumed
 * by the model that wrote it, so anything missing or reshaped is an error, not a skip.
 * Before any of that, ckpt_check_output_dir makes sure the folder can take a checkpoint at
 * all (it serves the evaluators' and the extractor's output folders too).
 */
#include "train/checkpoint.h"

#include "log.h"
#include "safetensors.h"
#include "util.h"
#include "weights.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define LINK "checkpoint.torch"

/* checkpoint.torch → file, replaced atomically (a new link renamed over the old one). */
static int point_link(const char *dir, const char *file, char **err)
{
    char *link = path_join(dir, LINK), *tmp = path_join(dir, ".checkpoint.torch.tmp");
    unlink(tmp);
    int rc = symlink(file, tmp) == 0 && rename(tmp, link) == 0
                 ? 0
                 : report_failure(err, "cannot point %s at %s: %s", link, file, strerror(errno));
    free(link);
    free(tmp);
    return rc;
}

int ckpt_save(eng_backend *be, const char *dir, const char *file, const eng_entry *entries, int n,
              const ckpt_state *s, char **err)
{
    char v[7][24];
    const int64_t nums[7] = {s->phase,      s->iteration,  s->batches_done,   s->next_epoch,
                             s->next_batch, s->num_epochs, s->loss_iterations};
    for (int i = 0; i < 7; i++)
        snprintf(v[i], sizeof v[i], "%" PRId64, nums[i]);
    const st_meta meta[] = {{"format", "selfsup checkpoint"}, {"checkpoint", s->kind}, {"phase_idx", v[0]},
                            {"train_phase_idx", v[0]},        {"iteration", v[1]},     {"batches_done", v[2]},
                            {"next_epoch", v[3]},             {"next_batch", v[4]},    {"num_epochs", v[5]},
                            {"loss_iterations", v[6]}};
    char *path = path_join(dir, file);
    int rc = weights_save_safetensors(be, entries, n, path, meta, ARRAY_LEN(meta), err);
    free(path);
    return rc == 0 ? point_link(dir, file, err) : rc;
}

static int meta_int(const st_file *f, const char *path, const char *key, int64_t *out, char **err)
{
    const char *v = st_meta_get(f, key);
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || *end)
        return report_failure(err, "%s: no %s in the checkpoint's metadata (not a selfsup checkpoint?)", path, key);
    *out = x;
    return 0;
}

/* Opens dir's checkpoint.torch and reads its state: 0 none, 1 opened (*f to close), -1. */
static int open_checkpoint(const char *dir, st_file **f, ckpt_state *s, char **err)
{
    char *path = path_join(dir, LINK);
    struct stat st;
    if (lstat(path, &st) != 0) {
        free(path);
        return 0;
    }
    int rc = st_open(path, f, err) == 0 ? 1 : -1;
    const char *kind = rc == 1 ? st_meta_get(*f, "checkpoint") : NULL;
    if (rc == 1 && (meta_int(*f, path, "phase_idx", &s->phase, err) || meta_int(*f, path, "iteration", &s->iteration, err) ||
                    meta_int(*f, path, "batches_done", &s->batches_done, err) ||
                    meta_int(*f, path, "next_epoch", &s->next_epoch, err) ||
                    meta_int(*f, path, "next_batch", &s->next_batch, err) ||
                    meta_int(*f, path, "num_epochs", &s->num_epochs, err) ||
                    (st_meta_get(*f, "loss_iterations") && /* written since swav_loss */
                     meta_int(*f, path, "loss_iterations", &s->loss_iterations, err)))) {
        st_close(*f);
        rc = -1;
    }
    s->kind = kind && !strcmp(kind, "final") ? "final" : kind && !strcmp(kind, "phase") ? "phase" : "iteration";
    free(path);
    return rc;
}

int ckpt_resume_point(const char *dir, ckpt_state *s, char **err)
{
    st_file *f = NULL;
    int rc = open_checkpoint(dir, &f, s, err);
    if (rc == 1)
        st_close(f);
    return rc;
}

/* One entry's tensor from the file: float32, the same number of elements. */
static int load_entry(eng_backend *be, const st_file *f, const eng_entry *e, float **host, size_t *cap, char **err)
{
    const st_tensor *t = st_find(f, e->name);
    size_t n = (size_t)eng_numel(&e->value.shape);
    if (!t)
        return report_failure(err, "the checkpoint has no %s (was it written by another model?)", e->name);
    if (t->dtype != ST_F32 || t->nbytes != n * sizeof(float))
        return report_failure(err, "the checkpoint's %s is not %zu float32 values", e->name, n);
    if (n > *cap) {
        free(*host);
        *host = xmalloc(n * sizeof(float));
        *cap = n;
    }
    if (n)
        memcpy(*host, t->data, n * sizeof(float)); /* the file's data may be unaligned */
    eng_upload(be, &e->value, *host);
    return 0;
}

int ckpt_load(eng_backend *be, const char *dir, const eng_entry *entries, int n, ckpt_state *s, char **err)
{
    st_file *f = NULL;
    int rc = open_checkpoint(dir, &f, s, err);
    if (rc != 1)
        return rc;
    float *host = NULL;
    size_t cap = 0;
    for (int i = 0; i < n && rc == 1; i++)
        if (load_entry(be, f, &entries[i], &host, &cap, err) != 0)
            rc = -1;
    free(host);
    st_close(f);
    return rc;
}

int ckpt_remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *tmp = strstr(e->d_name, ".torch.tmp-");
        long pid = tmp ? strtol(tmp + strlen(".torch.tmp-"), NULL, 10) : 0;
        bool gone = pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
        if (!gone)
            continue;
        char *path = path_join(dir, e->d_name);
        if (unlink(path) == 0) {
            log_info("removed %s, left by a save that was killed", path);
            removed++;
        }
        free(path);
    }
    closedir(d);
    return removed;
}

/* Per entry, the header's JSON ("name":{"dtype":"F32","shape":[…],"data_offsets":[…,…]})
 * is the name and at most this much; the metadata (the train state) fits the slack. */
#define HEADER_BYTES_PER_ENTRY 128
#define HEADER_SLACK 4096

uint64_t ckpt_size_estimate(const eng_entry *entries, int n)
{
    uint64_t bytes = HEADER_SLACK;
    for (int i = 0; i < n; i++)
        bytes += (uint64_t)eng_numel(&entries[i].value.shape) * sizeof(float) + strlen(entries[i].name) +
                 HEADER_BYTES_PER_ENTRY;
    return bytes;
}

/* Whether a file can be made in dir. Trying is the only test that holds: root passes every
 * permission check, but not a read-only mount. */
static int check_writable(const char *dir, char **err)
{
    char *probe = xasprintf("%s/.selfsup-write-test-XXXXXX", dir);
    int fd = mkstemp(probe), rc = 0;
    if (fd < 0)
        rc = report_failure(err, "%s: cannot create a file in this folder: %s", dir, strerror(errno));
    else {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return rc;
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

int ckpt_check_output_dir(const char *dir, uint64_t need, char **err)
{
    char *why = NULL;
    if (make_dirs(dir, 0777, &why) != 0) {
        report_failure(err, "cannot make the folder %s (%s)", dir, why);
        free(why);
        return -1;
    }
    if (check_writable(dir, err) != 0)
        return -1;
    struct statvfs vfs;
    if (need == 0 || statvfs(dir, &vfs) != 0)
        return 0; /* a file system that cannot say: the write itself will tell */
    uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    if (avail >= need)
        return 0;
    return report_failure(err, "%s: %.1f MiB free, but the output needs about %.1f MiB", dir, mib(avail), mib(need));
}

int ckpt_probe_output_dir(const char *dir, char **err)
{
    char *at = xstrdup(dir[0] ? dir : ".");
    struct stat st;
    while (stat(at, &st) != 0 && (errno == ENOENT || errno == ENOTDIR) && strcmp(at, "/") &&
           strcmp(at, ".")) {
        char *up = path_dirname(at); /* the folder above: "." for a relative name's last part */
        free(at);
        at = up;
    }
    int rc = 0;
    if (stat(at, &st) != 0)
        rc = report_failure(err, "cannot make the folder %s (%s: %s)", dir, at, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        rc = report_failure(err, "cannot make the folder %s (%s is not a folder)", dir, at);
    else if (access(at, W_OK | X_OK) != 0)
        rc = report_failure(err, "%s: cannot create a file in %s: %s", dir, at, strerror(errno));
    free(at);
    return rc;
}

bool ckpt_output_dir_usable(const char *dir, uint64_t need, const char *what, const cfg_node *where, cfg_err *err)
{
    char *why = NULL;
    bool ok = ckpt_check_output_dir(dir, need, &why) == 0;
    if (!ok)
        cfg_fail(err, where, what, "%s", why);
    free(why);
    return ok;
}

bool ckpt_output_file_usable(const char *file, uint64_t need, const char *what, const cfg_node *where)
{
    char *dir = path_dirname(file);
    cfg_err err;
    bool ok = ckpt_output_dir_usable(dir, need, what, where, &err);
    if (!ok)
        log_error("%s", err.msg);
    free(dir);
    return ok;
}
