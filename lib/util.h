/*
 * util.h — small helpers with no better home: checked allocation, a growable string
 * buffer, whole-file reads (of regular files no bigger than a limit, where the path comes from a
 * user), path joins and edit distance (for "did you mean").
 */
#ifndef SELFSUP_UTIL_H
#define SELFSUP_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
/* For big buffers (features, images, records): 64-byte aligned (a cache line, what record
 * payloads need), and from 4 MiB up 2 MiB-aligned and marked for transparent huge pages,
 * which saves most page faults when they are first filled. free() them. */
void *xmalloc_large(size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The non-empty pieces of `text` between `sep` ("a,,b" → a, b): a malloc'd array of malloc'd
 * strings, *n of them (the shape feat_layers returns, so lists from either free alike). */
char **str_split(const char *text, char sep, int *n);
/* s with every `from` (non-empty) replaced by `to`, as Python's str.replace; s is freed and the
 * result is malloc'd. */
char *str_replace_all(char *s, const char *from, const char *to);

/* A growable NUL-terminated string. Zero-initialise, append, take `s`, free with sb_free. */
typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

void sb_putc(strbuf *sb, char c);
void sb_puts(strbuf *sb, const char *s);
void sb_putn(strbuf *sb, const char *s, size_t n);
void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vprintf(strbuf *sb, const char *fmt, va_list ap);
const char *sb_str(const strbuf *sb); /* "" when empty, never NULL */
void sb_free(strbuf *sb);

/* The error contract of the file-format modules: format a message into *err (malloc'd) or,
 * when err is NULL, log it; returns -1 so callers can `return report_failure(...)`. */
int report_failure(char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Read a whole file; returns NULL and sets errno on failure. */
char *read_whole_file(const char *path, size_t *len_out);
/* Read `size` bytes from fd, retrying short reads and EINTR; fewer only at end of file.
 * Returns how many, or -1 with errno. */
ssize_t read_upto(int fd, void *buf, size_t size);
/* Open `path` for reading only if it is a regular file of at most max_bytes bytes (SIZE_MAX:
 * any size). A FIFO would block the open, and then the read, until someone writes to it; a
 * device such as /dev/zero never ends; neither is a file a user means to hand us. The type is
 * checked before the open, so nothing else is ever opened, and again on the descriptor, so a
 * path swapped in between changes nothing. Returns an O_CLOEXEC descriptor and the size in
 * *size_out (may be NULL), or -1 with report_failure's contract: the message names the path
 * and what it is ("is a FIFO (named pipe), not a regular file", "is a directory, ...", "too
 * big: N bytes, more than the M allowed"); a path that cannot be opened says "cannot open". */
int open_regular_file(const char *path, size_t max_bytes, size_t *size_out, char **err);
/* open_regular_file's checks, for an argument to refuse before any work: 0, or -1 with *err. */
int check_regular_file(const char *path, size_t max_bytes, char **err);
/* open_regular_file, then read it whole: a malloc'd buffer of *len_out bytes plus a NUL, or
 * NULL with *err as above. */
char *read_regular_file(const char *path, size_t max_bytes, size_t *len_out, char **err);
bool path_exists(const char *path);
bool path_is_dir(const char *path);
char *path_join(const char *dir, const char *name);
/* mkdir -p with `mode` for the directories it creates; an existing directory is fine.
 * Returns 0, or -1 with *err naming the directory that could not be made. */
int make_dirs(const char *path, unsigned mode, char **err);
char *path_dirname(const char *path);
/* Directory of the running executable (from /proc/self/exe), or NULL. */
char *exe_dir(void);

/* Levenshtein distance, case-insensitive; stops early and returns > limit past `limit`. */
size_t edit_distance(const char *a, const char *b, size_t limit);

/* Shortest decimal text that reads back as the same double (like Python's repr). */
void format_double(char *out, size_t size, double v);

#ifdef __cplusplus
}
#endif

#endif
