/*
 * cfg_internal.h — shared between the lib/cfg_*.c files, not for stages.
 */
#ifndef SELFSUP_CFG_INTERNAL_H
#define SELFSUP_CFG_INTERNAL_H

#include "config.h"

/* What a YAML config may be (cfg_yaml.c). Far above any VISSL config (the deepest nests 10
 * levels, the widest map has 37 keys, the biggest file, defaults.yaml, is 82 KB), and checked
 * while libyaml reads, so that hostile input is refused in milliseconds instead of minutes. */
#define CFG_MAX_DEPTH 64           /* nesting levels below the top */
#define CFG_MAX_MAP_KEYS 65536     /* keys in one map */
#define CFG_MAX_NODES 1000000      /* values in a document, aliases expanded ("billion laughs") */
#define CFG_MAX_FILE_BYTES (4u << 20)

/* YAML 1.1 integer and OmegaConf float text rules (cfg_yaml.c). */
bool cfg_text_to_int(const char *text, int64_t *out);
bool cfg_text_to_float(const char *text, double *out);

/* Transform parameter table (cfg_names.c). */
const char *const *cfg_transform_params(const char *name, size_t *count);
bool cfg_is_transform_common_key(const char *key);

/* Scheduler checks against lib/sched (cfg_sched.c). */
bool cfg_check_scheduler(const cfg_node *sched, const char *path, int64_t num_epochs, cfg_err *err);

#endif
