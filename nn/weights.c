/*
 * weights.c — MODEL.WEIGHTS_INIT and safetensors export over a model's entries (weights.h).
 *
 * Reading: the file's first bytes say what it is ("PK" a torch zip archive, '{' after an
 * 8-byte length a safetensors header, anything else goes to torchfile, which knows the legacy
 * format and refuses the rest). The selected state dict becomes a flat list of
 * weights_tensor, names malloc'd here, data pointing into the parsed file.
 *
 * Loading checks everything first (names after the prefix rules, sorted for lookup; missing
 * and unexpected keys; shapes; dtypes), collecting every problem into one message, and only
 * then converts each tensor to fp32 on the host and uploads it (eng_upload), so a refused
 * file changes nothing.
 */
#include "weights.h"

#include "log.h"
#include "torchfile.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRUNK_PREFIX "trunk._feature_blocks."
#define TRUNK_FE_PREFIX "trunk.base_model._feature_blocks."
#define HEADS_PREFIX "heads."
#define LIST_SHOWN 10 /* names shown per problem list; the rest are counted */

struct weights_file {
    torchfile *tf;
    st_file *sf;
    weights_tensor *t;
    size_t n, cap;
};

static const char *const default_skip[] = {"num_batches_tracked"};

weights_init_options weights_init_defaults(void)
{
    return (weights_init_options){
        .params_file = "",
        .state_dict_key_name = "classy_state_dict",
        .skip_layers = default_skip,
        .n_skip_layers = (int)ARRAY_LEN(default_skip),
        .remove_prefix = "",
        .append_prefix = "",
        .load_heads = true,
    };
}

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* ---- dtype conversion ------------------------------------------------------------------------- */

bool weights_dtype_is_float(st_dtype dtype)
{
    return dtype == ST_F32 || dtype == ST_F16 || dtype == ST_BF16 || dtype == ST_F64;
}

static float half_to_float(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;
    if (exp == 0)
        v = ldexpf((float)mant, -24); /* zero and subnormals */
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexpf((float)(mant | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* Memcpy per element: foreign safetensors files need not align their data. */
void weights_to_f32(const weights_tensor *t, float *out)
{
    const unsigned char *p = t->data;
    for (size_t i = 0; i < t->numel; i++) {
        if (t->dtype == ST_F32) {
            memcpy(&out[i], p + 4 * i, 4);
        } else if (t->dtype == ST_F64) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            if (t->dtype == ST_BF16) {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&out[i], &bits, 4);
            } else {
                out[i] = half_to_float(h);
            }
        }
    }
}

/* ---- reading ---------------------------------------------------------------------------------- */

static weights_tensor *add_tensor(weights_file *f, char *name)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 256;
        f->t = xrealloc(f->t, f->cap * sizeof *f->t);
    }
    weights_tensor *t = &f->t[f->n++];
    *t = (weights_tensor){.name = name};
    return t;
}

static void add_from_torch(weights_file *f, const tf_named *named, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const tf_tensor *s = named[i].tensor;
        weights_tensor *t = add_tensor(f, xstrdup(named[i].name));
        t->dtype = s->dtype;
        t->ndim = s->ndim;
        memcpy(t->shape, s->shape, sizeof t->shape);
        t->numel = s->numel;
        t->data = s->data;
    }
}

/* The tensors of dict `v` (a state dict), named prefix.key. */
static int flatten_into(weights_file *f, const tf_value *v, const char *prefix, const char *path, char **err)
{
    tf_named *named;
    size_t n;
    char *e = NULL;
    if (tf_flatten(v, prefix, &named, &n, &e) != 0) {
        int rc = report_failure(err, "%s: %s", path, e);
        free(e);
        return rc;
    }
    add_from_torch(f, named, n);
    tf_named_free(named, n);
    return 0;
}

