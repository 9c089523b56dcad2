/*
 * test_ctl_util.c — see test_ctl_util.h.
 */
#include "test_ctl_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

ctl_server *ctlt_bind(const char *endpoint, const char *keys)
{
    char *err = NULL;
    ctl_server *s = ctl_bind(endpoint, keys, &err);
    cr_assert(s, "ctl_bind(%s): %s", endpoint, err ? err : "?");
    return s;
}

ctl_client *ctlt_connect(const char *endpoint, const char *id, const char *key_file)
{
    char *err = NULL;
    ctl_client *c = ctl_connect(endpoint, id, key_file, &err);
    cr_assert(c, "ctl_connect(%s): %s", endpoint, err ? err : "?");
    return c;
}

const char *ctlt_type_of(const json_t *m)
{
    return json_string_value(json_object_get(m, "type"));
}

ctlt_child ctlt_fork(int alarm_s, int (*body)(const char *msg, const void *arg), const void *arg)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        alarm((unsigned)alarm_s);
        close(fds[1]);
        char msg[1024];
        ssize_t n, got = 0;
        while ((n = read(fds[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0)
            got += n;
        msg[got] = '\0';
        _exit(got > 0 ? body(msg, arg) : 9);
    }
    close(fds[0]);
    return (ctlt_child){.pid = pid, .to_child = fds[1]};
}

void ctlt_tell(ctlt_child *c, const char *msg)
{
    cr_assert_eq(write(c->to_child, msg, strlen(msg)), (ssize_t)strlen(msg));
    close(c->to_child);
}
