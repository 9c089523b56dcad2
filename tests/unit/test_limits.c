/*
 * test_limits.c — hostile input ends quickly, with a clear error, in bounded memory:
 *
 *  - a disk_folder class holding self-symlinks (`ln -s . x; ln -s . y`) is walked once, and a
 *    decode stage asked to stop (SIGTERM) while it walks a huge folder tree stops;
 *  - a FIFO or a device where a file is expected (a config, --train-targets of knn and svm, a
 *    .npy) is refused before it is opened, naming the path and what it is;
 *  - a YAML config nested 200,000 deep, or with 300,000 keys in one map, is refused while it
 *    is parsed; a map with as many keys as allowed loads in linear time.
 *
 * Time bounds are Criterion's .timeout (before the fixes these tests hang for minutes, or
 * forever); the big inputs are generated here, in temporary folders.
 */
#include "cfg_internal.h"
#include "config.h"
#include "decode/filelist.h"
#include "decode/imagefolder.h"
#include "npy.h"
#include "safetensors.h"
#include "torchfile.h"
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void make_dir(const char *path)
{
    cr_assert(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
}

static void make_link(const char *target, const char *path)
{
    cr_assert(symlink(target, path) == 0, "symlink %s: %s", path, strerror(errno));
}

static char *make_fifo(const char *dir)
{
    char *path = path_join(dir, "fifo.npy");
    cr_assert(mkfifo(path, 0600) == 0, "mkfifo %s: %s", path, strerror(errno));
    return path;
}

static void rm_tree(char *dir)
{
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    free(dir);
}

/* Run `cmd` for at most 15 s: a command that blocks fails with 124 instead of lingering after
 * the test. */
static int run_briefly(const char *cmd, char **output) { return test_run_within(cmd, 15, output); }

/* Expect `cmd` to exit 2 and to say `expect`. */
static void expect_refused(const char *cmd, const char *expect)
{
    char *out;
    int rc = run_briefly(cmd, &out);
    cr_expect_eq(rc, 2, "%s: exit %d: %s", cmd, rc, out);
    cr_expect(strstr(out, expect), "%s: expected '%s' in: %s", cmd, expect, out);
    cr_expect(!strstr(out, "Sanitizer") && !strstr(out, "runtime error"), "%s", out);
    free(out);
}

/* ---- the folder walk ---------------------------------------------------------------------- */

Test(limits, symlink_cycles_in_a_class_folder_are_walked_once, .timeout = 20)
{
    char *root = test_make_tmpdir();
    char *cls = path_join(root, "cls"), *sub = path_join(cls, "sub"), *img = path_join(cls, "a.jpg");
    char *img2 = path_join(sub, "b.jpg"), *x = path_join(cls, "x"), *y = path_join(cls, "y");
    char *again = path_join(cls, "again");
    make_dir(cls);
    make_dir(sub);
    write_text(img, "x");
    write_text(img2, "x");
    make_link(".", x); /* x/x/x/..., y/x/y/...: 2^depth paths for os.walk */
    make_link(".", y);
    make_link("sub", again); /* a second way to the same folder */
    decode_imagefolder f;
    char *err = NULL;
    cr_assert_eq(decode_imagefolder_scan(root, &f, &err), 0, "%s", err);
    /* Two image files on disk, each listed once: cls/a.jpg, and b.jpg under the first link
     * (in sorted order) that reaches sub/. */
    cr_assert_eq(f.count, 2);
    cr_assert_str_eq(f.paths[0], img);
    char *via = path_join(again, "b.jpg");
    cr_assert_str_eq(f.paths[1], via);
    decode_imagefolder_free(&f);
    free(via);
    free(cls), free(sub), free(img), free(img2), free(x), free(y), free(again);
    rm_tree(root);
}

Test(limits, a_cancelled_walk_stops_with_a_message, .timeout = 20)
{
    char *root = test_make_tmpdir(), *cls = path_join(root, "cls"), *img = path_join(cls, "a.jpg");
    make_dir(cls);
    write_text(img, "x");
    atomic_bool cancel = true;
    decode_imagefolder f;
    char *err = NULL;
    cr_assert_eq(decode_imagefolder_scan_cancellable(root, &cancel, &f, &err), -1);
    cr_assert(err && strstr(err, "stopped while listing"), "%s", err ? err : "(no message)");
    free(err);
    atomic_store(&cancel, false);
    cr_assert_eq(decode_imagefolder_scan_cancellable(root, &cancel, &f, &err), 0, "%s", err);
    cr_assert_eq(f.count, 1);
    decode_imagefolder_free(&f);
    free(cls);
    free(img);
    rm_tree(root);
}

/* ROOT/T holds `folders` empty sub-folders and one image; ROOT/data has `classes` symlinks to
 * ../T. Each class is walked on its own (a folder two classes share belongs to both, as in
 * torchvision), so listing data/ visits folders × classes folders: cheap to make, minutes
 * to walk. */
static char *make_wide_tree(const char *root, int folders, int classes)
{
    char *t = path_join(root, "T"), *data = path_join(root, "data"), *img = path_join(t, "a.jpg");
    make_dir(t);
    make_dir(data);
    write_text(img, "x");
    for (int i = 0; i < folders; i++) {
        char *d = xasprintf("%s/f%05d", t, i);
        make_dir(d);
        free(d);
    }
    for (int i = 0; i < classes; i++) {
        char *l = xasprintf("%s/c%05d", data, i);
        make_link("../T", l);
        free(l);
    }
    free(t);
    free(img);
    return data;
}

/* pid's open descriptors: is one of them a folder under `prefix`? */
static bool has_open_under(pid_t pid, const char *prefix)
{
    char *fds = xasprintf("/proc/%d/fd", (int)pid);
    DIR *d = opendir(fds);
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        char *link = path_join(fds, e->d_name), target[PATH_MAX];
        ssize_t n = readlink(link, target, sizeof target - 1);
        free(link);
        target[n > 0 ? n : 0] = '\0';
        found = n > 0 && !strncmp(target, prefix, strlen(prefix));
    }
    if (d)
        closedir(d);
    free(fds);
    return found;
}

