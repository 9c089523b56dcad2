/*
 * test_util.c — see test_util.h.
 */
#include "test_util.h"

#include "util.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

char *test_path(const char *rel)
{
    const char *root = getenv("SELFSUP_SRC");
    return path_join(root && *root ? root : ".", rel);
}

char *test_fixture(const char *kind, const char *name)
{
    char *rel = xasprintf("tests/golden/fixtures/%s/%s", kind, name);
    char *path = test_path(rel);
    free(rel);
    return path;
}

size_t test_shape_count(int ndim, const size_t *shape)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

char *test_build_path(const char *rel)
{
    const char *build = getenv("SELFSUP_BUILD");
    return path_join(build && *build ? build : "build", rel);
}

char *test_make_tmpdir(void)
{
    /* Named after the test that made it, so that one left behind says whose it is; cut short,
     * for the Unix sockets some tests make inside (107 bytes at most). The trailing XXXXXX is
     * mkdtemp's template, which it replaces. */
    const struct criterion_test *t = criterion_current_test;
    char *tag = t ? xasprintf("%s.%s", t->category, t->name) : xstrdup("");
    char *dir = xasprintf("/tmp/selfsup-test-%.24s-XXXXXX", tag);
    free(tag);
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    return dir;
}

void test_rm_dir(char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            char *p = path_join(dir, e->d_name);
            unlink(p);
            free(p);
        }
    }
    if (d)
        closedir(d);
    rmdir(dir);
    free(dir);
}

size_t test_count_files(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

char *test_write_temp(const char *name, const char *text)
{
    char *dir = test_make_tmpdir();
    char *path = path_join(dir, name);
    free(dir);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

void test_remove_temp(char *path)
{
    remove(path);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    rmdir(path);
    free(path);
}

int test_run(const char *cmd, char **output) { return test_run_within(cmd, TEST_RUN_TIMEOUT_S, output); }

int test_run_within(const char *cmd, int seconds, char **output)
{
    /* Under timeout(1): a stage that hangs fails its test (exit 124, with its output)
     * instead of holding the whole suite; Criterion's own timeout kills the test but not
     * the processes it started. */
    strbuf quoted = {0};
    for (const char *c = cmd; *c; c++)
        if (*c == '\'')
            sb_puts(&quoted, "'\\''");
        else
            sb_putc(&quoted, *c);
    char *full = xasprintf("timeout -k 10 %d sh -c '%s' 2>&1", seconds, sb_str(&quoted));
    sb_free(&quoted);
    FILE *p = popen(full, "r");
    free(full);
    cr_assert(p, "popen failed");
    strbuf sb = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        sb_putn(&sb, buf, n);
    int status = pclose(p);
    *output = sb.s ? sb.s : xstrdup("");
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

uint16_t test_half_exact(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
    if ((b & 0x7fffffff) == 0)
        return sign;
    int exp = (int)((b >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (unsigned)exp << 10 | ((b >> 13) & 0x3ff));
}

bool test_compose(cfg_t *cfg, cfg_err *err, const char *yaml, const char *file_rel)
{
    char *file = yaml ? test_write_temp("config.yaml", yaml) : test_path(file_rel);
    char *dir = test_path("configs");
    cfg_options opt = {.configs_dir = dir, .check_paths = false};
    bool ok = cfg_compose(cfg, &opt, file, 0, NULL, err);
    if (yaml)
        test_remove_temp(file);
    else
        free(file);
    free(dir);
    return ok;
}

npy_array test_fixture_npy(const char *kind, const char *kase, const char *what)
{
    char *file = xasprintf("%s_%s.npy", kase, what), *path = test_fixture(kind, file), *err = NULL;
    npy_array a;
    cr_assert_eq(npy_read(path, &a, &err), 0, "%s: %s", path, err);
    free(path);
    free(file);
    return a;
}

void test_rm_rf(const char *dir)
{
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
}

int test_wait_child(int pid, int timeout_ms)
{
    int status = 0;
    for (int waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited += 10) {
        if (waited >= timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

bool test_same_bytes(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = read_whole_file(a, &na), *y = read_whole_file(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return same;
}
