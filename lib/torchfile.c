/*
 * torchfile.c — PyTorch checkpoint reader; see torchfile.h for the formats and the limits.
 *
 * Every value the unpickler makes is a `node` (a tf_value plus loader-only fields) recorded
 * in the torchfile, so sharing through the memo and even cycles are freed by one sweep. Dicts
 * keep an open-addressing index so that repeated keys replace (Python semantics) in O(1).
 *
 * Storages: a persistent id ('storage', torch.XStorage, key, location, numel) makes a storage
 * record shared by key. The zip reader loads its bytes at once (PREFIX/data/KEY, exact size);
 * the legacy reader fills them after the main pickle, from the raw storages that follow it.
 * Tensors are checked against their storage's element count when they are rebuilt and get
 * their data in a final pass: a pointer into the storage when C-contiguous, else a copy. All
 * storage and copy bytes are charged to a budget proportional to the input size, so a small
 * file cannot ask for a large allocation (torch stores records uncompressed).
 *
 * numpy arrays (a plain pickle of them: Caffe2's and Detectron's .pkl weights, written by
 * Python 2 or 3) are rebuilt as ndarray.__reduce__ describes them: _reconstruct(ndarray, (0,),
 * b'b') makes an empty array, BUILD gives it (version, shape, dtype, fortran, raw bytes), and
 * the bytes become a storage of their own, so the tensor takes the final pass like any other
 * (a Fortran-order array is gathered into C order there). numpy's dtype(...) and scalar(...)
 * and Python 2's byte strings (BINSTRING, read as latin-1 text, as pickle.load(encoding=
 * "latin1") reads them; Python 3's protocol 2 writes bytes as _codecs.encode(text, "latin1"))
 * are understood for that purpose only.
 */
#include "torchfile.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#define MAX_NEST 100            /* container nesting; torch state dicts nest < 10 deep */
#define MAX_MARKS 256           /* open MARKs at once */
#define MAX_STACK (1u << 22)    /* stack entries (also bounded by the pickle's length) */
#define MAX_MEMO (1u << 24)     /* memo indices (also bounded by the pickle's length) */
#define MAX_GLOBAL_NAME 200
#define BUDGET_SLACK (1u << 20) /* tensor bytes allowed beyond 2 × file size */

enum { OTHER_GLOBAL = 1, OTHER_STORAGE, OTHER_BIGINT, OTHER_NP_DTYPE, OTHER_NP_ARRAY };
enum { G_ODICT, G_REBUILD_V2, G_REBUILD, G_PARAM, G_PARAM_STATE, G_STORAGE, G_NP_RECONSTRUCT, G_NP_NDARRAY, G_NP_DTYPE,
       G_NP_SCALAR, G_CODECS_ENCODE };

typedef struct storage {
    char *key;
    st_dtype dtype;
    size_t numel;
    unsigned char *data; /* numel × element size bytes once loaded */
    bool loaded;
} storage;

typedef struct node {
    tf_value v;          /* first, so tf_value pointers convert back */
    int other;           /* OTHER_* when v.kind is TF_OTHER */
    int global;          /* G_* for OTHER_GLOBAL */
    st_dtype sdtype;     /* G_STORAGE's dtype */
    char *gname;         /* "module.name" of a global */
    storage *st;         /* OTHER_STORAGE, and a TF_TENSOR's storage */
    int depth;           /* container nesting below and including this node */
    size_t cap;          /* capacity of seq/dict arrays */
    size_t *slots;       /* dict index: entry + 1, 0 empty; slot_cap is a power of two */
    size_t slot_cap;
    tf_tensor tensor;
} node;

struct torchfile {
    node **nodes;
    size_t n_nodes, nodes_cap;
    storage **storages;
    size_t n_storages, storages_cap;
    void **blobs; /* tensor copies */
    size_t n_blobs, blobs_cap;
    const tf_value *root;
    size_t budget;
    char *name;
};

typedef struct unpickler unpickler;
typedef int (*persid_fn)(unpickler *u, storage *st);

struct unpickler {
    torchfile *f;
    const char *part; /* "data.pkl", "main pickle", ... */
    const unsigned char *p;
    size_t len, pos, op_at;
    node **stack;
    size_t sp, stack_cap;
    size_t marks[MAX_MARKS];
    size_t n_marks;
    node **memo;
    size_t memo_cap, memo_n;
    persid_fn persid; /* NULL: persistent ids refused */
    zip_t *zip;
    const char *prefix;
    char **err;
};

/* ---- errors and bookkeeping ----------------------------------------------------------- */

static int tf_fail(torchfile *f, char **err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tf_fail(torchfile *f, char **err, const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    report_failure(err, "%s: %s", f->name, sb_str(&sb));
    sb_free(&sb);
    return -1;
}

/* Messages from inside a pickle say which pickle and the opcode's byte offset. */
static int u_fail(unpickler *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int u_fail(unpickler *u, const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    report_failure(u->err, "%s: %s, byte %zu: %s", u->f->name, u->part, u->op_at, sb_str(&sb));
    sb_free(&sb);
    return -1;
}

#define GROW(arr, n, cap)                                                                     \
    do {                                                                                      \
        if ((n) == (cap)) {                                                                   \
            (cap) = (cap) ? 2 * (cap) : 16;                                                   \
            (arr) = xrealloc((arr), (cap) * sizeof *(arr));                                   \
        }                                                                                     \
    } while (0)

static node *new_node(torchfile *f, tf_kind kind)
{
    node *n = xcalloc(1, sizeof *n);
    n->v.kind = kind;
    GROW(f->nodes, f->n_nodes, f->nodes_cap);
    f->nodes[f->n_nodes++] = n;
    return n;
}

static bool charge(torchfile *f, size_t bytes)
{
    if (bytes > f->budget)
        return false;
    f->budget -= bytes;
    return true;
}

const char *tf_kind_name(tf_kind kind)
{
    static const char *const names[] = {"None", "bool",  "int",  "float",  "str",  "bytes",
                                        "list", "tuple", "dict", "tensor", "other"};
    return (unsigned)kind < ARRAY_LEN(names) ? names[kind] : "?";
}

/* ---- dict keys: hashing and equality, as Python's for the hashable kinds ---------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint64_t key_hash(const node *k)
{
    switch (k->v.kind) {
    case TF_NONE: return 1;
    case TF_BOOL: return mix((uint64_t)k->v.u.b);
    case TF_INT: return mix((uint64_t)k->v.u.i);
    case TF_FLOAT: {
        double d = k->v.u.f;
        if (d > -9.2e18 && d < 9.2e18 && d == (double)(int64_t)d)
            return mix((uint64_t)(int64_t)d); /* 1.0 == 1 */
        uint64_t bits;
        memcpy(&bits, &d, 8);
        return mix(bits);
    }
    case TF_STR:
    case TF_BYTES: {
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < k->v.u.str.len; i++)
            h = (h ^ (unsigned char)k->v.u.str.s[i]) * 1099511628211ull;
        return h + k->v.kind;
    }
    case TF_TUPLE: {
        uint64_t h = 7;
        for (size_t i = 0; i < k->v.u.seq.n; i++)
            h = mix(h * 31 + key_hash((const node *)k->v.u.seq.items[i]));
        return h;
    }
    default: return 0;
    }
}

static bool numeric(const node *k, double *out)
{
    switch (k->v.kind) {
    case TF_BOOL: *out = k->v.u.b; return true;
    case TF_INT: *out = (double)k->v.u.i; return true;
    case TF_FLOAT: *out = k->v.u.f; return true;
    default: return false;
    }
}

