/*
 * log.c — see log.h. One global: the stage name and level, set once at start-up.
 */
#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *g_stage = "selfsup";
static bool g_command_style; /* log_init_command: "COMMAND: level: message", no time */
/* Threads log too (the ZAP handler of shm/auth.c, a stage's workers): the level is an atomic
 * and SELFSUP_LOG is read once, by whichever thread logs first (ThreadSanitizer found the
 * unsynchronised lazy read). */
static atomic_int g_level = LOG_INFO;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static const char *const LEVEL_NAMES[] = {"DEBUG", "INFO", "WARN", "ERROR"};

static void read_env_level(void)
{
    const char *env = getenv("SELFSUP_LOG");
    if (!env)
        return;
    for (int i = LOG_DEBUG; i <= LOG_ERROR; i++)
        if (strcasecmp(env, LEVEL_NAMES[i]) == 0 || (i == LOG_WARN && !strcasecmp(env, "warning")))
            atomic_store_explicit(&g_level, i, memory_order_relaxed);
}

static void level_from_env(void)
{
    pthread_once(&g_env_once, read_env_level);
}

void log_init(const char *stage_name)
{
    if (stage_name)
        g_stage = stage_name;
    g_command_style = false;
    level_from_env();
}

void log_init_command(const char *command)
{
    log_init(command);
    g_command_style = true;
}

void log_set_level(log_level level)
{
    level_from_env(); /* so that SELFSUP_LOG, read later, cannot override this */
    atomic_store_explicit(&g_level, (int)level, memory_order_relaxed);
}

log_level log_get_level(void)
{
    level_from_env();
    return (log_level)atomic_load_explicit(&g_level, memory_order_relaxed);
}

void log_vmsg(log_level level, const char *fmt, va_list ap)
{
    if (level < log_get_level())
        return;
    if (g_command_style) {
        static const char *const WORDS[] = {"debug: ", "", "warning: ", "error: "};
        char msg[4096];
        vsnprintf(msg, sizeof msg, fmt, ap);
        fprintf(stderr, "%s: %s%s\n", g_stage, WORDS[level], msg);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    /* One fprintf per line keeps lines whole when several processes share stderr. */
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "%s.%03ld %s %s %s\n", when, ts.tv_nsec / 1000000, g_stage,
            LEVEL_NAMES[level], msg);
}

void log_msg(log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}

int log_usage_error(void (*print_usage)(FILE *), const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(LOG_ERROR, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    print_usage(stderr);
    return EXIT_USAGE;
}

void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(LOG_ERROR, fmt, ap);
    va_end(ap);
    exit(code);
}

void invariant_abort(const char *file, int line, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    log_msg(LOG_ERROR, "bug at %s:%d: %s", file, line, what);
    abort();
}
