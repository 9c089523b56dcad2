/*
 * imagefolder.h — torchvision's ImageFolder listing, in the same order: the sample list that
 * a disk_folder source and a disk_folder label source are made of.
 */
#ifndef SELFSUP_DECODE_IMAGEFOLDER_H
#define SELFSUP_DECODE_IMAGEFOLDER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char **paths;     /* count image paths, "ROOT/CLASS/.../FILE" */
    int64_t *targets; /* their class indices */
    size_t count;
    char **classes;   /* n_classes class names, sorted */
    size_t n_classes;
} decode_imagefolder;

/* List `root` as ImageFolder(root) does. Returns 0, or -1 with *err (malloc'd) when the
 * folder cannot be read, has no class folder, or a class has no image (torchvision raises
 * FileNotFoundError in those cases). */
int decode_imagefolder_scan(const char *root, decode_imagefolder *out, char **err);
/* The same, but it gives up soon after *cancel turns true (a stage asked to stop while it
 * walks a huge tree), returning -1 with *err saying so. `cancel` may be NULL. */
int decode_imagefolder_scan_cancellable(const char *root, const atomic_bool *cancel, decode_imagefolder *out,
                                        char **err);
void decode_imagefolder_free(decode_imagefolder *f);

/* torchvision's IMG_EXTENSIONS test, case-insensitive. */
int decode_has_image_extension(const char *name);

#endif
