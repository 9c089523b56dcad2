/*
 * reader.c — whole-file reads in sampler order, `depth` of them in flight through io_uring.
 *
 * The slots form a ring in push order. A push opens the file and fstats it right away
 * (cheap, and it tells the size to allocate), then queues one IORING_OP_READ for the whole
 * file; a completion that read less than asked (big files, signals) is queued again for the
 * rest. A pop waits on completions until the oldest slot is done: the order the caller sees
 * never depends on the order the disk answers in. Without io_uring the same interface reads
 * synchronously with pread at pop time.
 *
 * Open uses O_NONBLOCK so that a FIFO named like an image cannot hang the stage, and fstat
 * refuses anything that is not a regular file.
 */
#include "reader.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *path;
    uint64_t tag;
    int fd;
    uint8_t *data;
    size_t size, got;
    int error;
    bool done;
} slot;

struct decode_reader {
    bool uring;
    struct io_uring ring;
    slot *slots;
    unsigned depth, head, count; /* ring of `count` slots from `head` */
};

decode_reader *decode_reader_new(unsigned depth, bool force_pread)
{
    decode_reader *r = xcalloc(1, sizeof *r);
    r->depth = depth ? depth : 1;
    r->slots = xcalloc(r->depth, sizeof *r->slots);
    if (!force_pread) {
        int rc = io_uring_queue_init(r->depth, &r->ring, 0);
        r->uring = rc == 0;
        if (rc != 0)
            log_info("io_uring is not available (%s); reading files with pread", strerror(-rc));
    }
    return r;
}

void decode_reader_free(decode_reader *r)
{
    if (!r)
        return;
    decode_file f;
    while (decode_reader_pop(r, &f) == 1) /* let in-flight reads land before freeing their buffers */
        free(f.data);
    if (r->uring)
        io_uring_queue_exit(&r->ring);
    free(r->slots);
    free(r);
}

bool decode_reader_uses_io_uring(const decode_reader *r)
{
    return r->uring;
}

unsigned decode_reader_room(const decode_reader *r)
{
    return r->depth - r->count;
}

static void finish(slot *s, int error)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    s->error = error;
    s->done = true;
}

/* Open and size the file; false (slot finished with an error) when it cannot be read. */
static bool open_sized(slot *s)
{
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (s->fd < 0) {
        finish(s, errno);
        return false;
    }
    struct stat st;
    if (fstat(s->fd, &st) != 0) {
        finish(s, errno);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        finish(s, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
        return false;
    }
    if ((uint64_t)st.st_size > DECODE_READER_MAX_FILE) {
        finish(s, EFBIG);
        return false;
    }
    s->size = (size_t)st.st_size;
    s->data = malloc(s->size ? s->size : 1);
    if (!s->data) {
        finish(s, ENOMEM);
        return false;
    }
    if (s->size == 0) {
        finish(s, 0);
        return false;
    }
    return true;
}

static void queue_read(decode_reader *r, unsigned index)
{
    slot *s = &r->slots[index];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) { /* cannot happen: at most `depth` reads are ever queued */
        finish(s, EAGAIN);
        return;
    }
    size_t want = s->size - s->got;
    io_uring_prep_read(sqe, s->fd, s->data + s->got, (unsigned)(want > (1u << 30) ? 1u << 30 : want), s->got);
    io_uring_sqe_set_data64(sqe, index);
    io_uring_submit(&r->ring);
}

void decode_reader_push(decode_reader *r, const char *path, uint64_t tag)
{
    unsigned index = (r->head + r->count) % r->depth;
    r->count++;
    slot *s = &r->slots[index];
    *s = (slot){.path = path, .tag = tag, .fd = -1};
    if (r->uring && open_sized(s))
        queue_read(r, index);
}

/* One completion: account the bytes, queue the rest or finish the slot. */
static void complete(decode_reader *r, struct io_uring_cqe *cqe)
{
    unsigned index = (unsigned)io_uring_cqe_get_data64(cqe);
    slot *s = &r->slots[index];
    int res = cqe->res;
    io_uring_cqe_seen(&r->ring, cqe);
    if (res == -EINTR || res == -EAGAIN) {
        queue_read(r, index);
    } else if (res < 0) {
        finish(s, -res);
    } else if (res == 0) {
        s->size = s->got; /* the file shrank while we read it: keep what there is */
        finish(s, 0);
    } else if ((s->got += (size_t)res) < s->size) {
        queue_read(r, index);
    } else {
        finish(s, 0);
    }
}

static void read_with_pread(slot *s)
{
    if (!open_sized(s))
        return;
    while (s->got < s->size) {
        ssize_t n = pread(s->fd, s->data + s->got, s->size - s->got, (off_t)s->got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            finish(s, errno);
            return;
        }
        if (n == 0) {
            s->size = s->got;
            break;
        }
        s->got += (size_t)n;
    }
    finish(s, 0);
}

int decode_reader_pop(decode_reader *r, decode_file *out)
{
    if (r->count == 0)
        return 0;
    slot *s = &r->slots[r->head];
    if (!r->uring)
        read_with_pread(s);
    while (!s->done) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&r->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0) {
            finish(s, -rc); /* the ring itself failed; the reads in flight are lost */
            break;
        }
        complete(r, cqe);
    }
    if (s->error) {
        free(s->data);
        s->data = NULL;
        s->size = 0;
    }
    *out = (decode_file){.path = s->path, .tag = s->tag, .data = s->data, .len = s->size, .error = s->error};
    r->head = (r->head + 1) % r->depth;
    r->count--;
    return 1;
}
