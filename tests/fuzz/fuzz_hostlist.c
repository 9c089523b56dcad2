/*
 * fuzz_hostlist.c — libFuzzer target for Slurm host lists (lib/slurm.h).
 *
 * SLURM_JOB_NODELIST comes from the environment of whoever starts `selfsup run --role auto`;
 * a list the parser takes must expand within its promises whatever the bytes: no more than
 * SLURM_MAX_HOSTS names, none empty, none with a bracket or a separator left in it, and a
 * list it refuses says why and leaves nothing behind. Besides that, ASan/UBSan's findings.
 */
#include "slurm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0'; /* an environment variable ends at its first NUL */
    host_list l;
    char *err = NULL;
    int rc = slurm_expand_hostlist(text, &l, &err);
    if (rc == 0) {
        if (l.n > SLURM_MAX_HOSTS)
            abort();
        for (size_t i = 0; i < l.n; i++)
            if (!l.names[i][0] || strpbrk(l.names[i], "[], \t\n"))
                abort();
        host_list_free(&l);
    } else if (!err || l.n != 0 || l.names) {
        abort();
    }
    free(err);
    free(text);
    return 0;
}
