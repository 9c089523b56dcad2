/*
 * test_pipeline.c — stages, transports and the orchestrator, end to end, with the test
 * stages of tests/stages (a checkable producer, a pass-through worker, a checking consumer).
 *
 *   - transport equivalence: one stream through shm:, -, file: and tcp:// arrives as the same
 *     bytes, and those bytes are the ones the producer wrote straight to a file;
 *   - shell pipelines: a dead producer upstream of a pipe is an error downstream, never a
 *     silently short stream; a record too big for its slot names the setting to raise;
 *   - `selfsup run`: a clean run; a stage that fails; kill -9 of the producer, of a worker and
 *     of the consumer at random moments, 20 times each; SIGINT. Every ending must come within
 *     2 s (generous deadlines beyond that only keep a broken build from hanging), name the
 *     stage, and leave no process and no /dev/shm segment behind.
 */
#include "control.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RECORDS 2000

/* ---- helpers ------------------------------------------------------------------------------- */

/* The test stages and the front door, found once per test (the suite's init). */
static struct {
    char *produce, *pass, *check, *selfsup;
} g;

static void find_programs(void)
{
    g.produce = test_build_path("tests/selfsup-test-produce");
    g.pass = test_build_path("tests/selfsup-test-passthru");
    g.check = test_build_path("tests/selfsup-test-check");
    g.selfsup = test_build_path("selfsup");
}

static void free_programs(void) { free(g.produce), free(g.pass), free(g.check), free(g.selfsup); }

TestSuite(pipeline, .init = find_programs, .fini = free_programs);

/* The shell command printf(fmt, ...) run to its end: its exit status, its output in *out. */
__attribute__((format(printf, 2, 3))) static int shell(char **out, const char *fmt, ...)
{
    strbuf cmd = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&cmd, fmt, ap);
    va_end(ap);
    int st = test_run(sb_str(&cmd), out);
    sb_free(&cmd);
    return st;
}

/* The ring `name` (the part after shm:) is gone from /dev/shm. */
static void expect_no_segment(const char *name)
{
    char *seg = xasprintf("/dev/shm/%s", name);
    cr_expect_eq(access(seg, F_OK), -1, "%s was left behind", seg);
    unlink(seg);
    free(seg);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool files_equal(const char *a, const char *b)
{
    size_t na, nb;
    char *da = read_whole_file(a, &na), *db = read_whole_file(b, &nb);
    bool eq = da && db && na == nb && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return eq;
}

/* Start `sh -c "exec CMD"` with stdout+stderr into `log`; the pid is CMD's own. */
static pid_t start_cmd(const char *cmd, const char *log)
{
    /* Nothing allocates in the child: with ZeroMQ's threads running in this process, a
     * malloc between fork and exec could wait forever on a lock a thread held. */
    char *full = xasprintf("exec %s", cmd);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    free(full);
    return pid;
}

/* Wait up to `seconds`; on timeout kill it and fail the test. Returns the exit status. */
static int wait_for(pid_t pid, double seconds, double *took)
{
    double t0 = now();
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (now() - t0 > seconds) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            cr_assert_fail("process %d did not end within %.0f s", (int)pid, seconds);
        }
        usleep(5000);
    }
    if (took)
        *took = now() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Each live process's command line (arguments joined by spaces) goes to `visit` until it
 * returns true; returns that process's pid, or 0. Zombies are skipped: they are gone for our
 * purposes, only not reaped yet. */
static pid_t scan_processes(bool (*visit)(const char *cmdline, void *arg), void *arg)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;
    while (!found && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        size_t len;
        char *stat = read_whole_file(path, &len);
        char *close_paren = stat ? strrchr(stat, ')') : NULL;
        bool zombie = !close_paren || close_paren[2] == 'Z';
        free(stat);
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        char *cmd = zombie ? NULL : read_whole_file(path, &len);
        if (!cmd)
            continue;
        for (size_t i = 0; i + 1 < len; i++)
            if (!cmd[i])
                cmd[i] = ' ';
        if (len && visit(cmd, arg))
            found = pid;
        free(cmd);
    }
    closedir(d);
    return found;
}

static bool mentions(const char *cmdline, void *tag) { return strstr(cmdline, tag) != NULL; }

/* Is a process whose command line mentions `tag` (our temp dir) still running? */
static bool process_mentioning(const char *tag)
{
    return scan_processes(mentions, (void *)tag) != 0;
}

