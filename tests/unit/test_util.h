/*
 * test_util.h — what the unit tests share: where the source tree is, and scratch files.
 */
#ifndef SELFSUP_TEST_UTIL_H
#define SELFSUP_TEST_UTIL_H

#include "config.h"
#include "npy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A path inside the source tree: $SELFSUP_SRC/rel, or ./rel (make runs tests from the top). */
char *test_path(const char *rel);
/* A golden fixture: tests/golden/fixtures/KIND/NAME in the source tree. */
char *test_fixture(const char *kind, const char *name);
/* The fixture tests/golden/fixtures/KIND/CASE_WHAT.npy, read whole (asserts it loads). */
npy_array test_fixture_npy(const char *kind, const char *kase, const char *what);
/* Number of elements of an array of this shape. */
size_t test_shape_count(int ndim, const size_t *shape);
/* The build directory ($SELFSUP_BUILD, else ./build), where the binaries are. */
char *test_build_path(const char *rel);
/* Write `text` to a fresh file named `name` in a private temporary directory. */
char *test_write_temp(const char *name, const char *text);
/* Remove what test_write_temp made (the file and its folder) and free the path. */
void test_remove_temp(char *path);
/* A fresh private directory under /tmp (malloc'd path). */
char *test_make_tmpdir(void);
/* Remove a flat directory of files and free its path. */
void test_rm_dir(char *dir);
/* Whether two files can be read and hold the same bytes. */
bool test_same_bytes(const char *a, const char *b);
/* Number of entries in a directory, dot files excluded. */
size_t test_count_files(const char *dir);
/* float -> IEEE half, for values a half holds exactly (the test patterns' values). */
uint16_t test_half_exact(float f);
/* Compose configs/defaults.yaml ← `yaml` text (may be NULL) ← a config file of the source tree
 * (file_rel, may be NULL), without checking that paths exist. */
bool test_compose(cfg_t *cfg, cfg_err *err, const char *yaml, const char *file_rel);
/* Run a command, capture stdout+stderr into *output (malloc'd); returns the exit status
 * (or 128+signal). */
int test_run(const char *cmd, char **output);
/* test_run with a limit of `seconds` instead of TEST_RUN_TIMEOUT_S. */
int test_run_within(const char *cmd, int seconds, char **output);
/* rm -rf DIR (a tree; test_rm_dir is for a flat one and frees its path). */
void test_rm_rf(const char *dir);
/* Wait up to timeout_ms for a child; kill it (SIGKILL) past that. Its exit status, or
 * 128 + the signal that ended it. */
int test_wait_child(int pid, int timeout_ms);
/* A TCP port on the loopback that was free a moment ago (bound to port 0, read back, let go). */
int test_free_port(void);
/* test_run's limit on one command (then it fails with 124 and whatever it printed). */
#define TEST_RUN_TIMEOUT_S 300

#endif
