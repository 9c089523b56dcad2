/*
 * localcopy.h — DATA.<split>.COPY_TO_LOCAL_DISK: copy a dataset to a node's local disk once,
 * then read it from there (VISSL's vissl.utils.io.copy_data_to_local).
 *
 * A directory INPUT is copied to DEST/[SLURM_JOBID/]basename(INPUT)/ and marked complete by
 * an empty `copy_complete` file written last; a later run (or another rank on the node) that
 * finds the marker reads the copy as it is. A file INPUT is copied to DEST/[SLURM_JOBID/]
 * basename(INPUT) unless that file already exists. Ranks of one node that start together
 * take a lock in DEST, so one of them copies while the others wait for it.
 *
 * Files are copied by several threads with copy_file_range(2) (falling back to read/write),
 * each to a temporary name renamed into place, so an interrupted copy never leaves a file
 * that looks complete — and the marker is never written before every file is in.
 */
#ifndef SELFSUP_DECODE_LOCALCOPY_H
#define SELFSUP_DECODE_LOCALCOPY_H

#include <stddef.h>

/* The local path of `input` (malloc'd), copying it first when needed; NULL with `why` set
 * when the copy failed. `threads` < 1 means 8. */
char *local_copy(const char *input, const char *dest_dir, int threads, char *why, size_t why_len);

#endif