static int shm_segments_of(pid_t creator)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "selfsup.%d.", (int)creator);
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

static char *read_text(const char *path)
{
    size_t n;
    char *s = read_whole_file(path, &n);
    return s ? s : xstrdup("");
}

/* ---- transports ------------------------------------------------------------------------------ */

static const char *COMMON = "--slot-bytes 65536 --depth 4";

/* tcp:// links are CURVE (shm/auth.h): `selfsup keygen DIR/keys --clients w`, in a fresh
 * *dir, makes the reader's key directory and a writer key, passed to every stage as overrides
 * (each stage uses the one its tcp side needs, and none for the other transports). */
static char *tcp_keys(char **dir)
{
    *dir = test_make_tmpdir();
    char *out;
    cr_assert_eq(shell(&out, "%s keygen %s/keys --clients w", g.selfsup, *dir), 0, "%s", out);
    free(out);
    return xasprintf("config.SELFSUP.TRANSPORT.SERVER_KEYS_DIR=%s/keys config.SELFSUP.TRANSPORT.CLIENT_KEY_FILE=%s/keys/w.key",
                     *dir, *dir);
}

static void drop_tcp_keys(char *dir)
{
    test_rm_rf(dir);
    free(dir);
}

/* produce → passthru → passthru → file, with `a` and `b` the two links between them; `sep`
 * is "|" for stages that run at once, "&&" for files (written, then replayed); `keys` are
 * tcp_keys' overrides (or ""). */
static void relay(const char *dir, const char *a_out, const char *a_in, const char *b_out, const char *b_in,
                  const char *sep, const char *result, const char *keys)
{
    char *out;
    int st = shell(&out,
                   "cd %s && %s %s %s --count %d --size 3000 --out '%s' %s "
                   "%s %s %s --in '%s' --out '%s' %s %s %s %s --in '%s' --out file:%s",
                   dir, g.produce, COMMON, keys, RECORDS, a_out, sep, g.pass, COMMON, keys, a_in, b_out, sep,
                   g.pass, COMMON, keys, b_in, result);
    cr_assert_eq(st, 0, "%s -> %s:\n%s", a_out, b_out, out);
    free(out);
}

Test(pipeline, transports_carry_identical_bytes, .timeout = 120)
{
    char *dir = test_make_tmpdir(), *out;
    cr_assert_eq(shell(&out, "cd %s && %s %s --count %d --size 3000 --out file:direct.rec", dir, g.produce,
                       COMMON, RECORDS),
                 0, "%s", out);
    free(out);

    char ring1[64], ring2[64];
    snprintf(ring1, sizeof ring1, "shm:selfsup-test-%d-a", (int)getpid());
    snprintf(ring2, sizeof ring2, "shm:selfsup-test-%d-b", (int)getpid());
    relay(dir, "-", "-", "-", "-", "|", "pipe.rec", "");
    relay(dir, ring1, ring1, ring2, ring2, "|", "shm.rec", "");
    relay(dir, "file:f1.rec", "file:f1.rec", "file:f2.rec", "file:f2.rec", "&&", "file.rec", "");
    char tcp[64], *keys_dir, *keys = tcp_keys(&keys_dir);
    snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", test_free_port());
    relay(dir, tcp, tcp, "-", "-", "|", "tcp.rec", keys);
    free(keys);
    drop_tcp_keys(keys_dir);

    char *direct = path_join(dir, "direct.rec");
    const char *names[] = {"pipe.rec", "shm.rec", "file.rec", "tcp.rec"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        char *p = path_join(dir, names[i]);
        cr_expect(files_equal(direct, p), "%s differs from what the producer wrote", names[i]);
        free(p);
    }
    /* And the consumer agrees that every record is intact and present once. */
    cr_assert_eq(shell(&out, "%s --in file:%s --expect %d", g.check, direct, RECORDS), 0, "%s", out);
    cr_expect(strstr(out, "check: 2000 records"), "%s", out);
    free(out);
    expect_no_segment(ring1 + 4); /* past "shm:" */
    expect_no_segment(ring2 + 4);
    free(direct);
    test_rm_dir(dir);
}