/* selfsup-decode on `config`, stderr into `log`; it dies with this test, and after 120 s. */
static pid_t start_decode(const char *config, const char *out, const char *log)
{
    char *bin = test_build_path("selfsup-decode"), *uri = xasprintf("file:%s", out);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(120);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDERR_FILENO);
        execl(bin, bin, "-c", config, "--out", uri, (char *)NULL);
        _exit(127);
    }
    free(bin);
    free(uri);
    return pid;
}

Test(limits, sigterm_stops_decode_while_it_walks_a_huge_tree, .timeout = 30)
{
    char *root = test_make_tmpdir(), *real = realpath(root, NULL);
    char *data = make_wide_tree(root, 2000, 5000);
    char *config = path_join(root, "config.yaml"), *out = path_join(root, "out.rec");
    char *log = path_join(root, "decode.log"), *tree = path_join(real, "T");
    char *text = xasprintf("config:\n  DATA:\n    TRAIN:\n      DATA_SOURCES: [disk_folder]\n"
                           "      DATASET_NAMES: [wide]\n      DATA_PATHS: [%s]\n      LABEL_SOURCES: []\n",
                           data);
    write_text(config, text);
    pid_t pid = start_decode(config, out, log);
    /* Wait until it is inside the walk: a folder of T is open. */
    bool walking = false;
    for (int k = 0; k < 2000 && !walking; k++) {
        walking = has_open_under(pid, tree);
        if (!walking)
            usleep(5000);
    }
    cr_assert(walking, "selfsup-decode never opened a folder of %s", tree);
    kill(pid, SIGTERM);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    size_t len;
    char *said = read_whole_file(log, &len);
    cr_assert(WIFEXITED(status), "killed by signal %d: %s", WTERMSIG(status), said);
    /* A stop's status (stage.h): 0, or 128 + SIGTERM where a stop before the work was done
     * is told apart; not 1 or 2, which would mean a failure or a config error. */
    int rc = WEXITSTATUS(status);
    cr_expect(rc == 0 || rc == 128 + SIGTERM, "exit %d: %s", rc, said);
    cr_expect(strstr(said, "stopped while listing"), "%s", said);
    free(said);
    free(text), free(config), free(out), free(log), free(tree), free(data), free(real);
    rm_tree(root);
}

/* ---- files that are not regular files ------------------------------------------------------- */

