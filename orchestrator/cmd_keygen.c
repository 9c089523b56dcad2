/*
 * cmd_keygen.c — `selfsup keygen [--force] DIR --clients NAME[:IDS]...`: the CURVE keys that
 * a tcp endpoint needs (auth.h); `selfsup keygen [--force] FILE`: one keypair.
 *
 * Every tcp endpoint, control or data, is encrypted and admits only the client keys on its
 * allow-list. For one server (the orchestrator, or a tcp data reader) and its clients, DIR
 * gets the server's keypair (server.key), the allow-list (clients: each client's public key and
 * the control-plane ids it may claim) and one key file per client (NAME.key: its keypair and
 * the server's public key), so that each node receives exactly its own file. Secrets are
 * written mode 0600, atomically, in a directory made 0700.
 *
 * Existing keys are kept unless --force, since replacing them locks out every node that still
 * has the old ones. Everything is checked before anything is written.
 *
 * Exit codes: 0 written, 1 it could not be written (or libzmq lacks CURVE), 2 usage errors,
 * including keys that exist without --force.
 */
#include "cmd.h"

#include "auth.h"
#include "log.h"
#include "util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CLIENT_NAME_MAX = 64 };

typedef struct {
    const char *path;  /* DIR or FILE */
    char **clients;    /* NAME[:IDS] arguments after --clients */
    int n_clients;
    bool force, with_clients;
} keygen_args;

static void keygen_usage(FILE *out)
{
    fputs("usage: selfsup keygen [--force] DIR --clients NAME[:IDS] [NAME[:IDS] ...]\n"
          "       selfsup keygen [--force] FILE\n"
          "\n"
          "Make the CURVE keys a tcp endpoint needs: every tcp endpoint is encrypted, and admits\n"
          "only the clients on its allow-list, each with the control-plane ids it may use.\n"
          "\n"
          "For one server (the orchestrator; or a tcp data reader) and its clients, DIR gets:\n"
          "  DIR/server.key   the server's keypair (mode 0600): stays on the server's node\n"
          "  DIR/clients      the allow-list: each client's public key and ids\n"
          "  DIR/NAME.key     per client (mode 0600): its keypair and the server's public key;\n"
          "                   copy it to that client's node only\n"
          "The server's config names DIR (SELFSUP.CONTROL.SERVER_KEYS_DIR, or\n"
          "SELFSUP.TRANSPORT.SERVER_KEYS_DIR for a data reader); each client's names its file\n"
          "(SELFSUP.CONTROL.CLIENT_KEY_FILE, or SELFSUP.TRANSPORT.CLIENT_KEY_FILE for a writer).\n"
          "IDS: the stage ids that client may claim, comma-separated, '*' matching any\n"
          "characters (node2:decode.*,augment.*,collate.*); default NAME. `selfsup run` makes\n"
          "keys for the stages it starts itself: only other nodes' stages need these.\n"
          "\n"
          "Without --clients, FILE gets one keypair (mode 0600), e.g. a new DIR/server.key.\n"
          "\n"
          "options:\n"
          "  --force   replace existing keys (every node holding the old ones is locked out)\n"
          "  --help    show this help\n",
          out);
}

/* Returns -1 to go on, else the exit status (help, usage error). */
static int parse_keygen_args(int argc, char **argv, keygen_args *a)
{
    bool options_done = false;
    for (int k = 1; k < argc; k++) {
        const char *arg = argv[k];
        if (!options_done && (!strcmp(arg, "--help") || !strcmp(arg, "-h"))) {
            keygen_usage(stdout);
            return 0;
        } else if (!options_done && (!strcmp(arg, "--force") || !strcmp(arg, "-f"))) {
            a->force = true;
        } else if (!options_done && !strcmp(arg, "--clients")) {
            a->with_clients = true;
        } else if (!options_done && !strcmp(arg, "--")) {
            options_done = true;
        } else if (!options_done && arg[0] == '-' && arg[1]) {
            log_error("unknown option '%s'", arg);
            return EXIT_USAGE;
        } else if (!a->path) {
            a->path = arg;
        } else if (a->with_clients) {
            a->clients[a->n_clients++] = argv[k];
        } else {
            log_error("one FILE only ('%s' is extra; for a key directory, list the "
                      "clients after --clients)",
                      arg);
            return EXIT_USAGE;
        }
    }
    if (!a->path || !*a->path || (a->with_clients && a->n_clients == 0)) {
        keygen_usage(stderr);
        return EXIT_USAGE;
    }
    return -1;
}

/* A client NAME becomes a file name: letters, digits, '.', '_', '-', not starting with '.'. */
static bool valid_client_name(const char *name, size_t len)
{
    if (len == 0 || len > CLIENT_NAME_MAX || name[0] == '.' || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM"
                                                                           "NOPQRSTUVWXYZ0123456789._-") < len)
        return false;
    return !(len == 6 && !strncmp(name, "server", 6)) && !(len == 7 && !strncmp(name, "clients", 7));
}