static bool key_eq(const node *a, const node *b)
{
    double x, y;
    if (a->v.kind == TF_INT && b->v.kind == TF_INT)
        return a->v.u.i == b->v.u.i;
    if (numeric(a, &x) && numeric(b, &y))
        return x == y;
    if (a->v.kind != b->v.kind)
        return false;
    switch (a->v.kind) {
    case TF_NONE: return true;
    case TF_STR:
    case TF_BYTES:
        return a->v.u.str.len == b->v.u.str.len &&
               memcmp(a->v.u.str.s, b->v.u.str.s, a->v.u.str.len) == 0;
    case TF_TUPLE:
        if (a->v.u.seq.n != b->v.u.seq.n)
            return false;
        for (size_t i = 0; i < a->v.u.seq.n; i++)
            if (!key_eq((const node *)a->v.u.seq.items[i], (const node *)b->v.u.seq.items[i]))
                return false;
        return true;
    default: return false;
    }
}

static bool hashable(const node *k)
{
    switch (k->v.kind) {
    case TF_NONE: case TF_BOOL: case TF_INT: case TF_FLOAT: case TF_STR: case TF_BYTES:
        return true;
    case TF_TUPLE:
        for (size_t i = 0; i < k->v.u.seq.n; i++)
            if (!hashable((const node *)k->v.u.seq.items[i]))
                return false;
        return true;
    default: return false;
    }
}

/* Slot of key k in d's index: where it is, or the empty slot where it would go. */
static size_t dict_slot(const node *d, const node *k)
{
    size_t mask = d->slot_cap - 1, i = key_hash(k) & mask;
    while (d->slots[i] && !key_eq((const node *)d->v.u.dict.keys[d->slots[i] - 1], k))
        i = (i + 1) & mask;
    return i;
}

static void dict_reindex(node *d)
{
    d->slot_cap = d->slot_cap ? 2 * d->slot_cap : 16;
    free(d->slots);
    d->slots = xcalloc(d->slot_cap, sizeof *d->slots);
    for (size_t e = 0; e < d->v.u.dict.n; e++)
        d->slots[dict_slot(d, (const node *)d->v.u.dict.keys[e])] = e + 1;
}

/* Returns -1 (one message in u->err) when the parent now nests too deep. */
static int update_depth(unpickler *u, node *parent, const node *child)
{
    if (child->depth + 1 > parent->depth)
        parent->depth = child->depth + 1;
    return parent->depth > MAX_NEST ? u_fail(u, "values nested deeper than %d levels", MAX_NEST) : 0;
}

static int dict_set(unpickler *u, node *d, node *k, node *val)
{
    if (!hashable(k))
        return u_fail(u, "unhashable dict key of type %s", tf_kind_name(k->v.kind));
    /* Stop at the first failure: a second message would replace (and leak) the first. */
    if (update_depth(u, d, k) != 0 || update_depth(u, d, val) != 0)
        return -1;
    if (2 * (d->v.u.dict.n + 1) > d->slot_cap)
        dict_reindex(d);
    size_t s = dict_slot(d, k);
    if (d->slots[s]) { /* an existing key: Python replaces the value */
        d->v.u.dict.vals[d->slots[s] - 1] = &val->v;
        return 0;
    }
    if (d->v.u.dict.n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 8;
        d->v.u.dict.keys = xrealloc(d->v.u.dict.keys, d->cap * sizeof(tf_value *));
        d->v.u.dict.vals = xrealloc(d->v.u.dict.vals, d->cap * sizeof(tf_value *));
    }
    d->v.u.dict.keys[d->v.u.dict.n] = &k->v;
    d->v.u.dict.vals[d->v.u.dict.n] = &val->v;
    d->slots[s] = ++d->v.u.dict.n;
    return 0;
}

static int seq_append(unpickler *u, node *l, node *item)
{
    if (update_depth(u, l, item) != 0)
        return -1;
    GROW(l->v.u.seq.items, l->v.u.seq.n, l->cap);
    l->v.u.seq.items[l->v.u.seq.n++] = &item->v;
    return 0;
}

/* ---- the stack, marks and memo --------------------------------------------------------- */

static int push(unpickler *u, node *n)
{
    if (u->sp >= MAX_STACK || u->sp > u->len)
        return u_fail(u, "pickle stack too large");
    GROW(u->stack, u->sp, u->stack_cap);
    u->stack[u->sp++] = n;
    return 0;
}

static size_t floor_of(const unpickler *u)
{
    return u->n_marks ? u->marks[u->n_marks - 1] : 0;
}

static node *pop(unpickler *u)
{
    if (u->sp <= floor_of(u)) {
        u_fail(u, "pickle stack underflow");
        return NULL;
    }
    return u->stack[--u->sp];
}

static node *top(unpickler *u)
{
    if (u->sp <= floor_of(u)) {
        u_fail(u, "pickle stack underflow");
        return NULL;
    }
    return u->stack[u->sp - 1];
}

/* Pop the innermost MARK; *start is where its items begin on the stack. */
static int pop_mark(unpickler *u, size_t *start)
{
    if (!u->n_marks)
        return u_fail(u, "no MARK to close");
    *start = u->marks[--u->n_marks];
    return 0;
}

static int memo_put(unpickler *u, size_t idx)
{
    node *n = top(u);
    if (!n)
        return -1;
    if (idx >= MAX_MEMO || idx >= u->len)
        return u_fail(u, "memo index %zu out of range", idx);
    if (idx >= u->memo_cap) {
        size_t cap = u->memo_cap ? u->memo_cap : 64;
        while (cap <= idx)
            cap *= 2;
        u->memo = xrealloc(u->memo, cap * sizeof *u->memo);
        memset(u->memo + u->memo_cap, 0, (cap - u->memo_cap) * sizeof *u->memo);
        u->memo_cap = cap;
    }
    if (!u->memo[idx])
        u->memo_n++;
    u->memo[idx] = n;
    return 0;
}

static int memo_get(unpickler *u, size_t idx)
{
    if (idx >= u->memo_cap || !u->memo[idx])
        return u_fail(u, "memo index %zu is not set", idx);
    return push(u, u->memo[idx]);
}

/* ---- reading opcode arguments ---------------------------------------------------------- */

static const unsigned char *take(unpickler *u, size_t n)
{
    if (n > u->len - u->pos) {
        u_fail(u, "truncated pickle (argument needs %zu bytes, %zu left)", n, u->len - u->pos);
        return NULL;
    }
    const unsigned char *p = u->p + u->pos;
    u->pos += n;
    return p;
}

static bool take_le(unpickler *u, size_t n, uint64_t *out)
{
    const unsigned char *p = take(u, n);
    if (!p)
        return false;
    *out = 0;
    for (size_t i = 0; i < n; i++)
        *out |= (uint64_t)p[i] << (8 * i);
    return true;
}

static int push_bytes(unpickler *u, tf_kind kind, size_t len_bytes)
{
    uint64_t n;
    if (!take_le(u, len_bytes, &n))
        return -1;
    if (n > u->len - u->pos)
        return u_fail(u, "truncated pickle (string of %llu bytes, %zu left)",
                      (unsigned long long)n, u->len - u->pos);
    node *s = new_node(u->f, kind);
    s->v.u.str.s = xstrndup((const char *)take(u, n), n);
    s->v.u.str.len = n;
    return push(u, s);
}

static int push_int(unpickler *u, int64_t i)
{
    node *n = new_node(u->f, TF_INT);
    n->v.u.i = i;
    return push(u, n);
}

