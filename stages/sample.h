/*
 * sample.h — what the data stages put in their records: the C twin of VISSL's sample dict.
 *
 * VISSL's GenericSSLDataset returns {"data": [img per source], "label": [...],
 * "data_valid": [...], "data_idx": [...]}; the transforms turn each list entry into one or
 * more crops; the collator stacks N samples into a batch dict whose values are lists. A
 * record holds the same thing with one rule for names: a list entry i of key K is the tensor
 * "K.i", a list inside a list "K.i.j". So a SimCLR batch is data.0, label.0, data_valid.0,
 * data_idx.0, and a SwAV multi-crop batch is data.0.0, data.0.1 (the two 224 crops) and
 * data.0.2 … data.0.7 (the six 96s): one tensor per crop, as VISSL's multicrop_collator lists them.
 *
 *   decode → augment: one record per sample, header seq = the sample's position in this
 *     epoch's order (0, 1, 2, ... for this rank), header epoch = the epoch.
 *       data.S      uint8 [H, W, 3]  the decoded RGB image of source S (S = 0..sources-1)
 *       label       int64 [sources]  per-source label (class index, or the sample index), or
 *                   int64 [sources, M] when the label files are 2-D [N, M] .npy (each label a
 *                   row of M values, e.g. VOC07's {1, 0, -1}; decode_dataset_label_width)
 *       data_valid  int64 [sources]  1, or -1 when the image could not be read (gray image)
 *       data_idx    int64 [sources]  the sample's index in the dataset
 *       data_window int64 [sources, 4]  only from selfsup-decode --crop: data.S is the window
 *                   of its image that the transforms' crops read, at (x0, y0) of a
 *                   full_w x full_h image; rows (x0, y0, full_w, full_h), (0, 0, W, H) when whole
 *
 *   augment → collate: one record per sample, same seq and epoch.
 *       data.K      one per crop/copy K, uint8 [H, W, 3] (RGB), or [T, H, W, 3] for T
 *                   patches (Jigsaw); float32 [3, H, W] / [T, 3, H, W] with augment --float
 *       label       int64 [L]  the label list after the transforms (copies replicate it,
 *                   ImgRotatePil / ShuffleImgPatches overwrite its last entry); int64 [L, M]
 *                   when each label is a row of M values. targets_one_hot_default_collator's
 *                   [pos_list, neg_list] is the row label[0] of an int64 [L, 2K]: K positive
 *                   class indices, then K negative ones, each list padded with -1 (collate.h)
 *       data_valid  int64 [K], data_idx int64 [K]   replicated per copy, as VISSL does
 *       normalize   float32 [3, 3]  present when the transforms asked for a tensor (ToTensor,
 *                   Normalize) and the augment stage left that to the consumer: rows are the
 *                   divisor (255, or 1 for ImgPilToRawTensor), the mean and the std; the
 *                   consumer computes (px / div - mean) / std per channel in float32, in that
 *                   order (img_to_float_chw), which is torchvision's arithmetic exactly
 *
 *   collate → train: one record per batch, header seq = batch number within the epoch.
 *       VISSL's batch dict with the naming rule above (tensors stacked along a new first
 *       axis, in sampler order), plus "normalize" passed through unchanged.
 */
#ifndef SELFSUP_SAMPLE_H
#define SELFSUP_SAMPLE_H

/* Header flag: the last sample of this rank's epoch (decode sets it, augment keeps it), so
 * that collate knows the epoch's length and can close its last, partial batch. */
#define SAMPLE_FLAG_EPOCH_LAST 1u

/* VISSL's get_mean_image: the replacement for an unreadable image. */
#define SAMPLE_GRAY_VALUE 128

#endif
