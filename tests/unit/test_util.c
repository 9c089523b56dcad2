/*
 * test_util.c — see test_util.h.
 */
#include "test_util.h"

#include "util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

char *test_path(const char *rel)
{
    const char *root = getenv("SELFSUP_SRC");
    return path_join(root && *root ? root : ".", rel);
}

char *test_build_path(const char *rel)
{
    const char *build = getenv("SELFSUP_BUILD");
    return path_join(build && *build ? build : "build", rel);
}

char *test_write_temp(const char *name, const char *text)
{
    char dir[] = "/tmp/selfsup-test-XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp failed");
    char *path = path_join(dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

int test_run(const char *cmd, char **output)
{
    char *full = xasprintf("(%s) 2>&1", cmd);
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
