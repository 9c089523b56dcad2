/*
 * auth.c — see auth.h. CURVE key files, allow-lists, and the ZAP handler thread.
 *
 * How it works:
 *  - Key files are a few "name KEY" lines, read whole (4 KiB at most) and checked: every key
 *    must be 40 characters of Z85, the secret and public keys must be a pair, and a file that
 *    holds a secret must be private to its owner. Secrets are wiped from buffers after use.
 *  - The ZAP handlers live in a list, one per (context, process), each with the list of the
 *    server sockets (domains) it answers for; one mutex guards both, and is held across fork
 *    (pthread_atfork) so that a child never inherits it locked by the handler thread.
 *  - A handler thread polls its REP socket and a PAIR socket on which the last server's stop
 *    asks it to end; it runs with every signal blocked, so that signals still reach the
 *    process's main thread (the orchestrator reads them from a signalfd).
 *  - The answer for a known key carries User-Id = the ids the key may claim, and the key itself
 *    as the metadata property AUTH_KEY_PROPERTY, so that the control server can tell two keys
 *    with the same ids apart when a name changes hands.
 */
#include "auth.h"

#include "atomic_file.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

enum {
    KEY_FILE_MAX = 4096,
    ALLOW_FILE_MAX = 1 << 20,
    IDS_MAX = 255,
    ZAP_FRAMES = 7,       /* a CURVE request: version, id, domain, address, identity, mechanism, key */
    REFUSED_LOG_MAX = 32, /* distinct refused keys logged per server, then only counted */
};

/* libzmq's ZMQ_ZAP_ENFORCE_DOMAIN, a draft option in 4.3 (absent from its stable header). A
 * build without it answers EINVAL; then the handler outliving its servers is the only guard. */
#define ZAP_ENFORCE_DOMAIN 93

int auth_need_curve(const char *what, char **err)
{
    if (!zmq_has("curve"))
        return report_failure(err, "%s needs CURVE encryption, but this libzmq was built without it (install a "
                                   "libzmq built with libsodium)",
                              what);
    return 0;
}

/* ---- keys ------------------------------------------------------------------------------------ */

/* A 40-character Z85 key that decodes to 32 bytes. */
static bool valid_key(const char *s)
{
    uint8_t bin[32];
    return strlen(s) == AUTH_KEY_LEN && zmq_z85_decode(bin, s) != NULL;
}

void auth_wipe(auth_keys *k)
{
    explicit_bzero(k, sizeof *k);
}

int auth_new_keys(auth_keys *k, const char *server_key, char **err)
{
    memset(k, 0, sizeof *k);
    if (auth_need_curve("a CURVE key", err) < 0)
        return -1;
    if (zmq_curve_keypair(k->public_key, k->secret_key) < 0)
        return report_failure(err, "cannot generate a CURVE keypair: %s", zmq_strerror(errno));
    if (server_key)
        snprintf(k->server_key, sizeof k->server_key, "%s", server_key);
    return 0;
}

/* Parse "public|secret|server KEY" lines (blank lines and # comments allowed) into k. */
static int parse_keys(const char *path, char *text, auth_keys *k, char **err)
{
    int lineno = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        line[strcspn(line, "\r")] = '\0';
        char name[16], key[64], extra[2];
        int n = sscanf(line, " %15s %63s %1s", name, key, extra);
        if (n <= 0 || name[0] == '#')
            continue;
        char *dst = !strcmp(name, "public") ? k->public_key
                    : !strcmp(name, "secret") ? k->secret_key
                    : !strcmp(name, "server") ? k->server_key
                                              : NULL;
        if (!dst || n != 2)
            return report_failure(err, "%s:%d: expected 'public KEY', 'secret KEY' or 'server KEY'", path, lineno);
        if (!valid_key(key))
            return report_failure(err, "%s:%d: the %s key is not a 40-character Z85 key", path, lineno, name);
        memcpy(dst, key, AUTH_KEY_LEN + 1);
    }
    return 0;
}