/* "a, b, c" of a dict's string keys (the first 20), for "no such key" messages. */
static char *dict_keys(const tf_value *v)
{
    strbuf sb = {0};
    size_t shown = 0;
    for (size_t i = 0; v->kind == TF_DICT && i < v->u.dict.n; i++) {
        const tf_value *k = v->u.dict.keys[i];
        if (k->kind != TF_STR)
            continue;
        if (shown++ == 20) {
            sb_puts(&sb, ", …");
            break;
        }
        sb_printf(&sb, "%s'%s'", shown > 1 ? ", " : "", k->u.str.s);
    }
    if (!sb.len)
        sb_puts(&sb, "none");
    return sb.s;
}

/* VISSL's checkpoint: classy_state_dict.base_model.model.{trunk,heads}. */
static int read_classy(weights_file *f, const tf_value *sd, const char *path, char **err)
{
    const tf_value *model = tf_lookup(sd, "base_model.model");
    const tf_value *trunk = model ? tf_dict_get(model, "trunk") : NULL;
    if (!trunk || trunk->kind != TF_DICT)
        return report_failure(err,
                              "%s: 'classy_state_dict' has no base_model.model.trunk state dict, so it is not a "
                              "VISSL checkpoint; set MODEL.WEIGHTS_INIT.STATE_DICT_KEY_NAME to the key holding "
                              "the state dict ('' for a plain state dict)",
                              path);
    if (flatten_into(f, trunk, "trunk", path, err) != 0)
        return -1;
    const tf_value *heads = tf_dict_get(model, "heads");
    return heads ? flatten_into(f, heads, "heads", path, err) : 0;
}

static int read_torch(weights_file *f, const char *path, const char *key, char **err)
{
    if (torchfile_open(path, &f->tf, err) != 0)
        return -1;
    const tf_value *root = torchfile_root(f->tf);
    if (!key)
        key = tf_dict_get(root, "classy_state_dict") ? "classy_state_dict" : "";
    if (!*key)
        return flatten_into(f, root, "", path, err);
    const tf_value *sd = tf_dict_get(root, key);
    if (!sd) {
        char *keys = root->kind == TF_DICT ? dict_keys(root) : xasprintf("it is a %s", tf_kind_name(root->kind));
        int rc = report_failure(err,
                                "%s: no key '%s' at the top level (%s%s); set MODEL.WEIGHTS_INIT."
                                "STATE_DICT_KEY_NAME to the key holding the state dict, or to '' when the file "
                                "is a plain state dict (a torchvision file)",
                                path, key, root->kind == TF_DICT ? "its keys: " : "", keys);
        free(keys);
        return rc;
    }
    if (!strcmp(key, "classy_state_dict"))
        return read_classy(f, sd, path, err);
    return flatten_into(f, sd, "", path, err);
}

static void add_from_st(weights_file *f, const st_tensor *s, const char *name)
{
    weights_tensor *t = add_tensor(f, xstrdup(name));
    t->dtype = s->dtype;
    t->ndim = s->ndim;
    t->numel = 1;
    for (int k = 0; k < s->ndim; k++)
        t->numel *= (t->shape[k] = s->shape[k]);
    t->data = s->data;
}

static int read_safetensors(weights_file *f, const char *path, const char *key, char **err)
{
    if (st_open(path, &f->sf, err) != 0)
        return -1;
    size_t n = st_count(f->sf), model = 0;
    for (size_t i = 0; i < n; i++)
        if (starts_with(st_at(f->sf, i)->name, "trunk.") || starts_with(st_at(f->sf, i)->name, HEADS_PREFIX))
            model++;
    if (!key)
        key = "classy_state_dict";
    size_t klen = strlen(key);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *s = st_at(f->sf, i);
        if (!*key || (!strcmp(key, "classy_state_dict") && !model))
            add_from_st(f, s, s->name);
        else if (!strcmp(key, "classy_state_dict")) {
            if (starts_with(s->name, "trunk.") || starts_with(s->name, HEADS_PREFIX))
                add_from_st(f, s, s->name);
        } else if (!strncmp(s->name, key, klen) && s->name[klen] == '.')
            add_from_st(f, s, s->name + klen + 1);
    }
    if (*key && strcmp(key, "classy_state_dict") && !f->n)
        return report_failure(err,
                              "%s: no tensor named '%s.*' in this safetensors file; set MODEL.WEIGHTS_INIT."
                              "STATE_DICT_KEY_NAME to '' to take all of its %zu tensors",
                              path, key, n);
    if (model && model < n)
        log_info("weights: %s: %zu of %zu tensors are trunk/heads weights; the rest (training state) is not "
                 "model weights",
                 path, model, n);
    return 0;
}