Test(limits, open_regular_file_says_what_the_path_is)
{
    char *dir = test_make_tmpdir(), *fifo = make_fifo(dir), *file = path_join(dir, "f.yaml"), *err = NULL;
    write_text(file, "0123456789");
    static const struct { const char *path; const char *what; } others[] = {
        {"/dev/zero", "is a character device, not a regular file"},
        {"/tmp", "is a directory, not a regular file"},
        {"/nonexistent/x", "cannot open"},
    };
    for (size_t k = 0; k < ARRAY_LEN(others); k++) {
        cr_assert_eq(open_regular_file(others[k].path, SIZE_MAX, NULL, &err), -1, "%s", others[k].path);
        cr_expect(!strncmp(err, others[k].path, strlen(others[k].path)) && strstr(err, others[k].what), "%s", err);
        free(err);
    }
    cr_assert_eq(open_regular_file(fifo, SIZE_MAX, NULL, &err), -1);
    cr_expect(strstr(err, fifo) && strstr(err, "is a FIFO (named pipe)"), "%s", err);
    free(err);
    cr_assert_null(read_regular_file(file, 9, NULL, &err));
    cr_expect(strstr(err, file) && strstr(err, "too big: 10 bytes, more than the 9 allowed"), "%s", err);
    free(err);
    size_t len;
    char *text = read_regular_file(file, 10, &len, &err);
    cr_assert(text, "%s", err);
    cr_expect(len == 10 && !strcmp(text, "0123456789"));
    free(text), free(file), free(fifo);
    rm_tree(dir);
}

Test(limits, npy_open_refuses_a_fifo_and_a_device, .timeout = 10)
{
    char *dir = test_make_tmpdir(), *fifo = make_fifo(dir), *err = NULL;
    npy_array a;
    cr_assert_eq(npy_open(fifo, &a, &err), -1);
    cr_expect(strstr(err, fifo) && strstr(err, "FIFO"), "%s", err);
    free(err);
    cr_assert_eq(npy_read(fifo, &a, &err), -1);
    cr_expect(strstr(err, fifo) && strstr(err, "FIFO"), "%s", err);
    free(err);
    cr_assert_eq(npy_open("/dev/zero", &a, &err), -1);
    cr_expect(strstr(err, "/dev/zero") && strstr(err, "character device"), "%s", err);
    free(err);
    free(fifo);
    rm_tree(dir);
}

Test(limits, weights_and_file_lists_refuse_a_fifo, .timeout = 10)
{
    char *dir = test_make_tmpdir(), *fifo = make_fifo(dir), *err = NULL;
    st_file *sf;
    cr_assert_eq(st_open(fifo, &sf, &err), -1, "safetensors must not wait on a FIFO");
    cr_expect(strstr(err, fifo) && strstr(err, "FIFO"), "%s", err);
    free(err), err = NULL;
    torchfile *tf;
    cr_assert_eq(torchfile_open(fifo, &tf, &err), -1, "a torch checkpoint must not wait on a FIFO");
    cr_expect(strstr(err, fifo) && strstr(err, "FIFO"), "%s", err);
    free(err), err = NULL;
    char **paths;
    size_t count;
    cr_assert_eq(decode_filelist_read(fifo, &paths, &count, &err), -1, "a disk_filelist must not wait on a FIFO");
    cr_expect(strstr(err, fifo) && strstr(err, "FIFO"), "%s", err);
    free(err);
    free(fifo);
    rm_tree(dir);
}

Test(limits, a_fifo_or_dev_zero_as_config_is_refused, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *fifo = make_fifo(dir);
    char *selfsup = test_build_path("selfsup"), *decode = test_build_path("selfsup-decode");
    char *configs = test_path("configs");
    static const char *const what[] = {"is a FIFO (named pipe)", "is a character device"};
    const char *paths[] = {fifo, "/dev/zero"};
    for (size_t k = 0; k < ARRAY_LEN(paths); k++) {
        char *expect = xasprintf("%s: %s, not a regular file", paths[k], what[k]);
        char *cmd = xasprintf("'%s' config validate '%s' --configs '%s'", selfsup, paths[k], configs);
        expect_refused(cmd, expect);
        free(cmd);
        cmd = xasprintf("'%s' -c '%s' --out file:/dev/null", decode, paths[k]);
        expect_refused(cmd, expect);
        free(cmd);
        free(expect);
    }
    free(selfsup), free(decode), free(configs), free(fifo);
    rm_tree(dir);
}

Test(limits, a_config_over_the_size_limit_is_refused, .timeout = 20)
{
    char *dir = test_make_tmpdir(), *path = path_join(dir, "big.yaml");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    while (ftell(f) <= (long)CFG_MAX_FILE_BYTES)
        fputs("# only comments: YAML that would parse, but more of it than a config may be\n", f);
    fclose(f);
    cfg_err err;
    cr_assert_null(cfg_load_yaml_file(path, &err));
    cr_expect(strstr(err.msg, path) && strstr(err.msg, "too big"), "%s", err.msg);
    free(path);
    rm_tree(dir);
}

