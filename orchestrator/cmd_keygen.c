/*
 * cmd_keygen.c — `selfsup keygen [--force] FILE`: write a new CURVE keypair for the control
 * plane (SELFSUP.CONTROL.CURVE_KEY_FILE).
 *
 * The file holds two Z85 lines, "public KEY" and "secret KEY", mode 0600, written atomically
 * by ctl_keygen (shm/control.h). The orchestrator reads both; stages on other nodes need a
 * copy too (or a copy with only the public line). An existing file is kept unless --force,
 * since replacing it locks out every node that still has the old one.
 *
 * Exit codes: 0 written, 1 it could not be written (or libzmq lacks CURVE), 2 usage errors,
 * including a file that exists without --force.
 */
#include "cmd.h"

#include "control.h"
#include "log.h"
#include "util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void keygen_usage(FILE *out)
{
    fputs("usage: selfsup keygen [--force] FILE\n"
          "\n"
          "Write a new CURVE keypair for the control plane to FILE (mode 0600): the lines\n"
          "'public KEY' and 'secret KEY'. Point SELFSUP.CONTROL.CURVE_KEY_FILE at it to encrypt\n"
          "and authenticate tcp control connections.\n"
          "\n"
          "options:\n"
          "  --force   replace FILE if it exists\n"
          "  --help    show this help\n", out);
}

int cmd_keygen(int argc, char **argv)
{
    const char *path = NULL;
    bool force = false, options_done = false;
    for (int k = 1; k < argc; k++) {
        const char *arg = argv[k];
        if (!options_done && (!strcmp(arg, "--help") || !strcmp(arg, "-h"))) {
            keygen_usage(stdout);
            return 0;
        } else if (!options_done && (!strcmp(arg, "--force") || !strcmp(arg, "-f"))) {
            force = true;
        } else if (!options_done && !strcmp(arg, "--")) {
            options_done = true;
        } else if (!options_done && arg[0] == '-' && arg[1]) {
            fprintf(stderr, "selfsup keygen: unknown option '%s'\n", arg);
            return EXIT_USAGE;
        } else if (!path) {
            path = arg;
        } else {
            fprintf(stderr, "selfsup keygen: one FILE only ('%s' is extra)\n", arg);
            return EXIT_USAGE;
        }
    }
    if (!path || !*path) {
        keygen_usage(stderr);
        return EXIT_USAGE;
    }
    if (!force && path_exists(path)) {
        fprintf(stderr, "selfsup keygen: %s exists; use --force to replace it\n", path);
        return EXIT_USAGE;
    }
    char *err = NULL;
    if (ctl_keygen(path, &err) < 0) {
        fprintf(stderr, "selfsup keygen: %s\n", err);
        free(err);
        return EXIT_RUNTIME;
    }
    fprintf(stderr, "selfsup keygen: wrote a CURVE keypair to %s (mode 0600)\n", path);
    return 0;
}