Test(pipeline, dead_producer_is_an_error_downstream, .timeout = 60)
{
    char *out;
    int st = shell(&out, "%s --count 1000 --crash-after 300 | %s --expect 1000", g.produce, g.check);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "without an end-of-stream record"), "%s", out);
    free(out);
    /* The same with a clean end is fine: the error above is about the crash, not the pipe. */
    cr_expect_eq(shell(&out, "%s --count 1000 | %s --expect 1000", g.produce, g.check), 0, "%s", out);
    free(out);
}

Test(pipeline, record_too_big_for_its_slot, .timeout = 60)
{
    char ring[64], *out;
    snprintf(ring, sizeof ring, "selfsup-test-%d-big", (int)getpid());
    int st =
        shell(&out, "%s --count 10 --size 100000 --slot-bytes 65536 --out shm:%s & %s --in shm:%s; wait $!",
              g.produce, ring, g.check, ring);
    cr_expect_neq(st, 0, "%s", out);
    cr_expect(strstr(out, "SELFSUP.RING.SLOT_BYTES"), "the error should name the setting to raise:\n%s", out);
    expect_no_segment(ring);
    free(out);
}

/* ---- the orchestrator ------------------------------------------------------------------------ */

typedef struct {
    char *dir, *config, *log;
} run_env;

/* A config whose stages are the test stages; `extra` holds extra options per stage. */
static run_env make_run(const char *decode_extra, const char *augment_extra, const char *train_extra, int count)
{
    run_env e;
    e.dir = test_make_tmpdir();
    char *yaml =
        xasprintf("config:\n"
                  "  DATA:\n"
                  "    NUM_DATALOADER_WORKERS: 2\n"
                  "  DISTRIBUTED:\n"
                  "    NUM_PROC_PER_NODE: 1\n"
                  "  SELFSUP:\n"
                  "    RING: {SLOT_BYTES: 65536, DEPTH: 4}\n"
                  "    STAGES:\n"
                  "      decode: \"%s --count %d --size 2000 %s\"\n"
                  "      augment: \"%s %s\"\n"
                  "      collate: \"%s\"\n"
                  "      train: \"%s --expect %d %s\"\n",
                  g.produce, count, decode_extra, g.pass, augment_extra, g.pass, g.check, count, train_extra);
    e.config = path_join(e.dir, "run.yaml");
    FILE *f = fopen(e.config, "w");
    fputs(yaml, f);
    fclose(f);
    e.log = path_join(e.dir, "selfsup.log");
    free(yaml);
    return e;
}

static pid_t start_run(const run_env *e)
{
    char *cmd = xasprintf("%s run %s --run-dir %s/run", g.selfsup, e->config, e->dir);
    pid_t pid = start_cmd(cmd, e->log);
    free(cmd);
    return pid;
}

/* Nothing of the run may survive it. */
static void expect_clean(const run_env *e, pid_t selfsup)
{
    /* PDEATHSIG and SIGKILL are asynchronous: give the kernel a moment to finish them. */
    for (int i = 0; i < 100 && process_mentioning(e->dir); i++)
        usleep(10000);
    cr_expect(!process_mentioning(e->dir), "a stage outlived the run");
    cr_expect_eq(shm_segments_of(selfsup), 0, "a shared-memory segment outlived the run");
}

/* What stage `id` (train.0, augment.1) logged in the run. */
static char *stage_log(const run_env *e, const char *id)
{
    char *path = xasprintf("%s/run/logs/%s.log", e->dir, id), *text = read_text(path);
    free(path);
    return text;
}

/* What `selfsup COMMAND RUN_DIR` prints about the run (stdout and stderr). */
__attribute__((noinline)) /* gcc 12 mistakes the result for a pointer to a local */
static char *run_output(const run_env *e, const char *command)
{
    char *cmd = xasprintf("%s %s %s/run", g.selfsup, command, e->dir), *out = NULL;
    test_run(cmd, &out);
    free(cmd);
    return out;
}

static void free_run(run_env *e)
{
    test_rm_rf(e->dir);
    free(e->dir);
    free(e->config);
    free(e->log);
}

