/*
 * fuzz_torchfile.c — libFuzzer target for lib/torchfile's reader.
 *
 * Each input is read twice: as a whole checkpoint image with torchfile_parse (zip archives go
 * through libzip from memory, anything starting with a pickle PROTO through the legacy
 * reader) and as one bare pickle with torchfile_unpickle. Failures must explain themselves;
 * accepted checkpoints must hold tensors whose every data byte can be read (ASan flags an
 * overrun) and must flatten (or refuse to, with a message).
 */
#include "torchfile.h"

#include <stdint.h>
#include <stdlib.h>

static void touch_tensors(const torchfile *f)
{
    tf_named *named;
    size_t n;
    char *err = NULL;
    if (tf_flatten(torchfile_root(f), NULL, &named, &n, &err) != 0) {
        if (!err || !*err)
            abort();
        free(err);
        return;
    }
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < n; i++) {
        const tf_tensor *t = named[i].tensor;
        if (t->nbytes != t->numel * st_dtype_size(t->dtype) || (t->nbytes && !t->data))
            abort();
        for (size_t b = 0; b < t->nbytes; b++)
            sink ^= ((const unsigned char *)t->data)[b];
    }
    (void)sink;
    tf_named_free(named, n);
}

typedef int (*reader)(const void *, size_t, const char *, torchfile **, char **);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const reader readers[] = {torchfile_parse, torchfile_unpickle};
    for (size_t r = 0; r < 2; r++) {
        torchfile *f;
        char *err = NULL;
        if (readers[r](data, size, "fuzz", &f, &err) != 0) {
            if (!err || !*err)
                abort(); /* failures always explain themselves */
            free(err);
            continue;
        }
        touch_tensors(f);
        torchfile_close(f);
    }
    return 0;
}
