/*
 * dataset.h — VISSL's GenericSSLDataset for one split, as the decode stage needs it: which
 * file (or synthetic image) each source holds for sample i, and the sample's labels.
 */
#ifndef SELFSUP_DECODE_DATASET_H
#define SELFSUP_DECODE_DATASET_H

#include "config.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* VISSL's SyntheticImageDataset length (its docs say 500; the code says 50000). */
#define DECODE_SYNTHETIC_LENGTH 50000

typedef enum { DECODE_SOURCE_FOLDER, DECODE_SOURCE_FILELIST, DECODE_SOURCE_SYNTHETIC } decode_source_kind;
typedef enum { DECODE_LABEL_STANDARD, DECODE_LABEL_SAMPLE_INDEX, DECODE_LABEL_ZERO } decode_label_type;

typedef struct {
    decode_source_kind kind;
    char *data_path; /* folder or file list ("" for synthetic) */
    char **paths;    /* `count` image paths; NULL for synthetic */
    size_t count;    /* after DATA_LIMIT */
} decode_source;

typedef struct {
    int64_t *values; /* count * width, row-major */
    size_t count;
    size_t width;    /* labels per sample: 1, or M for a 2-D [N, M] disk_filelist .npy */
} decode_label_source;

typedef struct {
    const char *split;          /* "TRAIN" or "TEST" */
    decode_source *sources;
    size_t n_sources;
    decode_label_source *label_sources;
    size_t n_label_sources;
    decode_label_type label_type;
    size_t length;              /* samples: the first source's count, as VISSL's __len__ */
    int gray_size;              /* DEFAULT_GRAY_IMG_SIZE */
} decode_dataset;

/* Build the dataset of DATA.<split> from the composed `config` map, resolving paths through
 * DATA_PATHS / LABEL_PATHS or the dataset catalog (catalog_path; NULL = find it as the
 * config loader does). Returns 0, or -1 with *err (malloc'd) on a config error: list lengths
 * that disagree, a dataset missing from the catalog, a path that cannot be read, labels
 * that do not cover the samples; or DECODE_DATASET_RUNTIME_ERROR when the configuration is
 * fine but the machine failed (COPY_TO_LOCAL_DISK could not copy: a full disk, say). */
#define DECODE_DATASET_RUNTIME_ERROR (-2)
int decode_dataset_load(decode_dataset *ds, const cfg_node *config, const char *split, const char *catalog_path,
                        char **err);
/* decode_dataset_load that gives up soon after *cancel turns true (the stage was asked to
 * stop while it walked a huge disk_folder), returning DECODE_DATASET_CANCELLED with *err
 * saying where it stopped. `cancel` may be NULL. */
#define DECODE_DATASET_CANCELLED (-3)
int decode_dataset_load_cancellable(decode_dataset *ds, const cfg_node *config, const char *split,
                                    const char *catalog_path, const atomic_bool *cancel, char **err);
void decode_dataset_free(decode_dataset *ds);

/* Label sources per sample (the first dimension of the record's label tensor). */
size_t decode_dataset_label_count(const decode_dataset *ds);
/* Values per label: 1 for 1-D label files, folder labels, sample_index and zero; M when the
 * label files are 2-D [N, M] (np.load(path)[idx] is a row of M values). Every label source
 * of a dataset has the same width (decode_dataset_load checks). The record's label tensor
 * is int64 [count] when the width is 1 and int64 [count, width] otherwise. */
size_t decode_dataset_label_width(const decode_dataset *ds);
/* Fill labels[0 .. count * width) for sample idx: label source j's row at j * width. */
void decode_dataset_labels(const decode_dataset *ds, size_t idx, int64_t *labels);

#endif
