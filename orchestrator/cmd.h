/*
 * cmd.h — the subcommands of the `selfsup` front door, one file each.
 */
#ifndef SELFSUP_CMD_H
#define SELFSUP_CMD_H

#include "config.h"
#include "version.h"

/* selfsup config {show,validate,lr} CONFIG [overrides...]; argv[0] is "config". */
int cmd_config(int argc, char **argv);
/* selfsup run CONFIG [overrides...]: start and supervise a whole pipeline. */
int cmd_run(int argc, char **argv);
/* The same with engine_name forced (NULL: the config's). */
int cmd_run_engine(int argc, char **argv, const char *engine);
/* What `selfsup run argv` would refuse before starting anything, checked without starting it:
 * the command line parsed and the config composed as cmd_run does (but for the files its paths
 * name, which may not exist yet), edit(config, ctx) applied, then the engine's preflight. false
 * after logging the refusal. argv[0] is "run". */
bool cmd_run_check(int argc, char **argv, void (*edit)(cfg_node *config, const void *ctx), const void *ctx);
/* The config `selfsup run argv` would run on other machines (the root: engine_name and
 * config), composed and checked as it would be there (the --role given included; the model
 * on the cpu; paths are left to them), with the config file's absolute path. NULL after
 * logging the refusal. argv[0] is "run". */
cfg_node *cmd_run_config(int argc, char **argv, char **file_out);
/* selfsup slurm CONFIG [overrides...] [--partition P] [--nodes N] [--gpus-per-node G]
 * [--farm-nodes K] [--time H:MM] [--run-dir DIR] [--dry-run]: write the sbatch script of the
 * run (slurm.h) and submit it. Also `selfsup run` with SLURM.USE_SLURM outside a job. */
int cmd_slurm(int argc, char **argv);
/* selfsup svm|knn|clusterfit CONFIG [overrides...] [--run-dir DIR] [--no-extract]: extract the
 * features (engine extract_features), then run selfsup-svm, selfsup-knn or selfsup-cluster on
 * them, as VISSL's tools/train_svm.py, tools/nearest_neighbor_test.py and
 * tools/cluster_features_and_label.py do; clusterfit then trains on the labels with --then
 * TRAIN_CONFIG [overrides...]. argv[0] is "svm", "knn" or "clusterfit". */
int cmd_eval(int argc, char **argv);
/* selfsup status RUN_DIR [--json]: what a run is doing (RUN_DIR/status.json, run_status.h). */
int cmd_status(int argc, char **argv);
/* selfsup inspect [--values N] [--count] FILE|-: print records. */
int cmd_inspect(int argc, char **argv);
/* selfsup keygen [--force] DIR --clients NAME[:IDS]... | FILE: CURVE keys for tcp endpoints. */
int cmd_keygen(int argc, char **argv);
/* selfsup dataset fashion-mnist DIR [--limit N] [--force]: a Debian dataset in VISSL's layouts;
 * selfsup dataset jigsaw-perms N K OUT [...]: Jigsaw's permutation set (cmd_jigsaw.c). */
int cmd_dataset(int argc, char **argv);
/* selfsup dataset jigsaw-perms N K OUT [--method max_avg|max_min] [--first J | --seed S];
 * argv[0] is "jigsaw-perms". */
int cmd_dataset_jigsaw_perms(int argc, char **argv);
/* selfsup dataset low-shot TARGETS OUT --dataset voc|places [...]: the low-shot SVM's samples
 * (cmd_lowshot.c); argv[0] is "low-shot". */
int cmd_dataset_lowshot(int argc, char **argv);
/* selfsup dataset voc2007|voc2012 SRC DST [--separate-partitions] [--generate-json];
 * argv[0] is the dataset's name. */
int cmd_dataset_voc(int argc, char **argv);
/* selfsup dataset coco2014 ANNOTATIONS DST --train-images DIR --val-images DIR; argv[0] "coco2014". */
int cmd_dataset_coco(int argc, char **argv);
/* selfsup dataset imagenet SRC DST [--generate-json] [--listdir-order]; argv[0] "imagenet". */
int cmd_dataset_imagenet(int argc, char **argv);
/* selfsup dataset inaturalist2018 SRC DST; argv[0] "inaturalist2018". */
int cmd_dataset_inat(int argc, char **argv);
/* selfsup convert IN OUT [--to vissl|torchvision] [--format safetensors|torch]: model weights
 * between VISSL's and torchvision's layouts, torch.save and safetensors files. */
int cmd_convert(int argc, char **argv);

#endif