/* LONG1/LONG4: little-endian two's complement; wider than 64 bits stays raw bytes. */
static int push_long(unpickler *u, size_t len_bytes)
{
    uint64_t n;
    if (!take_le(u, len_bytes, &n))
        return -1;
    if (n > u->len - u->pos)
        return u_fail(u, "truncated pickle (long of %llu bytes)", (unsigned long long)n);
    const unsigned char *p = take(u, n);
    if (n > 8) {
        node *b = new_node(u->f, TF_OTHER);
        b->other = OTHER_BIGINT;
        b->v.u.str.s = xstrndup((const char *)p, n);
        b->v.u.str.len = n;
        return push(u, b);
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    if (n && n < 8 && (p[n - 1] & 0x80))
        v |= ~0ull << (8 * n); /* sign-extend */
    return push_int(u, (int64_t)v);
}

static int push_float(unpickler *u)
{
    const unsigned char *p = take(u, 8);
    if (!p)
        return -1;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits = bits << 8 | p[i]; /* BINFLOAT is big-endian */
    node *n = new_node(u->f, TF_FLOAT);
    memcpy(&n->v.u.f, &bits, 8);
    return push(u, n);
}

/* ---- globals: the allow-list ----------------------------------------------------------- */

static const struct {
    const char *module, *name;
    int id;
    st_dtype dtype;
} GLOBALS[] = {
    {"collections", "OrderedDict", G_ODICT, ST_BOOL},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_V2, ST_BOOL},
    {"torch._utils", "_rebuild_tensor", G_REBUILD, ST_BOOL},
    {"torch._utils", "_rebuild_parameter", G_PARAM, ST_BOOL},
    {"torch._utils", "_rebuild_parameter_with_state", G_PARAM_STATE, ST_BOOL},
    {"torch", "FloatStorage", G_STORAGE, ST_F32},
    {"torch", "HalfStorage", G_STORAGE, ST_F16},
    {"torch", "BFloat16Storage", G_STORAGE, ST_BF16},
    {"torch", "DoubleStorage", G_STORAGE, ST_F64},
    {"torch", "LongStorage", G_STORAGE, ST_I64},
    {"torch", "IntStorage", G_STORAGE, ST_I32},
    {"torch", "ShortStorage", G_STORAGE, ST_I16},
    {"torch", "CharStorage", G_STORAGE, ST_I8},
    {"torch", "ByteStorage", G_STORAGE, ST_U8},
    {"torch", "BoolStorage", G_STORAGE, ST_BOOL},
    {"numpy.core.multiarray", "_reconstruct", G_NP_RECONSTRUCT, ST_BOOL},
    {"numpy._core.multiarray", "_reconstruct", G_NP_RECONSTRUCT, ST_BOOL},
    {"numpy", "ndarray", G_NP_NDARRAY, ST_BOOL},
    {"numpy", "dtype", G_NP_DTYPE, ST_BOOL},
    {"numpy.core.multiarray", "scalar", G_NP_SCALAR, ST_BOOL},
    {"numpy._core.multiarray", "scalar", G_NP_SCALAR, ST_BOOL},
    {"_codecs", "encode", G_CODECS_ENCODE, ST_BOOL},
};

