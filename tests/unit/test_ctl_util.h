/*
 * test_ctl_util.h — what the control-plane tests (test_control.c, test_auth.c) share: binding
 * and connecting that must succeed, a message's type, and a forked child told its endpoint
 * on a pipe.
 */
#ifndef SELFSUP_TEST_CTL_UTIL_H
#define SELFSUP_TEST_CTL_UTIL_H

#include "control.h"

#include <sys/types.h>

/* ctl_bind / ctl_connect that fail the test, naming the endpoint and the reason. */
ctl_server *ctlt_bind(const char *endpoint, const char *keys);
ctl_client *ctlt_connect(const char *endpoint, const char *id, const char *key_file);
/* A message's "type" (NULL when it has none). */
const char *ctlt_type_of(const json_t *m);

/* A forked child that waits for its message on a pipe: the fork must come before this process
 * starts ZeroMQ threads (test_control.c's converse_forked says why), and the message (the
 * endpoint, ...) is known only once the parent has bound. */
typedef struct {
    pid_t pid;
    int to_child; /* the pipe's write end */
} ctlt_child;

/* Fork a child that, under alarm(alarm_s), reads the whole message from the pipe and exits
 * (_exit) with body(msg, arg), or 9 if no message came. */
ctlt_child ctlt_fork(int alarm_s, int (*body)(const char *msg, const void *arg), const void *arg);
/* Write the child's message and close the pipe. */
void ctlt_tell(ctlt_child *c, const char *msg);

#endif
