/*
 * log.h — logging and the error conventions every selfsup binary shares.
 *
 * Lines go to stderr as "TIME STAGE LEVEL message", so the logs of several processes
 * interleave readably; a command that a user types and reads at once (selfsup config,
 * keygen, inspect, dataset, convert) writes through the same calls as a command-line tool
 * does, "selfsup config: error: message" (log_init_command). The level comes from SELFSUP_LOG
 * (debug|info|warn|error).
 * Exit codes are the project's contract with scripts: 0 success, 1 runtime failure,
 * 2 usage or configuration error.
 *
 * The rule for errors, everywhere:
 *   - A mistake of the user's or of the data's (a bad option or config, an unreadable or broken
 *     file, a full disk, a dead peer) is reported, never asserted: functions return it as an
 *     error string (or a status with one) up to main, which logs it and exits with
 *     EXIT_USAGE (usage or configuration) or EXIT_RUNTIME (anything that went wrong while
 *     running), by name, never as a literal. die() is main's way out, and that of deep code
 *     that cannot go on and has no caller to tell (out of memory, a library that failed).
 *   - A broken invariant is a programming error, not a failure: shapes the caller promised
 *     and did not keep, an operation before its plan, an index past what a function was given.
 *     invariant_failed() logs it with its file and line and aborts, so that a core dump and a
 *     backtrace exist, and a script can tell a bug (SIGABRT) from a failed run (exit 1).
 */
#ifndef SELFSUP_LOG_H
#define SELFSUP_LOG_H

#include <stdarg.h>
#include <stdio.h>
#include <stdnoreturn.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;

void log_init(const char *stage_name); /* the stages' style, "TIME STAGE LEVEL message" */
/* From now on, lines read "COMMAND: message", "COMMAND: warning: message", "COMMAND: error:
 * message" (no time: the user is there), COMMAND being e.g. "selfsup config". */
void log_init_command(const char *command);
void log_set_level(log_level level);
log_level log_get_level(void);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(log_level level, const char *fmt, va_list ap);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* A command's refusal of its command line: log the error, then a blank line and the usage
 * (print_usage(stderr)); returns EXIT_USAGE for main to exit with. */
int log_usage_error(void (*print_usage)(FILE *), const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Log at ERROR level and exit with `code` (EXIT_RUNTIME or EXIT_USAGE). */
__attribute__((__noreturn__)) void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A broken invariant (see the rule above): log "bug at FILE:LINE: message" and abort(). */
#define invariant_failed(...) invariant_abort(__FILE__, __LINE__, __VA_ARGS__)
__attribute__((__noreturn__)) void invariant_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