/* A features .npy (rows × 2 float32) and its targets (rows int64). */
static void write_features(const char *dir, const char *x, const char *t, size_t rows)
{
    float feats[16] = {0};
    int64_t targets[8] = {0};
    size_t xs[2] = {rows, 2}, ts[1] = {rows};
    for (size_t i = 0; i < rows; i++)
        feats[2 * i] = (float)i, targets[i] = (int64_t)(i % 2);
    char *px = path_join(dir, x), *pt = path_join(dir, t), *err = NULL;
    cr_assert_eq(npy_write(px, NPY_F4, 2, xs, feats, &err), 0, "%s", err);
    cr_assert_eq(npy_write(pt, NPY_I8, 1, ts, targets, &err), 0, "%s", err);
    free(px);
    free(pt);
}

Test(limits, a_fifo_as_train_targets_is_refused_by_knn_and_svm, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *fifo = make_fifo(dir);
    write_features(dir, "trx.npy", "trt.npy", 8); /* valid files: the reader gets to the FIFO */
    write_features(dir, "tex.npy", "tet.npy", 4);
    char *knn = test_build_path("selfsup-knn"), *svm = test_build_path("selfsup-svm");
    char *cmd = xasprintf("'%s' --train-features %s/trx.npy --train-targets '%s' --test-features %s/tex.npy "
                          "--test-targets %s/tet.npy",
                          knn, dir, fifo, dir, dir);
    char *expect = xasprintf("--train-targets %s: is a FIFO (named pipe), not a regular file", fifo);
    expect_refused(cmd, expect);
    free(cmd);
    cmd = xasprintf("'%s' --train-features %s/trx.npy --train-targets '%s' --test-features %s/tex.npy "
                    "--test-targets %s/tet.npy --output %s/out",
                    svm, dir, fifo, dir, dir, dir);
    expect_refused(cmd, expect);
    free(cmd), free(expect), free(knn), free(svm), free(fifo);
    rm_tree(dir);
}

/* ---- YAML nesting and width ------------------------------------------------------------------ */

/* `depth` nested flow lists around `inner`. */
static void put_nested(strbuf *sb, size_t depth, const char *inner)
{
    for (size_t k = 0; k < depth; k++)
        sb_putc(sb, '[');
    sb_puts(sb, inner);
    for (size_t k = 0; k < depth; k++)
        sb_putc(sb, ']');
}

/* `a:` followed by `depth` nested flow lists around a 1. */
static char *nested_yaml(size_t depth)
{
    strbuf sb = {0};
    sb_puts(&sb, "a: ");
    put_nested(&sb, depth, "1");
    sb_putc(&sb, '\n');
    return sb.s;
}

/* Whether err names `file:line:` and says `what`. */
static bool says(const cfg_err *err, const char *where, const char *what)
{
    return strstr(err->msg, where) && strstr(err->msg, what);
}

Test(limits, deep_nesting_is_refused_while_parsing, .timeout = 10)
{
    cfg_err err;
    char *text = nested_yaml(200000), *expect = xasprintf("nesting deeper than %d levels", CFG_MAX_DEPTH);
    cr_assert_null(cfg_parse_yaml(text, strlen(text), "deep.yaml", &err));
    cr_expect(says(&err, "deep.yaml:1:", expect), "%s", err.msg);
    free(text);
    /* The top map is level 0 and a's outermost list level 1: the 1 inside n lists is at n + 1. */
    text = nested_yaml(CFG_MAX_DEPTH - 1);
    cfg_node *root = cfg_parse_yaml(text, strlen(text), "ok.yaml", &err);
    cr_assert(root, "%s", err.msg);
    cfg_free(root);
    free(text);
    text = nested_yaml(CFG_MAX_DEPTH);
    cr_assert_null(cfg_parse_yaml(text, strlen(text), "over.yaml", &err));
    cr_expect(says(&err, "over.yaml:1:", expect), "%s", err.msg);
    free(text);
    free(expect);
}

