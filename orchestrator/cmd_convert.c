/*
 * cmd_convert.c — `selfsup convert IN OUT [--to vissl|torchvision] [--format safetensors|torch]`:
 * move model weights between VISSL's and torchvision's layouts and between file formats.
 *
 * IN is anything MODEL.WEIGHTS_INIT reads (weights_read: a VISSL checkpoint gives its trunk
 * and heads under their full names, a torchvision state dict or a safetensors file its
 * tensors as they are). Names are then mapped:
 *   --to vissl        torchvision names get "trunk._feature_blocks."; torchvision's classifier
 *                     (fc.*) is dropped, since VISSL configures heads separately; names that
 *                     already start with "trunk." or "heads." are kept. A RegNet's names
 *                     (torchvision's regnet_* or ClassyVision's: stem.*, trunk_output.*) become
 *                     VISSL's regnet trunk's (regnet_to_vissl).
 *   --to torchvision  "trunk._feature_blocks." and "trunk.base_model._feature_blocks." are
 *                     stripped; heads are dropped; other names are kept as torchvision's, but
 *                     a RegNet's, which become torchvision's regnet_* names.
 *   --to detectron2  VISSL's extra_scripts/convert_vissl_to_detectron2.py: the trunk only (a
 *                    torchvision file's names are first made VISSL's), its tensors in the sorted
 *                    order of their VISSL names, those whose name holds num_batches_tracked,
 *                    fc1 or fc2 skipped, renamed as the script renames them (stem.conv1,
 *                    res2…res5, shortcut, conv*.norm), in torch.save's format as
 *                    {"model": OrderedDict, "matching_heuristics": True}, which Detectron2's
 *                    checkpointer loads.
 *   --to classy_vision  VISSL's extra_scripts/convert_vissl_to_classy_vision.py: a ResNet-50
 *                    or -101 trunk, its names with "fc" or "clf" skipped, renamed in file order
 *                    (initial_block._module.0/1, blocks.S.blockS-J, convolutional_block.0/1/3/4/6,
 *                    bn), as {"classy_state_dict": {"base_model": {"model": {"trunk": …}}}} in
 *                    torch.save's format; --include-heads (and the script's head flags) adds
 *                    the head under "heads": {"block3-2": {"default_head": …}}.
 * --from caffe2-resnet|caffe2-alexnet [--bgr2rgb] [--jigsaw]: IN is a Caffe2 pickle of numpy
 * blobs, renamed as VISSL's Caffe2 converters rename them (convert_caffe2.c); then any --to.
 * A ClassyVision ResNet checkpoint (those names under classy_state_dict's trunk) is read as
 * VISSL's convert_classy_vision_to_vissl_resnet.py reads it: its names become VISSL's, and
 * fc, clf and num_batches_tracked tensors are dropped; then any --to applies.
 * Tensors keep their dtype and bytes exactly. OUT's format comes from --format or its
 * extension (.safetensors; .torch, .pth, .pt). A torch file in VISSL's layout is a VISSL
 * checkpoint ({"classy_state_dict": {"base_model": {"model": {"trunk": …, "heads": …}}}}),
 * which VISSL loads with its default WEIGHTS_INIT; in torchvision's layout it is a flat state
 * dict, which torchvision's load_state_dict takes (strict=False when fc was dropped).
 *
 * Exit codes: 0 written, 1 IN unreadable or OUT unwritable, 2 usage errors.
 */
#include "cmd.h"
#include "convert.h"

#include "log.h"
#include "torchsave.h"
#include "util.h"
#include "weights.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VISSL_TRUNK "trunk._feature_blocks."
#define VISSL_FE_TRUNK "trunk.base_model._feature_blocks."

typedef enum { TO_VISSL, TO_TORCHVISION, TO_DETECTRON2, TO_CLASSY } convert_layout;

/* convert_vissl_to_classy_vision.py's head options: --include_heads, --num_fc_layers,
 * --use_bn_head, --use_bias_head_fc, --output_head_prefix. */
typedef struct {
    bool include, bn, bias;
    long fc_layers;
    const char *prefix;
} classy_heads;

/* A converted head tensor's name carries this mark, so that write_torch puts it under
 * heads.block3-2.default_head. */
#define CLASSY_HEAD_MARK "heads/"
typedef enum { FORMAT_UNSET, FORMAT_SAFETENSORS, FORMAT_TORCH } convert_format;

typedef struct {
    const char *in, *out;
    convert_layout to;
    convert_format format;
    caffe2_arch from;   /* CAFFE2_NONE: IN is read as it is */
    caffe2_options caffe2;
    classy_heads heads; /* --to classy_vision --include-heads */
} convert_args;

/* One tensor of OUT: its new name and IN's tensor. */
typedef struct {
    char *name;
    const weights_tensor *t;
} out_tensor;

