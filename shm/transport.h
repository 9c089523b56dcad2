/*
 * transport.h — one way to move records between stages, whatever carries them.
 *
 * A stage reads from one transport and writes to another, each named by a URI:
 *
 *   shm:NAME        a shared-memory ring (ring.h): zero-copy, records built and read in place
 *   -               framed records on stdin (--in) or stdout (--out), for shell pipelines
 *   file:PATH       a file of records, to cache a stream and replay it
 *   tcp://HOST:PORT ZeroMQ PUSH/PULL between machines; the reading side binds, the writing
 *                   side connects (so many decode nodes can feed one trainer node); the
 *                   high-water marks are the ring depth, so a slow reader holds writers back;
 *                   always CURVE with keys (tp_options), so only listed writers get in
 *
 * The same record bytes travel on all four. The byte transports (-, file:, tcp://) end a
 * stream with an explicit REC_EOS record that counts the records sent and says whether the
 * writer finished or was stopped, so a reader can tell a producer that finished from one that
 * died or was stopped: a pipe or file that ends without it, an end marked stopped, a count
 * that is not what arrived, or records after it are errors (TP_ERROR), never a short stream;
 * so a reader of a pipe reports the end (TP_EOS) only once its writer has closed the pipe.
 * A tcp reader counts one EOS per producer (`?producers=N`, default 1) before it reports the
 * end, and fails when every writer has disconnected without one. A tcp reader opened with
 * `?open` (the decode farm's collate) never ends on its own: writers come and go, an EOS
 * ends nothing and writers that vanish are no error, because the reading stage knows from
 * elsewhere (its lease book) when every record it needs has come. Its writers open their
 * side with `?open` too: their end-of-stream record is sent if it is taken within a second,
 * and a writer whose reader has left for good finds no readers (TP_NO_READERS) and stops
 * quietly instead of waiting. A stopped writer of a ring
 * marks it stopped (ring_stop); a stopped writer of a file: leaves no file.
 *
 * Writing is two-step everywhere: tp_write_begin hands out a 64-byte-aligned buffer of
 * `slot_bytes` (the ring slot itself for shm:, a private buffer for the others) in which
 * the caller builds its record with rec_writer; tp_write_end sends it. Reading hands out a
 * validated rec_view that stays valid until tp_read_done.
 *
 * Every wait is bounded by timeout_ms so that a stage can send heartbeats and notice a stop
 * request while it waits; TP_TIMEOUT means "nothing yet, call again". tp_write_end over tcp
 * may return TP_TIMEOUT too (no reader took the record yet): call it again with the same len.
 */
#ifndef SELFSUP_TRANSPORT_H
#define SELFSUP_TRANSPORT_H

#include "record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    TP_OK = 0,
    TP_EOS = 1,        /* read: the stream ended cleanly */
    TP_TIMEOUT = 2,    /* nothing happened within timeout_ms */
    TP_ERROR = -1,     /* see tp_error() */
    TP_NO_READERS = -2 /* write: nobody will ever read what we write (reader gone) */
} tp_status;

typedef enum { TP_IN, TP_OUT } tp_direction;

typedef struct {
    size_t slot_bytes;    /* largest record this side writes or accepts */
    uint32_t depth;       /* ring slots / ZeroMQ high-water mark */
    uint32_t producers;   /* shm: producers a ring made by this side expects; tcp: EOS count */
    int attach_wait_ms;   /* shm reader: how long to wait for the ring to appear */
    /* tcp: every connection is CURVE, authenticated both ways (auth.h); plain tcp is refused.
     * A reader, which binds, needs server_keys_dir: its keypair and the allow-list of writers
     * (`selfsup keygen DIR --clients ...`). A writer, which connects, needs client_key_file:
     * its keypair and the reader's public key (DIR/NAME.key). */
    const char *server_keys_dir;
    const char *client_key_file;
} tp_options;

typedef struct transport transport;

/* Open `uri` for reading or writing. An shm: writer creates the ring when it does not exist
 * yet (with opt's geometry) and attaches otherwise; an shm: reader attaches, waiting up to
 * attach_wait_ms. NULL with *err on failure (unknown scheme, unreachable, bad name). */
transport *tp_open(const char *uri, tp_direction dir, const tp_options *opt, char **err);
/* Check a URI's syntax without opening it (for argument parsing). 0 or -1 with *err. */
int tp_check_uri(const char *uri, char **err);

tp_status tp_read(transport *t, rec_view *view, int timeout_ms);
void tp_read_done(transport *t);

tp_status tp_write_begin(transport *t, void **buf, size_t *cap, int timeout_ms);
tp_status tp_write_end(transport *t, size_t len);
void tp_write_abort(transport *t);

/* Writer: end the stream as finished (EOS record or producer close). Reader: detach. Then
 * free. Returns TP_OK or TP_ERROR (e.g. the EOS could not be written); frees in any case. */
tp_status tp_close(transport *t);
/* Writer: end the stream as stopped before it was complete (a signal, a stop request): an
 * EOS marked stopped, a ring marked stopped, a file: output not committed. Readers fail on
 * it and know why (tp_peer_stopped). Then free. A reader just closes. */
tp_status tp_stop(transport *t);
/* Close after a failure: no EOS is sent, so readers learn that the stream broke. */
void tp_abandon(transport *t);

const char *tp_error(const transport *t);
/* Whether the last error came from the other side (a ring broken by a peer that failed or
 * died, a stream cut short): the cause of the failure is elsewhere. */
bool tp_peer_failed(const transport *t);
/* Whether that failure was a writer that was stopped (its stream is short, not spoiled). */
bool tp_peer_stopped(const transport *t);
const char *tp_uri(const transport *t);
/* For shm: the ring (fill level, data area for cudaHostRegister); NULL for the others. */
struct ring *tp_ring(const transport *t);

#endif