/* '{' after the 8-byte header length marks safetensors; "PK" and everything else is torch's. */
static int sniff_safetensors(const char *path, bool *is_st, char **err)
{
    unsigned char head[9] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return report_failure(err, "%s: %s", path, strerror(errno));
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    *is_st = got == (ssize_t)sizeof head && !(head[0] == 'P' && head[1] == 'K') && head[8] == '{';
    return 0;
}

int weights_read(const char *path, const char *state_dict_key_name, weights_file **out, char **err)
{
    *out = NULL;
    bool is_st = false;
    if (sniff_safetensors(path, &is_st, err) != 0)
        return -1;
    weights_file *f = xcalloc(1, sizeof *f);
    int rc = is_st ? read_safetensors(f, path, state_dict_key_name, err)
                   : read_torch(f, path, state_dict_key_name, err);
    if (rc != 0) {
        weights_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

size_t weights_count(const weights_file *f) { return f->n; }
const weights_tensor *weights_at(const weights_file *f, size_t i) { return &f->t[i]; }

void weights_close(weights_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free((char *)f->t[i].name);
    free(f->t);
    torchfile_close(f->tf);
    st_close(f->sf);
    free(f);
}

/* ---- loading: the file's keys after the prefix rules ----------------------------------------- */

typedef struct {
    char *name;
    const weights_tensor *t;
    bool claimed; /* a model entry has this name (loaded or skipped) */
} file_key;

static int cmp_key(const void *a, const void *b)
{
    return strcmp(((const file_key *)a)->name, ((const file_key *)b)->name);
}

static file_key *find_key(file_key *keys, size_t n, const char *name)
{
    file_key probe = {.name = (char *)name};
    return bsearch(&probe, keys, n, sizeof *keys, cmp_key);
}

static bool has(const char *s) { return s && *s; }

/* True when every "trunk." name continues with "base_model." (a feature extractor's trunk,
 * VISSL's is_feature_extractor_state_dict). */
static bool trunk_is_feature_extractor(const weights_file *f)
{
    bool any = false;
    for (size_t i = 0; i < f->n; i++) {
        if (!starts_with(f->t[i].name, "trunk."))
            continue;
        if (!starts_with(f->t[i].name + strlen("trunk."), "base_model."))
            return false;
        any = true;
    }
    return any;
}

/* A VISSL checkpoint's trunk for this model (VISSL's get_checkpoint_model_state_dict): a
 * feature extractor reads a pretraining trunk under "trunk.base_model.", a trained model
 * reads a feature extractor's trunk without "base_model.". NULL: the name stays. */
static char *classy_trunk_name(const char *name, const weights_init_options *o, bool fe_file)
{
    if (!starts_with(name, "trunk."))
        return NULL;
    const char *rest = name + strlen("trunk.");
    if (o->feature_extractor && !fe_file)
        return xasprintf("trunk.base_model.%s", rest);
    if (!o->feature_extractor && starts_with(rest, "base_model."))
        return xasprintf("trunk.%s", rest + strlen("base_model."));
    return NULL;
}

/* The classy_state_dict trunk mapping, then REMOVE_PREFIX and APPEND_PREFIX, as VISSL's
 * replace_prefix / append_prefix. */
static file_key *renamed_keys(const weights_file *f, const weights_init_options *o)
{
    file_key *keys = xcalloc(f->n ? f->n : 1, sizeof *keys);
    bool classy = o->state_dict_key_name && !strcmp(o->state_dict_key_name, "classy_state_dict");
    bool fe_file = classy && trunk_is_feature_extractor(f);
    for (size_t i = 0; i < f->n; i++) {
        char *mapped = classy ? classy_trunk_name(f->t[i].name, o, fe_file) : NULL;
        const char *name = mapped ? mapped : f->t[i].name;
        if (has(o->remove_prefix) && starts_with(name, o->remove_prefix))
            name += strlen(o->remove_prefix);
        keys[i].name = xasprintf("%s%s", has(o->append_prefix) ? o->append_prefix : "", name);
        keys[i].t = &f->t[i];
        free(mapped);
    }
    return keys;
}

static void free_keys(file_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i].name);
    free(keys);
}

