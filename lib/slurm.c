/*
 * slurm.c — Slurm's host lists, its job variables, and the batch script (see slurm.h).
 *
 * A host list is parsed in two steps: split into names at the separators outside brackets,
 * then each name into parts, literal text and bracket groups, which are expanded with the
 * first group varying slowest. Only two groups a name: with three, `scontrol show hostnames`
 * orders the names in a way of its own, and Slurm writes node lists of one group anyway
 * ("node[01-03,7]"); a name with more is refused rather than ordered differently.
 */
#include "slurm.h"

#include "util.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUPS 2
#define OPTION_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
#define MAX_DIGITS 18

/* ---- host lists ----------------------------------------------------------------------------- */

typedef struct {
    uint64_t lo, hi;
    int width; /* the lower bound's digits: numbers are zero-padded to it */
} span;

typedef struct {
    span *spans;
    size_t n;
    uint64_t count;
} group;

typedef struct {
    char *text[MAX_GROUPS + 1]; /* text[i] comes before group i; text[n_groups] is "" */
    group groups[MAX_GROUPS];
    int n_groups;
} name_parts;

static int parse_number(const char *s, size_t len, uint64_t *v, char **err)
{
    if (len == 0 || len > MAX_DIGITS)
        return report_failure(err, "'%.*s' is not a number of 1 to %d digits", (int)len, s, MAX_DIGITS);
    *v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return report_failure(err, "'%.*s' is not a number", (int)len, s);
        *v = *v * 10 + (uint64_t)(s[i] - '0');
    }
    return 0;
}

/* "lo-hi" or "n", the text between two commas of a bracket group. */
static int parse_span(const char *s, size_t len, span *out, char **err)
{
    const char *dash = memchr(s, '-', len);
    size_t lo_len = dash ? (size_t)(dash - s) : len;
    if (parse_number(s, lo_len, &out->lo, err) != 0)
        return -1;
    out->hi = out->lo;
    if (dash && parse_number(dash + 1, len - lo_len - 1, &out->hi, err) != 0)
        return -1;
    if (out->hi < out->lo)
        return report_failure(err, "range %.*s goes down", (int)len, s);
    if (out->hi - out->lo >= SLURM_MAX_HOSTS)
        return report_failure(err, "range %.*s has more than %d hosts", (int)len, s, SLURM_MAX_HOSTS);
    out->width = (int)lo_len;
    return 0;
}

/* The inside of "[...]": spans separated by commas. */
static int parse_group(const char *s, size_t len, group *g, char **err)
{
    const char *end = s + len;
    while (1) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *stop = comma ? comma : end;
        g->spans = xrealloc(g->spans, (g->n + 1) * sizeof *g->spans);
        if (parse_span(s, (size_t)(stop - s), &g->spans[g->n], err) != 0)
            return -1;
        g->count += g->spans[g->n].hi - g->spans[g->n].lo + 1;
        g->n++;
        if (!comma)
            return 0;
        s = comma + 1;
    }
}

static void free_parts(name_parts *p)
{
    for (int i = 0; i <= MAX_GROUPS; i++)
        free(p->text[i]);
    for (int i = 0; i < MAX_GROUPS; i++)
        free(p->groups[i].spans);
}

/* One name of the list ("rack[1-2]-n[08-09]") into its parts. */
static int parse_name(const char *s, size_t len, name_parts *p, char **err)
{
    const char *end = s + len;
    memset(p, 0, sizeof *p);
    while (1) {
        const char *open = memchr(s, '[', (size_t)(end - s));
        if (!open) {
            p->text[p->n_groups] = xstrndup(s, (size_t)(end - s));
            if (p->n_groups > 0 && s < end)
                return report_failure(err, "'%.*s': text after the last ']'", (int)len, end - len);
            return 0;
        }
        if (p->n_groups == MAX_GROUPS)
            return report_failure(err, "'%.*s': more than %d bracket groups", (int)len, end - len, MAX_GROUPS);
        const char *close = memchr(open, ']', (size_t)(end - open));
        if (!close)
            return report_failure(err, "'%.*s': '[' without ']'", (int)len, end - len);
        p->text[p->n_groups] = xstrndup(s, (size_t)(open - s));
        if (parse_group(open + 1, (size_t)(close - open - 1), &p->groups[p->n_groups], err) != 0)
            return -1;
        p->n_groups++;
        s = close + 1;
    }
}