Test(limits, an_alias_cannot_nest_past_the_limit_or_multiply_memory, .timeout = 20)
{
    /* 40 levels under the anchor, aliased 31 levels down: 72 in all. */
    strbuf sb = {0};
    sb_puts(&sb, "a: &x ");
    put_nested(&sb, 40, "1");
    sb_puts(&sb, "\nb: ");
    put_nested(&sb, 30, "*x");
    sb_putc(&sb, '\n');
    cfg_err err;
    cr_assert_null(cfg_parse_yaml(sb.s, sb.len, "alias.yaml", &err));
    cr_expect(says(&err, "alias.yaml:2:", "nesting deeper"), "%s", err.msg);
    sb_free(&sb);
    /* 60 anchored lists, one inside the other, around 100,000 scalars: each anchor keeps a
     * copy for its aliases, and the copies count against the node limit. */
    for (int k = 0; k < 60; k++)
        sb_printf(&sb, "%s&a%d [", k ? "" : "a: ", k);
    for (int k = 0; k < 100000; k++)
        sb_puts(&sb, "0,");
    for (int k = 0; k < 60; k++)
        sb_putc(&sb, ']');
    sb_putc(&sb, '\n');
    char *expect = xasprintf("more than %d nodes", CFG_MAX_NODES);
    cr_assert_null(cfg_parse_yaml(sb.s, sb.len, "anchors.yaml", &err));
    cr_expect(says(&err, "anchors.yaml:1:", expect), "%s", err.msg);
    sb_free(&sb);
    free(expect);
}

/* A config whose COLLATE_FUNCTION_PARAMS (an open map) holds `keys` keys, in flow style (short
 * lines keep the file small). */
static char *wide_config(size_t keys)
{
    strbuf sb = {0};
    sb_puts(&sb, "config:\n  DATA:\n    TRAIN:\n      COLLATE_FUNCTION_PARAMS: {");
    for (size_t k = 0; k < keys; k++)
        sb_printf(&sb, "%sk%zx: %zu", k ? ", " : "", k, k);
    sb_puts(&sb, "}\n");
    return sb.s;
}

Test(limits, too_many_keys_in_a_map_are_refused_while_parsing, .timeout = 10)
{
    char *text = wide_config(300000), *expect = xasprintf("more than %d keys", CFG_MAX_MAP_KEYS);
    cfg_err err;
    cr_assert_null(cfg_parse_yaml(text, strlen(text), "wide.yaml", &err));
    cr_expect(says(&err, "wide.yaml:4:", expect), "%s", err.msg);
    free(text);
    free(expect);
}

Test(limits, a_map_at_the_key_limit_composes_in_linear_time, .timeout = 30)
{
    char *text = wide_config(CFG_MAX_MAP_KEYS);
    cfg_t cfg;
    cfg_err err;
    cr_assert(test_compose(&cfg, &err, text, NULL), "%s", err.msg);
    const cfg_node *params = cfg_path(cfg.root, "config.DATA.TRAIN.COLLATE_FUNCTION_PARAMS");
    cr_assert(params && params->kind == CFG_MAP);
    cr_assert_eq(params->len, CFG_MAX_MAP_KEYS);
    char key[32];
    for (size_t k = 0; k < CFG_MAX_MAP_KEYS; k += 997) {
        snprintf(key, sizeof key, "k%zx", k);
        const cfg_node *v = cfg_map_get(params, key);
        cr_assert(v && v->kind == CFG_INT && v->i == (int64_t)k, "%s", key);
        cr_assert_str_eq(params->keys[k], key, "insertion order");
    }
    cfg_destroy(&cfg);
    free(text);
    text = wide_config(CFG_MAX_MAP_KEYS + 1);
    cr_assert_null(cfg_parse_yaml(text, strlen(text), "over.yaml", &err));
    free(text);
}

Test(limits, map_index_survives_deletes_replacements_and_copies)
{
    cfg_node *m = cfg_new(CFG_MAP, "t", 1);
    char key[32];
    for (int k = 0; k < 1000; k++) {
        snprintf(key, sizeof key, "key%d", k);
        cfg_map_set(m, key, cfg_new_int(k, "t", 1));
    }
    for (int k = 0; k < 1000; k += 2) {
        snprintf(key, sizeof key, "key%d", k);
        cr_assert(cfg_map_del(m, key));
    }
    cfg_map_set(m, "key1", cfg_new_int(-1, "t", 1)); /* replaced in place */
    cfg_node *c = cfg_copy(m);
    cr_assert_eq(m->len, 500);
    cr_assert(cfg_equal(m, c));
    for (int k = 0; k < 1000; k++) {
        snprintf(key, sizeof key, "key%d", k);
        const cfg_node *v = cfg_map_get(c, key);
        cr_assert(k % 2 ? v && v->i == (k == 1 ? -1 : k) : !v, "%s", key);
    }
    cr_assert_str_eq(m->keys[0], "key1");
    cr_assert_str_eq(m->keys[499], "key999");
    cfg_free(m);
    cfg_free(c);
}
