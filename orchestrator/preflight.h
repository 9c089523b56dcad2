/*
 * preflight.h — the checks a stage makes when it starts, made before any stage starts.
 *
 * `selfsup config validate` and `selfsup run` both call this, so a config that validates is
 * one the run does not refuse later, and a run it refuses starts no process (exit 2).
 */
#ifndef SELFSUP_PREFLIGHT_H
#define SELFSUP_PREFLIGHT_H

#include "config.h"

#include <stdbool.h>

/* The engine's own checks for the composed config `config` run as `engine_name` (train or
 * extract_features), as rank 0 of the world would make them. Logs the refusal, worded as the
 * stage words it, and returns false. */
bool preflight_engine(const cfg_node *config, const char *engine_name);

#endif
