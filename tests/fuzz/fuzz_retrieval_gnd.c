/*
 * fuzz_retrieval_gnd.c — libFuzzer target for the retrieval benchmark's revisited ground truth
 * (stages/retrieval/datasets.c: a gnd_NAME.pkl through the restricted unpickler, then its
 * imlist, qimlist and gnd lists). A refusal must explain itself; an accepted file must give one
 * path per name and lists that can be read to their end (ASan flags an overrun).
 */
#include "retrieval/retrieval.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void touch(const retr_dataset *d)
{
    volatile size_t sink = 0;
    for (size_t i = 0; i < d->n_images; i++)
        sink += strlen(d->images[i]);
    for (size_t q = 0; q < d->n_queries; q++) {
        sink += strlen(d->queries[q]) + strlen(d->qnames[q]);
        for (size_t k = 0; k < d->n_easy[q]; k++)
            sink += (size_t)d->easy[q][k];
        for (size_t k = 0; k < d->n_hard[q]; k++)
            sink += (size_t)d->hard[q][k];
        for (size_t k = 0; k < d->n_junk[q]; k++)
            sink += (size_t)d->junk[q][k];
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    retr_dataset d;
    memset(&d, 0, sizeof d);
    char *err = NULL;
    if (retr_gnd_parse(data, size, "fuzz.pkl", "jpg", &d, &err) == 0)
        touch(&d);
    else if (!err || !*err)
        abort();
    free(err);
    retr_dataset_free(&d);
    return 0;
}
