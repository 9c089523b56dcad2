/*
 * preflight.c — the engine's start-up checks, made by the orchestrator (see preflight.h).
 *
 * The trainer's (trainer_check_config: loss, optimizer, meter, schedules, batches per epoch,
 * world size, model options and weights file, the device, CHECKPOINT.DIR) and the
 * extractor's (extractor_check_config: the model's options and weights file, the device, the
 * output folder). A stage that is another program (SELFSUP.STAGES.train: a sink that saves the
 * batches) is not checked as ours.
 */
#include "preflight.h"

#include "extract/extract.h"
#include "log.h"
#include "train/trainer.h"

#include <stdio.h>
#include <string.h>

/* Whether the run's `stage` is `program` (selfsup-train, selfsup-extract). The first word of
 * SELFSUP.STAGES.<stage> is the program, as topology.c reads it; ours from another folder is
 * still ours. */
static bool runs_ours(const cfg_node *config, const char *stage, const char *program)
{
    char key[64];
    snprintf(key, sizeof key, "SELFSUP.STAGES.%s", stage);
    const cfg_node *custom = cfg_path(config, key);
    if (!custom || custom->kind != CFG_STR || !custom->s[0])
        return true;
    size_t start = strspn(custom->s, " \t"), n = strcspn(custom->s + start, " \t");
    const char *prog = custom->s + start;
    size_t m = strlen(program);
    return n >= m && !strncmp(prog + n - m, program, m) && (n == m || prog[n - m - 1] == '/');
}

/* Rank 0 of NUM_NODES × NUM_PROC_PER_NODE, with a test chain under TEST_MODEL as topology.c
 * wires one. */
static bool check_trainer(const cfg_node *config, cfg_err *err)
{
    static const trainer_test_input test_chain; /* only its presence is read by the check */
    trainer_options o = {.world_size = (int)(cfg_int(config, "DISTRIBUTED.NUM_NODES") *
                                             cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE")),
                         .test_input = cfg_bool(config, "TEST_MODEL") ? &test_chain : NULL,
                         .world_promised = true}; /* topology.c gives several trainers their world */
    return trainer_check_config(config, &o, err);
}

bool preflight_engine(const cfg_node *config, const char *engine_name)
{
    cfg_err err;
    bool ok = true;
    if (!strcmp(engine_name, "train") && runs_ours(config, "train", "selfsup-train"))
        ok = check_trainer(config, &err);
    else if (!strcmp(engine_name, "extract_features") && runs_ours(config, "extract", "selfsup-extract"))
        ok = extractor_check_config(config, cfg_str(config, "CHECKPOINT.DIR"), &err);
    if (!ok)
        log_error("%s", err.msg);
    return ok;
}
