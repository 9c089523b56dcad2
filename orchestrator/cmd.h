/*
 * cmd.h — the subcommands of the `selfsup` front door, one file each.
 */
#ifndef SELFSUP_CMD_H
#define SELFSUP_CMD_H

#include "version.h"

/* selfsup config {show,validate,lr} CONFIG [overrides...]; argv[0] is "config". */
int cmd_config(int argc, char **argv);
/* selfsup run CONFIG [overrides...]: start and supervise a whole pipeline. */
int cmd_run(int argc, char **argv);
/* selfsup inspect [--values N] [--count] FILE|-: print records. */
int cmd_inspect(int argc, char **argv);
/* selfsup keygen [--force] FILE: a CURVE keypair for the control plane. */
int cmd_keygen(int argc, char **argv);
/* selfsup dataset fashion-mnist DIR [--limit N] [--force]: a Debian dataset in VISSL's layouts. */
int cmd_dataset(int argc, char **argv);
/* selfsup convert IN OUT [--to vissl|torchvision] [--format safetensors|torch]: model weights
 * between VISSL's and torchvision's layouts, torch.save and safetensors files. */
int cmd_convert(int argc, char **argv);

#endif