static void convert_usage(FILE *out)
{
    fputs("usage: selfsup convert IN OUT [--to vissl|torchvision|detectron2|classy_vision] [--format safetensors|torch]\n"
          "                       [--from caffe2-resnet|caffe2-alexnet [--bgr2rgb] [--jigsaw]]\n"
          "\n"
          "Convert model weights between layouts and formats. IN: a VISSL checkpoint, a torchvision\n"
          "state dict (.torch/.pth, zip or legacy format) or a safetensors file (recognised by content).\n"
          "\n"
          "options:\n"
          "  --to vissl        VISSL names: trunk._feature_blocks.*, heads.* (default); torchvision's\n"
          "                    fc.* is dropped (VISSL's heads are configured separately)\n"
          "  --to torchvision  torchvision names: the trunk prefix stripped, heads dropped\n"
          "  --to classy_vision  ClassyVision's ResNet-50/101 names for the trunk (VISSL's\n"
          "                    convert_vissl_to_classy_vision.py), in a classy_state_dict; with\n"
          "                    --include-heads [--num-fc-layers N] [--use-bn-head] [--use-bias-head-fc]\n"
          "                    [--output-head-prefix P] the head too, as the script's flags say\n"
          "  --from caffe2-resnet, --from caffe2-alexnet\n"
          "                    IN is a Caffe2 pickle (.pkl of numpy blobs), renamed as VISSL's\n"
          "                    convert_caffe2_to_torchvision_resnet.py / convert_caffe2_to_vissl_alexnet.py\n"
          "                    do; with --bgr2rgb (conv1_w's channels reversed) and --jigsaw (the\n"
          "                    first siamese tower)\n"
          "  --to detectron2   Detectron2's names for the trunk (VISSL's convert_vissl_to_detectron2.py):\n"
          "                    {\"model\": ..., \"matching_heuristics\": True} in torch.save's format\n"
          "  --format F        safetensors or torch (torch.save's zip format; VISSL's checkpoint\n"
          "                    layout with --to vissl); default from OUT's extension: .safetensors,\n"
          "                    .torch, .pth, .pt\n"
          "  --help            show this help\n"
          "\n"
          "exit status: 0 written, 1 IN unreadable or OUT unwritable, 2 usage error\n", out);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

static convert_format format_from_name(const char *path)
{
    if (ends_with(path, ".safetensors"))
        return FORMAT_SAFETENSORS;
    if (ends_with(path, ".torch") || ends_with(path, ".pth") || ends_with(path, ".pt"))
        return FORMAT_TORCH;
    return FORMAT_UNSET;
}

static const char *const LAYOUT_NAMES[] = {"vissl", "torchvision", "detectron2", "classy_vision"};

static bool layout_named(const char *v, convert_layout *to)
{
    for (size_t i = 0; i < ARRAY_LEN(LAYOUT_NAMES); i++)
        if (!strcmp(v, LAYOUT_NAMES[i]))
            return *to = (convert_layout)i, true;
    return false;
}

/* 0 to go on, -1 for --help (exit 0), or EXIT_USAGE. */
static int parse_args(int argc, char **argv, convert_args *a)
{
    *a = (convert_args){.to = TO_VISSL, .heads = {.fc_layers = 1, .prefix = "embedding"}};
    for (int k = 1; k < argc; k++) {
        const char *arg = argv[k];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            convert_usage(stdout);
            return -1;
        } else if (!strcmp(arg, "--include-heads") || !strcmp(arg, "--use-bn-head") ||
                   !strcmp(arg, "--use-bias-head-fc")) {
            *(!strcmp(arg, "--include-heads") ? &a->heads.include
              : !strcmp(arg, "--use-bn-head") ? &a->heads.bn
                                              : &a->heads.bias) = true;
        } else if (!strcmp(arg, "--num-fc-layers") || !strcmp(arg, "--output-head-prefix")) {
            const char *v = k + 1 < argc ? argv[++k] : NULL;
            char *end = NULL;
            if (v && !strcmp(arg, "--output-head-prefix"))
                a->heads.prefix = v;
            else if (!v || (a->heads.fc_layers = strtol(v, &end, 10)) < 1 || *end || a->heads.fc_layers > 64)
                return log_usage_error(convert_usage, "%s needs %s", arg,
                                       !strcmp(arg, "--num-fc-layers") ? "a count 1..64" : "a name");
        } else if (!strcmp(arg, "--bgr2rgb") || !strcmp(arg, "--jigsaw")) {
            *(!strcmp(arg, "--bgr2rgb") ? &a->caffe2.bgr2rgb : &a->caffe2.jigsaw) = true;
        } else if (!strcmp(arg, "--from")) {
            const char *v = k + 1 < argc ? argv[++k] : "";
            if (strcmp(v, "caffe2-resnet") && strcmp(v, "caffe2-alexnet"))
                return log_usage_error(convert_usage, "--from '%s': expected caffe2-resnet or caffe2-alexnet", v);
            a->from = !strcmp(v, "caffe2-resnet") ? CAFFE2_RESNET : CAFFE2_ALEXNET;
        } else if (!strcmp(arg, "--to") || !strcmp(arg, "--format")) {
            if (k + 1 >= argc)
                return log_usage_error(convert_usage, "%s needs a value", arg);
            const char *v = argv[++k];
            if (!strcmp(arg, "--to") && layout_named(v, &a->to))
                ;
            else if (!strcmp(arg, "--format") && (!strcmp(v, "safetensors") || !strcmp(v, "torch")))
                a->format = !strcmp(v, "torch") ? FORMAT_TORCH : FORMAT_SAFETENSORS;
            else
                return log_usage_error(convert_usage, "%s '%s': expected %s", arg, v,
                                       !strcmp(arg, "--to") ? "vissl, torchvision, detectron2 or classy_vision"
                                                            : "safetensors or torch");
        } else if (arg[0] == '-' && arg[1]) {
            return log_usage_error(convert_usage, "unknown option '%s'", arg);
        } else if (!a->in) {
            a->in = arg;
        } else if (!a->out) {
            a->out = arg;
        } else {
            return log_usage_error(convert_usage, "one IN and one OUT only ('%s' is extra)", arg);
        }
    }
    if (!a->in || !a->out)
        return log_usage_error(convert_usage, "IN and OUT are needed");
    if (a->heads.include && a->to != TO_CLASSY)
        return log_usage_error(convert_usage, "--include-heads goes with --to classy_vision");
    if ((a->caffe2.bgr2rgb || a->caffe2.jigsaw) && !a->from)
        return log_usage_error(convert_usage, "--bgr2rgb and --jigsaw go with --from caffe2-resnet|caffe2-alexnet");
    if (a->to == TO_DETECTRON2 || a->to == TO_CLASSY) { /* torch.save's format whatever OUT is called: as VISSL's scripts */
        if (a->format == FORMAT_SAFETENSORS || (a->format == FORMAT_UNSET && ends_with(a->out, ".safetensors")))
            return log_usage_error(convert_usage, "--to %s writes torch.save's format, which %s loads: no safetensors",
                                   LAYOUT_NAMES[a->to], a->to == TO_CLASSY ? "ClassyVision" : "Detectron2");
        a->format = FORMAT_TORCH;
    }
    if (a->format == FORMAT_UNSET && (a->format = format_from_name(a->out)) == FORMAT_UNSET)
        return log_usage_error(
            convert_usage,
            "cannot tell OUT's format from '%s': name it .safetensors, .torch, .pth or .pt, or "
            "give --format",
            a->out);
    return 0;
}

