/*
 * test_slurm.c — selfsup under Slurm (orchestrator/slurm.h, `selfsup slurm`, `--role auto`).
 *
 * Host lists expand as Slurm's own `scontrol show hostnames` does: a table of its answers
 * (Slurm 22.05, Debian 12), and random lists checked against scontrol itself. The job's
 * variables give the node rank and the trainer host. `selfsup slurm --dry-run` writes the
 * #SBATCH lines of the config's SLURM keys and refuses what cannot go into a script.
 *
 * And a real Slurm: munged, slurmctld and three slurmd on this machine (nodes 127.0.0.1-3,
 * all loopback addresses of this host), which the test starts and stops, with a partition
 * `train` of node 1 and a partition `farm` of nodes 2-3. `selfsup slurm --farm-nodes 2
 * --farm-partition farm` submits a SimCLR run as a heterogeneous job whose node 0 trains and
 * nodes 1-2 are its decode farm (no homogeneous job could span both partitions); the batches
 * its trainer sees are byte-identical to a one-machine run's. Starting slurmctld and slurmd
 * takes root: as another user that test is skipped, and says so.
 */
#include "slurm.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Expand, asserting it works; the names joined by blanks. */
static char *expanded(const char *list)
{
    host_list l;
    char *err = NULL;
    cr_assert_eq(slurm_expand_hostlist(list, &l, &err), 0, "%s: %s", list, err);
    strbuf sb = {0};
    for (size_t i = 0; i < l.n; i++)
        sb_printf(&sb, "%s%s", i ? " " : "", l.names[i]);
    host_list_free(&l);
    return sb.s ? sb.s : xstrdup("");
}