/* "module.name" with anything unprintable shown as '?', for messages. */
static char *printable_name(const char *module, size_t mlen, const char *name, size_t nlen)
{
    char *s = xasprintf("%.*s.%.*s", (int)mlen, module, (int)nlen, name);
    for (char *c = s; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
            *c = '?';
    return s;
}

static int push_global(unpickler *u, const char *module, size_t mlen, const char *name,
                       size_t nlen)
{
    char *full = printable_name(module, mlen, name, nlen);
    for (size_t i = 0; i < ARRAY_LEN(GLOBALS); i++) {
        if (strlen(GLOBALS[i].module) == mlen && strlen(GLOBALS[i].name) == nlen &&
            !memcmp(GLOBALS[i].module, module, mlen) && !memcmp(GLOBALS[i].name, name, nlen)) {
            node *g = new_node(u->f, TF_OTHER);
            g->other = OTHER_GLOBAL;
            g->global = GLOBALS[i].id;
            g->sdtype = GLOBALS[i].dtype;
            g->gname = full;
            return push(u, g);
        }
    }
    u_fail(u, "'%s' is not allowed in a checkpoint: selfsup only loads tensors and plain "
              "containers", full);
    free(full);
    return -1;
}

/* GLOBAL: "module\nname\n". */
static int op_global(unpickler *u)
{
    const char *line[2];
    size_t n[2];
    for (int k = 0; k < 2; k++) {
        const unsigned char *start = u->p + u->pos;
        size_t left = u->len - u->pos;
        size_t scan = left < MAX_GLOBAL_NAME ? left : MAX_GLOBAL_NAME;
        const unsigned char *nl = memchr(start, '\n', scan);
        if (!nl)
            return u_fail(u, "GLOBAL name is truncated or longer than %d bytes", MAX_GLOBAL_NAME);
        line[k] = (const char *)start;
        n[k] = (size_t)(nl - start);
        u->pos += n[k] + 1;
    }
    return push_global(u, line[0], n[0], line[1], n[1]);
}

static int op_stack_global(unpickler *u)
{
    node *name = pop(u), *module = name ? pop(u) : NULL;
    if (!module)
        return -1;
    if (name->v.kind != TF_STR || module->v.kind != TF_STR)
        return u_fail(u, "STACK_GLOBAL needs two strings");
    return push_global(u, module->v.u.str.s, module->v.u.str.len, name->v.u.str.s,
                       name->v.u.str.len);
}

/* ---- tensors --------------------------------------------------------------------------- */

static bool get_int(const node *n, int64_t *out)
{
    if (n->v.kind == TF_INT) {
        *out = n->v.u.i;
        return true;
    }
    return false;
}

static void describe_dims(strbuf *sb, const size_t *shape, const int64_t *stride, int ndim)
{
    sb_puts(sb, "shape (");
    for (int i = 0; i < ndim; i++)
        sb_printf(sb, "%s%zu", i ? ", " : "", shape[i]);
    sb_puts(sb, ") strides (");
    for (int i = 0; i < ndim; i++)
        sb_printf(sb, "%s%lld", i ? ", " : "", (long long)stride[i]);
    sb_puts(sb, ")");
}

/* Elements of the storage the view reaches: offset + Σ (size - 1) × stride + 1. */
static bool view_extent(const tf_tensor *t, size_t *out)
{
    size_t end = t->storage_offset;
    for (int i = 0; i < t->ndim; i++) {
        size_t span;
        if (__builtin_mul_overflow(t->shape[i] - 1, (size_t)t->stride[i], &span) ||
            __builtin_add_overflow(end, span, &end))
            return false;
    }
    return !__builtin_add_overflow(end, 1, out);
}

static int read_dims(unpickler *u, const node *tup, size_t *dims, int64_t *strides, int *ndim,
                     const char *what)
{
    if (tup->v.kind != TF_TUPLE)
        return u_fail(u, "tensor %s is a %s, not a tuple", what, tf_kind_name(tup->v.kind));
    if (tup->v.u.seq.n > TF_MAX_DIMS)
        return u_fail(u, "tensor has %zu dimensions (at most %d)", tup->v.u.seq.n, TF_MAX_DIMS);
    *ndim = (int)tup->v.u.seq.n;
    for (int i = 0; i < *ndim; i++) {
        int64_t v;
        if (!get_int((const node *)tup->v.u.seq.items[i], &v) || v < 0)
            return u_fail(u, "tensor %s entry %d is not a non-negative int", what, i);
        if (dims)
            dims[i] = (size_t)v;
        else
            strides[i] = v;
    }
    return 0;
}

/* _rebuild_tensor(_v2)(storage, storage_offset, size, stride, ...). */
static int rebuild_tensor(unpickler *u, node **a, bool requires_grad)
{
    if (a[0]->v.kind != TF_OTHER || a[0]->other != OTHER_STORAGE)
        return u_fail(u, "tensor rebuilt from a %s, not a storage", tf_kind_name(a[0]->v.kind));
    int64_t off;
    if (!get_int(a[1], &off) || off < 0)
        return u_fail(u, "tensor storage offset is not a non-negative int");
    node *t = new_node(u->f, TF_TENSOR);
    tf_tensor *tt = &t->tensor;
    int nstride;
    if (read_dims(u, a[2], tt->shape, NULL, &tt->ndim, "size") ||
        read_dims(u, a[3], NULL, tt->stride, &nstride, "stride"))
        return -1;
    if (nstride != tt->ndim)
        return u_fail(u, "tensor has %d sizes but %d strides", tt->ndim, nstride);
    storage *st = a[0]->st;
    tt->dtype = st->dtype;
    tt->storage_offset = (size_t)off;
    tt->requires_grad = requires_grad;
    tt->numel = 1;
    for (int i = 0; i < tt->ndim; i++)
        if (__builtin_mul_overflow(tt->numel, tt->shape[i], &tt->numel))
            return u_fail(u, "tensor element count overflows");
    if (__builtin_mul_overflow(tt->numel, st_dtype_size(tt->dtype), &tt->nbytes))
        return u_fail(u, "tensor size overflows");
    size_t extent;
    if (tt->numel && (!view_extent(tt, &extent) || extent > st->numel)) {
        strbuf sb = {0};
        describe_dims(&sb, tt->shape, tt->stride, tt->ndim);
        if (!view_extent(tt, &extent))
            extent = SIZE_MAX;
        u_fail(u, "tensor of %s at offset %zu needs %zu elements but its storage has %zu "
                  "(storage '%s')", sb_str(&sb), tt->storage_offset, extent, st->numel, st->key);
        sb_free(&sb);
        return -1;
    }
    t->st = st;
    t->v.u.tensor = tt;
    return push(u, t);
}

/* _rebuild_parameter(data, requires_grad, backward_hooks[, state]). */
static int rebuild_parameter(unpickler *u, node **a)
{
    if (a[0]->v.kind != TF_TENSOR || a[1]->v.kind != TF_BOOL)
        return u_fail(u, "_rebuild_parameter needs a tensor and a bool");
    node *t = new_node(u->f, TF_TENSOR);
    t->tensor = a[0]->tensor;
    t->tensor.requires_grad = a[1]->v.u.b;
    t->tensor.is_parameter = true;
    t->st = a[0]->st;
    t->v.u.tensor = &t->tensor;
    return push(u, t);
}

/* ---- numpy arrays ---------------------------------------------------------------------- */

/* numpy's dtype(...) first argument ("f4", "<i8", "|b1") as ours. */
static bool numpy_dtype(const char *s, st_dtype *out)
{
    static const struct {
        const char *name;
        st_dtype dtype;
    } NAMES[] = {{"f2", ST_F16}, {"f4", ST_F32}, {"f8", ST_F64}, {"i1", ST_I8}, {"i2", ST_I16}, {"i4", ST_I32},
                 {"i8", ST_I64}, {"u1", ST_U8}, {"u2", ST_U16}, {"u4", ST_U32}, {"u8", ST_U64}, {"b1", ST_BOOL}};
    if (*s == '<' || *s == '|' || *s == '=')
        s++;
    for (size_t i = 0; i < ARRAY_LEN(NAMES); i++)
        if (!strcmp(s, NAMES[i].name))
            return *out = NAMES[i].dtype, true;
    return false;
}

/* A str or bytes node's raw bytes (a latin-1 str pickled by Python 2 is its bytes). */
static bool raw_bytes(const node *n, const unsigned char **p, size_t *len)
{
    if (n->v.kind != TF_BYTES && n->v.kind != TF_STR)
        return false;
    *p = (const unsigned char *)n->v.u.str.s;
    *len = n->v.u.str.len;
    return true;
}

/* _codecs.encode(text, "latin1"): UTF-8 text whose code points are all below 256, as bytes. */
static int codecs_encode(unpickler *u, node **a, size_t n)
{
    if (n != 2 || a[0]->v.kind != TF_STR || a[1]->v.kind != TF_STR ||
        (strcmp(a[1]->v.u.str.s, "latin1") && strcmp(a[1]->v.u.str.s, "latin-1")))
        return u_fail(u, "_codecs.encode is only read as encode(str, 'latin1')");
    const unsigned char *s = (const unsigned char *)a[0]->v.u.str.s;
    size_t len = a[0]->v.u.str.len, m = 0;
    char *out = xmalloc(len + 1);
    for (size_t i = 0; i < len; m++) {
        if (s[i] < 0x80)
            out[m] = (char)s[i++];
        else if ((s[i] & 0xfe) == 0xc2 && i + 1 < len && (s[i + 1] & 0xc0) == 0x80) {
            out[m] = (char)(((s[i] & 0x03) << 6) | (s[i + 1] & 0x3f));
            i += 2;
        } else {
            free(out);
            return u_fail(u, "_codecs.encode: the text is not latin-1");
        }
    }
    out[m] = 0;
    node *b = new_node(u->f, TF_BYTES);
    b->v.u.str.s = out;
    b->v.u.str.len = m;
    return push(u, b);
}

/* scalar(dtype, bytes): a numpy number as a plain int, float or bool. */
static int numpy_scalar(unpickler *u, node **a, size_t n)
{
    const unsigned char *p;
    size_t len;
    if (n != 2 || a[0]->v.kind != TF_OTHER || a[0]->other != OTHER_NP_DTYPE || !raw_bytes(a[1], &p, &len) ||
        len != st_dtype_size(a[0]->sdtype))
        return u_fail(u, "numpy scalar(dtype, bytes) with bytes that do not fit the dtype");
    st_dtype d = a[0]->sdtype;
    node *v = new_node(u->f, d == ST_F32 || d == ST_F64 || d == ST_F16 ? TF_FLOAT : d == ST_BOOL ? TF_BOOL : TF_INT);
    if (d == ST_F64)
        memcpy(&v->v.u.f, p, 8);
    else if (d == ST_F32) {
        float f;
        memcpy(&f, p, 4);
        v->v.u.f = f;
    } else if (d == ST_BOOL)
        v->v.u.b = p[0] != 0;
    else if (d == ST_F16)
        return u_fail(u, "numpy float16 scalars are not supported");
    else {
        uint64_t x = 0;
        for (size_t i = 0; i < len; i++)
            x |= (uint64_t)p[i] << (8 * i);
        bool is_signed = d == ST_I8 || d == ST_I16 || d == ST_I32 || d == ST_I64;
        if (is_signed && len < 8 && (x >> (8 * len - 1)) & 1)
            x |= ~0ull << (8 * len);
        v->v.u.i = (int64_t)x;
    }
    return push(u, v);
}

static int numpy_reduce(unpickler *u, node *fn, node **a, size_t n)
{
    if (fn->global == G_CODECS_ENCODE)
        return codecs_encode(u, a, n);
    if (fn->global == G_NP_SCALAR)
        return numpy_scalar(u, a, n);
    if (fn->global == G_NP_DTYPE) {
        node *d = new_node(u->f, TF_OTHER);
        d->other = OTHER_NP_DTYPE;
        if (n < 1 || a[0]->v.kind != TF_STR || !numpy_dtype(a[0]->v.u.str.s, &d->sdtype))
            return u_fail(u, "numpy dtype '%s' is not supported (numbers and booleans only)",
                          n && a[0]->v.kind == TF_STR ? a[0]->v.u.str.s : "?");
        return push(u, d);
    }
    if (n != 3 || a[0]->v.kind != TF_OTHER || a[0]->other != OTHER_GLOBAL || a[0]->global != G_NP_NDARRAY)
        return u_fail(u, "_reconstruct is only read as _reconstruct(numpy.ndarray, shape, typecode)");
    node *arr = new_node(u->f, TF_OTHER);
    arr->other = OTHER_NP_ARRAY;
    return push(u, arr);
}

/* The array's bytes as a storage of its own, and the node made a tensor over it. */
static int numpy_fill(unpickler *u, node *arr, const node *dtype, const node *shape, bool fortran, const node *data)
{
    tf_tensor *t = &arr->tensor;
    const unsigned char *p;
    size_t len;
    if (read_dims(u, shape, t->shape, NULL, &t->ndim, "shape"))
        return -1;
    t->dtype = dtype->sdtype;
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(t->numel, t->shape[i], &t->numel))
            return u_fail(u, "numpy array element count overflows");
    t->nbytes = t->numel * st_dtype_size(t->dtype);
    if (!raw_bytes(data, &p, &len) || len != t->nbytes)
        return u_fail(u, "numpy array data is not %zu bytes of raw values", t->nbytes);
    for (int i = 0, k = fortran ? 0 : t->ndim - 1; i < t->ndim; i++, k += fortran ? 1 : -1) {
        int64_t step = 1;
        for (int j = fortran ? 0 : t->ndim - 1; j != k; j += fortran ? 1 : -1)
            step *= (int64_t)t->shape[j];
        t->stride[k] = step;
    }
    if (!charge(u->f, len))
        return u_fail(u, "numpy arrays need more memory than a file of this size can justify");
    storage *st = xcalloc(1, sizeof *st);
    st->key = xasprintf("ndarray %zu", u->f->n_storages);
    st->dtype = t->dtype;
    st->numel = t->numel;
    st->data = xmalloc(len ? len : 1);
    memcpy(st->data, p, len);
    st->loaded = true;
    GROW(u->f->storages, u->f->n_storages, u->f->storages_cap);
    u->f->storages[u->f->n_storages++] = st;
    arr->st = st;
    arr->v.kind = TF_TENSOR;
    arr->v.u.tensor = t;
    return 0;
}