/* ---- names ------------------------------------------------------------------------------------ */

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* ---- RegNet names: torchvision's and ClassyVision's module paths against VISSL's ------------------- */

/* Inside a block, torchvision's path (the first column) against ClassyVision's, which VISSL keeps:
 * torchvision wraps each conv and its norm in one Conv2dNormActivation and names SE's convs. */
static const char *const REGNET_BLOCK_NAMES[][2] = {
    {"proj.0.", "proj."},          {"proj.1.", "bn."},
    {"f.se.fc1.", "f.se.excitation.0."}, {"f.se.fc2.", "f.se.excitation.2."},
    {"f.c.0.", "f.c."},            {"f.c.1.", "f.final_bn."},
};

/* rest with its leading `from` (column `from_col` of the table) replaced by the other column. */
static char *rename_in_block(const char *rest, int from_col)
{
    for (size_t i = 0; i < ARRAY_LEN(REGNET_BLOCK_NAMES); i++) {
        const char *from = REGNET_BLOCK_NAMES[i][from_col], *to = REGNET_BLOCK_NAMES[i][!from_col];
        if (starts_with(rest, from))
            return xasprintf("%s%s", to, rest + strlen(from));
    }
    return xstrdup(rest);
}

/* "stem.N.x" (torchvision) or "stem.stem.N.x" (ClassyVision) → "conv1.stem.N.x";
 * "trunk_output.blockS.blockS-J.rest" → "res{S+1}.blockS-J.rest'"; NULL when name is neither. */