/* Whether the model has an entry of that name. */
static bool model_has(const eng_entry *entries, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(entries[i].name, name))
            return true;
    return false;
}

/* VISSL's check_model_compatibilty, with the offending key named. A trunk tensor outside
 * _feature_blocks that the model has (DeepCluster's `trunk.sobel.*`) is compatible too: VISSL's
 * own DeepCluster checkpoints hold it, and VISSL loads them (it checks only other files). */
static int check_compatible(const file_key *keys, size_t n, const weights_init_options *o, const eng_entry *entries,
                            int nentries, char **err)
{
    const char *trunk = o->feature_extractor ? TRUNK_FE_PREFIX : TRUNK_PREFIX;
    for (size_t i = 0; i < n; i++)
        if (!starts_with(keys[i].name, trunk) && !starts_with(keys[i].name, HEADS_PREFIX) &&
            !model_has(entries, nentries, keys[i].name))
            return report_failure(err,
                                  "%s: not compatible with VISSL: key '%s' starts with neither '%s' nor '%s'. Set "
                                  "MODEL.WEIGHTS_INIT.APPEND_PREFIX and MODEL.WEIGHTS_INIT.REMOVE_PREFIX to make "
                                  "it compatible (a torchvision state dict needs APPEND_PREFIX '%s' and "
                                  "STATE_DICT_KEY_NAME '')",
                                  o->params_file, keys[i].name, trunk, HEADS_PREFIX, trunk);
    return 0;
}

/* ---- loading: problem lists ------------------------------------------------------------------- */

typedef struct {
    strbuf names;
    int n;
} name_list;

static void nl_add(name_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void nl_add(name_list *l, const char *fmt, ...)
{
    if (l->n++ >= LIST_SHOWN)
        return;
    if (l->names.len)
        sb_puts(&l->names, ", ");
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&l->names, fmt, ap);
    va_end(ap);
}

/* "what (N): a, b, … and M more" into sb when the list is not empty. */
static void nl_describe(strbuf *sb, const name_list *l, const char *what)
{
    if (!l->n)
        return;
    sb_printf(sb, "%s%s (%d): %s", sb->len ? "; " : "", what, l->n, sb_str(&l->names));
    if (l->n > LIST_SHOWN)
        sb_printf(sb, " and %d more", l->n - LIST_SHOWN);
}

static void shape_text(char *out, size_t size, int ndim, const size_t *dims)
{
    size_t at = (size_t)snprintf(out, size, "[");
    for (int k = 0; k < ndim && at < size; k++)
        at += (size_t)snprintf(out + at, size - at, "%s%zu", k ? ", " : "", dims[k]);
    if (at < size)
        snprintf(out + at, size - at, "]");
}

static bool shape_matches(const eng_shape *s, const weights_tensor *t)
{
    if (s->ndim != t->ndim)
        return false;
    for (int k = 0; k < s->ndim; k++)
        if ((size_t)s->dim[k] != t->shape[k])
            return false;
    return true;
}

static bool skipped_by_name(const char *name, const weights_init_options *o)
{
    for (int i = 0; i < o->n_skip_layers; i++)
        if (has(o->skip_layers[i]) && strstr(name, o->skip_layers[i]))
            return true;
    return false;
}

typedef struct {
    name_list missing_trunk, missing_heads, missing_fixed, unexpected_trunk, unexpected_heads, classifier, bad_shape,
        bad_dtype;
    int loaded, skipped_layers, skipped_heads;
} load_report;


static void free_report(load_report *r)
{
    name_list *lists[] = {&r->missing_trunk, &r->missing_heads, &r->missing_fixed, &r->unexpected_trunk,
                          &r->unexpected_heads, &r->classifier, &r->bad_shape, &r->bad_dtype};
    for (size_t i = 0; i < ARRAY_LEN(lists); i++)
        sb_free(&lists[i]->names);
}