Test(slurm, host_lists_expand_as_scontrol_show_hostnames_does)
{
    /* `scontrol show hostnames LIST`, Slurm 22.05.8 */
    static const char *const cases[][2] = {
        {"tux[0-3]", "tux0 tux1 tux2 tux3"},
        {"a[01-10]", "a01 a02 a03 a04 a05 a06 a07 a08 a09 a10"},
        {"a[1-010]", "a1 a2 a3 a4 a5 a6 a7 a8 a9 a10"},
        {"a[8-12]", "a8 a9 a10 a11 a12"},
        {"a[099-101]", "a099 a100 a101"},
        {"a[00-2]", "a00 a01 a02"},
        {"a[7-007]", "a7"},
        {"a[0-0]", "a0"},
        {"node1,node[3-4]", "node1 node3 node4"},
        {"a[1-3,2]", "a1 a2 a3 a2"},
        {"a[1-2],a1", "a1 a2 a1"},
        {"n[1-2],m[5]", "n1 n2 m5"},
        {"127.0.0.[1-3]", "127.0.0.1 127.0.0.2 127.0.0.3"},
        {"rack[1-2]-node[08-09]", "rack1-node08 rack1-node09 rack2-node08 rack2-node09"},
        {"a[1-2][3-4]", "a13 a14 a23 a24"},
        {"[1-2]", "1 2"},
        {"a-[1-2]", "a-1 a-2"},
        {"a b", "a b"},
        {"a[1-2] b", "a1 a2 b"},
        {",a", "a"},
        {"a,,b", "a b"},
        {"a[12345678901-12345678902]", "a12345678901 a12345678902"},
        {"gpu-node", "gpu-node"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *got = expanded(cases[i][0]);
        cr_expect_str_eq(got, cases[i][1], "%s", cases[i][0]);
        free(got);
    }
}

Test(slurm, malformed_host_lists_are_refused_naming_the_fault)
{
    static const char *const cases[][2] = {
        {"b[2-1]", "range 2-1 goes down"},
        {"a[]", "is not a number"},
        {"a[x]", "'x' is not a number"},
        {"a[1-2", "'[' without ']'"},
        {"a]", "']' without '['"},
        {"a[1[2]]", "'[' inside brackets"},
        {"x[1,3-4]y", "text after the last ']'"},
        {"a[1-2]-b", "text after the last ']'"},
        {"r[1-2]n[1-2]x[1-2]", "more than 2 bracket groups"},
        {"a[1 -2]", "a blank inside brackets"},
        {"a[0-99999]", "more than 65536 hosts"},
        {"a[0-300]b[0-300]", "more than 65536 hosts"},
        {"a[1234567890123456789]", "not a number of 1 to 18 digits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        host_list l;
        char *err = NULL;
        cr_expect_eq(slurm_expand_hostlist(cases[i][0], &l, &err), -1, "%s was taken", cases[i][0]);
        cr_expect(err && strstr(err, cases[i][1]), "%s: '%s' does not say '%s'", cases[i][0], err, cases[i][1]);
        cr_expect_eq(l.n, 0);
        free(err);
    }
}

Test(slurm, the_job_variables_give_the_rank_and_the_nodes)
{
    slurm_job job;
    char *err = NULL;
    unsetenv("SLURM_JOB_ID"), unsetenv("SLURM_JOBID"), unsetenv("SLURM_JOB_NODELIST"), unsetenv("SLURM_NODELIST");
    cr_assert_eq(slurm_job_read(&job, &err), 0, "outside a job");
    setenv("SLURM_JOBID", "77", 1); /* the older names */
    setenv("SLURM_NODELIST", "gpu[07-09]", 1);
    setenv("SLURM_NODEID", "2", 1);
    cr_assert_eq(slurm_job_read(&job, &err), 1, "%s", err);
    cr_expect_str_eq(job.job_id, "77");
    cr_expect_eq(job.node_rank, 2);
    cr_assert_eq(job.nodes.n, 3);
    cr_expect_str_eq(job.nodes.names[0], "gpu07");
    slurm_job_free(&job);
    setenv("SLURM_NODEID", "3", 1);
    cr_assert_eq(slurm_job_read(&job, &err), -1);
    cr_expect(strstr(err, "SLURM_NODEID=3 is not the index of a node"), "%s", err);
    free(err), err = NULL;
    setenv("SLURM_NODEID", "1", 1);
    setenv("SLURMD_NODENAME", "gpu09", 1);
    cr_assert_eq(slurm_job_read(&job, &err), -1);
    cr_expect(strstr(err, "SLURM_NODEID=1 is node gpu08 of the job's nodes, but this is gpu09 (SLURMD_NODENAME)"),
              "%s", err);
    free(err), err = NULL;
    unsetenv("SLURMD_NODENAME");
}

/* A heterogeneous job's step over both components (as Slurm 22.05 sets it, seen in a job of
 * components 127.0.0.1 and 127.0.0.[2-3]): SLURM_NODEID counts the first component's nodes
 * first, whatever order SLURM_JOB_NODELIST has. */
Test(slurm, a_heterogeneous_jobs_nodes_are_its_components_in_order)
{
    slurm_job job;
    char *err = NULL;
    setenv("SLURM_JOB_ID", "9", 1);
    setenv("SLURM_JOB_NODELIST", "cpu1,gpu[1-2]", 1);
    setenv("SLURM_HET_SIZE", "2", 1);
    setenv("SLURM_JOB_NODELIST_HET_GROUP_0", "gpu[1-2]", 1);
    setenv("SLURM_JOB_NODELIST_HET_GROUP_1", "cpu1", 1);
    setenv("SLURM_NODEID", "2", 1);
    setenv("SLURMD_NODENAME", "cpu1", 1);
    cr_assert_eq(slurm_job_read(&job, &err), 1, "%s", err);
    cr_assert_eq(job.nodes.n, 3);
    cr_expect_str_eq(job.nodes.names[0], "gpu1");
    cr_expect_str_eq(job.nodes.names[2], "cpu1");
    cr_expect_eq(job.first_component_nodes, 2);
    cr_expect_eq(job.node_rank, 2);
    slurm_job_free(&job);
    setenv("SLURMD_NODENAME", "gpu1", 1);
    cr_assert_eq(slurm_job_read(&job, &err), -1);
    cr_expect(strstr(err, "SLURM_NODEID=2 is node cpu1 of the job's nodes, but this is gpu1"), "%s", err);
    free(err), err = NULL;
    unsetenv("SLURM_JOB_NODELIST_HET_GROUP_1");
    cr_assert_eq(slurm_job_read(&job, &err), -1);
    cr_expect(strstr(err, "SLURM_HET_SIZE=2 but SLURM_JOB_NODELIST_HET_GROUP_1 is not set"), "%s", err);
    free(err);
    unsetenv("SLURM_HET_SIZE"), unsetenv("SLURM_JOB_NODELIST_HET_GROUP_0"), unsetenv("SLURMD_NODENAME");
}

/* ---- selfsup slurm --dry-run ------------------------------------------------------------------ */

static char *g_dir;

static void dry_setup(void)
{
    g_dir = test_make_tmpdir();
    char *selfsup = test_build_path("selfsup"), *out = NULL;
    char *cmd = xasprintf("%s dataset fashion-mnist %s/fm --limit 64 && cd %s && %s keygen keys --clients 'h:farm.*'",
                          selfsup, g_dir, g_dir, selfsup);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    free(out), free(cmd), free(selfsup);
}

static void dry_teardown(void)
{
    test_rm_rf(g_dir);
    free(g_dir);
}

/* `cd g_dir && selfsup slurm quickstart/simclr ARGS --dry-run` (data of g_dir); its exit status. */
static int slurm_dry(const char *args, char **out)
{
    char *selfsup = test_build_path("selfsup");
    char *cmd = xasprintf("cd %s && %s slurm quickstart/simclr --dry-run config.SLURM.LOG_FOLDER=%s/logs "
                          "'config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy]' %s",
                          g_dir, selfsup, g_dir, g_dir, args);
    int rc = test_run(cmd, out);
    free(cmd), free(selfsup);
    return rc;
}

static void expect_line(const char *script, const char *line)
{
    char *want = xasprintf("\n%s\n", line);
    cr_expect(strstr(script, want), "no line '%s' in:\n%s", line, script);
    free(want);
}

Test(slurm, the_script_has_the_sbatch_lines_of_the_slurm_keys, .init = dry_setup, .fini = dry_teardown)
{
    char *out = NULL;
    int rc = slurm_dry("--partition learnfair --nodes 1 --time 3:05 config.SLURM.NAME=swav_800ep "
                       "config.SLURM.CONSTRAINT=volta32gb config.SLURM.MEM_GB=200 config.SLURM.NUM_CPU_PER_PROC=10 "
                       "config.MACHINE.DEVICE=gpu config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "
                       "'config.SLURM.ADDITIONAL_PARAMETERS={mail_type: END, exclusive: true}'",
                       &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strncmp(out, "#!/bin/bash\n", 12) == 0, "%s", out);
    expect_line(out, "#SBATCH --job-name=\"swav_800ep\"");
    expect_line(out, "#SBATCH --comment=\"vissl job\"");
    expect_line(out, "#SBATCH --partition=\"learnfair\"");
    expect_line(out, "#SBATCH --constraint=\"volta32gb\"");
    expect_line(out, "#SBATCH --nodes=1");
    expect_line(out, "#SBATCH --ntasks-per-node=1");
    expect_line(out, "#SBATCH --cpus-per-task=10");
    expect_line(out, "#SBATCH --gpus-per-node=1");
    expect_line(out, "#SBATCH --mem=200G");
    expect_line(out, "#SBATCH --time=3:05:00");
    expect_line(out, "#SBATCH --signal=TERM@120");
    expect_line(out, "#SBATCH --mail-type=\"END\"");
    expect_line(out, "#SBATCH --exclusive=\"true\"");
    char *output = xasprintf("#SBATCH --output=\"%s/logs/slurm-%%j.out\"", g_dir);
    expect_line(out, output);
    /* every node runs the same command line, the config file by its absolute path */
    cr_expect(strstr(out, "--role auto --run-dir \"$SELFSUP_JOB_DIR/node$SLURM_NODEID\""), "%s", out);
    cr_expect(strstr(out, "\nargs=('/") && strstr(out, "/configs/quickstart/simclr.yaml' "), "%s", out);
    cr_expect(strstr(out, " 'config.SLURM.PARTITION='\\''learnfair'\\''' "), "%s", out);
    cr_expect(strstr(out, "'config.SLURM.NAME=swav_800ep'"), "%s", out);
    free(output), free(out);
    /* the CPU quickstart asks for no GPU */
    cr_assert_eq(slurm_dry("", &out), 0, "%s", out);
    cr_expect_null(strstr(out, "--gpus-per-node"), "%s", out);
    cr_expect_null(strstr(out, "--partition"), "no partition: sbatch's default\n%s", out);
    free(out);
}

/* Two trainer nodes of one trainer, each a batch its share of the test's images holds. */
#define TWO_NODES "--nodes 2 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 config.DATA.TRAIN.BATCHSIZE_PER_REPLICA=16 "

Test(slurm, what_cannot_go_into_the_script_or_run_on_the_nodes_is_refused, .init = dry_setup, .fini = dry_teardown)
{
    static const char *const cases[][2] = {
        {"'config.SLURM.NAME=\"a\\nb\"'", "config.SLURM.NAME: a double quote, backslash or line break"},
        {"config.SLURM.TIME_HOURS=0", "the time limit must be positive"},
        {"config.SLURM.TIME_MINUTES=75", "config.SLURM.TIME_MINUTES: must be 0 to 59"},
        {"--time 1:75", "--time 1:75: expected H or H:MM"},
        {"'config.SLURM.ADDITIONAL_PARAMETERS={\"a b\": 1}'", "not an sbatch option name"},
        {"--farm-nodes 2", "config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR"},
        {"--farm-nodes 2 config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=keys", "config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE"},
        {"--farm-nodes -1", "config.SELFSUP.FARM.NODES: must be 0 (no farm) to 4096 nodes"},
        {TWO_NODES, "node 0 of 2: config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR"},
        {TWO_NODES "config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=keys", "node 1 of 2: config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE"},
        {TWO_NODES "config.DISTRIBUTED.INIT_METHOD=env", "config.DISTRIBUTED.INIT_METHOD"},
        {"--bogus 1", "unknown option '--bogus'"},
        {"--partition", "--partition needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out = NULL;
        int rc = slurm_dry(cases[i][0], &out);
        cr_expect_eq(rc, 2, "%s: exit %d:\n%s", cases[i][0], rc, out);
        cr_expect(strstr(out, cases[i][1]), "%s does not say '%s':\n%s", cases[i][0], cases[i][1], out);
        cr_expect_null(strstr(out, "#!/bin/bash"), "%s: a script was written:\n%s", cases[i][0], out);
        free(out);
    }
    /* two trainer nodes with their keys: RUN_ID auto is --role auto's to set in the job */
    char *out = NULL;
    int rc = slurm_dry(TWO_NODES "config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=keys "
                                 "config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=keys/node.key",
                       &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "#SBATCH --nodes=2"), "%s", out);
    free(out);
}

#define FARM_KEYS                                                                                                  \
    "config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=keys config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=keys/h.key "             \
    "config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "

/* The text between `from` and `to` in s (to the end when `to` is missing), a copy. */
static char *between(const char *s, const char *from, const char *to)
{
    const char *a = strstr(s, from);
    cr_assert(a, "no '%s' in:\n%s", from, s);
    const char *b = strstr(a, to);
    return xstrndup(a, b ? (size_t)(b - a) : strlen(a));
}

/* With farm nodes, a heterogeneous job: the trainer node with SLURM's keys and its GPUs, then
 * the farm nodes with SELFSUP.FARM.SLURM's, SLURM's where those are unset, and no GPU; one
 * step over both. HETJOB False: one component, every node the trainer's resources. */
Test(slurm, farm_nodes_are_a_component_of_the_job_of_their_own, .init = dry_setup, .fini = dry_teardown)
{
    char *out = NULL;
    cr_assert_eq(slurm_dry("--farm-nodes 2 --partition gpus --farm-partition cpus " FARM_KEYS
                           "config.MACHINE.DEVICE=gpu config.SLURM.CONSTRAINT=volta32gb config.SLURM.MEM_GB=200 "
                           "config.SLURM.NUM_CPU_PER_PROC=10 config.SELFSUP.FARM.SLURM.CPUS_PER_NODE=64 "
                           "config.SELFSUP.FARM.SLURM.CONSTRAINT=avx512",
                           &out),
                 0, "%s", out);
    cr_expect(strstr(out, "Node 0 trains; nodes 1-2 are its decode farm (SELFSUP.FARM), a component"), "%s", out);
    char *trainer = between(out, "#SBATCH --partition=\"gpus\"", "#SBATCH hetjob\n"),
         *farm = between(out, "#SBATCH hetjob\n", "\nset -eu");
    static const char *const trainer_lines[] = {"--constraint=\"volta32gb\"", "--nodes=1", "--ntasks-per-node=1",
                                                "--cpus-per-task=10", "--gpus-per-node=1", "--mem=200G",
                                                "--signal=TERM@120"};
    for (size_t i = 0; i < ARRAY_LEN(trainer_lines); i++)
        cr_expect(strstr(trainer, trainer_lines[i]), "the trainer's component lacks %s:\n%s", trainer_lines[i], out);
    static const char *const farm_lines[] = {"--partition=\"cpus\"", "--constraint=\"avx512\"", "--nodes=2",
                                             "--ntasks-per-node=1", "--cpus-per-task=64", "--mem=200G",
                                             "--time=72:00:00"};
    for (size_t i = 0; i < ARRAY_LEN(farm_lines); i++)
        cr_expect(strstr(farm, farm_lines[i]), "the farm's component lacks %s:\n%s", farm_lines[i], out);
    cr_expect_null(strstr(farm, "gpus-per-node"), "a farm node asks for a GPU:\n%s", out);
    cr_expect(strstr(out, "exec srun --het-group=0,1 --ntasks-per-node=1"), "%s", out);
    free(trainer), free(farm), free(out);
    /* unset, the farm's keys are the trainer's; its memory too */
    cr_assert_eq(slurm_dry("--farm-nodes 2 --partition gpus " FARM_KEYS "config.SLURM.NUM_CPU_PER_PROC=3", &out), 0,
                 "%s", out);
    farm = between(out, "#SBATCH hetjob\n", "\nset -eu");
    cr_expect(strstr(farm, "--partition=\"gpus\"") && strstr(farm, "--cpus-per-task=3") && !strstr(farm, "constraint"),
              "%s", out);
    free(farm), free(out);
    /* HETJOB False: one component of three nodes */
    cr_assert_eq(slurm_dry("--farm-nodes 2 " FARM_KEYS "config.SELFSUP.FARM.SLURM.HETJOB=false", &out), 0, "%s", out);
    expect_line(out, "#SBATCH --nodes=3");
    cr_expect_null(strstr(out, "hetjob"), "%s", out);
    cr_expect_null(strstr(out, "--het-group"), "%s", out);
    free(out);
    cr_expect_eq(slurm_dry("--farm-nodes 2 " FARM_KEYS "config.SELFSUP.FARM.SLURM.CPUS_PER_NODE=-1", &out), 2, "%s", out);
    cr_expect(strstr(out, "config.SELFSUP.FARM.SLURM.CPUS_PER_NODE: must be 0"), "%s", out);
    free(out);
    cr_expect_eq(slurm_dry("--farm-nodes 2 " FARM_KEYS "'config.SELFSUP.FARM.SLURM.PARTITION=\"a\nb\"'", &out), 2, "%s",
                 out);
    cr_expect(strstr(out, "config.SELFSUP.FARM.SLURM.PARTITION: a double quote"), "%s", out);
    free(out);
}

Test(slurm, role_auto_takes_its_part_from_the_job, .init = dry_setup, .fini = dry_teardown)
{
    /* a job of 2 nodes for 1 trainer + 2 farm hosts: refused before anything starts */
    char *selfsup = test_build_path("selfsup"), *out = NULL;
    char *cmd = xasprintf("cd %s && SLURM_JOB_ID=5 SLURM_JOB_NODELIST='n[1-2]' SLURM_NODEID=1 %s run quickstart/simclr "
                          "--role auto --run-dir run config.SELFSUP.FARM.NODES=2 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "
                          "'config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy]'",
                          g_dir, selfsup, g_dir);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "Slurm job 5 has 2 nodes, but DISTRIBUTED.NUM_NODES + SELFSUP.FARM.NODES = 3"), "%s", out);
    free(out), free(cmd);
    cmd = xasprintf("cd %s && SLURM_JOB_ID=5 SLURM_JOB_NODELIST='n[1-2' %s run quickstart/simclr --role auto "
                    "'config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy]'",
                    g_dir, selfsup, g_dir);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "--role auto: 'n[1-2': '[' without ']'"), "%s", out);
    free(out), free(cmd);
    /* a heterogeneous job whose first component is not the trainer nodes */
    cmd = xasprintf("cd %s && SLURM_JOB_ID=5 SLURM_JOB_NODELIST='n[1-3]' SLURM_HET_SIZE=2 "
                    "SLURM_JOB_NODELIST_HET_GROUP_0='n[1-2]' SLURM_JOB_NODELIST_HET_GROUP_1=n3 SLURM_NODEID=2 %s run "
                    "quickstart/simclr --role auto --run-dir run config.SELFSUP.FARM.NODES=2 "
                    "config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "
                    "'config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy]'",
                    g_dir, selfsup, g_dir);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "heterogeneous Slurm job 5 has 2 nodes in its first component (the trainer nodes), but "
                          "DISTRIBUTED.NUM_NODES = 1"),
              "%s", out);
    free(out), free(cmd);
    /* trainers on 2 nodes: node 1 is SLURM_NODEID's, and RUN_ID auto the first node at SLURM.PORT_ID (node 1
     * then lacks its client key: refused before anything starts) */
    cmd = xasprintf("cd %s && SLURM_JOB_ID=6 SLURM_JOB_NODELIST='n[1-2]' SLURM_NODEID=1 %s run quickstart/simclr "
                    "--role auto --run-dir run config.DISTRIBUTED.NUM_NODES=2 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "
                    "config.SLURM.PORT_ID=40123 'config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy]'",
                    g_dir, selfsup, g_dir);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "the trainers of Slurm job 6 meet at n1:40123 (DISTRIBUTED.RUN_ID)"), "%s", out);
    cr_expect(strstr(out, "node 1 of 2: config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE"), "%s", out);
    free(out), free(cmd);
    /* 2 trainer nodes and a farm node: the farm host feeds both (it then lacks its key) */
    cmd = xasprintf("cd %s && SLURM_JOB_ID=7 SLURM_JOB_NODELIST='n[1-3]' SLURM_NODEID=2 %s run quickstart/simclr "
                    "--role auto --run-dir run config.DISTRIBUTED.NUM_NODES=2 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 "
                    "config.SELFSUP.FARM.NODES=1 'config.DATA.TRAIN.DATA_PATHS=[%s/fm/disk_filelist/train_images.npy]'",
                    g_dir, selfsup, g_dir);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "node n3 of Slurm job 7 is farm host 0; the trainer nodes are n1,n2"), "%s", out);
    cr_expect(strstr(out, "config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE"), "%s", out);
    free(out), free(cmd), free(selfsup);
}