static char *regnet_to_vissl(const char *name)
{
    if (starts_with(name, "stem."))
        return xasprintf(VISSL_TRUNK "conv1.stem.%s",
                         name + strlen(starts_with(name, "stem.stem.") ? "stem.stem." : "stem."));
    int stage, used = 0;
    if (sscanf(name, "trunk_output.block%d.%n", &stage, &used) != 1 || !used)
        return NULL;
    const char *block = name + used, *dot = strchr(block, '.');
    if (!starts_with(block, "block") || !dot)
        return NULL;
    char *rest = rename_in_block(dot + 1, 0);
    char *out = xasprintf(VISSL_TRUNK "res%d.%.*s.%s", stage + 1, (int)(dot - block), block, rest);
    free(rest);
    return out;
}

/* The reverse, for a name after "_feature_blocks." (NULL when it is not a RegNet's). */
static char *regnet_to_torchvision(const char *name)
{
    if (starts_with(name, "conv1.stem."))
        return xasprintf("stem.%s", name + strlen("conv1.stem."));
    int res, used = 0;
    if (sscanf(name, "res%d.%n", &res, &used) != 1 || !used || !starts_with(name + used, "block"))
        return NULL;
    const char *block = name + used, *dot = strchr(block, '.');
    if (!dot)
        return NULL;
    char *rest = rename_in_block(dot + 1, 1);
    char *out = xasprintf("trunk_output.block%d.%.*s.%s", res - 1, (int)(dot - block), block, rest);
    free(rest);
    return out;
}

/* ---- Detectron2 names ---------------------------------------------------------------------------- */


/* s's tail `from` (re.sub("from$", to)) replaced, in place. */
static char *replace_tail(char *s, const char *from, const char *to)
{
    size_t n = strlen(s), m = strlen(from);
    if (n < m || strcmp(s + n - m, from))
        return s;
    char *out = xasprintf("%.*s%s", (int)(n - m), s, to);
    free(s);
    return out;
}

/* VISSL's convert_to_detectron2_names for one trunk key ("_feature_blocks.…"), step for step. */
static char *detectron2_name(const char *key)
{
    static const char *const REPLACE[][2] = {
        {"_feature_blocks.conv1.", "stem.conv1."}, {"_feature_blocks.bn1.", "stem.conv1.norm."},
        {"_feature_blocks.layer1.", "res2."},      {"_feature_blocks.layer2.", "res3."},
        {"_feature_blocks.layer3.", "res4."},      {"_feature_blocks.layer4.", "res5."},
        {".downsample.0.", ".shortcut."},          {".downsample.1.", ".shortcut.norm."},
        {".bn1.", ".conv1.bn."},                   {".bn2.", ".conv2.bn."},
        {".bn3.", ".conv3.bn."},
    };
    static const char *const TAIL[][2] = {{"bn.bias", "norm.bias"},
                                          {"bn.weight", "norm.weight"},
                                          {"bn.running_mean", "norm.running_mean"},
                                          {"bn.running_var", "norm.running_var"}};
    char *k = xstrdup(key);
    for (size_t i = 0; i < ARRAY_LEN(REPLACE); i++)
        k = str_replace_all(k, REPLACE[i][0], REPLACE[i][1]);
    for (size_t i = 0; i < ARRAY_LEN(TAIL); i++)
        k = replace_tail(k, TAIL[i][0], TAIL[i][1]);
    return k;
}

/* The VISSL trunk key ("_feature_blocks.…") of a tensor, or NULL when it is not the trunk's. */
static const char *vissl_trunk_key(const char *name)
{
    if (starts_with(name, VISSL_TRUNK))
        return name + strlen("trunk.");
    if (starts_with(name, VISSL_FE_TRUNK))
        return name + strlen("trunk.base_model.");
    return NULL;
}

/* The tensor's name in the target layout, or NULL to drop it (with *why), or NULL with *why
 * NULL when it cannot be mapped. */
static char *map_name(const char *name, convert_layout to, const char **why)
{
    *why = NULL;
    if (to == TO_VISSL) {
        if (starts_with(name, "trunk.") || starts_with(name, "heads."))
            return xstrdup(name);
        if (starts_with(name, "fc.")) {
            *why = "torchvision's classifier; VISSL's heads are configured separately";
            return NULL;
        }
        char *regnet = regnet_to_vissl(name);
        return regnet ? regnet : xasprintf(VISSL_TRUNK "%s", name);
    }
    const char *trunk = starts_with(name, VISSL_TRUNK) ? name + strlen(VISSL_TRUNK)
                        : starts_with(name, VISSL_FE_TRUNK) ? name + strlen(VISSL_FE_TRUNK) : NULL;
    if (trunk) {
        char *regnet = regnet_to_torchvision(trunk);
        return regnet ? regnet : xstrdup(trunk);
    }
    if (starts_with(name, "heads.")) {
        *why = "VISSL heads have no place in a torchvision state dict";
        return NULL;
    }
    if (starts_with(name, "trunk."))
        return NULL;
    return xstrdup(name);
}

