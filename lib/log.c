/*
 * log.c — see log.h. One global: the stage name and level, set once at start-up.
 */
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *g_stage = "selfsup";
static log_level g_level = LOG_INFO;
static int g_level_from_env;

static const char *const LEVEL_NAMES[] = {"DEBUG", "INFO", "WARN", "ERROR"};

static void level_from_env(void)
{
    if (g_level_from_env)
        return;
    g_level_from_env = 1;
    const char *env = getenv("SELFSUP_LOG");
    if (!env)
        return;
    for (int i = LOG_DEBUG; i <= LOG_ERROR; i++)
        if (strcasecmp(env, LEVEL_NAMES[i]) == 0 || (i == LOG_WARN && !strcasecmp(env, "warning")))
            g_level = (log_level)i;
}

void log_init(const char *stage_name)
{
    if (stage_name)
        g_stage = stage_name;
    level_from_env();
}

void log_set_level(log_level level)
{
    g_level_from_env = 1;
    g_level = level;
}

log_level log_get_level(void)
{
    level_from_env();
    return g_level;
}

void log_vmsg(log_level level, const char *fmt, va_list ap)
{
    level_from_env();
    if (level < g_level)
        return;
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

void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(LOG_ERROR, fmt, ap);
    va_end(ap);
    exit(code);
}