/* Read a small regular file whole into buf (NUL-terminated); *st gets its status. */
static int read_small(const char *path, const char *what, char *buf, size_t size, struct stat *st, char **err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return report_failure(err, "cannot open the %s %s: %s", what, path, strerror(errno));
    ssize_t n = fstat(fd, st) == 0 && S_ISREG(st->st_mode) ? read(fd, buf, size - 1) : -1;
    close(fd);
    if (n < 0 || n == (ssize_t)size - 1)
        return report_failure(err, "%s: not a readable %s (written by 'selfsup keygen')", path, what);
    buf[n] = '\0';
    return 0;
}

/* What a loaded file must hold for its role, and a secret must be private. */
static int check_keys(const char *path, auth_role role, const auth_keys *k, const struct stat *st, char **err)
{
    if (!k->public_key[0] || !k->secret_key[0])
        return report_failure(err, "%s: needs both a 'public' and a 'secret' key line", path);
    if (role == AUTH_SERVER && k->server_key[0])
        return report_failure(err, "%s is a client's key file (it names a server); a server needs its own keypair, "
                                   "server.key from 'selfsup keygen DIR --clients ...'",
                              path);
    if (role == AUTH_CLIENT && !k->server_key[0])
        return report_failure(err, "%s has no 'server' line, so it is no client's key file; 'selfsup keygen DIR "
                                   "--clients NAME' writes DIR/NAME.key for a client",
                              path);
    if (st->st_mode & 077)
        return report_failure(err, "%s: permissions %04o are too open; a file holding a secret key must not be "
                                   "accessible by group or others (chmod 600 %s)",
                              path, (unsigned)(st->st_mode & 07777), path);
    char derived[AUTH_KEY_LEN + 1];
    if (zmq_curve_public(derived, k->secret_key) < 0 || strcmp(derived, k->public_key))
        return report_failure(err, "%s: the public and secret keys are not a pair", path);
    return 0;
}

int auth_load_keys(const char *path, auth_role role, auth_keys *k, char **err)
{
    memset(k, 0, sizeof *k);
    if (!path || !*path)
        return report_failure(err, "no CURVE key file given");
    char buf[KEY_FILE_MAX];
    struct stat st;
    int rc = auth_need_curve(path, err);
    if (rc == 0)
        rc = read_small(path, "CURVE key file", buf, sizeof buf, &st, err);
    if (rc == 0)
        rc = parse_keys(path, buf, k, err);
    explicit_bzero(buf, sizeof buf);
    if (rc == 0)
        rc = check_keys(path, role, k, &st, err);
    if (rc < 0)
        auth_wipe(k);
    return rc;
}

/* Write text to path through a temp file set to `mode` before anything goes in. */
static int write_private(const char *path, const char *text, unsigned mode, char **err)
{
    atomic_file f;
    int rc = atomic_file_open(&f, path, err);
    if (rc == 0 && fchmod(f.fd, mode) < 0)
        rc = report_failure(err, "%s: cannot set mode %04o: %s", path, mode, strerror(errno));
    if (rc == 0)
        rc = atomic_file_write(&f, text, strlen(text), err);
    if (rc == 0)
        rc = atomic_file_commit(&f, err);
    atomic_file_abort(&f);
    return rc;
}

int auth_write_keys(const char *path, const auth_keys *k, char **err)
{
    char *text = k->server_key[0]
                     ? xasprintf("public %s\nsecret %s\nserver %s\n", k->public_key, k->secret_key, k->server_key)
                     : xasprintf("public %s\nsecret %s\n", k->public_key, k->secret_key);
    int rc = write_private(path, text, 0600, err);
    explicit_bzero(text, strlen(text));
    free(text);
    return rc;
}

/* ---- allow-lists ----------------------------------------------------------------------------- */