static void push_name(host_list *out, const char *name)
{
    if ((out->n & (out->n - 1)) == 0) /* at 0, 1, 2, 4, …: doubled, not grown by one */
        out->names = xrealloc(out->names, (out->n ? 2 * out->n : 1) * sizeof *out->names);
    out->names[out->n++] = xstrdup(name);
}

/* Every name from group k on, after `prefix`. */
static void expand_from(const name_parts *p, int k, strbuf *prefix, host_list *out)
{
    size_t mark = prefix->len;
    sb_puts(prefix, p->text[k]);
    if (k == p->n_groups) {
        push_name(out, sb_str(prefix));
    } else {
        size_t base = prefix->len;
        for (size_t i = 0; i < p->groups[k].n; i++) {
            const span *sp = &p->groups[k].spans[i];
            for (uint64_t v = sp->lo; v <= sp->hi; v++) {
                prefix->len = base;
                if (prefix->s)
                    prefix->s[base] = '\0';
                sb_printf(prefix, "%0*" PRIu64, sp->width, v);
                expand_from(p, k + 1, prefix, out);
            }
        }
    }
    prefix->len = mark;
    if (prefix->s)
        prefix->s[mark] = '\0';
}

static int expand_name(const char *s, size_t len, host_list *out, char **err)
{
    name_parts p;
    int rc = parse_name(s, len, &p, err);
    uint64_t count = 1;
    for (int i = 0; rc == 0 && i < p.n_groups; i++)
        count *= p.groups[i].count;
    if (rc == 0 && out->n + count > SLURM_MAX_HOSTS)
        rc = report_failure(err, "more than %d hosts", SLURM_MAX_HOSTS);
    if (rc == 0) {
        strbuf prefix = {0};
        expand_from(&p, 0, &prefix, out);
        sb_free(&prefix);
    }
    free_parts(&p);
    return rc;
}

static bool is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }

int slurm_expand_hostlist(const char *expr, host_list *out, char **err)
{
    *out = (host_list){0};
    const char *start = expr;
    int depth = 0;
    for (const char *c = expr;; c++) {
        if (*c == '[' && depth++ > 0)
            return host_list_free(out), report_failure(err, "host list '%s': '[' inside brackets", expr);
        if (*c == ']' && depth-- == 0)
            return host_list_free(out), report_failure(err, "host list '%s': ']' without '['", expr);
        if ((*c == '\0' || (depth == 0 && is_separator(*c))) && c > start &&
            expand_name(start, (size_t)(c - start), out, err) != 0) {
            host_list_free(out);
            return -1;
        }
        if (*c == '\0')
            break;
        if (depth == 0 && is_separator(*c))
            start = c + 1;
        else if (depth > 0 && isspace((unsigned char)*c))
            return host_list_free(out), report_failure(err, "host list '%s': a blank inside brackets", expr);
    }
    if (depth > 0)
        return host_list_free(out), report_failure(err, "host list '%s': '[' without ']'", expr);
    return 0;
}

void host_list_free(host_list *list)
{
    for (size_t i = 0; i < list->n; i++)
        free(list->names[i]);
    free(list->names);
    *list = (host_list){0};
}

/* ---- the job's variables --------------------------------------------------------------------- */

/* A heterogeneous job's nodes, component after component (SLURM_JOB_NODELIST_HET_GROUP_i):
 * the order of SLURM_NODEID in a step over every component. The first component's count in
 * *first. 0 when the job is not heterogeneous, -1 + *err. */
static int het_job_nodes(host_list *nodes, size_t *first, char **err)
{
    const char *size = getenv("SLURM_HET_SIZE");
    long groups = size ? strtol(size, NULL, 10) : 0;
    if (groups < 2)
        return 0;
    for (long g = 0; g < groups; g++) {
        char name[64];
        snprintf(name, sizeof name, "SLURM_JOB_NODELIST_HET_GROUP_%ld", g);
        const char *list = getenv(name);
        host_list part;
        if (!list)
            return host_list_free(nodes), report_failure(err, "SLURM_HET_SIZE=%s but %s is not set", size, name);
        if (slurm_expand_hostlist(list, &part, err) != 0)
            return host_list_free(nodes), -1;
        for (size_t i = 0; i < part.n; i++)
            push_name(nodes, part.names[i]);
        *first = g == 0 ? part.n : *first;
        host_list_free(&part);
    }
    return 1;
}

