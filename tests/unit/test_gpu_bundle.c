/*
 * test_gpu_bundle.c — `make gpu-bundle` (tests/gpu/bundle.sh) and the environment the runbook
 * sets up from it (tests/gpu/env.sh), checked here because a GPU machine has no registry to
 * fetch a missing library from and no time to spare finding out.
 *
 * The bundle (made without its records, BUNDLE_DATA=0, to stay quick) must hold every binary
 * and the conformance test, the Debian libraries they link (oneDNN, ZeroMQ, ...), none of the
 * C library family nor CUDA's (the GPU machine brings its own, newer), and stay under the
 * 40 MiB a checkout can carry. env.sh must put the bundle's lib/ and bin/ first.
 */
#include "test_util.h"
#include "util.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The listing of a bundle made into dir, or NULL (with the failure reported). */
static char *make_bundle(const char *dir, off_t *size)
{
    char *script = test_path("tests/gpu/bundle.sh"), *build = test_build_path(""), *out = NULL;
    char *tar = xasprintf("%s/b.tar.xz", dir);
    char *cmd = xasprintf("BUNDLE_DATA=0 %s %s %s", script, build, tar);
    int status = test_run_within(cmd, 240, &out);
    cr_assert_eq(status, 0, "%s\n%s", cmd, out);
    struct stat st;
    cr_assert_eq(stat(tar, &st), 0);
    *size = st.st_size;
    free(out), free(cmd);
    cmd = xasprintf("tar -tJf %s", tar);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    free(cmd), free(tar), free(build), free(script);
    return out;
}

/* 185 s under ASan on 2 busy cores (xz of 100 MiB of sanitized binaries): room to spare. */
Test(gpu_bundle, holds_the_binaries_and_their_libraries_but_not_the_machines_own, .timeout = 600)
{
    char *dir = test_make_tmpdir();
    off_t size = 0;
    char *list = make_bundle(dir, &size);
    static const char *const WANTED[] = {"selfsup-gpu/bin/selfsup\n", "selfsup-gpu/bin/selfsup-train\n",
                                         "selfsup-gpu/bin/selfsup-extract\n", "selfsup-gpu/bin/backend-ops\n",
                                         "selfsup-gpu/bin/nccl-world\n", "selfsup-gpu/bin/selfsup-cluster\n",
                                         "selfsup-gpu/bin/selfsup-test-passthru\n",
                                         "selfsup-gpu/lib/libdnnl.so.2\n", "selfsup-gpu/lib/libzmq.so.5\n",
                                         "selfsup-gpu/lib/libyaml-0.so.2\n"};
    for (size_t i = 0; i < ARRAY_LEN(WANTED); i++)
        cr_expect(strstr(list, WANTED[i]), "missing %s", WANTED[i]);
    static const char *const UNWANTED[] = {"/libc.so", "/libstdc++", "/libm.so", "/libcudnn", "/libcublas",
                                           "/libnccl", "/libcuda.so", "/ld-linux"};
    for (size_t i = 0; i < ARRAY_LEN(UNWANTED); i++)
        cr_expect(!strstr(list, UNWANTED[i]), "the machine's own %s was bundled", UNWANTED[i]);
    cr_expect_lt(size, 40L << 20, "%lld bytes", (long long)size);
    free(list);
    test_rm_rf(dir);
    free(dir);
}

Test(gpu_bundle, env_puts_the_bundle_first)
{
    char *env = test_path("tests/gpu/env.sh"), *out = NULL;
    char *cmd = xasprintf("bash -c 'source %s /opt/b && echo \"$LD_LIBRARY_PATH\" && echo \"$PATH\"'", env);
    cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
    cr_expect(!strncmp(out, "/opt/b/lib:", 11), "%s", out);
    cr_expect(strstr(out, "\n/opt/b/bin:"), "%s", out);
    free(out), free(cmd), free(env);
}
