/*
 * test_ctl_util.c — see test_ctl_util.h.
 */
#include "test_ctl_util.h"

#include <criterion/criterion.h>

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