/* Map every tensor; drops are reported on stderr. -1 when a name cannot be mapped. */
static int map_all(const convert_input *in, size_t n_in, convert_layout to, out_tensor *out, size_t *n_out)
{
    size_t n = 0, dropped = 0;
    strbuf names = {0};
    const char *reason = NULL;
    for (size_t i = 0; i < n_in; i++) {
        const weights_tensor *t = in[i].t;
        const char *why = "the source's converter leaves them out";
        char *name = in[i].name ? map_name(in[i].name, to, &why) : NULL;
        if (name) {
            out[n++] = (out_tensor){name, t};
            continue;
        }
        if (!why) {
            log_error("'%s' is a VISSL trunk tensor outside _feature_blocks; torchvision has no name for it",
                      t->name);
            sb_free(&names);
            for (size_t j = 0; j < n; j++)
                free(out[j].name);
            return -1;
        }
        if (dropped++ < 8)
            sb_printf(&names, "%s%s", names.len ? ", " : "", t->name);
        reason = why;
    }
    if (dropped)
        log_warn("dropped %zu tensor%s (%s%s): %s", dropped, dropped == 1 ? "" : "s", sb_str(&names),
                 dropped > 8 ? ", …" : "", reason);
    sb_free(&names);
    *n_out = n;
    return 0;
}

/* Detectron2's tensors: the trunk's, in the sorted order of their VISSL keys, the skipped ones
 * left out (with a count), renamed; -1 when two keys map to one name (VISSL asserts). */
static int cmp_out(const void *a, const void *b) { return strcmp(((const out_tensor *)a)->name, ((const out_tensor *)b)->name); }

static int map_detectron2(const convert_input *in, size_t n_in, out_tensor *out, size_t *n_out)
{
    static const char *const SKIP[] = {"num_batches_tracked", "fc1", "fc2"};
    size_t n = 0, skipped = 0, heads = 0;
    for (size_t i = 0; i < n_in; i++) {
        const weights_tensor *t = in[i].t;
        const char *why;
        char *vissl = in[i].name ? map_name(in[i].name, TO_VISSL, &why) : NULL;
        const char *key = vissl ? vissl_trunk_key(vissl) : NULL;
        if (key)
            out[n++] = (out_tensor){xstrdup(key), t};
        else
            heads++;
        free(vissl);
    }
    qsort(out, n, sizeof *out, cmp_out);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        bool skip = false;
        for (size_t s = 0; s < ARRAY_LEN(SKIP); s++)
            skip = skip || strstr(out[i].name, SKIP[s]);
        char *d2 = detectron2_name(out[i].name);
        free(out[i].name);
        if (skip) {
            free(d2);
            skipped++;
            continue;
        }
        out[kept++] = (out_tensor){d2, out[i].t};
    }
    if (heads || skipped)
        log_info("detectron2: %zu trunk tensors; left out: %zu skipped as VISSL's script skips them "
                 "(num_batches_tracked, fc1, fc2), %zu not the trunk's", kept, skipped, heads);
    for (size_t i = 0; i < kept; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(out[i].name, out[j].name)) {
                log_error("detectron2: two tensors map to '%s'", out[i].name);
                for (size_t k = 0; k < kept; k++)
                    free(out[k].name);
                return -1;
            }
    *n_out = kept;
    return 0;
}

/* ---- ClassyVision's ResNet names ------------------------------------------------------------- */

/* Inside a block, VISSL's name part (column 0) against ClassyVision's, in the order VISSL's two
 * scripts replace them (convert_vissl_to_classy_vision.py left to right, the other right to left). */
static const char *const CLASSY_BLOCK_NAMES[][2] = {
    {".conv1.weight", ".convolutional_block.0.weight"}, {".conv2.weight", ".convolutional_block.3.weight"},
    {".conv3.weight", ".convolutional_block.6.weight"}, {".bn1.", ".convolutional_block.1."},
    {".bn2.", ".convolutional_block.4."},               {".bn3.", ".bn."},
};
/* The scripts' BLOCK_CONFIG: the ResNets they convert. */
static const int CLASSY_DEPTHS[][5] = {{50, 3, 4, 6, 3}, {101, 3, 4, 23, 3}};

/* Blocks per stage from names holding `fmt` ("_feature_blocks.layer%d.%d." or
 * "blocks.%d.block%*d-%d."; stage numbered from `first`), then the depth they make (0: none of
 * the scripts'). */
