/*
 * util.c — see util.h.
 */
#include "util.h"

#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void out_of_memory(size_t n)
{
    die(EXIT_RUNTIME, "out of memory allocating %zu bytes", n);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory(count * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory(n);
    return q;
}

void *xmalloc_large(size_t n)
{
    enum { HUGE_PAGE = 2 << 20, HUGE_FROM = 4 << 20 };
    void *p;
    if (posix_memalign(&p, n < HUGE_FROM ? 64 : HUGE_PAGE, n ? n : 1))
        out_of_memory(n);
    if (n < HUGE_FROM)
        return p;
    size_t span = (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    (void)madvise(p, span, MADV_HUGEPAGE); /* advice only: fine where THP is off */
    return p;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    return sb.s ? sb.s : xstrdup("");
}

static void sb_reserve(strbuf *sb, size_t extra)
{
    if (sb->len + extra + 1 <= sb->cap)
        return;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    sb->s = xrealloc(sb->s, cap);
    sb->cap = cap;
}

void sb_putn(strbuf *sb, const char *s, size_t n)
{
    sb_reserve(sb, n);
    memcpy(sb->s + sb->len, s, n);
    sb->len += n;
    sb->s[sb->len] = '\0';
}

void sb_putc(strbuf *sb, char c)
{
    sb_putn(sb, &c, 1);
}

void sb_puts(strbuf *sb, const char *s)
{
    sb_putn(sb, s, strlen(s));
}

void sb_vprintf(strbuf *sb, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return;
    sb_reserve(sb, (size_t)n);
    vsnprintf(sb->s + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
}

void sb_printf(strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(sb, fmt, ap);
    va_end(ap);
}

const char *sb_str(const strbuf *sb)
{
    return sb->s ? sb->s : "";
}

void sb_free(strbuf *sb)
{
    free(sb->s);
    *sb = (strbuf){0};
}

int report_failure(char **err, const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    if (err) {
        *err = sb.s ? sb.s : xstrdup("");
    } else {
        log_error("%s", sb_str(&sb));
        sb_free(&sb);
    }
    return -1;
}

char *read_whole_file(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    strbuf sb = {0};
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        sb_putn(&sb, buf, n);
    int err = ferror(f);
    fclose(f);
    if (err) {
        sb_free(&sb);
        errno = EIO;
        return NULL;
    }
    if (len_out)
        *len_out = sb.len;
    return sb.s ? sb.s : xstrdup("");
}

/* What a file that is not a regular one is, for a message a user can act on. */
static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO (named pipe)"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "of an unknown file type";
}

static int check_regular(const char *path, const struct stat *st, size_t max_bytes, char **err)
{
    if (!S_ISREG(st->st_mode))
        return report_failure(err, "%s: is %s, not a regular file", path, file_kind(st->st_mode));
    if ((uintmax_t)st->st_size > max_bytes)
        return report_failure(err, "%s: too big: %jd bytes, more than the %zu allowed", path,
                              (intmax_t)st->st_size, max_bytes);
    return 0;
}

int open_regular_file(const char *path, size_t max_bytes, size_t *size_out, char **err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return report_failure(err, "%s: cannot open: %s", path, strerror(errno));
    if (check_regular(path, &st, max_bytes, err) != 0)
        return -1;
    /* O_NONBLOCK: should a FIFO have taken the file's place since the stat, the open must
     * not wait for a writer; the fstat below then refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return report_failure(err, "%s: cannot open: %s", path, strerror(errno));
    int rc = fstat(fd, &st) != 0 ? report_failure(err, "%s: cannot stat: %s", path, strerror(errno))
                                 : check_regular(path, &st, max_bytes, err);
    if (rc == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        rc = report_failure(err, "%s: cannot open: %s", path, strerror(errno));
    if (rc != 0) {
        close(fd);
        return -1;
    }
    if (size_out)
        *size_out = (size_t)st.st_size;
    return fd;
}

int check_regular_file(const char *path, size_t max_bytes, char **err)
{
    int fd = open_regular_file(path, max_bytes, NULL, err);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

ssize_t read_upto(int fd, void *buf, size_t size)
{
    size_t done = 0;
    while (done < size) {
        ssize_t n = read(fd, (char *)buf + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -1 : (ssize_t)done;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

char *read_regular_file(const char *path, size_t max_bytes, size_t *len_out, char **err)
{
    size_t size;
    int fd = open_regular_file(path, max_bytes, &size, err);
    if (fd < 0)
        return NULL;
    char *buf = xmalloc(size + 1);
    /* The size it had when opened: a file that grows meanwhile cannot run past the limit. */
    ssize_t got = read_upto(fd, buf, size);
    if (got < 0)
        report_failure(err, "%s: cannot read: %s", path, strerror(errno));
    close(fd);
    if (got < 0) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    if (len_out)
        *len_out = (size_t)got;
    return buf;
}

bool path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

bool path_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *path_join(const char *dir, const char *name)
{
    if (!dir || !*dir || name[0] == '/')
        return xstrdup(name);
    size_t n = strlen(dir);
    return xasprintf("%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name);
}

char *path_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return xstrdup(".");
    if (slash == path)
        return xstrdup("/");
    return xstrndup(path, (size_t)(slash - path));
}

char *exe_dir(void)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    return path_dirname(buf);
}

size_t edit_distance(const char *a, const char *b, size_t limit)
{
    size_t la = strlen(a), lb = strlen(b);
    if ((la > lb ? la - lb : lb - la) > limit)
        return limit + 1;
    size_t *row = xmalloc((lb + 1) * sizeof *row);
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0], best = i;
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t v = diag + cost;
            if (up + 1 < v)
                v = up + 1;
            if (row[j - 1] + 1 < v)
                v = row[j - 1] + 1;
            row[j] = v;
            diag = up;
            if (v < best)
                best = v;
        }
        if (best > limit) {
            free(row);
            return limit + 1;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

void format_double(char *out, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(out, size, ".nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, size, v > 0 ? ".inf" : "-.inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, size, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            break;
    }
    /* Keep it a float for every YAML reader: 1 -> 1.0, and 1e-05 -> 1.0e-05 because
     * PyYAML's YAML 1.1 float needs a dot in the mantissa. */
    char *e = strchr(out, 'e');
    if (!strchr(out, '.') && e && strlen(out) + 3 <= size) {
        memmove(e + 2, e, strlen(e) + 1);
        e[0] = '.';
        e[1] = '0';
    } else if (!strpbrk(out, ".e")) {
        strncat(out, ".0", size - strlen(out) - 1);
    }
}

static int make_dir(const char *path, unsigned mode, char **err)
{
    if (mkdir(path, (mode_t)mode) == 0 || (errno == EEXIST && path_is_dir(path)))
        return 0;
    return report_failure(err, "%s: cannot create directory: %s", path, strerror(errno));
}

int make_dirs(const char *path, unsigned mode, char **err)
{
    char *p = xstrdup(path);
    int rc = 0;
    for (char *s = p + 1; *s && rc == 0; s++)
        if (*s == '/') {
            *s = 0;
            rc = make_dir(p, mode, err);
            *s = '/';
        }
    if (rc == 0)
        rc = make_dir(p, mode, err);
    free(p);
    return rc;
}

char **str_split(const char *text, char sep, int *n)
{
    char **out = NULL;
    *n = 0;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, sep);
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len) {
            out = xrealloc(out, (size_t)(*n + 1) * sizeof *out);
            out[(*n)++] = xstrndup(p, len);
        }
        p += len + (end != NULL);
    }
    return out;
}

/* Python's str.replace: see util.h. */
char *str_replace_all(char *s, const char *from, const char *to)
{
    strbuf b = {0};
    size_t n = strlen(from);
    for (const char *p = s, *hit; *p; p = hit + n) {
        if (!(hit = strstr(p, from))) {
            sb_printf(&b, "%s", p);
            break;
        }
        sb_printf(&b, "%.*s%s", (int)(hit - p), p, to);
        if (!hit[n])
            break;
    }
    free(s);
    return b.s ? b.s : xstrdup("");
}