/* BUILD of a dtype ((version, byteorder, ...): little-endian only) or of an array
 * ((version, shape, dtype, is_fortran, data)). */
static int numpy_build(unpickler *u, node *obj, node *state)
{
    node **s = state->v.kind == TF_TUPLE ? (node **)state->v.u.seq.items : NULL;
    size_t n = s ? state->v.u.seq.n : 0;
    if (obj->other == OTHER_NP_DTYPE) {
        if (n < 2 || s[1]->v.kind != TF_STR)
            return u_fail(u, "numpy dtype state is not (version, byteorder, ...)");
        if (!strcmp(s[1]->v.u.str.s, ">") && st_dtype_size(obj->sdtype) > 1)
            return u_fail(u, "big-endian numpy arrays are not supported");
        return 0;
    }
    if (n != 5 || s[2]->v.kind != TF_OTHER || s[2]->other != OTHER_NP_DTYPE ||
        (s[3]->v.kind != TF_BOOL && s[3]->v.kind != TF_INT))
        return u_fail(u, "numpy array state is not (version, shape, dtype, is_fortran, data)");
    bool fortran = s[3]->v.kind == TF_BOOL ? s[3]->v.u.b : s[3]->v.u.i != 0;
    return numpy_fill(u, obj, s[2], s[1], fortran, s[4]);
}

/* REDUCE: call an allowed global with a tuple of arguments. */
static int op_reduce(unpickler *u)
{
    node *args = pop(u), *fn = args ? pop(u) : NULL;
    if (!fn)
        return -1;
    if (fn->v.kind != TF_OTHER || fn->other != OTHER_GLOBAL)
        return u_fail(u, "REDUCE on a %s, not a class or function", tf_kind_name(fn->v.kind));
    if (args->v.kind != TF_TUPLE)
        return u_fail(u, "REDUCE arguments are a %s, not a tuple", tf_kind_name(args->v.kind));
    node **a = (node **)args->v.u.seq.items;
    size_t n = args->v.u.seq.n;
    switch (fn->global) {
    case G_ODICT:
        if (n != 0)
            return u_fail(u, "OrderedDict called with %zu arguments (torch passes none)", n);
        return push(u, new_node(u->f, TF_DICT));
    case G_REBUILD_V2:
        if (n != 6 && n != 7)
            return u_fail(u, "_rebuild_tensor_v2 called with %zu arguments (6 or 7)", n);
        if (a[4]->v.kind != TF_BOOL)
            return u_fail(u, "_rebuild_tensor_v2's requires_grad is not a bool");
        return rebuild_tensor(u, a, a[4]->v.u.b);
    case G_REBUILD:
        if (n != 4)
            return u_fail(u, "_rebuild_tensor called with %zu arguments (4)", n);
        return rebuild_tensor(u, a, false);
    case G_PARAM:
    case G_PARAM_STATE:
        if (n != (fn->global == G_PARAM ? 3u : 4u))
            return u_fail(u, "'%s' called with %zu arguments", fn->gname, n);
        return rebuild_parameter(u, a);
    case G_NP_RECONSTRUCT:
    case G_NP_DTYPE:
    case G_NP_SCALAR:
    case G_CODECS_ENCODE:
        return numpy_reduce(u, fn, a, n);
    default:
        return u_fail(u, "'%s' cannot be called in a checkpoint", fn->gname);
    }
}

/* BUILD: torch uses it to set an OrderedDict's attributes (state_dict._metadata), which
 * selfsup does not need; anything else is refused. */
static int op_build(unpickler *u)
{
    node *state = pop(u), *obj = state ? top(u) : NULL;
    if (!obj)
        return -1;
    if (obj->v.kind == TF_OTHER && (obj->other == OTHER_NP_DTYPE || obj->other == OTHER_NP_ARRAY))
        return numpy_build(u, obj, state);
    if (obj->v.kind != TF_DICT || (state->v.kind != TF_DICT && state->v.kind != TF_NONE))
        return u_fail(u, "BUILD of a %s with a %s state is not supported",
                      tf_kind_name(obj->v.kind), tf_kind_name(state->v.kind));
    return 0;
}

/* BINPERSID: ('storage', torch.XStorage, key, location, numel[, view_metadata]). */
static int op_persid(unpickler *u)
{
    node *pid = pop(u);
    if (!pid)
        return -1;
    if (!u->persid)
        return u_fail(u, "persistent id outside a checkpoint's main pickle");
    node **a = (node **)pid->v.u.seq.items;
    size_t n = pid->v.kind == TF_TUPLE ? pid->v.u.seq.n : 0;
    int64_t numel;
    if ((n != 5 && n != 6) || a[0]->v.kind != TF_STR || strcmp(a[0]->v.u.str.s, "storage") ||
        a[1]->v.kind != TF_OTHER || a[1]->global != G_STORAGE || a[1]->other != OTHER_GLOBAL ||
        a[2]->v.kind != TF_STR || a[3]->v.kind != TF_STR || !get_int(a[4], &numel) || numel < 0)
        return u_fail(u, "persistent id is not ('storage', torch.XStorage, key, location, "
                         "numel)");
    if (n == 6 && a[5]->v.kind != TF_NONE)
        return u_fail(u, "storage views (checkpoints from PyTorch < 1.0) are not supported");
    const char *key = a[2]->v.u.str.s;
    if (!*key || strlen(key) != a[2]->v.u.str.len || strchr(key, '/') || strlen(key) > 64)
        return u_fail(u, "bad storage key");
    storage *st = NULL;
    for (size_t i = 0; i < u->f->n_storages && !st; i++)
        if (!strcmp(u->f->storages[i]->key, key))
            st = u->f->storages[i];
    if (st && (st->dtype != a[1]->sdtype || st->numel != (size_t)numel))
        return u_fail(u, "storage '%s' is used with two different types or sizes", key);
    if (!st) {
        st = xcalloc(1, sizeof *st);
        st->key = xstrdup(key);
        st->dtype = a[1]->sdtype;
        st->numel = (size_t)numel;
        GROW(u->f->storages, u->f->n_storages, u->f->storages_cap);
        u->f->storages[u->f->n_storages++] = st;
        if (u->persid(u, st))
            return -1;
    }
    node *s = new_node(u->f, TF_OTHER);
    s->other = OTHER_STORAGE;
    s->st = st;
    return push(u, s);
}

/* ---- the opcode loop ------------------------------------------------------------------- */

static int op_tuple(unpickler *u, size_t start)
{
    node *t = new_node(u->f, TF_TUPLE);
    for (size_t i = start; i < u->sp; i++)
        if (seq_append(u, t, u->stack[i]))
            return -1;
    u->sp = start;
    return push(u, t);
}

static int op_tuple_n(unpickler *u, size_t n)
{
    if (u->sp < floor_of(u) + n)
        return u_fail(u, "pickle stack underflow");
    return op_tuple(u, u->sp - n);
}