static int classy_depth(const convert_input *in, size_t n, const char *fmt, int first, int blocks[4])
{
    memset(blocks, 0, 4 * sizeof *blocks);
    for (size_t i = 0; i < n; i++) {
        const char *at = in[i].name ? strstr(in[i].name, fmt[0] == '_' ? "_feature_blocks.layer" : "blocks.") : NULL;
        int stage, block;
        if (at && sscanf(at, fmt, &stage, &block) == 2 && stage - first >= 0 && stage - first < 4 &&
            block + 1 > blocks[stage - first])
            blocks[stage - first] = block + 1;
    }
    for (size_t d = 0; d < ARRAY_LEN(CLASSY_DEPTHS); d++)
        if (!memcmp(blocks, CLASSY_DEPTHS[d] + 1, 4 * sizeof *blocks))
            return CLASSY_DEPTHS[d][0];
    return 0;
}

/* One name through the scripts' str.replace steps; to_classy picks the direction. */
static char *classy_rename(const char *name, const int blocks[4], bool to_classy)
{
    const char *stem[2][2] = {{"_feature_blocks.conv1.", "initial_block._module.0."},
                              {"_feature_blocks.bn1.", "initial_block._module.1."}};
    char *k = xstrdup(name);
    for (int i = 0; i < 2; i++)
        k = str_replace_all(k, stem[i][!to_classy], stem[i][to_classy]);
    for (int idx = 0; idx < 4; idx++)
        for (int j = 0; j < blocks[idx]; j++) {
            char vissl[64], classy[64];
            snprintf(vissl, sizeof vissl, "_feature_blocks.layer%d.%d.", idx + 1, j);
            snprintf(classy, sizeof classy, "blocks.%d.block%d-%d.", idx, idx, j);
            k = to_classy ? str_replace_all(k, vissl, classy) : str_replace_all(k, classy, vissl);
        }
    int n = (int)ARRAY_LEN(CLASSY_BLOCK_NAMES);
    for (int i = 0; i < n; i++) {
        int r = to_classy ? i : n - 1 - i;
        k = str_replace_all(k, CLASSY_BLOCK_NAMES[r][!to_classy], CLASSY_BLOCK_NAMES[r][to_classy]);
    }
    return k;
}

static bool any_of(const char *name, const char *const *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strstr(name, parts[i]))
            return true;
    return false;
}

/* Every tensor's name as VISSL's: a ClassyVision ResNet checkpoint's (trunk.initial_block.*,
 * trunk.blocks.*) as convert_classy_vision_to_vissl_resnet.py renames them, NULL for those it
 * skips (fc, clf, num_batches_tracked); any other file's as they are. -1 for a ClassyVision
 * trunk the script does not convert. */
static int vissl_inputs(const weights_file *f, convert_input *in)
{
    static const char *const SKIP[] = {"fc", "clf", "num_batches_tracked"};
    size_t n = weights_count(f), classy = 0;
    for (size_t i = 0; i < n; i++) {
        in[i] = (convert_input){xstrdup(weights_at(f, i)->name), weights_at(f, i)};
        classy += starts_with(in[i].name, "trunk.initial_block.") || starts_with(in[i].name, "trunk.blocks.");
    }
    if (!classy)
        return 0;
    int blocks[4];
    if (!classy_depth(in, n, "blocks.%d.block%*d-%d.", 0, blocks)) {
        log_error("a ClassyVision trunk with %d, %d, %d, %d blocks: VISSL's convert_classy_vision_to_vissl_resnet.py "
                  "converts ResNet-50 and ResNet-101 only",
                  blocks[0], blocks[1], blocks[2], blocks[3]);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!starts_with(in[i].name, "trunk."))
            continue;
        char *renamed = any_of(in[i].name, SKIP, ARRAY_LEN(SKIP)) ? NULL : classy_rename(in[i].name + 6, blocks, false);
        free(in[i].name);
        in[i].name = renamed ? xasprintf("trunk.%s", renamed) : NULL;
        free(renamed);
    }
    log_info("read a ClassyVision ResNet trunk; its fc, clf and num_batches_tracked tensors are left out, as VISSL's "
             "script leaves them out");
    return 0;
}

/* convert_vissl_to_classy_vision.py: the trunk's tensors in file order, "fc" and "clf" ones
 * skipped, renamed; -1 for a trunk that is not a ResNet-50 or -101. */
/* The input tensor named "heads.KEY", or NULL (logged: the script's KeyError). */
static const weights_tensor *head_tensor(const convert_input *in, size_t n_in, const char *key)
{
    char *want = xasprintf("heads.%s", key);
    const weights_tensor *t = NULL;
    for (size_t i = 0; i < n_in && !t; i++)
        if (in[i].name && !strcmp(in[i].name, want))
            t = in[i].t;
    if (!t)
        log_error("classy_vision: --include-heads needs '%s', which IN does not hold", want);
    free(want);
    return t;
}