/* ---- a real Slurm -------------------------------------------------------------------------------- */

typedef struct {
    char *dir, *conf;
} cluster;

static void run_ok(const char *cmd)
{
    char *out = NULL;
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 0, "`%s` exited %d:\n%s", cmd, rc, out);
    free(out);
}

static void write_slurm_conf(cluster *c)
{
    char host[256];
    cr_assert_eq(gethostname(host, sizeof host), 0);
    host[strcspn(host, ".")] = '\0';
    c->conf = xasprintf("%s/slurm.conf", c->dir);
    FILE *f = fopen(c->conf, "w");
    cr_assert(f);
    fprintf(f,
            "ClusterName=selfsup\nSlurmctldHost=%s\nSlurmctldPort=%d\nSlurmdPort=%d\n"
            "AuthType=auth/munge\nAuthInfo=socket=%s/munge.sock\nSlurmUser=root\nSlurmdUser=root\n"
            "StateSaveLocation=%s/state\nSlurmdSpoolDir=%s/spool/%%n\nSlurmctldPidFile=%s/slurmctld.pid\n"
            "SlurmdPidFile=%s/slurmd-%%n.pid\nSlurmctldLogFile=%s/slurmctld.log\nSlurmdLogFile=%s/slurmd-%%n.log\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
            "SchedulerType=sched/backfill\nSchedulerParameters=bf_interval=1\nSelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\n"
            "ReturnToService=2\nMpiDefault=none\nKillWait=5\n",
            host, test_free_port(), test_free_port(), c->dir, c->dir, c->dir, c->dir, c->dir, c->dir, c->dir);
    for (int n = 1; n <= 3; n++) /* three nodes, each a loopback address of this host */
        fprintf(f, "NodeName=127.0.0.%d NodeHostname=%s Port=%d CPUs=%ld RealMemory=1000 State=UNKNOWN\n", n, host,
                test_free_port(), sysconf(_SC_NPROCESSORS_ONLN));
    /* the trainer node's partition and the farm's: only a heterogeneous job spans both */
    fputs("PartitionName=train Nodes=127.0.0.1 Default=YES MaxTime=INFINITE State=UP\n"
          "PartitionName=farm Nodes=127.0.0.[2-3] MaxTime=INFINITE State=UP\n",
          f);
    fclose(f);
}