Test(pipeline, run_completes, .timeout = 120)
{
    run_env e = make_run("", "", "", RECORDS);
    pid_t pid = start_run(&e);
    int st = wait_for(pid, 60, NULL);
    char *log = read_text(e.log);
    cr_assert_eq(st, 0, "%s", log);
    char *consumer = stage_log(&e, "train.0");
    cr_expect(strstr(consumer, "check: 2000 records"), "%s", consumer);
    char *config_yaml = xasprintf("%s/run/config.yaml", e.dir);
    cr_expect_eq(access(config_yaml, F_OK), 0, "the run directory should hold config.yaml");
    for (int i = 0; i < 2; i++) {
        char *p = xasprintf("%s/run/logs/augment.%d.log", e.dir, i);
        cr_expect_eq(access(p, F_OK), 0, "no log for augment.%d", i);
        free(p);
    }
    /* selfsup status: the run finished, every stage exited 0, the consumer read them all */
    char *status = run_output(&e, "status");
    cr_expect(strncmp(status, "finished after", 14) == 0, "%s", status);
    const char *train = strstr(status, "\n  train.0 ");
    cr_expect(train && strstr(train, " 2000  exited with status 0"), "%s", status);
    expect_clean(&e, pid);
    free(status);
    free(config_yaml);
    free(consumer);
    free(log);
    free_run(&e);
}

/* A run whose augment workers misbehave as `misbehave` says: it fails, naming a worker, with
 * `quoted` (unless NULL) among the named stage's last lines, and its status says so. */
static void expect_a_worker_fails_the_run(const char *misbehave, const char *quoted)
{
    run_env e = make_run("", misbehave, "", 100000);
    pid_t pid = start_run(&e);
    double took;
    int st = wait_for(pid, 60, &took);
    char *log = read_text(e.log);
    cr_expect_eq(st, 1, "%s", log);
    cr_expect(strstr(log, "stage augment.") && strstr(log, ") failed; stopping the run"),
              "the message should name the worker that failed:\n%s", log);
    cr_expect(!quoted || strstr(log, quoted), "the stage's last lines should be quoted:\n%s", log);
    cr_expect(!strstr(log, "run finished"), "%s", log);
    char *status = run_output(&e, "status --json");
    cr_expect(strstr(status, "\"state\": \"failed\"") && strstr(status, "\"failure\": \"stage augment."), "%s", status);
    free(status);
    expect_clean(&e, pid);
    free(log);
    free_run(&e);
}

Test(pipeline, failing_stage_stops_the_run, .timeout = 120)
{
    expect_a_worker_fails_the_run("--fail-after 100", "failing on purpose");
}

/* A stage whose own peers are gone (collate's farm hosts, say) fails "because of a peer"; its
 * readers (and a co-writer of its ring) then see a stopped stream, and all exit within the
 * orchestrator's grace for a cause to show up. None does: the run still fails, naming the
 * stage furthest upstream (a worker; either one, since both may lose their peers, so no quote
 * is asked for), whatever order the reports came in. */
Test(pipeline, a_stage_that_lost_its_own_peers_fails_the_run, .timeout = 120)
{
    expect_a_worker_fails_the_run("--peers-lost-after 20", NULL);
}

Test(pipeline, status_of_a_directory_without_a_run_says_so)
{
    char *dir = test_make_tmpdir(), *cmd = xasprintf("%s status %s", g.selfsup, dir), *out = NULL;
    cr_expect_eq(test_run(cmd, &out), 1, "%s", out);
    cr_expect(strstr(out, "no status (is it the run directory of a `selfsup run`?)"), "%s", out);
    free(out), free(cmd);
    cmd = xasprintf("%s status", g.selfsup);
    cr_expect_eq(test_run(cmd, &out), 2, "%s", out);
    free(out), free(cmd);
    test_rm_rf(dir);
    free(dir);
}

/* `selfsup status --json` of a hand-made status.json of a run said to be running. */
static char *status_of_file(const char *dir, const char *host, pid_t pid, long age_s)
{
    char *path = xasprintf("%s/status.json", dir), *cmd = xasprintf("%s status %s --json", g.selfsup, dir), *out = NULL;
    FILE *f = fopen(path, "w");
    cr_assert(f);
    long now = (long)time(NULL);
    fprintf(f, "{\"state\": \"running\", \"pid\": %d, \"host\": \"%s\", \"started\": %ld, \"updated\": %ld, "
               "\"role\": \"all\", \"node_rank\": 0, \"stages\": [], \"rings\": []}\n",
            (int)pid, host, now - 600, now - age_s);
    fclose(f);
    cr_expect_eq(test_run(cmd, &out), 0, "%s", out);
    free(path), free(cmd);
    return out;
}

/* Lost: on this host when its orchestrator's pid is gone; read from another host (a Slurm
 * node's run, from the login node) when the file has not been rewritten for 30 s. */
