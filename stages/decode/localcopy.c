/*
 * localcopy.c — copy a dataset to local disk once (see localcopy.h).
 *
 * The tree is walked first (directories created as they are found), then worker threads take
 * files off the list one at a time. A file whose copy already exists with the same size and
 * an mtime no older than the source is skipped, as `rsync -u` would, so an interrupted copy
 * resumes where it stopped. The marker comes after syncfs(), so a power cut cannot leave a
 * marker in front of unwritten data.
 */
#include "decode/localcopy.h"

#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MARKER "copy_complete"

typedef struct {
    char **src, **dst;
    size_t n, cap, next;
    pthread_mutex_t lock;
    bool failed;
    char why[512];
} copy_list;

static void list_add(copy_list *l, char *src, char *dst)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->src = xrealloc(l->src, l->cap * sizeof *l->src);
        l->dst = xrealloc(l->dst, l->cap * sizeof *l->dst);
    }
    l->src[l->n] = src;
    l->dst[l->n++] = dst;
}

static void list_fail(copy_list *l, const char *fmt, const char *path, int err)
{
    pthread_mutex_lock(&l->lock);
    if (!l->failed)
        snprintf(l->why, sizeof l->why, fmt, path, strerror(err));
    l->failed = true;
    pthread_mutex_unlock(&l->lock);
}

/* ---- one file ---------------------------------------------------------------------------- */

static bool up_to_date(const struct stat *src, const char *dst)
{
    struct stat st;
    return stat(dst, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == src->st_size &&
           (st.st_mtim.tv_sec > src->st_mtim.tv_sec ||
            (st.st_mtim.tv_sec == src->st_mtim.tv_sec && st.st_mtim.tv_nsec >= src->st_mtim.tv_nsec));
}

/* Copy the bytes: copy_file_range where the kernel can, read/write where it cannot. */
static int copy_bytes(int in, int out, off_t size)
{
    off_t done = 0;
    bool plain = false;
    char *buf = NULL;
    while (done < size) {
        ssize_t n;
        if (!plain) {
            n = copy_file_range(in, NULL, out, NULL, (size_t)(size - done), 0);
            if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                plain = true;
                continue;
            }
        } else {
            if (!buf)
                buf = xmalloc(1 << 20);
            n = read(in, buf, 1 << 20);
            for (ssize_t w = 0; n > 0 && w < n;) {
                ssize_t k = write(out, buf + w, (size_t)(n - w));
                if (k < 0 && errno != EINTR) {
                    free(buf);
                    return -1;
                }
                w += k > 0 ? k : 0;
            }
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO; /* the source shrank while we copied it */
            free(buf);
            return -1;
        }
        done += n;
    }
    free(buf);
    return 0;
}

static int copy_file(const char *src, const char *dst, copy_list *l)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0) {
        list_fail(l, "cannot read %s: %s", src, errno);
        if (in >= 0)
            close(in);
        return -1;
    }
    if (up_to_date(&st, dst)) {
        close(in);
        return 0;
    }
    char *tmp = xasprintf("%s.selfsup-copy.%d.%lx", dst, (int)getpid(), (unsigned long)pthread_self());
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = out < 0 ? -1 : copy_bytes(in, out, st.st_size);
    int err = errno;
    if (rc == 0) {
        struct timespec times[2] = {st.st_atim, st.st_mtim}; /* keep mtime: `rsync -u` compares it */
        futimens(out, times);
    }
    if (out >= 0 && close(out) != 0 && rc == 0)
        rc = -1, err = errno;
    if (rc == 0 && rename(tmp, dst) != 0)
        rc = -1, err = errno;
    if (rc != 0) {
        unlink(tmp);
        list_fail(l, "cannot copy to %s: %s", dst, err);
    }
    free(tmp);
    close(in);
    return rc;
}

static void *copy_worker(void *arg)
{
    copy_list *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        size_t i = l->next++;
        bool stop = l->failed || i >= l->n;
        pthread_mutex_unlock(&l->lock);
        if (stop || copy_file(l->src[i], l->dst[i], l) != 0)
            return NULL;
    }
}

/* ---- the tree ---------------------------------------------------------------------------- */

static int make_dir(const char *path, char *why, size_t wl)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    snprintf(why, wl, "cannot create %s: %s", path, strerror(errno));
    return -1;
}

/* mkdir -p, its error into why. */
static int make_root(const char *path, char *why, size_t wl)
{
    char *err = NULL;
    if (make_dirs(path, 0755, &err) == 0)
        return 0;
    snprintf(why, wl, "%s", err);
    free(err);
    return -1;
}