/* munged, slurmctld and three slurmd, each daemonized with its pid file in c->dir. */
static void start_cluster(cluster *c)
{
    c->dir = test_make_tmpdir();
    write_slurm_conf(c);
    setenv("SLURM_CONF", c->conf, 1);
    char *cmd = xasprintf("cd %s && mkdir state spool && head -c 1024 /dev/urandom > munge.key && chmod 600 munge.key && "
                          "munged --force --socket=%s/munge.sock --key-file=munge.key --log-file=%s/munged.log "
                          "--pid-file=%s/munged.pid --seed-file=%s/munged.seed && slurmctld && "
                          "for n in 1 2 3; do slurmd -N 127.0.0.$n || exit 1; done",
                          c->dir, c->dir, c->dir, c->dir, c->dir);
    run_ok(cmd);
    free(cmd);
    for (int waited = 0;; waited++) { /* until the three nodes are idle */
        char *out = NULL;
        test_run("sinfo -h -N -o %T", &out);
        int idle = 0;
        for (char *p = out; p && (p = strstr(p, "idle")); p += 4)
            idle++;
        free(out);
        if (idle == 3)
            break;
        cr_assert(waited < 300, "the Slurm nodes never came up (see %s/*.log)", c->dir);
        usleep(100 * 1000);
    }
}