static int op_setitems(unpickler *u, size_t start)
{
    if (start == 0)
        return u_fail(u, "SETITEMS without a dict");
    node *d = u->stack[start - 1];
    if (d->v.kind != TF_DICT || (u->sp - start) % 2)
        return u_fail(u, "SETITEMS on a %s with %zu items", tf_kind_name(d->v.kind),
                      u->sp - start);
    for (size_t i = start; i < u->sp; i += 2)
        if (dict_set(u, d, u->stack[i], u->stack[i + 1]))
            return -1;
    u->sp = start;
    return 0;
}

static int op_appends(unpickler *u, size_t start)
{
    if (start == 0)
        return u_fail(u, "APPENDS without a list");
    node *l = u->stack[start - 1];
    if (l->v.kind != TF_LIST)
        return u_fail(u, "APPENDS on a %s", tf_kind_name(l->v.kind));
    for (size_t i = start; i < u->sp; i++)
        if (seq_append(u, l, u->stack[i]))
            return -1;
    u->sp = start;
    return 0;
}

static int op_setitem(unpickler *u)
{
    node *val = pop(u), *key = val ? pop(u) : NULL, *d = key ? top(u) : NULL;
    if (!d)
        return -1;
    if (d->v.kind != TF_DICT)
        return u_fail(u, "SETITEM on a %s", tf_kind_name(d->v.kind));
    return dict_set(u, d, key, val);
}

static int op_append(unpickler *u)
{
    node *item = pop(u), *l = item ? top(u) : NULL;
    if (!l)
        return -1;
    if (l->v.kind != TF_LIST)
        return u_fail(u, "APPEND on a %s", tf_kind_name(l->v.kind));
    return seq_append(u, l, item);
}

static int op_mark(unpickler *u)
{
    if (u->n_marks == MAX_MARKS)
        return u_fail(u, "too many MARKs open (more than %d)", MAX_MARKS);
    u->marks[u->n_marks++] = u->sp;
    return 0;
}

static int op_index(unpickler *u, size_t width, bool put)
{
    uint64_t idx;
    if (!take_le(u, width, &idx))
        return -1;
    return put ? memo_put(u, idx) : memo_get(u, idx);
}

static int op_proto(unpickler *u)
{
    uint64_t v;
    if (!take_le(u, 1, &v))
        return -1;
    if (v < 2 || v > 5)
        return u_fail(u, "pickle protocol %u is not supported (2 to 5)", (unsigned)v);
    return 0;
}

/* One opcode (already consumed) with its arguments; 1 at STOP. */
static int step(unpickler *u, unsigned char op)
{
    uint64_t v;
    size_t start = 0;
    switch (op) {
    case 0x80: return op_proto(u);
    case 0x95: return take(u, 8) ? 0 : -1; /* FRAME: framing only */
    case '}': return push(u, new_node(u->f, TF_DICT));
    case ']': return push(u, new_node(u->f, TF_LIST));
    case ')': return push(u, new_node(u->f, TF_TUPLE));
    case '(': return op_mark(u);
    case 's': return op_setitem(u);
    case 'u': return pop_mark(u, &start) ? -1 : op_setitems(u, start);
    case 'a': return op_append(u);
    case 'e': return pop_mark(u, &start) ? -1 : op_appends(u, start);
    case 0x85: return op_tuple_n(u, 1);
    case 0x86: return op_tuple_n(u, 2);
    case 0x87: return op_tuple_n(u, 3);
    case 't': return pop_mark(u, &start) ? -1 : op_tuple(u, start);
    case 'X': return push_bytes(u, TF_STR, 4);
    case 0x8c: return push_bytes(u, TF_STR, 1);
    case 0x8d: return push_bytes(u, TF_STR, 8);
    case 'U': return push_bytes(u, TF_STR, 1); /* Python 2's str, latin-1 */
    case 'T': return push_bytes(u, TF_STR, 4);
    case 'C': return push_bytes(u, TF_BYTES, 1);
    case 'B': return push_bytes(u, TF_BYTES, 4);
    case 0x8e: return push_bytes(u, TF_BYTES, 8);
    case 'J': return take_le(u, 4, &v) ? push_int(u, (int32_t)(uint32_t)v) : -1;
    case 'K': return take_le(u, 1, &v) ? push_int(u, (int64_t)v) : -1;
    case 'M': return take_le(u, 2, &v) ? push_int(u, (int64_t)v) : -1;
    case 0x8a: return push_long(u, 1);
    case 0x8b: return push_long(u, 4);
    case 'G': return push_float(u);
    case 0x88:
    case 0x89: {
        node *b = new_node(u->f, TF_BOOL);
        b->v.u.b = op == 0x88;
        return push(u, b);
    }
    case 'N': return push(u, new_node(u->f, TF_NONE));
    case 'q': return op_index(u, 1, true);
    case 'r': return op_index(u, 4, true);
    case 0x94: return memo_put(u, u->memo_n);
    case 'h': return op_index(u, 1, false);
    case 'j': return op_index(u, 4, false);
    case 'c': return op_global(u);
    case 0x93: return op_stack_global(u);
    case 'R': return op_reduce(u);
    case 'b': return op_build(u);
    case 'Q': return op_persid(u);
    case '0': return pop(u) ? 0 : -1;
    case '1': return pop_mark(u, &start) ? -1 : (u->sp = start, 0);
    case '.': return 1;
    default:
        return u_fail(u, "unknown or disallowed pickle opcode 0x%02x", op);
    }
}

/* Unpickle one pickle at buf[0..len); *used is the bytes it took (through STOP). */
static int unpickle(torchfile *f, const char *part, const unsigned char *buf, size_t len,
                    persid_fn persid, zip_t *zip, const char *prefix, const tf_value **out,
                    size_t *used, char **err)
{
    unpickler u = {.f = f, .part = part, .p = buf, .len = len, .persid = persid, .zip = zip,
                   .prefix = prefix, .err = err};
    int rc = 0;
    while (rc == 0) {
        u.op_at = u.pos;
        if (u.pos >= u.len) {
            rc = u_fail(&u, "truncated pickle (no STOP)");
            break;
        }
        rc = step(&u, u.p[u.pos++]);
    }
    if (rc == 1) {
        node *result = pop(&u);
        rc = result ? 0 : -1;
        if (result) {
            *out = &result->v;
            *used = u.pos;
        }
    }
    free(u.stack);
    free(u.memo);
    return rc;
}

/* ---- tensor data ----------------------------------------------------------------------- */

static bool is_contiguous(const tf_tensor *t)
{
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != want)
            return false;
        want *= (int64_t)t->shape[i];
    }
    return true;
}

/* Gather a strided view into a fresh C-ordered buffer. */
static void gather(const tf_tensor *t, const unsigned char *base, unsigned char *dst)
{
    size_t el = st_dtype_size(t->dtype), idx[TF_MAX_DIMS] = {0};
    for (size_t n = 0; n < t->numel; n++) {
        size_t at = t->storage_offset;
        for (int i = 0; i < t->ndim; i++)
            at += idx[i] * (size_t)t->stride[i];
        memcpy(dst + n * el, base + at * el, el);
        for (int i = t->ndim - 1; i >= 0 && ++idx[i] == t->shape[i]; i--)
            idx[i] = 0;
    }
}

static int finish_tensors(torchfile *f, char **err)
{
    for (size_t i = 0; i < f->n_nodes; i++) {
        node *n = f->nodes[i];
        if (n->v.kind != TF_TENSOR || !n->tensor.numel)
            continue;
        tf_tensor *t = &n->tensor;
        if (!n->st->loaded)
            return tf_fail(f, err, "missing storage '%s'", n->st->key);
        if (is_contiguous(t)) {
            t->data = n->st->data + t->storage_offset * st_dtype_size(t->dtype);
            continue;
        }
        if (!charge(f, t->nbytes))
            return tf_fail(f, err, "tensor copies need more memory than a file of this size "
                                   "can justify");
        unsigned char *copy = xmalloc(t->nbytes);
        gather(t, n->st->data, copy);
        GROW(f->blobs, f->n_blobs, f->blobs_cap);
        f->blobs[f->n_blobs++] = copy;
        t->data = copy;
    }
    return 0;
}