/* One head tensor of convert_heads_to_classy_model: VISSL's heads.KEY as NAME. */
static int add_head(const convert_input *in, size_t n_in, const char *key, const char *name, out_tensor *out,
                    size_t *n)
{
    const weights_tensor *t = head_tensor(in, n_in, key);
    if (!t)
        return -1;
    out[(*n)++] = (out_tensor){xasprintf(CLASSY_HEAD_MARK "%s", name), t};
    return 0;
}

/* convert_heads_to_classy_model: FC layers 0 .. N−2 as mlp.layers.I (fc, and batch_norm with
 * --use-bn-head), the last as PREFIX_fc; one layer alone is PREFIX_fc with its bias whatever
 * --use-bias-head-fc says, as the script writes it. */
static int map_classy_heads(const convert_input *in, size_t n_in, const classy_heads *h, out_tensor *out, size_t *n)
{
    static const char *const BN[] = {"weight", "bias", "running_mean", "running_var"};
    int rc = 0;
    long last = h->fc_layers - 1;
    for (long i = 0; i < last && rc == 0; i++) {
        char key[64], name[96];
        snprintf(key, sizeof key, "%ld.clf.0.weight", i), snprintf(name, sizeof name, "mlp.layers.%ld.fc.weight", i);
        rc = add_head(in, n_in, key, name, out, n);
        snprintf(key, sizeof key, "%ld.clf.0.bias", i), snprintf(name, sizeof name, "mlp.layers.%ld.fc.bias", i);
        if (rc == 0 && h->bias)
            rc = add_head(in, n_in, key, name, out, n);
        for (int b = 0; b < 4 && rc == 0 && h->bn; b++) {
            snprintf(key, sizeof key, "%ld.clf.1.%s", i, BN[b]);
            snprintf(name, sizeof name, "mlp.layers.%ld.batch_norm.%s", i, BN[b]);
            rc = add_head(in, n_in, key, name, out, n);
        }
    }
    char key[64], name[256];
    snprintf(key, sizeof key, "%ld.clf.0.weight", last), snprintf(name, sizeof name, "%s_fc.weight", h->prefix);
    if (rc == 0)
        rc = add_head(in, n_in, key, name, out, n);
    snprintf(key, sizeof key, "%ld.clf.0.bias", last), snprintf(name, sizeof name, "%s_fc.bias", h->prefix);
    if (rc == 0 && (h->bias || last == 0))
        rc = add_head(in, n_in, key, name, out, n);
    return rc;
}

static int map_classy(const convert_input *in, size_t n_in, const classy_heads *h, out_tensor *out, size_t *n_out)
{
    static const char *const SKIP[] = {"fc", "clf"};
    size_t n = 0, left = 0;
    for (size_t i = 0; i < n_in; i++) {
        const char *why;
        char *vissl = in[i].name ? map_name(in[i].name, TO_VISSL, &why) : NULL;
        const char *key = vissl ? vissl_trunk_key(vissl) : NULL;
        if (key && !any_of(key, SKIP, ARRAY_LEN(SKIP)))
            out[n++] = (out_tensor){xstrdup(key), in[i].t};
        else
            left++;
        free(vissl);
    }
    int blocks[4];
    convert_input *keys = xcalloc(n + 1, sizeof *keys);
    for (size_t i = 0; i < n; i++)
        keys[i].name = out[i].name;
    int depth = classy_depth(keys, n, "_feature_blocks.layer%d.%d.", 1, blocks);
    free(keys);
    for (size_t i = 0; i < n && depth; i++) {
        char *c = classy_rename(out[i].name, blocks, true);
        free(out[i].name);
        out[i].name = c;
    }
    if (!depth) {
        log_error("classy_vision: a trunk with %d, %d, %d, %d blocks; VISSL's convert_vissl_to_classy_vision.py "
                  "converts ResNet-50 and ResNet-101 only", blocks[0], blocks[1], blocks[2], blocks[3]);
        for (size_t i = 0; i < n; i++)
            free(out[i].name);
        return -1;
    }
    log_info("classy_vision: a ResNet-%d trunk, %zu tensors; %zu left out (heads, fc, clf)", depth, n, left);
    size_t trunk = n;
    if (h->include && map_classy_heads(in, n_in, h, out, &n) != 0) {
        for (size_t i = 0; i < n; i++)
            free(out[i].name);
        return -1;
    }
    if (h->include)
        log_info("classy_vision: %zu head tensors under heads.block3-2.default_head", n - trunk);
    *n_out = n;
    return 0;
}

/* ---- writing ---------------------------------------------------------------------------------- */

static int write_safetensors(const char *path, const out_tensor *t, size_t n, char **err)
{
    st_tensor *st = xcalloc(n ? n : 1, sizeof *st);
    for (size_t i = 0; i < n; i++)
        st[i] = (st_tensor){.name = t[i].name, .dtype = t[i].t->dtype, .ndim = t[i].t->ndim,
                            .shape = t[i].t->shape, .data = t[i].t->data};
    st_meta meta[] = {{"format", "pt"}};
    int rc = st_write(path, st, n, meta, ARRAY_LEN(meta), err);
    free(st);
    return rc;
}