Test(pipeline, status_calls_a_run_whose_orchestrator_is_gone_lost)
{
    char *dir = test_make_tmpdir(), here[256] = "";
    gethostname(here, sizeof here - 1);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    const struct {
        const char *host;
        pid_t pid;
        long age_s;
        const char *state;
    } cases[] = {
        {here, getpid(), 0, "running"}, {here, dead, 0, "lost"}, {"another-host", dead, 3, "running"},
        {"another-host", getpid(), 100, "lost"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out = status_of_file(dir, cases[i].host, cases[i].pid, cases[i].age_s);
        char *want = xasprintf("\"state\": \"%s\"", cases[i].state);
        cr_expect(strstr(out, want), "case %zu: no %s in:\n%s", i, want, out);
        free(want), free(out);
    }
    test_rm_rf(dir);
    free(dir);
}

Test(pipeline, bad_config_starts_nothing)
{
    char *dir = test_make_tmpdir(), *out;
    cr_expect_eq(shell(&out, "%s run --run-dir %s/run config.DATA.NUM_DATALOADER_WORKRS=2", g.selfsup, dir),
                 2, "%s", out);
    cr_expect(strstr(out, "NUM_DATALOADER_WORKERS"), "should suggest the right key:\n%s", out);
    char *run = path_join(dir, "run");
    cr_expect_eq(access(run, F_OK), -1, "no run directory for a refused config");
    free(run);
    free(out);
    /* A stage program that is not there is a config error too. */
    cr_expect_eq(shell(&out, "%s run --run-dir %s/run2 config.SELFSUP.STAGES.decode=/nonexistent/prog",
                       g.selfsup, dir),
                 2, "%s", out);
    cr_expect(strstr(out, "/nonexistent/prog"), "%s", out);
    free(out);
    test_rm_dir(dir);
}

typedef struct {
    const char *dir;
    char *pattern;
} stage_query;

static bool is_stage(const char *cmdline, void *arg)
{
    const stage_query *q = arg;
    return strstr(cmdline, q->dir) && strstr(cmdline, q->pattern);
}

/* The pid of the run's stage `id` (as the orchestrator names them: decode.0, augment.1), or 0. */
static pid_t find_stage(const run_env *e, const char *id)
{
    stage_query q = {.dir = e->dir, .pattern = xasprintf("--id %s ", id)};
    pid_t pid = scan_processes(is_stage, &q);
    free(q.pattern);
    return pid;
}

/* kill -9 one stage at a random moment, `rounds` times; the run must end within 2 s. */
static void kill_rounds(const char *id, int rounds, unsigned seed)
{
    srand(seed);
    for (int round = 0; round < rounds; round++) {
        /* Paced so that the run is still going when the kill comes. */
        run_env e = make_run("--sleep-us 200", "", "", 1000000);
        pid_t pid = start_run(&e);
        usleep((useconds_t)(20000 + rand() % 400000));
        pid_t victim = 0;
        for (int i = 0; i < 500 && !(victim = find_stage(&e, id)); i++)
            usleep(2000);
        cr_assert(victim > 0, "round %d: stage %s never started", round, id);
        kill(victim, SIGKILL);
        double took;
        int st = wait_for(pid, 30, &took);
        char *log = read_text(e.log);
        cr_expect_eq(st, 1, "round %d: %s", round, log);
        char *named = xasprintf("stage %s (pid %d) was killed by signal 9", id, (int)victim);
        cr_expect(strstr(log, named), "round %d: the message should name %s:\n%s", round, id, log);
        cr_expect_lt(took, 2.0, "round %d: the run took %.2f s to stop after the kill", round, took);
        expect_clean(&e, pid);
        free(named);
        free(log);
        free_run(&e);
    }
}

Test(pipeline, kill_producer, .timeout = 300) { kill_rounds("decode.0", 20, 1); }
Test(pipeline, kill_worker, .timeout = 300) { kill_rounds("augment.1", 20, 2); }
Test(pipeline, kill_consumer, .timeout = 300) { kill_rounds("train.0", 20, 3); }

/* Wait until every stage has said hello and got START: the orchestrator's first progress line
 * (10 s after START when not on a terminal). A fixed pause is not enough on a loaded machine
 * (sanitizers, other tests' processes): a stage stopped before its hello is a different case. */
static void wait_running(const run_env *e)
{
    for (int i = 0; i < 600; i++) {
        char *log = read_text(e->log);
        bool running = strstr(log, "| rings") != NULL;
        free(log);
        if (running)
            return;
        usleep(100000);
    }
    cr_assert_fail("the run never started");
}

Test(pipeline, sigint_stops_cleanly, .timeout = 120)
{
    run_env e = make_run("--sleep-us 200", "", "", 1000000);
    pid_t pid = start_run(&e);
    wait_running(&e);
    kill(pid, SIGINT);
    double took;
    int st = wait_for(pid, 30, &took);
    char *log = read_text(e.log);
    cr_expect_eq(st, 128 + SIGINT, "%s", log);
    cr_expect_lt(took, 2.0, "a graceful stop of idle test stages took %.2f s", took);
    char *consumer = stage_log(&e, "train.0");
    cr_expect(strstr(consumer, "check: "), "the consumer should have finished its loop:\n%s", consumer);
    expect_clean(&e, pid);
    free(consumer);
    free(log);
    free_run(&e);
}

/* ---- the control protocol, seen from the orchestrator's side ---------------------------------- */

/* Next message of `type` from the stage, skipping others; NULL after `seconds`. */
static json_t *expect_msg(ctl_server *srv, const char *type, double seconds)
{
    double end = now() + seconds;
    while (now() < end) {
        char *peer = NULL;
        json_t *m = ctl_server_recv(srv, 100, &peer);
        free(peer);
        if (m && !strcmp(json_string_value(json_object_get(m, "type")), type))
            return m;
        json_decref(m);
    }
    return NULL;
}

static json_int_t field(json_t *m, const char *key)
{
    return json_integer_value(json_object_get(m, key));
}

Test(pipeline, stage_obeys_control_commands, .timeout = 120)
{
    char *dir = test_make_tmpdir();
    char *endpoint = xasprintf("ipc://%s/control.sock", dir);
    char *err = NULL;
    ctl_server *srv = ctl_bind(endpoint, "", &err);
    cr_assert(srv, "%s", err);
    char *log = path_join(dir, "log");
    char *ring = xasprintf("selfsup-test-%d-ctl", (int)getpid());
    char *cmd = xasprintf("%s --count 1000000 --size 100 --sleep-us 100 --slot-bytes 65536 --out shm:%s "
                          "--control %s --id decode.0 & %s --in shm:%s; wait",
                          g.produce, ring, endpoint, g.check, ring);
    pid_t pid = start_cmd(cmd, log);

    json_t *hello = expect_msg(srv, "hello", 20);
    cr_assert(hello, "no HELLO");
    cr_expect_str_eq(json_string_value(json_object_get(hello, "id")), "decode.0");
    cr_expect_str_eq(json_string_value(json_object_get(hello, "role")), "producer");
    cr_expect_gt(field(hello, "pid"), 0);
    json_decref(hello);

    /* Nothing flows before START. */
    json_t *hb = expect_msg(srv, "heartbeat", 3);
    cr_expect(!hb || field(hb, "records_out") == 0, "records went out before START");
    json_decref(hb);
    cr_assert_eq(ctl_server_send(srv, "decode.0", ctl_msg("start")), 0);
    json_t *running = expect_msg(srv, "heartbeat", 5);
    cr_assert(running, "no heartbeat after START");
    json_decref(running);
    running = expect_msg(srv, "heartbeat", 5);
    cr_assert(running);
    cr_expect_gt(field(running, "records_out"), 0, "START did not start the stage");
    json_t *counters = json_object_get(running, "counters");
    cr_expect(json_is_object(counters) && json_is_real(json_object_get(running, "blocked_out_s")));
    json_decref(running);

    /* PAUSE: the count stops moving while heartbeats go on; RESUME: it moves again. */
    cr_assert_eq(ctl_server_send(srv, "decode.0", ctl_msg("pause")), 0);
    json_decref(expect_msg(srv, "heartbeat", 5)); /* may predate the pause */
    json_t *a = expect_msg(srv, "heartbeat", 5), *b = expect_msg(srv, "heartbeat", 5);
    cr_assert(a && b, "heartbeats must go on while paused");
    cr_expect_eq(field(a, "records_out"), field(b, "records_out"), "records went out while paused");
    json_int_t paused_at = field(b, "records_out");
    json_decref(a);
    json_decref(b);
    cr_assert_eq(ctl_server_send(srv, "decode.0", ctl_msg("resume")), 0);
    json_decref(expect_msg(srv, "heartbeat", 5));
    a = expect_msg(srv, "heartbeat", 5);
    cr_assert(a);
    cr_expect_gt(field(a, "records_out"), paused_at, "RESUME did not resume");
    json_decref(a);

    /* STOP: the stage ends at once with a FINAL that says it was stopped, and the consumer
     * learns that its stream is short (it fails instead of counting it as whole). */
    cr_assert_eq(ctl_server_send(srv, "decode.0", ctl_msg("stop")), 0);
    json_t *fin = expect_msg(srv, "final", 10);
    cr_assert(fin, "no FINAL after STOP");
    cr_expect_str_eq(json_string_value(json_object_get(fin, "status")), "stopped");
    json_decref(fin);
    cr_expect_eq(wait_for(pid, 20, NULL), 0);
    char *text = read_text(log);
    cr_expect(strstr(text, "was stopped after"), "the consumer must learn that its stream is short:\n%s", text);
    expect_no_segment(ring);
    free(text);
    ctl_server_close(srv);
    free(cmd);
    free(ring);
    free(log);
    free(endpoint);
    free(err);
    test_rm_rf(dir);
    free(dir);
}

/* ---- the command lines ------------------------------------------------------------------------ */

Test(pipeline, stage_command_line)
{
    char *out;
    cr_expect_eq(shell(&out, "%s --help", g.produce), 0, "%s", out);
    cr_expect(strstr(out, "--in URI, --out URI") && strstr(out, "--count N"), "%s", out);
    free(out);
    cr_expect_eq(shell(&out, "%s --version", g.check), 0, "%s", out);
    cr_expect(strstr(out, "selfsup-test-check 0."), "%s", out);
    free(out);
    /* Usage errors: exit 2 before anything is opened. */
    const char *bad[] = {"--bogus", "--out nowhere:x", "--out tcp://nohost", "--depth 1", "--rank",
                         "config.DATA.NUM_DATALOADER_WORKRS=2"};
    const char *says[] = {"unknown option '--bogus'", "unknown transport", "expected tcp://HOST:PORT",
                          "--depth 1: expected an integer from 2", "--rank needs a value", "did you mean"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        cr_expect_eq(shell(&out, "%s --out file:/dev/null %s", g.produce, bad[i]), 2, "%s: %s", bad[i], out);
        cr_expect(strstr(out, says[i]), "%s: expected '%s' in:\n%s", bad[i], says[i], out);
        free(out);
    }
    /* A device is written as it is, never replaced by a renamed temp file. */
    cr_expect_eq(shell(&out, "%s --count 50 --out file:/dev/null", g.produce), 0, "%s", out);
    struct stat st;
    cr_expect(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is no longer a device");
    free(out);
}

Test(pipeline, inspect_prints_records_and_refuses_bad_ones)
{
    char *dir = test_make_tmpdir(), *out;
    cr_assert_eq(shell(&out,
                       "%s --count 3 --size 5 --index 7 --out file:%s/three.rec && %s inspect %s/three.rec",
                       g.produce, dir, g.selfsup, dir),
                 0, "%s", out);
    /* test_pattern(7, 0..4), computed by hand from test_stage.h's formula. */
    cr_expect(strstr(out, "seq 7") && strstr(out, "seq 8") && strstr(out, "seq 9"), "%s", out);
    cr_expect(strstr(out, "data") && strstr(out, "uint8") && strstr(out, "[5]"), "%s", out);
    free(out);
    /* A record corrupted after the first: the good one is shown, then the error, exit 1. */
    char *path = xasprintf("%s/three.rec", dir);
    size_t n;
    char *bytes = read_whole_file(path, &n);
    cr_assert(bytes && n > 600);
    size_t first = *(uint64_t *)(bytes + 16); /* rec_header.size */
    bytes[first] ^= 0xFF;                     /* the second record's magic */
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
    cr_expect_eq(shell(&out, "%s inspect %s", g.selfsup, path), 1, "%s", out);
    cr_expect(strstr(out, "seq 7") && strstr(out, "magic"), "%s", out);
    free(out);
    free(bytes);
    free(path);
    test_rm_dir(dir);
}

Test(pipeline, silent_stage_counts_as_hung, .timeout = 120)
{
    run_env e = make_run("--sleep-us 200", "", "", 1000000);
    FILE *f = fopen(e.config, "a");
    fputs("    CONTROL: {HEARTBEAT_TIMEOUT_S: 2}\n", f);
    fclose(f);
    pid_t pid = start_run(&e);
    wait_running(&e);
    pid_t victim = find_stage(&e, "collate.0");
    cr_assert(victim > 0);
    kill(victim, SIGSTOP); /* alive, but silent: what a deadlocked stage looks like */
    int st = wait_for(pid, 30, NULL);
    char *log = read_text(e.log);
    cr_expect_eq(st, 1, "%s", log);
    cr_expect(strstr(log, "stage collate.0") && strstr(log, "sent no heartbeat for 2 s"), "%s", log);
    expect_clean(&e, pid);
    free(log);
    free_run(&e);
}

/* The multi-node setting: control over tcp (the port the kernel picks), always CURVE; the
 * orchestrator makes keys for the stages it starts (shm/auth.h, test_auth.c). */
Test(pipeline, run_with_tcp_control_and_curve, .timeout = 120)
{
    run_env e = make_run("", "", "", 500);
    FILE *f = fopen(e.config, "a");
    fprintf(f, "    CONTROL: {ENDPOINT: \"tcp://127.0.0.1:0\"}\n");
    fclose(f);
    pid_t pid = start_run(&e);
    int st = wait_for(pid, 60, NULL);
    char *log = read_text(e.log);
    cr_expect_eq(st, 0, "%s", log);
    char *consumer = stage_log(&e, "train.0");
    cr_expect(strstr(consumer, "check: 500 records"), "%s", consumer);
    expect_clean(&e, pid);
    free(consumer);
    free(log);
    free_run(&e);
}

/* A writer that made the ring and finished before the others started must leave the ring's
 * name in place: a later writer would otherwise create a second ring of the same name and
 * the reader would wait on the first one forever (seen under load in CI). */
Test(pipeline, an_early_creator_leaves_the_ring_for_late_writers, .timeout = 120)
{
    char shm[64], *out;
    snprintf(shm, sizeof shm, "shm:selfsup-test-%d-early?producers=3", (int)getpid());
    int st = shell(&out,
                   "%s --slot-bytes 65536 --count 300 --index 0 --stride 3 --out '%s' & first=$!; "
                   "%s --slot-bytes 65536 --in '%s' --expect 900 & "
                   "wait $first; "
                   "%s --slot-bytes 65536 --count 300 --index 1 --stride 3 --out '%s' & "
                   "%s --slot-bytes 65536 --count 300 --index 2 --stride 3 --out '%s' & "
                   "wait",
                   g.produce, shm, g.check, shm, g.produce, shm, g.produce, shm);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "check: 900 records"), "%s", out);
    free(out);
    *strchr(shm, '?') = '\0';
    expect_no_segment(shm + 4);
}

