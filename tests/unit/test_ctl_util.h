/*
 * test_ctl_util.h — what the control-plane tests (test_control.c, test_auth.c) share: binding
 * and connecting that must succeed, and a message's type.
 */
#ifndef SELFSUP_TEST_CTL_UTIL_H
#define SELFSUP_TEST_CTL_UTIL_H

#include "control.h"

/* ctl_bind / ctl_connect that fail the test, naming the endpoint and the reason. */
ctl_server *ctlt_bind(const char *endpoint, const char *keys);
ctl_client *ctlt_connect(const char *endpoint, const char *id, const char *key_file);
/* A message's "type" (NULL when it has none). */
const char *ctlt_type_of(const json_t *m);

#endif