static void add_tensor(ts_dict *d, const char *key, const weights_tensor *t)
{
    ts_dict_add_tensor(d, key, t->dtype, t->ndim, t->shape, t->data);
}

/* VISSL's checkpoint layout, trunk and heads keyed relative to their module; Detectron2's
 * {"model": …, "matching_heuristics": True}; else flat. */
static int write_torch(const char *path, const out_tensor *t, size_t n, convert_layout to, char **err)
{
    ts_dict *root = ts_dict_new(to == TO_TORCHVISION);
    if (to == TO_CLASSY) {
        ts_dict *model = ts_dict_add_dict(
            ts_dict_add_dict(ts_dict_add_dict(root, "classy_state_dict", false), "base_model", false), "model", false);
        ts_dict *trunk = ts_dict_add_dict(model, "trunk", false), *head = NULL;
        for (size_t i = 0; i < n; i++) {
            bool is_head = starts_with(t[i].name, CLASSY_HEAD_MARK);
            if (is_head && !head)
                head = ts_dict_add_dict(ts_dict_add_dict(ts_dict_add_dict(model, "heads", false), "block3-2", false),
                                        "default_head", false);
            add_tensor(is_head ? head : trunk, t[i].name + (is_head ? strlen(CLASSY_HEAD_MARK) : 0), t[i].t);
        }
    } else if (to == TO_DETECTRON2) {
        ts_dict *model = ts_dict_add_dict(root, "model", true);
        for (size_t i = 0; i < n; i++)
            add_tensor(model, t[i].name, t[i].t);
        ts_dict_add_bool(root, "matching_heuristics", true);
    } else if (to == TO_TORCHVISION) {
        for (size_t i = 0; i < n; i++)
            add_tensor(root, t[i].name, t[i].t);
    } else {
        ts_dict *model = ts_dict_add_dict(ts_dict_add_dict(ts_dict_add_dict(root, "classy_state_dict", false),
                                                           "base_model", false),
                                          "model", false);
        ts_dict *trunk = ts_dict_add_dict(model, "trunk", true), *heads = ts_dict_add_dict(model, "heads", true);
        for (size_t i = 0; i < n; i++) {
            bool head = starts_with(t[i].name, "heads.");
            add_tensor(head ? heads : trunk, t[i].name + strlen(head ? "heads." : "trunk."), t[i].t);
        }
    }
    int rc = ts_save(path, root, err);
    ts_dict_free(root);
    return rc;
}

int cmd_convert(int argc, char **argv)
{
    convert_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    weights_file *f;
    char *err = NULL;
    if (weights_read(a.in, NULL, &f, &err) != 0) {
        log_error("%s", err);
        free(err);
        return EXIT_RUNTIME;
    }
    size_t n_in = weights_count(f), n = 0;
    out_tensor *t = xcalloc(n_in + 1, sizeof *t);
    convert_input *in = xcalloc(n_in + 1, sizeof *in);
    caffe2_copies copies = {0};
    rc = (a.from ? caffe2_inputs(f, a.from, &a.caffe2, in, &n_in, &copies) : vissl_inputs(f, in)) != 0 ? EXIT_RUNTIME
         : a.to == TO_DETECTRON2 ? (map_detectron2(in, n_in, t, &n) ? EXIT_RUNTIME : 0)
         : a.to == TO_CLASSY     ? (map_classy(in, n_in, &a.heads, t, &n) ? EXIT_RUNTIME : 0)
                                 : (map_all(in, n_in, a.to, t, &n) ? EXIT_RUNTIME : 0);
    if (rc == 0) {
        int w = a.format == FORMAT_SAFETENSORS ? write_safetensors(a.out, t, n, &err)
                                               : write_torch(a.out, t, n, a.to, &err);
        if (w != 0) {
            log_error("%s", err);
            free(err);
            rc = EXIT_RUNTIME;
        } else {
            static const char *const SHOWN[] = {"VISSL", "torchvision", "Detectron2", "ClassyVision"};
            log_info("wrote %zu tensors to %s (%s names, %s)", n, a.out, SHOWN[a.to],
                     a.format == FORMAT_SAFETENSORS ? "safetensors" : "torch.save zip");
        }
    }
    for (size_t i = 0; i < n; i++)
        free(t[i].name);
    for (size_t i = 0; i < weights_count(f); i++)
        free(in[i].name);
    free(in);
    caffe2_copies_free(&copies);
    free(t);
    weights_close(f);
    return rc;
}
