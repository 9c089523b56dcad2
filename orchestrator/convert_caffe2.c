/*
 * convert_caffe2.c — Caffe2 pickles into VISSL's names, as VISSL 0.1.5's
 * extra_scripts/convert_caffe2_to_torchvision_resnet.py (the ICCV'19 benchmark suite's ResNet-50
 * models) and convert_caffe2_to_vissl_alexnet.py (its AlexNets: Jigsaw, Colorization,
 * supervised) convert them.
 *
 * The pickle is read by lib/torchfile (a dict of numpy arrays, or one under "blobs"; numbers
 * such as lr and model_iter are not tensors and drop out, as the scripts drop them). Then, as the
 * scripts: --jigsaw keeps the first siamese tower (names with "s0", "_s<digit>_" cut to "_"
 * for the ResNet, "_s0_" for the AlexNet) and drops names holding s1…s8; --bgr2rgb reverses
 * conv1_w's input channels; the blob names, sorted, go through the script's chain of
 * str.replace calls; names the script skips (momentum, the classifier, lr, …) are left out.
 * The ResNet script gives torchvision's names, which become VISSL's trunk names here; the AlexNet
 * script gives VISSL's "_feature_blocks.N.M.…" directly.
 */
#include "convert.h"

#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* _rename_basic_resnet_weights, then _rename_weights_for_resnet's pred → fc1000 (a skipped name). */
static const char *const RESNET_RENAMES[][2] = {
    {"_", "."},
    {".w", ".weight"},
    {".bn", "_bn"},
    {".b", ".bias"},
    {"_bn.s", "_bn.scale"},
    {".biasranch", ".branch"},
    {"res.conv1_", "conv1_"},
    {"_bn.scale", "_bn.weight"},
    {"_bn.rm", "_bn.running_mean"},
    {"_bn.riv", "_bn.running_var"},
    {"conv1_bn.", "bn1."},
    {"res2.", "layer1."},
    {"res3.", "layer2."},
    {"res4.", "layer3."},
    {"res5.", "layer4."},
    {".branch2a.", ".conv1."},
    {".branch2a_bn.", ".bn1."},
    {".branch2b.", ".conv2."},
    {".branch2b_bn.", ".bn2."},
    {".branch2c.", ".conv3."},
    {".branch2c_bn.", ".bn3."},
    {".branch1.", ".downsample.0."},
    {".branch1_bn.", ".downsample.1."},
};

/* _rename_basic_caffe2_alexnet_weights. */
static const char *const ALEXNET_RENAMES[][2] = {
    {"norm", "_bn"},  {"_bn_b", ".1.bias"}, {"_bn_s", ".1.weight"}, {"_bn_rm", ".1.running_mean"},
    {"_bn_riv", ".1.running_var"}, {"_b", ".0.bias"}, {"_w", ".0.weight"}, {"conv1.", "0."},
    {"conv2.", "2."}, {"conv3.", "4."}, {"conv4.", "5."}, {"conv5.", "6."},
};

static const char *const RESNET_SKIP[] = {"_momentum", "pred"};
static const char *const ALEXNET_SKIP[] = {"_momentum", "sobel", "classifier", "top_layer", "pred", "fc", "data"};
static const char *const TOWERS[] = {"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"};

static bool holds_any(const char *s, const char *const *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strstr(s, parts[i]))
            return true;
    return false;
}

/* re.sub("_s[0-9]_", "_", name). */
static char *cut_tower(const char *name)
{
    char *out = xstrdup(name), *w = out;
    for (const char *p = name; *p;) {
        if (p[0] == '_' && p[1] == 's' && p[2] >= '0' && p[2] <= '9' && p[3] == '_') {
            *w++ = '_';
            p += 4;
        } else
            *w++ = *p++;
    }
    *w = 0;
    return out;
}

/* remove_jigsaw_names for one blob: its new name, or NULL when it is dropped. */
static char *jigsaw_name(const char *name, caffe2_arch arch)
{
    if (strstr(name, "s0"))
        return arch == CAFFE2_RESNET ? cut_tower(name) : str_replace_all(xstrdup(name), "_s0_", "_");
    return holds_any(name, TOWERS, ARRAY_LEN(TOWERS)) ? NULL : xstrdup(name);
}

