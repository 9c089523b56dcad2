/*
 * test_log.c — lib/log.c's way out for a bug (the error rule written in lib/log.h):
 * invariant_failed() aborts, naming its file and line, so that a script can tell a broken
 * invariant (SIGABRT, a core dump) from a failed run (exit 1).
 */
#include "log.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Test(log, a_broken_invariant_aborts_naming_its_file_and_line)
{
    FILE *err = tmpfile();
    cr_assert(err);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fileno(err), STDERR_FILENO);
        invariant_failed("a test's deliberate bug: %d != %d", 1, 2);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %#x", status);
    char line[512] = "";
    rewind(err);
    cr_assert(fgets(line, sizeof line, err));
    cr_expect(strstr(line, "bug at tests/unit/test_log.c:"), "%s", line);
    cr_expect(strstr(line, "a test's deliberate bug: 1 != 2"), "%s", line);
    fclose(err);
}