static int walk(const char *src, const char *dst, copy_list *l, char *why, size_t wl)
{
    if (make_dir(dst, why, wl) != 0)
        return -1;
    DIR *d = opendir(src);
    if (!d) {
        snprintf(why, wl, "cannot list %s: %s", src, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *s = xasprintf("%s/%s", src, e->d_name), *t = xasprintf("%s/%s", dst, e->d_name);
        struct stat st;
        if (stat(s, &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = walk(s, t, l, why, wl);
        } else if (stat(s, &st) == 0 && S_ISREG(st.st_mode)) {
            list_add(l, s, t);
            continue;
        }
        free(s), free(t); /* sockets, devices, dangling links: not data */
    }
    closedir(d);
    return rc;
}

static int copy_tree(const char *src, const char *dst, int threads, char *why, size_t wl)
{
    copy_list l = {.lock = PTHREAD_MUTEX_INITIALIZER};
    int rc = walk(src, dst, &l, why, wl);
    if (rc == 0) {
        log_info("copying %zu files of %s to %s with %d threads", l.n, src, dst, threads);
        pthread_t tid[64];
        int started = 0;
        for (; started < threads && started < 64; started++)
            if (pthread_create(&tid[started], NULL, copy_worker, &l) != 0)
                break;
        if (started == 0)
            copy_worker(&l);
        for (int i = 0; i < started; i++)
            pthread_join(tid[i], NULL);
        if (l.failed) {
            snprintf(why, wl, "%s", l.why);
            rc = -1;
        }
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.src[i]), free(l.dst[i]);
    free(l.src), free(l.dst);
    return rc;
}

/* ---- the entry point ------------------------------------------------------------------------ */

static char *base_name(const char *path)
{
    char *p = xstrdup(path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    const char *slash = strrchr(p, '/');
    char *b = xstrdup(slash ? slash + 1 : p);
    free(p);
    return b;
}

/* Copy under an exclusive lock on DEST/.selfsup-copy.lock, so ranks of one node copy once. */
static int locked_copy(const char *input, bool is_dir, const char *dest_root, const char *target, int threads,
                       char *why, size_t wl)
{
    char *lock_path = xasprintf("%s/.selfsup-copy.lock", dest_root);
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    free(lock_path);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        snprintf(why, wl, "cannot lock %s: %s", dest_root, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int rc = 0;
    char *marker = xasprintf("%s/" MARKER, target);
    if (is_dir && access(marker, F_OK) == 0) {
        log_info("found the data already copied: %s", target);
    } else if (is_dir) {
        rc = copy_tree(input, target, threads, why, wl);
        int dirfd = rc == 0 ? open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dirfd >= 0) {
            syncfs(dirfd);
            close(dirfd);
        }
        int m = rc == 0 ? open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
        if (rc == 0 && (m < 0 || close(m) != 0)) {
            snprintf(why, wl, "cannot write %s: %s", marker, strerror(errno));
            rc = -1;
        }
    } else if (access(target, F_OK) != 0) {
        copy_list l = {.lock = PTHREAD_MUTEX_INITIALIZER};
        if (copy_file(input, target, &l) != 0) {
            snprintf(why, wl, "%s", l.why);
            rc = -1;
        }
    }
    free(marker);
    close(fd);
    return rc;
}

char *local_copy(const char *input, const char *dest_dir, int threads, char *why, size_t why_len)
{
    struct stat st;
    if (stat(input, &st) != 0) {
        snprintf(why, why_len, "cannot copy %s to local disk: %s", input, strerror(errno));
        return NULL;
    }
    if (!dest_dir || !*dest_dir) {
        snprintf(why, why_len, "COPY_TO_LOCAL_DISK needs COPY_DESTINATION_DIR");
        return NULL;
    }
    /* Under Slurm, VISSL copies into a folder per job. */
    const char *job = getenv("SLURM_JOBID");
    char *root = job && *job ? xasprintf("%s/%s", dest_dir, job) : xstrdup(dest_dir);
    char *name = base_name(input), *target = xasprintf("%s/%s", root, name);
    free(name);
    int rc = make_root(root, why, why_len);
    if (rc == 0)
        rc = locked_copy(input, S_ISDIR(st.st_mode), root, target, threads < 1 ? 8 : threads, why, why_len);
    free(root);
    if (rc != 0) {
        free(target);
        return NULL;
    }
    return target;
}