static void stop_cluster(cluster *c)
{
    if (!c->dir)
        return;
    /* the job's steps first (slurmstepd outlives slurmd), then the daemons */
    char *cmd = xasprintf("cd %s && scancel --user=$(id -un) 2>/dev/null; sleep 0.5; for f in slurmd-*.pid slurmctld.pid "
                          "munged.pid; do [ -f $f ] && kill $(cat $f) 2>/dev/null; done; sleep 0.5",
                          c->dir);
    system(cmd);
    free(cmd);
    test_rm_rf(c->dir);
    free(c->dir), free(c->conf);
    c->dir = c->conf = NULL;
}

/* Wait for Slurm job `id` to leave the queue. */
static void wait_for_job(const char *id, int timeout_s)
{
    char *cmd = xasprintf("squeue -h -j %s", id);
    for (int waited = 0;; waited++) {
        char *out = NULL;
        int rc = test_run(cmd, &out);
        bool gone = rc != 0 || !strstr(out, id);
        free(out);
        if (gone)
            break;
        cr_assert(waited < timeout_s * 10, "job %s still runs after %d s", id, timeout_s);
        usleep(100 * 1000);
    }
    free(cmd);
}

static void write_farm_config(const char *dir)
{
    char *path = xasprintf("%s/farm.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "# @package _global_\n"
            "config:\n"
            "  DISTRIBUTED: {NUM_NODES: 1, NUM_PROC_PER_NODE: 1}\n"
            "  TEST_MODEL: False\n"
            "  OPTIMIZER: {num_epochs: 2, param_schedulers: {lr: {name: constant, value: 0.1}}}\n"
            "  SLURM: {LOG_FOLDER: %s/slurm, MEM_GB: 0, NUM_CPU_PER_PROC: 1, TIME_HOURS: 0, TIME_MINUTES: 5}\n"
            "  SELFSUP:\n"
            "    FARM: {DATA_PORT: %d, LEASE_PORT: %d, HOST_TIMEOUT_S: 5, WORKERS: 1}\n"
            "    TRANSPORT: {SERVER_KEYS_DIR: %s/keys, CLIENT_KEY_FILE: %s/keys/h.key}\n"
            "  DATA:\n"
            "    NUM_DATALOADER_WORKERS: 1\n"
            "    TRAIN:\n"
            "      DATA_SOURCES: [disk_folder]\n"
            "      LABEL_SOURCES: [disk_folder]\n"
            "      DATASET_NAMES: [fashion_mnist_folder]\n"
            "      DATA_PATHS: [\"%s/fm/disk_folder/train\"]\n"
            "      LABEL_PATHS: [\"%s/fm/disk_folder/train\"]\n"
            "      BATCHSIZE_PER_REPLICA: 16\n"
            "      COLLATE_FUNCTION: simclr_collator\n"
            "      TRANSFORMS:\n"
            "        - {name: ImgReplicatePil, num_times: 2}\n"
            "        - {name: RandomResizedCrop, size: 32}\n"
            "        - {name: RandomHorizontalFlip}\n"
            "        - {name: ToTensor}\n"
            "  MACHINE: {DEVICE: cpu}\n"
            "  MODEL:\n"
            "    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}\n"
            "    HEAD: {PARAMS: [[mlp, {dims: [512, 16]}]]}\n"
            "  LOSS: {name: simclr_info_nce_loss, simclr_info_nce_loss: {buffer_params: {embedding_dim: 16}}}\n",
            dir, test_free_port(), test_free_port(), dir, dir, dir, dir);
    fclose(f);
    free(path);
}