/* The job's nodes: a heterogeneous job's components in order, else SLURM_JOB_NODELIST. */
static int job_nodes(slurm_job *job, const char *list, char **err)
{
    int het = het_job_nodes(&job->nodes, &job->first_component_nodes, err);
    if (het != 0)
        return het < 0 ? -1 : 0;
    return slurm_expand_hostlist(list, &job->nodes, err);
}

int slurm_job_read(slurm_job *job, char **err)
{
    memset(job, 0, sizeof *job);
    const char *id = getenv("SLURM_JOB_ID"), *list = getenv("SLURM_JOB_NODELIST"), *rank = getenv("SLURM_NODEID");
    const char *self = getenv("SLURMD_NODENAME");
    id = id ? id : getenv("SLURM_JOBID");
    list = list ? list : getenv("SLURM_NODELIST");
    if (!id || !list)
        return 0;
    job->job_id = id;
    char *end = NULL;
    long r = rank ? strtol(rank, &end, 10) : 0;
    if (job_nodes(job, list, err) != 0)
        return -1;
    if (job->nodes.n == 0 || (rank && (*end || end == rank || r < 0 || (size_t)r >= job->nodes.n))) {
        slurm_job_free(job);
        return report_failure(err, "SLURM_NODEID=%s is not the index of a node of the job's list %s",
                              rank ? rank : "", list);
    }
    /* the node list's order is ours to get right: this node must be where its id says */
    if (self && strcmp(self, job->nodes.names[r]) != 0) {
        report_failure(err, "SLURM_NODEID=%ld is node %s of the job's nodes, but this is %s (SLURMD_NODENAME)", r,
                       job->nodes.names[r], self);
        slurm_job_free(job);
        return -1;
    }
    job->node_rank = (int)r;
    return 1;
}

void slurm_job_free(slurm_job *job) { host_list_free(&job->nodes); }

/* ---- the batch script ------------------------------------------------------------------------ */

/* A value for an #SBATCH line: sbatch reads these lines itself, not the shell, and splits
 * them at blanks outside double quotes; a value with a line break or a double quote could
 * not be said there. */
static int sbatch_line(strbuf *sb, const char *option, const char *value, const char *key, char **err)
{
    if (strpbrk(value, "\"\n\r\\"))
        return report_failure(err, "config.%s: a double quote, backslash or line break cannot go into the batch "
                                   "script ('%s')", key, value);
    sb_printf(sb, "#SBATCH --%s=\"%s\"\n", option, value);
    return 0;
}

/* `s` in single quotes for the shell ('it'\''s'). */
static void shell_quote(strbuf *sb, const char *s)
{
    sb_putc(sb, '\'');
    for (; *s; s++)
        if (*s == '\'')
            sb_puts(sb, "'\\''");
        else
            sb_putc(sb, *s);
    sb_putc(sb, '\'');
}

static char *scalar_text(const cfg_node *n)
{
    char num[64];
    switch (n->kind) {
    case CFG_STR: return xstrdup(n->s);
    case CFG_INT: return xasprintf("%" PRId64, n->i);
    case CFG_BOOL: return xstrdup(n->b ? "true" : "false");
    case CFG_FLOAT: format_double(num, sizeof num, n->f); return xstrdup(num);
    default: return NULL;
    }
}

