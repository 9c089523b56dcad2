/*
 * farm_server.h — the trainer's side of the decode farm: selfsup-collate --lease-serve
 * deals leases of sampler positions (leases.h) to the farm hosts' selfsup-decode --lease,
 * and reads their crops from a tcp:// ...?open input.
 *
 * The lease protocol is the control plane's (control.h): one JSON object per message over
 * a ZeroMQ ROUTER (here) and DEALER (each farm host's decode stage), CURVE on tcp with an
 * allow-list whose entries may claim "farm.*" ids.
 *
 *   host → server
 *     {"type":"hello", "id":"farm.1", "samples":N}   N: the epoch's length in the rank's
 *                                                     sampler order, as the host's dataset has it
 *     {"type":"want"}                                 give me a lease (one question at a time)
 *     {"type":"beat"}                                 I am alive (once a second)
 *     {"type":"bye"}                                  I am finished
 *   server → host
 *     {"type":"lease", "lease":K, "epoch":E, "start":S, "end":T}
 *     {"type":"wait"}      nothing for you now: ask again shortly
 *     {"type":"done"}      every sample of the run has arrived: finish
 *     {"type":"refused", "why":"..."}                 e.g. a dataset of another length
 *     {"type":"beat"}      the answer to a beat: the trainer's side is alive
 *
 * A host silent for SELFSUP.FARM.HOST_TIMEOUT_S is lost, and the samples of its leases that
 * have not arrived are dealt again (leases.h). Once hosts have joined and none is left while
 * samples are still owed, the server gives up (STAGE_HOOK_PEERS_LOST): collate's output ends
 * as stopped, so the trainer keeps its state.
 */
#ifndef SELFSUP_FARM_SERVER_H
#define SELFSUP_FARM_SERVER_H

#include "collate/leases.h"
#include "stage.h"

typedef struct farm_server farm_server;

/* Bind `endpoint` (tcp needs keys_dir: auth.h's server key directory). NULL + *err. */
farm_server *farm_server_open(const char *endpoint, const char *keys_dir, const lease_plan *plan,
                              double host_timeout_s, stage *s, char **err);
/* Answer what the hosts said, judge the silent ones; a stage poll hook (stage.h). */
int farm_server_poll(void *server);
/* A sample reached collate: 1 new; 0 to drop it: a duplicate, or a sample no lease covered
 * (logged, the first few, and counted as "stray_samples"). */
int farm_server_received(farm_server *f, uint32_t epoch, uint64_t pos);
/* Collate has written every batch before position `pos` of `epoch` (the window moves on). */
void farm_server_consumed(farm_server *f, uint32_t epoch, uint64_t pos);
bool farm_server_done(const farm_server *f);
/* Tell the live hosts the run is done (when it is: they show as "done"), log the totals,
 * unbind. The stage's reports still show the hosts (stage_set_report_hook) until
 * farm_server_free, after stage_main. Both safe on NULL. */
void farm_server_finish(farm_server *f);
/* How many farm hosts the run has (SELFSUP.FARM.NODES; 0: not known). At the end,
 * farm_server_finish waits up to SELFSUP.FARM.HOST_TIMEOUT_S for each of them to be told
 * that the run is done: one that came late would otherwise wait for a server that is gone. */
void farm_server_expect_hosts(farm_server *f, int hosts);
void farm_server_free(farm_server *f);

#endif