/* Match every model entry to a key; match[i] is the key to load into entry i, or NULL. */
static void match_entries(const eng_entry *entries, int n, file_key *keys, size_t nkeys,
                          const weights_init_options *o, const file_key **match, load_report *r)
{
    for (int i = 0; i < n; i++) {
        const char *name = entries[i].name;
        bool head = starts_with(name, HEADS_PREFIX);
        file_key *k = find_key(keys, nkeys, name);
        match[i] = NULL;
        if (k)
            k->claimed = true;
        if (skipped_by_name(name, o)) {
            r->skipped_layers++;
        } else if (head && !o->load_heads) {
            r->skipped_heads++;
        } else if (!k) {
            /* a fixed tensor (DeepCluster's Sobel filters, which VISSL's converter leaves out of
             * converted models) keeps the architecture's values, as VISSL keeps them */
            nl_add(head ? &r->missing_heads : entries[i].fixed ? &r->missing_fixed : &r->missing_trunk, "%s", name);
        } else if (!weights_dtype_is_float(k->t->dtype)) {
            nl_add(&r->bad_dtype, "%s is %s", k->name, st_dtype_name(k->t->dtype));
        } else if (!shape_matches(&entries[i].value.shape, k->t)) {
            char mine[96], theirs[160];
            size_t dims[NN_MAX_DIMS];
            for (int d = 0; d < entries[i].value.shape.ndim; d++)
                dims[d] = (size_t)entries[i].value.shape.dim[d];
            shape_text(mine, sizeof mine, entries[i].value.shape.ndim, dims);
            shape_text(theirs, sizeof theirs, k->t->ndim, k->t->shape);
            nl_add(&r->bad_shape, "%s is %s in the file, %s in the model", k->name, theirs, mine);
        } else {
            match[i] = k;
        }
    }
}

/* Keys no model entry claimed: errors for the trunk, notes for heads and torchvision's fc. */
static void sort_unclaimed(const file_key *keys, size_t nkeys, const weights_init_options *o, load_report *r)
{
    const char *trunk = o->feature_extractor ? TRUNK_FE_PREFIX : TRUNK_PREFIX;
    for (size_t i = 0; i < nkeys; i++) {
        const char *name = keys[i].name;
        if (keys[i].claimed || skipped_by_name(name, o) || eng_name_ends_with(name, "num_batches_tracked"))
            continue;
        if (starts_with(name, HEADS_PREFIX)) {
            if (o->load_heads)
                nl_add(&r->unexpected_heads, "%s", name);
        } else if (starts_with(name, trunk) && starts_with(name + strlen(trunk), "fc.")) {
            nl_add(&r->classifier, "%s", name);
        } else {
            nl_add(&r->unexpected_trunk, "%s", name);
        }
    }
}

static int report_problems(const load_report *r, const char *path, char **err)
{
    strbuf sb = {0};
    nl_describe(&sb, &r->missing_trunk, "trunk tensors of the model missing from the file");
    nl_describe(&sb, &r->unexpected_trunk, "trunk keys in the file that the model does not have");
    nl_describe(&sb, &r->bad_shape, "shape mismatches");
    nl_describe(&sb, &r->bad_dtype, "tensors that are not floating point");
    if (!sb.len)
        return 0;
    int rc = report_failure(err, "%s: cannot load these weights: %s", path, sb_str(&sb));
    sb_free(&sb);
    return rc;
}

static void log_notes(const load_report *r, const char *path)
{
    strbuf sb = {0};
    nl_describe(&sb, &r->missing_heads, "head tensors not in the file keep their initial values");
    nl_describe(&sb, &r->missing_fixed, "fixed trunk tensors not in the file keep the architecture's values");
    nl_describe(&sb, &r->unexpected_heads, "head keys in the file that the model does not have");
    if (sb.len)
        log_warn("weights: %s: %s", path, sb_str(&sb));
    sb_free(&sb);
    sb = (strbuf){0};
    nl_describe(&sb, &r->classifier, "ignored torchvision's classifier (VISSL configures heads separately)");
    if (sb.len)
        log_info("weights: %s: %s", path, sb_str(&sb));
    sb_free(&sb);
}

