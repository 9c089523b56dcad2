/*
 * slurm.h — what selfsup takes from Slurm, and what it gives it.
 *
 * Inside a job (srun, sbatch) the node list, this node's rank and the job id come from the
 * SLURM_* variables: SLURM_JOB_NODELIST (else SLURM_NODELIST) in Slurm's compressed form,
 * expanded as `scontrol show hostnames` does ("node[01-03,7],gpu1" → node01 node02 node03
 * node7 gpu1), SLURM_NODEID, SLURM_JOB_ID. `selfsup run --role auto` uses them to tell a
 * trainer node from a farm node and to find the trainer host (the job's first node).
 *
 * The other way, slurm_batch_script writes the sbatch script `selfsup slurm` submits, from
 * the config's SLURM keys (NAME, COMMENT, PARTITION, CONSTRAINT, TIME_HOURS/MINUTES, MEM_GB,
 * NUM_CPU_PER_PROC, LOG_FOLDER, ADDITIONAL_PARAMETERS) and DISTRIBUTED's node and process
 * counts: one task per node, each a `selfsup run --role auto` in a run directory of its own.
 * With farm nodes and SELFSUP.FARM.SLURM.HETJOB the job is heterogeneous: the trainer nodes
 * are its first component (SLURM's keys, the GPUs), the farm nodes its second (the keys of
 * SELFSUP.FARM.SLURM, no GPU), and one step runs over both.
 */
#ifndef SELFSUP_SLURM_H
#define SELFSUP_SLURM_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>

/* Slurm refuses ranges of more hosts than this (its MAX_RANGE); so do we, for a whole list. */
#define SLURM_MAX_HOSTS 65536

typedef struct {
    char **names;
    size_t n;
} host_list;

/* Expand a Slurm host list: names separated by commas or blanks, each a literal or a prefix
 * followed by up to two bracket groups of numbers and ranges ("rack[1-2]-n[08-09]", the
 * first group varying slowest; a number keeps the width of the range's lower bound, so
 * [08-10] gives 08 09 10). Duplicates are kept. 0, or -1 + *err naming what is wrong: an
 * unbalanced bracket, text after the last group, a range that is not lo-hi with lo <= hi,
 * more than SLURM_MAX_HOSTS hosts. */
int slurm_expand_hostlist(const char *expr, host_list *out, char **err);
void host_list_free(host_list *list);

typedef struct {
    const char *job_id;           /* SLURM_JOB_ID (or the older SLURM_JOBID) */
    int node_rank;                /* SLURM_NODEID */
    host_list nodes;              /* the job's nodes, in Slurm's order */
    size_t first_component_nodes; /* a heterogeneous job's first component's count; else 0 */
} slurm_job;

/* 1 inside a Slurm job (*job filled), 0 outside one, -1 + *err when its variables do not
 * parse (a node list that does not expand, a node id that is not one of its nodes, a node
 * id whose node is not this one, SLURMD_NODENAME). A heterogeneous job's nodes
 * (SLURM_HET_SIZE) are its components' lists, SLURM_JOB_NODELIST_HET_GROUP_0, _1, ..., one
 * after the other: the order of SLURM_NODEID in a step over all of them (srun
 * --het-group=0,1), where SLURM_JOB_NODELIST is the whole set in Slurm's own order. */
int slurm_job_read(slurm_job *job, char **err);
void slurm_job_free(slurm_job *job);

typedef struct {
    const char *selfsup;     /* the selfsup binary, absolute (the nodes share the file system) */
    const char *configs_dir; /* SELFSUP_CONFIGS for the job, absolute; NULL: none */
    char *const *run_args;   /* CONFIG and overrides, as `selfsup run` takes them */
    int n_run_args;
    const char *run_dir;     /* absolute; node N of job J runs in RUN_DIR/J/nodeN */
    const char *log_folder;  /* absolute: where Slurm writes the job's output */
    const char *work_dir;    /* absolute: where the job runs (relative paths of the config) */
    int farm_nodes;          /* after the trainer nodes */
} slurm_job_spec;

/* The sbatch script. NULL + *err naming the key whose value cannot go into it (a line
 * break, a double quote, a time limit of 0). */
char *slurm_batch_script(const cfg_node *config, const slurm_job_spec *spec, char **err);

#endif