/* The script's new name for a blob, or NULL when it skips it. */
static char *script_name(const char *c2, caffe2_arch arch)
{
    bool resnet = arch == CAFFE2_RESNET;
    if (!strcmp(c2, "lr") || !strcmp(c2, "model_iter") ||
        (resnet ? holds_any(c2, RESNET_SKIP, ARRAY_LEN(RESNET_SKIP)) : holds_any(c2, ALEXNET_SKIP, ARRAY_LEN(ALEXNET_SKIP))))
        return NULL;
    char *k = xstrdup(c2);
    size_t n = resnet ? ARRAY_LEN(RESNET_RENAMES) : ARRAY_LEN(ALEXNET_RENAMES);
    for (size_t i = 0; i < n; i++)
        k = str_replace_all(k, resnet ? RESNET_RENAMES[i][0] : ALEXNET_RENAMES[i][0],
                            resnet ? RESNET_RENAMES[i][1] : ALEXNET_RENAMES[i][1]);
    char *vissl = xasprintf("trunk._feature_blocks.%s", k);
    free(k);
    return vissl;
}

/* conv1_w with its input channels reversed (w[:, ::-1]). */
static const weights_tensor *bgr2rgb(const weights_tensor *t, caffe2_copies *c)
{
    size_t in = t->shape[1], plane = t->numel / (t->shape[0] * in), esize = st_dtype_size(t->dtype);
    c->t = xmalloc(sizeof *c->t);
    *c->t = *t;
    c->data = xmalloc(t->numel * esize + 1);
    for (size_t o = 0; o < t->shape[0]; o++)
        for (size_t i = 0; i < in; i++)
            memcpy((char *)c->data + ((o * in + i) * plane) * esize,
                   (const char *)t->data + ((o * in + (in - 1 - i)) * plane) * esize, plane * esize);
    c->t->data = c->data;
    log_info("caffe2: conv1_w's input channels reversed (BGR to RGB)");
    return c->t;
}

typedef struct {
    char *c2; /* the blob's name, after --jigsaw */
    const weights_tensor *t;
} blob;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const blob *)a)->c2, ((const blob *)b)->c2);
}

/* The blobs by their Caffe2 names ("blobs." cut), --jigsaw applied, sorted. */
static size_t read_blobs(const weights_file *f, caffe2_arch arch, bool jigsaw, blob *b)
{
    size_t n = 0;
    for (size_t i = 0; i < weights_count(f); i++) {
        const weights_tensor *t = weights_at(f, i);
        const char *name = strncmp(t->name, "blobs.", 6) ? t->name : t->name + 6;
        char *kept = jigsaw ? jigsaw_name(name, arch) : xstrdup(name);
        if (kept)
            b[n++] = (blob){kept, t};
    }
    if (jigsaw)
        log_info("caffe2: --jigsaw kept %zu of %zu blobs (the first tower's and the shared ones)", n,
                 weights_count(f));
    qsort(b, n, sizeof *b, by_name);
    return n;
}

static int apply_bgr2rgb(blob *b, size_t n, caffe2_copies *c)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(b[i].c2, "conv1_w")) {
            if (b[i].t->ndim != 4 || b[i].t->shape[1] != 3)
                break;
            b[i].t = bgr2rgb(b[i].t, c);
            return 0;
        }
    log_error("caffe2: --bgr2rgb needs a conv1_w blob of 3 input channels (N × 3 × H × W)");
    return -1;
}

/* Two blobs the renames send to one name: the scripts would keep the last silently. */
static int check_unique(const convert_input *in, size_t n, const blob *b)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; in[i].name && j < i; j++)
            if (in[j].name && !strcmp(in[i].name, in[j].name)) {
                log_error("caffe2: blobs '%s' and '%s' both become '%s'", b[j].c2, b[i].c2, in[i].name);
                return -1;
            }
    return 0;
}

int caffe2_inputs(const weights_file *f, caffe2_arch arch, const caffe2_options *o, convert_input *in, size_t *n,
                  caffe2_copies *copies)
{
    blob *b = xcalloc(weights_count(f) + 1, sizeof *b);
    size_t nb = read_blobs(f, arch, o->jigsaw, b), kept = 0;
    int rc = o->bgr2rgb ? apply_bgr2rgb(b, nb, copies) : 0;
    for (size_t i = 0; i < nb; i++) {
        in[i] = (convert_input){rc == 0 ? script_name(b[i].c2, arch) : NULL, b[i].t};
        kept += in[i].name != NULL;
    }
    if (rc == 0)
        rc = check_unique(in, nb, b);
    if (rc == 0)
        log_info("caffe2: %zu blobs renamed as VISSL's %s script renames them, %zu it skips left out", kept,
                 arch == CAFFE2_RESNET ? "convert_caffe2_to_torchvision_resnet.py" : "convert_caffe2_to_vissl_alexnet.py",
                 nb - kept);
    for (size_t i = 0; i < nb; i++)
        free(b[i].c2);
    free(b);
    *n = nb;
    return rc;
}

void caffe2_copies_free(caffe2_copies *c)
{
    free(c->t);
    free(c->data);
    c->t = NULL;
    c->data = NULL;
}