static bool storage_bytes(const storage *st, size_t *out)
{
    return !__builtin_mul_overflow(st->numel, st_dtype_size(st->dtype), out);
}

/* ---- the zip format -------------------------------------------------------------------- */

/* Read a whole zip entry whose size is known to be `size`. */
static int zip_read_entry(torchfile *f, zip_t *zip, zip_int64_t idx, const char *entry,
                          unsigned char *dst, size_t size, char **err)
{
    zip_file_t *zf = zip_fopen_index(zip, (zip_uint64_t)idx, 0);
    if (!zf)
        return tf_fail(f, err, "cannot read record '%s': %s", entry, zip_strerror(zip));
    zip_int64_t got = size ? zip_fread(zf, dst, size) : 0;
    int rc = 0;
    if (got < 0 || (size_t)got != size)
        rc = tf_fail(f, err, "record '%s' is truncated or damaged: %s", entry,
                     got < 0 ? zip_file_strerror(zf) : "short read");
    zip_fclose(zf);
    return rc;
}

static int zip_locate(zip_t *zip, const char *entry, zip_uint64_t *size, zip_int64_t *idx)
{
    zip_stat_t zs;
    *idx = zip_name_locate(zip, entry, 0);
    if (*idx < 0 || zip_stat_index(zip, (zip_uint64_t)*idx, 0, &zs) || !(zs.valid & ZIP_STAT_SIZE))
        return -1;
    *size = zs.size;
    return 0;
}

static int zip_storage(unpickler *u, storage *st)
{
    torchfile *f = u->f;
    char *entry = xasprintf("%s/data/%s", u->prefix, st->key);
    zip_uint64_t size;
    zip_int64_t idx;
    size_t want;
    int rc = 0;
    if (zip_locate(u->zip, entry, &size, &idx))
        rc = tf_fail(f, u->err, "missing storage record '%s'", entry);
    else if (!storage_bytes(st, &want) || size != want)
        rc = tf_fail(f, u->err, "storage record '%s' has %llu bytes, expected %zu (%zu elements "
                                "of %s)", entry, (unsigned long long)size,
                     storage_bytes(st, &want) ? want : SIZE_MAX, st->numel,
                     st_dtype_name(st->dtype));
    else if (!charge(f, want))
        rc = tf_fail(f, u->err, "storage record '%s' is larger than the file can hold", entry);
    else {
        st->data = xmalloc(want ? want : 1);
        rc = zip_read_entry(f, u->zip, idx, entry, st->data, want, u->err);
        st->loaded = rc == 0;
    }
    free(entry);
    return rc;
}

static int zip_small_entry(torchfile *f, zip_t *zip, const char *entry, char **text, char **err)
{
    zip_uint64_t size;
    zip_int64_t idx;
    *text = NULL;
    if (zip_locate(zip, entry, &size, &idx))
        return 0;
    if (size > 64)
        return tf_fail(f, err, "record '%s' is too large", entry);
    *text = xcalloc(1, (size_t)size + 1);
    return zip_read_entry(f, zip, idx, entry, (unsigned char *)*text, (size_t)size, err);
}

static int check_byteorder(torchfile *f, zip_t *zip, const char *prefix, char **err)
{
    char *entry = xasprintf("%s/byteorder", prefix), *text;
    int rc = zip_small_entry(f, zip, entry, &text, err);
    if (rc == 0 && text && strcmp(text, "little") != 0)
        rc = tf_fail(f, err, "big-endian checkpoints are not supported (byteorder '%.20s')", text);
    free(text);
    free(entry);
    return rc;
}

static int parse_zip_archive(torchfile *f, zip_t *zip, char **err)
{
    const char *first = zip_get_num_entries(zip, 0) > 0 ? zip_get_name(zip, 0, 0) : NULL;
    const char *slash = first ? strchr(first, '/') : NULL;
    if (!slash)
        return tf_fail(f, err, "not a torch.save archive (no top-level folder)");
    char *prefix = xstrndup(first, (size_t)(slash - first));
    char *entry = xasprintf("%s/data.pkl", prefix);
    zip_uint64_t size;
    zip_int64_t idx;
    unsigned char *pkl = NULL;
    int rc = check_byteorder(f, zip, prefix, err);
    if (rc == 0 && zip_locate(zip, entry, &size, &idx))
        rc = tf_fail(f, err, "no data.pkl record ('%s') in the archive", entry);
    else if (rc == 0 && !charge(f, (size_t)size))
        rc = tf_fail(f, err, "record '%s' is larger than the file can hold", entry);
    if (rc == 0) {
        pkl = xmalloc(size ? (size_t)size : 1);
        rc = zip_read_entry(f, zip, idx, entry, pkl, (size_t)size, err);
    }
    size_t used;
    if (rc == 0)
        rc = unpickle(f, "data.pkl", pkl, (size_t)size, zip_storage, zip, prefix, &f->root,
                      &used, err);
    free(pkl);
    free(entry);
    free(prefix);
    return rc;
}

static int parse_zip(torchfile *f, const void *buf, size_t len, char **err)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(buf, len, 0, &ze);
    zip_t *zip = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : NULL;
    if (!zip) {
        int rc = tf_fail(f, err, "truncated or damaged zip archive (%s)", zip_error_strerror(&ze));
        if (src)
            zip_source_free(src);
        zip_error_fini(&ze);
        return rc;
    }
    zip_error_fini(&ze);
    int rc = parse_zip_archive(f, zip, err);
    zip_discard(zip);
    return rc;
}

/* ---- the legacy format ----------------------------------------------------------------- */

