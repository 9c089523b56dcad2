/*
 * test_config_cli.c — `selfsup config` end to end, through the real binary.
 *
 *  - the bad-config corpus (tests/configs/bad/): every file must be refused with exit code
 *    2 and the error text its "# expect:" line gives ("# args:" adds overrides);
 *  - every config selfsup ships composes;
 *  - the acceptance command prints the LR schedule auto-scaled as VISSL does.
 */
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Run `selfsup ARGS` from the source tree; returns the exit status. */
static int selfsup(const char *args, char **output)
{
    char *bin = test_build_path("selfsup");
    char *configs = test_path("configs");
    char *cmd = xasprintf("'%s' %s --configs '%s'", bin, args, configs);
    int rc = test_run(cmd, output);
    free(cmd);
    free(bin);
    free(configs);
    return rc;
}

Test(config_cli, bad_config_corpus_is_refused_with_exit_2_and_its_message)
{
    char *pattern = test_path("tests/configs/bad/*.yaml");
    glob_t g;
    cr_assert_eq(glob(pattern, 0, NULL, &g), 0, "no corpus at %s", pattern);
    cr_assert_geq(g.gl_pathc, 30, "the corpus has only %zu configs", g.gl_pathc);
    for (size_t k = 0; k < g.gl_pathc; k++) {
        const char *file = g.gl_pathv[k];
        char *expect = header_value(file, "# expect: ");
        char *args = header_value(file, "# args: ");
        cr_assert(expect, "%s has no '# expect:' line", file);
        char *cmdline = xasprintf("config validate '%s' %s", file, args ? args : "");
        char *out;
        int rc = selfsup(cmdline, &out);
        cr_expect_eq(rc, 2, "%s: exit %d, output: %s", file, rc, out);
        cr_expect(strstr(out, expect), "%s:\n  expected: %s\n  got:      %s", file, expect, out);
        cr_expect(!strstr(out, "Sanitizer"), "%s: %s", file, out);
        free(out);
        free(cmdline);
        free(expect);
        free(args);
    }
    globfree(&g);
    free(pattern);
}

Test(config_cli, every_shipped_config_composes)
{
    char *configs = test_path("configs");
    char *cmd = xasprintf("find '%s' -name '*.yaml' ! -name defaults.yaml ! -path '*/transforms/*' | sort", configs);
    char *list;
    cr_assert_eq(test_run(cmd, &list), 0);
    size_t count = 0;
    for (char *file = strtok(list, "\n"); file; file = strtok(NULL, "\n")) {
        char *args = xasprintf("config show '%s'", file);
        char *out;
        int rc = selfsup(args, &out);
        cr_expect_eq(rc, 0, "%s does not compose: %s", file, out);
        free(out);
        free(args);
        count++;
    }
    cr_assert_geq(count, 20, "only %zu configs found under %s", count, configs);
    free(list);
    free(cmd);
    free(configs);
}

/* The acceptance command of the foundation issue: SimCLR's 8-node recipe on one process.
 * Batch 64 x 1 with base 0.3 per 256 gives 0.075; on one node VISSL drops the linear
 * warm-up and the cosine (4.8 -> 0) becomes the schedule: 0.075 -> 0. */
Test(config_cli, simclr_8node_on_one_process_auto_scales_like_vissl)
{
    char *out;
    int rc = selfsup("config show pretrain/simclr/simclr_8node_resnet config.DISTRIBUTED.NUM_NODES=1 "
                     "config.DISTRIBUTED.NUM_PROC_PER_NODE=1 --key config.OPTIMIZER.param_schedulers.lr", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "\nname: cosine\n"), "%s", out);
    cr_assert(strstr(out, "\nstart_value: 0.075\n"), "%s", out);
    cr_assert(strstr(out, "\nend_value: 0.0\n"), "%s", out);
    free(out);

    rc = selfsup("config lr pretrain/simclr/simclr_8node_resnet config.DISTRIBUTED.NUM_NODES=1 "
                 "config.DISTRIBUTED.NUM_PROC_PER_NODE=1 config.OPTIMIZER.num_epochs=2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    /* epoch 1 of 2 is where = 0.5: 0.5 * 0.075 * (1 + cos(pi / 2)) = 0.0375 */
    cr_assert(strstr(out, "0.0375"), "%s", out);
    free(out);
}

Test(config_cli, unknown_key_exits_2_with_did_you_mean)
{
    char *out;
    int rc = selfsup("config show pretrain/simclr/simclr_8node_resnet config.OPTIMIZER.num_epoch=5", &out);
    cr_assert_eq(rc, 2);
    cr_assert(strstr(out, "did you mean 'config.OPTIMIZER.num_epochs'?"), "%s", out);
    free(out);
}
