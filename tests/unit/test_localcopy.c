/*
 * test_localcopy.c — COPY_TO_LOCAL_DISK (stages/decode/localcopy.h), checked against VISSL's
 * copy_data_to_local rules: a directory lands in DEST/[SLURM_JOBID/]NAME with every file's
 * bytes and a `copy_complete` marker; a marked copy is used as it is (never re-copied); a file
 * lands in DEST/NAME; a copy that fails is an error, never a marker.
 */
#include "decode/localcopy.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static char *get(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[256] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return xstrndup(buf, n);
}

static void rm_rf(const char *dir)
{
    char *cmd = xasprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
}

/* src/data/{a.txt, cls/b.txt} with distinct contents. */
static char *make_tree(const char *root)
{
    char *data = xasprintf("%s/src/data", root), *p;
    char *src = xasprintf("%s/src", root);
    mkdir(src, 0755);
    mkdir(data, 0755);
    p = xasprintf("%s/cls", data), mkdir(p, 0755), free(p);
    p = xasprintf("%s/a.txt", data), put(p, "alpha"), free(p);
    p = xasprintf("%s/cls/b.txt", data), put(p, "bravo"), free(p);
    free(src);
    return data;
}

Test(localcopy, a_directory_is_copied_once_and_marked_complete)
{
    char *root = test_make_tmpdir();
    char *data = make_tree(root), *dest = xasprintf("%s/local", root);
    unsetenv("SLURM_JOBID");
    char why[512];
    char *got = local_copy(data, dest, 2, why, sizeof why);
    cr_assert(got, "%s", why);
    char *want = xasprintf("%s/data", dest);
    cr_assert_str_eq(got, want);
    char *p = xasprintf("%s/a.txt", got), *q = xasprintf("%s/cls/b.txt", got), *m = xasprintf("%s/copy_complete", got);
    char *a = get(p), *b = get(q);
    cr_assert(a && b && !strcmp(a, "alpha") && !strcmp(b, "bravo"));
    cr_assert_eq(access(m, F_OK), 0, "no copy_complete marker");
    free(a), free(b);
    /* A marked copy is used as it is: change the copy, copy again, the change stays. */
    put(p, "changed");
    free(got);
    got = local_copy(data, dest, 2, why, sizeof why);
    cr_assert(got, "%s", why);
    a = get(p);
    cr_assert_str_eq(a, "changed", "a complete copy was copied again");
    free(a), free(p), free(q), free(m), free(got), free(want), free(data), free(dest);
    rm_rf(root);
    free(root);
}

Test(localcopy, slurm_jobs_get_their_own_folder_and_files_copy_to_dest)
{
    char *root = test_make_tmpdir();
    char *data = make_tree(root), *dest = xasprintf("%s/local", root);
    setenv("SLURM_JOBID", "4242", 1);
    char why[512];
    char *got = local_copy(data, dest, 1, why, sizeof why);
    unsetenv("SLURM_JOBID");
    cr_assert(got, "%s", why);
    char *want = xasprintf("%s/4242/data", dest);
    cr_assert_str_eq(got, want);
    free(got), free(want);
    char *file = xasprintf("%s/a.txt", data);
    got = local_copy(file, dest, 1, why, sizeof why);
    cr_assert(got, "%s", why);
    want = xasprintf("%s/a.txt", dest);
    cr_assert_str_eq(got, want);
    char *a = get(got);
    cr_assert_str_eq(a, "alpha");
    free(a), free(got), free(want), free(file), free(data), free(dest);
    rm_rf(root);
    free(root);
}

Test(localcopy, a_failed_copy_is_an_error_without_a_marker)
{
    /* A directory sits where a file must go (a failure even root gets). */
    char *root = test_make_tmpdir();
    char *data = make_tree(root), *dest = xasprintf("%s/local", root);
    unsetenv("SLURM_JOBID");
    char *blocker = xasprintf("%s/data/a.txt/x", dest), *cmd = xasprintf("mkdir -p '%s'", blocker);
    cr_assert_eq(system(cmd), 0);
    char why[512];
    char *got = local_copy(data, dest, 2, why, sizeof why);
    cr_assert_null(got, "copied over a directory");
    cr_assert(strstr(why, "a.txt"), "%s", why);
    char *m = xasprintf("%s/data/copy_complete", dest);
    cr_assert_neq(access(m, F_OK), 0, "marker written after a failed copy");
    cr_assert_null(local_copy("/nonexistent/selfsup", dest, 1, why, sizeof why));
    cr_assert(strstr(why, "/nonexistent/selfsup"), "%s", why);
    free(m), free(cmd), free(blocker), free(data), free(dest);
    rm_rf(root);
    free(root);
}