static void upload_matched(eng_backend *be, const eng_entry *entries, int n, const file_key *const *match,
                           load_report *r)
{
    size_t most = 0;
    for (int i = 0; i < n; i++)
        if (match[i] && match[i]->t->numel > most)
            most = match[i]->t->numel;
    float *host = xmalloc_large((most ? most : 1) * sizeof *host);
    for (int i = 0; i < n; i++) {
        if (!match[i])
            continue;
        weights_to_f32(match[i]->t, host);
        eng_upload(be, &entries[i].value, host);
        r->loaded++;
    }
    free(host);
}

/* Sort the keys for lookup; two keys with one name (after the prefix rules) are an error. */
static int sort_keys(file_key *keys, size_t n, const char *path, char **err)
{
    qsort(keys, n, sizeof *keys, cmp_key);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(keys[i - 1].name, keys[i].name))
            return report_failure(err, "%s: two tensors are named '%s' after REMOVE_PREFIX/APPEND_PREFIX", path,
                                  keys[i].name);
    return 0;
}

int weights_load(eng_backend *be, const eng_entry *entries, int n, const weights_init_options *o, char **err)
{
    if (!has(o->params_file))
        return report_failure(err, "MODEL.WEIGHTS_INIT.PARAMS_FILE is empty: no weights to load");
    weights_file *f;
    if (weights_read(o->params_file, o->state_dict_key_name ? o->state_dict_key_name : "", &f, err) != 0)
        return -1;
    if (!f->n) {
        weights_close(f);
        return report_failure(err, "%s: the state dict holds no tensors", o->params_file);
    }
    file_key *keys = renamed_keys(f, o);
    int rc = check_compatible(keys, f->n, o, entries, n, err);
    rc = rc ? rc : sort_keys(keys, f->n, o->params_file, err);
    load_report r = {0};
    const file_key **match = xcalloc(n > 0 ? (size_t)n : 1, sizeof *match);
    if (rc == 0) {
        match_entries(entries, n, keys, f->n, o, match, &r);
        sort_unclaimed(keys, f->n, o, &r);
        rc = report_problems(&r, o->params_file, err);
    }
    if (rc == 0) {
        log_notes(&r, o->params_file);
        upload_matched(be, entries, n, match, &r);
        log_info("weights: %s: loaded %d of the model's %d tensors (%d skipped by SKIP_LAYERS, %d head tensors "
                 "not loaded, %d head tensors missing from the file)",
                 o->params_file, r.loaded, n, r.skipped_layers, r.skipped_heads, r.missing_heads.n);
    }
    free(match);
    free_report(&r);
    free_keys(keys, f->n);
    weights_close(f);
    return rc;
}

/* ---- saving ------------------------------------------------------------------------------------- */

int weights_save_safetensors(eng_backend *be, const eng_entry *entries, int n, const char *path,
                             const st_meta *meta, size_t n_meta, char **err)
{
    st_tensor *t = xcalloc(n > 0 ? (size_t)n : 1, sizeof *t);
    size_t *shapes = xcalloc(n > 0 ? (size_t)n * NN_MAX_DIMS : 1, sizeof *shapes);
    float **host = xcalloc(n > 0 ? (size_t)n : 1, sizeof *host);
    for (int i = 0; i < n; i++) {
        const eng_shape *s = &entries[i].value.shape;
        int64_t numel = eng_numel(s);
        host[i] = xmalloc_large((size_t)(numel > 0 ? numel : 1) * sizeof(float));
        eng_download(be, &entries[i].value, host[i]);
        for (int d = 0; d < s->ndim; d++)
            shapes[(size_t)i * NN_MAX_DIMS + (size_t)d] = (size_t)s->dim[d];
        t[i] = (st_tensor){.name = entries[i].name, .dtype = ST_F32, .ndim = s->ndim,
                           .shape = &shapes[(size_t)i * NN_MAX_DIMS], .data = host[i]};
    }
    int rc = st_write(path, t, (size_t)n, meta, n_meta, err);
    for (int i = 0; i < n; i++)
        free(host[i]);
    free(host);
    free(shapes);
    free(t);
    return rc;
}
