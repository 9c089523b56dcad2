/*
 * convert.h — the parts of `selfsup convert` (cmd_convert.c) that read a source format into
 * VISSL's names: Caffe2 pickles (convert_caffe2.c).
 */
#ifndef SELFSUP_CONVERT_H
#define SELFSUP_CONVERT_H

#include "weights.h"

#include <stdbool.h>
#include <stddef.h>

/* One tensor to convert: its name in VISSL's layout ("trunk._feature_blocks.…", "heads.…"),
 * NULL when the source's converter leaves it out, and its values. */
typedef struct {
    char *name;
    const weights_tensor *t;
} convert_input;

/* VISSL's two Caffe2 converters: extra_scripts/convert_caffe2_to_torchvision_resnet.py
 * and convert_caffe2_to_vissl_alexnet.py (--weights_type caffe2). */
typedef enum { CAFFE2_NONE, CAFFE2_RESNET, CAFFE2_ALEXNET } caffe2_arch;

typedef struct {
    bool bgr2rgb; /* conv1_w's input channels reversed (OpenCV's BGR to PIL's RGB) */
    bool jigsaw;  /* a Jigsaw pretext model: the first siamese tower's blobs, the others dropped */
} caffe2_options;

/* Tensors made here (bgr2rgb's reversed conv1_w), freed with the conversion. */
typedef struct {
    weights_tensor *t;
    void *data;
} caffe2_copies;

/* The blobs of a Caffe2 pickle (f: a dict of numpy arrays, or one under "blobs") as the script
 * of `arch` renames them, in the sorted order of their Caffe2 names, into in[0 .. *n) (room for
 * weights_count(f)). 0, or -1 (logged): a blob name the script would map onto another's, or
 * --bgr2rgb without a conv1_w of 3 input channels. */
int caffe2_inputs(const weights_file *f, caffe2_arch arch, const caffe2_options *o, convert_input *in, size_t *n,
                  caffe2_copies *copies);
void caffe2_copies_free(caffe2_copies *c);

#endif
