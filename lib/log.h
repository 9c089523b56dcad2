/*
 * log.h — logging and the error conventions every selfsup binary shares.
 *
 * Lines go to stderr as "TIME STAGE LEVEL message", so the logs of several processes
 * interleave readably. The level comes from SELFSUP_LOG (debug|info|warn|error).
 * Exit codes are the project's contract with scripts: 0 success, 1 runtime failure,
 * 2 usage or configuration error.
 */
#ifndef SELFSUP_LOG_H
#define SELFSUP_LOG_H

#include <stdarg.h>
#include <stdnoreturn.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;

void log_init(const char *stage_name);
void log_set_level(log_level level);
log_level log_get_level(void);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(log_level level, const char *fmt, va_list ap);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* Log at ERROR level and exit with `code`. */
__attribute__((__noreturn__)) void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
