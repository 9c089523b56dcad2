/*
 * test_config_values.c — values that compose (the right type) but that no run can use are
 * refused by every binary at its start, not found later: a heartbeat timeout of 0 (hang
 * detection silently off), a ring depth of 0 (exit 1 at ring creation), a negative slot size,
 * more augment workers than a ring holds (forked, then failing one by one), a crop of 2·10⁹
 * pixels (refused by selfsup-augment only once the run started), a non-finite LR or momentum.
 *
 * The cases are files of the bad-config corpus (tests/configs/bad/, whose own test runs them
 * through `selfsup config validate`): here each one goes through every stage binary, which
 * must exit 2 with the corpus file's "# expect:" message — the key, and the file and line
 * (or the override) it came from.
 */
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cases[] = {
    "62_heartbeat_timeout_zero.yaml",   "63_heartbeat_timeout_negative.yaml", "64_ring_depth_zero.yaml",
    "65_ring_depth_negative.yaml",      "66_ring_slot_bytes_negative.yaml",  "67_dataloader_workers_past_the_rings.yaml",
    "68_crop_size_huge.yaml",           "69_lr_inf_override.yaml",            "70_lr_overflowing_to_inf.yaml",
    "71_momentum_nan.yaml",             "72_invalid_images_share_above_one.yaml",
};

/* A stage binary and the arguments it needs besides -c CONFIG and the overrides. */
static const struct {
    const char *bin, *args;
} stages[] = {
    {"selfsup-decode", "--out file:/dev/null"},
    {"selfsup-augment", "--in file:/dev/null --out file:/dev/null"},
    {"selfsup-collate", "--in file:/dev/null --out file:/dev/null"},
    {"selfsup-train", "--in file:/dev/null"},
    {"selfsup-extract", "--in file:/dev/null"},
    {"selfsup-sink", "--in file:/dev/null"},
    {"selfsup-knn", ""},
    {"selfsup-svm", ""},
    {"selfsup-retrieval", ""},
};

/* The text after `tag` on the file's header comment line, or NULL. */
static char *header_value(const char *file, const char *tag)
{
    size_t len;
    char *text = read_whole_file(file, &len);
    cr_assert(text, "cannot read %s", file);
    char *found = NULL;
    for (char *line = strtok(text, "\n"); line && line[0] == '#'; line = strtok(NULL, "\n"))
        if (!strncmp(line, tag, strlen(tag)))
            found = xstrdup(line + strlen(tag));
    free(text);
    return found;
}

static void expect_refused_by(const char *stage, const char *stage_args, const char *file)
{
    char *expect = header_value(file, "# expect: "), *args = header_value(file, "# args: ");
    cr_assert(expect, "%s has no '# expect:' line", file);
    char *bin = test_build_path(stage), *configs = test_path("configs");
    char *cmd = xasprintf("SELFSUP_CONFIGS='%s' '%s' -c '%s' %s %s", configs, bin, file, stage_args, args ? args : "");
    char *out = NULL;
    int rc = test_run(cmd, &out);
    cr_expect_eq(rc, 2, "%s on %s: exit %d: %s", stage, file, rc, out);
    cr_expect(strstr(out, expect), "%s on %s:\n  expected: %s\n  got:      %s", stage, file, expect, out);
    cr_expect(!strstr(out, "Sanitizer"), "%s", out);
    free(out), free(cmd), free(bin), free(configs), free(expect), free(args);
}

Test(config_values, every_stage_refuses_unusable_values_at_its_start, .timeout = 300)
{
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        char *rel = xasprintf("tests/configs/bad/%s", cases[c]), *file = test_path(rel);
        for (size_t s = 0; s < ARRAY_LEN(stages); s++)
            expect_refused_by(stages[s].bin, stages[s].args, file);
        free(rel), free(file);
    }
}

/* The bounds themselves are allowed: 62 workers, depth 2, a heartbeat timeout of 1 s, a
 * 8192-pixel crop, a share of 0. */
Test(config_values, the_limits_themselves_are_accepted)
{
    char *bin = test_build_path("selfsup"), *configs = test_path("configs");
    char *base = test_path("tests/configs/bad/65_ring_depth_negative.yaml"); /* valid without its override */
    /* DEVICE=cpu, one trainer: validate checks the trainer's device and world as the run would
     * (defaults.yaml says gpu and 8 processes). */
    char *cmd =
        xasprintf("'%s' config validate '%s' --configs '%s' config.MACHINE.DEVICE=cpu "
                  "config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "
                  "config.DATA.NUM_DATALOADER_WORKERS=62 "
                  "config.SELFSUP.RING.DEPTH=2 config.SELFSUP.RING.SLOT_BYTES=0 "
                  "config.SELFSUP.CONTROL.HEARTBEAT_TIMEOUT_S=1 config.SELFSUP.MAX_INVALID_IMAGES_SHARE=0 "
                  "'config.DATA.TRAIN.TRANSFORMS=[{name: RandomResizedCrop, size: 8192}, "
                  "{name: CenterCrop, size: [1, 8192]}]'",
                  bin, base, configs);
    char *out = NULL;
    cr_expect_eq(test_run(cmd, &out), 0, "%s", out);
    free(out), free(cmd);
    cmd = xasprintf("'%s' config validate '%s' --configs '%s' config.DATA.NUM_DATALOADER_WORKERS=63", bin, base,
                    configs);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "NUM_DATALOADER_WORKERS"), "%s", out);
    free(out), free(cmd), free(bin), free(configs), free(base);
}
