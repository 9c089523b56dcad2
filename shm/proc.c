/*
 * proc.c — the liveness of registered peers (see proc.h).
 */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Fields 3 (state) and 22 (start time) of /proc/PID/stat. Returns 0, or an errno. */
int proc_read_stat(pid_t pid, char *state, uint64_t *start_time)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int read_errno = errno;
    close(fd);
    if (n <= 0)
        return n < 0 ? read_errno : EIO;
    buf[n] = '\0';
    /* Field 2 is the command name in parentheses, which may itself hold spaces and ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return EIO;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return EIO;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno)
        return EIO;
    *start_time = v;
    return 0;
}

/* Why the process registered as (pid, start_time) no longer runs, or NULL if it does. */
const char *proc_gone(pid_t pid, uint64_t start_time)
{
    if (pid <= 0)
        return "has no valid pid";
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return "exited";
    char state;
    uint64_t now_start;
    int rc = proc_read_stat(pid, &state, &now_start);
    if (rc == ENOENT || rc == ESRCH)
        return "exited";
    if (rc != 0)
        return NULL; /* /proc hidden from us (hidepid): trust kill() */
    if (state == 'Z' || state == 'X')
        return "exited (a zombie now)";
    if (now_start != start_time)
        return "exited (its pid now belongs to a newer process)";
    return NULL;
}
