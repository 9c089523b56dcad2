/*
 * proc.h — is a process that registered itself in shared memory still the one running?
 *
 * A pid alone can be recycled by a newer process; a pid and its start time (field 22 of
 * /proc/PID/stat, clock ticks after boot) cannot. The rings and the collectives register
 * (pid, start time) for every process that attaches, and ask proc_gone() when a peer they
 * wait for is slow.
 */
#ifndef SELFSUP_PROC_H
#define SELFSUP_PROC_H

#include <stdint.h>
#include <sys/types.h>

/* Fields 3 (state) and 22 (start time) of /proc/PID/stat. Returns 0, or an errno. */
int proc_read_stat(pid_t pid, char *state, uint64_t *start_time);

/* Why the process registered as (pid, start_time) no longer runs ("exited", "exited (a zombie
 * now)", ...), or NULL if it does (or /proc is hidden from us and kill() says it runs). */
const char *proc_gone(pid_t pid, uint64_t start_time);

#endif