/* Split "NAME[:IDS]" into name and ids (malloc'd); EXIT_USAGE with a message if it is bad. */
static int parse_client(const char *spec, char **name, char **ids)
{
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (!valid_client_name(spec, len)) {
        log_error("client '%s': a NAME is 1 to %d letters, digits, '.', '_' or '-' (not "
                  "starting with '.'; not 'server' or 'clients')",
                  spec, CLIENT_NAME_MAX);
        return EXIT_USAGE;
    }
    *name = xstrndup(spec, len);
    *ids = xstrdup(colon ? colon + 1 : *name);
    if (auth_ids_valid(*ids))
        return 0;
    log_error("client '%s': IDS must be a comma-separated list of ids such as train.0 or "
              "decode.*",
              spec);
    free(*name);
    free(*ids);
    *name = *ids = NULL;
    return EXIT_USAGE;
}

/* The files of a key directory that exist already: refused without --force. */
static int check_existing(const keygen_args *a, char **names)
{
    for (int i = -2; i < a->n_clients; i++) {
        char *file = i == -2 ? xstrdup("server.key") : i == -1 ? xstrdup("clients") : xasprintf("%s.key", names[i]);
        char *path = path_join(a->path, file);
        bool exists = path_exists(path);
        if (exists)
            log_error("%s exists; use --force to replace the keys (nodes holding the old "
                      "ones are then locked out)",
                      path);
        free(file);
        free(path);
        if (exists)
            return EXIT_USAGE;
    }
    return 0;
}

/* Every client's key file, then the allow-list, then the server's keypair. */
static int write_key_dir(const keygen_args *a, char **names, char **ids, char **err)
{
    auth_keys server, k;
    auth_allow allow = {0};
    int rc = make_dirs(a->path, 0700, err);
    if (rc == 0)
        rc = auth_new_keys(&server, NULL, err);
    for (int i = 0; rc == 0 && i < a->n_clients; i++) {
        char *file = xasprintf("%s.key", names[i]), *path = path_join(a->path, file);
        rc = auth_new_keys(&k, server.public_key, err);
        if (rc == 0 && (rc = auth_write_keys(path, &k, err)) == 0)
            rc = auth_allow_add(&allow, k.public_key, ids[i], names[i], err);
        auth_wipe(&k);
        free(file);
        free(path);
    }
    char *clients = path_join(a->path, "clients"), *key = path_join(a->path, "server.key");
    if (rc == 0 && (rc = auth_write_allow(clients, &allow, err)) == 0)
        rc = auth_write_keys(key, &server, err);
    auth_wipe(&server);
    auth_allow_free(&allow);
    free(clients);
    free(key);
    return rc;
}

static int keygen_dir(const keygen_args *a)
{
    char **names = xcalloc((size_t)a->n_clients, sizeof *names), **ids = xcalloc((size_t)a->n_clients, sizeof *ids);
    int status = 0;
    for (int i = 0; status == 0 && i < a->n_clients; i++) {
        status = parse_client(a->clients[i], &names[i], &ids[i]);
        for (int j = 0; status == 0 && j < i; j++)
            if (!strcmp(names[i], names[j])) {
                log_error("client '%s' is listed twice", names[i]);
                status = EXIT_USAGE;
            }
    }
    if (status == 0 && !a->force)
        status = check_existing(a, names);
    char *err = NULL;
    if (status == 0 && write_key_dir(a, names, ids, &err) < 0) {
        log_error("%s", err);
        status = EXIT_RUNTIME;
    }
    if (status == 0)
        log_info("wrote %s/server.key (keep it on the server's node), %s/clients (%d "
                 "clients) and a NAME.key per client (copy each to its node only)",
                 a->path, a->path, a->n_clients);
    for (int i = 0; i < a->n_clients; i++) {
        free(names[i]);
        free(ids[i]);
    }
    free(names);
    free(ids);
    free(err);
    return status;
}

static int keygen_file(const keygen_args *a)
{
    if (!a->force && path_exists(a->path)) {
        log_error("%s exists; use --force to replace it", a->path);
        return EXIT_USAGE;
    }
    auth_keys k;
    char *err = NULL;
    int rc = auth_new_keys(&k, NULL, &err);
    if (rc == 0)
        rc = auth_write_keys(a->path, &k, &err);
    auth_wipe(&k);
    if (rc < 0) {
        log_error("%s", err);
        free(err);
        return EXIT_RUNTIME;
    }
    log_info("wrote a CURVE keypair to %s (mode 0600)", a->path);
    return 0;
}

int cmd_keygen(int argc, char **argv)
{
    keygen_args a = {.clients = xcalloc((size_t)argc + 1, sizeof *a.clients)};
    int status = parse_keygen_args(argc, argv, &a);
    if (status < 0)
        status = a.with_clients ? keygen_dir(&a) : keygen_file(&a);
    free(a.clients);
    return status;
}