/* 0x1950a86a20f9469cfc6c, the legacy MAGIC_NUMBER, as LONG1's little-endian bytes. */
static const unsigned char MAGIC[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

static int legacy_storage(unpickler *u, storage *st)
{
    (void)u;
    (void)st; /* filled after the main pickle, from the raw storages that follow it */
    return 0;
}

static bool is_magic(const tf_value *v)
{
    const node *m = (const node *)v;
    return m->v.kind == TF_OTHER && m->other == OTHER_BIGINT && m->v.u.str.len == sizeof MAGIC &&
           !memcmp(m->v.u.str.s, MAGIC, sizeof MAGIC);
}

/* After the magic number: the protocol version and sys_info pickles; *pos moves past them. */
static int legacy_header(torchfile *f, const unsigned char *p, size_t len, size_t *pos, char **err)
{
    const tf_value *v;
    size_t used;
    if (unpickle(f, "protocol version", p + *pos, len - *pos, NULL, NULL, NULL, &v, &used, err))
        return -1;
    if (v->kind != TF_INT || v->u.i != 1001)
        return tf_fail(f, err, "unsupported legacy protocol version (expected 1001)");
    *pos += used;
    if (unpickle(f, "sys_info", p + *pos, len - *pos, NULL, NULL, NULL, &v, &used, err))
        return -1;
    const tf_value *le = tf_dict_get(v, "little_endian");
    if (le && (le->kind != TF_BOOL || !le->u.b))
        return tf_fail(f, err, "big-endian checkpoints are not supported");
    *pos += used;
    return 0;
}

static storage *find_storage(torchfile *f, const tf_value *key)
{
    for (size_t i = 0; i < f->n_storages; i++)
        if (key->kind == TF_STR && !strcmp(f->storages[i]->key, key->u.str.s))
            return f->storages[i];
    return NULL;
}

/* After the keys list: per key, an int64 element count and the raw bytes. */
static int legacy_storages(torchfile *f, const tf_value *keys, const unsigned char *p,
                           size_t len, size_t pos, char **err)
{
    if (keys->kind != TF_LIST)
        return tf_fail(f, err, "storage key list is a %s, not a list", tf_kind_name(keys->kind));
    for (size_t i = 0; i < keys->u.seq.n; i++) {
        storage *st = find_storage(f, keys->u.seq.items[i]);
        if (!st || st->loaded)
            return tf_fail(f, err, "storage key %zu is unknown or repeated", i);
        size_t want;
        uint64_t count = 0;
        if (len - pos < 8)
            return tf_fail(f, err, "truncated: storage '%s' is missing", st->key);
        for (int b = 0; b < 8; b++)
            count |= (uint64_t)p[pos + b] << (8 * b);
        pos += 8;
        if (count != st->numel || !storage_bytes(st, &want))
            return tf_fail(f, err, "storage '%s' has %llu elements, expected %zu", st->key,
                           (unsigned long long)count, st->numel);
        if (want > len - pos)
            return tf_fail(f, err, "truncated: storage '%s' needs %zu bytes, %zu left", st->key,
                           want, len - pos);
        if (!charge(f, want))
            return tf_fail(f, err, "storage '%s' is larger than the file can hold", st->key);
        st->data = xmalloc(want ? want : 1);
        memcpy(st->data, p + pos, want);
        st->loaded = true;
        pos += want;
    }
    return 0;
}

/* The legacy format from just after its magic number (at pos). */
static int parse_legacy(torchfile *f, const unsigned char *p, size_t len, size_t pos, char **err)
{
    size_t used = 0;
    const tf_value *keys;
    if (legacy_header(f, p, len, &pos, err) ||
        unpickle(f, "main pickle", p + pos, len - pos, legacy_storage, NULL, NULL, &f->root, &used, err))
        return -1;
    pos += used;
    if (unpickle(f, "storage keys", p + pos, len - pos, NULL, NULL, NULL, &keys, &used, err))
        return -1;
    return legacy_storages(f, keys, p, len, pos + used, err);
}

/* A pickled file, its first pickle read once: the legacy format when that pickle is the magic
 * number, else a plain pickle of one object (numpy arrays allowed: Caffe2's .pkl weights), which
 * must then be the whole file. */
static int parse_pickled(torchfile *f, const unsigned char *p, size_t len, char **err)
{
    const tf_value *first;
    size_t used;
    if (unpickle(f, "pickle", p, len, NULL, NULL, NULL, &first, &used, err))
        return -1;
    if (is_magic(first))
        return parse_legacy(f, p, len, used, err);
    if (used != len && first->kind == TF_OTHER && ((const node *)first)->other == OTHER_BIGINT)
        return tf_fail(f, err, "wrong magic number: not a PyTorch checkpoint");
    if (used != len)
        return tf_fail(f, err, "%zu bytes after the pickle: neither a PyTorch checkpoint nor a plain pickle",
                       len - used);
    f->root = first;
    return 0;
}

/* ---- public entry points --------------------------------------------------------------- */

static torchfile *new_file(const char *name, size_t len)
{
    torchfile *f = xcalloc(1, sizeof *f);
    f->name = xstrdup(name);
    f->budget = len > (SIZE_MAX - BUDGET_SLACK) / 2 ? SIZE_MAX : 2 * len + BUDGET_SLACK;
    return f;
}

int torchfile_parse(const void *buf, size_t len, const char *name, torchfile **out, char **err)
{
    *out = NULL;
    torchfile *f = new_file(name, len);
    const unsigned char *p = buf;
    int rc;
    if (len >= 4 && !memcmp(p, "PK\x03\x04", 4))
        rc = parse_zip(f, buf, len, err);
    else if (len >= 2 && p[0] == 0x80)
        rc = parse_pickled(f, p, len, err);
    else
        rc = tf_fail(f, err, "not a PyTorch checkpoint (neither a zip archive nor a pickle of protocol 2 or more)");
    if (rc == 0)
        rc = finish_tensors(f, err);
    if (rc) {
        torchfile_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int torchfile_unpickle(const void *buf, size_t len, const char *name, torchfile **out,
                       char **err)
{
    *out = NULL;
    torchfile *f = new_file(name, len);
    size_t used;
    if (unpickle(f, "pickle", buf, len, NULL, NULL, NULL, &f->root, &used, err) || finish_tensors(f, err)) {
        torchfile_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int torchfile_open(const char *path, torchfile **out, char **err)
{
    *out = NULL;
    int fd = open_regular_file(path, SIZE_MAX, NULL, err); /* never waits on a FIFO */
    if (fd < 0)
        return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return report_failure(err, "%s: %s", path, strerror(e));
    }
    size_t len = (size_t)sb.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (len && map == MAP_FAILED)
        return report_failure(err, "%s: %s", path, strerror(e));
    int rc = torchfile_parse(len ? map : "", len, path, out, err);
    if (len)
        munmap(map, len);
    return rc;
}

void torchfile_close(torchfile *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_nodes; i++) {
        node *n = f->nodes[i];
        if (n->v.kind == TF_STR || n->v.kind == TF_BYTES || n->other == OTHER_BIGINT)
            free((char *)n->v.u.str.s);
        else if (n->v.kind == TF_LIST || n->v.kind == TF_TUPLE)
            free(n->v.u.seq.items);
        else if (n->v.kind == TF_DICT) {
            free(n->v.u.dict.keys);
            free(n->v.u.dict.vals);
        }
        free(n->slots);
        free(n->gname);
        free(n);
    }
    for (size_t i = 0; i < f->n_storages; i++) {
        free(f->storages[i]->key);
        free(f->storages[i]->data);
        free(f->storages[i]);
    }
    for (size_t i = 0; i < f->n_blobs; i++)
        free(f->blobs[i]);
    free(f->nodes);
    free(f->storages);
    free(f->blobs);
    free(f->name);
    free(f);
}

const tf_value *torchfile_root(const torchfile *f)
{
    return f->root;
}

/* ---- walking --------------------------------------------------------------------------- */

const tf_value *tf_dict_get(const tf_value *v, const char *key)
{
    if (!v || v->kind != TF_DICT)
        return NULL;
    size_t len = strlen(key);
    for (size_t i = 0; i < v->u.dict.n; i++) {
        const tf_value *k = v->u.dict.keys[i];
        if (k->kind == TF_STR && k->u.str.len == len && !memcmp(k->u.str.s, key, len))
            return v->u.dict.vals[i];
    }
    return NULL;
}

const tf_value *tf_lookup(const tf_value *v, const char *dotted)
{
    char *path = xstrdup(dotted), *save = NULL;
    for (char *part = strtok_r(path, ".", &save); part && v; part = strtok_r(NULL, ".", &save))
        v = tf_dict_get(v, part);
    free(path);
    return v;
}

typedef struct {
    tf_named *items;
    size_t n, cap;
} named_list;

static int flatten(const tf_value *v, const char *prefix, named_list *out, int depth, char **err)
{
    if (depth > MAX_NEST)
        return report_failure(err, "state dict nested deeper than %d levels (cyclic?)", MAX_NEST);
    if (v->kind == TF_TENSOR) {
        GROW(out->items, out->n, out->cap);
        out->items[out->n++] = (tf_named){xstrdup(prefix), v->u.tensor};
        return 0;
    }
    if (v->kind != TF_DICT)
        return 0;
    for (size_t i = 0; i < v->u.dict.n; i++) {
        const tf_value *k = v->u.dict.keys[i];
        char *name;
        if (k->kind == TF_STR)
            name = *prefix ? xasprintf("%s.%s", prefix, k->u.str.s) : xstrdup(k->u.str.s);
        else if (k->kind == TF_INT)
            name = *prefix ? xasprintf("%s.%lld", prefix, (long long)k->u.i)
                           : xasprintf("%lld", (long long)k->u.i);
        else
            continue;
        int rc = flatten(v->u.dict.vals[i], name, out, depth + 1, err);
        free(name);
        if (rc)
            return rc;
    }
    return 0;
}

int tf_flatten(const tf_value *v, const char *prefix, tf_named **out, size_t *n_out, char **err)
{
    named_list l = {0};
    *out = NULL;
    *n_out = 0;
    if (flatten(v, prefix ? prefix : "", &l, 0, err)) {
        tf_named_free(l.items, l.n);
        return -1;
    }
    *out = l.items;
    *n_out = l.n;
    return 0;
}

void tf_named_free(tf_named *named, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(named[i].name);
    free(named);
}