/* Several writers into one ring and into one tcp reader: the end comes after the last one. */
Test(pipeline, several_producers_end_together, .timeout = 120)
{
    char shm[64], tcp[64], *keys_dir, *keys = tcp_keys(&keys_dir);
    snprintf(shm, sizeof shm, "shm:selfsup-test-%d-many?producers=3", (int)getpid());
    snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d?producers=3", test_free_port());
    const char *uris[] = {shm, tcp};
    for (int k = 0; k < 2; k++) {
        /* Uneven: 3000 records split 0,3,6… / 1,4,7… / 2,5,8…, the last writer slow. */
        char *out;
        int st =
            shell(&out,
                  "%s --slot-bytes 65536 --in '%s' --expect 3000 %s & "
                  "%s --slot-bytes 65536 --count 1000 --index 0 --stride 3 --out '%s' %s & "
                  "%s --slot-bytes 65536 --count 1000 --index 1 --stride 3 --out '%s' %s & "
                  "%s --slot-bytes 65536 --count 1000 --index 2 --stride 3 --sleep-us 300 --out '%s' %s & "
                  "wait %%1",
                  g.check, uris[k], keys, g.produce, uris[k], keys, g.produce, uris[k], keys, g.produce,
                  uris[k], keys);
        cr_expect_eq(st, 0, "%s: %s", uris[k], out);
        cr_expect(strstr(out, "check: 3000 records"), "%s: %s", uris[k], out);
        free(out);
    }
    *strchr(shm, '?') = '\0';
    expect_no_segment(shm + 4);
    free(keys);
    drop_tcp_keys(keys_dir);
}