static cluster g_cluster; /* stopped by the fini, which runs when an assertion ends the test too */

static void cluster_teardown(void)
{
    if (g_cluster.dir)
        stop_cluster(&g_cluster);
    dry_teardown();
}

Test(slurm, a_farm_job_on_a_real_slurm_gives_the_batches_of_one_machine, .init = dry_setup, .fini = cluster_teardown,
     .timeout = 240)
{
    if (geteuid() != 0)
        cr_skip_test("starting slurmctld and slurmd takes root");
    write_farm_config(g_dir);
    char *selfsup = test_build_path("selfsup");
    char *data = xasprintf("rm -rf %s/fm && %s dataset fashion-mnist %s/fm --limit 600", g_dir, selfsup, g_dir);
    run_ok(data);
    free(data);
    char *one = xasprintf("cd %s && %s run farm.yaml --run-dir one '+config.SELFSUP.STAGES.train=selfsup-sink --save "
                          "%s/one.rec'",
                          g_dir, selfsup, g_dir);
    run_ok(one);
    start_cluster(&g_cluster);
    char *submit = xasprintf("cd %s && %s slurm farm.yaml --farm-nodes 2 --farm-partition farm "
                             "'+config.SELFSUP.STAGES.train=selfsup-sink "
                             "--save %s/slurm.rec'",
                             g_dir, selfsup, g_dir),
         *out = NULL;
    int rc = test_run(submit, &out);
    cr_assert_eq(rc, 0, "%s", out);
    char job[32] = "";
    cr_assert_eq(sscanf(out, "submitted batch job %31s", job), 1, "%s", out);
    wait_for_job(job, 120);
    char *log = xasprintf("%s/slurm/slurm-%s.out", g_dir, job), *text = read_whole_file(log, NULL);
    cr_assert(text, "no job output %s", log);
    cr_expect(strstr(text, "node 127.0.0.1 of Slurm job") && strstr(text, "is trainer node 0"), "%s", text);
    cr_expect(strstr(text, "node 127.0.0.3 of Slurm job") && strstr(text, "is farm host 1"), "%s", text);
    char *cmp = xasprintf("cmp %s/one.rec %s/slurm.rec", g_dir, g_dir);
    cr_expect_eq(system(cmp), 0, "the Slurm job's batches differ from one machine's; its output:\n%s", text);
    /* its nodes' run directories are where the submission said, and selfsup status reads them */
    char *status = xasprintf("%s status %s/slurm/%s/node0", selfsup, g_dir, job), *st = NULL;
    cr_expect_eq(test_run(status, &st), 0, "%s", st);
    cr_expect(strstr(st, "finished after") && strstr(st, "\n  farm.0 ") && strstr(st, "\n  farm.1 "), "%s", st);
    free(st), free(status), free(cmp), free(text), free(log), free(out), free(submit), free(one), free(selfsup);
}

