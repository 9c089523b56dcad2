/*
 * fuzz_safetensors.c — libFuzzer target for lib/safetensors' reader.
 *
 * Each input is parsed with st_parse (the validator behind st_open). For accepted inputs every
 * tensor's bytes are read (ASan flags overruns), tensors must lie inside the input without
 * overlapping in data order, st_find must return each tensor by its name, and metadata lookups
 * must agree with the metadata list.
 */
#include "safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_file(const st_file *f, const uint8_t *data, size_t size)
{
    const uint8_t *prev_end = NULL;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        const uint8_t *p = t->data;
        if (p < data || p + t->nbytes > data + size || (prev_end && p < prev_end))
            abort();
        prev_end = p + t->nbytes;
        volatile uint8_t sink = 0;
        for (size_t b = 0; b < t->nbytes; b++)
            sink ^= p[b];
        (void)sink;
        if (st_find(f, t->name) != t)
            abort();
    }
    for (size_t i = 0; i < st_meta_count(f); i++) {
        st_meta m = st_meta_at(f, i);
        if (st_meta_get(f, m.key) != m.value)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file *f;
    char *err = NULL;
    if (st_parse(data, size, "fuzz", &f, &err) != 0) {
        if (!err || !*err)
            abort();
        free(err);
        return 0;
    }
    check_file(f, data, size);
    st_close(f);
    return 0;
}
