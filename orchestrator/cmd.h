/*
 * cmd.h — the subcommands of the `selfsup` front door, one file each.
 */
#ifndef SELFSUP_CMD_H
#define SELFSUP_CMD_H

#include "version.h"

/* selfsup config {show,validate,lr} CONFIG [overrides...]; argv[0] is "config". */
int cmd_config(int argc, char **argv);

#endif