/* Random lists of the forms Slurm writes, checked against scontrol itself. */
Test(slurm, random_host_lists_expand_as_scontrol_does)
{
    if (system("command -v scontrol > /dev/null") != 0)
        cr_assert_fail("scontrol is missing (make test installs Debian's slurm-client)");
    char *dir = test_make_tmpdir(), *conf = xasprintf("%s/slurm.conf", dir);
    FILE *f = fopen(conf, "w");
    fputs("ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n", f);
    fclose(f);
    setenv("SLURM_CONF", conf, 1);
    srand(12345);
    static const char *const prefixes[] = {"n", "gpu-", "rack7-node", "a.b.", ""};
    for (int k = 0; k < 40; k++) {
        strbuf list = {0};
        int items = 1 + rand() % 3;
        for (int i = 0; i < items; i++) {
            sb_printf(&list, "%s%s", i ? "," : "", prefixes[rand() % 5]);
            int groups = rand() % 3;
            for (int g = 0; g < groups; g++) {
                sb_puts(&list, g ? "-x[" : "[");
                int spans = 1 + rand() % 3;
                for (int s = 0; s < spans; s++) {
                    int lo = rand() % 120, width = rand() % 4, n = rand() % 12;
                    sb_printf(&list, "%s%0*d", s ? "," : "", width, lo);
                    if (n)
                        sb_printf(&list, "-%d", lo + n);
                }
                sb_putc(&list, ']');
            }
            if (groups == 0)
                sb_printf(&list, "%d", rand() % 50);
        }
        char *cmd = xasprintf("scontrol show hostnames '%s' | tr '\\n' ' ' | sed 's/ $//'", sb_str(&list)), *want = NULL;
        cr_assert_eq(test_run(cmd, &want), 0, "%s", want);
        char *got = expanded(sb_str(&list));
        cr_expect_str_eq(got, want, "%s", sb_str(&list));
        free(got), free(want), free(cmd);
        sb_free(&list);
    }
    test_rm_rf(dir);
    free(dir), free(conf);
}
