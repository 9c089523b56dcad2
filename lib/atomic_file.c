/*
 * atomic_file.c — see atomic_file.h. The temp name is PATH.tmp-PID-N in the same directory,
 * so the final rename never crosses a filesystem.
 */
#include "atomic_file.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int atomic_file_open(atomic_file *f, const char *path, char **err)
{
    static unsigned counter;
    *f = (atomic_file){.fd = -1, .path = xstrdup(path)};
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* Renaming over /dev/null or a fifo would replace it with a plain file. */
        atomic_file_abort(f);
        return report_failure(err, "%s: not a regular file; refusing to replace it", path);
    }
    /* pid + per-process counter makes collisions rare; O_EXCL makes them harmless */
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        f->tmp = xasprintf("%s.tmp-%ld-%u", path, (long)getpid(), n);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0)
            return 0;
        int e = errno;
        free(f->tmp);
        f->tmp = NULL;
        if (e != EEXIST) {
            atomic_file_abort(f);
            return report_failure(err, "%s: cannot create temporary file: %s", path, strerror(e));
        }
    }
    atomic_file_abort(f);
    return report_failure(err, "%s: cannot create a temporary file name", path);
}

void atomic_file_reserve(atomic_file *f, size_t bytes)
{
    enum { RESERVE_FROM = 16 << 20 }; /* numpy's threshold */
    if (f->fd >= 0 && bytes >= RESERVE_FROM)
        (void)posix_fallocate(f->fd, 0, (off_t)bytes);
}

int atomic_file_write(atomic_file *f, const void *buf, size_t n, char **err)
{
    const char *p = buf;
    while (n > 0) {
        /* Linux writes at most ~2 GiB per call; stay well under */
        ssize_t w = write(f->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return report_failure(err, "%s: write failed: %s", f->path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Make the rename itself durable; some filesystems refuse fsync on directories, which is
 * not worth failing a finished write over. */
static void fsync_dir_of(const char *path)
{
    char *dir = path_dirname(path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int atomic_file_commit(atomic_file *f, char **err)
{
    const char *step = "fsync";
    int rc = fsync(f->fd);
    if (rc == 0) {
        step = "close";
        rc = close(f->fd);
        f->fd = -1;
    }
    if (rc == 0) {
        step = "rename";
        rc = rename(f->tmp, f->path);
    }
    if (rc != 0) {
        int e = errno;
        report_failure(err, "%s: %s failed: %s", f->path, step, strerror(e));
        atomic_file_abort(f);
        return -1;
    }
    free(f->tmp);
    f->tmp = NULL;
    fsync_dir_of(f->path);
    free(f->path);
    f->path = NULL;
    return 0;
}

void atomic_file_abort(atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp)
        unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
}

int atomic_file_write_whole(const char *path, const void *buf, size_t n, char **err)
{
    atomic_file f;
    if (atomic_file_open(&f, path, err) != 0)
        return -1;
    if (atomic_file_write(&f, buf, n, err) != 0) {
        atomic_file_abort(&f);
        return -1;
    }
    return atomic_file_commit(&f, err);
}

int json_write_file(const json_t *doc, const char *path, char **err)
{
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!text)
        return report_failure(err, "%s: the results could not be encoded", path);
    size_t n = strlen(text);
    char *line = xmalloc(n + 2);
    memcpy(line, text, n);
    line[n] = '\n';
    free(text);
    int rc = atomic_file_write_whole(path, line, n + 1, err);
    free(line);
    return rc;
}