bool auth_ids_valid(const char *ids)
{
    size_t n = strlen(ids);
    if (n == 0 || n > IDS_MAX || ids[0] == ',' || ids[n - 1] == ',' || strstr(ids, ",,"))
        return false;
    return strspn(ids, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-*,") == n;
}

bool auth_ids_match(const char *ids, const char *id)
{
    char pattern[IDS_MAX + 1];
    for (const char *p = ids; *p;) {
        size_t len = strcspn(p, ",");
        if (len < sizeof pattern) {
            memcpy(pattern, p, len);
            pattern[len] = '\0';
            if (fnmatch(pattern, id, 0) == 0)
                return true;
        }
        p += len + (p[len] == ',');
    }
    return false;
}

int auth_allow_add(auth_allow *a, const char *key, const char *ids, const char *name, char **err)
{
    if (!valid_key(key))
        return report_failure(err, "'%s' is not a 40-character Z85 public key", key);
    if (!auth_ids_valid(ids))
        return report_failure(err, "ids '%s': expected a comma-separated list of ids such as train.0 or decode.*",
                              ids);
    a->v = xrealloc(a->v, (size_t)(a->n + 1) * sizeof *a->v);
    auth_client *c = &a->v[a->n++];
    memcpy(c->key, key, AUTH_KEY_LEN + 1);
    c->ids = xstrdup(ids);
    c->name = xstrdup(name && *name ? name : ids);
    return 0;
}

void auth_allow_free(auth_allow *a)
{
    for (int i = 0; i < a->n; i++) {
        free(a->v[i].ids);
        free(a->v[i].name);
    }
    free(a->v);
    a->v = NULL;
    a->n = 0;
}

int auth_write_allow(const char *path, const auth_allow *a, char **err)
{
    strbuf sb = {0};
    sb_puts(&sb, "# selfsup allow-list: the clients this server admits, one a line:\n"
                 "# PUBLIC-KEY  IDS (the control-plane ids it may claim, '*' matches any characters)  NAME\n");
    for (int i = 0; i < a->n; i++)
        sb_printf(&sb, "%s %s %s\n", a->v[i].key, a->v[i].ids, a->v[i].name);
    int rc = write_private(path, sb_str(&sb), 0644, err);
    sb_free(&sb);
    return rc;
}

/* One line of an allow-list file: "KEY IDS [NAME]". Blank lines and #-lines are skipped (a
 * key never starts with '#': the first Z85 digit of 32 bits is at most the 83rd of 85). */
static int parse_allow_line(auth_allow *a, const char *path, int lineno, char *line, char **err)
{
    line[strcspn(line, "\r")] = '\0';
    char key[64], ids[IDS_MAX + 2], name[128], extra[2];
    int n = sscanf(line, " %63s %256s %127s %1s", key, ids, name, extra);
    if (n <= 0 || key[0] == '#')
        return 0;
    if (n < 2 || n > 3)
        return report_failure(err, "%s:%d: expected 'PUBLIC-KEY IDS [NAME]'", path, lineno);
    char *why = NULL;
    if (auth_allow_add(a, key, ids, n == 3 ? name : NULL, &why) == 0)
        return 0;
    report_failure(err, "%s:%d: %s", path, lineno, why);
    free(why);
    return -1;
}

int auth_allow_load(auth_allow *a, const char *path, char **err)
{
    struct stat st;
    char *text = xmalloc(ALLOW_FILE_MAX);
    int rc = read_small(path, "allow-list", text, ALLOW_FILE_MAX, &st, err), before = a->n, lineno = 0;
    if (rc == 0 && (st.st_mode & 022))
        rc = report_failure(err, "%s: permissions %04o let others add keys to this allow-list (chmod 644 %s)", path,
                            (unsigned)(st.st_mode & 07777), path);
    for (char *save = NULL, *line = rc ? NULL : strtok_r(text, "\n", &save); line && rc == 0;
         line = strtok_r(NULL, "\n", &save))
        rc = parse_allow_line(a, path, ++lineno, line, err);
    if (rc == 0 && a->n == before)
        rc = report_failure(err, "%s lists no client, so nobody could connect", path);
    free(text);
    return rc;
}

int auth_load_server_dir(const char *dir, auth_keys *k, auth_allow *a, char **err)
{
    char *key = path_join(dir, "server.key"), *clients = path_join(dir, "clients");
    int rc = auth_load_keys(key, AUTH_SERVER, k, err);
    if (rc == 0 && (rc = auth_allow_load(a, clients, err)) < 0)
        auth_wipe(k);
    free(key);
    free(clients);
    return rc;
}

/* ---- the ZAP handlers ------------------------------------------------------------------------ */

typedef struct zap_handler {
    struct zap_handler *next;
    void *ctx;
    pid_t pid;
    int users;
    pthread_t thread;
    void *rep;              /* inproc://zeromq.zap.01, the thread's */
    void *stop_rx, *stop_tx; /* a PAIR: the thread's end, and the end that asks it to stop */
} zap_handler;

struct auth_server {
    struct auth_server *next;
    zap_handler *handler;
    char domain[32];
    char *what;
    auth_allow allow;
    char refused[REFUSED_LOG_MAX][AUTH_KEY_LEN + 1]; /* keys already logged */
    int n_refused;
};

/* The lock guards both lists and every server's refused-key log; the sections are short. */
static pthread_mutex_t reg_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static zap_handler *handlers;
static auth_server *servers;
static unsigned next_domain;

static void reg_lock(void) { pthread_mutex_lock(&reg_mutex); }
static void reg_unlock(void) { pthread_mutex_unlock(&reg_mutex); }
static void register_atfork(void) { pthread_atfork(reg_lock, reg_unlock, reg_unlock); }

static auth_server *find_domain(const char *domain, size_t len)
{
    for (auth_server *s = servers; s; s = s->next)
        if (strlen(s->domain) == len && !memcmp(s->domain, domain, len))
            return s;
    return NULL;
}

static const auth_client *find_client(const auth_server *s, const char *key)
{
    for (int i = 0; i < s->allow.n; i++)
        if (!strcmp(s->allow.v[i].key, key))
            return &s->allow.v[i];
    return NULL;
}

/* Log a refused key the first time this server sees it. Called with the lock held. */
static void note_refused(auth_server *s, const char *key, const char *address)
{
    for (int i = 0; i < s->n_refused && i < REFUSED_LOG_MAX; i++)
        if (!strcmp(s->refused[i], key))
            return;
    if (s->n_refused < REFUSED_LOG_MAX) {
        memcpy(s->refused[s->n_refused], key, AUTH_KEY_LEN + 1);
        log_warn("%s: refused a connection from %s: its CURVE key %s is not on the allow-list%s", s->what, address,
                 key, s->n_refused + 1 == REFUSED_LOG_MAX ? " (further refused keys are not logged)" : "");
    }
    s->n_refused += s->n_refused < REFUSED_LOG_MAX;
}

static bool frame_is(zmq_msg_t *m, const char *s)
{
    return zmq_msg_size(m) == strlen(s) && !memcmp(zmq_msg_data(m), s, strlen(s));
}

/* The ZMTP metadata that names the key: 1-byte name length, name, 4-byte value length, value. */
static size_t key_metadata(uint8_t *out, const char *key)
{
    size_t name_len = strlen(AUTH_KEY_PROPERTY), n = 0;
    out[n++] = (uint8_t)name_len;
    memcpy(out + n, AUTH_KEY_PROPERTY, name_len);
    n += name_len;
    uint8_t len_be[4] = {0, 0, 0, AUTH_KEY_LEN};
    memcpy(out + n, len_be, 4);
    memcpy(out + n + 4, key, AUTH_KEY_LEN);
    return n + 4 + AUTH_KEY_LEN;
}

/* Decide on one request's frames: the ids to grant, or NULL to refuse. *key gets the key. */
static char *decide(zmq_msg_t *f, int n, char key[AUTH_KEY_LEN + 1])
{
    key[0] = '\0';
    if (n != ZAP_FRAMES || !frame_is(&f[0], "1.0") || !frame_is(&f[5], "CURVE") || zmq_msg_size(&f[6]) != 32)
        return NULL;
    zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
    char address[64];
    snprintf(address, sizeof address, "%.*s", (int)zmq_msg_size(&f[3]), (const char *)zmq_msg_data(&f[3]));
    reg_lock();
    auth_server *s = find_domain(zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
    const auth_client *c = s ? find_client(s, key) : NULL;
    char *ids = c ? xstrdup(c->ids) : NULL;
    if (s && !c)
        note_refused(s, key, address);
    else if (c)
        log_debug("%s: admitted %s (%s) from %s", s->what, c->name, key, address);
    reg_unlock();
    return ids;
}

static void reply(void *rep, zmq_msg_t *request_id, const char *ids, const char *key)
{
    uint8_t meta[64 + AUTH_KEY_LEN];
    size_t meta_len = ids ? key_metadata(meta, key) : 0;
    zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(rep, request_id ? zmq_msg_data(request_id) : "", request_id ? zmq_msg_size(request_id) : 0, ZMQ_SNDMORE);
    zmq_send(rep, ids ? "200" : "400", 3, ZMQ_SNDMORE);
    zmq_send(rep, ids ? "OK" : "not allowed", ids ? 2 : 11, ZMQ_SNDMORE);
    zmq_send(rep, ids ? ids : "", ids ? strlen(ids) : 0, ZMQ_SNDMORE);
    zmq_send(rep, meta, meta_len, 0);
}

/* Receive one request (at most ZAP_FRAMES frames kept, the rest drained) and answer it. */
static void serve_one(void *rep)
{
    zmq_msg_t f[ZAP_FRAMES + 1];
    int n = 0;
    bool more = true;
    while (more) {
        int k = n < ZAP_FRAMES ? n : ZAP_FRAMES; /* the extra slot is reused for excess frames */
        zmq_msg_init(&f[k]);
        if (zmq_msg_recv(&f[k], rep, 0) < 0) {
            zmq_msg_close(&f[k]);
            break;
        }
        more = zmq_msg_more(&f[k]);
        if (k == ZAP_FRAMES)
            zmq_msg_close(&f[k]);
        n++;
    }
    char key[AUTH_KEY_LEN + 1];
    char *ids = decide(f, n, key);
    reply(rep, n > 1 ? &f[1] : NULL, ids, key);
    free(ids);
    for (int i = 0; i < n && i < ZAP_FRAMES; i++)
        zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    zap_handler *h = arg;
    zmq_pollitem_t items[2] = {{.socket = h->rep, .events = ZMQ_POLLIN}, {.socket = h->stop_rx, .events = ZMQ_POLLIN}};
    for (;;) {
        if (zmq_poll(items, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (items[1].revents & ZMQ_POLLIN)
            break;
        if (items[0].revents & ZMQ_POLLIN)
            serve_one(h->rep);
    }
    zmq_close(h->rep);
    zmq_close(h->stop_rx);
    return NULL;
}

/* Start the thread with every signal blocked: signals are the main thread's business. */
static int start_thread(zap_handler *h)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&h->thread, NULL, zap_main, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* This process's handler for ctx, started if there is none. Called with the lock held. */
static zap_handler *handler_for(void *ctx, char **err)
{
    for (zap_handler *h = handlers; h; h = h->next)
        if (h->ctx == ctx && h->pid == getpid())
            return h;
    zap_handler *h = xcalloc(1, sizeof *h);
    h->ctx = ctx;
    h->pid = getpid();
    char stop[64];
    snprintf(stop, sizeof stop, "inproc://selfsup-zap-stop-%p", (void *)h);
    h->rep = zmq_socket(ctx, ZMQ_REP);
    h->stop_rx = zmq_socket(ctx, ZMQ_PAIR);
    h->stop_tx = zmq_socket(ctx, ZMQ_PAIR);
    const char *what = "create its sockets";
    int rc = h->rep && h->stop_rx && h->stop_tx ? 0 : -1;
    if (rc == 0 && (what = "bind inproc://zeromq.zap.01", zmq_bind(h->rep, "inproc://zeromq.zap.01") < 0))
        rc = -1;
    if (rc == 0 && (what = "connect its stop pipe", zmq_bind(h->stop_rx, stop) < 0 || zmq_connect(h->stop_tx, stop) < 0))
        rc = -1;
    if (rc == 0 && (what = "start its thread", start_thread(h) != 0))
        rc = -1;
    if (rc < 0) {
        report_failure(err, "cannot start the ZAP authentication handler: cannot %s: %s", what, zmq_strerror(errno));
        zmq_close(h->rep);
        zmq_close(h->stop_rx);
        zmq_close(h->stop_tx);
        free(h);
        return NULL;
    }
    h->next = handlers;
    handlers = h;
    return h;
}

/* Register a server under a fresh domain, with its handler. NULL + *err on failure. */
static auth_server *register_server(void *ctx, const auth_allow *allow, const char *what, char **err)
{
    pthread_once(&atfork_once, register_atfork);
    reg_lock();
    zap_handler *h = handler_for(ctx, err);
    auth_server *s = NULL;
    if (h) {
        s = xcalloc(1, sizeof *s);
        s->handler = h;
        h->users++;
        snprintf(s->domain, sizeof s->domain, "selfsup.%u", next_domain++);
        s->what = xstrdup(what);
        for (int i = 0; i < allow->n; i++)
            auth_allow_add(&s->allow, allow->v[i].key, allow->v[i].ids, allow->v[i].name, NULL);
        s->next = servers;
        servers = s;
    }
    reg_unlock();
    return s;
}

auth_server *auth_server_start(void *ctx, void *sock, const auth_keys *k, const auth_allow *allow, const char *what,
                               char **err)
{
    if (auth_need_curve(what, err) < 0)
        return NULL;
    auth_server *s = register_server(ctx, allow, what, err);
    if (!s)
        return NULL;
    int one = 1;
    int rc = zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) |
             zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->secret_key, AUTH_KEY_LEN + 1) |
             zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, s->domain, strlen(s->domain));
    if (rc != 0) {
        report_failure(err, "%s: cannot set up CURVE: %s", what, zmq_strerror(errno));
        auth_server_stop(s);
        return NULL;
    }
    zmq_setsockopt(sock, ZAP_ENFORCE_DOMAIN, &one, sizeof one); /* EINVAL where libzmq lacks it */
    return s;
}

/* Unlink s from the list and drop its handler's count; the handler to stop, if it was the last. */
static zap_handler *unregister_server(auth_server *s)
{
    reg_lock();
    for (auth_server **p = &servers; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    zap_handler *h = s->handler, *last = NULL;
    if (--h->users == 0 && h->pid == getpid()) {
        for (zap_handler **p = &handlers; *p; p = &(*p)->next)
            if (*p == h) {
                *p = h->next;
                break;
            }
        last = h;
    }
    reg_unlock();
    return last;
}

void auth_server_stop(auth_server *s)
{
    if (!s)
        return;
    zap_handler *h = unregister_server(s);
    if (h) {
        zmq_send(h->stop_tx, "", 0, 0);
        pthread_join(h->thread, NULL);
        zmq_close(h->stop_tx);
        free(h);
    }
    auth_allow_free(&s->allow);
    free(s->what);
    free(s);
}

int auth_client_setup(void *sock, const auth_keys *k, char **err)
{
    if (auth_need_curve("a CURVE client", err) < 0)
        return -1;
    if (!k->server_key[0])
        return report_failure(err, "a CURVE client needs the server's public key");
    int rc = zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, k->server_key, AUTH_KEY_LEN + 1) |
             zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, k->public_key, AUTH_KEY_LEN + 1) |
             zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->secret_key, AUTH_KEY_LEN + 1);
    if (rc != 0)
        return report_failure(err, "cannot set up CURVE: %s", zmq_strerror(errno));
    return 0;
}