/* SLURM.ADDITIONAL_PARAMETERS: each key an sbatch option (mail_type → --mail-type). */
static int additional_lines(strbuf *sb, const cfg_node *extra, char **err)
{
    for (size_t i = 0; extra && extra->kind == CFG_MAP && i < extra->len; i++) {
        const char *key = extra->keys[i];
        char *value = scalar_text(extra->items[i]), *option = xstrdup(key);
        char *path = xasprintf("SLURM.ADDITIONAL_PARAMETERS.%s", key);
        bool ok_key = *key && strspn(key, OPTION_CHARS) == strlen(key);
        for (char *c = option; *c; c++)
            *c = *c == '_' ? '-' : *c;
        int rc = !ok_key    ? report_failure(err, "config.%s: not an sbatch option name", path)
                 : !value   ? report_failure(err, "config.%s: expected a string or a number", path)
                            : sbatch_line(sb, option, value, path, err);
        free(value), free(option), free(path);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* What one component of the job asks for, and the keys its text values come from. */
typedef struct {
    const char *partition, *partition_key, *constraint, *constraint_key;
    int64_t nodes, cpus, gpus, mem_gb;
} component;

/* The trainer nodes, with SLURM's keys (and with farm nodes in one component, those too). */
static component trainer_component(const cfg_node *config, int64_t farm_nodes)
{
    int64_t per_node = cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
    bool gpu = !strcmp(cfg_str(config, "MACHINE.DEVICE"), "gpu");
    return (component){.partition = cfg_str(config, "SLURM.PARTITION"), .partition_key = "SLURM.PARTITION",
                       .constraint = cfg_str(config, "SLURM.CONSTRAINT"), .constraint_key = "SLURM.CONSTRAINT",
                       .nodes = cfg_int(config, "DISTRIBUTED.NUM_NODES") + farm_nodes,
                       .cpus = cfg_int(config, "SLURM.NUM_CPU_PER_PROC") * per_node, .gpus = gpu ? per_node : 0,
                       .mem_gb = cfg_int(config, "SLURM.MEM_GB")};
}

/* The farm nodes of a heterogeneous job: SELFSUP.FARM.SLURM's keys, SLURM's where they say 0
 * or "", and no GPU. */
static component farm_component(const cfg_node *config, int64_t farm_nodes)
{
    component trainer = trainer_component(config, 0);
    const char *partition = cfg_str(config, "SELFSUP.FARM.SLURM.PARTITION");
    int64_t cpus = cfg_int(config, "SELFSUP.FARM.SLURM.CPUS_PER_NODE");
    int64_t mem = cfg_int(config, "SELFSUP.FARM.SLURM.MEM_GB");
    return (component){.partition = *partition ? partition : trainer.partition,
                       .partition_key = *partition ? "SELFSUP.FARM.SLURM.PARTITION" : trainer.partition_key,
                       .constraint = cfg_str(config, "SELFSUP.FARM.SLURM.CONSTRAINT"),
                       .constraint_key = "SELFSUP.FARM.SLURM.CONSTRAINT", .nodes = farm_nodes,
                       .cpus = cpus ? cpus : trainer.cpus, .mem_gb = mem ? mem : trainer.mem_gb};
}

/* One component's #SBATCH lines: where, how many nodes of what, for how long. */
static int component_lines(strbuf *sb, const component *c, int64_t minutes, char **err)
{
    if (*c->partition && sbatch_line(sb, "partition", c->partition, c->partition_key, err) != 0)
        return -1;
    if (*c->constraint && sbatch_line(sb, "constraint", c->constraint, c->constraint_key, err) != 0)
        return -1;
    sb_printf(sb, "#SBATCH --nodes=%" PRId64 "\n#SBATCH --ntasks-per-node=1\n", c->nodes);
    sb_printf(sb, "#SBATCH --cpus-per-task=%" PRId64 "\n", c->cpus);
    if (c->gpus > 0)
        sb_printf(sb, "#SBATCH --gpus-per-node=%" PRId64 "\n", c->gpus);
    if (c->mem_gb > 0)
        sb_printf(sb, "#SBATCH --mem=%" PRId64 "G\n", c->mem_gb);
    sb_printf(sb, "#SBATCH --time=%" PRId64 ":%02d:00\n", minutes / 60, (int)(minutes % 60));
    /* the time limit's SIGTERM 2 minutes early: the trainer stops and checkpoints */
    sb_puts(sb, "#SBATCH --signal=TERM@120\n");
    return 0;
}

/* The lines of the whole job, in its first component: its name, output and folder. */
static int job_lines(strbuf *sb, const cfg_node *config, const slurm_job_spec *spec, char **err)
{
    if (sbatch_line(sb, "job-name", cfg_str(config, "SLURM.NAME"), "SLURM.NAME", err) != 0)
        return -1;
    const char *comment = cfg_str(config, "SLURM.COMMENT");
    if (*comment && sbatch_line(sb, "comment", comment, "SLURM.COMMENT", err) != 0)
        return -1;
    char *output = path_join(spec->log_folder, "slurm-%j.out");
    int rc = sbatch_line(sb, "output", output, "SLURM.LOG_FOLDER", err);
    if (rc == 0)
        rc = sbatch_line(sb, "chdir", spec->work_dir, "SLURM.LOG_FOLDER", err);
    free(output);
    return rc == 0 ? additional_lines(sb, cfg_get(config, "SLURM.ADDITIONAL_PARAMETERS"), err) : -1;
}

/* The #SBATCH lines of the config's SLURM keys and DISTRIBUTED's counts; with a farm in a
 * component of its own, `#SBATCH hetjob` and its lines after them. */
static int sbatch_lines(strbuf *sb, const cfg_node *config, const slurm_job_spec *spec, bool het, char **err)
{
    int64_t minutes = cfg_int(config, "SLURM.TIME_HOURS") * 60 + cfg_int(config, "SLURM.TIME_MINUTES");
    if (minutes <= 0)
        return report_failure(err, "config.SLURM.TIME_HOURS and TIME_MINUTES: the time limit must be positive");
    component trainers = trainer_component(config, het ? 0 : spec->farm_nodes);
    if (job_lines(sb, config, spec, err) != 0 || component_lines(sb, &trainers, minutes, err) != 0)
        return -1;
    if (!het)
        return 0;
    component farm = farm_component(config, spec->farm_nodes);
    sb_puts(sb, "#SBATCH hetjob\n");
    return component_lines(sb, &farm, minutes, err);
}

/* What runs on each node: `selfsup run ARGS --role auto` in RUN_DIR/JOB/nodeN. */
static void task_lines(strbuf *sb, const slurm_job_spec *spec, bool het)
{
    sb_puts(sb, "\nset -eu\n");
    if (spec->configs_dir) {
        sb_puts(sb, "export SELFSUP_CONFIGS=");
        shell_quote(sb, spec->configs_dir);
        sb_putc(sb, '\n');
    }
    sb_puts(sb, "export SELFSUP_JOB_DIR=");
    shell_quote(sb, spec->run_dir);
    sb_puts(sb, "/\"$SLURM_JOB_ID\"\nargs=(");
    for (int i = 0; i < spec->n_run_args; i++) {
        if (i)
            sb_putc(sb, ' ');
        shell_quote(sb, spec->run_args[i]);
    }
    sb_printf(sb, ")\nexec srun %s--ntasks-per-node=1 --kill-on-bad-exit=1 \\\n    bash -c 'exec \"$0\" run \"$@\" "
                  "--role auto --run-dir \"$SELFSUP_JOB_DIR/node$SLURM_NODEID\"' \\\n    ",
              het ? "--het-group=0,1 " : "");
    shell_quote(sb, spec->selfsup);
    sb_puts(sb, " \"${args[@]}\"\n");
}

char *slurm_batch_script(const cfg_node *config, const slurm_job_spec *spec, char **err)
{
    int64_t train = cfg_int(config, "DISTRIBUTED.NUM_NODES");
    bool het = spec->farm_nodes > 0 && cfg_bool(config, "SELFSUP.FARM.SLURM.HETJOB");
    strbuf sb = {0};
    sb_puts(&sb, "#!/bin/bash\n# Written by `selfsup slurm`. ");
    if (spec->farm_nodes > 0)
        sb_printf(&sb, "Node 0 trains; nodes 1-%d are its decode farm (SELFSUP.FARM)%s.\n", spec->farm_nodes,
                  het ? ", a component of the job of its own" : "");
    else
        sb_printf(&sb, "%" PRId64 " node%s: `selfsup run` on each.\n", train, train == 1 ? "" : "s");
    sb_puts(&sb, "# Submit it again to go on where it stopped (CHECKPOINT.AUTO_RESUME).\n");
    if (sbatch_lines(&sb, config, spec, het, err) != 0) {
        sb_free(&sb);
        return NULL;
    }
    task_lines(&sb, spec, het);
    return sb.s;
}
